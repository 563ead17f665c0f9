/* The pool layer: what a pool's threads share. The registry of pools (registry.c); the slabs no
 * thread owns: detached ones waiting for adoption and empty ones kept for their class (slabs.c);
 * purging and the purge thread (purge.c); the default pool and the fork handlers (process.c);
 * medium blocks (medium.c: runs of whole pages; packed.c: units of packed spans) and large blocks (large.c; their ranges and the cache of free ones,
 * large_ranges.c). Per-thread state (heaps, their caches) is the heap layer's; this layer sees a
 * heap only as its membership (mtpi_member_t).
 *
 * News, not calls up: a function here that makes a purge due (pages freed, a slab kept empty)
 * says so to its caller (mtp__pool_unlock's result, a `due` result or out-parameter), and the
 * caller wakes the purger (mtp__purger_wake) once it holds no lock and its own state is
 * consistent: the wake may create the purge thread, and pthread_create allocates, which
 * re-enters mtpool when mtpool is the process's malloc.
 *
 * Locks, in order: registry, a pool's shared heaps (heap layer), pool (in registry order), a
 * member's cache lock, large, meta, purger. No function here calls anything that may call malloc
 * (pthread_create, pthread_atfork, stdio) with one of them held, nor inside the default pool's
 * pthread_once. No OS call that can wait for other threads' page faults and mappings (mmap,
 * munmap, madvise) is made with a pool lock held: the region and span purges and the mapping of
 * a region drop it across theirs (region.h, span.c); left under it are checked pools' guard pages
 * and the auto huge-page verdict's mincore. Layer: pool (above slab). */
#ifndef MTP_POOL_H
#define MTP_POOL_H

#include "slab/slab.h"

#pragma GCC visibility push(hidden)

/* ---- registry (registry.c) ---- */
extern pthread_mutex_t mtp__registry_lock; /* pools list, pool ids, heap<->pool binding */
extern mtpi_node_t *mtp__pools;            /* live pools, by reg_link (registry lock) */
/* The default pool, 0 until its first use: pool/default.h. */
extern mtpi_atomic_uptr mtp__default_pool_ptr;
static inline mtpi_pool_t *mtp__pool_from_reg(mtpi_node_t *n) {
  return n ? MTP_CONTAINER(n, mtpi_pool_t, reg_link) : NULL;
}
mtpi_pool_t *mtp__pool_by_id(uint32_t id); /* registry lock held */
/* A new pool (options checked; the default pool also reads the environment). NULL + ENOMEM. */
mtpi_pool_t *mtp__pool_new(const mtp_options_t *opt, bool is_default);
/* Unbind every heap, unmap every region and large block, and free the record. No thread may
 * use the pool any more. */
void mtp__pool_free(mtpi_pool_t *p);

/* The pool whose region holds page descriptor s. */
static inline mtpi_pool_t *mtp__pool_of_page(const mtpi_desc_t *s) {
  return MTP_CONTAINER(mtp__page_set(s), mtpi_pool_t, rs);
}

void mtp__pool_lock(mtpi_pool_t *p);
/* mtp__pool_lock if the lock is free now; false (not taken) if it is held. */
bool mtp__pool_trylock(mtpi_pool_t *p);
/* Unlock. Returns whether something done under the lock made a purge due: the caller then calls
 * mtp__purger_wake once it holds no lock (see the top of this file). */
__attribute__((warn_unused_result)) bool mtp__pool_unlock(mtpi_pool_t *p);
/* Unlock after work under the lock that made no purge due (reads, hand-outs), or whose
 * purge the caller itself does (trim, the purge pass). */
void mtp__pool_unlock_quiet(mtpi_pool_t *p);
/* Pool lock held: pages were freed or an empty slab kept; the unlock reports a purge due. */
static inline void mtp__pool_note_free_pages(mtpi_pool_t *p) {
  if (p->purge_delay_ms > 0) p->purge_due = true;
}

/* ---- heaps as members (registry.c) ---- */
static inline mtpi_pool_t *mtp__member_pool(mtpi_member_t *m) {
  /* relaxed: the binding is read by the heap's own thread; destroy's store of 0 is ordered for
   * it by the registry lock or by the caller's contract (no use of a destroyed pool) */
  return (mtpi_pool_t *)mtp__load_relaxed(&m->pool);
}
/* m joins p's members, without the pool lock (one CAS; the lock's next holder lists it). Returns
 * whether a heap joined p before (another thread's): then the caller makes the purger eager
 * (mtp__purger_eager), as wakes may come from several threads. */
