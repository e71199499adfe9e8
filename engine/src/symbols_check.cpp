// Whether a binary defines the kernels a prewarm asked for (symbols_check.hpp).
#include "symbols_check.hpp"

#include <algorithm>
#include <variant>

#include <fmt/format.h>

#include "elf.hpp"
#include "kiln/error.hpp"

namespace kiln::detail {
namespace {

/// The kernels the entry's binary defines; `readable` is false when its format cannot be read (then
/// nothing is judged: a gap in the reader must never fail a good compile).
struct Defined {
  bool readable = false;
  std::vector<std::string> kernels;
};

Defined defined_kernels(const cache::Entry& entry) {
  Defined defined;
  // LTO-IR's body is not a format kiln reads (no symbol table to look in): not judged.
  if (entry.payload_kind == PayloadKind::ltoir) return defined;
  if (entry.payload_kind == PayloadKind::ptx) {
    defined.readable = true;
  } else {
    defined.readable = std::holds_alternative<elf::Image>(elf::parse(entry.payload));
  }
  defined.kernels = elf::kernel_names(entry.payload_kind, entry.payload);
  if (entry.payload_kind == PayloadKind::cubin && !entry.aux.empty()) {
    // The PTX compiled with the CUBIN names the same entries; either reader's word is enough.
    for (std::string& name : elf::kernel_names(PayloadKind::ptx, entry.aux)) {
      if (std::find(defined.kernels.begin(), defined.kernels.end(), name) == defined.kernels.end()) {
        defined.kernels.push_back(std::move(name));
      }
    }
  }
  return defined;
}

}  // namespace

bool defines_kernels(const cache::Entry& entry, const std::vector<std::string>& kernels) {
  // On a disk hit's path: the binary's own symbols first; a CUBIN's PTX (a longer read) only when they lack one.
  const auto has_all = [&](const std::vector<std::string>& defined) {
    return std::all_of(kernels.begin(), kernels.end(), [&](const std::string& kernel) {
      return std::find(defined.begin(), defined.end(), kernel) != defined.end();
    });
  };
  if (entry.payload_kind == PayloadKind::ltoir) return false;
  if (entry.payload_kind != PayloadKind::ptx && !std::holds_alternative<elf::Image>(elf::parse(entry.payload))) {
    return false;
  }
  if (has_all(elf::kernel_names(entry.payload_kind, entry.payload))) return true;
  return has_all(defined_kernels(entry).kernels);
}

void check_kernels_defined(const cache::Entry& entry, std::string_view source_name,
                           const std::vector<std::string>& names, const std::vector<std::string>& kernels) {
  if (names.empty() && kernels.empty()) return;
  const Defined defined = defined_kernels(entry);
  if (!defined.readable) return;
  const auto is_kernel = [&](const std::string& symbol) {
    return std::find(defined.kernels.begin(), defined.kernels.end(), symbol) != defined.kernels.end();
  };
  const auto lowered = [&](const std::string& name) -> const std::string& {
    for (const cache::LoweredName& n : entry.names) {
      if (n.expression == name) return n.lowered;
    }
    return name;
  };
  std::vector<std::string> missing;
  for (const std::string& name : names) {
    if (!is_kernel(lowered(name))) missing.push_back(name);
  }
  for (const std::string& name : kernels) {
    if (!is_kernel(name) && !is_kernel(lowered(name))) missing.push_back(name);
  }
  if (missing.empty()) return;
  std::sort(missing.begin(), missing.end());
  missing.erase(std::unique(missing.begin(), missing.end()), missing.end());

  // What the binary has, as a caller would ask for it: name expressions as written, the rest by symbol.
  std::vector<std::string> listed = defined.kernels;
  for (const cache::LoweredName& n : entry.names) {
    if (is_kernel(n.lowered)) {
      std::replace(listed.begin(), listed.end(), n.lowered, n.expression);
    }
  }
  std::sort(listed.begin(), listed.end());
  listed.erase(std::unique(listed.begin(), listed.end()), listed.end());
  std::vector<std::string> quoted;
  for (const std::string& name : missing) quoted.push_back("'" + name + "'");
  const bool mangled = std::any_of(listed.begin(), listed.end(), [](const std::string& s) { return s.starts_with("_Z"); });
  throw ConfigError(fmt::format(
      "source '{}': no kernel {} in the binary for {} (key {}); it defines: {}{}", source_name,
      fmt::join(quoted, ", "),
      entry.target, entry.key_hash.hex(), listed.empty() ? "no kernels" : fmt::format("{}", fmt::join(listed, ", ")),
      mangled ? " (a kernel that is not extern \"C\" has a mangled symbol: declare it extern \"C\", or ask "
                "for it by a name expression)"
              : ""));
}

}  // namespace kiln::detail
