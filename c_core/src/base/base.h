/* The base layer's functions: size classes, internal records, options, misuse reports. The OS
 * calls are in os.h; atomics, lists, asserts and tool annotations in their own headers.
 * Layer: base (depends on nothing above). */
#ifndef MTP_BASE_H
#define MTP_BASE_H

#include "debug.h"
#include "types.h"

#pragma GCC visibility push(hidden)

/* ---- size classes (size_class.c) ---- */
extern const uint8_t mtp__class_direct[MTP_DIRECT_MAX / 8 + 1]; /* [(size+7)>>3] -> class */
extern const uint8_t mtp__class_upper[(MTP_MAX_SMALL >> MTP_UPPER_SHIFT) + 1]; /* [(size+15)>>4] */
extern const uint32_t mtp__class_size[MTP_NUM_CLASSES];
extern const uint8_t mtp__class_pages[MTP_NUM_CLASSES]; /* slab run in pages */
extern const uint64_t mtp__class_recip[MTP_NUM_CLASSES]; /* ceil(2^64 / size) */
unsigned mtp__class_of(size_t size);                    /* size <= MTP_MAX_SMALL */
/* The class of size <= MTP_MAX_SMALL in one table load (two tables: 8-byte steps to 1 KiB, then
 * 16-byte steps, since every class above 1 KiB is a multiple of 16). Inline for the fast paths. */
static inline __attribute__((always_inline)) unsigned mtp__class_lookup(size_t size) {
  return size <= MTP_DIRECT_MAX ? mtp__class_direct[(size + 7) >> 3]
                                : mtp__class_upper[(size + 15) >> MTP_UPPER_SHIFT];
}
/* The interior-pointer tests of the free fast path (api/alloc.c): whether an offset is a multiple
 * of a block size, by a multiply and a compare. mtp__recip32(size) = ceil(2^32 / size), kept in a
 * slab's descriptor. For size <= MTP_DIRECT_MAX and n < 2^16 (the offset in a one-page slab):
 * n = q * size gives n * r mod 2^32 = q * (size * r - 2^32) < 2^16, any other n at least
 * r >= 2^22. For any class and n < 2^32: n * mtp__class_recip[c] mod 2^64 < that reciprocal.
 * tests/unit/test_size_class.c checks both over every offset a slab has. */
static inline uint32_t mtp__recip32(uint32_t size) {
  return (uint32_t)((((uint64_t)1 << 32) + size - 1) / size);
}
static inline __attribute__((always_inline)) bool mtp__small_offset_ok(uint16_t n, uint32_t r) {
  return (uint32_t)(n * r) < (1u << 16);
}
static inline __attribute__((always_inline)) bool mtp__offset_ok(uint64_t n, unsigned cls) {
  uint64_t r = mtp__class_recip[cls];
  return n * r < r;
}
/* Smallest class >= size whose blocks are all aligned to alignment; MTP_NUM_CLASSES if none. */
unsigned mtp__class_aligned(size_t size, size_t alignment);

/* ---- internal records (meta.c): zeroed, never unmapped; NULL + ENOMEM on OOM. Each chunk of
 * records is preceded by a PROT_NONE guard page, so no user mapping just below can overflow
 * into a record. ---- */
void *mtp__meta_alloc(size_t size);
void mtp__meta_free(void *p, size_t size);
extern pthread_mutex_t mtp__meta_lock;

/* ---- options (options.c) ---- */
void mtp__options_from_env(mtp_options_t *opt);
void mtp__options_sanitize(mtp_options_t *opt);
/* MTPOOL_HUGEPAGES, process-wide. The rule (auto, the default): a huge page backs memory that is
 * used densely. The purge thread collapses an aligned huge range of a pool's memory that it finds
 * MTP_HUGE_DENSE_NUM/DEN resident into one huge page, and the fresh memory a pool grows into is
 * advised huge while the pool's ranges were last found dense (not since sparse: a range split by
 * a purge); everything else stays on small pages (region/purge.c for regions,
 * pool/large_ranges.c for large blocks). 0 = never (MADV_NOHUGEPAGE), 1 = huge from the start,
 * system = no advice and no collapse (the system's THP setting decides). */
enum { MTP_HUGE_SYSTEM = 0, MTP_HUGE_NEVER, MTP_HUGE_ALWAYS, MTP_HUGE_AUTO };
#define MTP_HUGE_DENSE_NUM 7
#define MTP_HUGE_DENSE_DEN 8
int mtp__hugepages_parse(const char *v); /* MTP_HUGE_*; -1 for a value it does not know */
int mtp__hugepages_mode(void);           /* the environment's, read once */
/* The advice fresh memory gets (grow: its pool's ranges were last found dense): 1 MADV_HUGEPAGE,
 * 0 MADV_NOHUGEPAGE (never; and in auto where the system would give huge pages unasked), -1 none. */
int mtp__huge_fresh_advice(bool grow);
/* Whether the purge collapses dense ranges (auto and 1). */
bool mtp__huge_collapses(void);

/* ---- purge timing, from the purge_delay_ms option ----
 * Freed runs of 64 KiB or more (a medium block's pages, a cached large range) are due for the
 * purge a tenth of the pool's purge delay after their free; slab pages the whole delay. Slab
 * pages are what the next thread or class carves, so purging them early costs page faults; a run
 * of 64 KiB or more is taken again soon by the loop that freed it, or sits idle and only holds
 * memory (bench/results/notes.md: base.h). */
#define MTP_RUN_DELAY_DIV 10
/* The free time to stamp on a medium block's pages or a large range freed at now_ms in a pool of
 * that purge delay: the purge, which takes what was freed one delay ago, finds them due a tenth of
 * the delay on. */
static inline uint64_t mtp__run_freed_at(long purge_delay_ms, uint64_t now_ms) {
  if (purge_delay_ms <= 0) return now_ms;
  uint64_t early = (uint64_t)purge_delay_ms - (uint64_t)purge_delay_ms / MTP_RUN_DELAY_DIV;
  return now_ms > early ? now_ms - early : 0;
}

/* ---- misuse reports (error.c): to the handler, or stderr + abort ---- */
void mtp__error(int err, const char *what, const void *p);
/* Where the block that this thread's next reports are about was allocated: depth return
 * addresses, innermost first (the caller's array, read during the reports; depth 0 clears it).
 * The default report prints them after its line; a handler set by mtp_set_error_handler does not
 * see them. The caller that knows the site (the profiler's record of a sampled block) sets it
 * around the call that may report. */
void mtp__error_origin(void *const *pc, unsigned depth);
/* Copy s (user text, e.g. a pool name) into buf for a plain-text report, every byte outside
 * printable ASCII and the quote and backslash escaped C-style, truncated to fit; needs
 * 4 * strlen(s) + 1 bytes for all of it. */
void mtp__text_escape(char *buf, size_t size, const char *s);

#pragma GCC visibility pop

#endif
