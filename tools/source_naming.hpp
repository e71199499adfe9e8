#pragma once
// Naming what an entry was built from, from the parts of its canonical key (`kiln cache ls`, `show`,
// `why-miss`).
#include <string>
#include <string_view>
#include <vector>

#include "kiln/cache/key.hpp"

namespace kiln::cli {

/// A label for the source a canonical key was built from: a built-in's file name when the key's
/// "source" part matches an embedded file, else "runtime source <size> (hash <16 hex>)"; for an entry
/// under a caller's key (kiln/cache/blob.hpp), which has no source, "namespace <its namespace>".
[[nodiscard]] std::string describe_source(const std::vector<cache::KeyPart>& parts);
/// The value of a key part, or nullptr.
[[nodiscard]] const std::string* find_part(const std::vector<cache::KeyPart>& parts, std::string_view name);

}  // namespace kiln::cli
