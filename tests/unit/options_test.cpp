// Portable options: parsing, canonical form, per-vendor translation, and clear errors.
#include <catch2/catch.hpp>

#include "kiln/error.hpp"
#include "kiln/options.hpp"

using kiln::ConfigError;
using kiln::Options;
using kiln::Vendor;

namespace {
bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}
}  // namespace

TEST_CASE("portable options map to each compiler's spelling", "[options]") {
  const Options o{"--fast-math", "--line-info", "--no-fma", "-DN=4", "-DFLAG", "-UOLD", "-std=c++20"};
  const auto cuda = o.vendor_flags(Vendor::cuda);
  const auto hip = o.vendor_flags(Vendor::hip);
  CHECK(contains(cuda, "--use_fast_math"));
  CHECK(contains(cuda, "-lineinfo"));
  CHECK(contains(cuda, "-fmad=false"));
  CHECK(contains(cuda, "-std=c++20"));
  CHECK(contains(hip, "-ffast-math"));
  CHECK(contains(hip, "-gline-tables-only"));
  CHECK(contains(hip, "-ffp-contract=off"));
  CHECK(contains(hip, "-std=c++20"));
  for (const auto* flags : {&cuda, &hip}) {
    CHECK(contains(*flags, "-DN=4"));
    CHECK(contains(*flags, "-DFLAG"));
    CHECK(contains(*flags, "-UOLD"));
  }
  CHECK_FALSE(contains(cuda, "-ffast-math"));
  CHECK_FALSE(contains(hip, "--use_fast_math"));
}

TEST_CASE("the default standard is c++17 for both compilers", "[options]") {
  CHECK(contains(Options{}.vendor_flags(Vendor::cuda), "-std=c++17"));
  CHECK(contains(Options{}.vendor_flags(Vendor::hip), "-std=c++17"));
}

TEST_CASE("order without meaning does not change the canonical form", "[options]") {
  const Options a{"--fast-math", "-DA=1", "-DB=2", "--line-info"};
  const Options b{"-DB=2", "--line-info", "-DA=1", "--fast-math"};
  CHECK(a.canonical() == b.canonical());
  CHECK(a.portable() == b.portable());
  const Options c{"-DA=1", "-DB=3", "--line-info", "--fast-math"};
  CHECK(a.canonical() != c.canonical());
  CHECK(Options{}.canonical() != Options{"--fast-math"}.canonical());
  // A later definition of the same macro wins, as on a compiler command line.
  CHECK(Options{"-DA=1", "-DA=2"}.canonical() == Options{"-DA=2"}.canonical());
}

TEST_CASE("raw flags keep their order and go to one compiler only", "[options]") {
  const Options o{"-Xcuda=--ftz=true", "-Xhip=-fgpu-flush-denormals-to-zero", "-Xcuda=--prec-div=false"};
  const auto cuda = o.vendor_flags(Vendor::cuda);
  const auto hip = o.vendor_flags(Vendor::hip);
  CHECK(contains(cuda, "--ftz=true"));
  CHECK_FALSE(contains(cuda, "-fgpu-flush-denormals-to-zero"));
  CHECK(contains(hip, "-fgpu-flush-denormals-to-zero"));
  CHECK_FALSE(contains(hip, "--ftz=true"));
  const auto ftz = std::find(cuda.begin(), cuda.end(), "--ftz=true");
  const auto prec = std::find(cuda.begin(), cuda.end(), "--prec-div=false");
  CHECK(ftz < prec);
  CHECK(Options{"-Xcuda=-a", "-Xcuda=-b"}.canonical() != Options{"-Xcuda=-b", "-Xcuda=-a"}.canonical());
}

TEST_CASE("a vendor flag given to the other vendor is a clear error", "[options]") {
  const Options nvrtc_spelling{"--use_fast_math"};
  CHECK(contains(nvrtc_spelling.vendor_flags(Vendor::cuda), "--use_fast_math"));
  try {
    (void)nvrtc_spelling.vendor_flags(Vendor::hip);
    FAIL("expected ConfigError");
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    CHECK(what.find("--use_fast_math") != std::string::npos);
    CHECK(what.find("NVRTC") != std::string::npos);
    CHECK(what.find("--fast-math") != std::string::npos);  // the portable spelling is named
  }
  const Options hiprtc_spelling{"-O3"};
  CHECK(contains(hiprtc_spelling.vendor_flags(Vendor::hip), "-O3"));
  CHECK_THROWS_AS(hiprtc_spelling.vendor_flags(Vendor::cuda), ConfigError);
  CHECK_THROWS_AS(Options{"--max-registers=64"}.vendor_flags(Vendor::hip), ConfigError);
  CHECK(contains(Options{"--max-registers=64"}.vendor_flags(Vendor::cuda), "-maxrregcount=64"));
}

