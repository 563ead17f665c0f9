/* The OS layer (Linux: mmap, munmap, mprotect, madvise, clock_gettime, sched_getcpu,
 * getauxval). Owns nothing else. Layer: base. */
#define _GNU_SOURCE
#include "os.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "atomic.h"
#include "track.h"

#include <sys/auxv.h>
#include <sys/random.h>

static mtpi_atomic_long inject_after = -1; /* -1: no injection */

void mtp__os_inject_failure(long after_n_calls) {
  /* relaxed: a test hook; the test sets it before the calls it wants to fail */
  mtp__long_store_relaxed(&inject_after, after_n_calls);
}

static bool inject_fails(void) {
  long n = mtp__long_load_relaxed(&inject_after);
  while (n >= 0) {
    if (n == 0) return true;
    if (mtp__long_cas_weak_relaxed(&inject_after, &n, n - 1)) return false; /* a counter only */
  }
  return false;
}

size_t mtp__os_page_size(void) {
  /* relaxed: every thread computes the same value; a racing first read only reads it twice */
  static mtpi_atomic_long cached;
  long v = mtp__long_load_relaxed(&cached);
  if (v == 0) {
    /* The kernel's AT_PAGESZ, not sysconf: sysconf's switch is a jump table in libc's read-only
     * data, and its first read faults in 64 KiB of libc there (a C main that mallocs once
     * touches no other page of it). */
    v = (long)getauxval(AT_PAGESZ);
    if (v <= 0) v = sysconf(_SC_PAGESIZE);
    if (v <= 0) v = 4096;
    mtp__long_store_relaxed(&cached, v);
  }
  return (size_t)v;
}

static void *os_map(size_t size, size_t alignment) {
  size_t os_page = mtp__os_page_size();
  if (inject_fails() || os_page > 65536) { /* an mtpool page must be whole OS pages */
    errno = ENOMEM;
    return NULL;
  }
  if (alignment <= os_page) {
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      errno = ENOMEM;
      return NULL;
    }
    return p;
  }
  /* Over-map, then cut the unaligned head and the tail away. */
  size_t total = size + alignment - os_page;
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
  /* munmap of a part of our own fresh mapping cannot fail but for a kernel out of memory for the
   * split; the piece then stays mapped and unused (address space, no memory). */
  if (head) (void)munmap(raw, head);
  if (tail) (void)munmap((char *)start + size, tail);
  return (void *)start;
}

void *mtp__os_map(size_t size, size_t alignment) {
  void *p = os_map(size, alignment);
  if (p != NULL) mtp__track_unmap(p, size); /* no stale poison from an earlier mapping there */
  return p;
}

int mtp__os_guard(void *p, size_t size) { return mprotect(p, size, PROT_NONE) == 0 ? 0 : errno; }

int mtp__os_unguard(void *p, size_t size) {
  return mprotect(p, size, PROT_READ | PROT_WRITE) == 0 ? 0 : errno;
}

void *mtp__os_map_guarded(size_t size, size_t alignment, size_t guard) {
  char *p = os_map(size, alignment);
  if (p == NULL) return NULL;
  if (mprotect(p, guard, PROT_NONE) != 0) {
    (void)munmap(p, size);
    errno = ENOMEM;
    return NULL;
  }
  mtp__track_unmap(p + guard, size - guard); /* no stale poison from an earlier mapping there */
  return p;
}

int mtp__os_unmap_guarded(void *p, size_t size, size_t guard) {
  mtp__track_unmap((char *)p + guard, size - guard);
  return munmap(p, size) == 0 ? 0 : errno;
}

int mtp__os_populate(void *p, size_t size) {
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif
  /* Set once, by whichever thread first sees EINVAL; relaxed: a thread that reads it stale only
   * makes one more madvise call that fails the same way. */
  static mtpi_atomic_int unsupported;
  if (mtp__int_load_relaxed(&unsupported)) return ENOTSUP;
  if (madvise(p, size, MADV_POPULATE_WRITE) == 0) return 0;
  int e = errno;
  if (e == EINVAL) mtp__int_store_relaxed(&unsupported, 1);
  return e;
}

int mtp__os_unmap(void *p, size_t size) {
  mtp__track_unmap(p, size); /* the next mapping at these addresses starts unpoisoned */
  return munmap(p, size) == 0 ? 0 : errno;
}

int mtp__os_purge(void *p, size_t size) {
  return madvise(p, size, MADV_DONTNEED) == 0 ? 0 : errno;
}

