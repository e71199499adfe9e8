// Computed includes (#include MACRO): the names an operand may expand to, from the definitions the scan saw
// and the request's own macros (scan.hpp, guess_computed; resolve.hpp, add_flag_defines).
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "conditions.hpp"
#include "resolve.hpp"
#include "scan.hpp"

namespace kiln::cache::detail {

constexpr std::size_t npos = std::string_view::npos;

namespace {

bool is_blank(int c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

}  // namespace

namespace {

/// The bounded macro expansion behind guess_computed: every way the operand's macros may expand, each to
/// a text without a macro call left, over text (spellings and blanks kept, so a name's spelling survives).
class Expander {
 public:
  explicit Expander(const Defines& defines) : m_defines(defines) {}

  /// Every full expansion of `text` (at most kMaxResults), searching for macro names from `from` on.
  std::vector<std::string> expand(std::string text, std::size_t from, int depth) {
    std::vector<std::string> out;
    expand_into(std::move(text), from, depth, out);
    return out;
  }

  static constexpr int kMaxDepth = 16;
  static constexpr std::size_t kMaxSteps = 512;
  static constexpr std::size_t kMaxResults = 64;

 private:
  struct Call {
    std::size_t begin = 0, end = 0;  ///< the span replaced: the name, or the name through its ')'
    const std::vector<Definition>* definitions = nullptr;
    std::vector<std::string> args;   ///< a function-like call's arguments, as written
    bool function_like = false;
  };

  void expand_into(std::string text, std::size_t from, int depth, std::vector<std::string>& out) {
    if (out.size() >= kMaxResults || ++m_steps > kMaxSteps) return;
    const std::optional<Call> call = next_call(text, from);
    if (!call) {
      out.push_back(std::move(text));
      return;
    }
    if (depth >= kMaxDepth) return;  // a macro that keeps expanding into itself: no name from this way
    for (const Definition& d : *call->definitions) {
      if (d.function_like != call->function_like) continue;
      for (std::string& replaced : replacements(d, *call, depth)) {
        std::string next = text.substr(0, call->begin) + replaced + text.substr(call->end);
        expand_into(std::move(next), call->begin, depth + 1, out);
      }
    }
  }

