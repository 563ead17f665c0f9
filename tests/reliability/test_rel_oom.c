/*
 * Out of memory.
 *
 * 1. First use under injection (a fresh child): with every mmap failing before mtpool was ever
 *    used, mtp_alloc, mtp_pool_create and an allocation on a new thread return NULL + ENOMEM (or
 *    succeed from static memory), nothing crashes, and once injection is off everything works.
 * 2. Injection after N successful maps, N = 0 .. 40: a pool is created and filled with every kind
 *    of allocation (small classes, medium, large, aligned, calloc, realloc growth, from the owner
 *    and from another thread) until the maps run out. Every NULL comes with ENOMEM, a failed
 *    realloc leaves the block intact, blocks handed out stay intact, statistics count exactly the
 *    blocks held; after injection is turned off and memory freed, allocation works again, and
 *    mapped memory does not grow from one iteration to the next (no leak on the failure paths).
 * 3. RLIMIT_AS in a child (skipped under ASan/TSan, whose shadow memory needs the address space):
 *    the address space is limited to what the process uses plus 192 MiB; phases of small, page
 *    and large blocks, realloc growth and pool creation run until NULL + ENOMEM; after freeing
 *    and trimming the next phase must get roughly as much again.
 * Also: calloc overflow (ENOMEM) and a bad alignment (EINVAL) always.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include "base/os.h" /* mtp__os_inject_failure */
#include <mtpool/mtpool.h>

#include "testhelper.h"

static const char *g_doing = "setup"; /* the call under way, for the error handler's message */

/* No call here is a misuse: any report is a failure (but the test goes on to find more). */
static void oom_error_handler(int err, const char *msg, void *ptr, void *arg) {
  (void)arg;
  fprintf(stderr, "FAIL mtpool reported err %d (%s) for %p during: %s\n", err, msg, ptr, g_doing);
  th_failures++;
}

static void expect_enomem(const char *what, void *p, int e) {
  if (p) return;
  if (e != ENOMEM) {
    fprintf(stderr, "FAIL %s returned NULL with errno %d (%s), want ENOMEM\n", what, e, strerror(e));
    th_failures++;
  }
}

/* ---- 1. first use under injection --------------------------------------------------------- */
static void *first_use_thread(void *arg) {
  (void)arg;
  errno = 0;
  void *p = mtp_alloc(32);
  int e = errno;
  expect_enomem("mtp_alloc on a new thread under injection", p, e);
  return p;
}

static int first_use_child(void) {
  th_failures = 0;
  mtp__os_inject_failure(0);
  errno = 0;
  void *a = mtp_alloc(16);
  expect_enomem("first mtp_alloc under injection", a, errno);
  errno = 0;
  void *l = mtp_alloc((size_t)8 << 20);
  expect_enomem("first large mtp_alloc under injection", l, errno);
  errno = 0;
  mtp_pool_t *pool = mtp_pool_create(NULL);
  expect_enomem("mtp_pool_create under injection", pool, errno);
  pthread_t t;
  void *tp = NULL;
  if (pthread_create(&t, NULL, first_use_thread, NULL) == 0) pthread_join(t, &tp);
  mtp_stats_t st;
  EXPECT(mtp_pool_stats(NULL, &st) == 0, "stats under injection");
  EXPECT(st.blocks_in_use == (size_t)(a != NULL) + (l != NULL) + (tp != NULL),
            "blocks_in_use %zu under injection", st.blocks_in_use);
  printf("first use under injection: alloc %s, large %s, pool_create %s, thread alloc %s\n",
         a ? "served" : "ENOMEM", l ? "served" : "ENOMEM", pool ? "served" : "ENOMEM",
         tp ? "served" : "ENOMEM");
  mtp__os_inject_failure(-1);
  void *b = mtp_alloc(16), *c = mtp_alloc((size_t)8 << 20);
  mtp_pool_t *p2 = mtp_pool_create(NULL);
  EXPECT(b && c && p2, "allocation after injection off: %p %p %p", b, c, (void *)p2);
  void *d = p2 ? mtp_pool_alloc(p2, 1000) : NULL;
  EXPECT(d, "pool alloc after injection off");
  mtp_free(a);
  mtp_free(l);
  mtp_free(tp);
  mtp_free(b);
  mtp_free(c);
  mtp_free(d);
  mtp_pool_destroy(pool);
  mtp_pool_destroy(p2);
  mtp_pool_stats(NULL, &st);
  EXPECT(st.blocks_in_use == 0, "default pool blocks_in_use %zu at the end", st.blocks_in_use);
  return th_failures ? 1 : 0;
}

