// Private to the include home: what a compile starts with, as far as the lean walk knows it
// (conditions.hpp, MacroContext): the request's -D/-U/-std/-arch, and what NVRTC predefines for them,
// checked against NVRTC 13.0; and which names a compiler may predefine, which the walk never takes as
// undefined. The walk's macro state and #if evaluation are in conditions.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <vector>

#include "conditions.hpp"
#include "scan.hpp"

namespace kiln::cache::detail {
namespace {

/// NVRTC's predefined macros that decide branches in runtime headers, as NVRTC 13.0 answers them for
/// any -arch and -std (a compiler that answers otherwise costs a retry, never a wrong binary).
constexpr std::string_view kNvrtcUndefined[] = {
    "__NVCC__",     "__GNUC__",    "__GNUC_MINOR__",  "__GNUG__",     "__clang__",   "_MSC_VER",     "_WIN32",
    "_WIN64",       "__NVCOMPILER", "__INTEL_COMPILER", "__APPLE__",  "__ibmxl__",   "__CUDA__",     "__HIP__",
    "__HIPCC__",    "__HIPCC_RTC__", "__HIP_DEVICE_COMPILE__", "_NVHPC_CUDA", "__ANDROID__", "__FreeBSD__",
    "__MINGW32__",  "__CYGWIN__",  "__SYCL_DEVICE_ONLY__", "_OPENMP", "__PGI",      "__ICC",        "__IBMCPP__",
    "_LIBCPP_VERSION", "__GLIBCXX__", "__x86_64__",  "__aarch64__"};

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

MacroContext MacroContext::from_flags(std::span<const std::string> flags, const CompilerTraits& traits,
                                      std::string_view compiler) {
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
  if (traits.predefined == CompilerTraits::Predefined::nvrtc) {
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

}  // namespace kiln::cache::detail
