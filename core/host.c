/* SPDX-License-Identifier: Apache-2.0 */
/* host.c - the FloeHostApi table: every core service a plugin may use (ABI rule 1).
 *
 * The accessors work on the internal structs of internal.h. Everything a kernel reports
 * (allocation failures, ctx_set_error) lands in the context's status, prefixed with the
 * node's name and op so the user sees which node failed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core.h"

/* ------------------------------------------------------------------------------------ */
/* Logging: silent unless FLOE_LOG_LEVEL names a level (error, warning, info, debug, 0-3). */

static int log_threshold = -1;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static void log_read_env(void) {
  const char *v = getenv("FLOE_LOG_LEVEL");
  static const char *const names[] = {"error", "warning", "info", "debug"};
  if (!v || !*v) return;
  for (int i = 0; i < (int)FLOE__ARRAY_LEN(names); i++)
    if (strcasecmp(v, names[i]) == 0 || (v[0] == '0' + i && v[1] == '\0')) log_threshold = i;
  if (strcasecmp(v, "warn") == 0) log_threshold = FLOE_LOG_WARNING;
}

static void host_log(FloeLogLevel level, const char *fmt, ...) FLOE__PRINTF(2, 3);
static void host_log(FloeLogLevel level, const char *fmt, ...) {
  static const char *const tags[] = {"error", "warning", "info", "debug"};
  pthread_once(&log_once, log_read_env);
  if ((int)level > log_threshold || (int)level < 0) return;
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  /* One fprintf per line so lines of concurrent kernels do not interleave. */
  fprintf(stderr, "floe %s: %s\n", tags[level], line);
}

/* ------------------------------------------------------------------------------------ */
/* Memory and tensors. */

static void *host_alloc(size_t bytes) { return floe__malloc(bytes); }
static void host_free(void *p) { floe__free(p); }

static FloeDType host_tensor_dtype(const FloeTensor *t) { return t ? t->dtype : FLOE_DTYPE_INVALID; }
static int host_tensor_rank(const FloeTensor *t) { return t ? t->rank : 0; }
static const int64_t *host_tensor_dims(const FloeTensor *t) { return t ? t->dims : NULL; }
static int64_t host_tensor_num_elements(const FloeTensor *t) { return t ? t->num_elements : 0; }
static size_t host_tensor_nbytes(const FloeTensor *t) { return t ? t->nbytes : 0; }

/* Device address: kernels of a non-host device get their own memory's pointer. */
static void *host_tensor_data(const FloeTensor *t) {
  if (!t || !t->buf) return NULL;
  return (char *)t->buf->data + t->offset;
}

static void host_tensor_retain(FloeTensor *t) { floe_tensor_retain(t); }
static void host_tensor_release(FloeTensor *t) { floe_tensor_release(t); }
static size_t host_dtype_size(FloeDType dt) { return floe_dtype_size(dt); }
static const char *host_dtype_name(FloeDType dt) { return floe_dtype_name(dt); }

/* ------------------------------------------------------------------------------------ */
/* Attributes. */

static const FloeAttrValue *attr_of(const FloeAttrs *a, const char *name, FloeAttrKind kind,
                                    floe_code *rc) {
  const FloeAttrValue *v = (a && name) ? floe__attrs_get(a, name) : NULL;
  if (!v) {
    *rc = (a && name) ? FLOE_NOT_FOUND : FLOE_INVALID_ARGUMENT;
    return NULL;
  }
  if (v->kind != kind) {
    *rc = FLOE_INVALID_ARGUMENT;
    return NULL;
  }
  *rc = FLOE_OK;
  return v;
}

static floe_code host_attr_int(const FloeAttrs *a, const char *name, int64_t *out) {
  floe_code rc;
  const FloeAttrValue *v = attr_of(a, name, FLOE_ATTR_INT, &rc);
  if (v && out) *out = v->u.i;
  return rc;
}

static floe_code host_attr_float(const FloeAttrs *a, const char *name, double *out) {
  floe_code rc;
  const FloeAttrValue *v = attr_of(a, name, FLOE_ATTR_FLOAT, &rc);
  if (v && out) *out = v->u.f;
  return rc;
}

