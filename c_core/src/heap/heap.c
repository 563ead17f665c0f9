/* Heaps: each thread's cache of one pool. A heap owns the slab it allocates from per size class
 * (current), slabs it got back by freeing into them (partial, a queue), a few exhausted ones
 * (full: more for a class whose let-go slabs the thread frees into, full_keep_more), and
 * keeps a few empty slabs for reuse (its cache, kept by the pool layer). Here live the allocation
 * slow path, the free slow path (remote frees, frees into slabs that are not owned), thread
 * initialisation and thread exit. Layer: heap. */
#include "heap.h"

#include <errno.h>
#include <string.h>

#include "base/os.h"

mtpi_desc_t mtp__slab_empty = {.kind = MTP_PAGE_HEADER, .head = &mtp__slab_empty};
mtpi_heap_t mtp__heap_empty = {.current = {[0 ... MTP_NUM_CLASSES - 1] = &mtp__slab_empty}};
mtpi_thread_t mtp__thread_empty;
MTP_TLS mtpi_heap_t *mtp__tl_default_heap = &mtp__heap_empty;
MTP_TLS mtpi_thread_t *mtp__tl_thread = &mtp__thread_empty;

/* ---- threads ---- */

/* The thread-exit key. Created once; deleted when the library is unloaded (dlclose of a library
 * that carries mtpool) or at exit, so that a thread outliving the code never calls into it. */
enum { KEY_NONE, KEY_OK, KEY_FAILED, KEY_DELETED };
static pthread_key_t thread_key;
static pthread_once_t thread_key_once = PTHREAD_ONCE_INIT;
static int key_state; /* written in the once and by the destructor (no thread runs mtpool then) */

static void thread_exit(void *arg);
static void thread_release(void);
static uint8_t hot_max(unsigned cls); /* the hot lists, below */
static mtpi_block_t *hot_take(mtpi_heap_t *h, unsigned cls);
static void return_listed(mtpi_heap_t *h, mtpi_block_t *b, bool retire);
/* Set by this thread's teardown (thread_exit). Other libraries' thread-exit destructors may still
 * allocate after it, in a round of destructors that may not call ours again (the last of the C
 * library's PTHREAD_DESTRUCTOR_ITERATIONS): such a thread keeps nothing, it hands its heaps back
 * after each allocation (mtp__heap_alloc_class) and registers no record. */
static MTP_TLS bool tl_exited;
static void make_key(void) {
  key_state = pthread_key_create(&thread_key, thread_exit) == 0 ? KEY_OK : KEY_FAILED;
}

__attribute__((destructor)) static void delete_key(void) {
  if (key_state == KEY_OK && pthread_key_delete(thread_key) == 0) key_state = KEY_DELETED;
}

static mtpi_thread_t *thread_get(void) {
  mtpi_thread_t *t = mtp__tl_thread;
  if (MTP_LIKELY(t != &mtp__thread_empty)) return t;
  pthread_once(&thread_key_once, make_key); /* pthread_key_create does not allocate */
  if (key_state == KEY_FAILED) { /* no key left: this thread's memory could not be given back */
    errno = ENOMEM;
    return NULL;
  }
  t = mtp__meta_alloc(sizeof(mtpi_thread_t));
  if (t == NULL) return NULL;
  /* Set before pthread_setspecific, which may allocate (keys >= 32 get a second-level array):
   * a malloc routed into mtpool from there finds this record instead of making another. */
  mtp__tl_thread = t;
  if (MTP_UNLIKELY(tl_exited)) return t; /* released after each allocation instead */
  /* After unload or exit began (KEY_DELETED) the record is served unregistered. */
  if (key_state == KEY_OK && pthread_setspecific(thread_key, t) != 0) {
    thread_release(); /* and heaps a re-entrant allocation made */
    errno = ENOMEM;
    return NULL;
  }
  return t;
}

/* ---- heap binding ---- */

/* t's slot for the heap of the pool of this id; NULL if the table of high ids cannot be made. */
static mtpi_heap_t **heap_slot(mtpi_thread_t *t, uint32_t id) {
  if (id < MTP_THREAD_HEAPS) return &t->heaps[id];
  if (t->more == NULL) t->more = mtp__meta_alloc(MTP_MAX_POOLS * sizeof(*t->more));
  return t->more != NULL ? &t->more[id] : NULL;
}

static mtpi_heap_t *heap_get(mtpi_pool_t *pool) {
  mtpi_thread_t *t = thread_get();
  if (t == NULL) return NULL;
  mtpi_heap_t **slot = heap_slot(t, pool->id);
  if (slot == NULL) return NULL;
  mtpi_heap_t *h = *slot;
  if (h != NULL && mtp__member_pool(&h->m) == pool) return h;
  if (h != NULL) { /* its pool was destroyed: the record is ours alone now */
    *slot = NULL;
    mtp__meta_free(h, sizeof(*h));
  }
  h = mtp__meta_alloc(sizeof(*h));
  if (h == NULL) return NULL;
  for (unsigned c = 0; c < MTP_NUM_CLASSES; c++) {
    h->current[c] = &mtp__slab_empty;
    h->full_limit[c] = MTP_FULL_PER_CLASS;
    if (c >= MTP_HOT_FIRST) h->hot_cap[c - MTP_HOT_FIRST] = hot_max(c);
  }
  h->stand_cls = MTP_NUM_CLASSES;
  h->tight_cls = MTP_NUM_CLASSES;
  h->thread = t;
  h->cold_ok = mtp__pool_join(pool, &h->m) && !pool->check;
  *slot = h;
  if (pool->id == 0) mtp__tl_default_heap = h;
  return h;
}

static uintptr_t token(mtpi_heap_t *h) { return (uintptr_t)h->thread; }
static mtpi_desc_t *page_of(mtpi_node_t *n) { return n ? MTP_CONTAINER(n, mtpi_desc_t, link) : NULL; }

/* The heap's own lists (partial, full): only the owner touches them. Both are queues (list.h):
 * a slab joins at the back. The slow path takes the partial list's front, the slab that has
 * waited longest and so gathered the most frees; taking the newest, as before, took a slab freed
 * into once: a thread that holds many blocks of a class and frees them in random order switched
 * slabs every few allocations (gp_bench cache --sizes 100:100, 20,000 live blocks: 0.086 s, 0.041
 * now; tcmalloc 0.033; bench/results/notes.md). The full list's front is its oldest, the one let
 * go (slab_to_full) without a walk. */
static void hlist_push(mtpi_node_t **head, mtpi_desc_t *s, uint8_t list) {
  s->list = list;
  mtp__queue_push_back(head, &s->link);
}
static void hlist_remove(mtpi_node_t **head, mtpi_desc_t *s) {
  mtp__queue_remove(head, &s->link);
  s->list = MTP_LIST_NONE;
}
static void partial_push(mtpi_heap_t *h, mtpi_desc_t *s) {
  hlist_push(&h->partial[s->cls], s, MTP_LIST_HEAP_PARTIAL);
}
static void partial_remove(mtpi_heap_t *h, mtpi_desc_t *s) { hlist_remove(&h->partial[s->cls], s); }

#define FULL_UNBOUNDED UINT8_MAX /* full_limit: every exhausted slab kept, none counted */

static void full_remove(mtpi_heap_t *h, mtpi_desc_t *s) {
  hlist_remove(&h->full[s->cls], s);
  if (h->full_limit[s->cls] != FULL_UNBOUNDED) h->full_count[s->cls]--;
  mtp__store_relaxed(&s->owner, token(h)); /* relaxed: a hint to other threads (types.h) */
}

