/* Public entry points. The fast paths live here, inline; everything else is a call down.
 *
 *   mtp_alloc(size)                     size <= 32 KiB: class from one table load (8-byte
 *                                       steps to 1 KiB, 16-byte steps above)
 *     heap = tl_default_heap            (a static empty heap until the thread's first slow path)
 *     slab = heap->current[class]; b = slab->free
 *     b != NULL: slab->free = b->next; used++; allocs++; heap->prof_left -= size   -> b
 *                                       (the profiler's count: below 0, mtp__prof_fast_sample)
 *     else alloc_slow -> mtp__heap_alloc_slow (heap/: reuse list, collect remote frees, carve, next slab, pool)
 *
 *   mtp_free(p)
 *     chunkmap[p >> 22] says p lies in one of our regions (else: large block, NULL, or foreign)
 *     slab = the head of p's page descriptor (itself, or its multi-page slab's first)
 *     slab->owner == this thread, p below the slab's bump pointer and a block's start (a multiply
 *     by the class's reciprocal)? push on slab->free, --used
 *     else free_miss, one call: mtp__heap_free_other (heap/slabs.c: a slab another thread
 *                                       owns: checks, one CAS push; else mtp__heap_free_slow:
 *                                       detached slabs, misuse)
 *
 * Fast paths take no lock and no atomic read-modify-write; their only checks are cheap ones (the
 * chunk map, the owner compare, the bump compare that rejects a block never handed out, the
 * interior-pointer test (a multiply and a compare), a block whose first word is tagged as a
 * free-list link (a possible double free: confirmed on a slow path), and for a sized free the
 * class compare). Checked mode and bad input go down the slow paths. Layer: api (the top; calls
 * every layer below).
 */
#include <errno.h>
#include <string.h>

#include "base/os.h"
#include "checked/checked.h"
#include "heap/heap.h"
#include "profile/profile.h"

const char *mtp_version(void) {
#define MTP_STR2(x) #x
#define MTP_STR(x) MTP_STR2(x)
  return MTP_STR(MTPOOL_VERSION_MAJOR) "." MTP_STR(MTPOOL_VERSION_MINOR) "." MTP_STR(
      MTPOOL_VERSION_PATCH);
}

/* ---- allocation ---- */

MTP_INLINE void *heap_alloc_fast(mtpi_heap_t *h, unsigned cls, size_t size) {
  mtpi_desc_t *s = h->current[cls];
  mtpi_block_t *b = mtp__slab_pop(s);
  if (MTP_UNLIKELY(b == NULL)) return NULL;
  h->m.allocs++;
  /* the profiler's count (profile/profile.c): below 0, a tail call that returns the allocation */
  if (MTP_UNLIKELY((h->prof_left -= (int64_t)size) < 0))
    return mtp__prof_fast_sample(h, b, size, false);
  return b;
}

/* A class above MTP_DIRECT_MAX: the block this thread freed last of the class (its reuse list,
 * heap/reuse.c), its lines likely still cached, else the current slab's. */
MTP_INLINE void *heap_alloc_reuse(mtpi_heap_t *h, unsigned cls, size_t size) {
  if (h->reuse[cls] == NULL) return heap_alloc_fast(h, cls, size);
  mtpi_block_t *b = mtp__reuse_pop(h, cls);
  if (MTP_UNLIKELY((h->prof_left -= (int64_t)size) < 0))
    return mtp__prof_fast_sample(h, b, size, true); /* the profiler's count, as above */
  return b;
}

/* A pooled size from h's fast paths; NULL: the slow path's (above MTP_MAX_SMALL too). Sizes up to
 * 1 KiB come first, so their path has one compare; 1-32 KiB take a second compare, the second
 * table and the reuse list. */
MTP_INLINE void *alloc_fast(mtpi_heap_t *h, size_t size) {
  if (MTP_LIKELY(size <= MTP_DIRECT_MAX))
    return heap_alloc_fast(h, mtp__class_direct[(size + 7) >> 3], size);
  if (MTP_LIKELY(size <= MTP_MAX_SMALL))
    return heap_alloc_reuse(h, mtp__class_upper[(size + 15) >> MTP_UPPER_SHIFT], size);
  return NULL;
}

/* The fast paths' miss: the profiler counts it first (the default pool's, while profiling), a
 * checked pool serves its own, then the heap's slow path. */
