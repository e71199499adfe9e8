#include "kiln/cache/key.hpp"

#include "kiln/cache/dependencies.hpp"
#include "kiln/base/hot_path.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <stdexcept>

namespace kiln::cache {
namespace {

constexpr std::string_view kKeyMagic = "kiln-key/1\n";

bool valid_part_name(std::string_view name) noexcept {
  return !name.empty() && name.find_first_of(" \n") == std::string_view::npos;
}

/// A value shown as-is in a difference: short, one line, printable ASCII.
bool is_short_text(std::string_view value) noexcept {
  if (value.size() > 64) return false;
  return std::all_of(value.begin(), value.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
}

/// Printable text (tabs and newlines allowed): values such as the canonical option list.
bool is_text(std::string_view value) noexcept {
  return std::all_of(value.begin(), value.end(),
                     [](char c) { return (c >= 0x20 && c < 0x7f) || c == '\n' || c == '\t'; });
}

std::vector<std::string_view> split_lines(std::string_view value) {
  std::vector<std::string_view> lines;
  while (!value.empty()) {
    const std::size_t end = value.find('\n');
    lines.push_back(value.substr(0, end));
    if (end == std::string_view::npos) break;
    value.remove_prefix(end + 1);
  }
  return lines;
}

std::string short_hash(std::string_view value) { return hash128(value).hex().substr(0, 12); }

/// One-line rendering of a value that stands alone ("only in ...").
std::string render_value(std::string_view value) {
  if (is_short_text(value)) return fmt::format("\"{}\"", value);
  return fmt::format("{} bytes, hash {}", value.size(), short_hash(value));
}

/// Line-level difference of two text values with few lines: "removed a; added b". Empty when not
/// applicable.
std::string describe_line_changes(std::string_view before, std::string_view after) {
  constexpr std::size_t kMaxLines = 64;
  constexpr std::size_t kMaxBytes = 1024;  // option lists, not sources
  if (before.size() > kMaxBytes || after.size() > kMaxBytes || !is_text(before) || !is_text(after)) return {};
  std::vector<std::string_view> old_lines = split_lines(before);
  std::vector<std::string_view> new_lines = split_lines(after);
  if (old_lines.size() > kMaxLines || new_lines.size() > kMaxLines) return {};
  std::vector<std::string> changes;
  auto note_missing = [&changes](const auto& lines, const auto& other, std::string_view verb) {
    for (std::string_view line : lines) {
      if (std::find(other.begin(), other.end(), line) == other.end())
        changes.push_back(fmt::format("{} {}", verb, line));
    }
  };
  note_missing(old_lines, new_lines, "removed");
  note_missing(new_lines, old_lines, "added");
  if (changes.empty()) return "same lines, different order";
  return fmt::format("{}", fmt::join(changes, "; "));
}

std::string describe_change(std::string_view before, std::string_view after) {
  if (is_short_text(before) && is_short_text(after)) return fmt::format("{} -> {}", before, after);
  if (std::string lines = describe_line_changes(before, after); !lines.empty()) return lines;
  // Large or binary values (sources, headers): sizes, hashes and where they first differ.
  const auto mismatch = std::mismatch(before.begin(), before.end(), after.begin(), after.end());
  const auto offset = static_cast<std::size_t>(mismatch.first - before.begin());
  const auto line = 1 + std::count(before.begin(), before.begin() + static_cast<std::ptrdiff_t>(offset), '\n');
  return fmt::format("{} bytes -> {} bytes, hash {} -> {}, first difference at byte {} (line {})", before.size(),
                     after.size(), short_hash(before), short_hash(after), offset, line);
}

}  // namespace

std::string canonical_key_too_long(std::uint64_t length, std::uint64_t limit) {
  const std::string most =
      limit % (1U << 20) == 0 ? fmt::format("{} MiB", limit >> 20) : fmt::format("{} bytes", limit);
  return fmt::format(
      "canonical key length {} exceeds the limit {} (the source, its headers and the options together may "
      "hold at most {})",
      length, limit, most);
}

void check_canonical_key(std::string_view canonical_key, std::uint64_t limit) {
  if (canonical_key.size() > limit) throw std::length_error(canonical_key_too_long(canonical_key.size(), limit));
}

CanonicalKey::CanonicalKey() : m_bytes(kKeyMagic) {}

KILN_HOT void CanonicalKey::add(std::string_view name, std::string_view value) {
  if (!valid_part_name(name)) {
    throw std::invalid_argument(fmt::format("cache key part name \"{}\" is empty or holds a space or newline", name));
  }
  // Geometric growth: a key is built from ~10 parts, the last ones (source, headers) the largest;
  // reserving exactly per part would reallocate and copy the whole key on every add.
  const std::size_t needed = m_bytes.size() + name.size() + value.size() + 24;
  if (needed > m_bytes.capacity()) m_bytes.reserve(std::max(needed, 2 * m_bytes.capacity()));
  m_bytes.append(name);
  m_bytes.push_back(' ');
  m_bytes.append(std::to_string(value.size()));
  m_bytes.push_back('\n');
  m_bytes.append(value);
  m_bytes.push_back('\n');
}

KILN_HOT Hash128 CanonicalKey::hash() const noexcept { return hash128(m_bytes, kKeySeed); }

CanonicalKey request_key_of(const std::vector<KeyPart>& parts, bool* two_level) {
  CanonicalKey request_key;
  bool found = false;
  for (const KeyPart& part : parts) {
    if (part.name == "dependencies") {
      found = true;
    } else {
      request_key.add(part.name, part.value);
    }
  }
  if (two_level != nullptr) *two_level = found;
  return request_key;
}

std::optional<std::vector<KeyPart>> CanonicalKey::parse(std::string_view bytes) {
  try {
    if (bytes.substr(0, kKeyMagic.size()) != kKeyMagic) return std::nullopt;
    bytes.remove_prefix(kKeyMagic.size());
    std::vector<KeyPart> parts;
    while (!bytes.empty()) {
      const std::size_t space = bytes.find_first_of(" \n");
      if (space == std::string_view::npos || space == 0 || bytes[space] != ' ') return std::nullopt;
      const std::string_view name = bytes.substr(0, space);
      bytes.remove_prefix(space + 1);
      const std::size_t newline = bytes.find('\n');
      if (newline == std::string_view::npos || newline == 0) return std::nullopt;
      const std::string_view digits = bytes.substr(0, newline);
      if (digits.size() > 1 && digits[0] == '0') return std::nullopt;  // no padding: one spelling per key
      std::size_t length = 0;
      const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), length);
      if (error != std::errc{} || end != digits.data() + digits.size()) return std::nullopt;
      bytes.remove_prefix(newline + 1);
      // value + its terminating newline must fit in what is left (written so it cannot overflow).
      if (length >= bytes.size() || bytes[length] != '\n') return std::nullopt;
      parts.push_back(KeyPart{std::string(name), std::string(bytes.substr(0, length))});
      bytes.remove_prefix(length + 1);
    }
    return parts;
  } catch (const std::bad_alloc&) {
    return std::nullopt;
  }
}

