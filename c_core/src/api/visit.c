/* The heap walk (mtp_pool_visit) and the leak report at exit (MTPOOL_SHOW_LEAKS=1).
 *
 * A slab's live blocks are the blocks below its bump pointer that are on neither of its free
 * lists. Under the pool lock no slab is formatted, released or listed; what may still change is
 * what the slab's owner thread does without the lock: pop and push its own free list, and other
 * threads' pushes onto the remote list (CAS). So the walk is exact for checked slabs (their bitmap
 * is under the pool lock), for detached slabs (nobody pops; remote pushes are read with acquire)
 * and for slabs the calling thread owns; for a slab another thread owns, the owner's list is read
 * racily (MTP_NO_TSAN, as statistics do): every link is bounds-checked against the slab before it
 * is followed, so the walk stays inside the slab's memory and ends; a block popped or pushed by
 * the owner during the walk may be reported either way. Empty slabs in a heap's cache are skipped
 * (their owner re-formats them without the lock). Blocks a thread freed into its exhausted slabs
 * and lists for reuse (heap/reuse.c) are freed though their slabs count them as used: they
 * are gathered once under the lock, the same way (mtp__heap_listed checks each link), into pages
 * mapped for the walk; should that map fail, they are reported as live. Layer: api. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/os.h"
#include "checked/checked.h"
#include "heap/heap.h"

/* a bit per block: the most blocks a slab holds is below 2^14 (size_class.c) */
#define MAX_BLOCKS (1u << 14)

/* Mark the blocks of list that lie in [start, bump) on a block boundary; stop at the first link
 * that does not (an owner's concurrent pop, or a corrupted link). */
MTP_NO_TSAN static void mark_list(const mtpi_desc_t *s, char *start, char *bump, uint32_t bs,
                                  mtpi_block_t *list, uint8_t *seen) {
  for (uint32_t n = 0; list != NULL && n < s->capacity; n++) {
    char *b = (char *)list;
    if (b < start || b >= bump || (size_t)(b - start) % bs != 0) return;
    size_t i = (size_t)(b - start) / bs;
    seen[i / 8] |= (uint8_t)(1u << (i % 8));
    list = mtp__block_next(list);
  }
}

/* Blocks that threads freed and list for reuse (heap/reuse.c), which their
 * slabs count as used: gathered before the walk (pool lock held), to be marked free with the
 * slab's lists. */
typedef struct {
  void **at;
  size_t n, cap;
} listed_t;

static void listed_gather(mtpi_pool_t *pool, listed_t *l) {
  l->n = l->cap = 0;
  l->at = NULL;
  for (mtpi_node_t *it = pool->members; it; it = it->next)
    l->cap += mtp__heap_listed(MTP_CONTAINER(it, mtpi_member_t, link), &pool->rs, NULL, NULL, 0);
  if (l->cap == 0) return;
  /* no malloc here: mtpool may be the process's malloc, and the pool lock is held */
  size_t page = mtp__os_page_size(); /* whole pages: as many entries as they hold */
  l->cap = (l->cap * sizeof(void *) + page - 1) / page * page / sizeof(void *);
  l->at = mtp__os_map(l->cap * sizeof(void *), 0);
  if (l->at == NULL) {
    l->cap = 0;
    return;
  }
  for (mtpi_node_t *it = pool->members; it && l->n < l->cap; it = it->next)
    l->n += mtp__heap_listed(MTP_CONTAINER(it, mtpi_member_t, link), &pool->rs, NULL, l->at + l->n,
                             l->cap - l->n);
}

static void listed_mark(const listed_t *l, char *start, char *bump, uint32_t bs, uint8_t *seen) {
  for (size_t k = 0; k < l->n; k++) {
    char *b = l->at[k];
    if (b >= start && b < bump && (size_t)(b - start) % bs == 0) {
      size_t i = (size_t)(b - start) / bs;
      seen[i / 8] |= (uint8_t)(1u << (i % 8));
    }
  }
}

/* The heap walk's visitor, for a packed span's blocks (shown as large blocks, as medium ones). */
typedef struct {
  mtp_visit_fn visit;
  void *arg;
} packed_visit_t;
static int packed_visit(void *arg, void *p, size_t usable) {
  packed_visit_t *v = arg;
  return v->visit(v->arg, p, usable, MTP_VISIT_LARGE);
}