/* ---- 2. injection after N maps --------------------------------------------------------------- */
typedef struct held {
  void **p;
  size_t *size;
  uint64_t *tag;
  const char **what; /* which call made it, for failure messages */
  size_t n, cap;
} held_t;

static void held_push(held_t *h, void *p, size_t size, uint64_t tag, const char *what) {
  if (h->n == h->cap) {
    h->cap = h->cap ? h->cap * 2 : 4096;
    h->p = realloc(h->p, h->cap * sizeof *h->p);
    h->size = realloc(h->size, h->cap * sizeof *h->size);
    h->tag = realloc(h->tag, h->cap * sizeof *h->tag);
    h->what = realloc(h->what, h->cap * sizeof *h->what);
    REQUIRE(h->p && h->size && h->tag && h->what, "libc oom");
  }
  th_fill(p, size, tag);
  h->p[h->n] = p;
  h->size[h->n] = size;
  h->tag[h->n] = tag;
  h->what[h->n] = what;
  h->n++;
  static char doing[160];
  snprintf(doing, sizeof doing, "%s of %zu B", what, size);
  g_doing = doing;
  if (mtp_usable_size(p) < size || mtp_pool_of(p) == NULL) {
    fprintf(stderr, "FAIL %s of %zu B gave %p with usable size %zu\n", what, size, p,
            mtp_usable_size(p));
    th_failures++;
  }
}

typedef struct remote_req {
  mtp_pool_t *pool;
  size_t size;
  void *result;
  int err;
} remote_req_t;

static void *remote_alloc(void *arg) {
  remote_req_t *r = arg;
  errno = 0;
  r->result = mtp_pool_alloc(r->pool, r->size);
  r->err = errno;
  return NULL;
}

/* Fill pool (NULL: default) with every kind of allocation until `fails` NULLs in a row or a cap. */
static void fill_until_failure(mtp_pool_t *pool, held_t *h, unsigned *nulls, th_rng_t *r) {
  unsigned in_a_row = 0;
  for (int i = 0; i < 6000 && in_a_row < 60; i++) {
    int kind = (int)th_below(r, 8);
    size_t size;
    void *p = NULL;
    errno = 0;
    const char *what = "?";
    switch (kind) {
      case 0: case 1:
        size = (size_t)th_below(r, 512);
        p = mtp_pool_alloc(pool, size);
        what = "small alloc";
        break;
      case 2:
        size = 4096 + (size_t)th_below(r, 60000);
        p = mtp_pool_alloc(pool, size);
        what = "medium alloc";
        break;
      case 3:
        size = ((size_t)1 << 20) + (size_t)th_below(r, (size_t)3 << 20);
        p = mtp_pool_alloc(pool, size);
        what = "large alloc";
        break;
      case 4: {
        size = (size_t)th_below(r, 20000);
        size_t al = (size_t)1 << (4 + th_below(r, 13)); /* 16 .. 64 KiB */
        p = mtp_pool_alloc_aligned(pool, size, al);
        what = "aligned alloc";
        if (p && ((uintptr_t)p & (al - 1))) {
          fprintf(stderr, "FAIL aligned alloc of %zu B at %zu gave %p\n", size, al, p);
          th_failures++;
        }
        break;
      }
      case 5:
        size = (size_t)th_below(r, 3000);
        p = mtp_pool_calloc(pool, 1, size);
        what = "calloc";
        for (size_t k = 0; p && k < size; k++)
          if (((unsigned char *)p)[k]) {
            fprintf(stderr, "FAIL calloc under injection not zero\n");
            th_failures++;
            break;
          }
        break;
      case 6: { /* realloc growth of a held block */
        if (!h->n) continue;
        size_t k = (size_t)th_below(r, h->n);
        size = h->size[k] * 2 + 1000;
        char doing[160];
        snprintf(doing, sizeof doing, "realloc of a %zu B block from %s", h->size[k], h->what[k]);
        g_doing = doing;
        void *q = mtp_realloc(h->p[k], size);
        int e = errno;
        if (!q) {
          expect_enomem("realloc", q, e);
          if (th_verify(h->p[k], h->size[k], h->tag[k]) != (size_t)-1) {
            fprintf(stderr, "FAIL block changed by a failed realloc\n");
            th_failures++;
          }
          (*nulls)++;
          in_a_row++;
        } else {
          if (th_verify(q, h->size[k], h->tag[k]) != (size_t)-1) {
            fprintf(stderr, "FAIL realloc lost the contents\n");
            th_failures++;
          }
          h->p[k] = q;
          h->size[k] = size;
          th_fill(q, size, h->tag[k]);
          in_a_row = 0;
        }
        continue;
      }
      default: { /* from a thread that was never used before */
        remote_req_t rq = {pool, size = (size_t)th_below(r, 2000), NULL, 0};
        pthread_t t;
        if (pthread_create(&t, NULL, remote_alloc, &rq) != 0) continue;
        pthread_join(t, NULL);
        p = rq.result;
        errno = rq.err;
        what = "alloc on a new thread";
        break;
      }
    }
    if (!p) {
      expect_enomem(what, p, errno);
      (*nulls)++;
      in_a_row++;
    } else {
      held_push(h, p, size, th_next(r), what);
      in_a_row = 0;
    }
  }
}

