// Workload 5: std::map<int,int> and std::unordered_map<int,int>, each thread with its own map.
// Keys are drawn from [0, 65536); the map starts half full. Each iteration is one operation:
// half finds, a quarter inserts, a quarter erases, so the map stays about half full and every
// insert or erase of a present/absent key allocates or frees one node. Items are operations.
#include <functional>
#include <map>
#include <unordered_map>

#include "bench_gbench.h"

namespace mtpool_bench {
namespace {

template <class M>
void map_mix(benchmark::State &st, M &m, std::uint32_t keys, mem_probe &probe) {
  rng r(99 + static_cast<std::uint64_t>(st.thread_index()));
  for (std::uint32_t i = 0; i < keys / 2; ++i) m.emplace(static_cast<int>(r.below(keys)), 1);
  probe.start(st);
  std::uint64_t n = 0;
  for (auto _ : st) {
    std::uint64_t x = r.next();
    int key = static_cast<int>((x >> 32) % keys);
    switch (x & 3) {
      case 0:
      case 1: {
        auto it = m.find(key);
        benchmark::DoNotOptimize(it);
        break;
      }
      case 2: {
        auto res = m.emplace(key, static_cast<int>(x));
        benchmark::DoNotOptimize(res);
        break;
      }
      default: {
        auto erased = m.erase(key);
        benchmark::DoNotOptimize(erased);
        break;
      }
    }
    if ((++n & 0xFFFF) == 0) probe.sample_peak();  // /proc costs microseconds: rarely
  }
  st.SetItemsProcessed(st.iterations());
}

template <class F>
void register_family(const config &cfg) {
  const long keys = cfg.smoke ? 1024 : 65536;
  using V = std::pair<const int, int>;
  auto probe_map = std::make_shared<mem_probe>();
  benchmark::RegisterBenchmark(bench_name("map", F::key).c_str(),
                               [=](benchmark::State &st) {
                                 std::map<int, int, std::less<int>, typename F::template alloc<V>> m(
                                     F::template make<V>());
                                 map_mix(st, m, static_cast<std::uint32_t>(st.range(0)), *probe_map);
                                 probe_map->finish(st, static_cast<double>(m.size()) * st.threads());
                               })
      ->Arg(keys)
      ->ArgName("keys")
      ->ThreadRange(1, 4)
      ->UseRealTime();
  auto probe_umap = std::make_shared<mem_probe>();
  benchmark::RegisterBenchmark(bench_name("umap", F::key).c_str(),
                               [=](benchmark::State &st) {
                                 std::unordered_map<int, int, std::hash<int>, std::equal_to<int>,
                                                    typename F::template alloc<V>>
                                     m(16, std::hash<int>(), std::equal_to<int>(), F::template make<V>());
                                 map_mix(st, m, static_cast<std::uint32_t>(st.range(0)), *probe_umap);
                                 probe_umap->finish(st, static_cast<double>(m.size()) * st.threads());
                               })
      ->Arg(keys)
      ->ArgName("keys")
      ->ThreadRange(1, 4)
      ->UseRealTime();
}

}  // namespace

void register_maps(const config &cfg) {
  for_each_family([&](auto f) { register_family<decltype(f)>(cfg); }, [](const char *, const char *) {});
}

}  // namespace mtpool_bench
