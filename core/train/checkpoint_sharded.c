/* SPDX-License-Identifier: Apache-2.0 */
/* checkpoint_sharded.c - sharded checkpoints (docs/checkpoints.md): every task holding
 * variables writes its own safetensors file into "<prefix>-<step>.shards/" (the SaveShard
 * kernel, run on that task: values never travel), then the caller's process commits
 * "<prefix>-<step>.index.json" by rename. Restoring reads, for each variable of the graph
 * (or shard of one), exactly the box it needs from the parts the index names: any task or
 * shard count at save time restores into any at restore time. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint_private.h"

#define DEFAULT_PREFIX "ckpt"
#define STEP_DIGITS 10
#define INDEX_LIMIT 100000000 /* bytes of an index read back (a header's bound) */
#define SHOWN FLOE__CKPT_NAME_SHOWN

typedef FloeCkptItem Item;
typedef FloeSafetensorsEntry Entry;
typedef FloeSafetensorsFile StFile;

/* ------------------------------------------------------------------------------------ */
/* Names. */

static char *stem_name(const char *prefix, int64_t step, const char *suffix) {
  return floe__asprintf("%s-%0*" PRId64 "%s", prefix, STEP_DIGITS, step, suffix);
}

/* Removes folder dir/name and the files in it (not deeper). Best effort. */
static void remove_folder(const char *dir, const char *name) {
  char *path = floe__ckpt_join_path(dir, name);
  DIR *d = path ? opendir(path) : NULL;
  if (d) {
    struct dirent *de;
    while ((de = readdir(d))) {
      if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
      char *f = floe__ckpt_join_path(path, de->d_name);
      if (f) unlink(f);
      floe__free(f);
    }
    closedir(d);
    rmdir(path);
  }
  floe__free(path);
}

/* The shard folder of index file name "<stem>.index.json": "<stem>.shards". Caller frees. */
static char *folder_of_index(const char *index_name) {
  size_t n = strlen(index_name) - strlen(FLOE__CKPT_INDEX_SUFFIX);
  return floe__asprintf("%.*s" FLOE__CKPT_SHARDS_SUFFIX, (int)n, index_name);
}

void floe__ckpt_remove(const char *dir, const FloeCkptFound *f) {
  char *path = floe__ckpt_join_path(dir, f->file);
  if (path) unlink(path); /* an index goes first: the checkpoint stops existing at once */
  floe__free(path);
  if (!f->sharded) return;
  char *folder = folder_of_index(f->file);
  if (folder) remove_folder(dir, folder);
  floe__free(folder);
}

/* Removes the shard folders of prefix that no index names (crashed saves), but `keep`. */
static void remove_leftovers(const char *dir, const char *prefix, const char *keep) {
  FloeCkptFound *f;
  int n;
  if (floe__ckpt_list(dir, prefix, FLOE__CKPT_SHARDS_SUFFIX, &f, &n, NULL) != FLOE_OK) return;
  for (int i = 0; i < n; i++) {
    if (!strcmp(f[i].file, keep)) continue;
    char *index = stem_name(prefix, f[i].step, FLOE__CKPT_INDEX_SUFFIX);
    char *ipath = index ? floe__ckpt_join_path(dir, index) : NULL;
    struct stat sb;
    if (ipath && stat(ipath, &sb) != 0 && errno == ENOENT) remove_folder(dir, f[i].file);
    floe__free(ipath);
    floe__free(index);
  }
  floe__ckpt_found_free(f, n);
}

/* fsync of a directory; filesystems that cannot sync one say EINVAL (ignored). 0 or errno. */
static int sync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return 0;
  int e = fsync(fd) != 0 && errno != EINVAL ? errno : 0;
  close(fd);
  return e;
}

/* ------------------------------------------------------------------------------------ */
/* The SaveShard kernel: the variables of its inputs to the file `path`, on its task. */

floe_code floe__ckpt_save_shard_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  FloeStatus st = {FLOE_OK, NULL};
  const char *path = floe__node_attr_str(ctx->node, "path");
  const char *slash = strrchr(path, '/');
  if (!slash || !slash[1]) {
    floe_status_set(&st, FLOE_INVALID_ARGUMENT, "SaveShard: path '%s' names no file in a "
                    "folder", path);
    return floe__ckpt_kernel_fail(ctx, &st);
  }
  char *dir = floe__asprintf("%.*s", (int)(slash - path), path);
  Item *items = NULL;
  int n = 0;
  uint64_t bytes = 0;
  floe_code rc = dir ? FLOE_OK : floe_status_set(&st, FLOE_NO_MEMORY, "out of memory");
  if (rc == FLOE_OK) rc = floe__ckpt_kernel_items(ctx, 0, &items, &n, &st);
  if (rc == FLOE_OK) rc = floe__ckpt_read_values(items, n, path, &st);
  if (rc == FLOE_OK) rc = floe__ckpt_sort_items(items, n, &st);
  if (rc == FLOE_OK) rc = floe__ckpt_make_dirs(dir, &st);
  if (rc == FLOE_OK)
    rc = floe__ckpt_write_file(dir, slash + 1, items, n, floe__node_attr_int(ctx->node, "step", 0),
                               floe__node_attr_str(ctx->node, "save_id"), &bytes, NULL, &st);
  floe__ckpt_items_free(items, n);
  floe__free(dir);
  if (rc != FLOE_OK) return floe__ckpt_kernel_fail(ctx, &st);
  return floe__ckpt_output_i64(ctx, (int64_t)bytes);
}

/* ------------------------------------------------------------------------------------ */
/* Saving: a plan of writers (one per device holding variables), a sibling session running
 * their SaveShard nodes in one step, then the index. */

