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
// (format, vendor, compiler, target, options, env, names (the name expressions the compiler is given: a plain
// extern "C" kernel name is none, engine/src/c_kernels.hpp), source-name, source, header:<name>..., then
// embedded-headers: the digest of kiln's own headers when the source uses them unchanged, else they
// are header:<name> parts too), sorted where order carries no meaning. The canonical string is stored inside every entry, so a hash collision
// is detected as a key mismatch (a miss), never served as the other kernel's binary.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/base/hash.hpp"

namespace kiln::cache {

/// The largest canonical key an entry may hold (the source, its headers, the options and the rest of the
/// key together). One definition for the writer and the readers: Limits::max_canonical_bytes defaults
/// to it, serialize() and Store::put refuse a longer key, and an engine checks a request's key against it
/// before compiling, so nothing is compiled and written that every later lookup would reject as damaged.
inline constexpr std::uint32_t kMaxCanonicalKeyBytes = 64U << 20;  // 64 MiB

/// Why a canonical key of `length` bytes cannot be cached under `limit`: the reader's reason for such an
/// entry ("canonical key length N exceeds the limit L ..."), so a refused write and a refused read say
/// the same.
[[nodiscard]] std::string canonical_key_too_long(std::uint64_t length, std::uint64_t limit);

/// Throws std::length_error(canonical_key_too_long(...)) when `canonical_key` is longer than `limit`.
/// Call it before compiling a request: a longer key can never be stored or read back.
void check_canonical_key(std::string_view canonical_key, std::uint64_t limit = kMaxCanonicalKeyBytes);

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
/// The first level of a two-level key (a request that reads include folders: dep_manifest.hpp): the key
/// of every part but the "dependencies" part, which names its manifest. `two_level` (if given) says
/// whether `parts` had that part.
[[nodiscard]] CanonicalKey request_key_of(const std::vector<KeyPart>& parts, bool* two_level = nullptr);

/// Parts that differ between two keys, in the order of `a`, then parts only in `b`. Parts are matched
/// by name (the n-th part of a name in `a` with the n-th of that name in `b`). Descriptions read from
/// `a` to `b`: "sm_80 -> sm_90" for short values; "removed -DN=4; added -DN=8" for small multi-line
/// text (options); "N bytes -> M bytes, hash x -> y, first difference at byte B (line L)" for sources and headers;
/// "only in the first key: ..." / "only in the second key: ...". Pass the stored key as `a` and the
/// request as `b`.
[[nodiscard]] std::vector<KeyDifference> diff_keys(const std::vector<KeyPart>& a, const std::vector<KeyPart>& b);

}  // namespace kiln::cache
