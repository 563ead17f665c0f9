/* Unit test of the huge-page setting (MTPOOL_HUGEPAGES) and its rule (base.h): its parsing, the
 * advice fresh memory gets (VmFlags "hg" / "nh" in /proc/self/smaps), a range found dense made one
 * huge page (AnonHugePages) and one found sparse left on small pages, the purge of a huge range
 * (whole once all its pages are free, kept whole while less than an eighth is free, split past
 * that), large blocks looked at and collapsed, blocks mapped on their own advised by the last one
 * freed unadvised, and that a pool still gives its memory back (RSS)
 * through the purge thread. The setting is read once per process, so each setting runs in a child
 * process of its own (this program, run again). Skips (77) where the kernel has no transparent
 * huge pages. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/os.h"
#include "base/track.h"
#include "pool/pool.h"
#include "region/region.h"
#include "testhelper.h"

static void test_parse(void) {
  CHECK(mtp__hugepages_parse(NULL) == MTP_HUGE_AUTO); /* the default */
  CHECK(mtp__hugepages_parse("") == MTP_HUGE_AUTO);
  CHECK(mtp__hugepages_parse("system") == MTP_HUGE_SYSTEM);
  CHECK(mtp__hugepages_parse("0") == MTP_HUGE_NEVER);
  CHECK(mtp__hugepages_parse("never") == MTP_HUGE_NEVER);
  CHECK(mtp__hugepages_parse("off") == MTP_HUGE_NEVER);
  CHECK(mtp__hugepages_parse("1") == MTP_HUGE_ALWAYS);
  CHECK(mtp__hugepages_parse("always") == MTP_HUGE_ALWAYS);
  CHECK(mtp__hugepages_parse("on") == MTP_HUGE_ALWAYS);
  CHECK(mtp__hugepages_parse("auto") == MTP_HUGE_AUTO);
  CHECK(mtp__hugepages_parse("2") == -1);
  CHECK(mtp__hugepages_parse("yes") == -1);
  CHECK(mtp__hugepages_parse("1 ") == -1);
}

/* The VmFlags line of the mapping that holds addr, and its AnonHugePages (kB). */
static int smaps_of(const void *addr, char *flags, size_t n, long *anon_huge_kb) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) return -1;
  char line[512];
  int in = 0, found = -1;
  *anon_huge_kb = -1;
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
      if (in) break;
      in = (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
      continue;
    }
    if (!in) continue;
    if (strncmp(line, "AnonHugePages:", 14) == 0) *anon_huge_kb = strtol(line + 14, NULL, 10);
    if (strncmp(line, "VmFlags:", 8) == 0) {
      snprintf(flags, n, "%s", line + 8);
      found = 0;
    }
  }
  fclose(f);
  return found;
}

static int has_flag(const char *flags, const char *flag) {
  char pad[600];
  snprintf(pad, sizeof pad, " %s ", flags);
  char *nl = strchr(pad, '\n');
  if (nl) *nl = ' ';
  char want[8];
  snprintf(want, sizeof want, " %s ", flag);
  return strstr(pad, want) != NULL;
}

/* In the child: the region of a fresh set carries the advice fresh memory gets in its setting:
 * huge with 1, never with 0, none with system; in auto none (MADV_NOHUGEPAGE where the system's
 * THP setting is "always"), and huge once the set's ranges were found dense (huge_grow). */
