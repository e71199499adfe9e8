#include "kiln/cache/dep_manifest.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "atomic_file.hpp"
#include "dep_check.hpp"
#include "dep_manifest_view.hpp"
#include "kiln/base/log.hpp"
#include "kiln/base/xxh3.hpp"
#include "posix_util.hpp"

namespace kiln::cache {
namespace {

using detail::Checker;
using detail::describe;
using detail::FileInfo;
using detail::is_absence;
using detail::kChecksumBytes;
using detail::kResultFixedBytes;
using detail::ManifestView;
using detail::Mismatch;
using detail::ResultRefs;
using detail::StatMemo;
using detail::ValidatedSets;

// Offsets of the fixed part (the grammar in dep_manifest.hpp).
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
constexpr std::string_view kManifestDirectory = "manifests";
constexpr std::string_view kManifestSuffix = ".kman";
/// What a lookup reads first when it may be answered from the head: the head of a kernel's manifest
/// (its canonical key holds the source) mostly fits; a longer head is read on.
constexpr std::size_t kHeadRead = 16 * 1024;

// ---- little-endian fields ----------------------------------------------------------------------------

std::uint64_t load_le(const std::byte* p, std::size_t width) noexcept {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < width; ++i) value |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return value;
}
std::uint32_t load_u32(const std::byte* p) noexcept { return static_cast<std::uint32_t>(load_le(p, 4)); }
std::uint64_t load_u64(const std::byte* p) noexcept { return load_le(p, 8); }
Hash128 load_hash(const std::byte* p) noexcept { return Hash128{load_u64(p), load_u64(p + 8)}; }

void store_le(std::byte* p, std::uint64_t value, std::size_t width) noexcept {
  for (std::size_t i = 0; i < width; ++i) p[i] = static_cast<std::byte>((value >> (8 * i)) & 0xFF);
}
void store_hash(std::byte* p, const Hash128& h) noexcept {
  store_le(p, h.high, 8);
  store_le(p + 8, h.low, 8);
}

/// What the caller asked for: compared in place instead of re-hashing the stored canonical key.
struct ExpectedRequest {
  Hash128 key;
  std::string_view canonical;
};

ContentError too_large(std::string_view what, std::uint64_t value, std::uint64_t limit) {
  return ContentError{fmt::format("{} {} exceeds the limit {}", what, value, limit)};
}

/// A path as the grammar allows it: 1..max bytes, absolute, no NUL.
std::optional<std::string> bad_path(std::string_view path, std::uint32_t max_bytes) {
  if (path.empty()) return std::string("empty path");
  if (path.size() > max_bytes) return fmt::format("path of {} bytes exceeds the limit {}", path.size(), max_bytes);
  if (path.front() != '/') return std::string("relative path");
  if (path.find('\0') != std::string_view::npos) return std::string("path holds a NUL byte");
  return std::nullopt;
}

/// The fixed part's counts, checked against the limits and the file's size.
struct Fixed {
  std::uint32_t canonical_len = 0, path_count = 0, file_count = 0, absent_count = 0, result_count = 0,
                index_count = 0;
  /// The head's size: fixed part, canonical key, summaries, head checksum (within the file: checked).
  [[nodiscard]] std::size_t head_size() const noexcept {
    return kManifestFixedBytes + std::size_t{canonical_len} + detail::kSummaryBytes * std::size_t{result_count} +
           kChecksumBytes;
  }
};

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

/// A manifest's head: the request and each result's key with the summary of its dependency set.
struct HeadView {
  Hash128 request_key;
  std::string_view canonical;
  std::vector<std::pair<Hash128, DependencySummary>> results;  ///< newest first
};

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

// ---- files ----------------------------------------------------------------------------------------------

using detail::make_private_dir;
using detail::UniqueFd;

bool is_permission_error(int error) noexcept { return error == EACCES || error == EPERM || error == EROFS; }


/// mkdir -p with mode 0700 for the missing components. Returns 0 or the errno.
int make_private_dirs(const std::string& path) {
  for (std::size_t slash = path.find('/', 1); slash != std::string::npos; slash = path.find('/', slash + 1)) {
    const std::string partial = path.substr(0, slash);
    struct stat st {};
    if (::stat(partial.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) continue;  // e.g. "/home": exists, not ours
    if (const int error = make_private_dir(partial); error != 0) return error;
  }
  return make_private_dir(path);
}

/// Why a directory must not be trusted (another user could plant manifests in it); empty when it may be.
std::string distrust_reason(std::string_view what, const std::string& path, const struct stat& st) {
  if (!S_ISDIR(st.st_mode)) return fmt::format("{} {} is not a directory", what, path);
  if (st.st_uid != ::geteuid()) {
    return fmt::format("{} {} is owned by uid {}, not by the current user (uid {})", what, path, st.st_uid,
                       ::geteuid());
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return fmt::format("{} {} is group- or world-writable (mode {:04o})", what, path, st.st_mode & 07777);
  }
  return {};
}

bool is_hex(std::string_view text) noexcept {
  return std::all_of(text.begin(), text.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

/// The request key a manifest file name stands for ("<30 hex>.kman" in shard "<2 hex>"), else nullopt.
std::optional<Hash128> manifest_file_hash(std::string_view shard, std::string_view name) noexcept {
  if (shard.size() != 2 || name.size() != 30 + kManifestSuffix.size() || !name.ends_with(kManifestSuffix)) {
    return std::nullopt;
  }
  const std::string_view stem = name.substr(0, 30);
  if (!is_hex(shard) || !is_hex(stem)) return std::nullopt;
  char hex[32];
  std::memcpy(hex, shard.data(), 2);
  std::memcpy(hex + 2, stem.data(), 30);
  return Hash128::from_hex(std::string_view(hex, sizeof(hex)));
}

enum class ReadStatus : std::uint8_t { ok, short_read, io_error };

ReadStatus read_exact(int fd, std::byte* out, std::size_t count, int& error) noexcept {
  while (count > 0) {
    const ssize_t n = ::read(fd, out, count);
    if (n < 0) {
      if (errno == EINTR) continue;
      error = errno;
      return ReadStatus::io_error;
    }
    if (n == 0) return ReadStatus::short_read;
    out += n;
    count -= static_cast<std::size_t>(n);
  }
  return ReadStatus::ok;
}

/// Buffers that manifest files are read into, kept for the next lookup: a lookup in a process that
/// has made one before reads into memory it has touched already (fresh memory costs a page fault per
/// page, and manifests of big trees are hundreds of KB). Thread-safe; bounded in count and size.
class ReadBuffers {
 public:
  struct Buffer {
    std::unique_ptr<std::byte[]> bytes;
    std::size_t capacity = 0;
  };
  static constexpr std::size_t kKeep = 4;                 ///< buffers kept
  static constexpr std::size_t kKeepBytes = 8ULL << 20;  ///< a larger buffer is not kept

  /// A buffer of at least `size` bytes (contents undefined). Throws std::bad_alloc.
  Buffer take(std::size_t size) {
    {
      const std::lock_guard lock(m_mutex);
      for (auto it = m_free.begin(); it != m_free.end(); ++it) {
        if (it->capacity >= size) {
          Buffer found = std::move(*it);
          m_free.erase(it);
          return found;
        }
      }
    }
    const std::size_t capacity = (std::max<std::size_t>(size, 64 * 1024) + 4095) & ~std::size_t{4095};
    return Buffer{std::make_unique_for_overwrite<std::byte[]>(capacity), capacity};
  }
  void give(Buffer buffer) noexcept {
    if (!buffer.bytes || buffer.capacity > kKeepBytes) return;
    const std::lock_guard lock(m_mutex);
    if (m_free.size() >= kKeep) return;  // (freed on return)
    try {
      m_free.push_back(std::move(buffer));
    } catch (...) {
    }
  }

 private:
  std::mutex m_mutex;
  std::vector<Buffer> m_free;
};

/// A manifest file read whole, or its first part (not parsed yet).
struct RawManifest {
  enum class Kind : std::uint8_t { ok, absent, content_error, io_error } kind = Kind::absent;
  std::unique_ptr<std::byte[]> bytes;  ///< room for the whole file
  std::size_t capacity = 0;  ///< of bytes
  std::size_t size = 0;      ///< the file's
  std::size_t have = 0;      ///< bytes read so far (size once read whole)
  detail::UniqueFd fd;       ///< open while `have` < `size` (read_more reads on)
  struct stat st {};     ///< of the file read (or of the link found, for a symbolic link)
  bool have_st = false;  ///< st describes what is at the path (removal checks it is still the same file)
  std::string error;     ///< content or I/O error
  [[nodiscard]] std::span<const std::byte> span() const noexcept { return {bytes.get(), have}; }
};

/// Reads on, up to `upto` bytes of the file (at most its size). False after setting kind and error on
/// failure. Manifests are published by rename and never written in place, so the open file's bytes stay
/// those of one manifest however long ago the first part was read.
bool read_more(RawManifest& raw, std::size_t upto) {
  upto = std::min(upto, raw.size);
  if (raw.have >= upto) return true;
  int error = 0;
  const ReadStatus status = read_exact(raw.fd.get(), raw.bytes.get() + raw.have, upto - raw.have, error);
  if (status == ReadStatus::io_error) {
    raw.kind = RawManifest::Kind::io_error;
    raw.error = fmt::format("I/O error: read failed: {}", std::strerror(error));
    return false;
  }
  if (status == ReadStatus::short_read) {
    raw.kind = RawManifest::Kind::content_error;
    raw.error = fmt::format("truncated while reading: file shorter than its {} bytes", raw.size);
    return false;
  }
  raw.have = upto;
  if (raw.have == raw.size) raw.fd = detail::UniqueFd();
  return true;
}

/// Opens (O_NOFOLLOW, O_NONBLOCK) and reads a manifest: whole, or with `prefix` > 0 its first `prefix`
/// bytes (read_more reads the rest). A symbolic link, a non-regular file, a file of another owner and one
/// over the size limit are content errors; open/read failures are I/O errors.
RawManifest read_raw(const std::string& path, const ManifestLimits& limits, ReadBuffers* buffers = nullptr,
                     std::size_t prefix = 0) {
  RawManifest raw;
  raw.fd = UniqueFd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  const UniqueFd& fd = raw.fd;
  if (!fd) {
    const int error = errno;
    if (is_absence(error)) return raw;
    if (error == ELOOP) {
      raw.kind = RawManifest::Kind::content_error;
      raw.error = "a symbolic link: refused";
      raw.have_st = ::lstat(path.c_str(), &raw.st) == 0 && S_ISLNK(raw.st.st_mode);
      return raw;
    }
    raw.kind = RawManifest::Kind::io_error;
    raw.error = fmt::format("cannot open: {}", std::strerror(error));
    return raw;
  }
  if (::fstat(fd.get(), &raw.st) != 0) {
    raw.kind = RawManifest::Kind::io_error;
    raw.error = fmt::format("cannot stat: {}", std::strerror(errno));
    return raw;
  }
  raw.have_st = true;
  raw.kind = RawManifest::Kind::content_error;
  if (!S_ISREG(raw.st.st_mode)) {
    raw.error = "not a regular file";
    return raw;
  }
  if (raw.st.st_uid != ::geteuid()) {
    raw.error = fmt::format("owned by uid {}, not by the current user", raw.st.st_uid);
    return raw;
  }
  const auto size = static_cast<std::uint64_t>(raw.st.st_size);
  if (size > limits.max_file_bytes) {
    raw.error = fmt::format("file length {} exceeds the limit {}", size, limits.max_file_bytes);
    return raw;
  }
  raw.size = static_cast<std::size_t>(size);
  if (buffers != nullptr) {
    ReadBuffers::Buffer buffer = buffers->take(std::max<std::size_t>(raw.size, 1));
    raw.bytes = std::move(buffer.bytes);
    raw.capacity = buffer.capacity;
  } else {
    raw.capacity = std::max<std::size_t>(raw.size, 1);
    raw.bytes = std::make_unique_for_overwrite<std::byte[]>(raw.capacity);
  }
  if (read_more(raw, prefix > 0 ? prefix : raw.size)) raw.kind = RawManifest::Kind::ok;
  return raw;
}

// ---- merging a new result into a manifest ------------------------------------------------------------------

struct FileKey {
  std::uint32_t path;
  Hash128 digest;
  friend bool operator==(const FileKey&, const FileKey&) = default;
};
struct FileKeyHasher {
  std::size_t operator()(const FileKey& key) const noexcept {
    return Hash128Hasher{}(key.digest) ^ (static_cast<std::size_t>(key.path) * 0x9E3779B97F4A7C15ULL);
  }
};

/// Builds a manifest result by result (views into the caller's strings and the old manifest's bytes).
class Merger {
 public:
  Merger(const Hash128& request_key, std::string_view canonical) {
    m_view.request_key = request_key;
    m_view.canonical = canonical;
  }

  struct Mark {
    std::size_t paths, files, absent, results, indices;
  };
  [[nodiscard]] Mark mark() const {
    return Mark{m_view.paths.size(), m_view.files.size(), m_view.absent.size(), m_view.results.size(),
                m_view.indices.size()};
  }
  /// Drops everything added since `mark` (the maps keep stale entries: nothing may be added afterwards).
  void roll_back(const Mark& mark) {
    m_view.paths.resize(mark.paths);
    m_view.files.resize(mark.files);
    m_view.absent.resize(mark.absent);
    m_view.results.resize(mark.results);
    m_view.indices.resize(mark.indices);
  }

  /// Adds a result: `files` yields (path, stat, trusted, digest), `absent` yields paths. A header info
  /// already present (same path and digest) is shared and keeps the stat it was first added with.
  template <class Files, class Absent>
  void add_result(const Hash128& key, const Files& files, const Absent& absent) {
    ResultRefs refs;
    refs.key = key;
    refs.files_begin = static_cast<std::uint32_t>(m_view.indices.size());
    for (const auto& [path, file_stat, trusted, digest] : files) {
      const std::uint32_t path_index = intern(path);
      const auto [it, fresh] =
          m_files.try_emplace(FileKey{path_index, digest}, static_cast<std::uint32_t>(m_view.files.size()));
      if (fresh) m_view.files.push_back(FileInfo{path_index, file_stat, trusted, digest});
      m_view.indices.push_back(it->second);
    }
    refs.files_count = static_cast<std::uint32_t>(m_view.indices.size() - refs.files_begin);
    refs.absent_begin = static_cast<std::uint32_t>(m_view.indices.size());
    for (const std::string_view path : absent) {
      const std::uint32_t path_index = intern(path);
      const auto [it, fresh] = m_absent.try_emplace(path_index, static_cast<std::uint32_t>(m_view.absent.size()));
      if (fresh) m_view.absent.push_back(path_index);
      m_view.indices.push_back(it->second);
    }
    refs.absent_count = static_cast<std::uint32_t>(m_view.indices.size() - refs.absent_begin);
    m_view.results.push_back(refs);
  }

  /// Why the manifest exceeds the limits; empty when it fits.
  [[nodiscard]] std::string over_limits(const ManifestLimits& limits) const {
    if (m_view.files.size() > limits.max_files)
      return fmt::format("{} headers (limit {})", m_view.files.size(), limits.max_files);
    if (m_view.absent.size() > limits.max_absent) {
      return fmt::format("{} absent paths (limit {})", m_view.absent.size(), limits.max_absent);
    }
    if (m_view.paths.size() > limits.max_paths)
      return fmt::format("{} paths (limit {})", m_view.paths.size(), limits.max_paths);
    if (m_view.results.size() > limits.max_results) {
      return fmt::format("{} results (limit {})", m_view.results.size(), limits.max_results);
    }
    if (const std::uint64_t bytes = m_view.byte_size(); bytes > limits.max_file_bytes) {
      return fmt::format("{} bytes (limit {})", bytes, limits.max_file_bytes);
    }
    return {};
  }

  [[nodiscard]] const ManifestView& view() const noexcept { return m_view; }

 private:
  std::uint32_t intern(std::string_view path) {
    const auto [it, fresh] = m_paths.try_emplace(path, static_cast<std::uint32_t>(m_view.paths.size()));
    if (fresh) m_view.paths.push_back(path);
    return it->second;
  }

  ManifestView m_view;
  std::unordered_map<std::string_view, std::uint32_t> m_paths;
  std::unordered_map<FileKey, std::uint32_t, FileKeyHasher> m_files;
  std::unordered_map<std::uint32_t, std::uint32_t> m_absent;
};

/// A header of a DependencySet or of an old result, as Merger::add_result takes it.
struct MergeFile {
  std::string_view path;
  FileStat stat;
  bool trusted;
  Hash128 digest;
};

}  // namespace

// ---- public helpers ---------------------------------------------------------------------------------------

FileStat to_file_stat(const struct ::stat& st) noexcept {
  FileStat out;
  out.size = static_cast<std::uint64_t>(st.st_size);
  out.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  out.ctime_ns = static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec;
  out.inode = static_cast<std::uint64_t>(st.st_ino);
  out.device = static_cast<std::uint64_t>(st.st_dev);
  return out;
}

bool stat_is_settled(const FileStat& stat, std::int64_t now_ns, std::chrono::nanoseconds window) noexcept {
  // A time in the future (clock skew) is never settled.
  const std::int64_t limit = now_ns - static_cast<std::int64_t>(window.count());
  return stat.mtime_ns < limit && stat.ctime_ns < limit;
}

std::int64_t realtime_now_ns() noexcept {
  struct timespec now {};
  if (::clock_gettime(CLOCK_REALTIME, &now) != 0) return 0;  // time 0: nothing counts as settled
  return static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

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

std::string_view to_string(ManifestOutcome outcome) noexcept {
  switch (outcome) {
    case ManifestOutcome::hit:
      return "hit";
    case ManifestOutcome::no_manifest:
      return "no manifest";
    case ManifestOutcome::no_match:
      return "no result matches";
    case ManifestOutcome::corrupt_removed:
      return "damaged (removed)";
    case ManifestOutcome::corrupt:
      return "damaged";
    case ManifestOutcome::io_error:
      return "I/O error";
    case ManifestOutcome::disabled:
      return "disabled";
  }
  return "unknown";
}

std::string_view to_string(DependencyChange change) noexcept {
  switch (change) {
    case DependencyChange::none:
      return "matches";
    case DependencyChange::changed:
      return "changed";
    case DependencyChange::vanished:
      return "vanished";
    case DependencyChange::appeared:
      return "appeared";
    case DependencyChange::unreadable:
      return "unreadable";
  }
  return "unknown";
}

// ---- DependencyManifests ------------------------------------------------------------------------------------

struct DependencyManifests::State {
  std::string root;
  std::string directory;  ///< <root>/manifests
  std::atomic<StoreMode> mode{StoreMode::read_write};
  mutable std::mutex reason_mutex;
  std::string reason;
  std::atomic<bool> write_failure_warned{false};
  std::atomic<bool> refusal_warned{false};
  StatMemo stat_memo;  ///< shared by this instance's lookups (ManifestConfig::stat_memo)
  ValidatedSets validated;  ///< dependency sets checked by this instance's lookups (same time limit)
  ReadBuffers buffers;      ///< what lookups read manifests into

  /// Lowers the mode (never raises it) and records why; `warn`: says so at warning level.
  void degrade(StoreMode to, const std::string& why, bool warn) {
    StoreMode current = mode.load();
    while (static_cast<int>(current) < static_cast<int>(to)) {
      if (mode.compare_exchange_weak(current, to)) {
        {
          const std::lock_guard lock(reason_mutex);
          reason = why;
        }
        if (warn) {
          KILN_LOG(warn, "dependency manifests are {}: {}", to_string(to), why);
        } else {
          KILN_LOG(info, "dependency manifests are {}: {}", to_string(to), why);
        }
        return;
      }
    }
  }

  void warn_write_failure(const std::string& what) {
    if (!write_failure_warned.exchange(true)) {
      KILN_LOG(warn, "dependency manifest not written (kernels are still served; the request recompiles): {}", what);
    } else {
      KILN_LOG(debug, "dependency manifest not written: {}", what);
    }
  }

  void warn_refusal(const std::string& what) {
    if (!refusal_warned.exchange(true)) {
      KILN_LOG(warn, "dependency manifest not recorded: {}", what);
    } else {
      KILN_LOG(debug, "dependency manifest not recorded: {}", what);
    }
  }

  [[nodiscard]] std::string path_of(const Hash128& key) const {
    const std::string hex = key.hex();
    std::string path;
    path.reserve(directory.size() + 4 + hex.size() + kManifestSuffix.size());
    path.append(directory).append("/").append(hex, 0, 2).append("/").append(hex, 2, 30).append(kManifestSuffix);
    return path;
  }

  /// Removes `path` if it is still the file `seen` describes (a writer may have renamed a fresh
  /// manifest into place since it was read). True when it removed it.
  static bool unlink_if_same(const std::string& path, const struct stat& seen) noexcept {
    struct stat now {};
    if (::lstat(path.c_str(), &now) != 0 || now.st_ino != seen.st_ino || now.st_dev != seen.st_dev) return false;
    return ::unlink(path.c_str()) == 0;
  }

  /// Creates manifests/<2 hex>/ (and the root and its missing parents, all 0700). Returns the errno, 0 on
  /// success.
  [[nodiscard]] int make_directories(const std::string& manifest_file) const {
    const std::string shard = manifest_file.substr(0, manifest_file.rfind('/'));
    int error = make_private_dir(shard);
    if (error == ENOENT) {
      error = make_private_dirs(root);
      if (error == 0) error = make_private_dir(directory);
      if (error == 0) error = make_private_dir(shard);
    }
    return error;
  }

  /// Publishes `bytes` at `path` atomically. False (after warning) on failure.
  bool publish(const std::string& path, std::span<const std::byte> bytes) {
    if (const int error = make_directories(path); error != 0) {
      const std::string why = fmt::format("cannot create the directory of {}: {}", path, std::strerror(error));
      if (is_permission_error(error)) {
        degrade(StoreMode::read_only, why, true);
      } else {
        warn_write_failure(why);
      }
      return false;
    }
    detail::AtomicFile file(path);
    if (file.write(bytes)) (void)file.commit();
    if (file.error() != 0) {
      if (is_permission_error(file.error())) {
        degrade(StoreMode::read_only, file.error_text(), true);
      } else {
        warn_write_failure(file.error_text());
      }
      return false;
    }
    return true;
  }
};

DependencyManifests::DependencyManifests(std::filesystem::path root, bool read_only)
    : DependencyManifests([&] {
        ManifestConfig config;
        config.root = std::move(root);
        config.read_only = read_only;
        return config;
      }()) {}

DependencyManifests::DependencyManifests(ManifestConfig config)
    : m_config(std::move(config)), m_state(std::make_unique<State>()) {
  State& s = *m_state;
  if (m_config.disabled) {
    s.degrade(StoreMode::memory_only, "disabled (configuration)", false);
    return;
  }
  if (m_config.root.empty()) {
    s.degrade(StoreMode::memory_only, "no cache root", false);
    return;
  }
  s.root = m_config.root.lexically_normal().string();
  while (s.root.size() > 1 && s.root.back() == '/') s.root.pop_back();
  s.directory = s.root + "/" + std::string(kManifestDirectory);
  // A manifest names the binary a request gets: only trust a tree nobody else can write to.
  const auto refuse = [&s](std::string_view what, const std::string& path) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) return false;  // created by the first record
      s.degrade(StoreMode::memory_only, fmt::format("cannot stat {} {}: {}", what, path, std::strerror(errno)), true);
      return true;
    }
    if (std::string why = distrust_reason(what, path, st); !why.empty()) {
      s.degrade(StoreMode::memory_only, fmt::format("refused: {}", why), true);
      return true;
    }
    return false;
  };
  if (refuse("cache root", s.root) || refuse("manifest directory", s.directory)) return;
  if (m_config.read_only) {
    s.degrade(StoreMode::read_only, "read-only by configuration", false);
    return;
  }
  if (::access(s.root.c_str(), F_OK) == 0 && ::access(s.root.c_str(), W_OK | X_OK) != 0) {
    s.degrade(StoreMode::read_only, fmt::format("cache root {} is not writable: {}", s.root, std::strerror(errno)),
              false);
  }
}

DependencyManifests::~DependencyManifests() = default;

StoreMode DependencyManifests::mode() const noexcept { return m_state->mode.load(); }

std::string DependencyManifests::mode_reason() const {
  const std::lock_guard lock(m_state->reason_mutex);
  return m_state->reason;
}

std::filesystem::path DependencyManifests::directory() const { return m_state->directory; }

std::filesystem::path DependencyManifests::manifest_path(const Hash128& request_key) const {
  if (m_state->directory.empty()) return {};
  return m_state->path_of(request_key);
}

std::optional<Hash128> DependencyManifests::lookup(const Hash128& request_key, std::string_view request_canonical,
                                                   LookupStats* stats, std::string* matched) {
  State& s = *m_state;
  LookupStats local;
  LookupStats& out = stats != nullptr ? *stats : local;
  out = LookupStats{};
  const StoreMode mode = s.mode.load();
  if (mode == StoreMode::memory_only) {
    out.outcome = ManifestOutcome::disabled;
    return std::nullopt;
  }
  try {
    const std::int64_t now_ns = realtime_now_ns();  // before any header is read (see stat_is_settled)
    const auto phase_start = std::chrono::steady_clock::now();
    auto phase = phase_start;
    const auto lap = [&phase] {  // nanoseconds since the previous lap
      const auto now = std::chrono::steady_clock::now();
      const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now - phase).count();
      phase = now;
      return static_cast<std::uint64_t>(ns);
    };
    const std::string path = s.path_of(request_key);
    const ExpectedRequest expected{request_key, request_canonical};
    const bool memo_on = m_config.stat_memo.count() > 0;
    // While this instance holds sets checked moments ago, the head comes first: a result whose set is
    // one of them is the answer without reading the rest (see the grammar's notes).
    const bool head_first = memo_on && s.validated.any();
    RawManifest raw = read_raw(path, m_config.limits, &s.buffers, head_first ? kHeadRead : 0);
    out.read_ns = lap();
    out.manifest_bytes = raw.size;
    const auto done_reading = [&] { out.bytes_read = raw.have; };
    const auto io_error = [&] {  // an I/O error must never delete a manifest: a transient EIO would destroy a valid one
      out.outcome = ManifestOutcome::io_error;
      out.detail = fmt::format("{}: {}", path, raw.error);
      done_reading();
      return std::nullopt;
    };
    const auto content_error = [&](const std::string& reason) {
      out.detail = fmt::format("{}: {}", path, reason);
      done_reading();
      if (mode == StoreMode::read_write && raw.have_st && State::unlink_if_same(path, raw.st)) {
        KILN_LOG(info, "removed a bad dependency manifest: {}", out.detail);
        out.outcome = ManifestOutcome::corrupt_removed;
      } else {
        out.outcome = ManifestOutcome::corrupt;
      }
      return std::nullopt;
    };
    if (raw.kind == RawManifest::Kind::absent) {
      out.outcome = ManifestOutcome::no_manifest;
      return std::nullopt;
    }
    if (raw.kind == RawManifest::Kind::io_error) return io_error();
    if (raw.kind == RawManifest::Kind::content_error) return content_error(raw.error);
    if (raw.have < raw.size) {
      auto fixed = check_fixed(raw.bytes.get(), raw.size, m_config.limits);  // (kHeadRead > the fixed part)
      if (auto* error = std::get_if<ContentError>(&fixed)) return content_error(error->reason);
      if (!read_more(raw, std::get<Fixed>(fixed).head_size())) {
        return raw.kind == RawManifest::Kind::io_error ? io_error() : content_error(raw.error);
      }
      auto head = parse_head(raw.span(), std::get<Fixed>(fixed), &expected);
      if (auto* error = std::get_if<ContentError>(&head)) return content_error(error->reason);
      for (const auto& [key, summary] : std::get<HeadView>(head).results) {
        ++out.results_checked;
        std::string set = canonical_dependencies(summary);
        if (s.validated.fresh(set, now_ns, m_config.stat_memo)) {
          ++out.validated_hits;
          out.parse_ns = lap();
          out.outcome = ManifestOutcome::hit;
          done_reading();
          if (matched != nullptr) *matched = std::move(set);
          s.buffers.give({std::move(raw.bytes), raw.capacity});
          return key;
        }
      }
      out.results_checked = 0;  // checked again below, with the rest
      if (!read_more(raw, raw.size)) return raw.kind == RawManifest::Kind::io_error ? io_error() : content_error(raw.error);
    }
    done_reading();
    std::variant<ManifestView, ContentError> parsed = parse_view(raw.span(), m_config.limits, &expected);
    out.parse_ns = lap();
    if (auto* error = std::get_if<ContentError>(&parsed)) return content_error(error->reason);
    ManifestView& view = std::get<ManifestView>(parsed);
    // This instance's first lookup stats everything itself and hands its probes to the memo at the end.
    const bool first = memo_on && s.stat_memo.first_lookup();
    // Built only when a result needs its paths checked (its probe table has a slot per path).
    std::optional<Checker> checker_slot;
    const auto checker = [&]() -> Checker& {
      if (!checker_slot) {
        checker_slot.emplace(view, m_config.limits, now_ns, m_config.trust_window,
                             memo_on && !first ? &s.stat_memo : nullptr, m_config.stat_memo, m_config.stat_threads);
      }
      return *checker_slot;
    };
    std::optional<Hash128> answer;
    std::string answer_set;  // canonical_dependencies of the answer
    std::vector<std::pair<Hash128, Mismatch>> misses;
    for (std::size_t i = 0; i < view.results.size(); ++i) {
      const ResultRefs& result = view.results[i];
      ++out.results_checked;
      std::string set = canonical_dependencies(view.summaries[i]);
      if (memo_on && s.validated.fresh(set, now_ns, m_config.stat_memo)) {
        ++out.validated_hits;
        answer = result.key;
        answer_set = std::move(set);
        break;
      }
      const std::uint32_t reads_before = checker().reads;
      const Mismatch mismatch = checker().check(result);
      if (mismatch.change == DependencyChange::none) {
        // A set with a header whose stat is not trusted (changed moments ago) is re-hashed on every
        // lookup, so it is never taken whole either.
        if (memo_on && checker().reads == reads_before) s.validated.remember(set, checker().oldest_ns);
        answer = result.key;
        answer_set = std::move(set);
        break;
      }
      misses.emplace_back(result.key, mismatch);
    }
    out.check_ns = lap();
    if (checker_slot) {
      out.stats = checker_slot->stats;
      out.memo_hits = checker_slot->memo_hits;
      out.reads = checker_slot->reads;
      out.bytes_hashed = checker_slot->bytes_hashed;
    }
    // Refreshed stats are written back (hit or miss), so the next lookup trusts them without reading.
    if (checker_slot && !checker_slot->refreshes.empty()) {
      for (const Checker::Refresh& refresh : checker_slot->refreshes) {
        FileInfo& info = view.files[refresh.file];
        if (info.stat != refresh.stat || info.trusted != refresh.trusted) {
          info.stat = refresh.stat;
          info.trusted = refresh.trusted;
          ++out.refreshed;
        }
      }
      if (out.refreshed != 0 && mode == StoreMode::read_write) {
        // Best effort, and only over the manifest this lookup read: a record renamed in since must win.
        struct stat now {};
        if (::lstat(path.c_str(), &now) == 0 && now.st_ino == raw.st.st_ino && now.st_dev == raw.st.st_dev &&
            now.st_size == raw.st.st_size && now.st_mtim.tv_sec == raw.st.st_mtim.tv_sec &&
            now.st_mtim.tv_nsec == raw.st.st_mtim.tv_nsec) {
          out.rewritten = s.publish(path, serialize_view(view));
        }
      }
    }
    if (answer) {
      out.outcome = ManifestOutcome::hit;
      if (matched != nullptr) *matched = std::move(answer_set);
    } else {
      out.outcome = ManifestOutcome::no_match;
      out.detail = view.results.empty() ? "the manifest holds no result" : "";
      for (std::size_t i = 0; i < misses.size(); ++i) {
        const auto& [key, mismatch] = misses[i];
        out.detail += fmt::format("{}result {} ({}): {} {} {}", i == 0 ? "" : "; ", i + 1, key.hex(),
                                  to_string(mismatch.change), view.paths[mismatch.path], describe(mismatch));
      }
    }
    // Done with the view: its paths (into raw's bytes) and the probes go to the memo as they are.
    if (first && checker_slot) {
      s.stat_memo.defer(std::move(raw.bytes), std::move(view.paths), checker_slot->take_probes(), now_ns);
    } else {
      s.buffers.give({std::move(raw.bytes), raw.capacity});  // (the view is not used past here)
    }
    return answer;
  } catch (const std::exception& error) {
    out.outcome = ManifestOutcome::io_error;
    try {
      out.detail = error.what();
    } catch (...) {
    }
    return std::nullopt;
  }
}

