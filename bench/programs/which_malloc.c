/* Preloaded after the allocator into every process that scripts/bench_programs.sh measures (the
 * glibc runs too, so that all pay the same): at start-up it appends one line to the file named by
 * MTPOOL_WHICH_LOG: "<pid> <object that defines malloc> <allocator named by its symbols> <exe>".
 * The script then checks that every process of a run found the malloc it was given.
 * Build: gcc -O2 -shared -fPIC -o which_malloc.so which_malloc.c (-ldl before glibc 2.34). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../tools/malloc_name.h"

__attribute__((constructor)) static void which_malloc(void) {
  const char *log = getenv("MTPOOL_WHICH_LOG");
  if (!log || !*log) return;
  const char *obj = malloc_object();
  if (obj == NULL) obj = "?";
  char exe[512];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[n > 0 ? n : 0] = '\0';
  char line[1200];
  int len = snprintf(line, sizeof line, "%d %s %s %s\n", (int)getpid(), obj, malloc_by_symbol(), exe);
  if (len <= 0) return;
  if (len >= (int)sizeof line) len = (int)sizeof line - 1;
  int fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  ssize_t w = write(fd, line, (size_t)len); /* one write: lines of concurrent processes stay whole */
  (void)w;
  close(fd);
}
