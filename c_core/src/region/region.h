/* The region layer: 4 MiB regions of 64 KiB pages, their page descriptors, the chunk map that
 * tells our pointers from others, page runs for slabs, and purging. Everything that changes a
 * region runs under the lock of the pool that owns its set (mtpi_rset_t); this layer knows no
 * pool: what it finds out (a purge became due) it returns. Layer: region (above base). */
#ifndef MTP_REGION_H
#define MTP_REGION_H

#include "base/base.h"

#pragma GCC visibility push(hidden)

/* The chunk map: one byte per 4 MiB of the address space, 1 where a region lives. Relaxed atomic
 * bytes: written under the pool lock at map and unmap; read by every free to reject pointers that
 * are not ours before touching any metadata (a region is unmapped only when none of its blocks is
 * in use, so a valid free never races with the write). */
extern mtpi_atomic_u8 mtp__chunkmap[MTP_CHUNKMAP_SIZE];

MTP_INLINE bool mtp__is_region_ptr(uintptr_t u) {
  uintptr_t idx = u >> MTP_REGION_SHIFT;
  return idx < MTP_CHUNKMAP_SIZE && mtp__u8_load_relaxed(&mtp__chunkmap[idx]) != 0;
}
/* The header of the region that holds u (it lies just below the region's pages). */
MTP_INLINE mtpi_region_t *mtp__region_of(uintptr_t u) {
  return (mtpi_region_t *)((u & ~(MTP_REGION_SIZE - 1)) - MTP_REGION_META_BYTES);
}
/* The header of the region that descriptor d describes a page of (d lies in that header). */
static inline mtpi_region_t *mtp__region_of_desc(const mtpi_desc_t *d) {
  return mtp__region_of((uintptr_t)d + MTP_REGION_META_BYTES);
}
/* The first byte of r's pages. */
static inline char *mtp__region_base(const mtpi_region_t *r) {
  return (char *)r + MTP_REGION_META_BYTES;
}
/* The descriptor of u's page: region base - header + page index * 128, in shifts and masks. */
MTP_INLINE mtpi_desc_t *mtp__page_desc(uintptr_t u) {
  _Static_assert(sizeof(mtpi_desc_t) == 128, "descriptor size is a shift");
  uintptr_t page_off = (u >> (MTP_PAGE_SHIFT - 7)) & ((MTP_PAGES_PER_REGION - 1) << 7);
  char *descs = (char *)(u & ~(MTP_REGION_SIZE - 1)) - MTP_REGION_META_BYTES +
                offsetof(mtpi_region_t, pages);
  return (mtpi_desc_t *)(descs + page_off);
}
/* The descriptor that describes d's run: d itself, or for a TAIL page the run's first page
 * (one load, no branch: types.h). */
MTP_INLINE mtpi_desc_t *mtp__run_head(mtpi_desc_t *d) { return d->head; }
/* The descriptor of the slab (or free run) that holds u: the "slab of this pointer" step. */
MTP_INLINE mtpi_desc_t *mtp__run_of(uintptr_t u) { return mtp__run_head(mtp__page_desc(u)); }
/* First byte of the memory d describes. */
static inline char *mtp__page_start(const mtpi_desc_t *d) {
  mtpi_region_t *r = mtp__region_of_desc(d);
  return mtp__region_base(r) + ((size_t)(d - r->pages) << MTP_PAGE_SHIFT);
}
/* The set (and so the pool) that owns d's region. */
static inline mtpi_rset_t *mtp__page_set(const mtpi_desc_t *d) {
  return mtp__region_of_desc(d)->h.set;
}
static inline mtpi_region_t *mtp__region_from_node(mtpi_node_t *n) {
  return n ? MTP_CONTAINER(n, mtpi_region_t, h.link) : NULL;
}
/* A set's regions in order: those with free pages stay in front, so a search can stop at the
 * first full one. */
static inline mtpi_region_t *mtp__region_first(mtpi_rset_t *rs) {
  return mtp__region_from_node(rs->regions);
}
static inline mtpi_region_t *mtp__region_next(mtpi_region_t *r) {
  return mtp__region_from_node(r->h.link.next);
}

/* Whether a page of d's run (d: its first descriptor) lies in a huge range (huge_mask). */
static inline bool mtp__run_huge(const mtpi_desc_t *d) {
  const mtpi_region_t *r = mtp__region_of_desc(d);
  unsigned at = (unsigned)(d - r->pages), n = d->pages;
  uint64_t bits = (n >= 64 ? ~0ull : ((uint64_t)1 << n) - 1) << at;
  return (r->h.huge_mask[0] & bits) != 0;
}

/* Pages a region hands out: all of them (its header is out of band). */
#define MTP_REGION_FIRST_PAGE 0u
#define MTP_REGION_USABLE_PAGES MTP_PAGES_PER_REGION

/* All under the owning pool's lock. A function that takes `drop` maps a new region, when it needs
 * one, with that lock (the one held; NULL: keep it) released across the OS calls, so that other
 * threads' use of the pool does not wait for them: the caller must find its own state as it left
 * it, and nothing else, after the call. */
