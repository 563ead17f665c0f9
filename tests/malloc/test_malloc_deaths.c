/* The drop-in malloc's new detections end the process with mtpool's exact report (default
 * handler: the line on stderr, then abort): an interleaved double free (free a, free b, free a),
 * a write into a freed large block whose mapping is cached, then reused (and into a freed medium
 * block, reused from the thread's cache); and with MTPOOL_CHECK=1
 * an underflow of a small block and a write into a freed small block (found before reuse); and
 * with the profiler sampling every allocation too (glibc), an overflow found at the block's free
 * and one of a block still live at exit, each report naming the function that allocated it.
 * Each runs in a child (this binary again, preloaded as ctest runs it). */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <string.h>

#include "malloc_util.h"

static void *volatile sink;

/* Exported (the target's ENABLE_EXPORTS), so that the report's frames name it. */
__attribute__((noinline)) char *origin_site(void);
__attribute__((noinline)) char *origin_site(void) {
  char *p = malloc(40);
  sink = p;
  return p;
}

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
    free(malloc(n)); /* a medium block is not handed back by the next allocation of its size */
    sink = malloc(n);
  } else if (strcmp(what, "checked_underflow") == 0) {
    volatile char *a = malloc(40);
    printf("PTR %p\n", (void *)a);
    fflush(stdout);
    volatile char *before = (volatile char *)((uintptr_t)a - 1); /* hidden from -Warray-bounds */
    *before = 'U';
    free((void *)a);
  } else if (strcmp(what, "origin_at_free") == 0 || strcmp(what, "origin_at_exit") == 0) {
    volatile char *a = origin_site();
    printf("PTR %p\n", (void *)a);
    fflush(stdout);
    a[40] = 'O'; /* one past the 40 bytes asked for */
    if (strcmp(what, "origin_at_free") == 0) free((void *)a);
    return 0; /* origin_at_exit: the live block's guard is verified at exit */
  } else if (strcmp(what, "checked_uaf") == 0) {
    volatile char *a = malloc(40);
    printf("PTR %p\n", (void *)a);
    fflush(stdout);
    free((void *)a);
    a[20] = 'W';
    for (int i = 0; i < 100; i++) sink = malloc(40);
  } else if (strncmp(what, "copy_", 5) == 0) { /* under libmtpool-debug.so */
    static char src[64];
    char *a = malloc(40), *b = malloc(40);
    /* the report names the address the copy began at: for copy_under one before the block, for
     * copy_strcat_over the string's end */
    uintptr_t at = (uintptr_t)a - (strcmp(what, "copy_under") == 0) +
                   30 * (strcmp(what, "copy_strcat_over") == 0);
    if (strcmp(what, "copy_origin") != 0) printf("PTR %p\n", (void *)at);
    fflush(stdout);
    memcpy(b, src, 40);    /* within: no report */
    memmove(b + 1, b, 39); /* overlapping, within */
    memset(b, 1, 40);
    strcpy(b, "within: 39 characters and its zero.....");
    strcat(b + 20, "");
    if (stpcpy(b, "x") != b + 1) return 3;
    strcat(b, "abc");
    if (strcmp(b, "xabc") != 0) return 4;
    strncpy(b, "abc", 40);
    if (b[39] != 0 || strcmp(b, "abc") != 0) return 5;
    if (strcmp(what, "copy_strcpy_over") == 0) strcpy(a, "41 characters and its zero, past the 40..");
    if (strcmp(what, "copy_strcat_over") == 0) {
      strcpy(a, "30 characters.................");
      strcat(a, "and 11 more");
    }
    if (strcmp(what, "copy_strncpy_over") == 0) strncpy(a, "short", 48);
    if (strcmp(what, "copy_origin") == 0) { /* sampled: a large block, its site in the report */
      char *o = origin_site();
      printf("PTR %p\n", (void *)o);
      fflush(stdout);
      memcpy(o, src, 41);
    }
    if (strcmp(what, "copy_over") == 0) memcpy(a, src, 41);
    if (strcmp(what, "copy_under") == 0) memcpy((char *)((uintptr_t)a - 1), src, 8);
    if (strcmp(what, "copy_set_over") == 0) memset(a, 0, 48);
    if (strcmp(what, "copy_read_over") == 0) memcpy(src, a, 48);
    if (strcmp(what, "copy_freed") == 0) {
      free(a);
      memcpy(a, src, 8);
    }
    if (strcmp(what, "copy_within") == 0) {
      memcpy(a, src, 40);
      free(a);
      free(b);
      return 0;
    }
  } else {
    return 2;
  }
  return 0; /* not reached when the report aborts */
}

/* The child `what` ends by SIGABRT with message's line for its pointer on stderr, followed by
 * `then`, and that by `then2` (NULL: nothing asked). env: NULL-terminated. */
