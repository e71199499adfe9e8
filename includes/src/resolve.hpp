#pragma once
// Private to the include home (includes/src/): kiln resolves #include itself. NVRTC has no
// dependency output and a compile that fails on a missing header costs a whole compiler run, so kiln
// scans the source and every header it reaches (scan.hpp), finds each included file in the in-memory
// headers or the include folders, and hands the compiler only in-memory headers. It therefore knows
// exactly which files a compile could read (their bytes go into the key) and which paths were probed
// and found empty (a file appearing there later would be found first and change the result).
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "conditions.hpp"
#include "header_files.hpp"
#include "kiln/includes/dep_manifest.hpp"
#include "kiln/cache/dependencies.hpp"
#include "kiln/cache/types.hpp"
#include "paths.hpp"
#include "scan.hpp"

namespace kiln::cache::detail {

// The facade's types (include_home.hpp), by their names inside the home.
using kiln::includes::CompilerHeader;
using kiln::includes::CompilerTraits;
using kiln::includes::MemoryHeader;
using kiln::includes::ResolvedIncludes;

struct IncludeInput {
  std::string_view source_name;
  std::string_view source_text;
  /// The headers handed in memory. They are searched before any folder and keep their names; the
  /// compiler gets them with their includes rewritten.
  std::span<const MemoryHeader> memory_headers;
  /// -I folders, then the toolkit's, in search order. Relative folders are taken from the current
  /// directory. A folder that does not exist is an IncludeError.
  std::vector<std::filesystem::path> folders;
  /// The compiler the headers are for (the engine's word for its vendor): it decides how a file from disk is
  /// named in memory (see ResolvedIncludes::compiler_headers) and whether a computed include may name an
  /// absolute path.
  CompilerTraits traits;
  /// Names a failed compile could not open (computed includes the scan cannot see: #include MACRO).
  /// Each is looked up like <name> and handed to the compiler under that very name, since the
  /// include that asks for it is not rewritten.
  std::vector<std::string> retry_names;
  /// The source's scan (scan_includes of source_text), when the caller has made it; else the resolve scans it.
  const ScanResult* source_scan = nullptr;
  /// Files earlier resolves read (optional): a file whose stat is unchanged is not read or scanned again.
  HeaderFileCache* file_cache = nullptr;
  /// Recent stats (optional; with file_cache only): a header or probed place that a lookup or an
  /// earlier resolve stat'ed less than the memo's time ago is not stat'ed again, and what this
  /// resolve's stats find is noted there.
  StatMemo* stat_memo = nullptr;
  /// A header whose mtime or ctime lies within this window of the resolve's start is not trusted by
  /// its stat (HeaderRecord::trusted_stat): the dependency manifests' window (ManifestConfig::trust_window).
  std::chrono::nanoseconds trust_window = kStatTrustWindow;
  /// The lean walk (conditions.hpp): follow only the includes the compile can reach, with `macros` (the
  /// request's macro context, required then). Without retry names only (a retry is resolved in full).
  /// The includes a lean walk leaves behind are rewritten to a name under kUntakenPrefix, which no
  /// compiler has: a compile that reaches one fails, and the engine retries with the full set.
  bool lean = false;
  const MacroContext* macros = nullptr;
};

/// The name an include the lean walk did not take is rewritten to: this, then the name as written.
inline constexpr std::string_view kUntakenPrefix = "kiln-untaken/";
/// Whether a name a failed compile asked for is one the lean walk left behind.
[[nodiscard]] inline bool untaken_include_name(std::string_view name) { return name.starts_with(kUntakenPrefix); }

}  // namespace kiln::cache::detail

