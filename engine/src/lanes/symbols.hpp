#pragma once
// Symbol tables: one per vendor library, generated from an X-macro list. Every list has one shape,
//
//   #define KILN_<LIBRARY>_SYMBOLS(X) X(requirement, name, pointer type) ...
//
// requirement: `required` (the library is refused without it) or `optional` (a feature degrades, the
// pointer stays null). KILN_SYMBOL_TABLE(Table, LIST) expands a list into a struct of typed pointers
// that resolves itself through a lookup (dlsym, or a driver's own resolver), so every library is
// loaded, and refused, the same way.
#include <string_view>

namespace kiln::vendor {

enum class Requirement : bool { optional, required };

/// Throws DeviceUnavailable: "<library> lacks required symbol <symbol>[ (<detail>)]". `library` says
/// which library and where ("NVRTC at /usr/local/cuda/lib64/libnvrtc.so.13").
[[noreturn]] void throw_missing_symbol(std::string_view library, std::string_view symbol, std::string_view detail = {});

}  // namespace kiln::vendor

// The name is stringified here, in the macro the list calls, and nowhere else: a header may #define a
// name to its versioned one (cuda.h: cuMemAlloc -> cuMemAlloc_v2), and only the list's own token is
// the name the library is asked for. The member and its type may use the expanded name.
#define KILN_SYMBOL_MEMBER(requirement, name, type) type name = nullptr;
#define KILN_SYMBOL_RESOLVE(requirement, name, type)                                                          \
  name = reinterpret_cast<type>(lookup(#name));                                                               \
  if (name == nullptr && ::kiln::vendor::Requirement::requirement == ::kiln::vendor::Requirement::required && \
      missing == nullptr) {                                                                                   \
    missing = #name;                                                                                          \
  }

/// A struct `Table` with one pointer per entry of `LIST`, and
///   resolve(lookup): fills every entry from lookup(name) (a void*, null when absent) and returns the
///                    first required symbol that is missing, or nullptr;
///   require(lookup, library, detail): resolve, and throw_missing_symbol when one is missing.
/// A table left by a failed resolve is cleared: no half-loaded library is ever used.
#define KILN_SYMBOL_TABLE(Table, LIST)                                                                           \
  struct Table {                                                                                                 \
    LIST(KILN_SYMBOL_MEMBER)                                                                                     \
    template <class Lookup>                                                                                      \
    const char* resolve(const Lookup& lookup) {                                                                  \
      const char* missing = nullptr;                                                                             \
      LIST(KILN_SYMBOL_RESOLVE)                                                                                  \
      if (missing != nullptr) *this = Table{};                                                                   \
      return missing;                                                                                            \
    }                                                                                                            \
    template <class Lookup>                                                                                      \
    void require(const Lookup& lookup, std::string_view library, std::string_view detail = {}) {                 \
      if (const char* missing = resolve(lookup)) ::kiln::vendor::throw_missing_symbol(library, missing, detail); \
    }                                                                                                            \
  };
