/* SPDX-License-Identifier: Apache-2.0 */
/* test_base.c - status and the errno mapping of file errors, dtypes and halves, tensors and
 * views, .npy files, attributes. */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core.h"

static const char *tmp_path(const char *name) {
  static char buf[256];
  snprintf(buf, sizeof buf, "/tmp/floe-test-%d-%s", (int)getpid(), name);
  return buf;
}

START_TEST(status_codes_and_messages) {
  FloeStatus *s = floe_status_new();
  ck_assert_int_eq(floe_status_code(s), FLOE_OK);
  ck_assert_str_eq(floe_status_message(s), "");
  ck_assert_int_eq(floe_status_set(s, FLOE_NOT_FOUND, "node '%s' missing", "x"), FLOE_NOT_FOUND);
  ck_assert_str_eq(floe_status_message(s), "node 'x' missing");
  floe__status_prefix(s, "while running %d", 3);
  ck_assert_str_eq(floe_status_message(s), "while running 3: node 'x' missing");
  ck_assert_str_eq(floe_code_name(FLOE_INVALID_ARGUMENT), "INVALID_ARGUMENT");
  ck_assert_str_eq(floe_code_message(FLOE_NO_MEMORY), "out of memory");
  FloeStatus *c = floe_status_new();
  ck_assert_int_eq(floe__status_copy(c, s), FLOE_NOT_FOUND);
  ck_assert_str_eq(floe_status_message(c), floe_status_message(s));
  floe_status_clear(s);
  ck_assert_int_eq(floe_status_code(s), FLOE_OK);
  floe_status_free(s);
  floe_status_free(c);
  ck_assert_int_eq(floe_status_set(NULL, FLOE_ABORTED, "x"), FLOE_ABORTED);
}
END_TEST

START_TEST(status_from_errno) {
  static const struct {
    int err;
    floe_code code;
  } cases[] = {
      {ENOENT, FLOE_NOT_FOUND},          {EACCES, FLOE_PERMISSION_DENIED},
      {EPERM, FLOE_PERMISSION_DENIED},   {EROFS, FLOE_PERMISSION_DENIED},
      {ENOSPC, FLOE_RESOURCE_EXHAUSTED}, {EDQUOT, FLOE_RESOURCE_EXHAUSTED},
      {EFBIG, FLOE_RESOURCE_EXHAUSTED},  {EMFILE, FLOE_RESOURCE_EXHAUSTED},
      {ENFILE, FLOE_RESOURCE_EXHAUSTED}, {ENOMEM, FLOE_NO_MEMORY},
      {EISDIR, FLOE_INVALID_ARGUMENT},   {ENOTDIR, FLOE_INVALID_ARGUMENT},
      {ENAMETOOLONG, FLOE_INVALID_ARGUMENT}, {ELOOP, FLOE_INVALID_ARGUMENT},
      {EEXIST, FLOE_ALREADY_EXISTS},     {EIO, FLOE_DATA_LOSS},
      {EINTR, FLOE_UNKNOWN},             {0, FLOE_UNKNOWN},
  };
  FloeStatus *st = floe_status_new();
  for (size_t i = 0; i < FLOE__ARRAY_LEN(cases); i++) {
    floe_code rc = floe__status_from_errno(st, cases[i].err, "cannot open %s", "f.npy");
    ck_assert_msg(rc == cases[i].code && floe_status_code(st) == rc, "errno %d: %s, not %s",
                  cases[i].err, floe_code_name(rc), floe_code_name(cases[i].code));
    char want[128];
    snprintf(want, sizeof want, "cannot open f.npy: %s", strerror(cases[i].err));
    ck_assert_str_eq(floe_status_message(st), want);
  }
  ck_assert_int_eq(floe__status_from_errno(NULL, ENOENT, "x"), FLOE_NOT_FOUND);
  floe_status_free(st);
}
END_TEST

/* Every file reader and writer reports one errno with one code: a path through a regular
 * file (ENOTDIR) is an invalid argument, a missing file is not found. */
