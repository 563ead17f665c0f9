/* The public C API on one thread: allocation paths, sizes and alignment, realloc, pools, stats,
 * options from the environment, and the misuse reports of the default (fast) mode. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mtpool/mtpool.h"
#include "testhelper.h"

static int last_err;
static void *last_ptr;
static int err_count;
static void record(int err, const char *msg, void *p, void *arg) {
  (void)msg;
  (void)arg;
  last_err = err;
  last_ptr = p;
  err_count++;
}

static void test_basic(void) {
  CHECK(strcmp(mtp_version(), "0.3.0") == 0);
  void *z1 = mtp_alloc(0), *z2 = mtp_alloc(0);
  CHECK(z1 && z2 && z1 != z2);
  mtp_free(z1);
  mtp_free(z2);
  mtp_free(NULL);
  mtp_free_sized(NULL, 8);
  for (size_t n = 1; n <= 70000; n = n < 300 ? n + 1 : n * 5 / 4) {
    unsigned char *p = mtp_alloc(n);
    CHECK(p != NULL);
    size_t want = n & (0 - n);
    if (want > 16) want = 16;
    CHECK(((uintptr_t)p & (want - 1)) == 0);
    CHECK(mtp_usable_size(p) >= n);
    memset(p, 0xAB, n);
    CHECK(mtp_pool_of(p) == mtp_default_pool());
    if (n & 1)
      mtp_free(p);
    else
      mtp_free_sized(p, n);
  }
  /* exact node sizes take exactly that many bytes */
  CHECK_EQ_SZ(mtp_usable_size(mtp_alloc(24)), 24);
  size_t sizes[] = {24, 40, 48, 56};
  for (int i = 0; i < 4; i++) {
    char *a = mtp_alloc(sizes[i]), *b = mtp_alloc(sizes[i]);
    CHECK_EQ_SZ(mtp_usable_size(a), sizes[i]);
    CHECK_EQ_SZ((size_t)(b > a ? b - a : a - b), sizes[i]); /* neighbours, no header */
    mtp_free_sized(a, sizes[i]);
    mtp_free_sized(b, sizes[i]);
  }
}

