#pragma once
// Private to the include home (includes/src/): the order in which an include searches its places.
// One definition for the resolver, which stops at the first place holding a header, and for the
// read-ahead that reads its files before the resolver asks (header_files.hpp), which must search alike.
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "paths.hpp"
#include "scan.hpp"

namespace kiln::cache::detail {

/// A place an include may lead to: an in-memory header's name, or a path on disk (with the include folder
/// it lies in, for #include_next).
struct IncludePlace {
  bool memory = false;
  std::string path;
  std::optional<std::size_t> folder;
};

/// The file an include is written in, as far as the search cares.
struct Includer {
  bool from_disk = false;             ///< a file read from disk (else the source or an in-memory header)
  std::string_view dir;               ///< where its quoted includes are looked up first
  std::optional<std::size_t> folder;  ///< from disk: the include folder it was found in
};

/// The places an include of `includer` may lead to, in the order they are searched, each given to `visit`
/// until it returns true. "x": the includer's folder (in memory for the source and a memory header, on
/// disk for a file from disk), the memory headers by name, then the folders; <x>: the memory headers, then
/// the folders. #include_next in a file found in folder k searches the folders after k (all of them for a
/// file found next to its includer or by an absolute path); in the source or a memory header it is an
/// ordinary include. An absolute name: the memory header of that path, then the path. `folders` are
/// absolute and normal.
template <class Visit>
void each_include_place(const Includer& includer, const IncludeRef& ref, std::span<const std::string> folders,
                        Visit&& visit) {
  const std::string& name = ref.name;
  if (name.empty()) return;
  if (name.front() == '/') {
    std::string path = normalize(name);
    if (!visit(IncludePlace{true, path, std::nullopt})) visit(IncludePlace{false, std::move(path), std::nullopt});
    return;
  }
  std::size_t first = 0;
  if (ref.next && includer.from_disk) {
    first = includer.folder ? *includer.folder + 1 : 0;
  } else {
    if (!ref.angled && visit(IncludePlace{!includer.from_disk, join(includer.dir, name), std::nullopt})) return;
    if (visit(IncludePlace{true, normalize(name), std::nullopt})) return;
  }
  for (std::size_t k = first; k < folders.size(); ++k) {
    if (visit(IncludePlace{false, join(folders[k], name), k})) return;
  }
}

}  // namespace kiln::cache::detail
