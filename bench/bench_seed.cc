// Workload 1, the seed: each thread fills its own std::list of strings (push_back), copies every
// element out, then assigns a new string to every element. Strings of 9 characters fit the
// small-string buffer (only list nodes are allocated); strings of 40 allocate on every copy.
// One iteration is the whole job for one thread; items are list elements.
#include <cstdio>
#include <cstring>
#include <list>
#include <memory>

#include "bench_gbench.h"

namespace mtpool_bench {
namespace {

template <class F>
void seed_job(std::size_t len, long n, unsigned tid, mem_probe *probe) {
  using S = str_t<F>;
  using L = std::list<S, typename F::template alloc<S>>;
  char first[64], second[64];
  std::memset(first, 'a' + static_cast<int>(tid % 26), sizeof first);
  std::memset(second, 'A' + static_cast<int>(tid % 26), sizeof second);
  L list(F::template make<S>());
  for (long i = 0; i < n; ++i) list.push_back(S(first, len, F::template make<char>()));
  for (const S &e : list) {
    S copy(e, F::template make<char>());
    benchmark::DoNotOptimize(copy.data());
  }
  for (S &e : list) e = S(second, len, F::template make<char>());
  if (probe) probe->sample_peak();
  benchmark::DoNotOptimize(list.back().data());
}

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
                                   for (auto _ : st)
                                     seed_job<F>(len, n, static_cast<unsigned>(st.thread_index()), probe.get());
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
