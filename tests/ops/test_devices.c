/* SPDX-License-Identifier: Apache-2.0 */
/* test_devices.c - every kernel of every loaded device against the CPU reference, in the
 * spirit of ggml's test-backend-ops. For each device D other than cpu:0 and each case of the
 * table (devices_cases.c) whose op and dtypes D has a kernel of its own for, the same host
 * inputs go through a graph whose op node requests cpu:0 and then D (placeholders stay on
 * cpu:0, so the executor moves the inputs to D and the results back), and the outputs are
 * compared by normalised error ||a - b||_2 / max(||b||_2, tiny) (max |a - b| for integer and
 * bool outputs) with per-dtype thresholds. Random ops are checked by distribution. A kernel
 * of D that no case exercises fails the test, naming the op.
 *
 * The runtime is made with FLOE_CPU_DEVICES=2 (unless the environment asks for more), so cpu:1 is
 * always a device under test: with only the CPU plugin loaded the program still runs the
 * whole machinery (and cpu:1 runs the same kernels as cpu:0, so its errors must be 0).
 * FLOE_TEST_VERBOSE=1 prints one line per (device, op, case); a summary line per device is
 * always printed. */
#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "devices_cases.h"
#include "harness.h"

#define XMAX_OUT 8
#define XMAX_DEVICES 16
#define XMAX_CASES 1024
#define REF_DEVICE "cpu:0"

/* Devices whose matrix-class kernels round their operands to a shorter format (with f32
 * accumulation), and the threshold that gives those ops' float outputs (see threshold()):
 * tpu-sim always (bf16), the CUDA plugin when FLOE_CUDA_MATMUL asks for bf16 or tf32 (TF32
 * keeps 11 significant bits: one product is off by at most 2^-10 ~ 9.8e-4). */
static const struct {
  const char *type, *env, *value; /* env NULL: always */
  double threshold;
} reduced_matrix[] = {
    {"TPU_SIM", NULL, NULL, 8e-3},
    {"CUDA", "FLOE_CUDA_MATMUL", "bf16", 8e-3},
    {"CUDA", "FLOE_CUDA_MATMUL", "tf32", 1e-3},
};

typedef struct XDevice {
  char name[64];           /* short name, "tpu-sim:0" */
  char type[32];           /* "TPU_SIM" */
  bool same_as_ref;        /* the reference's type: the very same kernels, errors must be 0 */
  double matrix_threshold; /* > 0: matrix-class ops round operands (reduced_matrix) */
} XDevice;

static FloeRuntime *rt;
static bool verbose;

/* A runtime with at least two CPU devices (a larger FLOE_CPU_DEVICES is kept), the
 * environment left as it was. */
static void setup(void) {
  const char *env = getenv("FLOE_CPU_DEVICES");
  char *saved = env ? strdup(env) : NULL;
  if (!env || atoi(env) < 2) setenv("FLOE_CPU_DEVICES", "2", 1);
  rt = harness_runtime(2);
  if (saved) setenv("FLOE_CPU_DEVICES", saved, 1);
  else unsetenv("FLOE_CPU_DEVICES");
  free(saved);
  const char *v = getenv("FLOE_TEST_VERBOSE");
  verbose = v && strcmp(v, "1") == 0;
}

static void teardown(void) {
  floe_runtime_free(rt);
  rt = NULL;
}

/* ---------------------------------------------------------------------------------- */
/* Building and running one case on one device. */

static int num_inputs(const XCase *c) {
  int n = 0;
  while (n < XMAX_IN && c->in[n].kind) n++;
  return n;
}

static void set_attrs(FloeNodeBuilder *b, const XAttr *a) {
  for (int i = 0; a && i < XMAX_ATTRS && a[i].name; i++) {
    const XAttr *x = &a[i];
    switch (x->kind) {
      case 'i': floe_node_set_attr_int(b, x->name, (int64_t)x->num); break;
      case 'f': floe_node_set_attr_float(b, x->name, x->num); break;
      case 'b': floe_node_set_attr_bool(b, x->name, x->num != 0); break;
      case 's': floe_node_set_attr_string(b, x->name, x->str); break;
      case 't': floe_node_set_attr_type(b, x->name, x->dt); break;
      case 'l': floe_node_set_attr_int_list(b, x->name, x->list, x->n); break;
      case 'T': {
        FloeTensor *t = harness_random(x->dt, x->n, x->list, (uint64_t)x->num, -1, 1);
        floe_node_set_attr_tensor(b, x->name, t);
        floe_tensor_release(t);
        break;
      }
      default: ck_abort_msg("attribute %s: bad kind '%c'", x->name, x->kind);
    }
  }
}

/* A variable "var<i>" holding ins[i]: handle, initialiser fed by "var<i>/init_value", and
 * the read "var<i>/read" fetched after the op. */
static FloeOutput add_variable(FloeGraph *g, int i, const FloeTensor *init) {
  char name[48];
  snprintf(name, sizeof name, "var%d", i);
  FloeShape shape = floe_tensor_shape(init);
  return harness_variable(g, name, floe_tensor_dtype(init), shape.rank, shape.dims);
}

/* The case's graph with its node "op" requesting `device`; NULL on a graph error. */
static FloeNode *build_graph(FloeGraph *g, const XCase *c, FloeTensor *const *ins, int n_in,
                             const char *device) {
  FloeOutput in[XMAX_IN];
  for (int i = 0; i < n_in; i++) {
    char name[16];
    snprintf(name, sizeof name, "in%d", i);
    in[i] = c->in[i].kind == 'x'
                ? add_variable(g, i, ins[i])
                : floe_placeholder(g, name, floe_tensor_dtype(ins[i]), floe_tensor_shape(ins[i]));
  }
  FloeNodeBuilder *b = floe_node_begin(g, c->op, "op");
  if (c->lists[0]) {
    int at = 0;
    for (int l = 0; l < 4 && c->lists[l]; l++) {
      floe_node_add_input_list(b, in + at, c->lists[l]);
      at += c->lists[l];
    }
    ck_assert_msg(at == n_in, "%s %s: lists group %d of %d inputs", c->op, c->label, at, n_in);
  } else {
    for (int i = 0; i < n_in; i++) floe_node_add_input(b, in[i]);
  }
  floe_node_set_device(b, device);
  set_attrs(b, c->attrs);
  return floe_node_finish(b);
}


typedef enum XResult { XR_RAN, XR_NO_KERNEL, XR_FAILED } XResult;

typedef struct XOut {
  FloeTensor *t[XMAX_OUT]; /* host copies, released by xout_release */
  int n;
} XOut;

static void xout_release(XOut *o) {
  for (int i = 0; i < o->n; i++) floe_tensor_release(o->t[i]);
  o->n = 0;
}

/* Runs the session steps of a built case: the variables' initialisers, then the op (fetched,
 * or run as a target when it has no outputs), then the variables' reads. */
