/* SPDX-License-Identifier: Apache-2.0 */
/* harness.c - single-op runs through a real graph and session (see harness.h). */
#include "harness.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

floe_code harness_run_op(const char *op, const char *device, FloeTensor *const *inputs,
                         int n_inputs, const int *list_sizes, int n_lists,
                         harness_attrs_fn attrs, void *arg, FloeTensor **outputs,
                         int n_outputs, FloeStatus *st) {
  FloeGraph *g = floe_graph_new();
  ck_assert_ptr_nonnull(g);
  FloeOutput ins[64];
  char names[64][16];
  ck_assert_int_le(n_inputs, 64);
  for (int i = 0; i < n_inputs; i++) {
    snprintf(names[i], sizeof names[i], "in%d", i);
    ins[i] = floe_placeholder(g, names[i], floe_tensor_dtype(inputs[i]),
                              floe_tensor_shape(inputs[i]));
  }
  FloeNodeBuilder *b = floe_node_begin(g, op, "op");
  if (list_sizes) {
    int at = 0;
    for (int l = 0; l < n_lists; l++) {
      floe_node_add_input_list(b, ins + at, list_sizes[l]);
      at += list_sizes[l];
    }
    ck_assert_int_eq(at, n_inputs);
  } else {
    for (int i = 0; i < n_inputs; i++) floe_node_add_input(b, ins[i]);
  }
  if (device) floe_node_set_device(b, device);
  if (attrs) attrs(b, arg);
  floe_node_finish(b);
  FloeFeed feeds[64];
  for (int i = 0; i < n_inputs; i++) feeds[i] = (FloeFeed){names[i], inputs[i]};
  char fetch_names[16][16];
  const char *fetches[16];
  ck_assert_int_le(n_outputs, 16);
  for (int i = 0; i < n_outputs; i++) {
    snprintf(fetch_names[i], sizeof fetch_names[i], "op:%d", i);
    fetches[i] = fetch_names[i];
  }
  floe_code rc = harness_run_graph(g, NULL, feeds, n_inputs, fetches, n_outputs, outputs, st);
  floe_graph_free(g);
  return rc;
}

FloeTensor *harness_tensor(FloeDType dt, int rank, const int64_t *dims, const void *data) {
  FloeStatus *st = floe_status_new();
  FloeTensor *t = floe_tensor_new(dt, rank, dims, st);
  if (!t) ck_abort_msg("harness_tensor: %s", floe_status_message(st));
  floe_status_free(st);
  if (data && floe_tensor_nbytes(t)) memcpy(floe_tensor_data(t), data, floe_tensor_nbytes(t));
  return t;
}

FloeTensor *harness_f32(int rank, const int64_t *dims, const float *data) {
  return harness_tensor(FLOE_F32, rank, dims, data);
}
FloeTensor *harness_f64(int rank, const int64_t *dims, const double *data) {
  return harness_tensor(FLOE_F64, rank, dims, data);
}
FloeTensor *harness_i32(int rank, const int64_t *dims, const int32_t *data) {
  return harness_tensor(FLOE_I32, rank, dims, data);
}
FloeTensor *harness_i64(int rank, const int64_t *dims, const int64_t *data) {
  return harness_tensor(FLOE_I64, rank, dims, data);
}

/* splitmix64: a tiny independent generator for test inputs. */
static uint64_t next_u64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static void set_value(FloeTensor *t, int64_t i, double v) {
  void *d = floe_tensor_data(t);
  switch (floe_tensor_dtype(t)) {
    case FLOE_F32: ((float *)d)[i] = (float)v; break;
    case FLOE_F64: ((double *)d)[i] = v; break;
    case FLOE_F16: ((uint16_t *)d)[i] = floe_f32_to_f16((float)v); break;
    case FLOE_BF16: ((uint16_t *)d)[i] = floe_f32_to_bf16((float)v); break;
    case FLOE_I8: ((int8_t *)d)[i] = (int8_t)v; break;
    case FLOE_U8: ((uint8_t *)d)[i] = (uint8_t)v; break;
    case FLOE_I32: ((int32_t *)d)[i] = (int32_t)v; break;
    case FLOE_I64: ((int64_t *)d)[i] = (int64_t)v; break;
    case FLOE_BOOL: ((uint8_t *)d)[i] = v != 0; break;
    default: ck_abort_msg("set_value: bad dtype");
  }
}

int64_t harness_count(int rank, const int64_t *dims) {
  int64_t n = 1;
  for (int d = 0; d < rank; d++) n *= dims[d];
  return n;
}

FloeTensor *harness_from_doubles(FloeDType dt, int rank, const int64_t *dims, const double *v) {
  FloeTensor *t = harness_tensor(dt, rank, dims, NULL);
  for (int64_t i = 0; i < floe_tensor_num_elements(t); i++) set_value(t, i, v[i]);
  return t;
}

