// The request path: request -> key -> memory tier -> disk tier (+ read-through tiers) -> compile
// (single flight in the process, a lease across processes) -> publish -> load -> Kernel. Here, EngineCore:
// the engine's construction (the runtime, from the vendor table), the memory tiers, single flight, obtain,
// compile and load. A request's front half (target, request, key, includes, record) is Requests::plan
// (requests.cpp); the compilers are Compilers (compilers.cpp).
#include "kiln/engine.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <ctime>

#include "compilers.hpp"
#include "engine_internal.hpp"
#include "kiln/base/hot_path.hpp"
#include "kiln/base/log.hpp"
#include "kiln/cache/storage.hpp"
#include "kiln/error.hpp"
#include "kiln/includes/include_home.hpp"
#include "requests.hpp"
#include "symbols_check.hpp"
#include "vendor_table.hpp"

namespace kiln::detail {
namespace {

/// The memory tier's 64-bit key. Cheap (no hashing of source text or options on a hit: both carry
/// their hash); collisions are harmless because every slot keeps and compares its inputs (RequestSlot).
KILN_HOT std::uint64_t memory_key(const cache::Hash128& source, const Options& options, std::string_view names,
                                  int device) {
  std::uint64_t h = source.low ^ (source.high * 0x9e3779b97f4a7c15ULL);
  h = (h ^ options.canonical_hash()) * 0xff51afd7ed558ccdULL;
  h = (h ^ fnv1a64(names)) * 0xc4ceb9fe1a85ec53ULL;
  h ^= static_cast<std::uint64_t>(device + 1);
  return h ^ (h >> 29);
}

}  // namespace

// Here, beside the memory tier, so that a memory-tier hit (program(), compile()) calls no other file.
KILN_HOT std::string join(const std::vector<std::string>& items, char separator) {
  std::string out;
  for (const std::string& item : items) {
    if (!out.empty()) out += separator;
    out += item;
  }
  return out;
}

struct EngineCore::Flight {
  std::mutex mutex;
  std::condition_variable done_signal;
  bool done = false;
  Obtained result;
  std::exception_ptr error;
};

KILN_HOT void refuse_unloadable(const cache::Entry& entry) {
  if (entry.payload_kind != PayloadKind::ltoir) return;
  throw LoadError(fmt::format(
      "entry {} holds LTO-IR for {}: LTO-IR is not a module a driver loads; it must first be linked into a CUBIN "
      "(nvJitLink, with -lto), which kiln does not do. Compile for sm_XY to load the kernels, or hand the LTO-IR "
      "from Engine::compile to your own link step",
      entry.key_hash.hex(), entry.target));
}

ProgramState::~ProgramState() { unload(); }

void ProgramState::unload() noexcept {
  if (loaded.exchange(false) && module != nullptr && runtime) runtime->unload_module(device, module);
}

EngineCore::EngineCore(EngineConfig config)
    : m_config(std::move(config)),
      m_storage(m_config.storage_config()),
      m_compilers(std::make_unique<Compilers>(m_storage.local())),
      m_requests(std::make_unique<Requests>(m_storage, m_counters, *m_compilers, m_devices, m_config.record_path)) {
  // The runtime that runs kernels: the requested vendor, or (auto) the first with a device, in the vendor
  // table's order.
  std::vector<const VendorRow*> order;
  if (m_config.vendor == Vendor::none) {
    for (const VendorRow& row : vendor_rows()) order.push_back(&row);
  } else {
    order.push_back(&vendor_row(m_config.vendor));
  }
  std::vector<std::string> reasons;
  if (!m_config.runtime) {
    order.clear();
    reasons.emplace_back("compile-only engine (EngineConfig::runtime is false)");
  }
  std::shared_ptr<vendor::Runtime>& chosen = m_devices.runtime;
  for (const VendorRow* row : order) {
    try {
      std::unique_ptr<vendor::Runtime> runtime = row->load_runtime();
      if (!runtime->devices().empty() || m_config.vendor != Vendor::none) {
        chosen = std::move(runtime);
        break;
      }
      reasons.push_back(fmt::format("{}: runtime loaded but it reports no device", to_string(row->vendor)));
    } catch (const Error& e) {
      // Also for an explicit vendor: an engine without its runtime still compiles for named targets (a
      // build container has the toolkit but no driver); using a device says why there is none.
      reasons.push_back(fmt::format("{}: {}", to_string(row->vendor), e.what()));
    }
  }
  if (!chosen) {
    m_devices.error = fmt::format("no GPU: {}", join(reasons, '\n'));
    KILN_LOG(info, "{}; compile-only engine (prewarm with named targets works)", m_devices.error);
  } else if (chosen->devices().empty()) {
    m_devices.error = fmt::format("the {} runtime reports no device", to_string(chosen->vendor()));
  }
  if (m_config.device > 0 && (!chosen || chosen->devices().empty())) {
    // Device 0 is every engine's default, so it stays a compile-only engine's too; a later ordinal names
    // a device the caller expects to use.
    throw ConfigError(fmt::format("device {} requested (KILN_DEVICE or config) but there is no device ({})",
                                  m_config.device, m_devices.error));
  }
  if (chosen && !chosen->devices().empty()) {
    const int count = static_cast<int>(chosen->devices().size());
    if (m_config.device >= count) {
      throw ConfigError(fmt::format("device {} requested (KILN_DEVICE or config) but only {} {} device(s) exist",
                                    m_config.device, count, to_string(chosen->vendor())));
    }
    m_devices.default_device = std::max(0, m_config.device);
    m_devices.count = count;
    // Every request for this engine's devices is keyed with this vendor's compiler identity: look it
    // up once now (a probe file read, no compiler load; nothing when there is no usable probe).
    m_compilers->probe(chosen->vendor());
  }
}

EngineCore::~EngineCore() {
  unload_all();
  record_lifetime();
}

void EngineCore::record_lifetime() noexcept {
  // Lifetime statistics: a failed write is never an error.
  try {
    const std::lock_guard lock(m_recorded_mutex);
    const cache::Counters now = stats();
    cache::Counters delta;
    // Counters only grow; a field that did not (never expected) adds nothing.
#define KILN_DELTA(field) delta.field = now.field > m_recorded.field ? now.field - m_recorded.field : 0;
    KILN_CACHE_COUNTERS(KILN_DELTA)
#undef KILN_DELTA
    if (store().mode() == cache::StoreMode::read_write) cache::PersistentStats(store().config().root).add(delta);
    m_recorded = now;
  } catch (...) {
  }
}

KILN_HOT vendor::Runtime& Devices::usable() const {
  if (!runtime || runtime->devices().empty()) throw DeviceUnavailable(error);
  return *runtime;
}

int EngineCore::resolve_device_slow(int device) {
  vendor::Runtime& r = runtime();
  if (device < 0) return m_devices.default_device;
  if (static_cast<std::size_t>(device) >= r.devices().size()) {
    throw ConfigError(fmt::format("device {} does not exist ({} {} device(s))", device, r.devices().size(),
                                  to_string(r.vendor())));
  }
  return device;
}

std::vector<DeviceInfo> EngineCore::devices() const {
  return m_devices.runtime ? m_devices.runtime->devices() : std::vector<DeviceInfo>{};
}

std::vector<LaneInfo> EngineCore::lanes() { return m_compilers->report(m_devices.runtime.get()); }

std::vector<std::string> EngineCore::default_targets() const {
  std::vector<std::string> targets;
  for (const DeviceInfo& d : devices()) {
    if (std::find(targets.begin(), targets.end(), d.target) == targets.end()) targets.push_back(d.target);
  }
  if (targets.empty()) {
    for (const VendorRow& row : vendor_rows()) targets.emplace_back(row.default_target);
  }
  return targets;
}

std::optional<std::filesystem::path> EngineCore::compiler_file(Vendor v) const { return m_compilers->file(v); }

cache::StoredPublish EngineCore::publish_stored(std::span<const cache::Hash128> keys) {
  return m_storage.publish_stored(
      keys, [this](const cache::Hash128& request_key) { return m_requests->manifest_bytes(request_key); });
}

vendor::CompileInput EngineCore::compile_input(const Request& r, includes::CompilerView& view,
                                               std::vector<vendor::HeaderText>& headers) {
  // The compiler's view of the request: a resolve's (the home found its prelude's end with its one scan of
  // the source), or the source and its headers as given.
  if (r.includes) {
    view = includes::IncludeHome::compiler_view(*r.includes);
    headers.reserve(view.headers.size());
    for (const includes::CompilerHeader& h : view.headers) headers.push_back({h.name.c_str(), h.storage->c_str()});
  } else {
    headers = vendor::header_texts(r.source.headers());
    view.source = r.source.text();
    view.prelude_end = includes::prelude_end(view.source);
  }
  vendor::CompileInput input{r.source.name(), view.source, headers, r.names, r.flags, r.target.full};
  input.lto_ir = r.target.output == PayloadKind::ltoir;
  input.prelude_end = view.prelude_end;
  input.store = &store();  // NVRTC's precompiled headers are kept beside the entries (nvrtc_pch_store.hpp)
  return input;
}

std::shared_ptr<const cache::Entry> EngineCore::compile(const Request& r, const vendor::Compiler& compiler,
                                                        std::string& log) {
  const auto start = std::chrono::steady_clock::now();
  includes::CompilerView view;
  std::vector<vendor::HeaderText> headers;
  const vendor::CompileInput input = compile_input(r, view, headers);
  vendor::CompileOutput output;
  try {
    output = compiler.compile(input);
  } catch (const CompileError& e) {
    m_counters.add({.compile_failures = 1});
    const std::optional<std::string> missing = includes::missing_include_from_log(e.log());
    if (!missing && !r.includes) throw;
    // The compiler quotes the text it was given: the source's includes as the user wrote them, not as kiln
    // rewrote them to the headers it hands over.
    std::string message = e.what(), compiler_log = e.log();
    if (r.includes) {
      message = includes::restore_include_spellings(std::move(message), r.source.name(), r.source.text());
      compiler_log = includes::restore_include_spellings(std::move(compiler_log), r.source.name(), r.source.text());
    }
    // A header kiln could not resolve (not in memory, not in any folder, or named by a computed
    // include the scan could not follow): say where kiln looked.
    if (missing) {
      // On the summary line, which is what a one-line report (kiln prewarm's) shows; the log follows it.
      const std::size_t summary_end = std::min(message.find('\n'), message.size());
      message.insert(summary_end, "; " + includes::describe_missing_include(*missing, r.include_folders));
    }
    throw CompileError(std::move(message), std::move(compiler_log), e.source_name(), e.options());
  } catch (...) {
    m_counters.add({.compile_failures = 1});
    throw;
  }
  const auto elapsed = std::chrono::steady_clock::now() - start;
  m_counters.add({.compiles = 1,
                  .compile_nanoseconds = static_cast<std::uint64_t>(
                      std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count()),
                  .pch_made = output.pch_made ? 1U : 0U,
                  .pch_used = output.pch_used ? 1U : 0U});
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
    m_requests->note_dependencies(r);
    // Every tier's hit is `disk` here; `tier` keeps which one (Engine::compile reports it).
    return {std::move(found->entry), Origin::disk, looked, 0, found->stored, found->origin, {}};
  }
  // Destroyed without put() (the compiler cannot be loaded, the compile throws, the request is re-keyed),
  // the reservation tells every tier the compile will not come and releases the lease.
  cache::Reservation reservation = std::move(std::get<cache::Reservation>(looked_up));

