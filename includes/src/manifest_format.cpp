// The dependency manifest's format (the grammar in kiln/includes/dep_manifest.hpp): the one parser and
// the one serializer, and the public parse/serialize/render functions built on them.
#include <fmt/format.h>

#include <cstring>
#include <limits>
#include <stdexcept>
#include <unordered_map>

#include "kiln/base/xxh3.hpp"
#include "kiln/includes/dep_manifest.hpp"
#include "kiln/cache/dependencies.hpp"
#include "le_bytes.hpp"
#include "manifest_view.hpp"

namespace kiln::cache::detail {
namespace {

// Offsets of the fixed part (the grammar in kiln/includes/dep_manifest.hpp).
namespace field {
constexpr std::size_t magic = 0;
constexpr std::size_t format_version = 8;
constexpr std::size_t reserved32 = 12;
constexpr std::size_t request_key = 16;
constexpr std::size_t canonical_len = 32;
constexpr std::size_t path_count = 36;
constexpr std::size_t file_count = 40;
constexpr std::size_t absent_count = 44;
constexpr std::size_t result_count = 48;
constexpr std::size_t index_count = 52;
constexpr std::size_t total_len = 56;
}  // namespace field
static_assert(field::total_len + 8 == kManifestFixedBytes, "the fixed part is 64 bytes: update the grammar");
static_assert(field::request_key + 16 == field::canonical_len);

static_assert(4 + 4 + 5 * 8 + 16 == kManifestFileInfoBytes, "a header info is 64 bytes: update the grammar");

constexpr std::size_t kMinPathBytes = 5;       // length + at least "/"
constexpr std::uint32_t kTrustedFlag = 1;

ContentError too_large(std::string_view what, std::uint64_t value, std::uint64_t limit) {
  return ContentError{fmt::format("{} {} exceeds the limit {}", what, value, limit)};
}

}  // namespace

/// A path as the grammar allows it: 1..max bytes, absolute, no NUL.
std::optional<std::string> bad_path(std::string_view path, std::uint32_t max_bytes) {
  if (path.empty()) return std::string("empty path");
  if (path.size() > max_bytes) return fmt::format("path of {} bytes exceeds the limit {}", path.size(), max_bytes);
  if (path.front() != '/') return std::string("relative path");
  if (path.find('\0') != std::string_view::npos) return std::string("path holds a NUL byte");
  return std::nullopt;
}


/// Checks the fixed part (`f` holds at least its kManifestFixedBytes) of a manifest file of `size` bytes:
/// size, magic, version, reserved field, each count against the limits, total_len, and the minimum size
/// the counts imply. Nothing is allocated before these pass.
std::variant<Fixed, ContentError> check_fixed(const std::byte* f, std::uint64_t size, const ManifestLimits& limits) {
  if (size == 0) return ContentError{"empty file (0 bytes)"};
  if (size < kManifestFixedBytes + 2 * kChecksumBytes) {
    return ContentError{fmt::format("truncated: {} bytes, a manifest needs at least {}", size,
                                    kManifestFixedBytes + 2 * kChecksumBytes)};
  }
  if (size > limits.max_file_bytes) return too_large("file length", size, limits.max_file_bytes);
  if (std::memcmp(f + field::magic, kManifestMagic, sizeof(kManifestMagic)) != 0) {
    return ContentError{"bad magic: not a kiln dependency manifest"};
  }
  if (const std::uint32_t version = load_u32(f + field::format_version); version != kManifestFormatVersion) {
    return ContentError{fmt::format("format version {}, this build reads version {}", version, kManifestFormatVersion)};
  }
  if (load_u32(f + field::reserved32) != 0) return ContentError{"reserved header field is not zero"};
  Fixed fixed;
  fixed.canonical_len = load_u32(f + field::canonical_len);
  fixed.path_count = load_u32(f + field::path_count);
  fixed.file_count = load_u32(f + field::file_count);
  fixed.absent_count = load_u32(f + field::absent_count);
  fixed.result_count = load_u32(f + field::result_count);
  fixed.index_count = load_u32(f + field::index_count);
  const std::uint64_t total_len = load_u64(f + field::total_len);
  if (fixed.canonical_len > limits.max_canonical_bytes) {
    return too_large("canonical key length", fixed.canonical_len, limits.max_canonical_bytes);
  }
  if (fixed.path_count > limits.max_paths) return too_large("path count", fixed.path_count, limits.max_paths);
  if (fixed.file_count > limits.max_files) return too_large("file count", fixed.file_count, limits.max_files);
  if (fixed.absent_count > limits.max_absent) {
    return too_large("absent path count", fixed.absent_count, limits.max_absent);
  }
  if (fixed.result_count > limits.max_results) {
    return too_large("result count", fixed.result_count, limits.max_results);
  }
  if (total_len != size) {
    return ContentError{fmt::format("total_len says {} bytes but the file has {}", total_len, size)};
  }
  // Each count is below 2^32 and each record below 100 bytes: no overflow.
  const std::uint64_t minimum =
      std::uint64_t{fixed.head_size()} + kMinPathBytes * std::uint64_t{fixed.path_count} +
      kManifestFileInfoBytes * std::uint64_t{fixed.file_count} + 4 * std::uint64_t{fixed.absent_count} +
      kResultFixedBytes * std::uint64_t{fixed.result_count} + 4 * std::uint64_t{fixed.index_count} + kChecksumBytes;
  if (minimum > size) {
    return ContentError{fmt::format("truncated: {} bytes, the counts need at least {}", size, minimum)};
  }
  return fixed;
}


/// Parses the head (`bytes` holds at least fixed.head_size() bytes; check_fixed passed): its checksum,
/// the request it belongs to (`expected`, or the hash of its canonical key), the summaries.
std::variant<HeadView, ContentError> parse_head(std::span<const std::byte> bytes, const Fixed& fixed,
                                                const ExpectedRequest* expected) {
  const std::byte* f = bytes.data();
  const std::size_t end = fixed.head_size() - kChecksumBytes;
  if (bytes.size() < fixed.head_size()) return ContentError{"the head is cut off"};
  if (load_hash(f + end) != detail::xxh3_128(f, end, kManifestChecksumSeed)) {
    return ContentError{"head checksum mismatch"};
  }
  HeadView head;
  head.request_key = load_hash(f + field::request_key);
  head.canonical = std::string_view(reinterpret_cast<const char*>(f + kManifestFixedBytes), fixed.canonical_len);
  if (expected != nullptr) {
    if (head.request_key != expected->key || head.canonical != expected->canonical) {
      return ContentError{fmt::format("key mismatch: the manifest belongs to request {}, the request is {}",
                                      head.request_key.hex(), expected->key.hex())};
    }
  } else if (hash128(head.canonical, kKeySeed) != head.request_key) {
    return ContentError{"request key does not match the stored canonical key"};
  }
  head.results.reserve(fixed.result_count);
  for (std::size_t at = kManifestFixedBytes + fixed.canonical_len; at < end; at += detail::kSummaryBytes) {
    head.results.emplace_back(load_hash(f + at),
                              DependencySummary{load_u32(f + at + 32), load_u32(f + at + 36), load_hash(f + at + 16)});
  }
  return head;
}

/// The summary of one result's dependency set (canonical_dependencies of its headers and absent paths).
DependencySummary dependency_summary(const ManifestView& view, const ResultRefs& result) {
  DependencyDigest digest;
  for (const std::uint32_t index : view.result_files(result)) {
    const FileInfo& info = view.files[index];
    digest.add_header(view.paths[info.path], info.digest);
  }
  for (const std::uint32_t index : view.result_absent(result)) digest.add_absent(view.paths[view.absent[index]]);
  return digest.summary();
}

std::variant<ManifestView, ContentError> parse_view(std::span<const std::byte> bytes, const ManifestLimits& limits,
                                                    const ExpectedRequest* expected) {
  const std::uint64_t size = bytes.size();
  // 1. Size, fixed part and counts: all before any allocation.
  if (size < kManifestFixedBytes) {
    if (size == 0) return ContentError{"empty file (0 bytes)"};
    return ContentError{fmt::format("truncated: {} bytes, a manifest needs at least {}", size,
                                    kManifestFixedBytes + 2 * kChecksumBytes)};
  }
  const std::byte* f = bytes.data();
  auto checked = check_fixed(f, size, limits);
  if (auto* error = std::get_if<ContentError>(&checked)) return std::move(*error);
  const Fixed fixed = std::get<Fixed>(checked);
  const std::uint32_t path_count = fixed.path_count, file_count = fixed.file_count,
                      absent_count = fixed.absent_count, result_count = fixed.result_count,
                      index_count = fixed.index_count;
  // 2. The checksum.
  const std::size_t body = static_cast<std::size_t>(size) - kChecksumBytes;
  if (load_hash(f + body) != detail::xxh3_128(f, body, kManifestChecksumSeed)) {
    return ContentError{"checksum mismatch"};
  }
  auto head_parsed = parse_head(bytes, fixed, expected);
  if (auto* error = std::get_if<ContentError>(&head_parsed)) return std::move(*error);
  HeadView& head = std::get<HeadView>(head_parsed);
  // 3. The parts, each within the body.
  ManifestView view;
  view.request_key = head.request_key;
  view.canonical = head.canonical;
  std::size_t at = fixed.head_size();
  const auto remaining = [&] { return body - at; };
  view.paths.reserve(path_count);
  for (std::uint32_t i = 0; i < path_count; ++i) {
    if (remaining() < 4) return ContentError{fmt::format("path {} of {} is cut off", i, path_count)};
    const std::uint32_t length = load_u32(f + at);
    if (length > remaining() - 4) return ContentError{fmt::format("path {} of {} is cut off", i, path_count)};
    const std::string_view path(reinterpret_cast<const char*>(f + at + 4), length);
    if (auto why = bad_path(path, limits.max_path_bytes)) {
      return ContentError{fmt::format("path {} of {}: {}", i, path_count, *why)};
    }
    view.paths.push_back(path);
    at += 4 + std::size_t{length};
  }
  if (remaining() < kManifestFileInfoBytes * std::uint64_t{file_count} + 4 * std::uint64_t{absent_count}) {
    return ContentError{"header and absent tables are cut off"};
  }
  view.files.reserve(file_count);
  for (std::uint32_t i = 0; i < file_count; ++i, at += kManifestFileInfoBytes) {
    const std::byte* p = f + at;
    FileInfo info;
    info.path = load_u32(p);
    const std::uint32_t flags = load_u32(p + 4);
    if (info.path >= path_count) {
      return ContentError{fmt::format("header {} names path {} of {}", i, info.path, path_count)};
    }
    if ((flags & ~kTrustedFlag) != 0) return ContentError{fmt::format("header {} has unknown flags {:#x}", i, flags)};
    info.trusted = (flags & kTrustedFlag) != 0;
    info.stat.size = load_u64(p + 8);
    info.stat.mtime_ns = static_cast<std::int64_t>(load_u64(p + 16));
    info.stat.ctime_ns = static_cast<std::int64_t>(load_u64(p + 24));
    info.stat.inode = load_u64(p + 32);
    info.stat.device = load_u64(p + 40);
    info.digest = load_hash(p + 48);
    view.files.push_back(info);
  }
  view.absent.reserve(absent_count);
  for (std::uint32_t i = 0; i < absent_count; ++i, at += 4) {
    const std::uint32_t path = load_u32(f + at);
    if (path >= path_count) return ContentError{fmt::format("absent path {} names path {} of {}", i, path, path_count)};
    view.absent.push_back(path);
  }
  view.results.reserve(result_count);
  view.indices.reserve(index_count);
  for (std::uint32_t i = 0; i < result_count; ++i) {
    if (remaining() < kResultFixedBytes)
      return ContentError{fmt::format("result {} of {} is cut off", i, result_count)};
    ResultRefs result;
    result.key = load_hash(f + at);
    result.files_count = load_u32(f + at + 16);
    result.absent_count = load_u32(f + at + 20);
    at += kResultFixedBytes;
    const std::uint64_t refs = std::uint64_t{result.files_count} + result.absent_count;
    if (refs > index_count - view.indices.size() || 4 * refs > remaining()) {
      return ContentError{fmt::format("result {} of {}: {} indices do not fit", i, result_count, refs)};
    }
    result.files_begin = static_cast<std::uint32_t>(view.indices.size());
    for (std::uint32_t k = 0; k < result.files_count; ++k, at += 4) {
      const std::uint32_t index = load_u32(f + at);
      if (index >= file_count) {
        return ContentError{fmt::format("result {} names header {} of {}", i, index, file_count)};
      }
      view.indices.push_back(index);
    }
    result.absent_begin = static_cast<std::uint32_t>(view.indices.size());
    for (std::uint32_t k = 0; k < result.absent_count; ++k, at += 4) {
      const std::uint32_t index = load_u32(f + at);
      if (index >= absent_count) {
        return ContentError{fmt::format("result {} names absent path {} of {}", i, index, absent_count)};
      }
      view.indices.push_back(index);
    }
    view.results.push_back(result);
  }
  if (view.indices.size() != index_count) {
    return ContentError{fmt::format("results hold {} indices, the header says {}", view.indices.size(), index_count)};
  }
  if (at != body) return ContentError{fmt::format("{} unused bytes before the checksum", body - at)};
  // 4. Each summary is its result's.
  view.summaries.reserve(result_count);
  for (std::uint32_t i = 0; i < result_count; ++i) {
    const auto& [key, summary] = head.results[i];
    if (key != view.results[i].key || summary != dependency_summary(view, view.results[i])) {
      return ContentError{fmt::format("result {} of {}: the head's summary is not the result's", i, result_count)};
    }
    view.summaries.push_back(summary);
  }
  return view;
}

std::vector<std::byte> serialize_view(const ManifestView& view) {
  constexpr std::uint64_t kMaxU32 = std::numeric_limits<std::uint32_t>::max();
  if (view.canonical.size() > kMaxU32 || view.paths.size() > kMaxU32 || view.files.size() > kMaxU32 ||
      view.absent.size() > kMaxU32 || view.results.size() > kMaxU32 || view.indices.size() > kMaxU32) {
    throw std::length_error("dependency manifest field longer than 4 GiB cannot be serialized");
  }
  for (const std::string_view path : view.paths) {
    if (path.size() > kMaxU32) throw std::length_error("dependency manifest path longer than 4 GiB");
  }
  const std::uint64_t total = view.byte_size();
  std::vector<std::byte> out(static_cast<std::size_t>(total));
  std::byte* const begin = out.data();
  std::byte* p = begin;
  std::memcpy(p + field::magic, kManifestMagic, sizeof(kManifestMagic));
  store_le(p + field::format_version, kManifestFormatVersion, 4);
  store_hash(p + field::request_key, view.request_key);
  store_le(p + field::canonical_len, view.canonical.size(), 4);
  store_le(p + field::path_count, view.paths.size(), 4);
  store_le(p + field::file_count, view.files.size(), 4);
  store_le(p + field::absent_count, view.absent.size(), 4);
  store_le(p + field::result_count, view.results.size(), 4);
  store_le(p + field::index_count, view.indices.size(), 4);
  store_le(p + field::total_len, total, 8);
  p += kManifestFixedBytes;
  const auto put_bytes = [&p](const void* data, std::size_t count) {
    if (count != 0) std::memcpy(p, data, count);
    p += count;
  };
  const auto put_u32 = [&p](std::uint64_t value) {
    store_le(p, value, 4);
    p += 4;
  };
  put_bytes(view.canonical.data(), view.canonical.size());
  for (const ResultRefs& result : view.results) {
    const DependencySummary summary = dependency_summary(view, result);
    if (summary.headers > kMaxU32 || summary.absent > kMaxU32) {
      throw std::length_error("dependency manifest result with over 2^32 headers cannot be serialized");
    }
    store_hash(p, result.key);
    store_hash(p + 16, summary.digest);
    store_le(p + 32, summary.headers, 4);
    store_le(p + 36, summary.absent, 4);
    p += detail::kSummaryBytes;
  }
  store_hash(p, detail::xxh3_128(begin, static_cast<std::size_t>(p - begin), kManifestChecksumSeed));
  p += kChecksumBytes;
  for (const std::string_view path : view.paths) {
    put_u32(path.size());
    put_bytes(path.data(), path.size());
  }
  for (const FileInfo& info : view.files) {
    put_u32(info.path);
    put_u32(info.trusted ? kTrustedFlag : 0);
    store_le(p, info.stat.size, 8);
    store_le(p + 8, static_cast<std::uint64_t>(info.stat.mtime_ns), 8);
    store_le(p + 16, static_cast<std::uint64_t>(info.stat.ctime_ns), 8);
    store_le(p + 24, info.stat.inode, 8);
    store_le(p + 32, info.stat.device, 8);
    store_hash(p + 40, info.digest);
    p += kManifestFileInfoBytes - 8;
  }
  for (const std::uint32_t path : view.absent) put_u32(path);
  for (const ResultRefs& result : view.results) {
    store_hash(p, result.key);
    p += 16;
    put_u32(result.files_count);
    put_u32(result.absent_count);
    for (const std::uint32_t index : view.result_files(result)) put_u32(index);
    for (const std::uint32_t index : view.result_absent(result)) put_u32(index);
  }
  const auto body = static_cast<std::size_t>(p - begin);
  store_hash(p, detail::xxh3_128(begin, body, kManifestChecksumSeed));
  return out;
}

/// Views into `manifest`; throws std::length_error for an index out of range.
ManifestView to_view(const Manifest& manifest) {
  ManifestView view;
  view.request_key = manifest.request_key;
  view.canonical = manifest.request_canonical;
  std::unordered_map<std::string_view, std::uint32_t> path_index;
  const auto intern = [&](std::string_view path) {
    const auto [it, fresh] = path_index.try_emplace(path, static_cast<std::uint32_t>(view.paths.size()));
    if (fresh) view.paths.push_back(path);
    return it->second;
  };
  for (const HeaderRecord& header : manifest.files) {
    view.files.push_back(FileInfo{intern(header.path), header.stat, header.trusted_stat, header.digest});
  }
  for (const std::string& path : manifest.absent) view.absent.push_back(intern(path));
  for (const ManifestResult& result : manifest.results) {
    ResultRefs refs;
    refs.key = result.result_key;
    refs.files_begin = static_cast<std::uint32_t>(view.indices.size());
    refs.files_count = static_cast<std::uint32_t>(result.files.size());
    for (const std::uint32_t index : result.files) {
      if (index >= manifest.files.size()) throw std::length_error("manifest result names a header out of range");
      view.indices.push_back(index);
    }
    refs.absent_begin = static_cast<std::uint32_t>(view.indices.size());
    refs.absent_count = static_cast<std::uint32_t>(result.absent.size());
    for (const std::uint32_t index : result.absent) {
      if (index >= manifest.absent.size()) throw std::length_error("manifest result names an absent path out of range");
      view.indices.push_back(index);
    }
    view.results.push_back(refs);
  }
  return view;
}

Manifest from_view(const ManifestView& view) {
  Manifest manifest;
  manifest.request_key = view.request_key;
  manifest.request_canonical.assign(view.canonical);
  manifest.files.reserve(view.files.size());
  for (const FileInfo& info : view.files) {
    manifest.files.push_back(HeaderRecord{std::string(view.paths[info.path]), info.stat, info.trusted, info.digest});
  }
  manifest.absent.reserve(view.absent.size());
  for (const std::uint32_t path : view.absent) manifest.absent.emplace_back(view.paths[path]);
  manifest.results.reserve(view.results.size());
  for (const ResultRefs& refs : view.results) {
    const auto files = view.result_files(refs);
    const auto absent = view.result_absent(refs);
    manifest.results.push_back(ManifestResult{refs.key, std::vector<std::uint32_t>(files.begin(), files.end()),
                                              std::vector<std::uint32_t>(absent.begin(), absent.end())});
  }
  return manifest;
}

}  // namespace kiln::cache::detail

