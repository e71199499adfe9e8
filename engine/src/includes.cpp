#include "includes.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "kiln/base/hash.hpp"
#include "kiln/cache/dep_manifest.hpp"
#include "kiln/error.hpp"

namespace kiln::detail {
namespace {

constexpr std::size_t npos = std::string_view::npos;

// ---- paths ------------------------------------------------------------------------------------------

/// Whether `path` is already lexically normal: no empty part, no "." or ".." part, no trailing '/'
/// (conservative: a part that merely starts with '.' takes the slow way too). Most include paths are.
bool plainly_normal(std::string_view path) {
  return !path.empty() && path.front() != '.' && path.back() != '/' && path.find("//") == npos &&
         path.find("/.") == npos;
}

/// The lexically normal form of a '/'-separated path: empty and "." parts dropped, "dir/.." folded, a
/// leading '/' kept ("/.." is "/"), the leading ".." of a relative path kept. Symlinks are not
/// followed: the path recorded is the one the folders and includes spell (toolkits are full of
/// symlinked folders, and a re-pointed link must show up as a different path, not be hidden).
std::string normalize(std::string_view path) {
  if (plainly_normal(path)) return std::string(path);
  const bool absolute = !path.empty() && path.front() == '/';
  std::vector<std::string_view> parts;
  std::size_t at = 0;
  while (at <= path.size()) {
    std::size_t slash = path.find('/', at);
    if (slash == npos) slash = path.size();
    const std::string_view part = path.substr(at, slash - at);
    at = slash + 1;
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      if (!parts.empty() && parts.back() != "..") {
        parts.pop_back();
        continue;
      }
      if (absolute) continue;  // "/.." is "/"
    }
    parts.push_back(part);
  }
  std::string out = absolute ? "/" : "";
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += '/';
    out += parts[i];
  }
  return out;
}

/// `name` looked up in `dir`, normalised. An absolute name stays as it is; an empty dir is the root of
/// the in-memory names.
std::string join(std::string_view dir, std::string_view name) {
  if (dir.empty() || (!name.empty() && name.front() == '/')) return normalize(name);
  std::string path;
  path.reserve(dir.size() + 1 + name.size());
  path += dir;
  path += '/';
  path += name;
  return plainly_normal(path) ? path : normalize(path);
}

/// The folder part of a path: "" for a bare name, "/" for a file in the root.
std::string dirname(std::string_view path) {
  const std::size_t slash = path.rfind('/');
  if (slash == npos) return {};
  if (slash == 0) return "/";
  return std::string(path.substr(0, slash));
}

// ---- scanning -------------------------------------------------------------------------------------

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

struct ScanResult {
  std::vector<IncludeRef> refs;
  std::vector<std::string> computed;                         ///< operands of #include MACRO, as written
  std::vector<std::pair<std::string, std::string>> defines;  ///< object-like #define: name, replacement
};

bool is_blank(int c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }
bool is_digit(int c) { return c >= '0' && c <= '9'; }
bool is_ident_start(int c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '$' || c >= 0x80;
}
bool is_ident_char(int c) { return is_ident_start(c) || is_digit(c); }

/// Finds includes without preprocessing: comments, string and character literals (raw strings too)
/// and pp-numbers are skipped the way the compiler's lexer skips them, so neither an include inside
/// a comment nor a "/*" inside a string misleads the scan; conditional directives are not evaluated
/// (every branch is scanned). Line splices (backslash-newline) are transparent everywhere except
/// inside raw strings, as in the language.
class Scanner {
 public:
  explicit Scanner(std::string_view text) : m_text(text) {}

  /// Fills `found`: the includes in order, the computed includes' operands, the object-like macro
  /// definitions.
  void run(ScanResult& found) {
    m_found = &found;
    // A leading UTF-8 byte order mark is not a token: the compiler does not see it (rtc_compile.hpp), so
    // a directive on the first line is still at the start of its line.
    if (m_text.starts_with("\xEF\xBB\xBF")) m_pos = 3;
    bool line_start = true;
    for (int c = peek(); c >= 0; c = peek()) {
      if (c == '\n') {
        line_start = true;
        advance();
      } else if (is_blank(c)) {
        advance();
      } else if (c == '/' && peek_second() == '/') {
        skip_line_comment();
      } else if (c == '/' && peek_second() == '*') {
        skip_block_comment();  // a comment is one space: a line that starts with one still starts there
      } else if (c == '#' && line_start) {
        line_start = false;
        advance();
        directive();
      } else {
        line_start = false;
        token();
      }
    }
  }

