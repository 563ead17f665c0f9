/*
 * The security suite's programs: each case commits one heap error and then carries on as a
 * program would (frees what it holds, allocates a little more) and exits 0. Built without mtpool;
 * run_security.sh runs every case under glibc's malloc, the drop-in malloc preloaded, and the
 * drop-in malloc with MTPOOL_CHECK=1, and counts a case as DETECTED when the process does not exit
 * 0 (a report and abort, a fault, any other nonzero end).
 *
 * Reuse cases ("reuse_*") are the one exception to "commits an error": they free a block and
 * allocate the same size again, and exit 1 if the allocator did NOT hand the freed block straight
 * back (a use after free of the old pointer then cannot reach the new object), 0 if it did.
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

static int run(const char *name, size_t n) {
  if (strncmp(name, "overflow", 8) == 0) { /* overflow1, overflow32, overflow4096 */
    size_t w = (size_t)atol(name + 8);
    char *a = M(n), *b = M(n);
    poke(a, (long)n, w, 'O');
    free(a);
    free(b);
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

static const char *const kinds[] = {"overflow1", "overflow32", "overflow4096", "underflow1",
                                    "underflow32", "double_free", "double_free_delayed",
                                    "double_free_interleaved", "free_interior", "free_unaligned",
                                    "uaf_write", "uaf_read", "reuse", "sized_delete_mismatch"};
static const size_t sizes[] = {24, 4096, 256 << 10};
static const char *const size_names[] = {"small", "4k", "256k"};

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s CASE | --list\n", argv[0]);
    return 2;
  }
  if (strcmp(argv[1], "--list") == 0) {
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
      for (size_t s = 0; s < 3; s++) printf("%s_%s\n", kinds[k], size_names[s]);
    printf("free_stack_small\nfree_global_small\n");
    return 0;
  }
  char name[64];
  snprintf(name, sizeof name, "%s", argv[1]);
  char *us = strrchr(name, '_');
  if (us == NULL) return 2;
  *us = 0;
  for (size_t s = 0; s < 3; s++)
    if (strcmp(us + 1, size_names[s]) == 0) return run(name, sizes[s]);
  fprintf(stderr, "unknown size in %s\n", argv[1]);
  return 2;
}
