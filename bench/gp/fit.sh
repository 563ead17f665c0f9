#!/usr/bin/env bash
# How well block sizes fit requests, per allocator: bench/gp/fit.c (malloc_usable_size(p) / n for
# n from 1 KiB to 4 MiB, fresh and just after a block a quarter larger was freed) preloaded with
# each allocator. Deterministic: one run each. Writes a dated markdown table
# (build-gp/results/fit.md by default, beside the build; --publish: bench/results/fit.md).
#
#   bash bench/gp/fit.sh [--allocs "..."] [--mtpool-lib PATH] [--out FILE | --publish]
# Defaults: glibc mtpool mimalloc jemalloc tcmalloc tbbmalloc and the newest peers
# scripts/build_peers.sh built (those this machine has: bench/tools/common.sh's malloc_lib),
# mtpool's library from build-gp/ (scripts/bench_gp.sh) unless given. Each process checks which
# malloc it ran on.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${MTPOOL_GP_BUILD:-$ROOT/build-gp}
# shellcheck disable=SC1091
. "$ROOT/bench/tools/common.sh"
allocs="" out=""
while [ $# -gt 0 ]; do
  if [ "$1" = --publish ]; then out=$PUBLISHED/fit.md; shift; continue; fi
  [ $# -ge 2 ] || { sed -n '2,11p' "$0" >&2; exit 2; }
  case $1 in
    --allocs) allocs=$2 ;;
    --mtpool-lib) export MTPOOL_LIB_mtpool=$2 ;;
    --out) out=$2 ;;
    *) sed -n '2,11p' "$0" >&2; exit 2 ;;
  esac
  shift 2
done
: "${allocs:=glibc mtpool mimalloc jemalloc tcmalloc tbbmalloc $(peer_names)}"
: "${out:=$BUILD/results/fit.md}"
mkdir -p "$(dirname "$out")"
export MTPOOL_LIB_mtpool=${MTPOOL_LIB_mtpool:-${MTPOOL_MALLOC_LIB:-$BUILD/malloc/libmtpool-malloc.so}}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
probe=$work/fit
gcc -O2 -std=gnu11 -Wall -Wextra -Werror -o "$probe" "$ROOT/bench/gp/fit.c" -ldl
rows=""
for a in $allocs; do
  l=$(malloc_lib "$a") || { echo "$a: not available, skipped" >&2; continue; }
  line=$(LD_PRELOAD=$l "$probe")
  grep -q "\"malloc\": \"$(malloc_family "$a")\"" <<<"$line" || { echo "$a ran on another malloc: $line" >&2; exit 1; }
  echo "$a: $line" >&2
  printf '%s\t%s\t%s\n' "$a" "$(malloc_version "$a")" "$line" >>"$work/rows"
  rows=1
done
[ -n "$rows" ] || { echo "no allocator ran" >&2; exit 1; }
{
  echo "# Fit: usable size over requested size ($(date -u '+%Y-%m-%d %H:%M UTC'))"
  echo
  echo "\`bash bench/gp/fit.sh\`: \`bench/gp/fit.c\` preloaded with each allocator. For every request n"
  echo "from 1 KiB to 4 MiB (every 16 B to 256 KiB, every 256 B above) \`malloc_usable_size(malloc(n)) / n\`:"
  echo "the largest in each band (and the request it was largest at), then the mean; \"2^k+h\" is the"
  echo "largest over 2^k + 8 .. 2^k + 64 (k = 12..16). *fresh*: sizes allocated and freed in ascending"
  echo "order; *reused*: each allocated just after a block a quarter larger was freed. mtpool:"
  echo "\`$MTPOOL_LIB_mtpool\`."
  echo
  echo "Machine: $(machine_line)."
  for pass in fresh reused; do
    echo
    echo "## $pass"
    echo
    echo "| allocator | version | 1-32 KiB | 32-256 KiB | 256 KiB-1 MiB | 1-4 MiB | 2^k+h |"
    echo "|---|---|---:|---:|---:|---:|---:|"
    python3 - "$work/rows" "$pass" <<'EOF'
import json, sys
for row in open(sys.argv[1]):
    name, version, line = row.rstrip("\n").split("\t", 2)
    d = json.loads(line)[sys.argv[2]]
    cells = [f"{d[b]['worst']:.3f} ({d[b]['worst_n']:,}); {d[b]['mean']:.3f}"
             for b in ("1K-32K", "32K-256K", "256K-1M", "1M-4M")]
    cells.append(f"{d['pow2_header']['worst']:.3f} ({d['pow2_header']['worst_n']:,})")
    print(f"| {name} | {version} | " + " | ".join(cells) + " |")
EOF
  done
} >"$out"
echo "wrote $out" >&2
results_note "$out"
