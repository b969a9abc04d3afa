/* SPDX-License-Identifier: Apache-2.0 */
/* test_graph_io.c - graph files: exact round trips with every attribute kind, hand-built
 * files read per docs/graph-format.md, truncation at every length, random corruption, the
 * CRC, unknown ops, format versions, atomic saves, allocation failures, and DOT output. */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core.h"

/* ---- helpers ---- */

/* Bitwise CRC-32 (IEEE), written independently of the library's table version. */
static uint32_t ref_crc32(const uint8_t *p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void wr32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void fix_crc(uint8_t *buf, size_t len) { wr32(buf + len - 4, ref_crc32(buf, len - 4)); }

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng(void) { /* xorshift64* */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 2685821657736338717ull;
}

static void assert_msg_has(const FloeStatus *st, const char *frag) {
  ck_assert_msg(strstr(floe_status_message(st), frag) != NULL, "message \"%s\" lacks \"%s\"",
                floe_status_message(st), frag);
}

static void serialize_ok(const FloeGraph *g, uint8_t **buf, size_t *len) {
  FloeStatus *st = floe_status_new();
  void *b = NULL;
  ck_assert_msg(floe_graph_serialize(g, &b, len, st) == FLOE_OK, "%s", floe_status_message(st));
  *buf = b;
  floe_status_free(st);
}

static const char *const all_inputs[] = {"x: T", "rest: Tlist"};
static const char *const all_outputs[] = {"y: T", "others: Tlist"};
static const char *const all_attrs[] = {
    "T: type in {all}", "Tlist: list(type)", "i: int", "f: float", "b: bool", "s: string",
    "sh: shape", "t: tensor", "il: list(int)", "fl: list(float)", "tl: list(type)",
    "sl: list(shape)", "opt: int = 7"};

/* A custom op with an attribute of every kind. */
static void register_all_kinds_op(void) {
  ck_assert(floe_op_exists("Const")); /* the standard set is registered first */
  if (floe_op_exists("IoAllKinds")) return;
  FloeOpDef def = {
      .struct_size = sizeof def,
      .name = "IoAllKinds",
      .inputs = all_inputs,
      .num_inputs = 2,
      .outputs = all_outputs,
      .num_outputs = 2,
      .attrs = all_attrs,
      .num_attrs = sizeof all_attrs / sizeof *all_attrs,
  };
  FloeStatus *st = floe_status_new();
  ck_assert_msg(floe__op_register(&def, "test", st) == FLOE_OK, "%s", floe_status_message(st));
  floe_status_free(st);
}

/* A graph with every attribute kind, list inputs, several outputs, control inputs,
 * devices and awkward names. */
static FloeGraph *rich_graph(void) {
  register_all_kinds_op();
  FloeGraph *g = floe_graph_new();
  int64_t d23[2] = {2, 3};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(2, d23));
  FloeOutput u = floe_placeholder(g, "unk \"quoted\" name", FLOE_F64, floe_shape_unknown());
  int64_t dq[2] = {-1, 3};
  FloeOutput q = floe_placeholder(g, "q", FLOE_I64, floe_shape_make(2, dq));
  float wdata[6] = {1.5f, -2.0f, NAN, INFINITY, 0.0f, -0.0f};
  FloeTensor *wt = floe_tensor_from_data(FLOE_F32, 2, d23, wdata, sizeof wdata, NULL);
  FloeOutput w = floe_const(g, "w", wt);
  int64_t i64s[3] = {INT64_MIN, -1, INT64_MAX};
  int64_t d3 = 3;
  FloeTensor *it = floe_tensor_from_data(FLOE_I64, 1, &d3, i64s, sizeof i64s, NULL);
  FloeOutput ic = floe_const(g, "ints", it);
  uint8_t bools[4] = {1, 0, 0, 1};
  int64_t d4 = 4;
  FloeTensor *bt = floe_tensor_from_data(FLOE_BOOL, 1, &d4, bools, sizeof bools, NULL);
  FloeOutput bc = floe_const(g, "bools", bt);
  int64_t d0 = 0;
  FloeTensor *et = floe_tensor_new(FLOE_F16, 1, &d0, NULL);
  FloeOutput ec = floe_const(g, "empty", et);
  FloeOutput add = floe_binary(g, "Add", NULL, x, w);
  FloeTensor *axt = floe_tensor_scalar_i32(0, NULL);
  FloeOutput ax = floe_const(g, "axis", axt);
  floe_tensor_release(axt);
  FloeNodeBuilder *b = floe_node_begin(g, "Concat", "cat");
  FloeOutput vals[3] = {x, add, w};
  floe_node_add_input_list(b, vals, 3);
  floe_node_add_input(b, ax);
  floe_node_set_device(b, "/job:localhost/replica:0/task:0/device:CPU:0");
  FloeNode *cat = floe_node_finish(b);
  b = floe_node_begin(g, "Split", "split");
  floe_node_add_input(b, floe_out(cat, 0));
  floe_node_add_input(b, ax);
  floe_node_set_attr_int(b, "num_split", 2);
  FloeNode *split = floe_node_finish(b);

  b = floe_node_begin(g, "IoAllKinds", "all");
  floe_node_add_input(b, floe_out(split, 1));
  FloeOutput rest[3] = {q, ic, bc};
  floe_node_add_input_list(b, rest, 3);
  floe_node_set_attr_int(b, "i", -123456789012345LL);
  floe_node_set_attr_float(b, "f", -0.1);
  floe_node_set_attr_bool(b, "b", 1);
  floe_node_set_attr_string(b, "s", "h\xc3\xa9llo \"w\"\n");
  int64_t sd[3] = {-1, 0, 7};
  floe_node_set_attr_shape(b, "sh", floe_shape_make(3, sd));
  floe_node_set_attr_tensor(b, "t", wt);
  floe_node_set_attr_int_list(b, "il", (int64_t[]){5, -5, 0}, 3);
  floe_node_set_attr_float_list(b, "fl", (double[]){1e300, -2.5, NAN}, 3);
  floe_node_set_attr_type_list(b, "tl", (FloeDType[]){FLOE_BF16, FLOE_U8}, 2);
  FloeShape sl[4] = {floe_shape_make(2, d23), floe_shape_make(2, dq), floe_shape_unknown(),
                     floe_shape_scalar()};
  floe_node_set_attr_shape_list(b, "sl", sl, 4);
  floe_node_add_control_input(b, u.node);
  floe_node_add_control_input(b, ec.node);
  FloeNode *all = floe_node_finish(b);
  ck_assert_msg(all != NULL, "%s", floe_graph_error(g, NULL));
  ck_assert_int_eq(floe_node_num_outputs(all), 4);

  b = floe_node_begin(g, "IoAllKinds", "empties");
  floe_node_add_input(b, x);
  floe_node_add_input_list(b, NULL, 0);
  floe_node_set_attr_int(b, "i", 0);
  floe_node_set_attr_float(b, "f", 0);
  floe_node_set_attr_bool(b, "b", 0);
  floe_node_set_attr_string(b, "s", "");
  floe_node_set_attr_shape(b, "sh", floe_shape_unknown());
  floe_node_set_attr_tensor(b, "t", et);
  floe_node_set_attr_int_list(b, "il", NULL, 0);
  floe_node_set_attr_float_list(b, "fl", NULL, 0);
  floe_node_set_attr_type_list(b, "tl", NULL, 0);
  floe_node_set_attr_shape_list(b, "sl", NULL, 0);
  ck_assert_ptr_nonnull(floe_node_finish(b));
  floe_unary(g, "Relu", "relu", floe_out(all, 0));
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  floe_tensor_release(wt);
  floe_tensor_release(it);
  floe_tensor_release(bt);
  floe_tensor_release(et);
  return g;
}

