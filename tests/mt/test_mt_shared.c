/* Shared slabs (pool/shared.c): a thread's first blocks of a class come from a slab its pool's
 * threads share, and a slab of its own only once it has taken its quota there (types.h:
 * MTP_SHARED_BLOCKS, MTP_SHARED_BYTES); a pool's first heap never shares.
 *  - first_blocks_shared: two threads' first 48-byte blocks lie in one page, not in the page of
 *    the pool's first heap (main's); each thread's next block past the quota is in a slab of its
 *    own; the quota of a 3 KiB class is one block;
 *  - frees_from_any_thread: blocks of a shared slab freed by their own thread, by another live
 *    thread and after their thread exited, sized and unsized: every block's pattern intact, the
 *    pool's counts back to zero, every such free counted as a remote free, and the emptied shared
 *    slab released (a new thread's first block starts a fresh slab);
 *  - double_free_reported: in a shared slab, a block freed twice by its thread (interleaved with
 *    another free), by another thread, and into a slab emptied and released meanwhile, and an
 *    interior pointer: each reported (nothing pushed, the pool's counts unchanged);
 *  - churn: short-lived threads allocate a few blocks of many classes that one freeing thread
 *    frees while they run, patterns checked (for the sanitizer stages).
 * Pools with purge_delay_ms -1 keep empty pages until a trim: nothing here depends on timing. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mtpool/mtpool.h"
#include "testhelper.h"

#define PAGE ((uintptr_t)64 * 1024)
#define QUOTA_48 16 /* MTP_SHARED_BLOCKS: 16,384 / 48 is more */
#define QUOTA_3K 5  /* MTP_SHARED_BYTES / 3,248 */
#define NB 20 /* at least QUOTA_3K + 1 */

static uintptr_t page_of(void *p) { return (uintptr_t)p & ~(PAGE - 1); }

static mtp_pool_t *keeping_pool(const char *name) {
  mtp_options_t opt;
  mtp_options_init(&opt);
  opt.name = name;
  opt.purge_delay_ms = -1;
  mtp_pool_t *p = mtp_pool_create(&opt);
  CHECK(p != NULL);
  return p;
}

static mtp_stats_t stats_of(mtp_pool_t *pool) {
  mtp_stats_t st;
  CHECK(mtp_pool_stats(pool, &st) == 0);
  return st;
}

static void fill(void *p, size_t n, unsigned tag) { memset(p, (int)(tag & 0xff), n); }
static int intact(const void *p, size_t n, unsigned tag) {
  const unsigned char *c = p;
  for (size_t i = 0; i < n; i++)
    if (c[i] != (unsigned char)(tag & 0xff)) return 0;
  return 1;
}

/* ---- a thread that allocates count blocks of size and exits (or waits) ---- */
typedef struct {
  mtp_pool_t *pool;
  size_t size;
  int count;
  unsigned tag;
  void *got[NB];
} job_t;

static void *alloc_job(void *arg) {
  job_t *j = arg;
  for (int i = 0; i < j->count; i++) {
    j->got[i] = mtp_pool_alloc(j->pool, j->size);
    CHECK(j->got[i] != NULL);
    fill(j->got[i], j->size, j->tag + (unsigned)i);
  }
  return NULL;
}

static void run(job_t *j) {
  pthread_t t;
  CHECK(pthread_create(&t, NULL, alloc_job, j) == 0);
  CHECK(pthread_join(t, NULL) == 0);
}

