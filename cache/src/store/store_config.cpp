// The store's configuration from the environment (StoreConfig::from_environment, store.hpp), the sizes it
// parses and the names of the store's modes.
#include "kiln/cache/store.hpp"

#include <fmt/format.h>
#include <pwd.h>
#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include "kiln/base/log.hpp"

namespace kiln::cache {
namespace {

bool env_flag(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return false;
  const std::string_view text(value);
  return !(text.empty() || text == "0" || text == "false" || text == "FALSE" || text == "no" || text == "off");
}

}  // namespace

std::string_view to_string(StoreMode mode) noexcept {
  switch (mode) {
    case StoreMode::read_write:
      return "read-write";
    case StoreMode::read_only:
      return "read-only";
    case StoreMode::memory_only:
      return "memory-only";
  }
  return "unknown";
}

std::optional<std::uint64_t> parse_size(std::string_view text) noexcept {
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0) return std::nullopt;
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + digits, value);
  if (error != std::errc{} || end != text.data() + digits) return std::nullopt;
  std::string_view suffix = text.substr(digits);
  // Accept "G", "GB", "GiB" (binary multiples, any case) and a bare "B".
  if (suffix.size() >= 2 &&
      (suffix.substr(1) == "iB" || suffix.substr(1) == "ib" || suffix.substr(1) == "B" || suffix.substr(1) == "b")) {
    suffix = suffix.substr(0, 1);
  }
  unsigned shift = 0;
  if (suffix.empty() || suffix == "B" || suffix == "b") {
    shift = 0;
  } else if (suffix == "k" || suffix == "K") {
    shift = 10;
  } else if (suffix == "m" || suffix == "M") {
    shift = 20;
  } else if (suffix == "g" || suffix == "G") {
    shift = 30;
  } else if (suffix == "t" || suffix == "T") {
    shift = 40;
  } else {
    return std::nullopt;
  }
  if (shift != 0 && value > (std::uint64_t{~0ULL} >> shift)) return std::nullopt;
  return value << shift;
}

StoreConfig StoreConfig::from_environment() {
  StoreConfig config;
  // Checked here because every configuration (engine and CLI) reads the environment through this
  // function; the logger itself cannot report a bad value.
  if (const char* level = std::getenv("KILN_LOG"); level != nullptr && *level != '\0' && !log::parse_level(level)) {
    throw std::invalid_argument(fmt::format("KILN_LOG='{}': expected error, warn, info or debug", level));
  }
  const char* dir = std::getenv("KILN_CACHE_DIR");
  if (dir != nullptr && *dir == '\0') {
    // Set but empty is almost always an unset shell variable ("$CACHE"): falling back to the default
    // cache would let `kiln cache clear` empty the user's own cache. The one rule for the variables that
    // name a path (this one and KILN_RECORD, EngineConfig::from_environment): empty is refused, not
    // taken as unset. Flags, sizes and levels (KILN_CACHE_DISABLE, KILN_CACHE_MAXSIZE, KILN_LOG) take an
    // empty value as unset: for them the default is what an unset shell variable meant anyway.
    throw std::invalid_argument(
        "KILN_CACHE_DIR is set but empty: give a directory, or unset it to use $XDG_CACHE_HOME/kiln or "
        "~/.cache/kiln");
  }
  if (dir != nullptr) {
    config.root = dir;
  } else if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] == '/') {
    config.root = std::filesystem::path(xdg) / "kiln";
  } else if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    config.root = std::filesystem::path(home) / ".cache" / "kiln";
  } else {
    struct passwd entry {};
    struct passwd* found = nullptr;
    char buffer[4096];
    if (::getpwuid_r(::geteuid(), &entry, buffer, sizeof(buffer), &found) == 0 && found != nullptr &&
        found->pw_dir != nullptr && found->pw_dir[0] == '/') {
      config.root = std::filesystem::path(found->pw_dir) / ".cache" / "kiln";
    }
  }
  config.disabled = env_flag("KILN_CACHE_DISABLE");
  config.read_only = env_flag("KILN_CACHE_READONLY");
  if (const char* size = std::getenv("KILN_CACHE_MAXSIZE"); size != nullptr && *size != '\0') {
    const auto bytes = parse_size(size);
    if (!bytes) {
      throw std::invalid_argument(fmt::format(
          "KILN_CACHE_MAXSIZE=\"{}\" is not a size: give bytes or a K/M/G/T suffix (binary), e.g. 512M or 2G", size));
    }
    if (*bytes == 0) {
      throw std::invalid_argument(
          fmt::format("KILN_CACHE_MAXSIZE=\"{}\": the size cap must be above 0 (to keep nothing on disk, set "
                      "KILN_CACHE_DISABLE=1)",
                      size));
    }
    config.max_size = *bytes;
  }
  // The share of the cache precompiled headers may take (StoreConfig::pch_limit). 0 keeps none.
  if (const char* size = std::getenv("KILN_PCH_MAXSIZE"); size != nullptr && *size != '\0') {
    const auto bytes = parse_size(size);
    if (!bytes) {
      throw std::invalid_argument(fmt::format(
          "KILN_PCH_MAXSIZE=\"{}\" is not a size: give bytes or a K/M/G/T suffix (binary), e.g. 256M", size));
    }
    if (*bytes > config.max_size) {
      KILN_LOG(warn, "KILN_PCH_MAXSIZE={} is above the cache's size cap ({} bytes, KILN_CACHE_MAXSIZE): precompiled "
               "headers may take all of it, never more", size, config.max_size);
    }
    // 0 is a share of nothing: no precompiled header is kept (pch_limit() reads 0 as "half", so 1 byte).
    config.pch_max_size = *bytes == 0 ? 1 : *bytes;
  }
  return config;
}

}  // namespace kiln::cache
