#include "conditions.hpp"

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <forward_list>
#include <memory_resource>
#include <optional>
#include <vector>

#include "kiln/base/xxh3.hpp"
#include "scan.hpp"

namespace kiln::cache::detail {
namespace {


/// A token of an #if expression. Its text is a view: into the expression, a macro's replacement (the
/// macro state does not change while an expression is evaluated), a literal, or the Expander's own
/// storage of pasted tokens. So tokens are copied and spliced without allocating.
struct Tok {
  enum class Kind : unsigned char { number, ident, punct, unknown, string };
  std::string_view text;
  int frame = -1;  ///< the macro expansion it came from (ExpansionFrames), -1 for the expression itself
  Kind kind = Kind::punct;
};

/// An evaluation's token lists all draw on one arena (MacroState::evaluate): an #if expansion makes many
/// short-lived lists, and the allocator is otherwise most of its time.
using Toks = std::pmr::vector<Tok>;

/// Whether `t` is the punctuator `op` (one or two characters), without a call to memcmp: the parser asks
/// this of every token at every precedence level.
inline bool is_punct(const Tok& t, std::string_view op) {
  return t.kind == Tok::Kind::punct && t.text.size() == op.size() && t.text[0] == op[0] &&
         (op.size() < 2 || t.text[1] == op[1]);
}

/// Splits an #if expression into tokens. False for something not lexed here (a string literal).
bool tokenize(std::string_view text, Toks& out, int frame) {
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f' || c == '\n') {
      ++i;
    } else if (is_ident_start(c)) {
      std::size_t j = i;
      while (j < text.size() && is_ident_char(static_cast<unsigned char>(text[j]))) ++j;
      if (j < text.size() && (text[j] == '\'' || text[j] == '"')) return false;  // u8'x', L"x": not here
      out.push_back({text.substr(i, j - i), frame, Tok::Kind::ident});
      i = j;
    } else if (is_digit(c) || (c == '.' && i + 1 < text.size() && is_digit(static_cast<unsigned char>(text[i + 1])))) {
      std::size_t j = i + 1;
      while (j < text.size()) {
        const auto d = static_cast<unsigned char>(text[j]);
        if ((d == '+' || d == '-') && (text[j - 1] == 'e' || text[j - 1] == 'E' || text[j - 1] == 'p' || text[j - 1] == 'P')) {
          ++j;
        } else if (is_ident_char(d) || d == '.' || (d == '\'' && j + 1 < text.size() && is_ident_char(static_cast<unsigned char>(text[j + 1])))) {
          ++j;
        } else {
          break;
        }
      }
      out.push_back({text.substr(i, j - i), frame, Tok::Kind::number});
      i = j;
    } else if (c == '\'' || c == '"') {
      // A character literal (its value is not worked out here) or a string literal (an operand of
      // __has_include, or a stringized argument): neither is a number.
      std::size_t j = i + 1;
      while (j < text.size() && text[j] != static_cast<char>(c)) j += text[j] == '\\' ? 2 : 1;
      j = std::min(j + 1, text.size());
      out.push_back({text.substr(i, j - i), frame, c == '"' ? Tok::Kind::string : Tok::Kind::unknown});
      i = j;
    } else {
      static constexpr std::string_view kTwo[] = {"&&", "||", "==", "!=", "<=", ">=", "<<", ">>", "##"};
      std::string_view op = text.substr(i, 1);
      for (const std::string_view two : kTwo) {
        if (text.substr(i, 2) == two) op = two;
      }
      out.push_back({op, frame, Tok::Kind::punct});
      i += op.size();
    }
  }
  return true;
}

/// An integer of the preprocessor: intmax_t or uintmax_t, or unknown.
struct Value {
  bool known = false;
  bool is_unsigned = false;
  std::uint64_t bits = 0;

  static Value unknown() { return {}; }
  static Value of(std::int64_t v) { return {true, false, static_cast<std::uint64_t>(v)}; }
  static Value truth(bool b) { return of(b ? 1 : 0); }
  [[nodiscard]] std::int64_t as_signed() const { return static_cast<std::int64_t>(bits); }
  [[nodiscard]] bool nonzero() const { return bits != 0; }
};

