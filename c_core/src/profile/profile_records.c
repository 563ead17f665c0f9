/* The heap profiler's records, the tables of call stacks and of live samples, and what reads
 * them out: the profile in heap_v2 format (mtp_profile_dump, dumps on a signal) and, at exit, the
 * last profile and the leak list. profile.c samples, and says how. Layer: wrap (above heap). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP */
#endif
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "profile_records.h"

bool mtp__prof_on;

#define DEFAULT_RATE 524288
#define LEAK_STACKS 20         /* stacks the leak list shows */

/* Held for a few hundred instructions at a time, by threads that may sample 100,000 times a
 * second: glibc's adaptive kind spins a little before it sleeps. */
#if defined(PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP)
pthread_mutex_t mtp__prof_lock = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP;
#else
pthread_mutex_t mtp__prof_lock = PTHREAD_MUTEX_INITIALIZER;
#endif
/* MTP_PROF_STACK_SLOTS entries; the last is "other" (mtp__prof_lock) */
prof_stack_t *mtp__prof_stacks;
/* MTP_PROF_LIVE_SLOTS entries each, mapped at start-up; live_cap of them in use in the first, the
 * second the one a growth rehashes into (mtp__prof_lock) */
prof_live_t *mtp__prof_live, *mtp__prof_live_spare;
static uint32_t live_cap = MTP_PROF_LIVE_FIRST; /* (mtp__prof_lock) */
uint32_t mtp__prof_live_n;      /* (mtp__prof_lock) */
uint64_t mtp__prof_rate = DEFAULT_RATE; /* written at start-up only */
char mtp__prof_path[4096];      /* MTPOOL_PROFILE, written at start-up only */
static unsigned dump_seq;       /* signal dumps so far (mtp__prof_lock) */
volatile sig_atomic_t mtp__prof_dump_pending; /* a signal came while the tables were busy */
MTP_TLS bool mtp__tl_prof_busy; /* this thread is sampling: allocations take the plain path */
static MTP_TLS unsigned tl_shard;   /* 0: none yet; else the thread's shard + 1 */
static unsigned shards_given;       /* (mtp__prof_lock) */

/* ---- counts ---- */

unsigned mtp__prof_shard(void) {
  if (MTP_UNLIKELY(tl_shard == 0)) tl_shard = shards_given++ % MTP_PROF_SHARDS + 1;
  return tl_shard - 1;
}

prof_counts_t mtp__prof_counts(const prof_stack_t *s) {
  prof_counts_t t = {0, 0, 0, 0};
  for (unsigned k = 0; k < MTP_PROF_SHARDS; k++) {
    t.live_count += s->counts[k].live_count;
    t.live_bytes += s->counts[k].live_bytes;
    t.alloc_count += s->counts[k].alloc_count;
    t.alloc_bytes += s->counts[k].alloc_bytes;
  }
  return t;
}

/* ---- stacks ---- */

static uint64_t stack_hash(void *const *pc, uint32_t depth) {
  uint64_t h = 0xcbf29ce484222325ull ^ depth;
  for (uint32_t i = 0; i < depth; i++) h = (h ^ (uintptr_t)pc[i]) * 0x100000001b3ull;
  return h | 1; /* never 0 (an unused slot) */
}

/* mtp__prof_lock held: the slot of this stack, made if new; the "other" slot when the table is
 * full. */
uint32_t mtp__prof_stack_slot(void *const *pc, uint32_t depth) {
  uint64_t h = stack_hash(pc, depth);
  const uint32_t slots = MTP_PROF_STACK_SLOTS - 1; /* the last slot is kept for "other" */
  for (uint32_t i = (uint32_t)(h % slots), n = 0; n < slots; n++, i = i + 1 == slots ? 0 : i + 1) {
    prof_stack_t *s = &mtp__prof_stacks[i];
    if (s->hash == 0) {
      s->hash = h;
      s->depth = depth;
      memcpy(s->pc, pc, depth * sizeof(void *));
      return i;
    }
    if (s->hash == h && s->depth == depth && memcmp(s->pc, pc, depth * sizeof(void *)) == 0) return i;
  }
  return MTP_PROF_STACK_SLOTS - 1;
}

/* ---- live samples (mtp__prof_lock held) ---- */

static uint32_t live_home(uintptr_t p) {
  return (uint32_t)((p >> 12) * 0x9E3779B97F4A7C15ull >> 32) & (live_cap - 1);
}

static prof_live_t *live_find(uintptr_t p) {
  for (uint32_t i = live_home(p);; i = (i + 1) & (live_cap - 1)) {
    if (mtp__prof_live[i].ptr == p) return &mtp__prof_live[i];
    if (mtp__prof_live[i].ptr == 0) return NULL;
  }
}

static void live_put(prof_live_t e) {
  uint32_t i = live_home(e.ptr);
  while (mtp__prof_live[i].ptr != 0) i = (i + 1) & (live_cap - 1);
  mtp__prof_live[i] = e;
}

