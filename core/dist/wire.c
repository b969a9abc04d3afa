/* SPDX-License-Identifier: Apache-2.0 */
/* wire.c - frames of control messages: the header (magic, version, type, length, sequence),
 * the payload (one protobuf message of core/dist/dist.proto) and the HMAC-SHA256 that closes
 * it. A receiver decides everything it can from the 20 header bytes before it allocates a
 * byte for the payload: a wrong magic or version, an unknown type, a length over the type's
 * limit. The payload is unpacked only after its MAC and sequence number check, with an
 * allocator bounded to a few times its size, so a small frame cannot make a large message. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "dist.h"
#include "dist.pb-c.h"

/* ------------------------------------------------------------------------------------ */
/* Types */

typedef struct WireType {
  uint16_t num;
  char cls; /* 'H' handshake, 'C' control, 'T' tensors or graphs */
  const char *name;
  const ProtobufCMessageDescriptor *desc;
} WireType;

#define CLASS_H 'H'
#define CLASS_C 'C'
#define CLASS_T 'T'
static const WireType k_types[] = {
#define FLOE__WIRE_ROW(name, num, msg, cls) \
  {num, CLASS_##cls, #name, &floe__dist__##msg##__descriptor},
    FLOE__WIRE_TYPES(FLOE__WIRE_ROW)
#undef FLOE__WIRE_ROW
};

static const WireType *type_find(uint16_t num) {
  for (size_t i = 0; i < FLOE__ARRAY_LEN(k_types); i++)
    if (k_types[i].num == num) return &k_types[i];
  return NULL;
}

const char *floe__wire_type_name(uint16_t type) {
  const WireType *t = type_find(type);
  return t ? t->name : NULL;
}

const void *floe__wire_type_descriptor(uint16_t type) {
  const WireType *t = type_find(type);
  return t ? t->desc : NULL;
}

uint32_t floe__wire_type_limit(uint16_t type, const FloeWireLimits *limits) {
  const WireType *t = type_find(type);
  if (!t) return 0;
  if (t->cls == 'H') return FLOE__WIRE_MAX_HANDSHAKE;
  if (t->cls == 'T')
    return limits && limits->max_frame ? limits->max_frame : FLOE__WIRE_DEFAULT_MAX_FRAME;
  return limits && limits->max_control ? limits->max_control : FLOE__WIRE_DEFAULT_MAX_CONTROL;
}

/* "RUN_GRAPH" or "type 77" into buf. */
static const char *type_str(uint16_t type, char *buf, size_t cap) {
  const char *n = floe__wire_type_name(type);
  if (n) return n;
  snprintf(buf, cap, "type %u", (unsigned)type);
  return buf;
}

/* ------------------------------------------------------------------------------------ */
/* Headers */

static void put_be(uint8_t *p, uint64_t v, int n) {
  for (int i = n - 1; i >= 0; i--, v >>= 8) p[i] = (uint8_t)v;
}
static uint64_t get_be(const uint8_t *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v = v << 8 | p[i];
  return v;
}

void floe__wire_header_encode(const FloeWireHeader *h, uint8_t out[FLOE__WIRE_HEADER]) {
  memcpy(out, FLOE__WIRE_MAGIC, 4);
  put_be(out + 4, h->version, 2);
  put_be(out + 6, h->type, 2);
  put_be(out + 8, h->length, 4);
  put_be(out + 12, h->seq, 8);
}

floe_code floe__wire_header_decode(const uint8_t in[FLOE__WIRE_HEADER],
                                   const FloeWireLimits *limits, const char *peer,
                                   FloeWireHeader *h, FloeStatus *st) {
  h->version = (uint16_t)get_be(in + 4, 2);
  h->type = (uint16_t)get_be(in + 6, 2);
  h->length = (uint32_t)get_be(in + 8, 4);
  h->seq = get_be(in + 12, 8);
  char tb[16];
  if (memcmp(in, FLOE__WIRE_MAGIC, 4) != 0) {
    char shown[20];
    for (int i = 0; i < 4; i++)
      snprintf(shown + 2 * i, sizeof shown - 2 * i, "%02x", in[i]);
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "frame from %s: bad magic 0x%s (expected \"%s\"): the peer does not "
                           "speak Floe's control protocol, or the stream lost its place",
                           peer, shown, FLOE__WIRE_MAGIC);
  }
  if (h->version != FLOE__WIRE_VERSION)
    return floe_status_set(st, FLOE_UNIMPLEMENTED,
                           "frame from %s: protocol version %u (%s), but this build speaks "
                           "version %d: run the same Floe release on every task",
                           peer, (unsigned)h->version, type_str(h->type, tb, sizeof tb),
                           FLOE__WIRE_VERSION);
  const WireType *t = type_find(h->type);
  if (!t)
    return floe_status_set(st, FLOE_UNIMPLEMENTED,
                           "frame from %s: unknown message type %u (protocol version %u): the "
                           "peer runs a newer or different Floe",
                           peer, (unsigned)h->type, (unsigned)h->version);
  uint32_t limit = floe__wire_type_limit(h->type, limits);
  if (h->length > limit)
    return floe_status_set(st, FLOE_RESOURCE_EXHAUSTED,
                           "frame from %s: %s of %" PRIu32 " bytes is over the limit of %" PRIu32
                           " bytes for its type%s; refused before reading it",
                           peer, t->name, h->length, limit,
                           t->cls == 'T' ? " (raise the connection's max_frame for larger tensors)"
                                         : "");
  return FLOE_OK;
}

