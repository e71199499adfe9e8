// libFuzzer target for the cache's parsers: kiln::cache::parse (entries), the file reader that the
// store uses (it must agree with parse byte for byte), and CanonicalKey::parse.
//
// Mutations rarely keep a checksum valid, so each input is also parsed after two repairs: with its
// checksum recomputed, and with total_len and payload_len made consistent with its size (then the
// checksum recomputed). That lets the fuzzer reach the names list and the key checks.
// Any entry that parses must serialize back to exactly the bytes it came from.
//
// Build and run: see tests/fuzz/CMakeLists.txt (target kiln_entry_fuzz) and run_fuzz.sh.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "entry_io.hpp"
#include "kiln/cache/entry.hpp"
#include "kiln/cache/key.hpp"

namespace {

using kiln::cache::ContentError;
using kiln::cache::Entry;

void check(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "entry_fuzz: invariant broken: %s\n", what);
    std::abort();
  }
}

bool same(const Entry& a, const Entry& b) {
  return a.vendor == b.vendor && a.payload_kind == b.payload_kind && a.target == b.target && a.compiler == b.compiler &&
         a.created_unix == b.created_unix && a.key_hash == b.key_hash && a.canonical_key == b.canonical_key &&
         a.names == b.names && a.payload == b.payload && a.aux == b.aux;
}

void store_le(std::vector<std::byte>& bytes, std::size_t at, std::uint64_t value, int width) {
  for (int i = 0; i < width; ++i) bytes[at + static_cast<std::size_t>(i)] = static_cast<std::byte>(value >> (8 * i));
}
std::uint64_t load_le(const std::vector<std::byte>& bytes, std::size_t at, int width) {
  std::uint64_t value = 0;
  for (int i = 0; i < width; ++i)
    value |= static_cast<std::uint64_t>(bytes[at + static_cast<std::size_t>(i)]) << (8 * i);
  return value;
}

void fix_checksum(std::vector<std::byte>& bytes) {
  const std::size_t body = bytes.size() - kiln::cache::kEntryEpilogueBytes;
  const auto checksum = kiln::cache::hash128(std::span(bytes).first(body), kiln::cache::kChecksumSeed);
  store_le(bytes, body, checksum.high, 8);
  store_le(bytes, body + 8, checksum.low, 8);
}

/// Small limits, so that hostile lengths are caught by the caps as well as by the file size.
kiln::cache::Limits fuzz_limits() {
  kiln::cache::Limits limits;
  limits.max_file_bytes = 1 << 20;
  limits.max_payload_bytes = 1 << 19;
  limits.max_canonical_bytes = 1 << 16;
  limits.max_text_bytes = 256;
  limits.max_names = 64;
  limits.max_name_bytes = 512;
  return limits;
}

/// Parses through memory and through a file; both must give the same answer.
void parse_both(const std::vector<std::byte>& bytes) {
  static const int fd = ::memfd_create("kiln-entry-fuzz", MFD_CLOEXEC);
  check(fd >= 0, "memfd_create");
  const kiln::cache::Limits limits = fuzz_limits();
  const auto in_memory = kiln::cache::parse(bytes, limits);
  check(::ftruncate(fd, 0) == 0, "ftruncate");
  check(::pwrite(fd, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()), "pwrite");
  check(::lseek(fd, 0, SEEK_SET) == 0, "lseek");
  const auto from_file = kiln::cache::detail::parse_file(fd, bytes.size(), limits, nullptr);
  check(!std::holds_alternative<kiln::cache::detail::IoFailure>(from_file), "no I/O error on a memory file");
  if (const auto* entry = std::get_if<Entry>(&in_memory)) {
    check(std::holds_alternative<Entry>(from_file), "file reader rejected what parse accepted");
    check(same(*entry, std::get<Entry>(from_file)), "file reader read another entry");
    check(kiln::cache::serialize(*entry) == bytes, "a parsed entry serializes back to its bytes");
  } else {
    check(std::holds_alternative<ContentError>(from_file), "file reader accepted what parse rejected");
    check(std::get<ContentError>(in_memory).reason == std::get<ContentError>(from_file).reason,
          "both readers give the same reason");
  }
}

void write_seeds(const char* dir) {
  auto make = [](int names, std::size_t payload, std::size_t aux) {
    kiln::cache::CanonicalKey key;
    key.add("compiler", "nvrtc 13.0");
    key.add("target", "sm_90");
    key.add("source", "extern \"C\" __global__ void f(float* x) { x[0] = 1; }\n");
    Entry entry;
    entry.vendor = kiln::Vendor::cuda;
    entry.target = "sm_90";
    entry.compiler = "nvrtc 13.0";
    entry.canonical_key = key.bytes();
    entry.key_hash = key.hash();
    for (int i = 0; i < names; ++i) entry.names.push_back({"k" + std::to_string(i) + "<float>", "_Z1k"});
    entry.payload.assign(payload, std::byte{0x7f});
    entry.aux.assign(aux, std::byte{'.'});
    return kiln::cache::serialize(entry);
  };
  const std::vector<std::vector<std::byte>> seeds = {make(0, 0, 0), make(1, 64, 0), make(3, 300, 40)};
  for (std::size_t i = 0; i < seeds.size(); ++i) {
    std::ofstream out(std::string(dir) + "/seed-" + std::to_string(i), std::ios::binary);
    out.write(reinterpret_cast<const char*>(seeds[i].data()), static_cast<std::streamsize>(seeds[i].size()));
  }
  std::ofstream key_seed(std::string(dir) + "/seed-key");
  key_seed << "kiln-key/1\ntarget 5\nsm_90\nsource 3\na\nb\n";
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("KILN_FUZZ_WRITE_SEEDS")) write_seeds(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::byte> bytes(size);
  if (size != 0) std::memcpy(bytes.data(), data, size);
  parse_both(bytes);

  constexpr std::size_t kMinimum = kiln::cache::kEntryFixedBytes + kiln::cache::kEntryEpilogueBytes;
  if (size >= kMinimum) {
    std::vector<std::byte> repaired = bytes;
    fix_checksum(repaired);
    parse_both(repaired);
    // Make the lengths add up: total_len = size, payload_len = what is left after the other fields.
    std::uint64_t others = kMinimum;
    for (std::size_t at : {40, 44, 48, 52}) others += load_le(repaired, at, 4);
    others += load_le(repaired, 72, 8) & 0xffff;
    store_le(repaired, 72, load_le(repaired, 72, 8) & 0xffff, 8);
    if (others <= size) {
      store_le(repaired, 64, size - others, 8);
      store_le(repaired, 80, size, 8);
      fix_checksum(repaired);
      parse_both(repaired);
    }
  }

  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (const auto parts = kiln::cache::CanonicalKey::parse(text)) {
    kiln::cache::CanonicalKey rebuilt;
    for (const auto& part : *parts) rebuilt.add(part.name, part.value);
    check(rebuilt.bytes() == text, "a parsed key rebuilds to the same bytes");
    (void)kiln::cache::diff_keys(*parts, *parts);
  }
  return 0;
}
