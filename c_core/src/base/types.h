/* The core's data: every internal type, its invariants, and who may write each field.
 *
 * Glossary (one term per idea; the code's names follow it):
 *   region       4 MiB of address space aligned to 4 MiB, cut into pages; its header (mtpi_region_t,
 *                one page descriptor per page) lies just below it, behind a PROT_NONE reservation.
 *                Found from any address by masking.
 *   page         the region's 64 KiB unit (MTP_PAGE_SIZE), a whole number of OS pages.
 *   run          consecutive pages of one region, taken from and given back to it together.
 *   descriptor   the page descriptor (mtpi_desc_t), out of band in the region header; its kind
 *                says what its page is: FREE (in no run), SLAB, MEDIUM or PACKED (the first page
 *                of a slab, a medium block or a packed span), TAIL (a later page of a run: head
 *                names the first), HEADER (the region's own pages). mtp__run_of(p): the first
 *                descriptor of p's run.
 *   busy         a FREE page out for a purge's OS call (region/purge.c): in no run, in no search.
 *   huge range   an aligned 2 MiB range of a region (or of a large block's range) that one huge
 *                page may back; huge_mask: those advised MADV_HUGEPAGE (the rule: base.h).
 *   slab         a run formatted into blocks of one size class: small blocks, up to 32 KiB.
 *   medium block above 32 KiB, to MTP_MEDIUM_MAX: a run of whole pages of its own (pool/medium.c),
 *                or units of a packed span.
 *   packed span  a run of MTP_SPAN_PAGES pages cut into units, holding medium blocks of any length
 *                in units, several to a page (pool/packed.c; as wholes: pool/span.c).
 *   unit         a packed span's 512-byte step (MTP_UNIT_SIZE): a packed block is whole units.
 *   large block  above that: a range of its own mapping, kept in a hash (pool/large.c).
 *   pool         an independent heap of the process (struct mtp_pool): regions, slabs no thread
 *                owns, large blocks, options; the default pool serves mtp_alloc and malloc.
 *   heap         one thread's state in one pool (mtpi_heap_t): the slabs it owns, its reuse lists,
 *                its cache; as seen by the pool layer, its membership (mtpi_member_t).
 *   thread record  a thread's heaps (mtpi_thread_t); its address is the thread's owner token.
 *   shared heap  a heap of no thread in each pool, serving threads' first blocks of a class.
 *   slab states  owned by a heap: current (allocated from), partial (room, queued), full
 *                (exhausted, owner word marked), cached (empty, in the heap's cache); detached (no
 *                owner, blocks in use), listed (detached, on the pool's partial list for
 *                adoption); pool-empty (empty, kept formatted by the pool); released (its pages
 *                free in the region).
 *   reuse list   per heap and class, blocks the thread freed into its own slabs, handed out first.
 *   remote free  a free by a thread that does not own the block's slab: a CAS onto its list.
 *   purge        giving a free page's memory back to the OS (madvise) once the purge delay passed.
 *
 * Layers, bottom up (each file includes and names only its own layer and those below; the order is
 * checked by tools/check_layers.py from c_core/src/layers.txt):
 *   base/    this header, atomics, tool annotations, lists, asserts, size classes, OS, internal
 *            records (meta), options, errors
 *   region/  regions, their page descriptors, the chunk map, free pages and their purge
 *   slab/    one slab's state machine: carving, local and remote free lists, detach, adopt
 *   pool/    what a pool's threads share: registry, slabs no thread owns, purging, the default
 *            pool and fork handlers, medium and large blocks
 *   heap/    everything per thread: thread records, heaps, their slabs, reuse lists and caches,
 *            the shared heaps; checked mode
 *   api/     public entry points and their inline fast paths; statistics and the heap walk
 * A lower layer that has news for an upper one (a slab became empty, a purge became due) returns
 * it; the caller acts. Types are all defined here, in base, so that a layer can name a record it
 * is handed; which layer may WRITE which field is stated at each field.
 *
 * Internal types are named mtpi_*; functions and globals mtp__*; the public API mtp_*. */
#ifndef MTP_TYPES_H
#define MTP_TYPES_H

#include "mtpool/mtpool.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "atomic.h"
#include "list.h"

/* Everything internal is hidden, so that even a position-independent build reaches the chunk map,
 * the class table and the thread-locals directly rather than through the GOT. */
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
#define MTP_CONTAINER(ptr, type, field) ((type *)(void *)((char *)(ptr)-offsetof(type, field)))

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
 * the memory it describes. 64 KiB is also the largest OS page supported (aarch64 64 KiB kernels):
 * an mtpool page is always a whole number of OS pages. */
#define MTP_PAGE_SHIFT 16
#define MTP_PAGE_SIZE ((size_t)1 << MTP_PAGE_SHIFT)
#define MTP_PAGES_PER_REGION (MTP_REGION_SIZE / MTP_PAGE_SIZE)
#define MTP_MAX_SMALL 32768  /* largest size class; above it, medium and large blocks */
/* Medium blocks: a request in (MTP_MAX_SMALL, MTP_MEDIUM_MAX] gets a run of whole pages of the
 * pool's regions (pool/medium.c); above it, a large block (pool/large.c). At most a region's usable
 * pages (region.h checks). */
