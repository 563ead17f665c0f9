#!/usr/bin/env bash
# The reference-server measurements: OpenLDAP slapd (back-mdb) and Squid, each under every
# allocator given, LD_PRELOADed into the server process only. Run by scripts/bench_servers.sh,
# which installs the packages, builds the tools and sets the variables below; not meant to be run
# alone. Appends one JSON line per server run to $SRV_OUT/servers.jsonl.
#
# Inputs (environment):
#   SRV_TOOLS      directory holding ldap_load, http_origin, http_load
#   SRV_OUT        output directory
#   SRV_ALLOCS     allocators, e.g. "glibc mtpool mimalloc"; SRV_LIB_<name> = the library to
#                  preload (empty for glibc)
#   SRV_REPS       repetitions (interleaved: repetition is the outer loop)
#   SRV_ENTRIES    slapd directory size;  SRV_SECONDS  seconds per slapd search phase
#   SRV_MIX_OPS, SRV_LARGE_MIX_OPS  operations of the slapd mix on the small and large
#                  directories (default 0.4 and 6 per entry; the same for every allocator)
#   SRV_SLAPD_DIRS "small large": the directories slapd serves, each in runs of its own: small,
#                  SRV_ENTRIES entries with descriptions of 100..2,000 bytes (uniform); large,
#                  SRV_LARGE_ENTRIES entries with descriptions of 1 KiB..1 MiB (log-uniform)
#   SRV_OBJECTS    objects Squid caches;  SRV_SQUID_VARIANTS  e.g. "off on chunked"
#   SRV_SQUID_POOL_ALLOCS  allocators that run every variant ("all": every one); the others
#                  run the first variant only (squid's pools off, the targets' configuration)
#   SRV_SERVERS    "slapd squid" (either or both)
#   SRV_AFTER_MIX  a diagnostic's shell command, run after slapd's mix (see slapd_run)
# Every process started here listens on 127.0.0.1 only and is stopped by its PID, also on error.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
: "${SRV_TOOLS:?}" "${SRV_OUT:?}" "${SRV_ALLOCS:?}"
SRV_REPS=${SRV_REPS:-3}
SRV_ENTRIES=${SRV_ENTRIES:-100000}
SRV_LARGE_ENTRIES=${SRV_LARGE_ENTRIES:-1000}
SRV_SLAPD_DIRS=${SRV_SLAPD_DIRS:-"small large"}
SRV_SECONDS=${SRV_SECONDS:-4}
SRV_OBJECTS=${SRV_OBJECTS:-100000}
SRV_SQUID_VARIANTS=${SRV_SQUID_VARIANTS:-"off on chunked"}
SRV_SQUID_POOL_ALLOCS=${SRV_SQUID_POOL_ALLOCS:-all}
SRV_SERVERS=${SRV_SERVERS:-"slapd squid"}
SLAPD=${SLAPD:-/usr/sbin/slapd}
SLAPADD=${SLAPADD:-/usr/sbin/slapadd}
SQUID=${SQUID:-/usr/sbin/squid}
BASE="dc=bench,dc=test"
ROOTDN="cn=admin,$BASE"
ROOTPW="bench-secret"
JSONL=$SRV_OUT/servers.jsonl
CLK_TCK=$(getconf CLK_TCK)

# stop_pid (stopping a process by its PID) is bench/tools/common.sh's, shared with the other
# benchmarks; this script's own note() below replaces common.sh's.
ROOT=${ROOT:-$(cd "$here/../.." && pwd)}
# shellcheck source=../tools/common.sh
. "$ROOT/bench/tools/common.sh"

note() { printf '\033[1m[servers]\033[0m %s\n' "$*" >&2; }

mkdir -p "$SRV_OUT"
WORK=$(mktemp -d /tmp/mtpool-servers.XXXXXX)
chmod 755 "$WORK"
PIDS=()