void DependencyManifests::record(const Hash128& request_key, std::string_view request_canonical,
                                 const DependencySet& dependencies, const Hash128& result_key) noexcept {
  State& s = *m_state;
  if (s.mode.load() != StoreMode::read_write) return;
  try {
    const ManifestLimits& limits = m_config.limits;
    if (hash128(request_canonical, kKeySeed) != request_key) {
      s.warn_refusal(fmt::format("request {}: the key is not the hash of its canonical key", request_key.hex()));
      return;
    }
    if (request_canonical.size() > limits.max_canonical_bytes) {
      s.warn_refusal(fmt::format("request {}: canonical key of {} bytes exceeds the limit {}", request_key.hex(),
                                 request_canonical.size(), limits.max_canonical_bytes));
      return;
    }
    for (const HeaderRecord& header : dependencies.headers) {
      if (auto why = bad_path(header.path, limits.max_path_bytes)) {
        s.warn_refusal(fmt::format("request {}: header \"{}\": {}", request_key.hex(), header.path, *why));
        return;
      }
    }
    for (const std::string& path : dependencies.absent) {
      if (auto why = bad_path(path, limits.max_path_bytes)) {
        s.warn_refusal(fmt::format("request {}: absent path \"{}\": {}", request_key.hex(), path, *why));
        return;
      }
    }
    const std::string path = s.path_of(request_key);
    RawManifest raw = read_raw(path, limits);
    if (raw.kind == RawManifest::Kind::io_error) {
      // Overwriting a manifest that could not be read would drop its results for a transient error.
      s.warn_write_failure(fmt::format("{}: {}", path, raw.error));
      return;
    }
    std::optional<ManifestView> old;
    if (raw.kind == RawManifest::Kind::ok) {
      const ExpectedRequest expected{request_key, request_canonical};
      auto parsed = parse_view(raw.span(), limits, &expected);
      if (auto* view = std::get_if<ManifestView>(&parsed)) {
        old = std::move(*view);
      } else {
        KILN_LOG(info, "replacing a bad dependency manifest {}: {}", path, std::get<ContentError>(parsed).reason);
      }
    }
    // A header is trusted by stat only when the resolver trusted it (relative to when it read it) and its
    // stat still lies outside the window now.
    const std::int64_t now_ns = realtime_now_ns();
    std::vector<MergeFile> files;
    files.reserve(dependencies.headers.size());
    for (const HeaderRecord& header : dependencies.headers) {
      files.push_back(MergeFile{header.path, header.stat,
                                header.trusted_stat && stat_is_settled(header.stat, now_ns, m_config.trust_window),
                                header.digest});
    }
    std::vector<std::string_view> absent(dependencies.absent.begin(), dependencies.absent.end());
    Merger merger(request_key, request_canonical);
    merger.add_result(result_key, files, absent);
    if (std::string why = merger.over_limits(limits); !why.empty()) {
      s.warn_refusal(fmt::format("request {}: {}", request_key.hex(), why));
      return;
    }
    const std::size_t max_results =
        std::max<std::size_t>(1, std::min<std::size_t>(m_config.max_results, limits.max_results));
    if (old) {
      for (const ResultRefs& result : old->results) {
        if (merger.view().results.size() >= max_results) break;
        if (result.key == result_key) continue;  // replaced by the new record
        files.clear();
        for (const std::uint32_t index : old->result_files(result)) {
          const FileInfo& info = old->files[index];
          files.push_back(MergeFile{old->paths[info.path], info.stat, info.trusted, info.digest});
        }
        absent.clear();
        for (const std::uint32_t index : old->result_absent(result)) absent.push_back(old->paths[old->absent[index]]);
        const Merger::Mark mark = merger.mark();
        merger.add_result(result.key, files, absent);
        if (!merger.over_limits(limits).empty()) {  // drop this and every older result
          merger.roll_back(mark);
          break;
        }
      }
    }
    const std::vector<std::byte> bytes = serialize_view(merger.view());
    (void)s.publish(path, bytes);
  } catch (const std::exception& error) {
    try {
      s.warn_write_failure(fmt::format("request {}: {}", request_key.hex(), error.what()));
    } catch (...) {
    }
  }
}

