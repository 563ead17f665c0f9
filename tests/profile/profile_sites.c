/* A program with known allocation sites for the heap profiler (MTPOOL_PROFILE). It prints the
 * truth, "site NAME live BYTES alloc BYTES" per site, which check_profile.py compares with what
 * google-pprof reads from the profile. Each site is a function of its own (noinline), so that its
 * cumulative bytes in pprof are exactly its allocations. Sizes are block sizes of mtpool's size
 * classes, so that the bytes a site asked for are the bytes it was charged.
 *   profile_sites sites DIR   the sites, threads among them; a dump at mid-run (mtp_profile_dump)
 *   profile_sites fork DIR    a child of fork() allocates at a site of its own and exits: its own
 *                              profile file (%p); another thread allocates across the fork
 *   profile_sites off DIR     profiling off: mtp_profile_dump fails with ENOTSUP
 *   profile_sites every DIR   run with MTPOOL_PROFILE_RATE=1: every allocation is sampled, so the
 *                              sites' bytes are exact; blocks of the classes from 64 B, from the slab and
 *                              from the reuse list, each sample taking the place of the block the
 *                              fast path had popped (which goes back), their contents checked
 * Linked to mtpool's drop-in malloc (tests/malloc's convention: mtp_profile_dump found with
 * dlsym, so that it fails where malloc is not replaced), or, with MTP_PROFILE_CORE, to the core,
 * allocating with mtp_alloc (the sanitizer builds, where the drop-in is not built). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(MTP_PROFILE_CORE)
#include "mtpool/mtpool.h"
#define ALLOC mtp_alloc
#define FREE mtp_free
#define CALLOC mtp_calloc
#define REALLOC mtp_realloc
static int (*dump_fn)(const char *) = mtp_profile_dump;
#else
#define ALLOC malloc
#define FREE free
#define CALLOC calloc
#define REALLOC realloc
static int (*dump_fn)(const char *);
#endif

/* a site: a frame of its own, under its own name (no clone such as site.constprop.0) */
#if defined(__clang__)
#define SITE __attribute__((noinline))
#else
#define SITE __attribute__((noinline, noclone))
#endif
#define MiB ((size_t)1 << 20)
#define SITE_BYTES (40 * MiB) /* about 640 samples at 1 in 64 KiB: a 4% standard error */

static void fail(const char *what) {
  fprintf(stderr, "profile_sites: %s\n", what);
  exit(1);
}

static void truth(const char *name, size_t live, size_t alloc) {
  printf("site %s live %zu alloc %zu\n", name, live, alloc);
}

/* Each site allocates n blocks of size and writes them (a block the program never touches could
 * go unnoticed). */
static SITE void *site_live(size_t size) {
  void *p = ALLOC(size);
  if (p) memset(p, 1, size);
  return p;
}
static SITE void *site_churn(size_t size) {
  void *p = ALLOC(size);
  if (p) memset(p, 2, 16);
  return p;
}
static SITE void *site_half(size_t size) {
  void *p = ALLOC(size);
  if (p) memset(p, 3, 16);
  return p;
}
static SITE void *site_zeroed(size_t n, size_t size) {
  void *p = CALLOC(n, size);
  __asm__ volatile("" : : "r"(p) : "memory"); /* no tail call: the site keeps its frame */
  return p;
}
static SITE void *site_large(size_t size) {
  void *p = ALLOC(size);
  if (p) memset(p, 4, size);
  return p;
}
static SITE void *site_medium_churn(size_t size) {
  void *p = ALLOC(size);
  if (p) memset(p, 5, 64);
  return p;
}
static SITE void *site_grow(void) {
  void *p = ALLOC(64);
  __asm__ volatile("" : : "r"(p) : "memory");
  return p;
}
static SITE void *site_thread(size_t size) {
  void *p = ALLOC(size);
  if (p) memset(p, 6, 16);
  return p;
}
static SITE void *site_child(size_t size) {
  void *p = ALLOC(size);
  if (p) memset(p, 7, 16);
  return p;
}

static SITE void *site_every(size_t size) {
  void *p = ALLOC(size);
  if (p) memset(p, (int)(size & 0xff), size);
  return p;
}

