#pragma once
// NVRTC's PCH heap at one address in every process (docs/design.md §13, "Stored precompiled headers").
//
// A precompiled header NVRTC writes is an image of its PCH heap, and records the heap's address: another
// process, whose heap the system placed elsewhere, refuses it ("warning #20282-D: incompatible precompiled
// header (PCH) heap allocation address"), so NVRTC's PCH alone serves only the process that made it. NVRTC
// allocates the heap with one anonymous mmap of the heap's size (measured on 13.0: mmap(NULL, 268435456,
// PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS) at its first PCH compile, and again when the heap is
// resized), called through its own import of mmap. kiln points that import (the library's GOT slot for mmap)
// at place_mmap below, which maps that one allocation at kHeapAddress with MAP_FIXED_NOREPLACE and passes
// every other call through unchanged. With the heap at the same address, a PCH made by one process is taken
// by the next (measured: a CUB kernel 0.82 s against 3.9 s without, the binary byte-identical).
//
// Nothing is forced: when the address is taken in this process (or the kernel predates MAP_FIXED_NOREPLACE
// and places the mapping elsewhere), the heap goes wherever the system puts it, placement() says so, and the
// lane keeps its PCHs private to the process as before. The address is part of a stored PCH's key.
#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln::vendor::pch {

/// Where kiln asks for NVRTC's PCH heap: 4 GiB-aligned, far above where the system puts a process's heap
/// and libraries' data (below 0x0000'7fxx'xxxx'xxxx, the mmap area, which grows down from there) and above
/// the low ranges the CUDA driver reserves.
inline constexpr std::uintptr_t kHeapAddress = 0x2b69'0000'0000;

/// Where NVRTC's PCH heap is.
enum class Placement : std::uint8_t {
  not_yet,    ///< not allocated yet in this process (no PCH compile has run)
  placed,     ///< at kHeapAddress: PCHs can be shared between processes
  elsewhere,  ///< somewhere else (placement_reason says why): PCHs stay private to the process
};

/// Points the mmap import of the NVRTC library that defines `symbol_in_library` (any of its symbols'
/// addresses) at kiln's placing mmap. Once per library image; thread-safe. False, with `why`, when the
/// library has no such import (linked statically, another format) or the architecture is not handled.
bool hook_heap(const void* symbol_in_library, std::string& why);
/// The size of the next PCH heap NVRTC allocates (its current PCH heap size, or the size kiln is about to
/// set): the one allocation of exactly this size is the heap.
void expect_heap(std::size_t bytes) noexcept;
/// Where the most recent PCH heap allocation went.
[[nodiscard]] Placement placement() noexcept;
/// Why the heap is elsewhere ("address 0x2b6900000000 in use"), or empty.
[[nodiscard]] std::string placement_reason();

}  // namespace kiln::vendor::pch