/// A malformed expression (or one beyond this evaluator): unknown.
struct Unsupported {};

std::optional<Value> parse_number(std::string_view text) {
  std::string digits;
  for (const char c : text) {
    if (c != '\'') digits += c;
  }
  std::string_view body = digits;
  bool is_unsigned = false;
  while (!body.empty()) {
    const char last = body.back();
    if (last == 'u' || last == 'U') {
      is_unsigned = true;
      body.remove_suffix(1);
    } else if (last == 'l' || last == 'L' || last == 'z' || last == 'Z') {
      body.remove_suffix(1);
    } else {
      break;
    }
  }
  int base = 10;
  if (body.size() > 2 && body[0] == '0' && (body[1] == 'x' || body[1] == 'X')) {
    base = 16;
    body.remove_prefix(2);
  } else if (body.size() > 2 && body[0] == '0' && (body[1] == 'b' || body[1] == 'B')) {
    base = 2;
    body.remove_prefix(2);
  } else if (body.size() > 1 && body[0] == '0') {
    base = 8;
    body.remove_prefix(1);
  }
  if (body.empty()) return std::nullopt;
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(body.data(), body.data() + body.size(), v, base);
  if (ec != std::errc() || end != body.data() + body.size()) return std::nullopt;  // a float, or too large
  // A decimal literal that does not fit intmax_t is unsigned; others as written.
  if (base == 10 && v > static_cast<std::uint64_t>(INT64_MAX)) is_unsigned = true;
  return Value{true, is_unsigned, v};
}

/// Recursive descent over the expanded tokens, with unknowns carried through (and short-circuits that
/// make them known: `0 && x`, `1 || x`, `c ? a : b` with a known c).
class Parser {
 public:
  Parser(const Toks& tokens, const MacroState& state) : m_tokens(tokens), m_state(state) {}

  Value run() {
    Value v = conditional();
    if (m_at != m_tokens.size()) throw Unsupported{};
    return v;
  }

 private:
  bool accept(std::string_view punct) {
    if (m_at < m_tokens.size() && is_punct(m_tokens[m_at], punct)) {
      ++m_at;
      return true;
    }
    return false;
  }
  void expect(std::string_view punct) {
    if (!accept(punct)) throw Unsupported{};
  }

