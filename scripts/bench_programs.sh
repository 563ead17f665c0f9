#!/usr/bin/env bash
# Real programs from Debian packages, unmodified, each run under every allocator through
# LD_PRELOAD: glibc (none), mtpool (libmtpool-malloc.so), mimalloc, jemalloc, tcmalloc and the
# tbbmalloc proxy. README section "Real programs". Issue 18.
#
#   python3  bench/programs/work.py: dicts, strings, sorting (CPython's small-object allocator
#            takes blocks up to 512 B itself; lists, dicts and long strings come from malloc)
#   perl     bench/programs/work.pl: hashes, regular expressions, split/join, sort
#   sort     GNU sort of a generated file of "word number word" lines (two threads)
#   sqlite3  two tables built, indexed, joined and grouped in :memory:
#   xz       xz -6 with two threads (two block encoders)
#   g++      g++ -O2 -c of a generated template-heavy file (cc1plus, as)
#   git      git log -p over a synthetic history (made once with git fast-import, on glibc)
#   make     GNU make -j2 running many small jobs (a shell and sort each): a build tool's cost is
#            mostly its children's start-up, which every allocator adds to every process
#   ruby     bench/programs/work.rb: a text-heavy interpreter doing what a web application does
#            (templating by interpolation and gsub, scan, JSON out and back, sorting, grouping)
#   lua      bench/programs/work.lua: Lua 5.4 gets every table and string through realloc/free,
#            so an embedded interpreter's speed is its allocator's
# Inputs are made by bench/programs/gen_inputs.py from a fixed seed. Every output (stdout, and
# the object file of g++, the joined checksum of make) must be identical on every allocator.
# Plus start-up: `python3 -c pass` and a C main that mallocs once (bench/programs/hello_malloc.c),
# hundreds of runs each, interleaved in batches.
#
# Each run is measured by bench/programs/runstat.c (fork, exec, wait4): wall time, CPU time
# (user + system) and minor faults of the whole process tree, and the peak RSS of its largest
# process. Every process also gets bench/programs/which_malloc.so preloaded after the allocator
# (glibc runs too, so that all pay the same): it logs which object defines malloc and which
# allocator its symbols name, and the run fails unless every process of it ran on the one given.
#
#   bash scripts/bench_programs.sh           full run: every program and allocator, 5
#                                            repetitions, 300 start-ups each;
#                                            build-programs/results/programs.{md,jsonl,png}
#   bash scripts/bench_programs.sh --quick   CI's check: small inputs, glibc and mtpool, 1
#                                            repetition, 40 start-ups, every check
#                                            (build-programs/quick)
# Options:
#   --reps N               repetitions (outermost loop; allocators interleaved inside, the first
#                          one rotating); 5
#   --allocs "glibc mtpool ..."      a subset of the allocators
#   --peer NAME=/path/lib.so         one more malloc to preload (any number; NAME begins with its
#                          family, e.g. mimalloc-dev=...); the newest releases that
#                          scripts/build_peers.sh built are run without it (bench/tools/common.sh)
#   --programs "python3 sort ..."    a subset of the programs (and "startup")
#   --startup-runs N       start-ups per allocator and program, in batches of --batch (25)
#   --out DIR              where programs.md, programs.jsonl and programs.png go
#                          (build-programs/results, beside the build)
#   --publish              into the committed bench/results/ (--out bench/results): a run the
#                          project publishes, committed with the README's tables
#   --no-build [--mtpool-lib PATH]   build no mtpool library: use the given one (or
#                          MTPOOL_LIB_mtpool / MTPOOL_MALLOC_LIB); the small helpers are still
#                          compiled with gcc
# Environment: MTPOOL_LIB_<alloc>=/path gives an allocator's library (see malloc_lib in
# bench/tools/common.sh), MTPOOL_PROGRAMS_BUILD the build directory (build-programs).
# Installs its Debian packages (scripts/lib/install_deps.sh, MTPOOL_PROGRAMS_PACKAGES) when run
# as root; a missing peer is skipped, a missing program is an error.
# Exits non-zero when a process fails, an output differs from glibc's, or a process did not run
# on the malloc it was given.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${MTPOOL_PROGRAMS_BUILD:-$ROOT/build-programs}
# shellcheck disable=SC1091
. "$ROOT/bench/tools/common.sh"
unset LD_PRELOAD

