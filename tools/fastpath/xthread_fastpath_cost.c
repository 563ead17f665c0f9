/* Instructions per cross-thread pair, counted with callgrind (tools/fastpath/cost.sh): one thread
 * allocates a batch of blocks, a second thread frees them all, the first allocates the next batch
 * (reusing what the second freed), and so on. A pair is one allocation plus one free by another
 * thread, with its share of collecting the remote frees.
 * usage: xthread_fastpath_cost <mtpool|malloc|none> <size> <pairs> [batch]
 * "malloc" calls malloc/free (under LD_PRELOAD: the preloaded allocator); "none" runs the same two
 * threads and barriers without allocating: its count is the harness's own cost. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mtpool/mtpool.h"

enum { MAX_BATCH = 4096 };
static void *ptrs[MAX_BATCH];
static char dummy[MAX_BATCH];
static size_t size, rounds, batch;
static int mode; /* 0 malloc, 1 mtpool, 2 none */
static pthread_barrier_t bar;

static void *freer(void *arg) {
  (void)arg;
  for (size_t r = 0; r < rounds; r++) {
    pthread_barrier_wait(&bar); /* the batch is allocated */
    for (size_t i = 0; i < batch; i++) {
      if (mode == 0) free(ptrs[i]);
      else if (mode == 1) mtp_free(ptrs[i]);
      else ptrs[i] = NULL;
    }
    pthread_barrier_wait(&bar); /* the batch is freed */
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: %s mtpool|malloc|none SIZE PAIRS [BATCH]\n", argv[0]);
    return 2;
  }
  mode = strcmp(argv[1], "malloc") == 0 ? 0 : strcmp(argv[1], "mtpool") == 0 ? 1 : 2;
  size = strtoul(argv[2], NULL, 10);
  batch = argc > 4 ? strtoul(argv[4], NULL, 10) : 1000;
  if (batch == 0 || batch > MAX_BATCH) return 2;
  rounds = strtoul(argv[3], NULL, 10) / batch;
  pthread_barrier_init(&bar, NULL, 2);
  pthread_t t;
  if (pthread_create(&t, NULL, freer, NULL) != 0) return 1;
  for (size_t r = 0; r < rounds; r++) {
    for (size_t i = 0; i < batch; i++) {
      void *p = mode == 0 ? malloc(size) : mode == 1 ? mtp_alloc(size) : (void *)&dummy[i];
      if (p == NULL) abort();
      ptrs[i] = p;
    }
    pthread_barrier_wait(&bar);
    pthread_barrier_wait(&bar);
  }
  pthread_join(t, NULL);
  return 0;
}
