/* What the region layer's files share: region.c (regions, runs) and purge.c (purging free pages,
 * unmapping free regions), each after region.h, the layer's face. Not for other layers.
 * Layer: region. */
#ifndef MTP_REGION_INTERNAL_H
#define MTP_REGION_INTERNAL_H

#include "base/os.h"

#pragma GCC visibility push(hidden)

/* A run lies in one bitmap word: a region's 64 pages are one word. */
_Static_assert(MTP_PAGES_PER_REGION == 64, "runs are searched within one bitmap word");

/* Bits lo .. lo + n - 1 of a bitmap word (n >= 1, lo + n <= 64): a run of n pages. */
static inline uint64_t mtp__run_mask(unsigned lo, unsigned n) {
  return (n == 64 ? ~0ull : ((uint64_t)1 << n) - 1) << lo;
}

/* The pages of an aligned huge range (2 MiB over 64 KiB pages: 32), or 0 where the region layer
 * handles no huge pages: a huge page that is not whole mtpool pages, or that no aligned range of a
 * region holds (e.g. 32 MiB or 512 MiB on 16 or 64 KiB aarch64 kernels), or a checked set (its
 * free pages are guarded). */
static inline unsigned mtp__huge_range_pages(const mtpi_rset_t *rs) {
  size_t hsize = mtp__os_huge_page_size();
  if (rs->guard_free || hsize < MTP_PAGE_SIZE || hsize > MTP_REGION_SIZE / 2 ||
      (hsize & (hsize - 1)) != 0)
    return 0;
  return (unsigned)(hsize / MTP_PAGE_SIZE);
}

/* How often a range dense with runs is looked at (mincore) for residency by the purge (purge.c):
 * first at once, then after DENSE_FIRST_MS, doubling up to DENSE_LAST_MS, then no more until a
 * run is taken in its region again (region.c: mtp__region_dense_news). */
#define DENSE_FIRST_MS 100u
#define DENSE_LAST_MS 6400u

/* Under the lock: pages at .. at + pages - 1 of r were taken for a run; a huge range they leave
 * dense with runs, not huge yet, is to be looked at by a purge (rs->dense_news). */
void mtp__region_dense_news(mtpi_rset_t *rs, mtpi_region_t *r, unsigned at, unsigned pages);

/* Under the lock: r leaves rs (its list, the chunk map, the counts); unmapped later, without the
 * lock, by mtp__region_unmap. */
void mtp__region_detach(mtpi_rset_t *rs, mtpi_region_t *r);
/* r's mapping back to the OS (a region detached before). */
void mtp__region_unmap(mtpi_region_t *r);

#pragma GCC visibility pop

#endif
