/* Medium blocks of whole pages (above 32 KiB, up to MTP_MEDIUM_MAX; sizes of whole pages,
 * page-aligned requests and blocks realloc moves): spans of 64 KiB pages of the pool's regions
 * (c_core/src/pool/medium.c). Sizes, alignment and usable size; statistics and the heap walk; a
 * freed span's pages reused by a small class with no new region; a freed span kept by its
 * freeing thread's cache (reuse, misuse reports, trim, thread exit); calloc (zero, untouched pages
 * not faulted in); realloc in place (grow, shrink) and across small, medium and large; the exact
 * reports of misuse (double free, interior pointer, wrong size, a write after free); trim,
 * purge after the delay, destroy; the region accounting under churn (MTPOOL_DEBUG=2 builds
 * validate it at every span operation); fork; two threads allocating and freeing each other's
 * spans (for TSan). */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mtpool/mtpool.h"
#include "base/types.h" /* MTP_MEDIUM_MAX, MTP_PAGE_SIZE, MTP_MAX_SMALL */
#include "testhelper.h"
#include "th_handoff.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define PAGE MTP_PAGE_SIZE

static int g_err, g_errs;
static void *g_err_ptr;
static const char *g_msg = "";
static void on_error(int err, const char *msg, void *p, void *arg) {
  (void)arg;
  g_msg = msg;
  g_err = err;
  g_err_ptr = p;
  g_errs++;
}

/* A medium block of whole pages: a plain request of most sizes is packed (test_packed.c); one
 * aligned to a page never is. */
static void *span_alloc(mtp_pool_t *p, size_t n) {
  return n > MTP_MAX_SMALL ? mtp_pool_alloc_aligned(p, n, PAGE) : mtp_pool_alloc(p, n);
}

static size_t pages_of(size_t n) { return (n + PAGE - 1) / PAGE * PAGE; }

static void test_sizes_and_stats(void) {
  mtp_pool_t *p = th_pool("span", 60000, 0);
  const size_t sizes[] = {MTP_MAX_SMALL + 1, 40000, PAGE, PAGE + 1, 100 * KiB, 200 * KiB, MTP_MEDIUM_MAX};
  enum { N = sizeof(sizes) / sizeof(sizes[0]) };
  char *b[N];
  size_t bytes = 0;
  for (int i = 0; i < N; i++) {
    b[i] = span_alloc(p, sizes[i]);
    REQUIRE(b[i] != NULL, "alloc %zu", sizes[i]);
    CHECK(((uintptr_t)b[i] & (PAGE - 1)) == 0); /* a span starts on a page */
    CHECK_EQ_SZ(mtp_usable_size(b[i]), pages_of(sizes[i]));
    CHECK(mtp_pool_of(b[i]) == p);
    memset(b[i], i + 1, mtp_usable_size(b[i]));
    bytes += pages_of(sizes[i]);
  }
  mtp_stats_t st = th_stats(p);
  CHECK_EQ_SZ(st.large_blocks, N);
  CHECK_EQ_SZ(st.large_bytes, bytes);
  CHECK_EQ_SZ(st.blocks_in_use, N);
  CHECK_EQ_SZ(st.bytes_in_use, bytes);
  CHECK_EQ_SZ(st.allocs, N);
  /* in the regions: what is mapped is regions, and what is in use is reserved */
  CHECK(st.bytes_mapped % (4 * MiB) == 0 && st.bytes_reserved >= bytes);
  for (int i = 0; i < N; i++) {
    CHECK(b[i][0] == i + 1 && b[i][pages_of(sizes[i]) - 1] == i + 1);
    mtp_free(b[i]);
  }
  st = th_stats(p);
  CHECK_EQ_SZ(st.large_blocks, 0);
  CHECK_EQ_SZ(st.bytes_in_use, 0);
  CHECK_EQ_SZ(st.frees, N);
  CHECK(g_errs == 0);
  /* the next size up is a large block: a mapping of its own */
  size_t mapped = st.bytes_mapped;
  char *l = span_alloc(p, MTP_MEDIUM_MAX + 1);
  REQUIRE(l != NULL, "alloc");
  CHECK(th_stats(p).bytes_mapped > mapped);
  mtp_free(l);
  mtp_pool_destroy(p);
}