static floe_code host_attr_bool(const FloeAttrs *a, const char *name, int *out) {
  floe_code rc;
  const FloeAttrValue *v = attr_of(a, name, FLOE_ATTR_BOOL, &rc);
  if (v && out) *out = v->u.b;
  return rc;
}

static floe_code host_attr_type(const FloeAttrs *a, const char *name, FloeDType *out) {
  floe_code rc;
  const FloeAttrValue *v = attr_of(a, name, FLOE_ATTR_TYPE, &rc);
  if (v && out) *out = v->u.type;
  return rc;
}

static floe_code host_attr_string(const FloeAttrs *a, const char *name, const char **out) {
  floe_code rc;
  const FloeAttrValue *v = attr_of(a, name, FLOE_ATTR_STRING, &rc);
  if (v && out) *out = v->u.s;
  return rc;
}

static floe_code host_attr_shape(const FloeAttrs *a, const char *name, FloeShape *out) {
  floe_code rc;
  const FloeAttrValue *v = attr_of(a, name, FLOE_ATTR_SHAPE, &rc);
  if (v && out) *out = v->u.shape;
  return rc;
}

static floe_code host_attr_tensor(const FloeAttrs *a, const char *name, const FloeTensor **out) {
  floe_code rc;
  const FloeAttrValue *v = attr_of(a, name, FLOE_ATTR_TENSOR, &rc);
  if (v && out) *out = v->u.tensor;
  return rc;
}

static floe_code host_attr_int_list(const FloeAttrs *a, const char *name, const int64_t **out,
                                    size_t *n) {
  floe_code rc;
  const FloeAttrValue *v = attr_of(a, name, FLOE_ATTR_INT_LIST, &rc);
  if (v && out) *out = v->u.ilist.v;
  if (v && n) *n = v->u.ilist.n;
  return rc;
}

static floe_code host_attr_float_list(const FloeAttrs *a, const char *name, const double **out,
                                      size_t *n) {
  floe_code rc;
  const FloeAttrValue *v = attr_of(a, name, FLOE_ATTR_FLOAT_LIST, &rc);
  if (v && out) *out = v->u.flist.v;
  if (v && n) *n = v->u.flist.n;
  return rc;
}

static floe_code host_attr_type_list(const FloeAttrs *a, const char *name, const FloeDType **out,
                                     size_t *n) {
  floe_code rc;
  const FloeAttrValue *v = attr_of(a, name, FLOE_ATTR_TYPE_LIST, &rc);
  if (v && out) *out = v->u.tlist.v;
  if (v && n) *n = v->u.tlist.n;
  return rc;
}

/* ------------------------------------------------------------------------------------ */
/* Node helpers shared by kernel construction, invocation and shape functions. */

static FloeDType node_input_dtype(const FloeNode *n, int i) {
  if (!n || i < 0 || i >= n->num_inputs || !n->inputs[i].node) return FLOE_DTYPE_INVALID;
  const FloeNode *src = n->inputs[i].node;
  int k = n->inputs[i].index;
  return (k >= 0 && k < src->num_outputs) ? src->out_dtypes[k] : FLOE_DTYPE_INVALID;
}

static FloeDType node_output_dtype(const FloeNode *n, int i) {
  return (n && i >= 0 && i < n->num_outputs) ? n->out_dtypes[i] : FLOE_DTYPE_INVALID;
}

/* Set status to "node 'name' (Op): message". */
static floe_code node_vfail(FloeStatus *st, const FloeNode *n, floe_code code, const char *fmt,
                            va_list ap) {
  if (!st) return code;
  char *m = floe__vasprintf(fmt, ap);
  if (!m) return floe_status_set(st, code, "%s", floe_code_message(code));
  if (n)
    floe_status_set(st, code, "node '%s' (%s): %s", n->name, n->op->name, m);
  else
    floe_status_set(st, code, "%s", m);
  floe__free(m);
  return code;
}

static floe_code node_fail(FloeStatus *st, const FloeNode *n, floe_code code, const char *fmt, ...)
    FLOE__PRINTF(4, 5);
static floe_code node_fail(FloeStatus *st, const FloeNode *n, floe_code code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  node_vfail(st, n, code, fmt, ap);
  va_end(ap);
  return code;
}

