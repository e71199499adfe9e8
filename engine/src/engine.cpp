// The request path: request -> key -> memory tier -> disk tier (+ read-through tiers) -> compile
// (single flight in the process, a lease across processes) -> publish -> load -> Kernel.
#include "kiln/engine.hpp"

#include <fmt/format.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <ctime>
#include <stdexcept>

#include "compiler_probe.hpp"
#include "engine_internal.hpp"
#include "kiln/base/hot_path.hpp"
#include "kiln/cache/key.hpp"
#include "kiln/base/log.hpp"
#include "kiln/cache/storage.hpp"
#include "kiln/embedded.hpp"
#include "kiln/error.hpp"
#include "includes.hpp"
#include "kiln/cache/dependencies.hpp"
#include "source_internal.hpp"
#include "symbols_check.hpp"
#include "kiln/tooling/request_log.hpp"
#include "kiln/tooling/targets.hpp"


namespace kiln {
namespace detail {
namespace {

/// Environment variables that silently change HIPRTC's flags: part of every AMD key.
constexpr const char* kHipEnvironment[] = {"HIPRTC_COMPILE_OPTIONS_APPEND", "HIPRTC_LINK_OPTIONS_APPEND",
                                           "GPU_ENABLE_WGP_MODE"};

KILN_HOT std::string join(const std::vector<std::string>& items, char separator) {
  std::string out;
  for (const std::string& item : items) {
    if (!out.empty()) out += separator;
    out += item;
  }
  return out;
}

/// The memory tier's 64-bit key. Cheap (no hashing of source text or options on a hit: both carry
/// their hash); collisions are harmless because every slot keeps and compares its inputs.
KILN_HOT std::uint64_t memory_key(const cache::Hash128& source, const Options& options, std::string_view names,
                                  int device) {
  std::uint64_t h = source.low ^ (source.high * 0x9e3779b97f4a7c15ULL);
  h = (h ^ options.canonical_hash()) * 0xff51afd7ed558ccdULL;
  h = (h ^ fnv1a64(names)) * 0xc4ceb9fe1a85ec53ULL;
  h ^= static_cast<std::uint64_t>(device + 1);
  return h ^ (h >> 29);
}

}  // namespace

/// One vendor's compiler. What a request needs (identity, targets) comes from a probe when one still
/// describes the library on disk; the compiler itself is loaded only to compile (or to report).
struct EngineCore::Lane {
  Vendor vendor;
  std::once_flag probe_once;
  std::mutex facts_mutex;                      // facts are replaced if a loaded compiler disagrees
  std::shared_ptr<const CompilerFacts> facts;  // null: no compiler (see error)
  std::once_flag load_once;
  std::unique_ptr<vendor::Compiler> compiler;
  std::string error;

