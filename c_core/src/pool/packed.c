/* Packed medium blocks: a medium request that is not whole 64 KiB pages (mtp__packed_fits) gets
 * units of 512 bytes in a packed span, a run of MTP_SPAN_PAGES pages of the pool's regions cut
 * into MTP_SPAN_UNITS units; several blocks share a page, so a block of 65,544 bytes holds
 * 66,048, not 131,072. Layer: pool.
 *
 * A span's map (mtpi_span_t, types.h) lies in its first MTP_SPAN_META_UNITS units: which units
 * are free, which free units may hold old bytes (dirty), and an entry per unit, at a block's
 * first unit its length in units (0 elsewhere). Spans sit in the pool's bins by a bound on their
 * longest free run; a request takes the first run long enough in a span of the smallest bound
 * that holds it. Everything but the entries' FREED bit is under the pool lock.
 *
 * Rules:
 *   - a free finds the span as a medium free finds its run (chunk map, descriptor by masking, its
 *     head), then the block's entry: an address that is not a unit's start, or a unit whose entry
 *     is 0, is an invalid pointer. Which free of a block is the first is one CAS of its entry
 *     setting MTP_SPAN_FREED (mtp__packed_claim): a second free finds it set (the block waits in a
 *     thread's cache, or its units are free and the entry is kept) and is a double free, until
 *     the unit is cut again.
 *   - the usable size is the block's units; a sized free accepts any size above MTP_MAX_SMALL up
 *     to it (a block's requested size is not kept).
 *   - a freed block's first bytes hold the freed pattern (base/fill.h); a block cut at that unit
 *     again while it is dirty, or handed out from a cache, verifies it (a write after free is
 *     reported).
 *   - calloc: units never touched or purged read as zero and are not written.
 *   - freed units stay in the span; a purge pass due after them gives back the OS pages that lie
 *     wholly in units free since the span's previous pass (mtp__packed_purge; not in a region on
 *     huge pages; units freed since wait for the next pass, a delay later), and a span left empty
 *     goes back to its region.
 *   - realloc does not resize a packed block in place (the caller keeps it while the new size
 *     maps to its units, else moves it to a run that can grow).
 * For tools, a block's units are unpoisoned when handed out and poisoned when freed; free units
 * stay poisoned (the region layer poisons a run it hands out). */
#include <errno.h>
#include <string.h>

#include "base/fill.h"
#include "base/os.h"
#include "base/track.h"
#include "span.h"


_Static_assert(MTP_SPAN_META_UNITS * 8 <= MTP_SPAN_UNITS, "the map takes at most an eighth");
_Static_assert((MTP_MEDIUM_MAX >> MTP_UNIT_SHIFT) < MTP_SPAN_FREED &&
                   (MTP_MEDIUM_MAX >> MTP_UNIT_SHIFT) <= MTP_SPAN_UNITS - MTP_SPAN_META_UNITS,
               "a medium block's length in units fits an entry and a span");
_Static_assert(MTP_FREED_BYTES <= MTP_UNIT_SIZE, "the freed pattern lies in a block's first unit");
/* The fewest units a packed block has (run_find's searches rely on it). */
#define MTP_UNITS_MIN ((MTP_MAX_SMALL >> MTP_UNIT_SHIFT) + 1)
_Static_assert(MTP_UNITS_MIN >= 64, "a packed block's run fills a word or crosses a word's end");

static unsigned units_for(size_t size) {
  return (unsigned)((size + MTP_UNIT_SIZE - 1) >> MTP_UNIT_SHIFT);
}

/* ---- bins ---- */

/* Pool lock held: s has a free run of n units (its first unit in *at)? If not, its bound
 * becomes its longest run, and its bin that one's. */
static bool span_holds(mtpi_pool_t *pool, mtpi_desc_t *s, unsigned n, unsigned *at) {
  unsigned longest = 0;
  *at = mtp__span_run_find(mtp__span_map(s), n, &longest);
  if (*at != MTP_SPAN_UNITS) return true;
  mtp__span_rebin(pool, s, longest);
  return false;
}

