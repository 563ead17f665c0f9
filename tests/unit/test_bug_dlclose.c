/* Bug: a shared library that links libmtpool.a, used from a thread and dlclose()d while that
 * thread lives: the thread's exit called mtpool's thread-specific data destructor inside the
 * unmapped library (SIGSEGV); its purge thread, too, ran on in unmapped code. Now the library's
 * destructor deletes the key and stops the purge thread. The check runs in a child process, so
 * a crash is reported as a failure. */
#include <dlfcn.h>
#include <pthread.h>
#include <semaphore.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testhelper.h"

#ifndef MTP_TEST_PLUGIN
int main(void) {
  fprintf(stderr, "skipped: needs a static libmtpool (the plugin carries it)\n");
  return 77;
}
#else
static sem_t used, closed;
static int (*use)(void);

static void *user(void *arg) {
  (void)arg;
  int ok = use();
  sem_post(&used);
  sem_wait(&closed); /* live on past the dlclose, then exit */
  return (void *)(intptr_t)ok;
}

static int child(void) {
  void *lib = dlopen(MTP_TEST_PLUGIN, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  use = (int (*)(void))dlsym(lib, "plugin_use");
  if (use == NULL) return 3;
  sem_init(&used, 0, 0);
  sem_init(&closed, 0, 0);
  pthread_t t;
  if (pthread_create(&t, NULL, user, NULL) != 0) return 4;
  sem_wait(&used);
  if (dlclose(lib) != 0) return 5;
  sem_post(&closed);
  void *ok = NULL;
  pthread_join(t, &ok); /* the thread's exit runs the key destructors */
  usleep(400 * 1000);   /* a purge thread left behind would wake up in unmapped code by now */
  return ok ? 0 : 6;
}

static void test_unload_with_live_thread(void) { th_fork_check(child); }

int main(void) {
  RUN(test_unload_with_live_thread);
  DONE();
}
#endif
