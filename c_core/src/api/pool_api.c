/* Public entry points for pools: the default pool, create, destroy, trim, check, name. Checked
 * pools are verified (checked/checked_verify.c) at trim and before their memory goes. Layer: api. */
#include <errno.h>
#include <limits.h>

#include "checked/checked.h"
#include "heap/heap.h"

mtp_pool_t *mtp_default_pool(void) { return mtp__pool_out(mtp__default()); }

mtp_pool_t *mtp_pool_create(const mtp_options_t *opt) {
  mtp__default(); /* the registry's fork handlers are installed with it */
  return mtp__pool_out(mtp__pool_new(opt, false));
}

void mtp_pool_destroy(mtp_pool_t *pool_) {
  mtpi_pool_t *p = mtp__pool_in(pool_);
  if (p == NULL || mtp__is_default(p)) return;
  (void)mtp__checked_verify(p);
  mtp__checked_forget(p);
  mtp__pool_free(p);
}

const char *mtp_pool_name(const mtp_pool_t *pool) {
  const mtpi_pool_t *p = (const mtpi_pool_t *)pool;
  if (p == NULL) p = mtp__default();
  return p->name;
}

size_t mtp_pool_trim(mtp_pool_t *pool_) {
  mtpi_pool_t *p = pool_ ? mtp__pool_in(pool_) : mtp__default();
  (void)mtp__checked_verify(p);
  mtp__heap_unlist(p);
  mtp__heap_shared_trim(p);
  return mtp__pool_trim(p);
}

size_t mtp_trim_all(void) {
  /* the calling thread's kept blocks of the default pool only: another pool may be being
   * destroyed by another thread meanwhile, and its heap's slabs with it */
  mtp__heap_unlist(mtp__default());
  mtp__heap_shared_trim_all();
  return mtp__pool_trim_all();
}

int mtp_pool_check(mtp_pool_t *pool_) {
  mtpi_pool_t *p = pool_ ? mtp__pool_in(pool_) : mtp__default();
  size_t n = mtp__checked_verify(p);
  return n > INT_MAX ? INT_MAX : (int)n;
}

int mtp_pool_options(mtp_pool_t *pool_, mtp_options_t *out) {
  if (out == NULL) return EINVAL;
  mtpi_pool_t *p = pool_ ? mtp__pool_in(pool_) : mtp__default();
  mtp_options_init(out);
  out->name = p->name;
  out->purge_delay_ms = p->purge_delay_ms;
  out->thread_cache_bytes = p->thread_cache_bytes;
  out->check = p->check;
  return 0;
}
