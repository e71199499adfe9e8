// Sources: the embedded registry, listed kernels, content hashing, bad input.
#include <catch2/catch.hpp>

#include "kiln/embedded.hpp"
#include "kiln/error.hpp"
#include "kiln/source.hpp"

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

TEST_CASE("content hash covers text and headers and nothing else", "[source]") {
  const auto a = Source::from_text("a.cu", "KILN_KERNEL void k() {}", {{"h.h", "#define X 1"}});
  const auto same = Source::from_text("other-name.cu", "KILN_KERNEL void k() {}", {{"h.h", "#define X 1"}});
  const auto text = Source::from_text("a.cu", "KILN_KERNEL void k() { }", {{"h.h", "#define X 1"}});
  const auto header = Source::from_text("a.cu", "KILN_KERNEL void k() {}", {{"h.h", "#define X 2"}});
  const auto header_name = Source::from_text("a.cu", "KILN_KERNEL void k() {}", {{"g.h", "#define X 1"}});
  CHECK(a.content_hash() == same.content_hash());
  CHECK(a.content_hash() != text.content_hash());
  CHECK(a.content_hash() != header.content_hash());
  CHECK(a.content_hash() != header_name.content_hash());
}

TEST_CASE("empty sources and nameless headers are errors", "[source]") {
  CHECK_THROWS_AS(Source::from_text("x.cu", ""), kiln::ConfigError);
  CHECK_THROWS_AS(Source::from_text("x.cu", "  \n\t"), kiln::ConfigError);
  CHECK_THROWS_AS(Source::from_text("x.cu", "int x;", {{"", "y"}}), kiln::ConfigError);
}
