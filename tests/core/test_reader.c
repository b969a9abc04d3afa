/* SPDX-License-Identifier: Apache-2.0 */
/* test_reader.c - the three readers on files this test writes: text lines (plain and gzip,
 * CRLF, a last line without newline, skipped header lines, epochs), fixed-length records
 * (header and footer, reinterpretation as another dtype, overlapping windows), IDX items of
 * several dtypes (big-endian on disk), pairs of readers read in step (and the errors when
 * they are not), shuffling checked against floe_batcher's order, ReaderReadUpTo, ReaderSeek,
 * and every error: missing files, truncated records, bad headers, files that disagree.
 * Expected records are computed from the bytes the test wrote. */
#define _GNU_SOURCE
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "../ops/harness.h"
#include "floe/floe.h"
#include "core.h"

static FloeRuntime *rt;
static char dir[256];

static void setup(void) {
  rt = harness_runtime(4);
  harness_tmpdir(dir, sizeof dir, "reader");
}

static void teardown(void) {
  floe_runtime_free(rt);
  rt = NULL;
  harness_rmdir(dir);
}

/* ---- files ---- */

static char *path_of(const char *name) {
  static char buf[8][320];
  static int k;
  char *p = buf[k++ % 8];
  snprintf(p, 320, "%s/%s", dir, name);
  return p;
}

static const char *write_file(const char *name, const void *data, size_t n) {
  const char *p = path_of(name);
  FILE *f = fopen(p, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(data, 1, n, f), n);
  fclose(f);
  return p;
}

