/*
 * The one test harness of mtpool's C tests (and the parts C++ tests share): checks, sanitizer
 * detection, memory readers (RSS, VmSize), a seeded random generator, per-block content patterns,
 * time, and a sub-process runner for death tests. Header-only (static functions); a test that
 * needs the sub-process runner defines _GNU_SOURCE before any include. tests/ is on every test's
 * include path: #include "testhelper.h".
 *
 * Two kinds of check:
 *   CHECK(cond), CHECK_EQ_SZ(a, b)   stop the test at the first failure (exit 1), with file:line;
 *   EXPECT(cond, fmt, ...)           print the failure and go on (counted in th_failures);
 *   REQUIRE(cond, fmt, ...)          print and abort: shared state is known broken.
 * RUN(fn) runs one test function; DONE() ends main: exit status 1 if any EXPECT failed.
 * A test that cannot run in this build prints a SKIP line and returns TH_SKIP (ctest
 * SKIP_RETURN_CODE 77).
 */
#ifndef MTP_TESTHELPER_H
#define MTP_TESTHELPER_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mtpool/mtpool.h"

#define TH_SKIP 77

/* ---- which sanitizer this translation unit (and so the whole build) is compiled with ---------- */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TH_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define TH_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(TH_ASAN)
#define TH_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__) && !defined(TH_TSAN)
#define TH_TSAN 1
#endif
#ifndef TH_ASAN
#define TH_ASAN 0
#endif
#ifndef TH_TSAN
#define TH_TSAN 0
#endif
/* Under a sanitizer RSS includes shadow memory and quarantines, and RLIMIT_AS breaks the runtime's
 * own reservations: memory-size checks are skipped there. */
#define TH_SANITIZED (TH_ASAN || TH_TSAN)

/* ---- checks ---------------------------------------------------------------------------------- */
/* Tests check from many threads: the counters are updated atomically. */
static int th_checks __attribute__((unused));
static int th_failures __attribute__((unused));
#define TH_COUNT_(var) __atomic_fetch_add(&(var), 1, __ATOMIC_RELAXED)