  [[nodiscard]] std::vector<std::string> search_list() const {
    return vendor == Vendor::cuda ? vendor::nvrtc_search_list() : vendor::hiprtc_search_list();
  }
};

struct EngineCore::Request {
  Request(Source source_in, Target target_in, std::vector<std::string> names_in)
      : source(std::move(source_in)), target(std::move(target_in)), names(std::move(names_in)) {}
  Source source;
  Target target;
  std::vector<std::string> names;  // sorted, unique
  std::vector<std::string> flags;  // complete vendor flags
  std::string compiler;  // the identity the key was made with
  /// Include folders (-I, then the toolkit's) in search order: absolute, normal, checked to be folders.
  std::vector<std::filesystem::path> include_folders;
  /// The compile could open files: include folders are given, or the source or a header names a file by
  /// an absolute path or through a macro (opens_files_by_name). kiln then resolves every include itself
  /// and the key has two levels; otherwise the compiler gets in-memory headers only and can open no file
  /// (make_request's search flags), and the key has one level.
  bool reads_files = false;
  /// With include folders, the request's two-level key (dep_manifest.hpp): `request_key` is every input
  /// but the headers' bytes (the include folders are part of it); it names the dependency manifest.
  cache::CanonicalKey request_key;
  cache::Hash128 request_hash;
  /// The key part naming what the compile reads from the folders (cache::canonical_dependencies): from
  /// the manifest (a hit by stat) or the resolver. Empty while not settled (settle_includes); `key` then
  /// is the request key.
  std::string dependency_part;
  /// The resolver's output (what the compiler gets in memory). Null after a manifest hit: a compile
  /// resolves again first (obtain_uncached).
  std::shared_ptr<const ResolvedIncludes> includes;
  /// Headers a failed compile asked for that the scan could not see (retry_with_missing_header).
  std::vector<std::string> retry_names;
  cache::CanonicalKey key;  ///< the entry's key: with include folders, request_key + the dependencies
  cache::Hash128 hash;
};

struct EngineCore::Flight {
  std::mutex mutex;
  std::condition_variable done_signal;
  bool done = false;
  Obtained result;
  std::exception_ptr error;
};

ProgramState::~ProgramState() { unload(); }

void ProgramState::unload() noexcept {
  if (loaded.exchange(false) && module != nullptr && runtime) runtime->unload_module(device, module);
}

EngineCore::EngineCore(EngineConfig config)
    : m_config(std::move(config)),
      m_storage(m_config.storage_config()),
      m_cuda(std::make_unique<Lane>()),
      m_hip(std::make_unique<Lane>()) {
  m_cuda->vendor = Vendor::cuda;
  m_hip->vendor = Vendor::hip;

  // The runtime that runs kernels: the requested vendor, or (auto) the first with a device.
  std::vector<Vendor> order;
  if (m_config.vendor == Vendor::none) order = {Vendor::cuda, Vendor::hip};
  else order = {m_config.vendor};
  std::vector<std::string> reasons;
  if (!m_config.runtime) {
    order.clear();
    reasons.emplace_back("compile-only engine (EngineConfig::runtime is false)");
  }
  for (Vendor v : order) {
    try {
      std::unique_ptr<vendor::Runtime> runtime = v == Vendor::cuda ? vendor::load_cuda_runtime() : vendor::load_hip_runtime();
      if (!runtime->devices().empty() || m_config.vendor != Vendor::none) {
        m_runtime = std::move(runtime);
        break;
      }
      reasons.push_back(fmt::format("{}: runtime loaded but it reports no device", to_string(v)));
    } catch (const Error& e) {
      // Also for an explicit vendor: an engine without its runtime still compiles for named targets (a
      // build container has the toolkit but no driver); using a device says why there is none.
      reasons.push_back(fmt::format("{}: {}", to_string(v), e.what()));
    }
  }
  if (!m_runtime) {
    m_runtime_error = fmt::format("no GPU: {}", join(reasons, '\n'));
    KILN_LOG(info, "{}; compile-only engine (prewarm with named targets works)", m_runtime_error);
  } else if (m_runtime->devices().empty()) {
    m_runtime_error = fmt::format("the {} runtime reports no device", to_string(m_runtime->vendor()));
  }
  if (m_config.device > 0 && (!m_runtime || m_runtime->devices().empty())) {
    // Device 0 is every engine's default, so it stays a compile-only engine's too; a later ordinal names
    // a device the caller expects to use.
    throw ConfigError(fmt::format("device {} requested (KILN_DEVICE or config) but there is no device ({})",
                                  m_config.device, m_runtime_error));
  }
  if (m_runtime && !m_runtime->devices().empty()) {
    const int count = static_cast<int>(m_runtime->devices().size());
    if (m_config.device >= count) {
      throw ConfigError(fmt::format("device {} requested (KILN_DEVICE or config) but only {} {} device(s) exist",
                                    m_config.device, count, to_string(m_runtime->vendor())));
    }
    m_default_device = std::max(0, m_config.device);
    m_device_count = count;
    // Every request for this engine's devices is keyed with this vendor's compiler identity: look it
    // up once now (a probe file read, no compiler load; nothing when there is no usable probe).
    probe_compiler(m_runtime->vendor() == Vendor::cuda ? *m_cuda : *m_hip);
  }
  if (!m_config.record_path.empty()) m_recorder = std::make_unique<RequestRecorder>(m_config.record_path);
}

EngineCore::~EngineCore() {
  unload_all();
  // Lifetime statistics: a failed write is never an error.
  if (store().mode() == cache::StoreMode::read_write) {
    cache::PersistentStats(store().config().root).add(stats());
  }
}

EngineCore::Lane& EngineCore::loaded_lane(Vendor v) {
  Lane& l = v == Vendor::cuda ? *m_cuda : *m_hip;
  std::call_once(l.load_once, [&] {
    try {
      l.compiler = v == Vendor::cuda ? vendor::load_nvrtc() : vendor::load_hiprtc();
    } catch (const Error& e) {
      l.error = e.what();
      return;
    }
    auto loaded = std::make_shared<const CompilerFacts>(CompilerFacts{l.compiler->identity(), l.compiler->supported_targets()});
    std::shared_ptr<const CompilerFacts> probed;
    {
      const std::lock_guard lock(l.facts_mutex);
      probed = l.facts;
      l.facts = loaded;
    }
    if (probed && probed->identity != loaded->identity) {
      KILN_LOG(warn, "the compiler probe said '{}' but the loaded compiler is '{}'; probe rewritten", probed->identity,
               loaded->identity);
    }
    if (!probed || probed->identity != loaded->identity || probed->targets != loaded->targets) {
      (void)remember_compiler_probe(store(), v, l.search_list(), *l.compiler, *loaded);
    }
  });
  return l;
}

void EngineCore::probe_compiler(Lane& l) {
  std::call_once(l.probe_once, [&] {
    if (std::optional<CompilerFacts> probed = find_compiler_probe(store(), l.vendor, l.search_list())) {
      const std::lock_guard lock(l.facts_mutex);
      if (!l.facts) l.facts = std::make_shared<const CompilerFacts>(std::move(*probed));
    }
  });
}

std::shared_ptr<const CompilerFacts> EngineCore::compiler_facts(Vendor v) {
  Lane& l = v == Vendor::cuda ? *m_cuda : *m_hip;
  probe_compiler(l);
  {
    const std::lock_guard lock(l.facts_mutex);
    if (l.facts) return l.facts;
  }
  (void)loaded_lane(v);  // no usable probe: load the compiler, which sets the facts (or the error)
  const std::lock_guard lock(l.facts_mutex);
  if (!l.facts) throw DeviceUnavailable(l.error);
  return l.facts;
}

vendor::Compiler& EngineCore::compiler(Vendor v) {
  Lane& l = loaded_lane(v);
  if (!l.compiler) throw DeviceUnavailable(l.error);
  return *l.compiler;
}

KILN_HOT vendor::Runtime& EngineCore::runtime() {
  if (!m_runtime || m_runtime->devices().empty()) throw DeviceUnavailable(m_runtime_error);
  return *m_runtime;
}

int EngineCore::resolve_device_slow(int device) {
  vendor::Runtime& r = runtime();
  if (device < 0) return m_default_device;
  if (static_cast<std::size_t>(device) >= r.devices().size()) {
    throw ConfigError(fmt::format("device {} does not exist ({} {} device(s))", device, r.devices().size(),
                                  to_string(r.vendor())));
  }
  return device;
}

std::vector<DeviceInfo> EngineCore::devices() const { return m_runtime ? m_runtime->devices() : std::vector<DeviceInfo>{}; }

std::vector<std::string> EngineCore::default_targets() const {
  std::vector<std::string> targets;
  for (const DeviceInfo& d : devices()) {
    if (std::find(targets.begin(), targets.end(), d.target) == targets.end()) targets.push_back(d.target);
  }
  if (targets.empty()) targets = {"sm_90", "gfx90a"};
  return targets;
}

std::vector<LaneInfo> EngineCore::lanes() {
  std::vector<LaneInfo> out;
  for (Vendor v : {Vendor::cuda, Vendor::hip}) {
    LaneInfo info;
    info.vendor = v;
    info.compiled_in = v == Vendor::cuda ? KILN_HAVE_CUDA : KILN_HAVE_HIP;
    Lane& l = loaded_lane(v);
    info.compiler_loaded = l.compiler != nullptr;
    if (l.compiler) {
      for (LibraryInfo& lib : l.compiler->libraries()) info.libraries.push_back(std::move(lib));
    }
    std::vector<std::string> problems;
    if (!l.compiler) problems.push_back(l.error);
    if (m_runtime && m_runtime->vendor() == v) {
      info.runtime_loaded = true;
      for (LibraryInfo& lib : m_runtime->libraries()) info.libraries.push_back(std::move(lib));
      info.devices = m_runtime->devices();
    } else if (info.compiled_in) {
      // Not the engine's runtime: probe it for the report only.
      try {
        std::unique_ptr<vendor::Runtime> probe = v == Vendor::cuda ? vendor::load_cuda_runtime() : vendor::load_hip_runtime();
        info.runtime_loaded = true;
        for (LibraryInfo& lib : probe->libraries()) info.libraries.push_back(std::move(lib));
        info.devices = probe->devices();
      } catch (const Error& e) {
        problems.push_back(e.what());
      }
    }
    if (!info.compiled_in) {
      info.status = v == Vendor::cuda ? "CUDA lane " KILN_CUDA_STATUS : "HIP lane " KILN_HIP_STATUS;
    } else if (problems.empty()) {
      info.status = fmt::format("on: compiler and runtime loaded, {} device(s)", info.devices.size());
    } else if (info.compiler_loaded) {
      info.status = fmt::format("compile-only (no runtime: {})", join(problems, ';'));
    } else {
      info.status = fmt::format("off: {}", join(problems, ';'));
    }
    out.push_back(std::move(info));
  }
  return out;
}

KILN_HOT EngineCore::Request EngineCore::make_request(const Source& source, const Options& options,
                                                      const std::vector<std::string>& names,
                                                      std::string_view target_text, std::optional<int> warp_size) {
  Request r(source, parse_target(target_text), names);
  r.flags = options.vendor_flags(r.target.vendor);  // option errors first: they need no compiler
  std::shared_ptr<const CompilerFacts> facts = compiler_facts(r.target.vendor);
  if (std::find(facts->targets.begin(), facts->targets.end(), r.target.base) == facts->targets.end()) {
    // Refusing a request is only done on the loaded compiler's word, never on a probe's alone.
    if (loaded_lane(r.target.vendor).compiler) facts = compiler_facts(r.target.vendor);
    validate_target(r.target, facts->targets, facts->identity);
  }
  if (warp_size) r.target.warp_size = *warp_size;

  for (const std::string& name : r.names) {
    if (name.empty()) throw ConfigError(fmt::format("source '{}': empty kernel name", source.name()));
  }
  std::sort(r.names.begin(), r.names.end());
  r.names.erase(std::unique(r.names.begin(), r.names.end()), r.names.end());

  // The compiler searches no folder of its own: every file it may open is one kiln resolved and keyed.
  // NVRTC looks up a quoted include next to its includer, which for the source (and an in-memory header)
  // means the process's working directory: --no-source-include turns that off. HIPRTC (clang) searches
  // the system folders (/usr/include, ...) for an <include>: -nostdlibinc turns that off and keeps
  // clang's own builtin headers, which belong to the compiler the key names.
  if (r.target.vendor == Vendor::cuda) {
    r.flags.push_back("-arch=" + r.target.full);
    r.flags.emplace_back("-default-device");
    r.flags.emplace_back("--no-source-include");
  } else {
    r.flags.push_back("--offload-arch=" + r.target.full);
    r.flags.emplace_back("-nostdlibinc");
    for (const Header& h : r.source.user_headers()) {
      if (h.name.starts_with('/')) {
        throw ConfigError(fmt::format(
            "source '{}': the in-memory header '{}' has an absolute name, and HIPRTC opens an #include of an absolute "
            "path from the disk instead of the header handed to it; give the header a relative name",
            source.name(), h.name));
      }
    }
  }
  r.flags.push_back("-DKILN_WARP_SIZE=" + std::to_string(r.target.warp_size));
  if (!options.include_dirs().empty() || options.toolkit_includes()) {
    // kiln resolves the includes itself (includes.hpp); which files that reads is settled later
    // (settle_includes), from the dependency manifest when it still matches.
    std::vector<std::filesystem::path> folders(options.include_dirs().begin(), options.include_dirs().end());
    if (options.toolkit_includes()) {
      for (std::filesystem::path& folder : toolkit_include_dirs(compiler_library(r.target.vendor))) {
        folders.push_back(std::move(folder));
      }
    }
    r.include_folders = checked_include_folders(folders, &m_storage.manifests());
    r.reads_files = true;
  } else {
    // An absolute #include is opened by the compiler whatever its search flags; a computed one may be.
    r.reads_files = opens_files_by_name(r.source.text()) ||
                    std::any_of(r.source.user_headers().begin(), r.source.user_headers().end(),
                                [](const Header& h) { return opens_files_by_name(h.text); }) ||
                    (!r.source.embedded_headers_intact() &&
                     std::any_of(r.source.headers().begin(), r.source.headers().end(),
                                 [](const Header& h) { return opens_files_by_name(h.text); }));
  }
  make_key(r, facts->identity);
  return r;
}

void EngineCore::settle_includes(Request& r, bool use_manifest) {
  if (!r.reads_files) return;
  if (use_manifest) {
    // The first level: the manifest of the request key names the entry's key when every recorded header
    // still has its stat (or its digest) and every path probed empty is still empty. No header is read.
    std::string dependency_part;
    cache::LookupStats looked;
    const auto started = std::chrono::steady_clock::now();
    const std::optional<cache::Hash128> result =
        m_storage.manifests().lookup(r.request_hash, r.request_key.bytes(), &looked, &dependency_part);
    KILN_LOG(debug,
             "{}: dependency manifest {}: {} in {:.3f} ms (read {} of {} bytes {:.3f}, parse {:.3f}, check {:.3f} ms, of "
             "which {:.3f} ms settling paths on {} thread(s): {} stat, {} absent under an absent folder, {} from the stat "
             "memo, {} header(s) re-read{})",
             r.source.name(), r.request_hash.hex(), cache::to_string(looked.outcome),
             std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count(),
             looked.bytes_read, looked.manifest_bytes, looked.read_ns / 1e6, looked.parse_ns / 1e6, looked.check_ns / 1e6,
             looked.settle_ns / 1e6, looked.settle_threads, looked.stats, looked.inferred_absent, looked.memo_hits, looked.reads, looked.validated_hits != 0 ? "; a set checked moments ago" : "");
    if (result) {
      r.dependency_part = std::move(dependency_part);
      r.includes.reset();
      key_with_dependencies(r);
      if (r.hash == *result) {
        m_counters.manifest_hits.fetch_add(1, std::memory_order_relaxed);
        return;
      }
      // A manifest whose result does not hash back to itself (not ours, or another format): resolve.
      KILN_LOG(info, "dependency manifest of {} names {} but its headers give {}; resolving the includes",
               r.request_hash.hex(), result->hex(), r.hash.hex());
    }
  }
  IncludeInput input;
  input.source_name = r.source.name();
  input.source_text = r.source.text();
  input.memory_headers = r.source.headers();
  input.vendor = r.target.vendor;
  input.folders = r.include_folders;
  input.retry_names = r.retry_names;
  input.file_cache = &m_header_files;
  input.stat_memo = &m_storage.manifests();
  const auto started = std::chrono::steady_clock::now();
  const std::uint64_t cached_before = log::enabled(log::Level::debug) ? m_header_files.usage().hits : 0;
  auto resolved = std::make_shared<const ResolvedIncludes>(resolve_includes(input));
  m_counters.include_resolves.fetch_add(1, std::memory_order_relaxed);
  KILN_LOG(debug, "{}: resolved the includes in {:.3f} ms: {} header(s) ({} unchanged since an earlier resolve), {} "
           "path(s) probed absent; {} stat, {} from the stat memo, {} file(s) read; {} byte(s) handed to the compiler",
           r.source.name(), std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count(),
           resolved->dependencies.headers.size(), m_header_files.usage().hits - cached_before,
           resolved->dependencies.absent.size(), resolved->work.stats, resolved->work.memo_hits, resolved->work.reads, [&] {
             std::size_t bytes = resolved->compiler_source.size();
             for (const CompilerHeader& h : resolved->compiler_headers) bytes += h.text.size();
             return bytes;
           }());
  r.dependency_part = cache::canonical_dependencies(resolved->dependencies);
  r.includes = std::move(resolved);
  key_with_dependencies(r);
}

std::optional<EngineCore::Request> EngineCore::retry_with_missing_header(const Request& r, const CompileError& error) {
  if (!r.includes) return std::nullopt;
  const std::optional<std::string> missing = missing_include_from_log(error.log());
  if (!missing || r.retry_names.size() >= kMaxIncludeRetries ||
      std::find(r.retry_names.begin(), r.retry_names.end(), *missing) != r.retry_names.end()) {
    return std::nullopt;
  }
  Request retried = r;
  retried.retry_names.push_back(*missing);
  settle_includes(retried, /*use_manifest=*/false);
  if (retried.includes->dependencies.headers.size() <= r.includes->dependencies.headers.size()) {
    return std::nullopt;  // no folder has it (only new absent probes): the error stands
  }
  KILN_LOG(debug, "{}: the compiler asked for '{}', which the include scan could not see; compiling again with it",
           r.source.name(), *missing);
  return retried;
}

void EngineCore::note_dependencies(const Request& r) noexcept {
  // Only what the resolver read is recorded: a manifest hit is already recorded (and refreshed).
  if (r.includes) m_storage.manifests().record(r.request_hash, r.request_key.bytes(), r.includes->dependencies, r.hash);
}

KILN_HOT void EngineCore::make_key(Request& r, const std::string& compiler_identity) {
  // The canonical key: every input that can change the binary, in one fixed order.
  r.compiler = compiler_identity;
  r.key = cache::CanonicalKey();
  r.key.add("format", std::to_string(cache::kEntryFormatVersion));
  r.key.add("vendor", to_string(r.target.vendor));
  r.key.add("compiler", r.compiler);
  r.key.add("target", r.target.full);
  r.key.add("options", join(r.flags, '\n'));
  if (r.target.vendor == Vendor::hip) {
    std::string environment;
    for (const char* variable : kHipEnvironment) {
      const char* value = std::getenv(variable);
      environment += fmt::format("{}={}\n", variable, value != nullptr ? value : "");
    }
    r.key.add("env", environment);
  }
  r.key.add("names", join(r.names, '\n'));
  r.key.add("source-name", r.source.name());  // the compiler's file name: __FILE__ carries it into the binary
  r.key.add("source", r.source.text());
  if (r.source.embedded_headers_intact()) {
    // kiln's own headers as built: named by their digest (see source_internal.hpp), not their text.
    for (const Header& h : r.source.user_headers()) r.key.add("header:" + h.name, h.text);
    r.key.add("embedded-headers", embedded_headers_digest());
  } else {
    for (const Header& h : r.source.headers()) r.key.add("header:" + h.name, h.text);
  }
  if (r.reads_files) {
    // The two-level key: the request key holds the folders searched (absolute: the same relative -I in
    // another directory is another request); the entry's key adds what was read there, by path and
    // digest, and every place probed and found empty before a match.
    std::string folders;
    for (const std::filesystem::path& folder : r.include_folders) folders += folder.string() + '\n';
    r.key.add("include-folders", folders);
    r.request_key = r.key;
    r.request_hash = r.key.hash();
    if (!r.dependency_part.empty()) r.key.add("dependencies", r.dependency_part);
  }
  seal_key(r);
}

void EngineCore::key_with_dependencies(Request& r) {
  // What make_key gives for the settled part, without building the request key's parts again.
  r.key = r.request_key;
  r.key.add("dependencies", r.dependency_part);
  seal_key(r);
}

KILN_HOT void EngineCore::seal_key(Request& r) {
  try {
    cache::check_canonical_key(r.key.bytes());  // the readers' limit: refuse before compiling what no one could read
  } catch (const std::length_error& e) {
    throw ConfigError(fmt::format("source '{}' for {}: {}", r.source.name(), r.target.full, e.what()));
  }
  r.hash = r.key.hash();
}

std::filesystem::path EngineCore::compiler_library(Vendor v) {
  // The file the compiler is (or would be) loaded from: the first existing full path of its search
  // list (a stat, no load), else the loaded library itself.
  Lane& l = v == Vendor::cuda ? *m_cuda : *m_hip;
  for (const std::string& candidate : l.search_list()) {
    std::error_code ec;
    if (candidate.find('/') != std::string::npos && std::filesystem::is_regular_file(candidate, ec)) {
      return std::filesystem::weakly_canonical(candidate, ec);
    }
  }
  Lane& loaded = loaded_lane(v);
  if (loaded.compiler) {
    for (const LibraryInfo& library : loaded.compiler->libraries()) {
      if (library.role == "nvrtc" || library.role == "hiprtc") {
        std::error_code ec;
        return std::filesystem::weakly_canonical(library.path, ec);
      }
    }
  }
  throw ConfigError(fmt::format("--toolkit-includes: no {} compiler library was found to take the toolkit's headers from",
                                to_string(v)));
}

std::shared_ptr<const cache::Entry> EngineCore::compile(const Request& r, const vendor::Compiler& compiler,
                                                        std::string& log) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<vendor::HeaderText> headers;
  if (r.includes) {
    headers.reserve(r.includes->compiler_headers.size());
    for (const CompilerHeader& h : r.includes->compiler_headers) headers.push_back({h.name.c_str(), h.storage->c_str()});
  } else {
    headers = vendor::header_texts(r.source.headers());
  }
  vendor::CompileInput input{r.source.name(), r.includes ? std::string_view(r.includes->compiler_source) : r.source.text(),
                             headers, r.names, r.flags, r.target.full};
  vendor::CompileOutput output;
  try {
    output = compiler.compile(input);
  } catch (const CompileError& e) {
    m_counters.add({.compile_failures = 1});
    const std::optional<std::string> missing = missing_include_from_log(e.log());
    if (!missing) throw;
    // A header kiln could not resolve (not in memory, not in any folder, or named by a computed
    // include the scan could not follow): say where kiln looked.
    throw CompileError(fmt::format("{}; {}", e.what(), describe_missing_include(*missing, r.include_folders)), e.log(),
                       e.source_name(), e.options());
  } catch (...) {
    m_counters.add({.compile_failures = 1});
    throw;
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;
  m_counters.add({.compiles = 1,
                  .compile_nanoseconds = static_cast<std::uint64_t>(
                      std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count())});
  KILN_LOG(debug, "compiled {} for {} in {:.1f} ms ({} bytes, key {})", r.source.name(), r.target.full,
           std::chrono::duration<double, std::milli>(elapsed).count(), output.binary.size(), r.hash.hex());
  if (!output.log.empty()) KILN_LOG(debug, "compiler log for {}:\n{}", r.source.name(), output.log);

  auto entry = std::make_shared<cache::Entry>();
  entry->vendor = r.target.vendor;
  entry->payload_kind = output.kind;
  entry->target = r.target.full;
  entry->compiler = compiler.identity();
  entry->created_unix = static_cast<std::int64_t>(std::time(nullptr));
  entry->key_hash = r.hash;
  entry->canonical_key = r.key.bytes();
  entry->names = std::move(output.lowered);
  entry->payload = std::move(output.binary);
  entry->aux = std::move(output.ptx);
  log = std::move(output.log);
  return entry;
}

Obtained EngineCore::obtain_uncached(const Request& r, bool bypass_cache) {
  const auto start = std::chrono::steady_clock::now();
  const auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };

