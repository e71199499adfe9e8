#pragma once
// A fresh folder for one test, removed with everything in it when the test is done, whatever modes the
// test left on the folders inside (tests chmod folders to 0500 or 0000 to make the store's writes fail).
#include <sys/types.h>

#include <filesystem>
#include <string>
#include <string_view>

namespace kiln::test {

class TempDir {
 public:
  /// Makes `<temp>/<prefix>-XXXXXX` (mkdtemp: mode 0700, a name no other process has), where `<temp>`
  /// is std::filesystem::temp_directory_path() ($TMPDIR, else /tmp). Throws std::system_error.
  explicit TempDir(const std::string& prefix = "kiln-test");
  /// Gives the owner every right on each folder below (links are not followed), then removes the tree.
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  [[nodiscard]] const std::filesystem::path& path() const noexcept { return m_path; }
  [[nodiscard]] std::filesystem::path operator/(const std::string& name) const { return m_path / name; }

  /// Writes `text` to `name` in this folder (created owner-only, so it is never readable by others on
  /// the way), then gives it `mode`; returns its path. Throws std::system_error.
  std::string write_file(const std::string& name, std::string_view text, mode_t mode = 0600) const;

 private:
  std::filesystem::path m_path;
};

}  // namespace kiln::test
