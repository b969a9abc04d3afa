/* SPDX-License-Identifier: Apache-2.0 */
/* graph_io.c - graph files: a versioned little-endian binary format (docs/graph-format.md),
 * written atomically, read defensively (every length bounded by the bytes that remain) and
 * re-validated node by node through floe__graph_add_node. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "graph.h"

#define FORMAT_MAGIC "FLOEGRPH"
#define FORMAT_MAJOR 1u
#define FORMAT_MINOR 0u
#define HEADER_BYTES 16u       /* magic, version, node count */
#define MAX_NODE_ATTRS 256u    /* far above any op; bounds per-node work on hostile files */
#define NAME_SHOWN 80          /* bytes of a name from the file quoted in a message */

/* ------------------------------------------------------------------------------------ */
/* CRC-32 (IEEE 802.3, reflected, as zlib's crc32). */

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    crc_table[i] = c;
  }
}

static uint32_t crc32_of(const uint8_t *p, size_t n) {
  pthread_once(&crc_once, crc_init);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

/* Tensor bytes are stored little-endian; a big-endian host swaps each element. */
static void copy_le(uint8_t *dst, const uint8_t *src, size_t nbytes, size_t esize) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  for (size_t i = 0; i + esize <= nbytes; i += esize)
    for (size_t k = 0; k < esize; k++) dst[i + k] = src[i + esize - 1 - k];
#else
  (void)esize;
  memcpy(dst, src, nbytes);
#endif
}

/* ------------------------------------------------------------------------------------ */
/* Writer. */

typedef FloeByteBuf Writer;

static void put(Writer *w, const void *src, size_t n) { floe__buf_put(w, src, n); }

static void put_u8(Writer *w, uint8_t v) { put(w, &v, 1); }

static void put_u32(Writer *w, uint32_t v) {
  uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
  put(w, b, 4);
}

static void put_u64(Writer *w, uint64_t v) {
  uint8_t b[8];
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
  put(w, b, 8);
}

static void put_f64(Writer *w, double d) {
  uint64_t v;
  memcpy(&v, &d, sizeof v);
  put_u64(w, v);
}

static void put_str(Writer *w, const char *s) {
  size_t n = s ? strlen(s) : 0;
  put_u32(w, (uint32_t)n);
  put(w, s, n);
}

static void patch_u32(Writer *w, size_t at, uint32_t v) {
  if (w->oom) return;
  for (int i = 0; i < 4; i++) w->p[at + (size_t)i] = (uint8_t)(v >> (8 * i));
}

static void put_shape(Writer *w, const FloeShape *sh) {
  put_u32(w, (uint32_t)sh->rank);
  for (int i = 0; i < sh->rank; i++) put_u64(w, (uint64_t)sh->dims[i]);
}

static floe_code put_attr(Writer *w, const FloeNode *n, const char *name, const FloeAttrValue *v,
                          FloeStatus *st) {
  put_str(w, name);
  put_u8(w, (uint8_t)v->kind);
  switch (v->kind) {
    case FLOE_ATTR_INT: put_u64(w, (uint64_t)v->u.i); break;
    case FLOE_ATTR_FLOAT: put_f64(w, v->u.f); break;
    case FLOE_ATTR_BOOL: put_u8(w, v->u.b ? 1 : 0); break;
    case FLOE_ATTR_STRING: put_str(w, v->u.s); break;
    case FLOE_ATTR_TYPE: put_u32(w, (uint32_t)v->u.type); break;
    case FLOE_ATTR_SHAPE: put_shape(w, &v->u.shape); break;
    case FLOE_ATTR_TENSOR: {
      const FloeTensor *t = v->u.tensor;
      if (t->nbytes && !floe__tensor_on_host(t))
        return floe_status_set(st, FLOE_FAILED_PRECONDITION,
                               "node '%s': attribute '%s' is a tensor in device memory (%s); "
                               "copy it to the host to save the graph",
                               n->name, name, floe_tensor_device_name(t));
      put_u32(w, (uint32_t)t->dtype);
      put_u32(w, (uint32_t)t->rank);
      for (int i = 0; i < t->rank; i++) put_u64(w, (uint64_t)t->dims[i]);
      put_u64(w, (uint64_t)t->nbytes);
      if (t->nbytes) {
        size_t at = w->len;
        put(w, floe_tensor_data(t), t->nbytes);
        if (!w->oom)
          copy_le(w->p + at, floe_tensor_data(t), t->nbytes, floe_dtype_size(t->dtype));
      }
      break;
    }
    case FLOE_ATTR_INT_LIST:
      put_u32(w, (uint32_t)v->u.ilist.n);
      for (size_t i = 0; i < v->u.ilist.n; i++) put_u64(w, (uint64_t)v->u.ilist.v[i]);
      break;
    case FLOE_ATTR_FLOAT_LIST:
      put_u32(w, (uint32_t)v->u.flist.n);
      for (size_t i = 0; i < v->u.flist.n; i++) put_f64(w, v->u.flist.v[i]);
      break;
    case FLOE_ATTR_TYPE_LIST:
      put_u32(w, (uint32_t)v->u.tlist.n);
      for (size_t i = 0; i < v->u.tlist.n; i++) put_u32(w, (uint32_t)v->u.tlist.v[i]);
      break;
    case FLOE_ATTR_SHAPE_LIST:
      put_u32(w, (uint32_t)v->u.slist.n);
      for (size_t i = 0; i < v->u.slist.n; i++) put_shape(w, &v->u.slist.v[i]);
      break;
    default:
      return floe_status_set(st, FLOE_INTERNAL, "node '%s': attribute '%s' has no value",
                             n->name, name);
  }
  return FLOE_OK;
}

