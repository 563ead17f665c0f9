/* The smallest program that uses malloc: scripts/bench_programs.sh times its start-up (exec to
 * exit) under each allocator. */
#include <stdlib.h>
#include <string.h>

int main(void) {
  char *p = malloc(100);
  if (!p) return 1;
  memset(p, 1, 100);
  int r = p[99] == 1 ? 0 : 2;
  free(p);
  return r;
}
