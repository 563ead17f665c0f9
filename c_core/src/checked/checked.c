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
 * new/delete form mismatch, writes past the requested size or before the block (underflow; also
 * beyond the guards, into a neighbour not handed out or the slab's guard block), writes
 * to a freed block (but not of zero bytes), accesses to a zero-size block. A front end beside the
 * heaps: it calls the pool layer (lock, runs, release, large blocks) and the slab layer.
 * The quarantine and the checks of freed blocks, guards and whole pools: checked_verify.c.
 * Layer: wrap (above heap). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/os.h"
#include "checked_verify.h"

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
      /* every block cleared as a freed one is, and the first kept back as a guard (where the
       * slab has more than two): a write before the slab's first block handed out, or past the
       * last, is found at the neighbour's free (mtp__checked_neighbours_broken) */
      char *st = mtp__page_start(s);
      mtp__track_peek(st, (size_t)(s->end - st));
      memset(st, MTP_CHECKED_FREED, (size_t)(s->end - st));
      mtp__track_unpeek(st, (size_t)(s->end - st));
      if (s->capacity > 2) mtp__slab_set_bump(s, st + s->block_size);
      pool->checked_current[cls] = s;
    }
    char *b;
    if (s->free != NULL) {
      mtpi_block_t *blk = s->free, *next = mtp__block_next(blk);
      mtp__track_alloc(blk, s->block_size);
      mtp__track_defined(blk, s->block_size); /* the fill pattern is read below */
      b = (char *)blk;
      bool linked = mtp__checked_link_ok(s, next), intact = linked && mtp__checked_pattern_ok(s, b);
      /* a broken link loses the rest of this slab's free list: those blocks are never reused */
      s->free = linked ? next : NULL;
      if (!intact) {
        /* Keep the block out of circulation (bit stays clear, so freeing it is reported). */
        if (mtp__pool_unlock(pool)) mtp__purger_wake();
        mtp__error(MTP_ERR_USE_AFTER_FREE, "use after free (a freed block was written to)",
                   mtp__checked_user_of(s, b));
        mtp__pool_lock(pool);
        continue;
      }
    } else {
      b = mtp__slab_bump(s);
      mtp__slab_set_bump(s, b + s->block_size); /* pool lock: the owner */
      mtp__track_alloc(b, s->block_size);
    }
    mtp__checked_bit_set(s->check_bits, (uint32_t)((b - mtp__page_start(s)) / s->block_size));
    s->used++;
    return b;
  }
}

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
  size_t front = alignment <= MTP_CHECKED_FRONT ? MTP_CHECKED_FRONT : 0;
  size_t need = size + MTP_CHECKED_FOOTER + MTP_CHECKED_MIN_CANARY + front;
  if (need < size) {
    errno = ENOMEM;
    return NULL;
  }
  size_t natural = size >= 16 ? 16 : (size_t)1 << __builtin_ctzll(size | 16);
  size_t align = alignment > natural ? alignment : natural;
  unsigned cls = need <= MTP_MAX_SMALL ? mtp__class_aligned(need, align) : MTP_NUM_CLASSES;
  if (cls >= MTP_NUM_CLASSES) return mtp__large_alloc(pool, size, alignment, NULL);
  mtp__pool_lock(pool);
  void *bad = pool->quarantine ? mtp__checked_quarantine_step(pool) : NULL;
  char *b = take_block(pool, cls);
  if (b != NULL) {
    mtpi_desc_t *s = mtp__run_of((uintptr_t)b);
    memset(b, MTP_CHECKED_CANARY, front);
    memset(b + front, 0, size); /* no stale data, nor the free list's link */
    memset(b + front + size, MTP_CHECKED_CANARY, s->block_size - MTP_CHECKED_FOOTER - front - size);
    *mtp__checked_footer(s, b) = (uint32_t)size | (front ? MTP_CHECKED_FRONTED : 0);
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
  if (r != 0 && r != MTP_CHECKED_FRONT) return NULL;
  char *b = p - r;
  if (b >= mtp__slab_bump(s)) return NULL;
  if (!mtp__checked_bit_get(s->check_bits, (uint32_t)((size_t)(b - start) / s->block_size))) {
    *not_allocated = true;
    return NULL;
  }
  bool fronted = (*mtp__checked_footer(s, b) & MTP_CHECKED_FRONTED) != 0;
  if (fronted != (r == MTP_CHECKED_FRONT)) return NULL;
  return b;
}

