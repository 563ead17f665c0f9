/* Unit test of the heap layer's lists: the current slab, the full list (at most
 * MTP_FULL_PER_CLASS exhausted slabs; older ones are detached), a free into a full slab moving it
 * to partial, a free into a detached slab taking it back, an empty slab going to the cache, and
 * thread flush; mtp__heap_validate checks the lists and every slab on them at each step. Then the
 * cache: a slab taken back by its own class keeps its free list and bump pointer (no carving
 * again), another class of as many pages formats it, and a full cache lets its oldest slab go.
 * Cold classes: a heap that joins a pool after another takes its first blocks of a class from the
 * pool's shared heap, a bounded number, then from its own slabs; the pool's first heap never
 * does; threads that each allocate a little share slabs; trim gives the shared heaps' slabs
 * back; threads on CPUs of different shared heaps take their first blocks from different ones.
 * The partial list is a queue (the slab freed into first is used first), a thread that frees
 * into a slab it let go keeps more exhausted slabs of that class (past 128, all). Remote frees
 * before fresh memory: a page's worth back is taken before the current slab carves its next OS
 * page, and with no exhausted slab half back the one with the most (an eighth at least) is taken
 * before a fresh slab.
 * The reuse lists: blocks the thread freed into its own slabs (above 1 KiB every such free, up to
 * 1 KiB frees into exhausted slabs while the current one is exhausted too), handed out again
 * newest first, free to the statistics and the walk, a second free reported, bounded, given back
 * at trim, flush and before a slab is let go. */
#define _GNU_SOURCE /* CPU affinity */
#include "heap/heap.h"
#include "testhelper.h"

#include <sched.h>

#include "base/os.h"

#include <pthread.h>

static void test_lists(void) {
  mtp_options_t o;
  mtp_options_init(&o);
  o.purge_delay_ms = -1;
  mtpi_pool_t *pool = mtp__pool_in(mtp_pool_create(&o));
  CHECK(pool != NULL);
  unsigned cls = mtp__class_of(1024);
  enum { SLABS = 4 };
  uint32_t cap = (uint32_t)((mtp__class_pages[cls] * MTP_PAGE_SIZE) / 1024);
  void **b = calloc((size_t)cap * SLABS + 1, sizeof(void *));
  for (uint32_t i = 0; i < cap * SLABS + 1; i++) CHECK((b[i] = mtp_pool_alloc(mtp__pool_out(pool), 1024)) != NULL);
  mtpi_heap_t *h = mtp__thread_heap(mtp__tl_thread, pool->id);
  CHECK(h != NULL);
  mtp__heap_validate(h);
  CHECK_EQ_SZ(h->full_count[cls], MTP_FULL_PER_CLASS);
  mtpi_desc_t *first = mtp__run_of((uintptr_t)b[0]); /* the oldest: detached */
  CHECK_EQ_SZ(mtp__load_relaxed(&first->owner), 0);
  CHECK(!(mtp__load_relaxed(&first->thread_free) & MTP_TF_OWNED));
  mtpi_desc_t *full = mtp__run_of((uintptr_t)b[cap * (SLABS - 1) - 1]);
  CHECK_EQ_SZ(full->list, MTP_LIST_HEAP_FULL);
  /* a free into a full slab: to partial */
  mtp_free(b[cap * (SLABS - 1) - 1]);
  CHECK_EQ_SZ(full->list, MTP_LIST_HEAP_PARTIAL);
  CHECK_EQ_SZ(h->full_count[cls], MTP_FULL_PER_CLASS - 1);
  mtp__heap_validate(h);
  /* a free into the detached slab: taken back, onto partial */
  mtp_free(b[0]);
  CHECK_EQ_SZ(mtp__load_relaxed(&first->owner), (uintptr_t)mtp__tl_thread);
  CHECK_EQ_SZ(first->list, MTP_LIST_HEAP_PARTIAL);
  mtp__heap_validate(h);
  /* empty the first slab: it goes to the heap's cache */
  for (uint32_t i = 1; i < cap; i++) mtp_free(b[i]);
  CHECK_EQ_SZ(first->list, MTP_LIST_HEAP_CACHE);
  CHECK(h->m.cache != NULL);
  mtp__heap_validate(h);
  for (uint32_t i = cap; i < cap * SLABS + 1; i++)
    if (i != cap * (SLABS - 1) - 1) mtp_free(b[i]);
  mtp__heap_validate(h);
  mtp_stats_t st;
  mtp_pool_stats(mtp__pool_out(pool), &st);
  CHECK_EQ_SZ(st.blocks_in_use, 0);
  mtp_thread_flush();
  CHECK(mtp__thread_heap(mtp__tl_thread, pool->id) == NULL);
  mtp_pool_destroy(mtp__pool_out(pool));
  free(b);
}

/* Fills one slab of class cls (and one block of the next), frees them all but that block: the
 * full slab becomes empty and is cached. Returns it; *keep gets the block left. */
static mtpi_desc_t *cache_one(mtp_pool_t *pool, size_t size, void **keep) {
  unsigned cls = mtp__class_of(size);
  uint32_t cap = (uint32_t)((mtp__class_pages[cls] * MTP_PAGE_SIZE) / mtp__class_size[cls]);
  void **b = calloc((size_t)cap + 1, sizeof(void *));
  CHECK(b != NULL);
  for (uint32_t i = 0; i <= cap; i++) CHECK((b[i] = mtp_pool_alloc(pool, size)) != NULL);
  mtpi_desc_t *s = mtp__run_of((uintptr_t)b[0]);
  CHECK(mtp__run_of((uintptr_t)b[cap]) != s); /* the current slab now */
  for (uint32_t i = 0; i < cap; i++) mtp_free(b[i]);
  if (mtp__class_size[cls] > MTP_DIRECT_MAX) { /* the blocks freed last are listed, the slab not empty */
    CHECK(s->list != MTP_LIST_HEAP_CACHE);
    mtp__heap_unlist(mtp__pool_in(pool));
  }
  CHECK_EQ_SZ(s->list, MTP_LIST_HEAP_CACHE);
  *keep = b[cap];
  free(b);
  return s;
}

