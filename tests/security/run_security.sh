#!/usr/bin/env bash
# The security suite: every case of sec_cases (one heap error each) under glibc's malloc, under the
# drop-in malloc (libmtpool-malloc.so preloaded, default mode), under it with MTPOOL_CHECK=1, under
# libmtpool-debug.so where it lies beside it, and under each heap debugger given with --peer
# (Electric Fence's libefence.so, DUMA's libduma.so: preloaded with their default settings). A case
# is DETECTED when the process does not exit 0 (a report and abort, a fault, a nonzero exit; the
# property cases of sec_cases.c exit 1 when the allocator has the property). A case that runs past
# 10 s counts as not detected.
# clean_* cases commit no error: glibc's and mtpool's columns must exit 0 there (a false report
# fails the run); a peer's false reports are counted on the totals line.
# Prints a Markdown table and the totals. Exits 1 if checked mode detects fewer cases than glibc,
# than any peer or than --checked-floor, or the default mode fewer than FLOOR (--floor; default: as
# many as glibc), or on a false report. The line "target default >= glibc" says whether that target is met.
# Overflows past and underflows before a 256 KiB block, and writes 1 MiB past a block, hit
# whatever mapping lies there (for every allocator): those cells may vary from run to run.
# --cost "COMMAND": also run COMMAND (a real program, through sh -c) under each allocator, 3
# times, and print its median wall time and peak resident memory (the table's second part); a
# run past 600 s is stopped (its time then reads 600).
# usage: run_security.sh SEC_CASES_EXE LIBMTPOOL_MALLOC_SO [--floor N] [--checked-floor N] [--md FILE]
#          [--peer NAME=LIB.so]... [--peers-found] [--cost COMMAND]
#   --peers-found: add Electric Fence and DUMA where installed (Debian: /usr/lib/libefence.so,
#   /usr/lib/libduma.so; scripts/lib/install_deps.sh installs them with the benchmark packages)
set -uo pipefail
exe=$1
lib=$2
shift 2
md=
floor=
checked_floor=0
cost=
peer_names=()
peer_libs=()
add_peer() { peer_names+=("$1"); peer_libs+=("$2"); }
while [ $# -gt 0 ]; do
  case $1 in
    --md) md=$2; shift 2 ;;
    --floor) floor=$2; shift 2 ;;
    --checked-floor) checked_floor=$2; shift 2 ;;
    --cost) cost=$2; shift 2 ;;
    --peer)
      [ -r "${2#*=}" ] || { echo "no such library: ${2#*=}" >&2; exit 2; }
      add_peer "${2%%=*}" "${2#*=}"; shift 2 ;;
    --peers-found)
      for cand in "Electric Fence=libefence.so" "DUMA=libduma.so"; do
        for d in /usr/lib /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/local/lib; do
          if [ -r "$d/${cand#*=}" ]; then add_peer "${cand%%=*}" "$d/${cand#*=}"; break; fi
        done
      done
      shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$exe" ] && [ -r "$lib" ] || { echo "usage: $0 SEC_CASES_EXE LIBMTPOOL_MALLOC_SO ..." >&2; exit 2; }

outcome() { # outcome [VAR=value...] EXE CASE: the word for how the case ended
  local rc
  # the preload reaches the case only, not timeout(1): a preloaded timeout has mtpool's purge
  # thread, which may take the SIGCHLD that timeout waits for in sigsuspend
  timeout 10 env "$@" >/dev/null 2>&1
  rc=$?
  case $rc in
    0) echo "exit0" ;;
    124) echo "hang" ;;
    134) echo "abort" ;;
    139) echo "segv" ;;
    135) echo "bus" ;;
    *) if [ "$rc" -gt 128 ]; then echo "sig$((rc - 128))"; else echo "exit$rc"; fi ;;
  esac
}
detected() { [ "$1" != exit0 ] && [ "$1" != hang ]; }

# Columns: glibc, mtpool default, mtpool checked, the heap debugger libmtpool-debug.so where it
# lies beside the drop-in, then the peers. A column is the env prefix.
col_names=("glibc" "mtpool default" "mtpool checked")
col_envs=("" "LD_PRELOAD=$lib" "LD_PRELOAD=$lib MTPOOL_CHECK=1")
debug_lib=$(dirname "$lib")/libmtpool-debug.so
if [ -r "$debug_lib" ]; then
  col_names+=("mtpool debugger")
  col_envs+=("LD_PRELOAD=$debug_lib")
