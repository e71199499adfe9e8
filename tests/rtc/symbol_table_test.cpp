// The lanes' symbol tables (engine/src/lanes/symbols.hpp), with a recording lookup instead of a library:
// which names a table asks for, and how a missing symbol is reported.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/error.hpp"
#include "lanes/cuda_symbols.hpp"
#include "lanes/symbols.hpp"

namespace {

KILN_SYMBOL_TABLE(DriverTable, KILN_CUDA_DRIVER_SYMBOLS)
KILN_SYMBOL_TABLE(NvrtcTable, KILN_NVRTC_SYMBOLS)

/// Answers every name with a distinct non-null address, except those in `absent`; records each name.
struct RecordingLookup {
  std::vector<std::string>* asked;
  std::vector<std::string> absent;
  void* operator()(const char* name) const {
    asked->emplace_back(name);
    if (std::find(absent.begin(), absent.end(), name) != absent.end()) return nullptr;
    return reinterpret_cast<void*>(static_cast<std::uintptr_t>(0x1000 + 16 * asked->size()));
  }
};

}  // namespace

TEST_CASE("the CUDA driver is asked for its symbols by their un-suffixed names", "[lanes][symbols]") {
  // cuda.h #defines cuMemAlloc to cuMemAlloc_v2 (and more); cuGetProcAddress must get the plain name,
  // so that the ABI version the lane passes picks the symbol.
  std::vector<std::string> asked;
  DriverTable table;
  CHECK(table.resolve(RecordingLookup{&asked, {}}) == nullptr);
  for (const char* name : {"cuMemAlloc", "cuMemcpyHtoD", "cuMemsetD8", "cuDeviceTotalMem", "cuStreamDestroy",
                           "cuLaunchKernel", "cuStreamGetCtx", "cuCtxSynchronize", "cuFuncGetParamInfo"}) {
    INFO(name);
    CHECK(std::find(asked.begin(), asked.end(), name) != asked.end());
  }
  for (const std::string& name : asked) {
    INFO(name);
    CHECK(name.find("_v") == std::string::npos);
    CHECK(name.find("_pt") == std::string::npos);
  }
  CHECK(table.cuMemAlloc != nullptr);
}

TEST_CASE("a missing required symbol refuses the library, naming it; a missing optional one stays null",
          "[lanes][symbols]") {
  std::vector<std::string> asked;
  SECTION("optional") {
    DriverTable table;
    table.require(RecordingLookup{&asked, {"cuFuncGetParamInfo"}}, "CUDA driver at /x/libcuda.so.1");
    CHECK(table.cuFuncGetParamInfo == nullptr);
    CHECK(table.cuInit != nullptr);
  }
  SECTION("required: the first missing one is named, with the library and the detail") {
    DriverTable table;
    CHECK_THROWS_AS(table.require(RecordingLookup{&asked, {"cuMemFree", "cuModuleUnload"}}, "CUDA driver at /x", "ABI"),
                    kiln::DeviceUnavailable);
    CHECK_THROWS_WITH(
        table.require(RecordingLookup{&asked, {"cuMemFree", "cuModuleUnload"}}, "CUDA driver at /x", "ABI"),
        "CUDA driver at /x lacks required symbol cuModuleUnload (ABI)");
    CHECK(table.cuInit == nullptr);  // nothing of a refused library is kept
  }
}

TEST_CASE("NVRTC's LTO-IR calls are optional: an NVRTC without them still loads", "[lanes][symbols][ltoir]") {
  std::vector<std::string> asked;
  NvrtcTable table;
  table.require(RecordingLookup{&asked, {"nvrtcGetLTOIRSize", "nvrtcGetLTOIR"}}, "NVRTC at /x/libnvrtc.so.11");
  CHECK(std::find(asked.begin(), asked.end(), "nvrtcGetLTOIRSize") != asked.end());
  CHECK(std::find(asked.begin(), asked.end(), "nvrtcGetLTOIR") != asked.end());
  CHECK(table.nvrtcGetLTOIRSize == nullptr);
  CHECK(table.nvrtcGetLTOIR == nullptr);
  CHECK(table.nvrtcGetCUBIN != nullptr);
  NvrtcTable full;
  full.require(RecordingLookup{&asked, {}}, "NVRTC at /x/libnvrtc.so.13");
  CHECK(full.nvrtcGetLTOIR != nullptr);
}
