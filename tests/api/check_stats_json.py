#!/usr/bin/env python3
"""Runs tests/api/stats_json.c's program and checks the statistics JSON it prints (the schema of
mtp_print_stats_json, man/mtpool.3): on stdout, the document of the public call; with --stderr,
also the one MTPOOL_SHOW_STATS=json prints at exit under the drop-in malloc (all of stderr).

  check_stats_json.py [--stderr] [--checked] [VAR=VALUE...] PROGRAM

VAR=VALUE: set in the program's environment only (LD_PRELOAD, MTPOOL_SHOW_STATS, MTPOOL_CHECK).

What must add up, exactly (each pool's figures are one snapshot):
  each class  bytes_in_use == blocks_in_use * block_size
  each pool   sum of classes[].blocks_in_use == small_blocks
              sum of classes[].bytes_in_use == small_bytes
              blocks_in_use == small_blocks + large_blocks + zero_size_blocks
              bytes_in_use == small_bytes + large_bytes
              medium_blocks <= large_blocks, medium_bytes <= large_bytes
              bytes_free == max(0, bytes_reserved - bytes_in_use)
              frees == allocs - blocks_in_use
              len(classes) == num_classes, block sizes ascending: 8, 16, .. 128, .., 32768
  total       each figure == the sum of the pools'; pools == len(pools)
And what the program allocated: the test pool, its name read back, holds one block of each class
from 8 to 128 B, one of 32 KiB, one medium and one large block; a pool named "default" holds a
120-byte block, one of 32 KiB and a zero-size one (--checked: the default pool is checked, where a
block takes a larger class, for its guards, and a zero-size block is in none)."""
import json
import os
import subprocess
import sys

FIGURES = ["bytes_in_use", "blocks_in_use", "bytes_reserved", "bytes_free", "bytes_mapped",
           "large_blocks", "large_bytes", "allocs", "frees", "remote_frees", "bytes_returned",
           "small_blocks", "small_bytes", "medium_blocks", "medium_bytes", "zero_size_blocks"]
CLASS_FIELDS = ["block_size", "blocks_in_use", "bytes_in_use", "slabs", "slab_bytes"]
POOL_NAME = 'json "pool"\\\n\u00e9\ufffd'

failures = []


def expect(ok, what):
    if not ok:
        failures.append(what)


def check_pool(p, num_classes):
    where = f"pool {p.get('id')} {p.get('name')!r}"
    for f in FIGURES + ["id", "name", "huge_pages", "classes"]:
        expect(f in p, f"{where}: no {f}")
    classes = p["classes"]
    expect(len(classes) == num_classes,
           f"{where}: {len(classes)} classes, num_classes {num_classes}")
    sizes = [c["block_size"] for c in classes]
    expect(sizes == sorted(set(sizes)), f"{where}: block sizes not ascending: {sizes}")
    expect(sizes[:16] == list(range(8, 129, 8)), f"{where}: classes to 128 B: {sizes[:16]}")
    expect(sizes[-1] == 32768, f"{where}: last class {sizes[-1]}")
    for c in classes:
        expect(sorted(c) == sorted(CLASS_FIELDS), f"{where}: class fields {sorted(c)}")
        expect(c["bytes_in_use"] == c["blocks_in_use"] * c["block_size"],
               f"{where}: class {c['block_size']}: bytes_in_use {c['bytes_in_use']}")
    blocks = sum(c["blocks_in_use"] for c in classes)
    nbytes = sum(c["bytes_in_use"] for c in classes)
    expect(blocks == p["small_blocks"],
           f"{where}: classes' blocks {blocks}, small_blocks {p['small_blocks']}")
    expect(nbytes == p["small_bytes"],
           f"{where}: classes' bytes {nbytes}, small_bytes {p['small_bytes']}")
    expect(p["blocks_in_use"] == p["small_blocks"] + p["large_blocks"] + p["zero_size_blocks"],
           f"{where}: blocks_in_use {p['blocks_in_use']} != small + large + zero-size")
    expect(p["bytes_in_use"] == p["small_bytes"] + p["large_bytes"],
           f"{where}: bytes_in_use {p['bytes_in_use']} != small + large")
    expect(p["medium_blocks"] <= p["large_blocks"] and p["medium_bytes"] <= p["large_bytes"],
           f"{where}: more medium than large blocks")
    expect(p["bytes_free"] == max(0, p["bytes_reserved"] - p["bytes_in_use"]),
           f"{where}: bytes_free")
    expect(p["frees"] == p["allocs"] - p["blocks_in_use"], f"{where}: frees")
    hp = p["huge_pages"]
    expect(0 <= hp["huge_bytes"] <= hp["regions"] * (4 << 20), f"{where}: huge_pages {hp}")
    return {c["block_size"]: c["blocks_in_use"] for c in classes}