#ifndef MTP_MEDIUM_MAX
#define MTP_MEDIUM_MAX ((size_t)256 << 10)
#endif
/* Shared heaps per pool (heap/shared.c, cold classes): threads on different CPUs take their first blocks
 * under different locks. */
#define MTP_SHARED_HEAPS 4
#define MTP_DIRECT_MAX 1024  /* class tables: 8-byte steps up to here, then 16-byte steps */
#define MTP_UPPER_SHIFT 4    /* the upper table's step, 16 B: every class above 1 KiB is a multiple */
#define MTP_MAX_POOLS 1024   /* pool ids 0 (default) .. 1023 */
#define MTP_VA_BITS 48       /* user addresses handed out by mmap stay below 2^48 */
#define MTP_CHUNKMAP_SIZE ((size_t)1 << (MTP_VA_BITS - MTP_REGION_SHIFT))
/* Size classes (size_class.c, made by tools/size_classes.py). Any count up to 256 (a class index
 * is a byte in the lookup tables, checked there); the public mtp_stats_t lists the first
 * MTP_STATS_MAX_CLASSES, mtp_pool_class_stats every one. */
#define MTP_NUM_CLASSES 65

/* ------------------------------------------------------------------------------------------------
 * Blocks and page descriptors
 * ----------------------------------------------------------------------------------------------*/
/* Free-list links. A free block's first word holds its successor ENCODED: next ^ mtp__link_key
 * (base/track.h), NULL included, on the owner's list (page `free`) and on the remote list
 * (thread_free) alike; heads are stored plain. The key is random per process, its top 16 bits
 * nonzero, so every link word has a nonzero top half (user addresses are below 2^48): a word
 * overwritten by a stray write or an overflow decodes to an address outside the user range (a
 * fault when followed, never a chosen address) unless the writer knows the key. Invariant: a
 * free block's link word decodes below 2^48, so a free whose block does not (mtp__block_tagged)
 * is not a double free; one whose block does is confirmed by looking for it on its slab's lists
 * (slab.c). A block handed out has its link word zeroed (mtp__block_take). Only
 * mtp__block_next / set_next(_key) / take / tagged touch the word. */
typedef struct mtpi_block {
  uintptr_t link;
} mtpi_block_t;

typedef struct mtpi_heap mtpi_heap_t;
typedef struct mtpi_thread mtpi_thread_t;
typedef struct mtpi_region mtpi_region_t;
typedef struct mtp_pool mtpi_pool_t; /* the public opaque type's definition (pool layer) */

/* What a page descriptor describes (written by the region layer, and for MEDIUM by pool/medium.c,
 * under the pool lock). MEDIUM: the first page of a medium block (see mtpi_desc_t). */
enum {
  MTP_PAGE_FREE = 0,
  MTP_PAGE_SLAB = 1,
  MTP_PAGE_TAIL = 2,
  MTP_PAGE_HEADER = 3,
  MTP_PAGE_MEDIUM = 4,
  MTP_PAGE_PACKED = 5 /* the first page of a packed span (pool/packed.c) */
};
/* Which list a slab's `link` is on (written by whoever owns that list). */
enum {
  MTP_LIST_NONE = 0,
  MTP_LIST_HEAP_PARTIAL,
  MTP_LIST_HEAP_FULL,
  MTP_LIST_POOL_PARTIAL,
  MTP_LIST_HEAP_CACHE,
  MTP_LIST_POOL_EMPTY /* empty, kept formatted for its class on the pool's list (pool lock) */
};

/* Low bits of an owned slab's `owner` word beside the thread token (a pointer, 8-aligned): the
 * free fast path compares the whole word, so a marked slab always takes the slow path. */
#define MTP_OWNER_CACHED 1 /* empty, in the heap's cache: a free into it is a double free */
#define MTP_OWNER_FULL 2   /* exhausted, on the heap's full list: a free moves it to partial */
/* Exhausted slabs a heap keeps owned per size class before it detaches the oldest, at first
 * (mtpi_heap_t.full_limit: heap/slabs.c raises it for a thread that frees into slabs it let go). */
#define MTP_FULL_PER_CLASS 2

/* The remote free list word (thread_free): bits 0..47 the list head, bits 48..61 the number of
 * blocks on the list (14 bits: a slab holds fewer than 2^14 blocks, checked in size_class.c),
 * bit 62 LISTED (detached and on the pool's partial list: set and cleared under the pool lock),
 * bit 63 OWNED. */