static void test_cache_keeps_format(void) {
  mtp_options_t o;
  mtp_options_init(&o);
  o.purge_delay_ms = -1;
  o.thread_cache_bytes = 8 * MTP_PAGE_SIZE; /* one 8-page slab (classes above 16 KiB) */
  mtp_pool_t *pool = mtp_pool_create(&o);
  CHECK(pool != NULL);
  mtpi_heap_t *h;
  void *k1, *k2, *k3;
  /* the same class takes its cached slab back as it was: the block freed last comes first */
  mtpi_desc_t *s = cache_one(pool, 24576, &k1);
  char *bump = mtp__slab_bump(s);
  CHECK(bump == s->end);
  mtpi_block_t *head = s->free;
  CHECK(head != NULL);
  void *keep_cur = k1; /* the current slab still has room: fill it so the cache is asked */
  unsigned cls = mtp__class_of(24576);
  h = mtp__thread_heap(mtp__tl_thread, mtp__pool_in(pool)->id);
  mtpi_desc_t *cur = h->current[cls];
  uint32_t left = cur->capacity - MTP_USED(cur);
  void **more = calloc((size_t)left + 2, sizeof(void *));
  CHECK(more != NULL);
  for (uint32_t i = 0; i < left; i++) CHECK((more[i] = mtp_pool_alloc(pool, 24576)) != NULL);
  more[left] = mtp_pool_alloc(pool, 24576);
  CHECK(more[left] == (void *)head); /* from the cached slab, without carving it again */
  CHECK(h->current[cls] == s && mtp__slab_bump(s) == bump);
  mtp__heap_validate(h);
  for (uint32_t i = 0; i <= left; i++) mtp_free(more[i]);
  free(more);
  mtp_free(keep_cur);
  mtp__heap_unlist(mtp__pool_in(pool)); /* the old current slab emptied (its blocks were listed) */
  /* another class of as many pages formats the cached slab afresh */
  s = cache_one(pool, 20000, &k2);
  CHECK_EQ_SZ(s->list, MTP_LIST_HEAP_CACHE);
  unsigned other = mtp__class_of(32768);
  CHECK(mtp__class_pages[other] == s->pages);
  void *x = mtp_pool_alloc(pool, 32768);
  CHECK(x != NULL && mtp__run_of((uintptr_t)x) == s && s->cls == other);
  CHECK(mtp__slab_bump(s) == (char *)mtp__page_start(s) + s->block_size);
  mtp_free(x); /* x's slab is its class's current one: it stays */
  /* a full cache lets the oldest go: u makes way for t */
  void *k4;
  mtpi_desc_t *u = cache_one(pool, 18000, &k4);
  CHECK(u->pages == 8);
  mtpi_desc_t *t = cache_one(pool, 14000, &k3);
  CHECK(t->pages == 4 && t->list == MTP_LIST_HEAP_CACHE);
  CHECK(u->kind != MTP_PAGE_SLAB || u->list != MTP_LIST_HEAP_CACHE);
  h = mtp__thread_heap(mtp__tl_thread, mtp__pool_in(pool)->id);
  CHECK(h->m.cache_bytes <= o.thread_cache_bytes);
  mtp__heap_validate(h);
  mtp_free(k4);
  mtp_free(k2);
  mtp_free(k3);
  mtp_stats_t st;
  mtp_pool_stats(pool, &st);
  CHECK_EQ_SZ(st.blocks_in_use, 0);
  mtp_pool_destroy(pool);
}

/* A remote free that reported news reaches the pool lock late: meanwhile other frees emptied its
 * slab, the release (purge delay 0) purged it and the region was unmapped. The news must then be
 * dropped without reading the slab, whose memory is gone (an ASan run of test_rel_stress once
 * faulted there). Replayed in one thread: the late news is kept and delivered by hand. */
typedef struct {
  mtp_pool_t *pool;
  void **blocks;
  uint32_t n;
} fill_t;

static void *fill_and_exit(void *arg) { /* the slab's owner, gone when it is emptied */
  fill_t *f = arg;
  for (uint32_t i = 0; i < f->n; i++) CHECK((f->blocks[i] = mtp_pool_alloc(f->pool, 1024)) != NULL);
  return NULL;
}

static void test_late_news(void) {
  mtp_options_t o;
  mtp_options_init(&o);
  o.purge_delay_ms = 0; /* a release returns the pages at once, and an empty region goes */
  mtp_pool_t *pool = mtp_pool_create(&o);
  CHECK(pool != NULL);
  unsigned cls = mtp__class_of(1024);
  uint32_t cap = (uint32_t)((mtp__class_pages[cls] * MTP_PAGE_SIZE) / 1024);
  fill_t f = {pool, calloc(cap, sizeof(void *)), cap};
  CHECK(f.blocks != NULL);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, fill_and_exit, &f) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  mtpi_desc_t *s = mtp__run_of((uintptr_t)f.blocks[0]);
  CHECK(!(mtp__load_acquire(&s->thread_free) & MTP_TF_OWNED)); /* its owner left it detached */
  /* a quarter of the blocks back: the last of these pushes is news, kept for later */
  uint32_t quarter = (s->detached_used + 3) / 4, i = 0;
  mtpi_remote_seen_t late = {NULL, 0};
  for (; i < quarter; i++) {
    mtp__track_free(f.blocks[i], 1024);
    mtpi_remote_seen_t seen;
    if (mtp__slab_free_remote(s, f.blocks[i], &seen) == MTP_REMOTE_NEWS) late = seen;
  }
  CHECK(late.set == &mtp__pool_in(pool)->rs);
  /* the rest through mtp_free: the last one releases the slab, and the region goes */
  for (; i < cap; i++) mtp_free(f.blocks[i]);
  CHECK(!mtp__is_region_ptr((uintptr_t)mtp__page_start(s)));
  (void)mtp__pool_detached_news(&late, s); /* must not touch s */
  mtp_stats_t st;
  mtp_pool_stats(pool, &st);
  CHECK_EQ_SZ(st.blocks_in_use, 0);
  free(f.blocks);
  mtp_pool_destroy(pool);
}

/* ---- cold classes ---- */

enum { COLD_BLOCKS = 1000 };
static mtpi_pool_t *cold_pool;

static bool from_shared(void *p) {
  void *h = mtp__slab_heap(mtp__run_of((uintptr_t)p));
  for (unsigned i = 0; i < MTP_SHARED_HEAPS; i++)
    if (h == &cold_pool->shared[i].heap) return true;
  return false;
}

static void *cold_worker(void *arg) {
  (void)arg;
  unsigned cls = mtp__class_of(64);
  void **b = calloc(COLD_BLOCKS, sizeof(void *));
  CHECK(b != NULL);
  mtp_pool_t *pool = mtp__pool_out(cold_pool);
  for (unsigned i = 0; i < COLD_BLOCKS; i++) CHECK((b[i] = mtp_pool_alloc(pool, 64)) != NULL);
  mtpi_heap_t *h = mtp__thread_heap(mtp__tl_thread, cold_pool->id);
  CHECK(h != NULL && h->cold_ok);
  /* the first blocks came from the shared heap, a few pages' worth at most; all later ones from
   * this heap's own slab */
  unsigned shared = h->cold[cls];
  CHECK(shared >= 2 && shared * 64u <= 4 * 4096u);
  for (unsigned i = 0; i < COLD_BLOCKS; i++) CHECK(from_shared(b[i]) == (i < shared));
  CHECK(h->current[cls] != &mtp__slab_empty && mtp__slab_heap(h->current[cls]) == h);
  mtp__heap_validate(h);
  /* a free of a shared block by its allocating thread is a remote free: counted, not lost */
  for (unsigned i = 0; i < COLD_BLOCKS; i++) mtp_free(b[i]);
  free(b);
  return NULL;
}

