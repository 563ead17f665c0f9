/* Atomics named by their memory order, so every call site says which order it relies on.
 * Only this header spells out <stdatomic.h> orders; the rest of the core calls these wrappers. */
#ifndef MTP_ATOMIC_H
#define MTP_ATOMIC_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef _Atomic(uintptr_t) mtp_atomic_uptr;
typedef _Atomic(uint64_t) mtp_atomic_u64;
typedef _Atomic(int) mtp_atomic_int;

static inline uintptr_t mtp__load_relaxed(mtp_atomic_uptr *a) {
  return atomic_load_explicit(a, memory_order_relaxed);
}
static inline uintptr_t mtp__load_acquire(mtp_atomic_uptr *a) {
  return atomic_load_explicit(a, memory_order_acquire);
}
static inline void mtp__store_relaxed(mtp_atomic_uptr *a, uintptr_t v) {
  atomic_store_explicit(a, v, memory_order_relaxed);
}
static inline void mtp__store_release(mtp_atomic_uptr *a, uintptr_t v) {
  atomic_store_explicit(a, v, memory_order_release);
}
static inline uintptr_t mtp__exchange_acq_rel(mtp_atomic_uptr *a, uintptr_t v) {
  return atomic_exchange_explicit(a, v, memory_order_acq_rel);
}
/* On failure *expected is refreshed with an acquire load: callers loop and re-derive from it,
 * and may read what the writer of that value published. */
static inline bool mtp__cas_weak_acq_rel(mtp_atomic_uptr *a, uintptr_t *expected, uintptr_t desired) {
  return atomic_compare_exchange_weak_explicit(a, expected, desired, memory_order_acq_rel,
                                               memory_order_acquire);
}
static inline bool mtp__cas_strong_acq_rel(mtp_atomic_uptr *a, uintptr_t *expected,
                                           uintptr_t desired) {
  return atomic_compare_exchange_strong_explicit(a, expected, desired, memory_order_acq_rel,
                                                 memory_order_relaxed);
}
static inline uint64_t mtp__u64_load_relaxed(mtp_atomic_u64 *a) {
  return atomic_load_explicit(a, memory_order_relaxed);
}
static inline void mtp__u64_add_relaxed(mtp_atomic_u64 *a, uint64_t v) {
  atomic_fetch_add_explicit(a, v, memory_order_relaxed);
}
static inline int mtp__int_load_acquire(mtp_atomic_int *a) {
  return atomic_load_explicit(a, memory_order_acquire);
}
static inline void mtp__int_store_release(mtp_atomic_int *a, int v) {
  atomic_store_explicit(a, v, memory_order_release);
}

#endif
