/* What checked_verify.c gives checked.c: the quarantine, the checks of freed blocks and of guards;
 * and the layout of a checked pool's block that both read (checked.c's header comment draws it).
 * Included by those two files only. Layer: wrap (inside the room). */
#ifndef MTP_HEAP_CHECKED_VERIFY_H
#define MTP_HEAP_CHECKED_VERIFY_H

#include "checked/checked.h"
#include "profile/profile.h"

#pragma GCC visibility push(hidden)

/* u32 at the block's end: requested size, form, MTP_CHECKED_FRONTED in the top bit */
#define MTP_CHECKED_FOOTER 4
#define MTP_CHECKED_MIN_CANARY 4
#define MTP_CHECKED_FRONT 16       /* the front guard: keeps the user's address 16-aligned */
#define MTP_CHECKED_FRONTED 0x80000000u
#define MTP_CHECKED_FORM_SHIFT 29  /* MTP_FORM_* in bits 29-30 */
#define MTP_CHECKED_FORM_MASK (3u << MTP_CHECKED_FORM_SHIFT)
/* a checked small block's size is below 32 KiB */
#define MTP_CHECKED_SIZE_MASK ((1u << MTP_CHECKED_FORM_SHIFT) - 1)
#define MTP_CHECKED_CANARY 0xCA
#define MTP_CHECKED_FREED 0x00     /* a freed block is cleared: a late read finds no stale data */
/* The quarantine's bounds: whichever is reached first pushes out the oldest block. */
#define MTP_QUARANTINE_SLOTS 1024
#define MTP_QUARANTINE_BYTES ((size_t)1 << 20)

/* A checked slab's allocation bitmap (check_bits): a bit per block, set while it is allocated. */
static inline bool mtp__checked_bit_get(const uint8_t *bits, uint32_t i) {
  return bits[i >> 3] >> (i & 7) & 1;
}
static inline void mtp__checked_bit_set(uint8_t *bits, uint32_t i) {
  bits[i >> 3] |= (uint8_t)(1u << (i & 7));
}
static inline void mtp__checked_bit_clear(uint8_t *bits, uint32_t i) {
  bits[i >> 3] &= (uint8_t)~(1u << (i & 7));
}

static inline uint32_t *mtp__checked_footer(mtpi_desc_t *s, const void *b) {
  return (uint32_t *)((char *)b + s->block_size - MTP_CHECKED_FOOTER);
}

/* The address the user held for block b (live or freed: the footer is kept at free). */
static inline char *mtp__checked_user_of(mtpi_desc_t *s, char *b) {
  return b + ((*mtp__checked_footer(s, b) & MTP_CHECKED_FRONTED) ? MTP_CHECKED_FRONT : 0);
}

/* ---- checks of a block (no lock: the caller holds the pool lock) ---- */
/* A free-list link read from a freed block of s: whether it names a free block of the same slab. */
bool mtp__checked_link_ok(mtpi_desc_t *s, mtpi_block_t *n);
/* Whether block b on a free list of s is still cleared (its link word aside). */
bool mtp__checked_pattern_ok(mtpi_desc_t *s, const char *b);
/* Live block b of s: NULL if its front guard and canary are intact, else what was written. */
const char *mtp__checked_guards_broken(mtpi_desc_t *s, const char *b);
/* The blocks beside block b of s (being freed) that no other check reads, the slab's guard block
 * and those not handed out yet: NULL if each is still cleared, else which side was written (an
 * overflow or underflow that went past b's guards), the block cleared again (reported once). */
const char *mtp__checked_neighbours_broken(mtpi_desc_t *s, const char *b);

/* ---- the quarantine (pool lock held) ---- */
/* Whether pool has its ring (made at the first call); false: no record to be had. */
bool mtp__checked_quarantine_ready(mtpi_pool_t *pool);
/* The oldest block leaves for its slab's free list; returns it if it was written to, else NULL. */
void *mtp__checked_quarantine_pop(mtpi_pool_t *pool);
/* Slab s is about to be released: its blocks leave the ring; one written to is returned. */
void *mtp__checked_quarantine_drop_slab(mtpi_pool_t *pool, mtpi_desc_t *s);
/* At each checked allocation: verify the next two blocks; one written to is returned. */
void *mtp__checked_quarantine_step(mtpi_pool_t *pool);

#pragma GCC visibility pop

#endif