bool mtp__pool_join(mtpi_pool_t *p, mtpi_member_t *m);
/* Pool lock held: m's counters go to the pool's, m leaves the list and is unbound. */
void mtp__pool_leave_locked(mtpi_pool_t *p, mtpi_member_t *m);

/* A member's cache lock (mtpi_member_t.cache): taken by the owner thread without the pool lock,
 * and by trim, the purge pass and the fork handler with it; no section under it takes another
 * lock. acquire/release: the previous holder's list writes. */
static inline void mtp__cache_lock(mtpi_member_t *m) {
  int expect = 0;
  while (!mtp__int_cas_weak_acquire(&m->cache_lock, &expect, 1)) expect = 0;
}
static inline void mtp__cache_unlock(mtpi_member_t *m) { mtp__int_store_release(&m->cache_lock, 0); }
/* Cache lock held: the packed block at entry i leaves m's cache (the last entry takes its place). */
static inline void mtp__cache_pk_remove(mtpi_member_t *m, unsigned i) {
  m->pk_bytes -= (size_t)m->pk_units[i] << MTP_UNIT_SHIFT;
  unsigned last = --m->pk_n;
  m->pk[i] = m->pk[last];
  m->pk_time[i] = m->pk_time[last];
  m->pk_units[i] = m->pk_units[last];
  m->pk_put[i] = m->pk_put[last];
}
static inline mtpi_desc_t *mtp__desc_of_node(mtpi_node_t *n) {
  return n ? MTP_CONTAINER(n, mtpi_desc_t, link) : NULL;
}

/* ---- slabs no thread owns (slabs.c) ---- */
/* A slab of class cls for the heap (tag heap, membership m, token owner_token): adopted from the
 * pool's list of detached slabs (then *collected is the count of blocks freed into it meanwhile),
 * else one of the pool's empty slabs (of cls first, else of a class of as many pages), else
 * freshly formatted from free pages, preferably in the region m claimed (region.h). NULL +
 * ENOMEM. Takes the pool lock; *due: a purge became due (the caller wakes the purger once its
 * heap is consistent again). */
mtpi_desc_t *mtp__pool_slab_get(mtpi_pool_t *p, unsigned cls, void *heap, mtpi_member_t *m,
                                uintptr_t owner_token, uint32_t *collected, bool *due);
/* Adopt a detached slab that may be on the pool's list (the heap that detached it wants it back
 * on a free). false if another thread owns it now. Takes the pool lock. */
bool mtp__pool_adopt(mtpi_pool_t *p, mtpi_desc_t *s, void *heap, uintptr_t owner_token,
                     uint32_t *collected);
/* A remote free returned MTP_REMOTE_NEWS for s (seen: what it read before its push): release s
 * if it is empty, else list it for adoption, unless it was adopted, released or unmapped
 * meanwhile. Takes the lock of seen's pool. Returns whether a purge became due. */
bool mtp__pool_detached_news(const mtpi_remote_seen_t *seen, mtpi_desc_t *s);
/* Pool lock held: a fresh run of `pages` pages (unformatted), or NULL + ENOMEM. */
mtpi_desc_t *mtp__pool_run_locked(mtpi_pool_t *p, unsigned pages);
/* Pool lock held: a slab that holds no block goes back to the pool: kept for its class among the
 * pool's empty slabs until the purge delay passes, or, with a delay of 0 or in checked mode, to
 * the region layer at once; a freed medium block's run always goes at once. */
void mtp__pool_release_locked(mtpi_pool_t *p, mtpi_desc_t *s, uint64_t now_ms);
/* Pool lock held: list a detached slab for adoption (if still detached and not listed). */
void mtp__pool_list_detached_locked(mtpi_pool_t *p, mtpi_desc_t *s);
/* Pool lock held: a heap leaves; every slab in m's cache goes to the pool's empty slabs, to be
 * taken by any thread's next slab of its class; every medium block's run to its region. */
void mtp__pool_take_cache_locked(mtpi_pool_t *p, mtpi_member_t *m);
/* Pool lock held (purge.c): the empty slabs kept since cutoff or before go to the region layer. */
void mtp__pool_release_empty_locked(mtpi_pool_t *p, uint64_t cutoff);

