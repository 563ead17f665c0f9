/* The C allocation functions of the drop-in malloc: glibc's names, glibc's contract, mtpool's
 * default pool underneath (every function here is a thin wrapper over the public mtp_* API).
 *
 * Differences from glibc, on purpose (README, "Drop-in malloc"):
 *   - a block is aligned to the largest power of two dividing its size class, capped at 16
 *     (malloc(8) is 8-aligned; glibc aligns every block to 16);
 *   - malloc_trim returns 1 when any pool gave pages back, whatever `pad` says;
 *   - mallopt accepts glibc's parameters and changes nothing (options come from MTPOOL_*);
 *   - free_sized with a size the block cannot have been made for is reported, not ignored.
 *
 * Built against musl (no __GLIBC__), the library exports what musl's libc itself offers (malloc,
 * free, calloc, realloc, reallocarray, posix_memalign, aligned_alloc, memalign, valloc,
 * malloc_usable_size), C23's free_sized and free_aligned_sized, and mtp_*: glibc's extras (pvalloc,
 * cfree, the __libc_* entry points, malloc_trim, mallinfo/mallinfo2, mallopt, malloc_stats,
 * malloc_info) are left out, as musl has none of them (exports-musl.map). musl's dynamic loader
 * sees that malloc and aligned_alloc are replaced and routes its own memalign through them.
 *
 * Nothing here may allocate through malloc (it would recurse): the environment is read through
 * `environ`, reports go through stdio only from malloc_stats/malloc_info and at exit. */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mtpool/mtpool.h"

#define EXPORT __attribute__((visibility("default")))
/* Another name for the same function; GCC wants the target's attributes copied onto it. */
#if defined(__clang__)
#define ALIAS(target) __attribute__((alias(#target)))
#else
#define ALIAS(target) __attribute__((alias(#target), copy(target)))
#endif

/* C23, declared by glibc 2.43 and later only. */
EXPORT void free_sized(void *p, size_t size);
EXPORT void free_aligned_sized(void *p, size_t alignment, size_t size);
#if defined(__GLIBC__)
/* Not declared by glibc's headers (exported by glibc for old binaries and static links). */
EXPORT void cfree(void *p);
EXPORT void *__libc_malloc(size_t size);
EXPORT void __libc_free(void *p);
EXPORT void *__libc_calloc(size_t n, size_t size);
EXPORT void *__libc_realloc(void *p, size_t size);
EXPORT void *__libc_memalign(size_t alignment, size_t size);
EXPORT void *__libc_valloc(size_t size);
EXPORT void *__libc_pvalloc(size_t size);
EXPORT int __posix_memalign(void **out, size_t alignment, size_t size);
#endif

static int is_pow2(size_t x) { return x != 0 && (x & (x - 1)) == 0; }

/* ---- the four that every program calls ---- */

EXPORT void *malloc(size_t size) { return mtp_alloc(size); }

EXPORT void *calloc(size_t n, size_t size) { return mtp_calloc(n, size); }

/* glibc's free preserves errno; so do mtp_free and mtp_free_sized (their slow paths save it). */
EXPORT void free(void *p) { mtp_free(p); }

EXPORT void *realloc(void *p, size_t size) {
  if (p == NULL) return mtp_alloc(size);
  if (size == 0) { /* glibc: frees the block and returns NULL */
    free(p);
    return NULL;
  }
  return mtp_realloc(p, size); /* NULL + ENOMEM leaves p untouched */
}

/* ---- the rest of glibc's allocation functions ---- */

EXPORT void *reallocarray(void *p, size_t n, size_t size) {
  size_t bytes;
  if (__builtin_mul_overflow(n, size, &bytes)) {
    errno = ENOMEM;
    return NULL;
  }
  return realloc(p, bytes);
}

EXPORT int posix_memalign(void **out, size_t alignment, size_t size) {
  if (alignment < sizeof(void *) || !is_pow2(alignment)) return EINVAL;
  int e = errno; /* reports through the return value only */
  void *p = mtp_alloc_aligned(size, alignment);
  errno = e;
  if (p == NULL) return ENOMEM;
  *out = p;
  return 0;
}

