/* grad_array.c - (being written: issue 3). */
#include "internal.h"

floe_code floe__grads_register_array(FloeStatus *st) {
  (void)st;
  return FLOE_OK;
}
