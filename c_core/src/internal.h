/* Internal types, invariants and cross-file declarations of the mtpool core.
 *
 * Glossary (one direction of dependency, top calls down):
 *   alloc.c      public entry points and the inline fast paths
 *   heap.c       per-thread, per-pool heaps (the thread caches): slow paths, thread init and exit
 *   checked.c    checked mode: every operation validated under the pool lock
 *   large.c      blocks above MTP_MAX_SMALL, one mapping each
 *   pool.c       pools: registry, create/destroy, trim, the purge thread, fork handlers
 *   stats.c      statistics and reports
 *   slab.c       one slab of one size class: carving, local list, remote (cross-thread) list
 *   region.c     4 MiB regions of 64 KiB pages: page spans, the chunk map, purging
 *   size_class.c size <-> class tables
 *   meta.c       type-stable internal records (pools, heaps, threads, large records)
 *   os.c         the only file that talks to the OS (mmap, munmap, madvise, clock)
 *   options.c, error.c: options from the environment, the misuse handler
 */
#ifndef MTP_INTERNAL_H
#define MTP_INTERNAL_H

#include "mtpool/mtpool.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "atomic.h"

/* Everything declared below is internal to the library: hidden, so that even a position-
 * independent build reaches the chunk map, the class table and the thread-locals directly
 * rather than through the GOT. */
#pragma GCC visibility push(hidden)

/* ------------------------------------------------------------------------------------------------
 * Compiler helpers
 * ----------------------------------------------------------------------------------------------*/
#define MTP_LIKELY(x) __builtin_expect(!!(x), 1)
#define MTP_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define MTP_NOINLINE __attribute__((noinline))
#define MTP_INLINE static inline __attribute__((always_inline))
#define MTP_TLS __thread __attribute__((tls_model("initial-exec")))
#define MTP_CACHE_LINE 64

#if defined(__SANITIZE_THREAD__)
#define MTP_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define MTP_TSAN 1
#endif
#endif
/* Statistics read counters that their owner threads write without atomics (exact once threads are
 * quiet). That read is a deliberate, benign race; it is kept out of ThreadSanitizer's view. */
#if defined(MTP_TSAN)
#define MTP_NO_TSAN __attribute__((no_sanitize("thread")))
#else
#define MTP_NO_TSAN
#endif

/* ------------------------------------------------------------------------------------------------
 * Build-time geometry
 * ----------------------------------------------------------------------------------------------*/
#define MTP_REGION_SHIFT 22 /* 4 MiB regions, aligned to their size: found by masking */
#define MTP_REGION_SIZE ((size_t)1 << MTP_REGION_SHIFT)
/* 64 KiB pages: the unit of slabs and of purging. A page's 128-byte descriptor then costs 0.2% of
 * the memory it describes (16 KiB pages cost 0.8%: almost a byte per element of a list of
 * 40-character strings, measured). */
#define MTP_PAGE_SHIFT 16
#define MTP_PAGE_SIZE ((size_t)1 << MTP_PAGE_SHIFT)
#define MTP_PAGES_PER_REGION (MTP_REGION_SIZE / MTP_PAGE_SIZE)
#define MTP_OS_PAGE 4096
#define MTP_MAX_SMALL 32768  /* largest size class; above it blocks are mapped one each */
#define MTP_DIRECT_MAX 1024  /* sizes up to here find their class with one table load */
#define MTP_MAX_POOLS 1024   /* pool ids 0 (default) .. 1023 */
#define MTP_VA_BITS 48       /* user addresses handed out by mmap stay below 2^48 */
#define MTP_CHUNKMAP_SIZE ((size_t)1 << (MTP_VA_BITS - MTP_REGION_SHIFT))

/* ------------------------------------------------------------------------------------------------
 * Size classes (size_class.c)
 * ----------------------------------------------------------------------------------------------*/
