/* Thread records: a thread's heaps, one per pool it uses, made at its first slow path and given
 * back when it exits or flushes; binding a heap to its pool; the allocation slow path's entry
 * points. Layer: heap (the top of the room: it calls every file below).
 *
 * The purger wake (mtp__purger_wake) may create the purge thread, and pthread_create allocates
 * (the new thread's TLS), which re-enters mtpool on this thread when mtpool is the process's
 * malloc. So a wake comes last, once nothing of this thread's is half done: its heap consistent,
 * and its thread record, when being released, already unbound from the thread (mtp__tl_thread)
 * and freed. A thread that has exited (mtp__tl_exited) releases its record after each allocation,
 * and so does the nested one; had the outer release still held the record, it would free it a
 * second time. Invariant: a thread record is freed once, by the release that unbinds it. */
#include "lists.h"

#include <errno.h>

#include "base/os.h"

/* The thread-exit key. Created once; deleted when the library is unloaded (dlclose of a library
 * that carries mtpool) or at exit, so that a thread outliving the code never calls into it. */
enum { KEY_NONE, KEY_OK, KEY_FAILED, KEY_DELETED };
static pthread_key_t thread_key;
static pthread_once_t thread_key_once = PTHREAD_ONCE_INIT;
static int key_state; /* written in the once and by the destructor (no thread runs mtpool then) */

static void thread_exit(void *arg);
static void thread_release(void);

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
  mtp__purger_thread_started();
  /* Set before pthread_setspecific, which may allocate (keys >= 32 get a second-level array):
   * a malloc routed into mtpool from there finds this record instead of making another. */
  mtp__tl_thread = t;
  if (MTP_UNLIKELY(mtp__tl_exited)) return t; /* released after each allocation instead */
  /* After unload or exit began (KEY_DELETED) the record is served unregistered. */
  if (key_state == KEY_OK && pthread_setspecific(thread_key, t) != 0) {
    thread_release(); /* and heaps a re-entrant allocation made */
    errno = ENOMEM;
    return NULL;
  }
  return t;
}

/* ---- binding heaps to pools ---- */

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
  }
  mtp__reuse_init(h);
  h->thread = t;
  bool others = mtp__pool_join(pool, &h->m);
  /* a second heap in a pool: wakes may come from several threads at once, too many to measure
   * under the registry lock each time: the purge thread is worth its keep */
  if (others) mtp__purger_eager();
  h->cold_ok = others && !pool->check;
  h->prof_left = pool->id == 0 ? mtp__tl_prof_left : INT64_MAX; /* the count goes on in the heap */
  *slot = h;
  if (pool->id == 0) mtp__tl_default_heap = h;
  return h;
}

/* ---- allocation entry points ---- */

