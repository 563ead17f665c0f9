#!/usr/bin/env python3
"""gp-musl.md from the interleaved runs of scripts/bench_musl.sh (gp-musl.jsonl).

Each cell: the median wall time over repetitions of musl's malloc, mtpool on musl, glibc and mtpool
on glibc, and the ratios musl / mtpool-musl and glibc / mtpool-musl (above 1: mtpool on musl is
faster), each the median over repetitions of that repetition's pair (runs were interleaved).
Multi-threaded = 2 threads or more; their geometric mean is the summary line. Fails (exit 1) when a
process failed, ran on another malloc than it was given, or computed a checksum different from
glibc's for the same test and thread count."""
import argparse
import json
import math
import statistics
import sys

ALLOCS = ["musl", "mtpool-musl", "glibc", "mtpool-glibc"]


def main():
    ap = argparse.ArgumentParser()
    for a in ("--in", "--out", "--machine", "--peers"):
        ap.add_argument(a, required=True)
    ap.add_argument("--elapsed", type=int, required=True)
    ap.add_argument("--reps", type=int, required=True)
    ap.add_argument("--scale", required=True)
    args = ap.parse_args()
    rows = [json.loads(l) for l in open(args.__dict__["in"]) if l.strip()]
    errors = []
    wall = {}  # (test, threads, alloc) -> {rep: wall}
    sums = {}
    for r in rows:
        key = (r["test"], r["threads"])
        if "failed" in r:
            errors.append(f"{r['alloc']} failed on {key} (exit {r['failed']})")
            continue
        if r["malloc"] != r["want"]:
            errors.append(f"{r['alloc']} ran on {r['malloc']}, not {r['want']} ({key})")
        sums.setdefault(key, set()).add(r["checksum"])
        wall.setdefault(key + (r["alloc"],), {})[r["rep"]] = r["wall_s"]
    for key, s in sums.items():
        if len(s) != 1:
            errors.append(f"checksums differ on {key}: {sorted(s)}")
    keys = sorted({(t, n) for (t, n, _a) in wall}, key=lambda k: (k[0], k[1]))
    out = []
    out.append("# General-purpose workloads on musl: musl's malloc and mtpool\n")
    out.append("Written by `scripts/bench_musl.sh` (bench/gp/report_musl.py) from gp-musl.jsonl.\n")
    out.append(f"- Machine: {args.machine}")
    out.append(f"- {args.reps} repetitions, scale {args.scale}, allocators interleaved in each; "
               f"{args.elapsed} s in all")
    out.append("- musl = the driver built with musl-gcc on musl's own malloc (mallocng); "
               "mtpool-musl = the same driver with the musl build of libmtpool-malloc.so preloaded "
               "through musl's loader; glibc and mtpool-glibc = the driver built with gcc, for "
               "reference")
    out.append(f"- Peers under musl:{args.peers}")
    out.append("- Ratio = the other's wall time / mtpool-musl's (median over repetitions of each "
               "repetition's pair): above 1, mtpool on musl is faster\n")
    out.append("| workload | threads | musl s | mtpool-musl s | glibc s | mtpool-glibc s | "
               "musl / mtpool-musl | glibc / mtpool-musl |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    mt_ratios, st_ratios = [], []
    mt_glibc = []

    def ratio(key, other):
        a = wall.get(key + (other,), {})
        b = wall.get(key + ("mtpool-musl",), {})
        reps = sorted(set(a) & set(b))
        return statistics.median(a[r] / b[r] for r in reps) if reps else None

    for key in keys:
        med = {a: (statistics.median(wall[key + (a,)].values()) if key + (a,) in wall else None)
               for a in ALLOCS}
        rm, rg = ratio(key, "musl"), ratio(key, "glibc")
        if rm is not None:
            (mt_ratios if key[1] >= 2 else st_ratios).append(rm)
        if rg is not None and key[1] >= 2:
            mt_glibc.append(rg)
        cells = " | ".join("-" if med[a] is None else f"{med[a]:.3f}" for a in ALLOCS)
        fr = lambda v: "-" if v is None else f"{v:.2f}"
        out.append(f"| {key[0]} | {key[1]} | {cells} | {fr(rm)} | {fr(rg)} |")
    gm = lambda v: math.exp(sum(map(math.log, v)) / len(v)) if v else float("nan")
    out.append("")
    out.append(f"**Multi-threaded cells (2 threads or more, {len(mt_ratios)}): musl's malloc takes "
               f"{gm(mt_ratios):.2f}x mtpool's time (geometric mean; range "
               f"{min(mt_ratios, default=float('nan')):.2f}-{max(mt_ratios, default=float('nan')):.2f}, "
               f"{sum(r > 1 for r in mt_ratios)} of {len(mt_ratios)} cells faster with mtpool).** "
               f"Single-threaded cells ({len(st_ratios)}): {gm(st_ratios):.2f}x. glibc's malloc "
               f"against mtpool on musl, multi-threaded: {gm(mt_glibc):.2f}x.")
    if errors:
        out.append("\nErrors:\n" + "\n".join(f"- {e}" for e in errors))
    open(args.out, "w").write("\n".join(out) + "\n")
    print("\n".join(out))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