typedef struct Writer {
  const FloeDevice *dev; /* NULL: no device requested (the session places it) */
  char file[128];        /* "ps-0.safetensors" */
  char *rel;             /* "<stem>.shards/<file>": the index's name for it; owned */
  int *idx, n;           /* its items */
  int64_t bytes;
  StFile sf;             /* its header, read back by the caller's process */
  bool opened;
} Writer;

typedef struct Plan {
  Item *items;
  int n;
  Writer *w;
  int nw;
  char *save_id;         /* 16 hex digits; owned */
} Plan;

static void plan_free(Plan *p) {
  for (int i = 0; i < p->nw; i++) {
    floe__free(p->w[i].idx);
    floe__free(p->w[i].rel);
    if (p->w[i].opened) floe__safetensors_close(&p->w[i].sf);
  }
  floe__free(p->w);
  floe__ckpt_items_free(p->items, p->n);
  floe__free(p->save_id);
}

/* The device variable node v lives on: its request, else the request of a node using it
 * (the placer colocates a resource with its users), else NULL. */
static const FloeDevice *var_device(FloeSession *s, const FloeNode *v) {
  struct FloeRuntime *rt = floe__session_runtime(s);
  const char *req = v->device && v->device[0] ? v->device : NULL;
  const FloeGraph *g = floe__session_graph(s);
  for (int i = 0; !req && i < g->num_nodes; i++) {
    const FloeNode *u = g->nodes[i];
    for (int j = 0; j < u->num_inputs && !req; j++)
      if (u->inputs[j].node == v && u->device && u->device[0]) req = u->device;
  }
  return req ? floe__device_find(rt, req, NULL) : NULL;
}

static floe_code plan_writers(FloeSession *s, Plan *p, const char *folder, FloeStatus *st) {
  p->w = floe__calloc((size_t)(p->n ? p->n : 1), sizeof *p->w);
  if (!p->w) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory planning a checkpoint");
  for (int i = 0; i < p->n; i++) {
    const FloeDevice *d = var_device(s, p->items[i].node);
    int k = 0;
    while (k < p->nw && p->w[k].dev != d) k++;
    if (k == p->nw) {
      p->w[k].dev = d;
      p->w[k].idx = floe__calloc((size_t)p->n, sizeof *p->w[k].idx);
      if (!p->w[k].idx) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
      p->nw++;
    }
    p->w[k].idx[p->w[k].n++] = i;
  }
  for (int k = 0; k < p->nw; k++) { /* "<job>-<task>"; a task with several devices adds one */
    const FloeDevice *d = p->w[k].dev;
    char base[96], dev[48] = "";
    if (d && d->job[0]) snprintf(base, sizeof base, "%s-%d", d->job, d->task);
    else snprintf(base, sizeof base, "localhost-0");
    int same = 0;
    for (int j = 0; j < p->nw; j++) {
      const FloeDevice *e = p->w[j].dev;
      same += (e && d && e->job[0] ? !strcmp(e->job, d->job) && e->task == d->task
                                   : !(e && e->job[0]) && !(d && d->job[0]));
    }
    if (same > 1) { /* "-cpu0", or "-any" for the one without a device */
      size_t o = 0;
      const char *sn = d ? d->short_name : "any";
      for (; *sn && o + 1 < sizeof dev - 1; sn++)
        if (*sn != ':') dev[o++] = *sn;
      dev[o] = '\0';
    }
    snprintf(p->w[k].file, sizeof p->w[k].file, "%s%s%s.safetensors", base, dev[0] ? "-" : "",
             dev);
    if (!(p->w[k].rel = floe__asprintf("%s/%s", folder, p->w[k].file)))
      return floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
  }
  return FLOE_OK;
}

