/* Tool support: tell AddressSanitizer and Valgrind memcheck which bytes are handed out.
 * Free blocks and never-handed-out slab memory are poisoned (ASan) or inaccessible (memcheck), so
 * a user's use after free or overflow into a neighbour is reported by the tool. The core reads and
 * writes a free block's `next` word only through mtp__block_next / mtp__block_set_next, and looks
 * into a free block only between mtp__track_peek and mtp__track_unpeek. A leaf: it annotates and
 * calls nothing of the allocator. Layer: base. */
#ifndef MTP_TRACK_H
#define MTP_TRACK_H

#include "types.h"

#if defined(__SANITIZE_ADDRESS__)
#define MTP_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MTP_ASAN 1
#endif
#endif

#if defined(MTP_ASAN)
#define MTP_NEXT_FN static
#include <sanitizer/asan_interface.h>
/* noinline: an inlined body would be instrumented as part of its caller */
#define MTP_NO_ASAN __attribute__((no_sanitize("address"), noinline, unused))
#define mtp__track_poison(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define mtp__track_unmap(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#define mtp__track_defined(p, n) ((void)(p), (void)(n))
#define mtp__track_peek(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#define mtp__track_unpeek(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define mtp__track_alloc(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#define mtp__track_free(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#elif defined(MTP_VALGRIND) && MTP_VALGRIND
#define MTP_NEXT_FN MTP_INLINE
#include <valgrind/memcheck.h>
#define MTP_NO_ASAN
#define mtp__track_poison(p, n) VALGRIND_MAKE_MEM_NOACCESS((p), (n))
#define mtp__track_unmap(p, n) ((void)(p), (void)(n)) /* memcheck forgets unmapped memory */
#define mtp__track_defined(p, n) VALGRIND_MAKE_MEM_DEFINED((p), (n))
#define mtp__track_peek(p, n) VALGRIND_MAKE_MEM_DEFINED((p), (n))
#define mtp__track_unpeek(p, n) VALGRIND_MAKE_MEM_NOACCESS((p), (n))
#define mtp__track_alloc(p, n) VALGRIND_MALLOCLIKE_BLOCK((p), (n), 0, 0)
#define mtp__track_free(p, n) VALGRIND_FREELIKE_BLOCK((p), 0)
#define MTP_TRACK_VALGRIND 1
#else
#define MTP_NEXT_FN MTP_INLINE
#define MTP_NO_ASAN
#define mtp__track_poison(p, n) ((void)(p), (void)(n))
#define mtp__track_unmap(p, n) ((void)(p), (void)(n))
#define mtp__track_defined(p, n) ((void)(p), (void)(n))
#define mtp__track_peek(p, n) ((void)(p), (void)(n))
#define mtp__track_unpeek(p, n) ((void)(p), (void)(n))
#define mtp__track_alloc(p, n) ((void)(p), (void)(n))
#define mtp__track_free(p, n) ((void)(p), (void)(n))
#endif

/* Memory handed to the caller whole (a medium block, a large range): no poison left (ASan), every
 * byte defined (memcheck: the program may read what it did not write, as from fresh pages). */
MTP_INLINE void mtp__track_handout(void *p, size_t n) {
  mtp__track_unmap(p, n);
  mtp__track_defined(p, n);
}

/* Free-list links are stored encoded: link word = next ^ mtp__link_key, on the owner's list and
 * on the remote list alike (see "Free-list links" at mtpi_block_t in types.h). The key is set once
 * per process, when the first pool (the default, inside its once) is made (mtp__link_key_init),
 * and never changes: a plain read of it is its final value for every thread that reached a pool
 * (it learnt of the pool through the default pool's once or a release/acquire pair after). */
#pragma GCC visibility push(hidden)
/* A plain word, so that the compiler may keep it in a register across a pop or a push (an atomic
 * load could not be merged). Written once, by a CAS in mtp__link_key_init, before any pool exists;
 * read plainly after that (ordered as above). Setting it at a slab's format let two threads' first
 * slabs race: the loser's failed CAS counts as a write to ThreadSanitizer (test_rel_fork). */
