/* Statistics and their reports (tables, JSON): gathered on demand by walking a pool's slab
 * descriptors, heaps and large blocks (medium blocks, runs of region pages, are counted with the
 * large ones). The fast path keeps only plain per-slab and per-heap counters; reading those from
 * here races with their owners by design (see MTP_NO_TSAN): figures are exact once threads are
 * quiet. Reports are formatted into a stack buffer and written with fputs: nothing here allocates
 * from mtpool, and nothing is written while a lock is held (stdio may allocate, from mtpool when
 * it is the process's malloc). Layer: api. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/os.h"
#include "checked/checked.h"
#include "heap/heap.h"

MTP_NO_TSAN static size_t slab_in_use(mtpi_desc_t *s) {
  uintptr_t w = mtp__load_relaxed(&s->thread_free);
  uint32_t pending = MTP_TF_COUNT(w);
  uint32_t base = (w & MTP_TF_OWNED) ? (*(volatile uint32_t *)&s->used & ~MTP_USED_CURRENT)
                                      : s->detached_used;
  return base > pending ? base - pending : 0;
}

/* One pool's figures in one snapshot. t is what mtp_pool_stats hands out (its classes[] the first
 * MTP_STATS_MAX_CLASSES of `classes`); the rest is for the class query and the reports. */
typedef struct pool_stats {
  mtp_stats_t t;
  mtp_class_stats_t classes[MTP_NUM_CLASSES]; /* every class */
  size_t small_blocks, small_bytes;   /* blocks of the size classes in use, and their bytes */
  size_t medium_blocks, medium_bytes; /* the medium blocks among t.large_blocks and t.large_bytes */
  size_t zero_blocks;                 /* checked mode's zero-size blocks (0 bytes each) */
  size_t regions, huge_bytes;         /* the pool's regions, and their bytes in huge ranges */
  uint32_t id;
} pool_stats_t;

/* The cache path re-formats a slab, and caches and hands out runs, without the pool lock: read
 * descriptors as a racy snapshot. Returns the bytes of s if it is a medium block in use (0
 * otherwise; a run in a thread's cache is free bytes). A MEDIUM's kind and pages are written only
 * under the pool lock, which the caller holds (the cache path writes SLAB over SLAB, never MEDIUM). */
MTP_NO_TSAN static size_t slab_account(mtpi_desc_t *s, pool_stats_t *out) {
  uint8_t kind = *(volatile uint8_t *)&s->kind;
  if (kind == MTP_PAGE_MEDIUM)
    return mtp__load_relaxed(&s->freed) == MTP_MEDIUM_FREED ? 0 : mtp__medium_usable(s);
  if (kind != MTP_PAGE_SLAB) return 0;
  unsigned cls = s->cls;
  if (cls >= MTP_NUM_CLASSES) return 0;
  mtp_class_stats_t *cs = &out->classes[cls];
  size_t n = slab_in_use(s);
  /* frees waiting on the remote list are remote frees already */
  out->t.remote_frees += MTP_TF_COUNT(mtp__load_relaxed(&s->thread_free));
  cs->blocks_in_use += n;
  cs->slabs++;
  cs->slab_bytes += (size_t)s->pages << MTP_PAGE_SHIFT;
  out->small_blocks += n;
  out->small_bytes += n * s->block_size;
  return 0;
}

MTP_NO_TSAN static uint64_t heap_allocs(mtpi_member_t *m) { return *(volatile uint64_t *)&m->allocs; }
MTP_NO_TSAN static uint64_t heap_remote(mtpi_member_t *m) {
  return *(volatile uint64_t *)&m->remote_collected;
}

/* A packed block in use: [0] counts it, [1] its bytes. */
static int packed_tally(void *arg, void *p, size_t usable) {
  (void)p;
  size_t *tally = arg;
  tally[0]++;
  tally[1] += usable;
  return 0;
}

