/* SPDX-License-Identifier: Apache-2.0 */
/* make_onnx_mlp.c - writes an ONNX classifier for the CLI tests: x [N,784] -> Gemm 64 ->
 * Relu -> Gemm 10 (logits), or with --cnn x [N,1,28,28] -> Conv 8 3x3 pads 1 -> Relu ->
 * MaxPool 2 -> Flatten -> Gemm 10, or with --rgb56 the same on x [N,3,56,56] with a MaxPool
 * 4 (an RGB model of larger images, which floe train enlarges Fashion-MNIST's to fit);
 * weights uniform in +-sqrt(6/(in+out)) from a fixed seed,
 * so `floe train --onnx` has an untrained model to fine-tune. With --weights CKPT (an MLP
 * only) the weights are instead those of a `floe train --onnx` checkpoint of that model
 * (safetensors, variables "onnx/fc1.weight" ...): a trained model for examples/onnx-classify.
 * usage: make_onnx_mlp [--cnn | --rgb56 | --weights CKPT.safetensors] OUT.onnx */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx_builder.h"

static float w1[64 * 784], b1[64], w2[10 * 64], b2[10];
static float cw[8 * 3 * 9], cb[8], fw[10 * 8 * 14 * 14], fb[10];

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

/* Copies the f32 tensor "onnx/<name>" of the safetensors file (header, n) into w (n floats);
 * 0, or 1 with a message. A test helper: it finds the entry by its quoted name, without a
 * JSON parser. */
static int load_weight(const char *path, const char *hdr, const unsigned char *data,
                       size_t data_len, const char *name, float *w, size_t n) {
  char key[64];
  snprintf(key, sizeof key, "\"onnx/%s\":{", name);
  const char *e = strstr(hdr, key), *end = e ? strchr(e, '}') : NULL;
  const char *off = e ? strstr(e, "\"data_offsets\":[") : NULL;
  unsigned long long a, b;
  if (!end || !off || off > end || !strstr(e, "\"dtype\":\"F32\"") ||
      sscanf(off + strlen("\"data_offsets\":["), "%llu,%llu", &a, &b) != 2 || b < a ||
      b > data_len || b - a != n * sizeof(float)) {
    fprintf(stderr, "make_onnx_mlp: %s: no f32 tensor onnx/%s of %zu elements\n", path, name, n);
    return 1;
  }
  memcpy(w, data + a, n * sizeof(float));
  return 0;
}

/* The four weights of the MLP from a safetensors checkpoint; 0, or 1 with a message. */
static int load_checkpoint(const char *path) {
  FILE *f = fopen(path, "rb");
  unsigned char *buf = NULL;
  long len = -1;
  int rc = 1;
  if (f && fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 8 && fseek(f, 0, SEEK_SET) == 0 &&
      (buf = malloc((size_t)len + 1)) && fread(buf, 1, (size_t)len, f) == (size_t)len) {
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | buf[i]; /* little-endian u64 */
    if (hlen <= (uint64_t)len - 8) {
      char *hdr = malloc(hlen + 1);
      if (hdr) {
        memcpy(hdr, buf + 8, hlen);
        hdr[hlen] = 0;
        const unsigned char *data = buf + 8 + hlen;
        size_t dlen = (size_t)len - 8 - hlen;
        rc = load_weight(path, hdr, data, dlen, "fc1.weight", w1, 64 * 784) ||
             load_weight(path, hdr, data, dlen, "fc1.bias", b1, 64) ||
             load_weight(path, hdr, data, dlen, "fc2.weight", w2, 10 * 64) ||
             load_weight(path, hdr, data, dlen, "fc2.bias", b2, 10);
        free(hdr);
      }
    }
  }
  if (rc && len < 8) fprintf(stderr, "make_onnx_mlp: cannot read %s\n", path);
  if (f) fclose(f);
  free(buf);
  return rc;
}

/* Conv 8 3x3 pads 1 -> Relu -> MaxPool (side / 14) -> Flatten -> Gemm 10 on
 * [N,channels,side,side]. */
static void build_cnn(Model *md, uint64_t *s, int64_t channels, int64_t side) {
  fill(cw, (int)(8 * 9 * channels), (int)(9 * channels), 8 * 9, s);
  fill(fw, 10 * 1568, 1568, 10, s);
  const int64_t cwd[4] = {8, channels, 3, 3}, cbd[1] = {8}, fwd[2] = {10, 1568}, fbd[1] = {10};
  static const int64_t pads[4] = {1, 1, 1, 1}, k3[2] = {3, 3};
  const int64_t k2[2] = {side / 14, side / 14};
  int64_t xd[4] = {-1, channels, side, side};
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
  int rgb = argc == 3 && !strcmp(argv[1], "--rgb56");
  const char *weights = argc == 4 && !strcmp(argv[1], "--weights") ? argv[2] : NULL;
  if (argc != 2 + cnn + rgb + 2 * !!weights) {
    fprintf(stderr, "usage: %s [--cnn | --rgb56 | --weights CKPT.safetensors] OUT.onnx\n",
            argv[0]);
    return 2;
  }
  const char *path = argv[argc - 1];
  uint64_t s = 0x9E3779B97F4A7C15ull;
  Model md;
  ob_model_init(&md, 13);
  if (cnn || rgb) {
    build_cnn(&md, &s, rgb ? 3 : 1, rgb ? 56 : 28);
    return write_model(&md, path);
  }
  fill(w1, 64 * 784, 784, 64, &s);
  fill(w2, 10 * 64, 64, 10, &s);
  if (weights && load_checkpoint(weights)) return 1;
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
