// kiln prewarm: compile requests into the cache without loading them (no GPU needed for named
// targets). The command: its flags, then plan (prewarm_plan), run (worker_pool: worker processes at -j
// above 1, this process's engine for cached requests, a lone compile, -j 1 and `--workers thread`),
// show (prewarm_report), and with --remote copy the entries to the remote tier.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <unordered_set>
#include <variant>

#include <fmt/format.h>

#include "cli.hpp"
#include "kiln/base/log.hpp"
#include "kiln/includes/dep_manifest.hpp"
#include "kiln/cache/key.hpp"
#include "kiln/cache/remote.hpp"
#include "kiln/cache/store.hpp"
#include "kiln/engine.hpp"
#include "parallel.hpp"
#include "prewarm_plan.hpp"
#include "prewarm_report.hpp"
#include "tiers.hpp"
#include "worker_pool.hpp"

namespace kiln::cli {
namespace {

using namespace prewarm;
using Clock = std::chrono::steady_clock;

struct PrewarmArgs {
  Requests requests;
  unsigned jobs = 0;
  bool json = false;
  bool quiet = false;
  bool verbose = false;
  bool worker = false;
  bool remote = false;
  std::string workers = "process";  ///< how -j runs compiles in parallel: "process" or "thread"
};

/// Writes every entry that was compiled or already cached to every remote tier (KILN_REMOTE_CACHE, a
/// chain of redis:// and http(s):// URLs), synchronously, reading each from the local store with the
/// same parser the engine uses. An entry counts as written when every tier took it. An entry of a request
/// with include folders brings its request's dependency manifest (once per request), so a node with the
/// same tree hits without resolving.
RemoteFill fill_remote(Engine& engine, const std::vector<JobResult>& results) {
  RemoteFill fill;
  const std::string list = EngineConfig::from_environment().remote;
  fill.url = cache::redact_remote_url(list);
  std::vector<std::unique_ptr<cache::RemoteTier>> remotes;
  std::string urls;
  for (const std::string& url : cache::split_remote_urls(list)) {
    cache::RemoteConfig config = cache::remote_config_from_environment(url);
    config.lease_wait = std::chrono::milliseconds(0);
    remotes.push_back(cache::open_remote(config));
    urls += (urls.empty() ? "" : ", ") + config.display();
  }
  fill.url = urls;
  const cache::Store& store = engine.store();
  const cache::DependencyManifests manifests(
      store.mode() == cache::StoreMode::memory_only ? std::filesystem::path() : store.config().root, /*read_only=*/true);
  std::unordered_set<cache::Hash128, cache::Hash128Hasher> manifests_done;
  const auto put_all = [&](const auto& put) {
    bool all = true;
    for (const auto& remote : remotes) {
      std::string why;
      if (!put(*remote, why)) {
        all = false;
        fill.reasons.insert(remotes.size() > 1 ? remote->config().display() + ": " + why : why);
      }
    }
    return all;
  };
  for (const JobResult& result : results) {
    if (result.status != Status::compiled && result.status != Status::cached) continue;
    const std::optional<cache::Hash128> hash = cache::Hash128::from_hex(result.key);
    if (!hash) continue;
    auto read = engine.store().read_entry(*hash);
    auto* entry = std::get_if<cache::Entry>(&read);
    if (entry == nullptr) {
      ++fill.failed;
      fill.reasons.insert("local entry unreadable: " + std::get<cache::ContentError>(read).reason);
      continue;
    }
    bool all = put_all([&](cache::RemoteTier& remote, std::string& why) { return remote.put(*entry, &why); });
    bool two_level = false;
    const std::optional<std::vector<cache::KeyPart>> parts = cache::CanonicalKey::parse(entry->canonical_key);
    const cache::Hash128 request = parts ? cache::request_key_of(*parts, &two_level).hash() : cache::Hash128{};
    if (two_level && manifests_done.insert(request).second) {
      if (const auto bytes = manifests.bytes(request)) {
        const bool put = put_all([&](cache::RemoteTier& remote, std::string& why) {
          return remote.put_manifest(request, *bytes, &why);
        });
        if (put) ++fill.manifests;
        all = all && put;
      }
    }
    ++(all ? fill.written : fill.failed);
  }
  return fill;
}

/// "NAME=value" as the environment has it, for a message that names the setting the user gave.
std::string as_set(const char* name) {
  const char* value = std::getenv(name);
  return fmt::format("{}={}", name, value == nullptr ? "" : value);
}

/// Prewarming fills the disk cache: without one it can write to, every compile would be thrown away
/// and reported as a failure at the end. Refuses at once, saying why the cache is memory-only or
/// read-only. The cache is opened here with its own warnings off, so the reason is said once, in the error.
void require_disk_cache(const cache::StoreConfig& config) {
  if (config.disabled) {
    throw UsageError(fmt::format("prewarm needs the disk cache, and {} disables it (unset it to prewarm)",
                                 as_set("KILN_CACHE_DISABLE")));
  }
  if (config.read_only) {
    throw UsageError(fmt::format("prewarm writes into the disk cache, and {} makes it read-only (unset it to prewarm)",
                                 as_set("KILN_CACHE_READONLY")));
  }
  const log::Level level = log::level();
  log::set_level(log::Level::error);
  const cache::Store probe(config);
  log::set_level(level);
  if (probe.mode() != cache::StoreMode::read_write) {
    throw UsageError(fmt::format("prewarm writes into the disk cache, and it is {}: {}", cache::to_string(probe.mode()),
                                 probe.mode_reason()));
  }
}

int run_prewarm(const PrewarmArgs& args) {
  if (args.worker) return run_worker();
  if (args.remote && EngineConfig::from_environment().remote.empty()) {
    throw UsageError(
        "--remote: set KILN_REMOTE_CACHE=redis://[user:password@]host:port[/db] or http(s)://host[:port]/path "
        "(or a ','-separated chain of them) first");
  }
  if (args.remote) {
    // Before compiling anything: a remote that cannot be opened (an unusable secret file) would take
    // none of the entries this command is asked to publish.
    if (const std::string why = remote_unusable(EngineConfig::from_environment()); !why.empty()) {
      throw UsageError(fmt::format("--remote: {}", why));
    }
  }
  const auto start = Clock::now();
  // Named targets need no GPU runtime: no cuInit at start, no driver teardown at exit. The local GPUs
  // are asked for only for `native` and when no target is given (the defaults are the local GPUs').
  EngineConfig config = EngineConfig::from_environment();
  require_disk_cache(config.cache);
  const std::vector<std::string>& targets = args.requests.targets;
  config.runtime = targets.empty() || std::find(targets.begin(), targets.end(), "native") != targets.end();
  Engine engine(config);
  const auto since_start = [&] { return std::chrono::duration<double, std::milli>(Clock::now() - start).count(); };
  const std::vector<Job> jobs = build_jobs(args.requests, engine, args.quiet);
  const unsigned parallel = args.jobs == 0 ? default_threads() : args.jobs;
  KILN_LOG(debug, "prewarm: {} requests built and validated at {:.1f} ms", jobs.size(), since_start());

  const Plan plan = plan_jobs(engine, jobs, parallel, args.workers == "process");
  KILN_LOG(debug, "prewarm: planned at {:.1f} ms: {} in this process, {} in {} workers", since_start(),
           plan.in_process.size(), plan.in_workers.size(), plan.workers);
  std::vector<JobResult> results(jobs.size());
  Progress progress(jobs, args.quiet || args.json);
  const JobDone done = [&progress](std::size_t index, const JobResult& result) { progress.done(index, result); };
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    if (jobs[i].refused.empty()) continue;
    results[i].status = Status::failed;
    results[i].error = jobs[i].refused;
    results[i].bad_input = true;
    done(i, results[i]);
  }
  run_on_threads(engine, jobs, plan.in_process, parallel, results, done);
  if (!plan.in_workers.empty()) {
    KILN_LOG(debug, "prewarm: starting {} workers at {:.1f} ms", plan.workers, since_start());
    const Unstarted unstarted = run_in_workers(jobs, plan.in_workers, plan.workers, results, done);
    KILN_LOG(debug, "prewarm: workers done at {:.1f} ms", since_start());
    if (!unstarted.indices.empty()) {
      // A process limit (a container's pids limit, RLIMIT_NPROC) refusing the workers is no reason to fail
      // the requests: this process compiles them, as --workers thread does (without a worker's isolation).
      fmt::print(stderr, "kiln prewarm: no worker process could start ({}); {} request(s) compile in this process\n",
                 unstarted.why, unstarted.indices.size());
      run_on_threads(engine, jobs, unstarted.indices, parallel, results, done);
    }
  }
  progress.finish();
  std::optional<RemoteFill> remote;
  if (args.remote) remote = fill_remote(engine, results);
  const Outcome outcome{
      jobs, results, remote, parallel, std::chrono::duration<double>(Clock::now() - start).count(), args.verbose};
  if (args.json) {
    print_json_report(outcome);
  } else {
    print_text_report(outcome);
  }
  // A request's own mistake (a kernel its binary lacks, ...) is bad input: 2, as for a bad flag.
  exit_without_teardown(engine, any_bad_input(outcome) ? kExitError : all_succeeded(outcome) ? kExitOk : kExitFound);
}

}  // namespace

