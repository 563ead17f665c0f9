/* General-purpose allocation workloads, one per process, through plain malloc/free/realloc.
 *
 *   gp_bench --test NAME --threads N [--scale X] [--alloc LABEL] [--sizes LO:HI]
 *   gp_bench --list
 *
 * --sizes replaces the block sizes (bytes, LO <= HI) of churn_1k_32k, large, medium and cache,
 * to take one range of a workload apart (medium's spans against its large blocks); the others
 * ignore it.
 *
 * The allocator is whatever the process's malloc is (scripts/bench_gp.sh preloads each one).
 * Every workload does a fixed amount of work (per thread, except `tree`: one million nodes per
 * run, split among the threads), so the time is the result; it computes a checksum that depends
 * only on the work, never on the allocator or on thread timing, and prints one JSON line: test,
 * threads, scale, label, the malloc actually in use (found by its symbols, so a preload that
 * silently failed shows), wall, user and system seconds, peak RSS, minor faults, checksum, and
 * anon_huge_kb: the most AnonHugePages seen, sampled every 10 ms over the work and once at its end
 * (bench/tools/smaps.h says why the peak).
 * Exit 0 on success, 1 when memory runs out or a block's contents were wrong, 2 on bad usage.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "../tools/malloc_name.h"
#include "../tools/rng.h"
#include "../tools/smaps.h"

static double g_scale = 1.0;
static size_t g_lo, g_hi; /* --sizes: 0 = each workload's own */
static int g_sizes_used;   /* the workload took --sizes (its JSON line names them) */
static int g_threads = 1;

static void die(const char *what) {
  fprintf(stderr, "gp_bench: %s\n", what);
  exit(1);
}

static void *xmalloc(size_t n) {
  void *p = malloc(n);
  if (!p) die("out of memory");
  return p;
}

/* Work units scaled by --scale, never below 1. */
static long scaled(double base) {
  double v = base * g_scale;
  return v < 1 ? 1 : (long)v;
}

/* A block stamped with a value at both ends (its first 8 bytes, or all of a shorter block);
 * freeing it reads the value back into a checksum, so that lost or overlapping blocks change the
 * result. */
static void stamp(unsigned char *p, size_t n, uint64_t v) {
  memcpy(p, &v, n < sizeof v ? n : sizeof v);
  p[n - 1] = (unsigned char)v;
}
static uint64_t unstamp(const unsigned char *p, size_t n) {
  uint64_t v = 0;
  memcpy(&v, p, n < sizeof v ? n : sizeof v);
  if (p[n - 1] != (unsigned char)v) die("block contents changed (allocator gave out a live block?)");
  return v;
}

typedef struct {
  int idx;
  pthread_t tid;
  uint64_t sum;
  void *arg; /* workload-specific */
} worker_t;

static void run_threads(void *(*fn)(void *), worker_t *w, int n) {
  for (int i = 0; i < n; i++)
    if (pthread_create(&w[i].tid, NULL, fn, &w[i])) die("pthread_create failed");
  for (int i = 0; i < n; i++) pthread_join(w[i].tid, NULL);
}

/* ---- larson: server churn, live blocks handed to a new thread each round ------------------- */
#define LARSON_SLOTS 1000
#define LARSON_MAX_ROUNDS 64
typedef struct {
  unsigned char *blk[LARSON_SLOTS];
  size_t len[LARSON_SLOTS];
  rng_t rng;
  int round, rounds;
  long ops;
  uint64_t sum;
  pthread_t tid[LARSON_MAX_ROUNDS]; /* tid[r+1] is written by round r's thread before it exits;
                                       main reads it after joining tid[r] */
} larson_chain_t;

/* C++'s operator new and sized operator delete, as the preloaded library exports them (looked up
 * by their mangled names: this driver is C and links no C++ runtime). A library without the sized
 * delete gets the unsized one; with neither (glibc: libstdc++'s are malloc and free) malloc and
 * free. g_delete_kind names which, in the JSON line. */
static void *(*g_new)(size_t);
static void (*g_delete_sized)(void *, size_t);
static void (*g_delete)(void *);
static const char *g_delete_kind;

static void resolve_cxx(void) {
  g_new = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "_Znwm");
  g_delete_sized = (void (*)(void *, size_t))dlsym(RTLD_DEFAULT, "_ZdlPvm");
  g_delete = (void (*)(void *))dlsym(RTLD_DEFAULT, "_ZdlPv");
  if (g_new == NULL || (g_delete_sized == NULL && g_delete == NULL)) {
    g_new = NULL;
    g_delete_sized = NULL;
    g_delete = NULL;
    g_delete_kind = "free";
  } else {
    g_delete_kind = g_delete_sized ? "sized" : "unsized";
  }
}