static int key_cmp(const void *a, const void *b) {
  const Item *x = *(Item *const *)a, *y = *(Item *const *)b;
  int c = strcmp(x->full_name ? x->full_name : x->name, y->full_name ? y->full_name : y->name);
  if (c) return c;
  return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* The items in index order (by variable, then offset): each sharded variable's parts must
 * tile its whole along one axis, as the index says they do. *out: caller frees. */
static floe_code order_parts(Plan *p, Item ***out, FloeStatus *st) {
  Item **o = floe__calloc((size_t)(p->n ? p->n : 1), sizeof *o);
  if (!o) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
  for (int i = 0; i < p->n; i++) o[i] = &p->items[i];
  if (p->n > 1) qsort(o, (size_t)p->n, sizeof *o, key_cmp);
  for (int i = 0; i < p->n;) {
    const char *full = o[i]->full_name;
    int j = i + 1;
    if (!full) {
      i = j;
      continue;
    }
    int64_t at = 0;
    for (j = i; j < p->n && o[j]->full_name && !strcmp(o[j]->full_name, full); j++) {
      const Item *x = o[j];
      bool ok = x->axis == o[i]->axis && x->offset == at && x->dtype == o[i]->dtype &&
                x->shape.rank == x->full_shape.rank && x->axis >= 0 && x->axis < x->shape.rank;
      for (int d = 0; ok && d < x->shape.rank; d++)
        ok = d == x->axis ? x->shape.dims[d] >= 0 : x->shape.dims[d] == x->full_shape.dims[d];
      if (!ok) {
        floe__free(o);
        return floe_status_set(st, FLOE_FAILED_PRECONDITION, "checkpoint save: shard '%s' of "
                               "sharded variable '%s' does not continue its shards along axis "
                               "%d at row %" PRId64 " (a save needs every shard of a variable)",
                               x->name, full, o[i]->axis, at);
      }
      at += x->shape.dims[x->axis];
    }
    if (at != o[i]->full_shape.dims[o[i]->axis]) {
      floe__free(o);
      return floe_status_set(st, FLOE_FAILED_PRECONDITION, "checkpoint save: the shards of '%s' "
                             "in the graph hold %" PRId64 " of its %" PRId64 " rows along axis "
                             "%d: a save needs every shard of a variable", full, at,
                             o[i]->full_shape.dims[o[i]->axis], o[i]->axis);
    }
    i = j;
  }
  *out = o;
  return FLOE_OK;
}

/* The graph of the writes: per writer a copy of each of its VarHandleOps (the same
 * variable: same name, container, dtype and shape) and a SaveShard of them, all on the
 * writer's device. */
static FloeGraph *writes_graph(const Plan *p, const char *folder_path, int64_t step,
                               FloeStatus *st) {
  FloeGraph *g = floe_graph_new();
  if (!g) {
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
    return NULL;
  }
  FloeOutput *ins = floe__calloc((size_t)(p->n ? p->n : 1), sizeof *ins);
  for (int k = 0; ins && k < p->nw; k++) {
    const Writer *w = &p->w[k];
    for (int i = 0; i < w->n; i++) {
      const FloeNode *v = p->items[w->idx[i]].node;
      const FloeAttrValue *shape = floe__attrs_get(&v->attrs, "shape");
      FloeNodeBuilder *b = floe_node_begin(g, "VarHandleOp", v->name);
      floe_node_set_attr_type(b, "dtype", p->items[w->idx[i]].dtype);
      floe_node_set_attr_shape(b, "shape", shape->u.shape);
      floe_node_set_attr_string(b, "container", floe__node_attr_str(v, "container"));
      floe_node_set_attr_string(b, "shared_name", floe__node_attr_str(v, "shared_name"));
      if (w->dev) floe_node_set_device(b, w->dev->name);
      ins[i] = floe_out(floe_node_finish(b), 0);
    }
    char name[64], *path = floe__asprintf("%s/%s", folder_path, w->file);
    snprintf(name, sizeof name, "save_shard_%d", k);
    FloeNodeBuilder *b = floe_node_begin(g, "SaveShard", name);
    floe_node_add_input_list(b, ins, w->n);
    floe_node_set_attr_string(b, "path", path ? path : "");
    floe_node_set_attr_int(b, "step", step);
    floe_node_set_attr_string(b, "save_id", p->save_id);
    if (w->dev) floe_node_set_device(b, w->dev->name);
    floe_node_finish(b);
    floe__free(path);
  }
  floe__free(ins);
  if (!ins || floe_graph_status(g) != FLOE_OK) {
    floe_status_set(st, ins ? floe_graph_status(g) : FLOE_NO_MEMORY,
                    "checkpoint save: building the shard writes: %s",
                    ins ? floe_graph_error(g, NULL) : "out of memory");
    floe_graph_free(g);
    return NULL;
  }
  return g;
}

/* Runs every writer's SaveShard in one step of a sibling session; sets each writer's bytes. */
static floe_code run_writes(FloeSession *s, Plan *p, const char *folder_path, int64_t step,
                            int64_t timeout_ms, FloeStatus *st) {
  FloeGraph *g = writes_graph(p, folder_path, step, st);
  if (!g) return st->code;
  FloeSession *sib = floe__session_sibling(s, g, st);
  floe_graph_free(g);
  if (!sib) return st->code;
  const char **fetch = floe__calloc((size_t)p->nw + 1, sizeof *fetch);
  char (*names)[64] = floe__calloc((size_t)p->nw + 1, sizeof *names);
  FloeTensor **got = floe__calloc((size_t)p->nw + 1, sizeof *got);
  floe_code rc = FLOE_OK;
  if (!fetch || !names || !got) {
    rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
    goto out;
  }
  for (int k = 0; k < p->nw; k++) {
    snprintf(names[k], sizeof names[k], "save_shard_%d", k);
    fetch[k] = names[k];
  }
  FloeRunOptions ro;
  floe_run_options_init(&ro);
  ro.timeout_ms = timeout_ms;
  if ((rc = floe_session_run_opts(sib, &ro, NULL, 0, fetch, p->nw, NULL, 0, got, st)) != FLOE_OK) {
    floe__status_prefix(st, "checkpoint save: writing the shards into %s (no index written: "
                        "the previous checkpoint stays the newest)", folder_path);
    goto out;
  }
  for (int k = 0; k < p->nw; k++) p->w[k].bytes = *(const int64_t *)floe_tensor_data(got[k]);
out:
  for (int k = 0; got && k < p->nw; k++) floe_tensor_release(got[k]);
  floe__free(got);
  floe__free(names);
  floe__free(fetch);
  floe_session_free(sib);
  return rc;
}

/* Reads back each shard's header in this process: the folder must be shared, and the index
 * takes each tensor's dtype and shape from what was written. */
static floe_code read_back(Plan *p, const char *folder_path, FloeStatus *st) {
  for (int k = 0; k < p->nw; k++) {
    Writer *w = &p->w[k];
    char *path = floe__ckpt_join_path(folder_path, w->file);
    if (!path) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
    floe_code rc = floe__safetensors_open(path, &w->sf, st);
    w->sf.path = w->rel; /* the path lives on in messages; rel lives as long as sf */
    floe__free(path);
    if (rc != FLOE_OK) {
      floe__status_prefix(st, "checkpoint save: reading back shard %s (a checkpoint folder "
                          "must be one folder at the same path for every task)", w->rel);
      return rc;
    }
    w->opened = true;
    uint64_t size = w->sf.data_start + w->sf.data_len;
    if ((int64_t)size != w->bytes || strcmp(w->sf.save_id, p->save_id) != 0)
      return floe_status_set(st, FLOE_FAILED_PRECONDITION,
                             "checkpoint save: shard %s seen from here (%" PRIu64 " bytes, save "
                             "%s) is not the one its task wrote (%" PRId64 " bytes, save %s): a "
                             "checkpoint folder must be one folder at the same path for every "
                             "task (a shared filesystem)", w->rel, size, w->sf.save_id,
                             w->bytes, p->save_id);
  }
  return FLOE_OK;
}

/* The writer and entry of item i. */
static const Entry *item_entry(const Plan *p, int i, const Writer **wout) {
  for (int k = 0; k < p->nw; k++)
    for (int j = 0; j < p->w[k].n; j++)
      if (p->w[k].idx[j] == i) {
        *wout = &p->w[k];
        return floe__safetensors_find(&p->w[k].sf, p->items[i].name);
      }
  return NULL;
}

/* The index is written by hand, not with jansson's writer: a program linking libfloe may
 * define json_string and the like itself (the floe command does). */
static void put(FloeByteBuf *b, const char *fmt, ...) FLOE__PRINTF(2, 3);
static void put(FloeByteBuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *m = floe__vasprintf(fmt, ap);
  va_end(ap);
  if (!m) b->oom = true;
  else floe__buf_put(b, m, strlen(m));
  floe__free(m);
}

static void put_dims(FloeByteBuf *b, int rank, const int64_t *dims) {
  put(b, "[");
  for (int i = 0; i < rank; i++) put(b, "%s%" PRId64, i ? ", " : "", dims[i]);
  put(b, "]");
}

typedef struct Mapped {
  const char *tensor, *rel;
} Mapped;

static int mapped_cmp(const void *a, const void *b) {
  return strcmp(((const Mapped *)a)->tensor, ((const Mapped *)b)->tensor);
}

/* The index's JSON text (keys sorted). Caller frees (floe__free). */
static char *index_text(const Plan *p, Item **order, int64_t step, FloeStatus *st) {
  FloeByteBuf b = {0};
  int nt = 0;
  int64_t total = 0;
  for (int k = 0; k < p->nw; k++) nt += p->w[k].sf.n, total += p->w[k].bytes;
  Mapped *m = floe__calloc((size_t)nt + 1, sizeof *m);
  if (!m) {
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory writing a checkpoint index");
    return NULL;
  }
  int k2 = 0;
  for (int k = 0; k < p->nw; k++)
    for (int j = 0; j < p->w[k].sf.n; j++) m[k2++] = (Mapped){p->w[k].sf.e[j].name, p->w[k].rel};
  qsort(m, (size_t)nt, sizeof *m, mapped_cmp);
  put(&b, "{\n \"files\": {");
  for (int k = 0; k < p->nw; k++) { /* writers are in graph order: good enough, keys unique */
    put(&b, "%s\n  ", k ? "," : "");
    floe__safetensors_json_str(&b, p->w[k].rel);
    put(&b, ": {\"save_id\": \"%s\", \"size\": %" PRId64 ", \"tensors\": %d}", p->save_id,
        p->w[k].bytes, p->w[k].sf.n);
  }
  put(&b, "\n },\n \"metadata\": {\"format\": \"floe-sharded\", \"global_step\": \"%" PRId64
      "\", \"save_id\": \"%s\", \"total_size\": %" PRId64 "},\n \"variables\": {", step,
      p->save_id, total);
  const char *open = NULL;
  for (int i = 0; i < p->n; i++) {
    const Item *x = order[i];
    const Writer *w = NULL;
    const Entry *e = item_entry(p, (int)(x - p->items), &w);
    if (!e) {
      floe__free(m);
      floe__free(b.p);
      floe_status_set(st, FLOE_INTERNAL, "checkpoint save: shard %s lacks variable '%s'",
                      w ? w->rel : "?", x->name);
      return NULL;
    }
    const char *key = x->full_name ? x->full_name : x->name;
    if (!open || strcmp(open, key) != 0) { /* a new variable */
      put(&b, "%s\n  ", open ? "]}," : "");
      floe__safetensors_json_str(&b, key);
      put(&b, ": {\"dtype\": \"%s\", \"shape\": ", e->type->name);
      if (x->full_name) put_dims(&b, x->full_shape.rank, x->full_shape.dims);
      else put_dims(&b, e->rank, e->dims);
      put(&b, ", \"parts\": [");
      open = key;
    } else {
      put(&b, ",");
    }
    put(&b, "\n   {\"axis\": %d, \"file\": ", x->full_name ? x->axis : 0);
    floe__safetensors_json_str(&b, w->rel);
    put(&b, ", \"offset\": %" PRId64 ", \"shape\": ", x->full_name ? x->offset : 0);
    put_dims(&b, e->rank, e->dims);
    put(&b, ", \"tensor\": ");
    floe__safetensors_json_str(&b, x->name);
    put(&b, "}");
  }
  put(&b, "%s\n },\n \"weight_map\": {", open ? "]}" : "");
  for (int i = 0; i < nt; i++) {
    put(&b, "%s\n  ", i ? "," : "");
    floe__safetensors_json_str(&b, m[i].tensor);
    put(&b, ": ");
    floe__safetensors_json_str(&b, m[i].rel);
  }
  put(&b, "\n }\n}\n");
  floe__buf_put(&b, "", 1);
  floe__free(m);
  if (b.oom) {
    floe__free(b.p);
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory writing a checkpoint index");
    return NULL;
  }
  return (char *)b.p;
}

static int write_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t k = write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return k < 0 ? errno : EIO;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

static floe_code phase(const FloeCheckpointShardOptions *o, FloeCheckpointPhase ph,
                       const char *path, FloeStatus *st) {
  if (!o->phase || !o->phase(o->phase_arg, ph, path)) return FLOE_OK;
  return floe_status_set(st, FLOE_CANCELLED, "checkpoint save: stopped by the phase callback "
                         "at phase %d (%s), as a crash there would", (int)ph, path);
}

static atomic_ulong index_tmp_counter;

/* The commit: text to a temporary file in dir, fsync, rename onto index_name, fsync dir. */
static floe_code commit_index(const char *dir, const char *index_name, const char *text,
                              const FloeCheckpointShardOptions *o, FloeStatus *st) {
  char *final = floe__ckpt_join_path(dir, index_name);
  char *tmp = floe__asprintf("%s/.%s.tmp.%ld.%lu", dir, index_name, (long)getpid(),
                             atomic_fetch_add(&index_tmp_counter, 1));
  floe_code rc = FLOE_OK;
  if (!final || !tmp) {
    rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
    goto out;
  }
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    rc = floe__status_from_errno(st, errno, "checkpoint save: cannot create the index %s", tmp);
    goto out;
  }
  int e = write_all(fd, text, strlen(text));
  if (!e && fsync(fd) != 0) e = errno;
  if (close(fd) != 0 && !e) e = errno;
  if (e) {
    rc = floe__status_from_errno(st, e, "checkpoint save: writing the index %s failed (nothing "
                                 "committed)", tmp);
    unlink(tmp);
    goto out;
  }
  if ((rc = phase(o, FLOE_CHECKPOINT_AFTER_INDEX_TEMP, tmp, st)) != FLOE_OK) goto out;
  if (rename(tmp, final) != 0) {
    rc = floe__status_from_errno(st, errno, "checkpoint save: renaming the index %s to %s "
                                 "failed (nothing committed)", tmp, final);
    unlink(tmp);
    goto out;
  }
  if ((e = sync_dir(dir)) != 0) {
    rc = floe__status_from_errno(st, e, "checkpoint %s was committed but syncing directory %s "
                                 "failed", final, dir);
    goto out;
  }
  rc = phase(o, FLOE_CHECKPOINT_AFTER_COMMIT, final, st);
out:
  floe__free(final);
  floe__free(tmp);
  return rc;
}

