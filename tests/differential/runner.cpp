// The differential runner: every case of the corpus (generate.py) compiled by the bare compiler and by kiln in
// every mode, at every step (the tree as written, then after each edit), asserting kiln's bytes are the bare
// compiler's (NVRTC's random internal-linkage tag blanked). A compile's verdict: the same bytes (pass); kiln
// refused with a ConfigError while the bare compiler compiled (refused: allowed, counted and listed); both
// failed (pass); anything else fails. The modes (modes.hpp) are PCH on and off, the lean walk on and off,
// each over a cache kept warm across the steps; a fresh cache; the warm cache read by a second process;
// sibling kernels compiled first in one process (NVRTC's PCH made by them and the prelude hoisted, used by the
// case); and a manifest and entry fetched from a Redis remote by an empty cache. The bare side is NVRTC (or
// HIPRTC, for the AMD cases) loaded with dlopen, reading the tree from the disk through -I as a user's
// program does, in a working directory with nothing in it.
//
//   differential_runner [--cases N] [--seed S] [--corpus FILE] [--case ID] [--keep DIR] [--minimize N]
//
// --cases (or KILN_DIFFERENTIAL_CASES) sets how many cases the generator writes (default 40, the CI slice);
// --corpus runs a corpus file instead (a failure's repro folder holds one for its case). Prints one line per
// case, then a summary line (cases, compiles, passed, refused, failed) and, for each failure, a repro: the
// case's tree as of the step that differed, written to a kept folder, the options, the mode and step, and a
// byte-diff summary; the first failing cases are rebuilt with fewer features until none can be dropped.
// Exit: 0 when nothing failed, 1 otherwise, 77 (skipped) without NVRTC.
#include <unistd.h>

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "bare_rtc.hpp"
#include "corpus.hpp"
#include "kiln/engine.hpp"
#include "modes.hpp"
#include "test_support.hpp"

namespace fs = std::filesystem;
using namespace kiln::differential;
using kiln::test::BareCompiler;
using kiln::test::BareOutput;

namespace {

struct Args {
  int cases = 40;
  int seed = 1;
  std::string corpus;
  std::string only_case;
  fs::path keep = fs::path(KILN_BINARY_DIR) / "differential-failures";
  int minimize = 3;
  bool verbose = false;  ///< a line per compile: mode, step, verdict, origin, key
};

Args parse(int argc, char** argv) {
  Args a;
  if (const char* n = std::getenv("KILN_DIFFERENTIAL_CASES"); n != nullptr && n[0] != '\0') a.cases = std::atoi(n);
  if (const char* s = std::getenv("KILN_DIFFERENTIAL_SEED"); s != nullptr && s[0] != '\0') a.seed = std::atoi(s);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--cases")
      a.cases = std::stoi(value());
    else if (arg == "--seed")
      a.seed = std::stoi(value());
    else if (arg == "--corpus")
      a.corpus = value();
    else if (arg == "--case")
      a.only_case = value();
    else if (arg == "--keep")
      a.keep = value();
    else if (arg == "--minimize")
      a.minimize = std::stoi(value());
    else if (arg == "--verbose")
      a.verbose = true;
    else
      throw std::runtime_error("unknown argument " + arg);
  }
  if (a.cases < 1) throw std::runtime_error("--cases must be at least 1");
  return a;
}

/// The library kiln loaded for a vendor, or "" (with `why` set) when its lane has none.
std::string compiler_path(kiln::Engine& engine, kiln::Vendor vendor, std::string& why) {
  for (const kiln::LaneInfo& lane : engine.lanes()) {
    if (lane.vendor != vendor) continue;
    for (const kiln::LibraryInfo& library : lane.libraries) {
      if ((library.role == "nvrtc" || library.role == "hiprtc") && lane.compiler_loaded) return library.path;
    }
    why = lane.status;
  }
  if (why.empty()) why = "the lane is not built";
  return {};
}