/* ---- purging (purge.c) ---- */
/* A purge became due: have it done after the delay. Until a purge thread is worth its keep
 * (PURGER_START_BYTES waiting, or mtp__purger_eager) this purges what is due in the calling
 * thread and starts none. No lock held. */
void mtp__purger_wake(void);
/* From now on wakes start and signal the purge thread (not in a forked child before a second
 * thread allocates: mtp__purger_thread_started). Any lock may be held. */
void mtp__purger_eager(void);
/* A thread allocates for the first time (its record is made): a forked child may start a purge
 * thread from now on. Any lock may be held. */
void mtp__purger_thread_started(void);
/* A large block is to be looked at on the purge passes (for dense huge ranges, large_ranges.c):
 * the purge thread is started (eager) and woken. No lock held. */
void mtp__purger_look(void);
/* Return every empty page of p now, cached slabs included. Returns the bytes returned. */
size_t mtp__pool_trim(mtpi_pool_t *p);
/* mtp__pool_trim for every live pool, under the registry lock. */
size_t mtp__pool_trim_all(void);
/* Fork support (process.c): stop the purge thread and wait for it; returns whether one ran. The
 * next wake starts a new one. */
bool mtp__purger_stop_for_fork(void);
/* After a fork, in the child: no purge thread runs and none is scheduled. */
void mtp__purger_reset_child(void);
/* After a fork, in the parent: a purge thread ran; have the next pass look again. */
void mtp__purger_reschedule(void);
extern pthread_mutex_t mtp__purger_create_lock; /* held across the purge thread's creation */
extern pthread_mutex_t mtp__purger_lock;

/* Pool lock held: s, a run just taken from the region layer, formatted as kind (MEDIUM, PACKED):
 * no owner and a sized free's class compare that always fails, so that every free of it reaches
 * the slow path, which sees the kind; no blocks, lists or checks of a slab. */
static inline void mtp__pool_format_run(mtpi_desc_t *s, uint8_t kind) {
  s->kind = kind;
  s->block_size = 0;
  s->cls = MTP_NUM_CLASSES;
  s->size_min = UINT32_MAX;
  s->size_span = 0;
  s->free = NULL;
  s->used = 0;
  s->bump = NULL;
  s->end = mtp__page_start(s) + ((size_t)s->pages << MTP_PAGE_SHIFT);
  s->capacity = 0;
  s->detached_used = 0;
  s->list = MTP_LIST_NONE;
  s->checked = 0;
  s->check_bits = NULL;
  s->free_time_ms = 0;
  mtp__store_relaxed(&s->owner, 0); /* relaxed: published by the pool unlock */
  mtp__store_relaxed(&s->heap, 0);
  mtp__store_relaxed(&s->thread_free, 0);
}

/* ---- medium blocks (medium.c: runs of the pool's regions; rules there) ---- */
/* A medium block of size bytes (MTP_MAX_SMALL < size <= MTP_MEDIUM_MAX, or smaller for an
 * alignment up to MTP_PAGE_SIZE) from the pool's regions, for a pool that is not checked; zero:
 * its first size bytes read as zero (calloc). 64 KiB aligned. Takes the pool lock. NULL + ENOMEM. */
void *mtp__medium_alloc(mtpi_pool_t *pool, size_t size, bool zero);
/* Hand out again the freed medium block s that the caller kept (its thread's cache) as a block of
 * size bytes: its freed pattern is verified (a write after free is reported), zero as above. */
void *mtp__medium_reuse(mtpi_desc_t *s, size_t size, bool zero);
/* The first step of every free of p, whose head descriptor s was seen as MEDIUM without the lock:
 * checks it (the start of the block, its size if sized) and claims the block for this free, so
 * that of two frees exactly one gets it. Returns 0, or the error code with *what. The caller may
 * then keep the run (mtp__medium_mark_freed, its thread's cache) or free it (mtp__medium_release). */
int mtp__medium_claim(mtpi_desc_t *s, void *p, size_t size, bool sized, const char **what);
/* A claimed block's freed pattern and mark, kept while the caller holds its run. */
void mtp__medium_mark_freed(mtpi_desc_t *s, void *p);
/* Free p (a medium block's start, seen as MEDIUM, checking size if sized) back to its region under
 * the pool lock; misuse is reported. Returns whether a purge became due. */
