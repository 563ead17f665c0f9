/* Regions: 4 MiB of address space aligned to 4 MiB, cut into 64 KiB pages. The region header and
 * the page descriptors sit just below its pages; the pages are handed out as runs of 1..16 pages
 * (aligned to their length) for slabs, and as runs of any length for medium blocks. Free pages are
 * tracked in two bitmaps: free, and free but possibly resident (dirty). Dirty pages are purged
 * after the pool's delay; a region whose pages are all free and clean is unmapped. A region is
 * mapped as two region sizes: the lower one PROT_NONE but for its top page, the header (so that
 * no mapping just below, a large block, can overflow into it), the upper one the pages. Everything
 * here runs under the owning pool's lock. Layer: region. */
#include "region.h"
#include "internal.h"

#include <errno.h>
#include <string.h>

#include "base/os.h"
#include "base/track.h"

mtpi_atomic_u8 mtp__chunkmap[MTP_CHUNKMAP_SIZE];

#define FIRST_PAGE MTP_REGION_FIRST_PAGE
#define USABLE_PAGES MTP_REGION_USABLE_PAGES
/* The inaccessible part of a region's mapping: all of the region size below its header. */
#define REGION_GUARD (MTP_REGION_SIZE - MTP_REGION_META_BYTES)



/* The region list with its tail kept, so that a region that fills up goes to the back in one
 * step, not a walk past thousands of threads' regions (bench/results/notes.md: region.c). */
static void rlist_remove(mtpi_rset_t *rs, mtpi_region_t *r) {
  if (rs->regions_tail == &r->h.link) rs->regions_tail = r->h.link.prev;
  mtp__list_remove(&rs->regions, &r->h.link);
}
static void rlist_push_front(mtpi_rset_t *rs, mtpi_region_t *r) {
  mtp__list_push(&rs->regions, &r->h.link);
  if (rs->regions_tail == NULL) rs->regions_tail = &r->h.link;
}
static void rlist_push_back(mtpi_rset_t *rs, mtpi_region_t *r) {
  mtpi_node_t *n = &r->h.link, *last = rs->regions_tail;
  n->next = NULL;
  n->prev = last;
  if (last)
    last->next = n;
  else
    rs->regions = n;
  rs->regions_tail = n;
}

/* No lock: a new region for set rs, mapped, advised (advice: mtp__huge_fresh_advice's answer;
 * huge ranges of hp pages) and its header made, not yet in the set; NULL + ENOMEM. The OS calls,
 * which may wait on other threads' page faults and mappings, are made here, outside the pool
 * lock. */
static mtpi_region_t *region_map(mtpi_rset_t *rs, bool guard_free, int advice, unsigned hp) {
  char *map = mtp__os_map_guarded(2 * MTP_REGION_SIZE, MTP_REGION_SIZE, REGION_GUARD);
  if (map == NULL) return NULL;
  mtpi_region_t *r = (mtpi_region_t *)(map + REGION_GUARD);
  uintptr_t idx = (uintptr_t)mtp__region_base(r) >> MTP_REGION_SHIFT;
  if (idx >= MTP_CHUNKMAP_SIZE || /* beyond the address bits the chunk map covers */
      (guard_free && mtp__os_guard(mtp__region_base(r), USABLE_PAGES * MTP_PAGE_SIZE) != 0)) {
    mtp__os_unmap_guarded(map, 2 * MTP_REGION_SIZE, REGION_GUARD);
    errno = ENOMEM;
    return NULL;
  }
  r->h.set = rs;
  for (unsigned i = 0; i < MTP_PAGES_PER_REGION; i++) {
    r->pages[i].head = &r->pages[i]; /* every descriptor its own head until it is a TAIL */
    r->h.free_mask[i / 64] |= (uint64_t)1 << (i % 64);
  }
  r->h.free_pages = USABLE_PAGES;
  /* A hint: a kernel without transparent huge pages refuses it (EINVAL), and nothing changes. */
  if (hp != 0 && advice >= 0 &&
      mtp__os_huge_advise(mtp__region_base(r), MTP_REGION_SIZE, advice == 1) == 0 && advice == 1)
    r->h.huge_mask[0] = ~0ull;
  mtp__track_poison(mtp__region_base(r), USABLE_PAGES * MTP_PAGE_SIZE);
  return r;
}