std::optional<DependencySet> DependencyManifests::recorded(const Hash128& request_key, std::string_view request_canonical,
                                                          const Hash128& result_key) const {
  const State& s = *m_state;
  if (s.mode.load() == StoreMode::memory_only) return std::nullopt;
  const RawManifest raw = read_raw(s.path_of(request_key), m_config.limits);
  if (raw.kind != RawManifest::Kind::ok) return std::nullopt;
  const ExpectedRequest expected{request_key, request_canonical};
  std::variant<ManifestView, ContentError> parsed = parse_view(raw.span(), m_config.limits, &expected);
  const ManifestView* view = std::get_if<ManifestView>(&parsed);
  if (view == nullptr) return std::nullopt;
  for (const ResultRefs& result : view->results) {
    if (result.key != result_key) continue;
    DependencySet set;
    for (const std::uint32_t index : view->result_files(result)) {
      const FileInfo& info = view->files[index];
      set.headers.push_back(HeaderRecord{std::string(view->paths[info.path]), info.stat, info.trusted, info.digest});
    }
    for (const std::uint32_t index : view->result_absent(result)) set.absent.emplace_back(view->paths[view->absent[index]]);
    return set;
  }
  return std::nullopt;
}

ManifestExplanation DependencyManifests::explain(const Hash128& request_key, std::string_view request_canonical) const {
  const State& s = *m_state;
  ManifestExplanation out;
  if (s.mode.load() == StoreMode::memory_only) {
    out.outcome = ManifestOutcome::disabled;
    return out;
  }
  try {
    const std::int64_t now_ns = realtime_now_ns();
    const std::string path = s.path_of(request_key);
    RawManifest raw = read_raw(path, m_config.limits);
    if (raw.kind == RawManifest::Kind::absent) {
      out.outcome = ManifestOutcome::no_manifest;
      return out;
    }
    if (raw.kind == RawManifest::Kind::io_error) {
      out.outcome = ManifestOutcome::io_error;
      out.detail = fmt::format("{}: {}", path, raw.error);
      return out;
    }
    std::variant<ManifestView, ContentError> parsed = ContentError{raw.error};
    if (raw.kind == RawManifest::Kind::ok) {
      const ExpectedRequest expected{request_key, request_canonical};
      parsed = parse_view(raw.span(), m_config.limits, &expected);
    }
    if (auto* error = std::get_if<ContentError>(&parsed)) {
      out.outcome = ManifestOutcome::corrupt;
      out.detail = fmt::format("{}: {}", path, error->reason);
      return out;
    }
    const ManifestView& view = std::get<ManifestView>(parsed);
    Checker checker(view, m_config.limits, now_ns, m_config.trust_window, nullptr, {}, m_config.stat_threads);
    out.outcome = ManifestOutcome::no_match;
    for (const ResultRefs& result : view.results) {
      const Mismatch mismatch = checker.check(result);
      ResultCheck check;
      check.result_key = result.key;
      check.change = mismatch.change;
      if (mismatch.change == DependencyChange::none) {
        out.outcome = ManifestOutcome::hit;
      } else {
        check.path.assign(view.paths[mismatch.path]);
        check.detail = describe(mismatch);
      }
      out.results.push_back(std::move(check));
    }
    return out;
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& error) {
    out.outcome = ManifestOutcome::io_error;
    out.detail = error.what();
    return out;
  }
}

