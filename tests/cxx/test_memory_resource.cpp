// mtpool::memory_resource (C++17): pmr containers over a pool and over the default pool,
// equality, alignment, errors, and use as the upstream of the standard pmr resources.
#include <mtpool/memory_resource.hpp>

#include "cxx_test_util.hpp"

#include <cstdint>
#include <limits>
#include <list>
#include <map>
#include <memory_resource>
#include <new>
#include <string>
#include <vector>

using mtpool_test::aligned_to;
using mtpool_test::blocks_in_use;
using mtpool_test::pool_containing;

namespace {

TEST(MemoryResourceTest, PmrContainersOnAPool) {
  mtpool::pool p("cxx-pmr");
  mtpool::memory_resource res(p);
  EXPECT_EQ(res.pool_handle(), p.get());
  {
    std::pmr::vector<int> v(&res);
    std::pmr::list<std::pmr::string> l(&res);
    std::pmr::map<int, std::pmr::string> m(&res);
    for (int i = 0; i < 1000; ++i) {
      v.push_back(i);
      l.emplace_back(40, static_cast<char>('a' + i % 26));
      m.emplace(i, std::pmr::string(50, 'm'));
    }
    EXPECT_EQ(mtp_pool_of(v.data()), p.get());
    EXPECT_EQ(mtp_pool_of(l.back().data()), p.get());  // uses-allocator: the strings too
    EXPECT_EQ(mtp_pool_of(m[500].data()), p.get());
    EXPECT_EQ(l.back(), std::pmr::string(40, 'a' + 999 % 26));
    EXPECT_GT(p.stats().blocks_in_use, 3000u);
    m.erase(m.begin(), m.find(500));
    EXPECT_EQ(m.size(), 500u);
    std::pmr::vector<int> copy(v, &res);
    EXPECT_EQ(copy, v);
  }
  EXPECT_EQ(p.stats().blocks_in_use, 0u);
}

TEST(MemoryResourceTest, DefaultPoolAndDefaultResource) {
  std::size_t before = blocks_in_use();
  mtpool::memory_resource res;
  EXPECT_EQ(res.pool_handle(), mtp_default_pool());
  EXPECT_EQ(mtpool::memory_resource(static_cast<mtp_pool_t *>(nullptr)).pool_handle(),
            mtp_default_pool());
  {
    std::pmr::vector<std::pmr::string> v(&res);
    v.emplace_back(100, 'd');
    EXPECT_EQ(mtp_pool_of(v.back().data()), mtp_default_pool());
  }
  std::pmr::memory_resource *old = std::pmr::set_default_resource(mtpool::default_resource());
  {
    std::pmr::list<int> l;  // the default resource, now mtpool
    l.assign(10, 3);
    EXPECT_EQ(pool_containing(&l.front()), mtp_default_pool());
  }
  std::pmr::set_default_resource(old);
  EXPECT_TRUE(*mtpool::default_resource() == res);
  EXPECT_EQ(blocks_in_use(), before);
}

TEST(MemoryResourceTest, EqualWhenOverTheSamePool) {
  mtpool::pool p1("cxx-pmr-eq1"), p2("cxx-pmr-eq2");
  mtpool::memory_resource a(p1), b(p1.get()), c(p2), d;
  mtpool::memory_resource a2(a);
  EXPECT_TRUE(a == a);
  EXPECT_TRUE(a == b);
  EXPECT_TRUE(a == a2);
  EXPECT_FALSE(a == c);
  EXPECT_FALSE(a == d);
  EXPECT_FALSE(a == *std::pmr::new_delete_resource());
  EXPECT_FALSE(*std::pmr::new_delete_resource() == a);

  // Containers on equal resources exchange memory: a move is O(1), nothing is copied.
  std::pmr::vector<int> x(&a), y(&b);
  x.assign(100, 1);
  const int *data = x.data();
  y = std::move(x);
  EXPECT_EQ(y.data(), data);
  // On unequal resources the elements are moved one by one into the target's pool.
  std::pmr::vector<int> z(&c);
  z = std::move(y);
  EXPECT_NE(z.data(), data);
  EXPECT_EQ(mtp_pool_of(z.data()), p2.get());
  // Memory from one resource is freed through another over the same pool.
  void *q = a.allocate(64, 16);
  b.deallocate(q, 64, 16);
}

TEST(MemoryResourceTest, AlignmentAndErrors) {
  mtpool::pool p("cxx-pmr-align");
  mtpool::memory_resource res(p);
  const std::size_t sizes[] = {0, 1, 7, 8, 24, 40, 64, 100, 256, 1000, 4096, 40000, 100000};
  for (std::size_t align = 1; align <= 4096; align *= 2) {
    for (std::size_t bytes : sizes) {
      // Several blocks live at once, so that they are not all the same (first) block.
      void *q[8];
      for (void *&b : q) {
        b = res.allocate(bytes, align);
        EXPECT_TRUE(aligned_to(b, align)) << bytes << " bytes, alignment " << align;
        if (bytes > 0) static_cast<unsigned char *>(b)[bytes - 1] = 1;
      }
      for (void *b : q) res.deallocate(b, bytes, align);
    }
  }
  EXPECT_EQ(p.stats().blocks_in_use, 0u);
  EXPECT_THROW((void)res.allocate(std::numeric_limits<std::size_t>::max() / 2), std::bad_alloc);
  EXPECT_THROW((void)res.allocate(std::numeric_limits<std::size_t>::max() / 2, 64),
               std::bad_alloc);
  // Sizes whose rounding up would wrap around, and alignments that are not powers of two. The
  // sizes are read through a volatile too: where gcc inlines the resource (-Os), it sees a
  // constant above PTRDIFF_MAX reach an alloc_size function and rejects it at compile time
  // (-Walloc-size-larger-than), and the run-time check is what is tested here.
  volatile std::size_t wrapping_size[] = {std::numeric_limits<std::size_t>::max(),
                                          std::numeric_limits<std::size_t>::max() - 3};
  EXPECT_THROW((void)res.allocate(wrapping_size[0], 8), std::bad_alloc);
  EXPECT_THROW((void)res.allocate(wrapping_size[1], 16), std::bad_alloc);
  // Read through a volatile: clang rejects a constant non-power-of-two alignment at compile time
  // (-Wnon-power-of-two-alignment), and the run-time check is what is tested here.
  volatile std::size_t bad_align[] = {3, 0, 48};
  EXPECT_THROW((void)res.allocate(8, bad_align[0]), std::bad_alloc);
  EXPECT_THROW((void)res.allocate(8, bad_align[1]), std::bad_alloc);
  EXPECT_THROW((void)res.allocate(64, bad_align[2]), std::bad_alloc);
}

TEST(MemoryResourceTest, UpstreamOfStandardPmrResources) {
  mtpool::pool p("cxx-pmr-upstream");
  mtpool::memory_resource res(p);
  {
    std::pmr::unsynchronized_pool_resource pooled(&res);
    std::pmr::monotonic_buffer_resource mono(&res);
    std::pmr::vector<std::pmr::string> a(&pooled), b(&mono);
    for (int i = 0; i < 500; ++i) {
      a.emplace_back(60, 'a');
      b.emplace_back(60, 'b');
    }
    EXPECT_GT(p.stats().blocks_in_use, 0u);
  }
  EXPECT_EQ(p.stats().blocks_in_use, 0u);
}

}  // namespace