static void test_advice(void) {
  const char *env = getenv("MTPOOL_HUGEPAGES");
  int mode = mtp__hugepages_mode();
  for (int grow = 0; grow < 2; grow++) {
    mtpi_rset_t rs = {0};
    rs.huge_grow = grow;
    mtpi_desc_t *s = mtp__region_alloc_slab(&rs, 1, NULL, false, false, NULL);
    REQUIRE(s != NULL, "a span");
    s->kind = MTP_PAGE_SLAB;
    mtpi_region_t *r = mtp__region_of_desc(s);
    char flags[512] = "";
    long ahp;
    /* the region's pages: one mapping aligned to the region's size, where huge pages fit */
    REQUIRE(smaps_of(mtp__region_base(r) + MTP_REGION_SIZE / 2, flags, sizeof flags, &ahp) == 0,
            "smaps entry");
    printf("  MTPOOL_HUGEPAGES=%s, %s: region %p VmFlags:%s", env ? env : "(unset)",
           grow ? "the set's ranges found dense" : "a fresh set", (void *)r, flags);
    bool huge = mode == MTP_HUGE_ALWAYS || (mode == MTP_HUGE_AUTO && grow);
    bool never = mode == MTP_HUGE_NEVER || (mode == MTP_HUGE_AUTO && !grow && mtp__os_thp_always());
    CHECK(has_flag(flags, "hg") == huge && has_flag(flags, "nh") == never);
    CHECK(r->h.huge_mask[0] == (huge ? ~0ull : 0));
    mtp__region_free_run(&rs, s, 0);
    mtp__region_purge(&rs, 0, -1, true, false, NULL);
    CHECK(rs.regions == NULL);
  }
}

/* Write a span's memory as a slab would (a fresh span is poisoned for ASan until formatted). */
static void touch_pages(mtpi_desc_t *s, int byte, size_t bytes) {
  char *p = mtp__page_start(s);
  mtp__track_alloc(p, MTP_PAGE_SIZE);
  memset(p, byte, bytes);
}

/* In the child (auto and 1): a huge range whose pages are all in runs and written is made one huge
 * page by a purge that collapses, and the set's fresh memory is advised huge from then on; one
 * whose pages are in runs but written a page each is left on small pages; a collapsed range with
 * an eighth of its pages freed and due is split. */
static void test_collapse(void) {
  mtpi_rset_t rs = {0};
  mtpi_desc_t *got[MTP_PAGES_PER_REGION] = {0};
  for (unsigned i = 0; i < MTP_REGION_USABLE_PAGES; i++) {
    mtpi_desc_t *s = mtp__region_alloc_slab(&rs, 1, NULL, false, false, NULL);
    REQUIRE(s != NULL, "a span");
    s->kind = MTP_PAGE_SLAB;
    got[s - mtp__region_of_desc(s)->pages] = s;
  }
  mtpi_region_t *r = mtp__region_of_desc(got[0]);
  unsigned half = MTP_PAGES_PER_REGION / 2;
  uint64_t lower = ((uint64_t)1 << half) - 1, upper = ~lower;
  bool always = mtp__hugepages_mode() == MTP_HUGE_ALWAYS;
  if (always) { /* made small again first, as a split leaves it: the collapse is what is tested */
    REQUIRE(mtp__os_huge_advise(mtp__region_base(r), MTP_REGION_SIZE, false) == 0, "advice");
    r->h.huge_mask[0] = 0;
    r->h.dense_backoff_ms = 100; /* what a run taken in a range small already says */
    r->h.dense_check_ms = 0;
  } else {
    CHECK(rs.dense_news); /* its runs filled both halves */
    CHECK(r->h.dense_backoff_ms != 0 && r->h.dense_check_ms == 0);
  }
  for (unsigned i = 0; i < MTP_PAGES_PER_REGION; i++)
    touch_pages(got[i], 2, i < half ? MTP_PAGE_SIZE : 1); /* the lower half dense, the upper not */
  mtp__region_purge(&rs, 1000, 500, false, true, NULL);
  long ahp;
  char flags[512] = "";
  REQUIRE(smaps_of(mtp__region_base(r), flags, sizeof flags, &ahp) == 0, "smaps");
  printf("  lower half written, upper half a byte a page: AnonHugePages %ld kB, huge_mask %#llx\n", ahp,
         (unsigned long long)r->h.huge_mask[0]);
  CHECK(r->h.huge_mask[0] == lower && rs.huge_grow);
  EXPECT(ahp >= 2048, "AnonHugePages %ld kB (the kernel may have no huge page to give)", ahp);
  CHECK(((const char *)mtp__page_start(got[3]))[100] == 2); /* the collapse kept the bytes */
  /* looked at again later only, on a backoff */
  CHECK(r->h.dense_check_ms > 1000 && r->h.dense_backoff_ms > 100);
  /* 3 of its 32 pages freed (under an eighth): kept whole; a 4th: split */
  for (unsigned i = 0; i < 3; i++) mtp__region_free_run(&rs, got[i], 2000);
  CHECK_EQ_SZ(mtp__region_purge(&rs, 3000, 500, false, true, NULL), 0);
  CHECK(r->h.huge_mask[0] == lower);
  mtp__region_free_run(&rs, got[3], 2000);
  CHECK_EQ_SZ(mtp__region_purge(&rs, 3000, 500, false, true, NULL), (size_t)4 << MTP_PAGE_SHIFT);
  CHECK(r->h.huge_mask[0] == 0 && !rs.huge_grow);
  REQUIRE(smaps_of(mtp__region_base(r), flags, sizeof flags, &ahp) == 0, "smaps");
  printf("  split: VmFlags:%s", flags);
  CHECK(has_flag(flags, "nh"));
  (void)upper;
  for (unsigned i = 4; i < MTP_PAGES_PER_REGION; i++) mtp__region_free_run(&rs, got[i], 4000);
  mtp__region_purge(&rs, 5000, 0, true, false, NULL);
  CHECK(rs.regions == NULL);
}

