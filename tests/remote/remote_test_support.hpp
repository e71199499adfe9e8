#pragma once
// What the remote tests share besides the server (redis_server.hpp): a synthetic entry.
#include <cstddef>
#include <random>
#include <string>

#include "kiln/cache/entry.hpp"
#include "kiln/cache/key.hpp"

namespace kiln::test {

/// A synthetic CUBIN entry whose canonical key is unique to `tag`, with `payload_bytes` bytes of
/// pseudo-random payload seeded by the tag (the same tag gives the same entry).
inline cache::Entry synthetic_entry(const std::string& tag, std::size_t payload_bytes = 4096) {
  cache::CanonicalKey key;
  key.add("format", "1");
  key.add("vendor", "cuda");
  key.add("target", "sm_90");
  key.add("source", "extern \"C\" __global__ void k_" + tag + "() {}");
  cache::Entry entry;
  entry.vendor = Vendor::cuda;
  entry.payload_kind = PayloadKind::cubin;
  entry.target = "sm_90";
  entry.compiler = "nvrtc 13.0";
  entry.created_unix = 1700000000;
  entry.key_hash = key.hash();
  entry.canonical_key = key.bytes();
  entry.names.push_back({"k_" + tag, "k_" + tag});
  std::mt19937_64 random(std::hash<std::string>{}(tag));
  entry.payload.resize(payload_bytes);
  for (std::byte& b : entry.payload) b = static_cast<std::byte>(random() & 0xFF);
  return entry;
}

}  // namespace kiln::test
