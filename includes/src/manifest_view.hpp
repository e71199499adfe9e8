#pragma once
// A dependency manifest as parsed: views into the bytes it was read from. The one parser and the one
// serializer (manifest_format.cpp, the grammar in kiln/includes/dep_manifest.hpp) work on this form; the
// checker (manifest_check.hpp) and the manifest files (manifest_store.cpp, manifest_read.cpp) use it.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <span>
#include <string_view>
#include <vector>

#include "kiln/includes/dep_manifest.hpp"

namespace kiln::cache::detail {

inline constexpr std::size_t kChecksumBytes = 16;
inline constexpr std::size_t kResultFixedBytes = 24;  // result_key, file_refs, absent_refs
inline constexpr std::size_t kSummaryBytes = 40;      // result_key, set digest, header count, absent count

struct FileInfo {
  std::uint32_t path = 0;  ///< index into ManifestView::paths
  FileStat stat;
  bool trusted = false;
  Hash128 digest;
};

struct ResultRefs {
  Hash128 key;
  std::uint32_t files_begin = 0;  ///< into ManifestView::indices
  std::uint32_t files_count = 0;
  std::uint32_t absent_begin = 0;
  std::uint32_t absent_count = 0;
};

/// One parser and one serializer work on this form; Manifest (public) converts to and from it.
struct ManifestView {
  Hash128 request_key;
  std::string_view canonical;
  std::vector<std::string_view> paths;
  std::vector<FileInfo> files;
  std::vector<std::uint32_t> absent;  ///< path indices
  std::vector<ResultRefs> results;    ///< newest first
  std::vector<std::uint32_t> indices;
  /// One per result, as the head states it (parse_view checks it against the result's lists). The
  /// serializer computes the head from the lists and ignores these.
  std::vector<DependencySummary> summaries;

  [[nodiscard]] std::span<const std::uint32_t> result_files(const ResultRefs& r) const {
    return std::span(indices).subspan(r.files_begin, r.files_count);
  }
  [[nodiscard]] std::span<const std::uint32_t> result_absent(const ResultRefs& r) const {
    return std::span(indices).subspan(r.absent_begin, r.absent_count);
  }
  /// The head's serialized size: the fixed part, the canonical key, the summaries, the head checksum.
  [[nodiscard]] std::uint64_t head_size() const noexcept {
    return kManifestFixedBytes + canonical.size() + std::uint64_t{kSummaryBytes} * results.size() + kChecksumBytes;
  }
  /// The serialized size (saturating: a view that large is refused anyway).
  [[nodiscard]] std::uint64_t byte_size() const noexcept {
    std::uint64_t total = head_size() + kChecksumBytes;
    for (const std::string_view path : paths) total += 4 + path.size();
    total += std::uint64_t{kManifestFileInfoBytes} * files.size() + 4 * absent.size() +
             std::uint64_t{kResultFixedBytes} * results.size() + 4 * indices.size();
    return total;
  }
};

/// What the caller asked for: compared in place instead of re-hashing the stored canonical key.
struct ExpectedRequest {
  Hash128 key;
  std::string_view canonical;
};

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

/// A manifest's head: the request and each result's key with the summary of its dependency set.
struct HeadView {
  Hash128 request_key;
  std::string_view canonical;
  std::vector<std::pair<Hash128, DependencySummary>> results;  ///< newest first
};

/// Why a path is not one the grammar allows (1..max bytes, absolute, no NUL); nullopt when it is.
[[nodiscard]] std::optional<std::string> bad_path(std::string_view path, std::uint32_t max_bytes);
/// Checks the fixed part (`f` holds at least its kManifestFixedBytes) of a manifest file of `size` bytes:
/// size, magic, version, reserved field, each count against the limits, total_len, and the minimum size
/// the counts imply. Nothing is allocated before these pass.
[[nodiscard]] std::variant<Fixed, ContentError> check_fixed(const std::byte* f, std::uint64_t size,
                                                            const ManifestLimits& limits);
/// Parses the head (`bytes` holds at least fixed.head_size() bytes; check_fixed passed): its checksum,
/// the request it belongs to (`expected`, or the hash of its canonical key), the summaries.
[[nodiscard]] std::variant<HeadView, ContentError> parse_head(std::span<const std::byte> bytes, const Fixed& fixed,
                                                              const ExpectedRequest* expected);
/// Parses and verifies a whole manifest (every check of the grammar). `expected`: the request it must
/// belong to (null: its canonical key must hash to its request key). Never throws but std::bad_alloc.
[[nodiscard]] std::variant<ManifestView, ContentError> parse_view(std::span<const std::byte> bytes,
                                                                  const ManifestLimits& limits,
                                                                  const ExpectedRequest* expected);
/// The bytes of a view (the head computed from its lists). Throws std::length_error for a field that
/// cannot be represented.
[[nodiscard]] std::vector<std::byte> serialize_view(const ManifestView& view);
/// The summary of one result's dependency set (canonical_dependencies of its headers and absent paths).
[[nodiscard]] DependencySummary dependency_summary(const ManifestView& view, const ResultRefs& result);
/// Views into `manifest` (throws std::length_error for an index out of range), and back.
[[nodiscard]] ManifestView to_view(const Manifest& manifest);
[[nodiscard]] Manifest from_view(const ManifestView& view);

}  // namespace kiln::cache::detail
