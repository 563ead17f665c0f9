/* Which malloc this process runs on, named by a symbol that only that library defines; the C
 * library's ("glibc", or "musl" in a build against musl) when none of them is loaded; and the
 * object that defines malloc. Shared by the preload suites' probes (bench/gp/gp_bench.c,
 * bench/programs/which_malloc.c) and the in-process driver (bench/bench_families.h); the includer
 * defines _GNU_SOURCE (RTLD_DEFAULT, dl_iterate_phdr). */
#ifndef MTPOOL_BENCH_MALLOC_NAME_H
#define MTPOOL_BENCH_MALLOC_NAME_H

#include <dlfcn.h>
#include <link.h>
#include <stddef.h>
#include <string.h>

static inline const char *malloc_by_symbol(void) {
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

/* The first loaded object, in the global lookup order (the executable, the preloaded libraries,
 * then the others as loaded), that defines malloc: the one the program's calls bind to; NULL if
 * none is found. dlsym(RTLD_DEFAULT, "malloc") will not do: in an executable that takes malloc's
 * address (e.g. Debian's python3) it returns the executable's PLT entry. So each library is asked
 * on its own (dlopen RTLD_NOLOAD) whether its malloc is its own. */
static inline int malloc_first_definer(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  const char **found = (const char **)data;
  if (!info->dlpi_name || !*info->dlpi_name) return 0; /* the executable, or the vDSO */
  void *h = dlopen(info->dlpi_name, RTLD_LAZY | RTLD_NOLOAD);
  if (!h) return 0;
  void *m = dlsym(h, "malloc");
  Dl_info di;
  int own = m && dladdr(m, &di) && di.dli_fname && !strcmp(di.dli_fname, info->dlpi_name);
  dlclose(h);
  if (!own) return 0;
  *found = info->dlpi_name;
  return 1;
}
static inline const char *malloc_object(void) {
  const char *obj = NULL;
  dl_iterate_phdr(malloc_first_definer, &obj);
  return obj;
}

#endif