bool DependencyManifests::remove(const Hash128& request_key) noexcept {
  if (m_state->mode.load() != StoreMode::read_write) return false;
  try {
    return ::unlink(m_state->path_of(request_key).c_str()) == 0;
  } catch (...) {
    return false;
  }
}

std::size_t DependencyManifests::clear() noexcept {
  State& s = *m_state;
  if (s.mode.load() != StoreMode::read_write) return 0;
  std::size_t removed = 0;
  try {
    const UniqueFd top_fd(::open(s.directory.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!top_fd) return 0;
    DIR* top = ::fdopendir(::dup(top_fd.get()));
    if (top == nullptr) return 0;
    std::vector<std::string> shards;
    while (const dirent* shard = ::readdir(top)) {
      const std::string_view name(shard->d_name);
      if (name.size() == 2 && is_hex(name)) shards.emplace_back(name);
    }
    ::closedir(top);
    for (const std::string& shard : shards) {
      const int shard_fd = ::openat(top_fd.get(), shard.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (shard_fd < 0) continue;
      DIR* files = ::fdopendir(shard_fd);
      if (files == nullptr) {
        ::close(shard_fd);
        continue;
      }
      std::vector<std::pair<std::string, bool>> doomed;  // name, is a manifest
      while (const dirent* file = ::readdir(files)) {
        const std::string_view name(file->d_name);
        if (manifest_file_hash(shard, name)) {
          doomed.emplace_back(name, true);
        } else if (name.starts_with('.') && name.find(detail::kTempMarker) != std::string_view::npos) {
          doomed.emplace_back(name, false);
        }
      }
      for (const auto& [name, manifest] : doomed) {
        if (::unlinkat(shard_fd, name.c_str(), 0) == 0 && manifest) ++removed;
      }
      ::closedir(files);
      (void)::unlinkat(top_fd.get(), shard.c_str(), AT_REMOVEDIR);  // only when empty
    }
  } catch (...) {
    // Out of memory: stop.
  }
  return removed;
}

std::vector<ScannedManifest> DependencyManifests::scan() const {
  std::vector<ScannedManifest> out;
  const State& s = *m_state;
  if (s.mode.load() == StoreMode::memory_only) return out;
  DIR* top = ::opendir(s.directory.c_str());
  if (top == nullptr) return out;
  std::vector<std::string> shards;
  try {
    while (const dirent* shard = ::readdir(top)) {
      const std::string_view name(shard->d_name);
      if (name.size() == 2 && is_hex(name)) shards.emplace_back(name);
    }
  } catch (...) {
    ::closedir(top);
    throw;
  }
  ::closedir(top);
  std::sort(shards.begin(), shards.end());
  for (const std::string& shard : shards) {
    const std::string shard_path = s.directory + "/" + shard;
    const int shard_fd = ::open(shard_path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (shard_fd < 0) continue;
    DIR* files = ::fdopendir(shard_fd);
    if (files == nullptr) {
      ::close(shard_fd);
      continue;
    }
    std::vector<std::pair<std::string, Hash128>> names;
    try {
      while (const dirent* file = ::readdir(files)) {
        const std::string_view name(file->d_name);
        if (const auto hash = manifest_file_hash(shard, name)) names.emplace_back(name, *hash);
      }
    } catch (...) {
      ::closedir(files);
      throw;
    }
    ::closedir(files);
    std::sort(names.begin(), names.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [name, hash] : names) {
      ScannedManifest scanned;
      scanned.path = shard_path + "/" + name;
      scanned.request_key = hash;
      const RawManifest raw = read_raw(scanned.path.string(), m_config.limits);
      if (raw.kind == RawManifest::Kind::absent) continue;  // removed meanwhile
      if (raw.have_st) {
        scanned.size = static_cast<std::uint64_t>(raw.st.st_size);
        scanned.mtime =
            std::chrono::system_clock::time_point(std::chrono::duration_cast<std::chrono::system_clock::duration>(
                std::chrono::seconds(raw.st.st_mtim.tv_sec) + std::chrono::nanoseconds(raw.st.st_mtim.tv_nsec)));
      }
      if (raw.kind != RawManifest::Kind::ok) {
        scanned.error = raw.error;
      } else {
        auto parsed = parse_view(raw.span(), m_config.limits, nullptr);
        if (auto* error = std::get_if<ContentError>(&parsed)) {
          scanned.error = std::move(error->reason);
        } else {
          const ManifestView& view = std::get<ManifestView>(parsed);
          if (view.request_key != hash) {
            scanned.error = fmt::format("holds request {}, not the one its name says", view.request_key.hex());
          }
          scanned.files = view.files.size();
          scanned.absent = view.absent.size();
          scanned.results = view.results.size();
        }
      }
      out.push_back(std::move(scanned));
    }
  }
  return out;
}

std::variant<Manifest, ContentError> DependencyManifests::read_file(const std::filesystem::path& path) const {
  const RawManifest raw = read_raw(path.string(), m_config.limits);
  if (raw.kind == RawManifest::Kind::absent) return ContentError{fmt::format("cannot open: {}", std::strerror(ENOENT))};
  if (raw.kind != RawManifest::Kind::ok) return ContentError{raw.error};
  return parse_manifest(raw.span(), m_config.limits);
}

}  // namespace kiln::cache
