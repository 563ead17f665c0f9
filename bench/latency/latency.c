/* Hand-off, thread-churn and server workloads, one per process, through plain malloc and free:
 * the driver of scripts/bench_latency.sh (how long single calls take) and scripts/bench_stress.sh
 * (how much memory a schedule can make an allocator hold).
 *
 *   latency --test NAME [--threads N] [--scale X] [--timing on|off] [--alloc LABEL] [--load LABEL]
 *   latency --list
 *   latency --spin SECONDS   a CPU hog: a busy loop that ends by itself after SECONDS (the scripts
 *                            start one per CPU and stop each by its PID well before that)
 *
 * Workloads, at scale 1 (N: --threads; 0 or absent, the workload's default from the CPUs online):
 *   churn        thread churn: 2,000 threads one after another, at most N alive at once (default 4
 *                per CPU), each doing 400 "free a random one of 32 slots, allocate 16 B-4 KiB
 *                there" (1 in 20 of 4-64 KiB), then freeing the rest and exiting
 *   prodcons     hand-off through queues: N producers and N consumers (default 2 per CPU each);
 *                each producer writes 100,000 blocks of 8 B-4 KiB (1 in 64 of 16-64 KiB) and
 *                passes them in batches of 16, round robin, through bounded queues (256 batches
 *                deep, one per consumer) to the consumers, which check and free them
 *   thread_task  thread per task: the main thread starts 3,000 detached threads in a tight loop;
 *                each allocates 200 blocks of 1 B-3 KiB (1 in 50 of 32-48 KiB), writes them,
 *                publishes them, leaves a 64-byte block in a pthread key whose destructor frees it
 *                and allocates and frees once more, and exits; 2 long-lived threads free each
 *                task's blocks in task order, polling (10 us sleeps) until the task published them
 *                (N is not used: as many threads live as the schedule lets)
 *   server       a pool of N workers (default 4 per CPU) serving 60,000 requests: each request
 *                allocates a working set of 7-63 blocks of 16 B-128 KiB (mostly under 512 B) and
 *                one of 64 B-16 KiB, writes and checks them, frees the working set and puts the
 *                other block into a shared cache of 16,384 slots (the block it replaces there,
 *                mostly another worker's, is freed), and hands a response block (256 B-64 KiB)
 *                to another worker, which frees it at its next request (to the first, from a
 *                random one on, with fewer than 32 waiting; with none, it frees it itself)
 *
 * --timing on (the default) reads CLOCK_MONOTONIC before and after every malloc and free of the
 * workload and adds the difference to the calling thread's histograms, one per kind of call:
 * malloc, free (of a block the same thread allocated) and free_remote (of a block another thread
 * allocated). Nothing is subtracted: each figure includes one clock read, whose own cost this
 * program measures first (200,000 back-to-back pairs, "clock" in the output). Histograms are
 * per thread, written by that thread only (no lock, no atomic) and merged by the main thread at
 * the end; buckets are exact below 16 ns and 8 per power of two above (a bucket spans 1/8 of its
 * lower edge), and each bucket is reported by its highest value, so a percentile read from them
 * is at most 12.5% above the true one; the largest value of each kind is kept exactly.
 * --timing off reads no clock (the stress runs: nothing but the workload between the calls).
 *
 * Both modes count the bytes the workload holds (requested sizes, an atomic counter updated after
 * each malloc and before each free) and keep the most it held at once ("live_max_bytes"), and
 * read the peak resident set (VmHWM) at the end. The driver's own tables (task table, queues,
 * histograms, cache) come from mmap, not from the malloc under test, and are included in VmHWM,
 * the same for every allocator. Every block carries a value drawn from a generator seeded by its
 * task, request or thread; a block is checked when it is freed and its value added to a checksum
 * that depends only on the work, never on the allocator or on thread timing.
 *
 * Prints one JSON line. Exit 0 on success, 1 when memory runs out, a block's contents changed or
 * a wait ran past its bound (120 s), 2 on bad usage.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "../tools/malloc_name.h"
#include "../tools/rng.h"

static double g_scale = 1.0;
static int g_threads;       /* --threads; 0: the workload's default */
static int g_timing = 1;    /* --timing on|off */
static long g_cpus = 1;
static const long WAIT_LIMIT_NS = 120L * 1000000000L; /* every wait in this program ends by then */

