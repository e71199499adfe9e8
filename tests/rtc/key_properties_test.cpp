// The cache key: every input that can change a binary changes it; nothing else does.
// Uses Engine::describe_key (builds the key without compiling; needs NVRTC for its identity).
#include <catch2/catch.hpp>

#include "catch_run.hpp"
#include "key_part.hpp"

#include <algorithm>

#include "kiln/cache/key.hpp"
#include "kiln/engine.hpp"
#include "kiln/error.hpp"
#include "test_support.hpp"

using namespace kiln;

namespace {

EngineConfig memory_only() {
  EngineConfig config;
  config.cache.disabled = true;
  return config;
}

const char* kText = "#include <kiln/rtc.h>\n#include \"helper.h\"\nKILN_KERNEL void k(float* p) { p[0] = HELPER; }\n";

cache::Hash128 key_of(Engine& e, const std::string& text, const std::string& header, const Options& options,
                      const std::vector<std::string>& names, const std::string& target) {
  return e.describe_key(Source::from_text("k.cu", text, {{"helper.h", header}}), options, names, target).first;
}

std::string part(const std::string& canonical, const std::string& name) { return kiln::test::key_part(canonical, name); }

}  // namespace

TEST_CASE("equal requests give equal keys", "[key]") {
  Engine a(memory_only());
  Engine b(memory_only());
  CHECK(key_of(a, kText, "#define HELPER 1", {}, {"k"}, "sm_90") == key_of(b, kText, "#define HELPER 1", {}, {"k"}, "sm_90"));
}