/* Share of purged bytes that RSS must drop by: a sanitizer's own bookkeeping (allocator, shadow)
 * moves RSS by tens of kB meanwhile. */
#define PCT (TH_SANITIZED ? 90 : 99)
/* The kernel's RSS counters are per-CPU and read approximately (/proc/self/statm may lag by a
 * batch of pages per CPU); a loaded CI machine showed a drop one 64 KiB page short. */
#define RSS_SLACK ((size_t)256 << 10)

/* Write a span's memory as a slab would (a fresh span is poisoned for ASan until formatted). */
static void touch(mtpi_desc_t *s, int byte) {
  char *p = mtp__page_start(s);
  mtp__track_alloc(p, MTP_PAGE_SIZE);
  memset(p, byte, MTP_PAGE_SIZE);
}

/* In the child with MTPOOL_HUGEPAGES=1: a huge range goes back in one step once all its free pages
 * are due: whole, or split (MADV_NOHUGEPAGE, free pages purged) while a page of it is in use and an
 * eighth or more is free, and advised huge again once it is all free (fresh memory is huge). */
static void test_huge_purge(void) {
  mtpi_rset_t rs = {0};
  mtpi_desc_t *got[MTP_PAGES_PER_REGION] = {0};
  for (unsigned i = 0; i < MTP_REGION_USABLE_PAGES; i++) {
    mtpi_desc_t *s = mtp__region_alloc_slab(&rs, 1, NULL, false, false, NULL);
    REQUIRE(s != NULL, "a span");
    s->kind = MTP_PAGE_SLAB;
    got[s - mtp__region_of_desc(s)->pages] = s;
  }
  mtpi_region_t *r = mtp__region_of_desc(got[MTP_REGION_FIRST_PAGE]);
  unsigned hp = (unsigned)(mtp__os_huge_page_size() / MTP_PAGE_SIZE), first = MTP_PAGES_PER_REGION / 2;
  CHECK(r->h.huge_mask[0] == ~0ull);
  REQUIRE(hp == 32, "2 MiB huge pages of 32 mtpool pages (got %u)", hp);
  for (unsigned i = MTP_REGION_FIRST_PAGE; i < MTP_PAGES_PER_REGION; i++) touch(got[i], 1);
  char *upper_at = mtp__region_base(r) + first * MTP_PAGE_SIZE;
  long ahp;
  char flags[512];
  REQUIRE(smaps_of(upper_at, flags, sizeof flags, &ahp) == 0, "smaps");
  /* Informational: the kernel may fall back to small pages (fragmented memory, THP 'never'). */
  printf("  AnonHugePages of the region's mapping after touching it: %ld kB\n", ahp);
  unsigned keep = first + 7, late = first + 20, low_keep = MTP_REGION_FIRST_PAGE;
  uint64_t upper = ~0ull << first, lower = ~upper;
  /* free all but one page in each half; one page of the huge range later than the others */
  for (unsigned i = MTP_REGION_FIRST_PAGE; i < MTP_PAGES_PER_REGION; i++)
    if (i != keep && i != low_keep) mtp__region_free_run(&rs, got[i], i == late ? 900 : 100);
  size_t rss0 = th_rss();
  size_t back = mtp__region_purge(&rs, 1000, 500, false, false, NULL);
  /* the lower huge range, all its free pages due and one in use: split and purged; the upper one
   * waits for its last free page */
  CHECK((r->h.dirty_mask[0] & lower) == 0);
  CHECK(r->h.dirty_mask[0] == (upper & ~((uint64_t)1 << keep)));
  CHECK_EQ_SZ(back, (size_t)(first - MTP_REGION_FIRST_PAGE - 1) << MTP_PAGE_SHIFT);
  CHECK(mtp__region_dirty_left(&rs));
  CHECK(r->h.huge_mask[0] == upper);
  /* all due: split (advised no-huge), every free page of it purged, the used one kept */
  back = mtp__region_purge(&rs, 1400, 500, false, false, NULL);
  size_t rss1 = th_rss();
  CHECK_EQ_SZ(back, (size_t)(hp - 1) << MTP_PAGE_SHIFT);
  CHECK(r->h.dirty_mask[0] == 0 && !mtp__region_dirty_left(&rs));
  CHECK(r->h.huge_mask[0] == 0);
  REQUIRE(smaps_of(upper_at, flags, sizeof flags, &ahp) == 0, "smaps");
  printf("  split: VmFlags:%s", flags);
  CHECK(has_flag(flags, "nh") && !has_flag(flags, "hg"));
  size_t freed = (size_t)(MTP_REGION_USABLE_PAGES - 2) * MTP_PAGE_SIZE;
  EXPECT(rss0 > rss1 && rss0 - rss1 + RSS_SLACK >= freed * PCT / 100, "RSS %zu -> %zu kB", rss0 / 1024, rss1 / 1024);
  CHECK(((const char *)mtp__page_start(got[keep]))[5] == 1); /* the page in use kept its data */
  /* split, it is purged page by page */
  mtpi_desc_t *again = mtp__region_alloc_slab(&rs, 1, NULL, false, false, NULL);
  REQUIRE(again != NULL && mtp__region_of_desc(again) == r, "a span of the region");
  again->kind = MTP_PAGE_SLAB;
  touch(again, 4);
  mtp__region_free_run(&rs, again, 3000);
  CHECK_EQ_SZ(mtp__region_purge(&rs, 3000, 0, false, false, NULL), MTP_PAGE_SIZE);
  /* the last used page of the range is freed: purged whole after the delay, advised huge again */
  mtp__region_free_run(&rs, got[keep], 4000);
  CHECK_EQ_SZ(mtp__region_purge(&rs, 4200, 500, false, false, NULL), 0); /* not due yet */
  CHECK_EQ_SZ(mtp__region_purge(&rs, 4600, 500, false, false, NULL), MTP_PAGE_SIZE);
  CHECK(r->h.huge_mask[0] == upper); /* the upper range huge again; the lower one still split */
  REQUIRE(smaps_of(upper_at, flags, sizeof flags, &ahp) == 0, "smaps");
  printf("  all free: VmFlags:%s", flags);
  CHECK(has_flag(flags, "hg") && !has_flag(flags, "nh"));
  /* a forced purge (trim) does not wait for the delay */
  mtp__region_free_run(&rs, got[low_keep], 5000);
  CHECK(mtp__region_purge(&rs, 5000, 500, true, false, NULL) >= MTP_PAGE_SIZE);
  CHECK(rs.regions == NULL); /* all free and clean: unmapped */
  CHECK(!mtp__is_region_ptr((uintptr_t)upper_at));
}