static void die(const char *what) {
  fprintf(stderr, "latency: %s\n", what);
  exit(1);
}

static long scaled(double base) {
  double v = base * g_scale;
  return v < 1 ? 1 : (long)v;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(long ns) {
  struct timespec ts = {0, ns};
  nanosleep(&ts, NULL);
}

/* The driver's own memory: zeroed pages from the kernel, never from the malloc under test. */
static void *xmap(size_t n) {
  void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) die("mmap failed");
  return p;
}

/* ---- histograms ------------------------------------------------------------------------------ */
#define LAT_EXACT 16                         /* values below: one bucket each */
#define LAT_SUB 8                            /* buckets per power of two above */
#define LAT_TOP 39                           /* highest power of two with buckets (~550 s) */
#define LAT_NB (LAT_EXACT + (LAT_TOP - 3) * LAT_SUB)
enum { K_MALLOC, K_FREE, K_FREE_REMOTE, K_N };
static const char *const KIND[K_N] = {"malloc", "free", "free_remote"};

typedef struct {
  uint32_t n[K_N][LAT_NB];
  uint64_t count[K_N], max[K_N], sum[K_N];
} rec_t;

static int lat_bucket(uint64_t v) {
  if (v < LAT_EXACT) return (int)v;
  int e = 63 - __builtin_clzll(v);
  if (e > LAT_TOP) return LAT_NB - 1;
  return LAT_EXACT + (e - 4) * LAT_SUB + (int)((v >> (e - 3)) & (LAT_SUB - 1));
}
/* The highest value bucket b holds. */
static uint64_t lat_upper(int b) {
  if (b < LAT_EXACT) return (uint64_t)b;
  int e = 4 + (b - LAT_EXACT) / LAT_SUB, sub = (b - LAT_EXACT) % LAT_SUB;
  return ((uint64_t)(LAT_SUB + sub + 1) << (e - 3)) - 1;
}

static inline void rec_add(rec_t *r, int k, uint64_t v) {
  r->n[k][lat_bucket(v)]++;
  r->count[k]++;
  r->sum[k] += v;
  if (v > r->max[k]) r->max[k] = v;
}

/* One recorder per thread that runs workload code, handed out from one mapping by an atomic
 * index (no lock); the main thread merges them all after the last of those threads is done. */
static rec_t *g_recs;
static long g_rec_cap;
static atomic_long g_nrec;

static void recs_init(long threads) {
  if (!g_timing) return;
  g_rec_cap = threads;
  g_recs = xmap(sizeof(rec_t) * (size_t)threads);
}
static rec_t *rec_new(void) {
  if (!g_timing) return NULL;
  long i = atomic_fetch_add(&g_nrec, 1);
  if (i >= g_rec_cap) die("more threads than recorders");
  return &g_recs[i];
}

/* ---- the bytes the workload holds ------------------------------------------------------------ */
static atomic_long g_live, g_live_max;
static void live_add(long d) {
  long v = atomic_fetch_add_explicit(&g_live, d, memory_order_relaxed) + d;
  long m = atomic_load_explicit(&g_live_max, memory_order_relaxed);
  while (v > m && !atomic_compare_exchange_weak_explicit(&g_live_max, &m, v, memory_order_relaxed,
                                                         memory_order_relaxed)) {
  }
}

/* Threads of the workload alive at once (started, not yet at their end). */
static atomic_long g_alive, g_alive_max, g_started;
static void alive_add(long d) {
  if (d > 0) atomic_fetch_add(&g_started, 1);
  long v = atomic_fetch_add(&g_alive, d) + d, m = atomic_load(&g_alive_max);
  while (v > m && !atomic_compare_exchange_weak(&g_alive_max, &m, v)) {
  }
}

static _Atomic uint64_t g_sum; /* the checksum: every block's value, added when it is freed */

/* ---- the calls measured ---------------------------------------------------------------------- */
static void *x_malloc(rec_t *r, size_t n) {
  void *p;
  if (r) {
    uint64_t t0 = now_ns();
    p = malloc(n);
    rec_add(r, K_MALLOC, now_ns() - t0);
  } else {
    p = malloc(n);
  }
  if (!p) die("out of memory");
  live_add((long)n);
  return p;
}
static void x_free(rec_t *r, int kind, void *p, size_t n) {
  live_add(-(long)n);
  if (r) {
    uint64_t t0 = now_ns();
    free(p);
    rec_add(r, kind, now_ns() - t0);
  } else {
    free(p);
  }
}

