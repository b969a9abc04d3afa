/* SPDX-License-Identifier: Apache-2.0 */
/* bench_conv.c - the convolutions of the "deep MNIST" CNN (batch 64, NHWC, f32: conv1
 * 28x28x1 -> 32 and conv2 14x14x32 -> 64, both 5x5 SAME) forward, backward-data and
 * backward-filter through Floe sessions (Conv2D, Conv2DBackpropInput, Conv2DBackpropFilter)
 * versus the raw oneDNN primitives in the same process; then the CNN's pooling
 * (MaxPool / MaxPoolGrad / AvgPoolGrad, 2x2 stride 2) through sessions alone.
 *
 * The raw primitive gets its best case: it is built twice, with NHWC data and with the data
 * layouts it prefers (format `any`; weights always `any`), the faster of the two is kept,
 * inputs are reordered before timing and its output stays in its own layout. The session
 * takes NHWC tensors and an HWIO filter and returns NHWC / HWIO. Repetitions alternate
 * between the two and medians are compared: ratio = raw time / session time (target >= 0.95).
 * The fastest repetitions are reported too: on a shared machine they are the better estimate
 * of the uncontended time. Each session result is checked once against the raw primitive's.
 *
 *   bench_conv [--reps N] [--batch B] [--json]
 */
#include <dnnl.h>
#include <dnnl_debug.h>
#include <floe/floe.h>

#include "bench_util.h"
#include <getopt.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { K = 5 };

typedef struct Layer {
  const char *name;
  int64_t h, w, c, o;
} Layer;

static const Layer layers[2] = {{"conv1", 28, 28, 1, 32}, {"conv2", 14, 14, 32, 64}};

typedef enum Pass { FWD, BWD_DATA, BWD_FILTER } Pass;
static const char *const pass_names[] = {"forward", "backward data", "backward filter"};
static const char *const pass_ops[] = {"Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"};

static void fill(float *p, int64_t n, uint32_t seed) {
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    p[i] = (float)(seed >> 8) * (1.0f / 16777216.0f) - 0.5f;
  }
}

#define DNNL_OK(call)                                                                 \
  do {                                                                                \
    dnnl_status_t st_ = (call);                                                       \
    if (st_ != dnnl_success) {                                                        \
      fprintf(stderr, "bench_conv: %s: %s\n", #call, dnnl_status2str(st_));           \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

static dnnl_engine_t eng;
static dnnl_stream_t stream;

/* Runs a reorder from (md_from, from) to (md_to, to). */
static void reorder(const dnnl_memory_desc_t *md_from, void *from, const dnnl_memory_desc_t *md_to,
                    void *to) {
  dnnl_primitive_desc_t pd;
  dnnl_primitive_t p;
  dnnl_memory_t a, b;
  DNNL_OK(dnnl_reorder_primitive_desc_create(&pd, md_from, eng, md_to, eng, NULL));
  DNNL_OK(dnnl_primitive_create(&p, pd));
  DNNL_OK(dnnl_memory_create(&a, md_from, eng, from));
  DNNL_OK(dnnl_memory_create(&b, md_to, eng, to));
  dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, a}, {DNNL_ARG_TO, b}};
  DNNL_OK(dnnl_primitive_execute(p, stream, 2, args));
  DNNL_OK(dnnl_stream_wait(stream));
  dnnl_memory_destroy(a);
  dnnl_memory_destroy(b);
  dnnl_primitive_destroy(p);
  dnnl_primitive_desc_destroy(pd);
}

static void *xalloc(size_t bytes) {
  void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) {
    fprintf(stderr, "bench_conv: out of memory\n");
    exit(1);
  }
  return p;
}

/* ---------------------------------------------------------------------------------- */
/* The raw primitive of one pass: two inputs reordered in ahead, one output. */

typedef struct Raw {
  dnnl_primitive_t p;
  dnnl_memory_t mem[4];
  dnnl_exec_arg_t args[4];
  int nargs;
  dnnl_memory_desc_t out_md, out_user;
  void *bufs[4];
  char impl[96];
} Raw;

