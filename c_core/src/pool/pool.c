/* Pools: the registry of live pools and their ids, pool creation and destruction, the lists of
 * detached slabs and their adoption, releasing empty slabs, the heaps' empty-slab caches,
 * trimming, the purge thread that returns empty pages after the pool's delay, and the fork
 * handlers. A pool's lock guards its region set, its lists of detached slabs and its member list;
 * the registry lock guards the pool list and the binding of heaps to pools. Layer: pool. */
#include "pool.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#include "base/os.h"

pthread_mutex_t mtp__registry_lock = PTHREAD_MUTEX_INITIALIZER;
mtpi_node_t *mtp__pools;
mtpi_atomic_uptr mtp__default_pool_ptr;
static mtpi_pool_t *pool_ids[MTP_MAX_POOLS];
static uint32_t pools_created;
static pthread_once_t default_once = PTHREAD_ONCE_INIT;

void mtp__pool_lock(mtpi_pool_t *p) { pthread_mutex_lock(&p->lock); }

bool mtp__pool_unlock_defer(mtpi_pool_t *p) {
  bool due = p->purge_due;
  p->purge_due = false;
  pthread_mutex_unlock(&p->lock);
  return due;
}

void mtp__pool_unlock(mtpi_pool_t *p) {
  if (mtp__pool_unlock_defer(p)) mtp__purger_wake();
}

mtpi_pool_t *mtp__pool_by_id(uint32_t id) { return id < MTP_MAX_POOLS ? pool_ids[id] : NULL; }

static mtpi_desc_t *page_of(mtpi_node_t *n) { return MTP_CONTAINER(n, mtpi_desc_t, link); }
static mtpi_member_t *member_of(mtpi_node_t *n) { return MTP_CONTAINER(n, mtpi_member_t, link); }

/* Pool lock held: pages were freed; have them purged in time (the unlock wakes the purger). */
static void note_free_pages(mtpi_pool_t *p) {
  if (p->purge_delay_ms > 0) p->purge_due = true;
}

/* ---- members and their caches ---- */

bool mtp__pool_join(mtpi_pool_t *p, mtpi_member_t *m) {
  mtp__store_relaxed(&m->pool, (uintptr_t)p); /* relaxed: see mtp__member_pool */
  m->region_hint = NULL;
  memset(m->classes_got, 0, sizeof(m->classes_got));
  mtp__pool_lock(p);
  /* A second heap in a pool: wakes may come from several threads at once, too many to measure
   * under the registry lock each time (see wake_inline): the purge thread is worth its keep. */
  bool others = p->members != NULL;
  if (others) mtp__purger_eager();
  mtp__list_push(&p->members, &m->link);
  mtp__pool_unlock(p);
  return others;
}

void mtp__pool_leave_locked(mtpi_pool_t *p, mtpi_member_t *m) {
  p->dead_allocs += m->allocs;
  p->dead_remote += m->remote_collected;
  mtp__region_unclaim(&m->region_hint); /* a purge may unmap that region now */
  mtp__list_remove(&p->members, &m->link);
  mtp__store_relaxed(&m->pool, 0);
}

/* cache_lock: the owner, and trim, the purge thread or the fork handler (which hold the pool
 * lock; no section under it takes another lock) */
static void cache_lock(mtpi_member_t *m) {
  int expect = 0;
  /* acquire: the previous holder's list writes (released by cache_unlock) */
  while (!mtp__int_cas_weak_acquire(&m->cache_lock, &expect, 1)) expect = 0;
}
static void cache_unlock(mtpi_member_t *m) { mtp__int_store_release(&m->cache_lock, 0); }

mtpi_desc_t *mtp__cache_take(mtpi_member_t *m, unsigned cls, bool *formatted) {
  unsigned pages = mtp__class_pages[cls];
  cache_lock(m);
  mtpi_node_t *n = m->cache, *other = NULL;
  for (; n != NULL && page_of(n)->cls != cls; n = n->next) /* a span's cls matches no class */
    if (other == NULL && page_of(n)->pages == pages && page_of(n)->kind == MTP_PAGE_SLAB) other = n;
  *formatted = n != NULL;
  if (n == NULL) n = other;
  if (n) {
    mtp__list_remove(&m->cache, n);
    m->cache_bytes -= (size_t)pages << MTP_PAGE_SHIFT;
  }
  cache_unlock(m);
  return n ? page_of(n) : NULL;
}

mtpi_desc_t *mtp__cache_take_medium(mtpi_member_t *m, unsigned pages, unsigned most) {
  cache_lock(m);
  mtpi_node_t *best = NULL;
  for (mtpi_node_t *n = m->cache; n != NULL; n = n->next) {
    mtpi_desc_t *s = page_of(n);
    if (s->kind != MTP_PAGE_MEDIUM || s->pages < pages || s->pages > most) continue;
    if (best == NULL || s->pages < page_of(best)->pages) best = n;
    if (s->pages == pages) break; /* the newest that fits exactly */
  }
  if (best) {
    mtp__list_remove(&m->cache, best);
    m->cache_bytes -= (size_t)page_of(best)->pages << MTP_PAGE_SHIFT;
    page_of(best)->list = MTP_LIST_NONE;
  }
  cache_unlock(m);
  return best ? page_of(best) : NULL;
}