/* A small graph whose Const "w" holds 4096 bytes. */
static FloeGraph *small_graph(void) {
  FloeGraph *g = floe_graph_new();
  int64_t d = 1024;
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(1, &d));
  float *v = calloc(1024, sizeof *v);
  for (int i = 0; i < 1024; i++) v[i] = (float)i;
  FloeTensor *t = floe_tensor_from_data(FLOE_F32, 1, &d, v, 4096, NULL);
  free(v);
  FloeOutput w = floe_const(g, "w", t);
  floe_tensor_release(t);
  FloeOutput s = floe_binary(g, "Mul", "s", x, w);
  FloeNodeBuilder *b = floe_node_begin(g, "NoOp", "done");
  floe_node_add_control_input(b, s.node);
  floe_node_finish(b);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  return g;
}

static void assert_graphs_equal(const FloeGraph *a, const FloeGraph *b) {
  ck_assert_int_eq(floe_graph_num_nodes(a), floe_graph_num_nodes(b));
  for (int i = 0; i < a->num_nodes; i++) {
    const FloeNode *x = a->nodes[i], *y = b->nodes[i];
    ck_assert_str_eq(x->name, y->name);
    ck_assert_str_eq(x->op->name, y->op->name);
    ck_assert_str_eq(floe_node_device(x), floe_node_device(y));
    ck_assert_int_eq(x->num_inputs, y->num_inputs);
    for (int k = 0; k < x->num_inputs; k++) {
      ck_assert_int_eq(x->inputs[k].node->id, y->inputs[k].node->id);
      ck_assert_int_eq(x->inputs[k].index, y->inputs[k].index);
      ck_assert_int_eq(x->input_arg[k], y->input_arg[k]);
    }
    ck_assert_int_eq(x->num_control, y->num_control);
    for (int k = 0; k < x->num_control; k++)
      ck_assert_int_eq(x->control[k]->id, y->control[k]->id);
    ck_assert_int_eq(x->attrs.n, y->attrs.n);
    for (int k = 0; k < x->attrs.n; k++) {
      ck_assert_str_eq(x->attrs.names[k], y->attrs.names[k]);
      ck_assert_msg(floe__attr_value_equal(&x->attrs.values[k], &y->attrs.values[k]),
                    "node %s attribute %s differs", x->name, x->attrs.names[k]);
    }
    ck_assert_int_eq(x->num_outputs, y->num_outputs);
    for (int k = 0; k < x->num_outputs; k++) {
      ck_assert_int_eq(x->out_dtypes[k], y->out_dtypes[k]);
      ck_assert_mem_eq(&x->out_shapes[k], &y->out_shapes[k], sizeof(FloeShape));
    }
  }
}

/* ---- round trips ---- */

START_TEST(roundtrip_every_attribute_kind_is_exact) {
  FloeGraph *g = rich_graph();
  uint8_t *b1, *b2;
  size_t n1, n2;
  serialize_ok(g, &b1, &n1);
  ck_assert_mem_eq(b1, "FLOEGRPH", 8);
  ck_assert_uint_eq(rd32(b1 + 8), 0x00010000u);
  ck_assert_uint_eq(rd32(b1 + 12), (uint32_t)floe_graph_num_nodes(g));
  ck_assert_uint_eq(rd32(b1 + n1 - 4), ref_crc32(b1, n1 - 4));
  FloeStatus *st = floe_status_new();
  FloeGraph *h = floe_graph_deserialize(b1, n1, "mem", st);
  ck_assert_msg(h != NULL, "%s", floe_status_message(st));
  assert_graphs_equal(g, h);
  /* NaN payloads, -0.0 and extreme integers survive bit for bit. */
  const FloeNode *all = floe_graph_find(h, "all");
  const FloeAttrValue *fl = floe__attrs_get(&all->attrs, "fl");
  ck_assert(isnan(fl->u.flist.v[2]));
  ck_assert_int_eq(floe__attrs_get(&all->attrs, "i")->u.i, -123456789012345LL);
  ck_assert_str_eq(floe__attrs_get(&all->attrs, "s")->u.s, "h\xc3\xa9llo \"w\"\n");
  ck_assert_int_eq(floe__attrs_get(&all->attrs, "opt")->u.i, 7);
  serialize_ok(h, &b2, &n2);
  ck_assert_uint_eq(n1, n2);
  ck_assert_mem_eq(b1, b2, n1);
  /* A loaded graph keeps growing like a built one. */
  ck_assert_ptr_nonnull(floe_unary(h, "Relu", NULL, floe_out(floe_graph_find(h, "x"), 0)).node);
  ck_assert_str_eq(floe_node_name(floe_graph_node(h, floe_graph_num_nodes(h) - 1)), "Relu");
  free(b1);
  free(b2);
  floe_graph_free(h);
  floe_graph_free(g);

  /* The empty graph: header, count 0, CRC. */
  FloeGraph *e = floe_graph_new();
  serialize_ok(e, &b1, &n1);
  ck_assert_uint_eq(n1, 20);
  FloeGraph *e2 = floe_graph_deserialize(b1, n1, NULL, st);
  ck_assert_ptr_nonnull(e2);
  ck_assert_int_eq(floe_graph_num_nodes(e2), 0);
  free(b1);
  floe_graph_free(e2);
  floe_graph_free(e);
  floe_status_free(st);
}
END_TEST

