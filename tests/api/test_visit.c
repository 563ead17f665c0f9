/* mtp_pool_visit and MTPOOL_SHOW_LEAKS: the walk reports exactly the blocks in use (small, large,
 * checked pools, blocks freed by other threads), stops when asked, stays safe while other threads
 * allocate and free; the leak report at exit names the pool (escaped), the class, the count, the
 * bytes and the addresses. */
#define _GNU_SOURCE
#include <pthread.h>

#include <mtpool/mtpool.h>

#include "testhelper.h"

enum { N = 300 };

typedef struct tally {
  void *want[N + 8];
  int nwant;
  int found[N + 8];
  size_t visits, bytes, foreign;
  unsigned large;
  int stop_after;
} tally_t;

static int on_block(void *arg, void *block, size_t usable, unsigned cls) {
  tally_t *t = arg;
  t->visits++;
  t->bytes += usable;
  if (cls == MTP_VISIT_LARGE) t->large++;
  int hit = 0;
  for (int i = 0; i < t->nwant; i++)
    if (t->want[i] == block) {
      t->found[i]++;
      hit = 1;
    }
  if (!hit) t->foreign++;
  return t->stop_after && (int)t->visits >= t->stop_after ? 42 : 0;
}

static void check_pool(mtp_pool_t *pool, int checked) {
  tally_t *t = calloc(1, sizeof *t);
  CHECK(t != NULL);
  size_t sizes[] = {8, 24, 48, 100, 1000, 4096, 30000, (size_t)100 << 10};
  for (int i = 0; i < N; i++) {
    size_t n = sizes[i % 8];
    t->want[i] = mtp_pool_alloc(pool, n);
    CHECK(t->want[i] != NULL);
  }
  /* free every third block (frees by another thread: test_remote) */
  for (int i = 0; i < N; i += 3) {
    mtp_free(t->want[i]);
    t->want[i] = NULL;
  }
  t->nwant = N;
  CHECK(mtp_pool_visit(pool, on_block, t) == 0);
  size_t live = 0;
  for (int i = 0; i < N; i++)
    if (t->want[i]) {
      live++;
      EXPECT(t->found[i] == 1, "block %d (%zu B) visited %d times", i, sizes[i % 8], t->found[i]);
    }
  EXPECT(t->foreign == 0, "%zu blocks visited that the test does not hold", t->foreign);
  EXPECT(t->visits == live, "visited %zu, live %zu", t->visits, live);
  EXPECT(t->large > 0, "no large block visited");
  mtp_stats_t st;
  mtp_pool_stats(pool, &st);
  EXPECT(st.blocks_in_use == t->visits, "stats say %zu in use, walk %zu", st.blocks_in_use,
         t->visits);
  (void)checked;
  /* a nonzero return stops the walk and is returned */
  memset(t->found, 0, sizeof t->found);
  t->visits = 0;
  t->stop_after = 5;
  EXPECT(mtp_pool_visit(pool, on_block, t) == 42, "stop value not returned");
  EXPECT(t->visits == 5, "walk went on after the stop (%zu)", t->visits);
  for (int i = 0; i < N; i++)
    if (t->want[i]) mtp_free(t->want[i]);
  /* nothing left */
  memset(t, 0, sizeof *t);
  CHECK(mtp_pool_visit(pool, on_block, t) == 0);
  EXPECT(t->visits == 0, "%zu blocks visited after all were freed", t->visits);
  free(t);
}

static void test_created_pool(void) {
  mtp_pool_t *p = mtp_pool_create(NULL);
  CHECK(p != NULL);
  check_pool(p, 0);
  mtp_pool_destroy(p);
}

static void test_checked_pool(void) {
  mtp_options_t o;
  mtp_options_init(&o);
  o.check = 1;
  mtp_pool_t *p = mtp_pool_create(&o);
  CHECK(p != NULL);
  check_pool(p, 1);
  mtp_pool_destroy(p);
}

static void test_einval(void) { EXPECT(mtp_pool_visit(NULL, NULL, NULL) == EINVAL, "NULL visit"); }

/* Blocks freed by another thread (on the slab's remote list) are not visited. */
static void *free_all(void *arg) {
  void **v = arg;
  for (int i = 0; i < 64; i++) mtp_free(v[i]);
  return NULL;
}
static void test_remote(void) {
  mtp_pool_t *p = mtp_pool_create(NULL);
  CHECK(p != NULL);
  tally_t *t = calloc(1, sizeof *t);
  void *v[64];
  for (int i = 0; i < 64; i++) t->want[i] = mtp_pool_alloc(p, 40);
  memcpy(v, t->want, sizeof v);
  for (int i = 64; i < 128; i++) t->want[i] = mtp_pool_alloc(p, 40);
  pthread_t th;
  CHECK(pthread_create(&th, NULL, free_all, v) == 0);
  pthread_join(th, NULL);
  for (int i = 0; i < 64; i++) t->want[i] = NULL;
  t->nwant = 128;
  CHECK(mtp_pool_visit(p, on_block, t) == 0);
  EXPECT(t->visits == 64 && t->foreign == 0, "remote: visited %zu, foreign %zu", t->visits,
         t->foreign);
  for (int i = 64; i < 128; i++) mtp_free(t->want[i]);
  free(t);
  mtp_pool_destroy(p);
}

