/* The slab layer: one slab of one size class, its state machine (OWNED <-> DETACHED, see
 * mtpi_desc_t in base/types.h), lazy carving, the owner's free list and the remote free list.
 * Nothing here locks or lists: each function returns what happened (the slab became empty, a
 * remote free made a detached slab worth listing or empty), and the caller, a heap or the pool,
 * acts on it. Layer: slab (above region). */
#ifndef MTP_SLAB_H
#define MTP_SLAB_H

#include "base/track.h"
#include "region/region.h"

#pragma GCC visibility push(hidden)

/* Format the run s (from mtp__region_alloc_slab or a cache) for class cls, owned by no one yet. */
void mtp__slab_format(mtpi_desc_t *s, unsigned cls, bool checked);

/* The heap that owns s or owned it last: opaque to this layer (relaxed: see mtpi_desc_t). */
static inline void *mtp__slab_heap(mtpi_desc_t *s) { return (void *)mtp__load_relaxed(&s->heap); }
static inline void mtp__slab_set_heap(mtpi_desc_t *s, void *h) {
  mtp__store_relaxed(&s->heap, (uintptr_t)h);
}
/* The bump pointer: blocks at and above it were never handed out (relaxed: see mtpi_desc_t). */
MTP_INLINE char *mtp__slab_bump(mtpi_desc_t *s) { return mtp__cptr_load_relaxed(&s->bump); }
MTP_INLINE void mtp__slab_set_bump(mtpi_desc_t *s, char *b) { mtp__cptr_store_relaxed(&s->bump, b); }
/* The owner's read: plain, so that the free fast path compares against memory in one
 * instruction. ThreadSanitizer builds load it atomically, since the compiler may hoist the load
 * above the owner compare (a non-owner's speculative read, whose value is then unused). */
#if defined(MTP_TSAN)
#define mtp__slab_bump_owner(s) mtp__slab_bump(s)
#else
#define mtp__slab_bump_owner(s) ((s)->bump)
#endif

/* Owner: pop a block from the free list; NULL if the list is empty. The one pop of the core. */
MTP_INLINE mtpi_block_t *mtp__slab_pop(mtpi_desc_t *s) {
  mtpi_block_t *b = s->free;
  if (MTP_UNLIKELY(b == NULL)) return NULL;
  mtpi_block_t *n = mtp__block_take(b);
  s->free = n;
  /* The next pop reads n's link first, and the list's order is the frees': n's line is often cold,
   * or another thread's (a remote free wrote it). Fetched now, its miss overlaps the caller's use
   * of b (bench/results/notes.md: slab.h). A NULL n costs one dropped prefetch per drained list. */
  __builtin_prefetch(n, 1, 3);
  s->used++;
  mtp__track_alloc(b, s->block_size);
  return b;
}

/* Owner: whether b is on s's free list or on its remote list (walks both, bounded by the
 * capacity). The confirmation of a tagged block (see mtpi_block_t): never a false report. */
MTP_NOINLINE bool mtp__slab_holds_free(mtpi_desc_t *s, mtpi_block_t *b);

/* Owner: the push itself, for a caller that has done the double-free test (the free fast path,
 * which sends a tagged block to a call of its own so that its untagged case stays a leaf). Returns
 * true if s became empty (the caller retires it). */
MTP_INLINE bool mtp__slab_push_untagged(mtpi_desc_t *s, mtpi_block_t *b) {
  mtp__block_set_next(b, s->free);
  mtp__track_free(b, s->block_size);
  s->free = b;
  return MTP_UNLIKELY(--s->used == 0);
}

/* Owner: push b (a block of s that was handed out: the caller checked b < bump) onto the free
 * list. Returns true if s became empty (the caller retires it). The one check it affords is a
 * double free, any (not just the block freed last): a free block's link word is tagged (types.h),
 * and a tagged block is looked for on the slab's lists (reported; returns false). */
MTP_INLINE bool mtp__slab_push_local(mtpi_desc_t *s, mtpi_block_t *b) {
  if (MTP_UNLIKELY(mtp__block_tagged(b)) && mtp__slab_holds_free(s, b)) {
    mtp__error(MTP_ERR_DOUBLE_FREE, "double free", b);
    return false;
  }
  return mtp__slab_push_untagged(s, b);
}

/* Owner: carve fresh blocks from the bump area into s->free, up to the end of the OS page
 * (os_page bytes) that holds the bump pointer, at least one block; false if none are left. */
bool mtp__slab_carve(mtpi_desc_t *s, size_t os_page);
bool mtp__slab_extend(mtpi_desc_t *s); /* carve with the OS's page size */
/* Owner: take the remote list into s->free; returns the number of blocks taken. */
uint32_t mtp__slab_collect(mtpi_desc_t *s);
/* Owner: give up an exhausted slab (free list and bump area empty). false: remote frees arrived;
 * they are collected into s->free (*collected blocks) and the slab stays owned by owner_token. */
