/* SPDX-License-Identifier: Apache-2.0 */
/* tensor_array.c - TensorArrays (TensorFlow's TensorArrayV3 family): the step-scoped
 * resource object and its core kernels (device type "*").
 *
 * TensorArrayV3 makes the object, registers it with its step (it is closed and dropped
 * when the step ends, so a handle that outlives it names a serial that no longer exists,
 * never freed memory) and outputs its handle and a flow scalar. Elements are references to
 * the written tensors, in whatever memory they were produced; Scatter and Unstack store
 * views of the value's rows. Nothing is copied until a Gather or Stack assembles a tensor.
 *
 * A gradient TensorArray (TensorArrayGradV3) hangs off its forward array under a source
 * name, with the forward size, dtype and element shapes: writes to one of its indices are
 * summed (the gradients of several reads of one element), and an element nobody wrote
 * reads as zeros of the forward element's shape.
 *
 * Locking: one mutex per array guards all of it, so writes and reads of different indices
 * from concurrent loop iterations take turns. The only nesting is a forward array's lock
 * around its new gradient array's; a gradient array is registered with the step (the
 * step's and the manager's locks) with no array lock held, so closing objects from the
 * manager never waits on an array that waits on the manager.
 */
#include <stdio.h>
#include <string.h>

#include "exec.h"

typedef struct TaElem {
  FloeTensor *t;   /* one reference; NULL when unwritten or cleared by a read */
  bool written;    /* stays true after a clearing read */
  FloeShape shape; /* of the written value; gradient arrays: the forward element's (rank
                      -1 when the forward array never had it) */
} TaElem;

typedef struct TensorArray TensorArray;

typedef struct GradLink {
  char *source;    /* owned */
  TensorArray *ta; /* one reference */
} GradLink;

struct TensorArray {
  FloeResource res;      /* first: what the manager holds */
  pthread_mutex_t mu;    /* guards every field below */
  char *name;            /* owned: tensor_array_name, else the creating node's name */
  FloeDType dtype;
  FloeShape elem_shape;  /* declared; may be partial */
  bool dynamic_size, clear_after_read, is_grad;
  bool closed;
  bool size_fixed;       /* a gradient array copied the size: no more growth */
  TaElem *elems;         /* [cap], the first size in use */
  int64_t size, cap;
  GradLink *grads;
  int num_grads;
};

#define SHAPE_STR(s) floe_shape_str(&(s), (char[160]){0}, 160)

/* ---- the object ---- */

static void release_grads(GradLink *g, int n) {
  for (int i = 0; i < n; i++) {
    floe__free(g[i].source);
    floe__resource_release(&g[i].ta->res);
  }
  floe__free(g);
}

static void ta_destroy(FloeResource *r) {
  TensorArray *ta = (TensorArray *)r;
  for (int64_t i = 0; i < ta->size; i++) floe_tensor_release(ta->elems[i].t);
  release_grads(ta->grads, ta->num_grads);
  pthread_mutex_destroy(&ta->mu);
  floe__free(ta->elems);
  floe__free(ta->name);
  floe__free(ta);
}

/* Its step ended, its session closed or TensorArrayCloseV3 ran: the elements go now. */
static void ta_close(FloeResource *r) {
  TensorArray *ta = (TensorArray *)r;
  pthread_mutex_lock(&ta->mu);
  ta->closed = true;
  for (int64_t i = 0; i < ta->size; i++) {
    floe_tensor_release(ta->elems[i].t);
    ta->elems[i].t = NULL;
  }
  GradLink *grads = ta->grads;
  int n = ta->num_grads;
  ta->grads = NULL;
  ta->num_grads = 0;
  pthread_mutex_unlock(&ta->mu);
  release_grads(grads, n);
}

static const FloeResourceOps ta_ops = {"TensorArray", ta_close, ta_destroy};

/* One reference for the caller; NULL with st set. */
static TensorArray *ta_new(const char *name, FloeDType dtype, const FloeShape *elem_shape,
                           int64_t size, bool dynamic_size, bool clear_after_read, bool is_grad,
                           FloeStatus *st) {
  TensorArray *ta = floe__calloc(1, sizeof *ta);
  if (!ta) goto err_oom;
  ta->name = floe__strdup(name);
  ta->elems = floe__calloc((size_t)(size ? size : 1), sizeof *ta->elems);
  if (!ta->name || !ta->elems) goto err_free;
  if (pthread_mutex_init(&ta->mu, NULL) != 0) {
    floe_status_set(st, FLOE_RESOURCE_EXHAUSTED, "cannot create the mutex of TensorArray '%s'",
                    name);
    floe__free(ta->elems);
    floe__free(ta->name);
    floe__free(ta);
    return NULL;
  }
  floe__resource_init(&ta->res, &ta_ops);
  ta->dtype = dtype;
  ta->elem_shape = *elem_shape;
  ta->dynamic_size = dynamic_size;
  ta->clear_after_read = clear_after_read;
  ta->is_grad = is_grad;
  ta->size = size;
  ta->cap = size ? size : 1;
  for (int64_t i = 0; i < size; i++) ta->elems[i].shape = floe_shape_unknown();
  return ta;

err_free:
  floe__free(ta->elems);
  floe__free(ta->name);
  floe__free(ta);
err_oom:
  floe_status_set(st, FLOE_NO_MEMORY, "out of memory creating TensorArray '%s' of size %lld",
                  name, (long long)size);
  return NULL;
}

static floe_code ta_fail(FloeStatus *st, floe_code code, const TensorArray *ta,
                         const char *fmt, ...) FLOE__PRINTF(4, 5);

/* Sets st to "TensorArray 'name': <fmt>". */
static floe_code ta_fail(FloeStatus *st, floe_code code, const TensorArray *ta,
                         const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  floe__status_vset(st, code, fmt, ap);
  va_end(ap);
  floe__status_prefix(st, "TensorArray '%s'", ta->name);
  return code;
}

static bool shape_compatible(const FloeShape *decl, const FloeShape *s) {
  if (decl->rank < 0 || s->rank < 0) return true;
  if (decl->rank != s->rank) return false;
  for (int i = 0; i < s->rank; i++)
    if (decl->dims[i] >= 0 && s->dims[i] >= 0 && decl->dims[i] != s->dims[i]) return false;
  return true;
}

static bool shape_known(const FloeShape *s) {
  if (s->rank < 0) return false;
  for (int i = 0; i < s->rank; i++)
    if (s->dims[i] < 0) return false;
  return true;
}