  // A miss: now the compiler is needed (loaded once per process). Its identity is normally the one the
  // key was made with (from the probe); if a stale or planted probe said otherwise, the request is
  // keyed again with the real identity, so an entry is only ever stored under its compiler's key.
  vendor::Compiler& compiler_ref = m_compilers->compiler(r.target.vendor);
  if (compiler_ref.identity() != r.compiler) {
    reservation.abandon();
    Request rekeyed = r;
    Requests::make_key(rekeyed, compiler_ref.identity());
    return obtain_uncached(rekeyed, bypass_cache);
  }
  const Request* work = &r;
  std::optional<Request> resolved;
  if (r.reads_files && !r.includes) {
    // The key came from the manifest, but a compile needs the headers' bytes: resolve them now. What is
    // compiled is what is read now, so when the tree changed since the manifest was checked, the
    // request is keyed by what was read (never a binary under another tree's key).
    resolved.emplace(r);
    m_requests->settle_includes(*resolved, /*use_manifest=*/false);
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
    std::optional<Request> retried = m_requests->retry_with_missing_header(*work, error);
    if (!retried) throw;
    reservation.abandon();
    return obtain_uncached(*retried, bypass_cache);
  }
  const auto storing = std::chrono::steady_clock::now();
  const bool stored = reservation.put(*entry);
  m_requests->note_dependencies(*work);
  KILN_LOG(debug, "{}: stored the entry and its dependency manifest in {:.3f} ms", work->source.name(),
           std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - storing).count());
  return {entry, Origin::compiled, seconds(), looked, stored, cache::HitOrigin::local, std::move(log)};
}

