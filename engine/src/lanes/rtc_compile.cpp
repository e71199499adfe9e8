#include "lanes/rtc_compile.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "kiln/error.hpp"

namespace kiln::vendor::rtc {
namespace {

/// The first line of `log` that mentions an error; empty when none does.
std::string first_error_line(std::string_view log) {
  for (std::size_t start = 0; start < log.size();) {
    const std::size_t end = std::min(log.find('\n', start), log.size());
    const std::string_view line = log.substr(start, end - start);
    if (line.find("error") != std::string_view::npos) return std::string(line);
    start = end + 1;
  }
  return {};
}

}  // namespace

std::vector<std::string> flag_list(const CompileInput& input) { return {input.flags.begin(), input.flags.end()}; }

std::vector<const char*> c_strings(std::span<const std::string> strings) {
  std::vector<const char*> out;
  out.reserve(strings.size());
  for (const std::string& s : strings) out.push_back(s.c_str());
  return out;
}

void trim_log(std::string& log) {
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
}

void call_failed(const char* prefix, const char* call, const char* status, std::string_view what,
                 const CompileInput& input, const std::string& log) {
  throw CompileError(fmt::format("{}{} failed: {}{}{} (source '{}', target {})", prefix, call, status,
                                 what.empty() ? "" : " for ", what, input.source_name, input.target),
                     log, std::string(input.source_name), flag_list(input));
}

void compile_failed(const char* prefix, const char* status, const CompileInput& input, const std::string& log,
                    const LogStyle& style) {
  std::string message;
  if (log.empty() && style.when_empty != nullptr) {
    message = fmt::format("{}CompileProgram failed: {} compiling '{}' for {} ({})", prefix, status, input.source_name,
                          input.target, style.when_empty);
  } else {
    const std::string shown = style.rewrite != nullptr ? style.rewrite(log, input.source_name) : log;
    const std::string first = first_error_line(shown);
    message = fmt::format("{}CompileProgram failed: {} compiling '{}' for {}{}{}\n{}", prefix, status,
                          input.source_name, input.target, first.empty() ? "" : ": ", first, shown);
  }
  throw CompileError(std::move(message), log, std::string(input.source_name), flag_list(input));
}

}  // namespace kiln::vendor::rtc
