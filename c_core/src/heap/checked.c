/* Checked mode: every allocation and free of a checked pool runs under the pool lock, with an
 * allocation bitmap per slab. A block of a checked pool holds
 *   [front guard, 16 bytes][user bytes][canary, 4 bytes at least][u32 footer]
 * (no front guard for an alignment above 16: the user's address is then the block's); the footer
 * holds the requested size and, in its top bit, whether there is a front guard. Guard and canary
 * bytes are checked at free. A freed block is filled with a pattern and QUARANTINED: held back
 * from reuse (a ring per pool, bounded in blocks and bytes) until newer frees push it out, when
 * its pattern is verified and it goes onto its slab's free list; the pattern is verified again
 * when the block is reused, at trim, at destroy and at exit (so a late write is reported even if
 * the block never leaves the quarantine).
 * Found here: double free, foreign and interior pointers, a wrong size to a sized free, writes
 * past the requested size or before the block (underflow), writes to a freed block. A front end
 * beside the heaps: it calls the pool layer (lock, runs, release, large blocks) and the slab
 * layer. Layer: heap. */
#include <errno.h>
#include <string.h>

#include "base/os.h"
#include "heap.h"

#define FOOTER 4        /* u32 requested size at the block's end, FRONTED in its top bit */
#define MIN_CANARY 4
#define FRONT 16        /* the front guard: keeps the user's address 16-aligned */
#define FRONTED 0x80000000u
#define CANARY 0xCA
#define FREED 0xDF
/* The quarantine's bounds: whichever is reached first pushes out the oldest block. */
#define MTP_QUARANTINE_SLOTS 1024
#define QUARANTINE_BYTES ((size_t)1 << 20)

static bool bit_get(const uint8_t *bits, uint32_t i) { return bits[i >> 3] >> (i & 7) & 1; }
static void bit_set(uint8_t *bits, uint32_t i) { bits[i >> 3] |= (uint8_t)(1u << (i & 7)); }
static void bit_clear(uint8_t *bits, uint32_t i) { bits[i >> 3] &= (uint8_t)~(1u << (i & 7)); }

static uint32_t *footer(mtpi_desc_t *s, void *b) {
  return (uint32_t *)((char *)b + s->block_size - FOOTER);
}

/* A free-list link read from a freed block is trusted only if it names a free block of the same
 * slab: a write into a freed block's first word must not send the allocator astray. */
static bool link_ok(mtpi_desc_t *s, mtpi_block_t *n) {
  if (n == NULL) return true;
  char *start = mtp__page_start(s), *b = (char *)n;
  if (b < start || b >= mtp__slab_bump(s) || (size_t)(b - start) % s->block_size != 0) return false;
  return !bit_get(s->check_bits, (uint32_t)((size_t)(b - start) / s->block_size));
}

/* from: 0 for a quarantined block, sizeof(mtpi_block_t) for one on a free list (its link word);
 * the footer keeps the freed block's size and front flag, so that a report names the address
 * the user held */
static bool pattern_from_ok(mtpi_desc_t *s, const char *b, size_t from) {
  const uint64_t word = 0x0101010101010101ull * FREED;
  size_t end = s->block_size - FOOTER, i = from;
  for (; i + 8 <= end; i += 8) { /* a word at a time (blocks are 8-aligned; from is 0 or 8) */
    uint64_t w;
    memcpy(&w, b + i, 8);
    if (w != word) return false;
  }
  for (; i < end; i++)
    if ((unsigned char)b[i] != FREED) return false;
  return true;
}
/* The address the user held for block b (live or freed: the footer is kept at free). */
static char *user_of(mtpi_desc_t *s, char *b) { return b + ((*footer(s, b) & FRONTED) ? FRONT : 0); }
static bool pattern_ok(mtpi_desc_t *s, const char *b) {
  return pattern_from_ok(s, b, sizeof(mtpi_block_t));
}

/* Pool lock held. A checked slab of class cls with blocks on its free list, or NULL. */
static mtpi_desc_t *slab_with_free(mtpi_pool_t *pool, unsigned cls) {
  for (mtpi_region_t *r = mtp__region_from_node(pool->rs.regions); r;
       r = mtp__region_from_node(r->h.link.next))
    for (unsigned i = MTP_REGION_FIRST_PAGE; i < MTP_PAGES_PER_REGION; i++) {
      mtpi_desc_t *s = &r->pages[i];
      if (s->kind == MTP_PAGE_SLAB && s->checked && s->cls == cls && s->free != NULL) return s;
    }
  return NULL;
}

