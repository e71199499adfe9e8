// The C API: device memory, copies and streams (kiln_malloc ... kiln_synchronize).
#include "capi_internal.hpp"

using namespace kiln::capi_detail;  // NOLINT(google-build-using-namespace): a part of the C API's body

extern "C" {

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
