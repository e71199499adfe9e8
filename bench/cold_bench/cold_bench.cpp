// cold_bench: kiln's cold path (an empty cache: every request compiles), request by request, against bare
// NVRTC given the same include folders, in one long process per mode. Each mode runs in a fresh child
// process of this program (so each pays its own process start and its own first request, NVRTC's loading
// included), over the same request list in the same order:
//   bare      NVRTC called directly (dlopen of the library kiln loads), one program per request, with the
//             flags kiln gives the compiler (the "options" part of Engine::describe_key's canonical key)
//             but the include folders as -I flags instead of kiln's in-memory headers, and without kiln's
//             --no-source-include;
//   bare-pch  the same plus -pch --pch-dir=<private folder> --instantiate-templates-in-pch=false;
//   kiln      Engine::compile() with a fresh empty cache, KILN_PCH=0 (no GPU needed: a named target);
//   kiln-pch  the same with KILN_PCH=1 (NVRTC's precompiled headers, engine/src/lanes/nvrtc_pch.hpp: made and used
//             wherever a header set is large enough, kept in the cache: nvrtc_pch_store.hpp);
//   kiln-auto the same with KILN_PCH=auto (the default: only where they pay on this machine);
//   kiln-stored  KILN_PCH=auto over a cache an earlier process left its precompiled headers in, and no entries:
//             before the children, one process compiles the list twice with KILN_PCH=auto (the entries removed
//             between and after), so that every header set that can have a stored PCH has one (and its verdict);
//             each kiln-stored child then finds the PCHs and no entry.
// --fresh 1 runs every request in a fresh process of its own (each mode, each request: a child), so that every
// request is a process's first: with kiln-stored, "a new kernel in a fresh process, its header set's PCH stored by
// an earlier process"; the children of one mode share that mode's cache (kiln-auto's fresh processes learn and
// store as a program's separate runs or a test suite's workers would).
// Per request: the wall time; for the kiln modes also kiln's own time, the wall time less the compiler
// time the engine counted (Engine::stats().compile_nanoseconds), and the binary, written to a file so
// kiln-pch's binaries can be compared with kiln's. NVRTC 13 gives internal-linkage symbols a random tag
// in every compile of a source whose headers define such objects (libcu++ does), followed by the
// compiling process's id, so pairs that differ are compared again with both blanked.
//
// The requests, default: built-in sets over the CUDA toolkit's headers (kiln's --toolkit-includes; bare
// NVRTC gets the same folders as -I): --small N kernels in the shape of CuPy's element-wise kernels (a
// few lines each after a shared block of libcu++ includes, as CuPy's share theirs) and --cub M block- and
// warp-level CUB kernels (one name expression each, after a shared block of CUB includes). Or --log FILE:
// a request log (KILN_RECORD=FILE, kiln/tooling/request_log.hpp) replayed in file order; a request whose
// source or options mention CUB or Thrust is "cub", any other "small". Every request is distinct.
//
//   build/bench/cold_bench/cold_bench [--small 24] [--cub 6] [--rounds 1] [--target sm_90] [--log FILE]
//                                     [--json FILE] [--out DIR] [--fresh 0|1]
//                                     [--modes bare,bare-pch,kiln,kiln-pch,kiln-auto,kiln-stored]
// --modes runs some of the modes only (default: the first four; bare, the reference, always among them; every
// kiln-* mode's binaries are compared with kiln's when kiln runs): a long log through two modes fits where four
// do not.
// --rounds R runs the children R times, the mode order reversed every other round; a request's
// time is its median over the rounds. --target overrides a log's recorded targets. --out keeps the
// binaries there (else they go to a temporary folder, removed at the end). --json writes every number.
// Exit status: 0 when every request compiled in every mode and every kiln-pch binary was kiln's (after
// blanking); 1 otherwise (the report says which); 2 when it cannot start (no NVRTC, a bad argument).
#include <dlfcn.h>
#include <fmt/format.h>
#include <nvrtc.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "../support/fresh_process.hpp"
#include "kiln/cache/key.hpp"
#include "kiln/cache/store.hpp"
#include "kiln/engine.hpp"
#include "kiln/error.hpp"
#include "kiln/tooling/request_log.hpp"

