/* SPDX-License-Identifier: Apache-2.0 */
/* ops_shape_data.c - shape functions of queues and readers (ops_data.def).
 *
 * Each reads the node (attributes, producers of its inputs) and sctx->input_shapes, and
 * writes every sctx->output_shapes entry. Unknown dims (-1) and unknown ranks propagate;
 * only a definite mismatch is an error, whose message names the shapes or attribute. */
#include <stdio.h>
#include <string.h>

#include "ops_shape.h"
#include "ops_shape_util.h"

/* ---- queues and readers (ops_data.def) ---- */

static bool is_queue_op(const FloeNode *n) {
  return n && n->op &&
         (strcmp(n->op->name, "FIFOQueueV2") == 0 ||
          strcmp(n->op->name, "PaddingFIFOQueueV2") == 0 ||
          strcmp(n->op->name, "RandomShuffleQueueV2") == 0);
}

floe_code floe__shape_queue(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeAttrValue *types = attr_of(sctx, "component_types", FLOE_ATTR_TYPE_LIST);
  const FloeAttrValue *shapes = attr_of(sctx, "shapes", FLOE_ATTR_SHAPE_LIST);
  size_t nc = types ? types->u.tlist.n : 0, ns = shapes ? shapes->u.slist.n : 0;
  bool padding = strcmp(op_name(sctx), "PaddingFIFOQueueV2") == 0;
  if (ns != 0 && ns != nc)
    return fail(sctx, "%zu shapes for %zu component types: give one shape per component, or "
                      "none", ns, nc);
  if (padding && ns == 0)
    return fail(sctx, "a PaddingFIFOQueueV2 needs one shape per component (dims may be -1: "
                      "they are padded)");
  for (size_t i = 0; i < ns; i++) {
    const FloeShape *s = &shapes->u.slist.v[i];
    if (padding && s->rank < 0)
      return fail(sctx, "shapes[%zu] has an unknown rank: a PaddingFIFOQueueV2 pads dims, "
                        "so it needs each component's rank", i);
    if (!padding && !fully_known(s))
      return fail(sctx, "shapes[%zu] = %s is not fully defined: a %s stores whole shapes "
                        "(a PaddingFIFOQueueV2 takes unknown dims)", i, SHAPE_STR(*s),
                  op_name(sctx));
  }
  int64_t cap = attr_int(sctx, "capacity", -1), min_after = attr_int(sctx, "min_after_dequeue", 0);
  if (cap == 0 || cap < -1)
    return fail(sctx, "capacity %lld: give a size >= 1, or -1 for an unbounded queue",
                (long long)cap);
  if (min_after < 0 || (cap > 0 && min_after >= cap))
    return fail(sctx, "min_after_dequeue %lld must be >= 0 and below the capacity %lld (a "
                      "dequeue waits for more than min_after_dequeue elements)",
                (long long)min_after, (long long)cap);
  sctx->output_shapes[0] = floe_shape_scalar();
  return FLOE_OK;
}

/* timeout_ms other than -1 (wait until done, closed or cancelled) is not implemented. */
static floe_code check_timeout(FloeShapeContext *sctx) {
  int64_t t = attr_int(sctx, "timeout_ms", -1);
  if (t == -1) return FLOE_OK;
  return floe_status_set(sctx->status, FLOE_UNIMPLEMENTED,
                         "timeout_ms = %lld: only -1 is implemented (a blocked queue operation "
                         "ends when it completes, when the queue closes or when its run is "
                         "cancelled: give the run a timeout with floe_session_run_opts)",
                         (long long)t);
}

/* Checks components against the queue op feeding input 0, when it is one; many: each
 * component is [n, element...]. */
