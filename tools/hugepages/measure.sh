#!/usr/bin/env bash
# Measure mtpool's huge-page settings (MTPOOL_HUGEPAGES) side by side, interleaved, on the seed,
# footprint and give-back workloads of bench/mtpool_proc, and print medians (tools/hugepages/summary.py).
#   bash tools/hugepages/measure.sh BUILD_DIR [RUNS] [MODES]
# BUILD_DIR: a Release build with -DMTPOOL_BUILD_BENCH=ON (mtpool_proc, mtpool_proc_cow,
# malloc/libmtpool-malloc.so). MODES: MTPOOL_HUGEPAGES values, "-" for unset, i.e. the default
# (default "system - 1").
# HUGE_ONLY=REGEX runs only the workloads whose tag matches (seed40 seed9 cow40 cow9 preload40
# fp_list_int fp_list_str40 fp_map_int giveback); HUGE_DELAY_MS sets footprint/giveback's --delay-ms.
# Each run: /usr/bin/time (wall, user, sys, minor faults, peak RSS) around one fresh process.
set -euo pipefail
build=${1:?build dir}
runs=${2:-5}
modes=${3:-"system - 1"}
out=${HUGE_OUT:-$build/hugepages.jsonl}
: >"$out"
thp=/sys/kernel/mm/transparent_hugepage
for f in enabled defrag khugepaged/defrag hpage_pmd_size khugepaged/max_ptes_none; do
  printf '%s: %s\n' "$f" "$(cat "$thp/$f" 2>/dev/null || echo absent)"
done
echo "kernel $(uname -r), $(nproc) cores, load before: $(cut -d' ' -f1-3 /proc/loadavg)"
one() { # tag mode cmd...
  local tag=$1 mode=$2
  shift 2
  [[ $tag =~ ${HUGE_ONLY:-.} ]] || return 0
  case $tag in fp_* | giveback) [ -n "${HUGE_DELAY_MS:-}" ] && set -- "$@" --delay-ms "$HUGE_DELAY_MS" ;; esac
  local env=(env -u MTPOOL_HUGEPAGES)
  [ "$mode" != "-" ] && env=(env MTPOOL_HUGEPAGES="$mode")
  local t j
  t=$(mktemp)
  j=$("${env[@]}" /usr/bin/time -o "$t" -f '%e %U %S %R %M' "$@" | tail -1)
  read -r wall user sys flt maxkb <"$t"
  rm -f "$t"
  printf '{"tag": "%s", "mode": "%s", "time_wall": %s, "time_user": %s, "time_sys": %s, "time_minflt": %s, "time_maxrss_kb": %s, "run": %s}\n' \
    "$tag" "$mode" "$wall" "$user" "$sys" "$flt" "$maxkb" "$j" >>"$out"
}
p=$build/bench/mtpool_proc
c=$build/bench/mtpool_proc_cow
m=$build/malloc/libmtpool-malloc.so
for r in $(seq "$runs"); do
  for mode in $modes; do
    one seed40 "$mode" "$p" --alloc mtpool --test seed --threads 4 --len 40
    one seed9 "$mode" "$p" --alloc mtpool --test seed --threads 4 --len 9
    one cow40 "$mode" "$c" --alloc mtpool --test seed --threads 4 --len 40
    one cow9 "$mode" "$c" --alloc mtpool --test seed --threads 4 --len 9
    [ -f "$m" ] && LD_PRELOAD=$m one preload40 "$mode" "$p" --alloc std --test seed --threads 4 --len 40
    for k in list_int list_str40 map_int; do
      one "fp_$k" "$mode" "$p" --alloc mtpool --test footprint --kind "$k"
    done
    one giveback "$mode" "$p" --alloc mtpool --test giveback --n "${HUGE_GIVEBACK_N:-10000000}"
  done
  echo "round $r done, load $(cut -d' ' -f1-3 /proc/loadavg)"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 "$(dirname "$0")/summary.py" "$out"