EXPORT void *aligned_alloc(size_t alignment, size_t size) {
  if (!is_pow2(alignment)) { /* as glibc 2.38 and later */
    errno = EINVAL;
    return NULL;
  }
  return mtp_alloc_aligned(size, alignment);
}

EXPORT void *memalign(size_t alignment, size_t size) {
  /* glibc: an alignment that is not a power of two is rounded up to one; too large is EINVAL */
  if (alignment > SIZE_MAX / 2 + 1) {
    errno = EINVAL;
    return NULL;
  }
  size_t a = 1;
  while (a < alignment) a <<= 1;
  return mtp_alloc_aligned(size, a);
}

static size_t page_size(void) {
  static size_t ps; /* racy first store of the same value: harmless */
  if (ps == 0) ps = (size_t)getpagesize();
  return ps;
}

EXPORT void *valloc(size_t size) { return mtp_alloc_aligned(size, page_size()); }

#if defined(__GLIBC__)
EXPORT void *pvalloc(size_t size) {
  size_t ps = page_size();
  if (size > SIZE_MAX - ps) {
    errno = ENOMEM;
    return NULL;
  }
  size_t rounded = (size + ps - 1) & ~(ps - 1);
  return mtp_alloc_aligned(rounded ? rounded : ps, ps);
}
#endif

EXPORT size_t malloc_usable_size(void *p) { return p ? mtp_usable_size(p) : 0; }

EXPORT void free_sized(void *p, size_t size) { mtp_free_sized(p, size); }

EXPORT void free_aligned_sized(void *p, size_t alignment, size_t size) {
  (void)alignment; /* the block knows its own class; the size is checked against it */
  free_sized(p, size);
}

#if defined(__GLIBC__)
/* Old names, and glibc's internal entry points that a static link or old code may call. */
EXPORT void cfree(void *p) ALIAS(free);
EXPORT void *__libc_malloc(size_t size) ALIAS(malloc);
EXPORT void __libc_free(void *p) ALIAS(free);
EXPORT void *__libc_calloc(size_t n, size_t size) ALIAS(calloc);
EXPORT void *__libc_realloc(void *p, size_t size) ALIAS(realloc);
EXPORT void *__libc_memalign(size_t alignment, size_t size) ALIAS(memalign);
EXPORT void *__libc_valloc(size_t size) ALIAS(valloc);
EXPORT void *__libc_pvalloc(size_t size) ALIAS(pvalloc);
EXPORT int __posix_memalign(void **out, size_t alignment, size_t size)
    ALIAS(posix_memalign);

/* ---- glibc's extras: trimming, statistics, options ---- */

EXPORT int malloc_trim(size_t pad) {
  (void)pad; /* every empty page goes back; pad has no meaning without a heap top */
  return mtp_trim_all() > 0;
}

/* Totals over every live pool. */
static void stats_total(mtp_stats_t *t) {
  static const mtp_stats_t zero;
  *t = zero;
  mtp_stats_t st;
  unsigned cursor = 0;
  while (mtp_stats_next(&cursor, &st) == 0) {
    t->bytes_in_use += st.bytes_in_use;
    t->blocks_in_use += st.blocks_in_use;
    t->bytes_reserved += st.bytes_reserved;
    t->bytes_free += st.bytes_free;
    t->bytes_mapped += st.bytes_mapped;
    t->large_blocks += st.large_blocks;
    t->large_bytes += st.large_bytes;
    t->allocs += st.allocs;
    t->frees += st.frees;
  }
}

/* Fields as glibc fills them: arena = bytes held outside one-per-block mappings, hblks/hblkhd =
 * large blocks (mapped one each), uordblks = small bytes in use, fordblks = bytes held free. */
