#pragma once
// The cache key: XXH3-128 over a canonical byte string of every input that can change a binary.
//
// Canonical string grammar (all lengths decimal ASCII, no padding):
//   key    := "kiln-key/1\n" part*
//   part   := name " " length "\n" value "\n"
//   name   := one or more bytes other than space and newline (e.g. "target", "header:kiln/rtc.h")
//   length := "0" | [1-9][0-9]*      (the value's size in bytes; no leading zeros, so one spelling per key)
//   value  := length raw bytes (may hold any byte, newlines included)
// Parts appear in the order the builder adds them; the engine adds them in one fixed order
// (format, vendor, compiler, target, options, env, names, source, header:<name>..., then
// embedded-headers: the digest of kiln's own headers when the source uses them unchanged, else they
// are header:<name> parts too), sorted where order carries no meaning. The canonical string is stored inside every entry, so a hash collision
// is detected as a key mismatch (a miss), never served as the other kernel's binary.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/base/hash.hpp"

namespace kiln::cache {

struct KeyPart {
  std::string name;
  std::string value;
  friend bool operator==(const KeyPart&, const KeyPart&) = default;
};

class CanonicalKey {
 public:
  CanonicalKey();
  /// Appends one part. Throws std::invalid_argument when the name is empty or holds a space/newline.
  void add(std::string_view name, std::string_view value);
  /// The canonical bytes as built so far.
  [[nodiscard]] const std::string& bytes() const noexcept { return m_bytes; }
  /// XXH3-128 (seed kKeySeed) of bytes().
  [[nodiscard]] Hash128 hash() const noexcept;
  /// Splits canonical bytes back into parts; nullopt when they do not follow the grammar. Never throws
  /// on malformed input (it is read from disk and may be hostile).
  static std::optional<std::vector<KeyPart>> parse(std::string_view bytes);

 private:
  std::string m_bytes;
};

/// One difference between two parsed keys, for `kiln cache why-miss` and `show`.
struct KeyDifference {
  std::string name;         ///< part name, e.g. "target" or "header:kiln/rtc.h"
  std::string description;  ///< e.g. "sm_80 -> sm_90", "4120 bytes differ (hash 3f.. -> 9a..)", "only in request"
};
/// Parts that differ between two keys, in the order of `a`, then parts only in `b`. Parts are matched
/// by name (the n-th part of a name in `a` with the n-th of that name in `b`). Descriptions read from
/// `a` to `b`: "sm_80 -> sm_90" for short values; "removed -DN=4; added -DN=8" for small multi-line
/// text (options); "N bytes -> M bytes, hash x -> y, first difference at byte B (line L)" for sources and headers;
/// "only in the first key: ..." / "only in the second key: ...". Pass the stored key as `a` and the
/// request as `b`.
[[nodiscard]] std::vector<KeyDifference> diff_keys(const std::vector<KeyPart>& a, const std::vector<KeyPart>& b);

}  // namespace kiln::cache