#define MTP_TF_PTR_MASK (((uintptr_t)1 << MTP_VA_BITS) - 1)
#define MTP_TF_COUNT_SHIFT MTP_VA_BITS
#define MTP_TF_COUNT_BITS 14
#define MTP_TF_COUNT_ONE ((uintptr_t)1 << MTP_TF_COUNT_SHIFT)
#define MTP_TF_LISTED ((uintptr_t)1 << 62)
#define MTP_TF_OWNED ((uintptr_t)1 << 63)
#define MTP_TF_FLAGS (MTP_TF_OWNED | MTP_TF_LISTED)
#define MTP_TF_COUNT(w) ((uint32_t)(((w) & ~MTP_TF_FLAGS) >> MTP_TF_COUNT_SHIFT))
#define MTP_TF_PTR(w) ((mtpi_block_t *)((w) & MTP_TF_PTR_MASK))

/* While a slab is its heap's current slab, `used` carries this bias, so that the free fast path's
 * `--used == 0` (slab empty: retire it) never fires for the slab being allocated from. */
#define MTP_USED_CURRENT ((uint32_t)1 << 31)
#define MTP_USED(s) ((s)->used & ~MTP_USED_CURRENT)

/* A medium block's `freed` once it is freed (pool/medium.c): set by the free's CAS, so that of
 * two frees of one block exactly one gets it; cleared when the run is handed out again. */
#define MTP_MEDIUM_FREED ((uintptr_t)1)
/* A freed medium block's `requested` (pool/medium.c: its pages' freed pattern is checked on reuse). */
#define MTP_MEDIUM_FREED_SIZE UINT32_MAX

/* Packed spans (pool/packed.c): a run of MTP_SPAN_PAGES pages cut into 512-byte units, which
 * holds medium blocks of any length in units, several to a page, so that a medium block fits its
 * request to 512 bytes rather than to 64 KiB. Its map (mtpi_span_t) lies in its first units. */
#define MTP_UNIT_SHIFT 9
#define MTP_UNIT_SIZE ((size_t)1 << MTP_UNIT_SHIFT)
#define MTP_SPAN_PAGES 16
#define MTP_SPAN_UNITS ((MTP_SPAN_PAGES * MTP_PAGE_SIZE) >> MTP_UNIT_SHIFT)
#define MTP_SPAN_WORDS (MTP_SPAN_UNITS / 64)
/* A block's entry (at its first unit) while it is freed: in a thread's cache, or its units free. */
#define MTP_SPAN_FREED ((uint16_t)0x8000)
/* Under the pool lock: free, dirty, kept, aged, last_release_ms. ent: written by the pool lock's
 * holder when a block is cut (its first unit's entry = its length in units; kept entries inside it
 * cleared to 0), by the free that claims it (a CAS that sets MTP_SPAN_FREED, acq_rel, from any
 * thread, without the lock: of two frees one wins) and by the thread whose cache hands the claimed
 * block out again (a relaxed store clearing FREED: the block is that thread's alone, and its next
 * free is ordered after it by the program's hand-over of the pointer) or splits it in two (the
 * rest's entry, relaxed, then the first part's shorter length, release: the heap walk and the
 * validator read entries with acquire, so a shorter length is followed by the rest's entry); read
 * by lookups without the lock (relaxed: a block's entry is fixed while it is handed out). The cut's
 * stores are relaxed: the pool unlock and the hand-over of the pointer publish them. */
typedef struct mtpi_span {
  uint64_t free[MTP_SPAN_WORDS];  /* 1: unit free */
  uint64_t dirty[MTP_SPAN_WORDS]; /* 1: free unit that may hold old bytes (not known zero) */
  uint64_t kept[MTP_SPAN_WORDS];  /* 1: free unit whose entry a released block left (FREED) */
  uint64_t aged[MTP_SPAN_WORDS];  /* 1: free unit, dirty at the span's last purge pass */
  uint64_t last_release_ms;       /* the latest free time of a block released to the span */
  _Atomic(uint16_t) ent[MTP_SPAN_UNITS];
} mtpi_span_t;
#define MTP_SPAN_META_UNITS ((sizeof(mtpi_span_t) + MTP_UNIT_SIZE - 1) >> MTP_UNIT_SHIFT)