EXPORT struct mallinfo2 mallinfo2(void) {
  mtp_stats_t t;
  stats_total(&t);
  struct mallinfo2 mi;
  memset(&mi, 0, sizeof(mi));
  mi.arena = t.bytes_reserved - t.large_bytes;
  mi.ordblks = t.blocks_in_use - t.large_blocks;
  mi.hblks = t.large_blocks;
  mi.hblkhd = t.large_bytes;
  mi.uordblks = t.bytes_in_use - t.large_bytes;
  mi.fordblks = t.bytes_free;
  return mi;
}

static int clamp_int(size_t v) { return v > (size_t)INT32_MAX ? INT32_MAX : (int)v; }

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
EXPORT struct mallinfo mallinfo(void) {
  struct mallinfo2 m2 = mallinfo2();
  struct mallinfo mi;
  memset(&mi, 0, sizeof(mi));
  mi.arena = clamp_int(m2.arena);
  mi.ordblks = clamp_int(m2.ordblks);
  mi.hblks = clamp_int(m2.hblks);
  mi.hblkhd = clamp_int(m2.hblkhd);
  mi.uordblks = clamp_int(m2.uordblks);
  mi.fordblks = clamp_int(m2.fordblks);
  return mi;
}
#pragma GCC diagnostic pop

EXPORT int mallopt(int param, int value) {
  (void)value;
  switch (param) { /* accepted so that programs tuning glibc carry on; none changes mtpool */
    case M_MXFAST: case M_TRIM_THRESHOLD: case M_TOP_PAD: case M_MMAP_THRESHOLD:
    case M_MMAP_MAX: case M_CHECK_ACTION: case M_PERTURB: case M_ARENA_TEST: case M_ARENA_MAX:
      return 1;
    default:
      return 0;
  }
}

EXPORT void malloc_stats(void) { mtp_print_stats(stderr); }

/* XML in the shape of glibc's: one <heap> per pool, then the totals. */
/* malloc_info's totals of one pool or of all, then the closing tag. Nonzero if a write failed. */
static int info_totals(FILE *out, const mtp_stats_t *st, const char *close) {
  return fprintf(out, "<total type=\"inuse\" count=\"%zu\" size=\"%zu\"/>\n"
                      "<total type=\"free\" size=\"%zu\"/>\n"
                      "<total type=\"mmap\" count=\"%zu\" size=\"%zu\"/>\n"
                      "<system type=\"current\" size=\"%zu\"/>\n"
                      "<aspace type=\"total\" size=\"%zu\"/>\n</%s>\n",
                 st->blocks_in_use, st->bytes_in_use, st->bytes_free, st->large_blocks,
                 st->large_bytes, st->bytes_reserved, st->bytes_mapped, close) < 0;
}

/* A pool name (user text: MTPOOL_NAME or mtp_pool_create) as XML attribute text: the five
 * markup characters as entities, tab, newline and carriage return as character references, and
 * the other control characters (which XML 1.0 does not allow even as references) as the text
 * \xNN. Nonzero if a write failed. */
static int xml_text(FILE *out, const char *s) {
  int rc = 0;
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    switch (c) {
      case '&': rc |= fputs("&amp;", out) < 0; break;
      case '<': rc |= fputs("&lt;", out) < 0; break;
      case '>': rc |= fputs("&gt;", out) < 0; break;
      case '"': rc |= fputs("&quot;", out) < 0; break;
      case '\'': rc |= fputs("&apos;", out) < 0; break;
      case '\t': case '\n': case '\r': rc |= fprintf(out, "&#x%X;", c) < 0; break;
      default:
        if (c < 0x20 || c == 0x7f)
          rc |= fprintf(out, "\\x%02x", c) < 0;
        else
          rc |= fputc(c, out) == EOF;
    }
  }
  return rc;
}

