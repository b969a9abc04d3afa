/* SPDX-License-Identifier: Apache-2.0 */
/* plugin.c - entry point of the CUDA plugin: probe the GPUs, register one device per GPU,
 * the kernels for device type "CUDA" and (built with NCCL) the "nccl" collective backend. With no usable GPU (no driver, no device) it returns
 * FLOE_UNAVAILABLE with the reason, registering nothing: `floe plugins` shows the line. */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "cuda.h"

FLOE_PLUGIN_EXPORT floe_code floe_plugin_init(const FloeHostApi *host, FloePluginRegistrar *reg) {
  floe_code rc = FLOE_PLUGIN_DECLARE(reg, "cuda", PACKAGE_VERSION);
  if (rc != FLOE_OK) return rc;
  cu_host = host;

  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    reg->set_message(reg, "no CUDA device (cudaGetDeviceCount: %s: %s)", cudaGetErrorName(e),
                     cudaGetErrorString(e));
    return FLOE_UNAVAILABLE;
  }
  if (count == 0) {
    reg->set_message(reg, "no CUDA device (the driver reports 0 GPUs)");
    return FLOE_UNAVAILABLE;
  }

  /* A failed init leaves registrations staged and the core calls no destroy slot: until
   * init returns FLOE_OK every device state is ours to free. */
  CudaDevice **devs = host->alloc((size_t)count * sizeof *devs);
  if (!devs) {
    reg->set_message(reg, "out of memory probing %d GPUs", count);
    return FLOE_NO_MEMORY;
  }
  int made = 0;
  for (; made < count; made++) {
    char why[256];
    FloeDeviceFns fns;
    if (!(devs[made] = cuda_device_new(made, why, sizeof why))) {
      reg->set_message(reg, "no usable CUDA device: GPU %d: %s", made, why);
      rc = FLOE_UNAVAILABLE;
      goto err_free_devices;
    }
    cuda_device_fns(devs[made], &fns);
    if ((rc = reg->register_device(reg, &fns)) != FLOE_OK) {
      made++;
      goto err_free_devices;
    }
  }

  floe_code (*const sets[])(FloePluginRegistrar *) = {
      cu_register_elementwise, cu_register_array, cu_register_reduce,
      cu_register_blas,        cu_register_dnn,
  };
  for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
    if ((rc = sets[i](reg)) != FLOE_OK) goto err_free_devices;
#ifdef HAVE_NCCL
  if ((rc = cu_register_nccl(reg)) != FLOE_OK) goto err_free_devices;
#endif
  host->free(devs);
  return FLOE_OK;

err_free_devices:
  for (int i = 0; i < made; i++) {
    FloeDeviceFns fns;
    cuda_device_fns(devs[i], &fns);
    fns.destroy(devs[i]);
  }
  host->free(devs);
  return rc;
}
