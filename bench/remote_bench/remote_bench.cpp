// The Redis remote tier, measured against a redis-server this program starts on 127.0.0.1.
//
// 1. Remote hit latency, request -> verified binary (GET + parse + checksum + canonical key check), for
//    a 5 KB and a 500 KB entry, against a bare hiredis GET of the same bytes; plus an engine request
//    (Engine::prewarm with a memory-only local cache, so every request is a remote hit) for a real
//    saxpy entry.
// 2. A fresh node's disk-empty start: one node process with an empty local cache requests K kernels
//    (sm_90), served by compiling (NVRTC), by the Redis tier, by the HTTP tier (a loopback nginx with
//    WebDAV PUT, started here) and by a chain Redis -> HTTP whose Redis is empty (every hit comes from
//    HTTP and back-fills Redis). Per-kernel time is the node's request loop / K (process start and
//    engine set-up excluded), median of --fresh-runs runs.
// 3. A fleet: N node processes (kiln_remote_bench_node, separate local caches) request the same K
//    kernels (built-in sources x option variants, sm_90) at the same time: total compiles and wall time
//    without a remote tier, with one but no compile lease, and with the lease (same order, and each
//    node starting at a different point of the list).
//
//   remote_bench [--iterations N] [--nodes 8] [--kernels 50] [--fresh-runs 3] [--no-fleet] [--no-engine]
//                [--no-latency] [--no-fresh]
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "engine_access.hpp"
#include "kiln/cache/entry.hpp"
#include "kiln/cache/key.hpp"
#include "kiln/cache/remote.hpp"
#include "kiln/engine.hpp"
#include "http_server.hpp"
#include "redis_server.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using kiln::test::RedisServer;

struct Summary {
  double median_us = 0;
  double p90_us = 0;
  double mean_us = 0;
};

Summary summarize(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  Summary s;
  if (samples.empty()) return s;
  s.median_us = samples[samples.size() / 2];
  s.p90_us = samples[samples.size() * 9 / 10];
  double total = 0;
  for (const double v : samples) total += v;
  s.mean_us = total / static_cast<double>(samples.size());
  return s;
}

