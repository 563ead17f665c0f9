/* The sampled heap profiler (MTPOOL_PROFILE): which call stacks hold the default pool's memory.
 *
 * Sampling. Each thread counts down the bytes it allocates from a random distance drawn from an
 * exponential distribution of mean MTPOOL_PROFILE_RATE; the allocation that takes the count to zero
 * or below is sampled, and a new distance is drawn. Every byte is then the start of a sample with
 * probability 1/rate, whatever the sizes and their order (a Poisson process over the bytes, as in
 * tcmalloc and jemalloc), and an allocation of s bytes is sampled with probability
 * 1 - exp(-s/rate), which pprof divides out (heap_v2). The count charges what the allocation
 * takes: its size class's block size (a small block), or the size asked for.
 *
 * How the allocations reach the count without a fast-path instruction: while profiling, a thread's
 * default heap pointer (mtp__tl_default_heap) points to a stand-in heap of its own (prof_proxy_t),
 * whose current slab of each class is a stand-in descriptor holding a bounded list of blocks
 * taken from the thread's real heap: as many as the class's count allows before its next sample.
 * The fast path pops them unchanged; when a list runs out, the allocation misses into
 * mtp__heap_alloc_slow (thread.c), which comes here: the allocation is charged (the one that
 * takes the count to zero is sampled), served from the real heap, and the list refilled. So every
 * allocation is counted, about one in a batch takes the slow path, and the counts are exact. Each
 * class counts on its own, from its own random distance: the classes' sampling points together
 * still fall on every byte with probability 1/rate (independent Poisson processes add up to one),
 * and a batch never outruns its own class's count. Medium and large allocations, which always
 * take the slow path, share one more count. With profiling off nothing changes: the fast paths
 * are the same code, and the slow path tests one flag. Pools made by mtp_pool_create are not
 * sampled.
 *
 * The blocks a stand-in list holds are the real heap's, counted as used by their slabs, as a reuse
 * list's are (heap/reuse.c). They come from the class's reuse list or its current slab's free list,
 * both owned by the thread; they go back (mtp__reuse_return, as the owner's frees) at thread exit
 * or flush and before an aligned allocation of their class. Invariant: while class c's list is not
 * empty, the thread runs no slow path of class c (its allocations are served from the list, an
 * aligned one drains it first), so the slabs its blocks lie in stay owned by the thread until they
 * go back. Statistics and the heap walk count them as in use meanwhile (at most a slab's free
 * blocks per class and thread).
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
 * by a signal's dump only with trylock. Layer: heap. */
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

/* A refill carves a slab's fresh blocks up to this many bytes' worth, not the whole slab ahead:
 * carving writes every block's link, and so touches their pages before the program does. */
#define CARVE_BYTES 16384u

/* A thread's stand-in heap (the top of the file): the thread's own, made at its first slow path
 * while profiling, given back at its exit or flush. */
typedef struct prof_proxy {
  mtpi_heap_t heap;                   /* the fast path's view: current[c] = &stand[c]; no reuse list */
  mtpi_desc_t stand[MTP_NUM_CLASSES]; /* free: blocks of the real heap; used: popped since refill */
  uint32_t held[MTP_NUM_CLASSES];     /* blocks put on stand[c] at its last refill */
  int64_t left[MTP_NUM_CLASSES + 1];  /* bytes until the next sample of each class; the last: medium
                                         and large blocks */
} prof_proxy_t;
static MTP_TLS prof_proxy_t *tl_proxy;

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

/* ---- the stand-in heap ---- */

static prof_proxy_t *proxy_get(void) {
  prof_proxy_t *x = tl_proxy;
  if (MTP_LIKELY(x != NULL)) return x;
  if (tl_rng == 0) {
    uint64_t seed = (uintptr_t)&tl_rng ^ ((uint64_t)getpid() << 32) ^ mtp__os_now_ms();
    tl_rng = seed * 0x9E3779B97F4A7C15ull | 1;
  }
  x = mtp__meta_alloc(sizeof(*x)); /* zeroed */
  if (x == NULL) return NULL;
  for (unsigned c = 0; c < MTP_NUM_CLASSES; c++) {
    x->stand[c].block_size = mtp__class_size[c];
    x->stand[c].cls = (uint16_t)c;
    x->heap.current[c] = &x->stand[c];
    x->left[c] = draw_distance();
  }
  x->left[MTP_NUM_CLASSES] = draw_distance();
  tl_proxy = x;
  return x;
}