static void first_blocks_shared(void) {
  mtp_pool_t *pool = keeping_pool("shared-first");
  void *mine = mtp_pool_alloc(pool, 48); /* main: the pool's first heap, a slab of its own */
  CHECK(mine != NULL);
  job_t a = {.pool = pool, .size = 48, .count = QUOTA_48 + 1, .tag = 1};
  job_t b = {.pool = pool, .size = 48, .count = QUOTA_48 + 1, .tag = 40};
  run(&a);
  run(&b);
  uintptr_t shared = page_of(a.got[0]);
  CHECK(shared != page_of(mine));
  for (int i = 0; i < QUOTA_48; i++) {
    CHECK(page_of(a.got[i]) == shared);
    CHECK(page_of(b.got[i]) == shared); /* side by side, whichever thread asked */
  }
  /* past the quota: a slab of its own (b's may be the one a left behind at its exit, adopted) */
  CHECK(page_of(a.got[QUOTA_48]) != shared && page_of(b.got[QUOTA_48]) != shared);
  /* a 3 KiB class (3,248-byte blocks): 5 blocks fit the 16 KiB quota, the 6th is the thread's */
  job_t c = {.pool = pool, .size = 3000, .count = QUOTA_3K + 1, .tag = 80};
  job_t d = {.pool = pool, .size = 3000, .count = QUOTA_3K + 1, .tag = 90};
  run(&c);
  run(&d);
  for (int i = 0; i < QUOTA_3K; i++)
    CHECK(page_of(c.got[i]) == page_of(c.got[0]) && page_of(d.got[i]) == page_of(c.got[0]));
  CHECK(page_of(c.got[QUOTA_3K]) != page_of(c.got[0]) && page_of(d.got[QUOTA_3K]) != page_of(c.got[0]));
  for (int i = 0; i <= QUOTA_48; i++) {
    CHECK(intact(a.got[i], 48, 1u + (unsigned)i) && intact(b.got[i], 48, 40u + (unsigned)i));
    mtp_free(a.got[i]);
    mtp_free_sized(b.got[i], 48);
  }
  for (int i = 0; i <= QUOTA_3K; i++) {
    CHECK(intact(c.got[i], 3000, 80u + (unsigned)i) && intact(d.got[i], 3000, 90u + (unsigned)i));
    mtp_free(c.got[i]);
    mtp_free(d.got[i]);
  }
  mtp_free(mine);
  CHECK_EQ_SZ(stats_of(pool).blocks_in_use, 0);
  mtp_pool_destroy(pool);
}

/* ---- frees from any thread ---- */
static pthread_barrier_t bar;
typedef struct {
  mtp_pool_t *pool;
  void *own[4], *theirs[4]; /* own: allocated here; theirs: the other thread's, freed here */
  unsigned tag;
} pair_t;

static void *pair_thread(void *arg) {
  pair_t *j = arg;
  for (int i = 0; i < 4; i++) {
    CHECK((j->own[i] = mtp_pool_alloc(j->pool, 48)) != NULL);
    fill(j->own[i], 48, j->tag + (unsigned)i);
  }
  pthread_barrier_wait(&bar); /* both have allocated: main hands each the other's blocks */
  pthread_barrier_wait(&bar);
  for (int i = 0; i < 4; i++) CHECK(intact(j->theirs[i], 48, (j->tag ^ 0x80) + (unsigned)i));
  pthread_barrier_wait(&bar); /* both have checked: now the frees, while both run */
  mtp_free(j->own[0]);                /* its own first block */
  mtp_free_sized(j->theirs[1], 48);   /* the other's second (the other frees ours) */
  return NULL;
}

