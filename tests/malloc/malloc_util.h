/* Shared by the drop-in malloc's tests. They are built WITHOUT mtpool and find its API at run time
 * with dlsym, so that each check fails unless malloc really is mtpool's: preloaded
 * (LD_PRELOAD=libmtpool-malloc.so) or linked (mtpool::malloc). */
#ifndef MTP_MALLOC_UTIL_H
#define MTP_MALLOC_UTIL_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mtpool/mtpool.h"
#include "testhelper.h" /* C and C++ */

typedef mtp_pool_t *(*mu_pool_of_fn)(const void *);
typedef int (*mu_stats_fn)(mtp_pool_t *, mtp_stats_t *);

#if defined(MTP_MALLOC_STATIC)
/* Linked statically (musl's libc.a and libmtpool-malloc.a): no dynamic symbol table to search,
 * so the API is referenced directly. The test still fails where malloc is not mtpool's: the
 * same program linked with the core alone (libmtpool.a, musl's malloc) is run and must fail,
 * as mtp_pool_of finds no pool for musl's blocks. */
/* weak: absent (NULL) where only the core is linked */
__attribute__((weak)) void free_sized(void *p, size_t size);
__attribute__((weak)) void free_aligned_sized(void *p, size_t alignment, size_t size);
static inline void *mu_static_sym(const char *name) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
  static const struct {
    const char *name;
    void *f;
  } table[] = {
      {"mtp_pool_of", (void *)mtp_pool_of},
      {"mtp_pool_stats", (void *)mtp_pool_stats},
      {"mtp_pool_name", (void *)mtp_pool_name},
      {"mtp_pool_visit", (void *)mtp_pool_visit},
      {"mtp_usable_size", (void *)mtp_usable_size},
      {"mtp_set_error_handler", (void *)mtp_set_error_handler},
      {"mtp_options_init", (void *)mtp_options_init},
      {"mtp_pool_create", (void *)mtp_pool_create},
      {"free_sized", (void *)free_sized},
      {"free_aligned_sized", (void *)free_aligned_sized},
  };
#pragma GCC diagnostic pop
  for (unsigned i = 0; i < sizeof(table) / sizeof(table[0]); i++)
    if (strcmp(table[i].name, name) == 0) return table[i].f;
  return NULL;
}
#endif

static inline void *mu_sym(const char *name) {
#if defined(MTP_MALLOC_STATIC)
  void *f = mu_static_sym(name);
#else
  void *f = dlsym(RTLD_DEFAULT, name);
#endif
  if (f == NULL) {
    fprintf(stderr, "%s not found: malloc is not replaced by libmtpool-malloc.so\n", name);
    exit(1);
  }
  return f;
}

/* p is a block of mtpool's default pool. */
static inline int mu_owned(const void *p) {
  static mu_pool_of_fn pool_of;
  if (pool_of == NULL) pool_of = (mu_pool_of_fn)mu_sym("mtp_pool_of");
  return p != NULL && pool_of(p) != NULL;
}

/* Blocks in use in the default pool. */
static inline size_t mu_blocks_in_use(void) {
  static mu_stats_fn stats;
  if (stats == NULL) stats = (mu_stats_fn)mu_sym("mtp_pool_stats");
  static mtp_stats_t st; /* 2 KiB: not on small thread stacks */
  stats(NULL, &st);
  return st.blocks_in_use;
}

/* Resolve the API once, before a test counts blocks (dlsym may allocate on first use). */
static inline void mu_init(void) {
  static int here;
  mu_owned(&here);
  mu_blocks_in_use();
}

#endif
