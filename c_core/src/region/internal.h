/* What the region layer's files share: region.c (regions, runs) and purge.c (purging free pages,
 * unmapping free regions). Not for other layers: region.h is the layer's face. Layer: region. */
#ifndef MTP_REGION_INTERNAL_H
#define MTP_REGION_INTERNAL_H

#include "region.h"

#pragma GCC visibility push(hidden)

/* A run lies in one bitmap word: a region's 64 pages are one word. */
_Static_assert(MTP_PAGES_PER_REGION == 64, "runs are searched within one bitmap word");

/* Regions with free pages stay in front, so a search can stop at the first full one. */
static inline mtpi_region_t *mtp__region_first(mtpi_rset_t *rs) {
  return mtp__region_from_node(rs->regions);
}
static inline mtpi_region_t *mtp__region_next(mtpi_region_t *r) {
  return mtp__region_from_node(r->h.link.next);
}

/* Bits lo .. lo + n - 1 of a bitmap word (n >= 1, lo + n <= 64): a run of n pages. */
static inline uint64_t mtp__run_mask(unsigned lo, unsigned n) {
  return (n == 64 ? ~0ull : ((uint64_t)1 << n) - 1) << lo;
}

/* Under the lock: r leaves rs (its list, the chunk map, the counts); unmapped later, without the
 * lock, by mtp__region_unmap. */
void mtp__region_detach(mtpi_rset_t *rs, mtpi_region_t *r);
/* r's mapping back to the OS (a region detached before). */
void mtp__region_unmap(mtpi_region_t *r);

#pragma GCC visibility pop

#endif
