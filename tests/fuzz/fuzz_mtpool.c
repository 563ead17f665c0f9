/*
 * libFuzzer target: input bytes become a sequence of mtpool calls (alloc, calloc, aligned alloc,
 * free, sized free, realloc, pool create/destroy, trim, thread flush, frees and allocations on a
 * second thread, mmap failure injection), each checked against a model:
 *   - every live block keeps the pattern written into it (no overlap, no reuse while live);
 *   - a new block does not overlap a live one, is aligned as asked, has mtp_usable_size >= size,
 *     belongs to the pool it came from; calloc blocks are zero; realloc keeps the contents;
 *   - NULL only while failure injection is on, and then with errno ENOMEM (EINVAL for a bad
 *     alignment, always);
 *   - each pool's blocks_in_use equals the model's count, allocs - frees == blocks_in_use, and for
 *     created pools allocs and frees equal the model's;
 *   - no call is ever reported to the error handler (the sequences are all legal).
 * At the end of each input everything is freed, created pools destroyed, and the default pool must
 * hold no block.
 *
 * Built as a libFuzzer binary (MTPOOL_FUZZ=ON, clang) and, in every build, as a replay test that
 * runs the seed corpus and generated inputs (fuzz_replay_main.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mtpool/mtpool.h>

#include "base/os.h" /* mtp__os_inject_failure */

/* The model's byte loops (patterns, zero checks, overlap) are not what the fuzzer should learn
 * from, and tracing their comparisons made it several times slower. */
#if defined(__clang__) && __clang_major__ >= 13
#define FZ_NOCOV __attribute__((no_sanitize("coverage")))
#else
#define FZ_NOCOV
#endif

#define FZ_SLOTS 64
#define FZ_POOLS 5 /* [0] the default pool */
#define FZ_LIVE_CAP ((size_t)96 << 20)

typedef struct fz_blk {
  unsigned char *p;
  size_t size;
  uint64_t tag;
  int pool;
  size_t align; /* alignment asked for, 0: plain */
} fz_blk_t;

typedef struct fz_pool {
  mtp_pool_t *pool;
  int live;
  uint64_t allocs, frees; /* model's counts since the pool was created */
  int check;
} fz_pool_t;

static fz_blk_t g_blk[FZ_SLOTS];
static fz_pool_t g_pool[FZ_POOLS];
static size_t g_live_bytes;
static int g_injecting;
static uint64_t g_tag;

/* ---- input decoding ---------------------------------------------------------------------------*/
typedef struct fz_in {
  const uint8_t *d;
  size_t n, i;
} fz_in_t;

static unsigned fz_u8(fz_in_t *in) { return in->i < in->n ? in->d[in->i++] : 0; }


static size_t fz_size(fz_in_t *in) {
  unsigned k = fz_u8(in);
  switch (k >> 6) {
    case 0: return k & 63;                             /* 0 .. 63 */
    case 1: return ((size_t)(k & 63) << 8) | fz_u8(in); /* .. 16 KiB */
    case 2: return ((size_t)(k & 63) << 12) | ((size_t)fz_u8(in) << 4); /* .. 256 KiB */
    default: {                                         /* class boundaries and large blocks */
      static const size_t edge[] = {8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 2048,
                                    4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288,
                                    (size_t)1 << 20, (size_t)2 << 20, (size_t)4 << 20};
      size_t e = edge[(k & 63) % (sizeof edge / sizeof edge[0])];
      unsigned d = fz_u8(in) % 5;
      return d == 0 ? e - 1 : d == 1 ? e : d == 2 ? e + 1 : d == 3 ? e - 8 : e + 8;
    }
  }
}

/* ---- pattern ----------------------------------------------------------------------------------*/
FZ_NOCOV static unsigned char fz_byte(uint64_t tag, size_t i) {
  return (unsigned char)((tag * 0x9E3779B97F4A7C15ull + i * 0x2545F4914F6CDD1Dull) >> 56);
}

/* Blocks over 16 KiB get their first and last 4 KiB and one byte per 64 KiB in between written:
 * touching every page of every large block would make the fuzzer slow. */
FZ_NOCOV static void fz_fill(unsigned char *p, size_t n, uint64_t tag) {
  if (n <= 16384) {
    for (size_t i = 0; i < n; i++) p[i] = fz_byte(tag, i);
    return;
  }
  for (size_t i = 0; i < 4096; i++) p[i] = fz_byte(tag, i);
  for (size_t i = n - 4096; i < n; i++) p[i] = fz_byte(tag, i);
  for (size_t i = 4096; i < n - 4096; i += 65521) p[i] = fz_byte(tag, i);
}

