/* The purge thread starts only when it is worth it (pool.c, PURGER_START_BYTES): a process that
 * allocates and frees a little on one thread gets no helper thread, and its due pages are purged
 * by its own later allocator calls; once more than that waits, a thread starts and returns it
 * within the purge delay with no further call. Single-threaded on purpose (a second heap in the
 * default pool starts the thread at once). */
#define _GNU_SOURCE
#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mtpool/mtpool.h"
#include "testhelper.h"

/* Threads of this process (sanitizers may run threads of their own: compare, not count). */
static int threads(void) {
  DIR *d = opendir("/proc/self/task");
  CHECK(d != NULL);
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

static int base_threads;
static char base_tids[4096]; /* " tid tid ... " of the threads there before any test */

static void list_tids(char *out, size_t n) {
  DIR *d = opendir("/proc/self/task");
  CHECK(d != NULL);
  size_t at = (size_t)snprintf(out, n, " ");
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    if (e->d_name[0] != '.' && at < n) at += (size_t)snprintf(out + at, n - at, "%s ", e->d_name);
  closedir(d);
}

/* The signals a thread blocks (/proc's SigBlk), or 0 if it is gone. */
static unsigned long long sigblk(const char *tid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/self/task/%s/status", tid);
  FILE *f = fopen(path, "r");
  if (f == NULL) return 0;
  unsigned long long m = 0;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, "SigBlk:", 7) == 0) m = strtoull(line + 7, NULL, 16);
  fclose(f);
  return m;
}

/* A short program: blocks of many classes, slabs emptied (cached), a large block freed (its
 * mapping cached): something to purge, but little. */
static void test_no_thread_for_a_little(void) {
  void *p[300]; /* about 450 KiB: under the 1 MiB that earns a thread */
  for (int round = 0; round < 3; round++) {
    for (int i = 0; i < 300; i++) p[i] = mtp_alloc((size_t)(16 + (i * 37) % 3000));
    for (int i = 0; i < 300; i++) mtp_free(p[i]);
  }
  void *big = mtp_alloc(200 * 1024);
  CHECK(big != NULL);
  mtp_free(big);
  CHECK(threads() == base_threads);
}

/* Due pages go back at the next allocator call that has news for the purge, made by this thread. */
static void test_inline_purge(void) {
  mtp_stats_t st0 = th_stats(NULL);
  CHECK(st0.bytes_reserved > 0);
  usleep(400 * 1000); /* past the default delay (250 ms) */
  void *big = mtp_alloc(100 * 1024);
  mtp_free(big); /* a cached mapping: a wake, which purges what is due here */
  mtp_stats_t st = th_stats(NULL);
  fprintf(stderr, "  returned %llu -> %llu bytes; reserved %zu -> %zu KiB\n",
          (unsigned long long)st0.bytes_returned, (unsigned long long)st.bytes_returned,
          st0.bytes_reserved >> 10, st.bytes_reserved >> 10);
  CHECK(st.bytes_returned > st0.bytes_returned);
  CHECK(threads() == base_threads);
}

/* Much to purge: the thread starts, and the pages go back within the delay with no further call
 * from this thread. */
static void test_thread_when_worth_it(void) {
  enum { N = 40000 }; /* 40,000 x 200 B: 8 MiB of slabs */
  static void *p[N];
  for (int i = 0; i < N; i++) p[i] = mtp_alloc(200);
  mtp_stats_t st0 = th_stats(NULL);
  for (int i = 0; i < N; i++) mtp_free(p[i]);
  CHECK(threads() > base_threads); /* the purge thread (a sanitizer may have started one too) */
  mtp_stats_t st = st0;
  int waited = 0;
  for (; waited < 3000; waited += 20) { /* the delay is 250 ms; allow a loaded machine 3 s */
    usleep(20 * 1000);
    st = th_stats(NULL);
    if (st.bytes_reserved < st0.bytes_reserved / 4) break;
  }
  fprintf(stderr, "  reserved %zu KiB -> %zu KiB after %d ms\n", st0.bytes_reserved >> 10,
          st.bytes_reserved >> 10, waited);
  CHECK(st.bytes_reserved < st0.bytes_reserved / 4);
  /* The purge thread blocks every signal (pool.c): SIGCHLD or SIGINT sent to the process reach
   * the program's threads, which may be waiting for them. */
  char now[4096];
  list_tids(now, sizeof now);
  int ours = 0;
  for (char *tok = strtok(now, " "); tok != NULL; tok = strtok(NULL, " ")) {
    char key[32];
    snprintf(key, sizeof key, " %s ", tok);
    if (strstr(base_tids, key) != NULL) continue; /* the main thread, or a sanitizer's */
    unsigned long long m = sigblk(tok);
    fprintf(stderr, "  new thread %s blocks %llx\n", tok, m);
    CHECK((m >> (SIGCHLD - 1)) & 1);
    CHECK((m >> (SIGINT - 1)) & 1);
    ours++;
  }
  CHECK(ours >= 1);
}

/* A child forked while the purge thread runs starts none of its own from the forking thread's
 * allocations, even with much to purge: a thread it started could wait for ever on a lock another
 * parent thread held at the fork (a sanitizer's allocator). Its wakes purge inline. */
static __attribute__((unused)) void test_child_starts_none(void) {
  CHECK(threads() > base_threads); /* the purge thread, from the test before */
  fflush(NULL);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    enum { N = 40000 }; /* 8 MiB of slabs, as above: the parent's was worth a thread */
    static void *q[N];
    for (int i = 0; i < N; i++)
      if ((q[i] = mtp_alloc(200)) == NULL) _exit(2);
    for (int i = 0; i < N; i++) mtp_free(q[i]);
    usleep(300 * 1000); /* past the delay: a wake purges what is due inline */
    void *big = mtp_alloc(100 * 1024);
    mtp_free(big);
    _exit(threads() == 1 ? 0 : 1); /* only the forking thread survives a fork */
  }
  int st = 0;
  CHECK(waitpid(pid, &st, 0) == pid);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

int main(void) {
  base_threads = threads();
  list_tids(base_tids, sizeof base_tids);
  RUN(test_no_thread_for_a_little);
  RUN(test_inline_purge);
  RUN(test_thread_when_worth_it);
#if !TH_TSAN /* ThreadSanitizer supports no child of a multi-threaded process (die_after_fork) */
  RUN(test_child_starts_none);
#endif
  DONE();
}
