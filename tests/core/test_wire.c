/* SPDX-License-Identifier: Apache-2.0 */
/* test_wire.c - frames of control messages (core/dist/wire.c) and the proofs of the job
 * secret (core/dist/auth.c), without sockets.
 *
 * Expected bytes are made here: headers written field by field from the documented layout,
 * MACs and proofs computed with OpenSSL's one-shot HMAC() over the documented inputs (not
 * through the core's code), protobuf payloads written by hand. */
#define _GNU_SOURCE
#include <check.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core.h"
#include "dist.pb-c.h"

static const uint8_t k_key[32] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
                                  17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32};
static const char *const k_peer = "127.0.0.1:7001 (/job:worker/task:1)";

static void expect_msg(FloeStatus *st, const char *frag) {
  ck_assert_msg(strstr(floe_status_message(st), frag), "\"%s\" lacks \"%s\"",
                floe_status_message(st), frag);
}

/* A RUN_GRAPH request with two feeds and a fetch. */
static Floe__Dist__RunGraphRequest *run_graph_msg(void) {
  static float v[6] = {1, 2, 3, 4, 5, 6};
  static int64_t shape[2] = {2, 3};
  static Floe__Dist__Tensor t = FLOE__DIST__TENSOR__INIT;
  static Floe__Dist__NamedTensor a = FLOE__DIST__NAMED_TENSOR__INIT, b = FLOE__DIST__NAMED_TENSOR__INIT;
  static Floe__Dist__NamedTensor *feeds[2];
  static char *fetches[1] = {"y:0"};
  static Floe__Dist__RunGraphRequest m = FLOE__DIST__RUN_GRAPH_REQUEST__INIT;
  t.dtype = FLOE_F32;
  t.n_shape = 2;
  t.shape = shape;
  t.data.data = (uint8_t *)v;
  t.data.len = sizeof v;
  a.name = "x:0";
  a.tensor = &t;
  b.name = "z:0";
  feeds[0] = &a;
  feeds[1] = &b;
  m.graph_handle = "g1";
  m.step_id = 0x0123456789abcdefull;
  m.request_id = 42;
  m.n_feeds = 2;
  m.feeds = feeds;
  m.n_fetches = 1;
  m.fetches = fetches;
  return &m;
}

START_TEST(test_types) {
  ck_assert_str_eq(floe__wire_type_name(FLOE__WIRE_RUN_GRAPH), "RUN_GRAPH");
  ck_assert_str_eq(floe__wire_type_name(3), "AUTH_RESULT");
  ck_assert_ptr_null(floe__wire_type_name(0));
  ck_assert_ptr_null(floe__wire_type_name(4));
  ck_assert_ptr_eq(floe__wire_type_descriptor(FLOE__WIRE_KV_GET), &floe__dist__kv_get_request__descriptor);
  ck_assert_uint_eq(floe__wire_type_limit(FLOE__WIRE_RUN_GRAPH, NULL), 64u << 20);
  ck_assert_uint_eq(floe__wire_type_limit(FLOE__WIRE_HEARTBEAT, NULL), 1u << 20);
  ck_assert_uint_eq(floe__wire_type_limit(FLOE__WIRE_HELLO, NULL), 1024);
  FloeWireLimits l = {1000, 100};
  ck_assert_uint_eq(floe__wire_type_limit(FLOE__WIRE_RUN_STEP_RESPONSE, &l), 1000);
  ck_assert_uint_eq(floe__wire_type_limit(FLOE__WIRE_KV_INSERT, &l), 100);
  ck_assert_uint_eq(floe__wire_type_limit(999, &l), 0);
}
END_TEST

