/* Unit test of the region layer: spans of 1, 2 and 4 pages from a region set, the page map
 * (descriptor of a pointer, the span head from a tail page, the chunk map), the free and dirty
 * bitmaps against the descriptors (mtp__region_validate), purge and unmap. The set stands alone
 * here: no pool, no lock (single-threaded). */
#include "region/region.h"
#include "testhelper.h"

static void test_spans_and_page_map(void) {
  mtpi_rset_t rs = {0};
  mtpi_desc_t *s[3];
  unsigned pages[3] = {1, 2, 4};
  for (int i = 0; i < 3; i++) {
    s[i] = mtp__region_alloc_slab(&rs, pages[i], NULL, false, false, NULL);
    CHECK(s[i] != NULL);
    s[i]->kind = MTP_PAGE_SLAB; /* what a slab format would do */
    char *start = mtp__page_start(s[i]);
    CHECK(((uintptr_t)start & (((size_t)pages[i] << MTP_PAGE_SHIFT) - 1)) == 0); /* aligned */
    CHECK(mtp__is_region_ptr((uintptr_t)start));
    CHECK(mtp__page_set(s[i]) == &rs);
    /* every byte of the span maps back to the span's first descriptor */
    for (size_t off = 0; off < ((size_t)pages[i] << MTP_PAGE_SHIFT); off += 4096)
      CHECK(mtp__run_of((uintptr_t)start + off) == s[i]);
  }
  mtp__region_validate(&rs);
  CHECK_EQ_SZ(rs.mapped_bytes, MTP_REGION_SIZE);
  /* the region's header lies just below its pages, which start on a region boundary; the
   * header is no memory of the chunk map's (a free of a pointer into it is foreign) */
  mtpi_region_t *r = mtp__region_of_desc(s[0]);
  CHECK(mtp__region_base(r) == (char *)r + MTP_REGION_META_BYTES);
  CHECK(((uintptr_t)mtp__region_base(r) & (MTP_REGION_SIZE - 1)) == 0);
  CHECK(mtp__region_of((uintptr_t)mtp__region_base(r) + MTP_REGION_SIZE - 1) == r);
  CHECK(!mtp__is_region_ptr((uintptr_t)r) && mtp__is_region_ptr((uintptr_t)mtp__region_base(r)));
  for (int i = 0; i < 3; i++) mtp__region_free_run(&rs, s[i], 0);
  mtp__region_validate(&rs);
  CHECK(mtp__region_dirty_left(&rs));
  /* all free and due: purged, then the region (all free and clean) is unmapped */
  size_t back = mtp__region_purge(&rs, 1000, 0, false, false, NULL);
  CHECK(back >= (size_t)7 << MTP_PAGE_SHIFT);
  CHECK(rs.regions == NULL);
  CHECK(!mtp__is_region_ptr((uintptr_t)mtp__region_base(r)));
  CHECK_EQ_SZ(rs.mapped_bytes, 0);
}

static void test_fill_a_region(void) {
  mtpi_rset_t rs = {0};
  mtpi_desc_t *got[MTP_PAGES_PER_REGION];
  unsigned n = 0;
  for (; n < MTP_REGION_USABLE_PAGES; n++) {
    got[n] = mtp__region_alloc_slab(&rs, 1, NULL, false, false, NULL);
    CHECK(got[n] != NULL);
    got[n]->kind = MTP_PAGE_SLAB;
  }
  CHECK(rs.regions->next == NULL); /* one region held them all */
  mtpi_desc_t *more = mtp__region_alloc_slab(&rs, 1, NULL, false, false, NULL); /* a second region */
  CHECK(more != NULL && mtp__region_of_desc(more) != mtp__region_of_desc(got[0]));
  more->kind = MTP_PAGE_SLAB;
  mtp__region_validate(&rs); /* the full region went to the back */
  for (unsigned i = 0; i < n; i++) mtp__region_free_run(&rs, got[i], 0);
  mtp__region_free_run(&rs, more, 0);
  mtp__region_validate(&rs);
  mtp__region_purge(&rs, 0, -1, true, false, NULL);
  CHECK(rs.regions == NULL);
}