/* user data: x [N,H,W,C], f [K,K,C,O] (HWIO), dy [N,H,W,O]. */
static void raw_build(Raw *r, const Layer *l, int64_t n, Pass pass, bool nhwc, const float *x,
                      const float *f, const float *dy) {
  dnnl_dims_t sd = {n, l->c, l->h, l->w}, wd = {l->o, l->c, K, K}, dd = {n, l->o, l->h, l->w};
  dnnl_dims_t strides = {1, 1}, dil = {0, 0}, pad = {K / 2, K / 2};
  dnnl_format_tag_t tag = nhwc ? dnnl_nhwc : dnnl_format_tag_any;
  dnnl_memory_desc_t su, wu, du, sa, wa, da;
  DNNL_OK(dnnl_memory_desc_init_by_tag(&su, 4, sd, dnnl_f32, dnnl_nhwc));
  DNNL_OK(dnnl_memory_desc_init_by_tag(&wu, 4, wd, dnnl_f32, dnnl_hwio));
  DNNL_OK(dnnl_memory_desc_init_by_tag(&du, 4, dd, dnnl_f32, dnnl_nhwc));
  DNNL_OK(dnnl_memory_desc_init_by_tag(&sa, 4, sd, dnnl_f32, tag));
  DNNL_OK(dnnl_memory_desc_init_by_tag(&wa, 4, wd, dnnl_f32, dnnl_format_tag_any));
  DNNL_OK(dnnl_memory_desc_init_by_tag(&da, 4, dd, dnnl_f32, tag));
  dnnl_convolution_desc_t fd, bd;
  dnnl_primitive_desc_t hint, pd;
  DNNL_OK(dnnl_dilated_convolution_forward_desc_init(
      &fd, pass == FWD ? dnnl_forward_inference : dnnl_forward_training, dnnl_convolution_direct,
      &sa, &wa, NULL, &da, strides, dil, pad, pad));
  DNNL_OK(dnnl_primitive_desc_create(&hint, &fd, NULL, eng, NULL));
  if (pass == FWD) {
    pd = hint;
    hint = NULL;
  } else {
    if (pass == BWD_DATA)
      DNNL_OK(dnnl_dilated_convolution_backward_data_desc_init(
          &bd, dnnl_convolution_direct, &sa, &wa, &da, strides, dil, pad, pad));
    else
      DNNL_OK(dnnl_dilated_convolution_backward_weights_desc_init(
          &bd, dnnl_convolution_direct, &sa, &wa, NULL, &da, strides, dil, pad, pad));
    DNNL_OK(dnnl_primitive_desc_create(&pd, &bd, NULL, eng, hint));
    dnnl_primitive_desc_destroy(hint);
  }
  const char *impl = "";
  dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
  snprintf(r->impl, sizeof r->impl, "%s, %s data", impl, nhwc ? "NHWC" : "preferred");
  /* (arg, user md, user data) for the two inputs, then the output. */
  int ids[3];
  const dnnl_memory_desc_t *users[3];
  const float *data[2];
  switch (pass) {
    case FWD:
      ids[0] = DNNL_ARG_SRC, users[0] = &su, data[0] = x;
      ids[1] = DNNL_ARG_WEIGHTS, users[1] = &wu, data[1] = f;
      ids[2] = DNNL_ARG_DST, users[2] = &du;
      break;
    case BWD_DATA:
      ids[0] = DNNL_ARG_DIFF_DST, users[0] = &du, data[0] = dy;
      ids[1] = DNNL_ARG_WEIGHTS, users[1] = &wu, data[1] = f;
      ids[2] = DNNL_ARG_DIFF_SRC, users[2] = &su;
      break;
    default:
      ids[0] = DNNL_ARG_SRC, users[0] = &su, data[0] = x;
      ids[1] = DNNL_ARG_DIFF_DST, users[1] = &du, data[1] = dy;
      ids[2] = DNNL_ARG_DIFF_WEIGHTS, users[2] = &wu;
      break;
  }
  r->nargs = 0;
  for (int i = 0; i < 3; i++) {
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, ids[i]);
    r->bufs[i] = xalloc(dnnl_memory_desc_get_size(md));
    if (i < 2) reorder(users[i], (void *)data[i], md, r->bufs[i]);
    else {
      r->out_md = *md;
      r->out_user = *users[i];
    }
    DNNL_OK(dnnl_memory_create(&r->mem[i], md, eng, r->bufs[i]));
    r->args[r->nargs++] = (dnnl_exec_arg_t){ids[i], r->mem[i]};
  }
  const dnnl_memory_desc_t *sp = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  r->bufs[3] = NULL;
  if (dnnl_memory_desc_get_size(sp)) {
    r->bufs[3] = xalloc(dnnl_memory_desc_get_size(sp));
    DNNL_OK(dnnl_memory_create(&r->mem[3], sp, eng, r->bufs[3]));
    r->args[r->nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, r->mem[3]};
  }
  DNNL_OK(dnnl_primitive_create(&r->p, pd));
  dnnl_primitive_desc_destroy(pd);
}

