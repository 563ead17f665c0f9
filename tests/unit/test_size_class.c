/* Unit test of the base layer's size classes: the tables follow the documented rules (steps,
 * alignment, slab spans), and every slab's capacity fits the remote list's block counter. */
#include "base/base.h"
#include "testhelper.h"

static void test_steps(void) {
  for (unsigned c = 0; c < MTP_NUM_CLASSES; c++) {
    uint32_t s = mtp__class_size[c];
    if (c > 0) CHECK(s > mtp__class_size[c - 1]);
    if (s <= 128) CHECK_EQ_SZ(s, 8 * (c + 1));
  }
  CHECK_EQ_SZ(mtp__class_size[MTP_NUM_CLASSES - 1], MTP_MAX_SMALL);
  /* container nodes take exactly their size */
  unsigned sizes[] = {24, 40, 48, 56};
  for (unsigned i = 0; i < 4; i++) CHECK_EQ_SZ(mtp__class_size[mtp__class_of(sizes[i])], sizes[i]);
  /* at most 25% rounding above 128 B */
  for (size_t n = 129; n <= MTP_MAX_SMALL; n++) {
    uint32_t s = mtp__class_size[mtp__class_of(n)];
    CHECK(s >= n);
    CHECK((double)s <= 1.25 * (double)n + 16);
  }
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
    else CHECK_EQ_SZ(mtp__class_upper[(n + 255) >> 8], c);
  }
  /* the upper table's 256-byte steps: every class above MTP_DIRECT_MAX is a multiple of 256 */
  for (unsigned c = 0; c < MTP_NUM_CLASSES; c++)
    if (mtp__class_size[c] > MTP_DIRECT_MAX) CHECK_EQ_SZ(mtp__class_size[c] % 256, 0);
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

static void test_spans(void) {
  for (unsigned c = 0; c < MTP_NUM_CLASSES; c++) {
    size_t span = (size_t)mtp__class_pages[c] * MTP_PAGE_SIZE;
    size_t cap = span / mtp__class_size[c];
    CHECK(cap >= 8);
    CHECK((span - cap * mtp__class_size[c]) * 8 <= span);
    /* the remote list word counts blocks in MTP_TF_COUNT_BITS (14) bits; every block of a slab
     * can be on that list at once */
    CHECK(cap < (1u << MTP_TF_COUNT_BITS));
    CHECK_EQ_SZ(MTP_TF_COUNT((uintptr_t)cap << MTP_TF_COUNT_SHIFT | MTP_TF_OWNED | MTP_TF_LISTED), cap);
  }
}

int main(void) {
  RUN(test_steps);
  RUN(test_lookup);
  RUN(test_alignment);
  RUN(test_spans);
  DONE();
}