static void stats_collect(mtpi_pool_t *p, pool_stats_t *out) {
  memset(out, 0, sizeof(*out));
  memcpy(out->t.name, p->name, sizeof(out->t.name));
  out->id = p->id;
  for (unsigned c = 0; c < MTP_NUM_CLASSES; c++) out->classes[c].block_size = mtp__class_size[c];
  uint64_t allocs, remote;
  size_t listed[MTP_NUM_CLASSES] = {0};
  mtp__pool_lock(p);
  for (mtpi_region_t *r = mtp__region_from_node(p->rs.regions); r;
       r = mtp__region_from_node(r->h.link.next)) {
    out->regions++;
    out->huge_bytes += (size_t)__builtin_popcountll(r->h.huge_mask[0]) << MTP_PAGE_SHIFT;
    for (unsigned i = MTP_REGION_FIRST_PAGE; i < MTP_PAGES_PER_REGION; i++) {
      if (r->pages[i].kind == MTP_PAGE_PACKED) { /* under the pool lock, as MEDIUM */
        size_t tally[2] = {0, 0};
        (void)mtp__packed_each(&r->pages[i], packed_tally, tally);
        out->medium_blocks += tally[0];
        out->medium_bytes += tally[1];
        continue;
      }
      size_t n = slab_account(&r->pages[i], out);
      out->medium_blocks += n != 0;
      out->medium_bytes += n;
    }
  }
  allocs = p->dead_allocs + p->checked_allocs + p->medium_allocs;
  remote = p->dead_remote;
  for (mtpi_node_t *it = p->members; it; it = it->next) {
    mtpi_member_t *m = MTP_CONTAINER(it, mtpi_member_t, link);
    allocs += heap_allocs(m);
    remote += heap_remote(m);
    /* blocks threads freed and list for reuse (heap/reuse.c): freed,
     * though their slabs count them as used */
    (void)mtp__heap_listed(m, &p->rs, listed, NULL, 0);
  }
  for (unsigned c = 0; c < MTP_NUM_CLASSES; c++) {
    size_t n = listed[c];
    if (n == 0) continue;
    mtp_class_stats_t *cs = &out->classes[c];
    if (n > cs->blocks_in_use) n = cs->blocks_in_use; /* racy figures: never below zero */
    cs->blocks_in_use -= n;
    out->small_blocks -= n;
    out->small_bytes -= n * cs->block_size;
  }
  mtp_stats_t *t = &out->t;
  t->bytes_mapped = p->rs.mapped_bytes;
  t->bytes_reserved = p->rs.mapped_bytes - p->rs.clean_bytes;
  mtp__pool_unlock_quiet(p); /* a read frees no page */
  pthread_mutex_lock(&mtp__large_lock);
  size_t large_mapped = p->large_bytes;
  t->large_blocks = p->large_count + out->medium_blocks;
  t->large_bytes = p->large_bytes + out->medium_bytes;
  size_t large_cached = p->large_cached_bytes; /* freed mappings kept for reuse: free, not in use */
  allocs += p->large_allocs;
  pthread_mutex_unlock(&mtp__large_lock);
  out->zero_blocks = mtp__checked_zero_count(p);
  t->blocks_in_use = out->small_blocks + t->large_blocks + out->zero_blocks;
  t->bytes_in_use = out->small_bytes + t->large_bytes;
  /* medium blocks' pages are in the regions' figures already */
  t->bytes_mapped += large_mapped + large_cached;
  t->bytes_reserved += large_mapped + large_cached;
  t->bytes_free = t->bytes_reserved > t->bytes_in_use ? t->bytes_reserved - t->bytes_in_use : 0;
  t->allocs = allocs;
  t->frees = allocs >= t->blocks_in_use ? allocs - t->blocks_in_use : 0;
  t->remote_frees += remote;
  /* relaxed: statistics */
  t->bytes_returned = mtp__u64_load_relaxed(&p->bytes_returned) + mtp__u64_load_relaxed(&p->rs.returned);
  /* the public structure's array: the first classes, as many as it holds (the ABI) */
  t->num_classes =
      MTP_NUM_CLASSES < MTP_STATS_MAX_CLASSES ? MTP_NUM_CLASSES : MTP_STATS_MAX_CLASSES;
  memcpy(t->classes, out->classes, t->num_classes * sizeof(t->classes[0]));
}

/* stats_collect of the live pool of id, NULL if none (registry lock held across: the pool cannot
 * be destroyed meanwhile). */
static bool stats_collect_id(uint32_t id, pool_stats_t *out) {
  pthread_mutex_lock(&mtp__registry_lock);
  mtpi_pool_t *p = mtp__pool_by_id(id);
  if (p) stats_collect(p, out);
  pthread_mutex_unlock(&mtp__registry_lock);
  return p != NULL;
}

int mtp_pool_stats(mtp_pool_t *pool, mtp_stats_t *out) {
  if (out == NULL) return EINVAL;
  pool_stats_t ps;
  stats_collect(pool ? mtp__pool_in(pool) : mtp__default(), &ps);
  *out = ps.t;
  return 0;
}

