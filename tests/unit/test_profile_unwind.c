/* Unit test of the heap profiler's unwinder (profile/profile_unwind.c): mtp__prof_backtrace gives the
 * frames glibc's backtrace() gives, frame for frame and to the same end, on stacks of every shape
 * the unwinder meets: plain calls, a frame whose CFA is rbp-based (alloca), frames of libc's
 * (qsort's callback) and of a library that dlopen loaded (libgcc_s's _Unwind_Backtrace calling
 * back), a thread's stack (clone3's end) and the main thread's (_start's), a deep stack cut at the
 * limit; and its rows are read from its table the second time. Through a signal frame, which it
 * leaves to backtrace(), the frames are still backtrace()'s. Where it has no unwinder of its own
 * (MTP_PROF_FAST_UNWIND 0) every stack is backtrace()'s and only equality is checked; without
 * backtrace() (musl) the test is skipped. */
#define _GNU_SOURCE
#include <alloca.h>
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <unwind.h>

#include "profile/profile_records.h"
#include "testhelper.h"

#define MAX MTP_PROF_UNWIND_MAX

#if defined(__clang__)
#define FRAME __attribute__((noinline))
#else
#define FRAME __attribute__((noinline, noclone))
#endif
#define KEEP_FRAME() __asm__ volatile("" ::: "memory") /* no tail call: the frame stays */

static uint64_t slow_count(void) { return mtp__u64_load_relaxed(&mtp__prof_unwind_slow); }

/* Both unwinders from one frame: from the return address into its caller (ret) on, the frames
 * must be the same. Before it, each gives this function's call site (and a sanitizer's wrapper
 * of backtrace() its own frame). fast_expected: the unwinder's own rows serve (true), or it
 * leaves the stack to backtrace() (false: a signal frame on it). */
static FRAME void compare_here(const char *what, bool fast_expected) {
  void *fast[MAX], *slow[MAX];
  void *ret = __builtin_return_address(0);
  uint64_t before = slow_count();
  int nf = mtp__prof_backtrace(fast, MAX);
  bool fell_back = slow_count() != before;
  int ns = backtrace(slow, MAX), f = 0, s = 0;
  while (f < nf && fast[f] != ret) f++;
  while (s < ns && slow[s] != ret) s++;
  EXPECT(f == 1, "%s: the caller's frame is frame %d", what, f);
  EXPECT(s < ns, "%s: backtrace() has no caller's frame", what);
  EXPECT(nf - f == ns - s, "%s: %d frames, backtrace() %d", what, nf - f, ns - s);
  EXPECT(nf - f > 2, "%s: %d frames", what, nf - f);
  for (; f < nf && s < ns; f++, s++)
    EXPECT(fast[f] == slow[s], "%s: frame %d is %p, backtrace()'s %p", what, f, fast[f], slow[s]);
  if (MTP_PROF_FAST_UNWIND)
    EXPECT(fell_back != fast_expected, "%s: %s backtrace()", what,
           fell_back ? "left to" : "not left to");
  KEEP_FRAME();
}

static FRAME void plain_3(void) {
  compare_here("plain", true);
  KEEP_FRAME();
}
static FRAME void plain_2(void) {
  plain_3();
  KEEP_FRAME();
}
static FRAME void plain_1(void) {
  plain_2();
  KEEP_FRAME();
}

/* a frame with a run-time size: its CFA is rbp-based */
static FRAME void with_alloca(size_t n) {
  volatile char *p = alloca(n);
  p[0] = 1;
  compare_here("alloca", true);
  p[n - 1] = 2;
}

static int by_libc(const void *a, const void *b) {
  static bool done;
  if (!done) {
    done = true;
    compare_here("qsort callback", true);
  }
  return *(const int *)a - *(const int *)b;
}
static FRAME void through_libc(void) {
  int v[64];
  for (int i = 0; i < 64; i++) v[i] = (i * 37) % 64;
  qsort(v, 64, sizeof v[0], by_libc);
  KEEP_FRAME();
}

static FRAME int deep(int n) {
  if (n == 0) {
    void *cut[8], *all[MAX]; /* frame 0: two call sites */
    CHECK_EQ_SZ(mtp__prof_backtrace(cut, 8), 8);
    CHECK(mtp__prof_backtrace(all, MAX) > 20);
    for (int i = 1; i < 8; i++) EXPECT(cut[i] == all[i], "deep: frame %d of the cut stack", i);
    compare_here("deep", true);
    return 0;
  }
  int r = deep(n - 1);
  KEEP_FRAME();
  return r + 1;
}

/* a callback from a library that dlopen loaded (libgcc_s: backtrace() loads it so), whose
 * frames are named through _dl_find_object */
static _Unwind_Reason_Code from_dlopened(struct _Unwind_Context *ctx, void *arg) {
  (void)ctx;
  int *calls = arg;
  if ((*calls)++ == 0) compare_here("dlopened library", true);
  return _URC_NO_REASON;
}
static FRAME void through_dlopened(void) {
  void *gcc = dlopen("libgcc_s.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (gcc == NULL) return; /* linked statically, or not loaded: nothing of dlopen's to go through */
  _Unwind_Reason_Code (*walk)(_Unwind_Trace_Fn, void *);
  *(void **)&walk = dlsym(gcc, "_Unwind_Backtrace");
  int calls = 0;
  if (walk != NULL) walk(from_dlopened, &calls);
  EXPECT(walk == NULL || calls > 0, "_Unwind_Backtrace called back");
  dlclose(gcc);
  KEEP_FRAME();
}

static void *thread_main(void *arg) {
  (void)arg;
  plain_1();
  with_alloca(3000);
  return NULL;
}

static volatile sig_atomic_t in_handler;
static void on_signal(int sig) {
  (void)sig;
  in_handler = 1;
  compare_here("signal handler", false);
}

static void test_main_thread(void) {
  plain_1();
  plain_1(); /* the second time from the table */
  with_alloca(100);
  with_alloca(5000);
  through_libc();
  through_dlopened();
  CHECK_EQ_SZ(deep(20), 20);
}

static void test_thread(void) {
  pthread_t t;
  CHECK(pthread_create(&t, NULL, thread_main, NULL) == 0);
  CHECK(pthread_join(t, NULL) == 0);
}

static void test_signal_frame(void) {
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  CHECK(sigaction(SIGUSR1, &sa, &old) == 0);
  raise(SIGUSR1);
  CHECK(in_handler == 1);
  CHECK(sigaction(SIGUSR1, &old, NULL) == 0);
}

int main(void) {
  if (!MTP_HAVE_UNWINDER) { /* musl: no backtrace() to compare with, and the profiler is off */
    printf("SKIP: no unwinder on this C library\n");
    return 77;
  }
  REQUIRE(mtp__prof_unwind_init(), "the unwinder's table");
  void *warm[4];
  (void)backtrace(warm, 4); /* libgcc_s loaded before the comparisons */
  RUN(test_main_thread);
  RUN(test_thread);
  RUN(test_signal_frame);
  DONE();
}
