#include "store_scan.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>

#include <fmt/format.h>

#include "cli.hpp"
#include "kiln/base/log.hpp"
#include "parallel.hpp"

namespace kiln::cli {

std::unique_ptr<cache::Store> open_store(bool quiet) {
  cache::StoreConfig config;
  try {
    config = cache::StoreConfig::from_environment();
  } catch (const std::exception& error) {
    throw UsageError(error.what());
  }
  if (!quiet) return std::make_unique<cache::Store>(std::move(config));
  const log::Level level = log::level();
  log::set_level(log::Level::error);
  auto store = std::make_unique<cache::Store>(std::move(config));
  log::set_level(level);
  return store;
}

void require_writable(const cache::Store& store, std::string_view command) {
  if (store.mode() == cache::StoreMode::read_write) return;
  throw std::runtime_error(fmt::format("{}: the cache at {} is {}: {}", command, store.config().root.string(),
                                       cache::to_string(store.mode()), store.mode_reason()));
}

void scan_store(const cache::Store& store, cache::ScanDepth depth, bool with_mtime,
                const std::function<void(unsigned shard, const cache::ScannedEntry&)>& fn,
                const std::function<void(unsigned shard, const cache::StrayFile&)>& on_stray) {
  parallel_for(cache::Store::kShardCount, io_threads(), [&](std::size_t shard) {
    const auto index = static_cast<unsigned>(shard);
    std::function<void(const cache::StrayFile&)> strays;
    if (on_stray) strays = [&](const cache::StrayFile& stray) { on_stray(index, stray); };
    store.scan_shard(
        index, depth, with_mtime, [&](const cache::ScannedEntry& scanned) { fn(index, scanned); }, strays);
  });
}

namespace {

cache::Hash128 held_key(const cache::ScannedEntry& scanned) {
  return scanned.entry != nullptr    ? scanned.entry->key_hash
         : scanned.header != nullptr ? scanned.header->key_hash
                                     : scanned.file_hash;
}

}  // namespace

EntryState entry_state(const cache::ScannedEntry& scanned) {
  if (!scanned.error.empty()) return scanned.io_error ? EntryState::unreadable : EntryState::damaged;
  if (held_key(scanned) != scanned.file_hash) return EntryState::damaged;
  return scanned.refused.empty() ? EntryState::ok : EntryState::refused;
}

std::string entry_problem(const cache::ScannedEntry& scanned) {
  if (!scanned.error.empty()) return std::string(scanned.error);
  const cache::Hash128 held = held_key(scanned);
  if (held != scanned.file_hash) {
    return fmt::format("file name says key {} but the entry holds key {}", scanned.file_hash.hex(), held.hex());
  }
  if (!scanned.refused.empty()) return fmt::format("refused: {}", scanned.refused);
  return {};
}

bool key_order(const cache::Hash128& a, const cache::Hash128& b) noexcept {
  return a.high != b.high ? a.high < b.high : a.low < b.low;
}

bool key_order(const cache::EntryFile& a, const cache::EntryFile& b) noexcept {
  return key_order(a.file_hash, b.file_hash);
}

std::string stray_problem(const cache::StrayFile& stray) {
  return fmt::format("a {} at an entry path, not an entry file", stray.kind);
}

bool target_matches(std::string_view entry_target, std::string_view wanted) {
  if (entry_target == wanted) return true;
  return entry_target.size() > wanted.size() && entry_target.starts_with(wanted) && entry_target[wanted.size()] == ':';
}

std::vector<bool> remove_files(const std::vector<const cache::EntryFile*>& files, bool only_if_unchanged) {
  std::vector<char> removed(files.size(), 0);
  parallel_for(files.size(), 16, [&](std::size_t i) {
    const cache::EntryFile& file = *files[i];
    if (only_if_unchanged) {
      struct stat now {};
      if (::lstat(file.path.c_str(), &now) != 0) return;
      const auto mtime =
          std::chrono::system_clock::time_point(std::chrono::duration_cast<std::chrono::system_clock::duration>(
              std::chrono::seconds(now.st_mtim.tv_sec) + std::chrono::nanoseconds(now.st_mtim.tv_nsec)));
      if (mtime != file.mtime || static_cast<std::uint64_t>(now.st_size) != file.size) return;
    }
    removed[i] = ::unlink(file.path.c_str()) == 0 ? 1 : 0;
  });
  return {removed.begin(), removed.end()};
}

}  // namespace kiln::cli
