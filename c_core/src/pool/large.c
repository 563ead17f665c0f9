/* Large blocks: requests above the largest size class (or with an alignment no class offers) get
 * a mapping of their own. A hash of their addresses, under one lock, tells a large block from a
 * pointer mtpool never gave out; each pool lists its own so that destroying the pool unmaps them
 * all. A block's record is an internal record (base/meta.c): out of band, and behind a guard page,
 * so an overflow past the block's mapping cannot reach it. Layer: pool.
 *
 * The cache of mappings. A freed block's mapping is kept (CACHED, see types.h) instead of being
 * unmapped, and a later large allocation of the same pool reuses it: no mmap, no munmap, and its
 * pages are not faulted in again. Rules:
 *   - reuse as is when the mapping is at most 1/4 larger than needed (the usable size reported is
 *     the whole mapping, so it stays true); else grow a smaller cached mapping (at least half the
 *     size needed) with mremap, whose pages move without a copy or a fault; else cut a larger
 *     one's tail off (munmap) and use its head; else map afresh.
 *   - bound: a pool keeps at most MAX_CACHED mappings and at most CACHE_FLOOR bytes plus a quarter
 *     of the bytes its live large blocks map; the oldest go first. The floor lets a program that
 *     frees and allocates a few blocks of several MiB in a loop (the common pattern) reuse them;
 *     the proportional part lets one with many large blocks keep its turnover without ever more
 *     than 1.25x its large-block footprint.
 *   - a cached mapping goes back to the OS (munmap, counted in bytes_returned then) after the
 *     pool's purge delay (the purge thread, pool.c), at trim and at pool destroy. A pool with a
 *     delay of 0 caches nothing; checked pools cache nothing either (a freed block's mapping is
 *     gone, so a late access faults and its double free stays reported).
 * Free mappings are poisoned for AddressSanitizer while cached. */
#include <errno.h>
#include <string.h>

#include "base/os.h"
#include "base/track.h"
#include "pool.h"

#define HASH_BITS 12
#define CANARY 0xCA
#define CHECK_SLACK 16                     /* checked mode: canary bytes after the requested size */
#define MAX_CACHED 64                      /* mappings a pool keeps; bounds the best-fit walk */
#define CACHE_FLOOR ((size_t)32 << 20)     /* bytes a pool may keep whatever it has in use */
/* A cached mapping's first bytes (from the user's address) hold this pattern while it is cached,
 * and are verified when the mapping is reused: a write after free into the start of a large block
 * (headers, first fields) is reported then. Cheap (no system call); writes further in and reads
 * are not found (mprotect would find them at two system calls and a fault per reuse). */
#define FREED_BYTES 128
#define FREED_FILL 0xDF

pthread_mutex_t mtp__large_lock = PTHREAD_MUTEX_INITIALIZER;
static mtpi_large_t *hash[1u << HASH_BITS];

static unsigned hash_of(const void *p) {
  uint64_t x = (uint64_t)(uintptr_t)p >> 12; /* mappings are at least 4 KiB apart */
  return (unsigned)((x * 0x9E3779B97F4A7C15ull) >> (64 - HASH_BITS));
}

static mtpi_large_t **find(const void *p) {
  mtpi_large_t **pp = &hash[hash_of(p)];
  while (*pp && (*pp)->ptr != p) pp = &(*pp)->hash_next;
  return pp;
}

/* A record is filed at the head of its chain, so that the newest record for an address is found
 * first: while a thread moves a block (mremap, outside the lock), the old address may already be
 * mapped again by another thread, whose record then shadows the one about to move. */
static void hash_insert(mtpi_large_t *rec) {
  unsigned h = hash_of(rec->ptr);
  rec->hash_next = hash[h];
  hash[h] = rec;
}

/* Unfile the record itself (not whatever record has its address: see hash_insert), filed under
 * the address `key`. */
static void hash_remove(mtpi_large_t *rec, const void *key) {
  mtpi_large_t **pp = &hash[hash_of(key)];
  while (*pp != rec) pp = &(*pp)->hash_next;
  *pp = rec->hash_next;
}

static mtpi_large_t *rec_of(mtpi_node_t *n) { return MTP_CONTAINER(n, mtpi_large_t, link); }

static size_t page_round(size_t n) {
  size_t os_page = mtp__os_page_size();
  return (n + os_page - 1) & ~(os_page - 1);
}

static bool caches(const mtpi_pool_t *pool) { return !pool->check && pool->purge_delay_ms != 0; }