START_TEST(test_header) {
  FloeWireHeader h = {1, FLOE__WIRE_RUN_GRAPH, 0x01020304, 0x1122334455667788ull};
  uint8_t b[FLOE__WIRE_HEADER];
  floe__wire_header_encode(&h, b);
  const uint8_t want[FLOE__WIRE_HEADER] = {'F', 'L', 'O', 'C', 0, 1, 0, 34, 1, 2,
                                           3, 4, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88};
  ck_assert_mem_eq(b, want, sizeof want);
  FloeWireHeader d;
  FloeStatus st = {FLOE_OK, NULL};
  ck_assert_int_eq(floe__wire_header_decode(b, NULL, k_peer, &d, &st), FLOE_OK);
  ck_assert_uint_eq(d.type, FLOE__WIRE_RUN_GRAPH);
  ck_assert_uint_eq(d.length, 0x01020304);
  ck_assert(d.seq == 0x1122334455667788ull);
  /* Each refusal, decided from the header alone. */
  uint8_t x[FLOE__WIRE_HEADER];
  memcpy(x, b, sizeof x);
  x[0] = 'G';
  ck_assert_int_eq(floe__wire_header_decode(x, NULL, k_peer, &d, &st), FLOE_INVALID_ARGUMENT);
  expect_msg(&st, "frame from 127.0.0.1:7001 (/job:worker/task:1): bad magic 0x474c4f43");
  floe_status_clear(&st);
  memcpy(x, b, sizeof x);
  x[5] = 2;
  ck_assert_int_eq(floe__wire_header_decode(x, NULL, k_peer, &d, &st), FLOE_UNIMPLEMENTED);
  expect_msg(&st, "protocol version 2 (RUN_GRAPH), but this build speaks version 1");
  floe_status_clear(&st);
  memcpy(x, b, sizeof x);
  x[6] = 0x03, x[7] = 0xe7; /* 999 */
  ck_assert_int_eq(floe__wire_header_decode(x, NULL, k_peer, &d, &st), FLOE_UNIMPLEMENTED);
  expect_msg(&st, "unknown message type 999 (protocol version 1)");
  floe_status_clear(&st);
  /* Version and type both wrong: both named. */
  x[5] = 9;
  ck_assert_int_eq(floe__wire_header_decode(x, NULL, k_peer, &d, &st), FLOE_UNIMPLEMENTED);
  expect_msg(&st, "protocol version 9 (type 999)");
  floe_status_clear(&st);
  memcpy(x, b, sizeof x);
  x[8] = 0x04, x[9] = 0, x[10] = 0, x[11] = 1; /* 64 MiB + 1 */
  ck_assert_int_eq(floe__wire_header_decode(x, NULL, k_peer, &d, &st), FLOE_RESOURCE_EXHAUSTED);
  expect_msg(&st, "RUN_GRAPH of 67108865 bytes is over the limit of 67108864 bytes");
  floe_status_clear(&st);
  x[8] = 0xff, x[9] = 0xff, x[10] = 0xff, x[11] = 0xff;
  x[7] = FLOE__WIRE_HEARTBEAT;
  ck_assert_int_eq(floe__wire_header_decode(x, NULL, k_peer, &d, &st), FLOE_RESOURCE_EXHAUSTED);
  expect_msg(&st, "HEARTBEAT of 4294967295 bytes is over the limit of 1048576");
  floe_status_clear(&st);
  /* Handshake types have a small fixed limit. */
  x[7] = FLOE__WIRE_HELLO;
  x[8] = 0, x[9] = 0, x[10] = 4, x[11] = 1;
  ck_assert_int_eq(floe__wire_header_decode(x, NULL, k_peer, &d, &st), FLOE_RESOURCE_EXHAUSTED);
  expect_msg(&st, "HELLO of 1025 bytes is over the limit of 1024");
  floe_status_clear(&st);
}
END_TEST

/* The MAC as documented: HMAC-SHA256(key, dir || header || payload). */
static void ref_mac(const uint8_t *key, uint8_t dir, const uint8_t *frame, size_t payload_len,
                    uint8_t out[32]) {
  size_t n = 1 + FLOE__WIRE_HEADER + payload_len;
  uint8_t *buf = malloc(n);
  buf[0] = dir;
  memcpy(buf + 1, frame, FLOE__WIRE_HEADER + payload_len);
  unsigned int len = 32;
  ck_assert_ptr_nonnull(HMAC(EVP_sha256(), key, 32, buf, n, out, &len));
  free(buf);
}

