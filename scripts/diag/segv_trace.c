// A diagnostic for device runs, not part of kiln: LD_PRELOAD'ed into a process (a pytest worker), it prints on a
// SIGSEGV or SIGBUS the faulting address, the native stack (glibc's backtrace, symbols where the images export them)
// and the process's mappings near the faulting address and near kiln's PCH heap address (0x2b6900000000), then lets
// the signal kill the process as it would have. The device image has no gdb; Python's faulthandler shows only
// Python frames.
//   gcc -shared -fPIC -O1 -o segv_trace.so scripts/diag/segv_trace.c
//   LD_PRELOAD=$PWD/segv_trace.so SEGV_TRACE_DIR=/tmp/traces python3 ...
#define _GNU_SOURCE
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static void on_fault(int sig, siginfo_t* info, void* context) {
  (void)context;
  char path[256], text[256];
  const char* dir = getenv("SEGV_TRACE_DIR");
  snprintf(path, sizeof path, "%s/segv-%d.txt", dir ? dir : "/tmp", (int)getpid());
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) fd = 2;
  uintptr_t at = (uintptr_t)info->si_addr;
  snprintf(text, sizeof text, "signal %d (code %d) at address %#lx in pid %d\n", sig, info->si_code, (unsigned long)at,
           (int)getpid());
  say(fd, text);
  void* frames[64];
  int n = backtrace(frames, 64);
  backtrace_symbols_fd(frames, n, fd);
  say(fd, "-- mappings within 64 MiB of the address:\n");
  maps_near(fd, at > (64u << 20) ? at - (64u << 20) : 0, at + (64u << 20));
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
