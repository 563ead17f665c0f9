#!/usr/bin/env bash
# Instructions per allocate+free pair (callgrind), mtpool beside glibc malloc, in one run.
# Per-pair cost = (Ir(2N) - Ir(N)) / N, so start-up and warm-up cancel out; the loop's own
# cost (the same loop allocating nothing) is subtracted.
# usage: scripts/fastpath_cost.sh [build-dir]   (a Release or RelWithDebInfo build of the project)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
exe=$build/tools/c_fastpath_cost
[ -x "$exe" ] || cmake --build "$build" --target c_fastpath_cost >/dev/null
ir() { # total instructions of one run
  local out; out=$(mktemp)
  valgrind --tool=callgrind --callgrind-out-file="$out" "$exe" "$@" >/dev/null 2>&1
  awk '/^summary:/ {print $2}' "$out"; rm -f "$out"
}
N=200000
printf '%-14s %6s %6s %18s\n' allocator size batch "instr/pair (net)"
for size in 16 48 256; do
  for batch in 1 64; do
    a=$(ir none "$size" "$N" "$batch"); b=$(ir none "$size" $((2 * N)) "$batch")
    loop=$(echo "($b - $a) / $N" | bc -l)
    for which in malloc mtpool mtpool-sized; do
      a=$(ir "$which" "$size" "$N" "$batch"); b=$(ir "$which" "$size" $((2 * N)) "$batch")
      printf '%-14s %6s %6s %18.1f\n' "$which" "$size" "$batch" "$(echo "($b - $a) / $N - $loop" | bc -l)"
    done
  done
done
echo "(net: the measuring loop's own instructions, counted with no allocation, are subtracted)"
