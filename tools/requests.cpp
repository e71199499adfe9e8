#include "requests.hpp"

#include <algorithm>

#include "kiln/engine.hpp"

namespace kiln::cli {

bool is_plain_name(std::string_view kernel) { return !kernel.empty() && !is_name_expression(kernel); }

std::vector<std::vector<std::string>> name_sets(const std::vector<std::string>& kernels, bool one_program) {
  std::vector<std::vector<std::string>> sets;
  if (one_program) {
    sets.push_back(kernels);
    return sets;
  }
  bool plain = false;
  for (const std::string& kernel : kernels) {
    if (is_plain_name(kernel)) {
      if (!plain) sets.emplace_back();
      plain = true;
    } else if (std::none_of(sets.begin(), sets.end(),
                            [&](const auto& set) { return set.size() == 1 && set[0] == kernel; })) {
      sets.push_back({kernel});
    }
  }
  return sets;
}

std::vector<std::string> with_include_options(std::vector<std::string> options,
                                              const std::vector<std::string>& include_dirs, bool toolkit_includes) {
  for (const std::string& dir : include_dirs) options.push_back("--include-path=" + dir);
  if (toolkit_includes) options.emplace_back("--toolkit-includes");
  return options;
}

}  // namespace kiln::cli
