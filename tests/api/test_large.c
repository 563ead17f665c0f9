/* Large blocks (above 32 KiB): the cache of freed ranges (reuse, split and merge, its bound, purge
 * after the pool's delay, trim, destroy, statistics), calloc (zero whether fresh or reused, and a
 * fresh mapping not faulted in), realloc (grow into the cached range after the
 * block or by mremap, shrink into the cache, keeping contents, small -> large -> small; a growing
 * buffer's realloc that fits the range remembered by its thread, and what makes it look again), bad input (double free of a cached block, interior and foreign
 * pointers), a miss that grows the largest cached range, ranges split into two kernel mappings, a checked pool's quarantine, OS failures (mtp__os_inject_failure), and two threads
 * at once (for TSan). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mtpool/mtpool.h"
#include "base/os.h" /* mtp__os_inject_failure */
#include "testhelper.h"

#define MiB ((size_t)1 << 20)

static int g_err, g_errs;
static void *g_err_ptr;
static void on_error(int err, const char *msg, void *p, void *arg) {
  (void)msg, (void)arg;
  g_err = err;
  g_err_ptr = p;
  g_errs++;
}

/* Bytes held and not in use: in these pools (no small blocks), the cached mappings. */
static size_t cached(mtp_pool_t *p) {
  mtp_stats_t st = th_stats(p);
  return st.bytes_reserved - st.bytes_in_use;
}

/* Sizes here are above the medium range (MTP_MEDIUM_MAX, 256 KiB; at most 1 MiB): medium blocks are pages of
 * the pool's regions (tests/api/test_span.c), not cached ranges. */
#define L (8 * MiB)

static void test_reuse_and_stats(void) {
  mtp_pool_t *p = th_pool("large", 60000, 0);
  char *a = mtp_pool_alloc(p, L);
  REQUIRE(a != NULL, "alloc");
  memset(a, 7, L);
  mtp_stats_t st = th_stats(p);
  CHECK_EQ_SZ(st.large_blocks, 1);
  CHECK_EQ_SZ(st.bytes_in_use, L);
  mtp_free(a);
  st = th_stats(p);
  CHECK_EQ_SZ(st.large_blocks, 0);
  CHECK_EQ_SZ(st.bytes_in_use, 0);
  CHECK_EQ_SZ(st.bytes_reserved, L); /* kept: reserved and free, not in use */
  CHECK_EQ_SZ(st.bytes_free, L);
  CHECK_EQ_SZ(st.bytes_returned, 0);
  CHECK_EQ_SZ(st.allocs, 1);
  CHECK_EQ_SZ(st.frees, 1);
  /* the same size again: the same mapping, its pages still there */
  char *b = mtp_pool_alloc(p, L);
  CHECK(b == a);
  CHECK_EQ_SZ(mtp_usable_size(b), L);
  CHECK(mtp_pool_of(b) == p);
  mtp_free(b);
  /* at most a sixteenth larger than the request: the whole mapping, and its usable size says so */
  b = mtp_pool_alloc(p, (L - L / 32));
  CHECK(b == a);
  CHECK_EQ_SZ(mtp_usable_size(b), L);
  mtp_free_sized(b, (L - L / 32)); /* the requested size */
  CHECK(g_errs == 0);
  b = mtp_pool_alloc(p, (L - L / 32));
  mtp_free_sized(b, L); /* the usable size */
  CHECK(g_errs == 0);
  /* more: split, so that the usable size stays within a sixteenth of the request */
  b = mtp_pool_alloc(p, (L - L / 8));
  CHECK(b == a);
  CHECK_EQ_SZ(mtp_usable_size(b), (L - L / 8));
  mtp_free(b);
  /* much smaller: the head of the range; its tail stays cached (no munmap: its pages stay for
   * the next big request) */
  b = mtp_pool_alloc(p, (L / 4));
  CHECK(b == a);
  CHECK_EQ_SZ(mtp_usable_size(b), (L / 4));
  st = th_stats(p);
  CHECK_EQ_SZ(st.bytes_returned, 0);
  CHECK_EQ_SZ(st.bytes_in_use, (L / 4));
  CHECK_EQ_SZ(st.bytes_reserved, L);
  CHECK_EQ_SZ(cached(p), L - (L / 4));
  /* freed, it merges with its tail again: the whole range serves a request of its size request as is */
  mtp_free(b);
  CHECK_EQ_SZ(cached(p), L);
  b = mtp_pool_alloc(p, L);
  CHECK(b == a);
  CHECK_EQ_SZ(cached(p), 0);
  mtp_free(b);
  /* split again, and a request larger than any cached range: a mapping of its own (the cached
   * range stays: moving its pages would save faults, not a system call) */
  b = mtp_pool_alloc(p, (L / 2));
  CHECK(b == a);
  CHECK_EQ_SZ(cached(p), L - (L / 2));
  char *c = mtp_pool_alloc(p, (L + L / 2));
  REQUIRE(c != NULL, "alloc");
  CHECK_EQ_SZ(mtp_usable_size(c), (L + L / 2));
  CHECK_EQ_SZ(cached(p), L - (L / 2));
  memset(b, 1, (L / 2));
  memset(c, 1, (L + L / 2));
  mtp_free(b);
  mtp_free(c);
  st = th_stats(p);
  CHECK_EQ_SZ(st.allocs, 9);
  CHECK_EQ_SZ(st.frees, 9);
  CHECK_EQ_SZ(st.bytes_returned, 0);
  mtp_pool_destroy(p);
}