static void raw_run(Raw *r) {
  DNNL_OK(dnnl_primitive_execute(r->p, stream, r->nargs, r->args));
  DNNL_OK(dnnl_stream_wait(stream));
}

static void raw_free(Raw *r) {
  for (int i = 0; i < r->nargs; i++) dnnl_memory_destroy(r->mem[i]);
  for (int i = 0; i < 4; i++) free(r->bufs[i]);
  dnnl_primitive_destroy(r->p);
}

static double raw_median(Raw *r, int reps) {
  double *t = malloc((size_t)reps * sizeof(double));
  for (int i = 0; i < reps; i++) {
    double t0 = bench_now();
    raw_run(r);
    t[i] = bench_now() - t0;
  }
  double m = bench_median(t, reps);
  free(t);
  return m;
}

/* ---------------------------------------------------------------------------------- */
/* Sessions. */

static FloeStatus *st;

static void die_floe(const char *what) {
  fprintf(stderr, "bench_conv: %s: %s\n", what, floe_status_message(st));
  exit(1);
}

/* A session computing op "op" from placeholders named in0.. with the given tensors' shapes. */
static FloeSession *session_for(const char *op, FloeTensor *const *ins, int n, const int64_t *ks,
                                const char *padding) {
  FloeGraph *g = floe_graph_new();
  FloeNodeBuilder *b = floe_node_begin(g, op, "op");
  for (int i = 0; i < n; i++) {
    char name[8];
    snprintf(name, sizeof name, "in%d", i);
    floe_node_add_input(b, floe_placeholder(g, name, floe_tensor_dtype(ins[i]),
                                            floe_tensor_shape(ins[i])));
  }
  int64_t ones[4] = {1, 1, 1, 1};
  floe_node_set_attr_int_list(b, "strides", ks ? ks : ones, 4);
  if (ks) floe_node_set_attr_int_list(b, "ksize", ks, 4);
  floe_node_set_attr_string(b, "padding", padding);
  floe_node_set_attr_string(b, "data_format", "NHWC");
  floe_node_finish(b);
  if (floe_graph_status(g) != FLOE_OK) {
    fprintf(stderr, "bench_conv: graph: %s\n", floe_graph_error(g, NULL));
    exit(1);
  }
  FloeSession *s = floe_session_new(g, NULL, st);
  if (!s) die_floe("session");
  floe_graph_free(g);
  return s;
}

static FloeTensor *session_run(FloeSession *s, FloeTensor *const *ins, int n) {
  FloeFeed feeds[3];
  char names[3][8];
  for (int i = 0; i < n; i++) {
    snprintf(names[i], sizeof names[i], "in%d", i);
    feeds[i] = (FloeFeed){names[i], ins[i]};
  }
  const char *fetch = "op";
  FloeTensor *out = NULL;
  if (floe_session_run(s, feeds, n, &fetch, 1, NULL, 0, &out, st) != FLOE_OK) die_floe("run");
  return out;
}