START_TEST(save_and_load_files) {
  char dir[] = "/tmp/floe_graph_io_XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char path[256];
  snprintf(path, sizeof path, "%s/g.floe", dir);
  FloeGraph *g = rich_graph();
  FloeStatus *st = floe_status_new();
  ck_assert_msg(floe_graph_save(g, path, st) == FLOE_OK, "%s", floe_status_message(st));
  /* Saving again replaces the file atomically. */
  ck_assert_int_eq(floe_graph_save(g, path, st), FLOE_OK);
  FloeGraph *h = floe_graph_load(path, st);
  ck_assert_msg(h != NULL, "%s", floe_status_message(st));
  assert_graphs_equal(g, h);
  uint8_t *b1, *b2;
  size_t n1, n2;
  serialize_ok(g, &b1, &n1);
  serialize_ok(h, &b2, &n2);
  ck_assert_uint_eq(n1, n2);
  ck_assert_mem_eq(b1, b2, n1);
  struct stat sb;
  ck_assert_int_eq(stat(path, &sb), 0);
  ck_assert_uint_eq((uint64_t)sb.st_size, n1);
  /* Only the file itself is left: no temporary files. */
  DIR *d = opendir(dir);
  int entries = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
      entries++;
      ck_assert_str_eq(e->d_name, "g.floe");
    }
  closedir(d);
  ck_assert_int_eq(entries, 1);

  /* Truncating the file on disk: the error names the path and the offset. */
  ck_assert_int_eq(truncate(path, (off_t)(n1 - 10)), 0);
  ck_assert_ptr_null(floe_graph_load(path, st));
  ck_assert_int_eq(floe_status_code(st), FLOE_DATA_LOSS);
  assert_msg_has(st, path);
  assert_msg_has(st, ": offset ");

  char missing[300];
  snprintf(missing, sizeof missing, "%s/missing.floe", dir);
  ck_assert_ptr_null(floe_graph_load(missing, st));
  ck_assert_int_eq(floe_status_code(st), FLOE_NOT_FOUND);
  assert_msg_has(st, missing);
  ck_assert_ptr_null(floe_graph_load(dir, st));
  assert_msg_has(st, dir);
  char nodir[300];
  snprintf(nodir, sizeof nodir, "%s/no/such/dir/g.floe", dir);
  ck_assert_int_eq(floe_graph_save(g, nodir, st), FLOE_NOT_FOUND);
  assert_msg_has(st, nodir);

  /* Names that are not UTF-8 are refused when saving (the reader would refuse them). */
  FloeGraph *u = floe_graph_new();
  floe_placeholder(u, "x\xff", FLOE_F32, floe_shape_scalar());
  ck_assert_int_eq(floe_graph_save(u, path, st), FLOE_INVALID_ARGUMENT);
  assert_msg_has(st, "node #0 (Placeholder): its name is not valid UTF-8 (byte 0xff at offset 1)");
  floe_graph_free(u);

  /* A graph with a sticky error is not saved. */
  floe_unary(g, "NoSuchOp", "bad", floe_out(floe_graph_find(g, "x"), 0));
  ck_assert_int_eq(floe_graph_save(g, path, st), FLOE_FAILED_PRECONDITION);
  assert_msg_has(st, "unknown op 'NoSuchOp'");

  unlink(path);
  rmdir(dir);
  free(b1);
  free(b2);
  floe_graph_free(h);
  floe_graph_free(g);
  floe_status_free(st);
}
END_TEST

/* ---- hand-built files (docs/graph-format.md) ---- */

typedef struct Out {
  uint8_t b[4096];
  size_t n;
} Out;
static void o_u8(Out *o, uint8_t v) { o->b[o->n++] = v; }
static void o_u32(Out *o, uint32_t v) {
  wr32(o->b + o->n, v);
  o->n += 4;
}
static void o_u64(Out *o, uint64_t v) {
  o_u32(o, (uint32_t)v);
  o_u32(o, (uint32_t)(v >> 32));
}
static void o_str(Out *o, const char *s) {
  o_u32(o, (uint32_t)strlen(s));
  memcpy(o->b + o->n, s, strlen(s));
  o->n += strlen(s);
}

/* Placeholder "p" (dtype tag, shape [2,-1]), then a Relu "r" of it. `twist` alters one
 * field to make the file invalid in a known way. */
enum { TWIST_NONE, TWIST_KIND, TWIST_LATER_INPUT, TWIST_BOOL, TWIST_DUP_ATTR, TWIST_HUGE_NAME,
       TWIST_TENSOR_BYTES, TWIST_DTYPE, TWIST_UTF8, TWIST_BOOL_TENSOR };
