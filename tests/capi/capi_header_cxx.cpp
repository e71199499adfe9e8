// kiln.h compiled as C++ with the project's warnings: the C API header must be clean for C++ callers
// too (extern "C", no C-only constructs). Compiled only; the C test exercises the functions.
#include "kiln/kiln.h"

#include <type_traits>

static_assert(std::is_standard_layout_v<kiln_engine_config>, "kiln_engine_config must stay a C struct");
static_assert(std::is_standard_layout_v<kiln_stats>, "kiln_stats must stay a C struct");
static_assert(std::is_trivially_copyable_v<kiln_prewarm_result>, "kiln_prewarm_result must stay a C struct");
static_assert(sizeof(kiln_engine) == sizeof(void*), "handles are pointer-sized");
static_assert(KILN_OK == 0, "KILN_OK is zero");

namespace {
[[maybe_unused]] kiln_status create_with_defaults(kiln_engine* engine) {
  kiln_engine_config config;
  kiln_engine_config_init(&config);
  return kiln_engine_create(&config, engine);
}
}  // namespace