static mtp_pool_t *pool_cache(const char *name, size_t thread_cache_bytes) {
  mtp_options_t o;
  mtp_options_init(&o);
  o.name = name;
  o.purge_delay_ms = 60000;
  o.thread_cache_bytes = thread_cache_bytes;
  mtp_pool_t *p = mtp_pool_create(&o);
  REQUIRE(p != NULL, "pool_create");
  return p;
}

/* In a pool that keeps no span in its threads' caches, a freed span's pages are free region
 * pages: a small class's slabs take them (resident pages first) and no region is mapped. */
static void test_reuse_by_small(void) {
  mtp_pool_t *p = pool_cache("span", 0);
  char *s = span_alloc(p, MTP_MEDIUM_MAX);
  REQUIRE(s != NULL, "alloc");
  memset(s, 1, MTP_MEDIUM_MAX);
  size_t mapped = th_stats(p).bytes_mapped;
  mtp_free(s);
  /* blocks of 4 KiB (one page slabs) until the freed pages are used again, at most a region's */
  enum { MAX = 1024 };
  static char *small[MAX];
  int n = 0, inside = 0;
  while (n < MAX && inside == 0) {
    small[n] = span_alloc(p, 4096);
    REQUIRE(small[n] != NULL, "alloc");
    if (small[n] >= s && small[n] < s + MTP_MEDIUM_MAX) inside++;
    n++;
  }
  printf("a small block took a freed span's page after %d blocks of 4 KiB\n", n);
  CHECK(inside > 0);
  CHECK_EQ_SZ(th_stats(p).bytes_mapped, mapped); /* no new region */
  for (int i = 0; i < n; i++) mtp_free(small[i]);
  /* and a span takes what a slab left */
  mtp_pool_trim(p);
  CHECK(g_errs == 0);
  mtp_pool_destroy(p);
}

static bool all_zero(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != 0) return false;
  return true;
}

static void test_calloc(void) {
  mtp_pool_t *p = th_pool("span", 60000, 0);
  size_t n = 3 * PAGE; /* calloc packs sizes that whole pages do not fit (test_packed.c) */
  /* never-touched pages: zero, and not written (not faulted in) */
  unsigned char *a = mtp_pool_calloc(p, 1, n);
  REQUIRE(a != NULL, "calloc");
  if (!TH_SANITIZED) CHECK(th_resident(a, n) == 0);
  CHECK(all_zero(a, n));
  memset(a, 0xAB, n);
  mtp_free(a);
  /* the same pages again, resident and dirty (once another span was freed last): cleared */
  void *other = span_alloc(p, n);
  mtp_free(other);
  unsigned char *b = mtp_pool_calloc(p, n / PAGE, PAGE);
  REQUIRE(b != NULL, "calloc");
  CHECK(b == a);
  CHECK(all_zero(b, n));
  memset(b, 0xCD, n);
  mtp_free(b);
  /* purged pages are zero again */
  mtp_pool_trim(p);
  b = mtp_pool_calloc(p, 1, n);
  REQUIRE(b != NULL, "calloc");
  CHECK(all_zero(b, n));
  mtp_free(b);
  /* a smaller calloc over the dirty pages: its size cleared */
  b = span_alloc(p, n);
  memset(b, 0xEE, n);
  mtp_free(b);
  b = mtp_pool_calloc(p, 2, PAGE);
  CHECK(all_zero(b, 2 * PAGE));
  mtp_free(b);
  CHECK(g_errs == 0);
  mtp_pool_destroy(p);
}

static void fill(unsigned char *p, size_t from, size_t to) {
  for (size_t i = from; i < to; i++) p[i] = (unsigned char)(i * 131 >> 8);
}
static bool intact(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != (unsigned char)(i * 131 >> 8)) return false;
  return true;
}

