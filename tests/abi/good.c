/* SPDX-License-Identifier: Apache-2.0 */
/* good.c - a well-behaved test plugin (floe-abitest.so): the custom op AbiTestTwice
 * (y = 2x) with its shape function, two CPU kernels of different priorities, the custom op
 * AbiTestAsyncTwice (y = 2x again) whose CPU kernel is asynchronous, the custom op
 * AbiTestMisbehave whose asynchronous CPU kernel breaks the kernel rules on request (for the
 * executor's checks), and a fake device type "AbiTest" (upper-cased by the core) with its own
 * memory space.
 *
 * The low-priority kernel computes 2x + 1, so tests can tell which kernel ran. The plugin
 * records its lifecycle in abitest_lifecycle ('S' shutdown, 'D' device destroy), exported
 * for the tests alone (a real plugin exports only floe_plugin_init). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <floe/floe_plugin.h>

FLOE_PLUGIN_EXPORT char abitest_lifecycle[256];

static const FloeHostApi *host;

static void lifecycle(char event) {
  size_t n = strlen(abitest_lifecycle);
  if (n + 1 < sizeof abitest_lifecycle) abitest_lifecycle[n] = event;
}

/* ---- the op ---- */

static floe_code twice_shape(const FloeHostApi *h, FloeShapeContext *sctx) {
  FloeShape in = h->shape_input(sctx, 0);
  h->shape_set_output(sctx, 0, &in);
  return FLOE_OK;
}

static const char *const twice_inputs[] = {"x: T"};
static const char *const twice_outputs[] = {"y: T"};
static const char *const twice_attrs[] = {"T: type in {f32,f64,i32} = f32"};

/* ---- the kernels: y[i] = 2 x[i] + add, split over the shared pool ---- */

typedef struct TwiceJob {
  FloeDType dt;
  const void *x;
  void *y;
  double add;
} TwiceJob;

static void twice_shard(void *arg, int64_t begin, int64_t end) {
  const TwiceJob *j = arg;
  for (int64_t i = begin; i < end; i++) {
    if (j->dt == FLOE_F32)
      ((float *)j->y)[i] = 2.0f * ((const float *)j->x)[i] + (float)j->add;
    else
      ((double *)j->y)[i] = 2.0 * ((const double *)j->x)[i] + j->add;
  }
}

static floe_code twice_compute(void *state, FloeKernelContext *ctx) {
  const double *add = state; /* user_data: no create slot */
  const FloeTensor *x = host->ctx_input(ctx, 0);
  FloeTensor *y;
  floe_code rc = host->ctx_allocate_output(ctx, 0, host->tensor_rank(x), host->tensor_dims(x), &y);
  if (rc != FLOE_OK) return rc;
  TwiceJob job = {host->tensor_dtype(x), host->tensor_data(x), host->tensor_data(y), *add};
  if (job.dt != FLOE_F32 && job.dt != FLOE_F64)
    return host->ctx_set_error(ctx, FLOE_INTERNAL, "constraint let %s through",
                               host->dtype_name(job.dt));
  host->parallel_for(host->tensor_num_elements(x), 1, twice_shard, &job);
  return FLOE_OK;
}

static const double add_fast = 0.0, add_marked = 1.0;

static floe_code add_kernel(FloePluginRegistrar *reg, uint32_t dtypes, int32_t priority,
                            const double *add) {
  FloeTypeConstraint c = {"T", dtypes};
  FloeKernelDef k;
  memset(&k, 0, sizeof k);
  k.struct_size = sizeof k;
  k.op = "AbiTestTwice";
  k.device_type = "CPU";
  k.constraints = &c;
  k.num_constraints = 1;
  k.priority = priority;
  k.user_data = (void *)add;
  k.compute = twice_compute;
  return reg->register_kernel(reg, &k);
}

