#pragma once
// kiln resolves #include itself. NVRTC has no dependency output and a compile that fails on a missing
// header costs a whole compiler run, so kiln scans the source and every header it reaches, finds each
// included file in the in-memory headers or the include folders, and hands the compiler only
// in-memory headers. It therefore knows exactly which files a compile could read (their bytes go into
// the key) and which paths were probed and found empty (a file appearing there later would be found
// first and change the result).
//
// The scan does not preprocess: every branch is scanned (#if 0 and #ifdef _WIN32 included), so the
// set is a superset of what the compiler reads. __has_include operands count as includes (a header
// the compiler did not get would flip the answer). A computed include (#include MACRO) cannot be
// rewritten; the scan expands its operand with every object-like #define it saw and hands each file
// that resolves to the compiler under the name the expansion spells. What that cannot reach (function-
// like macros, token pasting) the engine retries with the name a failed compile asked for
// (missing_include_from_log, IncludeInput::retry_names).
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/cache/dep_manifest.hpp"
#include "kiln/cache/dependencies.hpp"
#include "kiln/cache/types.hpp"
#include "kiln/source.hpp"

namespace kiln::detail {

/// The largest header file kiln reads. Real headers are far below it; a bigger file named by an
/// include is almost certainly not a header, and reading it whole would hold that much memory.
inline constexpr std::uint64_t kMaxHeaderBytes = 64ULL << 20;

/// Header files read by earlier resolves of this process: their bytes, digest and include scan, reused
/// by a later resolve while the file keeps the stat it had when read (size, mtime, ctime, inode, device),
/// so a program whose kernels include one tree reads and scans it once, not once per kernel. Only files
/// whose stat was trusted when read (cache::HeaderRecord::trusted_stat: untouched for the trust window)
/// are kept, the rule the dependency manifests judge headers by. Each file also keeps the text the
/// compiler got from it last (its includes rewritten; about its own size), shared by later resolves
/// that rewrite it the same way. Thread-safe. Bounded: cleared when the files' bytes would pass
/// kMaxBytes (the rewritten texts about double that at most).
class HeaderFileCache {
 public:
  struct File;  ///< includes.cpp
  static constexpr std::uint64_t kMaxBytes = 256ULL << 20;

  HeaderFileCache();
  ~HeaderFileCache();
  HeaderFileCache(const HeaderFileCache&) = delete;
  HeaderFileCache& operator=(const HeaderFileCache&) = delete;

  /// The file read from `path` when it had exactly this stat; null otherwise.
  [[nodiscard]] std::shared_ptr<const File> find(const std::string& path, const cache::FileStat& stat) const;
  void put(const std::string& path, std::shared_ptr<const File> file);
  struct Usage {
    std::size_t files = 0;    ///< held
    std::uint64_t bytes = 0;  ///< held
    std::uint64_t hits = 0;   ///< find() calls that returned a file
  };
  [[nodiscard]] Usage usage() const;

