// hash_dispatch [rounds]: for 4,744 B (a small kernel's entry), 13,698 B and 65,536 B, runs `rounds`
// (default 25) fresh child processes per vector unit; each child times one XXH3-128 of the bytes
// through that unit, then a second one. Prints the medians. Units the CPU lacks are skipped.
// (A child: hash_dispatch --child UNIT BYTES.)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kiln/base/xxh3.hpp"

namespace {

using Clock = std::chrono::steady_clock;
namespace d = kiln::cache::detail;

const char* kUnits[] = {"baseline", "avx2", "avx512"};

bool has_unit(int unit) {
  if (unit == 0) return true;
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
  __builtin_cpu_init();
  if (unit == 1) return __builtin_cpu_supports("avx2") != 0;
  return __builtin_cpu_supports("avx512f") != 0;
#else
  return false;
#endif
}

int child(int unit, std::size_t bytes) {
  std::vector<unsigned char> data(bytes);
  for (std::size_t i = 0; i < bytes; ++i) data[i] = static_cast<unsigned char>(i * 131 + 7);
  const auto hash = [&] {
    if (unit == 2) return d::xxh3_128_avx512(data.data(), bytes, 1);
    if (unit == 1) return d::xxh3_128_avx2(data.data(), bytes, 1);
    return d::xxh3_128_baseline(data.data(), bytes, 1);
  };
  const auto t0 = Clock::now();
  const kiln::cache::Hash128 first = hash();
  const auto t1 = Clock::now();
  const kiln::cache::Hash128 second = hash();
  const auto t2 = Clock::now();
  if (!(first == second)) return 1;
  std::printf("%.3f %.3f\n", std::chrono::duration<double, std::micro>(t1 - t0).count(),
              std::chrono::duration<double, std::micro>(t2 - t1).count());
  return 0;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--child") == 0) {
    return child(std::atoi(argv[2]), std::strtoul(argv[3], nullptr, 10));
  }
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 25;
  std::printf("hash_dispatch: XXH3-128, medians of %d fresh processes per cell, us\n\n", rounds);
  std::printf("| bytes | unit | first call | second call |\n|---:|---|---:|---:|\n");
  for (const std::size_t bytes : {std::size_t{4744}, std::size_t{13698}, std::size_t{65536}}) {
    for (int unit = 0; unit < 3; ++unit) {
      if (!has_unit(unit)) continue;
      std::vector<double> first, second;
      for (int r = 0; r < rounds; ++r) {
        const std::string command = std::string(argv[0]) + " --child " + std::to_string(unit) + " " + std::to_string(bytes);
        FILE* pipe = ::popen(command.c_str(), "r");
        if (pipe == nullptr) return 1;
        double a = 0, b = 0;
        if (std::fscanf(pipe, "%lf %lf", &a, &b) == 2) {
          first.push_back(a);
          second.push_back(b);
        }
        if (::pclose(pipe) != 0) return 1;
      }
      std::printf("| %zu | %s | %.2f | %.2f |\n", bytes, kUnits[unit], median(first), median(second));
    }
  }
  return 0;
}
