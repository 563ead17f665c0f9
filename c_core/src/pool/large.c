/* Large blocks: requests above the largest size class (or with an alignment no class offers) get
 * a range of pages of their own, out of a mapping of their own. A hash of their addresses, under
 * one lock, tells a large block from a pointer mtpool never gave out; each pool lists its own so
 * that destroying the pool unmaps them all. A block's record is an internal record (base/meta.c):
 * out of band, and behind a guard page, so an overflow past the block's range cannot reach it.
 * Their ranges (the records' hash, the cache of free ranges, the reserve): large_ranges.c.
 * Layer: pool. */
#include <errno.h>
#include <string.h>

#include "base/os.h"
#include "base/track.h"
#include "large_ranges.h"

#define CANARY 0xCA
#define CHECK_SLACK 16                     /* checked mode: canary bytes after the requested size */

static size_t page_round(size_t n) {
  size_t os_page = mtp__os_page_size();
  return (n + os_page - 1) & ~(os_page - 1);
}

/* A growing buffer's realloc without the large lock. Each thread remembers the block it resized
 * last: its address and range length, and `shrinks` as it read it then. `shrinks` counts every
 * event that may shorten, move or end a live block's range (a free, a shrink, a move, a pool's
 * destruction); it is written under the large lock (release), at each such event, before the
 * range changes. Growth in place does not count: a range only longer than remembered is still
 * safe to keep a block in. So while the count has not moved, the remembered range is the block's
 * (or a prefix of it), and a realloc of that block that fits it as mtp__large_resize's "fits as
 * it is" rule allows returns at once. The record's requested size is then left as it was: only a
 * checked pool (never remembered) and a sized free of at most 32 KiB read it, and such a free of
 * a block that grew is wrong either way. Acquire on the fast path: the program hands a block
 * from thread to thread with its own synchronisation, which orders a shrink by the other thread
 * before this read. */
static mtpi_atomic_uptr shrinks;
static MTP_TLS struct {
  void *p;
  size_t map_size;
  uintptr_t shrinks;
} tl_last;

static void shrinks_bump(void) { mtp__store_release(&shrinks, mtp__load_relaxed(&shrinks) + 1); }

/* Large lock held: rec (of a pool that is not checked) was just resized by this thread. */
static void remember(const mtpi_large_t *rec) {
  tl_last.p = rec->ptr;
  tl_last.map_size = rec->map_size;
  tl_last.shrinks = mtp__load_relaxed(&shrinks);
}

static bool fits_as_is(size_t need, size_t map_size) {
  return need <= map_size && map_size - need <= map_size / 4;
}

/* Large lock held: the record goes from LIVE to the pool's live list and counters. */
static void make_live(mtpi_pool_t *pool, mtpi_large_t *rec, size_t size) {
  rec->size = size;
  rec->cached = false;
  rec->look_backoff_ms = 0;
  rec->huge_rest = false;
  rec->probe = false;
  mtp__list_push(&pool->large, &rec->link);
  pool->large_count++;
  pool->large_bytes += rec->map_size;
  pool->large_allocs++;
}

/* The caller's now: no poison left on the block's range. */
static void *hand_out(mtpi_large_t *rec) {
  mtp__track_handout(rec->map, rec->map_size);
  return rec->ptr;
}

/* The length of a range mapped for one block of map_size bytes that gets `advice`
 * (mtp__large_fresh_advice): whole huge pages where it is advised huge, so that its last bytes
 * fault in a huge page too and a tail it is grown by starts on one (cut at the OS page, its last
 * part and the tails grown from it faulted in 4 KiB pages, and a huge page split where a purge cut
 * it: bench/results/notes.md: large.c). */
static size_t own_length(const mtpi_pool_t *pool, int advice, size_t map_size) {
  if (advice != 1 || pool->check) return map_size; /* checked: canaries fill the rest */
  size_t h = mtp__large_huge_size(); /* a power of two: advice 1 says so */
  size_t r = (map_size + h - 1) & ~(h - 1);
  return r < map_size ? map_size : r;
}

/* [m, m + len), mapped for one block: advised (-1: no advice). */
static void advise_own(void *m, size_t len, int advice) {
  if (advice >= 0) (void)mtp__os_huge_advise(m, len, advice == 1);
}

