/* Multi-threaded behaviour: cross-thread frees make memory reusable, thread exit hands memory back
 * (10,000 threads one after another, their blocks checked against patterns), destroying a pool that threads used, producer-consumer
 * (with and without blocks the consumer keeps: what it frees must still be reused). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mtpool/mtpool.h"
#include "testhelper.h"

#define NT 4

/* ---- cross-thread frees ---- */
static void **slots;
static size_t per_thread;
static pthread_barrier_t bar;
static mtp_pool_t *xpool;

static void *xthread(void *arg) {
  size_t id = (size_t)arg;
  for (int round = 0; round < 5; round++) {
    for (size_t i = 0; i < per_thread; i++) {
      size_t n = 16 + (i * 37 + id) % 500;
      unsigned char *p = mtp_pool_alloc(xpool, n);
      CHECK(p != NULL);
      p[0] = (unsigned char)id;
      p[n - 1] = (unsigned char)i;
      slots[id * per_thread + i] = p;
    }
    pthread_barrier_wait(&bar);
    size_t victim = (id + 1 + (size_t)round) % NT; /* never our own */
    if (victim == id) victim = (victim + 1) % NT;
    for (size_t i = 0; i < per_thread; i++) {
      unsigned char *p = slots[victim * per_thread + i];
      CHECK(p[0] == (unsigned char)victim);
      if (i & 1)
        mtp_free(p);
      else
        mtp_free_sized(p, 16 + (i * 37 + victim) % 500);
    }
    pthread_barrier_wait(&bar);
  }
  return NULL;
}

static void test_cross_thread(void) {
  /* Not fewer under TSan: with 5,000 a round (5.2 MB) the six 4 MiB regions that four threads
   * and the shared heaps may map came past the bound below in 2 of 12 runs */
  per_thread = TH_TSAN ? 20000 : 50000;
  slots = calloc(NT * per_thread, sizeof(void *));
  xpool = mtp_pool_create(NULL);
  pthread_barrier_init(&bar, NULL, NT);
  pthread_t t[NT];
  for (size_t i = 0; i < NT; i++) pthread_create(&t[i], NULL, xthread, (void *)i);
  for (size_t i = 0; i < NT; i++) pthread_join(t[i], NULL);
  mtp_stats_t st;
  mtp_pool_stats(xpool, &st);
  CHECK_EQ_SZ(st.blocks_in_use, 0);
  CHECK_EQ_SZ(st.allocs, 5 * NT * per_thread);
  CHECK_EQ_SZ(st.frees, st.allocs);
  CHECK(st.remote_frees > 0);
  /* five rounds reused the memory of the first: far less than five rounds' worth is mapped
   * (beside the heaps' slabs, the pool's shared heap holds a slab per class: heap.c) */
  size_t one_round = NT * per_thread * 260;
  REQUIRE(st.bytes_mapped < 2 * one_round + (12u << 20), "mapped %zu B, one round %zu B",
          st.bytes_mapped, one_round);
  mtp_pool_trim(xpool);
  mtp_pool_stats(xpool, &st);
  CHECK_EQ_SZ(st.bytes_reserved, 0);
  mtp_pool_destroy(xpool);
  free(slots);
  pthread_barrier_destroy(&bar);
}

/* ---- thread churn: 10,000 threads created one after another ----
 * Each thread allocates 300 blocks (8..512 B) in a created pool and frees them in two passes, and
 * 24 patterned blocks (8 B .. 16 KiB, default pool and the created pool alternately), verifies and
 * frees them, except that every tenth thread leaves two behind for the main thread; half of the
 * threads flush their caches explicitly first. Dead threads' memory must be reused: reserved memory
 * stays that of a few threads plus what the main thread holds, statistics count exactly the
 * blocks held, and the held blocks are intact. */
enum { CHURN_SMALL = 300, CHURN_PER = 24, CHURN_KEEP = 2 };

typedef struct churn_job {
  int index;
  void *kept[CHURN_KEEP];
  size_t kept_size[CHURN_KEEP];
  int fail;
} churn_job_t;

