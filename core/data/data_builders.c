/* SPDX-License-Identifier: Apache-2.0 */
/* data_builders.c - the SDK builders of floe_data.h: queues, their operations and readers,
 * each one node through floe_node_begin..finish (so the graph's sticky error and the op
 * definitions' checks apply as for any node).
 *
 * Dequeue and read builders need the element types: they take them from the node that made
 * the queue or reader (its attributes, or for an IDX reader its first file's header), so
 * user code names them once, where the queue or reader is made.
 */
#include <string.h>

#include "data.h"

static FloeOutput invalid(void) { return floe_out(NULL, 0); }

void floe_queue_options_init(FloeQueueOptions *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->kind = FLOE_QUEUE_FIFO;
  o->capacity = -1;
}

void floe_reader_options_init(FloeReaderOptions *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->num_epochs = 1;
}

/* container and shared_name when given. */
static void set_sharing(FloeNodeBuilder *b, const char *container, const char *shared_name) {
  if (container) floe_node_set_attr_string(b, "container", container);
  if (shared_name) floe_node_set_attr_string(b, "shared_name", shared_name);
}

/* ---- queues ---- */

FloeOutput floe_queue(FloeGraph *g, const char *name, const FloeDType *dtypes,
                      const FloeShape *shapes, int num_components,
                      const FloeQueueOptions *opts) {
  FloeQueueOptions o;
  floe_queue_options_init(&o);
  /* Only the fields the caller's struct covers (an older caller's is shorter). */
  if (opts && opts->struct_size) memcpy(&o, opts, opts->struct_size < sizeof o ? opts->struct_size : sizeof o);
  o.struct_size = sizeof o;
  static const char *const ops[] = {"FIFOQueueV2", "PaddingFIFOQueueV2", "RandomShuffleQueueV2"};
  if (!g) return invalid();
  if ((unsigned)o.kind > FLOE_QUEUE_RANDOM_SHUFFLE || num_components < 1 || !dtypes) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "floe_queue '%s': %s", name ? name : "queue",
                     num_components < 1 || !dtypes ? "give at least one component dtype"
                                                   : "unknown queue kind");
    return invalid();
  }
  FloeNodeBuilder *b = floe_node_begin(g, ops[o.kind], name);
  floe_node_set_attr_type_list(b, "component_types", dtypes, num_components);
  if (shapes) floe_node_set_attr_shape_list(b, "shapes", shapes, num_components);
  floe_node_set_attr_int(b, "capacity", o.capacity);
  if (o.kind == FLOE_QUEUE_RANDOM_SHUFFLE) {
    floe_node_set_attr_int(b, "min_after_dequeue", o.min_after_dequeue);
    floe_node_set_attr_int(b, "seed", o.seed);
  }
  set_sharing(b, o.container, o.shared_name);
  return floe_out(floe_node_finish(b), 0);
}

static FloeNode *enqueue(FloeGraph *g, const char *op, const char *name, FloeOutput queue,
                         const FloeOutput *components, int n) {
  FloeNodeBuilder *b = floe_node_begin(g, op, name);
  floe_node_add_input(b, queue);
  floe_node_add_input_list(b, components, n);
  return floe_node_finish(b);
}

FloeNode *floe_queue_enqueue(FloeGraph *g, const char *name, FloeOutput queue,
                             const FloeOutput *components, int n) {
  return enqueue(g, "QueueEnqueueV2", name, queue, components, n);
}

FloeNode *floe_queue_enqueue_many(FloeGraph *g, const char *name, FloeOutput queue,
                                  const FloeOutput *components, int n) {
  return enqueue(g, "QueueEnqueueManyV2", name, queue, components, n);
}

/* The component types of the queue node behind `queue`; NULL with the sticky error set. */
static const FloeAttrValue *queue_types(FloeGraph *g, const char *what, FloeOutput queue,
                                        int num_components) {
  if (!g || g->error != FLOE_OK) return NULL;
  const FloeAttrValue *t = queue.node ? floe__attrs_get(&queue.node->attrs, "component_types")
                                      : NULL;
  const char *op = queue.node ? queue.node->op->name : "";
  bool is_queue = strcmp(op, "FIFOQueueV2") == 0 || strcmp(op, "PaddingFIFOQueueV2") == 0 ||
                  strcmp(op, "RandomShuffleQueueV2") == 0;
  if (!t || t->kind != FLOE_ATTR_TYPE_LIST || !is_queue) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "%s: the queue must be an output of floe_queue (got %s%s%s)", what,
                     queue.node ? "node '" : "an invalid output",
                     queue.node ? queue.node->name : "", queue.node ? "'" : "");
    return NULL;
  }
  if ((size_t)num_components != t->u.tlist.n) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "%s: queue '%s' has %zu components; room for %d outputs was given", what,
                     queue.node->name, t->u.tlist.n, num_components);
    return NULL;
  }
  return t;
}

