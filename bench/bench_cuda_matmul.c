/* SPDX-License-Identifier: Apache-2.0 */
/* bench_cuda_matmul.c - MatMul S x S x S (default 8192) through a Floe session on cuda:0
 * against raw cuBLAS (cublasGemmEx with the same types) in the same process, on the same
 * GPU. Prints both times and ratio = raw time / session time (target >= 0.95).
 *
 * --dtype f32 (default): f32 tensors, computed as FLOE_CUDA_MATMUL says (f32, tf32, or bf16:
 * the session converts both f32 operands to bf16 each step, which raw cuBLAS, given bf16
 * copies of the same numbers, does not: a mixed-precision step, not a bf16 GEMM). --dtype
 * bf16: bf16 variables and product (what a model kept in bf16 runs), against cuBLAS with
 * bf16 A, B and C, f32 accumulation in both.
 *
 * The session keeps its operands in two variables on the GPU (initialised once), so a step
 * moves no data: R steps run the MatMul as a target (kernels are asynchronous, so steps
 * queue up behind the GPU), then one step fetches a scalar that depends on the last
 * product, which waits for the GPU. Raw cuBLAS does R calls and a cudaDeviceSynchronize.
 * Repetitions alternate between the two; medians are compared. Then 3 more check steps (a
 * product and the fetch that waits for it), traced, give the session's step breakdown
 * (docs/benchmarks.md): "breakdown" in the JSON, a second line in the text.
 *
 *   FLOE_CUDA_MATMUL=f32|tf32|bf16 bench_cuda_matmul [--dtype f32|bf16] [--size S] [--reps N]
 *                                                     [--steps R] [--json]
 *
 * Needs FLOE_PLUGIN_PATH to hold the CUDA plugin (plugins/cuda/.libs) and a GPU. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <floe/floe.h>

#include "bench_util.h"
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static FloeStatus *st;

static void die(const char *what, const char *why) {
  fprintf(stderr, "bench_cuda_matmul: %s: %s\n", what, why);
  exit(1);
}

#define CUDA_OK(call)                                                                        \
  do {                                                                                       \
    cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) die(#call, cudaGetErrorString(e_));                               \
  } while (0)
#define BLAS_OK(call)                                                                        \
  do {                                                                                       \
    cublasStatus_t s_ = (call);                                                              \
    if (s_ != CUBLAS_STATUS_SUCCESS) die(#call, cublasGetStatusString(s_));                  \
  } while (0)

static void fill(float *p, int64_t n, uint32_t seed) {
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    p[i] = (float)(seed >> 8) * (1.0f / 16777216.0f) - 0.5f;
  }
}

/* a, b: variables of dtype dt on cuda:0 fed once; prod = MatMul(a, b); check = Max of prod
 * (cast to f32 when dt is not) along dim 1 (S floats fetched), which waits for the last
 * product. Its reduction (one read of the product, ~1% of the GEMM at S = 8192, once per
 * repetition) is counted in the session's time. */
static FloeGraph *build(int64_t s, FloeDType dt) {
  FloeGraph *g = floe_graph_new();
  int64_t d[2] = {s, s};
  const char *names[2] = {"a", "b"};
  FloeOutput reads[2];
  for (int i = 0; i < 2; i++) {
    char buf[32];
    FloeNodeBuilder *b = floe_node_begin(g, "VarHandleOp", names[i]);
    floe_node_set_attr_type(b, "dtype", dt);
    floe_node_set_attr_shape(b, "shape", floe_shape_make(2, d));
    floe_node_set_device(b, "cuda:0");
    FloeOutput h = floe_out(floe_node_finish(b), 0);
    snprintf(buf, sizeof buf, "%s/value", names[i]);
    FloeOutput v = floe_placeholder(g, buf, dt, floe_shape_make(2, d));
    snprintf(buf, sizeof buf, "%s/init", names[i]);
    b = floe_node_begin(g, "AssignVariableOp", buf);
    floe_node_add_input(b, h);
    floe_node_add_input(b, v);
    floe_node_set_device(b, "cuda:0");
    floe_node_finish(b);
    snprintf(buf, sizeof buf, "%s/read", names[i]);
    b = floe_node_begin(g, "ReadVariableOp", buf);
    floe_node_add_input(b, h);
    floe_node_set_attr_type(b, "dtype", dt);
    floe_node_set_device(b, "cuda:0");
    reads[i] = floe_out(floe_node_finish(b), 0);
  }
  FloeNodeBuilder *b = floe_node_begin(g, "MatMul", "prod");
  floe_node_add_input(b, reads[0]);
  floe_node_add_input(b, reads[1]);
  floe_node_set_device(b, "cuda:0");
  FloeOutput prod = floe_out(floe_node_finish(b), 0);
  if (dt != FLOE_F32) {
    b = floe_node_begin(g, "Cast", "prod/f32");
    floe_node_add_input(b, prod);
    floe_node_set_attr_type(b, "DstT", FLOE_F32);
    floe_node_set_device(b, "cuda:0");
    prod = floe_out(floe_node_finish(b), 0);
  }
  FloeTensor *axis = floe_tensor_scalar_i32(1, NULL);
  FloeOutput ax = floe_const(g, "check/axis", axis);
  floe_tensor_release(axis);
  b = floe_node_begin(g, "Max", "check");
  floe_node_add_input(b, prod);
  floe_node_add_input(b, ax);
  floe_node_set_device(b, "cuda:0");
  floe_node_finish(b);
  if (floe_graph_status(g) != FLOE_OK) die("building the graph", floe_graph_error(g, NULL));
  return g;
}

