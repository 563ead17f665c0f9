/*
 * Replays the fuzz target without libFuzzer, in every build (gcc, ASan+UBSan, TSan): each file of
 * the seed corpus (MTP_CORPUS_DIR, or the paths given as arguments), then a number of inputs made by
 * a seeded generator (MTP_FUZZ_REPLAY_RANDOM, default depends on the build).
 */
#define _GNU_SOURCE
#include <dirent.h>

#include <mtpool/mtpool.h>

#include "testhelper.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  unsigned char *buf = malloc(1 << 20);
  size_t n = fread(buf, 1, 1 << 20, f);
  fclose(f);
  LLVMFuzzerTestOneInput(buf, n);
  free(buf);
  return 1;
}

static int run_dir(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return -1;
  int count = 0;
  struct dirent *e;
  char path[4096];
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    count += run_file(path);
  }
  closedir(d);
  return count;
}

int main(int argc, char **argv) {
  double t0 = th_now();
  int files = 0;
  if (argc > 1) {
    for (int i = 1; i < argc; i++) {
      int c = run_dir(argv[i]);
      files += c >= 0 ? c : run_file(argv[i]);
    }
  } else {
#ifdef MTP_CORPUS_DIR
    files = run_dir(MTP_CORPUS_DIR);
    if (files < 0) {
      fprintf(stderr, "FAIL cannot read the seed corpus %s\n", MTP_CORPUS_DIR);
      return 1;
    }
#endif
  }
  long random_inputs = TH_TSAN ? 100 : TH_ASAN ? 1000 : 2000;
  if (getenv("MTP_FUZZ_REPLAY_RANDOM")) random_inputs = atol(getenv("MTP_FUZZ_REPLAY_RANDOM"));
  th_rng_t r;
  th_rng_seed(&r, 0xF022, 1, 2);
  static unsigned char buf[4096];
  for (long k = 0; k < random_inputs; k++) {
    size_t n = 1 + (size_t)th_below(&r, sizeof buf);
    for (size_t i = 0; i < n; i++) {
      uint64_t v = th_next(&r);
      /* bias towards small sizes and a few ops so that sequences build up state */
      buf[i] = (unsigned char)((i % 3 == 0) ? v % 16 : (v >> 8) % 3 == 0 ? v >> 16 : (v >> 16) % 64);
    }
    LLVMFuzzerTestOneInput(buf, n);
  }
  printf("fuzz replay: %d corpus files and %ld generated inputs in %.1f s, no fault\n", files,
         random_inputs, th_now() - t0);
  return 0;
}
