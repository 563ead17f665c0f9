/* The freed pattern: a freed medium block's or cached large range's first MTP_FREED_BYTES are
 * written with MTP_FREED_FILL at the free and checked when the memory is handed out again, so
 * that a write after free into the start of a block (headers, first fields) is reported then.
 * Plain memory operations: the caller makes the bytes accessible to tools first (track.h).
 * Layer: base. */
#ifndef MTP_FILL_H
#define MTP_FILL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define MTP_FREED_BYTES 128 /* a multiple of 8; every block and range is at least this long */
#define MTP_FREED_FILL 0xDF

/* Write the pattern over p's first MTP_FREED_BYTES. */
static inline void mtp__fill_freed(void *p) { memset(p, MTP_FREED_FILL, MTP_FREED_BYTES); }

/* Scan p's first MTP_FREED_BYTES a word at a time with no early exit (16 loads, not a byte loop:
 * bench/results/notes.md, fill.h): returns the OR of each word's difference from the pattern,
 * and *any the OR of the words (0: all zero). */
static inline uint64_t mtp__fill_scan(const void *p, uint64_t *any) {
  const unsigned char *b = (const unsigned char *)p;
  uint64_t diff = 0, or_all = 0;
  for (unsigned i = 0; i < MTP_FREED_BYTES; i += 8) {
    uint64_t w;
    memcpy(&w, b + i, 8);
    diff |= w ^ (0x0101010101010101ull * MTP_FREED_FILL);
    or_all |= w;
  }
  *any = or_all;
  return diff;
}

/* The pattern is intact, or the bytes are all zero (pages purged since the free read as zero). */
static inline bool mtp__fill_intact(const void *p) {
  uint64_t any;
  uint64_t diff = mtp__fill_scan(p, &any);
  return diff == 0 || any == 0;
}

/* The pattern is intact, byte for byte (memory never purged while freed: all zero is a write). */
static inline bool mtp__fill_exact(const void *p) {
  uint64_t any;
  return mtp__fill_scan(p, &any) == 0;
}

#endif
