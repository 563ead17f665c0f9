/* A server-like program that gives each record type its own named pool, as a proxy cache's
 * memory pools do per type: cache entries, their key strings, request records and connection
 * records. It fills a cache, serves requests over short-lived connections, evicts the oldest
 * entries, then prints the per-pool report and, for each pool, the bytes it reserves per live
 * object against the object's own size.
 *   Build: cc record_pools.c $(pkg-config --cflags --libs mtpool)
 *   Run:   ./record_pools [entries]          (default 100000) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mtpool/mtpool.h>

struct cache_entry { /* 72 bytes: an exact size class */
  struct cache_entry *lru_prev, *lru_next;
  char *key;
  uint64_t hash;
  uint64_t expires, last_used;
  uint32_t size, refcount;
  uint32_t flags, status;
  uint64_t swap_file;
};

struct request { /* 112 bytes */
  struct cache_entry *entry;
  char method[8];
  char host[64];
  uint64_t started, bytes;
  uint32_t status, flags;
  struct connection *conn;
};

struct connection { /* 48 bytes */
  int fd, state;
  uint64_t opened, requests;
  struct request *current;
  void *read_buf, *write_buf;
};

static mtp_pool_t *pool_named(const char *name) {
  mtp_options_t opt;
  mtp_options_init(&opt);
  opt.name = name;
  mtp_pool_t *p = mtp_pool_create(&opt);
  if (p == NULL) {
    fprintf(stderr, "cannot create pool %s\n", name);
    exit(1);
  }
  return p;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next_random(void) { /* xorshift64: deterministic */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* One line per pool: live objects, their size, and the bytes the pool holds per object. */
static void per_object(mtp_pool_t *pool, double object_size) {
  mtp_stats_t st;
  mtp_pool_stats(pool, &st);
  printf("%-14s %10zu objects of %6.1f B: %6.1f B in use and %6.1f B reserved per object\n",
         mtp_pool_name(pool), st.blocks_in_use, object_size,
         st.blocks_in_use ? (double)st.bytes_in_use / (double)st.blocks_in_use : 0.0,
         st.blocks_in_use ? (double)st.bytes_reserved / (double)st.blocks_in_use : 0.0);
}

int main(int argc, char **argv) {
  size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : 100000;
  if (n < 10) n = 10;
  mtp_pool_t *entries = pool_named("cache_entry");
  mtp_pool_t *keys = pool_named("cache_key");
  mtp_pool_t *requests = pool_named("request");
  mtp_pool_t *conns = pool_named("connection");

  struct cache_entry *lru_head = NULL, *lru_tail = NULL; /* head: newest */
  size_t live = 0, key_bytes = 0; /* key_bytes: requested bytes of the live keys */
  for (size_t i = 0; i < n; i++) {
    /* a connection carries a few requests, each of which fills one cache entry */
    struct connection *c = mtp_pool_calloc(conns, 1, sizeof *c);
    struct request *r = mtp_pool_calloc(requests, 1, sizeof *r);
    struct cache_entry *e = mtp_pool_calloc(entries, 1, sizeof *e);
    char key[96];
    int klen = snprintf(key, sizeof key, "http://origin%u.example/objects/%zu",
                        (unsigned)(next_random() % 64), i);
    e->key = mtp_pool_alloc(keys, (size_t)klen + 1);
    if (c == NULL || r == NULL || e == NULL || e->key == NULL) {
      fprintf(stderr, "out of memory\n");
      return 1;
    }
    memcpy(e->key, key, (size_t)klen + 1);
    key_bytes += (size_t)klen + 1;
    e->hash = i * 0x9E3779B97F4A7C15ull;
    e->size = 200 + (uint32_t)(next_random() % 300);
    r->entry = e;
    r->conn = c;
    c->current = r;
    memcpy(r->method, "GET", 4);
    /* insert at the LRU head */
    e->lru_next = lru_head;
    if (lru_head) lru_head->lru_prev = e;
    lru_head = e;
    if (lru_tail == NULL) lru_tail = e;
    live++;
    /* the request and its connection are done */
    mtp_free_sized(r, sizeof *r);
    mtp_free_sized(c, sizeof *c);
    /* every 8th insertion evicts the oldest entry: the cache keeps about 7/8 of what it saw */
    if (i % 8 == 7) {
      struct cache_entry *old = lru_tail;
      lru_tail = old->lru_prev;
      lru_tail->lru_next = NULL;
      key_bytes -= strlen(old->key) + 1;
      mtp_free_sized(old->key, strlen(old->key) + 1);
      mtp_free_sized(old, sizeof *old);
      live--;
    }
  }
  /* a few requests in flight when the report is taken */
  struct request *inflight[64];
  for (int i = 0; i < 64; i++) inflight[i] = mtp_pool_calloc(requests, 1, sizeof(struct request));

  printf("%zu cache entries live\n\n", live);
  mtp_print_stats(stdout);
  printf("\n");
  per_object(entries, (double)sizeof(struct cache_entry));
  per_object(keys, (double)key_bytes / (double)live); /* the average key */
  per_object(requests, (double)sizeof(struct request));

  /* The whole cache is dropped at once: no walk over the LRU list. */
  for (int i = 0; i < 64; i++) mtp_free(inflight[i]);
  mtp_pool_destroy(entries);
  mtp_pool_destroy(keys);
  mtp_pool_destroy(requests);
  mtp_pool_destroy(conns);
  return 0;
}
