#!/usr/bin/env bash
# Outside test suites under the drop-in malloc: CPython's own regression suite (Debian's
# libpython3.11-testsuite, run by Debian's /usr/bin/python3) with every process on each given
# malloc through LD_PRELOAD. Not a benchmark: a suite we did not write exercises malloc, realloc,
# memalign, threads, fork, subprocesses and signals the way a real program does, and a test that
# passes on glibc must pass on mtpool too. `mtpool-checked` is mtpool in checked mode
# (MTPOOL_CHECK=1: every free validated, freed blocks quarantined): a heap error in the
# interpreter, or a false report of ours, fails its test there.
#
#   bash scripts/test_suites.sh        glibc, mtpool and mtpool-checked, the whole suite;
#                                      build-suites/results/suites.{md,jsonl}  (about 12 min each
#                                      on 2 cores)
# Options:
#   --allocs "glibc mtpool ..."   the mallocs (glibc, mtpool, mtpool-checked, and the peers that
#                                 bench/tools/common.sh's malloc_lib knows); glibc is the reference
#   --tests "test_dict ..."       a subset of the suite's tests (default: all)
#   --jobs N                      tests run at once (python3 -m test -j; default: the CPUs)
#   --timeout S                   seconds a test may run (300)
#   --out DIR                     where the report goes (build-suites/results, beside the build)
#   --publish                     into the committed bench/results/ (--out bench/results)
#   --name NAME                   its file names: NAME.md, NAME.jsonl (suites)
#   --env "VAR=VALUE ..."         set in every run (glibc's too), e.g. PYTHONMALLOC=malloc: then
#                                 every Python object comes from the malloc under test, not from
#                                 CPython's own small-object allocator
#   --mtpool-lib PATH             the drop-in to test (default: this tree's, built Release in
#                                 build-suites)
#   --report                      run nothing: write NAME.md again from NAME.jsonl
# Installs libpython3.11-testsuite when run as root; each malloc's whole log is left in
# build-suites/NAME.MALLOC.log. Exits non-zero when a test that passed on glibc failed on another
# malloc (but for KNOWN below, each with its reason), or a malloc was not the one the processes
# ran on.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${MTPOOL_SUITES_BUILD:-$ROOT/build-suites}
# shellcheck disable=SC1091
. "$ROOT/bench/tools/common.sh"
unset LD_PRELOAD

allocs="glibc mtpool mtpool-checked" tests="" jobs=$(nproc) timeout=300 out=$BUILD/results
name=suites extra="" report_only=0
usage() { sed -n '2,29p' "$0" >&2; exit 2; }
while [ $# -gt 0 ]; do
  if [ "$1" = --report ]; then report_only=1; shift; continue; fi
  if [ "$1" = --publish ]; then out=$PUBLISHED; shift; continue; fi
  [ $# -ge 2 ] || usage
  case $1 in
    --allocs) allocs=$2 ;;
    --tests) tests=$2 ;;
    --jobs) jobs=$2 ;;
    --timeout) timeout=$2 ;;
    --out) out=$2 ;;
    --name) name=$2 ;;
    --env) extra=$2 ;;
    --mtpool-lib) export MTPOOL_LIB_mtpool=$2 ;;
    *) usage ;;
  esac
  shift 2
done
case " $allocs " in *" glibc "*) ;; *) allocs="glibc $allocs" ;; esac

# Failures that are the program's own heap errors, found by a mode that checks more than glibc:
# "malloc:test" -> why (the report lists them apart; they do not fail the run).
KNOWN='{"mtpool-checked:test__xxsubinterpreters": "CPython 3.11 reads its freed interpreter state in drop_gil() when a thread of a subinterpreter exits while the interpreter is destroyed (python/cpython#104341, fixed in 3.12): a race, so it fails in some runs only; checked mode keeps a freed large block inaccessible, so the read faults (glibc and the default mode read the freed memory)"}'

PY=/usr/bin/python3
if [ $report_only = 0 ]; then # the runs; then the report
install_deps required python3 libpython3.11-testsuite cmake make gcc
[ -f /usr/lib/python3.11/test/regrtest.py ] || { note "CPython's test suite is not installed"; exit 1; }
case " $allocs " in
  *" mtpool"*)
    if [ -z "${MTPOOL_LIB_mtpool:-}" ]; then
      mkdir -p "$BUILD"
      cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMTPOOL_BUILD_TESTS=OFF \
        -DMTPOOL_BUILD_EXAMPLES=OFF >"$BUILD/configure.log" 2>&1 || { tail -30 "$BUILD/configure.log"; exit 1; }
      cmake --build "$BUILD" -j2 --target mtpool_malloc >"$BUILD/build.log" 2>&1 || { tail -30 "$BUILD/build.log"; exit 1; }
      export MTPOOL_LIB_mtpool=$BUILD/malloc/libmtpool-malloc.so
    fi ;;
esac

