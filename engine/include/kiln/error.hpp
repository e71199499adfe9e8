#pragma once
// kiln's exceptions. Messages start with what failed, then name the vendor call, its error name and
// string, and the context (entry, target, device). Catch kiln::Error for all of them.
#include <stdexcept>
#include <string>
#include <vector>

namespace kiln {

/// Base of every error kiln reports to a caller.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A compile failed. Carries the compiler's whole log, the source name and the options it was given.
class CompileError : public Error {
 public:
  CompileError(std::string message, std::string log, std::string source_name, std::vector<std::string> options)
      : Error(std::move(message)), m_log(std::move(log)), m_source_name(std::move(source_name)),
        m_options(std::move(options)) {}
  [[nodiscard]] const std::string& log() const noexcept { return m_log; }
  [[nodiscard]] const std::string& source_name() const noexcept { return m_source_name; }
  [[nodiscard]] const std::vector<std::string>& options() const noexcept { return m_options; }

 private:
  std::string m_log;
  std::string m_source_name;
  std::vector<std::string> m_options;
};

/// A binary could not be loaded, or a kernel name is not in the module.
class LoadError : public Error {
 public:
  using Error::Error;
};

/// A launch was refused (by kiln's checks or by the driver), or a memory/stream operation failed.
class LaunchError : public Error {
 public:
  using Error::Error;
};

/// The device (or the host, for pinned buffers) had no memory for an allocation the driver was asked for.
class OutOfMemory : public LaunchError {
 public:
  using LaunchError::LaunchError;
};

/// Bad input: unknown target, bad option, unknown built-in source, malformed environment variable.
class ConfigError : public Error {
 public:
  using Error::Error;
};

/// A vendor library or device is not there (names every path searched).
class DeviceUnavailable : public Error {
 public:
  using Error::Error;
};

}  // namespace kiln
