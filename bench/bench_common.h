// Helpers shared by every benchmark program: resident memory, a deterministic RNG, a barrier,
// and the element counts (full or --smoke). No Google Benchmark here: the process driver uses it.
#ifndef MTPOOL_BENCH_COMMON_H
#define MTPOOL_BENCH_COMMON_H

#include <unistd.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <mutex>

namespace mtpool_bench {

// Resident set size of this process in bytes (/proc/self/statm, second field).
inline std::size_t rss_bytes() {
  std::FILE *f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long size = 0, resident = 0;
  int n = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  if (n != 2) return 0;
  return static_cast<std::size_t>(resident) * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

// splitmix64: small, fast, deterministic per seed.
struct rng {
  std::uint64_t s;
  explicit rng(std::uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n).
  std::uint32_t below(std::uint32_t n) {
    return static_cast<std::uint32_t>((static_cast<std::uint64_t>(next() >> 32) * n) >> 32);
  }
};

// Reusable barrier for a fixed set of threads (all callers pass the same count).
class barrier {
 public:
  void arrive_and_wait(unsigned count) {
    std::unique_lock<std::mutex> lk(m_);
    unsigned gen = gen_;
    if (++waiting_ == count) {
      waiting_ = 0;
      ++gen_;
      cv_.notify_all();
    } else {
      cv_.wait(lk, [&] { return gen != gen_; });
    }
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  unsigned waiting_ = 0;
  unsigned gen_ = 0;
};

inline double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

}  // namespace mtpool_bench

#endif
