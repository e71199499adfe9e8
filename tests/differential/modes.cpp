#include "modes.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "engine_access.hpp"
#include "kiln/cache/remote.hpp"
#include "kiln/engine.hpp"
#include "kiln/error.hpp"
#include "test_support.hpp"
#if KILN_DIFFERENTIAL_HAVE_REDIS
#include "redis_server.hpp"
#endif

namespace kiln::differential {

namespace fs = std::filesystem;

namespace {

const char* origin_name(Origin o) {
  switch (o) {
    case Origin::memory:
      return "memory";
    case Origin::disk:
      return "disk";
    case Origin::compiled:
      return "compiled";
    case Origin::pack:
      return "pack";
    case Origin::remote:
      return "remote";
  }
  return "?";
}

std::unique_ptr<Engine> engine_on(const fs::path& cache, const std::string& remote = {}) {
  EngineConfig config;
  config.runtime = false;
  config.cache.root = cache;
  config.remote = remote;
  return std::make_unique<Engine>(config);
}

Outcome compile(Engine& engine, const Kernel& k, std::size_t index, const std::vector<std::string>& options,
                const std::string& target) {
  Outcome out;
  out.kernel = index;
  try {
    const CompiledBinary binary = engine.compile(Source::from_text(k.name, k.text), Options(options), {}, target);
    out.kind = Outcome::compiled;
    out.bytes.assign(binary.bytes().begin(), binary.bytes().end());
    out.origin = origin_name(binary.origin());
    out.key = binary.key().hex();
  } catch (const ConfigError& e) {
    out.kind = Outcome::refused;
    out.message = e.what();
  } catch (const CompileError& e) {
    out.message = std::string(e.what()) + (e.log().empty() ? "" : "\n" + e.log().substr(0, 600));
  } catch (const std::exception& e) {
    out.message = std::string("(not a compile error) ") + e.what();
  }
  return out;
}

/// What a compile did with NVRTC's PCH, from the engine's counters before and after it.
std::string pch_note(Engine& engine, std::uint64_t made, std::uint64_t used) {
  const cache::Counters now = engine.stats();
  if (now.pch_made > made) return " (made the PCH)";
  if (now.pch_used > used) return " (used the PCH)";
  return " (no PCH)";
}

/// KILN_PCH and KILN_LEAN_HEADERS for the life of a mode's engines (both are read when an engine starts). With PCH,
/// every mode runs the default, each process's own PCHs (private), but stored-pch, which runs the PCHs stored in the
/// cache and shared between processes (1: made and used wherever a set is large enough, no verdict in the way).
struct ModeEnvironment {
  test::ScopedEnv pch;
  test::ScopedEnv lean;
  explicit ModeEnvironment(const ModeSpec& m)
      : pch("KILN_PCH", !m.pch ? "0" : m.kind == ModeSpec::stored_pch ? "1" : "private"),
        lean("KILN_LEAN_HEADERS", m.lean ? "1" : "0") {}
};

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Runs this program again (--child) to compile `kernels` (index into the request's kernels, kernel) in order over
/// `cache`, and reads what it wrote: one Outcome each, its origin saying what the compile did with a PCH.
std::vector<Outcome> in_another_process(const std::vector<std::pair<std::size_t, const Kernel*>>& kernels,
                                        const std::vector<std::string>& options, const std::string& target,
                                        const fs::path& cache, const fs::path& scratch) {
  const fs::path request = scratch / "child-request.json", result = scratch / "child-result";
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [index, k] : kernels) list.push_back({{"name", k->name}, {"text", k->text}});
  write_file(request,
             nlohmann::json{{"kernels", list}, {"options", options}, {"target", target}, {"cache", cache.string()}}.dump());
  fs::remove(result.string() + ".json");
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  std::fflush(stdout);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl(self.c_str(), self.c_str(), "--child", request.c_str(), result.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) throw std::runtime_error("cannot run the other process");
  std::vector<Outcome> outs;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !fs::exists(result.string() + ".json")) {
    Outcome out;
    out.kernel = kernels.front().first;
    out.message = fmt::format("the other process died (status {:#x})", status);
    outs.push_back(std::move(out));
    return outs;
  }
  const nlohmann::json all = nlohmann::json::parse(read_all(result.string() + ".json"));
  for (std::size_t i = 0; i < kernels.size() && i < all.size(); ++i) {
    const nlohmann::json& j = all[i];
    Outcome out;
    out.kernel = kernels[i].first;
    out.kind = static_cast<Outcome::Kind>(j.at("kind").get<int>());
    out.origin = j.at("origin").get<std::string>();
    out.key = j.at("key").get<std::string>();
    out.message = j.at("message").get<std::string>();
    const std::string bytes = read_all(fmt::format("{}-{}.bin", result.string(), i));
    out.bytes.resize(bytes.size());
    std::memcpy(out.bytes.data(), bytes.data(), bytes.size());
    out.origin += " (another process" + j.at("pch").get<std::string>() + ")";
    outs.push_back(std::move(out));
  }
  return outs;
}

}  // namespace