bool mtp__medium_free(void *p, size_t size, bool sized);
/* Resize the medium block p in place to size bytes (MTP_MAX_SMALL < size <= MTP_MEDIUM_MAX):
 * false if the pages after it are not free (p unchanged). Takes the pool lock; *due: a purge
 * became due (a shrink freed pages). */
bool mtp__medium_resize(void *p, size_t size, bool *due);
/* The usable size of a medium block (its pages). */
static inline size_t mtp__medium_usable(const mtpi_desc_t *s) { return (size_t)s->pages << MTP_PAGE_SHIFT; }

/* ---- packed medium blocks (packed.c: units of packed spans; rules there) ---- */
/* Whether a medium request of size bytes is packed: all but whole pages (64, 128, 192 and 256
 * KiB stay runs). A size just under whole pages packed too: a run of its own would leave holes
 * between spans that few later requests fill (their huge ranges split, bench/results/notes.md). */
static inline bool mtp__packed_fits(size_t size) {
  return size > MTP_MAX_SMALL && size <= MTP_MEDIUM_MAX && (size & (MTP_PAGE_SIZE - 1)) != 0;
}
/* Freed packed blocks that a thread's cache gives back to their spans, and when each was freed;
 * at: one of them with units enough for the request, or NULL. */
typedef struct mtpi_pk_back {
  void *p[MTP_PACKED_CACHED];
  uint64_t time[MTP_PACKED_CACHED];
  unsigned n;
  void *at;
} mtpi_pk_back_t;
/* A packed block of size bytes (mtp__packed_fits) for a pool that is not checked, cut after the
 * blocks of back (NULL: none) went back to their spans: at back->at when given (the thread's own
 * resident units, no span searched), else from the first resident run of a span; zero: its first
 * size bytes read as zero. 512-byte aligned. Takes the pool lock; *due: a purge became due. NULL
 * + ENOMEM. */
void *mtp__packed_alloc(mtpi_pool_t *pool, size_t size, bool zero, const mtpi_pk_back_t *back,
                        bool *due);
/* Hand out again the freed packed block p that the caller kept (its thread's cache) as a block of
 * size bytes (at most its usable size): its freed pattern is verified, zero as above. */
void *mtp__packed_reuse(void *p, size_t size, bool zero);
/* The freed packed block p that the caller keeps becomes two, both still freed and kept: its first
 * n units (p, for mtp__packed_reuse) and the rest, returned (its freed pattern written); NULL, and
 * p unchanged, when the rest would be shorter than a packed block. No lock: the caller holds p. */
void *mtp__packed_split(void *p, unsigned n);
/* The first step of every free of p, whose head s was seen as PACKED without the lock: checks it
 * (a block's start, its size if sized) and claims the block for this free (of two frees exactly
 * one gets it). Returns 0 and *usable, or the error code with *what. */
int mtp__packed_claim(mtpi_desc_t *s, void *p, size_t size, bool sized, size_t *usable,
                      const char **what);
/* A claimed block's freed pattern and poisoning, kept while the caller holds it. */
void mtp__packed_mark_freed(void *p, size_t usable);
/* Pool lock held: the claimed block p's units go back to its span, free at now_ms. */
void mtp__packed_release_locked(mtpi_pool_t *pool, void *p, uint64_t now_ms);
/* The claimed block p of pool goes back to its span: now, under the pool lock, or if the lock is
 * held by the lock's next holder (packed_deferred; the purge passes drain it). Returns whether a
 * purge (or a pass to drain it) became due. */
bool mtp__packed_release(mtpi_pool_t *pool, void *p);
/* Pool lock held: the freed blocks that frees deferred (packed_deferred) go back to their spans. */
void mtp__packed_drain_locked(mtpi_pool_t *pool);
/* Claim p (seen as PACKED) and release it under the pool lock; misuse is reported. Returns
 * whether a purge became due. */
bool mtp__packed_free(void *p, size_t size, bool sized);
/* Whether p is a packed block handed out in span s; then *usable its usable size. No lock. */
bool mtp__packed_lookup(const mtpi_desc_t *s, const void *p, size_t *usable);
/* Pool lock held: spans empty since cutoff go back to their regions; in spans with a release at or
 * before cutoff, the OS pages wholly in units free since the span's last pass are given back (all
 * free ones if force), and the span's pass is next due at now. *left: set if some wait for a
 * later pass. Returns the bytes given back. */