static void test_realloc(void) {
  mtp_pool_t *p = th_pool("span", 60000, 0);
  /* grow in place while the pages after it are free */
  unsigned char *a = span_alloc(p, 40 * KiB);
  REQUIRE(a != NULL, "alloc");
  fill(a, 0, 40 * KiB);
  unsigned char *q = mtp_realloc(a, 150 * KiB);
  CHECK(q == a);
  CHECK_EQ_SZ(mtp_usable_size(q), 192 * KiB);
  CHECK(intact(q, 40 * KiB));
  fill(q, 40 * KiB, 150 * KiB);
  CHECK_EQ_SZ(th_stats(p).large_bytes, 192 * KiB);
  /* shrink in place: its tail pages are free again */
  q = mtp_realloc(q, 70 * KiB);
  CHECK(q == a);
  CHECK_EQ_SZ(mtp_usable_size(q), 128 * KiB);
  CHECK_EQ_SZ(th_stats(p).large_bytes, 128 * KiB);
  CHECK(intact(q, 70 * KiB));
  /* a block in the way: the next growth moves */
  unsigned char *wall = span_alloc(p, 64 * KiB);
  REQUIRE(wall != NULL, "alloc");
  if (wall == q + 128 * KiB) {
    unsigned char *r = mtp_realloc(q, 200 * KiB);
    REQUIRE(r != NULL, "realloc");
    CHECK(r != q);
    CHECK(intact(r, 70 * KiB));
    q = r;
  }
  fill(q, 70 * KiB, 100 * KiB);
  /* medium -> large -> medium (stays in its mapping) -> small -> medium: contents kept */
  q = mtp_realloc(q, MTP_MEDIUM_MAX + 100 * KiB);
  REQUIRE(q != NULL, "realloc");
  CHECK(intact(q, 100 * KiB));
  fill(q, 100 * KiB, MTP_MEDIUM_MAX + 100 * KiB);
  q = mtp_realloc(q, 90 * KiB);
  REQUIRE(q != NULL, "realloc");
  CHECK(intact(q, 90 * KiB));
  q = mtp_realloc(q, 3000);
  REQUIRE(q != NULL, "realloc");
  CHECK(intact(q, 3000));
  CHECK(mtp_usable_size(q) < 32 * KiB);
  q = mtp_realloc(q, 60 * KiB);
  REQUIRE(q != NULL, "realloc");
  CHECK(intact(q, 3000));
  CHECK_EQ_SZ(mtp_usable_size(q), 64 * KiB);
  mtp_free_sized(q, 60 * KiB);
  mtp_free(wall);
  CHECK_EQ_SZ(th_stats(p).blocks_in_use, 0);
  CHECK(g_errs == 0);
  mtp_pool_destroy(p);
}

static void test_aligned(void) {
  mtp_pool_t *p = th_pool("span", 60000, 0);
  size_t mapped0 = th_stats(p).bytes_mapped;
  void *a = mtp_pool_alloc_aligned(p, 100, PAGE); /* no class: a one-page span */
  void *b = mtp_pool_alloc_aligned(p, 100 * KiB, PAGE);
  void *c = mtp_pool_alloc_aligned(p, 100 * KiB, 2 * PAGE); /* beyond a page: a large block */
  REQUIRE(a && b && c, "aligned");
  CHECK(((uintptr_t)a & (PAGE - 1)) == 0 && ((uintptr_t)b & (PAGE - 1)) == 0);
  CHECK(((uintptr_t)c & (2 * PAGE - 1)) == 0);
  CHECK_EQ_SZ(mtp_usable_size(a), PAGE);
  mtp_stats_t st = th_stats(p);
  CHECK_EQ_SZ(st.large_blocks, 3);
  CHECK(st.bytes_mapped >= mapped0 + 4 * MiB);
  mtp_free_sized(a, 100); /* the requested size */
  mtp_free_sized(b, 128 * KiB); /* the usable size */
  mtp_free(c);
  CHECK(g_errs == 0);
  mtp_pool_destroy(p);
}

static int visit_count(void *arg, void *block, size_t usable, unsigned cls) {
  size_t *c = arg;
  if (cls == MTP_VISIT_LARGE) {
    c[0]++;
    c[1] += usable;
    c[2] ^= (size_t)(uintptr_t)block;
  }
  return 0;
}

