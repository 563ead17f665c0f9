#!/usr/bin/env python3
"""Tables of mimalloc-bench's programs on every allocator (scripts/bench_mibench.sh).

Reads the JSON lines the script writes (bench/programs/runstat.c's measures of one process tree,
plus the test, the allocator, `rtime` for the tests that run a fixed time and count, and whether
every process ran on the malloc it was given) and writes mibench.md: per test, the median time of
the repetitions (wall seconds, or the relative time bench.sh derives from the count) with its
ratio to the best allocator, and the median peak RSS with its ratio to glibc's; the geometric means
of both over the tests. Exits 1 when a run failed or ran on another malloc.

With --security: the security suite's lines (program, allocator, result: caught, missed or timeout)
into mibench-security.md, the count each allocator caught and every program's result.
"""
import argparse
import os
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import report as common  # noqa: E402  (bench/tools/report.py: read_jsonl, fmt, table, geomean)

ABOUT = {
    "cfrac": "continued-fraction factorisation of a 44-digit number: many small, short-lived "
             "bignums (1 thread)",
    "espresso": "the Berkeley logic minimiser on its largest input (1 thread)",
    "barnes": "Barnes-Hut n-body simulation: few allocations, mostly computation (1 thread)",
    "alloc-test1": "ITHare's test: allocations of a Pareto size distribution up to 1 KiB (1 thread)",
    "alloc-testN": "the same on N threads",
    "larsonN": "Larson and Krishnan's server simulation, a fixed time: threads allocate and free "
               "and leave some blocks for other threads to free",
    "larsonN-sized": "larsonN through sized deallocation",
    "xmalloc-testN": "Lever and Boreham's test, a fixed time: purely allocating threads and purely "
                     "freeing ones",
    "cache-thrash1": "Hoard's test of heap cache locality (1 thread)",
    "cache-thrashN": "the same on N threads",
    "cache-scratch1": "Hoard's test of passive false sharing: objects handed to each thread, freed "
                      "and allocated again, then written repeatedly (1 thread)",
    "cache-scratchN": "the same on N threads",
    "malloc-large": "2,000 blocks of 5-25 MiB, each zero-filled (make_unique<char[]>), 20 live",
    "mstressN": "mimalloc's stress test: power-of-two sizes, blocks that migrate between N "
                "threads, threads destroyed and made anew after each phase",
    "mleak10": "whether threads that terminate leak memory (5 rounds)",
    "mleak100": "the same, 50 rounds",
    "rptestN": "rpmalloc's benchmark: random linear sizes 8-16,000 B, N threads",
    "glibc-simple": "glibc's single-threaded malloc benchmark",
    "glibc-thread": "glibc's multi-threaded malloc benchmark, N threads, a fixed time",
}
FIXED_TIME = {"larsonN", "larsonN-sized", "xmalloc-testN", "rptestN", "glibc-thread"}


SECURITY_LABELS = dict(common.PRELOAD_LABELS, **{"mtpool-checked": "mtpool, MTPOOL_CHECK=1",
                                                  "mtpool-debug": "mtpool debugger (libmtpool-debug.so)",
                                                  "efence": "Electric Fence", "duma": "DUMA"})


def security(a, rows):
    """mibench-security.md from the security suite's lines."""
    allocs = common.order_by(SECURITY_LABELS, {r["alloc"] for r in rows})
    for i, mode in enumerate(("mtpool-checked", "mtpool-debug")):  # beside mtpool
        if mode in allocs and "mtpool" in allocs:
            allocs.remove(mode)
            allocs.insert(allocs.index("mtpool") + 1 + i, mode)
    progs = sorted({r["program"] for r in rows})
    res = {(r["program"], r["alloc"]): r["result"] for r in rows}
    label = lambda al: SECURITY_LABELS.get(al, al)  # noqa: E731
    md = ["# mimalloc-bench's security suite", "",
          "Written by `scripts/bench_mibench.sh --security`; raw lines in `mibench-security.jsonl`. The "
          "security programs of [mimalloc-bench](https://github.com/daanx/mimalloc-bench) (others' code, "
          f"built from {a.origin or 'its sources'}: one heap error each, at 8 B, 4 KiB and 256 KiB), "
          "each allocator through `LD_PRELOAD` (glibc: none), run as its `bench.sh` runs them: 1 s "
          "each, caught when the program does not get to print NOT_CAUGHT (an abort, a fault, or a "
          "property it checks holding). The project's own suite is `tests/security` "
          "([security.md](security.md)).", ""]
    md += common.run_notes(a.machine, a.mtpool_lib, a.skipped, a.versions)
    md += [f"Run: once each, {a.elapsed // 60} min {a.elapsed % 60} s in all.", ""]
    md.append(common.table(
        "Caught", ["caught", "timed out"],
        [(label(al), [f"{sum(res.get((p, al)) == 'caught' for p in progs)} of {len(progs)}",
                      str(sum(res.get((p, al)) == 'timeout' for p in progs))]) for al in allocs],
        "A program that runs past 1 s is not counted as caught."))
    mark = {"caught": "caught", "missed": "–", "timeout": "timeout"}
    md += ["### Each program", "", "| program | " + " | ".join(label(al) for al in allocs) + " |",
           "|---|" + "---|" * len(allocs)]
    md += [f"| {p} | " + " | ".join(mark.get(res.get((p, al)), "?") for al in allocs) + " |"
           for p in progs] + [""]
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "mibench-security.md"), "w") as f:
        f.write("\n".join(md))
    return 0


