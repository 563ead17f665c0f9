/* Pools: the registry of live pools and their ids, pool creation and destruction, trimming, the
 * purge thread that returns empty pages after the pool's delay, and the fork handlers. A pool's
 * lock guards its regions, its lists of detached slabs and its heap list; the registry lock guards
 * the pool list and the binding of heaps to pools (lock order: registry, then pool, then large).
 * Calls heap.c (abandon, cache drain), region.c, large.c. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "os.h"
#include "track.h"

pthread_mutex_t mtp__registry_lock = PTHREAD_MUTEX_INITIALIZER;
mtp_pool_internal_t *mtp__pools;
mtp_pool_internal_t *mtp__default_pool_ptr;
static mtp_pool_internal_t *pool_ids[MTP_MAX_POOLS];
static uint32_t pools_created;
static pthread_once_t default_once = PTHREAD_ONCE_INIT;

void mtp__pool_lock(mtp_pool_internal_t *p) { pthread_mutex_lock(&p->lock); }
void mtp__pool_unlock(mtp_pool_internal_t *p) { pthread_mutex_unlock(&p->lock); }

mtp_pool_internal_t *mtp__pool_by_id(uint32_t id) {
  return id < MTP_MAX_POOLS ? pool_ids[id] : NULL;
}

/* ---- lists of detached slabs (pool lock) ---- */

void mtp__pool_partial_push(mtp_pool_internal_t *p, mtp_slab_t *s) {
  s->list = MTP_LIST_POOL_PARTIAL;
  s->prev = NULL;
  s->next = p->partial[s->cls];
  if (s->next) s->next->prev = s;
  p->partial[s->cls] = s;
}

void mtp__pool_partial_remove(mtp_pool_internal_t *p, mtp_slab_t *s) {
  if (s->prev)
    s->prev->next = s->next;
  else
    p->partial[s->cls] = s->next;
  if (s->next) s->next->prev = s->prev;
  s->next = s->prev = NULL;
  s->list = MTP_LIST_NONE;
}

void mtp__pool_release_slab(mtp_pool_internal_t *p, mtp_slab_t *s, uint64_t now_ms) {
  if (s->check_bits) {
    mtp__meta_free(s->check_bits, (s->capacity + 7) / 8);
    s->check_bits = NULL;
  }
  mtp__region_free_span(p, s, now_ms);
  if (p->purge_delay_ms == 0)
    mtp__region_purge(p, now_ms, false);
  else
    mtp__pool_note_free_pages(p, now_ms);
}

/* ---- the purge thread ---- */

static pthread_mutex_t purger_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t purger_cond = PTHREAD_COND_INITIALIZER;
static bool purger_work;
static _Atomic(int) purger_idle = 1; /* 1: nothing scheduled; a notification is needed */
/* The purge thread is created outside every mtpool lock: pthread_create allocates (the new
 * thread's DTV), and where mtpool is the process's malloc that allocation comes back into the
 * pool whose lock the notifier may hold. So mtp__pool_note_free_pages only asks (0 -> 1, under
 * purger_lock) and mtp__purger_start, called by the allocation slow path while it holds no lock,
 * creates it (1 -> 2 by CAS: one creator; a nested allocation inside pthread_create sees 2). A
 * failed creation goes back to 0, and the next notification asks again. */
static _Atomic(int) purger_state; /* 0: not running, 1: wanted, 2: created or being created */