static void **keep(size_t n) {
  void **v = ALLOC(n * sizeof(void *));
  if (v == NULL) fail("out of memory");
  return v;
}

#define THREADS 4
static void *thread_main(void *arg) {
  /* each thread keeps SITE_BYTES / THREADS in 512-byte blocks, and frees as much again */
  size_t n = SITE_BYTES / THREADS / 512;
  void **v = keep(n);
  for (size_t i = 0; i < n; i++) {
    v[i] = site_thread(512);
    void *t = site_thread(512);
    if (v[i] == NULL || t == NULL) fail("out of memory");
    FREE(t);
  }
  *(void ***)arg = v;
  return NULL;
}

static int run_sites(const char *dir) {
  size_t n;
  /* 1 KiB blocks, all kept */
  n = SITE_BYTES / 1024;
  void **live = keep(n);
  for (size_t i = 0; i < n; i++)
    if ((live[i] = site_live(1024)) == NULL) fail("out of memory");
  truth("site_live", n * 1024, n * 1024);
  /* 256-byte blocks, each freed at once: nothing in use at the end */
  n = 4 * SITE_BYTES / 256;
  for (size_t i = 0; i < n; i++) {
    void *p = site_churn(256);
    if (p == NULL) fail("out of memory");
    FREE(p);
  }
  truth("site_churn", 0, n * 256);
  /* 4 KiB blocks, every other one freed */
  n = 2 * SITE_BYTES / 4096;
  void **half = keep(n);
  for (size_t i = 0; i < n; i++) {
    if ((half[i] = site_half(4096)) == NULL) fail("out of memory");
    if (i % 2) {
      FREE(half[i]);
      half[i] = NULL;
    }
  }
  truth("site_half", n / 2 * 4096, n * 4096);
  /* calloc of 2 KiB blocks, kept */
  n = SITE_BYTES / 2048;
  void **zeroed = keep(n);
  for (size_t i = 0; i < n; i++) {
    unsigned char *p = site_zeroed(32, 64);
    if (p == NULL || p[0] != 0 || p[2047] != 0) fail("calloc");
    zeroed[i] = p;
  }
  truth("site_zeroed", n * 2048, n * 2048);
  /* large blocks (above the medium range), kept */
  n = 100;
  void **large = keep(n);
  for (size_t i = 0; i < n; i++)
    if ((large[i] = site_large(300000)) == NULL) fail("out of memory");
  truth("site_large", n * 300000, n * 300000);
  /* medium blocks, freed at once */
  n = SITE_BYTES / 100000;
  for (size_t i = 0; i < n; i++) {
    void *p = site_medium_churn(100000);
    if (p == NULL) fail("out of memory");
    FREE(p);
  }
  truth("site_medium_churn", 0, n * 100000);
  /* blocks grown by realloc and freed: a sampled block that realloc moves must leave no sample */
  for (int i = 0; i < 20000; i++) {
    char *p = site_grow();
    for (size_t sz = 128; p != NULL && sz <= 65536; sz *= 2) {
      p[0] = 'x';
      char *q = REALLOC(p, sz);
      if (q == NULL || q[0] != 'x') fail("realloc");
      p = q;
    }
    FREE(p);
  }
  truth("site_grow", 0, 0); /* its in-use only is checked */
  /* threads */
  pthread_t t[THREADS];
  void **kept[THREADS];
  for (int i = 0; i < THREADS; i++)
    if (pthread_create(&t[i], NULL, thread_main, &kept[i]) != 0) fail("pthread_create");
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  size_t per = SITE_BYTES / THREADS / 512;
  truth("site_thread", THREADS * per * 512, 2 * THREADS * per * 512);
  /* a dump now, of the same state as the one at exit */
  char path[4096];
  snprintf(path, sizeof path, "%s/mid.heap", dir);
  if (dump_fn(path) != 0) fail("mtp_profile_dump");
  printf("dump %s\n", path);
  /* and one to a directory that does not exist: -1 with open's errno */
  snprintf(path, sizeof path, "%s/no/such/dir/x.heap", dir);
  errno = 0;
  if (dump_fn(path) != -1 || errno != ENOENT) fail("mtp_profile_dump to a missing directory");
  return 0; /* the blocks kept stay in use at exit */
}