#define CHECK(cond)                                                            \
  do {                                                                         \
    TH_COUNT_(th_checks);                                                      \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

#define CHECK_EQ_SZ(a, b)                                                                    \
  do {                                                                                       \
    TH_COUNT_(th_checks);                                                                    \
    size_t a_ = (size_t)(a), b_ = (size_t)(b);                                               \
    if (a_ != b_) {                                                                          \
      fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%zu != %zu)\n", __FILE__, __LINE__, #a, \
              #b, a_, b_);                                                                   \
      exit(1);                                                                               \
    }                                                                                        \
  } while (0)

#define EXPECT(cond, ...)                                             \
  do {                                                                \
    TH_COUNT_(th_checks);                                             \
    if (!(cond)) {                                                    \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                   \
      fputc('\n', stderr);                                            \
      TH_COUNT_(th_failures);                                         \
    }                                                                 \
  } while (0)

#define REQUIRE(cond, ...)                                             \
  do {                                                                 \
    if (!(cond)) {                                                     \
      fprintf(stderr, "FATAL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                    \
      fputc('\n', stderr);                                             \
      fflush(stderr);                                                  \
      abort();                                                         \
    }                                                                  \
  } while (0)

#define RUN(test)                              \
  do {                                         \
    fprintf(stderr, "[ RUN  ] %s\n", #test);   \
    test();                                    \
    fprintf(stderr, "[  OK  ] %s\n", #test);   \
  } while (0)

#define DONE()                                                                              \
  do {                                                                                      \
    int f_ = __atomic_load_n(&th_failures, __ATOMIC_RELAXED);                               \
    fprintf(stderr, "%s (%d checks, %d failed)\n", f_ ? "FAILED" : "all passed",            \
            __atomic_load_n(&th_checks, __ATOMIC_RELAXED), f_);                             \
    return f_ ? 1 : 0;                                                                      \
  } while (0)

/* A pool for a test: named, with the given purge delay and checked mode; aborts if it cannot be
 * made. th_stats: a pool's statistics (NULL: the default pool's), checked to succeed. */
static inline mtp_pool_t *th_pool(const char *name, long purge_delay_ms, int check) {
  mtp_options_t o;
  mtp_options_init(&o);
  o.name = name;
  o.purge_delay_ms = purge_delay_ms;
  o.check = check;
  mtp_pool_t *p = mtp_pool_create(&o);
  REQUIRE(p != NULL, "pool_create");
  return p;
}
static inline mtp_stats_t th_stats(mtp_pool_t *p) {
  mtp_stats_t st;
  CHECK(mtp_pool_stats(p, &st) == 0);
  return st;
}

/* An index or pointer the compiler cannot see through: for planted out-of-bounds accesses, which
 * the compiler would otherwise warn about (-Warray-bounds) or fold away, and which UBSan's
 * object-size check would catch before the allocator's own defences (canaries, poisoning). */
static inline size_t th_opaque(size_t v) {
  volatile size_t x = v;
  return x;
}
static inline char *th_opaque_ptr(void *p) {
  void *volatile x = p;
  return (char *)x;
}

/* ---- memory of this process ------------------------------------------------------------------ */
/* The user-mode emulator cross-built tests run under (MTP_TEST_EMULATOR, see mtp_test_exec_self),
 * or NULL natively. */
static inline const char *th_emulator(void) {
  const char *emu = getenv("MTP_TEST_EMULATOR");
  return emu != NULL && *emu != 0 ? emu : NULL;
}
/* Slack for a bar on th_rss under an emulator: the RSS is the emulator's, whose translated code
 * grows as the test runs (a trim on aarch64 under qemu-user left 8,196 KiB above the base with
 * 768 KiB reserved). 0 natively. */
static inline size_t th_rss_slack(void) { return th_emulator() != NULL ? (size_t)16 << 20 : 0; }
/* Resident set size in bytes (from /proc/self/statm; 0 if unreadable). */
static inline size_t th_rss(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long size = 0, res = 0;
  if (fscanf(f, "%lu %lu", &size, &res) != 2) res = 0;
  fclose(f);
  return (size_t)res * (size_t)sysconf(_SC_PAGESIZE);
}

/* Resident bytes of [p, p + n) (p page-aligned), from mincore. */
static inline size_t th_resident(void *p, size_t n) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE), k = (n + page - 1) / page, r = 0;
  unsigned char *v = (unsigned char *)malloc(k);
  REQUIRE(v != NULL, "malloc");
  REQUIRE(mincore(p, n, v) == 0, "mincore");
  for (size_t i = 0; i < k; i++) r += v[i] & 1;
  free(v);
  return r * page;
}
/* Resident bytes of the OS pages that lie wholly in [p, p + n) (p any address). */
static inline size_t th_resident_inside(void *p, size_t n) {
  uintptr_t os = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t a = ((uintptr_t)p + os - 1) / os * os, b = ((uintptr_t)p + n) / os * os;
  return b > a ? th_resident((void *)a, b - a) : 0;
}

/* A "Name: <n> kB" field of /proc/self/status (VmSize, VmRSS, ...), in kB; -1 if absent. */
static inline long th_status_kb(const char *field) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  size_t n = strlen(field);
  long kb = -1;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, field, n) == 0 && line[n] == ':') {
      kb = strtol(line + n + 1, NULL, 10);
      break;
    }
  fclose(f);
  return kb;
}

/* ---- time ------------------------------------------------------------------------------------ */
static inline double th_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- deterministic generator (splitmix64 seeding an xorshift64*) ----------------------------- */
typedef struct th_rng {
  uint64_t s;
} th_rng_t;

static inline uint64_t th_mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static inline void th_rng_seed(th_rng_t *r, uint64_t a, uint64_t b, uint64_t c) {
  r->s = th_mix64(a ^ th_mix64(b ^ th_mix64(c)));
  if (r->s == 0) r->s = 1;
}

static inline uint64_t th_next(th_rng_t *r) {
  uint64_t x = r->s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  r->s = x;
  return x * 0x2545F4914F6CDD1Dull;
}

/* Uniform in [0, n), n > 0. */
static inline uint64_t th_below(th_rng_t *r, uint64_t n) { return th_next(r) % n; }

/* ---- per-block content patterns ------------------------------------------------------------- */
/* The byte at offset i of a block tagged `tag`: depends on both, so a block written through a stale
 * pointer, swapped with another or handed out twice shows up as a mismatch. */
static inline unsigned char th_pat_byte(uint64_t tag, size_t i) {
  uint64_t v = tag * 0x9E3779B97F4A7C15ull + (uint64_t)(i >> 3) * 0xD6E8FEB86659FD93ull;
  return (unsigned char)(v >> (8 * (i & 7)));
}

static inline void th_fill(void *p, size_t n, uint64_t tag) {
  unsigned char *b = (unsigned char *)p;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = tag * 0x9E3779B97F4A7C15ull + (uint64_t)(i >> 3) * 0xD6E8FEB86659FD93ull;
    memcpy(b + i, &v, 8); /* little and big endian differ only in which byte goes where */
  }
  for (; i < n; i++) b[i] = th_pat_byte(tag, i);
}

/* Returns the first offset that differs, or (size_t)-1 if the block is intact. */
static inline size_t th_verify(const void *p, size_t n, uint64_t tag) {
  const unsigned char *b = (const unsigned char *)p;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = tag * 0x9E3779B97F4A7C15ull + (uint64_t)(i >> 3) * 0xD6E8FEB86659FD93ull, w;
    memcpy(&w, b + i, 8);
    if (v != w) {
      for (size_t j = i; j < i + 8; j++)
        if (b[j] != th_pat_byte(tag, j)) return j;
    }
  }
  for (; i < n; i++)
    if (b[i] != th_pat_byte(tag, i)) return i;
  return (size_t)-1;
}

