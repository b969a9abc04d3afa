/* SPDX-License-Identifier: Apache-2.0 */
/* stack.c - stacks (TensorFlow's StackV2 family): step-scoped LIFO lists of tensors, their
 * core kernels and the internal builders the control-flow gradients use to save forward
 * values per iteration and pop them in reverse.
 *
 * Like a TensorArray, a stack is registered with the step that made it and dies with it.
 * Elements are references to the pushed tensors (no copy), except with swap_memory, where
 * an element in a device's own memory waits in host memory until it is popped. One mutex
 * per stack orders concurrent pushes and pops.
 */
#include <string.h>

#include "exec.h"

typedef struct Stack {
  FloeResource res;   /* first: what the manager holds */
  pthread_mutex_t mu; /* guards every field below */
  char *name;         /* owned: stack_name, else the creating node's name */
  FloeDType elem_type;
  int64_t max_size;   /* <= 0: unbounded */
  bool closed;
  FloeTensor **v;     /* one reference each; v[n - 1] is the top */
  int64_t n, cap;
} Stack;

static void stack_destroy(FloeResource *r) {
  Stack *s = (Stack *)r;
  for (int64_t i = 0; i < s->n; i++) floe_tensor_release(s->v[i]);
  pthread_mutex_destroy(&s->mu);
  floe__free(s->v);
  floe__free(s->name);
  floe__free(s);
}

/* Its step ended, its session closed or StackCloseV2 ran: the elements go now. */
static void stack_close(FloeResource *r) {
  Stack *s = (Stack *)r;
  pthread_mutex_lock(&s->mu);
  s->closed = true;
  for (int64_t i = 0; i < s->n; i++) floe_tensor_release(s->v[i]);
  s->n = 0;
  pthread_mutex_unlock(&s->mu);
}

static const FloeResourceOps stack_ops = {"stack", stack_close, stack_destroy};

static Stack *stack_new(const char *name, FloeDType elem_type, int64_t max_size,
                        FloeStatus *st) {
  Stack *s = floe__calloc(1, sizeof *s);
  if (s && !(s->name = floe__strdup(name))) {
    floe__free(s);
    s = NULL;
  }
  if (!s) {
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory creating stack '%s'", name);
    return NULL;
  }
  if (pthread_mutex_init(&s->mu, NULL) != 0) {
    floe_status_set(st, FLOE_RESOURCE_EXHAUSTED, "cannot create the mutex of stack '%s'", name);
    floe__free(s->name);
    floe__free(s);
    return NULL;
  }
  floe__resource_init(&s->res, &stack_ops);
  s->elem_type = elem_type;
  s->max_size = max_size;
  return s;
}

/* ---- kernels ---- */

static const FloeAttrValue *attr(const FloeKernelContext *ctx, const char *name,
                                 FloeAttrKind kind) {
  const FloeAttrValue *v = floe__attrs_get(&ctx->node->attrs, name);
  return v && v->kind == kind ? v : NULL;
}

/* The stack behind input 0, as a new reference; NULL with the kernel's error set. */
static Stack *stack_input(FloeKernelContext *ctx) {
  FloeStatus st = {FLOE_OK, NULL};
  FloeResource *r = floe__resources_from_handle(floe__kernel_ctx_resources(ctx), ctx->inputs[0],
                                                &stack_ops, "input 0 (handle)", &st);
  if (!r) floe__kctx_fail(ctx, &st);
  return (Stack *)r;
}

static floe_code closed_error(FloeKernelContext *ctx, const Stack *s) {
  return floe_status_set(ctx->status, FLOE_FAILED_PRECONDITION,
                         "stack '%s' has been closed (by StackCloseV2, or its step or session "
                         "ended)",
                         s->name);
}

