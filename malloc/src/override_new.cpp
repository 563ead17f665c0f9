// The 20 replaceable C++ allocation functions of the drop-in malloc, over mtpool's default pool.
// new: retries through the new-handler, then throws std::bad_alloc (nothrow forms: nullptr).
// Sized delete goes to mtp_free_sized, which checks the size against the block's class.
// Checked mode (MTPOOL_CHECK) records in each small block whether new, new[] or malloc made it and
// reports a delete of the other form, or a free of a new block (heap/checked.c).
//
// The library does not link the C++ runtime: a C program that preloads it would load and
// relocate libstdc++ (about 1 MiB resident, a share of its start-up time) for nothing. Only the
// out-of-memory paths need the runtime (the new-handler, throwing std::bad_alloc, catching what a
// handler throws); they find it at that moment with dlsym. A program that calls operator new has
// it loaded. So nothing here may need the runtime at link time: no try/catch, no object with a
// destructor, no throw expression (an exception thrown by a handler only passes through these
// frames, which needs their unwind tables and no personality routine).
#include <dlfcn.h>

#include <cstddef>
#include <cstdlib>
#include <new>

#include "mtpool/mtpool.h"

#define EXPORT __attribute__((visibility("default")))

// The core's checked mode (heap/heap.h), inside this library.
// noexcept (C functions do not throw). The file is built without exception tables
// (malloc/CMakeLists.txt): libstdc++ loaded with this library doubled a small program's
// start-up faults. Hidden, as the core's internals are: the flag is read by one instruction,
// not through an address loaded first.
#pragma GCC visibility push(hidden)
extern "C" {
extern bool mtp__checked_forms;
void mtp__checked_set_form(void *p, unsigned form) noexcept;
bool mtp__checked_delete(void *p, std::size_t size, bool sized, unsigned form) noexcept;
// mtp_alloc, whose failure fail(size) answers (api/alloc.c): fail may throw through it.
void *mtp__alloc_or(std::size_t size, void *(*fail)(std::size_t));
}
#pragma GCC visibility pop

namespace {

enum : unsigned { kFormNew = 1, kFormNewArray = 2 };  // MTP_FORM_* (heap/heap.h)

inline bool forms_on() { return __builtin_expect(__atomic_load_n(&mtp__checked_forms, __ATOMIC_RELAXED), 0); }

// A new block: its form recorded when the default pool is checked.
inline void *formed(void *p, bool array) {
  if (forms_on() && p != nullptr) mtp__checked_set_form(p, array ? kFormNewArray : kFormNew);
  return p;
}
// The same for the unaligned forms, whose usual path (no forms) is one jump to the core's
// mtp__alloc_or; `fail` answers its failure (new-handler loop, throw or nullptr).
[[gnu::noinline]] void *formed_slow(std::size_t n, void *(*fail)(std::size_t), bool array) {
  return formed(mtp__alloc_or(n, fail), array);
}
inline void *new_or(std::size_t n, void *(*fail)(std::size_t), bool array) {
  if (forms_on()) return formed_slow(n, fail, array);
  return mtp__alloc_or(n, fail);
}
// A delete while forms are checked: checked mode's, else the core's. Out of line, so that the
// usual path is one jump to the core's free, with no registers saved around a call.
[[gnu::noinline]] void del_formed(void *p, std::size_t n, bool sized, bool array) {
  if (mtp__checked_delete(p, n, sized, array ? kFormNewArray : kFormNew)) return;
  if (sized)
    mtp_free_sized(p, n);
  else
    mtp_free(p);
}
inline void del(void *p, bool array) {
  if (forms_on()) return del_formed(p, 0, false, array);
  mtp_free(p);
}
inline void del_sized(void *p, std::size_t n, bool array) {
  if (forms_on()) return del_formed(p, n, true, array);
  mtp_free_sized(p, n);
}

using handler_getter = std::new_handler (*)() noexcept;
using thrower = void (*)();
using nothrow_new = void *(*)(std::size_t, const std::nothrow_t &) noexcept;
using nothrow_new_aligned = void *(*)(std::size_t, std::align_val_t,
                                      const std::nothrow_t &) noexcept;

// The C++ runtime's function `name`, or nullptr. next: the definition after ours (the runtime's
// own nothrow operator new, where RTLD_DEFAULT would find ours).
void *runtime_sym(const char *name, bool next) { return dlsym(next ? RTLD_NEXT : RTLD_DEFAULT, name); }

std::new_handler current_handler() {
  auto get = reinterpret_cast<handler_getter>(runtime_sym("_ZSt15get_new_handlerv", false));
  return get ? get() : nullptr;
}

[[noreturn]] void throw_bad_alloc() {
  auto t = reinterpret_cast<thrower>(runtime_sym("_ZSt17__throw_bad_allocv", false));
  if (t) t();
  std::abort();  // no C++ runtime in the process: nobody could catch it anyway
}

// Out of memory: run the new-handler until it gives up (no handler, or it throws through here).
[[gnu::noinline]] void *new_retry(std::size_t n, std::size_t align) {
  for (;;) {
    void *p = align ? mtp_alloc_aligned(n, align) : mtp_alloc(n);
    if (p != nullptr) return p;
    std::new_handler h = current_handler();
    if (h == nullptr) throw_bad_alloc();
    h();
  }
}

// The nothrow forms, out of memory: the runtime's own nothrow operator new calls the throwing
// form (ours, through the dynamic linker) and catches what it throws, as the standard describes.
[[gnu::noinline]] void *new_nothrow_retry(std::size_t n, bool array) noexcept {
  auto f = reinterpret_cast<nothrow_new>(
      runtime_sym(array ? "_ZnamRKSt9nothrow_t" : "_ZnwmRKSt9nothrow_t", true));
  return f ? f(n, std::nothrow_t{}) : nullptr;
}
[[gnu::noinline]] void *new_nothrow_aligned_retry(std::size_t n, std::align_val_t a,
                                                  bool array) noexcept {
  auto f = reinterpret_cast<nothrow_new_aligned>(runtime_sym(
      array ? "_ZnamSt11align_val_tRKSt9nothrow_t" : "_ZnwmSt11align_val_tRKSt9nothrow_t", true));
  return f ? f(n, a, std::nothrow_t{}) : nullptr;
}

// mtp__alloc_or's failure answers for the unaligned forms.
void *fail_plain(std::size_t n) { return new_retry(n, 0); }
void *fail_nothrow(std::size_t n) noexcept { return new_nothrow_retry(n, false); }
void *fail_nothrow_array(std::size_t n) noexcept { return new_nothrow_retry(n, true); }
inline void *new_aligned(std::size_t n, std::align_val_t a) {
  void *p = mtp_alloc_aligned(n, static_cast<std::size_t>(a));
  return p != nullptr ? p : new_retry(n, static_cast<std::size_t>(a));
}
inline void *new_aligned_nothrow(std::size_t n, std::align_val_t a, bool array) noexcept {
  void *p = mtp_alloc_aligned(n, static_cast<std::size_t>(a));
  return p != nullptr ? p : new_nothrow_aligned_retry(n, a, array);
}

}  // namespace

