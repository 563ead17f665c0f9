// Google Benchmark glue shared by the workload files of mtpool_bench.
#ifndef MTPOOL_BENCH_GBENCH_H
#define MTPOOL_BENCH_GBENCH_H

#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <string>

#include "bench_common.h"
#include "bench_families.h"

namespace mtpool_bench {

// Run-wide settings, fixed before the benchmarks are registered.
struct config {
  bool smoke = false;  // --smoke: tiny element counts, for the CI run
  // Scale a full-size count down for smoke runs (never below `floor`).
  long count(long full, long floor = 16) const { return smoke ? std::max(floor, full / 1000) : full; }
};

// Defined in one workload file each; each registers its benchmarks for every family.
void register_seed(const config &cfg);
void register_pairs(const config &cfg);
void register_cross_thread(const config &cfg);
void register_maps(const config &cfg);

// Memory counters of one benchmark run. sample_peak() reads /proc (a few microseconds): callers
// sample once per many operations so that the probe does not weigh on the timing. Thread 0
// samples the RSS before the timed loop, every thread offers its RSS at the workload's peak, and
// thread 0 reads it again after the loop, once every thread has left it (the per-iteration
// containers are gone by then).
class mem_probe {
 public:
  void start(benchmark::State &st) {
    if (st.thread_index() == 0) {
      base_ = rss_bytes();
      peak_.store(base_, std::memory_order_relaxed);
    }
  }
  void sample_peak() {
    std::size_t r = rss_bytes();
    std::size_t cur = peak_.load(std::memory_order_relaxed);
    while (r > cur && !peak_.compare_exchange_weak(cur, r, std::memory_order_relaxed)) {
    }
  }
  // Call after the loop on every thread. elements: live elements at the peak, all threads.
  void finish(benchmark::State &st, double elements) {
    bar_.arrive_and_wait(static_cast<unsigned>(st.threads()));
    if (st.thread_index() != 0) return;
    sample_peak();
    double growth = static_cast<double>(peak_.load()) - static_cast<double>(base_);
    double held = static_cast<double>(rss_bytes()) - static_cast<double>(base_);
    st.counters["rss_peak_MiB"] = benchmark::Counter(mib(growth));
    st.counters["rss_held_MiB"] = benchmark::Counter(mib(held));
    if (elements > 0) st.counters["bytes_per_elem"] = benchmark::Counter(growth / elements);
  }

 private:
  std::size_t base_ = 0;
  std::atomic<std::size_t> peak_{0};
  barrier bar_;
};

// Benchmark name: <workload>/<family key>[/<extra>].
inline std::string bench_name(const char *workload, const char *family, const std::string &extra = {}) {
  std::string n = std::string(workload) + "/" + family;
  if (!extra.empty()) n += "/" + extra;
  return n;
}

}  // namespace mtpool_bench

#endif
