/*
 * Thread churn: 10,000 threads created one after another, each allocating blocks in a dozen size
 * classes (default pool and a created pool), freeing most, handing a few to the main thread and
 * exiting (half of them flush explicitly first). Dead threads' memory must be reused: reserved
 * memory at the end may exceed what a few threads use by no more than what the main thread still
 * holds, and statistics must count exactly the blocks held.
 */
#define _GNU_SOURCE
#include <pthread.h>

#include "rel_util.h"

enum { NTHREADS = 10000 }; /* about 0.5 s, 4 s under ASan, 11 s under TSan */
enum { PER = 24, KEEP = 2 };

static mtp_pool_t *g_pool;

typedef struct job {
  int index;
  void *kept[KEEP];
  size_t kept_size[KEEP];
  int fail;
} job_t;

static void *thread_main(void *arg) {
  job_t *j = arg;
  void *p[PER];
  size_t sz[PER];
  for (int i = 0; i < PER; i++) {
    sz[i] = (size_t)8 << (i % 12); /* 8 B .. 16 KiB */
    sz[i] += (size_t)(j->index % 7);
    p[i] = (i & 1) ? mtp_pool_alloc(g_pool, sz[i]) : mtp_alloc(sz[i]);
    if (!p[i]) {
      j->fail = 1;
      return NULL;
    }
    rel_fill(p[i], sz[i], (uint64_t)j->index * 100 + (uint64_t)i);
  }
  for (int i = 0; i < PER; i++) {
    if (rel_verify(p[i], sz[i], (uint64_t)j->index * 100 + (uint64_t)i) != (size_t)-1) j->fail = 1;
    if (i < KEEP && j->index % 10 == 0) { /* every tenth thread leaves blocks behind */
      j->kept[i] = p[i];
      j->kept_size[i] = sz[i];
    } else {
      mtp_free(p[i]);
    }
  }
  if (j->index & 1) mtp_thread_flush();
  return NULL;
}

static size_t reserved(void) {
  mtp_stats_t a, b;
  mtp_pool_stats(NULL, &a);
  mtp_pool_stats(g_pool, &b);
  return a.bytes_reserved + b.bytes_reserved;
}

int main(void) {
  g_pool = mtp_pool_create(NULL);
  REL_REQUIRE(g_pool, "pool");
  job_t *jobs = calloc(NTHREADS, sizeof *jobs);
  REL_REQUIRE(jobs, "oom");
  double t0 = rel_now();
  size_t base = reserved(), after_few = 0, kept_bytes = 0, kept_blocks = 0;
  for (int i = 0; i < NTHREADS; i++) {
    jobs[i].index = i;
    pthread_t t;
    REL_REQUIRE(pthread_create(&t, NULL, thread_main, &jobs[i]) == 0, "pthread_create %d", i);
    pthread_join(t, NULL);
    REL_CHECK(!jobs[i].fail, "thread %d failed", i);
    for (int k = 0; k < KEEP; k++)
      if (jobs[i].kept[k]) {
        kept_bytes += jobs[i].kept_size[k];
        kept_blocks++;
      }
    if (i == 3) after_few = reserved();
  }
  size_t end = reserved();
  mtp_stats_t a, b;
  mtp_pool_stats(NULL, &a);
  mtp_pool_stats(g_pool, &b);
  REL_CHECK(a.blocks_in_use + b.blocks_in_use == kept_blocks, "blocks_in_use %zu + %zu, held %zu",
            a.blocks_in_use, b.blocks_in_use, kept_blocks);
  size_t few = after_few > base ? after_few - base : 0;
  /* kept blocks pin their slabs: allow four times their bytes plus a slab per class for them */
  size_t allowance = 4 * few + 4 * kept_bytes + ((size_t)2 << 20);
  printf("threads: %d threads one after another in %.1f s; reserved: %zu B before, %zu B after 4 "
         "threads, %zu B after all (%zu blocks / %zu B still held)\n",
         NTHREADS, rel_now() - t0, base, after_few, end, kept_blocks, kept_bytes);
  REL_CHECK(end - base <= allowance,
            "reserved memory grew to %zu B over %zu B (a few threads': %zu B; allowed %zu B)", end,
            base, few, allowance);
  for (int i = 0; i < NTHREADS; i++)
    for (int k = 0; k < KEEP; k++)
      if (jobs[i].kept[k]) {
        REL_CHECK(rel_verify(jobs[i].kept[k], jobs[i].kept_size[k], (uint64_t)i * 100 + (uint64_t)k) ==
                      (size_t)-1,
                  "kept block corrupt");
        mtp_free(jobs[i].kept[k]);
      }
  mtp_pool_stats(NULL, &a);
  mtp_pool_stats(g_pool, &b);
  REL_CHECK(a.blocks_in_use == 0 && b.blocks_in_use == 0, "blocks left: %zu, %zu", a.blocks_in_use,
            b.blocks_in_use);
  mtp_pool_trim(NULL);
  mtp_pool_destroy(g_pool);
  free(jobs);
  return rel_failures ? 1 : 0;
}
