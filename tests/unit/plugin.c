/* A plugin (a shared library carrying its own static copy of mtpool) for test_bug_dlclose. */
#include "mtpool/mtpool.h"

__attribute__((visibility("default"))) int plugin_use(void) {
  void *keep[64];
  for (int i = 0; i < 64; i++) {
    keep[i] = mtp_alloc(100 + (size_t)i * 40);
    if (keep[i] == NULL) return 0;
  }
  for (int i = 0; i < 64; i++) mtp_free(keep[i]); /* empties slabs: the purge becomes due */
  return 1;
}
