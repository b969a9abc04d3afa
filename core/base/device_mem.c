/* SPDX-License-Identifier: Apache-2.0 */
/* device_mem.c - memory of any place (a device through its function table, or the host:
 * NULL) and copies between any two places: what tensors are made of. */
#include <string.h>

#include "base.h"

/* Caller owns *ptr and frees it with floe__device_free on the same device. */
floe_code floe__device_alloc(FloeDevice *dev, size_t bytes, void **ptr, FloeStatus *st) {
  *ptr = NULL;
  if (!dev) {
    *ptr = floe__aligned_alloc(64, bytes);
    if (!*ptr)
      return floe_status_set(st, FLOE_NO_MEMORY,
                             "out of memory allocating %zu bytes of host memory",
                             bytes);
    return FLOE_OK;
  }
  void *p = NULL;
  floe_code rc = dev->fns.allocate(dev->fns.state, bytes, 64, &p);
  if (rc != FLOE_OK || (!p && bytes > 0))
    return floe_status_set(st, FLOE_RESOURCE_EXHAUSTED,
                           "device %s could not allocate %zu bytes (%s; capacity %llu bytes)",
                           dev->short_name, bytes,
                           rc != FLOE_OK ? floe_code_name(rc) : "allocate returned NULL",
                           (unsigned long long)dev->props.memory_bytes);
  *ptr = p;
  return FLOE_OK;
}

/* Frees with the allocator that made ptr (NULL ptr: nothing). */
void floe__device_free(FloeDevice *dev, void *ptr, size_t bytes) {
  if (!ptr) return;
  if (!dev)
    floe__aligned_free(ptr);
  else
    dev->fns.deallocate(dev->fns.state, ptr, bytes);
}

static const char *place_name(const FloeDevice *d) { return d ? d->short_name : "host"; }

static floe_code copy_failed(FloeStatus *st, floe_code rc, const FloeDevice *from,
                             const FloeDevice *to, size_t n, const char *slot) {
  return floe_status_set(st, rc, "copy of %zu bytes from %s to %s failed in %s (%s)", n,
                         place_name(from), place_name(to), slot, floe_code_name(rc));
}

/* Both buffers are the caller's; a staging buffer is freed before returning. */
floe_code floe__device_copy(FloeDevice *dst_dev, void *dst, FloeDevice *src_dev, const void *src,
                            size_t n, FloeStatus *st) {
  if (n == 0) return FLOE_OK;
  floe_code rc;
  if (!dst_dev && !src_dev) {
    memcpy(dst, src, n);
    return FLOE_OK;
  }
  if (dst_dev == src_dev) {
    rc = dst_dev->fns.copy_d2d(dst_dev->fns.state, dst, src, n);
    return rc == FLOE_OK ? rc : copy_failed(st, rc, src_dev, dst_dev, n, "copy_d2d");
  }
  /* Host memory of a host-memory device is as good as the core's own. */
  if (!src_dev || src_dev->host_memory) {
    if (!dst_dev) {
      memcpy(dst, src, n);
      return FLOE_OK;
    }
    rc = dst_dev->fns.copy_h2d(dst_dev->fns.state, dst, src, n);
    return rc == FLOE_OK ? rc : copy_failed(st, rc, src_dev, dst_dev, n, "copy_h2d");
  }
  if (!dst_dev || dst_dev->host_memory) {
    rc = src_dev->fns.copy_d2h(src_dev->fns.state, dst, src, n);
    return rc == FLOE_OK ? rc : copy_failed(st, rc, src_dev, dst_dev, n, "copy_d2h");
  }
  /* Two devices with their own memories: stage through the host. */
  void *stage = floe__aligned_alloc(64, n);
  if (!stage)
    return floe_status_set(st, FLOE_NO_MEMORY,
                           "out of memory staging %zu bytes from %s to %s through the host", n,
                           src_dev->short_name, dst_dev->short_name);
  rc = src_dev->fns.copy_d2h(src_dev->fns.state, stage, src, n);
  if (rc != FLOE_OK) {
    copy_failed(st, rc, src_dev, NULL, n, "copy_d2h");
    goto out_free_stage;
  }
  rc = dst_dev->fns.copy_h2d(dst_dev->fns.state, dst, stage, n);
  if (rc != FLOE_OK) copy_failed(st, rc, NULL, dst_dev, n, "copy_h2d");

out_free_stage:
  floe__aligned_free(stage);
  return rc;
}