static floe_code create_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  int64_t max_size = 0;
  if (floe__kctx_scalar_i32(ctx, 0, "StackV2 max_size", &max_size) != FLOE_OK)
    return ctx->status->code;
  const FloeAttrValue *name = attr(ctx, "stack_name", FLOE_ATTR_STRING);
  const FloeAttrValue *dt = attr(ctx, "elem_type", FLOE_ATTR_TYPE);
  FloeStatus st = {FLOE_OK, NULL};
  Stack *s = stack_new(name && name->u.s && *name->u.s ? name->u.s : ctx->node->name,
                       dt ? dt->u.type : FLOE_DTYPE_INVALID, max_size, &st);
  if (!s) return floe__kctx_fail(ctx, &st);
  FloeTensor *handle = NULL;
  if (floe__kernel_ctx_add_step_resource(ctx, &s->res, &st) == FLOE_OK)
    handle = floe__resource_obj_handle(&s->res, &st);
  floe__resource_release(&s->res); /* the step keeps it */
  if (!handle) return floe__kctx_fail(ctx, &st);
  floe__kctx_set_output(ctx, 0, handle);
  return FLOE_OK;
}

static floe_code push_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  Stack *s = stack_input(ctx);
  if (!s) return ctx->status->code;
  FloeTensor *elem = ctx->inputs[1];
  floe_code rc = FLOE_OK;
  FloeStatus st = {FLOE_OK, NULL};
  FloeTensor *kept = NULL;
  if (elem->dtype != s->elem_type) {
    rc = floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT,
                         "stack '%s' holds %s; could not push a %s tensor", s->name,
                         floe_dtype_name(s->elem_type), floe_dtype_name(elem->dtype));
    goto out;
  }
  const FloeAttrValue *swap = attr(ctx, "swap_memory", FLOE_ATTR_BOOL);
  if (swap && swap->u.b) {
    kept = floe__tensor_to_device(elem, NULL, &st); /* off the device until popped */
    if (!kept) {
      rc = floe__kctx_fail(ctx, &st);
      goto out;
    }
  } else {
    floe_tensor_retain(elem);
    kept = elem;
  }
  pthread_mutex_lock(&s->mu);
  if (s->closed) {
    rc = closed_error(ctx, s);
  } else if (s->max_size > 0 && s->n >= s->max_size) {
    rc = floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT,
                         "stack '%s' is full: it holds its max_size of %lld elements", s->name,
                         (long long)s->max_size);
  } else if (s->n == s->cap) {
    int64_t cap = s->cap ? 2 * s->cap : 16;
    FloeTensor **v = floe__realloc(s->v, (size_t)cap * sizeof *v);
    if (v) {
      s->v = v;
      s->cap = cap;
    } else {
      rc = floe_status_set(ctx->status, FLOE_NO_MEMORY,
                           "out of memory pushing onto stack '%s' (%lld elements)", s->name,
                           (long long)s->n);
    }
  }
  if (rc == FLOE_OK) {
    s->v[s->n++] = kept;
    kept = NULL;
  }
  pthread_mutex_unlock(&s->mu);
  if (rc == FLOE_OK) {
    floe_tensor_retain(elem);
    floe__kctx_set_output(ctx, 0, elem);
  }
out:
  floe_tensor_release(kept);
  floe__resource_release(&s->res);
  return rc;
}

static bool shape_compatible(const FloeShape *want, const FloeTensor *t) {
  if (want->rank < 0) return true;
  if (want->rank != t->rank) return false;
  for (int i = 0; i < t->rank; i++)
    if (want->dims[i] >= 0 && want->dims[i] != t->dims[i]) return false;
  return true;
}

static floe_code pop_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  Stack *s = stack_input(ctx);
  if (!s) return ctx->status->code;
  const FloeAttrValue *dt = attr(ctx, "elem_type", FLOE_ATTR_TYPE);
  const FloeAttrValue *sh = attr(ctx, "elem_shape", FLOE_ATTR_SHAPE);
  FloeShape want = sh ? sh->u.shape : floe_shape_unknown();
  floe_code rc = FLOE_OK;
  FloeTensor *t = NULL;
  pthread_mutex_lock(&s->mu);
  if (s->closed) {
    rc = closed_error(ctx, s);
  } else if (dt && dt->u.type != s->elem_type) {
    rc = floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT,
                         "stack '%s' holds %s but this node pops %s", s->name,
                         floe_dtype_name(s->elem_type), floe_dtype_name(dt->u.type));
  } else if (s->n == 0) {
    rc = floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT,
                         "stack '%s' is empty: every pop needs an earlier push", s->name);
  } else if (!shape_compatible(&want, s->v[s->n - 1])) {
    FloeShape ts = floe_tensor_shape(s->v[s->n - 1]);
    char a[160], b[160];
    rc = floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT,
                         "stack '%s': the top element has shape %s but this node pops %s",
                         s->name, floe_shape_str(&ts, a, sizeof a),
                         floe_shape_str(&want, b, sizeof b));
  } else {
    t = s->v[--s->n];
  }
  pthread_mutex_unlock(&s->mu);
  FloeStatus st = {FLOE_OK, NULL};
  if (t && !(t = floe__kctx_to_device(ctx, t, &st))) rc = floe__kctx_fail(ctx, &st);
  if (t) floe__kctx_set_output(ctx, 0, t);
  floe__resource_release(&s->res);
  return rc;
}