/* g_new is set only by larson_sized (resolve_cxx); larson runs on malloc and free. */
static unsigned char *larson_alloc(size_t n) {
  if (g_new == NULL) return xmalloc(n);
  return g_new(n); /* throws (aborts here) rather than return NULL */
}
static void larson_free(unsigned char *p, size_t n) {
  if (g_new == NULL)
    free(p);
  else if (g_delete_sized)
    g_delete_sized(p, n);
  else
    g_delete(p);
}

static void *larson_round(void *arg) {
  larson_chain_t *c = arg;
  for (long i = 0; i < c->ops; i++) {
    size_t k = rng_next(&c->rng) % LARSON_SLOTS;
    c->sum += unstamp(c->blk[k], c->len[k]);
    larson_free(c->blk[k], c->len[k]);
    c->len[k] = rng_small(&c->rng, 16, 1024);
    c->blk[k] = larson_alloc(c->len[k]);
    stamp(c->blk[k], c->len[k], rng_next(&c->rng));
  }
  /* The live blocks go to a new thread; this one exits, so they are freed by a thread that did
   * not allocate them while their allocating thread is gone. */
  if (++c->round < c->rounds && pthread_create(&c->tid[c->round], NULL, larson_round, c))
    die("pthread_create failed");
  return NULL;
}

static uint64_t t_larson(void) {
  const int rounds = 20;
  larson_chain_t *c = xmalloc(sizeof *c * (size_t)g_threads);
  for (int t = 0; t < g_threads; t++) {
    rng_seed(&c[t].rng, 1, (uint64_t)t);
    c[t].round = 0;
    c[t].rounds = rounds;
    c[t].ops = scaled(250000);
    c[t].sum = 0;
    for (int k = 0; k < LARSON_SLOTS; k++) {
      c[t].len[k] = rng_small(&c[t].rng, 16, 1024);
      c[t].blk[k] = larson_alloc(c[t].len[k]);
      stamp(c[t].blk[k], c[t].len[k], rng_next(&c[t].rng));
    }
  }
  for (int t = 0; t < g_threads; t++)
    if (pthread_create(&c[t].tid[0], NULL, larson_round, &c[t])) die("pthread_create failed");
  uint64_t sum = 0;
  for (int t = 0; t < g_threads; t++) {
    for (int r = 0; r < rounds; r++) pthread_join(c[t].tid[r], NULL);
    for (int k = 0; k < LARSON_SLOTS; k++) {
      c[t].sum += unstamp(c[t].blk[k], c[t].len[k]);
      larson_free(c[t].blk[k], c[t].len[k]);
    }
    sum += c[t].sum;
  }
  free(c);
  return sum;
}
static uint64_t t_larson_sized(void) {
  resolve_cxx();
  return t_larson();
}

/* ---- thread_churn: short-lived threads whose blocks two other threads free ------------------ */
/* 3,000 threads (times the scale), each allocating 200 blocks (mostly under 3 KiB) and handing them
 * in one batch to one of 2 freeing threads, then exiting; at most 32 x --threads of them live at
 * once. A thread-per-request server: what each thread's first allocations cost in memory. */
#define TC_BLOCKS 200
#define TC_FREERS 2
typedef struct tc_batch {
  struct tc_batch *next;
  unsigned char *blk[TC_BLOCKS];
  size_t len[TC_BLOCKS];
} tc_batch_t;
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  tc_batch_t *head;
  int done;
  uint64_t sum;
} tc_queue_t;
static tc_queue_t tc_q[TC_FREERS];

static void *tc_worker(void *arg) {
  long idx = (long)(intptr_t)arg;
  rng_t r;
  rng_seed(&r, 9, (uint64_t)idx);
  tc_batch_t *b = xmalloc(sizeof *b);
  for (int i = 0; i < TC_BLOCKS; i++) {
    size_t n = rng_next(&r) % 20 ? rng_small(&r, 16, 3072) : rng_range(&r, 3072, 16384);
    b->len[i] = n;
    b->blk[i] = xmalloc(n);
    stamp(b->blk[i], n, rng_next(&r));
  }
  tc_queue_t *q = &tc_q[idx % TC_FREERS];
  pthread_mutex_lock(&q->mu);
  b->next = q->head;
  q->head = b;
  pthread_cond_signal(&q->cv);
  pthread_mutex_unlock(&q->mu);
  return NULL;
}