  // Local disk again, the tiers, then the compile lease (waiting for another process's compile).
  std::variant<cache::Found, cache::Reservation> looked_up =
      m_storage.get_or_reserve(r.hash, r.key.bytes(), bypass_cache);
  const double looked = seconds();  // mostly a wait for another process's compile, when there was one
  if (auto* found = std::get_if<cache::Found>(&looked_up)) {
    note_dependencies(r);
    // Every tier's hit is `disk` here; `tier` keeps which one (Engine::compile reports it).
    return {std::move(found->entry), Origin::disk, looked, 0, found->stored, found->origin, {}};
  }
  // Destroyed without put() (the compiler cannot be loaded, the compile throws, the request is re-keyed),
  // the reservation tells every tier the compile will not come and releases the lease.
  cache::Reservation reservation = std::move(std::get<cache::Reservation>(looked_up));

  // A miss: now the compiler is needed (loaded once per process). Its identity is normally the one the
  // key was made with (from the probe); if a stale or planted probe said otherwise, the request is
  // keyed again with the real identity, so an entry is only ever stored under its compiler's key.
  vendor::Compiler& compiler_ref = compiler(r.target.vendor);
  if (compiler_ref.identity() != r.compiler) {
    reservation.abandon();
    Request rekeyed = r;
    make_key(rekeyed, compiler_ref.identity());
    return obtain_uncached(rekeyed, bypass_cache);
  }
  const Request* work = &r;
  std::optional<Request> resolved;
  if (r.reads_files && !r.includes) {
    // The key came from the manifest, but a compile needs the headers' bytes: resolve them now. What is
    // compiled is what is read now, so when the tree changed since the manifest was checked, the
    // request is keyed by what was read (never a binary under another tree's key).
    resolved.emplace(r);
    settle_includes(*resolved, /*use_manifest=*/false);
    if (resolved->hash != r.hash) {
      reservation.abandon();
      return obtain_uncached(*resolved, bypass_cache);
    }
    work = &*resolved;
  }
  std::string log;
  std::shared_ptr<const cache::Entry> entry;
  try {
    entry = compile(*work, compiler_ref, log);
  } catch (const CompileError& error) {
    // A header the scan could not see (an include through a function-like macro) that the compiler
    // asked for: resolve it by that name and compile once more, under the key that now names it.
    std::optional<Request> retried = retry_with_missing_header(*work, error);
    if (!retried) throw;
    reservation.abandon();
    return obtain_uncached(*retried, bypass_cache);
  }
  const auto storing = std::chrono::steady_clock::now();
  const bool stored = reservation.put(*entry);
  note_dependencies(*work);
  KILN_LOG(debug, "{}: stored the entry and its dependency manifest in {:.3f} ms", work->source.name(),
           std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - storing).count());
  return {entry, Origin::compiled, seconds(), looked, stored, cache::HitOrigin::local, std::move(log)};
}

