/* The sampled heap profiler (MTPOOL_PROFILE): which call stacks hold the default pool's memory.
 *
 * Sampling. Each thread counts down the bytes it allocates from the default pool from a random
 * distance drawn from an exponential distribution of mean MTPOOL_PROFILE_RATE; the allocation
 * that takes the count below zero is sampled, and a new distance is drawn. Every byte is then the
 * start of a sample with probability 1/rate, whatever the sizes and their order (a Poisson process
 * over the bytes, as in tcmalloc and jemalloc), and an allocation of s bytes is sampled with
 * probability 1 - exp(-s/rate), which pprof divides out (heap_v2). The count charges the size
 * asked for.
 *
 * The count is the thread's default heap's prof_left (base/types.h). The fast paths (api/alloc.c)
 * subtract the size from it after their pop, two instructions, and below zero give the block to
 * mtp__prof_fast_sample, which puts it back and samples the allocation; the slow path's first
 * step (api/alloc.c) charges the allocations it serves here (mtp__prof_alloc), medium and large
 * ones included. Before the thread has a default heap its count is mtp__tl_prof_left (heap/tls.c),
 * from which the heap, once made, counts on; where nothing is sampled the count is INT64_MAX:
 * profiling off (where it costs the fast paths those two instructions, and never runs out), and
 * pools made by mtp_pool_create. A default heap found at INT64_MAX while profiling (made before
 * profiling began, or by a first allocation that was not counted) is given a distance at its
 * next slow path. Aligned allocations, which go to their class's slow path directly, are not
 * counted.
 *
 * Recognising a sampled block at free. A sampled allocation is served as a large block (its own
 * pages, pool/large.c), whose free always misses the free fast path and reaches free_not_region
 * (api/alloc.c); while profiling, that slow path asks the profiler to drop the block's record
 * (mtp__prof_origin), and a misuse report on the block (checked mode: an overflow found at its
 * free) then names its allocation site. So a small block's free costs nothing more, sampled or
 * not; a sampled block costs a page of memory.
 *
 * The call stack: the frames glibc's backtrace() would give (libgcc's unwinder, from the binaries'
 * .eh_frame: Debian's binaries keep no frame pointers, so a frame-pointer walk would stop at the
 * first libc frame), from profile_unwind.c, which keeps each return address's CFA row in a table
 * and so reads a frame in a few steps, and leaves to backtrace() what it does not handle. Both
 * are made safe inside malloc: backtrace()'s first call loads libgcc_s and allocates, so it is
 * called once at start-up, before sampling is on; a thread-local flag sends an allocation made
 * while this thread samples (none is expected) to the plain path; and with glibc 2.35 and libgcc
 * 12 or later the unwinders find a frame's object through _dl_find_object, which takes no lock.
 * The frames of mtpool itself are dropped from the top of each stack.
 *
 * Records (profile_records.c, with what writes them out): stacks and live samples in two
 * open-addressed tables mapped once (never from malloc), under mtp__prof_lock, which is held
 * across fork() (the child inherits consistent tables, its own live samples included) and taken
 * by a signal's dump only with trylock. Layer: wrap (above heap). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <link.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/os.h"
#include "profile_records.h"

static int prof_signal;        /* MTPOOL_PROFILE_SIGNAL's number, or 0 */
static uintptr_t self_lo, self_hi; /* mtpool's code: frames in it are dropped */
static MTP_TLS uint64_t tl_rng;   /* 0: the thread has not drawn yet */

/* ---- random distances ---- */

static uint64_t rng_next(void) {
  uint64_t x = tl_rng; /* xorshift64* */
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  tl_rng = x;
  return x * 0x2545F4914F6CDD1Dull;
}

/* -ln(u) for u in (0, 1], without libm: u = m * 2^e with m in [1, 2), ln m by the atanh series
 * (|s| <= 1/3: six terms give 1e-7, far below the sampling's own noise). */
static double neg_log(double u) {
  uint64_t bits;
  memcpy(&bits, &u, sizeof bits);
  int e = (int)((bits >> 52) & 0x7ff) - 1023;
  bits = (bits & 0x000fffffffffffffull) | 0x3ff0000000000000ull;
  double m;
  memcpy(&m, &bits, sizeof m);
  double s = (m - 1) / (m + 1), s2 = s * s;
  double ln_m = 2 * s * (1 + s2 * (1.0 / 3 + s2 * (1.0 / 5 + s2 * (1.0 / 7 + s2 * (1.0 / 9 + s2 / 11)))));
  return -(e * 0.69314718055994530942 + ln_m);
}

