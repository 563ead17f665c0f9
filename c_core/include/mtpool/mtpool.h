/*
 * mtpool: a multi-threaded pool allocator.
 *
 * Public C ABI. Compiles as C99, C11 and C++. Every function is thread-safe unless its comment
 * says otherwise. Allocation functions return NULL and set errno (ENOMEM, or EINVAL for a bad
 * alignment) on failure; misuse of a pointer (double free, a pointer mtpool never gave out, a wrong
 * size) is reported to the error handler (see mtp_set_error_handler).
 */
#ifndef MTPOOL_MTPOOL_H
#define MTPOOL_MTPOOL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define MTPOOL_VERSION_MAJOR 0
#define MTPOOL_VERSION_MINOR 3
#define MTPOOL_VERSION_PATCH 0
/* One integer for compile-time comparisons: major*10000 + minor*100 + patch. */
#define MTPOOL_VERSION \
  (MTPOOL_VERSION_MAJOR * 10000 + MTPOOL_VERSION_MINOR * 100 + MTPOOL_VERSION_PATCH)

/* ------------------------------------------------------------------------------------------------
 * Attributes
 * ----------------------------------------------------------------------------------------------*/
/* The library is built with hidden visibility: only what carries MTP_API is exported. */
#if defined(__GNUC__)
#define MTP_API __attribute__((visibility("default")))
#else
#define MTP_API
#endif

#if defined(__GNUC__)
#define MTP_ATTR_MALLOC __attribute__((malloc))
#define MTP_ATTR_ALLOC_SIZE(n) __attribute__((alloc_size(n)))
#define MTP_ATTR_ALLOC_SIZE2(n, m) __attribute__((alloc_size(n, m)))
#define MTP_ATTR_WARN_UNUSED __attribute__((warn_unused_result))
#else
#define MTP_ATTR_MALLOC
#define MTP_ATTR_ALLOC_SIZE(n)
#define MTP_ATTR_ALLOC_SIZE2(n, m)
#define MTP_ATTR_WARN_UNUSED
#endif

