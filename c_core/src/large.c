/* Large blocks: requests above the largest size class (or with an alignment no class offers) get
 * a mapping of their own, unmapped on free. A hash of their addresses, under one lock, tells a
 * large block from a pointer mtpool never gave out; each pool lists its own so that destroying
 * the pool unmaps them all. Calls os.c and meta.c. */
#include <errno.h>
#include <string.h>

#include "internal.h"
#include "os.h"

#define HASH_BITS 12
#define CANARY 0xCA
#define CHECK_SLACK 16 /* checked mode: canary bytes after the requested size */

pthread_mutex_t mtp__large_lock = PTHREAD_MUTEX_INITIALIZER;
static mtp_large_t *hash[1u << HASH_BITS];

static unsigned hash_of(const void *p) {
  uint64_t x = (uint64_t)(uintptr_t)p >> 12;
  return (unsigned)((x * 0x9E3779B97F4A7C15ull) >> (64 - HASH_BITS));
}

static mtp_large_t **find(const void *p) {
  mtp_large_t **pp = &hash[hash_of(p)];
  while (*pp && (*pp)->ptr != p) pp = &(*pp)->hash_next;
  return pp;
}

void *mtp__large_alloc(mtp_pool_internal_t *pool, size_t size, size_t alignment) {
  size_t need = size + (pool->check ? CHECK_SLACK : 0);
  if (need < size || need > SIZE_MAX / 2) {
    errno = ENOMEM;
    return NULL;
  }
  size_t map_size = (need + MTP_OS_PAGE - 1) & ~(size_t)(MTP_OS_PAGE - 1);
  if (map_size == 0) map_size = MTP_OS_PAGE;
  mtp_large_t *rec = mtp__meta_alloc(sizeof(*rec));
  if (rec == NULL) return NULL;
  void *m = mtp__os_map(map_size, alignment > MTP_OS_PAGE ? alignment : MTP_OS_PAGE);
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
  mtp_large_t **pp = find(m);
  rec->hash_next = *pp;
  *pp = rec;
  rec->pool_prev = NULL;
  rec->pool_next = pool->large;
  if (pool->large) pool->large->pool_prev = rec;
  pool->large = rec;
  pool->large_count++;
  pool->large_bytes += map_size;
  pool->large_allocs++;
  pthread_mutex_unlock(&mtp__large_lock);
  return m;
}

static void unlink_rec(mtp_large_t **pp, mtp_large_t *rec) {
  *pp = rec->hash_next;
  mtp_pool_internal_t *pool = rec->pool;
  if (rec->pool_prev)
    rec->pool_prev->pool_next = rec->pool_next;
  else
    pool->large = rec->pool_next;
  if (rec->pool_next) rec->pool_next->pool_prev = rec->pool_prev;
  pool->large_count--;
  pool->large_bytes -= rec->map_size;
  __atomic_fetch_add(&pool->bytes_returned, rec->map_size, __ATOMIC_RELAXED);
}

bool mtp__large_free(void *p, size_t size, bool sized) {
  pthread_mutex_lock(&mtp__large_lock);
  mtp_large_t **pp = find(p), *rec = *pp;
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
  mtp__os_unmap(rec->map, rec->map_size);
  mtp__meta_free(rec, sizeof(*rec));
  return true;
}

bool mtp__large_lookup(const void *p, size_t *usable, mtp_pool_internal_t **pool_out) {
  pthread_mutex_lock(&mtp__large_lock);
  mtp_large_t *rec = *find(p);
  if (rec) {
    *usable = rec->pool->check ? rec->size
                               : rec->map_size - (size_t)((char *)rec->ptr - (char *)rec->map);
    if (pool_out) *pool_out = rec->pool;
  }
  pthread_mutex_unlock(&mtp__large_lock);
  return rec != NULL;
}

void mtp__large_destroy_pool(mtp_pool_internal_t *pool) {
  pthread_mutex_lock(&mtp__large_lock);
  while (pool->large) {
    mtp_large_t *rec = pool->large;
    unlink_rec(find(rec->ptr), rec);
    mtp__os_unmap(rec->map, rec->map_size);
    mtp__meta_free(rec, sizeof(*rec));
  }
  pthread_mutex_unlock(&mtp__large_lock);
}
