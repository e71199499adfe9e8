#pragma once
// Helpers for the include tests: write a header tree under a temporary folder, run the resolver, and
// look at what it produced.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kiln/source.hpp"
#include "resolve.hpp"
#include "test_support.hpp"
#include "vendor_table.hpp"

namespace kiln::test {

/// What the include home is told of a vendor's compiler (IncludeInput::traits, MacroContext::from_flags): the
/// engine's vendor table's row for it.
inline const includes::CompilerTraits& traits_of(Vendor vendor) { return detail::vendor_row(vendor).includes; }

/// Writes `text` to `root/relative`, creating folders.
inline std::filesystem::path write_file(const std::filesystem::path& root, const std::string& relative,
                                        const std::string& text) {
  const std::filesystem::path path = root / relative;
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  return path;
}

inline std::size_t line_count(std::string_view text) {
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

/// The compiler header with this name, or nullptr.
inline const cache::detail::CompilerHeader* compiler_header(const cache::detail::ResolvedIncludes& r,
                                                            std::string_view name) {
  for (const cache::detail::CompilerHeader& h : r.compiler_headers) {
    if (h.name == name) return &h;
  }
  return nullptr;
}

/// The paths of the headers the resolver read, in order.
inline std::vector<std::string> read_paths(const cache::detail::ResolvedIncludes& r) {
  std::vector<std::string> out;
  for (const auto& h : r.dependencies.headers) out.push_back(h.path);
  return out;
}

/// The resolver's views of in-memory headers (valid while `headers` is).
inline std::vector<cache::detail::MemoryHeader> memory_views(std::span<const Header> headers) {
  std::vector<cache::detail::MemoryHeader> out;
  for (const Header& h : headers) out.push_back({h.name, h.text});
  return out;
}

inline bool has(const std::vector<std::string>& items, const std::string& item) {
  return std::find(items.begin(), items.end(), item) != items.end();
}

/// Milliseconds since `start`.
inline double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace kiln::test
