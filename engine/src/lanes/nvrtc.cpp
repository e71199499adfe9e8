// The NVRTC lane: compiles CUDA C++ to a CUBIN for sm_XX targets, and keeps the PTX of the same compile
// beside it (the CUDA driver lane JIT-compiles it for GPUs the CUBIN does not serve); compute_XX
// targets give PTX only; lto_XX targets (-dlto) give LTO-IR only, through the optional
// nvrtcGetLTOIRSize / nvrtcGetLTOIR. libnvrtc is dlopen'ed; its types come from the toolkit's nvrtc.h.
#include <cuda.h>
#include <fmt/format.h>
#include <nvrtc.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <shared_mutex>

#include "kiln/base/log.hpp"
#include "kiln/error.hpp"
#include "lanes/cuda_symbols.hpp"
#include "lanes/dynlib.hpp"
#include "lanes/lane.hpp"
#include "lanes/nvrtc_heap.hpp"
#include "lanes/nvrtc_pch.hpp"
#include "lanes/nvrtc_pch_store.hpp"
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
    std::string off_reason = pch_off_reason();
    // NVRTC loads its builtins library (libnvrtc-builtins.so.<major>.<minor>, beside it in a toolkit) by that
    // name at its first compile. Loaded here, the first compile does not pay for it; the load does, which
    // a process's first request makes on a helper thread while it resolves its includes
    // (Requests::resolve_ahead). NVRTC's own load by name then finds this one. Without it, nothing changes.
    if (const std::filesystem::path dir = std::filesystem::path(m_library.path()).parent_path(); !dir.empty()) {
      std::vector<std::string> searched;
      m_builtins = DynamicLibrary::open_first({(dir / ("libnvrtc-builtins.so." + m_version)).string()}, searched);
    }
    std::string no_shelf;
    std::unique_ptr<pch::Shelf> shelf = off_reason.empty() ? stored_pchs(major, minor, no_shelf) : nullptr;
    m_pch = std::make_unique<pch::Folders>(off_reason, std::move(shelf), std::move(no_shelf));
  }

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
    // With PCH, a source whose includes follow code compiles with its prefix in a header of its own (the
    // same translation unit: nvrtc_pch.hpp); without, as it is.
    const std::unique_ptr<pch::Hoisted> hoisted = m_pch->on() ? pch::Hoisted::make(input) : nullptr;
    const CompileInput& with_pch = hoisted ? hoisted->input() : input;
    std::optional<pch::Plan> plan = m_pch->on() ? m_pch->plan(with_pch, heap_size()) : std::nullopt;
    if (!plan) return compile_once(input, nullptr);
    if (plan->flags.empty()) {
      // A header set whose stored PCH waits for a compile without one: this compile, measured (its record).
      const auto start = std::chrono::steady_clock::now();
      CompileOutput out = compile_once(input, nullptr);
      m_pch->note(*plan, {}, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
      return out;
    }
    try {
      // Compiles share the PCH heap; growing it frees the old one, so it waits for them (and they for it).
      std::shared_lock heap(heap_mutex());
      std::optional<std::size_t> needed;
      CompileOutput out = compile_once(with_pch, &*plan, &needed);
      if (needed) {
        // The PCH did not fit the heap (the compile succeeded without making one, with a warning in its
        // log): grow the heap to what NVRTC asked for and compile again with a new program, once.
        heap.unlock();
        grow_heap(*needed);
        heap.lock();
        needed.reset();
        // A stored PCH's key holds the heap's size: the set's next compile makes it under the new one.
        if (plan->stored || !m_pch->has_room(*plan, heap_size())) return compile_once(input, nullptr);
        out = compile_once(with_pch, &*plan, &needed);
        if (needed) out = compile_once(input, nullptr);  // another compile's PCH took the room: without PCH
      }
      return out;
    } catch (const CompileError& with_error) {
      // A PCH problem (a PCH file damaged or cut short by someone else, a mapping the system refused) must
      // not fail a compile: the same compile without PCH decides. If it succeeds, the failure was the
      // PCH's, and PCH goes off for this process; if it fails too, its error (free of PCH lines) is the
      // request's.
      CompileOutput out = compile_once(input, nullptr);
      m_pch->turn_off(fmt::format("a compile with a precompiled header failed where the same compile without one "
                                  "succeeded ({})",
                                  first_line(with_error.log().empty() ? std::string(with_error.what()) : with_error.log())));
      return out;
    }
  }

  std::string precompiled_headers() const override { return m_pch->describe(m_pch->on() ? heap_size() : 0); }

  std::string pch_outlook(const CompileInput& input) const override {
    if (!m_pch->on()) return m_pch->outlook(input, 0);
    const std::unique_ptr<pch::Hoisted> hoisted = pch::Hoisted::make(input);  // as compile() hands it over
    return m_pch->outlook(hoisted ? hoisted->input() : input, heap_size());
  }

 private:
  /// NVRTC's PCH heap's size now (PCH on only: the call is NVRTC 12.8's).
  std::size_t heap_size() const {
    std::size_t heap = 0;
    m_api.nvrtcGetPCHHeapSize(&heap);
    return heap;
  }

  static std::string first_line(std::string_view text) {
    while (!text.empty() && (text.front() == '\n' || text.front() == ' ')) text.remove_prefix(1);
    return std::string(text.substr(0, std::min(text.find('\n'), std::size_t{300})));
  }

  /// One program, compiled with the request's flags plus `plan`'s. With a plan, `heap_needed` is set
  /// when the PCH did not fit the heap (to the size NVRTC asks for).
  CompileOutput compile_once(const CompileInput& input, const pch::Plan* plan,
                             std::optional<std::size_t>* heap_needed = nullptr) const {
    const auto start = std::chrono::steady_clock::now();
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
      m_pch->note(*plan, notes,
                  std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
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

  void grow_heap(std::size_t needed) const {
    const std::unique_lock lock(heap_mutex());
    std::size_t current = 0;
    m_api.nvrtcGetPCHHeapSize(&current);
    if (current >= needed) return;  // another thread grew it meanwhile
    const std::size_t grown = (needed + pch::kHeapStep - 1) / pch::kHeapStep * pch::kHeapStep;
    KILN_LOG(debug, "NVRTC PCH heap: {} MiB -> {} MiB (a precompiled header needs {} bytes)", current >> 20,
             grown >> 20, needed);
    pch::expect_heap(grown);  // the new heap goes where the old one was (nvrtc_heap.hpp)
    m_api.nvrtcSetPCHHeapSize(grown);
  }

  /// KILN_PCH: 0 (off), private (each process's own), 1 (stored and shared), auto (the default: stored and
  /// shared where it pays, nvrtc_pch_store.hpp).
  static pch::Mode pch_mode() {
    const char* setting = std::getenv("KILN_PCH");
    const std::string_view value = setting != nullptr ? setting : "";
    if (value == "0" || value == "off") return pch::Mode::off;
    if (value == "1" || value == "on") return pch::Mode::on;
    if (value == "private") return pch::Mode::per_process;
    if (!value.empty() && value != "auto") {
      KILN_LOG(warn, "KILN_PCH='{}' is not 0, private, 1 or auto: precompiled headers off", value);
      return pch::Mode::off;
    }
    return pch::Mode::automatic;
  }

  /// The stored PCHs (nvrtc_pch_store.hpp), with NVRTC's PCH heap placed at kiln's address; null (PCHs
  /// private to the process, `why` says why) under KILN_PCH=private or when its mmap import cannot be pointed there.
  std::unique_ptr<pch::Shelf> stored_pchs(int major, int minor, std::string& why) {
    if (pch_mode() == pch::Mode::per_process) {  // nor is NVRTC's heap moved
      why = "KILN_PCH=private (auto, the default, shares them through the cache)";
      return nullptr;
    }
    if (!pch::hook_heap(reinterpret_cast<const void*>(m_api.nvrtcVersion), why)) {
      KILN_LOG(debug, "precompiled headers stay private to each process: {}", why);
      return nullptr;
    }
    pch::expect_heap(heap_size());
    const void* builtins = m_builtins.symbol(fmt::format("__nvrtc_builtins__{}_{}_getArchBuiltins", major, minor).c_str());
    return std::make_unique<pch::Shelf>(pch_mode(),
                                        "nvrtc " + m_version + "; " + pch::library_identity(
                                            reinterpret_cast<const void*>(m_api.nvrtcVersion), builtins));
  }

  /// Why compiles do not use PCH, or empty: they do. KILN_PCH=0 turns it off; KILN_PCH_HEAP sets the
  /// PCH heap's first size in bytes (NVRTC's default is 256 MiB; a PCH that does not fit grows it).
  std::string pch_off_reason() {
    const char* setting = std::getenv("KILN_PCH");
    const std::string_view value = setting != nullptr ? setting : "";
    if (pch_mode() == pch::Mode::off) {
      return value == "0" || value == "off" ? "KILN_PCH=" + std::string(value)
                                            : fmt::format("KILN_PCH='{}' is not 0, private, 1 or auto", value);
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

  DynamicLibrary m_library;
  DynamicLibrary m_builtins;  ///< NVRTC's builtins library, loaded ahead of its first compile (or not found)
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
