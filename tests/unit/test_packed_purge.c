/* Unit test of the purge passes over packed spans (pool/packed.c, mtp__packed_purge), driven with
 * the pass's times given: a span not due yet is left; a due span with no release since the cutoff
 * (idle) gives back every free OS page; a due span still in use (busy) gives back only the units
 * free at its previous pass (aged), so that units freed a moment before stay resident for reuse,
 * and the rest wait for the next pass; and a free that finds the pool lock held is deferred to
 * the lock's next holder. Residency is read with mincore. The pool's own delay is an
 * hour, so the purge thread never finds this test's span due. Huge pages off: a span in a region
 * advised huge is the region's to purge. Skips (77) where OS pages are larger than 64 KiB. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/os.h"
#include "pool/pool.h"
#include "region/region.h"
#include "testhelper.h"

#define KiB ((size_t)1 << 10)
#define BLOCK (100 * KiB) /* packed: not whole 64 KiB pages */

/* One pass over p's spans at now with the cutoff given (not forced). Returns the bytes purged;
 * *left: whether a later pass has something due. */
static size_t pass(mtp_pool_t *p, uint64_t now, uint64_t cutoff, bool *left) {
  *left = false;
  mtp__pool_lock(p);
  size_t n = mtp__packed_purge(p, now, cutoff, false, left);
  mtp__pool_unlock_quiet(p);
  return n;
}

/* Wait until the clock has moved past t (the passes compare whole milliseconds). */
static uint64_t after(uint64_t t) {
  uint64_t now;
  while ((now = mtp__os_now_ms()) <= t) usleep(1000);
  return now;
}

static void test_aged(void) {
  mtp_options_t o;
  mtp_options_init(&o);
  o.name = "packed-purge";
  o.purge_delay_ms = 3600000;
  o.thread_cache_bytes = 0; /* every free goes straight to its span */
  mtp_pool_t *p = mtp_pool_create(&o);
  REQUIRE(p != NULL, "pool_create");
  enum { N = 5 };
  char *b[N];
  for (int i = 0; i < N; i++) {
    b[i] = mtp_pool_alloc(p, BLOCK);
    REQUIRE(b[i] != NULL, "alloc");
    memset(b[i], i + 1, BLOCK);
  }
  for (int i = 1; i < N; i++) REQUIRE(b[i] == b[i - 1] + BLOCK, "one span, block after block");
  if (mtp__run_huge(mtp__run_of((uintptr_t)b[0]))) {
    printf("  SKIP: the span is in a huge range\n");
    mtp_pool_destroy(p);
    return;
  }
  bool left;
  /* b[1] freed at or before t1, b[3] after it: a pass whose cutoff is before b[1]'s free finds
   * nothing due */
  uint64_t t0 = mtp__os_now_ms();
  mtp_free(b[1]);
  uint64_t t1 = mtp__os_now_ms();
  after(t1);
  mtp_free(b[3]);
  uint64_t now1 = after(mtp__os_now_ms());
  CHECK_EQ_SZ(pass(p, now1, t0 - 1, &left), 0);
  CHECK(left);
  CHECK(th_resident_inside(b[1], BLOCK) > 0 && th_resident_inside(b[3], BLOCK) > 0);
  /* due (its first release at or before the cutoff) and busy (b[3] after it): neither block was
   * free at a previous pass, so neither goes; both are aged for the next, due from now1 */
  CHECK_EQ_SZ(pass(p, now1, t1, &left), 0);
  CHECK(left);
  CHECK(th_resident_inside(b[1], BLOCK) > 0 && th_resident_inside(b[3], BLOCK) > 0);
  /* before that pass's time plus the delay: not due */
  uint64_t t4 = after(now1);
  mtp_free(b[4]);
  uint64_t now2 = after(t4);
  CHECK_EQ_SZ(pass(p, now2, now1 - 1, &left), 0);
  /* due and busy (b[4] freed after the cutoff): the aged units go, b[4]'s stay */
  size_t n = pass(p, now2, now1, &left);
  CHECK(n >= 2 * (BLOCK - 2 * (size_t)sysconf(_SC_PAGESIZE)));
  CHECK(left);
  CHECK_EQ_SZ(th_resident_inside(b[1], BLOCK), 0);
  CHECK_EQ_SZ(th_resident_inside(b[3], BLOCK), 0);
  CHECK(th_resident_inside(b[4], BLOCK) > 0);
  /* the blocks in use kept their bytes */
  CHECK(b[0][BLOCK - 1] == 1 && b[2][0] == 3 && b[2][BLOCK - 1] == 3);
  /* idle (no release since the cutoff): every free page goes, b[4]'s too */
  uint64_t now3 = after(now2);
  CHECK(pass(p, now3, now3, &left) > 0);
  CHECK_EQ_SZ(th_resident_inside(b[4], BLOCK), 0);
  CHECK(!left);
  CHECK(b[0][0] == 1 && b[2][BLOCK - 1] == 3);
  mtp_free(b[0]);
  mtp_free(b[2]);
  mtp_pool_trim(p);
  CHECK_EQ_SZ(th_stats(p).bytes_mapped, 0);
  mtp_pool_destroy(p);
}

/* A free of a packed block that finds the pool lock held waits for nothing: the block is left for
 * the lock's next holder, and goes back to its span at the next packed allocation (whose units it
 * then is: the span's only free run that long). */
static void *free_in_thread(void *arg) {
  mtp_free(arg);
  return NULL;
}
static void test_deferred_free(void) {
  mtp_options_t o;
  mtp_options_init(&o);
  o.name = "packed-deferred";
  o.purge_delay_ms = 3600000;
  o.thread_cache_bytes = 0; /* every free goes to its span */
  mtp_pool_t *p = mtp_pool_create(&o);
  REQUIRE(p != NULL, "pool_create");
  char *a = mtp_pool_alloc(p, BLOCK), *b = mtp_pool_alloc(p, BLOCK);
  REQUIRE(a != NULL && b != NULL, "alloc");
  memset(a, 1, BLOCK);
  size_t in_use = th_stats(p).large_bytes;
  mtp__pool_lock(p); /* as another thread's long hold would */
  pthread_t t;
  REQUIRE(pthread_create(&t, NULL, free_in_thread, a) == 0, "thread");
  pthread_join(t, NULL); /* it returned with the lock held: the free was deferred */
  CHECK(mtp__load_relaxed(&p->packed_deferred) == (uintptr_t)a);
  mtp__pool_unlock_quiet(p);
  CHECK_EQ_SZ(th_stats(p).large_bytes, in_use / 2); /* freed (not in its span's free units yet) */
  char *c = mtp_pool_alloc(p, BLOCK);            /* drains, then takes the units a had */
  CHECK(c == a);
  CHECK(mtp__load_relaxed(&p->packed_deferred) == 0);
  mtp_free(b);
  mtp_free(c);
  CHECK_EQ_SZ(th_stats(p).large_bytes, 0);
  mtp_pool_destroy(p);
}

int main(void) {
  long os = sysconf(_SC_PAGESIZE);
  if (os > (long)MTP_PAGE_SIZE) {
    printf("SKIP: OS pages of %ld bytes\n", os);
    return 77;
  }
  setenv("MTPOOL_HUGEPAGES", "0", 1); /* read once, at the first pool's regions */
  RUN(test_aged);
  RUN(test_deferred_free);
  DONE();
}
