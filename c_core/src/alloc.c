/* Public entry points. The fast paths live here, inline; everything else is a call down.
 *
 *   mtp_alloc(size)                     size <= 1 KiB: class from one table load
 *     heap = tl_default_heap            (a static empty heap until the thread's first slow path)
 *     slab = heap->current[class]; b = slab->free
 *     b != NULL: slab->free = b->next; used++; allocs++   -> b
 *     else mtp__heap_alloc_slow         (heap.c: collect remote frees, carve, next slab, pool)
 *
 *   mtp_free(p)
 *     chunkmap[p >> 22] says p lies in one of our regions (else: large block, NULL, or foreign)
 *     slab = descriptor of p's page; slab->owner == this thread? push on slab->free, --used
 *     else mtp__heap_free_slow          (heap.c: remote CAS push, detached slabs, misuse)
 *
 * Fast paths take no lock and no atomic read-modify-write; their only checks are the ones that
 * cost nothing extra (the chunk map, the owner compare, a block freed twice in a row, and for a
 * sized free the class compare). Checked mode and bad input go down the slow paths.
 */
#include <errno.h>
#include <string.h>

#include "internal.h"
#include "track.h"

const char *mtp_version(void) {
#define MTP_STR2(x) #x
#define MTP_STR(x) MTP_STR2(x)
  return MTP_STR(MTPOOL_VERSION_MAJOR) "." MTP_STR(MTPOOL_VERSION_MINOR) "." MTP_STR(
      MTPOOL_VERSION_PATCH);
}

/* ---- allocation ---- */

MTP_INLINE void *heap_alloc_fast(mtp_heap_t *h, size_t size) {
  mtp_slab_t *s = h->current[mtp__class_direct[(size + 7) >> 3]];
  mtp_block_t *b = s->free;
  if (MTP_UNLIKELY(b == NULL)) return NULL;
  s->free = mtp__block_next(b);
  s->used++;
  h->allocs++;
  mtp__track_alloc(b, s->block_size);
  return b;
}

void *mtp_alloc(size_t size) {
  if (MTP_LIKELY(size <= MTP_DIRECT_MAX)) {
    void *p = heap_alloc_fast(mtp__tl_default_heap, size);
    if (MTP_LIKELY(p != NULL)) return p;
  }
  return mtp__heap_alloc_slow(mtp__default(), size);
}

void *mtp_pool_alloc(mtp_pool_t *pool_, size_t size) {
  mtp_pool_internal_t *pool = mtp__pool_in(pool_);
  if (pool == NULL) return mtp_alloc(size);
  mtp_heap_t *h = mtp__tl_thread->heaps[pool->id];
  if (MTP_LIKELY(h != NULL && size <= MTP_DIRECT_MAX) &&
      MTP_LIKELY((mtp_pool_internal_t *)mtp__load_relaxed(&h->pool) == pool)) {
    void *p = heap_alloc_fast(h, size);
    if (MTP_LIKELY(p != NULL)) return p;
  }
  return mtp__heap_alloc_slow(pool, size);
}

static void *alloc_aligned(mtp_pool_internal_t *pool, size_t size, size_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    errno = EINVAL;
    return NULL;
  }
  if (pool->check) return mtp__checked_alloc(pool, size, alignment);
  /* the smallest class whose every block is aligned enough (blocks are never headed) */
  unsigned cls = mtp__class_aligned(size ? size : 1, alignment);
  if (cls < MTP_NUM_CLASSES) return mtp__heap_alloc_class(pool, cls);
  return mtp__large_alloc(pool, size, alignment);
}

void *mtp_alloc_aligned(size_t size, size_t alignment) {
  return alloc_aligned(mtp__default(), size, alignment);
}

void *mtp_pool_alloc_aligned(mtp_pool_t *pool, size_t size, size_t alignment) {
  return alloc_aligned(pool ? mtp__pool_in(pool) : mtp__default(), size, alignment);
}

void *mtp_pool_calloc(mtp_pool_t *pool, size_t count, size_t size) {
  size_t n;
  if (__builtin_mul_overflow(count, size, &n)) {
    errno = ENOMEM;
    return NULL;
  }
  void *p = mtp_pool_alloc(pool, n);
  if (p != NULL) memset(p, 0, n);
  return p;
}

void *mtp_calloc(size_t count, size_t size) { return mtp_pool_calloc(NULL, count, size); }

/* ---- free ---- */

static MTP_NOINLINE void free_not_region(void *p, size_t size, bool sized) {
  if (p == NULL) return;
  if (!mtp__large_free(p, size, sized))
    mtp__error(MTP_ERR_INVALID_POINTER, "invalid pointer (not allocated by mtpool)", p);
}