static MTP_NOINLINE void *alloc_slow(mtpi_pool_t *pool, size_t size) {
  if (MTP_UNLIKELY(mtp__prof_on) && pool->id == 0) {
    bool done;
    void *p = mtp__prof_alloc(pool, size, &done);
    if (done) return p;
  }
  if (MTP_UNLIKELY(pool->check)) return mtp__checked_alloc(pool, size, 0);
  return mtp__heap_alloc_slow(pool, size);
}

void *mtp_alloc(size_t size) {
  void *p = alloc_fast(mtp__tl_default_heap, size);
  if (MTP_LIKELY(p != NULL)) return p;
  return alloc_slow(mtp__default(), size);
}

/* The drop-in's operator new (malloc/src/override_new.cpp): mtp_alloc, with a failure answered
 * by the caller's fail(size) (its new-handler loop and throw), so that its usual path is one
 * jump here rather than a call and a test of the result. */
static MTP_NOINLINE void *alloc_or_slow(size_t size, void *(*fail)(size_t)) {
  void *p = alloc_slow(mtp__default(), size);
  return p != NULL ? p : fail(size);
}
void *mtp__alloc_or(size_t size, void *(*fail)(size_t)); /* declared again by the drop-in */
void *mtp__alloc_or(size_t size, void *(*fail)(size_t)) {
  void *p = alloc_fast(mtp__tl_default_heap, size);
  if (MTP_LIKELY(p != NULL)) return p;
  return alloc_or_slow(size, fail);
}

void *mtp_pool_alloc(mtp_pool_t *pool_, size_t size) {
  mtpi_pool_t *pool = mtp__pool_in(pool_);
  if (pool == NULL) return mtp_alloc(size);
  mtpi_heap_t *h = mtp__thread_heap(mtp__tl_thread, pool->id);
  if (MTP_LIKELY(h != NULL && mtp__member_pool(&h->m) == pool)) {
    void *p = alloc_fast(h, size);
    if (MTP_LIKELY(p != NULL)) return p;
  }
  return alloc_slow(pool, size);
}

static void *alloc_aligned(mtpi_pool_t *pool, size_t size, size_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    errno = EINVAL;
    return NULL;
  }
  if (pool->check) return mtp__checked_alloc(pool, size, alignment);
  /* the smallest class whose every block is aligned enough (blocks are never headed) */
  unsigned cls = mtp__class_aligned(size ? size : 1, alignment);
  if (cls < MTP_NUM_CLASSES) return mtp__heap_alloc_class(pool, cls);
  /* a packed block starts on a unit (512 B aligned), a medium run on a page (64 KiB) */
  if (size <= MTP_MEDIUM_MAX && alignment <= MTP_PAGE_SIZE)
    return mtp__heap_medium_alloc(pool, size, false, alignment <= MTP_UNIT_SIZE);
  return mtp__heap_large_alloc(pool, size, alignment);
}

void *mtp_alloc_aligned(size_t size, size_t alignment) {
  return alloc_aligned(mtp__default(), size, alignment);
}

void *mtp_pool_alloc_aligned(mtp_pool_t *pool, size_t size, size_t alignment) {
  return alloc_aligned(pool ? mtp__pool_in(pool) : mtp__default(), size, alignment);
}

/* Pages never touched or purged, and a fresh mapping, are zero: no memset faulting in all their
 * pages (pool/medium.c, pool/large.c). */
static MTP_NOINLINE void *calloc_large(mtp_pool_t *pool, size_t n) {
  mtpi_pool_t *p = pool ? mtp__pool_in(pool) : mtp__default();
  /* profiling: through the slow path, which counts it (profile/profile.c) */
  if (!p->check && !(mtp__prof_on && p->id == 0)) {
    if (n <= MTP_MEDIUM_MAX) return mtp__heap_medium_alloc(p, n, true, true);
    bool look = false;
    void *b = mtp__large_alloc_zero(p, n, &look);
    if (look) mtp__purger_look();
    return b;
  }
  void *b = mtp_pool_alloc(pool, n);
  if (b != NULL) memset(b, 0, n);
  return b;
}

void *mtp_pool_calloc(mtp_pool_t *pool, size_t count, size_t size) {
  size_t n;
  if (__builtin_mul_overflow(count, size, &n)) {
    errno = ENOMEM;
    return NULL;
  }
  if (MTP_UNLIKELY(n > MTP_MAX_SMALL)) return calloc_large(pool, n);
  void *p = mtp_pool_alloc(pool, n);
  if (p != NULL) memset(p, 0, n);
  return p;
}

