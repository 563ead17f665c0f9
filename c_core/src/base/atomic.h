/* Atomics named by their memory order, so every call site says which order it relies on.
 * Only this header spells out <stdatomic.h> orders; the rest of the core calls these wrappers and
 * argues the order it picks in a comment beside the call (aarch64 is weakly ordered: an order
 * that x86 forgives is a bug there). Layer: base. */
#ifndef MTP_ATOMIC_H
#define MTP_ATOMIC_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef _Atomic(uintptr_t) mtpi_atomic_uptr;
typedef _Atomic(uint64_t) mtpi_atomic_u64;
typedef _Atomic(int) mtpi_atomic_int;
typedef _Atomic(long) mtpi_atomic_long;
typedef _Atomic(uint8_t) mtpi_atomic_u8;

/* ---- pointer-sized words ---- */
static inline uintptr_t mtp__load_relaxed(mtpi_atomic_uptr *a) {
  return atomic_load_explicit(a, memory_order_relaxed);
}
static inline uintptr_t mtp__load_acquire(mtpi_atomic_uptr *a) {
  return atomic_load_explicit(a, memory_order_acquire);
}
static inline void mtp__store_relaxed(mtpi_atomic_uptr *a, uintptr_t v) {
  atomic_store_explicit(a, v, memory_order_relaxed);
}
static inline void mtp__store_release(mtpi_atomic_uptr *a, uintptr_t v) {
  atomic_store_explicit(a, v, memory_order_release);
}
static inline uintptr_t mtp__exchange_acq_rel(mtpi_atomic_uptr *a, uintptr_t v) {
  return atomic_exchange_explicit(a, v, memory_order_acq_rel);
}
/* On failure *expected is refreshed with an acquire load: callers loop and re-derive from it,
 * and may read what the writer of that value published. */
static inline bool mtp__cas_weak_acq_rel(mtpi_atomic_uptr *a, uintptr_t *expected, uintptr_t desired) {
  return atomic_compare_exchange_weak_explicit(a, expected, desired, memory_order_acq_rel,
                                               memory_order_acquire);
}
static inline bool mtp__cas_strong_acq_rel(mtpi_atomic_uptr *a, uintptr_t *expected,
                                           uintptr_t desired) {
  return atomic_compare_exchange_strong_explicit(a, expected, desired, memory_order_acq_rel,
                                                 memory_order_relaxed);
}

/* ---- plain pointer fields that one thread writes and others read now and then: the writer
 * stores through these, other threads load through these, and the writer itself may read the
 * field plainly (it races with no one). ---- */
static inline char *mtp__cptr_load_relaxed(char *const *a) {
  return __atomic_load_n(a, __ATOMIC_RELAXED);
}
static inline void mtp__cptr_store_relaxed(char **a, char *v) {
  __atomic_store_n(a, v, __ATOMIC_RELAXED);
}
static inline uint32_t mtp__u32_load_relaxed(const uint32_t *a) {
  return __atomic_load_n(a, __ATOMIC_RELAXED);
}
static inline void mtp__u32_store_relaxed(uint32_t *a, uint32_t v) {
  __atomic_store_n(a, v, __ATOMIC_RELAXED);
}

/* ---- counters and flags ---- */
static inline uint64_t mtp__u64_load_relaxed(mtpi_atomic_u64 *a) {
  return atomic_load_explicit(a, memory_order_relaxed);
}
static inline void mtp__u64_add_relaxed(mtpi_atomic_u64 *a, uint64_t v) {
  atomic_fetch_add_explicit(a, v, memory_order_relaxed);
}
static inline uint64_t mtp__u64_fetch_add_relaxed(mtpi_atomic_u64 *a, uint64_t v) {
  return atomic_fetch_add_explicit(a, v, memory_order_relaxed);
}
static inline void mtp__int_store_relaxed(mtpi_atomic_int *a, int v) {
  atomic_store_explicit(a, v, memory_order_relaxed);
}
static inline void mtp__int_store_release(mtpi_atomic_int *a, int v) {
  atomic_store_explicit(a, v, memory_order_release);
}
static inline int mtp__int_load_relaxed(mtpi_atomic_int *a) {
  return atomic_load_explicit(a, memory_order_relaxed);
}
static inline bool mtp__int_cas_weak_acquire(mtpi_atomic_int *a, int *expected, int desired) {
  return atomic_compare_exchange_weak_explicit(a, expected, desired, memory_order_acquire,
                                               memory_order_relaxed);
}
static inline void mtp__int_store_seq_cst(mtpi_atomic_int *a, int v) {
  atomic_store_explicit(a, v, memory_order_seq_cst);
}
static inline bool mtp__int_cas_strong_seq_cst(mtpi_atomic_int *a, int *expected, int desired) {
  return atomic_compare_exchange_strong_explicit(a, expected, desired, memory_order_seq_cst,
                                                 memory_order_seq_cst);
}
static inline long mtp__long_load_relaxed(mtpi_atomic_long *a) {
  return atomic_load_explicit(a, memory_order_relaxed);
}
static inline void mtp__long_store_relaxed(mtpi_atomic_long *a, long v) {
  atomic_store_explicit(a, v, memory_order_relaxed);
}
static inline bool mtp__long_cas_weak_relaxed(mtpi_atomic_long *a, long *expected, long desired) {
  return atomic_compare_exchange_weak_explicit(a, expected, desired, memory_order_relaxed,
                                               memory_order_relaxed);
}
static inline uint8_t mtp__u8_load_relaxed(mtpi_atomic_u8 *a) {
  return atomic_load_explicit(a, memory_order_relaxed);
}
static inline void mtp__u8_store_relaxed(mtpi_atomic_u8 *a, uint8_t v) {
  atomic_store_explicit(a, v, memory_order_relaxed);
}

#endif