/* Pool lock held: a span with a free run of n units, and *at its first unit; or NULL. The
 * smallest bound that holds n first: the first span of n's own bin, then of the next bin not
 * empty (every bound there holds n), so no list is walked; a span whose bound promised more than
 * it has gets its exact longest run (and bin) on the way. */
static mtpi_desc_t *span_find(mtpi_pool_t *pool, unsigned n, unsigned *at) {
  unsigned b = mtp__span_bin_of(n);
  mtpi_desc_t *s = mtp__desc_of_node(pool->span_bins[b]);
  if (s != NULL && s->longest_bound >= n && span_holds(pool, s, n, at)) return s;
  for (;;) {
    uint64_t above = b + 1 < MTP_SPAN_BINS ? pool->span_binned & (~0ull << (b + 1)) : 0;
    if (above == 0) return NULL;
    s = mtp__desc_of_node(pool->span_bins[__builtin_ctzll(above)]);
    if (span_holds(pool, s, n, at)) return s;
  }
}

/* Pool lock held: a new span from the pool's regions, in its bin, or NULL. */
static mtpi_desc_t *span_new(mtpi_pool_t *pool) {
  uint64_t dirty = 0;
  mtpi_desc_t *s = mtp__region_alloc_run(&pool->rs, MTP_SPAN_PAGES, &dirty, &pool->lock);
  if (s == NULL) return NULL;
  mtp__pool_format_run(s, MTP_PAGE_PACKED);
  mtpi_span_t *m = mtp__span_map(s);
  mtp__track_handout(m, FIRST << MTP_UNIT_SHIFT);
  memset(m, 0, sizeof *m);
  mtp__bit_fill(m->free, FIRST, MTP_SPAN_UNITS - FIRST, true);
  for (; dirty != 0; dirty &= dirty - 1) {
    unsigned page = (unsigned)__builtin_ctzll(dirty);
    unsigned from = page * UNITS_PER_PAGE < FIRST ? FIRST : page * UNITS_PER_PAGE;
    mtp__bit_fill(m->dirty, from, (page + 1) * UNITS_PER_PAGE - from, true);
  }
  mtp__span_rebin(pool, s, MTP_SPAN_UNITS - FIRST);
  return s;
}

/* ---- blocks ---- */

/* p's unit in the span s, or MTP_SPAN_UNITS when p is no unit's start past the map. */
static unsigned unit_of(const mtpi_desc_t *s, const void *p) {
  size_t off = (size_t)((const char *)p - (const char *)mtp__span_map(s));
  if ((off & (MTP_UNIT_SIZE - 1)) != 0 || off < (FIRST << MTP_UNIT_SHIFT) ||
      off >= ((size_t)MTP_SPAN_UNITS << MTP_UNIT_SHIFT))
    return MTP_SPAN_UNITS;
  return (unsigned)(off >> MTP_UNIT_SHIFT);
}

/* The 64 bits of w from bit i on (past the map's end: 0). */
static uint64_t bit_word(const uint64_t *w, unsigned i) {
  unsigned k = i >> 6, sh = i & 63;
  uint64_t lo = w[k] >> sh;
  return sh == 0 || k + 1 >= MTP_SPAN_WORDS ? lo : lo | w[k + 1] << (64 - sh);
}

/* Pool lock held: the n units at f (free) cut from s as a block; dirty_out (if not NULL) gets its
 * units that may hold old bytes (bit k: its unit k, k < n <= 512), *verify whether its first unit holds a
 * freed block's pattern to check. The bound on s's longest run stays (it is an upper bound). */
static void cut(mtpi_desc_t *s, unsigned f, unsigned n, uint64_t *dirty_out, bool *verify) {
  mtpi_span_t *m = mtp__span_map(s);
  MTP_ASSERT(f + n <= MTP_SPAN_UNITS && n >= MTP_UNITS_MIN && n <= 512 &&
             mtp__bit_next(m->free, f, false) >= f + n);
  *verify = mtp__bit_get(m->dirty, f) && (atomic_load_explicit(&m->ent[f], memory_order_relaxed) &
                                     MTP_SPAN_FREED) != 0;
  for (unsigned k = 0; dirty_out != NULL && k < n; k += 64) {
    uint64_t w = bit_word(m->dirty, f + k);
    dirty_out[k >> 6] = n - k < 64 ? w & ((1ull << (n - k)) - 1) : w;
  }
  /* the block's entry, and none inside it: older blocks' kept FREED entries cleared */
  atomic_store_explicit(&m->ent[f], (uint16_t)n, memory_order_relaxed);
  for (unsigned k = mtp__bit_next_before(m->kept, f + 1, f + n, true); k < f + n;
       k = mtp__bit_next_before(m->kept, k + 1, f + n, true))
    atomic_store_explicit(&m->ent[k], 0, memory_order_relaxed);
  mtp__bit_fill(m->free, f, n, false);
  mtp__bit_fill(m->dirty, f, n, false);
  mtp__bit_fill(m->kept, f, n, false);
  mtp__bit_fill(m->aged, f, n, false);
  s->units_used += n;
}

