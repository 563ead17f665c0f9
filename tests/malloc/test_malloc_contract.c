/* The drop-in malloc's contract, function by function, with glibc's edge cases. Runs preloaded
 * and linked; every check of a function's result also checks that the block is mtpool's, so the
 * test fails where malloc is not replaced. */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "malloc_util.h"

/* malloc before main, from a constructor (the library may not be initialised yet) */
static void *early_block;
__attribute__((constructor(101))) static void early(void) { early_block = malloc(40); }

static size_t lowbit(size_t n) { return n & (0 - n); }
/* sizes the compiler cannot see (it would warn about, or fold, impossible requests) */
static size_t big(size_t x) {
  volatile size_t v = x;
  return v;
}

static void fill_usable(void *p, size_t n) { memset(p, 0x5a, malloc_usable_size(p) > n ? malloc_usable_size(p) : n); }

static void test_malloc(void) {
  CHECK(mu_owned(early_block));
  free(early_block);
  void *z1 = malloc(0), *z2 = malloc(0);
  CHECK(mu_owned(z1) && mu_owned(z2) && z1 != z2);
  free(z1);
  free(z2);
  for (size_t n = 1; n < 140000; n = n < 64 ? n + 1 : n * 5 / 4) {
    char *p = malloc(n);
    CHECK(mu_owned(p));
    CHECK(malloc_usable_size(p) >= n);
    size_t want = lowbit(n) < 16 ? lowbit(n) : 16;
    CHECK((uintptr_t)p % want == 0);
    fill_usable(p, n); /* every usable byte is writable */
    free(p);
  }
  errno = 0;
  CHECK(malloc(big(SIZE_MAX)) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(malloc(big(SIZE_MAX / 2 + 1)) == NULL && errno == ENOMEM);
}

static void test_free(void) {
  free(NULL);
  void *a = malloc(100), *b = malloc(1 << 20);
  CHECK(mu_owned(a) && mu_owned(b));
  size_t before = mu_blocks_in_use();
  errno = 4321;
  free(a);
  free(b); /* unmaps */
  CHECK(errno == 4321);
  CHECK(mu_blocks_in_use() == before - 2);
}

static void test_calloc(void) {
  for (size_t n = 1; n < 100000; n = n * 3 + 1) {
    unsigned char *p = malloc(n);
    memset(p, 0xAB, n);
    free(p);
    unsigned char *q = calloc(1, n); /* most likely the same block again */
    CHECK(mu_owned(q));
    for (size_t i = 0; i < n; i++) CHECK(q[i] == 0);
    free(q);
  }
  void *z = calloc(0, 0);
  CHECK(mu_owned(z));
  free(z);
  errno = 0;
  CHECK(calloc(big(SIZE_MAX / 2), 3) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(calloc(big((size_t)1 << 33), (size_t)1 << 33) == NULL && errno == ENOMEM);
}

static void test_realloc(void) {
  char *p = realloc(NULL, 10);
  CHECK(mu_owned(p));
  memcpy(p, "abcdefghi", 10);
  for (size_t n = 20; n < 300000; n *= 3) {
    p = realloc(p, n);
    CHECK(mu_owned(p) && memcmp(p, "abcdefghi", 10) == 0 && malloc_usable_size(p) >= n);
    memset(p + 10, 0x5a, malloc_usable_size(p) - 10); /* every usable byte is writable */
  }
  p = realloc(p, 5);
  CHECK(mu_owned(p) && memcmp(p, "abcde", 5) == 0);
  /* failure leaves the block as it was */
  errno = 0;
  CHECK(realloc(p, big(SIZE_MAX - 4096)) == NULL && errno == ENOMEM);
  CHECK(mu_owned(p) && memcmp(p, "abcde", 5) == 0);
  /* realloc(p, 0) frees p and returns NULL, as glibc */
  size_t before = mu_blocks_in_use();
  CHECK(realloc(p, 0) == NULL);
  CHECK(mu_blocks_in_use() == before - 1);
  void *q = realloc(NULL, 0);
  CHECK(mu_owned(q));
  free(q);
}

static void test_reallocarray(void) {
  int *a = reallocarray(NULL, 10, sizeof(int));
  CHECK(mu_owned(a));
  for (int i = 0; i < 10; i++) a[i] = i;
  a = reallocarray(a, 1000, sizeof(int));
  CHECK(mu_owned(a) && a[9] == 9);
  errno = 0;
  CHECK(reallocarray(a, big(SIZE_MAX / 2), 4) == NULL && errno == ENOMEM);
  CHECK(a[9] == 9 && mu_owned(a));
  free(a);
}

static void test_posix_memalign(void) {
  for (size_t al = sizeof(void *); al <= ((size_t)1 << 22); al <<= 1) {
    for (size_t n = 0; n < 100000; n = n * 4 + 3) {
      void *p = (void *)1;
      errno = 77;
      CHECK(posix_memalign(&p, al, n) == 0 && errno == 77);
      CHECK(mu_owned(p) && (uintptr_t)p % al == 0 && malloc_usable_size(p) >= n);
      fill_usable(p, n);
      free(p);
    }
  }
  void *p = (void *)1;
  CHECK(posix_memalign(&p, 0, 8) == EINVAL && p == (void *)1);
  CHECK(posix_memalign(&p, sizeof(void *) / 2, 8) == EINVAL && p == (void *)1);
  CHECK(posix_memalign(&p, 24, 8) == EINVAL && p == (void *)1);
  errno = 77;
  CHECK(posix_memalign(&p, 64, big(SIZE_MAX - 100)) == ENOMEM && p == (void *)1 && errno == 77);
}

static void test_aligned_alloc_memalign(void) {
  for (size_t al = 1; al <= 65536; al <<= 1) {
    void *p = aligned_alloc(al, 3 * al);
    CHECK(mu_owned(p) && (uintptr_t)p % al == 0);
    fill_usable(p, 3 * al);
    free(p);
    p = memalign(al, 100);
    CHECK(mu_owned(p) && (uintptr_t)p % al == 0);
    free(p);
  }
  errno = 0;
  CHECK(aligned_alloc(big(24), 48) == NULL && errno == EINVAL);
  errno = 0;
  CHECK(aligned_alloc(big(0), 48) == NULL && errno == EINVAL);
  errno = 0;
  CHECK(aligned_alloc(64, big(SIZE_MAX - 100)) == NULL && errno == ENOMEM);
  void *p = memalign(big(24), 10); /* rounded up to 32 */
  CHECK(mu_owned(p) && (uintptr_t)p % 32 == 0);
  free(p);
  errno = 0;
  CHECK(memalign(big(SIZE_MAX / 2 + 2), 8) == NULL && errno == EINVAL);
}

static void test_valloc_pvalloc(void) {
  size_t ps = (size_t)getpagesize();
  void *p = valloc(10);
  CHECK(mu_owned(p) && (uintptr_t)p % ps == 0);
  free(p);
#if defined(__GLIBC__)
  p = pvalloc(ps + 1);
  CHECK(mu_owned(p) && (uintptr_t)p % ps == 0 && malloc_usable_size(p) >= 2 * ps);
  fill_usable(p, 2 * ps);
  free(p);
  p = pvalloc(0);
  CHECK(mu_owned(p) && malloc_usable_size(p) >= ps);
  free(p);
  errno = 0;
  CHECK(pvalloc(big(SIZE_MAX - 10)) == NULL && errno == ENOMEM);
#endif
}

static void test_usable_size(void) {
  CHECK(malloc_usable_size(NULL) == 0);
  void *p = malloc(1000);
  typedef size_t (*usable_fn)(const void *);
  CHECK(malloc_usable_size(p) == ((usable_fn)mu_sym("mtp_usable_size"))(p));
  free(p);
  /* every request up to 128 B takes its size rounded up to 8 (checked mode: the size asked) */
  const char *checked = getenv("MTPOOL_CHECK");
  int exact = checked != NULL && strcmp(checked, "1") == 0;
  for (size_t n = 1; n <= 128; n++) {
    size_t want = exact ? n : (n + 7) & ~(size_t)7;
    p = malloc(n);
    CHECK(mu_owned(p));
    if (malloc_usable_size(p) != want)
      fprintf(stderr, "malloc_usable_size(malloc(%zu)) = %zu, want %zu\n", n, malloc_usable_size(p),
              want);
    CHECK(malloc_usable_size(p) == want);
    free(p);
  }
}

static void test_free_sized(void) {
  typedef void (*fs_fn)(void *, size_t);
  typedef void (*fas_fn)(void *, size_t, size_t);
  fs_fn free_sized_ = (fs_fn)mu_sym("free_sized");
  fas_fn free_aligned_sized_ = (fas_fn)mu_sym("free_aligned_sized");
  size_t before = mu_blocks_in_use();
  size_t sizes[] = {1, 24, 100, 1000, 5000, 40000, 1 << 20};
  for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
    void *p = malloc(sizes[i]);
    CHECK(mu_owned(p));
    errno = 55;
    free_sized_(p, sizes[i]);
    CHECK(errno == 55);
    p = malloc(sizes[i]); /* a size up to the usable size is accepted too */
    free_sized_(p, malloc_usable_size(p));
    p = aligned_alloc(256, sizes[i]);
    CHECK(mu_owned(p));
    free_aligned_sized_(p, 256, sizes[i]);
  }
  free_sized_(NULL, 10);
  free_aligned_sized_(NULL, 64, 10);
  CHECK(mu_blocks_in_use() == before);
}

#if defined(__GLIBC__)
static void test_libc_aliases(void) {
  const char *names[] = {"__libc_malloc", "__libc_calloc", "__libc_valloc", "__libc_pvalloc"};
  for (unsigned i = 0; i < 4; i++) {
    void *f = mu_sym(names[i]);
    void *p = i == 1 ? ((void *(*)(size_t, size_t))f)(3, 10) : ((void *(*)(size_t))f)(30);
    CHECK(mu_owned(p));
    ((void (*)(void *))mu_sym("__libc_free"))(p);
  }
  void *p = ((void *(*)(size_t, size_t))mu_sym("__libc_memalign"))(128, 10);
  CHECK(mu_owned(p) && (uintptr_t)p % 128 == 0);
  p = ((void *(*)(void *, size_t))mu_sym("__libc_realloc"))(p, 5000);
  CHECK(mu_owned(p));
  ((void (*)(void *))mu_sym("cfree"))(p);
  CHECK(((int (*)(void **, size_t, size_t))mu_sym("__posix_memalign"))(&p, 64, 10) == 0);
  CHECK(mu_owned(p));
  free(p);
}

static void test_trim_mallinfo(void) {
  /* MTPOOL_PURGE_DELAY_MS=-1 (set by the test): pages go back only when trimmed */
  enum { N = 20000 };
  static void *v[N];
  struct mallinfo2 m0 = mallinfo2();
  for (int i = 0; i < N; i++) v[i] = malloc(1000);
  void *big = malloc(3 << 20);
  struct mallinfo2 m1 = mallinfo2();
  CHECK(m1.uordblks >= m0.uordblks + (size_t)N * 1000);
  CHECK(m1.hblks == m0.hblks + 1 && m1.hblkhd >= m0.hblkhd + (3 << 20));
  CHECK(m1.arena >= m1.uordblks);
  CHECK(mu_owned(big));
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  struct mallinfo m = mallinfo();
#pragma GCC diagnostic pop
  CHECK((size_t)m.uordblks == m1.uordblks && (size_t)m.hblks == m1.hblks);
  for (int i = 0; i < N; i++) free(v[i]);
  free(big);
  struct mallinfo2 m2 = mallinfo2();
  CHECK(m2.uordblks <= m1.uordblks - (size_t)N * 1000 && m2.hblks == m0.hblks);
  CHECK(m2.fordblks >= (size_t)N * 1000);
  CHECK(malloc_trim(0) == 1); /* memory went back */
  struct mallinfo2 m3 = mallinfo2();
  CHECK(m3.arena < m2.arena && m3.fordblks < m2.fordblks);
  CHECK(malloc_trim(0) == 0); /* nothing left to give back */
}

static void test_mallopt(void) {
  CHECK(mallopt(M_MMAP_THRESHOLD, 1 << 20) == 1);
  CHECK(mallopt(M_ARENA_MAX, 2) == 1);
  CHECK(mallopt(M_PERTURB, 0) == 1);
  CHECK(mallopt(12345, 1) == 0); /* glibc returns 1 for an unknown parameter */
}

static char *capture_stderr(void (*fn)(void)) {
  fflush(stderr);
  FILE *tmp = tmpfile();
  CHECK(tmp != NULL);
  int saved = dup(2);
  dup2(fileno(tmp), 2);
  fn();
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  static char buf[65536];
  rewind(tmp);
  size_t n = fread(buf, 1, sizeof(buf) - 1, tmp);
  buf[n] = 0;
  fclose(tmp);
  return buf;
}

static void test_malloc_stats_info(void) {
  void *keep = malloc(777);
  const char *s = capture_stderr(malloc_stats);
  CHECK(strstr(s, "default") != NULL && strstr(s, "total") != NULL && strstr(s, "bytes in use"));
  char *xml = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&xml, &len); /* its buffer comes from malloc: mtpool */
  CHECK(f != NULL);
  CHECK(malloc_info(0, f) == 0);
  fclose(f);
  CHECK(mu_owned(xml));
  CHECK(strncmp(xml, "<malloc version=\"mtpool-", 24) == 0);
  CHECK(strstr(xml, "<heap nr=\"0\" name=\"default\">") != NULL);
  int found = 0; /* the class of the 777-byte block, with its slabs on its own line */
  for (const char *at = xml; (at = strstr(at, "<size from=\"")) != NULL; at++) {
    size_t from = strtoul(at + 12, NULL, 10);
    if (from < 777 || from >= 1024) continue;
    const char *slabs = strstr(at, " slabs=\""), *bytes = strstr(at, " slab_bytes=\"");
    const char *end = strchr(at, '\n');
    CHECK(end != NULL && slabs != NULL && bytes != NULL && slabs < end && bytes < end);
    found |= strtoul(slabs + 8, NULL, 10) >= 1 && strtoul(bytes + 13, NULL, 10) >= from;
  }
  CHECK(found);
  CHECK(strstr(xml, "</malloc>\n") != NULL);
  free(xml);
  CHECK(malloc_info(1, stdout) == EINVAL);
  free(keep);
}

