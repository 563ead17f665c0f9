#!/usr/bin/env python3
"""Tables and chart of the real programs (scripts/bench_programs.sh).

Reads programs.jsonl (one line per program run, one per batch of start-ups) and writes
programs.md and programs.png (two panels: time and peak RSS over glibc's, per program; drawn with
gnuplot by bench/tools/report.py's chart_panels()). A cell is the median of the repetitions;
ratios are to glibc's median of the same program; geometric means are over the programs.
Exits 1 when a process failed, an output differs from glibc's (or, without glibc, from the first
allocator's), a run's processes did not all run on the malloc given, or the number of processes
of a program differs between allocators.
"""
import argparse
import os
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import report as common  # noqa: E402  (bench/tools/report.py: read_jsonl, fmt, spread, chart_panels)

LABELS = {"glibc": "glibc", "mtpool": "mtpool", "mimalloc": "mimalloc", "jemalloc": "jemalloc",
          "tcmalloc": "tcmalloc", "tbbmalloc": "tbbmalloc"}
ABOUT = {
    "python3": "`python3 work.py`: word count, records sorted and grouped, string building, churn",
    "perl": "`perl work.pl`: hashes, regex substitution, split/join, sort, churn",
    "sort": "GNU `sort` of a generated file (2 threads)",
    "sqlite3": "`sqlite3 :memory:`: 2 tables built, indexed, joined, grouped",
    "xz": "`xz -6 -T2` (two block encoders)",
    "g++": "`g++ -std=c++17 -O2 -c` of a template-heavy file",
    "git": "`git log -p` over a synthetic history",
    "make": "`make -j2` of many small jobs (a shell and `sort` each)",
    "ruby": "`ruby work.rb`: templating by interpolation and gsub, scan, JSON out and back, sort",
    "lua": "`lua5.4 work.lua`: tables and strings (all through realloc/free)",
}
STARTUP = {"python3": "`python3 -c pass`", "hello": "C `main` that mallocs once"}