void mtp__cache_put_or_release(mtpi_pool_t *p, mtpi_member_t *m, mtpi_desc_t *s) {
  size_t bytes = (size_t)s->pages << MTP_PAGE_SHIFT;
  uint64_t now = mtp__os_now_ms();
  s->list = MTP_LIST_HEAP_CACHE;
  s->free_time_ms = s->kind == MTP_PAGE_MEDIUM ? mtp__run_freed_at(p->purge_delay_ms, now) : now;
  /* Newest first; past the bound the oldest go: the newest was touched last, and its class
   * is the one being churned (a slab kept formatted is reused without carving). */
  mtpi_node_t *evicted = NULL;
  bool cached = p->purge_delay_ms != 0 && bytes <= p->thread_cache_bytes;
  cache_lock(m);
  if (cached) {
    mtp__list_push(&m->cache, &s->link);
    m->cache_bytes += bytes;
    while (m->cache_bytes > p->thread_cache_bytes) {
      mtpi_node_t *old = mtp__list_last(m->cache);
      mtp__list_remove(&m->cache, old);
      m->cache_bytes -= (size_t)page_of(old)->pages << MTP_PAGE_SHIFT;
      mtp__list_push(&evicted, old);
    }
  }
  cache_unlock(m);
  if (cached && evicted == NULL) {
    if (p->purge_delay_ms > 0) mtp__purger_wake(); /* no lock held */
    return;
  }
  if (!cached) mtp__list_push(&evicted, &s->link);
  mtp__pool_lock(p);
  for (mtpi_node_t *n; (n = mtp__list_pop(&evicted)) != NULL;) {
    mtpi_desc_t *e = page_of(n);
    e->list = MTP_LIST_NONE;
    mtp__pool_release_locked(p, e, e->free_time_ms);
  }
  mtp__pool_unlock(p);
}

size_t mtp__cache_drain_locked(mtpi_pool_t *p, mtpi_member_t *m, uint64_t older_than_ms,
                               uint64_t now_ms) {
  size_t n = 0;
  cache_lock(m);
  mtpi_node_t *next;
  for (mtpi_node_t *it = m->cache; it != NULL; it = next) {
    next = it->next;
    mtpi_desc_t *s = page_of(it);
    if (s->free_time_ms > older_than_ms) continue;
    mtp__list_remove(&m->cache, it);
    size_t bytes = (size_t)s->pages << MTP_PAGE_SHIFT;
    m->cache_bytes -= bytes;
    n += bytes;
    s->list = MTP_LIST_NONE;
    /* Empty since it was cached: its pages are due one delay after that, not after the drain
     * (which would hold a whole huge range of MTPOOL_HUGEPAGES one more delay). */
    mtp__region_free_run(&p->rs, s, s->free_time_ms < now_ms ? s->free_time_ms : now_ms);
  }
  cache_unlock(m);
  if (n) note_free_pages(p);
  return n;
}

static bool cache_any(mtpi_member_t *m) {
  cache_lock(m);
  bool any = m->cache != NULL;
  cache_unlock(m);
  return any;
}

/* ---- empty slabs ----
 *
 * A slab that no longer holds a block when the pool gets it back (a thread's exit gave it up
 * empty, or a remote free emptied it after its owner detached it, or a heap's cache overflowed)
 * is not returned to its region at once: it stays formatted on p->empty[its class], newest
 * first, and the next thread that needs a slab of that class takes it before any other, from
 * another class of the same span length next, before pages of a region (mtp__pool_slab_get).
 * Why: threads that live briefly use a few blocks of each of dozens of classes, a slab each.
 * Returned to its region, a span was formatted next for whatever class asked first, and carving
 * from its start faulted in only the OS pages that class needed, on top of those earlier classes
 * had left resident: each page in circulation drifted towards whole residency and, reused within
 * the purge delay, was never purged. Measured (gp_bench thread_churn, 8 threads, 2 loaded cores,
 * 9 runs): free pages made 38-99% of the peak RSS (median 90%), at 22-50 KiB resident per 64 KiB
 * page (median 30), and the slabs of live heaps held 1.4-3.8 times (median 2) the bytes their bump
 * pointers had reached. Taken back by its own class, a slab's resident part is what that class
 * carves. The purge moves slabs empty for the purge delay to the region layer, whose purge
 * returns their pages (purge_pool); a purge delay of 0 releases at once as before. Pool lock held
 * throughout. */

/* Keep the empty, unchecked slab s (no block handed out, none on its lists) for its class. It is
 * formatted again here so that its state is that of a slab no one was ever given: no owner,
 * nothing on either list, its bump pointer at its start, so that any free into it (a double free)
 * fails the bump check and is reported. */
