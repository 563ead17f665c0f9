/* Unit test of the slab layer's state machine: format, carve (with 4, 16 and 64 KiB OS pages),
 * pop and push, the remote list and its count, detach, the outcomes a remote free returns for a
 * detached slab (NEWS at a quarter back and when empty), adopt, and the counting identities
 * (mtp__slab_validate). Single-threaded: "remote" frees come from this thread. */
#include "slab/slab.h"
#include "testhelper.h"

static mtpi_rset_t rs;

static mtpi_desc_t *fresh(unsigned cls) {
  mtpi_desc_t *s = mtp__region_alloc_slab(&rs, mtp__class_pages[cls], NULL, false, false, NULL);
  CHECK(s != NULL);
  mtp__slab_format(s, cls, false);
  mtp__store_relaxed(&s->owner, 1);
  return s;
}

static void test_carve_page_sizes(void) {
  size_t os_pages[] = {4096, 16384, 65536};
  unsigned cls = mtp__class_of(48);
  for (int k = 0; k < 3; k++) {
    mtpi_desc_t *s = fresh(cls);
    CHECK(mtp__slab_carve(s, os_pages[k]));
    char *start = mtp__page_start(s);
    /* carved up to the end of the first OS page, whole blocks only */
    size_t carved = (size_t)(mtp__slab_bump(s) - start);
    CHECK(carved % 48 == 0 && carved <= os_pages[k] && carved + 48 > os_pages[k]);
    uint32_t n = 0;
    for (mtpi_block_t *b = s->free; b; b = mtp__block_next(b)) n++;
    CHECK_EQ_SZ(n, carved / 48);
    mtp__slab_validate(s);
    while (mtp__slab_carve(s, os_pages[k])) {
    }
    CHECK(mtp__slab_bump(s) == s->end);
    mtp__slab_validate(s);
    mtp__region_free_run(&rs, s, 0);
  }
  /* a class larger than the OS page still carves one whole block */
  mtpi_desc_t *s = fresh(mtp__class_of(20000));
  CHECK(mtp__slab_carve(s, 4096));
  CHECK(mtp__slab_bump(s) == mtp__page_start(s) + s->block_size);
  mtp__region_free_run(&rs, s, 0);
}

static void test_local_and_remote(void) {
  mtpi_desc_t *s = fresh(mtp__class_of(64));
  CHECK(mtp__slab_extend(s));
  mtpi_block_t *a = mtp__slab_pop(s), *b = mtp__slab_pop(s), *c = mtp__slab_pop(s);
  CHECK(a && b && c && s->used == 3);
  CHECK(!mtp__slab_push_local(s, a));                  /* 2 still in use */
  mtpi_remote_seen_t seen;
  CHECK_EQ_SZ(mtp__slab_free_remote(s, b, &seen), MTP_REMOTE_OWNED); /* owned: the owner collects */
  CHECK_EQ_SZ(MTP_TF_COUNT(mtp__load_relaxed(&s->thread_free)), 1);
  CHECK_EQ_SZ(mtp__slab_collect(s), 1);
  CHECK_EQ_SZ(s->used, 1);
  mtp__slab_validate(s);
  CHECK(mtp__slab_push_local(s, c)); /* the last block: the slab became empty */
  CHECK_EQ_SZ(s->used, 0);
  mtp__region_free_run(&rs, s, 0);
}

static void test_detach_news_adopt(void) {
  mtpi_desc_t *s = fresh(mtp__class_of(1024)); /* 64 blocks */
  uint32_t cap = s->capacity, n;
  mtpi_block_t **blocks = calloc(cap, sizeof(*blocks));
  while (mtp__slab_extend(s)) {
  }
  for (uint32_t i = 0; i < cap; i++) blocks[i] = mtp__slab_pop(s);
  CHECK(s->free == NULL && s->used == cap);
  CHECK(mtp__slab_detach(s, 1, &n)); /* exhausted, no remote frees: detached */
  CHECK_EQ_SZ(n, 0);
  CHECK_EQ_SZ(s->detached_used, cap);
  /* remote frees of a detached slab: news at a quarter back, then nothing, then news when empty */
  uint32_t quarter = (cap + 3) / 4, news = 0;
  for (uint32_t i = 0; i < cap / 2; i++) {
    mtpi_remote_seen_t seen = {NULL, 99};
    mtpi_remote_t r = mtp__slab_free_remote(s, blocks[i], &seen);
    CHECK(r == MTP_REMOTE_NEWS || r == MTP_REMOTE_DETACHED);
    if (r == MTP_REMOTE_NEWS) {
      CHECK_EQ_SZ(i + 1, quarter);
      CHECK(seen.set == &rs && seen.unmaps == 0); /* what the news needs, read before the push */
      news++;
    }
  }
  CHECK_EQ_SZ(news, 1);
  /* listing needs LISTED; adopting a listed slab needs the lock holder's permission */
  CHECK(mtp__slab_mark_listed(s));
  CHECK(!mtp__slab_mark_listed(s));
  CHECK(!mtp__slab_adopt(s, NULL, 2, false, &n));
  CHECK(mtp__slab_adopt(s, NULL, 2, true, &n));
  CHECK_EQ_SZ(n, cap / 2);
  CHECK_EQ_SZ(s->used, cap - cap / 2);
  CHECK_EQ_SZ(mtp__load_relaxed(&s->owner), 2);
  mtp__slab_validate(s);
  /* adopted again: a second adoption fails */
  CHECK(!mtp__slab_adopt(s, NULL, 3, true, &n));
  /* give it up again with blocks in use, then free the rest remotely: the last one is news */
  for (uint32_t i = 0; i < cap / 2; i++) CHECK(mtp__slab_pop(s) != NULL);
  CHECK(s->free == NULL && s->used == cap);
  mtp__slab_validate(s);
  CHECK(mtp__slab_detach(s, 2, &n));
  uint32_t used = s->detached_used;
  CHECK_EQ_SZ(used, cap);
  for (uint32_t i = 0; i < cap; i++) {
    mtpi_remote_seen_t seen;
    mtpi_remote_t r = mtp__slab_free_remote(s, blocks[i], &seen);
    if (i + 1 == cap) CHECK_EQ_SZ(r, MTP_REMOTE_NEWS); /* empty: the caller releases it */
  }
  CHECK_EQ_SZ(MTP_TF_COUNT(mtp__load_relaxed(&s->thread_free)), s->detached_used);
  free(blocks);
  mtp__region_free_run(&rs, s, 0);
}

int main(void) {
  mtp__link_key_init(); /* what making a pool does before any slab (no pool here) */
  RUN(test_carve_page_sizes);
  RUN(test_local_and_remote);
  RUN(test_detach_news_adopt);
  mtp__region_purge(&rs, 0, 0, true, false, NULL);
  CHECK(rs.regions == NULL);
  DONE();
}
