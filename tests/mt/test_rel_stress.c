/*
 * Multi-threaded stress: rounds of 8 to 32 worker slots doing random allocations and frees in four
 * pools (the default pool, a plain pool, a checked pool, and a pool that purges at once and keeps
 * no thread cache), with a large share of cross-thread frees through mailboxes, thread churn (each
 * slot runs several threads one after another, each inheriting the blocks of the one before), and
 * the three created pools destroyed at the end of every round with blocks still in use.
 *
 * Every block carries a pattern derived from a per-block tag, verified when it is freed,
 * reallocated or handed over; at the end of each round (threads joined) each pool's statistics must
 * equal what the test holds: blocks_in_use, allocs - frees, frees. Meanwhile the main thread trims
 * pools and reads their statistics while the workers run.
 *
 * Deterministic: every thread's operations come from (seed, round, slot, generation); only the
 * interleaving varies. Bounded: a fixed operation count per build, and a time cap that ends the run
 * early (the checks still apply). Environment overrides: MTP_STRESS_SEED, MTP_STRESS_OPS (total),
 * MTP_STRESS_ROUNDS, MTP_STRESS_MAX_SECONDS.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>

#include <mtpool/mtpool.h>

#include "testhelper.h"

#if TH_TSAN
enum { DEFAULT_OPS = 2000000, DEFAULT_ROUNDS = 6, DEFAULT_CAP_S = 150 };
#elif TH_ASAN
enum { DEFAULT_OPS = 3000000, DEFAULT_ROUNDS = 6, DEFAULT_CAP_S = 150 };
#else
enum { DEFAULT_OPS = 8000000, DEFAULT_ROUNDS = 9, DEFAULT_CAP_S = 150 };
#endif

enum { NPOOLS = 4, SLOTS_PER_THREAD = 256, GENERATIONS = 4, MAX_WORKERS = 32, MAILBOX_CAP = 4096 };

typedef struct blk {
  char *p;
  size_t size;   /* requested */
  uint64_t tag;  /* pattern tag */
  uint8_t pool;  /* index into the round's pools */
  uint8_t align; /* log2 of the alignment asked for, 0: plain */
} blk_t;

typedef struct counters {
  uint64_t allocs[NPOOLS], frees[NPOOLS], remote_sent, ops, realloc_moved, realloc_inplace,
      calloc_checked, aligned_checked, large;
} counters_t;

typedef struct mailbox {
  pthread_mutex_t mu;
  blk_t *items;
  size_t n, cap;
} mailbox_t;

struct round;

typedef struct slot {
  struct round *rd;
  int index;
  int generation;
  blk_t owned[SLOTS_PER_THREAD];
  counters_t cnt;
  uint64_t ops_per_gen;
  pthread_t prev; /* the generation before, joined by the next one */
  int has_prev;
  pthread_t last;
  int done;
  char fail[256];
} slot_t;

typedef struct round {
  int index, nworkers;
  uint64_t seed;
  mtp_pool_t *pools[NPOOLS]; /* [0] is the default pool */
  slot_t *slots;
  mailbox_t boxes[MAX_WORKERS];
  pthread_mutex_t done_mu;
  pthread_cond_t done_cv;
  int finished;
  double deadline;
  atomic_int stop;
  atomic_int failures;
} round_t;

static size_t g_max_class; /* largest small block size (from the stats), for reporting */

static void slot_fail(slot_t *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (!s->fail[0]) vsnprintf(s->fail, sizeof s->fail, fmt, ap);
  va_end(ap);
  atomic_fetch_add(&s->rd->failures, 1);
}

static size_t pick_size(th_rng_t *r) {
  uint64_t x = th_below(r, 1000);
  if (x < 700) return (size_t)th_below(r, 257);          /* tiny and small */
  if (x < 950) return 257 + (size_t)th_below(r, 3840);   /* up to 4 KiB */
  if (x < 998) return 4097 + (size_t)th_below(r, 61440); /* up to 64 KiB */
  return 65537 + (size_t)th_below(r, (size_t)1 << 20);   /* up to ~1 MiB: large blocks */
}

static int pick_pool(th_rng_t *r) {
  uint64_t x = th_below(r, 100);
  return x < 40 ? 0 : x < 70 ? 1 : x < 80 ? 2 : 3;
}

static void *pool_alloc(round_t *rd, int pi, size_t n) {
  if (pi == 0) return mtp_alloc(n);
  return mtp_pool_alloc(rd->pools[pi], n);
}