static floe_code run_steps(FloeSession *s, const XCase *c, FloeTensor *const *ins, int n_in,
                           int n_out, FloeTensor **outs, int *n_got, FloeStatus *st) {
  FloeFeed feeds[XMAX_IN], var_feeds[XMAX_IN];
  char in_names[XMAX_IN][16], var_names[XMAX_IN][48], init_names[XMAX_IN][48];
  char read_names[XMAX_IN][48];
  const char *inits[XMAX_IN], *reads[XMAX_IN];
  int nf = 0, nv = 0;
  for (int i = 0; i < n_in; i++) {
    if (c->in[i].kind == 'x') {
      snprintf(var_names[nv], sizeof var_names[nv], "var%d/init_value", i);
      snprintf(init_names[nv], sizeof init_names[nv], "var%d/init", i);
      snprintf(read_names[nv], sizeof read_names[nv], "var%d/read", i);
      var_feeds[nv] = (FloeFeed){var_names[nv], ins[i]};
      inits[nv] = init_names[nv];
      reads[nv] = read_names[nv];
      nv++;
    } else {
      snprintf(in_names[nf], sizeof in_names[nf], "in%d", i);
      feeds[nf] = (FloeFeed){in_names[nf], ins[i]};
      nf++;
    }
  }
  floe_code rc = FLOE_OK;
  if (nv) rc = floe_session_run(s, var_feeds, nv, NULL, 0, inits, nv, NULL, st);
  if (rc != FLOE_OK) return rc;
  if (n_out == 0) {
    const char *target = "op";
    rc = floe_session_run(s, feeds, nf, NULL, 0, &target, 1, NULL, st);
    if (rc == FLOE_OK && nv) rc = floe_session_run(s, NULL, 0, reads, nv, NULL, 0, outs, st);
    *n_got = rc == FLOE_OK ? nv : 0;
    return rc;
  }
  char fetch_names[XMAX_OUT][16];
  const char *fetches[XMAX_OUT];
  for (int k = 0; k < n_out; k++) {
    snprintf(fetch_names[k], sizeof fetch_names[k], "op:%d", k);
    fetches[k] = fetch_names[k];
  }
  rc = floe_session_run(s, feeds, nf, fetches, n_out, NULL, 0, outs, st);
  *n_got = rc == FLOE_OK ? n_out : 0;
  return rc;
}

/* Runs case c with inputs ins on device d. XR_RAN: out holds host copies of the outputs (the
 * variables read back when the op has none); XR_NO_KERNEL: d has no kernel of its own for
 * the node's op and dtypes; XR_FAILED: err says why. */
static XResult run_on(const XCase *c, FloeTensor *const *ins, const XDevice *d, XOut *out,
                      char *err, size_t errlen) {
  int n_in = num_inputs(c);
  out->n = 0;
  FloeGraph *g = floe_graph_new();
  ck_assert_ptr_nonnull(g);
  FloeNode *node = build_graph(g, c, ins, n_in, d->name);
  if (!node) {
    snprintf(err, errlen, "building the graph: %s", floe_graph_error(g, NULL));
    floe_graph_free(g);
    return XR_FAILED;
  }
  if (!floe_runtime_device_has_kernel(rt, node, d->type)) {
    floe_graph_free(g);
    return XR_NO_KERNEL;
  }
  int n_out = floe_node_num_outputs(node);
  ck_assert_int_le(n_out, XMAX_OUT);
  FloeSessionOptions o;
  floe_session_options_init(&o);
  o.runtime = rt;
  o.device = REF_DEVICE; /* the placeholders and variables: inputs live on the host */
  FloeStatus *st = floe_status_new();
  FloeSession *s = floe_session_new(g, &o, st);
  floe_graph_free(g);
  XResult res = XR_FAILED;
  if (!s) {
    snprintf(err, errlen, "session: %s", floe_status_message(st));
    goto out_status;
  }
  floe_session_set_profiling(s, 1);
  FloeTensor *got[XMAX_OUT] = {NULL};
  int n_got = 0;
  if (run_steps(s, c, ins, n_in, n_out, got, &n_got, st) != FLOE_OK) {
    snprintf(err, errlen, "run: %s", floe_status_message(st));
    goto out_session;
  }
  if (harness_profile_calls(s, c->op, d->name) < 1) {
    snprintf(err, errlen, "the op ran but not on %s (the profile has no call there)", d->name);
    for (int k = 0; k < n_got; k++) floe_tensor_release(got[k]);
    goto out_session;
  }
  res = XR_RAN;
  for (int k = 0; k < n_got; k++) {
    out->t[out->n] = floe_tensor_copy(got[k], st); /* to the host, whatever device made it */
    floe_tensor_release(got[k]);
    if (!out->t[out->n]) {
      snprintf(err, errlen, "copying output %d to the host: %s", k, floe_status_message(st));
      res = XR_FAILED;
      continue;
    }
    out->n++;
  }
  if (res != XR_RAN) xout_release(out);
out_session:
  floe_session_free(s);
out_status:
  floe_status_free(st);
  return res;
}

static XDevice ref_device(void) {
  XDevice d = {REF_DEVICE, "CPU", true, 0};
  return d;
}

FloeTensor *xdev_run_ref(FloeRuntime *r, const char *op, FloeTensor *const *ins, int n_in,
                         const XAttr *attrs, int index) {
  ck_assert_ptr_eq(r, rt);
  XCase c = {op, "derived input", {{0}}, {0}, {{0}}, 0, XS_NONE, NULL};
  for (int i = 0; i < n_in; i++) c.in[i].kind = 'r';
  for (int i = 0; attrs && i < XMAX_ATTRS && attrs[i].name; i++) c.attrs[i] = attrs[i];
  XDevice ref = ref_device();
  XOut out = {{NULL}, 0};
  char err[512] = "";
  XResult res = run_on(&c, ins, &ref, &out, err, sizeof err);
  ck_assert_msg(res == XR_RAN, "deriving an input with %s on %s: %s", op, REF_DEVICE,
                res == XR_NO_KERNEL ? "no CPU kernel" : err);
  ck_assert_int_lt(index, out.n);
  FloeTensor *t = out.t[index];
  floe_tensor_retain(t);
  xout_release(&out);
  return t;
}

/* FNV-1a, to seed a case's inputs from its op and label. */
static uint64_t hash_str(uint64_t h, const char *s) {
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  return h;
}

/* The case's inputs into ins (caller releases each). Seeds depend on the case's op and label
 * only, so every device sees the same values and a case's values stay the same when others
 * are added. Returns the number of inputs. */
static int make_inputs(const XCase *c, FloeTensor **ins) {
  int n = num_inputs(c);
  uint64_t base = hash_str(hash_str(0xcbf29ce484222325ull, c->op), c->label);
  for (int i = 0; i < n; i++) {
    const XIn *in = &c->in[i];
    uint64_t seed = base + (uint64_t)i;
    switch (in->kind) {
      case 'r':
      case 'x': ins[i] = harness_random(in->dt, in->rank, in->dims, seed, in->lo, in->hi); break;
      case 'v': ins[i] = harness_from_doubles(in->dt, in->rank, in->dims, in->values); break;
      case 'd': ins[i] = harness_tensor(in->dt, in->rank, in->dims, NULL); break;
      default: ck_abort_msg("%s %s: input %d has bad kind '%c'", c->op, c->label, i, in->kind);
    }
  }
  if (c->derive) c->derive(c, ins, rt);
  return n;
}

/* ---------------------------------------------------------------------------------- */
/* Errors and thresholds. */

static bool is_float(FloeDType dt) { return (FLOE_DTYPE_BIT(dt) & FLOE_DTYPES_FLOAT) != 0; }

/* ||got - want||_2 / max(||want||_2, tiny) for floating dtypes, max |got - want| for integers
 * and bools; NaNs must sit where the reference has them and infinities must match. INFINITY
 * (and why in `why`) when dtypes or shapes differ. */