#undef L

static bool all_zero(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != 0) return false;
  return true;
}

/* calloc of a large block: a fresh mapping is zero and is not written (a program that callocs a big
 * table and uses a corner of it faults in the corner only); a range reused from the cache held a
 * freed block's bytes and is cleared; a checked pool's block is zero too. */
static void test_calloc(void) {
  mtp_pool_t *p = th_pool("large", 60000, 0);
  size_t n = 8 * MiB;
  unsigned char *a = mtp_pool_calloc(p, 1, n);
  REQUIRE(a != NULL, "calloc");
  CHECK(th_resident(a, n) <= 64 * 1024);
  CHECK(a[0] == 0 && a[n / 2] == 0 && a[n - 1] == 0);
  memset(a, 0xAB, n);
  mtp_free(a);
  CHECK(cached(p) >= n); /* the next calloc of that size takes this range */
  unsigned char *b = mtp_pool_calloc(p, n / 4096, 4096);
  REQUIRE(b != NULL, "calloc");
  CHECK(b == a);
  CHECK(all_zero(b, n));
  mtp_free(b);
  /* the default pool, and a size with no whole page */
  unsigned char *c = mtp_calloc(3, 33333);
  REQUIRE(c != NULL, "calloc");
  CHECK(all_zero(c, 3 * 33333));
  memset(c, 0xCD, 3 * 33333);
  mtp_free(c);
  c = mtp_calloc(3, 33333);
  REQUIRE(c != NULL, "calloc");
  CHECK(all_zero(c, 3 * 33333));
  mtp_free(c);
  mtp_pool_destroy(p);
  p = th_pool("large", 60000, 1);
  unsigned char *d = mtp_pool_calloc(p, 1, MiB);
  REQUIRE(d != NULL, "calloc");
  CHECK(all_zero(d, MiB));
  mtp_free(d);
  mtp_pool_destroy(p);
  CHECK(g_errs == 0);
}

/* A block above the reserve's 4 MiB that no cached range fits grows the largest cached one of at
 * least half its size into it: the cache is left empty, the pool holds the block's bytes alone,
 * and a calloc made so reads as zero, the old part cleared and the grown tail fresh. */
static void test_grow_cached(void) {
  mtp_pool_t *p = th_pool("large-grow", 60000, 0);
  unsigned char *a = mtp_pool_alloc(p, 8 * MiB);
  REQUIRE(a != NULL, "alloc");
  memset(a, 7, 8 * MiB);
  mtp_free(a);
  CHECK_EQ_SZ(cached(p), 8 * MiB);
  unsigned char *b = mtp_pool_alloc(p, 12 * MiB);
  REQUIRE(b != NULL, "alloc");
  memset(b, 9, 12 * MiB);
  mtp_stats_t st = th_stats(p);
  CHECK_EQ_SZ(cached(p), 0); /* the 8 MiB range became the block */
  CHECK_EQ_SZ(st.bytes_reserved, 12 * MiB);
  CHECK_EQ_SZ(st.large_blocks, 1);
  mtp_free(b);
  unsigned char *c = mtp_pool_calloc(p, 1, 20 * MiB);
  REQUIRE(c != NULL, "calloc");
  CHECK_EQ_SZ(cached(p), 0);
  CHECK(all_zero(c, 20 * MiB));
  mtp_free(c);
  /* less than half the size cached: a fresh mapping, the cached range kept */
  unsigned char *d = mtp_pool_alloc(p, 48 * MiB);
  REQUIRE(d != NULL, "alloc");
  CHECK_EQ_SZ(cached(p), 20 * MiB);
  mtp_free(d);
  mtp_pool_destroy(p);
  CHECK(g_errs == 0);
}

