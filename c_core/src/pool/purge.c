/* Purging: giving the memory of free pages back to the OS once they have been free for the pool's
 * purge delay. One pass over a pool (purge_pool) releases the due empty slabs of the heaps'
 * caches and of the pool to the region layer, then purges the region layer's due free pages and
 * the large blocks' due cached ranges. The passes run on the purge thread, started at the first
 * wake that finds enough waiting; before that, on the thread that wakes (wake_inline); and at
 * once on trim. Layer: pool. */
#include "pool.h"

#include <signal.h>
#include <time.h>

#include "base/os.h"

static mtpi_member_t *member_of(mtpi_node_t *n) { return MTP_CONTAINER(n, mtpi_member_t, link); }

/* ---- one pass ---- */

/* Pool lock held: release the slabs and medium blocks cached by m at or before older_than_ms.
 * Each goes with its own free time, not the pass's, so that a huge range it is part of is not
 * held one delay more. Returns the bytes. */
static size_t cache_drain_locked(mtpi_pool_t *p, mtpi_member_t *m, uint64_t older_than_ms,
                                 uint64_t now_ms) {
  size_t n = 0;
  mtp__cache_lock(m);
  mtpi_node_t *next;
  for (mtpi_node_t *it = m->cache; it != NULL; it = next) {
    next = it->next;
    mtpi_desc_t *s = mtp__desc_of_node(it);
    if (s->free_time_ms > older_than_ms) continue;
    mtp__list_remove(&m->cache, it);
    size_t bytes = (size_t)s->pages << MTP_PAGE_SHIFT;
    m->cache_bytes -= bytes;
    n += bytes;
    s->list = MTP_LIST_NONE;
    mtp__region_free_run(&p->rs, s, s->free_time_ms < now_ms ? s->free_time_ms : now_ms);
  }
  for (unsigned i = 0; i < m->pk_n;) { /* packed blocks */
    if (m->pk_time[i] > older_than_ms) {
      i++;
      continue;
    }
    mtp__packed_release_locked(p, m->pk[i], m->pk_time[i]);
    n += (size_t)m->pk_units[i] << MTP_UNIT_SHIFT;
    mtp__cache_pk_remove(m, i); /* the last entry comes to i: looked at next */
  }
  mtp__cache_unlock(m);
  if (n) mtp__pool_note_free_pages(p);
  return n;
}

/* Bytes waiting in m's cache. */
static size_t cache_bytes(mtpi_member_t *m) {
  mtp__cache_lock(m);
  size_t n = m->cache_bytes + m->pk_bytes;
  mtp__cache_unlock(m);
  return n;
}

/* Pool lock held, dropped across the OS calls of the packed and region purges (the registry
 * lock, which every caller holds, keeps the pool alive meanwhile): purge what is due at now (all if
 * force); collapse: dense ranges into huge pages too (the purge thread's passes only).
 * *pending (if not NULL): set if something is left that a later pass will find due. */
static size_t purge_pool(mtpi_pool_t *p, uint64_t now, bool force, bool collapse, bool *pending) {
  size_t n = 0;
  uint64_t cutoff = force ? UINT64_MAX
                    : (p->purge_delay_ms < 0 || (uint64_t)p->purge_delay_ms > now)
                        ? 0
                        : now - (uint64_t)p->purge_delay_ms;
  if (force || p->purge_delay_ms >= 0)
    for (mtpi_node_t *it = p->members; it; it = it->next)
      cache_drain_locked(p, member_of(it), cutoff, now);
  mtp__pool_release_empty_locked(p, cutoff);
  if (mtp__load_relaxed(&p->packed_deferred) != 0) mtp__packed_drain_locked(p);
  bool packed_left = false; /* before the regions: an empty span goes back to its region */
  n += mtp__packed_purge(p, now, cutoff, force, &packed_left);
  n += mtp__region_purge(&p->rs, now, p->purge_delay_ms, force, collapse, &p->lock);
  /* cached large ranges, under the large lock alone: counted in bytes_returned, and stamped
   * early, by large_ranges.c */
  bool large_left = false;
  pthread_mutex_unlock(&p->lock);
  n += mtp__large_purge(p, cutoff, collapse, &large_left);
  pthread_mutex_lock(&p->lock);
  if (pending) {
    bool left = large_left || packed_left || p->empty_bytes != 0 ||
                mtp__region_dirty_left(&p->rs) || mtp__region_looks_left(&p->rs);
    for (mtpi_node_t *it = p->members; it && !left; it = it->next) left = cache_bytes(member_of(it)) != 0;
    *pending = *pending || (left && p->purge_delay_ms >= 0);
  }
  MTP_VALIDATE(mtp__region_validate(&p->rs));
  return n;
}

