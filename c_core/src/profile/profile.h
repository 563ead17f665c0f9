/* The sampled heap profiler (MTPOOL_PROFILE; docs/profiling.md). Files: profile.c (says how it
 * works: the count, the samples), profile_records.c (the tables of stacks and live samples, the
 * profile's writer), profile_unwind.c (the unwinder). A room above the heap it wraps: the fast
 * paths' count and the slow path's first step (api/alloc.c). Layer: wrap (above heap). */
#ifndef MTP_PROFILE_H
#define MTP_PROFILE_H

#include "heap/heap.h"

#pragma GCC visibility push(hidden)

/* Whether profiling is on: set once at start-up, before the program's threads. */
extern bool mtp__prof_on;
/* The slow path's first step while profiling, for the default pool: the allocation is counted,
 * and sampled (*done) or left to the usual slow path (!*done). */
void *mtp__prof_alloc(mtpi_pool_t *pool, size_t size, bool *done);
/* A fast path's pop of b, for an allocation of size bytes, took h's count (prof_left) below 0:
 * b goes back where it came from (h's reuse list if reuse, else h's current slab of its class)
 * and the allocation is sampled; returns it, or b itself when it cannot be sampled: never NULL. */
__attribute__((returns_nonnull)) void *mtp__prof_fast_sample(mtpi_heap_t *h, mtpi_block_t *b,
                                                              size_t size, bool reuse);
#define MTP_PROF_MAX_DEPTH 48 /* frames kept per stack */
/* While profiling: if p is a live sampled block, its allocation site's frames copied into pc (at
 * most max; innermost first), their number returned (0: not a sample); `forget`: the sample is
 * dropped as well (a large block's free). For a misuse report to name the site
 * (mtp__error_origin). */
unsigned mtp__prof_origin(const void *p, void **pc, unsigned max, bool forget);
/* Whether p is a live sampled block. */
bool mtp__prof_holds(const void *p);

#pragma GCC visibility pop

#endif
