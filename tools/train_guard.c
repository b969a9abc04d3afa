/* SPDX-License-Identifier: Apache-2.0 */
/* train_guard.c - see train_guard.h. */
#include "train_guard.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The folder part of path ("a/b" -> "a", "a" -> ".", "/a" -> "/"), in place. */
static void parent_of(char *path) {
  size_t n = strlen(path);
  while (n > 1 && path[n - 1] == '/') path[--n] = 0; /* trailing slashes */
  char *slash = strrchr(path, '/');
  if (!slash) strcpy(path, ".");
  else if (slash == path) path[1] = 0;
  else {
    *slash = 0;
    for (n = strlen(path); n > 1 && path[n - 1] == '/';) path[--n] = 0;
  }
}

int train_check_checkpoint_dir(const char *dir, char *msg, size_t len) {
  if (!*dir) {
    snprintf(msg, len, "--checkpoint-dir is empty: name a folder (it is created if missing)");
    return -1;
  }
  struct stat sb;
  if (stat(dir, &sb) == 0) {
    if (!S_ISDIR(sb.st_mode)) {
      snprintf(msg, len, "--checkpoint-dir %s is %s, not a folder: name a folder (it is created "
               "if missing)", dir, S_ISREG(sb.st_mode) ? "a regular file" : "not a folder");
      return -1;
    }
    if (access(dir, W_OK | X_OK) != 0) {
      snprintf(msg, len, "--checkpoint-dir %s: cannot write in the folder (%s): name another "
               "folder", dir, strerror(errno));
      return -1;
    }
    return 0;
  }
  if (errno != ENOENT && errno != ENOTDIR) {
    snprintf(msg, len, "--checkpoint-dir %s: %s", dir, strerror(errno));
    return -1;
  }
  /* Missing: saving creates it and its parents (mkdir -p) inside the nearest folder that
   * exists, which must be one the process may write in. */
  char *p = strdup(dir);
  if (!p) {
    snprintf(msg, len, "out of memory");
    return -1;
  }
  int rc = -1;
  for (;;) {
    parent_of(p);
    if (stat(p, &sb) == 0) {
      if (!S_ISDIR(sb.st_mode))
        snprintf(msg, len, "--checkpoint-dir %s cannot be created: %s is %s, not a folder",
                 dir, p, S_ISREG(sb.st_mode) ? "a regular file" : "not a folder");
      else if (access(p, W_OK | X_OK) != 0)
        snprintf(msg, len, "--checkpoint-dir %s cannot be created in %s (%s): name another "
                 "folder", dir, p, strerror(errno));
      else
        rc = 0;
      break;
    }
    if ((errno != ENOENT && errno != ENOTDIR) || !strcmp(p, ".") || !strcmp(p, "/")) {
      snprintf(msg, len, "--checkpoint-dir %s cannot be created: %s: %s", dir, p,
               strerror(errno));
      break;
    }
  }
  free(p);
  return rc;
}
