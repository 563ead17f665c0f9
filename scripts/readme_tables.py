#!/usr/bin/env python3
"""Writes the README's benchmark tables from the committed results in bench/results/.

Each table sits in README.md between two markers,
    <!-- table:NAME begin -->
    <!-- table:NAME end -->
and everything between them is this script's: a line with the run's date, machine and result
file, then a short table. Figures come only from the results committed in bench/results/ of the
tree this script lies in (read from its files): the raw JSON lines where they are committed
(general-purpose workloads, real programs, servers), through the functions of the reports that
wrote the .md files (bench/tools/report.py, bench/gp/report.py, bench/servers/report.py); the seed
and cross-thread tables from the tables bench/tools/report.py wrote (seed.md, full.md). A
benchmark run writes beside its build and leaves bench/results/ alone unless told to publish
(--publish): so the check holds after any run, and a published run is committed with the tables
it changes.

    python3 scripts/readme_tables.py --write   rewrite the tables in README.md in place
    python3 scripts/readme_tables.py --check   exit 1, with a diff, when README.md's tables differ
                                               from what --write would write, or README.md has
                                               more than MAX_LINES lines (scripts/test.sh, stage docs)
Python 3 standard library only.
"""
import argparse
import difflib
import importlib.util
import os
import re
import statistics
import subprocess
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")
README = os.path.join(ROOT, "README.md")
MAX_LINES = 300

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(ROOT, "bench", "tools"))
import report as common  # noqa: E402  (bench/tools/report.py: read_jsonl, geomean, order_by, labels)