void mtp__checked_forget(mtpi_pool_t *pool) {
  zero_forget(pool);
  if (pool->quarantine == NULL) return;
  mtp__meta_free(pool->quarantine, MTP_QUARANTINE_SLOTS * sizeof(void *));
  pool->quarantine = NULL;
  pool->q_count = 0;
  pool->q_bytes = 0;
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
    uint32_t f = *mtp__checked_footer(s, b), req = f & MTP_CHECKED_SIZE_MASK;
    uint32_t had = (f & MTP_CHECKED_FORM_MASK) >> MTP_CHECKED_FORM_SHIFT;
    if (had != form) {
      snprintf(msg, sizeof msg, "invalid pointer (%s of a block allocated by %s)",
               free_names[form & 3], form_names[had]);
      err = MTP_ERR_INVALID_POINTER;
      what = msg;
    } else if (sized && size != req) {
      err = MTP_ERR_WRONG_SIZE;
      what = "wrong size (differs from the size requested)";
    } else if ((what = mtp__checked_guards_broken(s, b)) != NULL ||
               (what = mtp__checked_neighbours_broken(s, b)) != NULL) {
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
  mtp__checked_bit_clear(s->check_bits, idx);
  memset(b, MTP_CHECKED_FREED, s->block_size - MTP_CHECKED_FOOTER);
  mtp__track_free(b, s->block_size);
  void *bad = NULL;
  if (mtp__checked_quarantine_ready(pool)) {
    while (pool->q_count > 0 && (pool->q_count >= MTP_QUARANTINE_SLOTS ||
                                 pool->q_bytes + s->block_size > MTP_QUARANTINE_BYTES)) {
      void *w = mtp__checked_quarantine_pop(pool);
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
    void *w = pool->quarantine ? mtp__checked_quarantine_drop_slab(pool, s) : NULL;
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
  if (b != NULL)
    *mtp__checked_footer(s, b) = (*mtp__checked_footer(s, b) & ~MTP_CHECKED_FORM_MASK) |
                                 (uint32_t)form << MTP_CHECKED_FORM_SHIFT;
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
  if (b != NULL) *usable = *mtp__checked_footer(s, b) & MTP_CHECKED_SIZE_MASK;
  if (mtp__pool_unlock(pool)) mtp__purger_wake();
  return b != NULL;
}

int mtp__checked_range(mtpi_desc_t *s, const char *p, size_t n, const char **what) {
  mtpi_pool_t *pool = mtp__pool_of_page(s);
  int err = 0;
  mtp__pool_lock(pool);
  char *start = mtp__page_start(s);
  /* checked again under the lock: the slab may have been released since the caller looked */
  if (s->kind == MTP_PAGE_SLAB && s->checked && p >= start && p < s->end) {
    size_t i = (size_t)(p - start) / s->block_size;
    char *b = start + i * s->block_size;
    if (b >= mtp__slab_bump(s) || (i == 0 && s->capacity > 2)) {
      err = MTP_ERR_OVERFLOW;
      *what = "overflow (an access to a slab's guard block or a block not handed out)";
    } else if (!mtp__checked_bit_get(s->check_bits, (uint32_t)i)) {
      err = MTP_ERR_USE_AFTER_FREE;
      *what = "use after free (an access to a freed block)";
    } else {
      size_t usable;
      const char *user = mtp__checked_user(s, b, &usable);
      if (p < user) {
        err = MTP_ERR_OVERFLOW;
        *what = "overflow (an access before the start of a block)";
      } else if (n > usable - (size_t)(p - user)) {
        err = MTP_ERR_OVERFLOW;
        *what = "overflow (an access past the end of a block)";
      }
    }
  }
  if (mtp__pool_unlock(pool)) mtp__purger_wake();
  return err;
}

void *mtp__checked_user(mtpi_desc_t *s, void *b, size_t *usable) {
  uint32_t f = *mtp__checked_footer(s, b);
  *usable = f & MTP_CHECKED_SIZE_MASK;
  return (char *)b + ((f & MTP_CHECKED_FRONTED) ? MTP_CHECKED_FRONT : 0);
}
