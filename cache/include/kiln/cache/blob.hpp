#pragma once
// Entries under a caller's key ("blobs"): bytes a caller stores and finds again by a (namespace, key) of
// its own, e.g. cuda.core's ProgramCacheResource keyed by make_program_cache_key (kiln.cuda_core's
// ProgramCache), or Triton's files (kiln.triton's CacheManager). They are ordinary entries of the store
// (entry.hpp, payload kind 5 `blob`, vendor none, no target, compiler or aux; the names list holds the
// blob's labels, below) under a kiln key made from the caller's, so they get what every entry gets: the checksum and
// the stored key verified on every read (a damaged one is removed, counted and answered as a miss), the size cap and
// its LRU trims, the CLI (`kiln cache ls` shows KIND `blob`, `show` the namespace), packs and the remote tier
// (Storage::find and Storage::store: the paths compiled entries take, without the compile lease).
//
// The kiln key: the canonical key (key.hpp) of three parts, in this order,
//   blob       kBlobDomain ("kiln-blob/1"): the domain tag
//   namespace  the caller's namespace (1 to kMaxBlobNamespaceBytes bytes, no NUL)
//   key        the caller's key bytes (0 to kMaxBlobKeyBytes bytes, any bytes)
// hashed with XXH3-128 (kKeySeed) like every key. A compile's canonical key starts with the part
// `format` (engine/src/requests.cpp), so no blob's canonical key equals a compile's whatever bytes either
// holds; and since every entry stores its canonical key and every read compares it, even a hash
// collision is a miss, never the other's bytes.
//
// Labels: what a caller says its bytes are, for people and the CLI (`kiln cache ls/show/stats`, and
// `--target` of ls, prune and export): up to kMaxBlobLabels (name, value) pairs, stored in the entry's
// names list as (expression = name, lowered = value), in the caller's order. A name is 1 to
// kMaxBlobLabelName bytes of [A-Za-z0-9_.-], unique within the blob; a value 0 to kMaxBlobLabelValue bytes
// without a NUL. Names the CLI reads: `target` (a target id, e.g. sm_90 or gfx942: shown in the TARGET
// column and matched by --target, since a blob's own target field stays empty), `kernel` (the KERNELS
// column), `file` (shown after the namespace in the SOURCE column). Labels are not part of the key: a put
// with other labels replaces the entry. A kiln that predates labels reads such an entry as a blob whose
// names it does not show (the grammar always allowed a blob's names list).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/base/hash.hpp"
#include "kiln/cache/entry.hpp"
#include "kiln/cache/storage.hpp"
#include "kiln/cache/store.hpp"