START_TEST(file_errors_agree) {
  FloeStatus *st = floe_status_new();
  char file[256], under[300], missing[300];
  snprintf(file, sizeof file, "%s", tmp_path("plain"));
  snprintf(under, sizeof under, "%s/x", file);
  snprintf(missing, sizeof missing, "%s", tmp_path("missing"));
  FILE *f = fopen(file, "w");
  ck_assert_ptr_nonnull(f);
  fclose(f);
  FloeTensor *t = floe_tensor_scalar_f32(1.0f, st);
  FloeGraph *g = floe_graph_new();
  const struct {
    const char *path;
    int err;
    floe_code code;
  } paths[] = {{under, ENOTDIR, FLOE_INVALID_ARGUMENT}, {missing, ENOENT, FLOE_NOT_FOUND}};
  for (size_t i = 0; i < FLOE__ARRAY_LEN(paths); i++) {
    const char *p = paths[i].path;
    floe_code want = paths[i].code;
    ck_assert_ptr_null(floe_tensor_load_npy(p, st));
    ck_assert_msg(floe_status_code(st) == want, "load_npy: %s", floe_status_message(st));
    ck_assert_ptr_null(floe_graph_load(p, st));
    ck_assert_msg(floe_status_code(st) == want, "graph_load: %s", floe_status_message(st));
    ck_assert_ptr_null(floe_idx_load(p, p, st));
    ck_assert_msg(floe_status_code(st) == want, "idx_load: %s", floe_status_message(st));
    ck_assert_ptr_nonnull(strstr(floe_status_message(st), strerror(paths[i].err)));
  }
  /* Writers: only the path through a file fails (the missing name is created). */
  ck_assert_int_eq(floe_tensor_save_npy(t, under, st), FLOE_INVALID_ARGUMENT);
  ck_assert_int_eq(floe_graph_save(g, under, st), FLOE_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(floe_status_message(st), strerror(ENOTDIR)));
  floe_graph_free(g);
  floe_tensor_release(t);
  unlink(file);
  floe_status_free(st);
}
END_TEST

/* A .npy path that is not a regular file is refused at once, naming it: a folder used to
 * read as LONG_MAX bytes ("out of memory"), and a FIFO blocked forever in open. */
START_TEST(npy_not_a_regular_file) {
  FloeStatus *st = floe_status_new();
  char dir[256], fifo[256];
  snprintf(dir, sizeof dir, "%s", tmp_path("npydir"));
  snprintf(fifo, sizeof fifo, "%s", tmp_path("npyfifo"));
  ck_assert_int_eq(mkdir(dir, 0700), 0);
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  const char *paths[2] = {dir, fifo};
  for (int i = 0; i < 2; i++) {
    ck_assert_ptr_null(floe_tensor_load_npy(paths[i], st));
    ck_assert_int_eq(floe_status_code(st), FLOE_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(floe_status_message(st), paths[i]));
    ck_assert_ptr_nonnull(strstr(floe_status_message(st), "not a regular file"));
  }
  unlink(fifo);
  rmdir(dir);
  floe_status_free(st);
}
END_TEST

START_TEST(dtype_names_and_sizes) {
  ck_assert_uint_eq(floe_dtype_size(FLOE_F32), 4);
  ck_assert_uint_eq(floe_dtype_size(FLOE_BF16), 2);
  ck_assert_uint_eq(floe_dtype_size(FLOE_BOOL), 1);
  ck_assert_uint_eq(floe_dtype_size((FloeDType)99), 0);
  ck_assert_int_eq(floe_dtype_from_name("float32"), FLOE_F32);
  ck_assert_int_eq(floe_dtype_from_name("I64"), FLOE_I64);
  ck_assert_int_eq(floe_dtype_from_name("bfloat16"), FLOE_BF16);
  ck_assert_int_eq(floe_dtype_from_name("complex64"), FLOE_DTYPE_INVALID);
  char buf[64];
  ck_assert_str_eq(floe__dtype_mask_str(FLOE_DTYPE_BIT(FLOE_F32) | FLOE_DTYPE_BIT(FLOE_I64), buf,
                                        sizeof buf),
                   "{f32,i64}");
}
END_TEST

