/* A heap's cache: empty slabs and freed medium blocks its thread keeps for its next ones, up to
 * the pool's thread_cache_bytes (freed packed blocks in the room the others leave), newest first (the newest was touched last, and its class is the
 * one being churned: a slab kept formatted is reused without carving). The owner takes and puts
 * without the pool lock, under the member's cache lock (pool.h), which trim, the purge pass and
 * the fork handler also take; the purge releases what waited past the delay. Layer: heap. */
#include "lists.h"

#include <errno.h>

#include "base/os.h"

mtpi_desc_t *mtp__cache_take_slab(mtpi_member_t *m, unsigned cls, bool *formatted) {
  unsigned pages = mtp__class_pages[cls];
  mtp__cache_lock(m);
  mtpi_node_t *n = m->cache, *other = NULL;
  for (; n != NULL && mtp__desc_of_node(n)->cls != cls; n = n->next) { /* a medium block's cls
                                                                           matches no class */
    mtpi_desc_t *d = mtp__desc_of_node(n);
    if (other == NULL && d->pages == pages && d->kind == MTP_PAGE_SLAB) other = n;
  }
  *formatted = n != NULL;
  if (n == NULL) n = other;
  if (n) {
    mtp__list_remove(&m->cache, n);
    m->cache_bytes -= (size_t)pages << MTP_PAGE_SHIFT;
  }
  mtp__cache_unlock(m);
  return mtp__desc_of_node(n);
}

/* A freed medium block of `pages` to `most` pages (the newest of exactly `pages`, else the
 * shortest), out of the cache, or NULL. The block freed last is never taken: a use after free of
 * it cannot reach the next block of its size (with a single block of a size cached, the caller
 * takes fresh pages, so a loop of one size alternates between two cached runs). */
static mtpi_desc_t *take_medium(mtpi_member_t *m, unsigned pages, unsigned most) {
  mtp__cache_lock(m);
  mtpi_node_t *best = NULL;
  bool newest = true; /* the cache is newest first */
  for (mtpi_node_t *n = m->cache; n != NULL; n = n->next) {
    mtpi_desc_t *s = mtp__desc_of_node(n);
    if (s->kind != MTP_PAGE_MEDIUM) continue;
    if (newest) {
      newest = false;
      continue;
    }
    if (s->pages < pages || s->pages > most) continue;
    if (best == NULL || s->pages < mtp__desc_of_node(best)->pages) best = n;
    if (s->pages == pages) break; /* the newest that fits exactly */
  }
  if (best) {
    mtp__list_remove(&m->cache, best);
    m->cache_bytes -= (size_t)mtp__desc_of_node(best)->pages << MTP_PAGE_SHIFT;
    mtp__desc_of_node(best)->list = MTP_LIST_NONE;
  }
  mtp__cache_unlock(m);
  return mtp__desc_of_node(best);
}

void *mtp__cache_medium_alloc(mtpi_member_t *m, size_t size, bool zero) {
  size_t n = (size + MTP_PAGE_SIZE - 1) >> MTP_PAGE_SHIFT;
  unsigned pages = n ? (unsigned)n : 1;
  /* up to a quarter more, handed out whole: its pages are resident already, and an exact length
   * misses often under mixed sizes */
  mtpi_desc_t *s = take_medium(m, pages, pages + pages / 4);
  if (s == NULL) return NULL;
  m->allocs++;
  return mtp__medium_reuse(s, size, zero);
}

/* Keep the empty slab or freed medium block s in m's cache if the pool's options allow, else
 * release it to the pool. Returns whether a purge became due. */