/* Large lock held: the record goes from LIVE to the pool's live list and counters. */
static void make_live(mtpi_pool_t *pool, mtpi_large_t *rec, size_t size) {
  rec->size = size;
  rec->cached = false;
  mtp__list_push(&pool->large, &rec->link);
  pool->large_count++;
  pool->large_bytes += rec->map_size;
  pool->large_allocs++;
}

/* Large lock held: take a cached record out of the cache (it stays in the hash). */
static void uncache(mtpi_pool_t *pool, mtpi_large_t *rec) {
  mtp__list_remove(&pool->large_cache, &rec->link);
  pool->large_cached_count--;
  pool->large_cached_bytes -= rec->map_size;
}

/* Large lock held: a cached record leaves the hash too; the caller unmaps it (unmap_rec). */
static void drop_cached(mtpi_pool_t *pool, mtpi_large_t *rec) {
  uncache(pool, rec);
  hash_remove(rec, rec->ptr);
}

/* Unmap a record's mapping (it is in no list and not in the hash) and free the record. Returns
 * the bytes that went back to the OS. */
static size_t unmap_rec(mtpi_large_t *rec) {
  size_t n = rec->map_size;
  mtp__track_unmap(rec->map, n); /* the next mapping there starts unpoisoned */
  /* munmap of our own whole mapping fails only if the kernel is out of memory to split a
   * mapping: the address space then stays mapped and is not counted as returned. */
  if (mtp__os_unmap(rec->map, n) == 0)
    mtp__u64_add_relaxed(&rec->pool->bytes_returned, n); /* relaxed: a statistic */
  else
    n = 0;
  mtp__meta_free(rec, sizeof(*rec));
  return n;
}

/* Records to unmap once the large lock is released, linked through hash_next. */
static size_t unmap_list(mtpi_large_t *list) {
  size_t n = 0;
  while (list) {
    mtpi_large_t *next = list->hash_next;
    n += unmap_rec(list);
    list = next;
  }
  return n;
}

/* Large lock held: a cached mapping for `need` bytes at `alignment` (0 or at most the OS page:
 * any), taken out of the cache, or NULL. *how says what the caller must do with it first. */
enum { FIT_AS_IS, FIT_GROW, FIT_CUT };
static mtpi_large_t *cache_take(mtpi_pool_t *pool, size_t need, size_t alignment, int *how) {
  mtpi_large_t *fit = NULL, *smaller = NULL;
  size_t os_page = mtp__os_page_size();
  for (mtpi_node_t *it = pool->large_cache; it; it = it->next) {
    mtpi_large_t *r = rec_of(it);
    if (alignment > os_page && ((uintptr_t)r->map & (alignment - 1)) != 0) continue;
    if (r->map_size >= need) {
      if (fit == NULL || r->map_size < fit->map_size) fit = r;
    } else if (alignment <= os_page && (smaller == NULL || r->map_size > smaller->map_size)) {
      smaller = r; /* a moved mapping may lose its alignment: grow only unaligned requests */
    }
  }
  mtpi_large_t *r;
  if (fit && fit->map_size - need <= need / 4) {
    r = fit;
    *how = FIT_AS_IS;
  } else if (smaller && smaller->map_size >= need / 2) {
    r = smaller;
    *how = FIT_GROW;
  } else if (fit) {
    r = fit;
    *how = FIT_CUT;
  } else {
    return NULL;
  }
  uncache(pool, r);
  return r;
}

/* A large block of `size` bytes whose mapping has room for `room` bytes more. */
/* The user's bytes a cached record's pattern covers. */
static size_t freed_span(const mtpi_large_t *rec) {
  size_t room = rec->map_size - (size_t)((char *)rec->ptr - (char *)rec->map);
  return room < FREED_BYTES ? room : FREED_BYTES;
}

/* A cached record's pattern, intact? (outside the large lock: the record is out of the cache) */
static bool freed_fill_ok(mtpi_large_t *rec) {
  const unsigned char *c = rec->ptr;
  size_t n = freed_span(rec); /* a multiple of 8: ptr and the mapping's end are page-aligned */
  mtp__track_peek(rec->ptr, n);
  uint64_t diff = 0;
  for (size_t i = 0; i < n; i += 8) {
    uint64_t w;
    memcpy(&w, c + i, 8);
    diff |= w ^ (0x0101010101010101ull * FREED_FILL);
  }
  mtp__track_unpeek(rec->ptr, n);
  return diff == 0;
}

