/* SPDX-License-Identifier: Apache-2.0 */
/* checkpoint.c - checkpoints of a session's variables (docs/checkpoints.md): files named
 * <prefix>-<step>.safetensors written atomically (temporary file, fsync, rename) with keep-N
 * retention, all-or-nothing restore from a file or a directory's newest checkpoint, and the
 * Save / Restore kernels. The format itself is safetensors.c's. */
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

#include "checkpoint_private.h"

#define DEFAULT_PREFIX "ckpt"
#define SUFFIX ".safetensors"
#define SUFFIX_LEN (sizeof SUFFIX - 1)
#define STEP_DIGITS 10          /* steps are zero-padded to at least this many digits */
#define MAX_STEP_DIGITS FLOE__CKPT_MAX_STEP_DIGITS
#define MAX_PREFIX 180          /* leaves room in NAME_MAX for the step and a temp suffix */
#define NAME_SHOWN FLOE__CKPT_NAME_SHOWN
#define LIST_SHOWN 6            /* tensor names listed when a variable is missing */
#define DIMS_BUF FLOE__SAFETENSORS_DIMS_BUF

typedef FloeCkptItem Item;
typedef FloeSafetensorsEntry Entry;
typedef FloeSafetensorsFile StFile;

/* ------------------------------------------------------------------------------------ */
/* Variables to write or restore. */

void floe__ckpt_items_free(Item *items, int n) {
  if (!items) return;
  for (int i = 0; i < n; i++) floe_tensor_release(items[i].value);
  floe__free(items);
}

static int item_cmp(const void *a, const void *b) {
  return strcmp(((const Item *)a)->name, ((const Item *)b)->name);
}

/* Internal code always has a status to read codes from. */
floe_code floe__ckpt_finish(FloeStatus *status, FloeStatus *st, floe_code rc) {
  if (rc != FLOE_OK && st->code == FLOE_OK) floe_status_set(st, rc, "%s", floe_code_message(rc));
  floe__status_copy(status, st);
  floe_status_clear(st);
  return rc;
}

FloeVar *floe__ckpt_node_var(FloeResourceMgr *m, const FloeNode *n, FloeStatus *st) {
  const FloeAttrValue *dt = floe__attrs_get(&n->attrs, "dtype");
  const FloeAttrValue *shape = floe__attrs_get(&n->attrs, "shape");
  if (!dt || dt->kind != FLOE_ATTR_TYPE || !shape || shape->kind != FLOE_ATTR_SHAPE) {
    floe_status_set(st, FLOE_INTERNAL, "variable '%s': VarHandleOp lacks its dtype or shape",
                    n->name);
    return NULL;
  }
  const char *shared = floe__node_attr_str(n, "shared_name");
  return floe__resources_lookup(m, floe__node_attr_str(n, "container"),
                                shared[0] ? shared : n->name, dt->u.type, &shape->u.shape, st);
}

static bool is_op(const FloeNode *n, const char *op) { return strcmp(n->op->name, op) == 0; }

/* Every VarHandleOp of the session's graph, in graph order; in a cluster session without
 * their FloeVars (they may live on other tasks). *out: caller frees with items_free. */
floe_code floe__ckpt_graph_items(FloeSession *s, Item **out, int *n_out, FloeStatus *st) {
  const FloeGraph *g = floe__session_graph(s);
  FloeResourceMgr *m = floe__session_is_cluster(s) ? NULL : floe__session_resources(s);
  int n = 0;
  for (int i = 0; i < g->num_nodes; i++) n += is_op(g->nodes[i], "VarHandleOp");
  Item *items = floe__calloc((size_t)(n ? n : 1), sizeof *items);
  if (!items) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory listing %d variables", n);
  int k = 0;
  for (int i = 0; i < g->num_nodes; i++) {
    const FloeNode *node = g->nodes[i];
    if (!is_op(node, "VarHandleOp")) continue;
    items[k].name = node->name;
    items[k].node = node;
    const FloeAttrValue *dt = floe__attrs_get(&node->attrs, "dtype");
    const FloeAttrValue *shape = floe__attrs_get(&node->attrs, "shape");
    if (!dt || dt->kind != FLOE_ATTR_TYPE || !shape || shape->kind != FLOE_ATTR_SHAPE) {
      floe__ckpt_items_free(items, k);
      return floe_status_set(st, FLOE_INTERNAL, "variable '%s': VarHandleOp lacks its dtype or "
                             "shape", node->name);
    }
    items[k].dtype = dt->u.type;
    items[k].shape = shape->u.shape;
    const FloeAttrValue *full = floe__attrs_get(&node->attrs, "full_name");
    const FloeAttrValue *fs = floe__attrs_get(&node->attrs, "full_shape");
    if (full && full->kind == FLOE_ATTR_STRING && full->u.s && full->u.s[0] && fs &&
        fs->kind == FLOE_ATTR_SHAPE) {
      items[k].full_name = full->u.s;
      items[k].full_shape = fs->u.shape;
      items[k].axis = (int)floe__node_attr_int(node, "part_axis", 0);
      items[k].offset = floe__node_attr_int(node, "part_offset", 0);
    }
    if (m && !(items[k].var = floe__ckpt_node_var(m, node, st))) {
      floe__ckpt_items_free(items, k);
      return st->code;
    }
    k++;
  }
  *out = items;
  *n_out = n;
  return FLOE_OK;
}


