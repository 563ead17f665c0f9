#!/usr/bin/env python3
"""Turn the suite's raw results into markdown tables (and PNG charts with gnuplot).

Inputs (each optional):
  --seed F.jsonl       mtpool_proc --test seed lines (one per process run)
  --footprint F.jsonl  mtpool_proc --test footprint lines
  --giveback F.jsonl   mtpool_proc --test giveback lines
  --gbench F.json ...  Google Benchmark JSON of mtpool_bench (with --benchmark_repetitions); a file
                       from a run under LD_PRELOAD contributes its std::allocator rows only
  --pairs-ir F.json    instructions per 48-byte pair (callgrind), written by bench_full.sh
Every table shows the median over repetitions and each allocator's ratio to mtpool::allocator,
written as "time relative to mtpool" (above 1: slower than mtpool). The report ends with what the
run shows (summary_report): who is fastest and smallest, mtpool against the best peer, memory given
back, the spread. The machine and versions lines come from --machine and --versions, else from the
raw lines' own {"run": ...} line (scripts/bench.sh writes one), so that the raw lines alone give
the report again:
  python3 bench/tools/report.py --seed DIR/seed.jsonl --footprint DIR/footprint.jsonl --png \
    --out DIR --name seed.md
"""
import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
from collections import OrderedDict, defaultdict

LABELS = OrderedDict([
    ("mtpool", "mtpool::allocator"),
    ("mtpool_pool", "mtpool::pool_allocator"),
    ("std", "std::allocator (glibc malloc)"),
    ("tcmalloc", "tcmalloc (LD_PRELOAD)"),
    ("jemalloc", "jemalloc (LD_PRELOAD)"),
    ("mimalloc", "mimalloc (LD_PRELOAD)"),
    ("malloc_alloc", "__gnu_cxx::malloc_allocator"),
    ("mt_alloc", "__gnu_cxx::__mt_alloc"),
    ("pool_alloc", "__gnu_cxx::__pool_alloc"),
    ("bitmap_alloc", "__gnu_cxx::bitmap_allocator"),
    ("boost_fast_pool", "boost::fast_pool_allocator"),
    ("boost_pool", "boost::pool_allocator"),
    ("pmr_sync", "std::pmr::synchronized_pool_resource"),
    ("pmr_unsync", "std::pmr::unsynchronized_pool_resource"),
    ("tbb", "tbb::scalable_allocator"),
])
REF = "mtpool"


def who(d):
    """Row key of a result: the family, or the preloaded malloc for std::allocator runs (a peer
    named by path: its name, e.g. mimalloc-2.4.1)."""
    if d.get("peer"):
        return d["peer"]
    a = d.get("alloc", "?")
    m = d.get("malloc", "glibc")
    if a in ("std", "tcmalloc", "jemalloc", "mimalloc") and m != "glibc":
        return m
    return a


def read_jsonl(path):
    rows = []
    if path and os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError:
                        pass
    return rows


def split_run(rows):
    """A run's raw lines as (what the run was: the object of the line {"run": {"machine": ...,
    "versions": ...}} that scripts/bench.sh writes first, {} without one; the measurements)."""
    info = {}
    for d in rows:
        if isinstance(d.get("run"), dict):
            info.update(d["run"])
    return info, [d for d in rows if "run" not in d]


def fmt(v, digits=3):
    if v is None:
        return "–"
    if abs(v) >= 100:
        return f"{v:.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.{digits}g}" if abs(v) < 1 else f"{v:.2f}"


def table(title, cols, rows, note=None):
    """rows: list of (label, [cell str])."""
    out = [f"### {title}", "", "| allocator | " + " | ".join(cols) + " |",
           "|---|" + "---|" * len(cols)]
    for label, cells in rows:
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    if note:
        out += ["", note]
    return "\n".join(out) + "\n"


def order_by(known, keys):
    """keys in the order of `known` (names, or a dict's keys), then the others sorted."""
    return [k for k in known if k in keys] + sorted(k for k in keys if k not in known)


def ordered_keys(keys):
    return order_by(LABELS, keys)


# The allocators the preload suites (general-purpose, servers) run, in table order.
PRELOAD_LABELS = {"glibc": "glibc malloc", "mtpool": "mtpool (libmtpool-malloc.so)",
                  "mimalloc": "mimalloc", "jemalloc": "jemalloc", "tcmalloc": "tcmalloc (minimal)",
                  "tbbmalloc": "tbbmalloc proxy"}