  Value conditional() {
    const Value c = logical_or();
    if (!accept("?")) return c;
    const Value a = conditional();
    expect(":");
    const Value b = conditional();
    if (c.known) return c.nonzero() ? a : b;
    if (a.known && b.known && a.bits == b.bits && a.is_unsigned == b.is_unsigned) return a;
    return Value::unknown();
  }
  Value logical_or() {
    Value left = logical_and();
    while (accept("||")) {
      const Value right = logical_and();
      if ((left.known && left.nonzero()) || (right.known && right.nonzero())) {
        left = Value::truth(true);
      } else if (left.known && right.known) {
        left = Value::truth(false);
      } else {
        left = Value::unknown();
      }
    }
    return left;
  }
  Value logical_and() {
    Value left = bit_or();
    while (accept("&&")) {
      const Value right = bit_or();
      if ((left.known && !left.nonzero()) || (right.known && !right.nonzero())) {
        left = Value::truth(false);
      } else if (left.known && right.known) {
        left = Value::truth(true);
      } else {
        left = Value::unknown();
      }
    }
    return left;
  }
  static Value arithmetic(const Value& a, const Value& b, std::string_view op) {
    if (!a.known || !b.known) return Value::unknown();
    const bool u = a.is_unsigned || b.is_unsigned;
    const std::uint64_t x = a.bits, y = b.bits;
    const std::int64_t sx = a.as_signed(), sy = b.as_signed();
    const auto make = [u](std::uint64_t bits) { return Value{true, u, bits}; };
    if (op == "|") return make(x | y);
    if (op == "^") return make(x ^ y);
    if (op == "&") return make(x & y);
    if (op == "==") return Value::truth(x == y);
    if (op == "!=") return Value::truth(x != y);
    if (op == "<") return Value::truth(u ? x < y : sx < sy);
    if (op == ">") return Value::truth(u ? x > y : sx > sy);
    if (op == "<=") return Value::truth(u ? x <= y : sx <= sy);
    if (op == ">=") return Value::truth(u ? x >= y : sx >= sy);
    if (op == "<<" || op == ">>") {
      if (sy < 0 || sy >= 64) return Value::unknown();
      if (op == "<<") return Value{true, a.is_unsigned, x << sy};
      return a.is_unsigned ? Value{true, true, x >> sy} : Value::of(sx >> sy);
    }
    if (op == "+") return make(x + y);
    if (op == "-") return make(x - y);
    if (op == "*") return make(x * y);
    if (op == "/" || op == "%") {
      if (y == 0) return Value::unknown();  // the compiler reports it
      if (u) return make(op == "/" ? x / y : x % y);
      if (sx == INT64_MIN && sy == -1) return Value::unknown();
      return Value::of(op == "/" ? sx / sy : sx % sy);
    }
    throw Unsupported{};
  }
  template <class Next>
  Value binary(std::initializer_list<std::string_view> ops, Next next) {
    Value left = (this->*next)();
    for (;;) {
      std::string_view matched;
      for (const std::string_view op : ops) {
        if (accept(op)) {
          matched = op;
          break;
        }
      }
      if (matched.empty()) return left;
      const Value right = (this->*next)();
      left = arithmetic(left, right, matched);
    }
  }
  Value bit_or() { return binary({"|"}, &Parser::bit_xor); }
  Value bit_xor() { return binary({"^"}, &Parser::bit_and); }
  Value bit_and() { return binary({"&"}, &Parser::equality); }
  Value equality() { return binary({"==", "!="}, &Parser::relational); }
  Value relational() { return binary({"<=", ">=", "<", ">"}, &Parser::shift); }
  Value shift() { return binary({"<<", ">>"}, &Parser::additive); }
  Value additive() { return binary({"+", "-"}, &Parser::multiplicative); }
  Value multiplicative() { return binary({"*", "/", "%"}, &Parser::unary); }
  Value unary() {
    if (accept("!")) {
      const Value v = unary();
      return v.known ? Value::truth(!v.nonzero()) : v;
    }
    if (accept("-")) {
      const Value v = unary();
      return v.known ? Value{true, v.is_unsigned, ~v.bits + 1} : v;
    }
    if (accept("+")) return unary();
    if (accept("~")) {
      const Value v = unary();
      return v.known ? Value{true, v.is_unsigned, ~v.bits} : v;
    }
    return primary();
  }
  Value primary() {
    if (m_at >= m_tokens.size()) throw Unsupported{};
    const Tok& t = m_tokens[m_at];
    if (accept("(")) {
      const Value v = conditional();
      expect(")");
      return v;
    }
    ++m_at;
    switch (t.kind) {
      case Tok::Kind::number: {
        const std::optional<Value> v = parse_number(t.text);
        if (!v) throw Unsupported{};
        return *v;
      }
      case Tok::Kind::unknown:
        return Value::unknown();
      case Tok::Kind::string:
        break;
      case Tok::Kind::ident: {
        if (t.text != "defined") throw Unsupported{};  // expansion left no other identifier
        const bool parenthesised = accept("(");
        if (m_at >= m_tokens.size() || m_tokens[m_at].kind != Tok::Kind::ident) throw Unsupported{};
        const Tri d = m_state.defined(m_tokens[m_at++].text);
        if (parenthesised) expect(")");
        return d == Tri::unknown ? Value::unknown() : Value::truth(d == Tri::yes);
      }
      case Tok::Kind::punct:
        break;
    }
    throw Unsupported{};
  }

  const Toks& m_tokens;
  const MacroState& m_state;
  std::size_t m_at = 0;
};

