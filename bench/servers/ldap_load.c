/* ldap_load: the LDAP client of the slapd benchmark (bench/servers/run.sh), over libldap.
 *
 * Modes (each thread has its own connection, bound as the benchmark's rootdn):
 *   scan     one subtree search from the base returning every entry; prints entries and seconds
 *   search   THREADS threads for SECONDS each doing equality searches (uid=userN, N uniform in
 *            0..ENTRIES-1, every attribute returned); prints operations per second
 *   mix      as search, but one operation in four is a modify that replaces the entry's
 *            description with a new one of a random length in MIN..MAX bytes (--desc, default
 *            100:2000; MIN:MAX:log draws the length log-uniformly, as gen_ldif.py does)
 *
 * Bounded: search and mix stop after SECONDS, or once OPS operations (all threads together) were
 * started when --ops is given (equal work for every allocator: what a server holds after a mix
 * follows how many entries it replaced); every call carries a 30 s network/operation timeout;
 * scan gives up after --timeout seconds. Talks only to the URI given (the script passes
 * ldap://127.0.0.1:PORT/).
 *
 * usage: ldap_load --uri U --base B --binddn D --pw P --mode scan|search|mix
 *                  [--entries N] [--threads T] [--seconds S] [--ops N] [--timeout S] [--seed X]
 *                  [--desc MIN:MAX[:log]]
 * Prints one JSON line; exit status 0 when no operation failed.
 */
#define _GNU_SOURCE
#define LDAP_DEPRECATED 0
#include <ldap.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *g_uri, *g_base, *g_binddn, *g_pw, *g_mode = "search";
static unsigned long g_entries = 100000;
static int g_threads = 1;
static size_t g_desc_min = 100, g_desc_max = 2000; /* --desc */
static int g_desc_log;
static double g_seconds = 5, g_timeout = 300;
static unsigned long g_seed = 1;
static unsigned long g_ops_max; /* --ops: 0 = no bound but the time */
static atomic_ulong g_ops, g_searches, g_modifies, g_errors, g_started;
static double g_deadline;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static unsigned long rnd(unsigned long *s) { /* xorshift64* */
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717UL;
}

static LDAP *open_conn(void) {
  LDAP *ld = NULL;
  if (ldap_initialize(&ld, g_uri) != LDAP_SUCCESS) {
    fprintf(stderr, "ldap_load: ldap_initialize(%s) failed\n", g_uri);
    return NULL;
  }
  int v3 = LDAP_VERSION3;
  struct timeval tv = {.tv_sec = 30};
  ldap_set_option(ld, LDAP_OPT_PROTOCOL_VERSION, &v3);
  ldap_set_option(ld, LDAP_OPT_NETWORK_TIMEOUT, &tv);
  ldap_set_option(ld, LDAP_OPT_TIMEOUT, &tv);
  ldap_set_option(ld, LDAP_OPT_REFERRALS, LDAP_OPT_OFF);
  struct berval cred = {.bv_len = strlen(g_pw), .bv_val = (char *)g_pw};
  int rc = ldap_sasl_bind_s(ld, g_binddn, LDAP_SASL_SIMPLE, &cred, NULL, NULL, NULL);
  if (rc != LDAP_SUCCESS) {
    fprintf(stderr, "ldap_load: bind as %s: %s\n", g_binddn, ldap_err2string(rc));
    ldap_unbind_ext_s(ld, NULL, NULL);
    return NULL;
  }
  return ld;
}

