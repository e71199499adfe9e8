#pragma once
// Capturing what this process writes to stderr (kiln's warnings), and counting what it says.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::test {

/// Occurrences of `needle` in `haystack` (each start position counts, so they may overlap).
std::size_t count_occurrences(std::string_view haystack, std::string_view needle);

/// Redirects stderr (fd 2) into a memory file for its lifetime; text() reads what was written.
class StderrCapture {
 public:
  /// What becomes of the captured text when the capture ends: dropped, or written to the real stderr
  /// so that the test log still shows it.
  enum class AtEnd : std::uint8_t { drop, echo };
  explicit StderrCapture(AtEnd at_end = AtEnd::drop);
  ~StderrCapture();
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;

  /// Everything written to stderr since construction.
  [[nodiscard]] std::string text() const;
  /// The number of kiln warnings ("kiln: warning:") in text().
  [[nodiscard]] std::size_t warnings() const { return count_occurrences(text(), "kiln: warning:"); }

 private:
  int m_saved = -1;
  int m_file = -1;
  AtEnd m_at_end = AtEnd::drop;
};

}  // namespace kiln::test
