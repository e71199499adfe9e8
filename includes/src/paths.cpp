#include "paths.hpp"

#include <vector>

namespace kiln::cache::detail {

namespace {
constexpr std::size_t npos = std::string_view::npos;
}  // namespace

bool plainly_normal(std::string_view path) {
  return !path.empty() && path.front() != '.' && path.back() != '/' && path.find("//") == npos &&
         path.find("/.") == npos;
}

std::string normalize(std::string_view path) {
  if (plainly_normal(path)) return std::string(path);
  const bool absolute = !path.empty() && path.front() == '/';
  std::vector<std::string_view> parts;
  std::size_t at = 0;
  while (at <= path.size()) {
    std::size_t slash = path.find('/', at);
    if (slash == npos) slash = path.size();
    const std::string_view part = path.substr(at, slash - at);
    at = slash + 1;
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      if (!parts.empty() && parts.back() != "..") {
        parts.pop_back();
        continue;
      }
      if (absolute) continue;  // "/.." is "/"
    }
    parts.push_back(part);
  }
  std::string out = absolute ? "/" : "";
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += '/';
    out += parts[i];
  }
  return out;
}

std::string join(std::string_view dir, std::string_view name) {
  if (dir.empty() || (!name.empty() && name.front() == '/')) return normalize(name);
  std::string path;
  path.reserve(dir.size() + 1 + name.size());
  path += dir;
  path += '/';
  path += name;
  return plainly_normal(path) ? path : normalize(path);
}

std::string dirname(std::string_view path) {
  const std::size_t slash = path.rfind('/');
  if (slash == npos) return {};
  if (slash == 0) return "/";
  return std::string(path.substr(0, slash));
}

}  // namespace kiln::cache::detail
