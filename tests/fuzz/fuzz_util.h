/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_util.h - shared by the fuzz targets: the input as a regular file (a memfd, so the
 * readers that take paths read it through the same open/fstat checks as real files). */
#ifndef FLOE_FUZZ_UTIL_H
#define FLOE_FUZZ_UTIL_H
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Writes data to a new memfd and its path (/proc/self/fd/N) into path; returns the fd
 * (caller closes), or -1 (then the input is skipped). */
static inline int fuzz_file(const uint8_t *data, size_t size, char *path, size_t cap) {
  int fd = memfd_create("fuzz", MFD_CLOEXEC);
  if (fd < 0) return -1;
  for (size_t off = 0; off < size;) {
    ssize_t w = write(fd, data + off, size - off);
    if (w <= 0) {
      close(fd);
      return -1;
    }
    off += (size_t)w;
  }
  snprintf(path, cap, "/proc/self/fd/%d", fd);
  return fd;
}

/* Every failure must say what was wrong. */
#define FUZZ_NEED_MESSAGE(st)                                   \
  do {                                                          \
    if (!*floe_status_message(st)) abort(); /* no message */    \
  } while (0)
#endif
