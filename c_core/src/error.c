/* Misuse reports: one process-wide handler; the default prints the fault and the pointer on
 * stderr, without allocating, and aborts. Depends on nothing. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

static _Atomic(mtp_error_fn) handler;
static _Atomic(void *) handler_arg;

void mtp_set_error_handler(mtp_error_fn fn, void *arg) {
  atomic_store(&handler_arg, arg);
  atomic_store(&handler, fn);
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
  mtp_error_fn fn = atomic_load(&handler);
  if (fn != NULL) {
    fn(err, what, (void *)p, atomic_load(&handler_arg));
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
  abort();
}