/* The page descriptor: one per 64 KiB page of a region, out of band in the region header. A slab
 * runs `pages` pages; its first page's descriptor describes it (kind SLAB), the others are TAIL
 * (their head points back to the first). A FREE page's descriptor keeps only free_time_ms.
 *
 * A medium block (pool/medium.c) is a MEDIUM: `pages` pages, its first descriptor of kind MEDIUM, the
 * others TAIL as for a slab. A MEDIUM descriptor is written under the pool lock when the run
 * is formatted, resized in place (realloc) or released to its region: `requested` holds the
 * requested size, `pages` the length; owner is 0 (so every free of it misses the fast path and
 * reaches mtp__heap_free_slow), cls is MTP_NUM_CLASSES, size_min/size_span make a sized free's
 * class compare fail (UINT32_MAX, 0). `freed` is 0 while the block is handed out and
 * MTP_MEDIUM_FREED once it is freed. A freed run may wait in the freeing thread's cache (list
 * MTP_LIST_HEAP_CACHE, heap/cache.c): that thread alone then writes `requested`, list and link,
 * and hands the run out again without the pool lock.
 *
 * A packed span (pool/packed.c, pool/span.c) is a PACKED: MTP_SPAN_PAGES pages, TAILs after its
 * first, every field under the pool lock: units_used its units handed out (cached blocks
 * included), longest_bound a bound on its longest run of free units (never below it: made exact
 * when a search finds less), `bin` its bin + 1 in the pool's span bins (link), purge_pending
 * nonzero while releases left free units to purge, free_time_ms the first of those releases (the
 * span is purged, or given back when empty, once it is due); owner 0 and size_min/size_span as
 * for MEDIUM, so that every free reaches the slow path.
 *
 * Ownership of a slab. Either OWNED by one heap (thread_free has MTP_TF_OWNED; `owner` holds the
 * owning thread's token) or DETACHED (no owner: full when its owner moved on, or abandoned at
 * thread exit). Who may write what:
 *   free, used                 the owner thread while OWNED; while DETACHED nobody, until a
 *                              thread adopts the slab.
 *   bump                       the owner, by relaxed atomic store; other threads (a remote free
 *                              rejecting a block never handed out) load it relaxed: the block's
 *                              hand-out happened before that free, so coherence makes the load
 *                              at least as new as the carve. The owner reads it plainly.
 *   owner                      the owning thread (relaxed atomic: other threads read it to learn
 *                              that a block is not theirs; a stale read only sends them to the
 *                              remote path, which is always correct). 0 when detached; the
 *                              thread's token | MTP_OWNER_FULL or | MTP_OWNER_CACHED while the
 *                              slab sits on its heap's full list or cache. Nonzero only on the
 *                              first descriptor of an owned, unchecked slab (TAIL and FREE
 *                              descriptors, detached and checked slabs hold 0): the free miss
 *                              path (mtp__heap_free_other) tells what a descriptor is from this
 *                              word alone.
 *   heap                       the heap that owns it or owned it last (relaxed atomic, opaque to
 *                              the layers below heap/; heap records are type-stable).
 *   thread_free                any thread, by CAS (release on push, so the pushed block's `next`
 *                              is visible to the thread that takes the list with acquire).
 *   detached_used              the detaching thread, before the CAS that clears OWNED (release);
 *                              read by remote freers once they see the word detached (acquire)
 *                              and BEFORE their push (a slab with a block in use is never
 *                              released; after the push it may be, and re-formatted): constant
 *                              while DETACHED. Both by relaxed atomic access: a freer's word may
 *                              be stale (adopted and detached again since), and then it reads
 *                              while a new detach writes; its CAS fails and it reads again.
 *   link, list                 the owner (heap lists, cache) or the pool lock (pool list). The
 *                              lock alone is not enough to read them: a thread that would adopt
 *                              a slab reads them after its adopting CAS (pool_adopt), never
 *                              before, as another thread may own the slab until then.
 *   cls, block_size, recip,    set when the slab is formatted, before it is handed to any thread;
 *   end, size_min, size_span,  constant until it is released.
 *   pages, kind, capacity
 * Counting identities (MTP_USED strips the current-slab bias from used):
 *   OWNED:    blocks in use = MTP_USED - TF_COUNT(thread_free);
 *             MTP_USED + |free| + (end - bump) / block_size == capacity
 *   DETACHED: blocks in use = detached_used - TF_COUNT(thread_free)
 * A detached slab whose count reaches detached_used is entirely free: the thread whose CAS got it
 * there (exactly one) releases it under the pool lock, unless a thread adopted it first.
 * Adoption (DETACHED -> OWNED) is one CAS on thread_free. A slab on the pool's partial list
 * carries LISTED and is adopted only under the pool lock (which owns the list); an unlisted one
 * may be taken back by the heap that detached it without the lock.
 * A slab that held no block any more when its pool got it back (list MTP_LIST_POOL_EMPTY, pool
 * lock) is formatted afresh and owned by no one: owner 0, thread_free OWNED with an empty list,
 * bump at its start, so that every free into it fails the bump check (pool/slabs.c). */