/* The default pool's calloc: mtp_alloc's fast path inline, then the fill. Not `return
 * memset(...)`: a copy tail-called from the library escapes the debug library's check of whose
 * copy it is (tests/malloc/check_exports.sh). */
void *mtp_calloc(size_t count, size_t size) {
  size_t n;
  if (MTP_UNLIKELY(__builtin_mul_overflow(count, size, &n))) {
    errno = ENOMEM;
    return NULL;
  }
  if (MTP_UNLIKELY(n > MTP_MAX_SMALL)) return calloc_large(NULL, n);
  void *p = alloc_fast(mtp__tl_default_heap, n);
  if (MTP_UNLIKELY(p == NULL)) {
    p = alloc_slow(mtp__default(), n);
    if (p == NULL) return NULL;
  }
  memset(p, 0, n);
  return p;
}

/* ---- free ---- */

static void free_outside(void *p, size_t size, bool sized) {
  if (mtp__checked_free_outside(p, size, sized)) return; /* checked mode: handled */
  int r = mtp__large_free(p, size, sized);
  if (r == MTP_LARGE_NOT)
    mtp__error(MTP_ERR_INVALID_POINTER, "invalid pointer (not allocated by mtpool)", p);
  else if (r == MTP_LARGE_CACHED)
    mtp__purger_wake(); /* the cached mapping goes back after the pool's delay */
}

static MTP_NOINLINE void free_not_region(void *p, size_t size, bool sized) {
  if (p == NULL) return;
  int e = errno; /* frees leave errno alone (mtpool.h); munmap or the purge thread may set it */
  if (MTP_UNLIKELY(mtp__prof_on)) {
    /* a sampled block is a large one: its sample goes, and a report on it names its site */
    void *origin[MTP_PROF_MAX_DEPTH];
    unsigned depth = mtp__prof_origin(p, origin, MTP_PROF_MAX_DEPTH, true);
    mtp__error_origin(origin, depth);
    free_outside(p, size, sized);
    mtp__error_origin(NULL, 0);
  } else {
    free_outside(p, size, sized);
  }
  errno = e;
}

/* The owner's free of a block above MTP_DIRECT_MAX: onto its heap's reuse list of the class, for
 * the next allocation of the class to take back; a full list is trimmed first (heap/reuse.c). */
MTP_INLINE void free_reuse(mtpi_desc_t *s, mtpi_block_t *b) {
  mtpi_heap_t *h = mtp__slab_heap(s);
  unsigned cls = s->cls;
  if (MTP_UNLIKELY(h->reuse_n[cls] >= h->reuse_cap[cls]))
    mtp__heap_free_reuse_full(s, b);
  else
    mtp__reuse_push(h, cls, b);
}

/* Whether b, below s's bump pointer, starts a block: the interior-pointer test, a multiply and a
 * compare, no division (base/base.h). Up to MTP_DIRECT_MAX a slab is one page whose blocks start
 * at its first byte: b's offset is its low 16 bits, against the descriptor's 32-bit reciprocal.
 * Above it, the distance to the bump pointer (a block boundary, below 2^19) against the class's
 * 64-bit one. */
MTP_INLINE bool block_start_small(const mtpi_desc_t *s, const mtpi_block_t *b) {
  return mtp__small_offset_ok((uint16_t)(uintptr_t)b, s->recip);
}
MTP_INLINE bool block_start_bump(const mtpi_desc_t *s, const mtpi_block_t *b, const char *bump) {
  return mtp__offset_ok((uint64_t)(bump - (const char *)b), s->cls);
}

/* The fast path's miss, in one call: a remote free (mtp__heap_free_other), else checked mode's.
 * Calling both from free_fast, the second after the first returns, would make every free save
 * and restore registers for them (a frame on the fast path). */
static MTP_NOINLINE void free_miss(mtpi_desc_t *s, mtpi_block_t *b) {
  if (MTP_UNLIKELY(!mtp__heap_free_other(s, b))) mtp__checked_free(mtp__run_head(s), b, 0, false);
}

/* The owner's push. The bump compare (one load from the descriptor's first line, one compare)
 * sends a block never handed out to the slow path, and the interior-pointer test a pointer into
 * a block or not aligned as its blocks are; the slow path reports both: pushing either would let
 * the free list hand out memory twice. */
