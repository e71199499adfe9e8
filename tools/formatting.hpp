#pragma once
// Sizes, times and durations as the CLI prints them, and the flag values that name them (--max-size,
// --older-than).
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::cli {

/// "0 B", "812 B", "1.4 KiB", "12.0 MiB", "3.21 GiB".
[[nodiscard]] std::string format_bytes(std::uint64_t bytes);
/// "4 s", "12 min", "3 h", "5 d" relative to now ("in the future" when ahead of the clock).
[[nodiscard]] std::string format_age(std::chrono::system_clock::time_point when);
/// "2024-05-01 12:34:56 UTC".
[[nodiscard]] std::string format_time(std::int64_t unix_seconds);
[[nodiscard]] std::int64_t to_unix(std::chrono::system_clock::time_point when);
/// "0.41 s", "1 min 12 s".
[[nodiscard]] std::string format_seconds(double seconds);
/// "1 entry", "2 entries": `count` and the noun in the number it takes.
[[nodiscard]] std::string counted(std::uint64_t count, std::string_view one, std::string_view many);
/// Replaces newlines with "; " so a message prints as one line.
[[nodiscard]] std::string one_line(std::string_view text);
/// Parses "90s", "30m", "12h", "7d", "2w" (a bare number is seconds). Throws UsageError naming `flag`.
[[nodiscard]] std::chrono::seconds parse_age(std::string_view text, std::string_view flag);
/// cache::parse_size with a UsageError naming `flag` for nonsense.
[[nodiscard]] std::uint64_t parse_size_flag(std::string_view text, std::string_view flag);

}  // namespace kiln::cli