typedef struct {
  pthread_barrier_t *all, *measured;
  void *b[16];
} little_t;

static void *little_worker(void *arg) {
  little_t *l = arg;
  mtp_pool_t *pool = mtp__pool_out(cold_pool);
  for (unsigned c = 0; c < 16; c++) CHECK((l->b[c] = mtp_pool_alloc(pool, 48 + 64 * c)) != NULL);
  pthread_barrier_wait(l->all);
  pthread_barrier_wait(l->measured);
  for (unsigned c = 0; c < 16; c++) mtp_free(l->b[c]); /* half of them freed by main instead */
  return NULL;
}

static void test_cold_classes(void) {
  mtp_options_t o;
  mtp_options_init(&o);
  o.purge_delay_ms = -1; /* only trim returns memory: the figures below are the slabs held */
  cold_pool = mtp__pool_in(mtp_pool_create(&o));
  CHECK(cold_pool != NULL);
  /* the pool's first heap: its own slabs from the first block */
  void *mine = mtp_pool_alloc(mtp__pool_out(cold_pool), 64);
  CHECK(mine != NULL && !from_shared(mine));
  CHECK(!mtp__thread_heap(mtp__tl_thread, cold_pool->id)->cold_ok);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, cold_worker, NULL) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  /* 64 threads hold one block of each of 16 classes at once: with a slab per class per thread
   * that is 1,024 slabs; sharing the first blocks, one per class per shared heap (one per CPU, at
   * most MTP_SHARED_HEAPS), and this thread's */
  enum { LITTLE = 64 };
  pthread_barrier_t all, measured;
  pthread_barrier_init(&all, NULL, LITTLE + 1);
  pthread_barrier_init(&measured, NULL, LITTLE + 1);
  static little_t l[LITTLE];
  pthread_t lt[LITTLE];
  for (unsigned i = 0; i < LITTLE; i++) {
    l[i].all = &all;
    l[i].measured = &measured;
    CHECK(pthread_create(&lt[i], NULL, little_worker, &l[i]) == 0);
  }
  pthread_barrier_wait(&all);
  mtp_stats_t st;
  mtp_pool_stats(mtp__pool_out(cold_pool), &st);
  CHECK_EQ_SZ(st.blocks_in_use, 1 + LITTLE * 16);
  CHECK(st.bytes_reserved <= (16 * MTP_SHARED_HEAPS + 2) * MTP_PAGE_SIZE);
  for (unsigned i = 0; i < LITTLE; i++) CHECK(from_shared(l[i].b[i % 16]));
  pthread_barrier_wait(&measured);
  for (unsigned i = 0; i < LITTLE; i++) CHECK(pthread_join(lt[i], NULL) == 0);
  pthread_barrier_destroy(&all);
  pthread_barrier_destroy(&measured);
  mtp_free(mine);
  mtp_pool_stats(mtp__pool_out(cold_pool), &st);
  CHECK_EQ_SZ(st.blocks_in_use, 0);
  CHECK(st.bytes_reserved > 0); /* the shared heaps' slabs, and this thread's */
  mtp_thread_flush();
  mtp_pool_trim(mtp__pool_out(cold_pool));
  mtp_pool_stats(mtp__pool_out(cold_pool), &st);
  CHECK_EQ_SZ(st.bytes_reserved, 0); /* the shared heaps gave their slabs back */
  mtp_pool_destroy(mtp__pool_out(cold_pool));
}

/* Threads on different CPUs take their first blocks from different shared heaps: the one of
 * their CPU (mtp__os_cpu() % MTP_SHARED_HEAPS), so they do not queue on one lock. Two threads,
 * each pinned to a CPU of its own whose shared heaps differ; skipped where the process may run on
 * one such CPU only. */
typedef struct {
  int cpu;
  void *b;
} shard_arg_t;

static void *shard_worker(void *arg) {
  shard_arg_t *a = arg;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(a->cpu, &one);
  CHECK(pthread_setaffinity_np(pthread_self(), sizeof(one), &one) == 0);
  CHECK(mtp__os_cpu() == (unsigned)a->cpu);
  CHECK((a->b = mtp_pool_alloc(mtp__pool_out(cold_pool), 200)) != NULL);
  CHECK(mtp__thread_heap(mtp__tl_thread, cold_pool->id)->cold_ok);
  return NULL;
}

static void test_cold_shards(void) {
  cpu_set_t allowed;
  CHECK(sched_getaffinity(0, sizeof(allowed), &allowed) == 0);
  int cpu[2] = {-1, -1};
  for (int c = 0; c < CPU_SETSIZE && cpu[1] < 0; c++) {
    if (!CPU_ISSET(c, &allowed)) continue;
    if (cpu[0] < 0)
      cpu[0] = c;
    else if (c % MTP_SHARED_HEAPS != cpu[0] % MTP_SHARED_HEAPS)
      cpu[1] = c;
  }
  if (cpu[1] < 0) {
    printf("  (skipped: no two CPUs with different shared heaps)\n");
    return;
  }
  mtp_options_t o;
  mtp_options_init(&o);
  cold_pool = mtp__pool_in(mtp_pool_create(&o));
  CHECK(cold_pool != NULL);
  void *mine = mtp_pool_alloc(mtp__pool_out(cold_pool), 200); /* the first heap: not shared */
  CHECK(mine != NULL && !from_shared(mine));
  shard_arg_t a[2] = {{cpu[0], NULL}, {cpu[1], NULL}};
  for (int i = 0; i < 2; i++) { /* one after the other: each thread's heap is a pool's second */
    pthread_t t;
    CHECK(pthread_create(&t, NULL, shard_worker, &a[i]) == 0);
    CHECK(pthread_join(t, NULL) == 0);
  }
  for (int i = 0; i < 2; i++)
    CHECK(mtp__slab_heap(mtp__run_of((uintptr_t)a[i].b)) ==
          &cold_pool->shared[(unsigned)cpu[i] % MTP_SHARED_HEAPS].heap);
  for (int i = 0; i < 2; i++) mtp_free(a[i].b);
  mtp_free(mine);
  mtp_pool_destroy(mtp__pool_out(cold_pool));
}

