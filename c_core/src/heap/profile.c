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
 * (api/alloc.c); while profiling, that slow path asks this file to drop the block's record. So a
 * small block's free costs nothing more, sampled or not; a sampled block costs a page of memory.
 *
 * The call stack: glibc's backtrace() (libgcc's unwinder, from the binaries' .eh_frame: Debian's
 * binaries keep no frame pointers, so a frame-pointer walk would stop at the first libc frame).
 * It is made safe inside malloc: its first call loads libgcc_s and allocates, so it is called once
 * at start-up, before sampling is on; a thread-local flag sends an allocation made while this
 * thread samples (none is expected) to the plain path; and with glibc 2.35 and libgcc 12 or later
 * the unwinder finds a frame's object through _dl_find_object, which takes no lock. The frames of
 * mtpool itself are dropped from the top of each stack.
 *
 * Records: stacks and live samples in two open-addressed tables mapped once (never from malloc),
 * under prof_lock, which is held across fork() (the child inherits consistent tables, its own
 * live samples included) and taken by a signal's dump only with trylock. Layer: heap. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/os.h"
#include "heap.h"

/* The unwinder is glibc's (execinfo.h). Elsewhere (musl) MTPOOL_PROFILE is ignored and
 * mtp_profile_dump fails with ENOTSUP. */
#if defined(__GLIBC__)
#include <execinfo.h>
#define PROF_UNWINDER 1
#else
#define PROF_UNWINDER 0
static int backtrace(void **buf, int n) {
  (void)buf;
  (void)n;
  return 0;
}
static void backtrace_symbols_fd(void *const *buf, int n, int fd) {
  (void)buf;
  (void)n;
  (void)fd;
}
#endif

bool mtp__prof_on;

#define MAX_DEPTH 48          /* frames kept per stack */
#define RAW_DEPTH 64          /* frames unwound, mtpool's own included */
#define STACK_SLOTS 16384     /* distinct stacks (a power of two); beyond them, one "other" entry */
#define LIVE_SLOTS (1u << 20) /* live samples (a power of two), at most LIVE_MAX of them */
#define LIVE_MAX (LIVE_SLOTS / 2)
#define DEFAULT_RATE 524288
#define LEAK_STACKS 20         /* stacks the leak list shows */
/* A refill carves a slab's fresh blocks up to this many bytes' worth, not the whole slab ahead:
 * carving writes every block's link, and so touches their pages before the program does. */
#define CARVE_BYTES 16384u

typedef struct prof_stack {
  uint64_t hash;  /* 0: slot unused */
  uint64_t live_count, live_bytes, alloc_count, alloc_bytes;
  uint64_t est_bytes; /* the leak list's estimate of live_bytes (exit only) */
  uint32_t depth;
  void *pc[MAX_DEPTH];
} prof_stack_t;

typedef struct prof_live {
  uintptr_t ptr; /* 0: empty (deletion shifts the cluster back: no tombstones) */
  uint32_t stack;
  uint64_t bytes; /* what was charged */
} prof_live_t;

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

static pthread_mutex_t prof_lock = PTHREAD_MUTEX_INITIALIZER;
static prof_stack_t *stacks;   /* STACK_SLOTS entries; the last is "other" (prof_lock) */
static prof_live_t *live;      /* LIVE_SLOTS entries (prof_lock) */
static uint32_t live_n;        /* (prof_lock) */
static uint64_t prof_rate = DEFAULT_RATE; /* written at start-up only */
static char prof_path[4096];   /* MTPOOL_PROFILE, written at start-up only */
static int prof_signal;        /* MTPOOL_PROFILE_SIGNAL's number, or 0 */
static unsigned dump_seq;      /* signal dumps so far (prof_lock) */
static volatile sig_atomic_t dump_pending; /* a signal came while the tables were busy */
static uintptr_t self_lo, self_hi; /* mtpool's code: frames in it are dropped */

static MTP_TLS uint64_t tl_rng;   /* 0: the thread has not drawn yet */
static MTP_TLS bool tl_busy;      /* this thread is sampling: allocations take the plain path */

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
  double d = neg_log(u) * (double)prof_rate;
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

/* ---- stacks ---- */

static uint64_t stack_hash(void *const *pc, uint32_t depth) {
  uint64_t h = 0xcbf29ce484222325ull ^ depth;
  for (uint32_t i = 0; i < depth; i++) h = (h ^ (uintptr_t)pc[i]) * 0x100000001b3ull;
  return h | 1; /* never 0 (an unused slot) */
}

