// A program that declares unconstrained comparison templates in the global namespace, as some
// code bases do, must still be able to use mtpool's allocators and resources with the standard
// containers: the library compares allocators itself (list and vector assignment, swap), and
// with only template operators in mtpool those comparisons were ambiguous ("ambiguous overload
// for operator!="). Built and run in C++11, 14, 17 and 20 (cxx_unconstrained_ops_cxxNN): the
// build is the main check; the run checks that mtpool's comparisons, not the global templates,
// are the ones chosen (the templates answer the opposite of mtpool).
#include <mtpool/mtpool.hpp>  // the allocators, and the pmr resource where the library has one

#include <cstdio>
#include <list>
#include <string>
#include <utility>
#include <vector>

#include "testhelper.h"  // CHECK: stops the program with file and line

static int template_calls = 0;

template <class T>
bool operator==(const T &, const T &) {
  ++template_calls;
  return false;
}
template <class T>
bool operator!=(const T &, const T &) {
  ++template_calls;
  return true;
}

// A type of the global namespace, so that the global templates are found by argument-dependent
// lookup from inside the standard library (through allocator<_List_node<Elem>>).
struct Elem {
  int v;
};

namespace {

template <class Alloc>
int assign_lists(const Alloc &a, const Alloc &b) {
  typedef typename std::allocator_traits<Alloc>::template rebind_alloc<Elem> ElemAlloc;
  std::list<Elem, ElemAlloc> x(ElemAlloc{a}), y(ElemAlloc{b});
  for (int i = 0; i < 100; ++i) x.push_back(Elem{i});
  y = x;  // copy assignment compares the allocators (the reported failure)
  CHECK(y.size() == 100 && y.back().v == 99);
  std::list<Elem, ElemAlloc> z(ElemAlloc{b});
  z = std::move(y);
  CHECK(z.size() == 100);
  x.swap(z);
#if !defined(_LIBCPP_VERSION)
  // Not with libc++ (16): its vector compares its own reverse_iterator<Elem *>s, which the global
  // templates make ambiguous with std::allocator<Elem> as well; nothing an allocator can change.
  std::vector<Elem, ElemAlloc> v(ElemAlloc{a}), w(ElemAlloc{b});
  v.push_back(Elem{1});
  w = v;
  CHECK(w.size() == 1);
#endif
  return 0;
}

int run() {
  mtpool::allocator<Elem> a1, a2;
  CHECK(a1 == a2);
  CHECK(!(a1 != a2));
  CHECK(mtpool::allocator<int>() == mtpool::allocator<Elem>());  // cross-type, still there
  CHECK(!(mtpool::allocator<int>() != mtpool::allocator<Elem>()));
  if (assign_lists(a1, a2) != 0) return 1;

  mtpool::pool p("unconstrained"), q("unconstrained-2");
  mtpool::pool_allocator<Elem> pa(p), pb(p), qa(q);
  CHECK(pa == pb);
  CHECK(!(pa != pb));
  CHECK(pa != qa);
  CHECK(!(pa == qa));
  CHECK(mtpool::pool_allocator<int>(p) == pa);  // cross-type
  CHECK(mtpool::pool_allocator<int>(q) != pa);
  if (assign_lists(pa, pb) != 0) return 1;
  if (assign_lists(pa, qa) != 0) return 1;

#if MTPOOL_HAS_MEMORY_RESOURCE
  mtpool::memory_resource r1(p), r2(p), r3(q);
  CHECK(r1 == r2);
  CHECK(!(r1 != r2));
  CHECK(r1 != r3);
  CHECK(!(r1 == r3));
#endif

  CHECK(template_calls == 0);
  return 0;
}

}  // namespace

int main() {
  int rc = run();
  // The templates are used on a type of their own, so that they are instantiated at all.
  Elem e{1};
  if (rc == 0 && (e == e || !(e != e) || template_calls != 2)) rc = 1;
  if (rc == 0) std::puts("mtpool comparisons chosen over unconstrained global templates");
  return rc;
}
