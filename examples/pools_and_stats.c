/* Plain-C use of mtpool: the default pool, a named pool per object type dropped in one call,
 * sized frees, statistics and trimming. Build: cc pools_and_stats.c $(pkg-config --cflags --libs mtpool) */
#include <stdio.h>
#include <string.h>

#include <mtpool/mtpool.h>

struct session {
  int id;
  char user[36];
}; /* 40 bytes: takes exactly 40 bytes in its pool */

int main(void) {
  /* the default pool: like malloc/free */
  char *greeting = mtp_alloc(32);
  strcpy(greeting, "hello from mtpool");
  puts(greeting);
  mtp_free(greeting);

  /* a pool of its own, named, so reports show where the memory is */
  mtp_options_t opt;
  mtp_options_init(&opt);
  opt.name = "sessions";
  mtp_pool_t *sessions = mtp_pool_create(&opt);
  if (sessions == NULL) return 1;
  struct session *all[1000];
  for (int i = 0; i < 1000; i++) {
    all[i] = mtp_pool_alloc(sessions, sizeof(struct session));
    all[i]->id = i;
    snprintf(all[i]->user, sizeof(all[i]->user), "user%d", i);
  }
  for (int i = 0; i < 500; i++) mtp_free_sized(all[i], sizeof(struct session)); /* sized: checked */

  mtp_stats_t st;
  mtp_pool_stats(sessions, &st);
  printf("sessions: %zu blocks, %zu bytes in use, %zu bytes reserved\n", st.blocks_in_use,
         st.bytes_in_use, st.bytes_reserved);
  mtp_print_stats(stdout); /* every live pool, by name */

  /* drop the other 500 at once, and give empty pages of the default pool back now */
  mtp_pool_destroy(sessions);
  printf("trimmed %zu bytes\n", mtp_pool_trim(NULL));
  return 0;
}