/* Pool lock held: bytes that purging everything due or not would return now. */
static size_t waiting_locked(mtpi_pool_t *p) {
  size_t held = mtp__region_dirty_bytes(&p->rs) + p->empty_bytes;
  for (mtpi_node_t *m = p->members; m; m = m->next) held += cache_bytes(member_of(m));
  return held;
}

/* ---- trim ---- */

size_t mtp__pool_trim(mtpi_pool_t *p) {
  pthread_mutex_lock(&mtp__registry_lock);
  mtp__pool_lock(p);
  size_t n = purge_pool(p, mtp__os_now_ms(), true, false, NULL);
  mtp__pool_unlock_quiet(p); /* everything was purged */
  pthread_mutex_unlock(&mtp__registry_lock);
  return n;
}

size_t mtp__pool_trim_all(void) {
  size_t n = 0;
  pthread_mutex_lock(&mtp__registry_lock); /* no pool is destroyed meanwhile */
  uint64_t now = mtp__os_now_ms();
  for (mtpi_node_t *it = mtp__pools; it; it = it->next) {
    mtpi_pool_t *p = mtp__pool_from_reg(it);
    mtp__pool_lock(p);
    n += purge_pool(p, now, true, false, NULL);
    mtp__pool_unlock_quiet(p); /* everything was purged */
  }
  pthread_mutex_unlock(&mtp__registry_lock);
  return n;
}

/* ---- the purge thread ---- */

pthread_mutex_t mtp__purger_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t purger_cond = PTHREAD_COND_INITIALIZER;
static bool purger_started, purger_work, purger_joinable; /* purger_lock */
/* purger_lock. stop: for good (unload, exit); halt: until the thread is joined (fork). */
static bool purger_stop, purger_halt;
/* Held across the purge thread's creation, and taken first by the fork handler: a fork never
 * happens while pthread_create runs (a sanitizer's allocator lock held by that thread would stay
 * locked in the child for ever). A nested allocation inside pthread_create does not come back
 * here: purger_idle is already 0, so its wake returns at once. */
pthread_mutex_t mtp__purger_create_lock = PTHREAD_MUTEX_INITIALIZER;
static bool purger_quit(void) { return purger_stop || purger_halt; }
static pthread_t purger_tid; /* purger_lock */
/* Whether wakes start (and signal) the purge thread. 0 at start: a process that holds little to
 * purge never gets one (a thread costs a clone, a stack and a join at exit); the waking threads
 * purge what is due themselves (wake_inline). Set once for good when what waits to be purged
 * reaches PURGER_START_BYTES, or a second heap joins a pool. Every increase of what waits is
 * followed by a wake from the thread that made it, once it holds no lock, and wake_inline
 * measures after taking the locks those increases were made under: so no more than
 * PURGER_START_BYTES ever waits past the delay without a thread. Relaxed: the flag publishes
 * nothing; a waker that reads a stale 0 purges and measures under the locks as if no thread ran,
 * which keeps that bound. */
static mtpi_atomic_int purger_needed;
#define PURGER_START_BYTES ((size_t)1 << 20)
/* 1 in a forked child until a thread other than the forking one allocates: such a child starts no
 * purge thread (its wakes purge inline). A child of a process with threads may hold, inherited
 * locked, a lock of any library that thread creation takes (a sanitizer's allocator does: its
 * first thread waited on it for ever, and the child's exit on the thread). Relaxed: a heuristic
 * flag; the forking thread sets it alone, and a new thread's first allocation clears it. */
static mtpi_atomic_int child_quiet;
static pthread_t child_forker; /* the thread that forked: written with child_quiet set */
void mtp__purger_eager(void) {
  if (!mtp__int_load_relaxed(&child_quiet)) mtp__int_store_relaxed(&purger_needed, 1);
}
void mtp__purger_thread_started(void) {
  if (MTP_UNLIKELY(mtp__int_load_relaxed(&child_quiet)) && !pthread_equal(pthread_self(), child_forker))
    mtp__int_store_relaxed(&child_quiet, 0);
}
/* 1: nothing scheduled, a wake is needed. seq_cst: the purger's store of 1 before it scans and
 * a freer's CAS 1 -> 0 after it freed must not both miss each other's effects (a store-load
 * pattern across two variables: pages and this flag). A waker reads it relaxed first and skips
 * the CAS on 0 (mtp__purger_wake says why that read misses nothing). */