static void frees_from_any_thread(void) {
  mtp_pool_t *pool = keeping_pool("shared-frees");
  void *mine = mtp_pool_alloc(pool, 48);
  CHECK(mine != NULL);
  mtp_stats_t st0 = stats_of(pool);
  pair_t x = {.pool = pool, .tag = 0x10}, y = {.pool = pool, .tag = 0x90};
  CHECK(pthread_barrier_init(&bar, NULL, 3) == 0);
  pthread_t tx, ty;
  CHECK(pthread_create(&tx, NULL, pair_thread, &x) == 0);
  CHECK(pthread_create(&ty, NULL, pair_thread, &y) == 0);
  pthread_barrier_wait(&bar);
  for (int i = 0; i < 4; i++) {
    x.theirs[i] = y.own[i];
    y.theirs[i] = x.own[i];
  }
  pthread_barrier_wait(&bar);
  pthread_barrier_wait(&bar);
  CHECK(pthread_join(tx, NULL) == 0);
  CHECK(pthread_join(ty, NULL) == 0);
  CHECK(page_of(x.own[0]) == page_of(y.own[0]) && page_of(x.own[0]) != page_of(mine));
  CHECK_EQ_SZ(stats_of(pool).blocks_in_use, 1 + 4);
  /* after both threads exited: the rest, from main */
  for (int i = 2; i < 4; i++) {
    CHECK(intact(x.own[i], 48, 0x10u + (unsigned)i) && intact(y.own[i], 48, 0x90u + (unsigned)i));
    mtp_free(x.own[i]);
    mtp_free(y.own[i]);
  }
  mtp_stats_t st = stats_of(pool);
  CHECK_EQ_SZ(st.blocks_in_use, 1);
  CHECK(st.remote_frees - st0.remote_frees == 8); /* no thread owns a shared slab */
  /* emptied, the shared slab went back: a new thread's first block starts one afresh, at the
   * start of its page (the same page, taken back from the pool's empty slabs) */
  job_t n = {.pool = pool, .size = 48, .count = 1, .tag = 5};
  run(&n);
  CHECK((uintptr_t)n.got[0] == page_of(x.own[0]));
  mtp_free(n.got[0]);
  mtp_free(mine);
  CHECK_EQ_SZ(stats_of(pool).blocks_in_use, 0);
  pthread_barrier_destroy(&bar);
  mtp_pool_destroy(pool);
}

/* ---- misuse ---- */
static _Atomic int df_code, df_count;
static void *_Atomic df_ptr;
static void df_handler(int err, const char *msg, void *p, void *arg) {
  (void)msg;
  (void)arg;
  atomic_store(&df_code, err);
  atomic_store(&df_ptr, p);
  atomic_fetch_add(&df_count, 1);
}
static void expect_report(int code, void *p) {
  CHECK(atomic_load(&df_count) == 1);
  CHECK(atomic_load(&df_code) == code && atomic_load(&df_ptr) == p);
  atomic_store(&df_count, 0);
}

typedef struct {
  void *p;
} one_t;
static void *free_it(void *arg) {
  mtp_free(((one_t *)arg)->p);
  return NULL;
}
static void free_elsewhere(void *p) {
  one_t o = {p};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, free_it, &o) == 0);
  CHECK(pthread_join(t, NULL) == 0);
}

/* A thread that allocates 3 blocks (shared), frees a, b, a (interleaved double free) and c+8. */
static void *misuse_thread(void *arg) {
  void **out = arg;
  mtp_pool_t *pool = out[0];
  char *a = mtp_pool_alloc(pool, 48), *b = mtp_pool_alloc(pool, 48), *c = mtp_pool_alloc(pool, 48);
  CHECK(a && b && c);
  mtp_free(a);
  mtp_free(b);
  mtp_free(a); /* a is not the last block freed: found on the slab's free list */
  expect_report(MTP_ERR_DOUBLE_FREE, a);
  mtp_free(c + 8);
  expect_report(MTP_ERR_INVALID_POINTER, c + 8);
  out[1] = c; /* alive: the slab stays shared */
  out[2] = b; /* freed already: main frees it again from another thread */
  return NULL;
}