/* prof_lock held: the slot of this stack, made if new; the "other" slot when the table is full. */
static uint32_t stack_slot(void *const *pc, uint32_t depth) {
  uint64_t h = stack_hash(pc, depth);
  uint32_t mask = STACK_SLOTS - 2; /* the last slot is kept for "other" */
  for (uint32_t i = (uint32_t)h & mask, n = 0; n < STACK_SLOTS - 1; n++, i = (i + 1) & mask) {
    prof_stack_t *s = &stacks[i];
    if (s->hash == 0) {
      s->hash = h;
      s->depth = depth;
      memcpy(s->pc, pc, depth * sizeof(void *));
      return i;
    }
    if (s->hash == h && s->depth == depth && memcmp(s->pc, pc, depth * sizeof(void *)) == 0) return i;
  }
  return STACK_SLOTS - 1;
}

/* ---- live samples (prof_lock held) ---- */

static uint32_t live_home(uintptr_t p) {
  return (uint32_t)((p >> 12) * 0x9E3779B97F4A7C15ull >> 32) & (LIVE_SLOTS - 1);
}

static prof_live_t *live_find(uintptr_t p) {
  for (uint32_t i = live_home(p);; i = (i + 1) & (LIVE_SLOTS - 1)) {
    if (live[i].ptr == p) return &live[i];
    if (live[i].ptr == 0) return NULL;
  }
}

static void live_insert(uintptr_t p, uint32_t stack, uint64_t bytes) {
  uint32_t i = live_home(p);
  while (live[i].ptr != 0) i = (i + 1) & (LIVE_SLOTS - 1);
  live[i] = (prof_live_t){p, stack, bytes};
  live_n++;
}

/* Linear probing's deletion: later entries of the cluster that may sit at or before the hole move
 * back into it, so that every entry stays reachable from its home without tombstones. */
static void live_delete(prof_live_t *e) {
  uint32_t hole = (uint32_t)(e - live);
  for (uint32_t j = (hole + 1) & (LIVE_SLOTS - 1); live[j].ptr != 0; j = (j + 1) & (LIVE_SLOTS - 1)) {
    uint32_t home = live_home(live[j].ptr);
    /* j's entry may fill the hole if its home is not cyclically in (hole, j] */
    bool stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (!stays) {
      live[hole] = live[j];
      hole = j;
    }
  }
  live[hole].ptr = 0;
  live_n--;
}

/* ---- sampling ---- */

static void dump_on_signal_pending(void);

/* The frames of the stack that called into mtpool, mtpool's own dropped from the top: those in
 * mtpool's object, or in a static link those up to and including the frame of
 * mtp__heap_alloc_slow (slow_ret: the address in it that the sampling path returns to). */
static uint32_t capture(void **out, void *slow_ret) {
  void *raw[RAW_DEPTH];
  int n = backtrace(raw, RAW_DEPTH);
  int first = 0;
  if (self_hi != 0) {
    while (first < n && (uintptr_t)raw[first] >= self_lo && (uintptr_t)raw[first] < self_hi) first++;
  } else {
    int i = 0;
    while (i < n && raw[i] != slow_ret) i++;
    first = i < n ? i + 1 : 0;
  }
  uint32_t depth = 0;
  for (int i = first; i < n && depth < MAX_DEPTH; i++) out[depth++] = raw[i];
  return depth;
}

static MTP_NOINLINE void *prof_sample(mtpi_pool_t *pool, size_t size, void *slow_ret) {
  size_t charge = size <= MTP_MAX_SMALL ? mtp__class_size[mtp__class_lookup(size)] : size;
  tl_busy = true;
  /* The sampled block: a large block of the size asked for (a sized free of that size stays
   * valid), whose free reaches mtp__prof_free. */
  void *p = mtp__large_alloc(pool, size, 0);
  if (p != NULL) {
    void *pc[MAX_DEPTH];
    uint32_t depth = capture(pc, slow_ret);
    pthread_mutex_lock(&prof_lock);
    uint32_t si = stack_slot(pc, depth);
    prof_stack_t *s = &stacks[si];
    s->alloc_count++;
    s->alloc_bytes += charge;
    if (live_n < LIVE_MAX) { /* else counted as allocated, never as live */
      s->live_count++;
      s->live_bytes += charge;
      live_insert((uintptr_t)p, si, charge);
    }
    pthread_mutex_unlock(&prof_lock);
  }
  tl_busy = false;
  if (MTP_UNLIKELY(dump_pending)) dump_on_signal_pending();
  return p;
}

