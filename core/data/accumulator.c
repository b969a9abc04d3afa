/* SPDX-License-Identifier: Apache-2.0 */
/* accumulator.c - conditional accumulators (TensorFlow's ConditionalAccumulator): the
 * gradient aggregation of synchronous replication, a session resource per variable on the
 * variable's task, shared by every session there (each worker's, under between-graph
 * replication).
 *
 * An apply adds a gradient to the sum when its local step is not older than the
 * accumulator's global step, else counts it as dropped (a straggler's stale gradient). A
 * take waits for num_required gradients, outputs sum / count, clears the sum and advances
 * the global step by one; set_global_step raises it. Waiting takes are kept in arrival order
 * and hold no thread (as queue.c's waiters: the kernel returns without calling done, and
 * whoever completes the take calls it outside the lock): an apply, a step cancel (the
 * take's cancellation callback) or a shutdown (session close, container reset). The sum is
 * kept on the host in the accumulator's dtype (f32 or f64).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "data.h"

typedef struct Take Take;

typedef struct Accum {
  FloeResource res;       /* first: the resource manager names it through this */
  FloeDType dtype;
  FloeShape shape;        /* declared; unknown dims take the first gradient's */
  pthread_mutex_t mu;     /* guards everything below */
  FloeTensor *sum;        /* host, NULL when empty */
  int64_t count, global_step, dropped;
  bool shutdown;
  Take *head, *tail;      /* waiting takes, oldest first */
} Accum;

struct Take {
  Take *next;             /* on the accumulator's list while pending */
  Take *done_next;        /* on a completion list */
  Accum *a;               /* a reference */
  atomic_int refs;        /* the kernel's, plus the cancel callback's while registered */
  bool pending;           /* on the list, not yet claimed (under a->mu) */
  int64_t token;          /* cancel registration, > 0 while it may be deregistered */
  int64_t need;
  FloeKernelContext *ctx;
  FloeDoneFn done;
  void *done_arg;
  FloeTensor *out;        /* the mean, once served */
  FloeStatus st;
};

static const char *aname(const Accum *a) { return a->res.name ? a->res.name : "?"; }

/* ---- the resource ---- */

static void accum_destroy(FloeResource *r) {
  Accum *a = (Accum *)r;
  floe_tensor_release(a->sum);
  pthread_mutex_destroy(&a->mu);
  floe__free(a);
}

static void take_unref(Take *t) {
  if (atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) != 1) return;
  floe_tensor_release(t->out);
  floe_status_clear(&t->st);
  floe__resource_release(&t->a->res);
  floe__free(t);
}

/* Unlinks t from a's list (under a->mu). */
static void list_remove(Accum *a, Take *t) {
  Take **p = &a->head, *prev = NULL;
  while (*p && *p != t) prev = *p, p = &(*p)->next;
  if (!*p) return;
  *p = t->next;
  if (a->tail == t) a->tail = prev;
  t->next = NULL;
}

/* Sets the kernel's output (or its error), calls done, drops the kernel's reference. */
static void take_finish(Take *t) {
  FloeKernelContext *ctx = t->ctx;
  if (t->token > 0 && floe__kernel_ctx_cancel_deregister(ctx, t->token)) take_unref(t);
  if (t->st.code == FLOE_OK) {
    FloeStatus st = {FLOE_OK, NULL};
    FloeTensor *v = floe__tensor_to_device(t->out, ctx->device, &st);
    if (v) {
      floe_tensor_release(ctx->outputs[0]);
      ctx->outputs[0] = v;
    } else {
      floe__status_copy(&t->st, &st);
      floe_status_clear(&st);
    }
  }
  if (t->st.code != FLOE_OK)
    floe_status_set(ctx->status, t->st.code, "%s", floe_status_message(&t->st));
  t->done(t->done_arg); /* ctx is not ours after this */
  take_unref(t);
}

static void finish_list(Take *list) {
  while (list) {
    Take *next = list->done_next;
    take_finish(list);
    list = next;
  }
}

static void claim(Accum *a, Take *t, Take **done) {
  list_remove(a, t);
  t->pending = false;
  t->done_next = *done;
  *done = t;
}

/* The mean of what is summed, as a new host tensor; clears the sum and advances the global
 * step. Under a->mu, with count > 0. NULL with st set when out of memory. */
