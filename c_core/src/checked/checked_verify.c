/* Checked mode's verification: the quarantine of freed blocks, the checks of a freed block's
 * clearing and of a live block's guards, and the scans of a whole pool at trim, destroy, exit and
 * on demand (mtp_pool_check). checked.c allocates and frees. Layer: wrap (above heap). */
#include <stdio.h>
#include <string.h>

#include "checked_verify.h"

/* A free-list link read from a freed block is trusted only if it names a free block of the same
 * slab: a write into a freed block's first word must not send the allocator astray. */
bool mtp__checked_link_ok(mtpi_desc_t *s, mtpi_block_t *n) {
  if (n == NULL) return true;
  char *start = mtp__page_start(s), *b = (char *)n;
  if (b < start || b >= mtp__slab_bump(s) || (size_t)(b - start) % s->block_size != 0) return false;
  return !mtp__checked_bit_get(s->check_bits, (uint32_t)((size_t)(b - start) / s->block_size));
}

/* from: 0 for a quarantined block, sizeof(mtpi_block_t) for one on a free list (its link word);
 * the footer keeps the freed block's size and front flag, so that a report names the address
 * the user held */
static bool pattern_from_ok(mtpi_desc_t *s, const char *b, size_t from) {
  const uint64_t word = 0x0101010101010101ull * (uint64_t)MTP_CHECKED_FREED;
  size_t end = s->block_size - MTP_CHECKED_FOOTER, i = from;
  for (; i + 8 <= end; i += 8) { /* a word at a time (blocks are 8-aligned; from is 0 or 8) */
    uint64_t w;
    memcpy(&w, b + i, 8);
    if (w != word) return false;
  }
  for (; i < end; i++)
    if ((unsigned char)b[i] != MTP_CHECKED_FREED) return false;
  return true;
}
bool mtp__checked_pattern_ok(mtpi_desc_t *s, const char *b) {
  return pattern_from_ok(s, b, sizeof(mtpi_block_t));
}

/* ---- the quarantine (pool lock held) ---- */

bool mtp__checked_quarantine_ready(mtpi_pool_t *pool) {
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
  if (!ok) return mtp__checked_user_of(s, b);
  mtp__block_set_next((mtpi_block_t *)b, s->free);
  s->free = (mtpi_block_t *)b;
  return NULL;
}

/* Push the oldest block out of the quarantine; returns a block written to while there, or NULL. */
void *mtp__checked_quarantine_pop(mtpi_pool_t *pool) {
  char *b = pool->quarantine[pool->q_head];
  pool->q_head = (pool->q_head + 1) % MTP_QUARANTINE_SLOTS;
  pool->q_count--;
  mtpi_desc_t *s = mtp__run_of((uintptr_t)b);
  pool->q_bytes -= s->block_size;
  return unquarantine(s, b);
}

/* Before slab s is released: take its blocks out of the quarantine (the ring keeps its order);
 * returns a block of s written to while quarantined, or NULL. */
void *mtp__checked_quarantine_drop_slab(mtpi_pool_t *pool, mtpi_desc_t *s) {
  void *bad = NULL;
  uint32_t n = pool->q_count, kept = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t at = (pool->q_head + i) % MTP_QUARANTINE_SLOTS;
    char *b = pool->quarantine[at];
    if (mtp__run_of((uintptr_t)b) == s) {
      mtp__track_peek(b, s->block_size);
      if (!pattern_from_ok(s, b, 0) && bad == NULL) bad = mtp__checked_user_of(s, b);
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
  return mtp__checked_user_of(s, b);
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
void *mtp__checked_quarantine_step(mtpi_pool_t *pool) {
  for (int k = 0; k < 2 && pool->q_count > 0; k++) {
    void *u = quarantine_check(pool, pool->q_scan++ % pool->q_count);
    if (u != NULL) return u;
  }
  return NULL;
}

/* Live block b of s: NULL if its front guard and canary are intact, else what was written. */
const char *mtp__checked_guards_broken(mtpi_desc_t *s, const char *b) {
  uint32_t f = *mtp__checked_footer(s, b), req = f & MTP_CHECKED_SIZE_MASK;
  size_t front = (f & MTP_CHECKED_FRONTED) ? MTP_CHECKED_FRONT : 0;
  /* the footer itself was overwritten */
  if (front + req + MTP_CHECKED_MIN_CANARY > s->block_size - MTP_CHECKED_FOOTER)
    return "buffer overflow (the block's footer was overwritten)";
  for (size_t i = 0; i < front; i++)
    if ((unsigned char)b[i] != MTP_CHECKED_CANARY)
      return "buffer overflow (bytes before the start of the block were written: an underflow)";
  for (size_t i = front + req; i < s->block_size - MTP_CHECKED_FOOTER; i++)
    if ((unsigned char)b[i] != MTP_CHECKED_CANARY)
      return "buffer overflow (bytes past the requested size were written)";
  return NULL;
}

const char *mtp__checked_neighbours_broken(mtpi_desc_t *s, const char *b) {
  char *start = mtp__page_start(s), *bump = mtp__slab_bump(s);
  size_t bs = s->block_size;
  for (int side = 0; side < 2; side++) {
    char *n = (char *)(side == 0 ? b - bs : b + bs);
    /* only blocks no other check reads: the guard block and those not handed out yet */
    if (n < start || n + bs > s->end || !(n >= bump || (n == start && s->capacity > 2))) continue;
    mtp__track_peek(n, bs);
    bool ok = pattern_from_ok(s, n, 0);
    if (!ok) memset(n, MTP_CHECKED_FREED, bs - MTP_CHECKED_FOOTER); /* reported once */
    mtp__track_unpeek(n, bs);
    if (!ok)
      return side == 0 ? "buffer overflow (bytes before the block were written: an underflow)"
                       : "buffer overflow (bytes past the block were written)";
  }
  return NULL;
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
        bool linked = mtp__checked_link_ok(s, next);
        bool ok = linked && mtp__checked_pattern_ok(s, (const char *)b);
        mtp__track_unpeek(b, s->block_size);
        if (!ok) { /* take it out of circulation, so it is reported once */
          if (!linked) next = NULL;
          if (prev)
            mtp__block_set_next(prev, next);
          else
            s->free = next;
          return mtp__checked_user_of(s, (char *)b);
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
        if (!mtp__checked_bit_get(s->check_bits, k)) continue;
        char *b = start + (size_t)k * s->block_size;
        const char *what = mtp__checked_guards_broken(s, b);
        if (what != NULL)
          note(rs, MTP_ERR_OVERFLOW, what, mtp__checked_user_of(s, b),
               *mtp__checked_footer(s, b) & MTP_CHECKED_SIZE_MASK);
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
    /* a live sampled block's allocation site, while profiling (a freed one's sample is gone) */
    void *origin[MTP_PROF_MAX_DEPTH];
    unsigned depth = mtp__prof_on ? mtp__prof_origin(r->p, origin, MTP_PROF_MAX_DEPTH, false) : 0;
    mtp__error_origin(origin, depth);
    mtp__error(r->err, msg, r->p);
    mtp__error_origin(NULL, 0);
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