/* A run of `pages` pages (1, 2, 4, 8 or 16), aligned to its length: its first descriptor, kind still
 * FREE for the caller to format; TAIL descriptors set. NULL + ENOMEM. hint (NULL: none) is the
 * caller's slot for the region it claimed: pages come from there first, then resident pages
 * anywhere, then never-touched pages of an unclaimed region or a new one, which *hint then
 * claims if grow or while fewer than MTP_REGION_FREE_CLAIMS regions are claimed (never a region
 * with huge ranges, whose huge pages already faulted in count as resident); so threads that
 * grow at once fault pages in different regions. grow: the caller has filled a run of this kind
 * before (a class's second slab or later): only such runs taken from never-touched pages in a
 * row have the run and a window after it faulted in at once (see mtp__region_take_populate),
 * and only if populate: the caller will touch every OS page of such runs (false: blocks larger
 * than an OS page, whose middle pages a program may never touch). */
#define MTP_REGION_FREE_CLAIMS 16
mtpi_desc_t *mtp__region_alloc_slab(mtpi_rset_t *rs, unsigned pages, mtpi_region_t **hint,
                                    bool grow, bool populate, pthread_mutex_t *drop);
/* Give up the claim in *hint (a heap leaves its pool); *hint becomes NULL. */
void mtp__region_unclaim(mtpi_region_t **hint);
/* Take the range to fault in that the last alloc_slab left (NULL, 0 if none); fault it in with
 * mtp__os_populate after unlocking. Pages of it may be handed out meanwhile: populating present
 * pages changes nothing. Returns true if it left free pages resident (a purge will be due). */
bool mtp__region_take_populate(mtpi_rset_t *rs, void **at, size_t *len);
void mtp__region_free_run(mtpi_rset_t *rs, mtpi_desc_t *s, uint64_t now_ms);
/* Runs of any length, for medium blocks (pool/medium.c). A run of `pages` contiguous free pages
 * (1..MTP_REGION_USABLE_PAGES), aligned to one page only: its first descriptor, kind still FREE
 * for the caller to format, `pages` set, TAIL descriptors set. A run of pages that may be
 * resident is taken first (anywhere: no page faults, and freed memory is reused), then any run of
 * free pages, then one of a new region; never claimed by a heap, never faulted in ahead. In a
 * region, the start of the highest stretch of such pages that holds the run: the stretch's other
 * pages stay free after it for realloc to grow into.
 * *dirty: bit i set if page i of the run may be resident (a clear bit: never touched or purged,
 * so it reads as zero). NULL + ENOMEM. */
mtpi_desc_t *mtp__region_alloc_run(mtpi_rset_t *rs, unsigned pages, uint64_t *dirty,
                                   pthread_mutex_t *drop);
/* Grow the run s (a run's first descriptor) to `pages` pages in place, if the pages after it
 * are free; false leaves it unchanged. The new pages are poisoned for tools (the caller
 * unpoisons what it hands out). */
bool mtp__region_grow_run(mtpi_rset_t *rs, mtpi_desc_t *s, unsigned pages);
/* Shrink the run s to `pages` pages (>= 1): the pages after it become free at now_ms. */
void mtp__region_shrink_run(mtpi_rset_t *rs, mtpi_desc_t *s, unsigned pages, uint64_t now_ms);
/* Purge free resident pages freed at least delay_ms ago (all if force; none if delay_ms < 0 and
 * not force); unmap regions left entirely free and clean. Huge pages (the rule: base.h;
 * region/purge.c): a huge range is purged as one, and split when a purge finds it sparse; with
 * collapse, a range dense with runs is looked at (mincore) and made one huge page if its pages
 * are resident (the caller's thread does the copy: the purge thread's, not an allocating one).
 * drop (not NULL): the lock held, released across the OS calls and taken again. Returns the
 * bytes given back (a purge the OS refused is not counted), counted in rs->returned. */
size_t mtp__region_purge(mtpi_rset_t *rs, uint64_t now_ms, long delay_ms, bool force,
                         bool collapse, pthread_mutex_t *drop);
/* Bytes of free pages that may be resident (what purging everything now would return). */
size_t mtp__region_dirty_bytes(mtpi_rset_t *rs);
/* Are free pages left resident (a later purge has work)? */
bool mtp__region_dirty_left(mtpi_rset_t *rs);
/* Are ranges left to look at for huge pages, in a set of MTP_HUGE_LOOK_BYTES or more mapped (the
 * purge thread's work: a smaller program gets no thread for them)? */
#define MTP_HUGE_LOOK_BYTES ((size_t)8 << 20)
bool mtp__region_looks_left(mtpi_rset_t *rs);
/* No range is to be looked at any more until a run is taken in its region (a fork's child). */
void mtp__region_forget_looks(mtpi_rset_t *rs);
void mtp__region_unmap_all(mtpi_rset_t *rs);
/* Whether p lies in one of rs's regions (a walk of them: for rare checks only). */
bool mtp__region_listed(mtpi_rset_t *rs, const mtpi_region_t *r);
/* MTP_DEBUG 2: the bitmaps and counts of every region of rs against the page descriptors. */
void mtp__region_validate(mtpi_rset_t *rs);

#pragma GCC visibility pop

#endif
