/* grad_nn.c - (being written: issue 3). */
#include "internal.h"

floe_code floe__grads_register_nn(FloeStatus *st) {
  (void)st;
  return FLOE_OK;
}
