#include "lanes/dynlib.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <link.h>

#include <cstdlib>
#include <utility>

#include "kiln/error.hpp"
#include "lanes/symbols.hpp"

namespace kiln::vendor {

DynamicLibrary::DynamicLibrary(DynamicLibrary&& other) noexcept
    : m_handle(std::exchange(other.m_handle, nullptr)), m_path(std::move(other.m_path)) {}

DynamicLibrary& DynamicLibrary::operator=(DynamicLibrary&& other) noexcept {
  if (this != &other) {
    if (m_handle != nullptr) dlclose(m_handle);
    m_handle = std::exchange(other.m_handle, nullptr);
    m_path = std::move(other.m_path);
  }
  return *this;
}

// Vendor libraries are never unloaded: drivers register atexit handlers and threads that would
// outlive an unmap. The handle is simply dropped.
DynamicLibrary::~DynamicLibrary() = default;

DynamicLibrary DynamicLibrary::open_first(const std::vector<std::string>& candidates,
                                          std::vector<std::string>& searched) {
  DynamicLibrary library;
  for (const std::string& candidate : candidates) {
    void* handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      std::string reason = why != nullptr ? why : "not found";
      // dlerror repeats the name; keep the reason short when the file is simply absent.
      if (reason.find("No such file") != std::string::npos ||
          reason.find("cannot open shared object") != std::string::npos) {
        reason = "not found";
      }
      searched.push_back(candidate + " (" + reason + ")");
      continue;
    }
    library.m_handle = handle;
    link_map* map = nullptr;
    if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr &&
        map->l_name[0] != '\0') {
      library.m_path = map->l_name;
    } else {
      library.m_path = candidate;
    }
    return library;
  }
  return library;
}

void* DynamicLibrary::symbol(const char* name) const noexcept {
  return m_handle == nullptr ? nullptr : dlsym(m_handle, name);
}

std::vector<std::string> env_dirs(const char* variable, std::initializer_list<const char*> subdirs) {
  std::vector<std::string> dirs;
  const char* value = std::getenv(variable);
  if (value == nullptr || value[0] == '\0') return dirs;
  for (const char* sub : subdirs) dirs.push_back(std::string(value) + "/" + sub);
  return dirs;
}

std::vector<std::string> search_list(const std::vector<std::string>& dirs, std::initializer_list<const char*> names) {
  std::vector<std::string> out;
  for (const std::string& dir : dirs) {
    for (const char* name : names) out.push_back(dir + "/" + name);
  }
  for (const char* name : names) out.emplace_back(name);
  return out;
}

std::string join_searched(const std::vector<std::string>& searched) {
  return fmt::format("{}", fmt::join(searched, "; "));
}

void throw_missing_symbol(std::string_view library, std::string_view symbol, std::string_view detail) {
  std::string message = fmt::format("{} lacks required symbol {}", library, symbol);
  if (!detail.empty()) message += fmt::format(" ({})", detail);
  throw DeviceUnavailable(message);
}

}  // namespace kiln::vendor