def geomean(xs):
    """Geometric mean of the values given (None and 0 left out); None when none is left."""
    xs = [x for x in xs if x]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def run_notes(machine, mtpool_lib, skipped, versions=""):
    """The lines a preload suite's results carry about the run: machine, the libmtpool-malloc.so
    measured, the allocators skipped, each allocator's version (each a paragraph; none for an
    empty value)."""
    out = []
    if machine:
        out += [f"Machine: {machine.rstrip('.')}.", ""]
    if mtpool_lib:
        out += [f"mtpool: `{mtpool_lib}`.", ""]
    if skipped.strip():
        out += [f"Not available here, skipped: {skipped.strip()}.", ""]
    if versions.strip():
        out += [f"Versions: {versions.strip()}.", ""]
    return out


def kb(v):
    """A kB figure of a JSON line (anon_huge_kb), None when absent or unreadable (negative)."""
    return v if isinstance(v, (int, float)) and v >= 0 else None


def faults_huge(faults, huge_kb):
    """One cell: median minor faults / median AnonHugePages in MiB ("–" for what is missing)."""
    f = f"{statistics.median(faults):,.0f}" if faults else "–"
    h = [x for x in huge_kb if x is not None]
    return f"{f} / {statistics.median(h) / 1024:.0f} MiB" if h else f"{f} / –"


HUGE_NOTE = ("AnonHugePages: the most anonymous memory transparent huge pages backed, from "
             "/proc/PID/smaps_rollup sampled every 10 ms while the process ran and once at the end "
             "of its work (bench/tools/smaps.h: the peak, since a process cannot be read once it has "
             "exited and an allocator may have given memory back by then).")


def spread(vals):
    """Relative spread (max-min)/median, for the noise note."""
    if len(vals) < 2:
        return 0.0
    m = statistics.median(vals)
    return (max(vals) - min(vals)) / m if m else 0.0


# --------------------------------------------------------------------------------------------
# charts
# --------------------------------------------------------------------------------------------

def chart(path_png, title, ylabel, cols, rows, log=False):
    """Clustered bar chart: one cluster per allocator, one bar per column."""
    if not shutil.which("gnuplot"):
        print(f"report: NOTICE: gnuplot not found, {os.path.basename(path_png)} not drawn", file=sys.stderr)
        return False
    data = [(lab, vals) for lab, vals in rows if any(v is not None for v in vals)]
    if not data:
        return False
    dat = path_png[:-4] + ".dat"
    with open(dat, "w") as f:
        f.write("allocator\t" + "\t".join('"%s"' % c for c in cols) + "\n")
        for lab, vals in data:
            f.write('"%s"\t' % lab.replace(" (LD_PRELOAD)", "").replace(" (glibc malloc)", "")
                    + "\t".join("%g" % v if v is not None else "?" for v in vals) + "\n")
    gp = f"""set terminal pngcairo noenhanced size 1400,760 font ",10"
set output "{path_png}"
set bmargin 12
set rmargin 8
set title "{title}"
set ylabel "{ylabel}"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set xtics rotate by -35 scale 0
set key top left
set grid ytics
set datafile missing "?"
{"set logscale y" if log else "set yrange [0:*]"}
plot for [i=2:{len(cols) + 1}] "{dat}" using i:xtic(1) title columnheader(i)
"""
    try:
        subprocess.run(["gnuplot"], input=gp, text=True, check=True, capture_output=True)
    except subprocess.CalledProcessError as e:
        print("report: gnuplot failed: " + e.stderr, file=sys.stderr)
        return False
    finally:
        os.remove(dat)
    return True


