/* dlopen and dlclose under the drop-in malloc.
 *   test_malloc_dlopen LIB         (preloaded) a library that allocates, loaded and unloaded 200
 *                                  times; its blocks are freed after it is gone.
 *   test_malloc_dlopen --self MLIB (not preloaded) libmtpool-malloc.so itself dlopen()ed: its
 *                                  initial-exec TLS fits, its API works from several threads,
 *                                  and threads still exit cleanly after dlclose. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#include "malloc_util.h"

static void *(*api_alloc)(size_t);
static void (*api_free)(void *);

static void *api_thread(void *arg) {
  (void)arg;
  void *v[500];
  for (int i = 0; i < 500; i++) {
    v[i] = api_alloc((size_t)i * 3 + 1);
    CHECK(v[i] != NULL);
  }
  for (int i = 0; i < 500; i++) api_free(v[i]);
  api_alloc(10); /* left to the thread's exit */
  return NULL;
}

static int self_test(const char *lib) {
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  api_alloc = (void *(*)(size_t))dlsym(h, "mtp_alloc");
  api_free = (void (*)(void *))dlsym(h, "mtp_free");
  CHECK(api_alloc && api_free);
  pthread_t th[8];
  for (int i = 0; i < 8; i++) CHECK(pthread_create(&th[i], NULL, api_thread, NULL) == 0);
  for (int i = 0; i < 8; i++) CHECK(pthread_join(th[i], NULL) == 0);
  CHECK(pthread_create(&th[0], NULL, api_thread, NULL) == 0);
  CHECK(pthread_join(th[0], NULL) == 0);
  dlclose(h); /* the library stays (NODELETE): threads that used it can still exit */
  CHECK(pthread_create(&th[0], NULL, api_thread, NULL) == 0);
  CHECK(pthread_join(th[0], NULL) == 0);
  DONE();
}

static void *use_lib(void *fn) {
  ((void (*)(void))fn)();
  return NULL;
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--self") == 0) return self_test(argv[2]);
  mu_init();
  CHECK(argc == 2);
  size_t before = mu_blocks_in_use();
  char *kept[200];
  for (int i = 0; i < 200; i++) {
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    CHECK(h != NULL);
    char *(*copy)(void) = (char *(*)(void))dlsym(h, "dl_alloc_copy");
    void *tls = dlsym(h, "dl_alloc_tls");
    CHECK(copy && tls);
    kept[i] = copy();
    CHECK(mu_owned(kept[i]));
    pthread_t th;
    CHECK(pthread_create(&th, NULL, use_lib, tls) == 0);
    CHECK(pthread_join(th, NULL) == 0);
    CHECK(dlclose(h) == 0);
  }
  for (int i = 0; i < 200; i++) {
    CHECK(strcmp(kept[i], "hello from the constructor") == 0);
    free(kept[i]);
  }
  CHECK(mu_blocks_in_use() <= before + 8);
  DONE();
}
