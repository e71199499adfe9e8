#pragma once
// Private to cache/: publishing a file atomically. A temp file is created beside the target
// (".<name>.tmp.<pid>.<random>", O_EXCL, mode 0600), written and renamed over the target by commit()
// (not fsync'ed: readers check every file whole, see commit()). A file that was never committed is removed by the destructor, so no failure path (an
// exception, a full disk, a cancelled compile) can leave a partial file under the target's name.
#include <cstddef>
#include <span>
#include <string>

namespace kiln::cache::detail {

/// The marker every temp file name holds; sweep_temps() recognises temps by it (and the leading dot).
inline constexpr std::string_view kTempMarker = ".tmp.";

class AtomicFile {
 public:
  /// Creates the temp file. On failure error() is the errno and nothing exists on disk.
  explicit AtomicFile(std::string target_path) noexcept;
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  /// 0 when the temp file is open (or committed); else the errno of the failed step.
  [[nodiscard]] int error() const noexcept { return m_error; }
  /// What failed, for messages: "write /x/.ab.kiln.tmp.12.3f: No space left on device".
  [[nodiscard]] const std::string& error_text() const noexcept { return m_error_text; }
  [[nodiscard]] const std::string& temp_path() const noexcept { return m_temp_path; }
  [[nodiscard]] const std::string& target_path() const noexcept { return m_target_path; }

  /// Appends bytes (retrying short writes and EINTR). Returns false and sets error() on failure.
  bool write(std::span<const std::byte> bytes) noexcept;
  /// close + rename over the target. Returns false and sets error() on failure; the temp
  /// file is then removed by the destructor.
  bool commit() noexcept;

 private:
  void create();
  void fail(int error, const char* step, const std::string& path) noexcept;

  std::string m_target_path;
  std::string m_temp_path;
  int m_fd = -1;
  int m_error = 0;
  std::string m_error_text;
  bool m_committed = false;
};

/// The pid a temp file name records, or -1 when the name is not a temp file's.
[[nodiscard]] long temp_file_owner(std::string_view file_name) noexcept;

}  // namespace kiln::cache::detail
