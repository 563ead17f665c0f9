/* Allocates known blocks, then writes the statistics as JSON (mtp_print_stats_json) on stdout;
 * check_stats_json.py reads the document back. Built twice: linked to the core (tests/api), and,
 * with MTP_VIA_DROPIN, without mtpool for the drop-in malloc (tests/malloc: the API found with
 * dlsym, malloc preloaded, and MTPOOL_SHOW_STATS=json's document on stderr at exit checked too;
 * stdout's buffer is then allocated from mtpool while the report is written). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#if defined(MTP_VIA_DROPIN)
#include "malloc/malloc_util.h"
#define SYM(type, name) ((type)mu_sym(#name))
#define DEFAULT_ALLOC malloc
#else
#include "mtpool/mtpool.h"
#include "testhelper.h"
#define SYM(type, name) (name)
#define DEFAULT_ALLOC mtp_alloc
#endif

/* The test pool's name: a quote, a backslash, a newline, a UTF-8 character and a byte that is not
 * UTF-8 (check_stats_json.py expects it back as U+FFFD). */
#define POOL_NAME "json \"pool\"\\\n\xc3\xa9\xff"

int main(void) {
  int (*print_json)(FILE *) = SYM(int (*)(FILE *), mtp_print_stats_json);
  void (*opt_init)(mtp_options_t *) = SYM(void (*)(mtp_options_t *), mtp_options_init);
  mtp_pool_t *(*create)(const mtp_options_t *) =
      SYM(mtp_pool_t * (*)(const mtp_options_t *), mtp_pool_create);
  void *(*pool_alloc)(mtp_pool_t *, size_t) = SYM(void *(*)(mtp_pool_t *, size_t), mtp_pool_alloc);
  CHECK(print_json(NULL) == EINVAL);
  FILE *ro = fopen("/dev/null", "r");
  CHECK(ro != NULL && print_json(ro) == EIO); /* a stream that refuses writes */
  fclose(ro);
  mtp_options_t o;
  opt_init(&o);
  o.name = POOL_NAME;
  mtp_pool_t *pool = create(&o);
  CHECK(pool != NULL);
  /* the test pool: one block of each class from 8 to 128 B (asked 7 bytes short of it), one of
   * 32 KiB, one medium and one large; kept to the end */
  for (size_t n = 8; n <= 128; n += 8) CHECK(pool_alloc(pool, n - 7) != NULL);
  CHECK(pool_alloc(pool, 32768) != NULL);
  CHECK(pool_alloc(pool, (size_t)100 << 10) != NULL);
  CHECK(pool_alloc(pool, (size_t)1 << 20) != NULL);
  /* the default pool: a 120-byte block, one of the last class and a zero-size one */
  CHECK(DEFAULT_ALLOC(120) != NULL && DEFAULT_ALLOC(32768) != NULL && DEFAULT_ALLOC(0) != NULL);
  CHECK(print_json(stdout) == 0);
  return 0;
}
