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

MTP_NO_ASAN MTP_NEXT_FN mtpi_block_t *mtp__block_next(mtpi_block_t *b) {
#if defined(MTP_TRACK_VALGRIND)
  VALGRIND_MAKE_MEM_DEFINED(b, sizeof(*b));
  mtpi_block_t *n = b->next;
  VALGRIND_MAKE_MEM_NOACCESS(b, sizeof(*b));
  return n;
#else
  return b->next;
#endif
}

MTP_NO_ASAN MTP_NEXT_FN void mtp__block_set_next(mtpi_block_t *b, mtpi_block_t *n) {
#if defined(MTP_TRACK_VALGRIND)
  VALGRIND_MAKE_MEM_UNDEFINED(b, sizeof(*b));
  b->next = n;
  VALGRIND_MAKE_MEM_NOACCESS(b, sizeof(*b));
#else
  b->next = n;
#endif
}

#endif
