/* The ranges of large blocks (large.c has the blocks): the records' hash under the large lock,
 * the cache of free ranges, a pool's reserve of fresh address space, and unmapping.
 *
 * Ranges and mappings. Every record describes a range of pages [map, map + map_size) that lies in
 * one kernel mapping, named by the record's `origin` (a number, never reused): a fresh mmap starts
 * an origin; a range split off a record keeps its origin; a range that mremap moved starts a new
 * one. Records' ranges never overlap. So munmap of a record's range is always valid, and so is
 * mremap (the range is inside one mapping), and two free ranges merge only within one origin.
 *
 * The cache of free ranges. A freed block's range is kept (CACHED, see types.h) instead of being
 * unmapped, merged with the free ranges of its origin just before and after it, and a later large
 * allocation of the same pool reuses it: no mmap, no munmap, and its pages are not faulted in
 * again. Rules:
 *   - a fresh range of up to 4 MiB is carved from the pool's reserve (below), a bigger one mapped
 *     on its own.
 *   - take the smallest free range that holds the request (the largest, for a block realloc
 *     grows: it will want the room after it); as is when at most 1/16 larger (the usable size
 *     reported is the whole range, so it stays true), else split: the block takes the head, the
 *     tail stays cached (no system call; its pages stay resident for the next big request). Else
 *     map afresh. mremap only where it saves a copy, in realloc.
 *   - realloc grows a block into the free range just after it (same origin) without a system
 *     call; else by mremap, with room for an eighth more (a growing buffer usually grows again).
 *     A block that shrinks by more than a quarter gives its tail to the cache.
 *   - bound: a pool keeps at most MAX_CACHED free ranges and at most CACHE_FLOOR bytes plus
 *     half the bytes its live large blocks take; the oldest go first. The floor lets a program
 *     that frees and allocates a few blocks of several MiB in a loop (the common pattern) reuse
 *     them; the proportional part lets one with many large blocks keep its turnover (a quarter
 *     sent most ranges of a churn of random sizes back to the OS, to be faulted in again:
 *     bench/results/notes.md: large_ranges.c) without ever more than 1.5x its large-block
 *     footprint, and that only within the purge's delay.
 *   - a free range goes back to the OS (munmap, counted in bytes_returned then) a tenth of the
 *     pool's purge delay after its free (its free time is stamped that much early,
 *     mtp__run_freed_at, base/base.h says why; a merged range counts from its newest free; the
 *     purge thread, purge.c), at trim and at pool destroy. A pool with a delay of 0 caches
 *     nothing. A checked pool caches nothing for reuse: it quarantines
 *     (mtp__large_quarantine_put) a freed block's range, inaccessible, so that a late access
 *     faults, the address is not handed out again at once and a second free is reported as a
 *     double free.
 * Free ranges are poisoned for AddressSanitizer while cached. Layer: pool. */
#define _GNU_SOURCE /* glibc's adaptive mutex initializer */

#include "base/fill.h"
#include "base/os.h"
#include "base/track.h"
#include "large_ranges.h"

#define HASH_BITS 12
#define MAX_CACHED MTP_LARGE_MAX_CACHED /* free ranges a pool keeps; bounds the best-fit search */
/* Bytes a pool may keep whatever it has in use: room for a few threads churning blocks of several
 * MiB to find a range that fits, rather than unmap the oldest and fault fresh mappings in
 * (bench/results/notes.md: large.c). Memory above the live blocks still goes back after a tenth of
 * the purge delay. */
#define CACHE_FLOOR ((size_t)64 << 20)
#define QUARANTINE_MAX ((size_t)32 << 20) /* checked pools: bytes of freed blocks held back */

/* Spins a while before it sleeps, as a pool's lock does (mtp__os_lock_init says why). */
#ifdef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
pthread_mutex_t mtp__large_lock = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP;
#else
pthread_mutex_t mtp__large_lock = PTHREAD_MUTEX_INITIALIZER;
#endif
static mtpi_large_t *hash[1u << HASH_BITS];

static unsigned hash_of(const void *p) {
  uint64_t x = (uint64_t)(uintptr_t)p >> 12; /* mappings are at least 4 KiB apart */
  return (unsigned)((x * 0x9E3779B97F4A7C15ull) >> (64 - HASH_BITS));
}

mtpi_large_t **mtp__large_find(const void *p) {
  mtpi_large_t **pp = &hash[hash_of(p)];
  while (*pp && (*pp)->ptr != p) pp = &(*pp)->hash_next;
  return pp;
}

