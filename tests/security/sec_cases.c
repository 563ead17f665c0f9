/*
 * The security suite's programs: each case commits one heap error and then carries on as a
 * program would (frees what it holds, allocates a little more) and exits 0. Built without mtpool;
 * run_security.sh runs every case under glibc's malloc, the drop-in malloc preloaded, and the
 * drop-in malloc with MTPOOL_CHECK=1, and counts a case as DETECTED when the process does not exit
 * 0 (a report and abort, a fault, any other nonzero end).
 *
 * Some cases measure a property rather than commit an error; each exits 1 when the allocator
 * has the property (counted as detected), 0 when not:
 *   reuse_*          a freed block is not handed straight back by the next allocation of its size
 *                    (a use after free of the old pointer then cannot reach the new object);
 *   realloc_*        realloc moves the block (same size, or shrunk to half): a pointer kept to
 *                    the old block is then stale at once, not only sometimes;
 *   stale_malloc_*   a freed block's secret is not in the next block of its size;
 *   stale_free_*     a freed block's secret is gone from it (read after free: a fault counts too).
 * clean_* commits no error: every allocator must exit 0 there (a control for false reports).
 *
 * usage: sec_cases CASE      (sec_cases --list prints the cases, one a line)
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* operator new / sized operator delete, called by their symbols so this stays C (libstdc++'s
 * under glibc, the drop-in malloc's override_new.cpp when preloaded) */
void *_Znwm(unsigned long);
void *_Znam(unsigned long);
void _ZdlPv(void *);
void _ZdaPv(void *);
void _ZdlPvm(void *, unsigned long);

/* Accesses through a volatile pointer, so that the compiler keeps every planted bug. */
static void *volatile sink;
static void poke(char *p, long off, size_t n, char v) {
  volatile char *q = (volatile char *)p;
  for (size_t i = 0; i < n; i++) q[off + (long)i] = v;
}
static char peek(char *p, long off) { return ((volatile char *)p)[off]; }

static void *M(size_t n) {
  void *p = malloc(n);
  if (p == NULL) exit(2);
  memset(p, 'a', n);
  sink = p;
  return p;
}

/* what a program does after the bug: frees, and more allocations of the same size */
static void carry_on(size_t n) {
  for (int i = 0; i < 8; i++) {
    void *a = M(n), *b = M(n);
    free(a);
    free(b);
  }
}

static char g_buf[256] __attribute__((aligned(16)));

/* Does p[0..n) hold any byte v? */
static int holds(const char *p, size_t n, char v) {
  for (size_t i = 0; i < n; i++)
    if (((volatile const char *)p)[i] == v) return 1;
  return 0;
}