static void empty_put_locked(mtpi_pool_t *p, mtpi_desc_t *s, uint64_t since_ms) {
  MTP_ASSERT(s->kind == MTP_PAGE_SLAB && s->cls < MTP_NUM_CLASSES); /* p->empty's index */
  mtp__slab_format(s, s->cls, false);
  s->list = MTP_LIST_POOL_EMPTY;
  s->free_time_ms = since_ms;
  if (p->empty[s->cls] == NULL) p->empty_tail[s->cls] = &s->link;
  mtp__list_push(&p->empty[s->cls], &s->link);
  p->empty_bytes += (size_t)s->pages << MTP_PAGE_SHIFT;
  note_free_pages(p); /* due to the purge one delay from now */
}

static void empty_remove_locked(mtpi_pool_t *p, mtpi_desc_t *s) {
  if (p->empty_tail[s->cls] == &s->link) p->empty_tail[s->cls] = s->link.prev;
  mtp__list_remove(&p->empty[s->cls], &s->link);
  s->list = MTP_LIST_NONE;
  p->empty_bytes -= (size_t)s->pages << MTP_PAGE_SHIFT;
}

/* An empty slab for class cls (formatted for another class when it is not cls's), or NULL. */
static mtpi_desc_t *empty_take_locked(mtpi_pool_t *p, unsigned cls) {
  mtpi_node_t *n = p->empty[cls];
  for (unsigned c = 0; n == NULL && c < MTP_NUM_CLASSES; c++)
    if (mtp__class_pages[c] == mtp__class_pages[cls]) n = p->empty[c];
  if (n == NULL) return NULL;
  mtpi_desc_t *s = page_of(n);
  empty_remove_locked(p, s);
  return s;
}

/* Return to the region layer the empty slabs kept since cutoff or before (with that time, so the
 * same purge pass returns their pages). Each list is walked from its tail, the slab listed first,
 * and only while slabs are due: a walk of every slab kept, in every purge pass, cost more than
 * the rest of the pass under churn (perf: 2.2% of thread_churn's samples in purge_pool, most on
 * that walk). A heap's cache comes to the front with its older times (mtp__cache_abandon_locked),
 * so a slab may wait behind a newer one: at most one purge delay longer. */
static void empty_release_due_locked(mtpi_pool_t *p, uint64_t cutoff) {
  if (p->empty_bytes == 0) return;
  for (unsigned c = 0; c < MTP_NUM_CLASSES; c++) {
    mtpi_node_t *it;
    while ((it = p->empty_tail[c]) != NULL && page_of(it)->free_time_ms <= cutoff) {
      mtpi_desc_t *s = page_of(it);
      empty_remove_locked(p, s);
      mtp__region_free_run(&p->rs, s, s->free_time_ms);
    }
  }
}

void mtp__cache_abandon_locked(mtpi_pool_t *p, mtpi_member_t *m) {
  cache_lock(m);
  mtpi_node_t *n;
  while ((n = mtp__list_pop(&m->cache)) != NULL) {
    mtpi_desc_t *s = page_of(n);
    m->cache_bytes -= (size_t)s->pages << MTP_PAGE_SHIFT;
    s->list = MTP_LIST_NONE;
    if (s->kind == MTP_PAGE_MEDIUM)
      mtp__pool_release_locked(p, s, s->free_time_ms); /* to its region */
    else
      empty_put_locked(p, s, s->free_time_ms);
  }
  cache_unlock(m);
}

/* ---- slabs ---- */

void mtp__pool_release_locked(mtpi_pool_t *p, mtpi_desc_t *s, uint64_t now_ms) {
  /* a slab is kept for its class; a medium block's pages (span.c) go straight back */
  if (s->kind == MTP_PAGE_SLAB && !s->checked && p->purge_delay_ms != 0) {
    empty_put_locked(p, s, now_ms);
    return;
  }
  if (s->check_bits) {
    mtp__meta_free(s->check_bits, (s->capacity + 7) / 8);
    s->check_bits = NULL;
  }
  mtp__region_free_run(&p->rs, s, now_ms);
  if (p->purge_delay_ms == 0)
    mtp__u64_add_relaxed(&p->bytes_returned, mtp__region_purge(&p->rs, now_ms, 0, false));
  else
    note_free_pages(p);
}

mtpi_desc_t *mtp__pool_run_locked(mtpi_pool_t *p, unsigned pages) {
  mtpi_desc_t *s = mtp__region_alloc_slab(&p->rs, pages, NULL, false, false);
  void *fault_at;
  size_t fault_len;
  if (mtp__region_take_populate(&p->rs, &fault_at, &fault_len)) note_free_pages(p);
  if (s == NULL) errno = ENOMEM;
  return s;
}

static void partial_remove_locked(mtpi_pool_t *p, mtpi_desc_t *s) {
  mtp__list_remove(&p->partial[s->cls], &s->link);
  s->list = MTP_LIST_NONE;
}

void mtp__pool_list_detached_locked(mtpi_pool_t *p, mtpi_desc_t *s) {
  if (!mtp__slab_mark_listed(s)) return; /* adopted meanwhile, or listed already */
  s->list = MTP_LIST_POOL_PARTIAL;
  mtp__list_push(&p->partial[s->cls], &s->link);
}