static void test_calloc_realloc(void) {
  volatile size_t huge = SIZE_MAX - 10, half = SIZE_MAX / 2; /* runtime values, not constants */
  errno = 0;
  CHECK(mtp_calloc(half, 3) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(mtp_alloc(huge) == NULL && errno == ENOMEM);
  errno = 0;
  CHECK(mtp_alloc_aligned(huge, 64) == NULL && errno == ENOMEM);
  errno = 0;
  void *small = mtp_alloc(8);
  CHECK(mtp_realloc(small, huge) == NULL && errno == ENOMEM); /* small stays valid */
  mtp_free(small);
  unsigned char *z = mtp_calloc(100, 7);
  for (int i = 0; i < 700; i++) CHECK(z[i] == 0);
  memset(z, 1, 700);
  mtp_free(z);
  z = mtp_calloc(100, 7); /* reused memory is zeroed too */
  for (int i = 0; i < 700; i++) CHECK(z[i] == 0);
  mtp_free(z);
  unsigned char *r = mtp_realloc(NULL, 10);
  for (int i = 0; i < 10; i++) r[i] = (unsigned char)i;
  size_t grow[] = {20, 100, 5000, 100000, 40, 3};
  size_t prev = 10;
  for (int k = 0; k < 6; k++) {
    r = mtp_realloc(r, grow[k]);
    CHECK(r != NULL);
    size_t keep = prev < grow[k] ? prev : grow[k];
    for (size_t i = 0; i < keep && i < 10; i++) CHECK(r[i] == i);
    prev = grow[k];
  }
  mtp_free(r);
}

static void test_aligned(void) {
  errno = 0;
  CHECK(mtp_alloc_aligned(10, 24) == NULL && errno == EINVAL);
  for (size_t a = 1; a <= ((size_t)1 << 23); a <<= 1) {
    size_t sizes[] = {1, 24, 100, 4000, 40000};
    for (int i = 0; i < 5; i++) {
      char *p = mtp_alloc_aligned(sizes[i], a);
      CHECK(p != NULL);
      CHECK(((uintptr_t)p & (a - 1)) == 0);
      CHECK(mtp_usable_size(p) >= sizes[i]);
      memset(p, 1, sizes[i]);
      if (i & 1)
        mtp_free_sized(p, sizes[i]); /* the size as requested is accepted */
      else
        mtp_free(p);
    }
  }
}

static void test_pools(void) {
  mtp_options_t opt;
  mtp_options_init(&opt);
  CHECK(opt.purge_delay_ms >= 0 && opt.purge_delay_ms <= 1000);
  opt.name = "test-nodes";
  mtp_pool_t *pool = mtp_pool_create(&opt);
  CHECK(pool != NULL);
  CHECK(strcmp(mtp_pool_name(pool), "test-nodes") == 0);
  CHECK(strcmp(mtp_pool_name(mtp_default_pool()), "default") == 0);
  void *ptrs[5000];
  for (int i = 0; i < 5000; i++) {
    ptrs[i] = mtp_pool_alloc(pool, (size_t)(i % 300) + 1);
    CHECK(ptrs[i] && mtp_pool_of(ptrs[i]) == pool);
  }
  void *big = mtp_pool_alloc(pool, 1 << 20);
  void *al = mtp_pool_alloc_aligned(pool, 64, 4096);
  CHECK(big && al && mtp_pool_of(big) == pool && mtp_pool_of(al) == pool);
  mtp_stats_t st;
  CHECK(mtp_pool_stats(pool, &st) == 0);
  CHECK_EQ_SZ(st.blocks_in_use, 5002);
  CHECK_EQ_SZ(st.allocs, 5002);
  CHECK_EQ_SZ(st.frees, 0);
  CHECK_EQ_SZ(st.large_blocks, 1);
  CHECK(st.bytes_reserved >= st.bytes_in_use);
  CHECK(strcmp(st.name, "test-nodes") == 0);
  for (int i = 0; i < 2500; i++) mtp_free(ptrs[i]);
  mtp_free(big);
  CHECK(mtp_pool_stats(pool, &st) == 0);
  CHECK_EQ_SZ(st.blocks_in_use, 2501);
  CHECK_EQ_SZ(st.frees, 2501);
  CHECK_EQ_SZ(st.large_blocks, 0);
  size_t per_class = 0;
  mtp_class_stats_t cs[256];
  int ncs = mtp_pool_class_stats(pool, cs, 256);
  CHECK(ncs > 0 && ncs <= 256);
  for (int c = 0; c < ncs; c++) per_class += cs[c].blocks_in_use;
  CHECK_EQ_SZ(per_class, 2501);
  CHECK(mtp_pool_stats(pool, NULL) == EINVAL);
  FILE *devnull = fopen("/dev/null", "w");
  CHECK(mtp_pool_print_stats(pool, devnull) == 0);
  CHECK(mtp_print_stats(devnull) == 0);
  CHECK(mtp_print_stats(NULL) == EINVAL);
  fclose(devnull);
  /* destroy releases every block, the ones still in use included */
  mtp_pool_destroy(pool);
  mtp_pool_destroy(NULL);
  mtp_pool_destroy(mtp_default_pool()); /* ignored */
  /* a new pool (maybe with the same id and address) starts clean */
  for (int round = 0; round < 50; round++) {
    mtp_pool_t *p2 = mtp_pool_create(NULL);
    CHECK(p2 != NULL);
    void *a = mtp_pool_alloc(p2, 48);
    CHECK(a && mtp_pool_of(a) == p2);
    CHECK(mtp_pool_stats(p2, &st) == 0 && st.blocks_in_use == 1 && st.allocs == 1);
    if (round % 2) mtp_free(a);
    mtp_pool_destroy(p2);
  }
  /* pool ids run out cleanly and come back */
  static mtp_pool_t *many[1100];
  int made = 0;
  while (made < 1100 && (many[made] = mtp_pool_create(NULL)) != NULL) made++;
  CHECK(made == 1023 && errno == ENOMEM);
  for (int i = 0; i < made; i++) mtp_pool_destroy(many[i]);
  CHECK((pool = mtp_pool_create(NULL)) != NULL);
  mtp_pool_destroy(pool);
}

/* Every request up to 128 B takes its size rounded up to 8, no more: from the default pool and
 * from a pool of its own. */
static void test_usable_small(void) {
  mtp_pool_t *pool = mtp_pool_create(NULL);
  REQUIRE(pool != NULL, "a pool");
  for (size_t n = 1; n <= 128; n++) {
    size_t want = (n + 7) & ~(size_t)7;
    void *p = mtp_alloc(n), *q = mtp_pool_alloc(pool, n);
    CHECK(p != NULL && q != NULL);
    EXPECT(mtp_usable_size(p) == want, "mtp_usable_size(mtp_alloc(%zu)) = %zu, want %zu", n,
           mtp_usable_size(p), want);
    CHECK_EQ_SZ(mtp_usable_size(q), want);
    mtp_free(p);
    mtp_free_sized(q, n);
  }
  mtp_pool_destroy(pool);
}

/* A heap walk's count per class index (MTP_VISIT_LARGE: the last entry). */
typedef struct {
  size_t by_cls[MTP_STATS_MAX_CLASSES], large, other;
} cls_tally_t;
static int tally_cls(void *arg, void *block, size_t usable, unsigned cls) {
  cls_tally_t *t = arg;
  (void)block;
  (void)usable;
  if (cls == MTP_VISIT_LARGE)
    t->large++;
  else if (cls < MTP_STATS_MAX_CLASSES)
    t->by_cls[cls]++;
  else
    t->other++;
  return 0;
}

/* Every size class: mtp_pool_class_stats and mtp_stats_next_classes give one entry per class, of
 * which mtp_stats_t holds the first MTP_STATS_MAX_CLASSES (blocks of later ones count in its
 * totals only, and a heap walk shows them as MTP_VISIT_LARGE); bad arguments are refused. */
static void test_class_stats(void) {
  int n = mtp_pool_class_stats(NULL, NULL, 0);
  CHECK(n > 0);
  mtp_class_stats_t *cs = calloc((size_t)n + 2, sizeof(*cs));
  void **blocks = calloc((size_t)n * (size_t)(n + 1) / 2, sizeof(void *));
  REQUIRE(cs != NULL && blocks != NULL, "memory for the test");
  mtp_options_t opt;
  mtp_options_init(&opt);
  opt.name = "test-classes";
  mtp_pool_t *pool = mtp_pool_create(&opt);
  REQUIRE(pool != NULL, "a pool");
  CHECK(mtp_pool_class_stats(pool, cs, (unsigned)n) == n);
  for (int c = 0; c < n; c++) {
    CHECK(cs[c].blocks_in_use == 0 && cs[c].slabs == 0);
    if (c > 0) CHECK(cs[c].block_size > cs[c - 1].block_size);
  }
  CHECK_EQ_SZ(cs[n - 1].block_size, 32768);
  /* c + 1 blocks of class c, and one large block */
  size_t nb = 0;
  for (int c = 0; c < n; c++)
    for (int i = 0; i <= c; i++)
      CHECK((blocks[nb++] = mtp_pool_alloc(pool, cs[c].block_size)) != NULL);
  void *big = mtp_pool_alloc(pool, 1 << 20);
  CHECK(big != NULL);
  memset(&cs[n], 0xab, 2 * sizeof(*cs));
  CHECK(mtp_pool_class_stats(pool, cs, (unsigned)n + 2) == n);
  const unsigned char *past = (const unsigned char *)&cs[n];
  for (size_t i = 0; i < 2 * sizeof(*cs); i++) CHECK(past[i] == 0xab); /* beyond n: untouched */
  size_t small = 0, beyond = 0;
  for (int c = 0; c < n; c++) {
    CHECK_EQ_SZ(cs[c].blocks_in_use, (size_t)c + 1);
    CHECK(cs[c].slabs >= 1 && cs[c].slab_bytes >= cs[c].block_size * ((size_t)c + 1));
    small += cs[c].blocks_in_use;
    if (c >= MTP_STATS_MAX_CLASSES) beyond += cs[c].blocks_in_use;
  }
  mtp_stats_t st;
  CHECK(mtp_pool_stats(pool, &st) == 0);
  CHECK_EQ_SZ(st.num_classes, n < MTP_STATS_MAX_CLASSES ? (unsigned)n : MTP_STATS_MAX_CLASSES);
  for (unsigned c = 0; c < st.num_classes; c++)
    CHECK(st.classes[c].block_size == cs[c].block_size &&
          st.classes[c].blocks_in_use == cs[c].blocks_in_use);
  CHECK_EQ_SZ(st.large_blocks, 1);
  CHECK_EQ_SZ(st.blocks_in_use, small + st.large_blocks);
  /* the walk's class indexes mtp_stats_t.classes: later classes show as MTP_VISIT_LARGE */
  cls_tally_t t;
  memset(&t, 0, sizeof(t));
  CHECK(mtp_pool_visit(pool, tally_cls, &t) == 0);
  CHECK_EQ_SZ(t.other, 0);
  CHECK_EQ_SZ(t.large, 1 + beyond);
  for (unsigned c = 0; c < st.num_classes; c++) CHECK_EQ_SZ(t.by_cls[c], c + 1);
  /* fewer entries than classes: only those are written */
  mtp_class_stats_t two[3];
  memset(two, 0xab, sizeof(two));
  CHECK(mtp_pool_class_stats(pool, two, 2) == n);
  CHECK(two[1].block_size == cs[1].block_size && two[1].blocks_in_use == 2);
  CHECK(((const unsigned char *)&two[2])[0] == 0xab);
  /* the iteration finds the pool, with the same figures in one snapshot */
  unsigned cursor = 0;
  int got, found = 0;
  while ((got = mtp_stats_next_classes(&cursor, &st, cs, (unsigned)n)) > 0) {
    CHECK(got == n);
    if (strcmp(st.name, "test-classes") != 0) continue;
    found++;
    size_t sum = 0;
    for (int c = 0; c < n; c++) sum += cs[c].blocks_in_use;
    CHECK_EQ_SZ(sum + st.large_blocks, st.blocks_in_use);
    CHECK_EQ_SZ(cs[n - 1].blocks_in_use, (size_t)n);
  }
  CHECK(got == 0 && found == 1);
  cursor = 0;
  CHECK(mtp_stats_next_classes(&cursor, &st, NULL, 0) == n); /* the totals alone */
  /* bad arguments */
  errno = 0;
  CHECK(mtp_pool_class_stats(pool, NULL, 1) == -1 && errno == EINVAL);
  errno = 0;
  CHECK(mtp_stats_next_classes(NULL, &st, cs, 1) == -1 && errno == EINVAL);
  errno = 0;
  CHECK(mtp_stats_next_classes(&cursor, NULL, cs, 1) == -1 && errno == EINVAL);
  errno = 0;
  CHECK(mtp_stats_next_classes(&cursor, &st, NULL, 1) == -1 && errno == EINVAL);
  for (size_t i = 0; i < nb; i++) mtp_free(blocks[i]);
  mtp_free(big);
  mtp_pool_destroy(pool);
  free(blocks);
  free(cs);
}

/* A pool name is user text: the plain-text reports escape it, so that a name cannot forge lines
 * (or a quote end the quoted name) of a report a tool reads. */
static void test_print_stats_escapes_name(void) {
  mtp_options_t opt;
  mtp_options_init(&opt);
  opt.name = "a\"b\nfake 1 2\\\xff";
  mtp_pool_t *pool = mtp_pool_create(&opt);
  REQUIRE(pool != NULL, "a pool");
  void *p = mtp_pool_alloc(pool, 24);
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  REQUIRE(f != NULL, "a memory stream");
  CHECK(mtp_pool_print_stats(pool, f) == 0);
  CHECK(mtp_print_stats(f) == 0);
  fclose(f);
  const char *want = "a\\\"b\\x0afake 1 2\\\\\\xff";
  CHECK(strstr(text, "pool \"") != NULL && strstr(strstr(text, "pool \""), want) != NULL);
  const char *second = strstr(text, want);
  CHECK(second != NULL && strstr(second + 1, want) != NULL); /* in both reports */
  CHECK(strstr(text, "\nfake") == NULL);                     /* no line starts with the name's tail */
  /* the last line: the regions' bytes in huge ranges (this pool's one region at least) and
   * AnonHugePages */
  const char *huge = strstr(text, "\nhuge pages: ");
  unsigned huge_kb = 0, regions = 0;
  long kb = -2;
  CHECK(huge != NULL && sscanf(huge, "\nhuge pages: %u kB of %u regions in huge ranges; the process's AnonHugePages %ld kB",
                               &huge_kb, &regions, &kb) == 3);
  CHECK(regions >= 1 && huge_kb <= regions * (4096u) && kb >= -1);
  free(text);
  mtp_free(p);
  mtp_pool_destroy(pool);
}

static void test_misuse_default_mode(void) {
  mtp_set_error_handler(record, NULL);
  int stack_var = 0;
  err_count = 0;
  mtp_free(&stack_var); /* never from mtpool */
  CHECK(err_count == 1 && last_err == MTP_ERR_INVALID_POINTER && last_ptr == &stack_var);
  void *p = mtp_alloc(40);
  mtp_free(p);
  mtp_free(p); /* freed twice in a row */
  CHECK(err_count == 2 && last_err == MTP_ERR_DOUBLE_FREE && last_ptr == p);
  p = mtp_alloc(40);
  mtp_free_sized(p, 200); /* another size class */
  CHECK(err_count == 3 && last_err == MTP_ERR_WRONG_SIZE && last_ptr == p);
  mtp_free_sized(p, 33); /* same block size: accepted */
  CHECK(err_count == 3);
  void *big = mtp_alloc(100000);
  mtp_free_sized(big, 10);
  CHECK(last_err == MTP_ERR_WRONG_SIZE && last_ptr == big);
  mtp_free(big);
  mtp_free(big);
  /* its mapping is cached for reuse: told apart from a foreign pointer */
  CHECK(last_err == MTP_ERR_DOUBLE_FREE && last_ptr == big);
  CHECK(mtp_usable_size(&stack_var) == 0 && last_ptr == &stack_var);
  mtp_set_error_handler(NULL, NULL);
}

/* mtp_check_range: a range within one live block passes, one past its end or before its start,
 * or in a freed block of a checked pool, is reported; addresses outside the heap pass. */
static int range_err(const void *p, size_t n) {
  err_count = 0;
  int r = mtp_check_range(p, n);
  CHECK(r == (err_count ? last_err : 0)); /* the code returned is the one reported */
  return r;
}

static void test_check_range(void) {
  mtp_set_error_handler(record, NULL);
  int stack_var[4];
  CHECK(range_err(stack_var, sizeof stack_var) == 0);
  CHECK(range_err(NULL, 8) == 0);
  /* default mode: a block's usable bytes; small, medium (a run, and inside it), large */
  size_t sizes[] = {40, 3000, (size_t)128 << 10, (size_t)4 << 20};
  for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    char *p = mtp_alloc(sizes[i]);
    size_t u = mtp_usable_size(p);
    CHECK(range_err(p, u) == 0);
    CHECK(range_err(p + 8, u - 8) == 0);
    CHECK(range_err(p, 0) == 0);
    CHECK(range_err(p, u + 1) == MTP_ERR_OVERFLOW && last_ptr == p);
    if (i < 3) CHECK(range_err(p + 8, u) == MTP_ERR_OVERFLOW); /* known from inside too */
    mtp_free(p);
  }
  /* checked pool: the requested bytes, its front guard, a freed block, a zero-size block, and a
   * large block (known by its start) */
  mtp_options_t o;
  mtp_options_init(&o);
  o.check = 1;
  mtp_pool_t *pool = mtp_pool_create(&o);
  CHECK(pool != NULL);
  char *p = mtp_pool_alloc(pool, 24), *z = mtp_pool_alloc(pool, 0), *big = mtp_pool_alloc(pool, 100000);
  CHECK(range_err(p, 24) == 0 && range_err(p + 23, 1) == 0);
  CHECK(range_err(p, 25) == MTP_ERR_OVERFLOW);
  CHECK(range_err(p - 1, 4) == MTP_ERR_OVERFLOW);
  CHECK(range_err(z, 1) == MTP_ERR_OVERFLOW);
  CHECK(range_err(big, 100000) == 0 && range_err(big, 100001) == MTP_ERR_OVERFLOW);
  mtp_free(p);
  CHECK(range_err(p, 1) == MTP_ERR_USE_AFTER_FREE);
  mtp_free(z);
  mtp_free(big);
  mtp_pool_destroy(pool);
  mtp_set_error_handler(NULL, NULL);
}