/* Where a step of s takes its time, from 3 more steps, traced (the timed ones were not). */
static void session_breakdown(FloeSession *s, FloeTensor *const *ins, int n, FloeStepBreakdown *b) {
  FloeFeed feeds[3];
  char names[3][8];
  for (int i = 0; i < n; i++) {
    snprintf(names[i], sizeof names[i], "in%d", i);
    feeds[i] = (FloeFeed){names[i], ins[i]};
  }
  const char *fetch = "op";
  BenchStep one = {s, feeds, n, &fetch, 1, NULL, 0};
  if (bench_breakdown(s, bench_step_run, &one, 3, b)) exit(1);
}

static FloeTensor *tensor(FloeDType dt, int rank, const int64_t *dims, uint32_t seed) {
  FloeTensor *t = floe_tensor_new(dt, rank, dims, st);
  if (!t) die_floe("tensor");
  if (dt == FLOE_F32) fill(floe_tensor_data(t), floe_tensor_num_elements(t), seed);
  return t;
}

static FloeTensor *sizes(const int64_t d[4]) {
  int64_t four = 4;
  FloeTensor *t = tensor(FLOE_I32, 1, &four, 0);
  int32_t *v = floe_tensor_data(t);
  for (int i = 0; i < 4; i++) v[i] = (int32_t)d[i];
  return t;
}

/* ---------------------------------------------------------------------------------- */

typedef struct Result {
  double session_ms, raw_ms, gflop, max_diff;
  double session_min_ms, raw_min_ms;
  char impl[96];
  FloeStepBreakdown bd; /* of the session, traced */
} Result;

static void bench_pass(const Layer *l, int64_t n, Pass pass, int reps, Result *res) {
  int64_t xd[4] = {n, l->h, l->w, l->c}, fd[4] = {K, K, l->c, l->o}, yd[4] = {n, l->h, l->w, l->o};
  FloeTensor *x = tensor(FLOE_F32, 4, xd, 1), *f = tensor(FLOE_F32, 4, fd, 2);
  FloeTensor *dy = tensor(FLOE_F32, 4, yd, 3), *xs = sizes(xd), *fs = sizes(fd);
  FloeTensor *ins[3];
  int nin = 0;
  switch (pass) {
    case FWD: ins[0] = x, ins[1] = f, nin = 2; break;
    case BWD_DATA: ins[0] = xs, ins[1] = f, ins[2] = dy, nin = 3; break;
    default: ins[0] = x, ins[1] = fs, ins[2] = dy, nin = 3; break;
  }
  FloeSession *s = session_for(pass_ops[pass], ins, nin, NULL, "SAME");
  const float *px = floe_tensor_data(x), *pf = floe_tensor_data(f), *pdy = floe_tensor_data(dy);

  /* The raw side's faster layout, from a few runs of each. */
  Raw cand[2];
  double tc[2];
  for (int i = 0; i < 2; i++) {
    raw_build(&cand[i], l, n, pass, i == 0, px, pf, pdy);
    raw_run(&cand[i]);
    tc[i] = raw_median(&cand[i], 5);
  }
  int best = tc[1] < tc[0];
  raw_free(&cand[1 - best]);
  Raw *r = &cand[best];

  double *ts = malloc((size_t)reps * sizeof(double)), *tr = malloc((size_t)reps * sizeof(double));
  double max_diff = 0;
  for (int rep = -2; rep < reps; rep++) { /* two untimed warm-up rounds */
    for (int k = 0; k < 2; k++) {
      int session_turn = (k == 0) == (rep % 2 == 0); /* alternate which goes first */
      double t0 = bench_now();
      if (session_turn) {
        FloeTensor *out = session_run(s, ins, nin);
        double t = bench_now() - t0;
        if (rep >= 0) ts[rep] = t;
        if (rep == -1) { /* check the session against the raw result once */
          raw_run(r);
          float *check = xalloc(dnnl_memory_desc_get_size(&r->out_user));
          reorder(&r->out_md, r->bufs[2], &r->out_user, check);
          const float *o = floe_tensor_data(out);
          for (int64_t i = 0; i < floe_tensor_num_elements(out); i++)
            if (fabs((double)o[i] - check[i]) > max_diff) max_diff = fabs((double)o[i] - check[i]);
          free(check);
        }
        floe_tensor_release(out);
      } else {
        raw_run(r);
        double t = bench_now() - t0;
        if (rep >= 0) tr[rep] = t;
      }
    }
  }
  res->session_ms = bench_median(ts, reps) * 1e3; /* sorts: [0] is the fastest */
  res->raw_ms = bench_median(tr, reps) * 1e3;
  res->session_min_ms = ts[0] * 1e3;
  res->raw_min_ms = tr[0] * 1e3;
  res->gflop = 2.0 * (double)n * (double)(l->h * l->w * l->o * l->c * K * K) * 1e-9;
  res->max_diff = max_diff;
  snprintf(res->impl, sizeof res->impl, "%s", r->impl);
  session_breakdown(s, ins, nin, &res->bd);
  free(ts);
  free(tr);
  raw_free(r);
  floe_session_free(s);
  FloeTensor *all[] = {x, f, dy, xs, fs};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) floe_tensor_release(all[i]);
}

