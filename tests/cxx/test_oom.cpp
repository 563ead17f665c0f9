// Out of memory through the C++ adapter: every allocation path throws std::bad_alloc (never
// returns null, never crashes), containers keep their contents (push_back's strong guarantee),
// statistics count exactly what is still held, and once memory is available again everything
// works. Two ways to run out:
//   InjectedMmapFailures: the core's mmap fails after n successful maps (mtp__os_inject_failure,
//     a hook of the static library: built when MTP_TEST_OS_INJECT is defined);
//   BadAllocWhenTheOsRefusesMemory: a child process lowers RLIMIT_AS, then grows containers until
//     the OS refuses memory; the child's exit status carries the verdict (not under sanitizers,
//     whose runtime needs its own reservations).
#include <mtpool/containers.hpp>
#include <mtpool/mtpool.hpp>  // MTPOOL_HAS_MEMORY_RESOURCE: C++17 and a library with std::pmr
#if MTPOOL_HAS_MEMORY_RESOURCE
#include <memory_resource>
#endif

#include "cxx_test_util.hpp"
#include "testhelper.h"

#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <list>
#include <new>
#include <string>
#include <vector>

#ifdef MTP_TEST_OS_INJECT
extern "C" {
#include "base/os.h"  // mtp__os_inject_failure
}
#endif