EXPORT int malloc_info(int options, FILE *out) {
  if (options != 0 || out == NULL) return EINVAL;
  /* every size class of each pool (mtp_stats_t holds the first MTP_STATS_MAX_CLASSES) */
  unsigned nclasses = (unsigned)mtp_pool_class_stats(NULL, NULL, 0);
  mtp_class_stats_t *classes = mtp_alloc(nclasses * sizeof(*classes));
  if (classes == NULL) return ENOMEM;
  mtp_stats_t st;
  unsigned cursor = 0;
  size_t n = 0;
  int rc = fprintf(out, "<malloc version=\"mtpool-%s\">\n", mtp_version()) < 0;
  while (mtp_stats_next_classes(&cursor, &st, classes, nclasses) > 0) {
    rc |= fprintf(out, "<heap nr=\"%zu\" name=\"", n++) < 0;
    rc |= xml_text(out, st.name);
    rc |= fprintf(out, "\">\n<sizes>\n") < 0;
    for (unsigned c = 0; c < nclasses; c++) {
      const mtp_class_stats_t *cs = &classes[c];
      if (cs->slabs == 0) continue;
      /* glibc's four attributes, then the class's slabs and the bytes they span: what the
       * class holds beyond its blocks (a class with few blocks in many slabs shows here) */
      rc |= fprintf(out,
                    "  <size from=\"%zu\" to=\"%zu\" total=\"%zu\" count=\"%zu\" slabs=\"%zu\" "
                    "slab_bytes=\"%zu\"/>\n",
                    cs->block_size, cs->block_size, cs->blocks_in_use * cs->block_size,
                    cs->blocks_in_use, cs->slabs, cs->slab_bytes) < 0;
    }
    rc |= fprintf(out, "</sizes>\n") < 0;
    rc |= info_totals(out, &st, "heap");
  }
  mtp_free(classes);
  stats_total(&st);
  rc |= info_totals(out, &st, "malloc");
  return rc ? EIO : 0;
}

#endif /* __GLIBC__: the old names and glibc's extras */

/* ---- MTPOOL_VERBOSE and MTPOOL_SHOW_STATS ---- */

/* The value of an environment variable, read through `environ` (getenv is not needed, and this
 * runs from a constructor that other code may precede). */
static const char *env_value(const char *name) {
  extern char **environ;
  size_t len = strlen(name);
  for (char **e = environ; e && *e; e++)
    if (strncmp(*e, name, len) == 0 && (*e)[len] == '=') return *e + len + 1;
  return NULL;
}

static int env_flag(const char *name) {
  const char *v = env_value(name);
  return v && *v && strcmp(v, "0") != 0;
}

/* MTPOOL_SHOW_STATS: unset, empty or 0: no report at exit; json: mtp_print_stats_json's document;
 * anything else: mtp_print_stats's table. */
enum { SHOW_NONE, SHOW_TABLE, SHOW_JSON };
static int show_stats;
static const char *const show_names[] = {"0", "1", "json"};

/* The core's escaping of user text for a plain-text report (c_core/src/base/error.c, linked into
 * this library with the core's objects): MTPOOL_NAME cannot forge lines of stderr. */
void mtp__text_escape(char *buf, size_t size, const char *s);

__attribute__((constructor)) static void malloc_start(void) {
  const char *show = env_value("MTPOOL_SHOW_STATS");
  show_stats = show == NULL || *show == 0 || strcmp(show, "0") == 0 ? SHOW_NONE
               : strcmp(show, "json") == 0                           ? SHOW_JSON
                                                                     : SHOW_TABLE;
  if (env_flag("MTPOOL_VERBOSE")) {
    mtp_options_t o;
    mtp_pool_options(NULL, &o);
    char name[4 * sizeof(((mtp_stats_t *)0)->name) + 1];
    mtp__text_escape(name, sizeof(name), o.name ? o.name : "");
    fprintf(stderr,
            "mtpool %s malloc: pool \"%s\", purge_delay_ms %ld, thread_cache_bytes %zu, "
            "check %d, show_stats %s\n",
            mtp_version(), name, o.purge_delay_ms, o.thread_cache_bytes, o.check,
            show_names[show_stats]);
  }
}

__attribute__((destructor)) static void malloc_end(void) {
  if (show_stats == SHOW_JSON)
    mtp_print_stats_json(stderr);
  else if (show_stats == SHOW_TABLE)
    mtp_print_stats(stderr);
}