/* A range that lies in two kernel mappings (MADV_DONTFORK on half of it splits its mapping, as a
 * huge-page advice on part of it does) cannot be grown or moved by mremap: a miss that would grow
 * it maps afresh, and realloc copies; either way the contents hold and nothing else is unmapped. */
static void test_two_mappings(void) {
  mtp_pool_t *p = th_pool("large-two-maps", 60000, 0);
  unsigned char *a = mtp_pool_alloc(p, 8 * MiB);
  REQUIRE(a != NULL, "alloc");
  memset(a, 7, 8 * MiB);
  REQUIRE(madvise(a, 4 * MiB, MADV_DONTFORK) == 0, "madvise");
  unsigned char *keep = mtp_pool_alloc(p, 6 * MiB); /* a neighbour that must stay mapped */
  REQUIRE(keep != NULL, "alloc");
  memset(keep, 3, 6 * MiB);
  unsigned char *b = mtp_realloc(a, 16 * MiB);
  REQUIRE(b != NULL, "realloc");
  CHECK(b[0] == 7 && b[4 * MiB - 1] == 7 && b[4 * MiB] == 7 && b[8 * MiB - 1] == 7);
  memset(b, 9, 16 * MiB);
  unsigned char *c = mtp_pool_alloc(p, 8 * MiB);
  REQUIRE(c != NULL, "alloc");
  REQUIRE(madvise(c, 4 * MiB, MADV_DONTFORK) == 0, "madvise");
  mtp_free(c); /* cached in two mappings */
  unsigned char *d = mtp_pool_alloc(p, 12 * MiB); /* would grow it: maps afresh instead */
  REQUIRE(d != NULL, "alloc");
  memset(d, 5, 12 * MiB);
  CHECK(keep[0] == 3 && keep[6 * MiB - 1] == 3 && b[16 * MiB - 1] == 9);
  mtp_free(d);
  mtp_free(b);
  mtp_free(keep);
  mtp_pool_destroy(p);
  CHECK(g_errs == 0);
}

static void test_bound(void) {
  mtp_pool_t *p = th_pool("large", 60000, 0);
  enum { N = 100 };
  static char *b[N];
  for (int i = 0; i < N; i++) { /* 2 MiB each: 64 of them pass the 64 MiB floor */
    b[i] = mtp_pool_alloc(p, 2 * MiB);
    REQUIRE(b[i] != NULL, "alloc");
  }
  size_t max_cached = 0;
  bool past_quarter = false;
  for (int i = 0; i < N; i++) {
    mtp_free(b[i]);
    mtp_stats_t st = th_stats(p);
    size_t c = st.bytes_reserved - st.bytes_in_use;
    /* the bound: 64 mappings, 64 MiB + half the live large bytes */
    CHECK(c <= 64 * MiB + st.large_bytes / 2);
    CHECK(c <= 64 * 2 * MiB);
    if (c > max_cached) max_cached = c;
    if (c > 64 * MiB + st.large_bytes / 4) past_quarter = true;
  }
  CHECK(past_quarter); /* more than a quarter of the live bytes kept at some point */
  mtp_stats_t st = th_stats(p);
  printf("cache bound: at most %zu MiB cached, %zu MiB at the end, %zu MiB returned\n",
         max_cached >> 20, (st.bytes_reserved - st.bytes_in_use) >> 20, (size_t)st.bytes_returned >> 20);
  CHECK(max_cached > 64 * MiB); /* the proportional part was used */
  /* at most the floor stays (neighbours carved from one reserve merge, so an eviction may take
   * more than one block's range at once); every byte freed is either kept or counted returned */
  CHECK(st.bytes_reserved > 0 && st.bytes_reserved <= 64 * MiB);
  CHECK_EQ_SZ(st.bytes_reserved + (size_t)st.bytes_returned, (size_t)N * 2 * MiB);
  /* a block above the bound is never kept */
  char *big = mtp_pool_alloc(p, 80 * MiB);
  REQUIRE(big != NULL, "alloc");
  mtp_pool_trim(p);
  mtp_free(big);
  CHECK_EQ_SZ(th_stats(p).bytes_reserved, 0);
  mtp_pool_destroy(p);
}

