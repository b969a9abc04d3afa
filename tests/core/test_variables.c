/* SPDX-License-Identifier: Apache-2.0 */
/* test_variables.c - variables: the resource manager (lookup, reset, copy-on-write,
 * allocation failures), the core's variable kernels, the executor's replacement of resource
 * inputs by variable values for plugin-style kernels (locking, the same variable twice,
 * uninitialised variables), concurrent locked updates, kernel selection between a device's
 * kernels and the core's "*" kernels, and the builder API with every initialiser's
 * statistics checked against its formula. */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../ops/harness.h"
#include "floe/floe.h"
#include "core.h"

static FloeRuntime *rt;

/* ---- test ops and kernels ----
 * Kernels registered without FLOE__KERNEL_RAW_RESOURCES, so the executor treats them as it
 * treats a plugin's: resource inputs arrive as the variables' values, updated in place. */

/* var += 1, element by element, yielding halfway so a missing lock loses updates. */
static floe_code add_one_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  FloeTensor *v = ctx->inputs[0];
  if (v->dtype != FLOE_F32)
    return floe_status_set(ctx->status, FLOE_INTERNAL, "input 0 is %s, not the value",
                           floe_dtype_name(v->dtype));
  volatile float *d = floe_tensor_data(v);
  int64_t n = v->num_elements;
  for (int64_t i = 0; i < n; i++) {
    float x = d[i];
    if (i == n / 2) sched_yield();
    d[i] = x + 1.0f;
  }
  return FLOE_OK;
}

/* a += 1; b += 10 (a and b may be one variable). */
static floe_code add_two_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  FloeTensor *a = ctx->inputs[0], *b = ctx->inputs[1];
  if (a->dtype != FLOE_F32 || b->dtype != FLOE_F32)
    return floe_status_set(ctx->status, FLOE_INTERNAL, "inputs are not values");
  float *da = floe_tensor_data(a);
  for (int64_t i = 0; i < a->num_elements; i++) da[i] += 1.0f;
  float *db = floe_tensor_data(b);
  for (int64_t i = 0; i < b->num_elements; i++) db[i] += 10.0f;
  return FLOE_OK;
}

static void register_test_ops(void) {
  static const char *add_one_in[] = {"var: resource"};
  static const char *add_two_in[] = {"a: resource", "b: resource"};
  static const char *attrs[] = {"use_locking: bool = true"};
  FloeOpDef defs[2] = {
      {sizeof(FloeOpDef), "TestAddOne", add_one_in, 1, NULL, 0, attrs, 1, FLOE_OP_STATEFUL,
       NULL, NULL},
      {sizeof(FloeOpDef), "TestAddTwo", add_two_in, 2, NULL, 0, attrs, 1, FLOE_OP_STATEFUL,
       NULL, NULL},
  };
  FloeStatus st = {FLOE_OK, NULL};
  ck_assert_int_eq(floe__ops_init(&st), FLOE_OK);
  for (int i = 0; i < 2; i++) {
    floe_code rc = floe__op_register(&defs[i], "test", &st);
    ck_assert_msg(rc == FLOE_OK || rc == FLOE_ALREADY_EXISTS, "%s", floe_status_message(&st));
    floe_status_clear(&st);
  }
}

static FloeRuntime *runtime_new(int threads) {
  register_test_ops();
  FloeRuntime *r = harness_runtime(threads);
  FloeStatus *st = floe_status_new();
  ck_assert_int_eq(floe__core_kernel_add(r, "TestAddOne", 0, add_one_compute, st), FLOE_OK);
  ck_assert_int_eq(floe__core_kernel_add(r, "TestAddTwo", 0, add_two_compute, st), FLOE_OK);
  floe_status_free(st);
  return r;
}

static void runtime_setup(void) { rt = runtime_new(2); }
static void runtime_teardown(void) {
  floe_runtime_free(rt);
  rt = NULL;
}

/* ---- helpers ---- */

static FloeSession *session_new(const FloeGraph *g) { return harness_session(g, rt); }

/* Runs target (may be NULL) and fetches one output (fetch may be NULL). Returns the code;
 * msg (may be NULL) receives a malloc'd copy of the message. */
static floe_code run1(FloeSession *s, const FloeFeed *feed, const char *fetch,
                      const char *target, FloeTensor **out, char **msg) {
  FloeStatus *st = floe_status_new();
  floe_code rc = floe_session_run(s, feed, feed ? 1 : 0, fetch ? &fetch : NULL, fetch ? 1 : 0,
                                  target ? &target : NULL, target ? 1 : 0, out, st);
  if (msg) *msg = strdup(floe_status_message(st));
  floe_status_free(st);
  return rc;
}

static void run_target(FloeSession *s, const char *target) {
  char *msg = NULL;
  floe_code rc = run1(s, NULL, NULL, target, NULL, &msg);
  ck_assert_msg(rc == FLOE_OK, "running '%s': %s", target, msg);
  free(msg);
}

static FloeTensor *fetch(FloeSession *s, const char *name) {
  FloeTensor *t = NULL;
  char *msg = NULL;
  floe_code rc = run1(s, NULL, name, NULL, &t, &msg);
  ck_assert_msg(rc == FLOE_OK, "fetching '%s': %s", name, msg);
  free(msg);
  return t;
}

static void assert_all_f32(const FloeTensor *t, float want) {
  const float *d = floe_tensor_data(t);
  for (int64_t i = 0; i < floe_tensor_num_elements(t); i++)
    ck_assert_msg(d[i] == want, "element %lld is %g, want %g", (long long)i, d[i], want);
}

static void assert_mentions(const char *msg, const char *a) {
  ck_assert_msg(strstr(msg, a) != NULL, "'%s' not in: %s", a, msg);
}

static FloeShape shape2(int64_t a, int64_t b) {
  const int64_t d[2] = {a, b};
  return floe_shape_make(2, d);
}

/* A VarHandleOp built by hand (container and shared name), with "<name>/read". */
static FloeOutput raw_var(FloeGraph *g, const char *name, const char *container,
                          const char *shared, FloeShape shape) {
  FloeNodeBuilder *b = floe_node_begin(g, "VarHandleOp", name);
  floe_node_set_attr_type(b, "dtype", FLOE_F32);
  floe_node_set_attr_shape(b, "shape", shape);
  if (container) floe_node_set_attr_string(b, "container", container);
  if (shared) floe_node_set_attr_string(b, "shared_name", shared);
  FloeOutput h = floe_out(floe_node_finish(b), 0);
  char rn[64];
  snprintf(rn, sizeof rn, "%s/read", name);
  floe_read_variable(g, rn, h);
  return h;
}

/* An op with one resource input (TestAddOne) and use_locking. */
static FloeNode *add_one(FloeGraph *g, const char *name, FloeOutput h, int use_locking) {
  FloeNodeBuilder *b = floe_node_begin(g, "TestAddOne", name);
  floe_node_add_input(b, h);
  floe_node_set_attr_bool(b, "use_locking", use_locking);
  return floe_node_finish(b);
}

/* ---- the builder API and the core kernels ---- */

