// mtpool_proc: the process-level half of the suite. One allocator, one workload, one fresh process,
// one JSON line on stdout. Whole-process figures (first-touch wall time, resident memory) need a
// clean process per allocator, and tcmalloc / jemalloc / mimalloc replace malloc for the whole
// process, so scripts/bench.sh runs this once per allocator (with LD_PRELOAD for those three).
// Built twice: mtpool_proc (C++11 std::string) and mtpool_proc_cow (-D_GLIBCXX_USE_CXX11_ABI=0,
// the copy-on-write std::string, into which Google Benchmark cannot be linked).
//
//   mtpool_proc --alloc KEY --test seed      [--threads 4] [--n 1000000] [--len 9]
//   mtpool_proc --alloc KEY --test footprint [--threads 4] [--n 1000000] --kind list_int|map_int|list_str40
//   mtpool_proc --alloc KEY --test giveback  [--threads 4] [--n 50000000]   (blocks of 120 B, total)
//   mtpool_proc --alloc KEY --test pairs     [--n 1000000]   (48-byte pairs, one thread)
//   mtpool_proc --list                        families compiled in, and notices for missing ones
//   mtpool_proc --smoke                       every test, every family, tiny counts (CI)
// Common: --delay-ms D (wait after freeing before the "after delay" sample, default 500),
//         --timeout S (give up after S seconds and print {"timeout":true}, default 600),
//         --warm-mib M (before the test, map M MiB advised huge, touch and unmap it, outside every
//         figure: on a VM that reports free memory to its host, memory freed seconds ago is
//         faulted back in by the host, 0.3-0.7 s of system time on the seed whichever allocator
//         uses huge pages; warmed, a run sees the machine as a busy server's; default 0).
//
// seed: the Google Benchmark seed workload (push_back n strings, copy each out, assign each), run
//   once per thread; wall_s is from before the threads start to after they are joined; cpu_s is the
//   user + system CPU time of the process over the same span (less sensitive to a busy machine),
//   minflt its page faults, anon_huge_kb the most AnonHugePages seen (sampled every 10 ms over the
//   same span and once at its end: bench/tools/smaps.h).
// footprint / giveback: the threads build (barrier) -> peak sample -> free everything (barrier) ->
//   after_free sample -> sleep delay-ms -> after_delay sample -> trim where the allocator can
//   (each thread, then the main thread) -> after_trim sample -> threads exit -> after_exit sample.
#include <signal.h>
#include <sys/resource.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <functional>
#include <list>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.h"
#include "bench_families.h"
#include "seed_workload.h"
#include "tools/smaps.h"
#include "tools/warm.h"

namespace mtpool_bench {
namespace {

struct options {
  std::string alloc = "std", test = "seed", kind = "list_int";
  unsigned threads = 4;
  long n = -1;
  std::size_t len = 9;
  long delay_ms = 500;
  unsigned timeout = 600;
  long warm_mib = 0;
};


#if _GLIBCXX_USE_CXX11_ABI
constexpr const char *abi = "cxx11";
#else
constexpr const char *abi = "cow";
#endif

// ---------------------------------------------------------------------------------------------
// JSON output
// ---------------------------------------------------------------------------------------------

class json_line {
 public:
  json_line &str(const char *k, const std::string &v) {
    add(k);
    out_ += '"' + v + '"';
    return *this;
  }
  json_line &num(const char *k, double v) {
    add(k);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    out_ += buf;
    return *this;
  }
  void print() const { std::printf("{%s}\n", out_.c_str()); std::fflush(stdout); }

