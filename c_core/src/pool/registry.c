/* The registry of live pools and their ids; creating and destroying a pool; a heap joining and
 * leaving a pool's members. The registry lock guards the pool list, the ids and the binding of
 * heaps to pools; a pool's lock guards its regions, its slab lists and its member list.
 * Layer: pool. */
#include "pool.h"

#include <errno.h>
#include <string.h>

#include "base/os.h"

pthread_mutex_t mtp__registry_lock = PTHREAD_MUTEX_INITIALIZER;
mtpi_node_t *mtp__pools;
mtpi_atomic_uptr mtp__default_pool_ptr;
static mtpi_pool_t *pool_ids[MTP_MAX_POOLS];
static uint32_t pools_created;

static mtpi_member_t *member_of(mtpi_node_t *n) { return MTP_CONTAINER(n, mtpi_member_t, link); }

/* Lock held: the heaps that joined since go on the member list. */
static MTP_NOINLINE void members_merge(mtpi_pool_t *p) {
  mtpi_node_t *n = (mtpi_node_t *)mtp__exchange_acq_rel(&p->joining, 0);
  while (n != NULL) {
    mtpi_node_t *next = n->next;
    mtp__list_push(&p->members, n);
    n = next;
  }
}

void mtp__pool_lock(mtpi_pool_t *p) {
  pthread_mutex_lock(&p->lock);
  if (MTP_UNLIKELY(mtp__load_relaxed(&p->joining) != 0)) members_merge(p);
}

bool mtp__pool_trylock(mtpi_pool_t *p) {
  if (pthread_mutex_trylock(&p->lock) != 0) return false;
  if (MTP_UNLIKELY(mtp__load_relaxed(&p->joining) != 0)) members_merge(p);
  return true;
}

bool mtp__pool_unlock(mtpi_pool_t *p) {
  bool due = p->purge_due;
  p->purge_due = false;
  if (p->rs.dense_news) { /* a range to look at for a huge page: the purge passes' work */
    p->rs.dense_news = false;
    due = due || p->purge_delay_ms > 0; /* a pool without them has only fresh memory's advice */
  }
  pthread_mutex_unlock(&p->lock);
  return due;
}

void mtp__pool_unlock_quiet(mtpi_pool_t *p) {
  p->purge_due = false;
  pthread_mutex_unlock(&p->lock);
}

mtpi_pool_t *mtp__pool_by_id(uint32_t id) { return id < MTP_MAX_POOLS ? pool_ids[id] : NULL; }

/* ---- members ---- */

bool mtp__pool_join(mtpi_pool_t *p, mtpi_member_t *m) {
  mtp__store_relaxed(&m->pool, (uintptr_t)p); /* relaxed: see mtp__member_pool */
  m->region_hint = NULL;
  memset(m->classes_got, 0, sizeof(m->classes_got));
  /* Without the lock, which every new thread would otherwise queue on as it starts: onto
   * `joining`, for the lock's next holder to move to the members (types.h). */
  uintptr_t head = mtp__load_relaxed(&p->joining);
  do {
    m->link.next = (mtpi_node_t *)head;
  } while (!mtp__cas_weak_acq_rel(&p->joining, &head, (uintptr_t)&m->link));
  return mtp__u64_fetch_add_relaxed(&p->joins, 1) != 0;
}

void mtp__pool_leave_locked(mtpi_pool_t *p, mtpi_member_t *m) {
  p->dead_allocs += m->allocs;
  p->dead_remote += m->remote_collected;
  mtp__region_unclaim(&m->region_hint); /* a purge may unmap that region now */
  mtp__list_remove(&p->members, &m->link);
  mtp__store_relaxed(&m->pool, 0);
}

/* ---- create, destroy ---- */

/* "pool-<n>" into name (48 bytes), without stdio (it may allocate). */
static void default_name(char *name, uint32_t n) {
  char buf[24], *e = buf + sizeof(buf);
  *--e = 0;
  do *--e = (char)('0' + n % 10);
  while ((n /= 10) != 0);
  memcpy(name, "pool-", 5);
  memcpy(name + 5, e, strlen(e) + 1);
}

/* Destroy the locks made so far: the pool lock if pool_lock, and `shared` shared heaps' locks. */
static void locks_destroy(mtpi_pool_t *p, bool pool_lock, unsigned shared) {
  while (shared > 0) pthread_mutex_destroy(&p->shared[--shared].lock);
  if (pool_lock) pthread_mutex_destroy(&p->lock);
}