/* ------------------------------------------------------------------------------------ */
/* Kernel construction. */

static const FloeAttrs *host_init_attrs(const FloeKernelInit *init) { return &init->node->attrs; }
static const char *host_init_node_name(const FloeKernelInit *init) { return init->node->name; }
static int host_init_num_inputs(const FloeKernelInit *init) { return init->node->num_inputs; }
static FloeDType host_init_input_dtype(const FloeKernelInit *init, int i) {
  return node_input_dtype(init->node, i);
}
static int host_init_num_outputs(const FloeKernelInit *init) { return init->node->num_outputs; }
static FloeDType host_init_output_dtype(const FloeKernelInit *init, int i) {
  return node_output_dtype(init->node, i);
}
static void *host_init_device_state(const FloeKernelInit *init) {
  return init->device ? init->device->fns.state : NULL;
}

static floe_code host_init_set_error(FloeKernelInit *init, floe_code code, const char *fmt, ...)
    FLOE__PRINTF(3, 4);
static floe_code host_init_set_error(FloeKernelInit *init, floe_code code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  node_vfail(init->status, init->node, code, fmt, ap);
  va_end(ap);
  return code;
}

/* ------------------------------------------------------------------------------------ */
/* Kernel invocation. */

static const FloeAttrs *host_ctx_attrs(const FloeKernelContext *ctx) { return &ctx->node->attrs; }
static const char *host_ctx_node_name(const FloeKernelContext *ctx) { return ctx->node->name; }
static const char *host_ctx_op(const FloeKernelContext *ctx) { return ctx->node->op->name; }
static int host_ctx_num_inputs(const FloeKernelContext *ctx) { return ctx->num_inputs; }
static const FloeTensor *host_ctx_input(const FloeKernelContext *ctx, int i) {
  return (i >= 0 && i < ctx->num_inputs) ? ctx->inputs[i] : NULL;
}
static int host_ctx_num_outputs(const FloeKernelContext *ctx) { return ctx->num_outputs; }
static FloeDType host_ctx_output_dtype(const FloeKernelContext *ctx, int i) {
  return node_output_dtype(ctx->node, i);
}

static floe_code check_output_index(FloeKernelContext *ctx, int i, const char *what) {
  if (i >= 0 && i < ctx->num_outputs) return FLOE_OK;
  return node_fail(ctx->status, ctx->node, FLOE_OUT_OF_RANGE,
                   "%s: output %d out of range (the node has %d outputs)", what, i,
                   ctx->num_outputs);
}

/* Replace output i by t (takes over the caller's reference). */
static void set_output_ref(FloeKernelContext *ctx, int i, FloeTensor *t) {
  floe_tensor_release(ctx->outputs[i]);
  ctx->outputs[i] = t;
}

static floe_code host_ctx_allocate_output(FloeKernelContext *ctx, int i, int rank,
                                          const int64_t *dims, FloeTensor **out) {
  floe_code rc = check_output_index(ctx, i, "allocate_output");
  if (rc != FLOE_OK) return rc;
  FloeStatus st = {FLOE_OK, NULL};
  /* its place in a Concat's output, where the executor gave it one */
  FloeTensor *t = floe__exec_placed_output(ctx, i, rank, dims);
  if (!t) t = floe__tensor_alloc(ctx->device, ctx->node->out_dtypes[i], rank, dims, &st);
  if (!t) {
    rc = node_fail(ctx->status, ctx->node, st.code, "output %d: %s", i, floe_status_message(&st));
    floe_status_clear(&st);
    return rc;
  }
  set_output_ref(ctx, i, t);
  if (out) *out = t;
  return FLOE_OK;
}

/* *src = the input a forward_input* call views, checked to be in range and of the output's
 * dtype (else the error is recorded and returned). */