static size_t hand_file(Out *o, int twist) {
  o->n = 0;
  memcpy(o->b, "FLOEGRPH", 8);
  o->n = 8;
  o_u32(o, 0x00010000u);
  o_u32(o, 3);
  /* node 0 */
  size_t at = o->n;
  o_u32(o, 0);
  o_str(o, twist == TWIST_HUGE_NAME ? "" : "p");
  if (twist == TWIST_HUGE_NAME) wr32(o->b + o->n - 4, 0xFFFFFFF0u);
  o_str(o, "Placeholder");
  o_str(o, "");
  o_u32(o, 0); /* input lists */
  o_u32(o, 0); /* control */
  o_u32(o, twist == TWIST_DUP_ATTR ? 3 : 2);
  o_str(o, "dtype");
  o_u8(o, twist == TWIST_KIND ? 99 : 5);
  o_u32(o, twist == TWIST_DTYPE ? 12 : 1);
  o_str(o, "shape");
  o_u8(o, 6);
  o_u32(o, 2);
  o_u64(o, 2);
  o_u64(o, (uint64_t)-1);
  if (twist == TWIST_DUP_ATTR) {
    o_str(o, "dtype");
    o_u8(o, 5);
    o_u32(o, 1);
  }
  wr32(o->b + at, (uint32_t)(o->n - at - 4));
  /* node 1 */
  at = o->n;
  o_u32(o, 0);
  o_str(o, "r");
  o_str(o, "Relu");
  o_str(o, "cpu:0");
  o_u32(o, 1);
  o_u32(o, 1);
  o_u32(o, twist == TWIST_LATER_INPUT ? 2 : 0);
  o_u32(o, 0);
  o_u32(o, 0);
  o_u32(o, twist == TWIST_BOOL ? 1 : 0);
  if (twist == TWIST_BOOL) {
    o_str(o, "flag");
    o_u8(o, 3);
    o_u8(o, 2);
  }
  wr32(o->b + at, (uint32_t)(o->n - at - 4));
  /* node 2: a scalar i32 Const */
  at = o->n;
  o_u32(o, 0);
  o_str(o, twist == TWIST_UTF8 ? "c\xc3(" : "c"); /* 0xc3 starts a pair '(' cannot end */
  o_str(o, "Const");
  o_str(o, "");
  o_u32(o, 0);
  o_u32(o, 1);
  o_u32(o, 1); /* control input: r */
  o_u32(o, 2);
  o_str(o, "value");
  o_u8(o, 7);
  if (twist == TWIST_BOOL_TENSOR) { /* a bool [3] holding 1, 0, 2 */
    o_u32(o, 9); /* bool */
    o_u32(o, 1);
    o_u64(o, 3);
    o_u64(o, 3);
    o_u8(o, 1), o_u8(o, 0), o_u8(o, 2);
  } else {
    o_u32(o, 7); /* i32 */
    o_u32(o, 0); /* rank */
    o_u64(o, twist == TWIST_TENSOR_BYTES ? 8 : 4);
    o_u32(o, 42);
  }
  o_str(o, "dtype");
  o_u8(o, 5);
  o_u32(o, twist == TWIST_BOOL_TENSOR ? 9 : 7);
  wr32(o->b + at, (uint32_t)(o->n - at - 4));
  o_u32(o, 0);
  fix_crc(o->b, o->n);
  return o->n;
}