typedef struct mtpi_desc {
  /* first cache line: the owner's. Where a page kind gives a field another meaning, an anonymous
   * union names it for each kind (SLAB's name first). */
  mtpi_block_t *free;
  union {
    uint32_t used;       /* SLAB: blocks handed out (see the identities below) */
    uint32_t units_used; /* PACKED: units handed out, cached blocks' included */
  };
  union {
    uint32_t block_size; /* SLAB: bytes per block */
    uint32_t requested;  /* MEDIUM: the bytes asked for (MTP_MEDIUM_FREED_SIZE once freed) */
  };
  char *bump;            /* next block never handed out; == end once carved fully */
  uint32_t size_min;     /* smallest request that maps to this class (a sized free checks */
  uint32_t size_span;    /* size - size_min <= size_span in one compare) */
  mtpi_atomic_uptr owner;
  /* The owner's free of a block above MTP_DIRECT_MAX lists it on heap's reuse list of cls
   * (api/alloc.c): both read there, so both in this line with owner and bump. */
  mtpi_atomic_uptr heap;
  uint16_t cls;
  /* mtp__recip32(block_size), set with it (slab/slab.c): the free fast path's interior-pointer
   * test for classes up to MTP_DIRECT_MAX (api/alloc.c, base/base.h). */
  uint32_t recip;
  /* The descriptor that describes this page's run: for a TAIL its run's first descriptor
   * (SLAB or MEDIUM), for every other descriptor itself (written by the region layer: at region
   * creation, with the TAILs, and when a page becomes FREE). So the free fast path finds a
   * block's slab with one load and no branch on the kind, a block in a later page of a
   * multi-page slab as one in its first. In the first line, beside owner and bump, which the
   * fast path reads next. Plain, written under the pool lock and read without it: a free of a
   * block in use reads it while the block keeps its run, and so its head, fixed; a stale pointer
   * may read another run's head, and the owner and bump checks that follow send it on. */
  struct mtpi_desc *head;
  /* second cache line: shared (the first is 64 bytes: asserted below) */
  union {
    mtpi_atomic_uptr thread_free; /* SLAB: the remote list word */
    mtpi_atomic_uptr freed;       /* MEDIUM: MTP_MEDIUM_FREED once a free claimed it, else 0 */
  };
  union {
    uint32_t detached_used; /* SLAB */
    uint32_t purge_pending; /* PACKED: nonzero while units released since its last pass wait */
  };
  union {
    uint32_t capacity;      /* SLAB: blocks it holds */
    uint32_t longest_bound; /* PACKED: a bound on its longest free run, never below it */
  };
  char *end;
  uint8_t pages;
  uint8_t kind;
  union {
    uint8_t list; /* SLAB, MEDIUM: which list link is on (MTP_LIST_*) */
    uint8_t bin;  /* PACKED: its bin in the pool's span_bins + 1 (0: none, MTP_SPAN_PURGING) */
  };
  uint8_t checked;
  uint64_t free_time_ms; /* FREE page: when it became free; cached or pool-empty slab: since when
                            it holds no block */
  uint8_t *check_bits;   /* checked mode: allocation bitmap (one bit per block) */
  mtpi_node_t link;      /* slow paths only (heap, cache and pool lists) */
} mtpi_desc_t;

_Static_assert(sizeof(mtpi_desc_t) == 2 * MTP_CACHE_LINE, "page descriptor is two cache lines");
_Static_assert(offsetof(mtpi_desc_t, thread_free) == MTP_CACHE_LINE,
               "the remote frees' word starts the second cache line");
/* What the free fast path reads (api/alloc.c), in the first line: one line per free. */
_Static_assert(offsetof(mtpi_desc_t, head) + sizeof(void *) <= MTP_CACHE_LINE &&
                   offsetof(mtpi_desc_t, cls) < MTP_CACHE_LINE &&
                   offsetof(mtpi_desc_t, recip) < MTP_CACHE_LINE &&
                   offsetof(mtpi_desc_t, heap) < MTP_CACHE_LINE,
               "the free fast path's fields share the descriptor's first cache line");

/* ------------------------------------------------------------------------------------------------
 * Regions (region layer; every field under the owning pool's lock)
 * ----------------------------------------------------------------------------------------------*/
/* The region layer's state inside a pool: its regions and page accounting. */
typedef struct mtpi_rset {
  mtpi_node_t *regions;  /* regions with free pages first, full ones at the back */
  mtpi_node_t *regions_tail; /* the last of them (NULL when there is none) */
  size_t mapped_bytes;
  size_t clean_bytes;    /* mapped pages known not resident: never used, or purged */
  unsigned fresh_streak; /* growing runs (region.h) taken from never-touched pages in a row */
  unsigned claimed;      /* regions claimed by a heap (region_hint) */
  void *populate_at;     /* a range to fault in outside the lock (see region.h) */
  size_t populate_len;
  bool populate_dirtied; /* that range left free pages resident: a purge will be due */
  /* Huge pages (the rule: base.h): the set's ranges were last found dense (a collapse) and not
   * since sparse (a split), so a new region is advised huge (region/purge.c). */
  bool huge_grow;
  bool dense_news; /* a run left a range dense that is not huge: a purge pass should look */
  struct mtpi_region *newest; /* the region mapped last, while it is mapped */
  /* Pages not in a run are PROT_NONE, so that a stray access (1 MiB past a block) faults: checked
   * pools. Written once, when the pool is made; such regions get no huge-page advice. */
  bool guard_free;
  /* Bytes purged and unmapped so far (region/purge.c: added under the lock as each batch ends,
   * relaxed: a statistic, part of the pool's bytes_returned). */
  mtpi_atomic_u64 returned;
  /* Regions unmapped so far. Written under the pool lock (relaxed add); read without it by a
   * remote free before its push, and again under the lock by its news (mtp__pool_detached_news):
   * equal, and no region of this set went away in between. */
  mtpi_atomic_u64 unmaps;
} mtpi_rset_t;