cleanup() {
  local p
  for p in "${PIDS[@]}"; do stop_pid "$p" || true; done
  PIDS=()
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'note "interrupted"; exit 130' INT TERM

forget_pid() { # drop a stopped PID from the cleanup list
  local p keep=()
  for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
  PIDS=("${keep[@]}")
}

# A TCP port on 127.0.0.1 that nothing listens on (checked in /proc/net/tcp).
free_port() {
  local p hex
  for _ in $(seq 1 50); do
    p=$((20000 + RANDOM % 40000))
    hex=$(printf ':%04X ' "$p")
    grep -q "$hex" /proc/net/tcp /proc/net/tcp6 2>/dev/null || { echo "$p"; return 0; }
  done
  return 1
}

# wait_port PID PORT SECONDS: 0 once 127.0.0.1:PORT accepts, 1 if PID died or time ran out.
wait_port() {
  local pid=$1 port=$2 n=$(($3 * 10))
  for _ in $(seq 1 "$n"); do
    kill -0 "$pid" 2>/dev/null || return 1
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

status_kb() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status" 2>/dev/null; }
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; } # utime + stime
num() { [ -n "$1" ] && echo "$1" || echo null; }
# minflt_of PID: minor page faults of the process so far; smaps_kb PID FIELD: a line of its
# /proc/PID/smaps_rollup (AnonHugePages: how much of its memory transparent huge pages back). Read
# while the server runs, at the end of the load (its data at their largest), as every suite's
# measurer reads them (bench/tools/smaps.h).
minflt_of() { sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | awk '{print $8}'; }
smaps_kb() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/smaps_rollup" 2>/dev/null; }

# mapped_ok PID LIB: the preloaded library is in the process's maps (glibc: nothing to check).
mapped_ok() {
  [ -z "$2" ] && return 0
  grep -qF "$(basename "$(readlink -f "$2")")" "/proc/$1/maps"
}

# ------------------------------------------------------------------------------------------------
# slapd
# ------------------------------------------------------------------------------------------------
# A directory's size and description lengths (gen_ldif.py's and ldap_load's --desc).
dir_entries() { if [ "$1" = large ]; then echo "$SRV_LARGE_ENTRIES"; else echo "$SRV_ENTRIES"; fi; }
dir_desc() { if [ "$1" = large ]; then echo 1024:1048576:log; else echo 100:2000; fi; }
# The mix's operations, the same for every allocator (about SRV_SECONDS of glibc's pace on the
# 2-core reference machine): the memory a server holds after it follows the entries replaced.
dir_mix_ops() {
  if [ "$1" = large ]; then echo "${SRV_LARGE_MIX_OPS:-$((SRV_LARGE_ENTRIES * 6))}"
  else echo "${SRV_MIX_OPS:-$((SRV_ENTRIES * 2 / 5))}"; fi
}

# slapd_prepare DIR: the configuration (once) and DIR's pristine database, loaded by slapadd.
slapd_prepare() {
  local d=$WORK/slapd dir=$1 entries
  entries=$(dir_entries "$dir")
  mkdir -p "$d/db.pristine.$dir"
  cat >"$d/slapd.conf" <<EOF
# The benchmark's own slapd: private configuration, nothing shared with a system slapd.
include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/inetorgperson.schema
pidfile $d/slapd.pid
argsfile $d/slapd.args
modulepath /usr/lib/ldap
moduleload back_mdb
loglevel 0
sizelimit unlimited
database mdb
maxsize 8589934592
suffix "$BASE"
rootdn "$ROOTDN"
rootpw $ROOTPW
directory $d/db
dbnosync
index objectClass eq
index uid eq
EOF
  sed "s#^directory .*#directory $d/db.pristine.$dir#" "$d/slapd.conf" >"$d/slapadd.conf"
  note "slapd: generating the $dir directory, $entries entries, and loading it with slapadd"
  local t0=$SECONDS
  python3 "$here/gen_ldif.py" --base "$BASE" --entries "$entries" --seed 42 --desc "$(dir_desc "$dir")" \
    >"$d/data.ldif" || return 1
  "$SLAPADD" -q -f "$d/slapadd.conf" -l "$d/data.ldif" >"$d/slapadd.log" 2>&1 ||
    { note "slapadd failed:"; tail -20 "$d/slapadd.log" >&2; return 1; }
  note "slapd: $dir directory ready ($(du -sh "$d/db.pristine.$dir" | cut -f1) on disk, $((SECONDS - t0)) s)"
  rm -f "$d/data.ldif"
}

# ldap_load DIR ARGS...: the client against the running slapd, sized for directory DIR.
ldap_load() { local dir=$1; shift; "$SRV_TOOLS/ldap_load" --uri "ldap://127.0.0.1:$SLAPD_PORT/" --base "$BASE" \
  --binddn "$ROOTDN" --pw "$ROOTPW" --entries "$(dir_entries "$dir")" --desc "$(dir_desc "$dir")" "$@"; }

# slapd_run ALLOC REP DIR: one fresh slapd on a fresh copy of directory DIR; one JSON line.
slapd_run() {
  local alloc=$1 rep=$2 dir=$3 d=$WORK/slapd lib var flt="" huge=""
  var=SRV_LIB_${alloc//[^A-Za-z0-9_]/_}
  lib=${!var:-}
  rm -rf "$d/db"
  cp -r "$d/db.pristine.$dir" "$d/db"
  SLAPD_PORT=$(free_port) || { note "no free port"; return 1; }
  LD_PRELOAD=$lib "$SLAPD" -f "$d/slapd.conf" -h "ldap://127.0.0.1:$SLAPD_PORT/" -d 0 \
    >"$d/slapd.log" 2>&1 </dev/null &
  local pid=$!
  PIDS+=("$pid")
  local ok=1 mapped=false scan="" s1="" s4="" mix="" rss_start="" rss_scan="" rss_end="" rss_later="" err=""
  if ! wait_port "$pid" "$SLAPD_PORT" 60; then
    err="slapd did not start"
    tail -n 5 "$d/slapd.log" >&2
    ok=0
  fi
  if [ $ok = 1 ]; then
    mapped_ok "$pid" "$lib" && mapped=true || { err="$lib not mapped in slapd"; ok=0; }
  fi
  if [ $ok = 1 ]; then
    rss_start=$(status_kb "$pid" RssAnon)
    scan=$(ldap_load "$dir" --mode scan --timeout 600) || { err="scan failed: $scan"; ok=0; }
    rss_scan=$(status_kb "$pid" RssAnon)
  fi
  [ $ok = 1 ] && { s1=$(ldap_load "$dir" --mode search --threads 1 --seconds "$SRV_SECONDS") || { err="search 1 failed: $s1"; ok=0; }; }
  [ $ok = 1 ] && { s4=$(ldap_load "$dir" --mode search --threads 4 --seconds "$SRV_SECONDS") || { err="search 4 failed: $s4"; ok=0; }; }
  # a fixed count of operations, bounded by 8x the phase's time all the same
  [ $ok = 1 ] && { mix=$(ldap_load "$dir" --mode mix --threads 4 --ops "$(dir_mix_ops "$dir")" \
                         --seconds "$((SRV_SECONDS * 8))") || { err="mix failed: $mix"; ok=0; }; }
  [ $ok = 1 ] && { rss_end=$(status_kb "$pid" RssAnon); flt=$(minflt_of "$pid"); huge=$(smaps_kb "$pid" AnonHugePages); }
  # a diagnostic's hook (not for published runs: it runs before the 1 s reading): SRV_AFTER_MIX, a
  # shell command run with SRV_PID, SRV_LOG (the server's stderr), SRV_ALLOC and SRV_DIR set
  [ $ok = 1 ] && [ -n "${SRV_AFTER_MIX:-}" ] && { SRV_PID=$pid SRV_LOG=$d/slapd.log SRV_ALLOC=$alloc \
    SRV_DIR=$dir bash -c "$SRV_AFTER_MIX" >&2 || note "SRV_AFTER_MIX failed"; }
  # and once the server has been idle for 1 s: what an allocator that decays keeps
  [ $ok = 1 ] && { sleep 1; rss_later=$(status_kb "$pid" RssAnon); }
  local rss_total
  rss_total=$(status_kb "$pid" VmRSS)
  local stopped=false
  stop_pid "$pid" && stopped=true
  forget_pid "$pid"
  python3 - "$alloc" "$rep" "$mapped" "$stopped" "$(dir_entries "$dir")" "$(num "$rss_start")" \
    "$(num "$rss_scan")" "$(num "$rss_end")" "$(num "$rss_total")" "$err" \
    "${scan:-null}" "${s1:-null}" "${s4:-null}" "${mix:-null}" "$dir" "$(dir_desc "$dir")" \
    "$(num "$rss_later")" "$(num "$flt")" "$(num "$huge")" >>"$JSONL" <<'EOF'
import json, sys
a = sys.argv[1:]
def j(s):
    try:
        return json.loads(s)
    except Exception:
        return None
scan, s1, s4, mix = (j(x) for x in a[10:14])
ops = lambda r: r.get("ops_per_s") if r and not r.get("errors") else None
print(json.dumps({
    "server": "slapd", "alloc": a[0], "rep": int(a[1]), "mapped": a[2] == "true",
    "stopped": a[3] == "true", "entries": int(a[4]), "directory": a[14], "desc": a[15],
    "rss_anon_start_kb": j(a[5]), "rss_anon_scan_kb": j(a[6]), "rss_anon_end_kb": j(a[7]),
    "rss_anon_idle_kb": j(a[16]), "minflt": j(a[17]), "anon_huge_kb": j(a[18]),
    "vm_rss_end_kb": j(a[8]),
    "scan_s": scan.get("seconds") if scan and scan.get("entries", 0) >= int(a[4]) else None,
    "scan_entries": scan.get("entries") if scan else None,
    "search1_ops": ops(s1), "search4_ops": ops(s4), "mix4_ops": ops(mix),
    "mix4_modifies": mix.get("modifies") if mix else None,
    "mix4_total": mix.get("ops") if mix else None,
    "error": a[9] or None}))
EOF
  [ $ok = 1 ] && [ "$stopped" = true ]
}

# ------------------------------------------------------------------------------------------------
# squid
# ------------------------------------------------------------------------------------------------
squid_prepare() {
  mkdir -p "$WORK/squid"
  ORIGIN_PORT=$(free_port) || return 1
  # bounded: the origin exits by itself after 3 hours at most, and is stopped by PID at the end
  "$SRV_TOOLS/http_origin" --port "$ORIGIN_PORT" --timeout 10800 >"$WORK/origin.out" 2>&1 </dev/null &
  ORIGIN_PID=$!
  PIDS+=("$ORIGIN_PID")
  wait_port "$ORIGIN_PID" "$ORIGIN_PORT" 20 || { note "origin server did not start"; return 1; }
}

# squid_run ALLOC VARIANT REP: one fresh squid; fill SRV_OBJECTS, read them all again.
squid_run() {
  local alloc=$1 variant=$2 rep=$3 lib var flt="" huge=""
  var=SRV_LIB_${alloc//[^A-Za-z0-9_]/_}
  lib=${!var:-}
  local d=$WORK/squid/run
  rm -rf "$d"
  mkdir -p "$d"
  chmod 777 "$d" # squid started as root works as the "proxy" user
  local port pools=on mempools=0
  port=$(free_port) || return 1
  [ "$variant" = off ] && pools=off
  [ "$variant" = chunked ] && mempools=1
  # cache_mem: room for every object (each takes a 4 KiB memory-cache page) with a margin
  local cache_mb=$((SRV_OBJECTS * 8 / 1024 + 64))
  cat >"$d/squid.conf" <<EOF
# The benchmark's own squid: memory cache only, 127.0.0.1 only, no DNS leaving the machine.
http_port 127.0.0.1:$port
pid_filename $d/squid.pid
cache_mem $cache_mb MB
maximum_object_size_in_memory 64 KB
memory_replacement_policy lru
memory_pools $pools
access_log none
cache_store_log none
cache_log $d/cache.log
debug_options ALL,1
logfile_rotate 0
coredump_dir $d
dns_nameservers 127.0.0.1
visible_hostname bench.invalid
shutdown_lifetime 0 seconds
pinger_enable off
acl bench_clients src 127.0.0.1/32
acl origin dst 127.0.0.1/32
http_access allow bench_clients origin
http_access deny all
refresh_pattern . 0 20% 4320
EOF
  env MEMPOOLS=$mempools LD_PRELOAD="$lib" "$SQUID" -N -f "$d/squid.conf" >"$d/squid.out" 2>&1 </dev/null &
  local pid=$!
  PIDS+=("$pid")
  local ok=1 mapped=false err="" fill="" read="" r0="" r1="" r2="" a0="" a1="" c0="" c1="" c2=""
  if ! wait_port "$pid" "$port" 60; then
    err="squid did not start"
    tail -n 5 "$d/cache.log" "$d/squid.out" >&2
    ok=0
  fi
  if [ $ok = 1 ]; then
    mapped_ok "$pid" "$lib" && mapped=true || { err="$lib not mapped in squid"; ok=0; }
  fi
  local load=("$SRV_TOOLS/http_load" --proxy "$port" --origin "$ORIGIN_PORT" --first 0
              --count "$SRV_OBJECTS" --conns 4 --timeout 900)
  if [ $ok = 1 ]; then
    sleep 0.5 # squid settles after start (its first events)
    r0=$(status_kb "$pid" VmRSS); a0=$(status_kb "$pid" RssAnon); c0=$(cpu_ticks "$pid")
    fill=$("${load[@]}") || { err="fill failed: $fill"; ok=0; }
    r1=$(status_kb "$pid" VmRSS); a1=$(status_kb "$pid" RssAnon); c1=$(cpu_ticks "$pid")
  fi
  if [ $ok = 1 ]; then
    read=$("${load[@]}") || { err="read failed: $read"; ok=0; }
    r2=$(status_kb "$pid" VmRSS); c2=$(cpu_ticks "$pid")
    flt=$(minflt_of "$pid"); huge=$(smaps_kb "$pid" AnonHugePages)
  fi
  local stopped=false
  stop_pid "$pid" && stopped=true
  forget_pid "$pid"
  python3 - "$alloc" "$variant" "$rep" "$mapped" "$stopped" "$SRV_OBJECTS" "$CLK_TCK" \
    "$(num "$r0")" "$(num "$r1")" "$(num "$r2")" "$(num "$a0")" "$(num "$a1")" \
    "$(num "$c0")" "$(num "$c1")" "$(num "$c2")" "${fill:-null}" "${read:-null}" "$err" \
    "$(num "$flt")" "$(num "$huge")" >>"$JSONL" <<'EOF'
import json, sys
a = sys.argv[1:]
def j(s):
    try:
        return json.loads(s)
    except Exception:
        return None
n, tck = int(a[5]), int(a[6])
r0, r1, r2, a0, a1, c0, c1, c2 = (j(x) for x in a[7:15])
fill, read = j(a[15]), j(a[16])
fill_ok = bool(fill) and fill.get("ok") == n and fill.get("misses") == n
read_ok = bool(read) and read.get("ok") == n and read.get("hits") == n
print(json.dumps({
    "server": "squid", "alloc": a[0], "variant": a[1], "rep": int(a[2]),
    "mapped": a[3] == "true", "stopped": a[4] == "true", "objects": n,
    "rss_start_kb": r0, "rss_filled_kb": r1, "rss_read_kb": r2,
    "bytes_per_object": (r1 - r0) * 1024 / n if fill_ok and r0 is not None and r1 is not None else None,
    "anon_bytes_per_object": (a1 - a0) * 1024 / n if fill_ok and a0 is not None and a1 is not None else None,
    "cpu_us_per_miss": (c1 - c0) * 1e6 / tck / n if fill_ok and c1 is not None else None,
    "cpu_us_per_hit": (c2 - c1) * 1e6 / tck / n if read_ok and c2 is not None else None,
    "fill": fill, "read": read, "minflt": j(a[18]), "anon_huge_kb": j(a[19]),
    "error": a[17] or (None if fill_ok and read_ok else "not every fill a miss and every read a hit")}))
EOF
  [ $ok = 1 ] && [ "$stopped" = true ]
}

# ------------------------------------------------------------------------------------------------
failures=0
for server in $SRV_SERVERS; do
  case $server in
    slapd)
      ok=1
      for dir in $SRV_SLAPD_DIRS; do slapd_prepare "$dir" || ok=0; done
      [ $ok = 1 ] || { note "slapd: preparation failed"; failures=$((failures + 1)); continue; } ;;
    squid) squid_prepare || { note "squid: preparation failed"; failures=$((failures + 1)); continue; } ;;
    *) note "unknown server $server"; exit 2 ;;
  esac
  for rep in $(seq 1 "$SRV_REPS"); do
    for alloc in $SRV_ALLOCS; do
      if [ "$server" = slapd ]; then
        for dir in $SRV_SLAPD_DIRS; do
          t0=$SECONDS
          slapd_run "$alloc" "$rep" "$dir" || { failures=$((failures + 1)); note "slapd/$alloc/$dir rep $rep FAILED: $(tail -1 "$JSONL")"; }
          note "slapd $alloc $dir directory rep $rep/$SRV_REPS: $((SECONDS - t0)) s"
        done
      else
        variants=$SRV_SQUID_VARIANTS
        case " $SRV_SQUID_POOL_ALLOCS " in
          " all " | *" $alloc "*) ;;
          *) variants=${SRV_SQUID_VARIANTS%% *} ;;
        esac
        for v in $variants; do
          t0=$SECONDS
          squid_run "$alloc" "$v" "$rep" || { failures=$((failures + 1)); note "squid/$alloc/$v rep $rep FAILED: $(tail -1 "$JSONL")"; }
          note "squid $alloc pools=$v rep $rep/$SRV_REPS: $((SECONDS - t0)) s"
        done
      fi
    done
  done
  if [ "$server" = squid ] && [ -n "${ORIGIN_PID:-}" ]; then
    stop_pid "$ORIGIN_PID" || { note "origin server did not stop"; failures=$((failures + 1)); }
    forget_pid "$ORIGIN_PID"
  fi
done
note "$failures failed runs"
[ "$failures" = 0 ]