static bool utf8(const char *s) {
  size_t n = strlen(s);
  return floe__utf8_check(s, n) == n;
}

/* Lengths in the format are u32; a graph part beyond that cannot be written. */
static floe_code check_sizes(const FloeNode *n, FloeStatus *st) {
  bool ok = strlen(n->name) <= UINT32_MAX && (!n->device || strlen(n->device) <= UINT32_MAX);
  for (int i = 0; ok && i < n->attrs.n; i++) {
    const FloeAttrValue *v = &n->attrs.values[i];
    size_t len = v->kind == FLOE_ATTR_STRING       ? strlen(v->u.s)
                 : v->kind == FLOE_ATTR_INT_LIST   ? v->u.ilist.n
                 : v->kind == FLOE_ATTR_FLOAT_LIST ? v->u.flist.n
                 : v->kind == FLOE_ATTR_TYPE_LIST  ? v->u.tlist.n
                 : v->kind == FLOE_ATTR_SHAPE_LIST ? v->u.slist.n
                                                   : 0;
    ok = strlen(n->attrs.names[i]) <= UINT32_MAX && len <= UINT32_MAX;
  }
  if (!ok)
    return floe_status_set(st, FLOE_OUT_OF_RANGE,
                           "node '%s': a name, string or list is longer than the format's "
                           "4 GiB limit", n->name);
  if (n->attrs.n > (int)MAX_NODE_ATTRS)
    return floe_status_set(st, FLOE_OUT_OF_RANGE, "node '%s' has %d attributes; the format "
                           "allows %u", n->name, n->attrs.n, MAX_NODE_ATTRS);
  /* The format's strings are UTF-8 and the reader refuses others: never write what cannot
   * be read back. */
  const char *what = NULL, *bad = NULL;
  if (!utf8(n->name)) what = "its name", bad = n->name;
  else if (n->device && !utf8(n->device)) what = "its device", bad = n->device;
  for (int i = 0; !what && i < n->attrs.n; i++) {
    const FloeAttrValue *v = &n->attrs.values[i];
    if (!utf8(n->attrs.names[i])) what = "an attribute name", bad = n->attrs.names[i];
    else if (v->kind == FLOE_ATTR_STRING && !utf8(v->u.s)) what = "a string attribute", bad = v->u.s;
  }
  if (what) {
    size_t at = floe__utf8_check(bad, strlen(bad));
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "node #%d (%s): %s is not valid UTF-8 (byte 0x%02x at offset %zu); "
                           "graph files hold UTF-8 strings",
                           n->id, n->op->name, what, (unsigned)(uint8_t)bad[at], at);
  }
  return FLOE_OK;
}

/* pos[id]: where node id is written (a file lists every node after its inputs). */
static floe_code put_node(Writer *w, const FloeNode *n, const int *pos, FloeStatus *st) {
  floe_code rc = check_sizes(n, st);
  if (rc != FLOE_OK) return rc;
  size_t len_at = w->len;
  put_u32(w, 0); /* record length, patched below */
  put_str(w, n->name);
  put_str(w, n->op->name);
  put_str(w, n->device);
  put_u32(w, (uint32_t)n->op->num_inputs);
  for (int a = 0, i = 0; a < n->op->num_inputs; a++) {
    int first = i;
    while (i < n->num_inputs && n->input_arg[i] == a) i++;
    put_u32(w, (uint32_t)(i - first));
    for (int k = first; k < i; k++) {
      put_u32(w, (uint32_t)pos[n->inputs[k].node->id]);
      put_u32(w, (uint32_t)n->inputs[k].index);
    }
  }
  put_u32(w, (uint32_t)n->num_control);
  for (int i = 0; i < n->num_control; i++) put_u32(w, (uint32_t)pos[n->control[i]->id]);
  put_u32(w, (uint32_t)n->attrs.n);
  for (int i = 0; i < n->attrs.n; i++) {
    rc = put_attr(w, n, n->attrs.names[i], &n->attrs.values[i], st);
    if (rc != FLOE_OK) return rc;
  }
  if (!w->oom && w->len - len_at - 4 > UINT32_MAX)
    return floe_status_set(st, FLOE_OUT_OF_RANGE,
                           "node '%s' takes more than the format's 4 GiB per node", n->name);
  patch_u32(w, len_at, (uint32_t)(w->len - len_at - 4));
  return FLOE_OK;
}

/* Caller frees *buf with free(). */
static bool back_edge(const FloeNode *n, const FloeNode *src) {
  return strcmp(n->op->name, "Merge") == 0 && strcmp(src->op->name, "NextIteration") == 0;
}

/* The order nodes are written in: by id when every input comes earlier (how graphs are
 * built), else a topological order (an edit such as a loop's rewiring made a node read a
 * later one); a Merge's back edge from its NextIteration never counts. *order and *pos
 * (inverse) are floe__malloc'd. */