def order(keys):
    return common.order_by(LABELS, keys)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--in", dest="inp", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--elapsed", type=int, default=0)
    ap.add_argument("--machine", default="")
    ap.add_argument("--skipped", default="")
    ap.add_argument("--reps", default="")
    ap.add_argument("--size", default="")
    ap.add_argument("--inputs", default="")
    ap.add_argument("--mtpool-lib", default="")
    ap.add_argument("--versions", default="")
    a = ap.parse_args()

    rows = common.read_jsonl(a.inp)
    errors = []
    m = defaultdict(lambda: defaultdict(list))   # (program, alloc) -> measure -> [values]
    sums = defaultdict(dict)                      # program -> {alloc: set of checksums}
    procs = defaultdict(lambda: defaultdict(set))  # program -> alloc -> {process counts}
    st = defaultdict(lambda: defaultdict(list))   # (startup program, alloc) -> measure -> [values]
    programs, allocs, loads = [], set(), []
    nproc_checked = 0
    for d in rows:
        al = d.get("alloc")
        allocs.add(al)
        loads.append(d.get("load1", 0))
        nproc_checked += d.get("procs", 0) if d.get("preload_ok") else 0
        if "startup" in d:
            p = d["startup"]
            if d.get("rc") or not d.get("preload_ok"):
                errors.append(f"start-up of {p} on {al}, round {d.get('round')}: exit {d.get('rc')}, "
                              f"preload checked: {d.get('preload_ok')}")
            for k in ("wall_s", "cpu_s", "maxrss_kb", "minflt"):
                st[(p, al)][k] += d.get(k, [])
            continue
        p = d["program"]
        if p not in programs:
            programs.append(p)
        if d.get("rc") or not d.get("preload_ok"):
            errors.append(f"{p} on {al}, repetition {d.get('rep')}: exit {d.get('rc')}, "
                          f"preload checked: {d.get('preload_ok')}")
            continue
        for k in ("wall_s", "cpu_s", "maxrss_kb", "minflt"):
            m[(p, al)][k].append(d[k])
        h = common.kb(d.get("anon_huge_kb"))
        if h is not None:
            m[(p, al)]["anon_huge_kb"].append(h)
        sums[p].setdefault(al, set()).add(d["checksum"])
        procs[p][al].add(d["procs"])
    allocs = order(allocs)
    for p, cs in sums.items():
        ref = "glibc" if "glibc" in cs else order(cs)[0]
        for al, c in cs.items():
            if len(c) > 1:
                errors.append(f"{p}: {al} gave {len(c)} different outputs in its repetitions")
            elif c != cs[ref]:
                errors.append(f"{p}: the output on {al} differs from {ref}'s")
        counts = {al: sorted(v) for al, v in procs[p].items()}
        if len({tuple(v) for v in counts.values()}) > 1:
            errors.append(f"{p}: processes per run differ between allocators: {counts}")

    def med(p, al, k):
        v = m.get((p, al), {}).get(k)
        return statistics.median(v) if v else None

    def ratio(p, al, k, ref="glibc"):
        x, r = med(p, al, k), med(p, ref, k)
        return x / r if x is not None and r else None

    out = ["# Real programs under each allocator", "",
           "Written by `scripts/bench_programs.sh` (bench/programs/); raw lines in `programs.jsonl`. "
           "Unmodified Debian programs, each allocator through `LD_PRELOAD` (glibc: none).", ""]
    out += common.run_notes(a.machine, a.mtpool_lib, a.skipped, a.versions)
    lo = f"{min(loads):.2f}-{max(loads):.2f}" if loads else "–"
    out += [f"Run: {a.reps} repetitions (outermost; the allocators interleaved inside, the first "
            f"rotating), inputs `{a.size}` ({a.inputs}), {a.elapsed // 60} min {a.elapsed % 60} s in all; "
            f"1-minute load average at the start of the runs: {lo}."]
    out += ["", "Wall: fork to reap of the whole process tree; CPU: user + system of the tree; peak "
            "RSS: of its largest process (wait4's ru_maxrss); faults: minor page faults of the tree. "
            "Every process also had `which_malloc.so` preloaded (the check; glibc runs too). "
            "AnonHugePages (per program): the most anonymous memory transparent huge pages backed in "
            "the process tree at once, sampled every 10 ms from /proc/PID/smaps_rollup while it ran "
            "(bench/tools/smaps.h: a process cannot be read once it has exited, so the peak of the "
            "samples; a run shorter than 10 ms has none).", ""]
    have_ref = "glibc" in allocs
    others = [al for al in allocs if al != "glibc"]

    def ratio_table(title, k, note):
        nonlocal out
        out += [f"## {title}", "", note, "",
                "| program | " + " | ".join(others) + " |", "|---|" + "---|" * len(others)]
        for p in programs:
            cells = []
            for al in others:
                r = ratio(p, al, k)
                cells.append("–" if r is None else f"{r:.2f}")
            out.append(f"| {p} | " + " | ".join(cells) + " |")
        g = [common.geomean([ratio(p, al, k) for p in programs]) for al in others]
        out.append("| **geometric mean** | " + " | ".join("–" if x is None else f"**{x:.2f}**" for x in g) + " |")
        out.append("")
        return dict(zip(others, g))

    geo = {}
    if have_ref and others and programs:
        geo["wall_s"] = ratio_table("Wall time over glibc's", "wall_s",
                                    "Median wall time over glibc's median (below 1.00: faster than glibc).")
        geo["cpu_s"] = ratio_table("CPU time over glibc's", "cpu_s",
                                   "User + system seconds of the process tree; less moved by other load on "
                                   "a shared machine than the wall time.")
        geo["maxrss_kb"] = ratio_table("Peak RSS over glibc's", "maxrss_kb",
                                       "Peak resident set of the largest process (below 1.00: smaller).")
        geo["minflt"] = ratio_table("Minor page faults over glibc's", "minflt",
                                    "Minor faults of the process tree.")

    out += ["## Per program", "",
            "Median of the repetitions; ±: half the spread (max-min)/median of the wall times; "
            "(ratio to glibc).", ""]
    worst = (0.0, "")
    spreads = {"wall_s": [], "cpu_s": []}
    for p in programs:
        for al in allocs:
            for k in spreads:
                v = m.get((p, al), {}).get(k)
                if v and len(v) > 1:
                    spreads[k].append(common.spread(v))
        n = sorted({c for v in procs[p].values() for c in v})
        out += [f"### {p}", "", ABOUT.get(p, "") + f"; {'/'.join(map(str, n))} process"
                f"{'es' if n != [1] else ''} per run.", "",
                "| allocator | wall s | CPU s | peak RSS MiB | minor faults | AnonHugePages MiB |",
                "|---|---|---|---|---|---|"]
        for al in allocs:
            w = m.get((p, al), {}).get("wall_s")
            if not w:
                out.append(f"| {al} | – | – | – | – | – |")
                continue
            sp = common.spread(w)
            if sp > worst[0]:
                worst = (sp, f"{p} on {al}")

            def cell(k, scale=1.0, f=common.fmt):
                r = ratio(p, al, k) if have_ref and al != "glibc" else None
                return f(med(p, al, k) * scale) + (f" ({r:.2f})" if r is not None else "")
            hv = m.get((p, al), {}).get("anon_huge_kb")
            out.append(f"| {al} | {cell('wall_s')} ±{sp * 50:.0f}% | {cell('cpu_s')} | "
                       f"{cell('maxrss_kb', 1 / 1024)} | {cell('minflt', 1, lambda v: f'{v:,.0f}')} | "
                       f"{statistics.median(hv) / 1024:.0f} |" if hv else
                       f"| {al} | {cell('wall_s')} ±{sp * 50:.0f}% | {cell('cpu_s')} | "
                       f"{cell('maxrss_kb', 1 / 1024)} | {cell('minflt', 1, lambda v: f'{v:,.0f}')} | – |")
        out.append("")
    if worst[1]:
        out += [f"Largest spread of a cell's wall times: {worst[0] * 100:.0f}% of its median ({worst[1]}).", ""]
    if spreads["wall_s"]:
        out += ["Spread (max-min)/median of a cell's repetitions, over all cells: wall time median "
                f"{statistics.median(spreads['wall_s']) * 100:.0f}%, largest {max(spreads['wall_s']) * 100:.0f}%; "
                f"CPU time median {statistics.median(spreads['cpu_s']) * 100:.0f}%, largest "
                f"{max(spreads['cpu_s']) * 100:.0f}%.", ""]

    if st:
        out += ["## Start-up", "",
                "Each run: exec to exit of one process (the check preloaded too); median over all "
                "runs, in batches interleaved across allocators; (ratio to glibc).", "",
                "| program | allocator | runs | wall ms | CPU ms | peak RSS MiB | minor faults |",
                "|---|---|---|---|---|---|---|"]
        for p in STARTUP:
            for al in allocs:
                d = st.get((p, al))
                if not d or not d["wall_s"]:
                    continue
                ref = st.get((p, "glibc"))

                def sc(k, scale, f):
                    v = statistics.median(d[k])
                    r = statistics.median(ref[k]) if ref and al != "glibc" and ref[k] else None
                    return f(v * scale) + (f" ({v / r:.2f})" if r else "")
                out.append(f"| {STARTUP[p]} | {al} | {len(d['wall_s'])} | "
                           f"{sc('wall_s', 1000, lambda v: f'{v:.2f}')} | {sc('cpu_s', 1000, lambda v: f'{v:.1f}')} | "
                           f"{sc('maxrss_kb', 1 / 1024, lambda v: f'{v:.2f}')} | {sc('minflt', 1, lambda v: f'{v:.0f}')} |")
        out.append("")

    if errors:
        out += ["## ERRORS", ""] + [f"- {e}" for e in errors] + [""]
    else:
        out += [f"Checks: every program's output (stdout, and g++'s object file, make's joined "
                f"checksum) is identical on every allocator and repetition; all {nproc_checked:,} "
                f"processes ran on the malloc they were given (the object that defines `malloc`, "
                f"and the allocator its symbols name).", ""]
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "programs.md"), "w") as f:
        f.write("\n".join(out))

    if have_ref and others and programs:
        cols = programs + ["geo. mean"]
        panels = []
        for k, what in (("wall_s", "wall time / glibc's"), ("maxrss_kb", "peak RSS / glibc's")):
            prow = [(al, [ratio(p, al, k) for p in programs] + [geo[k].get(al)]) for al in others]
            panels.append((what, cols, prow))
        common.chart_panels(os.path.join(a.out, "programs.png"),
                            "Real programs: each allocator over glibc (lower is better; 1 = glibc)", panels)
    for e in errors:
        print("programs report: " + e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
