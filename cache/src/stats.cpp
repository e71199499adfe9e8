#include "kiln/cache/stats.hpp"
#include "posix_util.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <string>
#include <string_view>

namespace kiln::cache {
namespace {

constexpr int kShards = 16;
constexpr std::string_view kShardHeader = "kiln-stats/1\n";

/// Shard text: the header line, then "name value" lines. Unknown names and bad lines are skipped.
Counters parse_shard(std::string_view text) noexcept {
  Counters counters;
  if (!text.starts_with(kShardHeader)) return counters;
  text.remove_prefix(kShardHeader.size());
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    const std::size_t space = line.find(' ');
    if (space == std::string_view::npos) continue;
    const std::string_view name = line.substr(0, space);
    std::uint64_t value = 0;
    const auto [ptr, error] = std::from_chars(line.data() + space + 1, line.data() + line.size(), value);
    if (error != std::errc{} || ptr != line.data() + line.size()) continue;
#define KILN_PARSE_FIELD(field) \
  if (name == #field) counters.field = value;
    KILN_CACHE_COUNTERS(KILN_PARSE_FIELD)
#undef KILN_PARSE_FIELD
  }
  return counters;
}

std::string format_shard(const Counters& counters) {
  std::string text(kShardHeader);
#define KILN_FORMAT_FIELD(field) text += fmt::format("{} {}\n", #field, counters.field);
  KILN_CACHE_COUNTERS(KILN_FORMAT_FIELD)
#undef KILN_FORMAT_FIELD
  return text;
}

}  // namespace

Counters& Counters::operator+=(const Counters& other) noexcept {
#define KILN_ADD_FIELD(field) field += other.field;
  KILN_CACHE_COUNTERS(KILN_ADD_FIELD)
#undef KILN_ADD_FIELD
  return *this;
}

double Counters::hit_ratio() const noexcept {
  const std::uint64_t hits = memory_hits + disk_hits + remote_hits;
  const std::uint64_t requests = hits + misses;
  return requests == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(requests);
}

void AtomicCounters::add(const Counters& delta) noexcept {
#define KILN_ADD_ATOMIC(field) \
  if (delta.field != 0) field.fetch_add(delta.field, std::memory_order_relaxed);
  KILN_CACHE_COUNTERS(KILN_ADD_ATOMIC)
#undef KILN_ADD_ATOMIC
}

Counters AtomicCounters::snapshot() const noexcept {
  Counters counters;
#define KILN_LOAD_ATOMIC(field) counters.field = field.load(std::memory_order_relaxed);
  KILN_CACHE_COUNTERS(KILN_LOAD_ATOMIC)
#undef KILN_LOAD_ATOMIC
  return counters;
}

void AtomicCounters::reset() noexcept {
#define KILN_RESET_ATOMIC(field) field.store(0, std::memory_order_relaxed);
  KILN_CACHE_COUNTERS(KILN_RESET_ATOMIC)
#undef KILN_RESET_ATOMIC
}

PersistentStats::PersistentStats(std::filesystem::path root) : m_dir(std::move(root) / "stats") {}

void PersistentStats::add(const Counters& delta) noexcept {
  try {
    if (::mkdir(m_dir.c_str(), 0700) != 0 && errno != EEXIST) return;
    const std::string path = fmt::format("{}/shard-{}", m_dir.string(), ::getpid() % kShards);
    (void)detail::update_locked_text(path, [&](const std::string& text) {
      Counters total = parse_shard(text);
      total += delta;
      return format_shard(total);
    });
  } catch (...) {
    // A failed stats write is never an error.
  }
}

Counters PersistentStats::load_total() const noexcept {
  Counters total;
  try {
    for (int shard = 0; shard < kShards; ++shard) {
      const std::string path = fmt::format("{}/shard-{}", m_dir.string(), shard);
      if (const auto text = detail::read_locked_text(path)) total += parse_shard(*text);
    }
  } catch (...) {
    // Out of memory: what was summed so far.
  }
  return total;
}

void PersistentStats::zero() noexcept {
  try {
    for (int shard = 0; shard < kShards; ++shard) {
      const std::string path = fmt::format("{}/shard-{}", m_dir.string(), shard);
      const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
      if (fd < 0) continue;
      if (::flock(fd, LOCK_EX) == 0) (void)::ftruncate(fd, 0);
      ::close(fd);
    }
  } catch (...) {
    // Ignored, like every stats failure.
  }
}

}  // namespace kiln::cache
