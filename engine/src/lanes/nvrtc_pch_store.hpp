#pragma once
// Precompiled headers that outlive the process (docs/design.md §13, "Stored precompiled headers"): the NVRTC
// lane's side of the PCH files kept in the cache (kiln/cache/pch_store.hpp, the store's side).
//
//   - The key of a header set's PCH is XXH3-128 (its own seed) of everything NVRTC's PCH depends on: the
//     NVRTC library's identity (its version and the GNU build ids of libnvrtc and its builtins library, or
//     their size and time where they have none), the PCH heap's address and size (nvrtc_heap.hpp), every
//     flag the compile hands NVRTC (its front-end options among them: -std, -D/-U, the arch,
//     -default-device...; NVRTC does not say which others it ignores, so none is left out: another flag is
//     another PCH, never a wrong one), kiln's PCH flags, and the names and bytes of every header handed in
//     memory (the hoisted prelude among them, so its text too). NVRTC checks the source's leading
//     directives against the PCH itself (it refuses one made from others, warning #630) and its command
//     line (#629): such a compile goes without PCH, with the bytes of a compile without.
//   - One maker per key across processes: the store's compile lease (Store::acquire_pch_lease), not waited
//     for: a compile that finds another process making its set's PCH goes without (a wait for a make is
//     never shorter than the compile it would spare). The maker has NVRTC write a temp file beside the
//     final name (--create-pch), which the store checksums, gives a trailer and renames into place.
//   - A process uses a stored PCH after checking it whole once (Store::open_pch: trailer, key, checksum),
//     through the descriptor it checked (--use-pch=/proc/self/fd/N), and before every later compile checks
//     with one fstat that the file is still the one it checked. NVRTC opens it read-only and maps it
//     privately: it never writes the shared file, and no reader sees one change, since kiln only ever
//     renames a new file into place or unlinks one (an open file keeps its bytes).
//   - Used where it pays: the record beside the PCH (PchRecord) collects the compile times of the set
//     without a PCH and with the stored one (the check included where a compile paid it); after
//     kVerdictUses uses it says whether the PCH pays (the median with it below kPaysRatio of the median
//     without; against the making compile's time, kPaysRatioAgainstMake, where no compile went without).
//     KILN_PCH=auto then neither makes nor uses a PCH for a set where it does not pay, in
//     this process and the next; KILN_PCH=1 records but does not obey; KILN_PCH=0 turns all PCH off.
//   - Space: a PCH is made only where the cache's file system has room for NVRTC's whole heap and
//     kSpareBytes more (NVRTC writes it through a mapping: a full disk is a SIGBUS); PCH files count in the
//     cache's size and their own share (StoreConfig::pch_limit), and a PCH problem never fails a compile.
//   - Eviction: least recently used first. Every use marks the record (a sample written, else
//     Store::touch_pch_record), never the .pch, which processes compare with the one they checked; so a PCH
//     made early and used all along outlives one made later and used once.
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/base/hash.hpp"
#include "kiln/cache/store.hpp"
#include "lanes/lane.hpp"

namespace kiln::vendor::pch {

/// KILN_PCH.
enum class Mode : std::uint8_t {
  off,          ///< "0": no precompiled headers at all
  per_process,  ///< "private": PCHs in a folder private to the process, none stored or shared
  on,           ///< "1": stored and shared, made and used wherever a header set is large enough; verdicts recorded, not obeyed
  automatic,    ///< "auto" (the default): stored and shared, but not where a set's record says its PCH does not pay
};

/// Uses of a stored PCH measured before the verdict, and the ratios it takes to pay (see above).
inline constexpr std::size_t kVerdictUses = 2;
inline constexpr double kPaysRatio = 0.9;
inline constexpr double kPaysRatioAgainstMake = 0.75;

/// What one compile does with a stored PCH (Plan::stored).
struct StoredPlan {
  enum class Kind : std::uint8_t {
    without,  ///< compiles without PCH; its time is a sample for the record
    use,      ///< --use-pch of `file`
    make,     ///< --create-pch into `draft`, holding `lease`
  };
  Kind kind = Kind::without;
  cache::Hash128 key{};
  cache::Store* store = nullptr;
  std::shared_ptr<const cache::PchFile> file;  ///< use
  double check_ms = 0;                          ///< use: the check this compile paid (its first use here)
  std::optional<cache::PchDraft> draft;         ///< make
  cache::CompileLease lease;                    ///< make
  std::string label;                            ///< make: a line for `kiln cache ls`
};

/// The stored PCHs of one loaded NVRTC. Thread-safe.
class Shelf {
 public:
  Shelf(Mode mode, std::string identity) : m_mode(mode), m_identity(std::move(identity)) {}

