#pragma once
// Private to the include home (includes/src/): include paths as kiln records them, and the error
// the home throws. A path is kept as the folders and includes spell it, folded lexically ("a/../b" is
// "b"), never through symlinks: toolkits are full of symlinked folders, and a re-pointed link must show
// up as a different path, not be hidden.
#include <string>
#include <string_view>

#include "kiln/includes/include_home.hpp"

namespace kiln::cache::detail {

/// The home's error (include_home.hpp), by its name inside the home.
using kiln::includes::IncludeError;

/// Whether `path` is already lexically normal: no empty part, no "." or ".." part, no trailing '/'
/// (conservative: a part that merely starts with '.' takes the slow way too). Most include paths are.
[[nodiscard]] bool plainly_normal(std::string_view path);

/// The lexically normal form of a '/'-separated path: empty and "." parts dropped, "dir/.." folded, a
/// leading '/' kept ("/.." is "/"), the leading ".." of a relative path kept. Symlinks are not followed.
[[nodiscard]] std::string normalize(std::string_view path);

/// `name` looked up in `dir`, normalised. An absolute name stays as it is; an empty dir is the root of
/// the in-memory names.
[[nodiscard]] std::string join(std::string_view dir, std::string_view name);

/// The folder part of a path: "" for a bare name, "/" for a file in the root.
[[nodiscard]] std::string dirname(std::string_view path);

}  // namespace kiln::cache::detail