int mtp__os_lock_init(pthread_mutex_t *m) {
#ifdef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
  pthread_mutexattr_t a;
  int e = pthread_mutexattr_init(&a);
  if (e == 0) e = pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ADAPTIVE_NP);
  if (e == 0) e = pthread_mutex_init(m, &a);
  pthread_mutexattr_destroy(&a);
  return e;
#else
  return pthread_mutex_init(m, NULL);
#endif
}

uint64_t mtp__os_now_ms(void) {
  struct timespec ts;
  /* The coarse clock where there is one: a load from the vDSO's page rather than a counter read
   * (frees of medium blocks stamp their time); it ticks every 1-4 ms, so a purge may come that
   * much late. */
#ifndef CLOCK_MONOTONIC_COARSE
#define CLOCK_MONOTONIC_COARSE CLOCK_MONOTONIC
#endif
  if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) != 0 && clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
    return 0; /* cannot fail for CLOCK_MONOTONIC */
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

unsigned mtp__os_cpu(void) {
  int cpu = sched_getcpu(); /* glibc reads it from the thread's rseq area where it can: a load */
  return cpu < 0 ? 0 : (unsigned)cpu;
}

/* ---- Transparent huge pages ---- */

size_t mtp__os_huge_page_size(void) {
  /* 0: not read yet; 1: read, none. relaxed: every thread reads the same file; a racing first
   * call only reads it twice. open/read/close allocate nothing (safe inside malloc). */
  static mtpi_atomic_long cached;
  long v = mtp__long_load_relaxed(&cached);
  if (v == 0) {
    v = 1;
    int fd = open("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      char buf[32];
      ssize_t n = read(fd, buf, sizeof(buf) - 1);
      (void)close(fd);
      long x = 0;
      for (ssize_t i = 0; i < n && buf[i] >= '0' && buf[i] <= '9'; i++) x = x * 10 + (buf[i] - '0');
      if (x > 1) v = x;
    }
    mtp__long_store_relaxed(&cached, v);
  }
  return v > 1 ? (size_t)v : 0;
}

bool mtp__os_thp_always(void) {
  /* 0: not read yet; 1: not "always"; 2: "always". relaxed, as mtp__os_huge_page_size. */
  static mtpi_atomic_long cached;
  long v = mtp__long_load_relaxed(&cached);
  if (v == 0) {
    v = 1;
    int fd = open("/sys/kernel/mm/transparent_hugepage/enabled", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      char buf[64];
      ssize_t n = read(fd, buf, sizeof(buf) - 1);
      (void)close(fd);
      if (n >= 8 && memcmp(buf, "[always]", 8) == 0) v = 2;
    }
    mtp__long_store_relaxed(&cached, v);
  }
  return v == 2;
}

int mtp__os_huge_advise(void *p, size_t size, bool huge) {
  return madvise(p, size, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) == 0 ? 0 : errno;
}

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25 /* Linux 6.1 */
#endif
int mtp__os_huge_collapse(void *p, size_t size) {
  return madvise(p, size, MADV_COLLAPSE) == 0 ? 0 : errno;
}

int mtp__os_resident_map(const void *p, size_t size, unsigned char *vec) {
  if (mincore((void *)(uintptr_t)p, size, vec) != 0) return -1;
  size_t n = (size + mtp__os_page_size() - 1) / mtp__os_page_size();
  for (size_t i = 0; i < n; i++) vec[i] &= 1;
  return 0;
}

size_t mtp__os_resident_bytes(const void *p, size_t size) {
  size_t page = mtp__os_page_size(), got = 0;
  unsigned char vec[256];
  for (size_t done = 0; done < size;) {
    size_t len = size - done < sizeof vec * page ? size - done : sizeof vec * page;
    if (mtp__os_resident_map((const char *)p + done, len, vec) != 0) return SIZE_MAX;
    for (size_t i = 0; i < (len + page - 1) / page; i++) got += vec[i] * page;
    done += len;
  }
  return got;
}