KILN_HOT Obtained EngineCore::obtain(const Request& r, bool bypass_cache) {
  // A local disk hit needs no coordination: threads that read one entry at once each read it (and
  // each loads its own module anyway). Only what is not on disk goes through single flight, where
  // one thread per key asks the other tiers or compiles.
  if (!bypass_cache) {
    const auto start = std::chrono::steady_clock::now();
    if (auto entry = m_storage.get_local(r.hash, r.key.bytes())) {
      note_dependencies(r);
      const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      KILN_LOG(debug, "{}: disk hit {} in {:.3f} ms", r.source.name(), r.hash.hex(), elapsed * 1e3);
      return {entry, Origin::disk, elapsed, 0, false, cache::HitOrigin::local, {}};
    }
  }
  // Single flight: the first thread for a key does the work; the others wait for its result.
  std::shared_ptr<Flight> flight;
  bool leader = false;
  {
    const std::lock_guard lock(m_flights_mutex);
    auto [it, inserted] = m_flights.try_emplace(r.hash);
    if (inserted) it->second = std::make_shared<Flight>();
    flight = it->second;
    leader = inserted;
  }
  if (!leader) {
    std::unique_lock lock(flight->mutex);
    flight->done_signal.wait(lock, [&] { return flight->done; });
    if (flight->error) std::rethrow_exception(flight->error);
    Obtained shared = flight->result;
    if (shared.origin == Origin::compiled) {
      shared.origin = Origin::memory;  // this thread compiled nothing
      shared.log.clear();              // the compile's log belongs to the thread that compiled
    }
    return shared;
  }
  Obtained result;
  std::exception_ptr error;
  try {
    result = obtain_uncached(r, bypass_cache);
  } catch (...) {
    error = std::current_exception();
  }
  {
    const std::lock_guard lock(m_flights_mutex);
    m_flights.erase(r.hash);
  }
  {
    const std::lock_guard lock(flight->mutex);
    flight->result = result;
    flight->error = error;
    flight->done = true;
  }
  flight->done_signal.notify_all();
  if (error) std::rethrow_exception(error);
  return result;
}

