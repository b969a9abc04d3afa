/* conv_grad.c - (being written: issue 3). */
#include "cpu.h"

floe_code cpu_register_conv_grad(FloePluginRegistrar *reg) {
  (void)reg;
  return FLOE_OK;
}
