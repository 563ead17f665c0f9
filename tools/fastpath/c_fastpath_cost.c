/* Instructions per allocate+free pair, counted with callgrind (tools/fastpath/cost.sh).
 * usage: c_fastpath_cost <mtpool|mtpool-sized|malloc|none> <size> <pairs> [batch]
 * "none" runs the same loop without allocating: its count is the loop's own cost.
 * batch 1: alloc, free, alloc, free...; batch B: B allocations, then B frees, repeated. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mtpool/mtpool.h"

int main(int argc, char **argv) {
  if (argc < 4) return 2;
  const char *which = argv[1];
  size_t size = strtoul(argv[2], NULL, 10), pairs = strtoul(argv[3], NULL, 10);
  size_t batch = argc > 4 ? strtoul(argv[4], NULL, 10) : 1;
  void *volatile sink;
  void *ptrs[256];
  int mode = strcmp(which, "malloc") == 0 ? 0 : strcmp(which, "mtpool") == 0 ? 1
             : strcmp(which, "none") == 0     ? 3
                                              : 2;
  static char dummy[256];
  /* warm up: first-use initialisation is not part of the fast path */
  for (int i = 0; i < 1000; i++) {
    void *p = mode == 0 ? malloc(size) : mtp_alloc(size);
    sink = p;
    if (mode == 0) free(p); else mtp_free(p);
  }
  for (size_t done = 0; done < pairs; done += batch) {
    for (size_t i = 0; i < batch; i++) {
      ptrs[i] = mode == 3 ? (void *)&dummy[i] : mode == 0 ? malloc(size) : mtp_alloc(size);
      sink = ptrs[i];
    }
    for (size_t i = 0; i < batch; i++) {
      if (mode == 3) sink = ptrs[i];
      else if (mode == 0) free(ptrs[i]);
      else if (mode == 1) mtp_free(ptrs[i]);
      else mtp_free_sized(ptrs[i], size);
    }
  }
  (void)sink;
  return 0;
}