/* Whether the bytes fz_fill(p, n, tag) wrote below `upto` are still there. */
FZ_NOCOV static int fz_intact(const unsigned char *p, size_t n, uint64_t tag, size_t upto) {
  if (n <= 16384) {
    size_t m = n < upto ? n : upto;
    for (size_t i = 0; i < m; i++)
      if (p[i] != fz_byte(tag, i)) return 0;
    return 1;
  }
  for (size_t i = 0; i < 4096 && i < upto; i++)
    if (p[i] != fz_byte(tag, i)) return 0;
  for (size_t i = 4096; i < n - 4096 && i < upto; i += 65521)
    if (p[i] != fz_byte(tag, i)) return 0;
  for (size_t i = n - 4096; i < n && i < upto; i++)
    if (p[i] != fz_byte(tag, i)) return 0;
  return 1;
}

#define FZ_FAIL(...)                          \
  do {                                        \
    fprintf(stderr, "mtpool fuzz: " __VA_ARGS__); \
    fputc('\n', stderr);                      \
    abort();                                  \
  } while (0)

static void fz_error_handler(int err, const char *msg, void *ptr, void *arg) {
  (void)arg;
  FZ_FAIL("error handler called on a legal sequence: err %d, %s, ptr %p", err, msg, ptr);
}

/* ---- a second thread, driven synchronously -----------------------------------------------------*/
#define FZ_BATCH 32

typedef struct fz_req {
  int op; /* 1 free the batch, 2 alloc, 3 flush */
  void *p;
  size_t size;
  mtp_pool_t *pool;
  void *result;
  int err;
} fz_req_t;

/* Remote frees are queued and handed to the helper thread in batches: one hand-over per batch
 * keeps the fuzzer fast (a hand-over is two context switches). */
static void *g_batch_p[FZ_BATCH];
static size_t g_batch_size[FZ_BATCH]; /* (size_t)-1: mtp_free, else mtp_free_sized */
static int g_batch_n;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static fz_req_t *g_req;
static int g_req_done;
static int g_helper_started;

static void *fz_helper(void *arg) {
  (void)arg;
  pthread_mutex_lock(&g_mu);
  for (;;) {
    while (!g_req || g_req_done) pthread_cond_wait(&g_cv, &g_mu);
    fz_req_t *r = g_req;
    pthread_mutex_unlock(&g_mu);
    errno = 0;
    switch (r->op) {
      case 1:
        for (int i = 0; i < g_batch_n; i++) {
          if (g_batch_size[i] == (size_t)-1)
            mtp_free(g_batch_p[i]);
          else
            mtp_free_sized(g_batch_p[i], g_batch_size[i]);
        }
        g_batch_n = 0;
        break;
      case 2: r->result = mtp_pool_alloc(r->pool, r->size); break;
      case 3: mtp_thread_flush(); break;
    }
    r->err = errno;
    pthread_mutex_lock(&g_mu);
    g_req_done = 1;
    pthread_cond_broadcast(&g_cv);
  }
  return NULL;
}

static void fz_remote(fz_req_t *r) {
  if (!g_helper_started) {
    pthread_t t;
    if (pthread_create(&t, NULL, fz_helper, NULL) != 0) FZ_FAIL("pthread_create");
    pthread_detach(t);
    g_helper_started = 1;
  }
  pthread_mutex_lock(&g_mu);
  g_req = r;
  g_req_done = 0;
  pthread_cond_broadcast(&g_cv);
  while (!g_req_done) pthread_cond_wait(&g_cv, &g_mu);
  g_req = NULL;
  pthread_mutex_unlock(&g_mu);
}

static void fz_batch_flush(void) {
  if (!g_batch_n) return;
  fz_req_t r = {.op = 1};
  fz_remote(&r);
}

static void fz_batch_add(void *p, size_t size) {
  g_batch_p[g_batch_n] = p;
  g_batch_size[g_batch_n] = size;
  if (++g_batch_n == FZ_BATCH) fz_batch_flush();
}

/* ---- model checks -----------------------------------------------------------------------------*/
static mtp_pool_t *fz_handle(int pi) { return pi == 0 ? mtp_default_pool() : g_pool[pi].pool; }