/* Large blocks of `pool` in the child: N of SIZE bytes freed after `touch` bytes of each were
 * written, then 2N more (the first N reuse the freed ones' ranges, the last N are carved anew):
 * the VmFlags of the first and the last block's mappings. */
enum { LR_N = 16, LR_SIZE = 1 << 20 }; /* 16 MiB */
static void large_round(mtp_pool_t *pool, size_t touch, char *first, char *last, size_t len) {
  static char *blk[3 * LR_N];
  for (unsigned i = 0; i < 3 * LR_N; i++) {
    blk[i] = mtp_pool_alloc(pool, LR_SIZE);
    REQUIRE(blk[i] != NULL, "a large block");
    memset(blk[i], 5, touch);
    if (i + 1 == LR_N)
      for (unsigned j = 0; j < LR_N; j++) mtp_free(blk[j]);
  }
  long ahp0, ahp1;
  REQUIRE(smaps_of(blk[LR_N], first, len, &ahp0) == 0 && smaps_of(blk[3 * LR_N - 1], last, len, &ahp1) == 0,
          "smaps entries");
  printf("  large blocks (%zu bytes of each written): first VmFlags:%s  last VmFlags:%s  last mapping's "
         "AnonHugePages %ld kB\n", touch, first, last, ahp1);
  for (unsigned i = LR_N; i < 3 * LR_N; i++) {
    CHECK(blk[i][touch - 1] == 5);
    mtp_free(blk[i]);
  }
}