namespace {

template <class T>
using PA = mtpool::pool_allocator<T>;
using mtpool_test::blocks_in_use;

// Address space in use by this process now, in bytes (VmSize).
std::size_t address_space_in_use() {
  long kb = th_status_kb("VmSize");
  return kb > 0 ? static_cast<std::size_t>(kb) * 1024 : 0;
}

// Child-side checks: exit codes say which failed.
enum {
  kOk = 0,
  kNoLimit = 10,
  kNoBadAlloc = 11,
  kInvalidAfter = 12,
  kWrongException = 13,
  kNoRegrowth = 14,
  kLeak = 15
};

// Grows v until bad_alloc (or limit elements); returns the number of bad_allocs seen (0 or 1).
template <class Vec>
int grow_until_bad_alloc_n(Vec &v, size_t limit) {
  try {
    while (v.size() < limit) v.push_back(static_cast<typename Vec::value_type>(v.size() * 7));
  } catch (const std::bad_alloc &) {
    return 1;
  }
  return 0;
}

template <class Vec>
bool intact(const Vec &v) {
  for (size_t i = 0; i < v.size(); i++)
    if (v[i] != static_cast<typename Vec::value_type>(i * 7)) return false;
  return true;
}

// Element counts: enough to exhaust what the injection lets through in release builds; smaller
// under sanitizers, where each push_back is slow (the early rounds still run out of memory).
const std::size_t kMaxElems = TH_SANITIZED ? std::size_t(1) << 22 : std::size_t(1) << 26;


// Under RLIMIT_AS: a vector grows until bad_alloc, then a list, then a vector again once both
// are freed (it must reach at least half the first one's size); nothing is left in use.
int vector_list_vector() {
  std::size_t base = blocks_in_use(nullptr);
  int thrown = 0;
  std::size_t got1 = 0, got2 = 0;
  {
    std::vector<std::uint64_t, mtpool::allocator<std::uint64_t>> v;
    thrown += grow_until_bad_alloc_n(v, std::size_t(1) << 30);
    got1 = v.size();
    if (!intact(v)) return kInvalidAfter;
  }
  mtp_pool_trim(nullptr);
  {
    std::list<std::uint64_t, mtpool::allocator<std::uint64_t>> l;
    try {
      for (;;) l.push_back(1);
    } catch (const std::bad_alloc &) {
      thrown++;
    }
    got2 = l.size();
  }
  mtp_pool_trim(nullptr);
  {
    std::vector<std::uint64_t, mtpool::allocator<std::uint64_t>> v;
    thrown += grow_until_bad_alloc_n(v, std::size_t(1) << 30);
    if (v.size() * 10 < got1 * 5) return kNoRegrowth;
  }
  if (thrown != 3) return kNoBadAlloc;
  if (blocks_in_use(nullptr) != base) return kLeak;
  std::printf("C++ RLIMIT_AS: vector of %zu, list of %zu nodes, then bad_alloc each time\n", got1,
              got2);
  return kOk;
}


template <class C>
int grow_until_bad_alloc(C &c) {
  try {
    for (long i = 0;; ++i) {
      c.push_back(static_cast<typename C::value_type>(i));
      if (i > (1L << 34)) return kNoBadAlloc;  // the limit did not hold
    }
  } catch (const std::bad_alloc &) {
  } catch (...) {
    return kWrongException;
  }
  // The container is valid: its contents are intact and it still works once memory is back.
  long expect = 0;
  for (typename C::const_iterator it = c.begin(); it != c.end(); ++it, ++expect) {
    if (*it != static_cast<typename C::value_type>(expect)) return kInvalidAfter;
  }
  if (expect == 0) return kInvalidAfter;
  return kOk;
}

int child_body(int which) {
  std::size_t in_use = address_space_in_use();
  if (in_use == 0) return kNoLimit;
  struct rlimit lim;
  // 96 MiB more than now (160 MiB for the three-phase run, whose vector doubles)
  lim.rlim_cur = lim.rlim_max = in_use + (which == 3 ? (160u << 20) : (96u << 20));
  if (setrlimit(RLIMIT_AS, &lim) != 0) return kNoLimit;

  int rc = kOk;
  if (which == 3) return vector_list_vector();
  if (which == 0) {  // list nodes from the default pool
    mtpool::list<long> l;
    rc = grow_until_bad_alloc(l);
    if (rc == kOk) {
      std::size_t n = l.size();
      for (std::size_t i = 0; i < n / 2; ++i) l.pop_back();  // free memory, then reuse it
      l.push_back(-1);
      if (l.back() != -1 || l.size() != n - n / 2 + 1) rc = kInvalidAfter;
    }
  } else if (which == 1) {  // vector growth from an independent pool: the strong guarantee
    mtpool::pool p("oom");
    std::vector<long, PA<long>> v{PA<long>(p)};
    rc = grow_until_bad_alloc(v);
    if (rc == kOk) {
      v.clear();
      v.shrink_to_fit();
      v.push_back(5);
      if (v.size() != 1 || v[0] != 5) rc = kInvalidAfter;
    }
  } else {  // strings: every append may need a bigger block
    mtpool::vector<mtpool::string> strings;
    try {
      for (;;) strings.push_back(mtpool::string(1000, 's'));
    } catch (const std::bad_alloc &) {
    } catch (...) {
      return kWrongException;
    }
    for (std::size_t i = 0; i < strings.size(); ++i) {
      if (strings[i].size() != 1000 || strings[i][999] != 's') return kInvalidAfter;
    }
    if (strings.empty()) return kInvalidAfter;
  }
  return rc;
}

int run_in_child(int which) {
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    alarm(240);  // a hung child fails the test (status 1000 + SIGALRM) instead of stalling it
    _exit(child_body(which));
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -2;
  if (WIFSIGNALED(status)) return 1000 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

TEST(OutOfMemoryTest, BadAllocWhenTheOsRefusesMemory) {
#if TH_SANITIZED
  GTEST_SKIP() << "RLIMIT_AS breaks the sanitizer runtime's own reservations";
#endif
  EXPECT_EQ(run_in_child(0), kOk) << "list on the default pool";
  EXPECT_EQ(run_in_child(1), kOk) << "vector on an independent pool";
  EXPECT_EQ(run_in_child(2), kOk) << "strings";
  EXPECT_EQ(run_in_child(3), kOk) << "vector, list, vector again after freeing";
}

// After the RLIMIT_AS test, as the suite ran before: a child forked after this test hangs in
// the core's purge-thread wake-up (the fork handler does not reset the purger's condition
// variable; a core bug, reported).
#ifdef MTP_TEST_OS_INJECT
TEST(OutOfMemoryTest, InjectedMmapFailures) {
#if MTPOOL_HAS_MEMORY_RESOURCE
  int pmr_thrown = 0;
#endif
  mtp_free(mtp_alloc(1));  // the default pool exists before injection (see the C test)
  std::size_t base = blocks_in_use(nullptr);
  int thrown = 0;
  // n: maps allowed before they fail; sanitizer builds run fewer rounds (each is slow there)
  for (long n = 0; n <= 24; n += TH_SANITIZED ? (n < 2 ? 1 : 11) : (n < 6 ? 1 : 6)) {
    mtp__os_inject_failure(n);
    {
      std::vector<std::uint64_t, mtpool::allocator<std::uint64_t>> v;
      thrown += grow_until_bad_alloc_n(v, kMaxElems);
      EXPECT_TRUE(intact(v)) << "vector contents after bad_alloc (n=" << n << ")";
      std::size_t before = v.size();

      // node containers, a pool and a pool allocator
      std::list<int, mtpool::allocator<int>> l;
      try {
        for (int i = 0; i < 200000; i++) l.push_back(i);
      } catch (const std::bad_alloc &) {
        thrown++;
      }
      int k = 0;
      bool list_ok = true;
      for (int x : l) list_ok = list_ok && x == k++;
      EXPECT_TRUE(list_ok) << "list contents after bad_alloc (n=" << n << ")";

      try {
        mtpool::pool p("oom-cxx");
        std::vector<std::string, PA<std::string>> s{PA<std::string>(p)};
        for (int i = 0; i < 100000; i++) s.emplace_back(40, 'x');  // may fit when n is large
      } catch (const std::bad_alloc &) {
        thrown++;
      }
#if MTPOOL_HAS_MEMORY_RESOURCE
      try {
        mtpool::memory_resource r;
        std::pmr::vector<std::uint32_t> pv(&r);
        for (std::uint32_t i = 0; i < kMaxElems; i++) pv.push_back(i);
      } catch (const std::bad_alloc &) {
        thrown++;
        pmr_thrown++;
      }
#endif
      // memory back: everything works again, and the vector can go on growing
      mtp__os_inject_failure(-1);
      for (int i = 0; i < 300000; i++) v.push_back(static_cast<std::uint64_t>(v.size() * 7));
      EXPECT_TRUE(intact(v) && v.size() == before + 300000)
          << "vector after injection off (n=" << n << ")";
      mtpool::pool p2;
      std::vector<int, PA<int>> w{PA<int>(p2)};
      for (int i = 0; i < 100000; i++) w.push_back(i);
      EXPECT_EQ(blocks_in_use(p2.get()), 1u) << "pool blocks_in_use";
    }
    EXPECT_EQ(blocks_in_use(nullptr), base) << "default pool blocks_in_use after round n=" << n;
    mtp_thread_flush();
    mtp_pool_trim(nullptr);
  }
  EXPECT_GT(thrown, 0) << "injection never made an allocation throw";
#if MTPOOL_HAS_MEMORY_RESOURCE
  EXPECT_GT(pmr_thrown, 0) << "the pmr resource never threw under injection";
#endif
  std::printf("C++ injection: %d std::bad_alloc thrown and caught, no leak, no crash\n", thrown);
}
#endif  // MTP_TEST_OS_INJECT

}  // namespace