/* An absolute form of dir (made if missing), so every task writes to the same path. */
static char *absolute_dir(const char *dir, FloeStatus *st) {
  if (floe__ckpt_make_dirs(dir, st) != FLOE_OK) return NULL;
  char *r = realpath(dir, NULL);
  if (!r) {
    floe__status_from_errno(st, errno, "checkpoint save: cannot resolve directory %s", dir);
    return NULL;
  }
  char *copy = floe__strdup(r);
  free(r);
  if (!copy) floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
  return copy;
}

void floe_checkpoint_shard_options_init(FloeCheckpointShardOptions *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
}

static floe_code save_sharded(FloeSession *s, const char *dir_arg, const char *prefix,
                              int64_t step, int keep, const FloeCheckpointShardOptions *o,
                              char **index_path_out, FloeStatus *st) {
  Plan p = {0};
  Item **order = NULL;
  char *dir = NULL, *folder = NULL, *folder_path = NULL, *index_name = NULL, *text = NULL;
  uint8_t rnd[FLOE__CKPT_SAVE_ID_LEN / 2];
  floe_code rc = floe__ckpt_check_save_args(dir_arg, prefix, step, keep, st);
  if (rc != FLOE_OK) return rc;
  if ((rc = floe__ckpt_graph_items(s, &p.items, &p.n, st)) != FLOE_OK) return rc;
  for (int i = 0; i < p.n && rc == FLOE_OK; i++)
    if (!floe__safetensors_type_of(p.items[i].dtype) ||
        !floe__safetensors_utf8_valid(p.items[i].name))
      rc = floe_status_set(st, FLOE_INVALID_ARGUMENT, "checkpoint save: variable '%s' (%s) "
                           "cannot be stored in safetensors (its dtype, or a name that is not "
                           "UTF-8)", p.items[i].name, floe_dtype_name(p.items[i].dtype));
  if (rc != FLOE_OK || (rc = order_parts(&p, &order, st)) != FLOE_OK) goto out;
  if ((rc = floe__auth_random(rnd, sizeof rnd, st)) != FLOE_OK) goto out;
  p.save_id = floe__calloc(FLOE__CKPT_SAVE_ID_LEN + 1, 1);
  folder = stem_name(prefix, step, FLOE__CKPT_SHARDS_SUFFIX);
  index_name = stem_name(prefix, step, FLOE__CKPT_INDEX_SUFFIX);
  if (!p.save_id || !folder || !index_name) {
    rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
    goto out;
  }
  for (size_t i = 0; i < sizeof rnd; i++) snprintf(p.save_id + 2 * i, 3, "%02x", rnd[i]);
  if (!(dir = absolute_dir(dir_arg, st))) {
    rc = st->code;
    goto out;
  }
  if (!(folder_path = floe__ckpt_join_path(dir, folder))) {
    rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
    goto out;
  }
  /* Saving a committed step again: un-commit it first, so that its index never names files
   * of two saves. */
  char *old = floe__ckpt_join_path(dir, index_name);
  if (old && unlink(old) == 0) sync_dir(dir);
  floe__free(old);
  if ((rc = floe__ckpt_make_dirs(folder_path, st)) != FLOE_OK ||
      (rc = plan_writers(s, &p, folder, st)) != FLOE_OK ||
      (rc = phase(o, FLOE_CHECKPOINT_BEFORE_SHARDS, folder_path, st)) != FLOE_OK ||
      (rc = run_writes(s, &p, folder_path, step, o->timeout_ms, st)) != FLOE_OK)
    goto out;
  int e = sync_dir(folder_path); /* the shards' renames, before the index names them */
  if (e) {
    rc = floe__status_from_errno(st, e, "checkpoint save: syncing folder %s", folder_path);
    goto out;
  }
  if ((rc = phase(o, FLOE_CHECKPOINT_AFTER_SHARDS, folder_path, st)) != FLOE_OK ||
      (rc = read_back(&p, folder_path, st)) != FLOE_OK)
    goto out;
  if (!(text = index_text(&p, order, step, st))) {
    rc = st->code;
    goto out;
  }
  if ((rc = commit_index(dir, index_name, text, o, st)) != FLOE_OK) goto out;
  floe__ckpt_prune(dir, prefix, keep, index_name);
  remove_leftovers(dir, prefix, folder);
  if (index_path_out && !(*index_path_out = floe__ckpt_join_path(dir, index_name)))
    rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
out:
  floe__free(text);
  floe__free(order);
  floe__free(dir);
  floe__free(folder);
  floe__free(folder_path);
  floe__free(index_name);
  plan_free(&p);
  return rc;
}

