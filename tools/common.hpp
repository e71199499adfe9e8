#pragma once
// Shared pieces of the `kiln` CLI: errors and exit codes, formatting, reading the store's entries in
// parallel, the request model (how kernels map to name-expression sets).
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <variant>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "kiln/cache/entry.hpp"
#include "kiln/cache/key.hpp"
#include "kiln/cache/store.hpp"

namespace kiln::cli {

using nlohmann::json;

/// Exit codes. 0: done; 1: done, and it found a problem (a failed prewarm request, a bad entry, a
/// request that would miss); 2: bad input or an error that stopped the command.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFound = 1;
inline constexpr int kExitError = 2;

/// Bad command-line input. main() prints "kiln: error: <what>" and exits with kExitError.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A registered subcommand: its CLI11 node and what runs when it was the one parsed.
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};
using Commands = std::vector<Command>;

void add_devices_command(CLI::App& app, Commands& commands);
void add_prewarm_command(CLI::App& app, Commands& commands);
void add_cache_commands(CLI::App& app, Commands& commands);

// ---- formatting ---------------------------------------------------------------------------------

/// "0 B", "812 B", "1.4 KiB", "12.0 MiB", "3.21 GiB".
[[nodiscard]] std::string format_bytes(std::uint64_t bytes);
/// "4 s", "12 min", "3 h", "5 d" relative to now ("in the future" when ahead of the clock).
[[nodiscard]] std::string format_age(std::chrono::system_clock::time_point when);
/// "2024-05-01 12:34:56 UTC".
[[nodiscard]] std::string format_time(std::int64_t unix_seconds);
[[nodiscard]] std::int64_t to_unix(std::chrono::system_clock::time_point when);
/// "0.41 s", "1 min 12 s".
[[nodiscard]] std::string format_seconds(double seconds);
/// Replaces newlines with "; " so a message prints as one line.
[[nodiscard]] std::string one_line(std::string_view text);
/// Parses "90s", "30m", "12h", "7d", "2w" (a bare number is seconds). Throws UsageError naming `flag`.
[[nodiscard]] std::chrono::seconds parse_age(std::string_view text, std::string_view flag);
/// cache::parse_size with a UsageError naming `flag` for nonsense.
[[nodiscard]] std::uint64_t parse_size_flag(std::string_view text, std::string_view flag);

// ---- the store ----------------------------------------------------------------------------------

/// The store the environment names (KILN_CACHE_DIR ...). Throws UsageError for a malformed variable.
[[nodiscard]] std::unique_ptr<cache::Store> open_store();
/// Throws std::runtime_error when the store cannot be written (read-only or memory-only), naming why.
void require_writable(const cache::Store& store, std::string_view command);

/// What the CLI keeps of one entry file after reading its header (prune --target).
struct EntrySummary {
  cache::EntryFile file;
  bool valid = false;
  std::string target;
};

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

/// Removes entry files on many threads (unlink is latency-bound on a busy disk, not CPU-bound). With
/// `only_if_unchanged`, a file whose size or mtime changed since it was listed (it was used or
/// rewritten: no longer least recently used) is kept, as Store::trim keeps it. Returns, per file,
/// whether it was removed. Never throws on a file that cannot be removed.
[[nodiscard]] std::vector<bool> remove_files(const std::vector<const cache::EntryFile*>& files, bool only_if_unchanged);

/// Calls `fn(index)` for index in [0, count) on up to `threads` threads (0 = all cores).
void parallel_for(std::size_t count, unsigned threads, const std::function<void(std::size_t)>& fn);
[[nodiscard]] unsigned default_threads();
/// Threads for reading many small files: twice the cores (at least 4), to hide I/O latency.
[[nodiscard]] unsigned io_threads();

/// A label for the source a canonical key was built from: a built-in's file name when the key's
/// "source" part matches an embedded file, else "runtime source <size> (hash <16 hex>)".
[[nodiscard]] std::string describe_source(const std::vector<cache::KeyPart>& parts);
/// The value of a key part, or nullptr.
/// `options` followed by "--include-path=DIR" for each folder of -I/--include-path (in order) and
/// "--toolkit-includes" when asked: the CLI's include flags as the portable options they stand for.
[[nodiscard]] std::vector<std::string> with_include_options(std::vector<std::string> options,
                                                            const std::vector<std::string>& include_dirs,
                                                            bool toolkit_includes);
[[nodiscard]] const std::string* find_part(const std::vector<cache::KeyPart>& parts, std::string_view name);

/// "sm_90" matches "sm_90"; "gfx90a" matches "gfx90a" and "gfx90a:sramecc+:xnack-".
[[nodiscard]] bool target_matches(std::string_view entry_target, std::string_view wanted);

// ---- requests -----------------------------------------------------------------------------------

/// True for a plain C identifier ("saxpy"), false for a name expression ("kiln::map<float, 4>"): the
/// engine's rule, kiln::is_name_expression.
[[nodiscard]] bool is_plain_name(std::string_view kernel);

/// The name-expression sets that `Engine::kernel(source, k)` requests for each kernel k: every plain
/// name shares one program with no expressions; each name expression is a program of its own. With
/// `one_program`, one set holding every kernel as given (what `Engine::program(source, opts, kernels)`
/// requests).
[[nodiscard]] std::vector<std::vector<std::string>> name_sets(const std::vector<std::string>& kernels,
                                                              bool one_program);

/// Reads a whole regular file of at most `max_bytes` (default: the cache's canonical key limit, which a
/// source and its headers must fit in). Throws UsageError "<what> FILE: why" for anything else: a file
/// that cannot be read, a directory, a FIFO or device (never waited on or read without end), a file
/// over the limit.
[[nodiscard]] std::string read_text_file(const std::filesystem::path& path, std::string_view what,
                                         std::uint64_t max_bytes = cache::kMaxCanonicalKeyBytes);

/// Appends `text` as a JSON string literal (quoted, escaped; invalid UTF-8 replaced by U+FFFD).
/// The fast path for output of many small records, where building a json tree per record costs more
/// than reading the entry.
void append_json_string(std::string& out, std::string_view text);

/// Writes a JSON document to stdout (pretty when stdout is a terminal).
void print_json(const json& document);

}  // namespace kiln::cli