/* Pool lock held. A block of class cls, or NULL (ENOMEM). */
static void *take_block(mtpi_pool_t *pool, unsigned cls) {
  for (;;) {
    mtpi_desc_t *s = pool->checked_current[cls];
    if (s == NULL || (s->free == NULL && mtp__slab_bump(s) >= s->end)) {
      /* Blocks that left the quarantine went onto their own slab's free list: reuse a slab of
       * this class that has some before taking new pages */
      s = slab_with_free(pool, cls);
      if (s != NULL) {
        pool->checked_current[cls] = s;
        continue;
      }
      s = mtp__pool_run_locked(pool, mtp__class_pages[cls]);
      if (s == NULL) return NULL;
      mtp__slab_format(s, cls, true);
      s->check_bits = mtp__meta_alloc((s->capacity + 7) / 8);
      if (s->check_bits == NULL) {
        mtp__pool_release_locked(pool, s, mtp__os_now_ms());
        return NULL;
      }
      pool->checked_current[cls] = s;
    }
    char *b;
    if (s->free != NULL) {
      mtpi_block_t *blk = s->free, *next = mtp__block_next(blk);
      mtp__track_alloc(blk, s->block_size);
      mtp__track_defined(blk, s->block_size); /* the fill pattern is read below */
      b = (char *)blk;
      bool linked = link_ok(s, next), intact = linked && pattern_ok(s, b);
      /* a broken link loses the rest of this slab's free list: those blocks are never reused */
      s->free = linked ? next : NULL;
      if (!intact) {
        /* Keep the block out of circulation (bit stays clear, so freeing it is reported). */
        if (mtp__pool_unlock(pool)) mtp__purger_wake();
        mtp__error(MTP_ERR_USE_AFTER_FREE, "use after free (a freed block was written to)",
                   user_of(s, b));
        mtp__pool_lock(pool);
        continue;
      }
    } else {
      b = mtp__slab_bump(s);
      mtp__slab_set_bump(s, b + s->block_size); /* pool lock: the owner */
      mtp__track_alloc(b, s->block_size);
    }
    bit_set(s->check_bits, (uint32_t)((b - mtp__page_start(s)) / s->block_size));
    s->used++;
    return b;
  }
}

static void *quarantine_step(mtpi_pool_t *pool);

