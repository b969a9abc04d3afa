/* checkpoint.c - checkpoints as safetensors files (docs/checkpoints.md): an atomic writer
 * with keep-N retention, a strict bounded reader that validates a whole file before any
 * variable changes, the Save / Restore kernels, and the export of frozen inference graphs.
 *
 * File: u64 little-endian header length N, N bytes of JSON padded with spaces to a multiple
 * of 8, then the tensors' little-endian bytes, sorted by name, contiguous. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train.h"

#define DEFAULT_PREFIX "ckpt"
#define SUFFIX ".safetensors"
#define SUFFIX_LEN (sizeof SUFFIX - 1)
#define STEP_DIGITS 10          /* steps are zero-padded to at least this many digits */
#define MAX_STEP_DIGITS 19      /* INT64_MAX has 19 */
#define MAX_PREFIX 180          /* leaves room in NAME_MAX for the step and a temp suffix */
#define HEADER_LIMIT 100000000u /* the reference reader's bound on the JSON header */
#define NAME_SHOWN 80           /* bytes of a name from a file quoted in a message */
#define LIST_SHOWN 6            /* tensor names listed when a variable is missing */
#define COPY_CHUNK 65536        /* byte-swapping buffer of big-endian hosts */

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define HOST_BIG_ENDIAN 1
#else
#define HOST_BIG_ENDIAN 0
#endif

/* ------------------------------------------------------------------------------------ */
/* dtypes: safetensors names. The first nine are Floe's; a file may also hold the others
 * (ignored unless a variable needs them, then a dtype mismatch). */

typedef struct StType {
  const char *name;
  size_t size;
  FloeDType dt;
} StType;

static const StType st_types[] = {
    {"F32", 4, FLOE_F32},   {"F64", 8, FLOE_F64},          {"F16", 2, FLOE_F16},
    {"BF16", 2, FLOE_BF16}, {"I8", 1, FLOE_I8},            {"U8", 1, FLOE_U8},
    {"I32", 4, FLOE_I32},   {"I64", 8, FLOE_I64},          {"BOOL", 1, FLOE_BOOL},
    {"I16", 2, FLOE_DTYPE_INVALID},     {"U16", 2, FLOE_DTYPE_INVALID},
    {"U32", 4, FLOE_DTYPE_INVALID},     {"U64", 8, FLOE_DTYPE_INVALID},
    {"F8_E4M3", 1, FLOE_DTYPE_INVALID}, {"F8_E5M2", 1, FLOE_DTYPE_INVALID},
};

static const StType *st_type_of(FloeDType dt) {
  for (size_t i = 0; i < FLOE__ARRAY_LEN(st_types); i++)
    if (st_types[i].dt == dt && dt != FLOE_DTYPE_INVALID) return &st_types[i];
  return NULL;
}

static const StType *st_type_named(const char *s) {
  for (size_t i = 0; i < FLOE__ARRAY_LEN(st_types); i++)
    if (strcmp(st_types[i].name, s) == 0) return &st_types[i];
  return NULL;
}

/* "[2,3]" ("[]" for a scalar) into buf (at least 8 * 21 + 3 bytes). */
static char *dims_str(int rank, const int64_t *dims, char *buf, size_t len) {
  size_t k = (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < rank && k < len; i++)
    k += (size_t)snprintf(buf + k, len - k, "%s%" PRId64, i ? "," : "", dims[i]);
  if (k < len) snprintf(buf + k, len - k, "]");
  return buf;
}
#define DIMS_BUF (FLOE_MAX_DIMS * 21 + 3)

/* FNV-1a 64. */
#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull
static uint64_t fnv_add(uint64_t h, const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * FNV_PRIME;
  return h;
}

/* One line "name DTYPE [d0,d1]\n" of the variables hash. */
static uint64_t hash_line(uint64_t h, const char *name, const StType *t, int rank,
                          const int64_t *dims) {
  char shape[DIMS_BUF];
  dims_str(rank, dims, shape, sizeof shape);
  h = fnv_add(h, name, strlen(name));
  h = fnv_add(h, " ", 1);
  h = fnv_add(h, t->name, strlen(t->name));
  h = fnv_add(h, " ", 1);
  h = fnv_add(h, shape, strlen(shape));
  return fnv_add(h, "\n", 1);
}

static floe_code errno_code(int e) {
  switch (e) {
    case ENOENT:
    case ENOTDIR: return FLOE_NOT_FOUND;
    case EACCES:
    case EPERM:
    case EROFS: return FLOE_PERMISSION_DENIED;
    case ENOSPC:
    case EDQUOT:
    case EFBIG: return FLOE_RESOURCE_EXHAUSTED;
    case EIO: return FLOE_DATA_LOSS;
    default: return FLOE_UNKNOWN;
  }
}

/* Strict UTF-8 (no overlongs, surrogates or code points above U+10FFFF): the length of the
 * sequence at s[0..n), or 0 when invalid. */
