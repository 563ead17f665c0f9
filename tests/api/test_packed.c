/* Packed medium blocks (c_core/src/pool/packed.c): a medium request of any size but whole 64 KiB
 * pages gets 512-byte units of a packed span, several blocks to a page. Fit (usable size within
 * 512 bytes of the request; whole pages a run, exact), alignment, blocks that share pages without
 * overlapping, statistics and the heap walk; the thread's cache (the block freed last is not
 * handed back next, a shorter one never, a longer one split or cut at its place; a write after
 * free reported); calloc (zero, untouched units not faulted in); realloc; the exact reports of
 * misuse; free units purged inside a live span after the delay, and empty spans given back by
 * trim; threads that free each other's blocks and exit with blocks cached (for TSan); a random
 * churn (MTPOOL_DEBUG=2 builds validate every span's map at every operation); fork. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mtpool/mtpool.h"
#include "base/types.h" /* MTP_MEDIUM_MAX, MTP_PAGE_SIZE, MTP_MAX_SMALL, MTP_UNIT_SIZE */
#include "testhelper.h"
#include "th_handoff.h"

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define PAGE MTP_PAGE_SIZE
#define UNIT MTP_UNIT_SIZE

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

/* Whether n is packed: a medium size that is not whole pages. */
static bool packed(size_t n) {
  return n > MTP_MAX_SMALL && n <= MTP_MEDIUM_MAX && n % PAGE != 0;
}

static size_t units_of(size_t n) { return (n + UNIT - 1) / UNIT * UNIT; }

static void test_fit(void) {
  mtp_pool_t *p = th_pool("packed", 60000, 0);
  size_t worst_n = 0;
  double worst = 0;
  for (size_t n = MTP_MAX_SMALL + 1; n <= MTP_MEDIUM_MAX; n += 997) {
    char *b = mtp_pool_alloc(p, n);
    REQUIRE(b != NULL, "alloc %zu", n);
    size_t u = mtp_usable_size(b);
    CHECK(u >= n);
    if (packed(n)) {
      CHECK_EQ_SZ(u, units_of(n));
      CHECK(((uintptr_t)b & (UNIT - 1)) == 0);
    } else {
      CHECK(u == n && ((uintptr_t)b & (PAGE - 1)) == 0); /* a run of whole pages */
    }
    if ((double)u / (double)n > worst) worst = (double)u / (double)n, worst_n = n;
    CHECK(mtp_pool_of(b) == p);
    mtp_free(b);
  }
  /* whole pages are a run; a size just under them is packed (a run would leave a hole) */
  for (size_t k = 1; k * PAGE <= MTP_MEDIUM_MAX; k++) {
    char *w = mtp_pool_alloc(p, k * PAGE), *u = mtp_pool_alloc(p, k * PAGE - 1000);
    REQUIRE(w != NULL && u != NULL, "alloc");
    CHECK(mtp_usable_size(w) == k * PAGE && ((uintptr_t)w & (PAGE - 1)) == 0);
    CHECK_EQ_SZ(mtp_usable_size(u), units_of(k * PAGE - 1000));
    mtp_free(w);
    mtp_free(u);
  }
  printf("worst fit from 32 KiB to 256 KiB: %.4f at %zu bytes\n", worst, worst_n);
  CHECK(worst <= 1.0157);
  /* a power of two and a header: within 2% */
  for (unsigned k = 15; k <= 17; k++)
    for (size_t h = 8; h <= 64; h += 8) {
      size_t n = ((size_t)1 << k) + h;
      char *b = mtp_pool_alloc(p, n);
      REQUIRE(b != NULL, "alloc");
      CHECK((double)mtp_usable_size(b) <= 1.02 * (double)n);
      mtp_free(b);
    }
  CHECK(g_errs == 0);
  mtp_pool_destroy(p);
}

