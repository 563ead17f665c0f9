/*
 * Checked mode as a heap debugger, through the public API on a checked pool: mtp_pool_check finds
 * live blocks written past their end or before their start (small and large), and freed blocks
 * written to, reporting each with its pool, size and address; zero-size requests get distinct
 * addresses that fault on access and free normally (misuse reported); realloc always moves; blocks
 * read as cleared when handed out and when freed; a write past a block's guards into a block not
 * handed out (or the slab's guard block) is reported at its free; a checked pool's live corrupt
 * block is reported at exit. Errors go to a handler that records them and returns.
 */
#define _GNU_SOURCE
#include <signal.h>

#include "testhelper.h"

#if TH_ASAN
#define READS_FREED 0 /* AddressSanitizer poisons freed blocks: this test does not peek at them */
#else
#define READS_FREED 1
#endif

typedef struct {
  int n, err;
  void *ptr;
  char msg[256];
} seen_t;
static seen_t seen;

static void record(int err, const char *message, void *ptr, void *arg) {
  (void)arg;
  seen.n++;
  seen.err = err;
  seen.ptr = ptr;
  snprintf(seen.msg, sizeof seen.msg, "%s", message);
}
static void reset(void) { memset(&seen, 0, sizeof seen); }

/* A write the compiler keeps: through a volatile pointer. */
static void poke(void *p, long off, char v) { ((volatile char *)th_opaque_ptr(p))[off] = v; }

static void test_clean_pool_checks_zero(void) {
  mtp_pool_t *pool = th_pool("dbg-clean", 250, 1);
  void *a = mtp_pool_alloc(pool, 24), *b = mtp_pool_alloc(pool, 5000), *c = mtp_pool_alloc(pool, 100000);
  CHECK(a && b && c);
  memset(a, 1, 24);
  memset(b, 2, 5000);
  memset(c, 3, 100000);
  reset();
  CHECK(mtp_pool_check(pool) == 0);
  CHECK(seen.n == 0);
  mtp_free(b);
  CHECK(mtp_pool_check(pool) == 0);
  mtp_free(a);
  mtp_free(c);
  CHECK(mtp_pool_check(pool) == 0);
  CHECK(seen.n == 0);
  mtp_pool_destroy(pool);
  CHECK(seen.n == 0);
  /* a pool that is not checked: nothing to verify */
  mtp_pool_t *plain = th_pool("dbg-plain", 250, 0);
  void *d = mtp_pool_alloc(plain, 24);
  CHECK(mtp_pool_check(plain) == 0);
  mtp_free(d);
  mtp_pool_destroy(plain);
  CHECK(mtp_pool_check(NULL) == 0); /* the default pool, not checked in this test */
}

static void test_live_overflow_and_underflow(void) {
  mtp_pool_t *pool = th_pool("dbg-live", 250, 1);
  char *a = mtp_pool_alloc(pool, 24), *b = mtp_pool_alloc(pool, 40), *c = mtp_pool_alloc(pool, 70000);
  char *ok = mtp_pool_alloc(pool, 24);
  CHECK(a && b && c && ok);
  reset();
  poke(a, 24, 'x'); /* one byte past a live small block */
  CHECK(mtp_pool_check(pool) == 1);
  CHECK(seen.n == 1 && seen.err == MTP_ERR_OVERFLOW && seen.ptr == a);
  EXPECT(strstr(seen.msg, "dbg-live") != NULL && strstr(seen.msg, "24 bytes") != NULL,
         "the report names the pool and the size: %s", seen.msg);
  poke(b, -1, 'u'); /* one byte before another */
  reset();
  CHECK(mtp_pool_check(pool) == 2);
  CHECK(seen.n == 2);
  poke(c, 70000, 'y'); /* past a live large block */
  reset();
  CHECK(mtp_pool_check(pool) == 3);
  CHECK(seen.n == 3 && seen.ptr == c);
  EXPECT(strstr(seen.msg, "70000 bytes") != NULL, "large block's size named: %s", seen.msg);
  /* trim verifies too */
  reset();
  mtp_pool_trim(pool);
  CHECK(seen.n == 3);
  /* the intact block frees quietly; the corrupt ones are reported at free and left alone */
  reset();
  mtp_free(ok);
  CHECK(seen.n == 0);
  mtp_free(a);
  CHECK(seen.n == 1 && seen.err == MTP_ERR_OVERFLOW);
  reset();
  mtp_pool_destroy(pool); /* destroy verifies: the three are still there */
  CHECK(seen.n == 3);
}

/* A write past a block's guards into the block above it, not handed out yet, or before a slab's
 * first block into the guard block kept below it, is reported at the block's free, and once. */
