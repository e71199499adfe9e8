// The C API: entries under a caller's key (blobs), kiln_blob_*.
#include <vector>

#include "capi_internal.hpp"

using namespace kiln::capi_detail;  // NOLINT(google-build-using-namespace): a part of the C API's body

extern "C" {

// --- entries under a caller's key (blobs) ---

kiln_status kiln_blob_put(kiln_engine engine, const char* name_space, const void* key, size_t key_size,
                          const void* data, size_t size, int* stored) {
  return guarded(__func__, [&] {
    auto object = registry().get<EngineObject>(handle_value(engine));
    const auto [space, bytes] = blob_arguments(name_space, key, key_size);
    if (data == nullptr && size != 0) invalid_argument("data is NULL but size is " + std::to_string(size));
    const std::span<const std::byte> value(static_cast<const std::byte*>(data), data == nullptr ? 0 : size);
    const std::uint64_t limit = object->engine.storage().local().config().limits.max_payload_bytes;
    if (value.size() > limit) {
      invalid_argument("size " + std::to_string(value.size()) + " is over the cache's payload limit of " +
                       std::to_string(limit) + " bytes");
    }
    const bool took = kiln::cache::blob_put(object->engine.storage(), space, bytes, value);
    if (stored != nullptr) *stored = took ? 1 : 0;
  });
}

kiln_status kiln_blob_put_labeled(kiln_engine engine, const char* name_space, const void* key, size_t key_size,
                                  const void* data, size_t size, const kiln_blob_label* labels, size_t label_count,
                                  int* stored) {
  return guarded(__func__, [&] {
    auto object = registry().get<EngineObject>(handle_value(engine));
    const auto [space, bytes] = blob_arguments(name_space, key, key_size);
    if (data == nullptr && size != 0) invalid_argument("data is NULL but size is " + std::to_string(size));
    if (labels == nullptr && label_count != 0) {
      invalid_argument("labels is NULL but label_count is " + std::to_string(label_count));
    }
    if (label_count > KILN_BLOB_MAX_LABELS) {
      invalid_argument(std::to_string(label_count) + " labels, more than KILN_BLOB_MAX_LABELS (" +
                       std::to_string(KILN_BLOB_MAX_LABELS) + ")");
    }
    std::vector<kiln::cache::BlobLabel> copied;
    copied.reserve(label_count);
    for (std::size_t i = 0; i < label_count; ++i) {
      if (labels[i].name == nullptr) invalid_argument("labels[" + std::to_string(i) + "].name is NULL");
      if (labels[i].value == nullptr) invalid_argument("labels[" + std::to_string(i) + "].value is NULL");
      copied.push_back({labels[i].name, labels[i].value});
    }
    if (auto problem = kiln::cache::blob_labels_problem(copied)) invalid_argument(*problem);
    const std::span<const std::byte> value(static_cast<const std::byte*>(data), data == nullptr ? 0 : size);
    const std::uint64_t limit = object->engine.storage().local().config().limits.max_payload_bytes;
    if (value.size() > limit) {
      invalid_argument("size " + std::to_string(value.size()) + " is over the cache's payload limit of " +
                       std::to_string(limit) + " bytes");
    }
    const bool took = kiln::cache::blob_put(object->engine.storage(), space, bytes, value, copied);
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

kiln_status kiln_blob_get_label(kiln_blob blob, size_t index, size_t* count, const char** name, const char** value) {
  return guarded(__func__, [&] {
    auto object = registry().get<BlobObject>(handle_value(blob));
    const auto& labels = object->entry->names;  // a blob's names list holds its labels (kiln/cache/blob.hpp)
    const bool wants_label = name != nullptr || value != nullptr;
    if (wants_label && index >= labels.size()) {
      invalid_argument("index " + std::to_string(index) + " is past the blob's " + std::to_string(labels.size()) +
                       " labels");
    }
    if (count != nullptr) *count = labels.size();
    if (!wants_label) return;
    if (name != nullptr) *name = labels[index].expression.c_str();  // owned by the entry, which the handle keeps
    if (value != nullptr) *value = labels[index].lowered.c_str();
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
    *count = kiln::cache::blob_count(object->engine.storage().local(), space);
  });
}

kiln_status kiln_blob_clear(kiln_engine engine, const char* name_space, uint64_t* removed) {
  return guarded(__func__, [&] {
    auto object = registry().get<EngineObject>(handle_value(engine));
    const std::string_view space = blob_arguments(name_space, nullptr, 0).first;
    const std::uint64_t gone = kiln::cache::blob_clear(object->engine.storage().local(), space);
    if (removed != nullptr) *removed = gone;
  });
}

}  // extern "C"
