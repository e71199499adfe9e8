#pragma once
// Private to the include home (includes/src/): finding the includes of a text without
// preprocessing it. Every branch is scanned (#if 0 and #ifdef _WIN32 included), so the set is a
// superset of what the compiler reads. __has_include operands count as includes (a header the compiler
// did not get would flip the answer). A computed include (#include MACRO) cannot be rewritten; the scan
// notes its operand and every #define it saw, and guess_computed expands the one with the others. A name
// the expansion misses (a definition the scan cannot see) the engine retries with the name a failed
// compile asked for (missing_include_from_log, IncludeInput::retry_names); an operand that expands to no
// name at all is refused (resolve.hpp).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kiln::cache::detail {

/// The preprocessor's character classes, for the scan, the `#if` evaluator and the predefined macros (ASCII
/// letters, digits, '_' and '$'; every byte from 0x80 up may be part of an identifier, as in UTF-8 names).
inline bool is_digit(int c) { return c >= '0' && c <= '9'; }
inline bool is_ident_start(int c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '$' || c >= 0x80;
}
inline bool is_ident_char(int c) { return is_ident_start(c) || is_digit(c); }

/// One include found by the scan: an #include / #include_next directive or a __has_include /
/// __has_include_next operator with a header-name operand.
struct IncludeRef {
  std::string name;  ///< between the delimiters, line splices removed
  bool angled = false;
  bool next = false;                               ///< include_next / __has_include_next
  bool has_include = false;                        ///< the __has_include form
  std::size_t keyword_begin = 0, keyword_end = 0;  ///< raw span of the directive or operator name
  std::size_t operand_begin = 0, operand_end = 0;  ///< raw span of the operand, delimiters included
};

/// A preprocessing directive the lean walk (conditions.hpp, resolve.cpp) follows, in the order of the text.
struct Directive {
  enum class Kind : unsigned char {
    if_, ifdef, ifndef, elif, elifdef, elifndef, else_, endif,  // conditionals
    define, undef,                                              // macros
    include,                                                    // #include / #include_next with a header name
    computed,                                                   // #include MACRO
    pragma_once,
  };
  Kind kind = Kind::if_;
  std::string name;  ///< ifdef/ifndef/elifdef/elifndef/define/undef: the macro's name
  std::string text;  ///< if/elif: the expression; define: the replacement ("(a, b) a + b" for a function-like one)
  bool function_like = false;  ///< define: a function-like macro
  std::size_t index = 0;       ///< include: into ScanResult::refs; computed: into ScanResult::computed
};

/// A #define as the scan saw it.
struct Define {
  std::string name;
  std::string text;            ///< the replacement; a function-like one's parameter list first: "(a, b) a + b"
  bool function_like = false;
};

struct ScanResult {
  std::vector<IncludeRef> refs;
  std::vector<std::string> computed;                         ///< operands of #include MACRO, as written
  std::vector<Define> defines;  ///< every #define, any branch, in order (for computed includes)
  /// The directives that decide what a compile reads: conditionals, #define/#undef, includes, #pragma once.
  std::vector<Directive> directives;
  /// Per directive: for an #if/#ifdef/#ifndef whose group holds no #define, #undef or #include in any of
  /// its branches, the index of its #endif (whichever branch the compiler takes, it reads the same files
  /// and leaves the same macros: the lean walk passes over the group without evaluating a condition);
  /// 0 for every other directive.
  std::vector<std::uint32_t> inert_until;
  /// For a main source whose includes do not all come first: the raw offset just past the newline that ends
  /// the last #include (a header name, outside every conditional group) that follows code (a token outside
  /// a directive, including one in a group the compiler may skip); 0 when there is none, or when what comes
  /// before it has an #include_next, a #line or the name __INCLUDE_LEVEL__ (text that would mean another
  /// thing moved into a header). The NVRTC lane moves that prefix into an in-memory header, so that the
  /// compiler's automatic precompiled header, which stops at the first declaration of the source, covers
  /// the includes that follow code too (engine/src/lanes/nvrtc_pch.hpp).
  std::size_t prelude_end = 0;
};

/// Fills `found` with the includes of `text` in order, the computed includes' operands and the
/// object-like macro definitions. Comments, string and character literals (raw strings too) and
/// pp-numbers are skipped the way the compiler's lexer skips them, so neither an include inside a
/// comment nor a "/*" inside a string misleads the scan; conditional directives are not evaluated.
/// Line splices (backslash-newline) are transparent everywhere except inside raw strings, as in the
/// language.
void scan_includes(std::string_view text, ScanResult& found);

/// How many texts scan_includes() has scanned in this process (a debug counter, relaxed: the tests count
/// the scans a settle makes, one of the source per resolve).
[[nodiscard]] std::uint64_t scans_made() noexcept;

/// Every definition seen for a macro name, in the order seen (any branch, never undone). A function-like
/// one's text starts with its parameter list, as Define::text.
struct Definition {
  std::string text;
  bool function_like = false;
};
using Defines = std::unordered_map<std::string, std::vector<Definition>>;

/// A header name a computed include may expand to.
struct Guess {
  std::string name;
  bool angled = false;
};

/// The header names a computed include's operand can expand to, using every definition the scan saw for
/// each macro (every branch: an over-approximation, like the scan itself) and the request's -D macros.
/// Object-like and function-like macros are expanded as the preprocessor does: arguments are expanded
/// before they replace a parameter (unless `#` or `##` takes them), `#` makes a string of its argument's
/// spelling, `##` joins tokens, and the result is rescanned. Thrust picks its system headers this way
/// (`#include __THRUST_DEVICE_SYSTEM_TAG_HEADER`, defined as `<__THRUST_DEVICE_SYSTEM_ROOT/detail/...>`),
/// and a stringizing macro can build any name, an absolute path too (`#include X(/abs/v.h)`): kiln hands
/// the compiler only headers it has read and keyed, so an operand that yields no name is refused by the
/// resolver rather than left to the compiler to open. Bounded: at most 16 nested expansions, 512 steps and
/// 64 names per operand.
[[nodiscard]] std::vector<Guess> guess_computed(std::string_view operand, const Defines& defines);

/// Whether `text` (a source or an in-memory header) has an include the compiler would open from the disk
/// whatever folders it is given: one by an absolute path (#include, #include_next or __has_include), or a
/// computed one (#include MACRO), which may expand to one. The engine resolves such a request's includes
/// itself, so the file is read by kiln, keyed and handed over in memory. Cheap for a text without the
/// word "include".
[[nodiscard]] bool opens_files_by_name(std::string_view text);

}  // namespace kiln::cache::detail