static floe_code file_order(const FloeGraph *g, int **order, int **pos) {
  int n = g->num_nodes;
  bool sorted = true;
  for (int i = 0; i < n && sorted; i++) {
    const FloeNode *x = g->nodes[i];
    for (int j = 0; j < x->num_inputs; j++)
      if (!back_edge(x, x->inputs[j].node) && x->inputs[j].node->id >= i) sorted = false;
    for (int k = 0; k < x->num_control; k++)
      if (x->control[k]->id >= i) sorted = false;
  }
  int count = n;
  *order = sorted ? floe__malloc(((size_t)n + 1) * sizeof **order)
                  : floe__graph_topo_order(g, NULL, &count);
  *pos = floe__malloc(((size_t)n + 1) * sizeof **pos);
  if (!*order || !*pos) {
    floe__free(*order);
    floe__free(*pos);
    *order = *pos = NULL;
    return FLOE_NO_MEMORY;
  }
  for (int i = 0; sorted && i < n; i++) (*order)[i] = i;
  for (int i = 0; i < n; i++) (*pos)[(*order)[i]] = i;
  return FLOE_OK;
}

floe_code floe_graph_serialize(const FloeGraph *g, void **buf, size_t *len, FloeStatus *status) {
  Writer w = {NULL, 0, 0, false};
  floe_code rc;
  if (buf) *buf = NULL;
  if (len) *len = 0;
  if (!g || !buf || !len)
    return floe_status_set(status, FLOE_INVALID_ARGUMENT, "serialize: graph or output is NULL");
  if (g->error != FLOE_OK)
    return floe_status_set(status, FLOE_FAILED_PRECONDITION,
                           "the graph has an error and is not saved: %s",
                           floe_graph_error(g, NULL));
  put(&w, FORMAT_MAGIC, 8);
  put_u32(&w, FORMAT_MAJOR << 16 | FORMAT_MINOR);
  put_u32(&w, (uint32_t)g->num_nodes);
  int *order = NULL, *pos = NULL;
  if (file_order(g, &order, &pos) != FLOE_OK) {
    rc = floe_status_set(status, FLOE_NO_MEMORY, "out of memory serialising a graph of %d nodes",
                         g->num_nodes);
    goto err_free_buf;
  }
  rc = FLOE_OK;
  for (int i = 0; i < g->num_nodes && rc == FLOE_OK; i++)
    rc = put_node(&w, g->nodes[order[i]], pos, status);
  floe__free(order);
  floe__free(pos);
  if (rc != FLOE_OK) goto err_free_buf;
  if (!w.oom) put_u32(&w, crc32_of(w.p, w.len));
  if (w.oom) {
    rc = floe_status_set(status, FLOE_NO_MEMORY, "out of memory serialising a graph of %d nodes",
                         g->num_nodes);
    goto err_free_buf;
  }
  *buf = w.p;
  *len = w.len;
  return FLOE_OK;

err_free_buf:
  floe__free(w.p);
  return rc;
}

floe_code floe_graph_save(const FloeGraph *g, const char *path, FloeStatus *status) {
  if (!path) return floe_status_set(status, FLOE_INVALID_ARGUMENT, "save: path is NULL");
  void *buf = NULL;
  size_t len = 0;
  floe_code rc = floe_graph_serialize(g, &buf, &len, status);
  if (rc != FLOE_OK) {
    floe__status_prefix(status, "%s", path);
    return rc;
  }
  rc = floe__file_replace(path, buf, len, status);
  floe__free(buf);
  return rc;
}

/* ------------------------------------------------------------------------------------ */
/* Reader. One parser serves two passes: a scan that checks structure only (so a truncated
 * or corrupt file is reported precisely before anything is built), then, once the CRC
 * matches, a build pass that adds every node through floe__graph_add_node. */

typedef struct Reader {
  const uint8_t *buf;
  size_t len;        /* whole input */
  size_t pos;
  size_t lim;        /* end of the current node record (or of the input) */
  const char *what;  /* file name for messages */
  FloeStatus *st;
  FloeGraph *g;      /* NULL in the scan pass */
  bool newer_minor;  /* the file's minor is above ours: skip unknown trailing fields */
  long node;         /* index of the node being read; -1 in the header */
  const char *name;  /* its name in the buffer once read */
  uint32_t name_len;
  const char *op;    /* its op in the buffer once read */
  uint32_t op_len;
  uint32_t count;    /* nodes in the file */
  /* A loop's back edge: a Merge input from a later node (its NextIteration). The Merge is
   * added with a stand-in (an earlier input of the same list) and the edge set once every
   * node exists, as floe_while_loop builds it. */
  struct BackEdge {
    long node;
    int input;
    uint32_t src, idx;
    size_t at;
  } *back;
  int num_back, cap_back;
} Reader;

FLOE__PRINTF(4, 5)
static bool fail_at(Reader *r, size_t off, floe_code code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *body = floe__vasprintf(fmt, ap);
  va_end(ap);
  if (!body)
    floe_status_set(r->st, FLOE_NO_MEMORY, "%s: offset %zu: out of memory describing an error",
                    r->what, off);
  else
    floe_status_set(r->st, code, "%s: offset %zu: %s", r->what, off, body);
  floe__free(body);
  return false;
}

/* " of node 'w'" / " of node 3" / "" for messages about a field. */
static const char *node_ctx(const Reader *r, char *buf, size_t len) {
  if (r->name)
    snprintf(buf, len, " of node '%.*s'", (int)(r->name_len < NAME_SHOWN ? r->name_len : NAME_SHOWN),
             r->name);
  else if (r->node >= 0)
    snprintf(buf, len, " of node %ld", r->node);
  else
    buf[0] = '\0';
  return buf;
}

