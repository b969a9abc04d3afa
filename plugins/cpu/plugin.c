/* SPDX-License-Identifier: Apache-2.0 */
/* plugin.c - entry point of the CPU plugin: one host-memory device and its kernels. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cpu.h"
#include "cpu_alloc.h"

const FloeHostApi *cpu_host;

static floe_code cpu_get_props(void *state, FloeDeviceProps *p) {
  (void)state;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores < 1) cores = 1;
  snprintf(p->type, sizeof p->type, "CPU");
  snprintf(p->description, sizeof p->description, "host CPU, %ld cores", cores);
  p->memory_bytes = (pages > 0 && page > 0) ? (uint64_t)pages * (uint64_t)page : 0;
  /* Figures for the placer's cost model: sustained rates of this plugin's kernels, not the
   * hardware's peak. Taken at the peak of 2 AVX2 FMA units per core at ~2.5 GHz (32 f32
   * FLOP/cycle), the model was 8-9x optimistic against the per-node times measured by
   * bench_placement (all on the CPU, cnn and LSTM training steps); 4 FLOP/cycle per core
   * for matrix work and 1 for other work match those. */
  double f32 = (double)cores * 2.5e9 * 4.0;
  p->peak_flops[FLOE_F32] = f32;
  p->peak_flops[FLOE_F64] = f32 / 2;
  p->peak_flops[FLOE_F16] = f32 / 4;
  p->peak_flops[FLOE_BF16] = f32 / 4;
  p->peak_flops[FLOE_I32] = f32 / 2;
  p->peak_flops[FLOE_I64] = f32 / 4;
  p->memory_bandwidth = 8e9;
  p->host_to_device_bandwidth = 20e9;
  p->device_to_host_bandwidth = 20e9;
  p->peer_bandwidth = 20e9;
  if (FLOE_HAS_FIELD(p, FloeDeviceProps, launch_overhead)) { /* since 1.3: an older core's
                                                               struct ends before them */
    p->vector_flops = (double)cores * 2.5e9 * 1.0;
    p->launch_overhead = 1e-6;
  }
  p->flags = FLOE_DEVICE_HOST_MEMORY;
  p->ordinal = 0;
  return FLOE_OK;
}

static floe_code cpu_allocate(void *state, size_t bytes, size_t alignment, void **ptr) {
  void *p = cpu_allocator_get(state, bytes, alignment);
  if (!p) return FLOE_NO_MEMORY;
  *ptr = p;
  return FLOE_OK;
}

static void cpu_deallocate(void *state, void *ptr, size_t bytes) {
  cpu_allocator_put(state, ptr, bytes);
}

static void cpu_destroy(void *state) { cpu_allocator_free_all(state); }

static floe_code cpu_copy(void *state, void *dst, const void *src, size_t n) {
  (void)state;
  if (n) memcpy(dst, src, n);
  return FLOE_OK;
}

static floe_code cpu_memset(void *state, void *dst, int value, size_t n) {
  (void)state;
  if (n) memset(dst, value, n);
  return FLOE_OK;
}

floe_code cpu_add_kernel(FloePluginRegistrar *reg, const char *op, const char *constraint_attr,
                         uint32_t dtypes, uint32_t flags,
                         floe_code (*compute)(void *state, FloeKernelContext *ctx),
                         floe_code (*create)(const FloeHostApi *host, FloeKernelInit *init,
                                             void *user_data, void **state),
                         void (*destroy)(void *state), void *user_data) {
  return floe_plugin_add_kernel(reg, "CPU", op, constraint_attr, dtypes, flags, compute, create,
                                destroy, user_data);
}

FLOE_PLUGIN_EXPORT floe_code floe_plugin_init(const FloeHostApi *host, FloePluginRegistrar *reg) {
  floe_code rc = FLOE_PLUGIN_DECLARE(reg, "cpu", PACKAGE_VERSION);
  if (rc != FLOE_OK) return rc;
  cpu_host = host;

  /* FLOE_CPU_DEVICES=N presents the host as N CPU devices (cpu:0..N-1), all reading host
   * memory: to split a graph across devices, and to test that, on any machine. */
  int ndev = 1;
  const char *env = getenv("FLOE_CPU_DEVICES");
  if (env && *env) {
    char *end;
    long v = strtol(env, &end, 10);
    if (*end || v < 1 || v > 64) {
      reg->set_message(reg, "FLOE_CPU_DEVICES=\"%s\": expected a number of devices from 1 to 64",
                       env);
      return FLOE_INVALID_ARGUMENT;
    }
    ndev = (int)v;
  }
  for (int i = 0; i < ndev; i++) {
    FloeDeviceFns d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    /* Each runtime's device gets its own allocator, freed by destroy at shutdown. */
    d.state = cpu_allocator_new();
    if (!d.state) {
      reg->set_message(reg, "out of memory creating the CPU allocator");
      return FLOE_NO_MEMORY;
    }
    d.get_props = cpu_get_props;
    d.allocate = cpu_allocate;
    d.deallocate = cpu_deallocate;
    d.copy_h2d = cpu_copy;
    d.copy_d2h = cpu_copy;
    d.copy_d2d = cpu_copy;
    d.memset = cpu_memset;
    d.destroy = cpu_destroy;
    if ((rc = reg->register_device(reg, &d)) != FLOE_OK) {
      cpu_allocator_free_all(d.state);
      return rc;
    }
  }

  floe_code (*const sets[])(FloePluginRegistrar *) = {
      cpu_register_elementwise, cpu_register_reduce, cpu_register_softmax, cpu_register_matmul,
      cpu_register_conv,        cpu_register_array,  cpu_register_random,
      cpu_register_grad_elementwise, cpu_register_grad_array, cpu_register_conv_grad,
      cpu_register_optim,
      cpu_register_lstm,
      cpu_register_conv_nd, cpu_register_blocked, cpu_register_pool_nd,
      cpu_register_spectral,
      cpu_register_index, cpu_register_index_move,
      cpu_register_resize,      cpu_register_rnn_onnx,
      cpu_register_tfidf,
      cpu_register_conv_nd_grad,
  };
  for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
    if ((rc = sets[i](reg)) != FLOE_OK) return rc;
  return FLOE_OK;
}
