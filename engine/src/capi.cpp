// The C API (kiln.h) over the C++ API (kiln/engine.hpp).
//
// Invariants:
//  - No exception leaves an extern "C" function: each body runs inside guarded(), which maps every
//    exception to a status code and the thread-local message.
//  - Handles are ids, never pointers: (id << kKindBits) | kind. Ids come from one process-wide
//    counter and are never reused, so a destroyed handle is recognised (id below the counter, not in
//    its table) instead of being dereferenced.
//  - A table entry holds shared_ptrs: a call copies the object's shared_ptr out under the registry
//    lock and works on it unlocked, so another thread destroying the handle meanwhile only drops a
//    reference; the object dies when the last call using it returns.
#include "kiln/kiln.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstddef>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/cache/blob.hpp"
#include "kiln/engine.hpp"
#include "kiln/error.hpp"
#include "kiln/launch.hpp"
#include "kiln/options.hpp"
#include "kiln/source.hpp"

namespace {

// ---------------------------------------------------------------------------------------------------
// Errors

/// An error the C layer itself detects (bad handle, bad argument).
class ApiError : public std::exception {
 public:
  ApiError(kiln_status status, std::string message) : m_status(status), m_message(std::move(message)) {}
  [[nodiscard]] kiln_status status() const noexcept { return m_status; }
  [[nodiscard]] const char* what() const noexcept override { return m_message.c_str(); }

 private:
  kiln_status m_status;
  std::string m_message;
};

[[noreturn]] void invalid_argument(std::string message) {
  throw ApiError(KILN_ERROR_INVALID_ARGUMENT, std::move(message));
}

thread_local std::string t_last_error;
thread_local std::string t_last_compile_log;

/// Records the message of a failing call. Never throws: if the message cannot be stored, a shorter
/// fixed one is.
kiln_status fail(kiln_status status, const char* function, std::string_view message) noexcept {
  try {
    t_last_error.assign(function);
    t_last_error.append(": ");
    t_last_error.append(message);
  } catch (...) {
    t_last_error.clear();  // clear() never allocates; the fixed text below fits the existing capacity or not at all
    try {
      t_last_error = "kiln: out of memory while recording an error";
    } catch (...) {  // NOLINT(bugprone-empty-catch): nothing more can be recorded
    }
  }
  return status;
}

/// Runs `body`, mapping every exception to a status and the thread-local message.
template <typename Body>
kiln_status guarded(const char* function, Body&& body) noexcept {
  try {
    body();
    return KILN_OK;
  } catch (const ApiError& e) {
    return fail(e.status(), function, e.what());
  } catch (const kiln::CompileError& e) {
    try {
      t_last_compile_log = e.log();
    } catch (...) {
      t_last_compile_log.clear();
    }
    return fail(KILN_ERROR_COMPILE, function, e.what());
  } catch (const kiln::LoadError& e) {
    return fail(KILN_ERROR_LOAD, function, e.what());
  } catch (const kiln::OutOfMemory& e) {
    return fail(KILN_ERROR_OUT_OF_MEMORY, function, e.what());
  } catch (const kiln::LaunchError& e) {
    return fail(KILN_ERROR_LAUNCH, function, e.what());
  } catch (const kiln::ConfigError& e) {
    return fail(KILN_ERROR_CONFIG, function, e.what());
  } catch (const kiln::DeviceUnavailable& e) {
    return fail(KILN_ERROR_DEVICE_UNAVAILABLE, function, e.what());
  } catch (const kiln::Error& e) {
    return fail(KILN_ERROR_INTERNAL, function, e.what());
  } catch (const std::bad_alloc&) {
    return fail(KILN_ERROR_OUT_OF_MEMORY, function, "out of host memory");
  } catch (const std::exception& e) {
    return fail(KILN_ERROR_INTERNAL, function, std::string("internal error: ") + e.what());
  } catch (...) {
    return fail(KILN_ERROR_INTERNAL, function, "internal error: unknown exception");
  }
}

template <typename T>
void require(const T* pointer, const char* what) {
  if (pointer == nullptr) invalid_argument(std::string(what) + " is NULL");
}

/// Copies `text` into a fixed char array, truncating; always NUL-terminates.
template <std::size_t N>
void copy_string(char (&destination)[N], std::string_view text) noexcept {
  const std::size_t n = std::min(text.size(), N - 1);
  std::memcpy(destination, text.data(), n);
  destination[n] = '\0';
}

/// Checks a caller's versioned struct: its size field must cover the first version of the struct.
template <typename T>
void require_struct(const T* value, const char* what) {
  require(value, what);
  if (value->size < sizeof(T)) {
    invalid_argument(std::string(what) + "->size is " + std::to_string(value->size) + ", expected at least " +
                     std::to_string(sizeof(T)) + " (call its _init function first)");
  }
}

// ---------------------------------------------------------------------------------------------------
// Objects behind the handles

struct EngineObject {
  explicit EngineObject(kiln::EngineConfig config) : engine(std::move(config)) {}
  kiln::Engine engine;
  std::mutex memory_mutex;
  bool destroyed = false;                  // guarded by memory_mutex
  std::unordered_map<void*, int> buffers;  // pointer -> device it was allocated on; guarded by memory_mutex
  std::unordered_map<void*, int> streams;  // stream -> device; guarded by memory_mutex
};

struct SourceObject {
  kiln::Source source;
};

struct ProgramObject {
  std::uint64_t engine_id = 0;
  std::shared_ptr<EngineObject> engine;
  kiln::Program program;
  std::vector<std::string> kernel_names;
  std::string key_hex;
};

struct KernelObject {
  std::uint64_t engine_id = 0;
  std::shared_ptr<EngineObject> engine;
  kiln::Kernel kernel;
};

/// Belongs to no engine: a CompiledBinary owns its bytes, so the handle survives kiln_engine_destroy.
struct BinaryObject {
  kiln::CompiledBinary binary;
  std::string key_hex;
};

/// A blob found by kiln_blob_get. Belongs to no engine: the entry it holds owns its bytes.
struct BlobObject {
  std::shared_ptr<const kiln::cache::Entry> entry;
  kiln_origin origin = KILN_ORIGIN_DISK;
};

enum class Kind : std::uint64_t { engine = 1, source = 2, program = 3, kernel = 4, binary = 5, blob = 6 };
constexpr unsigned kKindBits = 3;
constexpr std::uint64_t kKindMask = (1u << kKindBits) - 1;

constexpr const char* kind_name(std::uint64_t kind) noexcept {
  switch (kind) {
    case 1:
      return "engine";
    case 2:
      return "source";
    case 3:
      return "program";
    case 4:
      return "kernel";
    case 5:
      return "binary";
    case 6:
      return "blob";
    default:
      return "unknown";
  }
}

template <typename T>
struct KindOf;
template <>
struct KindOf<EngineObject> {
  static constexpr Kind value = Kind::engine;
};
template <>
struct KindOf<SourceObject> {
  static constexpr Kind value = Kind::source;
};
template <>
struct KindOf<ProgramObject> {
  static constexpr Kind value = Kind::program;
};
template <>
struct KindOf<KernelObject> {
  static constexpr Kind value = Kind::kernel;
};
template <>
struct KindOf<BinaryObject> {
  static constexpr Kind value = Kind::binary;
};
template <>
struct KindOf<BlobObject> {
  static constexpr Kind value = Kind::blob;
};

/// Every live object, by id. One lock for all tables: lookups take it shared.
class Registry {
 public:
  template <typename T>
  std::uint64_t add(std::shared_ptr<T> object) {
    const std::uint64_t id = m_next_id.fetch_add(1, std::memory_order_relaxed);
    const std::unique_lock lock(m_mutex);
    table<T>().emplace(id, std::move(object));
    return (id << kKindBits) | static_cast<std::uint64_t>(KindOf<T>::value);
  }