static bool shape_equal(const FloeShape *a, const FloeShape *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

/* Caller holds ta->mu. */
static floe_code check_open_locked(const TensorArray *ta, FloeStatus *st) {
  if (!ta->closed) return FLOE_OK;
  return ta_fail(st, FLOE_FAILED_PRECONDITION, ta,
                 "it has been closed (by TensorArrayCloseV3, or its step or session ended)");
}

/* Makes room for index (a dynamic array grows). Caller holds ta->mu. */
static floe_code reach_locked(TensorArray *ta, int64_t index, FloeStatus *st) {
  if (index < 0)
    return ta_fail(st, FLOE_OUT_OF_RANGE, ta, "could not write to index %lld: indices start at 0",
                   (long long)index);
  if (index < ta->size) return FLOE_OK;
  if (!ta->dynamic_size)
    return ta_fail(st, FLOE_OUT_OF_RANGE, ta,
                   "could not write to index %lld: the size is %lld and dynamic_size is false "
                   "(create it larger or with dynamic_size = true)",
                   (long long)index, (long long)ta->size);
  if (ta->size_fixed)
    return ta_fail(st, FLOE_FAILED_PRECONDITION, ta,
                   "could not write to index %lld: the size is %lld, and it can no longer grow "
                   "because a gradient TensorArray was made from it",
                   (long long)index, (long long)ta->size);
  if (index >= ta->cap) {
    int64_t cap = ta->cap;
    while (cap <= index) cap *= 2;
    TaElem *v = floe__realloc(ta->elems, (size_t)cap * sizeof *v);
    if (!v)
      return ta_fail(st, FLOE_NO_MEMORY, ta, "out of memory growing to %lld elements",
                     (long long)index + 1);
    ta->elems = v;
    ta->cap = cap;
  }
  for (int64_t i = ta->size; i <= index; i++)
    ta->elems[i] = (TaElem){NULL, false, floe_shape_unknown()};
  ta->size = index + 1;
  return FLOE_OK;
}

/* a + b (same dtype and shape) as a new tensor in a's memory space: gradients of one
 * element arriving from several paths. Sums on the host (the core has no device kernels). */
static FloeTensor *tensor_sum(FloeTensor *a, FloeTensor *b, FloeStatus *st) {
  FloeTensor *ha = floe__tensor_to_device(a, NULL, st);
  FloeTensor *hb = ha ? floe__tensor_to_device(b, NULL, st) : NULL;
  FloeTensor *out = hb ? floe__tensor_alloc(NULL, a->dtype, a->rank, a->dims, st) : NULL;
  if (out && out->nbytes) {
    const void *x = floe_tensor_data(ha), *y = floe_tensor_data(hb);
    void *z = floe_tensor_data(out);
    int64_t n = out->num_elements;
    switch (a->dtype) {
#define SUM(T)                                                                          \
  for (int64_t i = 0; i < n; i++) ((T *)z)[i] = (T)(((const T *)x)[i] + ((const T *)y)[i]); \
  break;
      case FLOE_F32: SUM(float)
      case FLOE_F64: SUM(double)
      case FLOE_I8: SUM(int8_t)
      case FLOE_U8: SUM(uint8_t)
      case FLOE_I32: SUM(int32_t)
      case FLOE_I64: SUM(int64_t)
#undef SUM
      case FLOE_F16:
        for (int64_t i = 0; i < n; i++)
          ((uint16_t *)z)[i] = floe_f32_to_f16(floe_f16_to_f32(((const uint16_t *)x)[i]) +
                                               floe_f16_to_f32(((const uint16_t *)y)[i]));
        break;
      case FLOE_BF16:
        for (int64_t i = 0; i < n; i++)
          ((uint16_t *)z)[i] = floe_f32_to_bf16(floe_bf16_to_f32(((const uint16_t *)x)[i]) +
                                                floe_bf16_to_f32(((const uint16_t *)y)[i]));
        break;
      default:
        floe_status_set(st, FLOE_INVALID_ARGUMENT, "cannot sum two %s tensors",
                        floe_dtype_name(a->dtype));
        floe_tensor_release(out);
        out = NULL;
    }
  }
  floe_tensor_release(ha);
  floe_tensor_release(hb);
  if (!out) return NULL;
  FloeTensor *moved = floe__tensor_to_device(out, floe__tensor_device(a), st);
  floe_tensor_release(out);
  return moved;
}

/* Stores v (the array takes its own reference) at index. Caller holds ta->mu. */
static floe_code write_locked(TensorArray *ta, int64_t index, FloeTensor *v, FloeStatus *st) {
  floe_code rc = check_open_locked(ta, st);
  if (rc == FLOE_OK) rc = reach_locked(ta, index, st);
  if (rc != FLOE_OK) return rc;
  FloeShape vs = floe_tensor_shape(v);
  if (v->dtype != ta->dtype)
    return ta_fail(st, FLOE_INVALID_ARGUMENT, ta,
                   "could not write to index %lld: the value is %s but the TensorArray holds %s",
                   (long long)index, floe_dtype_name(v->dtype), floe_dtype_name(ta->dtype));
  if (!shape_compatible(&ta->elem_shape, &vs))
    return ta_fail(st, FLOE_INVALID_ARGUMENT, ta,
                   "could not write to index %lld (size %lld): the value's shape %s does not "
                   "match the element shape %s",
                   (long long)index, (long long)ta->size, SHAPE_STR(vs),
                   SHAPE_STR(ta->elem_shape));
  TaElem *e = &ta->elems[index];
  if (ta->is_grad && e->shape.rank >= 0 && !shape_equal(&e->shape, &vs))
    return ta_fail(st, FLOE_INVALID_ARGUMENT, ta,
                   "could not write the gradient of index %lld: it has shape %s but the "
                   "element it is the gradient of had shape %s",
                   (long long)index, SHAPE_STR(vs), SHAPE_STR(e->shape));
  if (e->written && (!ta->is_grad || !e->t))
    return ta_fail(st, FLOE_INVALID_ARGUMENT, ta,
                   "could not write to index %lld (size %lld): it has already been %s (each "
                   "index is written once; only a gradient TensorArray sums repeated writes)",
                   (long long)index, (long long)ta->size, e->t ? "written" : "written and read");
  if (e->written) {
    FloeTensor *sum = tensor_sum(e->t, v, st);
    if (!sum) {
      floe__status_prefix(st, "could not add a gradient to index %lld", (long long)index);
      floe__status_prefix(st, "TensorArray '%s'", ta->name);
      return floe_status_code(st);
    }
    floe_tensor_release(e->t);
    e->t = sum;
    return FLOE_OK;
  }
  floe_tensor_retain(v);
  e->t = v;
  e->written = true;
  e->shape = vs;
  return FLOE_OK;
}

/* How element index reads: *t a new reference (NULL when it reads as zeros of *zero_shape,
 * rank -1 when that shape is unknown here). Validation only; clear_locked then clears.
 * Caller holds ta->mu. */
static floe_code peek_locked(TensorArray *ta, int64_t index, FloeTensor **t,
                             FloeShape *zero_shape, FloeStatus *st) {
  *t = NULL;
  floe_code rc = check_open_locked(ta, st);
  if (rc != FLOE_OK) return rc;
  if (index < 0 || index >= ta->size)
    return ta_fail(st, FLOE_OUT_OF_RANGE, ta, "could not read index %lld: the size is %lld",
                   (long long)index, (long long)ta->size);
  TaElem *e = &ta->elems[index];
  if (e->t) {
    floe_tensor_retain(e->t);
    *t = e->t;
    return FLOE_OK;
  }
  if (e->written)
    return ta_fail(st, FLOE_INVALID_ARGUMENT, ta,
                   "could not read index %lld (size %lld) twice: a previous read cleared it "
                   "(create the TensorArray with clear_after_read = false to read an element "
                   "more than once)",
                   (long long)index, (long long)ta->size);
  if (!ta->is_grad)
    return ta_fail(st, FLOE_INVALID_ARGUMENT, ta,
                   "could not read index %lld (size %lld): it has not been written",
                   (long long)index, (long long)ta->size);
  *zero_shape = e->shape.rank >= 0 ? e->shape
                : shape_known(&ta->elem_shape) ? ta->elem_shape
                                               : floe_shape_unknown();
  return FLOE_OK;
}

static void clear_locked(TensorArray *ta, int64_t index) {
  if (!ta->clear_after_read) return;
  floe_tensor_release(ta->elems[index].t);
  ta->elems[index].t = NULL;
}

/* ---- kernel plumbing (shared with stack.c) ---- */

floe_code floe__kctx_fail(FloeKernelContext *ctx, FloeStatus *st) {
  floe_code code = st->code != FLOE_OK ? st->code : FLOE_INTERNAL;
  floe_status_set(ctx->status, code, "%s", floe_status_message(st));
  floe_status_clear(st);
  return code;
}

void floe__kctx_set_output(FloeKernelContext *ctx, int i, FloeTensor *t) {
  floe_tensor_release(ctx->outputs[i]);
  ctx->outputs[i] = t;
}

FloeTensor *floe__kctx_to_device(FloeKernelContext *ctx, FloeTensor *t, FloeStatus *st) {
  if (!t) return NULL;
  FloeTensor *moved = floe__tensor_to_device(t, ctx->device, st);
  floe_tensor_release(t);
  return moved;
}

floe_code floe__kctx_scalar_i32(FloeKernelContext *ctx, int i, const char *what, int64_t *out) {
  FloeTensor *t = ctx->inputs[i];
  if (t->dtype != FLOE_I32 || t->rank != 0)
    return floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT,
                           "%s must be an i32 scalar, got %s of rank %d", what,
                           floe_dtype_name(t->dtype), t->rank);
  FloeStatus st = {FLOE_OK, NULL};
  FloeTensor *h = floe__tensor_to_device(t, NULL, &st); /* a device's scalar comes over */
  if (!h) return floe__kctx_fail(ctx, &st);
  *out = *(const int32_t *)floe_tensor_data(h);
  floe_tensor_release(h);
  return FLOE_OK;
}

