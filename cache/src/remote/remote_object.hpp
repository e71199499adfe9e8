#pragma once
// Private to cache/: the self-authenticating object an HTTP tier stores per entry. A plain HTTP server
// has no atomic multi-key write (Redis's MULTI/EXEC of the entry and its MAC), so the MAC travels in the
// same object as the entry, and the object says its own size (a dependency manifest travels in the same
// frame, its bytes in place of the entry's and its MAC under the manifest label: remote_mac.hpp):
//
//   object := "KILNOBJ1" size mac entry
//   size   := 16 lower-case hex digits: the entry's byte count (the object is 88 + size bytes)
//   mac    := 64 lower-case hex digits of entry_mac(secret, key, entry) (remote_mac.hpp: the same MAC
//             the Redis tier keeps beside its entries), or 64 '-' when the writer had no fleet secret
//   entry  := exactly the bytes cache::serialize() writes
//
// Plain code: compiled with or without libcurl.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "kiln/base/hash.hpp"
#include "remote_mac.hpp"

namespace kiln::cache::detail {

inline constexpr std::string_view kObjectMagic = "KILNOBJ1";
inline constexpr std::size_t kObjectHeaderBytes = 8 + 16 + 64;

/// The object for `entry` (serialized bytes, or a manifest's: `what`) under `key`; with a non-empty
/// `secret`, MAC'd under it.
[[nodiscard]] std::string frame_object(std::span<const std::byte> entry, const Hash128& key, std::string_view secret,
                                       RemoteValue what = RemoteValue::entry);

/// The first bytes of an object that say its size: magic and size (a reader can stop there or at the size).
inline constexpr std::size_t kObjectSizeBytes = 8 + 16;

/// The whole object's size (kObjectHeaderBytes + the entry's) as its first kObjectSizeBytes of `head`
/// declare it, or nullopt with `why` when they are not a kiln object's. Lets a reader refuse a body
/// before it has read it, and stop where the object says it ends.
[[nodiscard]] std::optional<std::uint64_t> declared_object_size(std::string_view head, std::string& why);

/// An object taken apart. `error` is empty when the header is well formed and the size matches.
struct Unframed {
  std::string error;
  std::string_view mac;    ///< 64 characters (all '-': none)
  std::string_view entry;  ///< the entry's bytes
  [[nodiscard]] bool has_mac() const noexcept { return !mac.empty() && mac.front() != '-'; }
};
/// Splits `object` (a view into it is returned: keep `object` alive).
[[nodiscard]] Unframed unframe_object(std::string_view object);

}  // namespace kiln::cache::detail
