/* The pool layer: what a pool shares among its threads. The registry of pools, the lists of
 * detached slabs and their adoption, the release of empty slabs to the region layer, the heaps'
 * empty-slab caches (as mtpi_member_t: the part of a heap this layer may touch), trimming, the
 * purge thread, the fork handlers; large blocks (large.c).
 *
 * Locks, in order: registry, pool (in registry order), large, meta, purger. No function here
 * calls anything that may call malloc (pthread_create, pthread_atfork, stdio) with one of them
 * held, nor inside the default pool's pthread_once: a process that routes malloc into mtpool
 * would re-enter. Layer: pool (above slab). */
#ifndef MTP_POOL_H
#define MTP_POOL_H

#include "slab/slab.h"

#pragma GCC visibility push(hidden)

/* ---- registry (pool.c) ---- */
extern pthread_mutex_t mtp__registry_lock; /* pools list, pool ids, heap<->pool binding */
extern mtpi_node_t *mtp__pools;            /* live pools, by reg_link (registry lock) */
/* The default pool, 0 until its first use. Written once (release) inside its pthread_once;
 * read with acquire, so a reader that sees the pointer sees the initialised pool. */
extern mtpi_atomic_uptr mtp__default_pool_ptr;
mtpi_pool_t *mtp__default_pool_init(void);
static inline mtpi_pool_t *mtp__default(void) {
  mtpi_pool_t *p = (mtpi_pool_t *)mtp__load_acquire(&mtp__default_pool_ptr);
  return MTP_LIKELY(p != NULL) ? p : mtp__default_pool_init();
}
static inline bool mtp__is_default(const mtpi_pool_t *p) {
  return p == (const mtpi_pool_t *)mtp__load_acquire(&mtp__default_pool_ptr);
}
static inline mtpi_pool_t *mtp__pool_from_reg(mtpi_node_t *n) {
  return n ? MTP_CONTAINER(n, mtpi_pool_t, reg_link) : NULL;
}
mtpi_pool_t *mtp__pool_by_id(uint32_t id); /* registry lock held */
/* A new pool (options checked; the default pool also reads the environment). NULL + ENOMEM. */
mtpi_pool_t *mtp__pool_new(const mtp_options_t *opt, bool is_default);
/* Unbind every heap, unmap every region and large block, and free the record. No thread may
 * use the pool any more. */
void mtp__pool_free(mtpi_pool_t *p);
/* Return every empty page of p now, cached slabs included. Returns the bytes returned. */
size_t mtp__pool_trim(mtpi_pool_t *p);
/* mtp__pool_trim for every live pool, under the registry lock. */
size_t mtp__pool_trim_all(void);

/* The pool whose region holds page descriptor s. */
static inline mtpi_pool_t *mtp__pool_of_page(const mtpi_desc_t *s) {
  return MTP_CONTAINER(mtp__page_set(s), mtpi_pool_t, rs);
}

void mtp__pool_lock(mtpi_pool_t *p);
/* Unlock, then wake the purge thread if something done under the lock made a purge due. */
void mtp__pool_unlock(mtpi_pool_t *p);
/* Unlock without waking; returns whether the caller must call mtp__purger_wake (once it holds no
 * lock). */
bool mtp__pool_unlock_defer(mtpi_pool_t *p);
/* Pages became free, a slab was cached or a large mapping kept: have them purged after the delay.
 * Until it is worth a thread (pool.c: PURGER_START_BYTES waiting, or a second heap in a pool)
 * this purges what is due in the calling thread and starts none. No lock held. */
void mtp__purger_wake(void);
/* From now on wakes start and signal the purge thread. Any lock may be held. */
void mtp__purger_eager(void);

/* ---- heaps as members (pool.c) ---- */
static inline mtpi_pool_t *mtp__member_pool(mtpi_member_t *m) {
  /* relaxed: the binding is read by the heap's own thread; destroy's store of 0 is ordered for
   * it by the registry lock or by the caller's contract (no use of a destroyed pool) */
  return (mtpi_pool_t *)mtp__load_relaxed(&m->pool);
}
/* m joins p's members. Returns whether p had a member already (another thread's heap). */
bool mtp__pool_join(mtpi_pool_t *p, mtpi_member_t *m);
/* Pool lock held: m's counters go to the pool's, m leaves the list and is unbound. */
void mtp__pool_leave_locked(mtpi_pool_t *p, mtpi_member_t *m);

