/* SPDX-License-Identifier: Apache-2.0 */
/* replay.c - runs a fuzz target's LLVMFuzzerTestOneInput over files (or every file in
 * folders) without libFuzzer, so make check replays the kept regression inputs with gcc.
 * Prints how many inputs ran; a crash or abort fails the test. */
#include "fuzz_util.h" /* first: it defines _GNU_SOURCE */
#include <dirent.h>
#include <string.h>
#include <sys/stat.h>

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    return -1;
  }
  size_t cap = 1 << 16, n = 0;
  uint8_t *buf = malloc(cap);
  for (size_t k; buf && (k = fread(buf + n, 1, cap - n, f)) > 0;) {
    n += k;
    if (n == cap) buf = realloc(buf, cap *= 2);
  }
  fclose(f);
  if (!buf) return -1;
  LLVMFuzzerTestOneInput(buf, n);
  free(buf);
  return 1;
}

int main(int argc, char **argv) {
  int runs = 0;
  for (int i = 1; i < argc; i++) {
    struct stat sb;
    if (stat(argv[i], &sb) != 0) {
      perror(argv[i]);
      return 1;
    }
    if (!S_ISDIR(sb.st_mode)) {
      if (run_file(argv[i]) < 0) return 1;
      runs++;
      continue;
    }
    DIR *d = opendir(argv[i]);
    if (!d) {
      perror(argv[i]);
      return 1;
    }
    for (struct dirent *e; (e = readdir(d));) {
      if (e->d_name[0] == '.') continue;
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
      if (run_file(path) < 0) return 1;
      runs++;
    }
    closedir(d);
  }
  printf("%d inputs replayed\n", runs);
  return 0;
}