/* Twice the slots: every entry rehashed into the spare table, which becomes the table. */
static void live_grow(void) {
  prof_live_t *old = mtp__prof_live;
  uint32_t old_cap = live_cap;
  live_cap *= 2;
  memset(mtp__prof_live_spare, 0, live_cap * sizeof(prof_live_t));
  mtp__prof_live = mtp__prof_live_spare;
  mtp__prof_live_spare = old;
  for (uint32_t i = 0; i < old_cap; i++)
    if (old[i].ptr != 0) live_put(old[i]);
}

bool mtp__prof_live_insert(uintptr_t p, uint32_t stack, uint64_t bytes) {
  if (mtp__prof_live_n >= MTP_PROF_LIVE_MAX) return false;
  if (mtp__prof_live_n + 1 > live_cap / 2) live_grow();
  live_put((prof_live_t){p, stack, bytes});
  mtp__prof_live_n++;
  return true;
}

/* Linear probing's deletion: later entries of the cluster that may sit at or before the hole move
 * back into it, so that every entry stays reachable from its home without tombstones. */
static void live_delete(prof_live_t *e) {
  uint32_t hole = (uint32_t)(e - mtp__prof_live);
  for (uint32_t j = (hole + 1) & (live_cap - 1); mtp__prof_live[j].ptr != 0;
       j = (j + 1) & (live_cap - 1)) {
    uint32_t home = live_home(mtp__prof_live[j].ptr);
    /* j's entry may fill the hole if its home is not cyclically in (hole, j] */
    bool stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
    if (!stays) {
      mtp__prof_live[hole] = mtp__prof_live[j];
      hole = j;
    }
  }
  mtp__prof_live[hole].ptr = 0;
  mtp__prof_live_n--;
}

static bool forget_locked(void *p) {
  prof_live_t *e = live_find((uintptr_t)p);
  if (e == NULL) return false;
  prof_counts_t *c = &mtp__prof_stacks[e->stack].counts[mtp__prof_shard()];
  c->live_count--;
  c->live_bytes -= (int64_t)e->bytes;
  live_delete(e);
  return true;
}

unsigned mtp__prof_origin(const void *p, void **pc, unsigned max, bool forget) {
  unsigned n = 0;
  pthread_mutex_lock(&mtp__prof_lock);
  prof_live_t *e = live_find((uintptr_t)p);
  if (e != NULL) {
    const prof_stack_t *s = &mtp__prof_stacks[e->stack];
    n = s->depth < max ? s->depth : max;
    memcpy(pc, s->pc, n * sizeof(void *));
    if (forget) (void)forget_locked((void *)(uintptr_t)p);
  }
  pthread_mutex_unlock(&mtp__prof_lock);
  return n;
}

bool mtp__prof_holds(const void *p) {
  pthread_mutex_lock(&mtp__prof_lock);
  bool held = live_find((uintptr_t)p) != NULL;
  pthread_mutex_unlock(&mtp__prof_lock);
  return held;
}

/* ---- the writer (no malloc, no stdio: it may run at exit, after a fork, or in a handler) ---- */

typedef struct out {
  int fd;
  size_t n;
  bool failed;
  char buf[16384];
} out_t;
static out_t out_buf; /* mtp__prof_lock */

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

/* mtp__prof_lock held: the profile in gperftools' heap format to path. 0, or -1 with errno. */
static int write_locked(const char *path) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  out_t *o = &out_buf;
  o->fd = fd;
  o->n = 0;
  o->failed = false;
  uint64_t t[4] = {0, 0, 0, 0};
  for (uint32_t i = 0; i < MTP_PROF_STACK_SLOTS; i++) {
    const prof_stack_t *s = &mtp__prof_stacks[i];
    if (s->depth == 0) continue; /* no frames to write: pprof reads no empty stack */
    prof_counts_t c = mtp__prof_counts(s);
    t[0] += (uint64_t)c.live_count;
    t[1] += (uint64_t)c.live_bytes;
    t[2] += (uint64_t)c.alloc_count;
    t[3] += (uint64_t)c.alloc_bytes;
  }
  out_str(o, "heap profile: ");
  out_counts(o, t[0], t[1], t[2], t[3]);
  out_str(o, " heap_v2/");
  out_num(o, mtp__prof_rate, 0, false);
  out_str(o, "\n");
  for (uint32_t i = 0; i < MTP_PROF_STACK_SLOTS; i++) {
    const prof_stack_t *s = &mtp__prof_stacks[i];
    prof_counts_t c = mtp__prof_counts(s);
    if (c.alloc_count == 0 || s->depth == 0) continue;
    out_counts(o, (uint64_t)c.live_count, (uint64_t)c.live_bytes, (uint64_t)c.alloc_count,
               (uint64_t)c.alloc_bytes);
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
  char name[sizeof mtp__prof_path];
  if (path == NULL) path = mtp__prof_path;
  if (!expand_path(name, sizeof name, path, 0)) {
    errno = ENAMETOOLONG;
    return -1;
  }
  int e = errno;
  pthread_mutex_lock(&mtp__prof_lock);
  int rc = write_locked(name);
  int e2 = errno;
  pthread_mutex_unlock(&mtp__prof_lock);
  errno = rc == 0 ? e : e2;
  return rc;
}