/* A block of `size` bytes, above the reserve's largest carve and larger than what the pool has
 * cached, gets a mapping of its own: advised `flag` ("hg" huge, "nh" never, NULL none), and
 * aligned to the huge page size when huge. */
static void own_block(mtp_pool_t *pool, size_t size, const char *flag) {
  char flags[512] = "";
  long ahp;
  char *b = mtp_pool_alloc(pool, size);
  REQUIRE(b != NULL, "a block mapped on its own");
  b[0] = 7;
  REQUIRE(smaps_of(b, flags, sizeof flags, &ahp) == 0, "the block's smaps entry");
  printf("  %zu MiB block %p: VmFlags:%s", size >> 20, (void *)b, flags);
  if (flag == NULL) {
    CHECK(!has_flag(flags, "hg") && !has_flag(flags, "nh"));
  } else {
    CHECK(has_flag(flags, flag) && !has_flag(flags, strcmp(flag, "hg") == 0 ? "nh" : "hg"));
  }
  if (flag != NULL && strcmp(flag, "hg") == 0) CHECK(((uintptr_t)b & (mtp__os_huge_page_size() - 1)) == 0);
  mtp_free(b);
}

/* In the child: a block mapped on its own and advised huge (MTPOOL_HUGEPAGES=1) takes whole huge
 * pages, and so does a smaller block its cached range serves, so that the tail split off starts
 * on a huge page; in the other modes (auto with no verdict yet) ranges end at the OS page. */
static void test_own_whole_pages(void) {
  const size_t H = (size_t)2 << 20, page = 4096;
  bool whole = mtp__hugepages_mode() == MTP_HUGE_ALWAYS;
  mtp_pool_t *p = th_pool("huge-whole", 60000, 0);
  char *a = mtp_pool_alloc(p, 13 * H / 2 + 1); /* 13 MiB + 1 byte */
  REQUIRE(a != NULL, "a block mapped on its own");
  memset(a, 1, 13 * H / 2 + 1);
  CHECK_EQ_SZ(mtp_usable_size(a), whole ? 7 * H : 13 * H / 2 + page);
  mtp_free(a);
  char *b = mtp_pool_alloc(p, 5 * H / 2 + 1); /* 5 MiB + 1: the head of the cached range */
  char *c = mtp_pool_alloc(p, 7 * H / 2 + 1); /* 7 MiB + 1: its tail, where it is whole huge pages */
  REQUIRE(b != NULL && c != NULL, "blocks of the cached range");
  CHECK(b == a);
  CHECK_EQ_SZ(mtp_usable_size(b), whole ? 3 * H : 5 * H / 2 + page);
  if (whole) {
    CHECK(c == a + 3 * H);
    CHECK_EQ_SZ(mtp_usable_size(c), 4 * H);
  }
  printf("  13 MiB + 1 block %p, then 5 MiB + 1 at %p (usable %zu) and 7 MiB + 1 at %p (usable %zu)\n",
         (void *)a, (void *)b, mtp_usable_size(b), (void *)c, mtp_usable_size(c));
  mtp_free(b);
  mtp_free(c);
  mtp_pool_destroy(p);
}

/* The AnonHugePages (kB) of the mapping that holds p, once it reaches want (waiting at most
 * wait_s for the purge passes' looks), or what it is then. */
