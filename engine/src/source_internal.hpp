#pragma once
// What the engine knows about sources beyond the public Source API.
#include <string_view>

namespace kiln::detail {

/// SHA-256 (64 lowercase hex digits) of kiln's embedded headers (device_src/**/*.h: each one's name,
/// size and bytes, in name order; the record is described in cmake/KilnEmbedScript.cmake), computed
/// when libkiln is built, so no process spends time on it. Cache keys of sources that use these
/// headers unchanged name them by this digest instead of carrying their text: they are kiln's own
/// files, fixed in each build, so the digest identifies them, and a key stays small. Defined in the
/// generated kiln_embedded_sources.cpp.
[[nodiscard]] std::string_view embedded_headers_digest() noexcept;

}  // namespace kiln::detail
