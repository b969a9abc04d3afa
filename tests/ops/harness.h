/* SPDX-License-Identifier: Apache-2.0 */
/* harness.h - run single ops through a real graph + session for the op tests.
 * Each input is fed through a Placeholder (so kernels see runtime tensors, never folded
 * constants); the node under test gets the attributes set by `attrs`. */
#ifndef FLOE_TEST_HARNESS_H
#define FLOE_TEST_HARNESS_H

#include <check.h>
#include <floe/floe.h>
#include <stdbool.h>

/* Sets attributes on the node under test; may be NULL. */
typedef void (*harness_attrs_fn)(FloeNodeBuilder *b, void *arg);

/* Run `op` once. inputs[0..n_inputs) are host tensors (borrowed). list_sizes, when non-NULL,
 * groups consecutive inputs into the op's input arguments (e.g. {3, 1} for Concat with
 * three values and an axis); NULL means one tensor per argument. On success outputs[i]
 * receive new references (caller releases). Returns the status code; the message is in
 * st when non-NULL. device: NULL for the default device, else e.g. "cpu:0". */
floe_code harness_run_op(const char *op, const char *device, FloeTensor *const *inputs,
                         int n_inputs, const int *list_sizes, int n_lists,
                         harness_attrs_fn attrs, void *arg, FloeTensor **outputs,
                         int n_outputs, FloeStatus *st);

/* Tensor makers; abort the test (ck_abort) on failure. Caller releases. */
FloeTensor *harness_tensor(FloeDType dt, int rank, const int64_t *dims, const void *data);
FloeTensor *harness_f32(int rank, const int64_t *dims, const float *data);
FloeTensor *harness_f64(int rank, const int64_t *dims, const double *data);
FloeTensor *harness_i32(int rank, const int64_t *dims, const int32_t *data);
FloeTensor *harness_i64(int rank, const int64_t *dims, const int64_t *data);
/* Uniform values in [lo, hi) from a fixed seed (deterministic, independent of Floe's RNG). */
FloeTensor *harness_random(FloeDType dt, int rank, const int64_t *dims, uint64_t seed,
                           double lo, double hi);

/* A tensor holding v[0..n) converted to dt (rounded / wrapped as a cast would). */
FloeTensor *harness_from_doubles(FloeDType dt, int rank, const int64_t *dims, const double *v);
/* Product of dims. */
int64_t harness_count(int rank, const int64_t *dims);
/* Elements of t as doubles; caller frees with free(). */
double *harness_values(const FloeTensor *t);

/* Element value as double (any dtype). */
double harness_get(const FloeTensor *t, int64_t i);

/* Fail the test unless got and want have the same dtype and shape and every element
 * satisfies |got - want| <= atol + rtol * |want| (NaN equals NaN). `what` names the case. */
void harness_assert_close(const FloeTensor *got, const FloeTensor *want, double rtol,
                          double atol, const char *what);

/* A runtime of `threads` pool threads (the plugins of FLOE_PLUGIN_PATH), for tests that build
 * their own sessions; aborts the test on failure. Caller frees with floe_runtime_free. */
FloeRuntime *harness_runtime(int threads);
/* Runs every test of s (CK_NORMAL output) and frees it: the exit status for main (0 when all
 * passed). */
int harness_run_suite(Suite *s);
/* Kernel calls of op on device (short name) in s's profile (floe_session_set_profiling). */
int64_t harness_profile_calls(FloeSession *s, const char *op, const char *device);
/* Whether a profile row's op (a fused node's names what it fused: "_FusedConv(Conv+Relu)")
 * is op. */
bool harness_profile_op_is(const char *row, const char *op);
/* A session of g (whose sticky error must be clear) on rt; aborts the test on failure.
 * Caller frees with floe_session_free. */
FloeSession *harness_session(const FloeGraph *g, FloeRuntime *rt);
/* The same with session options opts (NULL: the defaults, borrowed for the call); what
 * (NULL: none) starts the messages of a failure. */
FloeSession *harness_session_opts(const FloeGraph *g, const FloeSessionOptions *opts,
                                  const char *what);
/* harness_session, then one run of every variable's initialiser (floe_variables_initializer
 * adds it to g). */
FloeSession *harness_session_init(FloeGraph *g, FloeRuntime *rt);

/* One run of s (arguments as floe_session_run; outs get new references, caller releases);
 * aborts the test on failure, what (NULL: none) starting the message. */
void harness_run(FloeSession *s, const FloeFeed *feeds, int n_feeds, const char *const *fetches,
                 int n_fetches, const char *const *targets, int n_targets, FloeTensor **outs,
                 const char *what);
/* One fetch (caller releases) / one target of s; abort the test on failure. */
FloeTensor *harness_fetch(FloeSession *s, const FloeFeed *feeds, int n_feeds, const char *fetch);
/* Concat(parts..., axis) named name, its axis a Const named name + "_axis". */
FloeOutput harness_concat(FloeGraph *g, const char *name, const FloeOutput *parts, int n,
                          int axis);
void harness_run_target(FloeSession *s, const char *target);
/* One run of g (borrowed) on rt (NULL: the default runtime): the graph's sticky error, else
 * the session's or the run's code, the message in st. outs as harness_run. */
floe_code harness_run_graph(const FloeGraph *g, FloeRuntime *rt, const FloeFeed *feeds,
                            int n_feeds, const char *const *fetches, int n_fetches,
                            FloeTensor **outs, FloeStatus *st);

/* A variable made without the variables API: VarHandleOp name of dt and shape (rank, dims),
 * its AssignVariableOp "<name>/init" from the Placeholder "<name>/init_value", and its
 * ReadVariableOp "<name>/read"; returns the handle (nodes belong to g). */
FloeOutput harness_variable(FloeGraph *g, const char *name, FloeDType dt, int rank,
                            const int64_t *dims);

/* A new empty folder "$TMPDIR/floe_<what>_XXXXXX" (TMPDIR unset: /tmp) into buf; aborts the
 * test on failure. harness_rmdir removes it and everything in it. */
void harness_tmpdir(char *buf, size_t len, const char *what);
void harness_rmdir(const char *dir);

#endif