static void test_purge_after_delay(void) {
  mtp_pool_t *p = th_pool("large", 500, 0);
  char *a = mtp_pool_alloc(p, 4 * MiB);
  REQUIRE(a != NULL, "alloc");
  memset(a, 3, 4 * MiB);
  double t0 = th_now();
  mtp_free(a);
  size_t kept = cached(p);
  double t1 = th_now();
  /* a cached range goes a tenth of the delay after its free (50 ms): kept until then, unless the
   * machine stalled past it */
  if (t1 - t0 < 0.04) CHECK_EQ_SZ(kept, 4 * MiB);
  while (cached(p) != 0 && th_now() - t0 < 10) usleep(10000);
  double took = th_now() - t0;
  mtp_stats_t st = th_stats(p);
  printf("a cached 4 MiB mapping went back after %.0f ms (delay 500 ms: due at 50)\n", took * 1e3);
  CHECK_EQ_SZ(st.bytes_reserved, 0);
  CHECK_EQ_SZ(st.bytes_mapped, 0);
  CHECK_EQ_SZ(st.bytes_returned, 4 * MiB);
  CHECK(took >= 0.045 && took < 0.45); /* not the whole delay */
  mtp_pool_destroy(p);
}

static void test_trim_and_destroy(void) {
  mtp_pool_t *p = th_pool("large", 60000, 0);
  char *a = mtp_pool_alloc(p, 3 * MiB), *b = mtp_pool_alloc(p, 2 * MiB);
  REQUIRE(a && b, "alloc");
  mtp_free(a);
  CHECK_EQ_SZ(cached(p), 3 * MiB);
  CHECK(mtp_pool_trim(p) >= 3 * MiB);
  CHECK_EQ_SZ(cached(p), 0);
  CHECK_EQ_SZ(th_stats(p).bytes_reserved, 2 * MiB);
  mtp_free(b);
  CHECK_EQ_SZ(cached(p), 2 * MiB);
  CHECK(mtp_trim_all() >= 2 * MiB);
  CHECK_EQ_SZ(th_stats(p).bytes_reserved, 0);
  /* destroy with blocks live and cached: every mapping goes (VmSize falls back) */
  long before = th_status_kb("VmSize");
  for (int i = 0; i < 8; i++) {
    a = mtp_pool_alloc(p, 8 * MiB);
    b = mtp_pool_alloc(p, 8 * MiB);
    REQUIRE(a && b, "alloc");
    mtp_free(a);
  }
  long held = th_status_kb("VmSize");
  mtp_pool_destroy(p);
  long after = th_status_kb("VmSize");
  printf("VmSize %ld kB, %ld kB with the pool's large blocks, %ld kB after destroy\n", before, held,
         after);
  if (!TH_SANITIZED) CHECK(after <= before + 1024 && held >= before + 60 * 1024);
  /* a pool that purges at once keeps nothing; a checked pool keeps its quarantine until trim */
  mtp_pool_t *z = th_pool("large", 0, 0), *c = th_pool("large", 60000, 1);
  a = mtp_pool_alloc(z, MiB);
  b = mtp_pool_alloc(c, MiB);
  REQUIRE(a && b, "alloc");
  mtp_free(a);
  mtp_free(b);
  CHECK_EQ_SZ(th_stats(z).bytes_reserved, 0);
  CHECK(th_stats(c).bytes_reserved >= MiB && th_stats(c).bytes_in_use == 0);
  CHECK(mtp_pool_trim(c) >= MiB);
  CHECK_EQ_SZ(th_stats(c).bytes_reserved, 0);
  mtp_pool_destroy(z);
  mtp_pool_destroy(c);
}

/* A checked pool's freed large block is quarantined: inaccessible (a read faults), its address
 * not handed out again at once, a second free reported as a double free; bounded (the oldest go
 * back to the OS) and gone at destroy. */
static char *g_quarantined;
static int read_quarantined(void) {
  return g_quarantined[100] == 42 ? 3 : 4; /* must fault before it returns */
}