EXPORT void *operator new(std::size_t n) { return new_or(n, fail_plain, false); }
EXPORT void *operator new[](std::size_t n) { return new_or(n, fail_plain, true); }
EXPORT void *operator new(std::size_t n, const std::nothrow_t &) noexcept {
  return new_or(n, fail_nothrow, false);
}
EXPORT void *operator new[](std::size_t n, const std::nothrow_t &) noexcept {
  return new_or(n, fail_nothrow_array, true);
}
EXPORT void *operator new(std::size_t n, std::align_val_t a) {
  return formed(new_aligned(n, a), false);
}
EXPORT void *operator new[](std::size_t n, std::align_val_t a) {
  return formed(new_aligned(n, a), true);
}
EXPORT void *operator new(std::size_t n, std::align_val_t a, const std::nothrow_t &) noexcept {
  return formed(new_aligned_nothrow(n, a, false), false);
}
EXPORT void *operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t &) noexcept {
  return formed(new_aligned_nothrow(n, a, true), true);
}

EXPORT void operator delete(void *p) noexcept { del(p, false); }
EXPORT void operator delete[](void *p) noexcept { del(p, true); }
EXPORT void operator delete(void *p, std::size_t n) noexcept { del_sized(p, n, false); }
EXPORT void operator delete[](void *p, std::size_t n) noexcept { del_sized(p, n, true); }
EXPORT void operator delete(void *p, const std::nothrow_t &) noexcept { del(p, false); }
EXPORT void operator delete[](void *p, const std::nothrow_t &) noexcept { del(p, true); }
EXPORT void operator delete(void *p, std::align_val_t) noexcept { del(p, false); }
EXPORT void operator delete[](void *p, std::align_val_t) noexcept { del(p, true); }
EXPORT void operator delete(void *p, std::size_t n, std::align_val_t) noexcept {
  del_sized(p, n, false);
}
EXPORT void operator delete[](void *p, std::size_t n, std::align_val_t) noexcept {
  del_sized(p, n, true);
}
EXPORT void operator delete(void *p, std::align_val_t, const std::nothrow_t &) noexcept {
  del(p, false);
}
EXPORT void operator delete[](void *p, std::align_val_t, const std::nothrow_t &) noexcept {
  del(p, true);
}
