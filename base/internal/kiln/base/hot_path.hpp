#pragma once
// The request path's own code, gathered in one place.
//
// A process's first request runs kiln's request path (source hash, key, disk read and checks, module
// load, kernel lookup) for the first time, and its instructions are then not in any CPU cache: each
// 64-byte line is fetched from memory on demand, one after another, as execution reaches it.
// KILN_HOT puts a function into the section `kiln_hot`: the linker lays those functions out
// contiguously and defines __start_kiln_hot / __stop_kiln_hot around them, so prefetch_hot_path() can
// ask for every line of the path at once, at the start of a request that is not served from memory.
// The fetches then overlap instead of queueing behind execution; the prefetch is cheap when the lines
// are already cached. What it saves on a fresh process's first disk hit: bench/RESULTS.md, section 2
// (`launch_bench`).
//
// Mark functions defined in a .cpp file (class members defined there included) that a disk hit or a
// memory-tier miss runs. Not functions defined in headers or templates: their copies are merged across
// translation units, so the section a copy lands in is not this file's choice.
#if defined(__ELF__) && (defined(__GNUC__) || defined(__clang__))
#define KILN_HOT __attribute__((section("kiln_hot")))
#else
#define KILN_HOT
#endif

namespace kiln::detail {

/// Prefetches the `kiln_hot` section into the CPU's caches (a no-op where there is none). Cheap when
/// the lines are already cached: one prefetch instruction per 64 bytes.
void prefetch_hot_path() noexcept;

/// The bounds of the `kiln_hot` section in this binary ({nullptr, nullptr} where there is none).
struct HotSpan {
  const char* begin;
  const char* end;
};
HotSpan hot_path_span() noexcept;

}  // namespace kiln::detail