fi
first_peer=${#col_names[@]}
for i in "${!peer_names[@]}"; do
  col_names+=("${peer_names[$i]}")
  col_envs+=("LD_PRELOAD=${peer_libs[$i]}")
done
ncol=${#col_names[@]}

table=$(mktemp)
trap 'rm -f "$table"' EXIT
declare -a found false_rep
for ((j = 0; j < ncol; j++)); do found[j]=0; false_rep[j]=0; done
total=0 controls=0
unset MALLOC_CHECK_ MALLOC_PERTURB_ GLIBC_TUNABLES MTPOOL_CHECK LD_PRELOAD
for c in $("$exe" --list); do
  row="| $c |"
  control=0
  case $c in clean_*) control=1; controls=$((controls + 1)) ;; *) total=$((total + 1)) ;; esac
  for ((j = 0; j < ncol; j++)); do
    # shellcheck disable=SC2086 # the column's env words split on purpose
    o=$(outcome ${col_envs[$j]} "$exe" "$c")
    if [ $control = 1 ]; then
      detected "$o" && false_rep[j]=$((false_rep[j] + 1))
    else
      detected "$o" && found[j]=$((found[j] + 1))
    fi
    row="$row $o |"
  done
  echo "$row" >>"$table"
done

# Median wall seconds and peak RSS (MiB) of 3 runs of the --cost command under column j.
cost_of() {
  local j=$1 k out times=() rss=() tf
  tf=$(mktemp)
  for k in 1 2 3; do
    # shellcheck disable=SC2086
    /usr/bin/time -o "$tf" -f "%e %M" timeout 600 env ${col_envs[$j]} sh -c "$cost" >/dev/null 2>&1
    out=$(tail -1 "$tf")
    times+=("${out% *}")
    rss+=("${out#* }")
  done
  local t m
  t=$(printf '%s\n' "${times[@]}" | sort -g | sed -n 2p)
  m=$(printf '%s\n' "${rss[@]}" | sort -g | sed -n 2p)
  rm -f "$tf"
  printf '%s s, %s MiB' "$t" "$(awk -v k="$m" 'BEGIN { printf "%.1f", k / 1024 }')"
}

report() {
  echo "# Security suite: heap errors detected"
  echo
  echo "Generated by tests/security/run_security.sh on $(date -u '+%Y-%m-%d %H:%M UTC') ($(uname -m))."
  echo "Each case commits one heap error (tests/security/sec_cases.c); detected = the process did"
  echo "not exit 0 (report and abort, fault, nonzero exit). Property cases exit 1 when the allocator"
  echo "has the property: reuse_* (a freed block not handed straight back), realloc_* (realloc moves"
  echo "the block), stale_malloc_* and stale_free_* (a freed block's bytes gone from the next block"
  echo "and from the freed one). clean_* commit no error (a false report there is counted apart)."
  echo "default = libmtpool-malloc.so preloaded; checked = with MTPOOL_CHECK=1; debugger ="
  echo "libmtpool-debug.so preloaded (checked mode, and memcpy, memset, strcpy and kin checked); peers preloaded"
  echo "with their default settings."
  echo
  local h="| case |" s="|---|" t="| **detected (of $total)** |" f="| false reports (of $controls clean) |"
  for ((j = 0; j < ncol; j++)); do
    h="$h ${col_names[$j]} |"
    s="$s---|"
    t="$t **${found[j]}** |"
    f="$f ${false_rep[j]} |"
  done
  echo "$h"
  echo "$s"
  cat "$table"
  echo "$t"
  echo "$f"
  if [ -n "$cost" ]; then
    echo
    echo "Cost on a real program, \`$cost\`: median of 3 runs, wall time and peak resident memory."
    echo
    echo "| allocator | time, peak memory |"
    echo "|---|---|"
    for ((j = 0; j < ncol; j++)); do echo "| ${col_names[$j]} | $(cost_of "$j") |"; done
  fi
}
out=$(report)
echo "$out"
[ -n "$md" ] && echo "$out" >"$md"
ng=${found[0]} nd=${found[1]} nc=${found[2]}
if [ "$nd" -ge "$ng" ]; then
  echo "target default >= glibc: met ($nd >= $ng)"
else
  echo "target default >= glibc: NOT met ($nd < $ng)"
fi
rc=0
if [ "$nc" -lt "$ng" ]; then
  echo "FAIL: mtpool checked detects $nc, glibc $ng" >&2
  rc=1
fi
if [ "$nc" -lt "$checked_floor" ]; then
  echo "FAIL: mtpool checked detects $nc, below $checked_floor" >&2
  rc=1
fi
for ((j = first_peer; j < ncol; j++)); do
  if [ "$nc" -lt "${found[j]}" ]; then
    echo "FAIL: mtpool checked detects $nc, ${col_names[$j]} ${found[j]}" >&2
    rc=1
  fi
done
if [ "$nd" -lt "${floor:-$ng}" ]; then
  echo "FAIL: mtpool default detects $nd, below ${floor:-$ng}" >&2
  rc=1
fi
for ((j = 0; j < first_peer; j++)); do
  if [ "${false_rep[j]}" != 0 ]; then
    echo "FAIL: ${col_names[$j]} reports an error in ${false_rep[j]} clean case(s)" >&2
    rc=1
  fi
done
[ $rc = 0 ] && echo "ok: glibc $ng, mtpool default $nd, checked $nc of $total"
exit $rc