KILN_HOT Obtained EngineCore::obtain(const Request& r, bool bypass_cache) {
  Obtained obtained = obtain_entry(r, bypass_cache);
  if (r.by_symbol.empty() || defines_kernels(*obtained.entry, r.by_symbol)) return obtained;
  KILN_LOG(debug, "{}: the binary has no kernel of some of {}; asking the compiler for them by name",
           r.source.name(), join(r.by_symbol, ' '));
  Request named = r;
  named.names = r.requested_names();
  named.by_symbol.clear();
  Requests::make_key(named, r.compiler);
  return obtain_entry(named, bypass_cache);
}

KILN_HOT Obtained EngineCore::obtain_entry(const Request& r, bool bypass_cache) {
  // A local disk hit needs no coordination: threads that read one entry at once each read it (and
  // each loads its own module anyway). Only what is not on disk goes through single flight, where
  // one thread per key asks the other tiers or compiles.
  if (!bypass_cache) {
    const auto start = std::chrono::steady_clock::now();
    if (auto entry = m_storage.get_local(r.hash, r.key.bytes())) {
      m_requests->note_dependencies(r);
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
  state->runtime = m_devices.runtime;
  state->device = device;
  state->origin = obtained.origin;
  try {
    refuse_unloadable(*obtained.entry);
    state->module = rt.load_module(device, *obtained.entry);
  } catch (const LoadError& first) {
    if (obtained.origin == Origin::compiled) throw;
    // A cached binary the driver refuses (e.g. a CUBIN for another arch under this key): remove it and
    // recompile; never fail a request a compile can serve.
    KILN_LOG(warn, "{}; removing the cache entry and recompiling", first.what());
    m_storage.discard(r.hash);
    obtained = obtain(r, /*bypass_cache=*/true);
    state->origin = obtained.origin;
    refuse_unloadable(*obtained.entry);
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
    if (it != m_programs.end() && it->second.matches(source.content_hash(), options, joined, device, {}) &&
        it->second.payload->loaded) {
      m_counters.memory_hits.fetch_add(1, std::memory_order_relaxed);
      return Program(it->second.payload);
    }
  }
  if (!prefetched) prefetch_hot_path();  // not in memory: the rest of the request path runs (hot_path.hpp)
  const Request r = m_requests->plan(source, options, names, {}, device, Settle{}, /*record=*/true);
  std::shared_ptr<ProgramState> state = load(r, obtain(r, false), device);
  {
    ProgramSlot slot(source.content_hash(), options, joined, device, {}, state);
    const std::unique_lock lock(m_memory_mutex);
    auto [it, inserted] = m_programs.try_emplace(key, std::move(slot));  // moves nothing when not inserted
    if (!inserted) {
      if (it->second.payload->loaded && it->second.matches(source.content_hash(), options, joined, device, {})) {
        return Program(it->second.payload);  // another thread loaded it first; ours unloads on release
      }
      it->second = std::move(slot);
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
      if (slot.matches(source.content_hash(), options, name, device, {}) &&
          slot.payload.m_state->program->loaded.load(std::memory_order_relaxed)) {
        m_counters.memory_hits.fetch_add(1, std::memory_order_relaxed);
        return slot.payload;
      }
    }
  }
  prefetch_hot_path();  // not in memory: the rest of the request path runs (hot_path.hpp)
  std::vector<std::string> names;
  if (kiln::is_name_expression(name)) names.emplace_back(name);
  Kernel k = program(source, options, names, device, /*prefetched=*/true).kernel(name);
  const std::unique_lock lock(m_memory_mutex);
  m_kernels.insert_or_assign(key, KernelSlot(source.content_hash(), options, name, device, {}, k));
  return k;
}

PrewarmResult EngineCore::prewarm(const Source& source, const Options& options, const std::vector<std::string>& names,
                                  std::string_view target, const std::vector<std::string>& kernels,
                                  const Settle& settle) {
  const Request r = m_requests->plan(source, options, names, target, -1, settle, /*record=*/true);
  Obtained obtained = obtain(r, false);
  // A kernel the binary lacks is the request's mistake, not the binary's: the entry stays cached.
  std::vector<std::string> plain = kernels;  // the names taken by symbol are looked up as plain names are
  plain.insert(plain.end(), r.by_symbol.begin(), r.by_symbol.end());
  check_kernels_defined(*obtained.entry, source.name(), r.names, plain);
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
  std::shared_ptr<const BinaryState> remembered;
  {
    const std::lock_guard lock(m_binaries_mutex);
    auto it = m_binaries.find(key);
    if (it != m_binaries.end() && it->second.matches(source.content_hash(), options, joined, -1, target)) {
      remembered = it->second.payload.binary;
    }
  }
  if (remembered) {
    m_counters.memory_hits.fetch_add(1, std::memory_order_relaxed);
    auto hit = std::make_shared<BinaryState>(*remembered);
    hit->origin = Origin::memory;
    hit->log.clear();
    hit->seconds = seconds();
    return CompiledBinary(std::move(hit));
  }

  const Request r = m_requests->plan(source, options, names, target, -1, Settle{}, /*record=*/true);
  const double planned = seconds();
  Obtained obtained = obtain(r, false);
  KILN_LOG(debug, "{}: binary {} ({}) in {:.3f} ms: request and includes {:.3f}, cache or compile {:.3f} ms",
           source.name(), r.hash.hex(), obtained.origin == Origin::compiled ? "compiled" : "cached", seconds() * 1e3,
           planned * 1e3, (seconds() - planned) * 1e3);
  auto state = std::make_shared<BinaryState>();
  state->entry = obtained.entry;
  for (const cache::LoweredName& n : obtained.entry->names) state->names.emplace_back(n.expression, n.lowered);
  for (const std::string& name : r.by_symbol) {  // an extern "C" kernel's symbol is its name
    const auto named = [&](const auto& n) { return n.first == name; };
    if (std::none_of(state->names.begin(), state->names.end(), named)) state->names.emplace_back(name, name);
  }
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
        return a.second.payload.sequence < b.second.payload.sequence;
      }));
    }
    m_binaries.insert_or_assign(key, BinarySlot(source.content_hash(), options, joined, -1, target,
                                                {m_binary_sequence++, state}));
  }
  return CompiledBinary(std::move(state));
}