MTP_NOINLINE void *mtp__prof_alloc(mtpi_pool_t *pool, size_t size, bool *done) {
  *done = false;
  prof_proxy_t *x = proxy_get();
  if (x == NULL) return NULL; /* no record: this allocation goes unsampled */
  unsigned c = size <= MTP_MAX_SMALL ? mtp__class_lookup(size) : MTP_NUM_CLASSES;
  x->left[c] -= (int64_t)(c < MTP_NUM_CLASSES ? mtp__class_size[c] : size);
  if (x->left[c] <= 0 && !tl_busy && size != 0) {
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

static bool forget_locked(void *p) {
  prof_live_t *e = live_find((uintptr_t)p);
  if (e == NULL) return false;
  prof_stack_t *s = &stacks[e->stack];
  s->live_count--;
  s->live_bytes -= e->bytes;
  live_delete(e);
  return true;
}

void mtp__prof_free(void *p) {
  pthread_mutex_lock(&prof_lock);
  (void)forget_locked(p);
  pthread_mutex_unlock(&prof_lock);
}

bool mtp__prof_holds(const void *p) {
  pthread_mutex_lock(&prof_lock);
  bool held = live_find((uintptr_t)p) != NULL;
  pthread_mutex_unlock(&prof_lock);
  return held;
}

/* ---- the writer (no malloc, no stdio: it may run at exit, after a fork, or in a handler) ---- */

typedef struct out {
  int fd;
  size_t n;
  bool failed;
  char buf[16384];
} out_t;
static out_t out_buf; /* prof_lock */

static void out_flush(out_t *o) {
  size_t done = 0;
  while (done < o->n && !o->failed) {
    ssize_t w = write(o->fd, o->buf + done, o->n - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) o->failed = true;
    else done += (size_t)w;
  }
  o->n = 0;
}

static void out_mem(out_t *o, const char *s, size_t len) {
  while (len > 0) {
    if (o->n == sizeof(o->buf)) out_flush(o);
    size_t k = sizeof(o->buf) - o->n < len ? sizeof(o->buf) - o->n : len;
    memcpy(o->buf + o->n, s, k);
    o->n += k;
    s += k;
    len -= k;
  }
}

static void out_str(out_t *o, const char *s) { out_mem(o, s, strlen(s)); }

/* v in decimal, right-aligned in width, or in hex with a 0x prefix */
static void out_num(out_t *o, uint64_t v, unsigned width, bool hex) {
  char tmp[24];
  int i = (int)sizeof tmp;
  do {
    tmp[--i] = "0123456789abcdef"[hex ? v % 16 : v % 10];
    v = hex ? v / 16 : v / 10;
  } while (v != 0);
  if (hex) {
    tmp[--i] = 'x';
    tmp[--i] = '0';
  }
  for (unsigned pad = (unsigned)(sizeof tmp) - (unsigned)i; pad < width; pad++) out_mem(o, " ", 1);
  out_mem(o, tmp + i, sizeof tmp - (size_t)i);
}

static void out_counts(out_t *o, uint64_t n1, uint64_t s1, uint64_t n2, uint64_t s2) {
  out_num(o, n1, 6, false);
  out_str(o, ": ");
  out_num(o, s1, 8, false);
  out_str(o, " [");
  out_num(o, n2, 6, false);
  out_str(o, ": ");
  out_num(o, s2, 8, false);
  out_str(o, "] @");
}

/* The path with %p replaced by the process id, and suffix (may be NULL) appended. */
static bool expand_path(char *dst, size_t size, const char *pattern, unsigned suffix) {
  size_t n = 0;
  char num[24];
  for (const char *s = pattern; *s; s++) {
    const char *add = s;
    size_t len = 1;
    if (s[0] == '%' && s[1] == 'p') {
      uint64_t v = (uint64_t)getpid();
      int i = (int)sizeof num;
      do {
        num[--i] = (char)('0' + v % 10);
        v /= 10;
      } while (v);
      add = num + i;
      len = sizeof num - (size_t)i;
      s++;
    }
    if (n + len >= size) return false;
    memcpy(dst + n, add, len);
    n += len;
  }
  if (suffix != 0) {
    uint64_t v = suffix;
    int i = (int)sizeof num;
    do {
      num[--i] = (char)('0' + v % 10);
      v /= 10;
    } while (v);
    num[--i] = '.';
    if (n + sizeof num - (size_t)i >= size) return false;
    memcpy(dst + n, num + i, sizeof num - (size_t)i);
    n += sizeof num - (size_t)i;
  }
  dst[n] = 0;
  return true;
}

/* prof_lock held: the profile in gperftools' heap format to path. 0, or -1 with errno. */
static int write_locked(const char *path) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  out_t *o = &out_buf;
  o->fd = fd;
  o->n = 0;
  o->failed = false;
  uint64_t t[4] = {0, 0, 0, 0};
  for (uint32_t i = 0; i < STACK_SLOTS; i++) {
    const prof_stack_t *s = &stacks[i];
    if (s->depth == 0) continue; /* no frames to write: pprof reads no empty stack */
    t[0] += s->live_count;
    t[1] += s->live_bytes;
    t[2] += s->alloc_count;
    t[3] += s->alloc_bytes;
  }
  out_str(o, "heap profile: ");
  out_counts(o, t[0], t[1], t[2], t[3]);
  out_str(o, " heap_v2/");
  out_num(o, prof_rate, 0, false);
  out_str(o, "\n");
  for (uint32_t i = 0; i < STACK_SLOTS; i++) {
    const prof_stack_t *s = &stacks[i];
    if (s->alloc_count == 0 || s->depth == 0) continue;
    out_counts(o, s->live_count, s->live_bytes, s->alloc_count, s->alloc_bytes);
    for (uint32_t k = 0; k < s->depth; k++) {
      out_str(o, " ");
      out_num(o, (uintptr_t)s->pc[k], 0, true);
    }
    out_str(o, "\n");
  }
  out_str(o, "\nMAPPED_LIBRARIES:\n");
  int maps = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (maps >= 0) {
    char chunk[4096];
    ssize_t r;
    while ((r = read(maps, chunk, sizeof chunk)) != 0) {
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) break;
      out_mem(o, chunk, (size_t)r);
    }
    close(maps);
  }
  out_flush(o);
  int e = o->failed ? errno : 0;
  if (close(fd) != 0 && e == 0) e = errno;
  if (e != 0) {
    errno = e;
    return -1;
  }
  return 0;
}