MTP_NOINLINE void *mtp__heap_alloc_class(mtpi_pool_t *pool, unsigned cls) {
  mtpi_heap_t *h = heap_get(pool);
  if (h == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  /* up to MTP_DIRECT_MAX the fast path does not look at the reuse list: its blocks come here */
  if (h->reuse[cls] != NULL) return mtp__reuse_pop(h, cls);
  bool due = false; /* owed to the purger: woken at the end, with the heap consistent */
  mtpi_block_t *b = mtp__shared_cold(h, cls) ? mtp__shared_take(pool, h, cls, &due)
                                             : mtp__heap_take(pool, h, cls, &due);
  if (b == NULL) {
    if (due) mtp__purger_wake();
    errno = ENOMEM;
    return NULL;
  }
  if (MTP_UNLIKELY(mtp__tl_exited)) thread_release(); /* the slab goes back, detached, at once */
  /* Last: the wake may allocate (see the top), which may even release this thread. */
  if (MTP_UNLIKELY(due)) mtp__purger_wake();
  return b;
}

void *mtp__heap_medium_alloc(mtpi_pool_t *pool, size_t size, bool zero, bool fit) {
  mtpi_heap_t *h = MTP_UNLIKELY(mtp__tl_exited) ? NULL : heap_get(pool);
  if (fit && mtp__packed_fits(size)) {
    mtpi_pk_back_t back = {.n = 0};
    void *b = h != NULL ? mtp__cache_packed_alloc(&h->m, size, zero, &back) : NULL;
    if (b != NULL) return b;
    bool due = false;
    b = mtp__packed_alloc(pool, size, zero, &back, &due);
    if (due) mtp__purger_wake();
    return b;
  }
  void *b = h != NULL ? mtp__cache_medium_alloc(&h->m, size, zero) : NULL;
  return b != NULL ? b : mtp__medium_alloc(pool, size, zero);
}

void *mtp__heap_large_alloc(mtpi_pool_t *pool, size_t size, size_t alignment) {
  bool look = false;
  void *p = mtp__large_alloc(pool, size, alignment, &look);
  if (look) mtp__purger_look();
  return p;
}

MTP_NOINLINE void *mtp__heap_alloc_slow(mtpi_pool_t *pool, size_t size) {
  if (MTP_UNLIKELY(size > MTP_MAX_SMALL))
    return size <= MTP_MEDIUM_MAX ? mtp__heap_medium_alloc(pool, size, false, true) : mtp__heap_large_alloc(pool, size, 0);
  unsigned cls = mtp__class_lookup(size);
  if (size <= MTP_DIRECT_MAX) { /* the fast path's miss: the class's reuse list first */
    mtpi_heap_t *h = mtp__thread_heap(mtp__tl_thread, pool->id);
    if (h != NULL && h->reuse[cls] != NULL && mtp__member_pool(&h->m) == pool)
      return mtp__reuse_pop(h, cls);
  }
  return mtp__heap_alloc_class(pool, cls);
}

/* ---- trim, flush, exit ---- */

void mtp__heap_unlist(mtpi_pool_t *pool) {
  mtpi_heap_t *h = mtp__thread_heap(mtp__tl_thread, pool->id);
  if (h == NULL || mtp__member_pool(&h->m) != pool) return;
  for (unsigned c = 0; c < MTP_NUM_CLASSES; c++)
    if (h->reuse_n[c] != 0) mtp__reuse_return(h, mtp__reuse_take(h, c), true);
}

/* Registry lock held, or h's pool the default one: give every slab of h back to its pool, and
 * leave it. Returns whether a purge became due (the caller wakes the purger once it holds no
 * lock). */
static bool heap_abandon(mtpi_heap_t *h) {
  mtpi_pool_t *pool = mtp__member_pool(&h->m);
  if (pool == NULL) return false; /* destroyed: its memory is gone already */
  mtp__pool_lock(pool);
  mtp__heap_give_back_locked(pool, h);
  mtp__pool_leave_locked(pool, &h->m);
  return mtp__pool_unlock(pool);
}

/* heap_abandon, then the record is freed and its slot emptied. */
static bool heap_drop(mtpi_heap_t **slot) {
  bool due = heap_abandon(*slot);
  mtp__meta_free(*slot, sizeof(**slot));
  *slot = NULL;
  return due;
}

/* Give every heap of t (this thread's record) back. Returns whether the purger is due a wake,
 * which the caller makes last (see the top). */
static bool thread_abandon(mtpi_thread_t *t) {
  mtp__tl_default_heap = &mtp__heap_empty;
  /* The default pool (id 0) is never destroyed: its heap goes back without the registry lock,
   * which a purge pass holds across its system calls. Other pools' heaps take it, so that their
   * pool is not destroyed meanwhile. */
  bool due = false, others = t->more != NULL;
  if (t->heaps[0] != NULL) due = heap_drop(&t->heaps[0]);
  for (uint32_t i = 1; i < MTP_THREAD_HEAPS && !others; i++) others = t->heaps[i] != NULL;
  if (!others) return due;
  pthread_mutex_lock(&mtp__registry_lock);
  for (uint32_t i = 1; i < (t->more ? MTP_MAX_POOLS : MTP_THREAD_HEAPS); i++) {
    mtpi_heap_t **slot = i < MTP_THREAD_HEAPS ? &t->heaps[i] : &t->more[i];
    if (*slot != NULL) due |= heap_drop(slot);
  }
  pthread_mutex_unlock(&mtp__registry_lock);
  return due;
}

void mtp_thread_flush(void) {
  mtpi_thread_t *t = mtp__tl_thread;
  if (t == &mtp__thread_empty) return;
  /* no lock held; an allocation inside the wake binds a fresh heap to t, as any later one would */
  if (thread_abandon(t)) mtp__purger_wake();
}

/* Nothing may allocate between reading mtp__tl_thread here and unbinding it. */
static void thread_release(void) {
  mtpi_thread_t *t = mtp__tl_thread;
  if (t == &mtp__thread_empty) return;
  bool due = thread_abandon(t);
  mtp__tl_thread = &mtp__thread_empty;
  if (t->more != NULL) mtp__meta_free(t->more, MTP_MAX_POOLS * sizeof(*t->more));
  mtp__meta_free(t, sizeof(*t));
  if (due) mtp__purger_wake(); /* a nested allocation makes, and releases, a record of its own */
}

/* Other libraries' thread-exit destructors may still allocate after this, in a round that may not
 * call ours again (the last of PTHREAD_DESTRUCTOR_ITERATIONS): such a thread keeps nothing, it
 * hands its heaps back after each allocation and registers no record. */
static void thread_exit(void *arg) {
  mtpi_thread_t *t = arg;
  if (t == NULL || t != mtp__tl_thread) return;
  mtp__tl_exited = true;
  thread_release();
}