/* s, the current slab, leaves the slot exhausted: its owner word tells frees to take the slow
 * path (free_into_full). The caller puts it on the full list. */
static void mark_full(mtpi_heap_t *h, mtpi_desc_t *s) {
  s->used &= ~MTP_USED_CURRENT;
  mtp__store_relaxed(&s->owner, token(h) | MTP_OWNER_FULL); /* relaxed: a hint (types.h) */
}

/* The current slab is exhausted: keep it on the full list, where a free from this thread finds it
 * again cheaply; past MTP_FULL_PER_CLASS, let the oldest go (detach it), so other threads' frees
 * can return it to the pool once it is empty even if this thread never comes back. */
static void slab_to_full(mtpi_heap_t *h, mtpi_desc_t *s) {
  unsigned cls = s->cls;
  mark_full(h, s);
  hlist_push(&h->full[cls], s, MTP_LIST_HEAP_FULL);
  if (h->full_limit[cls] == FULL_UNBOUNDED) return;
  /* The shared heap keeps none: its blocks are all freed by others, who release the slab once
   * they have freed it all (detached slabs, slab.h), rather than it waiting for its next use. */
  unsigned keep = h->m.shared ? 0u : h->full_limit[cls];
  if (++h->full_count[cls] <= keep) return;
  if (cls >= MTP_HOT_FIRST && h->hot_n[cls - MTP_HOT_FIRST] != 0) {
    /* The hot lists' invariant: no listed block in a slab let go. A slab that empties is not
     * retired here (that may wake the purger, whose creation allocates on this thread, while the
     * caller's lists are mid-change); it stays on the partial queue, the next slab the class
     * takes. */
    return_listed(h, hot_take(h, cls), false);
    if (h->full_count[cls] <= keep) return; /* listed blocks gave exhausted slabs room */
  }
  mtpi_desc_t *old = page_of(h->full[cls]); /* the front: the oldest */
  full_remove(h, old);
  uint32_t n;
  if (!mtp__slab_detach(old, token(h), &n)) { /* remote frees arrived: it has room again */
    h->m.remote_collected += n;
    partial_push(h, old);
  }
}

/* The thread freed into a slab of class cls that slab_to_full let go: its blocks are not another
 * thread's to free, and each such slab costs a detach and a take-back (two atomic exchanges and
 * a slow path on each side). So keep twice as many exhausted slabs of the class owned, and past
 * FULL_COUNTED_MAX every one (FULL_UNBOUNDED). A thread holding 256 blocks of 4,000 bytes freed
 * in random order spent a third of its samples detaching and taking back (perf). The bound was
 * meant to stop at 16 MiB of slabs (255 of one page), but its 8-bit count wrapped at 256 there,
 * so no slab was let go past it (the debug build's validator found it); enforced at 254, gp_bench
 * cache (20,000 blocks of one size, 5 interleaved runs) took 0.149 s against 0.119 with 2,000
 * bytes and 0.200 against 0.138 with 4,000, more slabs than the bound being detached and taken
 * back at most frees: hence no bound past 128. The price: an exhausted slab stays owned, so if
 * other threads free all of its blocks while this thread no longer allocates from the class, it
 * goes back to the pool only at thread exit or flush (or when heap_take's scan finds it). The
 * bound never shrinks while the thread's heap lives; it grows only on this evidence, so a
 * producer whose blocks other threads free keeps MTP_FULL_PER_CLASS. */
#define FULL_COUNTED_MAX 128
static void full_keep_more(mtpi_heap_t *h, unsigned cls) {
  uint8_t lim = h->full_limit[cls];
  if (lim == FULL_UNBOUNDED) return;
  if (lim < FULL_COUNTED_MAX) {
    h->full_limit[cls] = (uint8_t)(lim * 2);
    return;
  }
  h->full_limit[cls] = FULL_UNBOUNDED;
  h->full_count[cls] = 0; /* no longer kept */
}

/* ---- the stand-in ----
 *
 * A thread that holds most blocks of a class and replaces them in random order frees nearly every
 * time into one of its exhausted slabs while its current slab of the class is exhausted too: each
 * such free took the free slow path and traded two slabs between the current slot and the full
 * list (free_into_full), 137 instructions a replacement against tcmalloc's 67. Once STAND_GATE
 * frees in a row were of that kind and of one class, the heap's stand-in takes that class's
 * current slot: such a free pushes the block on the stand-in's list (the block stays counted as
 * used by its slab), and the allocation fast path pops it as from a slab. The gate keeps mixed
 * sizes off it (a class switch gives every listed block back). One class at a time, at most
 * stand_max blocks (STAND_BYTES of them, 4 to 64): each pins its slab. It serves classes up to
 * MTP_DIRECT_MAX only: above, the hot lists (below) take these frees.
 * Invariants (mtp__heap_validate_class checks them):
 *   - stand_cls is the class served or MTP_NUM_CLASSES; it serves cls exactly while current[cls]
 *     is the stand-in. It leaves that slot only dry (heap_take, room_again: stand_drop) or through
 *     stand_begin, which gives every listed block of the class it served back to its slab.
 *   - every listed block is a handed-out block of class stand_cls in a slab this heap owns: no
 *     slab of the class is let go meanwhile (slab_to_full runs for a class only when a real slab
 *     holds its current slot) or retired (its listed blocks count as used); thread exit and flush
 *     give the blocks back before the slabs (heap_give_back_locked).
 *   - a listed block's link word is encoded as on any free list: a second free of it looks tagged
 *     and is looked for on the list (stand_holds), so it is reported as a double free.
 * Statistics and the heap walk read the count and the list racily under the pool lock
 * (mtp__heap_listed): exact when the owner is quiet, as for its slabs' own free lists. */
#define STAND_GATE 64
#define STAND_BYTES ((size_t)64 << 10)

static uint32_t stand_max(unsigned cls) {
  size_t n = STAND_BYTES / mtp__class_size[cls];
  return n < 4 ? 4 : n > 64 ? 64 : (uint32_t)n;
}
static uint32_t stand_listed(const mtpi_heap_t *h) { return h->stand_pushed - h->stand_in.used; }

/* The stand-in, dry, serves no class any more. */
static void stand_drop(mtpi_heap_t *h) {
  MTP_ASSERT(h->stand_in.free == NULL && stand_listed(h) == 0);
  h->current[h->stand_cls] = &mtp__slab_empty;
  h->stand_cls = MTP_NUM_CLASSES;
}

static void stand_push(mtpi_heap_t *h, mtpi_block_t *b) {
  mtpi_desc_t *si = &h->stand_in;
  mtp__block_set_next(b, si->free);
  mtp__track_free(b, si->block_size);
  si->free = b;
  h->stand_pushed++;
}

/* Whether b is listed (a tagged block's confirmation: walks the list, stand_max at most). */
static bool stand_holds(const mtpi_heap_t *h, const mtpi_block_t *b) {
  if (h->stand_cls == MTP_NUM_CLASSES) return false;
  uint32_t n = stand_listed(h);
  for (mtpi_block_t *it = h->stand_in.free; it != NULL && n > 0; it = mtp__block_next(it), n--)
    if (it == b) return true;
  return false;
}

/* Pop every listed block, for the caller to give back; the stand-in serves no class after. */
static mtpi_block_t *stand_take_all(mtpi_heap_t *h) {
  mtpi_block_t *list = h->stand_in.free;
  h->stand_in.free = NULL;
  h->stand_in.used = h->stand_pushed = 0;
  stand_drop(h);
  return list;
}