static size_t utf8_len(const uint8_t *s, size_t n) {
  uint8_t c = s[0];
  if (c < 0x80) return 1;
  size_t k;
  uint32_t cp, min;
  if (c >= 0xC2 && c <= 0xDF) k = 2, cp = c & 0x1Fu, min = 0x80;
  else if (c >= 0xE0 && c <= 0xEF) k = 3, cp = c & 0x0Fu, min = 0x800;
  else if (c >= 0xF0 && c <= 0xF4) k = 4, cp = c & 0x07u, min = 0x10000;
  else return 0;
  if (n < k) return 0;
  for (size_t i = 1; i < k; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = cp << 6 | (s[i] & 0x3Fu);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return k;
}

static bool utf8_valid(const char *s) {
  const uint8_t *p = (const uint8_t *)s;
  size_t n = strlen(s);
  for (size_t i = 0; i < n;) {
    size_t k = utf8_len(p + i, n - i);
    if (!k) return false;
    i += k;
  }
  return true;
}

/* ------------------------------------------------------------------------------------ */
/* Variables to write or restore. */

typedef struct Item {
  const char *name;  /* checkpoint key: the VarHandleOp node's name; borrowed */
  FloeVar *var;      /* borrowed from the resource manager */
  FloeTensor *value; /* save: a host reference to the value; restore: the value read */
} Item;

static void items_free(Item *items, int n) {
  if (!items) return;
  for (int i = 0; i < n; i++) floe_tensor_release(items[i].value);
  floe__free(items);
}

static int item_cmp(const void *a, const void *b) {
  return strcmp(((const Item *)a)->name, ((const Item *)b)->name);
}

/* Hands a local status to the caller's (which may be NULL) and returns rc. Internal code
 * always has a status to read codes from. */
static floe_code finish(FloeStatus *status, FloeStatus *st, floe_code rc) {
  if (rc != FLOE_OK && st->code == FLOE_OK) floe_status_set(st, rc, "%s", floe_code_message(rc));
  floe__status_copy(status, st);
  floe_status_clear(st);
  return rc;
}

/* The variable a VarHandleOp node names: (container, shared_name or else the node name),
 * as the VarHandleOp kernel resolves it. Borrowed. */
static FloeVar *node_var(FloeResourceMgr *m, const FloeNode *n, FloeStatus *st) {
  const FloeAttrValue *dt = floe__attrs_get(&n->attrs, "dtype");
  const FloeAttrValue *shape = floe__attrs_get(&n->attrs, "shape");
  if (!dt || dt->kind != FLOE_ATTR_TYPE || !shape || shape->kind != FLOE_ATTR_SHAPE) {
    floe_status_set(st, FLOE_INTERNAL, "variable '%s': VarHandleOp lacks its dtype or shape",
                    n->name);
    return NULL;
  }
  const char *shared = floe__node_attr_str(n, "shared_name");
  return floe__resources_lookup(m, floe__node_attr_str(n, "container"), shared[0] ? shared : n->name,
                                dt->u.type, &shape->u.shape, st);
}

static bool is_op(const FloeNode *n, const char *op) { return strcmp(n->op->name, op) == 0; }

/* Every VarHandleOp of the session's graph, in graph order. *out: caller frees with
 * items_free. */
static floe_code graph_items(FloeSession *s, Item **out, int *n_out, FloeStatus *st) {
  const FloeGraph *g = floe__session_graph(s);
  FloeResourceMgr *m = floe__session_resources(s);
  int n = 0;
  for (int i = 0; i < g->num_nodes; i++) n += is_op(g->nodes[i], "VarHandleOp");
  Item *items = floe__calloc((size_t)(n ? n : 1), sizeof *items);
  if (!items) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory listing %d variables", n);
  int k = 0;
  for (int i = 0; i < g->num_nodes; i++) {
    const FloeNode *node = g->nodes[i];
    if (!is_op(node, "VarHandleOp")) continue;
    items[k].name = node->name;
    if (!(items[k].var = node_var(m, node, st))) {
      items_free(items, k);
      return st->code;
    }
    k++;
  }
  *out = items;
  *n_out = n;
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Names: "<prefix>-<step, at least 10 digits>.safetensors". Temporary files start with '.'
 * and end in ".tmp.<pid>.<n>", so no listing ever mistakes one for a checkpoint. */

static floe_code check_prefix(const char *prefix, FloeStatus *st) {
  bool ok = prefix[0] != '\0' && prefix[0] != '.' && strlen(prefix) <= MAX_PREFIX;
  for (const char *c = prefix; ok && *c; c++) ok = *c != '/' && (unsigned char)*c >= 0x20;
  if (!ok)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "checkpoint prefix '%s' is not a plain file name (it must be "
                           "non-empty, at most 180 bytes, not start with '.', and hold no '/' "
                           "or control characters)",
                           prefix);
  return FLOE_OK;
}

/* True when file is a checkpoint's name; sets the prefix length and the step. */
static bool parse_ckpt_name(const char *file, size_t *prefix_len, int64_t *step) {
  size_t len = strlen(file);
  if (file[0] == '.' || len <= SUFFIX_LEN || strcmp(file + len - SUFFIX_LEN, SUFFIX) != 0)
    return false;
  size_t end = len - SUFFIX_LEN, d = end;
  while (d > 0 && file[d - 1] >= '0' && file[d - 1] <= '9') d--;
  if (end - d < STEP_DIGITS || end - d > MAX_STEP_DIGITS || d < 2 || file[d - 1] != '-')
    return false;
  uint64_t v = 0;
  for (size_t i = d; i < end; i++) {
    unsigned digit = (unsigned)(file[i] - '0');
    if (v > ((uint64_t)INT64_MAX - digit) / 10) return false;
    v = v * 10 + digit;
  }
  *prefix_len = d - 1;
  *step = (int64_t)v;
  return true;
}

/* dir + "/" + file, without doubling a trailing slash. Caller frees. */
static char *join_path(const char *dir, const char *file) {
  size_t n = strlen(dir);
  while (n > 1 && dir[n - 1] == '/') n--;
  return floe__asprintf("%.*s/%s", (int)n, dir, file);
}

typedef struct Found {
  char *file;   /* owned */
  size_t prefix_len;
  int64_t step;
} Found;

static void found_free(Found *f, int n) {
  if (!f) return;
  for (int i = 0; i < n; i++) floe__free(f[i].file);
  floe__free(f);
}

static int found_cmp(const void *a, const void *b) {
  const Found *x = a, *y = b;
  if (x->step != y->step) return x->step < y->step ? -1 : 1;
  return strcmp(x->file, y->file);
}

/* The checkpoints of prefix (NULL: any) in dir, oldest first by step. Caller frees with
 * found_free. */
static floe_code list_checkpoints(const char *dir, const char *prefix, Found **out, int *n_out,
                                  FloeStatus *st) {
  *out = NULL;
  *n_out = 0;
  DIR *d = opendir(dir);
  if (!d) {
    int e = errno;
    return floe_status_set(st, errno_code(e), "cannot list checkpoint directory %s: %s", dir,
                           strerror(e));
  }
  Found *f = NULL;
  int n = 0, cap = 0;
  size_t plen = prefix ? strlen(prefix) : 0;
  floe_code rc = FLOE_OK;
  for (;;) {
    errno = 0;
    struct dirent *de = readdir(d);
    if (!de) {
      if (errno) {
        int e = errno;
        rc = floe_status_set(st, errno_code(e), "cannot list checkpoint directory %s: %s", dir,
                             strerror(e));
      }
      break;
    }
    size_t pl;
    int64_t step;
    if (!parse_ckpt_name(de->d_name, &pl, &step)) continue;
    if (prefix && (pl != plen || memcmp(de->d_name, prefix, plen) != 0)) continue;
    if (n == cap) {
      int ncap = cap ? 2 * cap : 16;
      Found *g = floe__realloc(f, (size_t)ncap * sizeof *g);
      if (!g) goto err_oom;
      f = g;
      cap = ncap;
    }
    if (!(f[n].file = floe__strdup(de->d_name))) goto err_oom;
    f[n].prefix_len = pl;
    f[n].step = step;
    n++;
  }
  closedir(d);
  if (rc != FLOE_OK) {
    found_free(f, n);
    return rc;
  }
  if (n > 1) qsort(f, (size_t)n, sizeof *f, found_cmp);
  *out = f;
  *n_out = n;
  return FLOE_OK;

err_oom:
  closedir(d);
  found_free(f, n);
  return floe_status_set(st, FLOE_NO_MEMORY, "out of memory listing %s", dir);
}

/* Caller frees with free(). */
char *floe_checkpoint_latest(const char *dir, const char *prefix, FloeStatus *status) {
  if (!dir) {
    floe_status_set(status, FLOE_INVALID_ARGUMENT, "floe_checkpoint_latest: dir is NULL");
    return NULL;
  }
  if (!prefix) prefix = DEFAULT_PREFIX;
  if (check_prefix(prefix, status) != FLOE_OK) return NULL;
  Found *f;
  int n;
  if (list_checkpoints(dir, prefix, &f, &n, status) != FLOE_OK) return NULL;
  char *path = NULL;
  if (n == 0)
    floe_status_set(status, FLOE_NOT_FOUND,
                    "no checkpoint %s-<step>.safetensors in directory %s", prefix, dir);
  else if (!(path = join_path(dir, f[n - 1].file)))
    floe_status_set(status, FLOE_NO_MEMORY, "out of memory");
  found_free(f, n);
  return path;
}

/* The file restored from directory dir: the newest "ckpt" checkpoint; failing that, the
 * newest checkpoint when every checkpoint there has one prefix. Caller frees. */
static char *pick_in_dir(const char *dir, FloeStatus *st) {
  Found *f;
  int n;
  if (list_checkpoints(dir, NULL, &f, &n, st) != FLOE_OK) return NULL;
  const Found *best = NULL, *other = NULL, *second = NULL;
  size_t dl = strlen(DEFAULT_PREFIX);
  for (int i = 0; i < n; i++) { /* ascending by step: the last match is the newest */
    if (f[i].prefix_len == dl && memcmp(f[i].file, DEFAULT_PREFIX, dl) == 0)
      best = &f[i];
    else if (!other || (other->prefix_len == f[i].prefix_len &&
                        memcmp(other->file, f[i].file, f[i].prefix_len) == 0))
      other = &f[i];
    else
      second = &f[i];
  }
  char *path = NULL;
  if (!best && !other)
    floe_status_set(st, FLOE_NOT_FOUND,
                    "no checkpoint (<prefix>-<step>.safetensors) in directory %s", dir);
  else if (!best && second)
    floe_status_set(st, FLOE_INVALID_ARGUMENT,
                    "directory %s holds checkpoints of several prefixes ('%.*s', '%.*s', none "
                    "called '" DEFAULT_PREFIX "'): restore a file, or pick one with "
                    "floe_checkpoint_latest(dir, prefix)",
                    dir, (int)other->prefix_len, other->file, (int)second->prefix_len,
                    second->file);
  else if (!(path = join_path(dir, (best ? best : other)->file)))
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
  found_free(f, n);
  return path;
}

/* ------------------------------------------------------------------------------------ */
/* Writer. */

typedef FloeByteBuf Buf;

static void buf_put(Buf *b, const void *s, size_t n) { floe__buf_put(b, s, n); }

static void buf_str(Buf *b, const char *s) { buf_put(b, s, strlen(s)); }

static void buf_u64(Buf *b, uint64_t v) {
  char t[24];
  buf_put(b, t, (size_t)snprintf(t, sizeof t, "%" PRIu64, v));
}

/* A JSON string: quotes, backslashes and control bytes escaped; the rest (valid UTF-8)
 * copied. */
static void buf_json(Buf *b, const char *s) {
  buf_put(b, "\"", 1);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      char e[2] = {'\\', (char)c};
      buf_put(b, e, 2);
    } else if (c < 0x20) {
      char e[8];
      buf_put(b, e, (size_t)snprintf(e, sizeof e, "\\u%04x", c));
    } else {
      buf_put(b, s, 1);
    }
  }
  buf_put(b, "\"", 1);
}

/* The 8-byte length and the padded JSON header of items (sorted by name, values on the
 * host). */