static mtpi_atomic_int purger_idle = 1;

/* Sleep ms on the purger's condition (purger_lock held); a stop request cuts it short. */
static void purger_sleep(long ms) {
  struct timespec ts;
  if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return;
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  while (!purger_quit() && pthread_cond_timedwait(&purger_cond, &mtp__purger_lock, &ts) == 0) {
  }
}

/* The shortest purge delay among the pools that purge after one (1 s if none is shorter). */
static long shortest_delay(void) {
  long delay = 1000;
  pthread_mutex_lock(&mtp__registry_lock);
  for (mtpi_node_t *it = mtp__pools; it; it = it->next) {
    mtpi_pool_t *p = mtp__pool_from_reg(it);
    if (p->purge_delay_ms > 0 && p->purge_delay_ms < delay) delay = p->purge_delay_ms;
  }
  pthread_mutex_unlock(&mtp__registry_lock);
  return delay;
}

/* One pass over every pool; returns whether something is left to purge later, and *purged the
 * bytes this pass returned. */
static bool purge_all_pass(size_t *purged) {
  bool pending = false;
  size_t n = 0;
  pthread_mutex_lock(&mtp__registry_lock);
  uint64_t now = mtp__os_now_ms();
  for (mtpi_node_t *it = mtp__pools; it; it = it->next) {
    mtpi_pool_t *p = mtp__pool_from_reg(it);
    mtp__pool_lock(p);
    n += purge_pool(p, now, false, true, &pending);
    mtp__pool_unlock_quiet(p); /* this thread is the one a wake would start */
  }
  pthread_mutex_unlock(&mtp__registry_lock);
  *purged = n;
  return pending;
}

static void *purger_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&mtp__purger_lock);
  while (!purger_quit()) {
    if (!purger_work) {
      pthread_cond_wait(&purger_cond, &mtp__purger_lock);
      continue;
    }
    purger_work = false;
    bool pending = true;
    unsigned idle_passes = 0; /* passes in a row that returned nothing */
    while (pending && !purger_quit()) {
      /* Sleep half a tenth of the shortest delay among pools with work (medium and large blocks'
       * pages are due then: base.h), then purge what is due. While passes return nothing (what
       * waits is reused before it is due, or not due yet), the sleep doubles, up to half the
       * delay: a program that keeps a cache busy is not woken 70 times a second for it, and
       * nothing waits more than half a delay past its due time. */
      pthread_mutex_unlock(&mtp__purger_lock);
      long delay = shortest_delay();
      pthread_mutex_lock(&mtp__purger_lock);
      long nap = delay / MTP_RUN_DELAY_DIV / 2 + 1;
      for (unsigned k = 0; k < idle_passes && nap < delay / 2; k++) nap *= 2;
      purger_sleep(nap);
      if (purger_quit()) break;
      pthread_mutex_unlock(&mtp__purger_lock);
      mtp__int_store_seq_cst(&purger_idle, 1);
      size_t purged;
      pending = purge_all_pass(&purged);
      idle_passes = purged != 0 ? 0 : idle_passes < 8 ? idle_passes + 1 : idle_passes;
      if (pending) mtp__int_store_seq_cst(&purger_idle, 0);
      pthread_mutex_lock(&mtp__purger_lock);
    }
  }
  pthread_mutex_unlock(&mtp__purger_lock);
  return NULL;
}

/* No purge thread yet: purge what is due here and now, then measure what is left to purge in
 * pools that purge after a delay. Returns whether a thread is needed (it is from now on). Takes
 * the registry lock and each pool's lock only if free (a wake, on a thread that frees, waits for
 * no lock): a lock held means a thread. */
static bool wake_inline(void) {
  if (pthread_mutex_trylock(&mtp__registry_lock) != 0) {
    mtp__purger_eager();
    return !mtp__int_load_relaxed(&child_quiet);
  }
  uint64_t now = mtp__os_now_ms();
  size_t held = 0;
  bool looks = false; /* ranges to look at for huge pages: the thread's work alone (a copy) */
  for (mtpi_node_t *it = mtp__pools; it; it = it->next) {
    mtpi_pool_t *p = mtp__pool_from_reg(it);
    if (p->purge_delay_ms <= 0) continue; /* at once, or never: nothing waits for a thread */
    if (!mtp__pool_trylock(p)) { /* a wake waits for no lock: the thread will purge this one */
      looks = true;
      continue;
    }
    purge_pool(p, now, false, false, NULL);
    held += waiting_locked(p);
    looks = looks || mtp__region_looks_left(&p->rs);
    mtp__pool_unlock_quiet(p); /* this is the wake */
    pthread_mutex_lock(&mtp__large_lock);
    held += p->large_cached_bytes;
    pthread_mutex_unlock(&mtp__large_lock);
  }
  pthread_mutex_unlock(&mtp__registry_lock);
  if (held < PURGER_START_BYTES && !looks) return false;
  mtp__purger_eager();
  return !mtp__int_load_relaxed(&child_quiet);
}