/* b, taken off h's list, onto its slab s's free list (h's: see above); whether s is empty now.
 * The tools saw b freed when it was listed: no second track_free. */
static bool unlist(mtpi_heap_t *h, mtpi_desc_t *s, mtpi_block_t *b) {
  MTP_ASSERT(mtp__slab_heap(s) == h && (mtp__load_relaxed(&s->owner) & ~MTP_OWNER_FULL) == token(h));
  mtp__block_set_next(b, s->free);
  s->free = b;
  return --s->used == 0;
}

/* Blocks taken off a list (the stand-in's or a hot list) back to their slabs, as a free of the
 * owner would; an exhausted slab that gets one back joins the partial queue.
 * Not under the pool lock: with retire, a slab that empties is retired, which may go to the pool
 * and wake the purger (whose creation allocates, on this thread): so the heap must be consistent
 * before, with the blocks off every list. */
static void return_listed(mtpi_heap_t *h, mtpi_block_t *b, bool retire) {
  while (b != NULL) {
    mtpi_block_t *next = mtp__block_next(b);
    mtpi_desc_t *s = mtp__run_of((uintptr_t)b);
    if (s->list == MTP_LIST_HEAP_FULL) { /* it has room again */
      full_remove(h, s);
      partial_push(h, s);
    }
    if (MTP_UNLIKELY(unlist(h, s, b)) && retire) mtp__heap_retire_local(s);
    b = next;
  }
}

/* Pool lock held (thread exit, flush): the blocks taken off a list back onto their slabs' free
 * lists, before the slabs are given back; a slab that empties is released by abandon_slab (used
 * is 0). */
static void unlist_all_locked(mtpi_heap_t *h, mtpi_block_t *b) {
  for (mtpi_block_t *next; b != NULL; b = next) {
    next = mtp__block_next(b);
    (void)unlist(h, mtp__run_of((uintptr_t)b), b);
  }
}

static void stand_give_back_locked(mtpi_heap_t *h) {
  if (h->stand_cls != MTP_NUM_CLASSES) unlist_all_locked(h, stand_take_all(h));
}

/* The gate passed: the stand-in serves cls from now, in place of cur (exhausted), and lists b. */
static MTP_NOINLINE void stand_begin(mtpi_heap_t *h, mtpi_desc_t *cur, unsigned cls, mtpi_block_t *b) {
  /* it served another class: its blocks go back once the heap is consistent again */
  mtpi_block_t *old = h->stand_cls != MTP_NUM_CLASSES ? stand_take_all(h) : NULL;
  slab_to_full(h, cur);
  mtpi_desc_t *si = &h->stand_in;
  si->cls = (uint8_t)cls;
  si->block_size = mtp__class_size[cls];
  h->stand_cls = (uint8_t)cls;
  h->stand_cap = (uint8_t)stand_max(cls);
  h->current[cls] = si;
  stand_push(h, b);
  return_listed(h, old, true);
}

/* A free into one of h's exhausted slabs of class cls while cur, the current slab, is exhausted
 * too: counted, and once STAND_GATE came in a row for cls, b is the stand-in's first block.
 * Returns whether b was listed. */
static bool stand_gate(mtpi_heap_t *h, mtpi_desc_t *cur, unsigned cls, mtpi_block_t *b) {
  if (h->tight_cls != cls) {
    h->tight_cls = (uint8_t)cls;
    h->tight_run = 0;
  }
  if (MTP_LIKELY(h->tight_run < STAND_GATE)) {
    h->tight_run++;
    return false;
  }
  stand_begin(h, cur, cls, b);
  return true;
}

/* ---- the hot lists ----
 *
 * Above MTP_DIRECT_MAX a block is 1,152 B - 32 KiB, and handing out a cold one costs more than the
 * allocator's instructions: a slab hands out the block freed last into that slab, while a thread
 * that replaces blocks of mixed sizes at random frees into a different slab nearly every time (60%
 * of mtp_alloc's samples were the load of the cold block's link; gp_bench churn_1k_32k, 1 thread,
 * 1.2-1.3x tcmalloc's time). So each heap keeps, per class above MTP_DIRECT_MAX, a LIFO of blocks
 * its thread freed into its own slabs (the free fast path's owner case, exhausted slabs included),
 * and the allocation fast path pops it before the current slab: the block handed out is the one
 * freed last of its class, as with tcmalloc's thread caches. A listed block stays counted as used
 * by its slab. At most HOT_MAX blocks and HOT_BYTES a class: a free into a full list first sends
 * the list's older half back to its slabs (hot_trim). Smaller bounds lost: each trim walks and
 * returns blocks gone cold, and with 64 KiB a class (2-32 blocks) churn_1k_32k took 0.092 s
 * against 0.064 with no lists and 0.060 with 256 KiB (bench/results/notes.md); 256 KiB against
 * 1 MiB (8 and 32 blocks of 32 KiB) later: 0.068 s against 0.061, tcmalloc 0.058. At most 9.3 MiB
 * of blocks a heap are listed (32 of each class). The stand-in (above)
 * never serves these classes: their frees into exhausted slabs are listed here. The cost: a thread
 * that frees many blocks and then idles keeps its listed blocks' slabs from the purge until it
 * allocates again, trims, flushes or exits (2,048 B blocks freed in random order: 6-9% of the
 * peak kept over two days' runs, 16 KiB blocks 16%, 0.7% without lists). Not listing the free of
 * a slab's last block in use kept 5.7%, but its test on the fast path made a 2,000 B cache 10%
 * slower; it was not kept.
 * Invariants (mtp__heap_validate_class checks them):
 *   - every listed block of class c (hot[c - MTP_HOT_FIRST]) is a handed-out block of a slab of c
 *     this heap owns (owner word token(h), FULL mark or not); hot_n counts each list, at most
 *     hot_cap (hot_max). A heap lets a slab go in two places only: slab_to_full (the class's
 *     list goes back to its slabs first) and abandon at thread exit or flush (every
 *     list first, hot_give_back_locked). A slab is retired only when its used count reaches 0,
 *     which a listed block prevents.
 *   - a listed block's link word is encoded as on any free list: a second free of it looks
 *     tagged and is looked for on the list (hot_holds), so it is reported as a double free.
 *   - the shared heaps list nothing: no thread frees into their slabs as owner.
 *   - statistics and the heap walk read the lists racily under the pool lock (mtp__heap_listed),
 *     as they do the stand-in's. Trim gives the calling thread's lists back (mtp__heap_unlist). */
#define HOT_MAX 32                    /* blocks per class */
#define HOT_BYTES ((size_t)1 << 20)   /* per class: 32 KiB blocks, 32 at most */
/* so every bound is 2 or more, and a trim keeps a block */
_Static_assert(HOT_BYTES / MTP_MAX_SMALL >= 2, "a hot list holds two blocks of any class");

/* Class cls's bound: HOT_BYTES of blocks, HOT_MAX at most. */
static uint8_t hot_max(unsigned cls) {
  size_t n = HOT_BYTES / mtp__class_size[cls];
  return (uint8_t)(n > HOT_MAX ? HOT_MAX : n);
}

/* Class cls's list is at a bound: its older half goes back to the slabs, so the list keeps the
 * blocks freed last (tcmalloc's thread caches give back a batch the same way). Cut first: the heap
 * is consistent before return_listed may retire a slab. */