/* rec (its pool set, in no list nor the hash) takes the range [m, m + map_size) for a block of
 * size bytes: filed in the hash under `origin` (0: a mapping of its own, a new origin) and made
 * LIVE, a probe or not (mtp__large_own_advice); looked at on the purge passes for dense huge
 * ranges where the caller can wake the purger (look: then set if it is). */
static void go_live(mtpi_large_t *rec, void *m, size_t map_size, size_t size, uint64_t origin,
                    bool probe, bool *look) {
  rec->ptr = rec->map = m;
  rec->map_size = map_size;
  pthread_mutex_lock(&mtp__large_lock);
  rec->origin = origin != 0 ? origin : ++mtp__large_origin_count;
  mtp__large_hash_insert(rec);
  make_live(rec->pool, rec, size);
  rec->probe = probe;
  if (look != NULL) {
    mtp__large_look_start(rec->pool, rec);
    *look = rec->look_backoff_ms != 0;
  }
  pthread_mutex_unlock(&mtp__large_lock);
}

/* A range mapped for one block, aligned to the huge page size where one fits, so that its huge
 * ranges can be huge pages, and advised as the pool's own mappings are (*probe: judged at its
 * free); *size: the block's page-rounded bytes, on return the range's (own_length). */
static void *map_own(mtpi_pool_t *pool, size_t *size, size_t alignment, bool *probe) {
  int advice = mtp__large_own_advice(pool, *size, probe);
  *size = own_length(pool, advice, *size);
  size_t hsize = mtp__large_huge_size();
  if (hsize != 0 && *size >= hsize && alignment < hsize) alignment = hsize;
  void *m = mtp__os_map(*size, alignment);
  if (m != NULL) advise_own(m, *size, advice);
  return m;
}

/* A range just taken from the cache: a write after its free is reported (the caller gets the
 * range all the same). */
static void check_freed_fill(mtpi_large_t *rec) {
  if (!mtp__large_freed_fill_ok(rec))
    mtp__error(MTP_ERR_USE_AFTER_FREE, "use after free (a freed large block was written to)",
               rec->ptr);
}

/* A block mapped on its own that no cached range fits: the largest cached one of at least half
 * its size (rec, out of the cache and the hash), grown by mremap into it, so that the pages the
 * range has resident serve the block and only the difference is faulted in afresh (a program that
 * churns 5-25 MiB buffers mapped and faulted most of them anew: bench/results/notes.md:
 * large.c). NULL if the growth failed (the range is unmapped; the caller maps afresh). */
static void *grow_cached(mtpi_pool_t *pool, mtpi_large_t *rec, size_t size, size_t map_size,
                         bool zero, bool *look) {
  check_freed_fill(rec);
  bool probe; /* not one: the range has a past (resident pages, maybe advice) */
  int advice = mtp__large_own_advice(pool, map_size, &probe);
  map_size = own_length(pool, advice, map_size);
  size_t old_size = rec->map_size, hsize = mtp__large_huge_size();
  mtp__track_unmap(rec->map, old_size); /* no stale poison where the range was */
  void *m = mtp__os_remap_aligned(rec->map, old_size, map_size,
                                  hsize != 0 && map_size >= hsize ? hsize : mtp__os_page_size());
  if (m == NULL) {
    (void)mtp__large_unmap_rec(rec);
    return NULL;
  }
  advise_own(m, map_size, advice);
  if (zero) memset(m, 0, size < old_size ? size : old_size); /* the grown tail is fresh: zero */
  go_live(rec, m, map_size, size, 0, false, look); /* a mapping of its own now */
  return m;
}

/* A large block of `size` bytes whose range has room for `room` bytes more (room > 0: realloc
 * made it, it may grow again); `zero`: its first `size` bytes read as zero (calloc). A fresh
 * mapping is zero already: it is not written, so only the pages the caller touches are faulted in
 * (a program that callocs a big table and uses a corner of it stays small); a cached range is
 * cleared. */