static double xdev_error(const FloeTensor *got, const FloeTensor *want, char *why, size_t len) {
  why[0] = '\0';
  if (floe_tensor_dtype(got) != floe_tensor_dtype(want)) {
    snprintf(why, len, "dtype %s, reference %s", floe_dtype_name(floe_tensor_dtype(got)),
             floe_dtype_name(floe_tensor_dtype(want)));
    return INFINITY;
  }
  FloeShape gs = floe_tensor_shape(got), ws = floe_tensor_shape(want);
  bool same = gs.rank == ws.rank;
  for (int i = 0; same && i < gs.rank; i++) same = gs.dims[i] == ws.dims[i];
  if (!same) {
    char a[96], b[96];
    snprintf(why, len, "shape %s, reference %s", floe_shape_str(&gs, a, sizeof a),
             floe_shape_str(&ws, b, sizeof b));
    return INFINITY;
  }
  int64_t n = floe_tensor_num_elements(want);
  bool fl = is_float(floe_tensor_dtype(want));
  double diff2 = 0, want2 = 0, maxabs = 0;
  for (int64_t i = 0; i < n; i++) {
    double g = harness_get(got, i), w = harness_get(want, i);
    if (isnan(w) || isnan(g) || isinf(w) || isinf(g)) {
      if ((isnan(w) && isnan(g)) || g == w) continue;
      snprintf(why, len, "element %lld is %g, reference %g", (long long)i, g, w);
      return INFINITY;
    }
    diff2 += (g - w) * (g - w);
    want2 += w * w;
    if (fabs(g - w) > maxabs) maxabs = fabs(g - w);
  }
  if (!fl) return maxabs;
  return sqrt(diff2) / fmax(sqrt(want2), 1e-30);
}

/* Per output dtype: f32 1e-5 and f64 1e-12 are about a hundred units of the type's rounding
 * error, room for another summation order or another libm; integers and bools are exact.
 * bf16 keeps 8 significant bits (unit roundoff u = 2^-8 ~ 3.9e-3). A matrix unit that rounds
 * both factors of every product to bf16 gives each product a relative error of at most
 * 2u = 2^-7 (the bound plugins/tpu-sim/README.md states, per element, against
 * sum |a||b|), and about 0.7u RMS; accumulated in f32, those errors add like a random walk,
 * as the products themselves do for random-signed operands, so the normalised error of a
 * product stays near 0.7u ~ 2.8e-3 whatever K is (measured on tpu-sim: 1.4e-3 to 4.3e-3).
 * 8e-3 sits just above the one-product worst case 2^-7 ~ 7.8e-3. It applies to bf16 outputs
 * anywhere and to the float outputs of matrix-class ops (XF_MATRIX) on devices that compute
 * those in bf16 (reduced_matrix, which also has TF32's bound). */
static double threshold(const XCase *c, const XDevice *d, FloeDType dt) {
  if (d->same_as_ref) return 0; /* the same kernels on the same inputs */
  double t = 0;
  switch (dt) {
    case FLOE_F32: t = 1e-5; break;
    case FLOE_F64: t = 1e-12; break;
    case FLOE_F16: t = 2e-3; break;
    case FLOE_BF16: t = 8e-3; break;
    default: t = 0; break; /* integers and bools: exact */
  }
  if ((c->flags & XF_MATRIX) && is_float(dt) && t < d->matrix_threshold) t = d->matrix_threshold;
  return t;
}

/* ---------------------------------------------------------------------------------- */
/* Random ops: Kolmogorov-Smirnov distance from the distribution. */

static double normal_cdf(double x) { return 0.5 * erfc(-x / sqrt(2.0)); }

