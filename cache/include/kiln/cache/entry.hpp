#pragma once
// One cache entry: a compiled binary plus everything needed to trust it. This comment is the format;
// cache/src/store/entry.cpp implements exactly this grammar (one parser, used by the store, packs and the CLI).
//
//   entry     := fixed variable payload aux epilogue                  (integers little-endian)
//   fixed     := 96 bytes:
//     off  0  magic          8   "KILNENT\x01"
//     off  8  format_version u32 kEntryFormatVersion (another version is a content error)
//     off 12  vendor         u8  Vendor (0 none, 1 cuda, 2 hip)
//     off 13  payload_kind   u8  PayloadKind (1 cubin, 2 ptx, 3 amdgpu code object, 4 ltoir, 5 blob)
//     off 14  reserved       u16 0
//     off 16  created_unix   i64 seconds since the epoch
//     off 24  key_hash       16  XXH3-128 (seed kKeySeed) of canonical_key: high u64, then low u64
//     off 40  target_len     u32 <= Limits::max_text_bytes
//     off 44  compiler_len   u32 <= Limits::max_text_bytes
//     off 48  canonical_len  u32 <= Limits::max_canonical_bytes
//     off 52  names_len      u32 bytes of `names`
//     off 56  names_count    u32 <= Limits::max_names
//     off 60  reserved       u32 0
//     off 64  payload_len    u64 <= Limits::max_payload_bytes
//     off 72  aux_len        u64 <= Limits::max_payload_bytes
//     off 80  total_len      u64 the size of the whole entry; must equal the file size
//     off 88  reserved       u64 0
//   variable  := target(target_len) compiler(compiler_len) canonical_key(canonical_len) names(names_len)
//   names     := names_count * ( expression_len:u32 expression lowered_len:u32 lowered )
//                (each string <= Limits::max_name_bytes; the list fills names_len exactly)
//   payload   := payload_len bytes     (CUBIN, PTX, AMDGPU code object, LTO-IR, or a caller's blob)
//                (a blob's names list holds its labels, (name, value) pairs: kiln/cache/blob.hpp)
//   aux       := aux_len bytes         (the PTX kept beside a CUBIN; empty otherwise)
//   epilogue  := checksum:16 (XXH3-128, seed kChecksumSeed, over fixed..aux; high u64, then low u64)
//                end_magic "KILNEND\x01"(8)
// Reading checks, in order: size >= fixed + epilogue, magic, version, enums and reserved fields, every
// length against Limits, total_len == file size (all before any allocation, so what is allocated is
// bounded by the real size of the input), then the end magic and the checksum, then the names list and
// key_hash == hash(canonical_key), then the payload's signature where kiln has nothing else to check it
// by: an LTO-IR payload (kind 4) must be a CUDA entry without aux, at least kLtoIrMinBytes long and
// start with kLtoIrMagic; a blob (kind 5: bytes stored under a caller's key, blob.hpp) must be an entry of
// vendor none without aux. (A CUBIN, PTX or code object is checked by its driver when it is loaded, and
// an entry the driver refuses is replaced; LTO-IR is never loaded by kiln, so this read is its check.)
// Last, the kind and vendor against the target, which says both: sm_ CUBIN, compute_ PTX, lto_ LTO-IR
// (vendor cuda), gfx an AMDGPU code object (vendor hip), no target a blob; any other pair is damage.
// Reading only a header (EntryHeaderView: listings) makes the same checks up to the payload: the size and
// fixed-part checks, the kind against the target, then (when the whole header is read: always for a blob,
// whose names list holds its labels) the names list and key_hash; it reads neither
// payload, aux nor epilogue, so it does not verify the checksum. Only a whole-entry read (parse(),
// Store::get, Store::read_file, ScanDepth::entry) verifies everything.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kiln/base/hash.hpp"
#include "kiln/cache/key.hpp"
#include "kiln/cache/types.hpp"

