#pragma once
// What the two runtime lanes (cuda_driver.cpp, hip_runtime.cpp) keep and say alike: the library, its
// version and the devices found, the device check, and the wording of a failed call.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "lanes/dynlib.hpp"
#include "lanes/lane.hpp"

namespace kiln::vendor {

class LaneRuntime : public Runtime {
 public:
  Vendor vendor() const noexcept override { return m_vendor; }
  std::vector<LibraryInfo> libraries() const override { return {{m_role, m_library.path(), m_version}}; }
  const std::vector<DeviceInfo>& devices() const noexcept override { return m_devices; }

 protected:
  /// `name` is the vendor as messages say it ("CUDA"), `role` the library's (LibraryInfo::role).
  LaneRuntime(Vendor vendor, const char* name, const char* role, DynamicLibrary library)
      : m_library(std::move(library)), m_vendor(vendor), m_name(name), m_role(role) {}

  /// The index of `device`; ConfigError when there is no such device. Inline: every launch asks.
  std::size_t device_index(int device) const {
    if (device < 0 || static_cast<std::size_t>(device) >= m_devices.size()) no_such_device(device);
    return static_cast<std::size_t>(device);
  }
  const DeviceInfo& device_info(int device) const { return m_devices[device_index(device)]; }

  DynamicLibrary m_library;
  std::string m_version;              ///< the library's, set by the lane's constructor
  std::vector<DeviceInfo> m_devices;  ///< set by the lane's constructor, then never changed

 private:
  [[noreturn]] void no_such_device(int device) const;

  Vendor m_vendor;
  const char* m_name;
  const char* m_role;
};

/// "<name> (<text>)", with stand-ins where the library gave none: how a vendor error is described.
std::string describe_error(const char* name, const char* text, const char* unknown_name);

/// "<call> failed: <description>[ (<context>)]": the message of every failed runtime call.
std::string call_failed_message(const char* call, const std::string& description, std::string_view context);

}  // namespace kiln::vendor