floe_code floe__wire_mac(const uint8_t key[32], uint8_t dir,
                         const uint8_t header[FLOE__WIRE_HEADER], const uint8_t *payload,
                         size_t len, uint8_t mac[FLOE__WIRE_MAC], FloeStatus *st) {
  return floe__hmac_sha256(key, &dir, 1, header, FLOE__WIRE_HEADER, payload, len, mac, st);
}

/* ------------------------------------------------------------------------------------ */
/* Payloads */

/* Every allocation of an unpacked message carries its size in front (16 bytes, keeping the
 * alignment), so the bounded allocator can give back what protobuf-c frees while it works
 * (its scratch lists of fields) and one free function fits messages from either allocator. */
#define PB_HEAD 16
static void *pb_alloc(void *data, size_t size) {
  (void)data;
  uint8_t *p = floe__malloc(PB_HEAD + size);
  if (!p) return NULL;
  memcpy(p, &size, sizeof size);
  return p + PB_HEAD;
}
static void pb_free(void *data, void *p) {
  (void)data;
  if (p) floe__free((uint8_t *)p - PB_HEAD);
}
static ProtobufCAllocator k_alloc = {pb_alloc, pb_free, NULL};

void *floe__wire_alloc(size_t n) { return pb_alloc(NULL, n); }
void floe__wire_dealloc(void *p) { pb_free(NULL, p); }

/* An allocator that refuses past a budget of live bytes: protobuf-c's unpacking may allocate
 * far more than the bytes it reads (an empty sub-message is 2 bytes on the wire and a
 * struct of dozens in memory). */
typedef struct Budget {
  size_t left;
  bool exceeded, oom;
} Budget;
static void *budget_alloc(void *data, size_t size) {
  Budget *b = data;
  if (size > b->left || PB_HEAD > b->left - size) {
    b->exceeded = true;
    return NULL;
  }
  void *p = pb_alloc(NULL, size);
  if (!p) {
    b->oom = true;
    return NULL;
  }
  b->left -= PB_HEAD + size;
  return p;
}
static void budget_free(void *data, void *p) {
  Budget *b = data;
  if (!p) return;
  size_t size;
  memcpy(&size, (uint8_t *)p - PB_HEAD, sizeof size);
  b->left += PB_HEAD + size;
  pb_free(NULL, p);
}