def load_report(sub):
    """bench/SUB/report.py as a module of its own (every report is named report.py)."""
    spec = importlib.util.spec_from_file_location(f"{sub}_report",
                                                  os.path.join(ROOT, "bench", sub, "report.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


gp_report = load_report("gp")
servers_report = load_report("servers")


# --------------------------------------------------------------------------------------------
# reading the result files
# --------------------------------------------------------------------------------------------

def rel(path):
    return os.path.relpath(path, ROOT)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def run_info(md_path):
    """(date, processor, cores) of a run, from the "Machine:" line its report wrote."""
    m = re.search(r"^Machine: (.*)$", read(md_path), re.M)
    if not m:
        sys.exit(f"readme_tables: no 'Machine:' line in {rel(md_path)}")
    fields = [f.strip() for f in m.group(1).split(",")]
    cpu = re.sub(r"\((R|TM)\)|\bProcessor\b|\bCPU\b", "", fields[0])
    cpu = " ".join(cpu.split())
    cores = next((f for f in fields if f.endswith(" cores")), "")
    date = re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", m.group(1))
    if not date:
        sys.exit(f"readme_tables: no date in the 'Machine:' line of {rel(md_path)}")
    return date.group(0), cpu, cores


def run_line(caption, md_path, *links):
    """The line above a table: the run's date, machine and result files, then what it shows."""
    files = ", ".join(f"[{os.path.relpath(p, RESULTS)}]({rel(p)})" for p in (md_path,) + links)
    return [", ".join(run_info(md_path)) + f", {files}: {caption}", ""]


def md_section(md_path, title):
    """The table of a section that bench/tools/report.py wrote: the '### ' heading equal to title
    (else the first that starts with it), as (heading, header cells, {first cell: [cells]}, the
    note under the table)."""
    lines = read(md_path).splitlines()
    heads = [i for i, line in enumerate(lines) if line.startswith("### ")]
    at = [i for i in heads if lines[i][4:] == title] or [i for i in heads if lines[i][4:].startswith(title)]
    if not at:
        sys.exit(f"readme_tables: no section '{title}' in {rel(md_path)}")
    rows, header, note = {}, None, ""
    for line in lines[at[0] + 1:]:
        if line.startswith("#"):
            break
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if header is None:
                header = cells
            elif not set(line) <= set("|-: "):
                rows[cells[0]] = cells[1:]
        elif header and line.strip():
            note = line.strip()
            break
    return lines[at[0]][4:], header, rows, note


def figure(pattern, text, md_path):
    """A figure the report wrote in a note (a count of runs, a delay), found by pattern."""
    m = re.search(pattern, text)
    if not m:
        sys.exit(f"readme_tables: '{pattern}' not found in a note of {rel(md_path)}")
    return m.group(1)


def table(header, rows):
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + \
           ["| " + " | ".join(r) + " |" for r in rows]


def pick(rows, labels, md_path):
    out = []
    for lab in labels:
        if lab not in rows:
            sys.exit(f"readme_tables: no row '{lab}' in {rel(md_path)}")
        out.append([lab] + rows[lab])
    return out


# --------------------------------------------------------------------------------------------
# the tables
# --------------------------------------------------------------------------------------------

# The allocators the short tables show, by bench/tools/report.py's keys (its LABELS name them).
SEED_ROWS = ["mtpool", "mimalloc", "jemalloc", "tcmalloc", "std", "pool_alloc"]
CROSS_ROWS = ["mtpool", "jemalloc", "mimalloc", "std"]


def seed_block():
    """The seed workload's median times, with the footprint's bytes per element of a
    std::list<int> and the share of it given back 500 ms after the free."""
    md = os.path.join(RESULTS, "seed.md")
    labels = [common.LABELS[k] for k in SEED_ROWS]
    _, head, rows, note = md_section(md, "Seed workload: std::list of strings, 4 threads")
    _, bhead, brows, _ = md_section(md, "Footprint: bytes per element")
    _, ghead, grows, gnote = md_section(md, "Footprint: resident memory given back, std::list<int>")
    b, g = bhead.index("std::list<int>") - 1, ghead.index("back after delay") - 1
    reps = figure(r"median of (\d+) fresh processes", note, md)
    delay = figure(r"after (\d+ ms) more", gnote, md)
    out = run_line(f"wall seconds, median of {reps} processes (time relative to mtpool::allocator); "
                   f"bytes per element of a `std::list<int>`, and its share given back {delay} after "
                   "the free (threads alive, no trim call):", md)
    cells = [r[1:] + [brows[r[0]][b], grows[r[0]][g]] for r in pick(rows, labels, md)]
    return out + table(head + ["bytes per element", "given back"],
                       [[lab] + c for lab, c in zip(labels, cells)])


def cross_block():
    """Memory freed by other threads: bench_full.sh's producer-consumer workload."""
    md = os.path.join(RESULTS, "full.md")
    title, head, rows, _ = md_section(md, "Producer-consumer")
    what = figure(r"\((.*)\)", title, md)
    out = run_line(f"{what}; nodes per second (time per node relative to mtpool::allocator):", md)
    return out + table(["allocator"] + head[1:], pick(rows, [common.LABELS[k] for k in CROSS_ROWS], md))


def gp_block():
    """Geometric means of the ratios to the best, as bench/gp/report.py computes them (its
    geo_table), and the cells where mtpool is 1.10x the best peer or more."""
    raw = os.path.join(RESULTS, "gp.jsonl")
    times, capped, tests, threads, allocs = defaultdict(list), set(), [], set(), set()
    for d in common.read_jsonl(raw):
        t, n, al = d.get("test"), d.get("threads"), d.get("alloc")
        if "failed" in d:
            sys.exit(f"readme_tables: {rel(raw)} has a failed run ({al}, {t}, {n} threads)")
        if t not in tests:
            tests.append(t)
        threads.add(n)
        allocs.add(al)
        if "timeout_s" in d:
            capped.add((t, n, al))
            times[(t, n, al)].append(d["timeout_s"])
        else:
            times[(t, n, al)].append(d["wall_s"])
    threads = sorted(threads)
    med = {k: statistics.median(v) for k, v in times.items()}

    def ratio(t, n, al):
        vals = [med[(t, n, a)] for a in allocs if (t, n, a) in med]
        return med[(t, n, al)] / min(vals) if (t, n, al) in med and vals else None

    allocs = sorted(gp_report.order(allocs),
                    key=lambda al: common.geomean([ratio(t, n, al) for t in tests for n in threads]) or 1e9)
    rows = []
    gp_report.geo_table(rows, allocs, threads, tests, ratio, capped)
    rows = [r.replace("**", "") for r in rows if r]
    out = run_line(f"geometric mean over the {len(tests)} workloads of each allocator's median time "
                   "over the best median (1.00: the fastest everywhere; `≥`: a run timed out):",
                   os.path.join(RESULTS, "gp.md"), raw)
    out += ["| allocator | " + " | ".join(f"{n} thread{'s' if n > 1 else ''}" for n in threads) + " | all |",
           "|" + "---|" * (len(threads) + 2)] + rows
    slow = []
    for t in tests:
        for n in threads:
            m = med.get((t, n, "mtpool"))
            peers = [(med[(t, n, p)], p) for p in allocs if p != "mtpool" and (t, n, p) in med]
            if m and peers and m / min(peers)[0] >= 1.10:
                slow.append(f"`{t}` {m / min(peers)[0]:.2f}x {min(peers)[1]} at {n} "
                            f"thread{'s' if n > 1 else ''}")
    out += ["", "Where mtpool takes 1.10x the best peer's time or more: "
            + ("; ".join(slow) if slow else "nowhere") + "."]
    return out


def programs_block():
    """Geometric means over the programs of each allocator's median over glibc's (as
    bench/programs/report.py computes them), and python3's start-up."""
    raw = os.path.join(RESULTS, "programs.jsonl")
    m = defaultdict(list)    # (program, alloc, measure) -> values
    st = defaultdict(list)   # (start-up, alloc, measure) -> values
    programs, allocs = [], set()
    for d in common.read_jsonl(raw):
        al = d.get("alloc")
        allocs.add(al)
        if d.get("rc") or not d.get("preload_ok"):
            sys.exit(f"readme_tables: {rel(raw)} has a failed or unchecked run ({al})")
        if "startup" in d:
            for k in ("wall_s", "maxrss_kb"):
                st[(d["startup"], al, k)] += d[k]
            continue
        if d["program"] not in programs:
            programs.append(d["program"])
        for k in ("wall_s", "cpu_s", "maxrss_kb"):
            m[(d["program"], al, k)].append(d[k])
    others = [al for al in common.order_by(list(common.PRELOAD_LABELS), allocs) if al != "glibc"]

    def geo(al, k):
        return common.geomean([statistics.median(m[(p, al, k)]) / statistics.median(m[(p, "glibc", k)])
                               for p in programs if m[(p, al, k)] and m[(p, "glibc", k)]])

    def start(al, k):
        v, r = st.get(("python3", al, k)), st.get(("python3", "glibc", k))
        return statistics.median(v) / statistics.median(r) if v and r else None

    def f(x):
        return "–" if x is None else f"{x:.2f}"
    rows = [["wall time / CPU time"] + [f"{f(geo(al, 'wall_s'))} / {f(geo(al, 'cpu_s'))}" for al in others],
            ["peak RSS"] + [f(geo(al, "maxrss_kb")) for al in others]]
    if any(start(al, "wall_s") for al in others):
        rows.append(["`python3 -c pass`: wall / peak RSS"] +
                     [f"{f(start(al, 'wall_s'))} / {f(start(al, 'maxrss_kb'))}" for al in others])
    out = run_line(f"geometric mean over the {len(programs)} programs of each allocator's median "
                   "over glibc's (below 1.00: less than glibc):", os.path.join(RESULTS, "programs.md"), raw)
    return out + table([""] + others, rows)


SERVER_COLS = [  # (server, slapd directory or Squid variant, measure, column)
    ("slapd", "small", "search4_ops", "slapd searches/s, 4 threads"),
    ("slapd", "small", "rss_anon_end_kb", "slapd RssAnon after the mix, 100,000 entries"),
    ("slapd", "large", "rss_anon_end_kb", "the same, 1,000 entries of 1 KiB-1 MiB"),
    ("slapd", "large", "rss_anon_idle_kb", "the same, 1 s later"),
    ("squid", "off", "bytes_per_object", "Squid bytes per cached object"),
]


def server_rows(raw, suffix=""):
    """One row per allocator: medians over the repetitions, as bench/servers/report.py's collect()
    gathers them, and their ratio to glibc's in the same run."""
    rows = common.read_jsonl(raw)
    vals = {"slapd": servers_report.collect(rows, "slapd", lambda d: (d["alloc"], d.get("directory", "small"))),
            "squid": servers_report.collect(rows, "squid", lambda d: (d["alloc"], d["variant"]))}
    out = []
    for al in servers_report.order({d["alloc"] for d in rows}):
        cells = []
        for srv, key, meas, _ in SERVER_COLS:
            v, r = vals[srv].get(((al, key), meas)), vals[srv].get((("glibc", key), meas))
            if not v:
                cells.append("–")
                continue
            x = statistics.median(v) * (1 / 1024 if meas.endswith("_kb") else 1)
            s = (f"{x:,.0f}" if x >= 100 else f"{x:.1f}") + (" MiB" if meas.endswith("_kb") else "")
            if r and al != "glibc":
                s += f" ({statistics.median(v) / statistics.median(r):.2f}x)"
            cells.append(s)
        out.append([servers_report.LABELS.get(al, al) + suffix] + cells)
    return out


def servers_block():
    """The full run, and below it the run of glibc and mtpool alone if that one is later."""
    raw, later = os.path.join(RESULTS, "servers.jsonl"), os.path.join(RESULTS, "servers-slapd", "servers.jsonl")
    caption = "median of the repetitions (ratio to glibc's in the same run):"
    rows = server_rows(raw)
    if run_info(later.replace(".jsonl", ".md"))[0] > run_info(raw.replace(".jsonl", ".md"))[0]:
        date = run_info(later.replace(".jsonl", ".md"))[0].split()[0]
        caption = (caption[:-1] + f"; the last two rows: [the run of {date}]"
                   f"({rel(later.replace('.jsonl', '.md'))}), glibc and mtpool alone:")
        rows += server_rows(later, f", {date}")
    out = run_line(caption, raw.replace(".jsonl", ".md"), raw)
    return out + table(["allocator"] + [c[3] for c in SERVER_COLS], rows)


BLOCKS = {
    "seed": lambda: seed_block() + ["", "Memory freed by other threads, from `bash scripts/bench_full.sh` "
                                    "(with Google Benchmark workloads):", ""] + cross_block(),
    "gp": gp_block,
    "programs": programs_block,
    "servers": servers_block,
}


# --------------------------------------------------------------------------------------------
# README.md
# --------------------------------------------------------------------------------------------

def render(text):
    """README text with every marked block rewritten; exits when a marker is missing or unknown."""
    found = re.findall(r"<!-- table:(\S+) begin -->", text)
    for name in found:
        if name not in BLOCKS:
            sys.exit(f"readme_tables: README.md has a table '{name}' this script does not write "
                     f"(it writes: {', '.join(BLOCKS)})")
    for name in BLOCKS:
        if name not in found:
            sys.exit(f"readme_tables: README.md lacks the markers of table '{name}' "
                     f"(<!-- table:{name} begin --> ... <!-- table:{name} end -->)")
    for name, block in BLOCKS.items():
        pat = re.compile(rf"(<!-- table:{re.escape(name)} begin -->\n).*?(<!-- table:{re.escape(name)} end -->)", re.S)
        if not pat.search(text):
            sys.exit(f"readme_tables: table '{name}' has a begin marker but no end marker after it")
        body = "\n".join(block()) + "\n"
        text = pat.sub(lambda mo: mo.group(1) + body + mo.group(2), text, count=1)
    return text


CHANGED_NOTE = ("readme_tables: these files of bench/results/ differ from the last commit: {}. A run "
                "published into bench/results/ (--publish) is committed with README.md's tables "
                "(--write); otherwise git checkout -- bench/results")


def uncommitted_results():
    """The files of bench/results/ that git says differ from the last commit (none where git or
    the repository is missing): the likely cause when the tables stop matching."""
    try:
        out = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no", "--",
                              rel(RESULTS)], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    return [line[3:] for line in out.stdout.splitlines()] if out.returncode == 0 else []


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--check", action="store_true", help="fail when README.md's tables are stale or it is too long")
    g.add_argument("--write", action="store_true", help="rewrite README.md's tables in place")
    a = ap.parse_args()
    text = read(README)
    try:
        new = render(text)
    except SystemExit as e:  # a result file lacks what a table needs
        changed = uncommitted_results() if a.check else []
        if not changed:
            raise
        print(e.code)
        print(CHANGED_NOTE.format(", ".join(changed)))
        return 1
    if a.write:
        if new != text:
            with open(README, "w", encoding="utf-8") as f:
                f.write(new)
        print(f"readme_tables: README.md {'rewritten' if new != text else 'unchanged'}, "
              f"{len(new.splitlines())} lines")
        return 0
    bad = 0
    if new != text:
        sys.stdout.writelines(difflib.unified_diff(text.splitlines(True), new.splitlines(True),
                                                   "README.md", "README.md as written from bench/results"))
        print("readme_tables: README.md's tables differ from bench/results/ (above); "
              "run: python3 scripts/readme_tables.py --write")
        changed = uncommitted_results()
        if changed:
            print(CHANGED_NOTE.format(", ".join(changed)))
        bad = 1
    n = len(text.splitlines())
    if n > MAX_LINES:
        print(f"readme_tables: README.md has {n} lines, more than {MAX_LINES}: it is a guide; "
              "run logs go to bench/results/notes.md")
        bad = 1
    if not bad:
        print(f"readme_tables: README.md's {len(BLOCKS)} tables match bench/results/; {n} lines "
              f"(at most {MAX_LINES})")
    return bad


if __name__ == "__main__":
    sys.exit(main())