mtpi_desc_t *mtp__pool_slab_get(mtpi_pool_t *p, unsigned cls, void *heap, mtpi_member_t *m,
                                uintptr_t owner_token, uint32_t *collected, bool *wake) {
  mtpi_desc_t *s;
  *collected = 0;
  *wake = false;
  mtp__pool_lock(p);
  MTP_VALIDATE(mtp__region_validate(&p->rs));
  mtpi_node_t *n;
  while ((n = p->partial[cls]) != NULL) {
    s = page_of(n);
    partial_remove_locked(p, s);
    if (mtp__slab_adopt(s, heap, owner_token, true, collected)) {
      *wake = mtp__pool_unlock_defer(p);
      return s;
    }
  }
  s = empty_take_locked(p, cls);
  if (s != NULL) {
    if (s->cls != cls) mtp__slab_format(s, cls, false);
    mtp__slab_set_heap(s, heap);
    mtp__store_relaxed(&s->owner, owner_token); /* relaxed: published by the unlock below */
    *wake = mtp__pool_unlock_defer(p);
    return s;
  }
  uint64_t bit = (uint64_t)1 << (cls % 64);
  bool grow = (m->classes_got[cls / 64] & bit) != 0 && !m->shared;
  m->classes_got[cls / 64] |= bit;
  /* Fault-in ahead only where every OS page will hold a block's start: the middle pages of a
   * bigger block may never be touched. gp_bench cache --sizes 32768:32768 (the ends of 20,000
   * blocks written) held 627 MiB and ran 0.49 s when all classes faulted ahead, 160 MiB and
   * 0.37 s since (glibc 80 MiB, 0.25 s; tcmalloc 166 MiB). */
  bool populate = mtp__class_size[cls] <= mtp__os_page_size();
  s = mtp__region_alloc_slab(&p->rs, mtp__class_pages[cls], m->shared ? NULL : &m->region_hint,
                             grow, populate);
  if (s != NULL) {
    mtp__slab_format(s, cls, false);
    mtp__slab_set_heap(s, heap);
    mtp__store_relaxed(&s->owner, owner_token); /* relaxed: published by the unlock below */
  }
  void *fault_at;
  size_t fault_len;
  if (mtp__region_take_populate(&p->rs, &fault_at, &fault_len)) note_free_pages(p);
  *wake = mtp__pool_unlock_defer(p); /* the caller wakes (see pool.h) */
  /* A failed fault-in costs only the faults it would have saved. */
  if (fault_len) (void)mtp__os_populate(fault_at, fault_len);
  if (s == NULL) errno = ENOMEM;
  return s;
}

bool mtp__pool_adopt(mtpi_pool_t *p, mtpi_desc_t *s, void *heap, uintptr_t owner_token,
                     uint32_t *collected) {
  mtp__pool_lock(p);
  /* s->list is read only once the CAS has made s ours: until then another thread may have
   * adopted s and be moving it between its own lists, unlocked. Once adopted, the field was last
   * written by the detacher (before its release CAS) or under this lock. */
  bool adopted = mtp__slab_adopt(s, heap, owner_token, true, collected);
  if (adopted && s->list == MTP_LIST_POOL_PARTIAL) partial_remove_locked(p, s);
  mtp__pool_unlock(p);
  return adopted;
}

void mtp__pool_detached_news(const mtpi_remote_seen_t *seen, mtpi_desc_t *s) {
  mtpi_pool_t *p = MTP_CONTAINER(seen->set, mtpi_pool_t, rs);
  mtp__pool_lock(p);
  /* Between the push and this lock other frees may have emptied s, and its release and a purge
   * unmapped its region (regions change only under this lock). No unmap since the push: s is
   * there. Else s is read only if its region is still one of ours (unmapped and mapped again at
   * the same address: s is whatever it is now, and is handled as such under the lock). */
  if (mtp__u64_load_relaxed(&p->rs.unmaps) != seen->unmaps && !mtp__region_listed(&p->rs, s)) {
    mtp__pool_unlock(p);
    return;
  }
  /* Adoption (which sets OWNED) of a slab that a remote free may release happens only under this
   * lock: if the word is still detached, the slab's fields are stable while we hold it.
   * acquire: the detacher's detached_used and the pushers' links. */
  uintptr_t now = mtp__load_acquire(&s->thread_free);
  if (!(now & MTP_TF_OWNED) && s->kind == MTP_PAGE_SLAB) {
    if (MTP_TF_COUNT(now) == s->detached_used) {
      if (now & MTP_TF_LISTED) partial_remove_locked(p, s);
      p->dead_remote += MTP_TF_COUNT(now);
      mtp__pool_release_locked(p, s, mtp__os_now_ms());
    } else {
      mtp__pool_list_detached_locked(p, s);
    }
  }
  mtp__pool_unlock(p);
}

/* ---- the purge thread ---- */