static void *large_alloc(mtpi_pool_t *pool, size_t size, size_t room, size_t alignment) {
  size_t need = size + (pool->check ? CHECK_SLACK : 0);
  if (need < size || need > SIZE_MAX / 2 || room > SIZE_MAX / 2 - need) {
    errno = ENOMEM;
    return NULL;
  }
  size_t os_page = mtp__os_page_size();
  size_t map_size = page_round(need + room);
  if (map_size == 0) map_size = os_page;
  if (caches(pool)) {
    int how = FIT_AS_IS;
    pthread_mutex_lock(&mtp__large_lock);
    mtpi_large_t *rec = cache_take(pool, map_size, alignment, &how);
    pthread_mutex_unlock(&mtp__large_lock);
    if (rec != NULL) {
      /* Out of the cache but still in the hash, marked cached: nobody else can take it, and a
       * stray free of its address is reported as a double free meanwhile. */
      void *old = rec->map, *m = old;
      size_t old_size = rec->map_size, new_size = old_size;
      if (!freed_fill_ok(rec)) /* the caller gets the mapping all the same */
        mtp__error(MTP_ERR_USE_AFTER_FREE, "use after free (a freed large block was written to)",
                   rec->ptr);
      if (how == FIT_GROW) {
        /* unpoisoned first: once moved, its old addresses may be mapped by another thread */
        mtp__track_unmap(old, old_size);
        m = mtp__os_remap(old, old_size, map_size);
        if (m != NULL) new_size = map_size;
      } else if (how == FIT_CUT) {
        mtp__track_unmap((char *)old + map_size, old_size - map_size);
        if (mtp__os_unmap((char *)old + map_size, old_size - map_size) == 0) {
          mtp__u64_add_relaxed(&pool->bytes_returned, old_size - map_size); /* a statistic */
          new_size = map_size;
        }
      }
      bool ok = m != NULL;
      pthread_mutex_lock(&mtp__large_lock);
      if (!ok || m != old) hash_remove(rec, old); /* re-filed below, or (refused) dropped */
      if (ok) {
        rec->map = rec->ptr = m;
        rec->map_size = new_size;
        if (m != old) hash_insert(rec);
        make_live(pool, rec, size);
      }
      pthread_mutex_unlock(&mtp__large_lock);
      if (ok) {
        mtp__track_unmap(rec->map, rec->map_size); /* unpoison: the caller's now */
        mtp__track_defined(rec->map, rec->map_size);
        return rec->ptr;
      }
      (void)unmap_rec(rec);
    }
  }
  mtpi_large_t *rec = mtp__meta_alloc(sizeof(*rec));
  if (rec == NULL) return NULL;
  void *m = mtp__os_map(map_size, alignment > os_page ? alignment : os_page);
  if (m == NULL) {
    mtp__meta_free(rec, sizeof(*rec));
    errno = ENOMEM;
    return NULL;
  }
  mtp__track_unmap(m, map_size); /* no stale poison from an earlier mapping there */
  if (pool->check) memset((char *)m + size, CANARY, map_size - size);
  rec->ptr = rec->map = m;
  rec->map_size = map_size;
  rec->pool = pool;
  pthread_mutex_lock(&mtp__large_lock);
  hash_insert(rec);
  make_live(pool, rec, size);
  pthread_mutex_unlock(&mtp__large_lock);
  return m;
}

void *mtp__large_alloc(mtpi_pool_t *pool, size_t size, size_t alignment) {
  return large_alloc(pool, size, 0, alignment);
}

void *mtp__large_alloc_room(mtpi_pool_t *pool, size_t size, size_t room) {
  return large_alloc(pool, size, room, 0);
}

/* Large lock held: the LIVE record leaves the pool's live list and counters. */
static void unlive(mtpi_pool_t *pool, mtpi_large_t *rec) {
  mtp__list_remove(&pool->large, &rec->link);
  pool->large_count--;
  pool->large_bytes -= rec->map_size;
}

/* Large lock held: cache the record just taken off the live list if the bound allows, evicting
 * the oldest as needed onto *evict; false if it is not cached (the caller unmaps it). */