/* Frees leave errno as they found it, as the C library's free does, on every path: the fast
 * ones, a slab going back with a purge (delay 0), a large block, and reports through a handler
 * that itself sets errno. */
static void set_errno_handler(int err, const char *msg, void *p, void *arg) {
  record(err, msg, p, arg);
  errno = EIO;
}

static void test_free_keeps_errno(void) {
  mtp_set_error_handler(set_errno_handler, NULL);
  mtp_options_t o;
  mtp_options_init(&o);
  o.purge_delay_ms = 0;
  o.thread_cache_bytes = 0;
  mtp_pool_t *pool = mtp_pool_create(&o);
  CHECK(pool != NULL);
  int stack_var = 0;
  void *blocks[2000];
  for (int i = 0; i < 2000; i++) CHECK((blocks[i] = mtp_pool_alloc(pool, 48)) != NULL);
  void *big = mtp_pool_alloc(pool, 1 << 20), *small = mtp_alloc(40), *sized = mtp_alloc(100);
  CHECK(big != NULL && small != NULL && sized != NULL);
  err_count = 0;
  errno = 4242;
  for (int i = 0; i < 2000; i++) mtp_free(blocks[i]); /* slabs empty: released and purged */
  mtp_free(big);
  mtp_free(small);
  mtp_free_sized(sized, 100);
  CHECK(errno == 4242);
  mtp_free(&stack_var); /* reported: the handler sets errno */
  CHECK(err_count == 1 && errno == 4242);
  mtp_free(small); /* a double free, reported */
  CHECK(err_count == 2);
  CHECK(errno == 4242);
  void *q = mtp_alloc(40);
  mtp_free_sized(q, 4000); /* a wrong size, reported */
  CHECK(err_count == 3 && last_err == MTP_ERR_WRONG_SIZE && errno == 4242);
  mtp_free(q);
  mtp_free(big); /* a cached large block freed again */
  CHECK(err_count == 4 && errno == 4242);
  mtp_pool_destroy(pool);
  mtp_set_error_handler(NULL, NULL);
}