/* Pooling through sessions: 2x2 windows, stride 2, SAME, on [n, h, w, c]. ms per op. */
typedef struct PoolResult {
  int64_t h, c;
  double fwd_ms, max_grad_ms, avg_grad_ms, mbytes;
  double fwd_min_ms, max_grad_min_ms, avg_grad_min_ms;
  FloeStepBreakdown fwd_bd, max_grad_bd, avg_grad_bd; /* traced */
} PoolResult;

/* Median time of reps runs (the fastest in *fastest). */
static double session_median(FloeSession *s, FloeTensor *const *ins, int n, int reps,
                             double *fastest) {
  double *t = malloc((size_t)reps * sizeof(double));
  for (int i = -2; i < reps; i++) {
    double t0 = bench_now();
    floe_tensor_release(session_run(s, ins, n));
    if (i >= 0) t[i] = bench_now() - t0;
  }
  double m = bench_median(t, reps);
  *fastest = t[0];
  free(t);
  return m;
}

static void bench_pool(int64_t n, int64_t h, int64_t c, int reps, PoolResult *res) {
  int64_t xd[4] = {n, h, h, c}, yd[4] = {n, h / 2, h / 2, c}, ks[4] = {1, 2, 2, 1};
  FloeTensor *x = tensor(FLOE_F32, 4, xd, 4), *dy = tensor(FLOE_F32, 4, yd, 5), *xs = sizes(xd);
  FloeSession *fwd = session_for("MaxPool", &x, 1, ks, "SAME");
  FloeTensor *y = session_run(fwd, &x, 1);
  FloeTensor *mg_in[3] = {x, y, dy}, *ag_in[2] = {xs, dy};
  FloeSession *mg = session_for("MaxPoolGrad", mg_in, 3, ks, "SAME");
  FloeSession *ag = session_for("AvgPoolGrad", ag_in, 2, ks, "SAME");
  res->h = h;
  res->c = c;
  res->fwd_ms = session_median(fwd, &x, 1, reps, &res->fwd_min_ms) * 1e3;
  res->max_grad_ms = session_median(mg, mg_in, 3, reps, &res->max_grad_min_ms) * 1e3;
  res->avg_grad_ms = session_median(ag, ag_in, 2, reps, &res->avg_grad_min_ms) * 1e3;
  res->fwd_min_ms *= 1e3;
  res->max_grad_min_ms *= 1e3;
  res->avg_grad_min_ms *= 1e3;
  session_breakdown(fwd, &x, 1, &res->fwd_bd);
  session_breakdown(mg, mg_in, 3, &res->max_grad_bd);
  session_breakdown(ag, ag_in, 2, &res->avg_grad_bd);
  /* MaxPoolGrad reads x and dy and writes dx. */
  res->mbytes = (double)(2 * n * h * h * c + n * (h / 2) * (h / 2) * c) * 4 * 1e-6;
  floe_session_free(fwd);
  floe_session_free(mg);
  floe_session_free(ag);
  FloeTensor *all[] = {x, dy, xs, y};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) floe_tensor_release(all[i]);
}