/* Reference: exact rounding of a double to the nearest f16 value (ties to even) by search. */
static double f16_value(uint16_t h) { return floe_f16_to_f32(h); }

START_TEST(half_conversions) {
  /* Every finite f16 round-trips exactly through f32. */
  for (uint32_t h = 0; h < 0x10000; h++) {
    uint16_t x = (uint16_t)h;
    if ((x & 0x7c00) == 0x7c00 && (x & 0x3ff)) continue; /* NaN */
    ck_assert_uint_eq(floe_f32_to_f16(floe_f16_to_f32(x)), x);
  }
  ck_assert_double_eq(f16_value(0x3c00), 1.0);
  ck_assert_double_eq(f16_value(0x7bff), 65504.0);
  ck_assert_double_eq(f16_value(0x0001), ldexp(1.0, -24));
  /* Ties to even: 1 + 2^-11 is halfway between 1 and 1+2^-10. */
  ck_assert_uint_eq(floe_f32_to_f16(1.0f + ldexpf(1.0f, -11)), 0x3c00);
  ck_assert_uint_eq(floe_f32_to_f16(1.0f + 3 * ldexpf(1.0f, -11)), 0x3c02);
  ck_assert_uint_eq(floe_f32_to_f16(65520.0f), 0x7c00); /* rounds to inf */
  ck_assert_uint_eq(floe_f32_to_f16(65519.0f), 0x7bff);
  ck_assert(isnan(floe_f16_to_f32(floe_f32_to_f16(NAN))));
  ck_assert_uint_eq(floe_f32_to_f16(-0.0f), 0x8000);
  /* bf16 */
  ck_assert_uint_eq(floe_f32_to_bf16(1.0f), 0x3f80);
  ck_assert_float_eq(floe_bf16_to_f32(0x3f80), 1.0f);
  ck_assert_uint_eq(floe_f32_to_bf16(1.0f + ldexpf(1.0f, -8)), 0x3f80); /* tie -> even */
  ck_assert_uint_eq(floe_f32_to_bf16(1.0f + 3 * ldexpf(1.0f, -8)), 0x3f82);
  ck_assert(isnan(floe_bf16_to_f32(floe_f32_to_bf16(NAN))));
  for (uint32_t b = 0; b < 0x10000; b += 7) {
    uint16_t x = (uint16_t)b;
    if ((x & 0x7f80) == 0x7f80 && (x & 0x7f)) continue;
    ck_assert_uint_eq(floe_f32_to_bf16(floe_bf16_to_f32(x)), x);
  }
}
END_TEST