def chart_panels(path_png, title, panels, ref=1.0):
    """Clustered bars in panels stacked vertically; each panel (ylabel, clusters, series): one
    cluster per entry of clusters, one bar per (name, [value per cluster]) of series; a dashed
    line at ref (e.g. 1 for ratios). Used by bench/programs/report.py."""
    if not shutil.which("gnuplot"):
        print(f"report: NOTICE: gnuplot not found, {os.path.basename(path_png)} not drawn", file=sys.stderr)
        return False
    dats, plots = [], []
    for n, (ylabel, clusters, series) in enumerate(panels):
        dat = path_png[:-4] + f".{n}.dat"
        dats.append(dat)
        with open(dat, "w") as f:
            f.write("x\t" + "\t".join('"%s"' % name for name, _ in series) + "\n")
            for i, c in enumerate(clusters):
                f.write('"%s"\t' % c + "\t".join("%g" % v[i] if v[i] is not None else "?"
                                                   for _, v in series) + "\n")
        plots.append(f"""set ylabel "{ylabel}"
set title "{title if n == 0 else ''}"
plot for [i=2:{len(series) + 1}] "{dat}" using i:xtic(1) title columnheader(i), {ref} with lines dashtype 2 lc rgb "black" notitle
""")
    gp = f"""set terminal pngcairo noenhanced size 1400,{420 * len(panels)} font ",10"
set output "{path_png}"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set xtics scale 0
set key top left horizontal
set grid ytics
set datafile missing "?"
set yrange [0:*]
set multiplot layout {len(panels)},1
""" + "".join(plots) + "unset multiplot\n"
    try:
        subprocess.run(["gnuplot"], input=gp, text=True, check=True, capture_output=True)
    except subprocess.CalledProcessError as e:
        print("report: gnuplot failed: " + e.stderr, file=sys.stderr)
        return False
    finally:
        for dat in dats:
            os.remove(dat)
    return True


# --------------------------------------------------------------------------------------------
# process-level tables
# --------------------------------------------------------------------------------------------

SEED_COLS = [("cxx11", 9, "C++11 string, 9 chars"), ("cxx11", 40, "C++11 string, 40 chars"),
             ("cow", 9, "copy-on-write string, 9 chars"), ("cow", 40, "copy-on-write string, 40 chars")]


def seed_times(rows, metric="wall_s"):
    """The seed runs' figures: ({(allocator, (abi, len)): [metric of each run]}, {allocator:
    "not installed" or "timed out"})."""
    times = defaultdict(list)
    status = {}
    for d in rows:
        k = who(d)
        if d.get("missing"):
            status[k] = "not installed"
            continue
        col = (d.get("abi"), int(d.get("len", 0)))
        if d.get("timeout"):
            status.setdefault(k, "timed out")
            times.setdefault((k, col), [])
            continue
        if metric in d:
            times[(k, col)].append(d[metric])
    return times, status


def seed_report(rows, outdir, png, metric="wall_s", agg="median"):
    times, status = seed_times(rows, metric)
    keys = ordered_keys({k for k, _ in times} | set(status))
    pick = statistics.median if agg == "median" else min
    med = {kc: pick(v) for kc, v in times.items() if v}
    cols = [c[2] for c in SEED_COLS]
    trows, crows = [], []
    worst_spread = 0.0
    for k in keys:
        cells, vals = [], []
        for abi, ln, _ in SEED_COLS:
            v = med.get((k, (abi, ln)))
            ref = med.get((REF, (abi, ln)))
            if v is None:
                cells.append(status.get(k, "–"))
                vals.append(None)
                continue
            worst_spread = max(worst_spread, spread(times[(k, (abi, ln))]))
            r = f" ({v / ref:.2f}x)" if ref else ""
            cells.append(f"{v:.3f}{r}")
            vals.append(v)
        trows.append((LABELS.get(k, k), cells))
        crows.append((LABELS.get(k, k), vals))
    nrep = max((len(v) for v in times.values()), default=0)
    if not med:
        return "", med
    what = ("Whole-job wall seconds (threads started to threads joined, each thread with its own list)"
            if metric == "wall_s" else
            "CPU seconds, user + system, of the process over the same span (less disturbed by other "
            "jobs on a busy machine)")
    if agg != "median":
        what = "Best (smallest) wall seconds of the repetitions, the least disturbed by other jobs"
    note = (f"{what}, 4 threads x 1,000,000 elements, {agg} of {nrep} fresh processes; "
            f"(Nx) = relative to mtpool::allocator (above 1: slower than mtpool). Largest spread "
            f"(max-min)/median of a cell: {worst_spread * 100:.0f}%.")
    title = "Seed workload: std::list of strings, 4 threads" + ("" if metric == "wall_s" else ", CPU time")
    if agg != "median":
        title += ", best of the repetitions"
    md = table(title, cols, trows, note)
    if png and metric == "wall_s":
        chart(os.path.join(outdir, "seed.png"), "Seed workload, 4 threads x 1,000,000 strings (lower is better)",
              "wall seconds", cols, crows)
    return md, med