#define MTP_NUM_CLASSES 52
extern const uint8_t mtp__class_direct[MTP_DIRECT_MAX / 8 + 1]; /* [(size+7)>>3] -> class */
extern const uint32_t mtp__class_size[MTP_NUM_CLASSES];
extern const uint8_t mtp__class_pages[MTP_NUM_CLASSES]; /* slab span in pages */
unsigned mtp__class_of(size_t size);                    /* size <= MTP_MAX_SMALL */
/* Smallest class >= size whose blocks are all aligned to alignment; MTP_NUM_CLASSES if none. */
unsigned mtp__class_aligned(size_t size, size_t alignment);

/* ------------------------------------------------------------------------------------------------
 * Blocks and slabs
 * ----------------------------------------------------------------------------------------------*/
typedef struct mtp_block {
  struct mtp_block *next;
} mtp_block_t;

typedef struct mtp_pool mtp_pool_internal_t;
typedef struct mtp_heap mtp_heap_t;
typedef struct mtp_thread mtp_thread_t;
typedef struct mtp_region mtp_region_t;

enum { MTP_PAGE_FREE = 0, MTP_PAGE_SLAB = 1, MTP_PAGE_TAIL = 2, MTP_PAGE_HEADER = 3 };
enum {
  MTP_LIST_NONE = 0,
  MTP_LIST_HEAP_PARTIAL,
  MTP_LIST_HEAP_FULL,
  MTP_LIST_POOL_PARTIAL,
  MTP_LIST_HEAP_CACHE
};

/* Low bits of an owned slab's `owner` word beside the thread token (a pointer, 8-aligned): the
 * free fast path compares the whole word, so a marked slab always takes the slow path. */
#define MTP_OWNER_CACHED 1 /* empty, in the heap's cache: a free into it is a double free */
#define MTP_OWNER_FULL 2   /* exhausted, on the heap's full list: a free moves it to partial */
/* Exhausted slabs a heap keeps owned per size class before it detaches the oldest: enough that
 * a thread freeing into the slabs it just filled stays on its own lists, few enough that an idle
 * thread strands little memory that other threads free. */
#define MTP_FULL_PER_CLASS 2

/* The remote free list word (thread_free): bits 0..47 the list head, bits 48..61 the number of
 * blocks on the list, bit 62 LISTED (detached and on the pool's partial list: set and cleared
 * under the pool lock), bit 63 OWNED. */
#define MTP_TF_PTR_MASK (((uintptr_t)1 << MTP_VA_BITS) - 1)
#define MTP_TF_COUNT_SHIFT MTP_VA_BITS
#define MTP_TF_COUNT_ONE ((uintptr_t)1 << MTP_TF_COUNT_SHIFT)
#define MTP_TF_LISTED ((uintptr_t)1 << 62)
#define MTP_TF_OWNED ((uintptr_t)1 << 63)
#define MTP_TF_FLAGS (MTP_TF_OWNED | MTP_TF_LISTED)
#define MTP_TF_COUNT(w) ((uint32_t)(((w) & ~MTP_TF_FLAGS) >> MTP_TF_COUNT_SHIFT))
#define MTP_TF_PTR(w) ((mtp_block_t *)((w) & MTP_TF_PTR_MASK))

/* One descriptor per 64 KiB page of a region, out of band in the region header. A slab spans
 * `pages` pages; its first page's descriptor describes it (kind SLAB), the others are TAIL.
 *
 * Ownership. A slab is either OWNED by one heap (thread_free has MTP_TF_OWNED; `owner` holds the
 * owning thread's token) or DETACHED (no owner: full when its owner moved on, or abandoned at
 * thread exit). Who may write what:
 *   free, used, bump           the owner thread while OWNED; while DETACHED nobody, until a
 *                              thread adopts the slab under the pool lock.
 *   owner                      the owning thread (relaxed atomic: other threads read it to learn
 *                              that a block is not theirs; a stale read only sends them to the
 *                              remote path, which is always correct). 0 when detached; the
 *                              thread's token | MTP_OWNER_FULL or | MTP_OWNER_CACHED while the
 *                              slab sits on its heap's full list or cache, so that the free fast
 *                              path's single compare fails and the slow path sees why.
 *   thread_free                any thread, by CAS (release on push, so the pushed block's `next`
 *                              is visible to the thread that takes the list with acquire).
 *   detached_used              the detaching thread, before the CAS that clears OWNED (release);
 *                              read by remote freers after their CAS (acquire): constant while
 *                              DETACHED.
 *   next, prev, list           the owner (heap lists) or the pool lock (pool lists).
 *   cls, block_size, end,      set when the slab is formatted, under the pool lock, before the
 *   pages, kind, capacity      slab is handed to any thread; constant until it is released.
 * Counting identities (MTP_USED strips the current-slab bias from used):
 *   OWNED:    blocks in use = MTP_USED - TF_COUNT(thread_free);  MTP_USED + |free| + unbumped
 *             == capacity
 *   DETACHED: blocks in use = detached_used - TF_COUNT(thread_free)
 * A detached slab whose count reaches detached_used is entirely free: the thread whose CAS got it
 * there (exactly one) releases it under the pool lock, unless a thread adopted it first.
 * Adoption (DETACHED -> OWNED) is one CAS on thread_free. A slab on the pool's partial list
 * carries LISTED and is adopted only under the pool lock (which owns the list); an unlisted one
 * may be taken back by the heap that detached it without the lock.
 */
