#include "kiln/base/log.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <string_view>

namespace kiln::log {
namespace {

Level level_from_environment() noexcept {
  const char* value = std::getenv("KILN_LOG");
  if (value == nullptr) return Level::warn;
  return parse_level(value).value_or(Level::warn);
}

std::atomic<int>& current() noexcept {
  static std::atomic<int> value{static_cast<int>(level_from_environment())};
  return value;
}

constexpr std::string_view kNames[] = {"error", "warning", "info", "debug"};

}  // namespace

std::optional<Level> parse_level(std::string_view text) noexcept {
  if (text == "error") return Level::error;
  if (text == "warn" || text == "warning") return Level::warn;
  if (text == "info") return Level::info;
  if (text == "debug") return Level::debug;
  return std::nullopt;
}

Level level() noexcept { return static_cast<Level>(current().load(std::memory_order_relaxed)); }
void set_level(Level l) noexcept { current().store(static_cast<int>(l), std::memory_order_relaxed); }

void write(Level l, std::string_view message) noexcept {
  if (!enabled(l)) return;
  static std::mutex mutex;
  const std::lock_guard lock(mutex);
  std::fprintf(stderr, "kiln: %.*s: %.*s\n", static_cast<int>(kNames[static_cast<int>(l)].size()),
               kNames[static_cast<int>(l)].data(), static_cast<int>(message.size()), message.data());
}

}  // namespace kiln::log
