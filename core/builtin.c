/* SPDX-License-Identifier: Apache-2.0 */
/* builtin.c - the top of libfloe: the table of the core's built-in kernel sets, and the
 * runtime constructors that use it (floe_runtime_new, floe_runtime_default).
 *
 * Layers call only the layers below them (docs/architecture.md); the kernels of the higher
 * layers (checkpoints' Save / Restore, queues, readers) reach a runtime through this table,
 * as SQLite's built-in extensions do, and the standard gradients are registered before any
 * plugin can register its own. */
#include <pthread.h>
#include <stdatomic.h>

#include "core.h"

/* In registration order; a plugin's kernel of a device's own type wins over all of these. */
static const FloeKernelSetFn builtin_kernel_sets[] = {
    floe__exec_kernels_register,       /* Const, variables, control flow, TensorArrays,
                                          stacks, Send / Recv (exec/) */
    floe__checkpoint_kernels_register, /* Save, Restore (train/) */
    floe__queue_kernels_register,      /* queues (data/) */
    floe__reader_kernels_register,     /* readers (data/) */
    floe__accumulator_kernels_register, /* conditional accumulators (data/) */
};

/* Caller owns the runtime (floe_runtime_free); opts and its strings are borrowed for the
 * call. */
FloeRuntime *floe_runtime_new(const FloeRuntimeOptions *opts, FloeStatus *status) {
  /* The standard gradients first, so a plugin's cannot take a standard op's place. */
  if (floe__grads_init(status) != FLOE_OK) return NULL;
  return floe__runtime_create(opts, builtin_kernel_sets, (int)FLOE__ARRAY_LEN(builtin_kernel_sets),
                              status);
}

/* The process-wide runtime (floe_runtime_default): created once, never freed. */
static pthread_once_t default_once = PTHREAD_ONCE_INIT;
static FloeRuntime *default_rt;
static _Atomic(FloeThreadPool *) default_pool;
static FloeStatus default_error;

static void default_create(void) {
  FloeStatus st = {FLOE_OK, NULL};
  default_rt = floe_runtime_new(NULL, &st);
  if (default_rt) {
    default_rt->is_default = true;
    atomic_store(&default_pool, default_rt->pool);
  } else {
    default_error = st; /* kept for every later caller */
  }
}

/* Borrowed: created on first use, lives until exit. */
FloeRuntime *floe_runtime_default(FloeStatus *status) {
  pthread_once(&default_once, default_create);
  if (!default_rt)
    floe_status_set(status, default_error.code, "cannot create the default runtime: %s",
                    floe_status_message(&default_error));
  return default_rt;
}

/* Borrowed from the default runtime (never freed); NULL before it exists. */
FloeThreadPool *floe__runtime_default_pool(void) { return atomic_load(&default_pool); }
