#include "lanes/nvrtc_heap.hpp"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/mman.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000  // Linux 4.17; an older kernel takes the address as a hint (checked below)
#endif

namespace kiln::vendor::pch {
namespace {

std::atomic<std::size_t> g_expected{0};
std::atomic<Placement> g_placement{Placement::not_yet};
std::atomic<int> g_error{0};         // the errno of the placing mmap, when it failed
std::atomic<std::uintptr_t> g_got{0};  // where a hinted mapping went instead (an old kernel)

/// NVRTC's mmap, through its import. Its PCH heap (one anonymous allocation of the expected size, anywhere)
/// goes to kHeapAddress when that is free; every other call, and the heap when it is not, is the system's.
void* place_mmap(void* address, std::size_t length, int protection, int flags, int fd, off_t offset) {
  const std::size_t expected = g_expected.load(std::memory_order_relaxed);
  if (address != nullptr || fd != -1 || (flags & MAP_ANONYMOUS) == 0 || (flags & MAP_FIXED) != 0 || expected == 0 ||
      length != expected) {
    return ::mmap(address, length, protection, flags, fd, offset);
  }
  auto* const wanted = reinterpret_cast<void*>(kHeapAddress);
  void* got = ::mmap(wanted, length, protection, flags | MAP_FIXED_NOREPLACE, fd, offset);
  if (got == wanted) {
    g_placement.store(Placement::placed);
    return got;
  }
  if (got == MAP_FAILED) {
    g_error.store(errno);
  } else {  // a kernel without MAP_FIXED_NOREPLACE took the address as a hint and put it elsewhere
    g_got.store(reinterpret_cast<std::uintptr_t>(got));
    ::munmap(got, length);
  }
  g_placement.store(Placement::elsewhere);
  return ::mmap(address, length, protection, flags, fd, offset);
}

#if defined(__x86_64__)
constexpr bool is_slot(std::uint32_t type) { return type == R_X86_64_JUMP_SLOT || type == R_X86_64_GLOB_DAT; }
#elif defined(__aarch64__)
constexpr bool is_slot(std::uint32_t type) { return type == R_AARCH64_JUMP_SLOT || type == R_AARCH64_GLOB_DAT; }
#else
constexpr bool is_slot(std::uint32_t) { return false; }
#endif

/// The read-only-after-relocation range of the image loaded at `base` (PT_GNU_RELRO), to protect it again.
struct Range {
  std::uintptr_t begin = 0, end = 0;
};
Range relro_of(std::uintptr_t base) {
  struct Search {
    std::uintptr_t base;
    Range found;
  } search{base, {}};
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        if (info->dlpi_addr != s->base) return 0;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          if (info->dlpi_phdr[i].p_type == PT_GNU_RELRO) {
            s->found = {info->dlpi_addr + info->dlpi_phdr[i].p_vaddr,
                        info->dlpi_addr + info->dlpi_phdr[i].p_vaddr + info->dlpi_phdr[i].p_memsz};
          }
        }
        return 1;
      },
      &search);
  return search.found;
}

/// Writes `value` into the pointer slot at `slot`, making its page writable for the write when it is part
/// of the image's RELRO range (then read-only again).
bool write_slot(void** slot, void* value, const Range& relro) {
  const auto at = reinterpret_cast<std::uintptr_t>(slot);
  const bool protected_range = at >= relro.begin && at < relro.end;
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  void* page_start = reinterpret_cast<void*>(at & ~(page - 1));
  if (protected_range && ::mprotect(page_start, page, PROT_READ | PROT_WRITE) != 0) return false;
  __atomic_store_n(slot, value, __ATOMIC_SEQ_CST);
  if (protected_range) (void)::mprotect(page_start, page, PROT_READ);
  return true;
}

}  // namespace

bool hook_heap(const void* symbol_in_library, std::string& why) {
  static std::mutex mutex;
  static std::vector<const link_map*> hooked;
  const std::lock_guard lock(mutex);
  Dl_info info{};
  link_map* map = nullptr;
  if (dladdr1(symbol_in_library, &info, reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) == 0 || map == nullptr) {
    why = "the NVRTC library's image was not found";
    return false;
  }
  for (const link_map* done : hooked) {
    if (done == map) return true;
  }
  const auto base = static_cast<std::uintptr_t>(map->l_addr);
  // The dynamic section's addresses are relocated by the loader on most platforms; not on some: both read.
  const auto absolute = [base](ElfW(Addr) value) { return value < base ? value + base : value; };
  const ElfW(Sym)* symbols = nullptr;
  const char* strings = nullptr;
  const ElfW(Rela)* tables[2] = {nullptr, nullptr};
  std::size_t sizes[2] = {0, 0};
  bool rela = true;
  for (const ElfW(Dyn)* d = map->l_ld; d->d_tag != DT_NULL; ++d) {
    switch (d->d_tag) {
      case DT_SYMTAB: symbols = reinterpret_cast<const ElfW(Sym)*>(absolute(d->d_un.d_ptr)); break;
      case DT_STRTAB: strings = reinterpret_cast<const char*>(absolute(d->d_un.d_ptr)); break;
      case DT_JMPREL: tables[0] = reinterpret_cast<const ElfW(Rela)*>(absolute(d->d_un.d_ptr)); break;
      case DT_PLTRELSZ: sizes[0] = d->d_un.d_val; break;
      case DT_RELA: tables[1] = reinterpret_cast<const ElfW(Rela)*>(absolute(d->d_un.d_ptr)); break;
      case DT_RELASZ: sizes[1] = d->d_un.d_val; break;
      case DT_PLTREL: rela = d->d_un.d_val == DT_RELA; break;
      default: break;
    }
  }
  if (symbols == nullptr || strings == nullptr || !rela) {
    why = "the NVRTC library's dynamic section has no RELA relocations to read";
    return false;
  }
  const Range relro = relro_of(base);
  bool found = false;
  for (int t = 0; t < 2; ++t) {
    if (tables[t] == nullptr) continue;
    for (std::size_t i = 0; i < sizes[t] / sizeof(ElfW(Rela)); ++i) {
      const ElfW(Rela)& r = tables[t][i];
      const auto type = static_cast<std::uint32_t>(ELF64_R_TYPE(r.r_info));
      const auto index = static_cast<std::uint32_t>(ELF64_R_SYM(r.r_info));
      if (!is_slot(type) || index == 0) continue;
      const char* name = strings + symbols[index].st_name;
      if (std::strcmp(name, "mmap") != 0 && std::strcmp(name, "mmap64") != 0) continue;
      auto** slot = reinterpret_cast<void**>(base + r.r_offset);
      if (!write_slot(slot, reinterpret_cast<void*>(&place_mmap), relro)) {
        why = fmt::format("the NVRTC library's mmap slot could not be written: {}", std::strerror(errno));
        return false;
      }
      found = true;
    }
  }
  if (!found) {
    why = "the NVRTC library imports no mmap kiln can point at its address";
    return false;
  }
  hooked.push_back(map);
  return true;
}

void expect_heap(std::size_t bytes) noexcept { g_expected.store(bytes, std::memory_order_relaxed); }

Placement placement() noexcept { return g_placement.load(); }

std::string placement_reason() {
  if (g_placement.load() != Placement::elsewhere) return {};
  if (const std::uintptr_t got = g_got.load(); got != 0) {
    return fmt::format("the system placed it at {:#x}, not at {:#x} (a kernel before Linux 4.17)", got, kHeapAddress);
  }
  return fmt::format("{:#x} is taken in this process ({})", kHeapAddress, std::strerror(g_error.load()));
}

}  // namespace kiln::vendor::pch
