/* Run this test binary again, for tests that check behaviour in a fresh process (environment
 * variables read at start, death tests). Header-only; include after defining _GNU_SOURCE.
 *
 * Cross-built tests run under a user-mode emulator (qemu-user without binfmt_misc) cannot exec
 * their own binary directly: the kernel does not know its format. MTP_TEST_EMULATOR, e.g.
 * "/usr/bin/qemu-aarch64 -L /usr/aarch64-linux-gnu" (the aarch64 toolchain file sets it for
 * ctest), is then put in front; its words are split at spaces. */
#ifndef MTP_EXEC_SELF_H
#define MTP_EXEC_SELF_H

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Replace this process by this binary run with argv (argv[0] included, NULL-terminated). Returns
 * only on failure (errno set). */
static inline void mtp_test_exec_self(char *const argv[]) {
  const char *emu = getenv("MTP_TEST_EMULATOR");
  if (emu == NULL || *emu == 0) {
    execv("/proc/self/exe", argv);
    return;
  }
  static char words[1024], self[4096];
  char *args[64];
  int n = 0;
  ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  if (len <= 0 || strlen(emu) >= sizeof words) return;
  self[len] = 0;
  strcpy(words, emu);
  for (char *w = strtok(words, " "); w != NULL && n < 32; w = strtok(NULL, " ")) args[n++] = w;
  args[n++] = self;
  for (int i = 1; argv[0] != NULL && argv[i] != NULL && n < 63; i++) args[n++] = argv[i];
  args[n] = NULL;
  execvp(args[0], args);
}

#endif