/* Class c's list back to the real heap h (its blocks as the owner's frees), the bytes it had
 * charged and not handed out refunded to the class's count. */
static void stand_drain(prof_proxy_t *x, mtpi_heap_t *h, unsigned c) {
  mtpi_desc_t *st = &x->stand[c];
  if (st->free == NULL) return;
  x->left[c] += (int64_t)(x->held[c] - st->used) * mtp__class_size[c];
  mtpi_block_t *list = st->free;
  st->free = NULL;
  mtp__reuse_return(h, list, false);
}

/* Up to n blocks off the front of list *head of len blocks (len >= 1): the whole list in one step
 * when it fits, else a walk of n links. */
static mtpi_block_t *cut(mtpi_block_t **head, uint32_t len, uint32_t n, uint32_t *got) {
  mtpi_block_t *first = *head;
  if (len <= n) {
    *head = NULL;
    *got = len;
    return first;
  }
  mtpi_block_t *last = first;
  for (uint32_t k = 1; k < n; k++) last = mtp__block_next(last);
  *head = mtp__block_next(last);
  mtp__block_set_next(last, NULL);
  *got = n;
  return first;
}

/* Class c's list is empty: refill it from h's reuse list of c, else its current slab's free list,
 * with as many blocks as c's count allows before its next sample (the allocation that reaches it
 * comes to the slow path). */
static void stand_refill(prof_proxy_t *x, mtpi_heap_t *h, unsigned c) {
  uint32_t size = mtp__class_size[c];
  if (x->left[c] <= (int64_t)size) return;
  int64_t room = (x->left[c] - 1) / size;
  uint32_t n = room > (1 << 20) ? 1u << 20 : (uint32_t)room, got = 0;
  mtpi_desc_t *st = &x->stand[c];
  if (h->reuse[c] != NULL) {
    st->free = cut(&h->reuse[c], h->reuse_n[c], n, &got);
    h->reuse_n[c] = (uint8_t)(h->reuse_n[c] - got);
  } else {
    mtpi_desc_t *s = h->current[c];
    if (s == &mtp__slab_empty) return;
    /* The free list's length, from the owned slab's identity (types.h). A short one is carved
     * further first: a thread whose blocks other threads free finds only the last page's carving
     * there, and a list refilled one page at a time would send it to the slow path every few
     * allocations. */
    uint32_t len, want = n < CARVE_BYTES / size ? n : CARVE_BYTES / size;
    for (;;) {
      uint32_t rest = (uint32_t)((size_t)(s->end - mtp__slab_bump_owner(s)) / s->block_size);
      len = s->capacity - MTP_USED(s) - rest;
      if (len >= want || rest == 0 || !mtp__slab_extend(s)) break;
    }
    if (len == 0) return;
    st->free = cut(&s->free, len, n, &got);
    s->used += got;
  }
  st->used = 0;
  x->held[c] = got;
  x->left[c] -= (int64_t)got * size;
  /* the fast path counted its pops on the stand-in heap: the real heap's statistics get them */
  h->m.allocs += x->heap.m.allocs;
  x->heap.m.allocs = 0;
}

void mtp__prof_drain_class(unsigned c) {
  prof_proxy_t *x = tl_proxy;
  mtpi_heap_t *h = mtp__thread_heap(mtp__tl_thread, 0);
  if (x != NULL && h != NULL) stand_drain(x, h, c);
}

void mtp__prof_thread_done(void) {
  prof_proxy_t *x = tl_proxy;
  if (x == NULL) return;
  mtpi_heap_t *h = mtp__thread_heap(mtp__tl_thread, 0);
  if (mtp__tl_default_heap == &x->heap) mtp__tl_default_heap = &mtp__heap_empty;
  tl_proxy = NULL;
  if (h != NULL) {
    for (unsigned c = 0; c < MTP_NUM_CLASSES; c++) stand_drain(x, h, c);
    h->m.allocs += x->heap.m.allocs;
  }
  mtp__meta_free(x, sizeof(*x));
}

/* ---- sampling ---- */

/* The frames of the stack that called into mtpool, mtpool's own dropped from the top: those in
 * mtpool's object, or in a static link those up to and including the frame of
 * mtp__heap_alloc_slow (slow_ret: the address in it that the sampling path returns to). */