static void test_default_handler_aborts(void) {
  pid_t pid = fork();
  if (pid == 0) {
    int fds[2];
    if (pipe(fds)) _exit(3);
    dup2(fds[1], 2);
    int x;
    mtp_free(&x);
    _exit(0); /* not reached */
  }
  int status;
  waitpid(pid, &status, 0);
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
}

/* At exit, a checked pool's quarantine is verified once more: a write into a freed block that no
 * later allocation looked at is reported then (the default handler aborts). Not under ASan,
 * which reports the write itself. */
static void exit_scan_child(int write_after_free) {
  mtp_options_t o;
  mtp_options_init(&o);
  o.check = 1;
  mtp_pool_t *pool = mtp_pool_create(&o);
  if (pool == NULL) _exit(3);
  volatile unsigned char *p = mtp_pool_alloc(pool, 64);
  if (p == NULL) _exit(3);
  mtp_free((void *)p);
  if (write_after_free) p[8] = 0x5A;
  int fds[2];
  if (pipe(fds)) _exit(3);
  dup2(fds[1], 2); /* the report is not this test's output */
  exit(0);         /* destructors run: the scan */
}

static void test_exit_scan(void) {
  if (TH_ASAN) return;
  for (int w = 0; w < 2; w++) {
    pid_t pid = fork();
    if (pid == 0) exit_scan_child(w == 1);
    int status;
    waitpid(pid, &status, 0);
    if (w)
      CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
    else
      CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
}

/* The default pool reads MTPOOL_<FIELD> once: run ourselves again with the variables set. */
static int env_child(void) {
  CHECK(strcmp(mtp_pool_name(NULL), "from-env") == 0);
  void *p = mtp_alloc(10);
  mtp_set_error_handler(record, NULL);
  err_count = 0;
  mtp_free_sized(p, 11); /* checked mode (MTPOOL_CHECK=1) compares the exact size */
  CHECK(err_count == 1 && last_err == MTP_ERR_WRONG_SIZE);
  mtp_free_sized(p, 10);
  CHECK(err_count == 1);
  mtp_free(p);
  CHECK(err_count == 2 && last_err == MTP_ERR_DOUBLE_FREE);
  return 0;
}

static void test_env_options(const char *self) {
  pid_t pid = fork();
  if (pid == 0) {
    setenv("MTPOOL_NAME", "from-env", 1);
    setenv("MTPOOL_CHECK", "1", 1);
    setenv("MTPOOL_PURGE_DELAY_MS", "5", 1);
    char *args[] = {(char *)self, (char *)"--env-child", NULL};
    mtp_test_exec_self(args);
    _exit(2);
  }
  int status;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--env-child") == 0) return env_child();
  RUN(test_basic);
  RUN(test_calloc_realloc);
  RUN(test_aligned);
  RUN(test_pools);
  RUN(test_usable_small);
  RUN(test_class_stats);
  RUN(test_print_stats_escapes_name);
  RUN(test_misuse_default_mode);
  RUN(test_free_keeps_errno);
  RUN(test_check_range);
  RUN(test_default_handler_aborts);
  RUN(test_exit_scan);
  test_env_options(argv[0]);
  DONE();
}
