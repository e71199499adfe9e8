#pragma once
// What both AMD lanes (hiprtc.cpp, hip_runtime.cpp) need to find their libraries and name versions.
#include <string>
#include <vector>

namespace kiln::vendor {

/// The ROCm library directories searched before the loader's path: $ROCM_PATH/lib, or /opt/rocm/lib.
std::vector<std::string> rocm_dirs();

/// A HIP_VERSION-style number (major * 10^7 + minor * 10^5 + patch) as "major.minor.patch".
std::string hip_version_text(int version);

}  // namespace kiln::vendor
