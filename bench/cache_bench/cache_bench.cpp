// cache_bench: what the disk cache costs. Prints markdown tables (bench/RESULTS.md keeps them).
//
//   cache_bench [--entries N] [--rounds R] [--dir PATH]
//
// 1. Memory tier: Engine::kernel for a cached kernel, ns per lookup (needs a GPU; N/A without one).
// 2. Disk hit: Store::get of a 5 KB and a 500 KB binary vs a bare open+fstat+read+close of the same
//    file into a vector, alternating in one run (page cache warm: the hit path, not the disk), medians.
//    Store::get also verifies the checksum (XXH3-128 over the whole file) and the stored key. The two
//    alternate which runs first each round. For scale, a third column: the bare read followed by
//    XXH3-128 of the bytes it read (what any reader that verifies the whole file costs at least).
// 3. Publish: Store::put (temp file, write, fsync, rename) of the same two sizes, medians.
// 4. Scale: the 5 KB hit again with N (default 100,000) entries in the cache; the time to list them,
//    to total their sizes (a full scan vs the running size estimate) and to trim to 90%.
#include <fcntl.h>
#include <malloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "kiln/cache/entry.hpp"
#include "kiln/base/hash.hpp"
#include "kiln/cache/key.hpp"
#include "kiln/cache/store.hpp"
#include "kiln/engine.hpp"
#include "kiln/error.hpp"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using kiln::cache::Entry;
using kiln::cache::Store;

namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0.0 : values[values.size() / 2];
}