static long huge_kb_of(const void *p, long want, double wait_s) {
  char flags[512];
  long ahp = -1;
  double t0 = th_now();
  do {
    if (smaps_of(p, flags, sizeof flags, &ahp) != 0) return -1;
    if (ahp >= want) break;
    usleep(20000);
  } while (th_now() - t0 < wait_s);
  return ahp;
}

/* In auto and 1: a block mapped on its own is looked at on the purge passes after it. Written
 * whole, its huge ranges are made huge pages (AnonHugePages); written a byte a huge range, none
 * is. Either way the next block mapped on its own while it lives gets fresh memory's advice: only
 * a freed block judges the next (test_own_verdict). */
static void looked_block(bool dense) {
  enum { SIZE = 16 << 20, H = 2 << 20 };
  int mode = mtp__hugepages_mode();
  mtp_pool_t *p = th_pool(dense ? "huge-looked-dense" : "huge-looked-sparse", 60000, 0);
  char *b = mtp_pool_alloc(p, SIZE);
  REQUIRE(b != NULL, "a 16 MiB block");
  CHECK(((uintptr_t)b & (H - 1)) == 0); /* aligned, so that its huge ranges are whole */
  if (dense)
    for (size_t at = 0; at < SIZE; at += 65536) memset(b + at, 9, 65536);
  else
    for (size_t at = 0; at < SIZE; at += H) b[at] = 9;
  if (!dense) usleep(300000); /* the passes' first looks */
  long kb = huge_kb_of(b, dense ? H >> 10 : 1, dense ? 10 : 0);
  printf("  16 MiB block, %s: AnonHugePages %ld kB\n", dense ? "written whole" : "a byte a huge range",
         kb);
  if (dense)
    EXPECT(kb >= (H >> 10), "AnonHugePages %ld kB (the kernel may have no huge page to give)", kb);
  else
    CHECK(kb == 0);
  CHECK(b[SIZE - H] == 9);
  own_block(p, (size_t)24 << 20, mode == MTP_HUGE_ALWAYS ? "hg" : mtp__os_thp_always() ? "nh" : NULL);
  mtp_free(b);
  mtp_pool_destroy(p);
}

/* A block that realloc grows past a huge page, its new part written each time (whole, or its
 * first byte only): where fresh large memory is huge (huge) its range moves to an address aligned
 * to the huge page size and is advised huge, so that its new tail faults in huge pages; else not. */
static void grown_block(mtp_pool_t *p, bool whole, bool huge) {
  enum { STEP = 64 << 10, TOP = 6 << 20 };
  char *b = mtp_pool_alloc(p, STEP);
  REQUIRE(b != NULL, "a block to grow");
  memset(b, 5, STEP);
  for (size_t n = 2 * STEP; n <= TOP; n += STEP) {
    b = mtp_realloc(b, n);
    REQUIRE(b != NULL, "the block grown");
    if (whole)
      memset(b + n - STEP, 5, STEP);
    else
      b[n - STEP] = 5;
  }
  char flags[512] = "";
  long ahp;
  REQUIRE(smaps_of(b, flags, sizeof flags, &ahp) == 0, "the block's smaps entry");
  printf("  block grown to %d MiB, %s written: %p VmFlags:%s", TOP >> 20, whole ? "whole" : "a byte a step",
         (void *)b, flags);
  CHECK(b[0] == 5 && b[TOP - STEP] == 5);
  CHECK(huge ? has_flag(flags, "hg") : !has_flag(flags, "hg"));
  if (huge) CHECK(((uintptr_t)b & (mtp__os_huge_page_size() - 1)) == 0);
  mtp_free(b);
}

/* In the child: fresh large memory (the reserve blocks are carved from, a range mapped for one
 * block, a block realloc grows) takes the advice the setting gives: huge with 1, never with 0,
 * none with system; in auto none (or never, where the system's THP is "always"), also after
 * other blocks were found dense (looked_block). */