static void *tc_freer(void *arg) {
  tc_queue_t *q = arg;
  uint64_t sum = 0;
  for (;;) {
    pthread_mutex_lock(&q->mu);
    while (!q->head && !q->done) pthread_cond_wait(&q->cv, &q->mu);
    tc_batch_t *b = q->head;
    q->head = NULL;
    pthread_mutex_unlock(&q->mu);
    if (!b) break;
    while (b) {
      tc_batch_t *next = b->next;
      for (int i = 0; i < TC_BLOCKS; i++) {
        sum += unstamp(b->blk[i], b->len[i]);
        free(b->blk[i]);
      }
      free(b);
      b = next;
    }
  }
  q->sum = sum;
  return NULL;
}

static uint64_t t_thread_churn(void) {
  long total = scaled(3000), window = 32L * g_threads;
  pthread_t freer[TC_FREERS];
  for (int i = 0; i < TC_FREERS; i++) {
    pthread_mutex_init(&tc_q[i].mu, NULL);
    pthread_cond_init(&tc_q[i].cv, NULL);
    if (pthread_create(&freer[i], NULL, tc_freer, &tc_q[i])) die("pthread_create failed");
  }
  pthread_t *t = calloc((size_t)total, sizeof *t);
  if (!t) die("out of memory");
  for (long i = 0; i < total; i++) {
    if (i >= window) pthread_join(t[i - window], NULL);
    if (pthread_create(&t[i], NULL, tc_worker, (void *)(intptr_t)i)) die("pthread_create failed");
  }
  for (long i = total > window ? total - window : 0; i < total; i++) pthread_join(t[i], NULL);
  free(t);
  uint64_t sum = 0;
  for (int i = 0; i < TC_FREERS; i++) {
    pthread_mutex_lock(&tc_q[i].mu);
    tc_q[i].done = 1;
    pthread_cond_signal(&tc_q[i].cv);
    pthread_mutex_unlock(&tc_q[i].mu);
    pthread_join(freer[i], NULL);
    sum += tc_q[i].sum;
  }
  return sum;
}

/* ---- thread_handoff: detached short-lived threads whose blocks two other threads free -------- */
/* 3,000 detached threads (times the scale), started as fast as the main thread can, each
 * allocating 200 blocks of 1 B - 3 KiB and one in 50 of 40 KiB and handing each to one of 2
 * freeing threads as it goes, then exiting. No bound on the threads alive at once: a
 * thread-per-request server whose requests outlive their threads' allocations. */
#define TH_BLOCKS 200
typedef struct th_item {
  struct th_item *next;
  unsigned char *blk;
  size_t len;
} th_item_t;
static tc_queue_t th_q[TC_FREERS]; /* head is a th_item_t list here */
static atomic_long th_live;

static void *th_worker(void *arg) {
  long idx = (long)(intptr_t)arg;
  rng_t r;
  rng_seed(&r, 14, (uint64_t)idx);
  tc_queue_t *q = &th_q[idx % TC_FREERS];
  for (int i = 0; i < TH_BLOCKS; i++) {
    size_t n = rng_next(&r) % 50 ? rng_small(&r, 1, 3072) : 40960;
    th_item_t *it = xmalloc(sizeof *it);
    it->len = n;
    it->blk = xmalloc(n);
    stamp(it->blk, n, rng_next(&r));
    pthread_mutex_lock(&q->mu);
    it->next = (th_item_t *)(void *)q->head;
    q->head = (tc_batch_t *)(void *)it;
    pthread_cond_signal(&q->cv);
    pthread_mutex_unlock(&q->mu);
  }
  atomic_fetch_sub(&th_live, 1);
  return NULL;
}

static void *th_freer(void *arg) {
  tc_queue_t *q = arg;
  uint64_t sum = 0;
  for (;;) {
    pthread_mutex_lock(&q->mu);
    while (!q->head && !q->done) pthread_cond_wait(&q->cv, &q->mu);
    th_item_t *it = (th_item_t *)(void *)q->head;
    q->head = NULL;
    pthread_mutex_unlock(&q->mu);
    if (!it) break;
    while (it) {
      th_item_t *next = it->next;
      sum += unstamp(it->blk, it->len);
      free(it->blk);
      free(it);
      it = next;
    }
  }
  q->sum = sum;
  return NULL;
}

