#include "lanes/runtime_common.hpp"

#include <fmt/format.h>

#include "kiln/error.hpp"

namespace kiln::vendor {

void LaneRuntime::no_such_device(int device) const {
  throw ConfigError(fmt::format("{} device {} does not exist ({} device(s))", m_name, device, m_devices.size()));
}

std::string describe_error(const char* name, const char* text, const char* unknown_name) {
  return fmt::format("{} ({})", name != nullptr ? name : unknown_name, text != nullptr ? text : "no description");
}

std::string call_failed_message(const char* call, const std::string& description, std::string_view context) {
  std::string message = fmt::format("{} failed: {}", call, description);
  if (!context.empty()) message += fmt::format(" ({})", context);
  return message;
}

}  // namespace kiln::vendor
