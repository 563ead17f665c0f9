/* Slabs: one span of pages holding blocks of one size class. Blocks are carved lazily from a bump
 * area, one OS page at a time, so untouched memory is never faulted in. The owner pops and pushes
 * `free` without atomics; other threads push onto `thread_free` with one CAS (see the invariants
 * at mtp_slab_t in internal.h). Calls region geometry helpers only. */
#include "internal.h"
#include "os.h"
#include "track.h"

void mtp__slab_format(mtp_slab_t *s, unsigned cls, bool checked) {
  uint32_t bs = mtp__class_size[cls];
  size_t span = (size_t)s->pages << MTP_PAGE_SHIFT;
  char *start = mtp__slab_start(s);
  s->free = NULL;
  s->used = 0;
  s->block_size = bs;
  s->capacity = (uint32_t)(span / bs);
  s->bump = start;
  s->end = start + (size_t)s->capacity * bs;
  s->size_min = cls == 0 ? 0 : mtp__class_size[cls - 1] + 1;
  s->size_span = bs - s->size_min;
  mtp__slab_set_heap(s, NULL);
  s->next = s->prev = NULL;
  s->detached_used = 0;
  s->cls = (uint16_t)cls;
  s->kind = MTP_PAGE_SLAB;
  s->list = MTP_LIST_NONE;
  s->checked = checked;
  s->check_bits = NULL;
  mtp__store_relaxed(&s->owner, 0);
  mtp__store_relaxed(&s->thread_free, MTP_TF_OWNED);
}

bool mtp__slab_extend(mtp_slab_t *s) {
  char *b = s->bump;
  if (b >= s->end) return false;
  /* Carve to the end of the OS page that holds the bump pointer, at least one block. */
  char *limit = (char *)(((uintptr_t)b + MTP_OS_PAGE) & ~(uintptr_t)(MTP_OS_PAGE - 1));
  uint32_t bs = s->block_size;
  if (limit < b + bs) limit = b + bs;
  if (limit > s->end) limit = s->end;
  mtp_block_t *head = (mtp_block_t *)b, *prev = head;
  for (b += bs; b + bs <= limit; b += bs) {
    mtp__block_set_next(prev, (mtp_block_t *)b);
    prev = (mtp_block_t *)b;
  }
  mtp__block_set_next(prev, s->free);
  s->free = head;
  s->bump = b;
  return true;
}

uint32_t mtp__slab_collect(mtp_slab_t *s) {
  uintptr_t w = mtp__load_relaxed(&s->thread_free);
  if (MTP_TF_PTR(w) == NULL) return 0;
  /* acquire: the pushers' writes of each block's `next` happen before our reads of them */
  w = mtp__exchange_acq_rel(&s->thread_free, MTP_TF_OWNED);
  mtp_block_t *list = MTP_TF_PTR(w);
  uint32_t n = MTP_TF_COUNT(w);
  if (list == NULL) return 0;
  if (n == MTP_USED(s) && s->free == NULL) {
    /* Every block handed out came back from other threads: carve the slab afresh rather than
     * walk their list, whose links are cache misses on lines the freeing threads wrote last. */
    s->bump = mtp__slab_start(s);
    s->used -= n;
    mtp__slab_extend(s);
    return n;
  } else if (s->free == NULL) {
    s->free = list;
  } else { /* rare: append our list behind the remote one */
    mtp_block_t *t = list;
    for (mtp_block_t *nx; (nx = mtp__block_next(t)) != NULL;) t = nx;
    mtp__block_set_next(t, s->free);
    s->free = list;
  }
  s->used -= n;
  return n;
}

bool mtp__slab_detach(mtp_slab_t *s) {
  s->detached_used = MTP_USED(s);
  mtp__store_relaxed(&s->owner, 0);
  uintptr_t expect = MTP_TF_OWNED;
  /* release: detached_used is visible to every freer that sees the slab detached */
  if (mtp__cas_strong_acq_rel(&s->thread_free, &expect, 0)) return true;
  mtp_heap_t *h = mtp__slab_heap(s);
  mtp__store_relaxed(&s->owner, (uintptr_t)h->thread);
  h->remote_collected += mtp__slab_collect(s);
  return false;
}