static size_t purge_pool(mtp_pool_internal_t *p, uint64_t now, bool force, bool *pending) {
  size_t n = 0;
  uint64_t cutoff = force ? UINT64_MAX
                    : (p->purge_delay_ms < 0 || (uint64_t)p->purge_delay_ms > now)
                        ? 0
                        : now - (uint64_t)p->purge_delay_ms;
  if (force || p->purge_delay_ms >= 0) {
    for (mtp_heap_t *h = p->heaps; h; h = h->pool_next) mtp__heap_drain_cache(h, cutoff, now);
  }
  n += mtp__region_purge(p, now, force);
  if (pending) {
    bool left = false;
    for (mtp_region_t *r = p->regions; r && !left && r->h.free_pages; r = r->h.next)
      for (unsigned i = 0; i < MTP_PAGES_PER_REGION / 64; i++) left = left || r->h.dirty_mask[i];
    for (mtp_heap_t *h = p->heaps; h && !left; h = h->pool_next) left = mtp__heap_caches(h);
    *pending = *pending || (left && p->purge_delay_ms >= 0);
  }
  return n;
}

static void *purger_main(void *arg) {
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&purger_lock);
    while (!purger_work) pthread_cond_wait(&purger_cond, &purger_lock);
    purger_work = false;
    pthread_mutex_unlock(&purger_lock);
    bool pending = true;
    while (pending) {
      /* Sleep a quarter of the shortest delay among pools with work, then purge what is due. */
      long delay = 1000;
      pthread_mutex_lock(&mtp__registry_lock);
      for (mtp_pool_internal_t *p = mtp__pools; p; p = p->reg_next)
        if (p->purge_delay_ms > 0 && p->purge_delay_ms < delay) delay = p->purge_delay_ms;
      pthread_mutex_unlock(&mtp__registry_lock);
      long ms = delay / 4 + 1;
      struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
      nanosleep(&ts, NULL);
      pending = false;
      atomic_store_explicit(&purger_idle, 1, memory_order_seq_cst);
      pthread_mutex_lock(&mtp__registry_lock);
      uint64_t now = mtp__os_now_ms();
      for (mtp_pool_internal_t *p = mtp__pools; p; p = p->reg_next) {
        mtp__pool_lock(p);
        purge_pool(p, now, false, &pending);
        mtp__pool_unlock(p);
      }
      pthread_mutex_unlock(&mtp__registry_lock);
      if (pending) atomic_store_explicit(&purger_idle, 0, memory_order_seq_cst);
    }
  }
  return NULL;
}

void mtp__pool_note_free_pages(mtp_pool_internal_t *p, uint64_t now_ms) {
  (void)now_ms;
  if (p->purge_delay_ms < 0) return;
  if (p->purge_delay_ms == 0) return; /* release_slab callers purge at once (see below) */
  int idle = 1;
  if (!atomic_compare_exchange_strong(&purger_idle, &idle, 0)) return; /* already scheduled */
  pthread_mutex_lock(&purger_lock);
  purger_work = true;
  int none = 0;
  atomic_compare_exchange_strong(&purger_state, &none, 1);
  pthread_cond_signal(&purger_cond);
  pthread_mutex_unlock(&purger_lock);
}

void mtp__purger_start(void) {
  int want = 1;
  if (MTP_LIKELY(atomic_load_explicit(&purger_state, memory_order_relaxed) != 1)) return;
  if (!atomic_compare_exchange_strong(&purger_state, &want, 2)) return;
  pthread_t tid;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (pthread_create(&tid, &attr, purger_main, NULL) != 0) {
    atomic_store(&purger_state, 0); /* the next notification asks again */
    atomic_store(&purger_idle, 1);
  }
  pthread_attr_destroy(&attr);
}

/* Checked mode: report a freed block that was written to, before its memory goes away. */
static void check_freed_blocks(mtp_pool_internal_t *p) {
  if (!p->check) return;
  mtp__pool_lock(p);
  void *bad = mtp__checked_find_corrupt(p);
  mtp__pool_unlock(p);
  if (bad) mtp__error(MTP_ERR_USE_AFTER_FREE, "use after free (a freed block was written to)", bad);
}

/* ---- create, destroy ---- */