FZ_NOCOV static void fz_check_new(unsigned char *p, size_t size, size_t align, int pi, int zeroed) {
  size_t u = mtp_usable_size(p);
  if (u < size) FZ_FAIL("usable size %zu < %zu", u, size);
  if (mtp_pool_of(p) != fz_handle(pi)) FZ_FAIL("pool_of(%p) wrong (pool %d)", (void *)p, pi);
  if (size >= 2 && mtp_pool_of(p + size / 2 + 1) != NULL) /* inside the block: not a block start */
    FZ_FAIL("pool_of(%p + %zu) of a %zu B block is not NULL", (void *)p, size / 2 + 1, size);
  if (align && ((uintptr_t)p & (align - 1)))
    FZ_FAIL("%p (size %zu) not aligned to %zu", (void *)p, size, align);
  size_t len = size ? size : 1;
  for (int i = 0; i < FZ_SLOTS; i++) {
    fz_blk_t *b = &g_blk[i];
    if (!b->p) continue;
    size_t bl = b->size ? b->size : 1;
    if (p < b->p + bl && b->p < p + len)
      FZ_FAIL("new block %p+%zu overlaps live block %p+%zu", (void *)p, size, (void *)b->p, b->size);
  }
  if (zeroed)
    for (size_t i = 0; i < size; i++)
      if (p[i]) FZ_FAIL("calloc block %p byte %zu is %#x", (void *)p, i, p[i]);
}

static void fz_null_ok(const char *what, size_t size) {
  int e = errno;
  if (!g_injecting) FZ_FAIL("%s(%zu) returned NULL without failure injection (errno %d)", what, size, e);
  if (e != ENOMEM) FZ_FAIL("%s(%zu) returned NULL with errno %d, want ENOMEM", what, size, e);
}

FZ_NOCOV static void fz_verify(const fz_blk_t *b) {
  if (!fz_intact(b->p, b->size, b->tag, (size_t)-1))
    FZ_FAIL("block %p (size %zu, pool %d) lost its contents", (void *)b->p, b->size, b->pool);
}

static void fz_put(int slot, unsigned char *p, size_t size, int pi) {
  fz_blk_t *b = &g_blk[slot];
  b->p = p;
  b->size = size;
  b->tag = ++g_tag;
  b->pool = pi;
  b->align = 0;
  fz_fill(p, size, b->tag);
  g_live_bytes += size;
  g_pool[pi].live++;
  g_pool[pi].allocs++;
}

static void fz_drop(int slot) {
  fz_blk_t *b = &g_blk[slot];
  g_live_bytes -= b->size;
  g_pool[b->pool].live--;
  g_pool[b->pool].frees++;
  b->p = NULL;
}

static void fz_check_stats(void) {
  fz_batch_flush();
  for (int pi = 0; pi < FZ_POOLS; pi++) {
    if (pi && !g_pool[pi].pool) continue;
    mtp_stats_t st;
    if (mtp_pool_stats(fz_handle(pi), &st) != 0) FZ_FAIL("stats");
    if (st.blocks_in_use != (size_t)g_pool[pi].live)
      FZ_FAIL("pool %d: blocks_in_use %zu, model %d", pi, st.blocks_in_use, g_pool[pi].live);
    if (st.allocs - st.frees != st.blocks_in_use)
      FZ_FAIL("pool %d: allocs %llu - frees %llu != blocks_in_use %zu", pi,
              (unsigned long long)st.allocs, (unsigned long long)st.frees, st.blocks_in_use);
    if (pi && (st.allocs != g_pool[pi].allocs || st.frees != g_pool[pi].frees))
      FZ_FAIL("pool %d: allocs/frees %llu/%llu, model %llu/%llu", pi,
              (unsigned long long)st.allocs, (unsigned long long)st.frees,
              (unsigned long long)g_pool[pi].allocs, (unsigned long long)g_pool[pi].frees);
    if (st.bytes_reserved < st.bytes_in_use)
      FZ_FAIL("pool %d: reserved %zu < in use %zu", pi, st.bytes_reserved, st.bytes_in_use);
    /* every size class's blocks and the large ones are the blocks in use (a checked pool's
     * zero-size blocks are in no class) */
    mtp_class_stats_t cs[256];
    int nc = mtp_pool_class_stats(fz_handle(pi), cs, 256);
    if (nc <= 0 || nc > 256) FZ_FAIL("pool %d: %d size classes", pi, nc);
    size_t by_class = st.large_blocks;
    for (int c = 0; c < nc; c++) by_class += cs[c].blocks_in_use;
    if (g_pool[pi].check ? by_class > st.blocks_in_use : by_class != st.blocks_in_use)
      FZ_FAIL("pool %d: classes and large blocks %zu, blocks_in_use %zu", pi, by_class,
              st.blocks_in_use);
  }
}

static int fz_pick_pool(fz_in_t *in) {
  int pi = (int)(fz_u8(in) % FZ_POOLS);
  return pi && !g_pool[pi].pool ? 0 : pi;
}

