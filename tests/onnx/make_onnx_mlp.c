/* make_onnx_mlp.c - writes an ONNX classifier for the CLI tests: x [N,784] -> Gemm 64 ->
 * Relu -> Gemm 10 (logits), weights uniform in +-sqrt(6/(in+out)) from a fixed seed, so
 * `floe train --onnx` has an untrained model to fine-tune.
 * usage: make_onnx_mlp OUT.onnx */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "onnx_builder.h"

static float w1[64 * 784], b1[64], w2[10 * 64], b2[10];

static void fill(float *w, int n, int fan_in, int fan_out, uint64_t *s) {
  float lim = sqrtf(6.0f / (float)(fan_in + fan_out));
  for (int i = 0; i < n; i++) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    w[i] = lim * (2.0f * (float)(*s >> 40) / (float)(1 << 24) - 1.0f);
  }
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s OUT.onnx\n", argv[0]);
    return 2;
  }
  uint64_t s = 0x9E3779B97F4A7C15ull;
  fill(w1, 64 * 784, 784, 64, &s);
  fill(w2, 10 * 64, 64, 10, &s);
  static const int64_t w1d[2] = {64, 784}, b1d[1] = {64}, w2d[2] = {10, 64}, b2d[1] = {10};
  Model md;
  ob_model_init(&md, 13);
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
  size_t len;
  uint8_t *buf = ob_pack(&md, &len);
  FILE *f = fopen(argv[1], "wb");
  if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0) {
    fprintf(stderr, "make_onnx_mlp: cannot write %s\n", argv[1]);
    return 1;
  }
  free(buf);
  return 0;
}