/* Blocks of 40 KiB: several share a page, none overlaps another, and each keeps its bytes. */
static void test_shared_pages(void) {
  mtp_pool_t *p = th_pool("packed", 60000, 0);
  enum { N = 40 };
  unsigned char *b[N];
  size_t bytes = 0;
  for (int i = 0; i < N; i++) {
    b[i] = mtp_pool_alloc(p, 40 * KiB + (size_t)i);
    REQUIRE(b[i] != NULL, "alloc");
    memset(b[i], i + 1, mtp_usable_size(b[i]));
    bytes += mtp_usable_size(b[i]);
  }
  int same_page = 0;
  for (int i = 0; i < N; i++)
    for (int j = 0; j < N; j++) {
      if (i == j) continue;
      CHECK(b[j] + mtp_usable_size(b[j]) <= b[i] || b[i] + mtp_usable_size(b[i]) <= b[j]);
      same_page += ((uintptr_t)b[i] / PAGE == (uintptr_t)(b[j] + mtp_usable_size(b[j]) - 1) / PAGE);
    }
  CHECK(same_page > 0); /* a block ends in the page the next begins in */
  for (int i = 0; i < N; i++)
    for (size_t k = 0; k < mtp_usable_size(b[i]); k += 509) CHECK(b[i][k] == i + 1);
  mtp_stats_t st = th_stats(p);
  CHECK_EQ_SZ(st.large_blocks, N);
  CHECK_EQ_SZ(st.large_bytes, bytes);
  CHECK_EQ_SZ(st.blocks_in_use, N);
  CHECK_EQ_SZ(st.bytes_in_use, bytes);
  CHECK_EQ_SZ(st.allocs, N);
  CHECK(st.bytes_reserved < bytes + bytes / 4 + 2 * MiB); /* packed: not a page each */
  for (int i = 0; i < N; i++) mtp_free_sized(b[i], 40 * KiB + (size_t)i);
  st = th_stats(p);
  CHECK_EQ_SZ(st.blocks_in_use, 0);
  CHECK_EQ_SZ(st.frees, N);
  CHECK(g_errs == 0);
  /* trim: the empty spans go back, and with them the regions */
  CHECK(mtp_pool_trim(p) > 0);
  CHECK_EQ_SZ(th_stats(p).bytes_mapped, 0);
  mtp_pool_destroy(p);
}

static int visit_count(void *arg, void *block, size_t usable, unsigned cls) {
  size_t *got = arg;
  (void)block;
  got[0]++;
  got[1] += usable;
  got[2] += cls == MTP_VISIT_LARGE;
  return 0;
}

static void test_visit(void) {
  mtp_pool_t *p = th_pool("packed", 60000, 0);
  char *a = mtp_pool_alloc(p, 50 * KiB), *b = mtp_pool_alloc(p, 90 * KiB);
  char *c = mtp_pool_alloc(p, 70 * KiB), *d = mtp_pool_alloc(p, 100);
  REQUIRE(a && b && c && d, "alloc");
  mtp_free(c); /* waits in this thread's cache: not a live block */
  size_t got[3] = {0, 0, 0};
  CHECK(mtp_pool_visit(p, visit_count, got) == 0);
  CHECK_EQ_SZ(got[0], 3);
  CHECK_EQ_SZ(got[2], 2);
  CHECK_EQ_SZ(got[1], units_of(50 * KiB) + units_of(90 * KiB) + mtp_usable_size(d));
  mtp_free(a);
  mtp_free(b);
  mtp_free(d);
  mtp_pool_destroy(p);
}

static bool all_zero(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != 0) return false;
  return true;
}

/* The thread's cache on a request: a cached block it fits within an eighth is handed back; none,
 * but one longer by a packed block at least: its first units are handed out and the rest stays
 * cached; longer by less: the request is cut at its place; never a shorter block, never the block
 * freed last. */
