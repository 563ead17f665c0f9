// Workload 1, the seed (seed_workload.h): one iteration is the whole job for one thread; items
// are list elements.
#include <cstdio>
#include <cstring>
#include <memory>

#include "bench_gbench.h"
#include "seed_workload.h"

namespace mtpool_bench {
namespace {

template <class F>
void register_family(const config &cfg) {
  if (!cfg.smoke && std::strcmp(F::key, "boost_pool") == 0) {
    // pool_allocator frees through ordered_free, a walk of the free list: freeing a list of
    // 1,000,000 nodes is quadratic (over 20 s per thread, see mtpool_proc --timeout).
    std::fprintf(stderr, "mtpool_bench: NOTICE: seed/boost_pool not run at full size (quadratic ordered_free)\n");
    return;
  }
  auto probe = std::make_shared<mem_probe>();
  for (long len : {9L, 40L}) {
    long n = cfg.count(1000000);
    benchmark::RegisterBenchmark(bench_name("seed", F::key).c_str(),
                                 [probe](benchmark::State &st) {
                                   const auto len = static_cast<std::size_t>(st.range(0));
                                   const long n = st.range(1);
                                   probe->start(st);
                                   mem_probe *pr = probe.get();
                                   for (auto _ : st)
                                     seed_job<F>(len, n, static_cast<unsigned>(st.thread_index()),
                                                 [pr] { pr->sample_peak(); });
                                   st.SetItemsProcessed(st.iterations() * n);
                                   probe->finish(st, static_cast<double>(n) * st.threads());
                                 })
        ->Args({len, n})
        ->ArgNames({"len", "elems"})
        ->ThreadRange(1, 4)
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace

void register_seed(const config &cfg) {
  for_each_family([&](auto f) { register_family<decltype(f)>(cfg); }, [](const char *, const char *) {});
}

}  // namespace mtpool_bench
