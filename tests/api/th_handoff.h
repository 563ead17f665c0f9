/* Two threads that free each other's blocks (for ThreadSanitizer), shared by the medium-block
 * tests: each allocates `rounds` blocks of lo .. lo + span - 1 bytes from the pool by `alloc`,
 * writes its mark in the first 64 bytes and the last, frees half of them itself (checking the
 * marks) and hands the other half to the other thread through a ring of 64 slots, which frees
 * what it finds there; th_handoff frees what is left in the rings. Include after testhelper.h. */
#ifndef MTP_TH_HANDOFF_H
#define MTP_TH_HANDOFF_H

#include <pthread.h>

#define TH_HANDOFF_RING 64

typedef struct {
  mtp_pool_t *pool;
  void *(*alloc)(mtp_pool_t *pool, size_t n);
  size_t lo, span;
  int rounds;
  uint64_t seed;
} th_handoff_t;

static th_handoff_t th_handoff_cfg;
static void *volatile th_handoff_ring[2][TH_HANDOFF_RING];

static void *th_handoff_worker(void *arg) {
  int me = (int)(intptr_t)arg, other = 1 - me;
  const th_handoff_t *c = &th_handoff_cfg;
  th_rng_t r;
  th_rng_seed(&r, (uint64_t)me, c->seed, 11);
  for (int i = 0; i < c->rounds; i++) {
    size_t n = c->lo + th_below(&r, c->span);
    unsigned char *b = c->alloc(c->pool, n);
    REQUIRE(b != NULL, "alloc");
    memset(b, me + 1, 64);
    b[n - 1] = (unsigned char)(me + 1);
    if (th_below(&r, 2)) {
      CHECK(b[63] == me + 1 && b[n - 1] == me + 1);
      mtp_free(b);
    } else {
      void *old = __atomic_exchange_n(&th_handoff_ring[other][i % TH_HANDOFF_RING], b, __ATOMIC_ACQ_REL);
      if (old) mtp_free(old);
    }
    void *mine = __atomic_exchange_n(&th_handoff_ring[me][(i * 7) % TH_HANDOFF_RING], NULL, __ATOMIC_ACQ_REL);
    if (mine) mtp_free(mine);
  }
  return NULL;
}

/* Run the two threads with cfg and free what they left in the rings. */
static inline void th_handoff(th_handoff_t cfg) {
  th_handoff_cfg = cfg;
  pthread_t t[2];
  for (intptr_t i = 0; i < 2; i++)
    REQUIRE(pthread_create(&t[i], NULL, th_handoff_worker, (void *)i) == 0, "create");
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  for (int k = 0; k < 2; k++)
    for (int i = 0; i < TH_HANDOFF_RING; i++)
      if (th_handoff_ring[k][i]) mtp_free(th_handoff_ring[k][i]);
  memset((void *)th_handoff_ring, 0, sizeof th_handoff_ring);
}

#endif
