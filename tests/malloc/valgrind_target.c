/* A program for Valgrind memcheck over the drop-in malloc (--soname-synonyms=somalloc=
 * libmtpool-malloc.so makes memcheck replace mtpool's exported functions as it does glibc's).
 * No argument: clean, memcheck must report 0 errors. "bad": one invalid read just past a block
 * and one leaked block of 1234 bytes, which memcheck must find. */
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  void *v[1000];
  for (int round = 0; round < 20; round++) {
    for (int i = 0; i < 1000; i++) {
      v[i] = malloc((size_t)(i * 13 % 4000) + 1);
      memset(v[i], i, (size_t)(i * 13 % 4000) + 1);
    }
    for (int i = 0; i < 1000; i++) v[i] = realloc(v[i], 100);
    for (int i = 0; i < 1000; i++) free(v[i]);
  }
  void *a = NULL;
  if (posix_memalign(&a, 64, 100) != 0) return 1;
  free(a);
  free(calloc(10, 10));
  if (argc > 1 && strcmp(argv[1], "bad") == 0) {
    volatile char *p = malloc(10);
    volatile size_t ten = 10;
    char c = p[ten]; /* one past the end */
    (void)c;
    free((void *)p);
    volatile void *leak = malloc(1234);
    leak = NULL;
    (void)leak;
  }
  return 0;
}
