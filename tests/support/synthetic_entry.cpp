#include "synthetic_entry.hpp"

#include <cstdint>
#include <utility>

#include "kiln/cache/key.hpp"

namespace kiln::test {

cache::Entry make_entry(std::string_view name, std::size_t payload_bytes, std::string target, std::string compiler) {
  cache::CanonicalKey key;
  key.add("format", "1");
  key.add("vendor", "cuda");
  key.add("compiler", compiler);
  key.add("target", target);
  key.add("options", "-DN=4\n-std=c++17\n");
  key.add("source", std::string("extern \"C\" __global__ void ") + std::string(name) + "(float* x) { x[0] = 1; }\n");
  cache::Entry entry;
  entry.vendor = Vendor::cuda;
  entry.payload_kind = PayloadKind::cubin;
  entry.target = std::move(target);
  entry.compiler = std::move(compiler);
  entry.created_unix = 1732900000;
  entry.key_hash = key.hash();
  entry.canonical_key = key.bytes();
  entry.names = {{std::string(name), std::string(name)}, {std::string(name) + "<float>", "_Z3fooIfEvv"}};
  entry.payload.resize(payload_bytes);
  std::uint32_t state = static_cast<std::uint32_t>(key.hash().low);
  for (std::byte& b : entry.payload) {
    state = state * 1664525u + 1013904223u;
    b = static_cast<std::byte>(state >> 24);
  }
  entry.aux.assign(64, std::byte{'p'});
  return entry;
}

}  // namespace kiln::test