static floe_code forward_source(FloeKernelContext *ctx, int input, int output, const char *what,
                                FloeTensor **src) {
  floe_code rc = check_output_index(ctx, output, what);
  if (rc != FLOE_OK) return rc;
  if (input < 0 || input >= ctx->num_inputs || !ctx->inputs[input])
    return node_fail(ctx->status, ctx->node, FLOE_OUT_OF_RANGE,
                     "%s: input %d out of range (the node has %d inputs)", what, input,
                     ctx->num_inputs);
  *src = ctx->inputs[input];
  if ((*src)->dtype != ctx->node->out_dtypes[output])
    return node_fail(ctx->status, ctx->node, FLOE_INVALID_ARGUMENT,
                     "%s: input %d is %s but output %d is %s", what, input,
                     floe_dtype_name((*src)->dtype), output,
                     floe_dtype_name(ctx->node->out_dtypes[output]));
  return FLOE_OK;
}

/* Makes output `output` the view t (NULL: st says why, reported as "what in -> out"). */
static floe_code set_forwarded(FloeKernelContext *ctx, int input, int output, const char *what,
                               FloeTensor *t, FloeStatus *st) {
  if (!t) {
    floe_code rc = node_fail(ctx->status, ctx->node, st->code, "%s %d -> %d: %s", what, input,
                             output, floe_status_message(st));
    floe_status_clear(st);
    return rc;
  }
  set_output_ref(ctx, output, t);
  return FLOE_OK;
}

static floe_code host_ctx_forward_input(FloeKernelContext *ctx, int input, int output, int rank,
                                        const int64_t *dims) {
  FloeTensor *src = NULL;
  floe_code rc = forward_source(ctx, input, output, "forward_input", &src);
  if (rc != FLOE_OK) return rc;
  FloeStatus st = {FLOE_OK, NULL};
  return set_forwarded(ctx, input, output, "forward_input",
                       floe__tensor_view(src, rank, dims, &st), &st);
}

static floe_code host_ctx_forward_input_slice(FloeKernelContext *ctx, int input, int output,
                                              size_t byte_offset, int rank,
                                              const int64_t *dims) {
  FloeTensor *src = NULL;
  floe_code rc = forward_source(ctx, input, output, "forward_input_slice", &src);
  if (rc != FLOE_OK) return rc;
  FloeStatus st = {FLOE_OK, NULL};
  /* Beyond INT64_MAX is out of range of any tensor: map it to -1 so the bounds check says so. */
  int64_t off = byte_offset > (size_t)INT64_MAX ? -1 : (int64_t)byte_offset;
  return set_forwarded(ctx, input, output, "forward_input_slice",
                       floe__tensor_slice_view(src, off, rank, dims, &st), &st);
}

static floe_code host_ctx_reuse_input(FloeKernelContext *ctx, int input, int output, int rank,
                                      const int64_t *dims, FloeTensor **out) {
  *out = NULL;
  floe_code rc = check_output_index(ctx, output, "reuse_input");
  if (rc != FLOE_OK) return rc;
  if (input < 0 || input >= ctx->num_inputs)
    return node_fail(ctx->status, ctx->node, FLOE_OUT_OF_RANGE,
                     "reuse_input: input %d out of range (the node has %d inputs)", input,
                     ctx->num_inputs);
  if (!floe__exec_may_reuse(ctx, input)) return FLOE_NOT_FOUND;
  FloeTensor *t = ctx->inputs[input];
  /* t->rank is valid, so an equal rank bounds the comparison */
  if (t->dtype != ctx->node->out_dtypes[output] || t->rank != rank ||
      (rank && memcmp(t->dims, dims, (size_t)rank * sizeof *dims) != 0))
    return FLOE_NOT_FOUND;
  floe_tensor_retain(t);
  set_output_ref(ctx, output, t);
  *out = t;
  return FLOE_OK;
}

static floe_code host_ctx_set_output(FloeKernelContext *ctx, int i, FloeTensor *t) {
  floe_code rc = check_output_index(ctx, i, "set_output");
  if (rc != FLOE_OK) return rc;
  if (!t)
    return node_fail(ctx->status, ctx->node, FLOE_INVALID_ARGUMENT, "set_output %d: tensor is NULL", i);
  if (t->dtype != ctx->node->out_dtypes[i])
    return node_fail(ctx->status, ctx->node, FLOE_INVALID_ARGUMENT,
                     "set_output %d: tensor is %s but the output is %s", i,
                     floe_dtype_name(t->dtype), floe_dtype_name(ctx->node->out_dtypes[i]));
  FloeDevice *where = floe__tensor_device(t);
  bool ok = where == ctx->device || t->nbytes == 0 ||
            (floe__tensor_on_host(t) && (!ctx->device || ctx->device->host_memory));
  if (!ok)
    return node_fail(ctx->status, ctx->node, FLOE_INVALID_ARGUMENT,
                     "set_output %d: the tensor lives on %s, not on the kernel's device %s", i,
                     floe_tensor_device_name(t), ctx->device ? ctx->device->short_name : "host");
  floe_tensor_retain(t);
  set_output_ref(ctx, i, t);
  return FLOE_OK;
}

