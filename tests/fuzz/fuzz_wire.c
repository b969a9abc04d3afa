/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_wire.c - the control plane's frame and message parser (core/dist/wire.c): the input
 * as a received frame (header, payload, MAC), the same header and payload re-signed with the
 * right key so the fuzzer reaches the protobuf unpacking behind the MAC, and the payload
 * unpacked directly as the type its first bytes choose. Every refusal has a message; every
 * message that unpacks packs again, and that packing unpacks and packs to the same bytes. */
#include "fuzz_util.h" /* first: it defines _GNU_SOURCE */
#include <string.h>

#include "core.h"
#include "dist.pb-c.h"

static const uint8_t k_key[32] = {0x5a, 1, 2, 3};
static const FloeWireLimits k_limits = {1u << 20, 1u << 16};

/* Packs m, unpacks it as type and packs again: the same bytes. */
static void round_trip(uint16_t type, const ProtobufCMessage *m) {
  size_t n = protobuf_c_message_get_packed_size(m);
  uint8_t *a = malloc(n + 1), *b = NULL;
  if (!a) return;
  protobuf_c_message_pack(m, a);
  FloeStatus st = {FLOE_OK, NULL};
  struct ProtobufCMessage *again = NULL;
  floe_code rc = floe__wire_unpack(type, a, n, "fuzz", &again, &st);
  if (rc == FLOE_RESOURCE_EXHAUSTED) { /* packed repeated fields: fewer bytes, same memory */
    floe_status_clear(&st);
    free(a);
    return;
  }
  if (rc != FLOE_OK) abort(); /* its own packing must unpack */
  size_t n2 = protobuf_c_message_get_packed_size(again);
  if (n2 != n || !(b = malloc(n2 + 1))) abort();
  protobuf_c_message_pack(again, b);
  if (memcmp(a, b, n) != 0) abort();
  floe__wire_free(again);
  free(a);
  free(b);
}

static void check(floe_code rc, FloeStatus *st, uint16_t type, struct ProtobufCMessage *m) {
  if (rc == FLOE_OK) {
    if (!m) abort();
    round_trip(type, m);
    floe__wire_free(m);
  } else {
    if (m) abort();
    FUZZ_NEED_MESSAGE(st);
  }
  floe_status_clear(st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  FloeStatus st = {FLOE_OK, NULL};
  struct ProtobufCMessage *m = NULL;
  uint16_t type = 0;
  /* 1. As received. */
  uint64_t seq = 0;
  if (size >= FLOE__WIRE_HEADER)
    for (int i = 12; i < 20; i++) seq = seq << 8 | data[i];
  floe_code rc = floe__wire_frame_decode(data, size, &k_limits, k_key, 'C', seq, "fuzz", &type, &m, &st);
  check(rc, &st, type, m);
  if (size < FLOE__WIRE_HEADER) return 0;
  /* 2. The header's type and sequence, the rest as payload, correctly framed and signed. */
  size_t plen = size - FLOE__WIRE_HEADER;
  FloeWireHeader h;
  uint8_t hdr[FLOE__WIRE_HEADER];
  memcpy(hdr, data, sizeof hdr);
  memcpy(hdr, FLOE__WIRE_MAGIC, 4);
  hdr[4] = 0, hdr[5] = FLOE__WIRE_VERSION;
  hdr[8] = (uint8_t)(plen >> 24), hdr[9] = (uint8_t)(plen >> 16);
  hdr[10] = (uint8_t)(plen >> 8), hdr[11] = (uint8_t)plen;
  uint8_t *frame = malloc(size + FLOE__WIRE_MAC);
  if (!frame) return 0;
  memcpy(frame, hdr, sizeof hdr);
  memcpy(frame + FLOE__WIRE_HEADER, data + FLOE__WIRE_HEADER, plen);
  if (floe__wire_mac(k_key, 'C', hdr, data + FLOE__WIRE_HEADER, plen, frame + size, &st) != FLOE_OK)
    abort();
  m = NULL;
  rc = floe__wire_frame_decode(frame, size + FLOE__WIRE_MAC, &k_limits, k_key, 'C', seq, "fuzz",
                               &type, &m, &st);
  check(rc, &st, type, m);
  /* The header alone, as a connection reads it first. */
  rc = floe__wire_header_decode(data, &k_limits, "fuzz", &h, &st);
  if (rc != FLOE_OK) FUZZ_NEED_MESSAGE(&st);
  floe_status_clear(&st);
  free(frame);
  /* 3. The payload as the message type its first byte picks among the known ones. */
  static const uint16_t types[] = {
#define FUZZ_TYPE(name, num, msg, cls) num,
      FLOE__WIRE_TYPES(FUZZ_TYPE)
#undef FUZZ_TYPE
  };
  uint16_t t = types[data[0] % (sizeof types / sizeof types[0])];
  m = NULL;
  rc = floe__wire_unpack(t, data + 1, size - 1, "fuzz", &m, &st);
  check(rc, &st, t, m);
  return 0;
}