static mtp_pool_t *churn_pool;

static void *churn_thread(void *arg) {
  churn_job_t *j = arg;
  mtp_pool_t *pool = churn_pool;
  void *p[CHURN_SMALL];
  for (int i = 0; i < CHURN_SMALL; i++) p[i] = mtp_pool_alloc(pool, (size_t)(8 + (i % 64) * 8));
  for (int i = 0; i < CHURN_SMALL; i += 2) mtp_free(p[i]);
  for (int i = 1; i < CHURN_SMALL; i += 2) mtp_free(p[i]);
  void *keep = mtp_alloc(100); /* and one block of the default pool, freed by nobody else */
  mtp_free(keep);

  void *q[CHURN_PER];
  size_t sz[CHURN_PER];
  for (int i = 0; i < CHURN_PER; i++) {
    sz[i] = ((size_t)8 << (i % 12)) + (size_t)(j->index % 7); /* 8 B .. 16 KiB */
    q[i] = (i & 1) ? mtp_pool_alloc(pool, sz[i]) : mtp_alloc(sz[i]);
    if (!q[i]) {
      j->fail = 1;
      return NULL;
    }
    th_fill(q[i], sz[i], (uint64_t)j->index * 100 + (uint64_t)i);
  }
  for (int i = 0; i < CHURN_PER; i++) {
    if (th_verify(q[i], sz[i], (uint64_t)j->index * 100 + (uint64_t)i) != (size_t)-1) j->fail = 1;
    if (i < CHURN_KEEP && j->index % 10 == 0) { /* every tenth thread leaves blocks behind */
      j->kept[i] = q[i];
      j->kept_size[i] = sz[i];
    } else {
      mtp_free(q[i]);
    }
  }
  if (j->index & 1) mtp_thread_flush();
  return NULL;
}

static size_t churn_reserved(void) {
  mtp_stats_t a, b;
  mtp_pool_stats(NULL, &a);
  mtp_pool_stats(churn_pool, &b);
  return a.bytes_reserved + b.bytes_reserved;
}

static void test_thread_churn(void) {
  mtp_options_t opt;
  mtp_options_init(&opt);
  opt.name = "churn";
  churn_pool = mtp_pool_create(&opt);
  CHECK(churn_pool != NULL);
  int n = TH_TSAN ? 2000 : 10000;
  churn_job_t *jobs = calloc((size_t)n, sizeof *jobs);
  CHECK(jobs != NULL);
  mtp_stats_t st, a;
  mtp_pool_stats(NULL, &a);
  size_t default_base = a.blocks_in_use; /* what earlier tests left in the default pool */
  double t0 = th_now();
  size_t max_reserved = 0, base = churn_reserved(), after_few = 0, kept_bytes = 0, kept_blocks = 0;
  size_t kept_in_pool = 0;
  for (int i = 0; i < n; i++) {
    pthread_t t;
    jobs[i].index = i;
    CHECK(pthread_create(&t, NULL, churn_thread, &jobs[i]) == 0);
    pthread_join(t, NULL);
    CHECK(!jobs[i].fail);
    for (int k = 0; k < CHURN_KEEP; k++)
      if (jobs[i].kept[k]) {
        kept_bytes += jobs[i].kept_size[k];
        kept_blocks++;
        kept_in_pool += k & 1; /* odd blocks come from the created pool */
      }
    if (i == 3) after_few = churn_reserved();
    if (i % 1000 == 999) {
      mtp_pool_stats(churn_pool, &st);
      if (st.bytes_reserved > max_reserved) max_reserved = st.bytes_reserved;
    }
  }
  size_t end = churn_reserved();
  mtp_pool_stats(churn_pool, &st);
  mtp_pool_stats(NULL, &a);
  fprintf(stderr,
          "  %d threads in %.1f s: churn pool reserved now %zu bytes, at most %zu; mapped %zu; "
          "both pools reserved %zu B before, %zu B after 4 threads, %zu B after all (%zu blocks / "
          "%zu B still held)\n",
          n, th_now() - t0, st.bytes_reserved, max_reserved, st.bytes_mapped, base, after_few, end,
          kept_blocks, kept_bytes);
  CHECK_EQ_SZ(st.blocks_in_use, kept_in_pool);
  CHECK_EQ_SZ(a.blocks_in_use - default_base + st.blocks_in_use, kept_blocks);
  CHECK_EQ_SZ(st.allocs, (size_t)n * (CHURN_SMALL + CHURN_PER / 2));
  /* one thread touches ~64 size classes x one 64 KiB slab: a couple of threads' worth */
  CHECK(max_reserved <= (8u << 20));
  CHECK(st.bytes_mapped <= (16u << 20));
  /* kept blocks pin their slabs: allow four times their bytes plus a slab per class for them */
  size_t few = after_few > base ? after_few - base : 0;
  size_t allowance = 4 * few + 4 * kept_bytes + ((size_t)2 << 20);
  CHECK(end - base <= allowance);
  for (int i = 0; i < n; i++)
    for (int k = 0; k < CHURN_KEEP; k++)
      if (jobs[i].kept[k]) {
        CHECK(th_verify(jobs[i].kept[k], jobs[i].kept_size[k], (uint64_t)i * 100 + (uint64_t)k) ==
              (size_t)-1);
        mtp_free(jobs[i].kept[k]);
      }
  mtp_pool_stats(churn_pool, &st);
  mtp_pool_stats(NULL, &a);
  CHECK_EQ_SZ(st.blocks_in_use, 0);
  CHECK_EQ_SZ(a.blocks_in_use, default_base);
  mtp_pool_trim(NULL);
  mtp_pool_destroy(churn_pool);
  free(jobs);
}