/* ---- empty-slab caches (pool.c) ---- */
/* The owner: an empty slab for class cls from m's cache, or NULL: one last formatted for cls
 * (*formatted: its free list and bump pointer kept), else one of as many pages (to format). */
mtpi_desc_t *mtp__cache_take(mtpi_member_t *m, unsigned cls, bool *formatted);
/* The owner: a freed span (span.c) of `pages` to `most` pages from m's cache (the newest of
 * exactly `pages`, else the shortest), out of it, or NULL. */
mtpi_desc_t *mtp__cache_take_medium(mtpi_member_t *m, unsigned pages, unsigned most);
/* The owner: keep the empty slab or freed span s in m's cache if the pool's options allow, else
 * release it to the pool. Takes the locks it needs. */
void mtp__cache_put_or_release(mtpi_pool_t *p, mtpi_member_t *m, mtpi_desc_t *s);
/* Pool lock held: the heap leaves; every slab in m's cache goes to the pool's empty slabs
 * (pool.c), to be taken by any thread's next slab of its class; every span to its region. */
void mtp__cache_abandon_locked(mtpi_pool_t *p, mtpi_member_t *m);
/* Pool lock held: release the cached slabs cached at or before older_than_ms; returns bytes. */
size_t mtp__cache_drain_locked(mtpi_pool_t *p, mtpi_member_t *m, uint64_t older_than_ms,
                               uint64_t now_ms);

/* ---- slabs (pool.c) ---- */
/* A slab of class cls for the heap (tag heap, membership m, token owner_token): adopted from the
 * pool's list of detached slabs (then *collected is the count of blocks freed into it meanwhile),
 * else one of the pool's empty slabs (of cls first, else of a class of as many pages), else
 * freshly formatted from free pages, preferably in the region m claimed (region.h). NULL +
 * ENOMEM. Takes the pool lock. It never wakes the purger itself: *wake says that the caller must
 * (mtp__purger_wake), once its heap is consistent again. The wake may create the purge thread,
 * and pthread_create allocates, which re-enters mtpool on this thread when mtpool is malloc: a
 * nested allocation in the middle of the caller's slow path would find the slab half installed. */
mtpi_desc_t *mtp__pool_slab_get(mtpi_pool_t *p, unsigned cls, void *heap, mtpi_member_t *m,
                                uintptr_t owner_token, uint32_t *collected, bool *wake);
/* Adopt a detached slab that may be on the pool's list (the heap that detached it wants it back
 * on a free). false if another thread owns it now. Takes the pool lock. */
bool mtp__pool_adopt(mtpi_pool_t *p, mtpi_desc_t *s, void *heap, uintptr_t owner_token,
                     uint32_t *collected);
/* A remote free returned MTP_REMOTE_NEWS for s (seen: what it read before its push): release s
 * if it is empty, else list it for adoption, unless it was adopted, released or unmapped
 * meanwhile. Takes the lock of seen's pool. */
void mtp__pool_detached_news(const mtpi_remote_seen_t *seen, mtpi_desc_t *s);
/* Pool lock held: a fresh span of `pages` pages (unformatted), or NULL + ENOMEM. Pages it leaves
 * resident ahead are noted for the purge; the fault-in range is dropped (checked mode). */
mtpi_desc_t *mtp__pool_run_locked(mtpi_pool_t *p, unsigned pages);
/* Pool lock held: a slab that holds no block goes back to the pool: kept for its class among the
 * pool's empty slabs until the purge delay passes (pool.c), or, with a delay of 0 or in checked
 * mode, to the region layer at once; a freed medium block's span (span.c) always goes at once. */
void mtp__pool_release_locked(mtpi_pool_t *p, mtpi_desc_t *s, uint64_t now_ms);
/* Pool lock held: list a detached slab for adoption (if still detached and not listed). */
void mtp__pool_list_detached_locked(mtpi_pool_t *p, mtpi_desc_t *s);

