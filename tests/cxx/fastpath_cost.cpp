// Measurement tool (not a test): instructions per allocate+deallocate pair through
// mtpool::allocator<int> against calling the C core directly. Run it under callgrind with two
// counts and take the difference, which cancels start-up and the first slab's setup:
//
//   valgrind --tool=callgrind --callgrind-out-file=/dev/null ./fastpath_cost cxx12 1000000
//   valgrind --tool=callgrind --callgrind-out-file=/dev/null ./fastpath_cost cxx12 2000000
//   instructions per pair = (Ir(2000000) - Ir(1000000)) / 1000000
//
// Modes: cxx12 / c12 (12 ints = 48 bytes), cxx1 / c1 (one int = 4 bytes); cxx = the adapter,
// c = mtp_alloc (with the NULL check every correct caller makes) + mtp_free_sized. Build with
// optimisation (Release or RelWithDebInfo). Measured on the development machine (gcc 12, -O2):
// 80 instructions per pair for both cxx12 and c12, and for both cxx1 and c1; the adapter's
// loop compiles to the same instructions as the C loop (objdump -d: call mtp_alloc, test, call
// mtp_free_sized), its only addition over bare calls being the NULL test (2 instructions).
#include <mtpool/allocator.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

// Keeps the compiler from dropping a pointer that is never read.
inline void escape(void *p) { __asm__ __volatile__("" : : "r"(p) : "memory"); }

template <std::size_t N>
__attribute__((noinline)) void run_cxx(long count) {
  mtpool::allocator<int> a;
  for (long i = 0; i < count; ++i) {
    int *p = a.allocate(N);
    escape(p);
    a.deallocate(p, N);
  }
}

template <std::size_t N>
__attribute__((noinline)) void run_c(long count) {
  for (long i = 0; i < count; ++i) {
    void *p = mtp_alloc(N * sizeof(int));
    if (__builtin_expect(p == nullptr, 0)) std::abort();  // a correct C caller checks for NULL
    escape(p);
    mtp_free_sized(p, N * sizeof(int));
  }
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s cxx12|c12|cxx1|c1 COUNT\n", argv[0]);
    return 2;
  }
  long count = std::atol(argv[2]);
  if (std::strcmp(argv[1], "cxx12") == 0) {
    run_cxx<12>(count);
  } else if (std::strcmp(argv[1], "c12") == 0) {
    run_c<12>(count);
  } else if (std::strcmp(argv[1], "cxx1") == 0) {
    run_cxx<1>(count);
  } else if (std::strcmp(argv[1], "c1") == 0) {
    run_c<1>(count);
  } else {
    std::fprintf(stderr, "unknown mode %s\n", argv[1]);
    return 2;
  }
  return 0;
}
