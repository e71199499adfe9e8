#include "kiln/cache/dependencies.hpp"

#include <fmt/format.h>

#include <charconv>
#include <unordered_map>
#include <unordered_set>

namespace kiln::cache {

std::string canonical_dependencies(const DependencySet& set) {
  std::string out = "dependencies/1\n";
  for (const HeaderRecord& h : set.headers) {
    out += fmt::format("h {} {} {}\n", h.digest.hex(), h.path.size(), h.path);  // length first: any byte may follow
  }
  for (const std::string& path : set.absent) {
    out += fmt::format("a {} {}\n", path.size(), path);
  }
  return out;
}

namespace {

/// "<decimal length> <bytes>\n" at the front of `text`: the bytes, consumed. nullopt when malformed.
std::optional<std::string> take_counted(std::string_view& text) {
  const std::size_t space = text.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  std::size_t length = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + space, length);
  if (error != std::errc() || end != text.data() + space) return std::nullopt;
  text.remove_prefix(space + 1);
  if (text.size() < length + 1 || text[length] != '\n') return std::nullopt;
  std::string out(text.substr(0, length));
  text.remove_prefix(length + 1);
  return out;
}

std::string short_hex(const Hash128& digest) { return digest.hex().substr(0, 12); }

}  // namespace

std::optional<DependencySet> parse_canonical_dependencies(std::string_view text) {
  constexpr std::string_view kHead = "dependencies/1\n";
  if (!text.starts_with(kHead)) return std::nullopt;
  text.remove_prefix(kHead.size());
  DependencySet set;
  while (!text.empty()) {
    if (text.starts_with("h ") && text.size() > 2 + 32 + 1) {
      const std::optional<Hash128> digest = Hash128::from_hex(text.substr(2, 32));
      if (!digest || text[34] != ' ') return std::nullopt;
      text.remove_prefix(35);
      std::optional<std::string> path = take_counted(text);
      if (!path || !set.absent.empty()) return std::nullopt;  // every header comes before every absent path
      set.headers.push_back(HeaderRecord{std::move(*path), {}, false, *digest});
    } else if (text.starts_with("a ")) {
      text.remove_prefix(2);
      std::optional<std::string> path = take_counted(text);
      if (!path) return std::nullopt;
      set.absent.push_back(std::move(*path));
    } else {
      return std::nullopt;
    }
  }
  return set;
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
