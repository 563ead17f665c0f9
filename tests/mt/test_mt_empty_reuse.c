/* Empty slabs of exited threads, kept by their pool for the next slab of their class (pool.c,
 * "empty slabs"):
 *  - same_class_first: a thread that exited left two slabs (classes A and B, one page each) that
 *    another thread then emptied by freeing their blocks; a new thread's slab of class B is B's
 *    old slab and the next one's of class A is A's, although A's page comes first in its region
 *    (a span from the region layer would have been A's page for either);
 *  - double_free_reported: a free into such a slab is reported as a double free, not pushed;
 *  - trim_returns_them: mtp_pool_trim hands them back to the region layer and purges them;
 *  - churn: short-lived threads whose blocks a freeing thread frees while the purge (1 ms delay)
 *    returns kept slabs, every block checked against its pattern (for the sanitizer stages).
 * Pools with purge_delay_ms -1 keep empty slabs until a trim, so nothing here depends on timing. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mtpool/mtpool.h"
#include "testhelper.h"

#define PAGE ((uintptr_t)64 * 1024)
#define SIZE_A 48  /* two classes of one-page slabs */
#define SIZE_B 200

static uintptr_t page_of(void *p) { return (uintptr_t)p & ~(PAGE - 1); }

typedef struct {
  mtp_pool_t *pool;
  size_t size[2];
  void *got[2];
} alloc_job_t;

/* A thread that allocates one block of each size asked (0: none) and exits. */
static void *alloc_and_exit(void *arg) {
  alloc_job_t *j = arg;
  for (int i = 0; i < 2; i++)
    if (j->size[i]) j->got[i] = mtp_pool_alloc(j->pool, j->size[i]);
  return NULL;
}

