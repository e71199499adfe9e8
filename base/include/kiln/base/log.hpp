#pragma once
// kiln's one logger: lines to stderr, "kiln: <level>: <message>", filtered by KILN_LOG
// (error|warn|info|debug; default warn). Thread-safe; never throws.
#include <string_view>

namespace kiln::log {

enum class Level : int { error = 0, warn = 1, info = 2, debug = 3 };

/// The active level (read from KILN_LOG once; set_level overrides).
[[nodiscard]] Level level() noexcept;
void set_level(Level level) noexcept;
[[nodiscard]] inline bool enabled(Level l) noexcept { return static_cast<int>(l) <= static_cast<int>(level()); }
/// Writes one line if `l` is enabled.
void write(Level l, std::string_view message) noexcept;

}  // namespace kiln::log

// Call sites format with fmt (header-only) only when the level is on:
//   KILN_LOG(warn, "cache root {} refused: {}", root, why);
#define KILN_LOG(lvl, ...)                                                  \
  do {                                                                      \
    if (::kiln::log::enabled(::kiln::log::Level::lvl))                      \
      ::kiln::log::write(::kiln::log::Level::lvl, ::fmt::format(__VA_ARGS__)); \
  } while (0)