/* ---- a pool destroyed after threads used it; the threads go on with other pools ---- */
static mtp_pool_t *dpool;
static void *destroy_user(void *arg) {
  (void)arg;
  void *p[1000];
  for (int i = 0; i < 1000; i++) p[i] = mtp_pool_alloc(dpool, 48);
  for (int i = 0; i < 500; i++) mtp_free(p[i]); /* half stay in use */
  pthread_barrier_wait(&bar); /* main destroys the pool */
  pthread_barrier_wait(&bar);
  for (int round = 0; round < 3; round++) {
    mtp_pool_t *mine = mtp_pool_create(NULL); /* may reuse the id and the record */
    for (int i = 0; i < 1000; i++) p[i] = mtp_pool_alloc(mine, 48);
    for (int i = 0; i < 1000; i++) mtp_free(p[i]);
    mtp_stats_t st;
    mtp_pool_stats(mine, &st);
    CHECK_EQ_SZ(st.blocks_in_use, 0);
    mtp_pool_destroy(mine);
    void *d = mtp_alloc(48);
    mtp_free(d);
  }
  return NULL;
}

static void test_destroy_used_pool(void) {
  dpool = mtp_pool_create(NULL);
  pthread_barrier_init(&bar, NULL, NT + 1);
  pthread_t t[NT];
  for (size_t i = 0; i < NT; i++) pthread_create(&t[i], NULL, destroy_user, NULL);
  pthread_barrier_wait(&bar);
  mtp_pool_destroy(dpool);
  pthread_barrier_wait(&bar);
  for (size_t i = 0; i < NT; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&bar);
}

/* ---- producer-consumer: one thread allocates, another frees ---- */
#define QCAP 4096
static _Atomic(void *) queue[QCAP];
static atomic_size_t q_head, q_tail;
static size_t pc_total;
static size_t pc_keep;   /* 0, or: the consumer keeps every pc_keep-th block until the end */
static void **pc_kept;
static size_t pc_nkept;