/// A short account of how two outputs differ.
std::string diff_summary(const std::string& bare, const std::string& kiln) {
  std::size_t first = 0, differing = 0;
  const std::size_t common = std::min(bare.size(), kiln.size());
  while (first < common && bare[first] == kiln[first]) ++first;
  for (std::size_t i = first; i < common; ++i) differing += bare[i] != kiln[i] ? 1 : 0;
  std::string out = fmt::format("bare {} bytes, kiln {} bytes; {} of the first {} differ, the first at offset {:#x}",
                                bare.size(), kiln.size(), differing, common, first);
  // Text (PTX) or strings in an ELF: show the bytes around the first difference, printable ones as they are.
  const auto around = [&](const std::string& s) {
    std::string shown;
    for (std::size_t i = first >= 24 ? first - 24 : 0; i < std::min(s.size(), first + 40); ++i) {
      const unsigned char ch = static_cast<unsigned char>(s[i]);
      shown += ch >= 0x20 && ch < 0x7f ? std::string(1, static_cast<char>(ch)) : fmt::format("\\x{:02x}", ch);
    }
    return shown;
  };
  if (first < std::max(bare.size(), kiln.size())) {
    out += fmt::format("\n    bare: {}\n    kiln: {}", around(bare), around(kiln));
  }
  // The printable strings (6 characters or more) only one side has: names, paths and symbols that differ.
  const auto strings = [](const std::string& s) {
    std::set<std::string> found;
    std::string run;
    for (const char ch : s + '\0') {
      if (ch >= 0x20 && ch < 0x7f) {
        run += ch;
      } else {
        if (run.size() >= 6) found.insert(run);
        run.clear();
      }
    }
    return found;
  };
  const std::set<std::string> in_bare = strings(bare), in_kiln = strings(kiln);
  const auto only = [](const std::set<std::string>& a, const std::set<std::string>& b) {
    std::vector<std::string> listed;
    for (const std::string& x : a) {
      if (!b.contains(x) && listed.size() < 4) listed.push_back(x.substr(0, 160));
    }
    return listed;
  };
  if (const auto b = only(in_bare, in_kiln), k = only(in_kiln, in_bare); !b.empty() || !k.empty()) {
    out += fmt::format("\n    strings only in bare: \"{}\"\n    strings only in kiln: \"{}\"", fmt::join(b, "\", \""),
                       fmt::join(k, "\", \""));
  }
  return out;
}

/// What the bare compiler is handed besides the tree on the disk. NVRTC fails on a UTF-8 byte order mark,
/// which kiln drops on purpose (engine/src/lanes/rtc_compile.hpp, without_bom): for NVRTC the source goes
/// without one, and each header of the tree that starts with one goes in memory without it, under the name
/// it is included by (its file name: the corpus includes such headers by that name alone).
struct BareView {
  bool strip = false;
  std::vector<std::pair<std::string, std::string>> headers;
  [[nodiscard]] std::string source(const std::string& text) const {
    return strip && text.starts_with(kBom) ? text.substr(kBom.size()) : text;
  }
  static constexpr std::string_view kBom = "\xEF\xBB\xBF";
};

BareView bare_view(const Case& c, const fs::path& root) {
  BareView view;
  if (c.vendor != "cuda") return view;
  view.strip = true;
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(root)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    const std::string bytes = text.str();
    if (bytes.starts_with(BareView::kBom)) {
      view.headers.emplace_back(e.path().filename().string(), bytes.substr(BareView::kBom.size()));
    }
  }
  return view;
}

struct Verdict {
  enum Kind { pass, refused, fail } kind = pass;
  std::string detail;
};

/// Compares kiln's outcome with the bare compiler's for one compile.
Verdict judge(const BareOutput& bare, const Outcome& kiln, bool blank_tags) {
  const auto bytes = [&](std::span<const std::byte> b) {
    return blank_tags ? kiln::test::blank_internal_tags(b)
                      : std::string(reinterpret_cast<const char*>(b.data()), b.size());
  };
  if (!bare.ok) {
    if (kiln.kind != Outcome::compiled) return {Verdict::pass, "both failed"};
    return {Verdict::fail, fmt::format("the bare compiler failed and kiln gave a binary ({}); the bare log: {}",
                                       kiln.origin, bare.log.substr(0, 400))};
  }
  if (kiln.kind == Outcome::refused) return {Verdict::refused, kiln.message};
  if (kiln.kind == Outcome::failed) {
    return {Verdict::fail, "the bare compiler compiled and kiln failed: " + kiln.message.substr(0, 600)};
  }
  const std::string b = bytes(bare.code), k = bytes(kiln.bytes);
  if (b == k) return {Verdict::pass, {}};
  return {Verdict::fail, fmt::format("kiln's binary ({}, key {}) is not the bare compiler's: {}", kiln.origin, kiln.key,
                                     diff_summary(b, k))};
}