static uint64_t t_thread_handoff(void) {
  long total = scaled(3000);
  pthread_t freer[TC_FREERS];
  for (int i = 0; i < TC_FREERS; i++) {
    pthread_mutex_init(&th_q[i].mu, NULL);
    pthread_cond_init(&th_q[i].cv, NULL);
    if (pthread_create(&freer[i], NULL, th_freer, &th_q[i])) die("pthread_create failed");
  }
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  atomic_store(&th_live, total);
  for (long i = 0; i < total; i++) {
    pthread_t t;
    while (pthread_create(&t, &attr, th_worker, (void *)(intptr_t)i) != 0) sched_yield(); /* EAGAIN */
  }
  pthread_attr_destroy(&attr);
  while (atomic_load(&th_live) > 0) sched_yield();
  uint64_t sum = 0;
  for (int i = 0; i < TC_FREERS; i++) {
    pthread_mutex_lock(&th_q[i].mu);
    th_q[i].done = 1;
    pthread_cond_signal(&th_q[i].cv);
    pthread_mutex_unlock(&th_q[i].mu);
    pthread_join(freer[i], NULL);
    sum += th_q[i].sum;
  }
  return sum;
}

/* ---- prodcons: producers hand mixed sizes to consumers through bounded queues -------------- */
#define PC_BATCH 64
#define PC_DEPTH 16
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t not_full, not_empty;
  unsigned char *q[PC_DEPTH][PC_BATCH];
  size_t qlen[PC_DEPTH][PC_BATCH];
  int head, count, done;
} pc_queue_t;

static void *pc_producer(void *arg) {
  worker_t *w = arg;
  pc_queue_t *q = w->arg;
  rng_t r;
  rng_seed(&r, 2, (uint64_t)w->idx);
  long batches = scaled(8000);
  unsigned char *b[PC_BATCH];
  size_t n[PC_BATCH];
  for (long i = 0; i < batches; i++) {
    for (int j = 0; j < PC_BATCH; j++) {
      n[j] = rng_small(&r, 8, 4096);
      b[j] = xmalloc(n[j]);
      memset(b[j], (int)(n[j] & 0xff), n[j]); /* the producer writes the whole message */
      stamp(b[j], n[j], rng_next(&r));
    }
    pthread_mutex_lock(&q->mu);
    while (q->count == PC_DEPTH) pthread_cond_wait(&q->not_full, &q->mu);
    int slot = (q->head + q->count) % PC_DEPTH;
    memcpy(q->q[slot], b, sizeof b);
    memcpy(q->qlen[slot], n, sizeof n);
    q->count++;
    pthread_cond_signal(&q->not_empty);
    pthread_mutex_unlock(&q->mu);
  }
  pthread_mutex_lock(&q->mu);
  q->done = 1;
  pthread_cond_signal(&q->not_empty);
  pthread_mutex_unlock(&q->mu);
  return NULL;
}

static void *pc_consumer(void *arg) {
  worker_t *w = arg;
  pc_queue_t *q = w->arg;
  unsigned char *b[PC_BATCH];
  size_t n[PC_BATCH];
  for (;;) {
    pthread_mutex_lock(&q->mu);
    while (q->count == 0 && !q->done) pthread_cond_wait(&q->not_empty, &q->mu);
    if (q->count == 0) {
      pthread_mutex_unlock(&q->mu);
      return NULL;
    }
    memcpy(b, q->q[q->head], sizeof b);
    memcpy(n, q->qlen[q->head], sizeof n);
    q->head = (q->head + 1) % PC_DEPTH;
    q->count--;
    pthread_cond_signal(&q->not_full);
    pthread_mutex_unlock(&q->mu);
    for (int j = 0; j < PC_BATCH; j++) {
      w->sum += unstamp(b[j], n[j]) + b[j][n[j] / 2]; /* the consumer reads the message */
      free(b[j]);
    }
  }
}

static uint64_t t_prodcons(void) {
  /* --threads N: N producer-consumer pairs, each with its own queue (2N threads). */
  int n = g_threads;
  pc_queue_t *q = xmalloc(sizeof *q * (size_t)n);
  worker_t *w = calloc((size_t)(2 * n), sizeof *w);
  if (!w) die("out of memory");
  for (int i = 0; i < n; i++) {
    pthread_mutex_init(&q[i].mu, NULL);
    pthread_cond_init(&q[i].not_full, NULL);
    pthread_cond_init(&q[i].not_empty, NULL);
    q[i].head = q[i].count = q[i].done = 0;
    w[i].idx = i;
    w[i].arg = &q[i];
    w[n + i].idx = n + i;
    w[n + i].arg = &q[i];
  }
  for (int i = 0; i < 2 * n; i++)
    if (pthread_create(&w[i].tid, NULL, i < n ? pc_producer : pc_consumer, &w[i])) die("pthread_create failed");
  uint64_t sum = 0;
  for (int i = 0; i < 2 * n; i++) {
    pthread_join(w[i].tid, NULL);
    sum += w[i].sum;
  }
  free(w);
  free(q);
  return sum;
}

