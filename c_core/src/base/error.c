/* Misuse reports: one process-wide handler; the default prints the fault and the pointer on
 * stderr, without allocating, and aborts. Layer: base. */
#include <stdlib.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base.h"
#include "unwind.h"

/* The allocation site of the block reported next (mtp__error_origin): this thread's own. */
static MTP_TLS void *const *tl_origin;
static MTP_TLS unsigned tl_origin_depth;

void mtp__error_origin(void *const *pc, unsigned depth) {
  tl_origin = depth ? pc : NULL;
  tl_origin_depth = depth;
}

/* fn is published with release after arg, and read with acquire before arg: a reporting thread
 * sees the argument stored with (or after) the handler it calls. Two threads setting handlers at
 * once may pair one's handler with the other's argument: setting it is a start-up affair. Function
 * pointers travel as integers (GNU C guarantees the round trip). */
static mtpi_atomic_uptr handler, handler_arg;

void mtp_set_error_handler(mtp_error_fn fn, void *arg) {
  mtp__store_relaxed(&handler_arg, (uintptr_t)arg);
  mtp__store_release(&handler, (uintptr_t)fn);
}

static const char *code_name(int err) {
  switch (err) {
    case MTP_ERR_DOUBLE_FREE: return "double free";
    case MTP_ERR_INVALID_POINTER: return "invalid pointer";
    case MTP_ERR_WRONG_SIZE: return "wrong size";
    case MTP_ERR_OVERFLOW: return "buffer overflow";
    case MTP_ERR_USE_AFTER_FREE: return "use after free";
    default: return "error";
  }
}

void mtp__error(int err, const char *what, const void *p) {
  mtp_error_fn fn = (mtp_error_fn)mtp__load_acquire(&handler);
  if (fn != NULL) {
    int e = errno; /* a report leaves errno as it was (frees never change it: mtpool.h) */
    fn(err, what, (void *)p, (void *)mtp__load_relaxed(&handler_arg));
    errno = e;
    return;
  }
  char buf[256];
  size_t n = 0;
  const char *parts[] = {"mtpool: ", code_name(err), ": ", what, ": pointer 0x"};
  for (unsigned i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
    size_t l = strlen(parts[i]);
    if (n + l >= sizeof(buf) - 24) l = sizeof(buf) - 24 - n;
    memcpy(buf + n, parts[i], l);
    n += l;
  }
  uintptr_t v = (uintptr_t)p;
  char hex[17];
  int h = 16;
  hex[h] = 0;
  do {
    hex[--h] = "0123456789abcdef"[v & 15];
    v >>= 4;
  } while (v);
  memcpy(buf + n, hex + h, (size_t)(16 - h));
  n += (size_t)(16 - h);
  buf[n++] = '\n';
  ssize_t w = write(2, buf, n);
  (void)w;
  if (tl_origin_depth > 0) { /* set only where the unwinder works (glibc) */
    static const char at[] = "mtpool: the block was allocated at:\n";
    w = write(2, at, sizeof at - 1);
    (void)w;
    backtrace_symbols_fd(tl_origin, (int)tl_origin_depth, 2);
  }
  abort();
}

void mtp__assert_fail(const char *expr, const char *file, int line) {
  char buf[320];
  char num[12], *e = num + sizeof(num);
  *--e = 0;
  unsigned v = line > 0 ? (unsigned)line : 0;
  do *--e = (char)('0' + v % 10);
  while ((v /= 10) != 0);
  size_t n = 0;
  const char *parts[] = {"mtpool: internal check failed: ", expr, " at ", file, ":", e, "\n"};
  for (unsigned i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
    size_t l = strlen(parts[i]);
    if (n + l > sizeof(buf)) l = sizeof(buf) - n;
    memcpy(buf + n, parts[i], l);
    n += l;
  }
  ssize_t w = write(2, buf, n);
  (void)w;
  abort();
}

void mtp__text_escape(char *buf, size_t size, const char *s) {
  size_t n = 0;
  for (; *s && n + 5 < size; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      buf[n++] = '\\';
      buf[n++] = (char)c;
    } else if (c < 0x20 || c >= 0x7f) {
      n += (size_t)snprintf(buf + n, size - n, "\\x%02x", c);
    } else {
      buf[n++] = (char)c;
    }
  }
  buf[n] = 0;
}
