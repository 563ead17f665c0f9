// The 20 replaceable C++ allocation functions of the drop-in malloc, over mtpool's default pool.
// new: retries through the new-handler, then throws std::bad_alloc (nothrow forms: nullptr).
// Sized delete goes to mtp_free_sized, which checks the size against the block's class.
#include <cstddef>
#include <new>

#include "mtpool/mtpool.h"

#define EXPORT __attribute__((visibility("default")))

namespace {

// Out of memory: run the new-handler until it gives up (no handler, or it throws).
[[gnu::noinline]] void *new_retry(std::size_t n, std::size_t align, bool nothrow) {
  for (;;) {
    void *p = align ? mtp_alloc_aligned(n, align) : mtp_alloc(n);
    if (p != nullptr) return p;
    std::new_handler h = std::get_new_handler();
    if (h == nullptr) {
      if (nothrow) return nullptr;
      throw std::bad_alloc();
    }
    if (!nothrow) {
      h();
      continue;
    }
    try {
      h();
    } catch (...) {
      return nullptr;
    }
  }
}

inline void *new_plain(std::size_t n) {
  void *p = mtp_alloc(n);
  return p != nullptr ? p : new_retry(n, 0, false);
}
inline void *new_nothrow(std::size_t n) noexcept {
  void *p = mtp_alloc(n);
  return p != nullptr ? p : new_retry(n, 0, true);
}
inline void *new_aligned(std::size_t n, std::align_val_t a) {
  void *p = mtp_alloc_aligned(n, static_cast<std::size_t>(a));
  return p != nullptr ? p : new_retry(n, static_cast<std::size_t>(a), false);
}
inline void *new_aligned_nothrow(std::size_t n, std::align_val_t a) noexcept {
  void *p = mtp_alloc_aligned(n, static_cast<std::size_t>(a));
  return p != nullptr ? p : new_retry(n, static_cast<std::size_t>(a), true);
}

}  // namespace

EXPORT void *operator new(std::size_t n) { return new_plain(n); }
EXPORT void *operator new[](std::size_t n) { return new_plain(n); }
EXPORT void *operator new(std::size_t n, const std::nothrow_t &) noexcept { return new_nothrow(n); }
EXPORT void *operator new[](std::size_t n, const std::nothrow_t &) noexcept {
  return new_nothrow(n);
}
EXPORT void *operator new(std::size_t n, std::align_val_t a) { return new_aligned(n, a); }
EXPORT void *operator new[](std::size_t n, std::align_val_t a) { return new_aligned(n, a); }
EXPORT void *operator new(std::size_t n, std::align_val_t a, const std::nothrow_t &) noexcept {
  return new_aligned_nothrow(n, a);
}
EXPORT void *operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t &) noexcept {
  return new_aligned_nothrow(n, a);
}

EXPORT void operator delete(void *p) noexcept { mtp_free(p); }
EXPORT void operator delete[](void *p) noexcept { mtp_free(p); }
EXPORT void operator delete(void *p, std::size_t n) noexcept { mtp_free_sized(p, n); }
EXPORT void operator delete[](void *p, std::size_t n) noexcept { mtp_free_sized(p, n); }
EXPORT void operator delete(void *p, const std::nothrow_t &) noexcept { mtp_free(p); }
EXPORT void operator delete[](void *p, const std::nothrow_t &) noexcept { mtp_free(p); }
EXPORT void operator delete(void *p, std::align_val_t) noexcept { mtp_free(p); }
EXPORT void operator delete[](void *p, std::align_val_t) noexcept { mtp_free(p); }
EXPORT void operator delete(void *p, std::size_t n, std::align_val_t) noexcept {
  mtp_free_sized(p, n);
}
EXPORT void operator delete[](void *p, std::size_t n, std::align_val_t) noexcept {
  mtp_free_sized(p, n);
}
EXPORT void operator delete(void *p, std::align_val_t, const std::nothrow_t &) noexcept {
  mtp_free(p);
}
EXPORT void operator delete[](void *p, std::align_val_t, const std::nothrow_t &) noexcept {
  mtp_free(p);
}