static int put(FILE *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int put(FILE *out, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  return fputs(buf, out) < 0 ? EIO : 0;
}

/* A pool name is user text: escaped (base/error.c) so that it cannot forge lines of a report. */
typedef char mtpi_name_text[4 * sizeof(((mtp_stats_t *)0)->name) + 1];

static int print_one(const pool_stats_t *ps, FILE *out) {
  const mtp_stats_t *st = &ps->t;
  int rc = 0;
  mtpi_name_text name;
  mtp__text_escape(name, sizeof(name), st->name);
  rc |= put(out, "pool \"%s\": %zu blocks, %zu bytes in use; %zu reserved, %zu free, %zu mapped\n",
            name, st->blocks_in_use, st->bytes_in_use, st->bytes_reserved, st->bytes_free,
            st->bytes_mapped);
  rc |= put(out, "  allocs %llu, frees %llu (remote %llu), returned to OS %llu bytes, large %zu "
                 "blocks / %zu bytes\n",
            (unsigned long long)st->allocs, (unsigned long long)st->frees,
            (unsigned long long)st->remote_frees, (unsigned long long)st->bytes_returned,
            st->large_blocks, st->large_bytes);
  rc |= put(out, "  %10s %12s %14s %8s %12s %9s\n", "block", "in use", "bytes in use", "slabs",
            "slab bytes", "fill");
  for (unsigned c = 0; c < MTP_NUM_CLASSES; c++) {
    const mtp_class_stats_t *cs = &ps->classes[c];
    if (cs->slabs == 0) continue;
    double fill = cs->slab_bytes ? 100.0 * (double)(cs->blocks_in_use * cs->block_size) /
                                       (double)cs->slab_bytes
                                 : 0.0;
    rc |= put(out, "  %10zu %12zu %14zu %8zu %12zu %8.1f%%\n", cs->block_size, cs->blocks_in_use,
              cs->blocks_in_use * cs->block_size, cs->slabs, cs->slab_bytes, fill);
  }
  return rc ? EIO : 0;
}

int mtp_pool_print_stats(mtp_pool_t *pool, FILE *out) {
  if (out == NULL) return EINVAL;
  pool_stats_t ps;
  stats_collect(pool ? mtp__pool_in(pool) : mtp__default(), &ps);
  return print_one(&ps, out);
}

int mtp_print_stats(FILE *out) {
  if (out == NULL) return EINVAL;
  mtp__default();
  int rc = 0;
  rc |= put(out, "%-24s %12s %14s %10s %14s %14s\n", "pool", "blocks", "bytes in use",
            "bytes/blk", "reserved", "free");
  size_t tb = 0, tu = 0, tr = 0, tf = 0, regions = 0, huge_bytes = 0;
  /* Each pool is gathered under the registry lock, and printed once no lock is held: stdio may
   * allocate, from mtpool when it is the process's malloc. */
  for (uint32_t id = 0; id < MTP_MAX_POOLS; id++) {
    pool_stats_t ps;
    if (!stats_collect_id(id, &ps)) continue;
    const mtp_stats_t *st = &ps.t;
    mtpi_name_text name;
    mtp__text_escape(name, sizeof(name), st->name);
    rc |= put(out, "%-24s %12zu %14zu %10.1f %14zu %14zu\n", name, st->blocks_in_use,
              st->bytes_in_use,
              st->blocks_in_use ? (double)st->bytes_in_use / (double)st->blocks_in_use : 0.0,
              st->bytes_reserved, st->bytes_free);
    tb += st->blocks_in_use;
    tu += st->bytes_in_use;
    tr += st->bytes_reserved;
    tf += st->bytes_free;
    regions += ps.regions;
    huge_bytes += ps.huge_bytes;
  }
  rc |= put(out, "%-24s %12zu %14zu %10.1f %14zu %14zu\n", "total", tb, tu,
            tb ? (double)tu / (double)tb : 0.0, tr, tf);
  /* How much huge pages back: the pools' regions' bytes in huge ranges (MTPOOL_HUGEPAGES), and
   * what the kernel made of the whole process's anonymous memory. */
  rc |= put(out, "huge pages: %zu kB of %zu regions in huge ranges; the process's AnonHugePages %ld kB\n",
            huge_bytes >> 10, regions, mtp__os_anon_huge_kb());
  return rc ? EIO : 0;
}

/* The next live pool from *cursor on into *ps, moving *cursor past it; false when none is left. */
static bool stats_next(unsigned *cursor, pool_stats_t *ps) {
  mtp__default();
  for (uint32_t id = *cursor; id < MTP_MAX_POOLS; id++)
    if (stats_collect_id(id, ps)) {
      *cursor = id + 1;
      return true;
    }
  *cursor = MTP_MAX_POOLS;
  return false;
}

int mtp_stats_next(unsigned *cursor, mtp_stats_t *out) {
  if (cursor == NULL || out == NULL) return EINVAL;
  pool_stats_t ps;
  if (!stats_next(cursor, &ps)) return ENOENT;
  *out = ps.t;
  return 0;
}

/* The first count classes of ps (all of them if count is larger) into out. */
static void classes_out(const pool_stats_t *ps, mtp_class_stats_t *out, unsigned count) {
  if (count > MTP_NUM_CLASSES) count = MTP_NUM_CLASSES;
  if (count != 0) memcpy(out, ps->classes, count * sizeof(*out));
}

int mtp_pool_class_stats(mtp_pool_t *pool, mtp_class_stats_t *out, unsigned count) {
  if (out == NULL && count != 0) {
    errno = EINVAL;
    return -1;
  }
  if (count != 0) {
    pool_stats_t ps;
    stats_collect(pool ? mtp__pool_in(pool) : mtp__default(), &ps);
    classes_out(&ps, out, count);
  }
  return MTP_NUM_CLASSES;
}

int mtp_stats_next_classes(unsigned *cursor, mtp_stats_t *out, mtp_class_stats_t *classes,
                           unsigned count) {
  if (cursor == NULL || out == NULL || (classes == NULL && count != 0)) {
    errno = EINVAL;
    return -1;
  }
  pool_stats_t ps;
  if (!stats_next(cursor, &ps)) return 0;
  *out = ps.t;
  classes_out(&ps, classes, count);
  return MTP_NUM_CLASSES;
}

/* ---- the JSON report (mtp_print_stats_json; the schema is in man/mtpool.3) ---- */

/* The length of the UTF-8 sequence s starts with (1 to 4), or 0 if it starts none that is valid:
 * a shortest form, no surrogate, at most U+10FFFF (RFC 3629). */
static unsigned utf8_len(const unsigned char *s) {
  unsigned n;
  uint32_t cp, min;
  if (s[0] < 0x80) return 1;
  if ((s[0] & 0xe0) == 0xc0) {
    n = 2, cp = s[0] & 0x1fu, min = 0x80;
  } else if ((s[0] & 0xf0) == 0xe0) {
    n = 3, cp = s[0] & 0x0fu, min = 0x800;
  } else if ((s[0] & 0xf8) == 0xf0) {
    n = 4, cp = s[0] & 0x07u, min = 0x10000;
  } else {
    return 0;
  }
  for (unsigned i = 1; i < n; i++) { /* a NUL ends the string and fails the test */
    if ((s[i] & 0xc0) != 0x80) return 0;
    cp = cp << 6 | (s[i] & 0x3fu);
  }
  return cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) ? 0 : n;
}