START_TEST(values_persist_and_assign) {
  FloeGraph *g = floe_graph_new();
  FloeVariable w = floe_variable(g, "w", FLOE_F32, shape2(2, 3), floe_init_constant(1.5));
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, shape2(2, 3));
  floe_assign(g, "set", w.handle, x);
  FloeNodeBuilder *b = floe_node_begin(g, "VarIsInitializedOp", "is_init");
  floe_node_add_input(b, w.handle);
  floe_node_finish(b);
  ck_assert_ptr_nonnull(w.init);
  ck_assert_str_eq(floe_node_name(w.init), "w/init");
  ck_assert_str_eq(floe_node_name(w.value.node), "w/read");
  ck_assert_int_eq(floe_node_output_dtype(w.value.node, 0), FLOE_F32);
  FloeShape rs = floe_node_output_shape(w.value.node, 0);
  ck_assert_int_eq(rs.rank, 2);
  ck_assert_int_eq(rs.dims[1], 3);
  FloeSession *s = session_new(g);

  FloeTensor *ini = fetch(s, "is_init");
  ck_assert_int_eq(*(const uint8_t *)floe_tensor_data(ini), 0);
  floe_tensor_release(ini);
  run_target(s, "w/init");
  ini = fetch(s, "is_init");
  ck_assert_int_eq(*(const uint8_t *)floe_tensor_data(ini), 1);
  floe_tensor_release(ini);
  for (int rep = 0; rep < 3; rep++) { /* the value stays across runs */
    FloeTensor *t = fetch(s, "w/read");
    ck_assert_int_eq(floe_tensor_rank(t), 2);
    ck_assert_int_eq(floe_tensor_dim(t, 1), 3);
    assert_all_f32(t, 1.5f);
    floe_tensor_release(t);
  }
  const float xs[6] = {1, 2, 3, 4, 5, 6};
  const int64_t d[2] = {2, 3};
  FloeTensor *xv = floe_tensor_from_data(FLOE_F32, 2, d, xs, sizeof xs, NULL);
  FloeFeed f = {"x", xv};
  char *msg = NULL;
  ck_assert_msg(run1(s, &f, NULL, "set", NULL, &msg) == FLOE_OK, "%s", msg);
  free(msg);
  floe_tensor_release(xv); /* the variable keeps its own reference */
  FloeTensor *t = fetch(s, "w/read");
  for (int i = 0; i < 6; i++) ck_assert_float_eq(((const float *)floe_tensor_data(t))[i], xs[i]);
  floe_tensor_release(t);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

START_TEST(reading_before_init_names_the_variable) {
  FloeGraph *g = floe_graph_new();
  floe_variable(g, "w", FLOE_F32, shape2(2, 2), floe_init_zeros());
  FloeVariable v = floe_variable_get(g, "w");
  add_one(g, "inc", v.handle, 1);
  FloeSession *s = session_new(g);
  char *msg = NULL;
  FloeTensor *t = NULL;
  ck_assert_int_eq(run1(s, NULL, "w/read", NULL, &t, &msg), FLOE_FAILED_PRECONDITION);
  assert_mentions(msg, "node 'w/read' (ReadVariableOp)");
  assert_mentions(msg, "variable 'w' is not initialised: run its initializer ('w/init' or "
                       "floe_variables_initializer) first");
  free(msg);
  /* The executor's replacement of a resource input fails the same way, before the kernel. */
  ck_assert_int_eq(run1(s, NULL, NULL, "inc", NULL, &msg), FLOE_FAILED_PRECONDITION);
  assert_mentions(msg, "node 'inc' (TestAddOne)");
  assert_mentions(msg, "variable 'w' is not initialised");
  free(msg);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

START_TEST(reset_container_and_separate_sessions) {
  FloeGraph *g = floe_graph_new();
  FloeOutput a = raw_var(g, "a", "ca", NULL, shape2(1, 2));
  FloeOutput b = raw_var(g, "b", NULL, NULL, shape2(1, 2));
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, shape2(1, 2));
  floe_assign(g, "set_a", a, x);
  floe_assign(g, "set_b", b, x);
  FloeSession *s1 = session_new(g), *s2 = session_new(g);
  const int64_t d[2] = {1, 2};
  const float v1[2] = {1, 2}, v2[2] = {7, 8};
  FloeTensor *t1 = floe_tensor_from_data(FLOE_F32, 2, d, v1, sizeof v1, NULL);
  FloeTensor *t2 = floe_tensor_from_data(FLOE_F32, 2, d, v2, sizeof v2, NULL);
  FloeFeed f1 = {"x", t1}, f2 = {"x", t2};
  const char *targets[] = {"set_a", "set_b"};
  ck_assert_int_eq(floe_session_run(s1, &f1, 1, NULL, 0, targets, 2, NULL, NULL), FLOE_OK);
  ck_assert_int_eq(floe_session_run(s2, &f2, 1, NULL, 0, targets, 2, NULL, NULL), FLOE_OK);
  /* Two sessions, two sets of variables. */
  FloeTensor *r = fetch(s1, "a/read");
  ck_assert_float_eq(((float *)floe_tensor_data(r))[1], 2.0f);
  floe_tensor_release(r);
  r = fetch(s2, "a/read");
  ck_assert_float_eq(((float *)floe_tensor_data(r))[1], 8.0f);
  floe_tensor_release(r);

  /* A reset drops container "ca" only: a reads as uninitialised, b keeps its value. */
  FloeStatus *st = floe_status_new();
  ck_assert_int_eq(floe_session_reset_container(s1, "ca", st), FLOE_OK);
  char *msg = NULL;
  ck_assert_int_eq(run1(s1, NULL, "a/read", NULL, &r, &msg), FLOE_FAILED_PRECONDITION);
  assert_mentions(msg, "variable 'a' is not initialised");
  free(msg);
  r = fetch(s1, "b/read");
  ck_assert_float_eq(((float *)floe_tensor_data(r))[0], 1.0f);
  floe_tensor_release(r);
  r = fetch(s2, "a/read"); /* the other session is untouched */
  ck_assert_float_eq(((float *)floe_tensor_data(r))[0], 7.0f);
  floe_tensor_release(r);
  /* Resetting the default container drops b; assigning again brings a back. */
  ck_assert_int_eq(floe_session_reset_container(s1, NULL, st), FLOE_OK);
  ck_assert_int_eq(run1(s1, NULL, "b/read", NULL, &r, &msg), FLOE_FAILED_PRECONDITION);
  free(msg);
  ck_assert_int_eq(floe_session_run(s1, &f2, 1, NULL, 0, targets, 1, NULL, NULL), FLOE_OK);
  r = fetch(s1, "a/read");
  ck_assert_float_eq(((float *)floe_tensor_data(r))[0], 7.0f);
  floe_tensor_release(r);
  ck_assert_int_eq(floe_session_reset_container(NULL, "", st), FLOE_INVALID_ARGUMENT);
  floe_status_free(st);
  floe_tensor_release(t1);
  floe_tensor_release(t2);
  floe_session_free(s1);
  floe_session_free(s2);
  floe_graph_free(g);
}
END_TEST

