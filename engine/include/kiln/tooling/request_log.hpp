#pragma once
// Request logs (KILN_RECORD=FILE): one JSON object per line, one line per distinct request an engine
// served, so `kiln prewarm --manifest FILE --target NEW` can replay real use for a new GPU, driver or
// container image. (Users know the file as a "manifest", the name of that flag; in code it is the
// request log, so as not to be confused with the cache's dependency manifests, kiln/includes/dep_manifest.hpp.)
// (kiln/tooling/: the engine's interface to kiln's own tools; installed, but not part of the stable API.)
//
// Line grammar (JSON, one object per line, UTF-8; blank lines are ignored):
//   {"v":1, "source":NAME, "builtin":BOOL, "source_hash":HEX32, "names":[STRING...],
//    "options":[STRING...], "target":STRING
//    [, "text":STRING | "text_base64":STRING]                       (runtime sources only)
//    [, "headers":[{"name":STRING, ("text":STRING | "text_base64":STRING)}...]]}  (runtime sources only)
// Built-in sources are found again by name; runtime sources carry their text and their user headers.
// Text that is not valid UTF-8 is stored as base64 ("text_base64") so every byte survives.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "kiln/source.hpp"

namespace kiln::detail {

inline constexpr int kRequestLogVersion = 1;
/// The largest request log read_request_log() reads: lines carry runtime sources (each up to the cache's
/// canonical key limit, base64 or escaped), so this is the cache's largest file (Limits::max_file_bytes).
inline constexpr std::uint64_t kMaxRequestLogBytes = 1ULL << 30;

/// One request as recorded.
struct RecordedRequest {
  std::string source_name;
  bool builtin = false;
  std::string source_hash;      ///< Hash128 hex of Source::content_hash()
  std::string source_text;      ///< runtime sources only
  std::vector<Header> headers;  ///< user headers only; runtime sources only
  std::vector<std::string> name_expressions;
  std::vector<std::string> options;  ///< Options::portable()
  std::string target;
  friend bool operator==(const RecordedRequest& a, const RecordedRequest& b) {
    return a.source_name == b.source_name && a.builtin == b.builtin && a.source_hash == b.source_hash &&
           a.source_text == b.source_text && a.name_expressions == b.name_expressions && a.options == b.options &&
           a.target == b.target && a.headers.size() == b.headers.size() &&
           std::equal(a.headers.begin(), a.headers.end(), b.headers.begin(),
                      [](const Header& x, const Header& y) { return x.name == y.name && x.text == y.text; });
  }
};

/// One JSON line (without the newline) for a record. Throws std::bad_alloc only.
[[nodiscard]] std::string request_log_line(const RecordedRequest& record);

/// Appends each distinct request to a request log. Thread-safe. Every line goes out in one write() on
/// an O_APPEND descriptor, so concurrent processes recording into one file never interleave lines.
class RequestRecorder {
 public:
  /// Opens nothing yet: the file is created (0600) on the first record.
  explicit RequestRecorder(std::filesystem::path path);
  ~RequestRecorder();
  RequestRecorder(const RequestRecorder&) = delete;
  RequestRecorder& operator=(const RequestRecorder&) = delete;

  /// Appends the record unless this recorder already wrote an identical one. A failure warns once
  /// (KILN_LOG warn) and is otherwise ignored: recording never fails a request. Never throws.
  void record(const RecordedRequest& record) noexcept;
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return m_path; }

 private:
  std::filesystem::path m_path;
  std::mutex m_mutex;
  int m_fd = -1;
  bool m_failed = false;
  std::unordered_set<std::string> m_seen;  // XXH3-128 hex of each line written
};

/// Parses one line (request_log_line's format). Throws kiln::ConfigError "why" for a malformed line.
[[nodiscard]] RecordedRequest parse_request_log_line(std::string_view line);

/// A line of a request log that is no record: its number (from 1) and why.
struct RequestLogLineError {
  std::size_t line = 0;
  std::string why;
};

/// Reads every record of a request log, in file order. Throws kiln::ConfigError
/// "manifest FILE line N: why" for a malformed line (a target or options the engine would refuse
/// included), "manifest FILE: why" for a file that cannot be read, is not a regular file or is over
/// kMaxRequestLogBytes (the messages name the file as users know it, after `--manifest`).
/// `line_numbers`, when given, receives each record's line number (from 1), so errors found later,
/// when a record is replayed, can name its line too. `bad_lines`, when given, receives each malformed
/// line instead of the throw, and the other lines are read: one line cut short by a recorder killed
/// mid-append, or written by a kiln that knows an option this one does not, spoils only itself.
[[nodiscard]] std::vector<RecordedRequest> read_request_log(const std::filesystem::path& path,
                                                            std::vector<std::size_t>* line_numbers = nullptr,
                                                            std::vector<RequestLogLineError>* bad_lines = nullptr);

}  // namespace kiln::detail