/* Output i := input j (flows pass through). */
static void forward_input(FloeKernelContext *ctx, int i, int j) {
  floe_tensor_retain(ctx->inputs[j]);
  floe__kctx_set_output(ctx, i, ctx->inputs[j]);
}

static const FloeAttrValue *attr(const FloeKernelContext *ctx, const char *name,
                                 FloeAttrKind kind) {
  const FloeAttrValue *v = floe__attrs_get(&ctx->node->attrs, name);
  return v && v->kind == kind ? v : NULL;
}

/* The array behind input 0, as a new reference; NULL with the kernel's error set. */
static TensorArray *ta_input(FloeKernelContext *ctx) {
  FloeStatus st = {FLOE_OK, NULL};
  FloeResource *r = floe__resources_from_handle(floe__kernel_ctx_resources(ctx), ctx->inputs[0],
                                                &ta_ops, "input 0 (handle)", &st);
  if (!r) floe__kctx_fail(ctx, &st);
  return (TensorArray *)r;
}

static floe_code done(FloeKernelContext *ctx, TensorArray *ta, floe_code rc, FloeStatus *st) {
  floe__resource_release(&ta->res);
  return rc == FLOE_OK ? FLOE_OK : floe__kctx_fail(ctx, st);
}

/* The node's dtype attribute must be what the array holds. */
static floe_code check_dtype(const FloeKernelContext *ctx, const TensorArray *ta,
                             FloeStatus *st) {
  const FloeAttrValue *dt = attr(ctx, "dtype", FLOE_ATTR_TYPE);
  if (dt && dt->u.type != ta->dtype)
    return ta_fail(st, FLOE_INVALID_ARGUMENT, ta, "it holds %s but this node reads %s",
                   floe_dtype_name(ta->dtype), floe_dtype_name(dt->u.type));
  return FLOE_OK;
}

/* The node's element_shape attribute (unknown when absent). */
static FloeShape want_shape(const FloeKernelContext *ctx) {
  const FloeAttrValue *v = attr(ctx, "element_shape", FLOE_ATTR_SHAPE);
  return v ? v->u.shape : floe_shape_unknown();
}

/* A host tensor of zeros; caller owns. */
static FloeTensor *zeros(FloeDType dt, const FloeShape *s, FloeStatus *st) {
  FloeTensor *t = floe__tensor_alloc(NULL, dt, s->rank, s->dims, st);
  if (t && t->nbytes) memset(floe_tensor_data(t), 0, t->nbytes);
  return t;
}

/* ---- kernels ---- */