struct Failure {
  std::string case_id;
  std::string mode;
  std::size_t step = 0;
  std::string what;  ///< the kernel's source name
  std::string detail;
  fs::path repro;
};

struct Totals {
  std::size_t cases = 0, skipped_cases = 0, both_failed_steps = 0, compiles = 0, bare_compiles = 0, passed = 0,
              refused = 0, failed = 0;
  std::vector<std::string> refusals;
  std::vector<Failure> failures;
};

class Runner {
 public:
  Runner(const Args& args, fs::path work, Bare bare) : m_args(args), m_work(std::move(work)), m_bare(std::move(bare)) {}

  /// Runs one case in `modes` (all when empty); adds to `totals`. Returns the modes that failed.
  std::set<std::string> run(const Case& c, Totals& totals, const std::set<std::string>& modes = {},
                            const std::string& keep_suffix = "") {
    std::set<std::string> failed_modes;
    const BareCompiler* compiler = c.vendor == "cuda" ? m_bare.nvrtc.get() : m_bare.hiprtc.get();
    if (compiler == nullptr) {
      ++totals.skipped_cases;
      std::printf("%s skipped: %s\n", c.id.c_str(), m_bare.hip_missing.c_str());
      return failed_modes;
    }
    const fs::path home = m_work / (c.id + keep_suffix);
    fs::remove_all(home);
    const fs::path root = home / "tree";
    fs::create_directories(root);
    apply(c.files, root);
    const std::vector<std::string> flags = bare_flags(c, root);
    std::vector<std::string> options;
    for (const std::string& o : c.options) options.push_back(placed(o, root));
    const std::vector<ModeSpec> all = modes_for(c, m_bare.remote);
    std::set<std::string> wanted = modes;
    for (const std::string& m : modes) {
      for (const std::string& need : mode_needs(m)) wanted.insert(need);
    }
    std::size_t case_compiles = 0;
    for (std::size_t step = 0; step <= c.steps.size(); ++step) {
      if (step > 0) apply(c.steps[step - 1], root);
      // The bare compiles of this step: the case, and the siblings where a mode compiles them.
      std::vector<Kernel> kernels = {{c.source_name, placed(c.source, root)}};
      // The siblings go under the case's name: a runtime names its sources alike (CuPy), and the NVRTC lane's
      // hoisted prelude starts with `#line 1 "<name>"`, so only sources of one name share its PCH.
      for (const std::string& sibling : c.siblings) kernels.push_back({c.source_name, placed(sibling, root)});
      const BareView view = bare_view(c, root);
      std::vector<BareOutput> bare;
      std::string first_log;  // the case's own bare compile failed: its log
      bool first_ok = true;
      for (const Kernel& k : kernels) {
        BareOutput b = compiler->compile(k.name, view.source(k.text), flags, view.headers);
        ++totals.bare_compiles;
        if (!b.ok && bare.empty()) first_ok = false, first_log = b.log;
        if (m_args.verbose && !b.ok) {
          std::printf("  %s step %zu: the bare compile of %s failed: %s\n", c.id.c_str(), step, k.name.c_str(),
                      b.log.c_str());
        }
        bare.push_back(std::move(b));
      }
      if (step == 0 && !first_ok) {
        // Every generated case compiles as written: one that does not tests nothing (a generator bug).
        ++totals.failed;
        totals.failures.push_back(
            {c.id + keep_suffix,
             "bare",
             0,
             c.source_name,
             "the case as generated does not compile with the bare compiler: " + first_log.substr(0, 800),
             {}});
        std::printf("%s: the case as generated does not compile with the bare compiler:\n%s\n", c.id.c_str(),
                    first_log.c_str());
        failed_modes.insert("bare");
        break;
      }
      for (const BareOutput& b : bare) totals.both_failed_steps += b.ok ? 0 : 1;
      const auto what = [&](std::size_t kernel) {
        return kernel == 0 ? c.source_name : fmt::format("{} (sibling {})", c.source_name, kernel - 1);
      };
      std::optional<Outcome> fresh;  // this step's compile over a new cache
      for (const ModeSpec& mode : all) {
        if (!wanted.empty() && !wanted.contains(mode.name)) continue;
        const Request request{c, options, kernels, home, step};
        const std::vector<Outcome> outcomes = run_mode(mode, request, m_bare.remote);
        for (const Outcome& out : outcomes) {
          ++totals.compiles;
          ++case_compiles;
          Verdict v = judge(bare[out.kernel], out, c.vendor == "cuda");
          if (mode.kind == ModeSpec::fresh && out.kernel == 0) fresh = out;
          if (v.kind == Verdict::fail && out.kind == Outcome::compiled && fresh && fresh->kind == Outcome::compiled &&
              fresh->key == out.key && fresh->bytes != out.bytes) {
            v.detail += fmt::format(
                "\n    a new cache compiles this step's tree under the same key {} and gets other bytes: the entry "
                "served is another tree's binary under this tree's key",
                out.key);
          }
          if (v.kind == Verdict::fail && bare[out.kernel].ok && out.kind == Outcome::compiled) {
            // Before blaming kiln: is the bare compiler itself the same twice?
            const BareOutput again =
                compiler->compile(kernels[out.kernel].name, view.source(kernels[out.kernel].text), flags, view.headers);
            if (!again.ok ||
                kiln::test::blank_internal_tags(again.code) != kiln::test::blank_internal_tags(bare[out.kernel].code)) {
              v.detail = "the bare compiler gives other bytes each time for this source: " + v.detail;
            }
          }
          if (m_args.verbose) {
            std::printf("  %s step %zu %-16s %-8s %s %s key %s bare %s\n", c.id.c_str(), step, mode.name.c_str(),
                        v.kind == Verdict::pass      ? "pass"
                        : v.kind == Verdict::refused ? "refused"
                                                     : "FAIL",
                        what(out.kernel).c_str(), out.origin.c_str(), out.key.c_str(),
                        bare[out.kernel].ok ? fmt::format("{} bytes", bare[out.kernel].code.size()).c_str() : "failed");
          }
          if (v.kind == Verdict::pass) {
            ++totals.passed;
          } else if (v.kind == Verdict::refused) {
            ++totals.refused;
            totals.refusals.push_back(
                fmt::format("{} {} step {} {}: {}", c.id, mode.name, step, what(out.kernel), v.detail));
          } else {
            ++totals.failed;
            if (!failed_modes.contains(mode.name)) {
              failed_modes.insert(mode.name);
              Failure f{c.id + keep_suffix, mode.name, step, what(out.kernel), v.detail, {}};
              f.repro = keep(c, keep_suffix, f, root, options, flags, bare[out.kernel], out);
              totals.failures.push_back(std::move(f));
            }
          }
        }
      }
    }
    ++totals.cases;
    std::printf("%s %s %s [%s]: %zu steps, %zu compiles%s\n", c.id.c_str(), c.vendor.c_str(), c.target.c_str(),
                fmt::format("{}", fmt::join(c.features, ", ")).c_str(), c.steps.size() + 1, case_compiles,
                failed_modes.empty() ? "" : fmt::format(", FAILED in {}", fmt::join(failed_modes, ", ")).c_str());
    std::fflush(stdout);
    fs::remove_all(home);
    return failed_modes;
  }