FLOE__PRINTF(3, 4)
static bool need(Reader *r, uint64_t n, const char *fmt, ...) {
  if (n <= r->lim - r->pos) return true;
  char item[160], ctx[128];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(item, sizeof item, fmt, ap);
  va_end(ap);
  return fail_at(r, r->pos, FLOE_DATA_LOSS, "truncated %s%s (need %" PRIu64 " bytes, %zu left)",
                 item, node_ctx(r, ctx, sizeof ctx), n, r->lim - r->pos);
}

static uint8_t get_u8(Reader *r) { return r->buf[r->pos++]; }

static uint32_t get_u32(Reader *r) {
  const uint8_t *p = r->buf + r->pos;
  r->pos += 4;
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get_u64(Reader *r) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)r->buf[r->pos + (size_t)i] << (8 * i);
  r->pos += 8;
  return v;
}

static double get_f64(Reader *r) {
  uint64_t v = get_u64(r);
  double d;
  memcpy(&d, &v, sizeof d);
  return d;
}

/* A u32-length string; *s points into the buffer (not NUL-terminated; NULs refused). */
static bool read_str(Reader *r, const char **s, uint32_t *n, const char *item) {
  char ctx[128];
  if (!need(r, 4, "length of the %s", item)) return false;
  size_t at = r->pos;
  *n = get_u32(r);
  if (!need(r, *n, "%s", item)) return false;
  *s = (const char *)r->buf + r->pos;
  if (memchr(*s, '\0', *n))
    return fail_at(r, at, FLOE_DATA_LOSS, "%s%s contains a NUL byte", item,
                   node_ctx(r, ctx, sizeof ctx));
  size_t bad = floe__utf8_check(*s, *n); /* the format's strings are UTF-8 */
  if (bad != *n)
    return fail_at(r, r->pos + bad, FLOE_DATA_LOSS, "%s%s is not valid UTF-8 (byte 0x%02x)", item,
                   node_ctx(r, ctx, sizeof ctx), (unsigned)(uint8_t)(*s)[bad]);
  r->pos += *n;
  return true;
}

/* Copies a buffer string into a NUL-terminated string (build pass only). */
static bool dup_str(Reader *r, const char *s, uint32_t n, char **out) {
  *out = floe__strndup(s, n);
  if (!*out) return fail_at(r, r->pos, FLOE_NO_MEMORY, "out of memory reading a string");
  return true;
}

static bool read_dtype(Reader *r, FloeDType *dt, const char *an, int anl, const char *what) {
  char ctx[128];
  size_t at = r->pos;
  if (!need(r, 4, "%s of attribute '%.*s'", what, anl, an)) return false;
  uint32_t v = get_u32(r);
  if (v >= FLOE_DTYPE_LIMIT || !floe_dtype_size((FloeDType)v))
    return fail_at(r, at, FLOE_DATA_LOSS, "%s of attribute '%.*s'%s is %" PRIu32 ", not a dtype",
                   what, anl, an, node_ctx(r, ctx, sizeof ctx), v);
  *dt = (FloeDType)v;
  return true;
}

/* A u32 element count followed by count * esize bytes that must all be present. */
static bool read_count(Reader *r, uint32_t *n, size_t esize, const char *an, int anl) {
  if (!need(r, 4, "length of attribute '%.*s'", anl, an)) return false;
  *n = get_u32(r);
  return need(r, (uint64_t)*n * esize, "attribute '%.*s'", anl, an);
}

static bool read_tensor(Reader *r, FloeAttrValue *v, const char *an, int anl) {
  char ctx[128];
  FloeDType dt;
  int64_t dims[FLOE_MAX_DIMS];
  if (!read_dtype(r, &dt, an, anl, "dtype")) return false;
  size_t at = r->pos;
  if (!need(r, 4, "rank of attribute '%.*s'", anl, an)) return false;
  uint32_t rank = get_u32(r);
  if (rank > FLOE_MAX_DIMS)
    return fail_at(r, at, FLOE_DATA_LOSS, "attribute '%.*s'%s: tensor rank %" PRIu32
                   " is above %d", anl, an, node_ctx(r, ctx, sizeof ctx), rank, FLOE_MAX_DIMS);
  if (!need(r, 8u * rank + 8u, "shape of attribute '%.*s'", anl, an)) return false;
  for (uint32_t i = 0; i < rank; i++) dims[i] = (int64_t)get_u64(r);
  at = r->pos;
  uint64_t nbytes = get_u64(r);
  FloeStatus sst = {FLOE_OK, NULL};
  int64_t count;
  size_t want;
  if (floe__shape_bytes(dt, (int)rank, dims, &count, &want, &sst) != FLOE_OK) {
    fail_at(r, at, FLOE_DATA_LOSS, "attribute '%.*s'%s: bad tensor shape: %s", anl, an,
            node_ctx(r, ctx, sizeof ctx), floe_status_message(&sst));
    floe_status_clear(&sst);
    return false;
  }
  if (nbytes != want)
    return fail_at(r, at, FLOE_DATA_LOSS,
                   "attribute '%.*s'%s: a %s tensor of %" PRId64 " elements has %zu bytes, the "
                   "file says %" PRIu64,
                   anl, an, node_ctx(r, ctx, sizeof ctx), floe_dtype_name(dt), count, want,
                   nbytes);
  if (!need(r, nbytes, "attribute '%.*s'", anl, an)) return false;
  if (dt == FLOE_BOOL) /* a bool is the byte 0 or 1 (the format's and every kernel's view) */
    for (uint64_t i = 0; i < nbytes; i++)
      if (r->buf[r->pos + i] > 1)
        return fail_at(r, r->pos + i, FLOE_DATA_LOSS,
                       "attribute '%.*s'%s: bool element %" PRIu64 " is the byte %u, not 0 or 1",
                       anl, an, node_ctx(r, ctx, sizeof ctx), i, r->buf[r->pos + i]);
  if (r->g) {
    FloeTensor *t = floe__tensor_alloc(NULL, dt, (int)rank, dims, &sst);
    if (!t) {
      fail_at(r, at, sst.code, "attribute '%.*s'%s: %s", anl, an, node_ctx(r, ctx, sizeof ctx),
              floe_status_message(&sst));
      floe_status_clear(&sst);
      return false;
    }
    if (want) copy_le(floe_tensor_data(t), r->buf + r->pos, want, floe_dtype_size(dt));
    v->kind = FLOE_ATTR_TENSOR;
    v->u.tensor = t;
  }
  r->pos += want;
  return true;
}