ALL_PROGRAMS="python3 perl sort sqlite3 xz g++ git make ruby lua startup"
peers="" quick=0 build=1 reps=5 allocs="" programs="" startup_runs=300 batch=25 out=""
usage() { sed -n '2,53p' "$0" >&2; exit 2; }
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || case $1 in --quick | --no-build | --publish) ;; *) usage ;; esac
  case $1 in
    --quick) quick=1 ;;
    --no-build) build=0 ;;
    --mtpool-lib) export MTPOOL_LIB_mtpool=$2; shift ;;
    --reps) reps=$2; shift ;;
    --allocs) allocs=$2; shift ;;
    --peer) add_peer "$2"; peers="$peers ${2%%=*}"; shift ;;
    --programs) programs=$2; shift ;;
    --startup-runs) startup_runs=$2; shift ;;
    --batch) batch=$2; shift ;;
    --out) out=$2; shift ;;
    --publish) out=$PUBLISHED ;;
    *) usage ;;
  esac
  shift
done
# Input sizes: each program about 0.5-3 s under glibc on a quiet 2-core machine (full); a
# fraction of a second (quick).
if [ $quick = 1 ]; then
  [ "$reps" = 5 ] && reps=1
  [ "$startup_runs" = 300 ] && startup_runs=40
  [ "$batch" = 25 ] && batch=20
  : "${allocs:=glibc mtpool}"
  : "${out:=$BUILD/quick}"
  size=quick
  GEN="--lines 30000 --xz-bytes 200000 --commits 60 --templates 0 --rows 2000 --jobs 20"
  N_PY=15000 N_PL=15000 N_RB=10000 N_LUA=20000
else
  size=full
  GEN="--lines 600000 --xz-bytes 2000000 --commits 1500 --templates 1 --rows 40000 --jobs 400"
  N_PY=150000 N_PL=150000 N_RB=100000 N_LUA=200000
fi
: "${allocs:=glibc mtpool mimalloc jemalloc tcmalloc tbbmalloc $(peer_names)}"
for p in $peers; do case " $allocs " in *" $p "*) ;; *) allocs="$allocs $p" ;; esac; done
: "${programs:=$ALL_PROGRAMS}"
: "${out:=$BUILD/results}"
for p in $programs; do
  case " $ALL_PROGRAMS " in *" $p "*) ;; *) note "unknown program $p ($ALL_PROGRAMS)"; exit 2 ;; esac
done

t_start=$(date +%s)
# shellcheck disable=SC2086 # the list is words
BENCH_PACKAGES=$MTPOOL_PROGRAMS_PACKAGES bench_install_deps
tools=$BUILD/programs-tools
mkdir -p "$tools"
if [ $build = 1 ]; then
  # The project's drop-in malloc, Release, in a build tree of its own (as scripts/bench_gp.sh).
  build_dropin "$BUILD" programs
  export MTPOOL_LIB_mtpool=${MTPOOL_LIB_mtpool:-${MTPOOL_MALLOC_LIB:-$BUILD/malloc/libmtpool-malloc.so}}
fi
# The measuring wrapper, the check preloaded into every process, and the start-up program: plain
# C, warnings as errors, no allocator linked in.
cflags="-O2 -std=c11 -Wall -Wextra -Wshadow -Wconversion -Werror"
# shellcheck disable=SC2086
gcc $cflags -o "$tools/runstat" "$ROOT/bench/programs/runstat.c"
# shellcheck disable=SC2086
gcc $cflags -shared -fPIC -o "$tools/which_malloc.so" "$ROOT/bench/programs/which_malloc.c" -ldl
# shellcheck disable=SC2086
gcc $cflags -o "$tools/hello_malloc" "$ROOT/bench/programs/hello_malloc.c"
RUNSTAT=$tools/runstat WHICH=$tools/which_malloc.so

