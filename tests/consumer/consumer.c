#include <mtpool/mtpool.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  char *p = mtp_alloc(100);
  if (p == NULL) return 1;
  strcpy(p, mtp_version());
  mtp_free_sized(p, 100);
  mtp_pool_t *pool = mtp_pool_create(NULL);
  void *q = mtp_pool_alloc(pool, 24);
  mtp_stats_t st;
  if (mtp_pool_stats(pool, &st) != 0 || st.blocks_in_use != 1) return 2;
  (void)q;
  mtp_pool_destroy(pool);
  printf("consumer ok: mtpool %s\n", mtp_version());
  return MTPOOL_VERSION_MAJOR == 0 ? 0 : 3;
}
