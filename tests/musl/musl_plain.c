/* A plain musl program: no mtpool header, no dlsym, nothing but the C library. It keeps
 * MUSL_PLAIN_BLOCKS blocks of 333 bytes (and a string strdup made inside libc) until exit, so that
 * MTPOOL_SHOW_STATS's report at exit shows them if, and only if, malloc is mtpool's. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MUSL_PLAIN_BLOCKS = 5000, THREADS = 4 };
static void *kept[MUSL_PLAIN_BLOCKS];

static void *worker(void *arg) {
  int t = (int)(long)arg;
  for (int i = t; i < MUSL_PLAIN_BLOCKS; i += THREADS) {
    kept[i] = malloc(333);
    if (kept[i] == NULL) abort();
    memset(kept[i], i, 333);
  }
  return NULL;
}

int main(void) {
  pthread_t th[THREADS];
  for (long t = 0; t < THREADS; t++)
    if (pthread_create(&th[t], NULL, worker, (void *)t) != 0) return 2;
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
  char *s = strdup("kept by libc's strdup");
  printf("%d blocks kept, %s\n", MUSL_PLAIN_BLOCKS, s);
  return 0; /* the blocks stay allocated: the report at exit counts them */
}
