/* Bug: mtp_free(p + 4096), p the first block of a fresh slab, pushed a block that was never
 * handed out onto the free list; carving later handed the same block out again, so two live
 * blocks shared memory. Now such a free is reported (MTP_ERR_INVALID_POINTER) and ignored, for
 * every class from 16 B to 16 KiB, by the owner and by another thread (as is an interior pointer
 * freed by another thread), and no two live blocks overlap afterwards. Public API only. */
#include <pthread.h>
#include <stdint.h>

#include "mtpool/mtpool.h"
#include "testhelper.h"

static int reports, last_err;
static void on_error(int err, const char *msg, void *p, void *arg) {
  (void)arg;
  fprintf(stderr, "  reported: %s (%p)\n", msg, p);
  reports++;
  last_err = err;
}

static int cmp(const void *a, const void *b) {
  uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
  return x < y ? -1 : x > y;
}

/* Frees its argument on a thread that does not own the block (the remote free path). */
static void *free_remote(void *p) {
  mtp_free(p);
  return NULL;
}
static void free_on_other_thread(void *p) {
  pthread_t t;
  CHECK(pthread_create(&t, NULL, free_remote, p) == 0);
  pthread_join(t, NULL);
}

static void one_class(size_t size) {
  fprintf(stderr, "  class of %zu bytes\n", size);
  mtp_pool_t *pool = mtp_pool_create(NULL); /* fresh slabs */
  CHECK(pool != NULL);
  char *p = mtp_pool_alloc(pool, size);
  CHECK(p != NULL);
  /* a block of the same slab that was never handed out: 4 KiB on, or the next block for
   * classes above 4 KiB (p + 4096 would be inside p itself there) */
  char *never = p + (size <= 4096 ? 4096 : size);
  reports = 0;
  mtp_free(never);
  CHECK_EQ_SZ(reports, 1);
  CHECK_EQ_SZ(last_err, MTP_ERR_INVALID_POINTER);
  reports = 0;
  mtp_free_sized(never, size);
  CHECK_EQ_SZ(reports, 1);
  CHECK_EQ_SZ(last_err, MTP_ERR_INVALID_POINTER);
  reports = 0;
  /* the same from another thread (the remote free's fast case checks the bump pointer too), and
   * an interior pointer of a handed-out block (it checks the block start) */
  free_on_other_thread(never);
  CHECK_EQ_SZ(reports, 1);
  CHECK_EQ_SZ(last_err, MTP_ERR_INVALID_POINTER);
  reports = 0;
  free_on_other_thread(p + 8);
  CHECK_EQ_SZ(reports, 1);
  CHECK_EQ_SZ(last_err, MTP_ERR_INVALID_POINTER);
  reports = 0;
  /* Allocate on until the slab is carved past `never`: no block may overlap another. */
  enum { N = 600 };
  static uintptr_t live[N + 1];
  live[0] = (uintptr_t)p;
  for (int i = 1; i <= N; i++) {
    live[i] = (uintptr_t)mtp_pool_alloc(pool, size);
    CHECK(live[i] != 0);
  }
  qsort(live, N + 1, sizeof(live[0]), cmp);
  for (int i = 0; i < N; i++) CHECK(live[i] + size <= live[i + 1]);
  CHECK_EQ_SZ(reports, 0);
  mtp_pool_destroy(pool);
}

static void test_classes(void) {
  size_t sizes[] = {16, 48, 256, 1024, 4096, 8192, 16384};
  for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) one_class(sizes[i]);
}

int main(void) {
  mtp_set_error_handler(on_error, NULL);
  RUN(test_classes);
  DONE();
}