/* An i32 rank (-1..8) and rank i64 dims (>= -1) into *sh. */
static bool read_shape(Reader *r, FloeShape *sh, const char *an, int anl) {
  char ctx[128];
  size_t at = r->pos;
  if (!need(r, 4, "rank of attribute '%.*s'", anl, an)) return false;
  int32_t rank = (int32_t)get_u32(r);
  if (rank < FLOE_RANK_UNKNOWN || rank > FLOE_MAX_DIMS)
    return fail_at(r, at, FLOE_DATA_LOSS, "attribute '%.*s'%s: shape rank %d is outside "
                   "-1..%d", anl, an, node_ctx(r, ctx, sizeof ctx), (int)rank, FLOE_MAX_DIMS);
  *sh = floe_shape_unknown();
  sh->rank = rank;
  if (rank > 0 && !need(r, 8u * (uint32_t)rank, "dims of attribute '%.*s'", anl, an))
    return false;
  for (int i = 0; i < rank; i++) {
    size_t dat = r->pos;
    sh->dims[i] = (int64_t)get_u64(r);
    if (sh->dims[i] < FLOE_DIM_UNKNOWN)
      return fail_at(r, dat, FLOE_DATA_LOSS, "attribute '%.*s'%s: dimension %d is %" PRId64,
                     anl, an, node_ctx(r, ctx, sizeof ctx), i, sh->dims[i]);
  }
  return true;
}

/* One attribute value of the given kind; v is filled only in the build pass. */
static bool read_value(Reader *r, uint8_t kind, FloeAttrValue *v, const char *an, int anl) {
  char ctx[128];
  size_t at = r->pos;
  uint32_t n;
  const char *s;
  uint32_t slen;
  bool build = r->g != NULL;
  switch (kind) {
    case FLOE_ATTR_INT:
      if (!need(r, 8, "attribute '%.*s'", anl, an)) return false;
      v->kind = FLOE_ATTR_INT;
      v->u.i = (int64_t)get_u64(r);
      return true;
    case FLOE_ATTR_FLOAT:
      if (!need(r, 8, "attribute '%.*s'", anl, an)) return false;
      v->kind = FLOE_ATTR_FLOAT;
      v->u.f = get_f64(r);
      return true;
    case FLOE_ATTR_BOOL: {
      if (!need(r, 1, "attribute '%.*s'", anl, an)) return false;
      uint8_t b = get_u8(r);
      if (b > 1)
        return fail_at(r, at, FLOE_DATA_LOSS, "attribute '%.*s'%s: bool byte is %u, not 0 or 1",
                       anl, an, node_ctx(r, ctx, sizeof ctx), b);
      v->kind = FLOE_ATTR_BOOL;
      v->u.b = b;
      return true;
    }
    case FLOE_ATTR_STRING: {
      char item[128];
      snprintf(item, sizeof item, "attribute '%.*s'", anl, an);
      if (!read_str(r, &s, &slen, item)) return false;
      if (build) {
        if (!dup_str(r, s, slen, &v->u.s)) return false;
        v->kind = FLOE_ATTR_STRING;
      }
      return true;
    }
    case FLOE_ATTR_TYPE:
      v->kind = FLOE_ATTR_TYPE;
      return read_dtype(r, &v->u.type, an, anl, "value");
    case FLOE_ATTR_SHAPE:
      v->kind = FLOE_ATTR_SHAPE;
      return read_shape(r, &v->u.shape, an, anl);
    case FLOE_ATTR_TENSOR: return read_tensor(r, v, an, anl);
    case FLOE_ATTR_INT_LIST:
    case FLOE_ATTR_FLOAT_LIST: {
      if (!read_count(r, &n, 8, an, anl)) return false;
      uint64_t *out = NULL;
      if (build && n) {
        out = floe__malloc((size_t)n * 8);
        if (!out) return fail_at(r, at, FLOE_NO_MEMORY, "out of memory reading a list");
      }
      for (uint32_t i = 0; i < n; i++) {
        uint64_t e = get_u64(r);
        if (out) out[i] = e;
      }
      /* int64_t and double are both 8 bytes; the bits were read as integers. */
      v->kind = (FloeAttrKind)kind;
      if (kind == FLOE_ATTR_INT_LIST) {
        v->u.ilist.v = (int64_t *)out;
        v->u.ilist.n = n;
      } else {
        v->u.flist.v = (double *)out;
        v->u.flist.n = n;
      }
      if (!build) v->kind = FLOE_ATTR_NONE;
      return true;
    }
    case FLOE_ATTR_TYPE_LIST: {
      if (!read_count(r, &n, 4, an, anl)) return false;
      FloeDType *out = NULL;
      if (build && n) {
        out = floe__malloc((size_t)n * sizeof *out);
        if (!out) return fail_at(r, at, FLOE_NO_MEMORY, "out of memory reading a list");
      }
      for (uint32_t i = 0; i < n; i++) {
        size_t eat = r->pos;
        uint32_t e = get_u32(r);
        if (e >= FLOE_DTYPE_LIMIT || !floe_dtype_size((FloeDType)e)) {
          floe__free(out);
          return fail_at(r, eat, FLOE_DATA_LOSS, "attribute '%.*s'%s: element %" PRIu32
                         " is %" PRIu32 ", not a dtype", anl, an, node_ctx(r, ctx, sizeof ctx),
                         i, e);
        }
        if (out) out[i] = (FloeDType)e;
      }
      v->kind = build ? FLOE_ATTR_TYPE_LIST : FLOE_ATTR_NONE;
      v->u.tlist.v = out;
      v->u.tlist.n = n;
      return true;
    }
    case FLOE_ATTR_SHAPE_LIST: {
      if (!read_count(r, &n, 4, an, anl)) return false;
      FloeShape *out = NULL, one;
      if (build && n) {
        out = floe__malloc((size_t)n * sizeof *out);
        if (!out) return fail_at(r, at, FLOE_NO_MEMORY, "out of memory reading a list");
      }
      for (uint32_t i = 0; i < n; i++) {
        if (!read_shape(r, out ? &out[i] : &one, an, anl)) {
          floe__free(out);
          return false;
        }
      }
      v->kind = build ? FLOE_ATTR_SHAPE_LIST : FLOE_ATTR_NONE;
      v->u.slist.v = out;
      v->u.slist.n = n;
      return true;
    }
    default:
      return fail_at(r, at - 1, FLOE_DATA_LOSS, "attribute '%.*s'%s has unknown kind tag %u",
                     anl, an, node_ctx(r, ctx, sizeof ctx), kind);
  }
}