START_TEST(shared_names_must_agree) {
  /* Two nodes naming one variable (shared_name) with different shapes. */
  FloeGraph *g = floe_graph_new();
  raw_var(g, "p", NULL, "shared", shape2(2, 2));
  raw_var(g, "q", NULL, "shared", shape2(3, 2));
  FloeTensor *v = floe_tensor_new(FLOE_F32, 2, (const int64_t[]){2, 2}, NULL);
  floe_assign(g, "set_p", floe_out(floe_graph_find(g, "p"), 0), floe_const(g, "cp", v));
  floe_tensor_release(v);
  FloeSession *s = session_new(g);
  run_target(s, "set_p");
  FloeTensor *t = fetch(s, "p/read");
  floe_tensor_release(t);
  char *msg = NULL;
  ck_assert_int_eq(run1(s, NULL, "q/read", NULL, &t, &msg), FLOE_INVALID_ARGUMENT);
  assert_mentions(msg, "node 'q' (VarHandleOp)");
  assert_mentions(msg, "variable 'shared'");
  assert_mentions(msg, "[2,2]");
  assert_mentions(msg, "[3,2]");
  free(msg);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

START_TEST(assign_checks_dtype_and_shape) {
  FloeGraph *g = floe_graph_new();
  FloeOutput h = raw_var(g, "w", NULL, NULL, shape2(2, 2));
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_unknown());
  floe_assign(g, "set", h, x);
  FloeNodeBuilder *b = floe_node_begin(g, "AssignVariableOp", "set_any");
  floe_node_add_input(b, h);
  floe_node_add_input(b, x);
  floe_node_set_attr_bool(b, "validate_shape", 0);
  floe_node_finish(b);
  FloeOutput xi = floe_placeholder(g, "xi", FLOE_I32, floe_shape_unknown());
  floe_assign(g, "set_int", h, xi);
  FloeSession *s = session_new(g);
  FloeTensor *wrong = floe_tensor_new(FLOE_F32, 1, (const int64_t[]){3}, NULL);
  FloeFeed f = {"x", wrong};
  char *msg = NULL;
  ck_assert_int_eq(run1(s, &f, NULL, "set", NULL, &msg), FLOE_INVALID_ARGUMENT);
  assert_mentions(msg, "node 'set' (AssignVariableOp)");
  assert_mentions(msg, "variable 'w' has shape [2,2]; cannot assign a value of shape [3]");
  free(msg);
  ck_assert_int_eq(run1(s, &f, NULL, "set_any", NULL, &msg), FLOE_OK);
  free(msg);
  FloeTensor *t = fetch(s, "w/read");
  ck_assert_int_eq(floe_tensor_rank(t), 1);
  floe_tensor_release(t);
  FloeTensor *iv = floe_tensor_new(FLOE_I32, 2, (const int64_t[]){2, 2}, NULL);
  FloeFeed fi = {"xi", iv};
  ck_assert_int_eq(run1(s, &fi, NULL, "set_int", NULL, &msg), FLOE_INVALID_ARGUMENT);
  assert_mentions(msg, "variable 'w' is f32; cannot assign a i32 value");
  free(msg);
  /* Handles cannot be fed. */
  FloeTensor *fake = floe_tensor_new(FLOE_RESOURCE, 0, NULL, NULL);
  FloeFeed fh = {"w", fake};
  ck_assert_int_eq(run1(s, &fh, NULL, "set_int", NULL, &msg), FLOE_INVALID_ARGUMENT);
  assert_mentions(msg, "resource handles cannot be fed");
  free(msg);
  floe_tensor_release(fake);
  floe_tensor_release(iv);
  floe_tensor_release(wrong);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

START_TEST(variable_reuse_and_listing) {
  FloeGraph *g = floe_graph_new();
  FloeVariable a = floe_variable(g, "a", FLOE_F32, shape2(2, 3), floe_init_zeros());
  FloeVariable b = floe_variable_untrained(g, "b", FLOE_I64, floe_shape_scalar(),
                                           floe_init_constant(4));
  /* The same name again: the first variable, its initialiser unchanged. */
  FloeVariable a2 = floe_variable(g, "a", FLOE_F32, shape2(2, 3), floe_init_constant(9));
  ck_assert_ptr_eq(a.handle.node, a2.handle.node);
  ck_assert_ptr_eq(a.value.node, a2.value.node);
  ck_assert_ptr_eq(a.init, a2.init);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);

  FloeVariable vs[4];
  ck_assert_int_eq(floe_graph_variables(g, 0, vs, 4), 2);
  ck_assert_ptr_eq(vs[0].handle.node, a.handle.node);
  ck_assert_ptr_eq(vs[1].value.node, b.value.node);
  ck_assert_ptr_eq(vs[1].init, b.init);
  ck_assert_int_eq(floe_graph_variables(g, 1, vs, 4), 1);
  ck_assert_ptr_eq(vs[0].handle.node, a.handle.node);
  ck_assert_int_eq(floe_graph_variables(g, 0, NULL, 0), 2);

  FloeNode *init = floe_variables_initializer(g, NULL);
  ck_assert_str_eq(floe_node_name(init), "init");
  ck_assert_int_eq(floe_node_num_control_inputs(init), 2);
  FloeNode *init2 = floe_variables_initializer(g, NULL);
  ck_assert_str_eq(floe_node_name(init2), "init_1");

  FloeOutput r = floe_read_variable(g, "b_again", b.handle);
  ck_assert_int_eq(floe_node_output_dtype(r.node, 0), FLOE_I64);
  FloeSession *s = session_new(g);
  run_target(s, "init");
  FloeTensor *t = fetch(s, "b_again");
  ck_assert_int_eq(*(const int64_t *)floe_tensor_data(t), 4);
  floe_tensor_release(t);
  t = fetch(s, "a/read");
  assert_all_f32(t, 0.0f);
  floe_tensor_release(t);
  floe_session_free(s);

  /* Another shape under the same name is an error naming both. */
  floe_variable(g, "a", FLOE_F32, shape2(3, 3), floe_init_zeros());
  ck_assert_int_eq(floe_graph_status(g), FLOE_INVALID_ARGUMENT);
  const char *msg = floe_graph_error(g, NULL);
  assert_mentions(msg, "variable 'a' exists as f32 [2,3]; asked for f32 [3,3]");
  floe_graph_clear_error(g);
  floe_variable(g, "a", FLOE_F64, shape2(2, 3), floe_init_zeros());
  assert_mentions(floe_graph_error(g, NULL), "asked for f64 [2,3]");
  floe_graph_clear_error(g);
  floe_variable(g, "init", FLOE_F32, shape2(2, 3), floe_init_zeros());
  assert_mentions(floe_graph_error(g, NULL), "not a variable (op NoOp)");
  floe_graph_clear_error(g);
  floe_variable(g, "u", FLOE_F32, floe_shape_make(1, (const int64_t[]){-1}), floe_init_zeros());
  assert_mentions(floe_graph_error(g, NULL), "must be fully known");
  floe_graph_clear_error(g);
  floe_variable(g, "n", FLOE_I32, shape2(2, 2), floe_init_normal(0, 1, 1));
  assert_mentions(floe_graph_error(g, NULL), "needs a float dtype");
  floe_graph_clear_error(g);
  floe_variable_get(g, "missing");
  ck_assert_int_eq(floe_graph_status(g), FLOE_NOT_FOUND);
  floe_graph_clear_error(g);
  floe_read_variable(g, "bad", floe_out(floe_graph_find(g, "init"), 0));
  ck_assert_int_eq(floe_graph_status(g), FLOE_INVALID_ARGUMENT);
  floe_graph_clear_error(g);
  floe_graph_free(g);
}
END_TEST