/* ---- churn_1k_32k and large: random replacement in a per-thread live set ------------------- */
typedef struct {
  size_t lo, hi;
  int slots, log_sizes, touch_pages;
  double ops;
  uint64_t test;
} churn_cfg_t;

/* Writes the block: one byte per 4 KiB page (touch_pages) or its ends. */
static void churn_fill(unsigned char *p, size_t n, uint64_t v, int pages) {
  if (pages)
    for (size_t o = 4096; o < n; o += 4096) p[o] = (unsigned char)(v >> 8);
  stamp(p, n, v); /* last: the stamp's last byte may share an offset with a page's byte */
}
static uint64_t churn_read(const unsigned char *p, size_t n, int pages) {
  uint64_t v = unstamp(p, n), s = v;
  if (pages)
    for (size_t o = 4096; o < n; o += 4096) s += p[o];
  return s;
}

static void *churn_worker(void *arg) {
  worker_t *w = arg;
  const churn_cfg_t *c = w->arg;
  rng_t r;
  rng_seed(&r, c->test, (uint64_t)w->idx);
  unsigned char **blk = calloc((size_t)c->slots, sizeof *blk);
  size_t *len = calloc((size_t)c->slots, sizeof *len);
  if (!blk || !len) die("out of memory");
  long ops = scaled(c->ops);
  for (long i = 0; i < ops; i++) {
    size_t k = rng_next(&r) % (uint64_t)c->slots;
    if (blk[k]) {
      w->sum += churn_read(blk[k], len[k], c->touch_pages);
      free(blk[k]);
    }
    len[k] = c->log_sizes ? rng_log(&r, c->lo, c->hi) : rng_range(&r, c->lo, c->hi);
    blk[k] = xmalloc(len[k]);
    churn_fill(blk[k], len[k], rng_next(&r), c->touch_pages);
  }
  for (int k = 0; k < c->slots; k++)
    if (blk[k]) {
      w->sum += churn_read(blk[k], len[k], c->touch_pages);
      free(blk[k]);
    }
  free(blk);
  free(len);
  return NULL;
}

static uint64_t run_churn(const churn_cfg_t *cfg) {
  churn_cfg_t cc = *cfg, *c = &cc;
  if (g_hi != 0) {
    c->lo = g_lo;
    c->hi = g_hi;
    g_sizes_used = 1;
  }
  worker_t *w = calloc((size_t)g_threads, sizeof *w);
  if (!w) die("out of memory");
  for (int i = 0; i < g_threads; i++) {
    w[i].idx = i;
    w[i].arg = (void *)c;
  }
  run_threads(churn_worker, w, g_threads);
  uint64_t sum = 0;
  for (int i = 0; i < g_threads; i++) sum += w[i].sum;
  free(w);
  return sum;
}

static uint64_t t_churn_1k_32k(void) {
  churn_cfg_t c = {.lo = 1024, .hi = 32768, .slots = 256, .log_sizes = 0, .touch_pages = 0,
                   .ops = 400000, .test = 3};
  return run_churn(&c);
}

static uint64_t t_large(void) {
  churn_cfg_t c = {.lo = 65536, .hi = 4u << 20, .slots = 8, .log_sizes = 1, .touch_pages = 1,
                   .ops = 200, .test = 4};
  return run_churn(&c);
}

/* An object cache: many live blocks (20,000 per thread, 16 B-4 KiB), replaced in random order,
 * as a server's entry or object cache evicts. An allocator whose free lists belong to slabs or
 * pages finds few free blocks in each at this occupancy. */
static uint64_t t_cache(void) {
  churn_cfg_t c = {.lo = 16, .hi = 4096, .slots = 20000, .log_sizes = 1, .touch_pages = 0,
                   .ops = 2000000, .test = 10};
  return run_churn(&c);
}