static void test_cache_choice(void) {
  mtp_pool_t *p = th_pool("packed", 60000, 0);
  unsigned char *a = mtp_pool_alloc(p, 40000), *b = mtp_pool_alloc(p, 100000);
  unsigned char *c = mtp_pool_alloc(p, 70000), *x = mtp_pool_alloc(p, 50000);
  unsigned char *y = mtp_pool_alloc(p, 36000);
  REQUIRE(a && b && c && x && y, "alloc");
  mtp_free(b);
  mtp_free(a);
  mtp_free(x); /* the newest */
  unsigned char *q1 = mtp_pool_alloc(p, 60000); /* a is shorter; b longer by 78 units */
  CHECK(q1 == b);
  CHECK_EQ_SZ(mtp_usable_size(q1), units_of(60000));
  unsigned char *q2 = mtp_pool_alloc(p, 39500); /* b's rest, 78 units, the shortest that holds it */
  CHECK(q2 == b + units_of(60000));
  CHECK_EQ_SZ(mtp_usable_size(q2), units_of(100000) - units_of(60000));
  unsigned char *q3 = mtp_pool_alloc(p, 40000);
  CHECK(q3 == a);
  mtp_free(c);
  mtp_free(y); /* x stays cached, y the newest */
  unsigned char *q4 = mtp_pool_alloc(p, 60000); /* c longer by 19 units: cut at its place */
  CHECK(q4 == c);
  CHECK_EQ_SZ(mtp_usable_size(q4), units_of(60000));
  unsigned char *q5 = mtp_pool_alloc(p, 120000); /* x and y are shorter */
  REQUIRE(q5 != NULL, "alloc");
  CHECK(q5 != x && q5 != y);
  CHECK(mtp_usable_size(q5) >= 120000);
  unsigned char *q[] = {q1, q2, q3, q4, q5};
  size_t len[] = {60000, 39500, 40000, 60000, 120000};
  for (int i = 0; i < 5; i++) memset(q[i], i + 1, len[i]);
  for (int i = 0; i < 5; i++) CHECK(q[i][0] == i + 1 && q[i][len[i] - 1] == i + 1);
  for (int i = 0; i < 5; i++) mtp_free(q[i]);
  CHECK_EQ_SZ(th_stats(p).blocks_in_use, 0);
  CHECK(g_errs == 0);
  mtp_pool_destroy(p);
}

static void test_calloc(void) {
  mtp_pool_t *p = th_pool("packed", 60000, 0);
  size_t n = 200 * KiB + 100;
  /* never-touched units: zero, and not written (the OS pages inside the block not faulted in) */
  unsigned char *a = mtp_pool_calloc(p, 1, n);
  REQUIRE(a != NULL, "calloc");
  if (!TH_SANITIZED) CHECK(th_resident_inside(a + 8 * KiB, 128 * KiB) == 0);
  CHECK(all_zero(a, n));
  memset(a, 0xAB, n);
  mtp_free(a);
  /* from the cache (after another block of the size was freed last): cleared */
  void *other = mtp_pool_alloc(p, n);
  REQUIRE(other != NULL, "alloc");
  memset(other, 0xCD, n);
  mtp_free(other);
  unsigned char *b = mtp_pool_calloc(p, n / 100, 100);
  REQUIRE(b != NULL, "calloc");
  CHECK(b == a);
  CHECK(all_zero(b, n / 100 * 100));
  memset(b, 0xEE, n);
  mtp_free(b);
  /* from dirty units of the span once the cache gave them back (trim) */
  mtp_pool_trim(p);
  unsigned char *keep = mtp_pool_alloc(p, 40 * KiB); /* keeps a span alive */
  REQUIRE(keep != NULL, "alloc");
  unsigned char *c = mtp_pool_alloc(p, 150 * KiB);
  REQUIRE(c != NULL, "alloc");
  memset(c, 0x77, 150 * KiB);
  mtp_free(c);
  mtp_free(mtp_pool_alloc(p, 150 * KiB)); /* c is freed last no more */
  mtp_pool_trim(p);
  for (int i = 0; i < 3; i++) {
    unsigned char *z = mtp_pool_calloc(p, 1, 150 * KiB - (size_t)i * 1000);
    REQUIRE(z != NULL, "calloc");
    CHECK(all_zero(z, 150 * KiB - (size_t)i * 1000));
    memset(z, 0x55, 150 * KiB - (size_t)i * 1000);
    mtp_free(z);
  }
  mtp_free(keep);
  CHECK(g_errs == 0);
  mtp_pool_destroy(p);
}