/* Pool lock held. Visit the live blocks of slab s (or the medium block or packed span s), a block
 * of a class from `shown` on as MTP_VISIT_LARGE; nonzero: visit's stop value. */
MTP_NO_TSAN static int visit_slab(mtpi_desc_t *s, const listed_t *listed, mtp_visit_fn visit,
                                  void *arg, unsigned shown) {
  uint8_t kind = *(volatile uint8_t *)&s->kind;
  /* a medium block's kind and pages change only under the pool lock; a freed one may wait in its
   * freeing thread's cache (`freed`: a snapshot while that thread runs) */
  if (kind == MTP_PAGE_MEDIUM)
    return mtp__load_relaxed(&s->freed) == MTP_MEDIUM_FREED
               ? 0
               : visit(arg, mtp__page_start(s), mtp__medium_usable(s), MTP_VISIT_LARGE);
  if (kind == MTP_PAGE_PACKED) { /* blocks freed into a thread's cache are skipped */
    packed_visit_t v = {visit, arg};
    return mtp__packed_each(s, packed_visit, &v);
  }
  if (kind != MTP_PAGE_SLAB || s->list == MTP_LIST_HEAP_CACHE || s->list == MTP_LIST_POOL_EMPTY)
    return 0;
  uint32_t bs = s->block_size, cap = s->capacity;
  if (s->cls >= MTP_NUM_CLASSES || bs == 0 || cap > MAX_BLOCKS) return 0;
  unsigned cls = s->cls < shown ? s->cls : MTP_VISIT_LARGE;
  char *start = mtp__page_start(s), *bump = mtp__slab_bump(s);
  if (bump < start || bump > s->end) return 0;
  uint32_t carved = (uint32_t)((size_t)(bump - start) / bs);
  if (s->checked) {
    for (uint32_t i = 0; i < carved; i++)
      if (s->check_bits[i / 8] >> (i % 8) & 1) {
        size_t usable;
        void *u = mtp__checked_user(s, start + (size_t)i * bs, &usable);
        int rc = visit(arg, u, usable, cls);
        if (rc) return rc;
      }
    return 0;
  }
  uint8_t seen[MAX_BLOCKS / 8];
  memset(seen, 0, (carved + 7) / 8);
  /* the owner's list: a racy read unless the caller owns s or s is detached (see above) */
  mark_list(s, start, bump, bs, *(mtpi_block_t *volatile *)&s->free, seen);
  /* acquire: the pushers' links are visible (as for the owner's collect) */
  mark_list(s, start, bump, bs, MTP_TF_PTR(mtp__load_acquire(&s->thread_free)), seen);
  listed_mark(listed, start, bump, bs, seen);
  for (uint32_t i = 0; i < carved; i++)
    if (!(seen[i / 8] >> (i % 8) & 1)) {
      int rc = visit(arg, start + (size_t)i * bs, bs, cls);
      if (rc) return rc;
    }
  return 0;
}

/* The walk, every class shown as itself below `shown`. */
static int pool_walk(mtpi_pool_t *pool, mtp_visit_fn visit, void *arg, unsigned shown) {
  int rc = 0;
  listed_t listed;
  mtp__pool_lock(pool);
  listed_gather(pool, &listed);
  for (mtpi_region_t *r = mtp__region_from_node(pool->rs.regions); r && !rc;
       r = mtp__region_from_node(r->h.link.next))
    for (unsigned i = MTP_REGION_FIRST_PAGE; i < MTP_PAGES_PER_REGION && !rc; i++)
      rc = visit_slab(&r->pages[i], &listed, visit, arg, shown);
  mtp__pool_unlock_quiet(pool); /* a read frees no page */
  if (listed.at != NULL) mtp__os_unmap(listed.at, listed.cap * sizeof(void *));
  if (rc) return rc;
  pthread_mutex_lock(&mtp__large_lock);
  for (mtpi_node_t *it = pool->large; it && !rc; it = it->next) {
    mtpi_large_t *rec = MTP_CONTAINER(it, mtpi_large_t, link);
    size_t usable = pool->check ? rec->size
                                : rec->map_size - (size_t)((char *)rec->ptr - (char *)rec->map);
    rc = visit(arg, rec->ptr, usable, MTP_VISIT_LARGE);
  }
  pthread_mutex_unlock(&mtp__large_lock);
  return rc;
}