/* Verify and free a block (any thread). */
static void free_blk(slot_t *s, blk_t *b, int sized) {
  size_t bad = th_verify(b->p, b->size, b->tag);
  if (bad != (size_t)-1)
    slot_fail(s, "round %d slot %d: block %p (size %zu, pool %d) corrupt at offset %zu",
              s->rd->index, s->index, (void *)b->p, b->size, b->pool, bad);
  if (sized)
    mtp_free_sized(b->p, b->size);
  else
    mtp_free(b->p);
  s->cnt.frees[b->pool]++;
  b->p = NULL;
}

static void check_new(slot_t *s, blk_t *b) {
  round_t *rd = s->rd;
  if (!b->p) {
    slot_fail(s, "allocation of %zu bytes (pool %d, align 2^%d) returned NULL, errno %d", b->size,
              b->pool, b->align, errno);
    return;
  }
  size_t u = mtp_usable_size(b->p);
  if (u < b->size) slot_fail(s, "usable size %zu < requested %zu", u, b->size);
  if (b->align && ((uintptr_t)b->p & (((uintptr_t)1 << b->align) - 1)))
    slot_fail(s, "%p (size %zu) not aligned to %zu", (void *)b->p, b->size, (size_t)1 << b->align);
  if (!b->align) {
    size_t a = u & (~u + 1); /* largest power of two dividing the block */
    if (a > 16 || a == 0) a = 16;
    if (b->size == 0 && a > 8) a = 8;
    if ((uintptr_t)b->p & (a - 1))
      slot_fail(s, "%p (size %zu, usable %zu) not aligned to %zu", (void *)b->p, b->size, u, a);
  }
  mtp_pool_t *want = b->pool == 0 ? mtp_default_pool() : rd->pools[b->pool];
  if (mtp_pool_of(b->p) != want)
    slot_fail(s, "mtp_pool_of(%p) = %p, want %p", (void *)b->p, (void *)mtp_pool_of(b->p),
              (void *)want);
  if (b->size > g_max_class) s->cnt.large++;
}

static void mailbox_drain(slot_t *s) {
  mailbox_t *mb = &s->rd->boxes[s->index];
  pthread_mutex_lock(&mb->mu);
  blk_t *items = mb->items;
  size_t n = mb->n;
  mb->items = NULL;
  mb->n = mb->cap = 0;
  pthread_mutex_unlock(&mb->mu);
  for (size_t i = 0; i < n; i++) free_blk(s, &items[i], (int)(i & 1));
  free(items);
}

/* Hand b to slot `to` (whose thread frees it later); false if its mailbox is full. */
static int mailbox_send(round_t *rd, int to, const blk_t *b) {
  mailbox_t *mb = &rd->boxes[to];
  int ok = 0;
  pthread_mutex_lock(&mb->mu);
  if (mb->n < MAILBOX_CAP) {
    if (mb->n == mb->cap) {
      size_t cap = mb->cap ? mb->cap * 2 : 16;
      blk_t *ni = realloc(mb->items, cap * sizeof *ni);
      if (ni) {
        mb->items = ni;
        mb->cap = cap;
      }
    }
    if (mb->n < mb->cap) {
      mb->items[mb->n++] = *b;
      ok = 1;
    }
  }
  pthread_mutex_unlock(&mb->mu);
  return ok;
}

static void *worker(void *arg);