  /// The key of a compile's stored PCH (see above). `header_set`: the digest of the handed headers.
  [[nodiscard]] cache::Hash128 key(const CompileInput& input, const cache::Hash128& header_set,
                                   std::uint64_t heap_bytes) const;
  /// What a compile of a set of `header_bytes` does with `store`'s PCH of `key`: a plan; "skip" (a verdict
  /// says it does not pay: no PCH at all); or "private" (nothing to use and no making here, or this process
  /// cannot share PCHs: its heap is elsewhere): the process's own folders decide.
  struct Decision {
    enum class Kind : std::uint8_t { plan, skip, private_folders } kind = Kind::private_folders;
    std::shared_ptr<StoredPlan> plan;
  };
  [[nodiscard]] Decision decide(cache::Store& store, const cache::Hash128& key, std::uint64_t header_bytes,
                                std::uint64_t heap_bytes, std::string_view source_name);
  /// After the compile: `created` / `used` from its log, `refusal` NVRTC's reason for not taking a stored
  /// PCH (empty when it took it), `ms` its NVRTC time. Publishes a made PCH, records samples and verdicts.
  void after(StoredPlan& plan, bool created, bool used, const std::string& refusal, double ms);
  /// What a fresh process's compile of a set of `header_bytes` under `key` (made with a heap of
  /// `heap_bytes`) would do with `store`'s PCH, one line (Folders::outlook). Checks a stored file whole;
  /// removes nothing. `other_keys`: the set's keys under other heap sizes (a process whose heap grew).
  [[nodiscard]] std::string outlook(const cache::Store& store, const cache::Hash128& key, std::uint64_t header_bytes,
                                    std::uint64_t heap_bytes,
                                    const std::vector<std::pair<std::uint64_t, cache::Hash128>>& other_keys) const;
  /// Whether this process shares PCHs (its heap at kHeapAddress, NVRTC taking the stored files).
  [[nodiscard]] bool sharing() const noexcept;
  /// For `kiln devices`: "stored PCHs: N used, M made here" or why not.
  [[nodiscard]] std::string describe() const;
  [[nodiscard]] const std::string& identity() const noexcept { return m_identity; }

 private:
  struct KeyState {
    std::shared_ptr<const cache::PchFile> file;  ///< checked and held
    bool pays = false;                           ///< its record says so: stop recording
  };
  /// Adds a sample (or the make's time) to `key`'s record; false when the record is decided and was left as is.
  bool record_sample(cache::Store& store, const cache::Hash128& key, bool with, double ms, double make_ms = 0,
                     std::uint64_t pch_bytes = 0);

  Mode m_mode;
  std::string m_identity;
  mutable std::mutex m_mutex;
  std::unordered_map<cache::Hash128, KeyState, cache::Hash128Hasher> m_keys;
  std::string m_off_reason;  ///< set when this process stopped sharing (NVRTC refused a stored PCH's heap)
  bool m_space_warned = false;
  std::uint64_t m_used = 0, m_made = 0, m_checked = 0;
};

/// The identity of the NVRTC library that defines `nvrtc_symbol` and of its builtins library (any symbol of
/// it; null when it was not loaded): their GNU build ids, or their files' size and time.
[[nodiscard]] std::string library_identity(const void* nvrtc_symbol, const void* builtins_symbol);

}  // namespace kiln::vendor::pch