/// Skips a balanced parenthesised list that starts at tokens[at] (a '('); returns the index after it.
std::size_t skip_call(const Toks& tokens, std::size_t at) {
  int depth = 0;
  for (std::size_t i = at; i < tokens.size(); ++i) {
    if (tokens[i].kind != Tok::Kind::punct) continue;
    if (is_punct(tokens[i], "(")) ++depth;
    if (is_punct(tokens[i], ")") && --depth == 0) return i + 1;
  }
  throw Unsupported{};
}

}  // namespace

std::size_t NameHash::operator()(std::string_view name) const noexcept { return xxh3_64(name.data(), name.size()); }

struct MacroTokens {
  Toks tokens;  ///< frame -1: the expander gives them theirs
  /// A function-like macro's: per token, the parameter it names (-1 for none); and whether the body uses
  /// __VA_OPT__ (not followed here).
  std::vector<int> parameter;
  bool va_opt = false;
};

MacroState::MacroState(const MacroContext& context) : m_context(context), m_macros(context.initial) {}
MacroState::~MacroState() = default;

const MacroTokens* MacroState::tokens(const Macro& macro) const {
  auto [it, inserted] = m_tokens.try_emplace(&macro);
  if (inserted) {
    auto made = std::make_unique<MacroTokens>();
    if (tokenize(macro.value, made->tokens, -1)) {
      if (macro.state == Macro::State::function) {
        made->parameter.assign(made->tokens.size(), -1);
        for (std::size_t k = 0; k < made->tokens.size(); ++k) {
          const Tok& t = made->tokens[k];
          if (t.kind != Tok::Kind::ident) continue;
          if (t.text == "__VA_OPT__") made->va_opt = true;
          const auto p = std::find(macro.params.begin(), macro.params.end(), t.text);
          if (p != macro.params.end()) made->parameter[k] = static_cast<int>(p - macro.params.begin());
        }
      }
      it->second = std::move(made);
    }
  }
  return it->second.get();
}