/* A block holds its value in its first 8 bytes (or all of a shorter block) and its low byte in
 * its last byte and at every 4 KiB, so that writing it touches every page. */
static void fill(unsigned char *p, size_t n, uint64_t v) {
  for (size_t i = 4096; i < n; i += 4096) p[i] = (unsigned char)v;
  memcpy(p, &v, n < sizeof v ? n : sizeof v);
  p[n - 1] = (unsigned char)v;
}
static uint64_t check(const unsigned char *p, size_t n) {
  uint64_t v = 0;
  memcpy(&v, p, n < sizeof v ? n : sizeof v);
  if (p[n - 1] != (unsigned char)v) die("block contents changed (allocator gave out a live block?)");
  return v;
}
/* What check() reads back from a block of n bytes that fill() gave the value v (a block of 8
 * bytes or fewer keeps part of it: its last byte is the value's low byte). */
static uint64_t fit(uint64_t v, size_t n) {
  unsigned char b[8];
  if (n > sizeof b) return v;
  fill(b, n, v);
  uint64_t r = 0;
  memcpy(&r, b, n);
  return r;
}

static void create_or_die(pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg) {
  uint64_t t0 = now_ns();
  while (pthread_create(t, a, fn, arg) != 0) { /* EAGAIN: too many threads alive; retry */
    if (now_ns() - t0 > (uint64_t)WAIT_LIMIT_NS) die("pthread_create kept failing");
    sched_yield();
  }
}

/* ---- churn ----------------------------------------------------------------------------------- */
#define CH_SLOTS 32
#define CH_OPS 400
static size_t churn_size(rng_t *g) {
  return rng_next(g) % 20 ? rng_log(g, 16, 4096) : rng_log(g, 4096, 65536);
}
static void *churn_thread(void *arg) {
  long idx = (long)(intptr_t)arg;
  alive_add(1);
  rec_t *r = rec_new();
  rng_t g;
  rng_seed(&g, 21, (uint64_t)idx);
  unsigned char *blk[CH_SLOTS] = {0};
  size_t len[CH_SLOTS] = {0};
  uint64_t sum = 0;
  for (int i = 0; i < CH_OPS; i++) {
    size_t k = rng_next(&g) % CH_SLOTS;
    if (blk[k]) {
      sum += check(blk[k], len[k]);
      x_free(r, K_FREE, blk[k], len[k]);
    }
    len[k] = churn_size(&g);
    blk[k] = x_malloc(r, len[k]);
    fill(blk[k], len[k], rng_next(&g));
  }
  for (int k = 0; k < CH_SLOTS; k++)
    if (blk[k]) {
      sum += check(blk[k], len[k]);
      x_free(r, K_FREE, blk[k], len[k]);
    }
  atomic_fetch_add(&g_sum, sum);
  alive_add(-1);
  return NULL;
}
static int t_churn(void) {
  long total = scaled(2000), window = g_threads ? g_threads : 4 * g_cpus;
  recs_init(total);
  pthread_t *t = xmap(sizeof *t * (size_t)window);
  for (long i = 0; i < total; i++) {
    if (i >= window) pthread_join(t[i % window], NULL);
    create_or_die(&t[i % window], NULL, churn_thread, (void *)(intptr_t)i);
  }
  for (long i = total > window ? total - window : 0; i < total; i++) pthread_join(t[i % window], NULL);
  return (int)window;
}

/* ---- prodcons -------------------------------------------------------------------------------- */
#define PC_BATCH 16
#define PC_DEPTH 256
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t not_full, not_empty;
  unsigned char *blk[PC_DEPTH][PC_BATCH];
  uint32_t len[PC_DEPTH][PC_BATCH];
  int cnt[PC_DEPTH];
  int head, count, done;
} pcq_t;
static pcq_t *pc_q;
static int pc_n;
static long pc_blocks;