extern uintptr_t mtp__link_key;
/* The key's top 16 bits (a free block's link word's top half), kept apart so that the free fast
 * path tests a block in one 16-bit compare. Written once, by a CAS from 0 after the key's, by
 * whichever initialiser gets there first (the same value from any); read plainly after that,
 * ordered as the key is. */
extern uint16_t mtp__link_tag;
/* Set the key if no thread did yet (any thread; a CAS makes the first value the only one). */
void mtp__link_key_init(void);
#pragma GCC visibility pop
MTP_INLINE uintptr_t mtp__link_key_get(void) { return mtp__link_key; }

MTP_NO_ASAN MTP_NEXT_FN mtpi_block_t *mtp__block_next(mtpi_block_t *b) {
#if defined(MTP_TRACK_VALGRIND)
  VALGRIND_MAKE_MEM_DEFINED(b, sizeof(*b));
  uintptr_t n = b->link;
  VALGRIND_MAKE_MEM_NOACCESS(b, sizeof(*b));
#else
  uintptr_t n = b->link;
#endif
  return (mtpi_block_t *)(n ^ mtp__link_key_get());
}

/* set_next with the key passed in: a loop that writes many links (a slab's carve) reads the key
 * once, where each store through a uintptr_t word would make the compiler read it again. */
MTP_NO_ASAN MTP_NEXT_FN void mtp__block_set_next_key(mtpi_block_t *b, mtpi_block_t *n,
                                                     uintptr_t key) {
  uintptr_t w = (uintptr_t)n ^ key;
#if defined(MTP_TRACK_VALGRIND)
  VALGRIND_MAKE_MEM_UNDEFINED(b, sizeof(*b));
  b->link = w;
  VALGRIND_MAKE_MEM_NOACCESS(b, sizeof(*b));
#else
  b->link = w;
#endif
}

MTP_NO_ASAN MTP_NEXT_FN void mtp__block_set_next(mtpi_block_t *b, mtpi_block_t *n) {
  mtp__block_set_next_key(b, n, mtp__link_key_get());
}

/* The pop's read: b's next (decoded), and b's link word overwritten with 0 (a value that never
 * passes mtp__block_tagged), so that a block handed out carries no stale link that would send
 * its free to the slow path's walk. */
MTP_NO_ASAN MTP_NEXT_FN mtpi_block_t *mtp__block_take(mtpi_block_t *b) {
#if defined(MTP_TRACK_VALGRIND)
  VALGRIND_MAKE_MEM_DEFINED(b, sizeof(*b));
  uintptr_t n = b->link;
  b->link = 0;
  VALGRIND_MAKE_MEM_NOACCESS(b, sizeof(*b));
#else
  uintptr_t n = b->link;
  b->link = 0;
#endif
  return (mtpi_block_t *)(n ^ mtp__link_key_get());
}

/* Whether b's first word could be a link: it decodes to an address below 2^48 (NULL included).
 * Every free block passes; a block in use passes only if the user stored a word whose top 16
 * bits equal the key's (random, nonzero): about 1 in 65536 for arbitrary data, never for 0, small
 * integers, pointers or text. A pass is a hint only: the caller confirms by looking for b on its
 * slab's lists. Valgrind builds answer false (memcheck reports double frees itself, and the word
 * of a block in use may be undefined). */
MTP_NO_ASAN MTP_NEXT_FN bool mtp__block_tagged(mtpi_block_t *b) {
#if defined(MTP_TRACK_VALGRIND)
  (void)b;
  return false;
#else
  /* the link word's top 16 bits, read alone (may_alias: the word may hold user data) */
  typedef uint16_t __attribute__((may_alias)) half_t;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  const half_t *top = (const half_t *)((const char *)b + 6);
#else
  const half_t *top = (const half_t *)b;
#endif
  return *top == mtp__link_tag;
#endif
}

#endif
