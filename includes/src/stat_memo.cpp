#include "stat_memo.hpp"

#include <algorithm>

#include "kiln/base/xxh3.hpp"

namespace kiln::cache::detail {
namespace {

std::uint64_t path_hash(std::string_view path) noexcept { return xxh3_64(path.data(), path.size()); }

}  // namespace

void StatMemo::defer(std::unique_ptr<std::byte[]> bytes, std::vector<std::string_view> paths,
                     std::vector<PathProbe> probes, std::int64_t at_ns) {
  const std::lock_guard lock(m_mutex);
  m_pending.emplace(Pending{std::move(bytes), std::move(paths), std::move(probes), at_ns});
}

std::optional<StatMemo::Seen> StatMemo::find(std::string_view path, std::int64_t now_ns) {
  if (m_ttl.count() <= 0) return std::nullopt;
  const std::lock_guard lock(m_mutex);
  if (m_pending) materialize();
  return find_locked(path, now_ns);
}

void StatMemo::remember(std::string_view path, const Seen& seen) {
  if (m_ttl.count() <= 0) return;
  const std::lock_guard lock(m_mutex);
  if (m_pending) materialize();
  put(path, seen, false);
}

std::optional<StatMemo::Seen> StatMemo::find_locked(std::string_view path, std::int64_t now_ns) const {
  const Item* item = m_table.find(path, path_hash(path));
  if (item == nullptr) return std::nullopt;
  const std::int64_t age = now_ns - item->seen.at_ns;
  if (age < 0 || age >= m_ttl.count()) return std::nullopt;
  return item->seen;
}

void StatMemo::put(std::string_view path, const Seen& seen, bool kept) {
  if (m_table.size() >= kMaxPaths) {
    m_table.clear();
    m_buffers.clear();
    m_owned.clear();
  }
  const std::uint64_t hash = path_hash(path);
  if (Item* item = m_table.find(path, hash)) {
    if (item->seen.at_ns <= seen.at_ns) item->seen = seen;
    return;
  }
  m_table.insert(kept ? path : std::string_view(m_owned.emplace_back(path)), hash, seen);
}

void StatMemo::materialize() {
  Pending pending = std::move(*m_pending);
  m_pending.reset();
  m_table.reserve(std::min(m_table.size() + pending.paths.size(), kMaxPaths));
  // The paths point into the lookup's buffer: the memo keeps that buffer and keys by those bytes, so
  // taking over a manifest's few thousand paths allocates no string. It joins the kept buffers only
  // after the loop: a put() that clears a full memo drops the buffers kept before, never this one.
  for (std::size_t i = 0; i < pending.paths.size() && i < pending.probes.size(); ++i) {
    const PathProbe& probe = pending.probes[i];
    if (probe.stat_state == PathProbe::Stat::present) put(pending.paths[i], Seen{true, probe.stat, pending.at_ns}, true);
    if (probe.stat_state == PathProbe::Stat::absent) put(pending.paths[i], Seen{false, {}, pending.at_ns}, true);
  }
  m_buffers.push_back(std::move(pending.bytes));
}

// ---- the table ----------------------------------------------------------------------------------------------

void StatMemo::Table::clear() noexcept {
  m_items.clear();
  std::fill(m_index.begin(), m_index.end(), 0);
}

void StatMemo::Table::reserve(std::size_t items) {
  m_items.reserve(2 * items);
  if (2 * items > m_index.size()) rebuild(items);
}

StatMemo::Item* StatMemo::Table::find(std::string_view path, std::uint64_t hash) noexcept {
  if (m_index.empty()) return nullptr;
  const std::size_t mask = m_index.size() - 1;
  const auto tag = static_cast<std::uint32_t>(hash >> 32);
  for (std::size_t at = hash & mask;; at = (at + 1) & mask) {
    const std::uint64_t slot = m_index[at];
    if (slot == 0) return nullptr;
    if (static_cast<std::uint32_t>(slot >> 32) != tag) continue;
    Item& item = m_items[static_cast<std::uint32_t>(slot) - 1];
    if (item.hash == hash && item.path == path) return &item;
  }
}

void StatMemo::Table::insert(std::string_view path, std::uint64_t hash, const Seen& seen) {
  if (2 * (m_items.size() + 1) > m_index.size()) rebuild(m_items.size() + 1);
  m_items.push_back(Item{path, hash, seen});
  place(m_items.size() - 1);
}

void StatMemo::Table::rebuild(std::size_t items) {
  std::size_t capacity = 1024;
  while (capacity < 2 * items) capacity *= 2;
  m_index.assign(capacity, 0);
  for (std::size_t i = 0; i < m_items.size(); ++i) place(i);
}

void StatMemo::Table::place(std::size_t item) noexcept {
  const std::uint64_t hash = m_items[item].hash;
  const std::size_t mask = m_index.size() - 1;
  std::size_t at = hash & mask;
  while (m_index[at] != 0) at = (at + 1) & mask;
  m_index[at] = (hash & 0xffffffff00000000ULL) | static_cast<std::uint64_t>(item + 1);
}

}  // namespace kiln::cache::detail