/* No lock: whether the pages in_runs of r (which a purge may have unmapped meanwhile: then not)
 * are MTP_HUGE_DENSE_NUM/DEN resident. */
static bool in_runs_dense(const mtpi_region_t *r, uint64_t in_runs) {
  size_t os = mtp__os_page_size(), per = MTP_PAGE_SIZE / os, used = 0, resident = 0;
  unsigned char vec[MTP_REGION_SIZE / 4096];
  if (MTP_REGION_SIZE / os > sizeof vec ||
      mtp__os_resident_map(mtp__region_base(r), MTP_REGION_SIZE, vec) != 0)
    return false;
  for (uint64_t w = in_runs; w != 0; w &= w - 1) {
    unsigned i = (unsigned)__builtin_ctzll(w);
    used += per;
    for (size_t k = 0; k < per; k++) resident += vec[i * per + k];
  }
  return resident * MTP_HUGE_DENSE_DEN >= used * MTP_HUGE_DENSE_NUM;
}

/* Under the lock: a new region in rs, mapped with the lock dropped (drop, if not NULL: the lock
 * held, released and taken again). NULL + ENOMEM. */
static mtpi_region_t *region_new(mtpi_rset_t *rs, pthread_mutex_t *drop) {
  unsigned hp = mtp__huge_range_pages(rs);
  bool guard_free = rs->guard_free;
  /* the newest region, whose use says how the pool grows (the rule: base.h) */
  mtpi_region_t *newest = rs->newest;
  uint64_t in_runs = newest ? ~(newest->h.free_mask[0] | newest->h.busy_mask[0]) : 0;
  bool grow = rs->huge_grow;
  if (drop) pthread_mutex_unlock(drop);
  unsigned in_use = (unsigned)__builtin_popcountll(in_runs);
  bool looked = hp != 0 && mtp__huge_collapses() &&
                in_use * MTP_HUGE_DENSE_DEN >= MTP_PAGES_PER_REGION * MTP_HUGE_DENSE_NUM;
  if (looked) grow = in_runs_dense(newest, in_runs);
  mtpi_region_t *r = region_map(rs, guard_free, mtp__huge_fresh_advice(grow), hp);
  if (drop) pthread_mutex_lock(drop);
  if (looked) rs->huge_grow = grow;
  if (r == NULL) return NULL;
  rs->newest = r;
  mtp__u8_store_relaxed(&mtp__chunkmap[(uintptr_t)mtp__region_base(r) >> MTP_REGION_SHIFT], 1);
  rs->mapped_bytes += MTP_REGION_SIZE; /* its pages (the header is metadata) */
  rs->clean_bytes += USABLE_PAGES * MTP_PAGE_SIZE;
  rlist_push_front(rs, r);
  return r;
}

void mtp__region_detach(mtpi_rset_t *rs, mtpi_region_t *r) {
  if (rs->newest == r) rs->newest = NULL;
  if (mtp__region_of((uintptr_t)rs->populate_at) == r) { /* a fault-in request into it */
    rs->populate_at = NULL;
    rs->populate_len = 0;
  }
  rlist_remove(rs, r);
  mtp__u8_store_relaxed(&mtp__chunkmap[(uintptr_t)mtp__region_base(r) >> MTP_REGION_SHIFT], 0);
  rs->mapped_bytes -= MTP_REGION_SIZE;
  mtp__u64_add_relaxed(&rs->unmaps, 1); /* relaxed: see types.h */
}