static MTP_NOINLINE void hot_trim(mtpi_heap_t *h, unsigned cls) {
  unsigned i = cls - MTP_HOT_FIRST, keep = h->hot_n[i] / 2;
  MTP_ASSERT(keep >= 1); /* the list is full: hot_cap blocks, 2 or more */
  mtpi_block_t *last = h->hot[i];
  for (unsigned k = 1; k < keep; k++) last = mtp__block_next(last);
  mtpi_block_t *old = mtp__block_next(last);
  mtp__block_set_next(last, NULL);
  h->hot_n[i] = (uint8_t)keep;
  return_listed(h, old, true);
}

MTP_NOINLINE void mtp__heap_free_hot(mtpi_desc_t *s, mtpi_block_t *b) {
  mtpi_heap_t *h = mtp__slab_heap(s);
  MTP_ASSERT(s->cls >= MTP_HOT_FIRST && s->cls < MTP_NUM_CLASSES);
  hot_trim(h, s->cls);
  mtp__hot_push(h, s->cls, b);
}

/* Whether b, a tagged block of class cls, is listed (walks one list, HOT_MAX at most). */
static bool hot_holds(const mtpi_heap_t *h, unsigned cls, const mtpi_block_t *b) {
  if (cls < MTP_HOT_FIRST) return false;
  unsigned i = cls - MTP_HOT_FIRST, n = h->hot_n[i];
  for (mtpi_block_t *it = h->hot[i]; it != NULL && n > 0; it = mtp__block_next(it), n--)
    if (it == b) return true;
  return false;
}

/* Take class cls's list off (its blocks for the caller to give back). */
static mtpi_block_t *hot_take(mtpi_heap_t *h, unsigned cls) {
  unsigned i = cls - MTP_HOT_FIRST;
  mtpi_block_t *list = h->hot[i];
  h->hot[i] = NULL;
  h->hot_n[i] = 0;
  return list;
}

/* Pool lock held (thread exit, flush): every listed block back onto its slab. */
static void hot_give_back_locked(mtpi_heap_t *h) {
  for (unsigned c = MTP_HOT_FIRST; c < MTP_NUM_CLASSES; c++) unlist_all_locked(h, hot_take(h, c));
}

/* A tagged block freed into one of h's slabs s: whether it is listed (a double free). */
static bool listed(const mtpi_heap_t *h, const mtpi_desc_t *s, const mtpi_block_t *b) {
  return stand_holds(h, b) || hot_holds(h, s->cls, b);
}

/* s, an exhausted slab of h's, owned and on none of its lists, is getting a block back from this
 * thread. If the class's current slab is exhausted too, s becomes current: the next allocation
 * takes the block just freed on the fast path, its lines still cached. Otherwise s joins the
 * partial queue. A thread that holds most blocks of a class and frees them in random order
 * frees into exhausted slabs nearly every time and finds one free block in the partial front:
 * with the queue alone, each free moved a slab to the partial list and each allocation took the
 * slow path to take it (gp_bench cache --sizes 1000:1000, 20,000 live blocks: 0.107 -> 0.095 s,
 * 2000:2000 0.119 -> 0.099; bench/results/notes.md). Preferring the slab with the least room
 * also leaves the roomier ones on the partial list to gather frees towards empty. */
static void room_again(mtpi_heap_t *h, mtpi_desc_t *s) {
  mtpi_desc_t *cur = h->current[s->cls];
  if (cur == &h->stand_in) { /* listed blocks first; else it is dry and gives way */
    if (cur->free != NULL) {
      partial_push(h, s);
      return;
    }
    stand_drop(h);
  } else if (cur != &mtp__slab_empty) {
    /* Not asked: whether cur has remote frees worth taking (a load of a line other threads
     * write: 3-8% of the 1-2 KiB cache's time). On the full list's back, heap_take still finds
     * cur among the FULL_SCAN oldest once the partial queue is empty, while the thread keeps few
     * exhausted slabs (a producer's 2). */
    if (cur->free != NULL || mtp__slab_bump_owner(cur) < cur->end) {
      partial_push(h, s);
      return;
    }
    slab_to_full(h, cur);
  }
  s->used |= MTP_USED_CURRENT;
  h->current[s->cls] = s;
}

#define FULL_SCAN 8 /* exhausted slabs heap_take looks at for remote frees to collect */

/* Whether an exhausted slab's remote list is worth taking now: half of the blocks handed out have
 * come back. A shorter list is not: walking it is a cache miss per block, on lines the freeing
 * threads wrote last. An exhausted slab has handed out every block (16 at least, the smallest
 * capacity), so the bar is never 0: a slab judged worth it yields blocks, and the slow path's
 * loop always moves on. */
static bool worth_collecting(mtpi_desc_t *s) {
  /* relaxed: a heuristic; the exchange in collect reads the list with acquire */
  return MTP_TF_COUNT(mtp__load_relaxed(&s->thread_free)) >= MTP_USED(s) / 2;
}

/* A fresh slab for class cls: from the heap's cache, the pool's partial list, or new pages.
 * *wake: the caller wakes the purger once its heap is consistent (mtp__pool_slab_get). */
static mtpi_desc_t *slab_acquire(mtpi_pool_t *pool, mtpi_heap_t *h, unsigned cls, bool *wake) {
  bool formatted;
  mtpi_desc_t *s = mtp__cache_take(&h->m, cls, &formatted);
  if (s != NULL) {
    /* relaxed: a block pushed by another thread onto an empty slab was a double free; format
     * drops it (as it did before the cache kept formats) */
    if (!formatted || mtp__load_relaxed(&s->thread_free) != MTP_TF_OWNED)
      mtp__slab_format(s, cls, false);
    else
      s->list = MTP_LIST_NONE;
    mtp__slab_set_heap(s, h);
    mtp__store_relaxed(&s->owner, token(h)); /* relaxed: the cache was ours alone */
    return s;
  }
  uint32_t n;
  s = mtp__pool_slab_get(pool, cls, h, &h->m, token(h), &n, wake);
  h->m.remote_collected += n;
  return s;
}

/* One block of class cls from h's slabs, refilled as needed. NULL: no memory. *wake: the
 * caller wakes the purger once the heap is consistent (slab_acquire). */
