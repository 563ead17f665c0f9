/* Threads that each hold most blocks of one class and replace them at random (the case the heap's
 * reuse lists: heap/reuse.c), while blocks also cross threads: every
 * 16th block a thread replaces goes to the next thread, which frees it (a remote free into a slab
 * whose owner lists blocks of it), threads flush now and then, and each thread's successor inherits
 * its blocks after it exits with blocks listed. The main thread reads the statistics and walks the
 * pool meanwhile. Every block carries a pattern from its tag, checked when it is freed: a block
 * handed out twice, or freed into a list twice, breaks one. At the end, with every block freed and
 * the threads joined, the statistics count no block in use. Public API only; bounded; for the
 * sanitizer stages too. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mtpool/mtpool.h"
#include "testhelper.h"

enum { THREADS = 4, HELD = 1500, MAILBOX = 64, GENERATIONS = 2 };
#if TH_TSAN || TH_ASAN
enum { ROUNDS = 40000 };
#else
enum { ROUNDS = 200000 };
#endif
static const size_t SIZES[THREADS] = {2048, 2048, 512, 16384};

static mtp_pool_t *pool;
static void *_Atomic mailbox[THREADS][MAILBOX]; /* blocks for thread i to free */
static atomic_int running;

typedef struct {
  int idx;
  void **held; /* HELD blocks, passed on from one generation to the next */
  uint64_t *tag;
  uint64_t seed;
} slot_t;

static void stamp(void *p, size_t n, uint64_t tag) {
  memcpy(p, &tag, sizeof tag);
  memcpy((char *)p + n - sizeof tag, &tag, sizeof tag);
}
static void check_stamp(const void *p, size_t n, uint64_t tag) {
  uint64_t a, b;
  memcpy(&a, p, sizeof a);
  memcpy(&b, (const char *)p + n - sizeof b, sizeof b);
  CHECK(a == tag && b == tag);
}

/* A block from the mailbox carries its size and tag in its first words after the stamp. */
typedef struct {
  uint64_t tag;
  uint64_t size;
} mail_t;

static void free_mail(int idx) {
  for (int k = 0; k < MAILBOX; k++) {
    void *p = atomic_exchange(&mailbox[idx][k], NULL);
    if (p == NULL) continue;
    mail_t m;
    memcpy(&m, p, sizeof m);
    check_stamp(p, (size_t)m.size, m.tag);
    mtp_free(p);
  }
}

static void *worker(void *arg) {
  slot_t *s = arg;
  size_t size = SIZES[s->idx];
  if (s->held[0] == NULL) /* the first generation allocates the blocks */
    for (int i = 0; i < HELD; i++) {
      CHECK((s->held[i] = mtp_pool_alloc(pool, size)) != NULL);
      s->tag[i] = ((uint64_t)s->idx << 56) | (uint64_t)i;
      stamp(s->held[i], size, s->tag[i]);
    }
  for (int r = 0; r < ROUNDS / GENERATIONS; r++) {
    s->seed = s->seed * 6364136223846793005ull + 1442695040888963407ull;
    int i = (int)((s->seed >> 33) % HELD);
    check_stamp(s->held[i], size, s->tag[i]);
    if (r % 16 == 0) { /* to the next thread, to free */
      mail_t m = {s->tag[i], size};
      memcpy(s->held[i], &m, sizeof m);
      int to = (s->idx + 1) % THREADS, k = (int)((s->seed >> 20) % MAILBOX);
      void *old = atomic_exchange(&mailbox[to][k], s->held[i]);
      if (old != NULL) { /* the slot was full: ours to free */
        memcpy(&m, old, sizeof m);
        check_stamp(old, (size_t)m.size, m.tag);
        mtp_free(old);
      }
    } else {
      mtp_free(s->held[i]);
    }
    CHECK((s->held[i] = mtp_pool_alloc(pool, size)) != NULL);
    s->tag[i] = ((uint64_t)s->idx << 56) | ((uint64_t)r << 16) | (uint64_t)i;
    stamp(s->held[i], size, s->tag[i]);
    if (r % 256 == 0) free_mail(s->idx);
    if (r % 10000 == 9999) mtp_thread_flush();
  }
  free_mail(s->idx);
  return NULL; /* exits with blocks listed: its heap gives them back */
}

static int count_visit(void *arg, void *block, size_t usable, unsigned cls) {
  (void)block, (void)usable, (void)cls;
  ++*(size_t *)arg;
  return 0;
}

static void *observer(void *arg) {
  (void)arg;
  while (atomic_load(&running)) { /* racy figures: they must be read without harm */
    mtp_stats_t st;
    CHECK(mtp_pool_stats(pool, &st) == 0);
    size_t n = 0;
    CHECK(mtp_pool_visit(pool, count_visit, &n) == 0);
    /* racing owners: a thread's reuse list (up to 32 blocks of its class) may be read short and
     * its blocks reported as live, and a block moving meanwhile either way */
    CHECK(n <= THREADS * (HELD + MAILBOX + 32) + 64);
  }
  return NULL;
}

static void test_reuse_threads(void) {
  mtp_options_t o;
  mtp_options_init(&o);
  o.purge_delay_ms = 1;
  pool = mtp_pool_create(&o);
  CHECK(pool != NULL);
  slot_t slot[THREADS];
  for (int i = 0; i < THREADS; i++) {
    slot[i].idx = i;
    slot[i].held = calloc(HELD, sizeof(void *));
    slot[i].tag = calloc(HELD, sizeof(uint64_t));
    slot[i].seed = (uint64_t)i * 0x9E3779B97F4A7C15ull + 1;
    CHECK(slot[i].held != NULL && slot[i].tag != NULL);
  }
  atomic_store(&running, 1);
  pthread_t obs;
  CHECK(pthread_create(&obs, NULL, observer, NULL) == 0);
  for (int g = 0; g < GENERATIONS; g++) {
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) CHECK(pthread_create(&t[i], NULL, worker, &slot[i]) == 0);
    for (int i = 0; i < THREADS; i++) CHECK(pthread_join(t[i], NULL) == 0);
  }
  atomic_store(&running, 0);
  CHECK(pthread_join(obs, NULL) == 0);
  mtp_stats_t st;
  CHECK(mtp_pool_stats(pool, &st) == 0);
  size_t mailed = 0;
  for (int i = 0; i < THREADS; i++)
    for (int k = 0; k < MAILBOX; k++) mailed += atomic_load(&mailbox[i][k]) != NULL;
  CHECK_EQ_SZ(st.blocks_in_use, (size_t)THREADS * HELD + mailed);
  for (int i = 0; i < THREADS; i++) {
    free_mail(i);
    for (int k = 0; k < HELD; k++) {
      check_stamp(slot[i].held[k], SIZES[i], slot[i].tag[k]);
      mtp_free(slot[i].held[k]);
    }
    free(slot[i].held);
    free(slot[i].tag);
  }
  CHECK(mtp_pool_stats(pool, &st) == 0);
  CHECK_EQ_SZ(st.blocks_in_use, 0);
  mtp_pool_destroy(pool);
}

int main(void) {
  RUN(test_reuse_threads);
  DONE();
}