static void *pc_producer(void *arg) {
  long idx = (long)(intptr_t)arg;
  alive_add(1);
  rec_t *r = rec_new();
  rng_t g;
  rng_seed(&g, 22, (uint64_t)idx);
  unsigned char *b[PC_BATCH];
  uint32_t n[PC_BATCH];
  long batch = 0;
  for (long done = 0; done < pc_blocks; batch++) {
    int c = 0;
    for (; c < PC_BATCH && done < pc_blocks; c++, done++) {
      n[c] = (uint32_t)(rng_next(&g) % 64 ? rng_small(&g, 8, 4096) : rng_range(&g, 16384, 65536));
      b[c] = x_malloc(r, n[c]);
      fill(b[c], n[c], rng_next(&g));
    }
    pcq_t *q = &pc_q[(idx + batch) % pc_n];
    pthread_mutex_lock(&q->mu);
    while (q->count == PC_DEPTH) pthread_cond_wait(&q->not_full, &q->mu);
    int slot = (q->head + q->count) % PC_DEPTH;
    memcpy(q->blk[slot], b, sizeof b);
    memcpy(q->len[slot], n, sizeof n);
    q->cnt[slot] = c;
    q->count++;
    pthread_cond_signal(&q->not_empty);
    pthread_mutex_unlock(&q->mu);
  }
  alive_add(-1);
  return NULL;
}
static void *pc_consumer(void *arg) {
  pcq_t *q = arg;
  alive_add(1);
  rec_t *r = rec_new();
  uint64_t sum = 0;
  unsigned char *b[PC_BATCH];
  uint32_t n[PC_BATCH];
  for (;;) {
    pthread_mutex_lock(&q->mu);
    while (q->count == 0 && !q->done) pthread_cond_wait(&q->not_empty, &q->mu);
    if (q->count == 0) {
      pthread_mutex_unlock(&q->mu);
      break;
    }
    int c = q->cnt[q->head];
    memcpy(b, q->blk[q->head], sizeof b);
    memcpy(n, q->len[q->head], sizeof n);
    q->head = (q->head + 1) % PC_DEPTH;
    q->count--;
    pthread_cond_signal(&q->not_full);
    pthread_mutex_unlock(&q->mu);
    for (int i = 0; i < c; i++) {
      sum += check(b[i], n[i]);
      x_free(r, K_FREE_REMOTE, b[i], n[i]);
    }
  }
  atomic_fetch_add(&g_sum, sum);
  alive_add(-1);
  return NULL;
}
static int t_prodcons(void) {
  pc_n = g_threads ? g_threads : (int)(2 * g_cpus);
  pc_blocks = scaled(100000);
  recs_init(2L * pc_n);
  pc_q = xmap(sizeof *pc_q * (size_t)pc_n);
  pthread_t *t = xmap(sizeof *t * 2 * (size_t)pc_n);
  for (int i = 0; i < pc_n; i++) {
    pthread_mutex_init(&pc_q[i].mu, NULL);
    pthread_cond_init(&pc_q[i].not_full, NULL);
    pthread_cond_init(&pc_q[i].not_empty, NULL);
  }
  for (int i = 0; i < pc_n; i++) create_or_die(&t[pc_n + i], NULL, pc_consumer, &pc_q[i]);
  for (int i = 0; i < pc_n; i++) create_or_die(&t[i], NULL, pc_producer, (void *)(intptr_t)i);
  for (int i = 0; i < pc_n; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < pc_n; i++) {
    pthread_mutex_lock(&pc_q[i].mu);
    pc_q[i].done = 1;
    pthread_cond_broadcast(&pc_q[i].not_empty);
    pthread_mutex_unlock(&pc_q[i].mu);
  }
  for (int i = 0; i < pc_n; i++) pthread_join(t[pc_n + i], NULL);
  return pc_n;
}

/* ---- thread_task ----------------------------------------------------------------------------- */
#define TT_BLOCKS 200
#define TT_FREERS 2
#define TT_KEY_BYTES 64
#define TT_LAST_BYTES 123
typedef struct {
  atomic_int ready;
  unsigned char *blk[TT_BLOCKS];
} task_t;
static task_t *tt_task;
static long tt_n;
static atomic_long tt_next, tt_exited;
static pthread_key_t tt_key;
static __thread rec_t *tt_rec;

/* Block i of a task: 1 B-3 KiB, every 50th 32-48 KiB; then its value. */
static size_t tt_size(rng_t *g, int i) {
  return i % 50 == 49 ? rng_range(g, 32768, 49152) : rng_small(g, 1, 3072);
}

