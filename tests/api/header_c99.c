/* The public header compiles as strict C99 (this file is built with -std=c99 -pedantic). */
#include "mtpool/mtpool.h"

int main(void) {
  mtp_options_t opt;
  mtp_stats_t st;
  mtp_options_init(&opt);
  void *p = mtp_alloc(1);
  mtp_free(p);
  return mtp_pool_stats(NULL, &st) == 0 && MTPOOL_VERSION >= 100 ? 0 : 1;
}
