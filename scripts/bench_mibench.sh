#!/usr/bin/env bash
# mimalloc-bench's benchmark programs (github.com/daanx/mimalloc-bench: allocation benchmarks
# written by others, the suite allocator projects publish against) on every allocator, each
# preloaded: glibc (none), mtpool (libmtpool-malloc.so), mimalloc, jemalloc, tcmalloc, the tbbmalloc
# proxy and the newest releases scripts/build_peers.sh built. Nothing of theirs is part of this
# project; the sources are given, never fetched:
#
#   MTPOOL_MIBENCH_SRC=DIR bash scripts/bench_mibench.sh     or   bash scripts/bench_mibench.sh --src DIR
#
# DIR: a git repository of mimalloc-bench (a clone, bare or mirror; its HEAD, or --rev REV), or an
# unpacked tree (DIR/bench/CMakeLists.txt). Its self-contained programs are built with its own CMake
# file (Release) in build-mibench/ (MTPOOL_MIBENCH_BUILD); sh6bench and sh8bench, whose sources its
# scripts download, and its security suite (tests/security is the project's own) are left out. Each
# runs with the arguments mimalloc-bench's bench.sh gives it, "N" tests at --threads (default:
# nproc), measured by bench/programs/runstat.c. A test's time is its wall time, or for those that
# run a fixed time and count (larson, rptest, xmalloc-test, glibc-thread) the relative time
# bench.sh derives from the count; every process is checked to run on the malloc it was given.
# Options:
#   --reps N               repetitions (outermost loop; allocators interleaved inside); 3
#   --tests "cfrac larsonN"  a subset (default: all below)
#   --allocs "glibc mtpool ..."  a subset of the allocators
#   --peer NAME=/path/lib.so     one more malloc to preload (NAME begins with its family)
#   --threads N            the "N" tests' thread count
#   --warm-mib M           before each process, M MiB mapped advised huge, touched and unmapped
#                          (bench/programs/runstat.c): on a VM that reports free memory to its
#                          host, a program's first touches otherwise pay the host's faults too,
#                          the more so on huge pages (bench/results/notes.md); default 0
#   --out DIR              where mibench.md and mibench.jsonl go (default build-mibench/results,
#                          beside the build)
#   --publish              into the committed bench/results/ (--out bench/results): a run the
#                          project publishes, committed with the README's tables
#   --security             its security suite instead (bench/security: one heap error a program,
#                          built small, medium and large), run as bench.sh runs it: 1 s each, caught
#                          when the program does not get to print NOT_CAUGHT; mtpool twice, by
#                          default and with MTPOOL_CHECK=1 (mtpool-checked), and libmtpool-debug.so
#                          where it lies beside the drop-in (mtpool-debug): mibench-security.{md,jsonl};
#                          heap debuggers as peers: --peer efence=/usr/lib/libefence.so --peer
#                          duma=/usr/lib/libduma.so (Debian's electric-fence and duma)
#   --no-build [--mtpool-lib PATH]  build nothing of this tree: the given library (or MTPOOL_MALLOC_LIB)
# Without --no-build it installs its Debian packages when run as root and builds the Release
# libmtpool-malloc.so of this tree. Exits non-zero when a program fails or runs on another malloc.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${MTPOOL_MIBENCH_BUILD:-$ROOT/build-mibench}
# shellcheck disable=SC1091
. "$ROOT/bench/tools/common.sh"

MIB_PACKAGES="gcc g++ make cmake git python3 libmimalloc2.0 libjemalloc2 libtcmalloc-minimal4
  libtbbmalloc2"
ALL_TESTS="cfrac espresso barnes alloc-test1 alloc-testN larsonN larsonN-sized xmalloc-testN
  cache-thrash1 cache-thrashN cache-scratch1 cache-scratchN malloc-large mstressN mleak10 mleak100
  rptestN glibc-simple glibc-thread"