MTP_INLINE void free_fast(mtpi_desc_t *s, void *p) {
  mtpi_block_t *b = (mtpi_block_t *)p;
  /* relaxed owner: a hint (types.h); the compare is against our own token, which only this
   * thread writes there. mine is 0 for one of our current slabs, MTP_OWNER_FULL for one of our
   * exhausted ones, anything else otherwise (tokens are aligned). s is the head of b's page (b's
   * own page unless it is a TAIL); b < bump then also says that b lies in s's slab, as a head is
   * never after its TAILs. The class test comes first (block_size is beside owner): a program
   * keeps to a few sizes, while a churn above 1 KiB frees into current and exhausted slabs alike,
   * so an owner test first mispredicts (bench/results/notes.md: alloc.c). */
  uintptr_t mine = mtp__load_relaxed(&s->owner) ^ (uintptr_t)mtp__tl_thread;
  if (s->block_size > MTP_DIRECT_MAX) {
    char *bump = mtp__slab_bump_owner(s);
    if (MTP_LIKELY((mine | MTP_OWNER_FULL) == MTP_OWNER_FULL && (char *)b < bump &&
                   block_start_bump(s, b, bump))) {
      /* listed whether s is current or exhausted (bench/results/notes.md: alloc.c) */
      if (MTP_LIKELY(!mtp__block_tagged(b))) {
        free_reuse(s, b);
        return;
      }
      if (mine == 0) { /* maybe a double free: free_other takes an exhausted slab's */
        mtp__heap_free_tagged(s, b);
        return;
      }
    }
  } else if (MTP_LIKELY(mine == 0 && (char *)b < mtp__slab_bump_owner(s) &&
                        block_start_small(s, b))) {
    /* a block whose first word looks like a free-list link: maybe a double free (a tail call,
     * so that the usual case saves no registers) */
    if (MTP_UNLIKELY(mtp__block_tagged(b)))
      mtp__heap_free_tagged(s, b);
    else if (mtp__slab_push_untagged(s, b))
      mtp__heap_retire_local(s);
    return;
  }
  free_miss(s, b);
}

/* free_fast gets the head of b's page (mtp__run_head: one load, no branch), so a block in a
 * later page of a multi-page slab (classes above 4 KiB) takes the fast path as one in the first
 * page does: a TAIL descriptor has no owner to compare (bench/results/notes.md: alloc.c). */
void mtp_free(void *p) {
  uintptr_t u = (uintptr_t)p;
  if (MTP_UNLIKELY(!mtp__is_region_ptr(u))) {
    free_not_region(p, 0, false);
    return;
  }
  free_fast(mtp__run_of(u), p);
}

static void free_sized_check(mtpi_desc_t *s, void *p, size_t size) {
  mtpi_desc_t *h = mtp__run_head(s);
  if (h->kind == MTP_PAGE_MEDIUM || h->kind == MTP_PAGE_PACKED) {
    mtp__heap_medium_free(h, p, size, true);
    return;
  }
  if (h->kind == MTP_PAGE_SLAB) {
    if (h->checked) {
      mtp__checked_free(h, p, size, true);
      return;
    }
    /* A block from an aligned request may sit in a larger class than its size maps to. */
    unsigned want = size <= MTP_MAX_SMALL ? mtp__class_of(size) : MTP_NUM_CLASSES;
    uint32_t bs = h->block_size;
    bool ok = want == h->cls ||
              (want < h->cls && mtp__class_aligned(size, bs & (0u - bs)) == h->cls);
    if (!ok) {
      mtp__error(MTP_ERR_WRONG_SIZE, "wrong size (the block belongs to another size class)", p);
      return;
    }
  }
  if (!mtp__heap_free_slow(s, (mtpi_block_t *)p)) mtp__checked_free(mtp__run_head(s), p, 0, false);
}

static MTP_NOINLINE void free_sized_slow(mtpi_desc_t *s, void *p, size_t size) {
  int e = errno; /* frees leave errno alone (mtpool.h); a report may set it */
  free_sized_check(s, p, size);
  errno = e;
}

void mtp_free_sized(void *p, size_t size) {
  uintptr_t u = (uintptr_t)p;
  if (MTP_UNLIKELY(!mtp__is_region_ptr(u))) {
    free_not_region(p, size, true);
    return;
  }
  mtpi_desc_t *s = mtp__run_of(u);
  if (MTP_LIKELY(size - s->size_min <= s->size_span)) /* size maps to this block's class */
    free_fast(s, p);
  else
    free_sized_slow(s, p, size);
}

