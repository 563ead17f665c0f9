/* The reuse lists: per size class, blocks the thread freed into its own slabs, newest first,
 * handed out again before any slab's block. A slab hands out the block freed last into that slab,
 * while a thread that replaces blocks at random frees into a different slab nearly every time,
 * and a block freed long ago is cold in the cache; the lists hand out the block freed last of its
 * class, as a thread cache does. Layer: heap.
 *
 * Which frees list a block (the owner's, into a slab this heap owns):
 *   - above MTP_DIRECT_MAX, every such free: the free fast path pushes (api/alloc.c) and the
 *     allocation fast path pops first;
 *   - up to MTP_DIRECT_MAX, a free into one of the heap's exhausted slabs (the free slow path):
 *     pushing is cheaper than moving the slab back to the partial queue, and the allocation's
 *     slow path pops the list before it looks for a slab (its fast path has one pop and no test:
 *     a free into the current slab goes onto the slab's own list).
 * Each list holds at most cap blocks (REUSE_BYTES of them, REUSE_MAX at most); a push onto a full
 * list first sends its older half back to the slabs (trim), so the list keeps the blocks freed
 * last. The cost: a thread that frees and then idles keeps its listed blocks' slabs from the purge
 * until it allocates again, trims, flushes or exits.
 *
 * Invariants (mtp__reuse_validate_class checks them):
 *   - every listed block of class c is a handed-out block of a slab of c that this heap owns
 *     (owner word its token, FULL mark or not), counted as used by its slab, so its slab is never
 *     retired; reuse_n[c] counts the list, at most reuse_cap[c]. A heap lets a slab go in two
 *     places only: slab_to_full (the class's list goes back to its slabs first) and give-back at
 *     thread exit or flush (every list first, mtp__reuse_give_back_locked).
 *   - a listed block's link word is encoded as on any free list: a second free of it looks tagged
 *     and is looked for on the list (mtp__reuse_holds), so it is reported as a double free.
 *   - the shared heaps list nothing: no thread frees into their slabs as owner.
 *   - statistics and the heap walk read the lists racily under the pool lock (mtp__heap_listed).
 */
#include "lists.h"

#include <string.h>

#define REUSE_MAX 32                  /* blocks per class */
#define REUSE_BYTES ((size_t)1 << 20) /* per class: 32 KiB blocks, 32 at most */
/* so every bound is 2 or more, and a trim keeps a block */
_Static_assert(REUSE_BYTES / MTP_MAX_SMALL >= 2, "a reuse list holds two blocks of any class");

static uint8_t reuse_max(unsigned cls) {
  size_t n = REUSE_BYTES / mtp__class_size[cls];
  return (uint8_t)(n > REUSE_MAX ? REUSE_MAX : n);
}

/* Every class's bound, computed once (pthread_once allocates nothing). */
static uint8_t caps[MTP_NUM_CLASSES];
static pthread_once_t caps_once = PTHREAD_ONCE_INIT;
static void caps_make(void) {
  for (unsigned c = 0; c < MTP_NUM_CLASSES; c++) caps[c] = reuse_max(c);
}

void mtp__reuse_init(mtpi_heap_t *h) {
  pthread_once(&caps_once, caps_make);
  memcpy(h->reuse_cap, caps, sizeof(caps));
}

mtpi_block_t *mtp__reuse_take(mtpi_heap_t *h, unsigned cls) {
  mtpi_block_t *list = h->reuse[cls];
  h->reuse[cls] = NULL;
  h->reuse_n[cls] = 0;
  return list;
}

/* b, off h's list, onto its slab s's free list; whether s is empty now. The tools saw b freed
 * when it was listed: no second track_free. */
static bool unlist(mtpi_heap_t *h, mtpi_desc_t *s, mtpi_block_t *b) {
  MTP_ASSERT(mtp__slab_heap(s) == h &&
             (mtp__load_relaxed(&s->owner) & ~MTP_OWNER_FULL) == mtp__heap_token(h));
  (void)h;
  mtp__block_set_next(b, s->free);
  s->free = b;
  return --s->used == 0;
}

void mtp__reuse_return(mtpi_heap_t *h, mtpi_block_t *b, bool retire) {
  while (b != NULL) {
    mtpi_block_t *next = mtp__block_next(b);
    mtpi_desc_t *s = mtp__run_of((uintptr_t)b);
    if (s->list == MTP_LIST_HEAP_FULL) { /* it has room again */
      mtp__full_remove(h, s);
      mtp__partial_push(h, s);
    }
    if (MTP_UNLIKELY(unlist(h, s, b)) && retire) mtp__heap_retire_local(s);
    b = next;
  }
}