typedef struct mtpi_region_hdr {
  mtpi_rset_t *set; /* the set (pool) that owns the region */
  mtpi_node_t link; /* the set's region list */
  uint64_t free_mask[MTP_PAGES_PER_REGION / 64];  /* 1: page free, to be taken */
  /* 1: page free but out for a purge (region/purge.c): in no run and in no search until the purge
   * that took it gives it back. free_mask and busy_mask never share a bit. */
  uint64_t busy_mask[MTP_PAGES_PER_REGION / 64];
  uint64_t dirty_mask[MTP_PAGES_PER_REGION / 64]; /* 1: free or busy page that may be resident */
  /* The heap (its member's region_hint slot) that takes never-touched pages from this region, or
   * NULL. Others take only resident pages here: page faults of two threads in one 2 MiB range
   * queue on the kernel's lock of that range's page table (bench/results/notes.md: region.c).
   * A claimed region is not unmapped (the hint points to it). */
  void *claim;
  uint32_t free_pages; /* pages in no run: free or busy */
  /* Purges that have this region in their batch (region/purge.c): it is not detached meanwhile. */
  uint32_t pinned;
  /* Huge pages (MTPOOL_HUGEPAGES, region/purge.c): the pages of the aligned huge ranges advised
   * MADV_HUGEPAGE (whole ranges: huge at the fault, or collapsed), each purged as one; and when a
   * purge last looked whether the others are dense. */
  uint64_t huge_mask[MTP_PAGES_PER_REGION / 64];
  uint64_t dense_check_ms;   /* the next look is due then */
  uint32_t dense_backoff_ms; /* and the one after its interval; 0: looked at no more */
} mtpi_region_hdr_t;

/* A region's header: its bookkeeping and one descriptor per page. It lies in the
 * MTP_REGION_META_BYTES just below the region's pages, the top of a reservation of one region's
 * size kept PROT_NONE below it (region.c), so that no mapping just below can overflow into it and
 * every page of the region, both 2 MiB halves whole, holds blocks. */
struct mtpi_region {
  mtpi_region_hdr_t h;
  mtpi_desc_t pages[MTP_PAGES_PER_REGION] __attribute__((aligned(MTP_CACHE_LINE)));
};
/* The header's own mapping: one page (a whole number of OS pages on every supported kernel). */
#define MTP_REGION_META_BYTES MTP_PAGE_SIZE
_Static_assert(sizeof(mtpi_region_t) <= MTP_REGION_META_BYTES, "a region's header fits its page");

/* ------------------------------------------------------------------------------------------------
 * A heap's membership in its pool (pool layer)
 * ----------------------------------------------------------------------------------------------*/
/* The part of a heap that the pool layer reads and writes: the binding, the list of the pool's
 * heaps, the empty-slab cache (which trim and the purge thread drain) and the counters. */
typedef struct mtpi_member {
  mtpi_node_t link;        /* the pool's member list (pool lock) */
  mtpi_atomic_uptr pool;   /* mtpi_pool_t*, 0 once the pool is destroyed (relaxed: see mtp__member_pool) */
  mtpi_atomic_int cache_lock;
  mtpi_node_t *cache;      /* empty slabs kept for reuse (cache_lock) */
  size_t cache_bytes;      /* (cache_lock) */
  uint64_t allocs;         /* cumulative small allocations (the owner; read racily by stats) */
  uint64_t remote_collected; /* cumulative blocks freed by other threads (the owner) */
  /* Freed packed blocks kept for the owner's next ones (heap/cache.c; cache_lock), the first pk_n
   * in no order: the block, when it was freed, its units, its put's number (pk_seq counts the
   * puts: the newest is pk_seq - 1); pk_bytes their bytes. */
#define MTP_PACKED_CACHED 16
  void *pk[MTP_PACKED_CACHED];
  uint64_t pk_time[MTP_PACKED_CACHED];
  uint16_t pk_units[MTP_PACKED_CACHED];
  uint32_t pk_put[MTP_PACKED_CACHED];
  uint32_t pk_n, pk_seq;
  size_t pk_bytes;
  mtpi_region_t *region_hint; /* the region this heap claimed for fresh pages (pool lock) */
  /* Classes this heap got a slab of from the pool (pool lock): another request for one of them
   * is growth, which earns pages faulted in ahead (region.h). */
  uint64_t classes_got[(MTP_NUM_CLASSES + 63) / 64];
  /* The pool's shared heap (heap/shared.c; set before it joins): its slabs serve many
   * threads a few blocks each, never a thread's growth, so it claims no region and earns no
   * pages faulted in ahead. */
  bool shared;
} mtpi_member_t;

/* ------------------------------------------------------------------------------------------------
 * Heaps and threads (heap layer)
 * ----------------------------------------------------------------------------------------------*/
/* A heap is one thread's cache of one pool: it owns the slabs it allocates from. Fields are the
 * owner thread's, except the membership (see mtpi_member_t). Heap records are type-stable: never
 * unmapped, so a stale pointer to one can still be read safely. */