/* Runs as the task's thread exits: frees the key's block, allocates and frees once more. */
static void tt_destructor(void *p) {
  uint64_t sum = check(p, TT_KEY_BYTES);
  x_free(tt_rec, K_FREE, p, TT_KEY_BYTES);
  unsigned char *q = x_malloc(tt_rec, TT_LAST_BYTES);
  fill(q, TT_LAST_BYTES, sum);
  sum += check(q, TT_LAST_BYTES);
  x_free(tt_rec, K_FREE, q, TT_LAST_BYTES);
  atomic_fetch_add(&g_sum, sum);
  alive_add(-1);
  atomic_fetch_add(&tt_exited, 1); /* last: the main thread reads the recorders after this */
}
static void *tt_thread(void *arg) {
  long id = (long)(intptr_t)arg;
  alive_add(1);
  tt_rec = rec_new();
  task_t *t = &tt_task[id];
  rng_t g;
  rng_seed(&g, 23, (uint64_t)id);
  for (int i = 0; i < TT_BLOCKS; i++) {
    size_t n = tt_size(&g, i);
    t->blk[i] = x_malloc(tt_rec, n);
    fill(t->blk[i], n, rng_next(&g));
  }
  atomic_store_explicit(&t->ready, 1, memory_order_release);
  unsigned char *k = x_malloc(tt_rec, TT_KEY_BYTES);
  fill(k, TT_KEY_BYTES, (uint64_t)id);
  if (pthread_setspecific(tt_key, k)) die("pthread_setspecific failed");
  return NULL;
}
static void *tt_freer(void *arg) {
  (void)arg;
  alive_add(1);
  rec_t *r = rec_new();
  uint64_t sum = 0;
  for (;;) {
    long id = atomic_fetch_add(&tt_next, 1);
    if (id >= tt_n) break;
    task_t *t = &tt_task[id];
    uint64_t t0 = now_ns();
    while (!atomic_load_explicit(&t->ready, memory_order_acquire)) {
      if (now_ns() - t0 > (uint64_t)WAIT_LIMIT_NS) die("a task never published its blocks");
      sleep_ns(10000);
    }
    rng_t g;
    rng_seed(&g, 23, (uint64_t)id);
    for (int i = 0; i < TT_BLOCKS; i++) {
      size_t n = tt_size(&g, i);
      uint64_t v = check(t->blk[i], n);
      if (v != fit(rng_next(&g), n)) die("a task's block holds another value");
      sum += v;
      x_free(r, K_FREE_REMOTE, t->blk[i], n);
    }
  }
  atomic_fetch_add(&g_sum, sum);
  alive_add(-1);
  return NULL;
}
static int t_thread_task(void) {
  tt_n = scaled(3000);
  recs_init(tt_n + TT_FREERS);
  tt_task = xmap(sizeof *tt_task * (size_t)tt_n);
  if (pthread_key_create(&tt_key, tt_destructor)) die("pthread_key_create failed");
  pthread_t f[TT_FREERS];
  for (int i = 0; i < TT_FREERS; i++) create_or_die(&f[i], NULL, tt_freer, NULL);
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  for (long i = 0; i < tt_n; i++) {
    pthread_t t;
    create_or_die(&t, &a, tt_thread, (void *)(intptr_t)i);
  }
  pthread_attr_destroy(&a);
  for (int i = 0; i < TT_FREERS; i++) pthread_join(f[i], NULL);
  uint64_t t0 = now_ns();
  while (atomic_load(&tt_exited) < tt_n) {
    if (now_ns() - t0 > (uint64_t)WAIT_LIMIT_NS) die("task threads did not exit");
    sleep_ns(100000);
  }
  return TT_FREERS;
}

/* ---- server ---------------------------------------------------------------------------------- */
#define SV_CACHE 16384
#define SV_MAX_SET 64
/* The head of a block that outlives its request (cached, or a response): who allocated it, its
 * size and value, and the link of an inbox. */
typedef struct sv_msg {
  struct sv_msg *next;
  uint32_t owner, len;
  uint64_t v;
} sv_msg_t;
#define SV_INBOX_MAX 32
typedef struct {
  _Atomic(sv_msg_t *) inbox; /* responses other workers handed over: a lock-free stack */
  atomic_int pending;        /* how many (at least): a sender finds room only below SV_INBOX_MAX */
  char pad[64 - sizeof(void *) - sizeof(int)];
} sv_worker_t;
static sv_worker_t *sv_w;
static _Atomic(sv_msg_t *) *sv_cache;
static int sv_n;
static long sv_total;
static atomic_long sv_next, sv_done;

