/* A heap's slabs: per size class the current slab it allocates from, a queue of partly free
 * slabs it got back (partial), and its exhausted ones (full; past a bound the oldest is let go,
 * detached, for other threads' frees to return it to the pool). Here: taking a block when the
 * current slab is dry, the free slow paths (remote frees, frees into exhausted or detached slabs,
 * misuse), and giving a heap's slabs back to its pool. Layer: heap. */
#include "lists.h"

#include <errno.h>

#include "base/os.h"

/* ---- exhausted slabs ---- */

/* The current slab is exhausted: keep it on the full list, where a free from this thread finds it
 * again cheaply; past full_limit, let the oldest go (detach it), so other threads' frees can
 * return it to the pool once it is empty even if this thread never comes back. */
static void slab_to_full(mtpi_heap_t *h, mtpi_desc_t *s) {
  unsigned cls = s->cls;
  mtp__mark_full(h, s);
  mtp__hlist_push(&h->full[cls], s, MTP_LIST_HEAP_FULL);
  if (h->full_limit[cls] == MTP_FULL_UNBOUNDED) return;
  /* The shared heap keeps none: its blocks are all freed by others, who release the slab once
   * they have freed it all (detached slabs, slab.h), rather than it waiting for its next use. */
  unsigned keep = h->m.shared ? 0u : h->full_limit[cls];
  if (++h->full_count[cls] <= keep) return;
  if (h->reuse_n[cls] != 0) {
    /* No listed block in a slab let go (reuse.c). A slab that empties is not retired here (that
     * may wake the purger, whose creation allocates on this thread, while the caller's lists are
     * mid-change); it stays on the partial queue, the next slab the class takes. */
    mtp__reuse_return(h, mtp__reuse_take(h, cls), false);
    if (h->full_count[cls] <= keep) return; /* listed blocks gave exhausted slabs room */
  }
  mtpi_desc_t *old = mtp__desc_of_node(h->full[cls]); /* the front: the oldest */
  mtp__full_remove(h, old);
  uint32_t n;
  if (!mtp__slab_detach(old, mtp__heap_token(h), &n)) { /* remote frees arrived: it has room */
    h->m.remote_collected += n;
    mtp__partial_push(h, old);
  }
}

/* The thread freed into a slab of class cls that slab_to_full let go: its blocks are not another
 * thread's to free, and each such slab costs a detach and a take-back. So keep twice as many
 * exhausted slabs of the class owned, and past FULL_COUNTED_MAX every one (unbounded, as the
 * count is 8 bits). The price: an exhausted slab stays owned, so if other threads free all of its
 * blocks while this thread no longer allocates from the class, it goes back to the pool only at
 * thread exit or flush (or when mtp__heap_take's scan finds it). The bound never shrinks while
 * the heap lives; a producer whose blocks other threads free keeps MTP_FULL_PER_CLASS. */
#define FULL_COUNTED_MAX 128
static void full_keep_more(mtpi_heap_t *h, unsigned cls) {
  uint8_t lim = h->full_limit[cls];
  if (lim == MTP_FULL_UNBOUNDED) return;
  if (lim < FULL_COUNTED_MAX) {
    h->full_limit[cls] = (uint8_t)(lim * 2);
    return;
  }
  h->full_limit[cls] = MTP_FULL_UNBOUNDED;
  h->full_count[cls] = 0; /* no longer kept */
}

/* s, an exhausted slab of h's, owned and on none of its lists, has room again. If the class's
 * current slab is exhausted too, s becomes current (the next allocation takes the block just
 * freed, its lines still cached); otherwise s joins the partial queue, where it gathers frees
 * towards empty. */
static void room_again(mtpi_heap_t *h, mtpi_desc_t *s) {
  mtpi_desc_t *cur = h->current[s->cls];
  if (cur != &mtp__slab_empty) {
    /* Not asked: whether cur has remote frees worth taking (a load of a line other threads
     * write). On the full list's back, mtp__heap_take still finds cur among the FULL_SCAN oldest
     * once the partial queue is empty. */
    if (cur->free != NULL || mtp__slab_bump_owner(cur) < cur->end) {
      mtp__partial_push(h, s);
      return;
    }
    slab_to_full(h, cur);
  }
  s->used |= MTP_USED_CURRENT;
  h->current[s->cls] = s;
}

