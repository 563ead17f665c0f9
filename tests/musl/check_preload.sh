#!/bin/sh
# A musl program allocates from mtpool with the drop-in: checked, not assumed.
#   check_preload.sh dynamic PROGRAM LIBMTPOOL-MALLOC.SO
#     PROGRAM is dynamically linked against musl (its interpreter is musl's loader); run with
#     LD_PRELOAD=LIB and MTPOOL_SHOW_STATS=1, the report at exit counts the 5,000 blocks of 333
#     bytes it kept; run without, no report appears (the check can fail).
#   check_preload.sh static PROGRAM-WITH-DROP-IN PROGRAM-WITHOUT
#     both statically linked against musl's libc.a, the first with libmtpool-malloc.a: the first
#     reports the blocks, the second (musl's own malloc) reports nothing.
set -eu
mode=${1:?mode: dynamic or static}
prog=${2:?program}
other=${3:?library or second program}
blocks=5000
fail=0
# the default pool's line of the report: "default  <blocks>  <bytes in use> ..."
report_ok() { # stderr-file
  awk -v want=$blocks '$1 == "default" && $2 >= want && $3 >= want * 333 { ok = 1 } END { exit !ok }' "$1"
}
err=$(mktemp)
trap 'rm -f "$err"' EXIT
case $mode in
  dynamic)
    interp=$(readelf -l "$prog" | sed -n 's/.*Requesting program interpreter: \(.*\)]/\1/p')
    case $interp in
      *ld-musl*) echo "interpreter: $interp" ;;
      *) echo "FAIL: $prog is not a dynamically linked musl program (interpreter '$interp')"; exit 1 ;;
    esac
    LD_PRELOAD=$other MTPOOL_SHOW_STATS=1 "$prog" 2>"$err" >/dev/null
    if report_ok "$err"; then echo "preloaded: the report counts the program's blocks:"; grep -E '^(default|total) ' "$err"
    else echo "FAIL: preloaded, no report of $blocks blocks:"; cat "$err"; fail=1; fi
    MTPOOL_SHOW_STATS=1 "$prog" 2>"$err" >/dev/null
    if report_ok "$err"; then echo "FAIL: a report without the preload (the check is vacuous)"; fail=1
    else echo "not preloaded: no report (musl's malloc)"; fi
    ;;
  static)
    for p in "$prog" "$other"; do
      if readelf -l "$p" | grep -q 'program interpreter'; then echo "FAIL: $p is not static"; exit 1; fi
    done
    MTPOOL_SHOW_STATS=1 "$prog" 2>"$err" >/dev/null
    if report_ok "$err"; then echo "static with libmtpool-malloc.a: the report counts the blocks:"; grep -E '^(default|total) ' "$err"
    else echo "FAIL: static with libmtpool-malloc.a, no report of $blocks blocks:"; cat "$err"; fail=1; fi
    MTPOOL_SHOW_STATS=1 "$other" 2>"$err" >/dev/null
    if report_ok "$err"; then echo "FAIL: a report from the program without the drop-in"; fail=1
    else echo "static without the drop-in: no report (musl's malloc)"; fi
    ;;
  *) echo "check_preload.sh: unknown mode '$mode' (dynamic or static)" >&2; exit 2 ;;
esac
exit $fail
