/* A thread's exit that starts the purge thread, with mtpool as malloc (run preloaded: see
 * CMakeLists.txt). The exit's flush releases a slab, so the purger is due a wake; the first wake of
 * a process (here: of each forked child, whose purger starts afresh) creates the purge thread, and
 * pthread_create allocates (the new thread's TLS), which re-enters mtpool on the exiting thread.
 * That nested allocation, after exit, releases the thread again. Regression: the outer release
 * freed the thread record a second time, so that later threads shared one record and the internal
 * free list handed out live records, &mtp__slab_empty among them (a segfault or corrupt blocks in
 * the churn below). Each child repeats it; any child that fails fails the test. Not timed.
 * Built without mtpool: plain malloc/free/pthreads. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHILDREN 24
#define CHURN_THREADS 16
#define CHURN_BLOCKS 300

static void fail(const char *what) {
  fprintf(stderr, "test_mt_exit_wake: %s\n", what);
  _exit(1);
}

/* The trigger: one block of a class this thread's heap has not used, freed at once; its slab is
 * then empty and goes back to the pool at the thread's exit, which makes the purger due a wake. */
static void *exit_with_release(void *arg) {
  (void)arg;
  void *volatile p = malloc(200);
  if (p == NULL) fail("out of memory");
  free(p);
  return NULL;
}

/* Then threads live at once, each allocating stamped blocks that the next thread frees (remote),
 * so that two threads sharing a record or a heap corrupt or lose blocks. */
typedef struct {
  unsigned char *blk[CHURN_BLOCKS];
  size_t len[CHURN_BLOCKS];
  pthread_barrier_t *bar;
  int idx;
} churn_t;
static churn_t churn[CHURN_THREADS];

static unsigned char stamp_of(int t, int i) { return (unsigned char)(t * 31 + i * 7 + 1); }

static void *churn_main(void *arg) {
  churn_t *c = arg;
  uint64_t r = 0x9E3779B97F4A7C15ull * (uint64_t)(c->idx + 1);
  for (int i = 0; i < CHURN_BLOCKS; i++) {
    r ^= r >> 12, r ^= r << 25, r ^= r >> 27;
    size_t n = 16 + (size_t)((r * 0x2545F4914F6CDD1Dull) >> 40) % 3000;
    c->len[i] = n;
    c->blk[i] = malloc(n);
    if (c->blk[i] == NULL) fail("out of memory");
    memset(c->blk[i], stamp_of(c->idx, i), n);
  }
  pthread_barrier_wait(c->bar);
  churn_t *o = &churn[(c->idx + 1) % CHURN_THREADS]; /* free the next thread's blocks */
  for (int i = 0; i < CHURN_BLOCKS; i++) {
    for (size_t k = 0; k < o->len[i]; k++)
      if (o->blk[i][k] != stamp_of(o->idx, i)) fail("a block's contents changed");
    free(o->blk[i]);
  }
  return NULL;
}

static int child(void) {
  pthread_t t;
  if (pthread_create(&t, NULL, exit_with_release, NULL) != 0) fail("pthread_create");
  pthread_join(t, NULL);
  pthread_barrier_t bar;
  pthread_barrier_init(&bar, NULL, CHURN_THREADS);
  pthread_t ct[CHURN_THREADS];
  for (int i = 0; i < CHURN_THREADS; i++) {
    churn[i].bar = &bar;
    churn[i].idx = i;
    if (pthread_create(&ct[i], NULL, churn_main, &churn[i]) != 0) fail("pthread_create");
  }
  for (int i = 0; i < CHURN_THREADS; i++) pthread_join(ct[i], NULL);
  return 0;
}

int main(void) {
  /* A second heap in the pool makes the purge thread worth starting at the next wake. */
  void *p = malloc(64);
  free(p);
  int failed = 0;
  for (int i = 0; i < CHILDREN; i++) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) fail("fork");
    if (pid == 0) _exit(child());
    int st = 0;
    if (waitpid(pid, &st, 0) != pid) fail("waitpid");
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "test_mt_exit_wake: child %d %s %d\n", i,
              WIFSIGNALED(st) ? "killed by signal" : "exited with", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
      failed++;
    }
  }
  printf("test_mt_exit_wake: %d of %d children failed\n", failed, CHILDREN);
  return failed ? 1 : 0;
}
