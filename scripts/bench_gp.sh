#!/usr/bin/env bash
# General-purpose allocation workloads (bench/gp/gp_bench.c) on every allocator, each preloaded
# into the same driver: glibc (none), mtpool (libmtpool-malloc.so), mimalloc, jemalloc, tcmalloc
# and the tbbmalloc proxy. Described in docs/benchmarks.md, "General-purpose workloads".
#
#   bash scripts/bench_gp.sh           full run: every workload at 1, 2, 4 and 8 threads, 3
#                                      repetitions, every allocator; build-gp/results/gp.{md,jsonl,png}
#   bash scripts/bench_gp.sh --quick   CI's smoke run: every workload at scale 0.05, 1 and 2
#                                      threads, glibc and mtpool, checksums checked (build-gp/quick)
# Options:
#   --threads "1 2 4 8"    thread counts (e.g. "1 2 4 8 16" on 16 cores)
#   --reps N               repetitions (outermost loop; allocators interleaved inside); 3
#   --tests "larson tree"  a subset of the workloads (gp_bench --list)
#   --allocs "glibc mtpool ..."  a subset of the allocators
#   --peer NAME=/path/lib.so     one more malloc to preload (any number; NAME begins with its
#                          family, e.g. mimalloc-dev=...); the newest releases that
#                          scripts/build_peers.sh built are run without it (bench/tools/common.sh)
#   --scale X              work per process times X (0.25: a quarter of the time)
#   --timeout S            seconds a process may run (a slower allocator's cell reads "> S s" and
#                          it is not run again at that test and as many threads or more); 30
#   --out DIR              where gp.md, gp.jsonl and gp.png go (build-gp/results, beside the build)
#   --publish              into the committed bench/results/ (--out bench/results): a run the
#                          project publishes, committed with the README's tables
#   --no-build --driver PATH [--mtpool-lib PATH]   install and build nothing: use a driver built
#                          before (gcc -O2 -pthread bench/gp/gp_bench.c -ldl) and the given library
# Environment: MTPOOL_LIB_<alloc>=/path gives an allocator's library (MTPOOL_MALLOC_LIB too for
# mtpool; see malloc_lib in bench/tools/common.sh), MTPOOL_GP_BUILD the build directory (build-gp).
# Without --no-build it installs its Debian packages when run as root and builds the Release
# libmtpool-malloc.so of this tree; with it, it needs only bash, coreutils and python3.
# Exits non-zero when an allocator's checksum differs from glibc's, a process fails, or the malloc
# a process ran on is not the one it was given.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${MTPOOL_GP_BUILD:-$ROOT/build-gp}
# shellcheck disable=SC1091
. "$ROOT/bench/tools/common.sh"

GP_PACKAGES="gcc make cmake python3 gnuplot-nox libmimalloc2.0 libjemalloc2 libtcmalloc-minimal4
  libtbbmalloc2"

peers="" quick=0 build=1 driver="" threads="1 2 4 8" reps=3 tests="" allocs="" scale=1 timeout=30 out=""
usage() { sed -n '2,31p' "$0" >&2; exit 2; }
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || case $1 in --quick | --no-build | --publish) ;; *) usage ;; esac
  case $1 in
    --quick) quick=1 ;;
    --no-build) build=0 ;;
    --driver) driver=$2; shift ;;
    --mtpool-lib) export MTPOOL_LIB_mtpool=$2; shift ;;
    --threads) threads=$2; shift ;;
    --reps) reps=$2; shift ;;
    --tests) tests=$2; shift ;;
    --allocs) allocs=$2; shift ;;
    --peer) add_peer "$2"; peers="$peers ${2%%=*}"; shift ;;
    --scale) scale=$2; shift ;;
    --timeout) timeout=$2; shift ;;
    --out) out=$2; shift ;;
    --publish) out=$PUBLISHED ;;
    *) usage ;;
  esac
  shift
done
if [ $quick = 1 ]; then
  # the flags given still win over the quick sizes (they were parsed above, defaults here)
  [ "$threads" = "1 2 4 8" ] && threads="1 2"
  [ "$reps" = 3 ] && reps=1
  [ "$scale" = 1 ] && scale=0.05
  [ "$timeout" = 30 ] && timeout=20
  : "${allocs:=glibc mtpool}"
  : "${out:=$BUILD/quick}"
