/* Purging: the memory of free pages goes back to the OS once they have been free for the pool's
 * delay, and a region left wholly free and clean is unmapped. In three steps, so that no pool
 * lock is held across the OS calls, which can take milliseconds while other threads fault pages
 * in, and which every thread allocating from the pool would wait for:
 *   begin (lock held)  the due pages leave the free pages (busy: FREE, in no run and no search)
 *                      and their calls go into a batch; regions free and clean leave the set;
 *   run (no lock)      the batch's calls: advice, purges, unmaps;
 *   end (lock held)    the busy pages are free again, clean where the OS took them.
 * Layer: region. */
#include "internal.h"

#include "base/os.h"

/* A batch: what a purge takes out of the free pages under the pool lock, for the OS calls made
 * without it. An op purges pages `bits` of region r (runs of
 * consecutive pages, one call each), after advising the huge range `range` ADVISE_SPLIT (small
 * pages for good) or before advising it ADVISE_JOIN (huge again); `done` is what the OS took.
 * unmap: regions taken out of their set, free and clean, to be unmapped. Written by the one
 * thread that runs the purge. */
enum { ADVISE_NONE = 0, ADVISE_SPLIT = 1, ADVISE_JOIN = 2 };
#define BATCH_OPS 32
#define BATCH_UNMAPS 8
typedef struct purge_op {
  mtpi_region_t *r;
  uint64_t bits, dirty, range, done;
  uint8_t advise;
  bool advised; /* the advice was taken (or none was asked) */
} purge_op_t;
typedef struct purge_batch {
  unsigned n, n_unmap;
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
  if (b->n == BATCH_OPS) {
    b->full = true;
    return false;
  }
  MTP_ASSERT((r->h.free_mask[0] & bits) == bits);
  r->h.free_mask[0] &= ~bits;
  r->h.busy_mask[0] |= bits;
  b->op[b->n++] = (purge_op_t){.r = r, .bits = bits, .dirty = r->h.dirty_mask[0] & bits,
                                    .range = range, .advise = advise};
  return true;
}

/* The huge ranges of r (advised for huge pages). A range is purged in one step once every dirty
 * page in it is due, so that a huge page is split once at most, not page by page:
 *  - all its pages free: one call for the whole range (its never-touched pages may be resident
 *    too, faulted in with the huge page), and a range split earlier is advised huge again;
 *  - some in use: advised MADV_NOHUGEPAGE (split for good, so that khugepaged, which here fills
 *    a range with as few as one page present, does not make it resident again), then its free
 *    pages, clean ones included, purged; from then on it is purged page by page, as a region
 *    without huge pages, until it is all free again.
 * A range with a busy page is another purge's. Returns the mask of huge ranges dealt with here
 * (taken, or waiting): the page-by-page pass skips them. */
static uint64_t huge_begin(mtpi_region_t *r, uint64_t now_ms, long delay, bool force,
                           purge_batch_t *b) {
  unsigned hp = r->h.huge_pages;
  uint64_t handled = 0;
  for (unsigned i = 0; hp != 0 && i + hp <= MTP_PAGES_PER_REGION; i += hp) {
    uint64_t bits = mtp__run_mask(i, hp), free = r->h.free_mask[0] & bits;
    bool all_free = free == bits, split = (r->h.huge_split[0] & bits) != 0;
    if (r->h.busy_mask[0] & bits) {
      handled |= bits;
      continue;
    }
    if (split && !all_free) continue; /* small pages now: the page-by-page pass */
    handled |= bits;
    uint64_t dirty = r->h.dirty_mask[0] & bits;
    if (dirty == 0) continue;
    bool due = true;
    for (uint64_t w = dirty; w != 0 && due; w &= w - 1)
      due = page_due(&r->pages[__builtin_ctzll(w)], now_ms, delay, force);
    if (!due) continue;
    if (!op_add(b, r, free, bits, all_free ? (split ? ADVISE_JOIN : ADVISE_NONE)
                                           : ADVISE_SPLIT))
      break;
  }
  return handled;
}

