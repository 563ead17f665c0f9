/* The OS layer (Linux: mmap, munmap, madvise, clock_gettime). Owns nothing else; called by
 * region.c (regions), large.c (large blocks) and meta.c (internal records). */
#define _GNU_SOURCE
#include "os.h"

#include <errno.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <time.h>

static _Atomic(long) inject_after = -1; /* -1: no injection */

void mtp__os_inject_failure(long after_n_calls) {
  atomic_store_explicit(&inject_after, after_n_calls, memory_order_relaxed);
}

static bool inject_fails(void) {
  long n = atomic_load_explicit(&inject_after, memory_order_relaxed);
  while (n >= 0) {
    if (n == 0) return true;
    if (atomic_compare_exchange_weak_explicit(&inject_after, &n, n - 1, memory_order_relaxed,
                                              memory_order_relaxed))
      return false;
  }
  return false;
}

void *mtp__os_map(size_t size, size_t alignment) {
  if (inject_fails()) {
    errno = ENOMEM;
    return NULL;
  }
  if (alignment <= 4096) {
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      errno = ENOMEM;
      return NULL;
    }
    return p;
  }
  /* Over-map, then cut the unaligned head and the tail away. */
  size_t total = size + alignment - 4096;
  if (total < size) {
    errno = ENOMEM;
    return NULL;
  }
  char *raw = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    errno = ENOMEM;
    return NULL;
  }
  uintptr_t start = ((uintptr_t)raw + alignment - 1) & ~(uintptr_t)(alignment - 1);
  size_t head = start - (uintptr_t)raw;
  size_t tail = total - head - size;
  if (head) munmap(raw, head);
  if (tail) munmap((char *)start + size, tail);
  return (void *)start;
}

int mtp__os_populate(void *p, size_t size) {
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif
  /* Set once, by whichever thread first sees EINVAL; relaxed: a thread that reads it stale only
   * makes one more madvise call that fails the same way. */
  static _Atomic(int) unsupported;
  if (atomic_load_explicit(&unsupported, memory_order_relaxed)) return ENOTSUP;
  if (madvise(p, size, MADV_POPULATE_WRITE) == 0) return 0;
  int e = errno;
  if (e == EINVAL) atomic_store_explicit(&unsupported, 1, memory_order_relaxed);
  return e;
}

int mtp__os_unmap(void *p, size_t size) { return munmap(p, size) == 0 ? 0 : errno; }

int mtp__os_purge(void *p, size_t size) {
  return madvise(p, size, MADV_DONTNEED) == 0 ? 0 : errno;
}

uint64_t mtp__os_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}
