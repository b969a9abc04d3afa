/* cpu.h - shared declarations of the CPU plugin (internal to floe-cpu.so). */
#ifndef FLOE_CPU_H
#define FLOE_CPU_H

#include <floe/floe_plugin.h>

/* The host table, set once by floe_plugin_init before any kernel is registered. */
extern const FloeHostApi *cpu_host;

/* Register one kernel for device type "CPU". constraint_attr may be NULL (no constraint);
 * otherwise dtypes is its FLOE_DTYPE_BIT mask. */
floe_code cpu_add_kernel(FloePluginRegistrar *reg, const char *op, const char *constraint_attr,
                         uint32_t dtypes, uint32_t flags,
                         floe_code (*compute)(void *state, FloeKernelContext *ctx),
                         floe_code (*create)(const FloeHostApi *host, FloeKernelInit *init,
                                             void *user_data, void **state),
                         void (*destroy)(void *state), void *user_data);

/* Each kernel file registers its kernels; the first failure is returned. */
floe_code cpu_register_elementwise(FloePluginRegistrar *reg);
floe_code cpu_register_reduce(FloePluginRegistrar *reg);
floe_code cpu_register_softmax(FloePluginRegistrar *reg);
floe_code cpu_register_matmul(FloePluginRegistrar *reg);
floe_code cpu_register_conv(FloePluginRegistrar *reg);
floe_code cpu_register_array(FloePluginRegistrar *reg);
floe_code cpu_register_random(FloePluginRegistrar *reg);
/* Training (issue 3). */
floe_code cpu_register_grad_elementwise(FloePluginRegistrar *reg); /* grad_elementwise.c */
floe_code cpu_register_grad_array(FloePluginRegistrar *reg);       /* grad_array.c */
floe_code cpu_register_conv_grad(FloePluginRegistrar *reg);        /* conv_grad.c */
floe_code cpu_register_optim(FloePluginRegistrar *reg);            /* optim.c */

#endif
