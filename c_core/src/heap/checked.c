/* Checked mode, a heap debugger: every allocation and free of a checked pool runs under the pool
 * lock, with an allocation bitmap per slab. A block of a checked pool holds
 *   [front guard, 16 bytes][user bytes][canary, 4 bytes at least][u32 footer]
 * (no front guard for an alignment above 16: the user's address is then the block's); the footer
 * holds the requested size, in its top bit whether there is a front guard, and in the two bits
 * below which form allocated it (malloc, new or new[]: the drop-in's operator new records it, so
 * that a delete of the other form, or a free of a new block, is reported). The user bytes are
 * cleared when the block is handed out. Guard and canary bytes are checked at free, and for every
 * live block at trim, at destroy, at exit and on demand (mtp_pool_check). A freed block is cleared
 * (zero bytes) and QUARANTINED: held back from reuse (a ring per pool, bounded in blocks and
 * bytes) until newer frees push it out, when its clearing is verified and it goes onto its slab's
 * free list; verified again when the block is reused, at trim, at destroy, at exit and on demand
 * (so a late write is reported even if the block never leaves the quarantine). A zero-size request
 * gets an address of its own in a reserved inaccessible range (any access faults), freed normally.
 * Found here: double free, foreign and interior pointers, a wrong size to a sized free, a
 * new/delete form mismatch, writes past the requested size or before the block (underflow), writes
 * to a freed block (but not of zero bytes), accesses to a zero-size block. A front end beside the
 * heaps: it calls the pool layer (lock, runs, release, large blocks) and the slab layer.
 * Layer: heap. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/os.h"
#include "heap.h"

#define FOOTER 4        /* u32 at the block's end: requested size, form, FRONTED in the top bit */
#define MIN_CANARY 4
#define FRONT 16        /* the front guard: keeps the user's address 16-aligned */
#define FRONTED 0x80000000u
#define FORM_SHIFT 29   /* MTP_FORM_* in bits 29-30 */
#define FORM_MASK (3u << FORM_SHIFT)
#define SIZE_MASK ((1u << FORM_SHIFT) - 1) /* a checked small block's size is below 32 KiB */
#define CANARY 0xCA
#define FREED 0x00      /* a freed block is cleared: a late read finds no stale data */
/* The quarantine's bounds: whichever is reached first pushes out the oldest block. */
#define MTP_QUARANTINE_SLOTS 1024
#define QUARANTINE_BYTES ((size_t)1 << 20)

static bool bit_get(const uint8_t *bits, uint32_t i) { return bits[i >> 3] >> (i & 7) & 1; }
static void bit_set(uint8_t *bits, uint32_t i) { bits[i >> 3] |= (uint8_t)(1u << (i & 7)); }
static void bit_clear(uint8_t *bits, uint32_t i) { bits[i >> 3] &= (uint8_t)~(1u << (i & 7)); }

