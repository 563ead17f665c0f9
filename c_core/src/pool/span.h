/* Packed spans: what packed.c (their blocks) and span.c (spans as wholes: bins, release, purge)
 * share: a span's map and its bitmaps, and the calls on whole spans. Pool lock held for all of
 * it. Layer: pool. */
#ifndef MTP_POOL_SPAN_H
#define MTP_POOL_SPAN_H

#include "pool.h"

#pragma GCC visibility push(hidden)

#define UNITS_PER_PAGE (MTP_PAGE_SIZE >> MTP_UNIT_SHIFT)
#define FIRST MTP_SPAN_META_UNITS /* a span's first unit that blocks use */
/* A span's `list` while a purge has it out of the bins (span.c): nothing cuts from it, and
 * it is not released, until the purge puts it back. */
#define MTP_SPAN_PURGING 255

static inline mtpi_span_t *mtp__span_map(const mtpi_desc_t *s) {
  return (mtpi_span_t *)mtp__page_start(s);
}

/* ---- bitmaps of MTP_SPAN_UNITS bits ---- */

static inline bool mtp__bit_get(const uint64_t *w, unsigned i) { return (w[i >> 6] >> (i & 63)) & 1; }

/* The first unit from i on, before end, whose bit is `one`, or end (end <= MTP_SPAN_UNITS): the
 * words past end are not read. */
static inline unsigned mtp__bit_next_before(const uint64_t *w, unsigned i, unsigned end, bool one) {
  while (i < end) {
    uint64_t x = (one ? w[i >> 6] : ~w[i >> 6]) & (~0ull << (i & 63));
    if (x) {
      unsigned at = (i & ~63u) + (unsigned)__builtin_ctzll(x);
      return at < end ? at : end;
    }
    i = (i & ~63u) + 64;
  }
  return end;
}

/* The first unit from i on whose bit is `one`, or MTP_SPAN_UNITS. */
static inline unsigned mtp__bit_next(const uint64_t *w, unsigned i, bool one) {
  return mtp__bit_next_before(w, i, MTP_SPAN_UNITS, one);
}

/* The first bit of the run of ones that ends at bit i - 1 (i if bit i - 1 is 0). */
static inline unsigned mtp__run_start(const uint64_t *w, unsigned i) {
  while (i > 0) {
    unsigned k = (i - 1) >> 6, sh = (i - 1) & 63;
    uint64_t zeros = ~w[k] & (sh == 63 ? ~0ull : (2ull << sh) - 1); /* at or below bit i - 1 */
    if (zeros) return k * 64 + 64 - (unsigned)__builtin_clzll(zeros);
    i = k * 64;
  }
  return 0;
}

/* Bits [i, i + n) set to one. */
static inline void mtp__bit_fill(uint64_t *w, unsigned i, unsigned n, bool one) {
  for (unsigned end = i + n; i < end;) {
    unsigned k = end - i < 64 - (i & 63) ? end - i : 64 - (i & 63);
    uint64_t mask = (k == 64 ? ~0ull : ((1ull << k) - 1)) << (i & 63);
    w[i >> 6] = one ? w[i >> 6] | mask : w[i >> 6] & ~mask;
    i += k;
  }
}

/* Every bit of [i, i + n) set? */
static inline bool mtp__bit_all(const uint64_t *w, unsigned i, unsigned n) {
  return mtp__bit_next_before(w, i, i + n, false) == i + n;
}

/* Any bit set in [i, i + n)? */
static inline bool mtp__bit_any(const uint64_t *w, unsigned i, unsigned n) {
  return n != 0 && mtp__bit_next_before(w, i, i + n, true) < i + n;
}

/* A free run of at least n units (n >= 64: MTP_UNITS_MIN) to cut a block from, or MTP_SPAN_UNITS:
 * the first whose first unit may be resident (dirty: it held a block, so no page faults; the scan
 * stops there), else the first. *longest (if not NULL), when none is found: the longest run of
 * 64 units or more (or less). A run of 64 units or more fills a word or crosses a word's end, so
 * only the ones at each word's ends are followed: a word a step, however many short runs lie
 * inside words. */
static inline unsigned mtp__span_run_find(const mtpi_span_t *m, unsigned n, unsigned *longest) {
  unsigned cur = 0, most = 0, found = MTP_SPAN_UNITS;
  for (unsigned k = 0; k <= MTP_SPAN_WORDS; k++) { /* cur: the run that reaches word k */
    uint64_t w = k < MTP_SPAN_WORDS ? m->free[k] : 0;
    unsigned t = w == ~0ull ? 64 : (unsigned)__builtin_ctzll(~w); /* its ones at the bottom */
    cur += t;
    if (cur > most) most = cur;
    if (cur >= n) {
      unsigned at = k * 64 + t - cur;
      if (mtp__bit_get(m->dirty, at)) return at;
      if (found == MTP_SPAN_UNITS) found = at;
    }
    if (w != ~0ull) cur = (unsigned)__builtin_clzll(~w); /* its ones at the top */
  }
  if (longest) *longest = most;
  return found;
}

/* ---- bins ---- */

static inline unsigned mtp__span_bin_of(unsigned longest) {
  unsigned b = longest >> MTP_SPAN_BIN_SHIFT;
  return b < MTP_SPAN_BINS ? b : MTP_SPAN_BINS - 1;
}
/* s (in a bin) leaves its bin. */
void mtp__span_unbin(mtpi_pool_t *pool, mtpi_desc_t *s);
/* s's bound on its longest free run set to longest, and s moved to its bin (only the bound while
 * a purge has it). */
void mtp__span_rebin(mtpi_pool_t *pool, mtpi_desc_t *s, unsigned longest);
/* The empty span s (in a bin) goes back to its region. */
void mtp__span_release(mtpi_pool_t *pool, mtpi_desc_t *s);
/* Give back now the OS pages of s that lie in free units and may be resident (a pool without a
 * purge delay); returns the bytes. */
size_t mtp__span_purge_now(mtpi_pool_t *pool, mtpi_desc_t *s);

#pragma GCC visibility pop

#endif
