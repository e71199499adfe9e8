// The request path's code section (base/internal/kiln/base/hot_path.hpp): the linker gathers the functions marked
// KILN_HOT into one span of libkiln, and only those, so prefetch_hot_path() fetches the request path.
#include <dlfcn.h>
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <string>

#include "kiln/base/hot_path.hpp"
#include "kiln/base/hash.hpp"
#include "kiln/source.hpp"
#include "ptx.hpp"

namespace {

/// The address of a libkiln function, checked to lie in libkiln itself (not a stub in this program).
template <class F>
const char* in_libkiln(F function) {
  const auto* address = reinterpret_cast<const char*>(function);
  Dl_info info{};
  REQUIRE(dladdr(address, &info) != 0);
  INFO("function found in " << (info.dli_fname != nullptr ? info.dli_fname : "?"));
  REQUIRE(info.dli_fname != nullptr);
  REQUIRE(std::strstr(info.dli_fname, "libkiln") != nullptr);
  return address;
}

bool inside(const kiln::detail::HotSpan& span, const char* address) {
  return address >= span.begin && address < span.end;
}

}  // namespace

TEST_CASE("the request path's functions share one code section", "[hot_path]") {
  const kiln::detail::HotSpan span = kiln::detail::hot_path_span();
#if defined(__ELF__) && (defined(__GNUC__) || defined(__clang__))
  REQUIRE(span.begin != nullptr);
  const auto bytes = static_cast<std::size_t>(span.end - span.begin);
  CHECK(bytes > 4 * 1024);    // the request path is more than a few functions
  CHECK(bytes < 512 * 1024);  // and far less than libkiln: only what is marked

  // Marked: in the span, from both parts of libkiln (engine/ and cache/).
  CHECK(inside(span, in_libkiln(&kiln::Source::from_text)));
  CHECK(inside(span, in_libkiln(&kiln::ptx::entry_param_sizes)));
  using HashText = kiln::cache::Hash128 (*)(std::string_view, std::uint64_t) noexcept;
  CHECK(inside(span, in_libkiln(static_cast<HashText>(&kiln::cache::hash128))));
  // Not marked (the request path does not run them): outside it.
  CHECK_FALSE(inside(span, in_libkiln(&kiln::Source::builtin_names)));
  CHECK_FALSE(inside(span, in_libkiln(&kiln::detail::prefetch_hot_path)));
#else
  CHECK(span.begin == nullptr);
#endif
}

TEST_CASE("prefetching the request path is safe to repeat", "[hot_path]") {
  for (int i = 0; i < 3; ++i) kiln::detail::prefetch_hot_path();
  // Still runs the request path's code afterwards: a source built after the prefetch hashes as before.
  const kiln::Source a = kiln::Source::from_text("a.cu", "__global__ void k() {}\n");
  kiln::detail::prefetch_hot_path();
  const kiln::Source b = kiln::Source::from_text("a.cu", "__global__ void k() {}\n");
  CHECK(a.content_hash() == b.content_hash());
}