static void one_op(slot_t *s, th_rng_t *r) {
  round_t *rd = s->rd;
  blk_t *b = &s->owned[th_below(r, SLOTS_PER_THREAD)];
  uint64_t x = th_below(r, 100);
  if (x < 45) { /* allocate into the slot (freeing what was there) */
    uint64_t kind = th_below(r, 10);
    if (b->p && kind < 2) { /* realloc the slot's block */
      size_t ns = pick_size(r);
      size_t keep = ns < b->size ? ns : b->size;
      char *old = b->p;
      char *np = mtp_realloc(b->p, ns);
      if (!np) {
        slot_fail(s, "realloc(%p, %zu) returned NULL", (void *)old, ns);
        return;
      }
      if (th_verify(np, keep, b->tag) != (size_t)-1)
        slot_fail(s, "realloc %p (%zu -> %zu) lost the contents", (void *)old, b->size, ns);
      if (np == old) {
        s->cnt.realloc_inplace++;
      } else {
        s->cnt.realloc_moved++;
        s->cnt.allocs[b->pool]++;
        s->cnt.frees[b->pool]++;
      }
      b->p = np;
      b->size = ns;
      b->align = 0;
      check_new(s, b);
      b->tag = th_next(r);
      th_fill(b->p, b->size, b->tag);
      return;
    }
    if (b->p) free_blk(s, b, (int)(kind & 1));
    b->pool = (uint8_t)pick_pool(r);
    b->size = pick_size(r);
    b->align = 0;
    b->tag = th_next(r);
    if (kind == 2) { /* calloc */
      size_t count = 1 + (size_t)th_below(r, 8), each = b->size / count + 1;
      b->size = count * each;
      b->p = b->pool == 0 ? mtp_calloc(count, each)
                          : mtp_pool_calloc(rd->pools[b->pool], count, each);
      check_new(s, b);
      if (!b->p) return;
      for (size_t i = 0; i < b->size; i++)
        if (b->p[i]) {
          slot_fail(s, "calloc block %p byte %zu not zero", (void *)b->p, i);
          break;
        }
      s->cnt.calloc_checked++;
    } else if (kind == 3) { /* aligned */
      b->align = (uint8_t)(1 + th_below(r, 12)); /* 2 .. 4096 */
      size_t al = (size_t)1 << b->align;
      b->p = b->pool == 0 ? mtp_alloc_aligned(b->size, al)
                          : mtp_pool_alloc_aligned(rd->pools[b->pool], b->size, al);
      check_new(s, b);
      s->cnt.aligned_checked++;
    } else {
      b->p = pool_alloc(rd, b->pool, b->size);
      check_new(s, b);
    }
    if (!b->p) return;
    s->cnt.allocs[b->pool]++;
    th_fill(b->p, b->size, b->tag);
  } else if (x < 70) { /* free locally */
    if (b->p) free_blk(s, b, (int)(x & 1));
  } else if (x < 95) { /* cross-thread free: hand it to another slot */
    if (b->p && rd->nworkers > 1) {
      int to = (int)th_below(r, (uint64_t)rd->nworkers - 1);
      if (to >= s->index) to++;
      if (mailbox_send(rd, to, b)) {
        s->cnt.remote_sent++;
        b->p = NULL;
      }
    }
  } else {
    mailbox_drain(s);
  }
}

static void *worker(void *arg) {
  slot_t *s = arg;
  round_t *rd = s->rd;
  if (s->has_prev) pthread_join(s->prev, NULL);
  th_rng_t r;
  th_rng_seed(&r, rd->seed, (uint64_t)rd->index * 1000 + (uint64_t)s->index,
               (uint64_t)s->generation);
  uint64_t i = 0;
  for (; i < s->ops_per_gen; i++) {
    if ((i & 1023) == 0 && (atomic_load(&rd->stop) || th_now() > rd->deadline)) {
      atomic_store(&rd->stop, 1);
      break;
    }
    one_op(s, &r);
    if ((i & 63) == 63) mailbox_drain(s);
  }
  s->cnt.ops += i;
  /* every other generation hands its cache back explicitly; the others rely on thread exit */
  if (s->generation & 1) mtp_thread_flush();
  s->generation++;
  if (s->generation < GENERATIONS && !atomic_load(&rd->stop)) {
    s->prev = pthread_self();
    s->has_prev = 1;
    pthread_t next;
    if (pthread_create(&next, NULL, worker, s) == 0) return NULL; /* next joins this one */
    slot_fail(s, "pthread_create failed");
    s->has_prev = 0;
  }
  pthread_mutex_lock(&rd->done_mu);
  s->last = pthread_self();
  s->done = 1;
  rd->finished++;
  pthread_cond_signal(&rd->done_cv);
  pthread_mutex_unlock(&rd->done_mu);
  return NULL;
}

typedef struct carry {
  blk_t *items;
  size_t n, cap;
} carry_t;

static void carry_push(carry_t *c, const blk_t *b) {
  if (c->n == c->cap) {
    c->cap = c->cap ? c->cap * 2 : 1024;
    c->items = realloc(c->items, c->cap * sizeof *c->items);
    REQUIRE(c->items, "oom");
  }
  c->items[c->n++] = *b;
}