static floe_code create_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  int64_t size = 0;
  if (floe__kctx_scalar_i32(ctx, 0, "TensorArrayV3 size", &size) != FLOE_OK)
    return ctx->status->code;
  const FloeAttrValue *name = attr(ctx, "tensor_array_name", FLOE_ATTR_STRING);
  const char *display = name && name->u.s && *name->u.s ? name->u.s : ctx->node->name;
  if (size < 0)
    return floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT,
                           "TensorArray '%s': the size must be >= 0, got %lld", display,
                           (long long)size);
  const FloeAttrValue *dt = attr(ctx, "dtype", FLOE_ATTR_TYPE);
  const FloeAttrValue *dyn = attr(ctx, "dynamic_size", FLOE_ATTR_BOOL);
  const FloeAttrValue *clr = attr(ctx, "clear_after_read", FLOE_ATTR_BOOL);
  FloeShape elem = want_shape(ctx);
  FloeStatus st = {FLOE_OK, NULL};
  TensorArray *ta = ta_new(display, dt ? dt->u.type : FLOE_DTYPE_INVALID, &elem, size,
                           dyn && dyn->u.b, !clr || clr->u.b, false, &st);
  if (!ta) return floe__kctx_fail(ctx, &st);
  FloeTensor *handle = NULL, *flow = NULL;
  FloeShape scalar = floe_shape_scalar();
  if (floe__kernel_ctx_add_step_resource(ctx, &ta->res, &st) == FLOE_OK &&
      (handle = floe__resource_obj_handle(&ta->res, &st)) != NULL)
    flow = floe__kctx_to_device(ctx, zeros(FLOE_F32, &scalar, &st), &st);
  floe__resource_release(&ta->res); /* the step keeps it */
  if (!flow) {
    floe_tensor_release(handle);
    return floe__kctx_fail(ctx, &st);
  }
  floe__kctx_set_output(ctx, 0, handle);
  floe__kctx_set_output(ctx, 1, flow);
  return FLOE_OK;
}

static floe_code write_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  int64_t index = 0; /* set on success; gcc cannot follow the status */
  if (floe__kctx_scalar_i32(ctx, 1, "TensorArrayWriteV3 index", &index) != FLOE_OK)
    return ctx->status->code;
  TensorArray *ta = ta_input(ctx);
  if (!ta) return ctx->status->code;
  FloeStatus st = {FLOE_OK, NULL};
  pthread_mutex_lock(&ta->mu);
  floe_code rc = write_locked(ta, index, ctx->inputs[2], &st);
  pthread_mutex_unlock(&ta->mu);
  if (rc == FLOE_OK) forward_input(ctx, 0, 3);
  return done(ctx, ta, rc, &st);
}

/* The element at index, as read by this node: its own tensor (moved to the kernel's device
 * when it lives elsewhere) or zeros. Caller owns *out. */
static floe_code read_one(FloeKernelContext *ctx, TensorArray *ta, int64_t index,
                          FloeTensor **out, FloeStatus *st) {
  FloeShape zs, want = want_shape(ctx);
  FloeTensor *t = NULL;
  pthread_mutex_lock(&ta->mu);
  floe_code rc = check_dtype(ctx, ta, st);
  if (rc == FLOE_OK) rc = peek_locked(ta, index, &t, &zs, st);
  if (rc == FLOE_OK && !t && zs.rank < 0) zs = want; /* the node may know it */
  if (rc == FLOE_OK && !t && !shape_known(&zs))
    rc = ta_fail(st, FLOE_INVALID_ARGUMENT, ta,
                 "could not read index %lld (size %lld): nothing was written there, and a "
                 "gradient TensorArray reads it as zeros only when its shape is known (give "
                 "the TensorArray a full element_shape)",
                 (long long)index, (long long)ta->size);
  if (rc == FLOE_OK && t) clear_locked(ta, index);
  pthread_mutex_unlock(&ta->mu);
  if (rc != FLOE_OK) return rc;
  if (!t) t = zeros(ta->dtype, &zs, st);
  FloeShape ts = t ? floe_tensor_shape(t) : zs;
  if (t && !shape_compatible(&want, &ts)) {
    floe_tensor_release(t);
    return ta_fail(st, FLOE_INVALID_ARGUMENT, ta,
                   "index %lld holds a tensor of shape %s but this node expects %s",
                   (long long)index, SHAPE_STR(ts), SHAPE_STR(want));
  }
  *out = floe__kctx_to_device(ctx, t, st);
  return *out ? FLOE_OK : floe_status_code(st);
}

static floe_code read_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  int64_t index = 0; /* set on success; gcc cannot follow the status */
  if (floe__kctx_scalar_i32(ctx, 1, "TensorArrayReadV3 index", &index) != FLOE_OK)
    return ctx->status->code;
  TensorArray *ta = ta_input(ctx);
  if (!ta) return ctx->status->code;
  FloeStatus st = {FLOE_OK, NULL};
  FloeTensor *t = NULL;
  floe_code rc = read_one(ctx, ta, index, &t, &st);
  if (rc == FLOE_OK) floe__kctx_set_output(ctx, 0, t);
  return done(ctx, ta, rc, &st);
}

/* Gather and Stack: the elements idx[0..n) (NULL idx: 0..size-1) as rows of one new tensor
 * on the kernel's device. Every element is validated before any is cleared. */