START_TEST(tensor_basics_and_views) {
  FloeStatus *st = floe_status_new();
  int64_t dims[] = {2, 3};
  float data[] = {1, 2, 3, 4, 5, 6};
  FloeTensor *t = floe_tensor_from_data(FLOE_F32, 2, dims, data, sizeof data, st);
  ck_assert_ptr_nonnull(t);
  ck_assert_int_eq(floe_tensor_num_elements(t), 6);
  ck_assert_uint_eq(floe_tensor_nbytes(t), 24);
  ck_assert_str_eq(floe_tensor_device_name(t), "host");
  int64_t vd[] = {3, 2};
  FloeTensor *v = floe_tensor_reshape(t, 2, vd, st);
  ck_assert_ptr_nonnull(v);
  ck_assert_ptr_eq(floe_tensor_data(v), floe_tensor_data(t)); /* no copy */
  int64_t bad[] = {4, 2};
  ck_assert_ptr_null(floe_tensor_reshape(t, 2, bad, st));
  ck_assert_int_eq(floe_status_code(st), FLOE_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(floe_status_message(st), "[2,3]"));
  ck_assert_ptr_nonnull(strstr(floe_status_message(st), "[4,2]"));
  floe_tensor_release(t); /* the view keeps the buffer alive */
  ck_assert_float_eq(((float *)floe_tensor_data(v))[5], 6.0f);
  FloeTensor *c = floe_tensor_copy(v, st);
  ck_assert_ptr_ne(floe_tensor_data(c), floe_tensor_data(v));
  ck_assert(floe__tensor_equal(c, v));
  floe_tensor_release(v);
  floe_tensor_release(c);
  /* Bad shapes. */
  int64_t neg[] = {2, -1};
  ck_assert_ptr_null(floe_tensor_new(FLOE_F32, 2, neg, st));
  ck_assert_ptr_nonnull(strstr(floe_status_message(st), "negative"));
  ck_assert_ptr_null(floe_tensor_new(FLOE_F32, 9, dims, st));
  int64_t huge[] = {INT64_MAX / 2, 4};
  ck_assert_ptr_null(floe_tensor_new(FLOE_F32, 2, huge, st));
  ck_assert_ptr_null(floe_tensor_from_data(FLOE_F32, 2, dims, data, 20, st));
  ck_assert_ptr_nonnull(strstr(floe_status_message(st), "20 bytes"));
  /* Empty tensors. */
  int64_t empty[] = {0, 5};
  FloeTensor *e = floe_tensor_new(FLOE_F64, 2, empty, st);
  ck_assert_ptr_nonnull(e);
  ck_assert_int_eq(floe_tensor_num_elements(e), 0);
  ck_assert_ptr_null(floe_tensor_data(e));
  floe_tensor_release(e);
  FloeTensor *s = floe_tensor_scalar_i64(-7, st);
  ck_assert_int_eq(floe_tensor_rank(s), 0);
  ck_assert_int_eq(*(int64_t *)floe_tensor_data(s), -7);
  floe_tensor_release(s);
  floe_tensor_release(NULL);
  floe_status_free(st);
}
END_TEST

START_TEST(shape_strings) {
  char buf[64];
  int64_t d[] = {2, -1, 3};
  FloeShape s = floe_shape_make(3, d);
  ck_assert_str_eq(floe_shape_str(&s, buf, sizeof buf), "[2,?,3]");
  FloeShape u = floe_shape_unknown();
  ck_assert_str_eq(floe_shape_str(&u, buf, sizeof buf), "<unknown>");
  FloeShape sc = floe_shape_scalar();
  ck_assert_str_eq(floe_shape_str(&sc, buf, sizeof buf), "[]");
}
END_TEST

START_TEST(npy_round_trip_every_dtype) {
  FloeStatus *st = floe_status_new();
  const FloeDType dts[] = {FLOE_F32, FLOE_F64, FLOE_F16, FLOE_I8, FLOE_U8, FLOE_I32, FLOE_I64,
                           FLOE_BOOL};
  int64_t dims[] = {3, 1, 4};
  for (size_t k = 0; k < FLOE__ARRAY_LEN(dts); k++) {
    FloeTensor *t = floe_tensor_new(dts[k], 3, dims, st);
    unsigned char *p = floe_tensor_data(t);
    for (size_t i = 0; i < floe_tensor_nbytes(t); i++)
      p[i] = dts[k] == FLOE_BOOL ? (unsigned char)(i % 2) : (unsigned char)(i * 37 + k);
    const char *path = tmp_path("rt.npy");
    ck_assert_int_eq(floe_tensor_save_npy(t, path, st), FLOE_OK);
    FloeTensor *r = floe_tensor_load_npy(path, st);
    ck_assert_msg(r != NULL, "%s", floe_status_message(st));
    ck_assert(floe__tensor_equal(t, r));
    floe_tensor_release(t);
    floe_tensor_release(r);
    unlink(path);
  }
  /* bf16 has no numpy dtype: a clear error. */
  FloeTensor *b = floe_tensor_new(FLOE_BF16, 1, dims, st);
  ck_assert_int_eq(floe_tensor_save_npy(b, tmp_path("b.npy"), st), FLOE_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(floe_status_message(st), "bf16"));
  floe_tensor_release(b);
  /* Scalars and 1-D shapes use numpy's tuple syntax. */
  FloeTensor *s = floe_tensor_scalar_f32(2.5f, st);
  void *buf;
  size_t len;
  ck_assert_int_eq(floe_tensor_serialize_npy(s, &buf, &len, st), FLOE_OK);
  ck_assert_uint_eq(len % 64, 4);
  ck_assert_ptr_nonnull(memmem(buf, len, "'shape': ()", 11));
  FloeTensor *s2 = floe_tensor_parse_npy(buf, len, "mem", st);
  ck_assert(floe__tensor_equal(s, s2));
  free(buf);
  floe_tensor_release(s);
  floe_tensor_release(s2);
  floe_status_free(st);
}
END_TEST

