/* The heap layer: everything per thread. A thread record holds the thread's heaps, one per pool
 * it uses; a heap owns the slabs it allocates from, its reuse lists and its cache of empty slabs
 * and freed medium blocks. Files, bottom up (none calls a file above it):
 *   tls.c      the thread-locals and the empty sentinels the fast paths see first
 *   cache.c    the heap's cache of empty slabs and freed medium blocks; retiring an empty slab
 *   reuse.c    the reuse lists: blocks the thread freed into its own slabs, handed out first
 *   slabs.c    the heap's slabs: taking a block, exhausted slabs, the free slow paths, give-back
 *   shared.c   the pool's shared heaps, which serve a thread's first blocks of a class
 *   thread.c   thread records, binding heaps to pools, the allocation entry points, thread exit
 * Above it, the two rooms that wrap a heap: checked/ (checked mode) and profile/ (the sampled
 * heap profiler), which the heap never calls: what is theirs, it returns to its caller (api/).
 * Layer: heap (above pool). */
#ifndef MTP_HEAP_H
#define MTP_HEAP_H

#include "pool/default.h"

#pragma GCC visibility push(hidden)

/* ---- tls.c ---- */
/* The thread that has not allocated yet sees these: every current slab has an empty free list, so
 * the first allocation falls into the slow path with no extra test on the fast path. */
extern mtpi_heap_t mtp__heap_empty;
extern mtpi_desc_t mtp__slab_empty;
extern mtpi_thread_t mtp__thread_empty;
extern MTP_TLS mtpi_heap_t *mtp__tl_default_heap;
extern MTP_TLS mtpi_thread_t *mtp__tl_thread;
/* Set by this thread's teardown (thread.c): other libraries' thread-exit destructors may still
 * allocate after it; such a thread keeps nothing. */
extern MTP_TLS bool mtp__tl_exited;
/* The profiler's count of this thread's bytes to its next sample (profile/) while the thread has
 * no default heap: a default heap made here starts from it. INT64_MAX: nothing sampled. */
extern MTP_TLS int64_t mtp__tl_prof_left;

/* t's heap in the pool of this id, or NULL (none yet, or the table of high ids is not made). */
static inline mtpi_heap_t *mtp__thread_heap(const mtpi_thread_t *t, uint32_t id) {
  if (MTP_LIKELY(id < MTP_THREAD_HEAPS)) return t->heaps[id];
  return t->more != NULL ? t->more[id] : NULL;
}

/* ---- cache.c ---- */
/* The owner: an empty slab for class cls from m's cache, or NULL: one last formatted for cls
 * (*formatted: its free list and bump pointer kept), else one of as many pages (to format). */
mtpi_desc_t *mtp__cache_take_slab(mtpi_member_t *m, unsigned cls, bool *formatted);
/* The owner: a medium block of size bytes from m's cache (a freed one of its pages, up to a
 * quarter more, never the one freed last), or NULL. */
void *mtp__cache_medium_alloc(mtpi_member_t *m, size_t size, bool zero);
/* The owner: a packed block of size bytes from m's cache of freed ones (usable at most an eighth
 * above size; never the one freed last), or NULL; then every cached block but the newest moves to
 * back, for the caller to give back to their spans before it cuts a block (their units are
 * resident: a cut reuses them before untouched ones). */
void *mtp__cache_packed_alloc(mtpi_member_t *m, size_t size, bool zero, mtpi_pk_back_t *back);
/* Free the medium block p (s: its head descriptor, seen as MEDIUM or PACKED) into the calling
 * thread's cache if the thread has a heap in its pool and the pool caches, else to its region or
 * span; misuse reported. */
void mtp__heap_medium_free(mtpi_desc_t *s, void *p, size_t size, bool sized);
/* The owner freed the last block of s (mtp__slab_push_local returned true): into the heap's
 * cache, or back to the pool. */
void mtp__heap_retire_local(mtpi_desc_t *s);

/* ---- reuse.c ---- */
/* The reuse lists (reuse.c says why and their invariants): per class, blocks this thread freed
 * into its own slabs, newest first, counted as used by their slabs. */
static inline void mtp__reuse_push(mtpi_heap_t *h, unsigned cls, mtpi_block_t *b) {
  mtp__block_set_next(b, h->reuse[cls]);
  mtp__track_free(b, mtp__class_size[cls]);
  h->reuse[cls] = b;
  h->reuse_n[cls]++;
}
/* The list's newest block, taken off it (the list is not empty). */
static inline mtpi_block_t *mtp__reuse_pop(mtpi_heap_t *h, unsigned cls) {
  mtpi_block_t *b = h->reuse[cls];
  h->reuse[cls] = mtp__block_take(b);
  h->reuse_n[cls]--;
  h->m.allocs++;
  mtp__track_alloc(b, mtp__class_size[cls]);
  return b;
}
/* Each class's bound on its list, set when the heap is made. */
void mtp__reuse_init(mtpi_heap_t *h);
/* The owner's free of untagged b into its slab s when its class's list is full: the list's older
 * half goes back to its slabs, then b is listed. */
void mtp__heap_free_reuse_full(mtpi_desc_t *s, mtpi_block_t *b);
/* Whether tagged b, a block of class cls, is on h's list (a double free). */
bool mtp__reuse_holds(const mtpi_heap_t *h, unsigned cls, const mtpi_block_t *b);
/* Take class cls's list off, its blocks for the caller to give back. */
mtpi_block_t *mtp__reuse_take(mtpi_heap_t *h, unsigned cls);
/* Blocks taken off a list back onto their slabs, as the owner's frees; an exhausted slab that gets
 * one back joins the partial queue. With retire, a slab that empties is retired (the heap must be
 * consistent: it may go to the pool and wake the purger); without, it stays for the slow path. */