  /// The object behind a handle value, or ApiError(INVALID_HANDLE) saying why there is none.
  template <typename T>
  std::shared_ptr<T> get(std::uint64_t handle, std::uint64_t* id_out = nullptr) const {
    const std::uint64_t id = checked_id<T>(handle);
    {
      const std::shared_lock lock(m_mutex);
      const auto& map = table<T>();
      if (const auto it = map.find(id); it != map.end()) {
        if (id_out != nullptr) *id_out = id;
        return it->second;
      }
    }
    throw ApiError(KILN_ERROR_INVALID_HANDLE, describe_missing<T>(handle, id));
  }

  /// Removes a handle; returns the object so the caller can drop it outside the lock.
  template <typename T>
  std::shared_ptr<T> remove(std::uint64_t handle) {
    const std::uint64_t id = checked_id<T>(handle);
    std::shared_ptr<T> object;
    {
      const std::unique_lock lock(m_mutex);
      auto& map = table<T>();
      if (const auto it = map.find(id); it != map.end()) {
        object = std::move(it->second);
        map.erase(it);
      }
    }
    if (!object) throw ApiError(KILN_ERROR_INVALID_HANDLE, describe_missing<T>(handle, id));
    return object;
  }

  /// Removes an engine with every program and kernel made from it. The removed objects are moved
  /// into the out-vectors so that they are destroyed outside the lock.
  std::shared_ptr<EngineObject> remove_engine(std::uint64_t handle,
                                              std::vector<std::shared_ptr<ProgramObject>>& programs,
                                              std::vector<std::shared_ptr<KernelObject>>& kernels) {
    const std::uint64_t id = checked_id<EngineObject>(handle);
    std::shared_ptr<EngineObject> engine;
    {
      const std::unique_lock lock(m_mutex);
      if (const auto it = m_engines.find(id); it != m_engines.end()) {
        engine = std::move(it->second);
        m_engines.erase(it);
        std::erase_if(m_programs, [&](auto& item) {
          if (item.second->engine_id != id) return false;
          programs.push_back(std::move(item.second));
          return true;
        });
        std::erase_if(m_kernels, [&](auto& item) {
          if (item.second->engine_id != id) return false;
          kernels.push_back(std::move(item.second));
          return true;
        });
      }
    }
    if (!engine) throw ApiError(KILN_ERROR_INVALID_HANDLE, describe_missing<EngineObject>(handle, id));
    return engine;
  }

 private:
  template <typename T>
  std::uint64_t checked_id(std::uint64_t handle) const {
    const char* expected = kind_name(static_cast<std::uint64_t>(KindOf<T>::value));
    if (handle == 0) throw ApiError(KILN_ERROR_INVALID_HANDLE, std::string(expected) + " handle is NULL");
    const std::uint64_t kind = handle & kKindMask;
    const std::uint64_t id = handle >> kKindBits;
    if (kind != static_cast<std::uint64_t>(KindOf<T>::value)) {
      const bool known = kind >= 1 && kind <= static_cast<std::uint64_t>(Kind::blob);
      char text[160];
      std::snprintf(text, sizeof text, "handle 0x%llx is %s%s, not a handle of kind %s",
                    static_cast<unsigned long long>(handle), known ? "a handle of kind " : "not a kiln handle",
                    known ? kind_name(kind) : "", expected);
      throw ApiError(KILN_ERROR_INVALID_HANDLE, text);
    }
    return id;
  }

  template <typename T>
  std::string describe_missing(std::uint64_t handle, std::uint64_t id) const {
    const char* name = kind_name(static_cast<std::uint64_t>(KindOf<T>::value));
    char text[200];
    if (id != 0 && id < m_next_id.load(std::memory_order_relaxed)) {
      std::snprintf(
          text, sizeof text, "%s handle 0x%llx was destroyed%s", name, static_cast<unsigned long long>(handle),
          KindOf<T>::value == Kind::program || KindOf<T>::value == Kind::kernel ? " (or its engine was destroyed)"
                                                                                : "");
    } else {
      std::snprintf(text, sizeof text, "%s handle 0x%llx is not a kiln handle", name,
                    static_cast<unsigned long long>(handle));
    }
    return text;
  }

