/* The one intrusive doubly linked list of the core: a NULL-terminated list whose head is a single
 * pointer (so arrays of heads stay one word each), linked through an mtpi_node_t inside the
 * record. Not thread-safe: each list's owner (a thread, or a lock) is stated where the head lives.
 * Layer: base. */
#ifndef MTP_LIST_H
#define MTP_LIST_H

#include <stddef.h>

typedef struct mtpi_node {
  struct mtpi_node *next, *prev;
} mtpi_node_t;

static inline void mtp__list_push(mtpi_node_t **head, mtpi_node_t *n) {
  n->prev = NULL;
  n->next = *head;
  if (n->next) n->next->prev = n;
  *head = n;
}

/* Appends at the end (walks the list: for short lists, or rare moves). */
static inline void mtp__list_push_back(mtpi_node_t **head, mtpi_node_t *n) {
  mtpi_node_t **pp = head, *last = NULL;
  while (*pp) {
    last = *pp;
    pp = &last->next;
  }
  n->prev = last;
  n->next = NULL;
  *pp = n;
}

static inline void mtp__list_remove(mtpi_node_t **head, mtpi_node_t *n) {
  if (n->prev)
    n->prev->next = n->next;
  else
    *head = n->next;
  if (n->next) n->next->prev = n->prev;
  n->next = n->prev = NULL;
}

/* Removes and returns the first node, or NULL. */
static inline mtpi_node_t *mtp__list_pop(mtpi_node_t **head) {
  mtpi_node_t *n = *head;
  if (n) mtp__list_remove(head, n);
  return n;
}

static inline mtpi_node_t *mtp__list_last(mtpi_node_t *head) {
  if (head == NULL) return NULL;
  while (head->next) head = head->next;
  return head;
}

/* A queue: the same nodes, walked from the head by `next` as a list, but the head's `prev` names
 * the last node (its own, when it is alone), so that appending costs no walk. Only the queue
 * functions below may change one (mtp__list_remove would take the head's `prev` for a node). */
static inline void mtp__queue_push_back(mtpi_node_t **head, mtpi_node_t *n) {
  mtpi_node_t *first = *head;
  n->next = NULL;
  if (first == NULL) {
    n->prev = n;
    *head = n;
    return;
  }
  mtpi_node_t *last = first->prev;
  last->next = n;
  n->prev = last;
  first->prev = n;
}

static inline void mtp__queue_remove(mtpi_node_t **head, mtpi_node_t *n) {
  mtpi_node_t *first = *head;
  if (n == first) {
    *head = n->next;
    if (n->next) n->next->prev = n->prev; /* the new head names the last */
  } else {
    n->prev->next = n->next;
    if (n->next)
      n->next->prev = n->prev;
    else
      first->prev = n->prev; /* n was the last */
  }
  n->next = n->prev = NULL;
}

/* n, on no list, takes old's place in the queue and old leaves it: no walk, the length and the
 * order of the others unchanged. */
static inline void mtp__queue_replace(mtpi_node_t **head, mtpi_node_t *old, mtpi_node_t *n) {
  mtpi_node_t *first = *head;
  n->next = old->next;
  if (old == first) {
    *head = n;
    n->prev = old->prev == old ? n : old->prev; /* the head names the last: n itself if alone */
  } else {
    old->prev->next = n;
    n->prev = old->prev;
  }
  if (old->next)
    old->next->prev = n;
  else if (old != first)
    first->prev = n; /* old was the last */
  old->next = old->prev = NULL;
}

#endif
