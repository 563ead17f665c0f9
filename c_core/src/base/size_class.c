/* Size classes: 8-byte steps to 128 B, 16-byte steps to 256 B, then four classes per doubling
 * up to 32 KiB (at most 25% rounding above 256 B, usually 12.5-20%). 24, 40, 48 and 56-byte
 * container nodes take exactly their size. A class's slab spans the fewest 64 KiB pages that hold
 * at least 8 blocks with at most 1/8 of the span left over. tests/unit/test_size_class.c checks
 * these tables against those rules (and that a slab holds fewer than 2^14 blocks, the remote
 * list's counter). Layer: base. */
#include "base.h"

const uint32_t mtp__class_size[MTP_NUM_CLASSES] = {
    8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104,
    112, 120, 128, 144, 160, 176, 192, 208, 224, 240, 256, 320, 384,
    448, 512, 640, 768, 896, 1024, 1280, 1536, 1792, 2048, 2560, 3072, 3584,
    4096, 5120, 6144, 7168, 8192, 10240, 12288, 14336, 16384, 20480, 24576, 28672, 32768,
};

const uint8_t mtp__class_pages[MTP_NUM_CLASSES] = {
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 4,
};

/* [(size + 7) >> 3] -> smallest class holding size, for size <= MTP_DIRECT_MAX. */
const uint8_t mtp__class_direct[MTP_DIRECT_MAX / 8 + 1] = {
    0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 16, 17, 17, 18, 18, 19, 19, 20,
    20, 21, 21, 22, 22, 23, 23, 24, 24, 24, 24, 24, 24, 24, 24, 25, 25, 25, 25, 25, 25, 25, 25, 26, 26, 26,
    26, 26, 26, 26, 26, 27, 27, 27, 27, 27, 27, 27, 27, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28, 28,
    28, 28, 28, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 29, 30, 30, 30, 30, 30, 30, 30,
    30, 30, 30, 30, 30, 30, 30, 30, 30, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31, 31,
};

/* [(size + 255) >> 8] -> smallest class holding size, for MTP_DIRECT_MAX < size <= MTP_MAX_SMALL:
 * every class above 1 KiB is a multiple of 256, so rounding size up to 256 keeps its class. */
const uint8_t mtp__class_upper[MTP_MAX_SMALL / 256 + 1] = {
    0, 23, 27, 29, 31, 32, 33, 34, 35, 36, 36, 37, 37, 38, 38, 39, 39, 40, 40, 40, 40, 41, 41, 41, 41, 42,
    42, 42, 42, 43, 43, 43, 43, 44, 44, 44, 44, 44, 44, 44, 44, 45, 45, 45, 45, 45, 45, 45, 45, 46, 46, 46,
    46, 46, 46, 46, 46, 47, 47, 47, 47, 47, 47, 47, 47, 48, 48, 48, 48, 48, 48, 48, 48, 48, 48, 48, 48, 48,
    48, 48, 48, 49, 49, 49, 49, 49, 49, 49, 49, 49, 49, 49, 49, 49, 49, 49, 49, 50, 50, 50, 50, 50, 50, 50,
    50, 50, 50, 50, 50, 50, 50, 50, 50, 51, 51, 51, 51, 51, 51, 51, 51, 51, 51, 51, 51, 51, 51, 51, 51,
};

unsigned mtp__class_of(size_t size) {
  MTP_ASSERT(size <= MTP_MAX_SMALL);
  return mtp__class_lookup(size);
}

unsigned mtp__class_aligned(size_t size, size_t alignment) {
  if (size > MTP_MAX_SMALL) return MTP_NUM_CLASSES;
  for (unsigned c = mtp__class_of(size); c < MTP_NUM_CLASSES; c++) {
    uint32_t s = mtp__class_size[c];
    if ((s & (0u - s)) >= alignment) return c; /* every block start is a multiple of s */
  }
  return MTP_NUM_CLASSES;
}
