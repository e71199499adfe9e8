#pragma once
// Precompiled headers kept in the cache (docs/design.md §13, "Stored precompiled headers"): files a compiler
// made and reads back, which cache/ keeps as opaque bytes under a key it is given (the NVRTC lane's key:
// engine/src/lanes/nvrtc_pch_store.hpp). The store (store.hpp, "Precompiled headers") keeps them beside the
// entries, under the same trust rule, the same size total and the same LRU trim:
//
//   <root>/pch/<2 hex>/<30 hex>.pch    the compiler's file as it wrote it, then kiln's trailer (below)
//   <root>/pch/<2 hex>/<30 hex>.pchv   the record: what using it costs and saves here, and the verdict
//
// A .pch file is written once and never changed in place: a maker's temp file
// (".<30 hex>.pch.tmp.<pid>.<random>", beside it) gets its trailer and is renamed into place; removing one
// unlinks it, so a process that holds it open (a compiler that maps it) keeps reading the bytes it checked.
// Packs and remote tiers never carry them: a precompiled header is an image of one compiler build's memory at
// one address, meaningful on this machine only, and read into the host process's memory (a file from elsewhere
// would be code run in the process, not on the GPU).
//
// The trailer (little-endian), the last kPchTrailerBytes of the file:
//   file     := pch:pch_bytes  label:label_bytes  trailer
//   trailer  := magic:8 ("KILNPCH\0")  version:u32 (kPchFormatVersion)  label_bytes:u32  pch_bytes:u64
//               key:16 (the file's key: high u64, then low u64; the file name says the same)
//               checksum:16 (XXH3-128, seed kPchChecksumSeed, over pch and label)  made_unix:i64
// The compiler reads the pch bytes by the offsets its own header records and never past them (NVRTC 13.0,
// measured: tests/rtc/pch_store_test.cpp uses such files), so the file is handed to it whole.
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/base/hash.hpp"

namespace kiln::cache {

inline constexpr std::string_view kPchSuffix = ".pch";
inline constexpr std::string_view kPchRecordSuffix = ".pchv";
inline constexpr std::uint32_t kPchFormatVersion = 1;
inline constexpr std::size_t kPchTrailerBytes = 64;
inline constexpr std::uint64_t kPchChecksumSeed = 0x6b696c6e2d706373ULL;  // "kiln-pcs"

/// A stored precompiled header, opened and checked whole (trailer, key and checksum): its descriptor stays
/// open while this object lives, so the compiler reads exactly the bytes that were checked, through
/// compiler_path(), even after the file is removed or replaced. Move-only.
class PchFile {
 public:
  PchFile() = default;
  PchFile(PchFile&& other) noexcept;
  PchFile& operator=(PchFile&& other) noexcept;
  PchFile(const PchFile&) = delete;
  PchFile& operator=(const PchFile&) = delete;
  ~PchFile();

  [[nodiscard]] bool is_open() const noexcept { return m_fd >= 0; }
  [[nodiscard]] int fd() const noexcept { return m_fd; }
  /// "/proc/self/fd/<fd>": the checked file, whatever is at its path now.
  [[nodiscard]] std::string compiler_path() const;
  [[nodiscard]] const Hash128& key() const noexcept { return m_key; }
  [[nodiscard]] std::uint64_t pch_bytes() const noexcept { return m_pch_bytes; }
  [[nodiscard]] std::uint64_t file_bytes() const noexcept { return m_file_bytes; }
  [[nodiscard]] const std::string& label() const noexcept { return m_label; }
  [[nodiscard]] const std::string& path() const noexcept { return m_path; }
  /// How long open_pch took to check it (reading and hashing it whole).
  [[nodiscard]] std::chrono::nanoseconds check_time() const noexcept { return m_check_time; }
  /// Whether the open file is still the one that was checked: linked (not removed), and its size, times and
  /// inode unchanged. A file written in place (by anything but kiln, which never does) fails this. One fstat.
  [[nodiscard]] bool unchanged() const noexcept;