static void test_checked_quarantine(void) {
  mtp_pool_t *c = th_pool("large", 60000, 1);
  g_errs = 0;
  char *a = mtp_pool_alloc(c, 256 * 1024);
  REQUIRE(a != NULL, "alloc");
  memset(a, 42, 256 * 1024);
  mtp_free(a);
  CHECK(g_errs == 0);
  char *b = mtp_pool_alloc(c, 256 * 1024);
  REQUIRE(b != NULL, "alloc again");
  CHECK(b != a); /* not straight back */
  mtp_free(a);
  CHECK(g_errs == 1 && g_err == MTP_ERR_DOUBLE_FREE && g_err_ptr == a);
  CHECK(mtp_usable_size(a) == 0 && g_errs == 2 && g_err == MTP_ERR_INVALID_POINTER);
  g_quarantined = a;
  fflush(NULL);
  pid_t pid = fork();
  REQUIRE(pid >= 0, "fork");
  if (pid == 0) _exit(read_quarantined());
  int st = 0;
  CHECK(waitpid(pid, &st, 0) == pid);
  /* a sanitizer's SEGV handler reports and exits nonzero instead */
  CHECK((WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV) ||
        (TH_SANITIZED && WIFEXITED(st) && WEXITSTATUS(st) != 0 && WEXITSTATUS(st) != 3 &&
         WEXITSTATUS(st) != 4));
  mtp_free(b);
  /* bounded: 200 blocks of 256 KiB freed, at most 64 records and 32 MiB kept */
  for (int i = 0; i < 200; i++) {
    char *x = mtp_pool_alloc(c, 256 * 1024);
    REQUIRE(x != NULL, "alloc in the loop");
    mtp_free(x);
  }
  mtp_stats_t st1 = th_stats(c);
  CHECK(st1.bytes_reserved <= 64 * (256 * 1024 + 65536) && st1.bytes_in_use == 0);
  CHECK(st1.bytes_returned >= 100 * 256 * 1024);
  CHECK(g_errs == 2);
  g_errs = 0;
  mtp_pool_destroy(c);
}

static void test_bad_input(void) {
  mtp_pool_t *p = th_pool("large", 60000, 0);
  g_errs = 0;
  char *a = mtp_pool_alloc(p, 2 * MiB);
  REQUIRE(a != NULL, "alloc");
  mtp_free(a + 8192); /* interior */
  CHECK(g_errs == 1 && g_err == MTP_ERR_INVALID_POINTER && g_err_ptr == a + 8192);
  mtp_free_sized(a, 64); /* wrong size */
  CHECK(g_errs == 2 && g_err == MTP_ERR_WRONG_SIZE && g_err_ptr == a);
  mtp_free(a);
  CHECK(g_errs == 2);
  mtp_free(a); /* its mapping is cached: a double free */
  CHECK(g_errs == 3 && g_err == MTP_ERR_DOUBLE_FREE && g_err_ptr == a);
  CHECK(mtp_usable_size(a) == 0 && g_errs == 4 && g_err == MTP_ERR_INVALID_POINTER);
  errno = 0;
  CHECK(mtp_realloc(a, 3 * MiB) == NULL && errno == EINVAL && g_errs == 5);
  CHECK(mtp_pool_of(a) == NULL);
  CHECK_EQ_SZ(cached(p), 2 * MiB); /* nothing of that changed the cache */
  mtp_pool_trim(p);
  mtp_free(a); /* its mapping is gone now: not mtpool's */
  CHECK(g_errs == 6 && g_err == MTP_ERR_INVALID_POINTER);
  static char foreign[1 << 16];
  mtp_free(foreign + 4096);
  CHECK(g_errs == 7 && g_err == MTP_ERR_INVALID_POINTER);
  CHECK_EQ_SZ(th_stats(p).allocs, 1);
  CHECK_EQ_SZ(th_stats(p).frees, 1);
  g_errs = 0;
  mtp_pool_destroy(p);
}

static void fill(unsigned char *p, size_t from, size_t to) {
  for (size_t i = (from + 511) / 512 * 512; i < to; i += 512)
    p[i] = (unsigned char)(i / 512 * 7 + 1);
}
static int intact(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i += 512)
    if (p[i] != (unsigned char)(i / 512 * 7 + 1)) return 0;
  return 1;
}

