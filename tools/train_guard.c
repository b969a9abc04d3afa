/* SPDX-License-Identifier: Apache-2.0 */
/* train_guard.c - see train_guard.h. */
#include "train_guard.h"

#include <errno.h>
#include <math.h>
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

void train_vars_free(TrainVars *v) {
  for (int i = 0; i < v->n; i++) {
    if (v->names) free(v->names[i]);
    if (v->reads) free(v->reads[i]);
  }
  free(v->names);
  free(v->reads);
  *v = (TrainVars){0};
}

int train_vars_collect(FloeGraph *g, TrainVars *v) {
  *v = (TrainVars){0};
  int n = floe_graph_variables(g, 0, NULL, 0);
  FloeVariable *vars = calloc((size_t)(n ? n : 1), sizeof *vars);
  v->names = calloc((size_t)(n ? n : 1), sizeof *v->names);
  v->reads = calloc((size_t)(n ? n : 1), sizeof *v->reads);
  if (!vars || !v->names || !v->reads) goto oom;
  floe_graph_variables(g, 0, vars, n);
  for (int i = 0; i < n; i++) {
    const char *name = floe_node_name(vars[i].handle.node);
    FloeVariable full = vars[i].value.node ? vars[i] : floe_variable_get(g, name);
    v->n = i + 1;
    v->names[i] = strdup(name);
    v->reads[i] = full.value.node ? strdup(floe_node_name(full.value.node)) : NULL;
    if (!v->names[i] || !v->reads[i]) goto oom;
  }
  free(vars);
  return 0;
oom:
  free(vars);
  train_vars_free(v);
  return -1;
}

/* Element i of a float tensor's data as a double. */
static double element(FloeDType dt, const void *d, int64_t i) {
  switch (dt) {
    case FLOE_F32: return ((const float *)d)[i];
    case FLOE_F64: return ((const double *)d)[i];
    case FLOE_F16: return floe_f16_to_f32(((const uint16_t *)d)[i]);
    case FLOE_BF16: return floe_bf16_to_f32(((const uint16_t *)d)[i]);
    default: return 0;
  }
}

int train_vars_nonfinite(FloeSession *s, const TrainVars *v, char *desc, size_t len,
                         FloeStatus *st) {
  if (v->n == 0) return 0;
  FloeTensor **out = calloc((size_t)v->n, sizeof *out);
  if (!out) {
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory reading the variables");
    return -1;
  }
  int found = -1;
  if (floe_session_run(s, NULL, 0, (const char *const *)v->reads, v->n, NULL, 0, out, st) ==
      FLOE_OK) {
    found = 0;
    for (int i = 0; i < v->n && !found; i++) {
      FloeDType dt = floe_tensor_dtype(out[i]);
      if (dt != FLOE_F32 && dt != FLOE_F64 && dt != FLOE_F16 && dt != FLOE_BF16) continue;
      const void *d = floe_tensor_data(out[i]);
      int64_t n = floe_tensor_num_elements(out[i]), bad = 0, first = -1;
      for (int64_t k = 0; k < n; k++)
        if (!isfinite(element(dt, d, k)) && bad++ == 0) first = k;
      if (!bad) continue;
      found = 1;
      char shape[160] = "[";
      for (int r = 0; r < floe_tensor_rank(out[i]); r++) {
        size_t at = strlen(shape);
        snprintf(shape + at, sizeof shape - at, "%s%lld", r ? "," : "",
                 (long long)floe_tensor_dim(out[i], r));
      }
      strncat(shape, "]", sizeof shape - strlen(shape) - 1);
      double x = element(dt, d, first);
      snprintf(desc, len, "variable '%s' (%s %s) holds %lld NaN or infinite value%s of %lld, the "
               "first %s at index %lld", v->names[i], floe_dtype_name(dt), shape, (long long)bad,
               bad == 1 ? "" : "s", (long long)n, isnan(x) ? "nan" : x > 0 ? "inf" : "-inf",
               (long long)first);
    }
  }
  for (int i = 0; i < v->n; i++) floe_tensor_release(out[i]);
  free(out);
  return found;
}

/* zlib's CRC-32 (the reflected polynomial 0xEDB88320) table. */
static void crc32_table(uint32_t table[256]) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
}

/* The CRC-32 crc continued over n bytes. */
static uint32_t crc32_update(const uint32_t table[256], uint32_t crc, const void *data, size_t n) {
  const unsigned char *p = data;
  crc = ~crc;
  for (size_t i = 0; i < n; i++) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

typedef struct NamedIndex {
  const char *name;
  int i;
} NamedIndex;
static int by_name(const void *a, const void *b) {
  return strcmp(((const NamedIndex *)a)->name, ((const NamedIndex *)b)->name);
}

int train_vars_checksum(FloeSession *s, const TrainVars *v, uint32_t *crc, FloeStatus *st) {
  FloeTensor **out = calloc((size_t)v->n + 1, sizeof *out);
  NamedIndex *order = calloc((size_t)v->n + 1, sizeof *order);
  int rc = -1;
  if (!out || !order) {
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory reading the variables");
    goto out;
  }
  if (v->n && floe_session_run(s, NULL, 0, (const char *const *)v->reads, v->n, NULL, 0, out,
                               st) != FLOE_OK)
    goto out;
  for (int i = 0; i < v->n; i++) order[i] = (NamedIndex){v->names[i], i};
  qsort(order, (size_t)v->n, sizeof *order, by_name);
  uint32_t table[256], c = 0;
  crc32_table(table);
  for (int k = 0; k < v->n; k++) {
    int i = order[k].i;
    c = crc32_update(table, c, v->names[i], strlen(v->names[i]) + 1); /* the name and its NUL */
    c = crc32_update(table, c, floe_tensor_data(out[i]), floe_tensor_nbytes(out[i]));
  }
  *crc = c;
  rc = 0;
out:
  for (int i = 0; out && i < v->n; i++) floe_tensor_release(out[i]);
  free(out);
  free(order);
  return rc;
}
