#pragma once
// expr_jit's language: elementwise expressions over float arrays.
//
//   statement := [name '='] expression            (the output name defaults to "out")
//   expression := term (('+' | '-') term)*
//   term       := unary (('*' | '/') unary)*
//   unary      := ('-' | '+') unary | primary
//   primary    := number | name | name '(' expression (',' expression)* ')' | '(' expression ')'
//
// A name that is not called is an input array; every input has the output's length. Functions:
// sin cos tan exp log sqrt abs fabs tanh (one argument), pow min max (two). All arithmetic is float.
// Knows nothing of kiln: it parses, generates CUDA/HIP source and evaluates on the CPU.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace expr_jit {

/// A syntax error at a 1-based column of the statement.
class ParseError : public std::runtime_error {
 public:
  ParseError(const std::string& message, std::size_t column) : std::runtime_error(message), m_column(column) {}
  [[nodiscard]] std::size_t column() const noexcept { return m_column; }

 private:
  std::size_t m_column;
};

struct Function;

struct Node {
  enum class Kind : std::uint8_t { number, input, negate, add, subtract, multiply, divide, call };
  Kind kind = Kind::number;
  float value = 0;                     ///< number
  std::size_t input = 0;               ///< input: index into Statement::inputs
  const Function* function = nullptr;  ///< call
  std::vector<std::unique_ptr<Node>> operands;
  std::size_t column = 0;  ///< where the node starts (1-based)
};

struct Statement {
  std::string text;  ///< as given
  std::string output = "out";
  std::vector<std::string> inputs;  ///< in order of first use
  std::unique_ptr<Node> root;
};

/// Parses one statement. Throws ParseError pointing at the offending column.
[[nodiscard]] Statement parse(std::string_view text);

/// "error: <message> at column N", the statement, and a caret under the column (three lines).
[[nodiscard]] std::string describe(const ParseError& error, std::string_view text);

/// The expression as fully parenthesised C (float literals, sinf/powf/...); inputs are v_<name>.
[[nodiscard]] std::string to_c(const Statement& statement);

/// A kernel name derived from the expression's C form: equal expressions share a kernel (and a cache entry).
[[nodiscard]] std::string kernel_name(const Statement& statement);

/// A complete kernel source:
///   KILN_KERNEL void <name>(float* out, const float* in_<input>..., unsigned int n)
/// one thread per element.
[[nodiscard]] std::string kernel_source(const Statement& statement, std::string_view name);

/// Evaluates element `i` on the CPU with float arithmetic. `inputs[k]` is the array of input k.
[[nodiscard]] float evaluate(const Statement& statement, std::span<const std::vector<float>> inputs, std::size_t i);

/// Deterministic test data for an input: values in [0.25, 2.0), seeded by the name.
[[nodiscard]] std::vector<float> make_input(std::string_view name, std::size_t count);

/// |gpu - cpu| / max(1, |cpu|); 0 when both are NaN or equal infinities, infinity when only one is NaN.
[[nodiscard]] double relative_error(float gpu, float cpu) noexcept;

}  // namespace expr_jit