static void fill(unsigned char *p, size_t from, size_t to) {
  for (size_t i = from; i < to; i++) p[i] = (unsigned char)(i * 7 + 3);
}
static bool intact(const unsigned char *p, size_t to) {
  for (size_t i = 0; i < to; i++)
    if (p[i] != (unsigned char)(i * 7 + 3)) return false;
  return true;
}

static void test_realloc_aligned(void) {
  mtp_pool_t *p = th_pool("packed", 60000, 0);
  unsigned char *a = mtp_pool_alloc(p, 40 * KiB);
  REQUIRE(a != NULL, "alloc");
  fill(a, 0, 40 * KiB);
  /* shrunk by at most an eighth: kept; by more: moved to a packed block that fits */
  CHECK(mtp_realloc(a, 40 * KiB - 100) == a);
  CHECK(mtp_realloc(a, 36 * KiB) == a);
  CHECK(mtp_realloc(a, 40 * KiB) == a);
  unsigned char *b = mtp_pool_alloc(p, 80 * KiB);
  REQUIRE(b != NULL, "alloc");
  fill(b, 0, 80 * KiB);
  unsigned char *sh = mtp_realloc(b, 50 * KiB);
  REQUIRE(sh != NULL, "realloc");
  CHECK(sh != b && intact(sh, 50 * KiB) && mtp_usable_size(sh) == units_of(50 * KiB));
  mtp_free_sized(sh, 50 * KiB);
  /* grown: moved, to a run of whole pages that realloc can grow in place */
  unsigned char *q = mtp_realloc(a, 100 * KiB);
  REQUIRE(q != NULL, "realloc");
  CHECK(intact(q, 40 * KiB));
  CHECK_EQ_SZ(mtp_usable_size(q) % PAGE, 0);
  fill(q, 0, 100 * KiB);
  mtp_free(q);
  /* shrunk to a small block */
  unsigned char *s = mtp_pool_alloc(p, 70 * KiB);
  REQUIRE(s != NULL, "alloc");
  fill(s, 0, 70 * KiB);
  q = mtp_realloc(s, 3000);
  REQUIRE(q != NULL, "realloc");
  CHECK(intact(q, 3000) && mtp_usable_size(q) < MTP_MAX_SMALL);
  mtp_free(q);
  /* aligned: to a unit, packed; beyond, whole pages */
  void *u = mtp_pool_alloc_aligned(p, 70 * KiB, UNIT);
  void *w = mtp_pool_alloc_aligned(p, 70 * KiB, 4096);
  REQUIRE(u && w, "aligned");
  CHECK(((uintptr_t)u & (UNIT - 1)) == 0 && mtp_usable_size(u) == 70 * KiB);
  CHECK(((uintptr_t)w & (PAGE - 1)) == 0 && mtp_usable_size(w) == 2 * PAGE);
  mtp_free(u);
  mtp_free(w);
  CHECK(g_errs == 0);
  mtp_pool_destroy(p);
}

static void *free_it(void *arg) {
  mtp_free(arg);
  return NULL;
}

