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
#   --out DIR                  where seed.md and the charts go (default bench/results), and
#                              with it the raw lines (seed.jsonl, footprint.jsonl)
# Results: bench/results/seed.md (tables: time, CPU time, minor page faults and AnonHugePages,
# each allocator's version), bench/results/seed.png, bench/results/footprint.png; raw JSON lines
# in bench/results/raw/ (not committed).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-bench}
REPS=${REPS:-5}
RESULTS=$ROOT/bench/results
RAW=$ROOT/bench/results/raw
# shellcheck source=../bench/tools/common.sh
. "$ROOT/bench/tools/common.sh"
seed_only=0 out_given=0
while [ $# -gt 0 ]; do
  case $1 in
    --peer) add_peer "${2:-}"; shift ;;
    --allocs) export MTPOOL_BENCH_ALLOCS=${2:-}; shift ;;
    --seed-only) seed_only=1 ;;
    --out) RESULTS=${2:-} out_given=1; shift ;;
    *) sed -n '2,24p' "$0" >&2; exit 2 ;;
  esac
  shift
done

bench_install_deps
BENCH_NO_GBENCH=1 bench_build
mkdir -p "$RAW" "$RESULTS"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
SEED=$RAW/seed-$stamp.jsonl
FOOT=$RAW/footprint-$stamp.jsonl
machine=$(machine_line)

note "seed workload: $REPS repetitions x 4 variants x every allocator (a few minutes)"
run_matrix "$SEED" 30 "$REPS" "$(seed_variants)"
if [ $seed_only = 0 ]; then
  note "footprint workload: 3 kinds x every allocator"
  run_matrix "$FOOT" 60 1 "$(footprint_variants)"
fi
# each preloaded malloc's version (the families built into the driver are this tree's and
# libstdc++'s)
versions=$(malloc_versions "$(for a in $(bench_allocators); do
  case $a in std) echo glibc ;; tcmalloc | jemalloc | mimalloc) [ -e "${!a:-}" ] && echo "$a" ;;
    *) [[ " $(peer_names) " = *" $a "* ]] && echo "$a" ;; esac; done | tr '\n' ' ')")

python3 "$ROOT/bench/tools/report.py" --seed "$SEED" --footprint "$FOOT" --png \
  --machine "$machine" --versions "$versions" --out "$RESULTS" --name seed.md
if [ $out_given = 1 ]; then
  cp "$SEED" "$RESULTS/seed.jsonl"
  [ -f "$FOOT" ] && cp "$FOOT" "$RESULTS/footprint.jsonl"
fi
note "tables: $RESULTS/seed.md; raw: $SEED $FOOT"