static floe_code host_ctx_allocate_temp(FloeKernelContext *ctx, size_t bytes, void **out) {
  return floe__kernel_ctx_allocate_temp(ctx, bytes, out);
}

static floe_code host_ctx_set_error(FloeKernelContext *ctx, floe_code code, const char *fmt, ...)
    FLOE__PRINTF(3, 4);
static floe_code host_ctx_set_error(FloeKernelContext *ctx, floe_code code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  node_vfail(ctx->status, ctx->node, code, fmt, ap);
  va_end(ap);
  return code;
}

static void *host_ctx_device_state(const FloeKernelContext *ctx) {
  return ctx->device ? ctx->device->fns.state : NULL;
}
static int64_t host_ctx_step_id(const FloeKernelContext *ctx) { return ctx->step_id; }
static void host_ctx_report_device_time(FloeKernelContext *ctx, int64_t ns) {
  if (ctx && ns > 0) ctx->device_ns = ns;
}
static int host_ctx_cancelled(const FloeKernelContext *ctx) {
  return ctx->step && floe__exec_step_cancelled(ctx->step);
}

/* ------------------------------------------------------------------------------------ */
/* Thread pool: the executor names the pool of the running step; other callers (a plugin's
 * own thread, a test) use the default runtime's pool when it exists, else run inline. */

static FloeThreadPool *current_pool(void) {
  FloeThreadPool *p = floe__pool_current();
  return p ? p : floe__runtime_default_pool();
}

static void host_parallel_for(int64_t n, int64_t cost_per_unit, FloeParallelFn fn, void *arg) {
  if (n <= 0 || !fn) return;
  FloeThreadPool *p = current_pool();
  if (p)
    floe__pool_parallel_for(p, n, cost_per_unit, fn, arg);
  else
    fn(arg, 0, n);
}

static int host_num_threads(void) {
  FloeThreadPool *p = current_pool();
  return p ? floe__pool_size(p) : 1;
}