static mtpi_block_t *heap_take(mtpi_pool_t *pool, mtpi_heap_t *h, unsigned cls, bool *wake) {
  MTP_VALIDATE(mtp__heap_validate_class(h, cls)); /* the lists this slow path walks */
  mtpi_desc_t *s;
  for (;;) {
    s = h->current[cls];
    if (s == &h->stand_in) { /* dry: the slabs again */
      stand_drop(h);
      s = &mtp__slab_empty;
    }
    if (s != &mtp__slab_empty) {
      if (s->free != NULL) break;
      /* carved to its end is the usual case here: skip the call */
      if (mtp__slab_bump(s) < s->end && mtp__slab_extend(s)) break;
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
    s = page_of(h->partial[cls]);
    if (s == NULL) { /* a full slab that other threads freed a good share of */
      /* the oldest first (they had the longest for frees to come back), FULL_SCAN at most: the
       * list may be long (full_keep_more), each a descriptor to read */
      s = page_of(h->full[cls]);
      for (unsigned k = 1; s != NULL && !worth_collecting(s); k++)
        s = k < FULL_SCAN ? page_of(s->link.next) : NULL;
      if (s) full_remove(h, s);
    } else {
      partial_remove(h, s);
    }
    if (s != NULL) {
      /* With local free blocks, its remote list waits until they run out: taking it now means
       * walking it to its tail to append. */
      if (s->free == NULL) h->m.remote_collected += mtp__slab_collect(s);
    } else {
      s = slab_acquire(pool, h, cls, wake);
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

/* ---- the shared heap: cold classes ----
 *
 * A heap's own slab of a class costs at least a page (4 KiB resident) however few of its blocks
 * the thread uses, so a thread that allocates a little from many classes held a page per class.
 * A heap that joined a pool in which another thread allocates already therefore takes its first
 * blocks of a class (up to COLD_BYTES of them, COLD_TOTAL blocks in all) from a shared heap of
 * the pool: an ordinary heap owned by no thread (its token, shared_thread, is no thread's record),
 * used under its own lock. Every free of its blocks is remote (one CAS onto the slab's list),
 * which the shared heap collects as any owner does. The pool's first heap (a single-threaded
 * program's) never shares: its own slabs would hold its first blocks as well. Measured
 * (bench/gp/footprint.sh, 1,000 threads of 20 blocks): RssAnon per thread 84 KiB -> 47.5 (glibc
 * 39.8; 43.6 with the smaller thread record, types.h); gp thread_churn's peak RSS at 8 threads
 * 207 -> 72 MiB. A pool has MTP_SHARED_HEAPS of them and a thread takes its CPU's: with one,
 * threads starting at once queued on its lock (a tenth of the acquisitions found it held; the
 * lock functions took 14.6% of thread_churn's samples); with one per CPU (at most four)
 * thread_churn took 25% less time at 1 thread, 19% at 2, 29% at 8, and RssAnon per thread did
 * not move.
 * Lock order: a shared heap's lock, then the pool lock. */
#define COLD_BYTES 16384u   /* per class */
#define COLD_MAX_BLOCKS 128u /* per class (the counter is 8 bits) */
#define COLD_TOTAL 256u      /* per heap: a thread that allocates more has its own slabs */
#define COLD_MAX_SIZE 4096u  /* a larger block fills a page of its own slab anyway */
static mtpi_thread_t shared_thread; /* only its address is used: the shared heaps' token */

static bool cold_class(const mtpi_heap_t *h, unsigned cls) {
  uint32_t size = mtp__class_size[cls];
  unsigned limit = size > COLD_MAX_SIZE ? 0 : COLD_BYTES / size;
  if (limit > COLD_MAX_BLOCKS) limit = COLD_MAX_BLOCKS;
  return h->cold_total < COLD_TOTAL && h->cold[cls] < limit &&
         h->current[cls] == &mtp__slab_empty && h->partial[cls] == NULL && h->full[cls] == NULL;
}

/* The shared heap of the CPU the thread runs on: threads that start at once on different CPUs
 * take their first blocks under different locks (a thread moved meanwhile only shares a lock
 * with another CPU's threads). */
static unsigned shared_index(void) { return mtp__os_cpu() % MTP_SHARED_HEAPS; }

static mtpi_block_t *shared_take(mtpi_pool_t *pool, mtpi_heap_t *h, unsigned cls, bool *wake) {
  unsigned i = shared_index();
  mtpi_heap_t *sh = &pool->shared[i].heap;
  pthread_mutex_lock(&pool->shared[i].lock);
  if (sh->thread == NULL) { /* first use (the pool lock, taken by the join, nests inside) */
    for (unsigned c = 0; c < MTP_NUM_CLASSES; c++) sh->current[c] = &mtp__slab_empty;
    sh->stand_cls = MTP_NUM_CLASSES; /* never serves: no thread frees into its slabs as owner */
    sh->thread = &shared_thread;
    sh->m.shared = true;
    (void)mtp__pool_join(pool, &sh->m);
  }
  mtpi_block_t *b = heap_take(pool, sh, cls, wake);
  pthread_mutex_unlock(&pool->shared[i].lock);
  if (b != NULL) {
    h->cold[cls]++;
    h->cold_total++;
  }
  return b;
}

MTP_NOINLINE void *mtp__heap_alloc_class(mtpi_pool_t *pool, unsigned cls) {
  mtpi_heap_t *h = heap_get(pool);
  if (h == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  bool wake = false; /* owed to the purger: made at the end, with the heap consistent */
  mtpi_block_t *b = h->cold_ok && cold_class(h, cls) ? shared_take(pool, h, cls, &wake)
                                                      : heap_take(pool, h, cls, &wake);
  if (b == NULL) {
    if (wake) mtp__purger_wake();
    errno = ENOMEM;
    return NULL;
  }
  if (MTP_UNLIKELY(tl_exited)) thread_release(); /* the slab goes back, detached, at once */
  /* Last: the wake may allocate (see thread_release), which may even release this thread. */
  if (MTP_UNLIKELY(wake)) mtp__purger_wake();
  return b;
}

/* ---- medium blocks: the thread's own spans first (pool/medium.c) ---- */

void *mtp__heap_medium_alloc(mtpi_pool_t *pool, size_t size, bool zero) {
  mtpi_heap_t *h = MTP_UNLIKELY(tl_exited) ? NULL : heap_get(pool);
  return mtp__medium_alloc(pool, h ? &h->m : NULL, size, zero);
}

void mtp__heap_medium_free(mtpi_desc_t *s, void *p, size_t size, bool sized) {
  mtpi_pool_t *pool = mtp__pool_of_page(s);
  /* only a thread that allocates from the pool keeps spans: no heap is made for a free */
  mtpi_heap_t *h = mtp__thread_heap(mtp__tl_thread, pool->id);
  bool mine = h != NULL && mtp__member_pool(&h->m) == pool && !tl_exited;
  mtp__medium_free(mine ? &h->m : NULL, p, size, sized);
}

MTP_NOINLINE void *mtp__heap_alloc_slow(mtpi_pool_t *pool, size_t size) {
  if (MTP_UNLIKELY(pool->check)) return mtp__checked_alloc(pool, size, 0);
  if (MTP_UNLIKELY(size > MTP_MAX_SMALL))
    return size <= MTP_MEDIUM_MAX ? mtp__heap_medium_alloc(pool, size, false) : mtp__large_alloc(pool, size, 0);
  return mtp__heap_alloc_class(pool, mtp__class_of(size));
}

/* ---- free ---- */

MTP_NOINLINE void mtp__heap_retire_local(mtpi_desc_t *s) {
  mtpi_heap_t *h = mtp__slab_heap(s);
  if (h->current[s->cls] == s) return;
  if (s->list == MTP_LIST_HEAP_PARTIAL) partial_remove(h, s);
  /* Cached slabs keep an odd token: a free into one by this thread is a double free. */
  mtp__store_relaxed(&s->owner, token(h) | MTP_OWNER_CACHED); /* relaxed: a hint */
  int e = errno; /* frees leave errno alone (mtpool.h); a release may purge (madvise) */
  mtp__cache_put_or_release(mtp__pool_of_page(s), &h->m, s);
  errno = e;
}

static void report_listed(mtpi_block_t *b) {
  mtp__error(MTP_ERR_DOUBLE_FREE,
             "double free (block was freed already: listed for reuse by the thread)", b);
}

/* Free b into s when this thread owns it (the slow paths' push). A tagged block may be listed by
 * the stand-in or a hot list rather than on s's lists: looked for there too. */
static void free_local(mtpi_desc_t *s, mtpi_block_t *b) {
  if (MTP_UNLIKELY(mtp__block_tagged(b)) && listed(mtp__slab_heap(s), s, b)) {
    report_listed(b);
    return;
  }
  if (mtp__slab_push_local(s, b)) mtp__heap_retire_local(s);
}

MTP_NOINLINE void mtp__heap_free_tagged(mtpi_desc_t *s, mtpi_block_t *b) { free_local(s, b); }

/* Free b into s, one of this thread's exhausted slabs (owner marked FULL): off the full list.
 * When the class's current slab is exhausted too (room_again's case, and a thread that replaces
 * its blocks of a class at random is in it at nearly every free), the two trade places: the
 * current slab takes s's place on the full list: one node replaced, no count to change and no
 * bound to check, where full_remove and slab_to_full did both (callgrind, gp_bench churn_1k_32k
 * --sizes 2048:2048: 162 instructions in the allocator per replacement, 137 with the trade). The
 * full list keeps its age order but for these trades, which give the exhausted current slab the
 * age of s; heap_take's scan for remote frees is a heuristic either way. */
static void free_into_full(mtpi_desc_t *s, mtpi_block_t *b) {
  mtpi_heap_t *h = mtp__slab_heap(s);
  unsigned cls = s->cls;
  mtpi_desc_t *cur = h->current[cls];
  /* A tagged block (a possible double free) is never listed; checked before the lists change: a
   * listed block's slab must not look as if it had room. */
  bool tagged = mtp__block_tagged(b);
  if (MTP_UNLIKELY(tagged) && listed(h, s, b)) {
    report_listed(b);
    return;
  }
  if (cur == &h->stand_in) {
    if (MTP_LIKELY(!tagged && stand_listed(h) < h->stand_cap)) {
      h->tight_cls = (uint8_t)cls; /* the gate's kind of free: keeps the run of this class */
      stand_push(h, b);
      return;
    }
    full_remove(h, s);
    room_again(h, s);
  } else if (cur != &mtp__slab_empty && cur->free == NULL && mtp__slab_bump_owner(cur) >= cur->end) {
    if (!tagged && stand_gate(h, cur, cls, b)) return;
    mark_full(h, cur);
    cur->list = MTP_LIST_HEAP_FULL;
    mtp__queue_replace(&h->full[cls], &s->link, &cur->link);
    s->list = MTP_LIST_NONE;
    mtp__store_relaxed(&s->owner, token(h)); /* relaxed: a hint */
    s->used |= MTP_USED_CURRENT;
    h->current[cls] = s;
  } else {
    h->tight_run = 0; /* the current slab has room: not the kind of free the gate counts */
    full_remove(h, s);
    room_again(h, s);
  }
  free_local(s, b);
}

/* The remote free's fast case: d, b's own page descriptor, is the first page of a slab that
 * another thread owns (the owner word holds a token with no mark). Only an owned, unchecked slab's
 * first descriptor holds a token: TAIL and FREE descriptors, detached and checked slabs hold 0
 * (region.c, slab.c); so the owner word alone tells what d is. off: b's offset in the slab (for a
 * block in the slab's first page, its offset in its page). A stale owner read is harmless, as on
 * the owner's fast path: the slab cannot be released while b is in use, and the push below works
 * whether the slab is still owned or was detached meanwhile (the CAS tells). */
MTP_INLINE bool remote_fast(mtpi_desc_t *d, mtpi_block_t *b, uint32_t off) {
  uintptr_t owner = mtp__load_relaxed(&d->owner); /* relaxed: a hint (types.h) */
  if (MTP_UNLIKELY(owner == 0 || (owner & (MTP_OWNER_CACHED | MTP_OWNER_FULL)) != 0 ||
                   owner == (uintptr_t)mtp__tl_thread))
    return false;
  /* the same checks as below: a block handed out (bump) and the start of one (32-bit division:
   * an offset in a slab is below 2^18) */
  if (MTP_UNLIKELY((char *)b >= mtp__slab_bump(d) || off % d->block_size != 0)) return false;
  mtp__track_free(b, d->block_size);
  mtpi_remote_seen_t seen;
  if (MTP_UNLIKELY(mtp__slab_free_remote(d, b, &seen) == MTP_REMOTE_NEWS)) {
    int e = errno; /* frees leave errno alone (mtpool.h); a release may purge (madvise) */
    mtp__pool_detached_news(&seen, d);
    errno = e;
  }
  return true;
}

MTP_NOINLINE void mtp__heap_free_other(mtpi_desc_t *d, mtpi_block_t *b) {
  /* The fast path tried the owner's push on s, the head of b's page d (d itself, or for a block
   * in a later page of a multi-page slab its slab's first descriptor; head is constant while b
   * is in use). What is left: the remote push, one of our exhausted slabs, the slow path. */
  mtpi_desc_t *s = mtp__run_head(d);
  uint32_t off = (uint32_t)((char *)b - mtp__page_start(s));
  if (MTP_LIKELY(remote_fast(s, b, off))) return;
  /* One of our exhausted slabs has room again (churn makes this common): only an owned slab's
   * first descriptor carries our token with the FULL mark, so the same two checks suffice. A
   * block in a later page of the slab comes here too (before, it took the full slow path). */
  if (mtp__load_relaxed(&s->owner) == ((uintptr_t)mtp__tl_thread | MTP_OWNER_FULL) &&
      (char *)b < mtp__slab_bump_owner(s) && off % s->block_size == 0) {
    free_into_full(s, b);
    return;
  }
  mtp__heap_free_slow(s, b);
}

static void free_slow(mtpi_desc_t *d, mtpi_block_t *b) {
  mtpi_desc_t *s = mtp__run_head(d);
  /* A medium block (pool/medium.c): its owner word is 0, so every free of one comes here, from
   * any thread. */
  if (s->kind == MTP_PAGE_MEDIUM) {
    mtp__heap_medium_free(s, b, 0, false);
    return;
  }
  if (MTP_UNLIKELY(s->kind != MTP_PAGE_SLAB)) {
    mtp__error(s->kind == MTP_PAGE_FREE ? MTP_ERR_DOUBLE_FREE : MTP_ERR_INVALID_POINTER,
               s->kind == MTP_PAGE_FREE ? "double free (block's slab is already free)"
                                        : "invalid pointer (region metadata)",
               b);
    return;
  }
  if (s->checked) {
    mtp__checked_free(s, b, 0, false);
    return;
  }
  size_t off = (size_t)((char *)b - mtp__page_start(s));
  if (MTP_UNLIKELY(off % s->block_size != 0)) {
    mtp__error(MTP_ERR_INVALID_POINTER, "invalid pointer (not the start of a block)", b);
    return;
  }
  /* Blocks at and above the bump pointer were never handed out: pushing one would hand it out
   * twice (once by the free list, once by carving). */
  if (MTP_UNLIKELY((char *)b >= mtp__slab_bump(s))) {
    /* An empty slab the pool keeps for reuse has no owner and its bump pointer at its start
     * (pool.c): a free into it is a free of a block freed before. */
    if (mtp__slab_bump(s) == mtp__page_start(s) && mtp__load_relaxed(&s->owner) == 0)
      mtp__error(MTP_ERR_DOUBLE_FREE, "double free (block's slab is empty)", b);
    else
      mtp__error(MTP_ERR_INVALID_POINTER, "invalid pointer (a block never handed out)", b);
    return;
  }
  mtpi_thread_t *me = mtp__tl_thread;
  uintptr_t owner = mtp__load_relaxed(&s->owner); /* relaxed: a hint; see types.h */
  if (owner == (uintptr_t)me) { /* a tail page of our own slab */
    free_local(s, b);
    return;
  }
  if (owner == ((uintptr_t)me | MTP_OWNER_FULL)) { /* one of our exhausted slabs has room again */
    free_into_full(s, b);
    return;
  }
  if (owner == ((uintptr_t)me | MTP_OWNER_CACHED)) {
    mtp__error(MTP_ERR_DOUBLE_FREE, "double free (block's slab is empty)", b);
    return;
  }
  mtpi_pool_t *pool = mtp__pool_of_page(s);
  if (owner == 0 && me != &mtp__thread_empty) {
    /* A slab we gave up when it was full: take it back, so our frees into it stay local. */
    mtpi_heap_t *h = mtp__thread_heap(me, pool->id);
    if (h != NULL && h == mtp__slab_heap(s) && mtp__member_pool(&h->m) == pool) {
      /* Not on the pool's list: one CAS takes it back. Listed: the list's lock is needed. */
      uint32_t n;
      bool adopted = mtp__slab_adopt(s, h, token(h), false, &n);
      /* acquire: pairs with the CAS that cleared OWNED, before we read the slab's fields */
      if (!adopted && !(mtp__load_acquire(&s->thread_free) & MTP_TF_OWNED))
        adopted = mtp__pool_adopt(pool, s, h, token(h), &n);
      if (adopted) {
        h->m.remote_collected += n;
        full_keep_more(h, s->cls);
        if (h->current[s->cls] != s) room_again(h, s);
        free_local(s, b);
        return;
      }
    }
  }
  mtp__track_free(b, s->block_size);
  mtpi_remote_seen_t seen;
  if (mtp__slab_free_remote(s, b, &seen) == MTP_REMOTE_NEWS) mtp__pool_detached_news(&seen, s);
}

MTP_NOINLINE void mtp__heap_free_slow(mtpi_desc_t *d, mtpi_block_t *b) {
  int e = errno; /* frees leave errno alone (mtpool.h): releases, purges and reports may set it */
  free_slow(d, b);
  errno = e;
}

/* Up to max of the n blocks of class c listed from head into out, following a link only from a
 * block of one of rs's slabs of c: the owner may pop one meanwhile and its user overwrite the link
 * (rs's regions stay mapped while the pool lock is held). */
MTP_NO_TSAN static size_t listed_copy(mtpi_rset_t *rs, unsigned c, mtpi_block_t *b, size_t n,
                                      void **out, size_t max) {
  size_t k = 0;
  for (; b != NULL && k < n && k < max; k++) {
    uintptr_t u = (uintptr_t)b;
    if (!mtp__is_region_ptr(u) || !mtp__region_listed(rs, b)) break;
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
  unsigned c = *(volatile uint8_t *)&h->stand_cls;
  if (c < MTP_NUM_CLASSES) {
    uint32_t n = *(volatile uint32_t *)&h->stand_pushed - *(volatile uint32_t *)&h->stand_in.used;
    if (n > stand_max(c)) n = stand_max(c); /* a torn read while the owner works */
    if (out != NULL)
      n = (uint32_t)listed_copy(rs, c, *(mtpi_block_t *volatile *)&h->stand_in.free, n, out, max);
    if (per_class != NULL) per_class[c] += n;
    total += n;
  }
  for (c = MTP_HOT_FIRST; c < MTP_NUM_CLASSES; c++) {
    size_t n = *(volatile uint8_t *)&h->hot_n[c - MTP_HOT_FIRST];
    if (n == 0) continue;
    if (out != NULL)
      n = listed_copy(rs, c, *(mtpi_block_t *volatile *)&h->hot[c - MTP_HOT_FIRST], n, out + total,
                      max - total);
    if (per_class != NULL) per_class[c] += n;
    total += n;
  }
  return total;
}

/* ---- thread exit and flush ----
 *
 * The purger wake (mtp__purger_wake) may create the purge thread, and pthread_create allocates
 * (the new thread's TLS), which re-enters mtpool on this thread when mtpool is the process's
 * malloc. So a wake comes last, once nothing of this thread's is half done: its heap consistent
 * (mtp__heap_alloc_class), and its thread record, when being released, already unbound from the
 * thread (mtp__tl_thread) and freed. A thread that has exited (tl_exited) releases its record
 * after each allocation, and so does the nested one: had the outer release still held the
 * record, it would free it a second time. (It did: the record then sat twice on the internal
 * free list, two threads were handed the same record, and a live record's first word became a
 * free-list link; a heap's first word is &mtp__slab_empty, which was then handed out as a thread
 * record and overwritten, so every thread's first allocation popped garbage.) */

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
    if (mtp__slab_detach(s, token(h), &n)) break;
    h->m.remote_collected += n;
  }
  /* Detached with blocks in use; any free room makes it worth adopting. Should a remote free be
   * emptying it right now, that thread waits for our lock and then releases it. */
  if (s->used < s->capacity || s->free != NULL) mtp__pool_list_detached_locked(pool, s);
}

/* Pool lock held: give every slab and cached empty slab of h back to pool; h stays a member. */
static void heap_give_back_locked(mtpi_pool_t *pool, mtpi_heap_t *h) {
  MTP_VALIDATE(mtp__heap_validate(h));
  stand_give_back_locked(h);
  hot_give_back_locked(h);
  uint64_t now = mtp__os_now_ms();
  for (unsigned c = 0; c < MTP_NUM_CLASSES; c++) {
    mtpi_desc_t *s = h->current[c];
    h->current[c] = &mtp__slab_empty;
    if (s != &mtp__slab_empty) {
      s->used &= ~MTP_USED_CURRENT;
      abandon_slab(pool, h, s, now);
    }
    while ((s = page_of(h->partial[c])) != NULL) {
      partial_remove(h, s);
      abandon_slab(pool, h, s, now);
    }
    while ((s = page_of(h->full[c])) != NULL) {
      full_remove(h, s);
      abandon_slab(pool, h, s, now);
    }
  }
  mtp__cache_abandon_locked(pool, &h->m); /* for the next thread's slabs of their classes */
}

/* Registry lock held: give every slab of h back to its pool, and leave it. Returns whether a
 * purge became due (the caller wakes the purger once it holds no lock). */
static bool heap_abandon(mtpi_heap_t *h) {
  mtpi_pool_t *pool = mtp__member_pool(&h->m);
  if (pool == NULL) return false; /* destroyed: its memory is gone already */
  mtp__pool_lock(pool);
  heap_give_back_locked(pool, h);
  mtp__pool_leave_locked(pool, &h->m);
  return mtp__pool_unlock_defer(pool);
}

/* The shared heap's slabs go back to the pool (trim): its partly used ones to be adopted, its
 * empty ones to be purged. Returns whether a purge became due. */
static bool shared_give_back(mtpi_pool_t *pool) {
  bool due = false;
  for (unsigned i = 0; i < MTP_SHARED_HEAPS; i++) {
    pthread_mutex_lock(&pool->shared[i].lock);
    if (pool->shared[i].heap.thread != NULL) {
      mtp__pool_lock(pool);
      heap_give_back_locked(pool, &pool->shared[i].heap);
      due |= mtp__pool_unlock_defer(pool);
    }
    pthread_mutex_unlock(&pool->shared[i].lock);
  }
  return due;
}

void mtp__heap_shared_trim(mtpi_pool_t *pool) {
  if (shared_give_back(pool)) mtp__purger_wake();
}

void mtp__heap_shared_trim_all(void) {
  bool due = false;
  pthread_mutex_lock(&mtp__registry_lock); /* no pool is destroyed meanwhile */
  for (mtpi_node_t *it = mtp__pools; it; it = it->next)
    due |= shared_give_back(mtp__pool_from_reg(it));
  pthread_mutex_unlock(&mtp__registry_lock);
  if (due) mtp__purger_wake();
}

static void heap_unlist(mtpi_heap_t *h) {
  if (h->stand_cls != MTP_NUM_CLASSES) return_listed(h, stand_take_all(h), true);
  for (unsigned c = MTP_HOT_FIRST; c < MTP_NUM_CLASSES; c++)
    if (h->hot_n[c - MTP_HOT_FIRST] != 0) return_listed(h, hot_take(h, c), true);
}

void mtp__heap_unlist(mtpi_pool_t *pool) {
  mtpi_heap_t *h = mtp__thread_heap(mtp__tl_thread, pool->id);
  if (h != NULL && mtp__member_pool(&h->m) == pool) heap_unlist(h);
}

/* Give every heap of t (this thread's record) back. Returns whether the purger is due a wake,
 * which the caller makes last (see above). */
static bool thread_abandon(mtpi_thread_t *t) {
  mtp__tl_default_heap = &mtp__heap_empty;
  bool wake = false;
  pthread_mutex_lock(&mtp__registry_lock);
  for (uint32_t i = 0; i < (t->more ? MTP_MAX_POOLS : MTP_THREAD_HEAPS); i++) {
    mtpi_heap_t **slot = i < MTP_THREAD_HEAPS ? &t->heaps[i] : &t->more[i];
    if (*slot == NULL) continue;
    wake |= heap_abandon(*slot);
    mtp__meta_free(*slot, sizeof(**slot));
    *slot = NULL;
  }
  pthread_mutex_unlock(&mtp__registry_lock);
  return wake;
}

void mtp_thread_flush(void) {
  mtpi_thread_t *t = mtp__tl_thread;
  if (t == &mtp__thread_empty) return;
  /* no lock held; an allocation inside the wake binds a fresh heap to t, as any later one would */
  if (thread_abandon(t)) mtp__purger_wake();
}

/* Invariant: a thread record is freed once, by the release that unbinds it, and nothing may
 * allocate between reading mtp__tl_thread here and that unbinding. */
static void thread_release(void) {
  mtpi_thread_t *t = mtp__tl_thread;
  if (t == &mtp__thread_empty) return;
  bool wake = thread_abandon(t);
  mtp__tl_thread = &mtp__thread_empty;
  if (t->more != NULL) mtp__meta_free(t->more, MTP_MAX_POOLS * sizeof(*t->more));
  mtp__meta_free(t, sizeof(*t));
  if (wake) mtp__purger_wake(); /* a nested allocation makes, and releases, a record of its own */
}

static void thread_exit(void *arg) {
  mtpi_thread_t *t = arg;
  if (t == NULL || t != mtp__tl_thread) return;
  tl_exited = true;
  thread_release();
}

/* ---- validity (MTP_DEBUG 2) ---- */

void mtp__heap_validate_class(mtpi_heap_t *h, unsigned c) {
  uintptr_t me = token(h);
  {
    mtpi_desc_t *s = h->current[c];
    MTP_ASSERT((s == &h->stand_in) == (h->stand_cls == c));
    if (s == &h->stand_in) { /* every listed block: a handed-out block of one of our slabs of c */
      uint32_t n = 0;
      for (mtpi_block_t *b = s->free; b != NULL; b = mtp__block_next(b), n++) {
        mtpi_desc_t *bs = mtp__run_of((uintptr_t)b);
        MTP_ASSERT(bs->kind == MTP_PAGE_SLAB && bs->cls == c && mtp__slab_heap(bs) == h);
        MTP_ASSERT((mtp__load_relaxed(&bs->owner) & ~MTP_OWNER_FULL) == me);
        MTP_ASSERT((char *)b < mtp__slab_bump_owner(bs) && MTP_USED(bs) > 0);
        MTP_ASSERT((size_t)((char *)b - mtp__page_start(bs)) % bs->block_size == 0);
      }
      MTP_ASSERT(n == stand_listed(h) && n <= h->stand_cap && h->stand_cap == stand_max(c));
      MTP_ASSERT(s->cls == c);
      MTP_ASSERT(s->block_size == mtp__class_size[c]);
    } else if (s != &mtp__slab_empty) {
      MTP_ASSERT(s->cls == c && (s->used & MTP_USED_CURRENT));
      MTP_ASSERT(mtp__load_relaxed(&s->owner) == me && mtp__slab_heap(s) == h);
      mtp__slab_validate(s);
    }
    unsigned n = 0;
    mtpi_node_t *last = NULL;
    for (mtpi_node_t *it = h->partial[c]; it; last = it, it = it->next) {
      s = page_of(it);
      MTP_ASSERT(s->cls == c && s->list == MTP_LIST_HEAP_PARTIAL && !(s->used & MTP_USED_CURRENT));
      MTP_ASSERT(mtp__load_relaxed(&s->owner) == me && mtp__slab_heap(s) == h);
      MTP_ASSERT(it->next == NULL || it->next->prev == it);
      mtp__slab_validate(s);
    }
    MTP_ASSERT(h->partial[c] == NULL || h->partial[c]->prev == last); /* the queue's back */
    for (mtpi_node_t *it = h->full[c]; it; it = it->next) {
      s = page_of(it);
      MTP_ASSERT(s->cls == c && s->list == MTP_LIST_HEAP_FULL);
      MTP_ASSERT(mtp__load_relaxed(&s->owner) == (me | MTP_OWNER_FULL));
      MTP_ASSERT(it->next == NULL || it->next->prev == it);
      mtp__slab_validate(s);
      n++;
      last = it;
    }
    MTP_ASSERT(h->full[c] == NULL || h->full[c]->prev == last); /* the queue's back */
    MTP_ASSERT(h->full_limit[c] == FULL_UNBOUNDED ||
               (n == h->full_count[c] && n <= (h->m.shared ? 0u : h->full_limit[c])));
    MTP_ASSERT(h->m.shared || h->full_limit[c] >= MTP_FULL_PER_CLASS);
    MTP_ASSERT(h->full_limit[c] == FULL_UNBOUNDED || h->full_limit[c] <= FULL_COUNTED_MAX);
  }
  if (c >= MTP_HOT_FIRST) { /* every listed block: a handed-out block of one of our slabs of c */
    unsigned i = c - MTP_HOT_FIRST, n = 0;
    for (mtpi_block_t *b = h->hot[i]; b != NULL; b = mtp__block_next(b), n++) {
      mtpi_desc_t *bs = mtp__run_of((uintptr_t)b);
      MTP_ASSERT(bs->kind == MTP_PAGE_SLAB && bs->cls == c && mtp__slab_heap(bs) == h);
      MTP_ASSERT((mtp__load_relaxed(&bs->owner) & ~MTP_OWNER_FULL) == me);
      MTP_ASSERT((char *)b < mtp__slab_bump_owner(bs) && MTP_USED(bs) > 0);
      MTP_ASSERT((size_t)((char *)b - mtp__page_start(bs)) % bs->block_size == 0);
      MTP_ASSERT(n < h->hot_cap[i]);
    }
    MTP_ASSERT(n == h->hot_n[i] && !(h->m.shared && n));
    MTP_ASSERT(h->m.shared || h->hot_cap[i] == hot_max(c));
  }
}

void mtp__heap_validate(mtpi_heap_t *h) {
  for (unsigned c = 0; c < MTP_NUM_CLASSES; c++) mtp__heap_validate_class(h, c);
}