/* Builds a v1 .npy buffer with the given header dict and data. */
static size_t make_npy(unsigned char *out, const char *dict, const void *data, size_t n) {
  size_t hlen = strlen(dict);
  memcpy(out, "\x93NUMPY\x01\x00", 8);
  out[8] = (unsigned char)(hlen & 0xff);
  out[9] = (unsigned char)(hlen >> 8);
  memcpy(out + 10, dict, hlen);
  memcpy(out + 10 + hlen, data, n);
  return 10 + hlen + n;
}

START_TEST(npy_foreign_layouts) {
  FloeStatus *st = floe_status_new();
  unsigned char buf[512];
  /* Fortran order [2,3]: column-major data 1 4 2 5 3 6 is C-order 1 2 3 4 5 6. */
  int32_t fdata[] = {1, 4, 2, 5, 3, 6};
  size_t n = make_npy(buf, "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3), }\n", fdata,
                      sizeof fdata);
  FloeTensor *t = floe_tensor_parse_npy(buf, n, "f.npy", st);
  ck_assert_msg(t != NULL, "%s", floe_status_message(st));
  for (int i = 0; i < 6; i++) ck_assert_int_eq(((int32_t *)floe_tensor_data(t))[i], i + 1);
  floe_tensor_release(t);
  /* Big-endian f8. */
  unsigned char be[8] = {0x40, 0x09, 0x21, 0xfb, 0x54, 0x44, 0x2d, 0x18}; /* pi */
  n = make_npy(buf, "{'descr': '>f8', 'fortran_order': False, 'shape': (1,), }\n", be, 8);
  t = floe_tensor_parse_npy(buf, n, "be.npy", st);
  ck_assert_ptr_nonnull(t);
  ck_assert_double_eq_tol(((double *)floe_tensor_data(t))[0], M_PI, 1e-15);
  floe_tensor_release(t);
  floe_status_free(st);
}
END_TEST

