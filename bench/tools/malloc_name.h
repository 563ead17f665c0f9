/* Which malloc this process runs on, named by a symbol that only that library defines; the C
 * library's ("glibc", or "musl" in a build against musl) when none of them is loaded. Shared by the preload suites' probes (bench/gp/gp_bench.c,
 * bench/programs/which_malloc.c); the includer defines _GNU_SOURCE (RTLD_DEFAULT). */
#ifndef MTPOOL_BENCH_MALLOC_NAME_H
#define MTPOOL_BENCH_MALLOC_NAME_H

#include <dlfcn.h>
#include <stddef.h>

static const char *malloc_by_symbol(void) {
  static const struct {
    const char *sym, *name;
  } SYMS[] = {{"mtp_version", "mtpool"},
              {"mi_version", "mimalloc"},
              {"mallctl", "jemalloc"},
              {"tc_version", "tcmalloc"},
              {"scalable_malloc", "tbbmalloc"},
              {"__malloc_end_pointer", "snmalloc"}};
  for (size_t i = 0; i < sizeof SYMS / sizeof SYMS[0]; i++)
    if (dlsym(RTLD_DEFAULT, SYMS[i].sym)) return SYMS[i].name;
#if defined(__GLIBC__)
  return "glibc";
#else
  return "musl"; /* built with musl-gcc (scripts/bench_musl.sh): the C library's own malloc */
#endif
}

#endif