int mtp_profile_dump(const char *path) {
  if (!mtp__prof_on) {
    errno = ENOTSUP;
    return -1;
  }
  char name[sizeof prof_path];
  if (path == NULL) path = prof_path;
  if (!expand_path(name, sizeof name, path, 0)) {
    errno = ENAMETOOLONG;
    return -1;
  }
  int e = errno;
  pthread_mutex_lock(&prof_lock);
  int rc = write_locked(name);
  int e2 = errno;
  pthread_mutex_unlock(&prof_lock);
  errno = rc == 0 ? e : e2;
  return rc;
}

/* ---- dumps on a signal ---- */

/* Only if the tables are free now: a handler that waited for prof_lock could wait for its own
 * thread. Else the dump is left to the next sample. */
static void dump_numbered(void) {
  if (pthread_mutex_trylock(&prof_lock) != 0) {
    dump_pending = 1;
    return;
  }
  dump_pending = 0;
  char name[sizeof prof_path];
  if (expand_path(name, sizeof name, prof_path, ++dump_seq)) (void)write_locked(name);
  pthread_mutex_unlock(&prof_lock);
}

static void dump_on_signal_pending(void) {
  int e = errno;
  dump_numbered();
  errno = e;
}

static void on_signal(int sig) {
  (void)sig;
  int e = errno;
  if (!tl_busy) dump_numbered();
  else dump_pending = 1;
  errno = e;
}

/* ---- leaks with their stacks (MTPOOL_SHOW_LEAKS) ---- */

/* exp(-x) for x >= 0, without libm: 2^-k * exp(-r) with r = x - k ln 2 in [0, ln 2), the series
 * to 1e-10 */
static double exp_neg(double x) {
  if (x > 700) return 0;
  int k = (int)(x / 0.69314718055994530942);
  double r = x - k * 0.69314718055994530942, term = 1, sum = 1;
  for (int i = 1; i < 16; i++) {
    term *= -r / i;
    sum += term;
  }
  while (k-- > 0) sum *= 0.5;
  return sum;
}

/* What a stack's sampled count and bytes stand for, as pprof estimates them: each scaled by
 * 1 / (1 - exp(-average size / rate)), the inverse of an allocation's chance to be sampled. */
static void unsample(uint64_t count, uint64_t bytes, uint64_t *est_count, uint64_t *est_bytes) {
  if (count == 0) {
    *est_count = *est_bytes = 0;
    return;
  }
  double ratio = (double)bytes / (double)count / (double)prof_rate;
  double keep = ratio < 1e-4 ? ratio - ratio * ratio / 2 : 1 - exp_neg(ratio);
  double scale = keep > 0 ? 1 / keep : 1;
  *est_count = (uint64_t)((double)count * scale + 0.5);
  *est_bytes = (uint64_t)((double)bytes * scale + 0.5);
}