void floe__wire_free(struct ProtobufCMessage *msg) {
  if (msg) protobuf_c_message_free_unpacked(msg, &k_alloc);
}

floe_code floe__wire_copy(const struct ProtobufCMessage *msg, struct ProtobufCMessage **out,
                          FloeStatus *st) {
  *out = NULL;
  size_t len = protobuf_c_message_get_packed_size(msg);
  uint8_t *buf = floe__malloc(len ? len : 1);
  if (!buf)
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory copying a %s of %zu bytes",
                           msg->descriptor->name, len);
  protobuf_c_message_pack(msg, buf);
  *out = protobuf_c_message_unpack(msg->descriptor, &k_alloc, len, buf);
  floe__free(buf);
  /* What was just packed unpacks, so only memory can fail here. */
  if (!*out)
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory copying a %s of %zu bytes",
                           msg->descriptor->name, len);
  return FLOE_OK;
}

/* Where a payload stops being readable: offset and field path. */
typedef struct WalkErr {
  size_t offset;
  char path[160];
  const char *why;
} WalkErr;

static bool read_varint(const uint8_t *p, size_t end, size_t *i, uint64_t *v) {
  uint64_t r = 0;
  for (int shift = 0; shift < 70; shift += 7) {
    if (*i >= end) return false;
    uint8_t b = p[(*i)++];
    r |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) {
      *v = r;
      return true;
    }
  }
  return false;
}

/* The wire type a field's values use when not packed. */
static int natural_wire_type(ProtobufCType t) {
  switch (t) {
  case PROTOBUF_C_TYPE_FIXED64: case PROTOBUF_C_TYPE_SFIXED64: case PROTOBUF_C_TYPE_DOUBLE:
    return 1;
  case PROTOBUF_C_TYPE_FIXED32: case PROTOBUF_C_TYPE_SFIXED32: case PROTOBUF_C_TYPE_FLOAT:
    return 5;
  case PROTOBUF_C_TYPE_STRING: case PROTOBUF_C_TYPE_BYTES: case PROTOBUF_C_TYPE_MESSAGE:
    return 2;
  default:
    return 0;
  }
}

/* Walks a message in p[begin, end) against d; true when every field is readable. */
static bool walk(const ProtobufCMessageDescriptor *d, const uint8_t *p, size_t begin, size_t end,
                 WalkErr *e, int depth) {
  size_t plen = strlen(e->path);
  if (depth > 16) {
    e->offset = begin;
    e->why = "messages nested deeper than dist.proto allows";
    return false;
  }
  for (size_t i = begin; i < end;) {
    size_t at = i;
    uint64_t tag, v;
    e->path[plen] = '\0';
    if (!read_varint(p, end, &i, &tag) || tag >> 32 || (tag >> 3) == 0) {
      e->offset = at;
      e->why = "a field tag is malformed or runs past the end of its message";
      return false;
    }
    uint32_t id = (uint32_t)(tag >> 3), wt = (uint32_t)(tag & 7);
    const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field(d, id);
    size_t n = strlen(e->path);
    snprintf(e->path + n, sizeof e->path - n, "%s%s", n ? "." : "",
             f ? f->name : "(unknown field)");
    if (f && wt != (uint32_t)natural_wire_type(f->type) &&
        !(wt == 2 && f->label == PROTOBUF_C_LABEL_REPEATED)) {
      e->offset = at;
      e->why = "a field has the wrong wire type for its declared type";
      return false;
    }
    switch (wt) {
    case 0:
      if (!read_varint(p, end, &i, &v)) {
        e->offset = at;
        e->why = "a varint runs past the end of its message";
        return false;
      }
      break;
    case 1:
    case 5: {
      size_t w = wt == 1 ? 8 : 4;
      if (end - i < w) {
        e->offset = at;
        e->why = "a fixed-width value runs past the end of its message";
        return false;
      }
      i += w;
      break;
    }
    case 2:
      if (!read_varint(p, end, &i, &v) || v > end - i) {
        e->offset = at;
        e->why = "a length-delimited field runs past the end of its message";
        return false;
      }
      if (f && f->type == PROTOBUF_C_TYPE_MESSAGE &&
          !walk(f->descriptor, p, i, i + (size_t)v, e, depth + 1))
        return false;
      i += (size_t)v;
      break;
    default:
      e->offset = at;
      e->why = "wire type 3, 4, 6 or 7 (groups or garbage): dist.proto uses none";
      return false;
    }
  }
  e->path[plen] = '\0';
  return true;
}

