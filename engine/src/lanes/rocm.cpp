#include "lanes/rocm.hpp"

#include <fmt/format.h>

#include "lanes/dynlib.hpp"

namespace kiln::vendor {

std::vector<std::string> rocm_dirs() {
  std::vector<std::string> dirs = env_dirs("ROCM_PATH", {"lib"});
  if (dirs.empty()) dirs.emplace_back("/opt/rocm/lib");
  return dirs;
}

std::string hip_version_text(int version) {
  return fmt::format("{}.{}.{}", version / 10000000, (version / 100000) % 100, version % 100000);
}

}  // namespace kiln::vendor