KILN_HOT std::shared_ptr<ProgramState> EngineCore::load(const Request& r, Obtained obtained, int device) {
  vendor::Runtime& rt = runtime();
  auto state = std::make_shared<ProgramState>();
  state->runtime = m_runtime;
  state->device = device;
  state->origin = obtained.origin;
  try {
    state->module = rt.load_module(device, *obtained.entry);
  } catch (const LoadError& first) {
    if (obtained.origin == Origin::compiled) throw;
    // A cached binary the driver refuses (e.g. a CUBIN for another arch under this key): remove it and
    // recompile; never fail a request a compile can serve.
    KILN_LOG(warn, "{}; removing the cache entry and recompiling", first.what());
    m_storage.discard(r.hash);
    obtained = obtain(r, /*bypass_cache=*/true);
    state->origin = obtained.origin;
    state->module = rt.load_module(device, *obtained.entry);
  }
  state->entry = obtained.entry;
  return state;
}

KILN_HOT Program EngineCore::program(const Source& source, const Options& options,
                                     const std::vector<std::string>& names, int device, bool prefetched) {
  device = resolve_device(device);
  const std::string joined = join(names, '\n');
  const std::uint64_t key = memory_key(source.content_hash(), options, joined, device);
  {
    const std::shared_lock lock(m_memory_mutex);
    auto it = m_programs.find(key);
    if (it != m_programs.end() && it->second.source == source.content_hash() && it->second.device == device &&
        it->second.names == joined && it->second.options == options.canonical() && it->second.program->loaded) {
      m_counters.memory_hits.fetch_add(1, std::memory_order_relaxed);
      return Program(it->second.program);
    }
  }
  if (!prefetched) prefetch_hot_path();  // not in memory: the rest of the request path runs (hot_path.hpp)
  const DeviceInfo& info = m_runtime->devices()[static_cast<std::size_t>(device)];
  Request r = make_request(source, options, names, info.target, info.warp_size);
  settle_includes(r, /*use_manifest=*/true);
  record(source, options, r.names, info.target);
  std::shared_ptr<ProgramState> state = load(r, obtain(r, false), device);
  {
    const std::unique_lock lock(m_memory_mutex);
    auto [it, inserted] = m_programs.try_emplace(key, ProgramSlot{source.content_hash(), options.canonical(), joined, device, state});
    if (!inserted) {
      if (it->second.program->loaded && it->second.source == source.content_hash() && it->second.names == joined &&
          it->second.options == options.canonical() && it->second.device == device) {
        return Program(it->second.program);  // another thread loaded it first; ours unloads on release
      }
      it->second = ProgramSlot{source.content_hash(), options.canonical(), joined, device, state};
    }
  }
  return Program(state);
}