static pthread_mutex_t purger_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t purger_cond = PTHREAD_COND_INITIALIZER;
static bool purger_started, purger_work, purger_joinable; /* purger_lock */
/* purger_lock. stop: for good (unload, exit); halt: until the thread is joined (fork). */
static bool purger_stop, purger_halt;
/* Held across the purge thread's creation, and taken first by the fork handler: a fork never
 * happens while pthread_create runs (a sanitizer's allocator lock held by that thread would stay
 * locked in the child for ever). A nested allocation inside pthread_create does not come back
 * here: purger_idle is already 0, so its wake returns at once. */
static pthread_mutex_t purger_create_lock = PTHREAD_MUTEX_INITIALIZER;
static bool purger_quit(void) { return purger_stop || purger_halt; }
static pthread_t purger_tid;                                          /* purger_lock */
/* Whether wakes start (and signal) the purge thread. 0 at start: a process that holds little to
 * purge never gets one (a thread costs a clone, a stack and a join at exit, which a short process
 * notices); the waking threads purge what is due themselves (wake_inline). Set once for good when
 * what waits to be purged reaches PURGER_START_BYTES, or a second heap joins a pool. Every
 * increase of what waits (a release, a cached slab, a cached large mapping, pages faulted in
 * ahead) is followed by a wake from the thread that made it, once it holds no lock, and
 * wake_inline measures after taking the locks those increases were made under: so no more than
 * PURGER_START_BYTES ever waits past the delay without a thread. Relaxed: the flag publishes
 * nothing; a waker that reads a stale 0 purges and measures under the locks as if no thread ran,
 * which keeps that bound. */
static mtpi_atomic_int purger_needed;
#define PURGER_START_BYTES ((size_t)1 << 20)
void mtp__purger_eager(void) { mtp__int_store_relaxed(&purger_needed, 1); }
/* 1: nothing scheduled, a wake is needed. seq_cst: the purger's store of 1 before it scans and
 * a freer's CAS 1 -> 0 after it freed must not both miss each other's effects (a store-load
 * pattern across two variables: pages and this flag). A waker reads it relaxed first and skips
 * the CAS on 0 (mtp__purger_wake says why that read misses nothing). */
static mtpi_atomic_int purger_idle = 1;

/* Pool lock held (and the registry lock, by every caller). */
static size_t purge_pool(mtpi_pool_t *p, uint64_t now, bool force, bool *pending) {
  size_t n = 0;
  uint64_t cutoff = force ? UINT64_MAX
                    : (p->purge_delay_ms < 0 || (uint64_t)p->purge_delay_ms > now)
                        ? 0
                        : now - (uint64_t)p->purge_delay_ms;
  if (force || p->purge_delay_ms >= 0)
    for (mtpi_node_t *it = p->members; it; it = it->next)
      mtp__cache_drain_locked(p, member_of(it), cutoff, now);
  empty_release_due_locked(p, cutoff);
  n += mtp__region_purge(&p->rs, now, p->purge_delay_ms, force);
  mtp__u64_add_relaxed(&p->bytes_returned, n);
  bool large_left = false; /* cached large mappings: counted in bytes_returned by large.c */
  n += mtp__large_purge(p, cutoff, &large_left); /* cached ranges are stamped early: large.c */
  if (pending) {
    bool left = large_left || p->empty_bytes != 0 || mtp__region_dirty_left(&p->rs);
    for (mtpi_node_t *it = p->members; it && !left; it = it->next) left = cache_any(member_of(it));
    *pending = *pending || (left && p->purge_delay_ms >= 0);
  }
  MTP_VALIDATE(mtp__region_validate(&p->rs));
  return n;
}

/* Sleep ms on the purger's condition (purger_lock held); a stop request cuts it short. */
static void purger_sleep(long ms) {
  struct timespec ts;
  if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return;
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  while (!purger_quit() && pthread_cond_timedwait(&purger_cond, &purger_lock, &ts) == 0) {
  }
}

static void *purger_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&purger_lock);
  while (!purger_quit()) {
    if (!purger_work) {
      pthread_cond_wait(&purger_cond, &purger_lock);
      continue;
    }
    purger_work = false;
    bool pending = true;
    while (pending && !purger_quit()) {
      /* Sleep half a tenth of the shortest delay among pools with work (medium and large blocks'
       * pages are due then: base.h), then purge what is due. */
      long delay = 1000;
      pthread_mutex_unlock(&purger_lock);
      pthread_mutex_lock(&mtp__registry_lock);
      for (mtpi_node_t *it = mtp__pools; it; it = it->next) {
        mtpi_pool_t *p = mtp__pool_from_reg(it);
        if (p->purge_delay_ms > 0 && p->purge_delay_ms < delay) delay = p->purge_delay_ms;
      }
      pthread_mutex_unlock(&mtp__registry_lock);
      pthread_mutex_lock(&purger_lock);
      purger_sleep(delay / MTP_RUN_DELAY_DIV / 2 + 1);
      if (purger_quit()) break;
      pthread_mutex_unlock(&purger_lock);
      pending = false;
      mtp__int_store_seq_cst(&purger_idle, 1);
      pthread_mutex_lock(&mtp__registry_lock);
      uint64_t now = mtp__os_now_ms();
      for (mtpi_node_t *it = mtp__pools; it; it = it->next) {
        mtpi_pool_t *p = mtp__pool_from_reg(it);
        mtp__pool_lock(p);
        purge_pool(p, now, false, &pending);
        (void)mtp__pool_unlock_defer(p); /* this thread is the one a wake would start */
      }
      pthread_mutex_unlock(&mtp__registry_lock);
      if (pending) mtp__int_store_seq_cst(&purger_idle, 0);
      pthread_mutex_lock(&purger_lock);
    }
  }
  pthread_mutex_unlock(&purger_lock);
  return NULL;
}