static void test_large_reserve(void) {
  int mode = mtp__hugepages_mode();
  const char *fresh = mode == MTP_HUGE_ALWAYS ? "hg"
                      : mode == MTP_HUGE_NEVER || (mode == MTP_HUGE_AUTO && mtp__os_thp_always()) ? "nh"
                                                                                                : NULL;
  char first[512] = "", last[512] = "";
  mtp_pool_t *p = th_pool("huge-own", 60000, 0);
  own_block(p, 6 << 20, fresh);
  mtp_pool_destroy(p);
  p = th_pool("huge-large", 60000, 0);
  large_round(p, 4096, first, last, sizeof first); /* written a page each: never found dense */
  if (fresh == NULL)
    CHECK(!has_flag(first, "nh") && !has_flag(first, "hg") && !has_flag(last, "hg"));
  else
    CHECK(has_flag(first, fresh) && has_flag(last, fresh));
  grown_block(p, true, mode == MTP_HUGE_ALWAYS);
  mtp_pool_destroy(p);
  if (mode != MTP_HUGE_AUTO && mode != MTP_HUGE_ALWAYS) return;
  if (mode == MTP_HUGE_AUTO) looked_block(false); /* with 1 huge at the first fault: not sparse */
  looked_block(true);
  if (mode != MTP_HUGE_AUTO) return;
  p = th_pool("huge-grown", 60000, 0); /* grown whole: not huge in a fresh pool */
  grown_block(p, true, false);
  mtp_pool_destroy(p);
  p = th_pool("huge-grown-dense", 60000, 0); /* not huge after another block was found dense */
  char *b = mtp_pool_alloc(p, (size_t)16 << 20);
  REQUIRE(b != NULL, "a 16 MiB block");
  memset(b, 1, (size_t)16 << 20);
  CHECK(b[(16 << 20) - 1] == 1); /* read: the writes are not dead stores */
  printf("  a 16 MiB block written whole: AnonHugePages %ld kB\n", huge_kb_of(b, 2048, 10));
  grown_block(p, true, false);
  mtp_free(b);
  mtp_pool_destroy(p);
}

/* In auto: blocks mapped on their own (above 4 MiB) are judged by the last one freed unadvised, a
 * probe (mtp__large_own_advice): written whole, the next are advised huge from their first byte,
 * all but one in 32, a probe again; a probe written a byte a huge range turns the advice off. A
 * pool that purges at once caches no range, so every block here is a mapping of its own. */
static void test_own_verdict(void) {
  if (mtp__hugepages_mode() != MTP_HUGE_AUTO || mtp__os_thp_always()) return;
  enum { SIZE = 6 << 20, H = 2 << 20 };
  char flags[512] = "";
  long ahp;
  mtp_pool_t *p = th_pool("huge-verdict", 0, 0);
  char *b = mtp_pool_alloc(p, SIZE);
  REQUIRE(b != NULL && smaps_of(b, flags, sizeof flags, &ahp) == 0, "a 6 MiB block");
  CHECK(!has_flag(flags, "hg")); /* no verdict yet: a probe */
  memset(b, 1, SIZE);
  CHECK(b[SIZE - 1] == 1);
  mtp_free(b);
  unsigned advised = 0;
  for (unsigned i = 0; i < 64; i++) {
    b = mtp_pool_alloc(p, SIZE);
    REQUIRE(b != NULL && smaps_of(b, flags, sizeof flags, &ahp) == 0, "a 6 MiB block");
    b[0] = 2;
    if (has_flag(flags, "hg")) {
      CHECK(((uintptr_t)b & (H - 1)) == 0);
      advised++;
      mtp_free(b);
      continue;
    }
    for (size_t at = 0; at < SIZE; at += H) b[at] = 2; /* the probe, written sparsely */
    mtp_free(b);
    break;
  }
  printf("  6 MiB blocks after one written whole: %u advised huge, then a probe\n", advised);
  CHECK_EQ_SZ(advised, 31);
  b = mtp_pool_alloc(p, SIZE);
  REQUIRE(b != NULL && smaps_of(b, flags, sizeof flags, &ahp) == 0, "a 6 MiB block");
  CHECK(!has_flag(flags, "hg")); /* the probe was sparse */
  mtp_free(b);
  mtp_pool_destroy(p);
}

