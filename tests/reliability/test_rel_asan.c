/*
 * AddressSanitizer support: with the library built under ASan, free blocks and slab memory not yet
 * handed out are poisoned, so a planted bug in user code is reported by ASan. Each case runs in a
 * sub-process and must end with an ASan report that names the bad address; the "clean" case does
 * the same accesses legally and must pass. In a build without ASan the test is skipped (77).
 *
 * Cases (p from mtp_alloc unless said otherwise):
 *   uaf_read       read p[8] after mtp_free(p)                               must be reported
 *   uaf_write      write p[8] after mtp_free(p)                              must be reported
 *   uaf_pool       the same in a created pool                                must be reported
 *   uaf_remote     freed by another thread, then read                        must be reported
 *   next_block     read p[usable] (the first byte past the block: the next
 *                  block, never handed out, of a fresh pool)                 must be reported
 *   next_freed     read past the end into a neighbour that was freed         must be reported
 *   slack          read every byte from the requested size (130) up to
 *                  mtp_usable_size (the class's 144): usable, so legal       must not be reported
 *   uaf_large      read a freed 4 MiB block                                  must be reported
 *   realloc_old    read the old pointer after a moving realloc               must be reported
 *   clean          legal use of all of the above                             must not be reported
 * A case whose setup does not hold (no neighbouring blocks, a realloc that did not move, no slack)
 * exits 3 and fails: it would otherwise prove nothing.
 */
#define _GNU_SOURCE
#include <pthread.h>

#include <mtpool/mtpool.h>

#include "testhelper.h"

static volatile char g_sink;

static void *free_it(void *p) {
  mtp_free(p);
  return NULL;
}

