// c_kernels_among: which plain kernel names a source declares as extern "C" kernels (engine/src/c_kernels.hpp).
// Those leave the key and the compiler's name expressions; a name it misses stays in both (today's request),
// so every doubtful case must answer "not a C kernel".
#include "c_kernels.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <string_view>
#include <vector>

using kiln::detail::c_kernels_among;

namespace {

std::vector<std::string> among(std::string_view text, const std::vector<std::string>& names,
                               std::vector<std::string_view> headers = {}) {
  return c_kernels_among(text, headers, names);
}

}  // namespace

TEST_CASE("extern \"C\" kernels at global scope are found, directly, in a block and through a macro", "[c_kernels]") {
  CHECK(among("extern \"C\" __global__ void k(int* p) { p[0] = 1; }", {"k"}) == std::vector<std::string>{"k"});
  CHECK(among("extern \"C\" {\n__global__ void a(int* p) {}\n__global__ void b(int*);\n}", {"a", "b", "c"}) ==
        std::vector<std::string>{"a", "b"});
  CHECK(among("extern \"C\" __global__ void __launch_bounds__(256) k(float* x) {}", {"k"}) ==
        std::vector<std::string>{"k"});
  CHECK(among("extern \"C\"\n__global__\nvoid\nk(int* p)\n{}", {"k"}) == std::vector<std::string>{"k"});
  // kiln/rtc.h's KILN_KERNEL, from the source's headers; a macro of the source's own.
  const std::string_view rtc = "#pragma once\n#define KILN_KERNEL extern \"C\" __global__\n";
  CHECK(among("#include <kiln/rtc.h>\nKILN_KERNEL void saxpy(int n) {}", {"saxpy"}, {rtc}) ==
        std::vector<std::string>{"saxpy"});
  CHECK(among("#define K extern \"C\" __global__\nK void k1() {}\nK void k2() {}", {"k2", "k1"}) ==
        std::vector<std::string>{"k2", "k1"});
  CHECK(among("#define C_LINK extern \"C\"\n#define GLOBAL __global__\nC_LINK GLOBAL void k() {}", {"k"}) ==
        std::vector<std::string>{"k"});
  // Comments and strings do not hide or make declarations.
  CHECK(among("/* { */ extern \"C\" __global__ void k() {} // }", {"k"}) == std::vector<std::string>{"k"});
  CHECK(among("extern \"C\" __global__ void k(const char* s = \"{\") {}", {"k"}) == std::vector<std::string>{"k"});
}

TEST_CASE("C++ names, templates, static and nested kernels are not taken", "[c_kernels]") {
  CHECK(among("__global__ void k(int* p) {}", {"k"}).empty());                 // C++ linkage: mangled
  CHECK(among("extern \"C\" void k(int* p) {}", {"k"}).empty());               // not a kernel
  CHECK(among("extern \"C\" __device__ int f(int x) { return x; }", {"f"}).empty());
  CHECK(among("template <typename T> __global__ void k(T* p) {}", {"k"}).empty());
  CHECK(among("extern \"C\" { static __global__ void k(int* p) {} }", {"k"}).empty());  // NVRTC mangles it
  CHECK(among("extern \"C\" static __global__ void k(int* p) {}", {"k"}).empty());
  CHECK(among("namespace a { extern \"C\" __global__ void k(int* p) {} }", {"k"}).empty());
  CHECK(among("struct S { extern \"C\" __global__ void k(); };", {"k"}).empty());
  CHECK(among("extern \"C++\" { __global__ void k(int*) {} }", {"k"}).empty());
  // A call inside a kernel's body or a default argument is no declaration.
  CHECK(among("extern \"C\" __global__ void k(int* p) { helper(p); }", {"helper"}).empty());
  CHECK(among("extern \"C\" __global__ void k(int n = size()) {}", {"size"}).empty());
  // A function-like macro is not followed.
  CHECK(among("#define K(name) extern \"C\" __global__ void name()\nK(k) {}", {"k"}).empty());
  // A kernel declared after a namespace closed is at global scope again.
  CHECK(among("namespace a { __global__ void k(); }\nextern \"C\" __global__ void k2() {}", {"k", "k2"}) ==
        std::vector<std::string>{"k2"});
  CHECK(among("", {"k"}).empty());
  CHECK(among("extern \"C\" __global__ void k() {}", {}).empty());
}
