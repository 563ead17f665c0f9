/* Memory goes back to the OS: 2,000,000 blocks of 120 B allocated by 4 threads and freed by
 * threads other than their owners (the owners stay alive and idle) return to within 8 MiB of the
 * starting resident size after mtp_pool_trim, and by themselves within the purge delay. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdbool.h>
#include <unistd.h>

#include "mtpool/mtpool.h"
#include "testhelper.h"

#define NT 4
static size_t total;
static void **slots;
static pthread_barrier_t bar;

static void *worker(void *arg) {
  size_t id = (size_t)arg, per = total / NT;
  for (size_t i = 0; i < per; i++) {
    char *p = mtp_alloc(120);
    CHECK(p != NULL);
    p[0] = (char)id;
    slots[id * per + i] = p;
  }
  pthread_barrier_wait(&bar); /* all allocated */
  size_t victim = (id + 1) % NT;
  for (size_t i = 0; i < per; i++) mtp_free_sized(slots[victim * per + i], 120);
  pthread_barrier_wait(&bar); /* all freed: main measures while we stay alive */
  pthread_barrier_wait(&bar);
  return NULL;
}

static void run(bool use_trim) {
  slots = calloc(total, sizeof(void *));
  memset(slots, 1, total * sizeof(void *)); /* resident before the baseline */
  size_t base = th_rss();
  mtp_stats_t st0, st;
  mtp_pool_stats(NULL, &st0);
  pthread_barrier_init(&bar, NULL, NT + 1);
  pthread_t t[NT];
  for (size_t i = 0; i < NT; i++) pthread_create(&t[i], NULL, worker, (void *)i);
  pthread_barrier_wait(&bar);
  size_t peak = th_rss();
  pthread_barrier_wait(&bar);
  size_t after_free = th_rss();
  size_t after = 0;
  long waited_ms = 0;
  if (use_trim) {
    size_t n = mtp_pool_trim(NULL);
    after = th_rss();
    fprintf(stderr, "  trim returned %zu bytes\n", n);
  } else {
    /* the default purge delay is 250 ms: poll until it is done, give up after 3 s; under a
     * sanitizer the RSS moves with its shadow memory, so only the allocator's account counts */
    for (; waited_ms < 3000; waited_ms += 10) {
      after = th_rss();
      mtp_pool_stats(NULL, &st);
      if ((TH_SANITIZED || after <= base + (peak - base) / 20) &&
          st.bytes_reserved <= st0.bytes_reserved + total * 120 / 20)
        break;
      usleep(10000);
    }
  }
  mtp_pool_stats(NULL, &st);
  long long kept = (long long)after - (long long)base; /* below the base when more went back */
  fprintf(stderr,
          "  %zu x 120 B: rss base %zu MiB, peak %zu MiB, after free %zu MiB, after %s %lld KiB "
          "above base (%.2f%% of growth kept)%s; reserved %zu KiB\n",
          total, base >> 20, peak >> 20, after_free >> 20, use_trim ? "trim" : "purge delay",
          kept / 1024, 100.0 * (double)kept / (double)(peak - base),
          use_trim ? "" : " ", st.bytes_reserved >> 10);
  if (!use_trim) fprintf(stderr, "  purged by itself after %ld ms\n", waited_ms);
  pthread_barrier_wait(&bar);
  for (size_t i = 0; i < NT; i++) pthread_join(t[i], NULL);
  CHECK_EQ_SZ(st.blocks_in_use, st0.blocks_in_use);
  if (!TH_SANITIZED) {
    CHECK(peak - base >= total * 120 / 10 * 9); /* we did use the memory (RSS is in pages) */
    if (use_trim)
      CHECK(after <= base + (8u << 20) + th_rss_slack());
    else
      CHECK(after <= base + (peak - base) / 20 + th_rss_slack()); /* at least 95% back */
  }
  /* the allocator's own account agrees (here too, without trim, 95% is the bar) */
  CHECK(st.bytes_reserved <= st0.bytes_reserved + (use_trim ? (8u << 20) : total * 120 / 20));
  free(slots);
  pthread_barrier_destroy(&bar);
}

static void test_trim_after_remote_free(void) { run(true); }
static void test_purge_by_itself(void) { run(false); }

int main(void) {
  total = TH_TSAN ? 200000 : 2000000;
  RUN(test_trim_after_remote_free);
  RUN(test_purge_by_itself);
  DONE();
}
