#pragma once
// Private to the C API's files (capi.cpp, capi_blob.cpp, capi_memory.cpp): the objects behind the handles,
// the handle registry, guarded() and the conversions they share (bodies that are not templates in
// capi_internal.cpp). The invariants are written at the top of
// capi.cpp.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
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
#include "kiln/kiln.h"
#include "kiln/launch.hpp"
#include "kiln/options.hpp"
#include "kiln/source.hpp"

namespace kiln::capi_detail {

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

[[noreturn]] void invalid_argument(std::string message);

inline thread_local std::string t_last_error;
inline thread_local std::string t_last_compile_log;

/// Records the message of a failing call. Never throws: if the message cannot be stored, a shorter
/// fixed one is.
kiln_status fail(kiln_status status, const char* function, std::string_view message) noexcept;

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
Registry& registry();

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

std::vector<std::string> string_array(const char* const* items, std::size_t count, const char* what);

kiln_origin to_c(kiln::Origin origin) noexcept;

kiln_vendor to_c(kiln::Vendor vendor) noexcept;

kiln::EngineConfig engine_config(const kiln_engine_config* config);

/// A blob call's (namespace, key) as the cache takes them, after the C layer's checks: a NULL where bytes
/// are needed, and what cache::blob_key_problem refuses (empty, too long), are INVALID_ARGUMENT.
std::pair<std::string_view, std::span<const std::byte>> blob_arguments(const char* name_space, const void* key,
                                                                       std::size_t key_size);

/// Places arguments as the binary declares them when it does, else at natural alignment.
void pack_arguments(const kiln::Kernel& kernel, const void* const* args, const std::size_t* sizes, std::size_t count,
                    kiln::ArgPack& pack);

// Built-in names, computed once (the set is fixed at build time), so the strings can be handed out.
const std::vector<std::string>& builtin_names();

void free_engine_memory(EngineObject& object) noexcept;

}  // namespace kiln::capi_detail
