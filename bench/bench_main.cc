// mtpool_bench: the Google Benchmark half of the suite (workloads 1 to 5).
//   mtpool_bench [--smoke] [Google Benchmark flags]
// --smoke divides element counts by 1000 so that every case runs in a moment (CI).
// Benchmarks are named <workload>/<family>/...: filter with --benchmark_filter='^seed/'.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_gbench.h"

int main(int argc, char **argv) {
  using namespace mtpool_bench;
  config cfg;
  std::vector<char *> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--smoke") == 0)
      cfg.smoke = true;
    else
      args.push_back(argv[i]);
  }
  int n = static_cast<int>(args.size());

  std::string families, missing;
  for_each_family([&](auto f) { families += std::string(families.empty() ? "" : ", ") + decltype(f)::key; },
                  [&](const char *label, const char *why) {
                    std::fprintf(stderr, "mtpool_bench: NOTICE: %s skipped: %s\n", label, why);
                    missing += std::string(missing.empty() ? "" : "; ") + label + ": " + why;
                  });
  benchmark::AddCustomContext("mtpool_bench.families", families);
  benchmark::AddCustomContext("mtpool_bench.missing", missing.empty() ? "none" : missing);
  benchmark::AddCustomContext("mtpool_bench.malloc", malloc_in_use());
  benchmark::AddCustomContext("mtpool_bench.smoke", cfg.smoke ? "yes" : "no");
  std::fprintf(stderr, "mtpool_bench: malloc in use: %s; families: %s\n", malloc_in_use(), families.c_str());
  std::fprintf(stderr,
               "mtpool_bench: NOTICE: pmr_unsync is not run in prodcons/churn (its blocks must be freed "
               "by the thread that owns the resource)\n");

  register_seed(cfg);
  register_pairs(cfg);
  register_cross_thread(cfg);
  register_maps(cfg);

  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
