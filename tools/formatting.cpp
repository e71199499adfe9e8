#include "formatting.hpp"

#include <algorithm>
#include <charconv>
#include <ctime>
#include <system_error>

#include <fmt/format.h>

#include "cli.hpp"
#include "kiln/cache/store.hpp"

namespace kiln::cli {

std::string format_bytes(std::uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  return value < 10.0 ? fmt::format("{:.2f} {}", value, kUnits[unit]) : fmt::format("{:.1f} {}", value, kUnits[unit]);
}

std::int64_t to_unix(std::chrono::system_clock::time_point when) {
  return std::chrono::duration_cast<std::chrono::seconds>(when.time_since_epoch()).count();
}

std::string format_age(std::chrono::system_clock::time_point when) {
  const auto now = std::chrono::system_clock::now();
  if (when > now + std::chrono::seconds(60)) return "in the future";
  const std::int64_t seconds = std::max<std::int64_t>(0, to_unix(now) - to_unix(when));
  if (seconds < 120) return fmt::format("{} s", seconds);
  if (seconds < 2 * 3600) return fmt::format("{} min", seconds / 60);
  if (seconds < 2 * 86400) return fmt::format("{} h", seconds / 3600);
  return fmt::format("{} d", seconds / 86400);
}

std::string format_time(std::int64_t unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  if (gmtime_r(&t, &tm) == nullptr) return std::to_string(unix_seconds);
  char text[64];
  if (std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S UTC", &tm) == 0) return std::to_string(unix_seconds);
  return text;
}

std::string format_seconds(double seconds) {
  if (seconds < 10.0) return fmt::format("{:.2f} s", seconds);
  if (seconds < 120.0) return fmt::format("{:.1f} s", seconds);
  const auto whole = static_cast<std::int64_t>(seconds);
  return fmt::format("{} min {} s", whole / 60, whole % 60);
}

std::string counted(std::uint64_t count, std::string_view one, std::string_view many) {
  return fmt::format("{} {}", count, count == 1 ? one : many);
}

std::string one_line(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.remove_suffix(1);
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    if (c == '\n') {
      out += "; ";
    } else if (c != '\r') {
      out += c;
    }
  }
  return out;
}

std::chrono::seconds parse_age(std::string_view text, std::string_view flag) {
  const auto bad = [&] {
    return UsageError(
        fmt::format("invalid age '{}' for {} (expected a number with s, m, h, d or w, e.g. 30d, 12h)", text, flag));
  };
  if (text.empty()) throw bad();
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end == text.data()) throw bad();
  const std::string_view unit(end, static_cast<std::size_t>(text.data() + text.size() - end));
  std::uint64_t scale = 0;
  if (unit.empty() || unit == "s") {
    scale = 1;
  } else if (unit == "m" || unit == "min") {
    scale = 60;
  } else if (unit == "h") {
    scale = 3600;
  } else if (unit == "d") {
    scale = 86400;
  } else if (unit == "w") {
    scale = 7 * 86400;
  } else {
    throw bad();
  }
  if (value > static_cast<std::uint64_t>(INT64_MAX) / scale / 2) throw bad();
  return std::chrono::seconds(static_cast<std::int64_t>(value * scale));
}

std::uint64_t parse_size_flag(std::string_view text, std::string_view flag) {
  const auto size = cache::parse_size(text);
  if (!size) {
    throw UsageError(
        fmt::format("invalid size '{}' for {} (expected bytes or a number with K, M, G, e.g. 500M, 2G)", text, flag));
  }
  return *size;
}

}  // namespace kiln::cli