static mtp_pool_internal_t *pool_new(const mtp_options_t *in, bool is_default) {
  mtp_options_t opt;
  if (in)
    opt = *in;
  else
    mtp_options_init(&opt);
  if (is_default) mtp__options_from_env(&opt);
  mtp__options_sanitize(&opt);
  /* The default pool's record is static: the process can always use it, even when the very
   * first map fails (its allocations then fail with ENOMEM, and work again later). */
  static mtp_pool_internal_t default_record;
  mtp_pool_internal_t *p = is_default ? &default_record : mtp__meta_alloc(sizeof(*p));
  if (p == NULL) return NULL;
  pthread_mutex_init(&p->lock, NULL);
  p->purge_delay_ms = opt.purge_delay_ms;
  p->thread_cache_bytes = opt.thread_cache_bytes;
  p->check = opt.check;
  pthread_mutex_lock(&mtp__registry_lock);
  uint32_t id = MTP_MAX_POOLS;
  for (uint32_t i = is_default ? 0 : 1; i < MTP_MAX_POOLS; i++)
    if (pool_ids[i] == NULL) {
      id = i;
      break;
    }
  if (id == MTP_MAX_POOLS) {
    pthread_mutex_unlock(&mtp__registry_lock);
    pthread_mutex_destroy(&p->lock);
    mtp__meta_free(p, sizeof(*p));
    errno = ENOMEM;
    return NULL;
  }
  p->id = id;
  pools_created++;
  if (opt.name && opt.name[0]) {
    strncpy(p->name, opt.name, sizeof(p->name) - 1);
  } else {
    char buf[24], *e = buf + sizeof(buf);
    *--e = 0;
    uint32_t v = pools_created;
    do *--e = (char)('0' + v % 10);
    while ((v /= 10) != 0);
    memcpy(p->name, "pool-", 5);
    memcpy(p->name + 5, e, strlen(e) + 1);
  }
  pool_ids[id] = p;
  p->reg_next = mtp__pools;
  if (mtp__pools) mtp__pools->reg_prev = p;
  mtp__pools = p;
  pthread_mutex_unlock(&mtp__registry_lock);
  return p;
}

static void default_init(void) {
  pthread_atfork(mtp__fork_prepare, mtp__fork_parent, mtp__fork_child);
  mtp_options_t opt;
  mtp_options_init(&opt);
  opt.name = "default";
  mtp_pool_internal_t *p = pool_new(&opt, true); /* static record: cannot fail */
  __atomic_store_n(&mtp__default_pool_ptr, p, __ATOMIC_RELEASE);
}

mtp_pool_internal_t *mtp__default_pool_init(void) {
  pthread_once(&default_once, default_init);
  return __atomic_load_n(&mtp__default_pool_ptr, __ATOMIC_ACQUIRE);
}

mtp_pool_t *mtp_default_pool(void) { return mtp__pool_out(mtp__default()); }

mtp_pool_t *mtp_pool_create(const mtp_options_t *opt) {
  mtp__default(); /* the registry's fork handlers are installed with it */
  return mtp__pool_out(pool_new(opt, false));
}

void mtp_pool_destroy(mtp_pool_t *pool_) {
  mtp_pool_internal_t *p = mtp__pool_in(pool_);
  if (p == NULL || p == mtp__default_pool_ptr) return;
  check_freed_blocks(p);
  pthread_mutex_lock(&mtp__registry_lock);
  mtp__pool_lock(p);
  /* Unbind every heap: their threads notice at their next use of this pool id, or at exit. */
  for (mtp_heap_t *h = p->heaps; h; h = h->pool_next) mtp__store_relaxed(&h->pool, 0);
  p->heaps = NULL;
  mtp__track_pool_destroy(p);
  mtp__region_unmap_all(p);
  mtp__pool_unlock(p);
  mtp__large_destroy_pool(p);
  pool_ids[p->id] = NULL;
  if (p->reg_prev)
    p->reg_prev->reg_next = p->reg_next;
  else
    mtp__pools = p->reg_next;
  if (p->reg_next) p->reg_next->reg_prev = p->reg_prev;
  pthread_mutex_unlock(&mtp__registry_lock);
  pthread_mutex_destroy(&p->lock);
  mtp__meta_free(p, sizeof(*p));
}