namespace {

namespace fs = std::filesystem;
using kiln::bench::Clock;
using kiln::bench::ns_since;
using nlohmann::ordered_json;

constexpr std::array<std::string_view, 6> kModes = {"bare", "bare-pch", "kiln", "kiln-pch", "kiln-auto", "kiln-stored"};
/// The modes run without --modes.
constexpr std::size_t kDefaultModes = 4;

/// KILN_PCH for a kiln mode's children.
std::string pch_setting(std::string_view mode) {
  return mode == "kiln" ? "0" : mode == "kiln-pch" ? "1" : "auto";
}

/// The command line. A child gets its parent's, plus --child MODE --round R --work DIR --out DIR.
struct Args {
  int small = 24;
  int cub = 6;
  int rounds = 1;
  std::string target = "sm_90";
  bool target_given = false;
  std::string log, json, out;
  std::string child, work;  ///< a child's mode and the parent's temporary folder
  int round = 0;
  bool fresh = false;  ///< --fresh 1: a process per request
  int only = -1;       ///< a child of --fresh: the one request it compiles
  std::vector<std::string> modes{kModes.begin(), kModes.begin() + kDefaultModes};  ///< the modes to run, in order
};

/// The modes named in `list` ("bare,kiln-pch"), in kModes' order; nullopt for an unknown one, a list without
/// bare, or one that names a mode twice.
std::optional<std::vector<std::string>> parse_modes(const std::string& list) {
  std::vector<std::string> named;
  for (std::size_t at = 0; at <= list.size();) {
    const std::size_t comma = std::min(list.find(',', at), list.size());
    named.push_back(list.substr(at, comma - at));
    at = comma + 1;
  }
  std::vector<std::string> modes;
  for (const std::string_view mode : kModes) {
    const auto n = std::count(named.begin(), named.end(), mode);
    if (n > 1) return std::nullopt;
    if (n == 1) modes.emplace_back(mode);
  }
  if (modes.size() != named.size() || modes.empty() || modes.front() != "bare") return std::nullopt;
  return modes;
}

bool runs_mode(const Args& args, std::string_view mode) {
  return std::find(args.modes.begin(), args.modes.end(), mode) != args.modes.end();
}

/// One request as every mode makes it: kiln's inputs, and the flags bare NVRTC gets for it.
struct Request {
  std::string cls{};  ///< "small" or "cub"
  std::string source_name{};
  std::string text{};                  ///< runtime sources only
  std::vector<std::string> options{};  ///< portable options (Engine::compile's)
  std::vector<std::string> names{};
  std::string target{};
  std::vector<kiln::Header> headers{};  ///< the user's headers; runtime sources only
  bool builtin = false;
  std::vector<std::string> bare_flags{};  ///< the key's compiler flags, less --no-source-include, plus -I folders
  [[nodiscard]] kiln::Source source() const {
    return builtin ? kiln::Source::builtin(source_name) : kiln::Source::from_text(source_name, text, headers);
  }
};

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  std::string bytes(in ? static_cast<std::size_t>(in.tellg()) : 0, '\0');
  in.seekg(0).read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return bytes;
}
void write_file(const fs::path& path, std::string_view bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// ---- The built-in request sets ----

constexpr std::string_view kSmallIncludes =
    "#include <cuda/std/type_traits>\n#include <cuda/std/cmath>\n#include <cuda/std/complex>\n"
    "#include <cuda/std/tuple>\n#include <cuda/std/limits>\n";
/// Element-wise bodies over `a` and `b` of type T; K makes each request's kernel its own.
constexpr std::array<std::string_view, 8> kSmallBodies = {
    "a * b + T(K)",
    "cuda::std::sqrt(cuda::std::fabs(a)) + b * T(K)",
    "cuda::std::fmax(a, b) - T(K)",
    "cuda::std::abs(cuda::std::complex<T>(a, b * T(K)))",
    "cuda::std::get<0>(cuda::std::make_tuple(a + T(K), b)) * cuda::std::get<1>(cuda::std::make_tuple(a, b))",
    "cuda::std::is_same<T, float>::value ? a + T(K) : b - T(K)",
    "cuda::std::exp(-cuda::std::fabs(a)) * b + T(K)",
    "a < cuda::std::numeric_limits<T>::max() / T(K + 1) ? a * T(K) : b",
};

constexpr std::string_view kSmallKernel =
    "\ntypedef {} T;\nconstexpr int K = {};\n"
    "extern \"C\" __global__ void cold_small_{}(const T* __restrict__ in0, const T* __restrict__ in1, "
    "T* __restrict__ out0, long long n) {{\n"
    "  const long long stride = (long long)blockDim.x * gridDim.x;\n"
    "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += stride) {{\n"
    "    const T a = in0[i], b = in1[i];\n    out0[i] = {};\n  }}\n}}\n";

Request small_request(int i, const std::string& target) {
  const std::string_view type = (i / static_cast<int>(kSmallBodies.size())) % 2 == 0 ? "float" : "double";
  const std::string_view body = kSmallBodies[static_cast<std::size_t>(i) % kSmallBodies.size()];
  return {.cls = "small",
          .source_name = fmt::format("cold_small_{}.cu", i),
          .text = std::string(kSmallIncludes) + fmt::format(kSmallKernel, type, i, i, body),
          .options = {"--toolkit-includes"},
          .target = target};
}

constexpr std::string_view kCubIncludes =
    "#include <cub/block/block_load.cuh>\n#include <cub/block/block_radix_sort.cuh>\n"
    "#include <cub/block/block_reduce.cuh>\n#include <cub/block/block_scan.cuh>\n"
    "#include <cub/block/block_store.cuh>\n#include <cub/warp/warp_reduce.cuh>\n";
/// Kernel bodies over `in` and `out` (of type T) with kThreads threads per block; `at` is this thread's item.
constexpr std::array<std::pair<std::string_view, std::string_view>, 6> kCubBodies = {{
    {"float",
     "  using Reduce = cub::BlockReduce<T, kThreads>;\n  __shared__ typename Reduce::TempStorage storage;\n"
     "  const T total = Reduce(storage).Sum(in[at]);\n  if (threadIdx.x == 0) out[blockIdx.x] = total;\n"},
    {"int",
     "  using Scan = cub::BlockScan<T, kThreads>;\n  __shared__ typename Scan::TempStorage storage;\n"
     "  T v = in[at];\n  Scan(storage).ExclusiveSum(v, v);\n  out[at] = v;\n"},
    {"unsigned",
     "  using Sort = cub::BlockRadixSort<T, kThreads, 4>;\n  __shared__ typename Sort::TempStorage storage;\n"
     "  T keys[4];\n  for (int j = 0; j < 4; ++j) keys[j] = in[at * 4 + j];\n  Sort(storage).Sort(keys);\n"
     "  for (int j = 0; j < 4; ++j) out[at * 4 + j] = keys[j];\n"},
    {"float",
     "  using Warp = cub::WarpReduce<T>;\n  __shared__ typename Warp::TempStorage storage[kThreads / 32];\n"
     "  const T m = Warp(storage[threadIdx.x / 32]).Reduce(in[at], MaxOp{});\n"
     "  if (threadIdx.x % 32 == 0) out[at / 32] = m;\n"},
    {"float",
     "  using Load = cub::BlockLoad<T, kThreads, 4, cub::BLOCK_LOAD_WARP_TRANSPOSE>;\n"
     "  using Store = cub::BlockStore<T, kThreads, 4, cub::BLOCK_STORE_WARP_TRANSPOSE>;\n"
     "  __shared__ union { typename Load::TempStorage load; typename Store::TempStorage store; } storage;\n"
     "  T items[4];\n  Load(storage.load).Load(in + blockIdx.x * kThreads * 4, items);\n"
     "  for (int j = 0; j < 4; ++j) items[j] *= T(2);\n  __syncthreads();\n"
     "  Store(storage.store).Store(out + blockIdx.x * kThreads * 4, items);\n"},
    {"float",
     "  using Scan = cub::BlockScan<T, kThreads, cub::BLOCK_SCAN_WARP_SCANS>;\n"
     "  __shared__ typename Scan::TempStorage storage;\n"
     "  T v = in[at];\n  Scan(storage).InclusiveScan(v, v, MaxOp{});\n  out[at] = v;\n"},
}};

constexpr std::string_view kCubKernel =
    "\nstruct MaxOp {{\n  template <typename V>\n  __device__ V operator()(V a, V b) const {{ return a < b ? b : a; "
    "}}\n"
    "}};\ntypedef {} T;\ntemplate <int kThreads>\n"
    "__global__ void cold_cub_{}(const T* __restrict__ in, T* __restrict__ out) {{\n"
    "  const unsigned at = blockIdx.x * kThreads + threadIdx.x;\n{}}}\n";

Request cub_request(int i, const std::string& target) {
  constexpr std::array<int, 4> kThreads = {128, 256, 64, 512};
  const auto& [type, body] = kCubBodies[static_cast<std::size_t>(i) % kCubBodies.size()];
  const int threads = kThreads[(static_cast<std::size_t>(i) / kCubBodies.size()) % kThreads.size()];
  return {.cls = "cub",
          .source_name = fmt::format("cold_cub_{}.cu", i),
          .text = std::string(kCubIncludes) + fmt::format(kCubKernel, type, i, body),
          .options = {"--toolkit-includes"},
          .names = {fmt::format("cold_cub_{}<{}>", i, threads)},
          .target = target};
}

/// "cub" when the request's source, headers or options mention CUB or Thrust, else "small".
std::string classify(const kiln::detail::RecordedRequest& record) {
  std::vector<std::string_view> texts(record.options.begin(), record.options.end());
  texts.push_back(record.source_text);
  for (const kiln::Header& h : record.headers) texts.push_back(h.text);
  for (const std::string_view text : texts) {
    for (const std::string_view mark : {"<cub/", "\"cub/", "<thrust/", "\"thrust/", "cupy/cub"}) {
      if (text.find(mark) != std::string_view::npos) return "cub";
    }
  }
  return "small";
}

/// The request list, the same in the parent and in every child: a request log's, or the built-in sets.
std::vector<Request> make_requests(const Args& args) {
  std::vector<Request> requests;
  if (!args.log.empty()) {
    for (kiln::detail::RecordedRequest& record : kiln::detail::read_request_log(args.log)) {
      requests.push_back({.cls = classify(record),
                          .source_name = record.source_name,
                          .text = std::move(record.source_text),
                          .options = std::move(record.options),
                          .names = std::move(record.name_expressions),
                          .target = args.target_given ? args.target : record.target,
                          .headers = std::move(record.headers),
                          .builtin = record.builtin});
    }
  } else {
    for (int i = 0; i < args.small; ++i) requests.push_back(small_request(i, args.target));
    for (int i = 0; i < args.cub; ++i) requests.push_back(cub_request(i, args.target));
  }
  return requests;
}

/// A compile-only CUDA engine (no GPU runtime, as the bare side loads none) over a cache of its own.
kiln::EngineConfig compile_only(const fs::path& cache_root) {
  kiln::EngineConfig config;
  config.vendor = kiln::Vendor::cuda;
  config.runtime = false;
  config.cache.root = cache_root;
  return config;
}

/// Fills each request's bare flags from the key the engine makes for it.
void add_bare_flags(kiln::Engine& engine, std::vector<Request>& requests) {
  for (Request& r : requests) {
    const auto key = engine.describe_key(r.source(), kiln::Options(r.options), r.names, r.target).second;
    const auto parts = kiln::cache::CanonicalKey::parse(key);
    if (!parts) throw std::runtime_error(fmt::format("{}: the engine's key does not parse", r.source_name));
    std::vector<std::string> folders;
    for (const kiln::cache::KeyPart& part : *parts) {
      std::istringstream lines(part.value);
      for (std::string line; std::getline(lines, line);) {
        if (part.name == "options" && !line.empty() && line != "--no-source-include") r.bare_flags.push_back(line);
        if (part.name == "include-folders" && !line.empty()) folders.push_back("-I" + line);
      }
    }
    r.bare_flags.insert(r.bare_flags.end(), folders.begin(), folders.end());
  }
}

// ---- The children: one mode over every request ----

/// Bare NVRTC, loaded at its first compile (as kiln loads it at its first request).
class BareNvrtc {
 public:
  explicit BareNvrtc(std::string path) : m_path(std::move(path)) {}
  /// Compiles one request; returns an empty string, or why it failed. `pch_notes` counts the compiles
  /// whose log says NVRTC made ([0]) or used ([1]) a precompiled header.
  std::string compile(const Request& r, const kiln::Source& source, const std::vector<std::string>& extra,
                      std::array<int, 2>& pch_notes) {
    if (m_library == nullptr && !load()) return fmt::format("cannot load {}: {}", m_path, dlerror());
    std::vector<const char*> texts, names, flags;
    for (const kiln::Header& h : source.headers()) {
      texts.push_back(h.text.c_str());
      names.push_back(h.name.c_str());
    }
    for (const auto* list : {&r.bare_flags, &extra}) {
      for (const std::string& f : *list) flags.push_back(f.c_str());
    }
    const std::string text(source.text());
    nvrtcProgram p = nullptr;
    if (m_create(&p, text.c_str(), source.name().c_str(), static_cast<int>(texts.size()), texts.data(), names.data()) !=
        NVRTC_SUCCESS) {
      return "nvrtcCreateProgram failed";
    }
    for (const std::string& n : r.names) m_add_name(p, n.c_str());
    const nvrtcResult result = m_compile(p, static_cast<int>(flags.size()), flags.data());
    std::size_t size = 0;
    m_log_size(p, &size);
    std::string log(size, '\0');
    m_log(p, log.data());
    pch_notes[0] += log.find("creating precompiled header") != std::string::npos ? 1 : 0;
    pch_notes[1] += log.find("using precompiled header") != std::string::npos ? 1 : 0;
    if (result == NVRTC_SUCCESS) {
      // What the engine's lane fetches too: the CUBIN, the PTX and each name's lowered symbol.
      for (const auto& [get_size, get] : {std::pair{m_cubin_size, m_cubin}, std::pair{m_ptx_size, m_ptx}}) {
        get_size(p, &size);
        std::string bytes(size, '\0');
        get(p, bytes.data());
      }
      for (const std::string& n : r.names) {
        const char* lowered = nullptr;
        m_lowered(p, n.c_str(), &lowered);
      }
    }
    m_destroy(&p);
    return result == NVRTC_SUCCESS ? std::string() : fmt::format("compile failed: {}", log.substr(0, 2000));
  }

 private:
  using GetSize = nvrtcResult (*)(nvrtcProgram, std::size_t*);
  using Get = nvrtcResult (*)(nvrtcProgram, char*);
  template <typename F>
  bool sym(F& f, const char* name) {
    f = reinterpret_cast<F>(dlsym(m_library, name));
    return f != nullptr;
  }
  bool load() {
    m_library = dlopen(m_path.c_str(), RTLD_NOW);
    return m_library != nullptr && sym(m_create, "nvrtcCreateProgram") && sym(m_add_name, "nvrtcAddNameExpression") &&
           sym(m_compile, "nvrtcCompileProgram") && sym(m_log_size, "nvrtcGetProgramLogSize") &&
           sym(m_log, "nvrtcGetProgramLog") && sym(m_cubin_size, "nvrtcGetCUBINSize") &&
           sym(m_cubin, "nvrtcGetCUBIN") && sym(m_ptx_size, "nvrtcGetPTXSize") && sym(m_ptx, "nvrtcGetPTX") &&
           sym(m_lowered, "nvrtcGetLoweredName") && sym(m_destroy, "nvrtcDestroyProgram");
  }
  std::string m_path;
  void* m_library = nullptr;
  decltype(&nvrtcCreateProgram) m_create = nullptr;
  decltype(&nvrtcAddNameExpression) m_add_name = nullptr;
  decltype(&nvrtcCompileProgram) m_compile = nullptr;
  GetSize m_log_size = nullptr, m_cubin_size = nullptr, m_ptx_size = nullptr;
  Get m_log = nullptr, m_cubin = nullptr, m_ptx = nullptr;
  decltype(&nvrtcGetLoweredName) m_lowered = nullptr;
  decltype(&nvrtcDestroyProgram) m_destroy = nullptr;
};

/// Removes a cache's entries and dependency manifests, keeping its precompiled headers and their records.
void keep_only_pch(const fs::path& cache) {
  std::error_code ignored;
  fs::remove_all(cache / "v1", ignored);
  fs::remove_all(cache / "manifests", ignored);
  fs::remove(cache / "lock" / "size", ignored);
}

/// kiln-stored's earlier process: the list compiled twice with KILN_PCH=auto (a new engine each time, the
/// entries removed between and after), so that every header set that can have a stored PCH has one: a set's
/// first compile on the machine goes without, its next (the second pass, for a set the list has once) makes it.
/// Prints what the cache then holds.
int warm_stored_cache(const std::vector<Request>& requests, const std::vector<kiln::Source>& sources,
                      const std::vector<kiln::Options>& options, const fs::path& cache) {
  ordered_json result = {{"mode", "kiln-warm"}, {"passes", ordered_json::array()}};
  for (int pass = 0; pass < 2; ++pass) {
    const auto t0 = Clock::now();
    kiln::Engine engine(compile_only(cache));
    std::size_t failed = 0;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      try {
        (void)engine.compile(sources[i], options[i], requests[i].names, requests[i].target);
      } catch (const std::exception&) {
        ++failed;
      }
    }
    result["passes"].push_back({{"wall_ns", ns_since(t0)},
                                {"failed", failed},
                                {"pch_made", engine.stats().pch_made},
                                {"pch_used", engine.stats().pch_used}});
    keep_only_pch(cache);
  }
  kiln::cache::StoreConfig config;
  config.root = cache;
  const kiln::cache::Store store(config);
  std::size_t pch = 0, pays = 0, not_paying = 0;
  std::uint64_t bytes = 0;
  for (const kiln::cache::PchListing& item : store.list_pch()) {
    if (!item.record) {
      ++pch;
      bytes += item.size;
    } else if (item.parsed_record) {
      pays += item.parsed_record->verdict == kiln::cache::PchRecord::Verdict::pays ? 1 : 0;
      not_paying += item.parsed_record->verdict == kiln::cache::PchRecord::Verdict::does_not_pay ? 1 : 0;
    }
  }
  result["stored"] = {{"pch", pch}, {"bytes", bytes}, {"pays", pays}, {"does_not_pay", not_paying}};
  fmt::print("{}\n", result.dump(-1, ' ', false, ordered_json::error_handler_t::replace));
  return 0;
}