struct mtpi_heap {
  mtpi_desc_t *current[MTP_NUM_CLASSES]; /* allocate from here; &mtp__slab_empty when none */
  mtpi_node_t *partial[MTP_NUM_CLASSES]; /* owned slabs with free blocks, not current: a queue */
  mtpi_node_t *full[MTP_NUM_CLASSES];    /* owned exhausted slabs (owner marked FULL) */
  uint8_t full_count[MTP_NUM_CLASSES];   /* not kept once full_limit is unbounded (heap/slabs.c) */
  uint8_t full_limit[MTP_NUM_CLASSES];   /* full_count's bound: MTP_FULL_PER_CLASS or more */
  mtpi_thread_t *thread;                 /* owner */
  /* Bytes the thread may still allocate from this heap before the profiler's next sample
   * (profile/profile.c): each fast path subtracts the size asked for after its pop, and below 0
   * hands the block to mtp__prof_fast_sample. Owner only. Set when the heap is made: from
   * mtp__tl_prof_left for the default pool (INT64_MAX while profiling is off), else INT64_MAX. Beside m.allocs: the
   * fast path's writes stay in one cache line. */
  int64_t prof_left;
  mtpi_member_t m;
  mtpi_heap_t *free_next;                /* meta free list */
  /* Cold classes (heap/shared.c): blocks of each class this heap took from its pool's shared
   * heap, and whether it may (it joined a pool that had a heap already). */
  uint8_t cold[MTP_NUM_CLASSES];
  uint32_t cold_total; /* the sum of them */
  bool cold_ok;
  /* The reuse lists (heap/reuse.c): per class, blocks this thread freed into its own slabs,
   * newest first. Owner only; read racily by statistics and the heap walk. */
  mtpi_block_t *reuse[MTP_NUM_CLASSES];
  uint8_t reuse_n[MTP_NUM_CLASSES];   /* blocks on each list */
  uint8_t reuse_cap[MTP_NUM_CLASSES]; /* each list's bound, copied so that the free fast path
                                       * compares without a division */
};

/* Per-thread record; its address is the thread's ownership token. Heaps of pools 0 ..
 * MTP_THREAD_HEAPS - 1 are in the record, so that a thread of a program with few pools touches
 * a few lines of a shared page for it rather than a page of its own (the table of every pool id
 * is 8 KiB); more: that table, allocated when the thread first uses a pool of a higher id. */
#define MTP_THREAD_HEAPS 8
struct mtpi_thread {
  mtpi_heap_t *heaps[MTP_THREAD_HEAPS];
  mtpi_heap_t **more; /* MTP_MAX_POOLS entries, or NULL */
};

/* ------------------------------------------------------------------------------------------------
 * Large blocks (pool layer, large.c and large_ranges.c; every field under the large lock)
 * ----------------------------------------------------------------------------------------------*/
/* A record is LIVE (handed out: on its pool's `large` list) or CACHED (freed, its range kept for
 * reuse: on its pool's `large_cache` list, newest first). Both kinds stay in the hash, so that a
 * free of a cached block's address is told apart (a double free) from a foreign pointer; an
 * address whose range merged into the free range before it is no record's any more, and a free of
 * it is reported as a pointer mtpool did not hand out. A record's range [map, map + map_size)
 * lies inside one kernel mapping, named by `origin` (large_ranges.c); ranges of records never
 * overlap. */
typedef struct mtpi_large {
  void *ptr;  /* what the user holds */
  void *map;  /* the range's first page */
  size_t map_size;
  size_t size; /* requested (LIVE) */
  mtpi_pool_t *pool;
  struct mtpi_large *hash_next;
  mtpi_node_t link;      /* the pool's large list (LIVE) or its cache (CACHED) */
  /* CACHED: its free time (merged: the newest free), stamped early so that the purge finds it due
   * a tenth of the pool's delay later (base.h); quarantined: when it was freed */
  uint64_t free_time_ms;
  uint64_t origin;       /* the kernel mapping the range lies in: a number never reused */
  uint32_t slot;         /* CACHED: its entry in the pool's large_slots */
  bool cached;
  /* LIVE, looked at for dense huge ranges (large_ranges.c): the next look is due at look_next_ms
   * (a monotonic clock), the one after it look_backoff_ms later (0: looked at no more), from
   * offset look_at of its aligned huge ranges */
  uint64_t look_next_ms;
  uint32_t look_backoff_ms;
  size_t look_at;
  bool huge_rest; /* its range is advised huge (a look found it dense from its start, or its mapping) */
  bool probe;     /* LIVE: mapped for itself unadvised; its free judges the pool's own mappings */
} mtpi_large_t;

/* What the cache's searches read of a CACHED record, kept in one array per pool (the first
 * large_cached_count entries, in no order): a best-fit or neighbour search reads 32 bytes a range
 * from contiguous lines instead of a list of records, one cache miss each. */