/* ---- the asynchronous kernel: compute_async hands the work to the inter-op pool
 * (host->schedule) and returns; the task sets y = 2x (or, with fail = true, an error) and
 * then calls done on that thread. delay_us makes completions arrive out of order;
 * done_inline = true finishes before compute_async returns, as the ABI allows. ---- */

static const char *const async_inputs[] = {"x: f32"};
static const char *const async_outputs[] = {"y: f32"};
static const char *const async_attrs[] = {"fail: bool = false", "delay_us: int >= 0 = 0",
                                          "done_inline: bool = false"};

typedef struct AsyncState {
  int fail, done_inline;
  int64_t delay_us;
} AsyncState;

typedef struct AsyncCall {
  const AsyncState *state;
  FloeKernelContext *ctx; /* valid until done is called */
  FloeDoneFn done;
  void *done_arg;
} AsyncCall;

static floe_code async_create(const FloeHostApi *h, FloeKernelInit *init, void *user_data,
                              void **state) {
  AsyncState *st = h->alloc(sizeof *st);
  if (!st) return h->init_set_error(init, FLOE_NO_MEMORY, "out of memory for the kernel state");
  const FloeAttrs *a = h->init_attrs(init);
  if (h->attr_bool(a, "fail", &st->fail) != FLOE_OK ||
      h->attr_bool(a, "done_inline", &st->done_inline) != FLOE_OK ||
      h->attr_int(a, "delay_us", &st->delay_us) != FLOE_OK) {
    h->free(st);
    return h->init_set_error(init, FLOE_INTERNAL, "attributes missing (the core fills defaults)");
  }
  *state = st;
  return FLOE_OK;
}

static void async_destroy(void *state) { host->free(state); }

static void async_finish(void *arg) {
  AsyncCall *c = arg;
  FloeKernelContext *ctx = c->ctx;
  if (c->state->delay_us > 0) {
    struct timespec ts = {0, (long)c->state->delay_us * 1000};
    nanosleep(&ts, NULL);
  }
  if (c->state->fail) {
    host->ctx_set_error(ctx, FLOE_ABORTED, "asynchronous failure on request (fail = true)");
  } else {
    const FloeTensor *x = host->ctx_input(ctx, 0);
    FloeTensor *y;
    if (host->ctx_allocate_output(ctx, 0, host->tensor_rank(x), host->tensor_dims(x), &y) ==
        FLOE_OK) {
      const float *xs = host->tensor_data(x);
      float *ys = host->tensor_data(y);
      for (int64_t i = 0; i < host->tensor_num_elements(x); i++) ys[i] = 2.0f * xs[i];
    }
  }
  FloeDoneFn done = c->done;
  void *done_arg = c->done_arg;
  host->free(c);
  done(done_arg); /* ctx is the core's again from here on */
}

static void async_compute(void *state, FloeKernelContext *ctx, FloeDoneFn done, void *done_arg) {
  AsyncCall *c = host->alloc(sizeof *c);
  if (!c) {
    host->ctx_set_error(ctx, FLOE_NO_MEMORY, "out of memory for an asynchronous call");
    done(done_arg);
    return;
  }
  *c = (AsyncCall){state, ctx, done, done_arg};
  /* Without a pool (or queue space) the work runs here: still a correct completion. */
  if (c->state->done_inline || host->schedule(async_finish, c) != FLOE_OK) async_finish(c);
}

static floe_code add_async_op(FloePluginRegistrar *reg) {
  FloeOpDef op;
  memset(&op, 0, sizeof op);
  op.struct_size = sizeof op;
  op.name = "AbiTestAsyncTwice";
  op.inputs = async_inputs;
  op.num_inputs = 1;
  op.outputs = async_outputs;
  op.num_outputs = 1;
  op.attrs = async_attrs;
  op.num_attrs = 3;
  op.shape_fn = twice_shape;
  op.doc = "y = 2x computed asynchronously on the pool (a custom op of the ABI tests)";
  floe_code rc = reg->register_op(reg, &op);
  if (rc != FLOE_OK) return rc;
  FloeKernelDef k;
  memset(&k, 0, sizeof k);
  k.struct_size = sizeof k;
  k.op = "AbiTestAsyncTwice";
  k.device_type = "CPU";
  k.create = async_create;
  k.compute_async = async_compute;
  k.destroy = async_destroy;
  return reg->register_kernel(reg, &k);
}