 private:
  /// Writes the repro of a failure to the kept folder: the tree as of the failing step, the case (a corpus
  /// of one, which --corpus runs again), both binaries and what differed. Returns the folder.
  fs::path keep(const Case& c, const std::string& suffix, const Failure& f, const fs::path& root,
                const std::vector<std::string>& options, const std::vector<std::string>& flags, const BareOutput& bare,
                const Outcome& out) {
    const fs::path dir = m_args.keep / fmt::format("{}{}-{}", c.id, suffix, f.mode);
    std::error_code ec;
    fs::remove_all(dir, ec);
    fs::create_directories(dir);
    fs::copy(root, dir / "tree", fs::copy_options::recursive, ec);
    write_file(dir / "case.json", nlohmann::json{{"seed", c.seed}, {"cases", {c.json}}}.dump(1) + "\n");
    write_file(dir / "bare.bin", std::string(reinterpret_cast<const char*>(bare.code.data()), bare.code.size()));
    write_file(dir / "kiln.bin", std::string(reinterpret_cast<const char*>(out.bytes.data()), out.bytes.size()));
    std::string steps;
    for (std::size_t s = 0; s < c.steps.size(); ++s)
      steps += fmt::format("  step {}: {}\n", s + 1, describe(c.steps[s]));
    const std::string text = fmt::format(
        "case {} (seed {}, features: {}), vendor {}, target {}\n"
        "mode {}: {}\n"
        "failed at step {} (0 = the tree as generated), compiling {}\n"
        "steps:\n{}"
        "kiln options: {}\n"
        "bare flags:   {}\n"
        "tree (as of that step; generated under {}): {}/tree\n"
        "{}\n"
        "run again:    differential_runner --corpus {}/case.json\n",
        c.id, c.seed, fmt::join(c.features, ", "), c.vendor, c.target, f.mode, mode_description(f.mode), f.step, f.what,
        steps.empty() ? "  (none)\n" : steps, fmt::join(options, " "), fmt::join(flags, " "), root.string(),
        dir.string(), f.detail, dir.string());
    write_file(dir / "repro.txt", text);
    for (std::size_t i = 0; i < 1 + c.siblings.size(); ++i) {
      const std::string name = i == 0 ? c.source_name : fmt::format("sibling{}-{}", i - 1, c.source_name);
      write_file(dir / name, placed(i == 0 ? c.source : c.siblings[i - 1], root));
    }
    return dir;
  }

