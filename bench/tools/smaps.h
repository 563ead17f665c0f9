/* How much of a process's memory transparent huge pages back: the AnonHugePages line of
 * /proc/PID/smaps_rollup (kB), sampled while the process runs and kept at its largest. Shared by
 * every measurer of the suites: bench/proc_driver.cc (seed; its own process), bench/gp/gp_bench.c
 * (its own process) and bench/programs/runstat.c (a child and the processes it starts).
 *
 * Why the peak of samples and not one reading at the end: a program measured from outside cannot
 * be read once it has exited (a zombie has no memory left to report), and at the end of a run an
 * allocator may already have given memory back; the peak is what huge pages backed when the heap
 * was largest. A sample walks the page tables under the process's mmap lock for a few
 * microseconds per 100 MB resident; at one every 10 ms that is well under 1% of a core.
 *
 *   struct smaps_sampler s;
 *   smaps_sampler_start(&s, 0, 0, 10);   // pid 0: this process; tree 0: no children
 *   ... the measured work ...
 *   long kb = smaps_sampler_stop(&s);    // one last sample, then the largest; -1: unreadable
 *
 * Reads with open/read into buffers on the stack (no malloc, so that an in-process sample does
 * not disturb the allocator under test) except the walk over a tree's children (opendir), which
 * only runstat does. Plain C11 and C++; needs pthreads. */
#ifndef MTPOOL_BENCH_SMAPS_H
#define MTPOOL_BENCH_SMAPS_H

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The value (kB) of FIELD ("AnonHugePages") in /proc/PID/smaps_rollup (PID 0: this process);
 * -1 when the file cannot be read (the process has gone, or a kernel older than 4.14). */
static inline long smaps_rollup_kb(long pid, const char *field) {
  char path[64], buf[4096];
  if (pid) snprintf(path, sizeof path, "/proc/%ld/smaps_rollup", pid);
  else snprintf(path, sizeof path, "/proc/self/smaps_rollup");
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t len = 0;
  ssize_t n;
  while (len < sizeof buf - 1 && (n = read(fd, buf + len, sizeof buf - 1 - len)) > 0) len += (size_t)n;
  close(fd);
  buf[len] = '\0';
  size_t fl = strlen(field);
  for (char *line = buf; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL)
    if (!strncmp(line, field, fl) && line[fl] == ':') return strtol(line + fl + 1, NULL, 10);
  return len ? 0 : -1;
}

/* FIELD summed over PID and every process it started that is still alive (through
 * /proc/PID/task/TID/children); -1 when PID itself cannot be read. */
static inline long smaps_tree_kb(long pid, const char *field, int depth) {
  long sum = smaps_rollup_kb(pid, field);
  if (sum < 0 || depth > 16) return sum;
  char dir[64];
  snprintf(dir, sizeof dir, "/proc/%ld/task", pid);
  DIR *d = opendir(dir);
  if (!d) return sum;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char path[300], buf[4096];
    snprintf(path, sizeof path, "/proc/%ld/task/%s/children", pid, e->d_name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    for (char *p = buf, *end; *p; p = end) {
      long child = strtol(p, &end, 10);
      if (end == p) break;
      long v = child > 0 ? smaps_tree_kb(child, field, depth + 1) : -1;
      if (v > 0) sum += v;
    }
  }
  closedir(d);
  return sum;
}

struct smaps_sampler {
  pthread_t thread;
  long pid;        /* 0: this process */
  int tree;        /* also the processes it started */
  long period_ms;
  int stop;        /* set by smaps_sampler_stop (atomic builtins) */
  int running;
  long peak_kb;    /* largest AnonHugePages seen; -1 while none could be read */
  long samples;
};

static inline void smaps_sample(struct smaps_sampler *s) {
  long v = s->tree ? smaps_tree_kb(s->pid, "AnonHugePages", 0) : smaps_rollup_kb(s->pid, "AnonHugePages");
  if (v > s->peak_kb) s->peak_kb = v;
  if (v >= 0) s->samples++;
}

static inline void *smaps_sampler_main(void *arg) {
  struct smaps_sampler *s = (struct smaps_sampler *)arg;
  struct timespec ts;
  ts.tv_sec = s->period_ms / 1000;
  ts.tv_nsec = (s->period_ms % 1000) * 1000000L;
  /* the first sample one period in: a process that ends sooner is never disturbed */
  while (nanosleep(&ts, NULL) == 0 && !__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) smaps_sample(s);
  return NULL;
}

/* Starts sampling PID (0: this process; TREE: with the processes it starts) every PERIOD_MS.
 * Returns 0, or -1 when no thread could be started (smaps_sampler_stop then samples once). */
static inline int smaps_sampler_start(struct smaps_sampler *s, long pid, int tree, long period_ms) {
  s->pid = pid;
  s->tree = tree;
  s->period_ms = period_ms > 0 ? period_ms : 10;
  s->stop = 0;
  s->peak_kb = -1;
  s->samples = 0;
  s->running = pthread_create(&s->thread, NULL, smaps_sampler_main, s) == 0;
  return s->running ? 0 : -1;
}

/* Stops the sampler, takes one last sample and returns the largest AnonHugePages seen (kB), or
 * -1 when the file could never be read (a child that exited before the first sample). */
static inline long smaps_sampler_stop(struct smaps_sampler *s) {
  __atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
  if (s->running) pthread_join(s->thread, NULL);
  s->running = 0;
  smaps_sample(s);
  return s->peak_kb;
}

/* Writes `"anon_huge_kb": N` (or null when unreadable) into BUF: the JSON field every measurer
 * prints. */
static inline const char *smaps_json(char *buf, size_t size, long kb) {
  if (kb < 0) snprintf(buf, size, "\"anon_huge_kb\": null");
  else snprintf(buf, size, "\"anon_huge_kb\": %ld", kb);
  return buf;
}

#endif