/* ---- taking a block ---- */

#define FULL_SCAN 8 /* exhausted slabs mtp__heap_take looks at for remote frees to collect */

/* Whether an exhausted slab's remote list is worth taking now: half of the blocks handed out have
 * come back. A shorter list is not: walking it is a cache miss per block, on lines the freeing
 * threads wrote last. An exhausted slab has handed out every block (16 at least), so the bar is
 * never 0: a slab judged worth it yields blocks, and the slow path's loop always moves on. */
static bool worth_collecting(mtpi_desc_t *s) {
  /* relaxed: a heuristic; the exchange in collect reads the list with acquire */
  return MTP_TF_COUNT(mtp__load_relaxed(&s->thread_free)) >= MTP_USED(s) / 2;
}

/* Whether the current slab s, about to carve its next OS page, has at least a page's worth of
 * blocks back from other threads: those are resident already, the page is not, so they go first
 * (else a thread whose blocks others free soon, as a server's responses and cache entries, carves
 * each slab to its end while most of its blocks wait on the remote list). */
static bool page_back(mtpi_desc_t *s) {
  /* relaxed: a heuristic, as above */
  return (size_t)MTP_TF_COUNT(mtp__load_relaxed(&s->thread_free)) * s->block_size >=
         mtp__os_page_size();
}

/* No exhausted slab among the oldest FULL_SCAN has half back: the one with the most back, if an
 * eighth of its blocks is, rather than a fresh slab (memory no block uses yet), else NULL. */
static mtpi_desc_t *most_back(mtpi_desc_t *best, uint32_t best_n) {
  return best != NULL && best_n >= MTP_USED(best) / 8 ? best : NULL;
}

/* A fresh slab for class cls: from the heap's cache, the pool's partial list, or new pages. */
static mtpi_desc_t *slab_acquire(mtpi_pool_t *pool, mtpi_heap_t *h, unsigned cls, bool *due) {
  bool formatted;
  mtpi_desc_t *s = mtp__cache_take_slab(&h->m, cls, &formatted);
  if (s != NULL) {
    /* relaxed: a block pushed by another thread onto an empty slab was a double free; format
     * drops it */
    if (!formatted || mtp__load_relaxed(&s->thread_free) != MTP_TF_OWNED)
      mtp__slab_format(s, cls, false);
    else
      s->list = MTP_LIST_NONE;
    mtp__slab_set_heap(s, h);
    mtp__store_relaxed(&s->owner, mtp__heap_token(h)); /* relaxed: the cache was ours alone */
    return s;
  }
  uint32_t n;
  s = mtp__pool_slab_get(pool, cls, h, &h->m, mtp__heap_token(h), &n, due);
  h->m.remote_collected += n;
  return s;
}