static bool cache_put(mtpi_pool_t *pool, mtpi_large_t *rec, mtpi_large_t **evict) {
  size_t cap = CACHE_FLOOR + pool->large_bytes / 4;
  if (!caches(pool) || rec->map_size > cap) return false;
  while (pool->large_cache != NULL && (pool->large_cached_count >= MAX_CACHED ||
                                       pool->large_cached_bytes + rec->map_size > cap)) {
    mtpi_large_t *old = rec_of(mtp__list_last(pool->large_cache));
    drop_cached(pool, old);
    old->hash_next = *evict;
    *evict = old;
  }
  /* Poisoned for ASan before it is visible in the cache: once the lock is released another thread
   * may take it and unpoison it for its own use. */
  memset(rec->ptr, FREED_FILL, freed_span(rec));
  mtp__track_poison(rec->map, rec->map_size);
  rec->cached = true;
  rec->free_time_ms = mtp__os_now_ms();
  mtp__list_push(&pool->large_cache, &rec->link);
  pool->large_cached_count++;
  pool->large_cached_bytes += rec->map_size;
  return true;
}

int mtp__large_free(void *p, size_t size, bool sized) {
  pthread_mutex_lock(&mtp__large_lock);
  mtpi_large_t *rec = *find(p);
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
  unlive(pool, rec);
  mtpi_large_t *evict = NULL;
  bool cached = cache_put(pool, rec, &evict);
  if (!cached) hash_remove(rec, p);
  pthread_mutex_unlock(&mtp__large_lock);
  if (!cached) (void)unmap_rec(rec);
  (void)unmap_list(evict);
  return cached && pool->purge_delay_ms > 0 ? MTP_LARGE_CACHED : MTP_LARGE_FREED;
}

bool mtp__large_lookup(const void *p, size_t *usable, mtpi_pool_t **pool_out) {
  pthread_mutex_lock(&mtp__large_lock);
  mtpi_large_t *rec = *find(p);
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
  pthread_mutex_lock(&mtp__large_lock);
  mtpi_large_t *rec = *find(p);
  bool ok = rec != NULL && !rec->cached && !rec->pool->check && rec->ptr == rec->map;
  void *old = ok ? rec->map : NULL;
  size_t old_size = ok ? rec->map_size : 0;
  pthread_mutex_unlock(&mtp__large_lock);
  if (!ok) return NULL;
  /* The block is the caller's: no other thread may touch its record until this returns. */
  size_t new_size = old_size;
  void *m = old;
  if (need > old_size) { /* grow, with room for more */
    m = mtp__os_remap(old, old_size, want);
    if (m == NULL) return NULL;
    mtp__track_unmap(m, want); /* all of it the caller's (no stale poison where it grew) */
    new_size = want;
  } else if (old_size - need > old_size / 4) { /* shrink: give the tail back, in place */
    if (mtp__os_unmap((char *)old + need, old_size - need) == 0) {
      mtp__u64_add_relaxed(&rec->pool->bytes_returned, old_size - need); /* a statistic */
      new_size = need;
    }
  }
  pthread_mutex_lock(&mtp__large_lock);
  mtpi_pool_t *pool = rec->pool;
  pool->large_bytes = pool->large_bytes - old_size + new_size;
  if (m != old) { /* a block that moved counts as an allocation and a free, as a copy does */
    hash_remove(rec, old);
    rec->map = rec->ptr = m;
    hash_insert(rec);
    pool->large_allocs++;
  }
  rec->map_size = new_size;
  rec->size = size;
  pthread_mutex_unlock(&mtp__large_lock);
  return m;
}

size_t mtp__large_purge(mtpi_pool_t *pool, uint64_t older_than_ms, bool *left) {
  mtpi_large_t *evict = NULL;
  pthread_mutex_lock(&mtp__large_lock);
  mtpi_node_t *next;
  for (mtpi_node_t *it = pool->large_cache; it; it = next) {
    next = it->next;
    mtpi_large_t *rec = rec_of(it);
    if (rec->free_time_ms > older_than_ms) continue;
    drop_cached(pool, rec);
    rec->hash_next = evict;
    evict = rec;
  }
  if (left) *left = pool->large_cache != NULL;
  pthread_mutex_unlock(&mtp__large_lock);
  return unmap_list(evict); /* counted in bytes_returned there */
}

void mtp__large_destroy_pool(mtpi_pool_t *pool) {
  pthread_mutex_lock(&mtp__large_lock);
  while (pool->large) {
    mtpi_large_t *rec = rec_of(pool->large);
    unlive(pool, rec);
    hash_remove(rec, rec->ptr);
    (void)unmap_rec(rec);
  }
  while (pool->large_cache) {
    mtpi_large_t *rec = rec_of(pool->large_cache);
    drop_cached(pool, rec);
    (void)unmap_rec(rec);
  }
  pthread_mutex_unlock(&mtp__large_lock);
}