START_TEST(hand_built_file_is_read_per_spec) {
  Out o;
  size_t n = hand_file(&o, TWIST_NONE);
  FloeStatus *st = floe_status_new();
  FloeGraph *g = floe_graph_deserialize(o.b, n, "hand.floe", st);
  ck_assert_msg(g != NULL, "%s", floe_status_message(st));
  ck_assert_int_eq(floe_graph_num_nodes(g), 3);
  FloeNode *p = floe_graph_find(g, "p"), *r = floe_graph_find(g, "r"), *c = floe_graph_find(g, "c");
  ck_assert_int_eq(floe_node_output_dtype(p, 0), FLOE_F32);
  FloeShape s = floe_node_output_shape(r, 0);
  ck_assert_int_eq(s.rank, 2);
  ck_assert_int_eq(s.dims[0], 2);
  ck_assert_int_eq(s.dims[1], FLOE_DIM_UNKNOWN);
  ck_assert_str_eq(floe_node_device(r), "cpu:0");
  ck_assert_ptr_eq(floe_node_input(r, 0).node, p);
  ck_assert_ptr_eq(floe_node_control_input(c, 0), r);
  ck_assert_int_eq(*(const int32_t *)floe_tensor_data(floe__attrs_get(&c->attrs, "value")->u.tensor),
                   42);
  /* Loading filled in the inferred T of the Relu. */
  ck_assert_int_eq(floe__attrs_get(&r->attrs, "T")->u.type, FLOE_F32);
  floe_graph_free(g);

  struct {
    int twist;
    floe_code code;
    const char *frag;
  } bad[] = {
      {TWIST_KIND, FLOE_DATA_LOSS, "attribute 'dtype' of node 'p' has unknown kind tag 99"},
      {TWIST_LATER_INPUT, FLOE_DATA_LOSS, "of node 'r' refers to output 0 of node 2"},
      {TWIST_BOOL, FLOE_DATA_LOSS, "attribute 'flag' of node 'r': bool byte is 2, not 0 or 1"},
      {TWIST_DUP_ATTR, FLOE_DATA_LOSS, "attribute 'dtype' of node 'p' appears twice"},
      {TWIST_HUGE_NAME, FLOE_DATA_LOSS, "truncated name of node 0 (need 4294967280 bytes"},
      {TWIST_TENSOR_BYTES, FLOE_DATA_LOSS, "a i32 tensor of 1 elements has 4 bytes, the file says 8"},
      {TWIST_DTYPE, FLOE_DATA_LOSS, "value of attribute 'dtype' of node 'p' is 12, not a dtype"},
      {TWIST_UTF8, FLOE_DATA_LOSS, "name of node 2 is not valid UTF-8 (byte 0xc3)"},
      {TWIST_BOOL_TENSOR, FLOE_DATA_LOSS, "attribute 'value' of node 'c': bool element 2 is the byte 2"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    n = hand_file(&o, bad[i].twist);
    ck_assert_ptr_null(floe_graph_deserialize(o.b, n, "hand.floe", st));
    ck_assert_msg(floe_status_code(st) == bad[i].code, "twist %d: %s", bad[i].twist,
                  floe_status_message(st));
    assert_msg_has(st, "hand.floe: offset ");
    assert_msg_has(st, bad[i].frag);
  }
  floe_status_free(st);
}
END_TEST

/* ---- damaged files ---- */

START_TEST(every_truncation_is_an_error) {
  FloeGraph *g = small_graph();
  uint8_t *buf;
  size_t len;
  serialize_ok(g, &buf, &len);
  FloeStatus *st = floe_status_new();
  for (size_t n = 0; n < len; n++) {
    /* An exact-size copy so any read past the end is caught by the sanitizers. */
    uint8_t *cut = malloc(n ? n : 1);
    memcpy(cut, buf, n);
    FloeGraph *h = floe_graph_deserialize(cut, n, "small.floe", st);
    ck_assert_msg(h == NULL, "truncated to %zu bytes but loaded", n);
    ck_assert_int_eq(floe_status_code(st), FLOE_DATA_LOSS);
    assert_msg_has(st, "small.floe: offset ");
    assert_msg_has(st, "truncated");
    free(cut);
  }
  /* The message for a cut inside the 4096 data bytes of w (found by its position). */
  const uint8_t *data = memmem(buf, len, (float[]){0.0f, 1.0f, 2.0f}, 12);
  ck_assert_ptr_nonnull(data);
  size_t off = (size_t)(data - buf);
  ck_assert_ptr_null(floe_graph_deserialize(buf, off + 17, "graph.floe", st));
  char want[160];
  snprintf(want, sizeof want,
           "graph.floe: offset %zu: truncated attribute 'value' of node 'w' (need 4096 bytes, 17 "
           "left)", off);
  ck_assert_str_eq(floe_status_message(st), want);
  free(buf);
  floe_status_free(st);
  floe_graph_free(g);
}
END_TEST

START_TEST(random_byte_flips_never_crash) {
  FloeGraph *g = rich_graph();
  uint8_t *buf;
  size_t len;
  serialize_ok(g, &buf, &len);
  FloeStatus *st = floe_status_new();
  uint8_t *copy = malloc(len);
  int loaded = 0, refused = 0;
  for (int iter = 0; iter < 3000; iter++) {
    memcpy(copy, buf, len);
    int flips = 1 + (int)(rng() % 3);
    for (int k = 0; k < flips; k++) copy[rng() % len] ^= (uint8_t)(1 + rng() % 255);
    /* Half the time the CRC is repaired, so the flips reach the parser and validation. */
    bool repaired = iter % 2;
    if (repaired) fix_crc(copy, len);
    FloeGraph *h = floe_graph_deserialize(copy, len, "fuzz", st);
    if (h) {
      loaded++;
      ck_assert(repaired);
      /* A graph that loads is a valid graph: it serialises and reloads. */
      uint8_t *b2;
      size_t n2;
      serialize_ok(h, &b2, &n2);
      FloeGraph *h2 = floe_graph_deserialize(b2, n2, "again", st);
      ck_assert_msg(h2 != NULL, "%s", floe_status_message(st));
      floe_graph_free(h2);
      free(b2);
      floe_graph_free(h);
    } else {
      refused++;
      ck_assert_int_ne(floe_status_code(st), FLOE_OK);
      assert_msg_has(st, "fuzz");
    }
  }
  ck_assert_int_gt(refused, 1500);
  free(copy);
  free(buf);
  floe_status_free(st);
  floe_graph_free(g);
}
END_TEST

START_TEST(crc_catches_corruption) {
  FloeGraph *g = small_graph();
  uint8_t *buf;
  size_t len;
  serialize_ok(g, &buf, &len);
  FloeStatus *st = floe_status_new();
  /* A flipped bit inside w's data is structurally fine: only the CRC can see it. */
  uint8_t *data = memmem(buf, len, (float[]){0.0f, 1.0f, 2.0f}, 12);
  data[100] ^= 0x10;
  ck_assert_ptr_null(floe_graph_deserialize(buf, len, "c.floe", st));
  ck_assert_int_eq(floe_status_code(st), FLOE_DATA_LOSS);
  char want[64];
  snprintf(want, sizeof want, "c.floe: offset %zu: CRC-32 mismatch", len - 4);
  assert_msg_has(st, want);
  assert_msg_has(st, "the file is corrupt");
  data[100] ^= 0x10;
  buf[len - 1] ^= 0x80; /* the CRC itself */
  ck_assert_ptr_null(floe_graph_deserialize(buf, len, "c.floe", st));
  assert_msg_has(st, "CRC-32 mismatch");
  buf[len - 1] ^= 0x80;
  FloeGraph *h = floe_graph_deserialize(buf, len, "c.floe", st);
  ck_assert_ptr_nonnull(h);
  floe_graph_free(h);
  free(buf);
  floe_status_free(st);
  floe_graph_free(g);
}
END_TEST

START_TEST(unknown_op_in_file) {
  FloeGraph *g = floe_graph_new();
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_scalar());
  floe_unary(g, "Relu", "r", x);
  uint8_t *buf;
  size_t len;
  serialize_ok(g, &buf, &len);
  uint8_t *op = memmem(buf, len, "\x04\0\0\0Relu", 8);
  ck_assert_ptr_nonnull(op);
  memcpy(op + 4, "Relx", 4);
  fix_crc(buf, len);
  /* The record of node 1 starts just before its name "r". */
  uint8_t *rec = memmem(buf, len, "\x01\0\0\0r", 5) - 4;
  FloeStatus *st = floe_status_new();
  ck_assert_ptr_null(floe_graph_deserialize(buf, len, "ops.floe", st));
  ck_assert_int_eq(floe_status_code(st), FLOE_NOT_FOUND);
  char want[96];
  snprintf(want, sizeof want, "ops.floe: offset %zu: node 'r': unknown op 'Relx'",
           (size_t)(rec - buf));
  assert_msg_has(st, want);
  free(buf);
  floe_status_free(st);
  floe_graph_free(g);
}
END_TEST

START_TEST(format_versions) {
  FloeGraph *g = small_graph();
  uint8_t *buf;
  size_t len;
  serialize_ok(g, &buf, &len);
  FloeStatus *st = floe_status_new();

  /* A newer major is refused, whatever follows. */
  wr32(buf + 8, 0x00020000u);
  fix_crc(buf, len);
  ck_assert_ptr_null(floe_graph_deserialize(buf, len, "v2.floe", st));
  ck_assert_int_eq(floe_status_code(st), FLOE_UNIMPLEMENTED);
  assert_msg_has(st, "v2.floe: offset 8: format version 2.0 is newer");
  wr32(buf + 8, 0);
  ck_assert_ptr_null(floe_graph_deserialize(buf, len, "v0.floe", st));
  assert_msg_has(st, "format version 0.0 is not a valid version");

  /* A newer minor may add fields at the end of a node record and data before the CRC:
   * this reader skips them. Make such a file from the 1.0 one. */
  size_t big = len + 8;
  uint8_t *v11 = malloc(big);
  size_t rec0 = 16, rec0_len = rd32(buf + rec0);
  size_t split = rec0 + 4 + rec0_len;
  memcpy(v11, buf, split);
  memcpy(v11 + split, "\xAA\xBB\xCC\xDD", 4); /* a field from the future */
  memcpy(v11 + split + 4, buf + split, len - 4 - split);
  memcpy(v11 + len, "\x11\x22\x33\x44", 4); /* a trailing section */
  wr32(v11 + rec0, (uint32_t)rec0_len + 4);
  wr32(v11 + 8, 0x00010001u);
  fix_crc(v11, big);
  FloeGraph *h = floe_graph_deserialize(v11, big, "v11.floe", st);
  ck_assert_msg(h != NULL, "%s", floe_status_message(st));
  assert_graphs_equal(g, h);
  floe_graph_free(h);
  /* The same bytes claiming 1.0 are malformed. */
  wr32(v11 + 8, 0x00010000u);
  fix_crc(v11, big);
  ck_assert_ptr_null(floe_graph_deserialize(v11, big, "v10.floe", st));
  ck_assert_int_eq(floe_status_code(st), FLOE_DATA_LOSS);
  assert_msg_has(st, "record of node 'x' is");
  assert_msg_has(st, "but its fields end 4 bytes earlier");

  /* Not a graph file at all. */
  ck_assert_ptr_null(floe_graph_deserialize("\x93NUMPY\x01\x00....", 14, "t.npy", st));
  ck_assert_int_eq(floe_status_code(st), FLOE_INVALID_ARGUMENT);
  assert_msg_has(st, "t.npy: offset 0: not a Floe graph file");
  ck_assert_ptr_null(floe_graph_deserialize(NULL, 4, "null", st));
  ck_assert_int_eq(floe_status_code(st), FLOE_INVALID_ARGUMENT);
  free(v11);
  free(buf);
  floe_status_free(st);
  floe_graph_free(g);
}
END_TEST

