#pragma once
// The compile skeleton NVRTC and HIPRTC share. Their APIs have one shape (nvrtcCreateProgram /
// hiprtcCreateProgram, ...AddNameExpression, ...CompileProgram, ...GetProgramLog, ...GetLoweredName,
// ...DestroyProgram), so a compile is written here once: create the program from the source and its
// headers, add the name expressions, compile, fetch the log, fail with the first error line, fetch the
// outputs and the lowered names, destroy the program on every path. What differs stays in each lane:
// the outputs it fetches (NVRTC: CUBIN and PTX; HIPRTC: a code object), the flags it adds, its checks
// and its locking.
#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "lanes/lane.hpp"

namespace kiln::vendor::rtc {

/// How a failed compile's log reads in the error message.
struct LogStyle {
  /// Rewrites the log for the message (HIPRTC names a temporary file where the source belongs);
  /// nullptr: the log as it is. The error still carries the log unchanged.
  std::string (*rewrite)(std::string log, std::string_view source_name) = nullptr;
  /// Said instead of the log when there is none (nullptr: nothing is said).
  const char* when_empty = nullptr;
};

/// The input's flags, as a CompileError carries them.
std::vector<std::string> flag_list(const CompileInput& input);

/// Pointers to each string's characters, for the C APIs.
std::vector<const char*> c_strings(std::span<const std::string> strings);

/// Drops the NULs and newlines a program log ends with.
void trim_log(std::string& log);

/// Throws CompileError for a failed program call: "<prefix><call> failed: <status>[ for <what>]
/// (source '<name>', target <target>)", carrying `log`.
[[noreturn]] void call_failed(const char* prefix, const char* call, const char* status, std::string_view what,
                              const CompileInput& input, const std::string& log);

/// Throws CompileError for a compile that failed: "<prefix>CompileProgram failed: <status> compiling
/// '<name>' for <target>: <first error line>", then the whole log. The first line that reports an error
/// names the source and line, so the message alone says where to look.
[[noreturn]] void compile_failed(const char* prefix, const char* status, const CompileInput& input,
                                 const std::string& log, const LogStyle& style);

/// The text after a leading UTF-8 byte order mark (NVRTC takes one for a stray token and fails; editors
/// on some systems write one). The key holds the bytes as given, mark and all; only the compiler's view
/// skips it, so no text is copied.
inline std::string_view without_bom(std::string_view text) {
  return text.starts_with("\xEF\xBB\xBF") ? text.substr(3) : text;
}
inline const char* without_bom(const char* text) {
  return text[0] == '\xEF' && text[1] == '\xBB' && text[2] == '\xBF' ? text + 3 : text;  // stops at the NUL
}

/// One program of one library (Calls: a binding made by KILN_RTC_CALLS), created from the input's
/// source and headers with its name expressions added, and destroyed on every path, exceptions
/// included: a program left behind holds hundreds of MB.
template <class Calls>
class Program {
 public:
  using Handle = typename Calls::Program;
  using Result = typename Calls::Result;

  Program(const Calls& calls, const CompileInput& input)
      : m_calls(calls), m_input(input), m_source(without_bom(input.source)), m_name(input.source_name), m_owned{calls} {
    std::vector<const char*> texts, names;
    for (const HeaderText& h : input.headers) {
      texts.push_back(without_bom(h.text));
      names.push_back(h.name);
    }
    check(m_calls.create_program(&m_owned.handle, m_source.c_str(), m_name.c_str(), static_cast<int>(texts.size()),
                                 texts.data(), names.data()),
          "CreateProgram");
    for (const std::string& expression : input.name_expressions) {
      check(m_calls.add_name_expression(m_owned.handle, expression.c_str()), "AddNameExpression", expression);
    }
  }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  /// Compiles with `flags` and returns the log (possibly empty), after `tidy` (when given) removed the
  /// lines the lane's own flags made. Throws CompileError, with the log, when the compile fails.
  std::string compile(std::span<const char*> flags, const LogStyle& style = {},
                      const std::function<void(std::string&)>& tidy = nullptr) {
    const Result compiled = m_calls.compile_program(m_owned.handle, static_cast<int>(flags.size()), flags.data());
    std::size_t log_size = 0;
    if (m_calls.get_program_log_size(m_owned.handle, &log_size) == Calls::kSuccess && log_size > 1) {
      m_log.resize(log_size);
      m_calls.get_program_log(m_owned.handle, m_log.data());
      trim_log(m_log);
    }
    if (tidy) tidy(m_log);
    if (compiled != Calls::kSuccess) {
      compile_failed(Calls::kPrefix, m_calls.error_string(compiled), m_input, m_log, style);
    }
    return m_log;
  }

