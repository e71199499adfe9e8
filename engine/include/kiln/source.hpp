#pragma once
// A kernel source: embedded by name, or text handed in at run time with in-memory headers.
// A Source is cheap to copy (shared, immutable) and hashes its content once, at construction, so
// looking a kernel up again never hashes source text.
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/base/hash.hpp"

namespace kiln {

/// An in-memory header: what `#include "name"` (or <name>) resolves to.
struct Header {
  std::string name;
  std::string text;
};

class Source {
 public:
  /// An embedded source of device_src/, by file name with or without ".cu" ("saxpy" or "saxpy.cu").
  /// Throws ConfigError listing the built-in names when there is none.
  static Source builtin(std::string_view name);
  /// Source text given at run time. `name` is the file name the compiler is given: it appears in
  /// compiler messages and in `__FILE__` (so in what `assert` prints), and it is part of the cache key.
  /// Throws ConfigError when the text is empty. Every source also sees the embedded headers (kiln/rtc.h).
  static Source from_text(std::string name, std::string text, std::vector<Header> headers = {});
  /// The names of the built-in kernel sources ("saxpy.cu", ...).
  static std::vector<std::string> builtin_names();

  [[nodiscard]] const std::string& name() const noexcept;
  [[nodiscard]] std::string_view text() const noexcept;
  /// The user's headers followed by kiln's embedded headers, sorted by name.
  [[nodiscard]] std::span<const Header> headers() const noexcept;
  /// Only the headers handed to from_text (sorted by name); empty for built-in sources.
  [[nodiscard]] std::span<const Header> user_headers() const noexcept;
  /// True when no user header has the name of an embedded one: the source then sees kiln's embedded
  /// headers exactly as built, and cache keys name them by their digest instead of their text.
  [[nodiscard]] bool embedded_headers_intact() const noexcept;
  [[nodiscard]] bool is_builtin() const noexcept;
  /// The kernels a source lists on its `//! kiln-kernels: a; ns::b<float, 4>` line (names or name
  /// expressions, `;`-separated); empty when it has none. What `kiln prewarm --all-builtin` compiles.
  [[nodiscard]] std::vector<std::string> listed_kernels() const;
  /// XXH3-128 over the name, the text, the user's headers (name and bytes) and the embedded headers
  /// (their digest when intact, else name and bytes); computed once.
  [[nodiscard]] const cache::Hash128& content_hash() const noexcept;

  struct Data;
 private:
  explicit Source(std::shared_ptr<const Data> data) : m_data(std::move(data)) {}
  std::shared_ptr<const Data> m_data;
};

}  // namespace kiln