/* Bytes waiting in m's cache. */
static size_t cache_bytes(mtpi_member_t *m) {
  cache_lock(m);
  size_t n = m->cache_bytes;
  cache_unlock(m);
  return n;
}

/* No purge thread yet: purge what is due here and now, then measure what is left to purge in
 * pools that purge after a delay. Returns whether a thread is needed (it is from now on). Takes
 * the registry lock only if free: a caller holding it (none should; see pool.h) gets the thread. */
static bool wake_inline(void) {
  if (pthread_mutex_trylock(&mtp__registry_lock) != 0) {
    mtp__purger_eager();
    return true;
  }
  uint64_t now = mtp__os_now_ms();
  size_t held = 0;
  for (mtpi_node_t *it = mtp__pools; it; it = it->next) {
    mtpi_pool_t *p = mtp__pool_from_reg(it);
    if (p->purge_delay_ms <= 0) continue; /* at once, or never: nothing waits for a thread */
    mtp__pool_lock(p);
    purge_pool(p, now, false, NULL);
    held += mtp__region_dirty_bytes(&p->rs) + p->empty_bytes;
    for (mtpi_node_t *m = p->members; m; m = m->next) held += cache_bytes(member_of(m));
    (void)mtp__pool_unlock_defer(p); /* this is the wake */
    pthread_mutex_lock(&mtp__large_lock);
    held += p->large_cached_bytes;
    pthread_mutex_unlock(&mtp__large_lock);
  }
  pthread_mutex_unlock(&mtp__registry_lock);
  if (held < PURGER_START_BYTES) return false;
  mtp__purger_eager();
  return true;
}

void mtp__purger_wake(void) {
  if (!mtp__int_load_relaxed(&purger_needed) && !wake_inline()) return;
  /* Already scheduled: most wakes of a busy process. A plain load first, so that threads freeing
   * at once do not take the line from each other with a failing CAS (2.6% of gp_bench medium's
   * samples at 2 threads). Relaxed is enough here: what the waker just made to purge was made under
   * a lock the purger's scan takes (see purger_needed); if that scan ran first, its store of 1
   * happens before this load (through that lock), so a 0 read here is a later wake's, or the
   * purger's own when it has more to do (it scans again then). */
  if (mtp__int_load_relaxed(&purger_idle) == 0) return;
  int idle = 1;
  if (!mtp__int_cas_strong_seq_cst(&purger_idle, &idle, 0)) return; /* already scheduled */
  /* No pool, registry or purger lock is held here: pthread_create may allocate (and so re-enter
   * mtpool, whose wake then returns above). */
  pthread_mutex_lock(&purger_create_lock);
  pthread_mutex_lock(&purger_lock);
  purger_work = true;
  bool start = !purger_started && !purger_stop;
  if (start) purger_started = true; /* this thread creates it */
  pthread_cond_signal(&purger_cond);
  pthread_mutex_unlock(&purger_lock);
  bool ok = true;
  if (start) {
    /* The thread is created with every signal blocked (it inherits the mask): a process-directed
     * signal (SIGCHLD, SIGINT, a timer) must go to the program's own threads, which may wait for
     * it with sigwait or sigsuspend, never to ours. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t tid;
    ok = pthread_create(&tid, NULL, purger_main, NULL) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_mutex_lock(&purger_lock);
    if (ok) {
      purger_tid = tid;
      purger_joinable = true;
    } else {
      purger_started = false; /* try again at the next wake */
    }
    pthread_mutex_unlock(&purger_lock);
  }
  pthread_mutex_unlock(&purger_create_lock);
  if (!ok) mtp__int_store_seq_cst(&purger_idle, 1);
}

/* At unload (dlclose of a library that carries mtpool) and at exit: the purge thread must not
 * outlive the code it runs. */
/* Stop the purge thread and wait for it (it finishes the pass it is in); returns whether one ran.
 * forever: never start one again (unload, exit); else the next wake starts a new one. */
static bool purger_join(bool forever) {
  pthread_mutex_lock(&purger_lock);
  if (forever) purger_stop = true;
  purger_halt = true;
  bool join = purger_joinable;
  purger_joinable = false;
  pthread_t tid = purger_tid;
  pthread_cond_broadcast(&purger_cond);
  pthread_mutex_unlock(&purger_lock);
  if (join) (void)pthread_join(tid, NULL);
  pthread_mutex_lock(&purger_lock);
  purger_halt = false;
  purger_started = false;
  pthread_mutex_unlock(&purger_lock);
  return join;
}

