// Out of memory for real: a child process lowers RLIMIT_AS, then grows containers until the OS
// refuses memory. The adapter must throw std::bad_alloc (never return null, never crash), and the
// containers must stay valid and usable. The child's exit status carries the verdict.
#include <mtpool/containers.hpp>

#include "cxx_test_util.hpp"

#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <list>
#include <new>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MTPOOL_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define MTPOOL_TEST_SANITIZED 1
#endif
#endif

namespace {

template <class T>
using PA = mtpool::pool_allocator<T>;

// Address space in use by this process now, in bytes (VmSize).
std::size_t address_space_in_use() {
  std::FILE *f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long pages = 0;
  int got = std::fscanf(f, "%lu", &pages);
  std::fclose(f);
  return got == 1 ? pages * static_cast<std::size_t>(sysconf(_SC_PAGESIZE)) : 0;
}

// Child-side checks: exit codes say which failed.
enum { kOk = 0, kNoLimit = 10, kNoBadAlloc = 11, kInvalidAfter = 12, kWrongException = 13 };

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
  lim.rlim_cur = lim.rlim_max = in_use + (96u << 20);  // 96 MiB more than now
  if (setrlimit(RLIMIT_AS, &lim) != 0) return kNoLimit;

  int rc = kOk;
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
  if (pid == 0) _exit(child_body(which));
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -2;
  if (WIFSIGNALED(status)) return 1000 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

TEST(OutOfMemoryTest, BadAllocWhenTheOsRefusesMemory) {
#if defined(MTPOOL_TEST_SANITIZED)
  GTEST_SKIP() << "RLIMIT_AS breaks the sanitizer runtime's own reservations";
#endif
  EXPECT_EQ(run_in_child(0), kOk) << "list on the default pool";
  EXPECT_EQ(run_in_child(1), kOk) << "vector on an independent pool";
  EXPECT_EQ(run_in_child(2), kOk) << "strings";
}

}  // namespace