mtpi_block_t *mtp__heap_take(mtpi_pool_t *pool, mtpi_heap_t *h, unsigned cls, bool *due) {
  MTP_VALIDATE(mtp__heap_validate_class(h, cls)); /* the lists this slow path walks */
  mtpi_desc_t *s;
  for (;;) {
    s = h->current[cls];
    if (s != &mtp__slab_empty) {
      if (s->free != NULL) break;
      /* carved to its end is the usual case here: skip the calls */
      if (mtp__slab_bump(s) < s->end) {
        if (page_back(s)) {
          uint32_t n = mtp__slab_collect(s); /* n > 0: s->free holds blocks (slab.c) */
          h->m.remote_collected += n;
          if (n) break;
        }
        if (mtp__slab_extend(s)) break;
      }
      if (worth_collecting(s)) {
        uint32_t n = mtp__slab_collect(s);
        if (n) {
          h->m.remote_collected += n;
          break;
        }
      }
      slab_to_full(h, s);
      h->current[cls] = &mtp__slab_empty;
    }
    s = mtp__desc_of_node(h->partial[cls]);
    if (s == NULL) { /* a full slab that other threads freed a good share of */
      /* the oldest first (they had the longest for frees to come back), FULL_SCAN at most: the
       * list may be long (full_keep_more), each a descriptor to read */
      mtpi_desc_t *best = NULL;
      uint32_t best_n = 0;
      s = mtp__desc_of_node(h->full[cls]);
      for (unsigned k = 1; s != NULL && !worth_collecting(s); k++) {
        uint32_t n = MTP_TF_COUNT(mtp__load_relaxed(&s->thread_free)); /* relaxed: a heuristic */
        if (n > best_n) best = s, best_n = n;
        s = k < FULL_SCAN ? mtp__desc_of_node(s->link.next) : NULL;
      }
      if (s == NULL) s = most_back(best, best_n);
      if (s) mtp__full_remove(h, s);
    } else {
      mtp__partial_remove(h, s);
    }
    if (s != NULL) {
      /* With local free blocks, its remote list waits until they run out: taking it now means
       * walking it to its tail to append. */
      if (s->free == NULL) h->m.remote_collected += mtp__slab_collect(s);
    } else {
      s = slab_acquire(pool, h, cls, due);
      if (s == NULL) return NULL;
    }
    s->used |= MTP_USED_CURRENT;
    h->current[cls] = s;
  }
  mtpi_block_t *b = mtp__slab_pop(s);
  MTP_ASSERT(b != NULL);
  h->m.allocs++;
  return b;
}

/* ---- free ---- */

static void report_listed(mtpi_block_t *b) {
  mtp__error(MTP_ERR_DOUBLE_FREE, "double free (block was freed already: listed for reuse)", b);
}

/* Free b into s when this thread owns it (the slow paths' push). A tagged block may be on a
 * reuse list rather than on s's lists: looked for there too. */
static void free_local(mtpi_desc_t *s, mtpi_block_t *b) {
  if (MTP_UNLIKELY(mtp__block_tagged(b)) && mtp__reuse_holds(mtp__slab_heap(s), s->cls, b)) {
    report_listed(b);
    return;
  }
  if (mtp__slab_push_local(s, b)) mtp__heap_retire_local(s);
}

MTP_NOINLINE void mtp__heap_free_tagged(mtpi_desc_t *s, mtpi_block_t *b) { free_local(s, b); }

/* Whether s, a current slab, has no block left to hand out. */
static bool exhausted(mtpi_desc_t *s) {
  return s->free == NULL && mtp__slab_bump_owner(s) >= s->end;
}

/* Free b into s, one of this thread's exhausted slabs (owner marked FULL): listed for reuse
 * (reuse.c) above MTP_DIRECT_MAX, and at or below it while the class's current slab is exhausted
 * too (the allocation's slow path pops the list, so pushes and pops stay level); otherwise s has
 * room again. A tagged block (a possible double free) is never listed: it is looked for first. */
static void free_into_full(mtpi_desc_t *s, mtpi_block_t *b) {
  mtpi_heap_t *h = mtp__slab_heap(s);
  unsigned cls = s->cls;
  bool tagged = mtp__block_tagged(b);
  if (MTP_UNLIKELY(tagged) && mtp__reuse_holds(h, cls, b)) { /* before the lists change */
    report_listed(b);
    return;
  }
  mtpi_desc_t *cur = h->current[cls];
  if (MTP_LIKELY(!tagged) &&
      (s->block_size > MTP_DIRECT_MAX || cur == &mtp__slab_empty || exhausted(cur))) {
    if (MTP_UNLIKELY(h->reuse_n[cls] >= h->reuse_cap[cls]))
      mtp__heap_free_reuse_full(s, b);
    else
      mtp__reuse_push(h, cls, b);
    return;
  }
  mtp__full_remove(h, s);
  room_again(h, s);
  free_local(s, b);
}

/* Whether b, in slab s, is a block handed out (below the bump pointer) and the start of one: the
 * distance to the bump pointer, a block boundary whatever value of it is read, against the
 * class's reciprocal (a multiply and a compare, no division: base/base.h). */
MTP_INLINE bool handed_out_start(const mtpi_desc_t *s, const mtpi_block_t *b) {
  const char *bump = mtp__slab_bump((mtpi_desc_t *)s);
  return (const char *)b < bump && mtp__offset_ok((uint64_t)(bump - (const char *)b), s->cls);
}

