/* Shared by the drop-in malloc's tests. They are built WITHOUT mtpool and find its API at run time
 * with dlsym, so that each check fails unless malloc really is mtpool's: preloaded
 * (LD_PRELOAD=libmtpool-malloc.so) or linked (mtpool::malloc). */
#ifndef MTP_MALLOC_UTIL_H
#define MTP_MALLOC_UTIL_H

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "mtpool/mtpool.h"
#include "testhelper.h" /* C and C++ */

typedef mtp_pool_t *(*mu_pool_of_fn)(const void *);
typedef int (*mu_stats_fn)(mtp_pool_t *, mtp_stats_t *);

static inline void *mu_sym(const char *name) {
  void *f = dlsym(RTLD_DEFAULT, name);
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
