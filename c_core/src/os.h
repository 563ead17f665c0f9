/* The OS layer: the only code that maps, unmaps or advises memory, and reads the clock.
 * Every function returns 0 or an errno value, or NULL with errno set; none allocates. */
#ifndef MTP_OS_H
#define MTP_OS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Map size bytes (a multiple of 4 KiB) aligned to alignment (a power of two >= 4 KiB), readable
 * and writable, zero-filled. NULL + errno ENOMEM if the OS refuses. */
void *mtp__os_map(size_t size, size_t alignment);
/* Fault [p, p+size) in now, in one call, instead of one page fault per 4 KiB later.
 * Returns ENOTSUP where the kernel lacks MADV_POPULATE_WRITE (before Linux 5.14). */
int mtp__os_populate(void *p, size_t size);
/* pre: [p, p+size) was mapped by mtp__os_map (whole or a page-aligned part). */
int mtp__os_unmap(void *p, size_t size);
/* Give the pages back to the OS; they read as zero when touched again. pre: page-aligned. */
int mtp__os_purge(void *p, size_t size);
/* Milliseconds from a monotonic clock. */
uint64_t mtp__os_now_ms(void);

/* Test hook: after `after_n_calls` more successful maps, every map fails with ENOMEM; -1 turns the
 * injection off. */
void mtp__os_inject_failure(long after_n_calls);

#endif
