#include "kiln/source.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "kiln/base/hot_path.hpp"
#include "kiln/embedded.hpp"
#include "kiln/error.hpp"
#include "source_internal.hpp"

namespace kiln {

struct Source::Data {
  std::string name;
  std::string text;
  std::vector<Header> user;         // the caller's headers, sorted by name
  std::vector<Header> merged;       // user headers with the embedded ones not overridden; sorted by name
                                    // (empty without user headers: headers() is then the embedded set)
  bool embedded_intact = true;      // no user header overrides an embedded one
  bool builtin = false;
  cache::Hash128 hash;
};

namespace {

constexpr std::string_view kListedPrefix = "//! kiln-kernels:";

bool is_kernel_file(std::string_view name) { return name.ends_with(".cu"); }

/// kiln's embedded headers (device_src/**/*.h): every source sees them as in-memory headers.
const std::vector<Header>& embedded_headers() {
  static const std::vector<Header> headers = [] {
    std::vector<Header> out;
    for (const EmbeddedFile& file : embedded_files()) {
      if (!is_kernel_file(file.name)) out.push_back({std::string(file.name), std::string(file.text)});
    }
    std::sort(out.begin(), out.end(), [](const Header& a, const Header& b) { return a.name < b.name; });
    return out;
  }();
  return headers;
}

/// Appends a field to a hash record as its length and XXH3-128: records of different inputs differ.
KILN_HOT void append_field(std::string& record, std::string_view bytes) {
  const cache::Hash128 h = cache::hash128(bytes);
  const std::uint64_t words[3] = {bytes.size(), h.high, h.low};
  record.append(reinterpret_cast<const char*>(words), sizeof words);
}

KILN_HOT std::shared_ptr<const Source::Data> finish(std::string name, std::string text, std::vector<Header> headers,
                                                    bool builtin) {
  auto data = std::make_shared<Source::Data>();
  data->name = std::move(name);
  data->text = std::move(text);
  data->builtin = builtin;
  const auto by_name = [](const Header& a, const Header& b) { return a.name < b.name; };
  // Without user headers nothing is copied: the embedded set is shared, and made only when someone
  // asks for headers() (a compile); a cache hit never needs it.
  if (!headers.empty()) {
    std::sort(headers.begin(), headers.end(), by_name);
    data->user = headers;
    for (const Header& h : embedded_headers()) {
      const bool overridden = std::any_of(headers.begin(), headers.end(), [&](const Header& u) { return u.name == h.name; });
      if (overridden) data->embedded_intact = false;
      else headers.push_back(h);
    }
    std::sort(headers.begin(), headers.end(), by_name);
    data->merged = std::move(headers);
  }

  // Content hash: one XXH3-128 over a record holding each field's length and XXH3-128, so no two
  // different inputs give the same record. One-shot hashes only: the same code the key and the entry
  // checksum run, so a process's first request warms it once.
  std::string record;
  const auto field = [&record](std::string_view bytes) { append_field(record, bytes); };
  field(data->name);  // the compiler's name for the file: __FILE__ and debug info carry it into the binary
  field(data->text);
  for (const Header& h : data->user) {
    field(h.name);
    field(h.text);
  }
  if (data->embedded_intact) {
    field(detail::embedded_headers_digest());  // kiln's own headers, by their build-time digest
  } else {
    for (const Header& h : data->merged) {
      field(h.name);
      field(h.text);
    }
  }
  data->hash = cache::hash128(record);
  return data;
}

}  // namespace

Source Source::builtin(std::string_view name) {
  for (const EmbeddedFile& file : embedded_files()) {
    if (!is_kernel_file(file.name)) continue;
    if (file.name == name || file.name.substr(0, file.name.size() - 3) == name) {
      return Source(finish(std::string(file.name), std::string(file.text), {}, true));
    }
  }
  throw ConfigError(fmt::format("no built-in source named '{}' (built-in: {})", name, fmt::join(builtin_names(), ", ")));
}

KILN_HOT Source Source::from_text(std::string name, std::string text, std::vector<Header> headers) {
  if (name.empty()) name = "<source>";
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
    throw ConfigError(fmt::format("source '{}' is empty", name));
  }
  // The compilers take the source, the headers and their names as C strings: whatever follows a NUL
  // byte would never be compiled, while the key holds every byte (the C API and Python refuse it too).
  // (The message is made only for a refusal: this runs on every request's source.)
  const auto refuse_nul = [](const std::string& what, std::size_t at) {
    throw ConfigError(fmt::format(
        "{} holds a NUL byte (at byte {}): a compiler reads it as a C string and would never see what follows", what,
        at));
  };
  const auto printable = [](const std::string& value) { return std::string_view(value).substr(0, value.find('\0')); };
  if (const std::size_t at = name.find('\0'); at != std::string::npos) {
    refuse_nul(fmt::format("the name of source '{}'", printable(name)), at);
  }
  if (const std::size_t at = text.find('\0'); at != std::string::npos) refuse_nul(fmt::format("source '{}'", name), at);
  for (const Header& h : headers) {
    if (h.name.empty()) throw ConfigError(fmt::format("source '{}': a header has an empty name", name));
    if (const std::size_t at = h.name.find('\0'); at != std::string::npos) {
      refuse_nul(fmt::format("source '{}': the name of header '{}'", name, printable(h.name)), at);
    }
    if (const std::size_t at = h.text.find('\0'); at != std::string::npos) {
      refuse_nul(fmt::format("source '{}': header '{}'", name, h.name), at);
    }
  }
  return Source(finish(std::move(name), std::move(text), std::move(headers), false));
}

std::vector<std::string> Source::builtin_names() {
  std::vector<std::string> names;
  for (const EmbeddedFile& file : embedded_files()) {
    if (is_kernel_file(file.name)) names.emplace_back(file.name);
  }
  return names;
}

KILN_HOT const std::string& Source::name() const noexcept { return m_data->name; }
KILN_HOT std::string_view Source::text() const noexcept { return m_data->text; }
std::span<const Header> Source::headers() const noexcept {
  if (m_data->user.empty()) return embedded_headers();
  return m_data->merged;
}
KILN_HOT std::span<const Header> Source::user_headers() const noexcept { return m_data->user; }
KILN_HOT bool Source::embedded_headers_intact() const noexcept { return m_data->embedded_intact; }
bool Source::is_builtin() const noexcept { return m_data->builtin; }
KILN_HOT const cache::Hash128& Source::content_hash() const noexcept { return m_data->hash; }

std::vector<std::string> Source::listed_kernels() const {
  std::vector<std::string> out;
  std::string_view text = m_data->text;
  while (!text.empty()) {
    const std::size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    if (line.starts_with(kListedPrefix)) {
      line.remove_prefix(kListedPrefix.size());
      while (!line.empty()) {
        const std::size_t semicolon = line.find(';');
        std::string_view item = line.substr(0, semicolon);
        const std::size_t first = item.find_first_not_of(" \t\r");
        const std::size_t last = item.find_last_not_of(" \t\r");
        if (first != std::string_view::npos) out.emplace_back(item.substr(first, last - first + 1));
        if (semicolon == std::string_view::npos) break;
        line.remove_prefix(semicolon + 1);
      }
      break;
    }
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return out;
}

}  // namespace kiln
