/* Runs a command (argv, no shell) and prints one JSON line per run with what the kernel measured
 * for it and every process it waited for: wall seconds (monotonic clock, fork to reap), user and
 * system CPU seconds, peak RSS (the largest process of the tree, KiB) and minor and major page
 * faults (summed over the tree), from wait4()'s rusage; and anon_huge_kb, the most AnonHugePages
 * of the tree (the child and the processes it started, summed) seen in samples every 10 ms while it
 * runs (bench/tools/smaps.h: a process cannot be read once it has exited, so the peak of samples).
 * Used by scripts/bench_programs.sh.
 *
 *   runstat [--preload LIBS] [--in FILE] [--out FILE] [--dir DIR] [--repeat N] [--warm-mib M]
 *           -- CMD ARG...
 *
 * --preload sets LD_PRELOAD in the child only (runstat itself runs on glibc). --out takes the
 * child's stdout (stderr goes to FILE.err); --in its stdin (default /dev/null). --repeat runs the
 * command N times in a row and prints one line with the N values of each measure. --warm-mib M:
 * before each run, runstat maps M MiB advised huge, touches and unmaps it, outside every figure
 * (on a VM that reports free memory to its host, memory freed seconds before is faulted back in
 * by the host at the program's first touch: bench/results/notes.md; default 0). Exits 1 if a run
 * exits non-zero (after printing its line, with "rc"), 2 on bad usage. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../tools/smaps.h"
#include "../tools/warm.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double tv(struct timeval t) { return (double)t.tv_sec + (double)t.tv_usec * 1e-6; }


static void usage(void) {
  fprintf(stderr, "usage: runstat [--preload LIBS] [--in FILE] [--out FILE] [--dir DIR] [--repeat N] "
                  "[--warm-mib M] -- CMD ARG...\n");
  exit(2);
}

static void redirect(const char *path, int fd, int flags) {
  int f = open(path, flags, 0644);
  if (f < 0 || dup2(f, fd) < 0) {
    fprintf(stderr, "runstat: %s: %s\n", path, strerror(errno));
    _exit(126);
  }
  close(f);
}

int main(int argc, char **argv) {
  const char *preload = NULL, *in = "/dev/null", *out = NULL, *dir = NULL;
  long repeat = 1, warm_mib = 0;
  int i = 1;
  for (; i < argc; i++) {
    if (!strcmp(argv[i], "--")) {
      i++;
      break;
    }
    if (i + 1 >= argc) usage();
    if (!strcmp(argv[i], "--preload")) preload = argv[++i];
    else if (!strcmp(argv[i], "--in")) in = argv[++i];
    else if (!strcmp(argv[i], "--out")) out = argv[++i];
    else if (!strcmp(argv[i], "--dir")) dir = argv[++i];
    else if (!strcmp(argv[i], "--repeat")) repeat = strtol(argv[++i], NULL, 10);
    else if (!strcmp(argv[i], "--warm-mib")) warm_mib = strtol(argv[++i], NULL, 10);
    else usage();
  }
  if (i >= argc || repeat < 1 || repeat > 100000 || warm_mib < 0 || warm_mib > (1L << 20)) usage();
  char **cmd = argv + i;
  char errpath[4096];
  if (out) snprintf(errpath, sizeof errpath, "%s.err", out);

  double *wall = calloc((size_t)repeat, sizeof *wall), *cpu = calloc((size_t)repeat, sizeof *cpu);
  long *rss = calloc((size_t)repeat, sizeof *rss), *minflt = calloc((size_t)repeat, sizeof *minflt);
  long *majflt = calloc((size_t)repeat, sizeof *majflt), *huge = calloc((size_t)repeat, sizeof *huge);
  double *user = calloc((size_t)repeat, sizeof *user), *sys = calloc((size_t)repeat, sizeof *sys);
  if (!wall || !cpu || !rss || !minflt || !majflt || !huge || !user || !sys) return 2;
  int rc = 0;
  for (long r = 0; r < repeat; r++) {
    bench_warm_memory(warm_mib); /* in runstat's own process, before the child exists */
    double t0 = now();
    pid_t pid = fork();
    if (pid < 0) {
      perror("runstat: fork");
      return 2;
    }
    if (pid == 0) {
      if (dir && chdir(dir) != 0) {
        perror("runstat: chdir");
        _exit(126);
      }
      redirect(in, 0, O_RDONLY);
      if (out) {
        redirect(out, 1, O_WRONLY | O_CREAT | O_TRUNC);
        redirect(errpath, 2, O_WRONLY | O_CREAT | O_TRUNC);
      }
      if (preload && *preload) setenv("LD_PRELOAD", preload, 1);
      else unsetenv("LD_PRELOAD");
      execvp(cmd[0], cmd);
      fprintf(stderr, "runstat: %s: %s\n", cmd[0], strerror(errno));
      _exit(127);
    }
    struct smaps_sampler thp;
    smaps_sampler_start(&thp, (long)pid, 1, 10);
    int status;
    struct rusage ru;
    while (wait4(pid, &status, 0, &ru) < 0)
      if (errno != EINTR) {
        perror("runstat: wait4");
        return 2;
      }
    wall[r] = now() - t0;
    huge[r] = smaps_sampler_stop(&thp);
    user[r] = tv(ru.ru_utime);
    sys[r] = tv(ru.ru_stime);
    cpu[r] = user[r] + sys[r];
    rss[r] = ru.ru_maxrss;
    minflt[r] = ru.ru_minflt;
    majflt[r] = ru.ru_majflt;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code && !rc) rc = code;
  }
  if (repeat == 1) {
    char hj[64];
    printf("\"wall_s\": %.6f, \"user_s\": %.4f, \"sys_s\": %.4f, \"cpu_s\": %.4f, \"maxrss_kb\": %ld, "
           "\"minflt\": %ld, \"majflt\": %ld, %s, \"rc\": %d\n",
           wall[0], user[0], sys[0], cpu[0], rss[0], minflt[0], majflt[0], smaps_json(hj, sizeof hj, huge[0]), rc);
  } else {
#define LIST(name, arr, fmt)                                             \
  do {                                                                   \
    printf("\"%s\": [", name);                                           \
    for (long r = 0; r < repeat; r++) printf(r ? ", " fmt : fmt, arr[r]); \
    printf("], ");                                                       \
  } while (0)
    LIST("wall_s", wall, "%.6f");
    LIST("cpu_s", cpu, "%.4f");
    LIST("maxrss_kb", rss, "%ld");
    LIST("minflt", minflt, "%ld");
    LIST("anon_huge_kb", huge, "%ld");
    printf("\"rc\": %d\n", rc);
  }
  return rc ? 1 : 0;
}
