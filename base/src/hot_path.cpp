#include "kiln/base/hot_path.hpp"

#include <cstdint>

#if defined(__ELF__) && (defined(__GNUC__) || defined(__clang__))
// Defined by the linker for a section whose name is a C identifier; weak, so a binary without the
// section (nothing marked) links and sees null.
extern "C" {
extern const char __start_kiln_hot[] __attribute__((weak, visibility("hidden")));
extern const char __stop_kiln_hot[] __attribute__((weak, visibility("hidden")));
}
#define KILN_HOT_BOUNDS __start_kiln_hot, __stop_kiln_hot
#define KILN_PREFETCH_LINE(address) __builtin_prefetch(address, 0, 2)
#else
#define KILN_PREFETCH_LINE(address) (void)(address)
#define KILN_HOT_BOUNDS nullptr, nullptr
#endif

namespace kiln::detail {

HotSpan hot_path_span() noexcept {
  HotSpan span{KILN_HOT_BOUNDS};
  if (span.begin == nullptr || span.end == nullptr || span.end <= span.begin) return {nullptr, nullptr};
  return span;
}

void prefetch_hot_path() noexcept {
  const HotSpan span = hot_path_span();
  if (span.begin == nullptr) return;
  constexpr std::uintptr_t kPage = 4096, kLine = 64;
  // A software prefetch is dropped on a page this process has not mapped yet, so first read one byte
  // of each page: an unmapped page then faults in now (the fault the first instruction on it would
  // take anyway), and the kernel maps its neighbours with it.
  const auto first = reinterpret_cast<std::uintptr_t>(span.begin);
  const auto last = reinterpret_cast<std::uintptr_t>(span.end);
  for (std::uintptr_t page = first & ~(kPage - 1); page < last; page += kPage) {
    (void)*reinterpret_cast<const volatile char*>(page < first ? first : page);
  }
  // Into the second-level cache (which serves instruction fetches too), not the first-level data cache.
  for (std::uintptr_t line = first & ~(kLine - 1); line < last; line += kLine) {
    KILN_PREFETCH_LINE(reinterpret_cast<const void*>(line));
  }
}

}  // namespace kiln::detail