static int check_stats(const char *what, mtp_pool_t *pool, uint64_t live, uint64_t allocs,
                       uint64_t frees, const mtp_stats_t *base, size_t live_requested) {
  mtp_stats_t st;
  EXPECT(mtp_pool_stats(pool, &st) == 0, "stats");
  uint64_t a = st.allocs - (base ? base->allocs : 0), f = st.frees - (base ? base->frees : 0);
  size_t in_use = st.blocks_in_use - (base ? base->blocks_in_use : 0);
  int ok = 1;
  if (in_use != live || a != allocs || f != frees || st.allocs - st.frees != st.blocks_in_use ||
      st.bytes_in_use < live_requested || st.bytes_reserved < st.bytes_in_use) {
    fprintf(stderr,
            "FAIL stats of %s: blocks_in_use %zu (want %llu), allocs %llu (want %llu), "
            "frees %llu (want %llu), bytes_in_use %zu (live requested %zu), reserved %zu\n",
            what, in_use, (unsigned long long)live, (unsigned long long)a,
            (unsigned long long)allocs, (unsigned long long)f, (unsigned long long)frees,
            st.bytes_in_use, live_requested, st.bytes_reserved);
    th_failures++;
    ok = 0;
  }
  return ok;
}

int main(void) {
  REQUIRE(th_pattern_selftest(), "pattern");
  uint64_t seed = getenv("MTP_STRESS_SEED") ? strtoull(getenv("MTP_STRESS_SEED"), NULL, 0) : 0x5eedull;
  uint64_t total_ops =
      getenv("MTP_STRESS_OPS") ? strtoull(getenv("MTP_STRESS_OPS"), NULL, 0) : DEFAULT_OPS;
  int rounds = getenv("MTP_STRESS_ROUNDS") ? atoi(getenv("MTP_STRESS_ROUNDS")) : DEFAULT_ROUNDS;
  double cap_s = getenv("MTP_STRESS_MAX_SECONDS") ? atof(getenv("MTP_STRESS_MAX_SECONDS"))
                                                  : DEFAULT_CAP_S;
  static const int worker_counts[] = {8, 16, 32};
  int nsizes = 3;
  uint64_t slot_rounds = 0;
  for (int ri = 0; ri < rounds; ri++) slot_rounds += (uint64_t)worker_counts[ri % nsizes];
  uint64_t ops_per_gen = total_ops / (slot_rounds * GENERATIONS) + 1;

  mtp_stats_t st0;
  mtp_pool_stats(NULL, &st0);
  mtp_class_stats_t cs[256];
  int classes = mtp_pool_class_stats(NULL, cs, 256);
  g_max_class = classes > 0 && classes <= 256 ? cs[classes - 1].block_size : 0;
  printf("stress: seed %#llx, %d rounds of 8/16/32 slots x %d thread generations, %llu ops per "
         "thread, time cap %.0f s%s, largest class %zu B\n",
         (unsigned long long)seed, rounds, GENERATIONS, (unsigned long long)ops_per_gen, cap_s,
         TH_TSAN ? " (ThreadSanitizer)" : TH_ASAN ? " (AddressSanitizer)" : "", g_max_class);

  double t0 = th_now(), deadline = t0 + cap_s;
  carry_t carry = {0};
  uint64_t def_allocs = 0, def_frees = 0, grand_ops = 0, grand_remote = 0, threads_started = 0,
           grand_large = 0, moved = 0, inplace = 0;
  size_t trims = 0, trimmed_bytes = 0;
  int rounds_run = 0;

  for (int ri = 0; ri < rounds && th_now() < deadline; ri++) {
    round_t rd;
    memset(&rd, 0, sizeof rd);
    rd.index = ri;
    rd.nworkers = worker_counts[ri % nsizes];
    rd.seed = seed;
    rd.deadline = deadline;
    pthread_mutex_init(&rd.done_mu, NULL);
    pthread_cond_init(&rd.done_cv, NULL);
    for (int i = 0; i < MAX_WORKERS; i++) pthread_mutex_init(&rd.boxes[i].mu, NULL);
    rd.pools[0] = mtp_default_pool();
    for (int pi = 1; pi < NPOOLS; pi++) {
      mtp_options_t o;
      mtp_options_init(&o);
      char name[32];
      snprintf(name, sizeof name, "stress-r%d-p%d", ri, pi);
      o.name = name;
      if (pi == 2) o.check = 1;
      if (pi == 3) {
        o.purge_delay_ms = 0;
        o.thread_cache_bytes = 0;
      }
      rd.pools[pi] = mtp_pool_create(&o);
      REQUIRE(rd.pools[pi], "pool create %d", pi);
      EXPECT(strcmp(mtp_pool_name(rd.pools[pi]), name) == 0, "name %s", mtp_pool_name(rd.pools[pi]));
    }
    rd.slots = calloc((size_t)rd.nworkers, sizeof *rd.slots);
    REQUIRE(rd.slots, "oom");
    for (int i = 0; i < rd.nworkers; i++) {
      slot_t *s = &rd.slots[i];
      s->rd = &rd;
      s->index = i;
      s->ops_per_gen = ops_per_gen;
    }
    double tr = th_now();
    for (int i = 0; i < rd.nworkers; i++) {
      pthread_t t;
      REQUIRE(pthread_create(&t, NULL, worker, &rd.slots[i]) == 0, "pthread_create");
    }
    /* while they run: trims and statistics from another thread */
    th_rng_t mr;
    th_rng_seed(&mr, seed, (uint64_t)ri, 999);
    pthread_mutex_lock(&rd.done_mu);
    while (rd.finished < rd.nworkers) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      ts.tv_nsec += 20 * 1000 * 1000;
      if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
      }
      pthread_cond_timedwait(&rd.done_cv, &rd.done_mu, &ts);
      if (rd.finished >= rd.nworkers) break;
      pthread_mutex_unlock(&rd.done_mu);
      mtp_pool_t *p = rd.pools[th_below(&mr, NPOOLS)];
      mtp_stats_t snap;
      mtp_pool_stats(p, &snap);
      if (snap.bytes_in_use > snap.bytes_mapped + ((size_t)1 << 40)) {
        fprintf(stderr, "FAIL racy stats snapshot absurd: in use %zu, mapped %zu\n",
                snap.bytes_in_use, snap.bytes_mapped);
        th_failures++;
      }
      trimmed_bytes += mtp_pool_trim(p);
      trims++;
      pthread_mutex_lock(&rd.done_mu);
    }
    pthread_mutex_unlock(&rd.done_mu);
    for (int i = 0; i < rd.nworkers; i++) pthread_join(rd.slots[i].last, NULL);
    double round_s = th_now() - tr;

    /* threads are all gone: account */
    counters_t sum;
    memset(&sum, 0, sizeof sum);
    for (int i = 0; i < rd.nworkers; i++) {
      slot_t *s = &rd.slots[i];
      if (s->fail[0]) fprintf(stderr, "FAIL %s\n", s->fail);
      for (int pi = 0; pi < NPOOLS; pi++) {
        sum.allocs[pi] += s->cnt.allocs[pi];
        sum.frees[pi] += s->cnt.frees[pi];
      }
      sum.ops += s->cnt.ops;
      sum.remote_sent += s->cnt.remote_sent;
      sum.large += s->cnt.large;
      moved += s->cnt.realloc_moved;
      inplace += s->cnt.realloc_inplace;
      threads_started += (uint64_t)s->generation;
    }
    /* blocks still in mailboxes: freed here by the main thread (remote frees too) */
    slot_t mainslot;
    memset(&mainslot, 0, sizeof mainslot);
    mainslot.rd = &rd;
    for (int i = 0; i < rd.nworkers; i++) {
      mainslot.index = i;
      mailbox_drain(&mainslot);
    }
    for (int pi = 0; pi < NPOOLS; pi++) sum.frees[pi] += mainslot.cnt.frees[pi];
    if (mainslot.fail[0]) fprintf(stderr, "FAIL %s\n", mainslot.fail);
    th_failures += atomic_load(&rd.failures) ? 1 : 0;

    /* the rest: verify; default-pool blocks carried to later rounds, others left in the pools */
    uint64_t live[NPOOLS] = {0};
    size_t live_req[NPOOLS] = {0};
    for (int i = 0; i < rd.nworkers; i++) {
      for (int k = 0; k < SLOTS_PER_THREAD; k++) {
        blk_t *b = &rd.slots[i].owned[k];
        if (!b->p) continue;
        size_t bad = th_verify(b->p, b->size, b->tag);
        if (bad != (size_t)-1) {
          fprintf(stderr, "FAIL end of round %d: block %p (size %zu, pool %d) corrupt at %zu\n", ri,
                  (void *)b->p, b->size, b->pool, bad);
          th_failures++;
        }
        if (b->pool == 0) {
          carry_push(&carry, b);
        } else {
          live[b->pool]++;
          live_req[b->pool] += b->size;
        }
      }
    }
    def_allocs += sum.allocs[0];
    def_frees += sum.frees[0];
    /* drop about half of the carried blocks, the oldest and a random share */
    th_rng_t cr;
    th_rng_seed(&cr, seed, (uint64_t)ri, 4242);
    size_t w = 0;
    for (size_t i = 0; i < carry.n; i++) {
      blk_t *b = &carry.items[i];
      if (th_below(&cr, 2) == 0 || carry.n > 20000) {
        EXPECT(th_verify(b->p, b->size, b->tag) == (size_t)-1, "carried block %p corrupt",
                  (void *)b->p);
        mtp_free(b->p);
        def_frees++;
      } else {
        carry.items[w++] = *b;
      }
    }
    carry.n = w;
    size_t carry_req = 0;
    for (size_t i = 0; i < carry.n; i++) carry_req += carry.items[i].size;

    char what[64];
    for (int pi = 1; pi < NPOOLS; pi++) {
      snprintf(what, sizeof what, "round %d pool %d", ri, pi);
      check_stats(what, rd.pools[pi], live[pi], sum.allocs[pi], sum.frees[pi], NULL, live_req[pi]);
      mtp_stats_t ps;
      mtp_pool_stats(rd.pools[pi], &ps);
      /* a checked pool's blocks have no owner thread (every call takes the pool lock) */
      if (pi != 2 && sum.remote_sent > 1000 && ps.remote_frees == 0) {
        fprintf(stderr, "FAIL %s: remote_frees is 0 after %llu cross-thread hand-overs\n", what,
                (unsigned long long)sum.remote_sent);
        th_failures++;
      }
    }
    snprintf(what, sizeof what, "round %d default pool", ri);
    check_stats(what, NULL, carry.n, def_allocs, def_frees, &st0, carry_req);

    /* destroy the created pools with blocks still in use */
    for (int pi = 1; pi < NPOOLS; pi++) mtp_pool_destroy(rd.pools[pi]);
    trimmed_bytes += mtp_pool_trim(NULL);

    printf("round %d: %d slots, %llu ops in %.2f s, %llu cross-thread hand-overs, %llu large, "
           "live after: %llu/%llu/%llu in created pools, %zu carried in the default pool\n",
           ri, rd.nworkers, (unsigned long long)sum.ops, round_s,
           (unsigned long long)sum.remote_sent, (unsigned long long)sum.large,
           (unsigned long long)live[1], (unsigned long long)live[2], (unsigned long long)live[3],
           carry.n);
    fflush(stdout);
    grand_ops += sum.ops;
    grand_remote += sum.remote_sent;
    grand_large += sum.large;
    rounds_run++;
    for (int i = 0; i < MAX_WORKERS; i++) {
      free(rd.boxes[i].items);
      pthread_mutex_destroy(&rd.boxes[i].mu);
    }
    free(rd.slots);
    pthread_mutex_destroy(&rd.done_mu);
    pthread_cond_destroy(&rd.done_cv);
  }

  for (size_t i = 0; i < carry.n; i++) {
    EXPECT(th_verify(carry.items[i].p, carry.items[i].size, carry.items[i].tag) == (size_t)-1,
              "carried block corrupt");
    mtp_free(carry.items[i].p);
    def_frees++;
  }
  free(carry.items);
  mtp_thread_flush();
  check_stats("default pool at the end", NULL, 0, def_allocs, def_frees, &st0, 0);
  size_t back = mtp_pool_trim(NULL);
  mtp_stats_t fin;
  mtp_pool_stats(NULL, &fin);
  double secs = th_now() - t0;
  printf("stress: %llu operations (%llu cross-thread hand-overs, %llu large blocks, realloc "
         "%llu moved / %llu in place) in %d rounds, %llu threads, %.1f s (%.2f M ops/s); "
         "%zu concurrent trims returned %zu B; default pool at the end: %zu blocks, %zu B reserved, "
         "%zu B mapped%s\n",
         (unsigned long long)grand_ops, (unsigned long long)grand_remote,
         (unsigned long long)grand_large, (unsigned long long)moved, (unsigned long long)inplace,
         rounds_run, (unsigned long long)threads_started, secs, grand_ops / secs / 1e6, trims,
         trimmed_bytes + back, fin.blocks_in_use, fin.bytes_reserved, fin.bytes_mapped,
         grand_ops < total_ops * 9 / 10 ? " (time cap reached before the planned count)" : "");
  if (th_failures) printf("stress: %d failures\n", th_failures);
  return th_failures ? 1 : 0;
}