/// Runs one mode over the requests (or --fresh's one) and prints its numbers (JSON) on stdout. Every request is
/// tried.
int run_child(const Args& args) {
  const std::string& mode = args.child;
  const int round = args.round;
  const fs::path work = args.work, out = args.out;
  std::vector<Request> requests = make_requests(args);
  // What the parent found: the NVRTC library kiln loads, and each request's flags.
  const ordered_json plan = ordered_json::parse(read_file(work / "plan.json"));
  const std::string nvrtc = plan["nvrtc"].get<std::string>();
  if (plan["bare_flags"].size() != requests.size()) throw std::runtime_error("the plan has another request list");
  for (std::size_t i = 0; i < requests.size(); ++i) requests[i].bare_flags = plan["bare_flags"][i];
  std::vector<kiln::Source> sources;
  std::vector<kiln::Options> options;
  for (const Request& r : requests) {  // the caller's objects, made before the clock starts
    sources.push_back(r.source());
    options.emplace_back(r.options);
  }
  const std::string tag = fmt::format("{}-r{}", mode, round);
  ordered_json result = {
      {"mode", mode}, {"round", round}, {"pid", std::to_string(getpid())}, {"requests", ordered_json::array()}};
  const auto record = [&](const std::string& error, double wall_ns, double compile_ns) {
    result["requests"].push_back({{"ok", error.empty()},
                                  {"wall_ns", wall_ns},
                                  {"compile_ns", compile_ns},
                                  {"error", error},
                                  {"pid", std::to_string(getpid())}});
  };
  // The requests this child compiles: every one, or (--fresh) the one it was started for.
  std::vector<std::size_t> chosen;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (args.only < 0 || static_cast<std::size_t>(args.only) == i) chosen.push_back(i);
  }
  if (mode == "kiln-warm") return warm_stored_cache(requests, sources, options, work / "stored-cache");
  if (mode.starts_with("bare")) {
    std::vector<std::string> extra;
    if (mode == "bare-pch") {
      const fs::path folder = work / ("pch-" + tag);
      fs::create_directories(folder);
      fs::permissions(folder, fs::perms::owner_all);
      extra = {"-pch", "--pch-dir=" + folder.string(), "--instantiate-templates-in-pch=false"};
    }
    BareNvrtc bare(nvrtc);
    std::array<int, 2> pch_notes{};
    for (const std::size_t i : chosen) {
      const auto t0 = Clock::now();
      const std::string error = bare.compile(requests[i], sources[i], extra, pch_notes);
      record(error, ns_since(t0), 0);
    }
    result["pch_made"] = pch_notes[0];
    result["pch_used"] = pch_notes[1];
  } else {
    const auto t0 = Clock::now();
    kiln::Engine engine(compile_only(mode == "kiln-stored" ? work / "stored-cache" : work / ("cache-" + tag)));
    result["setup_ns"] = ns_since(t0);
    fs::create_directories(out / tag);
    for (const std::size_t i : chosen) {
      const std::uint64_t before = engine.stats().compile_nanoseconds;
      const auto start = Clock::now();
      try {
        const kiln::CompiledBinary binary =
            engine.compile(sources[i], options[i], requests[i].names, requests[i].target);
        const auto bytes = binary.bytes();
        record({}, ns_since(start), static_cast<double>(engine.stats().compile_nanoseconds - before));
        write_file(out / tag / fmt::format("{}.bin", i), {reinterpret_cast<const char*>(bytes.data()), bytes.size()});
      } catch (const std::exception& e) {
        const std::string error = e.what();
        record(error.empty() ? "failed" : error, ns_since(start),
               static_cast<double>(engine.stats().compile_nanoseconds - before));
      }
    }
    result["pch_made"] = engine.stats().pch_made;
    result["pch_used"] = engine.stats().pch_used;
  }
  fmt::print("{}\n", result.dump(-1, ' ', false, ordered_json::error_handler_t::replace));
  return 0;
}

