// The C API's shared pieces that are not templates (capi_internal.hpp says what they are for).
#include "capi_internal.hpp"

namespace kiln::capi_detail {

void invalid_argument(std::string message) { throw ApiError(KILN_ERROR_INVALID_ARGUMENT, std::move(message)); }

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

Registry& registry() {
  static auto* instance = new Registry();  // NOLINT(cppcoreguidelines-owning-memory)
  return *instance;
}

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
  constexpr std::uint32_t kKnownFlags = KILN_ENGINE_CACHE_DISABLE | KILN_ENGINE_CACHE_READONLY | KILN_ENGINE_NO_RUNTIME;
  if ((config->flags & ~kKnownFlags) != 0) {
    char text[96];
    std::snprintf(text, sizeof text, "config->flags has unknown bits 0x%x", config->flags & ~kKnownFlags);
    invalid_argument(text);
  }
  if ((config->flags & KILN_ENGINE_CACHE_DISABLE) != 0) result.cache.disabled = true;
  if ((config->flags & KILN_ENGINE_CACHE_READONLY) != 0) result.cache.read_only = true;
  if ((config->flags & KILN_ENGINE_NO_RUNTIME) != 0) result.runtime = false;
  if (config->cache_max_size != 0) result.cache.max_size = config->cache_max_size;
  return result;
}

std::pair<std::string_view, std::span<const std::byte>> blob_arguments(const char* name_space, const void* key,
                                                                       std::size_t key_size) {
  require(name_space, "name_space");
  if (key == nullptr && key_size != 0) invalid_argument("key is NULL but key_size is " + std::to_string(key_size));
  const std::string_view space(name_space);
  const std::span<const std::byte> bytes(static_cast<const std::byte*>(key), key == nullptr ? 0 : key_size);
  if (auto problem = kiln::cache::blob_key_problem(space, bytes)) invalid_argument(*problem);
  return {space, bytes};
}

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

}  // namespace kiln::capi_detail