static void purge_begin(mtpi_rset_t *rs, uint64_t now_ms, long delay, bool force,
                             purge_batch_t *b) {
  b->n = b->n_unmap = 0;
  b->full = false;
  mtpi_region_t *next;
  for (mtpi_region_t *r = mtp__region_first(rs); r && !b->full; r = next) {
    next = mtp__region_next(r);
    if (r->h.free_pages == 0) break; /* the rest are full */
    uint64_t w = r->h.dirty_mask[0] & r->h.free_mask[0] & ~huge_begin(r, now_ms, delay, force, b);
    uint64_t due = 0;
    for (; w != 0; w &= w - 1) {
      unsigned i = (unsigned)__builtin_ctzll(w);
      if (page_due(&r->pages[i], now_ms, delay, force)) due |= (uint64_t)1 << i;
    }
    if (due != 0 && !op_add(b, r, due, 0, ADVISE_NONE)) break;
    if (r->h.free_pages == MTP_REGION_USABLE_PAGES && r->h.busy_mask[0] == 0 &&
        r->h.dirty_mask[0] == 0 && r->h.claim == NULL) {
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

static void purge_run(purge_batch_t *b) {
  for (unsigned k = 0; k < b->n; k++) {
    purge_op_t *op = &b->op[k];
    unsigned lo = op->range != 0 ? (unsigned)__builtin_ctzll(op->range) : 0;
    char *range = mtp__region_base(op->r) + ((size_t)lo << MTP_PAGE_SHIFT);
    size_t range_len = (size_t)__builtin_popcountll(op->range) << MTP_PAGE_SHIFT;
    op->done = 0;
    op->advised = true;
    /* Refused (a kernel out of memory for the split): nothing purged, tried again later. */
    if (op->advise == ADVISE_SPLIT && mtp__os_huge_advise(range, range_len, false) != 0) {
      op->advised = false;
      continue;
    }
    purge_runs(op);
    if (op->advise == ADVISE_JOIN)
      op->advised = op->done == op->bits && mtp__os_huge_advise(range, range_len, true) == 0;
  }
  for (unsigned k = 0; k < b->n_unmap; k++) mtp__region_unmap(b->unmap[k]);
}

static size_t purge_end(mtpi_rset_t *rs, purge_batch_t *b) {
  size_t returned = (size_t)b->n_unmap * MTP_REGION_META_BYTES; /* their headers go too */
  for (unsigned k = 0; k < b->n; k++) {
    purge_op_t *op = &b->op[k];
    mtpi_region_t *r = op->r;
    MTP_ASSERT((r->h.busy_mask[0] & op->bits) == op->bits);
    r->h.busy_mask[0] &= ~op->bits;
    r->h.free_mask[0] |= op->bits;
    /* the pages that were dirty count: clean ones were counted already */
    size_t len = (size_t)__builtin_popcountll(op->dirty & op->done) << MTP_PAGE_SHIFT;
    r->h.dirty_mask[0] &= ~op->done;
    rs->clean_bytes += len;
    returned += len;
    if (op->advise == ADVISE_SPLIT && op->advised) r->h.huge_split[0] |= op->range;
    if (op->advise == ADVISE_JOIN && op->advised) r->h.huge_split[0] &= ~op->range;
  }
  b->n = b->n_unmap = 0;
  mtp__u64_add_relaxed(&rs->returned, returned); /* before the lock is dropped: see types.h */
  return returned;
}

size_t mtp__region_purge(mtpi_rset_t *rs, uint64_t now_ms, long delay, bool force,
                         pthread_mutex_t *drop) {
  purge_batch_t b = {.full = false};
  size_t returned = 0;
  for (unsigned round = 0;; round++) {
    /* after the batches, one more for the regions they left free and clean */
    bool tidy = round > 0 && !b.full;
    purge_begin(rs, now_ms, tidy ? -1 : delay, force && !tidy, &b);
    if (b.n == 0 && b.n_unmap == 0) break;
    if (drop) pthread_mutex_unlock(drop);
    purge_run(&b);
    if (drop) pthread_mutex_lock(drop);
    size_t got = purge_end(rs, &b);
    returned += got;
    if (tidy || (b.full && got == 0)) break; /* done, or the OS refuses: a later pass's */
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