static bool cache_put(mtpi_pool_t *p, mtpi_member_t *m, mtpi_desc_t *s) {
  size_t bytes = (size_t)s->pages << MTP_PAGE_SHIFT;
  uint64_t now = mtp__os_now_ms();
  s->list = MTP_LIST_HEAP_CACHE;
  s->free_time_ms = s->kind == MTP_PAGE_MEDIUM ? mtp__run_freed_at(p->purge_delay_ms, now) : now;
  /* past the bound the oldest go */
  mtpi_node_t *evicted = NULL;
  bool cached = p->purge_delay_ms != 0 && bytes <= p->thread_cache_bytes;
  mtp__cache_lock(m);
  if (cached) {
    mtp__list_push(&m->cache, &s->link);
    m->cache_bytes += bytes;
    while (m->cache_bytes > p->thread_cache_bytes) {
      mtpi_node_t *old = mtp__list_last(m->cache);
      mtp__list_remove(&m->cache, old);
      m->cache_bytes -= (size_t)mtp__desc_of_node(old)->pages << MTP_PAGE_SHIFT;
      mtp__list_push(&evicted, old);
    }
  }
  mtp__cache_unlock(m);
  if (cached && evicted == NULL) return p->purge_delay_ms > 0; /* purged once due */
  if (!cached) mtp__list_push(&evicted, &s->link);
  mtp__pool_lock(p);
  for (mtpi_node_t *n; (n = mtp__list_pop(&evicted)) != NULL;) {
    mtpi_desc_t *e = mtp__desc_of_node(n);
    e->list = MTP_LIST_NONE;
    mtp__pool_release_locked(p, e, e->free_time_ms);
  }
  return mtp__pool_unlock(p);
}

/* The owner freed the medium block p (its head s seen as MEDIUM): kept in m's cache if the pool
 * caches it, else freed to its region. Returns whether a purge became due. */
static bool medium_free(mtpi_member_t *m, mtpi_desc_t *s, void *p, size_t size, bool sized) {
  mtpi_pool_t *pool = mtp__pool_of_page(s);
  if (pool->purge_delay_ms == 0 || mtp__medium_usable(s) > pool->thread_cache_bytes)
    return mtp__medium_free(p, size, sized);
  const char *what = NULL;
  int err = mtp__medium_claim(s, p, size, sized, &what);
  if (err) {
    mtp__error(err, what, p);
    return false;
  }
  mtp__medium_mark_freed(s, p);
  return cache_put(pool, m, s);
}

/* ---- packed blocks (m->pk) ---- */

void *mtp__cache_packed_alloc(mtpi_member_t *m, size_t size, bool zero, mtpi_pk_back_t *back) {
  /* units enough for size, and at most an eighth more than size (so the fit holds from here too) */
  unsigned n = (unsigned)((size + MTP_UNIT_SIZE - 1) >> MTP_UNIT_SHIFT);
  unsigned most = (unsigned)((size + size / 8) >> MTP_UNIT_SHIFT);
  void *p = NULL, *rest;
  mtp__cache_lock(m);
  /* the shortest that holds n units, never the block freed last (a use after free of it cannot
   * reach the next block of its size); without branches on the units, which follow the
   * program's sizes */
  unsigned best = MTP_PACKED_CACHED, best_d = MTP_SPAN_UNITS; /* above any longer one's d */
  uint32_t newest = m->pk_seq - 1;
  for (unsigned i = 0; i < m->pk_n; i++) {
    unsigned d = (unsigned)m->pk_units[i] - n; /* wraps for shorter ones */
    bool better = d < best_d && m->pk_put[i] != newest;
    best_d = better ? d : best_d;
    best = better ? i : best;
  }
  back->n = 0;
  back->at = NULL;
  if (best == MTP_PACKED_CACHED) {
    /* a miss, none long enough: all but the newest go back, so that the cut reuses their
     * resident units rather than fault in untouched ones (bench/results/notes.md: packed
     * blocks) */
    for (unsigned i = 0; i < m->pk_n;) {
      if (m->pk_put[i] == newest) {
        i++;
        continue;
      }
      back->p[back->n] = m->pk[i];
      back->time[back->n++] = m->pk_time[i];
      mtp__cache_pk_remove(m, i);
    }
  } else if (m->pk_units[best] <= most) { /* a hit */
    p = m->pk[best];
    mtp__cache_pk_remove(m, best);
  } else if ((rest = mtp__packed_split(m->pk[best], n)) != NULL) {
    /* a miss, with one longer by a packed block at least: its first units are handed out, the
     * rest stays cached in its place (its age kept), no lock taken */
    p = m->pk[best];
    m->pk[best] = rest;
    m->pk_units[best] = (uint16_t)(m->pk_units[best] - n);
    m->pk_bytes -= (size_t)n << MTP_UNIT_SHIFT;
  } else {
    /* a miss, with one longer by less: the request is cut at its place (its units are resident,
     * no span is searched), the others stay */
    back->at = back->p[0] = m->pk[best];
    back->time[0] = m->pk_time[best];
    back->n = 1;
    mtp__cache_pk_remove(m, best);
  }
  mtp__cache_unlock(m);
  if (p == NULL) return NULL;
  m->allocs++;
  return mtp__packed_reuse(p, size, zero);
}