/* ---- medium blocks (span.c: pages of the pool's regions; rules there) ---- */
/* A medium block of size bytes (MTP_MAX_SMALL < size <= MTP_MEDIUM_MAX, or smaller for an
 * alignment up to MTP_PAGE_SIZE), for a pool that is not checked; zero: its first size bytes read
 * as zero (calloc). 64 KiB aligned. m: the calling thread's membership of the pool, or NULL: a
 * span of as many pages from its cache first, without a lock. Else takes the pool lock. NULL +
 * ENOMEM. */
void *mtp__medium_alloc(mtpi_pool_t *pool, mtpi_member_t *m, size_t size, bool zero);
/* Free p, whose page's head descriptor was seen as SPAN (checking size if sized); misuse is
 * reported (double free, interior pointer, wrong size). From any thread. m: the calling thread's
 * membership of p's pool, or NULL: the span goes to m's cache (mtp__cache_put_or_release) when
 * the pool caches, else back to its region under the pool lock. May purge (errno is the caller's
 * to keep). */
void mtp__medium_free(mtpi_member_t *m, void *p, size_t size, bool sized);
/* Resize the medium block p in place to size bytes (MTP_MAX_SMALL < size <= MTP_MEDIUM_MAX): false
 * if the pages after it are not free (p unchanged). Takes the pool lock. */
bool mtp__medium_resize(void *p, size_t size);
/* The usable size of a medium block (its pages). */
static inline size_t mtp__medium_usable(const mtpi_desc_t *s) { return (size_t)s->pages << MTP_PAGE_SHIFT; }

/* ---- large blocks (large.c; a freed block's mapping is cached: see there) ---- */
/* A large block of size bytes (a cached mapping or a new one). NULL + ENOMEM. No lock held. */
void *mtp__large_alloc(mtpi_pool_t *pool, size_t size, size_t alignment);
/* The same, zeroed (calloc), for a pool that is not checked; a fresh mapping is not written. */
void *mtp__large_alloc_zero(mtpi_pool_t *pool, size_t size);
/* The same, with room for `room` bytes more in its mapping (a block that realloc grows). */
void *mtp__large_alloc_room(mtpi_pool_t *pool, size_t size, size_t room);
/* Frees p if it is a large block (checking size if sized). Returns MTP_LARGE_NOT if it is not a
 * large block, MTP_LARGE_CACHED if its mapping was cached and the caller must wake the purge
 * thread (mtp__purger_wake: large.c sits below pool.c), else MTP_LARGE_FREED (freed, or misuse
 * reported). A free of a block that is cached already is reported as a double free. */
enum { MTP_LARGE_NOT = 0, MTP_LARGE_FREED = 1, MTP_LARGE_CACHED = 2 };
int mtp__large_free(void *p, size_t size, bool sized);
/* Is p a large block? Then *usable gets its usable size and *pool_out (if not NULL) its pool. */
bool mtp__large_lookup(const void *p, size_t *usable, mtpi_pool_t **pool_out);
/* Resize the large block p (not of a checked pool) to size bytes in its own mapping: grown with
 * mremap (pages move, no copy; `room` bytes more for the next growth), or its tail unmapped when
 * it shrinks by more than a quarter. Returns the block's (maybe new) address, or NULL if it could
 * not (p not such a block, or the OS refused): p is then unchanged. No lock held. */
void *mtp__large_resize(void *p, size_t size, size_t room);
/* Unmap the pool's cached mappings freed at or before older_than_ms (UINT64_MAX: all); *left (if
 * not NULL): whether some stay cached. Returns the bytes returned (counted in bytes_returned).
 * Takes the large lock; may be called with the registry and pool locks held. */
size_t mtp__large_purge(mtpi_pool_t *pool, uint64_t older_than_ms, bool *left);
void mtp__large_destroy_pool(mtpi_pool_t *pool);
extern pthread_mutex_t mtp__large_lock;

/* ---- fork handlers (pool.c) ---- */
void mtp__fork_prepare(void);
void mtp__fork_parent(void);
void mtp__fork_child(void);

static inline mtpi_pool_t *mtp__pool_in(mtp_pool_t *p) { return (mtpi_pool_t *)p; }
static inline mtp_pool_t *mtp__pool_out(mtpi_pool_t *p) { return (mtp_pool_t *)p; }

#pragma GCC visibility pop

#endif