static void show_leaks(void) {
  const char *v = getenv("MTPOOL_SHOW_LEAKS");
  if (v == NULL || *v == 0 || strcmp(v, "0") == 0) return;
  pthread_mutex_lock(&prof_lock);
  out_t *o = &out_buf;
  o->fd = 2;
  o->n = 0;
  o->failed = false;
  uint64_t total = 0, total_n = 0;
  for (uint32_t i = 0; i < STACK_SLOTS; i++) {
    prof_stack_t *s = &stacks[i];
    uint64_t n;
    unsample(s->live_count, s->live_bytes, &n, &s->est_bytes);
    total += s->est_bytes;
    total_n += n;
  }
  out_str(o, "mtpool: leaks: sampled call stacks still holding memory at exit (about ");
  out_num(o, total, 0, false);
  out_str(o, " bytes in ");
  out_num(o, total_n, 0, false);
  out_str(o, " blocks, estimated from samples at 1 in ");
  out_num(o, prof_rate, 0, false);
  out_str(o, " bytes), largest first:\n");
  /* largest first, up to LEAK_STACKS: each round selects the largest after the previous one in
   * the order (estimated bytes down, slot up); exit only, and the tables are small */
  uint64_t prev = UINT64_MAX;
  uint32_t prev_i = 0;
  for (unsigned shown = 0; shown < LEAK_STACKS; shown++) {
    uint32_t best = UINT32_MAX;
    for (uint32_t i = 0; i < STACK_SLOTS; i++) {
      uint64_t b = stacks[i].est_bytes;
      if (stacks[i].live_count == 0 || !(b < prev || (b == prev && i > prev_i))) continue;
      if (best == UINT32_MAX || b > stacks[best].est_bytes) best = i;
    }
    if (best == UINT32_MAX) break;
    prof_stack_t *s = &stacks[best];
    prev = s->est_bytes;
    prev_i = best;
    uint64_t n, b;
    unsample(s->live_count, s->live_bytes, &n, &b);
    out_str(o, "mtpool: leaks: about ");
    out_num(o, b, 0, false);
    out_str(o, " bytes in ");
    out_num(o, n, 0, false);
    out_str(o, " blocks (");
    out_num(o, s->live_count, 0, false);
    out_str(o, " sampled) from:\n");
    out_flush(o);
    /* names from the dynamic symbols, without malloc (backtrace_symbols_fd writes straight out);
     * pprof names the rest */
    if (s->depth > 0) backtrace_symbols_fd(s->pc, (int)s->depth, 2);
    else out_str(o, "  (no stack recorded: the table of stacks was full)\n");
  }
  out_flush(o);
  pthread_mutex_unlock(&prof_lock);
}

/* ---- start-up, fork, exit ---- */

static void prof_prepare(void) { pthread_mutex_lock(&prof_lock); }
static void prof_release(void) { pthread_mutex_unlock(&prof_lock); }

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
  if (!PROF_UNWINDER || path == NULL || *path == 0 || strlen(path) >= sizeof prof_path) return;
  const char *r = getenv("MTPOOL_PROFILE_RATE");
  if (r != NULL && *r != 0) {
    char *end;
    long long v = strtoll(r, &end, 10);
    if (*end == 0 && v > 0) prof_rate = (uint64_t)v;
  }
  stacks = map_zeroed(STACK_SLOTS * sizeof(prof_stack_t));
  live = map_zeroed(LIVE_SLOTS * sizeof(prof_live_t));
  if (stacks == NULL || live == NULL) return; /* no profile: the program runs as without one */
  strcpy(prof_path, path);
  find_self();
  /* The unwinder's first call loads libgcc_s and allocates: made now, while sampling is off. */
  void *warm[4];
  (void)backtrace(warm, 4);
  (void)pthread_atfork(prof_prepare, prof_release, prof_release);
  prof_signal = parse_signal(getenv("MTPOOL_PROFILE_SIGNAL"));
  if (prof_signal != 0) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
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

/* Last of mtpool's exit work, so that the other reports run first; a child of fork() writes its
 * own file (its %p). */
__attribute__((destructor(101))) static void prof_exit(void) {
  if (!mtp__prof_on) return;
  int e = errno;
  (void)mtp_profile_dump(NULL);
  show_leaks();
  errno = e;
}