static void run_injection(void) {
  held_t h = {0};
  th_rng_t r;
  size_t mapped_first = 0, mapped_last = 0;
  unsigned total_nulls = 0, total_served = 0;
  static const long ns[] = {0, 1, 2, 3, 4, 5, 6, 8, 10, 13, 16, 20, 25, 32, 40};
  int n_iter = (int)(sizeof ns / sizeof ns[0]);
  const char *only = getenv("MTP_OOM_ONLY_N"); /* one iteration, for debugging */
  for (int it = 0; it < n_iter; it++) {
    long n = ns[it];
    if (only && atol(only) != n) continue;
    th_rng_seed(&r, 0x00D, (uint64_t)n, 0);
    mtp__os_inject_failure(n);
    errno = 0;
    mtp_options_t o;
    mtp_options_init(&o);
    o.check = it % 3 == 2; /* the checked mode's paths too */
    o.purge_delay_ms = it % 2 ? 0 : 250;
    mtp_pool_t *pool = mtp_pool_create(&o);
    int e = errno;
    expect_enomem("mtp_pool_create", pool, e);
    unsigned nulls = 0;
    h.n = 0;
    fill_until_failure(pool, &h, &nulls, &r); /* pool NULL: the default pool */
    if (pool == NULL && n >= 16) {
      fprintf(stderr, "FAIL mtp_pool_create failed with %ld maps allowed\n", n);
      th_failures++;
    }
    mtp_stats_t st;
    mtp_pool_stats(pool, &st);
    size_t expect_blocks = h.n; /* pool NULL: the default pool, emptied by earlier iterations */
    if (st.blocks_in_use != expect_blocks) {
      fprintf(stderr, "FAIL injection after %ld maps: blocks_in_use %zu, held %zu\n", n,
              st.blocks_in_use, expect_blocks);
      th_failures++;
    }
    mtp__os_inject_failure(-1);
    /* memory works again, even before anything is freed */
    void *again = mtp_pool_alloc(pool, 100), *again_l = mtp_pool_alloc(pool, (size_t)5 << 20);
    if (!again || !again_l) {
      fprintf(stderr, "FAIL allocation after injection off (n=%ld): %p %p errno %d\n", n, again,
              again_l, errno);
      th_failures++;
    }
    mtp_free(again);
    mtp_free(again_l);
    for (size_t k = 0; k < h.n; k++) {
      if (th_verify(h.p[k], h.size[k], h.tag[k]) != (size_t)-1) {
        fprintf(stderr, "FAIL block %zu corrupt after injection (n=%ld)\n", k, n);
        th_failures++;
      }
      if (k & 1)
        mtp_free_sized(h.p[k], h.size[k]);
      else
        mtp_free(h.p[k]);
    }
    mtp_pool_stats(pool, &st);
    if (st.blocks_in_use != 0) {
      fprintf(stderr, "FAIL n=%ld: blocks_in_use %zu after freeing all\n", n, st.blocks_in_use);
      th_failures++;
    }
    total_nulls += nulls;
    total_served += (unsigned)h.n;
    mtp_thread_flush();
    if (pool)
      mtp_pool_destroy(pool);
    else
      mtp_pool_trim(NULL);
    mtp_pool_trim(NULL);
    mtp_stats_t d;
    mtp_pool_stats(NULL, &d);
    if (it == 0) mapped_first = d.bytes_mapped;
    mapped_last = d.bytes_mapped;
    printf("inject after %2ld maps: pool %s, %zu blocks served, %u NULL+ENOMEM; default pool "
           "mapped %zu B\n",
           n, pool ? "created" : "ENOMEM", h.n, nulls, d.bytes_mapped);
  }
  if (total_nulls == 0) {
    fprintf(stderr, "FAIL failure injection never made an allocation fail\n");
    th_failures++;
  }
  if (mapped_last > mapped_first + ((size_t)16 << 20)) {
    fprintf(stderr, "FAIL default pool mapping grows across injection rounds: %zu -> %zu B\n",
            mapped_first, mapped_last);
    th_failures++;
  }
  printf("injection: %u blocks served, %u allocations failed cleanly\n", total_served, total_nulls);
  free(h.p);
  free(h.size);
  free(h.tag);
  free(h.what);
}