#else
/* Against musl the drop-in offers what musl's libc offers, and none of glibc's extras (each would
 * be a function musl programs never call, and a false promise): none is exported. Where musl's
 * libc is shared, musl's own functions allocate through the replaced malloc too. */
static void test_libc_aliases(void) {
#if !defined(MTP_MALLOC_STATIC)
  const char *glibc_only[] = {"pvalloc", "cfree", "__libc_malloc", "__libc_free", "__libc_memalign",
                              "__posix_memalign", "mallinfo", "mallinfo2", "mallopt",
                              "malloc_trim", "malloc_stats", "malloc_info"};
  for (unsigned i = 0; i < sizeof(glibc_only) / sizeof(glibc_only[0]); i++) {
    if (dlsym(RTLD_DEFAULT, glibc_only[i]) != NULL) {
      fprintf(stderr, "%s is exported against musl\n", glibc_only[i]);
      CHECK(0);
    }
  }
#endif
  char *s = strdup("inside libc"); /* libc's own call to malloc */
  CHECK(mu_owned(s));
  free(s);
  char *line = NULL;
  size_t cap = 0;
  FILE *f = fmemopen((char *)"one line\n", 9, "r");
  CHECK(f != NULL && getline(&line, &cap, f) == 9);
  CHECK(mu_owned(line)); /* grown by libc's realloc call */
  free(line);
  fclose(f);
}
#endif