/* Caller frees *index_path_out with free(). */
floe_code floe_checkpoint_save_sharded(FloeSession *s, const char *dir, const char *prefix,
                                       int64_t step, int keep, const FloeCheckpointShardOptions *o,
                                       char **index_path_out, FloeStatus *status) {
  if (index_path_out) *index_path_out = NULL;
  if (!s) return floe_status_set(status, FLOE_INVALID_ARGUMENT, "checkpoint save: session is NULL");
  FloeCheckpointShardOptions opts;
  floe_checkpoint_shard_options_init(&opts);
  if (o) {
    if (FLOE_HAS_FIELD(o, FloeCheckpointShardOptions, phase)) opts.phase = o->phase;
    if (FLOE_HAS_FIELD(o, FloeCheckpointShardOptions, phase_arg)) opts.phase_arg = o->phase_arg;
    if (FLOE_HAS_FIELD(o, FloeCheckpointShardOptions, timeout_ms)) opts.timeout_ms = o->timeout_ms;
  }
  FloeStatus st = {FLOE_OK, NULL};
  floe_code rc = save_sharded(s, dir, prefix ? prefix : DEFAULT_PREFIX, step, keep, &opts,
                              index_path_out, &st);
  return floe__ckpt_finish(status, &st, rc);
}

/* ------------------------------------------------------------------------------------ */
/* Restoring: the index read and checked whole, every needed shard file opened and checked
 * against it, every variable's box read, and only then any variable assigned. */

