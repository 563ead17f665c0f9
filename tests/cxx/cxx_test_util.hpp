// Helpers shared by the C++ adapter tests.
#ifndef MTPOOL_CXX_TEST_UTIL_HPP
#define MTPOOL_CXX_TEST_UTIL_HPP

#include <mtpool/allocator.hpp>

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>

namespace mtpool_test {

// Blocks in use in pool (nullptr: the default pool). Exact while no other thread allocates.
inline std::size_t blocks_in_use(mtp_pool_t *pool = nullptr) {
  mtp_stats_t s;
  mtp_pool_stats(pool, &s);
  return s.blocks_in_use;
}

// The pool of the block that contains p. mtp_pool_of answers for block starts only (NULL for an
// interior pointer), and a container node's element usually sits after the node's links, so
// look back from p in steps of 8 bytes (blocks start on multiples of 8) to the block's start.
// The element need not be 8-aligned itself (libc++'s map node puts a pair<const int, int> at
// offset 28, after three links and a bool): start from p rounded down to a multiple of 8.
inline mtp_pool_t *pool_containing(const void *p) {
  const unsigned char *b = static_cast<const unsigned char *>(p);
  b -= reinterpret_cast<std::uintptr_t>(b) % 8;
  for (std::size_t back = 0; back <= 256; back += 8) {
    mtp_pool_t *pool = mtp_pool_of(b - back);
    if (pool != nullptr) return pool;
  }
  return nullptr;
}

inline bool aligned_to(const void *p, std::size_t a) {
  return reinterpret_cast<std::uintptr_t>(p) % a == 0;
}

// Every test built on this fixture checks that it gave back every block of the default pool it
// took: containers must free everything they allocated, with the right sizes.
class DefaultPoolLeakCheck : public ::testing::Test {
 protected:
  void SetUp() override { baseline_ = blocks_in_use(); }
  void TearDown() override { EXPECT_EQ(blocks_in_use(), baseline_) << "default-pool blocks leaked"; }

 private:
  std::size_t baseline_ = 0;
};

// Makes an allocator of type A: bound to pool p for pool_allocator, default-made otherwise.
template <class A>
struct make_alloc {
  static A make(mtpool::pool &) { return A(); }
};
template <class T>
struct make_alloc<mtpool::pool_allocator<T>> {
  static mtpool::pool_allocator<T> make(mtpool::pool &p) { return mtpool::pool_allocator<T>(p); }
};

// The pool a container's allocator draws from (the default pool for mtpool::allocator).
template <class A>
inline mtp_pool_t *pool_of_alloc(const A &) {
  return mtp_default_pool();
}
template <class T>
inline mtp_pool_t *pool_of_alloc(const mtpool::pool_allocator<T> &a) {
  return a.pool_handle();
}

}  // namespace mtpool_test

// GTEST_SKIP appeared in googletest 1.10; older versions just pass.
#ifndef GTEST_SKIP
#define GTEST_SKIP() return
#endif

#endif  // MTPOOL_CXX_TEST_UTIL_HPP
