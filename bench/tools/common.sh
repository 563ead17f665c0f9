# Shared by scripts/bench.sh, bench_full.sh, bench_servers.sh (and bench/servers/run.sh),
# bench_gp.sh, bench_programs.sh, bench_mibench.sh, bench_musl.sh, bench_latency.sh,
# bench_stress.sh, test_suites.sh, build_peers.sh and bench/gp/*.sh (sourced, not run).
# Expects ROOT (the repository) and BUILD (the build directory) to be set.

note() { printf '\033[1m[bench]\033[0m %s\n' "$*" >&2; }

# Where a run's results go. Every script writes its tables, charts and raw lines beside its build
# ($BUILD/results, or the file there) by default, never into the committed bench/results/, whose
# files README.md's tables are checked against (scripts/readme_tables.py --check, test stage docs):
# a user's run must not break the user's tests. Publishing there is a developer's explicit choice:
# --publish (the same as --out bench/results), then commit the files with the README's tables.
PUBLISHED=$ROOT/bench/results

# results_note PATH: says at the end of a run where its results are (PATH: their directory or
# file), and whether that is the committed bench/results/.
results_note() {
  local d=$1 pub
  [ -d "$d" ] || d=$(dirname "$d")
  d=$(cd "$d" 2>/dev/null && pwd -P) || d=$1
  pub=$(cd "$PUBLISHED" && pwd -P)
  case $d/ in
    "$pub"/*) note "results published into bench/results/: tracked files; commit them, and where" \
      "the README quotes them run python3 scripts/readme_tables.py --write" ;;
    *) note "results in $1 (bench/results/ untouched; --publish writes there)" ;;
  esac
}

# shellcheck source=../../scripts/lib/install_deps.sh
. "$ROOT/scripts/lib/install_deps.sh"

# Install what is missing (as root), or say what is missing and go on: peers are optional.
# BENCH_PACKAGES, when set, is the calling script's own list (default: the suite's).
bench_install_deps() {
  # shellcheck disable=SC2086 # the list is words
  install_deps optional ${BENCH_PACKAGES:-$MTPOOL_BENCH_PACKAGES} || true
  note "packages checked"
}

# build_dropin DIR NAME [CMAKE_ARG...]: this tree's drop-in malloc (target mtpool_malloc, and the
# targets in DROPIN_TARGETS beside it), Release, in the build tree DIR, logs DIR/NAME-configure.log
# and DIR/NAME-build.log (their tail shown, and the script ends, on a failure).
build_dropin() {
  local dir=$1 name=$2
  shift 2
  mkdir -p "$dir"
  cmake -S "$ROOT" -B "$dir" "$@" -DCMAKE_BUILD_TYPE=Release -DMTPOOL_BUILD_TESTS=OFF \
    -DMTPOOL_BUILD_EXAMPLES=OFF >"$dir/$name-configure.log" 2>&1 || { tail -30 "$dir/$name-configure.log"; exit 1; }
  # shellcheck disable=SC2086 # the list is words
  cmake --build "$dir" -j2 --target mtpool_malloc ${DROPIN_TARGETS:-} >"$dir/$name-build.log" 2>&1 ||
    { tail -30 "$dir/$name-build.log"; exit 1; }
}

bench_build() {
  note "configuring $BUILD (Release, MTPOOL_BUILD_BENCH=ON)"
  mkdir -p "$BUILD"
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DMTPOOL_BUILD_BENCH=ON >"$BUILD/bench-configure.log" 2>&1 ||
    { cat "$BUILD/bench-configure.log"; exit 1; }
  grep -i "NOTICE" "$BUILD/bench-configure.log" >&2 || true
  local targets="--target mtpool_proc --target mtpool_proc_cow"
  # BENCH_NO_GBENCH=1: the process-level drivers only (scripts/bench.sh runs no Google Benchmark)
  [ -n "${BENCH_NO_GBENCH:-}" ] || grep -q "mtpool_bench is not built" "$BUILD/bench-configure.log" ||
    targets="$targets --target mtpool_bench"
  cmake --build "$BUILD" -j"$(nproc)" $targets >"$BUILD/bench-build.log" 2>&1 || { tail -50 "$BUILD/bench-build.log"; exit 1; }
  PROC="$BUILD/bench/mtpool_proc"
  PROC_COW="$BUILD/bench/mtpool_proc_cow"
  GBENCH="$BUILD/bench/mtpool_bench"
  # shellcheck disable=SC1091
  . "$BUILD/bench/peers.env"
}

# malloc_lib NAME: prints the library that LD_PRELOAD takes to run a program on the malloc NAME
# (glibc, mtpool, mimalloc, jemalloc, tcmalloc, tbbmalloc, or a peer named by path: see
# peer_libs); glibc needs none and prints nothing.
# MTPOOL_LIB_<NAME>=/path overrides the search (a machine without apt-get: any copy of the
# library); for mtpool MTPOOL_MALLOC_LIB too, then libmtpool-malloc.so under $BUILD; the peers
# are found by soname in the loader's cache (Debian: libmimalloc2.0, libjemalloc2,
# libtcmalloc-minimal4, libtbbmalloc2). Returns 1 when NAME has no library on this machine.
malloc_lib() {
  local var=MTPOOL_LIB_${1//[^A-Za-z0-9_]/_} lib="" soname="" ldconfig
  case $1 in
    glibc) return 0 ;;
    mtpool) lib=${!var:-${MTPOOL_MALLOC_LIB:-}}
      [ -n "$lib" ] || lib=$(find "$BUILD" -name 'libmtpool-malloc.so' -type f 2>/dev/null | head -1) ;;
    mimalloc) soname=libmimalloc.so.2 ;;
    jemalloc) soname=libjemalloc.so.2 ;;
    tcmalloc) soname=libtcmalloc_minimal.so.4 ;;
    tbbmalloc) soname=libtbbmalloc_proxy.so.2 ;;
    *) lib=${!var:-}
      [ -n "$lib" ] || lib=$(peer_libs | awk -v n="$1" '$1 == n {print $2; exit}')
      [ -n "$lib" ] || return 1 ;;
  esac
  if [ -n "$soname" ]; then
    lib=${!var:-}
    ldconfig=$(command -v ldconfig || echo /sbin/ldconfig)
    [ -n "$lib" ] || lib=$("$ldconfig" -p 2>/dev/null | awk -v s="$soname" '$1 == s {print $NF; exit}')
  fi
  [ -n "$lib" ] && [ -e "$lib" ] && echo "$lib"
}

# lib_var_name NAME: NAME as a shell variable's name ends (mimalloc-2.4.1 -> mimalloc_2_4_1).
lib_var_name() { printf '%s' "${1//[^A-Za-z0-9_]/_}"; }

# Peers named by path, beside Debian's packaged ones: the newest releases that
# scripts/build_peers.sh builds into MTPOOL_PEERS_DIR (default ~/.cache/mtpool-peers, one directory
# <name>-<version>/ per peer holding one lib*.so and the file `version`), then any library named by
# MTPOOL_PEERS="name=/path/lib.so ..." (every script's --peer name=/path adds to it). A peer's name
# begins with the allocator its symbols name (mimalloc-2.4.1, snmalloc-0.7.5, jemalloc-dev, ...):
# the suites check each process against it (malloc_family).
MTPOOL_PEERS_DIR=${MTPOOL_PEERS_DIR:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/mtpool-peers}

# peer_libs: prints "name /path/lib.so" for every peer named by path that exists on this machine.
peer_libs() {
  local d lib p
  for d in "$MTPOOL_PEERS_DIR"/*/; do
    [ -f "${d}version" ] || continue
    lib=$(find "$d" -maxdepth 1 -name 'lib*.so' \( -type f -o -type l \) 2>/dev/null | sort | head -1)
    [ -n "$lib" ] && echo "$(basename "$d") $lib"
  done
  for p in ${MTPOOL_PEERS:-}; do
    [ "${p#*=}" != "$p" ] && [ -e "${p#*=}" ] && echo "${p%%=*} ${p#*=}"
  done
  return 0
}

