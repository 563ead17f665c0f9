#!/usr/bin/env python3
"""Reports of bench/latency/latency.c's JSON lines (one per process).

  report.py latency --in latency.jsonl --out DIR ...   latency.md (scripts/bench_latency.sh)
  report.py stress --in stress.jsonl --out DIR ...     stress.md (scripts/bench_stress.sh)

latency: per workload, kind of call and allocator, the 50th to 99.99th percentiles and the
maximum of single calls, each the median over the runs, and the worst run's 99.9th percentile and
maximum; each allocator's ratio to the best one, and mtpool's to the best peer.

stress: per shape, load and allocator, the median and the worst run's peak RSS (VmHWM) and most
bytes held at once, over glibc's median for the same shape and load; with --bound X, the runs of
the allocators in --bound-allocs must stay at or below X times glibc's median peak RSS, but one
run of a shape and load, which must stay within 2X.

Both exit 1 when a process failed or timed out, a checksum differs from glibc's for the same
workload, threads and scale, or a process ran on another malloc than it was given (and, for
stress, when bounded runs are above the bound as --bound says).
"""
import argparse
import math
import os
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import report as common  # noqa: E402  (bench/tools/report.py: read_jsonl, run_notes, order_by)

LABELS = common.PRELOAD_LABELS
PCTS = [("p50", 0.50), ("p90", 0.90), ("p99", 0.99), ("p99.9", 0.999), ("p99.99", 0.9999)]
KINDS = [("malloc", "malloc"), ("free", "free (a block the same thread allocated)"),
         ("free_remote", "free of a block another thread allocated")]
ABOUT = {
    "churn": "thread churn: 2,000 threads one after another, at most 4 per CPU alive, each doing "
             "400 \"free a random one of 32 slots, allocate 16 B-4 KiB there\" (1 in 20 of "
             "4-64 KiB), then freeing the rest and exiting",
    "prodcons": "hand-off through queues: 2 producers and 2 consumers per CPU; each producer "
                "writes 100,000 blocks of 8 B-4 KiB (1 in 64 of 16-64 KiB) and passes them in "
                "batches of 16 through bounded queues to the consumers, which check and free them",
    "thread_task": "thread per task: 3,000 detached threads started in a tight loop, each "
                   "allocating 200 blocks of 1 B-3 KiB (1 in 50 of 32-48 KiB), writing them and "
                   "exiting (a pthread key destructor frees its block and allocates and frees "
                   "once more); 2 long-lived threads free each task's blocks in task order, "
                   "polling until the task has published them",
    "server": "a pool of 4 workers per CPU serving 60,000 requests: each allocates a working set "
              "of 7-63 blocks of 16 B-128 KiB (mostly under 512 B) and one of 64 B-16 KiB, frees "
              "the working set, puts the other block into a shared cache of 16,384 slots (the "
              "block it replaces, mostly another worker's, is freed) and hands a response block "
              "(256 B-64 KiB) to another worker to free (one with fewer than 32 waiting; with "
              "none, it frees the response itself)",
}


def order(keys):
    return common.order_by(LABELS, keys)


def label(al):
    return LABELS.get(al, al)


def pct(h, p):
    """The p-th quantile of a histogram of the driver ({"n", "max_ns", "hist": [[upper, count]]}):
    the upper value of the bucket that holds the ceil(p * n)-th smallest call, at most the
    largest call measured."""
    n = h.get("n", 0)
    if not n:
        return None
    rank = max(1, math.ceil(p * n))
    seen = 0
    for upper, count in h["hist"]:
        seen += count
        if seen >= rank:
            return min(upper, h["max_ns"])
    return h["max_ns"]


def ns(v):
    """A duration for the tables, 3 significant digits: ns below 10 us, then us, then ms."""
    if v is None:
        return "–"
    if v < 10000:
        return f"{v:.0f} ns"
    if v < 1e6:
        return f"{v / 1000:.3g} µs"
    return f"{v / 1e6:.3g} ms" if v < 1e9 else f"{v / 1e9:.3g} s"


def ratio(r):
    """A ratio for the tables: 2 decimals below 10, 1 below 100, none above."""
    return f"{r:.2f}" if r < 10 else f"{r:.1f}" if r < 100 else f"{r:.0f}"


