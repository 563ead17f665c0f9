/* Purging: the memory of free pages goes back to the OS once they have been free for the pool's
 * delay, and a region left wholly free and clean is unmapped. In three steps, so that no pool
 * lock is held across the OS calls, which can take milliseconds while other threads fault pages
 * in, and which every thread allocating from the pool would wait for:
 *   begin (lock held)  the due pages leave the free pages (busy: FREE, in no run and no search)
 *                      and their calls go into a batch; regions free and clean leave the set;
 *   run (no lock)      the batch's calls: advice, purges, unmaps;
 *   end (lock held)    the busy pages are free again, clean where the OS took them.
 * Layer: region. */
#include "region.h"
#include "internal.h"

#include "base/os.h"

/* A batch: what a purge takes out of the free pages under the pool lock, for the OS calls made
 * without it. An op purges pages `bits` of region r (runs of consecutive pages, one call each),
 * after advising the huge range `range` ADVISE_SPLIT (small pages) or before advising it
 * ADVISE_JOIN (huge again); ADVISE_COLLAPSE looks whether `range` is dense and makes it one huge
 * page if it is. done: the pages the OS took; advised: the advice was taken (or none was asked).
 * Every op pins its region. unmap: regions taken out of their set, free and clean, to be
 * unmapped. Written by the one thread that runs the purge. */
enum { ADVISE_NONE = 0, ADVISE_SPLIT = 1, ADVISE_JOIN = 2, ADVISE_COLLAPSE = 3 };
#define BATCH_OPS 32
#define BATCH_UNMAPS 8
#define BATCH_COLLAPSES 8 /* a collapse copies up to a huge page: a few a batch */
typedef struct purge_op {
  mtpi_region_t *r;
  uint64_t bits, dirty, range, done;
  uint8_t advise;
  bool advised;
  bool sparse; /* a split of a range in use: its pool's memory counts as sparse */
} purge_op_t;
typedef struct purge_batch {
  unsigned n, n_unmap, n_collapse;
  bool full; /* more was due than the batch holds: another batch follows */
  purge_op_t op[BATCH_OPS];
  mtpi_region_t *unmap[BATCH_UNMAPS];
} purge_batch_t;

/* A free dirty page is due for the purge: freed at least delay ms ago (never if delay < 0), or
 * any with force. */
static bool page_due(const mtpi_desc_t *d, uint64_t now_ms, long delay, bool force) {
  return force || (delay >= 0 && d->free_time_ms + (uint64_t)delay <= now_ms);
}

/* Pages `bits` of r (free) go out with a new op of b; false (nothing taken) when b is full. */
static bool op_add(purge_batch_t *b, mtpi_region_t *r, uint64_t bits, uint64_t range,
                   uint8_t advise) {
  if (b->n == BATCH_OPS || (advise == ADVISE_COLLAPSE && b->n_collapse == BATCH_COLLAPSES)) {
    b->full = true;
    return false;
  }
  MTP_ASSERT((r->h.free_mask[0] & bits) == bits);
  r->h.free_mask[0] &= ~bits;
  r->h.busy_mask[0] |= bits;
  r->h.pinned++;
  b->n_collapse += advise == ADVISE_COLLAPSE;
  b->op[b->n++] = (purge_op_t){.r = r, .bits = bits, .dirty = r->h.dirty_mask[0] & bits,
                               .range = range, .advise = advise};
  return true;
}

/* Whether every dirty page of `bits` is due (true if none is dirty). */
static bool all_due(const mtpi_region_t *r, uint64_t bits, uint64_t now_ms, long delay, bool force) {
  for (uint64_t w = r->h.dirty_mask[0] & bits; w != 0; w &= w - 1)
    if (!page_due(&r->pages[__builtin_ctzll(w)], now_ms, delay, force)) return false;
  return true;
}