typedef struct IdxFile {
  const char *rel;       /* the index's name; borrowed from the JSON */
  char *path;            /* owned */
  int64_t size;
  const char *save_id;   /* borrowed from the JSON */
  StFile sf;
  bool opened;
} IdxFile;

typedef struct Index {
  const char *path;
  json_t *root;
  int64_t step;
  IdxFile *f;
  int nf;
} Index;

static void index_free(Index *x) {
  for (int i = 0; i < x->nf; i++) {
    floe__free(x->f[i].path);
    if (x->f[i].opened) floe__safetensors_close(&x->f[i].sf);
  }
  floe__free(x->f);
  json_decref(x->root);
}

FLOE__PRINTF(3, 4)
static floe_code bad_index(const Index *x, FloeStatus *st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *m = floe__vasprintf(fmt, ap);
  va_end(ap);
  floe_status_set(st, FLOE_DATA_LOSS, "checkpoint index %s: %s (the index is corrupt or was "
                  "edited: restore an older checkpoint)", x->path, m ? m : "corrupt");
  floe__free(m);
  return FLOE_DATA_LOSS;
}

static bool get_int(json_t *o, const char *k, int64_t *v) {
  json_t *j = json_object_get(o, k);
  if (!json_is_integer(j) || json_integer_value(j) < 0) return false;
  *v = json_integer_value(j);
  return true;
}

/* A file name of the index: relative, inside the index's folder ("a/b", no "..", no "."). */
static bool safe_rel(const char *rel) {
  if (!rel[0] || rel[0] == '/') return false;
  for (const char *c = rel; *c;) {
    size_t n = strcspn(c, "/");
    if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.')) return false;
    c += n;
    if (*c == '/') c++;
  }
  return true;
}

static floe_code index_open(const char *path, Index *x, FloeStatus *st) {
  memset(x, 0, sizeof *x);
  x->path = path;
  struct stat sb;
  if (stat(path, &sb) != 0)
    return floe__status_from_errno(st, errno, "cannot open checkpoint index %s", path);
  if (!S_ISREG(sb.st_mode) || sb.st_size > INDEX_LIMIT)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT, "checkpoint index %s is %s", path,
                           S_ISREG(sb.st_mode) ? "over the 100000000-byte limit"
                                               : "not a regular file");
  json_error_t je;
  x->root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
  if (!x->root) {
    if (je.position == 0 && je.line < 0)
      return floe__status_from_errno(st, errno ? errno : EIO, "cannot read checkpoint index %s",
                                     path);
    return floe_status_set(st, FLOE_DATA_LOSS, "checkpoint index %s: offset %d (line %d, column "
                           "%d): %s (the index is truncated or corrupt: restore an older "
                           "checkpoint)", path, je.position, je.line, je.column, je.text);
  }
  json_t *meta = json_object_get(x->root, "metadata");
  json_t *fmt = json_object_get(meta, "format"), *gs = json_object_get(meta, "global_step");
  const char *gss = json_string_value(gs);
  if (!json_is_object(x->root) || !json_is_object(meta) || !json_is_string(fmt) ||
      strcmp(json_string_value(fmt), "floe-sharded") != 0)
    return bad_index(x, st, "metadata.format is not \"floe-sharded\"");
  char *end = NULL;
  errno = 0;
  long long step = gss && gss[0] >= '0' && gss[0] <= '9' ? strtoll(gss, &end, 10) : -1;
  if (step < 0 || !end || *end || errno)
    return bad_index(x, st, "metadata.global_step is not a non-negative decimal string");
  x->step = step;
  json_t *files = json_object_get(x->root, "files");
  if (!json_is_object(files) || !json_is_object(json_object_get(x->root, "variables")))
    return bad_index(x, st, "it lacks the \"files\" or \"variables\" object");
  x->f = floe__calloc(json_object_size(files) + 1, sizeof *x->f);
  if (!x->f) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
  const char *slash = strrchr(path, '/');
  int dl = slash ? (int)(slash - path) : 1;
  const char *dirp = slash ? path : ".";
  const char *rel;
  json_t *v;
  json_object_foreach(files, rel, v) {
    IdxFile *f = &x->f[x->nf++];
    f->rel = rel;
    f->save_id = json_string_value(json_object_get(v, "save_id"));
    if (!safe_rel(rel) || !get_int(v, "size", &f->size) || !f->save_id)
      return bad_index(x, st, "files.\"%.*s\": a relative name inside the folder with a size "
                       "and a save_id is expected", SHOWN, rel);
    if (!(f->path = floe__asprintf("%.*s/%s", dl, dirp, rel)))
      return floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
  }
  return FLOE_OK;
}

