/* The drop-in malloc's new detections end the process with mtpool's exact report (default
 * handler: the line on stderr, then abort): an interleaved double free (free a, free b, free a),
 * a write into a freed large block whose mapping is cached, then reused (and into a freed medium
 * block, reused from the thread's cache); and with MTPOOL_CHECK=1
 * an underflow of a small block and a write into a freed small block (found before reuse).
 * Each runs in a child (this binary again, preloaded as ctest runs it). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <string.h>

#include "malloc_util.h"

static void *volatile sink;

static int child(const char *what) {
  if (strcmp(what, "interleaved") == 0) {
    char *a = malloc(48), *b = malloc(48);
    printf("PTR %p\n", (void *)a);
    fflush(stdout);
    free(a);
    free(b);
    free(a);
  } else if (strcmp(what, "large_uaf") == 0 || strcmp(what, "medium_uaf") == 0) {
    size_t n = (size_t)1 << (strcmp(what, "large_uaf") == 0 ? 21 : 18); /* above MTP_MEDIUM_MAX, or at it */
    volatile char *a = malloc(n);
    printf("PTR %p\n", (void *)a);
    fflush(stdout);
    free((void *)a);
    a[16] = 'W';
    sink = malloc(n);
  } else if (strcmp(what, "checked_underflow") == 0) {
    volatile char *a = malloc(40);
    printf("PTR %p\n", (void *)a);
    fflush(stdout);
    volatile char *before = (volatile char *)((uintptr_t)a - 1); /* hidden from -Warray-bounds */
    *before = 'U';
    free((void *)a);
  } else if (strcmp(what, "checked_uaf") == 0) {
    volatile char *a = malloc(40);
    printf("PTR %p\n", (void *)a);
    fflush(stdout);
    free((void *)a);
    a[20] = 'W';
    for (int i = 0; i < 100; i++) sink = malloc(40);
  } else {
    return 2;
  }
  return 0; /* not reached when the report aborts */
}

static int expect(char *self, const char *what, const char *check, const char *message) {
  char *argv[] = {self, (char *)what, NULL};
  const char *env[] = {check ? "MTPOOL_CHECK=1" : "MTPOOL_CHECK", NULL};
  th_proc_t pr;
  CHECK(th_run_self(argv, env, 60, &pr) == 0);
  const char *p = pr.out ? strstr(pr.out, "PTR 0x") : NULL;
  char line[256] = "";
  if (p) snprintf(line, sizeof line, "%s: pointer %.*s\n", message, (int)strcspn(p + 4, "\n"), p + 4);
  int ok = p && WIFSIGNALED(pr.status) && WTERMSIG(pr.status) == SIGABRT && pr.err &&
           strstr(pr.err, line) != NULL;
  if (!ok)
    fprintf(stderr, "%s: want SIGABRT and \"%s\"; status %d, stderr:\n%s\n", what, line, pr.status,
            pr.err ? pr.err : "");
  th_proc_free(&pr);
  return ok;
}

int main(int argc, char **argv) {
  if (argc > 1) return child(argv[1]);
  (void)mu_sym("mtp_pool_visit"); /* fails unless malloc is mtpool's */
  int ok = 1;
  ok &= expect(argv[0], "interleaved", NULL, "mtpool: double free: double free");
  ok &= expect(argv[0], "large_uaf", NULL,
               "mtpool: use after free: use after free (a freed large block was written to)");
  ok &= expect(argv[0], "medium_uaf", NULL,
               "mtpool: use after free: use after free (a freed medium block was written to)");
  ok &= expect(argv[0], "checked_underflow", "1",
               "mtpool: buffer overflow: buffer overflow (bytes before the start of the block "
               "were written: an underflow)");
  ok &= expect(argv[0], "checked_uaf", "1",
               "mtpool: use after free: use after free (a freed block was written to)");
  printf("%s\n", ok ? "ok" : "FAIL");
  return ok ? 0 : 1;
}
