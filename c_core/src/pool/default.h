/* The default pool, made at its first use (process.c). Layer: pool. */
#ifndef MTP_POOL_DEFAULT_H
#define MTP_POOL_DEFAULT_H

#include "pool.h"

#pragma GCC visibility push(hidden)

/* Written once (release) inside its pthread_once; read with acquire, so a reader that sees the
 * pointer sees the initialised pool. */
mtpi_pool_t *mtp__default_pool_init(void); /* process.c: makes it, and installs the fork handlers */
static inline mtpi_pool_t *mtp__default(void) {
  mtpi_pool_t *p = (mtpi_pool_t *)mtp__load_acquire(&mtp__default_pool_ptr);
  return MTP_LIKELY(p != NULL) ? p : mtp__default_pool_init();
}
static inline bool mtp__is_default(const mtpi_pool_t *p) {
  return p == (const mtpi_pool_t *)mtp__load_acquire(&mtp__default_pool_ptr);
}

#pragma GCC visibility pop

#endif
