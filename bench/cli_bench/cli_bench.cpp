// cli_bench: how fast the `kiln` CLI is on a big cache, and how prewarm scales with -j.
//
//   cli_bench [cache] [--entries N] [--dir DIR] [--kiln PATH]
//       Synthesises N entries (default 100,000; small payloads; serialized with cache::serialize, last-use
//       times spread over 100 days) and times `kiln cache ls --json`, `ls`, `stats`, `verify` and
//       `prune --max-size <half>`, each a fresh process, as a user runs them. Goals: ls --json < 2 s,
//       stats < 1 s, prune to half < 5 s; verify is reported in entries/s.
//   cli_bench synthesise --dir DIR [--entries N]
//       Only writes the entries (into DIR/cache), e.g. to profile one command by hand.
//   cli_bench prewarm [--jobs 1,16] [--variants 8] [--target sm_90]... [--workers process,thread]
//                     [--repeat N] [--kiln PATH]
//       For each -j value (and each --workers mode when given; default: kiln's own), a fresh cache and
//       one `kiln prewarm --all-builtin` over the built-in set x <variants> option sets
//       (-DKILN_BENCH_VARIANT=v), CUDA_CACHE_DISABLE=1 so the driver's own cache cannot help. Each row
//       is the median of N runs (default 1; the runs alternate between rows, so load drifts hit every
//       row alike). Prints wall time (the command's whole life, spawn to exit), summed compile time
//       and the speedup over the mode's first -j.
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kiln/cache/entry.hpp"
#include "kiln/cache/key.hpp"
#include "kiln/cache/store.hpp"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string g_kiln = KILN_CLI_PATH;

struct Run {
  int rc = -1;
  double seconds = 0;
  std::string out;
};

/// Runs kiln with `env` added, stdout to a file (read back when `keep_output`), stderr inherited.
Run run_kiln(const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
             const fs::path& scratch, bool keep_output) {
  std::vector<std::string> environment;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    if (env.count(entry.substr(0, entry.find('='))) == 0) environment.push_back(entry);
  }
  for (const auto& [name, value] : env) environment.push_back(name + "=" + value);
  std::vector<char*> envp;
  for (std::string& entry : environment) envp.push_back(entry.data());
  envp.push_back(nullptr);
  std::vector<std::string> storage{g_kiln};
  storage.insert(storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& arg : storage) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const fs::path out_path = scratch / "stdout.txt";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  Run run;
  const auto start = Clock::now();
  pid_t pid = -1;
  if (posix_spawn(&pid, g_kiln.c_str(), &actions, nullptr, argv.data(), envp.data()) != 0) {
    posix_spawn_file_actions_destroy(&actions);
    throw std::runtime_error("cannot start " + g_kiln);
  }
  posix_spawn_file_actions_destroy(&actions);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
  }
  run.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  run.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (keep_output) {
    std::ifstream in(out_path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    run.out = text.str();
  }
  return run;
}

fs::path make_temp_dir(const std::string& tag) {
  const fs::path dir =
      fs::temp_directory_path() / fmt::format("kiln-cli-bench-{}-{}-{}", tag, ::getpid(), std::random_device{}());
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace);
  return dir;
}

/// Writes `count` small entries straight into the store's layout (no fsync: a benchmark fixture).
std::uint64_t synthesise(const fs::path& root, std::size_t count) {
  kiln::cache::StoreConfig config;
  config.root = root;
  config.max_size = 1ULL << 40;
  kiln::cache::Store store(config);
  const auto now = std::chrono::system_clock::now();
  std::uint64_t bytes = 0;
  std::mt19937_64 random(42);
  for (std::size_t i = 0; i < count; ++i) {
    const bool cuda = i % 2 == 0;
    kiln::cache::CanonicalKey key;
    key.add("format", "1");
    key.add("vendor", cuda ? "cuda" : "hip");
    key.add("compiler", cuda ? "nvrtc 13.0" : "hiprtc hip-5.2.21153 comgr-2.4");
    key.add("target", cuda ? (i % 4 == 0 ? "sm_90" : "sm_80") : "gfx90a");
    key.add("options", fmt::format("-std=c++17\n-DVARIANT={}", i));
    key.add("names", fmt::format("bench::kernel<{}>", i % 97));
    key.add(
        "source",
        fmt::format("// synthetic kernel {}\nextern \"C\" __global__ void k{}(float* x) {{ x[0] = {}; }}\n", i, i, i));
    kiln::cache::Entry entry;
    entry.vendor = cuda ? kiln::Vendor::cuda : kiln::Vendor::hip;
    entry.payload_kind = cuda ? kiln::PayloadKind::cubin : kiln::PayloadKind::amdgpu_code_object;
    entry.target = cuda ? (i % 4 == 0 ? "sm_90" : "sm_80") : "gfx90a";
    entry.compiler = cuda ? "nvrtc 13.0" : "hiprtc hip-5.2.21153 comgr-2.4";
    entry.created_unix = std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
    entry.canonical_key = key.bytes();
    entry.key_hash = key.hash();
    entry.names = {{fmt::format("bench::kernel<{}>", i % 97), fmt::format("_Z6kernelILi{}EEvv", i % 97)}};
    entry.payload.resize(256 + random() % 256);
    for (std::byte& b : entry.payload) b = static_cast<std::byte>(random());
    const std::vector<std::byte> data = kiln::cache::serialize(entry);
    const fs::path path = store.entry_path(entry.key_hash);
    fs::create_directories(path.parent_path());
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || ::write(fd, data.data(), data.size()) != static_cast<ssize_t>(data.size())) {
      throw std::runtime_error("cannot write " + path.string());
    }
    // Last use spread over 100 days, so an LRU prune has an order to follow.
    const std::int64_t age = static_cast<std::int64_t>(random() % (100 * 86400));
    const timespec times[2] = {{entry.created_unix - age, 0}, {entry.created_unix - age, 0}};
    ::futimens(fd, times);
    ::close(fd);
    bytes += data.size();
  }
  return bytes;
}

