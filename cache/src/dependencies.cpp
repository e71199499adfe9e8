#include "kiln/cache/dependencies.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "kiln/base/xxh3.hpp"

namespace kiln::cache {

/// The stream, fed through a buffer: thousands of short records make few update calls.
struct DependencyDigest::Stream {
  detail::Xxh3Stream xxh3{kKeySeed};
  unsigned char buffer[8192];
  std::size_t used = 0;

  void put(const void* data, std::size_t size) noexcept {
    if (used + size > sizeof(buffer)) {
      xxh3.update(buffer, used);
      used = 0;
      if (size > sizeof(buffer)) {
        xxh3.update(data, size);
        return;
      }
    }
    std::memcpy(buffer + used, data, size);
    used += size;
  }
  [[nodiscard]] Hash128 digest() const noexcept {
    detail::Xxh3Stream copy = xxh3;
    copy.update(buffer, used);
    return copy.digest();
  }
};

DependencyDigest::DependencyDigest() : m_stream(std::make_unique<Stream>()) {}
DependencyDigest::~DependencyDigest() = default;

namespace {

/// One record of the digest: a tag, the length (8 bytes, little endian), the bytes; a header adds its
/// digest. Lengths make the encoding unambiguous whatever bytes a path holds.
template <class Stream>
void put_record(Stream& stream, char tag, std::string_view path, const Hash128* digest) noexcept {
  unsigned char head[1 + 8 + 16];
  std::size_t n = 0;
  head[n++] = static_cast<unsigned char>(tag);
  const std::uint64_t length = path.size();
  for (int i = 0; i < 8; ++i) head[n++] = static_cast<unsigned char>(length >> (8 * i));
  if (digest != nullptr) {
    for (int i = 0; i < 8; ++i) head[n++] = static_cast<unsigned char>(digest->high >> (8 * i));
    for (int i = 0; i < 8; ++i) head[n++] = static_cast<unsigned char>(digest->low >> (8 * i));
  }
  stream.put(head, n);
  stream.put(path.data(), path.size());
}

constexpr std::string_view kHead = "dependencies/2 headers=";

}  // namespace

void DependencyDigest::add_header(std::string_view path, const Hash128& digest) noexcept {
  put_record(*m_stream, 'h', path, &digest);
  ++m_headers;
}

void DependencyDigest::add_absent(std::string_view path) noexcept {
  put_record(*m_stream, 'a', path, nullptr);
  ++m_absent;
}

DependencySummary DependencyDigest::summary() const noexcept {
  return DependencySummary{m_headers, m_absent, m_stream->digest()};
}

std::string DependencyDigest::text() const { return canonical_dependencies(summary()); }

std::string canonical_dependencies(const DependencySummary& summary) {
  return fmt::format("{}{} absent={} xxh3={}", kHead, summary.headers, summary.absent, summary.digest.hex());
}

std::string canonical_dependencies(const DependencySet& set) {
  DependencyDigest digest;
  for (const HeaderRecord& h : set.headers) digest.add_header(h.path, h.digest);
  for (const std::string& path : set.absent) digest.add_absent(path);
  return digest.text();
}

namespace {

/// A decimal number at the front of `text`, consumed.
std::optional<std::uint64_t> take_number(std::string_view& text) noexcept {
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end == text.data()) return std::nullopt;
  text.remove_prefix(static_cast<std::size_t>(end - text.data()));
  return value;
}

bool take(std::string_view& text, std::string_view literal) noexcept {
  if (!text.starts_with(literal)) return false;
  text.remove_prefix(literal.size());
  return true;
}

std::string short_hex(const Hash128& digest) { return digest.hex().substr(0, 12); }

}  // namespace

std::optional<DependencySummary> parse_canonical_dependencies(std::string_view text) noexcept {
  DependencySummary summary;
  if (!take(text, kHead)) return std::nullopt;
  const std::optional<std::uint64_t> headers = take_number(text);
  if (!headers || !take(text, " absent=")) return std::nullopt;
  const std::optional<std::uint64_t> absent = take_number(text);
  if (!absent || !take(text, " xxh3=")) return std::nullopt;
  const std::optional<Hash128> digest = Hash128::from_hex(text);
  if (!digest) return std::nullopt;
  summary.headers = *headers;
  summary.absent = *absent;
  summary.digest = *digest;
  return summary;
}

std::vector<std::string> describe_dependency_changes(const DependencySet& a, const DependencySet& b,
                                                     std::size_t max_lines) {
  std::unordered_map<std::string_view, const HeaderRecord*> b_headers;
  for (const HeaderRecord& h : b.headers) b_headers.try_emplace(h.path, &h);
  std::unordered_set<std::string_view> a_paths;
  for (const HeaderRecord& h : a.headers) a_paths.insert(h.path);
  const std::unordered_set<std::string_view> a_absent(a.absent.begin(), a.absent.end());
  const std::unordered_set<std::string_view> b_absent(b.absent.begin(), b.absent.end());

  std::vector<std::string> lines;
  std::size_t more = 0;
  const auto add = [&](std::string line) {
    if (lines.size() < max_lines) lines.push_back(std::move(line));
    else ++more;
  };
  for (const HeaderRecord& h : a.headers) {
    const auto it = b_headers.find(h.path);
    if (it != b_headers.end()) {
      if (it->second->digest != h.digest) {
        add(fmt::format("{}: bytes differ ({}.. -> {}..)", h.path, short_hex(h.digest), short_hex(it->second->digest)));
      }
    } else if (b_absent.contains(h.path)) {
      add(fmt::format("{}: vanished (read by the first, probed and absent in the second)", h.path));
    } else {
      add(fmt::format("{}: read by the first only", h.path));
    }
  }
  for (const HeaderRecord& h : b.headers) {
    if (a_paths.contains(h.path)) continue;
    if (a_absent.contains(h.path)) {
      add(fmt::format("{}: appeared (probed and absent in the first, read by the second: it shadows a header "
                      "found in a later folder)",
                      h.path));
    } else {
      add(fmt::format("{}: read by the second only", h.path));
    }
  }
  std::size_t probes_only = 0;  // probed-absent differences that no header change above explains
  for (const std::string& path : a.absent) probes_only += (!b_absent.contains(path) && !b_headers.contains(path)) ? 1 : 0;
  for (const std::string& path : b.absent) probes_only += (!a_absent.contains(path) && !a_paths.contains(path)) ? 1 : 0;
  if (probes_only != 0) add(fmt::format("{} path(s) probed and found absent by only one of them", probes_only));
  if (more != 0) lines.push_back(fmt::format("... and {} more", more));
  return lines;
}

}  // namespace kiln::cache
