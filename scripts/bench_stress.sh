#!/usr/bin/env bash
# Schedule stress: the hand-off shapes of bench/latency/latency.c run many times each, idle and
# beside a CPU hog, on every allocator preloaded into the same driver, reporting for each shape
# the WORST run's peak RSS (VmHWM) and the most bytes the program held at once, over glibc's
# median. A race between the threads that allocate and those that free decides how much memory a
# run holds, so one good run proves nothing: the target (issue 55) is that every run of mtpool
# stays within 2x glibc's median peak RSS. Described in docs/benchmarks.md, "Schedule stress".
#
#   thread_task  thread per task: a main thread starts 3,000 detached threads in a tight loop,
#                each allocates 200 mixed-size blocks, writes them and exits (a pthread key
#                destructor frees and allocates once more); 2 long-lived threads free each
#                task's blocks in task order, polling
#   prodcons     producer/consumer queues, 2 producers and 2 consumers per CPU
#   server       a pool of 4 workers per CPU passing blocks among themselves (a shared cache
#                whose evictions free other workers' blocks, responses freed by another worker)
# Loads: idle (nothing else started), hog (one busy loop per CPU, started before the runs of
# each round and stopped by PID after them, so that every allocator of a round shares it).
#
#   bash scripts/bench_stress.sh           full run: 10 runs per shape, load and allocator,
#                                          every allocator; build-latency/stress/stress.{md,jsonl}
#   bash scripts/bench_stress.sh --quick   the test stage's run (scripts/test.sh, stage stress):
#                                          glibc and mtpool only, and fails when any mtpool run's
#                                          peak RSS is above 5x glibc's median for its shape and
#                                          load (build-latency/stress-quick)
#   bash scripts/bench_stress.sh --publish the same, published: bench/results/stress.{md,jsonl}
# Options:
#   --runs N               runs per shape, load and allocator (rounds, the outermost loop;
#                          allocators interleaved inside); 10
#   --tests "thread_task server"  a subset of the shapes
#   --loads "idle hog"     the loads
#   --allocs "glibc mtpool ..."  a subset of the allocators
#   --peer NAME=/path/lib.so     one more malloc to preload (any number)
#   --threads N            threads per shape (latency.c); default each shape's own
#   --scale X              work per process times X; 1 (the thread-per-task race needs the
#                          3,000 threads of scale 1 to show)
#   --bound X              fail when two runs of an allocator of --bound-allocs, or one above 2X,
#                          have a peak RSS above X times glibc's median for their shape and load
#                          (default: none; --quick: 5; docs/reliability.md, "The stress stage",
#                          says why)
#   --bound-allocs "mtpool"      the allocators --bound applies to; mtpool
#   --timeout S            seconds a process may run (then noted and counted as failed); 120
#   --out DIR              where stress.md and stress.jsonl go (default: under the build directory)
#   --no-build --driver PATH [--mtpool-lib PATH]   install and build nothing (as bench_latency.sh)
# Environment: MTPOOL_LIB_<alloc>, MTPOOL_LATENCY_BUILD (the build directory, build-latency,
# shared with scripts/bench_latency.sh).
# Exits non-zero when a process fails or times out, computes a checksum different from glibc's,
# ran on another malloc than it was given, or (with --bound) a bounded allocator's runs are above
# the bound as --bound says.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${MTPOOL_LATENCY_BUILD:-$ROOT/build-latency}
# shellcheck disable=SC1091
. "$ROOT/bench/tools/common.sh"

STRESS_PACKAGES="gcc make cmake python3 libmimalloc2.0 libjemalloc2 libtcmalloc-minimal4"

peers="" quick=0 build=1 driver="" runs=10 tests="thread_task prodcons server" loads="idle hog"
allocs="" threads=0 scale=1 bound="" bound_allocs=mtpool timeout=120 out=""
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2; exit 2; }
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || case $1 in --quick | --no-build | --publish) ;; *) usage ;; esac
  case $1 in
    --quick) quick=1 ;;
    --no-build) build=0 ;;
    --driver) driver=$2; shift ;;
    --mtpool-lib) export MTPOOL_LIB_mtpool=$2; shift ;;
    --runs) runs=$2; shift ;;
    --tests) tests=$2; shift ;;
    --loads) loads=$2; shift ;;
    --allocs) allocs=$2; shift ;;
    --peer) add_peer "$2"; peers="$peers ${2%%=*}"; shift ;;
    --threads) threads=$2; shift ;;
    --scale) scale=$2; shift ;;
    --bound) bound=$2; shift ;;
    --bound-allocs) bound_allocs=$2; shift ;;
    --timeout) timeout=$2; shift ;;
    --out) out=$2; shift ;;
    --publish) out=$PUBLISHED ;;
    *) usage ;;
  esac
  shift