START_TEST(allocation_failures_in_io) {
  FloeGraph *g = rich_graph();
  uint8_t *ref;
  size_t ref_len;
  serialize_ok(g, &ref, &ref_len);
  FloeStatus *st = floe_status_new();
  int ser_ok = 0, de_ok = 0;
  for (long k = 1; k < 2000 && !ser_ok; k++) {
    void *b = NULL;
    size_t n = 0;
    floe_test_fail_alloc_after(k);
    floe_code rc = floe_graph_serialize(g, &b, &n, st);
    floe_test_fail_alloc_after(0);
    if (rc == FLOE_OK) {
      ser_ok = (int)k;
      ck_assert_uint_eq(n, ref_len);
      ck_assert_mem_eq(b, ref, n);
      free(b);
    } else {
      ck_assert_int_eq(rc, FLOE_NO_MEMORY);
      ck_assert_ptr_null(b);
    }
  }
  ck_assert_int_gt(ser_ok, 1);
  for (long k = 1; k < 5000 && !de_ok; k++) {
    floe_test_fail_alloc_after(k);
    FloeGraph *h = floe_graph_deserialize(ref, ref_len, "mem", st);
    floe_test_fail_alloc_after(0);
    if (h) {
      de_ok = (int)k;
      assert_graphs_equal(g, h);
      floe_graph_free(h);
    } else {
      ck_assert_msg(floe_status_code(st) == FLOE_NO_MEMORY, "k=%ld: %s", k,
                    floe_status_message(st));
    }
  }
  ck_assert_int_gt(de_ok, 20);
  free(ref);
  floe_status_free(st);
  floe_graph_free(g);
}
END_TEST

/* ---- DOT ---- */

START_TEST(dot_output) {
  FloeGraph *g = floe_graph_new();
  int64_t d[2] = {2, 3};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(2, d));
  FloeOutput q = floe_placeholder(g, "we\"ird\\name", FLOE_F32, floe_shape_make(2, d));
  FloeNodeBuilder *b = floe_node_begin(g, "Add", "sum");
  floe_node_add_input(b, x);
  floe_node_add_input(b, q);
  floe_node_set_device(b, "cpu:0");
  FloeNode *sum = floe_node_finish(b);
  FloeTensor *axt = floe_tensor_scalar_i32(1, NULL);
  FloeOutput ax = floe_const(g, "ax", axt);
  floe_tensor_release(axt);
  b = floe_node_begin(g, "Split", "sp");
  floe_node_add_input(b, floe_out(sum, 0));
  floe_node_add_input(b, ax);
  floe_node_set_attr_int(b, "num_split", 3);
  FloeNode *sp = floe_node_finish(b);
  floe_unary(g, "Neg", "neg", floe_out(sp, 2));
  b = floe_node_begin(g, "NoOp", "after");
  floe_node_add_control_input(b, sum);
  floe_node_finish(b);
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));

  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  FloeStatus *st = floe_status_new();
  ck_assert_int_eq(floe_graph_write_dot(g, f, st), FLOE_OK);
  fclose(f);
  const char *want[] = {
      "digraph floe {",
      "  n0 [label=\"x\\nPlaceholder\"];",
      "  n1 [label=\"we\\\"ird\\\\name\\nPlaceholder\"];",
      "  n2 [label=\"sum\\nAdd\\n@cpu:0\"];",
      "  n0 -> n2 [label=\"f32[2,3]\"];",
      "  n1 -> n2 [label=\"f32[2,3]\"];",
      "  n3 -> n4 [label=\"i32[]\"];",
      "  n4 -> n5 [label=\":2 f32[2,1]\"];",
      "  n2 -> n6 [style=dashed];",
  };
  for (size_t i = 0; i < sizeof want / sizeof *want; i++)
    ck_assert_msg(strstr(text, want[i]) != NULL, "DOT lacks %s:\n%s", want[i], text);
  ck_assert_ptr_eq(strstr(text, "}\n"), text + len - 2);
  free(text);
  ck_assert_int_eq(floe_graph_write_dot(g, NULL, st), FLOE_INVALID_ARGUMENT);
  floe_status_free(st);
  floe_graph_free(g);
}
END_TEST

/* A list(shape) attribute is laid out as docs/graph-format.md says (tag 11: u32 n, then
 * per shape an i32 rank and rank i64 dims), and a bad rank or dim in it is refused. */
