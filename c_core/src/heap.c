/* Heaps: each thread's cache of one pool. A heap owns the slab it allocates from per size class
 * (current) and slabs it got back by freeing into them (partial), and keeps a few empty slabs for
 * reuse (cache). Here live the allocation slow path, the free slow path (remote frees, frees into
 * slabs that are not owned), thread initialisation and thread exit. Calls slab.c, region.c
 * through pool.c's locked helpers, large.c and checked.c. */
#include <errno.h>
#include <string.h>

#include "internal.h"
#include "os.h"
#include "track.h"

/* The thread that has not allocated yet sees these: every current slab has an empty free list, so
 * the first allocation falls into the slow path with no extra test on the fast path. */
mtp_slab_t mtp__slab_empty = {.kind = MTP_PAGE_HEADER};
mtp_heap_t mtp__heap_empty = {.current = {[0 ... MTP_NUM_CLASSES - 1] = &mtp__slab_empty}};
mtp_thread_t mtp__thread_empty;
MTP_TLS mtp_heap_t *mtp__tl_default_heap = &mtp__heap_empty;
MTP_TLS mtp_thread_t *mtp__tl_thread = &mtp__thread_empty;

static pthread_key_t thread_key;
static pthread_once_t thread_key_once = PTHREAD_ONCE_INIT;

static void thread_exit(void *arg);
static void make_key(void) { pthread_key_create(&thread_key, thread_exit); }
/* Set by this thread's teardown (thread_exit). Other libraries' thread-exit destructors may still
 * allocate after it, in rounds of destructors that may not call ours again: such a thread keeps
 * nothing, it hands its heaps back after each allocation (see mtp__heap_alloc_class). */
static MTP_TLS bool tl_exited;
static void thread_release(void);

static mtp_thread_t *thread_get(void) {
  mtp_thread_t *t = mtp__tl_thread;
  if (MTP_LIKELY(t != &mtp__thread_empty)) return t;
  t = mtp__meta_alloc(sizeof(mtp_thread_t));
  if (t == NULL) return NULL;
  /* Published before pthread_setspecific, which callocs for keys >= 32: where mtpool is the
   * process's malloc, that allocation comes back here and must find this record. */
  mtp__tl_thread = t;
  if (MTP_UNLIKELY(tl_exited)) return t; /* released after each allocation instead */
  pthread_once(&thread_key_once, make_key);
  pthread_setspecific(thread_key, t);
  t->registered = true;
  return t;
}

/* ---- cache of empty slabs (cache_lock: the owner, and trim/purge threads) ---- */

static void cache_lock(mtp_heap_t *h) {
  int expect = 0;
  while (!atomic_compare_exchange_weak_explicit(&h->cache_lock, &expect, 1, memory_order_acquire,
                                                memory_order_relaxed))
    expect = 0;
}
static void cache_unlock(mtp_heap_t *h) { mtp__int_store_release(&h->cache_lock, 0); }

static mtp_slab_t *cache_take(mtp_heap_t *h, unsigned pages) {
  cache_lock(h);
  mtp_slab_t **pp = &h->cache, *s;
  while ((s = *pp) != NULL && s->pages != pages) pp = &s->next;
  if (s) {
    *pp = s->next;
    h->cache_bytes -= (size_t)s->pages << MTP_PAGE_SHIFT;
  }
  cache_unlock(h);
  return s;
}

size_t mtp__heap_drain_cache(mtp_heap_t *h, uint64_t older_than_ms, uint64_t now_ms) {
  size_t n = 0;
  mtp_pool_internal_t *pool = (mtp_pool_internal_t *)mtp__load_relaxed(&h->pool);
  cache_lock(h);
  mtp_slab_t **pp = &h->cache, *s;
  while ((s = *pp) != NULL) {
    if (s->free_time_ms <= older_than_ms) {
      *pp = s->next;
      h->cache_bytes -= (size_t)s->pages << MTP_PAGE_SHIFT;
      n += (size_t)s->pages << MTP_PAGE_SHIFT;
      mtp__region_free_span(pool, s, now_ms);
    } else {
      pp = &s->next;
    }
  }
  cache_unlock(h);
  return n;
}

bool mtp__heap_caches(mtp_heap_t *h) {
  cache_lock(h);
  bool any = h->cache != NULL;
  cache_unlock(h);
  return any;
}

/* ---- heap binding ---- */