/* Sizes over the classes from 64 B to 32 KiB (an allocation of s bytes is sampled with
 * probability 1 - exp(-s) at rate 1: from 64 B on, certainly), a few blocks each, every other one
 * freed at once (so that the next allocation of the class pops a freed block: the slab's list up
 * to 1 KiB, the reuse list above), the rest kept and checked. */
static int run_every(void) {
  size_t live = 0, total = 0, n = 0;
  void **v = keep(4096);
  size_t *len = ALLOC(4096 * sizeof(size_t));
  if (len == NULL) fail("out of memory");
  for (size_t size = 64; size <= 32768 && n < 4096; size += size < 1024 ? 7 : 331) {
    for (int k = 0; k < 4 && n < 4096; k++) {
      void *p = site_every(size);
      if (p == NULL) fail("out of memory");
      total += size;
      if (k % 2) {
        FREE(p);
        continue;
      }
      v[n] = p;
      len[n++] = size;
      live += size;
    }
  }
  for (size_t i = 0; i < n; i++)
    for (size_t j = 0; j < len[i]; j++)
      if (((unsigned char *)v[i])[j] != (unsigned char)(len[i] & 0xff))
        fail("a block's contents changed");
  truth("site_every", live, total);
  return 0; /* the blocks kept stay in use at exit */
}

/* The child of a fork made while other threads run: a sanitizer's allocator lock one of them held
 * stays locked in the child (GCC 12's libsanitizer takes none around fork), and LeakSanitizer's
 * check at exit, or a first stdio buffer, would wait on it for ever. The child's leaks are not what
 * this checks: LeakSanitizer asks this hook, and stdout's buffer is this one. */
static int forked_child;
int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void) { return forked_child; }
static char out_buf[8192];

static int stop; /* atomic accesses */
static void *churner(void *arg) {
  (void)arg;
  while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) FREE(site_churn(256));
  return NULL;
}

static int run_fork(void) {
  /* forks while another thread allocates (and samples, and takes the profiler's lock) */
  /* The default pool exists before the thread starts: a fork while the thread ran its first-use
   * pthread_once would leave ThreadSanitizer's once stuck in the child (glibc's reruns it). */
  FREE(ALLOC(16));
  setvbuf(stdout, out_buf, _IOFBF, sizeof out_buf);
  pthread_t t;
  if (pthread_create(&t, NULL, churner, NULL) != 0) fail("pthread_create");
  for (int round = 0; round < 20; round++) {
    pid_t pid = fork();
    if (pid < 0) fail("fork");
    if (pid == 0) {
      forked_child = 1;
      size_t n = round == 0 ? SITE_BYTES / 1024 : 64;
      void **v = keep(n);
      for (size_t i = 0; i < n; i++)
        if ((v[i] = site_child(1024)) == NULL) _exit(1);
      if (round == 0) {
        printf("child %d\n", (int)getpid());
        truth("site_child", n * 1024, n * 1024);
      }
      exit(0); /* at exit the child writes its own file */
    }
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) fail("child");
  }
  __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
  pthread_join(t, NULL);
  printf("parent %d\n", (int)getpid());
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 3) fail("usage: profile_sites sites|fork|off|every DIR");
  setvbuf(stdout, NULL, _IOLBF, 0);
#if !defined(MTP_PROFILE_CORE)
  *(void **)&dump_fn = dlsym(RTLD_DEFAULT, "mtp_profile_dump");
  if (dump_fn == NULL) fail("mtp_profile_dump not found: malloc is not mtpool's");
#endif
  if (strcmp(argv[1], "sites") == 0) return run_sites(argv[2]);
  if (strcmp(argv[1], "fork") == 0) return run_fork();
  if (strcmp(argv[1], "every") == 0) return run_every();
  if (strcmp(argv[1], "off") == 0) {
    char path[4096];
    snprintf(path, sizeof path, "%s/off.heap", argv[2]);
    errno = 0;
    if (dump_fn(path) != -1 || errno != ENOTSUP) fail("mtp_profile_dump with profiling off");
    FREE(site_churn(256));
    return 0;
  }
  fail("unknown mode");
}