START_TEST(shape_list_attribute_per_spec) {
  FloeGraph *g = rich_graph();
  uint8_t *buf;
  size_t len;
  serialize_ok(g, &buf, &len);
  /* "sl", kind 11, 4 shapes: [2,3], [-1,3], rank -1, rank 0 */
  uint8_t want[] = {2, 0, 0, 0, 's', 'l', 11, 4, 0, 0, 0,
                    2, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0,
                    2, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 3, 0, 0, 0, 0, 0, 0, 0,
                    0xff, 0xff, 0xff, 0xff,
                    0, 0, 0, 0};
  uint8_t *at = memmem(buf, len, want, sizeof want);
  ck_assert_msg(at != NULL, "the list(shape) attribute is not laid out per the spec");
  FloeStatus *st = floe_status_new();
  wr32(at + 11, 9); /* the first shape's rank */
  fix_crc(buf, len);
  ck_assert_ptr_null(floe_graph_deserialize(buf, len, "sl.floe", st));
  ck_assert_int_eq(floe_status_code(st), FLOE_DATA_LOSS);
  assert_msg_has(st, "attribute 'sl' of node 'all': shape rank 9 is outside -1..8");
  wr32(at + 11, 2);
  wr32(at + 15, 0xfffffffeu); /* dim -2 */
  wr32(at + 19, 0xffffffffu);
  fix_crc(buf, len);
  ck_assert_ptr_null(floe_graph_deserialize(buf, len, "sl.floe", st));
  assert_msg_has(st, "attribute 'sl' of node 'all': dimension 0 is -2");
  free(buf);
  floe_graph_free(g);

  /* The builder refuses invalid shapes too. */
  g = floe_graph_new();
  FloeShape bad = floe_shape_unknown();
  bad.rank = 2;
  bad.dims[0] = 3;
  bad.dims[1] = -7;
  FloeNodeBuilder *b = floe_node_begin(g, "FIFOQueueV2", "q");
  floe_node_set_attr_type_list(b, "component_types", (FloeDType[]){FLOE_F32}, 1);
  floe_node_set_attr_shape_list(b, "shapes", &bad, 1);
  ck_assert_ptr_null(floe_node_finish(b));
  ck_assert_msg(strstr(floe_graph_error(g, NULL), "attribute 'shapes' element 0 is not a valid "
                       "shape"), "%s", floe_graph_error(g, NULL));
  floe_graph_free(g);
  floe_status_free(st);
}
END_TEST

static floe_code loop_cond(FloeGraph *g, void *arg, const FloeOutput *v, int n, FloeOutput *pred) {
  (void)arg, (void)n;
  *pred = floe_binary(g, "Less", NULL, v[0], floe_const_f32(g, NULL, 5.0f));
  return floe_graph_status(g);
}

static floe_code loop_body(FloeGraph *g, void *arg, const FloeOutput *v, int n, FloeOutput *next) {
  (void)arg, (void)n;
  next[0] = floe_binary(g, "Add", NULL, v[0], floe_const_f32(g, NULL, 1.0f));
  return floe_graph_status(g);
}

/* Same nodes (by name and op) reading the same outputs of the same nodes, in any order. */
static void assert_same_graph(const FloeGraph *a, const FloeGraph *b) {
  ck_assert_int_eq(a->num_nodes, b->num_nodes);
  for (int i = 0; i < a->num_nodes; i++) {
    const FloeNode *x = a->nodes[i], *y = floe_graph_find(b, x->name);
    ck_assert_msg(y && strcmp(x->op->name, y->op->name) == 0, "node %s", x->name);
    ck_assert_int_eq(x->num_inputs, y->num_inputs);
    for (int j = 0; j < x->num_inputs; j++) {
      ck_assert_str_eq(x->inputs[j].node->name, y->inputs[j].node->name);
      ck_assert_int_eq(x->inputs[j].index, y->inputs[j].index);
    }
    ck_assert_int_eq(x->num_control, y->num_control);
    for (int k = 0; k < x->num_control; k++)
      ck_assert_str_eq(x->control[k]->name, y->control[k]->name);
  }
}

/* A graph with a while loop (a Merge reads its NextIteration, a later node) and a node
 * rewired to read a later one round-trips: nodes are written after their inputs, and the
 * back edge is set once every node is read. */
START_TEST(loops_and_rewired_nodes_roundtrip) {
  FloeGraph *g = floe_graph_new();
  FloeOutput init = floe_const_f32(g, "i0", 0.0f), res;
  ck_assert_int_eq(floe_while_loop(g, "w", loop_cond, loop_body, NULL, &init, 1, NULL, &res),
                   FLOE_OK);
  FloeOutput early = floe_unary(g, "Neg", "early", init);
  FloeOutput late = floe_unary(g, "Neg", "late", res);
  /* "early" now reads "late", added after it: ids are no longer a topological order */
  ck_assert_int_eq(floe__node_set_input(early.node, 0, late, NULL), FLOE_OK);
  ck_assert_int_eq(floe_graph_status(g), FLOE_OK);
  FloeStatus *st = floe_status_new();
  void *buf = NULL;
  size_t len = 0;
  ck_assert_msg(floe_graph_serialize(g, &buf, &len, st) == FLOE_OK, "%s", floe_status_message(st));
  FloeGraph *back = floe_graph_deserialize(buf, len, "loop.floe", st);
  ck_assert_msg(back, "%s", floe_status_message(st));
  assert_same_graph(g, back);
  int merges = 0;
  for (int i = 0; i < back->num_nodes; i++)
    if (strcmp(back->nodes[i]->op->name, "Merge") == 0) {
      merges++;
      ck_assert_str_eq(back->nodes[i]->inputs[1].node->op->name, "NextIteration");
    }
  ck_assert_int_eq(merges, 1);
  free(buf);
  floe_graph_free(back);
  floe_graph_free(g);
  floe_status_free(st);
}
END_TEST

/* Special files: a FIFO given as a graph file is refused at once (opening it waited for a
 * writer for ever); saving never replaces what is not a regular file (a FIFO, a folder; as
 * root, --export /dev/full replaced the device with a file) and writes through a symbolic
 * link; a .npy FIFO likewise. */