static FloeTensor *take_mean(Accum *a, FloeStatus *st) {
  FloeTensor *m = floe__tensor_alloc(NULL, a->dtype, a->sum->rank, a->sum->dims, st);
  if (!m) return NULL;
  int64_t n = a->sum->num_elements;
  if (a->dtype == FLOE_F32) {
    const float *s = floe_tensor_data(a->sum);
    float *d = floe_tensor_data(m), c = (float)a->count;
    for (int64_t i = 0; i < n; i++) d[i] = s[i] / c;
  } else {
    const double *s = floe_tensor_data(a->sum);
    double *d = floe_tensor_data(m), c = (double)a->count;
    for (int64_t i = 0; i < n; i++) d[i] = s[i] / c;
  }
  floe_tensor_release(a->sum);
  a->sum = NULL;
  a->count = 0;
  a->global_step++;
  return m;
}

/* Serves the oldest takes while enough gradients are in (under a->mu). */
static void process(Accum *a, Take **done) {
  while (a->head && a->count > 0 && a->count >= a->head->need) {
    Take *t = a->head;
    t->out = take_mean(a, &t->st);
    claim(a, t, done);
  }
}

static void accum_shutdown(FloeResource *r) {
  Accum *a = (Accum *)r;
  Take *done = NULL;
  pthread_mutex_lock(&a->mu);
  a->shutdown = true;
  while (a->head) {
    Take *t = a->head;
    floe_status_set(&t->st, FLOE_CANCELLED, "accumulator '%s' was shut down (its session closed "
                    "or its container was reset) while this take waited", aname(a));
    claim(a, t, &done);
  }
  pthread_mutex_unlock(&a->mu);
  finish_list(done);
}

static const FloeResourceOps accum_ops = {"conditional accumulator", accum_shutdown, accum_destroy};

typedef struct AccumSpec {
  FloeDType dtype;
  FloeShape shape;
} AccumSpec;

static FloeResource *accum_make(void *arg, FloeStatus *st) {
  const AccumSpec *sp = arg;
  Accum *a = floe__calloc(1, sizeof *a);
  if (!a || pthread_mutex_init(&a->mu, NULL) != 0) {
    floe__free(a);
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory creating an accumulator");
    return NULL;
  }
  floe__resource_init(&a->res, &accum_ops);
  a->dtype = sp->dtype;
  a->shape = sp->shape;
  return &a->res;
}

/* ---- kernels ---- */

/* ConditionalAccumulator: the accumulator (made on first use) as a handle. */
static floe_code accum_handle_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  const FloeNode *n = ctx->node;
  FloeResourceMgr *m = floe__kernel_ctx_resources(ctx);
  if (!m)
    return floe_status_set(ctx->status, FLOE_FAILED_PRECONDITION,
                           "accumulators live in a session's resource manager, and this step "
                           "has none");
  const FloeAttrValue *dt = floe__node_attr(n, "dtype", FLOE_ATTR_TYPE);
  const FloeAttrValue *shape = floe__node_attr(n, "shape", FLOE_ATTR_SHAPE);
  AccumSpec sp = {dt ? dt->u.type : FLOE_F32, shape ? shape->u.shape : floe_shape_unknown()};
  const char *shared = floe__node_attr_str(n, "shared_name");
  FloeStatus st = {FLOE_OK, NULL};
  FloeResource *r = floe__resources_find_or_add(m, floe__node_attr_str(n, "container"),
                                                *shared ? shared : n->name, &accum_ops,
                                                accum_make, &sp, &st);
  if (r && ((Accum *)r)->dtype != sp.dtype) {
    floe_status_set(&st, FLOE_INVALID_ARGUMENT, "accumulator '%s' holds %s; node '%s' asks for %s",
                    aname((Accum *)r), floe_dtype_name(((Accum *)r)->dtype), n->name,
                    floe_dtype_name(sp.dtype));
    floe__resource_release(r);
    r = NULL;
  }
  FloeTensor *h = r ? floe__resource_obj_handle(r, &st) : NULL;
  floe__resource_release(r); /* the manager keeps it */
  if (!h) return floe__kctx_fail(ctx, &st);
  floe_tensor_release(ctx->outputs[0]);
  ctx->outputs[0] = h;
  return FLOE_OK;
}

/* The accumulator behind input 0, as a new reference; NULL with st set. */
static Accum *input_accum(FloeKernelContext *ctx, FloeStatus *st) {
  return (Accum *)floe__resources_from_handle(floe__kernel_ctx_resources(ctx), ctx->inputs[0],
                                              &accum_ops, "input 0 (the accumulator handle)", st);
}

static int64_t scalar_i64(const FloeTensor *t, bool *ok) {
  int64_t v = 0;
  *ok = t && t->num_elements == 1 && (t->dtype == FLOE_I64 || t->dtype == FLOE_I32);
  if (*ok) v = t->dtype == FLOE_I64 ? *(const int64_t *)floe_tensor_data(t)
                                    : *(const int32_t *)floe_tensor_data(t);
  return v;
}