void mtp__reuse_give_back_locked(mtpi_heap_t *h) {
  for (unsigned c = 0; c < MTP_NUM_CLASSES; c++) {
    mtpi_block_t *next;
    for (mtpi_block_t *b = mtp__reuse_take(h, c); b != NULL; b = next) {
      next = mtp__block_next(b);
      (void)unlist(h, mtp__run_of((uintptr_t)b), b); /* an emptied slab: the give-back releases it */
    }
  }
}

/* Class cls's list is at its bound: its older half goes back to the slabs. Cut first: the heap is
 * consistent before mtp__reuse_return may retire a slab. */
static MTP_NOINLINE void reuse_trim(mtpi_heap_t *h, unsigned cls) {
  unsigned keep = h->reuse_n[cls] / 2;
  MTP_ASSERT(keep >= 1); /* the list is full: reuse_cap blocks, 2 or more */
  mtpi_block_t *last = h->reuse[cls];
  for (unsigned k = 1; k < keep; k++) last = mtp__block_next(last);
  mtpi_block_t *old = mtp__block_next(last);
  mtp__block_set_next(last, NULL);
  h->reuse_n[cls] = (uint8_t)keep;
  mtp__reuse_return(h, old, true);
}

MTP_NOINLINE void mtp__heap_free_reuse_full(mtpi_desc_t *s, mtpi_block_t *b) {
  mtpi_heap_t *h = mtp__slab_heap(s);
  reuse_trim(h, s->cls);
  mtp__reuse_push(h, s->cls, b);
}

bool mtp__reuse_holds(const mtpi_heap_t *h, unsigned cls, const mtpi_block_t *b) {
  unsigned n = h->reuse_n[cls];
  for (mtpi_block_t *it = h->reuse[cls]; it != NULL && n > 0; it = mtp__block_next(it), n--)
    if (it == b) return true;
  return false;
}

/* Up to max of the n blocks of class c listed from b into out, following a link only from a
 * block of one of rs's slabs of c: the owner may pop one meanwhile and its user overwrite the link
 * (rs's regions stay mapped while the pool lock is held). */
MTP_NO_TSAN static size_t listed_copy(mtpi_rset_t *rs, unsigned c, mtpi_block_t *b, size_t n,
                                      void **out, size_t max) {
  size_t k = 0;
  for (; b != NULL && k < n && k < max; k++) {
    uintptr_t u = (uintptr_t)b;
    if (!mtp__is_region_ptr(u) || !mtp__region_listed(rs, mtp__region_of(u))) break;
    mtpi_desc_t *s = mtp__run_of(u);
    char *start = mtp__page_start(s);
    if (s->kind != MTP_PAGE_SLAB || s->cls != c || (char *)b < start || (char *)b >= s->end ||
        (size_t)((char *)b - start) % s->block_size != 0)
      break;
    out[k] = b;
    b = mtp__block_next(b);
  }
  return k;
}

MTP_NO_TSAN size_t mtp__heap_listed(mtpi_member_t *m, mtpi_rset_t *rs, size_t *per_class,
                                    void **out, size_t max) {
  if (m->shared) return 0;
  mtpi_heap_t *h = MTP_CONTAINER(m, mtpi_heap_t, m);
  size_t total = 0;
  for (unsigned c = 0; c < MTP_NUM_CLASSES; c++) {
    size_t n = *(volatile uint8_t *)&h->reuse_n[c];
    if (n == 0) continue;
    if (out != NULL)
      n = listed_copy(rs, c, *(mtpi_block_t *volatile *)&h->reuse[c], n, out + total, max - total);
    if (per_class != NULL) per_class[c] += n;
    total += n;
  }
  return total;
}

void mtp__reuse_validate_class(mtpi_heap_t *h, unsigned c) {
  uintptr_t me = mtp__heap_token(h);
  unsigned n = 0;
  for (mtpi_block_t *b = h->reuse[c]; b != NULL; b = mtp__block_next(b), n++) {
    mtpi_desc_t *bs = mtp__run_of((uintptr_t)b);
    MTP_ASSERT(bs->kind == MTP_PAGE_SLAB && bs->cls == c && mtp__slab_heap(bs) == h);
    MTP_ASSERT((mtp__load_relaxed(&bs->owner) & ~MTP_OWNER_FULL) == me);
    MTP_ASSERT((char *)b < mtp__slab_bump_owner(bs) && MTP_USED(bs) > 0);
    MTP_ASSERT((size_t)((char *)b - mtp__page_start(bs)) % bs->block_size == 0);
    MTP_ASSERT(n < h->reuse_cap[c]);
  }
  MTP_ASSERT(n == h->reuse_n[c] && !(h->m.shared && n));
  MTP_ASSERT(h->m.shared || h->reuse_cap[c] == reuse_max(c));
  (void)me;
}