static void run_job(alloc_job_t *j) {
  pthread_t t;
  CHECK(pthread_create(&t, NULL, alloc_and_exit, j) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  for (int i = 0; i < 2; i++) CHECK(j->size[i] == 0 || j->got[i] != NULL);
}

static mtp_pool_t *keeping_pool(const char *name) {
  mtp_options_t opt;
  mtp_options_init(&opt);
  opt.name = name;
  opt.purge_delay_ms = -1; /* kept until a trim: no purge runs meanwhile */
  mtp_pool_t *p = mtp_pool_create(&opt);
  CHECK(p != NULL);
  return p;
}

static size_t slabs_of(mtp_pool_t *pool) {
  mtp_class_stats_t cs[256];
  int classes = mtp_pool_class_stats(pool, cs, 256);
  CHECK(classes > 0 && classes <= 256);
  size_t n = 0;
  for (int c = 0; c < classes; c++) n += cs[c].slabs;
  return n;
}

/* The first thread's two slabs, emptied by this thread after that thread exited. */
static void two_empty_slabs(mtp_pool_t *pool, uintptr_t *page_a, uintptr_t *page_b) {
  alloc_job_t first = {.pool = pool, .size = {SIZE_A, SIZE_B}};
  run_job(&first);
  *page_a = page_of(first.got[0]);
  *page_b = page_of(first.got[1]);
  CHECK(*page_a < *page_b); /* the region handed out A's span first */
  mtp_free(first.got[0]);
  mtp_free(first.got[1]);
}

static void same_class_first(void) {
  mtp_pool_t *pool = keeping_pool("empty-reuse");
  uintptr_t page_a, page_b;
  two_empty_slabs(pool, &page_a, &page_b);
  CHECK_EQ_SZ(slabs_of(pool), 2); /* kept formatted, not returned to the region layer */
  alloc_job_t b = {.pool = pool, .size = {SIZE_B, 0}};
  run_job(&b);
  CHECK(page_of(b.got[0]) == page_b);
  alloc_job_t a = {.pool = pool, .size = {SIZE_A, 0}};
  run_job(&a);
  CHECK(page_of(a.got[0]) == page_a);
  mtp_free(a.got[0]);
  mtp_free(b.got[0]);
  mtp_pool_destroy(pool);
}

static atomic_int reported;
static void on_error(int err, const char *message, void *ptr, void *arg) {
  (void)message, (void)ptr, (void)arg;
  if (err == MTP_ERR_DOUBLE_FREE) atomic_fetch_add(&reported, 1);
}

static void double_free_reported(void) {
  mtp_pool_t *pool = keeping_pool("empty-double-free");
  alloc_job_t j = {.pool = pool, .size = {SIZE_B, 0}};
  run_job(&j);
  mtp_free(j.got[0]); /* its slab is empty now, kept by the pool */
  mtp_set_error_handler(on_error, NULL);
  mtp_free(j.got[0]);
  mtp_set_error_handler(NULL, NULL);
  CHECK(atomic_load(&reported) == 1);
  /* nothing was pushed: the next thread's block of that class is the slab's first block, and a
   * second one is another block */
  alloc_job_t k = {.pool = pool, .size = {SIZE_B, SIZE_B}};
  run_job(&k);
  CHECK(k.got[0] == j.got[0] && k.got[1] != k.got[0]);
  mtp_free(k.got[0]);
  mtp_free(k.got[1]);
  mtp_pool_destroy(pool);
}

static void trim_returns_them(void) {
  mtp_pool_t *pool = keeping_pool("empty-trim");
  uintptr_t page_a, page_b;
  two_empty_slabs(pool, &page_a, &page_b);
  mtp_stats_t before, after;
  CHECK(mtp_pool_stats(pool, &before) == 0);
  CHECK(before.blocks_in_use == 0 && before.bytes_reserved >= 2 * PAGE);
  CHECK(mtp_pool_trim(pool) >= 2 * PAGE);
  CHECK(mtp_pool_stats(pool, &after) == 0);
  CHECK_EQ_SZ(slabs_of(pool), 0);
  CHECK(after.bytes_returned >= before.bytes_returned + 2 * PAGE);
  mtp_pool_destroy(pool);
}

/* ---- churn: threads that live briefly, a freeing thread, and the purge at work ---- */
#define CHURN_THREADS 300
#define CHURN_WINDOW 8
#define CHURN_BLOCKS 60

typedef struct batch {
  struct batch *next;
  void *blk[CHURN_BLOCKS];
  size_t len[CHURN_BLOCKS];
  uint64_t tag;
} batch_t;

static mtp_pool_t *churn_pool;
static pthread_mutex_t q_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_cv = PTHREAD_COND_INITIALIZER;
static batch_t *q_head;
static int q_done;

static void *churn_worker(void *arg) {
  uint64_t idx = (uint64_t)(uintptr_t)arg;
  th_rng_t r;
  th_rng_seed(&r, 18, idx, 0);
  batch_t *b = malloc(sizeof *b);
  CHECK(b != NULL);
  b->tag = idx;
  for (int i = 0; i < CHURN_BLOCKS; i++) {
    size_t n = 16 + (size_t)th_below(&r, th_below(&r, 8) ? 3000 : 16000);
    b->len[i] = n;
    b->blk[i] = mtp_pool_alloc(churn_pool, n);
    CHECK(b->blk[i] != NULL);
    th_fill(b->blk[i], n, idx * CHURN_BLOCKS + (uint64_t)i);
  }
  pthread_mutex_lock(&q_mu);
  b->next = q_head;
  q_head = b;
  pthread_cond_signal(&q_cv);
  pthread_mutex_unlock(&q_mu);
  return NULL;
}

static void *churn_freer(void *arg) {
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&q_mu);
    while (q_head == NULL && !q_done) pthread_cond_wait(&q_cv, &q_mu);
    batch_t *b = q_head;
    q_head = NULL;
    pthread_mutex_unlock(&q_mu);
    if (b == NULL) return NULL;
    while (b != NULL) {
      batch_t *next = b->next;
      for (int i = 0; i < CHURN_BLOCKS; i++) {
        CHECK(th_verify(b->blk[i], b->len[i], b->tag * CHURN_BLOCKS + (uint64_t)i) == (size_t)-1);
        mtp_free(b->blk[i]);
      }
      free(b);
      b = next;
    }
  }
}

static void churn(void) {
  mtp_options_t opt;
  mtp_options_init(&opt);
  opt.name = "empty-churn";
  opt.purge_delay_ms = 1; /* the purge returns kept slabs while threads take them */
  churn_pool = mtp_pool_create(&opt);
  CHECK(churn_pool != NULL);
  pthread_t freer, t[CHURN_THREADS];
  CHECK(pthread_create(&freer, NULL, churn_freer, NULL) == 0);
  for (int i = 0; i < CHURN_THREADS; i++) {
    if (i >= CHURN_WINDOW) CHECK(pthread_join(t[i - CHURN_WINDOW], NULL) == 0);
    CHECK(pthread_create(&t[i], NULL, churn_worker, (void *)(uintptr_t)i) == 0);
  }
  for (int i = CHURN_THREADS - CHURN_WINDOW; i < CHURN_THREADS; i++)
    CHECK(pthread_join(t[i], NULL) == 0);
  pthread_mutex_lock(&q_mu);
  q_done = 1;
  pthread_cond_signal(&q_cv);
  pthread_mutex_unlock(&q_mu);
  CHECK(pthread_join(freer, NULL) == 0);
  mtp_stats_t st;
  CHECK(mtp_pool_stats(churn_pool, &st) == 0);
  CHECK(st.blocks_in_use == 0);
  mtp_pool_trim(churn_pool);
  CHECK_EQ_SZ(slabs_of(churn_pool), 0);
  mtp_pool_destroy(churn_pool);
}

int main(void) {
  RUN(same_class_first);
  RUN(double_free_reported);
  RUN(trim_returns_them);
  RUN(churn);
  DONE();
}
