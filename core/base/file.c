/* SPDX-License-Identifier: Apache-2.0 */
/* file.c - reading and replacing whole files the way every reader and writer of the core
 * must: a FIFO, a device or a folder given as a file is refused at once (never waited on,
 * never replaced), a symbolic link is written through, a write that would pass the
 * process's file-size limit (ulimit -f) is refused before it starts (the kernel would
 * otherwise end the process with SIGXFSZ), and a failed write leaves the old file as it
 * was and no temporary file behind. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base.h"

const char *floe__file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return S_ISREG(mode) ? "a regular file" : "not a regular file";
}

floe_code floe__file_open_read(const char *path, int *fd_out, uint64_t *size_out,
                               FloeStatus *st) {
  *fd_out = -1;
  /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer. */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return floe__status_from_errno(st, errno, "%s: cannot open", path);
  struct stat sb;
  if (fstat(fd, &sb) != 0) {
    int e = errno;
    close(fd);
    return floe__status_from_errno(st, e, "%s: cannot open", path);
  }
  if (!S_ISREG(sb.st_mode)) {
    close(fd);
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "%s: not a regular file (%s): give the path of a file", path,
                           floe__file_kind(sb.st_mode));
  }
  int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  *fd_out = fd;
  *size_out = (uint64_t)sb.st_size;
  return FLOE_OK;
}

floe_code floe__file_read_all(const char *path, uint8_t **buf_out, size_t *len_out,
                              FloeStatus *st) {
  *buf_out = NULL;
  *len_out = 0;
  int fd;
  uint64_t size;
  floe_code rc = floe__file_open_read(path, &fd, &size, st);
  if (rc != FLOE_OK) return rc;
  if (size > SIZE_MAX - 1) {
    close(fd);
    return floe_status_set(st, FLOE_OUT_OF_RANGE, "%s: file too large (%" PRIu64 " bytes)", path,
                           size);
  }
  uint8_t *buf = floe__malloc((size_t)size + 1); /* + 1: never a zero-byte allocation */
  if (!buf) {
    close(fd);
    return floe_status_set(st, FLOE_NO_MEMORY, "%s: out of memory reading %" PRIu64 " bytes",
                           path, size);
  }
  size_t n = 0;
  while (n < size) {
    ssize_t r = read(fd, buf + n, (size_t)size - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      close(fd);
      floe__free(buf);
      return floe__status_from_errno(st, e, "%s: read error at offset %zu", path, n);
    }
    if (r == 0) break; /* the file shrank while being read: what is there is what it is */
    n += (size_t)r;
  }
  close(fd);
  *buf_out = buf;
  *len_out = n;
  return FLOE_OK;
}

/* The file-size limit (RLIMIT_FSIZE) as a byte count; UINT64_MAX when unlimited. */
static uint64_t file_size_limit(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_FSIZE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return UINT64_MAX;
  return (uint64_t)rl.rlim_cur;
}

floe_code floe__file_check_size_limit(const char *path, uint64_t bytes, FloeStatus *st) {
  uint64_t limit = file_size_limit();
  if (bytes <= limit) return FLOE_OK;
  return floe_status_set(st, FLOE_RESOURCE_EXHAUSTED,
                         "%s: writing %" PRIu64 " bytes would pass the process's file-size "
                         "limit of %" PRIu64 " bytes (ulimit -f); nothing was written",
                         path, bytes, limit);
}

floe_code floe__file_write_target(const char *path, char **target_out, FloeStatus *st) {
  *target_out = NULL;
  struct stat sb;
  char *target = NULL;
  if (lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode)) {
    /* Written through: the link stays, the file it names is replaced. */
    target = realpath(path, NULL);
    if (!target)
      return floe__status_from_errno(st, errno,
                                     "%s: a symbolic link whose target cannot be resolved", path);
    char *own = floe__strdup(target);
    free(target);
    if (!own) return floe_status_set(st, FLOE_NO_MEMORY, "%s: out of memory", path);
    target = own;
  } else if (!(target = floe__strdup(path))) {
    return floe_status_set(st, FLOE_NO_MEMORY, "%s: out of memory", path);
  }
  if (stat(target, &sb) == 0 && !S_ISREG(sb.st_mode)) {
    floe_code rc = floe_status_set(st, FLOE_INVALID_ARGUMENT,
                                   "%s%s%s is %s, not a regular file: refusing to replace it "
                                   "(give the path of a file to write)",
                                   path, strcmp(path, target) ? " -> " : "",
                                   strcmp(path, target) ? target : "",
                                   floe__file_kind(sb.st_mode));
    floe__free(target);
    return rc;
  }
  *target_out = target;
  return FLOE_OK;
}

/* Makes the rename durable; best effort, since the file itself is already complete. */
static void sync_parent_dir(const char *path) {
  const char *slash = strrchr(path, '/');
  char *dir = slash ? floe__strndup(path, slash == path ? 1 : (size_t)(slash - path))
                    : floe__strdup(".");
  if (!dir) return;
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    fsync(fd);
    close(fd);
  }
  floe__free(dir);
}

floe_code floe__file_replace(const char *path, const void *buf, size_t len, FloeStatus *st) {
  if (!path) return floe_status_set(st, FLOE_INVALID_ARGUMENT, "path is NULL");
  char *target;
  floe_code rc = floe__file_write_target(path, &target, st);
  if (rc != FLOE_OK) return rc;
  rc = floe__file_check_size_limit(path, len, st);
  if (rc != FLOE_OK) {
    floe__free(target);
    return rc;
  }
  char *tmp = floe__asprintf("%s.tmp.XXXXXX", target);
  if (!tmp) {
    floe__free(target);
    return floe_status_set(st, FLOE_NO_MEMORY, "%s: out of memory", path);
  }
  int fd = mkstemp(tmp);
  if (fd < 0) {
    rc = floe__status_from_errno(st, errno, "%s: cannot create a temporary file beside it", path);
    goto out;
  }
  fchmod(fd, 0644); /* mkstemp makes it 0600; a model or graph is an ordinary readable file */
  for (size_t off = 0; off < len;) {
    ssize_t w = write(fd, (const char *)buf + off, len - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int e = w < 0 ? errno : EIO;
      close(fd);
      unlink(tmp);
      rc = floe__status_from_errno(st, e, "%s: writing %s failed", path, tmp);
      goto out;
    }
    off += (size_t)w;
  }
  if (fsync(fd) != 0 && errno != EINVAL) {
    int e = errno;
    close(fd);
    unlink(tmp);
    rc = floe__status_from_errno(st, e, "%s: writing %s failed", path, tmp);
    goto out;
  }
  if (close(fd) != 0) {
    int e = errno;
    unlink(tmp);
    rc = floe__status_from_errno(st, e, "%s: closing %s failed", path, tmp);
    goto out;
  }
  if (rename(tmp, target) != 0) {
    int e = errno;
    unlink(tmp);
    rc = floe__status_from_errno(st, e, "%s: cannot rename %s over it", path, tmp);
    goto out;
  }
  sync_parent_dir(target);
out:
  floe__free(tmp);
  floe__free(target);
  return rc;
}
