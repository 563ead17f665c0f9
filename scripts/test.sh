#!/usr/bin/env bash
# Build and run mtpool's tests. Two tiers:
#   bash scripts/test.sh          quick tier (the default; a contributor's check before a commit):
#                                 stages "docs release malloc asan"
#   bash scripts/test.sh --full   every stage below (what CI runs: .ci/run)
# MTPOOL_TEST_STAGES="release asan" runs the stages named instead of a tier's.
#
# Stages, in the order of the full tier:
#   docs      README.md: its benchmark tables equal what scripts/readme_tables.py writes from
#             bench/results/, and it has at most 300 lines (python3 only, about a second)
#   release   release build (RelWithDebInfo), -Wall -Wextra -Werror: every ctest test (unit, API,
#             multi-threaded, reliability, C++, examples, layer check), benchmarks not built
#   bench     the same build with the benchmarks (-DMTPOOL_BUILD_BENCH=ON): a smoke run of each
#   malloc    the drop-in malloc (libmtpool-malloc.so) in the release build: its tests (ctest -L
#             malloc), an installed consumer of mtpool::malloc, and real programs (python3, perl,
#             sort, sqlite3, xz, git, g++) preloaded, compared with glibc's malloc, and 14 files of
#             CPython's regression suite (scripts/test_suites.sh) on both
#   shared    shared library: only mtp_* symbols are exported; the C tests pass against it
#   asan      AddressSanitizer + UndefinedBehaviorSanitizer build, MTPOOL_DEBUG=2: every ctest test
#   tsan      ThreadSanitizer build: every ctest test
#   fuzz      clang build with libFuzzer: the fuzz target for about a minute (ctest -L fuzz)
#   valgrind  Valgrind-annotated build: memcheck tests (ctest -L valgrind)
#   consumer  install, then build a consumer project with find_package(mtpool) and pkg-config
#   clang     clang build, -Werror: every ctest test but the long randomized runs (stress, fuzz
#             replay, leak), which the release, sanitizer and musl stages run
#   buildtypes  build only, -Werror: the build types and MTPOOL_DEBUG levels the other stages do
#             not build, with gcc and clang (see the stage for the list); nothing is run but the
#             drop-in malloc's tests in the gcc Debug build at level 2 (the validity checkers)
#   aarch64   cross-built, the unit, API, multi-threaded, stress, fork and C++ tests under qemu-user
#   musl      against musl (cmake/toolchains/musl.cmake, musl-gcc), dynamic and static: the C tests
#             and the drop-in malloc's tests, and a plain musl program on the drop-in (preloaded
#             through musl's loader, and linked statically) that must allocate from mtpool
#   libcxx    the C++ adapter's tests with clang++-16 -stdlib=libc++ (libc++ 16) at C++11, 17
#             and 20, and with clang++-14 and libc++ 14 at C++11 and 17 (unpacked beside 16: no
#             <memory_resource>, so everything but pmr, and the pmr header's #error checked)
#   package   Debian packages (cpack): installed with apt-get, the consumer project built against
#             /usr, `man -w 3 mtpool`, then the packages removed again
#   abi       exported symbols, soname and public structure layout equal abi/'s lists
#   servers   scripts/bench_servers.sh --quick (slapd and Squid, glibc and mtpool, small sizes):
#             every figure measured, the allocator mapped in each server, every server stopped
#   gp        scripts/bench_gp.sh --quick (every general-purpose workload, small scale, glibc and
#             mtpool): every process ran on the malloc it was given, every checksum equals glibc's
#   stress    scripts/bench_stress.sh --quick (three hand-off shapes, 10 runs each, idle and beside
#             a CPU hog, glibc and mtpool): fails when two mtpool runs of a shape and load, or one
#             above 10x, have a peak RSS above 5x glibc's median for it (docs/reliability.md says
#             why), or a checksum or a process fails
#   programs  scripts/bench_programs.sh --quick (ten Debian programs and two start-ups, small inputs,
#             glibc and mtpool): every process ran on the malloc it was given, every output equals
#             glibc's
# Installs what a fresh Debian 12 machine lacks when run as root.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
out=${MTPOOL_TEST_BUILD:-$here/build-ci}
quick_stages="docs release malloc asan"
full_stages="docs release bench malloc shared asan tsan fuzz valgrind consumer clang buildtypes aarch64 musl libcxx package abi servers gp stress programs"
tier=quick
for arg in "$@"; do
  case $arg in
    --full) tier=full ;;
    --quick) tier=quick ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "usage: $0 [--quick|--full]  (MTPOOL_TEST_STAGES=\"stage ...\" for a subset)" >&2; exit 2 ;;
  esac