static void *large_alloc(mtpi_pool_t *pool, size_t size, size_t room, size_t alignment, bool zero,
                         bool *look) {
  size_t need = size + (pool->check ? CHECK_SLACK : 0);
  if (need < size || need > SIZE_MAX / 2 || room > SIZE_MAX / 2 - need) {
    errno = ENOMEM;
    return NULL;
  }
  size_t os_page = mtp__os_page_size();
  size_t map_size = page_round(need + room);
  if (map_size == 0) map_size = os_page;
  if (mtp__large_caches(pool)) {
    pthread_mutex_lock(&mtp__large_lock);
    mtpi_large_t *rec = mtp__large_cache_take(pool, map_size, alignment, room > 0), *grow = NULL;
    if (rec != NULL) {
      make_live(pool, rec, size);
      if (look != NULL) {
        mtp__large_look_start(pool, rec);
        *look = rec->look_backoff_ms != 0;
      }
    } else if (map_size > MTP_LARGE_RESERVE_TAKE_MAX && alignment <= os_page)
      grow = mtp__large_cache_take_largest(pool, map_size / 2);
    pthread_mutex_unlock(&mtp__large_lock);
    if (grow != NULL) {
      void *p = grow_cached(pool, grow, size, map_size, zero, look);
      if (p != NULL) return p;
    }
    if (rec != NULL) {
      check_freed_fill(rec);
      void *p = hand_out(rec);
      if (zero) memset(p, 0, size);
      return p;
    }
  }
  mtpi_large_t *rec = mtp__meta_alloc(sizeof(*rec));
  if (rec == NULL) return NULL;
  uint64_t origin = 0;
  void *m = NULL;
  bool probe = false;
  if (mtp__large_caches(pool) && alignment <= os_page && map_size <= MTP_LARGE_RESERVE_TAKE_MAX)
    m = mtp__large_reserve_take(pool, map_size, &origin);
  if (m == NULL) m = map_own(pool, &map_size, alignment > os_page ? alignment : os_page, &probe);
  if (m == NULL) {
    mtp__meta_free(rec, sizeof(*rec));
    errno = ENOMEM;
    return NULL;
  }
  if (pool->check) memset((char *)m + size, CANARY, map_size - size);
  rec->pool = pool;
  go_live(rec, m, map_size, size, origin, probe, look);
  return m;
}

void *mtp__large_alloc(mtpi_pool_t *pool, size_t size, size_t alignment, bool *look) {
  return large_alloc(pool, size, 0, alignment, false, look);
}

void *mtp__large_alloc_zero(mtpi_pool_t *pool, size_t size, bool *look) {
  return large_alloc(pool, size, 0, 0, true, look);
}

void *mtp__large_alloc_room(mtpi_pool_t *pool, size_t size, size_t room, bool *look) {
  return large_alloc(pool, size, room, 0, false, look);
}

/* Large lock held: the LIVE record leaves the pool's live list and counters. */
static void unlive(mtpi_pool_t *pool, mtpi_large_t *rec) {
  shrinks_bump();
  mtp__large_look_stop(pool, rec);
  mtp__list_remove(&pool->large, &rec->link);
  pool->large_count--;
  pool->large_bytes -= rec->map_size;
}

int mtp__large_free(void *p, size_t size, bool sized) {
  pthread_mutex_lock(&mtp__large_lock);
  mtpi_large_t *rec = *mtp__large_find(p);
  if (rec == NULL) {
    pthread_mutex_unlock(&mtp__large_lock);
    return MTP_LARGE_NOT;
  }
  int err = 0;
  const char *what = NULL;
  if (rec->cached) {
    err = MTP_ERR_DOUBLE_FREE;
    what = "double free (the large block is already free)";
  } else if (sized) {
    /* As requested, or any size up to the usable size, or one that would have made a large
     * block of this mapping. Checked mode wants the requested size exactly. */
    bool ok = rec->pool->check ? size == rec->size
                               : size <= rec->map_size && (size >= rec->size || size > MTP_MAX_SMALL);
    if (!ok) {
      err = MTP_ERR_WRONG_SIZE;
      what = "wrong size (sized free of a large block)";
    }
  }
  if (!err && rec->pool->check) {
    const unsigned char *c = (const unsigned char *)rec->map + rec->size;
    for (size_t i = 0; i < rec->map_size - rec->size; i++)
      if (c[i] != CANARY) {
        err = MTP_ERR_OVERFLOW;
        what = "buffer overflow (bytes past the end of a large block were written)";
        break;
      }
  }
  if (err) {
    pthread_mutex_unlock(&mtp__large_lock);
    mtp__error(err, what, p);
    return MTP_LARGE_FREED;
  }
  mtpi_pool_t *pool = rec->pool;
  if (rec->probe) mtp__large_judge(pool, rec);
  unlive(pool, rec);
  mtpi_large_t *evict = NULL;
  bool cached = pool->check ? mtp__large_quarantine_put(pool, rec, &evict)
                            : mtp__large_cache_put(pool, rec, &evict);
  if (!cached) mtp__large_hash_remove(rec, p);
  pthread_mutex_unlock(&mtp__large_lock);
  if (!cached) (void)mtp__large_unmap_rec(rec);
  (void)mtp__large_unmap_list(evict);
  return cached && !pool->check && pool->purge_delay_ms > 0 ? MTP_LARGE_CACHED : MTP_LARGE_FREED;
}

