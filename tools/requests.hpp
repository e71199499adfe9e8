#pragma once
// The request model: which programs a set of kernels and include flags stands for, as the engine
// would request them (`kiln prewarm`, `kiln cache why-miss`).
#include <string>
#include <string_view>
#include <vector>

namespace kiln::cli {

/// True for a plain C identifier ("saxpy"), false for a name expression ("kiln::map<float, 4>"): the
/// engine's rule, kiln::is_name_expression.
[[nodiscard]] bool is_plain_name(std::string_view kernel);

/// The name-expression sets that `Engine::kernel(source, k)` requests for each kernel k: every plain
/// name shares one program with no expressions; each name expression is a program of its own. With
/// `one_program`, one set holding every kernel as given (what `Engine::program(source, opts, kernels)`
/// requests).
[[nodiscard]] std::vector<std::vector<std::string>> name_sets(const std::vector<std::string>& kernels,
                                                              bool one_program);

/// `options` followed by "--include-path=DIR" for each folder of -I/--include-path (in order) and
/// "--toolkit-includes" when asked: the CLI's include flags as the portable options they stand for.
[[nodiscard]] std::vector<std::string> with_include_options(std::vector<std::string> options,
                                                            const std::vector<std::string>& include_dirs,
                                                            bool toolkit_includes);

}  // namespace kiln::cli