START_TEST(special_files_are_refused_not_replaced) {
  char dir[] = "/tmp/floe_graph_io_XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char fifo[300], sub[300], real[300], link[300], npy[300];
  snprintf(fifo, sizeof fifo, "%s/fifo", dir);
  snprintf(sub, sizeof sub, "%s/sub", dir);
  snprintf(real, sizeof real, "%s/real.floe", dir);
  snprintf(link, sizeof link, "%s/link.floe", dir);
  snprintf(npy, sizeof npy, "%s/fifo.npy", dir);
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  ck_assert_int_eq(mkfifo(npy, 0600), 0);
  ck_assert_int_eq(mkdir(sub, 0700), 0);
  FloeGraph *g = rich_graph();
  FloeStatus *st = floe_status_new();
  struct stat sb;

  ck_assert_ptr_null(floe_graph_load(fifo, st)); /* the tcase's timeout catches a wait */
  ck_assert_int_eq(floe_status_code(st), FLOE_INVALID_ARGUMENT);
  assert_msg_has(st, fifo);
  assert_msg_has(st, "a FIFO");
  ck_assert_int_eq(floe_graph_save(g, fifo, st), FLOE_INVALID_ARGUMENT);
  assert_msg_has(st, "a FIFO, not a regular file: refusing to replace it");
  ck_assert_int_eq(lstat(fifo, &sb), 0);
  ck_assert(S_ISFIFO(sb.st_mode));
  ck_assert_int_eq(floe_graph_save(g, sub, st), FLOE_INVALID_ARGUMENT);
  assert_msg_has(st, "a directory");
  ck_assert_int_eq(lstat(sub, &sb), 0);
  ck_assert(S_ISDIR(sb.st_mode));

  /* Through a symbolic link: the link stays a link, the file it names gets the graph. */
  ck_assert_int_eq(floe_graph_save(g, real, st), FLOE_OK);
  ck_assert_int_eq(symlink("real.floe", link), 0);
  floe_unary(g, "Neg", "extra", floe_out(floe_graph_find(g, "x"), 0));
  ck_assert_msg(floe_graph_save(g, link, st) == FLOE_OK, "%s", floe_status_message(st));
  ck_assert_int_eq(lstat(link, &sb), 0);
  ck_assert(S_ISLNK(sb.st_mode));
  FloeGraph *h = floe_graph_load(real, st);
  ck_assert_msg(h != NULL, "%s", floe_status_message(st));
  ck_assert_ptr_nonnull(floe_graph_find(h, "extra"));
  floe_graph_free(h);
  /* A link to a FIFO is refused like the FIFO, naming both. */
  unlink(link);
  ck_assert_int_eq(symlink("fifo", link), 0);
  ck_assert_int_eq(floe_graph_save(g, link, st), FLOE_INVALID_ARGUMENT);
  assert_msg_has(st, " -> ");
  assert_msg_has(st, "a FIFO");

  /* .npy: a FIFO is neither read nor replaced. */
  ck_assert_ptr_null(floe_tensor_load_npy(npy, st));
  assert_msg_has(st, "a FIFO");
  FloeTensor *t = floe_tensor_scalar_f32(1.0f, st);
  ck_assert_int_eq(floe_tensor_save_npy(t, npy, st), FLOE_INVALID_ARGUMENT);
  ck_assert_int_eq(lstat(npy, &sb), 0);
  ck_assert(S_ISFIFO(sb.st_mode));
  floe_tensor_release(t);

  unlink(link);
  unlink(real);
  unlink(fifo);
  unlink(npy);
  rmdir(sub);
  ck_assert_int_eq(rmdir(dir), 0); /* nothing else was left behind */
  floe_graph_free(g);
  floe_status_free(st);
}
END_TEST

/* Under a file-size limit (ulimit -f) a save that would pass it is refused before writing:
 * the kernel would otherwise kill the process with SIGXFSZ (left at its default here, so a
 * write past the limit ends the test). The old file stays and no temporary file is left. */
START_TEST(file_size_limit_is_an_error_not_a_signal) {
  char dir[] = "/tmp/floe_graph_io_XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char path[300], npy[300];
  snprintf(path, sizeof path, "%s/g.floe", dir);
  snprintf(npy, sizeof npy, "%s/t.npy", dir);
  FloeGraph *g = rich_graph();
  FloeStatus *st = floe_status_new();
  uint8_t *buf;
  size_t len;
  serialize_ok(g, &buf, &len);
  free(buf);
  ck_assert_int_eq(floe_graph_save(g, path, st), FLOE_OK);
  floe_unary(g, "Neg", "extra", floe_out(floe_graph_find(g, "x"), 0));
  pid_t pid = fork(); /* the limit is the child's alone (Check writes its log, too) */
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    signal(SIGXFSZ, SIG_DFL);
    struct rlimit rl = {.rlim_cur = len - 1, .rlim_max = RLIM_INFINITY};
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(10);
    if (floe_graph_save(g, path, st) != FLOE_RESOURCE_EXHAUSTED) _exit(11);
    if (!strstr(floe_status_message(st), path) || !strstr(floe_status_message(st), "ulimit -f"))
      _exit(12);
    FloeTensor *t = floe_tensor_new(FLOE_F32, 1, (int64_t[]){(int64_t)len}, st);
    if (floe_tensor_save_npy(t, npy, st) != FLOE_RESOURCE_EXHAUSTED) _exit(13);
    _exit(0);
  }
  int ws;
  ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
  ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "child: status 0x%x", ws);
  FloeGraph *h = floe_graph_load(path, st); /* the old graph, whole */
  ck_assert_msg(h != NULL, "%s", floe_status_message(st));
  ck_assert_ptr_null(floe_graph_find(h, "extra"));
  floe_graph_free(h);
  unlink(path);
  ck_assert_int_eq(rmdir(dir), 0); /* no temporary file */
  floe_graph_free(g);
  floe_status_free(st);
}
END_TEST

static Suite *graph_io_suite(void) {
  Suite *s = suite_create("graph_io");
  TCase *rt = tcase_create("roundtrip");
  tcase_add_test(rt, roundtrip_every_attribute_kind_is_exact);
  tcase_add_test(rt, save_and_load_files);
  tcase_add_test(rt, hand_built_file_is_read_per_spec);
  tcase_add_test(rt, shape_list_attribute_per_spec);
  tcase_add_test(rt, loops_and_rewired_nodes_roundtrip);
  suite_add_tcase(s, rt);
  TCase *special = tcase_create("special files");
  tcase_add_test(special, special_files_are_refused_not_replaced);
  tcase_add_test(special, file_size_limit_is_an_error_not_a_signal);
  suite_add_tcase(s, special);
  TCase *damage = tcase_create("damage");
  tcase_add_test(damage, every_truncation_is_an_error);
  tcase_add_test(damage, random_byte_flips_never_crash);
  tcase_add_test(damage, crc_catches_corruption);
  tcase_add_test(damage, unknown_op_in_file);
  tcase_add_test(damage, format_versions);
  tcase_set_timeout(damage, 120);
  suite_add_tcase(s, damage);
  TCase *oom = tcase_create("oom");
  tcase_add_test(oom, allocation_failures_in_io);
  tcase_set_timeout(oom, 120);
  suite_add_tcase(s, oom);
  TCase *dot = tcase_create("dot");
  tcase_add_test(dot, dot_output);
  suite_add_tcase(s, dot);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(graph_io_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