/* Keep the claimed packed block p (usable bytes) in m's cache; the oldest go back to their spans
 * past its bounds. Returns whether a purge became due. */
static bool packed_put(mtpi_pool_t *pool, mtpi_member_t *m, void *p, size_t usable) {
  uint64_t now = mtp__os_now_ms();
  void *out[MTP_PACKED_CACHED];
  uint64_t out_time[MTP_PACKED_CACHED];
  unsigned n_out = 0;
  mtp__cache_lock(m);
  /* packed blocks take what room the slabs and runs leave of the bound */
  while (m->pk_n > 0 && (m->pk_n == MTP_PACKED_CACHED ||
                         m->cache_bytes + m->pk_bytes + usable > pool->thread_cache_bytes)) {
    unsigned old = 0;
    for (unsigned i = 1; i < m->pk_n; i++) old = m->pk_put[i] - m->pk_put[old] > (1u << 31) ? i : old;
    out[n_out] = m->pk[old];
    out_time[n_out++] = m->pk_time[old];
    mtp__cache_pk_remove(m, old);
  }
  unsigned i = m->pk_n++;
  m->pk[i] = p;
  m->pk_time[i] = now;
  m->pk_units[i] = (uint16_t)(usable >> MTP_UNIT_SHIFT);
  m->pk_put[i] = m->pk_seq++;
  m->pk_bytes += usable;
  mtp__cache_unlock(m);
  if (n_out == 0) return pool->purge_delay_ms > 0; /* purged once due */
  mtp__pool_lock(pool);
  for (unsigned k = 0; k < n_out; k++) mtp__packed_release_locked(pool, out[k], out_time[k]);
  return mtp__pool_unlock(pool);
}

/* Free the packed block p (head s seen as PACKED): kept in the thread's cache if it allocates from
 * the pool and the pool caches, else back to its span. */
static void packed_free(mtpi_desc_t *s, void *p, size_t size, bool sized) {
  mtpi_pool_t *pool = mtp__pool_of_page(s);
  mtpi_heap_t *h = mtp__thread_heap(mtp__tl_thread, pool->id);
  bool mine = h != NULL && mtp__member_pool(&h->m) == pool && !mtp__tl_exited;
  bool due;
  if (!mine || pool->purge_delay_ms == 0) {
    due = mtp__packed_free(p, size, sized);
  } else {
    const char *what = NULL;
    size_t usable = 0;
    int err = mtp__packed_claim(s, p, size, sized, &usable, &what);
    if (err) {
      mtp__error(err, what, p);
      return;
    }
    mtp__packed_mark_freed(p, usable);
    due = usable <= pool->thread_cache_bytes ? packed_put(pool, &h->m, p, usable)
                                             : mtp__packed_release(pool, p);
  }
  if (due) mtp__purger_wake();
}

void mtp__heap_medium_free(mtpi_desc_t *s, void *p, size_t size, bool sized) {
  if (s->kind == MTP_PAGE_PACKED) {
    packed_free(s, p, size, sized);
    return;
  }
  mtpi_pool_t *pool = mtp__pool_of_page(s);
  /* only a thread that allocates from the pool keeps them: no heap is made for a free */
  mtpi_heap_t *h = mtp__thread_heap(mtp__tl_thread, pool->id);
  bool mine = h != NULL && mtp__member_pool(&h->m) == pool && !mtp__tl_exited;
  bool due = mine ? medium_free(&h->m, s, p, size, sized) : mtp__medium_free(p, size, sized);
  if (due) mtp__purger_wake();
}

MTP_NOINLINE void mtp__heap_retire_local(mtpi_desc_t *s) {
  mtpi_heap_t *h = mtp__slab_heap(s);
  if (h->current[s->cls] == s) return;
  if (s->list == MTP_LIST_HEAP_PARTIAL) mtp__partial_remove(h, s);
  /* Cached slabs keep an odd token: a free into one by this thread is a double free. */
  mtp__store_relaxed(&s->owner, mtp__heap_token(h) | MTP_OWNER_CACHED); /* relaxed: a hint */
  int e = errno; /* frees leave errno alone (mtpool.h); a release may purge (madvise) */
  if (cache_put(mtp__pool_of_page(s), &h->m, s)) mtp__purger_wake();
  errno = e;
}