/* The huge ranges of r (the rule: base.h). A huge range (huge_mask) is purged as one, so that its
 * huge page is split once at most, not page by page:
 *  - all its pages free and its dirty ones due: one call for the whole range (its never-touched
 *    pages may be resident too, faulted in with the huge page); it stays advised huge while its
 *    pool grows densely (fresh memory's advice), else goes back to small pages;
 *  - some in use: kept whole while fewer than 1/8 of its pages are free (a huge page is worth that
 *    much left over; not on a forced purge, a trim); past that, once its free pages are due, split (MADV_NOHUGEPAGE, so that
 *    khugepaged, which fills a range with as few as one page present, does not make it resident
 *    again) and its free pages, clean ones included, purged: sparse, as is its pool's growth.
 * A range that is not huge is purged page by page (the caller), and (collapse) looked at when its
 * pages in runs reach 7/8: ADVISE_COLLAPSE; an all-free one is advised huge when fresh memory is.
 * A range with a busy page is another purge's. Returns the mask of ranges dealt with here
 * (taken, or waiting): the page-by-page pass skips them. */
static uint64_t huge_begin(mtpi_rset_t *rs, mtpi_region_t *r, uint64_t now_ms, long delay,
                           bool force, bool collapse, purge_batch_t *b) {
  unsigned hp = mtp__huge_range_pages(rs);
  uint64_t handled = 0;
  bool grow = mtp__huge_fresh_advice(rs->huge_grow) == 1, looked = false;
  for (unsigned i = 0; hp != 0 && i + hp <= MTP_PAGES_PER_REGION && !b->full; i += hp) {
    uint64_t bits = mtp__run_mask(i, hp), free = r->h.free_mask[0] & bits;
    bool all_free = free == bits;
    if (r->h.busy_mask[0] & bits) {
      handled |= bits;
      continue;
    }
    if ((r->h.huge_mask[0] & bits) != bits) { /* small pages */
      unsigned in_runs = hp - (unsigned)__builtin_popcountll(free);
      if (all_free && grow && (r->h.dirty_mask[0] & bits) == 0 &&
          r->h.free_pages != MTP_REGION_USABLE_PAGES) { /* fresh: huge at the fault (a region all
                                                           * free is unmapped instead) */
        handled |= bits;
        (void)op_add(b, r, 0, bits, ADVISE_JOIN);
      } else if (collapse && r->h.dense_backoff_ms != 0 && r->h.dense_check_ms <= now_ms &&
                 in_runs * MTP_HUGE_DENSE_DEN >= hp * MTP_HUGE_DENSE_NUM) {
        looked = op_add(b, r, 0, bits, ADVISE_COLLAPSE) || looked;
      }
      continue;
    }
    handled |= bits;
    if ((r->h.dirty_mask[0] & bits) == 0 && !all_free) continue;
    if (!all_due(r, bits, now_ms, delay, force)) continue;
    if (all_free) { /* no advice where the whole region is free: it is unmapped next */
      bool whole = r->h.free_pages == MTP_REGION_USABLE_PAGES;
      if ((r->h.dirty_mask[0] & bits) != 0)
        (void)op_add(b, r, bits, bits, grow || whole ? ADVISE_NONE : ADVISE_SPLIT);
      else if (!grow && !whole)
        (void)op_add(b, r, 0, bits, ADVISE_SPLIT);
    } else {
      bool sparse = (unsigned)__builtin_popcountll(free) * MTP_HUGE_DENSE_DEN >=
                    hp * (MTP_HUGE_DENSE_DEN - MTP_HUGE_DENSE_NUM);
      if ((sparse || force) && op_add(b, r, free, bits, ADVISE_SPLIT)) /* force: a trim, all back */
        b->op[b->n - 1].sparse = sparse;
    }
  }
  /* the looks at a region's dense ranges back off together */
  if (looked) {
    r->h.dense_check_ms = now_ms + r->h.dense_backoff_ms;
    r->h.dense_backoff_ms = r->h.dense_backoff_ms >= DENSE_LAST_MS ? 0 : r->h.dense_backoff_ms * 2;
  }
  return handled;
}