/* A graph file keeps variables working: the loaded graph initialises and reads them. */
START_TEST(variables_survive_a_graph_file) {
  FloeGraph *g = floe_graph_new();
  floe_variable(g, "w", FLOE_F32, shape2(3, 5), floe_init_glorot_uniform(9));
  floe_variable_untrained(g, "step", FLOE_I64, floe_shape_scalar(), floe_init_zeros());
  floe_variables_initializer(g, NULL);
  char path[] = "/tmp/floe_test_variables_XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  FloeStatus *st = floe_status_new();
  ck_assert_msg(floe_graph_save(g, path, st) == FLOE_OK, "%s", floe_status_message(st));
  FloeGraph *h = floe_graph_load(path, st);
  unlink(path);
  ck_assert_msg(h != NULL, "%s", floe_status_message(st));
  ck_assert_int_eq(floe_graph_variables(h, 1, NULL, 0), 1);
  ck_assert_int_eq(floe_graph_variables(h, 0, NULL, 0), 2);
  FloeVariable w = floe_variable_get(h, "w");
  ck_assert_ptr_nonnull(w.init);
  FloeSession *s1 = session_new(g), *s2 = session_new(h);
  run_target(s1, "init");
  run_target(s2, "init");
  FloeTensor *a = fetch(s1, "w/read"), *b = fetch(s2, "w/read");
  ck_assert_int_eq(memcmp(floe_tensor_data(a), floe_tensor_data(b), floe_tensor_nbytes(a)), 0);
  floe_tensor_release(a);
  floe_tensor_release(b);
  floe_session_free(s1);
  floe_session_free(s2);
  floe_status_free(st);
  floe_graph_free(h);
  floe_graph_free(g);
}
END_TEST

/* ---- initialisers ---- */

typedef struct Stats {
  double mean, sd, min, max;
  double beyond; /* fraction with |x - mean_ref| > k */
} Stats;

static Stats stats_of(const FloeTensor *t, double center, double k) {
  int64_t n = floe_tensor_num_elements(t);
  Stats s = {0, 0, INFINITY, -INFINITY, 0};
  double sum = 0, sum2 = 0;
  int64_t out = 0;
  for (int64_t i = 0; i < n; i++) {
    double x = floe_tensor_dtype(t) == FLOE_F64 ? ((const double *)floe_tensor_data(t))[i]
                                                : ((const float *)floe_tensor_data(t))[i];
    sum += x;
    sum2 += x * x;
    if (x < s.min) s.min = x;
    if (x > s.max) s.max = x;
    if (fabs(x - center) > k) out++;
  }
  s.mean = sum / (double)n;
  s.sd = sqrt(sum2 / (double)n - s.mean * s.mean);
  s.beyond = (double)out / (double)n;
  return s;
}

/* Builds one variable with init, initialises it in a fresh session, returns its value. */
static FloeTensor *initial_value(const char *name, FloeDType dt, FloeShape shape,
                                 FloeInitializer init) {
  FloeGraph *g = floe_graph_new();
  floe_variable(g, name, dt, shape, init);
  FloeSession *s = session_new(g);
  char target[64], read[64];
  snprintf(target, sizeof target, "%s/init", name);
  snprintf(read, sizeof read, "%s/read", name);
  run_target(s, target);
  FloeTensor *t = fetch(s, read);
  floe_session_free(s);
  floe_graph_free(g);
  return t;
}

static void check_close(const char *what, double got, double want, double tol) {
  ck_assert_msg(fabs(got - want) <= tol, "%s: %.6g, want %.6g +- %.3g", what, got, want, tol);
}

START_TEST(constant_initialisers) {
  FloeTensor *t = initial_value("z", FLOE_F32, shape2(256, 512), floe_init_zeros());
  assert_all_f32(t, 0.0f); /* big: built as a Fill */
  floe_tensor_release(t);
  t = initial_value("c", FLOE_F32, shape2(256, 512), floe_init_constant(-2.25));
  assert_all_f32(t, -2.25f);
  floe_tensor_release(t);
  t = initial_value("c", FLOE_F32, shape2(3, 4), floe_init_constant(0.5)); /* small: a Const */
  assert_all_f32(t, 0.5f);
  floe_tensor_release(t);
  t = initial_value("i", FLOE_I32, shape2(40, 40), floe_init_constant(7));
  for (int i = 0; i < 1600; i++) ck_assert_int_eq(((const int32_t *)floe_tensor_data(t))[i], 7);
  floe_tensor_release(t);
  t = initial_value("s", FLOE_F64, floe_shape_scalar(), floe_init_constant(3.125));
  ck_assert_double_eq(*(const double *)floe_tensor_data(t), 3.125);
  floe_tensor_release(t);
  /* Built from ordinary ops under "<name>/initializer/". */
  FloeGraph *g = floe_graph_new();
  floe_variable(g, "big", FLOE_F32, shape2(256, 512), floe_init_zeros());
  ck_assert_str_eq(floe_node_op(floe_graph_find(g, "big/initializer/value")), "Fill");
  floe_variable(g, "w", FLOE_F32, shape2(4, 4), floe_init_glorot_uniform(3));
  ck_assert_str_eq(floe_node_op(floe_graph_find(g, "w/initializer/random")), "RandomUniform");
  ck_assert_ptr_nonnull(floe_graph_find(g, "w/initializer/add"));
  floe_graph_free(g);
}
END_TEST

START_TEST(uniform_initialisers) {
  const double N = 256.0 * 512.0;
  double lo = -0.3, hi = 0.7, w = hi - lo;
  FloeTensor *t = initial_value("u", FLOE_F32, shape2(256, 512), floe_init_uniform(lo, hi, 11));
  Stats s = stats_of(t, 0, 0);
  /* lo + r * (hi - lo) in f32, r in [0, 1): within [lo, hi] once rounded to f32. */
  ck_assert_msg(s.min >= (float)lo && s.max <= (float)hi, "range [%.9g, %.9g]", s.min, s.max);
  check_close("uniform min", s.min, lo, 1e-3 * w);
  check_close("uniform max", s.max, hi, 1e-3 * w);
  check_close("uniform mean", s.mean, (lo + hi) / 2, 5 * w / sqrt(12 * N));
  check_close("uniform sd", s.sd, w / sqrt(12), 0.02 * w / sqrt(12));
  floe_tensor_release(t);

  /* Glorot uniform: U(-l, l), l = sqrt(6 / (fan_in + fan_out)). */
  double l = sqrt(6.0 / (256 + 512));
  t = initial_value("g", FLOE_F32, shape2(256, 512), floe_init_glorot_uniform(5));
  s = stats_of(t, 0, 0);
  ck_assert_msg(s.min >= -l * (1 + 1e-6) && s.max <= l * (1 + 1e-6), "range [%g, %g] limit %g",
                s.min, s.max, l);
  ck_assert_msg(s.max > 0.99 * l && s.min < -0.99 * l, "range [%g, %g] limit %g", s.min, s.max, l);
  check_close("glorot uniform mean", s.mean, 0, 5 * 2 * l / sqrt(12 * N));
  check_close("glorot uniform sd", s.sd, l / sqrt(3), 0.02 * l / sqrt(3));
  floe_tensor_release(t);

  /* HWIO filter [3,3,16,32]: fan_in = 3*3*16, fan_out = 3*3*32. */
  const int64_t hwio[4] = {3, 3, 16, 32};
  l = sqrt(6.0 / (144 + 288));
  t = initial_value("f", FLOE_F32, floe_shape_make(4, hwio), floe_init_glorot_uniform(5));
  s = stats_of(t, 0, 0);
  ck_assert_msg(s.min >= -l * (1 + 1e-6) && s.max <= l * (1 + 1e-6) && s.max > 0.98 * l,
                "HWIO range [%g, %g] limit %g", s.min, s.max, l);
  floe_tensor_release(t);
}
END_TEST