static const char *write_gz(const char *name, const void *data, size_t n) {
  const char *p = path_of(name);
  gzFile f = gzopen(p, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(gzwrite(f, data, (unsigned)n), (int)n);
  gzclose(f);
  return p;
}

/* An IDX file: header (type code, dims big-endian) and elements written big-endian. */
static const char *write_idx(const char *name, int type, int esize, int nd, const uint32_t *dims,
                             const void *host_data, int gz) {
  size_t count = 1;
  for (int i = 0; i < nd; i++) count *= dims[i];
  size_t n = 4 + 4 * (size_t)nd + count * (size_t)esize;
  uint8_t *b = malloc(n);
  b[0] = b[1] = 0;
  b[2] = (uint8_t)type;
  b[3] = (uint8_t)nd;
  for (int i = 0; i < nd; i++)
    for (int k = 0; k < 4; k++) b[4 + 4 * i + k] = (uint8_t)(dims[i] >> (24 - 8 * k));
  const uint8_t *src = host_data;
  uint8_t *dst = b + 4 + 4 * nd;
  for (size_t e = 0; e < count; e++)
    for (int k = 0; k < esize; k++) dst[e * esize + k] = src[e * esize + (esize - 1 - k)];
  const char *p = gz ? write_gz(name, b, n) : write_file(name, b, n);
  free(b);
  return p;
}

/* ---- sessions ---- */

static FloeSession *session_new(FloeGraph *g) { return harness_session(g, rt); }

/* Fetches n outputs of node (":0".."), asserting success. */
static void fetch_ok(FloeSession *s, const char *node, int n, FloeTensor **out) {
  char names[4][64];
  const char *f[4];
  for (int i = 0; i < n; i++) {
    snprintf(names[i], sizeof names[i], "%s:%d", node, i);
    f[i] = names[i];
  }
  FloeStatus *st = floe_status_new();
  floe_code rc = floe_session_run(s, NULL, 0, f, n, NULL, 0, out, st);
  ck_assert_msg(rc == FLOE_OK, "%s: %s", node, floe_status_message(st));
  floe_status_free(st);
}

static void fetch_fails(FloeSession *s, const char *node, floe_code code, const char *frag) {
  char name[64];
  snprintf(name, sizeof name, "%s:0", node);
  const char *f = name;
  FloeTensor *out = NULL;
  FloeStatus *st = floe_status_new();
  floe_code rc = floe_session_run(s, NULL, 0, &f, 1, NULL, 0, &out, st);
  ck_assert_msg(rc == code, "want %s, got %s: %s", floe_code_name(code), floe_code_name(rc),
                floe_status_message(st));
  ck_assert_msg(strstr(floe_status_message(st), frag), "'%s' lacks '%s'",
                floe_status_message(st), frag);
  floe_status_free(st);
}

static int64_t key_of(const FloeTensor *t) { return *(const int64_t *)floe_tensor_data(t); }

/* Reads one record of "read" and checks it is the bytes of want with key k. */
static void expect_line(FloeSession *s, int64_t k, const char *want) {
  FloeTensor *out[2] = {0};
  fetch_ok(s, "read", 2, out);
  ck_assert_int_eq(key_of(out[0]), k);
  ck_assert_int_eq(floe_tensor_dtype(out[1]), FLOE_U8);
  ck_assert_int_eq(floe_tensor_rank(out[1]), 1);
  ck_assert_int_eq(floe_tensor_dim(out[1], 0), (int64_t)strlen(want));
  if (want[0]) ck_assert_mem_eq(floe_tensor_data(out[1]), want, strlen(want));
  floe_tensor_release(out[0]);
  floe_tensor_release(out[1]);
}

static FloeOutput one_reader_read(FloeGraph *g, FloeOutput r) {
  FloeOutput v;
  return floe_reader_read(g, "read", &r, 1, &v);
}

/* ---- text lines ---- */

START_TEST(text_lines_plain_and_gzip_over_epochs) {
  const char *t1 = "alpha\nbeta\r\n\ngamma";
  const char *t2 = "one\ntwo\n";
  char files[700];
  snprintf(files, sizeof files, "%s;%s", write_file("a.txt", t1, strlen(t1)),
           write_gz("b.txt.gz", t2, strlen(t2)));
  FloeGraph *g = floe_graph_new();
  FloeReaderOptions o;
  floe_reader_options_init(&o);
  o.num_epochs = 2;
  FloeOutput r = floe_text_line_reader(g, "r", files, 0, &o);
  FloeOutput key = one_reader_read(g, r);
  ck_assert_ptr_nonnull(key.node);
  FloeShape vs = floe_node_output_shape(key.node, 1);
  ck_assert(vs.rank == 1 && vs.dims[0] == -1);
  FloeSession *s = session_new(g);
  const char *lines[] = {"alpha", "beta", "", "gamma", "one", "two"};
  for (int e = 0; e < 2; e++)
    for (int i = 0; i < 6; i++) expect_line(s, i, lines[i]);
  fetch_fails(s, "read", FLOE_OUT_OF_RANGE, "reader 'r' has read every record of its 2 files (2 epochs)");
  fetch_fails(s, "read", FLOE_OUT_OF_RANGE, "has read every record");
  floe_session_free(s);
  floe_graph_free(g);

  /* Skipped header lines, per file. */
  g = floe_graph_new();
  r = floe_text_line_reader(g, "r", files, 1, NULL);
  one_reader_read(g, r);
  s = session_new(g);
  expect_line(s, 0, "beta");
  expect_line(s, 1, "");
  expect_line(s, 2, "gamma");
  expect_line(s, 3, "two");
  fetch_fails(s, "read", FLOE_OUT_OF_RANGE, "(1 epoch)");
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

START_TEST(text_errors_and_empty_files) {
  char files[700];
  snprintf(files, sizeof files, "%s;%s", write_file("ok.txt", "x\n", 2), path_of("missing.txt"));
  FloeGraph *g = floe_graph_new();
  one_reader_read(g, floe_text_line_reader(g, "r", files, 0, NULL));
  FloeSession *s = session_new(g);
  expect_line(s, 0, "x");
  fetch_fails(s, "read", FLOE_NOT_FOUND, "missing.txt");
  floe_session_free(s);
  floe_graph_free(g);

  /* Without end (num_epochs 0) over files with no lines: an error, not a busy loop. */
  g = floe_graph_new();
  FloeReaderOptions o;
  floe_reader_options_init(&o);
  o.num_epochs = 0;
  one_reader_read(g, floe_text_line_reader(g, "r", write_file("empty.txt", "", 0), 0, &o));
  s = session_new(g);
  fetch_fails(s, "read", FLOE_OUT_OF_RANGE, "reader 'r': its 1 file hold no records");
  floe_session_free(s);
  floe_graph_free(g);

  /* Bad definitions are refused when building. */
  g = floe_graph_new();
  floe_text_line_reader(g, "r", "", 0, NULL);
  ck_assert(strstr(floe_graph_error(g, NULL), "files is empty"));
  floe_graph_free(g);
  g = floe_graph_new();
  one_reader_read(g, floe_text_line_reader(g, "r", "a;;b", 0, NULL));
  s = session_new(g);
  fetch_fails(s, "read", FLOE_INVALID_ARGUMENT, "path 2 is empty");
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* ---- fixed-length records ---- */

START_TEST(fixed_length_records) {
  /* 3 header bytes, 4 records of 8 bytes, 2 footer bytes. */
  uint8_t data[3 + 32 + 2];
  for (size_t i = 0; i < sizeof data; i++) data[i] = (uint8_t)(i * 7 + 1);
  const char *p = write_file("fixed.bin", data, sizeof data);
  FloeGraph *g = floe_graph_new();
  FloeOutput r = floe_fixed_length_reader(g, "r", p, 3, 8, 2, 0, FLOE_U8, floe_shape_unknown(),
                                          NULL);
  one_reader_read(g, r);
  int64_t two = 2;
  FloeOutput ri = floe_fixed_length_reader(g, "ri", p, 3, 8, 2, 0, FLOE_I32,
                                           floe_shape_make(1, &two), NULL);
  FloeOutput vi;
  floe_reader_read(g, "readi", &ri, 1, &vi);
  FloeSession *s = session_new(g);
  for (int k = 0; k < 4; k++) {
    FloeTensor *out[2] = {0};
    fetch_ok(s, "read", 2, out);
    ck_assert_int_eq(key_of(out[0]), k);
    ck_assert_int_eq(floe_tensor_dim(out[1], 0), 8);
    ck_assert_mem_eq(floe_tensor_data(out[1]), data + 3 + 8 * k, 8);
    floe_tensor_release(out[0]);
    floe_tensor_release(out[1]);
    fetch_ok(s, "readi", 2, out);
    ck_assert_int_eq(floe_tensor_dtype(out[1]), FLOE_I32);
    ck_assert_int_eq(floe_tensor_dim(out[1], 0), 2);
    int32_t want[2];
    memcpy(want, data + 3 + 8 * k, 8); /* the bytes as stored, in host order */
    ck_assert_mem_eq(floe_tensor_data(out[1]), want, 8);
    floe_tensor_release(out[0]);
    floe_tensor_release(out[1]);
  }
  fetch_fails(s, "read", FLOE_OUT_OF_RANGE, "has read every record of its 1 file");
  floe_session_free(s);
  floe_graph_free(g);

  /* Stacked: chunks of 3 records, then the last one. */
  g = floe_graph_new();
  r = floe_fixed_length_reader(g, "r", p, 3, 8, 2, 0, FLOE_U8, floe_shape_unknown(), NULL);
  FloeTensor *three = floe_tensor_scalar_i64(3, NULL);
  FloeOutput v;
  floe_reader_read_up_to(g, "upto", &r, 1, floe_const(g, "three", three), &v);
  floe_tensor_release(three);
  s = session_new(g);
  for (int c = 0; c < 2; c++) {
    FloeTensor *out[2] = {0};
    fetch_ok(s, "upto", 2, out);
    int k = c ? 1 : 3;
    ck_assert_int_eq(floe_tensor_dim(out[1], 0), k);
    ck_assert_int_eq(floe_tensor_dim(out[1], 1), 8);
    ck_assert_mem_eq(floe_tensor_data(out[1]), data + 3 + 24 * c, (size_t)(8 * k));
    ck_assert_int_eq(((int64_t *)floe_tensor_data(out[0]))[0], 3 * c);
    floe_tensor_release(out[0]);
    floe_tensor_release(out[1]);
  }
  fetch_fails(s, "upto", FLOE_OUT_OF_RANGE, "has read every record");
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

START_TEST(fixed_length_windows_and_errors) {
  /* 10 i32 tokens; windows of 4 tokens every 2 tokens: starts 0, 2, 4, 6. */
  int32_t tok[10];
  for (int i = 0; i < 10; i++) tok[i] = 1000 + i;
  const char *p = write_file("tokens.bin", tok, sizeof tok);
  FloeGraph *g = floe_graph_new();
  int64_t four = 4;
  one_reader_read(g, floe_fixed_length_reader(g, "r", p, 0, 16, 0, 8, FLOE_I32,
                                              floe_shape_make(1, &four), NULL));
  FloeSession *s = session_new(g);
  for (int w = 0; w < 4; w++) {
    FloeTensor *out[2] = {0};
    fetch_ok(s, "read", 2, out);
    ck_assert_mem_eq(floe_tensor_data(out[1]), tok + 2 * w, 16);
    floe_tensor_release(out[0]);
    floe_tensor_release(out[1]);
  }
  fetch_fails(s, "read", FLOE_OUT_OF_RANGE, "has read every record");
  floe_session_free(s);
  floe_graph_free(g);

  /* A truncated last record: the error names the file and the offset. */
  uint8_t bytes[3 + 6 * 4 + 3 + 2] = {0};
  p = write_file("trunc.bin", bytes, sizeof bytes);
  g = floe_graph_new();
  one_reader_read(g, floe_fixed_length_reader(g, "r", p, 3, 6, 2, 0, FLOE_U8,
                                              floe_shape_unknown(), NULL));
  s = session_new(g);
  for (int k = 0; k < 4; k++) {
    FloeTensor *out[2] = {0};
    fetch_ok(s, "read", 2, out);
    floe_tensor_release(out[0]);
    floe_tensor_release(out[1]);
  }
  char want[400];
  snprintf(want, sizeof want, "%s: offset 27: truncated record: 3 bytes left before the footer, "
           "record_bytes is 6", p);
  fetch_fails(s, "read", FLOE_DATA_LOSS, want);
  floe_session_free(s);
  floe_graph_free(g);

  /* Shorter than header and footer. */
  p = write_file("short.bin", bytes, 4);
  g = floe_graph_new();
  one_reader_read(g, floe_fixed_length_reader(g, "r", p, 3, 6, 2, 0, FLOE_U8,
                                              floe_shape_unknown(), NULL));
  s = session_new(g);
  fetch_fails(s, "read", FLOE_DATA_LOSS, "offset 4: the file ends before its header (3 bytes) and footer (2 bytes)");
  floe_session_free(s);
  floe_graph_free(g);

  /* Definitions that cannot describe the bytes. */
  g = floe_graph_new();
  int64_t three = 3;
  floe_fixed_length_reader(g, "r", p, 0, 8, 0, 0, FLOE_I32, floe_shape_make(1, &three), NULL);
  ck_assert_msg(strstr(floe_graph_error(g, NULL), "shape [3] of i32 is 12 bytes, but record_bytes is 8"),
                "%s", floe_graph_error(g, NULL));
  floe_graph_free(g);
  g = floe_graph_new();
  floe_fixed_length_reader(g, "r", p, 0, 6, 0, 0, FLOE_F32, floe_shape_unknown(), NULL);
  ck_assert(strstr(floe_graph_error(g, NULL), "record_bytes 6 is not a whole number of f32"));
  floe_graph_free(g);
}
END_TEST

/* ---- IDX ---- */

/* images u8 [n, 2, 3] with pixel (i, j) = 10 * i + j, labels u8 [n] = i; the labels file
 * gzip-compressed. Returns "images;labels" paths separately. */
static void write_pair(int n, const char **images, const char **labels, const char *tag) {
  uint8_t *px = malloc((size_t)n * 6), *lb = malloc((size_t)n);
  for (int i = 0; i < n; i++) {
    for (int j = 0; j < 6; j++) px[i * 6 + j] = (uint8_t)(10 * i + j);
    lb[i] = (uint8_t)i;
  }
  char a[64], b[64];
  snprintf(a, sizeof a, "%s-images-idx3-ubyte", tag);
  snprintf(b, sizeof b, "%s-labels-idx1-ubyte.gz", tag);
  uint32_t di[3] = {(uint32_t)n, 2, 3}, dl[1] = {(uint32_t)n};
  *images = write_idx(a, 0x08, 1, 3, di, px, 0);
  *labels = write_idx(b, 0x08, 1, 1, dl, lb, 1);
  free(px);
  free(lb);
}

START_TEST(idx_items_of_every_dtype) {
  int32_t iv[6] = {-5, 1 << 20, 7, -1, 0, 123456789};
  float fv[4] = {1.5f, -2.25f, 1e-30f, 3.0f};
  double dv[2] = {-0.125, 1e300};
  int8_t cv[3] = {-128, 0, 127};
  uint32_t d23[2] = {2, 3}, d41[2] = {4, 1}, d2[1] = {2}, d3[1] = {3};
  const char *pi = write_idx("i32.idx", 0x0C, 4, 2, d23, iv, 0);
  const char *pf = write_idx("f32.idx.gz", 0x0D, 4, 2, d41, fv, 1);
  const char *pd = write_idx("f64.idx", 0x0E, 8, 1, d2, dv, 0);
  const char *pc = write_idx("i8.idx", 0x09, 1, 1, d3, cv, 0);
  FloeGraph *g = floe_graph_new();
  FloeOutput r[4] = {floe_idx_reader(g, "ri", pi, 0, 0, -1, NULL),
                     floe_idx_reader(g, "rf", pf, 0, 0, -1, NULL),
                     floe_idx_reader(g, "rd", pd, 0, 0, -1, NULL),
                     floe_idx_reader(g, "rc", pc, 0, 0, -1, NULL)};
  FloeOutput v;
  floe_reader_read(g, "readi", &r[0], 1, &v);
  ck_assert_int_eq(floe_node_output_dtype(v.node, 1), FLOE_I32); /* from the header */
  FloeShape sh = floe_node_output_shape(v.node, 1);
  ck_assert(sh.rank == 1 && sh.dims[0] == 3);
  floe_reader_read(g, "readf", &r[1], 1, &v);
  floe_reader_read(g, "readd", &r[2], 1, &v);
  floe_reader_read(g, "readc", &r[3], 1, &v);
  FloeSession *s = session_new(g);
  FloeTensor *out[2];
  for (int k = 0; k < 2; k++) {
    fetch_ok(s, "readi", 2, out);
    ck_assert_mem_eq(floe_tensor_data(out[1]), iv + 3 * k, 12);
    floe_tensor_release(out[0]);
    floe_tensor_release(out[1]);
  }
  for (int k = 0; k < 4; k++) {
    fetch_ok(s, "readf", 2, out);
    ck_assert_int_eq(floe_tensor_dim(out[1], 0), 1);
    ck_assert_float_eq(*(float *)floe_tensor_data(out[1]), fv[k]);
    floe_tensor_release(out[0]);
    floe_tensor_release(out[1]);
  }
  for (int k = 0; k < 2; k++) {
    fetch_ok(s, "readd", 2, out);
    ck_assert_int_eq(floe_tensor_rank(out[1]), 0);
    ck_assert_double_eq(*(double *)floe_tensor_data(out[1]), dv[k]);
    floe_tensor_release(out[0]);
    floe_tensor_release(out[1]);
  }
  for (int k = 0; k < 3; k++) {
    fetch_ok(s, "readc", 2, out);
    ck_assert_int_eq(*(int8_t *)floe_tensor_data(out[1]), cv[k]);
    floe_tensor_release(out[0]);
    floe_tensor_release(out[1]);
  }
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

START_TEST(idx_pairs_read_in_step) {
  const char *im, *lb, *im2, *lb2;
  write_pair(5, &im, &lb, "a");
  write_pair(3, &im2, &lb2, "b");
  char ims[700], lbs[700];
  snprintf(ims, sizeof ims, "%s;%s", im, im2);
  snprintf(lbs, sizeof lbs, "%s;%s", lb, lb2);
  FloeGraph *g = floe_graph_new();
  FloeReaderOptions o;
  floe_reader_options_init(&o);
  o.num_epochs = 2;
  FloeOutput r[2] = {floe_idx_reader(g, "images", ims, 0, 0, -1, &o),
                     floe_idx_reader(g, "labels", lbs, 0, 0, -1, &o)};
  FloeOutput v[2];
  floe_reader_read(g, "read", r, 2, v);
  FloeSession *s = session_new(g);
  for (int e = 0; e < 2; e++)
    for (int k = 0; k < 8; k++) {
      FloeTensor *out[3] = {0};
      fetch_ok(s, "read", 3, out);
      int item = k < 5 ? k : k - 5; /* the second files start again at 0 */
      ck_assert_int_eq(key_of(out[0]), k);
      const uint8_t *px = floe_tensor_data(out[1]);
      ck_assert_int_eq(floe_tensor_rank(out[1]), 2);
      for (int j = 0; j < 6; j++) ck_assert_int_eq(px[j], 10 * item + j);
      ck_assert_int_eq(*(uint8_t *)floe_tensor_data(out[2]), item);
      for (int i = 0; i < 3; i++) floe_tensor_release(out[i]);
    }
  fetch_fails(s, "read", FLOE_OUT_OF_RANGE, "reader 'images' has read every record of its 2 files (2 epochs)");
  floe_session_free(s);
  floe_graph_free(g);

  /* Out of step: different record counts, different shuffles, a reader twice. */
  g = floe_graph_new();
  FloeOutput a[2] = {floe_idx_reader(g, "images", im, 0, 0, -1, NULL),
                     floe_idx_reader(g, "labels", lb, 0, 0, 4, NULL)};
  floe_reader_read(g, "read", a, 2, v);
  FloeOutput sh[2] = {floe_idx_reader(g, "si", im, 1, 1, -1, NULL),
                      floe_idx_reader(g, "sl", lb, 1, 2, -1, NULL)};
  floe_reader_read(g, "read_sh", sh, 2, v);
  FloeOutput twice[2] = {a[0], a[0]};
  floe_reader_read(g, "read_twice", twice, 2, v);
  s = session_new(g);
  for (int k = 0; k < 4; k++) {
    FloeTensor *out[3] = {0};
    fetch_ok(s, "read", 3, out);
    for (int i = 0; i < 3; i++) floe_tensor_release(out[i]);
  }
  fetch_fails(s, "read", FLOE_INVALID_ARGUMENT, "1 of the 2 readers ran out of records before the others");
  /* Two permutations may agree on a first record or two; not on all five. */
  FloeStatus *st = floe_status_new();
  const char *rs = "read_sh:0";
  floe_code rc = FLOE_OK;
  for (int k = 0; k < 5 && rc == FLOE_OK; k++) {
    FloeTensor *out = NULL;
    rc = floe_session_run(s, NULL, 0, &rs, 1, NULL, 0, &out, st);
    floe_tensor_release(out);
  }
  ck_assert_int_eq(rc, FLOE_INVALID_ARGUMENT);
  ck_assert_msg(strstr(floe_status_message(st), "readers 'si' and 'sl' are out of step: their "
                       "records have keys"), "%s", floe_status_message(st));
  floe_status_free(st);
  fetch_fails(s, "read_twice", FLOE_INVALID_ARGUMENT, "reader 'images' is given twice");
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* A shuffled IDX reader visits each epoch in floe_batcher's order for the same seed. */
START_TEST(idx_shuffle_matches_the_batcher) {
  const char *im, *lb;
  enum { N = 23 };
  write_pair(N, &im, &lb, "s");
  FloeStatus *st = floe_status_new();
  FloeDataset *d = floe_idx_load(im, lb, st);
  ck_assert_msg(d != NULL, "%s", floe_status_message(st));
  FloeBatcher *bt = floe_batcher_new(d, 1, 1, 77, 0, 0, st);
  FloeGraph *g = floe_graph_new();
  FloeReaderOptions o;
  floe_reader_options_init(&o);
  o.num_epochs = 3;
  FloeOutput r[2] = {floe_idx_reader(g, "images", im, 1, 77, -1, &o),
                     floe_idx_reader(g, "labels", lb, 1, 77, -1, &o)};
  FloeOutput v[2];
  floe_reader_read(g, "read", r, 2, v);
  FloeSession *s = session_new(g);
  int moved = 0;
  for (int e = 0; e < 3; e++) {
    floe_batcher_start_epoch(bt, e, 0);
    for (int k = 0; k < N; k++) {
      FloeTensor *bi, *bl, *out[3] = {0};
      ck_assert_int_eq(floe_batcher_next(bt, &bi, &bl, st), 1);
      fetch_ok(s, "read", 3, out);
      int64_t want = *(int64_t *)floe_tensor_data(bl);
      ck_assert_int_eq(*(uint8_t *)floe_tensor_data(out[2]), want);
      ck_assert_int_eq(key_of(out[0]), want); /* the key is the record's own index */
      const uint8_t *px = floe_tensor_data(out[1]);
      const float *bpx = floe_tensor_data(bi);
      for (int j = 0; j < 6; j++) ck_assert_float_eq(bpx[j], (float)px[j] / 255.0f);
      moved += want != k;
      floe_tensor_release(bi);
      floe_tensor_release(bl);
      for (int i = 0; i < 3; i++) floe_tensor_release(out[i]);
    }
  }
  ck_assert_int_gt(moved, N); /* really shuffled */
  fetch_fails(s, "read", FLOE_OUT_OF_RANGE, "(3 epochs)");
  floe_session_free(s);
  floe_graph_free(g);
  floe_batcher_free(bt);
  floe_dataset_free(d);
  floe_status_free(st);
}
END_TEST

START_TEST(idx_errors) {
  const char *im, *lb;
  write_pair(4, &im, &lb, "e");
  uint8_t bad_magic[8] = {0, 1, 8, 1, 0, 0, 0, 0};
  uint8_t i16[8] = {0, 0, 0x0B, 1, 0, 0, 0, 0};
  uint8_t trunc[4 + 4 + 3] = {0, 0, 8, 1, 0, 0, 0, 5, 1, 2, 3};
  uint8_t short_hdr[6] = {0, 0, 8, 2, 0, 0};
  uint32_t d27[3] = {1, 2, 7};
  uint8_t seven[14] = {0};
  const char *pm = write_file("magic.idx", bad_magic, sizeof bad_magic);
  const char *pi16 = write_file("i16.idx", i16, sizeof i16);
  const char *pt = write_file("trunc.idx", trunc, sizeof trunc);
  const char *ph = write_file("hdr.idx", short_hdr, sizeof short_hdr);
  const char *p7 = write_idx("seven.idx", 0x08, 1, 3, d27, seven, 0);
  char mixed[700];
  snprintf(mixed, sizeof mixed, "%s;%s", im, p7);
  struct {
    const char *files;
    floe_code code;
    const char *frag;
  } cases[] = {
      {pm, FLOE_INVALID_ARGUMENT, "magic.idx: offset 0: bad IDX magic 00 01 08 01"},
      {pi16, FLOE_INVALID_ARGUMENT, "0B i16 is not supported"},
      {pt, FLOE_DATA_LOSS, "trunc.idx: truncated at offset 11: the header declares 5 bytes of u8 items"},
      {ph, FLOE_DATA_LOSS, "hdr.idx: truncated at offset 6: the header has 2 dims"},
      {mixed, FLOE_INVALID_ARGUMENT, "holds u8 [2,7] items but"},
      {"/nonexistent/x.idx", FLOE_NOT_FOUND, "cannot open /nonexistent/x.idx"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    /* Built by hand: the builder would read the first file's header itself. */
    FloeGraph *g = floe_graph_new();
    FloeOutput r = floe_idx_reader(g, "r", cases[i].files, 0, 0, -1, NULL);
    FloeNodeBuilder *b = floe_node_begin(g, "ReaderRead", "read");
    floe_node_add_input_list(b, &r, 1);
    floe_node_set_attr_type_list(b, "dtypes", (FloeDType[]){FLOE_U8}, 1);
    floe_node_finish(b);
    FloeSession *s = session_new(g);
    fetch_fails(s, "read", cases[i].code, cases[i].frag);
    floe_session_free(s);
    floe_graph_free(g);
  }
  /* The builder reports an unreadable first header while building. */
  FloeGraph *g = floe_graph_new();
  FloeOutput r = floe_idx_reader(g, "r", pm, 0, 0, -1, NULL);
  one_reader_read(g, r);
  ck_assert_msg(strstr(floe_graph_error(g, NULL), "the records of IDX reader 'r' take their type "
                       "from its first file"), "%s", floe_graph_error(g, NULL));
  floe_graph_free(g);
  /* A record of another dtype than the node says. */
  g = floe_graph_new();
  r = floe_idx_reader(g, "r", im, 0, 0, -1, NULL);
  FloeNodeBuilder *b = floe_node_begin(g, "ReaderRead", "read");
  floe_node_add_input_list(b, &r, 1);
  floe_node_set_attr_type_list(b, "dtypes", (FloeDType[]){FLOE_F32}, 1);
  floe_node_finish(b);
  FloeSession *s = session_new(g);
  fetch_fails(s, "read", FLOE_INVALID_ARGUMENT, "reader 'r' read a u8 [2,3] record; this node expects f32");
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* ---- ReaderReadUpTo, ReaderSeek, sharing ---- */

START_TEST(read_up_to_and_seek) {
  const char *im, *lb;
  write_pair(5, &im, &lb, "u");
  FloeGraph *g = floe_graph_new();
  FloeReaderOptions o;
  floe_reader_options_init(&o);
  o.num_epochs = 2;
  FloeOutput r[2] = {floe_idx_reader(g, "images", im, 1, 9, -1, &o),
                     floe_idx_reader(g, "labels", lb, 1, 9, -1, &o)};
  FloeOutput v[2];
  FloeTensor *three = floe_tensor_scalar_i64(3, NULL);
  FloeOutput n = floe_const(g, "three", three);
  floe_tensor_release(three);
  FloeOutput keys = floe_reader_read_up_to(g, "upto", r, 2, n, v);
  FloeShape vs = floe_node_output_shape(keys.node, 1);
  ck_assert(vs.rank == 3 && vs.dims[0] == -1 && vs.dims[1] == 2 && vs.dims[2] == 3);
  FloeTensor *ep = floe_tensor_scalar_i64(1, NULL), *rec = floe_tensor_scalar_i64(2, NULL);
  FloeOutput e = floe_placeholder(g, "epoch", FLOE_I64, floe_shape_scalar());
  FloeOutput k = floe_placeholder(g, "record", FLOE_I64, floe_shape_scalar());
  floe_reader_seek(g, "seek", r, 2, e, k);
  FloeSession *s = session_new(g);
  /* Epoch 0 in chunks of 3, 2; epoch 1 continues across the boundary: 3, 2; then the end. */
  uint32_t order[2][5];
  floe__idx_permutation(9, 0, 5, order[0]);
  floe__idx_permutation(9, 1, 5, order[1]);
  int sizes[4] = {3, 3, 3, 1}, pos = 0;
  for (int c = 0; c < 4; c++) {
    FloeTensor *out[3] = {0};
    fetch_ok(s, "upto", 3, out);
    ck_assert_int_eq(floe_tensor_dim(out[0], 0), sizes[c]);
    ck_assert_int_eq(floe_tensor_dim(out[1], 0), sizes[c]);
    for (int i = 0; i < sizes[c]; i++, pos++) {
      int want = (int)order[pos / 5][pos % 5];
      ck_assert_int_eq(((int64_t *)floe_tensor_data(out[0]))[i], want);
      ck_assert_int_eq(((uint8_t *)floe_tensor_data(out[1]))[i * 6 + 4], 10 * want + 4);
      ck_assert_int_eq(((uint8_t *)floe_tensor_data(out[2]))[i], want);
    }
    for (int i = 0; i < 3; i++) floe_tensor_release(out[i]);
  }
  fetch_fails(s, "upto", FLOE_OUT_OF_RANGE, "has read every record");
  /* Seek back to record 2 of epoch 1. */
  FloeFeed f[2] = {{"epoch", ep}, {"record", rec}};
  const char *target = "seek";
  FloeStatus *st = floe_status_new();
  ck_assert_msg(floe_session_run(s, f, 2, NULL, 0, &target, 1, NULL, st) == FLOE_OK, "%s",
                floe_status_message(st));
  FloeTensor *out[3] = {0};
  fetch_ok(s, "upto", 3, out);
  ck_assert_int_eq(floe_tensor_dim(out[0], 0), 3);
  for (int i = 0; i < 3; i++)
    ck_assert_int_eq(((int64_t *)floe_tensor_data(out[0]))[i], order[1][2 + i]);
  for (int i = 0; i < 3; i++) floe_tensor_release(out[i]);
  /* Past the end of an epoch: refused. */
  FloeTensor *far = floe_tensor_scalar_i64(6, NULL);
  f[1].value = far;
  ck_assert_int_eq(floe_session_run(s, f, 2, NULL, 0, &target, 1, NULL, st), FLOE_OUT_OF_RANGE);
  ck_assert(strstr(floe_status_message(st), "cannot seek to record 6 of an epoch of 5"));
  floe_tensor_release(far);
  floe_tensor_release(ep);
  floe_tensor_release(rec);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);

  /* Text lines of different lengths cannot be stacked; a stream seeks by reading. */
  const char *txt = write_file("l.txt", "a\nbb\nccc\ndddd\n", 14);
  g = floe_graph_new();
  FloeOutput t = floe_text_line_reader(g, "t", txt, 0, NULL);
  FloeTensor *two = floe_tensor_scalar_i64(2, NULL);
  floe_reader_read_up_to(g, "upto", &t, 1, floe_const(g, "two", two), v);
  floe_tensor_release(two);
  one_reader_read(g, t);
  FloeTensor *zero = floe_tensor_scalar_i64(0, NULL), *third = floe_tensor_scalar_i64(3, NULL);
  floe_reader_seek(g, "seek", &t, 1, floe_const(g, "e0", zero), floe_const(g, "r3", third));
  floe_tensor_release(zero);
  floe_tensor_release(third);
  s = session_new(g);
  fetch_fails(s, "upto", FLOE_INVALID_ARGUMENT, "ReaderReadUpTo stacks records of one shape");
  st = floe_status_new();
  ck_assert_int_eq(floe_session_run(s, NULL, 0, NULL, 0, (const char *[]){"seek"}, 1, NULL, st),
                   FLOE_OK);
  expect_line(s, 3, "dddd");
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* Running out of memory at each allocation in turn: clean errors, no record lost (the IDX
 * path allocates its outputs before it reads), then success. */
START_TEST(allocation_failures) {
  const char *im, *lb;
  write_pair(6, &im, &lb, "m");
  FloeGraph *g = floe_graph_new();
  FloeOutput r[2] = {floe_idx_reader(g, "images", im, 0, 0, -1, NULL),
                     floe_idx_reader(g, "labels", lb, 0, 0, -1, NULL)};
  FloeOutput v[2];
  FloeTensor *three = floe_tensor_scalar_i64(3, NULL);
  floe_reader_read_up_to(g, "upto", r, 2, floe_const(g, "three", three), v);
  floe_tensor_release(three);
  FloeSession *s = session_new(g);
  const char *f[3] = {"upto:0", "upto:1", "upto:2"};
  FloeStatus *st = floe_status_new();
  floe_code rc = FLOE_NO_MEMORY;
  long n;
  FloeTensor *out[3] = {0};
  for (n = 1; n < 100000 && rc != FLOE_OK; n++) {
    floe_test_fail_alloc_after(n);
    rc = floe_session_run(s, NULL, 0, f, 3, NULL, 0, out, st);
    floe_test_fail_alloc_after(0);
    if (rc != FLOE_OK)
      ck_assert_msg(rc == FLOE_NO_MEMORY || rc == FLOE_RESOURCE_EXHAUSTED, "n=%ld: %s", n,
                    floe_status_message(st));
  }
  ck_assert_int_eq(rc, FLOE_OK);
  ck_assert_int_gt(n, 2);
  for (int i = 0; i < 3; i++) {
    ck_assert_int_eq(((int64_t *)floe_tensor_data(out[0]))[i], i);
    ck_assert_int_eq(((uint8_t *)floe_tensor_data(out[2]))[i], i);
  }
  for (int i = 0; i < 3; i++) floe_tensor_release(out[i]);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

typedef struct PairThread {
  pthread_t th;
  FloeSession *s;
  int64_t keys[64];
  int n;
  int bad;
} PairThread;

static void *pair_main(void *arg) {
  PairThread *p = arg;
  FloeStatus *st = floe_status_new();
  const char *f[3] = {"read:0", "read:1", "read:2"};
  for (;;) {
    FloeTensor *out[3] = {0};
    if (floe_session_run(p->s, NULL, 0, f, 3, NULL, 0, out, st) != FLOE_OK) break;
    int64_t k = key_of(out[0]);
    const uint8_t *px = floe_tensor_data(out[1]);
    if (*(uint8_t *)floe_tensor_data(out[2]) != k || px[0] != (uint8_t)(10 * k)) p->bad++;
    if (p->n < 64) p->keys[p->n++] = k;
    for (int i = 0; i < 3; i++) floe_tensor_release(out[i]);
  }
  if (floe_status_code(st) != FLOE_OUT_OF_RANGE) p->bad += 1000;
  floe_status_free(st);
  return NULL;
}

/* Four threads reading one pair of shared readers: every pair matches, every record comes
 * once; and the readers keep their position across sessions' runs of one session. */
START_TEST(concurrent_reads_stay_paired) {
  const char *im, *lb;
  write_pair(25, &im, &lb, "c");
  FloeGraph *g = floe_graph_new();
  FloeOutput r[2] = {floe_idx_reader(g, "images", im, 1, 5, -1, NULL),
                     floe_idx_reader(g, "labels", lb, 1, 5, -1, NULL)};
  FloeOutput v[2];
  floe_reader_read(g, "read", r, 2, v);
  FloeSession *s = session_new(g);
  PairThread p[4];
  for (int i = 0; i < 4; i++) {
    memset(&p[i], 0, sizeof p[i]);
    p[i].s = s;
    ck_assert_int_eq(pthread_create(&p[i].th, NULL, pair_main, &p[i]), 0);
  }
  int seen[25] = {0};
  for (int i = 0; i < 4; i++) {
    pthread_join(p[i].th, NULL);
    ck_assert_int_eq(p[i].bad, 0);
    for (int j = 0; j < p[i].n; j++) seen[p[i].keys[j]]++;
  }
  for (int k = 0; k < 25; k++) ck_assert_int_eq(seen[k], 1);
  /* A closed session's readers refuse to read. */
  floe__resources_close_all(floe__session_resources(s));
  fetch_fails(s, "read", FLOE_CANCELLED, "was shut down");
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("reader");
  TCase *tc = tcase_create("text");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, text_lines_plain_and_gzip_over_epochs);
  tcase_add_test(tc, text_errors_and_empty_files);
  suite_add_tcase(s, tc);
  tc = tcase_create("fixed");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, fixed_length_records);
  tcase_add_test(tc, fixed_length_windows_and_errors);
  suite_add_tcase(s, tc);
  tc = tcase_create("idx");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, idx_items_of_every_dtype);
  tcase_add_test(tc, idx_pairs_read_in_step);
  tcase_add_test(tc, idx_shuffle_matches_the_batcher);
  tcase_add_test(tc, idx_errors);
  tcase_add_test(tc, read_up_to_and_seek);
  tcase_add_test(tc, concurrent_reads_stay_paired);
  tcase_add_test(tc, allocation_failures);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
