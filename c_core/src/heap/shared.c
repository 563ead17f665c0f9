/* The pool's shared heaps: cold classes. A heap's own slab of a class costs at least a page
 * (4 KiB resident) however few of its blocks the thread uses, so a thread that allocates a little
 * from many classes held a page per class. A heap that joined a pool in which another thread
 * allocates already therefore takes its first blocks of a class (up to MTP_COLD_BYTES of them,
 * MTP_COLD_TOTAL blocks in all) from a shared heap of the pool: an ordinary heap owned by no thread
 * (its token, shared_thread, is no thread's record), used under its own lock. Every free of its
 * blocks is remote (one CAS onto the slab's list), which the shared heap collects as any owner
 * does. The pool's first heap (a single-threaded program's) never shares: its own slabs would hold
 * its first blocks as well. A pool has MTP_SHARED_HEAPS of them and a thread takes its CPU's, so
 * that threads starting at once take their first blocks under different locks
 * (bench/results/notes.md: "Design: Cold classes"). A thread never waits for one: if its CPU's is
 * held (its holder may have been preempted, and threads that start in a stream would queue behind
 * it, each one lock hold per block), it tries the others, and if all are held it takes the block
 * from its own slabs. Lock order: a shared heap's lock, then the pool lock. Layer: heap. */
#include "lists.h"

#include "base/os.h"

static mtpi_thread_t shared_thread; /* only its address is used: the shared heaps' token */

/* The shared heap of the CPU the thread runs on (a thread moved meanwhile only shares a lock with
 * another CPU's threads). */
static unsigned shared_index(void) { return mtp__os_cpu() % MTP_SHARED_HEAPS; }

mtpi_block_t *mtp__shared_take(mtpi_pool_t *pool, mtpi_heap_t *h, unsigned cls, bool *due) {
  unsigned i = shared_index(), tries = 0;
  while (pthread_mutex_trylock(&pool->shared[i].lock) != 0) {
    if (++tries == MTP_SHARED_HEAPS) return mtp__heap_take(pool, h, cls, due); /* all held */
    i = (i + 1) % MTP_SHARED_HEAPS;
  }
  mtpi_heap_t *sh = &pool->shared[i].heap;
  if (sh->thread == NULL) { /* first use (the pool lock, taken by the join, nests inside) */
    for (unsigned c = 0; c < MTP_NUM_CLASSES; c++) sh->current[c] = &mtp__slab_empty;
    sh->thread = &shared_thread;
    sh->m.shared = true;
    if (mtp__pool_join(pool, &sh->m)) mtp__purger_eager();
  }
  mtpi_block_t *b = mtp__heap_take(pool, sh, cls, due);
  pthread_mutex_unlock(&pool->shared[i].lock);
  if (b != NULL) {
    h->cold[cls]++;
    h->cold_total++;
  }
  return b;
}

/* The shared heaps' slabs go back to the pool (trim): their partly used ones to be adopted, their
 * empty ones to be purged. Returns whether a purge became due. */
static bool shared_give_back(mtpi_pool_t *pool) {
  bool due = false;
  for (unsigned i = 0; i < MTP_SHARED_HEAPS; i++) {
    pthread_mutex_lock(&pool->shared[i].lock);
    if (pool->shared[i].heap.thread != NULL) {
      mtp__pool_lock(pool);
      mtp__heap_give_back_locked(pool, &pool->shared[i].heap);
      due |= mtp__pool_unlock(pool);
    }
    pthread_mutex_unlock(&pool->shared[i].lock);
  }
  return due;
}

void mtp__heap_shared_trim(mtpi_pool_t *pool) {
  if (shared_give_back(pool)) mtp__purger_wake();
}

void mtp__heap_shared_trim_all(void) {
  bool due = false;
  pthread_mutex_lock(&mtp__registry_lock); /* no pool is destroyed meanwhile */
  for (mtpi_node_t *it = mtp__pools; it; it = it->next)
    due |= shared_give_back(mtp__pool_from_reg(it));
  pthread_mutex_unlock(&mtp__registry_lock);
  if (due) mtp__purger_wake();
}
