// The compiler's log, read back for the user: the header a failed compile could not open, where kiln looked
// for it, and the source's own include spellings in place of the names kiln rewrote them to.
#include <fmt/format.h>

#include <optional>

#include "header_files.hpp"
#include "resolve.hpp"

namespace kiln::includes {
namespace {

constexpr std::size_t npos = std::string_view::npos;

std::optional<std::string> quoted_after(std::string_view log, std::string_view marker, char close) {
  const std::size_t at = log.find(marker);
  if (at == npos) return std::nullopt;
  const std::size_t begin = at + marker.size();
  const std::size_t end = log.find_first_of(std::string_view(&close, 1), begin);
  const std::size_t line_end = log.find('\n', begin);
  if (end == npos || end > line_end || end == begin) return std::nullopt;
  return std::string(log.substr(begin, end - begin));
}

}  // namespace

std::optional<std::string> missing_include_from_log(std::string_view log) {
  // NVRTC: `catastrophic error: cannot open source file "x"`, or `could not open source file "x"
  // (no directories in search list)` for an <x> include.
  if (auto name = quoted_after(log, "cannot open source file \"", '"')) return name;
  if (auto name = quoted_after(log, "could not open source file \"", '"')) return name;
  // clang (HIPRTC): `fatal error: 'x' file not found`, or `error: 'x' file not found, did you mean 'y'?`.
  for (std::size_t at = log.find("' file not found"); at != npos; at = log.find("' file not found", at + 1)) {
    const std::size_t line = log.rfind('\n', at);
    const std::size_t begin = log.find("error: '", line == npos ? 0 : line + 1);
    if (begin != npos && begin < at) {
      const std::size_t name = begin + 8;
      if (name < at) return std::string(log.substr(name, at - name));
    }
  }
  return std::nullopt;
}

std::string describe_missing_include(std::string_view name, std::span<const std::filesystem::path> folders) {
  if (folders.empty()) {
    return fmt::format(
        "header '{}' is not among the in-memory headers and no include folder was given (pass -I DIR, or "
        "--toolkit-includes for the toolkit's own headers; the compiler searches neither the working directory "
        "nor the source's folder, so a header there needs -I too)",
        name);
  }
  std::string list;
  for (const std::filesystem::path& folder : folders) {
    if (!list.empty()) list += ", ";
    list += folder.string();
  }
  return fmt::format(
      "header '{}' is not among the in-memory headers nor in the include folders searched: {} (the working directory "
      "and the source's folder are not searched: a header there needs -I too)",
      name, list);
}

namespace {

/// Line `number` (from 1) of `text`, without its newline; nullopt past the end.
std::optional<std::string_view> line_of(std::string_view text, std::size_t number) {
  std::size_t start = 0;
  for (std::size_t n = 1; n < number; ++n) {
    start = text.find('\n', start);
    if (start == npos) return std::nullopt;
    ++start;
  }
  if (start > text.size()) return std::nullopt;
  std::string_view line = text.substr(start, std::min(text.find('\n', start), text.size()) - start);
  if (line.ends_with('\r')) line.remove_suffix(1);
  return line;
}

/// A header's text for an error message: nullopt when it cannot be read or is larger than kiln reads. The
/// resolver's own reader (no iostreams in the library: they read through the process's locale).
std::optional<std::string> read_header_text(const std::string& path) {
  std::string text;
  using cache::detail::HeaderRead;
  const HeaderRead got = cache::detail::read_header_file(path.c_str(), text, std::uint64_t{64} << 20, 0, {});
  if (got.status != HeaderRead::Status::ok) return std::nullopt;
  return text;
}

bool include_directive(std::string_view line) {
  const std::size_t first = line.find_first_not_of(" \t");
  return first != npos && (line[first] == '#' || line.substr(first, 2) == "%:") && line.find("include") != npos;
}

/// NVRTC's location line, `<file>(<line>): <kind>: ...`: the file and line, or nullopt.
std::optional<std::pair<std::string, std::size_t>> location(std::string_view line) {
  const std::size_t colon = line.find("): ");
  if (colon == npos) return std::nullopt;
  const std::size_t open = line.rfind('(', colon);
  if (open == npos || open == 0 || open + 1 == colon) return std::nullopt;
  std::size_t number = 0;
  for (std::size_t i = open + 1; i < colon; ++i) {
    if (line[i] < '0' || line[i] > '9') return std::nullopt;
    number = number * 10 + static_cast<std::size_t>(line[i] - '0');
  }
  return std::pair{std::string(line.substr(0, open)), number};
}

}  // namespace

std::string restore_include_spellings(std::string log, std::string_view source_name, std::string_view source_text) {
  if (log.find("include") == npos) return log;
  std::string out;
  out.reserve(log.size());
  std::optional<std::pair<std::string, std::size_t>> at;  // the location the next echoed line is from
  std::string file_text;  // a header's text, read once per echo (the error path only)
  for (std::size_t start = 0; start < log.size();) {
    const std::size_t end = std::min(log.find('\n', start), log.size());
    std::string line = log.substr(start, end - start);
    if (at && include_directive(line)) {
      std::optional<std::string_view> written;
      if (at->first == source_name) {
        written = line_of(source_text, at->second);
      } else if (at->first.starts_with('/')) {
        // A header kiln read from the disk is handed under its path: its own text says how it was written.
        if (std::optional<std::string> text = read_header_text(at->first)) {
          file_text = std::move(*text);
          written = line_of(file_text, at->second);
        }
      }
      if (written && include_directive(*written)) {
        const std::size_t indent = line.find_first_not_of(" \t");
        const std::size_t own = written->find_first_not_of(" \t");
        line = line.substr(0, indent) + std::string(written->substr(own));
      }
    }
    at = location(line);
    out += line;
    if (end < log.size()) out += '\n';
    start = end + 1;
  }
  return out;
}

}  // namespace kiln::includes