size_t mtp__packed_purge(mtpi_pool_t *pool, uint64_t now, uint64_t cutoff, bool force, bool *left);
/* Pool lock held: fn(arg, block, usable) for each block of span s handed out (not freed); a
 * nonzero return stops the walk and is returned. */
int mtp__packed_each(mtpi_desc_t *s, int (*fn)(void *arg, void *p, size_t usable), void *arg);
/* MTP_DEBUG 2: span s's map against its descriptor. */
void mtp__packed_validate(const mtpi_desc_t *s);

/* ---- large blocks (large.c; a freed block's range is cached: large_ranges.c) ---- */
/* A large block of size bytes (a cached mapping or a new one). NULL + ENOMEM. No lock held.
 * look: NULL, or set to true when the block is to be looked at for dense huge ranges on the
 * purge passes (large_ranges.c): the caller then calls mtp__purger_look, holding no lock. */
void *mtp__large_alloc(mtpi_pool_t *pool, size_t size, size_t alignment, bool *look);
/* The same, zeroed (calloc), for a pool that is not checked; a fresh mapping is not written. */
void *mtp__large_alloc_zero(mtpi_pool_t *pool, size_t size, bool *look);
/* The same, with room for `room` bytes more in its mapping (a block that realloc grows). */
void *mtp__large_alloc_room(mtpi_pool_t *pool, size_t size, size_t room, bool *look);
/* Frees p if it is a large block (checking size if sized). Returns MTP_LARGE_NOT if it is not a
 * large block, MTP_LARGE_CACHED if its mapping was cached and the caller must wake the purge
 * thread (mtp__purger_wake), else MTP_LARGE_FREED (freed, or misuse
 * reported). A free of a block that is cached already is reported as a double free. */
enum { MTP_LARGE_NOT = 0, MTP_LARGE_FREED = 1, MTP_LARGE_CACHED = 2 };
int mtp__large_free(void *p, size_t size, bool sized);
/* Is p a large block? Then *usable gets its usable size and *pool_out (if not NULL) its pool. */
bool mtp__large_lookup(const void *p, size_t *usable, mtpi_pool_t **pool_out);
/* Checked pools: verify the canary past each of pool's live large blocks; found(ctx, address,
 * requested size) for each one written past its end (called under the large lock: it must only
 * record). Returns how many. */
size_t mtp__large_verify(mtpi_pool_t *pool, void (*found)(void *ctx, void *p, size_t size),
                         void *ctx);
/* Resize the large block p (not of a checked pool) to size bytes in its own mapping: grown with
 * mremap (pages move, no copy; `room` bytes more for the next growth), or its tail unmapped when
 * it shrinks by more than a quarter. Returns the block's (maybe new) address, or NULL if it could
 * not (p not such a block, or the OS refused): p is then unchanged. No lock held. */
void *mtp__large_resize(void *p, size_t size, size_t room);
/* Unmap the pool's cached mappings freed at or before older_than_ms (UINT64_MAX: all); collapse:
 * look at LIVE blocks due a look and collapse their dense huge ranges (the purge thread's passes:
 * large_ranges.c); *left (if not NULL): whether some stay cached or are to be looked at. Returns
 * the bytes returned (counted in bytes_returned). Takes the large lock; called with no pool lock
 * held (the registry lock may be). */
size_t mtp__large_purge(mtpi_pool_t *pool, uint64_t older_than_ms, bool collapse, bool *left);
/* Large lock held: no LIVE block is to be looked at any more (a fork's child). */
void mtp__large_forget_looks(mtpi_pool_t *pool);
void mtp__large_destroy_pool(mtpi_pool_t *pool);
extern pthread_mutex_t mtp__large_lock;

/* ---- the default pool and fork handlers (process.c) ---- */
void mtp__fork_prepare(void);
void mtp__fork_parent(void);
void mtp__fork_child(void);

static inline mtpi_pool_t *mtp__pool_in(mtp_pool_t *p) { return (mtpi_pool_t *)p; }
static inline mtp_pool_t *mtp__pool_out(mtpi_pool_t *p) { return (mtp_pool_t *)p; }

#pragma GCC visibility pop

#endif
