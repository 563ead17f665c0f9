/* Regions: 4 MiB of address space aligned to 4 MiB, cut into 64 KiB pages. The region header and
 * the page descriptors sit in the first pages; the rest are handed out as spans of 1..4 pages
 * (aligned to their length) for slabs. Free pages are tracked in two bitmaps: free, and free but
 * possibly resident (dirty). Dirty pages are purged after the pool's delay; a region whose pages
 * are all free and clean is unmapped. Everything here runs under the pool lock. Calls os.c. */
#include <errno.h>
#include <string.h>

#include "internal.h"
#include "os.h"
#include "track.h"

_Atomic(uint8_t) mtp__chunkmap[MTP_CHUNKMAP_SIZE];

#define WORDS (MTP_PAGES_PER_REGION / 64)
#define FIRST_PAGE MTP_REGION_HEADER_PAGES
#define USABLE_PAGES (MTP_PAGES_PER_REGION - MTP_REGION_HEADER_PAGES)

_Static_assert(MTP_REGION_HEADER_PAGES < 8, "region header must stay small");

static void list_remove(mtp_pool_internal_t *pool, mtp_region_t *r) {
  if (r->h.prev)
    r->h.prev->h.next = r->h.next;
  else
    pool->regions = r->h.next;
  if (r->h.next) r->h.next->h.prev = r->h.prev;
  r->h.next = r->h.prev = NULL;
}

static void list_push_front(mtp_pool_internal_t *pool, mtp_region_t *r) {
  r->h.prev = NULL;
  r->h.next = pool->regions;
  if (pool->regions) pool->regions->h.prev = r;
  pool->regions = r;
}

/* Regions with free pages stay in front, so a search can stop at the first full one. */
static void list_push_back(mtp_pool_internal_t *pool, mtp_region_t *r) {
  mtp_region_t *t = pool->regions;
  if (t == NULL) {
    list_push_front(pool, r);
    return;
  }
  while (t->h.next) t = t->h.next;
  t->h.next = r;
  r->h.prev = t;
  r->h.next = NULL;
}

static mtp_region_t *region_new(mtp_pool_internal_t *pool) {
  mtp_region_t *r = mtp__os_map(MTP_REGION_SIZE, MTP_REGION_SIZE);
  if (r == NULL) return NULL;
  uintptr_t idx = (uintptr_t)r >> MTP_REGION_SHIFT;
  if (idx >= MTP_CHUNKMAP_SIZE) { /* beyond the address bits the chunk map covers */
    mtp__os_unmap(r, MTP_REGION_SIZE);
    errno = ENOMEM;
    return NULL;
  }
  r->h.magic = MTP_REGION_MAGIC;
  r->h.pool = pool;
  for (unsigned i = 0; i < MTP_PAGES_PER_REGION; i++) {
    if (i < FIRST_PAGE)
      r->slabs[i].kind = MTP_PAGE_HEADER;
    else
      r->h.free_mask[i / 64] |= (uint64_t)1 << (i % 64);
  }
  r->h.free_pages = USABLE_PAGES;
  mtp__track_poison((char *)r + FIRST_PAGE * MTP_PAGE_SIZE, USABLE_PAGES * MTP_PAGE_SIZE);
  atomic_store_explicit(&mtp__chunkmap[idx], 1, memory_order_relaxed);
  pool->mapped_bytes += MTP_REGION_SIZE;
  pool->clean_bytes += USABLE_PAGES * MTP_PAGE_SIZE;
  list_push_front(pool, r);
  return r;
}

static void region_unmap(mtp_pool_internal_t *pool, mtp_region_t *r) {
  if (mtp__region_of((uintptr_t)pool->populate_at) == r) { /* a fault-in request into it */
    pool->populate_at = NULL;
    pool->populate_len = 0;
  }
  list_remove(pool, r);
  atomic_store_explicit(&mtp__chunkmap[(uintptr_t)r >> MTP_REGION_SHIFT], 0, memory_order_relaxed);
  pool->mapped_bytes -= MTP_REGION_SIZE;
  /* Addresses may be reused by anyone after the unmap: leave no poison behind. */
  mtp__track_unmap(r, MTP_REGION_SIZE);
  mtp__os_unmap(r, MTP_REGION_SIZE);
}

/* Positions i (multiples of k) where bits i..i+k-1 of w are all set. */
static uint64_t runs_of(uint64_t w, unsigned k) {
  static const uint64_t align[5] = {~0ull, 0x5555555555555555ull, 0x1111111111111111ull,
                                    0x0101010101010101ull, 0x0001000100010001ull};
  unsigned lg = 0;
  for (unsigned j = 1; j < k; j <<= 1) {
    w &= w >> j;
    lg++;
  }
  return w & align[lg];
}