int main(int argc, char **argv) {
  int64_t s = 8192;
  int reps = 5, steps = 10, json = 0;
  FloeDType dt = FLOE_F32;
  static const struct option opts[] = {{"size", required_argument, NULL, 's'},
                                       {"dtype", required_argument, NULL, 'd'},
                                       {"reps", required_argument, NULL, 'r'},
                                       {"steps", required_argument, NULL, 'n'},
                                       {"json", no_argument, NULL, 'j'},
                                       {NULL, 0, NULL, 0}};
  for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
    if (c == 's') s = atoll(optarg);
    else if (c == 'r') reps = atoi(optarg);
    else if (c == 'n') steps = atoi(optarg);
    else if (c == 'j') json = 1;
    else if (c == 'd' && !strcmp(optarg, "f32")) dt = FLOE_F32;
    else if (c == 'd' && !strcmp(optarg, "bf16")) dt = FLOE_BF16;
    else if (c == 'd') die("--dtype", "f32 or bf16");
    else return 2;
  }
  if (s < 1 || reps < 1 || steps < 1) die("arguments", "size, reps and steps must be >= 1");
  const char *mode = getenv("FLOE_CUDA_MATMUL");
  if (!mode || !*mode) mode = "f32";
  st = floe_status_new();

  float *ha = malloc((size_t)(s * s) * sizeof *ha), *hb = malloc((size_t)(s * s) * sizeof *hb);
  if (!ha || !hb) die("host memory", "out of memory");
  fill(ha, s * s, 1);
  fill(hb, s * s, 2);

  /* The session: operands on the GPU once. */
  FloeGraph *g = build(s, dt);
  FloeSession *sess = floe_session_new(g, NULL, st);
  if (!sess) die("session", floe_status_message(st));
  int64_t d[2] = {s, s};
  FloeTensor *ta = floe_tensor_new(dt, 2, d, st), *tb = floe_tensor_new(dt, 2, d, st);
  if (!ta || !tb) die("tensors", floe_status_message(st));
  /* bf16 copies of the same numbers: the session's tensors in bf16, raw cuBLAS's operands
   * whenever it multiplies bf16 */
  uint16_t *ha16 = malloc((size_t)(s * s) * 2), *hb16 = malloc((size_t)(s * s) * 2);
  if (!ha16 || !hb16) die("host memory", "out of memory");
  for (int64_t i = 0; i < s * s; i++) {
    ha16[i] = floe_f32_to_bf16(ha[i]);
    hb16[i] = floe_f32_to_bf16(hb[i]);
  }
  memcpy(floe_tensor_data(ta), dt == FLOE_F32 ? (void *)ha : ha16, floe_tensor_nbytes(ta));
  memcpy(floe_tensor_data(tb), dt == FLOE_F32 ? (void *)hb : hb16, floe_tensor_nbytes(tb));
  FloeFeed feeds[2] = {{"a/value", ta}, {"b/value", tb}};
  const char *inits[2] = {"a/init", "b/init"}, *target = "prod", *check = "check";
  if (floe_session_run(sess, feeds, 2, NULL, 0, inits, 2, NULL, st) != FLOE_OK)
    die("initialising the variables", floe_status_message(st));

  /* Raw cuBLAS on its own buffers, same compute type as the plugin's mode. */
  float *da, *db, *dc;
  CUDA_OK(cudaMalloc((void **)&da, (size_t)(s * s) * sizeof *da));
  CUDA_OK(cudaMalloc((void **)&db, (size_t)(s * s) * sizeof *db));
  CUDA_OK(cudaMalloc((void **)&dc, (size_t)(s * s) * sizeof *dc));
  CUDA_OK(cudaMemcpy(da, ha, (size_t)(s * s) * sizeof *ha, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(db, hb, (size_t)(s * s) * sizeof *hb, cudaMemcpyHostToDevice));
  uint16_t *da16 = NULL, *db16 = NULL;
  cublasHandle_t h;
  BLAS_OK(cublasCreate(&h));
  cublasComputeType_t comp = !strcmp(mode, "tf32") ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  cudaDataType_t abt = CUDA_R_32F, ct = CUDA_R_32F;
  const void *ra = da, *rb = db;
  if (dt == FLOE_BF16 || !strcmp(mode, "bf16")) { /* the GEMM alone, on bf16 operands */
    CUDA_OK(cudaMalloc((void **)&da16, (size_t)(s * s) * 2));
    CUDA_OK(cudaMalloc((void **)&db16, (size_t)(s * s) * 2));
    CUDA_OK(cudaMemcpy(da16, ha16, (size_t)(s * s) * 2, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(db16, hb16, (size_t)(s * s) * 2, cudaMemcpyHostToDevice));
    abt = CUDA_R_16BF;
    ra = da16;
    rb = db16;
    if (dt == FLOE_BF16) {
      ct = CUDA_R_16BF;
      comp = CUBLAS_COMPUTE_32F;
    }
  }
  const float one = 1.0f, zero = 0.0f;

  double *sess_ms = calloc((size_t)reps, sizeof *sess_ms), *raw_ms = calloc((size_t)reps, sizeof *raw_ms);
  for (int r = -1; r < reps; r++) { /* r = -1: warm-up (algorithm choice, allocator) */
    double t0 = bench_now();
    for (int i = 0; i < steps; i++)
      if (floe_session_run(sess, NULL, 0, NULL, 0, &target, 1, NULL, st) != FLOE_OK)
        die("session step", floe_status_message(st));
    FloeTensor *out = NULL;
    if (floe_session_run(sess, NULL, 0, &check, 1, NULL, 0, &out, st) != FLOE_OK)
      die("check step", floe_status_message(st));
    floe_tensor_release(out);
    double t1 = bench_now();
    for (int i = 0; i <= steps; i++) { /* steps + 1 products, like the session */
      BLAS_OK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)s, (int)s, (int)s, &one, rb, abt,
                           (int)s, ra, abt, (int)s, &zero, dc, ct, (int)s, comp,
                           CUBLAS_GEMM_DEFAULT));
    }
    CUDA_OK(cudaDeviceSynchronize());
    double t2 = bench_now();
    if (r >= 0) {
      sess_ms[r] = (t1 - t0) * 1e3 / (steps + 1);
      raw_ms[r] = (t2 - t1) * 1e3 / (steps + 1);
    }
  }
  double sm = bench_median(sess_ms, reps), rm = bench_median(raw_ms, reps);
  double tflops = 2.0 * (double)s * (double)s * (double)s / (rm * 1e-3) / 1e12;
  struct cudaDeviceProp p;
  CUDA_OK(cudaGetDeviceProperties(&p, 0));
  const char *dts = floe_dtype_name(dt);
  /* Where a session step's time goes, from 3 more check steps, traced (the timed ones were
   * not). */
  FloeStepBreakdown bd;
  BenchStep check_step = {sess, NULL, 0, &check, 1, NULL, 0};
  if (bench_breakdown(sess, bench_step_run, &check_step, 3, &bd)) return 1;
  if (json) {
    printf("{\"gpu\":\"%s\",\"mode\":\"%s\",\"dtype\":\"%s\",\"size\":%lld,"
           "\"session_ms\":%.3f,\"cublas_ms\":%.3f,\"ratio\":%.4f,\"cublas_tflops\":%.1f,"
           "\"breakdown\":",
           p.name, mode, dts, (long long)s, sm, rm, rm / sm, tflops);
    bench_breakdown_json(stdout, &bd);
    printf("}\n");
  } else {
    printf("%s, %s tensors, FLOE_CUDA_MATMUL=%s, MatMul %lld^3: session %.3f ms, raw cuBLAS "
           "%.3f ms (%.1f TFLOP/s), ratio %.3f%s\n",
           p.name, dts, mode, (long long)s, sm, rm, tflops, rm / sm,
           dt == FLOE_F32 && da16
               ? " (f32 tensors in bf16 mode: the session also converts its inputs each step; "
                 "raw does not)"
               : "");
    bench_breakdown_print(stdout, "session check step (traced)", &bd);
  }
  cublasDestroy(h);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  if (da16) cudaFree(da16), cudaFree(db16);
  floe_tensor_release(ta);
  floe_tensor_release(tb);
  floe_session_free(sess);
  floe_graph_free(g);
  floe_status_free(st);
  free(ha);
  free(hb);
  free(ha16);
  free(hb16);
  free(sess_ms);
  free(raw_ms);
  return 0;
}