static void test_visit(void) {
  mtp_pool_t *p = th_pool("span", 60000, 0);
  char *a = span_alloc(p, 50 * KiB), *b = span_alloc(p, 130 * KiB);
  char *c = span_alloc(p, 100), *d = span_alloc(p, 90 * KiB);
  REQUIRE(a && b && c && d, "alloc");
  mtp_free(d);
  size_t got[3] = {0, 0, 0};
  CHECK(mtp_pool_visit(p, visit_count, got) == 0);
  CHECK_EQ_SZ(got[0], 2);
  CHECK_EQ_SZ(got[1], 64 * KiB + 192 * KiB);
  CHECK_EQ_SZ(got[2], (size_t)(uintptr_t)a ^ (size_t)(uintptr_t)b);
  mtp_free(a);
  mtp_free(b);
  mtp_free(c);
  mtp_pool_destroy(p);
}

/* A span of size bytes, taken after one other span of that size was allocated and freed: in a
 * pool whose thread cache keeps spans, the span this thread freed last before the call, if it
 * fits (the cache never hands out the span freed last). */
static char *alloc_past_newest(mtp_pool_t *p, size_t size) {
  char *other = span_alloc(p, size);
  mtp_free(other);
  return span_alloc(p, size);
}

/* Write into the span `freed` (size bytes), freed last, take a span of that size again: it is
 * the same one, and the write is reported as the errs-th error. Not under AddressSanitizer,
 * which reports the write itself. */
static void check_write_after_free(mtp_pool_t *p, char *freed, size_t size, int errs) {
  if (TH_SANITIZED) return;
  memset(freed, 'W', 16);
  char *again = alloc_past_newest(p, size);
  CHECK(again == freed);
  CHECK(g_errs == errs && g_err == MTP_ERR_USE_AFTER_FREE && g_err_ptr == again);
  mtp_free(again);
}

static void test_misuse(void) {
  mtp_pool_t *p = th_pool("span", 60000, 0);
  g_errs = 0;
  char *a = span_alloc(p, 100 * KiB);
  REQUIRE(a != NULL, "alloc");
  mtp_free(a + 4096); /* interior, first page */
  CHECK(g_errs == 1 && g_err == MTP_ERR_INVALID_POINTER && g_err_ptr == a + 4096);
  mtp_free(a + PAGE + 16); /* interior, a tail page */
  CHECK(g_errs == 2 && g_err == MTP_ERR_INVALID_POINTER && g_err_ptr == a + PAGE + 16);
  mtp_free_sized(a + PAGE, 100 * KiB); /* interior, sized */
  CHECK(g_errs == 3 && g_err == MTP_ERR_INVALID_POINTER);
  mtp_free_sized(a, 64); /* wrong size */
  CHECK(g_errs == 4 && g_err == MTP_ERR_WRONG_SIZE && g_err_ptr == a);
  mtp_free_sized(a, 129 * KiB); /* beyond the usable size */
  CHECK(g_errs == 5 && g_err == MTP_ERR_WRONG_SIZE);
  CHECK(mtp_usable_size(a + 8) == 0 && g_errs == 6 && g_err == MTP_ERR_INVALID_POINTER);
  CHECK_EQ_SZ(th_stats(p).large_blocks, 1); /* none of that freed it */
  mtp_free_sized(a, 40 * KiB); /* above MTP_MAX_SMALL, below the usable size: accepted */
  CHECK(g_errs == 6);
  mtp_free(a); /* its pages are free: a double free */
  CHECK(g_errs == 7 && g_err == MTP_ERR_DOUBLE_FREE && g_err_ptr == a);
  mtp_free_sized(a, 100 * KiB);
  CHECK(g_errs == 8 && g_err == MTP_ERR_DOUBLE_FREE);
  errno = 0;
  CHECK(mtp_realloc(a, 200 * KiB) == NULL && errno == EINVAL && g_errs == 9);
  CHECK(mtp_pool_of(a) == NULL);
  CHECK_EQ_SZ(th_stats(p).frees, 1);
  /* a write after free into a span's start is reported when a span takes the page again */
  char *b = span_alloc(p, 100 * KiB);
  REQUIRE(b != NULL, "alloc");
  mtp_free(b);
  check_write_after_free(p, b, 100 * KiB, 10);
  g_errs = 0;
  mtp_pool_destroy(p);
}

