#pragma once
// The value of one part of a canonical cache key (kiln/cache/key.hpp), for tests that check what a key names.
#include <catch2/catch.hpp>

#include <string>

#include "kiln/cache/key.hpp"

namespace kiln::test {

/// The value of the part `name` of `canonical`; a test failure when the key does not parse or has no such part.
inline std::string key_part(const std::string& canonical, const std::string& name) {
  const auto parts = cache::CanonicalKey::parse(canonical);
  REQUIRE(parts);
  for (const auto& p : *parts) {
    if (p.name == name) return p.value;
  }
  FAIL("no key part " << name);
  return {};
}

}  // namespace kiln::test
