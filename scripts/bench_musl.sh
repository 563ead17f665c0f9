#!/usr/bin/env bash
# The general-purpose workloads (bench/gp/gp_bench.c) on musl: the same driver built with musl-gcc
# runs on musl's own malloc (mallocng) and with the musl build of libmtpool-malloc.so preloaded
# through musl's loader; for reference the glibc driver runs on glibc's malloc and on the glibc
# build of the drop-in. Runs are interleaved (every allocator once per test, thread count and
# repetition, in turn), so a change of the machine's load falls on all of them alike; each cell's
# ratio is the median over repetitions of that repetition's pair.
#   bash scripts/bench_musl.sh              every workload at 1, 2 and 4 threads, 3 repetitions
#   bash scripts/bench_musl.sh --quick      scale 0.05, 1 and 2 threads, 1 repetition
# Options: --threads "1 2 4", --reps N, --tests "larson tree", --scale X (work per process times X),
#   --timeout S (seconds a process may run; 60), --out DIR (where gp-musl.{md,jsonl} go:
#   build-musl-bench/results, beside the build), --publish (into the committed bench/results/).
# The peers of scripts/bench_gp.sh (Debian's mimalloc, jemalloc, tcmalloc, tbbmalloc) are glibc
# libraries: each one installed is tried in the musl driver and recorded as not loadable when
# musl's loader refuses it. Exits non-zero when a process fails or runs on another malloc than it
# was given, or a checksum differs from glibc's. MTPOOL_TREE_REV names the sources in the report
# where the tree is not a git checkout.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${MTPOOL_MUSL_BENCH_BUILD:-$ROOT/build-musl-bench}
# shellcheck disable=SC1091
. "$ROOT/bench/tools/common.sh"
quick=0 threads="1 2 4" reps=3 tests="" scale=1 timeout=60 out=""
usage() { sed -n '2,17p' "$0" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1; shift; continue ;;
    --publish) out=$PUBLISHED; shift; continue ;;
  esac
  [ $# -ge 2 ] || usage
  case $1 in
    --threads) threads=$2 ;;
    --reps) reps=$2 ;;
    --tests) tests=$2 ;;
    --scale) scale=$2 ;;
    --timeout) timeout=$2 ;;
    --out) out=$2 ;;
    *) usage ;;
  esac
  shift 2
done
if [ $quick = 1 ]; then
  [ "$threads" = "1 2 4" ] && threads="1 2"
  [ "$reps" = 3 ] && reps=1
  [ "$scale" = 1 ] && scale=0.05
  : "${out:=$BUILD/quick}"
fi
: "${out:=$BUILD/results}"
command -v musl-gcc >/dev/null || { note "musl-gcc not found: apt-get install musl-tools"; exit 1; }

t_start=$(date +%s)
mkdir -p "$BUILD" "$out"
# The drop-in twice, Release: against musl (toolchain file) and against glibc.
for libc in musl glibc; do
  tc=()
  [ $libc = musl ] && tc=(-DCMAKE_TOOLCHAIN_FILE="$ROOT/cmake/toolchains/musl.cmake")
  build_dropin "$BUILD/$libc" "$libc" "${tc[@]}"
done
flags=(-O2 -std=c11 -Wall -Wextra -Wshadow -Wconversion -Werror -pthread)
musl-gcc "${flags[@]}" -o "$BUILD/gp_bench_musl" "$ROOT/bench/gp/gp_bench.c"
gcc "${flags[@]}" -o "$BUILD/gp_bench_glibc" "$ROOT/bench/gp/gp_bench.c" -ldl
: "${tests:=$("$BUILD/gp_bench_musl" --list | tr '\n' ' ')}"

# label driver preload expected-malloc (what gp_bench finds by its symbols)
runs=("musl $BUILD/gp_bench_musl - musl"
      "mtpool-musl $BUILD/gp_bench_musl $BUILD/musl/malloc/libmtpool-malloc.so mtpool"
      "glibc $BUILD/gp_bench_glibc - glibc"
      "mtpool-glibc $BUILD/gp_bench_glibc $BUILD/glibc/malloc/libmtpool-malloc.so mtpool")

# The peers: glibc builds; does musl's loader take them at all?
peers=""
for p in mimalloc jemalloc tcmalloc tbbmalloc; do
  lib=$(malloc_lib "$p") || continue
  if err=$(LD_PRELOAD=$lib "$BUILD/gp_bench_musl" --test larson --threads 1 --scale 0.001 2>&1 >/dev/null); then
    peers="$peers $p: $lib loads into the musl driver (not benchmarked here);"
  else
    peers="$peers $p: $lib (a glibc build) does not load under musl: $(echo "$err" | head -1 | cut -c1-120);"
  fi
done
[ -n "$peers" ] || peers=" none of Debian's peers (mimalloc, jemalloc, tcmalloc, tbbmalloc) is installed;"

raw=$out/gp-musl.jsonl
rm -f "$raw"
machine="$(machine_line), $(musl-gcc --version | head -1) with musl $(dpkg-query -W -f='${Version}' musl 2>/dev/null || echo '?')${MTPOOL_TREE_REV:+, built from $MTPOOL_TREE_REV}"
note "tests: $tests; threads: $threads; reps: $reps; scale: $scale; output $out"
rc=0
for rep in $(seq 1 "$reps"); do
  for t in $tests; do
    for n in $threads; do
      for r in "${runs[@]}"; do
        read -r label driver preload want <<<"$r"
        [ "$preload" = - ] && preload=""
        prc=0
        # env sets LD_PRELOAD for the driver alone (timeout is a glibc program: a musl library
        # preloaded into it would not load)
        line=$(timeout "$timeout" env LD_PRELOAD="$preload" "$driver" --test "$t" --threads "$n" \
          --scale "$scale" --alloc "$label" 2>"$out/gp-musl.err") || prc=$?
        if [ $prc = 0 ] && [ -n "$line" ]; then
          echo "${line%\}}, \"rep\": $rep, \"want\": \"$want\"}" >>"$raw"
        else
          note "FAILED: $label ($t, $n threads, exit $prc): $(head -c 300 "$out/gp-musl.err")"
          echo "{\"test\": \"$t\", \"threads\": $n, \"alloc\": \"$label\", \"rep\": $rep, \"failed\": $prc}" >>"$raw"
          rc=1
        fi
      done
    done
  done
  note "repetition $rep/$reps done ($(( $(date +%s) - t_start )) s)"
done
rm -f "$out/gp-musl.err"
python3 "$ROOT/bench/gp/report_musl.py" --in "$raw" --out "$out/gp-musl.md" --machine "$machine" \
  --elapsed $(( $(date +%s) - t_start )) --reps "$reps" --scale "$scale" --peers "$peers" || rc=1
note "done in $(( $(date +%s) - t_start )) s: $out/gp-musl.md"
results_note "$out"
exit $rc
