/* Medium blocks: a request in (MTP_MAX_SMALL, MTP_MEDIUM_MAX] of a pool that is not checked gets a
 * run of ceil(size / 64 KiB) pages of the pool's regions (mtp__region_alloc_run), its first page
 * descriptor of kind MEDIUM, the others TAIL (types.h). Layer: pool.
 *
 * Compared with a large block (large.c): no mapping of its own, no hash, no process-wide lock. A
 * free finds the block from the address as a small free finds its slab (chunk map, descriptor by
 * masking, its head); its owner word is 0, so the free fast path misses and the heap's free slow
 * path dispatches on the kind. A freed medium block waits in the freeing thread's cache (heap
 * layer; the thread's next block of its size is another one) if that thread allocates from the
 * pool too, else its pages go back to the region as free
 * pages under the pool lock, like a released slab's: any slab or medium block reuses them, and
 * they are purged a tenth of the pool's delay after (base.h).
 *
 * Rules:
 *   - a MEDIUM descriptor's kind and pages, and the pages of the run, change only under the pool
 *     lock (format, resize, release to the region). Between its free and its next hand-out a
 *     cached block belongs to the caching thread, which alone writes its requested size, list and
 *     link; the cache's lock orders it against trim and the purge.
 *   - which free of a block is the first is one CAS of its `freed` from 0 to MTP_MEDIUM_FREED
 *     (mtp__medium_claim): a second free finds MTP_MEDIUM_FREED (the block is cached, or its pages
 *     are free and still carry it) and is a double free, even when two threads free at once. A
 *     free of pages already FREE is one too; an address that is not a live block's first byte is
 *     an invalid pointer. Once the pages are reused (by a slab or another medium block) a second
 *     free is what the new owner of the address makes of it, as for small blocks.
 *   - the usable size is the run's whole pages; a sized free accepts what a large block's does:
 *     any size up to the usable size that is at least the requested size or above MTP_MAX_SMALL.
 *   - calloc: a page taken clean (never touched, or purged) reads as zero and is not written; only
 *     the pages that may be resident are cleared (so untouched pages are not faulted in).
 *   - realloc grows a block in place when the pages after it are free, and shrinks it in place
 *     (its tail pages become free); else the caller moves the block.
 *   - a freed block's first bytes hold the freed pattern (base/fill.h), and its first descriptor
 *     (FREE now) keeps FREED_MARK in `requested`, until a format overwrites it. A block taken again
 *     from that page while it is still dirty, or from a cache, verifies the pattern: a write after
 *     free into its start is reported then (MTP_ERR_USE_AFTER_FREE), as for large blocks.
 *   - checked pools keep the large path (its canary and quarantine), so medium blocks are never
 *     checked.
 * For tools, a block's pages are unpoisoned (ASan) and marked defined (memcheck) when handed out,
 * poisoned by the region layer when freed, as large blocks' ranges are. */
#include <errno.h>
#include <string.h>

#include "base/fill.h"
#include "base/os.h"
#include "base/track.h"
#include "pool.h"

#define FREED_MARK MTP_MEDIUM_FREED_SIZE /* a freed block's `requested`, kept in its FREE descriptor */

static unsigned pages_for(size_t size) {
  size_t n = (size + MTP_PAGE_SIZE - 1) >> MTP_PAGE_SHIFT;
  return n ? (unsigned)n : 1;
}

/* Pool lock held: s, just taken from the region layer, becomes a medium block of `size` bytes. */
static void medium_format(mtpi_desc_t *s, size_t size) {
  mtp__pool_format_run(s, MTP_PAGE_MEDIUM);
  s->requested = (uint32_t)size;
  s->capacity = 1;
}

/* The tools see the run's pages handed out again; the freed pattern is verified. */
static void hand_out(char *b, size_t len, bool verify) {
  mtp__track_handout(b, len);
  if (verify && !mtp__fill_intact(b)) /* the caller gets the block all the same */
    mtp__error(MTP_ERR_USE_AFTER_FREE, "use after free (a freed medium block was written to)", b);
}

void *mtp__medium_reuse(mtpi_desc_t *s, size_t size, bool zero) {
  char *b = mtp__page_start(s);
  hand_out(b, mtp__medium_usable(s), true);
  s->requested = (uint32_t)size;
  /* relaxed: the next free of the block, from any thread, is ordered after this hand-out by the
   * program's own hand-over of the pointer */
  mtp__store_relaxed(&s->freed, 0);
  if (zero) memset(b, 0, size); /* cached pages are resident and dirty */
  return b;
}