// ---- The report ----

/// NVRTC 13 names internal-linkage entities `_INTERNAL_<8 hex>_<n>_<file name, n characters>_<tag>_<pid>`
/// (their anonymous namespaces `_GLOBAL__N__...` the same way), where the tag is 8 hex digits drawn at
/// random in every compile and the pid is the compiling process's (so two processes' binaries differ there
/// even without the tag). Every occurrence of `<tag>_<pid>` is blanked (to 0s; `pid` empty: the tag alone).
std::string blank_internal_tags(std::string bytes, const std::string& pid) {
  constexpr std::string_view kMark = "_INTERNAL_";
  const auto hex_at = [&](std::size_t at) {
    return at + 8 <= bytes.size() && bytes.find_first_not_of("0123456789abcdefABCDEF", at) >= at + 8;
  };
  std::vector<std::string> needles;  // each `<tag>_<pid>` found after an _INTERNAL_ prefix
  for (std::size_t at = bytes.find(kMark); at != std::string::npos; at = bytes.find(kMark, at + 1)) {
    std::size_t p = at + kMark.size();
    if (!hex_at(p) || p + 8 >= bytes.size() || bytes[p + 8] != '_') continue;
    p += 9;
    std::size_t length = 0, digits = 0;
    for (; p < bytes.size() && digits < 6 && std::isdigit(static_cast<unsigned char>(bytes[p])) != 0; ++p, ++digits) {
      length = length * 10 + static_cast<std::size_t>(bytes[p] - '0');
    }
    if (digits == 0 || p >= bytes.size() || bytes[p] != '_') continue;
    p += 1 + length;
    if (p >= bytes.size() || bytes[p] != '_' || !hex_at(p + 1)) continue;
    std::string needle = bytes.substr(p + 1, 8);
    if (!pid.empty() && bytes.compare(p + 9, pid.size() + 1, "_" + pid) == 0) needle += "_" + pid;
    if (std::find(needles.begin(), needles.end(), needle) == needles.end()) needles.push_back(std::move(needle));
  }
  for (const std::string& needle : needles) {
    for (std::size_t at = bytes.find(needle); at != std::string::npos; at = bytes.find(needle, at + needle.size())) {
      bytes.replace(at, needle.size(), needle.size(), '0');
    }
  }
  return bytes;
}