# peer_names: the names of peer_libs, in order, once each.
peer_names() { peer_libs | awk '!seen[$1]++ {printf "%s ", $1}'; }

# add_peer NAME=/path/lib.so: one more peer for this run (the scripts' --peer).
add_peer() {
  case $1 in
    ?*=?*) [ -e "${1#*=}" ] || { note "--peer $1: no such file"; exit 2; }
      export MTPOOL_PEERS="${MTPOOL_PEERS:+$MTPOOL_PEERS }$1" ;;
    *) note "--peer takes NAME=/path/lib.so"; exit 2 ;;
  esac
}

# malloc_family NAME: the allocator a process preloaded with NAME finds by its symbols (what
# bench/tools/malloc_name.h prints): the part of the name before its first '-'.
malloc_family() { printf '%s' "${1%%-*}"; }

# malloc_version NAME: the version of the library malloc_lib NAME preloads: Debian's package
# version for the packaged peers, the `version` file that build_peers.sh wrote for the built
# ones, the path for a library named otherwise.
malloc_version() {
  local a=$1 pkg="" lib var=MTPOOL_LIB_${1//[^A-Za-z0-9_]/_} d
  case $a in
    glibc) pkg=libc6 ;;
    mtpool) echo "this tree, ${MTPOOL_TREE_REV:-$(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)}"
      return 0 ;;
    mimalloc) pkg=libmimalloc2.0 ;;
    jemalloc) pkg=libjemalloc2 ;;
    tcmalloc) pkg=libtcmalloc-minimal4 ;;
    tbbmalloc) pkg=libtbbmalloc2 ;;
  esac
  lib=$(malloc_lib "$a") || return 1
  if [ -n "$pkg" ] && [ -z "${!var:-}" ]; then
    echo "$(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null || echo '?') (Debian $pkg)"
    return 0
  fi
  d=$(dirname "$lib")
  if [ -f "$d/version" ] && [ "$d" = "${MTPOOL_PEERS_DIR%/}/$(basename "$d")" ]; then
    head -1 "$d/version"
  else
    echo "$lib"
  fi
}