// Declared by the facade (include_home.hpp), which hands it to the engine opaque.
struct kiln::includes::ResolvedIncludes {
  using FileWork = cache::detail::FileWork;
  using DependencySet = cache::DependencySet;
  /// The files read from the folders, in the order they were first reached, and the paths probed
  /// and found without a regular file in places searched before a match (or, for an include that
  /// matched nothing, every place searched).
  DependencySet dependencies;
  /// What the compiler gets in memory: the memory headers (their names, includes rewritten), then
  /// every file read from disk under its compiler name. That is the name a computed include or a
  /// retry name asks for it by, when one does (the compiler will ask for that name, and one file
  /// under one name keeps #pragma once working; a second such name gets a copy; the first file to
  /// claim a name keeps it). Otherwise it is the file's absolute path for NVRTC, and for HIPRTC the
  /// same path without the leading '/' (comgr stores each header under its include folder by name,
  /// so an absolute name would make clang read the file from disk instead of the bytes kiln hashed).
  std::vector<CompilerHeader> compiler_headers;
  /// The source with each include that resolved to a file on disk rewritten to `#include "NAME"`
  /// with NAME the file's compiler name, as in every header handed over (#include_next becomes
  /// #include, __has_include_next becomes __has_include). Every line stays where it was, so compiler
  /// messages keep their line numbers.
  std::string compiler_source;
  /// How the source's includes were rewritten: for each include of the source (its index in the source's
  /// ScanResult::refs) that leads to a file from disk, the name the compiler gets that file under. Another
  /// source with the same includes is rewritten with them (rewrite_source; ResolvedSets).
  std::vector<std::pair<std::size_t, std::string>> source_links;
  /// Names (as written, without delimiters) of includes that matched nothing; sorted, unique. Not an
  /// error by itself: the include may sit in a branch that is never compiled, or name one of the
  /// compiler's own headers.
  std::vector<std::string> unresolved;
  /// The operands of computed includes (#include MACRO), as written; sorted, unique.
  std::vector<std::string> computed;
  /// What the resolve asked the file system.
  FileWork work;
  /// Made by the lean walk: includes it did not take are rewritten to kUntakenPrefix names (`untaken` of
  /// them). False for a full resolve (every branch), and for a lean one that gave up (too deep, too long).
  bool lean = false;
  std::size_t untaken = 0;
  /// Where its time went (the debug log says): finding and reading the files (the lean walk, or the full
  /// scan), then rewriting their includes; of the walk's time, what it spent waiting for a file its
  /// read-ahead was reading and reading files itself; and the files the read-ahead read for it.
  std::chrono::nanoseconds walk_time{}, rewrite_time{}, walk_wait_time{}, walk_read_time{};
  std::uint32_t read_ahead = 0;
  /// Where the prelude of compiler_source ends (CompilerView::prelude_end), found from the source's scan
  /// rather than by scanning the rewritten text again (rewritten_prelude_end).
  std::size_t prelude_end = 0;
};

namespace kiln::cache::detail {

/// Resolves every include of the source and of the memory headers, transitively. Each file is opened
/// and read once. Throws IncludeError for a folder that does not exist or is not a folder, a header
/// larger than kMaxHeaderBytes, a file that cannot be read, or a disk file whose compiler name is
/// taken by a memory header.
[[nodiscard]] ResolvedIncludes resolve_includes(const IncludeInput& input);

/// `text` (whose scan is `scan`) with each linked include rewritten as resolve_includes rewrites the source:
/// the operand becomes "NAME" (and #include_next / __has_include_next lose their _next); every line keeps
/// its number. Throws std::out_of_range for a link past the scan's includes.
[[nodiscard]] std::string rewrite_source(std::string_view text, const ScanResult& scan,
                                         std::span<const std::pair<std::size_t, std::string>> links);

/// Where the prelude of `text` (scan.prelude_end) ends once rewritten by `links` into `rewritten`
/// (rewrite_source's edits): the place a scan of `rewritten` finds, found without that scan (the edits before
/// it shift it) unless an #include_next is rewritten. ResolvedIncludes::prelude_end.
[[nodiscard]] std::size_t rewritten_prelude_end(std::string_view text, const ScanResult& scan,
                                                std::span<const std::pair<std::size_t, std::string>> links,
                                                std::string_view rewritten);

/// The folders as absolute, lexically normal paths, in the same order. Throws IncludeError for a folder
/// that is empty, does not exist or is not a folder (one stat each).
/// With `memo`, a folder seen as a folder less than the memo's time ago is not stat'ed again.
[[nodiscard]] std::vector<std::filesystem::path> checked_include_folders(
    std::span<const std::filesystem::path> folders, StatMemo* memo = nullptr);

/// The include folders of the toolkit a compiler library belongs to, in search order. NVRTC
/// (<root>/lib64/libnvrtc.so.N, <root>/lib/..., <root>/targets/<triple>/lib/...): <root>/include, then
/// <root>/include/cccl when present (CUDA 13 keeps CUB, Thrust and libcu++ there). HIP (libamdhip64 or
/// libhiprtc under <root>/lib, or a multiarch <root>/lib/<triple>): <root>/include. Throws IncludeError
/// when the toolkit folder lacks the toolkit's headers, naming the folder (toolkit_dirs.cpp).
[[nodiscard]] std::vector<std::filesystem::path> toolkit_include_dirs(const std::filesystem::path& compiler_library);

/// Adds the macros a compile starts with (the request's -D, the predefined ones kiln knows) to `defines`, for
/// guess_computed: `-DHEADER="/abs/v.h"` with `#include HEADER` names a file too.
void add_flag_defines(const MacroContext& macros, Defines& defines);
/// The refusals of a computed include (computed_includes.cpp): one that expands to no name, and, for HIPRTC,
/// one that may expand to an absolute path.
[[nodiscard]] IncludeError unnamed_include(std::string_view where, std::string_view operand);
[[nodiscard]] IncludeError absolute_include_for_hip(std::string_view where, std::string_view operand,
                                                    std::string_view name);

/// The compiler's log read back (compile_log.cpp; declared by the facade).
using kiln::includes::describe_missing_include;
using kiln::includes::missing_include_from_log;
using kiln::includes::restore_include_spellings;

}  // namespace kiln::cache::detail
