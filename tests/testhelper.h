/* Minimal test helpers for the plain-C tests: CHECK stops the test with file:line and a message. */
#ifndef MTP_TESTHELPER_H
#define MTP_TESTHELPER_H

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static atomic_int th_checks; /* tests check from many threads */

#define CHECK(cond)                                                          \
  do {                                                                       \
    atomic_fetch_add_explicit(&th_checks, 1, memory_order_relaxed);          \
    if (!(cond)) {                                                           \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      exit(1);                                                               \
    }                                                                        \
  } while (0)

#define CHECK_EQ_SZ(a, b)                                                                  \
  do {                                                                                     \
    atomic_fetch_add_explicit(&th_checks, 1, memory_order_relaxed);                        \
    size_t a_ = (size_t)(a), b_ = (size_t)(b);                                             \
    if (a_ != b_) {                                                                        \
      fprintf(stderr, "%s:%d: CHECK failed: %s == %s (%zu != %zu)\n", __FILE__, __LINE__, #a, \
              #b, a_, b_);                                                                 \
      exit(1);                                                                             \
    }                                                                                      \
  } while (0)

#define RUN(test)                          \
  do {                                     \
    fprintf(stderr, "[ RUN  ] %s\n", #test); \
    test();                                \
    fprintf(stderr, "[  OK  ] %s\n", #test); \
  } while (0)

#define DONE()                                                  \
  do {                                                          \
    fprintf(stderr, "all passed (%d checks)\n", atomic_load(&th_checks));     \
    return 0;                                                   \
  } while (0)

/* Resident set size of this process in bytes (from /proc/self/statm). */
static inline size_t th_rss(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long size = 0, res = 0;
  if (fscanf(f, "%lu %lu", &size, &res) != 2) res = 0;
  fclose(f);
  return (size_t)res * 4096;
}

/* Under a sanitizer RSS includes shadow memory and quarantines: memory checks are skipped. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TH_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TH_SANITIZED 1
#endif
#endif
#ifndef TH_SANITIZED
#define TH_SANITIZED 0
#endif
#if defined(__SANITIZE_THREAD__)
#define TH_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TH_TSAN 1
#endif
#endif
#ifndef TH_TSAN
#define TH_TSAN 0
#endif

#endif