/* Whether g fits the accumulator's declared shape (and the sum's, once there is one). */
static bool fits(const Accum *a, const FloeTensor *g) {
  if (a->sum) {
    if (a->sum->rank != g->rank) return false;
    for (int i = 0; i < g->rank; i++)
      if (a->sum->dims[i] != g->dims[i]) return false;
    return true;
  }
  if (a->shape.rank < 0) return true;
  if (a->shape.rank != g->rank) return false;
  for (int i = 0; i < g->rank; i++)
    if (a->shape.dims[i] >= 0 && a->shape.dims[i] != g->dims[i]) return false;
  return true;
}

static floe_code apply_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  FloeStatus st = {FLOE_OK, NULL};
  Accum *a = input_accum(ctx, &st);
  if (!a) return floe__kctx_fail(ctx, &st);
  bool ok;
  int64_t step = scalar_i64(ctx->inputs[1], &ok);
  FloeTensor *g = ok ? floe__tensor_to_device(ctx->inputs[2], NULL, &st) : NULL;
  Take *done = NULL;
  if (!ok) {
    floe_status_set(&st, FLOE_INVALID_ARGUMENT, "accumulator '%s': local_step must be an integer "
                    "scalar", aname(a));
  } else if (g) {
    char want[96], have[96];
    pthread_mutex_lock(&a->mu);
    if (a->shutdown) {
      floe_status_set(&st, FLOE_CANCELLED, "accumulator '%s' was shut down", aname(a));
    } else if (g->dtype != a->dtype) {
      floe_status_set(&st, FLOE_INVALID_ARGUMENT, "accumulator '%s' holds %s; the gradient is %s",
                      aname(a), floe_dtype_name(a->dtype), floe_dtype_name(g->dtype));
    } else if (!fits(a, g)) {
      FloeShape gs = floe_shape_make(g->rank, g->dims);
      FloeShape hs = a->sum ? floe_shape_make(a->sum->rank, a->sum->dims) : a->shape;
      floe_status_set(&st, FLOE_INVALID_ARGUMENT, "accumulator '%s' holds gradients of shape %s; "
                      "this one is %s", aname(a), floe_shape_str(&hs, want, sizeof want),
                      floe_shape_str(&gs, have, sizeof have));
    } else if (step < a->global_step) {
      a->dropped++; /* a stale gradient: computed before the last update */
    } else if (!a->sum) {
      a->sum = floe__tensor_alloc(NULL, a->dtype, g->rank, g->dims, &st);
      if (a->sum) {
        memcpy(floe_tensor_data(a->sum), floe_tensor_data(g), g->nbytes);
        a->count = 1;
      }
    } else {
      int64_t n = g->num_elements;
      if (a->dtype == FLOE_F32) {
        float *s = floe_tensor_data(a->sum);
        const float *x = floe_tensor_data(g);
        for (int64_t i = 0; i < n; i++) s[i] += x[i];
      } else {
        double *s = floe_tensor_data(a->sum);
        const double *x = floe_tensor_data(g);
        for (int64_t i = 0; i < n; i++) s[i] += x[i];
      }
      a->count++;
    }
    if (st.code == FLOE_OK) process(a, &done);
    pthread_mutex_unlock(&a->mu);
  }
  floe_tensor_release(g);
  finish_list(done);
  floe__resource_release(&a->res);
  return st.code == FLOE_OK ? FLOE_OK : floe__kctx_fail(ctx, &st);
}

/* The step of t's kernel was cancelled (a node failed, a timeout, the session closed). */
static void cancel_cb(void *arg) {
  Take *t = arg;
  Accum *a = t->a;
  pthread_mutex_lock(&a->mu);
  bool mine = t->pending;
  if (mine) {
    list_remove(a, t);
    t->pending = false;
    t->token = 0; /* taken by this cancel: nothing to deregister */
    floe_status_set(&t->st, FLOE_CANCELLED, "accumulator '%s': the step was cancelled while this "
                    "take waited for gradients", aname(a));
  }
  pthread_mutex_unlock(&a->mu);
  if (mine) take_finish(t);
  take_unref(t); /* the callback's reference */
}

