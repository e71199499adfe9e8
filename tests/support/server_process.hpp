#pragma once
// What the throwaway servers of the tests (redis_server.hpp, http_server.hpp) share: finding their
// program, a free loopback port, and reading their logs.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace kiln::test {

/// The program: `$ENV_VARIABLE` when set (nullopt when it is not executable), else the first `name` on
/// PATH, else `fallback` when executable.
[[nodiscard]] std::optional<std::filesystem::path> find_executable(const char* env_variable, const std::string& name,
                                                                   const std::filesystem::path& fallback);

/// A TCP port on 127.0.0.1 that was free a moment ago (bound, read back and released).
[[nodiscard]] std::uint16_t free_loopback_port();

/// A file's bytes ("" when it cannot be read): a server's log, for a failure message.
[[nodiscard]] std::string read_text(const std::filesystem::path& path);

}  // namespace kiln::test
