/* SPDX-License-Identifier: Apache-2.0 */
/* versions.c - test plugins built against other ABI versions, one per -D:
 *
 *   ABITEST_OLD     floe-abitest-old.so: simulates a build against an older minor: its
 *                   FloeDeviceFns and FloeKernelDef end before the optional slots (smaller
 *                   struct_size) and the bytes after struct_size are garbage, so a core that
 *                   reads past struct_size crashes or rejects the kernel. Its transport
 *                   "abiold" ends before the 1.4 waiting slots; its garbage trywait beside
 *                   a NULL get_fd would be refused if the core read it.
 *   ABITEST_NEW     floe-abitest-new.so: a newer minor (99) whose structs carry an extra
 *                   trailing field: the core must negotiate minor 0 and ignore the extra.
 *   ABITEST_MAJOR2  floe-abitest-major2.so: declares ABI 2.7; it then ignores the refusal
 *                   and returns FLOE_OK, which must not make the core accept it.
 */
#include <string.h>

#include <floe/floe_plugin.h>


static floe_code dev_props(void *state, FloeDeviceProps *p) {
#if defined(ABITEST_OLD)
  strcpy(p->type, "ABIOLD");
#else
  strcpy(p->type, "ABINEW");
#endif
  p->memory_bytes = 1024;
  return FLOE_OK;
}

static floe_code dev_allocate(void *state, size_t bytes, size_t alignment, void **ptr) {
  return FLOE_RESOURCE_EXHAUSTED;
}
static void dev_deallocate(void *state, void *ptr, size_t bytes) {}
static floe_code dev_copy(void *state, void *dst, const void *src, size_t n) { return FLOE_OK; }

static void fill_device(FloeDeviceFns *d) {
  d->get_props = dev_props;
  d->allocate = dev_allocate;
  d->deallocate = dev_deallocate;
  d->copy_h2d = dev_copy;
  d->copy_d2h = dev_copy;
  d->copy_d2d = dev_copy;
}

#if !defined(ABITEST_MAJOR2)
static floe_code neg_compute(void *state, FloeKernelContext *ctx) { return FLOE_UNIMPLEMENTED; }

static void fill_kernel(FloeKernelDef *k, const char *device_type) {
  k->op = "Neg";
  k->device_type = device_type;
  k->compute = neg_compute;
}
#endif

#if defined(ABITEST_OLD)

#include "null_transport.h"
#endif

#if defined(ABITEST_OLD)

/* Bytes a reader must never look at. */
#define GARBAGE_TAIL(s) memset((char *)&(s) + (s).struct_size, 0xA5, sizeof(s) - (s).struct_size)

FLOE_PLUGIN_EXPORT floe_code floe_plugin_init(const FloeHostApi *host, FloePluginRegistrar *reg) {
  FloePluginInfo info = {sizeof info, "abitest-old", "0.9", FLOE_ABI_MAJOR, 0};
  floe_code rc = reg->declare(reg, &info);
  if (rc != FLOE_OK) return rc;
  FloeDeviceFns d;
  memset(&d, 0, sizeof d);
  d.struct_size = offsetof(FloeDeviceFns, copy_h2d_async);
  fill_device(&d);
  GARBAGE_TAIL(d);
  if ((rc = reg->register_device(reg, &d)) != FLOE_OK) return rc;
  FloeKernelDef k;
  memset(&k, 0, sizeof k);
  k.struct_size = offsetof(FloeKernelDef, compute_async);
  fill_kernel(&k, "ABIOLD");
  GARBAGE_TAIL(k);
  if ((rc = reg->register_kernel(reg, &k)) != FLOE_OK) return rc;
  FloeTransportFns t;
  memset(&t, 0, sizeof t);
  t.struct_size = offsetof(FloeTransportFns, trywait); /* ABI 1.3 */
  t.name = "abiold";
  t.init = tr_init;
  t.finalize = tr_finalize;
  t.listen = tr_listen;
  t.connect = tr_connect;
  t.accept = tr_accept;
  t.isend = tr_send;
  t.irecv = tr_post;
  t.test = tr_test;
  t.close_send = tr_close;
  t.close_recv = tr_close;
  t.close_listen = tr_close;
  GARBAGE_TAIL(t);
  return reg->register_transport(reg, &t);
}

#elif defined(ABITEST_NEW)

typedef struct NewInfo {
  FloePluginInfo base;
  const char *homepage; /* a field of minor 99 */
} NewInfo;

typedef struct NewDeviceFns {
  FloeDeviceFns base;
  floe_code (*future_slot)(void *state); /* unknown to a 1.0 core */
} NewDeviceFns;

typedef struct NewKernelDef {
  FloeKernelDef base;
  uint64_t future_flags;
} NewKernelDef;

FLOE_PLUGIN_EXPORT floe_code floe_plugin_init(const FloeHostApi *host, FloePluginRegistrar *reg) {
  NewInfo info = {{sizeof info, "abitest-new", "99.0", FLOE_ABI_MAJOR, 99}, "https://example.org"};
  floe_code rc = reg->declare(reg, &info.base);
  if (rc != FLOE_OK) return rc;
  NewDeviceFns d;
  memset(&d, 0, sizeof d);
  d.base.struct_size = sizeof d;
  fill_device(&d.base);
  memset(&d.future_slot, 0xA5, sizeof d.future_slot);
  if ((rc = reg->register_device(reg, &d.base)) != FLOE_OK) return rc;
  NewKernelDef k;
  memset(&k, 0, sizeof k);
  k.base.struct_size = sizeof k;
  fill_kernel(&k.base, "ABINEW");
  k.future_flags = ~(uint64_t)0;
  return reg->register_kernel(reg, &k.base);
}

#elif defined(ABITEST_MAJOR2)

FLOE_PLUGIN_EXPORT floe_code floe_plugin_init(const FloeHostApi *host, FloePluginRegistrar *reg) {
  FloePluginInfo info = {sizeof info, "abitest-major2", "2.7.0", 2, 7};
  if (reg->declare(reg, &info) != FLOE_ABI_MISMATCH) return FLOE_INTERNAL;
  FloeDeviceFns d;
  memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  fill_device(&d);
  /* Misbehaves on purpose: registers anyway and claims success. */
  reg->register_device(reg, &d);
  return FLOE_OK;
}

#else
#error "build with one of -DABITEST_OLD, -DABITEST_NEW, -DABITEST_MAJOR2"
#endif
