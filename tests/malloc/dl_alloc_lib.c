/* A library that allocates: in its constructor, through its functions, and in a thread-exit key
 * destructor; deleted on unload. Loaded and unloaded repeatedly by test_malloc_dlopen. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static char *made_in_ctor;
static pthread_key_t key;

__attribute__((constructor)) static void lib_init(void) {
  made_in_ctor = malloc(1000);
  strcpy(made_in_ctor, "hello from the constructor");
  pthread_key_create(&key, free);
}
__attribute__((destructor)) static void lib_fini(void) {
  free(made_in_ctor);
  pthread_key_delete(key);
}

char *dl_alloc_copy(void) { /* the caller frees it, after dlclose */
  size_t n = strlen(made_in_ctor) + 1;
  char *p = malloc(n);
  memcpy(p, made_in_ctor, n);
  return p;
}

/* calloc: gcc warns of malloc's uninitialised bytes passed as a const void * (musl's header) */
void dl_alloc_tls(void) { pthread_setspecific(key, calloc(1, 64)); }