static mtp_heap_t *heap_get(mtp_pool_internal_t *pool) {
  mtp_thread_t *t = thread_get();
  if (t == NULL) return NULL;
  mtp_heap_t *h = t->heaps[pool->id];
  if (h != NULL && (mtp_pool_internal_t *)mtp__load_relaxed(&h->pool) == pool) return h;
  if (h != NULL) { /* its pool was destroyed: the record is ours alone now */
    t->heaps[pool->id] = NULL;
    mtp__meta_free(h, sizeof(*h));
  }
  h = mtp__meta_alloc(sizeof(*h));
  if (h == NULL) return NULL;
  for (unsigned c = 0; c < MTP_NUM_CLASSES; c++) h->current[c] = &mtp__slab_empty;
  h->thread = t;
  mtp__store_relaxed(&h->pool, (uintptr_t)pool);
  mtp__pool_lock(pool);
  h->pool_next = pool->heaps;
  if (pool->heaps) pool->heaps->pool_prev = h;
  pool->heaps = h;
  mtp__pool_unlock(pool);
  t->heaps[pool->id] = h;
  if (pool->id == 0) mtp__tl_default_heap = h;
  return h;
}

/* The heap's own lists (partial, full) are doubly linked through next/prev; only the owner
 * touches them. */
static void hlist_push(mtp_slab_t **head, mtp_slab_t *s, uint8_t list) {
  s->list = list;
  s->prev = NULL;
  s->next = *head;
  if (s->next) s->next->prev = s;
  *head = s;
}

static void hlist_remove(mtp_slab_t **head, mtp_slab_t *s) {
  if (s->prev)
    s->prev->next = s->next;
  else
    *head = s->next;
  if (s->next) s->next->prev = s->prev;
  s->next = s->prev = NULL;
  s->list = MTP_LIST_NONE;
}

static void partial_push(mtp_heap_t *h, mtp_slab_t *s) {
  hlist_push(&h->partial[s->cls], s, MTP_LIST_HEAP_PARTIAL);
}
static void partial_remove(mtp_heap_t *h, mtp_slab_t *s) { hlist_remove(&h->partial[s->cls], s); }

static void full_remove(mtp_heap_t *h, mtp_slab_t *s) {
  hlist_remove(&h->full[s->cls], s);
  h->full_count[s->cls]--;
  mtp__store_relaxed(&s->owner, (uintptr_t)h->thread);
}

/* The current slab is exhausted: keep it on the full list, where a free from this thread finds it
 * again cheaply; past MTP_FULL_PER_CLASS, let the oldest go (detach it), so other threads' frees
 * can return it to the pool once it is empty even if this thread never comes back. */
static void slab_to_full(mtp_heap_t *h, mtp_slab_t *s) {
  unsigned cls = s->cls;
  s->used &= ~MTP_USED_CURRENT;
  mtp__store_relaxed(&s->owner, (uintptr_t)h->thread | MTP_OWNER_FULL);
  hlist_push(&h->full[cls], s, MTP_LIST_HEAP_FULL);
  if (++h->full_count[cls] <= MTP_FULL_PER_CLASS) return;
  mtp_slab_t *old = h->full[cls];
  while (old->next) old = old->next;
  full_remove(h, old);
  if (!mtp__slab_detach(old)) partial_push(h, old); /* remote frees arrived: it has room again */
}

/* Whether an exhausted slab's remote list is worth taking now: half of the blocks handed out have
 * come back. A shorter list is not: walking it is a cache miss per block, on lines the freeing
 * threads wrote last, and its slab is likely still being freed into. A fresh slab is carved by
 * bumping a pointer instead, and this one comes back (or goes to the pool) once more is free.
 * An exhausted slab has handed out every block (8 at least, the smallest capacity), so the bar is
 * never 0: a slab judged worth it yields blocks, and the slow path's loop always moves on. */
static bool worth_collecting(mtp_slab_t *s) {
  return MTP_TF_COUNT(mtp__load_relaxed(&s->thread_free)) >= MTP_USED(s) / 2;
}

/* A fresh slab for class cls: from the heap's cache, the pool's partial list, or new pages. */
static mtp_slab_t *slab_acquire(mtp_pool_internal_t *pool, mtp_heap_t *h, unsigned cls) {
  mtp_thread_t *t = h->thread;
  mtp_slab_t *s = cache_take(h, mtp__class_pages[cls]);
  if (s != NULL) {
    mtp__slab_format(s, cls, false);
    mtp__slab_set_heap(s, h);
    mtp__store_relaxed(&s->owner, (uintptr_t)t);
    return s;
  }
  mtp__pool_lock(pool);
  while ((s = pool->partial[cls]) != NULL) {
    mtp__pool_partial_remove(pool, s);
    if (mtp__slab_adopt(s, h, true)) {
      mtp__pool_unlock(pool);
      return s;
    }
  }
  s = mtp__region_alloc_span(pool, mtp__class_pages[cls]);
  if (s != NULL) {
    mtp__slab_format(s, cls, false);
    mtp__slab_set_heap(s, h);
    mtp__store_relaxed(&s->owner, (uintptr_t)t);
  }
  void *fault_at;
  size_t fault_len;
  mtp__region_take_populate(pool, &fault_at, &fault_len);
  mtp__pool_unlock(pool);
  if (fault_len) mtp__os_populate(fault_at, fault_len);
  return s;
}