def seed_faults_report(rows):
    """Minor page faults and AnonHugePages of the seed runs: median per allocator and variant."""
    faults, huge = defaultdict(list), defaultdict(list)
    for d in rows:
        if d.get("missing") or d.get("timeout") or "minflt" not in d:
            continue
        col = (d.get("abi"), int(d.get("len", 0)))
        faults[(who(d), col)].append(d["minflt"])
        huge[(who(d), col)].append(kb(d.get("anon_huge_kb")))
    if not faults:
        return ""
    trows = []
    for k in ordered_keys({k for k, _ in faults}):
        trows.append((LABELS.get(k, k), [faults_huge(faults.get((k, (abi, ln)), []), huge.get((k, (abi, ln)), []))
                                         for abi, ln, _ in SEED_COLS]))
    return table("Seed workload: minor page faults / AnonHugePages", [c[2] for c in SEED_COLS], trows,
                 "Median over the same runs: minor page faults of the process over the timed span. " +
                 HUGE_NOTE)


def phase_rows(rows, with_bpe):
    """Per allocator: growth, % given back at each phase (and bytes per element)."""
    out = OrderedDict()
    status = {}
    for d in rows:
        k = who(d)
        if d.get("missing"):
            status[k] = "not installed"
            continue
        out.setdefault(k, []).append(d)
    return out, status


def pct_back(d, field):
    base, peak = d.get("rss_base"), d.get("rss_peak")
    if field not in d or base is None or peak is None or peak <= base:
        return None
    return 100.0 * (peak - d[field]) / (peak - base)


def giveback_table(title, runs, status, note):
    cols = ["peak growth (MiB)", "back after free", "back after delay", "back after trim", "trim call",
            "back after thread exit"]
    trows = []
    for k in ordered_keys(set(runs) | set(status)):
        if k not in runs:
            trows.append((LABELS.get(k, k), [status.get(k, "–")] * len(cols)))
            continue
        d = runs[k][-1]
        growth = (d["rss_peak"] - d["rss_base"]) / 2**20
        cells = [f"{growth:.0f}"]
        if d.get("timeout"):
            cells += ["timed out while freeing"] + ["–"] * 4
        else:
            for f in ("rss_after_free", "rss_after_delay", "rss_after_trim"):
                p = pct_back(d, f)
                cells.append("–" if p is None else f"{max(p, 0.0):.1f}%")
            cells.append(d.get("trim", "none") if d.get("trim") != "none" else "none (no API)")
            p = pct_back(d, "rss_after_exit")
            cells.append("–" if p is None else f"{max(p, 0.0):.1f}%")
        trows.append((LABELS.get(k, k), cells))
    return table(title, cols, trows, note)


FOOT_KINDS = [("list_int", "std::list<int>"), ("map_int", "std::map<int,int>"),
              ("list_str40", "std::list of 40-char strings")]


def footprint_report(rows, outdir, png):
    by_kind = defaultdict(list)
    status = {}
    for d in rows:
        if d.get("missing"):
            status[who(d)] = "not installed"
        else:
            by_kind[d.get("kind")].append(d)
    bpe = {}
    for kind, _ in FOOT_KINDS:
        for d in by_kind.get(kind, []):
            n = d.get("n", 1000000) * d.get("threads", 4)
            bpe.setdefault((who(d), kind), []).append((d["rss_peak"] - d["rss_base"]) / n)
    keys = ordered_keys({k for k, _ in bpe} | set(status))
    cols = [lab for _, lab in FOOT_KINDS]
    trows, crows = [], []
    med = {}
    for k in keys:
        cells, vals = [], []
        for kind, _ in FOOT_KINDS:
            v = bpe.get((k, kind))
            if not v:
                cells.append(status.get(k, "–"))
                vals.append(None)
                continue
            v = statistics.median(v)
            med[(k, kind)] = v
            ref = statistics.median(bpe[(REF, kind)]) if (REF, kind) in bpe else None
            cells.append(f"{v:.1f}" + (f" ({v / ref:.2f}x)" if ref else ""))
            vals.append(v)
        trows.append((LABELS.get(k, k), cells))
        crows.append((LABELS.get(k, k), vals))
    md = table("Footprint: bytes per element, 4 threads x 1,000,000 elements", cols, trows,
               "Resident growth from before the threads start to when every list/map is built, divided by "
               "the elements; (Nx) = relative to mtpool::allocator (above 1: more memory than mtpool).")
    delay = next((d.get("delay_ms") for d in rows if "delay_ms" in d), 500)
    for kind, lab in FOOT_KINDS:
        runs, _ = phase_rows(by_kind.get(kind, []), False)
        md += "\n" + giveback_table(
            f"Footprint: resident memory given back, {lab}", runs, status,
            f"Share of the peak growth given back to the OS: right after every element is freed (threads "
            f"alive), after {delay} ms more, after the allocator's trim call (each thread, then the "
            f"process), and after the threads exit.")
    if png:
        chart(os.path.join(outdir, "footprint.png"), "Bytes per element, 4 threads x 1,000,000 (lower is better)",
              "bytes per element", cols, crows)
    return md, med