done
if [ $quick = 1 ]; then
  # the flags given still win over the quick sizes (they were parsed above, defaults here)
  : "${bound:=5}"
  : "${allocs:=glibc mtpool}"
  : "${out:=$BUILD/stress-quick}"
fi
: "${allocs:=glibc mtpool jemalloc tcmalloc mimalloc $(peer_names)}"
for p in $peers; do case " $allocs " in *" $p "*) ;; *) allocs="$allocs $p" ;; esac; done
: "${out:=$BUILD/stress}"
case " $allocs " in *" glibc "*) ;; *) note "glibc must be among the allocators: every ratio is to its median"; exit 2 ;; esac

t_start=$(date +%s)
if [ $build = 1 ]; then
  BENCH_PACKAGES=$STRESS_PACKAGES bench_install_deps
  build_dropin "$BUILD" latency
  export MTPOOL_LIB_mtpool=${MTPOOL_LIB_mtpool:-${MTPOOL_MALLOC_LIB:-$BUILD/malloc/libmtpool-malloc.so}}
  build_latency_driver "$BUILD"
  driver=$BUILD/latency
elif [ -z "$driver" ]; then
  note "--no-build needs --driver PATH"
  exit 2
fi
[ -x "$driver" ] || { note "driver $driver not found"; exit 1; }

resolve_allocs

trap stop_hogs EXIT
trap 'note "interrupted"; exit 130' INT TERM
cpus=$(nproc)
n_allocs=$(echo "$run_allocs" | wc -w)
n_tests=$(echo "$tests" | wc -w)
# A hog ends by itself after every process of its round could have run to its timeout.
hog_s=$(( (timeout + 5) * n_allocs * n_tests + 60 ))

# The bounds are argued for a machine that runs nothing else (docs/reliability.md, "The stress
# stage"): other jobs' load, bursty and far above one busy loop per CPU, can tip the thread-per-task
# race into a runaway on any allocator. Say so when that is the case.
load1=$(cut -d' ' -f1 /proc/loadavg)
if awk -v l="$load1" -v c="$cpus" 'BEGIN { exit !(l > 2 * c) }'; then
  note "NOTICE: load average $load1 on $cpus CPUs before the runs: other jobs are running, and the thread_task runs of every allocator may run away (see the threads-alive and live columns)"
fi

mkdir -p "$out"
raw=$out/stress.jsonl
rm -f "$raw"
note "shapes: $tests; loads: $loads; runs: $runs; scale: $scale; allocators:$run_allocs; output $out"
rc=0
for run in $(seq 1 "$runs"); do
  for load in $loads; do
    if [ "$load" = hog ]; then
      start_hogs "$cpus" "$driver" --spin "$hog_s"
    elif [ "$load" != idle ]; then
      note "unknown load $load (idle, hog)"
      exit 2
    fi
    for t in $tests; do
      for a in $run_allocs; do
        run_preloaded "$raw" "$timeout" "$a" "\"test\": \"$t\", \"scale\": $scale, \"load\": \"$load\"" \
          "$driver" --test "$t" --threads "$threads" --scale "$scale" --timing off --alloc "$a" \
          --load "$load" || rc=1
      done
    done
    stop_hogs
  done
  note "run $run/$runs done ($(( $(date +%s) - t_start )) s)"
done
elapsed=$(( $(date +%s) - t_start ))
mt_lib=${LIB_mtpool:-}
python3 "$ROOT/bench/latency/report.py" stress --in "$raw" --out "$out" --elapsed "$elapsed" \
  --machine "$(machine_line)" --skipped "$skipped" --reps "$runs" --scale "$scale" \
  --versions "$(malloc_versions "$run_allocs")" --bound "$bound" --bound-allocs "$bound_allocs" \
  --mtpool-lib "${mt_lib:+$mt_lib ($(sha256sum "$mt_lib" | cut -c1-12))}" || rc=1
note "done in ${elapsed} s"
results_note "$out/stress.md"
exit $rc