static void test_misuse(void) {
  mtp_pool_t *p = th_pool("packed", 60000, 0);
  char *a = mtp_pool_alloc(p, 100 * KiB);
  REQUIRE(a != NULL, "alloc");
  mtp_free(a + 16); /* inside its first unit */
  CHECK(g_errs == 1 && g_err == MTP_ERR_INVALID_POINTER && g_err_ptr == a + 16);
  mtp_free(a + UNIT); /* a later unit */
  CHECK(g_errs == 2 && g_err == MTP_ERR_INVALID_POINTER && strstr(g_msg, "not the start"));
  mtp_free_sized(a, 200 * KiB); /* beyond the usable size */
  CHECK(g_errs == 3 && g_err == MTP_ERR_WRONG_SIZE);
  mtp_free_sized(a, 1000); /* a small size */
  CHECK(g_errs == 4 && g_err == MTP_ERR_WRONG_SIZE);
  CHECK(mtp_usable_size(a + UNIT) == 0 && g_errs == 5 && g_err == MTP_ERR_INVALID_POINTER);
  mtp_free_sized(a, 40 * KiB); /* above MTP_MAX_SMALL, within the usable size: accepted */
  CHECK(g_errs == 5);
  mtp_free(a); /* cached: a double free all the same */
  CHECK(g_errs == 6 && g_err == MTP_ERR_DOUBLE_FREE && g_err_ptr == a);
  CHECK(mtp_realloc(a, 200 * KiB) == NULL && errno == EINVAL && g_errs == 7);
  /* freed by a thread with no heap in the pool: the units go back at once; a second free is
   * still a double free (the entry is kept) */
  char *b = mtp_pool_alloc(p, 90 * KiB);
  REQUIRE(b != NULL, "alloc");
  pthread_t t;
  REQUIRE(pthread_create(&t, NULL, free_it, b) == 0, "create");
  pthread_join(t, NULL);
  CHECK(g_errs == 7);
  mtp_free(b);
  CHECK(g_errs == 8 && g_err == MTP_ERR_DOUBLE_FREE);
  /* a write after free into a cached block's start, reported when it is handed out again (the
   * sanitizers report the write itself) */
  char *c = mtp_pool_alloc(p, 120 * KiB);
  REQUIRE(c != NULL, "alloc");
  mtp_free(c);
  if (!TH_SANITIZED) c[8] = 1; /* the use after free under test */
  char *other = mtp_pool_alloc(p, 120 * KiB); /* not c: c was freed last */
  REQUIRE(other != NULL && other != c, "alloc");
  mtp_free(other);
  char *again = mtp_pool_alloc(p, 120 * KiB);
  CHECK(again == c);
  CHECK(g_errs == (TH_SANITIZED ? 8 : 9));
  CHECK(TH_SANITIZED || (g_err == MTP_ERR_USE_AFTER_FREE && g_err_ptr == c));
  mtp_free(again);
  mtp_pool_destroy(p);
  g_errs = 0;
}

static void *alloc_free_one(void *pool) {
  mtp_free(mtp_pool_alloc(pool, 100));
  return NULL;
}

/* Free units of a live span go back to the OS once the delay passed; blocks cached by the
 * freeing thread are given back to their span first. */
static void test_purge(void) {
  mtp_pool_t *p = th_pool("packed", 100, 0);
  char *a = mtp_pool_alloc(p, 100 * KiB), *b = mtp_pool_alloc(p, 100 * KiB + 8);
  char *c = mtp_pool_alloc(p, 100 * KiB + 16);
  REQUIRE(a && b && c, "alloc");
  /* the passes run on the purge thread, needed once a second heap joins a pool (with less than
   * 1 MiB waiting and no thread, a pass waits for the next free: pool/purge.c) */
  pthread_t t;
  REQUIRE(pthread_create(&t, NULL, alloc_free_one, p) == 0, "thread");
  pthread_join(t, NULL);
  memset(a, 1, 100 * KiB);
  memset(b, 2, 100 * KiB);
  memset(c, 3, 100 * KiB);
  uint64_t before = th_stats(p).bytes_returned;
  mtp_free(b);
  double t0 = th_now();
  while (th_stats(p).bytes_returned < before + 96 * KiB && th_now() - t0 < 5.0) usleep(10000);
  CHECK(th_stats(p).bytes_returned >= before + 96 * KiB);
  /* its whole OS pages are not resident any more; its neighbours kept their bytes */
  CHECK(th_resident_inside(b, 100 * KiB) == 0);
  CHECK(a[100 * KiB - 1] == 1 && c[0] == 3);
  mtp_free(a);
  mtp_free(c);
  mtp_pool_trim(p);
  CHECK_EQ_SZ(th_stats(p).bytes_mapped, 0);
  CHECK(g_errs == 0);
  mtp_pool_destroy(p);
}

/* Two threads allocate packed blocks of random sizes, hand half to the other to free, and check
 * their bytes; then each exits with blocks in its cache. */
#define MT_ROUNDS 3000
static void test_threads(void) {
  mtp_pool_t *p = th_pool("packed", 50, 0);
  th_handoff((th_handoff_t){.pool = p, .alloc = mtp_pool_alloc, .lo = MTP_MAX_SMALL + 1,
                            .span = 100 * KiB, .rounds = MT_ROUNDS, .seed = 9});
  CHECK_EQ_SZ(th_stats(p).blocks_in_use, 0);
  CHECK_EQ_SZ(th_stats(p).allocs, 2 * MT_ROUNDS);
  mtp_pool_trim(p);
  CHECK_EQ_SZ(th_stats(p).bytes_mapped, 0);
  mtp_pool_destroy(p);
  CHECK(g_errs == 0);
}

