/*
 * No leak on long-running paths: pools created and destroyed again and again (plain and checked,
 * with blocks in use at destroy, large blocks, a second thread using them), and slabs emptied and
 * trimmed again and again in one pool. The process's mapped memory (VmSize) and resident memory
 * (VmRSS) after the warm-up may grow by no more than a small allowance, however many cycles run.
 */
#define _GNU_SOURCE
#include <pthread.h>

#include <mtpool/mtpool.h>

#include "testhelper.h"

static void *use_pool(void *arg) {
  mtp_pool_t *p = arg;
  for (int i = 0; i < 20; i++) mtp_free(mtp_pool_alloc(p, (size_t)i * 300));
  return NULL;
}

static void pool_cycle(int r, int check) {
  mtp_options_t o;
  mtp_options_init(&o);
  o.check = check;
  mtp_pool_t *p = mtp_pool_create(&o);
  REQUIRE(p, "pool create");
  void *b[60];
  for (int i = 0; i < 60; i++) {
    size_t n = (size_t)(i * 97 + r) % 6000;
    b[i] = mtp_pool_alloc(p, n);
    REQUIRE(b[i], "alloc");
    memset(b[i], 1, n);
  }
  void *l = mtp_pool_alloc(p, 200000);
  for (int i = 0; i < 30; i++) mtp_free(b[i]);
  if (r % 8 == 0) {
    pthread_t t;
    pthread_create(&t, NULL, use_pool, p);
    pthread_join(t, NULL);
  }
  mtp_free(l);
  mtp_pool_destroy(p); /* 30 blocks still in use */
}

static void trim_cycle(mtp_pool_t *p, int r) {
  void *b[200];
  for (int i = 0; i < 200; i++) b[i] = mtp_pool_alloc(p, (size_t)(16 + (i + r) % 40 * 64));
  for (int i = 0; i < 200; i++) mtp_free(b[i]);
  mtp_thread_flush();
  mtp_pool_trim(p);
}

static int phase(const char *name, int cycles, void (*fn)(int, void *), void *arg) {
  for (int r = 0; r < cycles / 10; r++) fn(r, arg); /* warm-up */
  long vm0 = th_status_kb("VmSize"), rss0 = th_status_kb("VmRSS");
  double t0 = th_now();
  for (int r = 0; r < cycles; r++) fn(r, arg);
  long vm1 = th_status_kb("VmSize"), rss1 = th_status_kb("VmRSS");
  printf("%-22s %6d cycles in %.1f s: VmSize %+ld kB, VmRSS %+ld kB\n", name, cycles,
         th_now() - t0, vm1 - vm0, rss1 - rss0);
  /* a leak is a steady growth: over 1 MiB in all and over 256 B per cycle. Under AddressSanitizer
   * VmRSS also counts the shadow pages of every new address range mtpool maps, so only VmSize.
   * Under ThreadSanitizer neither: its runtime's own records of the addresses threads synchronise
   * on (one per atomic or lock address, each with a clock as wide as the threads seen) grow its
   * VmSize by about 1 KB a cycle here while mtpool's mappings stay the same (strace); the cycles
   * still run, for the races. */
  long allow = 1024;
  double per_vm = (vm1 - vm0) * 1024.0 / cycles, per_rss = (rss1 - rss0) * 1024.0 / cycles;
  int grows = (!TH_TSAN && vm1 - vm0 > allow && per_vm > 256) ||
              (!TH_ASAN && !TH_TSAN && rss1 - rss0 > allow && per_rss > 256);
  if (grows) {
    fprintf(stderr, "FAIL %s: memory grows by %.0f B per cycle (VmSize) / %.0f B (VmRSS)\n", name,
            per_vm, per_rss);
    return 1;
  }
  return 0;
}

static void plain_pools(int r, void *arg) {
  (void)arg;
  pool_cycle(r, 0);
}
static void checked_pools(int r, void *arg) {
  (void)arg;
  pool_cycle(r, 1);
}
static void trims(int r, void *arg) { trim_cycle(arg, r); }

/* A pool whose emptied slabs go straight back to its pages (no delay, no thread cache). */
static mtp_pool_t *reuse_pool(int check) {
  mtp_options_t o;
  mtp_options_init(&o);
  o.check = check;
  o.purge_delay_ms = 0;
  o.thread_cache_bytes = 0; /* checked pools have no thread cache anyway */
  mtp_pool_t *p = mtp_pool_create(&o);
  REQUIRE(p, "pool create");
  return p;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int cycles = TH_TSAN ? 400 : TH_ASAN ? 3000 : 4000; /* 4000 x 262 B: past the 1 MiB allowance */
  int failed = 0;
  failed += phase("plain pool churn", cycles, plain_pools, NULL);
  failed += phase("checked pool churn", cycles, checked_pools, NULL);
  mtp_pool_t *p = reuse_pool(1);
  failed += phase("checked slab reuse", cycles, trims, p);
  mtp_pool_destroy(p);
  p = reuse_pool(0);
  failed += phase("plain slab reuse", cycles, trims, p);
  mtp_pool_destroy(p);
  return failed ? 1 : 0;
}
