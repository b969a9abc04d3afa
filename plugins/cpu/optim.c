/* optim.c - (being written: issue 3). */
#include "cpu.h"

floe_code cpu_register_optim(FloePluginRegistrar *reg) {
  (void)reg;
  return FLOE_OK;
}
