// Argument packing: natural alignment, as the kernel parameter buffer expects (docs/design.md §5:
// (float*, int, double) -> offsets 0, 8, 16).
#include <catch2/catch.hpp>

#include <cstring>

#include "kiln/error.hpp"
#include "kiln/launch.hpp"

TEST_CASE("natural alignment and recorded sizes", "[launch]") {
  kiln::ArgPack pack;
  float* pointer = reinterpret_cast<float*>(0x1000);
  pack.push(pointer);
  pack.push(7);
  pack.push(2.5);
  REQUIRE(pack.count() == 3);
  CHECK(pack.arg_offset(0) == 0);
  CHECK(pack.arg_offset(1) == 8);
  CHECK(pack.arg_offset(2) == 16);
  CHECK(pack.arg_size(0) == 8);
  CHECK(pack.arg_size(1) == 4);
  CHECK(pack.arg_size(2) == 8);
  CHECK(pack.size() == 24);
  int value = 0;
  std::memcpy(&value, pack.data() + 8, sizeof value);
  CHECK(value == 7);
  double d = 0;
  std::memcpy(&d, pack.data() + 16, sizeof d);
  CHECK(d == 2.5);
}

TEST_CASE("small types pack tightly; structs keep their alignment", "[launch]") {
  struct alignas(16) Vec4 {
    float x, y, z, w;
  };
  kiln::ArgPack pack;
  pack.push(static_cast<char>(1));
  pack.push(static_cast<short>(2));
  pack.push(Vec4{1, 2, 3, 4});
  CHECK(pack.arg_offset(0) == 0);
  CHECK(pack.arg_offset(1) == 2);
  CHECK(pack.arg_offset(2) == 16);
  CHECK(pack.size() == 32);
}

TEST_CASE("limits are errors, not overflows", "[launch]") {
  kiln::ArgPack pack;
  struct Big {
    char bytes[4000];
  };
  pack.push(Big{});
  CHECK_THROWS_AS(pack.push(Big{}), kiln::LaunchError);
  kiln::ArgPack bad;
  int x = 0;
  CHECK_THROWS_AS(bad.push_bytes(&x, 4, 3), kiln::LaunchError);
}