double ms(double ns) { return ns / 1e6; }

/// Each mode's children's numbers, by round (null for a child that failed).
using Runs = std::map<std::string, std::vector<ordered_json>>;

/// Runs one child (`--only`: one request of --fresh) and returns its numbers, null when it failed.
ordered_json run_one(const std::vector<std::string>& argv, const std::string& mode, int round, const fs::path& work,
                     const fs::path& out, int only) {
  std::vector<std::pair<std::string, std::string>> env;
  if (mode.starts_with("kiln")) env.emplace_back("KILN_PCH", pch_setting(mode));
  std::vector<std::string> child = argv;
  child.insert(child.end(),
               {"--child", mode, "--round", std::to_string(round), "--work", work.string(), "--out", out.string()});
  if (only >= 0) child.insert(child.end(), {"--only", std::to_string(only)});
  const auto output = kiln::bench::run_self(child, env);
  try {
    if (output) return ordered_json::parse(*output);
  } catch (const std::exception& e) {
    fmt::print("{} round {}: unreadable output ({})\n", mode, round, e.what());
  }
  return nullptr;
}

/// kiln-stored's cache: made by one earlier process (warm_stored_cache); says what it holds.
bool prepare_stored(const std::vector<std::string>& argv, const fs::path& work, const fs::path& out) {
  const ordered_json warm = run_one(argv, "kiln-warm", 0, work, out, -1);
  if (!warm.contains("stored")) {
    fmt::print("kiln-stored: the earlier process failed\n");
    return false;
  }
  fmt::print("kiln-stored: the earlier process (KILN_PCH=auto, two passes, {:.1f} + {:.1f} s) left {} precompiled headers "
             "({:.1f} MB; verdicts: {} pay, {} do not)\n",
             warm["passes"][0]["wall_ns"].get<double>() / 1e9, warm["passes"][1]["wall_ns"].get<double>() / 1e9,
             warm["stored"]["pch"].get<std::size_t>(), warm["stored"]["bytes"].get<double>() / 1e6,
             warm["stored"]["pays"].get<std::size_t>(), warm["stored"]["does_not_pay"].get<std::size_t>());
  return true;
}