 private:
  void add(const char *k) {
    if (!out_.empty()) out_ += ", ";
    out_ += '"' + std::string(k) + "\": ";
  }
  std::string out_;
};

template <class F>
json_line header(const options &o) {
  json_line j;
  j.str("alloc", F::key).str("label", F::label).str("malloc", malloc_in_use()).str("abi", abi);
  j.str("test", o.test).num("threads", o.threads).num("n", static_cast<double>(o.n));
  return j;
}

// ---------------------------------------------------------------------------------------------
// seed
// ---------------------------------------------------------------------------------------------

// The job itself: seed_workload.h (shared with the Google Benchmark case).

// CPU seconds (user + system) and minor page faults of the whole process so far.
struct usage {
  double cpu_s;
  double minflt;
};
usage process_usage() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto sec = [](const timeval &t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return {sec(ru.ru_utime) + sec(ru.ru_stime), static_cast<double>(ru.ru_minflt)};
}

template <class F>
void run_seed(const options &o) {
  const long n = o.n < 0 ? 1000000 : o.n;
  std::size_t base = rss_bytes();
  usage u0 = process_usage();
  smaps_sampler thp;
  smaps_sampler_start(&thp, 0, 0, 10);
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < o.threads; ++t) ts.emplace_back([&, t] { seed_job<F>(o.len, n, t, [] {}); });
  for (auto &t : ts) t.join();
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  usage u1 = process_usage();
  const long huge = smaps_sampler_stop(&thp);
  options shown = o;
  shown.n = n;
  header<F>(shown)
      .num("len", static_cast<double>(o.len))
      .num("wall_s", wall)
      .num("cpu_s", u1.cpu_s - u0.cpu_s)
      .num("minflt", u1.minflt - u0.minflt)
      .num("anon_huge_kb", static_cast<double>(huge))
      .num("items_per_s", static_cast<double>(n) * o.threads / wall)
      .num("rss_base", static_cast<double>(base))
      .num("rss_end", static_cast<double>(rss_bytes()))
      .print();
}

// ---------------------------------------------------------------------------------------------
// footprint and giveback: the same measured phases, different build/free steps
// ---------------------------------------------------------------------------------------------

// What is known when the run times out (set once the peak is sampled), printed by on_timeout.
char partial[1024] = "{\"timeout\": true}\n";

struct phases {
  std::size_t base = 0, peak = 0, after_free = 0, after_delay = 0, after_trim = 0, after_exit = 0;
  const char *trim = nullptr;
  double build_s = 0, free_s = 0;
};

// Worker t runs build(t), waits, runs release(t), waits, trims its own caches, waits, exits.
template <class F>
phases measure(const options &o, const std::function<void(unsigned)> &build,
               const std::function<void(unsigned)> &release) {
  phases ph;
  barrier bar;
  const unsigned all = o.threads + 1;
  ph.base = rss_bytes();
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < o.threads; ++t)
    ts.emplace_back([&, t] {
      build(t);
      bar.arrive_and_wait(all);  // built
      bar.arrive_and_wait(all);  // peak sampled
      release(t);
      bar.arrive_and_wait(all);  // freed
      bar.arrive_and_wait(all);  // after_free and after_delay sampled
      F::trim_thread();
      bar.arrive_and_wait(all);  // threads trimmed
      bar.arrive_and_wait(all);  // after_trim sampled
    });
  auto t0 = std::chrono::steady_clock::now();
  bar.arrive_and_wait(all);
  auto t1 = std::chrono::steady_clock::now();
  ph.peak = rss_bytes();
  std::snprintf(partial, sizeof partial,
                "{\"alloc\": \"%s\", \"label\": \"%s\", \"malloc\": \"%s\", \"abi\": \"%s\", \"test\": \"%s\", "
                "\"kind\": \"%s\", \"threads\": %u, \"rss_base\": %zu, \"rss_peak\": %zu, \"build_s\": %g, "
                "\"timeout\": true}\n",
                F::key, F::label, malloc_in_use(), abi, o.test.c_str(), o.kind.c_str(), o.threads, ph.base, ph.peak,
                std::chrono::duration<double>(t1 - t0).count());
  bar.arrive_and_wait(all);
  bar.arrive_and_wait(all);
  auto t2 = std::chrono::steady_clock::now();
  ph.after_free = rss_bytes();
  std::this_thread::sleep_for(std::chrono::milliseconds(o.delay_ms));
  ph.after_delay = rss_bytes();
  bar.arrive_and_wait(all);
  bar.arrive_and_wait(all);
  ph.trim = F::trim_all();
  ph.after_trim = rss_bytes();
  bar.arrive_and_wait(all);
  for (auto &t : ts) t.join();
  ph.after_exit = rss_bytes();
  ph.build_s = std::chrono::duration<double>(t1 - t0).count();
  ph.free_s = std::chrono::duration<double>(t2 - t1).count();
  return ph;
}

