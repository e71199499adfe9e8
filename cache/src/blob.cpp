// Entries under a caller's key (blob.hpp): the key, the entry, and the lookups, writes and namespace
// walks over the storage front end and the local store.
#include "kiln/cache/blob.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <ctime>
#include <stdexcept>

#include "kiln/cache/key.hpp"

namespace kiln::cache {
namespace {

std::string_view as_text(std::span<const std::byte> bytes) noexcept {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

/// The canonical key's first two parts for `name_space` and the name of the third: every blob of that
/// namespace, and only those, has a canonical key starting with it (the grammar fixes the order, and each
/// part's length comes before its value, so no other namespace or part can share the prefix).
std::string namespace_prefix(std::string_view name_space) {
  CanonicalKey key;
  key.add("blob", kBlobDomain);
  key.add("namespace", name_space);
  return key.bytes() + "key ";
}

void require_namespace(std::string_view name_space) {
  if (auto problem = blob_key_problem(name_space, {})) throw std::invalid_argument(*problem);
}

/// Calls fn(header) for each blob of `name_space` that the local store holds (its header read and
/// checked; entries in refused shard directories are left out, as lookups leave them).
template <class Fn>
void for_each_blob(const Store& store, std::string_view name_space, Fn&& fn) {
  require_namespace(name_space);
  const std::string prefix = namespace_prefix(name_space);
  for (unsigned shard = 0; shard < Store::kShardCount; ++shard) {
    store.scan_shard(shard, ScanDepth::header, false, [&](const ScannedEntry& e) {
      if (e.header == nullptr || e.shard_refused || e.header->payload_kind != PayloadKind::blob) return;
      if (e.header->canonical_key.starts_with(prefix)) fn(*e.header);
    });
  }
}

}  // namespace

std::optional<std::string> blob_key_problem(std::string_view name_space, std::span<const std::byte> key) {
  if (name_space.empty()) return std::string("the blob namespace is empty");
  if (name_space.find('\0') != std::string_view::npos) return std::string("the blob namespace holds a NUL byte");
  if (name_space.size() > kMaxBlobNamespaceBytes) {
    return fmt::format("the blob namespace is {} bytes long, more than the limit of {}", name_space.size(),
                       kMaxBlobNamespaceBytes);
  }
  if (key.size() > kMaxBlobKeyBytes) {
    return fmt::format("the blob key is {} bytes long, more than the limit of {}", key.size(), kMaxBlobKeyBytes);
  }
  return std::nullopt;
}

BlobKey blob_key(std::string_view name_space, std::span<const std::byte> key) {
  if (auto problem = blob_key_problem(name_space, key)) throw std::invalid_argument(*problem);
  CanonicalKey canonical;
  canonical.add("blob", kBlobDomain);
  canonical.add("namespace", name_space);
  canonical.add("key", as_text(key));
  return BlobKey{canonical.hash(), canonical.bytes()};
}

std::optional<std::string> blob_namespace(std::string_view canonical_key) {
  const auto parts = CanonicalKey::parse(canonical_key);
  return parts ? blob_namespace(*parts) : std::nullopt;
}

std::optional<std::string> blob_namespace(const std::vector<KeyPart>& parts) {
  if (parts.size() != 3 || parts[0].name != "blob" || parts[0].value != kBlobDomain || parts[1].name != "namespace" ||
      parts[2].name != "key") {
    return std::nullopt;
  }
  return parts[1].value;
}

std::optional<std::string> blob_labels_problem(std::span<const BlobLabel> labels) {
  if (labels.size() > kMaxBlobLabels) {
    return fmt::format("{} labels, more than the limit of {}", labels.size(), kMaxBlobLabels);
  }
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const BlobLabel& label = labels[i];
    if (label.name.empty() || label.name.size() > kMaxBlobLabelName) {
      return fmt::format("label {}: a name of {} bytes (1 to {})", i, label.name.size(), kMaxBlobLabelName);
    }
    const bool plain = std::all_of(label.name.begin(), label.name.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
             c == '-';
    });
    if (!plain) return fmt::format("label name \"{}\" holds a character other than A-Z a-z 0-9 _ . -", label.name);
    if (label.value.size() > kMaxBlobLabelValue) {
      return fmt::format("label {}: a value of {} bytes, more than the limit of {}", label.name, label.value.size(),
                         kMaxBlobLabelValue);
    }
    if (label.value.find('\0') != std::string::npos)
      return fmt::format("label {}: the value holds a NUL byte", label.name);
    for (std::size_t j = 0; j < i; ++j) {
      if (labels[j].name == label.name) return fmt::format("label {} given twice", label.name);
    }
  }
  return std::nullopt;
}

