/* libmtpool-debug.so's checked copies: memcpy, memmove, memset, strcpy, stpcpy, strcat and
 * strncpy (and their _FORTIFY_SOURCE forms) check with mtp_check_range that the bytes they write,
 * and those they read, lie within one live block, then copy with the C library's functions. A
 * copy past a block's end or before its start, or into a freed block, is reported when it
 * happens, not at the block's free. Only in the debugging library: in libmtpool-malloc.so every
 * copy of every program would pay for the check.
 *
 * mtpool's own copies (the core filling and moving its blocks, under its locks) are not checked:
 * a call from this library's own code goes straight to the C library's function. That test reads
 * the return address, so no function of the library may tail-call these (ctest
 * malloc_debug_exports checks the disassembly).
 * The C library's functions are found at load (dlsym, RTLD_NEXT); a copy before that, from the
 * loader's own mallocs, is done a byte at a time. glibc only. */
#undef _FORTIFY_SOURCE /* these are the functions it would wrap */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <string.h>

#include "mtpool/mtpool.h"

#define EXPORT __attribute__((visibility("default")))

/* Each is defined under a name of its own and exported under the C library's (an assembler
 * label): the library's own copies, the core's included, bind to them too, and pass straight
 * through (from_inside). */
EXPORT void *checked_memcpy(void *dst, const void *src, size_t n) __asm__("memcpy");
EXPORT void *checked_memmove(void *dst, const void *src, size_t n) __asm__("memmove");
EXPORT void *checked_memset(void *dst, int c, size_t n) __asm__("memset");
EXPORT char *checked_strcpy(char *dst, const char *src) __asm__("strcpy");
EXPORT char *checked_stpcpy(char *dst, const char *src) __asm__("stpcpy");
EXPORT char *checked_strcat(char *dst, const char *src) __asm__("strcat");
EXPORT char *checked_strncpy(char *dst, const char *src, size_t n) __asm__("strncpy");
EXPORT void *checked_memcpy_chk(void *dst, const void *src, size_t n, size_t dst_len)
    __asm__("__memcpy_chk");
EXPORT void *checked_memmove_chk(void *dst, const void *src, size_t n, size_t dst_len)
    __asm__("__memmove_chk");
EXPORT void *checked_memset_chk(void *dst, int c, size_t n, size_t dst_len) __asm__("__memset_chk");
EXPORT char *checked_strcpy_chk(char *dst, const char *src, size_t dst_len) __asm__("__strcpy_chk");
EXPORT char *checked_stpcpy_chk(char *dst, const char *src, size_t dst_len) __asm__("__stpcpy_chk");
EXPORT char *checked_strcat_chk(char *dst, const char *src, size_t dst_len) __asm__("__strcat_chk");
EXPORT char *checked_strncpy_chk(char *dst, const char *src, size_t n, size_t dst_len)
    __asm__("__strncpy_chk");
extern void __chk_fail(void) __attribute__((noreturn));

typedef void *(*copy_fn)(void *, const void *, size_t);
typedef void *(*set_fn)(void *, int, size_t);

/* Written once by load(), the constructor, usually before a second thread exists: relaxed; a
 * reader that sees NULL copies bytewise, one that sees text_hi 0 checks nothing. */
static copy_fn real_memcpy, real_memmove;
static set_fn real_memset;
static uintptr_t text_lo, text_hi; /* this library's executable segment */

static int find_text(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  uintptr_t me = (uintptr_t)arg;
  for (unsigned i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
    if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) && me >= lo && me < hi) {
      __atomic_store_n(&text_lo, lo, __ATOMIC_RELAXED);
      __atomic_store_n(&text_hi, hi, __ATOMIC_RELAXED);
      return 1;
    }
  }
  return 0;
}

__attribute__((constructor(101))) static void load(void) {
  dl_iterate_phdr(find_text, (void *)(uintptr_t)&find_text);
  __atomic_store_n(&real_memcpy, (copy_fn)dlsym(RTLD_NEXT, "memcpy"), __ATOMIC_RELAXED);
  __atomic_store_n(&real_memmove, (copy_fn)dlsym(RTLD_NEXT, "memmove"), __ATOMIC_RELAXED);
  __atomic_store_n(&real_memset, (set_fn)dlsym(RTLD_NEXT, "memset"), __ATOMIC_RELAXED);
}

/* Whether the call came from mtpool itself (or load() has not run: nothing to check with yet). */
static inline int from_inside(const void *ret) {
  uintptr_t r = (uintptr_t)ret, hi = __atomic_load_n(&text_hi, __ATOMIC_RELAXED);
  return hi == 0 || (r >= __atomic_load_n(&text_lo, __ATOMIC_RELAXED) && r < hi);
}

/* The byte-at-a-time forms, for copies before load(): volatile, so that the compiler does not
 * turn them back into calls of memcpy or memset. */
static void *bytes_move(void *dst, const void *src, size_t n) {
  volatile unsigned char *d = dst;
  const volatile unsigned char *s = src;
  if ((uintptr_t)d < (uintptr_t)s)
    for (size_t i = 0; i < n; i++) d[i] = s[i];
  else
    for (size_t i = n; i-- > 0;) d[i] = s[i];
  return dst;
}
static void *bytes_set(void *dst, int c, size_t n) {
  volatile unsigned char *d = dst;
  for (size_t i = 0; i < n; i++) d[i] = (unsigned char)c;
  return dst;
}