static void take_async(void *state, FloeKernelContext *ctx, FloeDoneFn done, void *done_arg) {
  (void)state;
  FloeStatus st = {FLOE_OK, NULL};
  Accum *a = input_accum(ctx, &st);
  bool ok = false;
  int64_t need = a ? scalar_i64(ctx->inputs[1], &ok) : 0;
  if (a && (!ok || need < 1))
    floe_status_set(&st, FLOE_INVALID_ARGUMENT, "accumulator '%s': num_required must be a "
                    "scalar of at least 1", aname(a));
  Take *t = st.code == FLOE_OK ? floe__calloc(1, sizeof *t) : NULL;
  if (st.code == FLOE_OK && !t) floe_status_set(&st, FLOE_NO_MEMORY, "out of memory");
  if (!t) {
    floe__kctx_fail(ctx, &st);
    if (a) floe__resource_release(&a->res);
    done(done_arg);
    return;
  }
  t->a = a; /* takes over the reference */
  atomic_init(&t->refs, 1);
  t->need = need;
  t->ctx = ctx;
  t->done = done;
  t->done_arg = done_arg;
  Take *served = NULL;
  bool failed = false;
  pthread_mutex_lock(&a->mu);
  if (a->shutdown) {
    floe_status_set(&t->st, FLOE_CANCELLED, "accumulator '%s' was shut down", aname(a));
    failed = true;
  } else {
    if (a->tail) a->tail->next = t;
    else a->head = t;
    a->tail = t;
    t->pending = true;
    process(a, &served);
    int64_t token = t->pending ? floe__kernel_ctx_on_cancel(ctx, cancel_cb, t) : 0;
    if (token < 0) {
      list_remove(a, t);
      t->pending = false;
      floe_status_set(&t->st, FLOE_CANCELLED, "accumulator '%s': the step was cancelled", aname(a));
      failed = true;
    } else if (token > 0) {
      t->token = token;
      atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
    }
  }
  pthread_mutex_unlock(&a->mu);
  if (failed) take_finish(t);
  finish_list(served);
}

static floe_code set_step_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  FloeStatus st = {FLOE_OK, NULL};
  Accum *a = input_accum(ctx, &st);
  if (!a) return floe__kctx_fail(ctx, &st);
  bool ok;
  int64_t step = scalar_i64(ctx->inputs[1], &ok);
  if (ok) {
    pthread_mutex_lock(&a->mu);
    if (step > a->global_step) a->global_step = step;
    pthread_mutex_unlock(&a->mu);
  } else {
    floe_status_set(&st, FLOE_INVALID_ARGUMENT, "accumulator '%s': new_global_step must be an "
                    "integer scalar", aname(a));
  }
  floe__resource_release(&a->res);
  return ok ? FLOE_OK : floe__kctx_fail(ctx, &st);
}

static floe_code query_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  FloeStatus st = {FLOE_OK, NULL};
  Accum *a = input_accum(ctx, &st);
  if (!a) return floe__kctx_fail(ctx, &st);
  bool dropped = strcmp(ctx->node->op->name, "AccumulatorNumDropped") == 0;
  pthread_mutex_lock(&a->mu);
  int64_t v = dropped ? a->dropped : a->count;
  pthread_mutex_unlock(&a->mu);
  floe__resource_release(&a->res);
  int32_t v32 = (int32_t)(v > INT32_MAX ? INT32_MAX : v);
  FloeTensor *t = dropped ? floe_tensor_scalar_i64(v, &st) : floe_tensor_scalar_i32(v32, &st);
  FloeTensor *out = t ? floe__tensor_to_device(t, ctx->device, &st) : NULL;
  floe_tensor_release(t);
  if (!out) return floe__kctx_fail(ctx, &st);
  floe_tensor_release(ctx->outputs[0]);
  ctx->outputs[0] = out;
  return FLOE_OK;
}

floe_code floe__accumulator_kernels_register(FloeRuntime *rt, FloeStatus *st) {
  /* Handles, not variable values, for every resource input (ConditionalAccumulator's
   * variable input only places it); the sums live on the host. */
  uint32_t flags = FLOE__KERNEL_RAW_RESOURCES | FLOE__KERNEL_HOST_ONLY;
  floe_code rc;
  if ((rc = floe__core_kernel_add(rt, "ConditionalAccumulator", flags | FLOE_KERNEL_INEXPENSIVE,
                                  accum_handle_compute, st)) != FLOE_OK ||
      (rc = floe__core_kernel_add(rt, "AccumulatorApplyGradient", flags, apply_compute, st)) !=
          FLOE_OK ||
      (rc = floe__core_kernel_add_async(rt, "AccumulatorTakeGradient", flags, take_async, st)) !=
          FLOE_OK ||
      (rc = floe__core_kernel_add(rt, "AccumulatorSetGlobalStep", flags | FLOE_KERNEL_INEXPENSIVE,
                                  set_step_compute, st)) != FLOE_OK ||
      (rc = floe__core_kernel_add(rt, "AccumulatorNumAccumulated",
                                  flags | FLOE_KERNEL_INEXPENSIVE, query_compute, st)) != FLOE_OK)
    return rc;
  return floe__core_kernel_add(rt, "AccumulatorNumDropped", flags | FLOE_KERNEL_INEXPENSIVE,
                               query_compute, st);
}