static void purge_begin(mtpi_rset_t *rs, uint64_t now_ms, long delay, bool force, bool collapse,
                        purge_batch_t *b) {
  b->n = b->n_unmap = b->n_collapse = 0;
  b->full = false;
  mtpi_region_t *next;
  for (mtpi_region_t *r = mtp__region_first(rs); r && !b->full; r = next) {
    next = mtp__region_next(r);
    uint64_t handled = huge_begin(rs, r, now_ms, delay, force, collapse, b);
    if (b->full) break;
    uint64_t w = r->h.dirty_mask[0] & r->h.free_mask[0] & ~handled, due = 0;
    for (; w != 0; w &= w - 1) {
      unsigned i = (unsigned)__builtin_ctzll(w);
      if (page_due(&r->pages[i], now_ms, delay, force)) due |= (uint64_t)1 << i;
    }
    if (due != 0 && !op_add(b, r, due, 0, ADVISE_NONE)) break;
    if (r->h.free_pages == MTP_REGION_USABLE_PAGES && r->h.busy_mask[0] == 0 &&
        r->h.dirty_mask[0] == 0 && r->h.claim == NULL && r->h.pinned == 0) {
      if (b->n_unmap == BATCH_UNMAPS) {
        b->full = true;
        break;
      }
      rs->clean_bytes -= MTP_REGION_USABLE_PAGES * MTP_PAGE_SIZE;
      mtp__region_detach(rs, r);
      b->unmap[b->n_unmap++] = r;
    }
  }
}

/* The runs of consecutive pages of op's bits, one call each; done: the pages the OS took. */
static void purge_runs(purge_op_t *op) {
  for (uint64_t which = op->bits; which != 0;) {
    unsigned lo = (unsigned)__builtin_ctzll(which), hi = lo;
    while (hi < 64 && (which >> hi & 1)) hi++;
    uint64_t bits = mtp__run_mask(lo, hi - lo);
    which &= ~bits;
    char *at = mtp__region_base(op->r) + ((size_t)lo << MTP_PAGE_SHIFT);
    if (mtp__os_purge(at, (size_t)(hi - lo) << MTP_PAGE_SHIFT) == 0) op->done |= bits;
  }
}

/* Whether [at, at + len) is dense: MTP_HUGE_DENSE_NUM/DEN of its OS pages resident. */
static bool resident_dense(char *at, size_t len) {
  unsigned char vec[MTP_REGION_SIZE / 2 / 4096];
  size_t os = mtp__os_page_size(), n = len / os, got = 0;
  if (n > sizeof vec || mtp__os_resident_map(at, len, vec) != 0) return false;
  for (size_t i = 0; i < n; i++) got += vec[i];
  return got * MTP_HUGE_DENSE_DEN >= n * MTP_HUGE_DENSE_NUM;
}

static void purge_run(purge_batch_t *b) {
  for (unsigned k = 0; k < b->n; k++) {
    purge_op_t *op = &b->op[k];
    unsigned lo = op->range != 0 ? (unsigned)__builtin_ctzll(op->range) : 0;
    char *range = mtp__region_base(op->r) + ((size_t)lo << MTP_PAGE_SHIFT);
    size_t range_len = (size_t)__builtin_popcountll(op->range) << MTP_PAGE_SHIFT;
    op->done = 0;
    op->advised = true;
    switch (op->advise) {
    case ADVISE_COLLAPSE: /* advised huge first only where the collapse is refused for advice */
      op->advised = resident_dense(range, range_len) &&
                    (mtp__os_huge_collapse(range, range_len) == 0 ||
                     (mtp__os_huge_advise(range, range_len, true) == 0 &&
                      mtp__os_huge_collapse(range, range_len) == 0));
      break;
    case ADVISE_SPLIT: /* refused (a kernel out of memory for the split): tried again later */
      op->advised = mtp__os_huge_advise(range, range_len, false) == 0;
      if (op->advised) purge_runs(op);
      break;
    case ADVISE_JOIN:
      purge_runs(op);
      op->advised = op->done == op->bits && mtp__os_huge_advise(range, range_len, true) == 0;
      break;
    default:
      purge_runs(op);
    }
  }
  for (unsigned k = 0; k < b->n_unmap; k++) mtp__region_unmap(b->unmap[k]);
}