done
if [ $tier = full ]; then stages=$full_stages; else stages=$quick_stages; fi
stages=${MTPOOL_TEST_STAGES:-$stages}
jobs=${MTPOOL_JOBS:-$(nproc)}

# shellcheck source=lib/install_deps.sh
. "$here/scripts/lib/install_deps.sh"
# The quick tier skips the packages only full-tier stages use (libFuzzer's runtime, Google
# Benchmark, the aarch64 cross compilers and qemu, the Debian packaging tools), so that a fresh
# machine's first quick run does not fetch them; any stage list given by hand gets them all.
packages=$MTPOOL_TEST_PACKAGES
if [ -z "${MTPOOL_TEST_STAGES:-}" ] && [ $tier = quick ]; then
  full_only=" libclang-rt-14-dev libbenchmark-dev gcc-aarch64-linux-gnu g++-aarch64-linux-gnu qemu-user dpkg-dev file man-db musl-tools clang-16 libc++-16-dev libc++abi-16-dev "
  packages=$(for p in $MTPOOL_TEST_PACKAGES; do case $full_only in *" $p "*) ;; *) echo "$p" ;; esac; done)
fi
# shellcheck disable=SC2086 # the list is words
install_deps required $packages || exit 1

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
    docs)
      # the README's tables come from the committed results; it stays a guide (at most 300 lines)
      if python3 "$here/scripts/readme_tables.py" --check; then
        passed=$((passed + 1)); summary+=("docs: README tables and length: passed")
      else
        failed=$((failed + 1)); summary+=("docs: README tables or length: FAILED (python3 scripts/readme_tables.py --write)")
      fi
      ;;
    release)
      configure_build "$out/release" "" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMTPOOL_BUILD_BENCH=OFF
      run_ctest release "$out/release"
      ;;
    bench)
      # the release build again, with the benchmarks: only their targets are compiled anew
      configure_build "$out/release" "" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMTPOOL_BUILD_BENCH=ON
      run_ctest bench "$out/release" -L bench-smoke
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
      configure_build "$out/asan" "" -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DMTPOOL_SANITIZE=address;undefined" -DMTPOOL_DEBUG=2
      # the header-compile checks run a compiler: nothing for a sanitizer to see there
      ASAN_OPTIONS=detect_leaks=1 run_ctest asan+ubsan "$out/asan" -E '^cxx_headers_'
      ;;
    tsan)
      configure_build "$out/tsan" "" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMTPOOL_SANITIZE=thread
      TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" run_ctest tsan "$out/tsan" -E '^cxx_headers_'
      ;;
    fuzz)
      (export CC=clang CXX=clang++
       configure_build "$out/fuzz" fuzz_mtpool -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMTPOOL_FUZZ=ON -DMTPOOL_DEBUG=2)
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
      # directory and flags, so that after that stage nothing is rebuilt (the benchmarks stay as
      # the last stage left them).
      configure_build "$out/release" "mtpool_malloc mtpool_cxx_tests test_malloc_contract \
        test_malloc_contract_linked test_malloc_new test_malloc_new_linked test_malloc_threads \
        test_malloc_fork test_malloc_dlopen test_malloc_env mtp_dl_alloc valgrind_target \
        valgrind_target_linked test_malloc_info test_malloc_deaths test_malloc_stats_json sec_cases" \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo
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
      # A suite we did not write: part of CPython's regression tests with every Python object from
      # the malloc (PYTHONMALLOC=malloc), on glibc and on mtpool; fails when a test passes on glibc
      # only. The whole suite, and checked mode, are scripts/test_suites.sh's own run.
      if MTPOOL_SUITES_BUILD="$out/malloc-suites" bash "$here/scripts/test_suites.sh" \
           --allocs "glibc mtpool" --env PYTHONMALLOC=malloc --out "$out/malloc-suites" \
           --mtpool-lib "$out/release/malloc/libmtpool-malloc.so" \
           --tests "test_dict test_list test_set test_bytes test_unicode test_json test_pickle test_re \
                    test_struct test_array test_gc test_weakref test_mmap test_threading" \
           >"$out/malloc-suites.log" 2>&1; then
        passed=$((passed + 1)); summary+=("malloc CPython tests (part of the suite): passed")
      else
        tail -25 "$out/malloc-suites.log"
        failed=$((failed + 1)); summary+=("malloc CPython tests (part of the suite): FAILED")
      fi
      ;;
    clang)
      (export CC=clang CXX=clang++
       configure_build "$out/clang" "" -DCMAKE_BUILD_TYPE=RelWithDebInfo)
      # The header checks already ran with both compilers in the release stage. Debian 12's
      # Valgrind (3.19) cannot read clang 14's DWARF 5 debug information: the Valgrind runs of the
      # drop-in malloc stay with the gcc builds (stages malloc and valgrind).
      # The long randomized runs (stress, fuzz replay, leak) run in the release, sanitizer and
      # musl stages; here the unit, API, multi-threaded, C++ and drop-in tests.
      run_ctest clang "$out/clang" -E '^(cxx_headers_|malloc_valgrind_|test_rel_(stress|fuzz_replay|leak)$)'
      ;;
    buildtypes)
      # Build types and MTPOOL_DEBUG levels the other stages do not build, with -Werror: warnings
      # differ with the optimiser (-O0, -O2, -O3, -Os) and with the core's assert levels. Build
      # only (library, drop-in malloc, tests, examples, tools), nothing run. The other stages
      # build gcc RelWithDebInfo at levels 0 (release) and 2 (asan), clang RelWithDebInfo at 0
      # (clang) and 2 (fuzz, its target); these three add -O0 and gcc's -O3 (where gcc's flow
      # warnings show) and -Os, so that each compiler sees each level and every build type is
      # built once.
      for combo in gcc:Debug:2 gcc:Release:1 clang:MinSizeRel:1; do
        IFS=: read -r cc type level <<<"$combo"
        if [ "$cc" = gcc ]; then cxx=g++; else cxx=clang++; fi
        dir="$out/bt-$cc-$type-$level"
        b0=$(date +%s)
        if CC=$cc CXX=$cxx cmake -S "$here" -B "$dir" -DMTPOOL_WERROR=ON -DCMAKE_BUILD_TYPE="$type" \
             -DMTPOOL_DEBUG="$level" -DMTPOOL_BUILD_BENCH=OFF >/dev/null &&
           cmake --build "$dir" -j"$jobs" >"$dir/build.log" 2>&1; then
          passed=$((passed + 1))
          summary+=("buildtypes: $cc $type MTPOOL_DEBUG=$level built ($(( $(date +%s) - b0 )) s)")
          # The drop-in malloc's tests with the validity checkers on (about 20 s): the asan stage
          # runs every other test at level 2, but not these (sanitizers replace malloc). A heap
          # list's 8-bit count that wrapped past 255 showed only here. And the fork test, whose
          # children run a purge thread only outside the sanitizers (about 2 s): a heap cache list
          # a child inherited half changed failed region.c's checks there in 11 of 15 runs.
          if [ "$combo" = gcc:Debug:2 ]; then
            run_ctest malloc-validate "$dir" -L malloc
            run_ctest fork-validate "$dir" -R '^test_rel_fork$'
          fi
        else
          grep -E "warning|error|Error" "$dir/build.log" | head -40 || true
          failed=$((failed + 1))
          summary+=("buildtypes: $cc $type MTPOOL_DEBUG=$level FAILED (log: $dir/build.log)")
        fi
      done
      ;;
    aarch64)
      # GoogleTest cross-built from Debian's sources (libgtest-dev), once, for the C++ suite.
      tc="$here/cmake/toolchains/aarch64-linux-gnu.cmake"
      gt="$out/aarch64-gtest"
      if [ ! -f "$gt/prefix/lib/cmake/GTest/GTestConfig.cmake" ]; then
        cmake -S /usr/src/googletest -B "$gt" -DCMAKE_TOOLCHAIN_FILE="$tc" -DBUILD_GMOCK=OFF \
          -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$gt/prefix" >/dev/null
        cmake --build "$gt" -j"$jobs" >/dev/null
        cmake --install "$gt" >/dev/null
      fi
      # Left out under qemu: test_rel_oom, test_rel_oom_cxx and OutOfMemoryTest (RLIMIT_AS limits
      # qemu's own address space: qemu aborts), test_rel_leak (VmSize/VmRSS are qemu's),
      # test_rel_threads and test_rel_fuzz_replay (about 2 minutes each under qemu; test_mt's
      # 10,000-thread churn stays), test_rel_asan (no ASan here), and test_rel_fork: qemu-user 7.2
      # itself aborts in a forked child of a multi-threaded guest that starts a thread (assertion in
      # qemu_plugin_vcpu_init_hook), in most runs. The fork tests of test_api and test_rel_misuse
      # (a single-threaded parent) run. The stress test runs 1 M operations instead of 8 M.
      arm_tests="test_api test_mt test_size_class test_trim header_c99 header_c11 cxx_modes_cxx11
                 cxx_modes_cxx14 cxx_modes_cxx17 cxx_modes_cxx20 cxx_old_abi test_rel_misuse
                 test_rel_stress mtpool_cxx_tests"
      configure_build "$out/aarch64" "$arm_tests" -DCMAKE_TOOLCHAIN_FILE="$tc" \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGTest_DIR="$gt/prefix/lib/cmake/GTest" \
        -DMTPOOL_BUILD_EXAMPLES=OFF
      arm_re="^($(echo $arm_tests cxx_checked_mode | tr ' ' '|'))\$"
      GTEST_FILTER=-OutOfMemoryTest.* MTP_STRESS_OPS=1000000 MTP_STRESS_MAX_SECONDS=90 \
        run_ctest aarch64 "$out/aarch64" -R "$arm_re"
      ;;
    musl)
      # Left out: test_bug_dlclose (dlopens a plugin carrying the core: musl's loader refuses a
      # dlopen'ed library with initial-exec thread-local variables, and a static program has no
      # dlopen; docs/porting.md says what the core would need).
      tc="$here/cmake/toolchains/musl.cmake"
      configure_build "$out/musl" "" -DCMAKE_TOOLCHAIN_FILE="$tc" -DCMAKE_BUILD_TYPE=RelWithDebInfo
      run_ctest musl-dynamic "$out/musl" -E '^test_bug_dlclose$'
      configure_build "$out/musl-static" "" -DCMAKE_TOOLCHAIN_FILE="$tc" -DMTPOOL_MUSL_STATIC=ON \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo
      # the static link's own concern is linking: the long randomized runs ran in musl-dynamic
      run_ctest musl-static "$out/musl-static" -E '^(test_bug_dlclose|test_rel_(stress|fuzz_replay|leak))$'
      ;;
    libcxx)
      # GoogleTest built once per libc++ from Debian's sources (libgtest-dev is libstdc++'s).
      # shellcheck source=lib/libcxx14.sh
      . "$here/scripts/lib/libcxx14.sh"
      lc14=$(libcxx14_root "$out/libcxx14-pkg")
      lc14_inc="-nostdinc++ -isystem $lc14/usr/lib/llvm-14/include/c++/v1"
      lc14_link="-stdlib=libc++ -Wno-unused-command-line-argument -L$lc14/usr/lib/llvm-14/lib -Wl,-rpath,$lc14/usr/lib/llvm-14/lib"
      # the suite at C++11 and 17 with both, at C++20 with libc++ 16 (the mode checks: all three)
      cxx_targets="mtpool_cxx_tests mtpool_cxx_tests_cxx11 test_visit_cxx
                   mtpool_malloc cxx_modes_cxx11 cxx_modes_cxx14 cxx_modes_cxx17 cxx_modes_cxx20
                   cxx_unconstrained_ops_cxx11 cxx_unconstrained_ops_cxx14
                   cxx_unconstrained_ops_cxx17 cxx_unconstrained_ops_cxx20"
      # the header checks with clang and libc++; malloc_cxx_tests: the suite on the drop-in
      cxx_re='^(mtpool_cxx_tests.*|cxx_modes_.*|cxx_unconstrained_.*|cxx_checked_mode|cxx_headers_clang_.*|test_visit_cxx|malloc_cxx_tests)$'
      for v in 16 14; do
        gt="$out/libcxx$v-gtest"
        if [ "$v" = 16 ]; then
          flags="-stdlib=libc++" link="" cxx20=ON targets="$cxx_targets mtpool_cxx_tests_cxx20"
        else
          flags=$lc14_inc link=$lc14_link cxx20=OFF targets=$cxx_targets
        fi
        if [ ! -f "$gt/prefix/lib/cmake/GTest/GTestConfig.cmake" ]; then
          cmake -S /usr/src/googletest -B "$gt" -DCMAKE_C_COMPILER=clang-$v -DCMAKE_CXX_COMPILER=clang++-$v \
            -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$link" -DBUILD_GMOCK=OFF \
            -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$gt/prefix" >/dev/null
          cmake --build "$gt" -j"$jobs" >/dev/null
          cmake --install "$gt" >/dev/null
        fi
        configure_build "$out/libcxx$v" "$targets" -DCMAKE_C_COMPILER=clang-$v \
          -DCMAKE_CXX_COMPILER=clang++-$v -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$link" \
          -DCMAKE_SHARED_LINKER_FLAGS="$link" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMTPOOL_CXX20_SUITE=$cxx20 \
          -DGTest_DIR="$gt/prefix/lib/cmake/GTest" -DMTPOOL_BUILD_EXAMPLES=OFF
        run_ctest "libcxx$v" "$out/libcxx$v" -R "$cxx_re"
      done
      ;;
    package)
      configure_build "$out/deb" "" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
        -DCMAKE_INSTALL_PREFIX=/usr -DMTPOOL_BUILD_TESTS=OFF -DMTPOOL_BUILD_EXAMPLES=OFF
      # every installed file belongs to a package: an install() without COMPONENT lands nowhere
      rm -rf "$out/deb-stray"
      cmake --install "$out/deb" --component Unspecified --prefix "$out/deb-stray" >/dev/null
      stray=$(find "$out/deb-stray" ! -type d 2>/dev/null || true)
      rm -f "$out"/deb/*.deb
      (cd "$out/deb" && cpack -G DEB >/dev/null)
      debs=("$out"/deb/*.deb)
      names=$(for d in "${debs[@]}"; do dpkg-deb -f "$d" Package; done)
      for d in "${debs[@]}"; do echo "$(basename "$d"): $(dpkg-deb -c "$d" | grep -vc '/$') files"; done
      if [ -n "$stray" ]; then
        echo "installed files outside every package (give their install() a COMPONENT): $stray"
        failed=$((failed + 1)); summary+=("package: files in no package")
      elif [ "$(id -u)" != 0 ]; then
        echo "the package stage installs packages: run it as root"
        failed=$((failed + 1)); summary+=("package: not root")
      else
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${debs[@]}" >/dev/null
        rm -rf "$out/deb-consumer"
        unset PKG_CONFIG_PATH # the consumer stage's prefix: this one uses /usr only
        # a failed build is counted by run_ctest below; the packages are removed in any case
        cmake -S "$here/tests/consumer" -B "$out/deb-consumer" >/dev/null || true
        cmake --build "$out/deb-consumer" >/dev/null || true
        if ! grep -q '^mtpool_DIR:PATH=/usr/lib' "$out/deb-consumer/CMakeCache.txt" 2>/dev/null; then
          failed=$((failed + 1)); summary+=("package: the consumer did not find mtpool under /usr/lib")
        fi
        run_ctest package "$out/deb-consumer"
        pages="3 mtpool"
        if echo "$names" | grep -qx libmtpool-malloc; then pages="$pages 7 mtpool-malloc"; fi
        set -- $pages
        while [ $# -gt 0 ]; do
          if man -w "$1" "$2" >/dev/null; then
            echo "man $1 $2: $(man -w "$1" "$2")"
          else
            failed=$((failed + 1)); summary+=("package: man $1 $2 not found")
          fi
          shift 2
        done
        # shellcheck disable=SC2086
        DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq $names >/dev/null
      fi
      ;;
    abi)
      configure_build "$out/abi" mtpool -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBUILD_SHARED_LIBS=ON \
        -DMTPOOL_BUILD_TESTS=OFF -DMTPOOL_BUILD_EXAMPLES=OFF
      if bash "$here/abi/check.sh" "$(ls "$out"/abi/c_core/libmtpool.so.*.*.* | head -1)"; then
        passed=$((passed + 1)); summary+=("abi: 1 passed, 0 failed")
      else
        failed=$((failed + 1)); summary+=("abi: 0 passed, 1 failed")
      fi
      ;;
    servers)
      # installs slapd, squid and the peers itself; fails unless every figure was measured and
      # every server it started was stopped (checked by bench/servers/report.py --check)
      if MTPOOL_SERVERS_BUILD="$out/servers" bash "$here/scripts/bench_servers.sh" --quick \
           --out "$out/servers/quick"; then
        passed=$((passed + 1)); summary+=("servers: quick run passed ($out/servers/quick/servers.md)")
      else
        failed=$((failed + 1)); summary+=("servers: quick run FAILED")
      fi
      ;;
    gp)
      # fails when a process fails, runs on another malloc than it was given, or computes a
      # checksum different from glibc's (bench/gp/report.py)
      if MTPOOL_GP_BUILD="$out/gp" bash "$here/scripts/bench_gp.sh" --quick --out "$out/gp/quick"; then
        passed=$((passed + 1)); summary+=("gp: quick run passed ($out/gp/quick/gp.md)")
      else
        failed=$((failed + 1)); summary+=("gp: quick run FAILED")
      fi
      ;;
    stress)
      # fails when two mtpool runs of a shape and load (or one above 10x) have a peak RSS above 5x
      # glibc's median for it, a process fails, or a checksum differs from glibc's
      # (bench/latency/report.py stress). Built
      # in the gp stage's directory: the same Release drop-in, not built again after that stage.
      if MTPOOL_LATENCY_BUILD="$out/gp" bash "$here/scripts/bench_stress.sh" --quick \
           --out "$out/stress/quick"; then
        passed=$((passed + 1)); summary+=("stress: quick run passed ($out/stress/quick/stress.md)")
      else
        failed=$((failed + 1)); summary+=("stress: quick run FAILED ($out/stress/quick/stress.md)")
      fi
      ;;
    programs)
      # fails when a process fails, an output differs from glibc's, or a process did not run on
      # the malloc it was given (bench/programs/report.py)
      if MTPOOL_PROGRAMS_BUILD="$out/programs" bash "$here/scripts/bench_programs.sh" --quick \
           --out "$out/programs/quick"; then
        passed=$((passed + 1)); summary+=("programs: quick run passed ($out/programs/quick/programs.md)")
      else
        failed=$((failed + 1)); summary+=("programs: quick run FAILED")
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
