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
  CHECK_FALSE(t.ptx_only);
  CHECK(t.warp_size == 32);
  CHECK(parse_target("sm_100f").base == "sm_100");
  auto c = parse_target("compute_90");
  CHECK(c.ptx_only);
  CHECK(c.base == "sm_90");
}

TEST_CASE("AMD targets with features and wave sizes", "[targets]") {
  auto t = parse_target("gfx90a:sramecc+:xnack-");
  CHECK(t.vendor == Vendor::hip);
  CHECK(t.base == "gfx90a");
  CHECK(t.full == "gfx90a:sramecc+:xnack-");
  CHECK(t.warp_size == 64);
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
