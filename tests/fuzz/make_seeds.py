#!/usr/bin/env python3
"""Writes the hand-made seed inputs of the fuzz target (fuzz_mtpool.c) into corpus/.

Each operation is an opcode byte (low 4 bits), a slot byte, then its arguments; see
LLVMFuzzerTestOneInput. Inputs libFuzzer found are kept beside these as corpus/found-<sha1>:
about 8 minutes of fuzzing, reduced with -set_cover_merge=1 to the inputs that keep its coverage."""
import os

OP = dict(alloc=0, calloc=1, aligned=2, free=3, free_sized=4, realloc=5, create=6, destroy=7,
          trim=8, flush=9, remote_alloc=10, inject=11, stats=12, verify=13, usable=14, free_many=15)


def size_small(n):  # 0 .. 63
    return [n & 63]


def size_mid(n):  # .. 16 KiB
    return [0x40 | (n >> 8) & 63, n & 255]


def size_big(n):  # .. 256 KiB, a multiple of 16
    return [0x80 | (n >> 12) & 63, (n >> 4) & 255]


def size_edge(i, d):  # class boundaries, d: 0 e-1, 1 e, 2 e+1, 3 e-8, 4 e+8
    return [0xC0 | i, d]


seeds = {}

s = []
for i in range(40):
    s += [OP['alloc'], i, i % 5] + size_small(i * 7)
for i in range(0, 40, 2):
    s += [OP['free'], i, i % 6]
s += [OP['stats'], 0]
for i in range(1, 40, 2):
    s += [OP['free_sized'], i]
s += [OP['stats'], 0]
seeds['small_alloc_free'] = s

s = [OP['alloc'], 1, 0] + size_small(1)
for n in [10, 100, 1000, 5000, 16000]:
    s += [OP['realloc'], 1] + size_mid(n)
for n in [70000, 300000, 1000000]:
    s += [OP['realloc'], 1] + size_big(n)
s += [OP['realloc'], 1] + size_small(3) + [OP['stats'], 0, OP['free'], 1, 0]
seeds['realloc_chain'] = s

s = [OP['create'], 0, 1, OP['create'], 1, 0x08, OP['create'], 2, 0x22]
for i in range(30):
    s += [OP['alloc'], i, 1 + i % 3] + size_mid(100 + i * 300)
s += [OP['stats'], 0, OP['destroy'], 0, OP['stats'], 0]
for i in range(30):
    s += [OP['free'], i, i % 6]
s += [OP['trim'], 0, 0, OP['destroy'], 1, OP['destroy'], 2]
seeds['pools_checked'] = s

s = [OP['create'], 0, 0x02]
for k in range(4):
    s += [OP['inject'], 0, k]
    for i in range(20):
        s += [OP['alloc'], i, i % 2] + size_edge(i % 23, i % 5)
    s += [OP['realloc'], 3] + size_big(500000)
    s += [OP['inject'], 0, 200, OP['stats'], 0, OP['free_many'], 0]
seeds['inject'] = s

s = []
for i in range(30):
    s += [OP['remote_alloc'], i, 0] + size_small(i + 8)
for i in range(30):
    s += [OP['free'], i, 4 if i % 2 else 5]
s += [OP['flush'], 1, OP['flush'], 0, OP['stats'], 0]
for i in range(30):
    s += [OP['alloc'], i, 0] + size_small(i + 8)
s += [OP['free_many'], 1]
seeds['remote'] = s

s = []
for i in range(24):
    s += [OP['aligned'], i, i % 3] + size_mid(i * 500) + [i % 17]
s += [OP['aligned'], 30, 0] + size_small(5) + [250]
s += [OP['verify'], 0, OP['stats'], 0, OP['free_many'], 2]
seeds['aligned'] = s

s = []
for i in range(23):
    for d in range(5):
        s += [OP['alloc'], (i * 5 + d) % 64, 0] + size_edge(i, d)
    s += [OP['usable'], i]
s += [OP['stats'], 0, OP['trim'], 0, 0, OP['free_many'], 0, OP['trim'], 0, 0, OP['stats'], 0]
seeds['class_edges'] = s

s = [OP['create'], 1, 0x09]
for i in range(16):
    s += [OP['calloc'], i, 2] + size_mid(i * 1000 + 3) + [i % 4]
    s += [OP['alloc'], i + 16, 2] + size_big(100000 + i * 5000)
s += [OP['trim'], 0, 2, OP['flush'], 0, OP['free_many'], 3, OP['stats'], 0]
seeds['calloc_large_purge'] = s

here = os.path.dirname(os.path.abspath(__file__))
os.makedirs(os.path.join(here, 'corpus'), exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(here, 'corpus', 'seed-' + name), 'wb') as f:
        f.write(bytes(b & 255 for b in data))
print(len(seeds), 'seeds written')