static FloeNode *dequeue(FloeGraph *g, const char *op, const char *name, FloeOutput queue,
                         const FloeOutput *n, FloeOutput *out, int num_components) {
  for (int i = 0; out && i < num_components; i++) out[i] = invalid();
  const FloeAttrValue *types = queue_types(g, op, queue, num_components);
  if (!types || !out) {
    if (types) floe__graph_fail(g, FLOE_INVALID_ARGUMENT, "%s: out is NULL", op);
    return NULL;
  }
  FloeNodeBuilder *b = floe_node_begin(g, op, name);
  floe_node_add_input(b, queue);
  if (n) floe_node_add_input(b, *n);
  floe_node_set_attr_type_list(b, "component_types", types->u.tlist.v, num_components);
  FloeNode *node = floe_node_finish(b);
  for (int i = 0; node && i < num_components; i++) out[i] = floe_out(node, i);
  return node;
}

FloeNode *floe_queue_dequeue(FloeGraph *g, const char *name, FloeOutput queue, FloeOutput *out,
                             int num_components) {
  return dequeue(g, "QueueDequeueV2", name, queue, NULL, out, num_components);
}

FloeNode *floe_queue_dequeue_many(FloeGraph *g, const char *name, FloeOutput queue,
                                  FloeOutput n, FloeOutput *out, int num_components) {
  return dequeue(g, "QueueDequeueManyV2", name, queue, &n, out, num_components);
}

FloeNode *floe_queue_dequeue_up_to(FloeGraph *g, const char *name, FloeOutput queue,
                                   FloeOutput n, FloeOutput *out, int num_components) {
  return dequeue(g, "QueueDequeueUpToV2", name, queue, &n, out, num_components);
}

FloeNode *floe_queue_close(FloeGraph *g, const char *name, FloeOutput queue,
                           int cancel_pending_enqueues) {
  FloeNodeBuilder *b = floe_node_begin(g, "QueueCloseV2", name);
  floe_node_add_input(b, queue);
  floe_node_set_attr_bool(b, "cancel_pending_enqueues", cancel_pending_enqueues);
  return floe_node_finish(b);
}

FloeOutput floe_queue_size(FloeGraph *g, const char *name, FloeOutput queue) {
  return floe_unary(g, "QueueSizeV2", name, queue);
}

FloeOutput floe_queue_is_closed(FloeGraph *g, const char *name, FloeOutput queue) {
  return floe_unary(g, "QueueIsClosedV2", name, queue);
}

/* ---- readers ---- */

static FloeNodeBuilder *reader_begin(FloeGraph *g, const char *op, const char *name,
                                     const char *files, const FloeReaderOptions *opts) {
  FloeReaderOptions o;
  floe_reader_options_init(&o);
  if (opts && opts->struct_size)
    memcpy(&o, opts, opts->struct_size < sizeof o ? opts->struct_size : sizeof o);
  FloeNodeBuilder *b = floe_node_begin(g, op, name);
  if (files) floe_node_set_attr_string(b, "files", files);
  floe_node_set_attr_int(b, "num_epochs", o.num_epochs);
  set_sharing(b, o.container, o.shared_name);
  return b;
}

FloeOutput floe_text_line_reader(FloeGraph *g, const char *name, const char *files,
                                 int64_t skip_header_lines, const FloeReaderOptions *opts) {
  FloeNodeBuilder *b = reader_begin(g, "TextLineReaderV2", name, files, opts);
  floe_node_set_attr_int(b, "skip_header_lines", skip_header_lines);
  return floe_out(floe_node_finish(b), 0);
}

FloeOutput floe_fixed_length_reader(FloeGraph *g, const char *name, const char *files,
                                    int64_t header_bytes, int64_t record_bytes,
                                    int64_t footer_bytes, int64_t hop_bytes, FloeDType dtype,
                                    FloeShape shape, const FloeReaderOptions *opts) {
  FloeNodeBuilder *b = reader_begin(g, "FixedLengthRecordReaderV2", name, files, opts);
  floe_node_set_attr_int(b, "header_bytes", header_bytes);
  floe_node_set_attr_int(b, "record_bytes", record_bytes);
  floe_node_set_attr_int(b, "footer_bytes", footer_bytes);
  floe_node_set_attr_int(b, "hop_bytes", hop_bytes);
  floe_node_set_attr_type(b, "dtype", dtype);
  floe_node_set_attr_shape(b, "shape", shape);
  return floe_out(floe_node_finish(b), 0);
}

FloeOutput floe_idx_reader(FloeGraph *g, const char *name, const char *files, int shuffle,
                           int64_t seed, int64_t max_records, const FloeReaderOptions *opts) {
  FloeNodeBuilder *b = reader_begin(g, "IdxRecordReader", name, files, opts);
  floe_node_set_attr_bool(b, "shuffle", shuffle);
  floe_node_set_attr_int(b, "seed", seed);
  floe_node_set_attr_int(b, "max_records", max_records);
  return floe_out(floe_node_finish(b), 0);
}