START_TEST(test_frame_roundtrip) {
  FloeStatus st = {FLOE_OK, NULL};
  uint8_t *frame;
  size_t len;
  Floe__Dist__RunGraphRequest *m = run_graph_msg();
  ck_assert_int_eq(floe__wire_frame_encode(FLOE__WIRE_RUN_GRAPH, &m->base, 7, k_key, 'C', NULL,
                                           &frame, &len, &st),
                   FLOE_OK);
  size_t plen = protobuf_c_message_get_packed_size(&m->base);
  ck_assert_uint_eq(len, FLOE__WIRE_HEADER + plen + FLOE__WIRE_MAC);
  uint8_t mac[32];
  ref_mac(k_key, 'C', frame, plen, mac);
  ck_assert_mem_eq(frame + FLOE__WIRE_HEADER + plen, mac, 32);
  uint16_t type;
  struct ProtobufCMessage *got;
  ck_assert_int_eq(floe__wire_frame_decode(frame, len, NULL, k_key, 'C', 7, k_peer, &type, &got, &st),
                   FLOE_OK);
  ck_assert_uint_eq(type, FLOE__WIRE_RUN_GRAPH);
  Floe__Dist__RunGraphRequest *r = (Floe__Dist__RunGraphRequest *)got;
  ck_assert_str_eq(r->graph_handle, "g1");
  ck_assert(r->step_id == 0x0123456789abcdefull);
  ck_assert_uint_eq(r->n_feeds, 2);
  ck_assert_str_eq(r->feeds[0]->name, "x:0");
  ck_assert_uint_eq(r->feeds[0]->tensor->n_shape, 2);
  ck_assert_uint_eq(r->feeds[0]->tensor->data.len, 24);
  ck_assert_ptr_null(r->feeds[1]->tensor);
  ck_assert_str_eq(r->fetches[0], "y:0");
  floe__wire_free(got);

  /* Another key, another direction (a reflected frame), another sequence number. */
  uint8_t other[32];
  memcpy(other, k_key, 32);
  other[31] ^= 1;
  ck_assert_int_eq(floe__wire_frame_decode(frame, len, NULL, other, 'C', 7, k_peer, &type, &got, &st),
                   FLOE_DATA_LOSS);
  expect_msg(&st, "RUN_GRAPH frame #7 from 127.0.0.1:7001 (/job:worker/task:1): its MAC does not match");
  floe_status_clear(&st);
  ck_assert_int_eq(floe__wire_frame_decode(frame, len, NULL, k_key, 'S', 7, k_peer, &type, &got, &st),
                   FLOE_DATA_LOSS);
  floe_status_clear(&st);
  ck_assert_int_eq(floe__wire_frame_decode(frame, len, NULL, k_key, 'C', 8, k_peer, &type, &got, &st),
                   FLOE_PERMISSION_DENIED);
  expect_msg(&st, "has sequence number 7 where 8 was due: a replayed (or reordered) frame");
  floe_status_clear(&st);
  ck_assert_int_eq(floe__wire_frame_decode(frame, len, NULL, k_key, 'C', 6, k_peer, &type, &got, &st),
                   FLOE_PERMISSION_DENIED);
  expect_msg(&st, "reordered or dropped");
  floe_status_clear(&st);
  /* Truncated, and trailing bytes. */
  ck_assert_int_eq(floe__wire_frame_decode(frame, len - 1, NULL, k_key, 'C', 7, k_peer, &type, &got, &st),
                   FLOE_DATA_LOSS);
  expect_msg(&st, "truncated");
  floe_status_clear(&st);
  ck_assert_int_eq(floe__wire_frame_decode(frame, 10, NULL, k_key, 'C', 7, k_peer, &type, &got, &st),
                   FLOE_DATA_LOSS);
  expect_msg(&st, "truncated: 10 bytes, fewer than a header's 20");
  floe_status_clear(&st);
  uint8_t *longer = malloc(len + 1);
  memcpy(longer, frame, len);
  longer[len] = 0;
  ck_assert_int_eq(floe__wire_frame_decode(longer, len + 1, NULL, k_key, 'C', 7, k_peer, &type, &got, &st),
                   FLOE_DATA_LOSS);
  expect_msg(&st, "trailing bytes");
  floe_status_clear(&st);
  free(longer);
  /* Every single flipped bit anywhere in the frame is refused. */
  for (size_t i = 0; i < len; i++) {
    for (int bit = 0; bit < 8; bit++) {
      frame[i] ^= (uint8_t)(1u << bit);
      floe_code rc = floe__wire_frame_decode(frame, len, NULL, k_key, 'C', 7, k_peer, &type, &got, &st);
      ck_assert_msg(rc != FLOE_OK, "byte %zu bit %d flipped and accepted", i, bit);
      ck_assert_msg(*floe_status_message(&st), "no message for byte %zu", i);
      floe_status_clear(&st);
      frame[i] ^= (uint8_t)(1u << bit);
    }
  }
  floe__free(frame);
}
END_TEST