/* ---- 3. RLIMIT_AS ----------------------------------------------------------------------------- */
static size_t vm_size(void) {
  long kb = th_status_kb("VmSize");
  return kb > 0 ? (size_t)kb * 1024 : 0;
}

static size_t phase(const char *name, size_t size, void **ptrs, size_t cap, int free_after) {
  size_t n = 0;
  for (; n < cap; n++) {
    errno = 0;
    ptrs[n] = mtp_alloc(size);
    if (!ptrs[n]) {
      expect_enomem(name, NULL, errno);
      break;
    }
    memset(ptrs[n], (int)n, size < 64 ? size : 64);
  }
  if (n == cap) {
    fprintf(stderr, "FAIL %s: %zu blocks of %zu B and no ENOMEM under RLIMIT_AS\n", name, n, size);
    th_failures++;
  }
  if (free_after) {
    for (size_t i = 0; i < n; i++) mtp_free(ptrs[i]);
    mtp_thread_flush();
    mtp_pool_trim(NULL);
  }
  printf("rlimit %-7s: %8zu blocks of %7zu B (%zu MiB) before ENOMEM\n", name, n, size,
         n * size >> 20);
  return n;
}

static int rlimit_child(void) {
  th_failures = 0;
  const size_t headroom = (size_t)192 << 20;
  size_t cap = (headroom / 32) + 1000;
  void **ptrs = malloc(cap * sizeof *ptrs); /* before the limit */
  REQUIRE(ptrs, "malloc");
  memset(ptrs, 0, cap * sizeof *ptrs);
  void *warm = mtp_alloc(10);
  mtp_free(warm);
  struct rlimit rl;
  size_t vs = vm_size();
  rl.rlim_cur = rl.rlim_max = vs + headroom;
  if (setrlimit(RLIMIT_AS, &rl) != 0) {
    perror("setrlimit");
    return 1;
  }
  size_t a1 = phase("small", 48, ptrs, cap, 1);
  size_t b = phase("page", 4096, ptrs, cap, 1);
  size_t c = phase("large", (size_t)3 << 20, ptrs, cap, 1);
  size_t a2 = phase("small", 48, ptrs, cap, 0);
  /* with everything full: every other kind of call fails cleanly */
  errno = 0;
  void *x = mtp_alloc((size_t)3 << 20);
  expect_enomem("large alloc when full", x, errno);
  errno = 0;
  mtp_pool_t *pool = mtp_pool_create(NULL);
  int pe = errno;
  void *pa = NULL;
  if (pool) {
    errno = 0;
    pa = mtp_pool_alloc(pool, 100);
    expect_enomem("new pool alloc when full", pa, errno);
  } else {
    expect_enomem("pool create when full", pool, pe);
  }
  errno = 0;
  void *al = mtp_alloc_aligned(100, (size_t)1 << 20);
  expect_enomem("aligned alloc when full", al, errno);
  for (size_t i = 0; i < a2; i++) mtp_free(ptrs[i]);
  mtp_free(x);
  mtp_free(pa);
  mtp_free(al);
  mtp_pool_destroy(pool);
  mtp_thread_flush();
  mtp_pool_trim(NULL);
  /* realloc growth until it fails: the block is left intact */
  char *g = mtp_alloc(1000);
  memset(g, 0x33, 1000);
  size_t gsz = 1000;
  for (;;) {
    errno = 0;
    char *ng = mtp_realloc(g, gsz * 2);
    if (!ng) {
      expect_enomem("realloc growth", NULL, errno);
      for (size_t i = 0; i < 1000; i++)
        if ((unsigned char)g[i] != 0x33) {
          fprintf(stderr, "FAIL realloc failure changed the block\n");
          th_failures++;
          break;
        }
      break;
    }
    g = ng;
    gsz *= 2;
  }
  printf("rlimit realloc: grew to %zu MiB before ENOMEM\n", gsz >> 20);
  mtp_free(g);
  mtp_pool_trim(NULL);
  size_t a3 = phase("small", 48, ptrs, cap, 1);
  /* memory given back is usable again: the later phases get about as much as the first */
  if (a2 < a1 * 8 / 10 || a3 < a1 * 8 / 10) {
    fprintf(stderr, "FAIL memory not reusable after free+trim: small phase %zu then %zu, %zu\n",
            a1, a2, a3);
    th_failures++;
  }
  if (b == 0 || c == 0) {
    fprintf(stderr, "FAIL a phase got nothing: page %zu, large %zu\n", b, c);
    th_failures++;
  }
  mtp_stats_t st;
  mtp_pool_stats(NULL, &st);
  EXPECT(st.blocks_in_use == 0, "blocks_in_use %zu at the end", st.blocks_in_use);
  free(ptrs);
  return th_failures ? 1 : 0;
}