static sv_msg_t *sv_new(rec_t *r, size_t n, uint32_t owner, uint64_t v) {
  sv_msg_t *m = x_malloc(r, n);
  m->next = NULL;
  m->owner = owner;
  m->len = (uint32_t)n;
  m->v = v;
  unsigned char *p = (unsigned char *)m;
  for (size_t i = 4096; i < n; i += 4096) p[i] = (unsigned char)v;
  p[n - 1] = (unsigned char)v;
  return m;
}
static uint64_t sv_free(rec_t *r, sv_msg_t *m, uint32_t me) {
  if (((unsigned char *)m)[m->len - 1] != (unsigned char)m->v)
    die("block contents changed (allocator gave out a live block?)");
  uint64_t v = m->v;
  x_free(r, m->owner == me ? K_FREE : K_FREE_REMOTE, m, m->len);
  return v;
}
/* Frees every response waiting in worker me's inbox; returns the sum of their values. */
static uint64_t sv_drain(rec_t *r, uint32_t me) {
  uint64_t sum = 0;
  int n = 0;
  for (sv_msg_t *m = atomic_exchange(&sv_w[me].inbox, NULL), *next; m; m = next, n++) {
    next = m->next;
    sum += sv_free(r, m, me);
  }
  atomic_fetch_sub(&sv_w[me].pending, n);
  return sum;
}
static size_t sv_size(rng_t *g) {
  uint64_t x = rng_next(g) % 100;
  return x < 70 ? rng_log(g, 16, 512) : x < 95 ? rng_log(g, 512, 8192) : rng_log(g, 8192, 131072);
}
static void *sv_worker(void *arg) {
  uint32_t me = (uint32_t)(uintptr_t)arg;
  alive_add(1);
  rec_t *r = rec_new();
  uint64_t sum = 0;
  unsigned char *blk[SV_MAX_SET];
  size_t len[SV_MAX_SET];
  for (;;) {
    long q = atomic_fetch_add(&sv_next, 1);
    if (q >= sv_total) break;
    sum += sv_drain(r, me);
    rng_t g;
    rng_seed(&g, 24, (uint64_t)q);
    int k = (int)rng_range(&g, 8, SV_MAX_SET);
    for (int i = 1; i < k; i++) {
      len[i] = sv_size(&g);
      blk[i] = x_malloc(r, len[i]);
      fill(blk[i], len[i], rng_next(&g));
    }
    sv_msg_t *keep = sv_new(r, rng_log(&g, 64, 16384), me, rng_next(&g));
    uint64_t seen = 0; /* the request reads its working set before it frees it */
    for (int i = 1; i < k; i++) seen += check(blk[i], len[i]);
    for (int i = k - 1; i >= 1; i--) x_free(r, K_FREE, blk[i], len[i]);
    sum += seen;
    sv_msg_t *old = atomic_exchange(&sv_cache[rng_next(&g) % SV_CACHE], keep);
    if (old) sum += sv_free(r, old, me);
    size_t rn = rng_log(&g, 256, 65536);
    uint64_t rv = rng_next(&g);
    sv_msg_t *resp = sv_new(r, rn, me, rv);
    /* To another worker, the first from a random one on whose inbox has room (backpressure, as
     * a server's bounded queues give: what a descheduled worker has waiting stays bounded);
     * when none has, the worker drops the response itself. */
    int handed = 0;
    uint64_t start = sv_n > 1 ? rng_next(&g) % (uint64_t)(sv_n - 1) : 0;
    for (int j = 0; j < sv_n - 1 && !handed; j++) {
      uint32_t to = (uint32_t)((me + 1 + (start + (uint64_t)j) % (uint64_t)(sv_n - 1)) % (uint64_t)sv_n);
      if (atomic_fetch_add(&sv_w[to].pending, 1) >= SV_INBOX_MAX) {
        atomic_fetch_sub(&sv_w[to].pending, 1);
        continue;
      }
      resp->next = atomic_load(&sv_w[to].inbox);
      while (!atomic_compare_exchange_weak(&sv_w[to].inbox, &resp->next, resp)) {
      }
      handed = 1;
    }
    if (!handed) sum += sv_free(r, resp, me);
  }
  /* No worker hands anything over once all are here: then the inbox is emptied for good. */
  atomic_fetch_add(&sv_done, 1);
  uint64_t t0 = now_ns();
  while (atomic_load(&sv_done) < sv_n) {
    if (now_ns() - t0 > (uint64_t)WAIT_LIMIT_NS) die("a server worker never finished");
    sleep_ns(50000);
  }
  sum += sv_drain(r, me);
  atomic_fetch_add(&g_sum, sum);
  alive_add(-1);
  return NULL;
}
static int t_server(void) {
  sv_n = g_threads ? g_threads : (int)(4 * g_cpus);
  sv_total = scaled(60000);
  recs_init(sv_n);
  sv_w = xmap(sizeof *sv_w * (size_t)sv_n);
  sv_cache = xmap(sizeof *sv_cache * SV_CACHE);
  pthread_t *t = xmap(sizeof *t * (size_t)sv_n);
  for (int i = 0; i < sv_n; i++) create_or_die(&t[i], NULL, sv_worker, (void *)(uintptr_t)i);
  for (int i = 0; i < sv_n; i++) pthread_join(t[i], NULL);
  /* The cache is emptied after the run, not timed (no recorder), but checked and counted. */
  uint64_t sum = 0;
  for (int i = 0; i < SV_CACHE; i++) {
    sv_msg_t *m = atomic_exchange(&sv_cache[i], NULL);
    if (m) sum += sv_free(NULL, m, UINT32_MAX);
  }
  atomic_fetch_add(&g_sum, sum);
  return sv_n;
}

