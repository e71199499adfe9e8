#pragma once
// Private to cache/: the remote tier's entry authentication (remote.hpp, "Authentication"). The fleet
// secret is read from KILN_REMOTE_SECRET_FILE; an entry's MAC is HMAC-SHA-256 under it of a label, the
// key and the entry's bytes, stored as 64 lower-case hex digits under RemoteConfig::mac_key(). Plain
// code: compiled with or without hiredis.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "kiln/base/hash.hpp"

namespace kiln::cache::detail {

/// The fewest bytes a secret may have (after its trailing newline is trimmed).
inline constexpr std::size_t kMinSecretBytes = 16;
/// The most bytes a secret file may have: anything larger is not a secret someone wrote on purpose.
inline constexpr std::size_t kMaxSecretFileBytes = 4096;

/// The secret in `path`: the file's bytes less one trailing "\n" (or "\r\n"). Throws
/// std::invalid_argument naming the variable and the file when it is missing or unreadable, not a
/// regular file, readable or writable by group or others (mode & 077), empty, shorter than
/// kMinSecretBytes or larger than kMaxSecretFileBytes.
[[nodiscard]] std::string read_secret_file(const std::string& path);

/// An HTTP tier's password or bearer token in `path` (named by `variable` in messages): the same rules
/// as read_secret_file but at least 1 byte, and one line only.
[[nodiscard]] std::string read_credential_file(std::string_view variable, const std::string& path);

/// What a remote value holds. Each has its own MAC label, so a MAC made for one is never valid for the
/// other, whatever key it stands under.
enum class RemoteValue : std::uint8_t {
  entry,     ///< a cache entry (cache::serialize()), under its key: label "kiln-remote-entry/1"
  manifest,  ///< a dependency manifest, under manifest_object_key(): label "kiln-remote-manifest/1"
};

/// The MAC of the `what` bytes stored under `key`: HMAC-SHA-256 under the secret of the label, NUL, the
/// key's 32 hex digits, NUL and the bytes; 64 lower-case hex digits. Never throws except std::bad_alloc.
[[nodiscard]] std::string remote_mac(std::string_view secret, RemoteValue what, const Hash128& key, const void* bytes,
                                     std::size_t size);
/// remote_mac() of an entry.
[[nodiscard]] inline std::string entry_mac(std::string_view secret, const Hash128& key, const void* bytes,
                                           std::size_t size) {
  return remote_mac(secret, RemoteValue::entry, key, bytes, size);
}

}  // namespace kiln::cache::detail