KILN_HOT Kernel EngineCore::kernel(const Source& source, std::string_view name, const Options& options, int device) {
  device = resolve_device(device);
  const std::uint64_t key = memory_key(source.content_hash(), options, name, device) ^ 0x6b65726e656cULL;
  {
    const std::shared_lock lock(m_memory_mutex);
    auto it = m_kernels.find(key);
    if (it != m_kernels.end()) {
      const KernelSlot& slot = it->second;
      if (slot.source == source.content_hash() && slot.device == device && slot.name == name &&
          slot.options == options.canonical() && slot.kernel.m_state->program->loaded.load(std::memory_order_relaxed)) {
        m_counters.memory_hits.fetch_add(1, std::memory_order_relaxed);
        return slot.kernel;
      }
    }
  }
  prefetch_hot_path();  // not in memory: the rest of the request path runs (hot_path.hpp)
  std::vector<std::string> names;
  if (kiln::is_name_expression(name)) names.emplace_back(name);
  Kernel k = program(source, options, names, device, /*prefetched=*/true).kernel(name);
  const std::unique_lock lock(m_memory_mutex);
  m_kernels.insert_or_assign(key, KernelSlot{source.content_hash(), options.canonical(), std::string(name), device, k});
  return k;
}

std::pair<std::string, std::optional<int>> EngineCore::resolve_target(std::string_view target) {
  if (target != "native") return {std::string(target), std::nullopt};
  const DeviceInfo& info = runtime().devices()[static_cast<std::size_t>(m_default_device)];
  return {info.target, info.warp_size};  // the device's own warp size, not the target's default
}

