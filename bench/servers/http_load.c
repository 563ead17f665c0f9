/* http_load: the keep-alive client of the Squid benchmark (bench/servers/run.sh).
 *
 * Fetches http://127.0.0.1:ORIGIN/obj/FIRST .. obj/(FIRST+COUNT-1) through the proxy at
 * 127.0.0.1:PROXY, each URL once, over CONNS persistent connections (one thread each; thread t
 * takes every CONNS-th URL). Each response's status, Content-Length and X-Cache header are read;
 * the body is read and dropped.
 *
 * Bounded: gives up after --timeout seconds (whatever has been fetched is reported, with
 * "timeout": true), and after a connection fails 10 times in a row.
 *
 * usage: http_load --proxy P --origin O --first F --count N [--conns C] [--timeout S]
 * Prints one JSON line: {"requests":..,"ok":..,"hits":..,"misses":..,"errors":..,"seconds":..}
 * Exit status 0 when every request got a 200, 1 otherwise.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int g_proxy, g_origin, g_conns = 4;
static unsigned long g_first, g_count;
static double g_deadline;
static atomic_ulong g_ok, g_hits, g_misses, g_errors;
static atomic_int g_timed_out;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int connect_proxy(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g_proxy)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  struct timeval tv = {.tv_sec = 10};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv); /* no read waits forever */
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
    close(fd);
    return -1;
  }
  return fd;
}

typedef struct {
  int fd;
  char buf[16384];
  size_t have;
} conn_t;

/* Reads until the buffer holds a whole response head; returns its length or -1. */
static long read_head(conn_t *c) {
  for (;;) {
    c->buf[c->have] = 0;
    char *e = strstr(c->buf, "\r\n\r\n");
    if (e) return (long)(e + 4 - c->buf);
    if (c->have >= sizeof c->buf - 1) return -1;
    ssize_t r = recv(c->fd, c->buf + c->have, sizeof c->buf - 1 - c->have, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    c->have += (size_t)r;
  }
}

/* One request on the connection. Returns 0 (done, counted), -1 (connection broken). */
static int fetch(conn_t *c, unsigned long n) {
  char req[256];
  int len = snprintf(req, sizeof req,
                     "GET http://127.0.0.1:%d/obj/%lu HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                     "Accept: */*\r\n\r\n",
                     g_origin, n, g_origin);
  if (send(c->fd, req, (size_t)len, MSG_NOSIGNAL) != len) return -1;
  long h = read_head(c);
  if (h < 0) return -1;
  char save = c->buf[h];
  c->buf[h] = 0;
  int status = 0;
  sscanf(c->buf, "HTTP/1.%*d %d", &status);
  char *cl = strcasestr(c->buf, "\r\nContent-Length:");
  char *xc = strcasestr(c->buf, "\r\nX-Cache:");
  int closing = strcasestr(c->buf, "\r\nConnection: close") != NULL;
  if (!cl) return -1; /* the benchmark's responses always carry a length */
  size_t body = strtoul(cl + 17, NULL, 10);
  if (xc) {
    xc += 10;
    while (*xc == ' ') xc++;
    if (!strncmp(xc, "HIT", 3))
      atomic_fetch_add(&g_hits, 1);
    else if (!strncmp(xc, "MISS", 4))
      atomic_fetch_add(&g_misses, 1);
  }
  c->buf[h] = save;
  /* drop the head and the body, keeping whatever follows (nothing: one request at a time) */
  size_t avail = c->have - (size_t)h;
  if (avail >= body) {
    memmove(c->buf, c->buf + h + body, avail - body);
    c->have = avail - body;
  } else {
    size_t left = body - avail;
    c->have = 0;
    while (left > 0) {
      ssize_t r = recv(c->fd, c->buf, left < sizeof c->buf ? left : sizeof c->buf, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return -1;
      left -= (size_t)r;
    }
  }
  if (status == 200)
    atomic_fetch_add(&g_ok, 1);
  else
    atomic_fetch_add(&g_errors, 1);
  return closing ? -1 : 0;
}

static void *worker(void *arg) {
  long t = (long)arg;
  conn_t *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->fd = -1;
  int fails = 0;
  for (unsigned long i = (unsigned long)t; i < g_count;) {
    if (now_s() > g_deadline) {
      atomic_store(&g_timed_out, 1);
      break;
    }
    if (c->fd < 0) {
      c->fd = connect_proxy();
      c->have = 0;
      if (c->fd < 0) {
        if (++fails >= 10) break;
        usleep(100000);
        continue;
      }
    }
    if (fetch(c, g_first + i) == 0) {
      fails = 0;
      i += (unsigned long)g_conns;
    } else {
      /* connection closed or broken: the request is retried on a fresh connection */
      close(c->fd);
      c->fd = -1;
      if (++fails >= 10) {
        atomic_fetch_add(&g_errors, 1);
        break;
      }
    }
  }
  if (c->fd >= 0) close(c->fd);
  free(c);
  return NULL;
}

int main(int argc, char **argv) {
  double timeout = 300;
  for (int i = 1; i + 1 < argc; i += 2) {
    const char *k = argv[i], *v = argv[i + 1];
    if (!strcmp(k, "--proxy"))
      g_proxy = atoi(v);
    else if (!strcmp(k, "--origin"))
      g_origin = atoi(v);
    else if (!strcmp(k, "--first"))
      g_first = strtoul(v, NULL, 10);
    else if (!strcmp(k, "--count"))
      g_count = strtoul(v, NULL, 10);
    else if (!strcmp(k, "--conns"))
      g_conns = atoi(v);
    else if (!strcmp(k, "--timeout"))
      timeout = atof(v);
    else {
      fprintf(stderr, "http_load: unknown option %s\n", k);
      return 2;
    }
  }
  if (argc % 2 == 0 || g_proxy <= 0 || g_origin <= 0 || g_count == 0 || g_conns <= 0 ||
      g_conns > 256 || timeout <= 0) {
    fprintf(stderr,
            "usage: %s --proxy P --origin O --first F --count N [--conns 1..256] [--timeout S]\n",
            argv[0]);
    return 2;
  }
  double t0 = now_s();
  g_deadline = t0 + timeout;
  pthread_t th[256];
  int started = 0;
  for (long t = 0; t < g_conns; t++)
    if (pthread_create(&th[t], NULL, worker, (void *)t) == 0) started++;
  for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
  double secs = now_s() - t0;
  unsigned long ok = atomic_load(&g_ok), err = atomic_load(&g_errors);
  printf("{\"requests\": %lu, \"ok\": %lu, \"hits\": %lu, \"misses\": %lu, \"errors\": %lu, "
         "\"seconds\": %.3f, \"timeout\": %s}\n",
         g_count, ok, atomic_load(&g_hits), atomic_load(&g_misses), err, secs,
         atomic_load(&g_timed_out) ? "true" : "false");
  return (ok == g_count && err == 0 && started == g_conns) ? 0 : 1;
}
