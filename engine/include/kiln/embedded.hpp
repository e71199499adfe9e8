#pragma once
// The files of device_src/, embedded into libkiln at build time (name -> bytes). No file is read at
// run time.
#include <span>
#include <string_view>

namespace kiln {

struct EmbeddedFile {
  std::string_view name;  ///< path relative to device_src/, e.g. "saxpy.cu", "kiln/rtc.h"
  std::string_view text;
};

namespace detail {
std::span<const EmbeddedFile> embedded_files() noexcept;
}

/// Every embedded file, sorted by name. Never throws.
[[nodiscard]] inline std::span<const EmbeddedFile> embedded_files() noexcept { return detail::embedded_files(); }

}  // namespace kiln