size_t mtp__large_verify(mtpi_pool_t *pool, void (*found)(void *ctx, void *p, size_t size),
                         void *ctx) {
  if (!pool->check) return 0;
  size_t n = 0;
  pthread_mutex_lock(&mtp__large_lock);
  for (mtpi_node_t *it = pool->large; it != NULL; it = it->next) {
    const mtpi_large_t *rec = mtp__large_rec_of(it);
    const unsigned char *c = (const unsigned char *)rec->map + rec->size;
    for (size_t i = 0; i < rec->map_size - rec->size; i++)
      if (c[i] != CANARY) {
        found(ctx, rec->ptr, rec->size);
        n++;
        break;
      }
  }
  pthread_mutex_unlock(&mtp__large_lock);
  return n;
}

bool mtp__large_lookup(const void *p, size_t *usable, mtpi_pool_t **pool_out) {
  pthread_mutex_lock(&mtp__large_lock);
  mtpi_large_t *rec = *mtp__large_find(p);
  if (rec && rec->cached) rec = NULL;
  if (rec) {
    *usable = rec->pool->check ? rec->size
                               : rec->map_size - (size_t)((char *)rec->ptr - (char *)rec->map);
    if (pool_out) *pool_out = rec->pool;
  }
  pthread_mutex_unlock(&mtp__large_lock);
  return rec != NULL;
}

