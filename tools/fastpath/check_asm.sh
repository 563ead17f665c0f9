#!/usr/bin/env bash
# The fast paths take no lock and no atomic read-modify-write: the machine code of the public
# entry points (which hold the inlined fast paths; slow paths are separate, out-of-line
# functions) contains no lock-prefixed instruction, no xchg and no call into pthread.
# usage: tools/fastpath/check_asm.sh <libmtpool.a|libmtpool.so>   (the ctest fastpath_no_atomics)
set -euo pipefail
lib=$1
status=0
dump=$(mktemp)
trap 'rm -f "$dump"' EXIT
objdump -d --no-show-raw-insn "$lib" >"$dump"
for fn in mtp_alloc mtp_pool_alloc mtp_free mtp_free_sized; do
  body=$(awk -v f="<$fn>:" '$2 == f {on=1; next} on && /^$/ {exit} on' "$dump")
  if [ -z "$body" ]; then
    echo "FAIL: $fn not found in $lib"; status=1; continue
  fi
  n=$(echo "$body" | wc -l)
  bad=$(echo "$body" | grep -E '\block\b|\bxchg|pthread_' | grep -vE 'xchg +%ax,%ax' || true)
  if [ -n "$bad" ]; then
    echo "FAIL: $fn has atomic or locking instructions:"; echo "$bad"; status=1
  else
    echo "ok: $fn ($n instructions in all, none locked or atomic)"
  fi
done
[ $status = 0 ] && echo "1 passed, 0 failed" || echo "0 passed, 1 failed"
exit $status