  template <typename T>
  auto& table() {
    if constexpr (std::is_same_v<T, EngineObject>)
      return m_engines;
    else if constexpr (std::is_same_v<T, SourceObject>)
      return m_sources;
    else if constexpr (std::is_same_v<T, ProgramObject>)
      return m_programs;
    else if constexpr (std::is_same_v<T, KernelObject>)
      return m_kernels;
    else if constexpr (std::is_same_v<T, BinaryObject>)
      return m_binaries;
    else
      return m_blobs;
  }
  template <typename T>
  const auto& table() const {
    return const_cast<Registry*>(this)->table<T>();  // NOLINT(cppcoreguidelines-pro-type-const-cast)
  }

  mutable std::shared_mutex m_mutex;
  std::atomic<std::uint64_t> m_next_id{1};
  std::unordered_map<std::uint64_t, std::shared_ptr<EngineObject>> m_engines;
  std::unordered_map<std::uint64_t, std::shared_ptr<SourceObject>> m_sources;
  std::unordered_map<std::uint64_t, std::shared_ptr<ProgramObject>> m_programs;
  std::unordered_map<std::uint64_t, std::shared_ptr<KernelObject>> m_kernels;
  std::unordered_map<std::uint64_t, std::shared_ptr<BinaryObject>> m_binaries;
  std::unordered_map<std::uint64_t, std::shared_ptr<BlobObject>> m_blobs;
};

/// Never destroyed: handles may be used (and report errors) during static destruction.
Registry& registry() {
  static auto* instance = new Registry();  // NOLINT(cppcoreguidelines-owning-memory)
  return *instance;
}

template <typename Handle>
std::uint64_t handle_value(Handle handle) noexcept {
  return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(handle));
}
template <typename Handle>
Handle make_handle(std::uint64_t value) noexcept {
  return reinterpret_cast<Handle>(static_cast<std::uintptr_t>(value));  // NOLINT(performance-no-int-to-ptr)
}

// ---------------------------------------------------------------------------------------------------
// Conversions

std::vector<std::string> string_array(const char* const* items, std::size_t count, const char* what) {
  std::vector<std::string> result;
  if (count == 0) return result;
  if (items == nullptr) invalid_argument(std::string(what) + " is NULL but its count is " + std::to_string(count));
  result.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    if (items[i] == nullptr) invalid_argument(std::string(what) + "[" + std::to_string(i) + "] is NULL");
    result.emplace_back(items[i]);
  }
  return result;
}

kiln_origin to_c(kiln::Origin origin) noexcept {
  switch (origin) {
    case kiln::Origin::memory:
      return KILN_ORIGIN_MEMORY;
    case kiln::Origin::disk:
      return KILN_ORIGIN_DISK;
    case kiln::Origin::compiled:
      return KILN_ORIGIN_COMPILED;
    case kiln::Origin::pack:
      return KILN_ORIGIN_PACK;
    case kiln::Origin::remote:
      return KILN_ORIGIN_REMOTE;
  }
  return KILN_ORIGIN_COMPILED;
}

kiln_vendor to_c(kiln::Vendor vendor) noexcept {
  switch (vendor) {
    case kiln::Vendor::cuda:
      return KILN_VENDOR_CUDA;
    case kiln::Vendor::hip:
      return KILN_VENDOR_HIP;
    case kiln::Vendor::none:
      break;
  }
  return KILN_VENDOR_AUTO;
}

kiln::EngineConfig engine_config(const kiln_engine_config* config) {
  kiln::EngineConfig result = kiln::EngineConfig::from_environment();
  if (config == nullptr) return result;
  if (config->size < sizeof(kiln_engine_config)) {
    invalid_argument("config->size is " + std::to_string(config->size) + ", expected at least " +
                     std::to_string(sizeof(kiln_engine_config)) + " (call kiln_engine_config_init first)");
  }
  // A newer header may have appended fields; they are accepted only while left at zero.
  const auto* bytes = reinterpret_cast<const unsigned char*>(config);
  for (std::size_t i = sizeof(kiln_engine_config); i < config->size; ++i) {
    if (bytes[i] != 0) {
      invalid_argument("config sets fields this library does not know (config->size " + std::to_string(config->size) +
                       ", this library knows " + std::to_string(sizeof(kiln_engine_config)) +
                       " bytes): a kiln.h newer than libkiln (API version " + std::to_string(KILN_API_VERSION) + ")");
    }
  }
  switch (config->vendor) {
    case KILN_VENDOR_AUTO:
      break;
    case KILN_VENDOR_CUDA:
      result.vendor = kiln::Vendor::cuda;
      break;
    case KILN_VENDOR_HIP:
      result.vendor = kiln::Vendor::hip;
      break;
    default:
      invalid_argument("config->vendor " + std::to_string(static_cast<int>(config->vendor)) + " is not a kiln_vendor");
  }
  if (config->device < -1) invalid_argument("config->device " + std::to_string(config->device) + " is negative");
  if (config->device >= 0) result.device = config->device;
  if (config->cache_dir != nullptr) {
    if (config->cache_dir[0] == '\0') invalid_argument("config->cache_dir is empty (use NULL for the default)");
    result.cache.root = config->cache_dir;
  }
  constexpr std::uint32_t kKnownFlags = KILN_ENGINE_CACHE_DISABLE | KILN_ENGINE_CACHE_READONLY;
  if ((config->flags & ~kKnownFlags) != 0) {
    char text[96];
    std::snprintf(text, sizeof text, "config->flags has unknown bits 0x%x", config->flags & ~kKnownFlags);
    invalid_argument(text);
  }
  if ((config->flags & KILN_ENGINE_CACHE_DISABLE) != 0) result.cache.disabled = true;
  if ((config->flags & KILN_ENGINE_CACHE_READONLY) != 0) result.cache.read_only = true;
  if (config->cache_max_size != 0) result.cache.max_size = config->cache_max_size;
  return result;
}

/// A blob call's (namespace, key) as the cache takes them, after the C layer's checks: a NULL where bytes
/// are needed, and what cache::blob_key_problem refuses (empty, too long), are INVALID_ARGUMENT.
std::pair<std::string_view, std::span<const std::byte>> blob_arguments(const char* name_space, const void* key,
                                                                       std::size_t key_size) {
  require(name_space, "name_space");
  if (key == nullptr && key_size != 0) invalid_argument("key is NULL but key_size is " + std::to_string(key_size));
  const std::string_view space(name_space);
  const std::span<const std::byte> bytes(static_cast<const std::byte*>(key), key == nullptr ? 0 : key_size);
  if (auto problem = kiln::cache::blob_key_problem(space, bytes)) invalid_argument(*problem);
  return {space, bytes};
}

