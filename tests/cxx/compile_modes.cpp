// Built once per language mode (C++11, 14, 17, 20) with the project's warnings (and -Werror in
// CI), and run: the headers compile warning-free in every mode, and the basic uses work there.
// No GoogleTest here, so the same file also serves the clang++ -fsyntax-only checks.
#include <mtpool/mtpool.hpp>

#include <cstdio>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#define CHECK(cond)                                                               \
  do {                                                                            \
    if (!(cond)) {                                                                \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      return 1;                                                                   \
    }                                                                             \
  } while (0)

namespace {

struct alignas(64) Line {
  unsigned char bytes[64];
};

int run() {
  // Every alias, instantiated.
  mtpool::string s("a string long enough to leave the small buffer");
  mtpool::wstring ws(L"wide");
  mtpool::u16string s16(u"sixteen");
  mtpool::u32string s32(U"thirty-two");
  mtpool::basic_string<char> bs(s);
  mtpool::vector<mtpool::string> v(3, s);
  mtpool::deque<int> d(5, 1);
  mtpool::list<int> l(4, 2);
  mtpool::forward_list<int> fl(3, 3);
  mtpool::map<int, mtpool::string> m;
  mtpool::multimap<int, int> mm;
  mtpool::set<mtpool::string> st;
  mtpool::multiset<int> ms;
  mtpool::unordered_map<mtpool::string, int> um;
  mtpool::unordered_set<int> us;
  mtpool::unordered_multimap<int, int> umm;
  mtpool::unordered_multiset<int> ums;
  m[1] = s;
  mm.insert(std::make_pair(1, 1));
  st.insert(s);
  ms.insert(1);
  um[s] = 1;
  us.insert(1);
  umm.insert(std::make_pair(2, 2));
  ums.insert(2);
  CHECK(v[2] == s && d.size() == 5 && l.back() == 2 && fl.front() == 3);
  CHECK(m[1] == s && um[bs] == 1 && st.count(s) == 1 && ws.size() == 4);
  CHECK(s16.size() == 7 && s32.size() == 10);

  // A pool and a stateful allocator; propagation on move.
  mtpool::pool p("modes");
  std::vector<int, mtpool::pool_allocator<int>> pv{mtpool::pool_allocator<int>(p)};
  pv.assign(100, 7);
  CHECK(mtp_pool_of(pv.data()) == p.get());
  std::vector<int, mtpool::pool_allocator<int>> other;
  other = std::move(pv);
  CHECK(other.get_allocator().pool_handle() == p.get() && other.size() == 100);

  // Over-aligned elements and allocate_shared.
  mtpool::vector<Line> lines(10);
  CHECK(reinterpret_cast<std::size_t>(lines.data()) % 64 == 0);
  std::shared_ptr<Line> sp = std::allocate_shared<Line>(mtpool::allocator<Line>());
  CHECK(reinterpret_cast<std::size_t>(sp.get()) % 64 == 0);

#if MTPOOL_HAS_MEMORY_RESOURCE
  // pmr (C++17, where the standard library has it: not libc++ 14 or 15).
  mtpool::memory_resource res(p);
  std::pmr::vector<std::pmr::string> pm(&res);
  pm.emplace_back(100, 'x');
  CHECK(mtp_pool_of(pm.back().data()) == p.get());
#endif
  return 0;
}

}  // namespace

int main() {
  int rc = run();
  std::printf("C++ adapter, __cplusplus %ld: %s\n", static_cast<long>(__cplusplus),
              rc == 0 ? "ok" : "FAILED");
  return rc;
}
