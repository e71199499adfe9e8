// The HTTP tier's object format (remote_object.hpp).
#include "remote_object.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

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

namespace {

/// Whether `bytes` start as an object does (as far as they go): what is not one says so at once, however
/// short it is (an HTML page says "bad magic", not "truncated").
bool starts_as_object(std::string_view bytes) noexcept {
  const std::size_t n = std::min(bytes.size(), kObjectMagic.size());
  return bytes.substr(0, n) == kObjectMagic.substr(0, n);
}

}  // namespace

std::optional<std::uint64_t> declared_object_size(std::string_view head, std::string& why) {
  if (!starts_as_object(head)) {
    why = "not a kiln object (bad magic)";
    return std::nullopt;
  }
  if (head.size() < kObjectSizeBytes) {
    why = fmt::format("truncated: {} bytes, the object header needs {}", head.size(), kObjectHeaderBytes);
    return std::nullopt;
  }
  if (!head.starts_with(kObjectMagic)) {
    why = "not a kiln object (bad magic)";
    return std::nullopt;
  }
  std::uint64_t size = 0;
  for (const char c : head.substr(8, 16)) {
    const bool digit = c >= '0' && c <= '9';
    const bool letter = c >= 'a' && c <= 'f';
    if (!digit && !letter) {
      why = "malformed size in the object header";
      return std::nullopt;
    }
    size = size * 16 + static_cast<std::uint64_t>(digit ? c - '0' : c - 'a' + 10);
  }
  if (size > UINT64_MAX - kObjectHeaderBytes) {
    why = "malformed size in the object header";
    return std::nullopt;
  }
  return kObjectHeaderBytes + size;
}

Unframed unframe_object(std::string_view object) {
  Unframed out;
  if (!starts_as_object(object)) {
    out.error = "not a kiln object (bad magic)";
    return out;
  }
  if (object.size() < kObjectHeaderBytes) {
    out.error = fmt::format("truncated: {} bytes, the object header needs {}", object.size(), kObjectHeaderBytes);
    return out;
  }
  const std::optional<std::uint64_t> total = declared_object_size(object, out.error);
  if (!total) return out;
  if (*total != object.size()) {
    out.error = fmt::format("wrong size: the header says {} entry bytes, the object holds {}",
                            *total - kObjectHeaderBytes, object.size() - kObjectHeaderBytes);
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