/* ---- realloc: grow a buffer to 8 MiB in 4 KiB steps, free, repeat -------------------------- */
/* --scale X: X growths per thread (rounded), or for X < 1 one growth to X * 8 MiB. */
static void *realloc_worker(void *arg) {
  worker_t *w = arg;
  const size_t step = 4096;
  long reps = g_scale < 1 ? 1 : (long)(g_scale + 0.5);
  size_t top = g_scale < 1 ? ((size_t)((double)(8u << 20) * g_scale) / step + 1) * step : 8u << 20;
  for (long i = 0; i < reps; i++) {
    unsigned char *p = NULL;
    for (size_t n = step; n <= top; n += step) {
      unsigned char *q = realloc(p, n);
      if (!q) die("out of memory");
      p = q;
      memset(p + n - step, (int)((n / step + (size_t)i + (size_t)w->idx) & 0xff), step);
    }
    for (size_t o = 0; o < top; o += step) /* every step's tail survived every move */
      w->sum += (uint64_t)p[o] * (o / step + 1);
    free(p);
  }
  return NULL;
}

static uint64_t t_realloc(void) {
  worker_t *w = calloc((size_t)g_threads, sizeof *w);
  if (!w) die("out of memory");
  for (int i = 0; i < g_threads; i++) w[i].idx = i;
  run_threads(realloc_worker, w, g_threads);
  uint64_t sum = 0;
  for (int i = 0; i < g_threads; i++) sum += w[i].sum;
  free(w);
  return sum;
}

/* ---- realloc_grow: realloc growth repeated (issue 17) -------------------------------------- */
/* A buffer grown from 4 KiB to 8 MiB in 4 KiB steps, one byte written per step (every page
 * touched once per round), read back, freed; 150 rounds per thread. What a growing buffer costs
 * when the allocator keeps (or does not keep) the pages and the room of the last round. */
static void *realloc_grow_worker(void *arg) {
  worker_t *w = arg;
  const size_t step = 4096, top = (size_t)8 << 20;
  long rounds = scaled(150);
  for (long i = 0; i < rounds; i++) {
    unsigned char *p = NULL;
    for (size_t n = step; n <= top; n += step) {
      unsigned char *q = realloc(p, n);
      if (!q) die("out of memory");
      p = q;
      p[n - step] = (unsigned char)(n / step + (size_t)i + (size_t)w->idx);
    }
    for (size_t o = 0; o < top; o += step) /* every step's byte survived every move */
      w->sum += (uint64_t)p[o] * (o / step + 1);
    free(p);
  }
  return NULL;
}

static uint64_t t_realloc_grow(void) {
  worker_t *w = calloc((size_t)g_threads, sizeof *w);
  if (!w) die("out of memory");
  for (int i = 0; i < g_threads; i++) w[i].idx = i;
  run_threads(realloc_grow_worker, w, g_threads);
  uint64_t sum = 0;
  for (int i = 0; i < g_threads; i++) sum += w[i].sum;
  free(w);
  return sum;
}

/* ---- realloc_exchange: threads resize each other's large blocks ----------------------------- */
/* 64 shared slots, each under its own lock, each holding a block of 1 B - 3 MiB (log-uniform) or
 * none. Per operation a thread takes a random slot and checks the block there (a byte per 4 KiB
 * page, a pattern of its offset), then 3 times in 4 reallocs it to a new size, else frees it and
 * allocates anew, and writes every page of the new block. So a block is resized by a thread that
 * did not allocate it as often as by the one that did, and realloc moves large blocks between
 * threads. The checksum adds the sizes each thread chose (what it found depends on timing). */
#define RX_SLOTS 64
typedef struct {
  pthread_mutex_t mu;
  unsigned char *blk;
  size_t len;
} rx_slot_t;
static rx_slot_t rx[RX_SLOTS];

static unsigned char rx_byte(size_t o) { return (unsigned char)((o >> 12) * 31 + 7); }

static void *rx_worker(void *arg) {
  worker_t *w = arg;
  rng_t r;
  rng_seed(&r, 15, (uint64_t)w->idx);
  long ops = scaled(4000);
  for (long i = 0; i < ops; i++) {
    rx_slot_t *s = &rx[rng_next(&r) % RX_SLOTS];
    size_t n = rng_log(&r, 1, (size_t)3 << 20);
    int resize = rng_next(&r) % 4 != 0;
    pthread_mutex_lock(&s->mu);
    for (size_t o = 0; o < s->len; o += 4096)
      if (s->blk[o] != rx_byte(o)) die("block contents changed (realloc_exchange)");
    unsigned char *p;
    if (resize) {
      p = realloc(s->blk, n);
    } else {
      free(s->blk);
      p = malloc(n);
    }
    if (!p) die("out of memory");
    for (size_t o = 0; o < n; o += 4096) p[o] = rx_byte(o);
    s->blk = p;
    s->len = n;
    pthread_mutex_unlock(&s->mu);
    w->sum += n;
  }
  return NULL;
}