static void double_free_reported(void) {
  mtp_set_error_handler(df_handler, NULL);
  mtp_pool_t *pool = keeping_pool("shared-misuse");
  void *mine = mtp_pool_alloc(pool, 48);
  CHECK(mine != NULL);
  void *io[3] = {pool, NULL, NULL};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, misuse_thread, io) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  char *c = io[1], *b = io[2];
  CHECK(page_of(c) != page_of(mine)); /* the shared slab's */
  mtp_stats_t st = stats_of(pool);
  CHECK_EQ_SZ(st.blocks_in_use, 2);
  mtp_free(b); /* by main: a thread that never allocated b */
  expect_report(MTP_ERR_DOUBLE_FREE, b);
  free_elsewhere(b); /* by yet another thread */
  expect_report(MTP_ERR_DOUBLE_FREE, b);
  CHECK_EQ_SZ(stats_of(pool).blocks_in_use, 2);
  /* the last block: the shared slab is emptied and released; freed again, it is reported */
  free_elsewhere(c);
  CHECK(atomic_load(&df_count) == 0);
  mtp_free(c);
  expect_report(MTP_ERR_DOUBLE_FREE, c);
  CHECK_EQ_SZ(stats_of(pool).blocks_in_use, 1);
  mtp_free(mine);
  CHECK_EQ_SZ(stats_of(pool).blocks_in_use, 0);
  mtp_pool_destroy(pool);
  mtp_set_error_handler(NULL, NULL);
}

/* ---- churn: short-lived threads, one freeing thread ---- */
#define CHURN_SLOTS 4096
static void *_Atomic churn_slot[CHURN_SLOTS];
static _Atomic unsigned churn_head;
static _Atomic int churn_done;
static mtp_pool_t *churn_pool;

/* A block's size in its first word, its last byte the size's low byte: checked by the freer. */
static void *churn_worker(void *arg) {
  uint64_t s = th_mix64((uintptr_t)arg + 1);
  for (int i = 0; i < NB; i++) {
    s = th_mix64(s);
    size_t n = 16 + (size_t)(s % 3072);
    unsigned char *p = mtp_pool_alloc(churn_pool, n);
    CHECK(p != NULL);
    memcpy(p, &n, sizeof n);
    p[n - 1] = (unsigned char)n;
    unsigned k = atomic_fetch_add(&churn_head, 1) % CHURN_SLOTS;
    void *expect = NULL;
    while (!atomic_compare_exchange_weak(&churn_slot[k], &expect, p)) expect = NULL; /* wait */
  }
  return NULL;
}

static void *churn_freer(void *arg) {
  (void)arg;
  for (unsigned k = 0;; k = (k + 1) % CHURN_SLOTS) {
    unsigned char *p = atomic_exchange(&churn_slot[k], NULL);
    if (p != NULL) {
      size_t n;
      memcpy(&n, p, sizeof n);
      CHECK(n >= 16 && n < 16 + 3072 && p[n - 1] == (unsigned char)n);
      mtp_free(p);
    } else if (k == CHURN_SLOTS - 1 && atomic_load(&churn_done)) {
      int left = 0;
      for (unsigned i = 0; i < CHURN_SLOTS; i++) left |= atomic_load(&churn_slot[i]) != NULL;
      if (!left) return NULL;
    }
  }
}

static void churn(void) {
  churn_pool = keeping_pool("shared-churn");
  void *mine = mtp_pool_alloc(churn_pool, 48);
  int rounds = TH_TSAN ? 10 : 50, width = 8;
  pthread_t freer;
  CHECK(pthread_create(&freer, NULL, churn_freer, NULL) == 0);
  for (int r = 0; r < rounds; r++) {
    pthread_t t[8];
    for (int i = 0; i < width; i++)
      CHECK(pthread_create(&t[i], NULL, churn_worker, (void *)(uintptr_t)(r * width + i)) == 0);
    for (int i = 0; i < width; i++) CHECK(pthread_join(t[i], NULL) == 0);
  }
  atomic_store(&churn_done, 1);
  CHECK(pthread_join(freer, NULL) == 0);
  mtp_free(mine);
  mtp_stats_t st = stats_of(churn_pool);
  CHECK_EQ_SZ(st.blocks_in_use, 0);
  CHECK(st.allocs == (uint64_t)rounds * width * NB + 1);
  mtp_pool_destroy(churn_pool);
}

int main(void) {
  RUN(first_blocks_shared);
  RUN(frees_from_any_thread);
  RUN(double_free_reported);
  RUN(churn);
  DONE();
}
