// The HTTP tier's object format (remote_object.hpp).
#include "remote_object.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "remote_mac.hpp"

namespace kiln::cache::detail {

std::string frame_object(std::span<const std::byte> entry, const Hash128& key, std::string_view secret,
                         RemoteValue what) {
  std::string object;
  object.reserve(kObjectHeaderBytes + entry.size());
  object += kObjectMagic;
  object += fmt::format("{:016x}", entry.size());
  object += secret.empty() ? std::string(64, '-') : remote_mac(secret, what, key, entry.data(), entry.size());
  object.append(reinterpret_cast<const char*>(entry.data()), entry.size());
  return object;
}

Unframed unframe_object(std::string_view object) {
  Unframed out;
  if (object.size() < kObjectHeaderBytes) {
    out.error = fmt::format("truncated: {} bytes, the object header needs {}", object.size(), kObjectHeaderBytes);
    return out;
  }
  if (!object.starts_with(kObjectMagic)) {
    out.error = "not a kiln object (bad magic)";
    return out;
  }
  const std::string_view size_text = object.substr(8, 16);
  std::uint64_t size = 0;
  for (const char c : size_text) {
    const bool digit = c >= '0' && c <= '9';
    const bool letter = c >= 'a' && c <= 'f';
    if (!digit && !letter) {
      out.error = "malformed size in the object header";
      return out;
    }
    size = size * 16 + static_cast<std::uint64_t>(digit ? c - '0' : c - 'a' + 10);
  }
  if (size != object.size() - kObjectHeaderBytes) {
    out.error = fmt::format("wrong size: the header says {} entry bytes, the object holds {}", size,
                            object.size() - kObjectHeaderBytes);
    return out;
  }
  out.mac = object.substr(24, 64);
  const bool no_mac = std::all_of(out.mac.begin(), out.mac.end(), [](char c) { return c == '-'; });
  const bool hex_mac = std::all_of(out.mac.begin(), out.mac.end(),
                                   [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
  if (!no_mac && !hex_mac) {
    out.error = "malformed MAC in the object header";
    return out;
  }
  out.entry = object.substr(kObjectHeaderBytes);
  return out;
}

}  // namespace kiln::cache::detail