void *mtp__packed_alloc(mtpi_pool_t *pool, size_t size, bool zero, const mtpi_pk_back_t *back,
                        bool *due) {
  MTP_ASSERT(mtp__packed_fits(size) && !pool->check);
  unsigned n = units_for(size);
  uint64_t dirty[512 / 64] = {0};
  bool verify = false;
  unsigned f = FIRST; /* a new span's first run */
  mtp__pool_lock(pool);
  if (MTP_UNLIKELY(mtp__load_relaxed(&pool->packed_deferred) != 0)) mtp__packed_drain_locked(pool);
  for (unsigned i = 0; back != NULL && i < back->n; i++)
    mtp__packed_release_locked(pool, back->p[i], back->time[i]);
  mtpi_desc_t *s;
  if (back != NULL && back->at != NULL) { /* its units are free now, n of them at least */
    s = mtp__run_of((uintptr_t)back->at);
    f = unit_of(s, back->at);
  } else {
    s = span_find(pool, n, &f);
  }
  if (s == NULL) {
    s = span_new(pool);
    f = FIRST;
  }
  if (s != NULL) {
    cut(s, f, n, zero ? dirty : NULL, &verify);
    pool->medium_allocs++;
    MTP_VALIDATE(mtp__packed_validate(s));
  }
  *due = mtp__pool_unlock(pool); /* the blocks given back may have made a purge due */
  if (s == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  char *b = (char *)mtp__span_map(s) + ((size_t)f << MTP_UNIT_SHIFT);
  mtp__track_handout(b, (size_t)n << MTP_UNIT_SHIFT);
  if (verify && !mtp__fill_intact(b)) /* the caller gets the block all the same */
    mtp__error(MTP_ERR_USE_AFTER_FREE, "use after free (a freed medium block was written to)", b);
  /* ours alone now: clear, outside the lock, the units that may hold old bytes */
  for (unsigned w = 0; zero && w < 512 / 64; w++)
    for (uint64_t x = dirty[w]; x != 0; x &= x - 1) {
      size_t at = (size_t)(w * 64 + (unsigned)__builtin_ctzll(x)) << MTP_UNIT_SHIFT;
      if (at < size) memset(b + at, 0, size - at < MTP_UNIT_SIZE ? size - at : MTP_UNIT_SIZE);
    }
  return b;
}

bool mtp__packed_lookup(const mtpi_desc_t *s, const void *p, size_t *usable) {
  unsigned f = unit_of(s, p);
  if (f == MTP_SPAN_UNITS) return false;
  uint16_t v = atomic_load_explicit(&mtp__span_map(s)->ent[f], memory_order_relaxed);
  if (v == 0 || (v & MTP_SPAN_FREED)) return false;
  *usable = (size_t)v << MTP_UNIT_SHIFT;
  return true;
}

int mtp__packed_claim(mtpi_desc_t *s, void *p, size_t size, bool sized, size_t *usable,
                      const char **what) {
  unsigned f = unit_of(s, p);
  if (f == MTP_SPAN_UNITS) {
    *what = "invalid pointer (not the start of a medium block)";
    return MTP_ERR_INVALID_POINTER;
  }
  _Atomic(uint16_t) *e = &mtp__span_map(s)->ent[f];
  uint16_t v = atomic_load_explicit(e, memory_order_relaxed);
  for (;;) {
    if (v == 0) {
      *what = "invalid pointer (not the start of a medium block)";
      return MTP_ERR_INVALID_POINTER;
    }
    if (v & MTP_SPAN_FREED) {
      *what = "double free (the medium block is freed already)";
      return MTP_ERR_DOUBLE_FREE;
    }
    if (sized && !(size > MTP_MAX_SMALL && size <= ((size_t)v << MTP_UNIT_SHIFT))) {
      *what = "wrong size (sized free of a medium block)";
      return MTP_ERR_WRONG_SIZE;
    }
    /* acq_rel: orders this free after a hand-out from a cache in another thread */
    if (atomic_compare_exchange_weak_explicit(e, &v, (uint16_t)(v | MTP_SPAN_FREED),
                                              memory_order_acq_rel, memory_order_relaxed))
      break;
  }
  *usable = (size_t)v << MTP_UNIT_SHIFT;
  return 0;
}

void mtp__packed_mark_freed(void *p, size_t usable) {
  mtp__fill_freed(p);
  mtp__track_poison(p, usable);
}

void *mtp__packed_reuse(void *p, size_t size, bool zero) {
  mtpi_desc_t *s = mtp__run_of((uintptr_t)p);
  _Atomic(uint16_t) *e = &mtp__span_map(s)->ent[unit_of(s, p)];
  uint16_t v = atomic_load_explicit(e, memory_order_relaxed);
  mtp__track_handout(p, (size_t)(v & ~MTP_SPAN_FREED) << MTP_UNIT_SHIFT);
  if (!mtp__fill_intact(p))
    mtp__error(MTP_ERR_USE_AFTER_FREE, "use after free (a freed medium block was written to)", p);
  /* relaxed: the next free, from any thread, is ordered after this by the program's hand-over */
  atomic_store_explicit(e, (uint16_t)(v & ~MTP_SPAN_FREED), memory_order_relaxed);
  if (zero) memset(p, 0, size); /* cached units are resident and dirty */
  return p;
}

void *mtp__packed_split(void *p, unsigned n) {
  mtpi_desc_t *s = mtp__run_of((uintptr_t)p);
  mtpi_span_t *m = mtp__span_map(s);
  unsigned f = unit_of(s, p);
  uint16_t v = atomic_load_explicit(&m->ent[f], memory_order_relaxed);
  unsigned units = v & ~MTP_SPAN_FREED;
  MTP_ASSERT((v & MTP_SPAN_FREED) && n >= MTP_UNITS_MIN && n <= units);
  if (units - n < MTP_UNITS_MIN) return NULL;
  /* the rest's entry first, then the first part's (release): a walk that sees the shorter length
   * finds the rest's entry (mtp__packed_each; an entry inside a block is 0 until then) */
  atomic_store_explicit(&m->ent[f + n], (uint16_t)((units - n) | MTP_SPAN_FREED),
                        memory_order_relaxed);
  atomic_store_explicit(&m->ent[f], (uint16_t)(n | MTP_SPAN_FREED), memory_order_release);
  char *rest = (char *)p + ((size_t)n << MTP_UNIT_SHIFT);
  mtp__track_handout(rest, MTP_FREED_BYTES); /* poisoned with the block: the pattern goes in */
  mtp__packed_mark_freed(rest, (size_t)(units - n) << MTP_UNIT_SHIFT);
  return rest;
}

void mtp__packed_release_locked(mtpi_pool_t *pool, void *p, uint64_t now_ms) {
  mtpi_desc_t *s = mtp__run_of((uintptr_t)p);
  mtpi_span_t *m = mtp__span_map(s);
  unsigned f = unit_of(s, p);
  uint16_t v = atomic_load_explicit(&m->ent[f], memory_order_relaxed);
  MTP_ASSERT(s->kind == MTP_PAGE_PACKED && (v & MTP_SPAN_FREED));
  unsigned n = v & ~MTP_SPAN_FREED;
  MTP_ASSERT(n != 0 && f + n <= MTP_SPAN_UNITS && !mtp__bit_any(m->free, f, n) && s->units_used >= n);
  mtp__bit_fill(m->free, f, n, true);
  mtp__bit_fill(m->dirty, f, n, true);
  m->kept[f >> 6] |= 1ull << (f & 63);
  s->units_used -= n;
  if (now_ms > m->last_release_ms) m->last_release_ms = now_ms;
  /* free units to purge, due once the first of them since the last purge is: a span that frees a
   * block now and then is purged all the same */
  if (!s->purge_pending || now_ms < s->free_time_ms) s->free_time_ms = now_ms;
  s->purge_pending = 1;
  /* the free run the block joined: the bound grows to it if it is longer */
  unsigned run = mtp__bit_next(m->free, f + n, false) - mtp__run_start(m->free, f);
  if (run > s->longest_bound) mtp__span_rebin(pool, s, run);
  MTP_VALIDATE(mtp__packed_validate(s));
  if (pool->purge_delay_ms != 0) {
    mtp__pool_note_free_pages(pool);
    return;
  }
  /* no delay: purge at once, and an empty span goes (unless a purge pass has it: then its next) */
  if (s->bin == MTP_SPAN_PURGING) return;
  (void)mtp__span_purge_now(pool, s);
  if (s->units_used == 0) mtp__span_release(pool, s);
}

bool mtp__packed_free(void *p, size_t size, bool sized) {
  mtpi_desc_t *s = mtp__run_of((uintptr_t)p);
  mtpi_pool_t *pool = mtp__pool_of_page(s);
  const char *what = NULL;
  size_t usable = 0;
  int err = mtp__packed_claim(s, p, size, sized, &usable, &what);
  if (err) {
    mtp__error(err, what, p);
    return false;
  }
  mtp__packed_mark_freed(p, usable);
  return mtp__packed_release(pool, p);
}

/* A deferred block's link: past its freed pattern, in a block that stays poisoned for tools. */
static void **deferred_link(void *p) { return (void **)((char *)p + MTP_FREED_BYTES); }

void mtp__packed_drain_locked(mtpi_pool_t *pool) {
  void *b = (void *)mtp__exchange_acq_rel(&pool->packed_deferred, 0);
  uint64_t now = mtp__os_now_ms();
  while (b != NULL) {
    mtp__track_peek(deferred_link(b), sizeof(void *));
    void *next = *deferred_link(b);
    mtp__track_unpeek(deferred_link(b), sizeof(void *));
    mtp__packed_release_locked(pool, b, now);
    b = next;
  }
}

bool mtp__packed_release(mtpi_pool_t *pool, void *p) {
  /* A free never waits for the pool lock: held, it leaves the block for the lock's next holder
   * (packed_deferred, types.h), which any allocation of a packed block or a purge pass is. */
  if (!mtp__pool_trylock(pool)) {
    uintptr_t head = mtp__load_relaxed(&pool->packed_deferred);
    mtp__track_peek(deferred_link(p), sizeof(void *));
    do {
      *deferred_link(p) = (void *)head;
    } while (!mtp__cas_weak_acq_rel(&pool->packed_deferred, &head, (uintptr_t)p));
    mtp__track_unpeek(deferred_link(p), sizeof(void *));
    return true; /* a pass drains it if no allocation does first */
  }
  if (MTP_UNLIKELY(mtp__load_relaxed(&pool->packed_deferred) != 0)) mtp__packed_drain_locked(pool);
  mtp__packed_release_locked(pool, p, mtp__os_now_ms());
  return mtp__pool_unlock(pool);
}

int mtp__packed_each(mtpi_desc_t *s, int (*fn)(void *arg, void *p, size_t usable), void *arg) {
  mtpi_span_t *m = mtp__span_map(s);
  for (unsigned i = FIRST; i < MTP_SPAN_UNITS;) {
    /* acquire: pairs with a split's release (mtp__packed_split) */
    uint16_t v = atomic_load_explicit(&m->ent[i], memory_order_acquire);
    unsigned n = v & ~MTP_SPAN_FREED;
    if (v == 0 || mtp__bit_get(m->free, i) || n == 0 || i + n > MTP_SPAN_UNITS) {
      i++;
      continue;
    }
    if (!(v & MTP_SPAN_FREED)) {
      int rc = fn(arg, (char *)m + ((size_t)i << MTP_UNIT_SHIFT), (size_t)n << MTP_UNIT_SHIFT);
      if (rc) return rc;
    }
    i += n;
  }
  return 0;
}