work=$(mktemp -d /tmp/mtpool-suites.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
machine=$(machine_line)
t_start=$(date +%s)
for a in $allocs; do
  base=${a%-checked}
  read -r -a envs <<<"$extra"
  [ "$a" != "$base" ] && envs+=(MTPOOL_CHECK=1)
  lib=$(malloc_lib "$base") || { note "NOTICE: $a not available; skipped"; continue; }
  [ -z "$lib" ] || lib=$(readlink -f "$lib") # the tests start processes in other directories
  envs+=("LD_PRELOAD=$lib")
  # The malloc the interpreter runs on, as its own maps say (the suite's workers inherit it).
  if [ -n "$lib" ]; then
    env "${envs[@]}" "$PY" -c 'import sys; sys.exit(0 if sys.argv[1] in open("/proc/self/maps").read() else 1)' \
      "$(readlink -f "$lib")" || { note "$a: $lib is not mapped in python3"; exit 1; }
  fi
  note "$a: CPython's suite, -j$jobs${lib:+, LD_PRELOAD=$lib}"
  t0=$(date +%s)
  rc=0
  # shellcheck disable=SC2086 # the test list is words
  (cd "$work" && env "${envs[@]}" "$PY" -m test -j"$jobs" --timeout "$timeout" -u none $tests) \
    >"$work/$a.log" 2>&1 || rc=$?
  note "$a: exit $rc, $(($(date +%s) - t0)) s"
  mkdir -p "$BUILD" && cp "$work/$a.log" "$BUILD/$name.$a.log" # the whole log, for a failure's details
  "$PY" - "$a" "$rc" "$(($(date +%s) - t0))" "$lib" "$work/$a.log" "$extra" "$machine" \
    "$(($(date +%s) - t_start))" "$jobs" "$timeout" "${tests:-all}" >>"$work/suites.jsonl" <<'EOF'
import json, re, sys
a, rc, secs, lib, log, env = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:7]
run = dict(zip(("machine", "seconds", "jobs", "timeout", "tests"), sys.argv[7:12]), env=env)
text = open(log, errors="replace").read()
def names(head):
    # regrtest's summary: "N tests failed:" then the names, indented, up to a blank line
    m = re.search(r"^(\d+) tests? " + head + r":\n((?:    .*\n)+)", text, re.M)
    return sorted(m.group(2).split()) if m else []
ok = re.search(r"^(\d+) tests? OK\.", text, re.M) or re.search(r"^All (\d+) tests OK\.", text, re.M)
print(json.dumps({"suite": "cpython-3.11", "alloc": a, "lib": lib, "env": env, "exit": rc, "seconds": secs,
                  "ok": int(ok.group(1)) if ok else 0, "failed": names("failed"),
                  "skipped": len(names("skipped")), "no_tests": names("run no tests"),
                  "crashed": len(re.findall(r"crashed \(Exit code", text)), "run": run}))
EOF
done
cp "$work/suites.jsonl" "$out/$name.jsonl"
fi
[ -f "$out/$name.jsonl" ] || { note "no $out/$name.jsonl to report"; exit 1; }
rc=0
"$PY" - "$out/$name.jsonl" "$KNOWN" >"$out/$name.md" <<'EOF' || rc=$?
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
known = json.loads(sys.argv[2])
head = rows[-1]["run"]  # how the run was made (every line has it; the last: the whole time)
machine, secs, jobs, timeout, tests, extra = (head[k] for k in
                                              ("machine", "seconds", "jobs", "timeout", "tests", "env"))
tests = " ".join(tests.split())  # a list written over several lines
ref = next(r for r in rows if r["alloc"] == "glibc")
print("# Outside test suites on the drop-in malloc\n")
name = sys.argv[1].rsplit("/", 1)[-1][:-len(".jsonl")]
print(f"Written by `scripts/test_suites.sh`; raw lines in `{name}.jsonl`.\n")
print(f"Machine: {machine}.\n")
print(f"CPython 3.11's regression suite (Debian's libpython3.11-testsuite, /usr/bin/python3 -m test "
      f"-j{jobs} --timeout {timeout} -u none; tests: {tests}), every process on the malloc named "
      f"through LD_PRELOAD{'; in every run ' + extra if extra else ''}; `mtpool-checked`: "
      f"MTPOOL_CHECK=1. {int(secs) // 60} min in all.\n")
print("| malloc | tests OK | failed | skipped | crashed workers | minutes | failed here, passed on glibc |")
print("|---|---|---|---|---|---|---|")
bad, seen = False, []
for r in rows:
    new = sorted(set(r["failed"]) - set(ref["failed"]))
    why = [t for t in new if f"{r['alloc']}:{t}" in known]
    seen += [(r["alloc"], t) for t in why]
    bad |= r["alloc"] != "glibc" and len(new) > len(why)
    cell = ", ".join(t + (" (known, below)" if t in why else "") for t in new) or "none"
    print(f"| {r['alloc']} | {r['ok']} | {len(r['failed'])} | {r['skipped']} | {r['crashed']} | "
          f"{int(r['seconds']) / 60:.1f} | {cell} |")
print(f"\nFailing on glibc too (the machine's setup, not the malloc): "
      f"{', '.join(ref['failed']) if ref['failed'] else 'none'}.")
for a, t in seen:
    print(f"\nKnown: `{t}` on {a}: {known[a + ':' + t]}.")
sys.exit(1 if bad else 0)
EOF
cat "$out/$name.md"
results_note "$out"
exit $rc
