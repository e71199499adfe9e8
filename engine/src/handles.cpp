// Program and Kernel: function lookup and the checked launch (the hot path).
#include <fmt/format.h>

#include <algorithm>

#include "elf.hpp"
#include "engine_internal.hpp"
#include "kiln/base/hot_path.hpp"
#include "kiln/error.hpp"

namespace kiln {
namespace {

KILN_HOT const detail::ProgramState& checked(const std::shared_ptr<detail::ProgramState>& state) {
  if (!state) throw LoadError("empty Program handle (default-constructed)");
  return *state;
}

}  // namespace

std::vector<std::string> Program::kernel_names() const {
  const detail::ProgramState& p = checked(m_state);
  std::vector<std::string> names;
  names = elf::kernel_names(p.entry->payload_kind, p.entry->payload);
  for (const cache::LoweredName& n : p.entry->names) {
    // Name expressions are listed as written; their lowered symbols are not repeated.
    names.erase(std::remove(names.begin(), names.end(), n.lowered), names.end());
    names.push_back(n.expression);
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

KILN_HOT Kernel Program::kernel(std::string_view name) const {
  const detail::ProgramState& p = checked(m_state);
  if (!p.loaded) throw LoadError(fmt::format("program {} was unloaded", p.entry->key_hash.hex()));
  {
    const std::lock_guard lock(m_state->kernels_mutex);
    auto it = m_state->kernels.find(std::string(name));
    if (it != m_state->kernels.end()) return Kernel(it->second);
  }
  std::string lowered(name);
  for (const cache::LoweredName& n : p.entry->names) {
    if (n.expression == name) lowered = n.lowered;
  }
  void* function = p.runtime->get_function(p.module, lowered);
  if (function == nullptr) {
    const std::vector<std::string> names = kernel_names();
    throw LoadError(fmt::format("no kernel '{}' in {} (entry {}, {}); the module has: {}{}", name,
                                p.entry->target, p.entry->key_hash.hex(), to_string(p.entry->payload_kind),
                                names.empty() ? "(none found)" : fmt::format("{}", fmt::join(names, ", ")),
                                name.find('<') != std::string_view::npos
                                    ? " (templated kernels must be requested as name expressions)"
                                    : ""));
  }
  auto state = std::make_shared<detail::KernelState>();
  state->program = m_state;
  state->name = std::string(name);
  state->lowered = lowered;
  state->function = function;
  state->info = p.runtime->function_info(function, *p.entry, lowered);
  state->params = state->info.params;
  state->max_shared_optin = p.runtime->devices()[static_cast<std::size_t>(p.device)].max_shared_per_block_optin;
  const std::lock_guard lock(m_state->kernels_mutex);
  auto [it, inserted] = m_state->kernels.try_emplace(std::string(name), std::move(state));
  return Kernel(it->second);
}

const cache::Hash128& Program::key() const { return checked(m_state).entry->key_hash; }
const std::string& Program::target() const { return checked(m_state).entry->target; }
int Program::device() const { return checked(m_state).device; }
Origin Program::origin() const { return checked(m_state).origin; }

// ---- CompiledBinary ----------------------------------------------------------------------------------

static_assert(static_cast<int>(BinaryKind::cubin) == static_cast<int>(PayloadKind::cubin));
static_assert(static_cast<int>(BinaryKind::ptx) == static_cast<int>(PayloadKind::ptx));
static_assert(static_cast<int>(BinaryKind::amd_code_object) == static_cast<int>(PayloadKind::amdgpu_code_object));
static_assert(static_cast<int>(BinaryKind::ltoir) == static_cast<int>(PayloadKind::ltoir));

namespace {
const detail::BinaryState& checked(const std::shared_ptr<const detail::BinaryState>& state) {
  if (!state) throw Error("empty CompiledBinary (default-constructed)");
  return *state;
}
}  // namespace

std::span<const std::byte> CompiledBinary::bytes() const { return checked(m_state).entry->payload; }
BinaryKind CompiledBinary::kind() const { return static_cast<BinaryKind>(checked(m_state).entry->payload_kind); }
const std::string& CompiledBinary::target() const { return checked(m_state).entry->target; }
const cache::Hash128& CompiledBinary::key() const { return checked(m_state).entry->key_hash; }
Origin CompiledBinary::origin() const { return checked(m_state).origin; }
const std::vector<std::pair<std::string, std::string>>& CompiledBinary::lowered_names() const {
  return checked(m_state).names;
}
const std::string* CompiledBinary::lowered_name(std::string_view expression) const {
  const auto& names = checked(m_state).names;
  const auto it = std::lower_bound(names.begin(), names.end(), expression,
                                   [](const auto& item, std::string_view wanted) { return item.first < wanted; });
  return it != names.end() && it->first == expression ? &it->second : nullptr;
}
const std::string& CompiledBinary::log() const { return checked(m_state).log; }
double CompiledBinary::seconds() const { return checked(m_state).seconds; }

// ---- Kernel ------------------------------------------------------------------------------------------

namespace {
const detail::KernelState& checked(const std::shared_ptr<const detail::KernelState>& state) {
  if (!state) throw LaunchError("empty Kernel handle (default-constructed)");
  return *state;
}
}  // namespace

const std::string& Kernel::name() const { return checked(m_state).name; }
const std::string& Kernel::lowered_name() const { return checked(m_state).lowered; }
int Kernel::device() const { return checked(m_state).program->device; }
int Kernel::max_threads_per_block() const { return checked(m_state).info.max_threads_per_block; }
const std::optional<std::vector<ParamInfo>>& Kernel::params() const { return checked(m_state).params; }
void* Kernel::native_handle() const { return checked(m_state).function; }

void Kernel::launch_packed(const LaunchConfig& config, const ArgPack& args) const {
  const detail::KernelState& k = checked(m_state);
  detail::ProgramState& p = *k.program;
  if (!p.loaded.load(std::memory_order_acquire)) {
    throw LaunchError(fmt::format("kernel '{}': its module was unloaded (Engine::unload_all or the engine was destroyed)", k.name));
  }
  if (k.params) {
    const std::vector<ParamInfo>& params = *k.params;
    if (args.count() != params.size()) {
      throw LaunchError(fmt::format("kernel '{}' takes {} argument(s), {} given", k.name, params.size(), args.count()));
    }
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (args.arg_size(i) != params[i].size || args.arg_offset(i) != params[i].offset) {
        throw LaunchError(fmt::format(
            "kernel '{}' argument {}: the binary declares {} bytes at offset {}, the launch passes {} bytes at offset {}",
            k.name, i, params[i].size, params[i].offset, args.arg_size(i), args.arg_offset(i)));
      }
    }
  }
  const std::uint64_t threads = std::uint64_t{config.block.x} * config.block.y * config.block.z;
  if (threads == 0 || config.grid.x == 0 || config.grid.y == 0 || config.grid.z == 0) {
    throw LaunchError(fmt::format("kernel '{}': empty launch (grid {}x{}x{}, block {}x{}x{})", k.name, config.grid.x,
                                  config.grid.y, config.grid.z, config.block.x, config.block.y, config.block.z));
  }
  if (threads > static_cast<std::uint64_t>(k.info.max_threads_per_block)) {
    throw LaunchError(fmt::format("kernel '{}': block of {} threads ({}x{}x{}) exceeds the kernel's limit of {}", k.name,
                                  threads, config.block.x, config.block.y, config.block.z, k.info.max_threads_per_block));
  }
  if (config.shared_bytes > k.dynamic_shared_limit.load(std::memory_order_relaxed)) {
    if (config.shared_bytes + k.info.static_shared_bytes > k.max_shared_optin) {
      throw LaunchError(fmt::format("kernel '{}': {} bytes of dynamic shared memory (+{} static) exceed the device's {} bytes",
                                    k.name, config.shared_bytes, k.info.static_shared_bytes, k.max_shared_optin));
    }
    p.runtime->make_current(p.device);
    p.runtime->set_max_dynamic_shared(k.function, config.shared_bytes);
    k.dynamic_shared_limit.store(config.shared_bytes, std::memory_order_relaxed);
  }
  if (config.stream != nullptr && k.checked_stream.load(std::memory_order_relaxed) != config.stream) {
    const std::optional<int> owner = p.runtime->stream_device(config.stream);
    if (owner && *owner != p.device) {
      throw LaunchError(fmt::format("kernel '{}' is loaded on device {} but the stream belongs to device {}", k.name,
                                    p.device, *owner));
    }
    k.checked_stream.store(config.stream, std::memory_order_relaxed);
  }
  p.runtime->launch(p.device, k.function, config, args, k.params.has_value());
}

}  // namespace kiln
