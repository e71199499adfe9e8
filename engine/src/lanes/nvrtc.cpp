// The NVRTC lane: compiles CUDA C++ to a CUBIN for sm_XX targets, and keeps the PTX of the same compile
// beside it (the CUDA driver lane JIT-compiles it for GPUs the CUBIN does not serve); compute_XX
// targets give PTX only; lto_XX targets (-dlto) give LTO-IR only, through the optional
// nvrtcGetLTOIRSize / nvrtcGetLTOIR. libnvrtc is dlopen'ed; its types come from the toolkit's nvrtc.h.
#include <cuda.h>
#include <fmt/format.h>
#include <nvrtc.h>

#include <unistd.h>

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <iterator>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "kiln/base/log.hpp"
#include "kiln/error.hpp"
#include "lanes/cuda_symbols.hpp"
#include "lanes/dynlib.hpp"
#include "lanes/lane.hpp"
#include "lanes/nvrtc_pch.hpp"
#include "lanes/rtc_compile.hpp"
#include "lanes/symbols.hpp"

namespace kiln::vendor {
namespace {

KILN_SYMBOL_TABLE(NvrtcApi, KILN_NVRTC_SYMBOLS)
KILN_RTC_CALLS(NvrtcCalls, NvrtcApi, nvrtc, nvrtcProgram, nvrtcResult, NVRTC_SUCCESS)

/// Where NVRTC is looked for. KILN_CUDA_PATH names the one toolkit to use (only it is searched);
/// otherwise $CUDA_HOME, /usr/local/cuda, then the loader's path.
std::vector<std::string> nvrtc_candidates(const std::string& soname) {
  std::vector<std::string> candidates;
  std::vector<std::string> dirs = env_dirs("KILN_CUDA_PATH", {"lib64", "lib"});
  const bool exclusive = !dirs.empty();
  if (!exclusive) {
    dirs = env_dirs("CUDA_HOME", {"lib64", "lib"});
    dirs.emplace_back("/usr/local/cuda/lib64");
  }
  for (const std::string& dir : dirs) candidates.push_back(dir + "/" + soname);
  if (!exclusive) candidates.push_back(soname);
  return candidates;
}

/// Compiles beside others (nvrtc_pch.hpp) run on threads of their own. The process joins them before it
/// exits (atexit) and a lane before it goes, so that no NVRTC call runs while the library or the lane is torn
/// down. Joined, not waited for: a thread that has said it is done still runs its thread-local destructors
/// (NVRTC's among them) on its way out, and a process that went on to exit meanwhile crashed there (measured:
/// a numba-cuda process, SIGSEGV at exit). Raw pthreads: a forked child has none of its parent's threads and
/// must neither join nor destroy them (a joinable std::thread would terminate the child), so it drops them.
class BesideJobs {
 public:
  /// Never destroyed: the atexit handler and the lanes use it to the end.
  static BesideJobs& process() {
    static BesideJobs* const jobs = new BesideJobs;
    return *jobs;
  }

  /// Runs `work` on a thread of its own. Throws std::system_error when no thread can be had.
  void start(std::function<void()> work) {
    static std::once_flag at_exit;
    std::call_once(at_exit, [] { std::atexit([] { process().join_all(); }); });
    join_finished();
    auto job = std::make_unique<Job>();
    job->work = std::move(work);
    const std::lock_guard lock(m_mutex);
    adopt_process();
    if (const int error = ::pthread_create(&job->thread, nullptr, &BesideJobs::run, job.get()); error != 0) {
      throw std::system_error(error, std::generic_category(), "pthread_create");
    }
    m_jobs.push_back(std::move(job));
  }

  /// Joins every thread started (and not yet joined) in this process.
  void join_all() {
    std::vector<std::unique_ptr<Job>> jobs;
    {
      const std::lock_guard lock(m_mutex);
      adopt_process();
      jobs.swap(m_jobs);
    }
    for (const auto& job : jobs) ::pthread_join(job->thread, nullptr);
  }

 private:
  struct Job {
    pthread_t thread{};
    std::function<void()> work;
    std::atomic<bool> done{false};
  };

  static void* run(void* argument) {
    auto* job = static_cast<Job*>(argument);
    try {
      job->work();
    } catch (...) {  // NOLINT(bugprone-empty-catch): a PCH not made is made by the set's next compile
    }
    job->work = nullptr;  // what the work held goes before the process may go on to exit
    job->done.store(true, std::memory_order_release);
    return nullptr;
  }

