/* http_origin: the origin server of the Squid benchmark (bench/servers/run.sh).
 *
 * Listens on 127.0.0.1:PORT only and answers GET /obj/N with a small cacheable object: a body of
 * 200..499 bytes (the length and content depend on N only, so that a refetch is byte-identical),
 * Content-Length, Cache-Control: public, max-age=86400, Date and Last-Modified. Connections are
 * persistent (HTTP/1.1 keep-alive), one thread per connection. Any other request gets a 404.
 *
 * Bounded: the process exits after --timeout seconds (default 600) even if nobody stops it, and
 * on SIGTERM/SIGINT. It never connects anywhere.
 *
 * usage: http_origin --port P [--timeout S]
 * Prints "ready" on stdout once it listens.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define REQ_MAX 8192

static char g_date[64];

static void die(const char *what) {
  perror(what);
  exit(1);
}

static int write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

/* Body of object n: deterministic length and bytes. */
static size_t body_of(unsigned long n, char *buf) {
  size_t len = 200 + (size_t)((n * 2654435761UL) % 300);
  unsigned long x = n * 0x9E3779B97F4A7C15UL + 1;
  for (size_t i = 0; i < len; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    buf[i] = (char)('a' + (x % 26));
  }
  buf[len - 1] = '\n';
  return len;
}

/* Serves one request found in req (NUL-terminated head). Returns 0 to keep the connection. */
static int serve(int fd, const char *req) {
  unsigned long n;
  char body[512], head[512];
  int close_after = strcasestr(req, "\r\nConnection: close") != NULL;
  if (sscanf(req, "GET /obj/%lu ", &n) == 1) {
    size_t len = body_of(n, body);
    int h = snprintf(head, sizeof head,
                     "HTTP/1.1 200 OK\r\nDate: %s\r\nLast-Modified: %s\r\n"
                     "Cache-Control: public, max-age=86400\r\nContent-Type: text/plain\r\n"
                     "Content-Length: %zu\r\n%s\r\n",
                     g_date, g_date, len, close_after ? "Connection: close\r\n" : "");
    if (write_all(fd, head, (size_t)h) || write_all(fd, body, len)) return -1;
  } else {
    static const char nf[] =
        "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nCache-Control: no-store\r\n\r\n";
    if (write_all(fd, nf, sizeof nf - 1)) return -1;
  }
  return close_after ? -1 : 0;
}

static void *conn_main(void *arg) {
  int fd = (int)(long)arg;
  char buf[REQ_MAX + 1];
  size_t have = 0;
  for (;;) {
    ssize_t r = recv(fd, buf + have, REQ_MAX - have, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    have += (size_t)r;
    buf[have] = 0;
    char *end;
    int stop = 0;
    /* every complete request head in the buffer (GETs carry no body) */
    while ((end = strstr(buf, "\r\n\r\n")) != NULL) {
      end[2] = 0;
      if (serve(fd, buf)) {
        stop = 1;
        break;
      }
      size_t used = (size_t)(end + 4 - buf);
      memmove(buf, buf + used, have - used + 1);
      have -= used;
    }
    if (stop || have == REQ_MAX) break; /* a head larger than REQ_MAX: drop the connection */
  }
  close(fd);
  return NULL;
}

static void on_alarm(int sig) {
  (void)sig;
  static const char m[] = "http_origin: --timeout reached, exiting\n";
  if (write(2, m, sizeof m - 1)) {
  }
  _exit(3);
}

int main(int argc, char **argv) {
  int port = 0, timeout = 600;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--port") && i + 1 < argc)
      port = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--timeout") && i + 1 < argc)
      timeout = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s --port P [--timeout S]\n", argv[0]);
      return 2;
    }
  }
  if (port <= 0 || port > 65535 || timeout <= 0) {
    fprintf(stderr, "http_origin: need a port in 1..65535 and a positive timeout\n");
    return 2;
  }
  signal(SIGALRM, on_alarm);
  alarm((unsigned)timeout);
  signal(SIGPIPE, SIG_IGN);
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(g_date, sizeof g_date, "%a, %d %b %Y %H:%M:%S GMT", &tm);

  int ls = socket(AF_INET, SOCK_STREAM, 0);
  if (ls < 0) die("socket");
  int one = 1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(ls, (struct sockaddr *)&a, sizeof a)) die("bind 127.0.0.1");
  if (listen(ls, 128)) die("listen");
  printf("ready\n");
  fflush(stdout);
  pthread_attr_t at;
  pthread_attr_init(&at);
  pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&at, 64 * 1024);
  for (;;) {
    int fd = accept(ls, NULL, NULL);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE) continue;
      die("accept");
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    pthread_t t;
    if (pthread_create(&t, &at, conn_main, (void *)(long)fd)) close(fd);
  }
}