  /// One output, through the library's size and get calls (nvrtcGetCUBINSize and nvrtcGetCUBIN, ...):
  /// its bytes, none when the size is 0. The calls are named without the library's prefix.
  template <class GetSize, class Get>
  std::vector<std::byte> fetch(GetSize get_size, Get get, const char* size_call, const char* get_call) const {
    std::size_t size = 0;
    check(get_size(m_owned.handle, &size), size_call);
    std::vector<std::byte> bytes(size);
    if (size > 0) check(get(m_owned.handle, reinterpret_cast<char*>(bytes.data())), get_call);
    return bytes;
  }

  /// The lowered (mangled) name of every name expression, copied: the library's strings belong to
  /// the program.
  std::vector<cache::LoweredName> lowered_names() const {
    std::vector<cache::LoweredName> out;
    for (const std::string& expression : m_input.name_expressions) {
      const char* lowered = nullptr;
      check(m_calls.get_lowered_name(m_owned.handle, expression.c_str(), &lowered), "GetLoweredName", expression);
      if (lowered == nullptr) call_failed(Calls::kPrefix, "GetLoweredName", "no name", expression, m_input, m_log);
      out.push_back({expression, lowered});
    }
    return out;
  }

  /// The library's handle of the program, for calls the skeleton does not make (NVRTC's PCH status).
  [[nodiscard]] Handle handle() const noexcept { return m_owned.handle; }

  /// Throws CompileError naming `call` (without the library's prefix) unless `result` is success.
  void check(Result result, const char* call, std::string_view what = {}) const {
    if (result != Calls::kSuccess) call_failed(Calls::kPrefix, call, m_calls.error_string(result), what, m_input, "");
  }

 private:
  /// The handle, destroyed with the program; a member, so that it is destroyed as well when the
  /// constructor throws after the program was created.
  struct Owned {
    const Calls& calls;
    Handle handle = nullptr;
    ~Owned() {
      if (handle != nullptr) calls.destroy_program(&handle);
    }
  };

  const Calls& m_calls;
  const CompileInput& m_input;
  const std::string m_source;  // NUL-terminated copies for the C API
  const std::string m_name;
  Owned m_owned;
  std::string m_log;
};

}  // namespace kiln::vendor::rtc

/// Binds the calls Program makes to a library's symbol table (symbols.hpp): NVRTC and HIPRTC name them
/// alike, `prefix` followed by the call, so one binding serves both. Defines struct `Name` with the
/// table's pointers under the shared names, and `Name::of(table)`.
#define KILN_RTC_CALLS(Name, Table, prefix, ProgramType, ResultType, success)                                 \
  struct Name {                                                                                               \
    using Program = ProgramType;                                                                              \
    using Result = ResultType;                                                                                \
    static constexpr Result kSuccess = success;                                                               \
    static constexpr const char* kPrefix = #prefix;                                                           \
    decltype(Table::prefix##GetErrorString) error_string;                                                     \
    decltype(Table::prefix##CreateProgram) create_program;                                                    \
    decltype(Table::prefix##DestroyProgram) destroy_program;                                                  \
    decltype(Table::prefix##AddNameExpression) add_name_expression;                                           \
    decltype(Table::prefix##CompileProgram) compile_program;                                                  \
    decltype(Table::prefix##GetProgramLogSize) get_program_log_size;                                          \
    decltype(Table::prefix##GetProgramLog) get_program_log;                                                   \
    decltype(Table::prefix##GetLoweredName) get_lowered_name;                                                 \
    static Name of(const Table& table) {                                                                      \
      return {table.prefix##GetErrorString,    table.prefix##CreateProgram,  table.prefix##DestroyProgram,    \
              table.prefix##AddNameExpression, table.prefix##CompileProgram, table.prefix##GetProgramLogSize, \
              table.prefix##GetProgramLog,     table.prefix##GetLoweredName};                                 \
    }                                                                                                         \
  };