/* The dtype and shape of reader i's records, from its node. */
static bool record_type(FloeGraph *g, const char *what, int i, FloeOutput reader, FloeDType *dt,
                        FloeShape *shape) {
  const FloeNode *n = reader.node;
  const char *op = n ? n->op->name : "";
  const FloeAttrValue *v;
  if (strcmp(op, "TextLineReaderV2") == 0) {
    *dt = FLOE_U8;
    *shape = floe_shape_unknown();
    shape->rank = 1;
    shape->dims[0] = FLOE_DIM_UNKNOWN;
    return true;
  }
  if (strcmp(op, "FixedLengthRecordReaderV2") == 0) {
    v = floe__attrs_get(&n->attrs, "dtype");
    *dt = v && v->kind == FLOE_ATTR_TYPE ? v->u.type : FLOE_U8;
    v = floe__attrs_get(&n->attrs, "shape");
    *shape = v && v->kind == FLOE_ATTR_SHAPE ? v->u.shape : floe_shape_unknown();
    if (shape->rank < 0) {
      const FloeAttrValue *rb = floe__attrs_get(&n->attrs, "record_bytes");
      shape->rank = 1;
      shape->dims[0] = rb && rb->kind == FLOE_ATTR_INT ? rb->u.i / (int64_t)floe_dtype_size(*dt) : -1;
    }
    return true;
  }
  if (strcmp(op, "IdxRecordReader") == 0) {
    v = floe__attrs_get(&n->attrs, "files");
    const char *files = v && v->kind == FLOE_ATTR_STRING ? v->u.s : "";
    const char *semi = strchr(files, ';');
    char *first = floe__strndup(files, semi ? (size_t)(semi - files) : strlen(files));
    FloeStatus st = {FLOE_OK, NULL};
    FloeIdxInfo info;
    floe_code rc = first ? floe__idx_read_file(first, &info, NULL, &st)
                         : floe_status_set(&st, FLOE_NO_MEMORY, "out of memory");
    floe__free(first);
    if (rc != FLOE_OK) {
      floe__graph_fail(g, rc, "%s: the records of IDX reader '%s' take their type from its "
                       "first file: %s", what, n->name, floe_status_message(&st));
      floe_status_clear(&st);
      return false;
    }
    *dt = info.dtype;
    *shape = floe_shape_make(info.rank - 1, info.dims + 1);
    return true;
  }
  floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                   "%s: reader %d must be an output of a reader builder (floe_idx_reader, "
                   "...), got %s%s%s", what, i, n ? "node '" : "an invalid output",
                   n ? n->name : "", n ? "'" : "");
  return false;
}

static FloeNode *read_node(FloeGraph *g, const char *op, const char *name, const FloeOutput *readers,
                      int n, const FloeOutput *num_records, FloeOutput *values) {
  for (int i = 0; values && i < n; i++) values[i] = invalid();
  if (!g || g->error != FLOE_OK) return NULL;
  if (n < 1 || !readers || !values) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT, "%s: give at least one reader and room for its "
                     "values", op);
    return NULL;
  }
  FloeDType *dts = floe__malloc((size_t)n * sizeof *dts);
  FloeShape *shapes = floe__malloc((size_t)n * sizeof *shapes);
  FloeNode *node = NULL;
  if (!dts || !shapes) {
    floe__graph_fail(g, FLOE_NO_MEMORY, "%s: out of memory", op);
    goto out;
  }
  for (int i = 0; i < n; i++)
    if (!record_type(g, op, i, readers[i], &dts[i], &shapes[i])) goto out;
  FloeNodeBuilder *b = floe_node_begin(g, op, name);
  floe_node_add_input_list(b, readers, n);
  if (num_records) floe_node_add_input(b, *num_records);
  floe_node_set_attr_type_list(b, "dtypes", dts, n);
  floe_node_set_attr_shape_list(b, "shapes", shapes, n);
  node = floe_node_finish(b);
  for (int i = 0; node && i < n; i++) values[i] = floe_out(node, 1 + i);
out:
  floe__free(dts);
  floe__free(shapes);
  return node;
}

FloeOutput floe_reader_read(FloeGraph *g, const char *name, const FloeOutput *readers, int n,
                            FloeOutput *values) {
  return floe_out(read_node(g, "ReaderRead", name, readers, n, NULL, values), 0);
}

FloeOutput floe_reader_read_up_to(FloeGraph *g, const char *name, const FloeOutput *readers,
                                  int n, FloeOutput num_records, FloeOutput *values) {
  return floe_out(read_node(g, "ReaderReadUpTo", name, readers, n, &num_records, values), 0);
}

FloeNode *floe_reader_seek(FloeGraph *g, const char *name, const FloeOutput *readers, int n,
                           FloeOutput epoch, FloeOutput record) {
  FloeNodeBuilder *b = floe_node_begin(g, "ReaderSeek", name);
  floe_node_add_input_list(b, readers, n);
  floe_node_add_input(b, epoch);
  floe_node_add_input(b, record);
  return floe_node_finish(b);
}