/* Walks while other threads allocate and free in the pool: no crash, no block reported twice,
 * every block the walking thread holds reported. */
static mtp_pool_t *g_busy;
static int g_stop; /* __atomic: the churn threads poll it */
static void *churn(void *arg) {
  (void)arg;
  void *h[256] = {0};
  unsigned x = 12345;
  while (!__atomic_load_n(&g_stop, __ATOMIC_RELAXED)) {
    x = x * 1103515245u + 12345u;
    int i = (int)(x >> 16) % 256;
    if (h[i]) {
      mtp_free(h[i]);
      h[i] = NULL;
    } else {
      h[i] = mtp_pool_alloc(g_busy, 16 + (x >> 8) % 2000);
    }
  }
  for (int i = 0; i < 256; i++) mtp_free(h[i]);
  return NULL;
}
static int count_mine(void *arg, void *block, size_t usable, unsigned cls) {
  (void)usable;
  (void)cls;
  tally_t *t = arg;
  t->visits++;
  for (int i = 0; i < t->nwant; i++)
    if (t->want[i] == block) t->found[i]++;
  return 0;
}
static void test_concurrent(void) {
  g_busy = mtp_pool_create(NULL);
  CHECK(g_busy != NULL);
  tally_t *t = calloc(1, sizeof *t);
  t->nwant = 32;
  for (int i = 0; i < 32; i++) t->want[i] = mtp_pool_alloc(g_busy, 16 + (size_t)i * 50);
  pthread_t th[2];
  for (int i = 0; i < 2; i++) CHECK(pthread_create(&th[i], NULL, churn, NULL) == 0);
  for (int round = 0; round < 200; round++) {
    memset(t->found, 0, sizeof t->found);
    CHECK(mtp_pool_visit(g_busy, count_mine, t) == 0);
    for (int i = 0; i < 32; i++)
      EXPECT(t->found[i] == 1, "round %d: my block %d visited %d times", round, i, t->found[i]);
  }
  __atomic_store_n(&g_stop, 1, __ATOMIC_RELAXED);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 32; i++) mtp_free(t->want[i]);
  free(t);
  mtp_pool_destroy(g_busy);
}

/* MTPOOL_SHOW_LEAKS=1: a child leaks 3 blocks of 48 B and one of 100 KiB in a pool named with
 * a quote and a newline; its stderr must list them, the name escaped, and nothing else: not the
 * blocks of one size it replaced at random and then freed, some of which its heap lists for
 * reuse at exit (the stand-in, heap.c). */
static void test_leak_report(const char *self) {
  char *argv[] = {(char *)self, (char *)"--leak-child", NULL};
  const char *envp[] = {"MTPOOL_SHOW_LEAKS=1", NULL};
  th_proc_t pr;
  CHECK(th_run_self(argv, envp, 60, &pr) == 0);
  EXPECT(WIFEXITED(pr.status) && WEXITSTATUS(pr.status) == 0, "leak child status %d", pr.status);
  const char *e = pr.err ? pr.err : "";
  EXPECT(strstr(e, "mtpool: leaks: pool \"le\\\"ak\\x0ay\": 4 blocks, ") != NULL,
         "pool line missing or unescaped:\n%s", e);
  EXPECT(strstr(e, "(48 B): 3 blocks, 144 bytes: 0x") != NULL, "48 B class line missing:\n%s", e);
  EXPECT(strstr(e, "large: 1 blocks, ") != NULL, "large line missing:\n%s", e);
  th_proc_free(&pr);
}

static int leak_child(void) {
  mtp_options_t o;
  mtp_options_init(&o);
  o.name = "le\"ak\ny";
  mtp_pool_t *p = mtp_pool_create(&o);
  if (!p) return 1;
  for (int i = 0; i < 3; i++)
    if (!mtp_pool_alloc(p, 48)) return 1;
  if (!mtp_pool_alloc(p, (size_t)100 << 10)) return 1;
  enum { N = 256 }; /* 8 slabs, all but one exhausted: the stand-in serves the class */
  static void *v[N];
  unsigned x = 1;
  for (int i = 0; i < N; i++)
    if (!(v[i] = mtp_pool_alloc(p, 2048))) return 1;
  for (int r = 0; r < 100000; r++) {
    x = x * 1103515245u + 12345u;
    unsigned k = (x >> 8) % N;
    mtp_free(v[k]);
    if (!(v[k] = mtp_pool_alloc(p, 2048))) return 1;
  }
  for (int i = 0; i < N; i++) mtp_free(v[i]);
  return 0; /* leaked on purpose: the report at exit lists them */
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--leak-child") == 0) return leak_child();
  RUN(test_einval);
  RUN(test_created_pool);
  RUN(test_checked_pool);
  RUN(test_remote);
  RUN(test_concurrent);
  test_leak_report(argv[0]);
  DONE();
}
