#pragma once
// A dependency manifest as parsed (dep_manifest.cpp): views into the bytes it was read from. The one
// parser and the one serializer work on this form; the checker (dep_check.hpp) reads it.
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "kiln/cache/dep_manifest.hpp"

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

}  // namespace kiln::cache::detail
