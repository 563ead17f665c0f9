#!/usr/bin/env bash
# Instructions per allocate+free pair (callgrind), mtpool beside glibc malloc, in one run: the
# "Fast-path cost" table (bench/results/notes.md), then the C++ adapter against the C calls it
# makes, then the cross-thread pair (one thread allocates, another frees, the first reuses the
# blocks).
# Per-pair cost = (Ir(2N) - Ir(N)) / N, so start-up and warm-up cancel out; for the C table the
# loop's own cost (the same loop allocating nothing) is subtracted.
# usage: bash tools/fastpath/cost.sh [build-dir]   (a Release or RelWithDebInfo build; default build/)
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$here/build}
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 1; }
command -v bc >/dev/null || { echo "bc is not installed" >&2; exit 1; }
cmake --build "$build" --target c_fastpath_cost cxx_fastpath_cost xthread_fastpath_cost >/dev/null
c_exe=$build/tools/fastpath/c_fastpath_cost
cxx_exe=$build/tools/fastpath/cxx_fastpath_cost
xt_exe=$build/tools/fastpath/xthread_fastpath_cost
ir() { # total instructions of one run: ir EXE ARGS...
  local out; out=$(mktemp)
  valgrind --tool=callgrind --callgrind-out-file="$out" "$@" >/dev/null 2>&1
  awk '/^summary:/ {print $2}' "$out"; rm -f "$out"
}
N=200000
printf '%-14s %6s %6s %18s\n' allocator size batch "instr/pair (net)"
for size in 16 48 256 2048 10240; do
  for batch in 1 64; do
    a=$(ir "$c_exe" none "$size" "$N" "$batch"); b=$(ir "$c_exe" none "$size" $((2 * N)) "$batch")
    loop=$(echo "($b - $a) / $N" | bc -l)
    for which in malloc mtpool mtpool-sized; do
      a=$(ir "$c_exe" "$which" "$size" "$N" "$batch"); b=$(ir "$c_exe" "$which" "$size" $((2 * N)) "$batch")
      printf '%-14s %6s %6s %18.1f\n' "$which" "$size" "$batch" "$(echo "($b - $a) / $N - $loop" | bc -l)"
    done
  done
done
echo "(net: the measuring loop's own instructions, counted with no allocation, are subtracted)"
echo
printf '%-12s %22s\n' mode "instr/pair (gross)"
for mode in cxx12 c12 cxx1 c1 pool-cxx12 pool-c12; do
  a=$(ir "$cxx_exe" "$mode" "$N"); b=$(ir "$cxx_exe" "$mode" $((2 * N)))
  printf '%-12s %22.1f\n' "$mode" "$(echo "($b - $a) / $N" | bc -l)"
done
echo "(cxx = mtpool::allocator<int>, c = mtp_alloc with its NULL check + mtp_free_sized; 12 or 1"
echo " ints; pool- = pool_allocator against mtp_pool_alloc; loop included)"
echo
printf '%-14s %6s %18s\n' allocator size "instr/pair (gross)"
a=$(ir "$xt_exe" none 48 "$N"); b=$(ir "$xt_exe" none 48 $((2 * N)))
printf '%-14s %6s %18.1f\n' harness 48 "$(echo "($b - $a) / $N" | bc -l)"
for which in malloc mtpool; do
  a=$(ir "$xt_exe" "$which" 48 "$N"); b=$(ir "$xt_exe" "$which" 48 $((2 * N)))
  printf '%-14s %6s %18.1f\n' "$which" 48 "$(echo "($b - $a) / $N" | bc -l)"
done
echo "(cross-thread: one thread allocates 1000 blocks, a second frees them, the first allocates"
echo " again; harness = the same threads and barriers allocating nothing, included in the others;"
echo " for a peer: LD_PRELOAD=/path/to/lib $xt_exe malloc 48 N under callgrind)"