void MacroState::define(const std::string& name, std::string_view value, bool function_like, bool certain) {
  Macro& macro = m_macros[name];
  m_tokens.erase(&macro);  // the value changes
  macro = {certain ? Macro::State::object : Macro::State::unknown, {}, {}, false};
  if (!certain) return;
  if (!function_like) {
    macro.value = std::string(value);
    return;
  }
  // "(a, b, ...) replacement": a parameter list kiln cannot read leaves the macro known as defined only.
  macro.state = Macro::State::defined;
  const std::size_t close = value.find(')');
  if (!value.starts_with("(") || close == std::string_view::npos) return;
  std::vector<std::string> params;
  bool variadic = false;
  std::string_view list = value.substr(1, close - 1);
  while (!list.empty()) {
    const std::size_t comma = list.find(',');
    std::string_view param = list.substr(0, comma);
    while (!param.empty() && (param.front() == ' ' || param.front() == '\t')) param.remove_prefix(1);
    while (!param.empty() && (param.back() == ' ' || param.back() == '\t')) param.remove_suffix(1);
    if (variadic) return;  // nothing may follow the ellipsis
    if (param == "...") {
      variadic = true;
      params.emplace_back("__VA_ARGS__");
    } else if (param.ends_with("...")) {
      variadic = true;
      param.remove_suffix(3);
      while (!param.empty() && (param.back() == ' ' || param.back() == '\t')) param.remove_suffix(1);
      params.emplace_back(param);
    } else {
      if (param.empty() || !std::all_of(param.begin(), param.end(), [](char c) { return is_ident_char(c); })) {
        if (param.empty() && comma == std::string_view::npos && params.empty()) break;  // "()"
        return;
      }
      params.emplace_back(param);
    }
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  std::string_view body = value.substr(close + 1);
  while (!body.empty() && (body.front() == ' ' || body.front() == '\t')) body.remove_prefix(1);
  macro.state = Macro::State::function;
  macro.value = std::string(body);
  macro.params = std::move(params);
  macro.variadic = variadic;
}

void MacroState::undefine(const std::string& name, bool certain) {
  Macro& macro = m_macros[name];
  m_tokens.erase(&macro);
  macro = {certain ? Macro::State::undefined : Macro::State::unknown, {}, {}, false};
}

const Macro& MacroState::find(std::string_view name) const {
  static const Macro kUnknown = make_macro(Macro::State::unknown, std::string());
  static const Macro kUndefined = make_macro(Macro::State::undefined, std::string());
  if (const auto it = m_macros.find(name); it != m_macros.end()) return it->second;
  if (m_context.plain_arch && name.starts_with("__CUDA_ARCH_FEAT_")) return kUndefined;
  if (m_context.ordinary_unknown || may_be_predefined(name)) return kUnknown;
  return kUndefined;
}

Tri MacroState::defined(std::string_view name) const {
  switch (find(name).state) {
    case Macro::State::undefined:
      return Tri::no;
    case Macro::State::object:
    case Macro::State::function:
    case Macro::State::defined:
      return Tri::yes;
    case Macro::State::unknown:
      break;
  }
  return Tri::unknown;
}

namespace {

/// Macro expansion of an #if expression, as the preprocessor does it as far as kiln follows it: object-like
/// and function-like macros (arguments expanded first, #, ## and __VA_ARGS__), rescanned with the rest of
/// the expression, a name not expanded again inside its own expansion. `defined X` is kept for the parser;
/// a call of a macro whose replacement is not known (or of __has_include and its kind) is unknown.
class Expander {
 public:
  Expander(const MacroState& state, std::pmr::memory_resource* memory)
      : m_state(state), m_memory(memory), m_frames(memory), m_pasted(memory), m_replacement(memory) {}

  /// Expands `work` into `out`. Throws Unsupported.
  void expand(Toks work, Toks& out) {
    for (std::size_t i = 0; i < work.size();) {
      Tok& t = work[i];
      if (t.kind != Tok::Kind::ident) {
        out.push_back(std::move(t));
        ++i;
        continue;
      }
      const bool called = i + 1 < work.size() && is_punct(work[i + 1], "(");
      if (t.text == "defined") {
        out.push_back(std::move(work[i++]));
        const std::size_t take = called ? 3 : 1;  // ( NAME ) or NAME
        for (std::size_t k = 0; k < take && i < work.size(); ++k) out.push_back(std::move(work[i++]));
        continue;
      }
      if (t.text == "true" || t.text == "false") {
        out.push_back({t.text == "true" ? "1" : "0", -1, Tok::Kind::number});
        ++i;
        continue;
      }
      const Macro& macro = m_state.find(t.text);
      const bool hidden = expanding(t.frame, t.text);
      if (!hidden && macro.state == Macro::State::object) {
        count();
        m_frames.emplace_back(t.text, t.frame);
        const MacroTokens* body = m_state.tokens(macro);  // views into the macro's value, which outlives the evaluation
        if (body == nullptr) throw Unsupported{};
        m_replacement.assign(body->tokens.begin(), body->tokens.end());
        for (Tok& r : m_replacement) r.frame = static_cast<int>(m_frames.size() - 1);
        splice(work, i, i + 1, m_replacement);
        continue;
      }
      if (!hidden && macro.state == Macro::State::function && called) {
        count();
        const std::size_t close = skip_call(work, i + 1);
        std::pmr::vector<Toks> args = arguments(work, i + 2, close - 1);
        const Toks replacement = substitute(t, macro, std::move(args));
        splice(work, i, close, replacement);
        continue;
      }
      // Not expanded (not a macro, not one kiln can expand, or hidden): kept as it is for the caller (an
      // argument may be pasted or call a macro later) and for finish().
      out.push_back(std::move(work[i++]));
    }
  }

  /// After expansion: a call left (of a macro kiln cannot expand, or of __has_include and its kind) is
  /// unknown; a name left is 0 when it is certainly not a macro, else unknown; `defined X` stays.
  /// (In place: each step writes no more tokens than it reads.)
  void finish(Toks& tokens) const {
    std::size_t out = 0;
    const auto emit = [&](const Tok& t) { tokens[out++] = t; };
    for (std::size_t i = 0; i < tokens.size();) {
      const Tok t = tokens[i];
      if (t.kind != Tok::Kind::ident) {
        emit(t);
        ++i;
        continue;
      }
      const bool called = i + 1 < tokens.size() && is_punct(tokens[i + 1], "(");
      if (t.text == "defined") {
        emit(tokens[i++]);
        const std::size_t take = called ? 3 : 1;
        for (std::size_t k = 0; k < take && i < tokens.size(); ++k) emit(tokens[i++]);
        continue;
      }
      if (called) {
        i = skip_call(tokens, i + 1);
        emit({{}, -1, Tok::Kind::unknown});
        continue;
      }
      const bool zero = m_state.find(t.text).state == Macro::State::undefined;
      emit(zero ? Tok{"0", -1, Tok::Kind::number} : Tok{{}, -1, Tok::Kind::unknown});
      ++i;
    }
    tokens.resize(out);
  }

 private:
  static constexpr std::size_t kMaxExpansions = 4096;


  void count() {
    if (++m_expansions > kMaxExpansions) throw Unsupported{};
  }
  [[nodiscard]] bool expanding(int frame, std::string_view name) const {
    for (; frame >= 0; frame = m_frames[static_cast<std::size_t>(frame)].second) {
      if (m_frames[static_cast<std::size_t>(frame)].first == name) return true;
    }
    return false;
  }
  /// work[begin, end) replaced by `replacement`.
  static void splice(Toks& work, std::size_t begin, std::size_t end, const Toks& replacement) {
    const auto at = work.begin() + static_cast<std::ptrdiff_t>(begin);
    const std::size_t common = std::min(end - begin, replacement.size());
    std::copy_n(replacement.begin(), common, at);
    if (common < end - begin) {
      work.erase(at + static_cast<std::ptrdiff_t>(common), work.begin() + static_cast<std::ptrdiff_t>(end));
    } else {
      work.insert(at + static_cast<std::ptrdiff_t>(common), replacement.begin() + static_cast<std::ptrdiff_t>(common),
                  replacement.end());
    }
  }
  /// The arguments between work[begin] and work[end] (the closing parenthesis), split at top-level commas.
  [[nodiscard]] std::pmr::vector<Toks> arguments(const Toks& work, std::size_t begin, std::size_t end) const {
    std::pmr::vector<Toks> args(1, m_memory);
    int depth = 0;
    for (std::size_t k = begin; k < end; ++k) {
      const Tok& t = work[k];
      if (is_punct(t, "(")) ++depth;
      if (is_punct(t, ")")) --depth;
      if (depth == 0 && is_punct(t, ",")) {
        args.emplace_back();
      } else {
        args.back().push_back(t);
      }
    }
    return args;
  }

  Toks substitute(const Tok& call, const Macro& macro, std::pmr::vector<Toks> args) {
    const std::size_t named = macro.params.size() - (macro.variadic ? 1 : 0);
    if (args.size() == 1 && args[0].empty() && macro.params.empty()) args.clear();  // F()
    if (macro.variadic) {
      if (args.size() < named) {
        if (args.size() + 1 == macro.params.size() || (args.empty() && named == 0)) {
          args.resize(macro.params.size());
        } else {
          throw Unsupported{};
        }
      }
      Toks rest(m_memory);  // the variable arguments, commas kept
      for (std::size_t k = named; k < args.size(); ++k) {
        if (k > named) rest.push_back({",", -1, Tok::Kind::punct});
        rest.insert(rest.end(), args[k].begin(), args[k].end());
      }
      args.resize(named);
      args.push_back(std::move(rest));
    } else if (args.size() != macro.params.size()) {
      if (!(macro.params.size() == 1 && args.empty())) throw Unsupported{};
      args.resize(1);
    }
    m_frames.emplace_back(call.text, call.frame);
    const int frame = static_cast<int>(m_frames.size() - 1);
    const MacroTokens* lexed = m_state.tokens(macro);
    if (lexed == nullptr) throw Unsupported{};
    if (lexed->va_opt) throw Unsupported{};
    const Toks& body = lexed->tokens;  // frame -1: each token the body gives takes `frame` below
    std::size_t argument_tokens = 0;
    for (const Toks& arg : args) argument_tokens += arg.size();
    const auto param = [&](std::size_t k) -> std::optional<std::size_t> {  // the parameter body[k] names
      const int p = lexed->parameter[k];
      return p < 0 ? std::nullopt : std::optional<std::size_t>(static_cast<std::size_t>(p));
    };
    std::pmr::vector<std::optional<Toks>> expanded(args.size(), m_memory);
    const auto expanded_arg = [&](std::size_t k) -> const Toks& {
      if (!expanded[k]) {
        Toks out(m_memory);
        expand(Toks(args[k], m_memory), out);
        expanded[k] = std::move(out);
      }
      return *expanded[k];
    };
    Toks out(m_memory);
    out.reserve(body.size() + 2 * argument_tokens);
    bool placemarker = false;  // the last operand pasted was an empty argument
    for (std::size_t k = 0; k < body.size(); ++k) {
      const Tok& t = body[k];
      if (is_punct(t, "#")) {  // stringizing: a string literal, which no #if takes as a number
        if (k + 1 >= body.size() || !param(k + 1)) throw Unsupported{};
        out.push_back({"\"\"", frame, Tok::Kind::string});
        ++k;
        placemarker = false;
        continue;
      }
      if (is_punct(t, "##")) {
        if (k + 1 >= body.size() || (out.empty() && !placemarker)) throw Unsupported{};
        const Tok& next = body[++k];
        Toks right(m_memory);
        if (const auto p = param(k)) {
          right = args[*p];
        } else {
          right = {next};
        }
        if (right.empty()) continue;  // pasting a placemarker: the left operand stays
        if (placemarker || out.empty()) {
          placemarker = false;
          for (Tok& r : right) out.push_back({r.text, frame, r.kind});
          continue;
        }
        std::pmr::string& merged = m_pasted.emplace_front(out.back().text);
        merged += right.front().text;
        Toks pasted(m_memory);
        if (!tokenize(merged, pasted, frame) || pasted.size() != 1) throw Unsupported{};
        out.back() = std::move(pasted.front());
        for (std::size_t r = 1; r < right.size(); ++r) out.push_back({right[r].text, frame, right[r].kind});
        continue;
      }
      if (const auto p = param(k)) {
        const bool pasted_next = k + 1 < body.size() && is_punct(body[k + 1], "##");
        if (pasted_next) {
          for (const Tok& a : args[*p]) out.push_back(a);
          placemarker = args[*p].empty();
        } else {
          for (const Tok& a : expanded_arg(*p)) out.push_back(a);
          placemarker = false;
        }
        continue;
      }
      out.push_back({t.text, frame, t.kind});
      placemarker = false;
    }
    return out;
  }

  const MacroState& m_state;
  std::pmr::memory_resource* m_memory;
  std::pmr::vector<std::pair<std::string_view, int>> m_frames;  ///< a macro expanded, and the frame it was expanded in
  std::pmr::forward_list<std::pmr::string> m_pasted;  ///< the texts of tokens made by ##, which tokens view (never moved)
  Toks m_replacement;                                 ///< an object-like macro's tokens, before they are spliced in
  std::size_t m_expansions = 0;
};

}  // namespace

Tri MacroState::evaluate(std::string_view expression) const {
  try {
    // The state's scratch first (the same memory every time: warm, and no call to the allocator), then the heap.
    if (!m_scratch) m_scratch = std::make_unique_for_overwrite<std::byte[]>(kScratchBytes);
    std::pmr::monotonic_buffer_resource arena(m_scratch.get(), kScratchBytes);
    Toks work(&arena);
    work.reserve(32);
    if (!tokenize(expression, work, -1)) return Tri::unknown;
    Toks out(&arena);
    out.reserve(32);
    Expander expander(*this, &arena);
    expander.expand(std::move(work), out);
    expander.finish(out);
    const Value v = Parser(out, *this).run();
    if (!v.known) return Tri::unknown;
    return v.nonzero() ? Tri::yes : Tri::no;
  } catch (const Unsupported&) {
    return Tri::unknown;
  }
}

}  // namespace kiln::cache::detail