# malloc_versions "NAME ...": one line, "name version; name version; ...", for the reports.
malloc_versions() {
  local a out=""
  for a in $1; do out="${out:+$out; }$a $(malloc_version "$a" || echo '?')"; done
  printf '%s' "$out"
}

# Allocators to run: every family built into the driver, then the malloc replacements.
# Peers named by path (peer_libs) last; MTPOOL_BENCH_ALLOCS="mtpool std mimalloc-2.4.1 ..." picks
# a subset.
bench_allocators() {
  if [ -n "${MTPOOL_BENCH_ALLOCS:-}" ]; then
    echo "$MTPOOL_BENCH_ALLOCS" | tr ' ' '\n' | grep .
    return 0
  fi
  "$PROC" --list 2>/dev/null | cut -f1
  echo tcmalloc jemalloc mimalloc $(peer_names) | tr ' ' '\n'
}

# run_proc OUT TIMEOUT DRIVER ALLOC ARGS...: one process, one JSON line appended to OUT.
# A peer named by path (peer_libs) runs std::allocator with its library preloaded; its line gets
# "peer": NAME (the driver itself only sees the allocator's family). Returns 3 on timeout, 4 if the
# allocator is missing.
run_proc() {
  local out=$1 timeout=$2 driver=$3 alloc=$4
  shift 4
  local preload="" key=$alloc peer=""
  case $alloc in
    tcmalloc | jemalloc | mimalloc)
      preload=${!alloc}
      key=std
      if [ -z "$preload" ] || [ ! -e "$preload" ]; then
        echo "{\"alloc\": \"$alloc\", \"malloc\": \"$alloc\", \"missing\": true}" >>"$out"
        return 4
      fi
      ;;
    *)
      if [[ " $(peer_names) " = *" $alloc "* ]]; then
        preload=$(malloc_lib "$alloc") key=std peer=$alloc
      fi
      ;;
  esac
  local line rc
  line=$(LD_PRELOAD=$preload "$driver" --alloc "$key" --timeout "$timeout" "$@" 2>/dev/null)
  rc=$?
  [ -n "$line" ] && [ -n "$peer" ] && line="${line%\}}, \"peer\": \"$peer\"}"
  [ -n "$line" ] && echo "$line" >>"$out"
  return $rc
}