/* While a slab is its heap's current slab, `used` carries this bias, so that the free fast path's
 * `--used == 0` (slab empty: retire it) never fires for the slab being allocated from. */
#define MTP_USED_CURRENT ((uint32_t)1 << 31)
#define MTP_USED(s) ((s)->used & ~MTP_USED_CURRENT)

typedef struct mtp_slab {
  /* first cache line: the owner's */
  mtp_block_t *free;
  uint32_t used;
  uint32_t block_size;
  char *bump; /* next block never handed out; == end when the slab has been carved fully */
  uint32_t size_min;  /* smallest request that maps to this class (a sized free checks */
  uint32_t size_span; /* size - size_min <= size_span in one compare) */
  mtp_atomic_uptr owner;
  mtp_heap_t *heap; /* heap that owns it, or owned it last (type-stable memory) */
  struct mtp_slab *next, *prev;
  /* second cache line: shared */
  mtp_atomic_uptr thread_free __attribute__((aligned(MTP_CACHE_LINE)));
  uint32_t detached_used;
  uint32_t capacity;
  char *end;
  uint16_t cls;
  uint8_t pages;
  uint8_t kind;
  uint8_t list;
  uint8_t checked;
  uint16_t head_delta; /* TAIL: index distance back to the SLAB descriptor */
  uint64_t free_time_ms; /* FREE page: when it became free; cached slab: when it was cached */
  uint8_t *check_bits;   /* checked mode: allocation bitmap (one bit per block) */
} mtp_slab_t;

_Static_assert(sizeof(mtp_slab_t) == 2 * MTP_CACHE_LINE, "slab descriptor is two cache lines");

/* ------------------------------------------------------------------------------------------------
 * Regions (region.c)
 * ----------------------------------------------------------------------------------------------*/
#define MTP_REGION_MAGIC 0x6d74706f6f6c5247ull

/* A region header sits at the start of its 4 MiB region; all fields under the pool lock. */
typedef struct mtp_region_hdr {
  uint64_t magic;
  mtp_pool_internal_t *pool;
  mtp_region_t *next, *prev; /* the pool's region list */
  uint64_t free_mask[MTP_PAGES_PER_REGION / 64];  /* 1: page free */
  uint64_t dirty_mask[MTP_PAGES_PER_REGION / 64]; /* 1: free page that may be resident */
  uint32_t free_pages;
} mtp_region_hdr_t;

struct mtp_region {
  mtp_region_hdr_t h;
  mtp_slab_t slabs[MTP_PAGES_PER_REGION] __attribute__((aligned(MTP_CACHE_LINE)));
};

#define MTP_REGION_HEADER_PAGES ((sizeof(mtp_region_t) + MTP_PAGE_SIZE - 1) / MTP_PAGE_SIZE)

/* The chunk map: one byte per 4 MiB of the address space, 1 where a region lives. Relaxed atomic
 * bytes: written under the pool lock at map and unmap; read by every free to reject pointers that
 * are not ours before touching any metadata. */
extern _Atomic(uint8_t) mtp__chunkmap[MTP_CHUNKMAP_SIZE];

