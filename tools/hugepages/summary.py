#!/usr/bin/env python3
"""Medians per workload and MTPOOL_HUGEPAGES setting from tools/hugepages/measure.sh's JSON lines."""
import json
import statistics
import sys
from collections import defaultdict

rows = defaultdict(list)
order = []
for line in open(sys.argv[1]):
    line = line.strip()
    if not line:
        continue
    d = json.loads(line)
    key = (d["tag"], d["mode"])
    if key not in rows:
        order.append(key)
    rows[key].append(d)


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def spread(xs):
    m = med(xs)
    return (max(xs) - min(xs)) / m * 100 if xs and m else 0.0


print("| workload | MTPOOL_HUGEPAGES | n | wall s (spread) | job wall s | sys s | user s | minor faults | peak RSS MiB | bytes/elem | back after delay | back after trim |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
base = {}
for tag, mode in sorted(order, key=lambda k: (k[0], k[1] != "-", k[1])):
    rs = rows[(tag, mode)]
    runs = [r["run"] for r in rs]
    wall = [r["time_wall"] for r in rs]
    job = [r.get("wall_s", r.get("build_s", 0) + r.get("free_s", 0)) for r in runs]
    sys_ = [r["time_sys"] for r in rs]
    usr = [r["time_user"] for r in rs]
    flt = [r["time_minflt"] for r in rs]
    rss = [r["time_maxrss_kb"] / 1024 for r in rs]
    bpe = [r["bytes_per_elem"] for r in runs if "bytes_per_elem" in r]
    back = [(r["rss_peak"] - r["rss_after_delay"]) / (r["rss_peak"] - r["rss_base"]) * 100 for r in runs if "rss_after_delay" in r]
    trim = [(r["rss_peak"] - r["rss_after_trim"]) / (r["rss_peak"] - r["rss_base"]) * 100 for r in runs if "rss_after_trim" in r]
    if mode == "-":
        base[tag] = med(job)
    ratio = f" ({med(job) / base[tag]:.2f}x)" if tag in base and mode != "-" else ""
    print(f"| {tag} | {'unset' if mode == '-' else mode} | {len(rs)} | {med(wall):.2f} ({spread(wall):.0f}%) | {med(job):.3f}{ratio} | "
          f"{med(sys_):.2f} | {med(usr):.2f} | {med(flt):.0f} | {med(rss):.0f} | "
          f"{(f'{med(bpe):.1f}' if bpe else '')} | {(f'{min(back):.1f}-{max(back):.1f}%' if back else '')} | "
          f"{(f'{min(trim):.1f}-{max(trim):.1f}%' if trim else '')} |")