src=${MTPOOL_MIBENCH_SRC:-} rev=HEAD peers="" build=1 reps=3 tests="" allocs="" threads=$(nproc) out="" warm=0
security=0
usage() { sed -n '2,36p' "$0" >&2; exit 2; }
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || case $1 in --no-build | --security | --publish) ;; *) usage ;; esac
  case $1 in
    --src) src=$2; shift ;;
    --rev) rev=$2; shift ;;
    --no-build) build=0 ;;
    --security) security=1 ;;
    --mtpool-lib) export MTPOOL_LIB_mtpool=$2; shift ;;
    --reps) reps=$2; shift ;;
    --tests) tests=$2; shift ;;
    --allocs) allocs=$2; shift ;;
    --peer) add_peer "$2"; peers="$peers ${2%%=*}"; shift ;;
    --threads) threads=$2; shift ;;
    --warm-mib) warm=$2; shift ;;
    --out) out=$2; shift ;;
    --publish) out=$PUBLISHED ;;
    *) usage ;;
  esac
  shift
done
: "${tests:=$ALL_TESTS}"
: "${allocs:=glibc mtpool mimalloc jemalloc tcmalloc tbbmalloc $(peer_names)}"
for p in $peers; do case " $allocs " in *" $p "*) ;; *) allocs="$allocs $p" ;; esac; done
: "${out:=$BUILD/results}"
if [ -z "$src" ] || [ ! -d "$src" ]; then
  note "no mimalloc-bench sources: MTPOOL_MIBENCH_SRC=DIR or --src DIR"
  exit 2
fi

t_start=$(date +%s)
[ $build = 1 ] && BENCH_PACKAGES=$MIB_PACKAGES bench_install_deps
mkdir -p "$BUILD"
if [ $build = 1 ]; then
  DROPIN_TARGETS=$([ $security = 1 ] && echo mtpool_debug) build_dropin "$BUILD/mtpool" mtpool
  export MTPOOL_LIB_mtpool=${MTPOOL_LIB_mtpool:-${MTPOOL_MALLOC_LIB:-$BUILD/mtpool/malloc/libmtpool-malloc.so}}
fi

# The suite's sources: an unpacked tree as it is, or REV of a repository, into $BUILD/src.
S=$BUILD/src
rm -rf "$S" && mkdir -p "$S"
if [ -f "$src/bench/CMakeLists.txt" ] && ! git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
  cp -a "$src/bench" "$S/" && origin="tree $src"
else
  g=$(git -C "$src" rev-parse --absolute-git-dir 2>/dev/null || git --git-dir="$src" rev-parse --absolute-git-dir) ||
    { note "$src is neither a mimalloc-bench tree nor a git repository"; exit 2; }
  git --git-dir="$g" archive "$rev" bench | tar -x -C "$S"
  origin="commit $(git --git-dir="$g" rev-parse --short=12 "$rev^{commit}") of $src"
fi
if [ ! -f "$S/bench/CMakeLists.txt" ] || [ ! -f "$S/bench/cfrac/cfrac.c" ]; then
  note "$src has no mimalloc-bench bench/ directory"
  exit 2
fi
# its CMake file without the downloaded sh*bench sources and the security suite
python3 - "$S/bench/CMakeLists.txt" <<'EOF'
import re, sys
p = sys.argv[1]
s = open(p).read()
s = re.sub(r'\n\s*add_executable\(sh[68]bench[^)]*\)(\n\s*target_[a-z_]+\(sh[68]bench[^)]*\))*', '', s)
s = s.replace('add_subdirectory(security)', '')
open(p, 'w').write(s)
EOF
cmake -S "$S/bench" -B "$BUILD/bin" -DCMAKE_BUILD_TYPE=Release >"$BUILD/configure.log" 2>&1 ||
  { tail -30 "$BUILD/configure.log"; exit 1; }
cmake --build "$BUILD/bin" -j2 >"$BUILD/build.log" 2>&1 || { tail -30 "$BUILD/build.log"; exit 1; }
note "mimalloc-bench: $origin, built in $BUILD/bin"

# The measuring wrapper and the check preloaded into every process (bench/programs/).
cflags="-O2 -std=c11 -Wall -Wextra -Wshadow -Wconversion -Werror"
# shellcheck disable=SC2086
gcc $cflags -o "$BUILD/runstat" "$ROOT/bench/programs/runstat.c"
# shellcheck disable=SC2086
gcc $cflags -shared -fPIC -o "$BUILD/which_malloc.so" "$ROOT/bench/programs/which_malloc.c" -ldl
WHICH=$BUILD/which_malloc.so
which_glibc_obj "$WHICH"

resolve_allocs

