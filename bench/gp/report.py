#!/usr/bin/env python3
"""Tables and chart of the general-purpose workloads (scripts/bench_gp.sh).

Reads the JSON lines of bench/gp/gp_bench (one per process) and writes gp.md (and gp.png with
gnuplot, drawn by bench/tools/report.py's chart()). A cell is the median wall time of the
repetitions, ± half the spread (max-min)/median, and the ratio to the best median in its column.
A process that ran past the timeout counts as the timeout (a lower bound, shown "> T s").
Exits 1 when a checksum differs from glibc's (or, without glibc, from the first allocator's) for
the same test, threads and scale, when a process failed, or when the malloc a process found in
itself is not the one it was run with.
"""
import argparse
import os
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import report as common  # noqa: E402  (bench/tools/report.py: read_jsonl, fmt, spread, chart)

LABELS = common.PRELOAD_LABELS
ABOUT = {
    "larson": "server churn: 1,000 live blocks of 16-1,024 B per thread, 250,000 free+malloc of a "
              "random slot per round, 20 rounds, the live blocks handed to a new thread each round",
    "larson_sized": "larson through operator new and the sized operator delete, as the "
                    "preloaded library exports them (glibc: malloc and free, which libstdc++'s "
                    "are); the JSON line's `delete` says which",
    "thread_churn": "3,000 short-lived threads, at most 32 per --threads live at once, each "
                    "allocating 200 blocks (95% of 16 B-3 KiB) that one of 2 other threads frees",
    "thread_handoff": "3,000 detached threads started as fast as the main thread can, each "
                      "allocating 200 blocks of 1 B-3 KiB (one in 50 of 40 KiB) and handing each "
                      "to one of 2 freeing threads, then exiting",
    "prodcons": "N producers write blocks of 8 B-4 KiB and pass them in batches of 64 through "
                "bounded queues to N consumers that read and free them (512,000 per producer)",
    "churn_1k_32k": "400,000 free+malloc per thread of 1-32 KiB blocks in a live set of 256",
    "large": "200 free+malloc per thread of 64 KiB-4 MiB blocks (log-uniform) in a live set of 8, "
             "one byte written per 4 KiB page",
    "realloc": "each thread grows a buffer to 8 MiB in 4 KiB realloc steps, writing each new tail",
    "tree": "1,000,000 32-byte nodes per run, one binary search tree per thread: build, walk in "
            "order, free",
    "false_sharing_active": "each thread allocates an 8-byte block, writes it 20,000 times, "
                            "frees it; 5,000 times",
    "false_sharing_passive": "as active, but each thread first frees a block that the main "
                             "thread allocated for it next to the others'",
    "realloc_grow": "each thread grows a buffer from 4 KiB to 8 MiB in 4 KiB realloc steps (one "
                    "byte written per step), reads it, frees it; 150 times",
    "realloc_exchange": "4,000 operations per thread on 64 shared slots of 1 B-3 MiB blocks "
                        "(log-uniform): check a slot's block, realloc it to a new size (3 in 4) "
                        "or free it and allocate anew, write every page; threads resize each "
                        "other's blocks",
    "medium": "20,000 free+malloc per thread of 32 KiB-1 MiB blocks (log-uniform) in a live set "
              "of 64, one byte written per 4 KiB page",
    "cache": "2,000,000 free+malloc per thread of 16 B-4 KiB blocks (log-uniform) in a live set "
             "of 20,000: an object cache evicting in random order",
}


def order(keys):
    return common.order_by(LABELS, keys)


