#!/usr/bin/env python3
"""Runs profile_sites under the heap profiler and reads its profiles back with google-pprof.

  check_profile.py PPROF EXE MODE WORKDIR [VAR=VALUE...]

MODE sites: every site's in-use and allocated bytes as pprof estimates them (--inuse_space,
--alloc_space, --show_bytes; a site's cumulative bytes) within 15% of the truth the program
prints, and under 2 MiB in use for a site that freed everything; the same for the dump the
program made at mid-run (mtp_profile_dump); with MTPOOL_SHOW_LEAKS, the leak list is sorted,
largest first, and adds up to the bytes the program keeps. MODE fork: each child wrote its own
file (%p) and the first child's site is there, not in the parent's. MODE off: no profile is
written. MODE every (MTPOOL_PROFILE_RATE=1: every allocation sampled): the site's bytes exact. Exit 0 when all hold; 77 (skipped) when google-pprof is not installed."""
import glob
import os
import re
import shutil
import subprocess
import sys

RATE = 65536
TOLERANCE = 0.15
EXACT = 1e-6  # pprof's floating-point sums
FREED_MAX = 2 << 20


def fail(msg):
    print("check_profile: FAIL: " + msg)
    sys.exit(1)


def pprof_sites(pprof, exe, profile, kind):
    """{function: cumulative bytes} from pprof --text."""
    out = subprocess.run([pprof, "--text", "--show_bytes", "--nodecount=1000", "--" + kind, exe, profile],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=True).stdout
    sites = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 6 and f[0].isdigit() and f[3].isdigit():
            name = re.sub(r"\.(constprop|isra|part|cold)\.\d+$", "", " ".join(f[5:]))
            sites[name] = sites.get(name, 0) + int(f[3])
    if not sites:
        fail("pprof read nothing from %s:\n%s" % (profile, out))
    return sites


def check_sites(pprof, exe, profile, truth, tolerance=TOLERANCE):
    inuse = pprof_sites(pprof, exe, profile, "inuse_space")
    alloc = pprof_sites(pprof, exe, profile, "alloc_space")
    for name, (live, total) in truth.items():
        for kind, want, got in (("in use", live, inuse.get(name, 0)), ("allocated", total, alloc.get(name, 0))):
            if kind == "allocated" and want == 0:
                continue  # a site whose in-use alone is known
            if want == 0:
                ok = got < FREED_MAX
                print("  %-18s %-9s truth %11d  pprof %11d  (under 2 MiB) %s" % (name, kind, want, got, "ok" if ok else "BAD"))
            else:
                err = abs(got - want) / want
                ok = err <= tolerance
                print("  %-18s %-9s truth %11d  pprof %11d  %+6.1f%% %s" % (name, kind, want, got, 100.0 * (got - want) / want, "ok" if ok else "BAD"))
            if not ok:
                fail("%s: %s %s bytes off the truth" % (profile, name, kind))


def run(exe, mode, work, extra_env):
    env = dict(os.environ)
    env["MTPOOL_PROFILE"] = os.path.join(work, "prof.%p")
    env["MTPOOL_PROFILE_RATE"] = str(RATE)
    env.update(extra_env)
    if mode == "off":
        del env["MTPOOL_PROFILE"]
    p = subprocess.run([exe, mode, work], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=600)
    if p.returncode != 0:
        fail("%s %s exited %d:\n%s%s" % (exe, mode, p.returncode, p.stdout, p.stderr))
    return p.stdout, p.stderr


def main():
    if len(sys.argv) < 5:
        fail(__doc__)
    pprof, exe, mode, work = sys.argv[1:5]
    extra = dict(a.split("=", 1) for a in sys.argv[5:])
    if shutil.which(pprof) is None:
        print("check_profile: %s is not installed (Debian: google-perftools): skipped" % pprof)
        sys.exit(77)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    out, err = run(exe, mode, work, extra)
    truth = {}
    for m in re.finditer(r"^site (\S+) live (\d+) alloc (\d+)$", out, re.M):
        truth[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    files = sorted(glob.glob(os.path.join(work, "prof.*")))
    if mode == "off":
        if os.listdir(work):
            fail("profiling off, yet files were written: %s" % os.listdir(work))
        print("check_profile: off: no file written, mtp_profile_dump fails with ENOTSUP")
        return
    if mode == "sites":
        if len(files) != 1:
            fail("one profile expected at exit, found %s" % files)
        print("profile at exit: " + files[0])
        check_sites(pprof, exe, files[0], truth)
        mid = re.search(r"^dump (\S+)$", out, re.M).group(1)
        print("profile from mtp_profile_dump: " + mid)
        check_sites(pprof, exe, mid, truth)
        if extra.get("MTPOOL_SHOW_LEAKS") == "1":
            sizes = [int(x) for x in re.findall(r"^mtpool: leaks: about (\d+) bytes in \d+ blocks", err, re.M)]
            if not sizes:
                fail("no leak list on stderr:\n" + err)
            if sizes != sorted(sizes, reverse=True):
                fail("leak list not largest first: %s" % sizes)
            kept = sum(live for live, _ in truth.values())
            total = int(re.search(r"still holding memory at exit \(about (\d+) bytes", err).group(1))
            print("leak list: %d stacks, about %d bytes in all; the program keeps %d" % (len(sizes), total, kept))
            if abs(total - kept) > TOLERANCE * kept:
                fail("leak total %d, the program keeps %d" % (total, kept))
        return
    if mode == "fork":
        child = re.search(r"^child (\d+)$", out, re.M).group(1)
        parent = re.search(r"^parent (\d+)$", out, re.M).group(1)
        names = {os.path.basename(f) for f in files}
        if len(files) != 21 or "prof." + child not in names or "prof." + parent not in names:
            fail("20 children's files and the parent's expected, found %s" % sorted(names))
        print("child's profile: prof." + child)
        check_sites(pprof, exe, os.path.join(work, "prof." + child), truth)
        inuse = pprof_sites(pprof, exe, os.path.join(work, "prof." + parent), "alloc_space")
        if inuse.get("site_child", 0) != 0:
            fail("the parent's profile holds the child's site")
        if inuse.get("site_churn", 0) == 0:
            fail("the parent's profile lacks its churning thread's site")
        print("parent's profile: prof.%s, without the child's site" % parent)
        return
    if mode == "every":
        if len(files) != 1:
            fail("one profile expected at exit, found %s" % files)
        if extra.get("MTPOOL_PROFILE_RATE") != "1":
            fail("mode every needs MTPOOL_PROFILE_RATE=1")
        print("profile at exit: " + files[0])
        check_sites(pprof, exe, files[0], truth, tolerance=EXACT)
        return
    fail("unknown mode " + mode)


main()
