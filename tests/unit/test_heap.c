/* Unit test of the heap layer's lists: the current slab, the full list (at most
 * MTP_FULL_PER_CLASS exhausted slabs; older ones are detached), a free into a full slab moving it
 * to partial, a free into a detached slab taking it back, an empty slab going to the cache, and
 * thread flush; mtp__heap_validate checks the lists and every slab on them at each step. */
#include "heap/heap.h"
#include "testhelper.h"

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
  mtpi_heap_t *h = mtp__tl_thread->heaps[pool->id];
  CHECK(h != NULL);
  mtp__heap_validate(h);
  CHECK_EQ_SZ(h->full_count[cls], MTP_FULL_PER_CLASS);
  mtpi_page_t *first = mtp__slab_of((uintptr_t)b[0]); /* the oldest: detached */
  CHECK_EQ_SZ(mtp__load_relaxed(&first->owner), 0);
  CHECK(!(mtp__load_relaxed(&first->thread_free) & MTP_TF_OWNED));
  mtpi_page_t *full = mtp__slab_of((uintptr_t)b[cap * (SLABS - 1) - 1]);
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
  CHECK(mtp__tl_thread->heaps[pool->id] == NULL);
  mtp_pool_destroy(mtp__pool_out(pool));
  free(b);
}

int main(void) {
  RUN(test_lists);
  DONE();
}