PrewarmResult EngineCore::prewarm(const Source& source, const Options& options, const std::vector<std::string>& names,
                                  std::string_view target, const std::vector<std::string>& kernels) {
  const auto [resolved, warp_size] = resolve_target(target);
  Request r = make_request(source, options, names, resolved, warp_size);
  settle_includes(r, /*use_manifest=*/true);
  record(source, options, r.names, resolved);
  Obtained obtained = obtain(r, false);
  // A kernel the binary lacks is the request's mistake, not the binary's: the entry stays cached.
  check_kernels_defined(*obtained.entry, source.name(), r.names, kernels);
  PrewarmResult result;
  result.key = obtained.entry->key_hash;  // the request's key, or the key it was re-keyed to (a retry)
  result.target = r.target.full;
  result.origin = obtained.origin;
  result.seconds = obtained.seconds - obtained.waited;
  result.wait_seconds = obtained.waited;
  result.binary_bytes = obtained.entry->payload.size();
  result.stored = obtained.stored || obtained.origin == Origin::disk;
  return result;
}

CompiledBinary EngineCore::compile(const Source& source, const Options& options, const std::vector<std::string>& names,
                                   std::string_view target) {
  const auto start = std::chrono::steady_clock::now();
  const auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  const std::string joined = join(names, '\n');
  const std::uint64_t key =
      memory_key(source.content_hash(), options, joined, 0) ^ (fnv1a64(target) * 0x94d049bb133111ebULL);
  const auto same_request = [&](const BinarySlot& slot) {
    return slot.source == source.content_hash() && slot.target == target && slot.names == joined &&
           slot.options == options.canonical();
  };
  std::shared_ptr<const BinaryState> remembered;
  {
    const std::lock_guard lock(m_binaries_mutex);
    auto it = m_binaries.find(key);
    if (it != m_binaries.end() && same_request(it->second)) remembered = it->second.binary;
  }
  if (remembered) {
    m_counters.memory_hits.fetch_add(1, std::memory_order_relaxed);
    auto hit = std::make_shared<BinaryState>(*remembered);
    hit->origin = Origin::memory;
    hit->log.clear();
    hit->seconds = seconds();
    return CompiledBinary(std::move(hit));
  }

  const auto [resolved, warp_size] = resolve_target(target);
  Request r = make_request(source, options, names, resolved, warp_size);
  const double requested = seconds();
  settle_includes(r, /*use_manifest=*/true);
  const double settled = seconds();
  record(source, options, r.names, resolved);
  Obtained obtained = obtain(r, false);
  KILN_LOG(debug, "{}: binary {} ({}) in {:.3f} ms: request {:.3f}, includes {:.3f}, cache or compile {:.3f} ms",
           source.name(), r.hash.hex(), obtained.origin == Origin::compiled ? "compiled" : "cached", seconds() * 1e3,
           requested * 1e3,
           (settled - requested) * 1e3, (seconds() - settled) * 1e3);
  auto state = std::make_shared<BinaryState>();
  state->entry = obtained.entry;
  for (const cache::LoweredName& n : obtained.entry->names) state->names.emplace_back(n.expression, n.lowered);
  std::sort(state->names.begin(), state->names.end());
  state->origin = obtained.origin;
  if (obtained.origin == Origin::disk && obtained.tier == cache::HitOrigin::pack) state->origin = Origin::pack;
  if (obtained.origin == Origin::disk && obtained.tier == cache::HitOrigin::remote) state->origin = Origin::remote;
  state->log = std::move(obtained.log);
  state->seconds = seconds();
  {
    const std::lock_guard lock(m_binaries_mutex);
    if (m_binaries.size() >= kBinarySlots && m_binaries.find(key) == m_binaries.end()) {
      m_binaries.erase(std::min_element(m_binaries.begin(), m_binaries.end(), [](const auto& a, const auto& b) {
        return a.second.sequence < b.second.sequence;
      }));
    }
    m_binaries.insert_or_assign(key, BinarySlot{source.content_hash(), options.canonical(), joined, std::string(target),
                                                m_binary_sequence++, state});
  }
  return CompiledBinary(std::move(state));
}

std::pair<cache::Hash128, std::string> EngineCore::describe_key(const Source& source, const Options& options,
                                                                const std::vector<std::string>& names,
                                                                std::string_view target,
                                                                cache::DependencySet* dependencies) {
  const auto [resolved, warp_size] = resolve_target(target);
  Request r = make_request(source, options, names, resolved, warp_size);
  // The key of the headers as they are now: from the manifest when it still matches them by stat (as a
  // request would find it), else by resolving. Callers ask this for every request they plan or check.
  settle_includes(r, /*use_manifest=*/true);
  if (dependencies != nullptr) {
    *dependencies = cache::DependencySet();
    if (r.includes) {
      *dependencies = r.includes->dependencies;
    } else if (r.reads_files) {
      std::optional<cache::DependencySet> recorded =
          m_storage.manifests().recorded(r.request_hash, r.request_key.bytes(), r.hash);
      if (!recorded) {  // the manifest changed since it matched: resolve
        settle_includes(r, /*use_manifest=*/false);
        recorded = r.includes->dependencies;
      }
      *dependencies = std::move(*recorded);
    }
  }
  return {r.hash, r.key.bytes()};
}

KILN_HOT void EngineCore::record(const Source& source, const Options& options, const std::vector<std::string>& names,
                                 const std::string& target) {
  if (!m_recorder) return;
  RecordedRequest record;
  record.source_name = source.name();
  record.builtin = source.is_builtin();
  record.source_hash = source.content_hash().hex();
  if (!source.is_builtin()) {
    record.source_text = std::string(source.text());
    // Only the user's headers: kiln's own embedded headers are found again by name at replay.
    record.headers.assign(source.user_headers().begin(), source.user_headers().end());
  }
  record.name_expressions = names;
  record.options = options.portable();
  for (std::string& option : record.options) {
    // Include folders as absolute paths: a replay runs from another directory (and the key holds them so).
    for (const std::string_view prefix : {std::string_view("-I"), std::string_view("--include-path=")}) {
      if (!option.starts_with(prefix)) continue;
      const std::filesystem::path folder(option.substr(prefix.size()));
      if (folder.is_relative()) {
        std::error_code ec;
        const std::filesystem::path absolute = std::filesystem::absolute(folder, ec);
        if (!ec) option = std::string(prefix) + absolute.lexically_normal().string();
      }
      break;
    }
  }
  record.target = target;
  m_recorder->record(record);
}

cache::Counters EngineCore::stats() const noexcept {
  cache::Counters counters = m_counters.snapshot();
  counters += m_storage.counters();
  return counters;
}