/* File rel of the index, opened and checked against the index on first use. */
static IdxFile *index_file(Index *x, const char *rel, const char *var, FloeStatus *st) {
  IdxFile *f = NULL;
  for (int i = 0; i < x->nf && !f; i++)
    if (!strcmp(x->f[i].rel, rel)) f = &x->f[i];
  if (!f) {
    bad_index(x, st, "variable '%.*s' has a part in file \"%.*s\", which \"files\" does not "
              "list", SHOWN, var, SHOWN, rel);
    return NULL;
  }
  if (f->opened) return f;
  struct stat sb;
  if (stat(f->path, &sb) != 0) {
    floe__status_from_errno(st, errno, "checkpoint %s: shard file %s (variable '%.*s') cannot be "
                            "read: the checkpoint is incomplete; restore an older one", x->path,
                            f->path, SHOWN, var);
    return NULL;
  }
  if (sb.st_size != f->size) {
    floe_status_set(st, FLOE_DATA_LOSS, "checkpoint %s: shard file %s: offset %" PRId64 ": it "
                    "has %lld bytes, the index says %" PRId64 " (truncated or replaced after "
                    "the save); restore an older checkpoint", x->path, f->path,
                    (int64_t)sb.st_size < f->size ? (int64_t)sb.st_size : f->size,
                    (long long)sb.st_size, f->size);
    return NULL;
  }
  if (floe__safetensors_open(f->path, &f->sf, st) != FLOE_OK) return NULL;
  f->opened = true;
  if (!f->sf.has_save_id || strcmp(f->sf.save_id, f->save_id) != 0 || f->sf.step != x->step) {
    floe_status_set(st, FLOE_DATA_LOSS, "checkpoint %s: shard file %s is of another save (save "
                    "%s, step %" PRId64 "; the index says save %.*s, step %" PRId64 "): it was "
                    "replaced after the save; restore an older checkpoint", x->path, f->path,
                    f->sf.has_save_id ? f->sf.save_id : "none", f->sf.step, SHOWN, f->save_id,
                    x->step);
    return NULL;
  }
  return f;
}

typedef struct Part {
  IdxFile *f;
  const Entry *e;
  int axis;
  int64_t offset;
} Part;

/* The parts of variable v (key), checked: each a tensor of its file, of the variable's
 * dtype and rank, tiling the whole along one axis. *parts: caller frees. */
static floe_code var_parts(Index *x, const char *key, json_t *v, const FloeSafetensorsType *t,
                           int rank, const int64_t *full, Part **parts, int *np, FloeStatus *st) {
  json_t *pa = json_object_get(v, "parts");
  size_t n = json_array_size(pa);
  if (!json_is_array(pa) || n == 0)
    return bad_index(x, st, "variables.\"%.*s\".parts is not a non-empty array", SHOWN, key);
  Part *p = floe__calloc(n, sizeof *p);
  if (!p) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
  int64_t at = 0;
  floe_code rc = FLOE_OK;
  for (size_t i = 0; i < n && rc == FLOE_OK; i++) {
    json_t *pj = json_array_get(pa, i);
    const char *file = json_string_value(json_object_get(pj, "file"));
    const char *tensor = json_string_value(json_object_get(pj, "tensor"));
    int64_t axis = -1;
    if (!file || !tensor || !get_int(pj, "axis", &axis) || !get_int(pj, "offset", &p[i].offset) ||
        (rank > 0 && axis >= rank) || p[i].offset != at) {
      rc = bad_index(x, st, "variables.\"%.*s\".parts[%zu]: a file, tensor, axis and offset "
                     "continuing the parts before (at %" PRId64 ") are expected", SHOWN, key, i,
                     at);
      break;
    }
    p[i].axis = (int)axis;
    if (i && p[i].axis != p[0].axis) {
      rc = bad_index(x, st, "variables.\"%.*s\".parts[%zu]: axis %d, the first part's is %d",
                     SHOWN, key, i, p[i].axis, p[0].axis);
      break;
    }
    if (!(p[i].f = index_file(x, file, key, st))) {
      rc = st->code;
      break;
    }
    const Entry *e = p[i].e = floe__safetensors_find(&p[i].f->sf, tensor);
    bool fits = e && e->type == t && e->rank == rank;
    for (int d = 0; fits && d < rank; d++)
      fits = d == p[i].axis ? p[i].offset + e->dims[d] <= full[d] : e->dims[d] == full[d];
    if (!fits) {
      char a[FLOE__SAFETENSORS_DIMS_BUF], b[FLOE__SAFETENSORS_DIMS_BUF];
      rc = floe_status_set(st, FLOE_DATA_LOSS, "checkpoint %s: shard file %s %s tensor '%.*s' "
                           "(part %zu of '%.*s' at offset %" PRId64 " along axis %d of %s %s)%s%s "
                           "%s; restore an older checkpoint", x->path, p[i].f->path,
                           e ? "has a misfitting" : "lacks", SHOWN, tensor, i, SHOWN, key,
                           p[i].offset, p[i].axis, t->name,
                           floe__safetensors_dims_str(rank, full, a, sizeof a), e ? ": " : "",
                           e ? e->type->name : "",
                           e ? floe__safetensors_dims_str(e->rank, e->dims, b, sizeof b) : "");
      break;
    }
    at += rank ? e->dims[p[i].axis] : 1;
  }
  if (rc == FLOE_OK && at != (rank ? full[p[0].axis] : 1))
    rc = bad_index(x, st, "variables.\"%.*s\": its parts hold %" PRId64 " of its %" PRId64
                   " rows along axis %d", SHOWN, key, at, rank ? full[p[0].axis] : 1, p[0].axis);
  if (rc != FLOE_OK) {
    floe__free(p);
    return rc;
  }
  *parts = p;
  *np = (int)n;
  return FLOE_OK;
}