/// Runs the children `args.rounds` times, the mode order reversed every other round: one per mode, or (--fresh)
/// one per mode and request, whose numbers are joined into one run. False when a child failed or gave no numbers.
bool run_children(const Args& args, const std::vector<std::string>& argv, const fs::path& work, const fs::path& out,
                  std::size_t requests, Runs& runs) {
  bool ok = true;
  if (runs_mode(args, "kiln-stored") && !prepare_stored(argv, work, out)) return false;
  for (int round = 0; round < args.rounds; ++round) {
    for (std::size_t k = 0; k < args.modes.size(); ++k) {
      const std::string& mode = args.modes[round % 2 == 0 ? k : args.modes.size() - 1 - k];
      ordered_json numbers;
      if (!args.fresh) {
        if (mode == "kiln-stored") keep_only_pch(work / "stored-cache");
        numbers = run_one(argv, mode, round, work, out, -1);
      } else {
        numbers = {{"mode", mode}, {"round", round}, {"pid", ""}, {"requests", ordered_json::array()},
                   {"pch_made", 0}, {"pch_used", 0}};
        for (std::size_t i = 0; i < requests && !numbers.is_null(); ++i) {
          if (mode == "kiln-stored") keep_only_pch(work / "stored-cache");  // the PCHs, never an entry
          const ordered_json one = run_one(argv, mode, round, work, out, static_cast<int>(i));
          if (!one.contains("requests") || one["requests"].size() != 1) {
            numbers = nullptr;
            break;
          }
          numbers["requests"].push_back(one["requests"][0]);
          for (const char* count : {"pch_made", "pch_used"}) {
            if (one.contains(count)) numbers[count] = numbers[count].get<std::uint64_t>() + one[count].get<std::uint64_t>();
          }
        }
      }
      if (numbers.is_null() || !numbers.contains("requests") || numbers["requests"].size() != requests) {
        fmt::print("{} round {}: the child gave no numbers\n", mode, round);
        numbers = nullptr;
        ok = false;
      }
      runs[mode].push_back(std::move(numbers));
    }
  }
  return ok;
}

