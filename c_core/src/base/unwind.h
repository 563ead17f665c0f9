/* The call-stack unwinder: glibc's (execinfo.h: backtrace, and backtrace_symbols_fd, which writes
 * to a descriptor and allocates nothing). Elsewhere (musl) stubs that find no frame: the profiler
 * (profile/profile.c) is off there, and a misuse report (error.c) names no allocation site.
 * Layer: base. */
#ifndef MTP_BASE_UNWIND_H
#define MTP_BASE_UNWIND_H

#if defined(__GLIBC__)
#include <execinfo.h>
#define MTP_HAVE_UNWINDER 1
#else
#define MTP_HAVE_UNWINDER 0
static inline int backtrace(void **buf, int n) {
  (void)buf;
  (void)n;
  return 0;
}
static inline void backtrace_symbols_fd(void *const *buf, int n, int fd) {
  (void)buf;
  (void)n;
  (void)fd;
}
#endif

#endif
