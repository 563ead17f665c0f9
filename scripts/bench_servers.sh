#!/usr/bin/env bash
# The reference servers on every allocator: OpenLDAP slapd (back-mdb) and Squid (memory cache),
# each LD_PRELOADed with glibc (none), mtpool (libmtpool-malloc.so), mimalloc, jemalloc, tcmalloc
# and the tbbmalloc proxy. Described in docs/servers.md.
#
#   bash scripts/bench_servers.sh            full run: 100,000 entries / objects, 3 repetitions,
#                                            every allocator; writes build-servers/results/
#                                            servers.{md,jsonl,png}
#   bash scripts/bench_servers.sh --quick    CI's smoke run (under a minute once built): small
#                                            sizes, glibc and mtpool (mimalloc if mtpool's library
#                                            is missing); writes build-servers/quick/servers.md
# Options: --allocs "glibc mtpool ..." (subset), --out DIR (where the table, chart and raw lines go),
# --publish (into the committed bench/results/, for a run the project publishes),
# --peer NAME=/path/lib.so (one more malloc, any number; NAME begins with its family, e.g.
# mimalloc-dev=...; the newest releases that scripts/build_peers.sh built are run without it).
# Environment: MTPOOL_MALLOC_LIB=/path/libmtpool-malloc.so overrides the library found in the
# build tree (build-servers/, configured and built here), MTPOOL_LIB_<alloc>=/path any allocator's
# (bench/tools/common.sh, malloc_lib); SRV_REPS, SRV_ENTRIES, SRV_LARGE_ENTRIES, SRV_OBJECTS,
# SRV_SECONDS, SRV_SQUID_VARIANTS, SRV_SQUID_POOL_ALLOCS override the sizes, SRV_SLAPD_DIRS and
# SRV_SERVERS what runs (bench/servers/run.sh).
# Installs its Debian packages when run as root (through bench/tools/common.sh). Every server it
# starts listens on 127.0.0.1 only, on a free high port, and is stopped by its PID; the system's
# own slapd or squid service, if any, is neither used nor touched.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${MTPOOL_SERVERS_BUILD:-$ROOT/build-servers}
# shellcheck disable=SC1091
. "$ROOT/bench/tools/common.sh"

# Everything this benchmark needs from Debian, in one list (installed by bench_install_deps).
SERVERS_PACKAGES="slapd ldap-utils libldap-dev squid libmimalloc2.0 libjemalloc2 libtcmalloc-minimal4
  libtbbmalloc2 gnuplot-nox python3 gcc make cmake"

quick=0 peers=""
allocs=""
out=""
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1 ;;
    --allocs) allocs=$2; shift ;;
    --out) out=$2; shift ;;
    --publish) out=$PUBLISHED ;;
    --peer) add_peer "${2:-}"; peers="$peers ${2%%=*}"; shift ;;
    *) echo "usage: $0 [--quick] [--allocs \"glibc mtpool ...\"] [--out DIR | --publish] [--peer NAME=/path/lib.so]" >&2; exit 2 ;;
  esac
  shift
done

t_start=$(date +%s)
BENCH_PACKAGES=$SERVERS_PACKAGES bench_install_deps
for tool in /usr/sbin/slapd /usr/sbin/slapadd /usr/sbin/squid; do
  [ -x "$tool" ] || { note "$tool missing (apt-get install slapd squid as root)"; exit 1; }
done

# The project, configured in a build tree of its own; only the drop-in malloc library is built.
mkdir -p "$BUILD"
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMTPOOL_BUILD_BENCH=OFF \
  -DMTPOOL_BUILD_TESTS=OFF -DMTPOOL_BUILD_EXAMPLES=OFF >"$BUILD/servers-configure.log" 2>&1 ||
  { tail -30 "$BUILD/servers-configure.log"; exit 1; }
malloc_target=$(cmake --build "$BUILD" --target help 2>/dev/null | grep -oE 'mtpool[_-]malloc\b' | head -1 || true)
if [ -n "$malloc_target" ]; then
  cmake --build "$BUILD" -j2 --target "$malloc_target" >"$BUILD/servers-build.log" 2>&1 ||
    { tail -30 "$BUILD/servers-build.log"; exit 1; }