START_TEST(test_encode_refusals) {
  FloeStatus st = {FLOE_OK, NULL};
  uint8_t *frame;
  size_t len;
  Floe__Dist__KvInsertRequest kv = FLOE__DIST__KV_INSERT_REQUEST__INIT;
  kv.key = "address/worker/0";
  static uint8_t value[2000];
  kv.value.data = value;
  kv.value.len = sizeof value;
  /* The message's kind must be the type's. */
  ck_assert_int_eq(floe__wire_frame_encode(FLOE__WIRE_KV_GET, &kv.base, 0, k_key, 'C', NULL, &frame,
                                           &len, &st),
                   FLOE_INVALID_ARGUMENT);
  expect_msg(&st, "cannot send KV_GET: the message is not of the type's kind");
  floe_status_clear(&st);
  ck_assert_int_eq(floe__wire_frame_encode(77, &kv.base, 0, k_key, 'C', NULL, &frame, &len, &st),
                   FLOE_INVALID_ARGUMENT);
  expect_msg(&st, "cannot send type 77: no such message type");
  floe_status_clear(&st);
  /* Over the limit: refused by the sender too. */
  FloeWireLimits l = {0, 1000};
  ck_assert_int_eq(floe__wire_frame_encode(FLOE__WIRE_KV_INSERT, &kv.base, 0, k_key, 'C', &l, &frame,
                                           &len, &st),
                   FLOE_RESOURCE_EXHAUSTED);
  expect_msg(&st, "cannot send KV_INSERT of 2021 bytes: over the limit of 1000 bytes");
  floe_status_clear(&st);
  ck_assert_int_eq(floe__wire_frame_encode(FLOE__WIRE_KV_INSERT, &kv.base, 0, k_key, 'C', NULL,
                                           &frame, &len, &st),
                   FLOE_OK);
  /* ... and by a receiver with that limit, from the header alone. */
  uint16_t type;
  struct ProtobufCMessage *got;
  ck_assert_int_eq(floe__wire_frame_decode(frame, len, &l, k_key, 'C', 0, k_peer, &type, &got, &st),
                   FLOE_RESOURCE_EXHAUSTED);
  expect_msg(&st, "KV_INSERT of 2021 bytes is over the limit of 1000 bytes for its type");
  floe_status_clear(&st);
  floe__free(frame);
  /* An empty message is a frame of an empty payload. */
  Floe__Dist__HeartbeatRequest hb = FLOE__DIST__HEARTBEAT_REQUEST__INIT;
  ck_assert_int_eq(floe__wire_frame_encode(FLOE__WIRE_HEARTBEAT, &hb.base, 1, k_key, 'S', NULL,
                                           &frame, &len, &st),
                   FLOE_OK);
  ck_assert_uint_eq(len, FLOE__WIRE_HEADER + FLOE__WIRE_MAC);
  ck_assert_int_eq(floe__wire_frame_decode(frame, len, NULL, k_key, 'S', 1, k_peer, &type, &got, &st),
                   FLOE_OK);
  floe__wire_free(got);
  floe__free(frame);
}
END_TEST

