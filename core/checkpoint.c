/* checkpoint.c - (being written: issue 3). */
#include "internal.h"

floe_code floe__checkpoint_kernels_register(struct FloeRuntime *rt, FloeStatus *st) {
  (void)rt;
  (void)st;
  return FLOE_OK;
}
