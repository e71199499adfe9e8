#include "scan.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>

namespace kiln::cache::detail {
namespace {

constexpr std::size_t npos = std::string_view::npos;

bool is_blank(int c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

/// The characters that end a stretch of plain code (Scanner::skip_plain_code).
constexpr auto kMaySplitPlainCode = [] {
  std::array<bool, 256> table{};
  for (const unsigned char c : {'/', '"', '\'', '\\', '\n'}) table[c] = true;
  return table;
}();

/// The scanner behind scan_includes (its comment says what it skips and why).
class Scanner {
 public:
  explicit Scanner(std::string_view text) : m_text(text), m_trigraphs(text.find("??") != npos) {}

  /// Fills `found`: the includes in order, the computed includes' operands, the object-like macro
  /// definitions.
  void run(ScanResult& found) {
    m_found = &found;
    // Every directive starts with a '#': room for them all up front (the list is moved on every growth).
    std::size_t hashes = 0;
    const char* const end = m_text.data() + m_text.size();
    for (const char* at = m_text.data(); (at = static_cast<const char*>(std::memchr(at, '#', end - at))) != nullptr;
         ++at) {
      ++hashes;
    }
    found.directives.reserve(found.directives.size() + hashes);
    // A leading UTF-8 byte order mark is not a token: the compiler does not see it
    // (engine/src/lanes/rtc_compile.hpp), so a directive on the first line is still at the start of its line.
    if (m_text.starts_with("\xEF\xBB\xBF")) m_pos = 3;
    bool line_start = true;
    for (int c = peek(); c >= 0; c = peek()) {
      if (c == '\n') {
        if (m_include_line && m_code_seen && !m_prelude_blocked) found.prelude_end = m_pos + 1;
        line_start = true;
        m_line = Line::code;
        m_in_directive = m_include_line = false;
        advance();
      } else if (is_blank(c)) {
        advance();
      } else if (c == '/' && peek_second() == '/') {
        skip_line_comment();
      } else if (c == '/' && peek_second() == '*') {
        skip_block_comment();  // a comment is one space: a line that starts with one still starts there
      } else if (line_start && (c == '#' || (c == '%' && peek_second() == ':'))) {
        // `%:` is the digraph of `#` (the preprocessor sees the same directive either way).
        line_start = false;
        m_in_directive = true;
        if (c == '%') advance();
        advance();
        directive();
      } else {
        line_start = false;
        if (!m_in_directive) {
          m_code_seen = true;
          if (skip_plain_code()) continue;
        }
        token();
      }
    }
  }

 private:
  /// A trigraph's character (`??=` is '#', `??/` a backslash, ...; compilers replace them before anything else
  /// in C++ before 17), or 0 when no trigraph starts at `at`. Only a text with "??" in it is asked.
  [[nodiscard]] char trigraph(std::size_t at) const {
    if (!m_trigraphs || at + 2 >= m_text.size() || m_text[at] != '?' || m_text[at + 1] != '?') return 0;
    switch (m_text[at + 2]) {
      case '=': return '#';
      case '/': return '\\';
      case '\'': return '^';
      case '(': return '[';
      case ')': return ']';
      case '!': return '|';
      case '<': return '{';
      case '>': return '}';
      case '-': return '~';
      default: return 0;
    }
  }
  /// How many raw characters the character at `at` takes (3 for a trigraph).
  [[nodiscard]] std::size_t width(std::size_t at) const { return trigraph(at) != 0 ? 3 : 1; }
  /// The raw index of the character at or after `at` once line splices are skipped (a backslash, or the
  /// trigraph `??/`, before a newline).
  [[nodiscard]] std::size_t logical(std::size_t at) const {
    while (at < m_text.size()) {
      std::size_t after = npos;
      if (m_text[at] == '\\') {
        after = at + 1;
      } else if (trigraph(at) == '\\') {
        after = at + 3;
      } else {
        break;
      }
      if (after < m_text.size() && m_text[after] == '\n')
        at = after + 1;
      else if (after + 1 < m_text.size() && m_text[after] == '\r' && m_text[after + 1] == '\n')
        at = after + 2;
      else
        break;
    }
    return at;
  }
  [[nodiscard]] int char_at(std::size_t at) const {
    if (at >= m_text.size()) return -1;
    const char t = trigraph(at);
    return static_cast<unsigned char>(t != 0 ? t : m_text[at]);
  }
  /// The current character (-1 at the end).
  int peek() {
    m_pos = logical(m_pos);
    return char_at(m_pos);
  }
  /// The character after the current one (-1 at the end).
  int peek_second() {
    m_pos = logical(m_pos);
    if (m_pos >= m_text.size()) return -1;
    return char_at(logical(m_pos + width(m_pos)));
  }
  void advance() {
    m_pos = logical(m_pos);
    if (m_pos < m_text.size()) m_pos += width(m_pos);
  }

  void skip_blanks_and_comments() {  // within one line
    for (int c = peek(); c >= 0; c = peek()) {
      if (is_blank(c)) {
        advance();
      } else if (c == '/' && peek_second() == '*') {
        skip_block_comment();
      } else {
        return;
      }
    }
  }
  /// Whether the raw text in [from, to) has no backslash: no line splice there, so raw and logical agree.
  [[nodiscard]] bool unspliced(std::size_t from, std::size_t to) const {
    return !m_trigraphs && m_text.substr(from, to - from).find('\\') == npos;
  }
  void skip_line_comment() {  // up to, not including, the newline (a spliced newline continues it)
    m_pos = logical(m_pos);
    const std::size_t end = std::min(m_text.find('\n', m_pos), m_text.size());
    if (unspliced(m_pos, end)) {
      m_pos = end;
      return;
    }
    for (int c = peek(); c >= 0 && c != '\n'; c = peek()) advance();
  }
  void skip_block_comment() {
    advance();
    advance();
    m_pos = logical(m_pos);
    // memmem, not string_view::find: comments are mostly text with a '*' on every line.
    const void* found = ::memmem(m_text.data() + std::min(m_pos, m_text.size()), m_text.size() - std::min(m_pos, m_text.size()), "*/", 2);
    if (const std::size_t close = found == nullptr ? npos : static_cast<const char*>(found) - m_text.data();
        close != npos && unspliced(m_pos, close)) {
      m_pos = close + 2;
      return;
    }
    for (int c = peek(); c >= 0; c = peek()) {
      advance();
      if (c == '*' && peek() == '/') {
        advance();
        return;
      }
    }
  }
  /// A string or character literal; an unterminated one ends at the end of its line.
  void skip_quoted(int quote) {
    advance();
    for (int c = peek(); c >= 0 && c != '\n'; c = peek()) {
      advance();
      if (c == '\\') {
        if (const int escaped = peek(); escaped >= 0 && escaped != '\n') advance();
      } else if (c == quote) {
        return;
      }
    }
  }
  /// R"delim( ... )delim", read from the raw text (splices are not undone inside a raw string).
  void skip_raw_string() {
    const std::size_t quote = logical(m_pos);
    const std::size_t open = m_text.find('(', quote + 1);
    const std::string_view delimiter = open == npos ? std::string_view() : m_text.substr(quote + 1, open - quote - 1);
    if (open == npos || delimiter.size() > 16 || delimiter.find_first_of(std::string_view(" ()\\\t\v\f\r\n")) != npos) {
      skip_quoted('"');  // not a valid raw string: lex it like an ordinary one
      return;
    }
    const std::string close = fmt::format("){}\"", delimiter);
    const std::size_t end = m_text.find(close, open + 1);
    m_pos = end == npos ? m_text.size() : end + close.size();
  }
  void skip_number() {
    advance();
    for (int c = peek(); c >= 0; c = peek()) {
      const int second = peek_second();
      if ((c == 'e' || c == 'E' || c == 'p' || c == 'P') && (second == '+' || second == '-')) {
        advance();
        advance();
      } else if (is_ident_char(c) || c == '.') {
        advance();
      } else if (c == '\'' && is_ident_char(second)) {  // digit separator: 1'000'000
        advance();
        advance();
      } else {
        return;
      }
    }
  }
  /// In code outside directives, most of a header: passes over the plain tokens up to the next character
  /// the character-level scan must see (a '/' that may open a comment, a quote, a backslash that may splice
  /// lines, the newline), less an identifier that runs into it (a literal's prefix: R"(...)", u8'x'). A
  /// stretch that names __has_include or __INCLUDE_LEVEL__ is left to token(). False when it did not move.
  bool skip_plain_code() {
    if (m_trigraphs) return false;  // a trigraph may be any of those characters: character by character
    const std::string_view rest = m_text.substr(m_pos);
    std::size_t stop = 0;
    while (stop < rest.size() && !kMaySplitPlainCode[static_cast<unsigned char>(rest[stop])]) ++stop;
    while (stop > 0 && is_ident_char(static_cast<unsigned char>(rest[stop - 1]))) --stop;
    if (stop == 0) return false;
    const std::string_view plain = rest.substr(0, stop);
    if (plain.find("__") != npos &&
        (plain.find("__has_include") != npos || plain.find("__INCLUDE_LEVEL__") != npos)) {
      return false;
    }
    m_pos += stop;
    return true;
  }

  /// The identifier at the current position: a view into the text, or (when a line splice runs through
  /// it) into a buffer that the next call reuses.
  std::string_view read_identifier() {
    m_pos = logical(m_pos);
    const std::size_t begin = m_pos;
    std::size_t at = begin;
    while (at < m_text.size() && is_ident_char(static_cast<unsigned char>(m_text[at]))) ++at;
    if (at > begin) m_pos = m_identifier_end = at;
    if (at >= m_text.size() || (m_text[at] != '\\' && trigraph(at) != '\\')) return m_text.substr(begin, at - begin);
    m_identifier.assign(m_text.substr(begin, at - begin));
    for (int c = peek(); is_ident_char(c); c = peek()) {
      m_identifier += static_cast<char>(c);
      advance();
      m_identifier_end = m_pos;
    }
    return m_identifier;
  }

  void token() {
    const int c = peek();
    if (c == '"' || c == '\'') {
      skip_quoted(c);
    } else if (is_ident_start(c)) {
      const std::size_t begin = logical(m_pos);
      const std::string_view word = read_identifier();  // read_identifier is not called again while it is used
      const std::size_t end = m_identifier_end;
      if (word == "__INCLUDE_LEVEL__") m_prelude_blocked = true;
      const int after = peek();
      if (after == '"' && (word == "R" || word == "u8R" || word == "uR" || word == "UR" || word == "LR")) {
        skip_raw_string();
      } else if ((after == '"' || after == '\'') && (word == "u8" || word == "u" || word == "U" || word == "L")) {
        skip_quoted(after);
      } else if (word == "__has_include" || word == "__has_include_next") {
        has_include(begin, end, word.size() > 13);
      } else if (m_line != Line::code) {
        wrapped_has_include(begin, end);
      }
    } else if (is_digit(c) || (c == '.' && is_digit(peek_second()))) {
      skip_number();
    } else {
      advance();
    }
  }

  /// A header-name operand: <...> or "..." on one line. False (nothing recorded) when there is none.
  bool operand(IncludeRef& ref) {
    const int open = peek();
    if (open != '<' && open != '"') return false;
    const int close = open == '<' ? '>' : '"';
    ref.operand_begin = m_pos;
    advance();
    std::string name;
    for (int c = peek();; c = peek()) {
      if (c < 0 || c == '\n') return false;  // unterminated: not a header name
      advance();
      if (c == close) break;
      name += static_cast<char>(c);
    }
    ref.operand_end = m_pos;
    ref.name = std::move(name);
    ref.angled = open == '<';
    return true;
  }

  void has_include(std::size_t keyword_begin, std::size_t keyword_end, bool next) {
    skip_blanks_and_comments();
    if (peek() != '(') return;
    advance();
    skip_blanks_and_comments();
    IncludeRef ref;
    ref.keyword_begin = keyword_begin;
    ref.keyword_end = keyword_end;
    ref.next = next;
    ref.has_include = true;
    if (operand(ref)) m_found->refs.push_back(std::move(ref));
  }

  /// A call of a macro that wraps __has_include, e.g. CCCL's `#if _CCCL_HAS_INCLUDE(<cuda_fp16.h>)` with
  /// `#define _CCCL_HAS_INCLUDE(_X) __has_include(_X)`: the operand the compiler probes is the
  /// argument, which a scan of __has_include alone never sees (the definition's operand is `_X`), and a
  /// probed header the compiler did not get silently flips the answer. A header name can only be an
  /// argument of such a wrapper there: in #if/#elif, `NAME(<...>)` and `NAME("...")` are no valid
  /// arithmetic and a string is no valid operand; in a #define body `NAME(<...>)` is no valid
  /// expression (strings there are too common to count: _Pragma("..."), messages). So each counts as a
  /// __has_include operand: at worst a probe of a name that is no header, answered absent.
  void wrapped_has_include(std::size_t keyword_begin, std::size_t keyword_end) {
    skip_blanks_and_comments();
    if (peek() != '(') return;
    advance();
    skip_blanks_and_comments();
    const int open = peek();
    if (open != '<' && !(open == '"' && m_line == Line::condition)) return;
    IncludeRef ref;
    ref.keyword_begin = keyword_begin;
    ref.keyword_end = keyword_end;
    ref.has_include = true;
    if (operand(ref)) m_found->refs.push_back(std::move(ref));
  }

  /// The rest of the logical line as the preprocessor sees it: comments are one space, literals are
  /// kept whole (a "//" inside one is not a comment), blanks around it are dropped.
  std::string rest_of_line() {
    m_pos = logical(m_pos);
    const std::size_t end = std::min(m_text.find('\n', m_pos), m_text.size());
    if (const std::string_view line = m_text.substr(m_pos, end - m_pos);
        !m_trigraphs && line.find("%:") == npos &&
        std::none_of(line.begin(), line.end(), [](char c) { return kMaySplitPlainCode[static_cast<unsigned char>(c)]; })) {
      // No splice, comment or literal on the line: it is its own text.
      m_pos = end;
      const std::size_t first = line.find_first_not_of(" \t\r\v\f");
      if (first == npos) return {};
      const std::size_t last = line.find_last_not_of(" \t\r\v\f");
      return std::string(line.substr(first, last - first + 1));
    }
    std::string text;
    for (int c = peek(); c >= 0 && c != '\n'; c = peek()) {
      if (c == '/' && peek_second() == '/') break;
      if (c == '/' && peek_second() == '*') {
        skip_block_comment();
        text += ' ';
        continue;
      }
      if (c == '%' && peek_second() == ':') {  // the digraph of '#' (so `%:%:` is `##`)
        advance();
        advance();
        text += '#';
        continue;
      }
      text += static_cast<char>(c);
      advance();
      if (c != '"' && c != '\'') continue;
      for (int d = peek(); d >= 0 && d != '\n'; d = peek()) {
        text += static_cast<char>(d);
        advance();
        if (d == '\\') {
          if (const int escaped = peek(); escaped >= 0 && escaped != '\n') {
            text += static_cast<char>(escaped);
            advance();
          }
        } else if (d == c) {
          break;
        }
      }
    }
    const std::size_t first = text.find_first_not_of(" \t\r\v\f");
    if (first == npos) return {};
    const std::size_t last = text.find_last_not_of(" \t\r\v\f");
    return text.substr(first, last - first + 1);
  }

  /// After the '#' that starts a line. #include and #include_next are read here, and #define's
  /// name and text are noted (for computed includes); the conditionals, #define, #undef and #pragma once
  /// are listed for the lean walk (Directive). The tokens of an #if, #elif or a definition go back to the
  /// main loop (so __has_include there is found).
  void directive() {
    skip_blanks_and_comments();
    // A GNU line marker (`# 100 "other.cu"`) sets the presumed line and file as #line does: text that would
    // mean another thing moved into a header.
    if (is_digit(peek())) m_prelude_blocked = true;
    if (!is_ident_start(peek())) return;
    const std::size_t begin = logical(m_pos);
    const std::string word(read_identifier());
    if (word == "if" || word == "elif") m_line = Line::condition;
    if (word == "if" || word == "ifdef" || word == "ifndef") ++m_depth;
    if (word == "endif" && m_depth > 0) --m_depth;
    if (word == "line" || word == "include_next") m_prelude_blocked = true;
    std::vector<Directive>& directives = m_found->directives;
    if (word == "define") {
      m_line = Line::definition;
      skip_blanks_and_comments();
      if (!is_ident_start(peek())) return;
      std::string name(read_identifier());
      if (peek() == '(') {  // function-like: the parameters and replacement; not followed for computed includes
        const std::size_t parameters = m_pos;
        std::string text = rest_of_line();
        m_pos = parameters;
        directives.push_back({Directive::Kind::define, name, text, true, 0});
        m_found->defines.push_back({std::move(name), std::move(text), true});
        return;
      }
      const std::size_t replacement = m_pos;
      std::string text = rest_of_line();
      m_pos = replacement;
      directives.push_back({Directive::Kind::define, name, text, false, 0});
      m_found->defines.push_back({std::move(name), std::move(text), false});
      return;
    }
    if (word == "if" || word == "elif") {
      const std::size_t expression = m_pos;
      std::string text = rest_of_line();
      m_pos = expression;  // its tokens go back to the main loop (__has_include)
      directives.push_back({word == "if" ? Directive::Kind::if_ : Directive::Kind::elif, {}, std::move(text), false, 0});
      return;
    }
    if (word == "ifdef" || word == "ifndef" || word == "elifdef" || word == "elifndef" || word == "undef") {
      skip_blanks_and_comments();
      if (!is_ident_start(peek())) return;
      const Directive::Kind kind = word == "ifdef"     ? Directive::Kind::ifdef
                                   : word == "ifndef"  ? Directive::Kind::ifndef
                                   : word == "elifdef" ? Directive::Kind::elifdef
                                   : word == "elifndef" ? Directive::Kind::elifndef
                                                        : Directive::Kind::undef;
      directives.push_back({kind, std::string(read_identifier()), {}, false, 0});
      return;
    }
    if (word == "else" || word == "endif") {
      directives.push_back({word == "else" ? Directive::Kind::else_ : Directive::Kind::endif, {}, {}, false, 0});
      return;
    }
    if (word == "pragma") {
      skip_blanks_and_comments();
      if (is_ident_start(peek()) && read_identifier() == "once") {
        directives.push_back({Directive::Kind::pragma_once, {}, {}, false, 0});
      }
      return;
    }
    if (word != "include" && word != "include_next") return;
    IncludeRef ref;
    ref.keyword_begin = begin;
    ref.keyword_end = m_identifier_end;
    ref.next = word == "include_next";
    skip_blanks_and_comments();
    if (operand(ref)) {
      m_include_line = m_depth == 0;
      directives.push_back({Directive::Kind::include, {}, {}, false, m_found->refs.size()});
      m_found->refs.push_back(std::move(ref));
      return;
    }
    // #include MACRO: the operand is computed by the preprocessor (see guess_computed).
    if (std::string text = rest_of_line(); !text.empty()) {
      directives.push_back({Directive::Kind::computed, {}, {}, false, m_found->computed.size()});
      m_found->computed.push_back(std::move(text));
    }
  }

  /// What the current line is: code, or a directive whose tokens may hold a wrapped __has_include.
  enum class Line { code, condition, definition };

  std::string_view m_text;
  const bool m_trigraphs;  ///< the text has "??": peek() and advance() read trigraphs, the raw fast paths step aside
  std::size_t m_pos = 0;
  Line m_line = Line::code;
  // ScanResult::prelude_end: the conditional depth, whether the current line is a directive (and an #include
  // at depth 0), whether code came before, and whether the text so far forbids moving it into a header.
  int m_depth = 0;
  bool m_in_directive = false;
  bool m_include_line = false;
  bool m_code_seen = false;
  bool m_prelude_blocked = false;
  std::size_t m_identifier_end = 0;  ///< raw index after the last character read_identifier took
  std::string m_identifier;          ///< read_identifier's buffer for an identifier with a splice in it
  ScanResult* m_found = nullptr;
};

}  // namespace

namespace {

/// Fills found.inert_until (ScanResult) from found.directives.
void mark_inert_groups(ScanResult& found) {
  using K = Directive::Kind;
  const std::vector<Directive>& d = found.directives;
  found.inert_until.assign(d.size(), 0);
  struct Open {
    std::size_t at;
    bool effects;
  };
  std::vector<Open> open;
  for (std::size_t i = 0; i < d.size(); ++i) {
    switch (d[i].kind) {
      case K::if_:
      case K::ifdef:
      case K::ifndef:
        open.push_back({i, false});
        break;
      case K::endif:
        if (open.empty()) break;  // a stray one: the compiler reports it
        if (!open.back().effects) found.inert_until[open.back().at] = static_cast<std::uint32_t>(i);
        if (open.back().effects && open.size() > 1) open[open.size() - 2].effects = true;
        open.pop_back();
        break;
      case K::define:
      case K::undef:
      case K::include:
      case K::computed:
        if (!open.empty()) open.back().effects = true;
        break;
      default:  // #elif and its kind, #else, #pragma once (which counts only outside every group)
        break;
    }
  }
}

}  // namespace

namespace {
std::atomic<std::uint64_t> g_scans{0};
}  // namespace

std::uint64_t scans_made() noexcept { return g_scans.load(std::memory_order_relaxed); }

void scan_includes(std::string_view text, ScanResult& found) {
  g_scans.fetch_add(1, std::memory_order_relaxed);
  Scanner(text).run(found);
  mark_inert_groups(found);
}

bool opens_files_by_name(std::string_view text) {
  // No include of any form: the word is not there, nor a line splice that could be cutting it in two (a
  // backslash, or the trigraph ??/).
  if (text.find("include") == std::string_view::npos && text.find('\\') == std::string_view::npos &&
      text.find("?\?/") == std::string_view::npos) {
    return false;
  }
  ScanResult found;
  scan_includes(text, found);
  return !found.computed.empty() || std::any_of(found.refs.begin(), found.refs.end(), [](const IncludeRef& ref) {
    return ref.name.starts_with('/');
  });
}

}  // namespace kiln::cache::detail