floe_code floe__wire_unpack(uint16_t type, const uint8_t *payload, size_t len, const char *peer,
                            struct ProtobufCMessage **msg, FloeStatus *st) {
  *msg = NULL;
  char tb[16];
  const WireType *t = type_find(type);
  if (!t)
    return floe_status_set(st, FLOE_UNIMPLEMENTED, "frame from %s: unknown message type %s",
                           peer, type_str(type, tb, sizeof tb));
  /* Walked first, against the same descriptors: protobuf-c takes some malformed input (a
   * field number 0 written in two bytes) as an unknown field, and says only "failed" for
   * the rest; the walk names the byte offset and field path. */
  WalkErr e;
  memset(&e, 0, sizeof e);
  if (!walk(t->desc, payload, 0, len, &e, 0))
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "%s from %s: malformed payload at byte %zu of %zu%s%s: %s", t->name,
                           peer, e.offset, len, e.path[0] ? ", field " : "", e.path, e.why);
  /* Bytes fields are copied (1x); every field read takes protobuf-c 32 bytes of scratch
   * until the end, and a sub-message its struct: up to about 64 bytes per 2 on the wire. The
   * budget: the payload's size, plus 64 times it but at most 64 MiB, plus 1 MiB. len is at
   * most 4 GiB (a u32): nothing overflows. */
  size_t extra = len < (1u << 20) ? 64 * len : (64u << 20);
  size_t budget = (1u << 20) + len + extra;
  Budget b = {budget, false, false};
  ProtobufCAllocator alloc = {budget_alloc, budget_free, &b};
  ProtobufCMessage *m = protobuf_c_message_unpack(t->desc, &alloc, len, len ? payload : NULL);
  if (m) {
    *msg = m;
    return FLOE_OK;
  }
  if (b.exceeded)
    return floe_status_set(st, FLOE_RESOURCE_EXHAUSTED,
                           "%s from %s: its %zu bytes would unpack into more than %zu bytes of "
                           "memory (many empty or tiny entries); refused",
                           t->name, peer, len, budget);
  if (b.oom)
    return floe_status_set(st, FLOE_NO_MEMORY, "%s from %s: out of memory unpacking %zu bytes",
                           t->name, peer, len);
  return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                         "%s from %s: the %zu-byte payload does not unpack as %s (a value out of "
                         "range for its field)",
                         t->name, peer, len, t->desc->name);
}

/* ------------------------------------------------------------------------------------ */
/* Frames */