fi
: "${allocs:=glibc mtpool mimalloc jemalloc tcmalloc tbbmalloc $(peer_names)}"
for p in $peers; do case " $allocs " in *" $p "*) ;; *) allocs="$allocs $p" ;; esac; done
: "${out:=$BUILD/results}"

t_start=$(date +%s)
if [ $build = 1 ]; then
  BENCH_PACKAGES=$GP_PACKAGES bench_install_deps
  # The project's drop-in malloc, Release, in a build tree of its own.
  build_dropin "$BUILD" gp
  # The driver: plain C, warnings as errors, no allocator linked in.
  driver=$BUILD/gp_bench
  # this tree's library, unless one was given
  export MTPOOL_LIB_mtpool=${MTPOOL_LIB_mtpool:-${MTPOOL_MALLOC_LIB:-$BUILD/malloc/libmtpool-malloc.so}}
  gcc -O2 -std=c11 -Wall -Wextra -Wshadow -Wconversion -Werror -pthread \
    -o "$driver" "$ROOT/bench/gp/gp_bench.c" -ldl
elif [ -z "$driver" ]; then
  note "--no-build needs --driver PATH"
  exit 2
fi
[ -x "$driver" ] || { note "driver $driver not found"; exit 1; }
: "${tests:=$("$driver" --list | tr '\n' ' ')}"

resolve_allocs

mkdir -p "$out"
raw=$out/gp.jsonl
rm -f "$raw"
note "tests: $tests; threads: $threads; reps: $reps; scale: $scale; allocators:$run_allocs; output $out"
rc=0
declare -A slow=() # "alloc/test" -> the fewest threads at which it timed out
for rep in $(seq 1 "$reps"); do
  for t in $tests; do
    for n in $threads; do
      for a in $run_allocs; do
        if [ -n "${slow[$a/$t]:-}" ] && [ "$n" -ge "${slow[$a/$t]}" ]; then
          echo "{\"test\": \"$t\", \"threads\": $n, \"scale\": $scale, \"alloc\": \"$a\", \"timeout_s\": $timeout, \"skipped\": true}" >>"$raw"
          continue
        fi
        lib_var="LIB_$(lib_var_name "$a")"
        prc=0
        line=$(LD_PRELOAD=${!lib_var} timeout "$timeout" "$driver" --test "$t" --threads "$n" \
          --scale "$scale" --alloc "$a" 2>"$out/gp.err") || prc=$?
        if [ $prc = 0 ] && [ -n "$line" ]; then
          echo "$line" >>"$raw"
        elif [ $prc = 124 ]; then
          note "NOTICE: $a timed out after ${timeout} s ($t, $n threads); not run again at $n threads or more"
          slow[$a/$t]=$n
          echo "{\"test\": \"$t\", \"threads\": $n, \"scale\": $scale, \"alloc\": \"$a\", \"timeout_s\": $timeout}" >>"$raw"
        else
          note "FAILED: $a ($t, $n threads, exit $prc): $(head -c 300 "$out/gp.err")"
          echo "{\"test\": \"$t\", \"threads\": $n, \"scale\": $scale, \"alloc\": \"$a\", \"failed\": $prc}" >>"$raw"
          rc=1
        fi
      done
    done
  done
  note "repetition $rep/$reps done ($(( $(date +%s) - t_start )) s)"
done
rm -f "$out/gp.err"
elapsed=$(( $(date +%s) - t_start ))
mt_lib=${LIB_mtpool:-}
python3 "$ROOT/bench/gp/report.py" --in "$raw" --out "$out" --elapsed "$elapsed" \
  --machine "$(machine_line)" --skipped "$skipped" --reps "$reps" --scale "$scale" --timeout "$timeout" \
  --versions "$(malloc_versions "$run_allocs")" \
  --mtpool-lib "${mt_lib:+$mt_lib ($(sha256sum "$mt_lib" | cut -c1-12))}" || rc=1
note "done in ${elapsed} s: $out/gp.md"
results_note "$out"
exit $rc