# run_matrix OUT TIMEOUT REPS "VARIANT..." : every allocator x variant x repetition, repetitions
# outermost so that noise spreads evenly. A variant is "driver|args" (args space-separated).
# An allocator that times out once in this matrix is not run again in it (noted in the report).
run_matrix() {
  local out=$1 timeout=$2 reps=$3 variants=$4
  declare -A skip=()
  local allocs
  allocs=$(bench_allocators)
  for rep in $(seq 1 "$reps"); do
    for v in $variants; do
      local driver=${v%%|*} args=${v#*|}
      for a in $allocs; do
        [ -n "${skip[$a]:-}" ] && continue
        run_proc "$out" "$timeout" "$driver" "$a" ${args//,/ }
        case $? in
          0) ;;
          3) note "NOTICE: $a timed out after ${timeout}s (${args//,/ }); not rerun in this table"; skip[$a]=1 ;;
          4) [ "$rep" = 1 ] && note "NOTICE: $a not available; skipped"; skip[$a]=1 ;;
          *) note "NOTICE: $a failed (${args//,/ })" ;;
        esac
      done
    done
    note "repetition $rep/$reps done"
  done
}

seed_variants() {
  echo "$PROC|--test,seed,--threads,4,--len,9,--warm-mib,512 $PROC|--test,seed,--threads,4,--len,40,--warm-mib,512 $PROC_COW|--test,seed,--threads,4,--len,9,--warm-mib,512 $PROC_COW|--test,seed,--threads,4,--len,40,--warm-mib,512"
}

footprint_variants() {
  echo "$PROC|--test,footprint,--threads,4,--kind,list_int $PROC|--test,footprint,--threads,4,--kind,map_int $PROC|--test,footprint,--threads,4,--kind,list_str40"
}

# resolve_allocs: for each allocator of $allocs, its library (malloc_lib) into LIB_<alloc> (glibc:
# empty), noting it; sets run_allocs (those found) and skipped (the others); exits when none is left.
resolve_allocs() {
  local a lib
  run_allocs="" skipped=""
  for a in $allocs; do
    lib=$(malloc_lib "$a") || { note "NOTICE: $a not available; skipped"; skipped="$skipped $a"; continue; }
    run_allocs="$run_allocs $a"
    declare -g "LIB_$(lib_var_name "$a")=$lib"
    [ -n "$lib" ] && note "$a: $lib"
  done
  [ -n "$run_allocs" ] || { note "no allocator to run"; exit 1; }
}

# build_latency_driver DIR: bench/latency/latency.c compiled into DIR/latency (plain C, warnings
# as errors, no allocator linked in): the driver of scripts/bench_latency.sh and bench_stress.sh.
build_latency_driver() {
  mkdir -p "$1"
  gcc -O2 -std=c11 -Wall -Wextra -Wshadow -Wconversion -Werror -pthread \
    -o "$1/latency" "$ROOT/bench/latency/latency.c" -ldl
}

# run_preloaded RAW TIMEOUT ALLOC CASE DRIVER ARG...: one process of DRIVER on the malloc ALLOC
# (LD_PRELOAD of LIB_<alloc>, set by resolve_allocs), under `timeout TIMEOUT`; its JSON line is
# appended to RAW. A process that times out or fails appends instead a line of CASE (the JSON
# fields naming the run, e.g. '"test": "server", "load": "idle"') with "alloc" and "timeout_s"
# or "failed" (its exit status). Returns 0, 3 on a timeout, 1 on a failure (noted with the head
# of its standard error).
run_preloaded() {
  local raw=$1 timeout=$2 a=$3 case=$4 lib_var line rc=0 err
  shift 4
  lib_var="LIB_$(lib_var_name "$a")"
  err=$(mktemp)
  line=$(LD_PRELOAD=${!lib_var:-} timeout "$timeout" "$@" 2>"$err") || rc=$?
  if [ $rc = 0 ] && [ -n "$line" ]; then
    echo "$line" >>"$raw"
  elif [ $rc = 124 ]; then
    note "NOTICE: $a timed out after $timeout s ($*)"
    echo "{$case, \"alloc\": \"$a\", \"timeout_s\": $timeout}" >>"$raw"
    rc=3
  else
    note "FAILED: $a (exit $rc; $*): $(head -c 300 "$err")"
    echo "{$case, \"alloc\": \"$a\", \"failed\": $rc}" >>"$raw"
    rc=1
  fi
  rm -f "$err"
  return $rc
}