  /// Joins the threads that are done (their joins do not wait), so finished ones do not pile up.
  void join_finished() {
    std::vector<std::unique_ptr<Job>> finished;
    {
      const std::lock_guard lock(m_mutex);
      adopt_process();
      const auto split = std::stable_partition(m_jobs.begin(), m_jobs.end(), [](const std::unique_ptr<Job>& job) {
        return !job->done.load(std::memory_order_acquire);
      });
      std::move(split, m_jobs.end(), std::back_inserter(finished));
      m_jobs.erase(split, m_jobs.end());
    }
    for (const auto& job : finished) ::pthread_join(job->thread, nullptr);
  }

  /// In a forked child the jobs are the parent's: forgotten, never joined (their memory is left as it is,
  /// since the parent's threads may have been in the middle of using it).
  void adopt_process() {
    if (m_pid == ::getpid()) return;
    m_pid = ::getpid();
    for (auto& job : m_jobs) (void)job.release();  // NOLINT(bugprone-unused-return-value): leaked on purpose
    m_jobs.clear();
  }

  std::mutex m_mutex;
  long m_pid = ::getpid();
  std::vector<std::unique_ptr<Job>> m_jobs;
};

/// A compile's input with everything it points to owned, for a compile on another thread.
struct OwnedInput {
  explicit OwnedInput(const CompileInput& in)
      : source_name(in.source_name), source(in.source), target(in.target),
        names(in.name_expressions.begin(), in.name_expressions.end()), flags(in.flags.begin(), in.flags.end()),
        lto_ir(in.lto_ir) {
    texts.reserve(in.headers.size() * 2);
    for (const HeaderText& h : in.headers) {
      texts.emplace_back(h.name);
      texts.emplace_back(h.text);
    }
    for (std::size_t i = 0; i < texts.size(); i += 2) headers.push_back({texts[i].c_str(), texts[i + 1].c_str()});
  }
  OwnedInput(const OwnedInput&) = delete;
  OwnedInput& operator=(const OwnedInput&) = delete;

  [[nodiscard]] CompileInput view() const {
    CompileInput in;
    in.source_name = source_name;
    in.source = source;
    in.headers = headers;
    in.name_expressions = names;
    in.flags = flags;
    in.target = target;
    in.lto_ir = lto_ir;
    return in;
  }

  std::string source_name, source, target;
  std::vector<std::string> names, flags, texts;
  std::vector<HeaderText> headers;  // into texts (whose strings do not move once made)
  bool lto_ir = false;
};

class Nvrtc final : public Compiler {
 public:
  Nvrtc(DynamicLibrary library, NvrtcApi api)
      : m_library(std::move(library)), m_api(api), m_calls(NvrtcCalls::of(m_api)) {
    int major = 0, minor = 0;
    m_api.nvrtcVersion(&major, &minor);
    m_version = fmt::format("{}.{}", major, minor);
    m_identity = "nvrtc " + m_version;
    int count = 0;
    if (m_api.nvrtcGetNumSupportedArchs(&count) == NVRTC_SUCCESS && count > 0) {
      std::vector<int> archs(static_cast<std::size_t>(count));
      if (m_api.nvrtcGetSupportedArchs(archs.data()) == NVRTC_SUCCESS) {
        for (int arch : archs) m_targets.push_back(fmt::format("sm_{}", arch));
      }
    }
    m_pch = std::make_unique<pch::Folders>(pch_off_reason(), beside_limit());
  }
  ~Nvrtc() override { BesideJobs::process().join_all(); }
  Nvrtc(const Nvrtc&) = delete;
  Nvrtc& operator=(const Nvrtc&) = delete;

  Vendor vendor() const noexcept override { return Vendor::cuda; }
  const std::string& identity() const noexcept override { return m_identity; }
  std::vector<LibraryInfo> libraries() const override { return {{"nvrtc", m_library.path(), m_version}}; }
  std::vector<std::string> supported_targets() const override { return m_targets; }

  CompileOutput compile(const CompileInput& input) const override {
    if (input.lto_ir && (m_api.nvrtcGetLTOIRSize == nullptr || m_api.nvrtcGetLTOIR == nullptr)) {
      throw ConfigError(fmt::format(
          "target '{}' asks for LTO-IR, and NVRTC {} at {} has no nvrtcGetLTOIRSize / nvrtcGetLTOIR (NVRTC 12.0 or "
          "later has them); compile for sm_XY or compute_XY, or use a newer toolkit (KILN_CUDA_PATH)",
          input.target, m_version, m_library.path()));
    }
    std::optional<pch::Plan> plan = m_pch->plan(input);
    if (!plan) return compile_once(input, nullptr);
    if (plan->beside) {
      make_beside(input, *plan);
      return compile_once(input, nullptr);
    }
    // Compiles share the PCH heap; growing it frees the old one, so it waits for them (and they for it).
    std::shared_lock heap(heap_mutex());
    std::optional<std::size_t> needed;
    CompileOutput out = compile_once(input, &*plan, &needed);
    if (needed) {
      // The PCH did not fit the heap (the compile succeeded without making one, with a warning in its
      // log): grow the heap to what NVRTC asked for and compile again with a new program, once.
      heap.unlock();
      grow_heap(*needed);
      heap.lock();
      needed.reset();
      out = compile_once(input, &*plan, &needed);
      if (needed) out = compile_once(input, nullptr);  // another compile's PCH took the room: without PCH
    }
    return out;
  }