/* th_fill stores words with memcpy; make th_pat_byte agree on either byte order. */
static inline int th_pattern_selftest(void) {
  unsigned char buf[37];
  th_fill(buf, sizeof buf, 12345);
  return th_verify(buf, sizeof buf, 12345) == (size_t)-1;
}

/* ---- sub-processes --------------------------------------------------------------------------- */
typedef struct th_proc {
  int status;   /* from waitpid */
  char *out;    /* child's stdout, NUL-terminated (malloc) */
  char *err;    /* child's stderr, NUL-terminated (malloc) */
  double secs;  /* wall time */
} th_proc_t;

static inline char *th_slurp_fd(int fd) {
  size_t cap = 4096, len = 0;
  char *buf = (char *)malloc(cap);
  if (!buf) return NULL;
  lseek(fd, 0, SEEK_SET);
  for (;;) {
    if (len + 1024 > cap) {
      cap *= 2;
      char *nb = (char *)realloc(buf, cap);
      if (!nb) break;
      buf = nb;
    }
    ssize_t n = read(fd, buf + len, cap - len - 1);
    if (n <= 0) break;
    len += (size_t)n;
  }
  buf[len] = 0;
  return buf;
}

/* Run child() in a forked process and check that it exited with status 0 (a signal or another
 * status fails the test, with the reason on stderr): for tests whose subject may crash. */
static inline void th_fork_check(int (*child)(void)) {
  fflush(NULL);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) _exit(child());
  int st = 0;
  CHECK(waitpid(pid, &st, 0) == pid);
  if (WIFSIGNALED(st)) fprintf(stderr, "child killed by signal %d\n", WTERMSIG(st));
  CHECK(WIFEXITED(st));
  CHECK_EQ_SZ(WEXITSTATUS(st), 0);
}

static inline int th_tmpfile(void) {
  char path[] = "/tmp/mtp_test_XXXXXX";
  int fd = mkstemp(path);
  if (fd >= 0) unlink(path);
  return fd;
}

/* Run this test binary again (environment read at start, death tests). Cross-built tests run
 * under a user-mode emulator (qemu-user without binfmt_misc) cannot exec their own binary directly:
 * the kernel does not know its format. MTP_TEST_EMULATOR, e.g. "/usr/bin/qemu-aarch64 -L
 * /usr/aarch64-linux-gnu" (the aarch64 toolchain file sets it for ctest), is then put in front;
 * its words are split at spaces. argv is NULL-terminated, argv[0] included; returns only on
 * failure (errno set). */
