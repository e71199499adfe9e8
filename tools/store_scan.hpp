#pragma once
// The store as the `kiln cache` subcommands see it: opening it, reading every entry file in parallel
// with the engine's own parser, how the engine would treat each, and removing entry files.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/cache/entry.hpp"
#include "kiln/cache/key.hpp"
#include "kiln/cache/store.hpp"

namespace kiln::cli {

/// The store the environment names (KILN_CACHE_DIR ...). Throws UsageError for a malformed variable.
/// `quiet`: the store's own warnings while it opens are not printed (for a command that reports the
/// store's mode and its reason itself, so the reason is said once).
[[nodiscard]] std::unique_ptr<cache::Store> open_store(bool quiet = false);
/// Throws std::runtime_error when the store cannot be written (read-only or memory-only), naming why.
void require_writable(const cache::Store& store, std::string_view command);

/// Orders entry files by key (the same order as their paths, without comparing paths).
[[nodiscard]] bool key_order(const cache::EntryFile& a, const cache::EntryFile& b) noexcept;
[[nodiscard]] bool key_order(const cache::Hash128& a, const cache::Hash128& b) noexcept;

/// Reads every entry file of the store with the engine's own parser (Store::scan_shard), one shard
/// directory at a time on io_threads() threads, and calls fn(shard, entry) on the scanning thread (calls
/// for one shard come from one thread, one after another). Never deletes anything.
/// `on_stray`, when given, gets what the shard directories hold besides entry files (cache::StrayFile), on
/// the same thread as that shard's entries.
void scan_store(const cache::Store& store, cache::ScanDepth depth, bool with_mtime,
                const std::function<void(unsigned shard, const cache::ScannedEntry&)>& fn,
                const std::function<void(unsigned shard, const cache::StrayFile&)>& on_stray = {});

/// How the engine sees a scanned entry file.
enum class EntryState : std::uint8_t {
  ok,
  damaged,     ///< proven bad by its bytes (a content error, or it holds another key than its name)
  unreadable,  ///< could not be opened or read (an I/O error): it may be fine, so nothing removes it for that
  refused,     ///< not used whatever its bytes: its mode or owner, or its shard directory's, is not trusted
};
[[nodiscard]] EntryState entry_state(const cache::ScannedEntry& scanned);

/// Why a scanned entry is not valid: its error, a header/entry naming another key than its file name,
/// or "refused: why" (see EntryState). Empty when it is valid.
[[nodiscard]] std::string entry_problem(const cache::ScannedEntry& scanned);

/// What a stray at an entry path is reported as: a damaged entry (the engine removes it on lookup).
[[nodiscard]] std::string stray_problem(const cache::StrayFile& stray);

/// "sm_90" matches "sm_90"; "gfx90a" matches "gfx90a" and "gfx90a:sramecc+:xnack-".
[[nodiscard]] bool target_matches(std::string_view entry_target, std::string_view wanted);

/// Removes entry files on many threads (unlink is latency-bound on a busy disk, not CPU-bound). With
/// `only_if_unchanged`, a file whose size or mtime changed since it was listed (it was used or
/// rewritten: no longer least recently used) is kept, as Store::trim keeps it. Returns, per file,
/// whether it was removed. Never throws on a file that cannot be removed.
[[nodiscard]] std::vector<bool> remove_files(const std::vector<const cache::EntryFile*>& files, bool only_if_unchanged);

}  // namespace kiln::cli