  /// The first macro name at or after `from` outside a literal that is called: an object-like definition,
  /// or a function-like one followed by '(' (then its arguments are read too).
  [[nodiscard]] std::optional<Call> next_call(const std::string& text, std::size_t from) const {
    for (std::size_t i = from; i < text.size();) {
      const auto c = static_cast<unsigned char>(text[i]);
      if (c == '"' || c == '\'') {
        i = past_literal(text, i);
      } else if (is_digit(c)) {
        while (i < text.size() && (is_ident_char(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
      } else if (is_ident_start(c)) {
        std::size_t j = i;
        while (j < text.size() && is_ident_char(static_cast<unsigned char>(text[j]))) ++j;
        const auto macro = m_defines.find(text.substr(i, j - i));
        if (macro != m_defines.end()) {
          Call call{i, j, &macro->second, {}, false};
          const bool object = std::any_of(macro->second.begin(), macro->second.end(),
                                          [](const Definition& d) { return !d.function_like; });
          std::size_t open = j;
          while (open < text.size() && is_blank(static_cast<unsigned char>(text[open]))) ++open;
          if (open < text.size() && text[open] == '(' &&
              std::any_of(macro->second.begin(), macro->second.end(), [](const Definition& d) { return d.function_like; })) {
            if (std::optional<std::size_t> close = arguments(text, open, call.args)) {
              call.function_like = true;
              call.end = *close + 1;
              return call;
            }
          }
          if (object) return call;
        }
        i = j;
      } else {
        ++i;
      }
    }
    return std::nullopt;
  }

  static std::size_t past_literal(const std::string& text, std::size_t at) {
    const char quote = text[at];
    for (std::size_t i = at + 1; i < text.size(); ++i) {
      if (text[i] == '\\') {
        ++i;
      } else if (text[i] == quote) {
        return i + 1;
      }
    }
    return text.size();
  }

  /// The arguments of a call whose '(' is at `open`, split at top-level commas; the index of its ')'.
  static std::optional<std::size_t> arguments(const std::string& text, std::size_t open, std::vector<std::string>& args) {
    int nesting = 0;
    std::size_t start = open + 1;
    for (std::size_t i = open + 1; i < text.size();) {
      const char c = text[i];
      if (c == '"' || c == '\'') {
        i = past_literal(text, i);
        continue;
      }
      if (c == '(') ++nesting;
      if ((c == ',' && nesting == 0) || (c == ')' && nesting == 0)) {
        args.push_back(text.substr(start, i - start));
        if (c == ')') return i;
        start = i + 1;
      } else if (c == ')') {
        --nesting;
      }
      ++i;
    }
    return std::nullopt;
  }

  static std::string_view trim(std::string_view text) {
    while (!text.empty() && is_blank(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
    while (!text.empty() && is_blank(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
    return text;
  }

  /// `#x`: the argument's spelling as a string literal (blanks between tokens one space; '"' and '\' in
  /// its literals escaped).
  static std::string stringize(std::string_view arg) {
    arg = trim(arg);
    std::string out = "\"";
    const auto put = [&out](char c) {
      if (c == '"' || c == '\\') out += '\\';
      out += c;
    };
    char quote = 0;  // inside a literal: its quote
    bool blank = false;
    for (std::size_t i = 0; i < arg.size(); ++i) {
      const char c = arg[i];
      if (quote == 0 && is_blank(static_cast<unsigned char>(c))) {
        blank = true;
        continue;
      }
      if (blank) out += ' ';
      blank = false;
      if (quote == 0) {
        if (c == '"' || c == '\'') quote = c;
        put(c);
      } else if (c == '\\' && i + 1 < arg.size()) {
        put(c);
        put(arg[++i]);
      } else {
        if (c == quote) quote = 0;
        put(c);
      }
    }
    return out + '"';
  }

  /// A definition's replacement with the call's arguments in place: every way it can read (an argument
  /// expanded first may expand more than one way).
  std::vector<std::string> replacements(const Definition& d, const Call& call, int depth) {
    if (!d.function_like) return {d.text};
    // "(a, b) body": the parameters, then the body.
    const std::size_t close = d.text.find(')');
    if (d.text.empty() || d.text.front() != '(' || close == std::string::npos) return {};
    std::vector<std::string> params;
    bool variadic = false;
    for (std::string_view list(d.text.data() + 1, close - 1); !trim(list).empty();) {
      const std::size_t comma = list.find(',');
      std::string_view param = trim(list.substr(0, comma));
      if (param == "...") {
        param = "__VA_ARGS__";
        variadic = true;
      }
      params.emplace_back(param);
      if (comma == std::string_view::npos) break;
      list.remove_prefix(comma + 1);
    }
    std::vector<std::string> args = call.args;
    if (args.size() == 1 && params.empty() && trim(args.front()).empty()) args.clear();
    if (variadic && args.size() > params.size()) {  // the rest of the arguments, commas and all, are __VA_ARGS__
      for (std::size_t i = params.size(); i < args.size(); ++i) args[params.size() - 1] += "," + args[i];
      args.resize(params.size());
    }
    if (variadic && args.size() + 1 == params.size()) args.emplace_back();
    if (args.size() != params.size()) return {};  // a call the compiler would reject: no name from it
    const std::string_view body = trim(std::string_view(d.text).substr(close + 1));

    // The body's pieces: text, a parameter (with how it is used), '#' + parameter, '##'.
    struct Piece {
      enum Kind { text, param, stringized, paste } kind;
      std::string value;  ///< text: the text; param/stringized: the parameter's index as text
    };
    std::vector<Piece> pieces;
    const auto param_index = [&](std::string_view name) -> int {
      for (std::size_t i = 0; i < params.size(); ++i) {
        if (params[i] == name) return static_cast<int>(i);
      }
      return -1;
    };
    for (std::size_t i = 0; i < body.size();) {
      const auto c = static_cast<unsigned char>(body[i]);
      if (c == '"' || c == '\'') {
        const std::size_t end = past_literal(std::string(body), i);
        pieces.push_back({Piece::text, std::string(body.substr(i, end - i))});
        i = end;
      } else if (c == '#' && i + 1 < body.size() && body[i + 1] == '#') {
        while (!pieces.empty() && pieces.back().kind == Piece::text && trim(pieces.back().value).empty()) pieces.pop_back();
        if (!pieces.empty() && pieces.back().kind == Piece::text) pieces.back().value = std::string(trim(pieces.back().value));
        pieces.push_back({Piece::paste, {}});
        i += 2;
        while (i < body.size() && is_blank(static_cast<unsigned char>(body[i]))) ++i;
      } else if (c == '#') {
        std::size_t j = i + 1;
        while (j < body.size() && is_blank(static_cast<unsigned char>(body[j]))) ++j;
        std::size_t k = j;
        while (k < body.size() && is_ident_char(static_cast<unsigned char>(body[k]))) ++k;
        const int index = param_index(body.substr(j, k - j));
        if (index < 0) return {};  // '#' not before a parameter: the compiler rejects the definition
        pieces.push_back({Piece::stringized, std::to_string(index)});
        i = k;
      } else if (is_ident_start(c)) {
        std::size_t j = i;
        while (j < body.size() && is_ident_char(static_cast<unsigned char>(body[j]))) ++j;
        const int index = param_index(body.substr(i, j - i));
        if (index >= 0) {
          pieces.push_back({Piece::param, std::to_string(index)});
        } else {
          pieces.push_back({Piece::text, std::string(body.substr(i, j - i))});
        }
        i = j;
      } else {
        pieces.push_back({Piece::text, std::string(1, static_cast<char>(c))});
        ++i;
      }
    }
    // A parameter next to '##' takes its argument as written; any other is expanded first.
    std::vector<std::string> results = {std::string()};
    for (std::size_t p = 0; p < pieces.size(); ++p) {
      const Piece& piece = pieces[p];
      std::vector<std::string> choices;
      if (piece.kind == Piece::paste) {
        for (std::string& r : results) {
          while (!r.empty() && is_blank(static_cast<unsigned char>(r.back()))) r.pop_back();
        }
        continue;
      }
      if (piece.kind == Piece::text) {
        choices = {piece.value};
      } else {
        const std::string& arg = args[static_cast<std::size_t>(std::stoi(piece.value))];
        const bool pasted = (p > 0 && pieces[p - 1].kind == Piece::paste) ||
                            (p + 1 < pieces.size() && pieces[p + 1].kind == Piece::paste);
        if (piece.kind == Piece::stringized) {
          choices = {stringize(arg)};
        } else if (pasted) {
          choices = {std::string(trim(arg))};
        } else {
          choices = expand(std::string(trim(arg)), 0, depth + 1);
        }
      }
      const bool after_paste = p > 0 && pieces[p - 1].kind == Piece::paste;
      std::vector<std::string> next;
      for (const std::string& r : results) {
        for (const std::string& choice : choices) {
          if (next.size() >= kMaxResults) break;
          next.push_back(r + (after_paste ? std::string(trim(choice)) : choice));
        }
      }
      results = std::move(next);
    }
    return results;
  }

  const Defines& m_defines;
  std::size_t m_steps = 0;
};

}  // namespace

std::vector<Guess> guess_computed(std::string_view operand, const Defines& defines) {
  std::vector<Guess> out;
  Expander expander(defines);
  for (const std::string& text : expander.expand(std::string(operand), 0, 0)) {
    const std::string_view name = text;
    const std::size_t first = name.find_first_not_of(" \t");
    const std::size_t last = name.find_last_not_of(" \t");
    if (first == npos || last - first < 2) continue;
    const char open = name[first], close = name[last];
    if (!((open == '<' && close == '>') || (open == '"' && close == '"'))) continue;
    const std::string_view inner = name.substr(first + 1, last - first - 1);
    // A "..." operand is one string literal; <...> is spelled by its tokens (blanks kept as written).
    if (open == '"' && inner.find('"') != npos) continue;
    Guess guess{std::string(inner), open == '<'};
    const bool seen = std::any_of(out.begin(), out.end(),
                                  [&](const Guess& g) { return g.name == guess.name && g.angled == guess.angled; });
    if (!seen) out.push_back(std::move(guess));
  }
  return out;
}

void add_flag_defines(const MacroContext& macros, Defines& defines) {
  for (const auto& [name, macro] : macros.initial) {
    if (macro.state == Macro::State::object) {
      defines[name].push_back({macro.value, false});
    } else if (macro.state == Macro::State::function) {
      std::string params;
      for (std::size_t i = 0; i < macro.params.size(); ++i) {
        const bool rest = macro.variadic && i + 1 == macro.params.size() && macro.params[i] == "__VA_ARGS__";
        params += fmt::format("{}{}", i > 0 ? ", " : "", rest ? std::string("...") : macro.params[i]);
      }
      defines[name].push_back({fmt::format("({}) {}", params, macro.value), true});
    }
  }
}

IncludeError unnamed_include(std::string_view where, std::string_view operand) {
  return IncludeError(fmt::format(
      "{}: kiln cannot tell which header '#include {}' names (its macros do not expand to a \"name\" or <name> with "
      "the definitions kiln reads: the source's and headers' #defines and the -D options); kiln hands the compiler "
      "only headers it has read and keyed, so it does not compile this request: write the header's name, or define "
      "the macro with #define or -D",
      where, operand));
}

IncludeError absolute_include_for_hip(std::string_view where, std::string_view operand, std::string_view name) {
  return IncludeError(fmt::format(
      "{}: '#include {}' may name the absolute path '{}', which HIPRTC would read from the disk instead of the bytes "
      "kiln keyed; include it by a name under an include folder (-I)",
      where, operand, name));
}

}  // namespace kiln::cache::detail
