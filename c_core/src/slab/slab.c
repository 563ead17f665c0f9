/* Slabs: one run of pages holding blocks of one size class. Blocks are carved lazily from a bump
 * area, one OS page at a time, so untouched memory is never faulted in. The owner pops and pushes
 * `free` without atomics; other threads push onto `thread_free` with one CAS (see the invariants
 * at mtpi_desc_t in base/types.h). Nothing here locks or lists: outcomes are returned (slab.h).
 * Layer: slab. */
#include "slab.h"

#include "base/os.h"

void mtp__slab_format(mtpi_desc_t *s, unsigned cls, bool checked) {
  MTP_ASSERT(cls < MTP_NUM_CLASSES && s->pages == mtp__class_pages[cls]);
  MTP_ASSERT(mtp__link_key_get() != 0); /* set when the pool was made (mtp__pool_new) */
  uint32_t bs = mtp__class_size[cls];
  size_t run = (size_t)s->pages << MTP_PAGE_SHIFT;
  char *start = mtp__page_start(s);
  s->free = NULL;
  s->used = 0;
  s->block_size = bs;
  s->recip = mtp__recip32(bs);
  s->capacity = (uint32_t)(run / bs);
  mtp__slab_set_bump(s, start);
  s->end = start + (size_t)s->capacity * bs;
  s->size_min = cls == 0 ? 0 : mtp__class_size[cls - 1] + 1;
  s->size_span = bs - s->size_min;
  mtp__slab_set_heap(s, NULL);
  s->link.next = s->link.prev = NULL;
  s->detached_used = 0;
  s->cls = (uint16_t)cls;
  s->kind = MTP_PAGE_SLAB;
  s->list = MTP_LIST_NONE;
  s->checked = checked;
  s->check_bits = NULL;
  /* relaxed: the slab is handed to its first owner under the pool lock or from the heap's own
   * cache; no other thread can reach it before then */
  mtp__store_relaxed(&s->owner, 0);
  mtp__store_relaxed(&s->thread_free, MTP_TF_OWNED);
}

bool mtp__slab_carve(mtpi_desc_t *s, size_t os_page) {
  char *b = mtp__slab_bump(s);
  if (b >= s->end) return false;
  char *limit = (char *)(((uintptr_t)b + os_page) & ~(uintptr_t)(os_page - 1));
  uint32_t bs = s->block_size;
  if (limit < b + bs) limit = b + bs;
  if (limit > s->end) limit = s->end;
  /* each block linked to the next while that one fits: a block starting at or below `fit` ends
   * by limit (limit >= b + bs above, so fit >= b) */
  char *head = b, *fit = limit - bs;
  uintptr_t key = mtp__link_key_get(); /* read once: the link stores do not change it */
#pragma GCC unroll 2
  for (; b + bs <= fit; b += bs)
    mtp__block_set_next_key((mtpi_block_t *)b, (mtpi_block_t *)(b + bs), key);
  mtp__block_set_next_key((mtpi_block_t *)b, s->free, key);
  s->free = (mtpi_block_t *)head;
  /* relaxed: only the owner writes bump; a remote reader is ordered by the hand-out (types.h) */
  mtp__slab_set_bump(s, b + bs);
  return true;
}

static bool list_holds(mtpi_desc_t *s, mtpi_block_t *list, mtpi_block_t *b) {
  char *start = mtp__page_start(s), *bump = mtp__slab_bump(s);
  for (uint32_t n = 0; list != NULL && n <= s->capacity; n++) {
    if (list == b) return true;
    /* a link that leaves the slab was overwritten: stop there (the list is not followed further) */
    if ((char *)list < start || (char *)list >= bump) return false;
    list = mtp__block_next(list);
  }
  return false;
}

MTP_NOINLINE bool mtp__slab_holds_free(mtpi_desc_t *s, mtpi_block_t *b) {
  if (list_holds(s, s->free, b)) return true;
  /* acquire: the pushers' links (written before their release CAS) are visible; only the owner
   * (the caller) takes blocks off this list, so the blocks walked stay on it meanwhile */
  return list_holds(s, MTP_TF_PTR(mtp__load_acquire(&s->thread_free)), b);
}

bool mtp__slab_extend(mtpi_desc_t *s) { return mtp__slab_carve(s, mtp__os_page_size()); }

/* Put list (taken from thread_free) in front of s->free. */
static void splice(mtpi_desc_t *s, mtpi_block_t *list) {
  if (list == NULL) return;
  if (s->free != NULL) { /* rare: append our list behind the remote one */
    mtpi_block_t *t = list;
    for (mtpi_block_t *nx; (nx = mtp__block_next(t)) != NULL;) t = nx;
    mtp__block_set_next(t, s->free);
  }
  s->free = list;
}

uint32_t mtp__slab_collect(mtpi_desc_t *s) {
  /* relaxed peek: an empty list needs no RMW; a stale non-empty read is settled by the exchange */
  uintptr_t w = mtp__load_relaxed(&s->thread_free);
  if (MTP_TF_PTR(w) == NULL) return 0;
  /* acquire: the pushers' writes of each block's `next` happen before our reads of them */
  w = mtp__exchange_acq_rel(&s->thread_free, MTP_TF_OWNED);
  mtpi_block_t *list = MTP_TF_PTR(w);
  uint32_t n = MTP_TF_COUNT(w);
  if (list == NULL) return 0;
  MTP_ASSERT(n <= MTP_USED(s));
  if (n == MTP_USED(s) && s->free == NULL) {
    /* Every block handed out came back from other threads: carve the slab afresh rather than
     * walk their list, whose links are cache misses on lines the freeing threads wrote last. */
    mtp__slab_set_bump(s, mtp__page_start(s));
    s->used -= n;
    mtp__slab_extend(s);
    return n;
  }
  splice(s, list);
  s->used -= n;
  return n;
}

