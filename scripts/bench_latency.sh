#!/usr/bin/env bash
# Tail latency of single malloc and free calls: the workloads of bench/latency/latency.c (thread
# churn, producer/consumer hand-off, thread per task, a server's worker pool), each timed call by
# call inside the process, on every allocator preloaded into the same driver: glibc (none), mtpool
# (libmtpool-malloc.so of this tree, Release), Debian's jemalloc, tcmalloc and mimalloc, and the
# newest releases scripts/build_peers.sh built (mimalloc-2.4.1, mimalloc-3.4.3, snmalloc-0.7.5).
# Described in docs/benchmarks.md, "Latency of single calls".
#
#   bash scripts/bench_latency.sh           full run: every workload, 5 runs per allocator,
#                                           every allocator; build-latency/results/latency.{md,jsonl}
#   bash scripts/bench_latency.sh --quick   a check that it works: scale 0.2, glibc and mtpool,
#                                           1 run (build-latency/quick)
#   bash scripts/bench_latency.sh --publish the same, published: bench/results/latency.{md,jsonl}
# Options:
#   --reps N               runs per workload and allocator (the outermost loop; allocators
#                          interleaved inside); 5
#   --tests "churn server" a subset of the workloads (latency --list)
#   --allocs "glibc mtpool ..."  a subset of the allocators
#   --peer NAME=/path/lib.so     one more malloc to preload (any number; NAME begins with its
#                          family, e.g. mimalloc-dev=...)
#   --threads N            threads per workload (latency.c says what N means in each); default
#                          each workload's own, from the CPUs online (always more threads than CPUs)
#   --scale X              work per process times X; 1
#   --timeout S            seconds a process may run (it is then noted and counted as failed); 120
#   --out DIR              where latency.md and latency.jsonl go (default: under the build
#                          directory, so that a run never changes the committed results)
#   --no-build --driver PATH [--mtpool-lib PATH]   install and build nothing: use a driver built
#                          before (gcc -O2 -pthread bench/latency/latency.c -ldl) and the library
# Environment: MTPOOL_LIB_<alloc>=/path gives an allocator's library (malloc_lib in
# bench/tools/common.sh), MTPOOL_LATENCY_BUILD the build directory (build-latency, shared with
# scripts/bench_stress.sh: the same driver and library).
# Exits non-zero when a process fails or times out, computes a checksum different from glibc's,
# or ran on another malloc than it was given.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${MTPOOL_LATENCY_BUILD:-$ROOT/build-latency}
# shellcheck disable=SC1091
. "$ROOT/bench/tools/common.sh"

LATENCY_PACKAGES="gcc make cmake python3 libmimalloc2.0 libjemalloc2 libtcmalloc-minimal4"

peers="" quick=0 build=1 driver="" reps=5 tests="" allocs="" threads=0 scale=1 timeout=120 out=""
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2; exit 2; }
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || case $1 in --quick | --no-build | --publish) ;; *) usage ;; esac
  case $1 in
    --quick) quick=1 ;;
    --no-build) build=0 ;;
    --driver) driver=$2; shift ;;
    --mtpool-lib) export MTPOOL_LIB_mtpool=$2; shift ;;
    --reps) reps=$2; shift ;;
    --tests) tests=$2; shift ;;
    --allocs) allocs=$2; shift ;;
    --peer) add_peer "$2"; peers="$peers ${2%%=*}"; shift ;;
    --threads) threads=$2; shift ;;
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
  [ "$reps" = 5 ] && reps=1
  [ "$scale" = 1 ] && scale=0.2
  : "${allocs:=glibc mtpool}"
  : "${out:=$BUILD/quick}"
fi
: "${allocs:=glibc mtpool jemalloc tcmalloc mimalloc $(peer_names)}"
for p in $peers; do case " $allocs " in *" $p "*) ;; *) allocs="$allocs $p" ;; esac; done
: "${out:=$BUILD/results}"

t_start=$(date +%s)
if [ $build = 1 ]; then
  BENCH_PACKAGES=$LATENCY_PACKAGES bench_install_deps
  build_dropin "$BUILD" latency
  export MTPOOL_LIB_mtpool=${MTPOOL_LIB_mtpool:-${MTPOOL_MALLOC_LIB:-$BUILD/malloc/libmtpool-malloc.so}}
  build_latency_driver "$BUILD"
  driver=$BUILD/latency
elif [ -z "$driver" ]; then
  note "--no-build needs --driver PATH"
  exit 2
fi
[ -x "$driver" ] || { note "driver $driver not found"; exit 1; }
: "${tests:=$("$driver" --list | tr '\n' ' ')}"

resolve_allocs

mkdir -p "$out"
raw=$out/latency.jsonl
rm -f "$raw"
note "tests: $tests; reps: $reps; scale: $scale; threads: $threads (0: each workload's own); allocators:$run_allocs; output $out"
rc=0
for rep in $(seq 1 "$reps"); do
  for t in $tests; do
    for a in $run_allocs; do
      run_preloaded "$raw" "$timeout" "$a" "\"test\": \"$t\", \"scale\": $scale" \
        "$driver" --test "$t" --threads "$threads" --scale "$scale" --timing on --alloc "$a" || rc=1
    done
  done
  note "run $rep/$reps done ($(( $(date +%s) - t_start )) s)"
done
elapsed=$(( $(date +%s) - t_start ))
mt_lib=${LIB_mtpool:-}
python3 "$ROOT/bench/latency/report.py" latency --in "$raw" --out "$out" --elapsed "$elapsed" \
  --machine "$(machine_line)" --skipped "$skipped" --reps "$reps" --scale "$scale" \
  --versions "$(malloc_versions "$run_allocs")" \
  --mtpool-lib "${mt_lib:+$mt_lib ($(sha256sum "$mt_lib" | cut -c1-12))}" || rc=1
note "done in ${elapsed} s"
results_note "$out/latency.md"
exit $rc
