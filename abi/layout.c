/* Prints the size, alignment and field offsets of the public structures of <mtpool/mtpool.h>, one
 * "name value" line each, for abi/check.sh to compare with abi/layout.txt. */
#include <stddef.h>
#include <stdio.h>

#include <mtpool/mtpool.h>

#define SIZE(T) printf("sizeof(%s) %zu\nalignof(%s) %zu\n", #T, sizeof(T), #T, _Alignof(T))
#define OFF(T, f) printf("offsetof(%s, %s) %zu\n", #T, #f, offsetof(T, f))

int main(void) {
  SIZE(mtp_options_t);
  OFF(mtp_options_t, name);
  OFF(mtp_options_t, purge_delay_ms);
  OFF(mtp_options_t, thread_cache_bytes);
  OFF(mtp_options_t, check);

  SIZE(mtp_class_stats_t);
  OFF(mtp_class_stats_t, block_size);
  OFF(mtp_class_stats_t, blocks_in_use);
  OFF(mtp_class_stats_t, slabs);
  OFF(mtp_class_stats_t, slab_bytes);

  SIZE(mtp_stats_t);
  OFF(mtp_stats_t, name);
  OFF(mtp_stats_t, bytes_in_use);
  OFF(mtp_stats_t, blocks_in_use);
  OFF(mtp_stats_t, bytes_reserved);
  OFF(mtp_stats_t, bytes_free);
  OFF(mtp_stats_t, bytes_mapped);
  OFF(mtp_stats_t, large_blocks);
  OFF(mtp_stats_t, large_bytes);
  OFF(mtp_stats_t, allocs);
  OFF(mtp_stats_t, frees);
  OFF(mtp_stats_t, remote_frees);
  OFF(mtp_stats_t, bytes_returned);
  OFF(mtp_stats_t, num_classes);
  OFF(mtp_stats_t, classes);

  printf("MTP_STATS_MAX_CLASSES %d\n", MTP_STATS_MAX_CLASSES);
  printf("MTP_ERR_DOUBLE_FREE %d\nMTP_ERR_INVALID_POINTER %d\nMTP_ERR_WRONG_SIZE %d\n",
         MTP_ERR_DOUBLE_FREE, MTP_ERR_INVALID_POINTER, MTP_ERR_WRONG_SIZE);
  printf("MTP_ERR_OVERFLOW %d\nMTP_ERR_USE_AFTER_FREE %d\n", MTP_ERR_OVERFLOW, MTP_ERR_USE_AFTER_FREE);
  return 0;
}