 private:
  struct State;
  std::unique_ptr<State> m_state;
};

struct IncludeInput {
  std::string_view source_name;
  std::string_view source_text;
  /// The headers handed in memory (the user's, kiln's embedded ones). They are searched before any
  /// folder and keep their names; the compiler gets them with their includes rewritten.
  std::span<const Header> memory_headers;
  /// -I folders, then the toolkit's, in search order. Relative folders are taken from the current
  /// directory. A folder that does not exist is a ConfigError.
  std::vector<std::filesystem::path> folders;
  /// The compiler the headers are for: it decides how a file from disk is named in memory (see
  /// ResolvedIncludes::compiler_headers).
  Vendor vendor = Vendor::cuda;
  /// Names a failed compile could not open (computed includes the scan cannot see: #include MACRO).
  /// Each is looked up like <name> and handed to the compiler under that very name, since the
  /// include that asks for it is not rewritten.
  std::vector<std::string> retry_names;
  /// Files earlier resolves read (optional): a file whose stat is unchanged is not read or scanned again.
  HeaderFileCache* file_cache = nullptr;
  /// Recent stats (optional; with file_cache only): a header or probed place that a lookup or an
  /// earlier resolve stat'ed less than its stat memo's time ago is not stat'ed again
  /// (DependencyManifests::recent_stat), and what this resolve's stats find is noted there.
  const cache::DependencyManifests* stat_memo = nullptr;
};

/// A header as the compiler gets it. Its text is shared: a file's rewritten text stays with the file in
/// the HeaderFileCache and serves every later resolve that rewrites it the same way, so a burst of
/// compiles over one tree does not copy the tree's bytes again for each kernel.
struct CompilerHeader {
  std::string name;
  std::string_view text;                        ///< all of *storage (so NUL-terminated)
  std::shared_ptr<const std::string> storage;
};

struct ResolvedIncludes {
  /// The files read from the folders, in the order they were first reached, and the paths probed
  /// and found without a regular file in places searched before a match (or, for an include that
  /// matched nothing, every place searched).
  cache::DependencySet dependencies;
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
  /// Names (as written, without delimiters) of includes that matched nothing; sorted, unique. Not an
  /// error by itself: the include may sit in a branch that is never compiled, or name one of the
  /// compiler's own headers.
  std::vector<std::string> unresolved;
  /// The operands of computed includes (#include MACRO), as written; sorted, unique.
  std::vector<std::string> computed;
  /// What the resolve asked the file system: stat(2) calls made, paths answered by the stat memo,
  /// and files opened and read (the rest came from the HeaderFileCache).
  struct Work {
    std::uint32_t stats = 0;
    std::uint32_t memo_hits = 0;
    std::uint32_t reads = 0;
  } work;
};

/// Resolves every include of the source and of the memory headers, transitively. Each file is opened
/// and read once. Throws ConfigError for a folder that does not exist or is not a folder, a header
/// larger than kMaxHeaderBytes, a file that cannot be read, or a disk file whose compiler name is
/// taken by a memory header.
[[nodiscard]] ResolvedIncludes resolve_includes(const IncludeInput& input);

/// The folders as absolute, lexically normal paths, in the same order. Throws ConfigError for a folder
/// that is empty, does not exist or is not a folder (one stat each).
/// With `memo`, a folder seen as a folder less than its stat memo time ago is not stat'ed again.
[[nodiscard]] std::vector<std::filesystem::path> checked_include_folders(
    std::span<const std::filesystem::path> folders, const cache::DependencyManifests* memo = nullptr);

/// The header a failed compile could not open, from its log: NVRTC's `cannot open source file "x"`
/// (or `could not open ...`), clang's (HIPRTC's) `'x' file not found`. nullopt when the log has none.
[[nodiscard]] std::optional<std::string> missing_include_from_log(std::string_view log);

/// Whether `text` (a source or an in-memory header) has an include the compiler would open from the disk
/// whatever folders it is given: one by an absolute path (#include, #include_next or __has_include), or a
/// computed one (#include MACRO), which may expand to one. The engine resolves such a request's includes
/// itself, so the file is read by kiln, keyed and handed over in memory. Cheap for a text without the
/// word "include".
[[nodiscard]] bool opens_files_by_name(std::string_view text);

/// A sentence for a CompileError about a header that was not found: where kiln looked.
[[nodiscard]] std::string describe_missing_include(std::string_view name,
                                                   std::span<const std::filesystem::path> folders);

/// The include folders of the toolkit a compiler library belongs to, in search order. NVRTC
/// (<root>/lib64/libnvrtc.so.N, <root>/lib/..., <root>/targets/<triple>/lib/...): <root>/include, then
/// <root>/include/cccl when present (CUDA 13 keeps CUB, Thrust and libcu++ there). HIP (libamdhip64 or
/// libhiprtc under <root>/lib, or a multiarch <root>/lib/<triple>): <root>/include. Throws ConfigError
/// when the toolkit folder lacks the toolkit's headers, naming the folder.
[[nodiscard]] std::vector<std::filesystem::path> toolkit_include_dirs(const std::filesystem::path& compiler_library);

}  // namespace kiln::detail