def geo_table(out, allocs, threads, tests, ratio, capped):
    """Appends one row per allocator: geometric mean of ratio(test, threads, alloc) per thread
    count and over all; returns {(alloc, threads): mean} for the chart."""
    geo = {}
    for al in allocs:
        cells, allr, allcap = [], [], False
        for n in threads:
            rs = [ratio(t, n, al) for t in tests]
            cap = any((t, n, al) in capped for t in tests)
            allcap |= cap
            if None in rs or not rs:
                cells.append("–")
                continue
            g = common.geomean(rs)
            allr += rs
            geo[(al, n)] = g
            cells.append(f"{'≥' if cap else ''}{g:.2f}")
        if allr and len(allr) == len(tests) * len(threads):
            g = common.geomean(allr)
            cells.append(f"{'≥' if allcap else ''}**{g:.2f}**")
        else:
            cells.append("–")
        out.append(f"| {LABELS.get(al, al)} | " + " | ".join(cells) + " |")
    out.append("")
    return geo


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--in", dest="inp", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--elapsed", type=int, default=0)
    ap.add_argument("--machine", default="")
    ap.add_argument("--skipped", default="")
    ap.add_argument("--reps", default="")
    ap.add_argument("--scale", default="1")
    ap.add_argument("--timeout", type=float, default=0)
    ap.add_argument("--mtpool-lib", default="")
    ap.add_argument("--versions", default="")
    a = ap.parse_args()

    rows = common.read_jsonl(a.inp)
    errors = []
    times = defaultdict(list)      # (test, threads, alloc) -> [wall_s]
    capped = set()                 # (test, threads, alloc) that hit the timeout
    rss = defaultdict(list)        # (test, threads, alloc) -> [peak RSS KiB]
    flt = defaultdict(list)        # (test, threads, alloc) -> [minor faults]
    huge = defaultdict(list)       # (test, threads, alloc) -> [AnonHugePages KiB, peak]
    cpu = defaultdict(list)        # (test, threads, alloc) -> [user + system s]
    sums = defaultdict(dict)       # (test, threads, scale) -> {alloc: checksum}
    tests, threads, allocs = [], set(), set()
    for d in rows:
        t, n, al = d.get("test"), d.get("threads"), d.get("alloc")
        if t not in tests:
            tests.append(t)
        threads.add(n)
        allocs.add(al)
        key = (t, n, al)
        if "failed" in d:
            errors.append(f"{al} failed on {t}, {n} threads (exit {d['failed']})")
        elif "timeout_s" in d:
            capped.add(key)
            times[key].append(d["timeout_s"])
        else:
            if d.get("malloc") != al.split("-")[0]:  # a peer named by path: its family
                errors.append(f"{al} was asked for on {t}, {n} threads, but the process ran on "
                              f"{d.get('malloc')} (preload failed?)")
            times[key].append(d["wall_s"])
            rss[key].append(d["maxrss_kb"])
            flt[key].append(d.get("minflt"))
            huge[key].append(common.kb(d.get("anon_huge_kb")))
            cpu[key].append(d["user_s"] + d["sys_s"])
            cs = sums[(t, n, d.get("scale"))]
            if al in cs and cs[al] != d["checksum"]:
                errors.append(f"{al}: two checksums for {t}, {n} threads")
            cs.setdefault(al, d["checksum"])
    for (t, n, _), cs in sorted(sums.items(), key=str):
        ref = "glibc" if "glibc" in cs else order(cs)[0]
        for al, c in cs.items():
            if c != cs[ref]:
                errors.append(f"checksum of {al} ({c}) differs from {ref}'s ({cs[ref]}) on {t}, {n} threads")
    threads = sorted(threads)
    allocs = order(allocs)

    def med(key):
        v = times.get(key)
        return statistics.median(v) if v else None

    def best(t, n):
        vals = [med((t, n, al)) for al in allocs if med((t, n, al)) is not None]
        return min(vals) if vals else None

    def ratio(t, n, al):
        m, b = med((t, n, al)), best(t, n)
        return m / b if m is not None and b else None

    out = ["# General-purpose workloads", "",
           "Written by `scripts/bench_gp.sh` (bench/gp/gp_bench.c); raw lines in `gp.jsonl`.", ""]
    out += common.run_notes(a.machine, a.mtpool_lib, a.skipped, a.versions)
    out += [f"Run: {a.reps} repetitions (outermost; allocators interleaved inside), scale {a.scale}, "
            f"threads {' '.join(map(str, threads))}, timeout {a.timeout:g} s per process, "
            f"{a.elapsed // 60} min {a.elapsed % 60} s in all."]
    out += ["", "Each cell: median wall seconds of the repetitions, ± half their spread "
            "(max-min)/median, and (ratio to the best median of the column). `> T` : the process "
            "ran past the timeout (or a smaller thread count had), so the time is at least T.", ""]

    # Geometric means first: the summary.
    out += ["## Geometric mean of the ratios to the best", "",
            "Over every workload; one column per thread count, and over all. `≥`: a timed-out "
            "cell is in it at the timeout, so the true figure is higher.", "",
            "| allocator | " + " | ".join(f"{n} thr" for n in threads) + " | all |",
            "|---|" + "---|" * (len(threads) + 1)]
    geo = geo_table(out, allocs, threads, tests, ratio, capped)

    # The same over CPU seconds (user + system): less moved by other jobs on a shared machine,
    # though it misses time a thread spends waiting (a lock, a queue, the scheduler).
    def cmed(key):
        v = cpu.get(key)
        return statistics.median(v) if v else None

    def cratio(t, n, al):
        vals = [cmed((t, n, x)) for x in allocs if cmed((t, n, x))]
        m = cmed((t, n, al))
        return m / min(vals) if m and vals else None

    full = [t for t in tests if not any(k[0] == t for k in capped)]
    left = [t for t in tests if t not in full]
    out += ["### The same by CPU time (user + system seconds)", "",
            "Less moved by other load on the machine, but blind to time spent waiting"
            + (f"; without {', '.join(left)}, where a process timed out (no CPU time to compare)"
               if left else "") + ".", "",
            "| allocator | " + " | ".join(f"{n} thr" for n in threads) + " | all |",
            "|---|" + "---|" * (len(threads) + 1)]
    geo_table(out, allocs, threads, full, cratio, set())

    if "mtpool" in allocs:
        peers = [al for al in allocs if al != "mtpool"]
        if peers:
            out += ["## mtpool against the best peer", "",
                    "mtpool's median over the best other allocator's (above 1.00: mtpool is slower; "
                    "the name is that peer).", "",
                    "| workload | " + " | ".join(f"{n} thr" for n in threads) + " |",
                    "|---|" + "---|" * len(threads)]
            for t in tests:
                cells = []
                for n in threads:
                    m = med((t, n, "mtpool"))
                    pv = [(med((t, n, p)), p) for p in peers if med((t, n, p)) is not None]
                    if m is None or not pv:
                        cells.append("–")
                        continue
                    bv, bp = min(pv)
                    cap = "≥" if (t, n, "mtpool") in capped else ""
                    cells.append(f"{cap}{m / bv:.2f} ({bp})")
                out.append(f"| {t} | " + " | ".join(cells) + " |")
            out.append("")

    out += ["## Per workload", ""]
    for t in tests:
        out += [f"### {t}", "", ABOUT.get(t, "") + " (the work at scale 1).", "",
                "| allocator | " + " | ".join(f"{n} thr, s" for n in threads) + " |",
                "|---|" + "---|" * len(threads)]
        for al in allocs:
            cells = []
            for n in threads:
                key = (t, n, al)
                m = med(key)
                if m is None:
                    cells.append("–")
                elif key in capped:
                    cells.append(f"> {m:g} ({ratio(t, n, al):.1f}x+)")
                else:
                    cells.append(f"{common.fmt(m)} ±{common.spread(times[key]) * 50:.0f}% "
                                 f"({ratio(t, n, al):.2f}x)")
            out.append(f"| {LABELS.get(al, al)} | " + " | ".join(cells) + " |")
        out.append("")

    nmax = threads[-1] if threads else None
    out += [f"## Peak RSS at {nmax} threads, MiB (median)", "",
            "| allocator | " + " | ".join(tests) + " |", "|---|" + "---|" * len(tests)]
    for al in allocs:
        cells = []
        for t in tests:
            v = rss.get((t, nmax, al))
            cells.append(f"{statistics.median(v) / 1024:.1f}" if v else "–")
        out.append(f"| {LABELS.get(al, al)} | " + " | ".join(cells) + " |")
    out.append("")

    out += [f"## Minor page faults / AnonHugePages at {nmax} threads (median)", "",
            "Minor page faults of the process. " + common.HUGE_NOTE, "",
            "| allocator | " + " | ".join(tests) + " |", "|---|" + "---|" * len(tests)]
    for al in allocs:
        cells = [common.faults_huge([x for x in flt.get((t, nmax, al), []) if x is not None],
                                    huge.get((t, nmax, al), [])) if flt.get((t, nmax, al)) else "–"
                 for t in tests]
        out.append(f"| {LABELS.get(al, al)} | " + " | ".join(cells) + " |")
    out.append("")

    nsum = sum(len(cs) for cs in sums.values())
    if errors:
        out += ["## ERRORS", ""] + [f"- {e}" for e in errors] + [""]
    else:
        out += [f"Checksums: all {nsum} measured (workload, threads, allocator) results agree with "
                "glibc's; every process ran on the malloc it was given.", ""]
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "gp.md"), "w") as f:
        f.write("\n".join(out))

    chart_rows = [(LABELS.get(al, al), [geo.get((al, n)) for n in threads]) for al in allocs]
    common.chart(os.path.join(a.out, "gp.png"),
                 "General-purpose workloads: geometric mean of time / best, per thread count (lower is better)",
                 "time / best (geometric mean over workloads)", [f"{n} threads" for n in threads], chart_rows)
    for e in errors:
        print("gp report: " + e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
