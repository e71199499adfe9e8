/* Uses the installed C API from C11: an engine, a built-in source, a compile-only binary for a named
 * target (no GPU needed; reported as skipped without NVRTC), statistics. */
#include <stdio.h>
#include <string.h>

#include "kiln/kiln.h"

/* kiln_compile of `source` for sm_90: checks the binary is a CUBIN (an ELF) and prints its size.
 * Returns 0 when it passed or NVRTC is absent, 1 on failure. */
static int compile_sm90(kiln_engine engine, kiln_source source) {
  kiln_binary binary = NULL;
  const kiln_status status = kiln_compile(engine, source, NULL, 0, NULL, 0, "sm_90", &binary);
  if (status == KILN_ERROR_DEVICE_UNAVAILABLE) {
    printf("consumer (C): kiln_compile skipped (no CUDA compiler): %s\n", kiln_last_error());
    return 0;
  }
  if (status != KILN_OK) {
    fprintf(stderr, "consumer (C): kiln_compile: %s\n", kiln_last_error());
    return 1;
  }
  kiln_binary_info info;
  kiln_binary_info_init(&info);
  int failed = kiln_binary_get_info(binary, &info) != KILN_OK;
  if (!failed && (info.kind != KILN_BINARY_CUBIN || info.data_size < 4 || memcmp(info.data, "\177ELF", 4) != 0)) {
    fprintf(stderr, "consumer (C): kiln_compile for sm_90 gave kind %d, %zu bytes: not a CUBIN\n", (int)info.kind,
            info.data_size);
    failed = 1;
  }
  failed |= kiln_binary_destroy(binary) != KILN_OK;
  if (!failed)
    printf("consumer (C): kiln_compile: CUBIN (kind %d) of %zu bytes for %s\n", (int)info.kind, info.data_size,
           info.target);
  return failed;
}

int main(void) {
  if (kiln_api_version() != KILN_API_VERSION) {
    fprintf(stderr, "consumer (C): library API %d, header %d\n", kiln_api_version(), KILN_API_VERSION);
    return 1;
  }
  kiln_engine engine = NULL;
  if (kiln_engine_create(NULL, &engine) != KILN_OK) {
    fprintf(stderr, "consumer (C): kiln_engine_create: %s\n", kiln_last_error());
    return 1;
  }
  size_t count = 0;
  const char* first = NULL;
  kiln_source source = NULL;
  int status = kiln_builtin_source_name(0, &count, &first) != KILN_OK || kiln_source_builtin(first, &source) != KILN_OK;
  if (status == 0 && compile_sm90(engine, source) != 0) {
    kiln_source_destroy(source);
    kiln_engine_destroy(engine);
    return 1;
  }
  kiln_stats stats;
  kiln_stats_init(&stats);
  status |= kiln_engine_stats(engine, &stats) != KILN_OK;
  status |= kiln_source_destroy(source) != KILN_OK;
  status |= kiln_engine_destroy(engine) != KILN_OK;
  if (status != 0) {
    fprintf(stderr, "consumer (C): %s\n", kiln_last_error());
    return 1;
  }
  printf("consumer (C): API %d, %zu built-in sources (first: %s), %llu compiles\n", kiln_api_version(), count, first,
         (unsigned long long)stats.compiles);
  return 0;
}
