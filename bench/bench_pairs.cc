// Workload 2: allocate one block of N bytes, touch it, free it, repeatedly, on 1, 2 and 4 threads
// at once (each on its own blocks). Measures the allocator's fast path, the LIFO best case.
// Items are allocate+deallocate pairs.
#include <memory>

#include "bench_gbench.h"

namespace mtpool_bench {
namespace {

template <class F, std::size_t N>
void register_size(const config &) {
  benchmark::RegisterBenchmark(bench_name("pairs", F::key, "size:" + std::to_string(N)).c_str(),
                               [](benchmark::State &st) {
                                 using B = blk<N>;
                                 using A = typename F::template alloc<B>;
                                 A a = F::template make<B>();
                                 for (auto _ : st) {
                                   B *p = std::allocator_traits<A>::allocate(a, 1);
                                   p->bytes[0] = 1;
                                   benchmark::DoNotOptimize(p);
                                   std::allocator_traits<A>::deallocate(a, p, 1);
                                 }
                                 st.SetItemsProcessed(st.iterations());
                               })
      ->ThreadRange(1, 4)
      ->UseRealTime();
}

template <class F>
void register_family(const config &cfg) {
  register_size<F, 16>(cfg);
  register_size<F, 24>(cfg);
  register_size<F, 48>(cfg);
  register_size<F, 64>(cfg);
  register_size<F, 256>(cfg);
  register_size<F, 4096>(cfg);
}

}  // namespace

void register_pairs(const config &cfg) {
  for_each_family([&](auto f) { register_family<decltype(f)>(cfg); }, [](const char *, const char *) {});
}

}  // namespace mtpool_bench
