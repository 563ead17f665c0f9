// Built with -D_GLIBCXX_USE_CXX11_ABI=0: libstdc++'s old copy-on-write std::basic_string, which
// allocates a reference-counted block for every non-empty string and shares it between copies.
// The adapter must work with it too (allocation through the rebound allocator, reference counts,
// copy on write, and release in whatever thread drops the last copy).
//
// Not a GoogleTest program: Debian's libgtest is built with the new ABI, and its interface takes
// std::string (assertion messages, test names), which in this translation unit would be the old
// string type: the link would fail or mix two string layouts. Plain checks, non-zero exit on
// failure.
#include <mtpool/containers.hpp>

#include <cstdio>
#include <list>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#if _GLIBCXX_USE_CXX11_ABI != 0
#error "build this file with -D_GLIBCXX_USE_CXX11_ABI=0"
#endif

static int failures = 0;
#define CHECK(cond)                                                                    \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);    \
      ++failures;                                                                      \
    }                                                                                  \
  } while (0)

static std::size_t blocks_in_use() {
  mtp_stats_t s;
  mtp_pool_stats(nullptr, &s);
  return s.blocks_in_use;
}

int main() {
  const std::size_t base = blocks_in_use();
  {
    mtpool::string a("x");  // old ABI: even a one-character string has its own block
    CHECK(blocks_in_use() == base + 1);
    mtpool::string b = a;  // shared representation, no new block
    CHECK(blocks_in_use() == base + 1);
    CHECK(a.data() == b.data());
    b += "yz";  // copy on write (may also grow): b gets its own block
    CHECK(a == "x" && b == "xyz");
    CHECK(a.data() != b.data());
    CHECK(blocks_in_use() == base + 2);
    mtpool::string empty;  // the shared empty representation: no block
    CHECK(blocks_in_use() == base + 2);
    for (int i = 0; i < 1000; ++i) b.push_back(static_cast<char>('a' + i % 26));
    CHECK(b.size() == 1003 && b[1002] == 'a' + 999 % 26);
    b.erase(3, 900);
    CHECK(b.size() == 103);
    mtpool::wstring w(L"wide");
    w.append(100, L'w');
    CHECK(w.size() == 104);
  }
  CHECK(blocks_in_use() == base);
  {
    mtpool::list<mtpool::string> l;
    mtpool::map<mtpool::string, mtpool::vector<mtpool::string>> m;
    for (int i = 0; i < 500; ++i) {
      mtpool::string s(static_cast<std::size_t>(i % 40 + 1), static_cast<char>('a' + i % 26));
      l.push_back(s);
      m[s].push_back(s);
    }
    CHECK(l.size() == 500);
    CHECK(m.size() == 500);  // (length, letter) pairs are distinct below lcm(40, 26) = 520
    mtpool::unordered_map<mtpool::string, int> u;
    u[mtpool::string("key")] = 3;
    CHECK(u[mtpool::string("key")] == 3);

    // The last copy of a shared string dropped by another thread.
    mtpool::vector<mtpool::string> shared(100, mtpool::string(50, 's'));
    std::thread t([&shared] { shared.clear(); });
    t.join();

    // A pool and a stateful allocator.
    mtpool::pool p("old-abi");
    typedef std::basic_string<char, std::char_traits<char>, mtpool::pool_allocator<char>> PS;
    PS ps("pooled", mtpool::pool_allocator<char>(p));
    PS copy = ps;
    CHECK(copy == "pooled");
    CHECK(p.stats().blocks_in_use == 1);
  }
  CHECK(blocks_in_use() == base);
  std::printf("copy-on-write std::string with mtpool: %s\n", failures == 0 ? "ok" : "FAILED");
  return failures == 0 ? 0 : 1;
}
