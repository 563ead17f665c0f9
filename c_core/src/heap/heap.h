/* The heap layer: per-thread heaps (each thread's cache of one pool: the allocation and free slow
 * paths, thread initialisation and exit) and checked mode (a pool whose every operation runs
 * under its lock, validated). Layer: heap (above pool). */
#ifndef MTP_HEAP_H
#define MTP_HEAP_H

#include "pool/pool.h"

#pragma GCC visibility push(hidden)

/* The thread that has not allocated yet sees these: every current slab has an empty free list, so
 * the first allocation falls into the slow path with no extra test on the fast path. */
extern mtpi_heap_t mtp__heap_empty;
extern mtpi_desc_t mtp__slab_empty;
extern mtpi_thread_t mtp__thread_empty;
extern MTP_TLS mtpi_heap_t *mtp__tl_default_heap;
extern MTP_TLS mtpi_thread_t *mtp__tl_thread;

/* t's heap in the pool of this id, or NULL (none yet, or the table of high ids is not made). */
static inline mtpi_heap_t *mtp__thread_heap(const mtpi_thread_t *t, uint32_t id) {
  if (MTP_LIKELY(id < MTP_THREAD_HEAPS)) return t->heaps[id];
  return t->more != NULL ? t->more[id] : NULL;
}

/* ---- heap.c ---- */
void *mtp__heap_alloc_slow(mtpi_pool_t *pool, size_t size);
void *mtp__heap_alloc_class(mtpi_pool_t *pool, unsigned cls);
/* A medium block (mtp__medium_alloc) with the calling thread's cache of the pool's runs. */
void *mtp__heap_medium_alloc(mtpi_pool_t *pool, size_t size, bool zero);
/* Free the medium block p (s: its head descriptor, seen as MEDIUM) into the calling thread's cache
 * of its pool's runs if the thread has a heap in that pool (mtp__medium_free). */
void mtp__heap_medium_free(mtpi_desc_t *s, void *p, size_t size, bool sized);
/* Trim: the pool's shared heap (heap.c: cold classes) gives its slabs back to the pool; the
 * second, every pool's. Then mtp__pool_trim and mtp__pool_trim_all purge them. */
void mtp__heap_shared_trim(mtpi_pool_t *pool);
void mtp__heap_shared_trim_all(void);
/* Trim: the calling thread's listed blocks (its stand-in and hot lists) in pool back onto their
 * slabs, so that slabs they kept from emptying can be retired. No lock held. */
void mtp__heap_unlist(mtpi_pool_t *pool);
/* Free b, whose page descriptor is d, when the fast path could not: remote frees, slabs that
 * are not owned, misuse. */
void mtp__heap_free_slow(mtpi_desc_t *d, mtpi_block_t *b);
/* The free fast path's miss: a remote free into a slab another thread owns is pushed here at
 * once (one CAS, no frame); anything else goes on to mtp__heap_free_slow. */
void mtp__heap_free_other(mtpi_desc_t *d, mtpi_block_t *b);
/* The owner freed the last block of s (mtp__slab_push_local returned true). */
void mtp__heap_retire_local(mtpi_desc_t *s);
/* The owner's free of b into s, b tagged as a free-list link (mtp__block_tagged): confirmed
 * against the slab's lists (a double free is reported), else pushed. */
void mtp__heap_free_tagged(mtpi_desc_t *s, mtpi_block_t *b);
/* The owner's free of untagged b into s, a slab of a class above MTP_DIRECT_MAX, when its heap's
 * hot list of the class is full: the list's older half goes back to its slabs, then b is listed. */
void mtp__heap_free_hot(mtpi_desc_t *s, mtpi_block_t *b);

/* b, freed by the owner of its slab of class cls (above MTP_DIRECT_MAX), onto h's hot list of the
 * class (heap.c: the hot lists), which has room. */
static inline void mtp__hot_push(mtpi_heap_t *h, unsigned cls, mtpi_block_t *b) {
  unsigned i = cls - MTP_HOT_FIRST;
  mtp__block_set_next(b, h->hot[i]);
  mtp__track_free(b, mtp__class_size[cls]);
  h->hot[i] = b;
  h->hot_n[i]++;
}
/* Statistics and the heap walk, pool lock held: how many blocks member m's heap lists on its
 * stand-in and hot lists (heap.c; 0 for a shared heap), freed though their slabs count them as
 * used; added per class to per_class[MTP_NUM_CLASSES] unless it is NULL. With out, up to max of
 * the blocks themselves, each checked to be a block of one of rs's slabs before its link is
 * followed. Read racily: exact when the owner thread is quiet. */
size_t mtp__heap_listed(mtpi_member_t *m, mtpi_rset_t *rs, size_t *per_class, void **out,
                        size_t max);
/* MTP_DEBUG 2: h's lists and its slabs against their owner marks and counts. */
void mtp__heap_validate(mtpi_heap_t *h);
void mtp__heap_validate_class(mtpi_heap_t *h, unsigned cls); /* one class's lists */

/* ---- checked.c ---- */
void *mtp__checked_alloc(mtpi_pool_t *pool, size_t size, size_t alignment);
void mtp__checked_free(mtpi_desc_t *s, void *p, size_t size, bool sized);
/* Whether p is the user's address of a live block of checked slab s; *usable: its requested
 * size. Takes the pool lock. */
bool mtp__checked_lookup(mtpi_desc_t *s, const void *p, size_t *usable);
/* Pool lock held, b the start of a live block of checked slab s: the user's address and size. */
void *mtp__checked_user(mtpi_desc_t *s, void *b, size_t *usable);
/* Pool destroy: drop the quarantine's record (its blocks go with the pool). */
void mtp__checked_forget(mtpi_pool_t *pool);
/* Report the first freed block of a checked pool that was written to (trim, destroy). */
void mtp__checked_scan(mtpi_pool_t *pool);

#pragma GCC visibility pop

#endif
