/* How well block sizes fit requests: malloc_usable_size(p) / n for n from 1 KiB to 4 MiB (every
 * 16 bytes to 256 KiB, every 256 bytes above), for whatever malloc the process runs on
 * (bench/gp/fit.sh preloads each allocator). Two passes: "fresh", each size allocated and freed
 * in ascending order; "reused", each size allocated just after a block a quarter larger was freed
 * (what an allocator that hands back a cached block as it is reports). Prints one JSON line: per
 * band the largest and the mean ratio, and the largest over "power of two plus a header"
 * (2^k + 8 .. 2^k + 64, k = 12..16). No block is written. Exit 1 when memory runs out. */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>

#include "../tools/malloc_name.h"

typedef struct {
  const char *name;
  size_t lo, hi; /* lo < n <= hi */
  double worst, sum;
  size_t worst_n, count;
} band_t;

static band_t bands[] = {
    {"1K-32K", 1023, 32768, 0, 0, 0, 0},       {"32K-256K", 32768, 262144, 0, 0, 0, 0},
    {"256K-1M", 262144, 1048576, 0, 0, 0, 0}, {"1M-4M", 1048576, 4194304, 0, 0, 0, 0},
};
#define NBANDS (sizeof bands / sizeof bands[0])

static double ratio(size_t n, size_t before) {
  if (before) free(malloc(before)); /* a larger block freed just before */
  void *p = malloc(n);
  if (!p) {
    fprintf(stderr, "out of memory at %zu bytes\n", n);
    exit(1);
  }
  double r = (double)malloc_usable_size(p) / (double)n;
  free(p);
  return r;
}

static void pass(int reused) {
  for (unsigned b = 0; b < NBANDS; b++) bands[b].worst = bands[b].sum = 0, bands[b].count = 0;
  for (size_t n = 1024; n <= ((size_t)4 << 20); n += n < 262144 ? 16 : 256) {
    double r = ratio(n, reused ? n + n / 4 : 0);
    for (unsigned b = 0; b < NBANDS; b++) {
      if (n <= bands[b].lo || n > bands[b].hi) continue;
      if (r > bands[b].worst) bands[b].worst = r, bands[b].worst_n = n;
      bands[b].sum += r;
      bands[b].count++;
    }
  }
  double hdr = 0;
  size_t hdr_n = 0;
  for (unsigned k = 12; k <= 16; k++)
    for (size_t h = 8; h <= 64; h += 8) {
      size_t n = ((size_t)1 << k) + h;
      double r = ratio(n, reused ? n + n / 4 : 0);
      if (r > hdr) hdr = r, hdr_n = n;
    }
  printf("\"%s\": {", reused ? "reused" : "fresh");
  for (unsigned b = 0; b < NBANDS; b++)
    printf("\"%s\": {\"worst\": %.4f, \"worst_n\": %zu, \"mean\": %.4f}, ", bands[b].name, bands[b].worst,
           bands[b].worst_n, bands[b].sum / (double)bands[b].count);
  printf("\"pow2_header\": {\"worst\": %.4f, \"worst_n\": %zu}}", hdr, hdr_n);
}

int main(void) {
  printf("{\"malloc\": \"%s\", ", malloc_by_symbol());
  pass(0);
  printf(", ");
  pass(1);
  printf("}\n");
  return 0;
}
