/* Options: defaults, validation, and the MTPOOL_<FIELD> environment variables the default pool
 * reads once at its creation. Layer: base. */
#include <stdlib.h>
#include <string.h>

#include "base.h"
#include "os.h"

/* The default pool's checked mode when MTPOOL_CHECK is not set: on in libmtpool-debug.so, whose
 * build compiles this file alone again with MTPOOL_CHECK_DEFAULT=1. */
#ifndef MTPOOL_CHECK_DEFAULT
#define MTPOOL_CHECK_DEFAULT 0
#endif

void mtp_options_init(mtp_options_t *opt) {
  if (opt == NULL) return;
  opt->name = NULL;
  opt->purge_delay_ms = 250;
  opt->thread_cache_bytes = 2048 * 1024;
  opt->check = 0;
}

static bool env_long(const char *name, long *out) {
  const char *v = getenv(name);
  if (v == NULL || *v == 0) return false;
  char *end;
  long x = strtol(v, &end, 10);
  if (*end != 0) return false; /* not a number: keep the default */
  *out = x;
  return true;
}

void mtp__options_from_env(mtp_options_t *opt) {
  long v;
  opt->check = MTPOOL_CHECK_DEFAULT;
  const char *name = getenv("MTPOOL_NAME");
  if (name && *name) opt->name = name;
  if (env_long("MTPOOL_PURGE_DELAY_MS", &v)) opt->purge_delay_ms = v;
  if (env_long("MTPOOL_THREAD_CACHE_BYTES", &v) && v >= 0) opt->thread_cache_bytes = (size_t)v;
  if (env_long("MTPOOL_CHECK", &v)) opt->check = v != 0;
}

void mtp__options_sanitize(mtp_options_t *opt) {
  if (opt->purge_delay_ms < -1) opt->purge_delay_ms = -1;
  if (opt->purge_delay_ms > 3600000) opt->purge_delay_ms = 3600000;
  if (opt->thread_cache_bytes > ((size_t)1 << 30)) opt->thread_cache_bytes = (size_t)1 << 30;
  opt->check = opt->check != 0;
}

int mtp__hugepages_parse(const char *v) {
  if (v == NULL || *v == 0 || strcmp(v, "auto") == 0) return MTP_HUGE_AUTO;
  if (strcmp(v, "system") == 0) return MTP_HUGE_SYSTEM;
  if (strcmp(v, "0") == 0 || strcmp(v, "never") == 0 || strcmp(v, "off") == 0) return MTP_HUGE_NEVER;
  if (strcmp(v, "1") == 0 || strcmp(v, "always") == 0 || strcmp(v, "on") == 0) return MTP_HUGE_ALWAYS;
  return -1;
}

int mtp__huge_fresh_advice(bool grow) {
  switch (mtp__hugepages_mode()) {
  case MTP_HUGE_NEVER:
    return 0;
  case MTP_HUGE_ALWAYS:
    return 1;
  case MTP_HUGE_AUTO:
    return grow ? 1 : mtp__os_thp_always() ? 0 : -1;
  default:
    return -1;
  }
}

bool mtp__huge_collapses(void) {
  int mode = mtp__hugepages_mode();
  return mode == MTP_HUGE_AUTO || mode == MTP_HUGE_ALWAYS;
}

int mtp__hugepages_mode(void) {
  /* -1: not read yet. relaxed: every thread parses the same string to the same value. */
  static mtpi_atomic_int cached = -1;
  int m = mtp__int_load_relaxed(&cached);
  if (m < 0) {
    m = mtp__hugepages_parse(getenv("MTPOOL_HUGEPAGES"));
    if (m < 0) m = MTP_HUGE_AUTO; /* not a value we know: keep the default, as the others */
    mtp__int_store_relaxed(&cached, m);
  }
  return m;
}