void mtp__reuse_return(mtpi_heap_t *h, mtpi_block_t *b, bool retire);
/* Pool lock held (thread exit, flush): every listed block back onto its slab's free list, before
 * the slabs are given back. */
void mtp__reuse_give_back_locked(mtpi_heap_t *h);
/* Statistics and the heap walk, pool lock held: how many blocks member m's heap lists (0 for a
 * shared heap), freed though their slabs count them as used; added per class to
 * per_class[MTP_NUM_CLASSES] unless it is NULL. With out, up to max of the blocks themselves, each
 * checked to be a block of one of rs's slabs before its link is followed. Read racily: exact when
 * the owner thread is quiet. */
size_t mtp__heap_listed(mtpi_member_t *m, mtpi_rset_t *rs, size_t *per_class, void **out,
                        size_t max);
/* MTP_DEBUG 2: class c's list against its bound and its blocks' slabs. */
void mtp__reuse_validate_class(mtpi_heap_t *h, unsigned c);

/* ---- slabs.c ---- */
/* One block of class cls from h's slabs, refilled as needed. NULL: no memory. *due: a purge
 * became due; the caller wakes the purger once the heap is consistent. */
mtpi_block_t *mtp__heap_take(mtpi_pool_t *pool, mtpi_heap_t *h, unsigned cls, bool *due);
/* Free b, whose page descriptor is d, when the fast path could not: remote frees, slabs that
 * are not owned, misuse. false, nothing done: b is in a checked slab (the caller hands it to
 * checked mode: mtp__checked_free). */
bool mtp__heap_free_slow(mtpi_desc_t *d, mtpi_block_t *b);
/* The free fast path's miss: a remote free into a slab another thread owns is pushed here at
 * once (one CAS, no frame); anything else goes on to mtp__heap_free_slow (and returns its
 * answer). d: b's page descriptor or its run's head (a head is its own head). */
bool mtp__heap_free_other(mtpi_desc_t *d, mtpi_block_t *b);
/* The owner's free of b into s, b tagged as a free-list link (mtp__block_tagged): confirmed
 * against the slab's and the reuse lists (a double free is reported), else pushed. */
void mtp__heap_free_tagged(mtpi_desc_t *s, mtpi_block_t *b);
/* Pool lock held: give every slab and cached slab of h back to pool; h stays a member. */
void mtp__heap_give_back_locked(mtpi_pool_t *pool, mtpi_heap_t *h);
/* MTP_DEBUG 2: h's lists and its slabs against their owner marks and counts. */
void mtp__heap_validate(mtpi_heap_t *h);
void mtp__heap_validate_class(mtpi_heap_t *h, unsigned cls); /* one class's lists */

/* ---- shared.c ---- */
/* Whether h takes its next block of cls from the pool's shared heap (a cold class): up to
 * COLD_BYTES of a class (COLD_MAX_BLOCKS), COLD_TOTAL blocks in all, while h has no slab of it. */
#define MTP_COLD_BYTES 16384u    /* per class */
#define MTP_COLD_MAX_BLOCKS 128u /* per class (the counter is 8 bits) */
#define MTP_COLD_TOTAL 256u      /* per heap: a thread that allocates more has its own slabs */
#define MTP_COLD_MAX_SIZE 4096u  /* a larger block fills a page of its own slab anyway */
static inline bool mtp__shared_cold(const mtpi_heap_t *h, unsigned cls) {
  if (!h->cold_ok) return false;
  uint32_t size = mtp__class_size[cls];
  unsigned limit = size > MTP_COLD_MAX_SIZE ? 0 : MTP_COLD_BYTES / size;
  if (limit > MTP_COLD_MAX_BLOCKS) limit = MTP_COLD_MAX_BLOCKS;
  return h->cold_total < MTP_COLD_TOTAL && h->cold[cls] < limit &&
         h->current[cls] == &mtp__slab_empty && h->partial[cls] == NULL && h->full[cls] == NULL;
}
/* A block of cls from the shared heap of the CPU the thread runs on (another if that one is held),
 * counted against h; from h's own slabs if every shared heap is held. */
mtpi_block_t *mtp__shared_take(mtpi_pool_t *pool, mtpi_heap_t *h, unsigned cls, bool *due);
/* Trim: the pool's shared heaps give their slabs back to the pool; the second, every pool's. Then
 * mtp__pool_trim and mtp__pool_trim_all purge them. */
void mtp__heap_shared_trim(mtpi_pool_t *pool);
void mtp__heap_shared_trim_all(void);

/* ---- thread.c ---- */
/* An allocation the fast path missed, by size: reuse list, the heap's slabs, medium or large.
 * Checked mode and the profiler are asked first by the caller (api/alloc.c). */
void *mtp__heap_alloc_slow(mtpi_pool_t *pool, size_t size);
void *mtp__heap_alloc_class(mtpi_pool_t *pool, unsigned cls);
/* A medium block, from the calling thread's cache of the pool's freed ones first; packed
 * (mtp__packed_fits) if fit, else a run of whole pages (64 KiB aligned, grown in place by
 * realloc). */
void *mtp__heap_medium_alloc(mtpi_pool_t *pool, size_t size, bool zero, bool fit);
/* A large block (mtp__large_alloc); wakes the purger when the block is to be looked at. No lock
 * held. */
void *mtp__heap_large_alloc(mtpi_pool_t *pool, size_t size, size_t alignment);
/* Trim: the calling thread's reuse lists in pool back onto their slabs, so that slabs they kept
 * from emptying can be retired. No lock held. */
void mtp__heap_unlist(mtpi_pool_t *pool);

#pragma GCC visibility pop

#endif