fi
# The load tools (bench/servers/*.c), warnings as errors.
tools=$BUILD/servers-tools
mkdir -p "$tools"
for t in http_origin http_load ldap_load; do
  libs=""
  [ $t = ldap_load ] && libs="-lldap -llber -lm"
  # shellcheck disable=SC2086
  gcc -O2 -Wall -Wextra -Werror -pthread -o "$tools/$t" "$ROOT/bench/servers/$t.c" $libs
done

# Which library each allocator preloads (glibc: none), resolved by bench/tools/common.sh.
mt_lib=$(malloc_lib mtpool) || true
for a in glibc mtpool mimalloc jemalloc tcmalloc tbbmalloc $(peer_names); do
  export "SRV_LIB_$(lib_var_name "$a")=$(malloc_lib "$a" || true)"
done
have() { [ "$1" = glibc ] && return 0; local v=SRV_LIB_${1//[^A-Za-z0-9_]/_}; [ -n "${!v:-}" ] && [ -e "${!v}" ]; }
if [ -n "$mt_lib" ] && [ -e "$mt_lib" ]; then
  note "mtpool: $mt_lib"
else
  note "NOTICE: libmtpool-malloc.so not found (not in $BUILD, MTPOOL_MALLOC_LIB unset): mtpool is skipped"
fi

if [ $quick = 1 ]; then
  : "${allocs:=glibc $(have mtpool && echo mtpool || echo mimalloc)}"
  : "${out:=$BUILD/quick}"
  export SRV_REPS=${SRV_REPS:-1} SRV_ENTRIES=${SRV_ENTRIES:-5000} SRV_SECONDS=${SRV_SECONDS:-1}
  export SRV_LARGE_ENTRIES=${SRV_LARGE_ENTRIES:-60}
  export SRV_OBJECTS=${SRV_OBJECTS:-5000} SRV_SQUID_VARIANTS=${SRV_SQUID_VARIANTS:-off}
else
  : "${allocs:=glibc mtpool mimalloc jemalloc tcmalloc tbbmalloc $(peer_names)}"
  : "${out:=$BUILD/results}"
  export SRV_REPS=${SRV_REPS:-3} SRV_ENTRIES=${SRV_ENTRIES:-100000} SRV_SECONDS=${SRV_SECONDS:-3}
  export SRV_OBJECTS=${SRV_OBJECTS:-100000} SRV_SQUID_VARIANTS=${SRV_SQUID_VARIANTS:-"off on chunked"}
  export SRV_SQUID_POOL_ALLOCS=${SRV_SQUID_POOL_ALLOCS:-"glibc mtpool"}
fi
for p in $peers; do case " $allocs " in *" $p "*) ;; *) allocs="$allocs $p" ;; esac; done
run_allocs=""
for a in $allocs; do
  if have "$a"; then run_allocs="$run_allocs $a"; else note "NOTICE: $a not available; skipped"; fi
done
[ -n "$run_allocs" ] || { note "no allocator to run"; exit 1; }

mkdir -p "$out"
raw=$out/servers.jsonl
rm -f "$raw"
note "allocators:$run_allocs; output $out"
rc=0
SRV_TOOLS=$tools SRV_OUT=$out SRV_ALLOCS=$run_allocs bash "$ROOT/bench/servers/run.sh" || rc=$?
elapsed=$(( $(date +%s) - t_start ))
python3 "$ROOT/bench/servers/report.py" --in "$raw" --out "$out" --elapsed "$elapsed" \
  --machine "$(machine_line)" --skipped "$(for a in $allocs; do have "$a" || printf '%s ' "$a"; done)" \
  --mtpool-lib "$(have mtpool && echo "$mt_lib (${MTPOOL_MALLOC_LIB:+from MTPOOL_MALLOC_LIB, }$(sha256sum "$mt_lib" | cut -c1-12))")" \
  --versions "$(malloc_versions "$run_allocs")" --check "$run_allocs" || rc=1
note "done in ${elapsed} s: $out/servers.md"
results_note "$out"
exit $rc
