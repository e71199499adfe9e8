// The request log (KILN_RECORD): every byte of a runtime source survives a round trip, malformed lines are
// refused with their line number, the recorder writes each distinct request once, never throws, and
// processes appending to one request log never interleave lines.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "kiln/error.hpp"
#include "kiln/tooling/request_log.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using kiln::detail::RecordedRequest;
using kiln::test::TempDir;

RecordedRequest builtin_record() {
  RecordedRequest record;
  record.source_name = "map.cu";
  record.builtin = true;
  record.source_hash = "0123456789abcdef0123456789abcdef";
  record.name_expressions = {"kiln::map<float, 4>"};
  record.options = {"--fast-math", "-DTILE=8"};
  record.target = "sm_90";
  return record;
}

RecordedRequest runtime_record(std::string text) {
  RecordedRequest record;
  record.source_name = "user.cu";
  record.builtin = false;
  record.source_hash = "fedcba9876543210fedcba9876543210";
  record.source_text = std::move(text);
  record.headers = {{"user/a.h", "#define A 1\n"}, {"user/b.h", std::string("\xff\xfe\x00\x01 binary", 12)}};
  record.target = "gfx90a:sramecc+:xnack-";
  return record;
}

std::string manifest_error(const fs::path& path) {
  try {
    (void)kiln::detail::read_request_log(path);
  } catch (const kiln::ConfigError& error) {
    return error.what();
  }
  return "(read)";
}

}  // namespace

TEST_CASE("manifest lines round-trip every byte, including text that is not UTF-8") {
  std::string every_byte;
  for (int b = 0; b < 256; ++b) every_byte += static_cast<char>(b);
  for (const RecordedRequest& record :
       {builtin_record(), runtime_record("extern \"C\" __global__ void k() {}\n// \xc3\xa9t\xc3\xa9\n"),
        runtime_record(every_byte)}) {
    const std::string line = kiln::detail::request_log_line(record);
    CHECK(line.find('\n') == std::string::npos);
    CHECK(line.rfind("{\"v\":1,", 0) == 0);
    CHECK(kiln::detail::parse_request_log_line(line) == record);
  }
  // Valid UTF-8 stays readable text; other bytes go to base64.
  CHECK(kiln::detail::request_log_line(runtime_record("plain text")).find("\"text\":\"plain text\"") != std::string::npos);
  CHECK(kiln::detail::request_log_line(runtime_record(every_byte)).find("\"text_base64\":") != std::string::npos);
  // Built-in sources carry no text.
  CHECK(kiln::detail::request_log_line(builtin_record()).find("\"text") == std::string::npos);
}

TEST_CASE("read_request_log skips blank lines and names the line of a malformed record") {
  const TempDir dir;
  const fs::path path = dir.path() / "m.jsonl";
  const std::string good = kiln::detail::request_log_line(builtin_record());
  std::ofstream(path) << good << "\n\n   \n" << kiln::detail::request_log_line(runtime_record("x")) << "\r\n";
  const auto records = kiln::detail::read_request_log(path);
  REQUIRE(records.size() == 2);
  CHECK(records[0] == builtin_record());
  CHECK(records[1] == runtime_record("x"));

  const auto with_line3 = [&](const std::string& line) {
    std::ofstream(path) << good << "\n\n" << line << "\n";
    return manifest_error(path);
  };
  CHECK_THAT(with_line3("{oops"), Catch::Contains("line 3: not valid JSON"));
  CHECK_THAT(with_line3("[1,2]"), Catch::Contains("line 3: not a JSON object"));
  CHECK_THAT(with_line3(R"({"v":2})"), Catch::Contains("line 3: manifest version 2 is not supported"));
  CHECK_THAT(
      with_line3(
          R"({"v":1,"source":"a.cu","builtin":true,"source_hash":"00","names":[],"options":[],"target":"sm_90"})"),
      Catch::Contains("line 3: \"source_hash\" is not 32 hex digits"));
  CHECK_THAT(
      with_line3(
          R"({"v":1,"source":"a.cu","builtin":false,"source_hash":"0123456789abcdef0123456789abcdef","names":[],"options":[],"target":"sm_90"})"),
      Catch::Contains("line 3: runtime source: has neither"));
  CHECK_THAT(
      with_line3(
          R"({"v":1,"source":"a.cu","builtin":true,"source_hash":"0123456789abcdef0123456789abcdef","names":[1],"options":[],"target":"sm_90"})"),
      Catch::Contains("line 3: \"names\" holds a non-string"));
  CHECK_THAT(manifest_error(dir.path() / "missing.jsonl"), Catch::Contains("cannot open"));
  CHECK_THAT(manifest_error(dir.path()), Catch::Contains("is a directory"));
}

