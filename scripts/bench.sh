#!/usr/bin/env bash
# The seed comparison of mtpool against the allocators people use (issue 4), in one command:
# installs what is missing (as root: cmake, g++, Google Benchmark, the peer allocators, gnuplot),
# builds a Release tree in build-bench/, runs the seed workload (4 threads x 1,000,000 strings,
# C++11 and copy-on-write strings, 9 and 40 characters) and the footprint workload, one fresh
# process per allocator and repetition, then prints the markdown tables.
#
#   scripts/bench.sh                 REPS=5 by default
#   REPS=3 scripts/bench.sh          fewer repetitions
#   BUILD=/tmp/b scripts/bench.sh    another build directory
# Options:
#   --peer NAME=/path/lib.so   one more malloc to preload (any number; NAME begins with the
#                              allocator's family: mimalloc-dev=...); the newest releases built by
#                              scripts/build_peers.sh are run without it (bench/tools/common.sh)
#   --allocs "mtpool std mimalloc-2.4.1 ..."   a subset (MTPOOL_BENCH_ALLOCS)
#   --seed-only                no footprint workload
#   --out DIR                  where the results go (default: $BUILD/results, beside the build)
#   --publish                  into the committed bench/results/ (--out bench/results), for a
#                              run the project publishes: commit it with the README's tables
# Results: seed.md (tables: time, CPU time, minor page faults and AnonHugePages, bytes per
# element, memory given back, each allocator's version, and a summary: who is fastest and
# smallest, by how much, the spread), seed.png, footprint.png, and the run's raw JSON lines
# seed.jsonl and footprint.jsonl, from which bench/tools/report.py writes seed.md again:
#   python3 bench/tools/report.py --seed DIR/seed.jsonl --footprint DIR/footprint.jsonl --png --out DIR --name seed.md
# Every run's raw lines are also kept, stamped, in $BUILD/results/raw/.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-bench}
REPS=${REPS:-5}
# shellcheck source=../bench/tools/common.sh
. "$ROOT/bench/tools/common.sh"
seed_only=0 RESULTS=""
while [ $# -gt 0 ]; do
  case $1 in
    --peer) add_peer "${2:-}"; shift ;;
    --allocs) export MTPOOL_BENCH_ALLOCS=${2:-}; shift ;;
    --seed-only) seed_only=1 ;;
    --out) RESULTS=${2:-}; shift ;;
    --publish) RESULTS=$PUBLISHED ;;
    *) sed -n '2,25p' "$0" >&2; exit 2 ;;
  esac
  shift
done
: "${RESULTS:=$BUILD/results}"
RAW=$BUILD/results/raw

bench_install_deps
BENCH_NO_GBENCH=1 bench_build
mkdir -p "$RAW" "$RESULTS" || exit 1
stamp=$(date -u +%Y%m%dT%H%M%SZ)
SEED=$RAW/seed-$stamp.jsonl
FOOT=$RAW/footprint-$stamp.jsonl
# each preloaded malloc's version (the families built into the driver are this tree's and
# libstdc++'s)
versions=$(malloc_versions "$(for a in $(bench_allocators); do
  case $a in std) echo glibc ;; tcmalloc | jemalloc | mimalloc) [ -e "${!a:-}" ] && echo "$a" ;;
    *) [[ " $(peer_names) " = *" $a "* ]] && echo "$a" ;; esac; done | tr '\n' ' ')")
# The raw lines begin with the run's machine and versions, so that report.py can write the
# tables again from them alone.
python3 -c 'import json, sys; print(json.dumps({"run": {"machine": sys.argv[1], "versions": sys.argv[2]}}))' \
  "$(machine_line)" "$versions" >"$SEED" || exit 1

note "seed workload: $REPS repetitions x 4 variants x every allocator (a few minutes)"
run_matrix "$SEED" 30 "$REPS" "$(seed_variants)"
if [ $seed_only = 0 ]; then
  note "footprint workload: 3 kinds x every allocator"
  run_matrix "$FOOT" 60 1 "$(footprint_variants)"
fi

# This run's files replace the last run's in RESULTS, all of them (a chart or raw file that this
# run does not write would otherwise stay beside tables it does not belong to).
rm -f "$RESULTS"/seed.md "$RESULTS"/seed.png "$RESULTS"/footprint.png "$RESULTS"/seed.jsonl \
  "$RESULTS"/footprint.jsonl
cp "$SEED" "$RESULTS/seed.jsonl" || exit 1
foot_args=()
if [ -s "$FOOT" ]; then
  cp "$FOOT" "$RESULTS/footprint.jsonl" || exit 1
  foot_args=(--footprint "$RESULTS/footprint.jsonl")
fi
python3 "$ROOT/bench/tools/report.py" --seed "$RESULTS/seed.jsonl" "${foot_args[@]}" --png \
  --out "$RESULTS" --name seed.md || exit 1
note "tables: $RESULTS/seed.md; charts and raw lines beside it (every run's: $RAW)"
results_note "$RESULTS"
