#!/usr/bin/env bash
# Build and run every test of mtpool, the way CI does (.ci/run calls this script).
#   1. release build, -Wall -Wextra -Werror, benchmarks included (smoke-run): every ctest test
#   2. shared library: only mtp_* symbols are exported; the C tests pass against it
#   3. AddressSanitizer + UndefinedBehaviorSanitizer build: every ctest test
#   4. ThreadSanitizer build: every ctest test
#   5. clang build with libFuzzer: the fuzz target for about a minute (ctest -L fuzz)
#   6. Valgrind-annotated build: memcheck tests (ctest -L valgrind)
#   7. install, then build a consumer project with find_package(mtpool) and pkg-config
#   8. malloc: the drop-in malloc (libmtpool-malloc.so) in the release build: its tests (ctest -L
#      malloc), an installed consumer of mtpool::malloc, and real programs (python3, perl, sort,
#      sqlite3, xz, git, g++) preloaded, compared with glibc's malloc
# Installs what a fresh Debian 12 machine lacks when run as root. Set MTPOOL_TEST_STAGES to run a
# subset, e.g. MTPOOL_TEST_STAGES="release asan".
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=${MTPOOL_TEST_BUILD:-$here/build-ci}
stages=${MTPOOL_TEST_STAGES:-"release malloc shared asan tsan fuzz valgrind consumer"}
jobs=${MTPOOL_JOBS:-$(nproc)}

need=()
for pkg in cmake make gcc g++ clang libclang-rt-14-dev libgtest-dev libbenchmark-dev valgrind \
           pkg-config bc python3 perl sqlite3 xz-utils git; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "== installing: ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  else
    echo "missing packages (run as root to install them): ${need[*]}" >&2
    exit 1
  fi
fi

passed=0
failed=0
summary=()
run_ctest() { # name build-dir ctest-args...
  local name=$1 dir=$2 log
  shift 2
  log=$(mktemp)
  local rc=0
  (cd "$dir" && ctest --output-on-failure -j"$jobs" "$@") 2>&1 | tee "$log" || rc=$?
  local line p f
  line=$(grep -E "tests passed, [0-9]+ tests? failed out of [0-9]+" "$log" | tail -1 || true)
  if [ -n "$line" ]; then
    f=$(echo "$line" | sed -E 's/.*passed, ([0-9]+) tests? failed out of ([0-9]+).*/\1/')
    t=$(echo "$line" | sed -E 's/.*failed out of ([0-9]+).*/\1/')
    p=$((t - f))
  else
    p=0
    f=1
  fi
  [ "$rc" = 0 ] || [ "$f" != 0 ] || f=1
  passed=$((passed + p))
  failed=$((failed + f))
  summary+=("$name: $p passed, $f failed")
  rm -f "$log"
}

configure_build() { # dir "targets (empty: all)" cmake-args...
  local dir=$1 targets=$2 tflags=()
  shift 2
  for t in $targets; do tflags+=(--target "$t"); done
  cmake -S "$here" -B "$dir" -DMTPOOL_WERROR=ON "$@" >/dev/null
  cmake --build "$dir" -j"$jobs" "${tflags[@]}" 2>&1 | grep -E "warning|error|Error" || true
  cmake --build "$dir" -j"$jobs" "${tflags[@]}" >/dev/null # fails the script if the build failed
}