static int run(const char *name, size_t n) {
  if (strncmp(name, "overflow", 8) == 0 && name[8] != '_') { /* overflow1, 32, 4096 */
    size_t w = (size_t)atol(name + 8);
    char *a = M(n), *b = M(n);
    poke(a, (long)n, w, 'O');
    free(a);
    free(b);
    carry_on(n);
  } else if (strncmp(name, "leak_overflow", 13) == 0) { /* leak_overflow1/32: never freed */
    size_t w = (size_t)atol(name + 13);
    char *a = M(n);
    poke(a, (long)n, w, 'O');
    carry_on(n);
  } else if (strncmp(name, "leak_underflow", 14) == 0) { /* leak_underflow1/32: never freed */
    size_t w = (size_t)atol(name + 14);
    char *a = M(n);
    poke(a, -(long)w, w, 'U');
    carry_on(n);
  } else if (strcmp(name, "memcpy_overflow32") == 0) { /* memcpy 32 bytes more than the block */
    char *src = M(n + 32), *a = M(n);
    memcpy(a, src, n + 32);
    free(a);
    free(src);
    carry_on(n);
  } else if (strcmp(name, "overflow_far") == 0) { /* a write 1 MiB past the block's start */
    char *a = M(n);
    poke(a, 1l << 20, 1, 'F');
    free(a);
    carry_on(n);
  } else if (strcmp(name, "zero_write") == 0) {
    char *z = malloc(0);
    sink = z;
    if (z != NULL) poke(z, 0, 8, 'Z');
    free(z);
    carry_on(n);
  } else if (strcmp(name, "zero_read") == 0) {
    char *z = malloc(0);
    sink = z;
    if (z != NULL) sink = (void *)(uintptr_t)peek(z, 0);
    free(z);
    carry_on(n);
  } else if (strcmp(name, "stale_malloc") == 0) {
    char *a = M(n);
    memset(a, 'S', n);
    free(a);
    char *b = malloc(n);
    if (b == NULL) exit(2);
    int stale = holds(b, n, 'S');
    free(b);
    return stale ? 0 : 1;
  } else if (strcmp(name, "stale_free") == 0) {
    char *a = M(n);
    memset(a, 'S', n);
    free(a);
    return holds(a, n, 'S') ? 0 : 1;
  } else if (strcmp(name, "realloc_same") == 0 || strcmp(name, "realloc_shrink") == 0) {
    char *a = M(n);
    char *b = realloc(a, strcmp(name, "realloc_same") == 0 ? n : n / 2);
    if (b == NULL) exit(2);
    int same = a == b;
    free(b);
    return same ? 0 : 1;
  } else if (strcmp(name, "new_delete_array") == 0) { /* new, then delete[] */
    char *a = _Znwm(n);
    sink = a;
    _ZdaPv(a);
    carry_on(n);
  } else if (strcmp(name, "new_array_delete") == 0) { /* new[], then delete */
    char *a = _Znam(n);
    sink = a;
    _ZdlPv(a);
    carry_on(n);
  } else if (strcmp(name, "new_free") == 0) { /* new, then free */
    char *a = _Znwm(n);
    sink = a;
    free(a);
    carry_on(n);
  } else if (strcmp(name, "clean") == 0) { /* no error: the false-report control */
    char *a = M(n), *z = malloc(0);
    char *r = realloc(M(n), 2 * n);
    char *c = _Znam(n);
    memset(r, 'r', 2 * n);
    memset(c, 'c', n);
    _ZdaPv(c);
    free(r);
    free(z);
    free(a);
    carry_on(n);
  } else if (strncmp(name, "underflow", 9) == 0) { /* underflow1, underflow32 */
    size_t w = (size_t)atol(name + 9);
    char *a = M(n), *b = M(n);
    poke(b, -(long)w, w, 'U');
    free(b);
    free(a);
    carry_on(n);
  } else if (strcmp(name, "double_free") == 0) {
    char *a = M(n);
    free(a);
    free(a);
    carry_on(n);
  } else if (strcmp(name, "double_free_delayed") == 0) {
    char *a = M(n);
    free(a);
    for (int i = 0; i < 16; i++) free(M(n * 2 + 16));
    free(a);
    carry_on(n);
  } else if (strcmp(name, "double_free_interleaved") == 0) {
    char *a = M(n), *b = M(n);
    free(a);
    free(b);
    free(a);
    carry_on(n);
  } else if (strcmp(name, "free_interior") == 0) {
    char *a = M(n);
    free(a + 16);
    carry_on(n);
  } else if (strcmp(name, "free_interior8") == 0) {
    char *a = M(n);
    free(a + 8);
    carry_on(n);
  } else if (strcmp(name, "free_unaligned") == 0) {
    char *a = M(n);
    free(a + 1);
    carry_on(n);
  } else if (strcmp(name, "free_stack") == 0) {
    char buf[256] __attribute__((aligned(16)));
    sink = buf;
    free(buf + 16);
    carry_on(n);
  } else if (strcmp(name, "free_global") == 0) {
    free(g_buf + 16);
    carry_on(n);
  } else if (strcmp(name, "uaf_write") == 0) {
    char *a = M(n);
    free(a);
    poke(a, 0, n < 64 ? n : 64, 'W');
    carry_on(n);
  } else if (strcmp(name, "uaf_read") == 0) {
    char *a = M(n);
    free(a);
    sink = (void *)(uintptr_t)peek(a, (long)(n / 2));
    carry_on(n);
  } else if (strcmp(name, "reuse") == 0) {
    char *a = M(n);
    free(a);
    char *b = M(n);
    int same = a == b;
    free(b);
    return same ? 0 : 1;
  } else if (strcmp(name, "sized_delete_mismatch") == 0) {
    char *a = _Znwm(n);
    sink = a;
    _ZdlPvm(a, n >= 1024 ? 16 : n * 64);
    carry_on(n);
  } else {
    fprintf(stderr, "unknown case %s\n", name);
    return 2;
  }
  return 0;
}

static const char *const kinds[] = {
    "overflow1",        "overflow32",       "overflow4096",      "memcpy_overflow32",
    "overflow_far",     "underflow1",       "underflow32",       "leak_overflow1",
    "leak_overflow32",  "leak_underflow1",  "leak_underflow32",  "double_free",
    "double_free_delayed", "double_free_interleaved", "free_interior", "free_interior8",
    "free_unaligned",   "uaf_write",        "uaf_read",          "reuse",
    "stale_malloc",     "stale_free",       "realloc_same",      "realloc_shrink",
    "sized_delete_mismatch", "new_delete_array", "new_array_delete", "new_free",
    "clean"};
/* small, a page, a medium block (mtpool: 32 KiB to its medium limit), a large one */
#define NSIZES 4
static const size_t sizes[NSIZES] = {24, 4096, 64 << 10, 256 << 10};
static const char *const size_names[NSIZES] = {"small", "4k", "64k", "256k"};

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s CASE | --list\n", argv[0]);
    return 2;
  }
  if (strcmp(argv[1], "--list") == 0) {
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
      for (size_t s = 0; s < NSIZES; s++) printf("%s_%s\n", kinds[k], size_names[s]);
    printf("free_stack_small\nfree_global_small\nzero_write_small\nzero_read_small\n");
    return 0;
  }
  char name[64];
  snprintf(name, sizeof name, "%s", argv[1]);
  char *us = strrchr(name, '_');
  if (us == NULL) return 2;
  *us = 0;
  for (size_t s = 0; s < NSIZES; s++)
    if (strcmp(us + 1, size_names[s]) == 0) return run(name, sizes[s]);
  fprintf(stderr, "unknown size in %s\n", argv[1]);
  return 2;
}