#if defined(__cplusplus)
#define MTP_NOEXCEPT noexcept
extern "C" {
#else
#define MTP_NOEXCEPT
#endif

/* ------------------------------------------------------------------------------------------------
 * Types
 * ----------------------------------------------------------------------------------------------*/

/* An independent pool of memory. Opaque; create with mtp_pool_create, or use mtp_default_pool(). */
typedef struct mtp_pool mtp_pool_t;

/* Pool options. Always fill with mtp_options_init() first, then change fields: new fields may be
 * added at the end in later versions. The default pool takes its options from the environment
 * (MTPOOL_<FIELD>, e.g. MTPOOL_CHECK=1), read once, at its first use. */
typedef struct mtp_options {
  /* Pool name shown in statistics reports. Copied (at most 47 bytes kept). NULL: "pool-<id>".
   * Default pool: "default" (MTPOOL_NAME). */
  const char *name;
  /* Milliseconds an empty slab stays resident before its pages are returned to the OS (a freed
   * medium block of whole 64 KiB pages or large block's pages: a tenth of it; the units of a
   * packed span still in use: up to twice it). Default 250; range 0 (return at once) ..
   * 3600000; -1: never by itself, only mtp_pool_trim.
   * (MTPOOL_PURGE_DELAY_MS) */
  long purge_delay_ms;
  /* Bytes of empty slabs each thread keeps for reuse per pool, so that a thread alternating
   * allocation and release of a slab's worth of blocks does not go back to the pool every time.
   * Default 2097152 (2 MiB); range 0 .. 1 GiB. (MTPOOL_THREAD_CACHE_BYTES) */
  size_t thread_cache_bytes;
  /* Checked mode: 1 validates every free (double free, foreign and interior pointers, exact
   * size), puts a canary after each block and fills freed blocks with a pattern checked on reuse.
   * Slower (takes the pool lock on every call). Default 0. (MTPOOL_CHECK) */
  int check;
} mtp_options_t;

/* Per-size-class statistics. */
typedef struct mtp_class_stats {
  size_t block_size;    /* bytes per block of this class */
  size_t blocks_in_use; /* blocks handed out and not yet freed */
  size_t slabs;         /* slabs of this class currently formatted (owned, abandoned, partial, or
                           empty and kept for reuse) */
  size_t slab_bytes;    /* bytes those slabs span */
} mtp_class_stats_t;

/* The length of mtp_stats_t.classes (fixed: the ABI). The library may have more size classes:
 * mtp_pool_class_stats and mtp_stats_next_classes give every one. */
#define MTP_STATS_MAX_CLASSES 64

/* Pool statistics. Exact when no thread is allocating or freeing in the pool; while threads run
 * the figures are a close, racy snapshot. Collecting them costs no atomic on the fast path. */
typedef struct mtp_stats {
  char name[48];           /* the pool's name */
  size_t bytes_in_use;     /* bytes of blocks in use (block sizes, plus large blocks' mappings) */
  size_t blocks_in_use;    /* blocks in use, small and large */
  size_t bytes_reserved;   /* bytes mapped from the OS and not returned (purged pages excluded) */
  size_t bytes_free;       /* bytes_reserved - bytes_in_use: held for reuse, metadata included */
  size_t bytes_mapped;     /* address space mapped, purged pages included (not the untouched rest
                              of the pool's reserve for large blocks: up to 64 MiB) */
  size_t large_blocks;     /* blocks above the largest size class: medium (up to 256 KiB, pages
                              of the pool's regions) and large (mapped one each) */
  size_t large_bytes;      /* bytes those take (medium: their 512-byte units or whole pages) */
  uint64_t allocs;         /* cumulative successful allocations */
  uint64_t frees;          /* cumulative frees (allocs - blocks_in_use) */
  uint64_t remote_frees;   /* cumulative frees by a thread other than the block's owner (0 in checked mode) */
  uint64_t bytes_returned; /* cumulative bytes given back to the OS (purged or unmapped) */
  unsigned num_classes;    /* entries used in classes[]: the first num_classes size classes,
                              smallest first (at most MTP_STATS_MAX_CLASSES; blocks of any later
                              class count in the totals above, not here) */
  mtp_class_stats_t classes[MTP_STATS_MAX_CLASSES];
} mtp_stats_t;

/* Misuse codes passed to the error handler. They lie above every errno value, so that no code is
 * mistaken for an errno (strerror() names them "Unknown error"; the handler's message says what
 * happened). */
#define MTP_ERR_DOUBLE_FREE 4001     /* the block was already free */
#define MTP_ERR_INVALID_POINTER 4002 /* not a block mtpool handed out, or an interior pointer */
#define MTP_ERR_WRONG_SIZE 4003      /* mtp_free_sized given a size the block was not made for */
#define MTP_ERR_OVERFLOW 4004        /* (checked mode) bytes past the end or before the start written */
#define MTP_ERR_USE_AFTER_FREE 4005  /* a freed block was written to (checked mode; default: large) */

/* Error handler: err is an MTP_ERR_* code, message says what happened, ptr is the pointer at fault.
 * Called on the thread that found the fault. If it returns, the operation is abandoned (the block
 * is neither freed nor reused), and the pool goes on working. */
typedef void (*mtp_error_fn)(int err, const char *message, void *ptr, void *arg);

/* ------------------------------------------------------------------------------------------------
 * Version and options
 * ----------------------------------------------------------------------------------------------*/

/* The library's version as "major.minor.patch" (static string). */
MTP_API const char *mtp_version(void) MTP_NOEXCEPT;

/* Fill *opt with the defaults documented at each field. opt must not be NULL. */
MTP_API void mtp_options_init(mtp_options_t *opt) MTP_NOEXCEPT;

/* ------------------------------------------------------------------------------------------------
 * The process-wide default pool
 * ----------------------------------------------------------------------------------------------*/

/* Allocate size bytes (0 gives a unique, freeable block) from the default pool, aligned to the
 * largest power of two dividing the block size, capped at 16. NULL + ENOMEM if memory runs out. */
MTP_API void *mtp_alloc(size_t size) MTP_NOEXCEPT MTP_ATTR_MALLOC MTP_ATTR_ALLOC_SIZE(1);

/* Allocate count*size zeroed bytes. NULL + ENOMEM on overflow of count*size or out of memory. */
MTP_API void *mtp_calloc(size_t count, size_t size) MTP_NOEXCEPT MTP_ATTR_MALLOC
    MTP_ATTR_ALLOC_SIZE2(1, 2);

/* Resize p's block (from any pool; the new block comes from the same pool). p NULL: like
 * mtp_alloc. size 0: gives a minimal block. Out of memory: NULL + ENOMEM, p untouched. A pointer
 * mtpool did not hand out is reported (MTP_ERR_INVALID_POINTER); if the handler returns,
 * NULL + EINVAL, and p is untouched. */
MTP_API void *mtp_realloc(void *p, size_t size) MTP_NOEXCEPT MTP_ATTR_ALLOC_SIZE(2);

/* Allocate size bytes aligned to alignment (a power of two, any size). NULL + EINVAL if alignment
 * is not a power of two, NULL + ENOMEM if memory runs out. Free with mtp_free/mtp_free_sized. */
MTP_API void *mtp_alloc_aligned(size_t size, size_t alignment) MTP_NOEXCEPT MTP_ATTR_MALLOC
    MTP_ATTR_ALLOC_SIZE(1);

/* Free a block of any pool, from any thread. NULL is a no-op. A pointer mtpool never gave out
 * (including a block of a slab that was never handed out), and a double free, are reported to the
 * error handler (see the README for which mode finds what). errno is left unchanged (also by
 * mtp_free_sized). */
MTP_API void mtp_free(void *p) MTP_NOEXCEPT;

/* Free p, whose requested size was size (or any size up to mtp_usable_size(p)). A size the
 * block cannot have been made for (another size class) is reported (MTP_ERR_WRONG_SIZE) and the
 * block is left alone; checked mode accepts only the exact requested size. */
MTP_API void mtp_free_sized(void *p, size_t size) MTP_NOEXCEPT;

/* Bytes usable in p's block (>= the size requested). 0 for NULL; a foreign pointer is reported. */
MTP_API size_t mtp_usable_size(const void *p) MTP_NOEXCEPT;

/* 0 if the n bytes from p lie within one block (in a checked pool: a live block's requested bytes)
 * or p is not in mtpool's heap; else the misuse handler gets MTP_ERR_OVERFLOW or MTP_ERR_USE_AFTER_FREE,
 * returned too. Packed and large blocks are known by their start only. Thread-safe (a lock for
 * checked and large blocks); libmtpool-debug.so checks its copies (memcpy, strcpy...) with it. */
MTP_API int mtp_check_range(const void *p, size_t n) MTP_NOEXCEPT;

/* ------------------------------------------------------------------------------------------------
 * Independent pools
 * ----------------------------------------------------------------------------------------------*/

/* Create a pool. opt NULL: defaults. NULL + ENOMEM if out of memory or too many pools are live
 * (at most 1023 besides the default pool). */
MTP_API mtp_pool_t *mtp_pool_create(const mtp_options_t *opt) MTP_NOEXCEPT;

/* Destroy pool and release all its memory at once, blocks in use included. No thread may use the
 * pool or its blocks during or after the call. NULL and the default pool are ignored. */
MTP_API void mtp_pool_destroy(mtp_pool_t *pool) MTP_NOEXCEPT;

/* The process-wide default pool (never NULL, never destroyed). */
MTP_API mtp_pool_t *mtp_default_pool(void) MTP_NOEXCEPT;

/* Allocate from pool (NULL: the default pool); as mtp_alloc. */
MTP_API void *mtp_pool_alloc(mtp_pool_t *pool, size_t size) MTP_NOEXCEPT MTP_ATTR_MALLOC
    MTP_ATTR_ALLOC_SIZE(2);

/* Allocate zeroed count*size bytes from pool (NULL: the default pool); as mtp_calloc. */
MTP_API void *mtp_pool_calloc(mtp_pool_t *pool, size_t count, size_t size) MTP_NOEXCEPT
    MTP_ATTR_MALLOC MTP_ATTR_ALLOC_SIZE2(2, 3);

/* Allocate aligned memory from pool (NULL: the default pool); as mtp_alloc_aligned. */
MTP_API void *mtp_pool_alloc_aligned(mtp_pool_t *pool, size_t size, size_t alignment) MTP_NOEXCEPT
    MTP_ATTR_MALLOC MTP_ATTR_ALLOC_SIZE(2);

/* The pool of the block that starts at p; NULL for NULL, a pointer inside a block, or a pointer
 * mtpool never gave out. Does not report to the error handler. */
MTP_API mtp_pool_t *mtp_pool_of(const void *p) MTP_NOEXCEPT;

/* The pool's name (valid while the pool lives). */
MTP_API const char *mtp_pool_name(const mtp_pool_t *pool) MTP_NOEXCEPT;

/* ------------------------------------------------------------------------------------------------
 * Memory back to the OS, statistics, errors
 * ----------------------------------------------------------------------------------------------*/

/* Return every empty page of pool (NULL: the default pool) to the OS now, including empty slabs
 * other threads keep cached and slabs emptied by other threads' frees; the calling thread's freed
 * blocks kept for reuse go back to their slabs first. Returns the bytes returned. */
MTP_API size_t mtp_pool_trim(mtp_pool_t *pool) MTP_NOEXCEPT;

/* Hand the calling thread's cached memory in every pool back to the pools (empty slabs, slabs
 * being allocated from). Later allocations on this thread start afresh. Thread exit does this. */
MTP_API void mtp_thread_flush(void) MTP_NOEXCEPT;

/* Fill *out with pool's statistics (pool NULL: the default pool). Returns 0, or EINVAL if out is
 * NULL. */
MTP_API int mtp_pool_stats(mtp_pool_t *pool, mtp_stats_t *out) MTP_NOEXCEPT;

/* Print pool's statistics (NULL: the default pool) as a human-readable table to out; the pool's
 * name escaped C-style (it is user text). Returns 0, or EINVAL if out is NULL, or EIO if writing
 * failed. Does not allocate from mtpool. */
MTP_API int mtp_pool_print_stats(mtp_pool_t *pool, FILE *out) MTP_NOEXCEPT;

/* Print one report across every live pool, by name: blocks, bytes in use, bytes per block,
 * reserved and free bytes, totals, and how much huge pages back (regions advised huge, the
 * process's AnonHugePages). Returns 0, EINVAL (out NULL) or EIO. */
MTP_API int mtp_print_stats(FILE *out) MTP_NOEXCEPT;

/* Write every live pool's statistics (each size class's too) and the process's totals to out as
 * one JSON document (schema: man 3 mtpool). Holds no lock while writing: out may allocate from
 * mtpool. Returns 0, EINVAL (out NULL) or EIO (a write or the final fflush failed). */
MTP_API int mtp_print_stats_json(FILE *out) MTP_NOEXCEPT;

/* Return every empty page of every live pool to the OS now (mtp_pool_trim on each pool; the
 * calling thread's kept blocks of the default pool first). Returns the bytes returned in all.
 * Thread-safe; used by the drop-in malloc's malloc_trim. */
MTP_API size_t mtp_trim_all(void) MTP_NOEXCEPT;

/* Iterate the live pools' statistics: fills *out for the first live pool whose id is >= *cursor
 * and moves *cursor past it. Start with *cursor = 0. Returns 0, ENOENT when no pool is left, or
 * EINVAL if an argument is NULL. Pools created or destroyed meanwhile may be seen or missed. */
MTP_API int mtp_stats_next(unsigned *cursor, mtp_stats_t *out) MTP_NOEXCEPT;

/* Fill out[i] with the statistics of size class i (smallest first) in pool (NULL: the default
 * pool) for every class below count, in one snapshot. Returns the number of classes (fixed for
 * the library's life; out NULL and count 0: that alone), or -1 with errno EINVAL if out is NULL
 * and count is not 0. */
MTP_API int mtp_pool_class_stats(mtp_pool_t *pool, mtp_class_stats_t *out, unsigned count)
    MTP_NOEXCEPT;

/* mtp_stats_next, and classes[i] for every size class i below count, of the same pool in one
 * snapshot. Returns the number of classes, 0 when no pool is left, or -1 with errno EINVAL if
 * cursor or out is NULL, or classes is NULL and count is not 0. */
MTP_API int mtp_stats_next_classes(unsigned *cursor, mtp_stats_t *out, mtp_class_stats_t *classes,
                                   unsigned count) MTP_NOEXCEPT;

/* Checked mode: verify every block of pool (NULL: the default pool) now, as at trim and exit: live
 * blocks' guards, freed blocks' clearing. Reports each corrupt block through the error handler
 * (its pool, size and address) and returns how many were found; 0 for a pool not checked. */
MTP_API int mtp_pool_check(mtp_pool_t *pool) MTP_NOEXCEPT;

/* Fill *out with the options pool (NULL: the default pool) runs with, after the environment and
 * the limits were applied; out->name points to the pool's name. Returns 0, or EINVAL (out NULL). */
MTP_API int mtp_pool_options(mtp_pool_t *pool, mtp_options_t *out) MTP_NOEXCEPT;

/* Write the heap profile (gperftools' heap_v2 format, for pprof) to path, "%p" there replaced by the
 * process id (NULL: the MTPOOL_PROFILE path). Thread-safe; does not allocate. Returns 0, or -1 with
 * errno (ENOTSUP when profiling is off: MTPOOL_PROFILE unset; open's or write's errno). */
MTP_API int mtp_profile_dump(const char *path) MTP_NOEXCEPT;

/* ------------------------------------------------------------------------------------------------
 * Heap walk
 * ----------------------------------------------------------------------------------------------*/

/* The class a heap walk gives a block that no entry of mtp_stats_t.classes counts: a block above
 * 32 KiB (a medium block in region pages, or a large one mapped for itself), or one of a size
 * class whose index is MTP_STATS_MAX_CLASSES or more. */
#define MTP_VISIT_LARGE 0xffffffffu

/* Called for each live block: block is its start (what the allocation returned), usable its
 * usable size (checked pools: the size requested), cls its size class (an index into
 * mtp_stats_t.classes, and into mtp_pool_class_stats's array: always below
 * MTP_STATS_MAX_CLASSES) or MTP_VISIT_LARGE. Return 0 to go on, nonzero to stop the walk. */
typedef int (*mtp_visit_fn)(void *arg, void *block, size_t usable, unsigned cls);

/* Visit every block of pool (NULL: the default pool) handed out and not freed; the blocks stay
 * the caller's to free, after the walk. Returns 0, the first nonzero value visit returned, or
 * EINVAL (visit NULL). Thread-safe: other threads may allocate and free meanwhile. visit runs
 * under the pool's locks: it must not call mtpool (allocate, free, stats) for any pool. Exact for
 * blocks no other thread allocates or frees during the call; a block another thread allocates
 * or frees meanwhile may be reported either way, and never one that was not handed out. */
MTP_API int mtp_pool_visit(mtp_pool_t *pool, mtp_visit_fn visit, void *arg) MTP_NOEXCEPT;

/* Install the misuse handler for the whole process (fn NULL: the default, which prints the fault
 * and the pointer on stderr and aborts). arg is passed back to fn. */
MTP_API void mtp_set_error_handler(mtp_error_fn fn, void *arg) MTP_NOEXCEPT;

#if defined(__cplusplus)
}
#endif

#endif /* MTPOOL_MTPOOL_H */