FloeTensor *harness_random(FloeDType dt, int rank, const int64_t *dims, uint64_t seed, double lo,
                           double hi) {
  FloeTensor *t = harness_tensor(dt, rank, dims, NULL);
  uint64_t s = seed;
  bool integral = dt == FLOE_I8 || dt == FLOE_U8 || dt == FLOE_I32 || dt == FLOE_I64;
  for (int64_t i = 0; i < floe_tensor_num_elements(t); i++) {
    double u = (double)(next_u64(&s) >> 11) * (1.0 / 9007199254740992.0);
    double v = lo + (hi - lo) * u;
    if (integral) v = floor(v);
    if (dt == FLOE_BOOL) v = u < 0.5;
    set_value(t, i, v);
  }
  return t;
}

double harness_get(const FloeTensor *t, int64_t i) {
  const void *d = floe_tensor_data(t);
  switch (floe_tensor_dtype(t)) {
    case FLOE_F32: return ((const float *)d)[i];
    case FLOE_F64: return ((const double *)d)[i];
    case FLOE_F16: return floe_f16_to_f32(((const uint16_t *)d)[i]);
    case FLOE_BF16: return floe_bf16_to_f32(((const uint16_t *)d)[i]);
    case FLOE_I8: return ((const int8_t *)d)[i];
    case FLOE_U8: return ((const uint8_t *)d)[i];
    case FLOE_I32: return ((const int32_t *)d)[i];
    case FLOE_I64: return (double)((const int64_t *)d)[i];
    case FLOE_BOOL: return ((const uint8_t *)d)[i] != 0;
    default: ck_abort_msg("harness_get: bad dtype"); return 0;
  }
}

void harness_assert_close(const FloeTensor *got, const FloeTensor *want, double rtol,
                          double atol, const char *what) {
  ck_assert_msg(got != NULL, "%s: no output", what);
  ck_assert_msg(floe_tensor_dtype(got) == floe_tensor_dtype(want), "%s: dtype %s, want %s", what,
                floe_dtype_name(floe_tensor_dtype(got)), floe_dtype_name(floe_tensor_dtype(want)));
  FloeShape gs = floe_tensor_shape(got), ws = floe_tensor_shape(want);
  char a[128], b[128];
  bool same = gs.rank == ws.rank;
  for (int i = 0; same && i < gs.rank; i++) same = gs.dims[i] == ws.dims[i];
  ck_assert_msg(same, "%s: shape %s, want %s", what, floe_shape_str(&gs, a, sizeof a),
                floe_shape_str(&ws, b, sizeof b));
  /* Scan first, assert once: one ck_assert per element is slow under fork mode. */
  int64_t bad = -1;
  for (int64_t i = 0; i < floe_tensor_num_elements(want) && bad < 0; i++) {
    double g = harness_get(got, i), w = harness_get(want, i);
    if (isnan(g) && isnan(w)) continue;
    if (isinf(w) && g == w) continue;
    if (!(fabs(g - w) <= atol + rtol * fabs(w))) bad = i;
  }
  if (bad >= 0)
    ck_abort_msg("%s: element %lld is %.9g, want %.9g", what, (long long)bad,
                 harness_get(got, bad), harness_get(want, bad));
}

double *harness_values(const FloeTensor *t) {
  int64_t n = floe_tensor_num_elements(t);
  double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
  ck_assert_ptr_nonnull(v);
  for (int64_t i = 0; i < n; i++) v[i] = harness_get(t, i);
  return v;
}

FloeRuntime *harness_runtime(int threads) {
  FloeStatus *st = floe_status_new();
  FloeRuntimeOptions o = {sizeof o, NULL, NULL, threads, 1};
  FloeRuntime *rt = floe_runtime_new(&o, st);
  if (!rt) ck_abort_msg("runtime: %s", floe_status_message(st));
  floe_status_free(st);
  return rt;
}

FloeSession *harness_session(const FloeGraph *g, FloeRuntime *rt) {
  FloeSessionOptions o;
  floe_session_options_init(&o);
  o.runtime = rt;
  return harness_session_opts(g, &o, NULL);
}

FloeSession *harness_session_opts(const FloeGraph *g, const FloeSessionOptions *opts,
                                  const char *what) {
  const char *sep = what ? ": " : "";
  what = what ? what : "";
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s%sgraph: %s", what, sep,
                floe_graph_error(g, NULL));
  FloeStatus *st = floe_status_new();
  FloeSession *s = floe_session_new(g, opts, st);
  if (!s) ck_abort_msg("%s%ssession: %s", what, sep, floe_status_message(st));
  floe_status_free(st);
  return s;
}

FloeSession *harness_session_init(FloeGraph *g, FloeRuntime *rt) {
  FloeNode *init = floe_variables_initializer(g, NULL);
  FloeSession *s = harness_session(g, rt);
  const char *target = floe_node_name(init);
  harness_run(s, NULL, 0, NULL, 0, &target, 1, NULL, "init");
  return s;
}

