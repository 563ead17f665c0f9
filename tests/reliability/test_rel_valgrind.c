/*
 * Valgrind memcheck support (library built with -DMTPOOL_VALGRIND=ON): mtpool blocks appear to
 * memcheck as heap blocks. The driver runs this binary under valgrind once per case and checks the
 * report:
 *   leak        a 1000-byte block whose last pointer is dropped: "definitely lost: 1,0.. bytes in 1 blocks"
 *   uaf_read    read of a freed block                        "Invalid read", "free'd"
 *   uaf_write   write to a freed block                       "Invalid write", "free'd"
 *   overflow    read one byte past a block's usable end      "Invalid read"
 *   uninit      branch on bytes never written                "uninitialised"
 *   clean       a legal workload (threads, pools, realloc, large blocks, checked mode, trim)
 *               must give "ERROR SUMMARY: 0 errors" and no definitely/indirectly lost bytes
 *   destroy     a pool destroyed with blocks in use: no error, no leak reported for them
 */
#define _GNU_SOURCE
#include <pthread.h>

#include <mtpool/mtpool.h>

#include "testhelper.h"

#ifndef MTP_VALGRIND_EXE
#define MTP_VALGRIND_EXE "valgrind"
#endif

static volatile char g_sink;
static void *volatile g_keep;

static void *free_it(void *p) {
  mtp_free(p);
  return NULL;
}

__attribute__((noinline)) static void lose_block(void) {
  char *p = mtp_alloc(1000);
  memset(p, 1, 1000);
  g_keep = p;
  g_keep = NULL; /* the only pointer is gone */
}

static int child(const char *c) {
  if (!strcmp(c, "leak")) {
    lose_block();
  } else if (!strcmp(c, "uaf_read")) {
    char *p = mtp_alloc(64);
    memset(p, 0, 64);
    mtp_free(p);
    g_sink = ((volatile char *)th_opaque_ptr(p))[8];
  } else if (!strcmp(c, "uaf_write")) {
    char *p = mtp_alloc(64);
    mtp_free(p);
    ((volatile char *)th_opaque_ptr(p))[8] = 1;
  } else if (!strcmp(c, "overflow")) {
    char *p = mtp_alloc(64);
    memset(p, 0, 64);
    size_t u = mtp_usable_size(p);
    g_sink = ((volatile char *)th_opaque_ptr(p))[u];
    mtp_free(p);
  } else if (!strcmp(c, "uninit")) {
    char *p = mtp_alloc(64);
    if (((volatile char *)th_opaque_ptr(p))[3] == 7) printf("seven\n");
    mtp_free(p);
  } else if (!strcmp(c, "clean") || !strcmp(c, "destroy")) {
    mtp_options_t o;
    mtp_options_init(&o);
    o.check = 1;
    mtp_pool_t *checked = mtp_pool_create(&o), *plain = mtp_pool_create(NULL);
    for (int r = 0; r < 200; r++) {
      char *a = mtp_alloc((size_t)r * 13 % 3000), *b = mtp_pool_alloc(checked, 100),
           *l = mtp_alloc((size_t)2 << 20), *q = mtp_pool_alloc(plain, 24);
      memset(a, 1, (size_t)r * 13 % 3000);
      memset(b, 2, 100);
      l[0] = 3;
      q[0] = 4;
      pthread_t t;
      pthread_create(&t, NULL, free_it, a);
      pthread_join(t, NULL);
      char *nb = mtp_realloc(b, 5000);
      memset(nb, 5, 5000);
      mtp_free_sized(nb, 5000);
      mtp_free(l);
      if (!strcmp(c, "clean") || r % 2) mtp_free(q);
      char *z = mtp_calloc(10, 10);
      if (z[5]) printf("not zero\n");
      mtp_free(z);
      if (r % 50 == 0) {
        mtp_thread_flush();
        mtp_pool_trim(NULL);
        mtp_pool_trim(checked);
      }
    }
    mtp_pool_destroy(checked);
    mtp_pool_destroy(plain); /* "destroy": 100 blocks of 24 B still in use go with it */
  } else {
    return 2;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--child")) return child(argv[2]);
  static const struct {
    const char *name;
    const char *want[3];
  } cases[] = {
      {"leak", {"definitely lost: 1,0", " bytes in 1 blocks", "mtp_alloc"}},
      {"uaf_read", {"Invalid read of size 1", "free'd", NULL}},
      {"uaf_write", {"Invalid write of size 1", "free'd", NULL}},
      {"overflow", {"Invalid read of size 1", NULL}},
      {"uninit", {"uninitialised value", NULL}},
      {"clean", {"ERROR SUMMARY: 0 errors", NULL}},
      {"destroy", {"ERROR SUMMARY: 0 errors", NULL}},
  };
  int failed = 0;
  double t0 = th_now();
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    th_proc_t pr;
    int ofd = th_tmpfile(), efd = th_tmpfile();
    REQUIRE(ofd >= 0 && efd >= 0, "tmp");
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
      dup2(ofd, 1);
      dup2(efd, 2);
      alarm(240);
      execlp(MTP_VALGRIND_EXE, MTP_VALGRIND_EXE, "--tool=memcheck", "--leak-check=full",
             "--errors-for-leak-kinds=definite", "--show-leak-kinds=definite,indirect",
             "--fair-sched=no", argv[0], "--child", cases[i].name, (char *)NULL);
      _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    pr.status = st;
    pr.out = th_slurp_fd(ofd);
    pr.err = th_slurp_fd(efd);
    close(ofd);
    close(efd);
    int ok = WIFEXITED(st) && WEXITSTATUS(st) != 127;
    for (int k = 0; k < 3 && cases[i].want[k]; k++)
      if (!strstr(pr.err, cases[i].want[k])) ok = 0;
    if (!strcmp(cases[i].name, "clean") || !strcmp(cases[i].name, "destroy")) {
      if (strstr(pr.err, "definitely lost: ") || strstr(pr.err, "indirectly lost: ")) {
        /* only "0 bytes" is acceptable */
        const char *d = strstr(pr.err, "definitely lost: ");
        if (d && strncmp(d, "definitely lost: 0 bytes", 24)) ok = 0;
        d = strstr(pr.err, "indirectly lost: ");
        if (d && strncmp(d, "indirectly lost: 0 bytes", 24)) ok = 0;
      }
    }
    printf("valgrind %-10s %s\n", cases[i].name, ok ? "reported as expected" : "FAIL");
    if (!ok) {
      char sb[64];
      failed++;
      printf("  status %s\n  memcheck output:\n%.4000s\n", th_status_str(st, sb, sizeof sb),
             pr.err);
    }
    th_proc_free(&pr);
  }
  printf("valgrind: %zu cases in %.1f s, %d failed\n", sizeof cases / sizeof cases[0],
         th_now() - t0, failed);
  return failed ? 1 : 0;
}