/// Prints the time tables; adds each request that failed to `failures`.
void print_times(const std::vector<Request>& requests, const std::vector<std::string>& modes, Runs& runs,
                 std::vector<std::string>& failures) {
  // Each request's wall (and kiln's own time) in each mode: its median over the rounds.
  std::map<std::string_view, std::vector<double>> wall, own;
  for (const std::string_view mode : modes) {
    for (std::size_t i = 0; i < requests.size(); ++i) {
      std::vector<double> walls, owns;
      for (const ordered_json& run : runs[std::string(mode)]) {
        if (run.is_null()) continue;
        const ordered_json& q = run["requests"][i];
        walls.push_back(q["wall_ns"].get<double>());
        owns.push_back(q["wall_ns"].get<double>() - q["compile_ns"].get<double>());
        if (!q["ok"].get<bool>()) {
          failures.push_back(fmt::format("{} {}: {}", mode, requests[i].source_name, q["error"].get<std::string>()));
        }
      }
      wall[mode].push_back(kiln::bench::median(walls));
      own[mode].push_back(kiln::bench::median(owns));
    }
  }
  const auto pick = [&](const std::vector<double>& values, const std::string& cls) {
    std::vector<double> chosen;
    for (std::size_t i = 0; i < requests.size(); ++i) {
      if (cls == "all" || requests[i].cls == cls) chosen.push_back(values[i]);
    }
    return chosen;
  };
  const auto sum = [](const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0); };
  using kiln::bench::median;
  fmt::print("\nwall per request, ms (each request's median over the rounds; each process's first request included)\n");
  fmt::print("{:<6} {:>5}  {:<9} {:>9} {:>10} {:>11} {:>12}\n", "class", "n", "mode", "median", "total", "total/bare",
             "median/bare");
  for (const std::string cls : {"small", "cub", "all"}) {
    const std::vector<double> bare = pick(wall["bare"], cls);
    for (std::size_t k = 0; k < modes.size() && !bare.empty(); ++k) {
      const std::vector<double> v = pick(wall[modes[k]], cls);
      fmt::print("{:<6} {:>5}  {:<9} {:>9.2f} {:>10.1f} {:>11.3f} {:>12.3f}\n", k == 0 ? cls : "",
                 k == 0 ? std::to_string(v.size()) : "", modes[k], ms(median(v)), ms(sum(v)), sum(v) / sum(bare),
                 median(v) / median(bare));
    }
  }
  fmt::print("\nkiln's own time per request (wall less the compiler time the engine counted), ms\n");
  fmt::print("{:<6} {:>5}  {:<9} {:>9} {:>9}\n", "class", "n", "mode", "median", "p90");
  for (const std::string cls : {"small", "cub", "all"}) {
    bool first = true;
    for (const std::string& mode : modes) {
      if (!mode.starts_with("kiln")) continue;
      const std::vector<double> v = pick(own[mode], cls);
      if (v.empty()) continue;
      fmt::print("{:<6} {:>5}  {:<9} {:>9.3f} {:>9.3f}\n", first ? cls : "", first ? std::to_string(v.size()) : "",
                 mode, ms(median(v)), ms(kiln::bench::quantile(v, 0.9)));
      first = false;
    }
  }
  if (requests.empty()) return;
  fmt::print("\nfirst request of the process (wall, ms; {}):", requests[0].source_name);
  for (const std::string_view mode : modes) fmt::print(" {} {:.1f}", mode, ms(wall[mode][0]));
  fmt::print("\nprecompiled headers made / used (NVRTC's log for bare-pch, Engine::stats() for the kiln modes):");
  for (const std::string mode : {"bare-pch", "kiln-pch", "kiln-auto", "kiln-stored"}) {
    if (std::find(modes.begin(), modes.end(), mode) == modes.end()) continue;
    std::uint64_t made = 0, used = 0;
    for (const ordered_json& run : runs[mode]) {
      if (!run.is_null()) made += run["pch_made"].get<std::uint64_t>(), used += run["pch_used"].get<std::uint64_t>();
    }
    fmt::print(" {} {} / {}", mode, made, used);
  }
  fmt::print("\n");
}

/// A kiln-* mode's binaries against kiln's (KILN_PCH=0), request by request in every round.
struct Identity {
  std::size_t pairs = 0, identical = 0, blanked = 0;
  std::vector<std::string> differing;
};
Identity compare_binaries(const std::vector<Request>& requests, Runs& runs, const fs::path& out, const std::string& mode) {
  Identity result;
  for (std::size_t round = 0; round < runs["kiln"].size() && round < runs[mode].size(); ++round) {
    for (std::size_t i = 0; i < requests.size(); ++i, ++result.pairs) {
      // The process that compiled request i (its own with --fresh), whose id NVRTC writes after the tag.
      const auto pid = [&](const std::string& m) {
        const ordered_json& run = runs[m][round];
        if (run.is_null()) return std::string();
        const ordered_json& q = run["requests"][i];
        return q.contains("pid") ? q["pid"].get<std::string>() : run["pid"].get<std::string>();
      };
      const auto file = [&](std::string_view m) { return out / fmt::format("{}-r{}/{}.bin", m, round, i); };
      const bool present = fs::exists(file("kiln")) && fs::exists(file(mode));
      const std::string a = present ? read_file(file("kiln")) : "", b = present ? read_file(file(mode)) : "";
      if (present && a == b) {
        ++result.identical;
      } else if (present && blank_internal_tags(a, pid("kiln")) == blank_internal_tags(b, pid(mode))) {
        ++result.blanked;
      } else {
        result.differing.push_back(
            fmt::format("{} {} (round {}){}", mode, requests[i].source_name, round, present ? "" : ": missing"));
      }
    }
  }
  return result;
}