resolve_allocs
read -r -a AL <<<"$run_allocs"

# Debian's programs, by path (a python3 or ruby earlier in PATH may be a wrapper script).
SYS_PATH=/usr/sbin:/usr/bin:/sbin:/bin
need="python3 sha256sum git"
for p in $programs; do
  case $p in lua) need="$need lua5.4" ;; startup) ;; *) need="$need $p" ;; esac
done
for b in $need; do
  [ -x "/usr/bin/$b" ] || { note "/usr/bin/$b not found (its Debian package is missing; run as root to install it)"; exit 1; }
done

# Inputs, made once per size (on glibc, not measured).
work=$BUILD/programs-$size
stamp="$GEN $(sha256sum "$ROOT/bench/programs/gen_inputs.py" | cut -c1-16)"
if [ "$(cat "$work/.stamp" 2>/dev/null)" != "$stamp" ]; then
  note "making the inputs ($size) in $work"
  rm -rf "$work"
  mkdir -p "$work"
  # shellcheck disable=SC2086
  /usr/bin/python3 "$ROOT/bench/programs/gen_inputs.py" "$work" $GEN
  git init -q --bare "$work/repo.git"
  (export GIT_CONFIG_NOSYSTEM=1 HOME=$work; git -C "$work/repo.git" fast-import --quiet <"$work/history.fi")
  rm -f "$work/history.fi"
  echo "$stamp" >"$work/.stamp"
fi
P=$ROOT/bench/programs
run=$work/run
# the machine and tree before this run rewrites its results (published: tracked files)
machine=$(machine_line)
mkdir -p "$out"
raw=$out/programs.jsonl
rm -f "$raw"

# The object that defines malloc in a process with nothing preloaded but the check.
which_glibc_obj "$WHICH"

# program_cmd NAME: sets CMD (argv), EXTRA (output files to check besides stdout), IN (stdin).
program_cmd() {
  IN=/dev/null EXTRA=()
  case $1 in
    python3) CMD=(/usr/bin/python3 "$P/work.py" "$N_PY") ;;
    perl) CMD=(/usr/bin/perl "$P/work.pl" "$N_PL") ;;
    sort) CMD=(/usr/bin/sort "$work/lines.txt") ;;
    sqlite3) CMD=(/usr/bin/sqlite3 :memory:) IN=$work/join.sql ;;
    xz) CMD=(/usr/bin/xz -6 -T2 --block-size=1MiB -c "$work/xz.in") ;;
    g++) CMD=(/usr/bin/g++ -std=c++17 -O2 -frandom-seed=mtpool -c "$work/templates.cpp" -o "$run/templates.o")
      EXTRA=("$run/templates.o") ;;
    git) CMD=(/usr/bin/git -C "$work/repo.git" log -p main) ;;
    make) CMD=(/usr/bin/make -s -j2 -C "$run/mk") EXTRA=("$run/mk/all.sum") ;;
    ruby) CMD=(/usr/bin/ruby "$P/work.rb" "$N_RB") ;;
    lua) CMD=(/usr/bin/lua5.4 "$P/work.lua" "$N_LUA") ;;
  esac
}

rc=0
env_run=(env -i PATH=$SYS_PATH LC_ALL=C HOME="$work" GIT_CONFIG_NOSYSTEM=1 TMPDIR="$run/tmp")
load1() { cut -d' ' -f1 /proc/loadavg; }

