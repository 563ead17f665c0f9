#!/usr/bin/env bash
# The full mtpool benchmark suite (issue 4): everything scripts/bench.sh runs, plus the Google
# Benchmark cases of every workload (seed, allocate/free pairs, producer-consumer, server churn,
# map / unordered_map) for every allocator in one binary and, for tcmalloc, jemalloc and mimalloc,
# the std::allocator cases under LD_PRELOAD; the 50,000,000 x 120 B memory-given-back workload; and
# instructions per 48-byte pair under callgrind. Writes full.md and one PNG per workload into
# $BUILD/results/ (beside the build; --out DIR elsewhere, --publish into the committed
# bench/results/); keeps the raw JSON in $BUILD/results/raw/. About 20 minutes on 2 cores; needs
# ~8 GiB free.
#
#   scripts/bench_full.sh [--out DIR | --publish]
#   REPS=5 GB_REPS=3 MIN_TIME=0.2 GIVEBACK_N=50000000 scripts/bench_full.sh
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-bench}
REPS=${REPS:-5}
GB_REPS=${GB_REPS:-3}
MIN_TIME=${MIN_TIME:-0.2}
GIVEBACK_N=${GIVEBACK_N:-50000000}
# shellcheck source=../bench/tools/common.sh
. "$ROOT/bench/tools/common.sh"
RESULTS=""
while [ $# -gt 0 ]; do
  case $1 in
    --out) RESULTS=${2:-}; shift ;;
    --publish) RESULTS=$PUBLISHED ;;
    *) sed -n '2,12p' "$0" >&2; exit 2 ;;
  esac
  shift
done
: "${RESULTS:=$BUILD/results}"
RAW=$BUILD/results/raw

bench_install_deps
bench_build
mkdir -p "$RAW" "$RESULTS" || exit 1
stamp=$(date -u +%Y%m%dT%H%M%SZ)
SEED=$RAW/seed-$stamp.jsonl
FOOT=$RAW/footprint-$stamp.jsonl
GIVE=$RAW/giveback-$stamp.jsonl
IR=$RAW/pairs-ir-$stamp.json
GBJ=()

if [ -x "$GBENCH" ]; then
  note "Google Benchmark cases, every family ($GB_REPS repetitions, min time ${MIN_TIME}s)"
  "$GBENCH" --benchmark_repetitions="$GB_REPS" --benchmark_min_time="$MIN_TIME" \
    --benchmark_display_aggregates_only=true --benchmark_out="$RAW/gbench-$stamp.json" \
    --benchmark_out_format=json >"$RAW/gbench-$stamp.txt"
  GBJ+=("$RAW/gbench-$stamp.json")
  for m in tcmalloc jemalloc mimalloc; do
    lib=${!m}
    if [ -z "$lib" ] || [ ! -e "$lib" ]; then
      note "NOTICE: $m not installed; its Google Benchmark runs are skipped"
      continue
    fi
    note "Google Benchmark std::allocator cases under LD_PRELOAD=$lib"
    LD_PRELOAD=$lib "$GBENCH" --benchmark_filter='^[a-z]+/std/' --benchmark_repetitions="$GB_REPS" \
      --benchmark_min_time="$MIN_TIME" --benchmark_display_aggregates_only=true \
      --benchmark_out="$RAW/gbench-$m-$stamp.json" --benchmark_out_format=json >"$RAW/gbench-$m-$stamp.txt"
    GBJ+=("$RAW/gbench-$m-$stamp.json")
  done
else
  note "NOTICE: mtpool_bench not built (Google Benchmark missing): workloads 2-5 are skipped"
fi

note "seed workload, one process per run ($REPS repetitions)"
run_matrix "$SEED" 30 "$REPS" "$(seed_variants)"
note "footprint workload"
run_matrix "$FOOT" 60 1 "$(footprint_variants)"
note "memory given back: $GIVEBACK_N blocks of 120 B, one allocator at a time"
run_matrix "$GIVE" 120 1 "$PROC|--test,giveback,--threads,4,--n,$GIVEBACK_N"

if command -v valgrind >/dev/null; then
  note "instructions per 48-byte pair (callgrind)"
  echo "{" >"$IR"
  first=1
  for a in $(bench_allocators); do
    key=$a preload=""
    case $a in tcmalloc | jemalloc | mimalloc) preload=${!a}; key=std; [ -n "$preload" ] || continue ;; esac
    ir=()
    for n in 100000 200000; do
      out=$RAW/callgrind.$a.$n
      LD_PRELOAD=$preload valgrind --tool=callgrind --callgrind-out-file="$out" \
        "$PROC" --alloc "$key" --test pairs --n $n >/dev/null 2>&1
      ir+=("$(awk '/^(summary|totals):/ {print $2; exit}' "$out" 2>/dev/null)")
      rm -f "$out"
    done
    if [ -n "${ir[0]}" ] && [ -n "${ir[1]}" ]; then
      [ $first = 1 ] || echo "," >>"$IR"
      first=0
      printf '"%s": %s' "$a" "$(( (ir[1] - ir[0]) / 100000 ))" >>"$IR"
    fi
  done
  echo "}" >>"$IR"
else
  note "NOTICE: valgrind not installed; instructions per pair not measured"
fi

python3 "$ROOT/bench/tools/report.py" --seed "$SEED" --footprint "$FOOT" --giveback "$GIVE" \
  --gbench "${GBJ[@]}" --pairs-ir "$IR" --png --machine "$(machine_line)" --out "$RESULTS" --name full.md ||
  exit 1
note "tables: $RESULTS/full.md; raw JSON: $RAW/*-$stamp.*"
results_note "$RESULTS"