void *mtp__medium_alloc(mtpi_pool_t *pool, size_t size, bool zero) {
  MTP_ASSERT(size <= MTP_MEDIUM_MAX && !pool->check);
  unsigned pages = pages_for(size);
  uint64_t dirty = 0;
  mtp__pool_lock(pool);
  MTP_VALIDATE(mtp__region_validate(&pool->rs));
  mtpi_desc_t *s = mtp__region_alloc_run(&pool->rs, pages, &dirty, &pool->lock);
  bool verify = false;
  if (s != NULL) {
    verify = s->requested == FREED_MARK && (dirty & 1);
    medium_format(s, size);
    pool->medium_allocs++;
  }
  mtp__pool_unlock_quiet(pool); /* a hand-out frees no page */
  if (s == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  char *b = mtp__page_start(s);
  hand_out(b, (size_t)pages << MTP_PAGE_SHIFT, verify);
  /* The block is ours alone now: clear, outside the lock, only the pages that may hold old bytes
   * and only up to the requested size. */
  for (; zero && dirty != 0; dirty &= dirty - 1) {
    size_t at = (size_t)__builtin_ctzll(dirty) << MTP_PAGE_SHIFT;
    if (at < size) memset(b + at, 0, size - at < MTP_PAGE_SIZE ? size - at : MTP_PAGE_SIZE);
  }
  return b;
}

/* MTP_MEDIUM_FREED in `freed` marks the block freed until its pages are formatted again. */
int mtp__medium_claim(mtpi_desc_t *s, void *p, size_t size, bool sized, const char **what) {
  uintptr_t expect = 0;
  if ((char *)p != mtp__page_start(s)) {
    *what = "invalid pointer (not the start of a medium block)";
    return MTP_ERR_INVALID_POINTER;
  }
  if (mtp__load_relaxed(&s->freed) == 0 && sized &&
      !(size <= mtp__medium_usable(s) && (size >= s->requested || size > MTP_MAX_SMALL))) {
    *what = "wrong size (sized free of a medium block)";
    return MTP_ERR_WRONG_SIZE;
  }
  /* acq_rel: orders this free after a free from the cache's hand-out in another thread */
  if (!mtp__cas_strong_acq_rel(&s->freed, &expect, MTP_MEDIUM_FREED)) {
    *what = "double free (the medium block is freed already)";
    return MTP_ERR_DOUBLE_FREE;
  }
  return 0;
}

void mtp__medium_mark_freed(mtpi_desc_t *s, void *p) {
  mtp__fill_freed(p);
  s->requested = FREED_MARK;
  mtp__track_poison(p, mtp__medium_usable(s));
}

bool mtp__medium_free(void *p, size_t size, bool sized) {
  mtpi_desc_t *s = mtp__run_of((uintptr_t)p);
  mtpi_pool_t *pool = mtp__pool_of_page(s);
  const char *what = NULL;
  int err;
  mtp__pool_lock(pool);
  /* The caller saw a MEDIUM descriptor without the lock; only under it is the kind stable. */
  if (s->kind == MTP_PAGE_FREE) {
    err = MTP_ERR_DOUBLE_FREE;
    what = "double free (the medium block's pages are already free)";
  } else if (s->kind != MTP_PAGE_MEDIUM) {
    err = MTP_ERR_INVALID_POINTER;
    what = "invalid pointer (not the start of a medium block)";
  } else {
    err = mtp__medium_claim(s, p, size, sized, &what);
  }
  if (!err) {
    MTP_VALIDATE(mtp__region_validate(&pool->rs));
    /* kept by the region layer in the FREE descriptor (set first: a pool that purges at once may
     * unmap the region in the release) */
    mtp__medium_mark_freed(s, p);
    mtp__pool_release_locked(pool, s, mtp__run_freed_at(pool->purge_delay_ms, mtp__os_now_ms()));
  }
  bool due = mtp__pool_unlock(pool);
  if (err) mtp__error(err, what, p);
  return due;
}

bool mtp__medium_resize(void *p, size_t size, bool *due) {
  MTP_ASSERT(size > MTP_MAX_SMALL && size <= MTP_MEDIUM_MAX);
  mtpi_desc_t *s = mtp__run_of((uintptr_t)p);
  mtpi_pool_t *pool = mtp__pool_of_page(s);
  unsigned want = pages_for(size), old;
  bool ok = true;
  mtp__pool_lock(pool);
  MTP_ASSERT(s->kind == MTP_PAGE_MEDIUM && (char *)p == mtp__page_start(s));
  old = s->pages;
  if (want < old) {
    uint64_t freed_at = mtp__run_freed_at(pool->purge_delay_ms, mtp__os_now_ms());
    mtp__region_shrink_run(&pool->rs, s, want, freed_at);
    /* the freed tail as mtp__pool_release_locked treats freed pages */
    if (pool->purge_delay_ms == 0)
      (void)mtp__region_purge(&pool->rs, mtp__os_now_ms(), 0, false, false, NULL);
    else
      mtp__pool_note_free_pages(pool);
  } else if (want > old) {
    ok = mtp__region_grow_run(&pool->rs, s, want);
  }
  if (ok) {
    s->requested = (uint32_t)size;
    s->end = mtp__page_start(s) + ((size_t)s->pages << MTP_PAGE_SHIFT);
  }
  *due = mtp__pool_unlock(pool);
  if (ok && want > old) {
    char *from = (char *)p + ((size_t)old << MTP_PAGE_SHIFT);
    size_t len = (size_t)(want - old) << MTP_PAGE_SHIFT;
    mtp__track_handout(from, len);
  }
  return ok;
}
