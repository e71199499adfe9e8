#include "conditions.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <deque>
#include <vector>

namespace kiln::cache::detail {
namespace {

bool is_digit(int c) { return c >= '0' && c <= '9'; }
bool is_ident_start(int c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '$' || c >= 0x80;
}
bool is_ident_char(int c) { return is_ident_start(c) || is_digit(c); }

/// NVRTC's predefined macros that decide branches in runtime headers, as NVRTC 13.0 answers them for
/// any -arch and -std (a compiler that answers otherwise costs a retry, never a wrong binary).
constexpr std::string_view kNvrtcUndefined[] = {
    "__NVCC__",     "__GNUC__",    "__GNUC_MINOR__",  "__GNUG__",     "__clang__",   "_MSC_VER",     "_WIN32",
    "_WIN64",       "__NVCOMPILER", "__INTEL_COMPILER", "__APPLE__",  "__ibmxl__",   "__CUDA__",     "__HIP__",
    "__HIPCC__",    "__HIPCC_RTC__", "__HIP_DEVICE_COMPILE__", "_NVHPC_CUDA", "__ANDROID__", "__FreeBSD__",
    "__MINGW32__",  "__CYGWIN__",  "__SYCL_DEVICE_ONLY__", "_OPENMP", "__PGI",      "__ICC",        "__IBMCPP__",
    "_LIBCPP_VERSION", "__GLIBCXX__", "__x86_64__",  "__aarch64__"};

Macro make_macro(Macro::State state, std::string value) {
  Macro m;
  m.state = state;
  m.value = std::move(value);
  return m;
}

/// The feature-test macros NVRTC 13.0 defines, for -std=c++17 and -std=c++20 ("": not defined), as it
/// answered them (bench-free: a compile with #pragma message for each). Taken for an NVRTC 13.x only; a
/// name not listed, or another version, is unknown.
struct FeatureMacro {
  std::string_view name, cxx17, cxx20;
};
constexpr FeatureMacro kNvrtc13Features[] = {
    {"__cpp_variable_templates", "201304L", "201304L"},
    {"__cpp_inline_variables", "201606L", "201606L"},
    {"__cpp_concepts", "", "202002L"},
    {"__cpp_if_constexpr", "201606L", "201606L"},
    {"__cpp_fold_expressions", "201603L", "201603L"},
    {"__cpp_deduction_guides", "201703L", "201907L"},
    {"__cpp_noexcept_function_type", "201510L", "201510L"},
    {"__cpp_nontype_template_parameter_auto", "201606L", "201606L"},
    {"__cpp_impl_three_way_comparison", "", "201907L"},
    {"__cpp_constexpr", "201603L", "201907L"},
    {"__cpp_aggregate_bases", "201603L", "201603L"},
    {"__cpp_structured_bindings", "201606L", "201606L"},
    {"__cpp_conditional_explicit", "", "201806L"},
    {"__cpp_consteval", "", "201811L"},
    {"__cpp_char8_t", "", "201811L"},
    {"__cpp_lib_is_constant_evaluated", "", ""},
    {"__cpp_exceptions", "199711L", "199711L"},
    {"__cpp_rtti", "199711L", "199711L"},
    {"__cpp_sized_deallocation", "201309L", "201309L"},
    {"__cpp_aligned_new", "201606L", "201606L"},
    {"__cpp_nontype_template_args", "201411L", "201911L"},
    {"__cpp_coroutines", "", ""},
    {"__cpp_impl_coroutine", "", ""},
    {"__cpp_decltype_auto", "201304L", "201304L"},
    {"__cpp_return_type_deduction", "201304L", "201304L"},
    {"__cpp_generic_lambdas", "201304L", "201707L"},
    {"__cpp_init_captures", "201304L", "201803L"},
    {"__cpp_lambdas", "200907L", "200907L"},
    {"__cpp_range_based_for", "201603L", "201603L"},
    {"__cpp_rvalue_references", "200610L", "200610L"},
    {"__cpp_variadic_templates", "200704L", "200704L"},
    {"__cpp_alias_templates", "200704L", "200704L"},
    {"__cpp_attributes", "200809L", "200809L"},
    {"__cpp_binary_literals", "201304L", "201304L"},
    {"__cpp_digit_separators", "", ""},
    {"__cpp_static_assert", "201411L", "201411L"},
    {"__cpp_unicode_characters", "200704L", "200704L"},
    {"__cpp_unicode_literals", "200710L", "200710L"},
    {"__cpp_user_defined_literals", "200809L", "200809L"},
    {"__cpp_delegating_constructors", "200604L", "200604L"},
    {"__cpp_inheriting_constructors", "201511L", "201511L"},
    {"__cpp_ref_qualifiers", "200710L", "200710L"},
    {"__cpp_decltype", "200707L", "200707L"},
    {"__cpp_initializer_lists", "200806L", "200806L"},
    {"__cpp_nsdmi", "200809L", "200809L"},
    {"__cpp_raw_strings", "200710L", "200710L"},
    {"__cpp_designated_initializers", "", "201707L"},
    {"__cpp_constinit", "", "201907L"},
    {"__cpp_hex_float", "201603L", "201603L"},
    {"__cpp_guaranteed_copy_elision", "201606L", "201606L"},
    {"__cpp_template_template_args", "201611L", "201611L"},
    {"__cpp_capture_star_this", "201603L", "201603L"},
    {"__cpp_enumerator_attributes", "201411L", "201411L"},
    {"__cpp_namespace_attributes", "201411L", "201411L"},
    {"__cpp_using_enum", "", "201907L"},
    {"__cpp_aggregate_paren_init", "", "201902L"},
    {"__cpp_constexpr_dynamic_alloc", "", "201907L"},
    {"__cpp_explicit_this_parameter", "", ""},
    {"__cpp_size_t_suffix", "", ""},
    {"__cpp_if_consteval", "", ""},
    {"__cpp_multidimensional_subscript", "", ""},
    {"__cpp_static_call_operator", "", ""},
};

/// A token of an #if expression. Its text is a view: into the expression, a macro's replacement (the
/// macro state does not change while an expression is evaluated), a literal, or the Expander's own
/// storage of pasted tokens. So tokens are copied and spliced without allocating.
struct Tok {
  enum class Kind : unsigned char { number, ident, punct, unknown, string };
  std::string_view text;
  int frame = -1;  ///< the macro expansion it came from (ExpansionFrames), -1 for the expression itself
  Kind kind = Kind::punct;
};

/// Splits an #if expression into tokens. False for something not lexed here (a string literal).
bool tokenize(std::string_view text, std::vector<Tok>& out, int frame) {
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
  Parser(const std::vector<Tok>& tokens, const MacroState& state) : m_tokens(tokens), m_state(state) {}

  Value run() {
    Value v = conditional();
    if (m_at != m_tokens.size()) throw Unsupported{};
    return v;
  }

 private:
  bool accept(std::string_view punct) {
    if (m_at < m_tokens.size() && m_tokens[m_at].kind == Tok::Kind::punct && m_tokens[m_at].text == punct) {
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

  const std::vector<Tok>& m_tokens;
  const MacroState& m_state;
  std::size_t m_at = 0;
};

/// Skips a balanced parenthesised list that starts at tokens[at] (a '('); returns the index after it.
std::size_t skip_call(const std::vector<Tok>& tokens, std::size_t at) {
  int depth = 0;
  for (std::size_t i = at; i < tokens.size(); ++i) {
    if (tokens[i].kind != Tok::Kind::punct) continue;
    if (tokens[i].text == "(") ++depth;
    if (tokens[i].text == ")" && --depth == 0) return i + 1;
  }
  throw Unsupported{};
}

}  // namespace

bool reserved_macro_name(std::string_view name) {
  return name.size() >= 2 && name[0] == '_' && (name[1] == '_' || (name[1] >= 'A' && name[1] <= 'Z'));
}

bool may_be_predefined(std::string_view name) {
  // NVRTC's own preinclude (the runtime header it reads before the source) defines ordinary names too;
  // measured on NVRTC 13.0: CUDART_VERSION, CUDART_CB, CUDARTAPI, CUDART_DEVICE, NV_IF_TARGET, NV_IS_DEVICE,
  // NV_PROVIDES_SM_90, NULL, assert, va_start. Taken as undefined, CCCL's _CCCL_CTK_AT_LEAST (CUDART_VERSION)
  // sent its half-precision headers to kiln-untaken and every CCCL compile to its retry.
  static constexpr std::string_view kOrdinaryPrefixes[] = {"CUDART", "CUDA_", "NV_", "va_"};
  if (name == "NULL" || name == "assert" ||
      std::any_of(std::begin(kOrdinaryPrefixes), std::end(kOrdinaryPrefixes),
                  [&](std::string_view prefix) { return name.starts_with(prefix); })) {
    return true;
  }
  if (!reserved_macro_name(name)) return false;
  if (name.size() > 4 && name.ends_with("__")) return true;  // __x__: the compilers' own form
  // The prefixes of what NVRTC (EDG), clang (HIPRTC), GCC and MSVC predefine otherwise.
  static constexpr std::string_view kPrefixes[] = {
      "__CUDA", "__NV", "__EDG", "__cpp_", "__STDC", "__SIZEOF", "__INT", "__UINT", "__FLT", "__DBL", "__LDBL",
      "__GNU", "__GCC", "__GXX", "__clang", "__has_", "_M_", "_MSC", "_MSVC", "_WIN", "_CPP", "__x86", "__amd64",
      "__i386", "__arm", "__ARM", "__aarch64", "__AARCH64", "__PTRDIFF", "__SIZE_", "__WCHAR", "__WINT", "__CHAR",
      "__SCHAR", "__SHRT", "__LONG", "__ORDER_", "__BYTE_ORDER", "__FLOAT_WORD", "__OPTIMIZE", "__NO_INLINE",
      "__ELF", "__linux", "__unix", "__APPLE", "__MACH", "_OPENMP", "__OPENMP", "__BIGGEST", "__VERSION",
      "__BASE_FILE", "__TIME", "__DATE", "__FILE", "__LINE", "__COUNTER", "__INCLUDE_LEVEL", "_LP64", "_ILP32",
      "__LP64", "__ILP32", "__PIC", "__pic", "__PIE", "__pie", "__FAST_MATH", "__FINITE_MATH", "__USE_FAST_MATH",
      "__EXCEPTIONS", "__DEPRECATED", "__REGISTER_PREFIX", "__USER_LABEL_PREFIX", "__STRICT_ANSI", "__SSE",
      "__AVX", "__MMX", "__FMA", "__HIP", "__AMDGCN", "__AMDGPU", "__gfx", "__OPENCL", "__SPIR", "__SYCL",
      "__INTEL", "__ICC", "__PGI", "__ibm", "__IBM", "__SUNPRO", "__MINGW", "__CYGWIN", "__ANDROID", "__FreeBSD",
      "__OBJC", "__ATOMIC", "__MEMORY_SCOPE", "__OPENCL", "__ROUNDING", "__SANITIZE", "__SEH", "__CET",
      "__GLIBC", "_GLIBCXX", "_LIBCPP", "__BFLT", "__FP", "__DEC", "__HAVE", "__POWER", "__PPC", "__riscv",
      "__wasm", "__EMSCRIPTEN", "__WORDSIZE", "__code_model", "__k8", "__tune", "__SEG", "__FXSR", "__POPCNT",
      "__F16C", "__BMI", "__LZCNT", "__PRFCHW", "__RDRND", "__RDSEED", "__ADX", "__CLFLUSHOPT", "__XSAVE",
      "__SHA", "__AES", "__PCLMUL", "__LAHF", "__MOVBE", "__CRC32", "__VPCLMUL", "__VAES", "__GFNI"};
  // Looked up for every name a condition meets that no text defined: by the first character after the
  // leading underscores, which a name and any prefix of it share (each prefix has one), not all ~150.
  static const std::array<std::vector<std::string_view>, 256> kByLead = [] {
    std::array<std::vector<std::string_view>, 256> by_lead;
    for (const std::string_view prefix : kPrefixes) {
      by_lead[static_cast<unsigned char>(prefix[prefix.find_first_not_of('_')])].push_back(prefix);
    }
    return by_lead;
  }();
  const std::size_t lead = name.find_first_not_of('_');
  if (lead == std::string_view::npos) return false;
  const std::vector<std::string_view>& candidates = kByLead[static_cast<unsigned char>(name[lead])];
  return std::any_of(candidates.begin(), candidates.end(), [&](std::string_view prefix) { return name.starts_with(prefix); });
}

MacroContext MacroContext::from_flags(std::span<const std::string> flags, Vendor vendor, std::string_view compiler) {
  MacroContext context;
  std::optional<std::string> standard, arch;
  std::vector<std::pair<std::string, std::optional<std::string>>> given;  // in order: name, value (nullopt: -U)
  const auto definition = [&](std::string_view body) {
    const std::size_t equals = body.find('=');
    std::string name(body.substr(0, equals));
    given.emplace_back(std::move(name), equals == std::string_view::npos ? std::string("1")
                                                                         : std::string(body.substr(equals + 1)));
  };
  for (const std::string& flag : flags) {
    const std::string_view f = flag;
    if (f == "-D" || f == "-U" || f == "--define-macro" || f == "--undefine-macro" || f.starts_with("-imacros") ||
        f.starts_with("--pre-include") || f == "-include") {
      context.ordinary_unknown = true;  // a definition in the next argument, or a file's: not read here
    } else if (f.starts_with("--define-macro=")) {
      definition(f.substr(15));
    } else if (f.starts_with("--undefine-macro=")) {
      given.emplace_back(std::string(f.substr(17)), std::nullopt);
    } else if (f.starts_with("-D")) {
      definition(f.substr(2));
    } else if (f.starts_with("-U")) {
      given.emplace_back(std::string(f.substr(2)), std::nullopt);
    } else if (f.starts_with("-std=") || f.starts_with("--std=")) {
      standard = std::string(f.substr(f.find('=') + 1));
    } else if (f.starts_with("-arch=") || f.starts_with("--gpu-architecture=")) {
      arch = std::string(f.substr(f.find('=') + 1));
    }
  }
  if (vendor == Vendor::cuda) {
    for (const std::string_view name : kNvrtcUndefined) context.initial[std::string(name)] = make_macro(Macro::State::undefined, std::string());
    context.initial["__CUDACC__"] = make_macro(Macro::State::defined, std::string());
    context.initial["__CUDACC_RTC__"] = make_macro(Macro::State::defined, std::string());
    Macro cplusplus = make_macro(Macro::State::defined, std::string());
    if (standard) {
      static constexpr std::pair<std::string_view, std::string_view> kStandards[] = {
          {"c++11", "201103L"}, {"c++14", "201402L"}, {"c++17", "201703L"}, {"c++20", "202002L"}};
      for (const auto& [name, value] : kStandards) {
        if (*standard == name) cplusplus = make_macro(Macro::State::object, std::string(value));
      }
    }
    context.initial["__cplusplus"] = cplusplus;
    if (compiler.starts_with("nvrtc 13.") && standard && (*standard == "c++17" || *standard == "c++20")) {
      for (const FeatureMacro& feature : kNvrtc13Features) {
        const std::string_view value = *standard == "c++17" ? feature.cxx17 : feature.cxx20;
        context.initial[std::string(feature.name)] =
            value.empty() ? make_macro(Macro::State::undefined, std::string())
                          : make_macro(Macro::State::object, std::string(value));
      }
    }
    Macro cuda_arch = make_macro(Macro::State::defined, std::string());
    if (arch) {
      // sm_90, sm_90a, compute_80, lto_100f: the digits times ten.
      const std::size_t underscore = arch->find('_');
      if (underscore != std::string::npos) {
        std::size_t end = underscore + 1;
        while (end < arch->size() && is_digit((*arch)[end])) ++end;
        const std::string digits = arch->substr(underscore + 1, end - underscore - 1);
        if (!digits.empty() && digits.size() <= 4 && digits[0] != '0') {
          cuda_arch = make_macro(Macro::State::object, digits + "0");
          if (end == arch->size()) {  // no a/f suffix: no arch-specific or family-specific macros (NVRTC 13.0)
            context.plain_arch = true;
            context.initial["__CUDA_ARCH_SPECIFIC__"] = make_macro(Macro::State::undefined, std::string());
            context.initial["__CUDA_ARCH_FAMILY_SPECIFIC__"] = make_macro(Macro::State::undefined, std::string());
          }
        }
      }
    }
    context.initial["__CUDA_ARCH__"] = cuda_arch;
    // "nvrtc 13.0": __CUDACC_VER_MAJOR__ 13, __CUDACC_VER_MINOR__ 0 (NVRTC defines them from its version).
    if (compiler.starts_with("nvrtc ")) {
      const std::string_view version = compiler.substr(6);
      const std::size_t dot = version.find('.');
      const std::string_view major = version.substr(0, dot);
      std::string_view minor = dot == std::string_view::npos ? std::string_view() : version.substr(dot + 1);
      minor = minor.substr(0, minor.find_first_not_of("0123456789"));
      const auto digits = [](std::string_view v) {
        return !v.empty() && v.size() <= 3 && std::all_of(v.begin(), v.end(), [](char c) { return is_digit(c); });
      };
      if (digits(major) && digits(minor)) {
        context.initial["__CUDACC_VER_MAJOR__"] = make_macro(Macro::State::object, std::string(major));
        context.initial["__CUDACC_VER_MINOR__"] = make_macro(Macro::State::object, std::string(minor));
        // NVRTC's preinclude defines the runtime's version too: 13000 for NVRTC 13.0 (measured).
        context.initial["CUDART_VERSION"] = make_macro(
            Macro::State::object, std::to_string(std::stoi(std::string(major)) * 1000 + std::stoi(std::string(minor)) * 10));
      }
    }
  }
  for (auto& [name, value] : given) {
    if (value) {
      context.initial[name] = make_macro(Macro::State::object, std::move(*value));
    } else {
      context.initial[name] = make_macro(Macro::State::undefined, std::string());
    }
  }
  return context;
}

std::string MacroContext::signature() const {
  std::vector<std::string> lines;
  lines.reserve(initial.size());
  for (const auto& [name, macro] : initial) {
    lines.push_back(fmt::format("{}\x1f{}\x1f{}", name, static_cast<int>(macro.state), macro.value));
  }
  std::sort(lines.begin(), lines.end());
  std::string out = ordinary_unknown ? "ordinary-unknown\n" : "ordinary-undefined\n";
  if (plain_arch) out += "plain-arch\n";
  for (const std::string& line : lines) {
    out += line;
    out += '\n';
  }
  return out;
}

void MacroState::define(const std::string& name, std::string_view value, bool function_like, bool certain) {
  Macro& macro = m_macros[name];
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
  m_macros[name] = {certain ? Macro::State::undefined : Macro::State::unknown, {}, {}, false};
}

const Macro& MacroState::find(std::string_view name) const {
  static const Macro kUnknown = make_macro(Macro::State::unknown, std::string());
  static const Macro kUndefined = make_macro(Macro::State::undefined, std::string());
  if (const auto it = m_macros.find(name); it != m_macros.end()) return it->second;
  if (const auto it = m_context.initial.find(name); it != m_context.initial.end()) return it->second;
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
  explicit Expander(const MacroState& state) : m_state(state) {}

  /// Expands `work` into `out`. Throws Unsupported.
  void expand(std::vector<Tok> work, std::vector<Tok>& out) {
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
        std::vector<Tok> replacement;  // views into the macro's value, which outlives the evaluation
        if (!tokenize(macro.value, replacement, static_cast<int>(m_frames.size() - 1))) throw Unsupported{};
        splice(work, i, i + 1, std::move(replacement));
        continue;
      }
      if (!hidden && macro.state == Macro::State::function && called) {
        count();
        const std::size_t close = skip_call(work, i + 1);
        std::vector<std::vector<Tok>> args = arguments(work, i + 2, close - 1);
        std::vector<Tok> replacement = substitute(t, macro, std::move(args));
        splice(work, i, close, std::move(replacement));
        continue;
      }
      // Not expanded (not a macro, not one kiln can expand, or hidden): kept as it is for the caller (an
      // argument may be pasted or call a macro later) and for finish().
      out.push_back(std::move(work[i++]));
    }
  }

