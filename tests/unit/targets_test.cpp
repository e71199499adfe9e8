// Target ids: parsing, vendor, warp size, validation against a compiler's list.
#include <catch2/catch.hpp>

#include "kiln/error.hpp"
#include "kiln/tooling/targets.hpp"

using kiln::ConfigError;
using kiln::Vendor;
using kiln::detail::parse_target;

TEST_CASE("NVIDIA targets", "[targets]") {
  auto t = parse_target("sm_90a");
  CHECK(t.vendor == Vendor::cuda);
  CHECK(t.base == "sm_90");
  CHECK(t.full == "sm_90a");
  CHECK(t.arch == "sm_90a");
  CHECK(t.output == kiln::PayloadKind::cubin);
  CHECK(t.warp_size == 32);
  CHECK(parse_target("sm_100f").base == "sm_100");
  auto c = parse_target("compute_90");
  CHECK(c.output == kiln::PayloadKind::ptx);
  CHECK(c.base == "sm_90");
  CHECK(c.arch == "compute_90");
}

TEST_CASE("lto_XY targets give LTO-IR, compiled with the virtual arch", "[targets]") {
  const auto t = parse_target("lto_90");
  CHECK(t.vendor == Vendor::cuda);
  CHECK(t.output == kiln::PayloadKind::ltoir);
  CHECK(t.full == "lto_90");
  CHECK(t.base == "sm_90");        // validated against NVRTC's list like sm_90
  CHECK(t.arch == "compute_90");   // NVRTC refuses -arch=lto_90; -dlto takes the virtual arch
  CHECK(t.warp_size == 32);
  const auto a = parse_target("lto_90a");
  CHECK(a.arch == "compute_90a");
  CHECK(a.base == "sm_90");
  CHECK(parse_target("lto_100f").arch == "compute_100f");
  for (const char* bad : {"lto_", "lto_9", "lto_90x", "lto_sm_90", "LTO_90"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_target(bad), ConfigError);
  }
  CHECK_THROWS_WITH(parse_target("banana"), Catch::Contains("lto_XY"));
}

TEST_CASE("an LTO request for an AMD target names the HIP equivalent kiln does not produce", "[targets][hip]") {
  for (const char* amd : {"lto_gfx90a", "lto_gfx1030"}) {
    INFO(amd);
    try {
      (void)parse_target(amd);
      FAIL("accepted");
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      CHECK(what.find(amd) != std::string::npos);
      CHECK(what.find("-fgpu-rdc") != std::string::npos);
      CHECK(what.find("offload bitcode") != std::string::npos);
      CHECK(what.find("does not produce") != std::string::npos);
    }
  }
}

TEST_CASE("AMD targets with features and wave sizes", "[targets]") {
  auto t = parse_target("gfx90a:sramecc+:xnack-");
  CHECK(t.vendor == Vendor::hip);
  CHECK(t.base == "gfx90a");
  CHECK(t.full == "gfx90a:sramecc+:xnack-");
  CHECK(t.warp_size == 64);
  CHECK(t.output == kiln::PayloadKind::amdgpu_code_object);
  CHECK(t.arch == "gfx90a:sramecc+:xnack-");
  CHECK(parse_target("gfx1030").warp_size == 32);
  CHECK(parse_target("gfx1100").warp_size == 32);
  CHECK(parse_target("gfx908").warp_size == 64);
}

TEST_CASE("malformed targets are ConfigErrors naming the accepted forms", "[targets]") {
  for (const char* bad : {"", "sm_", "sm_9", "sm_9000", "sm_90x", "gfx", "gfx90a:xnack", "gfx90a:bogus+", "banana",
                          "SM_90", "compute_"}) {
    INFO(bad);
    try {
      (void)parse_target(bad);
      FAIL("accepted");
    } catch (const ConfigError& e) {
      CHECK(std::string(e.what()).find("target") != std::string::npos);
    }
  }
}

TEST_CASE("validation against the compiler's list names what is supported", "[targets]") {
  const std::vector<std::string> supported = {"sm_80", "sm_90"};
  CHECK_NOTHROW(kiln::detail::validate_target(parse_target("sm_90a"), supported, "nvrtc test"));
  try {
    kiln::detail::validate_target(parse_target("sm_70"), supported, "nvrtc test");
    FAIL("accepted");
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    CHECK(what.find("sm_70") != std::string::npos);
    CHECK(what.find("sm_80 sm_90") != std::string::npos);
    CHECK(what.find("nvrtc test") != std::string::npos);
  }
}