bool mtp__slab_detach(mtpi_desc_t *s, uintptr_t owner_token, uint32_t *collected);
/* Make a detached slab owned by (heap, owner_token); *collected gets the blocks freed since the
 * detach. false if it was adopted already, or if it is LISTED and `listed_ok` is false (only a
 * holder of the pool lock may adopt a listed slab). */
bool mtp__slab_adopt(mtpi_desc_t *s, void *heap, uintptr_t owner_token, bool listed_ok,
                     uint32_t *collected);
/* Pool lock held: mark a detached slab LISTED before putting it on the pool's partial list.
 * false if it was adopted meanwhile or is listed already (then it must not be listed again). */
bool mtp__slab_mark_listed(mtpi_desc_t *s);

typedef enum {
  MTP_REMOTE_OWNED,    /* pushed; the owner collects it */
  MTP_REMOTE_DETACHED, /* pushed onto a detached slab; nothing to do */
  MTP_REMOTE_NEWS,     /* pushed onto a detached slab that may now be worth listing, or empty:
                          the caller checks under the pool lock (mtp__pool_detached_news) */
  MTP_REMOTE_REJECTED  /* a double free was reported; nothing was pushed */
} mtpi_remote_t;
/* What a push onto a detached slab read of its region before the push, for the news: after the
 * push another free may empty the slab, its release be purged and the region unmapped, so the
 * news may not read the slab, nor its region, before checking (mtp__pool_detached_news). */
typedef struct {
  mtpi_rset_t *set; /* the set (pool) that owned the slab's region */
  uint64_t unmaps;  /* set->unmaps then */
} mtpi_remote_seen_t;
/* Any thread: push b onto a slab that the caller does not own; *seen is filled when the result
 * is MTP_REMOTE_NEWS. Inline: it is the whole of the remote free's fast case (heap layer). */
MTP_INLINE mtpi_remote_t mtp__slab_free_remote(mtpi_desc_t *s, mtpi_block_t *b,
                                               mtpi_remote_seen_t *seen) {
  /* acquire (and the failed CAS's acquire): a word seen without OWNED makes the detaching
   * thread's write of detached_used visible (its CAS, release, heads the release sequence) */
  uintptr_t w = mtp__load_acquire(&s->thread_free);
  uintptr_t nw;
  uint32_t used = 0;
  do {
    if (MTP_UNLIKELY(MTP_TF_PTR(w) == b)) { /* the block another free just pushed */
      mtp__error(MTP_ERR_DOUBLE_FREE, "double free (block already on its slab's remote list)", b);
      return MTP_REMOTE_REJECTED;
    }
    /* Read detached_used BEFORE the push, while b still counts as in use: a detached slab with a
     * block in use is never released, and detached_used is constant while it stays detached
     * (the CAS below succeeds only if the word is still w). After the push it is no longer ours
     * to read: another free may empty the slab at once, and its thread release it and someone
     * re-format it (slab_format writes detached_used) while we would still be reading. */
    if (!(w & MTP_TF_OWNED)) {
      /* relaxed load: a w read before an adoption and a new detach may be stale, and the
       * detaching thread writes detached_used then; the value is used only if the CAS below
       * finds the word still w (then it is the one its release published) */
      used = mtp__u32_load_relaxed(&s->detached_used);
      /* relaxed: sequenced before our push (release); a region unmap that our push made
       * possible happens after it, so this read cannot see that unmap's count (coherence) */
      seen->set = mtp__page_set(s);
      seen->unmaps = mtp__u64_load_relaxed(&seen->set->unmaps);
    }
    mtp__block_set_next(b, MTP_TF_PTR(w));
    /* count + 1 never carries into the flags: a slab holds fewer than 2^14 blocks (size_class.c) */
    nw = ((w & ~MTP_TF_PTR_MASK) + MTP_TF_COUNT_ONE) | (uintptr_t)b;
    /* release: b's next (written above) is visible to whoever takes the list with acquire */
  } while (!mtp__cas_weak_acq_rel(&s->thread_free, &w, nw));
  if (MTP_LIKELY(nw & MTP_TF_OWNED)) return MTP_REMOTE_OWNED;
  /* Detached: this free may make the slab worth adopting (a quarter back), or empty. Exactly one
   * free sees each count, so exactly one thread reports each threshold. */
  uint32_t count = MTP_TF_COUNT(nw);
  return (count == used || count == (used + 3) / 4) ? MTP_REMOTE_NEWS : MTP_REMOTE_DETACHED;
}

/* MTP_DEBUG 2, owner (or lock holder of a detached slab): the free list and counts of s against
 * its capacity and bump area. */
void mtp__slab_validate(mtpi_desc_t *s);
/* Valgrind builds: tell memcheck that every block still in use in s is freed (pool destroy). */
void mtp__slab_forget_blocks(mtpi_desc_t *s);

#pragma GCC visibility pop

#endif