static int child(const char *c) {
  if (!strcmp(c, "uaf_read")) {
    char *p = mtp_alloc(64);
    printf("ADDR %p\n", (void *)(p + 8));
    fflush(stdout);
    mtp_free(p);
    g_sink = ((volatile char *)th_opaque_ptr(p))[8];
  } else if (!strcmp(c, "uaf_write")) {
    char *p = mtp_alloc(64);
    printf("ADDR %p\n", (void *)(p + 8));
    fflush(stdout);
    mtp_free(p);
    ((volatile char *)th_opaque_ptr(p))[8] = 1;
  } else if (!strcmp(c, "uaf_pool")) {
    mtp_pool_t *pool = mtp_pool_create(NULL);
    char *p = mtp_pool_alloc(pool, 200);
    printf("ADDR %p\n", (void *)(p + 8));
    fflush(stdout);
    mtp_free(p);
    g_sink = ((volatile char *)th_opaque_ptr(p))[8];
  } else if (!strcmp(c, "uaf_remote")) {
    char *p = mtp_alloc(64);
    printf("ADDR %p\n", (void *)(p + 8));
    fflush(stdout);
    pthread_t t;
    pthread_create(&t, NULL, free_it, p);
    pthread_join(t, NULL);
    g_sink = ((volatile char *)th_opaque_ptr(p))[8];
  } else if (!strcmp(c, "next_block")) {
    mtp_pool_t *pool = mtp_pool_create(NULL);
    char *p = mtp_pool_alloc(pool, 64);
    size_t u = mtp_usable_size(p);
    printf("ADDR %p\n", (void *)(p + u));
    fflush(stdout);
    g_sink = ((volatile char *)th_opaque_ptr(p))[u];
  } else if (!strcmp(c, "next_freed")) {
    char *b[16];
    for (int i = 0; i < 16; i++) b[i] = mtp_alloc(64);
    /* a pair of neighbours: q right after p */
    char *p = NULL;
    for (int i = 0; i < 16 && !p; i++)
      for (int j = 0; j < 16; j++)
        if (b[j] == b[i] + mtp_usable_size(b[i])) {
          p = b[i];
          mtp_free(b[j]);
          break;
        }
    if (!p) {
      printf("SETUP FAILED: no two neighbouring blocks among 16\n");
      return 3;
    }
    printf("ADDR %p\n", (void *)(p + mtp_usable_size(p)));
    fflush(stdout);
    g_sink = ((volatile char *)th_opaque_ptr(p))[mtp_usable_size(p)];
  } else if (!strcmp(c, "slack")) {
    /* 130 B lies in the 144-byte class: bytes 130..143 are the block's own slack, which
     * mtp_usable_size promises to the caller (a 40-byte request has no slack: p[40] would be the
     * neighbouring block, handed out or not). */
    char *p = mtp_alloc(130);
    size_t u = mtp_usable_size(p);
    if (u <= 130) {
      printf("SETUP FAILED: usable size %zu leaves no slack\n", u);
      return 3;
    }
    for (size_t i = 130; i < u; i++) g_sink = ((volatile char *)th_opaque_ptr(p))[th_opaque(i)];
    mtp_free(p);
    printf("CLEAN\n");
  } else if (!strcmp(c, "uaf_large")) {
    char *p = mtp_alloc((size_t)4 << 20);
    printf("ADDR %p\n", (void *)(p + 4096));
    fflush(stdout);
    mtp_free(p);
    g_sink = ((volatile char *)th_opaque_ptr(p))[4096];
  } else if (!strcmp(c, "realloc_old")) {
    char *p = mtp_alloc(32);
    char *q = mtp_realloc(p, 5000);
    printf("ADDR %p\n", (void *)(p + 4));
    fflush(stdout);
    if (q == p) {
      printf("SETUP FAILED: realloc from 32 to 5000 bytes did not move the block\n");
      return 3;
    }
    g_sink = ((volatile char *)th_opaque_ptr(p))[4];
    mtp_free(q);
  } else if (!strcmp(c, "clean")) {
    mtp_pool_t *pool = mtp_pool_create(NULL);
    for (int r = 0; r < 50; r++) {
      char *a = mtp_alloc(64), *b = mtp_pool_alloc(pool, 200), *l = mtp_alloc((size_t)4 << 20);
      size_t ua = mtp_usable_size(a);
      memset(a, 1, ua);
      memset(b, 2, 200);
      l[0] = l[((size_t)4 << 20) - 1] = 3;
      char *s = mtp_alloc(40);
      memset(s, 4, 40);
      pthread_t t;
      pthread_create(&t, NULL, free_it, a);
      pthread_join(t, NULL);
      mtp_free(b);
      mtp_free(l);
      char *q = mtp_realloc(s, 5000);
      memset(q, 5, 5000);
      mtp_free(q);
      mtp_thread_flush();
      mtp_pool_trim(pool);
      mtp_pool_trim(NULL);
    }
    mtp_pool_destroy(pool);
    printf("CLEAN\n");
  } else {
    return 2;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--child")) return child(argv[2]);
  if (!TH_ASAN) {
    printf("SKIP: not an AddressSanitizer build (configure with -DMTPOOL_SANITIZE='address;undefined')\n");
    return TH_SKIP;
  }
  static const struct {
    const char *name;
    int must;
  } cases[] = {{"uaf_read", 1},   {"uaf_write", 1},  {"uaf_pool", 1},    {"uaf_remote", 1},
               {"next_block", 1}, {"next_freed", 1}, {"slack", -1},      {"uaf_large", 1},
               {"realloc_old", 1}, {"clean", -1}};
  int failed = 0;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char *args[] = {argv[0], "--child", (char *)cases[i].name, NULL};
    const char *env[] = {"ASAN_OPTIONS=detect_leaks=0:abort_on_error=0", NULL};
    th_proc_t pr;
    REQUIRE(th_run_self(args, env, 60, &pr) == 0, "spawn");
    uintptr_t addr = 0;
    const char *a = strstr(pr.out, "ADDR ");
    if (a) addr = (uintptr_t)strtoull(a + 5, NULL, 16);
    int reported = strstr(pr.err, "ERROR: AddressSanitizer") != NULL;
    int named = reported && addr && th_text_has_pointer(pr.err, addr);
    const char *kind = "";
    static const char *const kinds[] = {"use-after-poison", "heap-use-after-free",
                                        "heap-buffer-overflow", "SEGV", "unknown-crash", NULL};
    for (int k = 0; kinds[k]; k++)
      if (strstr(pr.err, kinds[k])) {
        kind = kinds[k];
        break;
      }
    char sb[64];
    int ok;
    if (cases[i].must == 1)
      ok = reported && named;
    else if (cases[i].must == -1)
      ok = !reported && WIFEXITED(pr.status) && WEXITSTATUS(pr.status) == 0 && strstr(pr.out, "CLEAN");
    else
      ok = 0; /* every case states what it expects */
    printf("%-12s %-9s %-20s %-14s %s\n", cases[i].name, cases[i].must == 1 ? "must" : "clean",
           reported ? (named ? "ASan report" : "ASan, other addr") : "no report", kind,
           ok ? "ok" : "FAIL");
    if (!ok) {
      failed++;
      printf("  status %s\n  stdout: %.300s\n  stderr: %.1500s\n",
             th_status_str(pr.status, sb, sizeof sb), pr.out, pr.err);
    }
    th_proc_free(&pr);
  }
  return failed ? 1 : 0;
}