/* A record is filed at the head of its chain, so that the newest record for an address is found
 * first: while a thread moves a block (mremap, outside the lock), the old address may already be
 * mapped again by another thread, whose record then shadows the one about to move. */
void mtp__large_hash_insert(mtpi_large_t *rec) {
  unsigned h = hash_of(rec->ptr);
  rec->hash_next = hash[h];
  hash[h] = rec;
}

/* Unfile the record itself (not whatever record has its address: see mtp__large_hash_insert),
 * filed under the address `key`. */
void mtp__large_hash_remove(mtpi_large_t *rec, const void *key) {
  mtpi_large_t **pp = &hash[hash_of(key)];
  while (*pp != rec) pp = &(*pp)->hash_next;
  *pp = rec->hash_next;
}

/* Large lock held: rec (not cached, its range final) joins the pool's cache list, newest first,
 * and the search index. The caller has made room (MAX_CACHED). */
static void cache_insert(mtpi_pool_t *pool, mtpi_large_t *rec) {
  MTP_ASSERT(pool->large_cached_count < MAX_CACHED);
  rec->cached = true;
  rec->slot = (uint32_t)pool->large_cached_count++;
  pool->large_slots[rec->slot] = (mtpi_large_slot_t){rec->map, rec->map_size, rec->origin, rec};
  mtp__list_push(&pool->large_cache, &rec->link);
  pool->large_cached_bytes += rec->map_size;
}

/* Large lock held: take a cached record out of the cache list and the index (the last entry
 * takes its slot); it stays in the hash. */
static void uncache(mtpi_pool_t *pool, mtpi_large_t *rec) {
  MTP_ASSERT(rec->slot < pool->large_cached_count && pool->large_slots[rec->slot].rec == rec);
  mtp__list_remove(&pool->large_cache, &rec->link);
  mtpi_large_slot_t *last = &pool->large_slots[--pool->large_cached_count];
  pool->large_slots[rec->slot] = *last;
  last->rec->slot = rec->slot;
  pool->large_cached_bytes -= rec->map_size;
}

/* Large lock held: a cached record leaves the hash too; the caller unmaps it
 * (mtp__large_unmap_rec). */
void mtp__large_drop_cached(mtpi_pool_t *pool, mtpi_large_t *rec) {
  uncache(pool, rec);
  mtp__large_hash_remove(rec, rec->ptr);
}

/* Unmap a record's mapping (it is in no list and not in the hash) and free the record. Returns
 * the bytes that went back to the OS. */