/* ------------------------------------------------------------------------------------ */
/* Sharded variables: checkpoints hold the whole. */

/* Copies shard (rows [offset, offset + shard's dim) of axis) between the whole and the shard:
 * into the whole when to_whole, else out of it. Shapes were checked by the caller. */
static void shard_copy(FloeTensor *whole, FloeTensor *shard, int axis, int64_t offset,
                       bool to_whole) {
  int64_t outer = 1, inner = (int64_t)floe_dtype_size(whole->dtype);
  for (int i = 0; i < axis; i++) outer *= whole->dims[i];
  for (int i = axis + 1; i < whole->rank; i++) inner *= whole->dims[i];
  int64_t wrows = whole->dims[axis], srows = shard->dims[axis];
  char *w = floe_tensor_data(whole), *s = floe_tensor_data(shard);
  for (int64_t o = 0; o < outer; o++) {
    char *wp = w + (o * wrows + offset) * inner, *sp = s + o * srows * inner;
    if (to_whole) memcpy(wp, sp, (size_t)(srows * inner));
    else memcpy(sp, wp, (size_t)(srows * inner));
  }
}

/* Whether shard item it fits in its whole: same rank, the same dims off the axis, within it. */
static bool shard_fits(const Item *it) {
  const FloeShape *w = &it->full_shape, *s = &it->shape;
  if (w->rank != s->rank || it->axis < 0 || it->axis >= w->rank || it->offset < 0) return false;
  for (int i = 0; i < w->rank; i++)
    if (i != it->axis ? s->dims[i] != w->dims[i] : it->offset + s->dims[i] > w->dims[i])
      return false;
  return true;
}

/* Save: each sharded variable's shards (values read) become one item, the whole under its
 * name; the other shards' items are dropped (the tail of items, values NULL). *n shrinks. */
static floe_code merge_shards(Item *items, int *n, FloeStatus *st) {
  for (int i = 0; i < *n; i++) {
    if (!items[i].full_name || !items[i].full_name[0]) continue; /* whole, or merged already */
    const char *full = items[i].full_name;
    FloeShape fs = items[i].full_shape;
    FloeTensor *whole = floe__tensor_alloc(NULL, items[i].dtype, fs.rank, fs.dims, st);
    if (!whole) return st->code;
    int64_t covered = 0, want = fs.dims[items[i].axis];
    for (int j = i; j < *n; j++) {
      if (!items[j].full_name || strcmp(items[j].full_name, full) != 0) continue;
      if (!shard_fits(&items[j]) || items[j].axis != items[i].axis ||
          items[j].dtype != items[i].dtype) {
        floe_tensor_release(whole);
        return floe_status_set(st, FLOE_INVALID_ARGUMENT, "checkpoint save: shard '%s' does not "
                               "fit sharded variable '%s'", items[j].name, full);
      }
      shard_copy(whole, items[j].value, items[j].axis, items[j].offset, true);
      covered += items[j].shape.dims[items[j].axis];
      if (j != i) { /* dropped: its value is in the whole */
        floe_tensor_release(items[j].value);
        items[j].value = NULL;
        items[j].full_name = "";
      }
    }
    if (covered != want) {
      floe_tensor_release(whole);
      return floe_status_set(st, FLOE_FAILED_PRECONDITION, "checkpoint save: the shards of '%s' "
                             "in the graph hold %" PRId64 " of its %" PRId64 " rows along axis "
                             "%d: a sharded variable is saved whole", full, covered, want,
                             items[i].axis);
    }
    floe_tensor_release(items[i].value);
    items[i].value = whole;
    items[i].name = full;
    items[i].dtype = whole->dtype;
    items[i].shape = fs;
    items[i].full_name = NULL;
  }
  int k = 0; /* compact: drop the merged shards */
  for (int i = 0; i < *n; i++) {
    if (items[i].full_name && !items[i].full_name[0]) continue;
    items[k++] = items[i];
  }
  for (int i = k; i < *n; i++) memset(&items[i], 0, sizeof items[i]);
  *n = k;
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* A cluster session's variables may live on other tasks: they are read and assigned by
 * running the session's graph (a ReadVariableOp of each, fetched; the AssignVariableOp of
 * each, its value input fed). A session moves large fed and fetched values between this
 * process and their task through the data plane, not inside the steps' messages, so a
 * variable of any size goes; the variables go in groups of at most STEP_BYTES bytes a step,
 * which bounds what one step holds in memory. */