static void *do_copy(copy_fn *real, void *dst, const void *src, size_t n) {
  copy_fn f = __atomic_load_n(real, __ATOMIC_RELAXED);
  return f != NULL ? f(dst, src, n) : bytes_move(dst, src, n);
}
static void *do_set(void *dst, int c, size_t n) {
  set_fn f = __atomic_load_n(&real_memset, __ATOMIC_RELAXED);
  return f != NULL ? f(dst, c, n) : bytes_set(dst, c, n);
}

/* A reported copy is not done (the misuse handler's contract: the operation is abandoned). */
static int copy_ok(void *dst, const void *src, size_t n) {
  return mtp_check_range(dst, n) == 0 && mtp_check_range(src, n) == 0;
}

EXPORT __attribute__((noinline)) void *checked_memcpy(void *dst, const void *src, size_t n) {
  if (!from_inside(__builtin_return_address(0)) && !copy_ok(dst, src, n)) return dst;
  return do_copy(&real_memcpy, dst, src, n);
}

EXPORT __attribute__((noinline)) void *checked_memmove(void *dst, const void *src, size_t n) {
  if (!from_inside(__builtin_return_address(0)) && !copy_ok(dst, src, n)) return dst;
  return do_copy(&real_memmove, dst, src, n);
}

EXPORT __attribute__((noinline)) void *checked_memset(void *dst, int c, size_t n) {
  if (!from_inside(__builtin_return_address(0)) && mtp_check_range(dst, n) != 0) return dst;
  return do_set(dst, c, n);
}

/* _FORTIFY_SOURCE's forms: the compiler's bound first, as the C library's do. */
EXPORT __attribute__((noinline)) void *checked_memcpy_chk(void *dst, const void *src, size_t n,
                                                    size_t dst_len) {
  if (n > dst_len) __chk_fail();
  if (!from_inside(__builtin_return_address(0)) && !copy_ok(dst, src, n)) return dst;
  return do_copy(&real_memcpy, dst, src, n);
}

EXPORT __attribute__((noinline)) void *checked_memmove_chk(void *dst, const void *src, size_t n,
                                                     size_t dst_len) {
  if (n > dst_len) __chk_fail();
  if (!from_inside(__builtin_return_address(0)) && !copy_ok(dst, src, n)) return dst;
  return do_copy(&real_memmove, dst, src, n);
}

EXPORT __attribute__((noinline)) void *checked_memset_chk(void *dst, int c, size_t n,
                                                          size_t dst_len) {
  if (n > dst_len) __chk_fail();
  if (!from_inside(__builtin_return_address(0)) && mtp_check_range(dst, n) != 0) return dst;
  return do_set(dst, c, n);
}

/* The string copies, done as the C library's would be: their lengths first (strlen, strnlen: not
 * replaced), then one checked copy. A reported copy is not done. */
static char *str_copy(char *dst, const char *src, size_t n, const void *ret) {
  if (!from_inside(ret) && !copy_ok(dst, src, n)) return NULL;
  do_copy(&real_memcpy, dst, src, n);
  return dst + n;
}

EXPORT __attribute__((noinline)) char *checked_strcpy(char *dst, const char *src) {
  (void)str_copy(dst, src, strlen(src) + 1, __builtin_return_address(0));
  return dst;
}

EXPORT __attribute__((noinline)) char *checked_stpcpy(char *dst, const char *src) {
  size_t n = strlen(src);
  char *end = str_copy(dst, src, n + 1, __builtin_return_address(0));
  return end != NULL ? end - 1 : dst + n;
}

EXPORT __attribute__((noinline)) char *checked_strcat(char *dst, const char *src) {
  (void)str_copy(dst + strlen(dst), src, strlen(src) + 1, __builtin_return_address(0));
  return dst;
}

/* strncpy writes n bytes: the source's (up to n), then zeros. */
static char *strn_copy(char *dst, const char *src, size_t n, const void *ret) {
  size_t len = strnlen(src, n);
  if (!from_inside(ret) && (mtp_check_range(dst, n) != 0 || mtp_check_range(src, len) != 0))
    return dst;
  do_copy(&real_memcpy, dst, src, len);
  do_set(dst + len, 0, n - len);
  return dst;
}

EXPORT __attribute__((noinline)) char *checked_strncpy(char *dst, const char *src, size_t n) {
  return strn_copy(dst, src, n, __builtin_return_address(0));
}

EXPORT __attribute__((noinline)) char *checked_strcpy_chk(char *dst, const char *src,
                                                          size_t dst_len) {
  size_t n = strlen(src) + 1;
  if (n > dst_len) __chk_fail();
  (void)str_copy(dst, src, n, __builtin_return_address(0));
  return dst;
}

EXPORT __attribute__((noinline)) char *checked_stpcpy_chk(char *dst, const char *src,
                                                          size_t dst_len) {
  size_t n = strlen(src);
  if (n + 1 > dst_len) __chk_fail();
  char *end = str_copy(dst, src, n + 1, __builtin_return_address(0));
  return end != NULL ? end - 1 : dst + n;
}

EXPORT __attribute__((noinline)) char *checked_strcat_chk(char *dst, const char *src,
                                                          size_t dst_len) {
  size_t d = strlen(dst), n = strlen(src) + 1;
  if (d + n > dst_len) __chk_fail();
  (void)str_copy(dst + d, src, n, __builtin_return_address(0));
  return dst;
}

EXPORT __attribute__((noinline)) char *checked_strncpy_chk(char *dst, const char *src, size_t n,
                                                      size_t dst_len) {
  if (n > dst_len) __chk_fail();
  return strn_copy(dst, src, n, __builtin_return_address(0));
}