__attribute__((destructor)) static void purger_shutdown(void) { (void)purger_join(true); }

/* ---- create, destroy, trim ---- */

mtpi_pool_t *mtp__pool_new(const mtp_options_t *in, bool is_default) {
  mtp_options_t opt;
  if (in)
    opt = *in;
  else
    mtp_options_init(&opt);
  if (is_default) mtp__options_from_env(&opt);
  mtp__options_sanitize(&opt);
  /* The default pool's record is static: the process can always use it, even when the very
   * first map fails (its allocations then fail with ENOMEM, and work again later). */
  static mtpi_pool_t default_record;
  mtpi_pool_t *p = is_default ? &default_record : mtp__meta_alloc(sizeof(*p));
  if (p == NULL) return NULL;
  int e = mtp__os_lock_init(&p->lock);
  bool pool_lock = e == 0;
  unsigned locks = 0; /* shared locks made */
  while (e == 0 && locks < MTP_SHARED_HEAPS && (e = mtp__os_lock_init(&p->shared[locks].lock)) == 0)
    locks++;
  if (e != 0) { /* undo only what was made */
    while (locks > 0) pthread_mutex_destroy(&p->shared[--locks].lock);
    if (pool_lock) pthread_mutex_destroy(&p->lock);
    if (!is_default) mtp__meta_free(p, sizeof(*p));
    errno = ENOMEM;
    return NULL;
  }
  p->purge_delay_ms = opt.purge_delay_ms;
  p->thread_cache_bytes = opt.thread_cache_bytes;
  p->check = opt.check;
  pthread_mutex_lock(&mtp__registry_lock);
  uint32_t id = MTP_MAX_POOLS;
  for (uint32_t i = is_default ? 0 : 1; i < MTP_MAX_POOLS; i++)
    if (pool_ids[i] == NULL) {
      id = i;
      break;
    }
  if (id == MTP_MAX_POOLS) {
    pthread_mutex_unlock(&mtp__registry_lock);
    pthread_mutex_destroy(&p->lock);
    for (unsigned i = 0; i < MTP_SHARED_HEAPS; i++) pthread_mutex_destroy(&p->shared[i].lock);
    mtp__meta_free(p, sizeof(*p));
    errno = ENOMEM;
    return NULL;
  }
  p->id = id;
  pools_created++;
  if (opt.name && opt.name[0]) {
    strncpy(p->name, opt.name, sizeof(p->name) - 1);
  } else {
    char buf[24], *e = buf + sizeof(buf);
    *--e = 0;
    uint32_t v = pools_created;
    do *--e = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    memcpy(p->name, "pool-", 5);
    memcpy(p->name + 5, e, strlen(e) + 1);
  }
  pool_ids[id] = p;
  mtp__list_push(&mtp__pools, &p->reg_link);
  pthread_mutex_unlock(&mtp__registry_lock);
  return p;
}

/* Runs inside pthread_once: nothing here may allocate with malloc (see pool.h). */
static void default_init(void) {
  mtp_options_t opt;
  mtp_options_init(&opt);
  opt.name = "default";
  mtpi_pool_t *p = mtp__pool_new(&opt, true); /* static record: cannot fail */
  /* release: pairs with mtp__default's acquire load */
  mtp__store_release(&mtp__default_pool_ptr, (uintptr_t)p);
}

mtpi_pool_t *mtp__default_pool_init(void) {
  pthread_once(&default_once, default_init);
  /* The fork handlers, outside the once: pthread_atfork may call malloc, which may be us.
   * seq_cst CAS: exactly one thread registers them (a re-entrant call from inside
   * pthread_atfork finds the flag taken and goes on). */
  static mtpi_atomic_int atfork_claimed;
  int no = 0;
  if (mtp__int_load_relaxed(&atfork_claimed) == 0 && mtp__int_cas_strong_seq_cst(&atfork_claimed, &no, 1))
    (void)pthread_atfork(mtp__fork_prepare, mtp__fork_parent, mtp__fork_child); /* ENOMEM: no
      fork handlers; a child forked while another thread held a lock may then deadlock */
  return (mtpi_pool_t *)mtp__load_acquire(&mtp__default_pool_ptr);
}