enum { STEP_BYTES = 32 << 20 };

static size_t item_bytes(const Item *it) {
  size_t b = floe_dtype_size(it->dtype);
  for (int d = 0; d < it->shape.rank; d++) b *= it->shape.dims[d] > 0 ? (size_t)it->shape.dims[d] : 0;
  return b;
}

/* The end of the group of items starting at first: as many as fit in STEP_BYTES (at least
 * one). */
static int group_end(const Item *items, int n, int first) {
  size_t sum = item_bytes(&items[first]);
  int end = first + 1;
  while (end < n && sum + item_bytes(&items[end]) <= STEP_BYTES) sum += item_bytes(&items[end++]);
  return end;
}

/* The node of the session's graph of op `op` whose input 0 is variable `var`, preferring
 * "<var>/<suffix>" (floe_variable's names). */
static const FloeNode *var_user(const FloeGraph *g, const FloeNode *var, const char *op,
                                const char *suffix) {
  const FloeNode *found = NULL;
  for (int i = 0; i < g->num_nodes; i++) {
    const FloeNode *n = g->nodes[i];
    if (!is_op(n, op) || n->num_inputs < 1 || n->inputs[0].node != var) continue;
    size_t vl = strlen(var->name);
    if (!strncmp(n->name, var->name, vl) && n->name[vl] == '/' && !strcmp(n->name + vl + 1, suffix))
      return n;
    if (!found) found = n;
  }
  return found;
}

static floe_code read_through_session(FloeSession *s, Item *items, int n, FloeStatus *st) {
  const FloeGraph *g = floe__session_graph(s);
  const char **fetch = floe__calloc((size_t)n + 1, sizeof *fetch);
  FloeTensor **got = floe__calloc((size_t)n + 1, sizeof *got);
  floe_code rc = FLOE_OK;
  if (!fetch || !got) {
    rc = floe_status_set(st, FLOE_NO_MEMORY, "checkpoint save: out of memory");
    goto out;
  }
  for (int i = 0; i < n; i++) {
    const FloeNode *r = var_user(g, floe_graph_find(g, items[i].name), "ReadVariableOp", "read");
    if (!r) {
      rc = floe_status_set(st, FLOE_FAILED_PRECONDITION,
                           "checkpoint save: variable '%s' has no ReadVariableOp in the "
                           "session's graph: a session across a cluster reads its variables "
                           "through the graph (floe_variable adds '%s/read')",
                           items[i].name, items[i].name);
      goto out;
    }
    fetch[i] = r->name;
  }
  for (int first = 0, end; first < n; first = end) {
    end = group_end(items, n, first);
    if ((rc = floe_session_run(s, NULL, 0, fetch + first, end - first, NULL, 0, got + first,
                               st)) != FLOE_OK) {
      floe__status_prefix(st, "checkpoint save: reading the variables");
      goto out;
    }
  }
  for (int i = 0; i < n; i++) {
    items[i].value = got[i];
    got[i] = NULL;
  }
out:
  for (int i = 0; got && i < n; i++) floe_tensor_release(got[i]);
  floe__free(fetch);
  floe__free(got);
  return rc;
}

static floe_code assign_through_session(FloeSession *s, const char *path, Item *items, int n,
                                        FloeStatus *st) {
  const FloeGraph *g = floe__session_graph(s);
  FloeFeed *feeds = floe__calloc((size_t)n + 1, sizeof *feeds);
  char **names = floe__calloc((size_t)n + 1, sizeof *names);
  const char **targets = floe__calloc((size_t)n + 1, sizeof *targets);
  floe_code rc = FLOE_OK;
  if (!feeds || !names || !targets) {
    rc = floe_status_set(st, FLOE_NO_MEMORY, "checkpoint restore: out of memory");
    goto out;
  }
  for (int i = 0; i < n && rc == FLOE_OK; i++) {
    const FloeNode *a = var_user(g, floe_graph_find(g, items[i].name), "AssignVariableOp", "init");
    if (!a || a->num_inputs < 2) {
      rc = floe_status_set(st, FLOE_FAILED_PRECONDITION,
                           "checkpoint restore: variable '%s' has no AssignVariableOp in the "
                           "session's graph: a session across a cluster assigns its variables "
                           "through the graph (floe_variable adds '%s/init')",
                           items[i].name, items[i].name);
      break;
    }
    const FloeOutput v = a->inputs[1];
    names[i] = v.index ? floe__asprintf("%s:%d", v.node->name, v.index) : floe__strdup(v.node->name);
    if (!names[i]) {
      rc = floe_status_set(st, FLOE_NO_MEMORY, "checkpoint restore: out of memory");
      break;
    }
    for (int j = 0; j < i; j++)
      if (!strcmp(names[j], names[i]))
        rc = floe_status_set(st, FLOE_FAILED_PRECONDITION,
                             "checkpoint restore: variables '%s' and '%s' are assigned from one "
                             "tensor (%s), so they cannot be given their own values",
                             items[j].name, items[i].name, names[i]);
    feeds[i] = (FloeFeed){names[i], items[i].value};
    targets[i] = a->name;
  }
  for (int first = 0, end; rc == FLOE_OK && first < n; first = end) {
    end = group_end(items, n, first);
    if ((rc = floe_session_run(s, feeds + first, end - first, NULL, 0, targets + first,
                               end - first, NULL, st)) != FLOE_OK)
      floe__status_prefix(st, "checkpoint %s: assigning the variables (%d in all, in steps of "
                          "at most %d MiB: the steps before this one assigned theirs; restore "
                          "again)", path, n, STEP_BYTES >> 20);
  }
out:
  for (int i = 0; names && i < n; i++) floe__free(names[i]);
  floe__free(names);
  floe__free(feeds);
  floe__free(targets);
  return rc;
}