TEST_CASE("bad options are rejected with the option named", "[options]") {
  const auto message = [](std::initializer_list<std::string_view> opts) {
    try {
      Options o(opts);
      return std::string("accepted");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
  };
  CHECK(message({"--frobnicate"}).find("unknown option '--frobnicate'") != std::string::npos);
  CHECK(message({"-arch=sm_90"}).find("names a target") != std::string::npos);
  CHECK(message({"--offload-arch=gfx90a"}).find("names a target") != std::string::npos);
  CHECK(message({"-I"}).find("include folder is empty") != std::string::npos);
  CHECK(message({"-I  "}).find("include folder is empty") != std::string::npos);
  CHECK(message({"--include-path="}).find("include folder is empty") != std::string::npos);
  CHECK(message({"--include-path"}).find("--include-path=DIR") != std::string::npos);
  CHECK(message({"-I/a\n-I/b"}).find("line break") != std::string::npos);
  CHECK(message({"-Xcuda=-I/usr/include"}).find("kiln resolves includes itself") != std::string::npos);
  CHECK(message({"-Xhip=-isystem/usr/include"}).find("kiln resolves includes itself") != std::string::npos);
  CHECK(message({"-D"}).find("-DNAME") != std::string::npos);
  CHECK(message({"-D1X=2"}).find("-DNAME") != std::string::npos);
  CHECK(message({"-std=c++11"}).find("c++17") != std::string::npos);
  CHECK(message({"--max-registers=banana"}).find("--max-registers") != std::string::npos);
  CHECK(message({""}).find("empty") != std::string::npos);
  CHECK(message({"-Xcuda="}).find("nothing after") != std::string::npos);
  CHECK(message({"-default-device"}).find("added by kiln") != std::string::npos);
}

TEST_CASE("include folders: three spellings, kept in order, in the key, never passed to a compiler", "[options]") {
  const Options o{"-I/opt/a", "-I /opt/b", "--include-path=/opt/c", "--fast-math", "-Irelative/d"};
  CHECK(o.include_dirs() == std::vector<std::string>{"/opt/a", "/opt/b", "/opt/c", "relative/d"});
  CHECK_FALSE(o.toolkit_includes());
  for (const Vendor vendor : {Vendor::cuda, Vendor::hip}) {
    for (const std::string& flag : o.vendor_flags(vendor)) {
      CHECK_FALSE(flag.starts_with("-I"));
      CHECK(flag.find("/opt/") == std::string::npos);
    }
  }
  // Part of the canonical text (so of the key), in search order.
  CHECK(o.canonical().find("-I/opt/a\n-I/opt/b\n-I/opt/c\n-Irelative/d\n") != std::string::npos);
  CHECK(Options{"-I/a", "-I/b"}.canonical() != Options{"-I/b", "-I/a"}.canonical());
  CHECK(Options{"-I/a"}.canonical() != Options{}.canonical());
  CHECK(Options{"-I /a"}.canonical() == Options{"--include-path=/a"}.canonical());
  // The portable spelling parses back to the same options, a folder starting with a blank included.
  const Options blank{"--include-path= lead", "-I/x"};
  CHECK(blank.include_dirs() == std::vector<std::string>{" lead", "/x"});
  for (const Options* options : {&o, &blank}) {
    const std::vector<std::string> portable = options->portable();
    CHECK(Options(portable).canonical() == options->canonical());
    CHECK(Options(portable).include_dirs() == options->include_dirs());
  }
  // Option sets without folders keep the canonical text they always had.
  CHECK(Options{"--fast-math", "-DA=1"}.canonical() == "options/1\n--fast-math\n-DA=1\n");
}

TEST_CASE("--toolkit-includes is a flag in the key and adds no compiler flag", "[options]") {
  const Options o{"--toolkit-includes", "-I/opt/a"};
  CHECK(o.toolkit_includes());
  CHECK(o.include_dirs() == std::vector<std::string>{"/opt/a"});
  CHECK(o.canonical() != Options{"-I/opt/a"}.canonical());
  CHECK(o.canonical().ends_with("-I/opt/a\n--toolkit-includes\n"));
  CHECK(o.vendor_flags(Vendor::cuda) == Options{}.vendor_flags(Vendor::cuda));
  CHECK(o.vendor_flags(Vendor::hip) == Options{}.vendor_flags(Vendor::hip));
  CHECK(Options(o.portable()).toolkit_includes());
}

TEST_CASE("--no-default-device is a flag in the key; the engine, not the options, drops -default-device", "[options]") {
  const Options o{"--no-default-device"};
  CHECK(o.no_default_device());
  CHECK_FALSE(Options{}.no_default_device());
  CHECK(o.canonical() != Options{}.canonical());
  CHECK(o.canonical().ends_with("--no-default-device\n"));
  CHECK(o.vendor_flags(Vendor::cuda) == Options{}.vendor_flags(Vendor::cuda));
  CHECK(o.vendor_flags(Vendor::hip) == Options{}.vendor_flags(Vendor::hip));
  CHECK(Options(o.portable()).no_default_device());
}

TEST_CASE("--relocatable-device-code: four spellings, in the key, -rdc=true for NVRTC", "[options]") {
  const Options rdc{"--relocatable-device-code"};
  CHECK(rdc.relocatable());
  for (const char* spelling : {"-rdc", "-rdc=true", "--relocatable-device-code=true"}) {
    INFO(spelling);
    CHECK(Options{spelling}.canonical() == rdc.canonical());
  }
  CHECK(rdc.canonical() != Options{}.canonical());
  CHECK(contains(rdc.portable(), "--relocatable-device-code"));
  CHECK(contains(rdc.vendor_flags(Vendor::cuda), "-rdc=true"));
  CHECK_FALSE(contains(Options{}.vendor_flags(Vendor::cuda), "-rdc=true"));
  // =false is the default, and a later spelling wins.
  CHECK(Options{"-rdc=false"}.canonical() == Options{}.canonical());
  CHECK(Options{"-rdc", "--relocatable-device-code=false"}.canonical() == Options{}.canonical());
  CHECK_FALSE(Options{}.relocatable());
}

TEST_CASE("relocatable code for HIPRTC is refused, naming clang offload bitcode and -fgpu-rdc", "[options][hip]") {
  const Options rdc{"--relocatable-device-code"};
  try {
    (void)rdc.vendor_flags(Vendor::hip);
    FAIL("accepted");
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    CHECK(what.find("--relocatable-device-code") != std::string::npos);
    CHECK(what.find("-fgpu-rdc") != std::string::npos);
    CHECK(what.find("offload bitcode") != std::string::npos);
    CHECK(what.find("does not produce") != std::string::npos);
  }
}

TEST_CASE("raw flags that change the output kind are refused, naming kiln's own spelling", "[options]") {
  // NVRTC: LTO-IR and relocatable code only through an lto_XY target and --relocatable-device-code, so
  // that the kind kiln stores is the kind the compiler gave.
  for (const char* nvrtc : {"-dlto", "-Xcuda=-dlto", "-Xcuda=--dlink-time-opt", "-Xcuda=-rdc=true",
                            "-Xcuda=--relocatable-device-code=true", "-Xcuda=-dc", "-Xcuda=--device-c", "-dc",
                            "--dlink-time-opt", "-Xcuda=-gen-opt-lto"}) {
    INFO(nvrtc);
    try {
      (void)Options{nvrtc};
      FAIL("accepted");
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      CHECK(what.find(nvrtc) != std::string::npos);
      CHECK(what.find("lto_XY") != std::string::npos);
      CHECK(what.find("--relocatable-device-code") != std::string::npos);
    }
  }
  for (const char* hip : {"-fgpu-rdc", "-Xhip=-fgpu-rdc", "-Xhip=-flto", "-Xhip=-flto=thin", "-Xhip=-foffload-lto",
                          "-Xhip=-emit-llvm"}) {
    INFO(hip);
    try {
      (void)Options{hip};
      FAIL("accepted");
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      CHECK(what.find(hip) != std::string::npos);
      CHECK(what.find("offload bitcode") != std::string::npos);
    }
  }
  // Neighbours that change no output kind still pass.
  CHECK_NOTHROW(Options{"--device-debug"});
  CHECK_NOTHROW(Options{"-Xhip=-fno-gpu-rdc"});
  CHECK_NOTHROW(Options{"-Xcuda=--restrict"});
}