/* The remote free's fast case: d, b's head descriptor, is the first page of a slab that another
 * thread owns (the owner word holds its token, marked FULL or not: a push into an exhausted slab
 * is the same push), or of a detached slab that was not this thread's heap's (an exhausted slab
 * its owner moved on from; the slow path takes one of ours back). Only an owned, unchecked slab's
 * first descriptor holds a token: TAIL and FREE descriptors, medium runs, detached and checked
 * slabs hold 0, so the owner word and, for 0, the kind tell what d is. A stale owner read is
 * harmless: the slab cannot be released while b is in use, and the push works whether the slab
 * is still owned or was detached meanwhile (the CAS tells). */
MTP_INLINE bool remote_fast(mtpi_desc_t *d, mtpi_block_t *b) {
  uintptr_t owner = mtp__load_relaxed(&d->owner); /* relaxed: a hint (types.h) */
  mtpi_thread_t *me = mtp__tl_thread;
  if (owner == 0) {
    /* kind and checked one byte each (relaxed): a wider load would read `list` beside them,
     * which the pool writes under its lock when it lists a detached slab */
    if (__atomic_load_n(&d->kind, __ATOMIC_RELAXED) != MTP_PAGE_SLAB ||
        __atomic_load_n(&d->checked, __ATOMIC_RELAXED) ||
        mtp__slab_heap(d) == mtp__thread_heap(me, mtp__pool_of_page(d)->id))
      return false;
  } else if (MTP_UNLIKELY((owner & MTP_OWNER_CACHED) != 0 ||
                          (owner & ~(uintptr_t)MTP_OWNER_FULL) == (uintptr_t)me)) {
    return false;
  }
  /* the same checks as the slow path's: a block handed out, and the start of one */
  if (MTP_UNLIKELY(!handed_out_start(d, b))) return false;
  mtp__track_free(b, d->block_size);
  mtpi_remote_seen_t seen;
  if (MTP_UNLIKELY(mtp__slab_free_remote(d, b, &seen) == MTP_REMOTE_NEWS)) {
    int e = errno; /* frees leave errno alone (mtpool.h); a release may purge (madvise) */
    if (mtp__pool_detached_news(&seen, d)) mtp__purger_wake();
    errno = e;
  }
  return true;
}

MTP_NOINLINE bool mtp__heap_free_other(mtpi_desc_t *d, mtpi_block_t *b) {
  /* The fast path tried the owner's push on s, the head of b's page (d, or d itself). What is
   * left: the remote push, one of our exhausted slabs, the slow path (misuse included). */
  mtpi_desc_t *s = mtp__run_head(d);
  if (MTP_LIKELY(remote_fast(s, b))) return true;
  /* One of our exhausted slabs has room again: only an owned slab's first descriptor carries our
   * token with the FULL mark, so the same two checks suffice. */
  if (mtp__load_relaxed(&s->owner) == ((uintptr_t)mtp__tl_thread | MTP_OWNER_FULL) &&
      handed_out_start(s, b)) {
    free_into_full(s, b);
    return true;
  }
  return mtp__heap_free_slow(s, b);
}

/* A slab we gave up when it was full, freed into by us: take it back, so our frees into it stay
 * local. Returns whether b was freed. */
static bool take_back(mtpi_pool_t *pool, mtpi_desc_t *s, mtpi_block_t *b) {
  mtpi_heap_t *h = mtp__thread_heap(mtp__tl_thread, pool->id);
  if (h == NULL || h != mtp__slab_heap(s) || mtp__member_pool(&h->m) != pool) return false;
  /* Not on the pool's list: one CAS takes it back. Listed: the list's lock is needed. */
  uint32_t n;
  bool adopted = mtp__slab_adopt(s, h, mtp__heap_token(h), false, &n);
  /* acquire: pairs with the CAS that cleared OWNED, before we read the slab's fields */
  if (!adopted && !(mtp__load_acquire(&s->thread_free) & MTP_TF_OWNED))
    adopted = mtp__pool_adopt(pool, s, h, mtp__heap_token(h), &n);
  if (!adopted) return false;
  h->m.remote_collected += n;
  full_keep_more(h, s->cls);
  if (h->current[s->cls] != s) room_again(h, s);
  free_local(s, b);
  return true;
}