/* ---- dumps on a signal ---- */

/* Only if the tables are free now: a handler that waited for mtp__prof_lock could wait for its own
 * thread. Else the dump is left to the next sample. */
static void dump_numbered(void) {
  if (pthread_mutex_trylock(&mtp__prof_lock) != 0) {
    mtp__prof_dump_pending = 1;
    return;
  }
  mtp__prof_dump_pending = 0;
  char name[sizeof mtp__prof_path];
  if (expand_path(name, sizeof name, mtp__prof_path, ++dump_seq)) (void)write_locked(name);
  pthread_mutex_unlock(&mtp__prof_lock);
}

void mtp__prof_dump_on_signal_pending(void) {
  int e = errno;
  dump_numbered();
  errno = e;
}

void mtp__prof_on_signal(int sig) {
  (void)sig;
  int e = errno;
  if (!mtp__tl_prof_busy) dump_numbered();
  else mtp__prof_dump_pending = 1;
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
  double ratio = (double)bytes / (double)count / (double)mtp__prof_rate;
  double keep = ratio < 1e-4 ? ratio - ratio * ratio / 2 : 1 - exp_neg(ratio);
  double scale = keep > 0 ? 1 / keep : 1;
  *est_count = (uint64_t)((double)count * scale + 0.5);
  *est_bytes = (uint64_t)((double)bytes * scale + 0.5);
}

static void show_leaks(void) {
  const char *v = getenv("MTPOOL_SHOW_LEAKS");
  if (v == NULL || *v == 0 || strcmp(v, "0") == 0) return;
  pthread_mutex_lock(&mtp__prof_lock);
  out_t *o = &out_buf;
  o->fd = 2;
  o->n = 0;
  o->failed = false;
  uint64_t total = 0, total_n = 0;
  for (uint32_t i = 0; i < MTP_PROF_STACK_SLOTS; i++) {
    prof_stack_t *s = &mtp__prof_stacks[i];
    prof_counts_t c = mtp__prof_counts(s);
    uint64_t n;
    s->live_sum = (uint64_t)c.live_count;
    unsample(s->live_sum, (uint64_t)c.live_bytes, &n, &s->est_bytes);
    total += s->est_bytes;
    total_n += n;
  }
  out_str(o, "mtpool: leaks: sampled call stacks still holding memory at exit (about ");
  out_num(o, total, 0, false);
  out_str(o, " bytes in ");
  out_num(o, total_n, 0, false);
  out_str(o, " blocks, estimated from samples at 1 in ");
  out_num(o, mtp__prof_rate, 0, false);
  out_str(o, " bytes), largest first:\n");
  /* largest first, up to LEAK_STACKS: each round selects the largest after the previous one in
   * the order (estimated bytes down, slot up); exit only, and the tables are small */
  uint64_t prev = UINT64_MAX;
  uint32_t prev_i = 0;
  for (unsigned shown = 0; shown < LEAK_STACKS; shown++) {
    uint32_t best = UINT32_MAX;
    for (uint32_t i = 0; i < MTP_PROF_STACK_SLOTS; i++) {
      uint64_t b = mtp__prof_stacks[i].est_bytes;
      if (mtp__prof_stacks[i].live_sum == 0 || !(b < prev || (b == prev && i > prev_i))) continue;
      if (best == UINT32_MAX || b > mtp__prof_stacks[best].est_bytes) best = i;
    }
    if (best == UINT32_MAX) break;
    prof_stack_t *s = &mtp__prof_stacks[best];
    prev = s->est_bytes;
    prev_i = best;
    uint64_t n, b;
    unsample(s->live_sum, (uint64_t)mtp__prof_counts(s).live_bytes, &n, &b);
    out_str(o, "mtpool: leaks: about ");
    out_num(o, b, 0, false);
    out_str(o, " bytes in ");
    out_num(o, n, 0, false);
    out_str(o, " blocks (");
    out_num(o, s->live_sum, 0, false);
    out_str(o, " sampled) from:\n");
    out_flush(o);
    /* names from the dynamic symbols, without malloc (backtrace_symbols_fd writes straight out);
     * pprof names the rest */
    if (s->depth > 0) backtrace_symbols_fd(s->pc, (int)s->depth, 2);
    else out_str(o, "  (no stack recorded: the table of stacks was full)\n");
  }
  out_flush(o);
  pthread_mutex_unlock(&mtp__prof_lock);
}

/* ---- exit ---- */

/* Last of mtpool's exit work, so that the other reports run first; a child of fork() writes its
 * own file (its %p). */
__attribute__((destructor(101))) static void prof_exit(void) {
  if (!mtp__prof_on) return;
  int e = errno;
  (void)mtp_profile_dump(NULL);
  show_leaks();
  errno = e;
}