/* Create the purge thread with every signal blocked (it inherits the mask): a process-directed
 * signal (SIGCHLD, SIGINT, a timer) must go to the program's own threads, which may wait for it
 * with sigwait or sigsuspend, never to ours. */
static bool purger_create(pthread_t *tid) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  bool ok = pthread_create(tid, NULL, purger_main, NULL) == 0;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return ok;
}

void mtp__purger_wake(void) {
  if (!mtp__int_load_relaxed(&purger_needed) && !wake_inline()) return;
  /* Already scheduled: most wakes of a busy process. A plain load first, so that threads freeing
   * at once do not take the line from each other with a failing CAS. Relaxed is enough: what the
   * waker just made to purge was made under a lock the purger's scan takes (see purger_needed);
   * if that scan ran first, its store of 1 happens before this load (through that lock), so a 0
   * read here is a later wake's, or the purger's own when it has more to do (it scans again). */
  if (mtp__int_load_relaxed(&purger_idle) == 0) return;
  int idle = 1;
  if (!mtp__int_cas_strong_seq_cst(&purger_idle, &idle, 0)) return; /* already scheduled */
  /* No pool, registry or purger lock is held here: pthread_create may allocate (and so re-enter
   * mtpool, whose wake then returns above). */
  pthread_mutex_lock(&mtp__purger_create_lock);
  pthread_mutex_lock(&mtp__purger_lock);
  purger_work = true;
  bool start = !purger_started && !purger_stop;
  if (start) purger_started = true; /* this thread creates it */
  pthread_cond_signal(&purger_cond);
  pthread_mutex_unlock(&mtp__purger_lock);
  bool ok = true;
  if (start) {
    pthread_t tid;
    ok = purger_create(&tid);
    pthread_mutex_lock(&mtp__purger_lock);
    if (ok) {
      purger_tid = tid;
      purger_joinable = true;
    } else {
      purger_started = false; /* try again at the next wake */
    }
    pthread_mutex_unlock(&mtp__purger_lock);
  }
  pthread_mutex_unlock(&mtp__purger_create_lock);
  if (!ok) mtp__int_store_seq_cst(&purger_idle, 1);
}

void mtp__purger_look(void) {
  mtp__purger_eager();
  mtp__purger_wake();
}

/* Stop the purge thread and wait for it (it finishes the pass it is in); returns whether one ran.
 * forever: never start one again (unload, exit); else the next wake starts a new one. */
static bool purger_join(bool forever) {
  pthread_mutex_lock(&mtp__purger_lock);
  if (forever) purger_stop = true;
  purger_halt = true;
  bool join = purger_joinable;
  purger_joinable = false;
  pthread_t tid = purger_tid;
  pthread_cond_broadcast(&purger_cond);
  pthread_mutex_unlock(&mtp__purger_lock);
  if (join) (void)pthread_join(tid, NULL);
  pthread_mutex_lock(&mtp__purger_lock);
  purger_halt = false;
  purger_started = false;
  pthread_mutex_unlock(&mtp__purger_lock);
  return join;
}

/* At unload (dlclose of a library that carries mtpool) and at exit: the purge thread must not
 * outlive the code it runs. */
__attribute__((destructor)) static void purger_shutdown(void) { (void)purger_join(true); }

bool mtp__purger_stop_for_fork(void) { return purger_join(false); }

void mtp__purger_reset_child(void) {
  /* The purger was joined before the fork (started and joinable are false): nobody waits on its
   * condition. The child starts its own once a thread other than this one allocates. */
  purger_work = false;
  mtp__int_store_seq_cst(&purger_idle, 1);
  mtp__int_store_relaxed(&purger_needed, 0);
  child_forker = pthread_self();
  mtp__int_store_relaxed(&child_quiet, 1);
}

void mtp__purger_reschedule(void) {
  mtp__int_store_seq_cst(&purger_idle, 1);
  mtp__purger_wake();
}
