#!/usr/bin/env bash
# Resident memory per thread that allocates a little, per allocator: bench/gp/thread_footprint.c
# (THREADS threads each allocate BLOCKS blocks of 16 B-3 KiB and wait; RssAnon added per thread)
# preloaded with each allocator, repetitions interleaved, the median per cell. Writes a dated
# markdown table (build-gp/results/thread-footprint.md by default, beside the build; --publish:
# bench/results/thread-footprint.md).
#
#   bash bench/gp/footprint.sh [--cases "1000x20 100x20 1000x200"] [--reps N] [--allocs "..."]
#                              [--mtpool-lib PATH] [--out FILE | --publish]
# Defaults: the three cases above, 5 repetitions, glibc mtpool mimalloc jemalloc tcmalloc
# tbbmalloc (those this machine has: bench/tools/common.sh's malloc_lib), mtpool's library from
# build-gp/ (scripts/bench_gp.sh) unless given. Each process checks which malloc it ran on.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${MTPOOL_GP_BUILD:-$ROOT/build-gp}
# shellcheck disable=SC1091
. "$ROOT/bench/tools/common.sh"
cases="1000x20 100x20 1000x200" reps=5 allocs="glibc mtpool mimalloc jemalloc tcmalloc tbbmalloc" out=""
while [ $# -gt 0 ]; do
  if [ "$1" = --publish ]; then out=$PUBLISHED/thread-footprint.md; shift; continue; fi
  [ $# -ge 2 ] || { sed -n '2,12p' "$0" >&2; exit 2; }
  case $1 in
    --cases) cases=$2 ;;
    --reps) reps=$2 ;;
    --allocs) allocs=$2 ;;
    --mtpool-lib) export MTPOOL_LIB_mtpool=$2 ;;
    --out) out=$2 ;;
    *) sed -n '2,12p' "$0" >&2; exit 2 ;;
  esac
  shift 2
done
: "${out:=$BUILD/results/thread-footprint.md}"
mkdir -p "$(dirname "$out")"
export MTPOOL_LIB_mtpool=${MTPOOL_LIB_mtpool:-${MTPOOL_MALLOC_LIB:-$BUILD/malloc/libmtpool-malloc.so}}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
probe=$work/thread_footprint
gcc -O2 -std=gnu11 -Wall -Wextra -Werror -pthread -o "$probe" "$ROOT/bench/gp/thread_footprint.c" -ldl
declare -A lib=()
run_allocs=""
for a in $allocs; do
  l=$(malloc_lib "$a") || { echo "$a: not available, skipped" >&2; continue; }
  lib[$a]=$l
  run_allocs="$run_allocs $a"
done
# Repetition outermost, allocators interleaved inside: load on a shared machine falls on all alike.
for r in $(seq 1 "$reps"); do
  for c in $cases; do
    for a in $run_allocs; do
      line=$(LD_PRELOAD=${lib[$a]} "$probe" "${c%x*}" "${c#*x}")
      grep -q "\"malloc\": \"$a\"" <<<"$line" || { echo "$a $c ran on another malloc: $line" >&2; exit 1; }
      sed -n 's/.*"per_thread_kb": \([0-9.]*\).*/\1/p' <<<"$line" >>"$work/$a.$c"
      echo "rep $r $c $a: $line" >&2
    done
  done
done
median() { sort -n "$1" | awk '{v[NR] = $1} END {m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.1f", m}'; }
{
  echo "# RssAnon per thread that allocates a little ($(date -u '+%Y-%m-%d %H:%M UTC'))"
  echo
  echo "\`bash bench/gp/footprint.sh\`: \`bench/gp/thread_footprint.c\` preloaded with each allocator."
  echo "THREADSxBLOCKS: that many threads each allocate that many blocks of 16 B-3 KiB (one fixed"
  echo "sequence per thread index) and wait at a barrier while RssAnon is read; a cell is the RssAnon"
  echo "added per thread in KiB (thread stacks included, alike for all), the median of $reps interleaved"
  echo "repetitions, and its ratio to glibc's. mtpool: \`$MTPOOL_LIB_mtpool\`."
  echo
  echo "Machine: $(machine_line)."
  echo
  printf '| allocator |'; for c in $cases; do printf ' %s |' "$c"; done; echo
  printf '|---|'; for c in $cases; do printf -- '---:|'; done; echo
  for a in $run_allocs; do
    printf '| %s |' "$a"
    for c in $cases; do
      m=$(median "$work/$a.$c")
      if [ "$a" = glibc ] || [ ! -s "$work/glibc.$c" ]; then printf ' %s |' "$m"
      else printf ' %s (%.2fx) |' "$m" "$(awk -v a="$m" -v b="$(median "$work/glibc.$c")" 'BEGIN {print a / b}')"; fi
    done
    echo
  done
} >"$out"
echo "wrote $out" >&2
results_note "$out"