static int expect_env(char *self, const char *what, const char *const *env, const char *message,
                      const char *then, const char *then2) {
  char *argv[] = {self, (char *)what, NULL};
  th_proc_t pr;
  CHECK(th_run_self(argv, env, 60, &pr) == 0);
  const char *p = pr.out ? strstr(pr.out, "PTR 0x") : NULL;
  char line[256] = "";
  if (p) snprintf(line, sizeof line, "%s: pointer %.*s\n", message, (int)strcspn(p + 4, "\n"), p + 4);
  const char *at = p && pr.err ? strstr(pr.err, line) : NULL;
  const char *next = at && then ? strstr(at + strlen(line), then) : at;
  int ok = next && WIFSIGNALED(pr.status) && WTERMSIG(pr.status) == SIGABRT &&
           (then2 == NULL || strstr(next, then2) != NULL);
  if (!ok)
    fprintf(stderr, "%s: want SIGABRT and \"%s\"; status %d, stderr:\n%s\n", what, line, pr.status,
            pr.err ? pr.err : "");
  th_proc_free(&pr);
  return ok;
}

static int expect(char *self, const char *what, const char *check, const char *message) {
  const char *env[] = {check ? "MTPOOL_CHECK=1" : "MTPOOL_CHECK", NULL};
  return expect_env(self, what, env, message, NULL, NULL);
}

/* Under libmtpool-debug.so (path lib): copies (memcpy, memset, strcpy, strcat, strncpy) past a
 * block, before it, out of it and into a freed one end by the report when they happen; copies
 * within do not, and the string copies return what the C library's do. */
static int debug_copies(char *self, const char *lib) {
  char pre[4096];
  snprintf(pre, sizeof pre, "LD_PRELOAD=%s", lib);
  const char *env[] = {pre, NULL};
  const char *end = "mtpool: buffer overflow: overflow (an access past the end of a block)";
  int ok = 1;
  ok &= expect_env(self, "copy_over", env, end, NULL, NULL);
  ok &= expect_env(self, "copy_set_over", env, end, NULL, NULL);
  ok &= expect_env(self, "copy_read_over", env, end, NULL, NULL);
  ok &= expect_env(self, "copy_strcpy_over", env, end, NULL, NULL);
  ok &= expect_env(self, "copy_strncpy_over", env, end, NULL, NULL);
  ok &= expect_env(self, "copy_strcat_over", env, end, NULL, NULL);
  ok &= expect_env(self, "copy_under", env,
                   "mtpool: buffer overflow: overflow (an access before the start of a block)", NULL,
                   NULL);
#if defined(__GLIBC__)
  char *origin_env[] = {pre, "MTPOOL_PROFILE=/dev/null", "MTPOOL_PROFILE_RATE=1", NULL};
  ok &= expect_env(self, "copy_origin", (const char *const *)origin_env, end,
                   "mtpool: the block was allocated at:\n", "(origin_site+");
#endif
  char *argv[] = {self, "copy_within", NULL};
  th_proc_t pr;
  CHECK(th_run_self(argv, env, 60, &pr) == 0);
  int clean = WIFEXITED(pr.status) && WEXITSTATUS(pr.status) == 0;
  if (!clean) fprintf(stderr, "copy_within: status %d, stderr:\n%s\n", pr.status, pr.err ? pr.err : "");
  ok &= clean;
  th_proc_free(&pr);
  ok &= expect_env(self, "copy_freed", env,
                   "mtpool: use after free: use after free (an access to a freed block)", NULL, NULL);
  return ok;
}

int main(int argc, char **argv) {
  if (argc > 2 && strcmp(argv[1], "--debug") == 0) {
    int ok = debug_copies(argv[0], argv[2]);
    printf("%s\n", ok ? "ok" : "FAIL");
    return ok ? 0 : 1;
  }
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
#if defined(__GLIBC__)
  /* checked mode with every allocation sampled: each block a large one with the profiler's record
   * of its call stack, which the report prints after its line */
  const char *origin_env[] = {"MTPOOL_CHECK=1", "MTPOOL_PROFILE=/dev/null", "MTPOOL_PROFILE_RATE=1",
                              NULL};
  const char *site = "mtpool: the block was allocated at:\n";
  ok &= expect_env(argv[0], "origin_at_free", origin_env,
                   "mtpool: buffer overflow: buffer overflow (bytes past the end of a large block "
                   "were written)", site, "(origin_site+");
  ok &= expect_env(argv[0], "origin_at_exit", origin_env,
                   "mtpool: buffer overflow: buffer overflow (bytes past the end of a large block "
                   "were written); pool \"default\", a live block of 40 bytes", site, "(origin_site+");
#endif
  printf("%s\n", ok ? "ok" : "FAIL");
  return ok ? 0 : 1;
}