static int find_run(mtp_region_t *r, unsigned k, bool dirty_only) {
  for (unsigned wi = 0; wi < WORDS; wi++) {
    uint64_t w = r->h.free_mask[wi];
    if (dirty_only) w &= r->h.dirty_mask[wi];
    uint64_t m = runs_of(w, k);
    if (m) return (int)(wi * 64 + (unsigned)__builtin_ctzll(m));
  }
  return -1;
}

/* A pool that keeps taking never-touched pages is growing: fault the span and the free clean
 * pages after it in with one call (a window of up to 256 KiB) rather than one fault per 4 KiB.
 * The extra pages become free-and-dirty, so the next spans come from them, and the purge
 * returns them after the delay should the growth stop. */
#define POPULATE_STREAK 4
#define POPULATE_PAGES (256 * 1024 / MTP_PAGE_SIZE) /* 256 KiB ahead at most */
static void populate_ahead(mtp_pool_internal_t *pool, mtp_region_t *r, unsigned at, unsigned pages,
                           bool clean) {
  if (!clean) {
    pool->fresh_streak = 0;
    return;
  }
  if (++pool->fresh_streak < POPULATE_STREAK) return;
  unsigned end = at + pages;
  while (end < MTP_PAGES_PER_REGION && end < at + POPULATE_PAGES &&
         (r->h.free_mask[end / 64] >> (end % 64) & 1) && !(r->h.dirty_mask[end / 64] >> (end % 64) & 1))
    end++;
  /* The caller takes the range (mtp__region_take_populate) and faults it in after dropping the
   * pool lock, so threads that grow at once do not queue behind each other's page zeroing. */
  pool->populate_at = (char *)r + ((size_t)at << MTP_PAGE_SHIFT);
  pool->populate_len = (size_t)(end - at) << MTP_PAGE_SHIFT;
  uint64_t now = mtp__os_now_ms();
  for (unsigned i = at + pages; i < end; i++) {
    r->h.dirty_mask[i / 64] |= (uint64_t)1 << (i % 64);
    r->slabs[i].free_time_ms = now;
    pool->clean_bytes -= MTP_PAGE_SIZE;
  }
  if (end > at + pages) mtp__pool_note_free_pages(pool, now);
}

void mtp__region_take_populate(mtp_pool_internal_t *pool, void **at, size_t *len) {
  *at = pool->populate_at;
  *len = pool->populate_len;
  pool->populate_at = NULL;
  pool->populate_len = 0;
}

mtp_slab_t *mtp__region_alloc_span(mtp_pool_internal_t *pool, unsigned pages) {
  mtp_region_t *found = NULL;
  int at = -1;
  /* Prefer pages still resident (no page faults), then any free pages, then a new region. */
  for (int pass = 0; pass < 2 && found == NULL; pass++) {
    for (mtp_region_t *r = pool->regions; r && r->h.free_pages > 0; r = r->h.next) {
      if (r->h.free_pages < pages) continue;
      at = find_run(r, pages, pass == 0);
      if (at >= 0) {
        found = r;
        break;
      }
    }
  }
  if (found == NULL) {
    found = region_new(pool);
    if (found == NULL) return NULL;
    at = find_run(found, pages, false);
  }
  bool clean = true;
  for (unsigned i = (unsigned)at; i < (unsigned)at + pages; i++) {
    uint64_t bit = (uint64_t)1 << (i % 64);
    if (!(found->h.dirty_mask[i / 64] & bit))
      pool->clean_bytes -= MTP_PAGE_SIZE;
    else
      clean = false;
    found->h.free_mask[i / 64] &= ~bit;
    found->h.dirty_mask[i / 64] &= ~bit;
  }
  populate_ahead(pool, found, (unsigned)at, pages, clean);
  found->h.free_pages -= pages;
  if (found->h.free_pages == 0) { /* full: to the back */
    list_remove(pool, found);
    list_push_back(pool, found);
  }
  mtp_slab_t *s = &found->slabs[at];
  s->pages = (uint8_t)pages;
  for (unsigned i = 1; i < pages; i++) {
    memset(&s[i], 0, sizeof(mtp_slab_t));
    s[i].kind = MTP_PAGE_TAIL;
    s[i].head_delta = (uint16_t)i;
  }
  return s;
}

void mtp__region_free_span(mtp_pool_internal_t *pool, mtp_slab_t *s, uint64_t now_ms) {
  mtp_region_t *r = mtp__region_of((uintptr_t)s);
  unsigned first = (unsigned)(s - r->slabs), pages = s->pages;
  mtp__track_poison(mtp__slab_start(s), (size_t)pages << MTP_PAGE_SHIFT);
  for (unsigned i = first; i < first + pages; i++) {
    mtp_slab_t *d = &r->slabs[i];
    mtp__store_relaxed(&d->owner, 0);
    d->kind = MTP_PAGE_FREE;
    d->list = MTP_LIST_NONE;
    d->free_time_ms = now_ms;
    d->check_bits = NULL;
    d->pages = 1;
    uint64_t bit = (uint64_t)1 << (i % 64);
    r->h.free_mask[i / 64] |= bit;
    r->h.dirty_mask[i / 64] |= bit;
  }
  bool was_full = r->h.free_pages == 0;
  r->h.free_pages += pages;
  if (was_full) { /* has free pages again: to the front */
    list_remove(pool, r);
    list_push_front(pool, r);
  }
}