  std::string precompiled_headers() const override {
    std::size_t heap = 0;
    if (m_pch->on()) m_api.nvrtcGetPCHHeapSize(&heap);
    return m_pch->describe(heap);
  }

 private:
  /// One program, compiled with the request's flags plus `plan`'s. With a plan, `heap_needed` is set
  /// when the PCH did not fit the heap (to the size NVRTC asks for).
  CompileOutput compile_once(const CompileInput& input, const pch::Plan* plan,
                             std::optional<std::size_t>* heap_needed = nullptr) const {
    rtc::Program program(m_calls, input);
    std::vector<const char*> flags = rtc::c_strings(input.flags);
    pch::LogNotes notes;
    if (plan != nullptr) {
      for (const std::string& flag : plan->flags) flags.push_back(flag.c_str());
    }
    CompileOutput out;
    out.log = program.compile(flags, {}, [&](std::string& log) {
      if (plan != nullptr) notes = pch::strip_pch_messages(log, *plan);
    });
    if (plan != nullptr) {
      std::size_t required = 0;
      if (m_api.nvrtcGetPCHCreateStatus(program.handle()) == kHeapExhausted &&
          m_api.nvrtcGetPCHHeapSizeRequired(program.handle(), &required) == NVRTC_SUCCESS && required > 0) {
        *heap_needed = required;
        return out;
      }
      m_pch->note(*plan, notes);
      out.pch_made = notes.created;
      out.pch_used = notes.used;
    }
    out.lowered = program.lowered_names();
    if (input.lto_ir) {
      // -dlto: LTO-IR only (NVRTC 13.0 gives no CUBIN and a PTX of one NUL byte). Checked as a cache read
      // checks it, so that a compile never stores what every later read would refuse.
      out.kind = PayloadKind::ltoir;
      out.binary = program.fetch(m_api.nvrtcGetLTOIRSize, m_api.nvrtcGetLTOIR, "GetLTOIRSize", "GetLTOIR");
      if (!cache::looks_like_ltoir(out.binary)) {
        rtc::call_failed("nvrtc", "GetLTOIR", "no LTO-IR",
                         fmt::format("{} bytes without LTO-IR's signature (NVRTC {})", out.binary.size(), m_version),
                         input, out.log);
      }
      return out;
    }
    // An sm_XX target gives a CUBIN; a compute_XX target none (its size is 0), only the PTX.
    out.binary = program.fetch(m_api.nvrtcGetCUBINSize, m_api.nvrtcGetCUBIN, "GetCUBINSize", "GetCUBIN");
    // The PTX keeps its terminating NUL: the driver needs it.
    std::vector<std::byte> ptx = program.fetch(m_api.nvrtcGetPTXSize, m_api.nvrtcGetPTX, "GetPTXSize", "GetPTX");
    if (out.binary.empty()) {
      out.kind = PayloadKind::ptx;
      out.binary = std::move(ptx);
    } else {
      out.kind = PayloadKind::cubin;
      out.ptx = std::move(ptx);
    }
    return out;
  }

  /// Compiles `input` with `plan`'s flags on a thread of its own, for the PCH alone (the binary is dropped).
  /// A PCH that does not fit the heap is not made here: the set's next compile grows the heap and makes it.
  void make_beside(const CompileInput& input, const pch::Plan& plan) const {
    auto owned = std::make_shared<const OwnedInput>(input);
    try {
      BesideJobs::process().start([this, owned, plan] {
        try {
          std::shared_lock heap(heap_mutex());
          std::optional<std::size_t> needed;
          (void)compile_once(owned->view(), &plan, &needed);
        } catch (const std::exception& e) {  // the compile beside reports nothing: the request's own compile does
          KILN_LOG(debug, "the compile beside '{}' that was to make a PCH failed: {}", owned->source_name, e.what());
        }
        m_pch->made_beside(plan);
      });
    } catch (const std::system_error&) {
      m_pch->made_beside(plan);
    }
  }