static void test_neighbours(void) {
#if READS_FREED /* the writes land in memory AddressSanitizer poisons */
  mtp_pool_t *pool = th_pool("dbg-near", 250, 1);
  char *a = mtp_pool_alloc(pool, 8); /* a 32-byte block: 16 guard, 8, canary, footer */
  CHECK(a != NULL);
  reset();
  poke(a, 39, 'o'); /* 32 bytes past its end: in the next block, not handed out */
  CHECK(mtp_pool_check(pool) == 0); /* a's own guards are intact */
  mtp_free(a);
  CHECK(seen.n == 1 && seen.err == MTP_ERR_OVERFLOW && seen.ptr == a);
  char *b = mtp_pool_alloc(pool, 8); /* the block written, cleared again when reported */
  CHECK(b != NULL);
  mtp_free(b);
  CHECK(seen.n == 1);
  mtp_pool_destroy(pool);
  pool = th_pool("dbg-near-under", 250, 1);
  char *c = mtp_pool_alloc(pool, 8); /* the slab's first block handed out */
  CHECK(c != NULL);
  reset();
  poke(c, -32, 'u'); /* before its front guard: the guard block */
  mtp_free(c);
  CHECK(seen.n == 1 && seen.err == MTP_ERR_OVERFLOW && seen.ptr == c);
  EXPECT(strstr(seen.msg, "underflow") != NULL, "an underflow: %s", seen.msg);
  mtp_pool_destroy(pool);
  CHECK(seen.n == 1);
#else
  printf("skipped: the writes land in memory AddressSanitizer poisons\n");
#endif
}

static void test_freed_block_cleared_and_verified(void) {
  mtp_pool_t *pool = th_pool("dbg-freed", 250, 1);
  /* handed out cleared, even a reused block: free many so that blocks leave the quarantine */
  for (int round = 0; round < 3; round++) {
    char *v[2048];
    for (int i = 0; i < 2048; i++) {
      v[i] = mtp_pool_alloc(pool, 100);
      CHECK(v[i] != NULL);
      for (int k = 0; k < 100; k++) CHECK(v[i][k] == 0);
      memset(v[i], 'S', 100);
    }
    for (int i = 0; i < 2048; i++) mtp_free(v[i]);
  }
  reset();
  CHECK(mtp_pool_check(pool) == 0);
  char *p = mtp_pool_alloc(pool, 64);
  CHECK(p != NULL);
  memset(p, 'S', 64);
  mtp_free(p);
#if READS_FREED
  for (int k = 0; k < 64; k++) CHECK(((volatile char *)p)[k] == 0); /* cleared at free */
  poke(p, 10, 'W'); /* a write into the quarantined block */
  CHECK(mtp_pool_check(pool) == 1);
  CHECK(seen.n == 1 && seen.err == MTP_ERR_USE_AFTER_FREE && seen.ptr == p);
  EXPECT(strstr(seen.msg, "dbg-freed") != NULL, "pool named: %s", seen.msg);
  reset();
  CHECK(mtp_pool_check(pool) == 0); /* taken out of circulation: reported once */
#endif
  mtp_pool_destroy(pool);
  CHECK(seen.n == 0);
}

static char *zero_target;
static int write_zero_child(void) {
  signal(SIGSEGV, SIG_DFL);
  poke(zero_target, 0, 1);
  return 0; /* reached only if the write did not fault */
}
static int read_zero_child(void) {
  signal(SIGSEGV, SIG_DFL);
  return ((volatile char *)zero_target)[0] == 0x7f ? 3 : 0;
}
/* Did child() die by a signal (the access faulted)? */
static int faults(int (*child)(void)) {
  fflush(NULL);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) _exit(child());
  int st = 0;
  CHECK(waitpid(pid, &st, 0) == pid);
  return WIFSIGNALED(st) || (WIFEXITED(st) && WEXITSTATUS(st) != 0);
}

static void test_zero_size(void) {
  mtp_pool_t *pool = th_pool("dbg-zero", 250, 1);
  char *z[64];
  for (int i = 0; i < 64; i++) {
    z[i] = mtp_pool_alloc(pool, 0);
    CHECK(z[i] != NULL);
    CHECK(((uintptr_t)z[i] & 15) == 0);
    for (int j = 0; j < i; j++) CHECK(z[i] != z[j]);
    CHECK(mtp_usable_size(z[i]) == 0);
    CHECK(mtp_pool_of(z[i]) == pool);
  }
  char *al = mtp_pool_alloc_aligned(pool, 0, 256);
  CHECK(al != NULL && ((uintptr_t)al & 255) == 0);
  zero_target = z[3];
  CHECK(faults(write_zero_child));
  CHECK(faults(read_zero_child));
  reset();
  CHECK(mtp_pool_check(pool) == 0);
  /* realloc from a zero-size block moves it */
  char *r = mtp_realloc(z[5], 10);
  CHECK(r != NULL && r != z[5]);
  memset(r, 1, 10);
  mtp_free(r);
  CHECK(seen.n == 0);
  mtp_free(z[5]); /* realloc freed it: a double free */
  CHECK(seen.n == 1 && seen.err == MTP_ERR_DOUBLE_FREE);
  reset();
  mtp_free_sized(z[6], 8);
  CHECK(seen.n == 1 && seen.err == MTP_ERR_WRONG_SIZE);
  reset();
  mtp_free(z[7] + 1);
  CHECK(seen.n == 1 && seen.err == MTP_ERR_INVALID_POINTER);
  reset();
  mtp_free_sized(z[6], 0);
  for (int i = 0; i < 64; i++)
    if (i != 5 && i != 6) mtp_free(z[i]);
  mtp_free(al);
  CHECK(seen.n == 0);
  /* the pool's zero-size blocks go with it: freeing one after is reported */
  char *left = mtp_pool_alloc(pool, 0);
  CHECK(left != NULL);
  mtp_pool_destroy(pool);
  reset();
  mtp_free(left);
  CHECK(seen.n == 1);
  reset();
}