MTP_INLINE bool mtp__is_region_ptr(uintptr_t u) {
  uintptr_t idx = u >> MTP_REGION_SHIFT;
  return idx < MTP_CHUNKMAP_SIZE &&
         atomic_load_explicit(&mtp__chunkmap[idx], memory_order_relaxed) != 0;
}
MTP_INLINE mtp_region_t *mtp__region_of(uintptr_t u) {
  return (mtp_region_t *)(u & ~(MTP_REGION_SIZE - 1));
}
/* The descriptor of p's page: region base + header + page index * 128, in shifts and masks. */
MTP_INLINE mtp_slab_t *mtp__page_desc(uintptr_t u) {
  _Static_assert(sizeof(mtp_slab_t) == 128, "descriptor size is a shift");
  uintptr_t page_off = (u >> (MTP_PAGE_SHIFT - 7)) & ((MTP_PAGES_PER_REGION - 1) << 7);
  return (mtp_slab_t *)((u & ~(MTP_REGION_SIZE - 1)) + offsetof(mtp_region_t, slabs) + page_off);
}
static inline char *mtp__slab_start(mtp_slab_t *s) {
  mtp_region_t *r = mtp__region_of((uintptr_t)s);
  return (char *)r + ((size_t)(s - r->slabs) << MTP_PAGE_SHIFT);
}
static inline mtp_pool_internal_t *mtp__slab_pool(mtp_slab_t *s) {
  return mtp__region_of((uintptr_t)s)->h.pool;
}

/* all under the pool lock */
mtp_slab_t *mtp__region_alloc_span(mtp_pool_internal_t *pool, unsigned pages);
/* Take the range to fault in that the last alloc_span left (NULL, 0 if none); fault it in with
 * mtp__os_populate after unlocking. Pages of it may be handed out meanwhile: populating present
 * pages changes nothing. */
void mtp__region_take_populate(mtp_pool_internal_t *pool, void **at, size_t *len);
void mtp__region_free_span(mtp_pool_internal_t *pool, mtp_slab_t *s, uint64_t now_ms);
size_t mtp__region_purge(mtp_pool_internal_t *pool, uint64_t now_ms, bool force);
void mtp__region_unmap_all(mtp_pool_internal_t *pool);
/* Valgrind builds: tell memcheck that every block still in use in pool is freed (pool destroy). */
void mtp__region_forget_blocks(mtp_pool_internal_t *pool);

/* ------------------------------------------------------------------------------------------------
 * Slabs (slab.c)
 * ----------------------------------------------------------------------------------------------*/
void mtp__slab_format(mtp_slab_t *s, unsigned cls, bool checked);
/* `heap` is read by other threads (to recognise a slab they owned): relaxed atomic access. */
static inline mtp_heap_t *mtp__slab_heap(mtp_slab_t *s) {
  return __atomic_load_n(&s->heap, __ATOMIC_RELAXED);
}
static inline void mtp__slab_set_heap(mtp_slab_t *s, mtp_heap_t *h) {
  __atomic_store_n(&s->heap, h, __ATOMIC_RELAXED);
}
/* Owner: carve fresh blocks from the bump area into s->free; returns false if none are left. */
bool mtp__slab_extend(mtp_slab_t *s);
/* Owner: take the remote list into s->free; returns the number of blocks taken. */
uint32_t mtp__slab_collect(mtp_slab_t *s);
/* Owner: give up an exhausted slab (free list and bump area empty). false: remote frees arrived
 * (they are collected into s->free) and the slab stays owned. */
bool mtp__slab_detach(mtp_slab_t *s);
/* Make a detached slab owned by heap. false if it was adopted already, or if it is LISTED and
 * `listed_ok` is false (only a holder of the pool lock may adopt a listed slab). */
bool mtp__slab_adopt(mtp_slab_t *s, mtp_heap_t *heap, bool listed_ok);
/* Pool lock held: mark a detached slab LISTED before putting it on the pool's partial list.
 * false if it was adopted meanwhile or is listed already (then it must not be listed again). */
bool mtp__slab_mark_listed(mtp_slab_t *s);
/* Any thread: push b onto a slab that the caller does not own. */
void mtp__slab_free_remote(mtp_slab_t *s, mtp_block_t *b);