floe_code floe__wire_frame_encode(uint16_t type, const struct ProtobufCMessage *msg,
                                  uint64_t seq, const uint8_t key[32], uint8_t dir,
                                  const FloeWireLimits *limits, uint8_t **frame, size_t *len,
                                  FloeStatus *st) {
  *frame = NULL;
  *len = 0;
  char tb[16];
  const WireType *t = type_find(type);
  if (!t || !msg || msg->descriptor != t->desc)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "cannot send %s: %s", type_str(type, tb, sizeof tb),
                           !t ? "no such message type"
                              : !msg ? "the message is NULL"
                                     : "the message is not of the type's kind (a bug)");
  size_t n = protobuf_c_message_get_packed_size(msg);
  uint32_t limit = floe__wire_type_limit(type, limits);
  if (n > limit)
    return floe_status_set(st, FLOE_RESOURCE_EXHAUSTED,
                           "cannot send %s of %zu bytes: over the limit of %" PRIu32
                           " bytes for its type (the receiver would refuse it)",
                           t->name, n, limit);
  uint8_t *buf = floe__malloc(FLOE__WIRE_HEADER + n + FLOE__WIRE_MAC);
  if (!buf)
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory framing %s of %zu bytes", t->name,
                           n);
  FloeWireHeader h = {FLOE__WIRE_VERSION, type, (uint32_t)n, seq};
  floe__wire_header_encode(&h, buf);
  if (n) protobuf_c_message_pack(msg, buf + FLOE__WIRE_HEADER);
  floe_code rc = floe__wire_mac(key, dir, buf, buf + FLOE__WIRE_HEADER, n,
                                buf + FLOE__WIRE_HEADER + n, st);
  if (rc != FLOE_OK) {
    floe__free(buf);
    return rc;
  }
  *frame = buf;
  *len = FLOE__WIRE_HEADER + n + FLOE__WIRE_MAC;
  return FLOE_OK;
}

floe_code floe__wire_frame_open(const FloeWireHeader *h, const uint8_t hdr[FLOE__WIRE_HEADER],
                                const uint8_t *body, const uint8_t key[32], uint8_t dir,
                                uint64_t expect_seq, const char *peer,
                                struct ProtobufCMessage **msg, FloeStatus *st) {
  *msg = NULL;
  char tb[16];
  const char *tn = type_str(h->type, tb, sizeof tb);
  uint8_t mac[FLOE__WIRE_MAC];
  floe_code rc = floe__wire_mac(key, dir, hdr, body, h->length, mac, st);
  if (rc != FLOE_OK) return rc;
  if (!floe__auth_equal(mac, body + h->length, FLOE__WIRE_MAC))
    return floe_status_set(st, FLOE_DATA_LOSS,
                           "%s frame #%" PRIu64 " from %s: its MAC does not match: the frame was "
                           "altered on the way, or signed with another key; refused",
                           tn, h->seq, peer);
  if (h->seq != expect_seq)
    return floe_status_set(st, FLOE_PERMISSION_DENIED,
                           "%s frame from %s has sequence number %" PRIu64 " where %" PRIu64
                           " was due: a %s frame; refused",
                           tn, peer, h->seq, expect_seq,
                           h->seq < expect_seq ? "replayed (or reordered)" : "reordered or dropped");
  return floe__wire_unpack(h->type, body, h->length, peer, msg, st);
}

floe_code floe__wire_frame_decode(const uint8_t *buf, size_t len, const FloeWireLimits *limits,
                                  const uint8_t key[32], uint8_t dir, uint64_t expect_seq,
                                  const char *peer, uint16_t *type,
                                  struct ProtobufCMessage **msg, FloeStatus *st) {
  *msg = NULL;
  *type = 0;
  if (len < FLOE__WIRE_HEADER)
    return floe_status_set(st, FLOE_DATA_LOSS,
                           "frame from %s: truncated: %zu bytes, fewer than a header's %d", peer,
                           len, FLOE__WIRE_HEADER);
  FloeWireHeader h;
  floe_code rc = floe__wire_header_decode(buf, limits, peer, &h, st);
  if (rc != FLOE_OK) return rc;
  size_t want = (size_t)FLOE__WIRE_HEADER + h.length + FLOE__WIRE_MAC;
  if (len != want)
    return floe_status_set(st, FLOE_DATA_LOSS,
                           "%s frame from %s: %s: %zu bytes where its header says %zu",
                           floe__wire_type_name(h.type), peer,
                           len < want ? "truncated" : "trailing bytes after it", len, want);
  rc = floe__wire_frame_open(&h, buf, buf + FLOE__WIRE_HEADER, key, dir, expect_seq, peer, msg,
                             st);
  if (rc == FLOE_OK) *type = h.type;
  return rc;
}