static floe_code build_header(const Item *items, int n, int64_t step, Buf *b, FloeStatus *st) {
  uint64_t h = FNV_OFFSET;
  for (int i = 0; i < n; i++)
    h = hash_line(h, items[i].name, st_type_of(items[i].value->dtype), items[i].value->rank,
                  items[i].value->dims);
  char meta[160];
  snprintf(meta, sizeof meta,
           "{\"__metadata__\":{\"format\":\"floe\",\"global_step\":\"%" PRId64
           "\",\"variables_hash\":\"%016" PRIx64 "\"}",
           step, h);
  buf_put(b, "\0\0\0\0\0\0\0\0", 8);
  buf_str(b, meta);
  uint64_t off = 0;
  for (int i = 0; i < n; i++) {
    const FloeTensor *t = items[i].value;
    buf_put(b, ",", 1);
    buf_json(b, items[i].name);
    buf_str(b, ":{\"dtype\":\"");
    buf_str(b, st_type_of(t->dtype)->name);
    buf_str(b, "\",\"shape\":[");
    for (int k = 0; k < t->rank; k++) {
      if (k) buf_put(b, ",", 1);
      buf_u64(b, (uint64_t)t->dims[k]);
    }
    buf_str(b, "],\"data_offsets\":[");
    buf_u64(b, off);
    buf_put(b, ",", 1);
    off += t->nbytes;
    buf_u64(b, off);
    buf_str(b, "]}");
  }
  buf_put(b, "}", 1);
  while (!b->oom && b->len % 8) buf_put(b, " ", 1);
  if (b->oom) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory building a header");
  uint64_t hl = b->len - 8;
  for (int k = 0; k < 8; k++) b->p[k] = (char)(hl >> (8 * k) & 0xFF);
  return FLOE_OK;
}

/* 0, or the errno of the failure. Handles short writes and EINTR. */
static int write_all(int fd, const void *buf, size_t n) {
  const uint8_t *p = buf;
  while (n) {
    ssize_t k = write(fd, p, n);
    if (k < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (k == 0) return EIO;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

#if HOST_BIG_ENDIAN
static void swap_elements(uint8_t *p, size_t nbytes, size_t esize) {
  for (size_t i = 0; i + esize <= nbytes; i += esize)
    for (size_t a = i, z = i + esize - 1; a < z; a++, z--) {
      uint8_t t = p[a];
      p[a] = p[z];
      p[z] = t;
    }
}
#endif

/* A tensor's bytes in little-endian order. 0 or an errno. */
static int write_tensor(int fd, const FloeTensor *t) {
  const uint8_t *p = floe_tensor_data(t);
  if (!t->nbytes) return 0;
#if HOST_BIG_ENDIAN
  size_t es = floe_dtype_size(t->dtype);
  if (es > 1) {
    uint8_t chunk[COPY_CHUNK];
    for (size_t off = 0; off < t->nbytes; off += COPY_CHUNK) {
      size_t k = t->nbytes - off < COPY_CHUNK ? t->nbytes - off : COPY_CHUNK;
      memcpy(chunk, p + off, k);
      swap_elements(chunk, k, es);
      int e = write_all(fd, chunk, k);
      if (e) return e;
    }
    return 0;
  }
#endif
  return write_all(fd, p, t->nbytes);
}

/* mkdir -p. */
static floe_code make_dirs(const char *dir, FloeStatus *st) {
  char *p = floe__strdup(dir);
  if (!p) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
  for (char *s = p + 1;; s++) {
    if (*s != '/' && *s != '\0') continue;
    char c = *s;
    *s = '\0';
    if (mkdir(p, 0777) != 0 && errno != EEXIST) {
      int e = errno;
      floe_status_set(st, errno_code(e), "cannot create checkpoint directory %s: %s", p,
                      strerror(e));
      floe__free(p);
      return st->code;
    }
    *s = c;
    if (!c) break;
  }
  floe__free(p);
  struct stat sb;
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return floe_status_set(st, FLOE_FAILED_PRECONDITION,
                           "checkpoint directory %s exists but is not a directory", dir);
  return FLOE_OK;
}

static atomic_ulong tmp_counter;

/* Removes all but the newest `keep` checkpoints of prefix in dir; the one just written
 * (`written`) always stays, even when older files carry larger steps (a restarted run).
 * Best effort: a file that cannot be removed stays until the next save. */
static void prune(const char *dir, const char *prefix, int keep, const char *written) {
  Found *f;
  int n;
  if (keep <= 0 || list_checkpoints(dir, prefix, &f, &n, NULL) != FLOE_OK) return;
  int others = 0;
  for (int i = 0; i < n; i++) others += strcmp(f[i].file, written) != 0;
  for (int i = 0; i < n && others > keep - 1; i++) { /* oldest first */
    if (strcmp(f[i].file, written) == 0) continue;
    char *path = join_path(dir, f[i].file);
    if (path) unlink(path);
    floe__free(path);
    others--;
  }
  found_free(f, n);
}

/* Writes items (sorted by name, host values) to dir/<prefix>-<step>.safetensors through a
 * temporary file, fsync and rename; *final_out (may be NULL) gets the path (caller
 * frees). Nothing of the temporary file stays on failure. */
static floe_code write_checkpoint(const char *dir, const char *prefix, int64_t step,
                                  const Item *items, int n, char **final_out, FloeStatus *st) {
  floe_code rc;
  Buf h = {0};
  char file[NAME_MAX + 64];
  char *final = NULL, *tmp = NULL;
  if ((rc = build_header(items, n, step, &h, st)) != FLOE_OK) goto err_free_buf;
  snprintf(file, sizeof file, "%s-%0*" PRId64 SUFFIX, prefix, STEP_DIGITS, step);
  final = join_path(dir, file);
  unsigned long k = atomic_fetch_add(&tmp_counter, 1);
  char tmpfile[NAME_MAX + 128];
  snprintf(tmpfile, sizeof tmpfile, ".%s.tmp.%ld.%lu", file, (long)getpid(), k);
  tmp = join_path(dir, tmpfile);
  if (!final || !tmp) {
    rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
    goto err_free_buf;
  }
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    int e = errno;
    rc = floe_status_set(st, errno_code(e), "cannot save checkpoint %s: cannot create %s: %s",
                         final, tmp, strerror(e));
    goto err_free_buf;
  }
  int e = write_all(fd, h.p, h.len);
  for (int i = 0; i < n && !e; i++) e = write_tensor(fd, items[i].value);
  if (!e && fsync(fd) != 0) e = errno;
  if (close(fd) != 0 && !e) e = errno;
  if (e) {
    rc = floe_status_set(st, errno_code(e),
                         "cannot save checkpoint %s: writing %s failed: %s (earlier "
                         "checkpoints are unchanged)",
                         final, tmp, strerror(e));
    goto err_unlink;
  }
  if (rename(tmp, final) != 0) {
    e = errno;
    rc = floe_status_set(st, errno_code(e), "cannot save checkpoint %s: renaming %s failed: %s",
                         final, tmp, strerror(e));
    goto err_unlink;
  }
  /* Makes the rename durable; filesystems that cannot sync a directory say EINVAL. */
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    e = fsync(dfd) != 0 ? errno : 0;
    close(dfd);
    if (e == EIO) {
      rc = floe_status_set(st, FLOE_DATA_LOSS,
                           "checkpoint %s was written but syncing directory %s failed: %s",
                           final, dir, strerror(e));
      goto err_free_buf;
    }
  }
  floe__free(tmp);
  floe__free(h.p);
  if (final_out)
    *final_out = final;
  else
    floe__free(final);
  return FLOE_OK;

err_unlink:
  unlink(tmp);
err_free_buf:
  floe__free(tmp);
  floe__free(final);
  floe__free(h.p);
  return rc;
}

/* Reads every item's value (in the given order, so the error names the first variable
 * that is not initialised), sorts them by name and writes the checkpoint. */
static floe_code save_items(const char *dir, const char *prefix, int64_t step, int keep,
                            Item *items, int n, char **path_out, FloeStatus *st) {
  if (!dir || !dir[0])
    return floe_status_set(st, FLOE_INVALID_ARGUMENT, "checkpoint save: no directory given");
  if (step < 0)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "checkpoint save: step %" PRId64 " is negative", step);
  if (keep < 0)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT, "checkpoint save: keep %d is negative",
                           keep);
  floe_code rc = check_prefix(prefix, st);
  if (rc != FLOE_OK) return rc;
  for (int i = 0; i < n; i++) {
    FloeVar *v = items[i].var;
    if (!st_type_of(v->dtype))
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "checkpoint save: variable '%s' has dtype %s, which safetensors "
                             "cannot hold",
                             items[i].name, floe_dtype_name(v->dtype));
    if (!utf8_valid(items[i].name))
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "checkpoint save: variable name '%s' is not valid UTF-8 (a "
                             "safetensors header is UTF-8 JSON)",
                             items[i].name);
    FloeTensor *val = floe__var_read(v, st);
    if (!val) {
      floe__status_prefix(st, "checkpoint save to %s", dir);
      return st->code;
    }
    items[i].value = floe__tensor_to_device(val, NULL, st);
    floe_tensor_release(val);
    if (!items[i].value) {
      floe__status_prefix(st, "checkpoint save: reading variable '%s'", items[i].name);
      return st->code;
    }
  }
  if (n > 1) qsort(items, (size_t)n, sizeof *items, item_cmp);
  for (int i = 1; i < n; i++)
    if (strcmp(items[i - 1].name, items[i].name) == 0)
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "checkpoint save: variable '%s' is given twice", items[i].name);
  if ((rc = make_dirs(dir, st)) != FLOE_OK) return rc;
  char *final = NULL;
  if ((rc = write_checkpoint(dir, prefix, step, items, n, &final, st)) != FLOE_OK) return rc;
  prune(dir, prefix, keep, strrchr(final, '/') + 1);
  if (path_out)
    *path_out = final;
  else
    floe__free(final);
  return FLOE_OK;
}

