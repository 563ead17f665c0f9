#!/usr/bin/env bash
# Memory system calls per general-purpose workload and allocator: each workload of
# bench/gp/gp_bench.c runs once per allocator (preloaded, as in scripts/bench_gp.sh) under
# `strace -f -c`, and the calls of mmap, munmap, mremap and madvise are counted (brk too, for
# glibc's heap). Writes a dated markdown table (build-gp/results/gp-syscalls.md by default,
# beside the build; --publish: bench/results/gp-syscalls.md).
#
#   bash bench/gp/syscalls.sh [--threads N] [--scale X] [--tests "a b"] [--allocs "glibc mtpool"]
#                             [--driver PATH] [--mtpool-lib PATH] [--out FILE | --publish]
# Defaults: 2 threads, scale 1, every workload (gp_bench --list), glibc mtpool mimalloc jemalloc
# tcmalloc tbbmalloc (those this machine has: bench/tools/common.sh's malloc_lib), the driver and
# library that scripts/bench_gp.sh built (build-gp/), else the driver is compiled here.
# Counts include the process's own start-up (the loader maps the program and its libraries: about
# 30 calls, the same for every allocator). strace slows a run that makes many calls; the times
# here are not results (scripts/bench_gp.sh measures those, without strace).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${MTPOOL_GP_BUILD:-$ROOT/build-gp}
# shellcheck disable=SC1091
. "$ROOT/bench/tools/common.sh"
threads=2 scale=1 tests="" allocs="glibc mtpool mimalloc jemalloc tcmalloc tbbmalloc" driver="" out=""
while [ $# -gt 0 ]; do
  if [ "$1" = --publish ]; then out=$PUBLISHED/gp-syscalls.md; shift; continue; fi
  [ $# -ge 2 ] || { sed -n '2,15p' "$0" >&2; exit 2; }
  case $1 in
    --threads) threads=$2 ;;
    --scale) scale=$2 ;;
    --tests) tests=$2 ;;
    --allocs) allocs=$2 ;;
    --driver) driver=$2 ;;
    --mtpool-lib) export MTPOOL_LIB_mtpool=$2 ;;
    --out) out=$2 ;;
    *) sed -n '2,15p' "$0" >&2; exit 2 ;;
  esac
  shift 2
done
: "${out:=$BUILD/results/gp-syscalls.md}"
mkdir -p "$(dirname "$out")"
command -v strace >/dev/null || { echo "strace is not installed" >&2; exit 1; }
export MTPOOL_LIB_mtpool=${MTPOOL_LIB_mtpool:-${MTPOOL_MALLOC_LIB:-$BUILD/malloc/libmtpool-malloc.so}}
if [ -z "$driver" ]; then
  driver=$BUILD/gp_bench
  if [ ! -x "$driver" ]; then
    mkdir -p "$BUILD"
    gcc -O2 -std=c11 -Wall -Wextra -Werror -pthread -o "$driver" "$ROOT/bench/gp/gp_bench.c" -ldl
  fi
fi
: "${tests:=$("$driver" --list | tr '\n' ' ')}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
calls=(mmap munmap mremap madvise brk)
declare -A cell=()
run_allocs=""
for a in $allocs; do
  lib=$(malloc_lib "$a") || { echo "$a: not available, skipped" >&2; continue; }
  run_allocs="$run_allocs $a"
  for t in $tests; do
    strace -f -c -o "$work/s" -E "LD_PRELOAD=$lib" "$driver" --test "$t" --threads "$threads" \
      --scale "$scale" --alloc "$a" >"$work/line" 2>"$work/err" ||
      { echo "FAILED: $a $t: $(head -c 300 "$work/err")" >&2; exit 1; }
    grep -q "\"malloc\": \"$a\"" "$work/line" || { echo "$a $t ran on another malloc" >&2; exit 1; }
    # strace -c: "% time seconds usecs/call calls [errors] syscall"; calls is the 4th field
    read -r mm mu mr ma br < <(awk 'BEGIN {split("mmap munmap mremap madvise brk", k, " ")}
      $NF ~ /^(mmap|munmap|mremap|madvise|brk)$/ {c[$NF] = $4}
      END {printf "%d %d %d %d %d\n", c[k[1]], c[k[2]], c[k[3]], c[k[4]], c[k[5]]}' "$work/s")
    cell[$a/$t]="$((mm + mu + mr + ma)) ($mm/$mu/$mr/$ma; brk $br)"
    echo "$a $t: mmap $mm munmap $mu mremap $mr madvise $ma brk $br" >&2
  done
done
{
  echo "# Memory system calls per workload ($(date -u '+%Y-%m-%d %H:%M UTC'))"
  echo
  echo "\`bash bench/gp/syscalls.sh\`: each workload of \`bench/gp/gp_bench.c\` once per allocator, $threads"
  echo "threads, scale $scale, under \`strace -f -c\`. A cell: mmap + munmap + mremap + madvise calls"
  echo "(mmap/munmap/mremap/madvise; brk apart), the process's start-up included (the loader's"
  echo "mappings: about 30 calls for every allocator). mtpool: \`${MTPOOL_LIB_mtpool}\`"
  echo "($(sha256sum "$MTPOOL_LIB_mtpool" 2>/dev/null | cut -c1-12)), at commit $(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet HEAD -- c_core 2>/dev/null || echo ' with local changes')."
  echo "Machine: $(machine_line)."
  echo
  printf '| workload |'; for a in $run_allocs; do printf ' %s |' "$a"; done; echo
  printf '|---|'; for a in $run_allocs; do printf -- '---:|'; done; echo
  for t in $tests; do
    printf '| %s |' "$t"; for a in $run_allocs; do printf ' %s |' "${cell[$a/$t]}"; done; echo
  done
} >"$out"
echo "wrote $out" >&2
results_note "$out"
