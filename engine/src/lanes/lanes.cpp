// Factories of lanes that were compiled out: they say so, naming why (the build's finding). And what a
// compiler's files say of it before it is loaded (expected_identity), which needs no vendor header.
#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <string_view>

#include "kiln/error.hpp"
#include "lanes/lane.hpp"

namespace kiln::vendor {

#if !KILN_HAVE_CUDA
std::unique_ptr<Compiler> load_nvrtc() { throw DeviceUnavailable("CUDA lane " KILN_CUDA_STATUS); }
std::unique_ptr<Runtime> load_cuda_runtime() { throw DeviceUnavailable("CUDA lane " KILN_CUDA_STATUS); }
std::vector<std::string> nvrtc_search_list() { return {}; }
#endif

#if !KILN_HAVE_HIP
std::unique_ptr<Compiler> load_hiprtc() { throw DeviceUnavailable("HIP lane " KILN_HIP_STATUS); }
std::unique_ptr<Runtime> load_hip_runtime() { throw DeviceUnavailable("HIP lane " KILN_HIP_STATUS); }
std::vector<std::string> hiprtc_search_list() { return {}; }
#endif

std::optional<std::string> expected_identity(Vendor vendor, const std::filesystem::path& library) {
  // HIPRTC's file names carry no version its identity (the HIP runtime's) can be told from.
  if (vendor != Vendor::cuda) return std::nullopt;
  // libnvrtc.so.13 loads libnvrtc-builtins.so.13.0 from beside it: the name carries NVRTC's
  // major.minor, what nvrtcVersion() reports. One version there, or no guess.
  constexpr std::string_view kPrefix = "libnvrtc-builtins.so.";
  const auto number = [](std::string_view v) {
    return !v.empty() && v.size() <= 3 && std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  std::set<std::string> versions;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(library.parent_path(), ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with(kPrefix)) continue;
    const std::string_view version = std::string_view(name).substr(kPrefix.size());
    const std::size_t dot = version.find('.');
    if (dot == std::string_view::npos || !number(version.substr(0, dot)) || !number(version.substr(dot + 1))) continue;
    versions.emplace(version);
  }
  if (ec || versions.size() != 1) return std::nullopt;
  return "nvrtc " + *versions.begin();
}

}  // namespace kiln::vendor