long mtp__os_anon_huge_kb(void) {
  int fd = open("/proc/self/smaps_rollup", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[2048];
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  (void)close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  const char *at = strstr(buf, "AnonHugePages:");
  if (at == NULL) return -1;
  long kb = 0;
  for (at += 14; *at == ' ' || *at == '\t'; at++) {}
  for (; *at >= '0' && *at <= '9'; at++) kb = kb * 10 + (*at - '0');
  return kb;
}

void *mtp__os_remap(void *p, size_t old_size, size_t new_size) {
  if (new_size > old_size && inject_fails()) { /* shrinking maps nothing: never injected */
    errno = ENOMEM;
    return NULL;
  }
  void *q = mremap(p, old_size, new_size, MREMAP_MAYMOVE);
  if (q == MAP_FAILED) {
    errno = ENOMEM;
    return NULL;
  }
  mtp__track_unmap(q, new_size); /* no stale poison where it grew or moved to */
  return q;
}

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000 /* Linux 4.17; older kernels take it as a hint */
#endif

/* Whether [p, p+len) lies in one kernel mapping: growing it in place by a page says so and changes
 * nothing else (EFAULT where it crosses mappings, ENOMEM where it cannot grow there; a growth that
 * succeeded is undone). */
static bool one_mapping(void *p, size_t len) {
  size_t page = mtp__os_page_size();
  if (mremap(p, len, len + page, 0) != MAP_FAILED) return mremap(p, len + page, len, 0) != MAP_FAILED;
  return errno == ENOMEM;
}

void *mtp__os_remap_aligned(void *p, size_t old_size, size_t new_size, size_t alignment) {
  if (((uintptr_t)p & (alignment - 1)) == 0) {
    if (mremap(p, old_size, new_size, 0) != MAP_FAILED) {
      mtp__track_unmap(p, new_size);
      return p;
    }
    if (errno != ENOMEM) { /* EFAULT: it crosses mappings, which no move takes */
      errno = ENOMEM;
      return NULL;
    }
  } else if (!one_mapping(p, old_size)) {
    errno = ENOMEM;
    return NULL;
  }
  /* A move onto dest that fails may have unmapped dest first (older kernels check the source
   * after), and another thread's mapping may take the hole: so the source is checked above, and
   * after a failure (a refusal for lack of memory) dest is unmapped only where it is still free,
   * else left mapped (address space lost, no one's memory unmapped). */
  void *dest = os_map(new_size, alignment); /* counts as the map an injected failure refuses */
  if (dest == NULL) return NULL;
  void *q = mremap(p, old_size, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, dest);
  if (q == MAP_FAILED) {
    void *m = mmap(dest, new_size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                   -1, 0);
    if (m == dest) (void)munmap(dest, new_size);
    else if (m != MAP_FAILED) (void)munmap(m, new_size); /* a kernel without NOREPLACE: a hint */
    errno = ENOMEM;
    return NULL;
  }
  mtp__track_unmap(q, new_size);
  return q;
}

/* ---- the free-list link key (see track.h, types.h) ---- */
uintptr_t mtp__link_key;
uint16_t mtp__link_tag;

void mtp__link_key_init(void) {
  if (__atomic_load_n(&mtp__link_key, __ATOMIC_ACQUIRE) != 0 &&
      __atomic_load_n(&mtp__link_tag, __ATOMIC_ACQUIRE) != 0)
    return;
  uint64_t k = 0;
  /* GRND_NONBLOCK: early in boot the pool may not be ready; fall back to the kernel's AT_RANDOM
   * bytes, mixed with addresses (ASLR) and the clock */
  if (getrandom(&k, sizeof(k), GRND_NONBLOCK) != (ssize_t)sizeof(k)) {
    const unsigned char *r = (const unsigned char *)getauxval(AT_RANDOM);
    uint64_t a = 0;
    if (r != NULL) memcpy(&a, r + 8, sizeof(a));
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    k = a ^ (uint64_t)(uintptr_t)&k ^ ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec;
    k ^= k >> 31;
    k *= 0x9e3779b97f4a7c15ull;
    k ^= k >> 29;
  }
  if ((k >> MTP_VA_BITS) == 0) k |= (uint64_t)0x5a3c << MTP_VA_BITS; /* top half nonzero */
  uintptr_t zero = 0;
  /* acq_rel CAS on the plain word (GCC builtins): whoever wins, every later reader gets that
   * value (the acquire above pairs with it); readers that reach a slab are ordered after its
   * pool's creation (the default pool's once, or a release/acquire pair), which is after this */
  (void)__atomic_compare_exchange_n(&mtp__link_key, &zero, (uintptr_t)k, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE);
  /* The winner's tag, written once in all (a CAS from 0; every racing initialiser would write
   * the same value): a thread that reads the tag plainly (track.h) is ordered after this write by
   * its own CAS, by the acquire above, or by the slab it got from such a thread. A plain store by
   * each initialiser raced with the first one's readers (ThreadSanitizer, test_rel_fork). */
  uint16_t none = 0;
  uint16_t tag = (uint16_t)(__atomic_load_n(&mtp__link_key, __ATOMIC_ACQUIRE) >> MTP_VA_BITS);
  (void)__atomic_compare_exchange_n(&mtp__link_tag, &none, tag, false, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE);
}
