// Fault injection for the hip_contract tests: preloaded (LD_PRELOAD) into a child process, this dlopen
// refuses every AMD library (libamdhip64, libhiprtc, libamd_comgr) the way the dynamic loader does on a
// machine where none is installed, and forwards every other request. Test-only; never shipped.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>

void* dlopen(const char* file, int mode) {
  static void* (*real_dlopen)(const char*, int) = NULL;
  if (real_dlopen == NULL) real_dlopen = (void* (*)(const char*, int))dlsym(RTLD_NEXT, "dlopen");
  if (file != NULL &&
      (strstr(file, "amdhip64") != NULL || strstr(file, "hiprtc") != NULL || strstr(file, "amd_comgr") != NULL)) {
    // Let the real loader fail on a path that cannot exist, so dlerror() reads as it would.
    return real_dlopen("/nonexistent-kiln-no-amd/libamd-absent.so", mode);
  }
  return real_dlopen(file, mode);
}