std::vector<KeyDifference> diff_keys(const std::vector<KeyPart>& a, const std::vector<KeyPart>& b) {
  std::vector<KeyDifference> differences;
  std::vector<bool> matched(b.size(), false);
  for (const KeyPart& part : a) {
    // The first not yet matched part of `b` with the same name (names may repeat).
    std::size_t j = 0;
    while (j < b.size() && (matched[j] || b[j].name != part.name)) ++j;
    if (j == b.size()) {
      differences.push_back({part.name, fmt::format("only in the first key: {}", render_value(part.value))});
      continue;
    }
    matched[j] = true;
    if (b[j].value == part.value) continue;
    if (part.name == "dependencies") {
      // The key holds the headers' digest only (their list is in the dependency manifest).
      const std::optional<DependencySummary> first = parse_canonical_dependencies(part.value);
      const std::optional<DependencySummary> second = parse_canonical_dependencies(b[j].value);
      if (first && second) {
        differences.push_back(
            {part.name, fmt::format("the headers read differ ({} header(s), {} path(s) probed absent -> {}, {})",
                                    first->headers, first->absent, second->headers, second->absent)});
        continue;
      }
    }
    differences.push_back({part.name, describe_change(part.value, b[j].value)});
  }
  for (std::size_t j = 0; j < b.size(); ++j) {
    if (!matched[j]) {
      differences.push_back({b[j].name, fmt::format("only in the second key: {}", render_value(b[j].value))});
    }
  }
  return differences;
}

}  // namespace kiln::cache