/* ---- main ------------------------------------------------------------------------------------ */
static const struct {
  const char *name;
  int (*fn)(void); /* returns the --threads it ran with */
} TESTS[] = {
    {"churn", t_churn},
    {"prodcons", t_prodcons},
    {"thread_task", t_thread_task},
    {"server", t_server},
};

/* A field of /proc/self/status in kB (VmHWM, VmRSS), read without malloc; -1 if absent. */
static long status_kb(const char *field) {
  char buf[8192];
  int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t len = 0;
  ssize_t n;
  while (len < sizeof buf - 1 && (n = read(fd, buf + len, sizeof buf - 1 - len)) > 0) len += (size_t)n;
  close(fd);
  buf[len] = '\0';
  size_t fl = strlen(field);
  for (char *l = buf; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
    if (!strncmp(l, field, fl) && l[fl] == ':') return strtol(l + fl + 1, NULL, 10);
  return -1;
}

/* The 1-minute load average when the run starts, read without malloc (-1 if unreadable): for
 * the raw lines; it counts the threads of the runs just before this one too. */
static double loadavg1(void) {
  char buf[128];
  int fd = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  return strtod(buf, NULL);
}

/* The clock's own cost: back-to-back reads, as the measured calls see it (kind 0 of rec). */
static void clock_cost(rec_t *rec) {
  for (int i = 0; i < 200000; i++) {
    uint64_t t0 = now_ns();
    rec_add(rec, 0, now_ns() - t0);
  }
}

static void print_hist(const rec_t *h, int k) {
  printf("{\"n\": %" PRIu64 ", \"max_ns\": %" PRIu64 ", \"sum_ns\": %" PRIu64 ", \"hist\": [",
         h->count[k], h->max[k], h->sum[k]);
  int first = 1;
  for (int b = 0; b < LAT_NB; b++)
    if (h->n[k][b]) {
      printf("%s[%" PRIu64 ", %" PRIu32 "]", first ? "" : ", ", lat_upper(b), h->n[k][b]);
      first = 0;
    }
  printf("]}");
}

static void spin(double seconds) {
  uint64_t end = now_ns() + (uint64_t)(seconds * 1e9);
  volatile uint64_t x = 0;
  while (now_ns() < end)
    for (int i = 0; i < 1000000; i++) x = x + 1;
}

static void usage(void) {
  fprintf(stderr, "usage: latency --test NAME [--threads N] [--scale X] [--timing on|off] "
                  "[--alloc LABEL] [--load LABEL] | --list | --spin SECONDS\n");
  exit(2);
}

int main(int argc, char **argv) {
  const char *test = NULL, *label = NULL, *load = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--list")) {
      for (size_t t = 0; t < sizeof TESTS / sizeof TESTS[0]; t++) printf("%s\n", TESTS[t].name);
      return 0;
    }
    if (i + 1 >= argc) usage();
    char *end;
    if (!strcmp(argv[i], "--test")) {
      test = argv[++i];
    } else if (!strcmp(argv[i], "--alloc")) {
      label = argv[++i];
    } else if (!strcmp(argv[i], "--load")) {
      load = argv[++i];
    } else if (!strcmp(argv[i], "--threads")) {
      long v = strtol(argv[++i], &end, 10);
      if (*end || v < 0 || v > 1024) usage();
      g_threads = (int)v;
    } else if (!strcmp(argv[i], "--scale")) {
      g_scale = strtod(argv[++i], &end);
      if (*end || !(g_scale > 0) || g_scale > 1000) usage();
    } else if (!strcmp(argv[i], "--timing")) {
      i++;
      if (!strcmp(argv[i], "on")) g_timing = 1;
      else if (!strcmp(argv[i], "off")) g_timing = 0;
      else usage();
    } else if (!strcmp(argv[i], "--spin")) {
      double s = strtod(argv[++i], &end);
      if (*end || !(s > 0) || s > 86400) usage();
      spin(s);
      return 0;
    } else {
      usage();
    }
  }
  if (!test) usage();
  int (*fn)(void) = NULL;
  for (size_t t = 0; t < sizeof TESTS / sizeof TESTS[0]; t++)
    if (!strcmp(test, TESTS[t].name)) fn = TESTS[t].fn;
  if (!fn) {
    fprintf(stderr, "latency: unknown test %s (--list)\n", test);
    return 2;
  }
  g_cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (g_cpus < 1) g_cpus = 1;
  const char *in_use = malloc_by_symbol();
  static rec_t clock_rec; /* static: no malloc, and zeroed */
  if (g_timing) clock_cost(&clock_rec);
  double load0 = loadavg1();
  long rss0 = status_kb("VmRSS");
  double t0 = (double)now_ns() * 1e-9;
  int threads = fn();
  double wall = (double)now_ns() * 1e-9 - t0;
  long hwm = status_kb("VmHWM");
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);

  /* Every thread that recorded is done (joined, or counted out by its last act): merge. */
  static rec_t all;
  long nrec = atomic_load(&g_nrec);
  for (long i = 0; i < nrec; i++)
    for (int k = 0; k < K_N; k++) {
      const rec_t *r = &g_recs[i];
      for (int b = 0; b < LAT_NB; b++) all.n[k][b] += r->n[k][b];
      all.count[k] += r->count[k];
      all.sum[k] += r->sum[k];
      if (r->max[k] > all.max[k]) all.max[k] = r->max[k];
    }
  printf("{\"test\": \"%s\", \"threads\": %d, \"scale\": %g, \"alloc\": \"%s\", \"malloc\": \"%s\", "
         "%s%s%s\"timing\": %s, \"cpus\": %ld, \"loadavg_start\": %.2f, \"wall_s\": %.4f, \"user_s\": %.3f, \"sys_s\": %.3f, "
         "\"rss_start_kb\": %ld, \"vmhwm_kb\": %ld, \"live_max_bytes\": %ld, "
         "\"threads_started\": %ld, \"threads_alive_max\": %ld, \"minflt\": %ld, "
         "\"checksum\": \"%016" PRIx64 "\"",
         test, threads, g_scale, label ? label : in_use, in_use, load ? "\"load\": \"" : "",
         load ? load : "", load ? "\", " : "", g_timing ? "true" : "false", g_cpus, load0, wall,
         (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6,
         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6, rss0, hwm,
         atomic_load(&g_live_max), atomic_load(&g_started), atomic_load(&g_alive_max), ru.ru_minflt,
         (uint64_t)atomic_load(&g_sum));
  if (g_timing) {
    printf(", \"buckets\": \"exact below %d ns, %d per power of two above; each reported by its "
           "highest value\", \"clock\": ", LAT_EXACT, LAT_SUB);
    print_hist(&clock_rec, 0);
    printf(", \"calls\": {");
    for (int k = 0, first = 1; k < K_N; k++)
      if (all.count[k]) {
        printf("%s\"%s\": ", first ? "" : ", ", KIND[k]);
        print_hist(&all, k);
        first = 0;
      }
    printf("}");
  }
  printf("}\n");
  if (atomic_load(&g_live) != 0) die("bytes still held at the end (a block was not freed)");
  return 0;
}