TEST_CASE("any single byte of the source or a header changes the key", "[key]") {
  Engine e(memory_only());
  const std::string header = "#define HELPER 1.0f";
  const cache::Hash128 base = key_of(e, kText, header, {}, {"k"}, "sm_90");
  std::vector<cache::Hash128> seen{base};
  const std::string text(kText);
  for (std::size_t i = 0; i < text.size(); i += 7) {
    std::string changed = text;
    changed[i] = static_cast<char>(changed[i] ^ 0x20);
    if (changed[i] == '\0') changed[i] = '!';  // a space flipped: a NUL is refused, not keyed
    const cache::Hash128 k = key_of(e, changed, header, {}, {"k"}, "sm_90");
    CHECK(k != base);
  }
  for (std::size_t i = 0; i < header.size(); ++i) {
    std::string changed = header;
    changed[i] = static_cast<char>(changed[i] + 1);
    CHECK(key_of(e, kText, changed, {}, {"k"}, "sm_90") != base);
  }
  // A header's name is part of the key too, and so are kiln's own embedded headers (rtc.h): by their
  // digest while no user header replaces one of them.
  const auto renamed = e.describe_key(Source::from_text("k.cu", kText, {{"helper2.h", header}}), {}, {"k"}, "sm_90");
  CHECK(renamed.first != base);
  const std::string digest = part(renamed.second, "embedded-headers");
  CHECK(digest.size() == 64);  // SHA-256, hex
  CHECK(digest.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(renamed.second.find("KILN_KERNEL") == renamed.second.rfind("KILN_KERNEL"));  // rtc.h's text is not in it
}

TEST_CASE("a user header that replaces an embedded one puts every header's text in the key", "[key]") {
  Engine e(memory_only());
  const Source plain = Source::from_text("k.cu", kText, {{"helper.h", "#define HELPER 1"}});
  CHECK(plain.embedded_headers_intact());
  REQUIRE(plain.user_headers().size() == 1);
  const std::string rtc(std::find_if(plain.headers().begin(), plain.headers().end(),
                                     [](const Header& h) { return h.name == "kiln/rtc.h"; })->text);
  // The same bytes under the embedded name: the compiler sees what it saw before, but the source no
  // longer uses kiln's headers as built, so the key spells the text out (and is a different key).
  const Source replaced = Source::from_text("k.cu", kText, {{"helper.h", "#define HELPER 1"}, {"kiln/rtc.h", rtc}});
  CHECK_FALSE(replaced.embedded_headers_intact());
  CHECK(replaced.content_hash() != plain.content_hash());
  const auto key = e.describe_key(replaced, {}, {"k"}, "sm_90");
  CHECK(part(key.second, "header:kiln/rtc.h") == rtc);
  CHECK(part(key.second, "header:helper.h") == "#define HELPER 1");
  CHECK(key.second.find("embedded-headers") == std::string::npos);
  CHECK(key.first != e.describe_key(plain, {}, {"k"}, "sm_90").first);
  // A changed embedded header changes the key.
  const Source changed = Source::from_text("k.cu", kText, {{"helper.h", "#define HELPER 1"}, {"kiln/rtc.h", rtc + " "}});
  CHECK(e.describe_key(changed, {}, {"k"}, "sm_90").first != key.first);
}

TEST_CASE("options, target, name expressions and compiler identity are in the key", "[key]") {
  Engine e(memory_only());
  const std::string h = "#define HELPER 1";
  const cache::Hash128 base = key_of(e, kText, h, {}, {"k"}, "sm_90");
  CHECK(key_of(e, kText, h, Options{"--fast-math"}, {"k"}, "sm_90") != base);
  CHECK(key_of(e, kText, h, Options{"-DX=1"}, {"k"}, "sm_90") != base);
  CHECK(key_of(e, kText, h, Options{"-DX=2"}, {"k"}, "sm_90") != key_of(e, kText, h, Options{"-DX=1"}, {"k"}, "sm_90"));
  CHECK(key_of(e, kText, h, Options{"-Xcuda=--ftz=true"}, {"k"}, "sm_90") != base);
  CHECK(key_of(e, kText, h, {}, {"k"}, "sm_90a") != base);
  CHECK(key_of(e, kText, h, {}, {"k"}, "sm_80") != base);
  CHECK(key_of(e, kText, h, {}, {"k", "other"}, "sm_90") != base);
  // k is an extern "C" kernel (KILN_KERNEL): found by its symbol, its plain name is no key part
  // (engine/src/c_kernels.hpp; tests/rtc/plain_names_test.cpp); a name expression is one.
  CHECK(key_of(e, kText, h, {}, {}, "sm_90") == base);
  CHECK(key_of(e, kText, h, {}, {"&k"}, "sm_90") != base);
  // A raw flag for the other compiler is ignored by this one, and leaves the key alone.
  CHECK(key_of(e, kText, h, Options{"-Xhip=-O2"}, {"k"}, "sm_90") == base);

  // The compiler's identity and exact version are a key part; any change of a part changes the hash.
  const std::string canonical = e.describe_key(Source::from_text("k.cu", kText, {{"helper.h", h}}), {}, {"k"}, "sm_90").second;
  const std::string compiler = part(canonical, "compiler");
  CHECK(compiler.rfind("nvrtc ", 0) == 0);
  auto parts = cache::CanonicalKey::parse(canonical);
  REQUIRE(parts);
  cache::CanonicalKey rebuilt, other_version;
  for (const auto& p : *parts) {
    rebuilt.add(p.name, p.value);
    other_version.add(p.name, p.name == "compiler" ? std::string("nvrtc 12.9") : p.value);
  }
  CHECK(rebuilt.bytes() == canonical);
  CHECK(rebuilt.hash() == base);
  CHECK(other_version.hash() != base);
}

TEST_CASE("reordering options or name expressions whose order has no meaning keeps the key", "[key]") {
  Engine e(memory_only());
  const std::string h = "#define HELPER 1";
  CHECK(key_of(e, kText, h, Options{"--fast-math", "-DA=1", "-DB=2", "--line-info"}, {"k"}, "sm_90") ==
        key_of(e, kText, h, Options{"-DB=2", "--line-info", "-DA=1", "--fast-math"}, {"k"}, "sm_90"));
  CHECK(key_of(e, kText, h, {}, {"k", "other"}, "sm_90") == key_of(e, kText, h, {}, {"other", "k"}, "sm_90"));
  CHECK(key_of(e, kText, h, {}, {"k", "k"}, "sm_90") == key_of(e, kText, h, {}, {"k"}, "sm_90"));
}

TEST_CASE("the canonical string is kept whole and parses back into named parts", "[key]") {
  Engine e(memory_only());
  const auto [hash, canonical] = e.describe_key(Source::builtin("saxpy"), Options{"--fast-math"}, {"saxpy"}, "sm_90");
  CHECK(hash == cache::hash128(canonical));
  CHECK(part(canonical, "vendor") == "cuda");
  CHECK(part(canonical, "target") == "sm_90");
  CHECK(part(canonical, "names").empty());  // saxpy is extern "C": found by symbol
  CHECK(part(e.describe_key(Source::builtin("map"), {}, {"kiln::map<float, 4>"}, "sm_90").second, "names") ==
        "kiln::map<float, 4>");
  CHECK(part(canonical, "options").find("--use_fast_math") != std::string::npos);
  CHECK(part(canonical, "options").find("-arch=sm_90") != std::string::npos);
  CHECK(part(canonical, "options").find("-DKILN_WARP_SIZE=32") != std::string::npos);
  CHECK(part(canonical, "source") == std::string(Source::builtin("saxpy").text()));
}

int main(int argc, char** argv) {
  try {
    Engine probe(memory_only());
    (void)probe.describe_key(Source::builtin("saxpy"), {}, {"saxpy"}, "sm_90");
  } catch (const DeviceUnavailable& e) {
    test::skip(std::string("NVRTC is not available: ") + e.what());
  }
  return kiln_test::run_catch(argc, argv);
}