START_TEST(test_unpack_refusals) {
  FloeStatus st = {FLOE_OK, NULL};
  struct ProtobufCMessage *m;
  /* RunGraphRequest: feeds (field 4) whose tensor (field 2) says 100 bytes follow. */
  const uint8_t torn[] = {0x0a, 0x02, 'g', '1', 0x22, 0x04, 0x12, 0x64, 0x08, 0x01};
  ck_assert_int_eq(floe__wire_unpack(FLOE__WIRE_RUN_GRAPH, torn, sizeof torn, k_peer, &m, &st),
                   FLOE_INVALID_ARGUMENT);
  expect_msg(&st, "RUN_GRAPH from 127.0.0.1:7001 (/job:worker/task:1): malformed payload at byte 6 "
                  "of 10, field feeds.tensor: a length-delimited field runs past the end");
  floe_status_clear(&st);
  /* A string field sent as a varint. */
  const uint8_t wrong_type[] = {0x08, 0x05};
  ck_assert_int_eq(floe__wire_unpack(FLOE__WIRE_KV_GET, wrong_type, sizeof wrong_type, k_peer, &m, &st),
                   FLOE_INVALID_ARGUMENT);
  expect_msg(&st, "field key: a field has the wrong wire type");
  floe_status_clear(&st);
  const uint8_t group[] = {0x7b}; /* field 15 (unknown), wire type 3 */
  ck_assert_int_eq(floe__wire_unpack(FLOE__WIRE_KV_GET, group, sizeof group, k_peer, &m, &st),
                   FLOE_INVALID_ARGUMENT);
  expect_msg(&st, "groups or garbage");
  floe_status_clear(&st);
  const uint8_t varint[] = {0x10, 0xff, 0xff};
  ck_assert_int_eq(floe__wire_unpack(FLOE__WIRE_KV_GET, varint, sizeof varint, k_peer, &m, &st),
                   FLOE_INVALID_ARGUMENT);
  expect_msg(&st, "field timeout_ms: a varint runs past the end");
  floe_status_clear(&st);
  /* Field number 0, written in two bytes: protobuf-c alone would keep it as an unknown
   * field (and then pack it in one byte, which it refuses). */
  const uint8_t tag0[] = {0x80, 0x00, 0x00};
  ck_assert_int_eq(floe__wire_unpack(FLOE__WIRE_REGISTER_GRAPH, tag0, sizeof tag0, k_peer, &m, &st),
                   FLOE_INVALID_ARGUMENT);
  expect_msg(&st, "malformed payload at byte 0 of 3: a field tag is malformed");
  floe_status_clear(&st);
  /* Unknown fields are kept by protobuf-c and cost memory like the rest; a known type with
   * unknown fields still unpacks. */
  const uint8_t unknown[] = {0xf8, 0x01, 0x05, 0x0a, 0x01, 'k'};
  ck_assert_int_eq(floe__wire_unpack(FLOE__WIRE_KV_GET, unknown, sizeof unknown, k_peer, &m, &st),
                   FLOE_OK);
  ck_assert_str_eq(((Floe__Dist__KvGetRequest *)m)->key, "k");
  floe__wire_free(m);
  /* A small payload that would unpack into much memory: 2M empty feeds (2 bytes each on the
   * wire; a struct, a pointer and protobuf-c's scratch each in memory: about 270 MB for 4
   * MiB, where the budget is 69 MiB). */
  size_t n = 4u << 20;
  uint8_t *bomb = malloc(n);
  for (size_t i = 0; i < n; i += 2) bomb[i] = 0x22, bomb[i + 1] = 0;
  ck_assert_int_eq(floe__wire_unpack(FLOE__WIRE_RUN_GRAPH, bomb, n, k_peer, &m, &st),
                   FLOE_RESOURCE_EXHAUSTED);
  expect_msg(&st, "RUN_GRAPH from 127.0.0.1:7001 (/job:worker/task:1): its 4194304 bytes would "
                  "unpack into more than");
  floe_status_clear(&st);
  /* 32K entries fit. */
  ck_assert_int_eq(floe__wire_unpack(FLOE__WIRE_RUN_GRAPH, bomb, 1u << 16, k_peer, &m, &st), FLOE_OK);
  ck_assert_uint_eq(((Floe__Dist__RunGraphRequest *)m)->n_feeds, 1u << 15);
  floe__wire_free(m);
  free(bomb);
  ck_assert_int_eq(floe__wire_unpack(999, varint, 1, k_peer, &m, &st), FLOE_UNIMPLEMENTED);
  floe_status_clear(&st);
  floe__wire_free(NULL);
}
END_TEST