/* ---- queries and realloc ---- */

/* Finds p's block: false if p is not the start of a block mtpool handed out (as far as can be
 * told without checked mode). *slab_out: its slab or medium block's descriptor, NULL for a large
 * block. */
static bool lookup(const void *p, size_t *usable_out, mtpi_pool_t **pool_out,
                   mtpi_desc_t **slab_out) {
  uintptr_t u = (uintptr_t)p;
  if (mtp__is_region_ptr(u)) {
    mtpi_desc_t *s = mtp__run_of(u);
    if (s->kind == MTP_PAGE_MEDIUM) { /* freed: MTP_MEDIUM_FREED (types.h) */
      if ((const char *)p != mtp__page_start(s) || mtp__load_relaxed(&s->freed) != 0) return false;
      *usable_out = mtp__medium_usable(s);
    } else if (s->kind == MTP_PAGE_PACKED) {
      if (!mtp__packed_lookup(s, p, usable_out)) return false;
    } else if (s->kind != MTP_PAGE_SLAB) {
      return false;
    } else if (s->checked) { /* a checked block's user address may be past its front guard */
      if (!mtp__checked_lookup(s, p, usable_out)) return false;
    } else {
      if ((const char *)p >= mtp__slab_bump(s) ||
          !mtp__offset_ok((uint64_t)((const char *)p - mtp__page_start(s)), s->cls))
        return false;
      *usable_out = s->block_size;
    }
    if (pool_out) *pool_out = mtp__pool_of_page(s);
    if (slab_out) *slab_out = s;
    return true;
  }
  if (slab_out) *slab_out = NULL;
  if (mtp__checked_zero_lookup(p, pool_out)) {
    *usable_out = 0;
    return true;
  }
  return mtp__large_lookup(p, usable_out, pool_out);
}

size_t mtp_usable_size(const void *p) {
  size_t n = 0;
  if (p == NULL) return 0;
  if (!lookup(p, &n, NULL, NULL)) mtp__error(MTP_ERR_INVALID_POINTER, "invalid pointer (usable size)", p);
  return n;
}

mtp_pool_t *mtp_pool_of(const void *p) {
  mtpi_pool_t *pool = NULL;
  size_t n;
  if (p == NULL || !lookup(p, &n, &pool, NULL)) return NULL;
  return mtp__pool_out(pool);
}

int mtp_check_range(const void *p, size_t n) {
  if (p == NULL || n == 0) return 0;
  const char *c = (const char *)p, *b = NULL;
  const char *what = "overflow (an access past the end of a block)";
  size_t usable = 0;
  int err = 0;
  uintptr_t u = (uintptr_t)p;
  if (mtp__is_region_ptr(u)) {
    mtpi_desc_t *s = mtp__run_of(u);
    char *start = mtp__page_start(s);
    if (s->kind == MTP_PAGE_SLAB && s->checked) {
      err = mtp__checked_range(s, c, n, &what);
    } else if (s->kind == MTP_PAGE_SLAB && c < s->end) { /* the block's bytes, all usable */
      b = start + (size_t)(c - start) / s->block_size * s->block_size;
      usable = s->block_size;
    } else if (s->kind == MTP_PAGE_MEDIUM && mtp__load_relaxed(&s->freed) == 0) {
      b = start;
      usable = mtp__medium_usable(s);
    } else if (s->kind == MTP_PAGE_PACKED && mtp__packed_lookup(s, p, &usable)) {
      b = c; /* a packed block is known by its start only */
    }
  } else if (mtp__checked_zero_lookup(p, NULL)) {
    err = MTP_ERR_OVERFLOW;
    what = "overflow (an access to a zero-size block)";
  } else if ((u & (mtp__os_page_size() - 1)) == 0 && mtp__large_lookup(p, &usable, NULL)) {
    b = c; /* a large block is known by its start only (page-aligned: others take no lock) */
  }
  if (b != NULL && n > usable - (size_t)(c - b)) err = MTP_ERR_OVERFLOW;
  if (err == 0) return 0;
  /* a sampled block is a large one, known by its start: the report names its site */
  void *origin[MTP_PROF_MAX_DEPTH];
  unsigned depth = MTP_UNLIKELY(mtp__prof_on) && b == c
                       ? mtp__prof_origin(p, origin, MTP_PROF_MAX_DEPTH, false)
                       : 0;
  mtp__error_origin(origin, depth);
  mtp__error(err, what, p);
  mtp__error_origin(NULL, 0);
  return err;
}