namespace kiln::cache {

inline constexpr std::string_view kBlobDomain = "kiln-blob/1";
inline constexpr std::size_t kMaxBlobNamespaceBytes = 256;
/// A caller's key is stored inside its entry (the canonical key), so it is kept well below
/// kMaxCanonicalKeyBytes: a key is a digest or a name, not a document.
inline constexpr std::size_t kMaxBlobKeyBytes = 64 * 1024;

/// A blob's kiln key: the hash entries are filed under and the canonical key every read compares.
struct BlobKey {
  Hash128 hash;
  std::string canonical;
};

/// Why (`name_space`, `key`) cannot name a blob (an empty namespace, one holding a NUL byte, a namespace
/// or key over its limit), or nullopt. Never throws except std::bad_alloc.
[[nodiscard]] std::optional<std::string> blob_key_problem(std::string_view name_space, std::span<const std::byte> key);

/// The kiln key of a caller's (namespace, key) (the grammar above). Throws std::invalid_argument with
/// blob_key_problem's reason.
[[nodiscard]] BlobKey blob_key(std::string_view name_space, std::span<const std::byte> key);

/// The namespace of a blob's canonical key; nullopt when `canonical_key` is not a blob's (a compile's, or
/// bytes that do not follow the grammar). For the CLI. Never throws except std::bad_alloc.
[[nodiscard]] std::optional<std::string> blob_namespace(std::string_view canonical_key);
/// The same for a canonical key already split into its parts (CanonicalKey::parse).
[[nodiscard]] std::optional<std::string> blob_namespace(const std::vector<KeyPart>& parts);

/// The entry that stores `data` under `key`. Throws std::invalid_argument when `data` is longer than the
/// store's readers take (Limits::max_payload_bytes), so no write is made that every read would refuse.
[[nodiscard]] Entry blob_entry(const BlobKey& key, std::span<const std::byte> data, const Limits& limits = {});

inline constexpr std::size_t kMaxBlobLabels = 16;
inline constexpr std::size_t kMaxBlobLabelName = 64;
inline constexpr std::size_t kMaxBlobLabelValue = 1024;

/// One label of a blob (see "Labels" above).
struct BlobLabel {
  std::string name;
  std::string value;
  friend bool operator==(const BlobLabel&, const BlobLabel&) = default;
};

/// Why `labels` cannot label a blob (too many, a bad or repeated name, a value too long or holding a NUL),
/// or nullopt. Never throws except std::bad_alloc.
[[nodiscard]] std::optional<std::string> blob_labels_problem(std::span<const BlobLabel> labels);

/// blob_entry with `labels` in its names list. Throws std::invalid_argument as blob_entry, and with
/// blob_labels_problem's reason.
[[nodiscard]] Entry blob_entry(const BlobKey& key, std::span<const std::byte> data, std::span<const BlobLabel> labels,
                               const Limits& limits = {});

/// The labels of a blob entry (its names list; empty for an entry that is not a blob).
[[nodiscard]] std::vector<BlobLabel> blob_labels(const Entry& entry);
/// The value of the label `name` of a blob's header (read at ScanDepth::lane or deeper: a blob's header is
/// always read whole), or nullopt: not a blob, no such label, or the names were not read.
[[nodiscard]] std::optional<std::string_view> blob_label(const EntryHeaderView& header, std::string_view name);
/// The target an entry is for: its own target, or for a blob its `target` label ("" when it has none).
/// What `--target` of the CLI's listings matches.
[[nodiscard]] std::string_view labeled_target(const EntryHeaderView& header);

/// A blob found by blob_get: the verified entry (its payload is the caller's bytes) and where it was.
struct BlobFound {
  std::shared_ptr<const Entry> entry;
  HitOrigin origin = HitOrigin::local;
};

/// The blob under (`name_space`, `key`): the local store, then the packs and the remote (Storage::find).
/// nullopt on a miss, also when what was there was damaged (then it was removed and counted). Throws
/// std::invalid_argument for a bad namespace or key (blob_key_problem); otherwise only std::bad_alloc.
[[nodiscard]] std::optional<BlobFound> blob_get(Storage& storage, std::string_view name_space,
                                                std::span<const std::byte> key);

/// Stores `data` under (`name_space`, `key`), replacing what was there: the local store, then the remote
/// (Storage::store). Returns whether the local store took it (false: it is read-only or memory-only, or
/// the write failed: Store::last_put_error says why). Throws std::invalid_argument for a bad namespace or
/// key, or data over the store's payload limit; otherwise only std::bad_alloc.
bool blob_put(Storage& storage, std::string_view name_space, std::span<const std::byte> key,
              std::span<const std::byte> data);
/// blob_put with labels (see "Labels" above). Throws std::invalid_argument as blob_put and for bad labels.
bool blob_put(Storage& storage, std::string_view name_space, std::span<const std::byte> key,
              std::span<const std::byte> data, std::span<const BlobLabel> labels);

/// Removes the blob under (`name_space`, `key`) from the local store and the remote (Storage::remove).
/// Returns whether a local entry was removed. Throws as blob_get.
bool blob_remove(Storage& storage, std::string_view name_space, std::span<const std::byte> key);

/// The blobs of `name_space` in the local store, counted from their headers (a damaged payload is found
/// when it is read). Packs and the remote are not counted: neither can be listed by namespace. Throws
/// std::invalid_argument for a bad namespace; otherwise only std::bad_alloc.
[[nodiscard]] std::uint64_t blob_count(const Store& store, std::string_view name_space);

/// Removes every blob of `name_space` from the local store (nothing else: other namespaces and compiled
/// entries stay); returns how many were removed. A read-only or memory-only store removes nothing. The
/// remote keeps its copies (it cannot be listed by namespace). Throws as blob_count.
std::uint64_t blob_clear(Store& store, std::string_view name_space);

}  // namespace kiln::cache