 private:
  /// The raw index of the character at or after `at` once line splices are skipped.
  [[nodiscard]] std::size_t logical(std::size_t at) const {
    while (at < m_text.size() && m_text[at] == '\\') {
      if (at + 1 < m_text.size() && m_text[at + 1] == '\n')
        at += 2;
      else if (at + 2 < m_text.size() && m_text[at + 1] == '\r' && m_text[at + 2] == '\n')
        at += 3;
      else
        break;
    }
    return at;
  }
  /// The current character (-1 at the end).
  int peek() {
    m_pos = logical(m_pos);
    return m_pos < m_text.size() ? static_cast<unsigned char>(m_text[m_pos]) : -1;
  }
  /// The character after the current one (-1 at the end).
  int peek_second() {
    m_pos = logical(m_pos);
    if (m_pos >= m_text.size()) return -1;
    const std::size_t at = logical(m_pos + 1);
    return at < m_text.size() ? static_cast<unsigned char>(m_text[at]) : -1;
  }
  void advance() {
    m_pos = logical(m_pos);
    if (m_pos < m_text.size()) ++m_pos;
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
  void skip_line_comment() {  // up to, not including, the newline (a spliced newline continues it)
    for (int c = peek(); c >= 0 && c != '\n'; c = peek()) advance();
  }
  void skip_block_comment() {
    advance();
    advance();
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
  std::string read_identifier() {
    std::string out;
    for (int c = peek(); is_ident_char(c); c = peek()) {
      out += static_cast<char>(c);
      advance();
      m_identifier_end = m_pos;
    }
    return out;
  }

  void token() {
    const int c = peek();
    if (c == '"' || c == '\'') {
      skip_quoted(c);
    } else if (is_ident_start(c)) {
      const std::size_t begin = logical(m_pos);
      const std::string word = read_identifier();
      const std::size_t end = m_identifier_end;
      const int after = peek();
      if (after == '"' && (word == "R" || word == "u8R" || word == "uR" || word == "UR" || word == "LR")) {
        skip_raw_string();
      } else if ((after == '"' || after == '\'') && (word == "u8" || word == "u" || word == "U" || word == "L")) {
        skip_quoted(after);
      } else if (word == "__has_include" || word == "__has_include_next") {
        has_include(begin, end, word.size() > 13);
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

  /// The rest of the logical line as the preprocessor sees it: comments are one space, literals are
  /// kept whole (a "//" inside one is not a comment), blanks around it are dropped.
  std::string rest_of_line() {
    std::string text;
    for (int c = peek(); c >= 0 && c != '\n'; c = peek()) {
      if (c == '/' && peek_second() == '/') break;
      if (c == '/' && peek_second() == '*') {
        skip_block_comment();
        text += ' ';
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
  /// name and text are noted (for computed includes); the tokens of any other directive, and of a
  /// definition, go back to the main loop (so __has_include in #if, #elif or a macro is found there).
  void directive() {
    skip_blanks_and_comments();
    if (!is_ident_start(peek())) return;
    const std::size_t begin = logical(m_pos);
    const std::string word = read_identifier();
    if (word == "define") {
      skip_blanks_and_comments();
      if (!is_ident_start(peek())) return;
      std::string name = read_identifier();
      if (peek() == '(') return;  // function-like: not followed for computed includes
      const std::size_t replacement = m_pos;
      std::string text = rest_of_line();
      m_pos = replacement;
      m_found->defines.emplace_back(std::move(name), std::move(text));
      return;
    }
    if (word != "include" && word != "include_next") return;
    IncludeRef ref;
    ref.keyword_begin = begin;
    ref.keyword_end = m_identifier_end;
    ref.next = word == "include_next";
    skip_blanks_and_comments();
    if (operand(ref)) {
      m_found->refs.push_back(std::move(ref));
      return;
    }
    // #include MACRO: the operand is computed by the preprocessor (see guess_computed).
    if (std::string text = rest_of_line(); !text.empty()) m_found->computed.push_back(std::move(text));
  }

  std::string_view m_text;
  std::size_t m_pos = 0;
  std::size_t m_identifier_end = 0;  ///< raw index after the last character read_identifier took
  ScanResult* m_found = nullptr;
};

struct Edit {
  std::size_t begin = 0, end = 0;
  std::string replacement;
};

/// `text` with each span replaced. A replaced span that held line splices is followed by as many
/// splices, so every later line keeps its number and the logical line stays joined as it was.
std::string apply_edits(std::string_view text, const std::vector<Edit>& edits) {
  std::string out;
  out.reserve(text.size() + edits.size() * 64);
  std::size_t at = 0;
  for (const Edit& edit : edits) {
    out.append(text.substr(at, edit.begin - at));
    out += edit.replacement;
    const auto newlines = std::count(text.begin() + static_cast<std::ptrdiff_t>(edit.begin),
                                     text.begin() + static_cast<std::ptrdiff_t>(edit.end), '\n');
    for (std::ptrdiff_t i = 0; i < newlines; ++i) out += "\\\n";
    at = edit.end;
  }
  out.append(text.substr(at));
  return out;
}

// ---- computed includes ----------------------------------------------------------------------------

/// Every object-like definition seen for a macro name, in the order seen (any branch, never undone).
using Defines = std::unordered_map<std::string, std::vector<std::string>>;

struct Guess {
  std::string name;
  bool angled = false;
};

/// The header names a computed include's operand can expand to, using every object-like definition
/// the scan saw for each macro (every branch: an over-approximation, like the scan itself). Thrust
/// picks its system headers this way (`#include __THRUST_DEVICE_SYSTEM_TAG_HEADER`, defined as
/// `<__THRUST_DEVICE_SYSTEM_ROOT/detail/...>`); guessing them saves a failed compile for each one.
/// Function-like macros and token pasting are not followed: what cannot be guessed is left to the
/// engine's retry. Bounded: at most kMaxDepth nested expansions and kMaxSteps texts per operand.
std::vector<Guess> guess_computed(std::string_view operand, const Defines& defines) {
  constexpr int kMaxDepth = 8;
  constexpr std::size_t kMaxSteps = 256;
  std::vector<Guess> out;
  std::vector<std::pair<std::string, int>> work = {{std::string(operand), 0}};
  for (std::size_t steps = 0; !work.empty() && steps < kMaxSteps; ++steps) {
    auto [text, depth] = std::move(work.back());
    work.pop_back();
    // The first identifier outside a string literal that names a macro.
    std::size_t begin = npos, end = npos;
    Defines::const_iterator macro = defines.end();
    for (std::size_t i = 0; i < text.size();) {
      const auto c = static_cast<unsigned char>(text[i]);
      if (c == '"') {
        const std::size_t close = text.find('"', i + 1);
        if (close == npos) break;
        i = close + 1;
      } else if (is_ident_start(c) && (i == 0 || !is_ident_char(static_cast<unsigned char>(text[i - 1])))) {
        std::size_t j = i;
        while (j < text.size() && is_ident_char(static_cast<unsigned char>(text[j]))) ++j;
        macro = defines.find(text.substr(i, j - i));
        if (macro != defines.end()) {
          begin = i;
          end = j;
          break;
        }
        i = j;
      } else {
        ++i;
      }
    }
    if (macro == defines.end()) {
      const std::size_t first = text.find_first_not_of(" \t");
      const std::size_t last = text.find_last_not_of(" \t");
      if (first == npos || last - first < 2) continue;
      const char open = text[first], close = text[last];
      if (!((open == '<' && close == '>') || (open == '"' && close == '"'))) continue;
      Guess guess{text.substr(first + 1, last - first - 1), open == '<'};
      const bool seen = std::any_of(out.begin(), out.end(),
                                    [&](const Guess& g) { return g.name == guess.name && g.angled == guess.angled; });
      if (!seen) out.push_back(std::move(guess));
      continue;
    }
    if (depth >= kMaxDepth) continue;
    const std::vector<std::string>& definitions = macro->second;
    for (auto d = definitions.rbegin(); d != definitions.rend(); ++d) {  // the first definition is tried first
      work.emplace_back(text.substr(0, begin) + *d + text.substr(end), depth + 1);
    }
  }
  return out;
}

// ---- reading --------------------------------------------------------------------------------------

std::int64_t nanoseconds(const struct timespec& t) {
  return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + static_cast<std::int64_t>(t.tv_nsec);
}

class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : m_fd(fd) {}
  ~FileDescriptor() {
    if (m_fd >= 0) ::close(m_fd);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  [[nodiscard]] int get() const noexcept { return m_fd; }

 private:
  int m_fd;
};

struct HeaderFile {
  std::string bytes;
  cache::HeaderRecord record;
};

/// Reads a candidate header: one open (following symlinks: toolkits are full of them; non-blocking so
/// a FIFO planted under a header's name cannot hang the compile), fstat on that descriptor, read to
/// the end. nullopt when there is no regular file at the path. Throws ConfigError when there is one
/// that cannot be read, or one too large to be a header.
std::optional<HeaderFile> read_header(const std::string& path) {
  int fd = -1;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT || error == ENOTDIR || error == ENAMETOOLONG || error == ELOOP) return std::nullopt;
    throw ConfigError(fmt::format("cannot open header '{}': {}", path, std::strerror(error)));
  }
  const FileDescriptor file(fd);
  struct stat st {};
  if (::fstat(file.get(), &st) != 0) {
    throw ConfigError(fmt::format("cannot stat header '{}': {}", path, std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) return std::nullopt;  // a folder (or device, FIFO) is not a header
  const auto size = static_cast<std::uint64_t>(st.st_size);
  const auto too_large = [&](std::uint64_t bytes) {
    return ConfigError(fmt::format("header '{}' is {} bytes; kiln reads headers of at most {} MiB", path, bytes,
                                   kMaxHeaderBytes >> 20));
  };
  if (size > kMaxHeaderBytes) throw too_large(size);

  HeaderFile out;
  out.bytes.resize(static_cast<std::size_t>(size) + 1);  // one more byte: a file that grew shows it
  std::size_t filled = 0;
  while (true) {
    if (filled == out.bytes.size()) {
      if (out.bytes.size() > kMaxHeaderBytes) throw too_large(out.bytes.size());
      out.bytes.resize(std::min<std::size_t>(out.bytes.size() * 2, kMaxHeaderBytes + 1));
    }
    const ssize_t got = ::read(file.get(), out.bytes.data() + filled, out.bytes.size() - filled);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw ConfigError(fmt::format("cannot read header '{}': {}", path, std::strerror(errno)));
    }
    if (got == 0) break;
    filled += static_cast<std::size_t>(got);
  }
  out.bytes.resize(filled);

  struct timespec now {};
  ::clock_gettime(CLOCK_REALTIME, &now);
  cache::HeaderRecord& record = out.record;
  record.path = path;
  record.stat = cache::to_file_stat(st);
  record.digest = cache::hash128(out.bytes);
  // A file touched within the window (or dated in the future) may still be being written, and one
  // whose length changed while it was read certainly was: neither is vouched for by its stat.
  const std::int64_t recent = nanoseconds(now) - cache::kStatTrustWindowNs;
  record.trusted_stat = filled == size && record.stat.mtime_ns < recent && record.stat.ctime_ns < recent;
  return out;
}

// ---- the process's header files ------------------------------------------------------------------

}  // namespace

struct HeaderFileCache::File {
  cache::HeaderRecord record;  ///< path, stat and digest as read
  std::string bytes;
  ScanResult scan;  ///< of bytes

  /// The text the compiler got from the file last time, with its includes rewritten to these names
  /// (by the offset of each rewritten operand). A later resolve that rewrites them to the same names,
  /// as the kernels of one program over one tree do, shares that text instead of building it again.
  struct Rewrite {
    std::vector<std::pair<std::size_t, std::string>> names;
    std::shared_ptr<const std::string> text;
  };
  mutable std::mutex rewrite_mutex;
  mutable Rewrite last_rewrite;
};

struct HeaderFileCache::State {
  mutable std::mutex mutex;
  std::unordered_map<std::string, std::shared_ptr<const File>> files;
  std::uint64_t bytes = 0;
  mutable std::uint64_t hits = 0;
};

HeaderFileCache::HeaderFileCache() : m_state(std::make_unique<State>()) {}
HeaderFileCache::~HeaderFileCache() = default;

std::shared_ptr<const HeaderFileCache::File> HeaderFileCache::find(const std::string& path,
                                                                   const cache::FileStat& stat) const {
  const std::lock_guard lock(m_state->mutex);
  const auto it = m_state->files.find(path);
  if (it == m_state->files.end() || it->second->record.stat != stat) return nullptr;
  ++m_state->hits;
  return it->second;
}

void HeaderFileCache::put(const std::string& path, std::shared_ptr<const File> file) {
  const std::lock_guard lock(m_state->mutex);
  State& s = *m_state;
  if (file->bytes.size() > kMaxBytes) return;
  if (s.bytes + file->bytes.size() > kMaxBytes) {
    s.files.clear();
    s.bytes = 0;
  }
  auto [it, inserted] = s.files.try_emplace(path, file);
  if (!inserted) {
    s.bytes -= it->second->bytes.size();
    it->second = file;
  }
  s.bytes += file->bytes.size();
}

HeaderFileCache::Usage HeaderFileCache::usage() const {
  const std::lock_guard lock(m_state->mutex);
  return {m_state->files.size(), m_state->bytes, m_state->hits};
}

namespace {

/// How a resolve looks at the file system: through the HeaderFileCache and the stat memo when it has them.
struct FileAccess {
  HeaderFileCache* cache = nullptr;
  const cache::DependencyManifests* memo = nullptr;
  std::int64_t now_ns = 0;  ///< when the resolve started (CLOCK_REALTIME): the memo's clock
  ResolvedIncludes::Work* work = nullptr;
};

/// The header at `path` (null when there is no regular file there): from the cache when the file still
/// has the stat it was read with (a stat made now, or one the stat memo holds), else read and scanned
/// (and kept when its stat is trusted).
std::shared_ptr<const HeaderFileCache::File> load_header(const std::string& path, const FileAccess& access) {
  if (access.cache != nullptr) {
    std::optional<cache::DependencyManifests::RecentStat> seen;
    if (access.memo != nullptr) seen = access.memo->recent_stat(path, access.now_ns);
    if (seen) {
      ++access.work->memo_hits;
      if (!seen->present) return nullptr;
      if (auto hit = access.cache->find(path, seen->stat)) return hit;
      // Not the file the cache holds (or none): read it below.
    } else {
      ++access.work->stats;
      struct stat st {};
      if (::stat(path.c_str(), &st) == 0) {
        const cache::FileStat stat = cache::to_file_stat(st);
        if (access.memo != nullptr) access.memo->note_stat(path, {true, stat}, access.now_ns);
        if (!S_ISREG(st.st_mode)) return nullptr;
        if (auto hit = access.cache->find(path, stat)) return hit;
      } else if (errno == ENOENT || errno == ENOTDIR || errno == ENAMETOOLONG || errno == ELOOP) {
        if (access.memo != nullptr && (errno == ENOENT || errno == ENOTDIR)) {
          access.memo->note_stat(path, {false, {}}, access.now_ns);
        }
        return nullptr;
      }  // another error: read_header says what it is
    }
  }
  ++access.work->reads;
  std::optional<HeaderFile> read = read_header(path);
  if (!read) return nullptr;
  auto file = std::make_shared<HeaderFileCache::File>();
  file->record = std::move(read->record);
  file->bytes = std::move(read->bytes);
  Scanner(file->bytes).run(file->scan);
  if (access.cache != nullptr && file->record.trusted_stat) access.cache->put(path, file);
  return file;
}

// ---- resolving ------------------------------------------------------------------------------------

/// A file whose includes are scanned: the source, a memory header, or a file read from a folder.
struct Unit {
  enum class Kind { source, memory, disk };
  Kind kind = Kind::source;
  std::string name;                   ///< source/memory: the name as given; disk: the absolute, normal path
  std::string dir;                    ///< where its quoted includes are looked up first (in-memory names or disk)
  std::optional<std::size_t> folder;  ///< disk: the folder it was found in (#include_next goes on after it)
  std::string_view text;              ///< what is scanned (source/memory: the input's; disk: the file's bytes)
  std::shared_ptr<const HeaderFileCache::File> file;  ///< disk: the file read (bytes, record, scan)
  std::string compiler_name;          ///< disk: the name the compiler gets it under
  bool named_by_include = false;      ///< disk: compiler_name is a name a computed include asks for
  std::vector<std::pair<IncludeRef, std::size_t>> links;  ///< includes that lead to a disk unit
  std::shared_ptr<const std::string> rewritten;           ///< the text the compiler gets
};

/// The folder as an absolute, normal path; ConfigError when it is empty, missing or not a folder. With
/// `memo`, a folder it saw as a folder moments ago is not stat'ed again (a request names the same few
/// folders every time).
std::string checked_folder(const std::filesystem::path& folder, const cache::DependencyManifests* memo = nullptr,
                           std::int64_t now_ns = 0) {
  if (folder.empty()) throw ConfigError("an include folder is empty");
  std::string path;
  const std::string& given = folder.native();
  if (given.front() == '/' && plainly_normal(given)) {
    path = given;
  } else {
    std::error_code ec;
    const std::filesystem::path absolute = std::filesystem::absolute(folder, ec);
    if (ec) throw ConfigError(fmt::format("include folder '{}': {}", folder.string(), ec.message()));
    path = normalize(absolute.string());
  }
  if (memo != nullptr) {
    if (const auto seen = memo->recent_stat(path, now_ns); seen && seen->folder) return path;
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw ConfigError(fmt::format("include folder '{}' does not exist ({})", folder.string(), std::strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) throw ConfigError(fmt::format("include folder '{}' is not a folder", folder.string()));
  if (memo != nullptr) memo->note_stat(path, {true, cache::to_file_stat(st), true}, now_ns);
  return path;
}

class Resolver {
 public:
  explicit Resolver(const IncludeInput& input) : m_input(input) {
    m_access.cache = input.file_cache;
    m_access.memo = input.file_cache != nullptr ? input.stat_memo : nullptr;
    m_access.now_ns = cache::realtime_now_ns();
    m_access.work = &m_work;
    for (const std::filesystem::path& folder : input.folders) m_folders.push_back(checked_folder(folder));
    Unit source;
    source.kind = Unit::Kind::source;
    source.name = std::string(input.source_name);
    source.dir = dirname(normalize(input.source_name));
    source.text = input.source_text;
    m_units.push_back(std::move(source));
    for (const Header& header : input.memory_headers) {
      Unit unit;
      unit.kind = Unit::Kind::memory;
      unit.name = header.name;
      unit.dir = dirname(normalize(header.name));
      unit.text = header.text;
      m_memory.try_emplace(normalize(header.name), m_units.size());  // the first of equal names wins
      m_names.insert(header.name);
      m_units.push_back(std::move(unit));
    }
  }

  ResolvedIncludes run() {
    // Retry names are looked up as <name> from the source; the compiler gets them under that name.
    for (const std::string& name : m_input.retry_names) add_alias(m_units.front(), name, true, true);
    // Breadth first from the source and every memory header (a memory header no include reaches
    // may still be named by a computed one): files are read in the order they are first reached.
    // Then the computed includes' guesses, which may reach more files (with more definitions), until
    // nothing new turns up.
    std::size_t scanned = 0;
    std::unordered_set<std::string> tried;
    while (true) {
      for (; scanned < m_units.size(); ++scanned) scan(scanned);
      bool guessed = false;
      for (std::size_t i = 0; i < m_computed.size(); ++i) {
        for (const Guess& guess : guess_computed(m_computed[i].operand, m_defines)) {
          const std::string key = fmt::format("{}{}{}", m_computed[i].unit, guess.angled ? '<' : '"', guess.name);
          if (!tried.insert(key).second) continue;
          guessed = true;
          add_alias(m_units[m_computed[i].unit], guess.name, guess.angled, false);
        }
      }
      if (!guessed && scanned == m_units.size()) break;
    }

    // Names are final now: rewrite every include that leads to a file from disk.
    for (Unit& unit : m_units) rewrite(unit);
    ResolvedIncludes out;
    out.compiler_source = *m_units.front().rewritten;
    out.compiler_headers.reserve(m_units.size() - 1 + m_aliases.size());
    const auto hand_over = [&](const std::string& name, const std::shared_ptr<const std::string>& text) {
      out.compiler_headers.push_back({name, *text, text});
    };
    for (std::size_t i = 1; i < m_units.size(); ++i) {
      if (m_units[i].kind == Unit::Kind::memory) hand_over(m_units[i].name, m_units[i].rewritten);
    }
    for (const auto& [name, index] : m_aliases) hand_over(name, m_units[index].rewritten);
    for (std::size_t i = 1; i < m_units.size(); ++i) {
      if (m_units[i].kind == Unit::Kind::disk) hand_over(m_units[i].compiler_name, m_units[i].rewritten);
    }
    out.dependencies.headers = std::move(m_records);
    out.dependencies.absent = sorted_unique(std::move(m_absent));
    out.unresolved = sorted_unique(std::move(m_unresolved));
    for (Computed& computed : m_computed) out.computed.push_back(std::move(computed.operand));
    out.computed = sorted_unique(std::move(out.computed));
    out.work = m_work;
    return out;
  }

 private:
  enum class Where { none, memory, disk };
  struct Found {
    Where where = Where::none;
    std::size_t index = 0;  ///< into m_units
  };
  struct Computed {
    std::size_t unit = 0;  ///< the file it is in
    std::string operand;
  };

  static std::vector<std::string> sorted_unique(std::vector<std::string> items) {
    std::sort(items.begin(), items.end());
    items.erase(std::unique(items.begin(), items.end()), items.end());
    return items;
  }

  [[nodiscard]] Found memory(const std::string& name) const {
    const auto it = m_memory.find(name);
    return it == m_memory.end() ? Found{} : Found{Where::memory, it->second};
  }

  /// The file at `path` (absolute, normal), read the first time it is asked for; a path with no
  /// regular file is recorded as absent.
  Found probe(const std::string& path, std::optional<std::size_t> folder) {
    const auto [it, inserted] = m_probed.try_emplace(path, npos);
    if (!inserted) return it->second == npos ? Found{} : Found{Where::disk, it->second};  // absent: listed once
    std::shared_ptr<const HeaderFileCache::File> file = load_header(path, m_access);
    if (!file) {
      m_absent.push_back(path);
      return {};
    }
    Unit unit;
    unit.kind = Unit::Kind::disk;
    unit.name = path;
    unit.dir = dirname(path);
    unit.folder = folder;
    unit.compiler_name = m_input.vendor == Vendor::hip ? path.substr(1) : path;
    if (unit.compiler_name.find_first_of("\"\n\r") != npos) {
      throw ConfigError(fmt::format("header '{}': its path cannot be written in an #include", path));
    }
    if (m_memory.contains(normalize(unit.compiler_name)) || !m_names.insert(unit.compiler_name).second) {
      throw ConfigError(fmt::format(
          "the in-memory header '{}' has the name kiln gives the header read from '{}'; rename the in-memory header",
          unit.compiler_name, path));
    }
    unit.text = file->bytes;
    m_records.push_back(file->record);
    unit.file = std::move(file);
    const std::size_t index = m_units.size();
    m_units.push_back(std::move(unit));
    it->second = index;
    return {Where::disk, index};
  }

  Found search_folders(std::string_view name, std::size_t first) {
    for (std::size_t k = first; k < m_folders.size(); ++k) {
      if (const Found found = probe(join(m_folders[k], name), k); found.where != Where::none) return found;
    }
    return {};
  }

  /// Where an include of `includer` leads. "x": the includer's folder, the memory headers by name,
  /// then the folders; <x>: the memory headers, then the folders. #include_next in a file found in
  /// folder k searches the folders after k (all of them for a file found next to its includer or by
  /// an absolute path); in the source or a memory header it is an ordinary include.
  Found resolve(const Unit& includer, const IncludeRef& ref) {
    const std::string& name = ref.name;
    if (name.empty()) return {};
    if (name.front() == '/') {
      const std::string path = normalize(name);
      if (const Found found = memory(path); found.where != Where::none) return found;
      return probe(path, std::nullopt);
    }
    const bool from_disk = includer.kind == Unit::Kind::disk;
    if (ref.next && from_disk) return search_folders(name, includer.folder ? *includer.folder + 1 : 0);
    if (!ref.angled) {
      if (from_disk) {
        if (const Found found = probe(join(includer.dir, name), std::nullopt); found.where != Where::none) return found;
      } else if (const Found found = memory(join(includer.dir, name)); found.where != Where::none) {
        return found;
      }
    }
    if (const Found found = memory(normalize(name)); found.where != Where::none) return found;
    return search_folders(name, 0);
  }

  /// A name the compiler will ask for as written (a computed include, a retry name): looked up like
  /// an include of `includer`; a file from disk found for it takes that name as its compiler name, so
  /// every include of the file, rewritten or computed, names one in-memory header (#pragma once
  /// tells files apart by name). A second such name for the same file gets a copy. A name some other
  /// header already has is left to that header.
  void add_alias(const Unit& includer, const std::string& name, bool angled, bool unresolved_if_none) {
    IncludeRef ref;
    ref.name = name;
    ref.angled = angled;
    const Found found = resolve(includer, ref);
    if (found.where == Where::none && unresolved_if_none) m_unresolved.push_back(name);
    if (found.where != Where::disk) return;
    Unit& target = m_units[found.index];
    if (target.compiler_name == name || !m_names.insert(name).second) return;
    if (target.named_by_include) {
      m_aliases.emplace_back(name, found.index);
    } else {
      m_names.erase(target.compiler_name);
      target.compiler_name = name;
      target.named_by_include = true;
    }
  }

  void scan(std::size_t index) {
    ScanResult scanned;
    const ScanResult* found = &scanned;
    if (m_units[index].file) {
      found = &m_units[index].file->scan;  // a file from disk was scanned when it was read
    } else {
      Scanner(m_units[index].text).run(scanned);
    }
    for (const auto& [name, text] : found->defines) m_defines[name].push_back(text);
    for (const std::string& operand : found->computed) m_computed.push_back({index, operand});
    for (const IncludeRef& ref : found->refs) {
      const Found target = resolve(m_units[index], ref);  // (m_units is a deque: references stay valid)
      if (target.where == Where::none) m_unresolved.push_back(ref.name);
      // Memory headers keep the names they are included by: only includes of disk files change.
      if (target.where == Where::disk) m_units[index].links.emplace_back(ref, target.index);
    }
  }

  void rewrite(Unit& unit) {
    if (unit.file) {
      // A file from disk: the text an earlier resolve built, when its includes lead to the same names.
      const HeaderFileCache::File::Rewrite& last = unit.file->last_rewrite;
      const std::lock_guard lock(unit.file->rewrite_mutex);
      if (last.text && last.names.size() == unit.links.size() &&
          std::equal(unit.links.begin(), unit.links.end(), last.names.begin(), [&](const auto& link, const auto& name) {
            return link.first.operand_begin == name.first && m_units[link.second].compiler_name == name.second;
          })) {
        unit.rewritten = last.text;
      }
    }
    if (!unit.rewritten) {
      std::vector<Edit> edits;
      for (const auto& [ref, target] : unit.links) {
        if (ref.next)
          edits.push_back({ref.keyword_begin, ref.keyword_end, ref.has_include ? "__has_include" : "include"});
        edits.push_back({ref.operand_begin, ref.operand_end, fmt::format("\"{}\"", m_units[target].compiler_name)});
      }
      unit.rewritten = std::make_shared<const std::string>(apply_edits(unit.text, edits));
      if (unit.file) {
        HeaderFileCache::File::Rewrite built;
        built.names.reserve(unit.links.size());
        for (const auto& [ref, target] : unit.links) built.names.emplace_back(ref.operand_begin, m_units[target].compiler_name);
        built.text = unit.rewritten;
        const std::lock_guard lock(unit.file->rewrite_mutex);
        unit.file->last_rewrite = std::move(built);
      }
    }
    unit.links = {};
    unit.text = {};  // the rewritten text is all that is kept
    unit.file.reset();
  }

  const IncludeInput& m_input;
  ResolvedIncludes::Work m_work;
  FileAccess m_access;
  std::vector<std::string> m_folders;                     ///< absolute, normal
  std::unordered_map<std::string, std::size_t> m_memory;  ///< normal name -> unit
  std::unordered_map<std::string, std::size_t> m_probed;  ///< path -> disk unit, or npos: absent
  std::unordered_set<std::string> m_names;                ///< every name the compiler gets a header under
  std::deque<Unit> m_units;  ///< the source, the memory headers, then the disk files (stable references)
  std::vector<cache::HeaderRecord> m_records;                  ///< one per disk unit, same order
  std::vector<std::pair<std::string, std::size_t>> m_aliases;  ///< name -> disk unit
  Defines m_defines;
  std::vector<Computed> m_computed;
  std::vector<std::string> m_absent;
  std::vector<std::string> m_unresolved;
};

/// The text between `open` and the next `close` after the first occurrence of `marker`, on one line.
std::optional<std::string> quoted_after(std::string_view log, std::string_view marker, char close) {
  const std::size_t at = log.find(marker);
  if (at == npos) return std::nullopt;
  const std::size_t begin = at + marker.size();
  const std::size_t end = log.find_first_of(std::string_view(&close, 1), begin);
  const std::size_t line_end = log.find('\n', begin);
  if (end == npos || end > line_end || end == begin) return std::nullopt;
  return std::string(log.substr(begin, end - begin));
}

bool is_file(const std::filesystem::path& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

bool is_folder(const std::filesystem::path& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec);
}

/// Candidate toolkit include folders for a library folder: <root>/include for <root>/lib,
/// <root>/lib64, <root>/lib/<multiarch triple> and <root>/targets/<triple>/lib (whose own include
/// folder is tried second).
std::vector<std::filesystem::path> include_candidates(const std::filesystem::path& library_dir) {
  std::vector<std::filesystem::path> out;
  const std::string name = library_dir.filename().string();
  const std::filesystem::path parent = library_dir.parent_path();
  if (name == "lib" || name == "lib64") {
    out.push_back(parent / "include");
    if (parent.parent_path().filename() == "targets") {
      out.insert(out.begin(), parent.parent_path().parent_path() / "include");
    }
  } else if (name.find("-linux-") != std::string::npos && parent.filename() == "lib") {
    out.push_back(parent.parent_path() / "include");  // Debian multiarch: /usr/lib/x86_64-linux-gnu
  }
  return out;
}

}  // namespace

ResolvedIncludes resolve_includes(const IncludeInput& input) { return Resolver(input).run(); }

std::vector<std::filesystem::path> checked_include_folders(std::span<const std::filesystem::path> folders,
                                                           const cache::DependencyManifests* memo) {
  std::vector<std::filesystem::path> out;
  out.reserve(folders.size());
  const std::int64_t now_ns = memo != nullptr ? cache::realtime_now_ns() : 0;
  for (const std::filesystem::path& folder : folders) out.emplace_back(checked_folder(folder, memo, now_ns));
  return out;
}

std::optional<std::string> missing_include_from_log(std::string_view log) {
  // NVRTC: `catastrophic error: cannot open source file "x"`, or `could not open source file "x"
  // (no directories in search list)` for an <x> include.
  if (auto name = quoted_after(log, "cannot open source file \"", '"')) return name;
  if (auto name = quoted_after(log, "could not open source file \"", '"')) return name;
  // clang (HIPRTC): `fatal error: 'x' file not found`, or `error: 'x' file not found, did you mean 'y'?`.
  for (std::size_t at = log.find("' file not found"); at != npos; at = log.find("' file not found", at + 1)) {
    const std::size_t line = log.rfind('\n', at);
    const std::size_t begin = log.find("error: '", line == npos ? 0 : line + 1);
    if (begin != npos && begin < at) {
      const std::size_t name = begin + 8;
      if (name < at) return std::string(log.substr(name, at - name));
    }
  }
  return std::nullopt;
}

bool opens_files_by_name(std::string_view text) {
  if (text.find("include") == std::string_view::npos) return false;  // no include of any form
  ScanResult found;
  Scanner(text).run(found);
  return !found.computed.empty() || std::any_of(found.refs.begin(), found.refs.end(), [](const IncludeRef& ref) {
    return ref.name.starts_with('/');
  });
}

std::string describe_missing_include(std::string_view name, std::span<const std::filesystem::path> folders) {
  if (folders.empty()) {
    return fmt::format(
        "header '{}' is not among the in-memory headers and no include folder was given (pass -I DIR, or "
        "--toolkit-includes for the toolkit's own headers; the compiler searches neither the working directory "
        "nor the source's folder, so a header there needs -I too)",
        name);
  }
  std::string list;
  for (const std::filesystem::path& folder : folders) {
    if (!list.empty()) list += ", ";
    list += folder.string();
  }
  return fmt::format(
      "header '{}' is not among the in-memory headers nor in the include folders searched: {} (the working directory "
      "and the source's folder are not searched: a header there needs -I too)",
      name, list);
}

std::vector<std::filesystem::path> toolkit_include_dirs(const std::filesystem::path& compiler_library) {
  const std::string file = compiler_library.filename().string();
  const bool cuda = file.starts_with("libnvrtc");
  const bool hip = file.starts_with("libamdhip64") || file.starts_with("libhiprtc");
  if (!cuda && !hip) {
    throw ConfigError(
        fmt::format("--toolkit-includes: '{}' is not an NVRTC or HIPRTC library", compiler_library.string()));
  }
  const std::filesystem::path lexical(normalize(std::filesystem::absolute(compiler_library).string()));
  std::vector<std::filesystem::path> candidates = include_candidates(lexical.parent_path());
  // The library may be reached through a link from outside its toolkit (/usr/lib/libnvrtc.so ->
  // /opt/cuda/lib64/...): its real folder is tried after the one the path spells.
  std::error_code ec;
  const std::filesystem::path real = std::filesystem::canonical(lexical, ec);
  if (!ec && real.parent_path() != lexical.parent_path()) {
    for (std::filesystem::path& c : include_candidates(real.parent_path())) candidates.push_back(std::move(c));
  }
  for (const std::filesystem::path& include : candidates) {
    if (cuda && (is_file(include / "cuda_runtime.h") || is_file(include / "cuda_fp16.h"))) {
      std::vector<std::filesystem::path> out = {include};
      if (is_folder(include / "cccl")) out.push_back(include / "cccl");
      return out;
    }
    if (hip && is_file(include / "hip" / "hip_runtime.h")) return {include};
  }
  if (candidates.empty()) {
    throw ConfigError(
        fmt::format("--toolkit-includes: cannot tell the toolkit folder of the compiler library '{}' "
                    "(expected it under <toolkit>/lib, lib64 or targets/<triple>/lib)",
                    compiler_library.string()));
  }
  std::string tried;
  for (const std::filesystem::path& include : candidates) {
    if (!tried.empty()) tried += ", ";
    tried += include.string();
  }
  throw ConfigError(fmt::format("--toolkit-includes: the toolkit folder of '{}' lacks its headers ({} not found in {})",
                                compiler_library.string(), cuda ? "cuda_runtime.h or cuda_fp16.h" : "hip/hip_runtime.h",
                                tried));
}

}  // namespace kiln::detail