namespace kiln::cache {

using detail::from_view;
using detail::ManifestView;
using detail::parse_view;
using detail::serialize_view;
using detail::to_view;

std::vector<std::byte> serialize_manifest(const Manifest& manifest) { return serialize_view(to_view(manifest)); }

std::variant<Manifest, ContentError> parse_manifest(std::span<const std::byte> bytes, const ManifestLimits& limits) {
  auto parsed = parse_view(bytes, limits, nullptr);
  if (auto* error = std::get_if<ContentError>(&parsed)) return std::move(*error);
  return from_view(std::get<ManifestView>(parsed));
}

std::string render_manifest(const Manifest& manifest) {
  std::string out = fmt::format("dependency manifest for request {}\n", manifest.request_key.hex());
  out += fmt::format("request canonical key: {} bytes\n", manifest.request_canonical.size());
  out += fmt::format("headers ({}):\n", manifest.files.size());
  for (std::size_t i = 0; i < manifest.files.size(); ++i) {
    const HeaderRecord& h = manifest.files[i];
    out +=
        fmt::format("  [{}] {} {}\n      size {} mtime {}.{:09} ctime {}.{:09} inode {} device {} {}\n", i,
                    h.digest.hex(), h.path, h.stat.size, h.stat.mtime_ns / 1'000'000'000,
                    h.stat.mtime_ns % 1'000'000'000, h.stat.ctime_ns / 1'000'000'000, h.stat.ctime_ns % 1'000'000'000,
                    h.stat.inode, h.stat.device, h.trusted_stat ? "trusted" : "untrusted (re-hashed on every lookup)");
  }
  out += fmt::format("absent paths ({}):\n", manifest.absent.size());
  for (std::size_t i = 0; i < manifest.absent.size(); ++i) out += fmt::format("  [{}] {}\n", i, manifest.absent[i]);
  out += fmt::format("results ({}, newest first):\n", manifest.results.size());
  for (std::size_t i = 0; i < manifest.results.size(); ++i) {
    const ManifestResult& r = manifest.results[i];
    out += fmt::format("  {}. result {}: {} headers, {} absent paths\n", i + 1, r.result_key.hex(), r.files.size(),
                       r.absent.size());
    for (const std::uint32_t f : r.files) {
      if (f < manifest.files.size()) out += fmt::format("       header [{}] {}\n", f, manifest.files[f].path);
    }
    for (const std::uint32_t a : r.absent) {
      if (a < manifest.absent.size()) out += fmt::format("       absent [{}] {}\n", a, manifest.absent[a]);
    }
  }
  return out;
}

}  // namespace kiln::cache