# The security suite (--security): built on its own (its CMake file has no project line), each
# program run once per allocator as bench.sh runs it, and the results reported.
if [ $security = 1 ]; then
  SB=$BUILD/security
  mkdir -p "$SB/src" "$out"
  printf 'cmake_minimum_required(VERSION 3.10)\nproject(mibench_security C CXX)\nadd_subdirectory(%s sec)\n' \
    "$S/bench/security" >"$SB/src/CMakeLists.txt"
  cmake -S "$SB/src" -B "$SB/bin" -DCMAKE_BUILD_TYPE=Release >"$SB/configure.log" 2>&1 ||
    { tail -30 "$SB/configure.log"; exit 1; }
  cmake --build "$SB/bin" -j2 >"$SB/build.log" 2>&1 || { tail -30 "$SB/build.log"; exit 1; }
  cols=$run_allocs
  # mtpool's checked mode, and its heap debugger where it lies beside the drop-in
  case " $run_allocs " in *" mtpool "*)
    cols="$cols mtpool-checked"
    LIB_mtpool_debug=$(dirname "$LIB_mtpool")/libmtpool-debug.so
    [ -f "$LIB_mtpool_debug" ] && cols="$cols mtpool-debug" ;;
  esac
  raw=$out/mibench-security.jsonl
  rm -f "$raw"
  note "security suite: $(find "$SB/bin/sec" -maxdepth 1 -type f -perm -u+x | wc -l) programs; allocators:$cols"
  for prog in $(find "$SB/bin/sec" -maxdepth 1 -type f -perm -u+x -printf '%f\n' | sort); do
    for c in $cols; do
      lib_var="LIB_$(lib_var_name "${c%-checked}")"
      envs=()
      [ -n "${!lib_var:-}" ] && envs+=("LD_PRELOAD=${!lib_var}")
      [ "$c" = mtpool-checked ] && envs+=(MTPOOL_CHECK=1)
      o=$(cd "$SB" && { timeout 1s env "${envs[@]}" "$SB/bin/sec/$prog" 2>/dev/null | tr -d '\0'; echo "rc=${PIPESTATUS[0]}"; })
      prc=${o##*rc=}
      if grep -aq NOT_CAUGHT <<<"$o"; then res=missed; elif [ "$prc" = 124 ]; then res=timeout; else res=caught; fi
      printf '{"program": "%s", "alloc": "%s", "result": "%s", "rc": %s}\n' "$prog" "$c" "$res" "$prc" >>"$raw"
    done
  done
  elapsed=$(( $(date +%s) - t_start ))
  mt_lib=${LIB_mtpool:-}
  python3 "$ROOT/bench/mibench/report.py" --security --in "$raw" --out "$out" --elapsed "$elapsed" \
    --machine "$(machine_line)" --skipped "$skipped" --origin "$origin" \
    --versions "$(malloc_versions "$run_allocs")" \
    --mtpool-lib "${mt_lib:+$mt_lib ($(sha256sum "$mt_lib" | cut -c1-12))}"
  note "done in ${elapsed} s: $out/mibench-security.md"
  results_note "$out"
  exit 0
fi

# cmd_of TEST: CMD (array) and IN, as mimalloc-bench's bench.sh runs it, N = $threads.
cmd_of() {
  local n=$threads B=$BUILD/bin
  IN=/dev/null
  case $1 in
    cfrac) CMD=("$B/cfrac" 17545186520507317056371138836327483792789528) ;;
    espresso) CMD=("$B/espresso" "$S/bench/espresso/largest.espresso") ;;
    barnes) CMD=("$B/barnes") IN=$S/bench/barnes/input ;;
    alloc-test1) CMD=("$B/alloc-test" 1) ;;
    alloc-testN) CMD=("$B/alloc-test" $((n > 16 ? 16 : n))) ;;
    larsonN) CMD=("$B/larson" 5 8 1000 5000 100 4141 "$n") ;;
    larsonN-sized) CMD=("$B/larson-sized" 5 8 1000 5000 100 4141 "$n") ;;
    xmalloc-testN) CMD=("$B/xmalloc-test" -w "$n" -t 5 -s 64) ;;
    cache-thrash1) CMD=("$B/cache-thrash" 1 1000 1 2000000 "$n") ;;
    cache-thrashN) CMD=("$B/cache-thrash" "$n" 1000 1 2000000 "$n") ;;
    cache-scratch1) CMD=("$B/cache-scratch" 1 1000 1 2000000 "$n") ;;
    cache-scratchN) CMD=("$B/cache-scratch" "$n" 1000 1 2000000 "$n") ;;
    malloc-large) CMD=("$B/malloc-large") ;;
    mstressN) CMD=("$B/mstress" "$n" 50 25) ;;
    mleak10) CMD=("$B/mleak" 5) ;;
    mleak100) CMD=("$B/mleak" 50) ;;
    rptestN) CMD=("$B/rptest" "$n" 0 1 2 500 1000 100 8 16000) ;;
    glibc-simple) CMD=("$B/glibc-simple") ;;
    glibc-thread) CMD=("$B/glibc-thread" "$n") ;;
    *) note "unknown test $1 (known: ${ALL_TESTS//$'\n'/ })"; exit 2 ;;
  esac
}
for t in $tests; do cmd_of "$t"; done # unknown names fail before any run