/* ---- AbiTestMisbehave: y = x from an asynchronous kernel that breaks a rule on request
 * (attribute mode; its shape function promises y the shape of x):
 *   "ok"           y = x, done once
 *   "wrong_shape"  y has shape [1], whatever x's
 *   "wrong_dim"    y has x's shape with its last dimension one larger
 *   "unset"        done without setting y
 *   "done_twice"   y = x, then done twice before compute_async returns
 *   "done_late"    y = x and done once; done is called again by abitest_call_done_again()
 *   "never_done"   the call is parked: y = x and done only when abitest_release_parked()
 *                  runs (the call's context stays valid until done, as the ABI says)
 * The two functions are exported for the tests alone. ---- */

static const char *const misbehave_inputs[] = {"x: f32"};
static const char *const misbehave_outputs[] = {"y: f32"};
static const char *const misbehave_attrs[] = {"mode: string = ok"};

enum { MB_OK, MB_WRONG_SHAPE, MB_WRONG_DIM, MB_UNSET, MB_DONE_TWICE, MB_DONE_LATE, MB_NEVER_DONE };
static const char *const mb_modes[] = {"ok", "wrong_shape", "wrong_dim", "unset",
                                       "done_twice", "done_late", "never_done"};
static const int mb_codes[] = {MB_OK, MB_WRONG_SHAPE, MB_WRONG_DIM, MB_UNSET,
                               MB_DONE_TWICE, MB_DONE_LATE, MB_NEVER_DONE};

typedef struct Parked {
  FloeKernelContext *ctx; /* NULL for done_late: only done is called again */
  FloeDoneFn done;
  void *done_arg;
  struct Parked *next;
} Parked;

static pthread_mutex_t parked_mu = PTHREAD_MUTEX_INITIALIZER;
static Parked *parked, *called; /* never_done calls; done_late calls already done once */

static floe_code misbehave_create(const FloeHostApi *h, FloeKernelInit *init, void *user_data,
                                  void **state) {
  const char *mode = NULL;
  if (h->attr_string(h->init_attrs(init), "mode", &mode) != FLOE_OK || !mode)
    return h->init_set_error(init, FLOE_INTERNAL, "attribute mode missing (the core fills defaults)");
  for (size_t m = 0; m < sizeof mb_modes / sizeof mb_modes[0]; m++) {
    if (strcmp(mode, mb_modes[m]) != 0) continue;
    *state = (void *)&mb_codes[m];
    return FLOE_OK;
  }
  return h->init_set_error(init, FLOE_INVALID_ARGUMENT, "unknown mode '%s'", mode);
}

/* y = x, or the shape the mode asks for (its values: x's, as far as they go). */
static void misbehave_output(int mode, FloeKernelContext *ctx) {
  const FloeTensor *x = host->ctx_input(ctx, 0);
  int rank = host->tensor_rank(x);
  int64_t dims[FLOE_MAX_DIMS];
  memcpy(dims, host->tensor_dims(x), (size_t)rank * sizeof dims[0]);
  if (mode == MB_WRONG_SHAPE) {
    rank = 1;
    dims[0] = 1;
  } else if (mode == MB_WRONG_DIM && rank > 0) {
    dims[rank - 1]++;
  }
  FloeTensor *y;
  if (host->ctx_allocate_output(ctx, 0, rank, dims, &y) != FLOE_OK) return;
  int64_t n = host->tensor_num_elements(y), nx = host->tensor_num_elements(x);
  const float *xs = host->tensor_data(x);
  float *ys = host->tensor_data(y);
  for (int64_t i = 0; i < n; i++) ys[i] = i < nx ? xs[i] : 0.0f;
}

