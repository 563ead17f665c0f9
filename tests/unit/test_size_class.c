/* Unit test of the base layer's size classes: the tables follow the documented rules (steps,
 * rounding, fits, alignment, slab spans), and every slab's capacity fits the remote list's block
 * counter. */
#include "base/base.h"
#include "testhelper.h"

static void test_steps(void) {
  for (unsigned c = 0; c < MTP_NUM_CLASSES; c++) {
    uint32_t s = mtp__class_size[c];
    if (c > 0) CHECK(s > mtp__class_size[c - 1]);
    if (s <= 128) CHECK_EQ_SZ(s, 8 * (c + 1));
  }
  CHECK_EQ_SZ(mtp__class_size[MTP_NUM_CLASSES - 1], MTP_MAX_SMALL);
  CHECK(MTP_NUM_CLASSES <= 256); /* a class index fits the lookup tables' bytes */
  /* every size up to 128 B takes its size rounded up to 8, no more */
  for (size_t n = 1; n <= 128; n++)
    CHECK_EQ_SZ(mtp__class_size[mtp__class_of(n)], (n + 7) & ~(size_t)7);
  /* the classes up to 1 KiB */
  static const uint32_t small[] = {8,   16,  24,  32,  40,  48,  56,  64,  72,  80,  88,
                                   96,  104, 112, 120, 128, 144, 160, 176, 192, 208,
                                   224, 240, 256, 320, 384, 448, 512, 640, 768, 896, 1024};
  for (unsigned i = 0; i < sizeof(small) / sizeof(small[0]); i++) CHECK_EQ_SZ(mtp__class_size[i], small[i]);
  /* container nodes take exactly their size */
  unsigned sizes[] = {24, 40, 48, 56};
  for (unsigned i = 0; i < 4; i++) CHECK_EQ_SZ(mtp__class_size[mtp__class_of(sizes[i])], sizes[i]);
  /* rounding: at most 25% from 129 B to 1 KiB, at most 12.5% above 1 KiB */
  for (size_t n = 129; n <= MTP_MAX_SMALL; n++) {
    uint32_t s = mtp__class_size[mtp__class_of(n)];
    CHECK(s >= n);
    if (n <= MTP_DIRECT_MAX)
      CHECK(4 * (size_t)s <= 5 * n);
    else
      CHECK(8 * (size_t)s <= 9 * n);
  }
  /* powers of two take exactly their size; "power of two + small header" (up to 64 B) at 4, 8 and
   * 16 KiB takes at most 64 B more than the power, so 2^k + 8 .. 2^k + 64 round by at most 2%
   * (Squid's memory-cache node: 4,096 + 40 B) */
  for (size_t p = 8; p <= MTP_MAX_SMALL; p *= 2) CHECK_EQ_SZ(mtp__class_size[mtp__class_of(p)], p);
  for (size_t p = 4096; p <= 16384; p *= 2)
    for (size_t h = 1; h <= 64; h++) {
      CHECK_EQ_SZ(mtp__class_size[mtp__class_of(p + h)], p + 64);
      if (h >= 8) CHECK(50 * (size_t)mtp__class_size[mtp__class_of(p + h)] <= 51 * (p + h));
    }
  CHECK_EQ_SZ(mtp__class_size[mtp__class_of(4136)], 4160);
}

/* The reference: the smallest class holding n, by a linear search of the class sizes. */
static unsigned class_ref(size_t n) {
  unsigned c = 0;
  while (mtp__class_size[c] < n) c++;
  return c;
}

