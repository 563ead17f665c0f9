/* MTPOOL_* options reach the drop-in malloc's default pool (read at its first allocation, which
 * happens in the dynamic loader, before main); ctest checks MTPOOL_VERBOSE's and
 * MTPOOL_SHOW_STATS's output. Usage: test_malloc_env EXPECTED_POOL_NAME */
#include <string.h>

#include "malloc_util.h"

int main(int argc, char **argv) {
  CHECK(argc == 2);
  const char *(*name)(const mtp_pool_t *) =
      (const char *(*)(const mtp_pool_t *))mu_sym("mtp_pool_name");
  void *p = malloc(100);
  CHECK(mu_owned(p));
  CHECK(strcmp(name(NULL), argv[1]) == 0);
  void *keep = malloc(12345); /* still in use at exit: MTPOOL_SHOW_STATS shows it */
  (void)keep;
  free(p);
  return 0;
}
