/* bench_conv.c - Conv2D forward f32 (batch 64, 28x28x32 -> 64 channels, 5x5, SAME, NHWC)
 * through a Floe session versus the raw oneDNN primitive in the same process. The raw
 * primitive gets its best case: every layout is the one it prefers (format `any`), input and
 * weights are reordered before timing and the output stays in its layout. The session takes
 * NHWC input and an HWIO filter and returns NHWC. Repetitions alternate between the two and
 * medians are compared: ratio = raw time / session time (target >= 0.95).
 *
 *   bench_conv [--reps N] [--batch B] [--json]
 */
#include <dnnl.h>
#include <dnnl_debug.h>
#include <floe/floe.h>

#include "bench_util.h"
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { H = 28, W = 28, C = 32, O = 64, K = 5 };

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

/* Runs a reorder from (md_from, from) to (md_to, to). */
static void reorder(dnnl_engine_t eng, dnnl_stream_t stream, const dnnl_memory_desc_t *md_from,
                    void *from, const dnnl_memory_desc_t *md_to, void *to) {
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

static void usage(FILE *out) {
  fprintf(out,
          "usage: bench_conv [--reps N] [--batch B] [--json]\n"
          "  Conv2D f32 Bx28x28x32 -> 64, 5x5, SAME, NHWC (default B=64) through a session\n"
          "  vs the raw oneDNN primitive in its preferred layouts.\n"
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

  /* The session: x [N,H,W,C] and filter [K,K,C,O] fed each step. */
  FloeStatus *st = floe_status_new();
  int64_t xdims[4] = {n, H, W, C}, fdims[4] = {K, K, C, O}, ones[4] = {1, 1, 1, 1};
  FloeGraph *g = floe_graph_new();
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(4, xdims));
  FloeOutput f = floe_placeholder(g, "f", FLOE_F32, floe_shape_make(4, fdims));
  FloeNodeBuilder *b = floe_node_begin(g, "Conv2D", "conv");
  floe_node_add_input(b, x);
  floe_node_add_input(b, f);
  floe_node_set_attr_int_list(b, "strides", ones, 4);
  floe_node_set_attr_string(b, "padding", "SAME");
  floe_node_set_attr_string(b, "data_format", "NHWC");
  floe_node_finish(b);
  if (floe_graph_status(g) != FLOE_OK) {
    fprintf(stderr, "bench_conv: graph: %s\n", floe_graph_error(g, NULL));
    return 1;
  }
  FloeSession *s = floe_session_new(g, NULL, st);
  FloeTensor *tx = floe_tensor_new(FLOE_F32, 4, xdims, st);
  FloeTensor *tf = floe_tensor_new(FLOE_F32, 4, fdims, st);
  if (!s || !tx || !tf) {
    fprintf(stderr, "bench_conv: setup: %s\n", floe_status_message(st));
    return 1;
  }
  fill(floe_tensor_data(tx), n * H * W * C, 1);
  fill(floe_tensor_data(tf), K * K * C * O, 2);
  FloeFeed feeds[2] = {{"x", tx}, {"f", tf}};
  const char *fetch = "conv";

  /* The raw primitive: layouts of its choice, same data reordered in before timing. */
  dnnl_engine_t eng;
  dnnl_stream_t stream;
  DNNL_OK(dnnl_engine_create(&eng, dnnl_cpu, 0));
  DNNL_OK(dnnl_stream_create(&stream, eng, dnnl_stream_default_flags));
  dnnl_dims_t sd = {n, C, H, W}, wd = {O, C, K, K}, dd = {n, O, H, W};
  dnnl_dims_t strides = {1, 1}, dil = {0, 0}, pad = {K / 2, K / 2};
  dnnl_memory_desc_t su, wu, du, sa, wa, da;
  DNNL_OK(dnnl_memory_desc_init_by_tag(&su, 4, sd, dnnl_f32, dnnl_nhwc));
  DNNL_OK(dnnl_memory_desc_init_by_tag(&wu, 4, wd, dnnl_f32, dnnl_hwio));
  DNNL_OK(dnnl_memory_desc_init_by_tag(&du, 4, dd, dnnl_f32, dnnl_nhwc));
  DNNL_OK(dnnl_memory_desc_init_by_tag(&sa, 4, sd, dnnl_f32, dnnl_format_tag_any));
  DNNL_OK(dnnl_memory_desc_init_by_tag(&wa, 4, wd, dnnl_f32, dnnl_format_tag_any));
  DNNL_OK(dnnl_memory_desc_init_by_tag(&da, 4, dd, dnnl_f32, dnnl_format_tag_any));
  dnnl_convolution_desc_t cd;
  DNNL_OK(dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference,
                                                     dnnl_convolution_direct, &sa, &wa, NULL,
                                                     &da, strides, dil, pad, pad));
  dnnl_primitive_desc_t pd;
  DNNL_OK(dnnl_primitive_desc_create(&pd, &cd, NULL, eng, NULL));
  const dnnl_memory_desc_t *ps = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
  const dnnl_memory_desc_t *pw = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  const dnnl_memory_desc_t *pdst = dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
  const char *impl = "";
  dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
  dnnl_primitive_t conv;
  DNNL_OK(dnnl_primitive_create(&conv, pd));
  void *rs = xalloc(dnnl_memory_desc_get_size(ps)), *rw = xalloc(dnnl_memory_desc_get_size(pw));
  void *rd = xalloc(dnnl_memory_desc_get_size(pdst));
  float *check = xalloc(dnnl_memory_desc_get_size(&du));
  reorder(eng, stream, &su, floe_tensor_data(tx), ps, rs);
  reorder(eng, stream, &wu, floe_tensor_data(tf), pw, rw);
  dnnl_memory_t ms, mw, md;
  DNNL_OK(dnnl_memory_create(&ms, ps, eng, rs));
  DNNL_OK(dnnl_memory_create(&mw, pw, eng, rw));
  DNNL_OK(dnnl_memory_create(&md, pdst, eng, rd));
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ms}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DST, md}};

  double *ts = malloc((size_t)reps * sizeof(double)), *tr = malloc((size_t)reps * sizeof(double));
  double max_diff = 0;
  for (int r = -2; r < reps; r++) { /* two untimed warm-up rounds */
    for (int k = 0; k < 2; k++) {
      int session_turn = (k == 0) == (r % 2 == 0); /* alternate which goes first */
      double t0 = bench_now();
      if (session_turn) {
        FloeTensor *out = NULL;
        if (floe_session_run(s, feeds, 2, &fetch, 1, NULL, 0, &out, st) != FLOE_OK) {
          fprintf(stderr, "bench_conv: run: %s\n", floe_status_message(st));
          return 1;
        }
        double t = bench_now() - t0;
        if (r >= 0) ts[r] = t;
        if (r == -1) { /* check the session against the raw result once */
          DNNL_OK(dnnl_primitive_execute(conv, stream, 3, args));
          DNNL_OK(dnnl_stream_wait(stream));
          reorder(eng, stream, pdst, rd, &du, check);
          const float *o = floe_tensor_data(out);
          for (int64_t i = 0; i < n * H * W * O; i++)
            if (fabs((double)o[i] - check[i]) > max_diff) max_diff = fabs((double)o[i] - check[i]);
        }
        floe_tensor_release(out);
      } else {
        DNNL_OK(dnnl_primitive_execute(conv, stream, 3, args));
        DNNL_OK(dnnl_stream_wait(stream));
        double t = bench_now() - t0;
        if (r >= 0) tr[r] = t;
      }
    }
  }
  double mse = bench_median(ts, reps), mr = bench_median(tr, reps);
  double flop = 2.0 * (double)n * H * W * O * C * K * K;
  double ratio = mr / mse;
  if (json)
    printf("{\"bench\": \"conv\", \"batch\": %lld, \"h\": %d, \"w\": %d, \"c\": %d, \"o\": %d, "
           "\"k\": %d, \"padding\": \"SAME\", \"data_format\": \"NHWC\", \"dtype\": \"f32\", "
           "\"reps\": %d, \"session_ms\": %.4f, \"raw_ms\": %.4f, \"ratio\": %.4f, "
           "\"target\": 0.95, \"session_gflops\": %.2f, \"raw_gflops\": %.2f, "
           "\"raw_impl\": \"%s\", \"max_abs_diff\": %.3g}\n",
           (long long)n, H, W, C, O, K, reps, mse * 1e3, mr * 1e3, ratio, flop / mse * 1e-9,
           flop / mr * 1e-9, impl, max_diff);
  else
    printf("Conv2D %lldx%dx%dx%d -> %d, %dx%d SAME NHWC f32, %d reps (medians)\n"
           "  session     %9.3f ms  %8.2f GFLOP/s\n"
           "  raw oneDNN  %9.3f ms  %8.2f GFLOP/s  (%s)\n"
           "  ratio raw/session %.3f (target >= 0.95), max |diff| %.3g\n",
           (long long)n, H, W, C, O, K, K, reps, mse * 1e3, flop / mse * 1e-9, mr * 1e3,
           flop / mr * 1e-9, impl, ratio, max_diff);
  free(ts);
  free(tr);
  free(rs);
  free(rw);
  free(rd);
  free(check);
  dnnl_memory_destroy(ms);
  dnnl_memory_destroy(mw);
  dnnl_memory_destroy(md);
  dnnl_primitive_destroy(conv);
  dnnl_primitive_desc_destroy(pd);
  dnnl_stream_destroy(stream);
  dnnl_engine_destroy(eng);
  floe_tensor_release(tx);
  floe_tensor_release(tf);
  floe_session_free(s);
  floe_graph_free(g);
  floe_status_free(st);
  return 0;
}
