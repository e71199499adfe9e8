#pragma once
// NVRTC's automatic precompiled headers (CUDA 12.8+, `-pch`), used so that a cache which promises "this
// key, this binary" can rely on them. What NVRTC does and does not check (measured on NVRTC 13.0):
//
//   - A PCH is taken for a later compile whose leading directives (the includes and defines before the
//     first declaration) and command line match the compile that made it. It is NOT checked against the
//     in-memory headers' text: a header handed under the same name with other bytes reuses the old PCH
//     and gives the old binary. So every compile's PCH folder is named by a digest of every in-memory
//     header (names and bytes) it is handed: other bytes, another folder, never a stale PCH.
//   - A PCH records the address of NVRTC's PCH heap: it serves only the process that made it. A folder
//     shared by processes races (each rewrites the other's files). So the folders live under one root
//     per process, private (0700, made with mkdtemp), removed when the compiler is unloaded; roots left
//     by processes that died are removed by the next process that makes one.
//   - A header that expands __BASE_FILE__ (the compile's main file) bakes the maker's source name into the PCH:
//     a PCH made for aaa.cu gave a compile of zzz.cu the string "aaa.cu". Such a set's digest holds the source's
//     name, so it shares its PCH only among sources of that name.
//   - Templates instantiated into the PCH change the code of the compiles that use it; with
//     `--instantiate-templates-in-pch=false` the binaries are the ones the compile without PCH gives.
//     (A source whose headers define internal-linkage objects, as CCCL's libcu++ does, gets a random
//     `_INTERNAL_<8 hex>` tag in such symbols' names from every compile, with or without PCH: two
//     compiles of it are never byte-identical. The tests compare such binaries with that tag blanked.)
//   - PCH messages and reasons a PCH was not taken would land in the compile log, which kiln returns:
//     the messages are parsed and removed (they tell which compiles made or used a PCH), the reasons are
//     turned off.
//   - A PCH that does not fit NVRTC's PCH heap is not made (the compile itself succeeds, with a warning
//     in its log). The lane then grows the heap to the size NVRTC asks for and compiles again, once.
//
// A header set's first compile in a process goes without PCH (making one costs more than that compile
// saves); its second makes one, and the later ones use it. A heavy set (kMakeAtFirstBytes: CUB's) makes
// its PCH in its first compile: there, making one costs 15-20% more than a compile without, and each
// later compile of the set saves about 85% (measured on the H200, bench/RESULTS.md section 14).
//
// NVRTC's automatic PCH covers what the source includes before its first declaration. Sources that declare
// something and then include more (CuPy's scipy-style filters: typedefs for the dtypes, then
// `#include <cupy/cuda_workaround.h>` and its libcu++ headers) would get a PCH of the leading includes
// only and parse the rest every time. For a compile with PCH, Hoisted moves such a source's text up to
// its last #include (CompileInput::prelude_end, which the include home finds) into an in-memory header of its
// own, so the PCH covers all of it: the header starts with `#line 1 "<source name>"` and the source becomes
// `#include "<that header>"`, `#line <next line> "<source name>"`, the rest. That is the same translation
// unit, with the same __FILE__ and __LINE__ everywhere, so the binary is the one the source as written
// gives (measured: byte-identical; the tests compare them). Not done where the text could mean another
// thing inside a header (#include_next, #line or __INCLUDE_LEVEL__ before the cut), where the source's
// name could not be written in a #line, or where the request asks for debug or line information (whose
// tables would list the header's name).
//
// With a cache, a header set's PCH is kept in it for every process (nvrtc_pch_store.hpp); the folders above
// serve where it cannot be (no disk cache, or a process whose PCH heap is not at kiln's address).
//
// The PCH is never part of a key: it changes how long a compile takes, not what it gives.
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kiln/base/hash.hpp"
#include "lanes/lane.hpp"

namespace kiln::vendor::pch {

/// Requests whose in-memory headers are smaller than this compile without PCH: making one costs more
/// than the compiles it could serve save.
inline constexpr std::uint64_t kMinHeaderBytes = 256 * 1024;
/// Header sets at least this large make their PCH in their first compile, not their second. CuPy's CUB
/// kernels hand NVRTC 6-9 MB (1.2-2.8 s a compile); its element-wise kernels 1.5 MB, libcu++'s small
/// preludes 2.5-3 MB (50-900 ms), where a first request must not pay for a PCH it may never use.
inline constexpr std::uint64_t kMakeAtFirstBytes = 4ULL << 20;
/// The PCH files one process keeps at most; the least recently made folders go first.
inline constexpr std::uint64_t kMaxBytes = 2ULL << 30;
/// NVRTC's PCH heap grows in steps of this (a PCH that does not fit: the size NVRTC asks for, rounded up).
inline constexpr std::uint64_t kHeapStep = 64ULL << 20;
/// The room left free on the PCH folders' file system beyond the largest PCH a compile may write.
inline constexpr std::uint64_t kSpareBytes = 64ULL << 20;

struct StoredPlan;  // nvrtc_pch_store.hpp
class Shelf;        // nvrtc_pch_store.hpp

/// How one compile uses PCH.
struct Plan {
  std::vector<std::string> flags;  ///< added after the request's own flags (never part of the key); empty: none
  std::filesystem::path folder;    ///< this header set's private PCH folder (empty for a stored PCH)
  /// A stored PCH's plan (nvrtc_pch_store.hpp): use or make one, or compile without and be measured.
  std::shared_ptr<StoredPlan> stored;
  /// What NVRTC's lines about this plan's PCH files quote: "\"<folder>/" or "\"<file>\"".
  std::string marker;
};

/// What a compile's log said about PCH; the log keeps every other line.
struct LogNotes {
  bool created = false;
  bool used = false;
  std::string refusal;  ///< NVRTC's warning when it did not take the PCH it was given (#629, #630, #20282)
};

/// Removes the lines the PCH flags of `plan` make NVRTC write ("<source>": creating/using precompiled
/// header file "<file>", and its warnings when it does not take one) from `log`, and says which it found.
LogNotes strip_pch_messages(std::string& log, const Plan& plan);

/// Whether `flag` is one of NVRTC's PCH flags (-pch, --create-pch=, --pch-dir=, ...).
[[nodiscard]] bool is_pch_flag(std::string_view flag) noexcept;

/// A compile's input with the source's prefix moved into an in-memory header (this file's comment says
/// why and when). Not movable: input() points into it.
class Hoisted {
 public:
  /// Null when the source has no such prefix or may not be moved (see above).
  [[nodiscard]] static std::unique_ptr<Hoisted> make(const CompileInput& input);
  Hoisted(const CompileInput& input, std::size_t prelude_end);
  Hoisted(const Hoisted&) = delete;
  Hoisted& operator=(const Hoisted&) = delete;
  /// The input to compile: the rewritten source, the request's headers and the prelude header last.
  [[nodiscard]] const CompileInput& input() const noexcept { return m_input; }