/* The public walk's class is an index into mtp_stats_t.classes (the header's contract), so a
 * block of a class beyond that array is shown as MTP_VISIT_LARGE. */
int mtp_pool_visit(mtp_pool_t *pool, mtp_visit_fn visit, void *arg) {
  if (visit == NULL) return EINVAL;
  return pool_walk(pool ? mtp__pool_in(pool) : mtp__default(), visit, arg, MTP_STATS_MAX_CLASSES);
}

/* ---- MTPOOL_SHOW_LEAKS ---- */

#define LEAK_ADDRS 3
typedef struct leak_class {
  size_t count, bytes;
  void *addr[LEAK_ADDRS];
} leak_class_t;
/* one pool's tally, filled by the visitor (which may not allocate: it runs under the locks) */
static leak_class_t leak_tally[MTP_NUM_CLASSES + 1];

static int leak_visit(void *arg, void *block, size_t usable, unsigned cls) {
  (void)arg;
  leak_class_t *c = &leak_tally[cls == MTP_VISIT_LARGE ? MTP_NUM_CLASSES : cls];
  if (c->count < LEAK_ADDRS) c->addr[c->count] = block;
  c->count++;
  c->bytes += usable;
  return 0;
}

static void leak_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void leak_line(const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n >= sizeof(buf)) n = sizeof(buf) - 1;
  ssize_t w = write(2, buf, (size_t)n); /* stderr, unbuffered, without stdio's allocations */
  (void)w;
}

static void leak_report_pool(mtpi_pool_t *p) {
  memset(leak_tally, 0, sizeof(leak_tally));
  (void)pool_walk(p, leak_visit, NULL, MTP_NUM_CLASSES);
  size_t count = 0, bytes = 0;
  for (unsigned c = 0; c <= MTP_NUM_CLASSES; c++) {
    count += leak_tally[c].count;
    bytes += leak_tally[c].bytes;
  }
  char name[4 * sizeof(p->name) + 1];
  mtp__text_escape(name, sizeof(name), p->name);
  leak_line("mtpool: leaks: pool \"%s\": %zu blocks, %zu bytes still in use at exit\n", name,
            count, bytes);
  for (unsigned c = 0; c <= MTP_NUM_CLASSES; c++) {
    leak_class_t *lc = &leak_tally[c];
    if (lc->count == 0) continue;
    char addrs[3 * 24] = "";
    size_t n = 0;
    for (unsigned i = 0; i < LEAK_ADDRS && i < lc->count; i++)
      n += (size_t)snprintf(addrs + n, sizeof(addrs) - n, " %p", lc->addr[i]);
    if (c == MTP_NUM_CLASSES)
      leak_line("mtpool: leaks:   large: %zu blocks, %zu bytes:%s%s\n", lc->count, lc->bytes,
                addrs, lc->count > LEAK_ADDRS ? " ..." : "");
    else
      leak_line("mtpool: leaks:   class %u (%u B): %zu blocks, %zu bytes:%s%s\n", c,
                (unsigned)mtp__class_size[c], lc->count, lc->bytes, addrs,
                lc->count > LEAK_ADDRS ? " ..." : "");
  }
}

/* At exit, with MTPOOL_SHOW_LEAKS set (and not "0"): every live pool's blocks still in use. */
__attribute__((destructor)) static void leak_report(void) {
  const char *v = getenv("MTPOOL_SHOW_LEAKS");
  if (v == NULL || *v == 0 || strcmp(v, "0") == 0) return;
  for (uint32_t id = 0; id < MTP_MAX_POOLS; id++) {
    pthread_mutex_lock(&mtp__registry_lock);
    mtpi_pool_t *p = mtp__pool_by_id(id);
    /* registry lock held across the walk: the pool cannot be destroyed meanwhile */
    if (p != NULL) leak_report_pool(p);
    pthread_mutex_unlock(&mtp__registry_lock);
  }
}