 private:
  friend class Store;
  int m_fd = -1;
  Hash128 m_key{};
  std::uint64_t m_pch_bytes = 0, m_file_bytes = 0;
  std::string m_label, m_path;
  std::chrono::nanoseconds m_check_time{0};
  ino_t m_inode = 0;
  std::int64_t m_mtime_ns = 0, m_ctime_ns = 0;
};

/// Why open_pch found no usable file.
struct PchMiss {
  std::string reason;    ///< "none", or what was wrong
  bool removed = false;  ///< it was damaged, cut short or foreign, and was removed
};

/// A precompiled header being made: the temp file beside its final name that the compiler writes. Removed by
/// the destructor unless Store::publish_pch took it. Move-only.
class PchDraft {
 public:
  PchDraft() = default;
  PchDraft(PchDraft&& other) noexcept;
  PchDraft& operator=(PchDraft&& other) noexcept;
  PchDraft(const PchDraft&) = delete;
  PchDraft& operator=(const PchDraft&) = delete;
  ~PchDraft();
  /// Where the compiler writes it (the temp file exists, empty, mode 0600).
  [[nodiscard]] const std::string& temp_path() const noexcept { return m_temp; }
  [[nodiscard]] const Hash128& key() const noexcept { return m_key; }

 private:
  friend class Store;
  Hash128 m_key{};
  std::string m_temp, m_final;
};

/// What the cache knows of one key's precompiled header on this machine (the .pchv file): the compile times
/// the lane measured without it and with it, and its verdict. Text, one field a line ("name value...").
struct PchRecord {
  enum class Verdict : std::uint8_t {
    learning,      ///< not enough compiles measured yet
    pays,          ///< compiles that use it are faster: keep making and using it
    does_not_pay,  ///< they are not: neither made nor used (the .pch is removed)
    too_large,     ///< larger than the PCH share of the cache (KILN_PCH_MAXSIZE): not kept
  };
  Verdict verdict = Verdict::learning;
  std::vector<double> without_ms;  ///< compiles of the set without a PCH (the most recent kPchSamples)
  std::vector<double> with_ms;     ///< compiles that used the stored PCH (its check included, when they paid it)
  double make_ms = 0;              ///< the compile that made it
  std::uint64_t pch_bytes = 0;     ///< the size it had (too_large: the size it would have had)
  std::uint64_t limit = 0;         ///< too_large: the PCH share it did not fit
  std::string why;                 ///< the verdict in words ("with 0.82 s against 3.70 s without")

  [[nodiscard]] std::string serialize() const;
  /// nullopt for text that is not a record.
  [[nodiscard]] static std::optional<PchRecord> parse(std::string_view text);
};
inline constexpr std::size_t kPchSamples = 8;
[[nodiscard]] std::string_view to_string(PchRecord::Verdict verdict) noexcept;

/// One file of <root>/pch, for the CLI (Store::list_pch).
struct PchListing {
  std::filesystem::path path;
  Hash128 key{};
  bool record = false;  ///< a .pchv file (else a .pch)
  std::uint64_t size = 0;
  std::chrono::system_clock::time_point mtime;         ///< the file's own
  std::chrono::system_clock::time_point record_mtime;  ///< .pch: its record's (EntryFile::record_mtime)
  /// The last use (EntryFile::used).
  [[nodiscard]] std::chrono::system_clock::time_point used() const noexcept {
    return record_mtime > mtime ? record_mtime : mtime;
  }
  /// .pch: its trailer, when it parsed (nothing is hashed); .pchv: the record, when it parsed.
  std::optional<std::string> label;
  std::int64_t made_unix = 0;
  std::optional<PchRecord> parsed_record;
  std::string problem;  ///< why the trailer or record did not parse (empty when it did)
};

}  // namespace kiln::cache