// Hardening issue, 5: one line cut short by a recorder killed mid-append, or naming an option this kiln
// does not know, made the whole request log unreadable.
TEST_CASE("read_request_log hands back malformed lines, with their numbers, when asked, and reads the rest") {
  const TempDir dir;
  const fs::path path = dir.path() / "m.jsonl";
  const std::string good = kiln::detail::request_log_line(builtin_record());
  RecordedRequest unknown_option = builtin_record();
  unknown_option.options = {"--no-such-option"};
  std::ofstream(path) << good << "\n"
                      << good.substr(0, good.size() / 2) << "\n\n"
                      << kiln::detail::request_log_line(unknown_option) << "\n"
                      << kiln::detail::request_log_line(runtime_record("x")) << "\n"
                      << good.substr(0, 10);  // the last line, cut short without its newline
  std::vector<std::size_t> lines;
  std::vector<kiln::detail::RequestLogLineError> bad;
  const auto records = kiln::detail::read_request_log(path, &lines, &bad);
  REQUIRE(records.size() == 2);
  CHECK(records[0] == builtin_record());
  CHECK(records[1] == runtime_record("x"));
  CHECK(lines == std::vector<std::size_t>{1, 5});
  REQUIRE(bad.size() == 3);
  CHECK(bad[0].line == 2);
  CHECK_THAT(bad[0].why, Catch::StartsWith("not valid JSON"));
  CHECK(bad[1].line == 4);
  CHECK_THAT(bad[1].why, Catch::StartsWith("\"options\": ") && Catch::Contains("--no-such-option"));
  CHECK(bad[2].line == 6);
  // Without the list, the first malformed line is an error naming it, as before.
  CHECK_THAT(manifest_error(path), Catch::Contains("line 2: not valid JSON"));
}

TEST_CASE("the recorder writes each distinct request once and never throws") {
  const TempDir dir;
  const fs::path path = dir.path() / "rec.jsonl";
  {
    kiln::detail::RequestRecorder recorder(path);
    CHECK_FALSE(fs::exists(path));  // nothing is created before the first record
    recorder.record(builtin_record());
    recorder.record(builtin_record());
    recorder.record(runtime_record("a"));
    recorder.record(runtime_record("a"));
    recorder.record(runtime_record("b"));
  }
  CHECK(kiln::detail::read_request_log(path).size() == 3);
  CHECK((fs::status(path).permissions() & fs::perms::all) == (fs::perms::owner_read | fs::perms::owner_write));
  kiln::detail::RequestRecorder broken(dir.path() / "no" / "such" / "dir.jsonl");
  CHECK_NOTHROW(broken.record(builtin_record()));
  CHECK_NOTHROW(broken.record(runtime_record("again")));
}

TEST_CASE("processes recording into one manifest never interleave lines") {
  const TempDir dir;
  const fs::path path = dir.path() / "shared.jsonl";
  constexpr int kProcesses = 4;
  constexpr int kRecords = 40;
  std::vector<pid_t> children;
  for (int p = 0; p < kProcesses; ++p) {
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      kiln::detail::RequestRecorder recorder(path);
      for (int r = 0; r < kRecords; ++r) {
        // Lines well over PIPE_BUF (4096), so a torn write would show.
        recorder.record(runtime_record(std::string(9000, static_cast<char>('a' + p)) + std::to_string(r)));
      }
      ::_exit(0);
    }
    children.push_back(pid);
  }
  for (const pid_t pid : children) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
  }
  const auto records = kiln::detail::read_request_log(path);
  CHECK(records.size() == kProcesses * kRecords);
}
