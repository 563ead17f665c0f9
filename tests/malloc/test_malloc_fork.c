/* fork() while other threads allocate and free: the child allocates, frees blocks the parent
 * allocated before the fork (its own and other threads'), and can exec. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "malloc_util.h"

enum { WORKERS = 3, FORKS = 60, SHARED = 256 };
static atomic_int stop;
static void *_Atomic shared[SHARED]; /* blocks the workers allocate and swap */

static void *worker(void *arg) {
  unsigned x = (unsigned)(uintptr_t)arg;
  while (!atomic_load(&stop)) {
    x = x * 1103515245u + 12345u;
    size_t n = 8 + (x >> 8) % 5000;
    void *p = malloc(n);
    CHECK(p != NULL);
    memset(p, 7, n);
    void *old = atomic_exchange(&shared[(x >> 20) % SHARED], p);
    free(old);
  }
  return NULL;
}

/* Fork while the purge thread sleeps on its condition variable (the parent is idle); the child
 * empties slabs, which wakes its own purge thread: that must not wait for the parent's. */
static void fork_while_purger_idle(void) {
  enum { N = 20000 };
  static void *v[N];
  for (int i = 0; i < N; i++) v[i] = malloc(1000);
  for (int i = 0; i < N; i++) free(v[i]);
  usleep(800 * 1000); /* the default purge delay (250 ms) passes: the purge thread goes idle */
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    alarm(20); /* a hang becomes SIGALRM */
    for (int r = 0; r < 3; r++) {
      for (int i = 0; i < N; i++) v[i] = malloc(1000);
      for (int i = 0; i < N; i++) free(v[i]);
      usleep(300 * 1000);
    }
    _exit(0);
  }
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(int argc, char **argv) {
  /* the exec'ed program: this one again (a program of the same C library, preloaded again) */
  if (argc == 2 && strcmp(argv[1], "exec") == 0) {
    void *p = malloc(100);
    return mu_owned(p) ? 0 : 5;
  }
  fork_while_purger_idle();
  pthread_t th[WORKERS];
  for (int i = 0; i < WORKERS; i++)
    CHECK(pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)(i + 1)) == 0);
  void *mine[100];
  for (int i = 0; i < 100; i++) mine[i] = malloc((size_t)i * 37 + 1);
  for (int f = 0; f < FORKS; f++) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
      /* child: only this thread lives on */
      for (int i = 0; i < 100; i++) free(mine[i]);
      for (int i = 0; i < SHARED; i++) free(atomic_exchange(&shared[i], NULL));
      for (int i = 0; i < 2000; i++) {
        void *p = calloc(1, (size_t)i + 1);
        if (!mu_owned(p)) _exit(3);
        free(p);
      }
      pthread_t t2;
      if (pthread_create(&t2, NULL, worker, (void *)99) != 0) _exit(4);
      usleep(1000);
      atomic_store(&stop, 1);
      pthread_join(t2, NULL);
      if (f % 4 == 0) execl("/proc/self/exe", argv[0], "exec", (char *)NULL);
      _exit(0);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      fprintf(stderr, "%s: child %d: status 0x%x\n", argv[0], f, status);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < WORKERS; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 100; i++) free(mine[i]);
  for (int i = 0; i < SHARED; i++) free(atomic_exchange(&shared[i], NULL));
  DONE();
}