static int64_t draw_distance(void) {
  double u = (double)((rng_next() >> 11) + 1) * (1.0 / 9007199254740992.0); /* (0, 1] */
  double d = neg_log(u) * (double)mtp__prof_rate;
  return d < 1 ? 1 : d > 9.0e18 ? (int64_t)9e18 : (int64_t)d;
}

/* The calling thread's next distance, its generator seeded at its first draw. */
static int64_t first_distance(void) {
  if (tl_rng == 0) {
    uint64_t seed = (uintptr_t)&tl_rng ^ ((uint64_t)getpid() << 32) ^ mtp__os_now_ms();
    tl_rng = seed * 0x9E3779B97F4A7C15ull | 1;
  }
  return draw_distance();
}

/* ---- sampling ---- */

/* The frames of the stack that called into mtpool, mtpool's own dropped from the top: those in
 * mtpool's object, or in a static link those up to and including the frame that last_ret, a
 * return address into mtpool's code, lies in. */
static uint32_t capture(void **out, void *last_ret) {
  void *raw[MTP_PROF_UNWIND_MAX];
  int n = mtp__prof_backtrace(raw, MTP_PROF_UNWIND_MAX);
  int first = 0;
  if (self_hi != 0) {
    while (first < n && (uintptr_t)raw[first] >= self_lo && (uintptr_t)raw[first] < self_hi) first++;
  } else {
    int i = 0;
    while (i < n && raw[i] != last_ret) i++;
    first = i < n ? i + 1 : 0;
  }
  uint32_t depth = 0;
  for (int i = first; i < n && depth < MTP_PROF_MAX_DEPTH; i++) out[depth++] = raw[i];
  return depth;
}

/* The sampled allocation of size bytes: a large block of that size (a sized free of that size
 * stays valid), whose free reaches mtp__prof_origin, with its stack recorded. last_ret: for
 * capture() in a static link, the return address into the allocation slow path; NULL: this call's own
 * return address (mtp__prof_fast_sample's: the public entry above it may have jumped to it). */
static MTP_NOINLINE void *prof_sample(mtpi_pool_t *pool, size_t size, void *last_ret) {
  if (last_ret == NULL) last_ret = __builtin_return_address(0);
  mtp__tl_prof_busy = true;
  void *p = mtp__large_alloc(pool, size, 0, NULL);
  if (p != NULL) {
    void *pc[MTP_PROF_MAX_DEPTH];
    uint32_t depth = capture(pc, last_ret);
    pthread_mutex_lock(&mtp__prof_lock);
    uint32_t si = mtp__prof_stack_slot(pc, depth);
    prof_counts_t *c = &mtp__prof_stacks[si].counts[mtp__prof_shard()];
    c->alloc_count++;
    c->alloc_bytes += (int64_t)size;
    if (mtp__prof_live_insert((uintptr_t)p, si, size)) { /* else allocated, never live */
      c->live_count++;
      c->live_bytes += (int64_t)size;
    }
    pthread_mutex_unlock(&mtp__prof_lock);
  }
  mtp__tl_prof_busy = false;
  if (MTP_UNLIKELY(mtp__prof_dump_pending)) mtp__prof_dump_on_signal_pending();
  return p;
}


MTP_NOINLINE void *mtp__prof_alloc(mtpi_pool_t *pool, size_t size, bool *done) {
  *done = false;
  mtpi_heap_t *h = mtp__thread_heap(mtp__tl_thread, 0);
  /* the heap's count; before the heap is made, the thread's (the heap starts from it) */
  int64_t *left = MTP_LIKELY(h != NULL && mtp__member_pool(&h->m) == pool) ? &h->prof_left
                                                                             : &mtp__tl_prof_left;
  if (MTP_UNLIKELY(*left > INT64_MAX / 2)) *left = first_distance(); /* never drawn */
  if ((*left -= (int64_t)size) >= 0 || mtp__tl_prof_busy || size == 0)
    return NULL; /* the usual slow path */
  *left = draw_distance();
  *done = true;
  /* the return address into the slow path (api/alloc.c): mtpool's last frame in a static link */
  return prof_sample(pool, size, __builtin_return_address(0));
}