/* A pool of its own (no purging) and n blocks of `size` from it, in allocation order. */
static mtpi_pool_t *fill(size_t size, uint32_t n, void ***out) {
  mtp_options_t o;
  mtp_options_init(&o);
  o.purge_delay_ms = -1;
  mtpi_pool_t *pool = mtp__pool_in(mtp_pool_create(&o));
  CHECK(pool != NULL);
  void **b = calloc(n, sizeof(void *));
  CHECK(b != NULL);
  for (uint32_t i = 0; i < n; i++)
    CHECK((b[i] = mtp_pool_alloc(mtp__pool_out(pool), size)) != NULL);
  *out = b;
  return pool;
}

static void drop(mtpi_pool_t *pool, void **b, uint32_t n) {
  for (uint32_t i = 0; i < n; i++)
    if (b[i] != NULL) mtp_free(b[i]);
  mtp_pool_destroy(mtp__pool_out(pool));
  free(b);
}

/* The partial list is a queue: exhausted slabs that get room again are used in the order they
 * got it (the first freed into first), not the newest first. */
static void test_partial_queue(void) {
  unsigned cls = mtp__class_of(1024);
  uint32_t cap = (uint32_t)((mtp__class_pages[cls] * MTP_PAGE_SIZE) / 1024);
  uint32_t n = cap * 3; /* two exhausted slabs (kept: MTP_FULL_PER_CLASS), a current one, room */
  void **b;
  mtpi_pool_t *pool = fill(1024, cap * 2 + 1, &b);
  mtp_pool_t *pub = mtp__pool_out(pool);
  b = realloc(b, n * sizeof(void *));
  CHECK(b != NULL);
  mtpi_heap_t *h = mtp__thread_heap(mtp__tl_thread, pool->id);
  CHECK_EQ_SZ(h->full_count[cls], 2);
  void *first = b[0], *second = b[cap]; /* one block in each exhausted slab */
  mtp_free(first);
  mtp_free(second);
  CHECK(h->partial[cls] == &mtp__run_of((uintptr_t)first)->link); /* the front */
  mtp__heap_validate(h);
  mtpi_desc_t *cur = mtp__run_of((uintptr_t)b[cap * 2]);
  for (uint32_t i = cap * 2 + 1; i < n; i++) { /* the rest of the current slab */
    CHECK((b[i] = mtp_pool_alloc(pub, 1024)) != NULL);
    CHECK(mtp__run_of((uintptr_t)b[i]) == cur);
  }
  mtp__heap_validate(h);
  CHECK((b[0] = mtp_pool_alloc(pub, 1024)) == first);    /* the slab freed into first */
  CHECK((b[cap] = mtp_pool_alloc(pub, 1024)) == second); /* then the other */
  mtp__heap_validate(h);
  drop(pool, b, n);
}

/* A free into an exhausted slab while the current slab of its class is exhausted too lists the
 * block for reuse: the next allocation takes the block just freed, not the partial queue's front.
 * With room in the current slab, the slab joins the partial queue. */
static void test_freed_into_current(void) {
  unsigned cls = mtp__class_of(1024);
  uint32_t cap = (uint32_t)((mtp__class_pages[cls] * MTP_PAGE_SIZE) / 1024);
  uint32_t n = cap * 3; /* S0, S1 exhausted and kept; S2 current, one block short */
  void **b;
  mtpi_pool_t *pool = fill(1024, n - 1, &b);
  mtp_pool_t *pub = mtp__pool_out(pool);
  b = realloc(b, n * sizeof(void *));
  CHECK(b != NULL);
  mtpi_heap_t *h = mtp__thread_heap(mtp__tl_thread, pool->id);
  mtpi_desc_t *s0 = mtp__run_of((uintptr_t)b[0]), *s1 = mtp__run_of((uintptr_t)b[cap]);
  mtpi_desc_t *s2 = mtp__run_of((uintptr_t)b[cap * 2]);
  CHECK(h->current[cls] == s2);
  void *p1 = b[cap];
  mtp_free(p1); /* S2 has room: S1 joins the partial queue */
  b[cap] = NULL;
  CHECK(h->current[cls] == s2 && s1->list == MTP_LIST_HEAP_PARTIAL);
  CHECK((b[n - 1] = mtp_pool_alloc(pub, 1024)) != NULL); /* S2's last block: exhausted, current */
  CHECK(mtp__run_of((uintptr_t)b[n - 1]) == s2 && h->current[cls] == s2);
  void *p0 = b[0];
  mtp_free(p0); /* S2 exhausted: p0 is listed for reuse, S0 stays exhausted */
  CHECK(h->current[cls] == s2 && h->reuse[cls] == p0 && h->reuse_n[cls] == 1);
  CHECK(s0->list == MTP_LIST_HEAP_FULL && s1->list == MTP_LIST_HEAP_PARTIAL);
  mtp__heap_validate(h);
  CHECK((b[0] = mtp_pool_alloc(pub, 1024)) == p0); /* the block just freed */
  CHECK((b[cap] = mtp_pool_alloc(pub, 1024)) == p1); /* S0 exhausted: then the partial front */
  CHECK(h->current[cls] == s1);
  mtp__heap_validate(h);
  drop(pool, b, n);
}

typedef struct {
  void **b;
  uint32_t from, to;
} free_range_t;
static void *free_range(void *arg) { /* remote frees: this thread owns none of the slabs */
  free_range_t *r = arg;
  for (uint32_t i = r->from; i < r->to; i++) mtp_free(r->b[i]);
  return NULL;
}

/* The exhausted current slab keeps the remote frees that came to it while the block freed into
 * another exhausted slab is listed: the slow path collects them once the list is empty. */
