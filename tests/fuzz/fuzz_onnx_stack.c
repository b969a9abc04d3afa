/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_onnx_stack.c - the ONNX importer on a thread with a 256 KB stack (a deeply nested
 * model must be refused, not overflow the stack), inputs up to 1 MB (make fuzz-all). */
#include "fuzz_util.h" /* first: it defines _GNU_SOURCE */
#include <pthread.h>

#include "floe/floe_onnx.h"

typedef struct Input {
  const uint8_t *data;
  size_t size;
} Input;

static void *import(void *arg) {
  const Input *in = arg;
  FloeStatus *st = floe_status_new();
  FloeOnnxOptions o;
  floe_onnx_options_init(&o);
  o.no_constant_folding = 1;
  o.base_dir = "/nonexistent";
  FloeOnnxModel *m = floe_onnx_import(in->data, in->size, "fuzz", &o, st);
  if (!m) FUZZ_NEED_MESSAGE(st);
  floe_onnx_model_free(m);
  floe_status_free(st);
  return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Input in = {data, size};
  pthread_attr_t a;
  pthread_t t;
  if (pthread_attr_init(&a) || pthread_attr_setstacksize(&a, 256 * 1024)) abort();
  if (pthread_create(&t, &a, import, &in) || pthread_join(t, NULL)) abort();
  pthread_attr_destroy(&a);
  return 0;
}
