#pragma once
// Packs: one read-only file holding many cache entries, so an application or a container image can
// ship prewarmed kernels (`kiln cache export`, KILN_CACHE_PACKS=a.kpack:b.kpack, `kiln cache import`).
//
// File grammar (all integers little-endian):
//   pack     := header entries index trailer
//   header   := magic "KILNPAK\x01"(8) format_version:u32 reserved:u32(0) entry_count:u64
//               index_offset:u64 reserved:u64(0) reserved:u64(0)                          (48 bytes)
//   entries  := entry bytes exactly as cache::serialize() writes them, back to back, in any order
//   index    := entry_count * record                                      (at index_offset)
//   record   := key_hash:16 (high:u64 low:u64) offset:u64 length:u64                    (32 bytes)
//               sorted by key_hash (high, then low), strictly ascending (no duplicate keys);
//               every [offset, offset+length) lies inside `entries`
//   trailer  := index_checksum:16 (XXH3-128, seed kPackChecksumSeed, over header + index)
//               magic "KILNPEND"(8)                                                      (24 bytes)
//   index_offset = 48 + size of entries; file size = index_offset + 32 * entry_count + 24.
// The index sits after the entries so a pack is written in one streaming pass (the header is
// patched last). Opening a pack reads the header, the index and the trailer and checks all of them;
// entry bytes are never trusted: every read goes through cache::parse() and a canonical key
// comparison, exactly like an entry of the local store.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <variant>
#include <vector>

#include "kiln/cache/entry.hpp"
#include "kiln/base/hash.hpp"
#include "kiln/cache/tier.hpp"

namespace kiln::cache {

inline constexpr std::uint32_t kPackFormatVersion = 1;
inline constexpr char kPackMagic[8] = {'K', 'I', 'L', 'N', 'P', 'A', 'K', '\x01'};
inline constexpr char kPackEndMagic[8] = {'K', 'I', 'L', 'N', 'P', 'E', 'N', 'D'};
inline constexpr std::uint64_t kPackChecksumSeed = 0x6b696c6e2d706b63ULL;  // "kiln-pkc"
inline constexpr std::size_t kPackHeaderBytes = 48;
inline constexpr std::size_t kPackRecordBytes = 32;
inline constexpr std::size_t kPackTrailerBytes = 24;
static_assert(sizeof(kPackMagic) + 4 + 4 + 8 + 8 + 8 + 8 == kPackHeaderBytes);
static_assert(sizeof(Hash128) == 16 && 16 + 8 + 8 == kPackRecordBytes);
static_assert(16 + sizeof(kPackEndMagic) == kPackTrailerBytes);

/// One index record of a pack.
struct PackRecord {
  Hash128 key;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
};

/// Writes a pack in one pass: entries are streamed to a temp file beside `path`; commit() appends
/// the index and trailer, patches the header, fsyncs and renames into place. A writer destroyed
/// without commit() removes its temp file and leaves `path` untouched.
class PackWriter {
 public:
  /// Creates the temp file. Throws std::runtime_error naming the path and the system error.
  explicit PackWriter(std::filesystem::path path);
  ~PackWriter();
  PackWriter(const PackWriter&) = delete;
  PackWriter& operator=(const PackWriter&) = delete;

  /// Appends one entry (serialized with cache::serialize). Returns false, writing nothing, when an
  /// entry with the same key is already in the pack. Throws std::runtime_error on a write error.
  bool add(const Entry& entry);
  /// Number of entries added so far.
  [[nodiscard]] std::size_t size() const noexcept { return m_records.size(); }
  /// Bytes of entry data added so far.
  [[nodiscard]] std::uint64_t data_bytes() const noexcept;
  /// Publishes the pack atomically. Throws std::runtime_error on failure (then nothing is published).
  void commit();

 private:
  std::filesystem::path m_path;
  std::filesystem::path m_temp_path;
  int m_fd = -1;
  std::uint64_t m_offset = 0;
  std::vector<PackRecord> m_records;
  std::unordered_set<Hash128, Hash128Hasher> m_keys;
};

/// Writes `entries` as a pack at `path` (atomic: temp file + rename). Entries with a key already
/// written are skipped. Throws std::runtime_error on an I/O error.
void write_pack(const std::filesystem::path& path, const std::vector<Entry>& entries);

/// A mounted pack: a read-only Tier. get() binary-searches the index, preads the entry bytes and
/// verifies them with cache::parse() and the canonical key. Thread-safe (pread on one descriptor).
class PackReader final : public Tier {
 public:
  /// Opens and validates header, index and trailer. Throws std::runtime_error naming the file and
  /// what is wrong ("pack /x.kpack: not a kiln pack (bad magic)", "...: index checksum mismatch").
  static std::unique_ptr<PackReader> open(const std::filesystem::path& path, const Limits& limits = {});
  ~PackReader() override;
  PackReader(const PackReader&) = delete;
  PackReader& operator=(const PackReader&) = delete;

  /// "pack /x/app.kpack".
  [[nodiscard]] std::string describe() const override;
  /// Hit only when the entry parses, its key hash matches and its canonical key equals
  /// `canonical_key`. A damaged entry answers io_error (a pack is never modified). Never throws.
  [[nodiscard]] LookupResult get(const Hash128& key, std::string_view canonical_key) override;

  [[nodiscard]] const std::filesystem::path& path() const noexcept { return m_path; }
  /// The index, sorted by key.
  [[nodiscard]] std::span<const PackRecord> records() const noexcept { return m_records; }
  /// Reads and parses the entry of one index record (for `kiln cache import`): a ContentError when
  /// the bytes are not a valid entry or hold another key than the record names. Never throws.
  [[nodiscard]] std::variant<Entry, ContentError> read(const PackRecord& record) const;

 private:
  PackReader(std::filesystem::path path, int fd, Limits limits, std::vector<PackRecord> records);
  std::filesystem::path m_path;
  int m_fd = -1;
  Limits m_limits;
  std::vector<PackRecord> m_records;
};

/// PackReader::open() as a Tier, for the engine's KILN_CACHE_PACKS layers.
[[nodiscard]] std::unique_ptr<Tier> open_pack(const std::filesystem::path& path);

}  // namespace kiln::cache
