/* Bug: a large block's bookkeeping record could lie right after the block's mapping (records
 * live in chunks that mmap places next to other mappings): a one-byte overflow corrupted it, and
 * mtp_free then reported "invalid pointer" and leaked the block. Now every chunk of records (and
 * every region header) sits behind a PROT_NONE guard page, so the byte after a large block is
 * either user memory or inaccessible, never a record.
 *
 * The test maps thousands of page-sized large blocks (so new chunks of records get mapped in
 * between) and writes one byte past each block whenever that byte is accessible (probed with a
 * write(2) from it, which fails with EFAULT instead of faulting), then frees them all: no free
 * may be reported. It runs in a child process, since the overflow may land in memory that is not
 * mtpool's. Public API only. */
#include <errno.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mtpool/mtpool.h"
#include "testhelper.h"
#if TH_ASAN
#include <sanitizer/asan_interface.h>
#endif

enum { N = 6000, SIZE = 40960 };
static int reports;
static void on_error(int err, const char *msg, void *p, void *arg) {
  (void)err, (void)p, (void)arg;
  if (reports++ == 0) fprintf(stderr, "reported: %s\n", msg);
}

static int accessible(int fd[2], uintptr_t at) {
  char c;
#if TH_ASAN
  /* ASan's own memory (shadow "internal") may follow a mapping: not ours, and not to be probed */
  if (__asan_address_is_poisoned((const void *)at)) return 0;
#endif
  /* through an integer: the compiler must not reason about the block's bounds here */
  if (write(fd[1], (const void *)at, 1) != 1) return 0; /* EFAULT: unmapped or a guard page */
  return read(fd[0], &c, 1) == 1;
}

static int child(void) {
  static char *blocks[N];
  int fd[2];
  if (pipe(fd) != 0) return 2;
  mtp_set_error_handler(on_error, NULL);
  int written = 0;
  for (int i = 0; i < N; i++) {
    blocks[i] = mtp_alloc(SIZE);
    if (blocks[i] == NULL) return 3;
    if (accessible(fd, (uintptr_t)blocks[i] + SIZE)) {
      *(volatile char *)((uintptr_t)blocks[i] + SIZE) ^= 0x5a; /* the one-byte overflow */
      written++;
    }
  }
  for (int i = 0; i < N; i++) mtp_free(blocks[i]);
  fprintf(stderr, "%d overflows written, %d frees reported\n", written, reports);
  return reports == 0 ? 0 : 1;
}

static void test_overflow_past_large_blocks(void) { th_fork_check(child); }

int main(void) {
  RUN(test_overflow_past_large_blocks);
  DONE();
}
