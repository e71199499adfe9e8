/* The C API from C11, using only kiln.h: engine, sources, prewarm (the compile path, no GPU needed),
 * compile-only binaries (kiln_compile: CUBIN, PTX, LTO-IR, AMD code object), kernel get, errors
 * (null/foreign/destroyed handles, unknown built-in, bad option, empty source, compile errors with
 * their log), statistics, thread-local errors. The GPU part (launch, argument
 * checks, buffers, streams, use of a kernel of a destroyed engine) runs only when a device exists.
 *
 * Needs NVRTC for the compile checks; without it they are reported as skipped and the rest still
 * runs. Exit status: 0 pass, 1 failure. */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kiln/kiln.h"

static int g_checks = 0;
static int g_failures = 0;

#define CHECK(condition)                                                            \
  do {                                                                              \
    ++g_checks;                                                                     \
    if (!(condition)) {                                                             \
      ++g_failures;                                                                 \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #condition); \
    }                                                                               \
  } while (0)

/* A call that must return `expected` and, when it is an error, leave a message containing `needle`
 * (NULL: any non-empty message). */
#define EXPECT_STATUS(call, expected, needle)                                                             \
  do {                                                                                                    \
    kiln_status status_ = (call);                                                                         \
    ++g_checks;                                                                                           \
    if (status_ != (expected)) {                                                                          \
      ++g_failures;                                                                                       \
      fprintf(stderr, "%s:%d: %s returned %s, expected %s (last error: %s)\n", __FILE__, __LINE__, #call, \
              kiln_status_name(status_), kiln_status_name(expected), kiln_last_error());                  \
    } else if ((expected) != KILN_OK) {                                                                   \
      const char* needle_ = (needle);                                                                     \
      const char* message_ = kiln_last_error();                                                           \
      ++g_checks;                                                                                         \
      if (message_[0] == '\0' || (needle_ != NULL && strstr(message_, needle_) == NULL)) {                \
        ++g_failures;                                                                                     \
        fprintf(stderr, "%s:%d: %s: message \"%s\" lacks \"%s\"\n", __FILE__, __LINE__, #call, message_,  \
                needle_ != NULL ? needle_ : "(anything)");                                                \
      } else {                                                                                            \
        printf("  ok: %s -> %s: %s\n", #call, kiln_status_name(status_), message_);                       \
      }                                                                                                   \
    }                                                                                                     \
  } while (0)

static const char* kSaxpy =
    "#include <kiln/rtc.h>\n"
    "#include \"capi_test_factor.h\"\n"
    "KILN_KERNEL void capi_saxpy(float a, const float* x, float* y, unsigned int n) {\n"
    "  const unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) y[i] = CAPI_TEST_FACTOR * a * x[i] + y[i];\n"
    "}\n"
    "template <typename T> __global__ void capi_scale(T* x, T factor, unsigned int n) {\n"
    "  const unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) x[i] = x[i] * factor;\n"
    "}\n";

static const kiln_header kHeaders[] = {{"capi_test_factor.h", "#pragma once\n#define CAPI_TEST_FACTOR 2.0f\n"}};

static int remove_entry(const char* path, const struct stat* info, int flag, struct FTW* ftw) {
  (void)info;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static int is_hex32(const char* text) {
  size_t i = 0;
  for (; text[i] != '\0'; ++i) {
    if (!((text[i] >= '0' && text[i] <= '9') || (text[i] >= 'a' && text[i] <= 'f'))) return 0;
  }
  return i == 32;
}

static void* thread_error_probe(void* arg) {
  const char** seen = (const char**)arg;
  /* A fresh thread has no error yet, whatever the main thread did. */
  seen[0] = kiln_last_error()[0] == '\0' ? "empty" : "not empty";
  kiln_stats stats;
  kiln_stats_init(&stats);
  seen[1] = kiln_engine_stats(NULL, &stats) == KILN_ERROR_INVALID_HANDLE ? "invalid handle" : "other";
  return NULL;
}

static void test_basics(void) {
  printf("basics\n");
  CHECK(kiln_api_version() == KILN_API_VERSION);
  CHECK(kiln_api_version() >= 5); /* 5: KILN_BINARY_LTOIR */
  CHECK(KILN_BINARY_LTOIR == 4);
  CHECK(strcmp(kiln_status_name(KILN_OK), "KILN_OK") == 0);
  CHECK(strcmp(kiln_status_name(KILN_ERROR_COMPILE), "KILN_ERROR_COMPILE") == 0);
  CHECK(strcmp(kiln_status_name((kiln_status)999), "KILN_ERROR_UNKNOWN") == 0);
  CHECK(kiln_last_error() != NULL);
  CHECK(kiln_last_compile_log() != NULL);
  kiln_engine_config_init(NULL); /* must not crash */
  kiln_stats_init(NULL);
}

static void test_bad_handles(void) {
  printf("null, foreign and wrongly typed handles\n");
  kiln_stats stats;
  kiln_stats_init(&stats);
  EXPECT_STATUS(kiln_engine_stats(NULL, &stats), KILN_ERROR_INVALID_HANDLE, "NULL");
  EXPECT_STATUS(kiln_engine_record_stats(NULL), KILN_ERROR_INVALID_HANDLE, "NULL");
  EXPECT_STATUS(kiln_engine_destroy(NULL), KILN_ERROR_INVALID_HANDLE, "NULL");
  EXPECT_STATUS(kiln_source_destroy(NULL), KILN_ERROR_INVALID_HANDLE, "NULL");
  EXPECT_STATUS(kiln_program_destroy(NULL), KILN_ERROR_INVALID_HANDLE, "NULL");
  EXPECT_STATUS(kiln_kernel_destroy(NULL), KILN_ERROR_INVALID_HANDLE, "NULL");
  EXPECT_STATUS(kiln_kernel_launch(NULL, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL, 0), KILN_ERROR_INVALID_HANDLE, "NULL");
  EXPECT_STATUS(kiln_engine_stats((kiln_engine)(uintptr_t)0x7f3a12345678u, &stats), KILN_ERROR_INVALID_HANDLE, NULL);
  EXPECT_STATUS(kiln_engine_stats((kiln_engine)(uintptr_t)((UINT64_C(1) << 40) | 1u), &stats),
                KILN_ERROR_INVALID_HANDLE, "not a kiln handle");
  kiln_kernel_info info;
  kiln_kernel_info_init(&info);
  EXPECT_STATUS(kiln_kernel_get_info((kiln_kernel)(uintptr_t)0xdeadbeefu, &info), KILN_ERROR_INVALID_HANDLE, NULL);
}

static void test_engine_config(void) {
  printf("engine configuration\n");
  kiln_engine engine = NULL;
  EXPECT_STATUS(kiln_engine_create(NULL, NULL), KILN_ERROR_INVALID_ARGUMENT, "engine");
  kiln_engine_config config;
  kiln_engine_config_init(&config);
  config.size = sizeof(size_t);
  EXPECT_STATUS(kiln_engine_create(&config, &engine), KILN_ERROR_INVALID_ARGUMENT, "size");
  kiln_engine_config_init(&config);
  config.flags = 0x80u;
  EXPECT_STATUS(kiln_engine_create(&config, &engine), KILN_ERROR_INVALID_ARGUMENT, "flags");
  kiln_engine_config_init(&config);
  config.vendor = (kiln_vendor)7;
  EXPECT_STATUS(kiln_engine_create(&config, &engine), KILN_ERROR_INVALID_ARGUMENT, "vendor");
  kiln_engine_config_init(&config);
  config.cache_dir = "";
  EXPECT_STATUS(kiln_engine_create(&config, &engine), KILN_ERROR_INVALID_ARGUMENT, "cache_dir");
  CHECK(engine == NULL); /* out-parameters are written only on success */

  /* A struct from a "newer header": larger, with the unknown tail zero, is accepted. */
  struct {
    kiln_engine_config base;
    uint64_t future_field;
  } newer;
  memset(&newer, 0, sizeof newer);
  kiln_engine_config_init(&newer.base);
  newer.base.size = sizeof newer;
  newer.base.flags = KILN_ENGINE_CACHE_DISABLE;
  EXPECT_STATUS(kiln_engine_create(&newer.base, &engine), KILN_OK, NULL);
  EXPECT_STATUS(kiln_engine_record_stats(engine), KILN_OK, NULL); /* a memory-only cache: nothing to record */
  EXPECT_STATUS(kiln_engine_destroy(engine), KILN_OK, NULL);
  newer.future_field = 1;
  engine = NULL;
  EXPECT_STATUS(kiln_engine_create(&newer.base, &engine), KILN_ERROR_INVALID_ARGUMENT, "does not know");
}

static void test_destroyed_engine(void) {
  printf("use of a destroyed engine\n");
  kiln_engine_config config;
  kiln_engine_config_init(&config);
  config.flags = KILN_ENGINE_CACHE_DISABLE;
  kiln_engine engine = NULL;
  EXPECT_STATUS(kiln_engine_create(&config, &engine), KILN_OK, NULL);
  CHECK(engine != NULL);
  EXPECT_STATUS(kiln_engine_destroy(engine), KILN_OK, NULL);
  kiln_stats stats;
  kiln_stats_init(&stats);
  EXPECT_STATUS(kiln_engine_stats(engine, &stats), KILN_ERROR_INVALID_HANDLE, "destroyed");
  EXPECT_STATUS(kiln_engine_record_stats(engine), KILN_ERROR_INVALID_HANDLE, "destroyed");
  EXPECT_STATUS(kiln_engine_destroy(engine), KILN_ERROR_INVALID_HANDLE, "destroyed");
  kiln_vendor vendor;
  EXPECT_STATUS(kiln_engine_vendor(engine, &vendor), KILN_ERROR_INVALID_HANDLE, "destroyed");
  void* pointer = NULL;
  EXPECT_STATUS(kiln_malloc(engine, 64, -1, &pointer), KILN_ERROR_INVALID_HANDLE, "destroyed");
  kiln_source source = NULL;
  EXPECT_STATUS(kiln_source_from_text("t.cu", kSaxpy, kHeaders, 1, &source), KILN_OK, NULL);
  EXPECT_STATUS(kiln_prewarm(engine, source, NULL, 0, NULL, 0, "sm_90", NULL), KILN_ERROR_INVALID_HANDLE, "destroyed");
  kiln_kernel kernel = NULL;
  EXPECT_STATUS(kiln_kernel_get(engine, source, "capi_saxpy", NULL, 0, -1, &kernel), KILN_ERROR_INVALID_HANDLE,
                "destroyed");
  /* A source handle passed where an engine is expected. */
  EXPECT_STATUS(kiln_engine_stats((kiln_engine)(void*)source, &stats), KILN_ERROR_INVALID_HANDLE, "kind source");
  EXPECT_STATUS(kiln_source_destroy(source), KILN_OK, NULL);
}

static void test_sources(void) {
  printf("sources\n");
  kiln_source source = NULL;
  EXPECT_STATUS(kiln_source_from_text("t.cu", NULL, NULL, 0, &source), KILN_ERROR_INVALID_ARGUMENT, "text");
  EXPECT_STATUS(kiln_source_from_text("t.cu", kSaxpy, NULL, 0, NULL), KILN_ERROR_INVALID_ARGUMENT, "source");
  EXPECT_STATUS(kiln_source_from_text("t.cu", "", NULL, 0, &source), KILN_ERROR_CONFIG, NULL);
  EXPECT_STATUS(kiln_source_from_text("t.cu", kSaxpy, NULL, 2, &source), KILN_ERROR_INVALID_ARGUMENT, "headers");
  const kiln_header no_name[] = {{NULL, "x"}};
  EXPECT_STATUS(kiln_source_from_text("t.cu", kSaxpy, no_name, 1, &source), KILN_ERROR_INVALID_ARGUMENT, "name");
  CHECK(source == NULL);

  size_t count = 0;
  EXPECT_STATUS(kiln_builtin_source_name(0, &count, NULL), KILN_OK, NULL);
  printf("  %zu built-in sources\n", count);
  const char* first = NULL;
  if (count > 0) {
    EXPECT_STATUS(kiln_builtin_source_name(0, NULL, &first), KILN_OK, NULL);
    CHECK(first != NULL && first[0] != '\0');
    EXPECT_STATUS(kiln_builtin_source_name(0, NULL, &first), KILN_OK, NULL);
    kiln_source builtin = NULL;
    EXPECT_STATUS(kiln_source_builtin(first, &builtin), KILN_OK, NULL);
    CHECK(builtin != NULL);
    /* The same built-in without ".cu". */
    char stem[256];
    snprintf(stem, sizeof stem, "%s", first);
    char* dot = strstr(stem, ".cu");
    if (dot != NULL && dot[3] == '\0') {
      *dot = '\0';
      kiln_source again = NULL;
      EXPECT_STATUS(kiln_source_builtin(stem, &again), KILN_OK, NULL);
      EXPECT_STATUS(kiln_source_destroy(again), KILN_OK, NULL);
    }
    EXPECT_STATUS(kiln_source_destroy(builtin), KILN_OK, NULL);
    EXPECT_STATUS(kiln_source_destroy(builtin), KILN_ERROR_INVALID_HANDLE, "destroyed");
  }
  EXPECT_STATUS(kiln_builtin_source_name(count, NULL, &first), KILN_ERROR_INVALID_ARGUMENT, "out of range");
  EXPECT_STATUS(kiln_source_builtin("no_such_builtin_source", &source), KILN_ERROR_CONFIG,
                count > 0 ? first : NULL); /* the message lists what exists */
  EXPECT_STATUS(kiln_source_builtin(NULL, &source), KILN_ERROR_INVALID_ARGUMENT, "name");
}

/* The compile path without a device: prewarm into a fresh disk cache, then hit it. Returns 0 when
 * NVRTC is not there (skipped). */
static int test_prewarm(kiln_engine engine) {
  printf("prewarm for sm_90 (compile path)\n");
  kiln_source source = NULL;
  EXPECT_STATUS(kiln_source_from_text("capi_saxpy.cu", kSaxpy, kHeaders, 1, &source), KILN_OK, NULL);
  kiln_prewarm_result result;
  kiln_prewarm_result_init(&result);
  const kiln_status first = kiln_prewarm(engine, source, NULL, 0, NULL, 0, "sm_90", &result);
  if (first == KILN_ERROR_DEVICE_UNAVAILABLE) {
    printf("SKIPPED (compile checks): no CUDA compiler: %s\n", kiln_last_error());
    kiln_source_destroy(source);
    return 0;
  }
  EXPECT_STATUS(first, KILN_OK, NULL);
  CHECK(result.origin == KILN_ORIGIN_COMPILED);
  CHECK(result.stored == 1);
  CHECK(result.binary_bytes > 0);
  CHECK(is_hex32(result.key));
  CHECK(strcmp(result.target, "sm_90") == 0);
  printf("  compiled: key %s, %llu bytes, %.3f s\n", result.key, (unsigned long long)result.binary_bytes,
         result.seconds);
  char first_key[33];
  memcpy(first_key, result.key, sizeof first_key);

  kiln_stats stats;
  kiln_stats_init(&stats);
  EXPECT_STATUS(kiln_engine_stats(engine, &stats), KILN_OK, NULL);
  CHECK(stats.compiles == 1);
  CHECK(stats.compile_nanoseconds > 0);
  CHECK(stats.bytes_written > 0);

  /* The same text from a new handle: a disk hit under the same key, no compile. */
  kiln_source same = NULL;
  EXPECT_STATUS(kiln_source_from_text("capi_saxpy.cu", kSaxpy, kHeaders, 1, &same), KILN_OK, NULL);
  kiln_prewarm_result_init(&result);
  EXPECT_STATUS(kiln_prewarm(engine, same, NULL, 0, NULL, 0, "sm_90", &result), KILN_OK, NULL);
  CHECK(result.origin == KILN_ORIGIN_DISK);
  CHECK(strcmp(result.key, first_key) == 0);
  kiln_stats_init(&stats);
  EXPECT_STATUS(kiln_engine_stats(engine, &stats), KILN_OK, NULL);
  CHECK(stats.compiles == 1);
  CHECK(stats.disk_hits >= 1);

  /* Options change the key; a name expression compiles the template. */
  const char* options[] = {"-DCAPI_EXTRA=1", "--fast-math"};
  const char* names[] = {"capi_scale<float>"};
  kiln_prewarm_result_init(&result);
  EXPECT_STATUS(kiln_prewarm(engine, same, options, 2, names, 1, "sm_90", &result), KILN_OK, NULL);
  CHECK(result.origin == KILN_ORIGIN_COMPILED);
  CHECK(strcmp(result.key, first_key) != 0);

  /* Bad input. */
  const char* bad_options[] = {"--no-such-option"};
  EXPECT_STATUS(kiln_prewarm(engine, same, bad_options, 1, NULL, 0, "sm_90", NULL), KILN_ERROR_CONFIG,
                "--no-such-option");
  const char* null_option[] = {NULL};
  EXPECT_STATUS(kiln_prewarm(engine, same, null_option, 1, NULL, 0, "sm_90", NULL), KILN_ERROR_INVALID_ARGUMENT,
                "options[0]");
  EXPECT_STATUS(kiln_prewarm(engine, same, NULL, 3, NULL, 0, "sm_90", NULL), KILN_ERROR_INVALID_ARGUMENT, "options");
  EXPECT_STATUS(kiln_prewarm(engine, same, NULL, 0, NULL, 0, "sm_1", NULL), KILN_ERROR_CONFIG, "sm_1");
  EXPECT_STATUS(kiln_prewarm(engine, same, NULL, 0, NULL, 0, NULL, NULL), KILN_ERROR_INVALID_ARGUMENT, "target");
  kiln_prewarm_result small;
  kiln_prewarm_result_init(&small);
  small.size = 4;
  EXPECT_STATUS(kiln_prewarm(engine, same, NULL, 0, NULL, 0, "sm_90", &small), KILN_ERROR_INVALID_ARGUMENT, "size");
  EXPECT_STATUS(kiln_prewarm(engine, NULL, NULL, 0, NULL, 0, "sm_90", NULL), KILN_ERROR_INVALID_HANDLE, "source");

  /* A compile error carries the whole log. */
  kiln_source broken = NULL;
  EXPECT_STATUS(
      kiln_source_from_text("capi_broken.cu",
                            "#include <kiln/rtc.h>\nKILN_KERNEL void broken(float* x) { x[0] = undeclared_name; }\n",
                            NULL, 0, &broken),
      KILN_OK, NULL);
  EXPECT_STATUS(kiln_prewarm(engine, broken, NULL, 0, NULL, 0, "sm_90", NULL), KILN_ERROR_COMPILE, NULL);
  CHECK(strstr(kiln_last_compile_log(), "undeclared_name") != NULL);
  printf("  compile log: %.200s\n", kiln_last_compile_log());
  kiln_stats_init(&stats);
  EXPECT_STATUS(kiln_engine_stats(engine, &stats), KILN_OK, NULL);
  CHECK(stats.compile_failures >= 1);
  CHECK(stats.compiles == 2);

  kiln_stats tiny;
  kiln_stats_init(&tiny);
  tiny.size = sizeof(size_t);
  EXPECT_STATUS(kiln_engine_stats(engine, &tiny), KILN_ERROR_INVALID_ARGUMENT, "size");

  EXPECT_STATUS(kiln_source_destroy(broken), KILN_OK, NULL);
  EXPECT_STATUS(kiln_source_destroy(same), KILN_OK, NULL);
  EXPECT_STATUS(kiln_source_destroy(source), KILN_OK, NULL);
  return 1;
}

/* Whether `size` bytes at `data` contain `needle` (PTX text is not NUL-terminated). */
static int contains(const void* data, size_t size, const char* needle) {
  const size_t n = strlen(needle);
  const char* bytes = (const char*)data;
  for (size_t i = 0; i + n <= size; ++i) {
    if (memcmp(bytes + i, needle, n) == 0) return 1;
  }
  return 0;
}

static kiln_binary_info binary_info(kiln_binary binary) {
  kiln_binary_info info;
  kiln_binary_info_init(&info);
  EXPECT_STATUS(kiln_binary_get_info(binary, &info), KILN_OK, NULL);
  return info;
}

/* kiln_compile: the binary itself for a named target, no device needed. Runs after test_prewarm (NVRTC
 * is there) on an engine over `cache_dir`. */
static void test_compile(kiln_engine engine, const char* cache_dir, int devices) {
  printf("compile only (kiln_compile)\n");
  kiln_source source = NULL;
  EXPECT_STATUS(kiln_source_from_text("capi_saxpy.cu", kSaxpy, kHeaders, 1, &source), KILN_OK, NULL);
  const char* options[] = {"-DCAPI_COMPILE_ONLY=1"};

  /* A new request: compiled, a CUBIN (an ELF), stored under the key prewarm gives the same request. */
  kiln_stats before, after;
  kiln_stats_init(&before);
  kiln_stats_init(&after);
  EXPECT_STATUS(kiln_engine_stats(engine, &before), KILN_OK, NULL);
  kiln_binary binary = NULL;
  EXPECT_STATUS(kiln_compile(engine, source, options, 1, NULL, 0, "sm_90", &binary), KILN_OK, NULL);
  if (binary == NULL) return;
  kiln_binary_info info = binary_info(binary);
  CHECK(info.kind == KILN_BINARY_CUBIN);
  CHECK(info.origin == KILN_ORIGIN_COMPILED);
  CHECK(info.data != NULL && info.data_size > 64);
  CHECK(info.data != NULL && memcmp(info.data, "\177ELF", 4) == 0);
  CHECK(strcmp(info.target, "sm_90") == 0);
  CHECK(is_hex32(info.key));
  CHECK(info.name_count == 0);
  CHECK(info.seconds > 0);
  printf("  compiled: CUBIN of %zu bytes for %s, key %s, %.3f s\n", info.data_size, info.target, info.key,
         info.seconds);
  const char* log = NULL;
  EXPECT_STATUS(kiln_binary_log(binary, &log), KILN_OK, NULL);
  CHECK(log != NULL);
  kiln_prewarm_result prewarmed;
  kiln_prewarm_result_init(&prewarmed);
  EXPECT_STATUS(kiln_prewarm(engine, source, options, 1, NULL, 0, "sm_90", &prewarmed), KILN_OK, NULL);
  CHECK(prewarmed.origin == KILN_ORIGIN_DISK);
  CHECK(strcmp(prewarmed.key, info.key) == 0);
  CHECK(prewarmed.binary_bytes == info.data_size);

  /* The same request again: this engine's memory, the same bytes, no compile, no log. */
  kiln_binary again = NULL;
  EXPECT_STATUS(kiln_compile(engine, source, options, 1, NULL, 0, "sm_90", &again), KILN_OK, NULL);
  const kiln_binary_info again_info = binary_info(again);
  CHECK(again_info.origin == KILN_ORIGIN_MEMORY);
  CHECK(again_info.data == info.data);
  CHECK(again_info.data_size == info.data_size);
  CHECK(strcmp(again_info.key, info.key) == 0);
  EXPECT_STATUS(kiln_binary_log(again, &log), KILN_OK, NULL);
  CHECK(log != NULL && log[0] == '\0');
  EXPECT_STATUS(kiln_engine_stats(engine, &after), KILN_OK, NULL);
  CHECK(after.compiles == before.compiles + 1);
  CHECK(after.memory_hits == before.memory_hits + 1);

  /* What prewarm stored earlier (no options): a disk hit with prewarm's key. */
  kiln_prewarm_result_init(&prewarmed);
  EXPECT_STATUS(kiln_prewarm(engine, source, NULL, 0, NULL, 0, "sm_90", &prewarmed), KILN_OK, NULL);
  kiln_binary cached = NULL;
  EXPECT_STATUS(kiln_compile(engine, source, NULL, 0, NULL, 0, "sm_90", &cached), KILN_OK, NULL);
  info = binary_info(cached);
  CHECK(info.origin == KILN_ORIGIN_DISK);
  CHECK(strcmp(info.key, prewarmed.key) == 0);
  EXPECT_STATUS(kiln_binary_log(cached, &log), KILN_OK, NULL);
  CHECK(log != NULL && log[0] == '\0');
  EXPECT_STATUS(kiln_binary_destroy(cached), KILN_OK, NULL);

  /* A fresh engine over the same cache: a disk hit, not memory. It outlives its engine. */
  kiln_engine_config config;
  kiln_engine_config_init(&config);
  config.cache_dir = cache_dir;
  kiln_engine fresh = NULL;
  EXPECT_STATUS(kiln_engine_create(&config, &fresh), KILN_OK, NULL);
  kiln_binary from_disk = NULL;
  const char* names[] = {"capi_scale<float>", "capi_scale<double>"};
  EXPECT_STATUS(kiln_compile(fresh, source, options, 1, NULL, 0, "sm_90", &from_disk), KILN_OK, NULL);
  info = binary_info(from_disk);
  CHECK(info.origin == KILN_ORIGIN_DISK);
  CHECK(strcmp(info.key, again_info.key) == 0);
  CHECK(info.data != again_info.data); /* read again from disk: another copy */
  kiln_binary templated = NULL;
  EXPECT_STATUS(kiln_compile(fresh, source, NULL, 0, names, 2, "sm_90", &templated), KILN_OK, NULL);
  EXPECT_STATUS(kiln_engine_destroy(fresh), KILN_OK, NULL);
  info = binary_info(from_disk);
  CHECK(info.data != NULL && memcmp(info.data, "\177ELF", 4) == 0);
  CHECK(info.data_size == again_info.data_size);
  EXPECT_STATUS(kiln_binary_destroy(from_disk), KILN_OK, NULL);

  /* Name expressions: sorted by expression, each with its lowered (mangled) symbol. */
  info = binary_info(templated);
  CHECK(info.origin == KILN_ORIGIN_COMPILED);
  CHECK(info.name_count == 2);
  const char* expression = NULL;
  const char* lowered = NULL;
  EXPECT_STATUS(kiln_binary_name(templated, 0, &expression, &lowered), KILN_OK, NULL);
  CHECK(expression != NULL && strcmp(expression, "capi_scale<double>") == 0);
  CHECK(lowered != NULL && strncmp(lowered, "_Z", 2) == 0);
  const char* double_symbol = lowered;
  EXPECT_STATUS(kiln_binary_name(templated, 1, &expression, NULL), KILN_OK, NULL);
  CHECK(expression != NULL && strcmp(expression, "capi_scale<float>") == 0);
  EXPECT_STATUS(kiln_binary_lowered_name(templated, "capi_scale<float>", &lowered), KILN_OK, NULL);
  CHECK(lowered != NULL && strncmp(lowered, "_Z", 2) == 0 && strcmp(lowered, double_symbol) != 0);
  CHECK(info.data != NULL && contains(info.data, info.data_size, lowered)); /* the symbol is in the ELF */
  printf("  capi_scale<float> -> %s\n", lowered);
  EXPECT_STATUS(kiln_binary_name(templated, 2, &expression, &lowered), KILN_ERROR_INVALID_ARGUMENT, "out of range");
  EXPECT_STATUS(kiln_binary_lowered_name(templated, "capi_scale<int>", &lowered), KILN_ERROR_INVALID_ARGUMENT,
                "capi_scale<float>");
  EXPECT_STATUS(kiln_binary_lowered_name(templated, NULL, &lowered), KILN_ERROR_INVALID_ARGUMENT, "expression");
  EXPECT_STATUS(kiln_binary_lowered_name(templated, "capi_scale<float>", NULL), KILN_ERROR_INVALID_ARGUMENT, "lowered");
  EXPECT_STATUS(kiln_binary_destroy(templated), KILN_OK, NULL);

  /* PTX for a compute_XX target. */
  kiln_binary ptx = NULL;
  EXPECT_STATUS(kiln_compile(engine, source, NULL, 0, NULL, 0, "compute_90", &ptx), KILN_OK, NULL);
  if (ptx != NULL) {
    info = binary_info(ptx);
    CHECK(info.kind == KILN_BINARY_PTX);
    CHECK(strcmp(info.target, "compute_90") == 0);
    CHECK(info.data != NULL && contains(info.data, info.data_size, ".entry capi_saxpy"));
    printf("  PTX of %zu bytes for %s\n", info.data_size, info.target);
    EXPECT_STATUS(kiln_binary_destroy(ptx), KILN_OK, NULL);
  }

  /* LTO-IR for an lto_XX target (API 5): its kind, its signature, a lowered name; --relocatable-device-code
   * taken as an option, and refused for an AMD target without asking HIPRTC. */
  kiln_binary lto = NULL;
  const char* lto_names[] = {"capi_scale<float>"};
  EXPECT_STATUS(kiln_compile(engine, source, NULL, 0, lto_names, 1, "lto_90", &lto), KILN_OK, NULL);
  if (lto != NULL) {
    info = binary_info(lto);
    CHECK(info.kind == KILN_BINARY_LTOIR);
    CHECK(strcmp(info.target, "lto_90") == 0);
    CHECK(info.data != NULL && info.data_size > 32 && memcmp(info.data, "\xED\x43\x4E\x7F", 4) == 0);
    CHECK(info.name_count == 1);
    EXPECT_STATUS(kiln_binary_lowered_name(lto, "capi_scale<float>", &lowered), KILN_OK, NULL);
    CHECK(lowered != NULL && strncmp(lowered, "_Z", 2) == 0);
    printf("  LTO-IR of %zu bytes for %s\n", info.data_size, info.target);
    EXPECT_STATUS(kiln_binary_destroy(lto), KILN_OK, NULL);
  }
  const char* rdc[] = {"--relocatable-device-code"};
  kiln_binary none_yet = NULL;
  kiln_binary relocatable = NULL;
  EXPECT_STATUS(kiln_compile(engine, source, rdc, 1, NULL, 0, "sm_90", &relocatable), KILN_OK, NULL);
  if (relocatable != NULL) {
    info = binary_info(relocatable);
    CHECK(info.kind == KILN_BINARY_CUBIN);
    CHECK(info.data != NULL && info.data_size > 18 && ((const unsigned char*)info.data)[16] == 1); /* ET_REL */
    EXPECT_STATUS(kiln_binary_destroy(relocatable), KILN_OK, NULL);
  }
  EXPECT_STATUS(kiln_compile(engine, source, rdc, 1, NULL, 0, "gfx90a", &none_yet), KILN_ERROR_CONFIG, "-fgpu-rdc");
  EXPECT_STATUS(kiln_compile(engine, source, NULL, 0, NULL, 0, "lto_gfx90a", &none_yet), KILN_ERROR_CONFIG,
                "offload bitcode");

  /* An AMD code object through HIPRTC (skipped without it). */
  kiln_binary amd = NULL;
  const kiln_status amd_status = kiln_compile(engine, source, NULL, 0, NULL, 0, "gfx90a", &amd);
  if (amd_status == KILN_ERROR_DEVICE_UNAVAILABLE) {
    printf("  SKIPPED (gfx90a): no HIP compiler: %s\n", kiln_last_error());
  } else {
    EXPECT_STATUS(amd_status, KILN_OK, NULL);
    if (amd != NULL) {
      info = binary_info(amd);
      CHECK(info.kind == KILN_BINARY_AMD_CODE_OBJECT);
      CHECK(strncmp(info.target, "gfx90a", 6) == 0);
      CHECK(info.data != NULL && info.data_size > 4 && memcmp(info.data, "\177ELF", 4) == 0);
      printf("  AMD code object of %zu bytes for %s\n", info.data_size, info.target);
      EXPECT_STATUS(kiln_binary_destroy(amd), KILN_OK, NULL);
    }
  }

  /* Errors. */
  kiln_binary none = NULL;
  kiln_source broken = NULL;
  EXPECT_STATUS(kiln_source_from_text(
                    "capi_broken.cu",
                    "#include <kiln/rtc.h>\nKILN_KERNEL void broken(float* x) { x[0] = compile_only_undeclared; }\n",
                    NULL, 0, &broken),
                KILN_OK, NULL);
  EXPECT_STATUS(kiln_compile(engine, broken, NULL, 0, NULL, 0, "sm_90", &none), KILN_ERROR_COMPILE, NULL);
  CHECK(strstr(kiln_last_compile_log(), "compile_only_undeclared") != NULL);
  EXPECT_STATUS(kiln_compile(engine, source, NULL, 0, NULL, 0, "sm_1", &none), KILN_ERROR_CONFIG, "sm_1");
  EXPECT_STATUS(kiln_compile(engine, source, NULL, 0, NULL, 0, "vax11", &none), KILN_ERROR_CONFIG, "vax11");
  const char* bad_options[] = {"--no-such-option"};
  EXPECT_STATUS(kiln_compile(engine, source, bad_options, 1, NULL, 0, "sm_90", &none), KILN_ERROR_CONFIG,
                "--no-such-option");
  const char* null_name[] = {NULL};
  EXPECT_STATUS(kiln_compile(engine, source, NULL, 0, null_name, 1, "sm_90", &none), KILN_ERROR_INVALID_ARGUMENT,
                "name_expressions[0]");
  EXPECT_STATUS(kiln_compile(engine, source, NULL, 2, NULL, 0, "sm_90", &none), KILN_ERROR_INVALID_ARGUMENT, "options");
  EXPECT_STATUS(kiln_compile(engine, source, NULL, 0, NULL, 0, "sm_90", NULL), KILN_ERROR_INVALID_ARGUMENT, "binary");
  EXPECT_STATUS(kiln_compile(NULL, source, NULL, 0, NULL, 0, "sm_90", &none), KILN_ERROR_INVALID_HANDLE, "engine");
  EXPECT_STATUS(kiln_compile(engine, NULL, NULL, 0, NULL, 0, "sm_90", &none), KILN_ERROR_INVALID_HANDLE, "source");
  if (devices == 0) {
    EXPECT_STATUS(kiln_compile(engine, source, NULL, 0, NULL, 0, NULL, &none), KILN_ERROR_DEVICE_UNAVAILABLE, NULL);
    EXPECT_STATUS(kiln_compile(engine, source, NULL, 0, NULL, 0, "native", &none), KILN_ERROR_DEVICE_UNAVAILABLE, NULL);
  }
  CHECK(none == NULL);
  kiln_binary_info small;
  kiln_binary_info_init(&small);
  small.size = sizeof(size_t);
  EXPECT_STATUS(kiln_binary_get_info(binary, &small), KILN_ERROR_INVALID_ARGUMENT, "size");
  EXPECT_STATUS(kiln_binary_get_info(binary, NULL), KILN_ERROR_INVALID_ARGUMENT, "info");
  EXPECT_STATUS(kiln_binary_log(binary, NULL), KILN_ERROR_INVALID_ARGUMENT, "log");
  kiln_binary_info_init(NULL); /* must not crash */

  /* Handles: destroyed twice, of the wrong kind, NULL. */
  EXPECT_STATUS(kiln_source_destroy((kiln_source)(void*)binary), KILN_ERROR_INVALID_HANDLE, "kind binary");
  EXPECT_STATUS(kiln_binary_destroy((kiln_binary)(void*)source), KILN_ERROR_INVALID_HANDLE, "kind source");
  EXPECT_STATUS(kiln_binary_destroy(binary), KILN_OK, NULL);
  EXPECT_STATUS(kiln_binary_destroy(binary), KILN_ERROR_INVALID_HANDLE, "destroyed");
  EXPECT_STATUS(kiln_binary_get_info(binary, &info), KILN_ERROR_INVALID_HANDLE, "destroyed");
  EXPECT_STATUS(kiln_binary_log(binary, &log), KILN_ERROR_INVALID_HANDLE, "destroyed");
  EXPECT_STATUS(kiln_binary_destroy(NULL), KILN_ERROR_INVALID_HANDLE, "NULL");
  /* The other binary of the same request is unaffected. */
  info = binary_info(again);
  CHECK(info.data_size == again_info.data_size);
  EXPECT_STATUS(kiln_binary_destroy(again), KILN_OK, NULL);

  EXPECT_STATUS(kiln_source_destroy(broken), KILN_OK, NULL);
  EXPECT_STATUS(kiln_source_destroy(source), KILN_OK, NULL);
}

/* Include folders (-I) through the C API, and the API-3 counters that count them: a first engine
 * resolves the #include tree, a second one keys the same request by its dependency manifest alone. A
 * kiln_stats as API version 2 laid it out (ending at remote_errors) is still accepted. */
static void test_include_counters(const char* cache_dir) {
  char folder[512];
  snprintf(folder, sizeof folder, "%s/include-folder", cache_dir);
  char path[600];
  snprintf(path, sizeof path, "%s/capi_inc.h", folder);
  CHECK(mkdir(folder, 0700) == 0);
  FILE* header = fopen(path, "w");
  CHECK(header != NULL);
  if (header == NULL) return;
  fputs("#pragma once\n#define CAPI_INC_VALUE 7\n", header);
  fclose(header);
  char option[600];
  snprintf(option, sizeof option, "-I%s", folder);
  const char* options[] = {option};
  kiln_source source = NULL;
  EXPECT_STATUS(kiln_source_from_text("capi_inc.cu",
                                      "#include <capi_inc.h>\n"
                                      "extern \"C\" __global__ void capi_inc(int* out) { *out = CAPI_INC_VALUE; }\n",
                                      NULL, 0, &source),
                KILN_OK, NULL);
  for (int round = 0; round < 2; ++round) {
    kiln_engine_config config;
    kiln_engine_config_init(&config);
    config.cache_dir = cache_dir;
    kiln_engine engine = NULL;
    EXPECT_STATUS(kiln_engine_create(&config, &engine), KILN_OK, NULL);
    kiln_prewarm_result result;
    kiln_prewarm_result_init(&result);
    EXPECT_STATUS(kiln_prewarm(engine, source, options, 1, NULL, 0, "sm_90", &result), KILN_OK, NULL);
    CHECK(result.origin == (round == 0 ? KILN_ORIGIN_COMPILED : KILN_ORIGIN_DISK));
    kiln_stats stats;
    kiln_stats_init(&stats);
    EXPECT_STATUS(kiln_engine_stats(engine, &stats), KILN_OK, NULL);
    CHECK(stats.include_resolves == (round == 0 ? 1u : 0u));
    CHECK(stats.manifest_hits == (round == 0 ? 0u : 1u));
    CHECK(stats.remote_unauthenticated == 0);
    /* A version-2 caller: its struct ends at remote_errors; nothing past it is written. */
    kiln_stats old;
    memset(&old, 0xab, sizeof old);
    old.size = offsetof(kiln_stats, manifest_hits);
    EXPECT_STATUS(kiln_engine_stats(engine, &old), KILN_OK, NULL);
    CHECK(old.disk_hits == stats.disk_hits);
    CHECK(old.manifest_hits == UINT64_C(0xabababababababab));
    old.size = offsetof(kiln_stats, remote_errors);
    EXPECT_STATUS(kiln_engine_stats(engine, &old), KILN_ERROR_INVALID_ARGUMENT, "stats->size");
    EXPECT_STATUS(kiln_engine_destroy(engine), KILN_OK, NULL);
  }
  EXPECT_STATUS(kiln_source_destroy(source), KILN_OK, NULL);
}

static void test_no_device(kiln_engine engine) {
  printf("kernel get without a device\n");
  kiln_source source = NULL;
  EXPECT_STATUS(kiln_source_from_text("capi_saxpy.cu", kSaxpy, kHeaders, 1, &source), KILN_OK, NULL);
  kiln_kernel kernel = NULL;
  EXPECT_STATUS(kiln_kernel_get(engine, source, "capi_saxpy", NULL, 0, -1, &kernel), KILN_ERROR_DEVICE_UNAVAILABLE,
                NULL);
  CHECK(kernel == NULL);
  kiln_program program = NULL;
  EXPECT_STATUS(kiln_program_create(engine, source, NULL, 0, NULL, 0, -1, &program), KILN_ERROR_DEVICE_UNAVAILABLE,
                NULL);
  kiln_vendor vendor = KILN_VENDOR_CUDA;
  EXPECT_STATUS(kiln_engine_vendor(engine, &vendor), KILN_OK, NULL);
  CHECK(vendor == KILN_VENDOR_AUTO);
  kiln_device_info info;
  kiln_device_info_init(&info);
  EXPECT_STATUS(kiln_engine_device_info(engine, 0, &info), KILN_ERROR_INVALID_ARGUMENT, "out of range");
  EXPECT_STATUS(kiln_source_destroy(source), KILN_OK, NULL);
}

static void test_gpu(kiln_engine engine, int device) {
  printf("GPU: kernels, launches, buffers, streams\n");
  kiln_device_info device_info;
  kiln_device_info_init(&device_info);
  EXPECT_STATUS(kiln_engine_device_info(engine, device, &device_info), KILN_OK, NULL);
  printf("  device %d: %s (%s)\n", device, device_info.name, device_info.target);

  kiln_source source = NULL;
  EXPECT_STATUS(kiln_source_from_text("capi_saxpy.cu", kSaxpy, kHeaders, 1, &source), KILN_OK, NULL);
  kiln_kernel kernel = NULL;
  EXPECT_STATUS(kiln_kernel_get(engine, source, "capi_saxpy", NULL, 0, -1, &kernel), KILN_OK, NULL);
  if (kernel == NULL) return;
  kiln_kernel_info info;
  kiln_kernel_info_init(&info);
  EXPECT_STATUS(kiln_kernel_get_info(kernel, &info), KILN_OK, NULL);
  CHECK(strcmp(info.name, "capi_saxpy") == 0);
  CHECK(info.max_threads_per_block > 0);
  CHECK(info.native_handle != NULL);
  printf("  kernel %s: %d parameters, max %d threads per block\n", info.lowered_name, info.param_count,
         info.max_threads_per_block);
  if (info.param_count >= 0) {
    CHECK(info.param_count == 4);
    size_t offset = 0, size = 0;
    EXPECT_STATUS(kiln_kernel_param(kernel, 1, &offset, &size), KILN_OK, NULL);
    CHECK(offset == 8 && size == 8);
    EXPECT_STATUS(kiln_kernel_param(kernel, 9, &offset, &size), KILN_ERROR_INVALID_ARGUMENT, "out of range");
  }

  enum { N = 1000 };
  float x[N], y[N], result[N];
  for (int i = 0; i < N; ++i) {
    x[i] = (float)i;
    y[i] = 1.0f;
  }
  void* dx = NULL;
  void* dy = NULL;
  EXPECT_STATUS(kiln_malloc(engine, sizeof x, -1, &dx), KILN_OK, NULL);
  EXPECT_STATUS(kiln_malloc(engine, sizeof y, -1, &dy), KILN_OK, NULL);
  EXPECT_STATUS(kiln_malloc(engine, 0, -1, &dy), KILN_ERROR_INVALID_ARGUMENT, "0");
  void* stream = NULL;
  EXPECT_STATUS(kiln_stream_create(engine, -1, &stream), KILN_OK, NULL);
  EXPECT_STATUS(kiln_copy_to_device(engine, dx, x, sizeof x, stream, -1), KILN_OK, NULL);
  EXPECT_STATUS(kiln_copy_to_device(engine, dy, y, sizeof y, stream, -1), KILN_OK, NULL);

  const float a = 3.0f;
  const unsigned int n = N;
  const void* args[] = {&a, &dx, &dy, &n};
  const size_t sizes[] = {sizeof a, sizeof dx, sizeof dy, sizeof n};
  EXPECT_STATUS(kiln_kernel_launch(kernel, (N + 127) / 128, 1, 1, 128, 1, 1, 0, stream, args, sizes, 4), KILN_OK, NULL);
  EXPECT_STATUS(kiln_copy_to_host(engine, result, dy, sizeof result, stream, -1), KILN_OK, NULL);
  EXPECT_STATUS(kiln_synchronize(engine, stream, -1), KILN_OK, NULL);
  int wrong = 0;
  for (int i = 0; i < N; ++i) wrong += result[i] != 2.0f * 3.0f * (float)i + 1.0f;
  CHECK(wrong == 0);
  printf("  saxpy on %d elements: %d wrong\n", N, wrong);

  /* Bad launches. */
  if (info.param_count >= 0) {
    EXPECT_STATUS(kiln_kernel_launch(kernel, 1, 1, 1, 128, 1, 1, 0, stream, args, sizes, 3), KILN_ERROR_LAUNCH, NULL);
    const size_t bad_sizes[] = {sizeof a, sizeof dx, sizeof dy, 8};
    EXPECT_STATUS(kiln_kernel_launch(kernel, 1, 1, 1, 128, 1, 1, 0, stream, args, bad_sizes, 4), KILN_ERROR_LAUNCH,
                  NULL);
  }
  EXPECT_STATUS(kiln_kernel_launch(kernel, 1, 1, 1, 0, 1, 1, 0, stream, args, sizes, 4), KILN_ERROR_INVALID_ARGUMENT,
                "block");
  EXPECT_STATUS(kiln_kernel_launch(kernel, 1, 1, 1, 4096, 1, 1, 0, stream, args, sizes, 4), KILN_ERROR_LAUNCH, NULL);
  EXPECT_STATUS(kiln_kernel_launch(kernel, 1, 1, 1, 128, 1, 1, 0, stream, NULL, sizes, 4), KILN_ERROR_INVALID_ARGUMENT,
                "args");
  const void* null_arg[] = {&a, NULL, &dy, &n};
  EXPECT_STATUS(kiln_kernel_launch(kernel, 1, 1, 1, 128, 1, 1, 0, stream, null_arg, sizes, 4),
                KILN_ERROR_INVALID_ARGUMENT, "args[1]");

  /* Programs: unknown kernel, name expressions, memory hits. */
  kiln_program program = NULL;
  const char* names[] = {"capi_scale<float>"};
  EXPECT_STATUS(kiln_program_create(engine, source, NULL, 0, names, 1, -1, &program), KILN_OK, NULL);
  kiln_program_info program_info;
  kiln_program_info_init(&program_info);
  EXPECT_STATUS(kiln_program_get_info(program, &program_info), KILN_OK, NULL);
  CHECK(is_hex32(program_info.key));
  CHECK(program_info.kernel_count >= 1);
  kiln_kernel missing = NULL;
  EXPECT_STATUS(kiln_program_get_kernel(program, "no_such_kernel", &missing), KILN_ERROR_LOAD, "no_such_kernel");
  kiln_kernel scale = NULL;
  EXPECT_STATUS(kiln_program_get_kernel(program, "capi_scale<float>", &scale), KILN_OK, NULL);
  const float factor = 0.5f;
  const void* scale_args[] = {&dy, &factor, &n};
  const size_t scale_sizes[] = {sizeof dy, sizeof factor, sizeof n};
  EXPECT_STATUS(kiln_kernel_launch(scale, (N + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, scale_args, scale_sizes, 3),
                KILN_OK, NULL);
  EXPECT_STATUS(kiln_copy_to_host(engine, result, dy, sizeof result, NULL, -1), KILN_OK, NULL);
  EXPECT_STATUS(kiln_synchronize(engine, NULL, -1), KILN_OK, NULL);
  wrong = 0;
  for (int i = 0; i < N; ++i) wrong += result[i] != 0.5f * (2.0f * 3.0f * (float)i + 1.0f);
  CHECK(wrong == 0);

  kiln_stats before, after;
  kiln_stats_init(&before);
  kiln_stats_init(&after);
  EXPECT_STATUS(kiln_engine_stats(engine, &before), KILN_OK, NULL);
  kiln_kernel again = NULL;
  EXPECT_STATUS(kiln_kernel_get(engine, source, "capi_saxpy", NULL, 0, -1, &again), KILN_OK, NULL);
  EXPECT_STATUS(kiln_engine_stats(engine, &after), KILN_OK, NULL);
  CHECK(after.memory_hits == before.memory_hits + 1);
  CHECK(after.compiles == before.compiles);

  /* Memory bookkeeping. */
  int on_stack = 0;
  EXPECT_STATUS(kiln_free(engine, &on_stack), KILN_ERROR_INVALID_ARGUMENT, "not allocated");
  EXPECT_STATUS(kiln_stream_destroy(engine, &on_stack), KILN_ERROR_INVALID_ARGUMENT, "not created");
  EXPECT_STATUS(kiln_free(engine, dx), KILN_OK, NULL);
  EXPECT_STATUS(kiln_free(engine, dx), KILN_ERROR_INVALID_ARGUMENT, "not allocated");
  EXPECT_STATUS(kiln_free(engine, NULL), KILN_OK, NULL);
  EXPECT_STATUS(kiln_stream_destroy(engine, stream), KILN_OK, NULL);

  EXPECT_STATUS(kiln_kernel_destroy(again), KILN_OK, NULL);
  EXPECT_STATUS(kiln_kernel_destroy(scale), KILN_OK, NULL);
  EXPECT_STATUS(kiln_program_destroy(program), KILN_OK, NULL);
  EXPECT_STATUS(kiln_kernel_destroy(kernel), KILN_OK, NULL);
  EXPECT_STATUS(kiln_kernel_launch(kernel, 1, 1, 1, 1, 1, 1, 0, NULL, args, sizes, 4), KILN_ERROR_INVALID_HANDLE,
                "destroyed");
  /* dy is left allocated on purpose: the engine frees it when destroyed. */
  EXPECT_STATUS(kiln_source_destroy(source), KILN_OK, NULL);
}

/* Kernels and programs of an engine become invalid handles when it is destroyed. */
static void test_gpu_destroyed_engine(void) {
  printf("GPU: kernel of a destroyed engine\n");
  kiln_engine engine = NULL;
  EXPECT_STATUS(kiln_engine_create(NULL, &engine), KILN_OK, NULL);
  kiln_source source = NULL;
  EXPECT_STATUS(kiln_source_from_text("capi_saxpy.cu", kSaxpy, kHeaders, 1, &source), KILN_OK, NULL);
  kiln_kernel kernel = NULL;
  kiln_program program = NULL;
  EXPECT_STATUS(kiln_kernel_get(engine, source, "capi_saxpy", NULL, 0, -1, &kernel), KILN_OK, NULL);
  EXPECT_STATUS(kiln_program_create(engine, source, NULL, 0, NULL, 0, -1, &program), KILN_OK, NULL);
  void* buffer = NULL;
  EXPECT_STATUS(kiln_malloc(engine, 256, -1, &buffer), KILN_OK, NULL);
  EXPECT_STATUS(kiln_engine_destroy(engine), KILN_OK, NULL);
  const float a = 1.0f;
  const unsigned int n = 0;
  const void* args[] = {&a, &buffer, &buffer, &n};
  const size_t sizes[] = {sizeof a, sizeof buffer, sizeof buffer, sizeof n};
  EXPECT_STATUS(kiln_kernel_launch(kernel, 1, 1, 1, 1, 1, 1, 0, NULL, args, sizes, 4), KILN_ERROR_INVALID_HANDLE,
                "destroyed");
  kiln_kernel other = NULL;
  EXPECT_STATUS(kiln_program_get_kernel(program, "capi_saxpy", &other), KILN_ERROR_INVALID_HANDLE, "destroyed");
  EXPECT_STATUS(kiln_kernel_destroy(kernel), KILN_ERROR_INVALID_HANDLE, "destroyed");
  EXPECT_STATUS(kiln_source_destroy(source), KILN_OK, NULL);
}

/* Third probe: an engine asked for the CUDA (or HIP) lane on a machine without its driver (a build
 * container with the toolkit) failed with "no CUDA driver found", while an engine is promised "even
 * when no device is present". It is a compile-only engine, as without a vendor; a device ordinal past
 * 0 is refused (there is none to use). */
static void test_explicit_vendor_without_device(const char* cache_dir, int can_compile) {
  printf("an explicit vendor without its driver: a compile-only engine\n");
  const kiln_vendor vendors[] = {KILN_VENDOR_CUDA, KILN_VENDOR_HIP};
  for (size_t v = 0; v < 2; ++v) {
    kiln_engine_config config;
    kiln_engine_config_init(&config);
    config.cache_dir = cache_dir;
    config.vendor = vendors[v];
    kiln_engine engine = NULL;
    EXPECT_STATUS(kiln_engine_create(&config, &engine), KILN_OK, NULL);
    if (engine == NULL) continue;
    int devices = -1, device = -2;
    EXPECT_STATUS(kiln_engine_device_count(engine, &devices, &device), KILN_OK, NULL);
    CHECK(devices == 0);
    if (can_compile && vendors[v] == KILN_VENDOR_CUDA) {
      kiln_source source = NULL;
      EXPECT_STATUS(kiln_source_from_text("vendor_only.cu", "extern \"C\" __global__ void k(int* p) { *p = 1; }\n",
                                          NULL, 0, &source),
                    KILN_OK, NULL);
      kiln_binary binary = NULL;
      EXPECT_STATUS(kiln_compile(engine, source, NULL, 0, NULL, 0, "sm_90", &binary), KILN_OK, NULL);
      EXPECT_STATUS(kiln_binary_destroy(binary), KILN_OK, NULL);
      EXPECT_STATUS(kiln_source_destroy(source), KILN_OK, NULL);
    }
    EXPECT_STATUS(kiln_engine_destroy(engine), KILN_OK, NULL);
    config.device = 99;
    engine = NULL;
    EXPECT_STATUS(kiln_engine_create(&config, &engine), KILN_ERROR_CONFIG, "no device");
    CHECK(engine == NULL);
  }
}

int main(void) {
  char cache_dir[] = "/tmp/kiln-capi-test-XXXXXX";
  if (mkdtemp(cache_dir) == NULL) {
    perror("mkdtemp");
    return 1;
  }
  test_basics();
  test_bad_handles();
  test_engine_config();
  test_destroyed_engine();
  test_sources();

  kiln_engine_config config;
  kiln_engine_config_init(&config);
  config.cache_dir = cache_dir;
  kiln_engine engine = NULL;
  EXPECT_STATUS(kiln_engine_create(&config, &engine), KILN_OK, NULL);
  if (engine == NULL) return 1;
  int devices = -1, device = -2;
  EXPECT_STATUS(kiln_engine_device_count(engine, &devices, &device), KILN_OK, NULL);
  CHECK(devices >= 0);
  CHECK(devices == 0 ? device == -1 : device >= 0);

  const int compiled = test_prewarm(engine);
  if (compiled) test_compile(engine, cache_dir, devices);
  if (compiled) test_include_counters(cache_dir);
  if (devices == 0) {
    test_no_device(engine);
    test_explicit_vendor_without_device(cache_dir, compiled);
    printf("SKIPPED (GPU part): no GPU device\n");
  } else {
    test_gpu(engine, device);
    test_gpu_destroyed_engine();
  }

  /* Errors are per thread. */
  EXPECT_STATUS(kiln_source_destroy(NULL), KILN_ERROR_INVALID_HANDLE, NULL);
  const char* seen[2] = {NULL, NULL};
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, thread_error_probe, seen) == 0);
  pthread_join(thread, NULL);
  CHECK(seen[0] != NULL && strcmp(seen[0], "empty") == 0);
  CHECK(seen[1] != NULL && strcmp(seen[1], "invalid handle") == 0);
  CHECK(strstr(kiln_last_error(), "kiln_source_destroy") != NULL); /* the main thread's error is intact */

  EXPECT_STATUS(kiln_engine_destroy(engine), KILN_OK, NULL);
  nftw(cache_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);

  printf("%d checks, %d failed%s\n", g_checks, g_failures, compiled ? "" : " (compile checks skipped: no NVRTC)");
  return g_failures == 0 ? 0 : 1;
}
