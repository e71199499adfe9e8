// read_floor FILE [N]: medians of N (default 2000) rounds, each variant once per round in a fixed
// order, of: open + fstat + read into a vector + close; the same + XXH3-128 of the bytes; and three
// mapped readers (plain mmap, MAP_POPULATE, MADV_POPULATE_READ) + XXH3-128 + munmap. Prints one
// markdown row per variant with its ratio to the plain read.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "kiln/base/hash.hpp"  // XXH3-128 with kiln's AVX2 / AVX-512 dispatch, as Store::get uses it

namespace {

std::uint64_t xxh3(const void* data, std::size_t size) {
  return kiln::cache::hash128(std::span(static_cast<const std::byte*>(data), size), kiln::cache::kChecksumSeed).low;
}

using Clock = std::chrono::steady_clock;
volatile unsigned long long g_sink = 0;

#ifndef MADV_POPULATE_READ
constexpr int MADV_POPULATE_READ = 22;  // Linux 5.14
#endif

struct File {
  int fd = -1;
  std::size_t size = 0;
  explicit File(const char* path) {
    fd = ::open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st {};
    if (fd < 0 || ::fstat(fd, &st) != 0) {
      std::perror(path);
      std::exit(1);
    }
    size = static_cast<std::size_t>(st.st_size);
  }
  ~File() { ::close(fd); }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
};

void read_into(const char* path, bool hash) {
  const File f(path);
  std::vector<char> bytes(f.size);
  std::size_t done = 0;
  while (done < f.size) {
    const ssize_t n = ::read(f.fd, bytes.data() + done, f.size - done);
    if (n <= 0) std::exit(1);
    done += static_cast<std::size_t>(n);
  }
  g_sink = g_sink + (hash ? xxh3(bytes.data(), bytes.size()) : bytes.size());
}

void map_and_hash(const char* path, int flags, bool populate_read) {
  const File f(path);
  void* p = ::mmap(nullptr, f.size, PROT_READ, MAP_PRIVATE | flags, f.fd, 0);
  if (p == MAP_FAILED) std::exit(1);
  if (populate_read && ::madvise(p, f.size, MADV_POPULATE_READ) != 0) std::exit(1);
  g_sink = g_sink + xxh3(p, f.size);
  ::munmap(p, f.size);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: read_floor FILE [rounds]\n");
    return 2;
  }
  const char* path = argv[1];
  const int rounds = argc > 2 ? std::max(1, std::atoi(argv[2])) : 2000;
  struct Variant {
    const char* name;
    std::function<void()> run;
    std::vector<double> us;
  };
  std::vector<Variant> variants;
  variants.push_back({"read", [&] { read_into(path, false); }, {}});
  variants.push_back({"read + XXH3-128", [&] { read_into(path, true); }, {}});
  variants.push_back({"mmap + XXH3-128", [&] { map_and_hash(path, 0, false); }, {}});
  variants.push_back({"mmap(MAP_POPULATE) + XXH3-128", [&] { map_and_hash(path, MAP_POPULATE, false); }, {}});
  variants.push_back({"mmap + MADV_POPULATE_READ + XXH3-128", [&] { map_and_hash(path, 0, true); }, {}});
  for (int r = 0; r < rounds; ++r) {
    for (Variant& v : variants) {
      const auto start = Clock::now();
      v.run();
      v.us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
    }
  }
  std::printf("read_floor %s (%d rounds, medians)\n\n| variant | us | / read |\n|---|---:|---:|\n", path, rounds);
  double base = 0;
  for (Variant& v : variants) {
    std::nth_element(v.us.begin(), v.us.begin() + static_cast<long>(v.us.size() / 2), v.us.end());
    const double median = v.us[v.us.size() / 2];
    if (base == 0) base = median;
    std::printf("| %s | %.1f | %.2fx |\n", v.name, median, median / base);
  }
  return 0;
}