t0=$(date +%s)
for stage in $stages; do
  s0=$(date +%s)
  echo "== stage $stage"
  case $stage in
    release)
      configure_build "$out/release" "" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMTPOOL_BUILD_BENCH=ON
      run_ctest release "$out/release"
      ;;
    shared)
      configure_build "$out/shared" "mtpool test_api test_mt test_trim" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DBUILD_SHARED_LIBS=ON -DMTPOOL_BUILD_EXAMPLES=OFF
      lib=$(ls "$out"/shared/c_core/libmtpool.so.*.*.* | head -1)
      bad=$(nm -D --defined-only "$lib" | awk '$2 ~ /[TDBRW]/ {print $3}' | grep -v '^mtp_' || true)
      if [ -n "$bad" ]; then
        echo "exported symbols outside mtp_*: $bad"
        failed=$((failed + 1)); summary+=("shared: symbols outside mtp_* exported")
      else
        echo "libmtpool.so exports $(nm -D --defined-only "$lib" | grep -c ' T mtp_') mtp_* functions and nothing else"
        run_ctest shared "$out/shared" -R '^test_(api|mt|trim)$'
      fi
      ;;
    asan)
      configure_build "$out/asan" "" -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DMTPOOL_SANITIZE=address;undefined"
      # the header-compile checks run a compiler: nothing for a sanitizer to see there
      ASAN_OPTIONS=detect_leaks=1 run_ctest asan+ubsan "$out/asan" -E '^cxx_headers_'
      ;;
    tsan)
      configure_build "$out/tsan" "" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMTPOOL_SANITIZE=thread
      TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" run_ctest tsan "$out/tsan" -E '^cxx_headers_'
      ;;
    fuzz)
      (export CC=clang CXX=clang++
       configure_build "$out/fuzz" fuzz_mtpool -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMTPOOL_FUZZ=ON)
      run_ctest fuzz "$out/fuzz" -L fuzz
      ;;
    valgrind)
      configure_build "$out/valgrind" test_rel_valgrind -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMTPOOL_VALGRIND=ON
      run_ctest valgrind "$out/valgrind" -L valgrind
      ;;
    consumer)
      rm -rf "$out/prefix" "$out/consumer"
      cmake --install "$out/release" --prefix "$out/prefix" >/dev/null
      cmake -S "$here/tests/consumer" -B "$out/consumer" -DCMAKE_PREFIX_PATH="$out/prefix" >/dev/null
      cmake --build "$out/consumer" >/dev/null
      export PKG_CONFIG_PATH="$out/prefix/lib/pkgconfig:$out/prefix/lib/$(gcc -dumpmachine)/pkgconfig"
      run_ctest consumer "$out/consumer"
      ;;
    malloc)
      # A plain release build (sanitizers replace malloc themselves): the release stage's build
      # directory and flags, so that after that stage nothing is rebuilt.
      configure_build "$out/release" "mtpool_malloc mtpool_cxx_tests test_malloc_contract \
        test_malloc_contract_linked test_malloc_new test_malloc_new_linked test_malloc_threads \
        test_malloc_fork test_malloc_dlopen test_malloc_env mtp_dl_alloc valgrind_target \
        valgrind_target_linked" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMTPOOL_BUILD_BENCH=ON
      run_ctest malloc "$out/release" -L malloc
      rm -rf "$out/malloc-prefix" "$out/malloc-consumer"
      cmake --install "$out/release" --prefix "$out/malloc-prefix" >/dev/null
      if cmake -S "$here/tests/malloc/consumer" -B "$out/malloc-consumer" \
           -DCMAKE_PREFIX_PATH="$out/malloc-prefix" >/dev/null &&
         cmake --build "$out/malloc-consumer" >/dev/null &&
         "$out/malloc-consumer/malloc_consumer"; then
        passed=$((passed + 1)); summary+=("malloc consumer (find_package, mtpool::malloc): passed")
      else
        failed=$((failed + 1)); summary+=("malloc consumer (find_package, mtpool::malloc): FAILED")
      fi
      if bash "$here/tests/malloc/run_programs.sh" "$out/release/malloc/libmtpool-malloc.so" \
           "$out/malloc-programs"; then
        passed=$((passed + 1)); summary+=("malloc real programs: passed")
      else
        failed=$((failed + 1)); summary+=("malloc real programs: FAILED")
      fi
      ;;
    *) echo "unknown stage $stage" >&2; exit 2 ;;
  esac
  echo "== stage $stage took $(( $(date +%s) - s0 )) s"
done
echo "== summary ($(( $(date +%s) - t0 )) s)"
for s in "${summary[@]}"; do echo "   $s"; done
echo "all stages: $passed passed, $failed failed"
[ "$failed" = 0 ]