def check_rows(rows, errors, extra_key=()):
    """The checks both reports make: failures, timeouts, the malloc found, checksums. Returns the
    rows measured (neither failed nor timed out)."""
    good = []
    sums = defaultdict(dict)  # (test, threads, scale) -> {alloc: checksum}
    for d in rows:
        t, al = d.get("test"), d.get("alloc")
        where = ", ".join([t] + [str(d.get(k)) for k in extra_key if d.get(k) is not None])
        if "failed" in d:
            errors.append(f"{al} failed on {where} (exit {d['failed']})")
            continue
        if "timeout_s" in d:
            errors.append(f"{al} ran past the timeout ({d['timeout_s']} s) on {where}")
            continue
        if d.get("malloc") != al.split("-")[0]:  # a peer named by path: its family
            errors.append(f"{al} was asked for on {where}, but the process ran on "
                          f"{d.get('malloc')} (preload failed?)")
        cs = sums[(t, d.get("threads"), d.get("scale"))]
        if al in cs and cs[al] != d["checksum"]:
            errors.append(f"{al}: two checksums for {t}, {d.get('threads')} threads")
        cs.setdefault(al, d["checksum"])
        good.append(d)
    for (t, n, _), cs in sorted(sums.items(), key=str):
        ref = "glibc" if "glibc" in cs else order(cs)[0]
        for al, c in cs.items():
            if c != cs[ref]:
                errors.append(f"checksum of {al} ({c}) differs from {ref}'s ({cs[ref]}) on {t}, "
                              f"{n} threads")
    return good


def header(a, title, script, raw):
    out = [f"# {title}", "", f"Written by `{script}` (bench/latency/latency.c); raw lines in "
           f"`{raw}`.", ""]
    out += common.run_notes(a.machine, a.mtpool_lib, a.skipped, a.versions)
    return out


def finish(a, out, errors, name, ok_line):
    if errors:
        out += ["## ERRORS", ""] + [f"- {e}" for e in errors] + [""]
    else:
        out += [ok_line, ""]
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, name), "w") as f:
        f.write("\n".join(out))
    for e in errors:
        print(f"{name}: {e}", file=sys.stderr)
    return 1 if errors else 0