static void *producer(void *arg) {
  mtp_pool_t *pool = arg;
  for (size_t i = 0; i < pc_total; i++) {
    size_t n = 24 + (i % 8) * 8;
    unsigned char *p = mtp_pool_alloc(pool, n);
    CHECK(p != NULL);
    memset(p, (int)(i & 0xff), n);
    size_t h = atomic_load(&q_head);
    while (h - atomic_load(&q_tail) >= QCAP) sched_yield();
    atomic_store(&queue[h % QCAP], p);
    atomic_store(&q_head, h + 1);
  }
  return NULL;
}

static void *consumer(void *arg) {
  (void)arg;
  for (size_t i = 0; i < pc_total; i++) {
    size_t t = atomic_load(&q_tail);
    while (atomic_load(&q_head) == t) sched_yield();
    unsigned char *p = atomic_load(&queue[t % QCAP]);
    CHECK(p[0] == (unsigned char)(i & 0xff));
    atomic_store(&q_tail, t + 1);
    if (pc_keep && i % pc_keep == 0)
      pc_kept[pc_nkept++] = p;
    else
      mtp_free_sized(p, 24 + (i % 8) * 8);
  }
  return NULL;
}

static void run_producer_consumer(size_t total, size_t keep) {
  pc_total = total;
  pc_keep = keep;
  pc_nkept = 0;
  atomic_store(&q_head, 0);
  atomic_store(&q_tail, 0);
  pc_kept = keep ? malloc((total / keep + 1) * sizeof(void *)) : NULL;
  mtp_pool_t *pool = mtp_pool_create(NULL);
  pthread_t a, b;
  pthread_create(&a, NULL, producer, pool);
  pthread_create(&b, NULL, consumer, NULL);
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  mtp_stats_t st;
  mtp_pool_stats(pool, &st);
  fprintf(stderr, "  %zu blocks passed, 1 in %zu kept: in use %zu, mapped %zu, reserved %zu\n",
          total, keep, st.bytes_in_use, st.bytes_mapped, st.bytes_reserved);
  CHECK_EQ_SZ(st.blocks_in_use, pc_nkept);
  CHECK_EQ_SZ(st.remote_frees, total - pc_nkept);
  /* Memory freed by the consumer is reused: the queue holds at most 4096 blocks, so beyond the
   * kept blocks (each slab that holds one cannot go back) a few MiB suffice. */
  CHECK(st.bytes_reserved <= 2 * st.bytes_in_use + (8u << 20));
  if (!keep) CHECK(st.bytes_mapped <= (16u << 20));
  for (size_t i = 0; i < pc_nkept; i++) mtp_free(pc_kept[i]);
  free(pc_kept);
  mtp_pool_stats(pool, &st);
  CHECK_EQ_SZ(st.blocks_in_use, 0);
  mtp_pool_destroy(pool);
}

static void test_producer_consumer(void) {
  size_t n = TH_TSAN ? 200000 : 2000000;
  run_producer_consumer(n, 0);
  run_producer_consumer(n, 10);  /* the consumer keeps some: slabs come back partly free */
  run_producer_consumer(n, 100);
}

/* ---- a block freed twice by a thread that does not own it ---- */
static int df_code;
static void *df_ptr;
static void df_handler(int err, const char *msg, void *p, void *arg) {
  (void)msg;
  (void)arg;
  df_code = err;
  df_ptr = p;
}
static void *free_twice(void *p) {
  mtp_free(p);
  mtp_free(p);
  return NULL;
}
static void test_remote_double_free(void) {
  mtp_set_error_handler(df_handler, NULL);
  void *keep = mtp_alloc(64), *p = mtp_alloc(64); /* our slab stays owned by us */
  pthread_t t;
  pthread_create(&t, NULL, free_twice, p);
  pthread_join(t, NULL);
  CHECK(df_code == MTP_ERR_DOUBLE_FREE && df_ptr == p);
  mtp_free(keep);
  mtp_set_error_handler(NULL, NULL);
}

int main(void) {
  RUN(test_remote_double_free);
  RUN(test_cross_thread);
  RUN(test_thread_churn);
  RUN(test_destroy_used_pool);
  RUN(test_producer_consumer);
  DONE();
}
