// The vendor table (vendor_table.hpp): one row per vendor.
#include "vendor_table.hpp"

#include <fmt/format.h>

#include "kiln/error.hpp"
#include "kiln/tooling/targets.hpp"
#include "lanes/lane.hpp"

namespace kiln::detail {
namespace {

// Flags one compiler knows and the other rejects. Used to accept them for their own compiler and to
// explain the error for the other one.
constexpr Spelling kNvrtcOnly[] = {
    Spelling{"--use_fast_math", false, "--fast-math"}, Spelling{"-use_fast_math", false, "--fast-math"},
    Spelling{"-lineinfo", false, "--line-info"},       Spelling{"--generate-line-info", false, "--line-info"},
    Spelling{"-G", false, "--device-debug"},           Spelling{"--device-debug", false, "--device-debug"},
    Spelling{"-fmad=", true, "--no-fma"},              Spelling{"--fmad=", true, "--no-fma"},
    Spelling{"-maxrregcount=", true, "--max-registers=N"}, Spelling{"--maxrregcount=", true, "--max-registers=N"},
    Spelling{"-ftz=", true, ""},                       Spelling{"--ftz=", true, ""},
    Spelling{"-prec-div=", true, ""},                  Spelling{"--prec-div=", true, ""},
    Spelling{"-prec-sqrt=", true, ""},                 Spelling{"--prec-sqrt=", true, ""},
    Spelling{"-Ofc=", true, ""},                       Spelling{"--extra-device-vectorization", false, ""},
    Spelling{"--restrict", false, ""},
    Spelling{"-restrict", false, ""},                  Spelling{"--split-compile=", true, ""},
    Spelling{"--time=", true, ""},                     Spelling{"--fdevice-time-trace=", true, ""},
    Spelling{"-no-cache", false, ""},                  Spelling{"--minimal", false, ""},
    Spelling{"-device-int128", false, ""},             Spelling{"--Wno-deprecated-declarations", false, ""},
    Spelling{"-w", false, ""},                         Spelling{"--disable-warnings", false, ""},
};
constexpr Spelling kHiprtcOnly[] = {
    Spelling{"-ffast-math", false, "--fast-math"},     Spelling{"-gline-tables-only", false, "--line-info"},
    Spelling{"-g", false, "--device-debug"},           Spelling{"-ffp-contract=", true, "--no-fma"},
    Spelling{"-O0", false, ""},                        Spelling{"-O1", false, ""},
    Spelling{"-O2", false, ""},                        Spelling{"-O3", false, ""},
    Spelling{"-Os", false, ""},                        Spelling{"-fgpu-flush-denormals-to-zero", false, ""},
    Spelling{"-fno-gpu-flush-denormals-to-zero", false, ""},
    Spelling{"-mllvm", false, ""},                     Spelling{"-ftime-trace", false, ""},
    Spelling{"-mcode-object-version=", true, ""},      Spelling{"-munsafe-fp-atomics", false, ""},
    Spelling{"-fno-unsafe-math-optimizations", false, ""}, Spelling{"-Wno-", true, ""},
};

/// Environment variables that silently change HIPRTC's flags: part of every AMD key.
constexpr const char* kHipEnvironment[] = {"HIPRTC_COMPILE_OPTIONS_APPEND", "HIPRTC_LINK_OPTIONS_APPEND",
                                           "GPU_ENABLE_WGP_MODE"};

constexpr VendorRow kRows[] = {
    {
        .vendor = Vendor::cuda,
        .compiler_name = "NVRTC",
        .compiler_role = "nvrtc",
        .compiled_in = KILN_HAVE_CUDA,
        .lane_status = "CUDA lane " KILN_CUDA_STATUS,
        .default_target = "sm_90",
        .load_compiler = vendor::load_nvrtc,
        .load_runtime = vendor::load_cuda_runtime,
        .search_list = vendor::nvrtc_search_list,
        // NVRTC looks up a quoted include next to its includer, which for the source (and an in-memory
        // header) means the process's working directory: --no-source-include turns that off. LTO-IR: NVRTC's
        // -dlto with the virtual arch (NVRTC 13.0 refuses -arch=lto_XY; parse_target gives compute_XY). Unannotated
        // functions are device functions, so kiln's sources build on both vendors (HIPRTC compiles them for
        // the device anyway); --no-default-device keeps NVRTC's own default.
        .request = {.arch = "-arch=",
                    .lto_ir = "-dlto",
                    .default_device = "-default-device",
                    .no_search = "--no-source-include",
                    .key_environment = {}},
        .options = {.fast_math = "--use_fast_math",
                    .line_info = "-lineinfo",
                    .device_debug = "-G",
                    .no_fma = "-fmad=false",
                    .max_registers = "-maxrregcount=",
                    .relocatable = "-rdc=true",
                    .relocatable_refusal = nullptr,
                    .only_prefix = "-Xcuda=",
                    .own = kNvrtcOnly},
        .includes = {.name = "cuda",
                     .opens_absolute_paths = false,
                     .predefined = includes::CompilerTraits::Predefined::nvrtc},
    },
    {
        .vendor = Vendor::hip,
        .compiler_name = "HIPRTC",
        .compiler_role = "hiprtc",
        .compiled_in = KILN_HAVE_HIP,
        .lane_status = "HIP lane " KILN_HIP_STATUS,
        .default_target = "gfx90a",
        .load_compiler = vendor::load_hiprtc,
        .load_runtime = vendor::load_hip_runtime,
        .search_list = vendor::hiprtc_search_list,
        // HIPRTC (clang) searches the system folders (/usr/include, ...) for an <include>: -nostdlibinc turns
        // that off and keeps clang's own builtin headers, which belong to the compiler the key names.
        .request = {.arch = "--offload-arch=",
                    .lto_ir = "",
                    .default_device = "",
                    .no_search = "-nostdlibinc",
                    .key_environment = kHipEnvironment},
        .options = {.fast_math = "-ffast-math",
                    .line_info = "-gline-tables-only",
                    .device_debug = "-g",
                    .no_fma = "-ffp-contract=off",
                    .max_registers = "",
                    .relocatable = "",
                    .relocatable_refusal = hip_relocatable_refusal,
                    .only_prefix = "-Xhip=",
                    .own = kHiprtcOnly},
        // clang opens an #include of an absolute path from the disk, never the in-memory header of that name.
        .includes = {.name = "hip",
                     .opens_absolute_paths = true,
                     .predefined = includes::CompilerTraits::Predefined::none},
    },
};

// One row per vendor, in the enum's order: a vendor added to the enum (kLastVendor) without a row fails here.
static_assert(std::size(kRows) == kVendorCount, "the vendor table has one row per Vendor (kiln/cache/types.hpp)");
constexpr bool rows_in_order() {
  for (std::size_t i = 0; i < std::size(kRows); ++i) {
    if (vendor_index(kRows[i].vendor) != i) return false;
  }
  return true;
}
static_assert(rows_in_order(), "the vendor table's rows follow the Vendor enum's order");

}  // namespace

std::span<const VendorRow, kVendorCount> vendor_rows() noexcept { return kRows; }

const VendorRow* find_vendor_row(Vendor vendor) noexcept {
  const auto number = static_cast<std::size_t>(vendor);
  if (number == 0 || number > kVendorCount) return nullptr;
  return &kRows[number - 1];
}

const VendorRow& vendor_row(Vendor vendor) {
  const VendorRow* row = find_vendor_row(vendor);
  if (row == nullptr) throw ConfigError(fmt::format("no vendor lane for vendor {}", to_string(vendor)));
  return *row;
}

}  // namespace kiln::detail