/* Up to this size a block that realloc moves becomes a medium block, above it a large one (why:
 * at its use in mtp_realloc; the limit's measurements: bench/results/notes.md, alloc.c). */
#define REALLOC_MEDIUM_MAX ((size_t)128 << 10)

/* A sampled block (profile/profile.c) is not resized in place: it moves, so that its sample goes with
 * the free and the new block is counted as an allocation. */
static MTP_NOINLINE void *realloc_sampled(void *p, size_t size) {
  size_t old = 0;
  mtpi_pool_t *pool = NULL;
  mtpi_desc_t *s;
  if (!lookup(p, &old, &pool, &s)) return NULL; /* a sampled block is a live large block */
  void *q = alloc_slow(pool, size);
  if (q == NULL) return NULL;
  memcpy(q, p, size < old ? size : old);
  mtp_free(p);
  return q;
}

void *mtp_realloc(void *p, size_t size) {
  if (p == NULL) return mtp_alloc(size);
  if (MTP_UNLIKELY(mtp__prof_on) && mtp__prof_holds(p)) return realloc_sampled(p, size);
  /* A large block that stays large is resized in its mapping (mremap: no copy), with an eighth
   * more room when it grows, as a growing buffer usually grows again: most calls of a growing
   * buffer end here, in one pass under the large lock (which also tells that p is one; a checked
   * pool's block is not resized: its exact canary is kept by a copy). */
  bool tried_large = size > MTP_MAX_SMALL && !mtp__is_region_ptr((uintptr_t)p);
  if (tried_large) {
    void *q = mtp__large_resize(p, size, size / 8);
    if (q != NULL) return q;
  }
  mtpi_pool_t *pool = NULL;
  mtpi_desc_t *s = NULL;
  size_t old = 0;
  if (!lookup(p, &old, &pool, &s)) {
    mtp__error(MTP_ERR_INVALID_POINTER, "invalid pointer (realloc)", p);
    errno = EINVAL;
    return NULL;
  }
  /* Keep the block when the new size maps to its size class, so that a sized free with either
   * size stays valid. (A medium block's cls is MTP_NUM_CLASSES: never equal.) */
  if (s != NULL && !s->checked && size <= MTP_MAX_SMALL && mtp__class_of(size) == s->cls) return p;
  /* A medium block that stays medium: grown into the free pages after it, or shrunk, in place. */
  bool medium = s != NULL && s->kind == MTP_PAGE_MEDIUM;
  if (medium && size > MTP_MAX_SMALL && size <= MTP_MEDIUM_MAX) {
    bool due = false;
    bool resized = mtp__medium_resize(p, size, &due);
    if (due) mtp__purger_wake();
    if (resized) return p;
  }
  /* A packed block that shrinks stays where it is while it fits the new size within an eighth
   * (sized frees of either size stay valid), else moves to a packed block that fits; one that
   * grows moves to a run of whole pages, which realloc grows in place while it can. */
  bool shrunk_packed = s != NULL && s->kind == MTP_PAGE_PACKED && size > MTP_MAX_SMALL && size <= old;
  if (shrunk_packed && old - size <= size / 8) return p;
  /* A block that becomes large gets an eighth more room at once. Checked pools keep the exact
   * canary: they copy. */
  void *q = NULL;
  if (size > MTP_MAX_SMALL && !pool->check) {
    if (s == NULL && !tried_large) {
      q = mtp__large_resize(p, size, size / 8);
      if (q != NULL) return q;
    }
    /* One that becomes medium gets its pages (which realloc grows in place while it can), up to
     * REALLOC_MEDIUM_MAX: above it, a block that realloc moves is a growing buffer, and a large
     * block grows by mremap (no copy), where a medium block's growth that no free pages follow copies it,
     * and so does its move to a large block past MTP_MEDIUM_MAX. */
    bool look = false;
    q = size <= REALLOC_MEDIUM_MAX ? mtp__heap_medium_alloc(pool, size, false, shrunk_packed)
                             : mtp__large_alloc_room(pool, size, size / 8, &look);
    if (look) mtp__purger_look();
  } else {
    q = mtp_pool_alloc(mtp__pool_out(pool), size);
  }
  if (q == NULL) return NULL;
  memcpy(q, p, size < old ? size : old);
  mtp_free(p);
  return q;
}
