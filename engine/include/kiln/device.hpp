#pragma once
// What kiln reports about devices and the vendor libraries it loaded.
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/cache/types.hpp"

namespace kiln {

struct DeviceInfo {
  Vendor vendor = Vendor::none;
  int ordinal = 0;
  std::string name;              ///< "NVIDIA H200"
  std::string target;            ///< "sm_90", "gfx90a:sramecc+:xnack-"
  int warp_size = 32;
  std::uint64_t total_memory = 0;
  int max_threads_per_block = 1024;
  std::uint64_t max_shared_per_block_optin = 0;
  int multiprocessors = 0;
};

/// One vendor library that was loaded: the file and its version (finding a device is not proof that
/// the work ran there; this is).
struct LibraryInfo {
  std::string role;     ///< "driver", "nvrtc", "hip runtime", "hiprtc", "comgr"
  std::string path;     ///< resolved file path
  std::string version;  ///< "13.0", "5.2.21153"
};

/// The state of one vendor lane: compiled in, loaded, and why not.
struct LaneInfo {
  Vendor vendor = Vendor::none;
  bool compiled_in = false;
  bool compiler_loaded = false;
  bool runtime_loaded = false;
  std::string status;  ///< one line: "on", "compiled out: cuda.h not found", "no CUDA driver (searched: ...)"
  /// Whether compiles use precompiled headers: "on (...)" or "off: <why>"; empty without a compiler.
  std::string precompiled_headers;
  std::vector<LibraryInfo> libraries;
  std::vector<DeviceInfo> devices;
};

}  // namespace kiln