mkdir -p "$out"
raw=$out/mibench.jsonl
rm -f "$raw"
run=$BUILD/run
mkdir -p "$run"
note "tests: ${tests//$'\n'/ }; threads: $threads; reps: $reps; warm-up: $warm MiB; allocators:$run_allocs; output $out"
rc=0
for rep in $(seq 1 "$reps"); do
  for t in $tests; do
    cmd_of "$t"
    for a in $run_allocs; do
      lib_var="LIB_$(lib_var_name "$a")"
      rm -f "$run/which.log"
      prc=0 ok=true
      line=$(cd "$run" && MTPOOL_WHICH_LOG=$run/which.log "$BUILD/runstat" --warm-mib "$warm" \
        --preload "${!lib_var:+${!lib_var} }$WHICH" --in "$IN" --out "$run/out.txt" -- "${CMD[@]}") || prc=$?
      check_log "$run/which.log" "$a" >/dev/null || ok=false
      # the fixed-time tests' own count, as bench.sh turns it into a relative time
      score=$(sed -n -e 's/.* time: \([0-9.]*\).*/larson \1/p' -e 's/^rtime: \([0-9.]*\).*/xmalloc \1/p' \
        -e 's/.*\.\.\.\([0-9]*\) memory ops.*/rptest \1/p' "$run/out.txt" | head -1)
      [ "$t" = glibc-thread ] && score="glibc-thread $(sed -n 's/^\([0-9.]*\).*/\1/p' "$run/out.txt" | head -1)"
      if [ $prc != 0 ] || [ -z "$line" ] || [ $ok = false ]; then
        note "FAILED: $a ($t, exit $prc): $(head -c 300 "$run/out.txt.err" 2>/dev/null)"
        rc=1
      fi
      python3 - "$line" "$t" "$a" "$rep" "$score" "$ok" >>"$raw" <<'EOF'
import json, sys
line, test, alloc, rep, score, ok = sys.argv[1:7]
d = json.loads("{" + line + "}") if line.strip() else {"failed": True}
d.update(test=test, alloc=alloc, rep=int(rep), on_malloc_given=ok == "true")
kind, _, val = score.partition(" ")
if val:
    v = float(val)
    # larson and xmalloc print a relative time; rptest and glibc-thread a count (bench.sh's scale)
    d["rtime"] = {"larson": v, "xmalloc": v, "rptest": 2000000 / v if v else None,
                  "glibc-thread": 1e9 / v if v else None}[kind]
print(json.dumps(d))
EOF
    done
  done
  note "repetition $rep/$reps done ($(( $(date +%s) - t_start )) s)"
done
elapsed=$(( $(date +%s) - t_start ))
mt_lib=${LIB_mtpool:-}
python3 "$ROOT/bench/mibench/report.py" --in "$raw" --out "$out" --elapsed "$elapsed" \
  --machine "$(machine_line)" --skipped "$skipped" --reps "$reps" --threads "$threads" --warm-mib "$warm" \
  --origin "$origin" --versions "$(malloc_versions "$run_allocs")" \
  --mtpool-lib "${mt_lib:+$mt_lib ($(sha256sum "$mt_lib" | cut -c1-12))}" || rc=1
note "done in ${elapsed} s: $out/mibench.md"
results_note "$out"
exit $rc
