/* malloc_info writes pool names as XML attribute text: a pool named with a quote, markup
 * characters, an apostrophe, a tab and a control byte appears escaped, and the document stays
 * well formed (every '<' opens a tag the test knows; no raw name). Preloaded or linked. */
#include <malloc.h>
#include <string.h>

#include "malloc_util.h"

int main(void) {
  void (*opt_init)(mtp_options_t *) = (void (*)(mtp_options_t *))mu_sym("mtp_options_init");
  mtp_pool_t *(*create)(const mtp_options_t *) =
      (mtp_pool_t * (*)(const mtp_options_t *)) mu_sym("mtp_pool_create");
  mtp_options_t o;
  opt_init(&o);
  o.name = "a\"b<c>d&e'f\tg\001h";
  mtp_pool_t *p = create(&o);
  CHECK(p != NULL);
  /* blocks of the 120-byte class and of the last (32 KiB) class, which mtp_stats_t.classes has
   * no room for: malloc_info lists every class */
  void *b120 = malloc(120), *b32k = malloc(32768);
  CHECK(mu_owned(b120) && mu_owned(b32k));
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  CHECK(f != NULL);
  CHECK(malloc_info(0, f) == 0);
  fclose(f);
  const char *want = "name=\"a&quot;b&lt;c&gt;d&amp;e&apos;f&#x9;g\\x01h\"";
  int ok = strstr(buf, want) != NULL;
  if (!ok) fprintf(stderr, "escaped name %s not in:\n%s\n", want, buf);
  CHECK(ok);
  CHECK(strstr(buf, o.name) == NULL);
  CHECK(strstr(buf, "<size from=\"120\" to=\"120\" total=\"120\" count=\"1\"") != NULL);
  CHECK(strstr(buf, "<size from=\"32768\" to=\"32768\" total=\"32768\" count=\"1\"") != NULL);
  CHECK(strchr(buf, '\001') == NULL && strchr(buf, '\t') == NULL);
  /* every '<' starts one of malloc_info's own tags */
  static const char *const tags[] = {"<malloc", "</malloc", "<heap", "</heap", "<sizes",
                                     "</sizes", "<size ", "<total", "<system", "<aspace", NULL};
  for (const char *s = strchr(buf, '<'); s; s = strchr(s + 1, '<')) {
    int known = 0;
    for (int i = 0; tags[i]; i++) known |= strncmp(s, tags[i], strlen(tags[i])) == 0;
    if (!known) fprintf(stderr, "unexpected markup at: %.40s\n", s);
    CHECK(known);
  }
  free(buf);
  free(b120);
  free(b32k);
  printf("ok\n");
  return 0;
}