/* What one node record holds, owned until handed to floe__graph_add_node. */
typedef struct NodeParts {
  char *name, *op, *device;
  FloeOutput *inputs;
  int num_inputs;
  int *lists;
  int num_lists;
  FloeNode **control;
  int num_control;
  FloeAttrs attrs;
} NodeParts;

static void parts_clear(NodeParts *p) {
  floe__free(p->name);
  floe__free(p->op);
  floe__free(p->device);
  floe__free(p->inputs);
  floe__free(p->lists);
  floe__free(p->control);
  floe__attrs_clear(&p->attrs);
}

static bool read_inputs(Reader *r, NodeParts *p) {
  char ctx[128];
  if (!need(r, 4, "input list count")) return false;
  uint32_t nl = get_u32(r);
  if (!need(r, (uint64_t)nl * 4, "input lists")) return false;
  if (r->g && nl && !(p->lists = floe__malloc((size_t)nl * sizeof *p->lists)))
    return fail_at(r, r->pos, FLOE_NO_MEMORY, "out of memory reading input lists");
  p->num_lists = (int)nl;
  for (uint32_t l = 0; l < nl; l++) {
    if (!need(r, 4, "size of input list %" PRIu32, l)) return false;
    uint32_t k = get_u32(r);
    if (!need(r, (uint64_t)k * 8, "input list %" PRIu32, l)) return false;
    if (r->g) {
      if (k > (uint32_t)(INT_MAX / 2 - p->num_inputs))
        return fail_at(r, r->pos, FLOE_DATA_LOSS, "too many inputs%s",
                       node_ctx(r, ctx, sizeof ctx));
      FloeOutput *in = floe__realloc(p->inputs, ((size_t)p->num_inputs + k + 1) * sizeof *in);
      if (!in) return fail_at(r, r->pos, FLOE_NO_MEMORY, "out of memory reading inputs");
      p->inputs = in;
      p->lists[l] = (int)k;
    }
    for (uint32_t j = 0; j < k; j++) {
      size_t at = r->pos;
      uint32_t src = get_u32(r), idx = get_u32(r);
      bool back = src >= (uint64_t)r->node && src < r->count && idx <= INT_MAX && j > 0 &&
                  r->op_len == 5 && memcmp(r->op, "Merge", 5) == 0;
      if (back && r->g) {
        if (r->num_back == r->cap_back) {
          int cap = r->cap_back ? 2 * r->cap_back : 8;
          struct BackEdge *v = floe__realloc(r->back, (size_t)cap * sizeof *v);
          if (!v) return fail_at(r, at, FLOE_NO_MEMORY, "out of memory reading a loop back edge");
          r->back = v;
          r->cap_back = cap;
        }
        r->back[r->num_back++] = (struct BackEdge){r->node, p->num_inputs, src, idx, at};
        p->inputs[p->num_inputs] = p->inputs[p->num_inputs - 1]; /* the stand-in */
        p->num_inputs++;
        continue;
      }
      if (back) continue;
      if (src >= (uint64_t)r->node || idx > INT_MAX)
        return fail_at(r, at, FLOE_DATA_LOSS,
                       "input %" PRIu32 " of list %" PRIu32 "%s refers to output %" PRIu32
                       " of node %" PRIu32 "; inputs must be earlier nodes (%ld here; only a "
                       "Merge's later inputs may come from later nodes: a loop's back edge)",
                       j, l, node_ctx(r, ctx, sizeof ctx), idx, src, r->node);
      if (r->g) {
        p->inputs[p->num_inputs].node = r->g->nodes[src];
        p->inputs[p->num_inputs].index = (int)idx;
        p->num_inputs++;
      }
    }
  }
  return true;
}