/* Heaps growing at once fault pages in regions of their own: each claims one (their page faults
 * would otherwise queue on one page-table lock); resident pages stay anyone's. (Every span here
 * is a growing heap's: see test_first_spans_share.) */
static void test_claims(void) {
  mtpi_rset_t rs = {0};
  mtpi_region_t *a = NULL, *b = NULL, *c = NULL;
  mtpi_desc_t *sa = mtp__region_alloc_slab(&rs, 1, &a, true, true, NULL);
  CHECK(sa != NULL && a == mtp__region_of_desc(sa) && a->h.claim == &a);
  sa->kind = MTP_PAGE_SLAB;
  mtpi_desc_t *sb = mtp__region_alloc_slab(&rs, 1, &b, true, true, NULL);
  CHECK(sb != NULL && b == mtp__region_of_desc(sb) && b != a && b->h.claim == &b);
  sb->kind = MTP_PAGE_SLAB;
  mtpi_desc_t *sa2 = mtp__region_alloc_slab(&rs, 1, &a, true, true, NULL); /* from its own region again */
  CHECK(sa2 != NULL && mtp__region_of_desc(sa2) == a);
  sa2->kind = MTP_PAGE_SLAB;
  /* a resident page of a's region goes to a third heap, which claims nothing for it */
  mtp__region_free_run(&rs, sa2, 0);
  mtpi_desc_t *sc = mtp__region_alloc_slab(&rs, 1, &c, true, true, NULL);
  CHECK(sc == sa2 && c == NULL && a->h.claim == &a);
  sc->kind = MTP_PAGE_SLAB;
  /* its next fresh page: not in a's or b's region, but a region it claims */
  mtpi_desc_t *sc2 = mtp__region_alloc_slab(&rs, 1, &c, true, true, NULL);
  CHECK(sc2 != NULL && c != NULL && c != a && c != b && c->h.claim == &c);
  sc2->kind = MTP_PAGE_SLAB;
  /* without a hint (checked mode): any free page */
  mtpi_desc_t *sn = mtp__region_alloc_slab(&rs, 1, NULL, false, false, NULL);
  CHECK(sn != NULL && rs.mapped_bytes == 3 * MTP_REGION_SIZE);
  sn->kind = MTP_PAGE_SLAB;
  mtp__region_validate(&rs);
  mtpi_desc_t *all[] = {sa, sb, sc, sc2, sn};
  for (unsigned i = 0; i < 5; i++) mtp__region_free_run(&rs, all[i], 0);
  mtp__region_purge(&rs, 0, -1, true, false, NULL);
  CHECK_EQ_SZ(rs.mapped_bytes, 3 * MTP_REGION_SIZE); /* claimed regions stay mapped */
  CHECK(mtp__is_region_ptr((uintptr_t)mtp__region_base(a)) && mtp__is_region_ptr((uintptr_t)mtp__region_base(c)));
  mtp__region_unclaim(&a);
  CHECK(a == NULL);
  mtp__region_unclaim(&b);
  mtp__region_unclaim(&c);
  mtp__region_purge(&rs, 0, -1, true, false, NULL);
  CHECK(rs.regions == NULL);
  CHECK_EQ_SZ(rs.mapped_bytes, 0);
}

/* While few regions are claimed, a heap's first span claims one, as a growing heap's does. Past
 * MTP_REGION_FREE_CLAIMS, a first span (not growing) claims nothing: threads that allocate a
 * little share regions, however many they are; they take no fresh pages in a region claimed by a
 * growing heap. */