def giveback_report(rows, outdir, png):
    runs, status = phase_rows(rows, False)
    n = next((d.get("n") for d in rows if d.get("n")), 50000000)
    delay = next((d.get("delay_ms") for d in rows if "delay_ms" in d), 500)
    md = giveback_table(
        f"Memory given back: {n / 1e6:.0f},000,000 blocks of 120 B, 4 threads", runs, status,
        f"Each thread allocates its share, then frees it; shares of the peak growth given back right "
        f"after the free, {delay} ms later, after the trim call, and after the threads exit.")
    if png:
        cols = ["after free", "after delay", "after trim", "after thread exit"]
        crows = []
        for k in ordered_keys(set(runs)):
            d = runs[k][-1]
            crows.append((LABELS.get(k, k), [pct_back(d, f) for f in
                                              ("rss_after_free", "rss_after_delay", "rss_after_trim", "rss_after_exit")]))
        chart(os.path.join(outdir, "giveback.png"), "Share of peak memory given back to the OS (higher is better)",
              "% of peak growth", cols, crows)
    return md, runs


# --------------------------------------------------------------------------------------------
# Google Benchmark tables
# --------------------------------------------------------------------------------------------

GB_TITLES = OrderedDict([
    ("seed", "Seed workload under Google Benchmark (steady state: repeated iterations in one process)"),
    ("pairs", "Allocate/free pairs"),
    ("prodcons", "Producer-consumer (64-byte list nodes built by producers, freed by consumers)"),
    ("churn", "Server churn (Larson pattern: random sizes 16 B-1 KiB, 1 in 8 freed by another thread)"),
    ("map", "std::map<int,int> insert/find/erase mix"),
    ("umap", "std::unordered_map<int,int> insert/find/erase mix"),
])


def load_gbench(paths):
    """-> {workload: {(key, column): {'median': v, 'cv': c, counters...}}}"""
    res = defaultdict(dict)
    missing = set()
    for p in paths:
        if not os.path.exists(p):
            continue
        with open(p) as f:
            try:
                j = json.load(f)
            except json.JSONDecodeError:
                print(f"report: NOTICE: {p} is not valid JSON, skipped", file=sys.stderr)
                continue
        ctx = j.get("context", {})
        malloc = ctx.get("mtpool_bench.malloc", "glibc")
        if ctx.get("mtpool_bench.missing", "none") != "none":
            missing.add(ctx["mtpool_bench.missing"])
        have_aggr = any(b.get("run_type") == "aggregate" for b in j.get("benchmarks", []))
        per_run = defaultdict(list)
        for b in j.get("benchmarks", []):
            if have_aggr and b.get("run_type") != "aggregate":
                continue
            if b.get("error_occurred"):
                continue
            parts = b["run_name"].split("/")
            wl, fam = parts[0], parts[1]
            if malloc != "glibc":
                if fam != "std":
                    continue
                fam = malloc
            col = "/".join(x for x in parts[2:] if x != "real_time" and not x.startswith("elems:"))
            col = col.replace("threads:", "T=").replace("size:", "").replace("len:", "len ")
            agg = b.get("aggregate_name", "median") if have_aggr else "median"
            rate = b.get("items_per_second")
            if agg == "median":
                if have_aggr:
                    res[wl][(fam, col)] = {"rate": rate, "cv": None, "bpe": b.get("bytes_per_elem"),
                                           "peak": b.get("rss_peak_MiB"), "held": b.get("rss_held_MiB")}
                else:
                    per_run[(wl, fam, col)].append(rate)
            elif agg == "cv":
                res[wl].setdefault((fam, col), {})["cv"] = rate
        for (wl, fam, col), v in per_run.items():
            res[wl][(fam, col)] = {"rate": statistics.median(v), "cv": None}
    return res, missing


