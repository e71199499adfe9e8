// One "node" of a fleet for the remote tests and the remote benchmark: an Engine configured from the
// environment (KILN_CACHE_DIR, KILN_REMOTE_CACHE, KILN_REMOTE_*) prewarms a list of requests for one
// target and prints one JSON line with what happened.
//
//   kiln_remote_node [--sources all|a,b,...] [--variants N] [--count N] [--rotate K] [--target sm_90]
//                    [--threads N]
//
// Requests: every listed source (built-ins, with the kernels on their `//! kiln-kernels:` line) times
// N option variants (variant v > 0 adds -DKILN_VARIANT=v), variant-major, cut to --count, then started
// at index K (wrapping around), so nodes of a fleet can work through the same list in different orders.
// Exit status: 0 when every request succeeded, 1 when one failed, 77 when the CUDA compiler is missing.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine_access.hpp"
#include "kiln/engine.hpp"
#include "kiln/error.hpp"

namespace {

struct Request {
  kiln::Source source;
  kiln::Options options;
  std::vector<std::string> names;
  std::string label;
};

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find(separator, start), text.size());
    if (end > start) parts.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

}  // namespace

int main(int argc, char** argv) {
  std::string sources = "all";
  std::string target = "sm_90";
  int variants = 1;
  std::size_t count = 0;
  std::size_t rotate = 0;
  unsigned threads = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--sources")
      sources = value;
    else if (flag == "--variants")
      variants = std::max(1, std::atoi(value.c_str()));
    else if (flag == "--count")
      count = static_cast<std::size_t>(std::atol(value.c_str()));
    else if (flag == "--rotate")
      rotate = static_cast<std::size_t>(std::atol(value.c_str()));
    else if (flag == "--target")
      target = value;
    else if (flag == "--threads")
      threads = static_cast<unsigned>(std::max(1, std::atoi(value.c_str())));
    else {
      std::fprintf(stderr, "kiln_remote_node: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }

  try {
    kiln::Engine engine;
    for (const kiln::LaneInfo& lane : engine.lanes()) {
      if (lane.vendor == kiln::Vendor::cuda && !lane.compiler_loaded) {
        std::printf("SKIPPED: the CUDA compiler (NVRTC) is not available: %s\n", lane.status.c_str());
        return 77;
      }
    }
    const std::vector<std::string> names = sources == "all" ? kiln::Source::builtin_names() : split(sources, ',');
    std::vector<Request> requests;
    for (int v = 0; v < variants; ++v) {
      for (const std::string& name : names) {
        kiln::Source source = kiln::Source::builtin(name);
        kiln::Options options;
        if (v > 0) options.define("KILN_VARIANT", std::to_string(v));
        requests.push_back(Request{source, options, source.listed_kernels(), fmt::format("{}#{}", name, v)});
      }
    }
    if (count > 0 && requests.size() > count)
      requests.erase(requests.begin() + static_cast<std::ptrdiff_t>(count), requests.end());
    if (!requests.empty()) {
      std::rotate(requests.begin(), requests.begin() + static_cast<std::ptrdiff_t>(rotate % requests.size()),
                  requests.end());
    }

    std::atomic<std::size_t> next{0};
    std::atomic<int> failed{0};
    std::atomic<int> compiled{0};
    std::atomic<int> cached{0};
    std::mutex mutex;
    double max_ms = 0;
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> workers;
    for (unsigned t = 0; t < threads; ++t) {
      workers.emplace_back([&] {
        for (std::size_t i = next++; i < requests.size(); i = next++) {
          const auto begin = std::chrono::steady_clock::now();
          try {
            const kiln::PrewarmResult result =
                engine.prewarm(requests[i].source, requests[i].options, requests[i].names, target);
            (result.origin == kiln::Origin::compiled ? compiled : cached)++;
          } catch (const std::exception& e) {
            ++failed;
            std::fprintf(stderr, "kiln_remote_node: %s failed: %s\n", requests[i].label.c_str(), e.what());
          }
          const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
          const std::lock_guard lock(mutex);
          max_ms = std::max(max_ms, ms);
        }
      });
    }
    for (std::thread& worker : workers) worker.join();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    // Every tier of a chain is flushed; the counters reported are the first tier's.
    kiln::cache::RemoteStats remote;
    for (kiln::cache::RemoteTier* tier : kiln::detail::EngineAccess::core(engine).storage().remotes()) {
      tier->flush(std::chrono::seconds(30));
    }
    if (kiln::cache::RemoteTier* tier = kiln::detail::EngineAccess::core(engine).remote()) {
      remote = tier->remote_stats();
    }
    const kiln::cache::Counters stats = engine.stats();
    std::printf(
        "{\"requests\": %zu, \"failed\": %d, \"compiled\": %d, \"cached\": %d, \"compiles\": %llu, "
        "\"disk_hits\": %llu, \"remote_hits\": %llu, \"remote_misses\": %llu, \"remote_errors\": %llu, "
        "\"remote_failures\": %llu, \"remote_skipped\": %llu, \"remote_rejected\": %llu, \"published\": %llu, "
        "\"leases_taken\": %llu, \"lease_waits\": %llu, \"lease_wait_hits\": %llu, \"remote_get_ms\": %.3f, "
        "\"remote_get_max_ms\": %.3f, \"max_request_ms\": %.3f, \"seconds\": %.3f}\n",
        requests.size(), failed.load(), compiled.load(), cached.load(), static_cast<unsigned long long>(stats.compiles),
        static_cast<unsigned long long>(stats.disk_hits), static_cast<unsigned long long>(stats.remote_hits),
        static_cast<unsigned long long>(stats.remote_misses), static_cast<unsigned long long>(stats.remote_errors),
        static_cast<unsigned long long>(remote.failures), static_cast<unsigned long long>(remote.skipped),
        static_cast<unsigned long long>(remote.rejected), static_cast<unsigned long long>(remote.published),
        static_cast<unsigned long long>(remote.leases_taken), static_cast<unsigned long long>(remote.lease_waits),
        static_cast<unsigned long long>(remote.lease_wait_hits), static_cast<double>(remote.get_nanoseconds) * 1e-6,
        static_cast<double>(remote.get_max_nanoseconds) * 1e-6, max_ms, seconds);
    std::fflush(stdout);
    return failed.load() == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln_remote_node: %s\n", e.what());
    return 1;
  }
}
