/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_onnx.c - libFuzzer target for the ONNX importer and the TensorProto reader (make
 * fuzz-onnx). Every input is tried as a ModelProto and as a TensorProto; neither may crash,
 * leak or read out of bounds, and every failure must carry a message. Constant folding is
 * off: it would run kernels, which are fuzzed through their own tests. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "floe/floe_onnx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  FloeStatus *st = floe_status_new();
  FloeOnnxOptions o;
  floe_onnx_options_init(&o);
  o.no_constant_folding = 1;
  o.base_dir = "/nonexistent"; /* external data never reads real files */
  FloeOnnxModel *m = floe_onnx_import(data, size, "fuzz", &o, st);
  if (!m && !*floe_status_message(st)) abort(); /* an error without a message */
  floe_onnx_model_free(m);
  FloeTensor *t = floe_tensor_parse_onnx_pb(data, size, "fuzz", st);
  if (!t && !*floe_status_message(st)) abort();
  floe_tensor_release(t);
  floe_status_free(st);
  return 0;
}