START_TEST(test_unpack_alloc_fail) {
  uint8_t *frame;
  size_t len;
  FloeStatus st = {FLOE_OK, NULL};
  Floe__Dist__RunGraphRequest *msg = run_graph_msg();
  ck_assert_int_eq(floe__wire_frame_encode(FLOE__WIRE_RUN_GRAPH, &msg->base, 0, k_key, 'C', NULL,
                                           &frame, &len, &st),
                   FLOE_OK);
  for (long n = 1;; n++) {
    uint16_t type;
    struct ProtobufCMessage *m = NULL;
    floe_test_fail_alloc_after(n);
    floe_code rc = floe__wire_frame_decode(frame, len, NULL, k_key, 'C', 0, k_peer, &type, &m, &st);
    floe_test_fail_alloc_after(0);
    if (rc == FLOE_OK) {
      floe__wire_free(m);
      ck_assert_int_gt(n, 3);
      break;
    }
    ck_assert_msg(rc == FLOE_NO_MEMORY, "n=%ld: %s", n, floe_status_message(&st));
    ck_assert_ptr_null(m);
    floe_status_clear(&st);
    ck_assert_int_lt(n, 200);
  }
  floe__free(frame);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* The secret and the proofs */

static char tmpdir[64];

static void write_secret(const char *path, const char *text, mode_t mode) {
  unlink(path);
  int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0600);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  ck_assert_int_eq(fchmod(fd, mode), 0);
  close(fd);
}

static void secret_bad(const char *path, floe_code code, const char *frag) {
  FloeStatus st = {FLOE_OK, NULL};
  FloeJobSecret *s = (FloeJobSecret *)1;
  ck_assert_int_eq(floe__secret_from_file(path, &s, &st), code);
  ck_assert_ptr_null(s);
  expect_msg(&st, frag);
  floe_status_clear(&st);
}