static void fz_free_slot(int s, int how) {
  fz_blk_t *b = &g_blk[s];
  fz_verify(b);
  if (how == 1) {
    mtp_free_sized(b->p, b->size);
  } else if (how == 2 && !g_pool[b->pool].check) {
    /* unchecked pools: any size from the requested one up to the usable size is legal */
    size_t u = mtp_usable_size(b->p);
    mtp_free_sized(b->p, b->size + (u - b->size) / 2);
  } else if (how == 3 && !g_pool[b->pool].check) {
    mtp_free_sized(b->p, mtp_usable_size(b->p));
  } else if (how == 4) {
    fz_batch_add(b->p, (size_t)-1);
  } else if (how == 5) {
    fz_batch_add(b->p, b->size);
  } else {
    mtp_free(b->p);
  }
  fz_drop(s);
}

static void fz_destroy_pool(int pi) {
  fz_batch_flush(); /* queued frees may be of this pool's blocks */
  for (int s = 0; s < FZ_SLOTS; s++)
    if (g_blk[s].p && g_blk[s].pool == pi) {
      fz_verify(&g_blk[s]);
      g_live_bytes -= g_blk[s].size;
      g_blk[s].p = NULL;
    }
  mtp_pool_destroy(g_pool[pi].pool);
  memset(&g_pool[pi], 0, sizeof g_pool[pi]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int init;
  if (!init) {
    mtp_set_error_handler(fz_error_handler, NULL);
    init = 1;
  }
  fz_in_t in = {data, size, 0};
  int ops = 0;
  while (in.i < in.n && ops++ < 4096) {
    unsigned op = fz_u8(&in) % 16;
    int s = (int)(fz_u8(&in) % FZ_SLOTS);
    fz_blk_t *b = &g_blk[s];
    switch (op) {
      case 0: case 1: case 2: { /* alloc, calloc, aligned alloc into slot s */
        int pi = fz_pick_pool(&in);
        size_t n = fz_size(&in), align = 0;
        if (b->p) fz_free_slot(s, 0);
        if (g_live_bytes + n > FZ_LIVE_CAP) break;
        unsigned char *p;
        errno = 0;
        if (op == 0) {
          p = pi == 0 && (n & 1) ? mtp_alloc(n) : mtp_pool_alloc(fz_handle(pi), n);
        } else if (op == 1) {
          size_t cnt = 1 + fz_u8(&in) % 4, each = n / cnt;
          n = cnt * each;
          p = pi == 0 && (n & 1) ? mtp_calloc(cnt, each) : mtp_pool_calloc(fz_handle(pi), cnt, each);
        } else {
          unsigned a = fz_u8(&in);
          align = (size_t)1 << (a % 17); /* 1 .. 64 KiB */
          if (a >= 240) { /* not a power of two: EINVAL, always */
            size_t bad = align * 3;
            errno = 0;
            void *q = mtp_pool_alloc_aligned(fz_handle(pi), n, bad);
            if (q || errno != EINVAL) FZ_FAIL("alignment %zu: %p errno %d, want NULL EINVAL", bad, q, errno);
            break;
          }
          p = pi == 0 && (n & 1) ? mtp_alloc_aligned(n, align)
                                 : mtp_pool_alloc_aligned(fz_handle(pi), n, align);
        }
        if (!p) {
          fz_null_ok(op == 0 ? "alloc" : op == 1 ? "calloc" : "alloc_aligned", n);
          break;
        }
        fz_check_new(p, n, align, pi, op == 1);
        fz_put(s, p, n, pi);
        b->align = align;
        break;
      }
      case 3: case 4: /* free, sized free (several legal sizes), remote free */
        if (b->p) fz_free_slot(s, op == 3 ? (int)(fz_u8(&in) % 6) : 1);
        break;
      case 5: { /* realloc (NULL: like alloc) */
        size_t n = fz_size(&in);
        if (g_live_bytes + n > FZ_LIVE_CAP) break;
        if (!b->p) {
          errno = 0;
          unsigned char *p = mtp_realloc(NULL, n);
          if (!p) {
            fz_null_ok("realloc(NULL)", n);
            break;
          }
          fz_check_new(p, n, 0, 0, 0);
          fz_put(s, p, n, 0);
          break;
        }
        fz_verify(b);
        errno = 0;
        unsigned char *p = mtp_realloc(b->p, n);
        if (!p) {
          fz_null_ok("realloc", n);
          fz_verify(b); /* untouched on failure */
          break;
        }
        size_t keep = n < b->size ? n : b->size;
        if (!fz_intact(p, b->size, b->tag, keep))
          FZ_FAIL("realloc %p -> %p (%zu -> %zu) lost the contents", (void *)b->p, (void *)p,
                  b->size, n);
        int pi = b->pool;
        unsigned char *old = b->p;
        g_live_bytes -= b->size;
        b->p = NULL;
        fz_check_new(p, n, 0, pi, 0);
        g_live_bytes += n;
        b->p = p;
        b->size = n;
        b->align = 0;
        b->tag = ++g_tag;
        fz_fill(p, n, b->tag);
        if (p != old) {
          g_pool[pi].allocs++;
          g_pool[pi].frees++;
        }
        break;
      }
      case 6: { /* create a pool */
        int pi = 1 + s % (FZ_POOLS - 1);
        if (g_pool[pi].pool) break;
        unsigned o = fz_u8(&in);
        mtp_options_t opt;
        mtp_options_init(&opt);
        opt.check = (int)(o & 1);
        opt.purge_delay_ms = (o & 6) == 0 ? 0 : (o & 6) == 2 ? -1 : 250;
        opt.thread_cache_bytes = (o & 8) ? 0 : (o & 16) ? 4096 : opt.thread_cache_bytes;
        opt.name = (o & 32) ? "fuzz-pool-with-a-name-longer-than-forty-seven-bytes-to-be-cut" : NULL;
        errno = 0;
        mtp_pool_t *p = mtp_pool_create(&opt);
        if (!p) {
          fz_null_ok("pool_create", 0);
          break;
        }
        if (strlen(mtp_pool_name(p)) > 47) FZ_FAIL("pool name longer than 47 bytes");
        g_pool[pi].pool = p;
        g_pool[pi].check = opt.check;
        break;
      }
      case 7: { /* destroy a pool, blocks in use included */
        int pi = 1 + s % (FZ_POOLS - 1);
        if (g_pool[pi].pool) fz_destroy_pool(pi);
        break;
      }
      case 8: { /* trim */
        int pi = fz_pick_pool(&in);
        mtp_pool_trim(fz_handle(pi));
        break;
      }
      case 9: /* hand this thread's caches back; or the helper's */
        if (s & 1) {
          fz_req_t r = {.op = 3};
          fz_remote(&r);
        } else {
          mtp_thread_flush();
        }
        break;
      case 10: { /* allocate on the helper thread: freeing it here later is a remote free */
        int pi = fz_pick_pool(&in);
        size_t n = fz_size(&in);
        if (b->p) fz_free_slot(s, 0);
        if (g_live_bytes + n > FZ_LIVE_CAP) break;
        fz_req_t r = {.op = 2, .size = n, .pool = fz_handle(pi)};
        fz_remote(&r);
        if (!r.result) {
          errno = r.err;
          fz_null_ok("remote alloc", n);
          break;
        }
        fz_check_new(r.result, n, 0, pi, 0);
        fz_put(s, r.result, n, pi);
        break;
      }
      case 11: { /* failure injection on or off */
        unsigned k = fz_u8(&in);
        if (k < 128) {
          mtp__os_inject_failure((long)(k % 8));
          g_injecting = 1;
        } else {
          mtp__os_inject_failure(-1);
          g_injecting = 0;
        }
        break;
      }
      case 12: fz_check_stats(); break;
      case 13:
        for (int i = 0; i < FZ_SLOTS; i++)
          if (g_blk[i].p) fz_verify(&g_blk[i]);
        break;
      case 14:
        if (b->p) {
          if (mtp_usable_size(b->p) < b->size) FZ_FAIL("usable size shrank");
          if (mtp_pool_of(b->p) != fz_handle(b->pool)) FZ_FAIL("pool_of changed");
        }
        break;
      case 15: { /* free several at once */
        for (int i = 0; i < FZ_SLOTS; i += 1 + s % 7)
          if (g_blk[i].p) fz_free_slot(i, i % 6);
        break;
      }
    }
  }
  /* end of input: the process must be left as it was found */
  mtp__os_inject_failure(-1);
  g_injecting = 0;
  fz_check_stats();
  for (int s = 0; s < FZ_SLOTS; s++)
    if (g_blk[s].p) fz_free_slot(s, s % 2);
  for (int pi = 1; pi < FZ_POOLS; pi++)
    if (g_pool[pi].pool) fz_destroy_pool(pi);
  fz_check_stats();
  if (g_live_bytes != 0) FZ_FAIL("model accounting: %zu live bytes left", g_live_bytes);
  /* default pool figures are cumulative; keep only the live count in the model */
  g_pool[0].allocs = g_pool[0].frees = 0;
  return 0;
}