/* A span freed by a thread that allocates from the pool waits in that thread's cache: a later
 * span of as many pages (or up to a quarter more) is that one, taken without the pool lock, but
 * never the span the thread freed last, so that a use after free of it cannot reach the next
 * block of its size. While cached it is free in the statistics and the heap walk, and every
 * misuse of its address is still reported; trim and the thread's exit give it back to its
 * region. */
static void *alloc_100k(void *arg) { return span_alloc(arg, 100 * KiB); }
static void *alloc_free_200k(void *arg) {
  char *a = span_alloc(arg, 200 * KiB);
  if (a) memset(a, 1, 200 * KiB);
  mtp_free(a);
  return a;
}
static void test_thread_cache(void) {
  mtp_pool_t *p = pool_cache("span", 2 * MiB);
  g_errs = 0;
  char *a = span_alloc(p, 100 * KiB);
  REQUIRE(a != NULL, "alloc");
  memset(a, 1, 100 * KiB);
  mtp_free(a);
  mtp_stats_t st = th_stats(p);
  CHECK_EQ_SZ(st.large_blocks, 0);
  CHECK_EQ_SZ(st.bytes_in_use, 0);
  CHECK_EQ_SZ(st.frees, 1);
  char *fresh = span_alloc(p, 120 * KiB);
  CHECK(fresh != NULL && fresh != a); /* a, freed last, is not handed back at once */
  mtp_free(fresh);
  char *b = span_alloc(p, 120 * KiB);
  CHECK(b == a); /* the same two pages, from the cache, now that fresh was freed last */
  CHECK_EQ_SZ(th_stats(p).large_bytes, 128 * KiB);
  mtp_free(b);
  /* misuse of a cached span's address */
  mtp_free(b);
  CHECK(g_errs == 1 && g_err == MTP_ERR_DOUBLE_FREE && g_err_ptr == b && strstr(g_msg, "freed already"));
  mtp_free_sized(b, 120 * KiB);
  CHECK(g_errs == 2 && g_err == MTP_ERR_DOUBLE_FREE);
  errno = 0;
  CHECK(mtp_realloc(b, 200 * KiB) == NULL && errno == EINVAL && g_errs == 3);
  CHECK(mtp_pool_of(b) == NULL);
  mtp_free(b + 4096);
  CHECK(g_errs == 4 && g_err == MTP_ERR_INVALID_POINTER);
  g_errs = 0;
  size_t got[3] = {0, 0, 0};
  CHECK(mtp_pool_visit(p, visit_count, got) == 0);
  CHECK_EQ_SZ(got[0], 0);
  char *c = span_alloc(p, 200 * KiB);
  REQUIRE(c != NULL, "alloc");
  mtp_free(c);
  /* up to a quarter more pages: a 5-page span serves a 4-page request, whole (builds whose
   * spans reach 5 pages) */
  if (MTP_MEDIUM_MAX >= 320 * KiB) {
    char *c5 = span_alloc(p, 300 * KiB);
    REQUIRE(c5 != NULL, "alloc");
    mtp_free(c5);
    char *d = alloc_past_newest(p, 250 * KiB);
    CHECK(d == c5);
    CHECK_EQ_SZ(mtp_usable_size(d), 320 * KiB);
    mtp_free_sized(d, 250 * KiB);
    CHECK(g_errs == 0);
  }
  /* calloc from the cache: the dirty pages cleared */
  char *c2 = span_alloc(p, 200 * KiB);
  CHECK(c2 != c);
  memset(c2, 3, 200 * KiB);
  mtp_free(c2);
  unsigned char *z = mtp_pool_calloc(p, 4, PAGE); /* whole pages: a run */
  CHECK(z == (unsigned char *)c);
  CHECK(all_zero(z, 4 * PAGE));
  mtp_free(z);
  /* a write after free into a cached span's start is reported when it is handed out again */
  check_write_after_free(p, c, 200 * KiB, 1);
  g_errs = 0;
  /* trim gives the cached spans back */
  CHECK(mtp_pool_trim(p) >= 2 * 256 * KiB + 2 * 128 * KiB);
  CHECK_EQ_SZ(th_stats(p).bytes_mapped, 0);
  /* a span another thread allocated, freed here: this thread's cache keeps it */
  pthread_t t;
  void *r = NULL;
  REQUIRE(pthread_create(&t, NULL, alloc_100k, p) == 0, "create");
  pthread_join(t, &r);
  REQUIRE(r != NULL, "alloc in thread");
  mtp_free(r);
  CHECK(alloc_past_newest(p, 100 * KiB) == r);
  mtp_free(r);
  /* a thread's cached span goes back to its region when the thread exits */
  REQUIRE(pthread_create(&t, NULL, alloc_free_200k, p) == 0, "create");
  pthread_join(t, &r);
  st = th_stats(p);
  CHECK_EQ_SZ(st.blocks_in_use, 0);
  CHECK(mtp_pool_trim(p) >= 256 * KiB + 128 * KiB);
  /* a bound: spans above the pool's thread_cache_bytes are never cached */
  mtp_pool_t *q = pool_cache("span", 128 * KiB);
  char *big = span_alloc(q, 200 * KiB);
  REQUIRE(big != NULL, "alloc");
  mtp_free(big);
  mtp_free(big);
  CHECK(g_errs == 1 && g_err == MTP_ERR_DOUBLE_FREE && strstr(g_msg, "already free")); /* not cached: its pages are free */
  g_errs = 0;
  mtp_pool_destroy(q);
  mtp_pool_destroy(p);
}