/* Caller frees *path_out with free(). */
floe_code floe_checkpoint_save(FloeSession *s, const char *dir, const char *prefix,
                               int64_t step, int keep, char **path_out, FloeStatus *status) {
  if (path_out) *path_out = NULL;
  if (!s) return floe_status_set(status, FLOE_INVALID_ARGUMENT, "checkpoint save: session is NULL");
  FloeStatus st = {FLOE_OK, NULL};
  Item *items;
  int n;
  floe_code rc = graph_items(s, &items, &n, &st);
  if (rc == FLOE_OK) {
    rc = save_items(dir, prefix ? prefix : DEFAULT_PREFIX, step, keep, items, n, path_out, &st);
    items_free(items, n);
  }
  return finish(status, &st, rc);
}

/* ------------------------------------------------------------------------------------ */
/* Reader: the header is parsed by a strict, bounded JSON parser that knows the format's
 * shape (an object of tensor objects and one string map), so its depth is fixed. */

typedef struct Entry {
  char *name;          /* decoded key; owned */
  size_t at;           /* header offset of the key, for messages */
  const StType *type;
  int rank;
  int64_t dims[FLOE_MAX_DIMS];
  uint64_t begin, end; /* relative to the data section */
} Entry;

typedef struct Ckpt {
  const char *path;    /* borrowed */
  int fd;
  uint64_t data_start, data_len;
  Entry *e;            /* sorted by name once validated */
  int n, cap;
  int64_t step;        /* metadata global_step; 0 when absent */
  bool has_step, has_hash;
  uint64_t hash;
  size_t hash_at;
} Ckpt;

static void ckpt_close(Ckpt *c) {
  for (int i = 0; i < c->n; i++) floe__free(c->e[i].name);
  floe__free(c->e);
  c->e = NULL;
  c->n = 0;
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
}

typedef struct Parser {
  const uint8_t *s; /* the header's JSON */
  size_t len, pos;
  Ckpt *c;
  FloeStatus *st;
} Parser;

/* File offset of header position pos. */
#define AT(pos) ((size_t)8 + (pos))

FLOE__PRINTF(3, 4)
static floe_code bad(Parser *p, size_t pos, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *m = floe__vasprintf(fmt, ap);
  va_end(ap);
  floe_status_set(p->st, FLOE_DATA_LOSS, "checkpoint %s: offset %zu: %s", p->c->path, AT(pos),
                  m ? m : "corrupt header");
  floe__free(m);
  return FLOE_DATA_LOSS;
}

/* What is at pos, for messages. */
static const char *seen(const Parser *p, size_t pos, char *buf, size_t len) {
  if (pos >= p->len) return "the end of the header";
  uint8_t c = p->s[pos];
  if (c >= 0x20 && c < 0x7F)
    snprintf(buf, len, "'%c'", c);
  else
    snprintf(buf, len, "byte 0x%02x", c);
  return buf;
}

static void ws(Parser *p) {
  while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' ||
                             p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
    p->pos++;
}

static floe_code expect(Parser *p, char ch, const char *where) {
  ws(p);
  if (p->pos < p->len && p->s[p->pos] == (uint8_t)ch) {
    p->pos++;
    return FLOE_OK;
  }
  char b[16];
  return bad(p, p->pos, "expected '%c' %s, found %s", ch, where, seen(p, p->pos, b, sizeof b));
}

/* 1 when the next byte (after whitespace) is ch, consumed. */
static bool accept(Parser *p, char ch) {
  ws(p);
  if (p->pos < p->len && p->s[p->pos] == (uint8_t)ch) {
    p->pos++;
    return true;
  }
  return false;
}