MTP_NOINLINE void *mtp__heap_alloc_class(mtp_pool_internal_t *pool, unsigned cls) {
  mtp__purger_start();
  mtp_heap_t *h = heap_get(pool);
  if (h == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  mtp_slab_t *s;
  for (;;) {
    s = h->current[cls];
    if (s != &mtp__slab_empty) {
      if (s->free != NULL) break;
      if (mtp__slab_extend(s)) break;
      if (worth_collecting(s)) {
        uint32_t n = mtp__slab_collect(s);
        if (n) {
          h->remote_collected += n;
          break;
        }
      }
      slab_to_full(h, s);
      h->current[cls] = &mtp__slab_empty;
    }
    s = h->partial[cls];
    if (s == NULL) { /* a full slab that other threads freed a good share of */
      for (s = h->full[cls]; s && !worth_collecting(s);) s = s->next;
      if (s) full_remove(h, s);
    } else {
      partial_remove(h, s);
    }
    if (s != NULL) {
      /* With local free blocks, its remote list waits until they run out: taking it now means
       * walking it to its tail to append. */
      if (s->free == NULL) h->remote_collected += mtp__slab_collect(s);
    } else {
      s = slab_acquire(pool, h, cls);
      if (s == NULL) {
        errno = ENOMEM;
        return NULL;
      }
    }
    s->used |= MTP_USED_CURRENT;
    h->current[cls] = s;
  }
  mtp_block_t *b = s->free;
  s->free = mtp__block_next(b);
  s->used++;
  h->allocs++;
  mtp__track_alloc(b, s->block_size);
  if (MTP_UNLIKELY(tl_exited)) thread_release(); /* the slab goes back, detached, at once */
  return b;
}

MTP_NOINLINE void *mtp__heap_alloc_slow(mtp_pool_internal_t *pool, size_t size) {
  mtp__purger_start();
  if (MTP_UNLIKELY(pool->check)) return mtp__checked_alloc(pool, size, 0);
  if (MTP_UNLIKELY(size > MTP_MAX_SMALL)) return mtp__large_alloc(pool, size, 0);
  return mtp__heap_alloc_class(pool, mtp__class_of(size));
}

/* ---- free ---- */

/* The owner frees into a slab that became empty: keep it current, cache it, or return it. */
MTP_NOINLINE void mtp__heap_retire_local(mtp_slab_t *s) {
  mtp_heap_t *h = mtp__slab_heap(s);
  if (h->current[s->cls] == s) return;
  if (s->list == MTP_LIST_HEAP_PARTIAL) partial_remove(h, s);
  mtp_pool_internal_t *pool = mtp__slab_pool(s);
  size_t bytes = (size_t)s->pages << MTP_PAGE_SHIFT;
  uint64_t now = mtp__os_now_ms();
  /* Cached slabs keep an odd token: a free into one by this thread is a double free. */
  mtp__store_relaxed(&s->owner, (uintptr_t)h->thread | MTP_OWNER_CACHED);
  s->list = MTP_LIST_HEAP_CACHE;
  s->free_time_ms = now;
  cache_lock(h);
  bool cached = pool->purge_delay_ms != 0 && h->cache_bytes + bytes <= pool->thread_cache_bytes;
  if (cached) {
    s->next = h->cache;
    h->cache = s;
    h->cache_bytes += bytes;
  }
  cache_unlock(h);
  if (cached) {
    mtp__pool_note_free_pages(pool, now);
    return;
  }
  mtp__pool_lock(pool);
  mtp__pool_release_slab(pool, s, now);
  mtp__pool_unlock(pool);
}

MTP_NOINLINE void mtp__heap_free_slow(mtp_slab_t *s, mtp_block_t *b) {
  if (s->kind == MTP_PAGE_TAIL) s -= s->head_delta;
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
  size_t off = (size_t)((char *)b - mtp__slab_start(s));
  if (MTP_UNLIKELY(off % s->block_size != 0 || (char *)b >= s->end)) {
    mtp__error(MTP_ERR_INVALID_POINTER, "invalid pointer (not the start of a block)", b);
    return;
  }
  mtp_thread_t *me = mtp__tl_thread;
  uintptr_t owner = mtp__load_relaxed(&s->owner);
  if (owner == (uintptr_t)me) { /* a tail page of our own slab */
    mtp__slab_free_local(s, b);
    return;
  }
  if (owner == ((uintptr_t)me | MTP_OWNER_FULL)) { /* one of our exhausted slabs has room again */
    mtp_heap_t *h = mtp__slab_heap(s);
    full_remove(h, s);
    partial_push(h, s);
    mtp__slab_free_local(s, b);
    return;
  }
  if (owner == ((uintptr_t)me | MTP_OWNER_CACHED)) {
    mtp__error(MTP_ERR_DOUBLE_FREE, "double free (block's slab is empty)", b);
    return;
  }
  if (owner == 0 && me != &mtp__thread_empty) {
    /* A slab we gave up when it was full: take it back, so our frees into it stay local. */
    mtp_pool_internal_t *pool = mtp__slab_pool(s);
    mtp_heap_t *h = me->heaps[pool->id];
    if (h != NULL && h == mtp__slab_heap(s) &&
        (mtp_pool_internal_t *)mtp__load_relaxed(&h->pool) == pool) {
      /* Not on the pool's list: one CAS takes it back. Listed: the list's lock is needed. */
      bool adopted = mtp__slab_adopt(s, h, false);
      if (!adopted && !(mtp__load_acquire(&s->thread_free) & MTP_TF_OWNED)) {
        mtp__pool_lock(pool);
        bool listed = s->list == MTP_LIST_POOL_PARTIAL;
        adopted = mtp__slab_adopt(s, h, true);
        if (adopted && listed) mtp__pool_partial_remove(pool, s);
        mtp__pool_unlock(pool);
      }
      if (adopted) {
        if (h->current[s->cls] != s) partial_push(h, s);
        mtp__slab_free_local(s, b);
        return;
      }
    }
  }
  mtp__track_free(b, s->block_size);
  mtp__slab_free_remote(s, b);
}

/* ---- thread exit and flush ---- */

/* Pool lock held. Give one owned slab back: release it if empty, else detach it for adoption. */
static void abandon_slab(mtp_pool_internal_t *pool, mtp_heap_t *h, mtp_slab_t *s, uint64_t now) {
  for (;;) {
    h->remote_collected += mtp__slab_collect(s);
    if (s->used == 0) {
      mtp__pool_release_slab(pool, s, now);
      return;
    }
    if (mtp__slab_detach(s)) break;
  }
  /* Detached with blocks in use; any free room makes it worth adopting. Should a remote free be
   * emptying it right now, that thread waits for our lock and then releases it. */
  if ((s->used < s->capacity || s->free != NULL) && mtp__slab_mark_listed(s))
    mtp__pool_partial_push(pool, s);
}

void mtp__heap_abandon(mtp_heap_t *h) {
  mtp_pool_internal_t *pool = (mtp_pool_internal_t *)mtp__load_relaxed(&h->pool);
  if (pool == NULL) return; /* destroyed: its memory is gone already */
  uint64_t now = mtp__os_now_ms();
  mtp__pool_lock(pool);
  for (unsigned c = 0; c < MTP_NUM_CLASSES; c++) {
    mtp_slab_t *s = h->current[c];
    h->current[c] = &mtp__slab_empty;
    if (s != &mtp__slab_empty) {
      s->used &= ~MTP_USED_CURRENT;
      abandon_slab(pool, h, s, now);
    }
    while ((s = h->partial[c]) != NULL) {
      partial_remove(h, s);
      abandon_slab(pool, h, s, now);
    }
    while ((s = h->full[c]) != NULL) {
      full_remove(h, s);
      abandon_slab(pool, h, s, now);
    }
  }
  mtp__heap_drain_cache(h, UINT64_MAX, now);
  pool->dead_allocs += h->allocs;
  pool->dead_remote += h->remote_collected;
  if (h->pool_prev)
    h->pool_prev->pool_next = h->pool_next;
  else
    pool->heaps = h->pool_next;
  if (h->pool_next) h->pool_next->pool_prev = h->pool_prev;
  mtp__store_relaxed(&h->pool, 0);
  mtp__pool_note_free_pages(pool, now);
  mtp__pool_unlock(pool);
}

void mtp_thread_flush(void) {
  mtp_thread_t *t = mtp__tl_thread;
  if (t == &mtp__thread_empty) return;
  mtp__tl_default_heap = &mtp__heap_empty;
  pthread_mutex_lock(&mtp__registry_lock);
  for (unsigned i = 0; i < MTP_MAX_POOLS; i++) {
    mtp_heap_t *h = t->heaps[i];
    if (h == NULL) continue;
    mtp__heap_abandon(h);
    t->heaps[i] = NULL;
    mtp__meta_free(h, sizeof(*h));
  }
  pthread_mutex_unlock(&mtp__registry_lock);
}

static void thread_release(void) {
  mtp_thread_t *t = mtp__tl_thread;
  mtp_thread_flush();
  mtp__tl_thread = &mtp__thread_empty;
  mtp__meta_free(t, sizeof(*t));
}

static void thread_exit(void *arg) {
  mtp_thread_t *t = arg;
  if (t == NULL || t != mtp__tl_thread) return;
  tl_exited = true;
  thread_release();
}