static double stat_cdf(XStat stat, double x) {
  switch (stat) {
    case XS_UNIFORM: return x < 0 ? 0 : x > 1 ? 1 : x;
    case XS_NORMAL: return normal_cdf(x);
    case XS_TRUNCATED: {
      double lo = normal_cdf(-2), hi = normal_cdf(2);
      return x < -2 ? 0 : x > 2 ? 1 : (normal_cdf(x) - lo) / (hi - lo);
    }
    default: ck_abort_msg("no CDF for stat %d", (int)stat); return 0;
  }
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The distance of a continuous sample from its CDF. */
static double ks_continuous(const FloeTensor *t, XStat stat) {
  int64_t n = floe_tensor_num_elements(t);
  double *v = harness_values(t), dist = 0;
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  for (int64_t i = 0; i < n; i++) {
    if (isnan(v[i])) {
      dist = INFINITY;
      break;
    }
    double f = stat_cdf(stat, v[i]);
    dist = fmax(dist, fmax((double)(i + 1) / (double)n - f, f - (double)i / (double)n));
  }
  free(v);
  return dist;
}

static int64_t attr_int(const XCase *c, const char *name) {
  for (int i = 0; i < XMAX_ATTRS && c->attrs[i].name; i++)
    if (strcmp(c->attrs[i].name, name) == 0) return (int64_t)c->attrs[i].num;
  ck_abort_msg("%s %s: no attribute %s", c->op, c->label, name);
  return 0;
}

/* P(k) of the log-uniform sampler, written from ops_std.def's formula. */
static double log_uniform_p(int64_t k, int64_t range) {
  return log((double)(k + 2) / (double)(k + 1)) / log((double)range + 1);
}

/* The sampler: ids in range (distinct when unique) and distributed as P(k); with
 * replacement the expected counts are P(k) * num_sampled (checked to f32 precision, an
 * excess returned as distance). */
static double ks_log_uniform(const XCase *c, const XOut *o, char *why, size_t len) {
  int64_t range = attr_int(c, "range_max"), ns = attr_int(c, "num_sampled");
  bool unique = attr_int(c, "unique") != 0;
  ck_assert_int_eq(o->n, 3);
  int64_t n = floe_tensor_num_elements(o->t[0]);
  int64_t *count = calloc((size_t)range, sizeof *count);
  ck_assert_ptr_nonnull(count);
  double dist = 0;
  for (int64_t i = 0; i < n && dist == 0; i++) {
    double id = harness_get(o->t[0], i);
    if (id < 0 || id >= (double)range || id != floor(id)) {
      snprintf(why, len, "sampled id %g is outside [0, %lld)", id, (long long)range);
      dist = INFINITY;
    } else if (unique && count[(int64_t)id]) {
      snprintf(why, len, "id %g sampled twice with unique", id);
      dist = INFINITY;
    } else {
      count[(int64_t)id]++;
    }
  }
  for (int64_t k = 0, cum = 0; k < range && dist < INFINITY; k++) {
    cum += count[k];
    double f = log((double)(k + 2)) / log((double)range + 1); /* sum of P(0..k) */
    dist = fmax(dist, fabs((double)cum / (double)n - f));
  }
  free(count);
  for (int out = 1; out <= 2 && !unique && dist < INFINITY; out++) {
    const FloeTensor *ids = out == 1 ? NULL : o->t[0];
    for (int64_t i = 0; i < floe_tensor_num_elements(o->t[out]); i++) {
      int64_t id = (int64_t)(ids ? harness_get(ids, i) : c->in[0].values[i]);
      double want = log_uniform_p(id, range) * (double)ns, got = harness_get(o->t[out], i);
      if (fabs(got - want) > 1e-5 * want) {
        snprintf(why, len, "output %d element %lld is %g, P(%lld) * num_sampled = %g", out,
                 (long long)i, got, (long long)id, want);
        dist = INFINITY;
        break;
      }
    }
  }
  return dist;
}

/* The KS distance of a random case's output (INFINITY and `why` for broken invariants). */
static double stat_distance(const XCase *c, const XOut *o, int64_t *n, char *why, size_t len) {
  why[0] = '\0';
  *n = floe_tensor_num_elements(o->t[0]);
  if (c->stat == XS_LOG_UNIFORM) return ks_log_uniform(c, o, why, len);
  return ks_continuous(o->t[0], c->stat);
}

/* ---------------------------------------------------------------------------------- */
/* Coverage: every kernel of a device type is exercised. */

static bool excluded(const char *op, const char **reason) {
  for (int i = 0; i < xnum_excluded; i++)
    if (strcmp(xexcluded[i].op, op) == 0) {
      if (reason) *reason = xexcluded[i].reason;
      return true;
    }
  return false;
}

static int cases_of(const char *op) {
  int n = 0;
  for (int i = 0; i < xnum_cases; i++) n += strcmp(xcases[i].op, op) == 0;
  return n;
}

static bool listed(const char *const *names, int n, const char *op) {
  for (int i = 0; i < n; i++)
    if (strcmp(names[i], op) == 0) return true;
  return false;
}

/* Writes to `fails` a line for each op with a kernel of device type `type` that is neither
 * in ran[0..n_ran) (ops some case ran on the device) nor excluded; returns their number. */
static int check_coverage(const XDevice *d, const char *const *ran, int n_ran, FILE *fails) {
  int missing = 0;
  for (int i = 0; i < floe_runtime_num_kernels(rt); i++) {
    FloeKernelInfo k = {sizeof k, NULL, NULL, NULL, 0, 0};
    ck_assert_int_eq(floe_runtime_kernel(rt, i, &k), FLOE_OK);
    if (strcasecmp(k.device_type, d->type) != 0 || listed(ran, n_ran, k.op)) continue;
    const char *why = NULL;
    if (excluded(k.op, &why)) {
      if (verbose) printf("%s %s: excluded (%s)\n", d->name, k.op, why);
      continue;
    }
    int nc = cases_of(k.op);
    if (nc == 0)
      fprintf(fails,
              "%s has a kernel for %s but no case covers it: add cases to "
              "tests/ops/devices_cases.c\n",
              d->name, k.op);
    else
      fprintf(fails,
              "%s has a kernel for %s but none of its %d cases matches the kernel's "
              "dtypes: add a case with a dtype it accepts\n",
              d->name, k.op, nc);
    missing++;
  }
  return missing;
}

/* ---------------------------------------------------------------------------------- */
/* The whole table on every device. */

typedef struct DevReport {
  XDevice dev;
  int cases, no_kernel, random, failures;
  bool ran_case[XMAX_CASES]; /* the device had a kernel for case i (it ran, or failed) */
  double worst;
  const char *worst_op;
  const char *ran_ops[512];
  int n_ran_ops;
} DevReport;

/* "f16,i8" for a dtype mask. */
static char *dtype_list(uint32_t mask, char *buf, size_t len) {
  size_t at = 0;
  buf[0] = '\0';
  for (int dt = 1; dt < FLOE_DTYPE_LIMIT && at < len; dt++)
    if (mask & FLOE_DTYPE_BIT(dt))
      at += (size_t)snprintf(buf + at, len - at, "%s%s", at ? "," : "", floe_dtype_name(dt));
  return buf;
}

/* The dtype case ci's node gets for its type attribute attr (FLOE_DTYPE_INVALID: none). */
static FloeDType case_attr_type(int ci, const char *attr) {
  const XCase *c = &xcases[ci];
  FloeTensor *ins[XMAX_IN];
  int n = num_inputs(c);
  for (int i = 0; i < n; i++) /* values do not matter to the node's attributes */
    ins[i] = harness_tensor(c->in[i].dt, c->in[i].rank, c->in[i].dims, NULL);
  FloeGraph *g = floe_graph_new();
  ck_assert_ptr_nonnull(g);
  FloeNode *node = build_graph(g, c, ins, n, REF_DEVICE);
  FloeDType dt = node ? floe_node_attr_type(node, attr) : FLOE_DTYPE_INVALID;
  floe_graph_free(g);
  for (int i = 0; i < n; i++) floe_tensor_release(ins[i]);
  return dt;
}

/* The (op, dtype) pairs a kernel of r's device type accepts under one of its type
 * constraints but no case ran with on the device (only ops named `only` when non-NULL):
 * a line per kernel constraint to out when non-NULL; returns the number of pairs. These are
 * reported, not failed: an accelerator often takes every dtype for data movement, and the
 * table grows a case when a gap matters. */
static int dtype_gaps(const DevReport *r, const char *only, FILE *out) {
  int gaps = 0;
  for (int i = 0; i < floe_runtime_num_kernels(rt); i++) {
    FloeKernelInfo k = {sizeof k, NULL, NULL, NULL, 0, 0};
    ck_assert_int_eq(floe_runtime_kernel(rt, i, &k), FLOE_OK);
    if (strcasecmp(k.device_type, r->dev.type) != 0 || (only && strcmp(k.op, only) != 0) ||
        excluded(k.op, NULL))
      continue;
    for (int j = 0; j < k.num_constraints; j++) {
      const char *attr = NULL;
      uint32_t mask = 0, seen = 0;
      ck_assert_int_eq(floe_runtime_kernel_constraint(rt, i, j, &attr, &mask), FLOE_OK);
      for (int ci = 0; ci < xnum_cases; ci++) {
        if (!r->ran_case[ci] || strcmp(xcases[ci].op, k.op) != 0) continue;
        FloeDType dt = case_attr_type(ci, attr);
        if (dt != FLOE_DTYPE_INVALID) seen |= FLOE_DTYPE_BIT(dt);
      }
      uint32_t miss = mask & ~seen & ~FLOE_DTYPE_BIT(FLOE_RESOURCE);
      if (!miss) continue;
      char list[160];
      for (int dt = 1; dt < FLOE_DTYPE_LIMIT; dt++) gaps += (miss & FLOE_DTYPE_BIT(dt)) != 0;
      if (out)
        fprintf(out, "%s %s: no case with %s in %s\n", r->dev.name, k.op, attr,
                dtype_list(miss, list, sizeof list));
    }
  }
  return gaps;
}

/* reduced_matrix's threshold for a device type in this environment; 0 for full f32. */
static double matrix_threshold_of(const char *type) {
  double t = 0;
  for (size_t i = 0; i < sizeof reduced_matrix / sizeof *reduced_matrix; i++) {
    const char *v = reduced_matrix[i].env ? getenv(reduced_matrix[i].env) : NULL;
    if (strcmp(type, reduced_matrix[i].type) == 0 &&
        (!reduced_matrix[i].env || (v && strcmp(v, reduced_matrix[i].value) == 0)))
      t = reduced_matrix[i].threshold;
  }
  return t;
}

static int list_devices(DevReport *rep, int max, char *ref_type, size_t len) {
  int n = 0;
  ref_type[0] = '\0';
  for (int i = 0; i < floe_runtime_num_devices(rt); i++) {
    FloeDeviceInfo info;
    ck_assert_int_eq(floe_runtime_device(rt, i, &info), FLOE_OK);
    if (strcmp(info.short_name, REF_DEVICE) == 0) {
      snprintf(ref_type, len, "%s", info.type);
      continue;
    }
    ck_assert_int_lt(n, max);
  ck_assert_int_le(xnum_cases, XMAX_CASES);
    DevReport *r = &rep[n++];
    memset(r, 0, sizeof *r);
    snprintf(r->dev.name, sizeof r->dev.name, "%s", info.short_name);
    snprintf(r->dev.type, sizeof r->dev.type, "%s", info.type);
    r->dev.matrix_threshold = matrix_threshold_of(info.type);
    r->worst_op = "-";
  }
  for (int i = 0; i < n; i++) rep[i].dev.same_as_ref = strcmp(rep[i].dev.type, ref_type) == 0;
  return n;
}

static void note_ran(DevReport *r, const char *op) {
  if (listed(r->ran_ops, r->n_ran_ops, op)) return;
  ck_assert_int_lt(r->n_ran_ops, 512);
  r->ran_ops[r->n_ran_ops++] = op;
}

/* A random case on r's device: its distance and the reference's must be within the bound. */
static void check_random(const XCase *c, const XOut *ref, const XOut *got, DevReport *r,
                         FILE *fails) {
  char why[256], why_ref[256];
  int64_t n = 0, n_ref = 0;
  double dist = stat_distance(c, got, &n, why, sizeof why);
  double dist_ref = stat_distance(c, ref, &n_ref, why_ref, sizeof why_ref);
  double bound = 1.95 / sqrt((double)n); /* KS at the 0.1% level */
  bool ok = dist <= bound && n == n_ref;
  if (verbose)
    printf("%s %s [%s]: KS distance %.3g (bound %.3g, %lld samples; %s: %.3g)\n", r->dev.name,
           c->op, c->label, dist, bound, (long long)n, REF_DEVICE, dist_ref);
  if (!(dist_ref <= bound)) {
    fprintf(fails,
            "%s [%s]: the reference %s is off its distribution (KS %.3g > %.3g) %s: "
            "fix the case\n",
            c->op, c->label, REF_DEVICE, dist_ref, bound, why_ref);
    r->failures++;
  }
  if (!ok) {
    fprintf(fails, "%s %s [%s]: KS distance %.3g > %.3g over %lld samples (reference %lld) %s\n",
            r->dev.name, c->op, c->label, dist, bound, (long long)n, (long long)n_ref, why);
    r->failures++;
  }
  r->random++;
}

/* Compares every output of a case on r's device with the reference's. */
static void check_outputs(const XCase *c, const XOut *ref, const XOut *got, DevReport *r,
                          FILE *fails) {
  if (got->n != ref->n) {
    fprintf(fails, "%s %s [%s]: %d outputs, reference %d\n", r->dev.name, c->op, c->label, got->n,
            ref->n);
    r->failures++;
    return;
  }
  double worst = 0, worst_ratio = 0, worst_thr = 0;
  char why[256] = "", worst_why[256] = "";
  int worst_k = 0;
  for (int k = 0; k < ref->n; k++) {
    double e = xdev_error(got->t[k], ref->t[k], why, sizeof why);
    double thr = threshold(c, &r->dev, floe_tensor_dtype(ref->t[k]));
    double ratio = e <= thr ? 0 : thr > 0 ? e / thr : INFINITY;
    if (k == 0 || ratio > worst_ratio || (ratio == worst_ratio && e > worst)) {
      worst = e, worst_ratio = ratio, worst_thr = thr, worst_k = k;
      snprintf(worst_why, sizeof worst_why, "%s", why);
    }
  }
  if (verbose)
    printf("%s %s [%s]: error %.3g (threshold %.3g)\n", r->dev.name, c->op, c->label, worst,
           worst_thr);
  if (worst_ratio > 0) {
    fprintf(fails, "%s %s [%s]: output %d error %.3g > threshold %.3g %s\n", r->dev.name, c->op,
            c->label, worst_k, worst, worst_thr, worst_why);
    r->failures++;
  }
  if (worst > r->worst) {
    r->worst = worst;
    r->worst_op = c->op;
  }
}

/* Runs case ci on the reference and every device, recording into rep[0..n). */
static void run_case_everywhere(int ci, DevReport *rep, int n, FILE *fails) {
  const XCase *c = &xcases[ci];
  FloeTensor *ins[XMAX_IN];
  int n_in = make_inputs(c, ins);
  XDevice refdev = ref_device();
  XOut ref = {{NULL}, 0};
  char err[1024] = "";
  XResult rr = run_on(c, ins, &refdev, &ref, err, sizeof err);
  if (rr == XR_NO_KERNEL && (c->flags & XF_IF_REF_KERNEL)) {
    for (int i = 0; i < n_in; i++) floe_tensor_release(ins[i]);
    return;
  }
  if (rr != XR_RAN) {
    fprintf(fails, "%s [%s]: the reference %s %s: fix the case\n", c->op, c->label, REF_DEVICE,
            rr == XR_NO_KERNEL ? "has no kernel for it" : err);
    rep[0].failures++;
  }
  for (int i = 0; i < n && rr == XR_RAN; i++) {
    DevReport *r = &rep[i];
    XOut got = {{NULL}, 0};
    XResult res = run_on(c, ins, &r->dev, &got, err, sizeof err);
    if (res == XR_NO_KERNEL) {
      r->no_kernel++;
      if (verbose) printf("%s %s [%s]: no kernel for these dtypes\n", r->dev.name, c->op, c->label);
      continue;
    }
    note_ran(r, c->op);
    r->ran_case[ci] = true;
    if (res == XR_FAILED) {
      fprintf(fails, "%s %s [%s]: %s\n", r->dev.name, c->op, c->label, err);
      r->failures++;
    } else if (c->stat != XS_NONE) {
      check_random(c, &ref, &got, r, fails);
    } else {
      check_outputs(c, &ref, &got, r, fails);
    }
    r->cases++;
    xout_release(&got);
  }
  xout_release(&ref);
  for (int i = 0; i < n_in; i++) floe_tensor_release(ins[i]);
}

START_TEST(test_every_kernel_of_every_device) {
  DevReport *rep = calloc(XMAX_DEVICES, sizeof *rep);
  ck_assert_ptr_nonnull(rep);
  char ref_type[32];
  int n = list_devices(rep, XMAX_DEVICES, ref_type, sizeof ref_type);
  ck_assert_msg(ref_type[0], "no %s device: is the CPU plugin on FLOE_PLUGIN_PATH?", REF_DEVICE);
  ck_assert_msg(n > 0, "only %s is loaded: the runtime should present cpu:1 (FLOE_CPU_DEVICES)",
                REF_DEVICE);
  char *buf = NULL;
  size_t len = 0;
  FILE *fails = open_memstream(&buf, &len);
  ck_assert_ptr_nonnull(fails);
  for (int ci = 0; ci < xnum_cases; ci++) run_case_everywhere(ci, rep, n, fails);
  int total = 0;
  for (int i = 0; i < n; i++) {
    DevReport *r = &rep[i];
    r->failures += check_coverage(&r->dev, r->ran_ops, r->n_ran_ops, fails);
    char gap_note[160] = "";
    if (!r->dev.same_as_ref) { /* the reference's type runs the reference's kernels */
      int gaps = dtype_gaps(r, NULL, verbose ? stdout : NULL);
      snprintf(gap_note, sizeof gap_note, "; %d op/dtype pairs its kernels accept have no case%s",
               gaps, gaps && !verbose ? " (FLOE_TEST_VERBOSE=1 lists them)" : "");
    }
    printf("%s: %d ops, %d cases (%d random, by distribution), worst normalised error %.2g (%s)"
           "%s; %d cases skipped (no kernel for their dtypes)%s; %d failures\n",
           r->dev.name, r->n_ran_ops, r->cases, r->random, r->worst, r->worst_op,
           r->dev.same_as_ref ? ", must be 0 (same kernels as " REF_DEVICE ")" : "", r->no_kernel,
           gap_note, r->failures);
    total += r->failures;
  }
  fflush(stdout);
  fclose(fails);
  if (total) fprintf(stderr, "%s", buf);
  ck_assert_msg(total == 0, "%d failures (all on stderr); the first: %.3000s", total, buf);
  free(buf);
  free(rep);
}
END_TEST

/* ---------------------------------------------------------------------------------- */
/* The machinery itself: the table, the error measure, detection, coverage, the listing. */

START_TEST(test_table_is_sane) {
  for (int i = 0; i < xnum_cases; i++) {
    const XCase *c = &xcases[i];
    ck_assert_msg(floe_op_exists(c->op), "case %d: op %s is not defined", i, c->op);
    ck_assert_msg(!excluded(c->op, NULL), "%s is both excluded and covered", c->op);
    bool derived = false;
    for (int k = 0; k < num_inputs(c); k++) derived |= c->in[k].kind == 'd';
    ck_assert_msg(derived == (c->derive != NULL), "%s [%s]: 'd' inputs need a derive function",
                  c->op, c->label);
  }
  for (int i = 0; i < xnum_excluded; i++)
    ck_assert_msg(floe_op_exists(xexcluded[i].op) && *xexcluded[i].reason,
                  "excluded op %s: not defined, or no reason", xexcluded[i].op);
  /* The standard set: every op the CPU plugin implements has cases. */
  int cpu_ops = 0;
  for (int i = 0; i < floe_runtime_num_kernels(rt); i++) {
    FloeKernelInfo k = {sizeof k, NULL, NULL, NULL, 0, 0};
    ck_assert_int_eq(floe_runtime_kernel(rt, i, &k), FLOE_OK);
    if (strcmp(k.device_type, "CPU") != 0) continue;
    ck_assert_msg(cases_of(k.op) > 0, "no case for the CPU's %s", k.op);
    cpu_ops++;
  }
  ck_assert_int_gt(cpu_ops, 100);
}
END_TEST

static double err_of(FloeDType dt, int rank, const int64_t *dims, const double *got,
                     const double *want, int64_t *wdims, int wrank, FloeDType wdt) {
  FloeTensor *g = harness_from_doubles(dt, rank, dims, got);
  FloeTensor *w = harness_from_doubles(wdt, wrank, wdims, want);
  char why[256];
  double e = xdev_error(g, w, why, sizeof why);
  floe_tensor_release(g);
  floe_tensor_release(w);
  return e;
}

/* Values worked out by hand. */
START_TEST(test_error_measure) {
  int64_t d2[] = {2}, d21[] = {2, 1}, d3[] = {3};
  double want[] = {3, 4};
  ck_assert(err_of(FLOE_F32, 1, d2, (double[]){3, 4}, want, d2, 1, FLOE_F32) == 0);
  /* ||(0, 0.5)|| / ||(3, 4)|| = 0.5 / 5 */
  ck_assert(fabs(err_of(FLOE_F64, 1, d2, (double[]){3, 4.5}, want, d2, 1, FLOE_F64) - 0.1) < 1e-15);
  ck_assert(err_of(FLOE_F32, 1, d2, (double[]){0, 0}, (double[]){0, 0}, d2, 1, FLOE_F32) == 0);
  ck_assert(err_of(FLOE_F32, 1, d2, (double[]){1e-3, 0}, (double[]){0, 0}, d2, 1, FLOE_F32) > 1);
  ck_assert(err_of(FLOE_I32, 1, d3, (double[]){1, 7, -2}, (double[]){1, 5, -2}, d3, 1, FLOE_I32) ==
            2);
  ck_assert(err_of(FLOE_BOOL, 1, d2, (double[]){1, 0}, (double[]){1, 1}, d2, 1, FLOE_BOOL) == 1);
  ck_assert(err_of(FLOE_F32, 1, d2, (double[]){NAN, 4}, (double[]){NAN, 4}, d2, 1, FLOE_F32) == 0);
  ck_assert(isinf(err_of(FLOE_F32, 1, d2, (double[]){NAN, 4}, want, d2, 1, FLOE_F32)));
  ck_assert(isinf(err_of(FLOE_F32, 1, d2, (double[]){INFINITY, 4}, want, d2, 1, FLOE_F32)));
  ck_assert(isinf(err_of(FLOE_F32, 2, d21, want, want, d2, 1, FLOE_F32)));
  ck_assert(isinf(err_of(FLOE_F64, 1, d2, want, want, d2, 1, FLOE_F32)));
  /* Thresholds: f32 1e-5, f64 1e-12, bf16 8e-3, exact integers; bf16 for matrix-class ops on
   * bf16 devices only; 0 for a device of the reference's type. */
  XDevice acc = {"acc:0", "ACC", false, 0}, tpu = {"tpu-sim:0", "TPU_SIM", false, 8e-3};
  XDevice cpu1 = {"cpu:1", "CPU", true, 0};
  XCase mm = {.op = "MatMul", .flags = XF_MATRIX}, add = {.op = "Add"};
  ck_assert(threshold(&add, &acc, FLOE_F32) == 1e-5);
  ck_assert(threshold(&add, &acc, FLOE_F64) == 1e-12);
  ck_assert(threshold(&add, &acc, FLOE_BF16) == 8e-3);
  ck_assert(threshold(&add, &acc, FLOE_I32) == 0);
  ck_assert(threshold(&mm, &acc, FLOE_F32) == 1e-5);
  ck_assert(threshold(&mm, &tpu, FLOE_F32) == 8e-3);
  ck_assert(threshold(&add, &tpu, FLOE_F32) == 1e-5);
  ck_assert(threshold(&mm, &cpu1, FLOE_F32) == 0);
  /* Which devices round matrix operands. */
  ck_assert(matrix_threshold_of("TPU_SIM") == 8e-3);
  ck_assert(matrix_threshold_of("CPU") == 0);
  const char *mode = getenv("FLOE_CUDA_MATMUL");
  unsetenv("FLOE_CUDA_MATMUL");
  ck_assert(matrix_threshold_of("CUDA") == 0);
  setenv("FLOE_CUDA_MATMUL", "tf32", 1);
  ck_assert(matrix_threshold_of("CUDA") == 1e-3);
  setenv("FLOE_CUDA_MATMUL", "bf16", 1);
  ck_assert(matrix_threshold_of("CUDA") == 8e-3);
  if (mode) setenv("FLOE_CUDA_MATMUL", mode, 1);
  else unsetenv("FLOE_CUDA_MATMUL");
}
END_TEST

static const XCase *find_case(const char *op) {
  for (int i = 0; i < xnum_cases; i++)
    if (strcmp(xcases[i].op, op) == 0) return &xcases[i];
  ck_abort_msg("no case of %s", op);
  return NULL;
}

/* A wrong kernel is caught: Sub's results checked as Add's, and the distribution check
 * rejects normal samples posing as uniform ones. */
START_TEST(test_detects_wrong_results) {
  verbose = false; /* the wrong results are expected here */
  XDevice cpu1 = {"cpu:1", "CPU", true, 0}, ref = ref_device();
  const XCase *add = find_case("Add");
  XCase sub = *add;
  sub.op = "Sub";
  FloeTensor *ins[XMAX_IN];
  int n_in = make_inputs(add, ins);
  XOut a = {{NULL}, 0}, s = {{NULL}, 0};
  char err[512];
  ck_assert_int_eq(run_on(add, ins, &cpu1, &a, err, sizeof err), XR_RAN);
  ck_assert_int_eq(run_on(&sub, ins, &ref, &s, err, sizeof err), XR_RAN);
  DevReport r = {.dev = cpu1, .worst_op = "-"};
  char *buf = NULL;
  size_t len = 0;
  FILE *fails = open_memstream(&buf, &len);
  check_outputs(add, &s, &a, &r, fails);
  fclose(fails);
  ck_assert_int_eq(r.failures, 1);
  ck_assert_msg(strstr(buf, "cpu:1 Add") && strstr(buf, "threshold"), "message: %s", buf);
  ck_assert(r.worst > 0.1);
  free(buf);
  xout_release(&a);
  xout_release(&s);

  /* RandomNormal's samples are no U[0,1). */
  const XCase *normal = find_case("RandomNormal");
  XCase as_uniform = *normal;
  as_uniform.stat = XS_UNIFORM;
  for (int i = 0; i < n_in; i++) floe_tensor_release(ins[i]);
  n_in = make_inputs(normal, ins);
  ck_assert_int_eq(run_on(normal, ins, &cpu1, &a, err, sizeof err), XR_RAN);
  int64_t n = 0;
  char why[256];
  ck_assert(stat_distance(normal, &a, &n, why, sizeof why) < 1.95 / sqrt((double)n));
  ck_assert(stat_distance(&as_uniform, &a, &n, why, sizeof why) > 0.3);
  xout_release(&a);
  for (int i = 0; i < n_in; i++) floe_tensor_release(ins[i]);
}
END_TEST

/* Failures are reported by device, op and case, never skipped: a reference that fails (an
 * index out of range), a device that cannot run the graph (no such device). A device type
 * without a kernel for the dtypes skips the case. */
START_TEST(test_failures_are_reported) {
  static const double index[] = {99};
  const XCase bad = {.op = "Gather",
                     .label = "index out of range",
                     .in = {{'r', FLOE_F32, 2, {5, 3}, -1, 1, NULL},
                            {'v', FLOE_I32, 1, {1}, 0, 0, index}}};
  DevReport rep[1] = {{.dev = {"cpu:1", "CPU", true, 0}, .worst_op = "-"}};
  char *buf = NULL;
  size_t len = 0;
  FILE *fails = open_memstream(&buf, &len);
  FloeTensor *ins[XMAX_IN];
  int n_in = make_inputs(&bad, ins);
  XOut out = {{NULL}, 0};
  XDevice ref = ref_device();
  char err[1024];
  ck_assert_int_eq(run_on(&bad, ins, &ref, &out, err, sizeof err), XR_FAILED);
  ck_assert_msg(strstr(err, "99") != NULL, "the error should name the index: %s", err);
  ck_assert_int_eq(out.n, 0);

  /* No device of that name: the session says so. */
  XDevice missing = {"cpu:7", "CPU", true, 0};
  const XCase *add = find_case("Add");
  for (int i = 0; i < n_in; i++) floe_tensor_release(ins[i]);
  n_in = make_inputs(add, ins);
  ck_assert_int_eq(run_on(add, ins, &missing, &out, err, sizeof err), XR_FAILED);
  ck_assert_msg(strstr(err, "cpu:7") != NULL, "the error should name the device: %s", err);
  /* A device type without kernels skips. */
  XDevice none = {"cpu:1", "NO_SUCH_TYPE", false, 0};
  ck_assert_int_eq(run_on(add, ins, &none, &out, err, sizeof err), XR_NO_KERNEL);
  for (int i = 0; i < n_in; i++) floe_tensor_release(ins[i]);

  /* Through the loop that records them. */
  rep[0].dev = missing;
  run_case_everywhere((int)(add - xcases), rep, 1, fails);
  fclose(fails);
  ck_assert_int_eq(rep[0].failures, 1);
  ck_assert_msg(strstr(buf, "cpu:7 Add [") != NULL, "message: %s", buf);
  free(buf);
}
END_TEST

/* An op with a kernel of the device's type that no case ran on is reported by name. */
START_TEST(test_uncovered_kernel_fails) {
  XDevice cpu1 = {"cpu:1", "CPU", true, 0};
  const char *ran[256];
  int n = 0;
  for (int i = 0; i < floe_runtime_num_kernels(rt); i++) {
    FloeKernelInfo k = {sizeof k, NULL, NULL, NULL, 0, 0};
    ck_assert_int_eq(floe_runtime_kernel(rt, i, &k), FLOE_OK);
    if (strcmp(k.device_type, "CPU") == 0 && strcmp(k.op, "MatMul") != 0 && !listed(ran, n, k.op)) {
      ck_assert_int_lt(n, 256);
      ran[n++] = k.op;
    }
  }
  char *buf = NULL;
  size_t len = 0;
  FILE *fails = open_memstream(&buf, &len);
  int missing = check_coverage(&cpu1, ran, n, fails);
  fclose(fails);
  ck_assert_int_eq(missing, 1);
  ck_assert_msg(strstr(buf, "cpu:1 has a kernel for MatMul but none of its"), "message: %s", buf);
  free(buf);
  ran[n++] = "MatMul";
  fails = open_memstream(&buf, &len);
  ck_assert_int_eq(check_coverage(&cpu1, ran, n, fails), 0);
  fclose(fails);
  free(buf);
}
END_TEST

/* The dtype gaps of a device of the CPU's type, worked out from the CPU plugin's MatMul
 * (T in f32, f64, f16, bf16) and the table's MatMul cases (f32, f64, bf16). */
START_TEST(test_dtype_gaps) {
  DevReport *r = calloc(1, sizeof *r);
  ck_assert_ptr_nonnull(r);
  r->dev = (XDevice){"cpu:1", "CPU", false, 0};
  for (int ci = 0; ci < xnum_cases; ci++) /* only the f32 products ran */
    r->ran_case[ci] = strcmp(xcases[ci].op, "MatMul") == 0 && xcases[ci].in[0].dt == FLOE_F32;
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  ck_assert_int_eq(dtype_gaps(r, "MatMul", out), 3);
  fclose(out);
  ck_assert_msg(strstr(buf, "cpu:1 MatMul: no case with T in f64,f16,bf16"), "gaps: %s", buf);
  free(buf);
  for (int ci = 0; ci < xnum_cases; ci++) r->ran_case[ci] = strcmp(xcases[ci].op, "MatMul") == 0;
  out = open_memstream(&buf, &len);
  ck_assert_int_eq(dtype_gaps(r, "MatMul", out), 1);
  fclose(out);
  ck_assert_msg(strstr(buf, "T in f16\n"), "gaps: %s", buf);
  free(buf);
  free(r);
}
END_TEST

/* floe_runtime_num_kernels / floe_runtime_kernel / floe_runtime_device_has_kernel. */
START_TEST(test_kernel_listing) {
  int n = floe_runtime_num_kernels(rt);
  ck_assert_int_gt(n, 100);
  ck_assert_int_eq(floe_runtime_num_kernels(NULL), 0);
  int matmul_cpu = 0, core = 0;
  for (int i = 0; i < n; i++) {
    FloeKernelInfo k = {sizeof k, NULL, NULL, NULL, 0, 0};
    ck_assert_int_eq(floe_runtime_kernel(rt, i, &k), FLOE_OK);
    ck_assert(k.op && k.device_type && k.plugin && floe_op_exists(k.op));
    if (strcmp(k.op, "MatMul") == 0 && strcmp(k.device_type, "CPU") == 0) {
      matmul_cpu++;
      ck_assert_str_eq(k.plugin, "cpu");
    }
    if (strcmp(k.device_type, "*") == 0) {
      core++;
      ck_assert_str_eq(k.plugin, "core");
    }
  }
  ck_assert_int_eq(matmul_cpu, 1);
  /* MatMul's CPU kernel takes every float dtype for T (plugins/cpu/matmul.c). */
  for (int i = 0; i < n; i++) {
    FloeKernelInfo k = {sizeof k, NULL, NULL, NULL, 0, 0};
    ck_assert_int_eq(floe_runtime_kernel(rt, i, &k), FLOE_OK);
    if (strcmp(k.op, "MatMul") != 0 || strcmp(k.device_type, "CPU") != 0) continue;
    ck_assert_int_eq(k.num_constraints, 1);
    const char *attr = NULL;
    uint32_t mask = 0;
    ck_assert_int_eq(floe_runtime_kernel_constraint(rt, i, 0, &attr, &mask), FLOE_OK);
    ck_assert_str_eq(attr, "T");
    ck_assert_uint_eq(mask, FLOE_DTYPES_FLOAT);
    ck_assert_int_eq(floe_runtime_kernel_constraint(rt, i, 1, &attr, &mask), FLOE_OUT_OF_RANGE);
    ck_assert_int_eq(floe_runtime_kernel_constraint(rt, i, -1, &attr, &mask), FLOE_OUT_OF_RANGE);
    ck_assert_int_eq(floe_runtime_kernel_constraint(rt, i, 0, NULL, &mask), FLOE_INVALID_ARGUMENT);
    ck_assert_int_eq(floe_runtime_kernel_constraint(rt, i, 0, &attr, NULL), FLOE_INVALID_ARGUMENT);
  }
  {
    const char *attr = NULL;
    uint32_t mask = 0;
    ck_assert_int_eq(floe_runtime_kernel_constraint(rt, n, 0, &attr, &mask), FLOE_OUT_OF_RANGE);
    ck_assert_int_eq(floe_runtime_kernel_constraint(NULL, 0, 0, &attr, &mask), FLOE_OUT_OF_RANGE);
  }
  ck_assert_int_gt(core, 0);
  FloeKernelInfo k = {sizeof k, NULL, NULL, NULL, 0, 0};
  ck_assert_int_eq(floe_runtime_kernel(rt, n, &k), FLOE_OUT_OF_RANGE);
  ck_assert_int_eq(floe_runtime_kernel(rt, -1, &k), FLOE_OUT_OF_RANGE);
  ck_assert_int_eq(floe_runtime_kernel(NULL, 0, &k), FLOE_OUT_OF_RANGE);
  ck_assert_int_eq(floe_runtime_kernel(rt, 0, NULL), FLOE_INVALID_ARGUMENT);
  k.struct_size = sizeof(size_t);
  ck_assert_int_eq(floe_runtime_kernel(rt, 0, &k), FLOE_INVALID_ARGUMENT);

  FloeGraph *g = floe_graph_new();
  FloeOutput a = floe_placeholder(g, "a", FLOE_F32, floe_shape_make(2, (int64_t[]){2, 2}));
  FloeOutput b = floe_placeholder(g, "b", FLOE_I32, floe_shape_make(2, (int64_t[]){2, 2}));
  FloeNode *mm = floe_matmul(g, "mm", a, a, 0, 0).node;
  FloeNode *add_i = floe_binary(g, "Add", "add_i", b, b).node;
  FloeNodeBuilder *vb = floe_node_begin(g, "VarHandleOp", "v");
  floe_node_set_attr_type(vb, "dtype", FLOE_F32);
  floe_node_set_attr_shape(vb, "shape", floe_shape_scalar());
  FloeNode *var = floe_node_finish(vb);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  ck_assert_int_eq(floe_runtime_device_has_kernel(rt, mm, "CPU"), 1);
  ck_assert_int_eq(floe_runtime_device_has_kernel(rt, mm, "cpu"), 1); /* types ignore case */
  ck_assert_int_eq(floe_runtime_device_has_kernel(rt, add_i, "CPU"), 1);
  ck_assert_int_eq(floe_runtime_device_has_kernel(rt, mm, "NO_SUCH_TYPE"), 0);
  /* The core's kernel for any device is not the device's own. */
  ck_assert_int_eq(floe_runtime_device_has_kernel(rt, var, "CPU"), 0);
  ck_assert_int_eq(floe_runtime_device_has_kernel(rt, var, "*"), 0);
  ck_assert_int_eq(floe_runtime_device_has_kernel(NULL, mm, "CPU"), 0);
  ck_assert_int_eq(floe_runtime_device_has_kernel(rt, NULL, "CPU"), 0);
  ck_assert_int_eq(floe_runtime_device_has_kernel(rt, mm, NULL), 0);
  ck_assert_int_eq(floe_node_attr_type(mm, "T"), FLOE_F32);
  ck_assert_int_eq(floe_node_attr_type(add_i, "T"), FLOE_I32);
  ck_assert_int_eq(floe_node_attr_type(var, "dtype"), FLOE_F32);
  ck_assert_int_eq(floe_node_attr_type(mm, "transpose_a"), FLOE_DTYPE_INVALID); /* a bool */
  ck_assert_int_eq(floe_node_attr_type(mm, "nope"), FLOE_DTYPE_INVALID);
  ck_assert_int_eq(floe_node_attr_type(NULL, "T"), FLOE_DTYPE_INVALID);
  ck_assert_int_eq(floe_node_attr_type(mm, NULL), FLOE_DTYPE_INVALID);
  floe_graph_free(g);

  /* MatMul has no i32 kernel anywhere: no i32 MatMul node can be built, and the op's
   * definition refuses it before any kernel is asked. */
  g = floe_graph_new();
  b = floe_placeholder(g, "b", FLOE_I32, floe_shape_make(2, (int64_t[]){2, 2}));
  ck_assert_ptr_null(floe_matmul(g, "mm", b, b, 0, 0).node);
  ck_assert_int_ne(floe_graph_status(g), FLOE_OK);
  floe_graph_free(g);
}
END_TEST

static Suite *devices_suite(void) {
  Suite *s = suite_create("devices");
  TCase *tc = tcase_create("devices");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_table_is_sane);
  tcase_add_test(tc, test_error_measure);
  tcase_add_test(tc, test_detects_wrong_results);
  tcase_add_test(tc, test_uncovered_kernel_fails);
  tcase_add_test(tc, test_failures_are_reported);
  tcase_add_test(tc, test_dtype_gaps);
  tcase_add_test(tc, test_kernel_listing);
  tcase_add_test(tc, test_every_kernel_of_every_device);
  suite_add_tcase(s, tc);
  return s;
}