static bool read_control(Reader *r, NodeParts *p) {
  char ctx[128];
  if (!need(r, 4, "control input count")) return false;
  uint32_t nc = get_u32(r);
  if (!need(r, (uint64_t)nc * 4, "control inputs")) return false;
  if (r->g && nc && !(p->control = floe__malloc((size_t)nc * sizeof *p->control)))
    return fail_at(r, r->pos, FLOE_NO_MEMORY, "out of memory reading control inputs");
  for (uint32_t i = 0; i < nc; i++) {
    size_t at = r->pos;
    uint32_t src = get_u32(r);
    if (src >= (uint64_t)r->node)
      return fail_at(r, at, FLOE_DATA_LOSS,
                     "control input %" PRIu32 "%s refers to node %" PRIu32
                     "; control inputs must be earlier nodes (%ld here)",
                     i, node_ctx(r, ctx, sizeof ctx), src, r->node);
    if (r->g) p->control[i] = r->g->nodes[src];
  }
  p->num_control = (int)nc;
  return true;
}

static bool read_attrs(Reader *r, NodeParts *p) {
  char ctx[128];
  size_t at = r->pos;
  if (!need(r, 4, "attribute count")) return false;
  uint32_t na = get_u32(r);
  if (na > MAX_NODE_ATTRS)
    return fail_at(r, at, FLOE_DATA_LOSS, "%" PRIu32 " attributes%s (at most %u)", na,
                   node_ctx(r, ctx, sizeof ctx), MAX_NODE_ATTRS);
  for (uint32_t i = 0; i < na; i++) {
    const char *an;
    uint32_t anl;
    char item[48];
    snprintf(item, sizeof item, "name of attribute %" PRIu32, i);
    if (!read_str(r, &an, &anl, item)) return false;
    int shown = (int)(anl < NAME_SHOWN ? anl : NAME_SHOWN);
    if (!need(r, 1, "kind of attribute '%.*s'", shown, an)) return false;
    uint8_t kind = get_u8(r);
    FloeAttrValue v;
    memset(&v, 0, sizeof v);
    if (!read_value(r, kind, &v, an, shown)) return false;
    if (!r->g) continue;
    char *name;
    if (!dup_str(r, an, anl, &name)) {
      floe__attr_value_clear(&v);
      return false;
    }
    if (floe__attrs_get(&p->attrs, name)) {
      fail_at(r, r->pos, FLOE_DATA_LOSS, "attribute '%s'%s appears twice", name,
              node_ctx(r, ctx, sizeof ctx));
      floe__attr_value_clear(&v);
      floe__free(name);
      return false;
    }
    FloeStatus sst = {FLOE_OK, NULL};
    floe_code rc = floe__attrs_set(&p->attrs, name, &v, &sst);
    floe__free(name);
    floe_status_clear(&sst);
    if (rc != FLOE_OK) {
      floe__attr_value_clear(&v);
      return fail_at(r, r->pos, FLOE_NO_MEMORY, "out of memory reading attributes");
    }
  }
  return true;
}

static bool read_node(Reader *r) {
  size_t start = r->pos;
  NodeParts p;
  memset(&p, 0, sizeof p);
  floe__attrs_init(&p.attrs);
  bool ok = false;
  const char *s;
  uint32_t n;
  r->name = NULL;
  if (!need(r, 4, "record length")) return false;
  uint32_t rec_len = get_u32(r);
  bool clipped = rec_len > r->len - r->pos;
  size_t rec_end = clipped ? r->len : r->pos + rec_len;
  r->lim = rec_end;
  if (!read_str(r, &s, &n, "name")) goto done;
  r->name = s;
  r->name_len = n;
  if (r->g && !dup_str(r, s, n, &p.name)) goto done;
  if (!read_str(r, &s, &n, "op")) goto done;
  r->op = s;
  r->op_len = n;
  if (r->g && !dup_str(r, s, n, &p.op)) goto done;
  if (!read_str(r, &s, &n, "device")) goto done;
  if (r->g && n && !dup_str(r, s, n, &p.device)) goto done;
  if (!read_inputs(r, &p) || !read_control(r, &p) || !read_attrs(r, &p)) goto done;
  if (clipped) {
    char ctx[128];
    fail_at(r, start, FLOE_DATA_LOSS, "truncated record%s (%" PRIu32 " bytes, %zu left)",
            node_ctx(r, ctx, sizeof ctx), rec_len, r->len - start - 4);
    goto done;
  }
  if (r->pos != rec_end && !r->newer_minor) {
    char ctx[128];
    fail_at(r, r->pos, FLOE_DATA_LOSS, "record%s is %" PRIu32 " bytes but its fields end %zu "
            "bytes earlier", node_ctx(r, ctx, sizeof ctx), rec_len, rec_end - r->pos);
    goto done;
  }
  r->pos = rec_end; /* a newer minor's extra fields are skipped */
  r->lim = r->len;
  if (r->g) {
    FloeNodeSpec spec = {
        .op = p.op,
        .name = p.name,
        .device = p.device,
        .inputs = p.inputs,
        .num_inputs = p.num_inputs,
        .list_sizes = p.lists,
        .num_lists = p.num_lists,
        .control = p.control,
        .num_control = p.num_control,
        .attrs = &p.attrs,
    };
    /* Loading re-validates the node exactly as building would. */
    if (!floe__graph_add_node(r->g, &spec, r->st)) {
      floe__status_prefix(r->st, "%s: offset %zu", r->what, start);
      goto done;
    }
  }
  ok = true;
done:
  parts_clear(&p);
  r->lim = r->len;
  return ok;
}