def main():
    ap = argparse.ArgumentParser()
    for opt in ("in", "out", "machine", "skipped", "versions", "mtpool-lib", "origin"):
        ap.add_argument("--" + opt, default="")
    for opt in ("elapsed", "reps", "threads", "warm-mib"):
        ap.add_argument("--" + opt, type=int, default=0)
    ap.add_argument("--security", action="store_true")
    a = ap.parse_args()
    rows = common.read_jsonl(a.__dict__["in"])
    if a.security:
        return security(a, rows)
    bad = [r for r in rows if r.get("failed") or r.get("rc") or not r.get("on_malloc_given", True)]
    tests = []
    times, rss = defaultdict(list), defaultdict(list)
    allocs = common.order_by(common.PRELOAD_LABELS, {r["alloc"] for r in rows})
    for r in rows:
        if r["test"] not in tests:
            tests.append(r["test"])
        if r in bad:
            continue
        t = r.get("rtime") if r["test"] in FIXED_TIME else r.get("wall_s")
        if t:
            times[(r["test"], r["alloc"])].append(t)
        if r.get("maxrss_kb"):
            rss[(r["test"], r["alloc"])].append(r["maxrss_kb"] / 1024)
    med_t = {k: statistics.median(v) for k, v in times.items()}
    med_m = {k: statistics.median(v) for k, v in rss.items()}
    label = lambda al: common.PRELOAD_LABELS.get(al, al)  # noqa: E731

    md = ["# mimalloc-bench's programs", "",
          "Written by `scripts/bench_mibench.sh`; raw lines in `mibench.jsonl`. The benchmark "
          "programs of [mimalloc-bench](https://github.com/daanx/mimalloc-bench) (others' code, "
          f"built from {a.origin or 'its sources'} with its own CMake file), each allocator "
          "through `LD_PRELOAD` (glibc: none), with the arguments its `bench.sh` gives them.", ""]
    md += common.run_notes(a.machine, a.mtpool_lib, a.skipped, a.versions)
    warm = (f", each process after {a.warm_mib} MiB were touched and unmapped (`--warm-mib`: the "
            "host backs the memory the programs fault in)" if a.warm_mib else "")
    md += [f"Run: {a.reps} repetitions (outermost; the allocators interleaved inside), N = "
           f"{a.threads} threads{warm}, {a.elapsed // 60} min {a.elapsed % 60} s in all.", ""]

    def ratios(med, ref_of):
        out = defaultdict(list)
        for t in tests:
            ref = ref_of(t)
            for al in allocs:
                if ref and (t, al) in med:
                    out[al].append(med[(t, al)] / ref)
        return out

    best = lambda t: min((med_t[(t, al)] for al in allocs if (t, al) in med_t), default=None)  # noqa: E731
    glibc_m = lambda t: med_m.get((t, "glibc"))  # noqa: E731
    rt, rm = ratios(med_t, best), ratios(med_m, glibc_m)
    md.append(common.table(
        "Geometric means over the tests", ["time over the best", "peak RSS over glibc's"],
        [(label(al), [common.fmt(common.geomean(rt[al])), common.fmt(common.geomean(rm[al]))])
         for al in allocs],
        "Time: each test's median over the best median of that test (1.00: the fastest). Peak RSS: "
        "the largest process's, each test's median over glibc's (below 1.00: smaller)."))

    def cells(med, ref_of, digits):
        out = []
        for al in allocs:
            cs = []
            for t in tests:
                v, ref = med.get((t, al)), ref_of(t)
                cs.append("–" if v is None else
                          f"{common.fmt(v, digits)} ({v / ref:.2f}x)" if ref else common.fmt(v, digits))
            out.append((label(al), cs))
        return out

    md.append(common.table("Time", tests, cells(med_t, best, 3),
                           "Median of the repetitions: wall seconds, or for " +
                           ", ".join(sorted(FIXED_TIME)) + " (a fixed time, counting) the relative "
                           "time mimalloc-bench's bench.sh derives from the count; (Nx) over the best "
                           "median of the column."))
    md.append(common.table("Peak RSS, MiB", tests, cells(med_m, glibc_m, 3),
                           "Median peak resident set of the largest process; (Nx) over glibc's."))
    md += ["### The tests", ""] + [f"- `{t}`: {ABOUT.get(t, '')}" for t in tests] + [""]
    if bad:
        md += ["### Failed runs", ""] + [
            f"- {r['test']} on {r['alloc']}, repetition {r.get('rep')}: "
            f"{'not on the malloc given' if not r.get('on_malloc_given', True) else 'exit ' + str(r.get('rc'))}"
            for r in bad] + [""]
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "mibench.md"), "w") as f:
        f.write("\n".join(md))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