void mtp__region_unmap(mtpi_region_t *r) {
  /* leaves no poison behind: anyone may map there next */
  mtp__os_unmap_guarded(mtp__region_base(r) - MTP_REGION_SIZE, 2 * MTP_REGION_SIZE, REGION_GUARD);
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

/* Positions i where bits i..i+k-1 of w are all set (k >= 1): each step doubles the run length
 * known at every position, the last one tops it up to k. */
static uint64_t runs_any(uint64_t w, unsigned k) {
  for (unsigned have = 1; have < k && w != 0;) {
    unsigned step = have < k - have ? have : k - have;
    w &= w >> step;
    have += step;
  }
  return w;
}

/* The pages of r that are resident: the dirty ones, and every page of a huge range (huge_mask)
 * that holds a page in use or dirty, since one huge page backs it all. Taking free pages there first fills the huge pages already faulted in before a new one
 * is. */
static uint64_t resident(const mtpi_region_t *r) {
  uint64_t w = r->h.dirty_mask[0];
  unsigned hp = mtp__huge_range_pages(r->h.set);
  for (unsigned i = 0; hp != 0 && i + hp <= 64; i += hp) {
    uint64_t bits = mtp__run_mask(i, hp);
    if ((r->h.huge_mask[0] & bits) == bits && ((~r->h.free_mask[0] | w) & bits) != 0) w |= bits;
  }
  return w;
}

/* Where a run of `pages` free pages of r may start (bit i: at page i): at multiples of `pages`
 * if aligned (slabs), else anywhere (medium blocks); over resident pages only if dirty_only.
 * *within (if not NULL): the pages searched. */
static uint64_t run_starts(const mtpi_region_t *r, unsigned pages, bool aligned, bool dirty_only,
                           uint64_t *within) {
  uint64_t w = r->h.free_mask[0];
  if (dirty_only) w &= resident(r);
  if (within != NULL) *within = w;
  return aligned ? runs_of(w, pages) : runs_any(w, pages);
}

/* The first region of rs, in list order, other than skip, with a run of `pages` free pages
 * (run_starts): a run of resident pages first (no page faults), then any; unclaimed: the second
 * pass skips regions a heap has claimed. NULL if none; else *starts and *within as run_starts
 * gives them. */
static mtpi_region_t *region_search(mtpi_rset_t *rs, unsigned pages, bool aligned,
                                    const mtpi_region_t *skip, bool unclaimed, uint64_t *starts,
                                    uint64_t *within) {
  for (int pass = 0; pass < 2; pass++)
    for (mtpi_region_t *r = mtp__region_first(rs); r && r->h.free_pages > 0; r = mtp__region_next(r)) {
      if (r->h.free_pages < pages || r == skip) continue;
      if (pass == 1 && unclaimed && r->h.claim != NULL) continue;
      *starts = run_starts(r, pages, aligned, pass == 0, within);
      if (*starts != 0) return r;
    }
  return NULL;
}

void mtp__region_dense_news(mtpi_rset_t *rs, mtpi_region_t *r, unsigned at, unsigned pages) {
  unsigned hp = mtp__huge_range_pages(rs);
  if (hp == 0 || !mtp__huge_collapses()) return;
  for (unsigned i = at / hp * hp; i < at + pages; i += hp) {
    uint64_t bits = mtp__run_mask(i, hp);
    unsigned in_runs = hp - (unsigned)__builtin_popcountll((r->h.free_mask[0] | r->h.busy_mask[0]) & bits);
    if ((r->h.huge_mask[0] & bits) == bits || in_runs * MTP_HUGE_DENSE_DEN < hp * MTP_HUGE_DENSE_NUM)
      continue;
    if (r->h.dense_backoff_ms == 0) { /* the looks had stopped: again, from now on */
      r->h.dense_backoff_ms = DENSE_FIRST_MS;
      r->h.dense_check_ms = 0;
    }
    rs->dense_news = true;
  }
}

/* Take pages at .. at + pages - 1 of r (all free); returns which of them were dirty (bit i for
 * page at + i). Descriptors are the caller's to set. */
static uint64_t take_run(mtpi_rset_t *rs, mtpi_region_t *r, unsigned at, unsigned pages) {
  uint64_t dirty = 0;
  for (unsigned i = at; i < at + pages; i++) {
    uint64_t bit = (uint64_t)1 << (i % 64);
    MTP_ASSERT(r->h.free_mask[i / 64] & bit);
    if (r->h.dirty_mask[i / 64] & bit)
      dirty |= (uint64_t)1 << (i - at);
    else
      rs->clean_bytes -= MTP_PAGE_SIZE;
    r->h.free_mask[i / 64] &= ~bit;
    r->h.dirty_mask[i / 64] &= ~bit;
  }
  r->h.free_pages -= pages;
  mtp__region_dense_news(rs, r, at, pages);
  if (r->h.free_pages == 0) { /* full: to the back */
    rlist_remove(rs, r);
    rlist_push_back(rs, r);
  }
  return dirty;
}

/* A set whose free pages are guarded (guard_free): pages at .. at + pages - 1 of r made accessible
 * before a run takes them; false if the OS refused (the caller takes nothing). */
static bool open_run(const mtpi_rset_t *rs, mtpi_region_t *r, unsigned at, unsigned pages) {
  return !rs->guard_free || mtp__os_unguard(mtp__region_base(r) + ((size_t)at << MTP_PAGE_SHIFT),
                                            (size_t)pages << MTP_PAGE_SHIFT) == 0;
}

/* Descriptors head[from .. to - 1] become TAILs of head. */
static void set_tails(mtpi_desc_t *head, unsigned from, unsigned to) {
  for (unsigned i = from; i < to; i++) {
    memset(&head[i], 0, sizeof(mtpi_desc_t));
    head[i].kind = MTP_PAGE_TAIL;
    head[i].head = head;
  }
}


/* A heap that keeps taking never-touched pages for classes it has filled before is growing: fault
 * the run, and as the streak lengthens the free clean pages after it, in with one call rather
 * than one fault per 4 KiB. A run for a class's first slab is no such sign (a program touches
 * dozens of classes once as it starts; carving faults in only what it uses): it neither counts
 * nor populates; nor does one whose blocks may leave OS pages untouched (populate false: counted,
 * such runs would lengthen the next small class's window; bench/results/notes.md: region.c). The
 * window grows with the streak, one run more per run taken, up to 256 KiB; pages past the run
 * become free-and-dirty, so the next runs come from them, and the purge returns them after the
 * delay should the growth stop. */
#define POPULATE_STREAK 4
#define POPULATE_PAGES (256 * 1024 / MTP_PAGE_SIZE) /* 256 KiB at most */
static void populate_ahead(mtpi_rset_t *rs, mtpi_region_t *r, unsigned at, unsigned pages,
                           bool clean, bool grow, bool populate) {
  if (!clean) {
    rs->fresh_streak = 0;
    return;
  }
  if (!grow || !populate || rs->guard_free || ++rs->fresh_streak < POPULATE_STREAK) return;
  unsigned window = pages * (rs->fresh_streak - POPULATE_STREAK + 1);
  if (window > POPULATE_PAGES) window = POPULATE_PAGES;
  if (window < pages) window = pages;
  unsigned end = at + pages;
  while (end < MTP_PAGES_PER_REGION && end < at + window &&
         (r->h.free_mask[end / 64] >> (end % 64) & 1) && !(r->h.dirty_mask[end / 64] >> (end % 64) & 1))
    end++;
  /* The caller takes the range (mtp__region_take_populate) and faults it in after dropping the
   * pool lock, so threads that grow at once do not queue behind each other's page zeroing. */
  rs->populate_at = mtp__region_base(r) + ((size_t)at << MTP_PAGE_SHIFT);
  rs->populate_len = (size_t)(end - at) << MTP_PAGE_SHIFT;
  uint64_t now = mtp__os_now_ms();
  for (unsigned i = at + pages; i < end; i++) {
    r->h.dirty_mask[i / 64] |= (uint64_t)1 << (i % 64);
    r->pages[i].free_time_ms = now;
    rs->clean_bytes -= MTP_PAGE_SIZE;
  }
  if (end > at + pages) rs->populate_dirtied = true; /* news for the caller: a purge is due */
}

bool mtp__region_take_populate(mtpi_rset_t *rs, void **at, size_t *len) {
  bool dirtied = rs->populate_dirtied;
  *at = rs->populate_at;
  *len = rs->populate_len;
  rs->populate_at = NULL;
  rs->populate_len = 0;
  rs->populate_dirtied = false;
  return dirtied;
}

void mtp__region_unclaim(mtpi_region_t **hint) {
  if (*hint != NULL && (*hint)->h.claim == hint) {
    (*hint)->h.claim = NULL;
    (*hint)->h.set->claimed--;
  }
  *hint = NULL;
}

mtpi_desc_t *mtp__region_alloc_slab(mtpi_rset_t *rs, unsigned pages, mtpi_region_t **hint,
                                    bool grow, bool populate, pthread_mutex_t *drop) {
  MTP_ASSERT(pages >= 1 && pages <= 16 && (pages & (pages - 1)) == 0);
  mtpi_region_t *found = NULL, *mine = hint ? *hint : NULL;
  uint64_t starts = 0;
  MTP_ASSERT(mine == NULL || (mine->h.set == rs && mine->h.claim == hint));
  /* The claimed region first (resident pages, then fresh ones: its faults are ours alone). */
  if (mine != NULL && mine->h.free_pages >= pages) {
    starts = run_starts(mine, pages, true, true, NULL);
    if (starts == 0) starts = run_starts(mine, pages, true, false, NULL);
    if (starts != 0) found = mine;
  }
  /* Then pages still resident anywhere (no page faults), then never-touched pages where no other
   * heap faults pages in, then a new region. */
  if (found == NULL) found = region_search(rs, pages, true, mine, hint != NULL, &starts, NULL);
  if (found == NULL) {
    found = region_new(rs, drop);
    if (found == NULL) return NULL;
    starts = run_starts(found, pages, true, false, NULL);
  }
  MTP_ASSERT(starts != 0);
  unsigned at = (unsigned)__builtin_ctzll(starts);
  if (!open_run(rs, found, at, pages)) {
    errno = ENOMEM;
    return NULL;
  }
  /* Fresh pages: claim the region, if the heap grows or few regions are claimed yet. Past that, a
   * heap's first slab of a class claims nothing: a thread that allocates a little takes its pages
   * beside other such threads' (else thousands of short-lived threads hold a region each, and every
   * search walks them all under the pool lock; bench/results/notes.md: region.c), while a few
   * threads keep a region each, first slabs included. A region with huge ranges is claimed by
   * none: its faults are one per huge page, and threads that share the huge page being filled
   * leave one partly used, not one each. */
  if (hint != NULL && (grow || rs->claimed < MTP_REGION_FREE_CLAIMS) && found != mine &&
      found->h.claim == NULL && found->h.huge_mask[0] == 0) {
    mtp__region_unclaim(hint);
    found->h.claim = hint;
    rs->claimed++;
    *hint = found;
  }
  bool clean = take_run(rs, found, at, pages) == 0;
  populate_ahead(rs, found, at, pages, clean, grow, populate);
  mtpi_desc_t *s = &found->pages[at];
  s->pages = (uint8_t)pages;
  set_tails(s, 1, pages);
  return s;
}

/* Pages first .. first + pages - 1 of r become free (and dirty) at now_ms. */
static void free_run(mtpi_rset_t *rs, mtpi_region_t *r, unsigned first, unsigned pages,
                     uint64_t now_ms) {
  char *at = mtp__region_base(r) + ((size_t)first << MTP_PAGE_SHIFT);
  size_t len = (size_t)pages << MTP_PAGE_SHIFT;
  mtp__track_poison(at, len);
  /* refused (the OS out of mappings): the pages stay accessible, a check is lost, nothing breaks */
  if (rs->guard_free) (void)mtp__os_guard(at, len);
  for (unsigned i = first; i < first + pages; i++) {
    mtpi_desc_t *d = &r->pages[i];
    mtp__store_relaxed(&d->owner, 0);
    d->kind = MTP_PAGE_FREE;
    d->head = d; /* not a TAIL any more: its own head (types.h) */
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
    rlist_remove(rs, r);
    rlist_push_front(rs, r);
  }
}

void mtp__region_free_run(mtpi_rset_t *rs, mtpi_desc_t *s, uint64_t now_ms) {
  mtpi_region_t *r = mtp__region_of_desc(s);
  MTP_ASSERT(r->h.set == rs && s->kind != MTP_PAGE_FREE && s->kind != MTP_PAGE_TAIL);
  free_run(rs, r, (unsigned)(s - r->pages), s->pages, now_ms);
}

/* ---- runs of any length (medium blocks) ---- */

_Static_assert(MTP_MEDIUM_MAX <= (size_t)MTP_REGION_USABLE_PAGES << MTP_PAGE_SHIFT,
               "a medium block fits in a region");

mtpi_desc_t *mtp__region_alloc_run(mtpi_rset_t *rs, unsigned pages, uint64_t *dirty,
                                   pthread_mutex_t *drop) {
  MTP_ASSERT(pages >= 1 && pages <= USABLE_PAGES);
  uint64_t runs = 0, mask = 0;
  mtpi_region_t *found = region_search(rs, pages, false, NULL, false, &runs, &mask);
  if (found == NULL) {
    found = region_new(rs, drop);
    if (found == NULL) return NULL;
    runs = run_starts(found, pages, false, false, &mask);
  }
  MTP_ASSERT(runs != 0);
  /* The highest stretch of free pages that fits, from its start: the pages after the run stay
   * free for realloc to grow into. */
  unsigned at = 63u - (unsigned)__builtin_clzll(runs);
  while (at > 0 && (mask >> (at - 1) & 1)) at--;
  if (!open_run(rs, found, at, pages)) {
    errno = ENOMEM;
    return NULL;
  }
  *dirty = take_run(rs, found, at, pages);
  mtpi_desc_t *s = &found->pages[at];
  s->pages = (uint8_t)pages;
  set_tails(s, 1, pages);
  return s;
}

bool mtp__region_grow_run(mtpi_rset_t *rs, mtpi_desc_t *s, unsigned pages) {
  mtpi_region_t *r = mtp__region_of_desc(s);
  unsigned at = (unsigned)(s - r->pages), old = s->pages;
  MTP_ASSERT(r->h.set == rs && pages > old);
  if (at + pages > MTP_PAGES_PER_REGION) return false;
  uint64_t want = run_starts(r, pages - old, false, false, NULL);
  if (!(want >> (at + old) & 1) || !open_run(rs, r, at + old, pages - old)) return false;
  (void)take_run(rs, r, at + old, pages - old);
  set_tails(s, old, pages);
  s->pages = (uint8_t)pages;
  return true;
}

void mtp__region_shrink_run(mtpi_rset_t *rs, mtpi_desc_t *s, unsigned pages, uint64_t now_ms) {
  mtpi_region_t *r = mtp__region_of_desc(s);
  unsigned at = (unsigned)(s - r->pages), old = s->pages;
  MTP_ASSERT(r->h.set == rs && pages >= 1 && pages < old);
  free_run(rs, r, at + pages, old - pages, now_ms);
  s->pages = (uint8_t)pages;
}

bool mtp__region_listed(mtpi_rset_t *rs, const mtpi_region_t *r) {
  for (mtpi_region_t *it = mtp__region_first(rs); it; it = mtp__region_next(it))
    if (it == r) return true;
  return false;
}

void mtp__region_unmap_all(mtpi_rset_t *rs) {
  mtpi_region_t *r;
  while ((r = mtp__region_first(rs)) != NULL) {
    mtp__region_detach(rs, r);
    mtp__region_unmap(r);
  }
  rs->clean_bytes = 0;
}

void mtp__region_validate(mtpi_rset_t *rs) {
  bool seen_full = false;
  MTP_ASSERT(rs->regions_tail == mtp__list_last(rs->regions));
  for (mtpi_region_t *r = mtp__region_first(rs); r; r = mtp__region_next(r)) {
    MTP_ASSERT(r->h.set == rs);
    MTP_ASSERT(mtp__is_region_ptr((uintptr_t)mtp__region_base(r)));
    unsigned free_pages = 0;
    for (unsigned i = 0; i < MTP_PAGES_PER_REGION; i++) {
      mtpi_desc_t *d = &r->pages[i];
      bool open = r->h.free_mask[i / 64] >> (i % 64) & 1, busy = r->h.busy_mask[i / 64] >> (i % 64) & 1;
      bool is_free = open || busy, dirty = r->h.dirty_mask[i / 64] >> (i % 64) & 1;
      MTP_ASSERT(!(open && busy) && is_free == (d->kind == MTP_PAGE_FREE));
      MTP_ASSERT(!dirty || is_free);
      MTP_ASSERT((d->kind == MTP_PAGE_TAIL) == (d->head != d)); /* the free fast path's head */
      free_pages += is_free;
      if (d->kind == MTP_PAGE_SLAB || d->kind == MTP_PAGE_MEDIUM || d->kind == MTP_PAGE_PACKED) {
        if (d->kind == MTP_PAGE_SLAB) { /* slab runs: 1..16 pages, a power of two, aligned to it */
          MTP_ASSERT(d->pages >= 1 && d->pages <= 16 && (d->pages & (d->pages - 1)) == 0);
          MTP_ASSERT(i % d->pages == 0);
        } else { /* a medium block: the pages its size needs (or freed), owned by no thread */
          /* read once: a thread takes a run from its cache, or frees one into it, without the
           * pool lock and changes `requested` between two valid values (freed <-> a size); two
           * reads could see one of each and fail the check */
          uint32_t bs = __atomic_load_n(&d->requested, __ATOMIC_RELAXED);
          MTP_ASSERT(d->pages >= 1 &&
                     ((size_t)d->pages << MTP_PAGE_SHIFT >= bs || bs == MTP_MEDIUM_FREED_SIZE));
          MTP_ASSERT(mtp__load_relaxed(&d->owner) == 0 && d->cls == MTP_NUM_CLASSES);
        }
        MTP_ASSERT(i + d->pages <= MTP_PAGES_PER_REGION);
        for (unsigned k = 1; k < d->pages; k++)
          MTP_ASSERT(d[k].kind == MTP_PAGE_TAIL && d[k].head == d);
      } else if (d->kind == MTP_PAGE_TAIL) {
        mtpi_desc_t *h = d->head;
        MTP_ASSERT(h >= &r->pages[FIRST_PAGE] && h < d);
        MTP_ASSERT((h->kind == MTP_PAGE_SLAB || h->kind == MTP_PAGE_MEDIUM ||
                    h->kind == MTP_PAGE_PACKED) && d - h < h->pages);
      }
    }
    MTP_ASSERT(free_pages == r->h.free_pages);
    /* regions with free pages come first */
    if (r->h.free_pages == 0) seen_full = true;
    else MTP_ASSERT(!seen_full);
  }
}

