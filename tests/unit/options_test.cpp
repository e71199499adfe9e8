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
  CHECK(message({"-I/usr/include"}).find("include paths are not accepted") != std::string::npos);
  CHECK(message({"-D"}).find("-DNAME") != std::string::npos);
  CHECK(message({"-D1X=2"}).find("-DNAME") != std::string::npos);
  CHECK(message({"-std=c++11"}).find("c++17") != std::string::npos);
  CHECK(message({"--max-registers=banana"}).find("--max-registers") != std::string::npos);
  CHECK(message({""}).find("empty") != std::string::npos);
  CHECK(message({"-Xcuda="}).find("nothing after") != std::string::npos);
  CHECK(message({"-default-device"}).find("added by kiln") != std::string::npos);
}