static floe_code gather_rows(FloeKernelContext *ctx, TensorArray *ta, const int32_t *idx,
                             int64_t n, FloeTensor **out, FloeStatus *st) {
  FloeShape want = want_shape(ctx);
  pthread_mutex_lock(&ta->mu);
  floe_code rc = check_dtype(ctx, ta, st);
  if (rc == FLOE_OK) rc = check_open_locked(ta, st);
  if (rc == FLOE_OK && !idx) n = ta->size;
  FloeTensor **rows = floe__calloc((size_t)(n ? n : 1), sizeof *rows);
  FloeShape *zshape = floe__malloc((size_t)(n ? n : 1) * sizeof *zshape);
  bool *seen = ta->clear_after_read ? floe__calloc((size_t)(ta->size ? ta->size : 1), 1) : NULL;
  if (rc == FLOE_OK && (!rows || !zshape || (ta->clear_after_read && !seen)))
    rc = ta_fail(st, FLOE_NO_MEMORY, ta, "out of memory gathering %lld elements", (long long)n);
  for (int64_t k = 0; rc == FLOE_OK && k < n; k++) {
    int64_t i = idx ? idx[k] : k;
    rc = peek_locked(ta, i, &rows[k], &zshape[k], st);
    if (rc == FLOE_OK && seen && rows[k] && seen[i])
      rc = ta_fail(st, FLOE_INVALID_ARGUMENT, ta,
                   "could not read index %lld twice in one gather: clear_after_read is true "
                   "(create the TensorArray with clear_after_read = false to read an element "
                   "more than once)",
                   (long long)i);
    if (rc == FLOE_OK && seen) seen[i] = true;
  }
  for (int64_t k = 0; rc == FLOE_OK && k < n; k++)
    if (rows[k]) clear_locked(ta, idx ? idx[k] : k);
  int64_t size = ta->size; /* for messages: a dynamic array may grow once unlocked */
  pthread_mutex_unlock(&ta->mu);
  floe__free(seen);

  /* One element shape: the first present element's, else the zeros' (else the node's). */
  FloeShape elem = floe_shape_unknown();
  int64_t from = -1;
  for (int64_t k = 0; rc == FLOE_OK && k < n && from < 0; k++) {
    if (!rows[k]) continue;
    elem = floe_tensor_shape(rows[k]);
    from = k;
  }
  for (int64_t k = 0; rc == FLOE_OK && k < n && elem.rank < 0; k++) elem = zshape[k];
  if (rc == FLOE_OK && elem.rank < 0 && shape_known(&want)) elem = want;
  if (rc == FLOE_OK && elem.rank < 0 && shape_known(&ta->elem_shape)) elem = ta->elem_shape;
  if (rc == FLOE_OK && !shape_known(&elem))
    rc = ta_fail(st, FLOE_INVALID_ARGUMENT, ta,
                 "could not gather %lld elements (size %lld): %s, so the element shape is "
                 "unknown (give the TensorArray a full element_shape)",
                 (long long)n, (long long)size,
                 n ? "none of them was written" : "there are none");
  for (int64_t k = 0; rc == FLOE_OK && k < n; k++) {
    FloeShape s = rows[k] ? floe_tensor_shape(rows[k]) : zshape[k];
    int64_t i = idx ? idx[k] : k;
    if (s.rank >= 0 && !shape_equal(&s, &elem))
      rc = ta_fail(st, FLOE_INVALID_ARGUMENT, ta,
                   "could not stack index %lld (shape %s) with index %lld (shape %s): the "
                   "elements of one gather or stack must have one shape",
                   (long long)(from >= 0 ? (idx ? idx[from] : from) : i), SHAPE_STR(elem),
                   (long long)i, SHAPE_STR(s));
  }
  if (rc == FLOE_OK && !shape_compatible(&want, &elem))
    rc = ta_fail(st, FLOE_INVALID_ARGUMENT, ta,
                 "its elements have shape %s but this node expects %s", SHAPE_STR(elem),
                 SHAPE_STR(want));
  if (rc == FLOE_OK && elem.rank >= FLOE_MAX_DIMS)
    rc = ta_fail(st, FLOE_INVALID_ARGUMENT, ta,
                 "elements of rank %d cannot be stacked: at most %d dimensions", elem.rank,
                 FLOE_MAX_DIMS);

  FloeTensor *res = NULL, *zero = NULL;
  if (rc == FLOE_OK) {
    int64_t dims[FLOE_MAX_DIMS];
    dims[0] = n;
    for (int d = 0; d < elem.rank; d++) dims[d + 1] = elem.dims[d];
    res = floe__tensor_alloc(ctx->device, ta->dtype, elem.rank + 1, dims, st);
    if (!res) rc = floe_status_code(st);
  }
  size_t row_bytes = res && n ? res->nbytes / (size_t)n : 0;
  for (int64_t k = 0; rc == FLOE_OK && row_bytes && k < n; k++) {
    FloeTensor *src = rows[k];
    if (!src && !zero && !(zero = zeros(ta->dtype, &elem, st))) rc = floe_status_code(st);
    if (!src) src = zero;
    if (rc == FLOE_OK)
      rc = floe__device_copy(floe__tensor_on_host(res) ? NULL : floe__tensor_device(res),
                             (char *)res->buf->data + res->offset + (size_t)k * row_bytes,
                             floe__tensor_on_host(src) ? NULL : floe__tensor_device(src),
                             (const char *)src->buf->data + src->offset, row_bytes, st);
  }
  for (int64_t k = 0; rows && k < n; k++) floe_tensor_release(rows[k]);
  floe__free(rows);
  floe__free(zshape);
  floe_tensor_release(zero);
  if (rc != FLOE_OK) {
    floe_tensor_release(res);
    return rc;
  }
  *out = res;
  return FLOE_OK;
}

/* Input i as an i32 vector in host memory: *data borrowed from *holder (caller releases). */
static floe_code host_indices(FloeKernelContext *ctx, int i, const char *what,
                              FloeTensor **holder, const int32_t **data, int64_t *n) {
  FloeTensor *t = ctx->inputs[i];
  if (t->dtype != FLOE_I32 || t->rank != 1)
    return floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT,
                           "%s must be a 1-D i32 tensor, got %s of rank %d", what,
                           floe_dtype_name(t->dtype), t->rank);
  FloeStatus st = {FLOE_OK, NULL};
  *holder = floe__tensor_to_device(t, NULL, &st);
  if (!*holder) return floe__kctx_fail(ctx, &st);
  *data = floe_tensor_data(*holder);
  *n = t->dims[0];
  return FLOE_OK;
}

static floe_code gather_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  FloeTensor *holder = NULL;
  const int32_t *idx = NULL;
  int64_t n = 0;
  if (host_indices(ctx, 1, "TensorArrayGatherV3 indices", &holder, &idx, &n) != FLOE_OK)
    return ctx->status->code;
  TensorArray *ta = ta_input(ctx);
  if (!ta) {
    floe_tensor_release(holder);
    return ctx->status->code;
  }
  FloeStatus st = {FLOE_OK, NULL};
  FloeTensor *out = NULL;
  floe_code rc = gather_rows(ctx, ta, n ? idx : (const int32_t[1]){0}, n, &out, &st);
  floe_tensor_release(holder);
  if (rc == FLOE_OK) floe__kctx_set_output(ctx, 0, out);
  return done(ctx, ta, rc, &st);
}

static floe_code stack_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  TensorArray *ta = ta_input(ctx);
  if (!ta) return ctx->status->code;
  FloeStatus st = {FLOE_OK, NULL};
  FloeTensor *out = NULL;
  floe_code rc = gather_rows(ctx, ta, NULL, 0, &out, &st);
  if (rc == FLOE_OK) floe__kctx_set_output(ctx, 0, out);
  return done(ctx, ta, rc, &st);
}

