// The public Engine: forwarders to its EngineCore (engine.cpp), and EngineConfig.
#include "kiln/engine.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine_internal.hpp"
#include "kiln/base/hot_path.hpp"
#include "kiln/cache/stats.hpp"
#include "kiln/cache/storage.hpp"
#include "kiln/error.hpp"
#include "requests.hpp"
#include "vendor_table.hpp"

namespace kiln {

// ---- public handles -----------------------------------------------------------------------------------

KILN_HOT bool is_name_expression(std::string_view name) noexcept {
  return name.find_first_of("<>:&( ") != std::string_view::npos;
}

Engine::Engine() : Engine(EngineConfig::from_environment()) {}
Engine::Engine(EngineConfig config) : m_core(std::make_shared<detail::EngineCore>(std::move(config))) {}
Engine::~Engine() = default;

Program Engine::program(const Source& source, const Options& options, const std::vector<std::string>& names,
                        int device) {
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
  return m_core->prewarm(source, options, names, target, {}, detail::Settle{});
}
CompiledBinary Engine::compile(const Source& source, const Options& options, const std::vector<std::string>& names,
                               std::string_view target) {
  return m_core->compile(source, options, names, target);
}
PrewarmResult Engine::prewarm(const Source& source, const Options& options, const std::vector<std::string>& names,
                              std::string_view target, const std::vector<std::string>& kernels) {
  return m_core->prewarm(source, options, names, target, kernels, detail::Settle{});
}
PrewarmResult Engine::prewarm(const Source& source, const Options& options, const std::vector<std::string>& names,
                              std::string_view target, const std::vector<std::string>& kernels,
                              const PrewarmPlan& plan) {
  return m_core->prewarm(source, options, names, target, kernels,
                         detail::Settle{detail::Settle::Mode::planned, plan.key});
}
PrewarmPlan Engine::plan_prewarm(const Source& source, const Options& options, const std::vector<std::string>& names,
                                 std::string_view target) {
  return m_core->plan_prewarm(source, options, names, target);
}
std::pair<cache::Hash128, std::string> Engine::describe_key(const Source& source, const Options& options,
                                                            const std::vector<std::string>& names,
                                                            std::string_view target,
                                                            cache::DependencySet* dependencies) {
  return m_core->describe_key(source, options, names, target, dependencies);
}
std::string Engine::pch_outlook(const Source& source, const Options& options, const std::vector<std::string>& names,
                                std::string_view target) {
  return m_core->pch_outlook(source, options, names, target);
}
Vendor Engine::vendor() const { return m_core->vendor(); }
std::vector<DeviceInfo> Engine::devices() const { return m_core->devices(); }
int Engine::default_device() const { return m_core->default_device(); }
std::vector<LaneInfo> Engine::lanes() const { return m_core->lanes(); }
std::vector<std::string> Engine::default_targets() const { return m_core->default_targets(); }
cache::Counters Engine::stats() const { return m_core->stats(); }
cache::Storage& Engine::storage() { return m_core->storage(); }

CacheState Engine::cache_state() const {
  const cache::Store& store = m_core->store();
  return {store.config().root, store.mode(), store.mode_reason(), store.config().max_size, store.last_put_error()};
}
bool Engine::cached_locally(const cache::Hash128& key) const noexcept {
  try {
    return m_core->store().contains(key);
  } catch (...) {
    return false;
  }
}
std::string Engine::tier_holding(const cache::Hash128& key, std::string_view canonical_key,
                                 std::vector<std::string>& errors) const {
  return cache::tier_holding(m_core->storage().config(), key, canonical_key, errors);
}
cache::StoredPublish Engine::publish_to_remotes(std::span<const cache::Hash128> keys) {
  return m_core->publish_stored(keys);
}
void Engine::prepare_exit() noexcept {
  m_core->storage().close_tiers();
  m_core->record_lifetime();
}
void Engine::record_stats() noexcept { m_core->record_lifetime(); }
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
    if (value != "auto") {
      // A vendor by its name, from the vendor table; "auto, cuda or hip" when none is named so.
      std::string names;
      const std::span<const detail::VendorRow, detail::kVendorCount> rows = detail::vendor_rows();
      for (std::size_t i = 0; i < rows.size(); ++i) {
        if (value == to_string(rows[i].vendor)) config.vendor = rows[i].vendor;
        names += fmt::format("{}{}", i == 0 ? "" : i + 1 == rows.size() ? " or " : ", ", to_string(rows[i].vendor));
      }
      if (config.vendor == Vendor::none) {
        throw ConfigError(fmt::format("KILN_VENDOR='{}': expected auto, {}", value, names));
      }
    }
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
  if (const char* v = std::getenv("KILN_RECORD"); v != nullptr) {
    // Refused when set but empty, as KILN_CACHE_DIR is (StoreConfig::from_environment): both name a
    // path, an empty one names none and is almost always an unset shell variable ("KILN_RECORD=$LOG").
    // Taken as unset it would record nothing without a word, and the manifest the user meant to replay
    // would be missing only when it is needed.
    if (*v == '\0') {
      throw ConfigError("KILN_RECORD is set but empty: give the manifest file to append requests to, or unset it");
    }
    config.record_path = v;
  }
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

std::vector<cache::TierHealth> EngineConfig::tiers(bool ask_servers) const {
  return cache::inspect_tiers(storage_config(), ask_servers);
}

cache::StorageConfig EngineConfig::storage_config() const {
  cache::StorageConfig storage;
  storage.local = cache;
  storage.packs = packs;
  storage.remote_url = remote;
  return storage;
}

}  // namespace kiln