static void park(Parked **list, FloeKernelContext *ctx, FloeDoneFn done, void *done_arg) {
  Parked *p = host->alloc(sizeof *p);
  if (!p) {
    if (ctx) host->ctx_set_error(ctx, FLOE_NO_MEMORY, "out of memory parking a call");
    if (ctx) done(done_arg);
    return;
  }
  *p = (Parked){ctx, done, done_arg, NULL};
  pthread_mutex_lock(&parked_mu);
  p->next = *list;
  *list = p;
  pthread_mutex_unlock(&parked_mu);
}

/* Takes the whole list and calls done for each entry (y = x first for parked calls). */
static int drain(Parked **list) {
  pthread_mutex_lock(&parked_mu);
  Parked *p = *list;
  *list = NULL;
  pthread_mutex_unlock(&parked_mu);
  int n = 0;
  while (p) {
    Parked *next = p->next;
    if (p->ctx) misbehave_output(MB_OK, p->ctx);
    p->done(p->done_arg);
    host->free(p);
    p = next;
    n++;
  }
  return n;
}

FLOE_PLUGIN_EXPORT int abitest_release_parked(void) { return drain(&parked); }
FLOE_PLUGIN_EXPORT int abitest_call_done_again(void) { return drain(&called); }

static void misbehave_compute(void *state, FloeKernelContext *ctx, FloeDoneFn done,
                              void *done_arg) {
  int mode = *(const int *)state;
  switch (mode) {
    case MB_NEVER_DONE:
      park(&parked, ctx, done, done_arg);
      return;
    case MB_UNSET:
      done(done_arg);
      return;
    case MB_DONE_TWICE:
      misbehave_output(MB_OK, ctx);
      done(done_arg);
      done(done_arg);
      return;
    case MB_DONE_LATE:
      misbehave_output(MB_OK, ctx);
      park(&called, NULL, done, done_arg); /* before done: ctx is not ours after it */
      done(done_arg);
      return;
    default:
      misbehave_output(mode, ctx);
      done(done_arg);
      return;
  }
}

static floe_code add_misbehave_op(FloePluginRegistrar *reg) {
  FloeOpDef op;
  memset(&op, 0, sizeof op);
  op.struct_size = sizeof op;
  op.name = "AbiTestMisbehave";
  op.inputs = misbehave_inputs;
  op.num_inputs = 1;
  op.outputs = misbehave_outputs;
  op.num_outputs = 1;
  op.attrs = misbehave_attrs;
  op.num_attrs = 1;
  op.shape_fn = twice_shape; /* y: the shape of x */
  op.doc = "y = x from a kernel that breaks the kernel rules on request (ABI tests)";
  floe_code rc = reg->register_op(reg, &op);
  if (rc != FLOE_OK) return rc;
  FloeKernelDef k;
  memset(&k, 0, sizeof k);
  k.struct_size = sizeof k;
  k.op = "AbiTestMisbehave";
  k.device_type = "CPU";
  k.create = misbehave_create;
  k.compute_async = misbehave_compute;
  return reg->register_kernel(reg, &k);
}

/* ---- the fake device: plain malloc'd memory, flagged as not host-addressable ---- */

typedef struct AbiDevice {
  int allocations;
} AbiDevice;

static floe_code dev_props(void *state, FloeDeviceProps *p) {
  strcpy(p->type, "AbiTest");
  strcpy(p->description, "simulated device of the ABI tests");
  p->memory_bytes = (uint64_t)1 << 30;
  p->peak_flops[FLOE_F32] = 1e9;
  p->memory_bandwidth = 1e9;
  p->flags = 0;
  p->ordinal = 0;
  return FLOE_OK;
}

