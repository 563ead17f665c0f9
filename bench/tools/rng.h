/* The benchmarks' deterministic random numbers: xorshift64*, one generator per thread (or per
 * task), seeded from a workload number and an index, so that the work a program does, and the
 * checksum it computes over it, depend only on its arguments and never on the allocator or on
 * thread timing. Shared by the preload drivers bench/gp/gp_bench.c and bench/latency/latency.c.
 * Plain C11. */
#ifndef MTPOOL_BENCH_RNG_H
#define MTPOOL_BENCH_RNG_H

#include <stddef.h>
#include <stdint.h>

typedef struct { uint64_t s; } rng_t;

static inline void rng_seed(rng_t *r, uint64_t test, uint64_t idx) {
  r->s = 0x9E3779B97F4A7C15ull * (test * 1000003u + idx + 1) ^ 0xD1B54A32D192ED03ull;
  if (!r->s) r->s = 1;
}
static inline uint64_t rng_next(rng_t *r) {
  r->s ^= r->s >> 12;
  r->s ^= r->s << 25;
  r->s ^= r->s >> 27;
  return r->s * 0x2545F4914F6CDD1Dull;
}
/* Uniform in [lo, hi]. */
static inline size_t rng_range(rng_t *r, size_t lo, size_t hi) {
  return lo + rng_next(r) % (hi - lo + 1);
}
/* Skewed towards lo: the smaller of two uniform draws (small sizes are the common case). */
static inline size_t rng_small(rng_t *r, size_t lo, size_t hi) {
  size_t a = rng_range(r, lo, hi), b = rng_range(r, lo, hi);
  return a < b ? a : b;
}
/* Log-uniform in [lo, hi]: as many 64-128 KiB blocks as 2-4 MiB ones. */
static inline size_t rng_log(rng_t *r, size_t lo, size_t hi) {
  int span = 0;
  while ((lo << (span + 1)) <= hi) span++;
  size_t base = lo << (rng_next(r) % (uint64_t)(span + 1));
  size_t top = base * 2 > hi ? hi : base * 2;
  return rng_range(r, base, top);
}

#endif