  const Args& m_args;
  fs::path m_work;
  Bare m_bare;
};

/// Removes the repro folders an earlier run kept under `keep` (each has a repro.txt and a case.json), so that
/// what is there after a run is this run's; anything else there is left alone.
void forget_old_repros(const fs::path& keep) {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(keep, ec)) {
    if (e.is_directory(ec) && fs::exists(e.path() / "repro.txt", ec) && fs::exists(e.path() / "case.json", ec)) {
      fs::remove_all(e.path(), ec);
    }
  }
}

void print_failure(const Failure& f) {
  std::ifstream in(f.repro / "repro.txt");
  std::stringstream text;
  text << in.rdbuf();
  std::printf("\nFAIL %s in mode %s at step %zu (%s)\n%s", f.case_id.c_str(), f.mode.c_str(), f.step, f.what.c_str(),
              text.str().c_str());
}

/// Rebuilds a failing case with fewer features, one dropped at a time, keeping a drop while the case still
/// fails in the same mode. Returns the smallest failing feature list and its failure.
void minimize(Runner& runner, const Case& c, const Failure& failure, const fs::path& scratch) {
  std::vector<std::string> features = c.features;
  std::optional<Failure> smallest;
  for (std::size_t i = 0; features.size() > 1 && i < features.size();) {
    std::vector<std::string> fewer = features;
    fewer.erase(fewer.begin() + static_cast<std::ptrdiff_t>(i));
    const fs::path file = scratch / fmt::format("{}-min.json", c.id);
    generate(file, fmt::format("--seed {} --case {} --features {}", c.seed, c.index,
                               fmt::format("{}", fmt::join(fewer, ","))));
    const std::vector<Case> rebuilt = load_corpus(file);
    Totals t;
    if (runner.run(rebuilt.at(0), t, {failure.mode}, "-min").contains(failure.mode)) {
      features = fewer;
      smallest = t.failures.front();
    } else {
      ++i;
    }
  }
  if (!smallest) {
    std::printf("  minimal: no feature of %s can be dropped ([%s]); the repro above is the smallest\n", c.id.c_str(),
                fmt::format("{}", fmt::join(features, ", ")).c_str());
    return;
  }
  std::printf("\nMINIMAL repro of %s: features [%s] alone still fail in mode %s\n", c.id.c_str(),
              fmt::format("{}", fmt::join(features, ", ")).c_str(), failure.mode.c_str());
  print_failure(*smallest);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "--child") return child_main(argc, argv);
  Args args;
  try {
    args = parse(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "differential_runner: %s\n", e.what());
    return 2;
  }
  Bare bare;
  {
    kiln::EngineConfig config;
    config.runtime = false;
    config.cache.disabled = true;  // it only asks which compilers load
    kiln::Engine engine(config);
    std::string why_nvrtc, why_hip;
    const std::string nvrtc = compiler_path(engine, kiln::Vendor::cuda, why_nvrtc);
    if (nvrtc.empty()) kiln::test::skip("no NVRTC: " + why_nvrtc);
    bare.nvrtc = BareCompiler::nvrtc(nvrtc);
    const std::string hiprtc = compiler_path(engine, kiln::Vendor::hip, why_hip);
    if (hiprtc.empty()) {
      bare.hip_missing = "no HIPRTC: " + why_hip;
    } else {
      bare.hiprtc = BareCompiler::hiprtc(hiprtc);
      // The AMD cases compare bytes: only where HIPRTC gives the same bytes twice.
      const std::string probe = "extern \"C\" __global__ void k(int* p) { p[0] = __LINE__; }\n";
      const std::vector<std::string> flags = {"-std=c++17", "--offload-arch=gfx90a", "-DKILN_WARP_SIZE=64"};
      const BareOutput one = bare.hiprtc->compile("probe.cu", probe, flags),
                       two = bare.hiprtc->compile("probe.cu", probe, flags);
      if (!one.ok || one.code != two.code) {
        bare.hip_missing =
            one.ok ? "HIPRTC gives other bytes each time" : "HIPRTC cannot compile for gfx90a: " + one.log;
        bare.hiprtc.reset();
      }
    }
    std::printf("differential: NVRTC %s; HIPRTC %s\n", nvrtc.c_str(),
                bare.hiprtc ? hiprtc.c_str() : bare.hip_missing.c_str());
  }
  kiln::test::TempDir work("kiln-differential");
  forget_old_repros(args.keep);
  bare.remote = start_remote(work.path());
  if (!bare.remote.url.empty())
    std::printf("differential: remote %s\n", bare.remote.url.c_str());
  else
    std::printf("differential: no remote (%s): the fetched-manifest mode is left out\n", bare.remote.missing.c_str());

  std::vector<Case> cases;
  try {
    fs::path corpus = args.corpus;
    if (corpus.empty()) {
      corpus = work.path() / "corpus.json";
      generate(corpus, fmt::format("--seed {} --cases {}", args.seed, args.cases));
    }
    cases = load_corpus(corpus);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "differential_runner: %s\n", e.what());
    return 2;
  }
  // The bare compiler looks up a quoted include next to the source first, which for a program's source means
  // the working directory: one with nothing in it, as kiln's compiler gets none.
  const fs::path empty = work.path() / "cwd";
  fs::create_directories(empty);
  fs::current_path(empty);

  const auto started = std::chrono::steady_clock::now();
  Runner runner(args, work.path(), std::move(bare));
  Totals totals;
  std::map<std::string, const Case*> by_id;
  for (const Case& c : cases) {
    if (!args.only_case.empty() && c.id != args.only_case) continue;
    by_id[c.id] = &c;
    try {
      runner.run(c, totals);
    } catch (const std::exception& e) {
      ++totals.failed;
      totals.failures.push_back({c.id, "runner", 0, c.source_name, std::string("the runner failed: ") + e.what(), {}});
      std::printf("%s: the runner failed: %s\n", c.id.c_str(), e.what());
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  for (const std::string& r : totals.refusals) std::printf("refused: %s\n", r.c_str());
  const std::vector<Failure> failures = totals.failures;
  for (const Failure& f : failures) {
    if (!f.repro.empty())
      print_failure(f);
    else
      std::printf("\nFAIL %s (%s): %s\n", f.case_id.c_str(), f.mode.c_str(), f.detail.c_str());
  }
  int minimized = 0;
  std::set<std::string> done;
  for (const Failure& f : failures) {
    if (minimized >= args.minimize || f.repro.empty() || done.contains(f.case_id)) continue;
    done.insert(f.case_id);
    const Case& c = *by_id.at(f.case_id);
    if (c.features.size() < 2) continue;
    ++minimized;
    try {
      minimize(runner, c, f, work.path());
    } catch (const std::exception& e) {
      std::printf("  minimal repro of %s not made: %s\n", c.id.c_str(), e.what());
    }
  }
  std::printf(
      "\ndifferential summary: %zu cases, %zu compiles (%zu bare, %zu of them failing after an edit), %zu passed, %zu "
      "refused, %zu failed%s (seed %d, %.0f s)\n",
      totals.cases, totals.compiles, totals.bare_compiles, totals.both_failed_steps, totals.passed, totals.refused,
      totals.failed, totals.skipped_cases != 0 ? fmt::format(", {} cases skipped", totals.skipped_cases).c_str() : "",
      args.seed, seconds);
  if (!failures.empty()) {
    std::printf("failing cases and modes:");
    for (const Failure& f : failures) std::printf(" %s/%s@%zu", f.case_id.c_str(), f.mode.c_str(), f.step);
    std::printf("\nrepros kept under %s\n", args.keep.c_str());
  }
  return totals.failed == 0 ? 0 : 1;
}