floe_code floe__shape_queue_enqueue(const FloeHostApi *host, FloeShapeContext *sctx) {
  floe_code c = check_timeout(sctx);
  if (c != FLOE_OK) return c;
  bool many = strcmp(op_name(sctx), "QueueEnqueueManyV2") == 0;
  int nc = sctx->node->num_inputs - 1;
  int64_t n = -1;
  for (int i = 0; many && i < nc; i++) {
    const FloeShape *s = &sctx->input_shapes[1 + i];
    if (s->rank == 0)
      return fail(sctx, "component %d is a scalar: enqueue_many takes [n, ...] components "
                        "(n elements)", i);
    if (s->rank > 0 && !merge_dim(n, s->dims[0], &n))
      return fail(sctx, "component %d has %lld elements (shape %s) but an earlier one has "
                        "%lld: every component needs the same first dimension", i,
                  (long long)s->dims[0], SHAPE_STR(*s), (long long)n);
  }
  const FloeNode *q = producer(sctx, 0);
  if (!is_queue_op(q)) return FLOE_OK;
  const FloeAttrValue *types = floe__attrs_get(&q->attrs, "component_types");
  const FloeAttrValue *shapes = floe__attrs_get(&q->attrs, "shapes");
  if (!types || types->kind != FLOE_ATTR_TYPE_LIST || (size_t)nc != types->u.tlist.n)
    return fail(sctx, "queue '%s' has %zu components; got %d", q->name,
                types ? types->u.tlist.n : 0, nc);
  for (int i = 0; i < nc; i++) {
    FloeDType dt = sctx->node->inputs[1 + i].node->out_dtypes[sctx->node->inputs[1 + i].index];
    if (dt != types->u.tlist.v[i])
      return fail(sctx, "queue '%s': component %d is %s, expected %s", q->name, i,
                  floe_dtype_name(dt), floe_dtype_name(types->u.tlist.v[i]));
    if (!shapes || shapes->kind != FLOE_ATTR_SHAPE_LIST || shapes->u.slist.n == 0) continue;
    FloeShape got = sctx->input_shapes[1 + i];
    if (many && got.rank > 0) {
      memmove(got.dims, got.dims + 1, (size_t)(got.rank - 1) * sizeof got.dims[0]);
      got.rank--;
    }
    if (!shapes_compatible(&got, &shapes->u.slist.v[i]))
      return fail(sctx, "queue '%s': component %d has %sshape %s, expected %s", q->name, i,
                  many ? "element " : "", SHAPE_STR(got), SHAPE_STR(shapes->u.slist.v[i]));
  }
  return FLOE_OK;
}

/* The queue's element shapes (from the queue op feeding input 0), with a leading batch
 * dim for many / up_to. */
floe_code floe__shape_queue_dequeue(const FloeHostApi *host, FloeShapeContext *sctx) {
  floe_code c = check_timeout(sctx);
  if (c != FLOE_OK) return c;
  const char *op = op_name(sctx);
  bool batched = strcmp(op, "QueueDequeueV2") != 0;
  int64_t n = -1;
  if (batched && sctx->input_shapes[1].rank > 0)
    return fail(sctx, "n must be a scalar, got shape %s", SHAPE_STR(sctx->input_shapes[1]));
  if (batched && const_scalar(sctx, 1, &n) && n < 0)
    return fail(sctx, "n = %lld: dequeue at least 0 elements", (long long)n);
  if (strcmp(op, "QueueDequeueUpToV2") == 0) n = -1; /* fewer at the end */
  const FloeNode *q = producer(sctx, 0);
  const FloeAttrValue *types =
      is_queue_op(q) ? floe__attrs_get(&q->attrs, "component_types") : NULL;
  const FloeAttrValue *shapes = is_queue_op(q) ? floe__attrs_get(&q->attrs, "shapes") : NULL;
  const FloeAttrValue *mine = attr_of(sctx, "component_types", FLOE_ATTR_TYPE_LIST);
  if (types && mine && !floe__attr_value_equal(types, mine)) {
    char a[128], b[128];
    return fail(sctx, "component_types %s differ from those of queue '%s', %s",
                floe__attr_value_str(mine, a, sizeof a), q->name,
                floe__attr_value_str(types, b, sizeof b));
  }
  for (int i = 0; i < sctx->node->num_outputs; i++) {
    FloeShape s = unknown_rank();
    if (shapes && shapes->kind == FLOE_ATTR_SHAPE_LIST && (size_t)i < shapes->u.slist.n)
      s = shapes->u.slist.v[i];
    if (batched) {
      if (s.rank >= 0 && s.rank < FLOE_MAX_DIMS) {
        memmove(s.dims + 1, s.dims, (size_t)s.rank * sizeof s.dims[0]);
        s.rank++;
        s.dims[0] = n;
      } else {
        s = unknown_rank();
      }
    }
    sctx->output_shapes[i] = s;
  }
  return FLOE_OK;
}