const char *mtp_pool_name(const mtp_pool_t *pool) {
  const mtp_pool_internal_t *p = (const mtp_pool_internal_t *)pool;
  if (p == NULL) p = mtp__default();
  return p->name;
}

size_t mtp_pool_trim(mtp_pool_t *pool_) {
  mtp_pool_internal_t *p = pool_ ? mtp__pool_in(pool_) : mtp__default();
  check_freed_blocks(p);
  pthread_mutex_lock(&mtp__registry_lock);
  mtp__pool_lock(p);
  size_t n = purge_pool(p, mtp__os_now_ms(), true, NULL);
  mtp__pool_unlock(p);
  pthread_mutex_unlock(&mtp__registry_lock);
  return n;
}

/* ---- fork: hold every lock across fork() so the child finds them consistent ---- */

/* Lock order, everywhere: registry, pool (in registry order), large, meta, purger. A pool lock
 * is held while the purge thread is woken (purger lock), so the purger lock comes last. */
void mtp__fork_prepare(void) {
  pthread_mutex_lock(&mtp__registry_lock);
  for (mtp_pool_internal_t *p = mtp__pools; p; p = p->reg_next) mtp__pool_lock(p);
  pthread_mutex_lock(&mtp__large_lock);
  pthread_mutex_lock(&mtp__meta_lock);
  pthread_mutex_lock(&purger_lock);
}

void mtp__fork_parent(void) {
  pthread_mutex_unlock(&purger_lock);
  pthread_mutex_unlock(&mtp__meta_lock);
  pthread_mutex_unlock(&mtp__large_lock);
  for (mtp_pool_internal_t *p = mtp__pools; p; p = p->reg_next) mtp__pool_unlock(p);
  pthread_mutex_unlock(&mtp__registry_lock);
}

void mtp__fork_child(void) {
  /* Only the forking thread lives on. Heaps of the other threads keep their slabs (their blocks
   * can still be freed here, by the remote path); their cache locks may have been held. */
  for (mtp_pool_internal_t *p = mtp__pools; p; p = p->reg_next)
    for (mtp_heap_t *h = p->heaps; h; h = h->pool_next) atomic_store(&h->cache_lock, 0);
  atomic_store(&purger_state, 0);
  purger_work = false;
  /* The parent's purge thread may have been waiting on the condition variable: its waiter count
   * came along, and the child's first signal would wait for that waiter forever. Start afresh. */
  pthread_cond_init(&purger_cond, NULL);
  atomic_store(&purger_idle, 1);
  mtp__fork_parent();
}

size_t mtp_trim_all(void) {
  mtp__default();
  size_t n = 0;
  /* One pool at a time, each under the registry lock so that it cannot be destroyed meanwhile. */
  for (uint32_t id = 0; id < MTP_MAX_POOLS; id++) {
    pthread_mutex_lock(&mtp__registry_lock);
    mtp_pool_internal_t *p = pool_ids[id];
    if (p) {
      mtp__pool_lock(p);
      n += purge_pool(p, mtp__os_now_ms(), true, NULL);
      mtp__pool_unlock(p);
    }
    pthread_mutex_unlock(&mtp__registry_lock);
  }
  return n;
}

int mtp_pool_options(mtp_pool_t *pool_, mtp_options_t *out) {
  if (out == NULL) return EINVAL;
  mtp_pool_internal_t *p = pool_ ? mtp__pool_in(pool_) : mtp__default();
  mtp_options_init(out);
  out->name = p->name;
  out->purge_delay_ms = p->purge_delay_ms;
  out->thread_cache_bytes = p->thread_cache_bytes;
  out->check = p->check;
  return 0;
}