static void test_freed_into_current_remote(void) {
  unsigned cls = mtp__class_of(1024);
  uint32_t cap = (uint32_t)((mtp__class_pages[cls] * MTP_PAGE_SIZE) / 1024);
  uint32_t n = cap * 3; /* S0, S1 exhausted and kept; S2 current and exhausted */
  void **b;
  mtpi_pool_t *pool = fill(1024, n, &b);
  mtp_pool_t *pub = mtp__pool_out(pool);
  mtpi_heap_t *h = mtp__thread_heap(mtp__tl_thread, pool->id);
  mtpi_desc_t *s0 = mtp__run_of((uintptr_t)b[0]), *s2 = mtp__run_of((uintptr_t)b[cap * 2]);
  CHECK(h->current[cls] == s2);
  free_range_t r = {b, cap * 2, cap * 2 + cap / 2}; /* half of S2, from another thread */
  pthread_t t;
  CHECK(pthread_create(&t, NULL, free_range, &r) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  void *p0 = b[0];
  mtp_free(p0);
  CHECK(h->current[cls] == s2 && h->reuse[cls] == p0 && s0->list == MTP_LIST_HEAP_FULL);
  mtp__heap_validate(h);
  CHECK((b[0] = mtp_pool_alloc(pub, 1024)) == p0);
  for (uint32_t i = r.from; i < r.to; i++) { /* the list empty: then S2's remote frees */
    CHECK((b[i] = mtp_pool_alloc(pub, 1024)) != NULL);
    CHECK(mtp__run_of((uintptr_t)b[i]) == s2);
  }
  CHECK(h->current[cls] == s2);
  mtp__heap_validate(h);
  drop(pool, b, n);
}

/* Before the current slab carves its next OS page, a page's worth of blocks back from other
 * threads is taken instead (resident already); less than a page's worth waits. */
static void test_remote_before_carve(void) {
  size_t os_page = mtp__os_page_size();
  unsigned cls = mtp__class_of(64);
  uint32_t per_page = (uint32_t)(os_page / 64);
  void **b;
  mtpi_pool_t *pool = fill(64, per_page, &b); /* the slab's first OS page, handed out whole */
  mtp_pool_t *pub = mtp__pool_out(pool);
  mtpi_heap_t *h = mtp__thread_heap(mtp__tl_thread, pool->id);
  mtpi_desc_t *s = h->current[cls];
  CHECK(s->free == NULL && mtp__slab_bump(s) < s->end);
  char *bump = mtp__slab_bump(s);
  free_range_t r = {b, 0, per_page - 1}; /* one block short of a page's worth */
  pthread_t t;
  CHECK(pthread_create(&t, NULL, free_range, &r) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  for (uint32_t i = 0; i < per_page - 1; i++) b[i] = NULL;
  void *p = mtp_pool_alloc(pub, 64); /* carves the next page */
  CHECK(p != NULL && (char *)p >= bump && mtp__run_of((uintptr_t)p) == s);
  CHECK(mtp__slab_bump(s) > bump);
  mtp_free(p);
  mtp__heap_validate(h);
  drop(pool, b, per_page);

  /* a page's worth back: taken, nothing carved */
  pool = fill(64, per_page, &b);
  pub = mtp__pool_out(pool);
  h = mtp__thread_heap(mtp__tl_thread, pool->id);
  s = h->current[cls];
  bump = mtp__slab_bump(s);
  r = (free_range_t){b, 0, per_page};
  CHECK(pthread_create(&t, NULL, free_range, &r) == 0);
  CHECK(pthread_join(t, NULL) == 0);
  void **again = calloc(per_page, sizeof(void *));
  CHECK(again != NULL);
  for (uint32_t i = 0; i < per_page; i++) {
    CHECK((again[i] = mtp_pool_alloc(pub, 64)) != NULL);
    CHECK((char *)again[i] < bump && mtp__run_of((uintptr_t)again[i]) == s);
  }
  CHECK(mtp__slab_bump(s) == bump);
  mtp__heap_validate(h);
  for (uint32_t i = 0; i < per_page; i++) b[i] = again[i];
  free(again);
  drop(pool, b, per_page);
}

/* When no exhausted slab among the oldest has half of its blocks back, the one with the most back
 * is taken if an eighth is, rather than a fresh slab; with less, a fresh slab. */
static void test_most_back(void) {
  unsigned cls = mtp__class_of(1024);
  uint32_t cap = (uint32_t)((mtp__class_pages[cls] * MTP_PAGE_SIZE) / 1024);
  for (int enough = 0; enough < 2; enough++) {
    uint32_t n = cap * 3 + 1;
    void **b;
    mtpi_pool_t *pool = fill(1024, cap * 3, &b); /* S0, S1 exhausted and kept; S2 current */
    b = realloc(b, n * sizeof(void *));
    CHECK(b != NULL);
    mtpi_heap_t *h = mtp__thread_heap(mtp__tl_thread, pool->id);
    mtpi_desc_t *s1 = mtp__run_of((uintptr_t)b[cap]);
    CHECK(s1->list == MTP_LIST_HEAP_FULL && h->current[cls] == mtp__run_of((uintptr_t)b[cap * 2]));
    uint32_t back = cap / 8 - (enough ? 0 : 1);
    free_range_t r = {b, cap, cap + back}; /* from another thread, into S1 */
    pthread_t t;
    CHECK(pthread_create(&t, NULL, free_range, &r) == 0);
    CHECK(pthread_join(t, NULL) == 0);
    for (uint32_t i = cap; i < cap + back; i++) b[i] = NULL;
    /* S2 exhausted: to the full list (S0 let go); then S1, or a fresh slab */
    CHECK((b[cap * 3] = mtp_pool_alloc(mtp__pool_out(pool), 1024)) != NULL);
    CHECK((mtp__run_of((uintptr_t)b[cap * 3]) == s1) == (enough == 1));
    mtp__heap_validate(h);
    drop(pool, b, n);
  }
}

/* A thread that frees into a slab it let go (detached when more than MTP_FULL_PER_CLASS were
 * exhausted) keeps twice as many exhausted slabs of that class owned from then on. */
static void test_full_limit_grows(void) {
  unsigned cls = mtp__class_of(1024);
  uint32_t cap = (uint32_t)((mtp__class_pages[cls] * MTP_PAGE_SIZE) / 1024);
  uint32_t n = cap * 6;
  void **b;
  mtpi_pool_t *pool = fill(1024, cap * 4 + 1, &b); /* S0..S3 exhausted, S0 and S1 let go */
  mtp_pool_t *pub = mtp__pool_out(pool);
  b = realloc(b, n * sizeof(void *));
  CHECK(b != NULL);
  mtpi_heap_t *h = mtp__thread_heap(mtp__tl_thread, pool->id);
  mtpi_desc_t *s0 = mtp__run_of((uintptr_t)b[0]), *s2 = mtp__run_of((uintptr_t)b[cap * 2]);
  uintptr_t me = (uintptr_t)mtp__tl_thread;
  CHECK_EQ_SZ(h->full_limit[cls], MTP_FULL_PER_CLASS);
  CHECK_EQ_SZ(h->full_count[cls], MTP_FULL_PER_CLASS);
  CHECK_EQ_SZ(mtp__load_relaxed(&s0->owner), 0);
  CHECK_EQ_SZ(mtp__load_relaxed(&s2->owner), me | MTP_OWNER_FULL);
  void *back = b[0];
  mtp_free(back); /* into S0, which this thread let go: taken back, and the bound doubles */
  CHECK_EQ_SZ(mtp__load_relaxed(&s0->owner), me);
  CHECK_EQ_SZ(h->full_limit[cls], MTP_FULL_PER_CLASS * 2);
  mtp__heap_validate(h);
  for (uint32_t i = cap * 4 + 1; i < cap * 5; i++)
    CHECK((b[i] = mtp_pool_alloc(pub, 1024)) != NULL);
  CHECK((b[0] = mtp_pool_alloc(pub, 1024)) == back); /* S4 exhausted (3 kept), then S0 */
  CHECK((b[cap * 5] = mtp_pool_alloc(pub, 1024)) != NULL); /* S0 exhausted: 4 kept */
  CHECK_EQ_SZ(h->full_count[cls], MTP_FULL_PER_CLASS * 2);
  CHECK_EQ_SZ(mtp__load_relaxed(&s2->owner), me | MTP_OWNER_FULL); /* not let go */
  mtp__heap_validate(h);
  for (uint32_t i = cap * 5 + 1; i < n; i++) b[i] = NULL;
  drop(pool, b, n);
}

/* The bound doubles on evidence and past 128 slabs goes: then every exhausted slab of the class
 * stays owned (a cap of 255 had an 8-bit count that wrapped to 0 at the 256th slab). */
static void test_full_limit_unbounded(void) {
  unsigned cls = mtp__class_of(1000);
  uint32_t cap = (uint32_t)((mtp__class_pages[cls] * MTP_PAGE_SIZE) / mtp__class_size[cls]);
  uint32_t n = cap * 300; /* more exhausted slabs than an 8-bit count */
  void **b;
  mtpi_pool_t *pool = fill(1000, n, &b);
  mtp_pool_t *pub = mtp__pool_out(pool);
  mtpi_heap_t *h = mtp__thread_heap(mtp__tl_thread, pool->id);
  for (uint32_t i = 0; i < n; i++) mtp_free(b[i]); /* takes back every slab it let go */
  CHECK_EQ_SZ(h->full_limit[cls], UINT8_MAX); /* 2, 4, ..., 128, then unbounded */
  for (uint32_t i = 0; i < n; i++) CHECK((b[i] = mtp_pool_alloc(pub, 1000)) != NULL);
  uint32_t listed = 0, slabs = 0;
  for (mtpi_node_t *it = h->full[cls]; it; it = it->next) listed++;
  for (uint32_t i = 0; i < n; i++) { /* each slab once (its first block), none let go */
    mtpi_desc_t *s = mtp__run_of((uintptr_t)b[i]);
    if ((char *)b[i] != mtp__page_start(s)) continue;
    slabs++;
    CHECK(mtp__load_relaxed(&s->owner) != 0);
  }
  CHECK(slabs >= 300);
  CHECK_EQ_SZ(listed, slabs - 1); /* all but the current one */
  CHECK_EQ_SZ(h->full_count[cls], 0); /* not counted (the old count had wrapped to 43 here) */
  mtp__heap_validate(h);
  drop(pool, b, n);
}

/* ---- the reuse lists ---- */

static int double_frees;
static void on_error(int err, const char *message, void *ptr, void *arg) {
  (void)message, (void)ptr, (void)arg;
  CHECK_EQ_SZ(err, MTP_ERR_DOUBLE_FREE);
  double_frees++;
}

typedef struct {
  void **b;
  uint32_t n, seen, bad;
} visit_check_t;
static int visit_count(void *arg, void *block, size_t usable, unsigned cls) {
  (void)usable, (void)cls;
  visit_check_t *v = arg;
  v->seen++;
  bool live = false;
  for (uint32_t i = 0; i < v->n && !live; i++) live = v->b[i] == block;
  v->bad += !live;
  return 0;
}

/* The statistics and the heap walk count exactly the blocks in b that are not NULL. */
static void check_live(mtpi_pool_t *pool, void **b, uint32_t n) {
  uint32_t live = 0;
  for (uint32_t i = 0; i < n; i++) live += b[i] != NULL;
  mtp_stats_t st;
  CHECK(mtp_pool_stats(mtp__pool_out(pool), &st) == 0);
  CHECK_EQ_SZ(st.blocks_in_use, live);
  size_t by_class = 0;
  mtp_class_stats_t cs[MTP_NUM_CLASSES];
  CHECK(mtp_pool_class_stats(mtp__pool_out(pool), cs, MTP_NUM_CLASSES) == MTP_NUM_CLASSES);
  for (unsigned c = 0; c < MTP_NUM_CLASSES; c++) by_class += cs[c].blocks_in_use;
  CHECK_EQ_SZ(by_class, live);
  visit_check_t v = {b, n, 0, 0};
  CHECK(mtp_pool_visit(mtp__pool_out(pool), visit_count, &v) == 0);
  CHECK_EQ_SZ(v.seen, live);
  CHECK_EQ_SZ(v.bad, 0);
}

/* Slabs of size's class, all exhausted and kept (the bound raised for the test), b[n] their
 * blocks: the state of a thread that holds most blocks of a class. */
static mtpi_pool_t *fill_kept(size_t size, uint32_t slabs, void ***out, uint32_t *n) {
  unsigned cls = mtp__class_of(size);
  uint32_t cap = (uint32_t)((mtp__class_pages[cls] * MTP_PAGE_SIZE) / mtp__class_size[cls]);
  *n = cap * slabs;
  mtpi_pool_t *pool = fill(size, 1, out);
  mtpi_heap_t *h = mtp__thread_heap(mtp__tl_thread, pool->id);
  h->full_limit[cls] = (uint8_t)slabs;
  void **b = realloc(*out, *n * sizeof(void *));
  CHECK(b != NULL);
  for (uint32_t i = 1; i < *n; i++) CHECK((b[i] = mtp_pool_alloc(mtp__pool_out(pool), size)) != NULL);
  *out = b;
  return pool;
}

/* Replace blocks of b (not those of the current slab) rounds times: free one, allocate one. */
static uint32_t replace(mtpi_pool_t *pool, void **b, uint32_t n, size_t size, uint32_t rounds,
                        uint32_t *seed) {
  uint32_t same = 0;
  for (uint32_t r = 0; r < rounds;) {
    *seed = *seed * 1103515245u + 12345u;
    uint32_t k = (*seed >> 8) % n;
    mtpi_heap_t *h = mtp__thread_heap(mtp__tl_thread, pool->id);
    if (mtp__run_of((uintptr_t)b[k]) == h->current[mtp__class_of(size)]) continue;
    r++;
    void *p = b[k];
    mtp_free(p);
    CHECK((b[k] = mtp_pool_alloc(mtp__pool_out(pool), size)) != NULL);
    same += b[k] == p;
  }
  return same;
}

/* A thread that replaces blocks of one class up to 1 KiB at random frees into its exhausted slabs
 * while its current slab is exhausted: each such free lists the block, and the next allocation
 * takes the block just freed. Listed blocks are free to the statistics and the heap walk, bounded,
 * a second free of one is reported, and thread flush gives them back. */
static void test_reuse_small(void) {
  const size_t size = 512;
  unsigned cls = mtp__class_of(size);
  void **b;
  uint32_t n, seed = 1;
  mtpi_pool_t *pool = fill_kept(size, 8, &b, &n);
  mtpi_heap_t *h = mtp__thread_heap(mtp__tl_thread, pool->id);
  CHECK_EQ_SZ(replace(pool, b, n, size, 100, &seed), 100); /* each time the block just freed */
  CHECK_EQ_SZ(h->reuse_n[cls], 0);
  mtp__heap_validate(h);
  check_live(pool, b, n);
  /* a run of frees: listed up to the bound, then the older half goes back to the slabs */
  uint32_t freed[96], nf = 0;
  for (uint32_t k = 0; nf < 96 && k < n; k++) {
    if (mtp__run_of((uintptr_t)b[k]) == h->current[cls]) continue;
    mtp_free(b[k]);
    freed[nf++] = k;
  }
  size_t lc[MTP_NUM_CLASSES] = {0};
  uint32_t listed = (uint32_t)mtp__heap_listed(&h->m, &pool->rs, lc, NULL, 0);
  CHECK(lc[cls] == listed && listed == h->reuse_n[cls] && listed > 0 && listed <= h->reuse_cap[cls]);
  mtpi_block_t *last = h->reuse[cls]; /* the newest listed (a slab that got blocks back from a
                                        * trim has room again: frees into it are not listed) */
  bool among = false;
  for (uint32_t i = 0; i < nf; i++) among |= b[freed[i]] == (void *)last;
  CHECK(among);
  for (uint32_t i = 0; i < nf; i++) b[freed[i]] = NULL;
  mtp__heap_validate(h);
  check_live(pool, b, n);
  /* a second free of a listed block is reported, and changes nothing */
  double_frees = 0;
  mtp_set_error_handler(on_error, NULL);
  mtp_free(last);
  mtp_set_error_handler(NULL, NULL);
  CHECK_EQ_SZ(double_frees, 1);
  CHECK_EQ_SZ(h->reuse_n[cls], listed);
  mtp__heap_validate(h);
  /* the listed blocks come back first, the last listed first */
  for (uint32_t i = 0; i < 3; i++) {
    mtpi_block_t *head = h->reuse[cls];
    CHECK(i > 0 || head == last);
    CHECK((b[freed[i]] = mtp_pool_alloc(mtp__pool_out(pool), size)) == (void *)head);
  }
  mtp__heap_validate(h);
  check_live(pool, b, n);
  /* flush: every listed block goes back to its slab before the slabs go to the pool */
  mtp_thread_flush();
  check_live(pool, b, n);
  drop(pool, b, n);
}


/* Above MTP_DIRECT_MAX, the owner's frees into its own slabs are listed per class, and the next
 * allocation of the class takes the block freed last. Listed blocks are free to the statistics
 * and the heap walk; a second free of one is reported and changes nothing; past the bound the
 * older half goes back to its slabs; trim and thread flush give them all back. */
static void test_reuse_lists(void) {
  const size_t size = 2048;
  unsigned cls = mtp__class_of(size), i = cls;
  CHECK(mtp__class_size[cls] > MTP_DIRECT_MAX);
  void **b;
  enum { N = 24 }; /* in one slab of 32, not exhausted: frees take the owner's fast path */
  mtpi_pool_t *pool = fill(size, N, &b);
  mtp_pool_t *pub = mtp__pool_out(pool);
  mtpi_heap_t *h = mtp__thread_heap(mtp__tl_thread, pool->id);
  mtpi_desc_t *s = mtp__run_of((uintptr_t)b[0]);
  CHECK(mtp__run_of((uintptr_t)b[N - 1]) == s && h->current[cls] == s);
  CHECK(h->reuse_cap[i] == 32 && h->reuse_n[i] == 0);
  for (uint32_t k = 0; k < 8; k++) {
    mtp_free(b[k]);
    b[k] = NULL;
  }
  CHECK_EQ_SZ(h->reuse_n[i], 8);
  CHECK_EQ_SZ(MTP_USED(s), N); /* still counted by the slab */
  mtp__heap_validate(h);
  check_live(pool, b, N);
  /* the block freed last comes back first */
  void *p7 = mtp_pool_alloc(pub, size), *p6 = mtp_pool_alloc(pub, 1900); /* same class */
  CHECK(p7 != NULL && p6 != NULL);
  b[7] = p7;
  b[6] = p6;
  CHECK_EQ_SZ(h->reuse_n[i], 6);
  mtp__heap_validate(h);
  check_live(pool, b, N);
  /* a second free of a listed block */
  void *listed_block = h->reuse[i]; /* b[5]'s old address: the list's head */
  uint32_t used = MTP_USED(s);
  double_frees = 0;
  mtp_set_error_handler(on_error, NULL);
  mtp_free(listed_block);
  mtp_set_error_handler(NULL, NULL);
  CHECK_EQ_SZ(double_frees, 1);
  CHECK_EQ_SZ(h->reuse_n[i], 6);
  CHECK_EQ_SZ(MTP_USED(s), used);
  mtp__heap_validate(h);
  /* the bound: the 33rd listed block sends the older half back to its slab */
  void **more = calloc(40, sizeof(void *));
  CHECK(more != NULL);
  for (uint32_t k = 0; k < 40; k++) CHECK((more[k] = mtp_pool_alloc(pub, size)) != NULL);
  CHECK_EQ_SZ(h->reuse_n[i], 0); /* the six listed were handed out first */
  for (uint32_t k = 0; k < 33; k++) {
    mtp_free(more[k]);
    more[k] = NULL;
  }
  CHECK_EQ_SZ(h->reuse_n[i], 17); /* 32 halved to 16, then the 33rd; exhausted slabs' blocks too */
  mtp__heap_validate(h);
  /* trim gives every listed block back */
  mtp_pool_trim(pub);
  CHECK_EQ_SZ(h->reuse_n[i], 0);
  CHECK(h->reuse[i] == NULL);
  mtp__heap_validate(h);
  for (uint32_t k = 0; k < 40; k++)
    if (more[k] != NULL) mtp_free(more[k]);
  free(more);
  check_live(pool, b, N);
  /* thread flush gives listed blocks back with the slabs */
  for (uint32_t k = 8; k < N; k++) {
    mtp_free(b[k]);
    b[k] = NULL;
  }
  CHECK(h->reuse_n[i] > 0);
  mtp_thread_flush();
  CHECK(mtp__thread_heap(mtp__tl_thread, pool->id) == NULL);
  check_live(pool, b, N); /* b[6] and b[7] */
  drop(pool, b, N);
}

/* The bound's trim keeps the blocks freed last: after HOT_MAX + 1 owner frees into a slab with
 * room, the list holds the newest half plus the one just freed, newest first. */
static void test_reuse_trim_keeps_newest(void) {
  const size_t size = 1200; /* 54 blocks a slab: the 33 frees stay in one unexhausted slab */
  unsigned cls = mtp__class_of(size), i = cls;
  void **b;
  enum { N = 40 };
  mtpi_pool_t *pool = fill(size, N, &b);
  mtpi_heap_t *h = mtp__thread_heap(mtp__tl_thread, pool->id);
  mtpi_desc_t *s = mtp__run_of((uintptr_t)b[0]);
  CHECK(mtp__run_of((uintptr_t)b[N - 1]) == s && s->capacity > N);
  CHECK_EQ_SZ(h->reuse_cap[i], 32);
  for (uint32_t k = 0; k < 33; k++) mtp_free(b[k]);
  CHECK_EQ_SZ(h->reuse_n[i], 17); /* 32 halved to 16, then the 33rd */
  CHECK_EQ_SZ(MTP_USED(s), N - 16);
  mtpi_block_t *it = h->reuse[i];
  for (uint32_t k = 32; k >= 16; k--) { /* b[32], b[31], ... b[16] */
    CHECK(it == b[k]);
    it = mtp__block_next(it);
  }
  CHECK(it == NULL);
  mtp__heap_validate(h);
  for (uint32_t k = 0; k < 33; k++) b[k] = NULL;
  check_live(pool, b, N);
  drop(pool, b, N);
}

/* A slab the heap lets go (slab_to_full past the full list's bound) must not hold listed blocks:
 * the class's list goes back to its slabs first. Aligned allocations take the slow path, which
 * leaves the list alone, so the slabs fill while blocks are listed. */
static void test_reuse_before_detach(void) {
  const size_t size = 2048;
  unsigned cls = mtp__class_of(size), i = cls;
  void **b;
  enum { N = 4 };
  mtpi_pool_t *pool = fill(size, N, &b);
  mtp_pool_t *pub = mtp__pool_out(pool);
  mtpi_heap_t *h = mtp__thread_heap(mtp__tl_thread, pool->id);
  mtp_free(b[0]);
  mtp_free(b[1]);
  b[0] = b[1] = NULL;
  CHECK_EQ_SZ(h->reuse_n[i], 2);
  uint32_t cap = (uint32_t)((mtp__class_pages[cls] * MTP_PAGE_SIZE) / size);
  uint32_t n = cap * (MTP_FULL_PER_CLASS + 3);
  void **a = calloc(n, sizeof(void *));
  CHECK(a != NULL);
  for (uint32_t k = 0; k < n; k++) {
    CHECK((a[k] = mtp_pool_alloc_aligned(pub, size, 2048)) != NULL);
    mtp__heap_validate(h); /* every listed block in a slab the heap owns */
  }
  CHECK_EQ_SZ(h->reuse_n[i], 0); /* given back when the first slab was let go */
  for (uint32_t k = 0; k < n; k++) mtp_free(a[k]);
  free(a);
  check_live(pool, b, N);
  drop(pool, b, N);
}

/* The free fast path's owner cases (api/alloc.c): above 1 KiB a block of one of our exhausted
 * slabs (owner word: our token with the FULL mark) is listed as one of the current slab is, and a
 * second free of it is reported; at or below 1 KiB such a free leaves the fast path, which takes
 * the slab off the full list. */
static void test_free_owner_cases(void) {
  const size_t sizes[2] = {2048, 512};
  for (int t = 0; t < 2; t++) {
    size_t size = sizes[t];
    unsigned cls = mtp__class_of(size);
    uint32_t cap = (uint32_t)((mtp__class_pages[cls] * MTP_PAGE_SIZE) / mtp__class_size[cls]);
    void **b;
    uint32_t n = cap + 1; /* S0 exhausted, S1 current with one block */
    mtpi_pool_t *pool = fill(size, n, &b);
    mtpi_heap_t *h = mtp__thread_heap(mtp__tl_thread, pool->id);
    mtpi_desc_t *s0 = mtp__run_of((uintptr_t)b[0]), *s1 = mtp__run_of((uintptr_t)b[cap]);
    const uintptr_t me = (uintptr_t)mtp__tl_thread;
    CHECK(s0 != s1 && h->current[cls] == s1);
    CHECK(mtp__load_relaxed(&s0->owner) == (me | MTP_OWNER_FULL));
    CHECK(mtp__load_relaxed(&s1->owner) == me);
    void *first = b[0];
    mtp_free(first);
    b[0] = NULL;
    if (mtp__class_size[cls] > MTP_DIRECT_MAX) {
      unsigned i = cls;
      CHECK_EQ_SZ(h->reuse_n[i], 1);
      CHECK(h->reuse[i] == first);
      CHECK_EQ_SZ(MTP_USED(s0), cap); /* listed: still counted, still exhausted */
      CHECK(mtp__load_relaxed(&s0->owner) == (me | MTP_OWNER_FULL));
      mtp_free(b[cap]); /* the current slab's block: listed too, newest first */
      CHECK_EQ_SZ(h->reuse_n[i], 2);
      CHECK(h->reuse[i] == b[cap]);
      b[cap] = NULL;
    } else {
      CHECK_EQ_SZ(MTP_USED(s0), cap - 1);
      CHECK(mtp__load_relaxed(&s0->owner) == me); /* off the full list, our token unmarked */
    }
    mtp__heap_validate(h);
    double_frees = 0;
    mtp_set_error_handler(on_error, NULL);
    mtp_free(first);
    mtp_set_error_handler(NULL, NULL);
    CHECK_EQ_SZ(double_frees, 1);
    mtp__heap_validate(h);
    check_live(pool, b, n);
    drop(pool, b, n);
  }
}

int main(void) {
  RUN(test_lists);
  RUN(test_cache_keeps_format);
  RUN(test_late_news);
  RUN(test_cold_classes);
  RUN(test_cold_shards);
  RUN(test_partial_queue);
  RUN(test_full_limit_grows);
  RUN(test_full_limit_unbounded);
  RUN(test_freed_into_current);
  RUN(test_freed_into_current_remote);
  RUN(test_remote_before_carve);
  RUN(test_most_back);
  RUN(test_reuse_small);
  RUN(test_reuse_lists);
  RUN(test_reuse_trim_keeps_newest);
  RUN(test_reuse_before_detach);
  RUN(test_free_owner_cases);
  DONE();
}
