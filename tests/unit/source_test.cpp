// Sources: the embedded registry, listed kernels, content hashing, bad input.
#include <catch2/catch.hpp>

#include <string>

#include "kiln/embedded.hpp"
#include "kiln/error.hpp"
#include "kiln/source.hpp"
#include "sha256.hpp"
#include "source_internal.hpp"

using kiln::Source;

TEST_CASE("every device_src file is embedded, rtc.h among them", "[source]") {
  bool has_rtc = false;
  for (const auto& f : kiln::embedded_files()) {
    CHECK_FALSE(f.text.empty());
    has_rtc = has_rtc || f.name == "kiln/rtc.h";
  }
  CHECK(has_rtc);
  const auto names = Source::builtin_names();
  for (const char* expected : {"saxpy.cu", "map.cu", "reduce.cu", "scan.cu", "matmul.cu", "histogram.cu"}) {
    INFO(expected);
    CHECK(std::find(names.begin(), names.end(), expected) != names.end());
  }
}

TEST_CASE("the embedded-header digest made at build time is the SHA-256 of the embedded headers", "[source]") {
  // The test's own SHA-256 first, on the FIPS 180-4 examples.
  CHECK(kiln::test::sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(kiln::test::sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(kiln::test::sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // The record cmake/KilnEmbedScript.cmake hashes, rebuilt from the bytes libkiln holds.
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string record = "kiln-embedded-headers/1\n";
  int headers = 0;
  for (const kiln::EmbeddedFile& f : kiln::embedded_files()) {
    if (f.name.ends_with(".cu")) continue;
    record += std::string(f.name) + "\n" + std::to_string(f.text.size()) + "\n";
    for (const char c : f.text) {
      record.push_back(kDigits[static_cast<unsigned char>(c) >> 4]);
      record.push_back(kDigits[static_cast<unsigned char>(c) & 0xf]);
    }
    record += "\n";
    ++headers;
  }
  CHECK(headers >= 1);
  CHECK(kiln::detail::embedded_headers_digest() == kiln::test::sha256_hex(record));
}

TEST_CASE("built-in sources list their kernels and see rtc.h", "[source]") {
  for (const std::string& name : Source::builtin_names()) {
    INFO(name);
    const Source s = Source::builtin(name);
    CHECK(s.is_builtin());
    CHECK_FALSE(s.listed_kernels().empty());
    const auto headers = s.headers();
    CHECK(std::any_of(headers.begin(), headers.end(), [](const kiln::Header& h) { return h.name == "kiln/rtc.h"; }));
  }
  CHECK(Source::builtin("saxpy").name() == "saxpy.cu");
  CHECK(Source::builtin("saxpy").listed_kernels() == std::vector<std::string>{"saxpy"});
}

TEST_CASE("unknown built-in names list what exists", "[source]") {
  try {
    (void)Source::builtin("nope");
    FAIL("accepted");
  } catch (const kiln::ConfigError& e) {
    CHECK(std::string(e.what()).find("saxpy.cu") != std::string::npos);
  }
}

TEST_CASE("content hash covers the name, the text and the headers", "[source]") {
  const auto a = Source::from_text("a.cu", "KILN_KERNEL void k() {}", {{"h.h", "#define X 1"}});
  const auto same = Source::from_text("a.cu", "KILN_KERNEL void k() {}", {{"h.h", "#define X 1"}});
  // The name is the compiler's file name: __FILE__ (what assert prints) and debug info carry it.
  const auto name = Source::from_text("other-name.cu", "KILN_KERNEL void k() {}", {{"h.h", "#define X 1"}});
  const auto text = Source::from_text("a.cu", "KILN_KERNEL void k() { }", {{"h.h", "#define X 1"}});
  const auto header = Source::from_text("a.cu", "KILN_KERNEL void k() {}", {{"h.h", "#define X 2"}});
  const auto header_name = Source::from_text("a.cu", "KILN_KERNEL void k() {}", {{"g.h", "#define X 1"}});
  CHECK(a.content_hash() == same.content_hash());
  CHECK(a.content_hash() != name.content_hash());
  CHECK(a.content_hash() != text.content_hash());
  CHECK(a.content_hash() != header.content_hash());
  CHECK(a.content_hash() != header_name.content_hash());
}

TEST_CASE("empty sources and nameless headers are errors", "[source]") {
  CHECK_THROWS_AS(Source::from_text("x.cu", ""), kiln::ConfigError);
  CHECK_THROWS_AS(Source::from_text("x.cu", "  \n\t"), kiln::ConfigError);
  CHECK_THROWS_AS(Source::from_text("x.cu", "int x;", {{"", "y"}}), kiln::ConfigError);
}

// Hardening issue, 6: a source holding a NUL byte was accepted (the compilers read C strings, so what
// follows it was never compiled, while the key held it); the Python API refused it.
TEST_CASE("a NUL byte in a source, a header or either's name is a ConfigError naming where", "[source]") {
  const std::string text = "extern \"C\" __global__ void k() {}\n";
  using Catch::Contains;
  CHECK_THROWS_WITH(Source::from_text("a.cu", text + std::string("// \0 lost\n", 10)),
                    Contains("source 'a.cu' holds a NUL byte (at byte 37)"));
  CHECK_THROWS_WITH(Source::from_text(std::string("a\0.cu", 5), text), Contains("the name of source 'a'"));
  CHECK_THROWS_WITH(Source::from_text("a.cu", text, {{"h.h", std::string("#define A\0\n", 11)}}),
                    Contains("source 'a.cu': header 'h.h' holds a NUL byte (at byte 9)"));
  CHECK_THROWS_WITH(Source::from_text("a.cu", text, {{std::string("h\0.h", 4), "#define A 1\n"}}),
                    Contains("the name of header 'h'"));
  CHECK_THROWS_AS(Source::from_text("a.cu", text + std::string(1, '\0')), kiln::ConfigError);
  CHECK_NOTHROW(Source::from_text("a.cu", text, {{"h.h", "#define A 1\n"}}));
}