static void test_realloc(void) {
  mtp_pool_t *p = th_pool("large", 60000, 0);
  /* small -> large -> grown to 8 MiB in 4 KiB steps */
  unsigned char *b = mtp_pool_alloc(p, 20000);
  REQUIRE(b != NULL, "alloc");
  fill(b, 0, 20000);
  size_t n = 20000, moves = 0, steps = 0;
  for (size_t to = 24576; to <= 8 * MiB; to += 4096) {
    unsigned char *q = mtp_realloc(b, to);
    REQUIRE(q != NULL, "realloc to %zu", to);
    if (q != b) moves++;
    steps++;
    b = q;
    CHECK(mtp_usable_size(b) >= to);
    fill(b, n, to);
    n = to;
  }
  CHECK(intact(b, n));
  mtp_stats_t st = th_stats(p);
  printf("realloc 20000 B -> 8 MiB in 4 KiB steps: %zu steps, %zu moved\n", steps, moves);
  CHECK(moves < steps / 20); /* room for growth: most steps stay in the mapping */
  CHECK_EQ_SZ(st.large_blocks, 1);
  CHECK_EQ_SZ(st.blocks_in_use, 1);
  CHECK(st.large_bytes <= 8 * MiB + MiB + 4096); /* at most an eighth more */
  /* shrink by more than a quarter: in place, the tail cached (returned after the delay) */
  uint64_t ret0 = st.bytes_returned;
  size_t held = st.large_bytes, c0 = cached(p); /* c0: the small blocks' free pages */
  unsigned char *q = mtp_realloc(b, MiB);
  CHECK(q == b);
  CHECK(intact(q, MiB));
  CHECK_EQ_SZ(mtp_usable_size(q), MiB);
  st = th_stats(p);
  CHECK_EQ_SZ(st.bytes_returned, ret0);
  CHECK_EQ_SZ(st.large_bytes, MiB);
  CHECK_EQ_SZ(cached(p), c0 + held - MiB);
  mtp_free_sized(q, MiB);
  CHECK(g_errs == 0);
  CHECK_EQ_SZ(cached(p), c0 + held); /* merged again: one range */
  /* the same growth again: the cached range, grown into in place, with no system call (nothing
   * mapped or returned) */
  size_t mapped = th_stats(p).bytes_mapped;
  b = mtp_pool_alloc(p, 20000);
  moves = 0;
  for (size_t to = 24576; to <= 8 * MiB; to += 4096) {
    unsigned char *r = mtp_realloc(b, to);
    REQUIRE(r != NULL, "realloc to %zu", to);
    if (r != b && to > 65536) moves++;
    b = r;
  }
  st = th_stats(p);
  printf("the same growth again: %zu moved above 64 KiB, %zu bytes mapped (%zu before)\n", moves,
         st.bytes_mapped, mapped);
  /* one move: the medium block (grown in place through its region's free pages) becomes large */
  CHECK(moves <= 1);
  CHECK_EQ_SZ(st.bytes_returned, ret0);
  CHECK(st.bytes_mapped <= mapped + MiB); /* the small blocks' region at most */
  mtp_free(b);
  /* large -> small keeps the contents and leaves the large mapping cached */
  b = mtp_pool_alloc(p, 2 * MiB);
  fill(b, 0, 2 * MiB);
  q = mtp_realloc(b, 3000);
  REQUIRE(q != NULL, "realloc");
  CHECK(intact(q, 3000));
  CHECK(mtp_pool_of(q) == p);
  CHECK(th_stats(p).large_blocks == 0);
  q = mtp_realloc(q, 5 * MiB); /* and back up */
  CHECK(intact(q, 3000));
  CHECK(mtp_usable_size(q) >= 5 * MiB);
  mtp_free(q);
  /* grown by half its size or more while a cached range holds the new size: moved there (its
   * pages resident) rather than grown by mremap into pages to fault in; nothing mapped. A fresh
   * pool, so that the layout is known: its reserve is carved in address order (big, b, fence),
   * and b has no free range after it to grow into. */
  mtp_pool_t *g = th_pool("large", 60000, 0);
  unsigned char *big = mtp_pool_alloc(g, 4 * MiB);
  b = mtp_pool_alloc(g, MiB);
  unsigned char *fence = mtp_pool_alloc(g, MiB);
  REQUIRE(big != NULL && b != NULL && fence != NULL, "alloc");
  REQUIRE(b == big + 4 * MiB && fence == b + MiB, "carved in address order");
  fill(b, 0, MiB);
  mtp_free(big);
  mapped = th_stats(g).bytes_mapped;
  q = mtp_realloc(b, 3 * MiB);
  REQUIRE(q != NULL, "realloc");
  CHECK(q == big); /* the cached range */
  CHECK(intact(q, MiB));
  CHECK_EQ_SZ(th_stats(g).bytes_mapped, mapped);
  /* grown by less than half: in place or by mremap, as before */
  b = mtp_realloc(q, 3 * MiB + MiB / 4);
  REQUIRE(b != NULL, "realloc");
  CHECK(intact(b, MiB));
  mtp_free(b);
  mtp_free(fence);
  mtp_pool_destroy(g);
  /* a checked pool copies (exact canary), and still catches an overflow past a large block */
  mtp_pool_t *c = th_pool("large", 60000, 1);
  b = mtp_pool_alloc(c, 100000);
  fill(b, 0, 100000);
  q = mtp_realloc(b, 200000);
  REQUIRE(q != NULL, "realloc");
  CHECK(intact(q, 100000));
  CHECK_EQ_SZ(mtp_usable_size(q), 200000);
  th_opaque_ptr(q)[th_opaque(200000)] = 0x55; /* one byte past the requested size */
  g_errs = 0;
  mtp_free(q);
  CHECK(g_errs == 1 && g_err == MTP_ERR_OVERFLOW);
  g_errs = 0;
  mtp_pool_destroy(c);
  mtp_pool_destroy(p);
}