static uint64_t t_realloc_exchange(void) {
  worker_t *w = calloc((size_t)g_threads, sizeof *w);
  if (!w) die("out of memory");
  for (int i = 0; i < RX_SLOTS; i++) pthread_mutex_init(&rx[i].mu, NULL);
  for (int i = 0; i < g_threads; i++) w[i].idx = i;
  run_threads(rx_worker, w, g_threads);
  uint64_t sum = 0;
  for (int i = 0; i < g_threads; i++) sum += w[i].sum;
  for (int i = 0; i < RX_SLOTS; i++) {
    free(rx[i].blk);
    rx[i].blk = NULL;
    rx[i].len = 0;
  }
  free(w);
  return sum;
}

/* ---- medium: churn of 32 KiB - 1 MiB blocks (issue 17) ------------------------------------- */
/* Random replacement in a live set of 64 blocks per thread, sizes log-uniform (as many 32-64 KiB
 * blocks as 512 KiB-1 MiB ones), every page touched: the sizes just above the small classes. */
static uint64_t t_medium(void) {
  churn_cfg_t c = {.lo = 32768, .hi = 1u << 20, .slots = 64, .log_sizes = 1, .touch_pages = 1,
                   .ops = 20000, .test = 9};
  return run_churn(&c);
}

/* ---- tree: build, walk and free binary search trees of small nodes ------------------------- */
typedef struct node {
  uint64_t key;
  struct node *left, *right;
  uint64_t value;
} node_t; /* 32 bytes */

static void *tree_worker(void *arg) {
  worker_t *w = arg;
  long total = scaled(1000000);
  long n = total / g_threads + (w->idx < total % g_threads);
  rng_t r;
  rng_seed(&r, 5, (uint64_t)w->idx);
  node_t *root = NULL;
  for (long i = 0; i < n; i++) {
    node_t *x = xmalloc(sizeof *x);
    x->key = rng_next(&r);
    x->left = x->right = NULL;
    x->value = (uint64_t)i;
    node_t **link = &root;
    while (*link) link = x->key < (*link)->key ? &(*link)->left : &(*link)->right;
    *link = x;
  }
  /* In-order walk with an explicit stack (its depth is the tree's height, at most n). */
  node_t **stack = xmalloc(sizeof *stack * (size_t)(n + 1));
  long sp = 0, pos = 0;
  uint64_t sum = 0;
  for (node_t *x = root; x || sp;) {
    if (x) {
      stack[sp++] = x;
      x = x->left;
    } else {
      x = stack[--sp];
      sum += (x->key >> 32) * (uint64_t)++pos + x->value;
      x = x->right;
    }
  }
  /* Free in post-order: push the root; pop, push children, free. */
  sp = 0;
  if (root) stack[sp++] = root;
  while (sp) {
    node_t *x = stack[--sp];
    if (x->left) stack[sp++] = x->left;
    if (x->right) stack[sp++] = x->right;
    free(x);
  }
  free(stack);
  w->sum = sum;
  return NULL;
}

static uint64_t t_tree(void) {
  worker_t *w = calloc((size_t)g_threads, sizeof *w);
  if (!w) die("out of memory");
  for (int i = 0; i < g_threads; i++) w[i].idx = i;
  run_threads(tree_worker, w, g_threads);
  uint64_t sum = 0;
  for (int i = 0; i < g_threads; i++) sum += w[i].sum;
  free(w);
  return sum;
}

/* ---- false sharing ------------------------------------------------------------------------- */
#define FS_SIZE 8
static long fs_rounds(void) { return scaled(5000); }
static const long FS_WRITES = 20000;

/* Writes the block many times; volatile so that every write goes to memory (to its cache line). */
static uint64_t fs_hammer(unsigned char *p, int idx) {
  volatile unsigned char *v = p;
  for (long j = 0; j < FS_WRITES; j++) v[j & (FS_SIZE - 1)] += (unsigned char)(idx + 1);
  uint64_t s = 0;
  for (int j = 0; j < FS_SIZE; j++) s += v[j];
  return s;
}

/* Active: each thread allocates its own small block, writes it heavily, frees it, repeats. An
 * allocator that puts two threads' blocks in one cache line makes the writes contend. */
static void *fs_active_worker(void *arg) {
  worker_t *w = arg;
  long rounds = fs_rounds();
  for (long i = 0; i < rounds; i++) {
    unsigned char *p = xmalloc(FS_SIZE);
    memset(p, 0, FS_SIZE);
    w->sum += fs_hammer(p, w->idx);
    free(p);
  }
  return NULL;
}

