#!/usr/bin/env python3
"""Prints the size-class tables of c_core/src/base/size_class.c (paste them there; the unit test
tests/unit/test_size_class.c checks the result against the rules below, whoever wrote it).

Rules:
  - to 1 KiB: 8-byte steps to 128 B (every request up to 128 B takes its size rounded up to 8),
    16-byte steps to 256 B, then four classes per doubling; 24, 40, 48 and 56-byte container
    nodes take exactly their size.
  - above 1 KiB: multiples of 16 (the upper lookup table's step), at most 12.5% rounding for every
    size (a class s serves sizes above the class below it, p: s <= 9/8 (p + 1)), every power of
    two a class, and "power of two + small header" classes 2^k + 64 for k = 12..14, so that
    2^k + 8 .. 2^k + 64 round by at most 2% (Squid's 4,136-byte memory-cache node takes 4,160
    bytes; 4 KiB + 128 and 8 KiB + 128 until issue 40); the fewest classes that do all this, then the smallest largest
    rounding, then sizes with the most trailing zero bits.
  - mtp__class_recip[c] = ceil(2^64 / size): an offset n below 2^32 is a multiple of the size
    iff n * recip mod 2^64 < recip (the free fast path's interior-pointer test, api/alloc.c).
  - MTP_NUM_CLASSES at most 256: the lookup tables hold a class index in a byte. The public
    statistics' array (MTP_STATS_MAX_CLASSES, 64) does not bound it: it lists the first 64.
  - a class's slab spans the fewest 64 KiB pages, a power of two (the region layer's spans, up
    to 16 pages), holding at least 16 blocks with at most 1/8 of the span left over. (8 blocks
    until issue 17: classes above 4 KiB then got slabs of 8-15 blocks, and a thread churning
    1-32 KiB blocks had several slabs per class, most frees landing in one that was not its
    current: the slow paths took half its time.)"""
import sys

PAGE, SMALL, DIRECT, UPPER_STEP = 65536, 32768, 1024, 16
MUST = [2048, 4096, 4096 + 64, 8192, 8192 + 64, 16384, 16384 + 64]


def lower():
    c = list(range(8, 129, 8)) + list(range(144, 257, 16))
    s = 256
    while s < DIRECT:
        c += [s + s // 4 * i for i in range(1, 5)]
        s *= 2
    return c


def upper():
    def tz(x):
        return min((x & -x).bit_length() - 1, 9)
    dp = {DIRECT: (0, 0.0, 0, [])}
    for x in range(DIRECT + UPPER_STEP, SMALL + 1, UPPER_STEP):
        best = None
        for p, (n, worst, align, path) in dp.items():
            if 8 * x <= 9 * (p + 1) and not any(p < m < x for m in MUST):
                cand = (n + 1, round(max(worst, x / (p + 1) - 1), 6), align - tz(x), path + [x])
                if best is None or cand[:3] < best[:3]:
                    best = cand
        if best:
            dp[x] = best
    return dp[SMALL][3]


def pages(s):
    k = 1
    while True:
        span = k * PAGE
        cap = span // s
        if cap >= 16 and (span - cap * s) * 8 <= span:
            return k
        k *= 2


def table(values, per_line=20):
    out = []
    for i in range(0, len(values), per_line):
        out.append("    " + " ".join(f"{v}," for v in values[i:i + per_line]))
    return "\n".join(out)


def main():
    sizes = lower() + upper()
    assert len(sizes) <= 256, len(sizes)
    print(f"#define MTP_NUM_CLASSES {len(sizes)}\n")
    print("const uint32_t mtp__class_size[MTP_NUM_CLASSES] = {\n" + table(sizes, 13) + "\n};\n")
    print("const uint8_t mtp__class_pages[MTP_NUM_CLASSES] = {\n" + table([pages(s) for s in sizes], 26) + "\n};\n")
    def cls(n):
        return next(i for i, s in enumerate(sizes) if s >= n)
    direct = [cls(max(i * 8, 1)) for i in range(DIRECT // 8 + 1)]
    print("const uint8_t mtp__class_direct[MTP_DIRECT_MAX / 8 + 1] = {\n" + table(direct, 26) + "\n};\n")
    up = [0] + [cls(i * UPPER_STEP) if i * UPPER_STEP > DIRECT else 0 for i in range(1, SMALL // UPPER_STEP + 1)]
    print("const uint8_t mtp__class_upper[(MTP_MAX_SMALL >> MTP_UPPER_SHIFT) + 1] = {\n" + table(up, 26) + "\n};\n")
    recip = [f"0x{(2**64 - 1) // s + 1:x}u" for s in sizes]
    print("const uint64_t mtp__class_recip[MTP_NUM_CLASSES] = {\n" + table(recip, 4) + "\n};")


if __name__ == "__main__":
    sys.exit(main())