std::vector<ModeSpec> modes_for(const Case& c, const Remote& remote) {
  // A fresh cache first: a warm mode that differs is then told whether it served another binary under the key
  // a fresh cache gives the edited tree.
  std::vector<ModeSpec> out = {{"fresh", ModeSpec::fresh, true, true, {}}};
  if (c.vendor == "cuda") {
    out.push_back({"warm-pch-lean", ModeSpec::warm, true, true, "cache-warm-pch-lean"});
    out.push_back({"warm-pch-full", ModeSpec::warm, true, false, "cache-warm-pch-full"});
    out.push_back({"warm-nopch-lean", ModeSpec::warm, false, true, "cache-warm-nopch-lean"});
    out.push_back({"warm-nopch-full", ModeSpec::warm, false, false, "cache-warm-nopch-full"});
    out.push_back({"second-process", ModeSpec::second_process, true, true, "cache-warm-pch-lean"});
    if (!c.siblings.empty()) out.push_back({"stored-pch", ModeSpec::stored_pch, true, true, {}});
  } else {
    out.push_back({"warm-lean", ModeSpec::warm, true, true, "cache-warm-lean"});
    out.push_back({"warm-full", ModeSpec::warm, true, false, "cache-warm-full"});
    out.push_back({"second-process", ModeSpec::second_process, true, true, "cache-warm-lean"});
  }
  if (c.vendor == "cuda" && !c.siblings.empty())
    out.push_back({"siblings-first", ModeSpec::siblings_first, true, true, {}});
  if (!remote.url.empty()) out.push_back({"fetched", ModeSpec::fetched, true, true, {}});
  return out;
}

std::vector<std::string> mode_needs(const std::string& mode) {
  // The fresh compile tells a stale entry (the same key, other bytes) from another key.
  if (mode == "second-process") return {"fresh", "warm-pch-lean", "warm-lean"};
  return {"fresh"};
}

std::string mode_description(const std::string& mode) {
  if (mode.starts_with("warm-")) {
    return "a new engine at every step over one cache kept warm across the steps (KILN_PCH " +
           std::string(mode.find("nopch") != std::string::npos ? "0" : "private") + ", KILN_LEAN_HEADERS " +
           (mode.ends_with("lean") ? "1" : "0") + ")";
  }
  if (mode == "fresh") return "a new empty cache at every step";
  if (mode == "second-process") return "another process reads the warm cache of warm-pch-lean (warm-lean for HIP)";
  if (mode == "stored-pch") {
    return "the sibling kernels in one process over a new cache (KILN_PCH=1: the second makes the set's PCH and "
           "stores it), then the case in another process, which uses that stored PCH";
  }
  if (mode == "siblings-first") {
    return "the sibling kernels, then the case, in one engine over a new cache with the process's own PCHs: the PCH "
           "(and the hoisted prelude) is made by a sibling and used by the case";
  }
  if (mode == "fetched") {
    return "an empty cache compiles and publishes to a Redis remote, then another empty cache fetches the manifest "
           "and the entry from it (the remote stays warm across steps)";
  }
  return "?";
}