START_TEST(normal_initialisers) {
  const double N = 256.0 * 512.0;
  /* Plain normal: about 4.55% of values lie beyond 2 stddev. */
  double mean = 2.0, sd = 0.5;
  FloeTensor *t = initial_value("n", FLOE_F32, shape2(256, 512), floe_init_normal(mean, sd, 3));
  Stats s = stats_of(t, mean, 2 * sd);
  check_close("normal mean", s.mean, mean, 5 * sd / sqrt(N));
  check_close("normal sd", s.sd, sd, 0.02 * sd);
  check_close("normal beyond 2 sd", s.beyond, 0.0455, 0.005);
  floe_tensor_release(t);
  t = initial_value("n64", FLOE_F64, shape2(256, 512), floe_init_normal(-1, 3, 3));
  s = stats_of(t, -1, 6);
  check_close("f64 normal mean", s.mean, -1, 5 * 3 / sqrt(N));
  check_close("f64 normal sd", s.sd, 3, 0.02 * 3);
  floe_tensor_release(t);

  /* Truncated normal: never beyond 2 stddev, sd = stddev * 0.8796. */
  mean = 1.0;
  sd = 0.3;
  const double TN = 0.87962566103423978;
  t = initial_value("t", FLOE_F32, shape2(256, 512), floe_init_truncated_normal(mean, sd, 4));
  s = stats_of(t, mean, 2 * sd * (1 + 1e-6));
  ck_assert_msg(s.beyond == 0, "%g of values beyond 2 stddev", s.beyond);
  check_close("truncated mean", s.mean, mean, 5 * sd * TN / sqrt(N));
  check_close("truncated sd", s.sd, sd * TN, 0.02 * sd * TN);
  floe_tensor_release(t);

  /* Glorot normal: sd sqrt(2 / (fan_in + fan_out)) after truncation; He: sqrt(2 / fan_in). */
  double want = sqrt(2.0 / (256 + 512));
  t = initial_value("gn", FLOE_F32, shape2(256, 512), floe_init_glorot_normal(6));
  s = stats_of(t, 0, 2 * want / TN * (1 + 1e-6));
  ck_assert_msg(s.beyond == 0, "%g of values beyond the truncation", s.beyond);
  check_close("glorot normal sd", s.sd, want, 0.02 * want);
  check_close("glorot normal mean", s.mean, 0, 5 * want / sqrt(N));
  floe_tensor_release(t);
  want = sqrt(2.0 / 256);
  t = initial_value("he", FLOE_F32, shape2(256, 512), floe_init_he_normal(6));
  s = stats_of(t, 0, 2 * want / TN * (1 + 1e-6));
  ck_assert_msg(s.beyond == 0, "%g of values beyond the truncation", s.beyond);
  check_close("he normal sd", s.sd, want, 0.02 * want);
  floe_tensor_release(t);
}
END_TEST

static bool same_values(const FloeTensor *a, const FloeTensor *b) {
  return floe_tensor_nbytes(a) == floe_tensor_nbytes(b) &&
         memcmp(floe_tensor_data(a), floe_tensor_data(b), floe_tensor_nbytes(a)) == 0;
}

START_TEST(seeded_initialisers_are_reproducible) {
  FloeTensor *vals[2][2];
  for (int rep = 0; rep < 2; rep++) { /* two graphs, two sessions */
    FloeGraph *g = floe_graph_new();
    floe_variable(g, "a", FLOE_F32, shape2(16, 16), floe_init_uniform(0, 1, 42));
    floe_variable(g, "b", FLOE_F32, shape2(16, 16), floe_init_uniform(0, 1, 42));
    floe_variables_initializer(g, NULL);
    FloeSession *s = session_new(g);
    run_target(s, "init");
    vals[rep][0] = fetch(s, "a/read");
    vals[rep][1] = fetch(s, "b/read");
    floe_session_free(s);
    floe_graph_free(g);
  }
  ck_assert_msg(same_values(vals[0][0], vals[1][0]), "same seed, same name: same values");
  ck_assert_msg(same_values(vals[0][1], vals[1][1]), "same seed, same name: same values");
  ck_assert_msg(!same_values(vals[0][0], vals[0][1]), "another name draws other values");
  FloeTensor *other = initial_value("a", FLOE_F32, shape2(16, 16), floe_init_uniform(0, 1, 43));
  ck_assert_msg(!same_values(vals[0][0], other), "another seed draws other values");
  floe_tensor_release(other);
  for (int i = 0; i < 4; i++) floe_tensor_release(vals[i / 2][i % 2]);
}
END_TEST

/* ---- copy-on-write and the executor's replacement of resource inputs ---- */