static int run_child(int (*fn)(void), const char *name) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(120);
    exit(fn());
  }
  int st;
  waitpid(pid, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    char b[64];
    fprintf(stderr, "FAIL %s child: %s\n", name, th_status_str(st, b, sizeof b));
    return 1;
  }
  return 0;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  double t0 = th_now();
  /* before this process touches mtpool, so the child's first use is really the first */
  th_failures += run_child(first_use_child, "first use under injection");

  errno = 0;
  void *p = mtp_calloc(th_opaque((size_t)1 << 40), th_opaque((size_t)1 << 40));
  EXPECT(p == NULL && errno == ENOMEM, "calloc overflow: %p errno %d", p, errno);
  errno = 0;
  p = mtp_alloc_aligned(64, 48);
  EXPECT(p == NULL && errno == EINVAL, "alignment 48: %p errno %d", p, errno);
  errno = 0;
  p = mtp_alloc(th_opaque((size_t)-1 / 2));
  EXPECT(p == NULL && errno == ENOMEM, "alloc SIZE_MAX/2: %p errno %d", p, errno);
  errno = 0;
  p = mtp_alloc_aligned(th_opaque((size_t)-1 - 4096), 4096);
  EXPECT(p == NULL && errno == ENOMEM, "aligned alloc near SIZE_MAX: %p errno %d", p, errno);
  void *q = mtp_alloc(100);
  errno = 0;
  p = mtp_realloc(q, th_opaque((size_t)-1 - 100));
  EXPECT(p == NULL && errno == ENOMEM, "realloc to SIZE_MAX-100: %p errno %d", p, errno);
  mtp_free(q);

  mtp_set_error_handler(oom_error_handler, NULL);
  run_injection();

  if (TH_ASAN || TH_TSAN)
    printf("SKIP part: RLIMIT_AS under a sanitizer (its shadow memory needs the address space)\n");
  else
    th_failures += run_child(rlimit_child, "RLIMIT_AS");
  printf("oom: %.1f s, %d failures\n", th_now() - t0, th_failures);
  return th_failures ? 1 : 0;
}