Entry blob_entry(const BlobKey& key, std::span<const std::byte> data, std::span<const BlobLabel> labels,
                 const Limits& limits) {
  if (auto problem = blob_labels_problem(labels)) throw std::invalid_argument(*problem);
  Entry entry = blob_entry(key, data, limits);
  entry.names.reserve(labels.size());
  for (const BlobLabel& label : labels) entry.names.push_back({label.name, label.value});
  return entry;
}

std::vector<BlobLabel> blob_labels(const Entry& entry) {
  std::vector<BlobLabel> out;
  if (entry.payload_kind != PayloadKind::blob) return out;
  out.reserve(entry.names.size());
  for (const LoweredName& name : entry.names) out.push_back({name.expression, name.lowered});
  return out;
}

std::optional<std::string_view> blob_label(const EntryHeaderView& header, std::string_view name) {
  if (header.payload_kind != PayloadKind::blob) return std::nullopt;
  std::optional<std::string_view> found;
  header.for_each_name([&](std::string_view label, std::string_view value) {
    if (!found && label == name) found = value;
  });
  return found;
}

std::string_view labeled_target(const EntryHeaderView& header) {
  if (header.payload_kind != PayloadKind::blob) return header.target;
  return blob_label(header, "target").value_or(std::string_view());
}

Entry blob_entry(const BlobKey& key, std::span<const std::byte> data, const Limits& limits) {
  if (data.size() > limits.max_payload_bytes) {
    throw std::invalid_argument(fmt::format("the blob is {} bytes long, more than the cache's payload limit of {}",
                                            data.size(), limits.max_payload_bytes));
  }
  Entry entry;
  entry.vendor = Vendor::none;
  entry.payload_kind = PayloadKind::blob;
  entry.created_unix = static_cast<std::int64_t>(std::time(nullptr));
  entry.key_hash = key.hash;
  entry.canonical_key = key.canonical;
  entry.payload.assign(data.begin(), data.end());
  return entry;
}

std::optional<BlobFound> blob_get(Storage& storage, std::string_view name_space, std::span<const std::byte> key) {
  const BlobKey k = blob_key(name_space, key);
  auto found = storage.find(k.hash, k.canonical);
  // The canonical key was compared on the read, so what is there is this blob; the kind is checked all
  // the same, as a reader of any other entry checks that it got the kind it asked for.
  if (!found || found->entry->payload_kind != PayloadKind::blob) return std::nullopt;
  return BlobFound{std::move(found->entry), found->origin};
}

bool blob_put(Storage& storage, std::string_view name_space, std::span<const std::byte> key,
              std::span<const std::byte> data) {
  const Entry entry = blob_entry(blob_key(name_space, key), data, storage.local().config().limits);
  return storage.store(entry);
}

bool blob_put(Storage& storage, std::string_view name_space, std::span<const std::byte> key,
              std::span<const std::byte> data, std::span<const BlobLabel> labels) {
  const Entry entry = blob_entry(blob_key(name_space, key), data, labels, storage.local().config().limits);
  return storage.store(entry);
}

bool blob_remove(Storage& storage, std::string_view name_space, std::span<const std::byte> key) {
  return storage.remove(blob_key(name_space, key).hash);
}

std::uint64_t blob_count(const Store& store, std::string_view name_space) {
  std::uint64_t count = 0;
  for_each_blob(store, name_space, [&count](const EntryHeaderView&) { ++count; });
  return count;
}

std::uint64_t blob_clear(Store& store, std::string_view name_space) {
  std::vector<Hash128> keys;
  for_each_blob(store, name_space, [&keys](const EntryHeaderView& header) { keys.push_back(header.key_hash); });
  std::uint64_t removed = 0;
  for (const Hash128& key : keys) removed += store.remove(key) ? 1 : 0;
  return removed;
}

}  // namespace kiln::cache
