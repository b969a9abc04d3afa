/* SPDX-License-Identifier: Apache-2.0 */
/* make_onnx_mlp.c - writes an ONNX classifier for the CLI tests: x [N,784] -> Gemm 64 ->
 * Relu -> Gemm 10 (logits), or with --cnn x [N,1,28,28] -> Conv 8 3x3 pads 1 -> Relu ->
 * MaxPool 2 -> Flatten -> Gemm 10; weights uniform in +-sqrt(6/(in+out)) from a fixed seed,
 * so `floe train --onnx` has an untrained model to fine-tune.
 * usage: make_onnx_mlp [--cnn] OUT.onnx */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_builder.h"

static float w1[64 * 784], b1[64], w2[10 * 64], b2[10];
static float cw[8 * 9], cb[8], fw[10 * 8 * 14 * 14], fb[10];

static void fill(float *w, int n, int fan_in, int fan_out, uint64_t *s) {
  float lim = sqrtf(6.0f / (float)(fan_in + fan_out));
  for (int i = 0; i < n; i++) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    w[i] = lim * (2.0f * (float)(*s >> 40) / (float)(1 << 24) - 1.0f);
  }
}

/* Serialises md to path; the exit status. */
static int write_model(Model *md, const char *path) {
  size_t len;
  uint8_t *buf = ob_pack(md, &len);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
    fprintf(stderr, "make_onnx_mlp: cannot write %s\n", path);
    return 1;
  }
  free(buf);
  return 0;
}

/* Conv 8 3x3 pads 1 -> Relu -> MaxPool 2x2 -> Flatten -> Gemm 10 on [N,1,28,28]. */
static void build_cnn(Model *md, uint64_t *s) {
  fill(cw, 8 * 9, 9, 8 * 9, s);
  fill(fw, 10 * 1568, 1568, 10, s);
  static const int64_t cwd[4] = {8, 1, 3, 3}, cbd[1] = {8}, fwd[2] = {10, 1568}, fbd[1] = {10};
  static const int64_t pads[4] = {1, 1, 1, 1}, k3[2] = {3, 3}, k2[2] = {2, 2};
  int64_t xd[4] = {-1, 1, 28, 28};
  ob_add_input(md, "image", 4, xd);
  ob_add_init(md, "conv.weight", 4, cwd, cw, 1);
  ob_add_init(md, "conv.bias", 1, cbd, cb, 1);
  ob_add_init(md, "fc.weight", 2, fwd, fw, 1);
  ob_add_init(md, "fc.bias", 1, fbd, fb, 1);
  Onnx__NodeProto *conv = ob_add_node(md, "Conv", "conv", "image", "conv.weight", "conv.bias", "c");
  ob_attr_ints(conv, "kernel_shape", k3, 2);
  ob_attr_ints(conv, "pads", pads, 4);
  ob_add_node(md, "Relu", "relu", "c", NULL, NULL, "r");
  Onnx__NodeProto *pool = ob_add_node(md, "MaxPool", "pool", "r", NULL, NULL, "p");
  ob_attr_ints(pool, "kernel_shape", k2, 2);
  ob_attr_ints(pool, "strides", k2, 2);
  ob_attr_int(ob_add_node(md, "Flatten", "flatten", "p", NULL, NULL, "f"), "axis", 1);
  ob_attr_int(ob_add_node(md, "Gemm", "fc", "f", "fc.weight", "fc.bias", "logits"), "transB", 1);
  ob_add_output(md, "logits");
}

int main(int argc, char **argv) {
  int cnn = argc == 3 && !strcmp(argv[1], "--cnn");
  if (argc != 2 + cnn) {
    fprintf(stderr, "usage: %s [--cnn] OUT.onnx\n", argv[0]);
    return 2;
  }
  const char *path = argv[1 + cnn];
  uint64_t s = 0x9E3779B97F4A7C15ull;
  Model md;
  ob_model_init(&md, 13);
  if (cnn) {
    build_cnn(&md, &s);
    return write_model(&md, path);
  }
  fill(w1, 64 * 784, 784, 64, &s);
  fill(w2, 10 * 64, 64, 10, &s);
  static const int64_t w1d[2] = {64, 784}, b1d[1] = {64}, w2d[2] = {10, 64}, b2d[1] = {10};
  int64_t xd[2] = {-1, 784};
  ob_add_input(&md, "image", 2, xd);
  ob_add_init(&md, "fc1.weight", 2, w1d, w1, 1);
  ob_add_init(&md, "fc1.bias", 1, b1d, b1, 1);
  ob_add_init(&md, "fc2.weight", 2, w2d, w2, 1);
  ob_add_init(&md, "fc2.bias", 1, b2d, b2, 1);
  ob_attr_int(ob_add_node(&md, "Gemm", "fc1", "image", "fc1.weight", "fc1.bias", "h"), "transB", 1);
  ob_add_node(&md, "Relu", "relu", "h", NULL, NULL, "a");
  ob_attr_int(ob_add_node(&md, "Gemm", "fc2", "a", "fc2.weight", "fc2.bias", "logits"), "transB", 1);
  ob_add_output(&md, "logits");
  return write_model(&md, path);
}
