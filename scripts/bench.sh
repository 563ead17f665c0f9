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
# Results: bench/results/seed.md (tables), bench/results/seed.png, bench/results/footprint.png;
# raw JSON lines in bench/results/raw/ (not committed).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build-bench}
REPS=${REPS:-5}
RESULTS=$ROOT/bench/results
RAW=$RESULTS/raw
# shellcheck source=../bench/tools/common.sh
. "$ROOT/bench/tools/common.sh"

bench_install_deps
bench_build
mkdir -p "$RAW"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
SEED=$RAW/seed-$stamp.jsonl
FOOT=$RAW/footprint-$stamp.jsonl

note "seed workload: $REPS repetitions x 4 variants x every allocator (a few minutes)"
run_matrix "$SEED" 30 "$REPS" "$(seed_variants)"
note "footprint workload: 3 kinds x every allocator"
run_matrix "$FOOT" 60 1 "$(footprint_variants)"

python3 "$ROOT/bench/tools/report.py" --seed "$SEED" --footprint "$FOOT" --png \
  --machine "$(machine_line)" --out "$RESULTS" --name seed.md
note "tables: $RESULTS/seed.md; raw: $SEED $FOOT"