/// Places arguments as the binary declares them when it does, else at natural alignment.
void pack_arguments(const kiln::Kernel& kernel, const void* const* args, const std::size_t* sizes, std::size_t count,
                    kiln::ArgPack& pack) {
  if (count == 0) return;
  if (args == nullptr) invalid_argument("args is NULL but arg_count is " + std::to_string(count));
  if (sizes == nullptr) invalid_argument("arg_sizes is NULL but arg_count is " + std::to_string(count));
  const auto& declared = kernel.params();
  for (std::size_t i = 0; i < count; ++i) {
    if (args[i] == nullptr) invalid_argument("args[" + std::to_string(i) + "] is NULL");
    const std::size_t size = sizes[i];
    if (size == 0) invalid_argument("arg_sizes[" + std::to_string(i) + "] is 0");
    std::size_t alignment = 1;
    while (alignment < size && alignment < 8) alignment *= 2;  // natural: min(pow2 ceiling of size, 8)
    if (declared && i < declared->size() && (*declared)[i].size == size) {
      // The smallest power-of-two alignment that lands exactly on the declared offset. When none does,
      // the natural one stays and the launch's layout check reports the mismatch.
      const std::size_t offset = (*declared)[i].offset;
      const std::size_t current = pack.size();
      for (std::size_t candidate = 1; candidate <= kiln::ArgPack::kMaxBytes; candidate *= 2) {
        if (((current + candidate - 1) & ~(candidate - 1)) == offset) {
          alignment = candidate;
          break;
        }
      }
    }
    pack.push_bytes(args[i], size, alignment);
  }
}

// Built-in names, computed once (the set is fixed at build time), so the strings can be handed out.
const std::vector<std::string>& builtin_names() {
  static const std::vector<std::string> names = kiln::Source::builtin_names();
  return names;
}

void free_engine_memory(EngineObject& object) noexcept {
  std::unordered_map<void*, int> buffers;
  std::unordered_map<void*, int> streams;
  {
    const std::lock_guard lock(object.memory_mutex);
    object.destroyed = true;
    buffers.swap(object.buffers);
    streams.swap(object.streams);
  }
  for (const auto& [pointer, device] : buffers) object.engine.free(pointer, device);
  for (const auto& [stream, device] : streams) object.engine.destroy_stream(stream, device);
}

}  // namespace

// -----------------------------------------------------------------------------------------------------
// The extern "C" functions

