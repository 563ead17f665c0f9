/* The slabs no thread owns: detached slabs with blocks in use, listed for adoption (the pool's
 * partial lists), and empty slabs kept formatted for their class (the pool's empty lists), until
 * the purge delay passes; and the step that hands a heap a slab: adopted, empty or fresh.
 * Every function here runs under the pool lock, or takes it. Layer: pool.
 *
 * Why empty slabs stay formatted for their class: threads that live briefly use a few blocks of
 * each of dozens of classes, a slab each. A slab returned to its region was formatted next for
 * whatever class asked first, and carving from its start faulted in only the OS pages that class
 * needed, on top of those earlier classes had left resident: each page in circulation drifted
 * towards whole residency and, reused within the purge delay, was never purged. Taken back by
 * its own class, a slab's resident part is what that class carves (bench/results/notes.md:
 * "Design: Empty slabs kept for their class"). A purge delay of 0 releases at once. */
#include "pool.h"

#include <errno.h>

#include "base/os.h"

/* ---- empty slabs ---- */

/* Keep the empty, unchecked slab s (no block handed out, none on its lists) for its class,
 * newest first. It is formatted again so that its state is that of a slab no one was ever given:
 * no owner, nothing on either list, its bump pointer at its start, so that any free into it (a
 * double free) fails the bump check and is reported. */
static void empty_put_locked(mtpi_pool_t *p, mtpi_desc_t *s, uint64_t since_ms) {
  MTP_ASSERT(s->kind == MTP_PAGE_SLAB && s->cls < MTP_NUM_CLASSES); /* p->empty's index */
  mtp__slab_format(s, s->cls, false);
  s->list = MTP_LIST_POOL_EMPTY;
  s->free_time_ms = since_ms;
  if (p->empty[s->cls] == NULL) p->empty_tail[s->cls] = &s->link;
  mtp__list_push(&p->empty[s->cls], &s->link);
  p->empty_bytes += (size_t)s->pages << MTP_PAGE_SHIFT;
  mtp__pool_note_free_pages(p); /* due to the purge one delay from now */
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
  mtpi_desc_t *s = mtp__desc_of_node(n);
  empty_remove_locked(p, s);
  return s;
}

/* Each list is walked from its tail, the slab listed first, and only while slabs are due, so a
 * pass costs nothing per slab kept. A heap's cache comes to the front with its older times
 * (mtp__pool_take_cache_locked), so a slab may wait behind a newer one: at most one purge delay
 * longer. Released with their own free times, so the same purge pass returns their pages. */
void mtp__pool_release_empty_locked(mtpi_pool_t *p, uint64_t cutoff) {
  if (p->empty_bytes == 0) return;
  for (unsigned c = 0; c < MTP_NUM_CLASSES; c++) {
    mtpi_node_t *it;
    while ((it = p->empty_tail[c]) != NULL && mtp__desc_of_node(it)->free_time_ms <= cutoff) {
      mtpi_desc_t *s = mtp__desc_of_node(it);
      empty_remove_locked(p, s);
      mtp__region_free_run(&p->rs, s, s->free_time_ms);
    }
  }
}

void mtp__pool_take_cache_locked(mtpi_pool_t *p, mtpi_member_t *m) {
  mtp__cache_lock(m);
  mtpi_node_t *n;
  while ((n = mtp__list_pop(&m->cache)) != NULL) {
    mtpi_desc_t *s = mtp__desc_of_node(n);
    m->cache_bytes -= (size_t)s->pages << MTP_PAGE_SHIFT;
    s->list = MTP_LIST_NONE;
    if (s->kind == MTP_PAGE_MEDIUM)
      mtp__pool_release_locked(p, s, s->free_time_ms); /* to its region */
    else
      empty_put_locked(p, s, s->free_time_ms);
  }
  for (; m->pk_n > 0; m->pk_n--) /* packed blocks to their spans */
    mtp__packed_release_locked(p, m->pk[m->pk_n - 1], m->pk_time[m->pk_n - 1]);
  m->pk_bytes = 0;
  mtp__cache_unlock(m);
}

/* ---- releasing and taking runs ---- */

void mtp__pool_release_locked(mtpi_pool_t *p, mtpi_desc_t *s, uint64_t now_ms) {
  /* a slab is kept for its class; a medium block's pages go straight back */
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
    (void)mtp__region_purge(&p->rs, now_ms, 0, false, false, NULL);
  else
    mtp__pool_note_free_pages(p);
}

