#!/usr/bin/env bash
# Builds the newest releases of the peer allocators from their release sources into preloadable
# libraries, which every benchmark script then runs beside Debian's packaged peers:
#
#   mimalloc-2.4.1   libmimalloc.so      (git tag v2.4.1; its CMake, Release, default options)
#   mimalloc-3.4.3   libmimalloc.so      (git tag v3.4.3; the same)
#   snmalloc-0.7.5   libsnmallocshim.so  (git tag 0.7.5; its CMake target snmallocshim, Release)
#
# into MTPOOL_PEERS_DIR (default ~/.cache/mtpool-peers), outside the repository: one directory
# <name>-<version>/ per peer with the library and a file `version` (the release, the commit, the
# compiler). Nothing of theirs is part of this project; the sources are given, never fetched:
#
#   MTPOOL_PEER_SRC=DIR bash scripts/build_peers.sh      or   bash scripts/build_peers.sh --src DIR
#
# DIR (several: separated by ':') holds, for each project, either a git repository with the
# release tags (a clone, a bare or mirror repository: DIR/mimalloc, DIR/mimalloc.git,
# DIR/*+mimalloc/repo, DIR/mimalloc/repo), or an unpacked release tree named DIR/mimalloc-2.4.1
# (or mimalloc-v2.4.1). DIR may also be one such repository itself.
# Options:
#   --only "mimalloc-3.4.3 ..."   a subset;   --dest DIR   instead of MTPOOL_PEERS_DIR
#   --rebuild                     build again what is there already
#   --list                        say what is built and where, and exit 0 (nothing is built)
# Builds in DEST/<name>-<version>/build with -j2 (MTPOOL_PEER_JOBS). A peer that is built already
# is kept. Exits non-zero when a peer asked for cannot be built (no source for it, or a failed
# build: the log's tail is shown); the benchmark scripts run without the missing ones.
# Needs git, cmake (3.13 or later), make and a C++ compiler: g++ 12 or clang 14 (Debian 12) build
# all three.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$ROOT/build # not used here; common.sh expects it
# shellcheck disable=SC1091
. "$ROOT/bench/tools/common.sh"

PEERS="mimalloc-2.4.1 mimalloc-3.4.3 snmalloc-0.7.5"
src=${MTPOOL_PEER_SRC:-} dest=$MTPOOL_PEERS_DIR only="" rebuild=0 list=0
jobs=${MTPOOL_PEER_JOBS:-2}
usage() { sed -n '2,29p' "$0" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --src) [ $# -ge 2 ] || usage; src=$2; shift ;;
    --dest) [ $# -ge 2 ] || usage; dest=$2; shift ;;
    --only) [ $# -ge 2 ] || usage; only=$2; shift ;;
    --rebuild) rebuild=1 ;;
    --list) list=1 ;;
    *) usage ;;
  esac
  shift
done
for p in $only; do
  case " $PEERS " in *" $p "*) ;; *) note "unknown peer $p (known: $PEERS)"; exit 2 ;; esac
done
: "${only:=$PEERS}"

if [ $list = 1 ]; then
  for p in $PEERS; do
    lib=$(find "$dest/$p" -maxdepth 1 -name 'lib*.so' 2>/dev/null | head -1)
    if [ -n "$lib" ] && [ -f "$dest/$p/version" ]; then
      echo "$p: $lib ($(head -1 "$dest/$p/version"))"
    else
      echo "$p: not built (bash scripts/build_peers.sh --src DIR)"
    fi
  done
  exit 0
fi

# tag_of NAME VERSION: the release tag of the project.
tag_of() { case $1 in mimalloc) echo "v$2" ;; *) echo "$2" ;; esac; }

# git_dir_of PATH: prints the git directory of a repository at PATH (bare, mirror or work tree).
git_dir_of() {
  local g
  g=$(git -C "$1" rev-parse --absolute-git-dir 2>/dev/null) || g=$(git --git-dir="$1" rev-parse --absolute-git-dir 2>/dev/null) || return 1
  echo "$g"
}