# one_run PROGRAM ALLOC REP: prepares a clean directory, runs, checks, appends a JSON line.
one_run() {
  local p=$1 a=$2 rep=$3 lib_var=LIB_${2//[^A-Za-z0-9_]/_} preload line prc=0 procs sum ok=true
  preload=${!lib_var:-}
  preload=${preload:+$preload:}$WHICH
  rm -rf "$run" && mkdir -p "$run/tmp"
  [ "$p" = make ] && cp -a "$work/mk" "$run/mk"
  program_cmd "$p"
  local log=$run/which.log ld
  ld=$(load1)
  line=$("${env_run[@]}" MTPOOL_WHICH_LOG="$log" "$RUNSTAT" --preload "$preload" --in "$IN" \
    --out "$run/stdout" --dir "$run" -- "${CMD[@]}") || prc=$?
  procs=$(check_log "$log" "$a") || ok=false
  sum=$(cat "$run/stdout" "${EXTRA[@]}" 2>/dev/null | sha256sum | cut -c1-16)
  if [ $prc != 0 ] || [ -z "$line" ]; then
    note "FAILED: $p on $a (exit $prc): $(tail -c 300 "$run/stdout.err" 2>/dev/null)"
    ok=false
  fi
  $ok || rc=1
  echo "{\"program\": \"$p\", \"alloc\": \"$a\", \"rep\": $rep, \"size\": \"$size\", \"load1\": $ld, ${line:-\"rc\": $prc}, \"procs\": $procs, \"preload_ok\": $ok, \"checksum\": \"$sum\"}" >>"$raw"
}

# startup_batch PROGRAM ALLOC ROUND: BATCH start-ups in a row, one JSON line.
startup_batch() {
  local p=$1 a=$2 round=$3 lib_var=LIB_${2//[^A-Za-z0-9_]/_} preload line prc=0 procs ok=true ld
  preload=${!lib_var:-}
  preload=${preload:+$preload:}$WHICH
  rm -rf "$run" && mkdir -p "$run/tmp"
  case $p in
    python3) CMD=(/usr/bin/python3 -c pass) ;;
    hello) CMD=("$tools/hello_malloc") ;;
  esac
  ld=$(load1)
  line=$("${env_run[@]}" MTPOOL_WHICH_LOG="$run/which.log" "$RUNSTAT" --preload "$preload" \
    --repeat "$batch" --dir "$run" -- "${CMD[@]}") || prc=$?
  procs=$(check_log "$run/which.log" "$a") || ok=false
  [ "$procs" = "$batch" ] || { note "FAILED: $p on $a: $procs processes logged, $batch run"; ok=false; }
  [ $prc = 0 ] || { note "FAILED: start-up of $p on $a (exit $prc)"; ok=false; }
  $ok || rc=1
  echo "{\"startup\": \"$p\", \"alloc\": \"$a\", \"round\": $round, \"load1\": $ld, ${line:-\"rc\": $prc}, \"procs\": $procs, \"preload_ok\": $ok}" >>"$raw"
}

progs=$(echo " $programs " | sed 's/ startup / /')
note "programs:$progs; allocators:$run_allocs; reps: $reps; inputs: $size; output $out"
for rep in $(seq 1 "$reps"); do
  for p in $progs; do
    # the allocators in turn, the first one rotating from one repetition to the next
    for i in "${!AL[@]}"; do
      one_run "$p" "${AL[$(( (i + rep - 1) % ${#AL[@]} ))]}" "$rep"
    done
  done
  note "repetition $rep/$reps done ($(( $(date +%s) - t_start )) s, load $(load1))"
done

if [[ " $programs " = *" startup "* ]]; then
  rounds=$(( (startup_runs + batch - 1) / batch ))
  note "start-up: $((rounds * batch)) runs per allocator and program, in batches of $batch"
  for round in $(seq 1 "$rounds"); do
    for p in python3 hello; do
      for i in "${!AL[@]}"; do
        startup_batch "$p" "${AL[$(( (i + round - 1) % ${#AL[@]} ))]}" "$round"
      done
    done
  done
fi
rm -rf "$run"
elapsed=$(( $(date +%s) - t_start ))
mt_lib=${LIB_mtpool:-}
python3 "$ROOT/bench/programs/report.py" --in "$raw" --out "$out" --elapsed "$elapsed" \
  --machine "$machine" --skipped "$skipped" --reps "$reps" --size "$size" \
  --inputs "$GEN --python $N_PY --perl $N_PL --ruby $N_RB --lua $N_LUA" \
  --mtpool-lib "${mt_lib:+$mt_lib ($(sha256sum "$mt_lib" | cut -c1-12))}" \
  --versions "$(malloc_versions "$run_allocs")" || rc=1
note "done in ${elapsed} s: $out/programs.md"
results_note "$out"
exit $rc