static void test_first_spans_share(void) {
  mtpi_rset_t rs = {0};
  mtpi_region_t *f = NULL;
  mtpi_desc_t *sf = mtp__region_alloc_slab(&rs, 1, &f, false, false, NULL);
  CHECK(sf != NULL && f == mtp__region_of_desc(sf) && f->h.claim == &f && rs.claimed == 1);
  sf->kind = MTP_PAGE_SLAB;
  mtp__region_free_run(&rs, sf, 0);
  mtp__region_unclaim(&f);
  CHECK(rs.claimed == 0);
  mtp__region_purge(&rs, 0, -1, true, false, NULL);
  CHECK(rs.regions == NULL);
  rs.claimed = MTP_REGION_FREE_CLAIMS; /* as if that many heaps held a region each */
  mtpi_region_t *h[8] = {0};
  mtpi_desc_t *s[8];
  for (unsigned i = 0; i < 8; i++) {
    s[i] = mtp__region_alloc_slab(&rs, 1, &h[i], false, false, NULL);
    CHECK(s[i] != NULL && h[i] == NULL);
    s[i]->kind = MTP_PAGE_SLAB;
  }
  CHECK_EQ_SZ(rs.mapped_bytes, MTP_REGION_SIZE); /* one region for the eight */
  mtpi_region_t *g = NULL;
  mtpi_desc_t *sg = mtp__region_alloc_slab(&rs, 1, &g, true, true, NULL);
  CHECK(sg != NULL && g == mtp__region_of_desc(sg) && g->h.claim == &g);
  sg->kind = MTP_PAGE_SLAB;
  mtpi_region_t *x = NULL;
  mtpi_desc_t *sx = mtp__region_alloc_slab(&rs, 1, &x, false, false, NULL);
  CHECK(sx != NULL && x == NULL && mtp__region_of_desc(sx) != g);
  CHECK(mtp__region_of_desc(sx)->h.claim == NULL);
  sx->kind = MTP_PAGE_SLAB;
  mtp__region_validate(&rs);
  for (unsigned i = 0; i < 8; i++) mtp__region_free_run(&rs, s[i], 0);
  mtp__region_free_run(&rs, sg, 0);
  mtp__region_free_run(&rs, sx, 0);
  mtp__region_unclaim(&g);
  CHECK(rs.claimed == MTP_REGION_FREE_CLAIMS);
  mtp__region_purge(&rs, 0, -1, true, false, NULL);
  CHECK(rs.regions == NULL);
}

/* A streak of growing spans from never-touched pages asks for a fault-in ahead (the span and a
 * window after it), but only when the caller says its blocks cover every OS page (populate). */
static void test_populate_ahead(void) {
  for (int populate = 0; populate <= 1; populate++) {
    mtpi_rset_t rs = {0};
    mtpi_region_t *r = NULL;
    mtpi_desc_t *s[8];
    size_t asked = 0;
    for (unsigned i = 0; i < 8; i++) {
      s[i] = mtp__region_alloc_slab(&rs, 1, &r, true, populate != 0, NULL);
      CHECK(s[i] != NULL);
      s[i]->kind = MTP_PAGE_SLAB;
      void *at;
      size_t len;
      (void)mtp__region_take_populate(&rs, &at, &len);
      if (len) CHECK(at == mtp__page_start(s[i]) && len >= MTP_PAGE_SIZE);
      asked += len;
    }
    if (populate) {
      CHECK(asked >= MTP_PAGE_SIZE); /* the streak reached: faulted in ahead */
    } else {
      CHECK_EQ_SZ(asked, 0);
      /* nor did those spans count towards the streak: the next one that may populate is the
       * first of a streak, so it asks for nothing */
      mtpi_desc_t *t = mtp__region_alloc_slab(&rs, 1, &r, true, true, NULL);
      CHECK(t != NULL);
      t->kind = MTP_PAGE_SLAB;
      void *at;
      size_t len;
      (void)mtp__region_take_populate(&rs, &at, &len);
      CHECK_EQ_SZ(len, 0);
      mtp__region_free_run(&rs, t, 0);
    }
    mtp__region_validate(&rs);
    for (unsigned i = 0; i < 8; i++) mtp__region_free_run(&rs, s[i], 0);
    mtp__region_unclaim(&r);
    mtp__region_purge(&rs, 0, -1, true, false, NULL);
    CHECK(rs.regions == NULL);
  }
}

int main(void) {
  RUN(test_spans_and_page_map);
  RUN(test_fill_a_region);
  RUN(test_claims);
  RUN(test_first_spans_share);
  RUN(test_populate_ahead);
  DONE();
}