static uint32_t *footer(mtpi_desc_t *s, const void *b) {
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
  const uint64_t word = 0x0101010101010101ull * (uint64_t)FREED;
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

/* ---- zero-size blocks: addresses in a reserved inaccessible range, one slot each ---- */

#define ZERO_SLOTS ((size_t)1 << 20) /* live zero-size blocks at most (then: 0-byte blocks) */
#define ZERO_STRIDE 16               /* a slot's address is 16-aligned, as malloc's are */
#define ZERO_ALIGN_MAX 4096          /* the range's alignment: the largest a slot can meet */
static pthread_mutex_t zero_lock = PTHREAD_MUTEX_INITIALIZER;
static char *zero_base;         /* ZERO_SLOTS * ZERO_STRIDE bytes, PROT_NONE; set once */
static mtpi_pool_t **zero_pool; /* per slot: the pool of its live block, NULL when free */
static size_t zero_next;        /* the next slot tried: freed addresses come back last */
static size_t zero_top;         /* slots at and above it were never used */
static bool zero_failed;        /* the OS refused the range: zero-size requests get 0-byte blocks */
static uint32_t zero_live[MTP_MAX_POOLS]; /* per pool id: its live zero-size blocks */

/* ---- fork: the zero-size and form tables' locks are held across it (their own handlers) ---- */

static pthread_mutex_t lform_lock = PTHREAD_MUTEX_INITIALIZER;

static void fork_prepare(void) {
  pthread_mutex_lock(&zero_lock);
  pthread_mutex_lock(&lform_lock);
}
static void fork_release(void) {
  pthread_mutex_unlock(&lform_lock);
  pthread_mutex_unlock(&zero_lock);
}
/* Called before either lock is first taken, holding none: pthread_atfork may call malloc, which
 * may be us (then the flag is taken and the nested call goes on without). */
static void fork_handlers(void) {
  static int claimed;
  if (__atomic_load_n(&claimed, __ATOMIC_RELAXED) == 0 &&
      __atomic_exchange_n(&claimed, 1, __ATOMIC_SEQ_CST) == 0)
    (void)pthread_atfork(fork_prepare, fork_release, fork_release); /* ENOMEM: no handlers */
}

static bool zero_ready(void) {
  if (zero_base != NULL) return true;
  if (zero_failed) return false;
  size_t range = ZERO_SLOTS * ZERO_STRIDE, table = ZERO_SLOTS * sizeof(mtpi_pool_t *);
  char *r = mtp__os_map(range, ZERO_ALIGN_MAX);
  mtpi_pool_t **t = r != NULL ? mtp__os_map(table, 0) : NULL;
  if (r == NULL || t == NULL || mtp__os_guard(r, range) != 0) {
    if (r != NULL) mtp__os_unmap(r, range);
    if (t != NULL) mtp__os_unmap(t, table);
    zero_failed = true;
    return false;
  }
  zero_pool = t;
  __atomic_store_n(&zero_base, r, __ATOMIC_RELEASE);
  return true;
}

/* A zero-size block of pool aligned to alignment, or NULL (no slot left, alignment above
 * ZERO_ALIGN_MAX, or no range): the caller then makes a block of 0 usable bytes. */
static void *zero_alloc(mtpi_pool_t *pool, size_t alignment) {
  if (alignment > ZERO_ALIGN_MAX) return NULL;
  size_t step = alignment > ZERO_STRIDE ? alignment / ZERO_STRIDE : 1;
  void *p = NULL;
  fork_handlers();
  pthread_mutex_lock(&zero_lock);
  if (zero_ready()) {
    size_t i = (zero_next + step - 1) / step * step;
    for (size_t n = 0; n < ZERO_SLOTS / step; n++, i += step) {
      if (i >= ZERO_SLOTS) i = 0;
      if (zero_pool[i] == NULL) {
        zero_pool[i] = pool;
        __atomic_fetch_add(&zero_live[pool->id], 1, __ATOMIC_RELAXED); /* read by statistics */
        zero_next = i + 1;
        if (i >= zero_top) zero_top = i + 1;
        p = zero_base + i * ZERO_STRIDE;
        break;
      }
    }
  }
  pthread_mutex_unlock(&zero_lock);
  if (p != NULL) { /* counted with the pool's checked allocations */
    mtp__pool_lock(pool);
    pool->checked_allocs++;
    mtp__pool_unlock_quiet(pool); /* frees no page */
  }
  return p;
}

/* The slot of p if p lies in the zero-size range, else -1 (no lock: the range is set once). */
static long zero_slot(const void *p) {
  const char *base = __atomic_load_n(&zero_base, __ATOMIC_ACQUIRE);
  if (base == NULL || (const char *)p < base || (const char *)p >= base + ZERO_SLOTS * ZERO_STRIDE)
    return -1;
  return (long)(((const char *)p - base) / ZERO_STRIDE);
}

static bool lform_free(void *p);

bool mtp__checked_free_outside(void *p, size_t size, bool sized) {
  long i = zero_slot(p);
  if (i < 0) return lform_free(p);
  int err = 0;
  const char *what = NULL;
  pthread_mutex_lock(&zero_lock);
  if ((size_t)((char *)p - zero_base) % ZERO_STRIDE != 0) {
    err = MTP_ERR_INVALID_POINTER;
    what = "invalid pointer (inside a zero-size block's slot)";
  } else if (zero_pool[i] == NULL) {
    err = MTP_ERR_DOUBLE_FREE;
    what = "double free (the zero-size block is not allocated)";
  } else if (sized && size != 0) {
    err = MTP_ERR_WRONG_SIZE;
    what = "wrong size (the block was requested with size 0)";
  } else {
    __atomic_fetch_sub(&zero_live[zero_pool[i]->id], 1, __ATOMIC_RELAXED);
    zero_pool[i] = NULL;
  }
  pthread_mutex_unlock(&zero_lock);
  if (err) mtp__error(err, what, p);
  return true;
}

bool mtp__checked_zero_lookup(const void *p, mtpi_pool_t **pool_out) {
  long i = zero_slot(p);
  if (i < 0) return false;
  pthread_mutex_lock(&zero_lock);
  mtpi_pool_t *pool = (size_t)((const char *)p - zero_base) % ZERO_STRIDE == 0 ? zero_pool[i] : NULL;
  pthread_mutex_unlock(&zero_lock);
  if (pool != NULL && pool_out != NULL) *pool_out = pool;
  return pool != NULL;
}

size_t mtp__checked_zero_count(const mtpi_pool_t *pool) {
  return __atomic_load_n(&zero_live[pool->id], __ATOMIC_RELAXED);
}

/* Pool destroy: its zero-size blocks go with it. */
static void zero_forget(mtpi_pool_t *pool) {
  pthread_mutex_lock(&zero_lock);
  for (size_t i = 0; zero_base != NULL && i < zero_top; i++)
    if (zero_pool[i] == pool) zero_pool[i] = NULL;
  __atomic_store_n(&zero_live[pool->id], 0, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&zero_lock);
}

/* Set once a checked block of the default pool is handed out: from then on the drop-in's
 * operator new and delete record and check their form. */
bool mtp__checked_forms;

/* ---- the C++ form of a checked pool's large blocks: a table from address to form ---- */

/* Large blocks made by new or new[] recorded at once; past three quarters full, new ones are not
 * recorded, and a large block found in no slot is then of unknown form (never reported). */
#define LFORM_BITS 16
#define LFORM_SLOTS ((size_t)1 << LFORM_BITS)
typedef struct {
  uintptr_t p; /* 0: an empty slot */
  unsigned form;
} lform_t;
static lform_t *lform;      /* open addressing, linear probing; mapped at the first record */
static size_t lform_count;  /* written under the lock, read without it to skip an empty table */
static bool lform_overflow; /* a record was skipped: an unlisted block's form is unknown */

static size_t lform_home(uintptr_t p) {
  return (size_t)((uint64_t)(p >> 12) * 0x9E3779B97F4A7C15ull >> (64 - LFORM_BITS));
}
/* Lock held: p's slot, or the empty slot where it would go. */
static size_t lform_find(uintptr_t p) {
  size_t i = lform_home(p);
  while (lform[i].p != 0 && lform[i].p != p) i = (i + 1) & (LFORM_SLOTS - 1);
  return i;
}
static void lform_put(uintptr_t p, unsigned form) {
  fork_handlers();
  pthread_mutex_lock(&lform_lock);
  if (lform == NULL && !lform_overflow) {
    lform = mtp__os_map(LFORM_SLOTS * sizeof(lform_t), 0);
    if (lform == NULL) lform_overflow = true;
  }
  if (lform != NULL && lform_count < LFORM_SLOTS / 4 * 3) {
    size_t i = lform_find(p);
    if (lform[i].p == 0) __atomic_store_n(&lform_count, lform_count + 1, __ATOMIC_RELAXED);
    lform[i] = (lform_t){p, form};
  } else {
    lform_overflow = true;
  }
  pthread_mutex_unlock(&lform_lock);
}
/* Lock held: empty slot i, moving later entries of its run back (no tombstones). */
static void lform_remove(size_t i) {
  for (size_t j = i;;) {
    j = (j + 1) & (LFORM_SLOTS - 1);
    if (lform[j].p == 0) break;
    size_t k = lform_home(lform[j].p);
    bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
    if (!stays) {
      lform[i] = lform[j];
      i = j;
    }
  }
  lform[i].p = 0;
  __atomic_store_n(&lform_count, lform_count - 1, __ATOMIC_RELAXED);
}
/* p's recorded form: MTP_FORM_NEW or MTP_FORM_NEW_ARRAY; MTP_FORM_MALLOC if none is recorded and
 * the table is complete; -1 if unknown. With take, a recorded form is removed. */
static int lform_get(uintptr_t p, bool take) {
  int form = -1;
  fork_handlers();
  pthread_mutex_lock(&lform_lock);
  size_t i = lform != NULL ? lform_find(p) : 0;
  if (lform != NULL && lform[i].p == p) {
    form = (int)lform[i].form;
    if (take) lform_remove(i);
  } else if (!lform_overflow) {
    form = MTP_FORM_MALLOC;
  }
  pthread_mutex_unlock(&lform_lock);
  return form;
}

static const char *const form_names[] = {"malloc", "new", "new[]", "?"};
static const char *const free_names[] = {"free", "delete", "delete[]", "?"};

/* A form mismatch: form freed a block that had made. */
static void form_report(void *p, unsigned form, unsigned had) {
  char msg[96];
  snprintf(msg, sizeof msg, "invalid pointer (%s of a block allocated by %s)", free_names[form & 3],
           form_names[had & 3]);
  mtp__error(MTP_ERR_INVALID_POINTER, msg, p);
}

/* free (or realloc) of p outside the regions: true if p is a large block recorded as made by new
 * or new[] (reported, left alone). */
static bool lform_free(void *p) {
  if (__atomic_load_n(&lform_count, __ATOMIC_RELAXED) == 0) return false;
  int had = lform_get((uintptr_t)p, false);
  if (had <= MTP_FORM_MALLOC) return false;
  form_report(p, MTP_FORM_MALLOC, (unsigned)had);
  return true;
}

/* Whether p is a live large block of a checked pool. */
static bool checked_large(const void *p) {
  size_t usable;
  mtpi_pool_t *pool = NULL;
  return mtp__large_lookup(p, &usable, &pool) && pool->check;
}

void *mtp__checked_alloc(mtpi_pool_t *pool, size_t size, size_t alignment) {
  if (!__atomic_load_n(&mtp__checked_forms, __ATOMIC_RELAXED))
    if (mtp__is_default(pool)) __atomic_store_n(&mtp__checked_forms, true, __ATOMIC_RELAXED);
  if (size == 0) {
    void *z = zero_alloc(pool, alignment);
    if (z != NULL) return z;
  }
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
    memset(b + front, 0, size); /* no stale data, nor the free list's link */
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
  zero_forget(pool);
  if (pool->quarantine == NULL) return;
  mtp__meta_free(pool->quarantine, MTP_QUARANTINE_SLOTS * sizeof(void *));
  pool->quarantine = NULL;
  pool->q_count = 0;
  pool->q_bytes = 0;
}

/* Live block b of s: NULL if its front guard and canary are intact, else what was written. */
static const char *guards_broken(mtpi_desc_t *s, const char *b) {
  uint32_t f = *footer(s, b), req = f & SIZE_MASK;
  size_t front = (f & FRONTED) ? FRONT : 0;
  if (front + req + MIN_CANARY > s->block_size - FOOTER) /* the footer itself was overwritten */
    return "buffer overflow (the block's footer was overwritten)";
  for (size_t i = 0; i < front; i++)
    if ((unsigned char)b[i] != CANARY)
      return "buffer overflow (bytes before the start of the block were written: an underflow)";
  for (size_t i = front + req; i < s->block_size - FOOTER; i++)
    if ((unsigned char)b[i] != CANARY)
      return "buffer overflow (bytes past the requested size were written)";
  return NULL;
}

static void checked_free(mtpi_desc_t *s, void *p, size_t size, bool sized, unsigned form) {
  mtpi_pool_t *pool = mtp__pool_of_page(s);
  int err = 0;
  const char *what = NULL;
  char msg[160];
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
    uint32_t f = *footer(s, b), req = f & SIZE_MASK, had = (f & FORM_MASK) >> FORM_SHIFT;
    if (had != form) {
      snprintf(msg, sizeof msg, "invalid pointer (%s of a block allocated by %s)",
               free_names[form & 3], form_names[had]);
      err = MTP_ERR_INVALID_POINTER;
      what = msg;
    } else if (sized && size != req) {
      err = MTP_ERR_WRONG_SIZE;
      what = "wrong size (differs from the size requested)";
    } else if ((what = guards_broken(s, b)) != NULL) {
      err = MTP_ERR_OVERFLOW;
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

void mtp__checked_free(mtpi_desc_t *s, void *p, size_t size, bool sized) {
  checked_free(s, p, size, sized, MTP_FORM_MALLOC);
}

/* The checked slab of p, or NULL. */
static mtpi_desc_t *checked_slab_of(const void *p) {
  if (p == NULL || !mtp__is_region_ptr((uintptr_t)p)) return NULL;
  mtpi_desc_t *s = mtp__run_of((uintptr_t)p);
  return s->kind == MTP_PAGE_SLAB && s->checked ? s : NULL;
}

void mtp__checked_set_form(void *p, unsigned form) {
  mtpi_desc_t *s = checked_slab_of(p);
  if (s == NULL) {
    if (p != NULL && !mtp__is_region_ptr((uintptr_t)p) && checked_large(p)) lform_put((uintptr_t)p, form);
    return;
  }
  mtpi_pool_t *pool = mtp__pool_of_page(s);
  mtp__pool_lock(pool);
  bool not_allocated;
  char *b = block_of(s, p, &not_allocated);
  if (b != NULL) *footer(s, b) = (*footer(s, b) & ~FORM_MASK) | (uint32_t)form << FORM_SHIFT;
  mtp__pool_unlock_quiet(pool); /* frees no page */
}

bool mtp__checked_delete(void *p, size_t size, bool sized, unsigned form) {
  mtpi_desc_t *s = checked_slab_of(p);
  if (s == NULL) {
    if (p == NULL || mtp__is_region_ptr((uintptr_t)p) || !checked_large(p)) return false;
    int had = lform_get((uintptr_t)p, false);
    if (had < 0 || (unsigned)had == form) {
      if (had > 0) (void)lform_get((uintptr_t)p, true); /* freed now: forget its form */
      return false; /* the caller frees it */
    }
    form_report(p, form, (unsigned)had);
    return true;
  }
  checked_free(s, p, size, sized, form);
  return true;
}

bool mtp__checked_lookup(mtpi_desc_t *s, const void *p, size_t *usable) {
  mtpi_pool_t *pool = mtp__pool_of_page(s);
  mtp__pool_lock(pool);
  bool not_allocated;
  char *b = block_of(s, (char *)p, &not_allocated);
  if (b != NULL) *usable = *footer(s, b) & SIZE_MASK;
  if (mtp__pool_unlock(pool)) mtp__purger_wake();
  return b != NULL;
}

void *mtp__checked_user(mtpi_desc_t *s, void *b, size_t *usable) {
  uint32_t f = *footer(s, b);
  *usable = f & SIZE_MASK;
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

/* ---- verifying a whole pool: trim, destroy, exit, mtp_pool_check ---- */

#define MAX_REPORTS 32 /* corrupt blocks reported per verification (all are counted) */
typedef struct {
  int err;
  const char *what;
  void *p;
  size_t size;
} report_t;
typedef struct {
  char pool[sizeof(((mtpi_pool_t *)0)->name)]; /* its name, for reports made after its locks */
  report_t r[MAX_REPORTS];
  size_t n; /* found; the first MAX_REPORTS recorded */
} reports_t;

static void note(reports_t *rs, int err, const char *what, void *p, size_t size) {
  if (rs->n < MAX_REPORTS) rs->r[rs->n] = (report_t){err, what, p, size};
  rs->n++;
}

static void note_large(void *ctx, void *p, size_t size) {
  note(ctx, MTP_ERR_OVERFLOW, "buffer overflow (bytes past the end of a large block were written)",
       p, size);
}

/* Pool lock held: every live block of pool's checked slabs with a broken guard. */
static void verify_live(mtpi_pool_t *pool, reports_t *rs) {
  for (mtpi_region_t *r = mtp__region_from_node(pool->rs.regions); r;
       r = mtp__region_from_node(r->h.link.next))
    for (unsigned i = MTP_REGION_FIRST_PAGE; i < MTP_PAGES_PER_REGION; i++) {
      mtpi_desc_t *s = &r->pages[i];
      if (s->kind != MTP_PAGE_SLAB || !s->checked || s->check_bits == NULL) continue;
      char *start = mtp__page_start(s), *bump = mtp__slab_bump(s);
      uint32_t n = (uint32_t)((size_t)(bump - start) / s->block_size);
      for (uint32_t k = 0; k < n; k++) {
        if (!bit_get(s->check_bits, k)) continue;
        char *b = start + (size_t)k * s->block_size;
        const char *what = guards_broken(s, b);
        if (what != NULL) note(rs, MTP_ERR_OVERFLOW, what, user_of(s, b), *footer(s, b) & SIZE_MASK);
      }
    }
}

/* Pool lock held: every freed block that was written to (each taken out of circulation, so that
 * it is reported once). */
static void verify_freed(mtpi_pool_t *pool, reports_t *rs) {
  static const char uaf[] = "use after free (a freed block was written to)";
  for (void *u; (u = quarantine_find_corrupt(pool)) != NULL;)
    note(rs, MTP_ERR_USE_AFTER_FREE, uaf, u, 0);
  for (void *u; (u = find_corrupt(pool)) != NULL;) note(rs, MTP_ERR_USE_AFTER_FREE, uaf, u, 0);
}

/* Verify every block of checked pool into rs; pool lock not held. quiet: the registry lock is
 * held (exit): the purger is not woken. */
static void verify(mtpi_pool_t *pool, reports_t *rs, bool quiet) {
  rs->n = 0;
  memcpy(rs->pool, pool->name, sizeof rs->pool);
  rs->pool[sizeof rs->pool - 1] = 0;
  mtp__pool_lock(pool);
  verify_live(pool, rs);
  verify_freed(pool, rs);
  if (quiet)
    mtp__pool_unlock_quiet(pool); /* a verification frees no page */
  else if (mtp__pool_unlock(pool))
    mtp__purger_wake();
  mtp__large_verify(pool, note_large, rs);
}

/* Report what rs holds, naming the pool, its size for a live block: no lock held. */
static void report_all(const reports_t *rs) {
  for (size_t i = 0; i < rs->n && i < MAX_REPORTS; i++) {
    const report_t *r = &rs->r[i];
    char msg[224];
    if (r->err == MTP_ERR_USE_AFTER_FREE)
      snprintf(msg, sizeof msg, "%s; pool \"%s\"", r->what, rs->pool);
    else
      snprintf(msg, sizeof msg, "%s; pool \"%s\", a live block of %zu bytes", r->what, rs->pool,
               r->size);
    mtp__error(r->err, msg, r->p);
  }
}

size_t mtp__checked_verify(mtpi_pool_t *pool) {
  if (!pool->check) return 0;
  reports_t rs;
  verify(pool, &rs, false);
  report_all(&rs);
  return rs.n;
}

/* Registry lock held: is any live pool checked? */
static bool any_checked(void) {
  for (mtpi_node_t *it = mtp__pools; it; it = it->next)
    if (mtp__pool_from_reg(it)->check) return true;
  return false;
}

/* At exit: every checked pool is verified once more (as by mtp_pool_check), so that a write past
 * a block that is never freed, or into a freed block still in the quarantine, is reported. A process with no checked pool (the usual
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
    reports_t rs;
    rs.n = 0;
    /* registry lock held: the pool cannot be destroyed meanwhile */
    if (p != NULL && p->check) verify(p, &rs, true);
    pthread_mutex_unlock(&mtp__registry_lock);
    report_all(&rs);
  }
}