void harness_run(FloeSession *s, const FloeFeed *feeds, int n_feeds, const char *const *fetches,
                 int n_fetches, const char *const *targets, int n_targets, FloeTensor **outs,
                 const char *what) {
  FloeStatus *st = floe_status_new();
  if (floe_session_run(s, feeds, n_feeds, fetches, n_fetches, targets, n_targets, outs, st) !=
      FLOE_OK)
    ck_abort_msg("%s%srun: %s", what ? what : "", what ? ": " : "", floe_status_message(st));
  floe_status_free(st);
}

FloeOutput harness_concat(FloeGraph *g, const char *name, const FloeOutput *parts, int n,
                          int axis) {
  FloeTensor *a = floe_tensor_scalar_i32(axis, NULL);
  char an[256];
  snprintf(an, sizeof an, "%s_axis", name);
  FloeOutput ax = floe_const(g, an, a);
  floe_tensor_release(a);
  FloeNodeBuilder *b = floe_node_begin(g, "Concat", name);
  floe_node_add_input_list(b, parts, n);
  floe_node_add_input(b, ax);
  return floe_out(floe_node_finish(b), 0);
}

FloeTensor *harness_fetch(FloeSession *s, const FloeFeed *feeds, int n_feeds, const char *fetch) {
  FloeTensor *out = NULL;
  harness_run(s, feeds, n_feeds, &fetch, 1, NULL, 0, &out, fetch);
  return out;
}

void harness_run_target(FloeSession *s, const char *target) {
  harness_run(s, NULL, 0, NULL, 0, &target, 1, NULL, target);
}

floe_code harness_run_graph(const FloeGraph *g, FloeRuntime *rt, const FloeFeed *feeds,
                            int n_feeds, const char *const *fetches, int n_fetches,
                            FloeTensor **outs, FloeStatus *st) {
  floe_code rc = floe_graph_status(g);
  if (rc != FLOE_OK) {
    floe_graph_error(g, st);
    return rc;
  }
  FloeSessionOptions o;
  floe_session_options_init(&o);
  o.runtime = rt;
  FloeSession *s = floe_session_new(g, &o, st);
  if (!s) return floe_status_code(st);
  rc = floe_session_run(s, feeds, n_feeds, fetches, n_fetches, NULL, 0, outs, st);
  floe_session_free(s);
  return rc;
}

FloeOutput harness_variable(FloeGraph *g, const char *name, FloeDType dt, int rank,
                            const int64_t *dims) {
  char buf[64];
  FloeNodeBuilder *b = floe_node_begin(g, "VarHandleOp", name);
  floe_node_set_attr_type(b, "dtype", dt);
  floe_node_set_attr_shape(b, "shape", floe_shape_make(rank, dims));
  FloeOutput h = floe_out(floe_node_finish(b), 0);
  snprintf(buf, sizeof buf, "%s/init_value", name);
  FloeOutput v = floe_placeholder(g, buf, dt, floe_shape_make(rank, dims));
  snprintf(buf, sizeof buf, "%s/init", name);
  b = floe_node_begin(g, "AssignVariableOp", buf);
  floe_node_add_input(b, h);
  floe_node_add_input(b, v);
  floe_node_finish(b);
  snprintf(buf, sizeof buf, "%s/read", name);
  b = floe_node_begin(g, "ReadVariableOp", buf);
  floe_node_add_input(b, h);
  floe_node_set_attr_type(b, "dtype", dt);
  floe_node_finish(b);
  return h;
}

void harness_tmpdir(char *buf, size_t len, const char *what) {
  const char *base = getenv("TMPDIR");
  int n = snprintf(buf, len, "%s/floe_%s_XXXXXX", base && *base ? base : "/tmp", what);
  ck_assert_msg(n > 0 && (size_t)n < len, "temporary folder name too long");
  ck_assert_msg(mkdtemp(buf) != NULL, "mkdtemp %s failed", buf);
}

void harness_rmdir(const char *dir) {
  char cmd[600];
  int n = snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert(n > 0 && (size_t)n < sizeof cmd);
  ck_assert_int_eq(system(cmd), 0);
}

bool harness_profile_op_is(const char *row, const char *op) {
  size_t n = strlen(op);
  return strncmp(row, op, n) == 0 && (row[n] == '\0' || row[n] == '(');
}

int64_t harness_profile_calls(FloeSession *s, const char *op, const char *device) {
  FloeOpProfile *rows = NULL;
  int n = 0;
  ck_assert_int_eq(floe_session_profile(s, &rows, &n, NULL), FLOE_OK);
  int64_t calls = 0;
  for (int i = 0; i < n; i++)
    if (harness_profile_op_is(rows[i].op, op) && strcmp(rows[i].device, device) == 0)
      calls += rows[i].calls;
  free(rows);
  return calls;
}

int harness_run_suite(Suite *s) {
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed != 0;
}