static void test_lookup(void) {
  for (size_t n = 0; n <= MTP_MAX_SMALL; n++) {
    unsigned c = mtp__class_of(n);
    CHECK(c < MTP_NUM_CLASSES);
    CHECK_EQ_SZ(c, class_ref(n));
    CHECK_EQ_SZ(mtp__class_lookup(n), c);
    CHECK(mtp__class_size[c] >= (n ? n : 1));
    if (c > 0) CHECK(mtp__class_size[c - 1] < n);
    if (n <= MTP_DIRECT_MAX) CHECK_EQ_SZ(mtp__class_direct[(n + 7) >> 3], c);
    else CHECK_EQ_SZ(mtp__class_upper[(n + 15) >> MTP_UPPER_SHIFT], c);
  }
  /* the upper table's 16-byte steps: every class above MTP_DIRECT_MAX is a multiple of 16 */
  for (unsigned c = 0; c < MTP_NUM_CLASSES; c++)
    if (mtp__class_size[c] > MTP_DIRECT_MAX) CHECK_EQ_SZ(mtp__class_size[c] % (1u << MTP_UPPER_SHIFT), 0);
  /* the hot lists (heap.c) serve exactly the classes above MTP_DIRECT_MAX */
}

static void test_alignment(void) {
  /* a block is aligned to the largest power of two dividing its size, capped at 16 */
  for (size_t n = 1; n <= MTP_MAX_SMALL; n++) {
    uint32_t s = mtp__class_size[mtp__class_of(n)];
    size_t want = n & (0 - n);
    if (want > 16) want = 16;
    CHECK((s & (0u - s)) >= want);
  }
  CHECK_EQ_SZ(mtp__class_size[mtp__class_aligned(24, 64)], 64);
  CHECK_EQ_SZ(mtp__class_aligned(100, 1 << 20), MTP_NUM_CLASSES);
}

/* The slab rule: at least 16 blocks with at most 1/8 of the span left over. */
static bool span_ok(size_t pages, uint32_t size) {
  size_t span = pages * MTP_PAGE_SIZE, cap = span / size;
  return cap >= 16 && (span - cap * size) * 8 <= span;
}

static void test_spans(void) {
  for (unsigned c = 0; c < MTP_NUM_CLASSES; c++) {
    size_t pages = mtp__class_pages[c];
    size_t span = pages * MTP_PAGE_SIZE;
    size_t cap = span / mtp__class_size[c];
    /* a power of two (the region layer hands out slab spans of 1 to 16 pages), the fewest that
     * keep the rule */
    CHECK(pages >= 1 && pages <= 16 && (pages & (pages - 1)) == 0);
    CHECK(span_ok(pages, mtp__class_size[c]));
    if (pages > 1) CHECK(!span_ok(pages / 2, mtp__class_size[c]));
    /* the remote list word counts blocks in MTP_TF_COUNT_BITS (14) bits; every block of a slab
     * can be on that list at once */
    CHECK(cap < (1u << MTP_TF_COUNT_BITS));
    CHECK_EQ_SZ(MTP_TF_COUNT((uintptr_t)cap << MTP_TF_COUNT_SHIFT | MTP_TF_OWNED | MTP_TF_LISTED), cap);
  }
}

/* The free fast path's interior-pointer tests (base/base.h) say "a block's start" exactly at the
 * multiples of the class size, over every offset a slab has; the small test is used up to
 * MTP_DIRECT_MAX, where a slab is one page. */
static void test_offset_tests(void) {
  for (unsigned c = 0; c < MTP_NUM_CLASSES; c++) {
    uint32_t size = mtp__class_size[c];
    CHECK(mtp__class_recip[c] == UINT64_MAX / size + 1);
    size_t span = (size_t)mtp__class_pages[c] * MTP_PAGE_SIZE;
    size_t wrong = 0;
    for (size_t n = 0; n <= span; n++) wrong += mtp__offset_ok(n, c) != (n % size == 0);
    CHECK_EQ_SZ(wrong, 0);
    if (size > MTP_DIRECT_MAX) continue;
    CHECK_EQ_SZ(mtp__class_pages[c], 1);
    uint32_t r = mtp__recip32(size);
    for (uint32_t n = 0; n < MTP_PAGE_SIZE; n++)
      wrong += mtp__small_offset_ok((uint16_t)n, r) != (n % size == 0);
    CHECK_EQ_SZ(wrong, 0);
  }
}

int main(void) {
  RUN(test_offset_tests);
  RUN(test_steps);
  RUN(test_lookup);
  RUN(test_alignment);
  RUN(test_spans);
  DONE();
}