  /// How many compiles beside others may make PCHs at once: KILN_PCH_BESIDE=N that many; by default none (the
  /// set's second compile makes the PCH). Off by default as measured on the H200 (cupy_bench, cold, one
  /// process each): kiln's preparation 10.3 s with 4 beside, 4.7 s with none, since the set's second compile
  /// waits for the compile beside, which makes the PCH more slowly than a compile without, and CuPy's sets are
  /// mostly a kernel or two.
  static unsigned beside_limit() {
    if (const char* setting = std::getenv("KILN_PCH_BESIDE"); setting != nullptr && setting[0] != '\0') {
      char* end = nullptr;
      const unsigned long n = std::strtoul(setting, &end, 10);
      if (*end == '\0' && setting[0] != '-' && n <= 64) return static_cast<unsigned>(n);
      KILN_LOG(warn, "KILN_PCH_BESIDE='{}' is not a count from 0 to 64: none", setting);
    }
    return 0;
  }

  void grow_heap(std::size_t needed) const {
    const std::unique_lock lock(heap_mutex());
    std::size_t current = 0;
    m_api.nvrtcGetPCHHeapSize(&current);
    if (current >= needed) return;  // another thread grew it meanwhile
    const std::size_t grown = (needed + kHeapStep - 1) / kHeapStep * kHeapStep;
    KILN_LOG(debug, "NVRTC PCH heap: {} MiB -> {} MiB (a precompiled header needs {} bytes)", current >> 20,
             grown >> 20, needed);
    m_api.nvrtcSetPCHHeapSize(grown);
  }

  /// Why compiles do not use PCH, or empty: they do. KILN_PCH=0 turns it off; KILN_PCH_HEAP sets the
  /// PCH heap's first size in bytes (NVRTC's default is 256 MiB; a PCH that does not fit grows it).
  std::string pch_off_reason() {
    const char* setting = std::getenv("KILN_PCH");
    const std::string_view value = setting != nullptr ? setting : "";
    if (value == "0" || value == "off") return "KILN_PCH=" + std::string(value);
    if (!value.empty() && value != "1" && value != "on") {
      KILN_LOG(warn, "KILN_PCH='{}' is not 0 or 1: precompiled headers off", value);
      return fmt::format("KILN_PCH='{}' is not 0 or 1", value);
    }
    if (m_api.nvrtcGetPCHHeapSize == nullptr || m_api.nvrtcSetPCHHeapSize == nullptr ||
        m_api.nvrtcGetPCHCreateStatus == nullptr || m_api.nvrtcGetPCHHeapSizeRequired == nullptr) {
      return "NVRTC " + m_version + " has no precompiled headers (12.8 or later has)";
    }
    if (const char* heap = std::getenv("KILN_PCH_HEAP"); heap != nullptr && heap[0] != '\0') {
      char* end = nullptr;
      const unsigned long long bytes = std::strtoull(heap, &end, 10);
      if (*end != '\0' || bytes == 0 || heap[0] == '-') {
        KILN_LOG(warn, "KILN_PCH_HEAP='{}' is not a byte count: NVRTC's PCH heap keeps its size", heap);
      } else {
        m_api.nvrtcSetPCHHeapSize(static_cast<std::size_t>(bytes));
      }
    }
    return {};
  }

  /// NVRTC's PCH heap is one per process, whichever engine compiles: so is its lock.
  static std::shared_mutex& heap_mutex() {
    static std::shared_mutex mutex;
    return mutex;
  }

  /// NVRTC_ERROR_PCH_CREATE_HEAP_EXHAUSTED (14 in nvrtc.h of CUDA 12.8+; spelled out for older headers).
  static constexpr nvrtcResult kHeapExhausted = static_cast<nvrtcResult>(14);
  static constexpr std::size_t kHeapStep = 64ULL << 20;

  DynamicLibrary m_library;
  NvrtcApi m_api;
  NvrtcCalls m_calls;
  std::string m_version;
  std::string m_identity;
  std::vector<std::string> m_targets;
  std::unique_ptr<pch::Folders> m_pch;
};

}  // namespace

std::vector<std::string> nvrtc_search_list() {
  return nvrtc_candidates(fmt::format("libnvrtc.so.{}", CUDA_VERSION / 1000));
}

std::unique_ptr<Compiler> load_nvrtc() {
  std::vector<std::string> searched;
  DynamicLibrary library = DynamicLibrary::open_first(nvrtc_search_list(), searched);
  if (!library.loaded()) {
    throw DeviceUnavailable(
        fmt::format("no NVRTC found (searched: {}); set CUDA_HOME or KILN_CUDA_PATH", join_searched(searched)));
  }
  NvrtcApi api;
  api.require([&](const char* name) { return library.symbol(name); }, "NVRTC at " + library.path());
  return std::make_unique<Nvrtc>(std::move(library), api);
}

}  // namespace kiln::vendor