/* In the child: a pool's memory goes back through the purge thread with the setting in force. */
static void test_pool_gives_back(void) {
  mtp_pool_t *p = th_pool("huge", 20, 0);
  enum { N = 48 * 1024, SIZE = 1024 }; /* 48 MiB: past auto's threshold */
  static void *blk[N];
  memset(blk, 1, sizeof blk); /* resident before the baseline */
  size_t rss0 = th_rss();
  for (unsigned i = 0; i < N; i++) {
    blk[i] = mtp_pool_alloc(p, SIZE);
    REQUIRE(blk[i] != NULL, "an allocation");
    memset(blk[i], 3, SIZE);
  }
  size_t peak = th_rss();
  for (unsigned i = 0; i < N; i++) mtp_free(blk[i]);
  mtp_thread_flush();
  size_t after = peak;
  double t0 = th_now();
  /* ASan keeps the shadow of the poisoned pages resident (1/8 of them), TSan its shadow of every
   * byte touched (more than the bytes): RSS is checked without TSan, the statistics always. */
  size_t want = (peak - rss0) * (TH_ASAN ? 85 : 99) / 100;
  mtp_stats_t st;
  while (th_now() - t0 < 10) {
    usleep(20000);
    after = th_rss();
    mtp_pool_stats(p, &st);
    if ((TH_TSAN || (peak > after && peak - after >= want)) && st.bytes_reserved == 0) break;
  }
  printf("  %s: RSS grew %zu kB, %zu kB back after %.2f s; %zu kB reserved, %zu kB returned\n",
         getenv("MTPOOL_HUGEPAGES") ? getenv("MTPOOL_HUGEPAGES") : "(unset)", (peak - rss0) / 1024,
         peak > after ? (peak - after) / 1024 : 0, th_now() - t0, (size_t)st.bytes_reserved / 1024,
         (size_t)st.bytes_returned / 1024);
  if (!TH_TSAN) CHECK(peak > after && peak - after >= want);
  CHECK_EQ_SZ(st.bytes_reserved, 0); /* every region unmapped */
  CHECK(st.bytes_returned >= (size_t)N * SIZE);
  mtp_pool_destroy(p);
}

int main(int argc, char **argv) {
  if (argc > 1) { /* a child: MTPOOL_HUGEPAGES is set (or not) by the parent */
    RUN(test_advice);
    if (strcmp(argv[1], "huge") == 0) RUN(test_huge_purge);
    if (mtp__huge_collapses()) RUN(test_collapse);
    RUN(test_large_reserve);
    RUN(test_own_whole_pages);
    RUN(test_own_verdict);
    RUN(test_pool_gives_back);
    DONE();
  }
  RUN(test_parse);
  if (mtp__os_huge_page_size() == 0) {
    printf("SKIP: the kernel has no transparent huge pages (no hpage_pmd_size)\n");
    return TH_SKIP;
  }
  if (mtp__os_huge_page_size() != 2u << 20 || sysconf(_SC_PAGESIZE) != 4096) {
    printf("SKIP: huge pages of %zu bytes: this test knows 2 MiB over 4 KiB pages\n", mtp__os_huge_page_size());
    return TH_SKIP;
  }
  static const struct {
    const char *arg, *env;
  } runs[] = {{"default", "MTPOOL_HUGEPAGES"},        {"system", "MTPOOL_HUGEPAGES=system"},
              {"never", "MTPOOL_HUGEPAGES=0"},       {"huge", "MTPOOL_HUGEPAGES=1"},
              {"auto", "MTPOOL_HUGEPAGES=auto"}};
  for (unsigned i = 0; i < sizeof runs / sizeof runs[0]; i++) {
    char *args[] = {argv[0], (char *)runs[i].arg, NULL};
    const char *env[] = {runs[i].env, NULL};
    th_proc_t res;
    int rc = th_run_self(args, env, 120, &res);
    char st[64];
    printf("%s (%s): %s\n%s%s", runs[i].arg, runs[i].env, th_status_str(res.status, st, sizeof st),
           res.out ? res.out : "", res.err ? res.err : "");
    CHECK(rc == 0 && WIFEXITED(res.status) && WEXITSTATUS(res.status) == 0);
    th_proc_free(&res);
  }
  DONE();
}
