/*
 * kiln.h: the stable C API of kiln (C11 and C++; no C++ type crosses it).
 *
 * Conventions that hold for every function below unless its comment says otherwise:
 *  - Every function returns a kiln_status. KILN_OK (0) is success; any other value is an error, and
 *    kiln_last_error() then returns a message that says what failed, where and why.
 *  - Out-parameters are written only on success.
 *  - No function crashes on bad input and no C++ exception ever leaves the library: a null, foreign
 *    or already destroyed handle gives KILN_ERROR_INVALID_HANDLE, a null pointer where one is
 *    required gives KILN_ERROR_INVALID_ARGUMENT.
 *  - Handles are opaque ids, never pointers into memory: using a handle after it was destroyed (or
 *    after its engine was destroyed) is a reported error, not undefined behaviour. Ids are never reused
 *    within a process.
 *  - Every function is thread-safe. Handles may be shared between threads; destroying a handle while
 *    another thread uses it is allowed (the other call either completes or reports the handle gone).
 *  - Strings passed in are NUL-terminated UTF-8 and are copied before the call returns; the caller
 *    keeps ownership. Strings handed out are owned by the library; each comment says how long they stay
 *    valid.
 */
#ifndef KILN_KILN_H
#define KILN_KILN_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define KILN_API
#elif defined(__GNUC__) || defined(__clang__)
#define KILN_API __attribute__((visibility("default")))
#else
#define KILN_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/** The version of this header's API. Bumped when a function or struct field is added or changed.
 *  Compare with kiln_api_version() to detect a library older than the header.
 *  2: kiln_compile and kiln_binary (compile-only binaries); KILN_ORIGIN_PACK and KILN_ORIGIN_REMOTE.
 *  3: kiln_stats gains manifest_hits, include_resolves and remote_unauthenticated (a caller built
 *     against version 2, whose kiln_stats ends at remote_errors, is still served).
 *  4: kiln_stats gains pch_made and pch_used (NVRTC precompiled headers).
 *  5: KILN_BINARY_LTOIR (lto_XY targets: NVIDIA LTO-IR from kiln_compile / kiln_prewarm) and the option
 *     --relocatable-device-code; no function or struct changed (a caller built against version 4 is
 *     served as before, and meets the new kind only when it asks for an lto_XY target).
 *  6: entries under a caller's key ("blobs"): kiln_blob_put, kiln_blob_get, kiln_blob_data,
 *     kiln_blob_destroy, kiln_blob_remove, kiln_blob_count, kiln_blob_clear and the kiln_blob handle
 *     (e.g. a cuda.core ProgramCacheResource over kiln's cache); no function or struct changed.
 *  7: labels on blobs (kiln_blob_put_labeled, kiln_blob_get_label and struct kiln_blob_label: what `kiln cache
 *     ls/show/stats` show, e.g. a Triton kernel's name and target) and the engine flag KILN_ENGINE_NO_RUNTIME
 *     (an engine for the cache and compiles only: no GPU runtime loaded); no function or struct changed.
 *  8: kiln_engine_record_stats (an engine kept until the process exits records its counters in the cache's
 *     lifetime counters without being destroyed); no function or struct changed. */
#define KILN_API_VERSION 8

/* ------------------------------------------------------------------------------------------------ */
/* Status codes and errors                                                                          */
/* ------------------------------------------------------------------------------------------------ */

typedef enum kiln_status {
  KILN_OK = 0,
  KILN_ERROR_INVALID_ARGUMENT = 1,   /**< a null pointer, a bad count, a size field too small, ... */
  KILN_ERROR_INVALID_HANDLE = 2,     /**< a null, foreign or destroyed handle (or one of a destroyed engine) */
  KILN_ERROR_COMPILE = 3,            /**< the compiler rejected the source: see kiln_last_compile_log() */
  KILN_ERROR_LOAD = 4,               /**< a binary did not load, or the module has no such kernel */
  KILN_ERROR_LAUNCH = 5,             /**< a launch, copy or stream operation was refused (by kiln or the driver) */
  KILN_ERROR_CONFIG = 6,             /**< bad configuration: unknown target/option/built-in, empty source, bad env */
  KILN_ERROR_DEVICE_UNAVAILABLE = 7, /**< no vendor library or no device for what was asked */
  KILN_ERROR_OUT_OF_MEMORY = 8,      /**< host or device memory ran out */
  KILN_ERROR_INTERNAL = 9            /**< a fault inside kiln (a bug): the message says where */
} kiln_status;

/** The API version the library was built with (KILN_API_VERSION of its header). Never fails. */
KILN_API int kiln_api_version(void);

/** A constant name for a status, e.g. "KILN_ERROR_COMPILE". Never NULL; unknown values give
 *  "KILN_ERROR_UNKNOWN". The string is static. */
KILN_API const char* kiln_status_name(kiln_status status);

/** The message of the most recent failing call on the calling thread, or "" when none failed yet.
 *  Successful calls do not clear it. Never NULL. The string stays valid until the next failing call on
 *  the same thread. */
KILN_API const char* kiln_last_error(void);

/** The whole compiler log of the most recent KILN_ERROR_COMPILE on the calling thread ("" when there
 *  was none, or the compiler printed nothing). Never NULL. Valid until the next failing call on the
 *  same thread. */
KILN_API const char* kiln_last_compile_log(void);

/* ------------------------------------------------------------------------------------------------ */
/* Handles                                                                                          */
/* ------------------------------------------------------------------------------------------------ */

typedef struct kiln_engine_s* kiln_engine;   /**< an engine: vendor lane, device, cache */
typedef struct kiln_source_s* kiln_source;   /**< a kernel source; independent of any engine */
typedef struct kiln_program_s* kiln_program; /**< a compiled module loaded on one device of one engine */
typedef struct kiln_kernel_s* kiln_kernel;   /**< a launchable kernel of one engine */
typedef struct kiln_binary_s* kiln_binary;   /**< a compiled binary, not loaded; outlives its engine */
typedef struct kiln_blob_s* kiln_blob;       /**< bytes stored under a caller's key (API 6); outlives its engine */

typedef enum kiln_vendor {
  KILN_VENDOR_AUTO = 0, /**< in a config: KILN_VENDOR, else the first lane with a device. As a result: none */
  KILN_VENDOR_CUDA = 1,
  KILN_VENDOR_HIP = 2
} kiln_vendor;

/** Where a binary came from. Programs and prewarm report a hit of any cache tier (local disk, a
 *  mounted pack, the remote) as KILN_ORIGIN_DISK; only a kiln_binary tells PACK and REMOTE apart. */
typedef enum kiln_origin {
  KILN_ORIGIN_MEMORY = 0,   /**< the engine's memory: a loaded module, or an earlier kiln_compile */
  KILN_ORIGIN_DISK = 1,     /**< the local disk cache (programs, prewarm: any cache tier) */
  KILN_ORIGIN_COMPILED = 2, /**< compiled by this call */
  KILN_ORIGIN_PACK = 3,     /**< a mounted pack (KILN_CACHE_PACKS); kiln_binary only */
  KILN_ORIGIN_REMOTE = 4    /**< the remote cache (KILN_REMOTE_CACHE); kiln_binary only */
} kiln_origin;

/* ------------------------------------------------------------------------------------------------ */
/* Engine                                                                                           */
/* ------------------------------------------------------------------------------------------------ */

/** Engine flags (kiln_engine_config.flags). */
#define KILN_ENGINE_CACHE_DISABLE 0x1u  /**< memory only: no disk cache (as KILN_CACHE_DISABLE=1) */
#define KILN_ENGINE_CACHE_READONLY 0x2u /**< serve disk hits, write nothing (as KILN_CACHE_READONLY=1) */
/** (API 7) No GPU runtime: the engine loads no driver (no cuInit, no device query) and has no device, so
 *  it serves what needs none: kiln_compile and kiln_prewarm for named targets, and blobs. For a process that
 *  only keeps a cache (e.g. a compile worker that must not initialise CUDA); kernel and program calls fail
 *  with KILN_ERROR_DEVICE_UNAVAILABLE. A library older than API 7 refuses the flag (INVALID_ARGUMENT). */
#define KILN_ENGINE_NO_RUNTIME 0x4u

/** Engine configuration. Set `size` to sizeof(kiln_engine_config) (kiln_engine_config_init does):
 *  the library reads only the fields that fit in `size`, so a program built against an older header
 *  keeps working with a newer library. Fields left at their init values take the environment's
 *  settings (KILN_VENDOR, KILN_DEVICE, KILN_CACHE_DIR, KILN_CACHE_*), then kiln's defaults. */
typedef struct kiln_engine_config {
  size_t size;             /**< sizeof(kiln_engine_config) */
  kiln_vendor vendor;      /**< KILN_VENDOR_AUTO: from KILN_VENDOR, else the first lane with a device */
  int device;              /**< -1: KILN_DEVICE, else 0 */
  const char* cache_dir;   /**< NULL: KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln */
  uint32_t flags;          /**< KILN_ENGINE_* bits, added to what the environment sets */
  uint64_t cache_max_size; /**< bytes; 0: KILN_CACHE_MAXSIZE, else 4 GiB */
} kiln_engine_config;

/** Fills `config` with the defaults (everything from the environment) and sets its size. Does nothing
 *  when `config` is NULL. Never fails. */
KILN_API void kiln_engine_config_init(kiln_engine_config* config);

/** Creates an engine. `config` may be NULL (everything from the environment). An engine is created
 *  even when no device is present, also when a vendor is named (config or KILN_VENDOR) whose runtime
 *  cannot be loaded (a build machine with the toolkit but no driver): it can still compile and prewarm
 *  (kiln_compile, kiln_prewarm); kernel gets then fail with KILN_ERROR_DEVICE_UNAVAILABLE. A device
 *  ordinal past the last device (past 0 when there is none) is CONFIG. The caller owns `*engine` and destroys it with
 *  kiln_engine_destroy.
 *  Errors: INVALID_ARGUMENT (engine NULL; config->size smaller than the first version of the struct, or
 *  larger with unknown non-zero fields), CONFIG (a malformed KILN_* variable or field), INTERNAL. */
KILN_API kiln_status kiln_engine_create(const kiln_engine_config* config, kiln_engine* engine);

/** Destroys an engine: every program and kernel handle obtained from it becomes invalid
 *  (INVALID_HANDLE from then on), every buffer and stream it allocated that was not freed is freed,
 *  and its modules are unloaded once calls in flight on other threads have returned. Sources are not
 *  affected. Errors: INVALID_HANDLE (NULL, or already destroyed). */
KILN_API kiln_status kiln_engine_destroy(kiln_engine engine);

/** The vendor lane that runs kernels: CUDA or HIP, or KILN_VENDOR_AUTO (0) when there is no device.
 *  Errors: INVALID_HANDLE, INVALID_ARGUMENT (vendor NULL). */
KILN_API kiln_status kiln_engine_vendor(kiln_engine engine, kiln_vendor* vendor);

/** The number of devices of the engine's lane (0 without a device) and the default device ordinal
 *  (-1 without a device); either pointer may be NULL. Errors: INVALID_HANDLE. */
KILN_API kiln_status kiln_engine_device_count(kiln_engine engine, int* count, int* default_device);

/** What kiln knows about one device. Set `size` before the call (kiln_device_info_init). */
typedef struct kiln_device_info {
  size_t size; /**< sizeof(kiln_device_info) */
  kiln_vendor vendor;
  int ordinal;
  char name[128];  /**< "NVIDIA H200" (truncated, always NUL-terminated) */
  char target[64]; /**< "sm_90", "gfx90a:sramecc+:xnack-" */
  int warp_size;
  int max_threads_per_block;
  int multiprocessors;
  uint64_t total_memory;         /**< bytes */
  uint64_t max_shared_per_block; /**< bytes a block may opt in to */
} kiln_device_info;

/** Sets `info->size`; does nothing when `info` is NULL. Never fails. */
KILN_API void kiln_device_info_init(kiln_device_info* info);

/** Describes device `ordinal` of the engine's lane. Errors: INVALID_HANDLE, INVALID_ARGUMENT (info
 *  NULL, info->size too small, ordinal out of range). */
KILN_API kiln_status kiln_engine_device_info(kiln_engine engine, int ordinal, kiln_device_info* info);

/** Counters of one engine since it was created. Set `size` before the call (kiln_stats_init). */
typedef struct kiln_stats {
  size_t size;          /**< sizeof(kiln_stats) */
  uint64_t memory_hits; /**< requests served by the engine's loaded modules (or kiln_compile's memory) */
  uint64_t disk_hits;   /**< requests served by the disk cache */
  uint64_t misses;      /**< requests that reached the compiler (or waited on another's compile) */
  uint64_t compiles;
  uint64_t compile_failures;
  uint64_t compile_nanoseconds; /**< total time spent compiling */
  uint64_t corrupt_removed;     /**< damaged cache entries deleted */
  uint64_t evictions;
  uint64_t bytes_written;
  uint64_t bytes_read;
  uint64_t remote_hits;
  uint64_t remote_misses;
  uint64_t remote_errors;
  /* API version 3: */
  uint64_t manifest_hits;          /**< requests with include folders keyed by their dependency manifest (no header read) */
  uint64_t include_resolves;       /**< requests whose #include tree kiln resolved (headers read): those with include folders, or an include by absolute path or macro */
  uint64_t remote_unauthenticated; /**< remote entries refused for a missing or wrong MAC (a fleet secret is set) */
  /* API version 4: */
  uint64_t pch_made;               /**< compiles that made an NVRTC precompiled header (KILN_PCH) */
  uint64_t pch_used;               /**< compiles that used one */
} kiln_stats;

/** Sets `stats->size` and zeroes the counters; does nothing when `stats` is NULL. Never fails. */
KILN_API void kiln_stats_init(kiln_stats* stats);

/** Copies the engine's counters into `*stats`: as many as stats->size holds (a version-2 struct, which
 *  ends at remote_errors, gets those). Errors: INVALID_HANDLE, INVALID_ARGUMENT (stats NULL or
 *  stats->size smaller than a version-2 kiln_stats). */
KILN_API kiln_status kiln_engine_stats(kiln_engine engine, kiln_stats* stats);

/** Adds the engine's counters since it was created, or since its last record, to the cache's lifetime
 *  counters (what `kiln cache stats` shows for every process); kiln_engine_destroy records the rest, so
 *  nothing counts twice. For a runtime that keeps an engine until the process exits and does not destroy it
 *  then: call it at exit. Nothing is recorded for a read-only or memory-only cache; a failed write is not an
 *  error. Errors: INVALID_HANDLE. (API version 8.) */
KILN_API kiln_status kiln_engine_record_stats(kiln_engine engine);

/* ------------------------------------------------------------------------------------------------ */
/* Sources                                                                                          */
/* ------------------------------------------------------------------------------------------------ */

/** An in-memory header: what `#include "name"` (or <name>) resolves to. */
typedef struct kiln_header {
  const char* name;
  const char* text;
} kiln_header;

/** A source from text. `name` (NULL: "source.cu") is the compiler's file name: it appears in compiler
 *  messages and in `__FILE__`, and it is part of the cache key. `headers` (may be NULL when
 *  `header_count` is 0) are copied. Every source also sees kiln's embedded headers
 *  (`#include <kiln/rtc.h>`). The caller owns `*source` and destroys it with kiln_source_destroy.
 *  Errors: INVALID_ARGUMENT (text or source NULL, a header with a NULL name or text), CONFIG (empty
 *  text). */
KILN_API kiln_status kiln_source_from_text(const char* name, const char* text, const kiln_header* headers,
                                           size_t header_count, kiln_source* source);

/** A built-in (embedded) source by file name, with or without ".cu" ("saxpy" or "saxpy.cu").
 *  Errors: INVALID_ARGUMENT (NULL pointer), CONFIG (no such built-in: the message lists them). */
KILN_API kiln_status kiln_source_builtin(const char* name, kiln_source* source);

/** Destroys a source. Programs and kernels made from it are not affected.
 *  Errors: INVALID_HANDLE. */
KILN_API kiln_status kiln_source_destroy(kiln_source source);

/** The number of built-in sources, and the name of built-in `index` ("saxpy.cu"). Either pointer may
 *  be NULL. The name is static (valid until the library is unloaded). Errors: INVALID_ARGUMENT (index
 *  out of range when `name` is not NULL). */
KILN_API kiln_status kiln_builtin_source_name(size_t index, size_t* count, const char** name);

/* ------------------------------------------------------------------------------------------------ */
/* Programs and kernels                                                                             */
/* ------------------------------------------------------------------------------------------------ */
/* Options are kiln's portable spellings (see kiln/options.hpp): "-DNAME=VALUE", "-UNAME",
 * "-std=c++20", "--fast-math", "--line-info", "--device-debug", "--no-fma", "--max-registers=N",
 * "-Xcuda=FLAG", "-Xhip=FLAG". A name expression is a kernel named with template arguments, e.g.
 * "scale<float, 4>"; a plain extern "C" name needs none. */

/** Compiles (or finds in the cache) and loads a program on `device` (-1: the engine's default).
 *  `options` (`option_count` strings) and `name_expressions` (`name_count` strings) may be NULL when
 *  their count is 0. The caller owns `*program` (kiln_program_destroy); it becomes invalid when its
 *  engine is destroyed.
 *  Errors: INVALID_HANDLE (engine, source), INVALID_ARGUMENT (NULL pointers or NULL strings in the
 *  arrays), CONFIG (bad option), COMPILE (log: kiln_last_compile_log), LOAD, DEVICE_UNAVAILABLE (no
 *  device, no driver). */
KILN_API kiln_status kiln_program_create(kiln_engine engine, kiln_source source, const char* const* options,
                                         size_t option_count, const char* const* name_expressions, size_t name_count,
                                         int device, kiln_program* program);

/** Destroys a program handle. Kernels obtained from it stay valid. Errors: INVALID_HANDLE. */
KILN_API kiln_status kiln_program_destroy(kiln_program program);

/** A kernel of a program, by plain name or by one of the program's name expressions. The caller owns
 *  `*kernel` (kiln_kernel_destroy). Errors: INVALID_HANDLE, INVALID_ARGUMENT, LOAD (no such kernel: the
 *  message lists the kernels the module has). */
KILN_API kiln_status kiln_program_get_kernel(kiln_program program, const char* name, kiln_kernel* kernel);

/** Facts about a program. Set `size` before the call (kiln_program_info_init). */
typedef struct kiln_program_info {
  size_t size;     /**< sizeof(kiln_program_info) */
  char key[33];    /**< the cache key: 32 lower-case hex digits */
  char target[64]; /**< "sm_90", ... */
  int device;
  kiln_origin origin; /**< where the binary came from when the program was created */
  size_t kernel_count;
} kiln_program_info;

/** Sets `info->size`; does nothing when `info` is NULL. Never fails. */
KILN_API void kiln_program_info_init(kiln_program_info* info);

/** Describes a program. Errors: INVALID_HANDLE, INVALID_ARGUMENT (info NULL or info->size too small). */
KILN_API kiln_status kiln_program_get_info(kiln_program program, kiln_program_info* info);

/** The name of kernel `index` (< kernel_count) of a program. The string is owned by the program handle
 *  and valid until it is destroyed. Errors: INVALID_HANDLE, INVALID_ARGUMENT (index out of range, name
 *  NULL). */
KILN_API kiln_status kiln_program_kernel_name(kiln_program program, size_t index, const char** name);

/** Shortcut: compiles (or finds) the program for one kernel and returns the kernel. `name` is a plain
 *  name or a name expression (then it is also the program's only name expression). Same ownership and
 *  errors as kiln_program_create + kiln_program_get_kernel. */
KILN_API kiln_status kiln_kernel_get(kiln_engine engine, kiln_source source, const char* name,
                                     const char* const* options, size_t option_count, int device, kiln_kernel* kernel);

/** Destroys a kernel handle. Errors: INVALID_HANDLE. */
KILN_API kiln_status kiln_kernel_destroy(kiln_kernel kernel);

/** Facts about a kernel. Set `size` before the call (kiln_kernel_info_init). */
typedef struct kiln_kernel_info {
  size_t size; /**< sizeof(kiln_kernel_info) */
  int device;
  int max_threads_per_block; /**< the most threads a block of this kernel may have */
  int param_count;           /**< parameters the binary declares; -1 when the driver cannot tell */
  const char* name;          /**< as requested; owned by the kernel handle */
  const char* lowered_name;  /**< the symbol in the binary; owned by the kernel handle */
  void* native_handle;       /**< CUfunction / hipFunction_t */
} kiln_kernel_info;

/** Sets `info->size`; does nothing when `info` is NULL. Never fails. */
KILN_API void kiln_kernel_info_init(kiln_kernel_info* info);

/** Describes a kernel. The strings stay valid until the kernel handle is destroyed.
 *  Errors: INVALID_HANDLE, INVALID_ARGUMENT (info NULL or info->size too small). */
KILN_API kiln_status kiln_kernel_get_info(kiln_kernel kernel, kiln_kernel_info* info);

/** The byte offset and size of parameter `index` as the binary declares it.
 *  Errors: INVALID_HANDLE, INVALID_ARGUMENT (NULL pointers, index out of range), LOAD (the driver does
 *  not tell parameter layouts: param_count is -1). */
KILN_API kiln_status kiln_kernel_param(kiln_kernel kernel, size_t index, size_t* offset, size_t* size);

/** Launches a kernel on `stream` (a raw CUstream / hipStream_t, e.g. CuPy's
 *  `cupy.cuda.get_current_stream().ptr` or PyTorch's `torch.cuda.current_stream().cuda_stream`;
 *  NULL = the legacy default stream). Asynchronous: returns once the launch is queued.
 *
 *  Arguments: `args[i]` points at the value of argument i (for a device pointer argument: at the
 *  pointer variable), `arg_sizes[i]` is its size in bytes. Both may be NULL when `arg_count` is 0.
 *  Packing: when the binary declares its parameter layout (kiln_kernel_info.param_count >= 0), each
 *  argument is placed at its declared offset and its size must match. Otherwise each argument is
 *  aligned to its natural alignment, taken as min(its size rounded up to a power of two, 8) bytes: right
 *  for scalars, pointers and structs of 4- or 8-byte members; pass a 16-byte aligned type (float4) or an
 *  odd-sized struct only to kernels whose layout is declared.
 *  The argument count and sizes are checked against the binary, and the block against the kernel's
 *  limit, before the driver is called.
 *  Errors: INVALID_HANDLE, INVALID_ARGUMENT (NULL arrays with a non-zero count, a NULL argument pointer,
 *  a zero size, a zero grid or block dimension), LAUNCH (wrong argument count or size, block too big,
 *  the driver refused: the message names the call and its error). */
KILN_API kiln_status kiln_kernel_launch(kiln_kernel kernel, uint32_t grid_x, uint32_t grid_y, uint32_t grid_z,
                                        uint32_t block_x, uint32_t block_y, uint32_t block_z, uint32_t shared_bytes,
                                        void* stream, const void* const* args, const size_t* arg_sizes,
                                        size_t arg_count);

/* ------------------------------------------------------------------------------------------------ */
/* Prewarm: compile into the disk cache without a device                                            */
/* ------------------------------------------------------------------------------------------------ */

/** The outcome of a prewarm. Set `size` before the call (kiln_prewarm_result_init). */
typedef struct kiln_prewarm_result {
  size_t size;        /**< sizeof(kiln_prewarm_result) */
  char key[33];       /**< the cache key: 32 lower-case hex digits */
  char target[64];    /**< the resolved target */
  kiln_origin origin; /**< KILN_ORIGIN_DISK (was cached) or KILN_ORIGIN_COMPILED */
  double seconds;     /**< time taken */
  uint64_t binary_bytes;
  int stored; /**< 1 when the binary was written to the disk cache */
} kiln_prewarm_result;

/** Sets `result->size`; does nothing when `result` is NULL. Never fails. */
KILN_API void kiln_prewarm_result_init(kiln_prewarm_result* result);

/** Compiles a source into the engine's disk cache for `target` ("sm_90", "sm_90a", "lto_90", "gfx90a",
 *  or "native" for the engine's device) without loading it. Needs no GPU for a named target; the vendor
 *  follows from the target (sm_/compute_/lto_: CUDA; gfx: HIP). `result` may be NULL.
 *  Errors: INVALID_HANDLE, INVALID_ARGUMENT (NULL pointers, result->size too small), CONFIG (unknown
 *  target, bad option, a name whose symbol is not a kernel of the binary: the message lists the kernels
 *  it has; the binary stays cached), COMPILE (log: kiln_last_compile_log), DEVICE_UNAVAILABLE (no
 *  compiler for the target's vendor; "native" without a device). */
KILN_API kiln_status kiln_prewarm(kiln_engine engine, kiln_source source, const char* const* options,
                                  size_t option_count, const char* const* name_expressions, size_t name_count,
                                  const char* target, kiln_prewarm_result* result);

/* ------------------------------------------------------------------------------------------------ */
/* Compile only: the binary itself, for runtimes that load modules themselves                        */
/* ------------------------------------------------------------------------------------------------ */

/** What a binary is. */
typedef enum kiln_binary_kind {
  KILN_BINARY_CUBIN = 1,          /**< an NVIDIA ELF for one sm_XX target (cuModuleLoadData) */
  KILN_BINARY_PTX = 2,            /**< NVIDIA PTX text for a compute_XX target; not NUL-terminated */
  KILN_BINARY_AMD_CODE_OBJECT = 3, /**< an AMDGPU code object for one gfx target (hipModuleLoadData) */
  KILN_BINARY_LTOIR = 4            /**< NVIDIA LTO-IR for an lto_XX target (API 5): input to a link step
                                        (nvJitLinkAddData with NVJITLINK_INPUT_LTOIR, linked with -lto);
                                        not a module: kiln never loads it */
} kiln_binary_kind;

/** Compiles (or finds) a source's binary for `target` and returns it without loading it: for
 *  runtimes (CuPy, Numba, Warp) that load modules and launch through their own machinery. `target`
 *  is "sm_90", "sm_90a", "compute_90" (PTX), "lto_90" (LTO-IR, API 5), "gfx90a", ..., or NULL /
 *  "native" for the engine's default device. Needs no GPU for a named target. Lookup order: the
 *  engine's memory (the same request answered earlier by this engine's kiln_compile: KILN_ORIGIN_MEMORY, no disk access; the
 *  engine remembers its last 256 such requests), the disk cache and its tiers, then the compiler. A
 *  compiled binary is stored in the disk cache like kiln_prewarm. `options`, `name_expressions` as
 *  kiln_program_create.
 *  The caller owns `*binary` and destroys it with kiln_binary_destroy. A binary owns its bytes: it
 *  stays valid after its engine is destroyed.
 *  Errors: INVALID_HANDLE (engine, source), INVALID_ARGUMENT (binary NULL, NULL pointers or NULL
 *  strings in the arrays), CONFIG (unknown target, bad option), COMPILE (log: kiln_last_compile_log),
 *  DEVICE_UNAVAILABLE (no compiler for the target's vendor; "native" without a device). */
KILN_API kiln_status kiln_compile(kiln_engine engine, kiln_source source, const char* const* options,
                                  size_t option_count, const char* const* name_expressions, size_t name_count,
                                  const char* target, kiln_binary* binary);

/** Destroys a binary handle; its data and strings are released. Errors: INVALID_HANDLE (NULL, foreign,
 *  or already destroyed). */
KILN_API kiln_status kiln_binary_destroy(kiln_binary binary);

/** Facts about a binary. Set `size` before the call (kiln_binary_info_init). */
typedef struct kiln_binary_info {
  size_t size;           /**< sizeof(kiln_binary_info) */
  const void* data;      /**< the binary's bytes; owned by the binary handle, valid until kiln_binary_destroy */
  size_t data_size;      /**< bytes at `data` */
  kiln_binary_kind kind; /**< CUBIN, PTX, AMD code object or (API 5) LTO-IR */
  char target[64];       /**< the resolved target: "sm_90", "gfx90a:sramecc+:xnack-" */
  char key[33];          /**< the cache key: 32 lower-case hex digits (as kiln_prewarm gives) */
  kiln_origin origin;    /**< MEMORY, DISK, PACK, REMOTE or COMPILED */
  size_t name_count;     /**< name expressions of the request (kiln_binary_name) */
  double seconds;        /**< time the kiln_compile call took */
} kiln_binary_info;

/** Sets `info->size`; does nothing when `info` is NULL. Never fails. */
KILN_API void kiln_binary_info_init(kiln_binary_info* info);

/** Describes a binary. `info->data` stays valid until the binary handle is destroyed.
 *  Errors: INVALID_HANDLE, INVALID_ARGUMENT (info NULL or info->size too small). */
KILN_API kiln_status kiln_binary_get_info(kiln_binary binary, kiln_binary_info* info);

/** Name expression `index` (< name_count, sorted by expression) of a binary's request and the symbol
 *  it lowered to (what cuModuleGetFunction needs). Either out-pointer may be NULL. The strings are
 *  owned by the binary handle and valid until it is destroyed.
 *  Errors: INVALID_HANDLE, INVALID_ARGUMENT (index out of range). */
KILN_API kiln_status kiln_binary_name(kiln_binary binary, size_t index, const char** expression, const char** lowered);

/** The symbol a name expression of the binary's request lowered to. Owned by the binary handle, valid
 *  until it is destroyed. Errors: INVALID_HANDLE, INVALID_ARGUMENT (NULL pointers; `expression` is not
 *  one of the request's name expressions: the message lists them). */
KILN_API kiln_status kiln_binary_lowered_name(kiln_binary binary, const char* expression, const char** lowered);

/** The compiler's log of the compile that made this binary (warnings; often ""). "" when the binary
 *  came from a cache or the engine's memory (origin other than COMPILED): logs are not cached. Owned
 *  by the binary handle, valid until it is destroyed. Errors: INVALID_HANDLE, INVALID_ARGUMENT (log
 *  NULL). */
KILN_API kiln_status kiln_binary_log(kiln_binary binary, const char** log);

/* ------------------------------------------------------------------------------------------------ */
/* Entries under a caller's key ("blobs", API 6)                                                    */
/* ------------------------------------------------------------------------------------------------ */
/* Bytes a caller stores in the engine's disk cache under a key of its own: a namespace (a NUL-terminated
 * string of 1 to KILN_BLOB_MAX_NAMESPACE bytes naming the caller's entries, e.g. "cuda.core") and a key
 * (0 to KILN_BLOB_MAX_KEY bytes, any bytes; NULL when key_size is 0). They are cache entries as compiled
 * binaries are (KIND `blob` in `kiln cache ls`; `kiln cache show` names the namespace): checksummed and
 * verified on every read (a damaged one is removed, counted in corrupt_removed and answered as a miss),
 * held to the cache's size cap (least recently used first), found in mounted packs and the remote cache
 * (KILN_CACHE_PACKS, KILN_REMOTE_CACHE) after a local miss, and published to the remote when put (with a
 * MAC where a fleet secret is set, as every entry). Their kiln key is made from a domain tag, the
 * namespace and the key: it never equals the key of a compiled binary. A hit counts in kiln_stats as
 * disk_hits (local or pack) or remote_hits, a put in bytes_written; a miss counts in no field (it
 * reaches no compiler). */

#define KILN_BLOB_MAX_NAMESPACE 256u /**< bytes of a blob namespace, at most */
#define KILN_BLOB_MAX_KEY 65536u     /**< bytes of a blob key, at most */

/** Stores the `size` bytes at `data` (NULL when size is 0) under (`name_space`, `key`), replacing what was
 *  there, and offers them to the remote cache. `stored` (may be NULL) gets 1 when the local disk cache
 *  took them and 0 when it did not (a read-only or disabled cache, a full disk: a cache that cannot write
 *  fails no caller; a failed write is warned about once per engine).
 *  Errors: INVALID_HANDLE, INVALID_ARGUMENT (name_space NULL, empty, holding more than
 *  KILN_BLOB_MAX_NAMESPACE bytes; key NULL with key_size > 0; key_size over KILN_BLOB_MAX_KEY; data NULL
 *  with size > 0; size over the cache's payload limit of 512 MiB). */
KILN_API kiln_status kiln_blob_put(kiln_engine engine, const char* name_space, const void* key, size_t key_size,
                                   const void* data, size_t size, int* stored);

/** Looks (`name_space`, `key`) up: the local disk cache, then each mounted pack, then the remote cache (a
 *  hit there is copied into the local cache). On a hit `*blob` is a new handle that the caller destroys
 *  with kiln_blob_destroy; on a miss `*blob` is NULL (also when what was stored was damaged: it was
 *  removed). Errors: INVALID_HANDLE, INVALID_ARGUMENT (blob NULL; name_space and key as kiln_blob_put). */
KILN_API kiln_status kiln_blob_get(kiln_engine engine, const char* name_space, const void* key, size_t key_size,
                                   kiln_blob* blob);

/** The bytes of a blob: `*data` stays valid until kiln_blob_destroy. `origin` (may be NULL) gets where
 *  kiln_blob_get found it: KILN_ORIGIN_DISK, KILN_ORIGIN_PACK or KILN_ORIGIN_REMOTE.
 *  Errors: INVALID_HANDLE, INVALID_ARGUMENT (data or size NULL). */
KILN_API kiln_status kiln_blob_data(kiln_blob blob, const void** data, size_t* size, kiln_origin* origin);

/** Destroys a blob handle and releases its bytes. Errors: INVALID_HANDLE. */
KILN_API kiln_status kiln_blob_destroy(kiln_blob blob);

/** Removes the entry under (`name_space`, `key`) from the local disk cache and asks the remote cache to
 *  delete its copy (a mounted pack is read-only: an entry it holds is still found). `removed` (may be
 *  NULL) gets 1 when a local entry was removed, else 0. A read-only or disabled cache removes nothing.
 *  Errors: INVALID_HANDLE, INVALID_ARGUMENT (name_space and key as kiln_blob_put). */
KILN_API kiln_status kiln_blob_remove(kiln_engine engine, const char* name_space, const void* key, size_t key_size,
                                      int* removed);

/** The number of entries of `name_space` in the local disk cache, counted from their headers (packs and
 *  the remote cache cannot be listed by namespace and are not counted). Errors: INVALID_HANDLE,
 *  INVALID_ARGUMENT (count NULL; name_space as kiln_blob_put). */
KILN_API kiln_status kiln_blob_count(kiln_engine engine, const char* name_space, uint64_t* count);

/** Removes every entry of `name_space` from the local disk cache; entries of other namespaces, compiled
 *  binaries and the remote cache's copies stay. `removed` (may be NULL) gets how many were removed.
 *  Errors: INVALID_HANDLE, INVALID_ARGUMENT (name_space as kiln_blob_put). */
KILN_API kiln_status kiln_blob_clear(kiln_engine engine, const char* name_space, uint64_t* removed);

/* Labels (API 7): what a caller says a blob is, for people and the CLI, stored in the entry beside its bytes
 * (not part of its key: a put with other labels replaces the entry). A name is 1 to
 * KILN_BLOB_MAX_LABEL_NAME bytes of A-Z a-z 0-9 _ . - (unique within the blob), a value 0 to
 * KILN_BLOB_MAX_LABEL_VALUE bytes. `kiln cache ls`, `show` and `stats` read three names: `target` (a target
 * id such as "sm_90": the TARGET column, and what `--target` of ls, prune and export matches), `kernel` (the
 * KERNELS column) and `file` (after the namespace in the SOURCE column); `show` prints every label. A
 * library older than API 7 reads a labeled blob as any other (it shows no labels). */

#define KILN_BLOB_MAX_LABELS 16u        /**< labels of one blob, at most */
#define KILN_BLOB_MAX_LABEL_NAME 64u    /**< bytes of a label's name, at most */
#define KILN_BLOB_MAX_LABEL_VALUE 1024u /**< bytes of a label's value, at most */

/** One label: two NUL-terminated strings, copied by the call that takes them. */
typedef struct kiln_blob_label {
  const char* name;
  const char* value;
} kiln_blob_label;

/** kiln_blob_put with `label_count` labels (`labels` may be NULL when label_count is 0).
 *  Errors: as kiln_blob_put, and INVALID_ARGUMENT for labels NULL with label_count > 0, a NULL name or
 *  value, more than KILN_BLOB_MAX_LABELS labels, a name that is empty, too long, repeated or holds another
 *  character, a value over KILN_BLOB_MAX_LABEL_VALUE bytes. */
KILN_API kiln_status kiln_blob_put_labeled(kiln_engine engine, const char* name_space, const void* key,
                                           size_t key_size, const void* data, size_t size,
                                           const kiln_blob_label* labels, size_t label_count, int* stored);

/** Label `index` of a blob from kiln_blob_get, in the order it was put; `count` (may be NULL) gets how many
 *  the blob has. `name` and `value` (either may be NULL) are owned by the blob handle and valid until
 *  kiln_blob_destroy. Errors: INVALID_HANDLE, INVALID_ARGUMENT (index >= the count when name or value is
 *  not NULL). */
KILN_API kiln_status kiln_blob_get_label(kiln_blob blob, size_t index, size_t* count, const char** name,
                                     const char** value);

/* ------------------------------------------------------------------------------------------------ */
/* Device memory and streams (for callers without their own)                                        */
/* ------------------------------------------------------------------------------------------------ */
/* `device` -1 means the engine's default device. Streams are raw CUstream / hipStream_t values;
 * NULL is the legacy default stream. Copies on a stream are asynchronous with respect to the host
 * only when the host memory is pinned; call kiln_synchronize before reading results. */

/** Allocates `bytes` (> 0) of device memory. The engine owns the allocation's bookkeeping: free it
 *  with kiln_free on the same engine, or it is freed when the engine is destroyed.
 *  Errors: INVALID_HANDLE, INVALID_ARGUMENT (pointer NULL, bytes 0), OUT_OF_MEMORY, LAUNCH,
 *  DEVICE_UNAVAILABLE. */
KILN_API kiln_status kiln_malloc(kiln_engine engine, size_t bytes, int device, void** pointer);

/** Frees memory from kiln_malloc of this engine. NULL is a no-op. Errors: INVALID_HANDLE,
 *  INVALID_ARGUMENT (a pointer this engine did not allocate, or already freed). */
KILN_API kiln_status kiln_free(kiln_engine engine, void* pointer);

/** Copies `bytes` from host `src` to device `dst`. Errors: INVALID_HANDLE, INVALID_ARGUMENT (NULL
 *  pointer with bytes > 0), LAUNCH (the driver refused), DEVICE_UNAVAILABLE. */
KILN_API kiln_status kiln_copy_to_device(kiln_engine engine, void* dst, const void* src, size_t bytes, void* stream,
                                         int device);

/** Copies `bytes` from device `src` to host `dst`. Errors as kiln_copy_to_device. */
KILN_API kiln_status kiln_copy_to_host(kiln_engine engine, void* dst, const void* src, size_t bytes, void* stream,
                                       int device);

/** Sets `bytes` of device memory at `dst` to the byte `value`. Errors as kiln_copy_to_device. */
KILN_API kiln_status kiln_memset(kiln_engine engine, void* dst, int value, size_t bytes, void* stream, int device);

/** Creates a stream on a device. Destroy it with kiln_stream_destroy on the same engine, or it is
 *  destroyed with the engine. Errors: INVALID_HANDLE, INVALID_ARGUMENT, LAUNCH, DEVICE_UNAVAILABLE. */
KILN_API kiln_status kiln_stream_create(kiln_engine engine, int device, void** stream);

/** Destroys a stream from kiln_stream_create of this engine. Errors: INVALID_HANDLE, INVALID_ARGUMENT
 *  (a stream this engine did not create). */
KILN_API kiln_status kiln_stream_destroy(kiln_engine engine, void* stream);

/** Waits until all work queued on `stream` (NULL: the legacy default stream) has finished.
 *  Errors: INVALID_HANDLE, LAUNCH (an earlier asynchronous error surfaces here), DEVICE_UNAVAILABLE. */
KILN_API kiln_status kiln_synchronize(kiln_engine engine, void* stream, int device);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KILN_KILN_H */