static bool read_graph(Reader *r) {
  r->pos = HEADER_BYTES - 4;
  r->lim = r->len;
  r->node = -1;
  r->name = NULL;
  uint32_t count = get_u32(r);
  r->count = count;
  for (uint32_t i = 0; i < count; i++) {
    r->node = (long)i;
    r->name = NULL;
    if (!read_node(r)) return false;
  }
  for (int b = 0; r->g && b < r->num_back; b++) { /* loop back edges, now that all exist */
    const struct BackEdge *e = &r->back[b];
    FloeNode *n = r->g->nodes[e->node];
    FloeNode *src = r->g->nodes[e->src];
    if (e->idx >= (uint32_t)src->num_outputs ||
        floe__node_set_input(n, e->input, (FloeOutput){src, (int)e->idx}, r->st) != FLOE_OK) {
      r->node = e->node;
      floe_status_clear(r->st);
      return fail_at(r, e->at, FLOE_DATA_LOSS,
                     "input %d of Merge '%s' (node %ld) refers to output %" PRIu32 " of '%s', "
                     "which it cannot take (no such output, or another dtype)",
                     e->input, n->name, e->node, e->idx, src->name);
    }
  }
  r->node = -1;
  r->name = NULL;
  if (!need(r, 4, "CRC-32 after the last node")) return false;
  if (r->len - r->pos > 4 && !r->newer_minor)
    return fail_at(r, r->pos, FLOE_DATA_LOSS,
                   "%zu unexpected bytes between the last node and the CRC-32",
                   r->len - r->pos - 4);
  return true;
}

/* Caller owns the graph. */
FloeGraph *floe_graph_deserialize(const void *buf, size_t len, const char *what,
                                  FloeStatus *status) {
  Reader r;
  memset(&r, 0, sizeof r);
  r.buf = buf;
  r.len = len;
  r.lim = len;
  r.what = what ? what : "<memory>";
  r.st = status;
  r.node = -1;
  if (!buf && len) {
    floe_status_set(status, FLOE_INVALID_ARGUMENT, "%s: buffer is NULL", r.what);
    return NULL;
  }
  if (!need(&r, 8, "magic")) return NULL;
  if (memcmp(buf, FORMAT_MAGIC, 8) != 0) {
    floe_status_set(status, FLOE_INVALID_ARGUMENT,
                    "%s: offset 0: not a Floe graph file (magic is not \"" FORMAT_MAGIC "\")",
                    r.what);
    return NULL;
  }
  r.pos = 8;
  if (!need(&r, 4, "format version")) return NULL;
  uint32_t version = get_u32(&r);
  uint32_t major = version >> 16, minor = version & 0xFFFF;
  if (major > FORMAT_MAJOR || major == 0) {
    floe_status_set(status, major ? FLOE_UNIMPLEMENTED : FLOE_DATA_LOSS,
                    "%s: offset 8: format version %" PRIu32 ".%" PRIu32 " %s (this reader "
                    "reads %u.x up to %u.%u)",
                    r.what, major, minor,
                    major ? "is newer than this Floe understands; upgrade Floe"
                          : "is not a valid version",
                    FORMAT_MAJOR, FORMAT_MAJOR, FORMAT_MINOR);
    return NULL;
  }
  r.newer_minor = minor > FORMAT_MINOR;
  if (!need(&r, 4, "node count")) return NULL;
  if (!read_graph(&r)) return NULL;
  const uint8_t *p = buf;
  uint32_t stored = (uint32_t)p[len - 4] | (uint32_t)p[len - 3] << 8 |
                    (uint32_t)p[len - 2] << 16 | (uint32_t)p[len - 1] << 24;
  uint32_t actual = crc32_of(p, len - 4);
  if (stored != actual) {
    floe_status_set(status, FLOE_DATA_LOSS,
                    "%s: offset %zu: CRC-32 mismatch (stored 0x%08" PRIx32 ", computed 0x%08"
                    PRIx32 "): the file is corrupt",
                    r.what, len - 4, stored, actual);
    return NULL;
  }
  FloeGraph *g = floe_graph_new();
  if (!g) {
    floe_status_set(status, FLOE_NO_MEMORY, "%s: out of memory creating the graph", r.what);
    return NULL;
  }
  if (g->error != FLOE_OK) {
    floe_status_set(status, g->error, "%s: %s", r.what, floe_graph_error(g, NULL));
    goto err_free_graph;
  }
  r.g = g;
  if (!read_graph(&r)) goto err_free_graph;
  floe__free(r.back);
  return g;

err_free_graph:
  floe__free(r.back);
  floe_graph_free(g);
  return NULL;
}

/* Caller owns the graph. */
FloeGraph *floe_graph_load(const char *path, FloeStatus *status) {
  if (!path) {
    floe_status_set(status, FLOE_INVALID_ARGUMENT, "load: path is NULL");
    return NULL;
  }
  uint8_t *buf;
  size_t len;
  if (floe__file_read_all(path, &buf, &len, status) != FLOE_OK) return NULL;
  FloeGraph *g = floe_graph_deserialize(buf, len, path, status);
  floe__free(buf);
  return g;
}