START_TEST(test_secret_file) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/floe-secret-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
  char path[128], link[128], want[256];
  snprintf(path, sizeof path, "%s/secret", tmpdir);
  FloeStatus st = {FLOE_OK, NULL};
  FloeJobSecret *s = NULL;
  write_secret(path, "0123456789abcdef0123\n", 0600);
  ck_assert_int_eq(floe__secret_from_file(path, &s, &st), FLOE_OK);
  snprintf(want, sizeof want, "job secret file %s", path);
  ck_assert_str_eq(floe__secret_source(s), want);
  /* The final newline is not part of it: the same secret as the 20 bytes alone. */
  FloeJobSecret *e = NULL;
  ck_assert_int_eq(floe__secret_from_bytes("0123456789abcdef0123", 20, "env", &e, &st), FLOE_OK);
  uint8_t n1[32] = {1}, n2[32] = {2}, p1[32], p2[32];
  FloeTaskIdentity id = {"worker", 3, 0xfeedull};
  ck_assert_int_eq(floe__auth_proof(s, 'C', n1, n2, &id, p1, &st), FLOE_OK);
  ck_assert_int_eq(floe__auth_proof(e, 'C', n1, n2, &id, p2, &st), FLOE_OK);
  ck_assert_mem_eq(p1, p2, 32);
  floe__secret_free(e);
  floe__secret_free(s);
  /* Through a symbolic link: the file it names is checked. */
  snprintf(link, sizeof link, "%s/link", tmpdir);
  ck_assert_int_eq(symlink(path, link), 0);
  ck_assert_int_eq(floe__secret_from_file(link, &s, &st), FLOE_OK);
  floe__secret_free(s);
  write_secret(path, "0123456789abcdef0123", 0400);
  ck_assert_int_eq(floe__secret_from_file(path, &s, &st), FLOE_OK);
  floe__secret_free(s);
  /* Refusals. */
  write_secret(path, "0123456789abcdef0123", 0644);
  secret_bad(path, FLOE_PERMISSION_DENIED, "has mode 0644: it must be 0600 or stricter");
  secret_bad(link, FLOE_PERMISSION_DENIED, "chmod 600");
  write_secret(path, "0123456789abcdef0123", 0640);
  secret_bad(path, FLOE_PERMISSION_DENIED, "has mode 0640");
  write_secret(path, "0123456789abcdef0123", 0700);
  secret_bad(path, FLOE_PERMISSION_DENIED, "has mode 0700");
  write_secret(path, "short\n", 0600);
  secret_bad(path, FLOE_INVALID_ARGUMENT, "the job secret has 5 bytes, fewer than 16");
  {
    char *big = malloc(5000);
    memset(big, 'x', 4999);
    big[4999] = '\0';
    write_secret(path, big, 0600);
    free(big);
    secret_bad(path, FLOE_INVALID_ARGUMENT, "has 4999 bytes, more than 4096");
  }
  if (geteuid() == 0) {
    /* Owned by someone else (only root can make such a file here). */
    write_secret(path, "0123456789abcdef0123", 0600);
    ck_assert_int_eq(chown(path, 4321, 4321), 0);
    secret_bad(path, FLOE_PERMISSION_DENIED, "is owned by uid 4321, not by this user (uid 0)");
  }
  secret_bad(tmpdir, FLOE_INVALID_ARGUMENT, "a directory");
  snprintf(path, sizeof path, "%s/fifo", tmpdir);
  ck_assert_int_eq(mkfifo(path, 0600), 0);
  secret_bad(path, FLOE_INVALID_ARGUMENT, "a FIFO");
  snprintf(path, sizeof path, "%s/none", tmpdir);
  secret_bad(path, FLOE_NOT_FOUND, "job secret file");
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(test_secret_env) {
  FloeStatus st = {FLOE_OK, NULL};
  FloeJobSecret *s = NULL;
  unsetenv("FLOE_JOB_SECRET");
  unsetenv("FLOE_JOB_SECRET_FILE");
  ck_assert_int_eq(floe__secret_from_env(&s, &st), FLOE_FAILED_PRECONDITION);
  expect_msg(&st, "no job secret");
  expect_msg(&st, "FLOE_JOB_SECRET_FILE");
  floe_status_clear(&st);
  setenv("FLOE_JOB_SECRET", "a secret of enough bytes", 1);
  ck_assert_int_eq(floe__secret_from_env(&s, &st), FLOE_OK);
  ck_assert_str_eq(floe__secret_source(s), "FLOE_JOB_SECRET");
  floe__secret_free(s);
  setenv("FLOE_JOB_SECRET_FILE", "/nonexistent", 1);
  ck_assert_int_eq(floe__secret_from_env(&s, &st), FLOE_INVALID_ARGUMENT);
  expect_msg(&st, "both FLOE_JOB_SECRET_FILE and FLOE_JOB_SECRET are set");
  floe_status_clear(&st);
  unsetenv("FLOE_JOB_SECRET");
  ck_assert_int_eq(floe__secret_from_env(&s, &st), FLOE_NOT_FOUND);
  expect_msg(&st, "/nonexistent");
  floe_status_clear(&st);
  setenv("FLOE_JOB_SECRET", "too short", 1);
  unsetenv("FLOE_JOB_SECRET_FILE");
  ck_assert_int_eq(floe__secret_from_env(&s, &st), FLOE_INVALID_ARGUMENT);
  expect_msg(&st, "FLOE_JOB_SECRET: the job secret has 9 bytes, fewer than 16");
  floe_status_clear(&st);
  unsetenv("FLOE_JOB_SECRET");
}
END_TEST