void *mtp__checked_alloc(mtpi_pool_t *pool, size_t size, size_t alignment) {
  size_t front = alignment <= FRONT ? FRONT : 0;
  size_t need = size + FOOTER + MIN_CANARY + front;
  if (need < size) {
    errno = ENOMEM;
    return NULL;
  }
  size_t natural = size >= 16 ? 16 : (size_t)1 << __builtin_ctzll(size | 16);
  size_t align = alignment > natural ? alignment : natural;
  unsigned cls = need <= MTP_MAX_SMALL ? mtp__class_aligned(need, align) : MTP_NUM_CLASSES;
  if (cls >= MTP_NUM_CLASSES) return mtp__large_alloc(pool, size, alignment);
  mtp__pool_lock(pool);
  void *bad = pool->quarantine ? quarantine_step(pool) : NULL;
  char *b = take_block(pool, cls);
  if (b != NULL) {
    mtpi_desc_t *s = mtp__run_of((uintptr_t)b);
    memset(b, CANARY, front);
    memset(b + front + size, CANARY, s->block_size - FOOTER - front - size);
    *footer(s, b) = (uint32_t)size | (front ? FRONTED : 0);
    pool->checked_allocs++;
  }
  if (mtp__pool_unlock(pool)) mtp__purger_wake();
  if (bad) mtp__error(MTP_ERR_USE_AFTER_FREE, "use after free (a freed block was written to)", bad);
  if (b == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  return b + front;
}

/* Pool lock held. The block that the user's p is the start of, or NULL: p must be a block start
 * with no front guard, or 16 bytes into one with a front guard (the footer says which). *bad_alloc
 * is set when p is placed right but the block is not allocated. */
static char *block_of(mtpi_desc_t *s, char *p, bool *not_allocated) {
  *not_allocated = false;
  if (s->kind != MTP_PAGE_SLAB || !s->checked) return NULL;
  char *start = mtp__page_start(s);
  if (p < start || p >= s->end) return NULL;
  size_t off = (size_t)(p - start), r = off % s->block_size;
  if (r != 0 && r != FRONT) return NULL;
  char *b = p - r;
  if (b >= mtp__slab_bump(s)) return NULL;
  if (!bit_get(s->check_bits, (uint32_t)((size_t)(b - start) / s->block_size))) {
    *not_allocated = true;
    return NULL;
  }
  bool fronted = (*footer(s, b) & FRONTED) != 0;
  if (fronted != (r == FRONT)) return NULL;
  return b;
}

/* ---- the quarantine (pool lock held) ---- */

static bool quarantine_ready(mtpi_pool_t *pool) {
  if (pool->quarantine == NULL)
    pool->quarantine = mtp__meta_alloc(MTP_QUARANTINE_SLOTS * sizeof(void *));
  return pool->quarantine != NULL;
}

/* A block leaves the quarantine: verify its pattern and put it on its slab's free list. Returns
 * the block if it was written to while quarantined (kept out of circulation; the caller reports
 * it), else NULL. */
static void *unquarantine(mtpi_desc_t *s, char *b) {
  mtp__track_peek(b, s->block_size);
  bool ok = pattern_from_ok(s, b, 0);
  mtp__track_unpeek(b, s->block_size);
  if (!ok) return user_of(s, b);
  mtp__block_set_next((mtpi_block_t *)b, s->free);
  s->free = (mtpi_block_t *)b;
  return NULL;
}

/* Push the oldest block out of the quarantine; returns a block written to while there, or NULL. */
static void *quarantine_pop(mtpi_pool_t *pool) {
  char *b = pool->quarantine[pool->q_head];
  pool->q_head = (pool->q_head + 1) % MTP_QUARANTINE_SLOTS;
  pool->q_count--;
  mtpi_desc_t *s = mtp__run_of((uintptr_t)b);
  pool->q_bytes -= s->block_size;
  return unquarantine(s, b);
}

/* Before slab s is released: take its blocks out of the quarantine (the ring keeps its order);
 * returns a block of s written to while quarantined, or NULL. */
static void *quarantine_drop_slab(mtpi_pool_t *pool, mtpi_desc_t *s) {
  void *bad = NULL;
  uint32_t n = pool->q_count, kept = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t at = (pool->q_head + i) % MTP_QUARANTINE_SLOTS;
    char *b = pool->quarantine[at];
    if (mtp__run_of((uintptr_t)b) == s) {
      mtp__track_peek(b, s->block_size);
      if (!pattern_from_ok(s, b, 0) && bad == NULL) bad = user_of(s, b);
      mtp__track_unpeek(b, s->block_size);
      pool->q_bytes -= s->block_size;
      continue;
    }
    pool->quarantine[(pool->q_head + kept) % MTP_QUARANTINE_SLOTS] = b;
    kept++;
  }
  pool->q_count = kept;
  return bad;
}

/* Pool lock held: verify the quarantined block at ring index i (from the head). A block that was
 * written to is taken out of the ring (so it is reported once and never reused) and its user
 * address returned; NULL if its pattern is intact. */
static void *quarantine_check(mtpi_pool_t *pool, uint32_t i) {
  char *b = pool->quarantine[(pool->q_head + i) % MTP_QUARANTINE_SLOTS];
  mtpi_desc_t *s = mtp__run_of((uintptr_t)b);
  mtp__track_peek(b, s->block_size);
  bool ok = pattern_from_ok(s, b, 0);
  mtp__track_unpeek(b, s->block_size);
  if (ok) return NULL;
  /* close the gap: later entries move one slot towards the head */
  for (uint32_t j = i; j + 1 < pool->q_count; j++)
    pool->quarantine[(pool->q_head + j) % MTP_QUARANTINE_SLOTS] =
        pool->quarantine[(pool->q_head + j + 1) % MTP_QUARANTINE_SLOTS];
  pool->q_count--;
  pool->q_bytes -= s->block_size;
  return user_of(s, b);
}