void mtp__pool_free(mtpi_pool_t *p) {
  pthread_mutex_lock(&mtp__registry_lock);
  mtp__pool_lock(p);
  MTP_VALIDATE(mtp__region_validate(&p->rs));
  /* Unbind every heap: their threads notice at their next use of this pool id, or at exit. */
  for (mtpi_node_t *it = p->members; it; it = it->next)
    mtp__store_relaxed(&member_of(it)->pool, 0); /* relaxed: see mtp__member_pool */
  p->members = NULL;
  /* checked-mode slabs keep their allocation bitmaps in internal records; Valgrind builds
   * also tell memcheck that the blocks still in use are gone */
  for (mtpi_region_t *r = mtp__region_from_node(p->rs.regions); r;
       r = mtp__region_from_node(r->h.link.next))
    for (unsigned i = MTP_REGION_FIRST_PAGE; i < MTP_PAGES_PER_REGION; i++) {
      mtpi_desc_t *s = &r->pages[i];
      if (s->kind != MTP_PAGE_SLAB) continue;
      mtp__slab_forget_blocks(s);
      if (s->check_bits) mtp__meta_free(s->check_bits, (s->capacity + 7) / 8);
    }
  mtp__region_unmap_all(&p->rs);
  (void)mtp__pool_unlock_defer(p); /* nothing left to purge */
  mtp__large_destroy_pool(p);
  pool_ids[p->id] = NULL;
  mtp__list_remove(&mtp__pools, &p->reg_link);
  pthread_mutex_unlock(&mtp__registry_lock);
  pthread_mutex_destroy(&p->lock);
  for (unsigned i = 0; i < MTP_SHARED_HEAPS; i++) /* the shared heaps are members: unbound above */
    pthread_mutex_destroy(&p->shared[i].lock);
  mtp__meta_free(p, sizeof(*p));
}

size_t mtp__pool_trim(mtpi_pool_t *p) {
  pthread_mutex_lock(&mtp__registry_lock);
  mtp__pool_lock(p);
  size_t n = purge_pool(p, mtp__os_now_ms(), true, NULL);
  (void)mtp__pool_unlock_defer(p); /* everything was purged */
  pthread_mutex_unlock(&mtp__registry_lock);
  return n;
}

size_t mtp__pool_trim_all(void) {
  size_t n = 0;
  pthread_mutex_lock(&mtp__registry_lock); /* no pool is destroyed meanwhile */
  uint64_t now = mtp__os_now_ms();
  for (uint32_t id = 0; id < MTP_MAX_POOLS; id++) {
    mtpi_pool_t *p = pool_ids[id];
    if (p == NULL) continue;
    mtp__pool_lock(p);
    n += purge_pool(p, now, true, NULL);
    (void)mtp__pool_unlock_defer(p); /* everything was purged */
  }
  pthread_mutex_unlock(&mtp__registry_lock);
  return n;
}

/* ---- fork: hold every lock across fork() so the child finds them consistent ---- */

/* The purge thread is stopped across fork(): no thread of the parent's but the forking one exists
 * then, so the child inherits no half-held lock of it (the purger's, a sanitizer's) and no thread
 * record of it; the parent starts it again afterwards, the child at its first wake. */
static bool purger_was_running; /* written by the forking thread, under purger_create_lock */

void mtp__fork_prepare(void) {
  pthread_mutex_lock(&purger_create_lock);
  purger_was_running = purger_join(false);
  pthread_mutex_lock(&mtp__registry_lock);
  for (mtpi_node_t *it = mtp__pools; it; it = it->next) { /* shared heaps, then pool: heap.c */
    mtpi_pool_t *p = mtp__pool_from_reg(it);
    for (unsigned i = 0; i < MTP_SHARED_HEAPS; i++) pthread_mutex_lock(&p->shared[i].lock);
    mtp__pool_lock(p);
    /* and every member's cache lock, which its owner takes without the pool lock: a child that
     * only reset a lock held at the fork could inherit a cache list half changed, which its purge
     * thread then drained (region.c's checks failed in test_rel_fork's children at MTP_DEBUG 2) */
    for (mtpi_node_t *m = p->members; m; m = m->next) cache_lock(member_of(m));
  }
  pthread_mutex_lock(&mtp__large_lock);
  pthread_mutex_lock(&mtp__meta_lock);
  pthread_mutex_lock(&purger_lock);
}

static void unlock_all(void) {
  pthread_mutex_unlock(&purger_lock);
  pthread_mutex_unlock(&mtp__meta_lock);
  pthread_mutex_unlock(&mtp__large_lock);
  for (mtpi_node_t *it = mtp__pools; it; it = it->next) {
    mtpi_pool_t *p = mtp__pool_from_reg(it);
    for (mtpi_node_t *m = p->members; m; m = m->next) cache_unlock(member_of(m));
    pthread_mutex_unlock(&p->lock); /* a release due before the fork is woken for later */
    for (unsigned i = 0; i < MTP_SHARED_HEAPS; i++) pthread_mutex_unlock(&p->shared[i].lock);
  }
  pthread_mutex_unlock(&mtp__registry_lock);
}

void mtp__fork_parent(void) {
  unlock_all();
  bool restart = purger_was_running;
  pthread_mutex_unlock(&purger_create_lock);
  if (restart) { /* it may have had pages to purge: a new one looks */
    mtp__int_store_seq_cst(&purger_idle, 1);
    mtp__purger_wake();
  }
}

void mtp__fork_child(void) {
  /* Only the forking thread lives on. Heaps of the other threads keep their slabs (their blocks
   * can still be freed here, by the remote path) and their caches, which unlock_all releases. */
  /* The purger was joined before the fork (started and joinable are false): nobody waits on its
   * condition, and the child starts its own at its first wake. */
  purger_work = false;
  mtp__int_store_seq_cst(&purger_idle, 1);
  unlock_all();
  pthread_mutex_unlock(&purger_create_lock);
}