#define MTP_LARGE_MAX_CACHED 64 /* free ranges a pool keeps (large_ranges.c) */
typedef struct mtpi_large_slot {
  char *map;
  size_t map_size;
  uint64_t origin;
  struct mtpi_large *rec;
} mtpi_large_slot_t;

/* ------------------------------------------------------------------------------------------------
 * Pools (pool layer)
 * ----------------------------------------------------------------------------------------------*/
struct mtp_pool {
  uint32_t id;
  char name[48];
  long purge_delay_ms;
  size_t thread_cache_bytes;
  int check;
  pthread_mutex_t lock;
  /* under lock */
  mtpi_rset_t rs;
  mtpi_node_t *partial[MTP_NUM_CLASSES]; /* detached slabs worth adopting */
  /* Empty slabs kept formatted for their class until the purge delay passes (pool/slabs.c), newest
   * first (taken there), the first listed at the tail (purged from there); empty_bytes: the
   * bytes they run. */
  mtpi_node_t *empty[MTP_NUM_CLASSES];
  mtpi_node_t *empty_tail[MTP_NUM_CLASSES];
  size_t empty_bytes;
  mtpi_node_t *members;                  /* live heaps (their mtpi_member_t) */
  /* Heaps that joined since the lock was last taken (registry.c): pushed by the joining thread
   * without the lock (a CAS, release: the member's fields before it), taken whole into members by
   * the lock's next holder (exchange, acquire), so every walk of members under the lock sees
   * them. joins: heaps that ever joined (relaxed: a count). */
  mtpi_atomic_uptr joining;
  mtpi_atomic_u64 joins;
  /* Freed packed blocks whose free found the pool lock held (pool/packed.c): pushed without the
   * lock (a CAS, release: the block's link before it), linked through a word past the block's
   * freed pattern, taken whole by a later holder of the lock (exchange, acquire) and released to
   * their spans then. */
  mtpi_atomic_uptr packed_deferred;
  mtpi_desc_t *checked_current[MTP_NUM_CLASSES];
  uint64_t dead_allocs, dead_remote; /* counters of heaps that are gone */
  uint64_t checked_allocs;
  uint64_t medium_allocs;              /* cumulative medium blocks (pool/medium.c, packed.c) */
  /* packed spans (pool/packed.c) by the bound on their longest free run: bin b holds bounds of
   * 32 b to 32 b + 31 units (the last, more); bit b of span_binned: bin b is not empty */
#define MTP_SPAN_BINS 64
#define MTP_SPAN_BIN_SHIFT 5
  mtpi_node_t *span_bins[MTP_SPAN_BINS];
  uint64_t span_binned;
  /* checked mode's quarantine (checked/checked_verify.c): freed blocks held back from reuse, oldest at
   * q_head; a ring of MTP_QUARANTINE_SLOTS block starts (internal record, NULL until the first
   * checked free) */
  void **quarantine;
  uint32_t q_head, q_count;
  uint32_t q_scan; /* the next quarantined block a checked allocation verifies */
  size_t q_bytes;
  bool purge_due;                    /* a release left pages to purge: wake the purger on unlock */
  /* relaxed: a statistic, added to under different locks; with rs.returned, the bytes the pool
   * gave back */
  mtpi_atomic_u64 bytes_returned;
  /* The shared heaps (heap/shared.c): the first blocks of a class a thread allocates come
   * from one of these, chosen by the CPU the thread runs on, so that a thread that allocates a
   * little does not hold a slab per class. Each one's owner fields (lists, counters, thread: NULL
   * until its first use) are written under its lock, which is taken before the pool lock; its
   * member part follows mtpi_member_t's rules. */
  struct {
    pthread_mutex_t lock;
    mtpi_heap_t heap;
  } shared[MTP_SHARED_HEAPS];
  /* large blocks: under the large lock */
  mtpi_node_t *large;                     /* LIVE records */
  size_t large_count, large_bytes;        /* LIVE: blocks, mapped bytes */
  uint64_t large_allocs;
  mtpi_node_t *large_cache;               /* CACHED records, newest first */
  size_t large_cached_count, large_cached_bytes;
  mtpi_large_slot_t large_slots[MTP_LARGE_MAX_CACHED]; /* the CACHED records' search index */
  char *large_reserve;          /* the untouched rest of the mapping fresh ranges are carved from */
  size_t large_reserve_left;    /* its bytes */
  uint64_t large_reserve_origin; /* its origin */
  size_t large_looking; /* LIVE records with look_backoff_ms above 0 */
  /* the verdict on blocks mapped for themselves (large_ranges.c): written under the large lock
   * by a probe's free, read relaxed by the mappings (a hint: a stale read advises one block) */
  mtpi_atomic_u8 large_dense;
  /* mappings the verdict advised or left as the next probe (every PROBE_EVERY-th): any mapping
   * thread adds 1, relaxed, no lock (a count: which mapping probes needs no order) */
  mtpi_atomic_u64 large_own_maps;
  /* registry (registry lock) */
  mtpi_node_t reg_link;
};

#pragma GCC visibility pop

#endif