int bench_cache(std::size_t count, fs::path dir) {
  const bool own_dir = dir.empty();
  if (own_dir) dir = make_temp_dir("cache");
  const fs::path root = dir / "cache";
  const std::map<std::string, std::string> env{{"KILN_CACHE_DIR", root.string()}, {"KILN_CACHE_PACKS", ""}};

  std::cout << fmt::format("synthesising {} entries under {} ...\n", count, root.string()) << std::flush;
  const auto start = Clock::now();
  const std::uint64_t bytes = synthesise(root, count);
  std::cout << fmt::format("  {} bytes in {:.1f} s\n\n", bytes,
                           std::chrono::duration<double>(Clock::now() - start).count());

  struct Row {
    std::string command;
    double seconds;
    std::string goal;
    std::string note;
  };
  std::vector<Row> rows;
  const auto time = [&](const std::vector<std::string>& args, const std::string& goal, double limit, bool keep) {
    const Run run = run_kiln(args, env, dir, keep);
    std::string command = "kiln";
    for (const std::string& arg : args) command += " " + arg;
    std::string note = run.rc == 0 || (args[1] == "verify" && run.rc == 1) ? "" : fmt::format("exit {}", run.rc);
    if (limit > 0) note += run.seconds < limit ? (note.empty() ? "ok" : ", ok") : (note.empty() ? "OVER" : ", OVER");
    rows.push_back({command, run.seconds, goal, note});
    return run;
  };

  const Run listing = time({"cache", "ls", "--json"}, "< 2 s", 2.0, true);
  const std::size_t listed = json::parse(listing.out).size();
  if (listed != count) rows.back().note += fmt::format(" (listed {} of {})", listed, count);
  (void)time({"cache", "ls", "--json"}, "< 2 s (again)", 2.0, false);
  (void)time({"cache", "ls"}, "", 0, false);
  (void)time({"cache", "ls", "--sort", "use"}, "", 0, false);
  (void)time({"cache", "stats"}, "< 1 s", 1.0, false);
  (void)time({"cache", "stats", "--json"}, "< 1 s", 1.0, false);
  const Run verify = time({"cache", "verify"}, "entries/s", 0, false);
  rows.back().note = fmt::format("{:.0f} entries/s", static_cast<double>(count) / verify.seconds);
  (void)time({"cache", "prune", "--max-size", std::to_string(bytes / 2), "--dry-run"}, "", 0, false);
  (void)time({"cache", "prune", "--max-size", std::to_string(bytes / 2)}, "< 5 s", 5.0, false);
  const Run after = run_kiln({"cache", "stats", "--json"}, env, dir, true);
  const json stats = json::parse(after.out);
  rows.back().note += fmt::format(" ({} -> {} entries, {} -> {} bytes)", count, stats.at("entries").get<std::size_t>(),
                                  bytes, stats.at("bytes").get<std::uint64_t>());

  std::cout << fmt::format("| {:<48} | {:>8} | {:<14} | {}\n", "command (" + std::to_string(count) + " entries)",
                           "seconds", "goal", "result");
  std::cout << fmt::format("|{:-<50}|{:->10}|{:-<16}|{:-<10}\n", "", "", "", "");
  for (const Row& row : rows) {
    std::cout << fmt::format("| {:<48} | {:>8.3f} | {:<14} | {}\n", row.command, row.seconds, row.goal, row.note);
  }
  if (own_dir) fs::remove_all(dir);
  return 0;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

int bench_prewarm(const std::vector<unsigned>& jobs, unsigned variants, std::vector<std::string> targets,
                  std::vector<std::string> modes, unsigned repeat) {
  if (targets.empty()) targets.push_back("sm_90");
  if (modes.empty()) modes.push_back("");  // kiln's default
  repeat = std::max(1U, repeat);
  std::vector<std::string> args{"prewarm", "--all-builtin", "--json", "-q"};
  for (const std::string& target : targets) {
    args.push_back("--target");
    args.push_back(target);
  }
  for (unsigned v = 1; v <= variants; ++v) args.push_back(fmt::format("--option-set=-DKILN_BENCH_VARIANT={}", v));

  struct Row {
    std::string mode;
    unsigned j = 0;
    std::size_t requests = 0, compiled = 0, failed = 0;
    std::vector<double> wall, compile;
  };
  std::vector<Row> rows;
  for (const std::string& mode : modes) {
    for (const unsigned j : jobs) rows.push_back({mode, j, 0, 0, 0, {}, {}});
  }
  for (unsigned r = 0; r < repeat; ++r) {
    for (Row& row : rows) {
      const fs::path dir = make_temp_dir("prewarm");
      std::vector<std::string> run_args = args;
      run_args.push_back("-j");
      run_args.push_back(std::to_string(row.j));
      if (!row.mode.empty()) run_args.push_back("--workers=" + row.mode);
      const Run run = run_kiln(
          run_args,
          {{"KILN_CACHE_DIR", (dir / "cache").string()}, {"CUDA_CACHE_DISABLE", "1"}, {"KILN_CACHE_PACKS", ""}}, dir,
          true);
      fs::remove_all(dir);
      json summary;
      try {
        summary = json::parse(run.out).at("summary");
      } catch (const std::exception& error) {
        std::cerr << fmt::format("kiln prewarm -j {} exited {} without a summary: {}\n", row.j, run.rc, error.what());
        return 1;
      }
      row.requests = summary.at("requests").get<std::size_t>();
      row.compiled = std::max(row.compiled, summary.at("compiled").get<std::size_t>());
      row.failed = std::max(row.failed, summary.at("failed").get<std::size_t>());
      row.wall.push_back(run.seconds);  // the command's whole life: spawn to exit, workers included
      row.compile.push_back(summary.at("compile_seconds").get<double>());
    }
  }

  std::cout << fmt::format("| {:>4} | {:>7} | {:>8} | {:>8} | {:>6} | {:>9} | {:>9} | {:>7} | {}\n", "-j", "workers",
                           "requests", "compiled", "failed", "wall s", "compile s", "speedup",
                           repeat > 1 ? fmt::format("(medians of {} runs; walls)", repeat) : std::string());
  std::cout << "|------|---------|----------|----------|--------|-----------|-----------|---------|\n";
  std::map<std::string, double> first;
  for (const Row& row : rows) {
    const double wall = median(row.wall);
    if (first.count(row.mode) == 0) first[row.mode] = wall;
    std::string walls;
    if (repeat > 1) {
      for (const double w : row.wall) walls += fmt::format("{}{:.2f}", walls.empty() ? "" : " ", w);
    }
    std::cout << fmt::format("| {:>4} | {:>7} | {:>8} | {:>8} | {:>6} | {:>9.2f} | {:>9.2f} | {:>6.2f}x | {}\n", row.j,
                             row.mode.empty() ? "default" : row.mode, row.requests, row.compiled, row.failed, wall,
                             median(row.compile), first[row.mode] / wall, walls);
  }
  return 0;
}

std::vector<unsigned> parse_list(const std::string& text) {
  std::vector<unsigned> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(static_cast<unsigned>(std::stoul(item)));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string mode = "cache";
  if (!args.empty() && (args[0] == "cache" || args[0] == "prewarm" || args[0] == "synthesise")) {
    mode = args[0];
    args.erase(args.begin());
  }
  std::size_t entries = 100000;
  fs::path dir;
  std::vector<unsigned> jobs{1, 16};
  unsigned variants = 8;
  std::vector<std::string> targets;
  std::vector<std::string> modes;
  unsigned repeat = 1;
  try {
    for (std::size_t i = 0; i < args.size(); ++i) {
      const auto value = [&]() -> const std::string& {
        if (i + 1 >= args.size()) throw std::invalid_argument(args[i] + " needs a value");
        return args[++i];
      };
      if (args[i] == "--entries") {
        entries = std::stoul(value());
      } else if (args[i] == "--dir") {
        dir = value();
      } else if (args[i] == "--kiln") {
        g_kiln = value();
      } else if (args[i] == "--jobs") {
        jobs = parse_list(value());
      } else if (args[i] == "--variants") {
        variants = static_cast<unsigned>(std::stoul(value()));
      } else if (args[i] == "--target") {
        targets.push_back(value());
      } else if (args[i] == "--workers") {
        std::stringstream list(value());
        for (std::string item; std::getline(list, item, ',');) modes.push_back(item);
      } else if (args[i] == "--repeat") {
        repeat = static_cast<unsigned>(std::stoul(value()));
      } else {
        throw std::invalid_argument("unknown argument " + args[i]);
      }
    }
    if (mode == "synthesise") {
      if (dir.empty()) throw std::invalid_argument("synthesise needs --dir DIR");
      const std::uint64_t bytes = synthesise(dir / "cache", entries);
      std::cout << fmt::format("{} entries, {} bytes under {}\n", entries, bytes, (dir / "cache").string());
      return 0;
    }
    return mode == "cache" ? bench_cache(entries, dir) : bench_prewarm(jobs, variants, targets, modes, repeat);
  } catch (const std::exception& error) {
    std::cerr << "cli_bench: " << error.what() << "\n";
    return 2;
  }
}
