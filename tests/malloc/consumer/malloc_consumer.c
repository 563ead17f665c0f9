/* Linked to the installed mtpool::malloc: plain malloc is mtpool's, and the mtp_* API of the same
 * library sees the block. */
#include <stdio.h>
#include <stdlib.h>

#include <mtpool/mtpool.h>

int main(void) {
  void *p = malloc(100);
  if (p == NULL || mtp_pool_of(p) != mtp_default_pool()) {
    fprintf(stderr, "malloc is not mtpool's\n");
    return 1;
  }
  free(p);
  printf("malloc_consumer: malloc is mtpool's (%s)\n", mtp_version());
  return 0;
}