static void test_os_failure(void) {
  mtp_pool_t *p = th_pool("large", 60000, 0);
  unsigned char *a = mtp_pool_alloc(p, 2 * MiB), *b = mtp_pool_alloc(p, MiB);
  REQUIRE(a && b, "alloc");
  fill(b, 0, MiB);
  mtp_free(a);
  mtp__os_inject_failure(0); /* every map (and growing remap) fails from now */
  errno = 0;
  /* no cached range fits, and it is too big for the pool's reserve: the OS is asked */
  unsigned char *c = mtp_pool_alloc(p, 16 * MiB);
  CHECK(c == NULL && errno == ENOMEM);
  unsigned char *r = mtp_pool_alloc(p, 4 * MiB); /* carved from the reserve: no OS call */
  CHECK(r != NULL && all_zero(r, 4 * MiB));
  c = mtp_pool_alloc(p, 2 * MiB); /* the cached one fits: no OS call */
  CHECK(c != NULL);
  mtp_free(r);
  errno = 0;
  unsigned char *q = mtp_realloc(b, 16 * MiB); /* mremap and a fresh map both refused */
  CHECK(q == NULL && errno == ENOMEM);
  CHECK(intact(b, MiB)); /* untouched */
  CHECK_EQ_SZ(mtp_usable_size(b), MiB);
  q = mtp_realloc(b, MiB / 2); /* shrinking needs no new memory */
  CHECK(q == b && intact(q, MiB / 2));
  mtp__os_inject_failure(-1);
  q = mtp_realloc(q, 16 * MiB);
  REQUIRE(q != NULL, "realloc");
  CHECK(intact(q, MiB / 2));
  mtp_free(q);
  mtp_free(c);
  mtp_stats_t st = th_stats(p);
  CHECK_EQ_SZ(st.blocks_in_use, 0);
  CHECK(g_errs == 0);
  mtp_pool_destroy(p);
}

/* Two threads allocate, grow, check and free blocks of 40 KiB .. 2 MiB in one pool, and a third
 * trims it now and then: the cache, mremap and the purge race with each other. */
static mtp_pool_t *g_mt_pool;
static int g_mt_stop; /* __atomic: the main thread stops the trimmer */
static void *mt_worker(void *arg) {
  th_rng_t r;
  th_rng_seed(&r, (uintptr_t)arg, 3, 5);
  int bad = 0;
  for (int i = 0; i < 400; i++) {
    size_t n = 40000 + th_below(&r, 2 * MiB);
    unsigned char *p = mtp_pool_alloc(g_mt_pool, n);
    if (p == NULL) return (void *)1;
    fill(p, 0, n);
    if (th_below(&r, 2)) {
      size_t m = n + th_below(&r, MiB);
      unsigned char *q = mtp_realloc(p, m);
      if (q == NULL) return (void *)1;
      bad |= !intact(q, n);
      p = q;
      n = m;
    }
    if (mtp_usable_size(p) < n) bad = 1;
    mtp_free(p);
  }
  return (void *)(uintptr_t)bad;
}
static void *mt_trimmer(void *arg) {
  (void)arg;
  while (!__atomic_load_n(&g_mt_stop, __ATOMIC_RELAXED)) {
    mtp_pool_trim(g_mt_pool);
    usleep(2000);
  }
  return NULL;
}

