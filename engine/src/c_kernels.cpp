// Which plain kernel names are extern "C" kernels of a source (c_kernels.hpp): a token walk over the text.
#include "c_kernels.hpp"

#include <algorithm>
#include <cctype>
#include <set>

namespace kiln::detail {
namespace {

bool is_identifier_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0 || c == '_'; }
bool is_identifier_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }

/// The text as the compiler's tokenizer sees its lines: comments become a space, line splices vanish.
/// String and character literals are kept whole (a "//" or "{" inside one is not code).
std::string without_comments(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\\' && i + 1 < text.size() && (text[i + 1] == '\n' || text[i + 1] == '\r')) {
      i += (text[i + 1] == '\r' && i + 2 < text.size() && text[i + 2] == '\n') ? 2 : 1;
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
      out += ' ';
    } else if (c == '/' && i + 1 < text.size() && text[i + 1] == '*') {
      const std::size_t end = text.find("*/", i + 2);
      i = end == std::string_view::npos ? text.size() : end + 1;
      out += ' ';
    } else if (c == '"' || c == '\'') {
      out += c;
      for (++i; i < text.size() && text[i] != c && text[i] != '\n'; ++i) {
        if (text[i] == '\\' && i + 1 < text.size()) out += text[i++];
        out += text[i];
      }
      if (i < text.size()) out += text[i];
    } else {
      out += c;
    }
  }
  return out;
}

/// The tokens of one line: identifiers, literals (whole) and single punctuation characters.
std::vector<std::string_view> tokens_of(std::string_view line) {
  std::vector<std::string_view> tokens;
  for (std::size_t i = 0; i < line.size();) {
    const char c = line[i];
    std::size_t end = i + 1;
    if (std::isspace(static_cast<unsigned char>(c)) != 0) {
      ++i;
      continue;
    }
    if (is_identifier_char(c)) {
      while (end < line.size() && is_identifier_char(line[end])) ++end;
    } else if (c == '"' || c == '\'') {
      while (end < line.size() && line[end] != c) end += line[end] == '\\' ? 2 : 1;
      end = std::min(end + 1, line.size());
    }
    tokens.push_back(line.substr(i, end - i));
    i = end;
  }
  return tokens;
}

/// What a macro kiln follows stands for: object-like macros whose definition says extern "C" or __global__.
struct Macros {
  std::set<std::string, std::less<>> c_linkage;  // the definition holds extern "C"
  std::set<std::string, std::less<>> global;     // the definition holds __global__
};

bool says_extern_c(const std::vector<std::string_view>& tokens, std::size_t at) {
  return tokens[at] == "extern" && at + 1 < tokens.size() && tokens[at + 1] == "\"C\"";
}

/// Reads the #define lines of `text` (comments removed) into `macros`.
void read_macros(std::string_view text, Macros& macros) {
  for (std::size_t start = 0; start < text.size();) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    start = end + 1;
    const std::size_t hash = line.find_first_not_of(" \t\r");
    if (hash == std::string_view::npos || line[hash] != '#') continue;
    const std::vector<std::string_view> tokens = tokens_of(line.substr(hash + 1));
    if (tokens.size() < 3 || tokens[0] != "define" || !is_identifier_start(tokens[1][0])) continue;
    const char* after_name = tokens[1].data() + tokens[1].size();
    if (after_name < line.data() + line.size() && *after_name == '(') continue;  // function-like: not followed
    for (std::size_t t = 2; t < tokens.size(); ++t) {
      if (says_extern_c(tokens, t)) macros.c_linkage.emplace(tokens[1]);
      if (tokens[t] == "__global__") macros.global.emplace(tokens[1]);
    }
  }
}

}  // namespace

std::vector<std::string> c_kernels_among(std::string_view text, std::span<const std::string_view> macro_texts,
                                         const std::vector<std::string>& names) {
  if (names.empty()) return {};
  const std::string code = without_comments(text);
  Macros macros;
  read_macros(code, macros);
  for (const std::string_view header : macro_texts) {
    if (header.find("#") != std::string_view::npos && header.find("define") != std::string_view::npos) {
      read_macros(without_comments(header), macros);
    }
  }

  // The walk: each `{` opens a scope that is an extern "C" block or something else (a namespace, a class, a
  // function); a declaration counts only where every open scope is an extern "C" block. Within one statement
  // (from the last `;`, `{` or `}`), an identifier followed by `(` outside parentheses is what it declares.
  std::set<std::string, std::less<>> found;
  std::vector<bool> scopes;  // true: an extern "C" block
  std::vector<std::string_view> statement;
  int parens = 0;
  const auto statement_has = [&](auto&& pred) { return std::any_of(statement.begin(), statement.end(), pred); };
  for (std::size_t start = 0; start < code.size();) {
    std::size_t end = code.find('\n', start);
    if (end == std::string::npos) end = code.size();
    const std::string_view line(code.data() + start, end - start);
    start = end + 1;
    const std::size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string_view::npos || line[first] == '#') continue;  // directives are not declarations
    const std::vector<std::string_view> tokens = tokens_of(line);
    for (std::size_t t = 0; t < tokens.size(); ++t) {
      const std::string_view token = tokens[t];
      if (token == "{") {
        const bool c_block = statement.size() >= 2 && statement[statement.size() - 2] == "extern" &&
                             statement.back() == "\"C\"";
        scopes.push_back(c_block);
        statement.clear();
        parens = 0;
      } else if (token == "}") {
        if (!scopes.empty()) scopes.pop_back();
        statement.clear();
        parens = 0;
      } else if (token == ";") {
        statement.clear();
        parens = 0;
      } else {
        const bool declares = parens == 0 && is_identifier_start(token[0]) && t + 1 < tokens.size() &&
                              tokens[t + 1] == "(";
        if (declares && std::all_of(scopes.begin(), scopes.end(), [](bool c) { return c; })) {
          bool c_linkage = !scopes.empty();
          bool global = false;
          for (std::size_t s = 0; s < statement.size(); ++s) {
            c_linkage = c_linkage || (statement[s] == "extern" && s + 1 < statement.size() &&
                                      statement[s + 1] == "\"C\"") ||
                        macros.c_linkage.contains(statement[s]);
            global = global || statement[s] == "__global__" || macros.global.contains(statement[s]);
          }
          // static gives internal linkage (NVRTC then mangles even an extern "C" name); a template is never C.
          const bool excluded = statement_has([](std::string_view s) { return s == "static" || s == "template"; });
          if (c_linkage && global && !excluded) found.emplace(token);
        }
        if (token == "(") ++parens;
        if (token == ")" && parens > 0) --parens;
        statement.push_back(token);
      }
    }
  }
  std::vector<std::string> out;
  for (const std::string& name : names) {
    if (found.contains(name)) out.push_back(name);
  }
  return out;
}

}  // namespace kiln::detail
