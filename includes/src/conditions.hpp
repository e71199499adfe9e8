#pragma once
// Private to the include home (includes/src/): the macro state of the lean walk (resolve.cpp; the
// state and #if evaluation in conditions.cpp, the context a compile starts with in predefined.cpp),
// which hands the compiler the headers a compile can read rather than every branch's. It evaluates
// #if/#ifdef/#ifndef/#elif with what it knows for certain: the request's -D/-U, the #define/#undef of
// the text walked so far (object-like values; function-like macros known as defined), a short list of
// what NVRTC predefines (checked against NVRTC 13.0: __CUDACC__, __CUDACC_RTC__, __CUDA_ARCH__ from
// -arch, __cplusplus from -std, and the compilers it is not). `defined`, integer arithmetic, comparisons,
// logical operators, the conditional operator and object-like macro expansion are evaluated; anything
// else (a function-like macro called, __has_include and the other __has_ operators, a name the compiler
// may predefine that is not known here, a value defined in a branch that may or may not have been taken)
// is unknown, and the walk takes every branch of that conditional (today's over-approximation).
// A name the compiler may predefine is a reserved one (`__x`, `_X`); any other name that no walked text
// has defined and no -D gives is undefined (0), unless a flag might define macros in a way not read here.
// Being wrong here never gives a wrong binary: an include the walk leaves behind is rewritten to a name
// no compiler has (resolve.cpp), so a compile that reaches it fails and kiln retries with every branch.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/cache/types.hpp"
#include "kiln/includes/include_home.hpp"

namespace kiln::cache::detail {

using kiln::includes::CompilerTraits;

/// Yes, no, or unknown (the walk then takes both ways).
enum class Tri : unsigned char { no, yes, unknown };

/// What a macro name stands for at one point of the walk.
struct Macro {
  enum class State : unsigned char {
    undefined,      ///< certainly not defined
    object,         ///< certainly an object-like macro with `value`
    function,       ///< certainly a function-like macro with `params` and `value`
    defined,        ///< certainly defined; its value is not known (a predefined one)
    unknown,        ///< may or may not be defined
  };
  State state = State::unknown;
  std::string value;                ///< object, function: the replacement text
  std::vector<std::string> params;  ///< function: its parameters (`__VA_ARGS__` last for `...`)
  bool variadic = false;            ///< function: the last parameter takes the rest of the arguments
};

/// A macro known in `state`, with `value` (object: its replacement).
inline Macro make_macro(Macro::State state, std::string value) {
  Macro m;
  m.state = state;
  m.value = std::move(value);
  return m;
}

/// Hashing for maps keyed by name that are looked up with a std::string_view (no string made per lookup).
struct NameHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view name) const noexcept;  ///< XXH3-64: names are short, looked up often
};
using MacroMap = std::unordered_map<std::string, Macro, NameHash, std::equal_to<>>;

/// The macros a compile starts with, as far as kiln knows them: from the request's flags (-D, -U,
/// -std=, -arch=) and the compiler (vendor). Names not listed: reserved ones unknown, others undefined
/// (or unknown when `ordinary_unknown`).
struct MacroContext {
  MacroMap initial;
  bool ordinary_unknown = false;  ///< a flag may define macros kiln did not read: no name is known undefined
  /// NVRTC for an -arch without a suffix (sm_90, not sm_90a or sm_100f): no `__CUDA_ARCH_FEAT_*` is defined.
  bool plain_arch = false;

  /// The context of a compile with these vendor flags (the request's complete flags) by this compiler
  /// (its traits: whose predefined macros; its identity: "nvrtc 13.0" gives __CUDACC_VER_MAJOR__ and
  /// __CUDACC_VER_MINOR__).
  [[nodiscard]] static MacroContext from_flags(std::span<const std::string> flags, const CompilerTraits& traits,
                                               std::string_view compiler = {});
  /// Bytes that differ between contexts that may decide a branch differently (for ResolvedSets).
  [[nodiscard]] std::string signature() const;
};

/// Whether a name is reserved to the implementation: `__x` or `_X`.
[[nodiscard]] bool reserved_macro_name(std::string_view name);
/// Whether a compiler may predefine the name: a reserved name in a compiler's own forms (`__x__`, or one
/// of the prefixes compilers predefine under: `__CUDA`, `__NV`, `__GNU`, `_MSC`, `__clang`, ...). A
/// library's own reserved names (`_CCCL_X`, `__THRUST_X`, an include guard) are not. Also the ordinary names
/// NVRTC's runtime preinclude defines (`CUDART*`, `CUDA_*`, `NV_*`, `va_*`, `NULL`, `assert`).
[[nodiscard]] bool may_be_predefined(std::string_view name);

/// A macro's replacement as the evaluator's tokens (conditions.cpp).
struct MacroTokens;

/// The macro state along the walk.
class MacroState {
 public:
  explicit MacroState(const MacroContext& context);
  ~MacroState();
  MacroState(const MacroState&) = delete;
  MacroState& operator=(const MacroState&) = delete;

  /// A definition; `certain` false in a branch that may not be taken (the name becomes unknown). A
  /// function-like one's `value` is its parameter list and replacement, "(a, b) a + b" (Directive::text).
  void define(const std::string& name, std::string_view value, bool function_like, bool certain);
  void undefine(const std::string& name, bool certain);
  /// What the name stands for now.
  [[nodiscard]] const Macro& find(std::string_view name) const;
  [[nodiscard]] Tri defined(std::string_view name) const;
  /// Whether the walked text or the context says what the name is (else find() falls back on the name's form).
  [[nodiscard]] bool tracked(std::string_view name) const { return m_macros.contains(name); }
  /// The truth of an #if / #elif expression.
  [[nodiscard]] Tri evaluate(std::string_view expression) const;
  /// `macro`'s replacement split into tokens, once for each value it has (the evaluator expands the same
  /// macros over and over); null when it holds what the evaluator does not lex.
  [[nodiscard]] const MacroTokens* tokens(const Macro& macro) const;

 private:
  const MacroContext& m_context;
  /// The context's macros, then what the walked text defined or undefined over them (one lookup a name).
  MacroMap m_macros;
  mutable std::unordered_map<const Macro*, std::unique_ptr<const MacroTokens>> m_tokens;
  static constexpr std::size_t kScratchBytes = 64 << 10;
  mutable std::unique_ptr<std::byte[]> m_scratch;  ///< where an evaluation's token lists live, first
};

}  // namespace kiln::cache::detail
