#!/usr/bin/env python3
"""Tables, chart and target check of the reference-server benchmark (scripts/bench_servers.sh).

Reads the JSON lines of bench/servers/run.sh and writes servers.md (and servers.png with gnuplot,
drawn by bench/tools/report.py's chart()). Every cell: median of the repetitions, its spread
(max-min)/median, and the ratio to glibc. With --check ALLOCS, exits 1 unless every listed
allocator has a number in every cell and every server it ran was mapped with the right library
and stopped.
"""
import argparse
import os
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import report as common  # noqa: E402  (bench/tools/report.py: read_jsonl, table, chart, spread)

LABELS = common.PRELOAD_LABELS
ORDER = list(LABELS)
PEERS = [a for a in ORDER if a != "mtpool"]
# slapd's directories (bench/servers/run.sh, SRV_SLAPD_DIRS): their description lengths
DIRS = {"small": "100..2,000 bytes", "large": "1 KiB..1 MiB (log-uniform)"}

SLAPD_COLS = [("search1_ops", "searches/s, 1 thread", +1),
              ("search4_ops", "searches/s, 4 threads", +1),
              ("mix4_ops", "ops/s, 4 threads, 1 in 4 a modify", +1),
              ("scan_s", "full scan, s", -1),
              ("rss_anon_scan_kb", "RssAnon after the scan, MiB", -1),
              ("rss_anon_end_kb", "RssAnon after the mix, MiB", -1),
              ("rss_anon_idle_kb", "RssAnon 1 s later, MiB", -1)]
SQUID_COLS = [("bytes_per_object", "RSS bytes per cached object", -1),
              ("anon_bytes_per_object", "RssAnon bytes per object", -1),
              ("cpu_us_per_miss", "CPU µs per miss", -1),
              ("cpu_us_per_hit", "CPU µs per hit", -1)]
VARIANTS = {"off": "memory_pools off", "on": "memory_pools on",
            "chunked": "memory_pools on, MEMPOOLS=1 (chunked)"}


def order(keys):
    return common.order_by(ORDER, keys)


def collect(rows, server, key_of):
    """{(row key, metric): [values]} over repetitions."""
    vals = defaultdict(list)
    for d in rows:
        if d.get("server") != server:
            continue
        for m, _, _ in (SLAPD_COLS if server == "slapd" else SQUID_COLS):
            if d.get(m) is not None:
                vals[(key_of(d), m)].append(d[m])
    return vals


def mix_total(rows, directory):
    """The slapd mix's operations over the runs on one directory: a count, or its range when the
    runs differ (a run stopped by its time bound); "?" for older rows that did not record it."""
    v = sorted({d["mix4_total"] for d in rows if d.get("server") == "slapd"
                and d.get("directory", "small") == directory and d.get("mix4_total") is not None})
    if not v:
        return "?"
    return f"{v[0]:,}" if len(v) == 1 else f"{v[0]:,}-{v[-1]:,}"