static floe_code close_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  Stack *s = stack_input(ctx);
  if (!s) return ctx->status->code;
  stack_close(&s->res);
  floe__resource_release(&s->res);
  return FLOE_OK;
}

floe_code floe__stack_kernels_register(FloeRuntime *rt, FloeStatus *st) {
  static const struct {
    const char *op;
    floe_code (*compute)(void *, FloeKernelContext *);
  } kernels[] = {
      {"StackV2", create_compute},
      {"StackPushV2", push_compute},
      {"StackPopV2", pop_compute},
      {"StackCloseV2", close_compute},
  };
  const uint32_t flags = FLOE__KERNEL_RAW_RESOURCES | FLOE_KERNEL_INEXPENSIVE;
  for (size_t i = 0; i < FLOE__ARRAY_LEN(kernels); i++) {
    floe_code rc = floe__core_kernel_add(rt, kernels[i].op, flags, kernels[i].compute, st);
    if (rc != FLOE_OK) return rc;
  }
  return FLOE_OK;
}

/* ---- builders for the core (control-flow gradients) ---- */

FloeOutput floe__stack_new(FloeGraph *g, const char *name, FloeDType elem_type,
                           int64_t max_size) {
  if (max_size > INT32_MAX) {
    floe__graph_fail(g, FLOE_INVALID_ARGUMENT,
                     "stack '%s': max_size %lld does not fit the i32 input of StackV2",
                     name ? name : "StackV2", (long long)max_size);
    return floe_out(NULL, 0);
  }
  FloeStatus st = {FLOE_OK, NULL};
  FloeTensor *t = floe_tensor_scalar_i32(max_size < 0 ? -1 : (int32_t)max_size, &st);
  if (!t) {
    floe__graph_fail(g, FLOE_NO_MEMORY, "stack '%s': out of memory for its max_size",
                     name ? name : "StackV2");
    floe_status_clear(&st);
    return floe_out(NULL, 0);
  }
  char *cname = name ? floe__asprintf("%s/max_size", name) : NULL;
  FloeOutput size = floe_const(g, cname, t);
  floe__free(cname);
  floe_tensor_release(t);
  FloeNodeBuilder *b = floe_node_begin(g, "StackV2", name);
  floe_node_add_input(b, size);
  floe_node_set_attr_type(b, "elem_type", elem_type);
  return floe_out(floe_node_finish(b), 0);
}

FloeOutput floe__stack_push(FloeGraph *g, const char *name, FloeOutput handle, FloeOutput elem,
                            bool swap_memory, FloeNode *after) {
  FloeNodeBuilder *b = floe_node_begin(g, "StackPushV2", name);
  floe_node_add_input(b, handle);
  floe_node_add_input(b, elem);
  if (after) floe_node_add_control_input(b, after);
  floe_node_set_attr_bool(b, "swap_memory", swap_memory);
  return floe_out(floe_node_finish(b), 0);
}

FloeOutput floe__stack_pop(FloeGraph *g, const char *name, FloeOutput handle,
                           FloeDType elem_type, FloeShape elem_shape, FloeNode *after) {
  FloeNodeBuilder *b = floe_node_begin(g, "StackPopV2", name);
  floe_node_add_input(b, handle);
  if (after) floe_node_add_control_input(b, after);
  floe_node_set_attr_type(b, "elem_type", elem_type);
  floe_node_set_attr_shape(b, "elem_shape", elem_shape);
  return floe_out(floe_node_finish(b), 0);
}

FloeNode *floe__stack_close(FloeGraph *g, const char *name, FloeOutput handle) {
  FloeNodeBuilder *b = floe_node_begin(g, "StackCloseV2", name);
  floe_node_add_input(b, handle);
  return floe_node_finish(b);
}
