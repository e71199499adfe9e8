/* Uses the installed C API from C11: an engine, a built-in source, statistics. */
#include <stdio.h>

#include "kiln/kiln.h"

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