/* Concat: every element (all of rank >= 1, agreeing past their first dimension) one after
 * the other along dimension 0, and their first dimensions as lengths (i64). Elements may
 * have different numbers of rows, unlike Stack's; an empty array gives [0, rest...], the rest
 * from the node's element_shape_except0 or the array's element shape. */
static floe_code concat_rows(FloeKernelContext *ctx, TensorArray *ta, FloeTensor **out,
                             FloeTensor **lengths, FloeStatus *st) {
  pthread_mutex_lock(&ta->mu);
  floe_code rc = check_dtype(ctx, ta, st);
  if (rc == FLOE_OK) rc = check_open_locked(ta, st);
  int64_t n = rc == FLOE_OK ? ta->size : 0;
  FloeTensor **rows = floe__calloc((size_t)(n ? n : 1), sizeof *rows);
  FloeShape *zshape = floe__malloc((size_t)(n ? n : 1) * sizeof *zshape);
  if (rc == FLOE_OK && (!rows || !zshape))
    rc = ta_fail(st, FLOE_NO_MEMORY, ta, "out of memory concatenating %lld elements", (long long)n);
  for (int64_t k = 0; rc == FLOE_OK && k < n; k++)
    rc = peek_locked(ta, k, &rows[k], &zshape[k], st);
  for (int64_t k = 0; rc == FLOE_OK && k < n; k++)
    if (rows[k]) clear_locked(ta, k);
  FloeShape decl = ta->elem_shape;
  pthread_mutex_unlock(&ta->mu);

  /* The shape past dimension 0: the node's, else the array's, checked against every element. */
  const FloeAttrValue *ev = attr(ctx, "element_shape_except0", FLOE_ATTR_SHAPE);
  FloeShape rest = ev ? ev->u.shape : floe_shape_unknown();
  if (rest.rank < 0 && decl.rank >= 1) {
    rest.rank = decl.rank - 1;
    for (int d = 0; d < rest.rank; d++) rest.dims[d] = decl.dims[d + 1];
  }
  int64_t total = 0;
  for (int64_t k = 0; rc == FLOE_OK && k < n; k++) {
    FloeShape s = rows[k] ? floe_tensor_shape(rows[k]) : zshape[k];
    bool fits = s.rank >= 1 && (rest.rank < 0 || rest.rank == s.rank - 1);
    for (int d = 1; fits && d < s.rank; d++)
      fits = s.dims[d] >= 0 &&
             (rest.rank < 0 || rest.dims[d - 1] < 0 || rest.dims[d - 1] == s.dims[d]);
    if (!fits || s.dims[0] < 0) {
      rc = ta_fail(st, FLOE_INVALID_ARGUMENT, ta,
                   "could not concatenate index %lld (shape %s): the elements must have rank "
                   ">= 1 and one shape past their first dimension (%s so far)",
                   (long long)k, SHAPE_STR(s), rest.rank >= 0 ? SHAPE_STR(rest) : "unknown");
      break;
    }
    rest.rank = s.rank - 1;
    for (int d = 1; d < s.rank; d++) rest.dims[d - 1] = s.dims[d];
    total += s.dims[0];
  }
  if (rc == FLOE_OK && (!shape_known(&rest) || rest.rank + 1 > FLOE_MAX_DIMS))
    rc = ta_fail(st, FLOE_INVALID_ARGUMENT, ta,
                 "could not concatenate its %lld elements: the shape past their first "
                 "dimension is %s (give the node a full element_shape_except0)",
                 (long long)n, rest.rank >= 0 ? SHAPE_STR(rest) : "unknown");
  FloeTensor *res = NULL, *lens = NULL;
  if (rc == FLOE_OK) {
    int64_t dims[FLOE_MAX_DIMS], ln[1] = {n};
    dims[0] = total;
    for (int d = 0; d < rest.rank; d++) dims[d + 1] = rest.dims[d];
    res = floe__tensor_alloc(ctx->device, ta->dtype, rest.rank + 1, dims, st);
    lens = res ? floe__tensor_alloc(NULL, FLOE_I64, 1, ln, st) : NULL;
    if (!lens) rc = floe_status_code(st);
  }
  size_t row_bytes = res && total ? res->nbytes / (size_t)total : 0, at = 0;
  for (int64_t k = 0; rc == FLOE_OK && k < n; k++) {
    FloeTensor *src = rows[k];
    int64_t r = src ? src->dims[0] : zshape[k].dims[0];
    ((int64_t *)floe_tensor_data(lens))[k] = r;
    size_t bytes = (size_t)r * row_bytes;
    char *dst = (char *)res->buf->data + res->offset + at;
    at += bytes;
    if (!bytes) continue;
    if (!src) { /* a gradient element nobody wrote: zeros */
      FloeTensor *z = zeros(ta->dtype, &zshape[k], st);
      if (!z) {
        rc = floe_status_code(st);
        break;
      }
      rc = floe__device_copy(floe__tensor_on_host(res) ? NULL : floe__tensor_device(res), dst,
                             NULL, floe_tensor_data(z), bytes, st);
      floe_tensor_release(z);
      continue;
    }
    rc = floe__device_copy(floe__tensor_on_host(res) ? NULL : floe__tensor_device(res), dst,
                           floe__tensor_on_host(src) ? NULL : floe__tensor_device(src),
                           (const char *)src->buf->data + src->offset, bytes, st);
  }
  for (int64_t k = 0; rows && k < n; k++) floe_tensor_release(rows[k]);
  floe__free(rows);
  floe__free(zshape);
  if (rc != FLOE_OK) {
    floe_tensor_release(res);
    floe_tensor_release(lens);
    return rc;
  }
  *out = res;
  *lengths = lens;
  return FLOE_OK;
}

static floe_code concat_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  TensorArray *ta = ta_input(ctx);
  if (!ta) return ctx->status->code;
  FloeStatus st = {FLOE_OK, NULL};
  FloeTensor *out = NULL, *lengths = NULL;
  floe_code rc = concat_rows(ctx, ta, &out, &lengths, &st);
  if (rc == FLOE_OK) {
    floe__kctx_set_output(ctx, 0, out);
    floe__kctx_set_output(ctx, 1, lengths);
  }
  return done(ctx, ta, rc, &st);
}