# unpack NAME VERSION OUT: the release's sources into OUT (a fresh directory); prints where they
# came from. Returns 1 when no location of MTPOOL_PEER_SRC has them.
unpack() {
  local name=$1 ver=$2 out=$3 tag loc cand g
  tag=$(tag_of "$name" "$ver")
  local IFS_old=$IFS
  IFS=:
  # shellcheck disable=SC2206
  local locs=($src)
  IFS=$IFS_old
  for loc in "${locs[@]}"; do
    [ -n "$loc" ] && [ -d "$loc" ] || continue # an empty or absent location
    # an unpacked release tree
    for cand in "$loc/$name-$ver" "$loc/$name-$tag"; do
      if [ -f "$cand/CMakeLists.txt" ]; then
        rm -rf "$out" && mkdir -p "$out" && cp -a "$cand/." "$out/" && echo "release tree $cand" && return 0
      fi
    done
    # a git repository with the tag
    for cand in "$loc" "$loc/$name" "$loc/$name.git" "$loc/$name/repo" "$loc"/*+"$name"/repo; do
      [ -d "$cand" ] || continue
      g=$(git_dir_of "$cand") || continue
      git --git-dir="$g" rev-parse -q --verify "refs/tags/$tag^{commit}" >/dev/null || continue
      # the repository must be the project's: its tree has the library's own sources
      git --git-dir="$g" cat-file -e "$tag:CMakeLists.txt" 2>/dev/null || continue
      case $name in
        mimalloc) git --git-dir="$g" cat-file -e "$tag:include/mimalloc.h" 2>/dev/null || continue ;;
        snmalloc) git --git-dir="$g" cat-file -e "$tag:src/snmalloc" 2>/dev/null || continue ;;
      esac
      rm -rf "$out" && mkdir -p "$out"
      git --git-dir="$g" archive "$tag" | tar -x -C "$out" || return 1
      echo "git tag $tag, commit $(git --git-dir="$g" rev-parse --short=12 "$tag^{commit}")"
      return 0
    done
  done
  return 1
}

command -v cmake >/dev/null && command -v git >/dev/null && command -v c++ >/dev/null ||
  { note "needs cmake, git and a C++ compiler (apt-get install cmake git g++)"; exit 1; }
[ -n "$src" ] || note "no sources given (MTPOOL_PEER_SRC or --src): only what is built already is kept"
mkdir -p "$dest"
failed="" built="" kept=""
for p in $only; do
  name=${p%%-*} ver=${p#*-}
  dir=$dest/$p
  case $name in
    mimalloc) want=libmimalloc.so target=mimalloc
      flags="" ;;
    snmalloc) want=libsnmallocshim.so target=snmallocshim
      flags="" ;;
  esac
  if [ $rebuild = 0 ] && [ -f "$dir/$want" ] && [ -f "$dir/version" ]; then
    note "$p: built already ($dir/$want); --rebuild to build it again"
    kept="$kept $p"
    continue
  fi
  rm -rf "$dir/src" "$dir/build"
  mkdir -p "$dir"
  if ! origin=$(unpack "$name" "$ver" "$dir/src"); then
    note "MISSING: the sources of $p (${name} tag $(tag_of "$name" "$ver")) are not in MTPOOL_PEER_SRC='${src}'"
    failed="$failed $p"
    rm -rf "$dir"
    continue
  fi
  note "$p: from $origin; building $target (Release) in $dir/build"
  log=$dir/build.log
  # shellcheck disable=SC2086 # flags are words
  if cmake -S "$dir/src" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release $flags >"$log" 2>&1 &&
    cmake --build "$dir/build" -j"$jobs" --target "$target" >>"$log" 2>&1; then
    lib=$(find "$dir/build" -maxdepth 1 -name "$want" | head -1)
    if [ -z "$lib" ]; then
      note "FAILED: $p built no $want (log: $log)"
      failed="$failed $p"
      continue
    fi
    cp -L "$lib" "$dir/$want.tmp" && mv "$dir/$want.tmp" "$dir/$want"
    compiler=$(sed -n 's/^-- The CXX compiler identification is //p' "$log" | head -1)
    [ -n "$compiler" ] || compiler=$(sed -n 's/^-- The C compiler identification is //p' "$log" | head -1)
    echo "$ver, built from $origin (CMake Release, target ${target}, ${compiler:-compiler unknown}, $(date -u '+%Y-%m-%d'))" >"$dir/version"
    rm -rf "$dir/src"
    note "$p: $dir/$want"
    built="$built $p"
  else
    note "FAILED: building $p; the end of $log:"
    tail -25 "$log" >&2
    failed="$failed $p"
  fi
done
note "built:${built:- none}; kept:${kept:- none}; not built:${failed:- none}. The benchmark scripts find them in $dest."
[ -z "$failed" ]