mtpi_pool_t *mtp__pool_new(const mtp_options_t *in, bool is_default) {
  mtp_options_t opt;
  if (in)
    opt = *in;
  else
    mtp_options_init(&opt);
  if (is_default) mtp__options_from_env(&opt);
  mtp__options_sanitize(&opt);
  /* The free-list key, before any slab of any pool: the default pool is made first (inside its
   * once), so every later caller finds the key set and no two threads race to set it. */
  mtp__link_key_init();
  /* The default pool's record is static: the process can always use it, even when the very
   * first map fails (its allocations then fail with ENOMEM, and work again later). */
  static mtpi_pool_t default_record;
  mtpi_pool_t *p = is_default ? &default_record : mtp__meta_alloc(sizeof(*p));
  if (p == NULL) return NULL;
  int e = mtp__os_lock_init(&p->lock);
  bool pool_lock = e == 0;
  unsigned locks = 0; /* shared locks made */
  while (e == 0 && locks < MTP_SHARED_HEAPS && (e = mtp__os_lock_init(&p->shared[locks].lock)) == 0)
    locks++;
  if (e != 0) { /* undo only what was made */
    locks_destroy(p, pool_lock, locks);
    if (!is_default) mtp__meta_free(p, sizeof(*p));
    errno = ENOMEM;
    return NULL;
  }
  p->purge_delay_ms = opt.purge_delay_ms;
  p->thread_cache_bytes = opt.thread_cache_bytes;
  p->check = opt.check;
  p->rs.guard_free = opt.check != 0; /* a checked pool's pages outside its runs fault */
  pthread_mutex_lock(&mtp__registry_lock);
  uint32_t id = MTP_MAX_POOLS;
  for (uint32_t i = is_default ? 0 : 1; i < MTP_MAX_POOLS; i++)
    if (pool_ids[i] == NULL) {
      id = i;
      break;
    }
  if (id == MTP_MAX_POOLS) {
    pthread_mutex_unlock(&mtp__registry_lock);
    locks_destroy(p, true, MTP_SHARED_HEAPS);
    mtp__meta_free(p, sizeof(*p));
    errno = ENOMEM;
    return NULL;
  }
  p->id = id;
  pools_created++;
  if (opt.name && opt.name[0])
    strncpy(p->name, opt.name, sizeof(p->name) - 1);
  else
    default_name(p->name, pools_created);
  pool_ids[id] = p;
  mtp__list_push(&mtp__pools, &p->reg_link);
  pthread_mutex_unlock(&mtp__registry_lock);
  return p;
}

void mtp__pool_free(mtpi_pool_t *p) {
  pthread_mutex_lock(&mtp__registry_lock);
  mtp__pool_lock(p);
  MTP_VALIDATE(mtp__region_validate(&p->rs));
  /* Unbind every heap: their threads notice at their next use of this pool id, or at exit. */
  for (mtpi_node_t *it = p->members; it; it = it->next)
    mtp__store_relaxed(&member_of(it)->pool, 0); /* relaxed: see mtp__member_pool */
  p->members = NULL;
  /* checked-mode slabs keep their allocation bitmaps in internal records; Valgrind builds
   * also tell memcheck that the blocks still in use are gone */
  for (mtpi_region_t *r = mtp__region_from_node(p->rs.regions); r;
       r = mtp__region_from_node(r->h.link.next))
    for (unsigned i = MTP_REGION_FIRST_PAGE; i < MTP_PAGES_PER_REGION; i++) {
      mtpi_desc_t *s = &r->pages[i];
      if (s->kind != MTP_PAGE_SLAB) continue;
      mtp__slab_forget_blocks(s);
      if (s->check_bits) mtp__meta_free(s->check_bits, (s->capacity + 7) / 8);
    }
  mtp__region_unmap_all(&p->rs);
  mtp__pool_unlock_quiet(p); /* nothing left to purge */
  mtp__large_destroy_pool(p);
  pool_ids[p->id] = NULL;
  mtp__list_remove(&mtp__pools, &p->reg_link);
  pthread_mutex_unlock(&mtp__registry_lock);
  locks_destroy(p, true, MTP_SHARED_HEAPS); /* the shared heaps are members: unbound above */
  mtp__meta_free(p, sizeof(*p));
}
