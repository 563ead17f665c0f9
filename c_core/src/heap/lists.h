/* A heap's own slab lists (partial, full) and the owner marks that go with them: only the owner
 * thread touches them, without a lock. Both lists are queues (list.h): a slab joins at the back;
 * the slow path takes the partial list's front, the slab that has waited longest and so gathered
 * the most frees, and lets go the full list's front, its oldest. Layer: heap (inside the room). */
#ifndef MTP_HEAP_LISTS_H
#define MTP_HEAP_LISTS_H

#include "heap.h"

#pragma GCC visibility push(hidden)

#define MTP_FULL_UNBOUNDED UINT8_MAX /* full_limit: every exhausted slab kept, none counted */

/* The thread's ownership token: its record's address. */
static inline uintptr_t mtp__heap_token(const mtpi_heap_t *h) { return (uintptr_t)h->thread; }

static inline void mtp__hlist_push(mtpi_node_t **head, mtpi_desc_t *s, uint8_t list) {
  s->list = list;
  mtp__queue_push_back(head, &s->link);
}
static inline void mtp__hlist_remove(mtpi_node_t **head, mtpi_desc_t *s) {
  mtp__queue_remove(head, &s->link);
  s->list = MTP_LIST_NONE;
}
static inline void mtp__partial_push(mtpi_heap_t *h, mtpi_desc_t *s) {
  mtp__hlist_push(&h->partial[s->cls], s, MTP_LIST_HEAP_PARTIAL);
}
static inline void mtp__partial_remove(mtpi_heap_t *h, mtpi_desc_t *s) {
  mtp__hlist_remove(&h->partial[s->cls], s);
}
/* s leaves the full list; its owner word loses the FULL mark. */
static inline void mtp__full_remove(mtpi_heap_t *h, mtpi_desc_t *s) {
  mtp__hlist_remove(&h->full[s->cls], s);
  if (h->full_limit[s->cls] != MTP_FULL_UNBOUNDED) h->full_count[s->cls]--;
  mtp__store_relaxed(&s->owner, mtp__heap_token(h)); /* relaxed: a hint to other threads (types.h) */
}
/* s, the current slab, leaves the slot exhausted: its owner word sends frees into it to the slow
 * path. The caller puts it on the full list. */
static inline void mtp__mark_full(mtpi_heap_t *h, mtpi_desc_t *s) {
  s->used &= ~MTP_USED_CURRENT;
  mtp__store_relaxed(&s->owner, mtp__heap_token(h) | MTP_OWNER_FULL); /* relaxed: a hint */
}

#pragma GCC visibility pop

#endif