/* ------------------------------------------------------------------------------------ */
/* Names: "<prefix>-<step, at least 10 digits>.safetensors". Temporary files start with '.'
 * and end in ".tmp.<pid>.<n>", so no listing ever mistakes one for a checkpoint. */

floe_code floe__ckpt_check_prefix(const char *prefix, FloeStatus *st) {
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

/* True when file is "<prefix>-<step>" + suffix; sets the prefix length and the step. */
bool floe__ckpt_parse_name(const char *file, const char *suffix, size_t *prefix_len,
                           int64_t *step) {
  size_t len = strlen(file), sl = strlen(suffix);
  if (file[0] == '.' || len <= sl || strcmp(file + len - sl, suffix) != 0) return false;
  size_t end = len - sl, d = end;
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
char *floe__ckpt_join_path(const char *dir, const char *file) {
  size_t n = strlen(dir);
  while (n > 1 && dir[n - 1] == '/') n--;
  return floe__asprintf("%.*s/%s", (int)n, dir, file);
}

typedef FloeCkptFound Found;

void floe__ckpt_found_free(Found *f, int n) {
  if (!f) return;
  for (int i = 0; i < n; i++) floe__free(f[i].file);
  floe__free(f);
}

/* By step; at one step a sharded checkpoint's index comes after (wins over) a file. */
static int found_cmp(const void *a, const void *b) {
  const Found *x = a, *y = b;
  if (x->step != y->step) return x->step < y->step ? -1 : 1;
  if (x->sharded != y->sharded) return x->sharded ? 1 : -1;
  return strcmp(x->file, y->file);
}

/* The checkpoints of prefix (NULL: any) in dir, oldest first by step: single files and
 * sharded checkpoints' indexes (suffix NULL), else the names ending in suffix (a sharded
 * checkpoint's folders). Caller frees with floe__ckpt_found_free. */
floe_code floe__ckpt_list(const char *dir, const char *prefix, const char *suffix, Found **out,
                          int *n_out, FloeStatus *st) {
  *out = NULL;
  *n_out = 0;
  DIR *d = opendir(dir);
  if (!d) {
    return floe__status_from_errno(st, errno, "cannot list checkpoint directory %s", dir);
  }
  Found *f = NULL;
  int n = 0, cap = 0;
  size_t plen = prefix ? strlen(prefix) : 0;
  floe_code rc = FLOE_OK;
  for (;;) {
    errno = 0;
    struct dirent *de = readdir(d);
    if (!de) {
      if (errno)
        rc = floe__status_from_errno(st, errno, "cannot list checkpoint directory %s", dir);
      break;
    }
    size_t pl;
    int64_t step;
    bool sharded = !suffix && floe__ckpt_parse_name(de->d_name, FLOE__CKPT_INDEX_SUFFIX, &pl, &step);
    if (!sharded && !floe__ckpt_parse_name(de->d_name, suffix ? suffix : SUFFIX, &pl, &step))
      continue;
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
    f[n].sharded = sharded;
    n++;
  }
  closedir(d);
  if (rc != FLOE_OK) {
    floe__ckpt_found_free(f, n);
    return rc;
  }
  if (n > 1) qsort(f, (size_t)n, sizeof *f, found_cmp);
  *out = f;
  *n_out = n;
  return FLOE_OK;

err_oom:
  closedir(d);
  floe__ckpt_found_free(f, n);
  return floe_status_set(st, FLOE_NO_MEMORY, "out of memory listing %s", dir);
}

/* Caller frees with free(). */
char *floe_checkpoint_latest(const char *dir, const char *prefix, FloeStatus *status) {
  if (!dir) {
    floe_status_set(status, FLOE_INVALID_ARGUMENT, "floe_checkpoint_latest: dir is NULL");
    return NULL;
  }
  if (!prefix) prefix = DEFAULT_PREFIX;
  if (floe__ckpt_check_prefix(prefix, status) != FLOE_OK) return NULL;
  Found *f;
  int n;
  if (floe__ckpt_list(dir, prefix, NULL, &f, &n, status) != FLOE_OK) return NULL;
  char *path = NULL;
  if (n == 0)
    floe_status_set(status, FLOE_NOT_FOUND,
                    "no checkpoint %s-<step>.safetensors or %s-<step>.index.json in directory %s",
                    prefix, prefix, dir);
  else if (!(path = floe__ckpt_join_path(dir, f[n - 1].file)))
    floe_status_set(status, FLOE_NO_MEMORY, "out of memory");
  floe__ckpt_found_free(f, n);
  return path;
}

/* The file restored from directory dir: the newest "ckpt" checkpoint; failing that, the
 * newest checkpoint when every checkpoint there has one prefix. Caller frees. */
static char *pick_in_dir(const char *dir, FloeStatus *st) {
  Found *f;
  int n;
  if (floe__ckpt_list(dir, NULL, NULL, &f, &n, st) != FLOE_OK) return NULL;
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
                    "no checkpoint (<prefix>-<step>.safetensors or <prefix>-<step>.index.json) "
                    "in directory %s", dir);
  else if (!best && second)
    floe_status_set(st, FLOE_INVALID_ARGUMENT,
                    "directory %s holds checkpoints of several prefixes ('%.*s', '%.*s', none "
                    "called '" DEFAULT_PREFIX "'): restore a file, or pick one with "
                    "floe_checkpoint_latest(dir, prefix)",
                    dir, (int)other->prefix_len, other->file, (int)second->prefix_len,
                    second->file);
  else if (!(path = floe__ckpt_join_path(dir, (best ? best : other)->file)))
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
  floe__ckpt_found_free(f, n);
  return path;
}

/* ------------------------------------------------------------------------------------ */
/* Saving: an atomic write, then the oldest beyond keep removed. */

/* mkdir -p. */
floe_code floe__ckpt_make_dirs(const char *dir, FloeStatus *st) {
  char *p = floe__strdup(dir);
  if (!p) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
  for (char *s = p + 1;; s++) {
    if (*s != '/' && *s != '\0') continue;
    char c = *s;
    *s = '\0';
    if (mkdir(p, 0777) != 0 && errno != EEXIST) {
      floe__status_from_errno(st, errno, "cannot create checkpoint directory %s", p);
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
void floe__ckpt_prune(const char *dir, const char *prefix, int keep, const char *written) {
  Found *f;
  int n;
  if (keep <= 0 || floe__ckpt_list(dir, prefix, NULL, &f, &n, NULL) != FLOE_OK) return;
  int others = 0;
  for (int i = 0; i < n; i++) others += strcmp(f[i].file, written) != 0;
  for (int i = 0; i < n && others > keep - 1; i++) { /* oldest first */
    if (strcmp(f[i].file, written) == 0) continue;
    floe__ckpt_remove(dir, &f[i]);
    others--;
  }
  floe__ckpt_found_free(f, n);
}

/* Writes items (sorted by name, host values) to dir/file through a temporary file, fsync
 * and rename; *final_out (may be NULL) gets the path (caller frees), *size_out (may be NULL)
 * the file's bytes. Nothing of the temporary file stays on failure. */
floe_code floe__ckpt_write_file(const char *dir, const char *file, const Item *items, int n,
                                int64_t step, const char *save_id, uint64_t *size_out,
                                char **final_out, FloeStatus *st) {
  floe_code rc;
  FloeByteBuf h = {0};
  char *final = NULL, *tmp = NULL;
  if ((rc = floe__safetensors_header(items, n, step, save_id, &h, st)) != FLOE_OK)
    goto err_free_buf;
  final = floe__ckpt_join_path(dir, file);
  unsigned long k = atomic_fetch_add(&tmp_counter, 1);
  char tmpfile[NAME_MAX + 128];
  snprintf(tmpfile, sizeof tmpfile, ".%s.tmp.%ld.%lu", file, (long)getpid(), k);
  tmp = floe__ckpt_join_path(dir, tmpfile);
  if (!final || !tmp) {
    rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
    goto err_free_buf;
  }
  /* Past the file-size limit (ulimit -f) the kernel would kill the process with SIGXFSZ
   * mid-write: refuse before writing anything. */
  uint64_t total = h.len;
  for (int i = 0; i < n; i++) total += items[i].value->nbytes;
  if ((rc = floe__file_check_size_limit(final, total, st)) != FLOE_OK) {
    floe__status_prefix(st, "cannot save checkpoint (earlier checkpoints are unchanged)");
    goto err_free_buf;
  }
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    rc = floe__status_from_errno(st, errno, "cannot save checkpoint %s: cannot create %s", final,
                                 tmp);
    goto err_free_buf;
  }
  int e = floe__safetensors_write(fd, &h, items, n);
  if (!e && fsync(fd) != 0) e = errno;
  if (close(fd) != 0 && !e) e = errno;
  if (e) {
    rc = floe__status_from_errno(st, e,
                                 "cannot save checkpoint %s (earlier checkpoints are unchanged): "
                                 "writing %s failed",
                                 final, tmp);
    goto err_unlink;
  }
  if (rename(tmp, final) != 0) {
    e = errno;
    rc = floe__status_from_errno(st, e, "cannot save checkpoint %s: renaming %s failed", final,
                                 tmp);
    goto err_unlink;
  }
  /* Makes the rename durable; filesystems that cannot sync a directory say EINVAL. */
  int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    e = fsync(dfd) != 0 ? errno : 0;
    close(dfd);
    if (e == EIO) { /* DATA_LOSS: the file is complete but its durability is in doubt */
      rc = floe__status_from_errno(st, e,
                                   "checkpoint %s was written but syncing directory %s failed",
                                   final, dir);
      goto err_free_buf;
    }
  }
  floe__free(tmp);
  floe__free(h.p);
  if (size_out) *size_out = total;
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

floe_code floe__ckpt_check_save_args(const char *dir, const char *prefix, int64_t step,
                                     int keep, FloeStatus *st) {
  if (!dir || !dir[0])
    return floe_status_set(st, FLOE_INVALID_ARGUMENT, "checkpoint save: no directory given");
  if (step < 0)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "checkpoint save: step %" PRId64 " is negative", step);
  if (keep < 0)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT, "checkpoint save: keep %d is negative",
                           keep);
  return floe__ckpt_check_prefix(prefix, st);
}

/* Reads every item's value (in the given order, so the error names the first variable
 * that is not initialised). */
floe_code floe__ckpt_read_values(Item *items, int n, const char *where, FloeStatus *st) {
  for (int i = 0; i < n; i++) {
    FloeVar *v = items[i].var;
    if (!floe__safetensors_type_of(items[i].dtype))
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "checkpoint save: variable '%s' has dtype %s, which safetensors "
                             "cannot hold",
                             items[i].name, floe_dtype_name(items[i].dtype));
    if (!floe__safetensors_utf8_valid(items[i].name))
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "checkpoint save: variable name '%s' is not valid UTF-8 (a "
                             "safetensors header is UTF-8 JSON)",
                             items[i].name);
    if (!v || items[i].value) continue; /* read through the session already */
    FloeTensor *val = floe__var_read(v, st);
    if (!val) {
      floe__status_prefix(st, "checkpoint save to %s", where);
      return st->code;
    }
    items[i].value = floe__tensor_to_device(val, NULL, st);
    floe_tensor_release(val);
    if (!items[i].value) {
      floe__status_prefix(st, "checkpoint save: reading variable '%s'", items[i].name);
      return st->code;
    }
  }
  return FLOE_OK;
}