/* Pool lock held: the first quarantined block that was written to (out of the ring), or NULL. */
static void *quarantine_find_corrupt(mtpi_pool_t *pool) {
  for (uint32_t i = 0; i < pool->q_count; i++) {
    void *u = quarantine_check(pool, i);
    if (u != NULL) return u;
  }
  return NULL;
}

/* Pool lock held, at each checked allocation: verify the next two quarantined blocks (a cursor
 * goes round the ring), so that a write into a quarantined block is reported within a few
 * allocations even if no free pushes it out. Returns such a block (out of the ring), or NULL. */
static void *quarantine_step(mtpi_pool_t *pool) {
  for (int k = 0; k < 2 && pool->q_count > 0; k++) {
    void *u = quarantine_check(pool, pool->q_scan++ % pool->q_count);
    if (u != NULL) return u;
  }
  return NULL;
}

void mtp__checked_forget(mtpi_pool_t *pool) {
  if (pool->quarantine == NULL) return;
  mtp__meta_free(pool->quarantine, MTP_QUARANTINE_SLOTS * sizeof(void *));
  pool->quarantine = NULL;
  pool->q_count = 0;
  pool->q_bytes = 0;
}

void mtp__checked_free(mtpi_desc_t *s, void *p, size_t size, bool sized) {
  mtpi_pool_t *pool = mtp__pool_of_page(s);
  int err = 0;
  const char *what = NULL;
  mtp__pool_lock(pool);
  bool not_allocated;
  char *b = block_of(s, p, &not_allocated);
  if (b == NULL && not_allocated) {
    err = MTP_ERR_DOUBLE_FREE;
    what = "double free (the block is not allocated)";
  } else if (b == NULL) {
    err = MTP_ERR_INVALID_POINTER;
    what = "invalid pointer (not the start of a block)";
  } else {
    uint32_t f = *footer(s, b), req = f & ~FRONTED;
    size_t front = (f & FRONTED) ? FRONT : 0;
    if (sized && size != req) {
      err = MTP_ERR_WRONG_SIZE;
      what = "wrong size (differs from the size requested)";
    } else {
      for (size_t i = 0; i < front; i++)
        if ((unsigned char)b[i] != CANARY) {
          err = MTP_ERR_OVERFLOW;
          what = "buffer overflow (bytes before the start of the block were written: an underflow)";
          break;
        }
      for (size_t i = front + req; !err && i < s->block_size - FOOTER; i++)
        if ((unsigned char)b[i] != CANARY) {
          err = MTP_ERR_OVERFLOW;
          what = "buffer overflow (bytes past the requested size were written)";
          break;
        }
    }
  }
  if (err) {
    if (mtp__pool_unlock(pool)) mtp__purger_wake();
    mtp__error(err, what, p);
    return;
  }
  s = mtp__run_of((uintptr_t)b);
  uint32_t idx = (uint32_t)((size_t)(b - mtp__page_start(s)) / s->block_size);
  bit_clear(s->check_bits, idx);
  memset(b, FREED, s->block_size - FOOTER);
  mtp__track_free(b, s->block_size);
  void *bad = NULL;
  if (quarantine_ready(pool)) {
    while (pool->q_count > 0 && (pool->q_count >= MTP_QUARANTINE_SLOTS ||
                                 pool->q_bytes + s->block_size > QUARANTINE_BYTES)) {
      void *w = quarantine_pop(pool);
      if (bad == NULL) bad = w;
    }
    pool->quarantine[(pool->q_head + pool->q_count) % MTP_QUARANTINE_SLOTS] = b;
    pool->q_count++;
    pool->q_bytes += s->block_size;
  } else { /* no record for the ring: straight onto the free list */
    mtp__block_set_next((mtpi_block_t *)b, s->free);
    s->free = (mtpi_block_t *)b;
  }
  if (--s->used == 0 && pool->checked_current[s->cls] != s) {
    void *w = pool->quarantine ? quarantine_drop_slab(pool, s) : NULL;
    if (bad == NULL) bad = w;
    mtp__pool_release_locked(pool, s, mtp__os_now_ms());
  }
  if (mtp__pool_unlock(pool)) mtp__purger_wake();
  if (bad) mtp__error(MTP_ERR_USE_AFTER_FREE, "use after free (a freed block was written to)", bad);
}