START_TEST(npy_malformed_never_crashes) {
  FloeStatus *st = floe_status_new();
  FloeTensor *good = floe_tensor_new(FLOE_F32, 2, (int64_t[]){4, 5}, st);
  void *buf;
  size_t len;
  ck_assert_int_eq(floe_tensor_serialize_npy(good, &buf, &len, st), FLOE_OK);
  /* Every truncation is an error naming the buffer and an offset. */
  for (size_t cut = 0; cut < len; cut++) {
    FloeTensor *t = floe_tensor_parse_npy(buf, cut, "cut.npy", st);
    ck_assert_msg(t == NULL, "truncated at %zu parsed", cut);
    ck_assert_int_ne(floe_status_code(st), FLOE_OK);
    ck_assert_ptr_nonnull(strstr(floe_status_message(st), "cut.npy"));
    ck_assert_ptr_nonnull(strstr(floe_status_message(st), "offset"));
  }
  /* Byte flips in the header: errors or valid tensors, never a crash. */
  unsigned char *m = malloc(len);
  for (size_t i = 0; i < 128 && i < len; i++) {
    for (int bit = 0; bit < 8; bit++) {
      memcpy(m, buf, len);
      m[i] ^= (unsigned char)(1u << bit);
      FloeTensor *t = floe_tensor_parse_npy(m, len, "flip.npy", st);
      floe_tensor_release(t);
    }
  }
  free(m);
  free(buf);
  floe_tensor_release(good);
  unsigned char b2[256];
  size_t n = make_npy(b2, "{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }\n", "", 0);
  ck_assert_ptr_null(floe_tensor_parse_npy(b2, n, "c.npy", st));
  ck_assert_ptr_nonnull(strstr(floe_status_message(st), "not supported"));
  /* A 4 TB shape in a small file is truncated data, found before anything is allocated
   * (it said "out of memory"); a shape whose byte count overflows likewise. */
  n = make_npy(b2, "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000, 1000000), }\n",
               "abcd", 4);
  ck_assert_ptr_null(floe_tensor_parse_npy(b2, n, "big.npy", st));
  ck_assert_int_eq(floe_status_code(st), FLOE_INVALID_ARGUMENT);
  ck_assert_msg(strstr(floe_status_message(st), "big.npy: offset ") &&
                    strstr(floe_status_message(st), "truncated") &&
                    strstr(floe_status_message(st), "[1000000,1000000]") &&
                    strstr(floe_status_message(st), "4000000000000 bytes, the file has 4 after"),
                "%s", floe_status_message(st));
  n = make_npy(b2,
               "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }\n",
               "", 0);
  ck_assert_ptr_null(floe_tensor_parse_npy(b2, n, "huge.npy", st));
  ck_assert_msg(strstr(floe_status_message(st), "needs more than"), "%s", floe_status_message(st));
  /* fortran_order is True or False, nothing else; the offset is the value's: the dict starts
   * at byte 10 and Maybe at its index 34. */
  n = make_npy(b2, "{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1,), }\n", "abcd", 4);
  ck_assert_ptr_null(floe_tensor_parse_npy(b2, n, "maybe.npy", st));
  ck_assert_msg(strstr(floe_status_message(st), "maybe.npy: offset 44: fortran_order is 'Maybe'"),
                "%s", floe_status_message(st));
  n = make_npy(b2, "{'descr': '<f4', 'fortran_order': Truest, 'shape': (1,), }\n", "abcd", 4);
  ck_assert_ptr_null(floe_tensor_parse_npy(b2, n, "truest.npy", st));
  /* Bools are the bytes 0 and 1. */
  n = make_npy(b2, "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }\n", "\1\0\2", 3);
  ck_assert_ptr_null(floe_tensor_parse_npy(b2, n, "bool.npy", st));
  ck_assert_msg(strstr(floe_status_message(st), "bool element 2 is the byte 0x02"), "%s",
                floe_status_message(st));
  n = make_npy(b2, "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }\n", "\1\0\1", 3);
  FloeTensor *bt = floe_tensor_parse_npy(b2, n, "bool.npy", st);
  ck_assert_msg(bt != NULL, "%s", floe_status_message(st));
  floe_tensor_release(bt);
  ck_assert_ptr_null(floe_tensor_load_npy("/nonexistent/x.npy", st));
  ck_assert_int_eq(floe_status_code(st), FLOE_NOT_FOUND);
  ck_assert_ptr_nonnull(strstr(floe_status_message(st), "/nonexistent/x.npy"));
  floe_status_free(st);
}
END_TEST

