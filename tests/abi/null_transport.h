/* SPDX-License-Identifier: Apache-2.0 */
/* null_transport.h - transport slots of ABI 1.0 that refuse everything, for the test plugins
 * that only exercise how the loader registers a transport (strict.c, versions.c). */
#ifndef FLOE_TESTS_ABI_NULL_TRANSPORT_H
#define FLOE_TESTS_ABI_NULL_TRANSPORT_H

#include <floe/floe_plugin.h>

static floe_code tr_init(const FloeHostApi *host, void **ctx) { return FLOE_UNIMPLEMENTED; }
static void tr_finalize(void *ctx) {}
static floe_code tr_listen(void *ctx, void *addr, size_t *len, void **comm) {
  return FLOE_UNIMPLEMENTED;
}
static floe_code tr_connect(void *ctx, const void *addr, size_t len, void **comm) {
  return FLOE_UNIMPLEMENTED;
}
static floe_code tr_accept(void *listen_comm, void **comm) { return FLOE_UNIMPLEMENTED; }
static floe_code tr_post(void *comm, void *buf, size_t len, uint64_t tag, void *mh, void **req) {
  return FLOE_UNIMPLEMENTED;
}
static floe_code tr_send(void *comm, const void *buf, size_t len, uint64_t tag, void *mh,
                         void **req) {
  return FLOE_UNIMPLEMENTED;
}
static floe_code tr_test(void *req, int *done, size_t *size) { return FLOE_UNIMPLEMENTED; }
static void tr_close(void *comm) {}

#endif