/* A pool name as a JSON string, quotes included: the quote, the backslash and control characters
 * escaped, valid UTF-8 kept, any other byte (a name cut inside a character, or not UTF-8) written
 * as U+FFFD, so that the document is always valid UTF-8. Each byte takes at most 6 characters. */
typedef char mtpi_json_name[6 * sizeof(((mtp_stats_t *)0)->name) + 3];
static void json_string(char *buf, size_t size, const char *str) {
  const unsigned char *s = (const unsigned char *)str;
  size_t n = 0;
  buf[n++] = '"';
  while (*s && n + 8 < size) {
    unsigned len = utf8_len(s);
    if (len == 0) {
      memcpy(buf + n, "\\ufffd", 6);
      n += 6;
      s++;
    } else if (*s == '"' || *s == '\\') {
      buf[n++] = '\\';
      buf[n++] = (char)*s++;
    } else if (*s < 0x20 || *s == 0x7f) {
      n += (size_t)snprintf(buf + n, size - n, "\\u%04x", *s++);
    } else {
      memcpy(buf + n, s, len);
      n += len;
      s += len;
    }
  }
  buf[n++] = '"';
  buf[n] = 0;
}

/* Adds ps's figures to sum's (the process total). */
static void totals_add(pool_stats_t *sum, const pool_stats_t *ps) {
  mtp_stats_t *a = &sum->t;
  const mtp_stats_t *b = &ps->t;
  a->bytes_in_use += b->bytes_in_use;
  a->blocks_in_use += b->blocks_in_use;
  a->bytes_reserved += b->bytes_reserved;
  a->bytes_free += b->bytes_free;
  a->bytes_mapped += b->bytes_mapped;
  a->large_blocks += b->large_blocks;
  a->large_bytes += b->large_bytes;
  a->allocs += b->allocs;
  a->frees += b->frees;
  a->remote_frees += b->remote_frees;
  a->bytes_returned += b->bytes_returned;
  sum->small_blocks += ps->small_blocks;
  sum->small_bytes += ps->small_bytes;
  sum->medium_blocks += ps->medium_blocks;
  sum->medium_bytes += ps->medium_bytes;
  sum->zero_blocks += ps->zero_blocks;
  sum->regions += ps->regions;
  sum->huge_bytes += ps->huge_bytes;
}