/* Item it's value: its box of the whole (all of it, or its rows along its axis), read from
 * the parts that overlap it. */
static floe_code read_item(Index *x, Item *it, FloeStatus *st) {
  const char *key = it->full_name ? it->full_name : it->name;
  json_t *v = json_object_get(json_object_get(x->root, "variables"), key);
  if (!v) {
    json_t *vars = json_object_get(x->root, "variables");
    return floe_status_set(st, FLOE_NOT_FOUND, "checkpoint %s has no variable '%s' (it holds "
                           "%zu; \"variables\" in the index lists them)", x->path, key,
                           json_object_size(vars));
  }
  const char *dts = json_string_value(json_object_get(v, "dtype"));
  const FloeSafetensorsType *t = dts ? floe__safetensors_type_named(dts) : NULL;
  json_t *sh = json_object_get(v, "shape");
  int rank = (int)json_array_size(sh);
  int64_t full[FLOE_MAX_DIMS];
  bool ok = t && json_is_array(sh) && rank <= FLOE_MAX_DIMS;
  for (int d = 0; ok && d < rank; d++) {
    json_t *j = json_array_get(sh, (size_t)d);
    ok = json_is_integer(j) && json_integer_value(j) >= 0;
    full[d] = ok ? json_integer_value(j) : 0;
  }
  if (!ok) return bad_index(x, st, "variables.\"%.*s\": a dtype and a shape are expected", SHOWN, key);
  const FloeShape *want = it->full_name ? &it->full_shape : &it->shape;
  bool shape_ok = want->rank == FLOE_RANK_UNKNOWN || want->rank == rank;
  for (int d = 0; shape_ok && want->rank != FLOE_RANK_UNKNOWN && d < rank; d++)
    shape_ok = want->dims[d] == FLOE_DIM_UNKNOWN || want->dims[d] == full[d];
  if (t->dt != it->dtype || !shape_ok) {
    char a[64], b[FLOE__SAFETENSORS_DIMS_BUF];
    return floe_status_set(st, FLOE_INVALID_ARGUMENT, "checkpoint %s: variable '%s' has another "
                           "%s: expected %s %s (the graph's), found %s %s in the index", x->path,
                           key, t->dt != it->dtype ? "dtype" : "shape",
                           floe_dtype_name(it->dtype), floe_shape_str(want, a, sizeof a),
                           t->name, floe__safetensors_dims_str(rank, full, b, sizeof b));
  }
  int64_t lo[FLOE_MAX_DIMS], hi[FLOE_MAX_DIMS]; /* the item's box of the whole */
  for (int d = 0; d < rank; d++) lo[d] = 0, hi[d] = full[d];
  if (it->full_name) {
    if (it->axis < 0 || it->axis >= rank || it->offset < 0 || it->shape.rank != rank ||
        it->offset + it->shape.dims[it->axis] > full[it->axis])
      return floe_status_set(st, FLOE_INVALID_ARGUMENT, "checkpoint restore: shard '%s' does "
                             "not fit its sharded variable '%s'", it->name, key);
    lo[it->axis] = it->offset;
    hi[it->axis] = it->offset + it->shape.dims[it->axis];
  }
  int64_t dims[FLOE_MAX_DIMS];
  for (int d = 0; d < rank; d++) dims[d] = hi[d] - lo[d];
  Part *parts = NULL;
  int np = 0;
  floe_code rc = var_parts(x, key, v, t, rank, full, &parts, &np, st);
  if (rc != FLOE_OK) return rc;
  if (!(it->value = floe__tensor_alloc(NULL, it->dtype, rank, dims, st))) {
    floe__free(parts);
    return st->code;
  }
  for (int i = 0; i < np && rc == FLOE_OK; i++) {
    int64_t plo[FLOE_MAX_DIMS], phi[FLOE_MAX_DIMS], at[FLOE_MAX_DIMS]; /* part coordinates */
    bool empty = false;
    for (int d = 0; d < rank; d++) {
      int64_t off = d == parts[i].axis ? parts[i].offset : 0;
      int64_t a = lo[d] > off ? lo[d] : off;
      int64_t b = hi[d] < off + parts[i].e->dims[d] ? hi[d] : off + parts[i].e->dims[d];
      empty |= a >= b;
      plo[d] = a - off, phi[d] = b - off, at[d] = a - lo[d];
    }
    if (!empty || rank == 0)
      rc = floe__safetensors_read_box(&parts[i].f->sf, parts[i].e, plo, phi, it->value, at, st);
  }
  floe__free(parts);
  return rc;
}

floe_code floe__ckpt_restore_index(const char *path, Item *items, int n, int64_t *step_out,
                                   FloeSession *s, FloeStatus *st) {
  Index x;
  floe_code rc = index_open(path, &x, st);
  for (int i = 0; i < n && rc == FLOE_OK; i++) rc = read_item(&x, &items[i], st);
  if (rc == FLOE_OK && (rc = floe__ckpt_assign_items(path, items, n, s, st)) == FLOE_OK &&
      step_out)
    *step_out = x.step;
  index_free(&x);
  return rc;
}