# ---- latency ------------------------------------------------------------------------------------
def latency(a):
    rows = common.read_jsonl(a.inp)
    errors = []
    good = check_rows(rows, errors)
    tests, allocs = [], set()
    runs = defaultdict(list)  # (test, alloc) -> [row]
    for d in good:
        if d["test"] not in tests:
            tests.append(d["test"])
        allocs.add(d["alloc"])
        runs[(d["test"], d["alloc"])].append(d)
    allocs = order(allocs)

    # Per run, per kind: the percentiles and the maximum.
    def figures(d, k):
        h = d.get("calls", {}).get(k)
        if not h or not h.get("n"):
            return None
        f = {name: pct(h, p) for name, p in PCTS}
        f["max"] = h["max_ns"]
        f["n"] = h["n"]
        return f

    cell = {}  # (test, kind, alloc) -> {column: value}
    for (t, al), rs in runs.items():
        for k, _ in KINDS:
            fs = [f for f in (figures(d, k) for d in rs) if f]
            if not fs:
                continue
            c = {name: statistics.median(f[name] for f in fs) for name, _ in PCTS}
            c["max"] = statistics.median(f["max"] for f in fs)
            c["worst p99.9"] = max(f["p99.9"] for f in fs)
            c["worst max"] = max(f["max"] for f in fs)
            c["runs"] = len(fs)
            c["calls"] = statistics.median(f["n"] for f in fs)
            cell[(t, k, al)] = c
    clock50 = [pct(d["clock"], 0.5) for d in good if d.get("clock")]
    clock99 = [pct(d["clock"], 0.99) for d in good if d.get("clock")]
    clockmax = [d["clock"]["max_ns"] for d in good if d.get("clock")]

    out = header(a, "Latency of single malloc and free calls", "scripts/bench_latency.sh",
                 "latency.jsonl")
    threads = sorted({(d["test"], d["threads"]) for d in good})
    out += [f"Run: {a.reps} run{'s' if str(a.reps) != '1' else ''} per workload and allocator "
            "(the outermost loop; allocators "
            f"interleaved inside), scale {a.scale}, threads "
            + ", ".join(f"{t} {n}" for t, n in threads)
            + f"; {a.elapsed // 60} min {a.elapsed % 60} s in all.", ""]
    if clock50:
        out += [f"Each figure is the wall time of one call: a `CLOCK_MONOTONIC` read before it and "
                f"one after it, nothing subtracted. So it includes the cost of one clock read, "
                f"measured by every process before its workload (200,000 back-to-back pairs): "
                f"median {ns(statistics.median(clock50))}, 99th percentile "
                f"{ns(max(clock99))} at most, largest {ns(max(clockmax))} (a pair interrupted). "
                "It also includes any time the thread was not running during the call (preempted, "
                "or waiting on a lock held by a thread that was): the workloads run more threads "
                "than CPUs, as servers do, so the tail is what a caller waits, scheduling "
                "included. Percentiles come from per-thread log-scale histograms (exact below "
                "16 ns, 8 buckets per power of two above), each bucket counted at its highest "
                "value: a percentile is at most 12.5% above the true one; the maximum is exact.", ""]
    out += ["Columns p50 to max: the median over the runs of that figure; `worst`: the largest "
            "over the runs. `(1.00x)`: the ratio to the best allocator of the column.", ""]

    cols = [name for name, _ in PCTS] + ["max", "worst p99.9", "worst max"]
    ratio_cols = {"p99.9", "max", "worst p99.9", "worst max"}
    if "mtpool" in allocs and len(allocs) > 1:
        sc = ["p99", "p99.9", "p99.99", "max", "worst p99.9", "worst max"]
        out += ["## mtpool against the best peer", "",
                "mtpool's figure over the lowest other allocator's (above 1.00: mtpool's calls "
                "take longer; the name is that peer).", "",
                "| workload | call | " + " | ".join(sc) + " |", "|---|---|" + "---|" * len(sc)]
        for t in tests:
            for k, _ in KINDS:
                m = cell.get((t, k, "mtpool"))
                if not m:
                    continue
                cells = []
                for c in sc:
                    pv = [(cell[(t, k, p)][c], p) for p in allocs
                          if p != "mtpool" and (t, k, p) in cell]
                    if not pv:
                        cells.append("–")
                        continue
                    bv, bp = min(pv)
                    cells.append(f"{ratio(m[c] / bv)} ({bp})" if bv else "–")
                out.append(f"| {t} | {k} | " + " | ".join(cells) + " |")
        out.append("")

    out += ["## Per workload", ""]
    for t in tests:
        out += [f"### {t}", "", ABOUT.get(t, "") + " (the work at scale 1).", ""]
        for k, kname in KINDS:
            present = [al for al in allocs if (t, k, al) in cell]
            if not present:
                continue
            calls = statistics.median(cell[(t, k, al)]["calls"] for al in present)
            out += [f"{kname}: about {calls:,.0f} calls per run.", "",
                    "| allocator | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
            best = {c: min(cell[(t, k, al)][c] for al in present) for c in ratio_cols}
            for al in present:
                c = cell[(t, k, al)]
                cells = []
                for col in cols:
                    v = ns(c[col])
                    if col in ratio_cols and best[col]:
                        v += f" ({ratio(c[col] / best[col])}x)"
                    cells.append(v)
                out.append(f"| {label(al)} | " + " | ".join(cells) + " |")
            out.append("")

    out += ["## Time and memory of the runs", "",
            "Median wall time of a process's workload and its median peak RSS (VmHWM, the "
            "driver's own tables included): the latency runs are not a speed or memory "
            "benchmark (the clock reads slow every call), this is context.", "",
            "| allocator | " + " | ".join(f"{t} s / MiB" for t in tests) + " |",
            "|---|" + "---|" * len(tests)]
    for al in allocs:
        cells = []
        for t in tests:
            rs = runs.get((t, al))
            cells.append(f"{statistics.median(d['wall_s'] for d in rs):.2f} / "
                         f"{statistics.median(d['vmhwm_kb'] for d in rs) / 1024:.0f}" if rs else "–")
        out.append(f"| {label(al)} | " + " | ".join(cells) + " |")
    out.append("")
    return finish(a, out, errors, "latency.md",
                  f"Checks: all {len(good)} processes ran on the malloc they were given, and every "
                  "checksum equals glibc's for its workload.")


# ---- stress -------------------------------------------------------------------------------------
def stress(a):
    rows = common.read_jsonl(a.inp)
    errors = []
    good = check_rows(rows, errors, ("load",))
    tests, loads, allocs = [], [], set()
    runs = defaultdict(list)  # (test, load, alloc) -> [row]
    for d in good:
        if d["test"] not in tests:
            tests.append(d["test"])
        if d.get("load") not in loads:
            loads.append(d.get("load"))
        allocs.add(d["alloc"])
        runs[(d["test"], d.get("load"), d["alloc"])].append(d)
    allocs = order(allocs)
    target = 2.0
    bound = float(a.bound) if a.bound else None
    bounded = a.bound_allocs.split()

    def g_med(t, ld, field):
        rs = runs.get((t, ld, "glibc"))
        return statistics.median(d[field] for d in rs) if rs else None

    out = header(a, "Schedule stress: peak memory of hand-off shapes, worst run",
                 "scripts/bench_stress.sh", "stress.jsonl")
    out += [f"Run: {a.reps} run{'s' if str(a.reps) != '1' else ''} per shape, load and allocator "
            "(rounds are the outermost loop; "
            f"allocators interleaved inside), scale {a.scale}; loads: "
            + ", ".join(ld for ld in loads)
            + " (`hog`: one busy-loop process per CPU beside every run of the round, stopped by "
            f"PID after it); {a.elapsed // 60} min {a.elapsed % 60} s in all.", "",
            "Peak RSS: the process's VmHWM at the end of its workload (the driver's own tables "
            "included, the same for every allocator). Live: the most bytes the workload held at "
            "once (requested sizes), which grows when the threads that free fall behind the ones "
            "that allocate. Each ratio is to glibc's median for the same shape and load. Target "
            f"(issue 55): every run's peak RSS at most {target:g}x glibc's median.", ""]
    if bound:
        out += [f"Bound checked by this run: every run of {', '.join(bounded)} at most "
                f"{bound:g}x glibc's median peak RSS, but one run of a shape and load, within "
                f"{2 * bound:g}x.", ""]

    cases = [(t, ld) for t in tests for ld in loads if (t, ld, "glibc") in runs]
    out += ["## Worst run's peak RSS over glibc's median", "",
            "Per allocator, shape and load: the worst run's peak RSS over glibc's median peak RSS "
            f"(the median run's in brackets). **Bold**: above the {target:g}x target.", "",
            "| allocator | " + " | ".join(f"{t}, {ld}" for t, ld in cases) + " |",
            "|---|" + "---|" * len(cases)]
    for al in allocs:
        cells = []
        for t, ld in cases:
            rs, g = runs.get((t, ld, al)), g_med(t, ld, "vmhwm_kb")
            if not rs or not g:
                cells.append("–")
                continue
            w = max(d["vmhwm_kb"] for d in rs) / g
            m = statistics.median(d["vmhwm_kb"] for d in rs) / g
            cells.append((f"**{w:.2f}**" if w > target else f"{w:.2f}") + f" ({m:.2f})")
        out.append(f"| {label(al)} | " + " | ".join(cells) + " |")
    out.append("")

    out += ["## glibc's own spread", "",
            "glibc's worst and best run over its median, per shape and load: how far a run moves "
            "by its schedule alone on an allocator that keeps up (what a bound must leave room "
            "for).", "",
            "| shape, load | runs | peak RSS median | worst / median | best / median | live worst "
            "/ median |", "|---|---|---|---|---|---|"]
    for t, ld in cases:
        rs = runs[(t, ld, "glibc")]
        g, gl = g_med(t, ld, "vmhwm_kb"), g_med(t, ld, "live_max_bytes")
        out.append(f"| {t}, {ld} | {len(rs)} | {g / 1024:.0f} MiB | "
                   f"{max(d['vmhwm_kb'] for d in rs) / g:.2f} | "
                   f"{min(d['vmhwm_kb'] for d in rs) / g:.2f} | "
                   f"{max(d['live_max_bytes'] for d in rs) / gl:.2f} |")
    out.append("")

    out += ["## Per shape and load", ""]
    for t, ld in cases:
        g, gl = g_med(t, ld, "vmhwm_kb"), g_med(t, ld, "live_max_bytes")
        out += [f"### {t}, {ld}", "", ABOUT.get(t, "") + ".", "",
                "| allocator | runs | peak RSS median | worst | worst / glibc | runs above "
                f"{target:g}x | live median | live worst | worst / glibc | threads alive at most "
                "(median, worst) | wall median, worst |", "|---|" + "---|" * 10]
        for al in allocs:
            rs = runs.get((t, ld, al))
            if not rs:
                continue
            h = [d["vmhwm_kb"] for d in rs]
            lv = [d["live_max_bytes"] for d in rs]
            th = [d["threads_alive_max"] for d in rs]
            wl = [d["wall_s"] for d in rs]
            above = sum(1 for x in h if x > target * g)
            out.append(f"| {label(al)} | {len(rs)} | {statistics.median(h) / 1024:.0f} MiB | "
                       f"{max(h) / 1024:.0f} MiB | {max(h) / g:.2f} | {above} of {len(rs)} | "
                       f"{statistics.median(lv) / 2**20:.0f} MiB | {max(lv) / 2**20:.0f} MiB | "
                       f"{max(lv) / gl:.2f} | {statistics.median(th):.0f}, {max(th)} | "
                       f"{statistics.median(wl):.2f} s, {max(wl):.2f} s |")
        out.append("")

    if bound:
        # One run of a shape and load may pass the bound, up to twice it: a runaway of the schedule
        # alone (docs/reliability.md, "The stress stage"); two, or one above twice it, fail.
        for t, ld in cases:
            g = g_med(t, ld, "vmhwm_kb")
            for al in bounded:
                rs = runs.get((t, ld, al), [])
                over = [d for d in rs if d["vmhwm_kb"] > bound * g]
                if len(over) < 2 and all(d["vmhwm_kb"] <= 2 * bound * g for d in over):
                    continue
                for d in over:
                    errors.append(f"{al} on {t}, {ld}: {len(over)} of {len(rs)} runs above the "
                                  f"bound {bound:g}x glibc's median ({g / 1024:.0f} MiB); this one's "
                                  f"peak RSS is {d['vmhwm_kb'] / 1024:.0f} MiB, "
                                  f"{d['vmhwm_kb'] / g:.2f}x (live at most "
                                  f"{d['live_max_bytes'] / 2**20:.0f} MiB, "
                                  f"{d['threads_alive_max']} threads alive at once; glibc's "
                                  f"worst run here: {max(x['vmhwm_kb'] for x in runs[(t, ld, 'glibc')]) / g:.2f}x)")
        for al in bounded:
            if al not in allocs:
                errors.append(f"{al} is bounded but has no run measured")
    ok = (f"Checks: all {len(good)} processes ran on the malloc they were given, every checksum "
          "equals glibc's for its shape"
          + (f", and the runs of {', '.join(bounded)} are within {bound:g}x glibc's median peak "
             f"RSS (at most one of a shape and load above it, and within {2 * bound:g}x)."
             if bound else "."))
    return finish(a, out, errors, "stress.md", ok)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["latency", "stress"])
    ap.add_argument("--in", dest="inp", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--elapsed", type=int, default=0)
    ap.add_argument("--machine", default="")
    ap.add_argument("--skipped", default="")
    ap.add_argument("--reps", default="")
    ap.add_argument("--scale", default="1")
    ap.add_argument("--mtpool-lib", default="")
    ap.add_argument("--versions", default="")
    ap.add_argument("--bound", default="")
    ap.add_argument("--bound-allocs", default="mtpool")
    a = ap.parse_args()
    return latency(a) if a.mode == "latency" else stress(a)


if __name__ == "__main__":
    sys.exit(main())
