/* Internal records: pools, heaps, per-thread records, large-block records, checked-mode bitmaps.
 * Records of one size share a free list; memory comes from the OS in 256 KiB chunks and is never
 * unmapped, so a stale pointer to a record can always be read (the heap binding checks rely on
 * that). Each chunk starts with a PROT_NONE guard page: mmap places mappings next to each other,
 * and a user mapping (a large block) just below a chunk must not overflow into a record.
 * Layer: base. */
#include <errno.h>
#include <string.h>

#include "base.h"
#include "os.h"

#define META_CHUNK (256 * 1024)
#define META_CLASSES 16 /* 64 B << class: enough for every record (the thread record is 8 KiB) */

typedef struct meta_free {
  struct meta_free *next;
} meta_free_t;

pthread_mutex_t mtp__meta_lock = PTHREAD_MUTEX_INITIALIZER;
static meta_free_t *meta_lists[META_CLASSES];
static char *meta_bump, *meta_end;

static unsigned meta_class(size_t size) {
  unsigned c = 0;
  size_t s = 64;
  while (s < size) {
    s <<= 1;
    c++;
  }
  return c;
}

void *mtp__meta_alloc(size_t size) {
  unsigned c = meta_class(size);
  MTP_ASSERT(c < META_CLASSES);
  size_t rsize = (size_t)64 << c;
  void *p = NULL;
  bool fresh = false;
  pthread_mutex_lock(&mtp__meta_lock);
  for (;;) {
    if (meta_lists[c]) {
      p = meta_lists[c];
      meta_lists[c] = meta_lists[c]->next;
      break;
    }
    if (meta_bump != NULL && (size_t)(meta_end - meta_bump) >= rsize) {
      fresh = true;
      p = meta_bump;
      meta_bump += rsize;
      break;
    }
    /* A new chunk, mapped without the lock: threads that start in a stream each take records
     * here, and the mapping waits for the kernel's mmap lock behind their stacks' mappings. */
    pthread_mutex_unlock(&mtp__meta_lock);
    size_t guard = mtp__os_page_size();
    size_t chunk = rsize > META_CHUNK ? rsize : META_CHUNK;
    char *m = mtp__os_map(guard + chunk, guard);
    if (m == NULL || mtp__os_guard(m, guard) != 0) {
      if (m != NULL) mtp__os_unmap(m, guard + chunk);
      errno = ENOMEM;
      return NULL;
    }
    pthread_mutex_lock(&mtp__meta_lock);
    /* The rest of the old chunk (another thread's new one, if two ran short at once) is left
     * unused: records are small and few. */
    meta_bump = m + guard;
    meta_end = m + guard + chunk;
  }
  pthread_mutex_unlock(&mtp__meta_lock);
  /* Memory never handed out is zero from the map: writing it would fault in the pages of a record
   * that its owner may never touch (a thread record has a slot per pool id, 8 KiB; a thread that
   * uses the default pool alone touches its first page). */
  if (!fresh) memset(p, 0, size);
  return p;
}

void mtp__meta_free(void *p, size_t size) {
  if (p == NULL) return;
  unsigned c = meta_class(size);
  pthread_mutex_lock(&mtp__meta_lock);
  meta_free_t *f = p;
  f->next = meta_lists[c];
  meta_lists[c] = f;
  pthread_mutex_unlock(&mtp__meta_lock);
}