  /// After expansion: a call left (of a macro kiln cannot expand, or of __has_include and its kind) is
  /// unknown; a name left is 0 when it is certainly not a macro, else unknown; `defined X` stays.
  [[nodiscard]] std::vector<Tok> finish(std::vector<Tok> tokens) const {
    std::vector<Tok> out;
    for (std::size_t i = 0; i < tokens.size();) {
      Tok& t = tokens[i];
      if (t.kind != Tok::Kind::ident) {
        out.push_back(std::move(t));
        ++i;
        continue;
      }
      const bool called = i + 1 < tokens.size() && is_punct(tokens[i + 1], "(");
      if (t.text == "defined") {
        out.push_back(std::move(tokens[i++]));
        const std::size_t take = called ? 3 : 1;
        for (std::size_t k = 0; k < take && i < tokens.size(); ++k) out.push_back(std::move(tokens[i++]));
        continue;
      }
      if (called) {
        out.push_back({{}, -1, Tok::Kind::unknown});
        i = skip_call(tokens, i + 1);
        continue;
      }
      const bool zero = m_state.find(t.text).state == Macro::State::undefined;
      out.push_back(zero ? Tok{"0", -1, Tok::Kind::number} : Tok{{}, -1, Tok::Kind::unknown});
      ++i;
    }
    return out;
  }

