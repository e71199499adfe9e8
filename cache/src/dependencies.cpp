#include "kiln/cache/dependencies.hpp"

#include <fmt/format.h>

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

}  // namespace kiln::cache