void *mtp__large_resize(void *p, size_t size, size_t room) {
  size_t need = page_round(size), want = page_round(size + room);
  if (need < size || want < need || need > SIZE_MAX / 2) return NULL;
  if (p == tl_last.p && fits_as_is(need, tl_last.map_size) &&
      mtp__load_acquire(&shrinks) == tl_last.shrinks)
    return p;
  pthread_mutex_lock(&mtp__large_lock);
  mtpi_large_t *rec = *mtp__large_find(p);
  if (rec == NULL || rec->cached || rec->pool->check || rec->ptr != rec->map) {
    pthread_mutex_unlock(&mtp__large_lock);
    return NULL;
  }
  /* The block is the caller's: no other thread may touch its record until this returns. */
  mtpi_pool_t *pool = rec->pool;
  void *old = rec->map;
  size_t old_size = rec->map_size;
  if (fits_as_is(need, old_size)) {
    rec->size = size;
    remember(rec);
    pthread_mutex_unlock(&mtp__large_lock);
    return p;
  }
  mtpi_large_t *evict = NULL, *tail = NULL;
  if (need > old_size && mtp__large_caches(pool)) {
    /* Grow into the free range just after the block (same origin: the same mapping), taking what
     * the block wants and leaving the rest cached: no system call. */
    mtpi_large_t *nb = NULL;
    for (size_t i = 0; i < pool->large_cached_count && nb == NULL; i++)
      if (pool->large_slots[i].origin == rec->origin && pool->large_slots[i].map == (char *)old + old_size)
        nb = pool->large_slots[i].rec;
    if (nb != NULL && old_size + nb->map_size >= need) {
      size_t take = want - old_size;
      mtp__large_drop_cached(pool, nb);
      if (take < nb->map_size) { /* the rest of the range stays cached, at its new address */
        nb->map = nb->ptr = (char *)nb->map + take;
        nb->map_size -= take;
        mtp__large_hash_insert(nb);
        mtp__large_cache_link(pool, nb, nb->free_time_ms);
      } else {
        take = nb->map_size;
        tail = nb; /* its record goes (after the unlock) */
      }
      rec->map_size += take;
      rec->size = size;
      pool->large_bytes += take;
      remember(rec);
      pthread_mutex_unlock(&mtp__large_lock);
      if (tail != NULL) mtp__meta_free(tail, sizeof(*tail));
      mtp__track_handout((char *)old + old_size, take);
      return p;
    }
  } else if (need < old_size && mtp__large_caches(pool)) {
    /* Shrink by more than a quarter: the tail goes to the cache (merged with a free range after
     * it), back to the OS after the pool's delay. */
    shrinks_bump(); /* before the tail is anyone else's */
    tail = mtp__large_split(rec, need);
    if (tail != NULL) {
      rec->size = size;
      pool->large_bytes -= tail->map_size;
      mtp__large_hash_insert(tail);
      bool cached = mtp__large_cache_put(pool, tail, &evict);
      if (!cached) mtp__large_hash_remove(tail, tail->ptr);
      pthread_mutex_unlock(&mtp__large_lock);
      if (!cached) (void)mtp__large_unmap_rec(tail);
      (void)mtp__large_unmap_list(evict);
      return p;
    }
  }
  /* A block that grows by half its size or more moves to a cached range rather than grow by
   * mremap: the range's pages are resident, where mremap's new tail would be faulted in page by
   * page, and copying the block costs less than faulting in half its size again. The caller
   * moves it (NULL: not resized here). */
  if (need > old_size && need - old_size >= old_size / 2 && mtp__large_cache_holds(pool, want)) {
    pthread_mutex_unlock(&mtp__large_lock);
    return NULL;
  }
  shrinks_bump(); /* before the system call: the range may move (mremap) or lose its tail */
  bool looking = rec->look_backoff_ms != 0; /* and no purge pass reads it meanwhile */
  mtp__large_look_stop(pool, rec);
  pthread_mutex_unlock(&mtp__large_lock);
  size_t new_size = old_size;
  void *m = old;
  if (need > old_size) { /* grow, with room for more */
    size_t hsize = mtp__large_grow_huge(pool, want);
    m = NULL;
    if (hsize != 0) { /* aligned, its room whole huge pages, advised huge */
      size_t hwant = (want + hsize - 1) & ~(hsize - 1);
      m = mtp__os_remap_aligned(old, old_size, hwant, hsize);
      if (m != NULL) {
        want = hwant;
        (void)mtp__os_huge_advise(m, want, true);
      }
    }
    if (m == NULL) m = mtp__os_remap(old, old_size, want);
    if (m == NULL) return NULL; /* all of it the caller's, unpoisoned (mtp__os_remap) */
    new_size = want;
  } else { /* shrink with no cache: give the tail back, in place */
    if (mtp__os_unmap((char *)old + need, old_size - need) == 0) {
      mtp__u64_add_relaxed(&pool->bytes_returned, old_size - need); /* a statistic */
      new_size = need;
    }
  }
  pthread_mutex_lock(&mtp__large_lock);
  pool->large_bytes = pool->large_bytes - old_size + new_size;
  if (m != old) { /* a block that moved counts as an allocation and a free, as a copy does */
    mtp__large_hash_remove(rec, old);
    rec->map = rec->ptr = m;
    rec->origin = ++mtp__large_origin_count; /* a mapping of its own now */
    mtp__large_hash_insert(rec);
    pool->large_allocs++;
  }
  rec->map_size = new_size;
  rec->size = size;
  if (looking) mtp__large_look_start(pool, rec); /* its range changed: looked at afresh */
  remember(rec);
  pthread_mutex_unlock(&mtp__large_lock);
  return m;
}

void mtp__large_destroy_pool(mtpi_pool_t *pool) {
  pthread_mutex_lock(&mtp__large_lock);
  while (pool->large) {
    mtpi_large_t *rec = mtp__large_rec_of(pool->large);
    unlive(pool, rec);
    mtp__large_hash_remove(rec, rec->ptr);
    (void)mtp__large_unmap_rec(rec);
  }
  while (pool->large_cache) {
    mtpi_large_t *rec = mtp__large_rec_of(pool->large_cache);
    mtp__large_drop_cached(pool, rec);
    (void)mtp__large_unmap_rec(rec);
  }
  char *rest;
  size_t rest_len;
  mtp__large_reserve_drop(pool, &rest, &rest_len);
  pthread_mutex_unlock(&mtp__large_lock);
  if (rest_len != 0) (void)mtp__os_unmap(rest, rest_len);
}

