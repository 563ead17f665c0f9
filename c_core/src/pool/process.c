/* What the process has once: the default pool, made at its first use, and the fork handlers that
 * hold every lock across fork() so that the child finds them consistent. Layer: pool. */
#include "default.h"

static pthread_once_t default_once = PTHREAD_ONCE_INIT;

/* Runs inside pthread_once: nothing here may allocate with malloc (see pool.h). */
static void default_init(void) {
  mtp_options_t opt;
  mtp_options_init(&opt);
  opt.name = "default";
  mtpi_pool_t *p = mtp__pool_new(&opt, true); /* static record: cannot fail */
  /* release: pairs with mtp__default's acquire load */
  mtp__store_release(&mtp__default_pool_ptr, (uintptr_t)p);
}

mtpi_pool_t *mtp__default_pool_init(void) {
  pthread_once(&default_once, default_init);
  /* The fork handlers, outside the once: pthread_atfork may call malloc, which may be us.
   * seq_cst CAS: exactly one thread registers them (a re-entrant call from inside
   * pthread_atfork finds the flag taken and goes on). */
  static mtpi_atomic_int atfork_claimed;
  int no = 0;
  if (mtp__int_load_relaxed(&atfork_claimed) == 0 && mtp__int_cas_strong_seq_cst(&atfork_claimed, &no, 1))
    (void)pthread_atfork(mtp__fork_prepare, mtp__fork_parent, mtp__fork_child); /* ENOMEM: no
      fork handlers; a child forked while another thread held a lock may then deadlock */
  return (mtpi_pool_t *)mtp__load_acquire(&mtp__default_pool_ptr);
}

/* ---- fork ----
 * The purge thread is stopped across fork(): no thread of the parent's but the forking one exists
 * then, so the child inherits no half-held lock of it (the purger's, a sanitizer's) and no thread
 * record of it; the parent starts it again afterwards, the child at its first wake. */
static bool purger_was_running; /* written by the forking thread, under the purger's create lock */

void mtp__fork_prepare(void) {
  pthread_mutex_lock(&mtp__purger_create_lock);
  purger_was_running = mtp__purger_stop_for_fork();
  pthread_mutex_lock(&mtp__registry_lock);
  for (mtpi_node_t *it = mtp__pools; it; it = it->next) { /* shared heaps, then pool: pool.h */
    mtpi_pool_t *p = mtp__pool_from_reg(it);
    for (unsigned i = 0; i < MTP_SHARED_HEAPS; i++) pthread_mutex_lock(&p->shared[i].lock);
    mtp__pool_lock(p);
    /* and every member's cache lock, which its owner takes without the pool lock: a child that
     * only reset a lock held at the fork could inherit a cache list half changed */
    for (mtpi_node_t *m = p->members; m; m = m->next)
      mtp__cache_lock(MTP_CONTAINER(m, mtpi_member_t, link));
  }
  pthread_mutex_lock(&mtp__large_lock);
  pthread_mutex_lock(&mtp__meta_lock);
  pthread_mutex_lock(&mtp__purger_lock);
}

static void unlock_all(void) {
  pthread_mutex_unlock(&mtp__purger_lock);
  pthread_mutex_unlock(&mtp__meta_lock);
  pthread_mutex_unlock(&mtp__large_lock);
  for (mtpi_node_t *it = mtp__pools; it; it = it->next) {
    mtpi_pool_t *p = mtp__pool_from_reg(it);
    for (mtpi_node_t *m = p->members; m; m = m->next)
      mtp__cache_unlock(MTP_CONTAINER(m, mtpi_member_t, link));
    mtp__pool_unlock_quiet(p); /* a purge due before the fork is found by the next pass */
    for (unsigned i = 0; i < MTP_SHARED_HEAPS; i++) pthread_mutex_unlock(&p->shared[i].lock);
  }
  pthread_mutex_unlock(&mtp__registry_lock);
}

void mtp__fork_parent(void) {
  unlock_all();
  bool restart = purger_was_running;
  pthread_mutex_unlock(&mtp__purger_create_lock);
  if (restart) mtp__purger_reschedule(); /* it may have had pages to purge: a new one looks */
}

void mtp__fork_child(void) {
  /* Only the forking thread lives on. Heaps of the other threads keep their slabs (their blocks
   * can still be freed here, by the remote path) and their caches, which unlock_all releases. */
  mtp__purger_reset_child();
  /* No looks for huge pages the parent had pending: they would start a purge thread in a child
   * that may only exec, before it allocates anything itself. */
  for (mtpi_node_t *it = mtp__pools; it; it = it->next) {
    mtpi_pool_t *p = mtp__pool_from_reg(it);
    mtp__region_forget_looks(&p->rs);
    mtp__large_forget_looks(p);
  }
  unlock_all();
  pthread_mutex_unlock(&mtp__purger_create_lock);
}
