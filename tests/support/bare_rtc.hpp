#pragma once
// The compilers without kiln, for tests that compare kiln's bytes with theirs: NVRTC or HIPRTC loaded with
// dlopen from a path (the library kiln loaded: LaneInfo's library path) and called as a user calls it, one
// program per compile, with the flags and in-memory headers given and nothing else. Declared here by the
// C ABI alone, so the support library needs no vendor header. And blank_internal_tags, which makes two
// NVRTC outputs comparable where NVRTC writes a random tag into them.
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::test {

/// What one bare compile gave.
struct BareOutput {
  bool ok = false;
  std::string log;
  /// NVRTC: the CUBIN, or for a virtual arch (no CUBIN) the PTX with its NUL, as kiln returns them;
  /// HIPRTC: the code object. Empty when the compile failed.
  std::vector<std::byte> code;
  /// Each name expression given to compile() and the symbol the compiler lowered it to, in that order.
  std::vector<std::pair<std::string, std::string>> lowered;
};

class BareCompiler {
 public:
  /// Loads the library at `path` (dlopen, RTLD_NOW) and its functions. Throws std::runtime_error naming
  /// what is missing.
  static std::unique_ptr<BareCompiler> nvrtc(const std::string& path);
  static std::unique_ptr<BareCompiler> hiprtc(const std::string& path);
  ~BareCompiler();
  BareCompiler(const BareCompiler&) = delete;
  BareCompiler& operator=(const BareCompiler&) = delete;

  /// Compiles `source` under `name` with `flags` and the in-memory `headers` (name, text), adding each of
  /// `names` as a name expression first.
  [[nodiscard]] BareOutput compile(const std::string& name, const std::string& source,
                                   const std::vector<std::string>& flags,
                                   const std::vector<std::pair<std::string, std::string>>& headers = {},
                                   const std::vector<std::string>& names = {}) const;
  [[nodiscard]] const std::string& path() const noexcept { return m_path; }

 private:
  struct Api;
  BareCompiler(std::string path, bool nvidia);
  std::string m_path;
  bool m_nvidia;
  void* m_library = nullptr;
  std::unique_ptr<Api> m_api;
};

/// `bytes` with the 8 hex digits NVRTC puts in internal-linkage names (_INTERNAL_<8 hex>_<n>_<file>_<tag>)
/// blanked: the tag is random per compile, with or without PCH (engine/src/lanes/nvrtc_pch.hpp), so two
/// compiles of one source that defines such names are compared with it blanked.
std::string blank_internal_tags(std::span<const std::byte> bytes);

}  // namespace kiln::test
