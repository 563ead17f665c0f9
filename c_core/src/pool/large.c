/* Large blocks: requests above the largest size class (or with an alignment no class offers) get
 * a mapping of their own, unmapped on free. A hash of their addresses, under one lock, tells a
 * large block from a pointer mtpool never gave out; each pool lists its own so that destroying
 * the pool unmaps them all. A block's record is an internal record (base/meta.c): out of band, and
 * behind a guard page, so an overflow past the block's mapping cannot reach it. Layer: pool. */
#include <errno.h>
#include <string.h>

#include "base/os.h"
#include "pool.h"

#define HASH_BITS 12
#define CANARY 0xCA
#define CHECK_SLACK 16 /* checked mode: canary bytes after the requested size */

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

void *mtp__large_alloc(mtpi_pool_t *pool, size_t size, size_t alignment) {
  size_t need = size + (pool->check ? CHECK_SLACK : 0);
  if (need < size || need > SIZE_MAX / 2) {
    errno = ENOMEM;
    return NULL;
  }
  size_t os_page = mtp__os_page_size();
  size_t map_size = (need + os_page - 1) & ~(os_page - 1);
  if (map_size == 0) map_size = os_page;
  mtpi_large_t *rec = mtp__meta_alloc(sizeof(*rec));
  if (rec == NULL) return NULL;
  void *m = mtp__os_map(map_size, alignment > os_page ? alignment : os_page);
  if (m == NULL) {
    mtp__meta_free(rec, sizeof(*rec));
    errno = ENOMEM;
    return NULL;
  }
  if (pool->check) memset((char *)m + size, CANARY, map_size - size);
  rec->ptr = rec->map = m;
  rec->map_size = map_size;
  rec->size = size;
  rec->pool = pool;
  pthread_mutex_lock(&mtp__large_lock);
  mtpi_large_t **pp = find(m);
  rec->hash_next = *pp;
  *pp = rec;
  mtp__list_push(&pool->large, &rec->link);
  pool->large_count++;
  pool->large_bytes += map_size;
  pool->large_allocs++;
  pthread_mutex_unlock(&mtp__large_lock);
  return m;
}

static void unlink_rec(mtpi_large_t **pp, mtpi_large_t *rec) {
  *pp = rec->hash_next;
  mtpi_pool_t *pool = rec->pool;
  mtp__list_remove(&pool->large, &rec->link);
  pool->large_count--;
  pool->large_bytes -= rec->map_size;
}

/* Unmap a block whose record is unlinked, and free the record. */
static void unmap_rec(mtpi_large_t *rec) {
  /* munmap of our own whole mapping fails only if the kernel is out of memory to split a
   * mapping: the address space then stays mapped and is not counted as returned. */
  if (mtp__os_unmap(rec->map, rec->map_size) == 0)
    mtp__u64_add_relaxed(&rec->pool->bytes_returned, rec->map_size); /* relaxed: a statistic */
  mtp__meta_free(rec, sizeof(*rec));
}

bool mtp__large_free(void *p, size_t size, bool sized) {
  pthread_mutex_lock(&mtp__large_lock);
  mtpi_large_t **pp = find(p), *rec = *pp;
  if (rec == NULL) {
    pthread_mutex_unlock(&mtp__large_lock);
    return false;
  }
  int err = 0;
  const char *what = NULL;
  if (sized) {
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
    return true;
  }
  unlink_rec(pp, rec);
  pthread_mutex_unlock(&mtp__large_lock);
  unmap_rec(rec);
  return true;
}

bool mtp__large_lookup(const void *p, size_t *usable, mtpi_pool_t **pool_out) {
  pthread_mutex_lock(&mtp__large_lock);
  mtpi_large_t *rec = *find(p);
  if (rec) {
    *usable = rec->pool->check ? rec->size
                               : rec->map_size - (size_t)((char *)rec->ptr - (char *)rec->map);
    if (pool_out) *pool_out = rec->pool;
  }
  pthread_mutex_unlock(&mtp__large_lock);
  return rec != NULL;
}

void mtp__large_destroy_pool(mtpi_pool_t *pool) {
  pthread_mutex_lock(&mtp__large_lock);
  while (pool->large) {
    mtpi_large_t *rec = MTP_CONTAINER(pool->large, mtpi_large_t, link);
    unlink_rec(find(rec->ptr), rec);
    unmap_rec(rec);
  }
  pthread_mutex_unlock(&mtp__large_lock);
}
