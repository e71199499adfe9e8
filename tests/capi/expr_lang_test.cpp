// expr_jit's language (examples/expr_jit/expr.hpp): parsing, error columns, generated source, CPU
// evaluation. Needs nothing but the CPU.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "expr.hpp"

namespace {

std::size_t error_column(const std::string& text) {
  try {
    (void)expr_jit::parse(text);
  } catch (const expr_jit::ParseError& e) {
    return e.column();
  }
  return 0;
}

float eval_at(const std::string& text, const std::vector<std::vector<float>>& inputs, std::size_t i = 0) {
  const auto statement = expr_jit::parse(text);
  return expr_jit::evaluate(statement, inputs, i);
}

}  // namespace

TEST_CASE("statements name their output and collect inputs in order of first use", "[capi][expr]") {
  const auto s = expr_jit::parse("out = a * x + sin(y) / (1 + z*z)");
  CHECK(s.output == "out");
  CHECK(s.inputs == std::vector<std::string>{"a", "x", "y", "z"});
  const auto t = expr_jit::parse("x + x * y");
  CHECK(t.output == "out");
  CHECK(t.inputs == std::vector<std::string>{"x", "y"});
  CHECK(expr_jit::parse("r = sqrt(q)").output == "r");
}

TEST_CASE("precedence, associativity and unary minus", "[capi][expr]") {
  const std::vector<std::vector<float>> none;
  CHECK(eval_at("1 + 2 * 3", none) == 7.0f);
  CHECK(eval_at("(1 + 2) * 3", none) == 9.0f);
  CHECK(eval_at("8 / 4 / 2", none) == 1.0f);
  CHECK(eval_at("10 - 4 - 3", none) == 3.0f);
  CHECK(eval_at("-2 * -3", none) == 6.0f);
  CHECK(eval_at("- -2", none) == 2.0f);
  CHECK(eval_at("+4 - -1", none) == 5.0f);
  CHECK(eval_at("2.5e1 + .5 + 1E-1", none) == Approx(25.6f));
  CHECK(eval_at("pow(2, 10) + max(1, 3) + min(4, -4) + abs(-2) + fabs(-1)", none) == 1024.0f + 3 - 4 + 2 + 1);
}

TEST_CASE("functions match the float library", "[capi][expr]") {
  const std::vector<std::vector<float>> in{{0.7f}, {1.3f}};
  // Read from the vectors, not literals: the compiler would fold literal calls with its own
  // (correctly rounded) math, which can differ from the run-time library by an ulp.
  const float a = in[0][0];
  const float b = in[1][0];
  CHECK(eval_at("sin(a) + cos(b)", in) == std::sin(a) + std::cos(b));
  CHECK(eval_at("exp(a) * log(b)", in) == std::exp(a) * std::log(b));
  CHECK(eval_at("tanh(a) - sqrt(b) + tan(a)", in) == std::tanh(a) - std::sqrt(b) + std::tan(a));
}

TEST_CASE("errors point at the column", "[capi][expr]") {
  CHECK(error_column("out = sin(x + 1") == 16);  // end of text: the missing ')'
  CHECK(error_column("y = foo(x)") == 5);        // unknown function
  CHECK(error_column("x + 3 $") == 7);           // bad character
  CHECK(error_column("max(x)") == 1);            // wrong arity, at the function name
  CHECK(error_column("(x))") == 4);              // unbalanced
  CHECK(error_column("out =") == 6);             // nothing after '='
  CHECK(error_column("") == 1);
  CHECK(error_column("1.5.3") == 4);
  CHECK(error_column("2 *") == 4);
  CHECK(error_column("1e") == 3);
  CHECK(error_column("3x") == 2);
  CHECK(error_column("a b") == 3);
  CHECK(error_column("1e99") == 1);  // does not fit a float

  try {
    (void)expr_jit::parse("out = sin(x + 1");
    FAIL("expected a parse error");
  } catch (const expr_jit::ParseError& e) {
    const std::string shown = expr_jit::describe(e, "out = sin(x + 1");
    // Three lines: the message, the text, a caret under column 16.
    CHECK(shown.find("column 16") != std::string::npos);
    CHECK(shown.find("\n  out = sin(x + 1\n") != std::string::npos);
    CHECK(shown.substr(shown.rfind('\n') + 1) == std::string(2 + 15, ' ') + "^");
  }
}

TEST_CASE("generated source is a KILN_KERNEL over float arrays", "[capi][expr]") {
  const auto s = expr_jit::parse("g = exp(-x*x / 2) * cos(3 * y)");
  const std::string name = expr_jit::kernel_name(s);
  CHECK(name.rfind("expr_", 0) == 0);
  CHECK(name.size() == 5 + 16);
  const std::string source = expr_jit::kernel_source(s, name);
  CHECK(source.find("#include <kiln/rtc.h>") != std::string::npos);
  CHECK(source.find("KILN_KERNEL void " + name +
                    "(float* __restrict__ out, const float* __restrict__ in_x, "
                    "const float* __restrict__ in_y, unsigned int n)") != std::string::npos);
  CHECK(source.find("expf(") != std::string::npos);
  CHECK(source.find("cosf(") != std::string::npos);
  CHECK(source.find("2.0f") != std::string::npos);
  CHECK(source.find("3.0f") != std::string::npos);
  CHECK(expr_jit::to_c(s) == "(expf((((-v_x) * v_x) / 2.0f)) * cosf((3.0f * v_y)))");
  // Equal expressions (whatever the spelling) share a kernel name; different ones do not.
  CHECK(expr_jit::kernel_name(expr_jit::parse("o = (x + y)")) == expr_jit::kernel_name(expr_jit::parse("x+y")));
  CHECK(expr_jit::kernel_name(expr_jit::parse("x + y")) != expr_jit::kernel_name(expr_jit::parse("x - y")));
  // Literals round-trip exactly through their C spelling.
  CHECK(expr_jit::to_c(expr_jit::parse("0.1")) == "0.100000001f");
}

TEST_CASE("inputs are deterministic and positive; errors compare NaN and infinities", "[capi][expr]") {
  const auto a = expr_jit::make_input("a", 1000);
  CHECK(a == expr_jit::make_input("a", 1000));
  CHECK(a != expr_jit::make_input("b", 1000));
  for (const float v : a) {
    CHECK(v >= 0.25f);
    CHECK(v < 2.0f);
  }
  CHECK(expr_jit::relative_error(1.0f, 1.0f) == 0.0);
  CHECK(expr_jit::relative_error(NAN, NAN) == 0.0);
  CHECK(std::isinf(expr_jit::relative_error(NAN, 1.0f)));
  CHECK(std::isinf(expr_jit::relative_error(INFINITY, 1.0f)));
  CHECK(expr_jit::relative_error(INFINITY, INFINITY) == 0.0);
  CHECK(expr_jit::relative_error(101.0f, 100.0f) == Approx(0.01));
  CHECK(expr_jit::relative_error(0.5f, 0.25f) == Approx(0.25));  // absolute below 1
}