floe_code floe__ckpt_sort_items(Item *items, int n, FloeStatus *st) {
  if (n > 1) qsort(items, (size_t)n, sizeof *items, item_cmp);
  for (int i = 1; i < n; i++)
    if (strcmp(items[i - 1].name, items[i].name) == 0)
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "checkpoint save: variable '%s' is given twice", items[i].name);
  return FLOE_OK;
}

/* Reads every item's value, merges shards into wholes, sorts them by name and writes the
 * checkpoint. */
static floe_code save_items(const char *dir, const char *prefix, int64_t step, int keep,
                            Item *items, int n, char **path_out, FloeStatus *st) {
  floe_code rc = floe__ckpt_check_save_args(dir, prefix, step, keep, st);
  if (rc != FLOE_OK || (rc = floe__ckpt_read_values(items, n, dir, st)) != FLOE_OK ||
      (rc = merge_shards(items, &n, st)) != FLOE_OK || (rc = floe__ckpt_sort_items(items, n, st)) != FLOE_OK)
    return rc;
  if ((rc = floe__ckpt_make_dirs(dir, st)) != FLOE_OK) return rc;
  char *final = NULL, file[NAME_MAX + 64];
  snprintf(file, sizeof file, "%s-%0*" PRId64 SUFFIX, prefix, STEP_DIGITS, step);
  if ((rc = floe__ckpt_write_file(dir, file, items, n, step, NULL, NULL, &final, st)) != FLOE_OK)
    return rc;
  floe__ckpt_prune(dir, prefix, keep, strrchr(final, '/') + 1);
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
  floe_code rc = floe__ckpt_graph_items(s, &items, &n, &st);
  if (rc == FLOE_OK) {
    if (floe__session_is_cluster(s)) rc = read_through_session(s, items, n, &st);
    if (rc == FLOE_OK)
      rc = save_items(dir, prefix ? prefix : DEFAULT_PREFIX, step, keep, items, n, path_out, &st);
    floe__ckpt_items_free(items, n);
  }
  return floe__ckpt_finish(status, &st, rc);
}