static floe_code dev_allocate(void *state, size_t bytes, size_t alignment, void **ptr) {
  size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  void *p = aligned_alloc(alignment, rounded ? rounded : alignment);
  if (!p) return FLOE_RESOURCE_EXHAUSTED;
  ((AbiDevice *)state)->allocations++;
  *ptr = p;
  return FLOE_OK;
}

static void dev_deallocate(void *state, void *ptr, size_t bytes) {
  ((AbiDevice *)state)->allocations--;
  free(ptr);
}

static floe_code dev_copy(void *state, void *dst, const void *src, size_t n) {
  memcpy(dst, src, n);
  return FLOE_OK;
}

static void dev_destroy(void *state) {
  lifecycle('D');
  free(state);
}

static void plugin_shutdown(void *arg) { lifecycle('S'); }

FLOE_PLUGIN_EXPORT floe_code floe_plugin_init(const FloeHostApi *h, FloePluginRegistrar *reg) {
  floe_code rc = FLOE_PLUGIN_DECLARE(reg, "abitest", "1.2.3");
  if (rc != FLOE_OK) return rc;
  host = h;

  FloeOpDef op;
  memset(&op, 0, sizeof op);
  op.struct_size = sizeof op;
  op.name = "AbiTestTwice";
  op.inputs = twice_inputs;
  op.num_inputs = 1;
  op.outputs = twice_outputs;
  op.num_outputs = 1;
  op.attrs = twice_attrs;
  op.num_attrs = 1;
  op.shape_fn = twice_shape;
  op.doc = "y = 2x (a custom op of the ABI tests)";
  if ((rc = reg->register_op(reg, &op)) != FLOE_OK) return rc;
  if ((rc = add_kernel(reg, FLOE_DTYPE_BIT(FLOE_F32), 10, &add_fast)) != FLOE_OK) return rc;
  if ((rc = add_kernel(reg, FLOE_DTYPE_BIT(FLOE_F32) | FLOE_DTYPE_BIT(FLOE_F64), 0, &add_marked)) != FLOE_OK)
    return rc;
  if ((rc = add_async_op(reg)) != FLOE_OK) return rc;
  if ((rc = add_misbehave_op(reg)) != FLOE_OK) return rc;
  /* d(2x) = 2 dy: AbiTestTwice differentiates with itself (ABI 1.2). */
  static const char *const grad_from[] = {"dy:0"};
  static const int32_t grad_of_x[] = {0};
  static const char *const grad_attrs[] = {"T"};
  FloeGradientDef gd;
  memset(&gd, 0, sizeof gd);
  gd.struct_size = sizeof gd;
  gd.op = "AbiTestTwice";
  gd.grad_op = "AbiTestTwice";
  gd.grad_inputs = grad_from;
  gd.num_grad_inputs = 1;
  gd.input_grads = grad_of_x;
  gd.num_input_grads = 1;
  gd.copy_attrs = grad_attrs;
  gd.num_copy_attrs = 1;
  if ((rc = reg->register_gradient(reg, &gd)) != FLOE_OK) return rc;

  AbiDevice *state = calloc(1, sizeof *state);
  if (!state) return FLOE_NO_MEMORY;
  FloeDeviceFns d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  d.state = state;
  d.get_props = dev_props;
  d.allocate = dev_allocate;
  d.deallocate = dev_deallocate;
  d.copy_h2d = dev_copy;
  d.copy_d2h = dev_copy;
  d.copy_d2d = dev_copy;
  d.destroy = dev_destroy;
  if ((rc = reg->register_device(reg, &d)) != FLOE_OK) {
    free(state);
    return rc;
  }
  reg->set_shutdown(reg, plugin_shutdown, NULL);
  h->log(FLOE_LOG_ERROR, "abitest %s initialised", "1.2.3"); /* silent unless FLOE_LOG_LEVEL */
  return FLOE_OK;
}