static inline void mtp_test_exec_self(char *const argv[]) {
  const char *emu = th_emulator();
  if (emu == NULL) {
    execv("/proc/self/exe", argv);
    return;
  }
  static char words[1024], self[4096];
  char *args[64];
  int n = 0;
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0 || strlen(emu) >= sizeof words) return;
  self[len] = 0;
  strcpy(words, emu);
  for (char *w = strtok(words, " "); w != NULL && n < 32; w = strtok(NULL, " ")) args[n++] = w;
  args[n++] = self;
  for (int i = 1; argv[0] != NULL && argv[i] != NULL && n < 63; i++) args[n++] = argv[i];
  args[n] = NULL;
  execvp(args[0], args);
}

/* Run this test binary again (/proc/self/exe) with argv, env entries ("NAME=value", or "NAME" to
 * remove it) applied, a time limit in seconds, capturing stdout and stderr. Returns 0, -1 on error. */
static inline int th_run_self(char *const argv[], const char *const env[], unsigned limit_s,
                              th_proc_t *res) {
  memset(res, 0, sizeof *res);
  int ofd = th_tmpfile(), efd = th_tmpfile();
  if (ofd < 0 || efd < 0) return -1;
  fflush(NULL);
  double t0 = th_now();
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    dup2(ofd, 1);
    dup2(efd, 2);
    for (int i = 0; env && env[i]; i++) {
      const char *eq = strchr(env[i], '=');
      if (eq) {
        char name[128];
        size_t n = (size_t)(eq - env[i]);
        if (n >= sizeof name) n = sizeof name - 1;
        memcpy(name, env[i], n);
        name[n] = 0;
        setenv(name, eq + 1, 1);
      } else {
        unsetenv(env[i]);
      }
    }
    if (limit_s) alarm(limit_s);
    mtp_test_exec_self(argv);
    _exit(127);
  }
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  res->secs = th_now() - t0;
  res->status = st;
  res->out = th_slurp_fd(ofd);
  res->err = th_slurp_fd(efd);
  close(ofd);
  close(efd);
  return 0;
}

static inline void th_proc_free(th_proc_t *r) {
  free(r->out);
  free(r->err);
  r->out = r->err = NULL;
}

/* "exit 0", "signal 6 (SIGABRT)", ... into buf. */
static inline const char *th_status_str(int st, char *buf, size_t n) {
  if (WIFEXITED(st))
    snprintf(buf, n, "exit %d", WEXITSTATUS(st));
  else if (WIFSIGNALED(st))
    snprintf(buf, n, "signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
  else
    snprintf(buf, n, "status 0x%x", st);
  return buf;
}

/* Case-insensitive substring search. */
static inline const char *th_strcasestr(const char *hay, const char *needle) {
  size_t n = strlen(needle);
  for (; hay && *hay; hay++) {
    size_t i = 0;
    while (i < n && hay[i] &&
           (hay[i] | 0x20) == (needle[i] | 0x20) /* ASCII letters; other bytes compare as-is */)
      i++;
    if (i == n) return hay;
  }
  return NULL;
}

/* Whether text contains the hexadecimal number value (as 0x..., any case, any zero padding). */
static inline int th_text_has_pointer(const char *text, uintptr_t value) {
  for (const char *s = text; s && (s = strstr(s, "0x")) != NULL; s += 2) {
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 16);
    if (errno == 0 && end != s && (uintptr_t)v == value) return 1;
  }
  /* also a bare hex number of at least 8 digits */
  for (const char *s = text; s && *s; s++) {
    if ((s == text || !((s[-1] >= '0' && s[-1] <= '9') || ((s[-1] | 0x20) >= 'a' && (s[-1] | 0x20) <= 'f') ||
                        s[-1] == 'x' || s[-1] == 'X'))) {
      char *end = NULL;
      errno = 0;
      unsigned long long v = strtoull(s, &end, 16);
      if (errno == 0 && end - s >= 8 && (uintptr_t)v == value) return 1;
    }
  }
  return 0;
}

#endif /* MTP_TESTHELPER_H */