template <class F>
void print_phases(json_line j, const options &o, const phases &ph, double elements) {
  j.num("delay_ms", static_cast<double>(o.delay_ms))
      .num("rss_base", static_cast<double>(ph.base))
      .num("rss_peak", static_cast<double>(ph.peak))
      .num("rss_after_free", static_cast<double>(ph.after_free))
      .num("rss_after_delay", static_cast<double>(ph.after_delay))
      .num("rss_after_trim", static_cast<double>(ph.after_trim))
      .num("rss_after_exit", static_cast<double>(ph.after_exit))
      .str("trim", ph.trim ? ph.trim : "none")
      .num("build_s", ph.build_s)
      .num("free_s", ph.free_s)
      .num("bytes_per_elem", (static_cast<double>(ph.peak) - static_cast<double>(ph.base)) / elements)
      .print();
}

template <class F, class C, class Fill>
void footprint_of(const options &o, long n, Fill fill) {
  std::vector<C *> cs(o.threads, nullptr);
  phases ph = measure<F>(
      o,
      [&](unsigned t) {
        cs[t] = new C(F::template make<typename C::value_type>());
        fill(*cs[t], n, t);
      },
      [&](unsigned t) {
        delete cs[t];
        cs[t] = nullptr;
      });
  options shown = o;
  shown.n = n;
  print_phases<F>(header<F>(shown).str("kind", o.kind), o, ph, static_cast<double>(n) * o.threads);
}

template <class F>
void run_footprint(const options &o) {
  const long n = o.n < 0 ? 1000000 : o.n;
  if (o.kind == "list_int") {
    using C = std::list<int, typename F::template alloc<int>>;
    footprint_of<F, C>(o, n, [](C &c, long k, unsigned) {
      for (long i = 0; i < k; ++i) c.push_back(static_cast<int>(i));
    });
  } else if (o.kind == "map_int") {
    using V = std::pair<const int, int>;
    using C = std::map<int, int, std::less<int>, typename F::template alloc<V>>;
    footprint_of<F, C>(o, n, [](C &c, long k, unsigned) {
      for (long i = 0; i < k; ++i) c.emplace(static_cast<int>(i), static_cast<int>(i));
    });
  } else if (o.kind == "list_str40") {
    using S = str_t<F>;
    using C = std::list<S, typename F::template alloc<S>>;
    footprint_of<F, C>(o, n, [](C &c, long k, unsigned t) {
      char text[40];
      std::memset(text, 'a' + static_cast<int>(t), sizeof text);
      for (long i = 0; i < k; ++i) c.push_back(S(text, sizeof text, F::template make<char>()));
    });
  } else {
    std::fprintf(stderr, "mtpool_proc: unknown --kind %s\n", o.kind.c_str());
    std::exit(2);
  }
}

template <class F>
void run_giveback(const options &o) {
  using B = blk<120>;
  using A = typename F::template alloc<B>;
  const long total = o.n < 0 ? 50000000 : o.n;
  const long per = total / static_cast<long>(o.threads);
  // Pointer arrays come straight from mmap and are touched before the baseline, so that they are
  // neither served by the allocator under test nor counted in its growth.
  std::vector<B **> ptrs(o.threads);
  const std::size_t bytes = static_cast<std::size_t>(per) * sizeof(B *);
  for (auto &p : ptrs) {
    void *m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
      std::perror("mtpool_proc: mmap");
      std::exit(1);
    }
    std::memset(m, 0, bytes);
    p = static_cast<B **>(m);
  }
  phases ph = measure<F>(
      o,
      [&](unsigned t) {
        A a = F::template make<B>();
        for (long i = 0; i < per; ++i) {
          B *b = std::allocator_traits<A>::allocate(a, 1);
          b->bytes[0] = 1;
          ptrs[t][i] = b;
        }
      },
      [&](unsigned t) {
        A a = F::template make<B>();
        for (long i = 0; i < per; ++i) std::allocator_traits<A>::deallocate(a, ptrs[t][i], 1);
      });
  options shown = o;
  shown.n = per * static_cast<long>(o.threads);
  print_phases<F>(header<F>(shown).num("block", sizeof(B)), o, ph, static_cast<double>(shown.n));
  for (auto &p : ptrs) munmap(p, bytes);
}