namespace kiln::cache {

inline constexpr std::uint32_t kEntryFormatVersion = 1;
inline constexpr std::size_t kEntryFixedBytes = 96;     ///< the fixed part of the header
inline constexpr std::size_t kEntryEpilogueBytes = 24;  ///< checksum + end magic
inline constexpr char kEntryMagic[8] = {'K', 'I', 'L', 'N', 'E', 'N', 'T', '\x01'};
inline constexpr char kEntryEndMagic[8] = {'K', 'I', 'L', 'N', 'E', 'N', 'D', '\x01'};
// entry.cpp static_asserts that the field offsets above add up to these sizes.

/// The first bytes of NVIDIA LTO-IR (the little-endian u32 0x7F4E43ED), as NVRTC 13.0's
/// nvrtcGetLTOIR gives it for every target and source measured (docs/design.md §3).
inline constexpr unsigned char kLtoIrMagic[4] = {0xED, 0x43, 0x4E, 0x7F};
/// The fixed header NVRTC 13.0 writes before the IR itself (measured: every LTO-IR is far longer).
inline constexpr std::size_t kLtoIrMinBytes = 32;

/// Whether `payload` carries LTO-IR's signature (kLtoIrMagic, at least kLtoIrMinBytes).
[[nodiscard]] bool looks_like_ltoir(std::span<const std::byte> payload) noexcept;

/// Why a payload of `kind` is not what its kind says, by the checks the grammar above names (an LTO-IR
/// payload: a CUDA entry, no aux, LTO-IR's signature; a blob: vendor none, no aux), or nullopt. Every reader runs it (a ContentError),
/// and Store::put refuses what it names.
[[nodiscard]] std::optional<std::string> payload_problem(Vendor vendor, PayloadKind kind,
                                                         std::span<const std::byte> payload, std::uint64_t aux_bytes);

struct LoweredName {
  std::string expression;  ///< as requested: "saxpy", "kiln::map<float, 4>"
  std::string lowered;     ///< the symbol in the binary
  friend bool operator==(const LoweredName&, const LoweredName&) = default;
};

struct Entry {
  Vendor vendor = Vendor::none;
  PayloadKind payload_kind = PayloadKind::cubin;
  std::string target;    ///< full target id: "sm_90", "gfx90a:sramecc+:xnack-"
  std::string compiler;  ///< compiler identity and exact version, e.g. "nvrtc 13.0"
  std::int64_t created_unix = 0;
  Hash128 key_hash;           ///< hash of canonical_key (kKeySeed)
  std::string canonical_key;  ///< CanonicalKey::bytes() of the request
  std::vector<LoweredName> names;
  std::vector<std::byte> payload;
  std::vector<std::byte> aux;  ///< PTX beside a CUBIN, else empty
};

/// An entry's header as read from its first bytes (Store::scan_shard): views into the reader's buffer,
/// valid only while the callback that receives it runs. The payload and aux are only counted.
/// Not checksum-verified (see the grammar above).
struct EntryHeaderView {
  Vendor vendor = Vendor::none;
  PayloadKind payload_kind = PayloadKind::cubin;
  std::int64_t created_unix = 0;
  Hash128 key_hash;
  std::string_view target;
  std::string_view compiler;
  std::string_view canonical_key;  ///< empty when not read (ScanDepth::lane)
  std::string_view names_list;     ///< the encoded names list, checked; empty when not read
  std::uint32_t names_count = 0;
  std::uint64_t payload_bytes = 0;
  std::uint64_t aux_bytes = 0;
  std::uint64_t total_bytes = 0;  ///< total_len, equal to the file size
  /// Calls fn(expression, lowered) for each name of names_list (which parsing has checked). Nothing when
  /// the names were not read.
  void for_each_name(const std::function<void(std::string_view expression, std::string_view lowered)>& fn) const;
};

/// Caps applied before any allocation when parsing (hostile input must not make us allocate GiBs).
struct Limits {
  std::uint64_t max_file_bytes = 1ULL << 30;                  // 1 GiB
  std::uint64_t max_payload_bytes = 512ULL << 20;             // 512 MiB
  std::uint32_t max_canonical_bytes = kMaxCanonicalKeyBytes;  // 64 MiB (sources + headers); key.hpp
  std::uint32_t max_text_bytes = 4096;                        // target, compiler
  std::uint32_t max_names = 65536;
  std::uint32_t max_name_bytes = 1U << 20;
};

/// Why bytes are not a valid entry. Every one of these is a *content* error: the caller deletes the
/// file and treats it as a miss.
struct ContentError {
  std::string reason;  ///< e.g. "bad magic", "truncated: 96 bytes, header needs 120", "checksum mismatch"
};

/// Serializes an entry. Writes key_hash as hash128(canonical_key) (whatever entry.key_hash holds) and
/// computes the checksum. Throws only std::bad_alloc, or std::length_error for a canonical key over
/// kMaxCanonicalKeyBytes (with canonical_key_too_long's reason: no reader would accept it) or another
/// field over 4 GiB.
[[nodiscard]] std::vector<std::byte> serialize(const Entry& entry);

/// Parses and verifies (magic, version, sizes, checksum, key_hash == hash(canonical_key)).
/// Never throws on malformed input (only std::bad_alloc); never reads outside `bytes`.
[[nodiscard]] std::variant<Entry, ContentError> parse(std::span<const std::byte> bytes, const Limits& limits = {});

}  // namespace kiln::cache