START_TEST(test_proofs) {
  const char *secret = "the job secret, 32 bytes long!!";
  FloeStatus st = {FLOE_OK, NULL};
  FloeJobSecret *s = NULL;
  ck_assert_int_eq(floe__secret_from_bytes(secret, strlen(secret), "test", &s, &st), FLOE_OK);
  uint8_t nc[32], ns[32], got[32], want[32];
  ck_assert_int_eq(floe__auth_random(nc, 32, &st), FLOE_OK);
  ck_assert_int_eq(floe__auth_random(ns, 32, &st), FLOE_OK);
  ck_assert(memcmp(nc, ns, 32) != 0);
  FloeTaskIdentity id = {"worker", 258, 0x0102030405060708ull};
  /* The documented input: label, role, both nonces, len16(job) job task32 incarnation64. */
  uint8_t in[12 + 1 + 64 + 2 + 6 + 4 + 8], *p = in;
  memcpy(p, "floe-auth-v1", 12), p += 12;
  *p++ = 'C';
  memcpy(p, nc, 32), p += 32;
  memcpy(p, ns, 32), p += 32;
  *p++ = 0, *p++ = 6;
  memcpy(p, "worker", 6), p += 6;
  *p++ = 0, *p++ = 0, *p++ = 1, *p++ = 2;
  for (int i = 1; i <= 8; i++) *p++ = (uint8_t)i;
  unsigned int wl = 32;
  HMAC(EVP_sha256(), secret, (int)strlen(secret), in, sizeof in, want, &wl);
  ck_assert_int_eq(floe__auth_proof(s, 'C', nc, ns, &id, got, &st), FLOE_OK);
  ck_assert_mem_eq(got, want, 32);
  /* The server's differs (no reflection), and so does another incarnation's. */
  ck_assert_int_eq(floe__auth_proof(s, 'S', nc, ns, &id, got, &st), FLOE_OK);
  ck_assert(memcmp(got, want, 32) != 0);
  id.incarnation++;
  ck_assert_int_eq(floe__auth_proof(s, 'C', nc, ns, &id, got, &st), FLOE_OK);
  ck_assert(memcmp(got, want, 32) != 0);
  /* The session key: HMAC(secret, "floe-key-v1" || nc || ns); not the secret, not a proof. */
  uint8_t kin[11 + 64];
  memcpy(kin, "floe-key-v1", 11);
  memcpy(kin + 11, nc, 32);
  memcpy(kin + 43, ns, 32);
  HMAC(EVP_sha256(), secret, (int)strlen(secret), kin, sizeof kin, want, &wl);
  ck_assert_int_eq(floe__auth_session_key(s, nc, ns, got, &st), FLOE_OK);
  ck_assert_mem_eq(got, want, 32);
  ck_assert(floe__auth_equal(got, want, 32));
  got[0] ^= 0x80;
  ck_assert(!floe__auth_equal(got, want, 32));
  char buf[96];
  ck_assert_str_eq(floe__task_identity_str(&id, buf, sizeof buf),
                   "/job:worker/task:258 (incarnation 0102030405060709)");
  floe__secret_free(s);
  floe__secret_free(NULL);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("wire");
  TCase *tc = tcase_create("wire");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_types);
  tcase_add_test(tc, test_header);
  tcase_add_test(tc, test_frame_roundtrip);
  tcase_add_test(tc, test_encode_refusals);
  tcase_add_test(tc, test_unpack_refusals);
  tcase_add_test(tc, test_unpack_alloc_fail);
  suite_add_tcase(s, tc);
  TCase *ta = tcase_create("auth");
  tcase_set_timeout(ta, 60);
  tcase_add_test(ta, test_secret_file);
  tcase_add_test(ta, test_secret_env);
  tcase_add_test(ta, test_proofs);
  suite_add_tcase(s, ta);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
