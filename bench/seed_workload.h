// The seed workload, written once: Google Benchmark's seed case (bench_seed.cc) and the
// process-level driver (proc_driver.cc, scripts/bench.sh's table) both run this job.
// Each thread fills its own std::list of strings (push_back n strings of len characters), copies
// every element out, then assigns a new string to every element. Strings of 9 characters fit the
// small-string buffer (only list nodes are allocated); strings of 40 allocate on every copy.
#ifndef MTPOOL_BENCH_SEED_WORKLOAD_H
#define MTPOOL_BENCH_SEED_WORKLOAD_H

#include <cstddef>
#include <cstring>
#include <list>

#include "bench_families.h"

namespace mtpool_bench {

// One thread's whole job for allocator family F. at_peak() is called once, when the list is
// complete and all its strings are live (the caller samples peak memory there, or does nothing).
template <class F, class AtPeak>
void seed_job(std::size_t len, long n, unsigned tid, AtPeak at_peak) {
  using S = str_t<F>;
  using L = std::list<S, typename F::template alloc<S>>;
  char first[64], second[64];
  std::memset(first, 'a' + static_cast<int>(tid % 26), sizeof first);
  std::memset(second, 'A' + static_cast<int>(tid % 26), sizeof second);
  L list(F::template make<S>());
  for (long i = 0; i < n; ++i) list.push_back(S(first, len, F::template make<char>()));
  for (const S &e : list) {
    S copy(e, F::template make<char>());
    escape(copy.data());
  }
  for (S &e : list) e = S(second, len, F::template make<char>());
  at_peak();
  escape(list.back().data());
}

}  // namespace mtpool_bench

#endif  // MTPOOL_BENCH_SEED_WORKLOAD_H