/* Random packed and other blocks, reallocs and frees in one pool, trimmed now and then: contents
 * survive, and statistics agree with what is live. */
static void test_churn(void) {
  mtp_pool_t *p = th_pool("packed", 60000, 0);
  enum { SLOTS = 96 };
  unsigned char *blk[SLOTS] = {0};
  size_t len[SLOTS] = {0};
  th_rng_t r;
  th_rng_seed(&r, 23, 29, 2026);
  for (int step = 0; step < 6000; step++) {
    int i = (int)th_below(&r, SLOTS);
    if (blk[i] != NULL) {
      CHECK(th_verify(blk[i], len[i] < 256 ? len[i] : 256, (uint64_t)i) == (size_t)-1);
      CHECK(len[i] <= 256 || blk[i][len[i] - 1] == (unsigned char)i);
      if (th_below(&r, 4) == 0) {
        size_t n = MTP_MAX_SMALL + 1 + th_below(&r, MTP_MEDIUM_MAX);
        unsigned char *q = mtp_realloc(blk[i], n);
        REQUIRE(q != NULL, "realloc");
        size_t keep = n < len[i] ? n : len[i];
        CHECK(th_verify(q, keep < 256 ? keep : 256, (uint64_t)i) == (size_t)-1);
        blk[i] = q;
        len[i] = n;
      } else {
        if (th_below(&r, 2))
          mtp_free(blk[i]);
        else
          mtp_free_sized(blk[i], len[i]);
        blk[i] = NULL;
        continue;
      }
    } else {
      size_t n = th_below(&r, 8) == 0 ? 1 + th_below(&r, 4096) : MTP_MAX_SMALL + 1 + th_below(&r, MTP_MEDIUM_MAX - MTP_MAX_SMALL);
      blk[i] = th_below(&r, 5) == 0 ? mtp_pool_calloc(p, 1, n) : mtp_pool_alloc(p, n);
      REQUIRE(blk[i] != NULL, "alloc");
      len[i] = n;
    }
    th_fill(blk[i], len[i] < 256 ? len[i] : 256, (uint64_t)i);
    if (len[i] > 256) blk[i][len[i] - 1] = (unsigned char)i; /* the block's last byte */
    if (step % 1500 == 0) mtp_pool_trim(p);
  }
  size_t live = 0;
  for (int i = 0; i < SLOTS; i++) live += blk[i] != NULL;
  CHECK_EQ_SZ(th_stats(p).blocks_in_use, live);
  for (int i = 0; i < SLOTS; i++) mtp_free(blk[i]);
  mtp_stats_t st = th_stats(p);
  CHECK_EQ_SZ(st.blocks_in_use, 0);
  CHECK_EQ_SZ(st.bytes_in_use, 0);
  mtp_pool_trim(p); /* this thread's small slabs stay */
  mtp_pool_destroy(p);
  CHECK(g_errs == 0);
}

static int fork_child(void) {
  unsigned char *a = mtp_alloc(100 * KiB + 100);
  if (a == NULL) return 1;
  memset(a, 1, 100 * KiB + 100);
  mtp_free(a);
  return 0;
}

static void test_fork(void) {
  void *a = mtp_alloc(150 * KiB + 100);
  REQUIRE(a != NULL, "alloc");
  th_fork_check(fork_child);
  mtp_free(a);
}

int main(void) {
  mtp_set_error_handler(on_error, NULL);
  RUN(test_fit);
  RUN(test_shared_pages);
  RUN(test_visit);
  RUN(test_cache_choice);
  RUN(test_calloc);
  RUN(test_realloc_aligned);
  RUN(test_misuse);
  RUN(test_purge);
  RUN(test_threads);
  RUN(test_churn);
  RUN(test_fork);
  DONE();
}
