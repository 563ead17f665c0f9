/* Packed spans as wholes (their blocks: packed.c): their bins, their release, their check, and
 * purging them. The OS pages that lie wholly in free units go back to the OS once due, and an
 * empty span goes back to its region. As for regions (region/purge.c), in three steps so that the
 * pool lock is not held across the OS calls: begin (lock held) finds each due span's
 * ranges and takes the span out of the bins (MTP_SPAN_PURGING: nothing is cut from it, it is not
 * released; frees into it go on), run (no lock) makes the calls, end (lock held) marks what the OS
 * took clean and puts each span back in its bin. Layer: pool. */
#include "base/os.h"
#include "span.h"

/* ---- bins ---- */

void mtp__span_unbin(mtpi_pool_t *pool, mtpi_desc_t *s) {
  MTP_ASSERT(s->bin >= 1 && s->bin <= MTP_SPAN_BINS);
  unsigned b = s->bin - 1u;
  mtp__list_remove(&pool->span_bins[b], &s->link);
  if (pool->span_bins[b] == NULL) pool->span_binned &= ~(1ull << b);
  s->bin = MTP_LIST_NONE;
}

/* Pool lock held: s's bound on its longest free run set to longest, and s moved to its bin. */
void mtp__span_rebin(mtpi_pool_t *pool, mtpi_desc_t *s, unsigned longest) {
  s->longest_bound = longest;
  unsigned b = mtp__span_bin_of(longest);
  if (s->bin == b + 1 || s->bin == MTP_SPAN_PURGING) return;
  if (s->bin != 0) mtp__span_unbin(pool, s);
  mtp__list_push(&pool->span_bins[b], &s->link);
  pool->span_binned |= 1ull << b;
  s->bin = (uint8_t)(b + 1);
}

/* Pool lock held: the empty span s goes back to its region. */
void mtp__span_release(mtpi_pool_t *pool, mtpi_desc_t *s) {
  MTP_ASSERT(s->units_used == 0);
  mtp__span_unbin(pool, s);
  mtp__region_free_run(&pool->rs, s, s->free_time_ms);
  if (pool->purge_delay_ms == 0) /* as mtp__pool_release_locked treats freed pages */
    (void)mtp__region_purge(&pool->rs, mtp__os_now_ms(), 0, false, false, NULL);
  else
    mtp__pool_note_free_pages(pool);
}

/* ---- purging ---- */

/* A batch: ranges of units [from, from + len) of span s to purge, ok once the OS took them. */
#define BATCH_RANGES 64
typedef struct pk_range {
  mtpi_desc_t *s;
  uint16_t from, len;
  bool ok;
} pk_range_t;
typedef struct pk_batch {
  unsigned n;
  bool full; /* a due span did not fit: another batch follows */
  pk_range_t r[BATCH_RANGES];
} pk_batch_t;

/* The OS pages of s that lie wholly in free units and may be resident go into b: those whose
 * dirty units were all free at the span's last pass (aged: free since then, so the freshly freed
 * units a busy span reuses stay), or every free one if all (no release since the cutoff, or a
 * trim). The free units still dirty are the next pass's; returns whether some OS page lies among
 * them (or false with nothing taken if b has no room for s's ranges: b->full). Not in a huge
 * range: one huge page backs the span's pages in use too, and the region purges a huge range as
 * one (region.h). */
static bool span_begin(mtpi_pool_t *pool, mtpi_desc_t *s, bool all, pk_batch_t *b) {
  mtpi_span_t *m = mtp__span_map(s);
  size_t os = mtp__os_page_size();
  if (os < MTP_UNIT_SIZE || os > MTP_PAGE_SIZE || mtp__run_huge(s)) return false;
  unsigned per = (unsigned)(os >> MTP_UNIT_SHIFT), first = b->n; /* per: units an OS page */
  uint64_t ok[MTP_SPAN_WORDS];                                    /* 1: a unit that may go */
  for (unsigned w = 0; w < MTP_SPAN_WORDS; w++)
    ok[w] = all ? m->free[w] : m->free[w] & (m->aged[w] | ~m->dirty[w]);
  unsigned from = 0;
  bool open = false, dirty = false, rest = false; /* pages [from, u) wholly ok; dirty: some unit */
  for (unsigned u = (FIRST + per - 1) / per * per; u <= MTP_SPAN_UNITS; u += per) {
    if (u < MTP_SPAN_UNITS && mtp__bit_all(ok, u, per)) {
      if (!open) from = u, open = true, dirty = false;
      dirty = dirty || mtp__bit_any(m->dirty, u, per);
      continue;
    }
    if (u < MTP_SPAN_UNITS && mtp__bit_all(m->free, u, per))
      rest = true; /* wholly free, and dirty units not aged: the next pass's */
    if (open && dirty) {
      if (b->n == BATCH_RANGES && first > 0) { /* s whole in a later batch */
        b->n = first;
        b->full = true;
        return false;
      }
      if (b->n == BATCH_RANGES) /* s alone has more: they stay aged, the next pass's */
        rest = true;
      else
        b->r[b->n++] = (pk_range_t){.s = s, .from = (uint16_t)from, .len = (uint16_t)(u - from)};
    }
    open = false;
  }
  for (unsigned w = 0; w < MTP_SPAN_WORDS; w++) m->aged[w] = m->free[w] & m->dirty[w];
  if (b->n > first) { /* out of the bins until the batch ends */
    mtp__span_unbin(pool, s);
    s->bin = MTP_SPAN_PURGING;
  }
  return rest;
}