# which_glibc_obj WHICH: sets glibc_obj, the object bench/programs/which_malloc.so (at WHICH) logs
# as defining malloc in a process on glibc's, which check_log wants of the glibc runs; exits if none.
which_glibc_obj() {
  glibc_obj=$(tmp=$(mktemp) && MTPOOL_WHICH_LOG=$tmp LD_PRELOAD=$1 /bin/true && cut -d' ' -f2 "$tmp" && rm -f "$tmp")
  [ -n "$glibc_obj" ] || { note "which_malloc.so logged nothing for /bin/true"; exit 1; }
}

# check_log LOG ALLOC: prints the number of processes bench/programs/which_malloc.so logged in LOG;
# returns 1 (with a note) unless every one found malloc in the library ALLOC was given (LIB_<alloc>,
# or for glibc $glibc_obj: which_glibc_obj) and its symbols named ALLOC.
check_log() {
  local log=$1 a=$2 lib_var=LIB_${2//[^A-Za-z0-9_]/_} want n bad
  want=${!lib_var:-$glibc_obj}
  n=$(wc -l <"$log" 2>/dev/null || echo 0)
  echo "$n"
  [ "$n" -gt 0 ] || { note "FAILED: no process logged by which_malloc.so ($a)"; return 1; }
  bad=$(awk -v w="$want" -v a="$(malloc_family "$a")" '$2 != w || $3 != a' "$log" | head -3)
  [ -z "$bad" ] || { note "FAILED: not on $a ($want): $bad"; return 1; }
}

# stop_pid PID: SIGTERM, up to 20 s for it to exit, then SIGKILL; reaps it. 0 when it is gone.
# Every process a benchmark starts in the background is stopped this way, by its own PID.
stop_pid() {
  local pid=$1 i state
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null
  for i in $(seq 1 200); do
    state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)
    [ -z "$state" ] || [ "$state" = Z ] && break
    sleep 0.1
  done
  state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)
  if [ -n "$state" ] && [ "$state" != Z ]; then
    note "NOTICE: PID $pid did not exit on SIGTERM within 20 s; SIGKILL"
    kill -KILL "$pid" 2>/dev/null
  fi
  wait "$pid" 2>/dev/null
  state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)
  [ -z "$state" ]
}

# start_hogs N CMD [ARG...]: N copies of CMD in the background, a CPU hog each (a busy loop that
# ends by itself: bench/latency/latency --spin SECONDS); their PIDs go to HOG_PIDS. stop_hogs
# stops each by its PID (stop_pid). The caller traps EXIT to stop_hogs, so that none outlives it.
HOG_PIDS=()
start_hogs() {
  local n=$1 i
  shift
  for i in $(seq 1 "$n"); do
    "$@" >/dev/null 2>&1 &
    HOG_PIDS+=("$!")
  done
}
stop_hogs() {
  local p
  for p in "${HOG_PIDS[@]}"; do stop_pid "$p" || true; done
  HOG_PIDS=()
}

machine_line() {
  local cpu cores mem kernel
  cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')
  cores=$(nproc)
  mem=$(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)
  kernel=$(uname -r)
  local rev
  rev=${MTPOOL_TREE_REV:-$(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown)}
  local thp
  thp=$(sed -n 's/.*\[\(.*\)\].*/\1/p' /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)
  echo "$cpu, $cores cores, $mem RAM, Linux $kernel${thp:+ (transparent huge pages: $thp)}, $(. /etc/os-release && echo "$PRETTY_NAME"), $(g++ --version 2>/dev/null | head -1), mtpool tree $rev, $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
}