static uint32_t capture(void **out, void *slow_ret) {
  void *raw[MTP_PROF_UNWIND_MAX];
  int n = mtp__prof_backtrace(raw, MTP_PROF_UNWIND_MAX);
  int first = 0;
  if (self_hi != 0) {
    while (first < n && (uintptr_t)raw[first] >= self_lo && (uintptr_t)raw[first] < self_hi) first++;
  } else {
    int i = 0;
    while (i < n && raw[i] != slow_ret) i++;
    first = i < n ? i + 1 : 0;
  }
  uint32_t depth = 0;
  for (int i = first; i < n && depth < MTP_PROF_MAX_DEPTH; i++) out[depth++] = raw[i];
  return depth;
}

static MTP_NOINLINE void *prof_sample(mtpi_pool_t *pool, size_t size, void *slow_ret) {
  size_t charge = size <= MTP_MAX_SMALL ? mtp__class_size[mtp__class_lookup(size)] : size;
  mtp__tl_prof_busy = true;
  /* The sampled block: a large block of the size asked for (a sized free of that size stays
   * valid), whose free reaches mtp__prof_origin. */
  void *p = mtp__large_alloc(pool, size, 0, NULL);
  if (p != NULL) {
    void *pc[MTP_PROF_MAX_DEPTH];
    uint32_t depth = capture(pc, slow_ret);
    pthread_mutex_lock(&mtp__prof_lock);
    uint32_t si = mtp__prof_stack_slot(pc, depth);
    prof_stack_t *s = &mtp__prof_stacks[si];
    s->alloc_count++;
    s->alloc_bytes += charge;
    if (mtp__prof_live_n < MTP_PROF_LIVE_MAX) { /* else counted as allocated, never as live */
      s->live_count++;
      s->live_bytes += charge;
      mtp__prof_live_insert((uintptr_t)p, si, charge);
    }
    pthread_mutex_unlock(&mtp__prof_lock);
  }
  mtp__tl_prof_busy = false;
  if (MTP_UNLIKELY(mtp__prof_dump_pending)) mtp__prof_dump_on_signal_pending();
  return p;
}

MTP_NOINLINE void *mtp__prof_alloc(mtpi_pool_t *pool, size_t size, bool *done) {
  *done = false;
  prof_proxy_t *x = proxy_get();
  if (x == NULL) return NULL; /* no record: this allocation goes unsampled */
  unsigned c = size <= MTP_MAX_SMALL ? mtp__class_lookup(size) : MTP_NUM_CLASSES;
  x->left[c] -= (int64_t)(c < MTP_NUM_CLASSES ? mtp__class_size[c] : size);
  if (x->left[c] <= 0 && !mtp__tl_prof_busy && size != 0) {
    x->left[c] = draw_distance();
    *done = true;
    /* the return address into mtp__heap_alloc_slow: the last frame of mtpool's in a static link */
    return prof_sample(pool, size, __builtin_return_address(0));
  }
  mtpi_heap_t *h = mtp__thread_heap(mtp__tl_thread, 0);
  if (c == MTP_NUM_CLASSES || pool->check || h == NULL || mtp__member_pool(&h->m) != pool ||
      MTP_UNLIKELY(mtp__tl_exited))
    return NULL; /* the usual slow path (which makes the heap at the thread's first call) */
  mtpi_block_t *b;
  if (x->stand[c].free != NULL) { /* not a fast-path miss (calloc, realloc): the list serves */
    b = mtp__slab_pop(&x->stand[c]);
    x->heap.m.allocs++;
    *done = true;
    return b;
  }
  /* the list is empty: what the fast path would have taken, then the list refilled */
  if (h->reuse[c] != NULL) {
    b = mtp__reuse_pop(h, c);
  } else {
    b = mtp__slab_pop(h->current[c]);
    if (b == NULL) return NULL; /* the usual slow path refills the slab; the next call the list */
    h->m.allocs++;
  }
  if (x->stand[c].free == NULL) stand_refill(x, h, c);
  mtp__tl_default_heap = &x->heap;
  *done = true;
  return b;
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
  uintptr_t me = (uintptr_t)arg, lo = UINTPTR_MAX, hi = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
    uintptr_t a = info->dlpi_addr + ph->p_vaddr;
    if (a < lo) lo = a;
    if (a + ph->p_memsz > hi) hi = a + ph->p_memsz;
  }
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
  /* no profile: the program runs as without one */
  if (mtp__prof_stacks == NULL || mtp__prof_live == NULL || !mtp__prof_unwind_init()) return;
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
  /* This thread may have allocated already (its heap is bound): its next allocation goes to the
   * slow path, which puts its stand-in heap in place. Threads made later never bind their real
   * heap there (thread.c). */
  mtp__tl_default_heap = &mtp__heap_empty;
}
