#include "source_naming.hpp"

#include <unordered_map>

#include <fmt/format.h>

#include "formatting.hpp"
#include "kiln/base/hash.hpp"
#include "kiln/cache/blob.hpp"
#include "kiln/embedded.hpp"

namespace kiln::cli {

const std::string* find_part(const std::vector<cache::KeyPart>& parts, std::string_view name) {
  for (const cache::KeyPart& part : parts) {
    if (part.name == name) return &part.value;
  }
  return nullptr;
}

std::string describe_source(const std::vector<cache::KeyPart>& parts) {
  static const std::unordered_map<cache::Hash128, std::string, cache::Hash128Hasher> builtins = [] {
    std::unordered_map<cache::Hash128, std::string, cache::Hash128Hasher> out;
    for (const EmbeddedFile& file : embedded_files()) out.emplace(cache::hash128(file.text), std::string(file.name));
    return out;
  }();
  if (auto name_space = cache::blob_namespace(parts)) return "namespace " + *name_space;
  for (const char* name : {"source-name", "source_name"}) {
    if (const std::string* value = find_part(parts, name)) return *value;
  }
  const std::string* text = find_part(parts, "source");
  if (text == nullptr) return "?";
  const cache::Hash128 hash = cache::hash128(*text);
  if (const auto it = builtins.find(hash); it != builtins.end()) return it->second;
  return fmt::format("runtime source {} (hash {})", format_bytes(text->size()), hash.hex().substr(0, 16));
}

}  // namespace kiln::cli