def check_document(data, stream, checked):
    try:
        doc = json.loads(data.decode("utf-8"))
    except ValueError as e:  # UnicodeDecodeError included
        failures.append(f"{stream}: not one JSON document: {e}")
        return
    for f in ["version", "num_classes", "pools", "total"]:
        expect(f in doc, f"{stream}: no {f}")
    n = doc["num_classes"]
    by_name = {}
    for p in doc["pools"]:
        by_name[p["name"]] = (p, check_pool(p, n))
    total = doc["total"]
    expect(total["pools"] == len(doc["pools"]), f"{stream}: total pools {total['pools']}")
    for f in FIGURES:
        s = sum(p[f] for p in doc["pools"])
        expect(total[f] == s, f"{stream}: total {f} {total[f]}, pools' sum {s}")
    for f in ["regions", "huge_bytes"]:
        s = sum(p["huge_pages"][f] for p in doc["pools"])
        expect(total["huge_pages"][f] == s, f"{stream}: total huge_pages {f}")
    kb = total["huge_pages"]["anon_huge_kb"]
    expect(kb is None or kb >= 0, f"{stream}: anon_huge_kb {kb}")
    # what the program allocated
    expect("default" in by_name, f"{stream}: no pool named default")
    if "default" in by_name:
        p, per = by_name["default"]
        if not checked:  # a checked block takes a larger class: guards and canary
            expect(per[120] >= 1 and per[32768] >= 1,
                   f"{stream}: default pool: no 120 B or 32 KiB block")
        expect(p["zero_size_blocks"] >= 1 if checked else p["zero_size_blocks"] == 0,
               f"{stream}: default pool: zero_size_blocks {p['zero_size_blocks']}")
    expect(POOL_NAME in by_name, f"{stream}: no pool named {POOL_NAME!r}: {sorted(by_name)}")
    if POOL_NAME in by_name:
        p, per = by_name[POOL_NAME]
        want = {s: 1 if s <= 128 or s == 32768 else 0 for s in per}
        expect(per == want, f"{stream}: test pool's classes {per}")
        got = (p["small_blocks"], p["medium_blocks"], p["large_blocks"], p["blocks_in_use"])
        expect(got == (17, 1, 2, 19), f"{stream}: test pool: small, medium, large, all {got}")


def main():
    args = sys.argv[1:]
    stderr = "--stderr" in args
    checked = "--checked" in args
    env = dict(os.environ)
    env.update(a.split("=", 1) for a in args if "=" in a and not a.startswith("--"))
    prog = [a for a in args if "=" not in a and not a.startswith("--")]
    if len(prog) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    run = subprocess.run(prog, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if run.returncode != 0:
        print(f"{prog[0]} exited {run.returncode}:\n{run.stderr.decode(errors='replace')}",
              file=sys.stderr)
        return 1
    check_document(run.stdout, "stdout", checked)
    if stderr:
        check_document(run.stderr, "stderr", checked)
    for f in failures:
        print("FAIL " + f, file=sys.stderr)
    if not failures:
        print("statistics JSON: every check passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