static int hexval(uint8_t c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static bool hex4(const uint8_t *s, uint32_t *v) {
  *v = 0;
  for (int i = 0; i < 4; i++) {
    int h = hexval(s[i]);
    if (h < 0) return false;
    *v = *v << 4 | (uint32_t)h;
  }
  return true;
}

/* A JSON string into *out (NUL-terminated, owned by the caller; no NUL inside). */
static floe_code parse_string(Parser *p, const char *what, char **out) {
  *out = NULL;
  ws(p);
  size_t start = p->pos;
  char b[16];
  if (start >= p->len || p->s[start] != '"')
    return bad(p, start, "expected %s (a string), found %s", what, seen(p, start, b, sizeof b));
  size_t end = start + 1;
  while (end < p->len && p->s[end] != '"') end += p->s[end] == '\\' ? 2 : 1;
  if (end >= p->len) return bad(p, start, "%s: unterminated string", what);
  char *d = floe__malloc(end - start); /* decoded text is never longer than its source */
  if (!d) return floe_status_set(p->st, FLOE_NO_MEMORY, "out of memory reading a header");
  size_t k = 0;
  for (size_t i = start + 1; i < end;) {
    uint8_t c = p->s[i];
    if (c < 0x20) {
      floe__free(d);
      return bad(p, i, "%s: control byte 0x%02x inside a string", what, c);
    }
    if (c >= 0x80) {
      size_t n = utf8_len(p->s + i, end - i);
      if (!n) {
        floe__free(d);
        return bad(p, i, "%s: invalid UTF-8", what);
      }
      memcpy(d + k, p->s + i, n);
      k += n;
      i += n;
      continue;
    }
    if (c != '\\') {
      d[k++] = (char)c;
      i++;
      continue;
    }
    uint8_t e = i + 1 < end ? p->s[i + 1] : 0;
    const char *simple = strchr("\"\\/bfnrt", e);
    if (e && simple) {
      d[k++] = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
      i += 2;
      continue;
    }
    uint32_t cp, lo;
    if (e != 'u' || i + 6 > end || !hex4(p->s + i + 2, &cp)) {
      floe__free(d);
      return bad(p, i, "%s: invalid escape sequence", what);
    }
    size_t used = 6;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (i + 12 > end || p->s[i + 6] != '\\' || p->s[i + 7] != 'u' ||
          !hex4(p->s + i + 8, &lo) || lo < 0xDC00 || lo > 0xDFFF) {
        floe__free(d);
        return bad(p, i, "%s: unpaired UTF-16 surrogate in an escape", what);
      }
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      used = 12;
    } else if ((cp >= 0xDC00 && cp <= 0xDFFF) || cp == 0) {
      floe__free(d);
      return bad(p, i, "%s: %s in an escape", what,
                 cp ? "unpaired UTF-16 surrogate" : "NUL character");
    }
    /* A 6-byte escape becomes at most 3 bytes, a 12-byte pair 4: the buffer suffices. */
    if (cp < 0x80) {
      d[k++] = (char)cp;
    } else if (cp < 0x800) {
      d[k++] = (char)(0xC0 | cp >> 6);
      d[k++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      d[k++] = (char)(0xE0 | cp >> 12);
      d[k++] = (char)(0x80 | (cp >> 6 & 0x3F));
      d[k++] = (char)(0x80 | (cp & 0x3F));
    } else {
      d[k++] = (char)(0xF0 | cp >> 18);
      d[k++] = (char)(0x80 | (cp >> 12 & 0x3F));
      d[k++] = (char)(0x80 | (cp >> 6 & 0x3F));
      d[k++] = (char)(0x80 | (cp & 0x3F));
    }
    i += used;
  }
  d[k] = '\0';
  p->pos = end + 1;
  *out = d;
  return FLOE_OK;
}

/* A non-negative JSON integer no larger than INT64_MAX. */
static floe_code parse_uint(Parser *p, const char *what, uint64_t *v) {
  ws(p);
  size_t start = p->pos;
  char b[16];
  if (start >= p->len || p->s[start] < '0' || p->s[start] > '9')
    return bad(p, start, "expected %s (a non-negative integer), found %s", what,
               seen(p, start, b, sizeof b));
  if (p->s[start] == '0' && start + 1 < p->len && p->s[start + 1] >= '0' &&
      p->s[start + 1] <= '9')
    return bad(p, start, "%s: a number with a leading zero", what);
  uint64_t x = 0;
  size_t i = start;
  for (; i < p->len && p->s[i] >= '0' && p->s[i] <= '9'; i++) {
    unsigned d = (unsigned)(p->s[i] - '0');
    if (x > ((uint64_t)INT64_MAX - d) / 10) return bad(p, start, "%s is too large", what);
    x = x * 10 + d;
  }
  if (i < p->len && (p->s[i] == '.' || p->s[i] == 'e' || p->s[i] == 'E'))
    return bad(p, start, "%s must be an integer", what);
  p->pos = i;
  *v = x;
  return FLOE_OK;
}

/* "[u, u, ...]" with at most max numbers. */
static floe_code parse_uints(Parser *p, const char *what, const char *name, uint64_t *v,
                             int max, int *count) {
  floe_code rc;
  *count = 0;
  if ((rc = expect(p, '[', what)) != FLOE_OK) return rc;
  if (accept(p, ']')) return FLOE_OK;
  for (;;) {
    size_t at = p->pos;
    uint64_t x = 0;
    if ((rc = parse_uint(p, what, &x)) != FLOE_OK) return rc;
    if (*count == max)
      return bad(p, at, "%s of tensor '%.*s' has more than %d entries", what, NAME_SHOWN, name,
                 max);
    v[(*count)++] = x;
    if (accept(p, ']')) return FLOE_OK;
    if ((rc = expect(p, ',', what)) != FLOE_OK) return rc;
  }
}

static floe_code parse_tensor(Parser *p, Entry *e) {
  floe_code rc;
  bool got_dtype = false, got_shape = false, got_off = false;
  char *key = NULL;
  if ((rc = expect(p, '{', "to open a tensor's description")) != FLOE_OK) return rc;
  if (accept(p, '}')) goto check;
  for (;;) {
    size_t at = (ws(p), p->pos);
    if ((rc = parse_string(p, "a field name", &key)) != FLOE_OK) return rc;
    if ((rc = expect(p, ':', "after a field name")) != FLOE_OK) goto err_free_key;
    if (strcmp(key, "dtype") == 0 && !got_dtype) {
      char *t;
      size_t tat = (ws(p), p->pos);
      if ((rc = parse_string(p, "dtype", &t)) != FLOE_OK) goto err_free_key;
      e->type = st_type_named(t);
      if (!e->type) {
        rc = bad(p, tat, "tensor '%.*s' has unknown dtype \"%.*s\"", NAME_SHOWN, e->name,
                 NAME_SHOWN, t);
        floe__free(t);
        goto err_free_key;
      }
      floe__free(t);
      got_dtype = true;
    } else if (strcmp(key, "shape") == 0 && !got_shape) {
      uint64_t d[FLOE_MAX_DIMS];
      if ((rc = parse_uints(p, "shape", e->name, d, FLOE_MAX_DIMS, &e->rank)) != FLOE_OK)
        goto err_free_key;
      for (int i = 0; i < e->rank; i++) e->dims[i] = (int64_t)d[i];
      got_shape = true;
    } else if (strcmp(key, "data_offsets") == 0 && !got_off) {
      uint64_t o[2];
      int k;
      size_t oat = (ws(p), p->pos);
      if ((rc = parse_uints(p, "data_offsets", e->name, o, 2, &k)) != FLOE_OK) goto err_free_key;
      if (k != 2) {
        rc = bad(p, oat, "data_offsets of tensor '%.*s' must be [begin, end]", NAME_SHOWN,
                 e->name);
        goto err_free_key;
      }
      e->begin = o[0];
      e->end = o[1];
      got_off = true;
    } else {
      bool dup = strcmp(key, "dtype") == 0 || strcmp(key, "shape") == 0 ||
                 strcmp(key, "data_offsets") == 0;
      rc = bad(p, at, "tensor '%.*s': %s field \"%.*s\"", NAME_SHOWN, e->name,
               dup ? "repeated" : "unknown", NAME_SHOWN, key);
      goto err_free_key;
    }
    floe__free(key);
    key = NULL;
    if (accept(p, '}')) break;
    if ((rc = expect(p, ',', "or '}' in a tensor's description")) != FLOE_OK) return rc;
  }
check:
  if (!got_dtype || !got_shape || !got_off)
    return bad(p, e->at, "tensor '%.*s' lacks its %s", NAME_SHOWN, e->name,
               !got_dtype ? "dtype" : !got_shape ? "shape" : "data_offsets");
  return FLOE_OK;

err_free_key:
  floe__free(key);
  return rc;
}

/* "__metadata__": a map of strings; global_step and variables_hash are checked. */
static floe_code parse_metadata(Parser *p) {
  floe_code rc;
  bool got_format = false, floe_format = false;
  size_t open_at = (ws(p), p->pos);
  char *key = NULL, *val = NULL;
  if ((rc = expect(p, '{', "to open __metadata__")) != FLOE_OK) return rc;
  if (accept(p, '}')) return FLOE_OK;
  for (;;) {
    size_t at = (ws(p), p->pos);
    if ((rc = parse_string(p, "a metadata key", &key)) != FLOE_OK) return rc;
    if ((rc = expect(p, ':', "after a metadata key")) != FLOE_OK) goto err_free_key;
    size_t vat = (ws(p), p->pos);
    if ((rc = parse_string(p, "a metadata value", &val)) != FLOE_OK) goto err_free_key;
    bool *seen_flag = strcmp(key, "global_step") == 0      ? &p->c->has_step
                      : strcmp(key, "variables_hash") == 0 ? &p->c->has_hash
                      : strcmp(key, "format") == 0         ? &got_format
                                                           : NULL;
    if (seen_flag && *seen_flag) {
      rc = bad(p, at, "metadata key \"%s\" is repeated", key);
      goto err_free_val;
    }
    if (seen_flag) *seen_flag = true;
    if (seen_flag == &got_format) {
      floe_format = strcmp(val, "floe") == 0;
    } else if (seen_flag == &p->c->has_step) {
      uint64_t x = 0;
      size_t i = 0;
      bool ok = val[0] != '\0' && strlen(val) <= MAX_STEP_DIGITS && (val[0] != '0' || !val[1]);
      for (; ok && val[i]; i++) {
        unsigned d = (unsigned)(val[i] - '0');
        ok = d <= 9 && x <= ((uint64_t)INT64_MAX - d) / 10;
        x = x * 10 + d;
      }
      if (!ok) {
        rc = bad(p, vat, "global_step \"%.*s\" is not a non-negative decimal integer", NAME_SHOWN,
                 val);
        goto err_free_val;
      }
      p->c->step = (int64_t)x;
    } else if (seen_flag == &p->c->has_hash) {
      bool ok = strlen(val) == 16;
      uint64_t x = 0;
      for (int i = 0; ok && i < 16; i++) {
        int h = hexval((uint8_t)val[i]);
        ok = h >= 0 && !(val[i] >= 'A' && val[i] <= 'F');
        x = x << 4 | (uint64_t)(h < 0 ? 0 : h);
      }
      if (!ok) {
        rc = bad(p, vat, "variables_hash \"%.*s\" is not 16 lowercase hex digits", NAME_SHOWN,
                 val);
        goto err_free_val;
      }
      p->c->hash = x;
      p->c->hash_at = vat;
    }
    floe__free(key);
    floe__free(val);
    key = val = NULL;
    if (accept(p, '}')) break;
    if ((rc = expect(p, ',', "or '}' in __metadata__")) != FLOE_OK) return rc;
  }
  /* Floe writes both: a Floe file without them is damaged. */
  if (floe_format && (!p->c->has_step || !p->c->has_hash))
    return bad(p, open_at, "__metadata__ of a Floe checkpoint lacks %s",
               !p->c->has_step ? "global_step" : "variables_hash");
  return FLOE_OK;

err_free_val:
  floe__free(val);
err_free_key:
  floe__free(key);
  return rc;
}

static floe_code parse_header(Parser *p) {
  floe_code rc;
  bool got_meta = false;
  char b[16];
  if (p->len == 0 || p->s[0] != '{')
    return bad(p, 0, "the header does not start with '{' (found %s): not a safetensors file",
               seen(p, 0, b, sizeof b));
  p->pos = 1;
  if (!accept(p, '}')) {
    for (;;) {
      size_t at = (ws(p), p->pos);
      char *key;
      if ((rc = parse_string(p, "a tensor name", &key)) != FLOE_OK) return rc;
      if ((rc = expect(p, ':', "after a tensor name")) != FLOE_OK) {
        floe__free(key);
        return rc;
      }
      if (strcmp(key, "__metadata__") == 0) {
        floe__free(key);
        if (got_meta) return bad(p, at, "__metadata__ is repeated");
        got_meta = true;
        if ((rc = parse_metadata(p)) != FLOE_OK) return rc;
      } else {
        Ckpt *c = p->c;
        if (c->n == c->cap) {
          int cap = c->cap ? 2 * c->cap : 16;
          Entry *e = floe__realloc(c->e, (size_t)cap * sizeof *e);
          if (!e) {
            floe__free(key);
            return floe_status_set(p->st, FLOE_NO_MEMORY, "out of memory reading a header");
          }
          c->e = e;
          c->cap = cap;
        }
        Entry *e = &c->e[c->n++];
        memset(e, 0, sizeof *e);
        e->name = key;
        e->at = at;
        if ((rc = parse_tensor(p, e)) != FLOE_OK) return rc;
      }
      if (accept(p, '}')) break;
      if ((rc = expect(p, ',', "or '}' after a tensor")) != FLOE_OK) return rc;
    }
  }
  ws(p); /* padding */
  if (p->pos < p->len)
    return bad(p, p->pos, "unexpected %s after the header's closing '}'",
               seen(p, p->pos, b, sizeof b));
  return FLOE_OK;
}

static int entry_name_cmp(const void *a, const void *b) {
  return strcmp(((const Entry *)a)->name, ((const Entry *)b)->name);
}

static int entry_off_cmp(const void *a, const void *b) {
  const Entry *x = *(const Entry *const *)a, *y = *(const Entry *const *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

FLOE__PRINTF(4, 5)
static floe_code bad_entry(Ckpt *c, const Entry *e, FloeStatus *st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *m = floe__vasprintf(fmt, ap);
  va_end(ap);
  floe_status_set(st, FLOE_DATA_LOSS, "checkpoint %s: offset %zu: tensor '%.*s': %s", c->path,
                  AT(e->at), NAME_SHOWN, e->name, m ? m : "corrupt");
  floe__free(m);
  return FLOE_DATA_LOSS;
}

/* Sizes agree with dtype and shape; the tensors tile the data section exactly (no gap,
 * overlap or byte outside any tensor); names are unique; the hash matches. */
static floe_code validate(Ckpt *c, FloeStatus *st) {
  for (int i = 0; i < c->n; i++) {
    Entry *e = &c->e[i];
    uint64_t bytes = e->type->size;
    for (int k = 0; k < e->rank; k++) {
      uint64_t d = (uint64_t)e->dims[k];
      if (d && bytes > UINT64_MAX / d)
        return bad_entry(c, e, st, "its shape's byte size overflows 64 bits");
      bytes *= d;
    }
    char sb[DIMS_BUF];
    if (e->begin > e->end || e->end - e->begin != bytes)
      return bad_entry(c, e, st,
                       "data_offsets [%" PRIu64 ", %" PRIu64 "] hold %s bytes but %s %s needs %" PRIu64,
                       e->begin, e->end, e->begin > e->end ? "a negative number of" : "the wrong number of",
                       e->type->name, dims_str(e->rank, e->dims, sb, sizeof sb), bytes);
    if (e->end > c->data_len)
      return bad_entry(c, e, st,
                       "data_offsets end %" PRIu64 " is past the data section's %" PRIu64
                       " bytes (file offset %" PRIu64 "; the file is truncated or corrupt)",
                       e->end, c->data_len, c->data_start + e->end);
  }
  const Entry **by_off = floe__malloc((size_t)(c->n ? c->n : 1) * sizeof *by_off);
  if (!by_off) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory checking %s", c->path);
  for (int i = 0; i < c->n; i++) by_off[i] = &c->e[i];
  qsort(by_off, (size_t)c->n, sizeof *by_off, entry_off_cmp);
  uint64_t pos = 0;
  for (int i = 0; i < c->n; i++) {
    const Entry *e = by_off[i];
    if (e->begin != pos) {
      floe_code rc = bad_entry(c, by_off[i], st,
                               "data starts at %" PRIu64 " but the previous tensor ends at %" PRIu64
                               " (%s)",
                               e->begin, pos, e->begin > pos ? "a gap" : "overlapping tensors");
      floe__free(by_off);
      return rc;
    }
    pos = e->end;
  }
  floe__free(by_off);
  if (pos != c->data_len)
    return floe_status_set(st, FLOE_DATA_LOSS,
                           "checkpoint %s: offset %" PRIu64 ": %" PRIu64
                           " bytes after the last tensor belong to none",
                           c->path, c->data_start + pos, c->data_len - pos);
  qsort(c->e, (size_t)c->n, sizeof *c->e, entry_name_cmp);
  uint64_t h = FNV_OFFSET;
  for (int i = 0; i < c->n; i++) {
    if (i && strcmp(c->e[i - 1].name, c->e[i].name) == 0)
      return bad_entry(c, &c->e[i], st, "the name appears twice");
    h = hash_line(h, c->e[i].name, c->e[i].type, c->e[i].rank, c->e[i].dims);
  }
  if (c->has_hash && h != c->hash)
    return floe_status_set(st, FLOE_DATA_LOSS,
                           "checkpoint %s: offset %zu: variables_hash %016" PRIx64
                           " does not match the tensors' names, dtypes and shapes (%016" PRIx64
                           "): the header is corrupt or was edited",
                           c->path, AT(c->hash_at), c->hash, h);
  return FLOE_OK;
}

/* 0, -1 at end of file, or an errno. */
static int pread_all(int fd, void *buf, size_t n, uint64_t off) {
  uint8_t *p = buf;
  while (n) {
    ssize_t k = pread(fd, p, n, (off_t)off);
    if (k < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (k == 0) return -1;
    p += k;
    n -= (size_t)k;
    off += (uint64_t)k;
  }
  return 0;
}

/* Opens and validates path (header and layout; the data is read later). On error c is
 * closed. */
static floe_code ckpt_open(const char *path, Ckpt *c, FloeStatus *st) {
  memset(c, 0, sizeof *c);
  c->path = path;
  c->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block us */
  if (c->fd < 0) {
    int e = errno;
    return floe_status_set(st, errno_code(e), "cannot open checkpoint %s: %s", path, strerror(e));
  }
  floe_code rc;
  struct stat sb;
  if (fstat(c->fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    rc = floe_status_set(st, FLOE_INVALID_ARGUMENT, "checkpoint %s is not a regular file", path);
    goto err_close;
  }
  uint64_t size = (uint64_t)sb.st_size;
  uint8_t lenb[8];
  int e;
  if (size < 8 || (e = pread_all(c->fd, lenb, 8, 0)) < 0) {
    rc = floe_status_set(st, FLOE_DATA_LOSS,
                         "checkpoint %s: offset 0: the file has %" PRIu64
                         " bytes, fewer than the 8 of the header length (truncated)",
                         path, size);
    goto err_close;
  }
  if (e > 0) {
    rc = floe_status_set(st, errno_code(e), "checkpoint %s: offset 0: read failed: %s", path,
                         strerror(e));
    goto err_close;
  }
  uint64_t hl = 0;
  for (int k = 7; k >= 0; k--) hl = hl << 8 | lenb[k];
  if (hl > HEADER_LIMIT || hl > size - 8) {
    rc = floe_status_set(st, FLOE_DATA_LOSS,
                         "checkpoint %s: offset 0: header length %" PRIu64 " is %s (the file "
                         "has %" PRIu64 " bytes): truncated or not a safetensors file",
                         path, hl, hl > HEADER_LIMIT ? "over the 100000000-byte limit"
                                                     : "past the end of the file",
                         size);
    goto err_close;
  }
  uint8_t *h = floe__malloc((size_t)hl);
  if (!h) {
    rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory reading the header of %s", path);
    goto err_close;
  }
  if ((e = pread_all(c->fd, h, (size_t)hl, 8)) != 0) {
    rc = floe_status_set(st, e < 0 ? FLOE_DATA_LOSS : errno_code(e),
                         "checkpoint %s: offset 8: reading the %" PRIu64 "-byte header failed: %s",
                         path, hl, e < 0 ? "the file shrank" : strerror(e));
    floe__free(h);
    goto err_close;
  }
  c->data_start = 8 + hl;
  c->data_len = size - c->data_start;
  Parser p = {.s = h, .len = (size_t)hl, .c = c, .st = st};
  rc = parse_header(&p);
  floe__free(h);
  if (rc == FLOE_OK) rc = validate(c, st);
  if (rc != FLOE_OK) goto err_close;
  return FLOE_OK;

err_close:
  ckpt_close(c);
  return rc;
}

static const Entry *ckpt_find(const Ckpt *c, const char *name) {
  Entry key = {.name = (char *)name};
  return c->n ? bsearch(&key, c->e, (size_t)c->n, sizeof *c->e, entry_name_cmp) : NULL;
}

static bool shape_fits(const FloeShape *want, const Entry *e) {
  if (want->rank == FLOE_RANK_UNKNOWN) return true;
  if (want->rank != e->rank) return false;
  for (int i = 0; i < e->rank; i++)
    if (want->dims[i] != FLOE_DIM_UNKNOWN && want->dims[i] != e->dims[i]) return false;
  return true;
}

/* Every item has a tensor of its variable's dtype and shape. */
static floe_code match_items(const Ckpt *c, const Item *items, int n, FloeStatus *st) {
  for (int i = 0; i < n; i++) {
    const FloeVar *v = items[i].var;
    const Entry *e = ckpt_find(c, items[i].name);
    char ws1[64], ws2[DIMS_BUF];
    if (!e) {
      char list[LIST_SHOWN * (NAME_SHOWN + 4) + 8];
      size_t k = 0;
      list[0] = '\0';
      for (int j = 0; j < c->n && j < LIST_SHOWN; j++)
        k += (size_t)snprintf(list + k, sizeof list - k, "%s'%.*s'", j ? ", " : "", NAME_SHOWN,
                              c->e[j].name);
      if (c->n > LIST_SHOWN) snprintf(list + k, sizeof list - k, ", ...");
      return floe_status_set(st, FLOE_NOT_FOUND,
                             "checkpoint %s has no tensor for variable '%s' (it holds %d: %s)",
                             c->path, items[i].name, c->n, c->n ? list : "none");
    }
    bool dt_ok = e->type->dt == v->dtype;
    if (!dt_ok || !shape_fits(&v->shape, e))
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "checkpoint %s: variable '%s' %s: expected %s %s (the graph's), "
                             "found %s %s in the file",
                             c->path, items[i].name, dt_ok ? "has another shape" : "has another dtype",
                             floe_dtype_name(v->dtype), floe_shape_str(&v->shape, ws1, sizeof ws1),
                             e->type->name, dims_str(e->rank, e->dims, ws2, sizeof ws2));
  }
  return FLOE_OK;
}

/* Reads each matched tensor into a new host tensor (items[i].value). */
static floe_code read_items(const Ckpt *c, Item *items, int n, FloeStatus *st) {
  for (int i = 0; i < n; i++) {
    const Entry *e = ckpt_find(c, items[i].name);
    FloeTensor *t = floe__tensor_alloc(NULL, e->type->dt, e->rank, e->dims, st);
    if (!t) {
      floe__status_prefix(st, "checkpoint %s: variable '%s'", c->path, items[i].name);
      return st->code;
    }
    items[i].value = t;
    int err = t->nbytes ? pread_all(c->fd, floe_tensor_data(t), t->nbytes, c->data_start + e->begin)
                        : 0;
    if (err)
      return floe_status_set(st, err < 0 ? FLOE_DATA_LOSS : errno_code(err),
                             "checkpoint %s: offset %" PRIu64 ": reading variable '%s' failed: %s",
                             c->path, c->data_start + e->begin, items[i].name,
                             err < 0 ? "the file shrank while being read" : strerror(err));
#if HOST_BIG_ENDIAN
    swap_elements(floe_tensor_data(t), t->nbytes, e->type->size);
#endif
  }
  return FLOE_OK;
}

/* Validates the whole file, checks every item, reads every value, and only then assigns
 * them all; an assignment that still fails puts back the values it replaced. */
static floe_code restore_items(const char *path, Item *items, int n, int64_t *step_out,
                               FloeStatus *st) {
  if (!path) return floe_status_set(st, FLOE_INVALID_ARGUMENT, "checkpoint restore: path is NULL");
  struct stat sb;
  char *picked = NULL;
  if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
    if (!(picked = pick_in_dir(path, st))) return st->code;
    path = picked;
  }
  Ckpt c;
  floe_code rc = ckpt_open(path, &c, st);
  if (rc != FLOE_OK) goto out;
  if ((rc = match_items(&c, items, n, st)) != FLOE_OK) goto out_close;
  if ((rc = read_items(&c, items, n, st)) != FLOE_OK) goto out_close;
  FloeTensor **old = floe__calloc((size_t)(n ? n : 1), sizeof *old);
  if (!old) {
    rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory restoring %s", path);
    goto out_close;
  }
  FloeStatus scratch = {FLOE_OK, NULL};
  for (int i = 0; i < n; i++) {
    old[i] = floe__var_read(items[i].var, &scratch); /* NULL: not initialised yet */
    floe_status_clear(&scratch);
  }
  for (int i = 0; i < n && rc == FLOE_OK; i++) {
    rc = floe__var_assign(items[i].var, items[i].value, true, st);
    if (rc == FLOE_OK) continue;
    floe__status_prefix(st, "checkpoint %s: restoring variable '%s' (no variable changed)", path,
                        items[i].name);
    for (int j = i - 1; j >= 0; j--)
      if (old[j]) floe__var_assign(items[j].var, old[j], false, &scratch);
    floe_status_clear(&scratch);
  }
  for (int i = 0; i < n; i++) floe_tensor_release(old[i]);
  floe__free(old);
  if (rc == FLOE_OK && step_out) *step_out = c.step;
out_close:
  ckpt_close(&c);
out:
  floe__free(picked);
  return rc;
}

floe_code floe_checkpoint_restore(FloeSession *s, const char *path, int64_t *step_out,
                                  FloeStatus *status) {
  if (!s)
    return floe_status_set(status, FLOE_INVALID_ARGUMENT, "checkpoint restore: session is NULL");
  FloeStatus st = {FLOE_OK, NULL};
  Item *items;
  int n;
  floe_code rc = graph_items(s, &items, &n, &st);
  if (rc == FLOE_OK) {
    rc = restore_items(path, items, n, step_out, &st);
    items_free(items, n);
  }
  return finish(status, &st, rc);
}

/* ------------------------------------------------------------------------------------ */
/* Save and Restore kernels: they get the variables' handles (FLOE__KERNEL_RAW_RESOURCES). */

/* Items for the resource inputs first..num_inputs-1 of ctx's node; each named after the
 * VarHandleOp feeding it (as floe_checkpoint_save names it), else after the variable. */
static floe_code kernel_items(FloeKernelContext *ctx, int first, Item **out, int *n_out,
                              FloeStatus *st) {
  int n = ctx->num_inputs - first;
  Item *items = floe__calloc((size_t)(n > 0 ? n : 1), sizeof *items);
  if (!items) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
  for (int i = 0; i < n; i++) {
    const FloeNode *src = ctx->node->inputs[first + i].node;
    char what[64];
    snprintf(what, sizeof what, "resource input %d", i);
    items[i].var = floe__resource_from_handle(ctx->inputs[first + i], what, st);
    if (!items[i].var) {
      items_free(items, i);
      return st->code;
    }
    items[i].name = src && is_op(src, "VarHandleOp") ? src->name : items[i].var->name;
  }
  *out = items;
  *n_out = n;
  return FLOE_OK;
}

static floe_code kernel_fail(FloeKernelContext *ctx, FloeStatus *st) {
  floe_code rc = floe__host_api()->ctx_set_error(ctx, st->code, "%s", floe_status_message(st));
  floe_status_clear(st);
  return rc;
}

static floe_code save_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  FloeStatus st = {FLOE_OK, NULL};
  const FloeAttrValue *keep = floe__attrs_get(&ctx->node->attrs, "keep");
  FloeTensor *step_t = floe__tensor_to_device(ctx->inputs[0], NULL, &st);
  if (!step_t) return kernel_fail(ctx, &st);
  int64_t step = 0;
  bool scalar = step_t->num_elements == 1;
  if (scalar) memcpy(&step, floe_tensor_data(step_t), sizeof step);
  floe_tensor_release(step_t);
  if (!scalar) {
    floe_status_set(&st, FLOE_INVALID_ARGUMENT, "step must be a scalar");
    return kernel_fail(ctx, &st);
  }
  int64_t k = keep && keep->kind == FLOE_ATTR_INT ? keep->u.i : 0;
  if (k < 0 || k > INT_MAX) {
    floe_status_set(&st, FLOE_INVALID_ARGUMENT, "keep %" PRId64 " is out of range", k);
    return kernel_fail(ctx, &st);
  }
  Item *items;
  int n;
  if (kernel_items(ctx, 1, &items, &n, &st) != FLOE_OK) return kernel_fail(ctx, &st);
  floe_code rc = save_items(floe__node_attr_str(ctx->node, "dir"), floe__node_attr_str(ctx->node, "prefix"), step,
                            (int)k, items, n, NULL, &st);
  items_free(items, n);
  return rc == FLOE_OK ? FLOE_OK : kernel_fail(ctx, &st);
}

static floe_code restore_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  FloeStatus st = {FLOE_OK, NULL};
  Item *items;
  int n;
  if (kernel_items(ctx, 0, &items, &n, &st) != FLOE_OK) return kernel_fail(ctx, &st);
  int64_t step = 0;
  floe_code rc = restore_items(floe__node_attr_str(ctx->node, "path"), items, n, &step, &st);
  items_free(items, n);
  if (rc != FLOE_OK) return kernel_fail(ctx, &st);
  const FloeHostApi *host = floe__host_api();
  FloeTensor *out;
  if ((rc = host->ctx_allocate_output(ctx, 0, 0, NULL, &out)) != FLOE_OK) return rc;
  if (floe__device_copy(ctx->device, host->tensor_data(out), NULL, &step, sizeof step, &st) !=
      FLOE_OK)
    return kernel_fail(ctx, &st);
  return FLOE_OK;
}

floe_code floe__checkpoint_kernels_register(struct FloeRuntime *rt, FloeStatus *st) {
  floe_code rc = floe__core_kernel_add(rt, "Save", FLOE__KERNEL_RAW_RESOURCES, save_compute, st);
  if (rc != FLOE_OK) return rc;
  return floe__core_kernel_add(rt, "Restore", FLOE__KERNEL_RAW_RESOURCES, restore_compute, st);
}

/* ------------------------------------------------------------------------------------ */
/* Export of a frozen graph. */

enum { UNNEEDED = 0, KEEP = 1, FREEZE = 2 };

/* A ReadVariableOp of a VarHandleOp: becomes a Const of the variable's value. */
static bool freezable(const FloeNode *n) {
  return is_op(n, "ReadVariableOp") && n->num_inputs == 1 &&
         is_op(n->inputs[0].node, "VarHandleOp");
}

static bool uses_resources(const FloeNode *n) {
  for (int i = 0; i < n->num_inputs; i++)
    if (n->inputs[i].node->out_dtypes[n->inputs[i].index] == FLOE_RESOURCE) return true;
  for (int i = 0; i < n->num_outputs; i++)
    if (n->out_dtypes[i] == FLOE_RESOURCE) return true;
  return false;
}

/* Marks what outputs need (data and control inputs), stopping at freezable reads. */
static floe_code mark_needed(const FloeGraph *g, const char *const *outputs, int num_outputs,
                             uint8_t *mark, FloeStatus *st) {
  int *stack = floe__malloc((size_t)(g->num_nodes + num_outputs + 1) * sizeof *stack);
  if (!stack) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
  int top = 0;
  for (int i = 0; i < num_outputs; i++) {
    FloeOutput o;
    if (floe__graph_resolve_output(g, outputs[i], &o, st) != FLOE_OK) {
      floe__free(stack);
      floe__status_prefix(st, "export: output %d", i);
      return st->code;
    }
    stack[top++] = o.node->id;
  }
  /* Each node is pushed at most once after the outputs (marked when pushed). */
  for (int i = 0; i < top; i++) mark[stack[i]] = freezable(g->nodes[stack[i]]) ? FREEZE : KEEP;
  while (top > 0) {
    const FloeNode *n = g->nodes[stack[--top]];
    if (mark[n->id] == FREEZE) continue;
    for (int i = 0; i < n->num_inputs + n->num_control; i++) {
      const FloeNode *in = i < n->num_inputs ? n->inputs[i].node : n->control[i - n->num_inputs];
      if (mark[in->id]) continue;
      mark[in->id] = freezable(in) ? FREEZE : KEEP;
      stack[top++] = in->id;
    }
  }
  floe__free(stack);
  /* Name the node that works on a variable rather than the VarHandleOp it needs. */
  int culprit = -1;
  for (int i = 0; i < g->num_nodes; i++)
    if (mark[i] == KEEP && uses_resources(g->nodes[i]) &&
        (culprit < 0 || (is_op(g->nodes[culprit], "VarHandleOp") &&
                         !is_op(g->nodes[i], "VarHandleOp"))))
      culprit = i;
  if (culprit >= 0)
      return floe_status_set(st, FLOE_FAILED_PRECONDITION,
                             "export: node '%s' (%s) is needed by the outputs and works on a "
                             "variable, which a frozen graph does not have (only reads of "
                             "variables become constants); export outputs of an inference "
                             "graph that does not update state",
                             g->nodes[culprit]->name, g->nodes[culprit]->op->name);
  return FLOE_OK;
}

/* The Const replacing read node n. */
static FloeNode *add_frozen(FloeGraph *out, FloeResourceMgr *m, const FloeNode *n,
                            FloeStatus *st) {
  FloeVar *v = node_var(m, n->inputs[0].node, st);
  FloeTensor *val = v ? floe__var_read(v, st) : NULL;
  if (!val) {
    floe__status_prefix(st, "export: freezing '%s'", n->name);
    return NULL;
  }
  FloeTensor *host = floe_tensor_copy(val, st);
  floe_tensor_release(val);
  if (!host) return NULL;
  FloeAttrs attrs;
  floe__attrs_init(&attrs);
  FloeAttrValue tv = {.kind = FLOE_ATTR_TENSOR, .u.tensor = host};
  FloeAttrValue dv = {.kind = FLOE_ATTR_TYPE, .u.type = host->dtype};
  FloeNode *c = NULL;
  if (floe__attrs_set(&attrs, "value", &tv, st) == FLOE_OK &&
      floe__attrs_set(&attrs, "dtype", &dv, st) == FLOE_OK) {
    FloeNodeSpec spec = {.op = "Const", .name = n->name, .attrs = &attrs};
    c = floe__graph_add_node(out, &spec, st);
  } else {
    floe__attr_value_clear(&tv);
  }
  floe__attrs_clear(&attrs);
  return c;
}

/* A copy of n in out, its inputs mapped through map, placed nowhere. */
static FloeNode *add_copy(FloeGraph *out, const FloeNode *n, FloeNode *const *map,
                          FloeStatus *st) {
  int nargs = n->op->num_inputs;
  FloeOutput *ins = floe__malloc((size_t)(n->num_inputs + 1) * sizeof *ins);
  int *sizes = floe__calloc((size_t)(nargs + 1), sizeof *sizes);
  FloeNode **ctl = floe__malloc((size_t)(n->num_control + 1) * sizeof *ctl);
  FloeNode *c = NULL;
  if (!ins || !sizes || !ctl) {
    floe_status_set(st, FLOE_NO_MEMORY, "export: out of memory copying node '%s'", n->name);
    goto out;
  }
  for (int i = 0; i < n->num_inputs; i++) {
    ins[i].node = map[n->inputs[i].node->id];
    ins[i].index = n->inputs[i].index;
    sizes[n->input_arg[i]]++;
  }
  for (int i = 0; i < n->num_control; i++) ctl[i] = map[n->control[i]->id];
  FloeNodeSpec spec = {.op = n->op->name,
                       .name = n->name,
                       .inputs = ins,
                       .num_inputs = n->num_inputs,
                       .list_sizes = sizes,
                       .num_lists = nargs,
                       .control = ctl,
                       .num_control = n->num_control,
                       .attrs = &n->attrs};
  c = floe__graph_add_node(out, &spec, st);
out:
  floe__free(ins);
  floe__free(sizes);
  floe__free(ctl);
  return c;
}

floe_code floe_export_frozen(FloeSession *s, const char *const *outputs, int num_outputs,
                             const char *path, FloeStatus *status) {
  if (!s || !path || !outputs || num_outputs <= 0)
    return floe_status_set(status, FLOE_INVALID_ARGUMENT,
                           "export: needs a session, a path and at least one output");
  const FloeGraph *g = floe__session_graph(s);
  FloeResourceMgr *m = floe__session_resources(s);
  FloeStatus st = {FLOE_OK, NULL};
  floe_code rc;
  uint8_t *mark = floe__calloc((size_t)(g->num_nodes + 1), 1);
  FloeNode **map = floe__calloc((size_t)(g->num_nodes + 1), sizeof *map);
  FloeGraph *out = floe_graph_new();
  if (!mark || !map || !out) {
    rc = floe_status_set(&st, FLOE_NO_MEMORY, "export: out of memory");
    goto done;
  }
  if ((rc = mark_needed(g, outputs, num_outputs, mark, &st)) != FLOE_OK) goto done;
  /* Graph order is topological: every input was added before its consumer. */
  for (int i = 0; i < g->num_nodes; i++) {
    if (!mark[i]) continue;
    const FloeNode *n = g->nodes[i];
    map[i] = mark[i] == FREEZE ? add_frozen(out, m, n, &st) : add_copy(out, n, map, &st);
    if (!map[i]) {
      rc = st.code != FLOE_OK ? st.code : FLOE_INTERNAL;
      if (mark[i] == KEEP) floe__status_prefix(&st, "export");
      goto done;
    }
  }
  rc = floe_graph_save(out, path, &st);
done:
  floe_graph_free(out);
  floe__free(map);
  floe__free(mark);
  return finish(status, &st, rc);
}
