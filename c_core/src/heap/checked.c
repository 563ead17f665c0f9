/* Checked mode: every allocation and free of a checked pool runs under the pool lock, with an
 * allocation bitmap per slab. A block of a checked pool holds [user bytes][canary][u32 requested
 * size]; freed blocks are filled with a pattern that is verified when the block is reused.
 * Found here: double free, foreign and interior pointers, a wrong size to a sized free, writes
 * past the requested size, writes to a freed block. A front end beside the heaps: it calls the
 * pool layer (lock, spans, release, large blocks) and the slab layer. Layer: heap. */
#include <errno.h>
#include <string.h>

#include "base/os.h"
#include "heap.h"

#define FOOTER 4        /* u32 requested size at the block's end */
#define MIN_CANARY 4
#define CANARY 0xCA
#define FREED 0xDF

static bool bit_get(const uint8_t *bits, uint32_t i) { return bits[i >> 3] >> (i & 7) & 1; }
static void bit_set(uint8_t *bits, uint32_t i) { bits[i >> 3] |= (uint8_t)(1u << (i & 7)); }
static void bit_clear(uint8_t *bits, uint32_t i) { bits[i >> 3] &= (uint8_t)~(1u << (i & 7)); }

static uint32_t *footer(mtpi_page_t *s, void *b) {
  return (uint32_t *)((char *)b + s->block_size - FOOTER);
}

/* A free-list link read from a freed block is trusted only if it names a free block of the same
 * slab: a write into a freed block's first word must not send the allocator astray. */
static bool link_ok(mtpi_page_t *s, mtpi_block_t *n) {
  if (n == NULL) return true;
  char *start = mtp__page_start(s), *b = (char *)n;
  if (b < start || b >= mtp__slab_bump(s) || (size_t)(b - start) % s->block_size != 0) return false;
  return !bit_get(s->check_bits, (uint32_t)((size_t)(b - start) / s->block_size));
}

static bool pattern_ok(mtpi_page_t *s, const char *b) {
  for (size_t i = sizeof(mtpi_block_t); i < s->block_size; i++)
    if ((unsigned char)b[i] != FREED) return false;
  return true;
}

/* Pool lock held. A block of class cls, or NULL (ENOMEM). */
static void *take_block(mtpi_pool_t *pool, unsigned cls) {
  for (;;) {
    mtpi_page_t *s = pool->checked_current[cls];
    if (s == NULL || (s->free == NULL && mtp__slab_bump(s) >= s->end)) {
      s = mtp__pool_span_locked(pool, mtp__class_pages[cls]);
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
        mtp__pool_unlock(pool);
        mtp__error(MTP_ERR_USE_AFTER_FREE, "use after free (a freed block was written to)", b);
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

void *mtp__checked_alloc(mtpi_pool_t *pool, size_t size, size_t alignment) {
  size_t need = size + FOOTER + MIN_CANARY;
  if (need < size) {
    errno = ENOMEM;
    return NULL;
  }
  size_t natural = size >= 16 ? 16 : (size_t)1 << __builtin_ctzll(size | 16);
  size_t align = alignment > natural ? alignment : natural;
  unsigned cls = need <= MTP_MAX_SMALL ? mtp__class_aligned(need, align) : MTP_NUM_CLASSES;
  if (cls >= MTP_NUM_CLASSES) return mtp__large_alloc(pool, size, alignment);
  mtp__pool_lock(pool);
  char *b = take_block(pool, cls);
  if (b != NULL) {
    mtpi_page_t *s = mtp__slab_of((uintptr_t)b);
    memset(b + size, CANARY, s->block_size - FOOTER - size);
    *footer(s, b) = (uint32_t)size;
    pool->checked_allocs++;
  }
  mtp__pool_unlock(pool);
  if (b == NULL) errno = ENOMEM;
  return b;
}

void mtp__checked_free(mtpi_page_t *s, void *p, size_t size, bool sized) {
  mtpi_pool_t *pool = mtp__pool_of_page(s);
  int err = 0;
  const char *what = NULL;
  char *b = p;
  mtp__pool_lock(pool);
  size_t off = (size_t)(b - mtp__page_start(s));
  uint32_t idx = (uint32_t)(off / s->block_size);
  if (s->kind != MTP_PAGE_SLAB || off % s->block_size != 0 || b >= mtp__slab_bump(s)) {
    err = MTP_ERR_INVALID_POINTER;
    what = "invalid pointer (not the start of a block)";
  } else if (!bit_get(s->check_bits, idx)) {
    err = MTP_ERR_DOUBLE_FREE;
    what = "double free (the block is not allocated)";
  } else {
    uint32_t req = *footer(s, b);
    if (sized && size != req) {
      err = MTP_ERR_WRONG_SIZE;
      what = "wrong size (differs from the size requested)";
    } else {
      for (size_t i = req; i < s->block_size - FOOTER; i++)
        if ((unsigned char)b[i] != CANARY) {
          err = MTP_ERR_OVERFLOW;
          what = "buffer overflow (bytes past the requested size were written)";
          break;
        }
    }
  }
  if (err) {
    mtp__pool_unlock(pool);
    mtp__error(err, what, p);
    return;
  }
  bit_clear(s->check_bits, idx);
  memset(b + sizeof(mtpi_block_t), FREED, s->block_size - sizeof(mtpi_block_t));
  mtp__block_set_next((mtpi_block_t *)b, s->free);
  mtp__track_free(b, s->block_size);
  s->free = (mtpi_block_t *)b;
  if (--s->used == 0 && pool->checked_current[s->cls] != s) {
    mtp__pool_release_locked(pool, s, mtp__os_now_ms());
  }
  mtp__pool_unlock(pool);
}

size_t mtp__checked_usable(mtpi_page_t *s, const void *p) {
  return *footer(s, (void *)p);
}

/* Pool lock held. The first freed block of a checked pool that was written to, or NULL. Run at
 * trim and destroy, so a late write into a freed block is reported even if it is never reused. */
static void *find_corrupt(mtpi_pool_t *pool) {
  for (mtpi_region_t *r = mtp__region_from_node(pool->rs.regions); r;
       r = mtp__region_from_node(r->h.link.next)) {
    for (unsigned i = MTP_REGION_FIRST_PAGE; i < MTP_PAGES_PER_REGION; i++) {
      mtpi_page_t *s = &r->pages[i];
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
          return b;
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
  void *bad = find_corrupt(pool);
  mtp__pool_unlock(pool);
  if (bad) mtp__error(MTP_ERR_USE_AFTER_FREE, "use after free (a freed block was written to)", bad);
}