bool mtp__slab_detach(mtpi_desc_t *s, uintptr_t owner_token, uint32_t *collected) {
  mtp__u32_store_relaxed(&s->detached_used, MTP_USED(s)); /* freers may read it: slab.h */
  /* relaxed: owner is a hint to other threads (types.h); the CAS below decides */
  mtp__store_relaxed(&s->owner, 0);
  uintptr_t expect = MTP_TF_OWNED;
  /* release: detached_used is visible to every freer that sees the slab detached */
  if (mtp__cas_strong_acq_rel(&s->thread_free, &expect, 0)) {
    *collected = 0;
    return true;
  }
  mtp__store_relaxed(&s->owner, owner_token);
  *collected = mtp__slab_collect(s);
  return false;
}

bool mtp__slab_mark_listed(mtpi_desc_t *s) {
  uintptr_t w = mtp__load_relaxed(&s->thread_free); /* the CAS re-reads with acquire */
  while (!(w & MTP_TF_FLAGS))
    if (mtp__cas_weak_acq_rel(&s->thread_free, &w, w | MTP_TF_LISTED)) return true;
  return false;
}

bool mtp__slab_adopt(mtpi_desc_t *s, void *heap, uintptr_t owner_token, bool listed_ok,
                     uint32_t *collected) {
  uintptr_t w = mtp__load_relaxed(&s->thread_free); /* the CAS re-reads with acquire */
  for (;;) {
    if ((w & MTP_TF_OWNED) || ((w & MTP_TF_LISTED) && !listed_ok)) return false;
    /* acquire: the remote pushers' block links, and the detacher's detached_used */
    if (mtp__cas_weak_acq_rel(&s->thread_free, &w, MTP_TF_OWNED)) break;
  }
  /* We own it now: the list we took is the blocks freed since the detach. */
  uint32_t n = MTP_TF_COUNT(w);
  s->used = s->detached_used - n;
  mtp__slab_set_heap(s, heap);
  splice(s, MTP_TF_PTR(w));
  *collected = n;
  mtp__store_relaxed(&s->owner, owner_token); /* relaxed: a hint (types.h) */
  return true;
}

void mtp__slab_validate(mtpi_desc_t *s) {
  MTP_ASSERT(s->kind == MTP_PAGE_SLAB && s->cls < MTP_NUM_CLASSES);
  MTP_ASSERT(s->block_size == mtp__class_size[s->cls]);
  char *start = mtp__page_start(s), *bump = mtp__slab_bump(s);
  MTP_ASSERT(s->capacity == ((size_t)s->pages << MTP_PAGE_SHIFT) / s->block_size);
  MTP_ASSERT(s->end == start + (size_t)s->capacity * s->block_size);
  MTP_ASSERT(bump >= start && bump <= s->end && (size_t)(bump - start) % s->block_size == 0);
  if (s->checked) return; /* checked mode keeps its own bitmap */
  uint32_t n = 0;
  for (mtpi_block_t *b = s->free; b != NULL; b = mtp__block_next(b)) {
    MTP_ASSERT(n < s->capacity); /* no cycle */
    MTP_ASSERT((char *)b >= start && (char *)b < bump);
    MTP_ASSERT((size_t)((char *)b - start) % s->block_size == 0);
    n++;
  }
  if (mtp__load_relaxed(&s->thread_free) & MTP_TF_OWNED) { /* relaxed: the owner asks */
    uint32_t unbumped = (uint32_t)((size_t)(s->end - bump) / s->block_size);
    MTP_ASSERT(MTP_USED(s) + n + unbumped == s->capacity);
  }
}

#if defined(MTP_TRACK_VALGRIND)
static void mark(mtpi_desc_t *s, uint8_t *seen, mtpi_block_t *list) {
  char *start = mtp__page_start(s);
  for (uint32_t n = 0; list != NULL && n < s->capacity; n++) {
    size_t i = (size_t)((char *)list - start) / s->block_size;
    seen[i / 8] |= (uint8_t)(1u << (i % 8));
    list = mtp__block_next(list);
  }
}

void mtp__slab_forget_blocks(mtpi_desc_t *s) {
  if (s->kind != MTP_PAGE_SLAB || s->list == MTP_LIST_HEAP_CACHE) return;
  uint8_t seen[4 * MTP_PAGE_SIZE / 8 / 8 + 1] = {0}; /* a bit per block: 8-byte blocks */
  mark(s, seen, s->free);
  mark(s, seen, MTP_TF_PTR(mtp__load_relaxed(&s->thread_free)));
  char *start = mtp__page_start(s), *bump = mtp__slab_bump(s);
  for (uint32_t i = 0; start + (size_t)(i + 1) * s->block_size <= bump; i++) {
    bool live = s->check_bits ? (s->check_bits[i / 8] >> (i % 8) & 1) : !(seen[i / 8] >> (i % 8) & 1);
    if (live) VALGRIND_FREELIKE_BLOCK(start + (size_t)i * s->block_size, 0);
  }
}
#else
void mtp__slab_forget_blocks(mtpi_desc_t *s) { (void)s; }
#endif