/* Writes row k of value to idx[k] (NULL idx: k) for k < rows, each a view of value. */
static floe_code scatter_rows(TensorArray *ta, FloeTensor *value, const int32_t *idx,
                              int64_t n, FloeStatus *st) {
  if (value->rank < 1)
    return ta_fail(st, FLOE_INVALID_ARGUMENT, ta,
                   "could not scatter a scalar: the value needs one row per index");
  if (value->dims[0] != n) {
    FloeShape vs = floe_tensor_shape(value);
    return ta_fail(st, FLOE_INVALID_ARGUMENT, ta,
                   "could not scatter %lld indices: the value %s has %lld rows", (long long)n,
                   SHAPE_STR(vs), (long long)value->dims[0]);
  }
  size_t row_bytes = n ? value->nbytes / (size_t)n : 0;
  floe_code rc = FLOE_OK;
  pthread_mutex_lock(&ta->mu);
  for (int64_t k = 0; rc == FLOE_OK && k < n; k++) {
    FloeTensor *row = floe__tensor_slice_view(value, (int64_t)((size_t)k * row_bytes),
                                              value->rank - 1, value->dims + 1, st);
    if (!row) {
      rc = floe_status_code(st);
      break;
    }
    rc = write_locked(ta, idx ? idx[k] : k, row, st);
    floe_tensor_release(row);
  }
  pthread_mutex_unlock(&ta->mu);
  return rc;
}

static floe_code scatter_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  FloeTensor *holder = NULL;
  const int32_t *idx = NULL;
  int64_t n = 0;
  if (host_indices(ctx, 1, "TensorArrayScatterV3 indices", &holder, &idx, &n) != FLOE_OK)
    return ctx->status->code;
  TensorArray *ta = ta_input(ctx);
  if (!ta) {
    floe_tensor_release(holder);
    return ctx->status->code;
  }
  FloeStatus st = {FLOE_OK, NULL};
  floe_code rc = scatter_rows(ta, ctx->inputs[2], n ? idx : (const int32_t[1]){0}, n, &st);
  floe_tensor_release(holder);
  if (rc == FLOE_OK) forward_input(ctx, 0, 3);
  return done(ctx, ta, rc, &st);
}

/* Split: element k := rows [sum(lengths[0..k)), + lengths[k]) of value (a view, no copy). */
static floe_code split_rows(TensorArray *ta, FloeTensor *value, const int64_t *len, int64_t n,
                            FloeStatus *st) {
  FloeShape vs = floe_tensor_shape(value);
  if (value->rank < 1)
    return ta_fail(st, FLOE_INVALID_ARGUMENT, ta,
                   "could not split a scalar: the value needs rows to cut into elements");
  int64_t total = 0;
  for (int64_t k = 0; k < n; k++) {
    if (len[k] < 0 || len[k] > value->dims[0] - total)
      return ta_fail(st, FLOE_INVALID_ARGUMENT, ta,
                     "could not split the value %s: lengths[%lld] = %lld %s", SHAPE_STR(vs),
                     (long long)k, (long long)len[k],
                     len[k] < 0 ? "is negative" : "runs past its rows");
    total += len[k];
  }
  if (total != value->dims[0])
    return ta_fail(st, FLOE_INVALID_ARGUMENT, ta,
                   "could not split the value %s: the lengths add up to %lld rows, not %lld",
                   SHAPE_STR(vs), (long long)total, (long long)value->dims[0]);
  size_t row_bytes = value->dims[0] ? value->nbytes / (size_t)value->dims[0] : 0;
  int64_t dims[FLOE_MAX_DIMS];
  memcpy(dims, value->dims, (size_t)value->rank * sizeof *dims);
  floe_code rc = FLOE_OK;
  int64_t at = 0;
  pthread_mutex_lock(&ta->mu);
  for (int64_t k = 0; rc == FLOE_OK && k < n; k++) {
    dims[0] = len[k];
    FloeTensor *part = floe__tensor_slice_view(value, (int64_t)((size_t)at * row_bytes),
                                               value->rank, dims, st);
    if (!part) {
      rc = floe_status_code(st);
      break;
    }
    rc = write_locked(ta, k, part, st);
    floe_tensor_release(part);
    at += len[k];
  }
  pthread_mutex_unlock(&ta->mu);
  return rc;
}

static floe_code split_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  FloeTensor *lt = ctx->inputs[2];
  if (lt->dtype != FLOE_I64 || lt->rank != 1)
    return floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT,
                           "TensorArraySplitV3 lengths must be a 1-D i64 tensor, got %s of "
                           "rank %d", floe_dtype_name(lt->dtype), lt->rank);
  FloeStatus st = {FLOE_OK, NULL};
  FloeTensor *holder = floe__tensor_to_device(lt, NULL, &st);
  if (!holder) return floe__kctx_fail(ctx, &st);
  TensorArray *ta = ta_input(ctx);
  if (!ta) {
    floe_tensor_release(holder);
    return ctx->status->code;
  }
  floe_code rc = split_rows(ta, ctx->inputs[1], floe_tensor_data(holder), lt->dims[0], &st);
  floe_tensor_release(holder);
  if (rc == FLOE_OK) forward_input(ctx, 0, 3);
  return done(ctx, ta, rc, &st);
}

static floe_code unstack_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  TensorArray *ta = ta_input(ctx);
  if (!ta) return ctx->status->code;
  FloeStatus st = {FLOE_OK, NULL};
  FloeTensor *v = ctx->inputs[1];
  floe_code rc = scatter_rows(ta, v, NULL, v->rank >= 1 ? v->dims[0] : 0, &st);
  if (rc == FLOE_OK) forward_input(ctx, 0, 2);
  return done(ctx, ta, rc, &st);
}

static floe_code size_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  TensorArray *ta = ta_input(ctx);
  if (!ta) return ctx->status->code;
  FloeStatus st = {FLOE_OK, NULL};
  pthread_mutex_lock(&ta->mu);
  floe_code rc = check_open_locked(ta, &st);
  int64_t size = ta->size;
  pthread_mutex_unlock(&ta->mu);
  FloeTensor *t = NULL;
  if (rc == FLOE_OK) {
    t = floe__tensor_alloc(NULL, FLOE_I32, 0, NULL, &st);
    if (t) *(int32_t *)floe_tensor_data(t) = (int32_t)size;
    t = floe__kctx_to_device(ctx, t, &st);
    if (!t) rc = floe_status_code(&st);
  }
  if (rc == FLOE_OK) floe__kctx_set_output(ctx, 0, t);
  return done(ctx, ta, rc, &st);
}