/* ------------------------------------------------------------------------------------ */
/* Restoring: every variable checked and read before any is assigned. */

static bool shape_fits(const FloeShape *want, const Entry *e) {
  if (want->rank == FLOE_RANK_UNKNOWN) return true;
  if (want->rank != e->rank) return false;
  for (int i = 0; i < e->rank; i++)
    if (want->dims[i] != FLOE_DIM_UNKNOWN && want->dims[i] != e->dims[i]) return false;
  return true;
}

/* Every item has a tensor of its variable's dtype and shape. */
static floe_code match_items(const StFile *c, const Item *items, int n, FloeStatus *st) {
  for (int i = 0; i < n; i++) {
    const char *key = items[i].full_name ? items[i].full_name : items[i].name;
    const FloeShape *want = items[i].full_name ? &items[i].full_shape : &items[i].shape;
    const Entry *e = floe__safetensors_find(c, key);
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
                             c->path, key, c->n, c->n ? list : "none");
    }
    bool dt_ok = e->type->dt == items[i].dtype;
    if (items[i].full_name && !shard_fits(&items[i]))
      return floe_status_set(st, FLOE_INVALID_ARGUMENT, "checkpoint restore: shard '%s' does "
                             "not fit its sharded variable '%s'", items[i].name, key);
    if (!dt_ok || !shape_fits(want, e))
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "checkpoint %s: variable '%s' %s: expected %s %s (the graph's), "
                             "found %s %s in the file",
                             c->path, key,
                             dt_ok ? "has another shape" : "has another dtype",
                             floe_dtype_name(items[i].dtype),
                             floe_shape_str(want, ws1, sizeof ws1),
                             e->type->name,
                             floe__safetensors_dims_str(e->rank, e->dims, ws2, sizeof ws2));
  }
  return FLOE_OK;
}