size_t mtp__region_purge(mtp_pool_internal_t *pool, uint64_t now_ms, bool force) {
  size_t returned = 0;
  long delay = pool->purge_delay_ms;
  mtp_region_t *next;
  for (mtp_region_t *r = pool->regions; r; r = next) {
    next = r->h.next;
    if (r->h.free_pages == 0) break; /* the rest are full */
    for (unsigned wi = 0; wi < WORDS; wi++) {
      uint64_t w = r->h.dirty_mask[wi];
      while (w) {
        unsigned i = wi * 64 + (unsigned)__builtin_ctzll(w);
        /* a run of consecutive dirty pages that are all due */
        unsigned j = i;
        while (j < (wi + 1) * 64 && (w >> (j - wi * 64) & 1) &&
               (force || (delay >= 0 && r->slabs[j].free_time_ms + (uint64_t)delay <= now_ms)))
          j++;
        if (j == i) {
          w &= w - 1;
          continue;
        }
        size_t len = (size_t)(j - i) << MTP_PAGE_SHIFT;
        mtp__os_purge((char *)r + ((size_t)i << MTP_PAGE_SHIFT), len);
        uint64_t bits = (j - i == 64) ? ~0ull : (((uint64_t)1 << (j - i)) - 1) << (i - wi * 64);
        r->h.dirty_mask[wi] &= ~bits;
        w &= ~bits;
        pool->clean_bytes += len;
        returned += len;
      }
    }
    if (r->h.free_pages == USABLE_PAGES) {
      bool clean = true;
      for (unsigned wi = 0; wi < WORDS; wi++) clean = clean && r->h.dirty_mask[wi] == 0;
      if (clean) {
        pool->clean_bytes -= USABLE_PAGES * MTP_PAGE_SIZE;
        returned += FIRST_PAGE * MTP_PAGE_SIZE; /* the header pages go too */
        region_unmap(pool, r);
      }
    }
  }
  __atomic_fetch_add(&pool->bytes_returned, returned, __ATOMIC_RELAXED);
  return returned;
}

void mtp__region_unmap_all(mtp_pool_internal_t *pool) {
  /* checked-mode slabs keep their allocation bitmaps in internal records */
  for (mtp_region_t *r = pool->regions; r; r = r->h.next)
    for (unsigned i = FIRST_PAGE; i < MTP_PAGES_PER_REGION; i++)
      if (r->slabs[i].kind == MTP_PAGE_SLAB && r->slabs[i].check_bits)
        mtp__meta_free(r->slabs[i].check_bits, (r->slabs[i].capacity + 7) / 8);
  while (pool->regions) region_unmap(pool, pool->regions);
  pool->clean_bytes = 0;
}

#if defined(MTP_TRACK_VALGRIND)
static void mark(mtp_slab_t *s, uint8_t *seen, mtp_block_t *list) {
  char *start = mtp__slab_start(s);
  for (uint32_t n = 0; list != NULL && n < s->capacity; n++) {
    size_t i = (size_t)((char *)list - start) / s->block_size;
    seen[i / 8] |= (uint8_t)(1u << (i % 8));
    list = mtp__block_next(list);
  }
}

void mtp__region_forget_blocks(mtp_pool_internal_t *pool) {
  for (mtp_region_t *r = pool->regions; r; r = r->h.next) {
    for (unsigned p = FIRST_PAGE; p < MTP_PAGES_PER_REGION; p++) {
      mtp_slab_t *s = &r->slabs[p];
      if (s->kind != MTP_PAGE_SLAB || s->list == MTP_LIST_HEAP_CACHE) continue;
      uint8_t seen[MTP_PAGE_SIZE / 8 / 8 + 1] = {0}; /* a bit per block: 8-byte blocks of one page */
      mark(s, seen, s->free);
      mark(s, seen, MTP_TF_PTR(mtp__load_relaxed(&s->thread_free)));
      char *start = mtp__slab_start(s);
      for (uint32_t i = 0; start + (size_t)(i + 1) * s->block_size <= s->bump; i++) {
        bool live = s->check_bits ? (s->check_bits[i / 8] >> (i % 8) & 1) : !(seen[i / 8] >> (i % 8) & 1);
        if (live) VALGRIND_FREELIKE_BLOCK(start + (size_t)i * s->block_size, 0);
      }
    }
  }
}
#else
void mtp__region_forget_blocks(mtp_pool_internal_t *pool) { (void)pool; }
#endif