double since_us(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

/// A synthetic entry whose serialized size is about `bytes`.
kiln::cache::Entry make_entry(const std::string& tag, std::size_t bytes) {
  kiln::cache::CanonicalKey key;
  key.add("format", "1");
  key.add("vendor", "cuda");
  key.add("target", "sm_90");
  key.add("source", "extern \"C\" __global__ void bench_" + tag + "() {}");
  kiln::cache::Entry entry;
  entry.vendor = kiln::Vendor::cuda;
  entry.payload_kind = kiln::PayloadKind::cubin;
  entry.target = "sm_90";
  entry.compiler = "nvrtc 13.0";
  entry.created_unix = 1700000000;
  entry.key_hash = key.hash();
  entry.canonical_key = key.bytes();
  entry.names.push_back({"bench_" + tag, "bench_" + tag});
  const std::size_t overhead = kiln::cache::serialize(entry).size();
  entry.payload.resize(bytes > overhead ? bytes - overhead : 1);
  std::mt19937_64 random(bytes);
  for (std::byte& b : entry.payload) b = static_cast<std::byte>(random() & 0xFF);
  return entry;
}

/// Runs `a` and `b` in alternating blocks of 25 (each block after a warm-up call), so both see the
/// same machine load and neither inherits the other's allocator or socket state call by call.
template <typename A, typename B>
void run_blocks(int iterations, A&& a, B&& b, std::vector<double>& a_samples, std::vector<double>& b_samples) {
  constexpr int kBlock = 25;
  for (int round = 0; static_cast<int>(a_samples.size()) < iterations; ++round) {
    for (int half = 0; half < 2; ++half) {
      const bool run_a = (round + half) % 2 == 0;
      (void)(run_a ? a() : b());  // warm-up
      for (int i = 0; i < kBlock; ++i) (run_a ? a_samples : b_samples).push_back(run_a ? a() : b());
    }
  }
}

/// A bare hiredis connection set up like the tier's (same connect and operation timeouts).
kiln::test::RedisContext bare_connection(const kiln::cache::RemoteConfig& config) {
  const auto to_timeval = [](std::chrono::milliseconds ms) {
    return timeval{static_cast<time_t>(ms.count() / 1000), static_cast<suseconds_t>((ms.count() % 1000) * 1000)};
  };
  kiln::test::RedisContext context(
      redisConnectWithTimeout(config.host.c_str(), config.port, to_timeval(config.connect_timeout)));
  if (!context || context->err != 0 ||
      redisSetTimeout(context.get(), to_timeval(config.operation_timeout)) != REDIS_OK) {
    std::printf("cannot connect for the bare GET\n");
    std::exit(1);
  }
  return context;
}

/// Bare GET vs tier get() of the same key, interleaved.
void hit_latency(const RedisServer& server, std::size_t bytes, int iterations) {
  kiln::cache::RemoteConfig config = kiln::cache::parse_remote_url(server.url());
  config.lease_wait = std::chrono::milliseconds(0);
  const auto tier = kiln::cache::open_remote(config);
  const kiln::cache::Entry entry = make_entry(std::to_string(bytes), bytes);
  std::string detail;
  if (!tier->put(entry, &detail)) {
    std::printf("put failed: %s\n", detail.c_str());
    std::exit(1);
  }
  const std::string name = config.entry_key(entry.key_hash);
  const auto context = bare_connection(config);
  std::vector<double> bare;
  std::vector<double> verified;
  std::size_t value_bytes = 0;
  const auto bare_get = [&] {
    const auto start = Clock::now();
    {
      const kiln::test::RedisReply reply = kiln::test::redis_command(context.get(), {"GET", name});
      if (!reply || reply->type != REDIS_REPLY_STRING) std::exit(1);
      value_bytes = reply->len;
    }
    return since_us(start);
  };
  const auto verified_get = [&] {
    const auto start = Clock::now();
    {
      const auto result = tier->get(entry.key_hash, entry.canonical_key);
      if (result.outcome != kiln::cache::LookupOutcome::hit) {
        std::printf("tier get missed: %s\n", result.detail.c_str());
        std::exit(1);
      }
    }  // freed inside the measurement, like the bare GET's reply
    return since_us(start);
  };
  run_blocks(iterations, bare_get, verified_get, bare, verified);
  const Summary b = summarize(bare);
  const Summary v = summarize(verified);
  std::printf("| %zu B | %.1f | %.1f | %.1f | %.1f | %.2fx |\n", value_bytes, b.median_us, b.p90_us, v.median_us,
              v.p90_us, v.median_us / b.median_us);
}

/// Engine::prewarm where every request is a remote hit (memory-only local cache) vs a bare GET.
void engine_hit_latency(const RedisServer& server, int iterations) {
  kiln::EngineConfig config = kiln::EngineConfig::from_environment();
  config.cache = kiln::cache::StoreConfig{};
  config.cache.disabled = true;
  config.remote = server.url();
  kiln::Engine engine(config);
  const kiln::Source source = kiln::Source::builtin("saxpy");
  const kiln::Options options;
  const std::vector<std::string> names = source.listed_kernels();
  try {
    (void)engine.prewarm(source, options, names, "sm_90");  // compiles and publishes
  } catch (const std::exception& e) {
    std::printf("(engine request latency skipped: %s)\n", e.what());
    return;
  }
  kiln::detail::EngineAccess::core(engine).remote()->flush(std::chrono::seconds(10));
  const std::string name = "kiln:v1:" + engine.describe_key(source, options, names, "sm_90").first.hex();
  const auto context = bare_connection(kiln::detail::EngineAccess::core(engine).remote()->config());
  std::vector<double> bare;
  std::vector<double> request;
  std::size_t value_bytes = 0;
  const auto bare_get = [&] {
    const auto start = Clock::now();
    {
      const kiln::test::RedisReply reply = kiln::test::redis_command(context.get(), {"GET", name});
      if (!reply || reply->type != REDIS_REPLY_STRING) std::exit(1);
      value_bytes = reply->len;
    }
    return since_us(start);
  };
  const auto engine_request = [&] {
    const auto start = Clock::now();
    const kiln::PrewarmResult result = engine.prewarm(source, options, names, "sm_90");
    const double us = since_us(start);
    if (result.origin != kiln::Origin::disk) std::exit(1);
    return us;
  };
  run_blocks(iterations, bare_get, engine_request, bare, request);
  const Summary b = summarize(bare);
  const Summary r = summarize(request);
  std::printf("| %zu B (saxpy, Engine::prewarm) | %.1f | %.1f | %.1f | %.1f | %.2fx |\n", value_bytes, b.median_us,
              b.p90_us, r.median_us, r.p90_us, r.median_us / b.median_us);
  const auto stats = engine.stats();
  std::printf("(engine: %llu remote hits, %llu compile)\n", static_cast<unsigned long long>(stats.remote_hits),
              static_cast<unsigned long long>(stats.compiles));
}

struct NodeRun {
  pid_t pid = -1;
  int out = -1;
  std::string output;
};

struct FleetResult {
  double wall_seconds = 0;
  long compiles = 0;
  long remote_hits = 0;
  long lease_waits = 0;
  long failed = 0;
  double node_seconds = 0;  ///< the nodes' request loops, summed
};

FleetResult run_fleet(const std::string& node_binary, int nodes, int kernels, const std::string& remote, bool lease,
                      bool rotate) {
  std::vector<std::filesystem::path> dirs;
  std::vector<NodeRun> runs(static_cast<std::size_t>(nodes));
  const int variants = (kernels + 5) / 6 + 1;
  const auto start = Clock::now();
  for (int n = 0; n < nodes; ++n) {
    std::string dir = (std::filesystem::temp_directory_path() / "kiln-fleet-XXXXXX").string();
    if (mkdtemp(dir.data()) == nullptr) std::exit(1);
    dirs.emplace_back(dir);
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry(*e);
      if (entry.starts_with("KILN_CACHE_DIR=") || entry.starts_with("KILN_REMOTE_")) continue;
      env_strings.push_back(entry);
    }
    env_strings.push_back("KILN_CACHE_DIR=" + dir);
    if (!remote.empty()) env_strings.push_back("KILN_REMOTE_CACHE=" + remote);
    if (!lease) env_strings.push_back("KILN_REMOTE_LEASE_WAIT_MS=0");
    std::vector<std::string> args = {node_binary,
                                     "--sources",
                                     "all",
                                     "--variants",
                                     std::to_string(variants),
                                     "--count",
                                     std::to_string(kernels),
                                     "--rotate",
                                     std::to_string(rotate ? n * kernels / nodes : 0)};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (std::string& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    int pipe_fds[2];
    if (pipe(pipe_fds) != 0) std::exit(1);
    const pid_t pid = fork();
    if (pid == 0) {
      dup2(pipe_fds[1], STDOUT_FILENO);
      close(pipe_fds[0]);
      close(pipe_fds[1]);
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    close(pipe_fds[1]);
    runs[static_cast<std::size_t>(n)] = NodeRun{pid, pipe_fds[0], {}};
  }
  FleetResult result;
  for (NodeRun& run : runs) {
    char buffer[4096];
    for (ssize_t got; (got = read(run.out, buffer, sizeof buffer)) > 0;)
      run.output.append(buffer, static_cast<std::size_t>(got));
    close(run.out);
    int status = 0;
    waitpid(run.pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::printf("node failed (status %d): %s\n", status, run.output.c_str());
      ++result.failed;
      continue;
    }
    const nlohmann::json line = nlohmann::json::parse(run.output);
    result.compiles += line["compiles"].get<long>();
    result.remote_hits += line["remote_hits"].get<long>();
    result.lease_waits += line["lease_waits"].get<long>();
    result.failed += line["failed"].get<long>();
    result.node_seconds += line["seconds"].get<double>();
  }
  result.wall_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  for (const auto& dir : dirs) std::filesystem::remove_all(dir);
  return result;
}

}  // namespace

/// One fresh node (empty local cache) requesting `kernels` kernels with `remote` configured: the median
/// over `runs` of its request loop per kernel (ms), and the last run's counters.
struct FreshResult {
  double ms_per_kernel = 0;
  FleetResult last;
};
FreshResult fresh_node(const std::string& node_binary, int kernels, const std::string& remote, int runs,
                       const std::function<void()>& before_each = {}) {
  std::vector<double> per_kernel;
  FreshResult fresh;
  for (int r = 0; r < runs; ++r) {
    if (before_each) before_each();
    fresh.last = run_fleet(node_binary, 1, kernels, remote, false, false);
    per_kernel.push_back(fresh.last.node_seconds * 1000.0 / kernels);
  }
  std::sort(per_kernel.begin(), per_kernel.end());
  fresh.ms_per_kernel = per_kernel[per_kernel.size() / 2];
  return fresh;
}

/// The HTTP tier's get() (GET + size checks + parse + key check) against a loopback nginx, next to the
/// Redis tier's get() of the same entry, interleaved in blocks.
void http_hit_latency(const RedisServer& redis, const kiln::test::NginxServer& nginx, std::size_t bytes,
                      int iterations) {
  kiln::cache::RemoteConfig redis_config = kiln::cache::parse_remote_url(redis.url());
  redis_config.lease_wait = std::chrono::milliseconds(0);
  const auto redis_tier = kiln::cache::open_remote(redis_config);
  const auto http_tier = kiln::cache::open_remote(kiln::cache::parse_remote_url(nginx.url("/kiln")));
  const kiln::cache::Entry entry = make_entry("http" + std::to_string(bytes), bytes);
  std::string detail;
  if (!redis_tier->put(entry, &detail) || !http_tier->put(entry, &detail)) {
    std::printf("put failed: %s\n", detail.c_str());
    std::exit(1);
  }
  const auto timed_get = [&](kiln::cache::RemoteTier& tier) {
    const auto start = Clock::now();
    {
      const auto result = tier.get(entry.key_hash, entry.canonical_key);
      if (result.outcome != kiln::cache::LookupOutcome::hit) {
        std::printf("get missed: %s\n", result.detail.c_str());
        std::exit(1);
      }
    }
    return since_us(start);
  };
  std::vector<double> redis_samples;
  std::vector<double> http_samples;
  run_blocks(
      iterations, [&] { return timed_get(*redis_tier); }, [&] { return timed_get(*http_tier); }, redis_samples,
      http_samples);
  const Summary r = summarize(redis_samples);
  const Summary h = summarize(http_samples);
  std::printf("| %zu B | %.1f | %.1f | %.1f | %.1f | %.2fx |\n", bytes, r.median_us, r.p90_us, h.median_us, h.p90_us,
              h.median_us / r.median_us);
}

void fresh_start(const std::string& node_binary, const RedisServer& redis, int kernels, int runs, int iterations) {
  if (!kiln::cache::http_remote_supported() || !kiln::test::NginxServer::find_binary()) {
    std::printf("(fresh-node comparison skipped: needs the HTTP tier and nginx)\n");
    return;
  }
  const kiln::test::NginxServer nginx;
  const std::string http = nginx.url("/kiln");
  std::printf("\n## Remote hit latency, Redis tier vs HTTP tier (loopback redis-server and nginx; get() verified; "
              "microseconds)\n\n");
  std::printf("| entry | Redis get() median | Redis p90 | HTTP get() median | HTTP p90 | HTTP / Redis |\n"
              "|---|---|---|---|---|---|\n");
  http_hit_latency(redis, nginx, 5 * 1024, iterations);
  http_hit_latency(redis, nginx, 500 * 1024, std::max(50, iterations / 4));
  std::printf("\n## A fresh node's disk-empty start: %d kernels (sm_90), one node process, empty local cache, "
              "median of %d runs\n\n", kernels, runs);
  std::printf("| served by | ms per kernel | compiles | remote hits | speed-up vs compiling |\n|---|---|---|---|---|\n");
  redis.command({"FLUSHALL"});
  const FreshResult compile = fresh_node(node_binary, kernels, std::string(), runs);
  const auto row = [&](const char* label, const FreshResult& r) {
    std::printf("| %s | %.2f | %ld | %ld | %.0fx |%s\n", label, r.ms_per_kernel, r.last.compiles, r.last.remote_hits,
                compile.ms_per_kernel / r.ms_per_kernel, r.last.failed != 0 ? " (FAILED requests!)" : "");
    std::fflush(stdout);
  };
  row("compiling (NVRTC, no remote tier)", compile);
  // Fill both tiers once (a node that compiles and publishes to the chain), then measure fresh nodes.
  (void)run_fleet(node_binary, 1, kernels, redis.url() + "," + http, false, false);
  row("Redis tier (loopback redis-server)", fresh_node(node_binary, kernels, redis.url(), runs));
  row("HTTP tier (loopback nginx, WebDAV)", fresh_node(node_binary, kernels, http, runs));
  row("chain Redis -> HTTP, Redis empty (HTTP hits, back-filled)",
      fresh_node(node_binary, kernels, redis.url() + "," + http, runs, [&] { redis.command({"FLUSHALL"}); }));
}

int main(int argc, char** argv) {
  int iterations = 1000;
  int fresh_runs = 3;
  bool fresh = true;
  int nodes = 8;
  int kernels = 50;
  bool fleet = true;
  bool engine = true;
  bool latency = true;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--iterations" && i + 1 < argc)
      iterations = std::atoi(argv[++i]);
    else if (flag == "--nodes" && i + 1 < argc)
      nodes = std::atoi(argv[++i]);
    else if (flag == "--kernels" && i + 1 < argc)
      kernels = std::atoi(argv[++i]);
    else if (flag == "--no-fleet")
      fleet = false;
    else if (flag == "--no-engine")
      engine = false;
    else if (flag == "--no-latency")
      latency = false;
    else if (flag == "--no-fresh")
      fresh = false;
    else if (flag == "--fresh-runs" && i + 1 < argc)
      fresh_runs = std::max(1, std::atoi(argv[++i]));
    else {
      std::fprintf(
          stderr,
          "usage: remote_bench [--iterations N] [--nodes N] [--kernels N] [--fresh-runs N] [--no-fleet] [--no-engine] "
          "[--no-latency] [--no-fresh]\n");
      return 2;
    }
  }
  if (!kiln::cache::remote_supported() || !RedisServer::find_binary()) {
    std::printf("SKIPPED: needs hiredis in this build and a redis-server binary\n");
    return 77;
  }
  const RedisServer server;
  std::string version;
  (void)kiln::cache::open_remote(kiln::cache::parse_remote_url(server.url()))->ping(&version);
  if (latency) {
    std::printf("## Remote hit latency (loopback; %s; %d iterations; microseconds)\n\n", version.c_str(), iterations);
    std::printf("| value | bare GET median | bare GET p90 | kiln get() median | kiln get() p90 | ratio (median) |\n");
    std::printf("|---|---|---|---|---|---|\n");
    hit_latency(server, 5 * 1024, iterations);
    hit_latency(server, 500 * 1024, std::max(50, iterations / 4));
    if (engine) engine_hit_latency(server, std::max(50, iterations / 4));
  }

  if (fresh) fresh_start(KILN_REMOTE_BENCH_NODE, server, kernels, fresh_runs, iterations);

  if (fleet) {
    const std::string node_binary = KILN_REMOTE_BENCH_NODE;
    std::printf("\n## Fleet: %d node processes, the same %d kernels (sm_90, NVRTC), separate local caches\n\n", nodes,
                kernels);
    std::printf("| configuration | compiles (fleet) | remote hits | waits on a peer's lease | wall time (s) |\n");
    std::printf("|---|---|---|---|---|\n");
    struct Config {
      const char* label;
      bool remote;
      bool lease;
      bool rotate;
    };
    const Config configs[] = {{"no remote tier", false, false, false},
                              {"remote, no lease (same order)", true, false, false},
                              {"remote + lease (same order)", true, true, false},
                              {"remote, no lease (rotated order)", true, false, true},
                              {"remote + lease (rotated order)", true, true, true}};
    for (const Config& c : configs) {
      server.command({"FLUSHALL"});
      const FleetResult r =
          run_fleet(node_binary, nodes, kernels, c.remote ? server.url() : std::string(), c.lease, c.rotate);
      std::printf("| %s | %ld | %ld | %ld | %.1f |%s\n", c.label, r.compiles, r.remote_hits, r.lease_waits,
                  r.wall_seconds, r.failed != 0 ? " (FAILED requests!)" : "");
      std::fflush(stdout);
    }
  }
  return 0;
}