static void batch_run(pk_batch_t *b) {
  for (unsigned k = 0; k < b->n; k++) {
    pk_range_t *r = &b->r[k];
    char *at = (char *)mtp__span_map(r->s) + ((size_t)r->from << MTP_UNIT_SHIFT);
    r->ok = mtp__os_purge(at, (size_t)r->len << MTP_UNIT_SHIFT) == 0;
  }
}

/* The ranges the OS took are clean; a span with a refused range has units due again at now; each
 * span goes back to its bin, with its exact longest run. Returns the bytes given back. */
static size_t batch_end(mtpi_pool_t *pool, pk_batch_t *b, uint64_t now, bool *left) {
  size_t n = 0;
  for (unsigned k = 0; k < b->n; k++) {
    pk_range_t *r = &b->r[k];
    mtpi_span_t *m = mtp__span_map(r->s);
    if (r->ok) {
      mtp__bit_fill(m->dirty, r->from, r->len, false);
      mtp__bit_fill(m->aged, r->from, r->len, false);
      n += (size_t)r->len << MTP_UNIT_SHIFT;
    } else {
      r->s->purge_pending = 1;
      r->s->free_time_ms = now;
      *left = true;
    }
    if (k + 1 < b->n && b->r[k + 1].s == r->s) continue; /* the span's last range: back */
    unsigned longest = 0;
    (void)mtp__span_run_find(m, MTP_SPAN_UNITS, &longest);
    r->s->bin = MTP_LIST_NONE;
    mtp__span_rebin(pool, r->s, longest);
    MTP_VALIDATE(mtp__packed_validate(r->s));
  }
  b->n = 0;
  mtp__u64_add_relaxed(&pool->bytes_returned, n); /* under the lock, as the region layer's */
  return n;
}

/* Pool lock held: what of the spans in the bins is due at cutoff goes into b. */
static void batch_begin(mtpi_pool_t *pool, uint64_t now, uint64_t cutoff, bool force, bool *left,
                        pk_batch_t *b) {
  b->n = 0;
  b->full = false;
  for (unsigned bin = 0; bin < MTP_SPAN_BINS && !b->full; bin++) {
    mtpi_node_t *next;
    for (mtpi_node_t *it = pool->span_bins[bin]; it != NULL && !b->full; it = next) {
      next = it->next;
      mtpi_desc_t *s = mtp__desc_of_node(it);
      if (s->free_time_ms > cutoff) {
        if (s->units_used == 0 || s->purge_pending) *left = true;
        continue;
      }
      if (s->units_used == 0) {
        mtp__span_release(pool, s); /* its pages are the region layer's to purge */
        continue;
      }
      if (!s->purge_pending) continue; /* nothing freed since its last pass */
      /* every free unit when none was freed within the delay (an idle span), else the aged */
      bool all = force || mtp__span_map(s)->last_release_ms <= cutoff;
      bool rest = span_begin(pool, s, all, b);
      if (b->full) break;
      s->purge_pending = rest; /* the units freed since the last pass: due a delay from now */
      if (rest) {
        s->free_time_ms = now;
        *left = true;
      }
    }
  }
}

size_t mtp__packed_purge(mtpi_pool_t *pool, uint64_t now, uint64_t cutoff, bool force, bool *left) {
  size_t n = 0;
  pk_batch_t b;
  do {
    batch_begin(pool, now, cutoff, force, left, &b);
    if (b.n == 0) break;
    pthread_mutex_unlock(&pool->lock);
    batch_run(&b);
    pthread_mutex_lock(&pool->lock);
    n += batch_end(pool, &b, now, left);
  } while (b.full);
  return n;
}

size_t mtp__span_purge_now(mtpi_pool_t *pool, mtpi_desc_t *s) {
  pk_batch_t b = {.n = 0, .full = false};
  bool left = false;
  s->purge_pending = span_begin(pool, s, true, &b);
  if (b.full) return 0; /* more ranges than a batch: the next pass's */
  batch_run(&b);
  return batch_end(pool, &b, mtp__os_now_ms(), &left);
}

void mtp__packed_validate(const mtpi_desc_t *s) {
  const mtpi_span_t *m = mtp__span_map(s);
  unsigned used = 0, longest = 0; /* run_find sets it: no run holds a whole span */
  MTP_ASSERT(s->kind == MTP_PAGE_PACKED && s->pages == MTP_SPAN_PAGES);
  MTP_ASSERT(!mtp__bit_any(m->free, 0, FIRST) && !mtp__bit_any(m->dirty, 0, FIRST) && !mtp__bit_any(m->kept, 0, FIRST));
  for (unsigned w = 0; w < MTP_SPAN_WORDS; w++)
    MTP_ASSERT((m->kept[w] & ~m->free[w]) == 0 && (m->aged[w] & ~m->free[w]) == 0);
  for (unsigned i = FIRST; i < MTP_SPAN_UNITS;) {
    if (mtp__bit_get(m->free, i)) {
      i++;
      continue;
    }
    /* a unit in use: the first of a block, whose units are all in use */
    /* acquire: as in mtp__packed_each */
    uint16_t v = atomic_load_explicit(&((mtpi_span_t *)m)->ent[i], memory_order_acquire);
    unsigned n = v & ~MTP_SPAN_FREED;
    MTP_ASSERT(n != 0 && i + n <= MTP_SPAN_UNITS && !mtp__bit_any(m->free, i, n) &&
               !mtp__bit_any(m->dirty, i, n));
    used += n;
    i += n;
  }
  mtp__span_run_find(m, MTP_SPAN_UNITS, &longest);
  MTP_ASSERT(used == s->units_used && longest <= s->longest_bound &&
             (s->bin == mtp__span_bin_of(s->longest_bound) + 1 || s->bin == MTP_SPAN_PURGING));
  (void)used;
  (void)longest;
}
