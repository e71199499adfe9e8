// Factories of lanes that were compiled out: they say so, naming why (the build's finding).
#include <fmt/format.h>

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

}  // namespace kiln::vendor