double since_us(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

/// An entry shaped like a real one: a canonical key holding a source and a header (`key_bytes`).
Entry make_entry(const std::string& name, std::size_t payload_bytes, std::size_t key_bytes) {
  kiln::cache::CanonicalKey key;
  key.add("format", "1");
  key.add("vendor", "cuda");
  key.add("compiler", "nvrtc 13.0");
  key.add("target", "sm_90");
  key.add("options", "-std=c++17\n-default-device\n");
  key.add("names", name);
  key.add("source", "extern \"C\" __global__ void " + name + "(float* x) { x[threadIdx.x] *= 2.0f; }\n");
  key.add("header:user.h", std::string(key_bytes, 'h'));
  key.add("embedded-headers", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
  Entry entry;
  entry.vendor = kiln::Vendor::cuda;
  entry.target = "sm_90";
  entry.compiler = "nvrtc 13.0";
  entry.canonical_key = key.bytes();
  entry.key_hash = key.hash();
  entry.names = {{name, name}};
  entry.payload.resize(payload_bytes);
  for (std::size_t i = 0; i < payload_bytes; ++i) entry.payload[i] = static_cast<std::byte>(i * 131 + 7);
  return entry;
}

/// What a cache without kiln's checks would do: open, size, read, close. With `checksum`, then
/// XXH3-128 over the bytes read.
std::size_t bare_read(const std::string& path, bool checksum = false) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct stat st {};
  ::fstat(fd, &st);
  std::vector<std::byte> bytes(static_cast<std::size_t>(st.st_size));
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  ::close(fd);
  if (checksum) done += kiln::cache::hash128(std::span(bytes).first(done), kiln::cache::kChecksumSeed).low & 1;
  return done;
}

struct HitTimes {
  double store_us = 0;      ///< Store::get
  double bare_us = 0;       ///< open+fstat+read+close of the same file
  double bare_hash_us = 0;  ///< the same, then XXH3-128 of the bytes
  double big_store_us = 0;  ///< Store::get of the same entry in the big cache (when given)
};

double time_get(Store& store, const Entry& entry, std::size_t& sink) {
  const auto start = Clock::now();
  const auto result = store.get(entry.key_hash, entry.canonical_key);
  const double us = since_us(start);
  if (result.outcome != kiln::cache::LookupOutcome::hit) {
    std::fprintf(stderr, "cache_bench: expected a hit: %s\n", result.detail.c_str());
    std::exit(1);
  }
  sink += result.entry->payload.size();
  return us;
}

/// Alternates Store::get, a bare read of the same file and (if given) Store::get of the same entry
/// in the big cache, so machine noise hits all three alike; medians of `rounds` each.
HitTimes time_hits(Store& store, const Entry& entry, int rounds, Store* big = nullptr) {
  const std::string path = store.entry_path(entry.key_hash).string();
  std::vector<double> with_store;
  std::vector<double> bare;
  std::vector<double> bare_hash;
  std::vector<double> with_big;
  std::size_t sink = 0;
  const auto time_bare = [&](bool checksum) {
    const auto start = Clock::now();
    sink += bare_read(path, checksum);
    return since_us(start);
  };
  for (int i = 0; i < rounds + 20; ++i) {
    // Alternate which of the two goes first, so neither always finds the other's cache state.
    double store_us = 0;
    double bare_us = 0;
    if (i % 2 == 0) {
      store_us = time_get(store, entry, sink);
      bare_us = time_bare(false);
    } else {
      bare_us = time_bare(false);
      store_us = time_get(store, entry, sink);
    }
    const double bare_hash_us = time_bare(true);
    const double big_us = big != nullptr ? time_get(*big, entry, sink) : 0.0;
    if (i >= 20) {  // warm-up rounds are not counted
      with_store.push_back(store_us);
      bare.push_back(bare_us);
      bare_hash.push_back(bare_hash_us);
      with_big.push_back(big_us);
    }
  }
  if (sink == 0) std::puts("");
  return {median(with_store), median(bare), median(bare_hash), median(with_big)};
}

double time_publish(Store& store, std::size_t payload_bytes, std::size_t key_bytes, int rounds) {
  std::vector<double> times;
  for (int i = 0; i < rounds; ++i) {
    const Entry entry =
        make_entry("publish_" + std::to_string(payload_bytes) + "_" + std::to_string(i), payload_bytes, key_bytes);
    const auto start = Clock::now();
    if (!store.put(entry)) {
      std::fprintf(stderr, "cache_bench: put failed\n");
      std::exit(1);
    }
    times.push_back(since_us(start));
  }
  return median(times);
}

std::string memory_tier_line() {
  try {
    kiln::Engine engine;
    if (engine.devices().empty()) return "N/A (no GPU on this machine)";
    const kiln::Source source = kiln::Source::builtin("saxpy");
    (void)engine.kernel(source, "saxpy");
    constexpr int kLookups = 1000000;
    std::vector<double> batches;
    for (int batch = 0; batch < 5; ++batch) {
      const auto start = Clock::now();
      for (int i = 0; i < kLookups; ++i) {
        const kiln::Kernel kernel = engine.kernel(source, "saxpy");
        if (!kernel) return "lookup failed";
      }
      batches.push_back(std::chrono::duration<double, std::nano>(Clock::now() - start).count() / kLookups);
    }
    char text[64];
    std::snprintf(text, sizeof(text), "%.1f ns", median(batches));
    return text;
  } catch (const kiln::Error& error) {
    return std::string("N/A (") + error.what() + ")";
  }
}

/// Writes `count` small entries straight into the layout (no fsync: this only builds a big cache).
void fill(Store& store, int count) {
  for (int i = 0; i < count; ++i) {
    const Entry entry = make_entry("filler" + std::to_string(i), 1024, 64);
    const std::vector<std::byte> bytes = kiln::cache::serialize(entry);
    const fs::path path = store.entry_path(entry.key_hash);
    ::mkdir(path.parent_path().c_str(), 0700);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || ::write(fd, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) {
      std::fprintf(stderr, "cache_bench: cannot write %s\n", path.c_str());
      std::exit(1);
    }
    ::close(fd);
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Keep freed buffers in the heap: otherwise whether a 500 KB vector comes from a fresh mmap (page
  // faults, ~60 us here) depends on glibc's adaptive thresholds, and that noise would swamp both columns.
  ::mallopt(M_MMAP_THRESHOLD, 64 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 256 << 20);
  int entries = 100000;
  int rounds = 2000;
  fs::path base = fs::temp_directory_path();
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      std::printf(
          "cache_bench [--entries N] [--rounds R] [--dir PATH]\n"
          "  disk hit: Store::get vs a bare open+fstat+read+close of the same file (median of R, default 2000)\n"
          "  publish: Store::put; scale: a cache of N entries (default 100000) under PATH (default $TMPDIR)\n");
      return 0;
    }
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--entries") entries = std::atoi(argv[i + 1]);
    if (flag == "--rounds") rounds = std::atoi(argv[i + 1]);
    if (flag == "--dir") base = argv[i + 1];
  }
  const fs::path dir = base / ("kiln-cache-bench-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  // A source and a user header, as the engine's keys are (kiln/rtc.h is in them as a digest, not text).
  constexpr std::size_t kKeyBytes = 512;

  std::printf("## cache_bench\n\n");
  std::printf("Memory-tier hit (Engine::kernel, cached): %s\n\n", memory_tier_line().c_str());

  kiln::cache::StoreConfig config;
  config.root = dir / "small";
  config.max_size = 1ULL << 40;
  Store store(config);
  config.root = dir / "big";
  Store big(config);
  const Entry small = make_entry("hit5k", 5 * 1024, kKeyBytes);
  const Entry large = make_entry("hit500k", 500 * 1024, kKeyBytes);
  auto start = Clock::now();
  fill(big, entries);
  const double fill_s = since_us(start) / 1e6;
  for (Store* s : {&store, &big}) {
    if (!s->put(small) || !s->put(large)) {
      std::fprintf(stderr, "cache_bench: put failed\n");
      return 1;
    }
  }
  const HitTimes small_hits = time_hits(store, small, rounds, &big);
  const HitTimes large_hits = time_hits(store, large, rounds);
  const double publish_small = time_publish(store, 5 * 1024, kKeyBytes, 50);
  const double publish_large = time_publish(store, 500 * 1024, kKeyBytes, 50);

  std::printf(
      "| disk hit (page cache warm), median of %d | Store::get | bare open+read | ratio | bare read + XXH3-128 "
      "(ratio) |\n",
      rounds);
  std::printf("|---|---:|---:|---:|---:|\n");
  for (const auto& [label, entry, hits] : {std::tuple{"5 KB", &small, &small_hits}, {"500 KB", &large, &large_hits}}) {
    std::printf("| %s binary (file %zu B) | %.1f us | %.1f us | %.2fx | %.1f us (%.2fx) |\n", label,
                static_cast<std::size_t>(fs::file_size(store.entry_path(entry->key_hash))), hits->store_us,
                hits->bare_us, hits->store_us / hits->bare_us, hits->bare_hash_us, hits->bare_hash_us / hits->bare_us);
  }
  std::printf("\n");
  std::printf("| publish (Store::put: temp, write, fsync, rename), median of 50 | time |\n|---|---:|\n");
  std::printf("| 5 KB binary | %.1f us |\n| 500 KB binary | %.1f us |\n\n", publish_small, publish_large);

  start = Clock::now();
  const auto files = big.list();
  const double list_ms = since_us(start) / 1e3;
  start = Clock::now();
  std::uint64_t total = 0;
  for (const auto& file : big.list()) total += file.size;
  const double total_ms = since_us(start) / 1e3;
  start = Clock::now();
  std::uint64_t estimate = 0;
  for (int i = 0; i < 1000; ++i) estimate = big.size_estimate().value_or(0);
  const double estimate_us = since_us(start) / 1000;
  start = Clock::now();
  const auto trimmed = big.trim(total / 10 * 9);
  const double trim_ms = since_us(start) / 1e3;

  std::printf("| scale: %zu entries (%.1f MB; written in %.1f s) | time |\n|---|---:|\n", files.size(),
              static_cast<double>(total) / 1e6, fill_s);
  std::printf("| 5 KB disk hit, cache of 3 entries | %.1f us |\n", small_hits.store_us);
  std::printf("| 5 KB disk hit, cache of %zu entries (same run, alternating) | %.1f us (%+.0f%%) |\n", files.size(),
              small_hits.big_store_us, 100.0 * (small_hits.big_store_us / small_hits.store_us - 1.0));
  std::printf("| list (Store::list) | %.1f ms |\n", list_ms);
  std::printf("| total by full scan (list + sum) | %.1f ms |\n", total_ms);
  std::printf("| total from the running estimate (lock/size) | %.1f us (%s) |\n", estimate_us,
              estimate == total ? "matches the scan" : "differs from the scan");
  std::printf("| trim to 90%% (%zu entries removed) | %.1f ms |\n", trimmed ? trimmed->removed : 0, trim_ms);

  fs::remove_all(dir);
  return 0;
}