std::pair<cache::Hash128, std::string> EngineCore::describe_key(const Source& source, const Options& options,
                                                                const std::vector<std::string>& names,
                                                                std::string_view target,
                                                                cache::DependencySet* dependencies) {
  // The key of the headers as they are now: from the manifest when it still matches them by stat (as a
  // request would find it), else by resolving. Not recorded: nothing is asked of the cache.
  Request r = m_requests->plan(source, options, names, target, -1, Settle{}, /*record=*/false);
  if (dependencies != nullptr) *dependencies = m_requests->dependencies(r);
  return {r.hash, r.key.bytes()};
}

std::string EngineCore::pch_outlook(const Source& source, const Options& options, const std::vector<std::string>& names,
                                    std::string_view target) {
  Request r = m_requests->plan(source, options, names, target, -1, Settle{}, /*record=*/false);
  if (r.reads_files && !r.includes) m_requests->settle_includes(r, /*use_manifest=*/false);  // the bytes NVRTC gets
  const vendor::Compiler* compiler = nullptr;
  try {
    compiler = &m_compilers->compiler(r.target.vendor);
  } catch (const DeviceUnavailable& e) {
    return fmt::format("unknown: the compiler cannot be loaded ({})", e.what());
  }
  includes::CompilerView view;
  std::vector<vendor::HeaderText> headers;
  return compiler->pch_outlook(compile_input(r, view, headers));
}

PrewarmPlan EngineCore::plan_prewarm(const Source& source, const Options& options,
                                     const std::vector<std::string>& names, std::string_view target) {
  // Whether the request can be made and, when that needs no header read, its key: the manifest by stat at
  // most (Settle::manifest_only). Not recorded: the prewarm() that serves it records it.
  const Request r = m_requests->plan(source, options, names, target, -1, Settle{Settle::Mode::manifest_only, {}},
                                     /*record=*/false);
  PrewarmPlan plan;
  if (!r.reads_files || r.settled) plan.key = r.hash;
  return plan;
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
  for (auto& [key, slot] : programs) slot.payload->unload();
  for (auto& [key, slot] : kernels) slot.payload.m_state->program->unload();
}

}  // namespace kiln::detail
