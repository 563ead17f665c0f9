# The one package installer of the project's scripts (sourced, not run): scripts/test.sh and the
# benchmark scripts (through bench/tools/common.sh) install what a fresh Debian 12 machine lacks.
# To add a package, add its name (one word) to the list that needs it.

# Everything scripts/test.sh builds and runs (every CI stage).
MTPOOL_TEST_PACKAGES="cmake make gcc g++ clang libclang-rt-14-dev libgtest-dev libbenchmark-dev
  valgrind pkg-config bc python3 universal-ctags gcc-aarch64-linux-gnu g++-aarch64-linux-gnu
  qemu-user dpkg-dev file man-db perl sqlite3 xz-utils git libpython3.11-testsuite musl-tools
  clang-16 libc++-16-dev libc++abi-16-dev google-perftools"
# The benchmark suite and the peers it compares with (a missing peer is skipped); the heap
# debuggers beside which tests/security/run_security.sh --peers-found shows checked mode.
MTPOOL_BENCH_PACKAGES="cmake g++ make libbenchmark-dev libboost-dev libtbb-dev libtcmalloc-minimal4
  libjemalloc2 libmimalloc2.0 gnuplot-nox python3 electric-fence duma"
# The real programs of scripts/bench_programs.sh, the compiler of its helpers, and the peers.
MTPOOL_PROGRAMS_PACKAGES="cmake make gcc g++ python3 perl sqlite3 xz-utils git ruby lua5.4 coreutils
  gnuplot-nox libmimalloc2.0 libjemalloc2 libtcmalloc-minimal4 libtbbmalloc2"

# install_deps required|optional PACKAGE...: installs (as root, with apt-get) the packages that are
# not installed yet, skipping those present. required: returns 1 when they cannot be installed
# (not root, or apt-get failed); optional: says so and returns 0.
install_deps() {
  local mode=$1 p missing=()
  shift
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing: ${missing[*]}" >&2
    # the package index of a fresh machine is empty: update only when an install fails
    if DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 ||
      { apt-get update -qq >/dev/null &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }; then
      return 0
    fi
    echo "apt-get could not install: ${missing[*]}" >&2
  else
    echo "missing packages (run as root to install them): ${missing[*]}" >&2
  fi
  [ "$mode" = optional ]
}