/* Returns false, nothing done, for a block of a checked slab: checked mode's to free. */
static bool free_slow(mtpi_desc_t *d, mtpi_block_t *b) {
  mtpi_desc_t *s = mtp__run_head(d);
  /* A medium block: its owner word is 0, so every free of one comes here, from any thread. */
  if (s->kind == MTP_PAGE_MEDIUM || s->kind == MTP_PAGE_PACKED) {
    mtp__heap_medium_free(s, b, 0, false);
    return true;
  }
  if (MTP_UNLIKELY(s->kind != MTP_PAGE_SLAB)) {
    mtp__error(s->kind == MTP_PAGE_FREE ? MTP_ERR_DOUBLE_FREE : MTP_ERR_INVALID_POINTER,
               s->kind == MTP_PAGE_FREE ? "double free (block's slab is already free)"
                                        : "invalid pointer (region metadata)",
               b);
    return true;
  }
  if (s->checked) return false;
  size_t off = (size_t)((char *)b - mtp__page_start(s));
  if (MTP_UNLIKELY(off % s->block_size != 0)) {
    mtp__error(MTP_ERR_INVALID_POINTER, "invalid pointer (not the start of a block)", b);
    return true;
  }
  /* Blocks at and above the bump pointer were never handed out: pushing one would hand it out
   * twice (once by the free list, once by carving). */
  if (MTP_UNLIKELY((char *)b >= mtp__slab_bump(s))) {
    /* An empty slab the pool keeps for reuse has no owner and its bump pointer at its start
     * (pool/slabs.c): a free into it is a free of a block freed before. */
    if (mtp__slab_bump(s) == mtp__page_start(s) && mtp__load_relaxed(&s->owner) == 0)
      mtp__error(MTP_ERR_DOUBLE_FREE, "double free (block's slab is empty)", b);
    else
      mtp__error(MTP_ERR_INVALID_POINTER, "invalid pointer (a block never handed out)", b);
    return true;
  }
  mtpi_thread_t *me = mtp__tl_thread;
  uintptr_t owner = mtp__load_relaxed(&s->owner); /* relaxed: a hint; see types.h */
  if (owner == (uintptr_t)me) { /* a tail page of our own slab */
    free_local(s, b);
    return true;
  }
  if (owner == ((uintptr_t)me | MTP_OWNER_FULL)) { /* one of our exhausted slabs has room again */
    free_into_full(s, b);
    return true;
  }
  if (owner == ((uintptr_t)me | MTP_OWNER_CACHED)) {
    mtp__error(MTP_ERR_DOUBLE_FREE, "double free (block's slab is empty)", b);
    return true;
  }
  mtpi_pool_t *pool = mtp__pool_of_page(s);
  if (owner == 0 && me != &mtp__thread_empty && take_back(pool, s, b)) return true;
  mtp__track_free(b, s->block_size);
  mtpi_remote_seen_t seen;
  if (mtp__slab_free_remote(s, b, &seen) == MTP_REMOTE_NEWS && mtp__pool_detached_news(&seen, s))
    mtp__purger_wake();
  return true;
}

MTP_NOINLINE bool mtp__heap_free_slow(mtpi_desc_t *d, mtpi_block_t *b) {
  int e = errno; /* frees leave errno alone (mtpool.h): releases, purges and reports may set it */
  bool done = free_slow(d, b);
  errno = e;
  return done;
}

/* ---- giving a heap's slabs back ---- */

/* Pool lock held. Give one owned slab back: release it if empty (the pool keeps it for the next
 * thread's slab of its class), else detach it for adoption. */