void EngineCore::unload_all() noexcept {
  std::unordered_map<std::uint64_t, ProgramSlot> programs;
  std::unordered_map<std::uint64_t, KernelSlot> kernels;
  {
    const std::unique_lock lock(m_memory_mutex);
    programs.swap(m_programs);
    kernels.swap(m_kernels);
  }
  for (auto& [key, slot] : programs) slot.program->unload();
  for (auto& [key, slot] : kernels) slot.kernel.m_state->program->unload();
}

}  // namespace detail

// ---- public handles -----------------------------------------------------------------------------------

KILN_HOT bool is_name_expression(std::string_view name) noexcept {
  return name.find_first_of("<>:&( ") != std::string_view::npos;
}

Engine::Engine() : Engine(EngineConfig::from_environment()) {}
Engine::Engine(EngineConfig config) : m_core(std::make_shared<detail::EngineCore>(std::move(config))) {}
Engine::~Engine() = default;

Program Engine::program(const Source& source, const Options& options, const std::vector<std::string>& names, int device) {
  return m_core->program(source, options, names, device);
}
KILN_HOT Kernel Engine::kernel(const Source& source, std::string_view name, const Options& options, int device) {
  return m_core->kernel(source, name, options, device);
}
KILN_HOT Kernel Engine::kernel(const Source& source, std::string_view name) {
  static const Options defaults;  // a hit then constructs nothing
  return m_core->kernel(source, name, defaults, -1);
}
PrewarmResult Engine::prewarm(const Source& source, const Options& options, const std::vector<std::string>& names,
                              std::string_view target) {
  return m_core->prewarm(source, options, names, target);
}
CompiledBinary Engine::compile(const Source& source, const Options& options, const std::vector<std::string>& names,
                               std::string_view target) {
  return m_core->compile(source, options, names, target);
}
PrewarmResult Engine::prewarm(const Source& source, const Options& options, const std::vector<std::string>& names,
                              std::string_view target, const std::vector<std::string>& kernels) {
  return m_core->prewarm(source, options, names, target, kernels);
}
std::pair<cache::Hash128, std::string> Engine::describe_key(const Source& source, const Options& options,
                                                            const std::vector<std::string>& names,
                                                            std::string_view target, cache::DependencySet* dependencies) {
  return m_core->describe_key(source, options, names, target, dependencies);
}
Vendor Engine::vendor() const { return m_core->vendor(); }
std::vector<DeviceInfo> Engine::devices() const { return m_core->devices(); }
int Engine::default_device() const { return m_core->default_device(); }
std::vector<LaneInfo> Engine::lanes() const { return m_core->lanes(); }
std::vector<std::string> Engine::default_targets() const { return m_core->default_targets(); }
cache::Counters Engine::stats() const { return m_core->stats(); }
cache::Store& Engine::store() { return m_core->store(); }
void Engine::unload_all() { m_core->unload_all(); }

void* Engine::allocate(std::size_t bytes, int device) {
  device = m_core->resolve_device(device);
  return m_core->runtime().allocate(device, bytes);
}
void Engine::free(void* pointer, int device) noexcept {
  try {
    device = m_core->resolve_device(device);
    m_core->runtime().free(device, pointer);
  } catch (...) {
  }
}
void Engine::copy_to_device(void* dst, const void* src, std::size_t bytes, StreamHandle stream, int device) {
  device = m_core->resolve_device(device);
  m_core->runtime().copy_to_device(device, dst, src, bytes, stream);
}
void Engine::copy_to_host(void* dst, const void* src, std::size_t bytes, StreamHandle stream, int device) {
  device = m_core->resolve_device(device);
  m_core->runtime().copy_to_host(device, dst, src, bytes, stream);
}
void Engine::memset(void* dst, int value, std::size_t bytes, StreamHandle stream, int device) {
  device = m_core->resolve_device(device);
  m_core->runtime().memset(device, dst, value, bytes, stream);
}
StreamHandle Engine::create_stream(int device) {
  device = m_core->resolve_device(device);
  return m_core->runtime().create_stream(device);
}
void Engine::destroy_stream(StreamHandle stream, int device) noexcept {
  try {
    device = m_core->resolve_device(device);
    m_core->runtime().destroy_stream(device, stream);
  } catch (...) {
  }
}
void Engine::synchronize(StreamHandle stream, int device) {
  device = m_core->resolve_device(device);
  m_core->runtime().synchronize(device, stream);
}

// ---- configuration ---------------------------------------------------------------------------------------

EngineConfig EngineConfig::from_environment() {
  EngineConfig config;
  if (const char* v = std::getenv("KILN_VENDOR"); v != nullptr && v[0] != '\0') {
    const std::string_view value(v);
    if (value == "cuda") config.vendor = Vendor::cuda;
    else if (value == "hip") config.vendor = Vendor::hip;
    else if (value != "auto") throw ConfigError(fmt::format("KILN_VENDOR='{}': expected auto, cuda or hip", value));
  }
  if (const char* v = std::getenv("KILN_DEVICE"); v != nullptr && v[0] != '\0') {
    const std::string_view value(v);
    int device = -1;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), device);
    if (ec != std::errc() || end != value.data() + value.size() || device < 0) {
      throw ConfigError(fmt::format("KILN_DEVICE='{}': expected a device ordinal (0, 1, ...)", value));
    }
    config.device = device;
  }
  try {
    config.cache = cache::StoreConfig::from_environment();
  } catch (const std::invalid_argument& e) {
    throw ConfigError(e.what());
  }
  if (const char* v = std::getenv("KILN_RECORD"); v != nullptr) config.record_path = v;
  if (const char* v = std::getenv("KILN_CACHE_PACKS"); v != nullptr) {
    std::string_view rest(v);
    while (!rest.empty()) {
      const std::size_t colon = rest.find(':');
      if (colon != 0) config.packs.emplace_back(rest.substr(0, colon));
      if (colon == std::string_view::npos) break;
      rest.remove_prefix(colon + 1);
    }
  }
  if (const char* v = std::getenv("KILN_REMOTE_CACHE"); v != nullptr) config.remote = v;
  return config;
}

cache::StorageConfig EngineConfig::storage_config() const {
  cache::StorageConfig storage;
  storage.local = cache;
  storage.packs = packs;
  storage.remote_url = remote;
  return storage;
}

}  // namespace kiln
