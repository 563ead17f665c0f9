/* What large_ranges.c gives large.c: the records' hash, the cache of free ranges, the reserve and
 * unmapping (the rules are at the top of large_ranges.c). Included by those two files only.
 * Layer: pool (inside the room). */
#ifndef MTP_POOL_LARGE_RANGES_H
#define MTP_POOL_LARGE_RANGES_H

#include "pool.h"

#pragma GCC visibility push(hidden)

/* The reserve is one mapping of MTP_LARGE_RESERVE_BYTES. */
#define MTP_LARGE_RESERVE_BYTES ((size_t)64 << 20)
/* Blocks up to 4 MiB are carved; bigger ones, which programs keep few of and may barely touch, are
 * mapped on their own: carved, they held more memory resident (bench/results/notes.md: large.c). */
#define MTP_LARGE_RESERVE_TAKE_MAX (MTP_LARGE_RESERVE_BYTES / 16)

static inline mtpi_large_t *mtp__large_rec_of(mtpi_node_t *n) {
  return MTP_CONTAINER(n, mtpi_large_t, link);
}

/* Whether pool keeps freed ranges for reuse: not checked, and a purge delay above 0. */
static inline bool mtp__large_caches(const mtpi_pool_t *pool) {
  return !pool->check && pool->purge_delay_ms != 0;
}

/* ---- the records' hash (large lock held) ---- */
extern uint64_t mtp__large_origin_count;
/* Where the newest record filed under p is linked (*result NULL: none). */
mtpi_large_t **mtp__large_find(const void *p);
void mtp__large_hash_insert(mtpi_large_t *rec);
void mtp__large_hash_remove(mtpi_large_t *rec, const void *key);

/* ---- unmapping (large lock not held): each returns the bytes that went back to the OS ---- */
size_t mtp__large_unmap_rec(mtpi_large_t *rec);
size_t mtp__large_unmap_list(mtpi_large_t *list);

/* ---- the cache of free ranges and the reserve (large lock held unless said) ---- */
/* No lock held: a fresh range of `size` bytes from pool's reserve, or NULL. */
char *mtp__large_reserve_take(mtpi_pool_t *pool, size_t size, uint64_t *origin);
void mtp__large_reserve_drop(mtpi_pool_t *pool, char **at, size_t *len);
/* Huge pages (large_ranges.c): the huge page size where large blocks may have them, else 0; the
 * advice fresh large memory of `size` bytes gets in pool (mtp__huge_fresh_advice; -1 below a huge
 * page); the huge page size if a block realloc grows to new_size by a system call is to move to
 * a range aligned to huge pages, its room rounded up to them, and advised huge, else 0. */
size_t mtp__large_huge_size(void);
int mtp__large_fresh_advice(mtpi_pool_t *pool, size_t size);
/* The advice a range mapped for one block of `size` bytes gets (map_own); *probe: the block is
 * to be judged at its free (mtp__large_judge). No lock needed. */
int mtp__large_own_advice(mtpi_pool_t *pool, size_t size, bool *probe);
/* Large lock held: rec, a probe being freed, judged: the verdict for the pool's next own mappings. */
void mtp__large_judge(mtpi_pool_t *pool, const mtpi_large_t *rec);
size_t mtp__large_grow_huge(mtpi_pool_t *pool, size_t new_size);
/* rec was just made LIVE: looked at on the purge passes that follow if it is a huge range or more
 * (large_alloc's caller wakes the purger: mtp__purger_look); stop: rec leaves the LIVE records,
 * or its range changes without the lock held. */
void mtp__large_look_start(mtpi_pool_t *pool, mtpi_large_t *rec);
void mtp__large_look_stop(mtpi_pool_t *pool, mtpi_large_t *rec);
void mtp__large_drop_cached(mtpi_pool_t *pool, mtpi_large_t *rec);
/* Large lock not held: whether the freed pattern on a range just taken from the cache is intact. */
bool mtp__large_freed_fill_ok(mtpi_large_t *rec);
void mtp__large_cache_link(mtpi_pool_t *pool, mtpi_large_t *rec, uint64_t free_time_ms);
mtpi_large_t *mtp__large_split(mtpi_large_t *rec, size_t at);
mtpi_large_t *mtp__large_cache_take(mtpi_pool_t *pool, size_t need, size_t alignment, bool grow);
/* The largest cached range of at least `least` bytes, out of the cache and the hash (the caller
 * grows it into a block, or unmaps it), or NULL. */
mtpi_large_t *mtp__large_cache_take_largest(mtpi_pool_t *pool, size_t least);
/* Whether the cache holds a free range of at least `need` bytes. */
bool mtp__large_cache_holds(const mtpi_pool_t *pool, size_t need);
bool mtp__large_cache_put(mtpi_pool_t *pool, mtpi_large_t *rec, mtpi_large_t **evict);
bool mtp__large_quarantine_put(mtpi_pool_t *pool, mtpi_large_t *rec, mtpi_large_t **evict);

#pragma GCC visibility pop

#endif