def gbench_report(res, outdir, png):
    md = ""
    summary = {}
    for wl, title in GB_TITLES.items():
        cells = res.get(wl)
        if not cells:
            continue
        cols = []
        for (_, c) in cells:
            if c not in cols:
                cols.append(c)
        keys = ordered_keys({k for k, _ in cells})
        trows, crows = [], []
        worst_cv = 0.0
        for k in keys:
            row, vals = [], []
            for c in cols:
                d = cells.get((k, c))
                if not d or d.get("rate") is None:
                    row.append("–")
                    vals.append(None)
                    continue
                rate = d["rate"]
                if d.get("cv"):
                    worst_cv = max(worst_cv, d["cv"])
                ref = cells.get((REF, c), {}).get("rate")
                row.append(f"{rate / 1e6:.3g} M/s" + (f" ({ref / rate:.2f}x)" if ref else ""))
                vals.append(rate / 1e6)
            trows.append((LABELS.get(k, k), row))
            crows.append((LABELS.get(k, k), vals))
        note = ("Items per second (median of the repetitions; items: elements, pairs, nodes, replacements "
                "or operations); (Nx) = time per item relative to mtpool::allocator (above 1: slower than "
                "mtpool). Threads use real time.")
        if worst_cv:
            note += f" Largest coefficient of variation of a cell: {worst_cv * 100:.0f}%."
        md += "\n" + table(title, cols, trows, note)
        summary[wl] = cells
        if png:
            chart(os.path.join(outdir, f"gbench_{wl}.png"), title + " (higher is better)", "million items per second",
                  cols, crows)
    return md, summary


# --------------------------------------------------------------------------------------------
# summary: what the run shows
# --------------------------------------------------------------------------------------------

OWN = (REF, "mtpool_pool")  # mtpool's own families; every other allocator is a peer


def lab(k):
    return LABELS.get(k, k)


def versus(mine, theirs, more="slower"):
    """mtpool against a peer, as words and a ratio of the larger figure to the smaller: "ahead
    1.16x" (the peer's figure 1.16 times mtpool's), "behind 1.01x", "equal"; more: what a larger
    figure is ("slower", "larger")."""
    if mine == theirs:
        return "equal"
    if mine < theirs:
        return f"{'ahead' if more == 'slower' else 'smaller'} {theirs / mine:.2f}x"
    return f"{'behind' if more == 'slower' else 'larger'} {mine / theirs:.2f}x"


def pct(x):
    return "–" if x is None else f"{max(x, 0.0):.1f}%"


