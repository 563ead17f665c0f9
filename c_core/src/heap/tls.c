/* The calling thread's record and default heap, and the empty sentinels they point to until the
 * thread's first slow path. Layer: heap. */
#include "heap.h"

mtpi_desc_t mtp__slab_empty = {.kind = MTP_PAGE_HEADER, .head = &mtp__slab_empty};
mtpi_heap_t mtp__heap_empty = {.current = {[0 ... MTP_NUM_CLASSES - 1] = &mtp__slab_empty}};
mtpi_thread_t mtp__thread_empty;
MTP_TLS mtpi_heap_t *mtp__tl_default_heap = &mtp__heap_empty;
MTP_TLS mtpi_thread_t *mtp__tl_thread = &mtp__thread_empty;
MTP_TLS bool mtp__tl_exited;
MTP_TLS int64_t mtp__tl_prof_left = INT64_MAX;
