/* The OS layer: the only code that maps, unmaps, protects or advises memory, and reads the clock.
 * Every function returns 0 or an errno value, or NULL with errno set; none allocates.
 * Layer: base. */
#ifndef MTP_OS_H
#define MTP_OS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#pragma GCC visibility push(hidden)

/* The OS page size (the kernel's AT_PAGESZ, read once): 4 KiB on x86-64, 4, 16 or 64 KiB on
 * aarch64. mtpool pages (64 KiB) are a whole number of OS pages; larger OS pages are refused at
 * the first map (ENOMEM). */
size_t mtp__os_page_size(void);
/* Map size bytes (a multiple of the OS page) aligned to alignment (a power of two; at least the
 * OS page is always given), readable and writable, zero-filled, with no tools' marks (ASan
 * poison) left from an earlier mapping there. NULL + errno ENOMEM if the OS refuses. */
void *mtp__os_map(size_t size, size_t alignment);
/* mtp__os_map, then its first `guard` bytes made inaccessible; only the rest is cleared of tools'
 * marks (an ASan build writes no shadow for the guard). NULL + ENOMEM if the OS refuses. */
void *mtp__os_map_guarded(size_t size, size_t alignment, size_t guard);
/* Unmap a mapping of mtp__os_map_guarded, clearing the tools' marks on all but its guard. */
int mtp__os_unmap_guarded(void *p, size_t size, size_t guard);
/* Make [p, p+size) inaccessible (a guard). pre: OS-page-aligned, mapped by mtp__os_map. */
int mtp__os_guard(void *p, size_t size);
/* Make p..p+size readable and writable again after mtp__os_guard. 0 or errno. */
int mtp__os_unguard(void *p, size_t size);
/* Fault [p, p+size) in now, in one call, instead of one page fault per OS page later.
 * Returns ENOTSUP where the kernel lacks MADV_POPULATE_WRITE (before Linux 5.14). */
int mtp__os_populate(void *p, size_t size);
/* Unmap [p, p+size) and clear the tools' marks on it (ASan poison), so that whatever is mapped
 * there next starts clean. pre: mapped by mtp__os_map (whole or a page-aligned part). */
int mtp__os_unmap(void *p, size_t size);
/* Give the pages back to the OS; they read as zero when touched again. pre: page-aligned. */
int mtp__os_purge(void *p, size_t size);
/* Initialise a lock held for short stretches by many threads (a pool's lock): where the C
 * library offers it (glibc's adaptive mutex), a thread that finds it held spins a while before it
 * sleeps, so two threads that take it in turn do not pay a futex wake-up each time. Returns 0 or
 * the errno of pthread_mutex_init. */
int mtp__os_lock_init(pthread_mutex_t *m);
/* Milliseconds from a monotonic clock. */
uint64_t mtp__os_now_ms(void);
/* The CPU the calling thread runs on (a hint: it may move at once), 0 if the OS does not say. */
unsigned mtp__os_cpu(void);

/* Test hook: after `after_n_calls` more successful maps, every map fails with ENOMEM; -1 turns the
 * injection off. */
void mtp__os_inject_failure(long after_n_calls);

/* ---- Transparent huge pages (one block: the region layer's huge-page policy) ---- */
/* The PMD huge page size the kernel reports (/sys/kernel/mm/transparent_hugepage/hpage_pmd_size,
 * read once): 2 MiB on x86-64 and on 4 KiB-page aarch64; 0 where the kernel has no transparent
 * huge pages. */
size_t mtp__os_huge_page_size(void);
/* Advise [p, p+size): huge true asks for huge pages (MADV_HUGEPAGE), false forbids them
 * (MADV_NOHUGEPAGE). pre: OS-page-aligned, mapped by mtp__os_map. Returns 0 or the errno (EINVAL
 * where the kernel lacks transparent huge pages); the advice is a hint, so callers may ignore it. */
int mtp__os_huge_advise(void *p, size_t size, bool huge);
/* Whether the system gives anonymous memory huge pages unasked (THP "always"). */
bool mtp__os_thp_always(void);
/* Make the resident pages of [p, p+size) (huge-page aligned) one huge page now (MADV_COLLAPSE,
 * Linux 6.1+): the calling thread copies them. 0 or errno (EINVAL on older kernels, or where the
 * range is advised MADV_NOHUGEPAGE; EAGAIN or ENOMEM when no huge page is to be had). */
int mtp__os_huge_collapse(void *p, size_t size);
/* The bytes of [p, p+size) that are resident (mincore), or SIZE_MAX if the kernel does not say.
 * pre: OS-page-aligned, mapped. Allocates nothing (a small vector on the stack, in steps). */
size_t mtp__os_resident_bytes(const void *p, size_t size);
/* vec[i] = 1 if the i-th OS page of [p, p+size) is resident, else 0 (size / OS page entries);
 * returns 0, or -1 if the kernel does not say. pre: as above. */
int mtp__os_resident_map(const void *p, size_t size, unsigned char *vec);
/* The process's anonymous memory in huge pages (AnonHugePages of /proc/self/smaps_rollup), in
 * kB; -1 where the kernel does not say. Allocates nothing. */
long mtp__os_anon_huge_kb(void);

/* Resize the mapping [p, p+old_size) to new_size (both multiples of the OS page), moving it if it
 * cannot change in place (MREMAP_MAYMOVE): its pages move with it, neither copied nor faulted
 * again, and the new range has no tools' marks, as from mtp__os_map. Returns the new address, or
 * NULL + errno ENOMEM (the old mapping is then unchanged). An injected failure
 * (mtp__os_inject_failure) counts as a map. pre: mapped by mtp__os_map. */
void *mtp__os_remap(void *p, size_t old_size, size_t new_size);
/* As mtp__os_remap, to a range aligned to `alignment` (a power of two, a multiple of the OS
 * page): grown in place where p is aligned and the addresses after it are free, else moved
 * (MREMAP_FIXED) onto a fresh aligned mapping. NULL + ENOMEM, the old mapping unchanged, also
 * where it lies in more than one kernel mapping (part of it advised otherwise), which no move
 * takes. An injected failure counts as that fresh mapping (growth in place maps nothing new). */
void *mtp__os_remap_aligned(void *p, size_t old_size, size_t new_size, size_t alignment);

#pragma GCC visibility pop

#endif