floe_code floe__shape_reader(const FloeHostApi *host, FloeShapeContext *sctx) {
  const char *files = attr_string(sctx, "files", "");
  if (!files[0]) return fail(sctx, "files is empty: give one or more paths separated by ';'");
  if (attr_int(sctx, "num_epochs", 1) < 0)
    return fail(sctx, "num_epochs %lld: give 1 or more (0: read the files again without end)",
                (long long)attr_int(sctx, "num_epochs", 1));
  if (attr_int(sctx, "skip_header_lines", 0) < 0 || attr_int(sctx, "max_records", -1) < -1)
    return fail(sctx, "skip_header_lines must be >= 0 and max_records >= -1");
  if (strcmp(op_name(sctx), "FixedLengthRecordReaderV2") == 0) {
    int64_t rb = attr_int(sctx, "record_bytes", 0), hb = attr_int(sctx, "header_bytes", 0);
    int64_t fb = attr_int(sctx, "footer_bytes", 0), hop = attr_int(sctx, "hop_bytes", 0);
    if (rb < 1 || hb < 0 || fb < 0 || hop < 0)
      return fail(sctx, "record_bytes %lld must be >= 1 and header_bytes %lld, footer_bytes "
                        "%lld, hop_bytes %lld >= 0", (long long)rb, (long long)hb,
                  (long long)fb, (long long)hop);
    const FloeAttrValue *dt = attr_of(sctx, "dtype", FLOE_ATTR_TYPE);
    const FloeAttrValue *sh = attr_of(sctx, "shape", FLOE_ATTR_SHAPE);
    size_t es = dt ? floe_dtype_size(dt->u.type) : 1;
    if (sh && sh->u.shape.rank >= 0) {
      int64_t k;
      if (!fully_known(&sh->u.shape) || !known_product(&sh->u.shape, &k))
        return fail(sctx, "shape %s is not fully defined: a record is record_bytes bytes",
                    SHAPE_STR(sh->u.shape));
      if (k * (int64_t)es != rb)
        return fail(sctx, "shape %s of %s is %lld bytes, but record_bytes is %lld",
                    SHAPE_STR(sh->u.shape), dt ? floe_dtype_name(dt->u.type) : "u8",
                    (long long)(k * (int64_t)es), (long long)rb);
    } else if (es == 0 || rb % (int64_t)es != 0) {
      return fail(sctx, "record_bytes %lld is not a whole number of %s elements",
                  (long long)rb, dt ? floe_dtype_name(dt->u.type) : "u8");
    }
  }
  sctx->output_shapes[0] = floe_shape_scalar();
  return FLOE_OK;
}

floe_code floe__shape_reader_read(const FloeHostApi *host, FloeShapeContext *sctx) {
  const FloeAttrValue *types = attr_of(sctx, "dtypes", FLOE_ATTR_TYPE_LIST);
  const FloeAttrValue *shapes = attr_of(sctx, "shapes", FLOE_ATTR_SHAPE_LIST);
  int64_t nr = attr_int(sctx, "N", 1);
  size_t nt = types ? types->u.tlist.n : 0, ns = shapes ? shapes->u.slist.n : 0;
  if ((int64_t)nt != nr)
    return fail(sctx, "%zu dtypes for %lld readers: give one per reader", nt, (long long)nr);
  if (ns != 0 && ns != nt)
    return fail(sctx, "%zu shapes for %lld readers: give one per reader, or none", ns,
                (long long)nr);
  bool up_to = strcmp(op_name(sctx), "ReaderReadUpTo") == 0;
  if (up_to && sctx->input_shapes[nr].rank > 0)
    return fail(sctx, "num_records must be a scalar, got shape %s",
                SHAPE_STR(sctx->input_shapes[nr]));
  sctx->output_shapes[0] = up_to ? unknown_dims(1) : floe_shape_scalar();
  for (size_t i = 0; i < nt; i++) {
    FloeShape s = i < ns ? shapes->u.slist.v[i] : unknown_rank();
    if (up_to) {
      if (s.rank >= 0 && s.rank < FLOE_MAX_DIMS) {
        memmove(s.dims + 1, s.dims, (size_t)s.rank * sizeof s.dims[0]);
        s.rank++;
        s.dims[0] = -1;
      } else {
        s = unknown_rank();
      }
    }
    sctx->output_shapes[1 + i] = s;
  }
  return FLOE_OK;
}
