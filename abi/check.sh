#!/usr/bin/env bash
# The ABI check: the shared library's exported symbols and the public structures' layout must equal
# the lists kept here (abi/symbols.txt, abi/layout.txt), so that an accidental ABI change fails CI.
#   bash abi/check.sh path/to/libmtpool.so.0.x.y            compare (exit 1 on any difference)
#   bash abi/check.sh path/to/libmtpool.so.0.x.y --update   rewrite the lists after a deliberate
#                                                           change (then follow the "ABI and
#                                                           versioning" policy, docs/porting.md)
# The layout is that of an LP64 Linux target (x86_64, aarch64): run it there.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
lib=${1:?usage: abi/check.sh path/to/libmtpool.so [--update]}
mode=${2:-check}
cc=${CC:-cc}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The soname, then "name type" per defined dynamic symbol (T function, D/B/R data), sorted.
{
  readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/SONAME \1/p'
  nm -D --defined-only "$lib" | awk 'NF == 3 && $2 ~ /^[TDBRWV]$/ {print $3, $2}'
} | LC_ALL=C sort > "$work/symbols.txt"
"$cc" -std=c11 -Wall -Wextra -Werror -I"$here/../c_core/include" "$here/layout.c" -o "$work/layout"
"$work/layout" > "$work/layout.txt"

if [ "$mode" = --update ]; then
  cp "$work/symbols.txt" "$here/symbols.txt"
  cp "$work/layout.txt" "$here/layout.txt"
  echo "abi: lists updated ($(wc -l < "$here/symbols.txt") symbols); commit abi/ with the change"
  exit 0
fi

bad=0
for f in symbols layout; do
  if ! diff -u "$here/$f.txt" "$work/$f.txt" > "$work/$f.diff"; then
    echo "abi: $f differ from abi/$f.txt (- kept list, + this build):"
    tail -n +3 "$work/$f.diff"
    bad=1
  fi
done
if [ "$bad" != 0 ]; then
  cat <<MSG
abi: the ABI of $lib changed. If that is deliberate, update the lists and commit them with the
change, then bump the version as docs/porting.md, "ABI and versioning", says (a removed or
changed symbol or structure layout: a new major version and soname; an added symbol: a new minor):
    bash abi/check.sh $lib --update
MSG
  exit 1
fi
echo "abi: $(wc -l < "$work/symbols.txt") exported symbols and the public structures' layout match abi/"