/* Appends dir to path (colon-separated) when it is a folder. */
static void path_add(char *path, size_t len, const char *dir) {
  struct stat sb;
  if (!dir || !*dir || stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) return;
  size_t at = strlen(path);
  snprintf(path + at, len - at, "%s%s", at ? ":" : "", dir);
}

int main(void) {
#if defined(__SANITIZE_THREAD__)
  /* The CPU plugin's oneDNN kernels may run on OpenMP's threads, whose barriers (libgomp's
   * futexes) ThreadSanitizer cannot see: every buffer handed to such a region would look
   * raced (seen once on Conv2DBackpropInput). Under ThreadSanitizer OpenMP gets one thread;
   * Floe's own pool and the devices' pieces running at once are what it checks. */
  setenv("OMP_NUM_THREADS", "1", 1);
#endif
  /* The accelerator plugins built beside the CPU's join the path the tests use (the other
   * test programs keep seeing the CPU alone); a plugin found twice is loaded once. */
  char path[8192], dir[4096];
  const char *base = getenv("FLOE_PLUGIN_PATH"), *top = getenv("top_builddir");
  snprintf(path, sizeof path, "%s", base ? base : "");
  path_add(path, sizeof path, getenv("FLOE_TPUSIM_PLUGIN_DIR"));
  static const char *const plugins[] = {"tpu-sim", "cuda"};
  for (size_t i = 0; top && i < sizeof plugins / sizeof *plugins; i++) {
    snprintf(dir, sizeof dir, "%s/plugins/%s/.libs", top, plugins[i]);
    path_add(path, sizeof path, dir);
  }
  if (*path) setenv("FLOE_PLUGIN_PATH", path, 1);
  /* Every kernel must run where it was placed: constant folding (which also hands a host
   * Const's value to its readers without running its kernel) would answer some cases
   * without them. */
  setenv("FLOE_OPT_CONSTANT_FOLDING", "0", 1);
  SRunner *sr = srunner_create(devices_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