 private:
  std::string m_source;
  std::string m_prelude_name;
  std::string m_prelude_text;
  std::vector<HeaderText> m_headers;
  CompileInput m_input;
};

/// The process-private PCH folders of one loaded NVRTC. Thread-safe.
class Folders {
 public:
  /// `off_reason` empty: on; else the reason it is off ("KILN_PCH=0", "NVRTC 12.4 has none (12.8+)"). `shelf`:
  /// the stored PCHs (null: PCHs stay private to the process, for `no_shelf_reason`, which describe() says).
  Folders(std::string off_reason, std::unique_ptr<Shelf> shelf, std::string no_shelf_reason = {});
  ~Folders();
  Folders(const Folders&) = delete;
  Folders& operator=(const Folders&) = delete;

  [[nodiscard]] bool on() const noexcept { return m_on.load(std::memory_order_relaxed); }
  /// The plan for a compile, or nullopt: PCH is off, the request's flags have PCH flags of their own, or
  /// its headers are small. With a cache (input.store) the stored PCH decides (Shelf::decide); where it
  /// leaves it to the process's own folders: nullopt when this is the first compile of its header set in
  /// this process (unless the set is heavy: kMakeAtFirstBytes), the private root cannot be made (said once
  /// in the log), or its file system has no room for a PCH of up to `heap_bytes` (has_room).
  [[nodiscard]] std::optional<Plan> plan(const CompileInput& input, std::uint64_t heap_bytes);
  /// Whether the plan's file system has room for a PCH as large as NVRTC's PCH heap (`heap_bytes`) and
  /// kSpareBytes more; said once in the log when not.
  [[nodiscard]] bool has_room(const Plan& plan, std::uint64_t heap_bytes);
  /// Turns PCH off for the rest of the process (a PCH problem made a compile fail), with one warning, and
  /// removes the folders.
  void turn_off(const std::string& reason);

  /// A PCH file as this process made it.
  struct Stamp {
    std::uint64_t inode = 0, size = 0;
    std::int64_t mtime_ns = 0;
  };
  /// Counts what a compile did (its NVRTC time `ms`), keeps the folders under kMaxBytes after one was made, and
  /// hands a stored plan's outcome to the shelf (Shelf::after: publish, samples, verdicts).
  void note(const Plan& plan, const LogNotes& notes, double ms);
  /// One line for `kiln devices`: "on (N made, M used, heap X MiB; <root>)" or "off: <reason>".
  [[nodiscard]] std::string describe(std::uint64_t heap_bytes) const;
  /// What a compile of `input` (its PCH form: Hoisted's input where it hoists) would do with a precompiled
  /// header, in a fresh process with a PCH heap of `heap_bytes`, one line for `kiln cache why-miss`. Reads the
  /// stored PCHs (Shelf::outlook); makes, changes and counts nothing.
  [[nodiscard]] std::string outlook(const CompileInput& input, std::uint64_t heap_bytes) const;

 private:
  [[nodiscard]] std::optional<std::filesystem::path> root();
  [[nodiscard]] static Plan stored_plan(std::shared_ptr<StoredPlan> stored);
  void trim();
  /// Notes the stamps of the files in `folder` (after a compile made a PCH there).
  void remember_files(const std::filesystem::path& folder);
  /// Whether the files of `folder` this process made are as it made them: `cut_short` (one is shorter: NVRTC
  /// would read past its end) says which in `changed`.
  enum class Check { intact, rewritten, cut_short };
  [[nodiscard]] Check check_files(const std::filesystem::path& folder, std::string& changed);

  mutable std::mutex m_mutex;        // the root, trimming, the header sets seen, the reason it is off
  std::string m_off_reason;
  std::atomic<bool> m_on;
  std::atomic<bool> m_space_warned{false};
  std::unordered_set<cache::Hash128, cache::Hash128Hasher> m_seen;  // header sets compiled once already
  std::unordered_map<std::string, Stamp> m_files;  // the PCH files this process made, as it made them
  std::filesystem::path m_root;      // empty until the first plan
  long m_root_pid = 0;               // the process that made m_root (a forked child makes its own)
  bool m_root_failed = false;
  std::atomic<std::uint64_t> m_made{0};
  std::atomic<std::uint64_t> m_used{0};
  std::unique_ptr<Shelf> m_shelf;
  std::string m_no_shelf_reason;
};

}  // namespace kiln::vendor::pch