START_TEST(fetched_values_survive_updates) {
  FloeGraph *g = floe_graph_new();
  FloeVariable w = floe_variable(g, "w", FLOE_F32, shape2(64, 64), floe_init_constant(1));
  add_one(g, "inc", w.handle, 1);
  add_one(g, "inc_hogwild", w.handle, 0);
  FloeNodeBuilder *b = floe_node_begin(g, "TestAddTwo", "twice");
  floe_node_add_input(b, w.handle);
  floe_node_add_input(b, w.handle);
  floe_node_finish(b);
  FloeSession *s = session_new(g);
  run_target(s, "w/init");
  FloeTensor *t0 = fetch(s, "w/read");
  run_target(s, "inc"); /* t0 is still held: the update copies first */
  FloeTensor *t1 = fetch(s, "w/read");
  assert_all_f32(t0, 1.0f);
  assert_all_f32(t1, 2.0f);
  floe_tensor_release(t0);
  run_target(s, "inc_hogwild");
  FloeTensor *t2 = fetch(s, "w/read");
  assert_all_f32(t1, 2.0f);
  assert_all_f32(t2, 3.0f);
  floe_tensor_release(t1);
  /* Nobody else holds the value now: the update writes in place, no copy. */
  const void *data = floe_tensor_data(t2);
  floe_tensor_release(t2);
  run_target(s, "inc");
  FloeTensor *t3 = fetch(s, "w/read");
  ck_assert_ptr_eq(floe_tensor_data(t3), data);
  assert_all_f32(t3, 4.0f);
  /* One variable on two inputs: taken (and locked) once, both see one tensor. */
  run_target(s, "twice");
  FloeTensor *t4 = fetch(s, "w/read");
  assert_all_f32(t3, 4.0f);
  assert_all_f32(t4, 15.0f);
  floe_tensor_release(t3);
  floe_tensor_release(t4);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

START_TEST(views_of_a_value_are_protected) {
  FloeGraph *g = floe_graph_new();
  FloeVariable w = floe_variable(g, "w", FLOE_F32, shape2(4, 8), floe_init_constant(5));
  add_one(g, "inc", w.handle, 1);
  const int64_t one = 1, flat_dims = 32;
  FloeTensor *shape = floe_tensor_from_data(FLOE_I64, 1, &one, &flat_dims, sizeof flat_dims, NULL);
  /* Reshape forwards its input: "flat" shares the value's buffer. */
  floe_binary(g, "Reshape", "flat", w.value, floe_const(g, "flat_shape", shape));
  floe_tensor_release(shape);
  FloeSession *s = session_new(g);
  run_target(s, "w/init");
  run_target(s, "inc"); /* the value is now the variable's alone (no longer the Const's) */
  FloeTensor *v = fetch(s, "flat");
  run_target(s, "inc"); /* only the view's buffer reference tells the update to copy */
  assert_all_f32(v, 6.0f);
  FloeTensor *now = fetch(s, "w/read");
  assert_all_f32(now, 7.0f);
  floe_tensor_release(v);
  floe_tensor_release(now);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* AssignAddVariableOp / AssignSubVariableOp are the CPU plugin's: checked once they exist. */
START_TEST(assign_add_and_sub_through_the_plugin) {
  if (floe_runtime_num_kernels_for(rt, "AssignAddVariableOp", "CPU") == 0 ||
      floe_runtime_num_kernels_for(rt, "AssignSubVariableOp", "CPU") == 0) {
    fprintf(stderr, "skipped: the CPU plugin has no AssignAdd/SubVariableOp kernel yet\n");
    return;
  }
  FloeGraph *g = floe_graph_new();
  FloeVariable w = floe_variable(g, "w", FLOE_F32, shape2(8, 8), floe_init_constant(10));
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, shape2(8, 8));
  floe_assign_add(g, "add", w.handle, x);
  floe_assign_sub(g, "sub", w.handle, x);
  FloeSession *s = session_new(g);
  run_target(s, "w/init");
  float xs[64];
  for (int i = 0; i < 64; i++) xs[i] = (float)i;
  FloeTensor *xv = floe_tensor_from_data(FLOE_F32, 2, (const int64_t[]){8, 8}, xs, sizeof xs, NULL);
  FloeFeed f = {"x", xv};
  FloeTensor *before = fetch(s, "w/read");
  char *msg = NULL;
  ck_assert_msg(run1(s, &f, NULL, "add", NULL, &msg) == FLOE_OK, "%s", msg);
  free(msg);
  ck_assert_msg(run1(s, &f, NULL, "add", NULL, &msg) == FLOE_OK, "%s", msg);
  free(msg);
  ck_assert_msg(run1(s, &f, NULL, "sub", NULL, &msg) == FLOE_OK, "%s", msg);
  free(msg);
  FloeTensor *after = fetch(s, "w/read");
  for (int i = 0; i < 64; i++) {
    ck_assert_float_eq(((const float *)floe_tensor_data(before))[i], 10.0f);
    ck_assert_float_eq(((const float *)floe_tensor_data(after))[i], 10.0f + xs[i]);
  }
  floe_tensor_release(before);
  floe_tensor_release(after);
  floe_tensor_release(xv);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* ---- concurrency ---- */

enum { UPDATERS = 4, UPDATES = 150, READS = 150 };

typedef struct Shared {
  FloeSession *s;
  const char *target;
  int failures;
  char err[256];
} Shared;

static void *updater(void *arg) {
  Shared *sh = arg;
  for (int i = 0; i < UPDATES; i++) {
    FloeStatus *st = floe_status_new();
    if (floe_session_run(sh->s, NULL, 0, NULL, 0, &sh->target, 1, NULL, st) != FLOE_OK) {
      snprintf(sh->err, sizeof sh->err, "%s", floe_status_message(st));
      sh->failures++;
    }
    floe_status_free(st);
  }
  return NULL;
}

/* Every fetched value is one the variable had between updates: all elements equal and
 * never smaller than the one before. */
static void *reader(void *arg) {
  Shared *sh = arg;
  float last = 0;
  for (int i = 0; i < READS; i++) {
    const char *f = "w/read";
    FloeTensor *t = NULL;
    FloeStatus *st = floe_status_new();
    if (floe_session_run(sh->s, NULL, 0, &f, 1, NULL, 0, &t, st) != FLOE_OK) {
      snprintf(sh->err, sizeof sh->err, "%s", floe_status_message(st));
      sh->failures++;
      floe_status_free(st);
      continue;
    }
    floe_status_free(st);
    const float *d = floe_tensor_data(t);
    for (int64_t j = 1; j < floe_tensor_num_elements(t); j++) {
      if (d[j] != d[0]) {
        snprintf(sh->err, sizeof sh->err, "torn read: element %lld is %g, element 0 %g",
                 (long long)j, d[j], d[0]);
        sh->failures++;
        break;
      }
    }
    if (d[0] < last) {
      snprintf(sh->err, sizeof sh->err, "value went back from %g to %g", last, d[0]);
      sh->failures++;
    }
    last = d[0];
    floe_tensor_release(t);
  }
  return NULL;
}

START_TEST(concurrent_locked_updates_are_exact) {
  FloeRuntime *own = runtime_new(4);
  FloeRuntime *saved = rt;
  rt = own;
  FloeGraph *g = floe_graph_new();
  FloeVariable w = floe_variable(g, "w", FLOE_F32, shape2(16, 64), floe_init_zeros());
  add_one(g, "inc", w.handle, 1);
  FloeSession *s = session_new(g);
  run_target(s, "w/init");
  Shared sh[UPDATERS + 1];
  pthread_t th[UPDATERS + 1];
  for (int i = 0; i <= UPDATERS; i++) {
    sh[i] = (Shared){s, "inc", 0, ""};
    pthread_create(&th[i], NULL, i < UPDATERS ? updater : reader, &sh[i]);
  }
  for (int i = 0; i <= UPDATERS; i++) {
    pthread_join(th[i], NULL);
    ck_assert_msg(sh[i].failures == 0, "thread %d: %d failures, last: %s", i, sh[i].failures,
                  sh[i].err);
  }
  FloeTensor *t = fetch(s, "w/read");
  assert_all_f32(t, (float)(UPDATERS * UPDATES));
  floe_tensor_release(t);
  floe_session_free(s);
  floe_graph_free(g);
  rt = saved;
  floe_runtime_free(own);
}
END_TEST

/* Runs target n times; besides success only the errors of a variable that a reset dropped
 * (not initialised, or dropped mid-step) are allowed, each naming the variable. */
typedef struct ResetRace {
  FloeSession *s;
  const char *target;
  int n, failures;
  char err[256];
} ResetRace;

static void *race_runner(void *arg) {
  ResetRace *r = arg;
  for (int i = 0; i < r->n; i++) {
    FloeStatus *st = floe_status_new();
    floe_code rc = floe_session_run(r->s, NULL, 0, NULL, 0, &r->target, 1, NULL, st);
    bool expected = rc == FLOE_OK ||
                    ((rc == FLOE_FAILED_PRECONDITION || rc == FLOE_ABORTED) &&
                     strstr(floe_status_message(st), "variable 'w'") != NULL);
    if (!expected) {
      snprintf(r->err, sizeof r->err, "%s: %s", floe_code_name(rc), floe_status_message(st));
      r->failures++;
    }
    floe_status_free(st);
  }
  return NULL;
}

START_TEST(reset_while_updating) {
  FloeGraph *g = floe_graph_new();
  FloeVariable w = floe_variable(g, "w", FLOE_F32, shape2(8, 8), floe_init_zeros());
  add_one(g, "inc", w.handle, 1);
  add_one(g, "inc_hogwild", w.handle, 0);
  FloeSession *s = session_new(g);
  /* One unlocked updater: it never overlaps the locked one (two unlocked updaters, or an
   * unlocked one and a reader, race on the data by design, which TSan would report). */
  ResetRace r[3] = {{s, "inc", 200, 0, ""}, {s, "inc_hogwild", 200, 0, ""}, {s, "inc", 200, 0, ""}};
  pthread_t th[3];
  for (int i = 0; i < 3; i++) pthread_create(&th[i], NULL, race_runner, &r[i]);
  FloeStatus *st = floe_status_new();
  for (int i = 0; i < 50; i++) {
    ck_assert_int_eq(floe_session_reset_container(s, "", st), FLOE_OK);
    run_target(s, "w/init");
    sched_yield();
  }
  for (int i = 0; i < 3; i++) {
    pthread_join(th[i], NULL);
    ck_assert_msg(r[i].failures == 0, "thread %d: %d unexpected errors, last: %s", i,
                  r[i].failures, r[i].err);
  }
  /* The variable works as usual afterwards. */
  run_target(s, "w/init");
  run_target(s, "inc");
  FloeTensor *t = fetch(s, "w/read");
  assert_all_f32(t, 1.0f);
  floe_tensor_release(t);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* ---- kernel selection ---- */

START_TEST(device_kernels_win_over_core_kernels) {
  FloeStatus *st = floe_status_new();
  /* A "*" kernel for Neg, which the CPU plugin has: the CPU one is chosen on a CPU. */
  ck_assert_int_eq(floe__core_kernel_add(rt, "Neg", 0, add_one_compute, st), FLOE_OK);
  FloeGraph *g = floe_graph_new();
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_scalar());
  FloeOutput y = floe_unary(g, "Neg", "y", x);
  FloeVariable v = floe_variable(g, "v", FLOE_F32, floe_shape_scalar(), floe_init_zeros());
  const FloeKernelReg *k = floe__kernel_find(rt, y.node, "CPU", st);
  ck_assert_ptr_nonnull(k);
  ck_assert_ptr_nonnull(k->plugin);
  k = floe__kernel_find(rt, v.handle.node, "CPU", st);
  ck_assert_ptr_nonnull(k);
  ck_assert_ptr_null(k->plugin);
  ck_assert_str_eq(k->device_type, "*");
  ck_assert(k->flags & FLOE__KERNEL_RAW_RESOURCES);
  k = floe__kernel_find(rt, v.handle.node, "NOSUCHDEVICE", st);
  ck_assert_ptr_nonnull(k); /* the core's kernels run anywhere */
  ck_assert_int_ge(floe_runtime_num_kernels_for(rt, "ReadVariableOp", "CPU"), 1);
  ck_assert_int_ge(floe_runtime_num_kernels_for(rt, "ReadVariableOp", NULL), 1);
  /* An op nobody implements still gets the informative error. */
  static const char *ins[] = {"x: T"}, *attrs[] = {"T: type in {float}"};
  FloeOpDef def = {sizeof def, "TestNoKernel", ins, 1, NULL, 0, attrs, 1, 0, NULL, NULL};
  floe_code rc = floe__op_register(&def, "test", st);
  ck_assert(rc == FLOE_OK || rc == FLOE_ALREADY_EXISTS);
  floe_status_clear(st);
  FloeNodeBuilder *b = floe_node_begin(g, "TestNoKernel", "nk");
  floe_node_add_input(b, x);
  FloeNode *nk = floe_node_finish(b);
  ck_assert_ptr_nonnull(nk);
  ck_assert_ptr_null(floe__kernel_find(rt, nk, "CPU", st));
  assert_mentions(floe_status_message(st), "no kernel for node 'nk' (op TestNoKernel, T=f32) on "
                                           "device type CPU");
  assert_mentions(floe_status_message(st), "no loaded plugin has a kernel for TestNoKernel");
  floe_graph_free(g);
  floe_status_free(st);
}
END_TEST

/* ---- the resource manager directly, and allocation failures ---- */

START_TEST(manager_lookup_list_reset) {
  FloeStatus st = {FLOE_OK, NULL};
  FloeResourceMgr *m = floe__resources_new(&st);
  ck_assert_ptr_nonnull(m);
  FloeShape sh = shape2(2, 2), other = shape2(2, 3);
  FloeShape partial = floe_shape_make(2, (const int64_t[]){2, -1});
  FloeVar *z = floe__resources_lookup(m, "c", "z", FLOE_F32, &sh, &st);
  FloeVar *a = floe__resources_lookup(m, "c", "a", FLOE_F32, &sh, &st);
  FloeVar *d = floe__resources_lookup(m, "", "a", FLOE_F32, &sh, &st);
  ck_assert_ptr_nonnull(z);
  ck_assert_ptr_nonnull(a);
  ck_assert_ptr_ne(a, d); /* containers separate names */
  ck_assert_ptr_eq(floe__resources_lookup(m, "c", "a", FLOE_F32, &partial, &st), a);
  ck_assert_ptr_null(floe__resources_lookup(m, "c", "a", FLOE_F32, &other, &st));
  ck_assert_int_eq(st.code, FLOE_INVALID_ARGUMENT);
  floe_status_clear(&st);
  ck_assert_ptr_null(floe__resources_lookup(m, "c", "a", FLOE_F64, &sh, &st));
  floe_status_clear(&st);
  FloeVar **list;
  int n;
  ck_assert_int_eq(floe__resources_list(m, "c", &list, &n, &st), FLOE_OK);
  ck_assert_int_eq(n, 2);
  ck_assert_str_eq(list[0]->name, "a");
  ck_assert_str_eq(list[1]->name, "z");
  floe__free(list);

  /* Handles: a value through a handle; a reset container leaves a dead, valid object. */
  FloeTensor *h = floe__resource_handle_new(a, &st);
  ck_assert_ptr_eq(floe__resource_from_handle(h, "h", &st), a);
  FloeTensor *val = floe_tensor_new(FLOE_F32, 2, (const int64_t[]){2, 2}, NULL);
  ck_assert_int_eq(floe__var_assign(a, val, true, &st), FLOE_OK);
  FloeTensor *r = floe__var_read(a, &st);
  ck_assert_ptr_eq(r, val); /* no copy */
  floe_tensor_release(r);
  ck_assert_int_eq(floe__resources_reset(m, "c", &st), FLOE_OK);
  ck_assert_ptr_null(floe__resource_from_handle(h, "input 0", &st));
  assert_mentions(floe_status_message(&st), "variable 'a' was dropped by a reset");
  floe_status_clear(&st);
  ck_assert_ptr_null(floe__var_read(a, &st));
  floe_status_clear(&st);
  ck_assert_int_eq(floe__resources_list(m, "c", &list, &n, &st), FLOE_OK);
  ck_assert_int_eq(n, 0);
  floe__free(list);
  FloeVar *a2 = floe__resources_lookup(m, "c", "a", FLOE_F32, &other, &st);
  ck_assert_ptr_nonnull(a2); /* a new variable, any shape */
  ck_assert_ptr_ne(a2, a);
  ck_assert_ptr_eq(floe__resources_lookup(m, "", "a", FLOE_F32, &sh, &st), d);
  FloeTensor *i32 = floe_tensor_scalar_i32(1, NULL);
  ck_assert_ptr_null(floe__resource_from_handle(i32, "input 2", &st));
  assert_mentions(floe_status_message(&st), "input 2: expected a resource handle");
  floe_status_clear(&st);
  floe_tensor_release(i32);
  floe_tensor_release(h);
  floe_tensor_release(val);
  floe__resources_free(m);
}
END_TEST

/* Unlocked (Hogwild) updaters share the value with each other, never with a reader. */
START_TEST(unlocked_updaters_share_the_value) {
  FloeStatus st = {FLOE_OK, NULL};
  FloeResourceMgr *m = floe__resources_new(&st);
  FloeShape sh = shape2(4, 4);
  FloeVar *v = floe__resources_lookup(m, "", "h", FLOE_F32, &sh, &st);
  ck_assert_ptr_nonnull(v);
  ck_assert_ptr_null(floe__var_begin_update(v, NULL, false, &st));
  assert_mentions(floe_status_message(&st), "variable 'h' is not initialised");
  floe_status_clear(&st);
  FloeTensor *init = floe_tensor_new(FLOE_F32, 2, (const int64_t[]){4, 4}, NULL);
  ck_assert_int_eq(floe__var_assign(v, init, true, &st), FLOE_OK);
  FloeTensor *u1 = floe__var_begin_update(v, NULL, false, &st);
  ck_assert_ptr_nonnull(u1);
  ck_assert_ptr_ne(u1, init); /* the caller still holds init: copied */
  FloeTensor *u2 = floe__var_begin_update(v, NULL, false, &st);
  ck_assert_ptr_eq(u2, u1); /* another unlocked updater writes the same tensor */
  FloeTensor *r = floe__var_read(v, &st);
  ck_assert_ptr_eq(r, u1); /* reads never copy */
  FloeTensor *u3 = floe__var_begin_update(v, NULL, false, &st);
  ck_assert_ptr_ne(u3, u1); /* but a reader's tensor is never updated again */
  floe__var_end_update(v, u1, false);
  floe__var_end_update(v, u2, false);
  floe__var_end_update(v, u3, false);
  /* Counts settled: with the reader gone a locking update writes in place. */
  floe_tensor_release(r);
  FloeTensor *l = floe__var_begin_update(v, NULL, true, &st);
  ck_assert_ptr_eq(l, u3);
  floe__var_end_update(v, l, true);
  floe_tensor_release(init);
  floe__resources_free(m);
}
END_TEST

START_TEST(manager_allocation_failures) {
  for (long k = 1;; k++) {
    FloeStatus st = {FLOE_OK, NULL};
    FloeShape sh = shape2(3, 3);
    floe_test_fail_alloc_after(k);
    FloeResourceMgr *m = floe__resources_new(&st);
    floe_code rc = m ? FLOE_OK : st.code;
    FloeVar *v = NULL;
    if (m) {
      for (int i = 0; i < 40 && rc == FLOE_OK; i++) { /* enough to grow the table */
        char name[16];
        snprintf(name, sizeof name, "v%02d", 39 - i);
        v = floe__resources_lookup(m, i % 2 ? "odd" : "", name, FLOE_F32, &sh, &st);
        if (!v) rc = st.code;
      }
    }
    FloeTensor *h = rc == FLOE_OK ? floe__resource_handle_new(v, &st) : NULL;
    if (rc == FLOE_OK && !h) rc = st.code;
    FloeVar **list = NULL;
    int n = 0;
    if (rc == FLOE_OK) rc = floe__resources_list(m, "odd", &list, &n, &st);
    if (rc == FLOE_OK) rc = floe__resources_reset(m, "odd", &st);
    floe_test_fail_alloc_after(0);
    if (rc != FLOE_OK) {
      ck_assert_int_eq(rc, FLOE_NO_MEMORY);
      ck_assert_msg(strlen(floe_status_message(&st)) > 0, "no message at k=%ld", k);
    } else {
      ck_assert_int_eq(n, 20);
    }
    floe__free(list);
    floe_tensor_release(h);
    floe__resources_free(m);
    floe_status_clear(&st);
    if (rc == FLOE_OK) break;
    ck_assert_int_lt(k, 10000);
  }
}
END_TEST

/* A session with variables built, initialised and read while the Nth allocation fails. */
START_TEST(session_allocation_failures) {
  FloeGraph *g = floe_graph_new();
  FloeVariable w = floe_variable(g, "w", FLOE_F32, shape2(4, 4), floe_init_constant(2));
  add_one(g, "inc", w.handle, 1);
  floe_variables_initializer(g, NULL);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  FloeSessionOptions o;
  floe_session_options_init(&o);
  o.runtime = rt;
  for (long k = 1;; k++) {
    FloeStatus *st = floe_status_new();
    ck_assert_ptr_nonnull(st);
    FloeTensor *t = NULL;
    floe_test_fail_alloc_after(k);
    FloeSession *s = floe_session_new(g, &o, st);
    floe_code rc = s ? FLOE_OK : floe_status_code(st);
    const char *init = "init", *inc = "inc", *read = "w/read";
    if (rc == FLOE_OK) rc = floe_session_run(s, NULL, 0, NULL, 0, &init, 1, NULL, st);
    if (rc == FLOE_OK) rc = floe_session_run(s, NULL, 0, NULL, 0, &inc, 1, NULL, st);
    if (rc == FLOE_OK) rc = floe_session_run(s, NULL, 0, &read, 1, NULL, 0, &t, st);
    floe_test_fail_alloc_after(0);
    if (rc != FLOE_OK) {
      ck_assert_msg(rc == FLOE_NO_MEMORY, "k=%ld: %s: %s", k, floe_code_name(rc),
                    floe_status_message(st));
      ck_assert_msg(strlen(floe_status_message(st)) > 0, "no message at k=%ld", k);
    } else {
      assert_all_f32(t, 3.0f);
    }
    floe_tensor_release(t);
    floe_session_free(s);
    floe_status_free(st);
    if (rc == FLOE_OK) break;
    ck_assert_int_lt(k, 100000);
  }
  floe_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("variables");
  TCase *tc = tcase_create("api");
  tcase_add_test(tc, values_persist_and_assign);
  tcase_add_test(tc, reading_before_init_names_the_variable);
  tcase_add_test(tc, reset_container_and_separate_sessions);
  tcase_add_test(tc, shared_names_must_agree);
  tcase_add_test(tc, assign_checks_dtype_and_shape);
  tcase_add_test(tc, variable_reuse_and_listing);
  tcase_add_test(tc, variables_survive_a_graph_file);
  tcase_add_checked_fixture(tc, runtime_setup, runtime_teardown);
  suite_add_tcase(s, tc);
  tc = tcase_create("initialisers");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, constant_initialisers);
  tcase_add_test(tc, uniform_initialisers);
  tcase_add_test(tc, normal_initialisers);
  tcase_add_test(tc, seeded_initialisers_are_reproducible);
  tcase_add_checked_fixture(tc, runtime_setup, runtime_teardown);
  suite_add_tcase(s, tc);
  tc = tcase_create("updates");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, fetched_values_survive_updates);
  tcase_add_test(tc, views_of_a_value_are_protected);
  tcase_add_test(tc, assign_add_and_sub_through_the_plugin);
  tcase_add_test(tc, concurrent_locked_updates_are_exact);
  tcase_add_test(tc, reset_while_updating);
  tcase_add_test(tc, device_kernels_win_over_core_kernels);
  tcase_add_checked_fixture(tc, runtime_setup, runtime_teardown);
  suite_add_tcase(s, tc);
  tc = tcase_create("manager");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, manager_lookup_list_reset);
  tcase_add_test(tc, unlocked_updaters_share_the_value);
  tcase_add_test(tc, manager_allocation_failures);
  tcase_add_test(tc, session_allocation_failures);
  tcase_add_checked_fixture(tc, runtime_setup, runtime_teardown);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