// pairs: n allocate+deallocate pairs of 48 bytes on one thread. For instruction counts under
// callgrind: bench_full.sh runs it with two values of n and divides the difference.
template <class F>
void run_pairs(const options &o) {
  using B = blk<48>;
  using A = typename F::template alloc<B>;
  const long n = o.n < 0 ? 1000000 : o.n;
  A a = F::template make<B>();
  auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < n; ++i) {
    B *p = std::allocator_traits<A>::allocate(a, 1);
    p->bytes[0] = 1;
    escape(p);
    std::allocator_traits<A>::deallocate(a, p, 1);
  }
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  options shown = o;
  shown.n = n;
  shown.threads = 1;
  header<F>(shown).num("block", sizeof(B)).num("ns_per_pair", wall * 1e9 / static_cast<double>(n)).print();
}

template <class F>
void run(const options &o) {
  std::snprintf(partial, sizeof partial,
                "{\"alloc\": \"%s\", \"label\": \"%s\", \"malloc\": \"%s\", \"abi\": \"%s\", \"test\": \"%s\", "
                "\"kind\": \"%s\", \"len\": %zu, \"threads\": %u, \"timeout\": true}\n",
                F::key, F::label, malloc_in_use(), abi, o.test.c_str(), o.kind.c_str(), o.len, o.threads);
  if (o.test == "pairs")
    run_pairs<F>(o);
  else if (o.test == "seed")
    run_seed<F>(o);
  else if (o.test == "footprint")
    run_footprint<F>(o);
  else if (o.test == "giveback")
    run_giveback<F>(o);
  else {
    std::fprintf(stderr, "mtpool_proc: unknown --test %s\n", o.test.c_str());
    std::exit(2);
  }
}

void on_timeout(int) {
  ssize_t w = write(1, partial, std::strlen(partial));
  (void)w;
  _exit(3);
}

int smoke() {
  int runs = 0;
  for_each_family(
      [&](auto f) {
        using F = decltype(f);
        options o;
        o.threads = 2;
        o.delay_ms = 1;
        o.test = "seed";
        o.n = 500;
        o.len = 40;
        run<F>(o);
        o.test = "footprint";
        for (const char *k : {"list_int", "map_int", "list_str40"}) {
          o.kind = k;
          run<F>(o);
        }
        o.test = "giveback";
        o.n = 2000;
        run<F>(o);
        o.test = "pairs";
        run<F>(o);
        ++runs;
      },
      [](const char *label, const char *why) {
        std::fprintf(stderr, "mtpool_proc: NOTICE: %s skipped: %s\n", label, why);
      });
  std::fprintf(stderr, "mtpool_proc: smoke: %d families ran\n", runs);
  return runs > 0 ? 0 : 1;
}

}  // namespace
}  // namespace mtpool_bench

int main(int argc, char **argv) {
  using namespace mtpool_bench;
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "mtpool_proc: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--alloc") o.alloc = value();
    else if (a == "--test") o.test = value();
    else if (a == "--kind") o.kind = value();
    else if (a == "--threads") o.threads = static_cast<unsigned>(std::stoul(value()));
    else if (a == "--n") o.n = std::stol(value());
    else if (a == "--len") o.len = std::stoul(value());
    else if (a == "--delay-ms") o.delay_ms = std::stol(value());
    else if (a == "--timeout") o.timeout = static_cast<unsigned>(std::stoul(value()));
    else if (a == "--warm-mib") o.warm_mib = std::stol(value());
    else if (a == "--smoke") return smoke();
    else if (a == "--list") {
      for_each_family([](auto f) { std::printf("%s\t%s\n", decltype(f)::key, decltype(f)::label); },
                      [](const char *label, const char *why) {
                        std::fprintf(stderr, "mtpool_proc: NOTICE: %s skipped: %s\n", label, why);
                      });
      return 0;
    } else {
      std::fprintf(stderr, "mtpool_proc: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (o.threads < 1 || o.len > 64) {
    std::fprintf(stderr, "mtpool_proc: --threads >= 1 and --len <= 64\n");
    return 2;
  }
  bench_warm_memory(o.warm_mib);
  std::signal(SIGALRM, on_timeout);
  alarm(o.timeout);
  bool found = false;
  for_each_family(
      [&](auto f) {
        using F = decltype(f);
        if (o.alloc != F::key) return;
        found = true;
        run<F>(o);
      },
      [](const char *, const char *) {});
  if (!found) {
    std::fprintf(stderr, "mtpool_proc: NOTICE: allocator '%s' is not built into this binary\n", o.alloc.c_str());
    std::printf("{\"alloc\": \"%s\", \"missing\": true}\n", o.alloc.c_str());
    return 4;
  }
  return 0;
}