static size_t purge_end(mtpi_rset_t *rs, purge_batch_t *b, uint64_t now_ms) {
  size_t returned = (size_t)b->n_unmap * MTP_REGION_META_BYTES; /* their headers go too */
  for (unsigned k = 0; k < b->n; k++) {
    purge_op_t *op = &b->op[k];
    mtpi_region_t *r = op->r;
    MTP_ASSERT((r->h.busy_mask[0] & op->bits) == op->bits && r->h.pinned > 0);
    r->h.pinned--;
    r->h.busy_mask[0] &= ~op->bits;
    r->h.free_mask[0] |= op->bits;
    /* the pages that were dirty count: clean ones were counted already */
    size_t len = (size_t)__builtin_popcountll(op->dirty & op->done) << MTP_PAGE_SHIFT;
    r->h.dirty_mask[0] &= ~op->done;
    rs->clean_bytes += len;
    returned += len;
    if (!op->advised) continue;
    if (op->advise == ADVISE_SPLIT) {
      r->h.huge_mask[0] &= ~op->range;
      if (op->sparse) rs->huge_grow = false; /* a range in use found sparse */
    } else if (op->advise == ADVISE_JOIN) {
      r->h.huge_mask[0] |= op->range;
    } else if (op->advise == ADVISE_COLLAPSE) {
      r->h.huge_mask[0] |= op->range;
      rs->huge_grow = true;
      /* its free pages are in the huge page now: resident */
      for (uint64_t w = r->h.free_mask[0] & op->range & ~r->h.dirty_mask[0]; w; w &= w - 1) {
        r->pages[__builtin_ctzll(w)].free_time_ms = now_ms;
        rs->clean_bytes -= MTP_PAGE_SIZE;
      }
      r->h.dirty_mask[0] |= r->h.free_mask[0] & op->range;
    }
  }
  b->n = b->n_unmap = b->n_collapse = 0;
  mtp__u64_add_relaxed(&rs->returned, returned); /* before the lock is dropped: see types.h */
  return returned;
}

size_t mtp__region_purge(mtpi_rset_t *rs, uint64_t now_ms, long delay, bool force, bool collapse,
                         pthread_mutex_t *drop) {
  purge_batch_t b = {.full = false};
  size_t returned = 0;
  for (unsigned round = 0;; round++) {
    /* after the batches, one more for the regions they left free and clean */
    bool tidy = round > 0 && !b.full;
    purge_begin(rs, now_ms, tidy ? -1 : delay, force && !tidy, collapse && !tidy, &b);
    if (b.n == 0 && b.n_unmap == 0) break;
    if (drop) pthread_mutex_unlock(drop);
    purge_run(&b);
    if (drop) pthread_mutex_lock(drop);
    size_t got = purge_end(rs, &b, now_ms);
    returned += got;
    (void)got;
    if (tidy || round == 64) break; /* done, or the OS keeps refusing: a later pass's */
  }
  return returned;
}

size_t mtp__region_dirty_bytes(mtpi_rset_t *rs) {
  size_t pages = 0;
  for (mtpi_region_t *r = mtp__region_first(rs); r && r->h.free_pages; r = mtp__region_next(r))
    pages += (size_t)__builtin_popcountll(r->h.dirty_mask[0]);
  return pages << MTP_PAGE_SHIFT;
}

bool mtp__region_dirty_left(mtpi_rset_t *rs) {
  for (mtpi_region_t *r = mtp__region_first(rs); r && r->h.free_pages; r = mtp__region_next(r))
    if (r->h.dirty_mask[0]) return true;
  return false;
}

void mtp__region_forget_looks(mtpi_rset_t *rs) {
  for (mtpi_region_t *r = mtp__region_first(rs); r; r = mtp__region_next(r)) r->h.dense_backoff_ms = 0;
  rs->dense_news = false;
}

bool mtp__region_looks_left(mtpi_rset_t *rs) {
  if (rs->mapped_bytes < MTP_HUGE_LOOK_BYTES) return false;
  for (mtpi_region_t *r = mtp__region_first(rs); r; r = mtp__region_next(r))
    if (r->h.dense_backoff_ms != 0) return true;
  return false;
}