static int do_scan(void) {
  LDAP *ld = open_conn();
  if (!ld) return 1;
  double t0 = now_s();
  int msgid, rc;
  rc = ldap_search_ext(ld, g_base, LDAP_SCOPE_SUBTREE, "(objectClass=*)", NULL, 0, NULL, NULL,
                       NULL, LDAP_NO_LIMIT, &msgid);
  if (rc != LDAP_SUCCESS) {
    fprintf(stderr, "ldap_load: scan: %s\n", ldap_err2string(rc));
    return 1;
  }
  unsigned long entries = 0, bytes = 0;
  int result = -1, timed_out = 0;
  for (;;) {
    if (now_s() - t0 > g_timeout) {
      timed_out = 1;
      ldap_abandon_ext(ld, msgid, NULL, NULL);
      break;
    }
    LDAPMessage *m = NULL;
    struct timeval tv = {.tv_sec = 30};
    rc = ldap_result(ld, msgid, LDAP_MSG_ONE, &tv, &m);
    if (rc <= 0) { /* error or 30 s without a message */
      fprintf(stderr, "ldap_load: scan: no result (%d)\n", rc);
      break;
    }
    if (rc == LDAP_RES_SEARCH_ENTRY) {
      entries++;
      struct berval **v = ldap_get_values_len(ld, m, "description");
      if (v) {
        bytes += v[0]->bv_len;
        ldap_value_free_len(v);
      }
    } else if (rc == LDAP_RES_SEARCH_RESULT) {
      int err = 0;
      ldap_parse_result(ld, m, &err, NULL, NULL, NULL, NULL, 0);
      result = err;
      ldap_msgfree(m);
      break;
    }
    ldap_msgfree(m);
  }
  double secs = now_s() - t0;
  ldap_unbind_ext_s(ld, NULL, NULL);
  printf("{\"mode\": \"scan\", \"entries\": %lu, \"description_bytes\": %lu, \"seconds\": %.3f, "
         "\"result\": %d, \"timeout\": %s}\n",
         entries, bytes, secs, result, timed_out ? "true" : "false");
  return (result == LDAP_SUCCESS && !timed_out) ? 0 : 1;
}

/* A description length in g_desc_min..g_desc_max, uniform or log-uniform (--desc). */
static size_t desc_len(unsigned long *s) {
  size_t span = g_desc_max - g_desc_min + 1;
  if (!g_desc_log) return g_desc_min + rnd(s) % span;
  double u = (double)(rnd(s) >> 11) / 9007199254740992.0; /* [0, 1) */
  double lo = log((double)g_desc_min), hi = log((double)g_desc_max + 1);
  size_t n = (size_t)exp(lo + u * (hi - lo));
  return n < g_desc_min ? g_desc_min : n > g_desc_max ? g_desc_max : n;
}

/* Parse --desc MIN:MAX[:log]; 0 if malformed. */
static int parse_desc(const char *v) {
  char tail[8] = "";
  unsigned long lo, hi;
  int n = sscanf(v, "%lu:%lu:%7s", &lo, &hi, tail);
  if (n < 2 || lo < 1 || lo > hi || hi > (64ul << 20) || (n == 3 && strcmp(tail, "log"))) return 0;
  g_desc_min = lo, g_desc_max = hi, g_desc_log = n == 3;
  return 1;
}

static void *worker(void *arg) {
  long t = (long)arg;
  unsigned long s = g_seed * 0x9E3779B97F4A7C15UL + (unsigned long)t * 7919 + 1;
  int mix = !strcmp(g_mode, "mix");
  LDAP *ld = open_conn();
  if (!ld) {
    atomic_fetch_add(&g_errors, 1);
    return NULL;
  }
  char filter[64], dn[256];
  char *desc = malloc(g_desc_max + 1);
  if (!desc) {
    ldap_unbind_ext_s(ld, NULL, NULL);
    atomic_fetch_add(&g_errors, 1);
    return NULL;
  }
  unsigned long n_ops = 0;
  /* bounded twice: by time and by a generous operation count */
  while (now_s() < g_deadline && n_ops < 100000000UL) {
    if (g_ops_max && atomic_fetch_add(&g_started, 1) >= g_ops_max) break;
    unsigned long id = rnd(&s) % g_entries;
    n_ops++;
    if (mix && (rnd(&s) & 3) == 0) {
      size_t len = desc_len(&s);
      for (size_t i = 0; i < len; i++) desc[i] = (char)('a' + rnd(&s) % 26);
      desc[len] = 0;
      snprintf(dn, sizeof dn, "uid=user%lu,ou=people,%s", id, g_base);
      char *vals[] = {desc, NULL};
      LDAPMod mod = {.mod_op = LDAP_MOD_REPLACE, .mod_type = "description"};
      mod.mod_vals.modv_strvals = vals;
      LDAPMod *mods[] = {&mod, NULL};
      int rc = ldap_modify_ext_s(ld, dn, mods, NULL, NULL);
      if (rc != LDAP_SUCCESS) {
        atomic_fetch_add(&g_errors, 1);
        if (rc == LDAP_SERVER_DOWN) break;
      } else {
        atomic_fetch_add(&g_modifies, 1);
      }
    } else {
      snprintf(filter, sizeof filter, "(uid=user%lu)", id);
      LDAPMessage *res = NULL;
      struct timeval tv = {.tv_sec = 30};
      int rc = ldap_search_ext_s(ld, g_base, LDAP_SCOPE_SUBTREE, filter, NULL, 0, NULL, NULL, &tv,
                                 LDAP_NO_LIMIT, &res);
      if (rc != LDAP_SUCCESS || ldap_count_entries(ld, res) != 1) {
        atomic_fetch_add(&g_errors, 1);
        if (res) ldap_msgfree(res);
        if (rc == LDAP_SERVER_DOWN) break;
        continue;
      }
      ldap_msgfree(res);
      atomic_fetch_add(&g_searches, 1);
    }
    atomic_fetch_add(&g_ops, 1);
  }
  free(desc);
  ldap_unbind_ext_s(ld, NULL, NULL);
  return NULL;
}