extern "C" {

int kiln_api_version(void) { return KILN_API_VERSION; }

const char* kiln_status_name(kiln_status status) {
  switch (status) {
    case KILN_OK:
      return "KILN_OK";
    case KILN_ERROR_INVALID_ARGUMENT:
      return "KILN_ERROR_INVALID_ARGUMENT";
    case KILN_ERROR_INVALID_HANDLE:
      return "KILN_ERROR_INVALID_HANDLE";
    case KILN_ERROR_COMPILE:
      return "KILN_ERROR_COMPILE";
    case KILN_ERROR_LOAD:
      return "KILN_ERROR_LOAD";
    case KILN_ERROR_LAUNCH:
      return "KILN_ERROR_LAUNCH";
    case KILN_ERROR_CONFIG:
      return "KILN_ERROR_CONFIG";
    case KILN_ERROR_DEVICE_UNAVAILABLE:
      return "KILN_ERROR_DEVICE_UNAVAILABLE";
    case KILN_ERROR_OUT_OF_MEMORY:
      return "KILN_ERROR_OUT_OF_MEMORY";
    case KILN_ERROR_INTERNAL:
      return "KILN_ERROR_INTERNAL";
  }
  return "KILN_ERROR_UNKNOWN";
}

const char* kiln_last_error(void) { return t_last_error.c_str(); }
const char* kiln_last_compile_log(void) { return t_last_compile_log.c_str(); }

// --- engine ---

void kiln_engine_config_init(kiln_engine_config* config) {
  if (config == nullptr) return;
  std::memset(config, 0, sizeof *config);
  config->size = sizeof *config;
  config->vendor = KILN_VENDOR_AUTO;
  config->device = -1;
}

kiln_status kiln_engine_create(const kiln_engine_config* config, kiln_engine* engine) {
  return guarded(__func__, [&] {
    require(engine, "engine");
    auto object = std::make_shared<EngineObject>(engine_config(config));
    *engine = make_handle<kiln_engine>(registry().add(std::move(object)));
  });
}

kiln_status kiln_engine_destroy(kiln_engine engine) {
  return guarded(__func__, [&] {
    std::vector<std::shared_ptr<ProgramObject>> programs;
    std::vector<std::shared_ptr<KernelObject>> kernels;
    auto object = registry().remove_engine(handle_value(engine), programs, kernels);
    kernels.clear();
    programs.clear();
    free_engine_memory(*object);
    // The Engine itself dies with the last reference: here, or when a call in flight returns.
  });
}

kiln_status kiln_engine_vendor(kiln_engine engine, kiln_vendor* vendor) {
  return guarded(__func__, [&] {
    auto object = registry().get<EngineObject>(handle_value(engine));
    require(vendor, "vendor");
    *vendor = to_c(object->engine.vendor());
  });
}

kiln_status kiln_engine_device_count(kiln_engine engine, int* count, int* default_device) {
  return guarded(__func__, [&] {
    auto object = registry().get<EngineObject>(handle_value(engine));
    const auto devices = object->engine.devices();
    const int found = static_cast<int>(devices.size());
    const int chosen = found == 0 ? -1 : object->engine.default_device();
    if (count != nullptr) *count = found;
    if (default_device != nullptr) *default_device = chosen;
  });
}

void kiln_device_info_init(kiln_device_info* info) {
  if (info == nullptr) return;
  std::memset(info, 0, sizeof *info);
  info->size = sizeof *info;
}

kiln_status kiln_engine_device_info(kiln_engine engine, int ordinal, kiln_device_info* info) {
  return guarded(__func__, [&] {
    auto object = registry().get<EngineObject>(handle_value(engine));
    require_struct(info, "info");
    const auto devices = object->engine.devices();
    if (ordinal < 0 || static_cast<std::size_t>(ordinal) >= devices.size()) {
      invalid_argument("device " + std::to_string(ordinal) + " is out of range (the engine has " +
                       std::to_string(devices.size()) + " devices)");
    }
    const kiln::DeviceInfo& device = devices[static_cast<std::size_t>(ordinal)];
    info->vendor = to_c(device.vendor);
    info->ordinal = device.ordinal;
    copy_string(info->name, device.name);
    copy_string(info->target, device.target);
    info->warp_size = device.warp_size;
    info->max_threads_per_block = device.max_threads_per_block;
    info->multiprocessors = device.multiprocessors;
    info->total_memory = device.total_memory;
    info->max_shared_per_block = device.max_shared_per_block_optin;
  });
}

void kiln_stats_init(kiln_stats* stats) {
  if (stats == nullptr) return;
  std::memset(stats, 0, sizeof *stats);
  stats->size = sizeof *stats;
}

kiln_status kiln_engine_stats(kiln_engine engine, kiln_stats* stats) {
  return guarded(__func__, [&] {
    auto object = registry().get<EngineObject>(handle_value(engine));
    // A caller built against API version 2 passes the struct as it ended then (at remote_errors).
    constexpr std::size_t kVersion2Size = offsetof(kiln_stats, manifest_hits);
    require(stats, "stats");
    if (stats->size < kVersion2Size) {
      invalid_argument("stats->size is " + std::to_string(stats->size) + ", expected at least " +
                       std::to_string(kVersion2Size) + " (call kiln_stats_init first)");
    }
    const kiln::cache::Counters c = object->engine.stats();
    // Each counter that fits in the caller's struct (an older caller's ends sooner).
#define KILN_COPY_COUNTER(field) \
  if (offsetof(kiln_stats, field) + sizeof(stats->field) <= stats->size) stats->field = c.field;
    KILN_CACHE_COUNTERS(KILN_COPY_COUNTER)
#undef KILN_COPY_COUNTER
  });
}

// --- sources ---

kiln_status kiln_source_from_text(const char* name, const char* text, const kiln_header* headers, size_t header_count,
                                  kiln_source* source) {
  return guarded(__func__, [&] {
    require(text, "text");
    require(source, "source");
    std::vector<kiln::Header> copied;
    if (header_count > 0) {
      if (headers == nullptr) invalid_argument("headers is NULL but header_count is " + std::to_string(header_count));
      copied.reserve(header_count);
      for (std::size_t i = 0; i < header_count; ++i) {
        if (headers[i].name == nullptr) invalid_argument("headers[" + std::to_string(i) + "].name is NULL");
        if (headers[i].text == nullptr) invalid_argument("headers[" + std::to_string(i) + "].text is NULL");
        copied.push_back(kiln::Header{headers[i].name, headers[i].text});
      }
    }
    auto object = std::make_shared<SourceObject>(
        SourceObject{kiln::Source::from_text(name != nullptr ? name : "source.cu", text, std::move(copied))});
    *source = make_handle<kiln_source>(registry().add(std::move(object)));
  });
}

kiln_status kiln_source_builtin(const char* name, kiln_source* source) {
  return guarded(__func__, [&] {
    require(name, "name");
    require(source, "source");
    auto object = std::make_shared<SourceObject>(SourceObject{kiln::Source::builtin(name)});
    *source = make_handle<kiln_source>(registry().add(std::move(object)));
  });
}

kiln_status kiln_source_destroy(kiln_source source) {
  return guarded(__func__, [&] { registry().remove<SourceObject>(handle_value(source)); });
}

kiln_status kiln_builtin_source_name(size_t index, size_t* count, const char** name) {
  return guarded(__func__, [&] {
    const auto& names = builtin_names();
    if (name != nullptr && index >= names.size()) {
      invalid_argument("index " + std::to_string(index) + " is out of range (" + std::to_string(names.size()) +
                       " built-in sources)");
    }
    if (count != nullptr) *count = names.size();
    if (name != nullptr) *name = names[index].c_str();
  });
}

// --- programs and kernels ---

kiln_status kiln_program_create(kiln_engine engine, kiln_source source, const char* const* options, size_t option_count,
                                const char* const* name_expressions, size_t name_count, int device,
                                kiln_program* program) {
  return guarded(__func__, [&] {
    std::uint64_t engine_id = 0;
    auto engine_object = registry().get<EngineObject>(handle_value(engine), &engine_id);
    auto source_object = registry().get<SourceObject>(handle_value(source));
    require(program, "program");
    const kiln::Options parsed(string_array(options, option_count, "options"));
    auto names = string_array(name_expressions, name_count, "name_expressions");
    auto object = std::make_shared<ProgramObject>();
    object->engine_id = engine_id;
    object->program = engine_object->engine.program(source_object->source, parsed, names, device);
    object->kernel_names = object->program.kernel_names();
    object->key_hex = object->program.key().hex();
    object->engine = std::move(engine_object);
    *program = make_handle<kiln_program>(registry().add(std::move(object)));
  });
}

kiln_status kiln_program_destroy(kiln_program program) {
  return guarded(__func__, [&] { registry().remove<ProgramObject>(handle_value(program)); });
}

kiln_status kiln_program_get_kernel(kiln_program program, const char* name, kiln_kernel* kernel) {
  return guarded(__func__, [&] {
    auto program_object = registry().get<ProgramObject>(handle_value(program));
    require(name, "name");
    require(kernel, "kernel");
    auto object = std::make_shared<KernelObject>();
    object->engine_id = program_object->engine_id;
    object->engine = program_object->engine;
    object->kernel = program_object->program.kernel(name);
    *kernel = make_handle<kiln_kernel>(registry().add(std::move(object)));
  });
}

void kiln_program_info_init(kiln_program_info* info) {
  if (info == nullptr) return;
  std::memset(info, 0, sizeof *info);
  info->size = sizeof *info;
}

kiln_status kiln_program_get_info(kiln_program program, kiln_program_info* info) {
  return guarded(__func__, [&] {
    auto object = registry().get<ProgramObject>(handle_value(program));
    require_struct(info, "info");
    copy_string(info->key, object->key_hex);
    copy_string(info->target, object->program.target());
    info->device = object->program.device();
    info->origin = to_c(object->program.origin());
    info->kernel_count = object->kernel_names.size();
  });
}

kiln_status kiln_program_kernel_name(kiln_program program, size_t index, const char** name) {
  return guarded(__func__, [&] {
    auto object = registry().get<ProgramObject>(handle_value(program));
    require(name, "name");
    if (index >= object->kernel_names.size()) {
      invalid_argument("index " + std::to_string(index) + " is out of range (the program has " +
                       std::to_string(object->kernel_names.size()) + " kernels)");
    }
    *name = object->kernel_names[index].c_str();  // owned by the program object, which the handle keeps
  });
}

kiln_status kiln_kernel_get(kiln_engine engine, kiln_source source, const char* name, const char* const* options,
                            size_t option_count, int device, kiln_kernel* kernel) {
  return guarded(__func__, [&] {
    std::uint64_t engine_id = 0;
    auto engine_object = registry().get<EngineObject>(handle_value(engine), &engine_id);
    auto source_object = registry().get<SourceObject>(handle_value(source));
    require(name, "name");
    require(kernel, "kernel");
    if (name[0] == '\0') invalid_argument("name is empty");
    const kiln::Options parsed(string_array(options, option_count, "options"));
    auto object = std::make_shared<KernelObject>();
    object->engine_id = engine_id;
    object->kernel = engine_object->engine.kernel(source_object->source, name, parsed, device);
    object->engine = std::move(engine_object);
    *kernel = make_handle<kiln_kernel>(registry().add(std::move(object)));
  });
}

kiln_status kiln_kernel_destroy(kiln_kernel kernel) {
  return guarded(__func__, [&] { registry().remove<KernelObject>(handle_value(kernel)); });
}

void kiln_kernel_info_init(kiln_kernel_info* info) {
  if (info == nullptr) return;
  std::memset(info, 0, sizeof *info);
  info->size = sizeof *info;
}

kiln_status kiln_kernel_get_info(kiln_kernel kernel, kiln_kernel_info* info) {
  return guarded(__func__, [&] {
    auto object = registry().get<KernelObject>(handle_value(kernel));
    require_struct(info, "info");
    const kiln::Kernel& k = object->kernel;
    info->device = k.device();
    info->max_threads_per_block = k.max_threads_per_block();
    info->param_count = k.params() ? static_cast<int>(k.params()->size()) : -1;
    info->name = k.name().c_str();  // owned by the kernel state, which the handle keeps
    info->lowered_name = k.lowered_name().c_str();
    info->native_handle = k.native_handle();
  });
}

kiln_status kiln_kernel_param(kiln_kernel kernel, size_t index, size_t* offset, size_t* size) {
  return guarded(__func__, [&] {
    auto object = registry().get<KernelObject>(handle_value(kernel));
    require(offset, "offset");
    require(size, "size");
    const auto& params = object->kernel.params();
    if (!params) {
      throw kiln::LoadError("the driver does not report the parameter layout of kernel '" + object->kernel.name() +
                            "'");
    }
    if (index >= params->size()) {
      invalid_argument("index " + std::to_string(index) + " is out of range (kernel '" + object->kernel.name() +
                       "' has " + std::to_string(params->size()) + " parameters)");
    }
    *offset = (*params)[index].offset;
    *size = (*params)[index].size;
  });
}

kiln_status kiln_kernel_launch(kiln_kernel kernel, uint32_t grid_x, uint32_t grid_y, uint32_t grid_z, uint32_t block_x,
                               uint32_t block_y, uint32_t block_z, uint32_t shared_bytes, void* stream,
                               const void* const* args, const size_t* arg_sizes, size_t arg_count) {
  return guarded(__func__, [&] {
    auto object = registry().get<KernelObject>(handle_value(kernel));
    if (grid_x == 0 || grid_y == 0 || grid_z == 0 || block_x == 0 || block_y == 0 || block_z == 0) {
      invalid_argument("grid (" + std::to_string(grid_x) + ", " + std::to_string(grid_y) + ", " +
                       std::to_string(grid_z) + ") and block (" + std::to_string(block_x) + ", " +
                       std::to_string(block_y) + ", " + std::to_string(block_z) + ") must have no zero dimension");
    }
    if (arg_count > kiln::ArgPack::kMaxArgs) {
      invalid_argument("arg_count " + std::to_string(arg_count) + " is above the limit of " +
                       std::to_string(kiln::ArgPack::kMaxArgs));
    }
    kiln::ArgPack pack;
    pack_arguments(object->kernel, args, arg_sizes, arg_count, pack);
    kiln::LaunchConfig config;
    config.grid = kiln::Dim3(grid_x, grid_y, grid_z);
    config.block = kiln::Dim3(block_x, block_y, block_z);
    config.shared_bytes = shared_bytes;
    config.stream = stream;
    object->kernel.launch_packed(config, pack);
  });
}

// --- prewarm ---

void kiln_prewarm_result_init(kiln_prewarm_result* result) {
  if (result == nullptr) return;
  std::memset(result, 0, sizeof *result);
  result->size = sizeof *result;
}

kiln_status kiln_prewarm(kiln_engine engine, kiln_source source, const char* const* options, size_t option_count,
                         const char* const* name_expressions, size_t name_count, const char* target,
                         kiln_prewarm_result* result) {
  return guarded(__func__, [&] {
    auto engine_object = registry().get<EngineObject>(handle_value(engine));
    auto source_object = registry().get<SourceObject>(handle_value(source));
    require(target, "target");
    if (result != nullptr) require_struct(result, "result");
    const kiln::Options parsed(string_array(options, option_count, "options"));
    const auto names = string_array(name_expressions, name_count, "name_expressions");
    const kiln::PrewarmResult outcome = engine_object->engine.prewarm(source_object->source, parsed, names, target);
    if (result == nullptr) return;
    copy_string(result->key, outcome.key.hex());
    copy_string(result->target, outcome.target);
    result->origin = to_c(outcome.origin);
    result->seconds = outcome.seconds;
    result->binary_bytes = outcome.binary_bytes;
    result->stored = outcome.stored ? 1 : 0;
  });
}

// --- compile only ---

kiln_status kiln_compile(kiln_engine engine, kiln_source source, const char* const* options, size_t option_count,
                         const char* const* name_expressions, size_t name_count, const char* target,
                         kiln_binary* binary) {
  return guarded(__func__, [&] {
    auto engine_object = registry().get<EngineObject>(handle_value(engine));
    auto source_object = registry().get<SourceObject>(handle_value(source));
    require(binary, "binary");
    const kiln::Options parsed(string_array(options, option_count, "options"));
    const auto names = string_array(name_expressions, name_count, "name_expressions");
    auto object = std::make_shared<BinaryObject>();
    object->binary = engine_object->engine.compile(source_object->source, parsed, names,
                                                   target != nullptr ? std::string_view(target) : "native");
    object->key_hex = object->binary.key().hex();
    *binary = make_handle<kiln_binary>(registry().add(std::move(object)));
  });
}

kiln_status kiln_binary_destroy(kiln_binary binary) {
  return guarded(__func__, [&] { registry().remove<BinaryObject>(handle_value(binary)); });
}

void kiln_binary_info_init(kiln_binary_info* info) {
  if (info == nullptr) return;
  std::memset(info, 0, sizeof *info);
  info->size = sizeof *info;
}

kiln_status kiln_binary_get_info(kiln_binary binary, kiln_binary_info* info) {
  return guarded(__func__, [&] {
    auto object = registry().get<BinaryObject>(handle_value(binary));
    require_struct(info, "info");
    const kiln::CompiledBinary& b = object->binary;
    const std::span<const std::byte> bytes = b.bytes();
    info->data = bytes.data();  // owned by the binary's state, which the handle keeps
    info->data_size = bytes.size();
    switch (b.kind()) {
      case kiln::BinaryKind::cubin:
        info->kind = KILN_BINARY_CUBIN;
        break;
      case kiln::BinaryKind::ptx:
        info->kind = KILN_BINARY_PTX;
        break;
      case kiln::BinaryKind::amd_code_object:
        info->kind = KILN_BINARY_AMD_CODE_OBJECT;
        break;
      case kiln::BinaryKind::ltoir:
        info->kind = KILN_BINARY_LTOIR;
        break;
    }
    copy_string(info->target, b.target());
    copy_string(info->key, object->key_hex);
    info->origin = to_c(b.origin());
    info->name_count = b.lowered_names().size();
    info->seconds = b.seconds();
  });
}

kiln_status kiln_binary_name(kiln_binary binary, size_t index, const char** expression, const char** lowered) {
  return guarded(__func__, [&] {
    auto object = registry().get<BinaryObject>(handle_value(binary));
    const auto& names = object->binary.lowered_names();
    if (index >= names.size()) {
      invalid_argument("index " + std::to_string(index) + " is out of range (the binary has " +
                       std::to_string(names.size()) + " name expressions)");
    }
    // Owned by the binary's state, which the handle keeps.
    if (expression != nullptr) *expression = names[index].first.c_str();
    if (lowered != nullptr) *lowered = names[index].second.c_str();
  });
}

kiln_status kiln_binary_lowered_name(kiln_binary binary, const char* expression, const char** lowered) {
  return guarded(__func__, [&] {
    auto object = registry().get<BinaryObject>(handle_value(binary));
    require(expression, "expression");
    require(lowered, "lowered");
    const std::string* found = object->binary.lowered_name(expression);
    if (found == nullptr) {
      std::string known;
      for (const auto& [name, symbol] : object->binary.lowered_names()) {
        if (!known.empty()) known += ", ";
        known += "'" + name + "'";
      }
      invalid_argument("'" + std::string(expression) + "' is not a name expression of this binary's request (it has " +
                       (known.empty() ? std::string("none") : known) + ")");
    }
    *lowered = found->c_str();
  });
}

kiln_status kiln_binary_log(kiln_binary binary, const char** log) {
  return guarded(__func__, [&] {
    auto object = registry().get<BinaryObject>(handle_value(binary));
    require(log, "log");
    *log = object->binary.log().c_str();
  });
}

// --- entries under a caller's key (blobs) ---

kiln_status kiln_blob_put(kiln_engine engine, const char* name_space, const void* key, size_t key_size,
                          const void* data, size_t size, int* stored) {
  return guarded(__func__, [&] {
    auto object = registry().get<EngineObject>(handle_value(engine));
    const auto [space, bytes] = blob_arguments(name_space, key, key_size);
    if (data == nullptr && size != 0) invalid_argument("data is NULL but size is " + std::to_string(size));
    const std::span<const std::byte> value(static_cast<const std::byte*>(data), data == nullptr ? 0 : size);
    const std::uint64_t limit = object->engine.store().config().limits.max_payload_bytes;
    if (value.size() > limit) {
      invalid_argument("size " + std::to_string(value.size()) + " is over the cache's payload limit of " +
                       std::to_string(limit) + " bytes");
    }
    const bool took = kiln::cache::blob_put(object->engine.storage(), space, bytes, value);
    if (stored != nullptr) *stored = took ? 1 : 0;
  });
}

kiln_status kiln_blob_get(kiln_engine engine, const char* name_space, const void* key, size_t key_size,
                          kiln_blob* blob) {
  return guarded(__func__, [&] {
    auto object = registry().get<EngineObject>(handle_value(engine));
    require(blob, "blob");
    const auto [space, bytes] = blob_arguments(name_space, key, key_size);
    auto found = kiln::cache::blob_get(object->engine.storage(), space, bytes);
    if (!found) {
      *blob = nullptr;
      return;
    }
    auto result = std::make_shared<BlobObject>();
    result->entry = std::move(found->entry);
    switch (found->origin) {
      case kiln::cache::HitOrigin::local:
        result->origin = KILN_ORIGIN_DISK;
        break;
      case kiln::cache::HitOrigin::pack:
        result->origin = KILN_ORIGIN_PACK;
        break;
      case kiln::cache::HitOrigin::remote:
        result->origin = KILN_ORIGIN_REMOTE;
        break;
    }
    *blob = make_handle<kiln_blob>(registry().add(std::move(result)));
  });
}

kiln_status kiln_blob_data(kiln_blob blob, const void** data, size_t* size, kiln_origin* origin) {
  return guarded(__func__, [&] {
    auto object = registry().get<BlobObject>(handle_value(blob));
    require(data, "data");
    require(size, "size");
    *data = object->entry->payload.data();  // owned by the entry, which the handle keeps
    *size = object->entry->payload.size();
    if (origin != nullptr) *origin = object->origin;
  });
}

kiln_status kiln_blob_destroy(kiln_blob blob) {
  return guarded(__func__, [&] { registry().remove<BlobObject>(handle_value(blob)); });
}

kiln_status kiln_blob_remove(kiln_engine engine, const char* name_space, const void* key, size_t key_size,
                             int* removed) {
  return guarded(__func__, [&] {
    auto object = registry().get<EngineObject>(handle_value(engine));
    const auto [space, bytes] = blob_arguments(name_space, key, key_size);
    const bool gone = kiln::cache::blob_remove(object->engine.storage(), space, bytes);
    if (removed != nullptr) *removed = gone ? 1 : 0;
  });
}

kiln_status kiln_blob_count(kiln_engine engine, const char* name_space, uint64_t* count) {
  return guarded(__func__, [&] {
    auto object = registry().get<EngineObject>(handle_value(engine));
    require(count, "count");
    const std::string_view space = blob_arguments(name_space, nullptr, 0).first;
    *count = kiln::cache::blob_count(object->engine.store(), space);
  });
}

kiln_status kiln_blob_clear(kiln_engine engine, const char* name_space, uint64_t* removed) {
  return guarded(__func__, [&] {
    auto object = registry().get<EngineObject>(handle_value(engine));
    const std::string_view space = blob_arguments(name_space, nullptr, 0).first;
    const std::uint64_t gone = kiln::cache::blob_clear(object->engine.store(), space);
    if (removed != nullptr) *removed = gone;
  });
}

// --- device memory and streams ---

kiln_status kiln_malloc(kiln_engine engine, size_t bytes, int device, void** pointer) {
  return guarded(__func__, [&] {
    auto object = registry().get<EngineObject>(handle_value(engine));
    require(pointer, "pointer");
    if (bytes == 0) invalid_argument("bytes is 0");
    void* allocated = object->engine.allocate(bytes, device);
    const std::lock_guard lock(object->memory_mutex);
    if (object->destroyed) {  // destroyed while allocating: nobody could free this any more
      object->engine.free(allocated, device);
      throw ApiError(KILN_ERROR_INVALID_HANDLE, "the engine was destroyed during the call");
    }
    object->buffers.emplace(allocated, device);
    *pointer = allocated;
  });
}

kiln_status kiln_free(kiln_engine engine, void* pointer) {
  return guarded(__func__, [&] {
    auto object = registry().get<EngineObject>(handle_value(engine));
    if (pointer == nullptr) return;
    int device = -1;
    {
      const std::lock_guard lock(object->memory_mutex);
      const auto it = object->buffers.find(pointer);
      if (it == object->buffers.end()) {
        char text[128];
        std::snprintf(text, sizeof text, "pointer %p was not allocated by this engine with kiln_malloc (or was freed)",
                      pointer);
        invalid_argument(text);
      }
      device = it->second;
      object->buffers.erase(it);
    }
    object->engine.free(pointer, device);
  });
}

kiln_status kiln_copy_to_device(kiln_engine engine, void* dst, const void* src, size_t bytes, void* stream,
                                int device) {
  return guarded(__func__, [&] {
    auto object = registry().get<EngineObject>(handle_value(engine));
    if (bytes == 0) return;
    require(dst, "dst");
    require(src, "src");
    object->engine.copy_to_device(dst, src, bytes, stream, device);
  });
}

kiln_status kiln_copy_to_host(kiln_engine engine, void* dst, const void* src, size_t bytes, void* stream, int device) {
  return guarded(__func__, [&] {
    auto object = registry().get<EngineObject>(handle_value(engine));
    if (bytes == 0) return;
    require(dst, "dst");
    require(src, "src");
    object->engine.copy_to_host(dst, src, bytes, stream, device);
  });
}

kiln_status kiln_memset(kiln_engine engine, void* dst, int value, size_t bytes, void* stream, int device) {
  return guarded(__func__, [&] {
    auto object = registry().get<EngineObject>(handle_value(engine));
    if (bytes == 0) return;
    require(dst, "dst");
    object->engine.memset(dst, value, bytes, stream, device);
  });
}

kiln_status kiln_stream_create(kiln_engine engine, int device, void** stream) {
  return guarded(__func__, [&] {
    auto object = registry().get<EngineObject>(handle_value(engine));
    require(stream, "stream");
    void* created = object->engine.create_stream(device);
    const std::lock_guard lock(object->memory_mutex);
    if (object->destroyed) {
      object->engine.destroy_stream(created, device);
      throw ApiError(KILN_ERROR_INVALID_HANDLE, "the engine was destroyed during the call");
    }
    object->streams.emplace(created, device);
    *stream = created;
  });
}

kiln_status kiln_stream_destroy(kiln_engine engine, void* stream) {
  return guarded(__func__, [&] {
    auto object = registry().get<EngineObject>(handle_value(engine));
    int device = -1;
    {
      const std::lock_guard lock(object->memory_mutex);
      const auto it = object->streams.find(stream);
      if (it == object->streams.end()) {
        char text[128];
        std::snprintf(text, sizeof text, "stream %p was not created by this engine with kiln_stream_create", stream);
        invalid_argument(text);
      }
      device = it->second;
      object->streams.erase(it);
    }
    object->engine.destroy_stream(stream, device);
  });
}

kiln_status kiln_synchronize(kiln_engine engine, void* stream, int device) {
  return guarded(__func__, [&] {
    auto object = registry().get<EngineObject>(handle_value(engine));
    object->engine.synchronize(stream, device);
  });
}

}  // extern "C"
