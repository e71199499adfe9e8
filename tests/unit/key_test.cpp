// CanonicalKey: the grammar, parsing hostile bytes, key differences; Hash128 text form.
#include <catch2/catch.hpp>
#include <random>
#include <stdexcept>

#include "kiln/base/hash.hpp"
#include "kiln/cache/key.hpp"
#include "kiln/includes/include_home.hpp"

using kiln::cache::CanonicalKey;
using kiln::cache::diff_keys;
using kiln::cache::Hash128;
using kiln::cache::KeyPart;

TEST_CASE("key: canonical bytes follow the grammar", "[unit]") {
  CanonicalKey key;
  CHECK(key.bytes() == "kiln-key/1\n");
  key.add("target", "sm_90");
  key.add("header:kiln/rtc.h", std::string("a\nb\0c", 5));
  key.add("empty", "");
  CHECK(key.bytes() == std::string("kiln-key/1\ntarget 5\nsm_90\nheader:kiln/rtc.h 5\na\nb\0c\nempty 0\n\n", 61));
  CHECK(key.hash() == kiln::cache::hash128(key.bytes()));

  const auto parts = CanonicalKey::parse(key.bytes());
  REQUIRE(parts);
  REQUIRE(parts->size() == 3);
  CHECK((*parts)[0] == KeyPart{"target", "sm_90"});
  CHECK((*parts)[1] == KeyPart{"header:kiln/rtc.h", std::string("a\nb\0c", 5)});
  CHECK((*parts)[2] == KeyPart{"empty", ""});

  CHECK_THROWS_AS(key.add("", "x"), std::invalid_argument);
  CHECK_THROWS_AS(key.add("two words", "x"), std::invalid_argument);
  CHECK_THROWS_AS(key.add("new\nline", "x"), std::invalid_argument);
}

TEST_CASE("key: the include home's entry key is the request key with the dependencies part", "[unit]") {
  // The home checks a dependency manifest's answer with entry_key_hash; the engine builds the key with add().
  CanonicalKey request;
  request.add("source", std::string(5000, 'x'));  // past XXH3's short-input paths
  for (const std::string& part : {std::string(), std::string("1 2 3"), std::string(300, '\n')}) {
    CanonicalKey entry = request;
    entry.add("dependencies", part);
    CHECK(kiln::includes::entry_key_hash(request.bytes(), part) == entry.hash());
  }
}

TEST_CASE("key: one change anywhere changes the hash", "[unit]") {
  auto make = [](std::string_view target, std::string_view source) {
    CanonicalKey key;
    key.add("target", target);
    key.add("source", source);
    return key;
  };
  CHECK(make("sm_90", "x").hash() == make("sm_90", "x").hash());
  CHECK(make("sm_90", "x").hash() != make("sm_80", "x").hash());
  CHECK(make("sm_90", "x").hash() != make("sm_90", "y").hash());
  // Lengths make part boundaries unambiguous: moving bytes between parts changes the key.
  CHECK(make("sm_9", "0x").bytes() != make("sm_90", "x").bytes());
}

TEST_CASE("key: parse rejects malformed input without throwing", "[unit]") {
  const std::vector<std::string> bad = {
      "",
      "kiln-key/2\n",
      "kiln-key/1",
      "kiln-key/1\ntarget",
      "kiln-key/1\ntarget 5",
      "kiln-key/1\ntarget 5\nsm_9",
      "kiln-key/1\ntarget 5\nsm_90",     // missing the newline after the value
      "kiln-key/1\ntarget 5\nsm_90x",    // wrong byte after the value
      "kiln-key/1\ntarget 05\nsm_90\n",  // padded length
      "kiln-key/1\ntarget -5\nsm_90\n",
      "kiln-key/1\ntarget +5\nsm_90\n",
      "kiln-key/1\ntarget 5x\nsm_90\n",
      "kiln-key/1\ntarget \nsm_90\n",
      "kiln-key/1\n 5\nsm_90\n",          // empty name
      "kiln-key/1\nta\nrget 5\nsm_90\n",  // newline in the name
      "kiln-key/1\ntarget 99999999999999999999999\nx\n",
      "kiln-key/1\ntarget 18446744073709551615\nx\n",
      "kiln-key/1\ntarget 18446744073709551614\nx\n",
  };
  for (const std::string& bytes : bad) {
    INFO(bytes);
    CHECK_FALSE(CanonicalKey::parse(bytes));
  }
  CHECK(CanonicalKey::parse("kiln-key/1\n") == std::vector<KeyPart>{});
}