/* A checked pool's pages outside its runs are inaccessible: a write 1 MiB past a small block of a
 * pool that holds little faults; the same write in an unchecked pool's region does not. */
static char *far_target;
static int write_far_child(void) {
  signal(SIGSEGV, SIG_DFL);
  ((volatile char *)far_target)[(size_t)1 << 20] = 'A';
  return 0; /* reached only if the write did not fault */
}

static void test_far_pages_fault(void) {
  mtp_pool_t *pool = th_pool("dbg-far", 250, 1), *plain = th_pool("dbg-far-plain", 250, 0);
  char *p = mtp_pool_alloc(pool, 8), *q = mtp_pool_alloc(plain, 8);
  CHECK(p != NULL && q != NULL);
  far_target = p;
  CHECK(faults(write_far_child));
  far_target = q;
  if (!TH_ASAN) CHECK(!faults(write_far_child)); /* (AddressSanitizer finds the write itself) */
  /* a run taken later is accessible again: blocks of every small size, written whole */
  char *b[40];
  for (int i = 0; i < 40; i++) {
    b[i] = mtp_pool_alloc(pool, (size_t)800 * (size_t)(i + 1));
    CHECK(b[i] != NULL);
    memset(b[i], 0x5a, (size_t)800 * (size_t)(i + 1));
  }
  for (int i = 0; i < 40; i++) mtp_free(b[i]);
  mtp_free(p);
  mtp_free(q);
  CHECK(mtp_pool_check(pool) == 0);
  CHECK(seen.n == 0);
  mtp_pool_destroy(pool);
  mtp_pool_destroy(plain);
}

static void test_realloc_moves(void) {
  mtp_pool_t *pool = th_pool("dbg-realloc", 250, 1);
  size_t sizes[] = {24, 4096, 40000, 300000};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t n = sizes[i];
    char *p = mtp_pool_alloc(pool, n);
    CHECK(p != NULL);
    memset(p, 'r', n);
    char *q = mtp_realloc(p, n);
    CHECK(q != NULL && q != p);
    char *s = mtp_realloc(q, n / 2);
    CHECK(s != NULL && s != q);
    char *g = mtp_realloc(s, n * 2);
    CHECK(g != NULL && g != s);
    for (size_t k = 0; k < n / 2; k++) CHECK(g[k] == 'r');
    mtp_free(g);
  }
  reset();
  CHECK(mtp_pool_check(pool) == 0);
  mtp_pool_destroy(pool);
  CHECK(seen.n == 0);
}

/* A live block written past at exit: the exit verification reports it (default handler: abort). */
static int exit_child(void) {
  mtp_set_error_handler(NULL, NULL);
  mtp_pool_t *pool = th_pool("dbg-exit", 250, 1);
  char *a = mtp_pool_alloc(pool, 32);
  poke(a, 32, 'x');
  exit(0);
}
static int exit_clean_child(void) {
  mtp_set_error_handler(NULL, NULL);
  mtp_pool_t *pool = th_pool("dbg-exit-clean", 250, 1);
  char *a = mtp_pool_alloc(pool, 32);
  memset(a, 1, 32);
  exit(0);
}
static void test_exit_verifies(void) {
  fflush(NULL);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) exit_child();
  int st = 0;
  CHECK(waitpid(pid, &st, 0) == pid);
  CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT);
  th_fork_check(exit_clean_child);
}

int main(void) {
  mtp_set_error_handler(record, NULL);
  RUN(test_clean_pool_checks_zero);
  RUN(test_live_overflow_and_underflow);
  RUN(test_neighbours);
  RUN(test_freed_block_cleared_and_verified);
  RUN(test_zero_size);
  RUN(test_far_pages_fault);
  RUN(test_realloc_moves);
  RUN(test_exit_verifies);
  DONE();
}