def cell(vals, key, ref_key, m, scale=1.0):
    v = vals.get((key, m))
    if not v:
        return "–", None
    med = statistics.median(v)
    s = f"{common.fmt(med * scale)} ±{common.spread(v) * 50:.0f}%"
    ref = vals.get((ref_key, m))
    if ref and key != ref_key:
        s += f" ({med / statistics.median(ref):.2f}x)"
    return s, med


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--in", dest="inp", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--machine", default="")
    ap.add_argument("--elapsed", type=int, default=0)
    ap.add_argument("--skipped", default="")
    ap.add_argument("--mtpool-lib", default="", help="the libmtpool-malloc.so measured (for the notes)")
    ap.add_argument("--check", default="", help="allocators that must have every number")
    ap.add_argument("--versions", default="", help="each allocator's version, one line")
    a = ap.parse_args()
    rows = common.read_jsonl(a.inp)
    os.makedirs(a.out, exist_ok=True)
    md = ["# Reference servers: OpenLDAP slapd and Squid on each allocator", ""]
    md += common.run_notes(a.machine, a.mtpool_lib, a.skipped, a.versions)
    reps = max((d.get("rep", 0) for d in rows), default=0)
    obj = next((d["objects"] for d in rows if d.get("server") == "squid"), None)
    md += [f"Median of {reps} interleaved repetitions (a fresh server process each); ±N% = half the "
           f"spread (max-min)/median; (Nx) = ratio to glibc malloc. The allocator is LD_PRELOADed into "
           f"the server only, and checked in /proc/PID/maps. Whole run: {a.elapsed} s.", ""]

    # slapd
    # slapd: one table per directory (rows before directories had the small one only)
    sv = collect(rows, "slapd", lambda d: (d["alloc"], d.get("directory", "small")))
    slapd_med = {}   # (alloc, directory, metric) -> median
    dirs = [x for x in DIRS if any(k[1] == x for k, _ in sv)]
    for dr in dirs:
        ent = next(d["entries"] for d in rows if d.get("server") == "slapd"
                   and d.get("directory", "small") == dr)
        trows = []
        for al in order({k[0] for k, _ in sv if k[1] == dr}):
            cells = []
            for m, _, _ in SLAPD_COLS:
                c, med = cell(sv, (al, dr), ("glibc", dr), m, 1 / 1024 if m.endswith("_kb") else 1.0)
                cells.append(c)
                slapd_med[(al, dr, m)] = med
            trows.append((LABELS.get(al, al), cells))
        md.append(common.table(
            f"slapd 2.5 (back-mdb), {ent:,} inetOrgPerson entries, descriptions {DIRS[dr]}",
            [c[1] for c in SLAPD_COLS], trows,
            "Searches: equality on uid (indexed), one connection per client thread, every attribute "
            f"returned. The mix: one operation in four replaces a description with one of a random "
            f"length ({DIRS[dr]}), {mix_total(rows, dr)} operations in all for every allocator (its "
            "ops/s: that count over the time it took). RssAnon: the server's anonymous resident memory after one "
            "subtree search returned every entry, at the end of the mix, and after 1 s more with "
            "no requests (back-mdb's mapped database file is not in it)."))

    # squid
    qv = collect(rows, "squid", lambda d: (d["alloc"], d["variant"]))
    squid_med = {}
    if qv:
        trows = []
        keys = {k for k, _ in qv}
        for var in VARIANTS:
            for al in order({k[0] for k in keys if k[1] == var}):
                cells = []
                for m, _, _ in SQUID_COLS:
                    c, med = cell(qv, (al, var), ("glibc", var), m)
                    cells.append(c)
                    squid_med[(al, var, m)] = med
                trows.append((f"{LABELS.get(al, al)}, {VARIANTS[var]}", cells))
        md.append(common.table(
            f"Squid 5.7, memory cache only, {obj:,} objects of 200..499 bytes",
            [c[1] for c in SQUID_COLS], trows,
            "Bytes per object: the server's resident memory growth over the fill, divided by the "
            "objects. CPU: squid's utime+stime (/proc/PID/stat, clock ticks) over the fill (every "
            "request a miss, fetched from the C origin server) and over the second pass (every request "
            "a memory hit, checked in X-Cache), per request. Client: 4 keep-alive connections."))

    # minor page faults and AnonHugePages of each server, read at the end of its load
    fh = defaultdict(lambda: ([], []))
    for d in rows:
        if d.get("minflt") is None or d.get("error"):
            continue
        srv = d.get("server")
        where = (f"{d.get('directory', 'small')} directory" if srv == "slapd"
                 else VARIANTS.get(d.get("variant"), d.get("variant")))
        f, h = fh[(srv, where, d.get("alloc"))]
        f.append(d["minflt"])
        h.append(common.kb(d.get("anon_huge_kb")))
    if fh:
        trows = [(f"{LABELS.get(al, al)}: {srv}, {where}", [common.faults_huge(*fh[(srv, where, al)])])
                 for srv, where, al in sorted(fh, key=lambda k: (k[0], k[1], order(
                     {x[2] for x in fh}).index(k[2])))]
        md.append(common.table(
            "Minor page faults / AnonHugePages of the server", ["minor faults / AnonHugePages"], trows,
            "Median over the repetitions; both read from /proc/PID/stat and /proc/PID/smaps_rollup at "
            "the end of the load (slapd: after the mix; Squid: after the second pass), while the server "
            "still holds its data: faults since it started, and how much of its anonymous memory "
            "transparent huge pages back then."))

    # chart: every figure relative to glibc, turned so that higher is better
    crows, cols = [], ([c[1] for c in SLAPD_COLS if c[0] != "scan_s"] +
                       [f"squid {c[1]}" for c in SQUID_COLS if c[0] != "anon_bytes_per_object"])
    for k in order({k[0] for k, _ in sv} | {k[0] for k, _ in qv}):
        vals = []
        for m, _, sign in SLAPD_COLS:
            if m == "scan_s":
                continue
            v, r = slapd_med.get((k, "small", m)), slapd_med.get(("glibc", "small", m))
            vals.append((v / r if sign > 0 else r / v) if v and r else None)
        for m, _, sign in SQUID_COLS:
            if m == "anon_bytes_per_object":
                continue
            v, r = squid_med.get((k, "off", m)), squid_med.get(("glibc", "off", m))
            vals.append(r / v if v and r else None)
        crows.append((LABELS.get(k, k), vals))
    if crows and common.chart(os.path.join(a.out, "servers.png"),
                              "slapd and Squid (pools off) relative to glibc malloc, higher is better "
                              "(throughput / glibc's; glibc's memory or CPU / this one's)",
                              "relative to glibc (1 = glibc)", cols, crows):
        md.append("![servers](servers.png)\n")

    # targets
    lines = ["### Targets (issue: the reference servers)", "", "| target | measured | met |", "|---|---|---|"]

    def row(t, meas, ok):
        lines.append(f"| {t} | {meas} | {'yes' if ok else 'NO'} |")
    if any(k[0] == "mtpool" for k, _ in sv) or any(k[0] == "mtpool" for k, _ in qv):
        for dr, m, lab, sign in [(dr, *c) for dr in dirs for c in SLAPD_COLS]:
            if m in ("scan_s", "rss_anon_idle_kb"):  # no target (the idle figure is a note)
                continue
            me = slapd_med.get(("mtpool", dr, m))
            sc = 1 / 1024 if m.endswith("_kb") else 1
            g = slapd_med.get(("glibc", dr, m))
            if m.startswith("rss_anon") and me is not None and g:
                row(f"slapd, {dr} entries, {lab}: at most 1.05x glibc's",
                    f"mtpool {common.fmt(me * sc)}, glibc {common.fmt(g * sc)} ({me / g:.2f}x)",
                    me <= 1.05 * g)
            peers = {p: slapd_med.get((p, dr, m)) for p in PEERS if slapd_med.get((p, dr, m))}
            if me is None or not peers or (m.startswith("rss_anon") and set(peers) == {"glibc"}):
                continue
            best = (max if sign > 0 else min)(peers, key=peers.get)
            row(f"slapd, {dr} entries, {lab}: "
                f"{'at least the best' if sign > 0 else 'no more than the smallest'} peer's",
                f"mtpool {common.fmt(me * sc)}, {LABELS[best]} {common.fmt(peers[best] * sc)} "
                f"({me / peers[best]:.2f}x)", me >= peers[best] if sign > 0 else me <= peers[best])
        for m, lab, _ in SQUID_COLS:
            if m == "anon_bytes_per_object":
                continue
            me = squid_med.get(("mtpool", "off", m))
            if me is None:
                continue
            if m == "bytes_per_object":
                g = squid_med.get(("glibc", "off", m))
                if g:
                    row(f"Squid (pools off) {lab}: no more than glibc's",
                        f"mtpool {me:.0f}, glibc {g:.0f} ({me / g:.2f}x)", me <= g)
                continue
            peers = {p: squid_med.get((p, "off", m)) for p in PEERS if squid_med.get((p, "off", m))}
            if peers:
                best = min(peers, key=peers.get)
                row(f"Squid (pools off) {lab}: no more than the fastest peer's",
                    f"mtpool {me:.1f}, {LABELS[best]} {peers[best]:.1f} ({me / peers[best]:.2f}x)",
                    me <= peers[best])
    else:
        lines.append("| every target | mtpool has no figures (libmtpool-malloc.so missing, or its "
                     "servers failed: see above) | – |")
    md.append("\n".join(lines) + "\n")

    text = "\n".join(md)
    with open(os.path.join(a.out, "servers.md"), "w") as f:
        f.write(text)
    print(text)

    # check: every listed allocator measured everywhere, every server mapped and stopped
    if a.check.strip():
        bad = []
        for d in rows:
            if not d.get("mapped"):
                bad.append(f"{d.get('server')}/{d.get('alloc')}: allocator not mapped")
            if not d.get("stopped"):
                bad.append(f"{d.get('server')}/{d.get('alloc')}: server not stopped")
            if d.get("error"):
                bad.append(f"{d.get('server')}/{d.get('alloc')}: {d['error']}")
        ran = {d.get("server") for d in rows}  # servers not asked for (SRV_SERVERS) have no rows
        for al in a.check.split():
            for dr in dirs or (["small"] if "slapd" in ran else []):
                for m, lab, _ in SLAPD_COLS:
                    if not sv.get(((al, dr), m)):
                        bad.append(f"slapd/{al}, {dr} directory: no figure for {lab}")
            variants = {k[1] for k, _ in qv if k[0] == al} or ({"off"} if "squid" in ran else set())
            for var in variants:
                for m, lab, _ in SQUID_COLS:
                    if not qv.get(((al, var), m)):
                        bad.append(f"squid/{al}/{var}: no figure for {lab}")
        if bad:
            print("servers check FAILED:\n  " + "\n  ".join(bad), file=sys.stderr)
            return 1
        print(f"servers check: every figure measured for {a.check.strip()}; every server stopped",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
