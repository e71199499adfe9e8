#pragma once
// dlopen with a search list: what was tried is kept, so "not found" errors can name every path.
#include <initializer_list>
#include <string>
#include <vector>

namespace kiln::vendor {

class DynamicLibrary {
 public:
  DynamicLibrary() = default;
  DynamicLibrary(DynamicLibrary&& other) noexcept;
  DynamicLibrary& operator=(DynamicLibrary&& other) noexcept;
  DynamicLibrary(const DynamicLibrary&) = delete;
  DynamicLibrary& operator=(const DynamicLibrary&) = delete;
  ~DynamicLibrary();

  /// Tries each candidate (a full path, or a bare name for the loader's search path) in order; the
  /// first that loads wins. Every attempt is appended to `searched` ("path (dlerror)"). Never throws.
  static DynamicLibrary open_first(const std::vector<std::string>& candidates, std::vector<std::string>& searched);

  [[nodiscard]] bool loaded() const noexcept { return m_handle != nullptr; }
  /// The resolved file path of the loaded library (from the dynamic linker).
  [[nodiscard]] const std::string& path() const noexcept { return m_path; }
  /// dlsym; nullptr when absent.
  [[nodiscard]] void* symbol(const char* name) const noexcept;

 private:
  void* m_handle = nullptr;
  std::string m_path;
};

/// Directories named by an environment variable plus suffixes, e.g. ("ROCM_PATH", {"lib", "lib64"}).
std::vector<std::string> env_dirs(const char* variable, std::initializer_list<const char*> subdirs);

/// Every directory in `dirs` with every name, then every bare name (the loader's own search path).
std::vector<std::string> search_list(const std::vector<std::string>& dirs, std::initializer_list<const char*> names);

/// The attempts open_first recorded, as one line for a "not found" error.
std::string join_searched(const std::vector<std::string>& searched);

}  // namespace kiln::vendor
