#pragma once
// kiln's one logger: lines to stderr, "kiln: <level>: <message>", filtered by KILN_LOG
// (error|warn|info|debug; default warn). Thread-safe; never throws.
#include <optional>
#include <string_view>

namespace kiln::log {

enum class Level : int { error = 0, warn = 1, info = 2, debug = 3 };

/// "error", "warn" (or "warning"), "info", "debug"; nullopt for anything else. An unset or empty
/// KILN_LOG means warn; any other value that names no level is a configuration error, reported by
/// StoreConfig::from_environment (the logger itself never throws and then keeps warn).
[[nodiscard]] std::optional<Level> parse_level(std::string_view text) noexcept;

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