bool mtp__slab_mark_listed(mtp_slab_t *s) {
  uintptr_t w = mtp__load_relaxed(&s->thread_free);
  while (!(w & MTP_TF_FLAGS))
    if (mtp__cas_weak_acq_rel(&s->thread_free, &w, w | MTP_TF_LISTED)) return true;
  return false;
}

bool mtp__slab_adopt(mtp_slab_t *s, mtp_heap_t *heap, bool listed_ok) {
  uintptr_t w = mtp__load_relaxed(&s->thread_free);
  for (;;) {
    if ((w & MTP_TF_OWNED) || ((w & MTP_TF_LISTED) && !listed_ok)) return false;
    if (mtp__cas_weak_acq_rel(&s->thread_free, &w, MTP_TF_OWNED)) break;
  }
  /* We own it now: the list we took is the blocks freed since the detach. */
  mtp_block_t *list = MTP_TF_PTR(w);
  uint32_t n = MTP_TF_COUNT(w);
  s->used = s->detached_used - n;
  mtp__slab_set_heap(s, heap);
  if (list) {
    if (s->free == NULL) {
      s->free = list;
    } else {
      mtp_block_t *t = list;
      for (mtp_block_t *nx; (nx = mtp__block_next(t)) != NULL;) t = nx;
      mtp__block_set_next(t, s->free);
      s->free = list;
    }
  }
  heap->remote_collected += n;
  mtp__store_relaxed(&s->owner, (uintptr_t)heap->thread);
  return true;
}

void mtp__slab_free_remote(mtp_slab_t *s, mtp_block_t *b) {
  /* acquire: if the slab is detached, the detaching thread's write of detached_used is visible */
  uintptr_t w = mtp__load_acquire(&s->thread_free);
  uintptr_t nw;
  uint32_t used;
  do {
    if (MTP_UNLIKELY(MTP_TF_PTR(w) == b)) { /* the block another free just pushed */
      mtp__error(MTP_ERR_DOUBLE_FREE, "double free (block already on its slab's remote list)", b);
      return;
    }
    used = (w & MTP_TF_OWNED) ? 0 : s->detached_used;
    mtp__block_set_next(b, MTP_TF_PTR(w));
    nw = (w & MTP_TF_FLAGS) | ((w & ~MTP_TF_FLAGS & ~MTP_TF_PTR_MASK) + MTP_TF_COUNT_ONE) |
         (uintptr_t)b;
  } while (!mtp__cas_weak_acq_rel(&s->thread_free, &w, nw));
  if (nw & MTP_TF_OWNED) return; /* the owner collects it */
  /* Detached: this free may make the slab worth adopting, or empty. Exactly one free sees each
   * count, so exactly one thread acts on each threshold. */
  uint32_t count = MTP_TF_COUNT(nw);
  if (count != used && count != (used + 3) / 4) return;
  mtp_pool_internal_t *pool = mtp__slab_pool(s);
  mtp__pool_lock(pool);
  /* Adoption (which sets OWNED) happens only under this lock: if the word is still detached the
   * slab's fields are stable while we hold it. */
  uintptr_t now = mtp__load_acquire(&s->thread_free);
  if (!(now & MTP_TF_OWNED) && s->kind == MTP_PAGE_SLAB) {
    if (MTP_TF_COUNT(now) == s->detached_used) {
      if (now & MTP_TF_LISTED) mtp__pool_partial_remove(pool, s);
      pool->dead_remote += MTP_TF_COUNT(now);
      mtp__pool_release_slab(pool, s, mtp__os_now_ms());
    } else if (mtp__slab_mark_listed(s)) { /* not listed yet, still detached */
      mtp__pool_partial_push(pool, s);
    }
  }
  mtp__pool_unlock(pool);
}