static void test_threads(void) {
  g_mt_pool = th_pool("large", 5, 0); /* a short delay: the purge thread runs during the test */
  pthread_t t[3];
  for (uintptr_t i = 0; i < 2; i++) pthread_create(&t[i], NULL, mt_worker, (void *)(i + 1));
  pthread_create(&t[2], NULL, mt_trimmer, NULL);
  void *r0, *r1;
  pthread_join(t[0], &r0);
  pthread_join(t[1], &r1);
  __atomic_store_n(&g_mt_stop, 1, __ATOMIC_RELAXED);
  pthread_join(t[2], NULL);
  CHECK(r0 == NULL && r1 == NULL);
  mtp_stats_t st = th_stats(g_mt_pool);
  CHECK_EQ_SZ(st.blocks_in_use, 0);
  CHECK_EQ_SZ(st.allocs, st.frees);
  mtp_pool_destroy(g_mt_pool);
  CHECK(g_errs == 0);
}

/* A realloc that fits the range of the block this thread resized last returns at once, without
 * the large lock, only while no large block anywhere shrank, moved or was freed since: a block
 * another thread shrank, or one freed, is looked up again. */
static void *shrink_elsewhere(void *arg) { return mtp_realloc(arg, 2 * MiB); }
static void test_realloc_remembered(void) {
  mtp_pool_t *p = th_pool("large", 60000, 0);
  g_errs = 0;
  char *a = mtp_pool_alloc(p, 8 * MiB);
  REQUIRE(a != NULL, "alloc");
  char *b = mtp_realloc(a, 8 * MiB + 4096); /* an eighth more room */
  REQUIRE(b != NULL, "realloc");
  size_t u = mtp_usable_size(b);
  CHECK(u >= 9 * MiB);
  CHECK(mtp_realloc(b, u - 4096) == b); /* fits: kept */
  char *w = mtp_realloc(b, u);
  CHECK(w == b);
  memset(w, 7, u);
  /* another thread shrinks it: the tail goes to the cache */
  pthread_t t;
  void *r = NULL;
  REQUIRE(pthread_create(&t, NULL, shrink_elsewhere, b) == 0, "create");
  pthread_join(t, &r);
  CHECK(r == b);
  CHECK_EQ_SZ(mtp_usable_size(b), 2 * MiB);
  /* back here, the size the remembered range held is a growth again */
  char *c = mtp_realloc(b, u - 4096);
  REQUIRE(c != NULL, "realloc");
  CHECK(mtp_usable_size(c) >= u - 4096);
  CHECK(c[0] == 7 && c[2 * MiB - 1] == 7);
  memset(c, 8, u - 4096);
  char *d = mtp_pool_alloc(p, 4 * MiB); /* may take the cached tail: never inside c */
  REQUIRE(d != NULL, "alloc");
  CHECK(d + 4 * MiB <= c || d >= c + (u - 4096));
  mtp_free(d);
  /* freed, then resized: reported, not kept */
  mtp_free(c);
  errno = 0;
  CHECK(mtp_realloc(c, u - 8192) == NULL && errno == EINVAL);
  CHECK(g_errs == 1 && g_err == MTP_ERR_INVALID_POINTER && g_err_ptr == c);
  g_errs = 0;
  mtp_pool_destroy(p);
}

int main(void) {
  mtp_set_error_handler(on_error, NULL);
  RUN(test_reuse_and_stats);
  RUN(test_calloc);
  RUN(test_grow_cached);
  RUN(test_two_mappings);
  RUN(test_bound);
  RUN(test_purge_after_delay);
  RUN(test_trim_and_destroy);
  RUN(test_bad_input);
  RUN(test_checked_quarantine);
  RUN(test_realloc);
  RUN(test_realloc_remembered);
  RUN(test_os_failure);
  RUN(test_threads);
  DONE();
}
