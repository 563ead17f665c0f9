// The allocator requirements, checked through std::allocator_traits, for mtpool::allocator and
// mtpool::pool_allocator; the propagation behaviour of pool_allocator between containers on
// different pools; mtpool::pool; errors; over-aligned types; std::allocate_shared.
#include <mtpool/allocator.hpp>
#include <mtpool/containers.hpp>

#include "cxx_test_util.hpp"

#include <cstdint>
#include <future>
#include <limits>
#include <scoped_allocator>
#include <list>
#include <map>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

using mtpool_test::aligned_to;
using mtpool_test::blocks_in_use;
using mtpool_test::pool_containing;

namespace {

template <class T>
using PA = mtpool::pool_allocator<T>;

struct alignas(64) Line {
  unsigned char bytes[64];
  int id;
};
struct alignas(32) Pair32 {
  double a, b;
};
struct alignas(16) Quad {
  float v[4];
};
struct alignas(16) Quad3 {  // 48 bytes, alignment 16: the plain API must give 16-aligned blocks
  float v[12];
};

// ---- static properties -----------------------------------------------------------------------

typedef std::allocator_traits<mtpool::allocator<int>> AT;
static_assert(std::is_same<AT::value_type, int>::value, "value_type");
static_assert(std::is_same<AT::pointer, int *>::value, "pointer");
static_assert(std::is_same<AT::size_type, std::size_t>::value, "size_type");
static_assert(std::is_same<AT::rebind_alloc<double>, mtpool::allocator<double>>::value, "rebind");
static_assert(mtpool::allocator<int>::is_always_equal::value, "stateless");
static_assert(AT::propagate_on_container_move_assignment::value, "POCMA");
static_assert(!AT::propagate_on_container_copy_assignment::value, "POCCA");
static_assert(!AT::propagate_on_container_swap::value, "POCS");
static_assert(std::is_empty<mtpool::allocator<int>>::value, "no state");
static_assert(std::is_nothrow_default_constructible<mtpool::allocator<int>>::value, "");
static_assert(std::is_nothrow_copy_constructible<mtpool::allocator<int>>::value, "");
static_assert(std::is_nothrow_move_constructible<mtpool::allocator<int>>::value, "");
static_assert(std::is_nothrow_constructible<mtpool::allocator<int>, mtpool::allocator<char>>::value,
              "converting");
static_assert(std::is_same<mtpool::allocator<int>::rebind<long>::other, mtpool::allocator<long>>::value,
              "member rebind");

typedef std::allocator_traits<PA<int>> PT;
static_assert(std::is_same<PT::rebind_alloc<double>, PA<double>>::value, "rebind");
static_assert(!PA<int>::is_always_equal::value, "stateful");
static_assert(!PT::propagate_on_container_copy_assignment::value,
              "copy assignment keeps the target's pool");
static_assert(PT::propagate_on_container_move_assignment::value,
              "move assignment takes the source's memory and pool");
static_assert(PT::propagate_on_container_swap::value, "swap exchanges pools");
static_assert(sizeof(PA<int>) == sizeof(void *), "one pointer");
static_assert(std::is_nothrow_copy_constructible<PA<int>>::value, "");
static_assert(std::is_nothrow_move_constructible<PA<int>>::value, "");
static_assert(std::is_nothrow_constructible<PA<int>, PA<char>>::value, "converting");
static_assert(std::is_nothrow_constructible<PA<int>, mtpool::pool &>::value, "from pool");
static_assert(std::is_nothrow_constructible<PA<int>, mtp_pool_t *>::value, "from handle");
static_assert(!std::is_convertible<mtp_pool_t *, PA<int>>::value, "handle ctor is explicit");
// With these traits, moving containers never throws and never copies elements.
static_assert(std::is_nothrow_move_assignable<std::vector<int, PA<int>>>::value, "");
static_assert(std::is_nothrow_move_assignable<mtpool::vector<int>>::value, "");
static_assert(std::is_nothrow_move_constructible<std::list<int, PA<int>>>::value, "");

static_assert(!std::is_copy_constructible<mtpool::pool>::value, "pool not copyable");
static_assert(!std::is_copy_assignable<mtpool::pool>::value, "pool not copyable");
static_assert(std::is_nothrow_move_constructible<mtpool::pool>::value, "pool movable");
static_assert(std::is_nothrow_move_assignable<mtpool::pool>::value, "pool movable");

class AllocatorTest : public mtpool_test::DefaultPoolLeakCheck {};

// ---- mtpool::allocator -----------------------------------------------------------------------

TEST_F(AllocatorTest, TraitsAllocateConstructDestroyDeallocate) {
  mtpool::allocator<std::string> a;
  typedef std::allocator_traits<mtpool::allocator<std::string>> T;
  std::string *p = T::allocate(a, 3);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(mtp_pool_of(p), mtp_default_pool());
  EXPECT_GE(mtp_usable_size(p), 3 * sizeof(std::string));
  for (int i = 0; i < 3; ++i) T::construct(a, p + i, 50, static_cast<char>('a' + i));
  EXPECT_EQ(p[2], std::string(50, 'c'));
  for (int i = 0; i < 3; ++i) T::destroy(a, p + i);
  T::deallocate(a, p, 3);
}

TEST_F(AllocatorTest, ZeroSizedAllocationsAreUnique) {
  mtpool::allocator<int> a;
  int *p = a.allocate(0);
  int *q = a.allocate(0);
  EXPECT_NE(p, nullptr);
  EXPECT_NE(p, q);
  a.deallocate(p, 0);
  a.deallocate(q, 0);
}

TEST_F(AllocatorTest, CopyMoveConvertEqualityRebind) {
  mtpool::allocator<int> a;
  mtpool::allocator<int> b(a);
  mtpool::allocator<int> c(std::move(b));
  mtpool::allocator<double> d(c);
  AT::rebind_alloc<long> e(a);
  EXPECT_TRUE(a == c);
  EXPECT_TRUE(a == d);
  EXPECT_FALSE(a != e);
  EXPECT_TRUE(mtpool::allocator<int>(d) == a);
  // Memory from one instance is freed by another, of another type too (after rebinding back).
  double *p = d.allocate(4);
  mtpool::allocator<double>(a).deallocate(p, 4);
}

TEST_F(AllocatorTest, MaxSizeAndSelectOnCopy) {
  mtpool::allocator<int> a;
  EXPECT_EQ(AT::max_size(a), static_cast<std::size_t>(PTRDIFF_MAX) / sizeof(int));
  EXPECT_EQ(std::allocator_traits<mtpool::allocator<char>>::max_size(mtpool::allocator<char>()),
            static_cast<std::size_t>(PTRDIFF_MAX));
  EXPECT_TRUE(AT::select_on_container_copy_construction(a) == a);
}

TEST_F(AllocatorTest, HugeCountThrowsBadArrayNewLength) {
  mtpool::allocator<int> a;
  EXPECT_THROW((void)a.allocate(a.max_size() + 1), std::bad_array_new_length);
  EXPECT_THROW((void)a.allocate(std::numeric_limits<std::size_t>::max()),
               std::bad_array_new_length);
  EXPECT_THROW((void)a.allocate(std::numeric_limits<std::size_t>::max() / 2 + 1),
               std::bad_array_new_length);
  mtpool::allocator<Line> l;
  EXPECT_THROW((void)l.allocate(l.max_size() + 1), std::bad_array_new_length);
  // bad_array_new_length is a bad_alloc, so code catching bad_alloc sees it too.
  EXPECT_THROW((void)a.allocate(a.max_size() + 1), std::bad_alloc);
}

TEST_F(AllocatorTest, UnsatisfiableSizeThrowsBadAlloc) {
  // Legal counts whose bytes no system can map: the core returns NULL, the adapter throws.
  mtpool::allocator<int> a;
  EXPECT_THROW((void)a.allocate(a.max_size()), std::bad_alloc);
  mtpool::allocator<Line> l;
  EXPECT_THROW((void)l.allocate(l.max_size() / 2), std::bad_alloc);
  // A container whose growth fails is left as it was (strong guarantee of reserve).
  mtpool::vector<int> v(10, 7);
  EXPECT_THROW(v.reserve(v.max_size()), std::bad_alloc);
  EXPECT_EQ(v.size(), 10u);
  EXPECT_EQ(v[9], 7);
  v.push_back(8);
  EXPECT_EQ(v.back(), 8);
  // A request above the container's own max_size is the container's length_error.
  EXPECT_THROW(v.reserve(v.max_size() + 1), std::length_error);
}

// ---- over-aligned types ----------------------------------------------------------------------

template <class T, class A>
void check_alignment_of(A a) {
  for (std::size_t n = 0; n < 40; ++n) {
    T *p = a.allocate(n);
    EXPECT_TRUE(aligned_to(p, alignof(T))) << "n=" << n << " align=" << alignof(T);
    if (n > 0) {
      p[n - 1] = T();  // the whole range is writable
    }
    a.deallocate(p, n);
  }
}

TEST_F(AllocatorTest, OverAlignedTypes) {
  mtpool::pool p("aligned");
  check_alignment_of<Line>(mtpool::allocator<Line>());
  check_alignment_of<Pair32>(mtpool::allocator<Pair32>());
  check_alignment_of<Quad>(mtpool::allocator<Quad>());
  check_alignment_of<Quad3>(mtpool::allocator<Quad3>());
  check_alignment_of<Line>(PA<Line>(p));
  check_alignment_of<Pair32>(PA<Pair32>(p));
  check_alignment_of<Quad3>(PA<Quad3>(p));
  check_alignment_of<long double>(mtpool::allocator<long double>());

  // Containers of over-aligned elements, and nodes holding them.
  mtpool::vector<Line> v;
  mtpool::list<Line> l;
  std::map<int, Line, std::less<int>, PA<std::pair<const int, Line>>> m{PA<std::pair<const int, Line>>(p)};
  for (int i = 0; i < 200; ++i) {
    Line x = Line();
    x.id = i;
    v.push_back(x);
    l.push_back(x);
    m[i] = x;
  }
  for (int i = 0; i < 200; ++i) {
    EXPECT_TRUE(aligned_to(&v[static_cast<std::size_t>(i)], 64));
    EXPECT_EQ(v[static_cast<std::size_t>(i)].id, i);
    EXPECT_TRUE(aligned_to(&m[i], 64));
  }
  for (mtpool::list<Line>::const_iterator it = l.begin(); it != l.end(); ++it) {
    EXPECT_TRUE(aligned_to(&*it, 64));
  }
}

// ---- std::allocate_shared --------------------------------------------------------------------

TEST_F(AllocatorTest, AllocateShared) {
  std::size_t before = blocks_in_use();
  {
    std::shared_ptr<std::string> s =
        std::allocate_shared<std::string>(mtpool::allocator<std::string>(), 30, 'x');
    EXPECT_EQ(*s, std::string(30, 'x'));
    EXPECT_EQ(blocks_in_use(), before + 1);  // object and control block in one block
    std::weak_ptr<std::string> w = s;
    s.reset();
    EXPECT_TRUE(w.expired());
    EXPECT_EQ(blocks_in_use(), before + 1);  // the weak count keeps the control block
  }
  EXPECT_EQ(blocks_in_use(), before);

  std::shared_ptr<Line> l = std::allocate_shared<Line>(mtpool::allocator<Line>());
  EXPECT_TRUE(aligned_to(l.get(), 64));
  l.reset();

  mtpool::pool p("shared");
  {
    std::shared_ptr<int> i = std::allocate_shared<int>(PA<int>(p), 42);
    EXPECT_EQ(*i, 42);
    EXPECT_EQ(blocks_in_use(p.get()), 1u);
    std::shared_ptr<Line> pl = std::allocate_shared<Line>(PA<Line>(p));
    EXPECT_TRUE(aligned_to(pl.get(), 64));
    EXPECT_EQ(blocks_in_use(p.get()), 2u);
  }
  EXPECT_EQ(blocks_in_use(p.get()), 0u);
}

// ---- mtpool::pool ----------------------------------------------------------------------------

TEST_F(AllocatorTest, PoolOwnsNamesMovesAndReports) {
  mtpool::pool a("cxx-pool-a");
  ASSERT_TRUE(static_cast<bool>(a));
  EXPECT_STREQ(a.name(), "cxx-pool-a");
  EXPECT_STREQ(a.stats().name, "cxx-pool-a");
  EXPECT_EQ(a.stats().blocks_in_use, 0u);

  mtp_options_t opt;
  mtp_options_init(&opt);
  opt.name = "cxx-pool-opt";
  opt.purge_delay_ms = -1;
  mtpool::pool b(opt);
  EXPECT_STREQ(b.name(), "cxx-pool-opt");

  mtpool::pool unnamed;
  EXPECT_NE(unnamed.get(), nullptr);
  EXPECT_NE(unnamed.get(), a.get());

  {
    std::list<int, PA<int>> l{PA<int>(b)};
    for (int i = 0; i < 100; ++i) l.push_back(i);
    mtp_stats_t s = b.stats();
    EXPECT_EQ(s.blocks_in_use, 100u);
    EXPECT_GE(s.bytes_in_use, 100 * 3 * sizeof(void *));
    EXPECT_GE(s.allocs, 100u);
  }
  EXPECT_EQ(b.stats().blocks_in_use, 0u);
  EXPECT_EQ(b.stats().frees, b.stats().allocs);

  // Move construction and assignment transfer ownership; the source holds nothing after.
  mtp_pool_t *h = a.get();
  mtpool::pool c(std::move(a));
  EXPECT_EQ(c.get(), h);
  EXPECT_EQ(a.get(), nullptr);
  EXPECT_FALSE(static_cast<bool>(a));
  EXPECT_STREQ(a.name(), "");
  EXPECT_EQ(a.stats().blocks_in_use, 0u);
  EXPECT_EQ(a.trim(), 0u);
  EXPECT_EQ(PA<int>(a).pool_handle(), mtp_default_pool());  // like nullptr: the default pool
  a = std::move(c);  // a takes the pool back; c is empty
  EXPECT_EQ(a.get(), h);
  EXPECT_EQ(c.get(), nullptr);
  swap(a, unnamed);
  EXPECT_NE(a.get(), h);
  EXPECT_EQ(unnamed.get(), h);

  mtp_pool_t *raw = b.release();
  EXPECT_EQ(b.get(), nullptr);
  mtp_pool_destroy(raw);
}

TEST_F(AllocatorTest, PoolTrimReturnsEmptyPages) {
  mtp_options_t opt;
  mtp_options_init(&opt);
  opt.name = "cxx-trim";
  opt.purge_delay_ms = -1;  // only trim gives memory back
  mtpool::pool p(opt);
  {
    std::list<int, PA<int>> l{PA<int>(p)};
    for (int i = 0; i < 200000; ++i) l.push_back(i);
  }
  mtp_stats_t before = p.stats();
  EXPECT_EQ(before.blocks_in_use, 0u);
  std::size_t returned = p.trim();
  mtp_stats_t after = p.stats();
  EXPECT_GT(returned, 0u);
  EXPECT_LT(after.bytes_reserved, before.bytes_reserved);
}

TEST_F(AllocatorTest, PoolPrintStats) {
  mtpool::pool p("cxx-print");
  std::FILE *f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(p.print_stats(f), 0);
  EXPECT_GT(std::ftell(f), 0L);
  std::fclose(f);
  mtpool::pool empty(std::move(p));
  EXPECT_NE(p.print_stats(stdout), 0);  // moved-from: EINVAL, prints nothing
}

// Every size class through the adapter; a list<int> node is one block of the 24-byte class.
TEST_F(AllocatorTest, PoolClassStats) {
  mtpool::pool p("cxx-classes");
  int n = p.class_stats(nullptr, 0);
  ASSERT_GT(n, 0);
  std::vector<mtp_class_stats_t> cs(static_cast<std::size_t>(n));
  {
    std::list<int, PA<int>> l{PA<int>(p)};
    for (int i = 0; i < 1000; ++i) l.push_back(i);
    EXPECT_EQ(p.class_stats(cs.data(), static_cast<unsigned>(n)), n);
  }
  std::size_t blocks = 0;
  for (const mtp_class_stats_t &c : cs) {
    blocks += c.blocks_in_use;
    if (c.blocks_in_use != 0) {
      EXPECT_EQ(c.block_size, 24u);
    }
  }
  EXPECT_EQ(blocks, 1000u);
  EXPECT_EQ(p.class_stats(nullptr, 1), -1);
  mtpool::pool other(std::move(p));
  EXPECT_EQ(p.class_stats(cs.data(), static_cast<unsigned>(n)), 0);  // moved-from: nothing
}

// ---- mtpool::pool_allocator ------------------------------------------------------------------

TEST_F(AllocatorTest, PoolAllocatorConstructionEqualityRebind) {
  mtpool::pool p1("cxx-pa-1"), p2("cxx-pa-2");
  PA<int> a(p1);
  PA<int> b(p1.get());
  PA<int> c(p2);
  EXPECT_TRUE(a == b);
  EXPECT_TRUE(a != c);
  EXPECT_EQ(a.pool_handle(), p1.get());

  // Copy, move and converting construction keep the pool.
  PA<int> d(a);
  PA<int> e(std::move(d));
  PA<double> f(e);
  EXPECT_TRUE(f == a);
  EXPECT_EQ(f.pool_handle(), p1.get());
  PT::rebind_alloc<std::string> g(c);
  EXPECT_EQ(g.pool_handle(), p2.get());
  EXPECT_TRUE(g == c);
  EXPECT_FALSE(g == a);
  EXPECT_TRUE(PA<int>(g) == c);

  // Default and nullptr mean the default pool.
  EXPECT_EQ(PA<int>().pool_handle(), mtp_default_pool());
  EXPECT_EQ(PA<int>(static_cast<mtp_pool_t *>(nullptr)).pool_handle(), mtp_default_pool());
  EXPECT_TRUE(PA<int>() == PA<char>(mtp_default_pool()));

  // select_on_container_copy_construction keeps the pool; max_size like std::allocator's.
  EXPECT_TRUE(PT::select_on_container_copy_construction(c) == c);
  EXPECT_EQ(PT::max_size(a), static_cast<std::size_t>(PTRDIFF_MAX) / sizeof(int));

  // Blocks come from the bound pool; a rebound allocator frees them.
  int *x = a.allocate(10);
  EXPECT_EQ(mtp_pool_of(x), p1.get());
  EXPECT_EQ(blocks_in_use(p1.get()), 1u);
  PA<int>(f).deallocate(x, 10);
  EXPECT_EQ(blocks_in_use(p1.get()), 0u);

  EXPECT_THROW((void)a.allocate(a.max_size() + 1), std::bad_array_new_length);
  EXPECT_THROW((void)a.allocate(a.max_size()), std::bad_alloc);
}

// Element addresses, to check that a propagating operation moved memory, not elements.
template <class C>
std::vector<const void *> addresses(const C &c) {
  std::vector<const void *> r;
  for (typename C::const_iterator it = c.begin(); it != c.end(); ++it) r.push_back(&*it);
  return r;
}

template <class C>
bool all_in_pool(const C &c, mtp_pool_t *pool) {
  for (typename C::const_iterator it = c.begin(); it != c.end(); ++it) {
    if (pool_containing(&*it) != pool) return false;
  }
  return true;
}

TEST_F(AllocatorTest, MoveAssignmentAcrossPoolsTakesSourcePool) {
  mtpool::pool p1("cxx-ma-1"), p2("cxx-ma-2");
  typedef std::list<std::string, PA<std::string>> L;
  L a{PA<std::string>(p1)}, b{PA<std::string>(p2)};
  for (int i = 0; i < 10; ++i) a.push_back(std::string(40, 'a'));
  for (int i = 0; i < 20; ++i) b.push_back(std::string(40, 'b'));
  std::vector<const void *> b_nodes = addresses(b);
  a = std::move(b);
  EXPECT_EQ(a.get_allocator().pool_handle(), p2.get());  // the allocator propagated
  EXPECT_EQ(addresses(a), b_nodes);                       // nodes taken, not copied
  EXPECT_EQ(a.size(), 20u);
  EXPECT_TRUE(all_in_pool(a, p2.get()));
  EXPECT_EQ(blocks_in_use(p1.get()), 0u);  // a's old nodes went back to p1
  // The source is valid and empty; nothing requires its allocator after the move.
  EXPECT_TRUE(b.empty());
  b.push_back("again");
  EXPECT_EQ(b.front(), "again");

  // vector: the buffer is taken in O(1).
  std::vector<int, PA<int>> va{PA<int>(p1)}, vb{PA<int>(p2)};
  va.assign(100, 1);
  vb.assign(300, 2);
  const int *buffer = vb.data();
  va = std::move(vb);
  EXPECT_EQ(va.data(), buffer);
  EXPECT_EQ(va.get_allocator().pool_handle(), p2.get());
  EXPECT_EQ(mtp_pool_of(va.data()), p2.get());
}

TEST_F(AllocatorTest, SwapAcrossPoolsExchangesPools) {
  mtpool::pool p1("cxx-sw-1"), p2("cxx-sw-2");
  typedef std::map<int, int, std::less<int>, PA<std::pair<const int, int>>> M;
  M a{PA<std::pair<const int, int>>(p1)}, b{PA<std::pair<const int, int>>(p2)};
  for (int i = 0; i < 50; ++i) a[i] = i;
  for (int i = 0; i < 70; ++i) b[-i] = i;
  std::vector<const void *> a_nodes = addresses(a), b_nodes = addresses(b);
  a.swap(b);
  EXPECT_EQ(a.get_allocator().pool_handle(), p2.get());
  EXPECT_EQ(b.get_allocator().pool_handle(), p1.get());
  EXPECT_EQ(addresses(a), b_nodes);
  EXPECT_EQ(addresses(b), a_nodes);
  EXPECT_TRUE(all_in_pool(a, p2.get()));
  EXPECT_TRUE(all_in_pool(b, p1.get()));
  // Each container keeps working on its new pool.
  a[1000] = 1;
  b[1000] = 2;
  EXPECT_EQ(pool_containing(&*a.find(1000)), p2.get());
  EXPECT_EQ(pool_containing(&*b.find(1000)), p1.get());
  std::swap(a, b);
  EXPECT_EQ(a.get_allocator().pool_handle(), p1.get());
  EXPECT_EQ(a.size(), 51u);

  std::vector<int, PA<int>> va(5, 1, PA<int>(p1)), vb(7, 2, PA<int>(p2));
  va.swap(vb);
  EXPECT_EQ(va.size(), 7u);
  EXPECT_EQ(mtp_pool_of(va.data()), p2.get());
  EXPECT_EQ(va.get_allocator().pool_handle(), p2.get());
}

TEST_F(AllocatorTest, CopyAssignmentAcrossPoolsKeepsTargetPool) {
  mtpool::pool p1("cxx-ca-1"), p2("cxx-ca-2");
  typedef std::list<int, PA<int>> L;
  L a{PA<int>(p1)}, b{PA<int>(p2)};
  for (int i = 0; i < 10; ++i) a.push_back(i);
  for (int i = 0; i < 30; ++i) b.push_back(-i);
  a = b;
  EXPECT_EQ(a.get_allocator().pool_handle(), p1.get());
  EXPECT_TRUE(a == b);
  EXPECT_TRUE(all_in_pool(a, p1.get()));
  EXPECT_EQ(blocks_in_use(p1.get()), 30u);
  EXPECT_EQ(blocks_in_use(p2.get()), 30u);

  // Copy construction takes the source's pool (select_on_container_copy_construction).
  L c(b);
  EXPECT_EQ(c.get_allocator().pool_handle(), p2.get());
  EXPECT_TRUE(all_in_pool(c, p2.get()));
  // The allocator-extended copy puts the copy where asked.
  L d(b, PA<int>(p1));
  EXPECT_TRUE(all_in_pool(d, p1.get()));
}

TEST_F(AllocatorTest, MoveConstructionWithOtherPoolCopiesElements) {
  mtpool::pool p1("cxx-mc-1"), p2("cxx-mc-2");
  std::vector<std::string, PA<std::string>> a{PA<std::string>(p1)};
  a.assign(20, std::string(50, 'm'));
  std::vector<std::string, PA<std::string>> b(std::move(a), PA<std::string>(p2));
  EXPECT_EQ(b.size(), 20u);
  EXPECT_EQ(mtp_pool_of(b.data()), p2.get());
  EXPECT_EQ(b[19], std::string(50, 'm'));
}

// ---- pools and containers' lifetimes ----------------------------------------------------------

TEST_F(AllocatorTest, PoolOutlivesItsContainers) {
  mtp_pool_t *h;
  {
    mtpool::pool p("cxx-scope");
    h = p.get();
    {
      std::map<int, std::string, std::less<int>, PA<std::pair<const int, std::string>>> m{
          PA<std::pair<const int, std::string>>(p)};
      for (int i = 0; i < 1000; ++i) m[i] = std::string(40, 'x');
      std::vector<int, PA<int>> v{PA<int>(p)};
      v.resize(5000);
      EXPECT_GT(p.stats().blocks_in_use, 1000u);
    }
    EXPECT_EQ(p.stats().blocks_in_use, 0u);
  }  // the pool goes after its containers
  (void)h;
}

TEST_F(AllocatorTest, PoolDroppedInOneCall) {
  // The arena idiom: the containers are never destroyed one node at a time; destroying the pool
  // releases every node at once. The containers must not be touched afterwards.
  mtpool::pool p("cxx-arena");
  typedef std::map<int, int, std::less<int>, PA<std::pair<const int, int>>> M;
  M *m = new M(PA<std::pair<const int, int>>(p));  // the map object itself is on the heap
  for (int i = 0; i < 100000; ++i) (*m)[i] = i;
  EXPECT_EQ(p.stats().blocks_in_use, 100000u);
  p = mtpool::pool("cxx-arena-next");  // destroys the old pool, and with it all 100000 nodes
  ::operator delete(static_cast<void *>(m));  // the map header alone, without its destructor
  EXPECT_EQ(p.stats().blocks_in_use, 0u);
}

// ---- the rest of the library's allocator users -------------------------------------------------

TEST_F(AllocatorTest, ScopedAllocatorPutsNestedContainersInOnePool) {
  // With std::scoped_allocator_adaptor the outer container hands its pool to the elements it
  // constructs, so a whole tree of containers lives in one pool.
  mtpool::pool p("cxx-scoped");
  typedef std::basic_string<char, std::char_traits<char>, PA<char>> S;
  typedef std::scoped_allocator_adaptor<PA<S>> Outer;
  {
    std::vector<S, Outer> v{Outer(PA<S>(p))};
    for (int i = 0; i < 100; ++i) v.emplace_back(50, 'n');  // each string gets v's pool
    for (std::size_t i = 0; i < v.size(); ++i) {
      EXPECT_EQ(v[i].get_allocator().pool_handle(), p.get());
      EXPECT_EQ(mtp_pool_of(v[i].data()), p.get());
    }
    EXPECT_EQ(p.stats().blocks_in_use, 101u);  // the buffer and 100 strings
  }
  EXPECT_EQ(p.stats().blocks_in_use, 0u);
}

TEST_F(AllocatorTest, PromiseSharedStateFromTheAllocator) {
  mtpool::pool p("cxx-promise");
  {
    std::promise<int> pr(std::allocator_arg, PA<int>(p));
    std::future<int> f = pr.get_future();
    EXPECT_GE(p.stats().blocks_in_use, 1u);  // the shared state (and its result)
    pr.set_value(7);
    EXPECT_EQ(f.get(), 7);
  }
  EXPECT_EQ(p.stats().blocks_in_use, 0u);
  std::promise<std::string> pr2(std::allocator_arg, mtpool::allocator<int>());
  pr2.set_value("done");
  EXPECT_EQ(pr2.get_future().get(), "done");
}

}  // namespace