def summary_report(seed_rows, foot_med, foot_rows, give_runs, gb):
    """What the run shows, for its reader: per seed variant the fastest allocator and mtpool
    against the fastest peer (ratio, and each cell's spread), per footprint kind the fewest bytes
    per element and mtpool against the smallest peer, the memory given back, the largest spread of
    a cell; for the Google Benchmark workloads, where mtpool is fastest and where furthest behind.
    Every figure comes from the tables above it."""
    out = ["### What this run shows", ""]
    times, _ = seed_times(seed_rows)
    med = {kc: statistics.median(v) for kc, v in times.items() if v}
    if med:
        out += ["Seed workload (median wall seconds, the first table): the fastest allocator, and "
                "mtpool::allocator against the fastest peer (mtpool::pool_allocator is not a peer): "
                "\"ahead 1.16x\" = the peer takes 1.16 times mtpool's time, \"behind 1.16x\" = mtpool "
                "takes 1.16 times the peer's. Spread: (max-min)/median of each cell's runs; a "
                "difference within it is a tie.", "",
                "| seed variant | fastest | mtpool::allocator | fastest peer | mtpool against it | "
                "spread: mtpool / peer |", "|---|---|---|---|---|---|"]
        for abi, ln, name in SEED_COLS:
            col = {k: v for (k, c), v in med.items() if c == (abi, ln)}
            if not col:
                continue
            best = min(col, key=col.get)
            mine = col.get(REF)
            peers = {k: v for k, v in col.items() if k not in OWN}
            peer = min(peers, key=peers.get) if peers else None
            cells = [name, f"{lab(best)} {col[best]:.3f} s",
                     "–" if mine is None else f"{mine:.3f} s",
                     "–" if peer is None else f"{lab(peer)} {peers[peer]:.3f} s"]
            if mine is None or peer is None:
                cells += ["–", "–"]
            else:
                tm, tp = times[(REF, (abi, ln))], times[(peer, (abi, ln))]
                sm, sp = spread(tm), spread(tp)
                tie = (abs(mine - peers[peer]) / min(mine, peers[peer]) <= max(sm, sp)
                       and mine != peers[peer])
                cells += [versus(mine, peers[peer]) + (", within the spread" if tie else ""),
                          " / ".join(f"{x * 100:.0f}%" if len(t) > 1 else "– (1 run)"
                                     for x, t in ((sm, tm), (sp, tp)))]
            out.append("| " + " | ".join(cells) + " |")
        nrep = max(len(v) for v in times.values())
        worst = max(((spread(v), kc) for kc, v in times.items() if v), key=lambda x: x[0])
        out += [""]
        if nrep < 2:
            out += ["One run per cell: no spread, so no difference here can be told from noise.", ""]
        else:
            (k, (abi, ln)) = worst[1]
            what = next(c[2] for c in SEED_COLS if c[:2] == (abi, ln))
            out += [f"Largest spread of a cell: {worst[0] * 100:.0f}% ({lab(k)}, {what}; "
                    f"{nrep} runs per cell).", ""]
    if foot_med:
        out += ["Footprint (one run per allocator and kind): the fewest bytes per element, and "
                "mtpool::allocator against the smallest peer (\"smaller 1.33x\" = the peer takes 1.33 "
                "times mtpool's bytes).", "",
                "| footprint | smallest | mtpool::allocator | smallest peer | mtpool against it |",
                "|---|---|---|---|---|"]
        for kind, name in FOOT_KINDS:
            col = {k: v for (k, kk), v in foot_med.items() if kk == kind}
            if not col:
                continue
            best = min(col, key=col.get)
            mine = col.get(REF)
            peers = {k: v for k, v in col.items() if k not in OWN}
            peer = min(peers, key=peers.get) if peers else None
            out.append(f"| {name} | {lab(best)} {col[best]:.1f} | "
                       + ("–" if mine is None else f"{mine:.1f}") + " | "
                       + ("–" if peer is None else f"{lab(peer)} {peers[peer]:.1f}") + " | "
                       + ("–" if mine is None or peer is None else versus(mine, peers[peer], "larger"))
                       + " |")
        out.append("")
    # memory given back: the footprint kinds, then the give-back workload
    runs = [(f"footprint, {name}", phase_rows([d for d in foot_rows if d.get("kind") == kind], False)[0])
            for kind, name in FOOT_KINDS]  # {allocator: [runs]} per kind
    if give_runs:
        n = next((d.get("n") for ds in give_runs.values() for d in ds if d.get("n")), None)
        runs.append((f"{n / 1e6:.0f},000,000 blocks of 120 B" if n else "blocks of 120 B", give_runs))
    grows = []
    for what, rs in runs:
        if not rs:
            continue
        last = {k: ds[-1] for k, ds in rs.items() if ds and not ds[-1].get("timeout")}
        cells = [what]
        delay = next((d.get("delay_ms") for d in last.values() if "delay_ms" in d), None)
        for f in ("rss_after_delay", "rss_after_trim"):
            mine = pct_back(last[REF], f) if REF in last else None
            peers = {k: pct_back(d, f) for k, d in last.items() if k not in OWN}
            peers = {k: v for k, v in peers.items() if v is not None}
            peer = max(peers, key=peers.get) if peers else None
            cells += [pct(mine), "–" if peer is None else f"{lab(peer)} {pct(peers[peer])}"]
        grows.append(cells)
    if grows:
        out += [f"Memory given back, as a share of the peak growth: {delay or 500} ms after the free "
                "with the threads alive and no trim call, and after the allocator's trim call.", "",
                "| workload | mtpool, no trim | most of a peer, no trim | mtpool, after trim | "
                "most of a peer, after trim |", "|---|---|---|---|---|"]
        out += ["| " + " | ".join(c) + " |" for c in grows]
        out.append("")
    lines = []
    for wl, title in GB_TITLES.items():
        cells = gb.get(wl, {})
        cols = list(dict.fromkeys(c for _, c in cells))
        lead, behind, worst_cv = 0, None, 0.0
        n = 0
        for c in cols:
            mine = cells.get((REF, c), {}).get("rate")
            peers = {k: d["rate"] for (k, cc), d in cells.items()
                     if cc == c and k not in OWN and d.get("rate")}
            if not mine or not peers:
                continue
            n += 1
            best = max(peers, key=peers.get)
            if mine >= peers[best]:
                lead += 1
            elif behind is None or peers[best] / mine > behind[0]:
                behind = (peers[best] / mine, c, best)
        for d in cells.values():
            worst_cv = max(worst_cv, d.get("cv") or 0.0)
        if not n:
            continue
        line = f"- {title.split(' (')[0]}: mtpool::allocator the fastest in {lead} of {n} cells"
        if behind:
            line += (f"; furthest behind the fastest peer at {behind[1]}: {lab(behind[2])} "
                     f"{behind[0]:.2f}x mtpool's rate")
        if worst_cv:
            line += f"; largest coefficient of variation of a cell {worst_cv * 100:.0f}%"
        lines.append(line + ".")
    if lines:
        out += ["Google Benchmark workloads (items per second, median of the repetitions), mtpool "
                "against the fastest peer in each cell:", ""] + lines + [""]
    if len(out) == 2:
        return ""
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed")
    ap.add_argument("--footprint")
    ap.add_argument("--giveback")
    ap.add_argument("--gbench", nargs="*", default=[])
    ap.add_argument("--pairs-ir")
    ap.add_argument("--machine", default="", help="the machine line (default: the raw lines' own, "
                    "see split_run)")
    ap.add_argument("--versions", default="", help="each allocator's version, one line (default: "
                    "the raw lines' own)")
    ap.add_argument("--out", required=True, help="directory for the .md and .png files")
    ap.add_argument("--png", action="store_true")
    ap.add_argument("--name", default="results.md")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)

    info, seed_rows = split_run(read_jsonl(a.seed))
    i, foot_rows = split_run(read_jsonl(a.footprint))
    info = {**i, **info}
    i, give_rows = split_run(read_jsonl(a.giveback))
    info = {**i, **info}
    md = []
    machine, versions = a.machine or info.get("machine", ""), a.versions or info.get("versions", "")
    if machine:
        md.append(f"Machine: {machine}\n")
    if versions:
        md.append(f"Versions: {versions}\n")
    foot_med, give_runs = {}, {}
    if seed_rows:
        s, _ = seed_report(seed_rows, a.out, a.png)
        md.append(s)
        s, _ = seed_report(seed_rows, a.out, False, "wall_s", "min")
        md.append(s)
        s, _ = seed_report(seed_rows, a.out, False, "cpu_s")
        if s:
            md.append(s)
        s = seed_faults_report(seed_rows)
        if s:
            md.append(s)
    if foot_rows:
        s, foot_med = footprint_report(foot_rows, a.out, a.png)
        md.append(s)
    if give_rows:
        s, give_runs = giveback_report(give_rows, a.out, a.png)
        md.append(s)
    gb = {}
    if a.gbench:
        res, missing = load_gbench(a.gbench)
        s, gb = gbench_report(res, a.out, a.png)
        md.append(s)
        for m in missing:
            md.append(f"NOTICE: not built into mtpool_bench: {m}\n")
    pairs_ir = None
    if a.pairs_ir and os.path.exists(a.pairs_ir):
        with open(a.pairs_ir) as f:
            pairs_ir = json.load(f)
        md.append(table("Instructions per 48-byte allocate+deallocate pair (callgrind, 1 thread)",
                        ["instructions per pair (loop included)"],
                        [(LABELS.get(k, k), [f"{v:.0f}"]) for k, v in pairs_ir.items()]))
    # Notices for allocators absent everywhere.
    present = set()
    for rows in (seed_rows, foot_rows, give_rows):
        present |= {who(d) for d in rows if not d.get("missing")}
    absent = [LABELS[k] for k in LABELS if present and k not in present]
    if absent:
        md.append("NOTICE: not measured (not installed or not built): " + ", ".join(absent) + "\n")
    s = summary_report(seed_rows, foot_med, foot_rows, give_runs, gb)
    if s:
        md.append(s)
    text = "\n".join(md)
    with open(os.path.join(a.out, a.name), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