/* The figures a pool's object and the total share, each line ended by a comma. */
static int json_figures(FILE *out, const pool_stats_t *ps, const char *in) {
  const mtp_stats_t *t = &ps->t;
  int rc = 0;
  rc |= put(out,
            "%s\"bytes_in_use\": %zu, \"blocks_in_use\": %zu, \"bytes_reserved\": %zu, "
            "\"bytes_free\": %zu, \"bytes_mapped\": %zu,\n",
            in, t->bytes_in_use, t->blocks_in_use, t->bytes_reserved, t->bytes_free,
            t->bytes_mapped);
  rc |= put(out,
            "%s\"large_blocks\": %zu, \"large_bytes\": %zu, \"allocs\": %llu, \"frees\": %llu, "
            "\"remote_frees\": %llu, \"bytes_returned\": %llu,\n",
            in, t->large_blocks, t->large_bytes, (unsigned long long)t->allocs,
            (unsigned long long)t->frees, (unsigned long long)t->remote_frees,
            (unsigned long long)t->bytes_returned);
  rc |= put(out,
            "%s\"small_blocks\": %zu, \"small_bytes\": %zu, \"medium_blocks\": %zu, "
            "\"medium_bytes\": %zu, \"zero_size_blocks\": %zu,\n",
            in, ps->small_blocks, ps->small_bytes, ps->medium_blocks, ps->medium_bytes,
            ps->zero_blocks);
  return rc;
}

static int json_pool(FILE *out, const pool_stats_t *ps, bool first) {
  int rc = 0;
  mtpi_json_name name;
  json_string(name, sizeof(name), ps->t.name);
  rc |= put(out, "%s    {\"id\": %u, \"name\": %s,\n", first ? "" : ",\n", (unsigned)ps->id, name);
  rc |= json_figures(out, ps, "     ");
  rc |= put(out, "     \"huge_pages\": {\"regions\": %zu, \"huge_bytes\": %zu},\n",
            ps->regions, ps->huge_bytes);
  rc |= put(out, "     \"classes\": [\n");
  for (unsigned c = 0; c < MTP_NUM_CLASSES; c++) {
    const mtp_class_stats_t *cs = &ps->classes[c];
    rc |= put(out,
              "      {\"block_size\": %zu, \"blocks_in_use\": %zu, \"bytes_in_use\": %zu, "
              "\"slabs\": %zu, \"slab_bytes\": %zu}%s\n",
              cs->block_size, cs->blocks_in_use, cs->blocks_in_use * cs->block_size, cs->slabs,
              cs->slab_bytes, c + 1 < MTP_NUM_CLASSES ? "," : "");
  }
  rc |= put(out, "     ]}");
  return rc;
}

int mtp_print_stats_json(FILE *out) {
  if (out == NULL) return EINVAL;
  mtp__default();
  int rc = 0;
  rc |= put(out, "{\"version\": \"%s\", \"num_classes\": %u,\n  \"pools\": [\n", mtp_version(),
            (unsigned)MTP_NUM_CLASSES);
  pool_stats_t sum;
  memset(&sum, 0, sizeof(sum));
  unsigned pools = 0;
  /* as mtp_print_stats: each pool gathered under the registry lock, written with no lock held */
  for (uint32_t id = 0; id < MTP_MAX_POOLS; id++) {
    pool_stats_t ps;
    if (!stats_collect_id(id, &ps)) continue;
    rc |= json_pool(out, &ps, pools == 0);
    totals_add(&sum, &ps);
    pools++;
  }
  rc |= put(out, "\n  ],\n  \"total\": {\"pools\": %u,\n", pools);
  rc |= json_figures(out, &sum, "   ");
  long kb = mtp__os_anon_huge_kb();
  char anon[24] = "null"; /* not known: no /proc/self/smaps_rollup */
  if (kb >= 0) snprintf(anon, sizeof(anon), "%ld", kb);
  rc |= put(out,
            "   \"huge_pages\": {\"regions\": %zu, \"huge_bytes\": %zu, "
            "\"anon_huge_kb\": %s}}\n}\n",
            sum.regions, sum.huge_bytes, anon);
  if (fflush(out) != 0) rc |= EIO;
  return rc ? EIO : 0;
}