std::vector<Outcome> run_mode(const ModeSpec& mode, const Request& r, const Remote& remote) {
  const ModeEnvironment environment(mode);
  const Kernel& main = r.kernels.at(0);
  const std::string& target = r.c.target;
  std::vector<Outcome> out;
  switch (mode.kind) {
    case ModeSpec::warm:
      out.push_back(compile(*engine_on(r.home / mode.cache), main, 0, r.options, target));
      break;
    case ModeSpec::fresh: {
      const fs::path cache = r.home / fmt::format("fresh-{}", r.step);
      out.push_back(compile(*engine_on(cache), main, 0, r.options, target));
      fs::remove_all(cache);
      break;
    }
    case ModeSpec::second_process:
      out.push_back(in_another_process({{0, &main}}, r.options, target, r.home / mode.cache, r.home).front());
      break;
    case ModeSpec::stored_pch: {
      const fs::path cache = r.home / fmt::format("stored-{}", r.step);
      std::vector<std::pair<std::size_t, const Kernel*>> siblings;
      for (std::size_t i = 1; i < r.kernels.size(); ++i) siblings.emplace_back(i, &r.kernels[i]);
      out = in_another_process(siblings, r.options, target, cache, r.home);
      out.push_back(in_another_process({{0, &main}}, r.options, target, cache, r.home).front());
      fs::remove_all(cache);
      break;
    }
    case ModeSpec::siblings_first: {
      const fs::path cache = r.home / fmt::format("siblings-{}", r.step);
      {
        const std::unique_ptr<Engine> engine = engine_on(cache);
        for (std::size_t i = 1; i < r.kernels.size(); ++i) {
          const std::uint64_t made = engine->stats().pch_made, used = engine->stats().pch_used;
          out.push_back(compile(*engine, r.kernels[i], i, r.options, target));
          out.back().origin += pch_note(*engine, made, used);
        }
        const std::uint64_t made = engine->stats().pch_made, used = engine->stats().pch_used;
        out.push_back(compile(*engine, main, 0, r.options, target));
        out.back().origin += pch_note(*engine, made, used);
      }
      fs::remove_all(cache);
      break;
    }
    case ModeSpec::fetched: {
      const fs::path publisher = r.home / fmt::format("publish-{}", r.step),
                     fetcher = r.home / fmt::format("fetch-{}", r.step);
      {
        const std::unique_ptr<Engine> engine = engine_on(publisher, remote.url);
        out.push_back(compile(*engine, main, 0, r.options, target));
        if (cache::RemoteTier* tier = detail::EngineAccess::core(*engine).remote())
          (void)tier->flush(std::chrono::seconds(10));
      }
      out.push_back(compile(*engine_on(fetcher, remote.url), main, 0, r.options, target));
      out.back().origin += " (fetched)";
      fs::remove_all(publisher);
      fs::remove_all(fetcher);
      break;
    }
  }
  return out;
}

Remote start_remote(const fs::path& dir) {
  Remote remote;
#if KILN_DIFFERENTIAL_HAVE_REDIS
  (void)dir;
  if (!test::RedisServer::find_binary()) {
    remote.missing = "no redis-server";
    return remote;
  }
  try {
    auto server = std::make_shared<test::RedisServer>();
    remote.url = server->url();
    remote.server = server;
  } catch (const std::exception& e) {
    remote.missing = e.what();
  }
#else
  (void)dir;
  remote.missing = "this build has no hiredis";
#endif
  return remote;
}

int child_main(int argc, char** argv) {
  if (argc != 4) return 2;
  try {
    const nlohmann::json j = nlohmann::json::parse(read_all(argv[2]));
    const std::unique_ptr<Engine> engine = engine_on(j.at("cache").get<std::string>());
    const std::string prefix = argv[3];
    nlohmann::json results = nlohmann::json::array();
    for (const nlohmann::json& item : j.at("kernels")) {
      const Kernel k{item.at("name").get<std::string>(), item.at("text").get<std::string>()};
      const std::uint64_t made = engine->stats().pch_made, used = engine->stats().pch_used;
      const Outcome out = compile(*engine, k, 0, j.at("options").get<std::vector<std::string>>(),
                                  j.at("target").get<std::string>());
      write_file(fmt::format("{}-{}.bin", prefix, results.size()),
                 std::string(reinterpret_cast<const char*>(out.bytes.data()), out.bytes.size()));
      results.push_back({{"kind", static_cast<int>(out.kind)},
                         {"origin", out.origin},
                         {"key", out.key},
                         {"message", out.message},
                         {"pch", pch_note(*engine, made, used)}});
    }
    write_file(prefix + ".json", results.dump());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "differential_runner --child: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace kiln::differential