static void usage(FILE *out) {
  fprintf(out,
          "usage: bench_conv [--reps N] [--batch B] [--json]\n"
          "  The deep-MNIST CNN's convolutions (conv1 28x28x1 -> 32, conv2 14x14x32 -> 64, 5x5\n"
          "  SAME, NHWC f32, default B=64): forward, backward data and backward filter through\n"
          "  sessions vs the raw oneDNN primitives in their best layouts; then its pooling.\n"
          "  --reps N   timed repetitions of each (default 20)\n"
          "  --json     print one JSON object instead of text\n");
}

int main(int argc, char **argv) {
  int reps = 20, json = 0;
  int64_t n = 64;
  static const struct option opts[] = {{"reps", required_argument, NULL, 'r'},
                                       {"batch", required_argument, NULL, 'b'},
                                       {"json", no_argument, NULL, 'j'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  for (int c; (c = getopt_long(argc, argv, "r:b:jh", opts, NULL)) != -1;) {
    switch (c) {
      case 'r': reps = atoi(optarg); break;
      case 'b': n = atoll(optarg); break;
      case 'j': json = 1; break;
      case 'h': usage(stdout); return 0;
      default: usage(stderr); return 2;
    }
  }
  if (reps < 1 || n < 1) {
    fprintf(stderr, "bench_conv: --reps and --batch must be positive\n");
    return 2;
  }
  st = floe_status_new();
  DNNL_OK(dnnl_engine_create(&eng, dnnl_cpu, 0));
  DNNL_OK(dnnl_stream_create(&stream, eng, dnnl_stream_default_flags));

  Result res[6];
  for (int l = 0; l < 2; l++)
    for (int p = 0; p < 3; p++) bench_pass(&layers[l], n, (Pass)p, reps, &res[l * 3 + p]);
  PoolResult pools[2];
  bench_pool(n, 28, 32, reps, &pools[0]);
  bench_pool(n, 14, 64, reps, &pools[1]);

  double total_s = 0, total_r = 0;
  for (int i = 0; i < 6; i++) {
    if (i == 1) continue; /* conv1's input gradient is not needed in training */
    total_s += res[i].session_ms;
    total_r += res[i].raw_ms;
  }
  if (json) {
    printf("{\"bench\": \"conv\", \"batch\": %lld, \"k\": %d, \"padding\": \"SAME\", "
           "\"data_format\": \"NHWC\", \"dtype\": \"f32\", \"reps\": %d, \"target\": 0.95, "
           "\"passes\": [",
           (long long)n, K, reps);
    for (int i = 0; i < 6; i++) {
      const Layer *l = &layers[i / 3];
      const Result *r = &res[i];
      printf("%s{\"layer\": \"%s\", \"h\": %lld, \"w\": %lld, \"c\": %lld, \"o\": %lld, "
             "\"pass\": \"%s\", \"session_ms\": %.4f, \"raw_ms\": %.4f, \"ratio\": %.4f, "
             "\"session_gflops\": %.2f, \"raw_gflops\": %.2f, \"session_min_ms\": %.4f, "
             "\"raw_min_ms\": %.4f, \"min_ratio\": %.4f, \"raw_impl\": \"%s\", "
             "\"max_abs_diff\": %.3g, \"breakdown\": ",
             i ? ", " : "", l->name, (long long)l->h, (long long)l->w, (long long)l->c,
             (long long)l->o, pass_names[i % 3], r->session_ms, r->raw_ms,
             r->raw_ms / r->session_ms, r->gflop / r->session_ms * 1e3,
             r->gflop / r->raw_ms * 1e3, r->session_min_ms, r->raw_min_ms,
             r->raw_min_ms / r->session_min_ms, r->impl, r->max_diff);
      bench_breakdown_json(stdout, &r->bd);
      printf("}");
    }
    printf("], \"training_convs_session_ms\": %.4f, \"training_convs_raw_ms\": %.4f, \"pools\": [",
           total_s, total_r);
    for (int i = 0; i < 2; i++) {
      printf("%s{\"h\": %lld, \"c\": %lld, \"maxpool_ms\": %.4f, \"maxpool_grad_ms\": %.4f, "
             "\"avgpool_grad_ms\": %.4f, \"maxpool_grad_gbs\": %.2f, \"maxpool_min_ms\": %.4f, "
             "\"maxpool_grad_min_ms\": %.4f, \"avgpool_grad_min_ms\": %.4f, "
             "\"maxpool_breakdown\": ",
             i ? ", " : "", (long long)pools[i].h, (long long)pools[i].c, pools[i].fwd_ms,
             pools[i].max_grad_ms, pools[i].avg_grad_ms,
             pools[i].mbytes / pools[i].max_grad_ms, pools[i].fwd_min_ms,
             pools[i].max_grad_min_ms, pools[i].avg_grad_min_ms);
      bench_breakdown_json(stdout, &pools[i].fwd_bd);
      printf(", \"maxpool_grad_breakdown\": ");
      bench_breakdown_json(stdout, &pools[i].max_grad_bd);
      printf(", \"avgpool_grad_breakdown\": ");
      bench_breakdown_json(stdout, &pools[i].avg_grad_bd);
      printf("}");
    }
    printf("]}\n");
  } else {
    printf("CNN convolutions, batch %lld, 5x5 SAME NHWC f32, %d reps: medians (fastest); "
           "ratio = raw / session (target >= 0.95)\n"
           "%-22s %-16s %18s %8s %18s %8s %6s %9s  %s\n",
           (long long)n, reps, "layer", "pass", "session ms", "GFLOP/s", "raw ms", "GFLOP/s",
           "ratio", "max|diff|", "raw primitive");
    for (int i = 0; i < 6; i++) {
      const Layer *l = &layers[i / 3];
      const Result *r = &res[i];
      char lname[48];
      snprintf(lname, sizeof lname, "%s %lldx%lldx%lld->%lld", l->name, (long long)l->h,
               (long long)l->w, (long long)l->c, (long long)l->o);
      printf("%-22s %-16s %8.3f (%7.3f) %8.1f %8.3f (%7.3f) %8.1f %6.3f %9.2g  %s\n", lname,
             pass_names[i % 3], r->session_ms, r->session_min_ms,
             r->gflop / r->session_ms * 1e3, r->raw_ms, r->raw_min_ms,
             r->gflop / r->raw_ms * 1e3, r->raw_ms / r->session_ms, r->max_diff, r->impl);
    }
    printf("one training step's five convolutions (all but conv1 backward data): session "
           "%.3f ms, raw %.3f ms\n",
           total_s, total_r);
    printf("pooling 2x2 stride 2 SAME through sessions, ms: medians (fastest)\n");
    for (int i = 0; i < 2; i++)
      printf("  %lldx%lldx%lldx%lld  MaxPool %.3f (%.3f)  MaxPoolGrad %.3f (%.3f, %.1f GB/s)  "
             "AvgPoolGrad %.3f (%.3f)\n",
             (long long)n, (long long)pools[i].h, (long long)pools[i].h, (long long)pools[i].c,
             pools[i].fwd_ms, pools[i].fwd_min_ms, pools[i].max_grad_ms,
             pools[i].max_grad_min_ms, pools[i].mbytes / pools[i].max_grad_ms,
             pools[i].avg_grad_ms, pools[i].avg_grad_min_ms);
    printf("session step breakdowns, traced (3 more steps of each):\n");
    for (int i = 0; i < 6; i++) {
      char what[64];
      snprintf(what, sizeof what, "  %s %s", layers[i / 3].name, pass_names[i % 3]);
      bench_breakdown_print(stdout, what, &res[i].bd);
    }
    for (int i = 0; i < 2; i++) {
      static const char *const ops[3] = {"MaxPool", "MaxPoolGrad", "AvgPoolGrad"};
      const FloeStepBreakdown *b[3] = {&pools[i].fwd_bd, &pools[i].max_grad_bd,
                                       &pools[i].avg_grad_bd};
      for (int k = 0; k < 3; k++) {
        char what[64];
        snprintf(what, sizeof what, "  %s %lldx%lldx%lld", ops[k], (long long)pools[i].h,
                 (long long)pools[i].h, (long long)pools[i].c);
        bench_breakdown_print(stdout, what, b[k]);
      }
    }
  }
  dnnl_stream_destroy(stream);
  dnnl_engine_destroy(eng);
  floe_status_free(st);
  return 0;
}