/* ------------------------------------------------------------------------------------------------
 * Heaps and threads (heap.c)
 * ----------------------------------------------------------------------------------------------*/
/* A heap is one thread's cache of one pool: it owns the slabs it allocates from. Fields are the
 * owner thread's, except: pool (relaxed atomic; set to 0 by pool destroy under the registry lock),
 * pool_next/pool_prev (pool lock), cache/cache_bytes (cache_lock, taken by the owner and by trim or
 * the purge thread). Heap records are type-stable: never unmapped, so a stale pointer to one can
 * still be read safely. */
struct mtp_heap {
  mtp_slab_t *current[MTP_NUM_CLASSES]; /* allocate from here; &mtp__slab_empty when none */
  mtp_slab_t *partial[MTP_NUM_CLASSES]; /* owned slabs with free blocks, not current */
  mtp_slab_t *full[MTP_NUM_CLASSES];    /* owned exhausted slabs (owner marked FULL) */
  uint8_t full_count[MTP_NUM_CLASSES];
  uint64_t allocs;                      /* cumulative small allocations */
  uint64_t remote_collected;            /* cumulative blocks freed by other threads */
  mtp_thread_t *thread;                 /* owner */
  mtp_atomic_uptr pool;                 /* mtp_pool_internal_t*, 0 once destroyed */
  mtp_heap_t *pool_next, *pool_prev;
  mtp_atomic_int cache_lock;
  mtp_slab_t *cache; /* empty slabs kept for reuse (singly linked by next) */
  size_t cache_bytes;
  mtp_heap_t *free_next; /* meta free list */
};

/* Per-thread record; its address is the thread's ownership token. */
struct mtp_thread {
  mtp_heap_t *heaps[MTP_MAX_POOLS];
  mtp_thread_t *free_next;
  bool registered; /* thread-exit destructor installed */
};

extern mtp_heap_t mtp__heap_empty;
extern mtp_slab_t mtp__slab_empty;
extern mtp_thread_t mtp__thread_empty;
extern MTP_TLS mtp_heap_t *mtp__tl_default_heap;
extern MTP_TLS mtp_thread_t *mtp__tl_thread;

void *mtp__heap_alloc_slow(mtp_pool_internal_t *pool, size_t size);
void *mtp__heap_alloc_class(mtp_pool_internal_t *pool, unsigned cls);
void mtp__heap_free_slow(mtp_slab_t *s, mtp_block_t *b);
void mtp__heap_retire_local(mtp_slab_t *s);
/* Registry lock held: drop every slab of heap h back to its pool (thread exit, flush). */
void mtp__heap_abandon(mtp_heap_t *h);
/* Take and release the empty slabs that h caches (trim, purge); pool lock held. */
size_t mtp__heap_drain_cache(mtp_heap_t *h, uint64_t older_than_ms, uint64_t now_ms);
bool mtp__heap_caches(mtp_heap_t *h); /* h keeps empty slabs */

/* ------------------------------------------------------------------------------------------------
 * Pools (pool.c)
 * ----------------------------------------------------------------------------------------------*/
struct mtp_pool {
  uint32_t id;
  char name[48];
  long purge_delay_ms;
  size_t thread_cache_bytes;
  int check;
  pthread_mutex_t lock;
  /* under lock */
  mtp_region_t *regions;
  mtp_slab_t *partial[MTP_NUM_CLASSES]; /* detached slabs worth adopting (doubly linked) */
  mtp_heap_t *heaps;                    /* live heaps */
  mtp_slab_t *checked_current[MTP_NUM_CLASSES];
  uint64_t dead_allocs, dead_remote; /* counters of heaps that are gone */
  uint64_t checked_allocs;
  uint64_t bytes_returned;
  size_t mapped_bytes;
  size_t clean_bytes; /* mapped pages known not resident: never used, or purged */
  unsigned fresh_streak; /* spans taken from never-touched pages in a row (region.c) */
  void *populate_at; /* a range region.c asks the caller to fault in, outside the lock */
  size_t populate_len;
  /* large blocks: under the large lock */
  struct mtp_large *large;
  size_t large_count, large_bytes;
  uint64_t large_allocs;
  /* registry (registry lock) */
  mtp_pool_internal_t *reg_next, *reg_prev;
};