void *mtp__prof_fast_sample(mtpi_heap_t *h, mtpi_block_t *b, size_t size, bool reuse) {
  if (MTP_UNLIKELY(!mtp__prof_on || h != mtp__tl_default_heap)) { /* INT64_MAX ran out */
    h->prof_left = INT64_MAX;
    return b;
  }
  h->prof_left = draw_distance();
  if (MTP_UNLIKELY(mtp__tl_prof_busy)) return b; /* an allocation made while sampling: plain */
  void *p = prof_sample(mtp__default(), size, NULL);
  if (p == NULL) return b; /* no large block for it: the allocation goes unsampled */
  /* b goes back where the fast path took it from, as the owner's free */
  unsigned cls = mtp__class_lookup(size);
  h->m.allocs--;
  if (reuse) {
    mtp__reuse_push(h, cls, b);
  } else {
    mtpi_desc_t *s = h->current[cls];
    if (mtp__slab_push_untagged(s, b)) mtp__heap_retire_local(s);
  }
  return p;
}

/* ---- start-up, fork ---- */

static void prof_prepare(void) { pthread_mutex_lock(&mtp__prof_lock); }
static void prof_release(void) { pthread_mutex_unlock(&mtp__prof_lock); }

/* The range of the loaded object holding this code (libmtpool.so, the drop-in): frames in it are
 * mtpool's. 2: this code is in the executable (a static link): then capture() drops the frames up
 * to the slow path's alone, and a public entry that is not a tail call (mtp_calloc) may stay on
 * top of the stack. */
static int self_object(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  uintptr_t me = (uintptr_t)arg, lo, hi;
  mtp__prof_exec_range(info, &lo, &hi);
  if (me < lo || me >= hi) return 0;
  if (info->dlpi_name == NULL || info->dlpi_name[0] == 0) return 2;
  self_lo = lo;
  self_hi = hi;
  return 1;
}

static void find_self(void) {
  if (dl_iterate_phdr(self_object, (void *)(uintptr_t)&prof_sample) != 1) self_lo = self_hi = 0;
}

static int parse_signal(const char *v) {
  if (v == NULL || *v == 0) return 0;
  if (strncmp(v, "SIG", 3) == 0) v += 3;
  if (strcmp(v, "USR1") == 0) return SIGUSR1;
  if (strcmp(v, "USR2") == 0) return SIGUSR2;
  if (strcmp(v, "PROF") == 0) return SIGPROF;
  if (strcmp(v, "HUP") == 0) return SIGHUP;
  char *end;
  long n = strtol(v, &end, 10);
  return *end == 0 && n > 0 && n < NSIG ? (int)n : 0;
}

static void *map_zeroed(size_t size) {
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

__attribute__((constructor)) static void prof_start(void) {
  const char *path = getenv("MTPOOL_PROFILE");
  if (!MTP_HAVE_UNWINDER || path == NULL || *path == 0 || strlen(path) >= sizeof mtp__prof_path)
    return;
  const char *r = getenv("MTPOOL_PROFILE_RATE");
  if (r != NULL && *r != 0) {
    char *end;
    long long v = strtoll(r, &end, 10);
    if (*end == 0 && v > 0) mtp__prof_rate = (uint64_t)v;
  }
  mtp__prof_stacks = map_zeroed(MTP_PROF_STACK_SLOTS * sizeof(prof_stack_t));
  mtp__prof_live = map_zeroed(MTP_PROF_LIVE_SLOTS * sizeof(prof_live_t));
  mtp__prof_live_spare = map_zeroed(MTP_PROF_LIVE_SLOTS * sizeof(prof_live_t));
  /* no profile: the program runs as without one */
  if (mtp__prof_stacks == NULL || mtp__prof_live == NULL || mtp__prof_live_spare == NULL ||
      !mtp__prof_unwind_init())
    return;
  strcpy(mtp__prof_path, path);
  find_self();
  /* The unwinder's first call loads libgcc_s and allocates: made now, while sampling is off. */
  void *warm[4];
  (void)backtrace(warm, 4);
  (void)pthread_atfork(prof_prepare, prof_release, prof_release);
  prof_signal = parse_signal(getenv("MTPOOL_PROFILE_SIGNAL"));
  if (prof_signal != 0) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = mtp__prof_on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    (void)sigaction(prof_signal, &sa, NULL);
  }
  mtp__prof_on = true;
  /* This thread may have allocated already: its heap, made while profiling was off, counts from
   * now on. Threads made later are made profiling. */
  mtpi_heap_t *h = mtp__thread_heap(mtp__tl_thread, 0);
  if (h != NULL) h->prof_left = first_distance();
}