bool mtp__checked_lookup(mtpi_desc_t *s, const void *p, size_t *usable) {
  mtpi_pool_t *pool = mtp__pool_of_page(s);
  mtp__pool_lock(pool);
  bool not_allocated;
  char *b = block_of(s, (char *)p, &not_allocated);
  if (b != NULL) *usable = *footer(s, b) & ~FRONTED;
  if (mtp__pool_unlock(pool)) mtp__purger_wake();
  return b != NULL;
}

void *mtp__checked_user(mtpi_desc_t *s, void *b, size_t *usable) {
  uint32_t f = *footer(s, b);
  *usable = f & ~FRONTED;
  return (char *)b + ((f & FRONTED) ? FRONT : 0);
}

/* Pool lock held. The first freed block of a checked pool that was written to, or NULL. Run at
 * trim and destroy, so a late write into a freed block is reported even if it is never reused. */
static void *find_corrupt(mtpi_pool_t *pool) {
  for (mtpi_region_t *r = mtp__region_from_node(pool->rs.regions); r;
       r = mtp__region_from_node(r->h.link.next)) {
    for (unsigned i = MTP_REGION_FIRST_PAGE; i < MTP_PAGES_PER_REGION; i++) {
      mtpi_desc_t *s = &r->pages[i];
      if (s->kind != MTP_PAGE_SLAB || !s->checked) continue;
      mtpi_block_t *b = s->free, *prev = NULL;
      for (uint32_t n = 0; b != NULL && n < s->capacity; n++) {
        mtp__track_peek(b, s->block_size);
        mtpi_block_t *next = mtp__block_next(b);
        bool linked = link_ok(s, next), ok = linked && pattern_ok(s, (const char *)b);
        mtp__track_unpeek(b, s->block_size);
        if (!ok) { /* take it out of circulation, so it is reported once */
          if (!linked) next = NULL;
          if (prev)
            mtp__block_set_next(prev, next);
          else
            s->free = next;
          return user_of(s, (char *)b);
        }
        prev = b;
        b = next;
      }
    }
  }
  return NULL;
}

void mtp__checked_scan(mtpi_pool_t *pool) {
  if (!pool->check) return;
  mtp__pool_lock(pool);
  void *bad = quarantine_find_corrupt(pool);
  if (bad == NULL) bad = find_corrupt(pool);
  if (mtp__pool_unlock(pool)) mtp__purger_wake();
  if (bad) mtp__error(MTP_ERR_USE_AFTER_FREE, "use after free (a freed block was written to)", bad);
}

/* Registry lock held: is any live pool checked? */
static bool any_checked(void) {
  for (mtpi_node_t *it = mtp__pools; it; it = it->next)
    if (mtp__pool_from_reg(it)->check) return true;
  return false;
}

/* At exit: every checked pool's freed blocks are verified once more, so that a write into a
 * freed block still in the quarantine is reported. A process with no checked pool (the usual
 * case) walks only its live pools: not the 1024 ids' table, whose 8 KiB a short process would
 * otherwise fault in at exit, with 1024 lock round trips. */
__attribute__((destructor)) static void checked_exit_scan(void) {
  pthread_mutex_lock(&mtp__registry_lock);
  bool any = any_checked();
  pthread_mutex_unlock(&mtp__registry_lock);
  if (!any) return;
  for (uint32_t id = 0; id < MTP_MAX_POOLS; id++) {
    pthread_mutex_lock(&mtp__registry_lock);
    mtpi_pool_t *p = mtp__pool_by_id(id);
    bool check = p != NULL && p->check;
    void *bad = NULL;
    if (check) { /* registry lock held: the pool cannot be destroyed meanwhile */
      mtp__pool_lock(p);
      bad = quarantine_find_corrupt(p);
      mtp__pool_unlock_quiet(p); /* a scan frees no page */
    }
    pthread_mutex_unlock(&mtp__registry_lock);
    if (bad) mtp__error(MTP_ERR_USE_AFTER_FREE, "use after free (a freed block was written to)", bad);
  }
}