extern mtp_pool_internal_t *mtp__default_pool_ptr;
mtp_pool_internal_t *mtp__default_pool_init(void);
static inline mtp_pool_internal_t *mtp__default(void) {
  mtp_pool_internal_t *p = mtp__default_pool_ptr;
  return MTP_LIKELY(p != NULL) ? p : mtp__default_pool_init();
}
extern pthread_mutex_t mtp__registry_lock; /* pools list, pool ids, heap<->pool binding */
extern mtp_pool_internal_t *mtp__pools;
mtp_pool_internal_t *mtp__pool_by_id(uint32_t id);
void mtp__pool_lock(mtp_pool_internal_t *p);
void mtp__pool_unlock(mtp_pool_internal_t *p);
/* Pool lock held: pages were freed; make sure they are purged in time. */
void mtp__pool_note_free_pages(mtp_pool_internal_t *p, uint64_t now_ms);
/* No mtpool lock held: create the purge thread if a notification asked for it. */
void mtp__purger_start(void);
/* Pool lock held: release a slab that holds no block. */
void mtp__pool_release_slab(mtp_pool_internal_t *p, mtp_slab_t *s, uint64_t now_ms);
/* Pool lock held: list helpers for pool->partial. */
void mtp__pool_partial_push(mtp_pool_internal_t *p, mtp_slab_t *s);
void mtp__pool_partial_remove(mtp_pool_internal_t *p, mtp_slab_t *s);

/* ------------------------------------------------------------------------------------------------
 * Large blocks (large.c), checked mode (checked.c)
 * ----------------------------------------------------------------------------------------------*/
typedef struct mtp_large {
  void *ptr;          /* what the user holds */
  void *map;          /* the mapping */
  size_t map_size;
  size_t size;        /* requested */
  mtp_pool_internal_t *pool;
  struct mtp_large *hash_next;
  struct mtp_large *pool_next, *pool_prev;
} mtp_large_t;

void *mtp__large_alloc(mtp_pool_internal_t *pool, size_t size, size_t alignment);
/* Frees p if it is a large block (checking size unless it is 0). false: not a large block. */
bool mtp__large_free(void *p, size_t size, bool sized);
/* Is p a large block? Then *usable gets its usable size and *pool_out (if not NULL) its pool. */
bool mtp__large_lookup(const void *p, size_t *usable, mtp_pool_internal_t **pool_out);
void mtp__large_destroy_pool(mtp_pool_internal_t *pool);
extern pthread_mutex_t mtp__large_lock;

void *mtp__checked_alloc(mtp_pool_internal_t *pool, size_t size, size_t alignment);
void mtp__checked_free(mtp_slab_t *s, void *p, size_t size, bool sized);
size_t mtp__checked_usable(mtp_slab_t *s, const void *p);
void *mtp__checked_find_corrupt(mtp_pool_internal_t *pool); /* pool lock held */

/* ------------------------------------------------------------------------------------------------
 * Internal records (meta.c), options (options.c), errors (error.c), stats (stats.c)
 * ----------------------------------------------------------------------------------------------*/
void *mtp__meta_alloc(size_t size); /* zeroed, never unmapped; NULL on OOM */
void mtp__meta_free(void *p, size_t size);
extern pthread_mutex_t mtp__meta_lock;

void mtp__options_from_env(mtp_options_t *opt);
void mtp__options_sanitize(mtp_options_t *opt);

void mtp__error(int err, const char *what, const void *p);

void mtp__stats_collect(mtp_pool_internal_t *pool, mtp_stats_t *out);

/* fork handlers (pool.c) */
void mtp__fork_prepare(void);
void mtp__fork_parent(void);
void mtp__fork_child(void);

static inline mtp_pool_internal_t *mtp__pool_in(mtp_pool_t *p) { return (mtp_pool_internal_t *)p; }
static inline mtp_pool_t *mtp__pool_out(mtp_pool_internal_t *p) { return (mtp_pool_t *)p; }

#pragma GCC visibility pop

#endif