static void test_dlerror(void) {
#if !defined(MTP_MALLOC_STATIC) /* no dynamic loading in a static program */
  /* dlerror's message is malloc'ed by libc, and freed by libc's next dlerror call */
  for (int i = 0; i < 100; i++) {
    CHECK(dlopen("/nonexistent/libnothing.so", RTLD_NOW) == NULL);
    const char *e = dlerror();
    CHECK(e != NULL && strstr(e, "libnothing") != NULL);
  }
#endif
}

static int handler_calls;
static void *handler_ptr;
static void on_error(int err, const char *msg, void *ptr, void *arg) {
  (void)msg;
  (void)arg;
  if (err == MTP_ERR_INVALID_POINTER || err == MTP_ERR_DOUBLE_FREE) handler_calls++;
  handler_ptr = ptr;
}

static void test_invalid_pointer(void) {
  /* default handler: one line on stderr, then abort */
  int fds[2];
  CHECK(pipe(fds) == 0);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], 2);
    long on_stack[4];
    free(&on_stack[1]);
    _exit(0); /* not reached */
  }
  close(fds[1]);
  char buf[512] = {0};
  ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(n > 0 && WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
  CHECK(strstr(buf, "mtpool: invalid pointer") != NULL);
  /* an installed handler hears of foreign, interior and double frees; the block is left alone */
  void (*set_handler)(mtp_error_fn, void *) =
      (void (*)(mtp_error_fn, void *))mu_sym("mtp_set_error_handler");
  set_handler(on_error, NULL);
  long local;
  free(&local);
  CHECK(handler_calls == 1 && handler_ptr == &local);
  /* an interior pointer: of a large block always; of a small one in checked mode (MTPOOL_CHECK=1;
   * the fast path does not look, see the README's table of which mode catches which fault) */
  char *big = malloc(1 << 20);
  free(big + 4096);
  CHECK(handler_calls == 2 && handler_ptr == big + 4096);
  free(big);
  const char *checked = getenv("MTPOOL_CHECK");
  char *p = malloc(64);
  if (checked && strcmp(checked, "1") == 0) {
    free(p + 8);
    CHECK(handler_calls == 3 && handler_ptr == p + 8);
    handler_calls--;
  }
  void *q = malloc(5000);
  free(q);
  free(q); /* the same block twice in a row */
  CHECK(handler_calls == 3 && handler_ptr == q);
  free(p);
  set_handler(NULL, NULL);
}

int main(void) {
  mu_init();
  RUN(test_malloc);
  RUN(test_free);
  RUN(test_calloc);
  RUN(test_realloc);
  RUN(test_reallocarray);
  RUN(test_posix_memalign);
  RUN(test_aligned_alloc_memalign);
  RUN(test_valloc_pvalloc);
  RUN(test_usable_size);
  RUN(test_free_sized);
  RUN(test_libc_aliases);
#if defined(__GLIBC__)
  RUN(test_trim_mallinfo);
  RUN(test_mallopt);
  RUN(test_malloc_stats_info);
#endif
  RUN(test_dlerror);
  RUN(test_invalid_pointer);
  DONE();
}