int run_parent(const Args& args, const std::vector<std::string>& argv) {
  char temp[] = "/tmp/kiln-cold-XXXXXX";
  if (mkdtemp(temp) == nullptr) {
    fmt::print("cold_bench: cannot make a temporary folder\n");
    return 2;
  }
  const fs::path work = temp;
  const fs::path out = args.out.empty() ? work / "binaries" : fs::path(args.out);
  std::vector<Request> requests;
  std::string nvrtc, nvrtc_version;
  try {
    kiln::Engine engine(compile_only(work / "prepare-cache"));
    for (const kiln::LaneInfo& lane : engine.lanes()) {
      for (const kiln::LibraryInfo& library : lane.libraries) {
        if (library.role == "nvrtc") nvrtc = library.path, nvrtc_version = library.version;
      }
      if (lane.vendor == kiln::Vendor::cuda && nvrtc.empty()) {
        throw std::runtime_error(fmt::format("no NVRTC: {}", lane.status));
      }
    }
    requests = make_requests(args);
    add_bare_flags(engine, requests);
  } catch (const std::exception& e) {
    fmt::print("cold_bench: cannot start: {}\n", e.what());
    fs::remove_all(work);
    return 2;
  }
  ordered_json plan = {{"nvrtc", nvrtc}, {"bare_flags", ordered_json::array()}};
  for (const Request& r : requests) plan["bare_flags"].push_back(r.bare_flags);
  std::ofstream(work / "plan.json") << plan.dump(-1, ' ', false, ordered_json::error_handler_t::replace);

  Runs runs;
  const bool children_ok = run_children(args, argv, work, out, requests.size(), runs);
  const auto n_small =
      std::count_if(requests.begin(), requests.end(), [](const Request& r) { return r.cls == "small"; });
  fmt::print("cold_bench: {} requests ({} small, {} cub){}, {} round(s){}; NVRTC {} ({})\n", requests.size(), n_small,
             static_cast<std::ptrdiff_t>(requests.size()) - n_small,
             args.log.empty() ? fmt::format(", target {}", args.target) : ", from " + args.log, args.rounds,
             args.fresh ? ", every request in a fresh process" : ", one process per mode", nvrtc_version, nvrtc);
  std::vector<std::string> failures;
  print_times(requests, args.modes, runs, failures);
  bool compared = false;
  Identity identity;
  for (const std::string& mode : args.modes) {
    if (!mode.starts_with("kiln-") || !runs_mode(args, "kiln")) continue;
    compared = true;
    const Identity one = compare_binaries(requests, runs, out, mode);
    fmt::print(
        "binaries {} vs kiln: {} of {} identical; {} more identical after blanking NVRTC's "
        "_INTERNAL_<8 hex> tag (and the process id after it)\n",
        mode, one.identical, one.pairs, one.blanked);
    identity.pairs += one.pairs;
    identity.identical += one.identical;
    identity.blanked += one.blanked;
    identity.differing.insert(identity.differing.end(), one.differing.begin(), one.differing.end());
  }
  if (!compared) fmt::print("binaries: not compared (--modes runs kiln and no other kiln mode, or not kiln)\n");
  for (const std::string& d : identity.differing) fmt::print("  differs: {}\n", d);
  for (const std::string& f : failures)
    fmt::print("  failed: {}\n", f.substr(0, std::min<std::size_t>(f.find('\n'), 300)));

  if (!args.json.empty()) {
    ordered_json doc = {{"log", args.log}, {"rounds", args.rounds}, {"nvrtc", nvrtc}, {"nvrtc_version", nvrtc_version}};
    for (const Request& r : requests) {
      doc["requests"].push_back({{"source", r.source_name}, {"class", r.cls}, {"target", r.target}});
    }
    for (const std::string& mode : args.modes) doc["runs"][mode] = runs[mode];
    doc["identity"] = {{"pairs", identity.pairs},
                       {"identical", identity.identical},
                       {"identical_after_blanking", identity.blanked},
                       {"differing", identity.differing}};
    std::ofstream(args.json) << doc.dump(1, ' ', false, ordered_json::error_handler_t::replace) << '\n';
  }
  fs::remove_all(work);
  const bool ok = children_ok && failures.empty() && identity.differing.empty();
  fmt::print("{}\n", !ok        ? "FAILED: see the lines above"
                     : compared ? "ok: every request compiled in every mode, every binary pair identical"
                                : "ok: every request compiled in every mode run");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  Args options;
  const auto count = [](const std::string& v, int least) { return std::max(least, std::atoi(v.c_str())); };
  const std::map<std::string_view, std::function<void(const std::string&)>> setters = {
      {"--small", [&](const std::string& v) { options.small = count(v, 0); }},
      {"--cub", [&](const std::string& v) { options.cub = count(v, 0); }},
      {"--rounds", [&](const std::string& v) { options.rounds = count(v, 1); }},
      {"--target", [&](const std::string& v) { options.target = v, options.target_given = true; }},
      {"--log", [&](const std::string& v) { options.log = v; }},
      {"--json", [&](const std::string& v) { options.json = v; }},
      {"--out", [&](const std::string& v) { options.out = v; }},
      {"--child", [&](const std::string& v) { options.child = v; }},
      {"--round", [&](const std::string& v) { options.round = count(v, 0); }},
      {"--work", [&](const std::string& v) { options.work = v; }},
      {"--modes", [&](const std::string& v) { options.modes = parse_modes(v).value_or(std::vector<std::string>{}); }},
      {"--fresh", [&](const std::string& v) { options.fresh = v == "1"; }},
      {"--only", [&](const std::string& v) { options.only = count(v, 0); }},
  };
  for (std::size_t i = 0; i < args.size(); i += 2) {
    const auto setter = setters.find(args[i]);
    if (setter == setters.end() || i + 1 == args.size()) {
      fmt::print(stderr,
                 "usage: cold_bench [--small 24] [--cub 6] [--rounds 1] [--target sm_90] [--log FILE] "
                 "[--json FILE] [--out DIR] [--fresh 0|1] [--modes bare,bare-pch,kiln,kiln-pch,kiln-auto,kiln-stored]\n");
      return 2;
    }
    setter->second(args[i + 1]);
  }
  if (options.modes.empty()) {
    fmt::print(stderr, "cold_bench: --modes takes some of bare, bare-pch, kiln, kiln-pch, kiln-auto, kiln-stored, "
                       "comma-separated, each once, bare among them\n");
    return 2;
  }
  if (options.child.empty()) return run_parent(options, args);
  try {
    return run_child(options);
  } catch (const std::exception& e) {
    fmt::print(stderr, "cold_bench child {}: {}\n", options.child, e.what());
    return 1;
  }
}