static void test_purge_trim_destroy(void) {
  mtp_pool_t *p = th_pool("span", 2000, 0);
  char *a = span_alloc(p, 200 * KiB);
  REQUIRE(a != NULL, "alloc");
  memset(a, 1, 200 * KiB);
  mtp_free(a);
  mtp_stats_t st = th_stats(p);
  CHECK_EQ_SZ(st.bytes_returned, 0);
  /* a tenth of the delay on (200 ms), the pages go back (the region, all free, too), well before
   * the whole delay */
  double t0 = th_now();
  while (th_stats(p).bytes_returned < 192 * KiB && th_now() - t0 < 5.0) usleep(10000);
  CHECK(th_stats(p).bytes_returned >= 192 * KiB);
  double took = th_now() - t0;
  printf("a freed 200 KiB span's pages went back after %.0f ms (delay 2000 ms: due at 200)\n", took * 1e3);
  CHECK(took < 1.9);
  /* trim returns at once; with only spans used, the pool's regions all go */
  mtp_pool_t *q = th_pool("span", 60000, 0);
  char *b = span_alloc(q, 256 * KiB);
  memset(b, 1, 256 * KiB);
  mtp_free(b);
  CHECK(mtp_pool_trim(q) >= 256 * KiB);
  CHECK_EQ_SZ(th_stats(q).bytes_mapped, 0);
  /* destroy with live spans: they go with the regions */
  for (int i = 0; i < 20; i++) CHECK(span_alloc(q, 100 * KiB + (size_t)i * 4096) != NULL);
  mtp_pool_destroy(q);
  mtp_pool_destroy(p);
  CHECK(g_errs == 0);
}

/* Random spans, reallocs and small blocks in one pool: contents survive, statistics agree with
 * what is live, and once all is freed and trimmed nothing stays mapped. In MTPOOL_DEBUG=2 builds
 * every span operation validates the region accounting (free and dirty masks, free-page counts,
 * descriptors) first. */
