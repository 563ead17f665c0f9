/* Shared slabs: a thread's first blocks of each size class come from a slab the pool's threads
 * share, and the thread gets a slab of its own only once it has shown it uses the class
 * (MTP_SHARED_BLOCKS blocks or MTP_SHARED_BYTES bytes taken from here: heap.c, shared_take).
 *
 * Why: a slab of its own costs a thread at least one resident OS page per class it touches
 * (carving writes a link into every block up to the end of that page). A thread that allocates a
 * little, over many classes, paid a page per class for a few blocks each: 83.9 KiB of RssAnon per
 * thread against glibc's 39.8 (bench/gp/thread_footprint.c: 1,000 threads x 20 blocks of 16 B -
 * 3 KiB). Shared, those blocks lie side by side, whichever thread asked.
 *
 * Rules (the slab invariants are at mtpi_page_t, base/types.h):
 *   - A shared slab is OWNED, and its owner is the pool lock: every owner operation on it (pop,
 *     carve, push, the double-free check) is made by a holder of that lock. Its owner word is the
 *     pool's address | MTP_OWNER_SHARED (both marks): never a thread's token (thread records and
 *     pool records are distinct live internal records), so the free fast path's owner compare
 *     fails, and the remote fast case (heap.c) sends marked words on: every free of its blocks,
 *     from any thread, reaches mtp__heap_free_slow and then mtp__pool_shared_free. No thread
 *     pushes onto its remote list, which stays empty (thread_free == MTP_TF_OWNED).
 *   - The free slow path reads the owner word and the bump pointer relaxed, before the lock: a
 *     hint. Under the lock they are exact (a shared slab's owner word is written only under it:
 *     here, and by the format of its release), and both checks are made again; a slab that is no
 *     longer shared sends the free back to the slow path, which then sees it as it is now.
 *   - Frees keep the owner's checks: a block tagged as a free-list link is looked for on the
 *     slab's free list (mtp__slab_holds_free) and a double free is reported (after the unlock).
 *   - A shared slab with room is on p->shared[cls] (list MTP_LIST_POOL_SHARED); an exhausted one
 *     is on no list until a free gives it room. A free that empties it releases it at once
 *     (mtp__pool_release_locked: kept formatted among the pool's empty slabs, purged after the
 *     delay), so trim and the purge need nothing new, and a pool whose blocks are all freed holds
 *     no shared slab.
 *   - Only classes of one-page slabs: a free of a block in a later page of a slab takes the TAIL
 *     path of mtp__heap_free_other, which this file does not need.
 * Layer: pool. */
#include "pool.h"

#include <errno.h>

#include "base/os.h"

static mtpi_page_t *page_of(mtpi_node_t *n) { return MTP_CONTAINER(n, mtpi_page_t, link); }

static uintptr_t shared_token(mtpi_pool_t *p) { return (uintptr_t)p | MTP_OWNER_SHARED; }

/* Pool lock held, for both list operations. */
static void shared_push_locked(mtpi_pool_t *p, mtpi_page_t *s) {
  s->list = MTP_LIST_POOL_SHARED;
  mtp__list_push(&p->shared[s->cls], &s->link);
}
static void shared_remove_locked(mtpi_pool_t *p, mtpi_page_t *s) {
  mtp__list_remove(&p->shared[s->cls], &s->link);
  s->list = MTP_LIST_NONE;
}

/* Pool lock held: a new shared slab of class cls, listed: one of the pool's empty slabs, else
 * fresh pages, from the region m claimed first (without it, a pool whose heaps had all claimed
 * regions mapped one more region for its shared slabs: test_mt's cross-thread test under TSan
 * went past its bound on mapped bytes). NULL + ENOMEM. */
static mtpi_page_t *shared_new_locked(mtpi_pool_t *p, unsigned cls, mtpi_member_t *m) {
  mtpi_page_t *s = mtp__pool_empty_take_locked(p, cls);
  if (s == NULL) {
    s = mtp__pool_span_locked(p, mtp__class_pages[cls], &m->region_hint);
    if (s == NULL) return NULL;
    mtp__slab_format(s, cls, false);
  } else if (s->cls != cls) {
    mtp__slab_format(s, cls, false);
  }
  MTP_ASSERT(((uintptr_t)p & MTP_OWNER_SHARED) == 0);
  /* relaxed: read by freers as a hint, exact under the pool lock, which we hold */
  mtp__store_relaxed(&s->owner, shared_token(p));
  shared_push_locked(p, s);
  return s;
}

void *mtp__pool_shared_alloc(mtpi_pool_t *p, unsigned cls, mtpi_member_t *m, bool *wake) {
  MTP_ASSERT(mtp__class_pages[cls] == 1);
  mtpi_block_t *b = NULL;
  mtp__pool_lock(p);
  for (;;) {
    mtpi_node_t *n = p->shared[cls];
    mtpi_page_t *s = n != NULL ? page_of(n) : shared_new_locked(p, cls, m);
    if (s == NULL) break;
    MTP_VALIDATE(mtp__slab_validate(s));
    if ((b = mtp__slab_pop(s)) != NULL) break;
    /* a listed slab with no free block has some never carved: a new one always has */
    if (mtp__slab_bump(s) < s->end && mtp__slab_extend(s)) {
      b = mtp__slab_pop(s);
      break;
    }
    shared_remove_locked(p, s); /* exhausted: off the list until a free gives it room */
  }
  *wake |= mtp__pool_unlock_defer(p);
  if (b == NULL) errno = ENOMEM;
  return b;
}

bool mtp__pool_shared_free(mtpi_page_t *s, mtpi_block_t *b) {
  mtpi_pool_t *p = mtp__pool_of_page(s);
  bool twice = false;
  mtp__pool_lock(p);
  /* exact now (see the rules above): still shared, and b a block it handed out */
  bool ours = mtp__load_relaxed(&s->owner) == shared_token(p) && (char *)b < mtp__slab_bump(s) &&
              (size_t)((char *)b - mtp__page_start(s)) % s->block_size == 0;
  if (ours) {
    if (MTP_UNLIKELY(mtp__block_tagged(b)) && mtp__slab_holds_free(s, b)) {
      twice = true;
      goto out;
    }
    /* No thread owns a shared slab: every free into it is a remote free (the statistics'). */
    p->dead_remote++;
    if (mtp__slab_push_untagged(s, b)) {
      /* empty: released, to be reused or purged. s is not ours to read after this: with a purge
       * delay of 0 its region may be unmapped at once */
      if (s->list == MTP_LIST_POOL_SHARED) shared_remove_locked(p, s);
      mtp__pool_release_locked(p, s, mtp__os_now_ms());
    } else {
      if (s->list != MTP_LIST_POOL_SHARED) shared_push_locked(p, s); /* exhausted: room again */
      MTP_VALIDATE(mtp__slab_validate(s));
    }
  }
out:
  mtp__pool_unlock(p);
  if (twice) mtp__error(MTP_ERR_DOUBLE_FREE, "double free", b); /* no lock held: a handler may call us */
  return ours;
}
