// Out of memory through the C++ adapter: with mmap failures injected (and, outside sanitizer
// builds, with RLIMIT_AS in a child), every allocation path throws std::bad_alloc (never crashes,
// never returns null), containers keep their contents (push_back's strong guarantee), statistics
// count exactly what is still held, and once memory is available again everything works.
#include <mtpool/allocator.hpp>
#include <mtpool/containers.hpp>
#if __cplusplus >= 201703L
#include <mtpool/memory_resource.hpp>
#include <memory_resource>
#endif

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <list>
#include <map>
#include <new>
#include <string>
#include <vector>

extern "C" {
#include "os.h"  // mtp__os_inject_failure
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define REL_SAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define REL_SAN 1
#endif
#endif
#ifndef REL_SAN
#define REL_SAN 0
#endif

static int failures;
#define CHECK(c, ...)                                          \
  do {                                                         \
    if (!(c)) {                                                \
      std::fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #c); \
      std::fprintf(stderr, __VA_ARGS__);                       \
      std::fputc('\n', stderr);                                \
      failures++;                                              \
    }                                                          \
  } while (0)

static size_t blocks_in(mtp_pool_t *p) {
  mtp_stats_t st;
  mtp_pool_stats(p, &st);
  return st.blocks_in_use;
}

// Grows v until bad_alloc (or limit elements); returns the number of bad_allocs seen (0 or 1).
template <class Vec>
static int grow_until_bad_alloc(Vec &v, size_t limit) {
  try {
    while (v.size() < limit) v.push_back(static_cast<typename Vec::value_type>(v.size() * 7));
  } catch (const std::bad_alloc &) {
    return 1;
  }
  return 0;
}

template <class Vec>
static bool intact(const Vec &v) {
  for (size_t i = 0; i < v.size(); i++)
    if (v[i] != static_cast<typename Vec::value_type>(i * 7)) return false;
  return true;
}

// Element counts: enough to exhaust what the injection lets through in release builds; smaller
// under sanitizers, where each push_back is slow (the early rounds still run out of memory).
static const size_t kMaxElems = REL_SAN ? size_t(1) << 22 : size_t(1) << 26;

static void injection_rounds() {
  int pmr_thrown = 0;
  mtp_free(mtp_alloc(1));  // the default pool exists before injection (see the C test)
  size_t base = blocks_in(nullptr);
  int thrown = 0;
  // n: maps allowed before they fail; sanitizer builds run fewer rounds (each is slow there)
  for (long n = 0; n <= 24; n += REL_SAN ? (n < 2 ? 1 : 11) : (n < 6 ? 1 : 6)) {
    mtp__os_inject_failure(n);
    {
      std::vector<uint64_t, mtpool::allocator<uint64_t>> v;
      thrown += grow_until_bad_alloc(v, kMaxElems);
      CHECK(intact(v), "vector contents after bad_alloc (n=%ld)", n);
      size_t before = v.size();

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
      CHECK(list_ok, "list contents after bad_alloc (n=%ld)", n);

      try {
        mtpool::pool p("oom-cxx");
        std::vector<std::string, mtpool::pool_allocator<std::string>> s{
            mtpool::pool_allocator<std::string>(p)};
        for (int i = 0; i < 100000; i++) s.emplace_back(40, 'x');  // may fit when n is large
      } catch (const std::bad_alloc &) {
        thrown++;
      }
#if __cplusplus >= 201703L
      try {
        mtpool::memory_resource r;
        std::pmr::vector<uint32_t> pv(&r);
        for (uint32_t i = 0; i < kMaxElems; i++) pv.push_back(i);
      } catch (const std::bad_alloc &) {
        thrown++;
        pmr_thrown++;
      }
#endif
      // memory back: everything works again, and the vector can go on growing
      mtp__os_inject_failure(-1);
      for (int i = 0; i < 300000; i++) v.push_back(static_cast<uint64_t>(v.size() * 7));
      CHECK(intact(v) && v.size() == before + 300000, "vector after injection off (n=%ld)", n);
      mtpool::pool p2;
      std::vector<int, mtpool::pool_allocator<int>> w{mtpool::pool_allocator<int>(p2)};
      for (int i = 0; i < 100000; i++) w.push_back(i);
      CHECK(blocks_in(p2.get()) == 1, "pool blocks_in_use %zu, want 1", blocks_in(p2.get()));
    }
    CHECK(blocks_in(nullptr) == base, "default pool blocks_in_use %zu after round n=%ld, want %zu",
          blocks_in(nullptr), n, base);
    mtp_thread_flush();
    mtp_pool_trim(nullptr);
  }
  CHECK(thrown > 0, "injection never made an allocation throw");
#if __cplusplus >= 201703L
  CHECK(pmr_thrown > 0, "the pmr resource never threw under injection");
#endif
  std::printf("C++ injection: %d std::bad_alloc thrown and caught, no leak, no crash\n", thrown);
}

static int rlimit_child() {
  failures = 0;
  std::vector<char *> keep;
  keep.reserve(1 << 16);
  struct rlimit rl;
  FILE *f = std::fopen("/proc/self/status", "r");
  char line[256];
  size_t kb = 0;
  while (f && std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "VmSize: %zu kB", &kb) == 1) break;
  if (f) std::fclose(f);
  rl.rlim_cur = rl.rlim_max = kb * 1024 + (size_t(160) << 20);
  if (setrlimit(RLIMIT_AS, &rl) != 0) return 2;
  int thrown = 0;
  size_t got1 = 0, got2 = 0;
  {
    std::vector<uint64_t, mtpool::allocator<uint64_t>> v;
    thrown += grow_until_bad_alloc(v, size_t(1) << 30);
    got1 = v.size();
    CHECK(intact(v), "vector contents under RLIMIT_AS");
  }
  mtp_pool_trim(nullptr);
  {
    std::list<uint64_t, mtpool::allocator<uint64_t>> l;
    try {
      for (;;) l.push_back(1);
    } catch (const std::bad_alloc &) {
      thrown++;
    }
    got2 = l.size();
  }
  mtp_pool_trim(nullptr);
  {
    std::vector<uint64_t, mtpool::allocator<uint64_t>> v;
    thrown += grow_until_bad_alloc(v, size_t(1) << 30);
    CHECK(v.size() * 10 >= got1 * 5, "after freeing, the vector grew to %zu only (first %zu)",
          v.size(), got1);
  }
  CHECK(thrown == 3, "%d of 3 phases threw bad_alloc", thrown);
  CHECK(blocks_in(nullptr) == 0, "blocks left %zu", blocks_in(nullptr));
  std::printf("C++ RLIMIT_AS: vector of %zu, list of %zu nodes, then bad_alloc each time\n", got1,
              got2);
  return failures ? 1 : 0;
}

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  injection_rounds();
  if (REL_SAN) {
    std::printf("SKIP part: RLIMIT_AS under a sanitizer\n");
  } else {
    std::fflush(nullptr);
    pid_t pid = fork();
    if (pid == 0) std::exit(rlimit_child());
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "RLIMIT_AS child status %#x", st);
  }
  return failures ? 1 : 0;
}