static void test_churn_accounting(void) {
  mtp_pool_t *p = th_pool("span", 60000, 0);
  enum { SLOTS = 96 };
  unsigned char *blk[SLOTS] = {0};
  size_t len[SLOTS] = {0};
  th_rng_t r;
  th_rng_seed(&r, 17, 18, 2026);
  for (int step = 0; step < 4000; step++) {
    int i = (int)th_below(&r, SLOTS);
    if (blk[i] != NULL) {
      CHECK(th_verify(blk[i], len[i] < 256 ? len[i] : 256, (uint64_t)i) == (size_t)-1);
      if (th_below(&r, 3) == 0) {
        size_t n = 1 + th_below(&r, MTP_MEDIUM_MAX + 64 * KiB);
        unsigned char *q = mtp_realloc(blk[i], n);
        REQUIRE(q != NULL, "realloc");
        size_t keep = n < len[i] ? n : len[i];
        CHECK(th_verify(q, keep < 256 ? keep : 256, (uint64_t)i) == (size_t)-1);
        blk[i] = q;
        len[i] = n;
        th_fill(q, n < 256 ? n : 256, (uint64_t)i);
      } else {
        if (th_below(&r, 2))
          mtp_free(blk[i]);
        else
          mtp_free_sized(blk[i], len[i]);
        blk[i] = NULL;
      }
    } else {
      size_t n = th_below(&r, 4) == 0 ? 1 + th_below(&r, 4096) : MTP_MAX_SMALL + 1 + th_below(&r, MTP_MEDIUM_MAX - MTP_MAX_SMALL);
      blk[i] = th_below(&r, 5) == 0 ? mtp_pool_calloc(p, 1, n) : span_alloc(p, n);
      REQUIRE(blk[i] != NULL, "alloc");
      len[i] = n;
      th_fill(blk[i], n < 256 ? n : 256, (uint64_t)i);
    }
  }
  size_t live = 0, spans = 0, span_bytes = 0;
  for (int i = 0; i < SLOTS; i++)
    if (blk[i]) {
      live++;
      if (len[i] > MTP_MAX_SMALL && len[i] <= MTP_MEDIUM_MAX) {
        spans++;
        span_bytes += mtp_usable_size(blk[i]);
      }
    }
  mtp_stats_t st = th_stats(p);
  CHECK_EQ_SZ(st.blocks_in_use, live);
  CHECK(st.large_blocks >= spans && st.large_bytes >= span_bytes); /* shrunk large ones stay large */
  for (int i = 0; i < SLOTS; i++) mtp_free(blk[i]);
  st = th_stats(p);
  CHECK_EQ_SZ(st.blocks_in_use, 0);
  CHECK_EQ_SZ(st.bytes_in_use, 0);
  mtp_pool_trim(p);
  mtp_pool_destroy(p);
  CHECK(g_errs == 0);
}

static int fork_child(void) {
  void *a = mtp_alloc(100 * KiB);
  if (a == NULL) return 1;
  memset(a, 1, 100 * KiB);
  mtp_free(a);
  return 0;
}

static void test_fork(void) {
  void *a = mtp_alloc(150 * KiB);
  REQUIRE(a != NULL, "alloc");
  th_fork_check(fork_child);
  mtp_free(a);
}

/* Two threads allocate spans, hand half of them to the other thread to free (a remote free takes
 * the pool lock), and check their contents. */
#define MT_ROUNDS 3000
static void test_threads(void) {
  mtp_pool_t *p = th_pool("span", 50, 0);
  th_handoff((th_handoff_t){.pool = p, .alloc = span_alloc, .lo = MTP_MAX_SMALL + 1,
                            .span = MTP_MEDIUM_MAX - MTP_MAX_SMALL, .rounds = MT_ROUNDS, .seed = 7});
  CHECK_EQ_SZ(th_stats(p).blocks_in_use, 0);
  CHECK_EQ_SZ(th_stats(p).allocs, 2 * MT_ROUNDS);
  mtp_pool_destroy(p);
  CHECK(g_errs == 0);
}

int main(void) {
  mtp_set_error_handler(on_error, NULL);
  RUN(test_sizes_and_stats);
  RUN(test_reuse_by_small);
  RUN(test_calloc);
  RUN(test_realloc);
  RUN(test_aligned);
  RUN(test_visit);
  RUN(test_misuse);
  RUN(test_thread_cache);
  RUN(test_purge_trim_destroy);
  RUN(test_churn_accounting);
  RUN(test_fork);
  RUN(test_threads);
  DONE();
}
