// A diagnostic for device runs, not part of kiln: LD_PRELOAD'ed into a process (a pytest worker), it writes on a
// SIGSEGV or SIGBUS the faulting address and instruction, the native stack (glibc's backtrace), the words of the
// stack that point into a loaded image (where an unwind stops, the callers are usually among them), and the
// mappings near the fault, near the instruction and near kiln's PCH heap address (0x2b6900000000), then lets the
// signal kill the process as it would have. Each address inside an image is also written as a line
// "ADDR2LINE <image> <offset>" for addr2line. The device image has no gdb; Python's faulthandler shows only Python
// frames, and catches the signal first: run pytest with -p no:faulthandler.
//   gcc -shared -fPIC -O1 -o segv_trace.so scripts/diag/segv_trace.c -ldl
//   LD_PRELOAD=$PWD/segv_trace.so SEGV_TRACE_DIR=/tmp/traces python3 -m pytest -p no:faulthandler ...
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

static void say(int fd, const char* text) { (void)!write(fd, text, strlen(text)); }

static void maps_near(int fd, uintptr_t a, uintptr_t b) {
  // /proc/self/maps lines whose range meets [a, b): read in pieces, no allocation.
  int maps = open("/proc/self/maps", O_RDONLY);
  if (maps < 0) return;
  char buf[8192], line[512];
  size_t used = 0;
  ssize_t got;
  while ((got = read(maps, buf, sizeof buf)) > 0) {
    for (ssize_t i = 0; i < got; ++i) {
      if (used < sizeof line - 1) line[used++] = buf[i];
      if (buf[i] != '\n') continue;
      line[used] = '\0';
      unsigned long lo = strtoul(line, NULL, 16), hi = strtoul(strchr(line, '-') + 1, NULL, 16);
      if (hi > a && lo < b) say(fd, line);
      used = 0;
    }
  }
  close(maps);
}

/// "image+0xoff (symbol+0xoff)" and an ADDR2LINE line, or nothing when `at` is in no image. Returns whether it was.
static int describe(int fd, const char* what, uintptr_t at) {
  Dl_info info;
  char text[768];
  if (at < 4096 || dladdr((void*)at, &info) == 0 || info.dli_fname == NULL) return 0;
  const uintptr_t offset = at - (uintptr_t)info.dli_fbase;
  if (info.dli_sname != NULL) {
    snprintf(text, sizeof text, "%s %#lx = %s+%#lx (%s+%#lx)\nADDR2LINE %s %#lx\n", what, (unsigned long)at,
             info.dli_fname, (unsigned long)offset, info.dli_sname, (unsigned long)(at - (uintptr_t)info.dli_saddr),
             info.dli_fname, (unsigned long)offset);
  } else {
    snprintf(text, sizeof text, "%s %#lx = %s+%#lx\nADDR2LINE %s %#lx\n", what, (unsigned long)at, info.dli_fname,
             (unsigned long)offset, info.dli_fname, (unsigned long)offset);
  }
  say(fd, text);
  return 1;
}

static void on_fault(int sig, siginfo_t* info, void* context) {
  char path[256], text[256];
  const char* dir = getenv("SEGV_TRACE_DIR");
  snprintf(path, sizeof path, "%s/segv-%d.txt", dir ? dir : "/tmp", (int)getpid());
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) fd = 2;
  const ucontext_t* uc = (const ucontext_t*)context;
  uintptr_t at = (uintptr_t)info->si_addr, ip = 0, sp = 0;
#if defined(__x86_64__)
  ip = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
  sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
#endif
  snprintf(text, sizeof text, "signal %d (code %d) at address %#lx in pid %d; instruction %#lx, stack %#lx\n", sig,
           info->si_code, (unsigned long)at, (int)getpid(), (unsigned long)ip, (unsigned long)sp);
  say(fd, text);
  describe(fd, "instruction", ip);
  describe(fd, "address", at);
  say(fd, "-- frames:\n");
  void* frames[64];
  int n = backtrace(frames, 64);
  for (int i = 0; i < n; ++i) {
    snprintf(text, sizeof text, "frame %d", i);
    if (!describe(fd, text, (uintptr_t)frames[i])) {
      snprintf(text, sizeof text, "frame %d %#lx (no image)\n", i, (unsigned long)frames[i]);
      say(fd, text);
    }
  }
  say(fd, "-- stack words that point into an image (from the faulting stack pointer, 1024 words):\n");
  if (sp != 0) {
    int shown = 0;
    for (int i = 0; i < 1024 && shown < 80; ++i) {
      const uintptr_t word = ((const uintptr_t*)sp)[i];
      snprintf(text, sizeof text, "sp+%#x", i * 8);
      shown += describe(fd, text, word);
    }
  }
  say(fd, "-- mappings within 16 MiB of the address:\n");
  maps_near(fd, at > (16u << 20) ? at - (16u << 20) : 0, at + (16u << 20));
  say(fd, "-- mappings within 1 MiB of the instruction:\n");
  maps_near(fd, ip > (1u << 20) ? ip - (1u << 20) : 0, ip + (1u << 20));
  say(fd, "-- mappings from 0x2b6900000000 (kiln's PCH heap) on, 64 GiB:\n");
  maps_near(fd, 0x2b6900000000ULL, 0x2b6900000000ULL + (64ULL << 30));
  if (fd != 2) close(fd);
  signal(sig, SIG_DFL);
  raise(sig);
}

__attribute__((constructor)) static void install(void) {
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_sigaction = on_fault;
  action.sa_flags = SA_SIGINFO | SA_RESETHAND | SA_ONSTACK;
  sigaction(SIGSEGV, &action, NULL);
  sigaction(SIGBUS, &action, NULL);
}
