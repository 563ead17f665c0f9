/* Resident anonymous memory against the number of threads that each allocate a little.
 *
 *   thread_footprint [THREADS [BLOCKS]]     (defaults 1000 and 20)
 *
 * THREADS threads start; each allocates BLOCKS blocks of sizes spread over 16 B .. 3 KiB (one
 * fixed sequence per thread index), then all wait at a barrier while the main thread reads
 * RssAnon from /proc/self/status; then every thread frees its blocks and exits. Prints one JSON
 * line: the malloc in use, threads, blocks, RssAnon before the threads started and at the
 * barrier, and the difference per thread (what one more thread that allocates a little costs;
 * thread stacks, about 8-12 KiB each, are in it for every allocator alike).
 * Build: gcc -O2 -pthread bench/gp/thread_footprint.c -ldl; run with LD_PRELOAD=<malloc>. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tools/malloc_name.h"

static int nblocks = 20;
static pthread_barrier_t all_allocated, measured;

static long rss_anon_kb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long v = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "RssAnon: %ld", &v) == 1) break;
  if (f) fclose(f);
  return v;
}

static void *worker(void *arg) {
  uint64_t s = 0x9E3779B97F4A7C15ull * ((uintptr_t)arg + 1);
  void **b = calloc((size_t)nblocks, sizeof *b);
  for (int i = 0; i < nblocks && b; i++) {
    s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
    size_t n = 16 + (s * 0x2545F4914F6CDD1Dull >> 33) % 3072;
    b[i] = malloc(n);
    if (b[i]) memset(b[i], 1, n);
  }
  pthread_barrier_wait(&all_allocated);
  pthread_barrier_wait(&measured);
  for (int i = 0; i < nblocks && b; i++) free(b[i]);
  free(b);
  return NULL;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 1000;
  if (argc > 2) nblocks = atoi(argv[2]);
  if (n < 1 || nblocks < 1) return 2;
  pthread_t *t = calloc((size_t)n, sizeof *t);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 64 * 1024); /* thousands of threads: small stacks */
  pthread_barrier_init(&all_allocated, NULL, (unsigned)n + 1);
  pthread_barrier_init(&measured, NULL, (unsigned)n + 1);
  long before = rss_anon_kb();
  for (int i = 0; i < n; i++)
    if (pthread_create(&t[i], &attr, worker, (void *)(uintptr_t)i)) return 1;
  pthread_barrier_wait(&all_allocated);
  long at = rss_anon_kb();
  pthread_barrier_wait(&measured);
  for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
  printf("{\"malloc\": \"%s\", \"threads\": %d, \"blocks\": %d, \"rss_anon_before_kb\": %ld, "
         "\"rss_anon_kb\": %ld, \"per_thread_kb\": %.1f}\n",
         malloc_by_symbol(), n, nblocks, before, at, (double)(at - before) / n);
  free(t);
  return 0;
}
