#pragma once
// Private to cache/: the remote tier's entry authentication (remote.hpp, "Authentication"). The fleet
// secret is read from KILN_REMOTE_SECRET_FILE; an entry's MAC is HMAC-SHA-256 under it of a label, the
// key and the entry's bytes, stored as 64 lower-case hex digits under RemoteConfig::mac_key(). Plain
// code: compiled with or without hiredis.
#include <cstddef>
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

/// The MAC of the entry `bytes` stored under `key`: 64 lower-case hex digits. Never throws except
/// std::bad_alloc.
[[nodiscard]] std::string entry_mac(std::string_view secret, const Hash128& key, const void* bytes, std::size_t size);

}  // namespace kiln::cache::detail