/* Reads each matched tensor into a new host tensor (items[i].value); a shard gets its rows
 * of the whole. */
static floe_code read_items(const StFile *c, Item *items, int n, FloeStatus *st) {
  for (int i = 0; i < n; i++) {
    const char *key = items[i].full_name ? items[i].full_name : items[i].name;
    FloeTensor *t = floe__safetensors_read(c, floe__safetensors_find(c, key), st);
    if (!t) return st->code;
    if (items[i].full_name) {
      const FloeShape *sh = &items[i].shape;
      items[i].value = floe__tensor_alloc(NULL, t->dtype, sh->rank, sh->dims, st);
      if (items[i].value) shard_copy(t, items[i].value, items[i].axis, items[i].offset, false);
      floe_tensor_release(t);
      if (!items[i].value) return st->code;
    } else {
      items[i].value = t;
    }
  }
  return FLOE_OK;
}

/* s: a cluster session whose items have no FloeVar (assigned through it); else NULL. */
static floe_code restore_items(const char *path, Item *items, int n, int64_t *step_out,
                               FloeSession *s, FloeStatus *st) {
  if (!path) return floe_status_set(st, FLOE_INVALID_ARGUMENT, "checkpoint restore: path is NULL");
  struct stat sb;
  char *picked = NULL;
  if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
    if (!(picked = pick_in_dir(path, st))) return st->code;
    path = picked;
  }
  floe_code rc;
  size_t pl = strlen(path), il = strlen(FLOE__CKPT_INDEX_SUFFIX);
  if (pl > il && !strcmp(path + pl - il, FLOE__CKPT_INDEX_SUFFIX)) { /* a sharded checkpoint */
    rc = floe__ckpt_restore_index(path, items, n, step_out, s, st);
    goto out;
  }
  StFile c;
  if ((rc = floe__safetensors_open(path, &c, st)) != FLOE_OK) goto out;
  if ((rc = match_items(&c, items, n, st)) != FLOE_OK) goto out_close;
  if ((rc = read_items(&c, items, n, st)) != FLOE_OK) goto out_close;
  if ((rc = floe__ckpt_assign_items(path, items, n, s, st)) == FLOE_OK && step_out)
    *step_out = c.step;
out_close:
  floe__safetensors_close(&c);
out:
  floe__free(picked);
  return rc;
}

/* Sets every item's variable to its value (s: through the session), all or nothing. */
floe_code floe__ckpt_assign_items(const char *path, Item *items, int n, FloeSession *s,
                                  FloeStatus *st) {
  if (s) return assign_through_session(s, path, items, n, st);
  floe_code rc = FLOE_OK;
  FloeTensor **old = floe__calloc((size_t)(n ? n : 1), sizeof *old);
  if (!old) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory restoring %s", path);
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
  return rc;
}

floe_code floe_checkpoint_restore(FloeSession *s, const char *path, int64_t *step_out,
                                  FloeStatus *status) {
  if (!s)
    return floe_status_set(status, FLOE_INVALID_ARGUMENT, "checkpoint restore: session is NULL");
  FloeStatus st = {FLOE_OK, NULL};
  Item *items;
  int n;
  floe_code rc = floe__ckpt_graph_items(s, &items, &n, &st);
  if (rc == FLOE_OK) {
    rc = restore_items(path, items, n, step_out, floe__session_is_cluster(s) ? s : NULL, &st);
    floe__ckpt_items_free(items, n);
  }
  return floe__ckpt_finish(status, &st, rc);
}