static void abandon_slab(mtpi_pool_t *pool, mtpi_heap_t *h, mtpi_desc_t *s, uint64_t now) {
  for (;;) {
    h->m.remote_collected += mtp__slab_collect(s);
    if (s->used == 0) {
      mtp__pool_release_locked(pool, s, now);
      return;
    }
    uint32_t n;
    if (mtp__slab_detach(s, mtp__heap_token(h), &n)) break;
    h->m.remote_collected += n;
  }
  /* Detached with blocks in use; any free room makes it worth adopting. Should a remote free be
   * emptying it right now, that thread waits for our lock and then releases it. */
  if (s->used < s->capacity || s->free != NULL) mtp__pool_list_detached_locked(pool, s);
}

void mtp__heap_give_back_locked(mtpi_pool_t *pool, mtpi_heap_t *h) {
  MTP_VALIDATE(mtp__heap_validate(h));
  mtp__reuse_give_back_locked(h);
  uint64_t now = mtp__os_now_ms();
  for (unsigned c = 0; c < MTP_NUM_CLASSES; c++) {
    mtpi_desc_t *s = h->current[c];
    h->current[c] = &mtp__slab_empty;
    if (s != &mtp__slab_empty) {
      s->used &= ~MTP_USED_CURRENT;
      abandon_slab(pool, h, s, now);
    }
    while ((s = mtp__desc_of_node(h->partial[c])) != NULL) {
      mtp__partial_remove(h, s);
      abandon_slab(pool, h, s, now);
    }
    while ((s = mtp__desc_of_node(h->full[c])) != NULL) {
      mtp__full_remove(h, s);
      abandon_slab(pool, h, s, now);
    }
  }
  mtp__pool_take_cache_locked(pool, &h->m); /* for the next thread's slabs of their classes */
}

/* ---- validity (MTP_DEBUG 2) ---- */

void mtp__heap_validate_class(mtpi_heap_t *h, unsigned c) {
  uintptr_t me = mtp__heap_token(h);
  mtpi_desc_t *s = h->current[c];
  if (s != &mtp__slab_empty) {
    MTP_ASSERT(s->cls == c && (s->used & MTP_USED_CURRENT));
    MTP_ASSERT(mtp__load_relaxed(&s->owner) == me && mtp__slab_heap(s) == h);
    mtp__slab_validate(s);
  }
  unsigned n = 0;
  mtpi_node_t *last = NULL;
  for (mtpi_node_t *it = h->partial[c]; it; last = it, it = it->next) {
    s = mtp__desc_of_node(it);
    MTP_ASSERT(s->cls == c && s->list == MTP_LIST_HEAP_PARTIAL && !(s->used & MTP_USED_CURRENT));
    MTP_ASSERT(mtp__load_relaxed(&s->owner) == me && mtp__slab_heap(s) == h);
    MTP_ASSERT(it->next == NULL || it->next->prev == it);
    mtp__slab_validate(s);
  }
  MTP_ASSERT(h->partial[c] == NULL || h->partial[c]->prev == last); /* the queue's back */
  for (mtpi_node_t *it = h->full[c]; it; it = it->next) {
    s = mtp__desc_of_node(it);
    MTP_ASSERT(s->cls == c && s->list == MTP_LIST_HEAP_FULL);
    MTP_ASSERT(mtp__load_relaxed(&s->owner) == (me | MTP_OWNER_FULL));
    MTP_ASSERT(it->next == NULL || it->next->prev == it);
    mtp__slab_validate(s);
    n++;
    last = it;
  }
  MTP_ASSERT(h->full[c] == NULL || h->full[c]->prev == last); /* the queue's back */
  MTP_ASSERT(h->full_limit[c] == MTP_FULL_UNBOUNDED ||
             (n == h->full_count[c] && n <= (h->m.shared ? 0u : h->full_limit[c])));
  MTP_ASSERT(h->m.shared || h->full_limit[c] >= MTP_FULL_PER_CLASS);
  MTP_ASSERT(h->full_limit[c] == MTP_FULL_UNBOUNDED || h->full_limit[c] <= FULL_COUNTED_MAX);
  mtp__reuse_validate_class(h, c);
  (void)me, (void)n, (void)last;
}

void mtp__heap_validate(mtpi_heap_t *h) {
  for (unsigned c = 0; c < MTP_NUM_CLASSES; c++) mtp__heap_validate_class(h, c);
}