static floe_code close_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  TensorArray *ta = ta_input(ctx);
  if (!ta) return ctx->status->code;
  ta_close(&ta->res);
  floe__resource_release(&ta->res);
  return FLOE_OK;
}

/* The gradient array fwd has for source, as a new reference, or NULL. Caller holds fwd->mu. */
static TensorArray *find_grad_locked(TensorArray *fwd, const char *source) {
  for (int i = 0; i < fwd->num_grads; i++)
    if (strcmp(fwd->grads[i].source, source) == 0) {
      floe__resource_retain(&fwd->grads[i].ta->res);
      return fwd->grads[i].ta;
    }
  return NULL;
}

/* Caller holds fwd->mu. */
static floe_code grad_allowed_locked(const TensorArray *fwd, FloeStatus *st) {
  floe_code rc = check_open_locked(fwd, st);
  if (rc == FLOE_OK && fwd->is_grad)
    rc = ta_fail(st, FLOE_INVALID_ARGUMENT, fwd,
                 "a gradient TensorArray has no gradient TensorArray of its own");
  return rc;
}

/* Attaches g (new, empty) to fwd under source with fwd's size and element shapes as they
 * are now, unless another thread attached one first: returns the attached one (a new
 * reference). Caller holds fwd->mu. */
static TensorArray *attach_grad_locked(TensorArray *fwd, TensorArray *g, const char *source,
                                       FloeStatus *st) {
  TensorArray *have = find_grad_locked(fwd, source);
  if (have) return have;
  TaElem *elems = floe__calloc((size_t)(fwd->size ? fwd->size : 1), sizeof *elems);
  char *src = floe__strdup(source);
  GradLink *links = floe__realloc(fwd->grads, (size_t)(fwd->num_grads + 1) * sizeof *links);
  if (links) fwd->grads = links;
  if (!elems || !src || !links) {
    floe__free(elems);
    floe__free(src);
    ta_fail(st, FLOE_NO_MEMORY, fwd, "out of memory making its gradient TensorArray");
    return NULL;
  }
  for (int64_t i = 0; i < fwd->size; i++)
    elems[i].shape = fwd->elems[i].written ? fwd->elems[i].shape : floe_shape_unknown();
  pthread_mutex_lock(&g->mu); /* a session close may be closing it already */
  floe__free(g->elems);
  g->elems = elems;
  g->size = fwd->size;
  g->cap = fwd->size ? fwd->size : 1;
  pthread_mutex_unlock(&g->mu);
  floe__resource_retain(&g->res); /* the link's */
  fwd->grads[fwd->num_grads++] = (GradLink){src, g};
  fwd->size_fixed = true;
  floe__resource_retain(&g->res); /* the caller's */
  return g;
}

/* The gradient array of fwd for source, made and registered with the step on first use;
 * a new reference. No array lock is held while the step and the manager are locked. */
static TensorArray *grad_array(FloeKernelContext *ctx, TensorArray *fwd, const char *source,
                               FloeStatus *st) {
  pthread_mutex_lock(&fwd->mu);
  floe_code rc = grad_allowed_locked(fwd, st);
  TensorArray *g = rc == FLOE_OK ? find_grad_locked(fwd, source) : NULL;
  FloeDType dtype = fwd->dtype;
  FloeShape elem_shape = fwd->elem_shape;
  pthread_mutex_unlock(&fwd->mu);
  if (rc != FLOE_OK || g) return g;
  char *name = floe__asprintf("%s@%s", fwd->name, source);
  if (!name) {
    ta_fail(st, FLOE_NO_MEMORY, fwd, "out of memory making its gradient TensorArray");
    return NULL;
  }
  /* Not dynamic, clearing reads, summing writes; sized when attached. */
  TensorArray *made = ta_new(name, dtype, &elem_shape, 0, false, true, true, st);
  floe__free(name);
  if (!made) return NULL;
  if (floe__kernel_ctx_add_step_resource(ctx, &made->res, st) == FLOE_OK) {
    pthread_mutex_lock(&fwd->mu);
    if (grad_allowed_locked(fwd, st) == FLOE_OK) g = attach_grad_locked(fwd, made, source, st);
    pthread_mutex_unlock(&fwd->mu);
  }
  floe__resource_release(&made->res); /* the step (and the link) keep theirs */
  return g;
}

static floe_code grad_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  TensorArray *fwd = ta_input(ctx);
  if (!fwd) return ctx->status->code;
  const FloeAttrValue *source = attr(ctx, "source", FLOE_ATTR_STRING);
  FloeStatus st = {FLOE_OK, NULL};
  TensorArray *g = grad_array(ctx, fwd, source && source->u.s ? source->u.s : "", &st);
  FloeTensor *h = g ? floe__resource_obj_handle(&g->res, &st) : NULL;
  if (g) floe__resource_release(&g->res);
  if (h) {
    floe__kctx_set_output(ctx, 0, h);
    forward_input(ctx, 1, 1);
  }
  return done(ctx, fwd, h ? FLOE_OK : floe_status_code(&st), &st);
}

floe_code floe__tensor_array_kernels_register(FloeRuntime *rt, FloeStatus *st) {
  static const struct {
    const char *op;
    floe_code (*compute)(void *, FloeKernelContext *);
    bool copies; /* assembles a new tensor: not worth running inline */
  } kernels[] = {
      {"TensorArrayV3", create_compute, false},
      {"TensorArrayWriteV3", write_compute, false},
      {"TensorArrayReadV3", read_compute, false},
      {"TensorArrayGatherV3", gather_compute, true},
      {"TensorArrayScatterV3", scatter_compute, false},
      {"TensorArrayStackV3", stack_compute, true},
      {"TensorArrayConcatV3", concat_compute, true},
      {"TensorArraySplitV3", split_compute, false},
      {"TensorArrayUnstackV3", unstack_compute, false},
      {"TensorArraySizeV3", size_compute, false},
      {"TensorArrayCloseV3", close_compute, false},
      {"TensorArrayGradV3", grad_compute, false},
  };
  for (size_t i = 0; i < FLOE__ARRAY_LEN(kernels); i++) {
    uint32_t flags = FLOE__KERNEL_RAW_RESOURCES | (kernels[i].copies ? 0 : FLOE_KERNEL_INEXPENSIVE);
    floe_code rc = floe__core_kernel_add(rt, kernels[i].op, flags, kernels[i].compute, st);
    if (rc != FLOE_OK) return rc;
  }
  return floe__stack_kernels_register(rt, st);
}