/* Passive: the main thread allocated one small block per thread (neighbours); each thread frees
 * its block, then allocates, writes heavily and frees its own. An allocator that hands the freed
 * neighbour's memory back to the thread that freed it keeps the threads in one cache line. */
static void *fs_passive_worker(void *arg) {
  worker_t *w = arg;
  free(w->arg);
  return fs_active_worker(arg);
}

static uint64_t run_fs(int passive) {
  worker_t *w = calloc((size_t)g_threads, sizeof *w);
  if (!w) die("out of memory");
  for (int i = 0; i < g_threads; i++) {
    w[i].idx = i;
    if (passive) w[i].arg = xmalloc(FS_SIZE);
  }
  run_threads(passive ? fs_passive_worker : fs_active_worker, w, g_threads);
  uint64_t sum = 0;
  for (int i = 0; i < g_threads; i++) sum += w[i].sum;
  free(w);
  return sum;
}
static uint64_t t_fs_active(void) { return run_fs(0); }
static uint64_t t_fs_passive(void) { return run_fs(1); }

/* -------------------------------------------------------------------------------------------- */
static const struct {
  const char *name;
  uint64_t (*fn)(void);
} TESTS[] = {
    {"larson", t_larson},
    {"larson_sized", t_larson_sized},
    {"thread_churn", t_thread_churn},
    {"thread_handoff", t_thread_handoff},
    {"prodcons", t_prodcons},
    {"churn_1k_32k", t_churn_1k_32k},
    {"large", t_large},
    {"realloc", t_realloc},
    {"tree", t_tree},
    {"false_sharing_active", t_fs_active},
    {"false_sharing_passive", t_fs_passive},
    {"realloc_grow", t_realloc_grow},
    {"realloc_exchange", t_realloc_exchange},
    {"medium", t_medium},
    {"cache", t_cache},
};

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(void) {
  fprintf(stderr, "usage: gp_bench --test NAME --threads N [--scale X] [--alloc LABEL] "
                  "[--sizes LO:HI] | --list\n");
  exit(2);
}

int main(int argc, char **argv) {
  const char *test = NULL, *label = NULL;
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
    } else if (!strcmp(argv[i], "--threads")) {
      long v = strtol(argv[++i], &end, 10);
      if (*end || v < 1 || v > 1024) usage();
      g_threads = (int)v;
    } else if (!strcmp(argv[i], "--scale")) {
      g_scale = strtod(argv[++i], &end);
      if (*end || !(g_scale > 0) || g_scale > 1000) usage();
    } else if (!strcmp(argv[i], "--sizes")) {
      unsigned long long lo = strtoull(argv[++i], &end, 10), hi = 0;
      if (*end == ':') hi = strtoull(end + 1, &end, 10);
      if (*end || lo < 16 || hi < lo || hi > (1ull << 30)) usage();
      g_lo = (size_t)lo;
      g_hi = (size_t)hi;
    } else {
      usage();
    }
  }
  if (!test) usage();
  uint64_t (*fn)(void) = NULL;
  for (size_t t = 0; t < sizeof TESTS / sizeof TESTS[0]; t++)
    if (!strcmp(test, TESTS[t].name)) fn = TESTS[t].fn;
  if (!fn) {
    fprintf(stderr, "gp_bench: unknown test %s (--list)\n", test);
    return 2;
  }
  const char *in_use = malloc_by_symbol();
  struct smaps_sampler thp;
  smaps_sampler_start(&thp, 0, 0, 10);
  double t0 = now();
  uint64_t sum = fn();
  double wall = now() - t0;
  char huge[64];
  smaps_json(huge, sizeof huge, smaps_sampler_stop(&thp));
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  char sizes[64] = "", extra[64] = "";
  if (g_delete_kind) snprintf(extra, sizeof extra, "\"delete\": \"%s\", ", g_delete_kind);
  if (g_sizes_used) snprintf(sizes, sizeof sizes, "\"sizes\": \"%zu:%zu\", ", g_lo, g_hi);
  printf("{\"test\": \"%s\", %s%s\"threads\": %d, \"scale\": %g, \"alloc\": \"%s\", \"malloc\": \"%s\", "
         "\"wall_s\": %.4f, \"user_s\": %.3f, \"sys_s\": %.3f, \"maxrss_kb\": %ld, \"minflt\": %ld, "
         "%s, \"checksum\": \"%016" PRIx64 "\"}\n",
         test, sizes, extra, g_threads, g_scale, label ? label : in_use, in_use, wall,
         (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6,
         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6, ru.ru_maxrss, ru.ru_minflt,
         huge, sum);
  return 0;
}
