/* Threads under the drop-in malloc:
 *   churn: 10,000 threads one after another; each frees the blocks its predecessor left (the
 *          allocating thread has exited) and leaves its own; memory stays bounded.
 *   tsd:   threads whose first allocation is glibc's own (pthread_setspecific callocs for keys
 *          >= 32), and key destructors that free, and allocate again, after mtpool's own
 *          per-thread teardown ran; those late blocks are freed by the main thread. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "malloc_util.h"

static size_t reserved_bytes(void) {
  static mtp_stats_t st;
  ((mu_stats_fn)mu_sym("mtp_pool_stats"))(NULL, &st);
  return st.bytes_reserved;
}

/* ---- churn ---- */
enum { CHURN_THREADS = 10000, PER_THREAD = 64 };
static void *handoff[PER_THREAD];

static void *churn_thread(void *arg) {
  unsigned seed = (unsigned)(uintptr_t)arg;
  for (int i = 0; i < PER_THREAD; i++) {
    if (handoff[i]) {
      CHECK(((unsigned char *)handoff[i])[0] == (unsigned char)(seed - 1));
      free(handoff[i]); /* its allocating thread has exited */
    }
    size_t n = 16 + (seed * 7919u + (unsigned)i * 104729u) % 3000;
    handoff[i] = malloc(n);
    CHECK(mu_owned(handoff[i]));
    memset(handoff[i], (unsigned char)seed, n);
  }
  void *tmp[100];
  for (int i = 0; i < 100; i++) tmp[i] = malloc(100 + i);
  for (int i = 0; i < 100; i++) free(tmp[i]);
  return NULL;
}

static void test_churn(void) {
  size_t blocks0 = mu_blocks_in_use();
  for (unsigned t = 1; t <= CHURN_THREADS; t++) {
    pthread_t th;
    CHECK(pthread_create(&th, NULL, churn_thread, (void *)(uintptr_t)t) == 0);
    CHECK(pthread_join(th, NULL) == 0);
  }
  for (int i = 0; i < PER_THREAD; i++) free(handoff[i]);
  CHECK(mu_blocks_in_use() <= blocks0 + 16);
  /* 10,000 dead threads' slabs came back to the pool: far less than one slab per thread */
  CHECK(reserved_bytes() < (size_t)64 << 20);
}

/* ---- thread-specific data ---- */
enum { KEYS = 40, TSD_THREADS = 300 };
static pthread_key_t keys[KEYS];
static pthread_mutex_t late_lock = PTHREAD_MUTEX_INITIALIZER;
static void *late[TSD_THREADS * 2];
static int late_n;

static void key_destructor(void *v) {
  unsigned *rounds = v;
  CHECK(mu_owned(v));
  unsigned r = ++*rounds;
  free(v);
  void *p = malloc(200); /* after mtpool's own teardown of this thread, maybe */
  CHECK(mu_owned(p));
  memset(p, 1, 200);
  free(p);
  if (r < 4) { /* set again: glibc runs another round (4 rounds, PTHREAD_DESTRUCTOR_ITERATIONS) */
    unsigned *again = malloc(sizeof(unsigned));
    *again = r;
    pthread_setspecific(keys[KEYS - 1], again);
  } else {
    void *keep = malloc(300); /* outlives the thread; the main thread frees it */
    CHECK(mu_owned(keep));
    pthread_mutex_lock(&late_lock);
    late[late_n++] = keep;
    pthread_mutex_unlock(&late_lock);
  }
}

static void *tsd_thread(void *arg) {
  (void)arg;
  /* the first allocation of this thread is glibc's, inside pthread_setspecific (key >= 32) */
  for (int k = KEYS - 1; k >= 0; k--) {
    unsigned *v = malloc(sizeof(unsigned));
    *v = 0;
    CHECK(pthread_setspecific(keys[k], v) == 0);
  }
  return NULL;
}

static void test_tsd(void) {
  for (int k = 0; k < KEYS; k++) CHECK(pthread_key_create(&keys[k], k == KEYS - 1 ? key_destructor : free) == 0);
  size_t blocks0 = mu_blocks_in_use(), reserved0 = reserved_bytes();
  for (int t = 0; t < TSD_THREADS; t++) {
    pthread_t th;
    CHECK(pthread_create(&th, NULL, tsd_thread, NULL) == 0);
    CHECK(pthread_join(th, NULL) == 0);
  }
  CHECK(late_n == TSD_THREADS);
  for (int i = 0; i < late_n; i++) free(late[i]);
  /* nothing leaked: every block came back, and the threads' slabs went back to the pool */
  CHECK(mu_blocks_in_use() <= blocks0 + 4);
  CHECK(reserved_bytes() <= reserved0 + ((size_t)8 << 20));
}

int main(void) {
  mu_init();
  RUN(test_churn);
  RUN(test_tsd);
  DONE();
}