 private:
  static constexpr std::size_t kMaxExpansions = 4096;

  static bool is_punct(const Tok& t, std::string_view text) { return t.kind == Tok::Kind::punct && t.text == text; }

  void count() {
    if (++m_expansions > kMaxExpansions) throw Unsupported{};
  }
  [[nodiscard]] bool expanding(int frame, std::string_view name) const {
    for (; frame >= 0; frame = m_frames[static_cast<std::size_t>(frame)].second) {
      if (m_frames[static_cast<std::size_t>(frame)].first == name) return true;
    }
    return false;
  }
  static void splice(std::vector<Tok>& work, std::size_t begin, std::size_t end, std::vector<Tok> replacement) {
    work.erase(work.begin() + static_cast<std::ptrdiff_t>(begin), work.begin() + static_cast<std::ptrdiff_t>(end));
    work.insert(work.begin() + static_cast<std::ptrdiff_t>(begin), std::make_move_iterator(replacement.begin()),
                std::make_move_iterator(replacement.end()));
  }
  /// The arguments between work[begin] and work[end] (the closing parenthesis), split at top-level commas.
  static std::vector<std::vector<Tok>> arguments(const std::vector<Tok>& work, std::size_t begin, std::size_t end) {
    std::vector<std::vector<Tok>> args(1);
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

  std::vector<Tok> substitute(const Tok& call, const Macro& macro, std::vector<std::vector<Tok>> args) {
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
      std::vector<Tok> rest;  // the variable arguments, commas kept
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
    std::vector<Tok> body;
    if (!tokenize(macro.value, body, frame)) throw Unsupported{};
    const auto param = [&](const Tok& t) -> std::optional<std::size_t> {
      if (t.kind != Tok::Kind::ident) return std::nullopt;
      if (t.text == "__VA_OPT__") throw Unsupported{};
      for (std::size_t k = 0; k < macro.params.size(); ++k) {
        if (macro.params[k] == t.text) return k;
      }
      return std::nullopt;
    };
    std::vector<std::optional<std::vector<Tok>>> expanded(args.size());
    const auto expanded_arg = [&](std::size_t k) -> const std::vector<Tok>& {
      if (!expanded[k]) {
        std::vector<Tok> out;
        expand(args[k], out);
        expanded[k] = std::move(out);
      }
      return *expanded[k];
    };
    std::vector<Tok> out;
    bool placemarker = false;  // the last operand pasted was an empty argument
    for (std::size_t k = 0; k < body.size(); ++k) {
      const Tok& t = body[k];
      if (is_punct(t, "#")) {  // stringizing: a string literal, which no #if takes as a number
        if (k + 1 >= body.size() || !param(body[k + 1])) throw Unsupported{};
        out.push_back({"\"\"", frame, Tok::Kind::string});
        ++k;
        placemarker = false;
        continue;
      }
      if (is_punct(t, "##")) {
        if (k + 1 >= body.size() || (out.empty() && !placemarker)) throw Unsupported{};
        const Tok& next = body[++k];
        std::vector<Tok> right;
        if (const auto p = param(next)) {
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
        const std::string& merged = m_pasted.emplace_back(std::string(out.back().text) + std::string(right.front().text));
        std::vector<Tok> pasted;
        if (!tokenize(merged, pasted, frame) || pasted.size() != 1) throw Unsupported{};
        out.back() = std::move(pasted.front());
        for (std::size_t r = 1; r < right.size(); ++r) out.push_back({right[r].text, frame, right[r].kind});
        continue;
      }
      if (const auto p = param(t)) {
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
      out.push_back(t);
      placemarker = false;
    }
    return out;
  }

  const MacroState& m_state;
  std::vector<std::pair<std::string_view, int>> m_frames;  ///< a macro expanded, and the frame it was expanded in
  std::deque<std::string> m_pasted;  ///< the texts of tokens made by ##, which tokens view (a deque: they never move)
  std::size_t m_expansions = 0;
};

}  // namespace

Tri MacroState::evaluate(std::string_view expression) const {
  try {
    std::vector<Tok> work;
    if (!tokenize(expression, work, -1)) return Tri::unknown;
    std::vector<Tok> out;
    Expander expander(*this);
    expander.expand(std::move(work), out);
    out = expander.finish(std::move(out));
    const Value v = Parser(out, *this).run();
    if (!v.known) return Tri::unknown;
    return v.nonzero() ? Tri::yes : Tri::no;
  } catch (const Unsupported&) {
    return Tri::unknown;
  }
}

}  // namespace kiln::cache::detail
