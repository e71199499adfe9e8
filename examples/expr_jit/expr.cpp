#include "expr.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace expr_jit {

struct Function {
  std::string_view name;
  std::size_t arity;
  std::string_view c_name;  ///< the device function (CUDA and HIP share these names)
  float (*cpu)(float, float);
};

namespace {

// The CPU twins use the same float functions as the device code.
constexpr Function kFunctions[] = {
    {"sin", 1, "sinf", [](float a, float) { return std::sin(a); }},
    {"cos", 1, "cosf", [](float a, float) { return std::cos(a); }},
    {"tan", 1, "tanf", [](float a, float) { return std::tan(a); }},
    {"exp", 1, "expf", [](float a, float) { return std::exp(a); }},
    {"log", 1, "logf", [](float a, float) { return std::log(a); }},
    {"sqrt", 1, "sqrtf", [](float a, float) { return std::sqrt(a); }},
    {"abs", 1, "fabsf", [](float a, float) { return std::fabs(a); }},
    {"fabs", 1, "fabsf", [](float a, float) { return std::fabs(a); }},
    {"tanh", 1, "tanhf", [](float a, float) { return std::tanh(a); }},
    {"pow", 2, "powf", [](float a, float b) { return std::pow(a, b); }},
    {"min", 2, "fminf", [](float a, float b) { return std::fmin(a, b); }},
    {"max", 2, "fmaxf", [](float a, float b) { return std::fmax(a, b); }},
};

const Function* find_function(std::string_view name) noexcept {
  for (const Function& f : kFunctions) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

std::string function_list() {
  std::string list;
  for (const Function& f : kFunctions) {
    if (!list.empty()) list += ' ';
    list += f.name;
  }
  return list;
}

struct Token {
  enum class Kind : std::uint8_t { number, name, symbol, end };
  Kind kind = Kind::end;
  std::string_view text;
  std::size_t column = 0;  // 1-based
};

class Parser {
 public:
  explicit Parser(std::string_view text) : m_text(text) { advance(); }

  Statement statement() {
    Statement result;
    result.text = std::string(m_text);
    m_inputs = &result.inputs;
    // "name = ..." names the output; a lone expression writes "out".
    if (m_token.kind == Token::Kind::name) {
      const std::size_t save_position = m_position;
      const Token save = m_token;
      advance();
      if (is_symbol('=')) {
        result.output = std::string(save.text);
        advance();
      } else {
        m_position = save_position;
        m_token = save;
      }
    }
    if (m_token.kind == Token::Kind::end) throw ParseError("expected an expression", m_token.column);
    result.root = expression();
    if (m_token.kind != Token::Kind::end) {
      throw ParseError(is_symbol(')') ? "unbalanced ')'"
                                      : "expected an operator or the end, found '" + std::string(m_token.text) + "'",
                       m_token.column);
    }
    return result;
  }

 private:
  [[nodiscard]] bool is_symbol(char c) const noexcept {
    return m_token.kind == Token::Kind::symbol && m_token.text.size() == 1 && m_token.text[0] == c;
  }

  void advance() {
    while (m_position < m_text.size() && std::isspace(static_cast<unsigned char>(m_text[m_position])) != 0) {
      ++m_position;
    }
    const std::size_t start = m_position;
    m_token.column = start + 1;
    if (start == m_text.size()) {
      m_token.kind = Token::Kind::end;
      m_token.text = {};
      return;
    }
    const auto at = [&](std::size_t i) { return i < m_text.size() ? m_text[i] : '\0'; };
    const auto digit = [](char c) { return c >= '0' && c <= '9'; };
    const char c = m_text[start];
    if (digit(c) || (c == '.' && digit(at(start + 1)))) {
      std::size_t i = start;
      while (digit(at(i))) ++i;
      if (at(i) == '.') {
        ++i;
        while (digit(at(i))) ++i;
      }
      if (at(i) == 'e' || at(i) == 'E') {
        std::size_t j = i + 1;
        if (at(j) == '+' || at(j) == '-') ++j;
        if (!digit(at(j))) throw ParseError("malformed number: expected digits after the exponent", j + 1);
        while (digit(at(j))) ++j;
        i = j;
      }
      if (std::isalpha(static_cast<unsigned char>(at(i))) != 0 || at(i) == '_' || at(i) == '.') {
        throw ParseError(std::string("malformed number: unexpected '") + at(i) + "'", i + 1);
      }
      m_token.kind = Token::Kind::number;
      m_token.text = m_text.substr(start, i - start);
      m_position = i;
      return;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) != 0 || c == '_') {
      std::size_t i = start;
      while (std::isalnum(static_cast<unsigned char>(at(i))) != 0 || at(i) == '_') ++i;
      m_token.kind = Token::Kind::name;
      m_token.text = m_text.substr(start, i - start);
      m_position = i;
      return;
    }
    if (c == '+' || c == '-' || c == '*' || c == '/' || c == '(' || c == ')' || c == ',' || c == '=') {
      m_token.kind = Token::Kind::symbol;
      m_token.text = m_text.substr(start, 1);
      m_position = start + 1;
      return;
    }
    throw ParseError(std::string("unexpected character '") + c + "'", start + 1);
  }

  std::unique_ptr<Node> make(Node::Kind kind, std::size_t column) {
    auto node = std::make_unique<Node>();
    node->kind = kind;
    node->column = column;
    return node;
  }

  std::unique_ptr<Node> binary(Node::Kind kind, std::unique_ptr<Node> left, std::unique_ptr<Node> right) {
    auto node = make(kind, left->column);
    node->operands.push_back(std::move(left));
    node->operands.push_back(std::move(right));
    return node;
  }

  std::unique_ptr<Node> expression() {
    auto left = term();
    while (is_symbol('+') || is_symbol('-')) {
      const Node::Kind kind = is_symbol('+') ? Node::Kind::add : Node::Kind::subtract;
      advance();
      left = binary(kind, std::move(left), term());
    }
    return left;
  }

  std::unique_ptr<Node> term() {
    auto left = unary();
    while (is_symbol('*') || is_symbol('/')) {
      const Node::Kind kind = is_symbol('*') ? Node::Kind::multiply : Node::Kind::divide;
      advance();
      left = binary(kind, std::move(left), unary());
    }
    return left;
  }

  std::unique_ptr<Node> unary() {
    if (is_symbol('-')) {
      auto node = make(Node::Kind::negate, m_token.column);
      advance();
      node->operands.push_back(unary());
      return node;
    }
    if (is_symbol('+')) {
      advance();
      return unary();
    }
    return primary();
  }

  std::unique_ptr<Node> primary() {
    const Token token = m_token;
    switch (token.kind) {
      case Token::Kind::number: {
        const std::string digits(token.text);
        const float value = std::strtof(digits.c_str(), nullptr);
        if (!std::isfinite(value)) throw ParseError("number " + digits + " does not fit a float", token.column);
        auto node = make(Node::Kind::number, token.column);
        node->value = value;
        advance();
        return node;
      }
      case Token::Kind::name: {
        advance();
        if (is_symbol('(')) return call(token);
        auto node = make(Node::Kind::input, token.column);
        node->input = input_index(token.text);
        return node;
      }
      case Token::Kind::symbol:
        if (is_symbol('(')) {
          advance();
          auto inner = expression();
          if (!is_symbol(')'))
            throw ParseError("expected ')' to close the '(' of column " + std::to_string(token.column), m_token.column);
          advance();
          return inner;
        }
        throw ParseError("expected a number, a name or '(', found '" + std::string(token.text) + "'", token.column);
      case Token::Kind::end:
        break;
    }
    throw ParseError("unexpected end of the expression", token.column);
  }

  std::unique_ptr<Node> call(const Token& name) {
    const Function* function = find_function(name.text);
    if (function == nullptr) {
      throw ParseError("unknown function '" + std::string(name.text) + "' (known: " + function_list() + ")",
                       name.column);
    }
    auto node = make(Node::Kind::call, name.column);
    node->function = function;
    const std::size_t open_column = m_token.column;
    advance();  // '('
    if (!is_symbol(')')) {
      node->operands.push_back(expression());
      while (is_symbol(',')) {
        advance();
        node->operands.push_back(expression());
      }
    }
    if (!is_symbol(')')) {
      throw ParseError("expected ',' or ')' in the call of " + std::string(name.text) + " (opened in column " +
                           std::to_string(open_column) + ")",
                       m_token.column);
    }
    if (node->operands.size() != function->arity) {
      throw ParseError(std::string(function->name) + " takes " + std::to_string(function->arity) + " argument" +
                           (function->arity == 1 ? "" : "s") + ", got " + std::to_string(node->operands.size()),
                       name.column);
    }
    advance();
    return node;
  }

  std::size_t input_index(std::string_view name) {
    for (std::size_t i = 0; i < m_inputs->size(); ++i) {
      if ((*m_inputs)[i] == name) return i;
    }
    m_inputs->emplace_back(name);
    return m_inputs->size() - 1;
  }

  std::string_view m_text;
  std::size_t m_position = 0;
  Token m_token;
  std::vector<std::string>* m_inputs = nullptr;
};

std::string float_literal(float value) {
  char text[48];
  std::snprintf(text, sizeof text, "%.9g", static_cast<double>(value));
  std::string literal(text);
  if (literal.find_first_of(".e") == std::string::npos) literal += ".0";
  return literal + "f";
}

void emit(const Node& node, const Statement& statement, std::string& out) {
  const auto binary = [&](const char* op) {
    out += '(';
    emit(*node.operands[0], statement, out);
    out += op;
    emit(*node.operands[1], statement, out);
    out += ')';
  };
  switch (node.kind) {
    case Node::Kind::number:
      out += float_literal(node.value);
      return;
    case Node::Kind::input:
      out += "v_" + statement.inputs[node.input];
      return;
    case Node::Kind::negate:
      out += "(-";
      emit(*node.operands[0], statement, out);
      out += ')';
      return;
    case Node::Kind::add:
      binary(" + ");
      return;
    case Node::Kind::subtract:
      binary(" - ");
      return;
    case Node::Kind::multiply:
      binary(" * ");
      return;
    case Node::Kind::divide:
      binary(" / ");
      return;
    case Node::Kind::call:
      out += node.function->c_name;
      out += '(';
      for (std::size_t i = 0; i < node.operands.size(); ++i) {
        if (i > 0) out += ", ";
        emit(*node.operands[i], statement, out);
      }
      out += ')';
      return;
  }
}

float evaluate_node(const Node& node, std::span<const std::vector<float>> inputs, std::size_t i) {
  switch (node.kind) {
    case Node::Kind::number:
      return node.value;
    case Node::Kind::input:
      return inputs[node.input][i];
    case Node::Kind::negate:
      return -evaluate_node(*node.operands[0], inputs, i);
    case Node::Kind::add:
      return evaluate_node(*node.operands[0], inputs, i) + evaluate_node(*node.operands[1], inputs, i);
    case Node::Kind::subtract:
      return evaluate_node(*node.operands[0], inputs, i) - evaluate_node(*node.operands[1], inputs, i);
    case Node::Kind::multiply:
      return evaluate_node(*node.operands[0], inputs, i) * evaluate_node(*node.operands[1], inputs, i);
    case Node::Kind::divide:
      return evaluate_node(*node.operands[0], inputs, i) / evaluate_node(*node.operands[1], inputs, i);
    case Node::Kind::call: {
      const float a = evaluate_node(*node.operands[0], inputs, i);
      const float b = node.operands.size() > 1 ? evaluate_node(*node.operands[1], inputs, i) : 0.0f;
      return node.function->cpu(a, b);
    }
  }
  return std::numeric_limits<float>::quiet_NaN();
}

std::uint64_t fnv1a(std::string_view text) noexcept {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

}  // namespace

Statement parse(std::string_view text) { return Parser(text).statement(); }

std::string describe(const ParseError& error, std::string_view text) {
  std::string result = "error: ";
  result += error.what();
  result += " at column " + std::to_string(error.column()) + "\n  ";
  result += text;
  result += "\n  ";
  result.append(error.column() > 0 ? error.column() - 1 : 0, ' ');
  result += '^';
  return result;
}

std::string to_c(const Statement& statement) {
  std::string out;
  emit(*statement.root, statement, out);
  return out;
}

std::string kernel_name(const Statement& statement) {
  char text[32];
  std::snprintf(text, sizeof text, "expr_%016llx", static_cast<unsigned long long>(fnv1a(to_c(statement))));
  return text;
}

std::string kernel_source(const Statement& statement, std::string_view name) {
  std::string source =
      "// generated by expr_jit from: " + statement.text + "\n#include <kiln/rtc.h>\n\nKILN_KERNEL void ";
  source += name;
  source += "(float* __restrict__ out";
  for (const std::string& input : statement.inputs) source += ", const float* __restrict__ in_" + input;
  source +=
      ", unsigned int n) {\n  const unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i >= n) return;\n";
  for (const std::string& input : statement.inputs) source += "  const float v_" + input + " = in_" + input + "[i];\n";
  source += "  out[i] = " + to_c(statement) + ";\n}\n";
  return source;
}

float evaluate(const Statement& statement, std::span<const std::vector<float>> inputs, std::size_t i) {
  return evaluate_node(*statement.root, inputs, i);
}

std::vector<float> make_input(std::string_view name, std::size_t count) {
  std::vector<float> values(count);
  std::uint64_t state = fnv1a(name) | 1u;
  for (float& value : values) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;  // 64-bit LCG
    const double unit = static_cast<double>(state >> 40) / static_cast<double>(1ULL << 24);
    value = static_cast<float>(0.25 + 1.75 * unit);
  }
  return values;
}

double relative_error(float gpu, float cpu) noexcept {
  if (std::isnan(gpu) && std::isnan(cpu)) return 0.0;
  if (std::isnan(gpu) || std::isnan(cpu)) return std::numeric_limits<double>::infinity();
  if (std::isinf(gpu) || std::isinf(cpu)) return gpu == cpu ? 0.0 : std::numeric_limits<double>::infinity();
  const double difference = std::fabs(static_cast<double>(gpu) - static_cast<double>(cpu));
  return difference / std::max(1.0, std::fabs(static_cast<double>(cpu)));
}

}  // namespace expr_jit
