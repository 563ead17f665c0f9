/* Warming the host's memory before a measured run: map mib MiB straight from the OS (so that no
 * allocator under test sees it), advise it huge, touch every page and unmap it. On a VM that
 * reports free memory to its host, memory the guest freed seconds before is faulted back in by
 * the host at a program's first touch, the more so in huge pages (bench/results/notes.md);
 * warmed, a run sees the machine as a busy server's. C and C++. */
#ifndef MTPOOL_BENCH_TOOLS_WARM_H
#define MTPOOL_BENCH_TOOLS_WARM_H

#include <stddef.h>
#include <sys/mman.h>

static inline void bench_warm_memory(long mib) {
  if (mib <= 0) return;
  size_t len = (size_t)mib << 20;
  void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return;
  (void)madvise(m, len, MADV_HUGEPAGE);
  for (size_t i = 0; i < len; i += 4096) ((volatile char *)m)[i] = 1;
  munmap(m, len);
}

#endif