/* ------------------------------------------------------------------------------------ */
/* Save and Restore kernels: they get the variables' handles (FLOE__KERNEL_RAW_RESOURCES). */

/* Items for the resource inputs first..num_inputs-1 of ctx's node; each named after the
 * VarHandleOp feeding it (as floe_checkpoint_save names it), else after the variable. */
floe_code floe__ckpt_kernel_items(FloeKernelContext *ctx, int first, Item **out, int *n_out,
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
      floe__ckpt_items_free(items, i);
      return st->code;
    }
    items[i].name = src && is_op(src, "VarHandleOp") ? src->name : items[i].var->name;
    items[i].node = src;
    items[i].dtype = items[i].var->dtype;
    items[i].shape = items[i].var->shape;
  }
  *out = items;
  *n_out = n;
  return FLOE_OK;
}

floe_code floe__ckpt_kernel_fail(FloeKernelContext *ctx, FloeStatus *st) {
  floe_code rc = floe__host_api()->ctx_set_error(ctx, st->code, "%s", floe_status_message(st));
  floe_status_clear(st);
  return rc;
}

static floe_code save_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  FloeStatus st = {FLOE_OK, NULL};
  const FloeAttrValue *keep = floe__attrs_get(&ctx->node->attrs, "keep");
  FloeTensor *step_t = floe__tensor_to_device(ctx->inputs[0], NULL, &st);
  if (!step_t) return floe__ckpt_kernel_fail(ctx, &st);
  int64_t step = 0;
  bool scalar = step_t->num_elements == 1;
  if (scalar) memcpy(&step, floe_tensor_data(step_t), sizeof step);
  floe_tensor_release(step_t);
  if (!scalar) {
    floe_status_set(&st, FLOE_INVALID_ARGUMENT, "step must be a scalar");
    return floe__ckpt_kernel_fail(ctx, &st);
  }
  int64_t k = keep && keep->kind == FLOE_ATTR_INT ? keep->u.i : 0;
  if (k < 0 || k > INT_MAX) {
    floe_status_set(&st, FLOE_INVALID_ARGUMENT, "keep %" PRId64 " is out of range", k);
    return floe__ckpt_kernel_fail(ctx, &st);
  }
  Item *items;
  int n;
  if (floe__ckpt_kernel_items(ctx, 1, &items, &n, &st) != FLOE_OK) return floe__ckpt_kernel_fail(ctx, &st);
  floe_code rc = save_items(floe__node_attr_str(ctx->node, "dir"),
                            floe__node_attr_str(ctx->node, "prefix"), step, (int)k, items, n, NULL,
                            &st);
  floe__ckpt_items_free(items, n);
  return rc == FLOE_OK ? FLOE_OK : floe__ckpt_kernel_fail(ctx, &st);
}

static floe_code restore_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  FloeStatus st = {FLOE_OK, NULL};
  Item *items;
  int n;
  if (floe__ckpt_kernel_items(ctx, 0, &items, &n, &st) != FLOE_OK) return floe__ckpt_kernel_fail(ctx, &st);
  int64_t step = 0;
  floe_code rc = restore_items(floe__node_attr_str(ctx->node, "path"), items, n, &step, NULL, &st);
  floe__ckpt_items_free(items, n);
  if (rc != FLOE_OK) return floe__ckpt_kernel_fail(ctx, &st);
  return floe__ckpt_output_i64(ctx, step);
}

floe_code floe__ckpt_output_i64(FloeKernelContext *ctx, int64_t v) {
  const FloeHostApi *host = floe__host_api();
  FloeTensor *out;
  FloeStatus st = {FLOE_OK, NULL};
  floe_code rc = host->ctx_allocate_output(ctx, 0, 0, NULL, &out);
  if (rc != FLOE_OK) return rc;
  if (floe__device_copy(ctx->device, host->tensor_data(out), NULL, &v, sizeof v, &st) != FLOE_OK)
    return floe__ckpt_kernel_fail(ctx, &st);
  return FLOE_OK;
}

floe_code floe__checkpoint_kernels_register(struct FloeRuntime *rt, FloeStatus *st) {
  floe_code rc = floe__core_kernel_add(rt, "Save", FLOE__KERNEL_RAW_RESOURCES, save_compute, st);
  if (rc == FLOE_OK)
    rc = floe__core_kernel_add(rt, "Restore", FLOE__KERNEL_RAW_RESOURCES, restore_compute, st);
  if (rc == FLOE_OK)
    rc = floe__core_kernel_add(rt, "SaveShard", FLOE__KERNEL_RAW_RESOURCES,
                               floe__ckpt_save_shard_compute, st);
  return rc;
}