START_TEST(attrs_table) {
  FloeStatus *st = floe_status_new();
  FloeAttrs a;
  floe__attrs_init(&a);
  FloeAttrValue v = {.kind = FLOE_ATTR_INT, .u.i = 3};
  ck_assert_int_eq(floe__attrs_set(&a, "n", &v, st), FLOE_OK);
  int64_t list[] = {1, 2, 2, 1};
  FloeAttrValue l = {.kind = FLOE_ATTR_INT_LIST};
  l.u.ilist.v = malloc(sizeof list);
  memcpy(l.u.ilist.v, list, sizeof list);
  l.u.ilist.n = 4;
  ck_assert_int_eq(floe__attrs_set(&a, "strides", &l, st), FLOE_OK);
  ck_assert_ptr_null(l.u.ilist.v); /* ownership moved */
  FloeAttrValue s = {.kind = FLOE_ATTR_STRING, .u.s = floe__strdup("SAME")};
  floe__attrs_set(&a, "padding", &s, st);
  FloeAttrValue t = {.kind = FLOE_ATTR_TENSOR, .u.tensor = floe_tensor_scalar_f32(1.5f, st)};
  floe__attrs_set(&a, "value", &t, st);
  ck_assert_int_eq(floe__attrs_get(&a, "n")->u.i, 3);
  ck_assert_ptr_null(floe__attrs_get(&a, "missing"));
  FloeAttrValue v2 = {.kind = FLOE_ATTR_INT, .u.i = 9};
  floe__attrs_set(&a, "n", &v2, st); /* replaces */
  ck_assert_int_eq(a.n, 4);
  ck_assert_int_eq(floe__attrs_get(&a, "n")->u.i, 9);
  FloeAttrs b;
  ck_assert_int_eq(floe__attrs_copy(&b, &a, st), FLOE_OK);
  for (int i = 0; i < a.n; i++)
    ck_assert(floe__attr_value_equal(&a.values[i], floe__attrs_get(&b, a.names[i])));
  char buf[64];
  ck_assert_str_eq(floe__attr_value_str(floe__attrs_get(&b, "strides"), buf, sizeof buf),
                   "[1,2,2,1]");
  ck_assert_str_eq(floe__attr_value_str(floe__attrs_get(&b, "value"), buf, sizeof buf), "f32[]");
  ck_assert_str_eq(floe__attr_kind_name(FLOE_ATTR_TYPE_LIST), "list(type)");
  floe__attrs_clear(&a);
  floe__attrs_clear(&b);
  floe_status_free(st);
}
END_TEST

START_TEST(alloc_fault_injection) {
  floe_test_fail_alloc_after(2);
  void *a = floe__malloc(8);
  void *b = floe__malloc(8);
  void *c = floe__malloc(8); /* stays failing once triggered */
  ck_assert_ptr_nonnull(a);
  ck_assert_ptr_null(b);
  ck_assert_ptr_null(c);
  ck_assert_int_eq(floe_test_fail_alloc_after(0), 3);
  void *d = floe__malloc(8);
  ck_assert_ptr_nonnull(d);
  floe__free(a);
  floe__free(d);
  FloeStatus *st = floe_status_new();
  floe_test_fail_alloc_after(1);
  ck_assert_ptr_null(floe_tensor_new(FLOE_F32, 1, (int64_t[]){4}, st));
  floe_test_fail_alloc_after(0);
  ck_assert_int_eq(floe_status_code(st), FLOE_NO_MEMORY);
  floe_status_free(st);
}
END_TEST

int main(void) {
  Suite *s = suite_create("base");
  TCase *tc = tcase_create("status");
  tcase_add_test(tc, status_codes_and_messages);
  tcase_add_test(tc, status_from_errno);
  tcase_add_test(tc, file_errors_agree);
  tcase_add_test(tc, npy_not_a_regular_file);
  suite_add_tcase(s, tc);
  tc = tcase_create("dtype");
  tcase_add_test(tc, dtype_names_and_sizes);
  tcase_add_test(tc, half_conversions);
  suite_add_tcase(s, tc);
  tc = tcase_create("tensor");
  tcase_add_test(tc, tensor_basics_and_views);
  tcase_add_test(tc, shape_strings);
  suite_add_tcase(s, tc);
  tc = tcase_create("npy");
  tcase_add_test(tc, npy_round_trip_every_dtype);
  tcase_add_test(tc, npy_foreign_layouts);
  tcase_add_test(tc, npy_malformed_never_crashes);
  suite_add_tcase(s, tc);
  tc = tcase_create("attrs");
  tcase_add_test(tc, attrs_table);
  tcase_add_test(tc, alloc_fault_injection);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
