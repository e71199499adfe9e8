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
#include "capi_internal.hpp"

using namespace kiln::capi_detail;  // NOLINT(google-build-using-namespace): this file is the C API's body

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

kiln_status kiln_engine_record_stats(kiln_engine engine) {
  return guarded(__func__, [&] { registry().get<EngineObject>(handle_value(engine))->engine.record_stats(); });
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

}  // extern "C"