int main(int argc, char **argv) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const char *k = argv[i], *v = argv[i + 1];
    if (!strcmp(k, "--uri")) g_uri = v;
    else if (!strcmp(k, "--base")) g_base = v;
    else if (!strcmp(k, "--binddn")) g_binddn = v;
    else if (!strcmp(k, "--pw")) g_pw = v;
    else if (!strcmp(k, "--mode")) g_mode = v;
    else if (!strcmp(k, "--entries")) g_entries = strtoul(v, NULL, 10);
    else if (!strcmp(k, "--threads")) g_threads = atoi(v);
    else if (!strcmp(k, "--seconds")) g_seconds = atof(v);
    else if (!strcmp(k, "--ops")) g_ops_max = strtoul(v, NULL, 10);
    else if (!strcmp(k, "--timeout")) g_timeout = atof(v);
    else if (!strcmp(k, "--seed")) g_seed = strtoul(v, NULL, 10);
    else if (!strcmp(k, "--desc")) {
      if (!parse_desc(v)) {
        fprintf(stderr, "ldap_load: bad --desc %s (MIN:MAX or MIN:MAX:log)\n", v);
        return 2;
      }
    }
    else {
      fprintf(stderr, "ldap_load: unknown option %s\n", k);
      return 2;
    }
  }
  if (argc % 2 == 0 || !g_uri || !g_base || !g_binddn || !g_pw || g_entries == 0 ||
      g_threads <= 0 || g_threads > 64 || g_seconds <= 0 || g_timeout <= 0 ||
      (strcmp(g_mode, "scan") && strcmp(g_mode, "search") && strcmp(g_mode, "mix"))) {
    fprintf(stderr, "usage: %s --uri U --base B --binddn D --pw P --mode scan|search|mix "
                    "[--entries N] [--threads 1..64] [--seconds S] [--ops N] [--timeout S] [--seed X] "
                    "[--desc MIN:MAX[:log]]\n",
            argv[0]);
    return 2;
  }
  if (!strcmp(g_mode, "scan")) return do_scan();
  pthread_t th[64];
  int started = 0;
  double t0 = now_s();
  g_deadline = t0 + g_seconds;
  for (long t = 0; t < g_threads; t++)
    if (pthread_create(&th[t], NULL, worker, (void *)t) == 0) started++;
  for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
  double secs = now_s() - t0;
  unsigned long ops = atomic_load(&g_ops), err = atomic_load(&g_errors);
  printf("{\"mode\": \"%s\", \"threads\": %d, \"ops\": %lu, \"searches\": %lu, \"modifies\": %lu, "
         "\"errors\": %lu, \"seconds\": %.3f, \"ops_per_s\": %.1f}\n",
         g_mode, g_threads, ops, atomic_load(&g_searches), atomic_load(&g_modifies), err, secs,
         secs > 0 ? (double)ops / secs : 0.0);
  return (err == 0 && started == g_threads && ops > 0) ? 0 : 1;
}