/* Pool lock held: the range the last region take asked to fault in: its pages left resident are
 * noted for the purge; returned for the caller to populate outside the lock, or dropped. */
static void take_populate_locked(mtpi_pool_t *p, void **at, size_t *len) {
  if (mtp__region_take_populate(&p->rs, at, len)) mtp__pool_note_free_pages(p);
}

mtpi_desc_t *mtp__pool_run_locked(mtpi_pool_t *p, unsigned pages) {
  mtpi_desc_t *s = mtp__region_alloc_slab(&p->rs, pages, NULL, false, false, NULL);
  void *fault_at;
  size_t fault_len;
  take_populate_locked(p, &fault_at, &fault_len); /* not faulted in: checked mode */
  if (s == NULL) errno = ENOMEM;
  return s;
}

/* ---- detached slabs ---- */

static void partial_remove_locked(mtpi_pool_t *p, mtpi_desc_t *s) {
  mtp__list_remove(&p->partial[s->cls], &s->link);
  s->list = MTP_LIST_NONE;
}

void mtp__pool_list_detached_locked(mtpi_pool_t *p, mtpi_desc_t *s) {
  if (!mtp__slab_mark_listed(s)) return; /* adopted meanwhile, or listed already */
  s->list = MTP_LIST_POOL_PARTIAL;
  mtp__list_push(&p->partial[s->cls], &s->link);
}

/* Pool lock held: hand s, formatted for cls, to a heap. */
static void slab_give(mtpi_desc_t *s, void *heap, uintptr_t owner_token) {
  mtp__slab_set_heap(s, heap);
  mtp__store_relaxed(&s->owner, owner_token); /* relaxed: published by the pool unlock */
}

mtpi_desc_t *mtp__pool_slab_get(mtpi_pool_t *p, unsigned cls, void *heap, mtpi_member_t *m,
                                uintptr_t owner_token, uint32_t *collected, bool *due) {
  mtpi_desc_t *s;
  *collected = 0;
  mtp__pool_lock(p);
  MTP_VALIDATE(mtp__region_validate(&p->rs));
  mtpi_node_t *n;
  while ((n = p->partial[cls]) != NULL) {
    s = mtp__desc_of_node(n);
    partial_remove_locked(p, s);
    if (mtp__slab_adopt(s, heap, owner_token, true, collected)) {
      *due = mtp__pool_unlock(p);
      return s;
    }
  }
  s = empty_take_locked(p, cls);
  if (s != NULL) {
    if (s->cls != cls) mtp__slab_format(s, cls, false);
    slab_give(s, heap, owner_token);
    *due = mtp__pool_unlock(p);
    return s;
  }
  uint64_t bit = (uint64_t)1 << (cls % 64);
  bool grow = (m->classes_got[cls / 64] & bit) != 0 && !m->shared;
  m->classes_got[cls / 64] |= bit;
  /* Fault-in ahead only where every OS page will hold a block's start: the middle pages of a
   * bigger block may never be touched (bench/results/notes.md: "Design: Faulting in ahead"). */
  bool populate = mtp__class_size[cls] <= mtp__os_page_size();
  s = mtp__region_alloc_slab(&p->rs, mtp__class_pages[cls], m->shared ? NULL : &m->region_hint,
                             grow, populate, &p->lock);
  if (s != NULL) {
    mtp__slab_format(s, cls, false);
    slab_give(s, heap, owner_token);
  }
  void *fault_at;
  size_t fault_len;
  take_populate_locked(p, &fault_at, &fault_len);
  *due = mtp__pool_unlock(p);
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
  mtp__pool_unlock_quiet(p); /* an adoption frees no page */
  return adopted;
}

bool mtp__pool_detached_news(const mtpi_remote_seen_t *seen, mtpi_desc_t *s) {
  mtpi_pool_t *p = MTP_CONTAINER(seen->set, mtpi_pool_t, rs);
  mtp__pool_lock(p);
  /* Between the push and this lock other frees may have emptied s, and its release and a purge
   * unmapped its region (regions change only under this lock). No unmap since the push: s is
   * there. Else s is read only if its region is still one of ours (unmapped and mapped again at
   * the same address: s is whatever it is now, and is handled as such under the lock). */
  if (mtp__u64_load_relaxed(&p->rs.unmaps) != seen->unmaps && !mtp__region_listed(&p->rs, mtp__region_of_desc(s)))
    return mtp__pool_unlock(p);
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
  return mtp__pool_unlock(p);
}