static floe_code host_schedule(FloeTaskFn fn, void *arg) {
  if (!fn) return FLOE_INVALID_ARGUMENT;
  FloeThreadPool *p = current_pool();
  if (p) return floe__pool_schedule(p, fn, arg);
  fn(arg);
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Shape functions. */

static const FloeAttrs *host_shape_attrs(const FloeShapeContext *s) { return &s->node->attrs; }
static const char *host_shape_node_name(const FloeShapeContext *s) { return s->node->name; }
static int host_shape_num_inputs(const FloeShapeContext *s) { return s->node->num_inputs; }

static FloeShape host_shape_input(const FloeShapeContext *s, int i) {
  if (i < 0 || i >= s->node->num_inputs) return floe_shape_unknown();
  return s->input_shapes[i];
}

static FloeDType host_shape_input_dtype(const FloeShapeContext *s, int i) {
  return node_input_dtype(s->node, i);
}

/* Only a Const's value is known while the graph is built. */
static const FloeTensor *host_shape_input_value(const FloeShapeContext *s, int i) {
  if (i < 0 || i >= s->node->num_inputs || !s->node->inputs[i].node) return NULL;
  const FloeNode *src = s->node->inputs[i].node;
  if (strcmp(src->op->name, "Const") != 0) return NULL;
  const FloeAttrValue *v = floe__attrs_get(&src->attrs, "value");
  return (v && v->kind == FLOE_ATTR_TENSOR) ? v->u.tensor : NULL;
}

static int host_shape_num_outputs(const FloeShapeContext *s) { return s->node->num_outputs; }

static void host_shape_set_output(FloeShapeContext *s, int i, const FloeShape *shape) {
  if (i < 0 || i >= s->node->num_outputs || !shape) return;
  s->output_shapes[i] = *shape;
}

static floe_code host_shape_set_error(FloeShapeContext *s, floe_code code, const char *fmt, ...)
    FLOE__PRINTF(3, 4);
static floe_code host_shape_set_error(FloeShapeContext *s, floe_code code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  floe__status_vset(s->status, code, fmt, ap);
  va_end(ap);
  return code;
}

/* ------------------------------------------------------------------------------------ */

static const FloeHostApi host_api = {
    .struct_size = sizeof(FloeHostApi),
    .abi_major = FLOE_ABI_MAJOR,
    .abi_minor = FLOE_ABI_MINOR,
    .log = host_log,
    .alloc = host_alloc,
    .free = host_free,
    .tensor_dtype = host_tensor_dtype,
    .tensor_rank = host_tensor_rank,
    .tensor_dims = host_tensor_dims,
    .tensor_num_elements = host_tensor_num_elements,
    .tensor_nbytes = host_tensor_nbytes,
    .tensor_data = host_tensor_data,
    .tensor_retain = host_tensor_retain,
    .tensor_release = host_tensor_release,
    .dtype_size = host_dtype_size,
    .dtype_name = host_dtype_name,
    .attr_int = host_attr_int,
    .attr_float = host_attr_float,
    .attr_bool = host_attr_bool,
    .attr_type = host_attr_type,
    .attr_string = host_attr_string,
    .attr_shape = host_attr_shape,
    .attr_tensor = host_attr_tensor,
    .attr_int_list = host_attr_int_list,
    .attr_float_list = host_attr_float_list,
    .attr_type_list = host_attr_type_list,
    .init_attrs = host_init_attrs,
    .init_node_name = host_init_node_name,
    .init_num_inputs = host_init_num_inputs,
    .init_input_dtype = host_init_input_dtype,
    .init_num_outputs = host_init_num_outputs,
    .init_output_dtype = host_init_output_dtype,
    .init_device_state = host_init_device_state,
    .init_set_error = host_init_set_error,
    .ctx_attrs = host_ctx_attrs,
    .ctx_node_name = host_ctx_node_name,
    .ctx_op = host_ctx_op,
    .ctx_num_inputs = host_ctx_num_inputs,
    .ctx_input = host_ctx_input,
    .ctx_num_outputs = host_ctx_num_outputs,
    .ctx_output_dtype = host_ctx_output_dtype,
    .ctx_allocate_output = host_ctx_allocate_output,
    .ctx_forward_input = host_ctx_forward_input,
    .ctx_set_output = host_ctx_set_output,
    .ctx_allocate_temp = host_ctx_allocate_temp,
    .ctx_set_error = host_ctx_set_error,
    .ctx_device_state = host_ctx_device_state,
    .ctx_step_id = host_ctx_step_id,
    .ctx_cancelled = host_ctx_cancelled,
    .parallel_for = host_parallel_for,
    .num_threads = host_num_threads,
    .schedule = host_schedule,
    .shape_attrs = host_shape_attrs,
    .shape_node_name = host_shape_node_name,
    .shape_num_inputs = host_shape_num_inputs,
    .shape_input = host_shape_input,
    .shape_input_dtype = host_shape_input_dtype,
    .shape_input_value = host_shape_input_value,
    .shape_num_outputs = host_shape_num_outputs,
    .shape_set_output = host_shape_set_output,
    .shape_set_error = host_shape_set_error,
    .ctx_forward_input_slice = host_ctx_forward_input_slice,
    .ctx_report_device_time = host_ctx_report_device_time,
    .ctx_reuse_input = host_ctx_reuse_input,
};

/* Every slot must be filled: a NULL here would crash a plugin. */
_Static_assert(sizeof(FloeHostApi) ==
                   offsetof(FloeHostApi, ctx_reuse_input) + sizeof(void (*)(void)),
               "a FloeHostApi slot was added: fill it in host_api");

/* Static: lives as long as the process; plugins may keep the pointer. */
const FloeHostApi *floe__host_api(void) { return &host_api; }