void add_prewarm_command(CLI::App& app, Commands& commands) {
  auto args = std::make_shared<PrewarmArgs>();
  CLI::App* sub = app.add_subcommand("prewarm",
                                     "Compile kernels into the cache without loading them (no GPU needed "
                                     "for named targets)");
  sub->footer(
      "Requests: each plain kernel name of a source shares one program, each name expression is a program of its own\n"
      "(exactly what Engine::kernel(source, name) asks for, so those requests hit); --one-program compiles all of a\n"
      "source's kernels as one program (what Engine::program(source, options, kernels) asks for).\n"
      "Options start with '-': write them as --option=--fast-math or --option -DN=4.\n"
      "With -j above 1, compiles run in worker processes (see --workers); a worker that dies fails only the request\n"
      "it held, reported with the signal or exit status, and a fresh worker takes the rest. Where no worker can start\n"
      "(a process limit), this process compiles the requests, as with --workers thread.\n"
      "Examples:\n"
      "  kiln prewarm --all-builtin --target sm_90 --target gfx90a -j 16\n"
      "  kiln prewarm --source my.cu --kernel 'scale<float, 4>' --option=-DTILE=8 --target native\n"
      "  KILN_RECORD=app.jsonl ./app; kiln prewarm --manifest app.jsonl --target sm_100");
  sub->add_option("-t,--target", args->requests.targets,
                  "Target (repeatable): sm_90, sm_90a (CUBIN), compute_90 (PTX), lto_90 (LTO-IR), gfx90a, "
                  "gfx90a:sramecc+:xnack-, or native (the local GPUs). Default: the local GPUs' targets, or sm_90 and "
                  "gfx90a without a GPU");
  sub->add_flag("--all-builtin", args->requests.all_builtin,
                "Every built-in source, with the kernels its first line lists");
  sub->add_option("--builtin", args->requests.builtins, "A built-in source by name, e.g. saxpy (repeatable)");
  sub->add_option("--source", args->requests.sources, "A kernel source file (repeatable)");
  sub->add_option("--header", args->requests.headers,
                  "An in-memory header for --source: FILE or NAME=FILE, seen as #include \"NAME\" (repeatable)");
  sub->add_option("-k,--kernel", args->requests.kernels,
                  "A kernel name or name expression for --source/--builtin (repeatable); default: the source's "
                  "'//! kiln-kernels:' line");
  sub->add_option("-o,--option", args->requests.options,
                  "A portable compile option (repeatable), e.g. --option=--fast-math");
  sub->add_option("-I,--include-path", args->requests.include_dirs,
                  "An include folder for --source (repeatable), searched in the order given, after any given with "
                  "--option; kiln records every header a compile reads and re-checks them by stat");
  sub->add_flag("--toolkit-includes", args->requests.toolkit_includes,
                "Search the compiler toolkit's own headers (cuda_fp16.h, cub/, cuda/std/) after the -I folders");
  sub->add_option("--option-set", args->requests.option_sets,
                  "A whitespace-separated option set (repeatable): every request is compiled once per set");
  sub->add_option("--manifest", args->requests.request_logs,
                  "A manifest recorded with KILN_RECORD (repeatable); replayed for --target when given, else for the "
                  "recorded targets");
  sub->add_flag("--one-program", args->requests.one_program, "Compile each source's kernels as one program");
  sub->add_option("-j,--jobs", args->jobs, "Parallel compiles; default: the number of cores")
      ->check(CLI::Range(1U, 1024U));
  sub->add_option("--workers", args->workers,
                  "How -j runs compiles: process (default: worker processes, one request each at a time; NVRTC "
                  "and HIPRTC both scale across processes, not threads) or thread (threads of this process; HIPRTC "
                  "then compiles one at a time). Cached requests, a lone compile and -j 1 run in this process")
      ->check(CLI::IsMember({"process", "thread"}));
  sub->add_flag("--remote", args->remote,
                "Also write every compiled or already-cached entry to every remote tier (KILN_REMOTE_CACHE)");
  sub->add_flag("--json", args->json, "Print JSON (per request and a summary) instead of text");
  sub->add_flag("-q,--quiet", args->quiet, "No progress output");
  sub->add_flag("-v,--verbose", args->verbose, "Print the compiler log of failed requests");
  sub->add_flag("--worker", args->worker, "Internal: serve requests from stdin (the worker process of -j)")->group("");
  commands.push_back({sub, [args] { return run_prewarm(*args); }});
}

}  // namespace kiln::cli