TEST_CASE("key: every prefix of a key and random bytes parse safely", "[unit]") {
  CanonicalKey key;
  key.add("format", "1");
  key.add("source", "extern \"C\" __global__ void f() {}\n");
  key.add("options", "-DN=4\n-std=c++17\n");
  const std::string& bytes = key.bytes();
  std::size_t accepted = 0;
  for (std::size_t n = 0; n <= bytes.size(); ++n) {
    const auto parts = CanonicalKey::parse(std::string_view(bytes).substr(0, n));
    if (parts) ++accepted;
  }
  CHECK(accepted == 4);  // the magic alone and after each of the three parts

  std::mt19937 random(1234);
  std::size_t parsed = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string mutated = bytes;
    const int edits = 1 + static_cast<int>(random() % 4);
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = random() % mutated.size();
      switch (random() % 3) {
        case 0:
          mutated[at] = static_cast<char>(random());
          break;
        case 1:
          mutated.erase(at, 1 + random() % 8);
          break;
        default:
          mutated.insert(mutated.begin() + static_cast<std::ptrdiff_t>(at), "0123456789 \n"[random() % 12]);
          break;
      }
      if (mutated.empty()) mutated.push_back('k');
    }
    if (const auto parts = CanonicalKey::parse(mutated)) {
      ++parsed;
      // What parses must re-serialize to the same bytes (one spelling per key).
      CanonicalKey rebuilt;
      for (const KeyPart& part : *parts) rebuilt.add(part.name, part.value);
      CHECK(rebuilt.bytes() == mutated);
    }
  }
  UNSCOPED_INFO(parsed << " of 20000 mutated keys still parsed");
}

TEST_CASE("key: differences read like a why-miss report", "[unit]") {
  const std::string source_a = std::string(3000, 'x') + "\nint a;\n";
  const std::string source_b = std::string(3000, 'x') + "\nint b;\n";
  const std::vector<KeyPart> stored = {{"compiler", "nvrtc 13.0"},
                                       {"target", "sm_80"},
                                       {"options", "-DN=4\n-std=c++17\n"},
                                       {"source", source_a},
                                       {"header:old.h", "x"}};
  const std::vector<KeyPart> request = {{"compiler", "nvrtc 13.0"},
                                        {"target", "sm_90"},
                                        {"options", "-DN=8\n-std=c++17\n"},
                                        {"source", source_b},
                                        {"header:new.h", std::string(100, 'h')}};
  const auto differences = diff_keys(stored, request);
  REQUIRE(differences.size() == 5);
  CHECK(differences[0].name == "target");
  CHECK(differences[0].description == "sm_80 -> sm_90");
  CHECK(differences[1].name == "options");
  CHECK(differences[1].description == "removed -DN=4; added -DN=8");
  CHECK(differences[2].name == "source");
  const std::string hash_a = kiln::cache::hash128(source_a).hex().substr(0, 12);
  const std::string hash_b = kiln::cache::hash128(source_b).hex().substr(0, 12);
  CHECK(differences[2].description ==
        "3008 bytes -> 3008 bytes, hash " + hash_a + " -> " + hash_b + ", first difference at byte 3005 (line 2)");
  CHECK(differences[3].name == "header:old.h");
  CHECK(differences[3].description == "only in the first key: \"x\"");
  CHECK(differences[4].name == "header:new.h");
  CHECK(differences[4].description.starts_with("only in the second key: 100 bytes, hash "));
  CHECK(diff_keys(stored, stored).empty());

  // Repeated names pair up in order.
  const auto repeated = diff_keys({{"name", "a"}, {"name", "b"}}, {{"name", "a"}, {"name", "c"}});
  REQUIRE(repeated.size() == 1);
  CHECK(repeated[0].description == "b -> c");
}

TEST_CASE("hash: canonical text form", "[unit]") {
  const Hash128 h{0x0123456789abcdefULL, 0xfedcba9876543210ULL};
  CHECK(h.hex() == "0123456789abcdeffedcba9876543210");
  CHECK(Hash128::from_hex(h.hex()) == h);
  CHECK(Hash128::from_hex("0123456789ABCDEFFEDCBA9876543210") == h);
  CHECK_FALSE(Hash128::from_hex("0123456789abcdeffedcba987654321"));
  CHECK_FALSE(Hash128::from_hex("0123456789abcdeffedcba98765432100"));
  CHECK_FALSE(Hash128::from_hex("0123456789abcdeffedcba987654321g"));
  CHECK_FALSE(Hash128::from_hex(""));
  CHECK(Hash128{}.hex() == std::string(32, '0'));
  // XXH3-128 of no bytes, seed 0 (xxHash's published test vector).
  CHECK(kiln::cache::hash128(std::string_view()).hex() == "99aa06d3014798d86001c324468d497f");
  CHECK(kiln::cache::hash128("abc", kiln::cache::kKeySeed) != kiln::cache::hash128("abc", kiln::cache::kChecksumSeed));
}
