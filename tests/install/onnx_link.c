/* SPDX-License-Identifier: Apache-2.0 */
/* onnx_link.c - a program of the ONNX importer's API as a user builds it after `make install`
 * (`cc onnx_link.c $(pkg-config --cflags --libs floe-onnx)`; `make installcheck` does):
 * it must link against libfloe-onnx and libfloe alone, and its calls must reach them. It
 * imports a model that is not ONNX and expects the error to name it. */
#include <stdio.h>
#include <string.h>

#include <floe/floe.h>
#include <floe/floe_onnx.h>

int main(void) {
  static const char junk[] = "not an ONNX model";
  FloeStatus *st = floe_status_new();
  FloeOnnxModel *m = floe_onnx_import(junk, sizeof junk, "junk.onnx", NULL, st);
  int ok = m == NULL && floe_status_code(st) != FLOE_OK &&
           strstr(floe_status_message(st), "junk.onnx") != NULL;
  printf("%s: floe_onnx_import refused junk.onnx: %s\n", ok ? "ok" : "FAILED",
         floe_status_message(st));
  floe_onnx_model_free(m);
  floe_status_free(st);
  return ok ? 0 : 1;
}