void mtp_free(void *p) {
  uintptr_t u = (uintptr_t)p;
  if (MTP_UNLIKELY(!mtp__is_region_ptr(u))) {
    free_not_region(p, 0, false);
    return;
  }
  mtp_slab_t *s = mtp__page_desc(u);
  if (MTP_LIKELY(mtp__load_relaxed(&s->owner) == (uintptr_t)mtp__tl_thread))
    mtp__slab_free_local(s, (mtp_block_t *)p);
  else
    mtp__heap_free_slow(s, (mtp_block_t *)p);
}

static MTP_NOINLINE void free_sized_slow(mtp_slab_t *s, void *p, size_t size) {
  mtp_slab_t *h = s->kind == MTP_PAGE_TAIL ? s - s->head_delta : s;
  if (h->kind == MTP_PAGE_SLAB) {
    if (h->checked) {
      mtp__checked_free(h, p, size, true);
      return;
    }
    /* A block from an aligned request may sit in a larger class than its size maps to. */
    unsigned want = size <= MTP_MAX_SMALL ? mtp__class_of(size) : MTP_NUM_CLASSES;
    uint32_t bs = h->block_size;
    bool ok = want == h->cls ||
              (want < h->cls && mtp__class_aligned(size, bs & (0u - bs)) == h->cls);
    if (!ok) {
      mtp__error(MTP_ERR_WRONG_SIZE, "wrong size (the block belongs to another size class)", p);
      return;
    }
  }
  mtp__heap_free_slow(s, (mtp_block_t *)p);
}

void mtp_free_sized(void *p, size_t size) {
  uintptr_t u = (uintptr_t)p;
  if (MTP_UNLIKELY(!mtp__is_region_ptr(u))) {
    free_not_region(p, size, true);
    return;
  }
  mtp_slab_t *s = mtp__page_desc(u);
  if (MTP_LIKELY(mtp__load_relaxed(&s->owner) == (uintptr_t)mtp__tl_thread &&
                 size - s->size_min <= s->size_span)) /* size maps to this block's class */
    mtp__slab_free_local(s, (mtp_block_t *)p);
  else
    free_sized_slow(s, p, size);
}

/* ---- queries and realloc ---- */

/* Finds p's block: false if p is not the start of a block mtpool handed out (as far as can be
 * told without checked mode). */
static bool lookup(const void *p, size_t *usable_out, mtp_pool_internal_t **pool_out,
                   mtp_slab_t **slab_out) {
  uintptr_t u = (uintptr_t)p;
  if (mtp__is_region_ptr(u)) {
    mtp_slab_t *s = mtp__page_desc(u);
    if (s->kind == MTP_PAGE_TAIL) s -= s->head_delta;
    if (s->kind != MTP_PAGE_SLAB ||
        (size_t)((const char *)p - mtp__slab_start(s)) % s->block_size != 0)
      return false;
    *usable_out = s->checked ? mtp__checked_usable(s, p) : s->block_size;
    if (pool_out) *pool_out = mtp__slab_pool(s);
    if (slab_out) *slab_out = s;
    return true;
  }
  if (slab_out) *slab_out = NULL;
  return mtp__large_lookup(p, usable_out, pool_out);
}

size_t mtp_usable_size(const void *p) {
  size_t n = 0;
  if (p == NULL) return 0;
  if (!lookup(p, &n, NULL, NULL)) mtp__error(MTP_ERR_INVALID_POINTER, "invalid pointer (usable size)", p);
  return n;
}

mtp_pool_t *mtp_pool_of(const void *p) {
  mtp_pool_internal_t *pool = NULL;
  size_t n;
  if (p == NULL || !lookup(p, &n, &pool, NULL)) return NULL;
  return mtp__pool_out(pool);
}

void *mtp_realloc(void *p, size_t size) {
  if (p == NULL) return mtp_alloc(size);
  mtp_pool_internal_t *pool = NULL;
  mtp_slab_t *s = NULL;
  size_t old = 0;
  if (!lookup(p, &old, &pool, &s)) {
    mtp__error(MTP_ERR_INVALID_POINTER, "invalid pointer (realloc)", p);
    errno = EINVAL;
    return NULL;
  }
  /* Keep the block when the new size maps to its size class, so that a sized free with either
   * size stays valid. */
  if (s != NULL && !s->checked && size <= MTP_MAX_SMALL && mtp__class_of(size) == s->cls) return p;
  void *q = mtp_pool_alloc(mtp__pool_out(pool), size);
  if (q == NULL) return NULL;
  memcpy(q, p, size < old ? size : old);
  mtp_free(p);
  return q;
}