size_t mtp__large_unmap_rec(mtpi_large_t *rec) {
  size_t n = rec->map_size;
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
size_t mtp__large_unmap_list(mtpi_large_t *list) {
  size_t n = 0;
  while (list) {
    mtpi_large_t *next = list->hash_next;
    n += mtp__large_unmap_rec(list);
    list = next;
  }
  return n;
}

uint64_t mtp__large_origin_count; /* large lock: the last origin handed out (types.h) */

/* The reserve. A pool that caches carves fresh ranges of up to MTP_LARGE_RESERVE_TAKE_MAX bytes,
 * in address order, from one mapping of MTP_LARGE_RESERVE_BYTES it keeps (pool->large_reserve*,
 * large lock), instead of mapping each: far fewer mmap calls (bench/results/notes.md: large.c).
 * Carved ranges share the reserve's origin, so free neighbours merge as split ranges do. The rest
 * of the reserve is address space no one has touched (so a range carved from it reads as zero, as
 * calloc needs) and is not in the statistics; trim and destroy unmap it. Its sizes:
 * large_ranges.h. */

/* Huge pages for large blocks (the rule: base.h). The reserve and every range mapped for one block
 * are aligned to the huge page size, so that each aligned huge range of them can be one huge page.
 * Fresh large memory gets the advice of memory not yet found dense (mtp__huge_fresh_advice): no
 * block is huge before it is written, but for a block found dense from its start and the blocks
 * mapped for themselves that follow a dense one (mtp__large_own_advice). A LIVE block of a huge
 * range or more is looked at on the purge passes after its allocation (mtp__large_look_start;
 * again after LOOK_FIRST_MS, doubling up to LOOK_LAST_MS, then no more): a look reads up to
 * LOOK_BYTES of it from where the last stopped (mincore, large lock held), and each aligned huge
 * range found MTP_HUGE_DENSE_NUM/DEN resident is collapsed into one huge page (after the lock is
 * dropped). A block's first look that finds the ranges before the one being written (two at
 * least) dense advises it huge, whole (a buffer filled front to back faults its rest in 2 MiB at a
 * time).
 * Returns the huge page size where large blocks may have huge pages, else 0. */
#define LOOK_FIRST_MS 100u
#define LOOK_LAST_MS 6400u
#define LOOK_BYTES ((size_t)16 << 20)
#define LOOK_COLLAPSES 4 /* per pass: a collapse copies up to a huge page */
static size_t huge_size(void) {
  size_t hsize = mtp__os_huge_page_size();
  if (mtp__hugepages_mode() == MTP_HUGE_SYSTEM || hsize < mtp__os_page_size() ||
      hsize > MTP_LARGE_RESERVE_BYTES / 8 || (hsize & (hsize - 1)) != 0)
    return 0;
  return hsize;
}

size_t mtp__large_huge_size(void) { return huge_size(); }

int mtp__large_fresh_advice(mtpi_pool_t *pool, size_t size) {
  (void)pool;
  if (huge_size() == 0 || size < huge_size()) return -1;
  return mtp__huge_fresh_advice(false);
}

/* Blocks above MTP_LARGE_RESERVE_TAKE_MAX are mapped for themselves, and the ones freed before
 * say how the next are used: a block mapped unadvised is a probe, which its free judges by its
 * first LOOK_BYTES (mincore). Found MTP_HUGE_DENSE_NUM/DEN resident, the pool's next own mappings
 * are advised huge from their first byte, all but one in PROBE_EVERY, left unadvised to be judged
 * in turn; found sparser, none is. A program that fills big buffers and frees them faults them in
 * 2 MiB at a time (bench/results/notes.md: malloc-large), while the reserve's blocks, up to 4 MiB,
 * never get this advice (a verdict that advised the reserve made an LDAP server's memory 4.9x
 * glibc's: bench/results/notes.md). */
#define PROBE_EVERY 32
int mtp__large_own_advice(mtpi_pool_t *pool, size_t size, bool *probe) {
  int advice = mtp__large_fresh_advice(pool, size);
  *probe = false;
  if (advice == 1 || size <= MTP_LARGE_RESERVE_TAKE_MAX || size < 2 * huge_size() ||
      !mtp__huge_collapses() || pool->check)
    return advice;
  if (mtp__u8_load_relaxed(&pool->large_dense) &&
      mtp__u64_fetch_add_relaxed(&pool->large_own_maps, 1) % PROBE_EVERY != PROBE_EVERY - 1)
    return mtp__huge_fresh_advice(true);
  *probe = true;
  return advice;
}

void mtp__large_look_start(mtpi_pool_t *pool, mtpi_large_t *rec) {
  /* the purge passes look: a pool without them (a delay of 0 or less) is not looked at */
  if (huge_size() == 0 || !mtp__huge_collapses() || rec->map_size < huge_size() ||
      pool->purge_delay_ms <= 0)
    return;
  rec->look_next_ms = mtp__os_now_ms();
  rec->look_backoff_ms = LOOK_FIRST_MS;
  rec->look_at = 0;
  pool->large_looking++;
}

void mtp__large_look_stop(mtpi_pool_t *pool, mtpi_large_t *rec) {
  if (rec->look_backoff_ms == 0) return;
  rec->look_backoff_ms = 0;
  pool->large_looking--;
}

void mtp__large_forget_looks(mtpi_pool_t *pool) {
  for (mtpi_node_t *it = pool->large; it != NULL && pool->large_looking != 0; it = it->next)
    mtp__large_look_stop(pool, mtp__large_rec_of(it));
}

/* What mincore says of a look's or a judge's bytes (large lock held; pages of 4 KiB at least). */
static unsigned char look_vec[LOOK_BYTES / 4096];

void mtp__large_judge(mtpi_pool_t *pool, const mtpi_large_t *rec) {
  size_t page = mtp__os_page_size();
  size_t len = (rec->map_size < LOOK_BYTES ? rec->map_size : LOOK_BYTES) & ~(page - 1);
  if (len == 0 || page * sizeof look_vec < len ||
      mtp__os_resident_map(rec->map, len, look_vec) != 0)
    return;
  size_t got = 0;
  for (size_t i = 0; i < len / page; i++) got += look_vec[i] & 1;
  mtp__u8_store_relaxed(&pool->large_dense,
                        got * MTP_HUGE_DENSE_DEN >= (len / page) * MTP_HUGE_DENSE_NUM);
}

/* Large lock held (the block is not freed meanwhile): the look at rec; the dense ranges it found
 * that the caller collapses once the lock is dropped go into todo (at most *n more). */
static void look_one(mtpi_large_t *rec, char **todo, unsigned *n) {
  unsigned char *vec = look_vec;
  size_t page = mtp__os_page_size(), hsize = huge_size();
  uintptr_t first = ((uintptr_t)rec->map + hsize - 1) & ~(uintptr_t)(hsize - 1);
  uintptr_t end = ((uintptr_t)rec->map + rec->map_size) & ~(uintptr_t)(hsize - 1);
  if (rec->look_at >= end - first) rec->look_at = 0;
  char *at = (char *)first + rec->look_at;
  size_t len = end - first - rec->look_at;
  if (len > LOOK_BYTES) len = LOOK_BYTES;
  rec->look_at += len;
  if (len == 0 || page * sizeof look_vec < len || mtp__os_resident_map(at, len, vec) != 0)
    return;
  bool dense[64];
  size_t per = hsize / page, ranges = len / hsize, last = 0; /* last: ranges up to a resident page */
  if (ranges > sizeof dense) ranges = sizeof dense;
  for (size_t k = 0; k < ranges; k++) {
    size_t got = 0;
    for (size_t i = k * per; i < (k + 1) * per; i++) got += vec[i];
    dense[k] = got * MTP_HUGE_DENSE_DEN >= per * MTP_HUGE_DENSE_NUM;
    if (got != 0) last = k + 1;
    if (!dense[k] || *n == LOOK_COLLAPSES) continue;
    /* where fresh memory is advised against huge pages (THP "always"), the collapse needs advice */
    if (mtp__huge_fresh_advice(false) == 0) (void)mtp__os_huge_advise(at + k * hsize, hsize, true);
    todo[(*n)++] = at + k * hsize;
  }
  if (last == 0) { /* nothing written there: a block not yet begun is looked at from its start */
    if (rec->look_at == len) rec->look_at = 0;
    return;
  }
  /* the ranges before the last written one (the last may be being written) */
  bool all = true;
  for (size_t k = 0; k + 1 < last; k++) all = all && dense[k];
  /* written densely from its start to its last written range: the block grows into huge pages.
   * The advice covers its whole range, not only the rest: a range advised in part is two kernel
   * mappings, which mremap cannot grow across, so a cached range that a later block reuses would
   * be mapped and faulted in afresh instead (bench/results/notes.md: malloc-large) */
  char *rest = at + (last - 1) * hsize + (dense[last - 1] ? hsize : 0);
  if (all && last >= 2 && !rec->huge_rest && rec->look_at == len && (uintptr_t)rest < end &&
      mtp__huge_fresh_advice(true) == 1 && mtp__os_huge_advise(rec->map, rec->map_size, true) == 0)
    rec->huge_rest = true;
}

/* Large lock held: a pass over the pool's LIVE records being looked at; the ranges to collapse
 * into todo (LOOK_COLLAPSES), their count returned. */
static unsigned look_pass(mtpi_pool_t *pool, char **todo) {
  size_t left = pool->large_looking;
  unsigned n = 0;
  uint64_t now_ms = mtp__os_now_ms();
  for (mtpi_node_t *it = pool->large; it != NULL && left != 0; it = it->next) {
    mtpi_large_t *rec = mtp__large_rec_of(it);
    if (rec->look_backoff_ms == 0) continue;
    left--;
    if (rec->look_next_ms > now_ms) continue;
    look_one(rec, todo, &n);
    rec->look_next_ms = now_ms + rec->look_backoff_ms;
    if (rec->look_backoff_ms >= LOOK_LAST_MS)
      mtp__large_look_stop(pool, rec);
    else
      rec->look_backoff_ms *= 2;
  }
  return n;
}

size_t mtp__large_grow_huge(mtpi_pool_t *pool, size_t new_size) {
  return mtp__large_fresh_advice(pool, new_size) == 1 ? huge_size() : 0;
}

/* Large lock held: `size` bytes off the reserve's head (and *origin), or NULL. */
static char *reserve_carve(mtpi_pool_t *pool, size_t size, uint64_t *origin) {
  if (pool->large_reserve_left < size) return NULL;
  char *m = pool->large_reserve;
  pool->large_reserve += size;
  pool->large_reserve_left -= size;
  *origin = pool->large_reserve_origin;
  return m;
}

/* A fresh range of `size` bytes from pool's reserve, a new reserve mapped (no lock held across
 * the call) when the one there is short; NULL if the OS has none (the caller maps its own). */
char *mtp__large_reserve_take(mtpi_pool_t *pool, size_t size, uint64_t *origin) {
  pthread_mutex_lock(&mtp__large_lock);
  char *m = reserve_carve(pool, size, origin);
  pthread_mutex_unlock(&mtp__large_lock);
  if (m != NULL) return m;
  size_t hsize = huge_size();
  char *fresh = mtp__os_map(MTP_LARGE_RESERVE_BYTES, hsize ? hsize : mtp__os_page_size());
  if (fresh == NULL) return NULL;
  int advice = mtp__large_fresh_advice(pool, MTP_LARGE_RESERVE_BYTES);
  if (advice >= 0) (void)mtp__os_huge_advise(fresh, MTP_LARGE_RESERVE_BYTES, advice == 1);
  pthread_mutex_lock(&mtp__large_lock);
  char *old = pool->large_reserve; /* another thread's, if two ran short at once */
  size_t old_left = pool->large_reserve_left;
  pool->large_reserve = fresh;
  pool->large_reserve_left = MTP_LARGE_RESERVE_BYTES;
  pool->large_reserve_origin = ++mtp__large_origin_count;
  m = reserve_carve(pool, size, origin);
  pthread_mutex_unlock(&mtp__large_lock);
  if (old_left != 0) (void)mtp__os_unmap(old, old_left); /* never touched: nothing to count */
  return m;
}

/* Large lock held: the reserve's rest leaves the pool; the caller unmaps [*at, *at + *len). */
void mtp__large_reserve_drop(mtpi_pool_t *pool, char **at, size_t *len) {
  *at = pool->large_reserve;
  *len = pool->large_reserve_left;
  pool->large_reserve = NULL;
  pool->large_reserve_left = 0;
}

/* The freed pattern (base/fill.h) on a cached range's first bytes. Every record entering the
 * cache gets it (a freed block, a split tail, a remainder) and it is verified when the range is
 * handed out again, so a write after free into the start of a large block is reported then. No
 * system call; writes further in and reads are not found. A range is at least an OS page and ptr
 * is its start, so the pattern always fits. The range may be poisoned: peeked around. */
static void freed_fill(mtpi_large_t *rec) {
  mtp__track_peek(rec->ptr, MTP_FREED_BYTES);
  mtp__fill_freed(rec->ptr);
  mtp__track_unpeek(rec->ptr, MTP_FREED_BYTES);
}

/* Outside the large lock: the record is out of the cache. A cached range is never purged in place
 * (it is unmapped), so all zero is a write too: the exact check. */
bool mtp__large_freed_fill_ok(mtpi_large_t *rec) {
  mtp__track_peek(rec->ptr, MTP_FREED_BYTES);
  bool ok = mtp__fill_exact(rec->ptr);
  mtp__track_unpeek(rec->ptr, MTP_FREED_BYTES);
  return ok;
}

/* Large lock held: put rec (out of the cache, in the hash) into the cache as it is: no bound
 * check, no merge (its bytes were counted there before it was taken out for a split). */
void mtp__large_cache_link(mtpi_pool_t *pool, mtpi_large_t *rec, uint64_t free_time_ms) {
  freed_fill(rec);
  rec->free_time_ms = free_time_ms;
  cache_insert(pool, rec);
}

/* Large lock held: cut rec's range at `at` bytes (OS-page aligned, inside it): rec keeps the head,
 * the tail's new record (same pool and origin; in no list, not in the hash) is returned; NULL when
 * no record could be had (rec is unchanged then). */
mtpi_large_t *mtp__large_split(mtpi_large_t *rec, size_t at) {
  mtpi_large_t *t = mtp__meta_alloc(sizeof(*t)); /* meta lock after the large lock: pool.h */
  if (t == NULL) return NULL;
  t->ptr = t->map = (char *)rec->map + at;
  t->map_size = rec->map_size - at;
  t->pool = rec->pool;
  t->origin = rec->origin;
  rec->map_size = at;
  return t;
}

/* Large lock held: a cached range for `need` bytes at `alignment` (0 or at most the OS page: any),
 * taken out of the cache, or NULL; `grow`: the block is expected to grow (realloc), so take the
 * largest range that fits rather than the smallest. A range more than 1/16 larger than needed is
 * split: its tail stays cached (so the usable size a reused range reports is within 1/16 of the
 * page-rounded request, as a fresh one's is within a page; or of the huge-page-rounded one, where
 * the block would be mapped huge on its own). */
mtpi_large_t *mtp__large_cache_take(mtpi_pool_t *pool, size_t need, size_t alignment, bool grow) {
  const mtpi_large_slot_t *best = NULL;
  size_t os_page = mtp__os_page_size();
  for (size_t i = 0; i < pool->large_cached_count; i++) {
    const mtpi_large_slot_t *r = &pool->large_slots[i];
    if (r->map_size < need || (alignment > os_page && ((uintptr_t)r->map & (alignment - 1)) != 0))
      continue;
    if (best == NULL || (grow ? r->map_size > best->map_size : r->map_size < best->map_size)) {
      best = r;
      if (!grow && r->map_size == need) break; /* no better fit */
    }
  }
  if (best == NULL) return NULL;
  mtpi_large_t *fit = best->rec;
  uncache(pool, fit);
  /* a range of whole huge pages for a block the pool would map huge on its own stays so (large.c:
   * own_length): the block takes whole huge pages too */
  size_t cut = need, h = huge_size();
  if (h != 0 && need > MTP_LARGE_RESERVE_TAKE_MAX && ((uintptr_t)fit->map & (h - 1)) == 0 &&
      (fit->map_size & (h - 1)) == 0 && mtp__large_fresh_advice(pool, need) == 1)
    cut = (need + h - 1) & ~(h - 1);
  if (fit->map_size - cut > need / 16) {
    /* the head for the block, the tail stays cached (no record to be had: the whole range) */
    mtpi_large_t *t = mtp__large_split(fit, cut);
    if (t != NULL) {
      mtp__large_hash_insert(t);
      mtp__large_cache_link(pool, t, fit->free_time_ms);
    }
  }
  return fit;
}

mtpi_large_t *mtp__large_cache_take_largest(mtpi_pool_t *pool, size_t least) {
  const mtpi_large_slot_t *best = NULL;
  for (size_t i = 0; i < pool->large_cached_count; i++) {
    const mtpi_large_slot_t *r = &pool->large_slots[i];
    if (r->map_size >= least && (best == NULL || r->map_size > best->map_size)) best = r;
  }
  if (best == NULL) return NULL;
  mtpi_large_t *rec = best->rec;
  mtp__large_drop_cached(pool, rec);
  return rec;
}

bool mtp__large_cache_holds(const mtpi_pool_t *pool, size_t need) {
  for (size_t i = 0; i < pool->large_cached_count; i++)
    if (pool->large_slots[i].map_size >= need) return true;
  return false;
}

/* Large lock held: cache the record just taken off the live list (still in the hash) if the bound
 * allows, merged with the cached ranges of its origin just before and after it, evicting the
 * oldest as needed onto *evict; false if it is not cached (the caller unhashes and unmaps it). A
 * record merged into the one before it is freed here: the caller must not touch rec after true. */
bool mtp__large_cache_put(mtpi_pool_t *pool, mtpi_large_t *rec, mtpi_large_t **evict) {
  size_t cap = CACHE_FLOOR + pool->large_bytes / 2;
  if (!mtp__large_caches(pool) || rec->map_size > cap) return false;
  /* Poisoned for ASan before it is visible in the cache: once the lock is released another thread
   * may take it and unpoison it for its own use. */
  mtp__track_poison(rec->map, rec->map_size);
  mtpi_large_t *before = NULL, *after = NULL;
  for (size_t i = 0; i < pool->large_cached_count; i++) {
    const mtpi_large_slot_t *r = &pool->large_slots[i];
    if (r->origin != rec->origin) continue;
    if (r->map + r->map_size == (char *)rec->map) before = r->rec;
    if ((char *)rec->map + rec->map_size == r->map) after = r->rec;
  }
  if (after != NULL && rec->map_size + after->map_size <= cap) {
    mtp__large_drop_cached(pool, after);
    rec->map_size += after->map_size;
    mtp__meta_free(after, sizeof(*after)); /* meta lock after the large lock: pool.h */
  }
  if (before != NULL && before->map_size + rec->map_size <= cap) {
    uncache(pool, before);
    before->map_size += rec->map_size;
    mtp__large_hash_remove(rec, rec->ptr);
    mtp__meta_free(rec, sizeof(*rec));
    rec = before;
  }
  while (pool->large_cache != NULL && (pool->large_cached_count >= MAX_CACHED ||
                                       pool->large_cached_bytes + rec->map_size > cap)) {
    mtpi_large_t *old = mtp__large_rec_of(mtp__list_last(pool->large_cache));
    mtp__large_drop_cached(pool, old);
    old->hash_next = *evict;
    *evict = old;
  }
  /* stamped as if freed earlier: due a tenth of the purge delay from now (base.h) */
  mtp__large_cache_link(pool, rec, mtp__run_freed_at(pool->purge_delay_ms, mtp__os_now_ms()));
  return true;
}

/* Large lock held: a checked pool's freed block (taken off the live list, still in the hash) stays
 * mapped but inaccessible (PROT_NONE), on the pool's cache list as CACHED so that a second free is
 * a double free and lookups skip it; never handed out again (checked pools do not take from the
 * cache). Bounded by the count and QUARANTINE_MAX (the oldest go onto *evict), and
 * unmapped by a purge after the delay, at trim and at destroy. false if the OS refused the
 * protection (the caller unmaps it). */
bool mtp__large_quarantine_put(mtpi_pool_t *pool, mtpi_large_t *rec, mtpi_large_t **evict) {
  if (rec->map_size > QUARANTINE_MAX || mtp__os_guard(rec->map, rec->map_size) != 0) return false;
  while (pool->large_cache != NULL && (pool->large_cached_count >= MAX_CACHED ||
                                       pool->large_cached_bytes + rec->map_size > QUARANTINE_MAX)) {
    mtpi_large_t *old = mtp__large_rec_of(mtp__list_last(pool->large_cache));
    mtp__large_drop_cached(pool, old);
    old->hash_next = *evict;
    *evict = old;
  }
  rec->free_time_ms = mtp__os_now_ms();
  cache_insert(pool, rec);
  return true;
}

size_t mtp__large_purge(mtpi_pool_t *pool, uint64_t older_than_ms, bool collapse, bool *left) {
  mtpi_large_t *evict = NULL;
  char *todo[LOOK_COLLAPSES];
  unsigned n_todo = 0;
  pthread_mutex_lock(&mtp__large_lock);
  mtpi_node_t *next;
  for (mtpi_node_t *it = pool->large_cache; it; it = next) {
    next = it->next;
    mtpi_large_t *rec = mtp__large_rec_of(it);
    if (rec->free_time_ms > older_than_ms) continue;
    mtp__large_drop_cached(pool, rec);
    rec->hash_next = evict;
    evict = rec;
  }
  if (collapse && pool->large_looking != 0) n_todo = look_pass(pool, todo);
  if (left) *left = pool->large_cache != NULL || pool->large_looking != 0;
  char *rest = NULL;
  size_t rest_len = 0;
  if (older_than_ms == UINT64_MAX) mtp__large_reserve_drop(pool, &rest, &rest_len); /* trim */
  /* counted returned before the lock goes, so that a statistics reader that finds them gone from
   * the cache finds them returned; a failed unmap below takes its count back */
  size_t going = 0;
  for (mtpi_large_t *r = evict; r; r = r->hash_next) going += r->map_size;
  mtp__u64_add_relaxed(&pool->bytes_returned, going); /* relaxed: the lock orders it */
  pthread_mutex_unlock(&mtp__large_lock);
  /* Collapsed without the lock: a collapse changes no byte of whatever holds the range now (a
   * block freed meanwhile: its range is cached, or unmapped and the call fails). */
  for (unsigned k = 0; k < n_todo; k++) (void)mtp__os_huge_collapse(todo[k], huge_size());
  if (rest_len != 0) (void)mtp__os_unmap(rest, rest_len);
  while (evict) {
    mtpi_large_t *next = evict->hash_next;
    if (mtp__os_unmap(evict->map, evict->map_size) != 0) { /* still mapped: not returned */
      going -= evict->map_size;
      mtp__u64_add_relaxed(&pool->bytes_returned, (uint64_t)0 - evict->map_size);
    }
    mtp__meta_free(evict, sizeof(*evict));
    evict = next;
  }
  return going;
}
