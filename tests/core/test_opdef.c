/* SPDX-License-Identifier: Apache-2.0 */
/* test_opdef.c - the op spec parser (every grammar form, errors naming the spec) and the
 * process-wide registry (lookup, duplicates, the standard set, threads, allocation failure). */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

/* Registers an op from spec arrays (NULL-terminated) on behalf of plugin "test". */
static floe_code reg(const char *name, const char *const *in, const char *const *out,
                     const char *const *attrs, FloeStatus *st) {
  size_t ni = 0, no = 0, na = 0;
  while (in && in[ni]) ni++;
  while (out && out[no]) no++;
  while (attrs && attrs[na]) na++;
  FloeOpDef def = {.struct_size = sizeof def, .name = name, .inputs = in, .num_inputs = ni,
                   .outputs = out, .num_outputs = no, .attrs = attrs, .num_attrs = na};
  return floe__op_register(&def, "test", st);
}

/* ---- grammar ---------------------------------------------------------------------- */

START_TEST(args_every_form) {
  FloeStatus *st = floe_status_new();
  const char *in[] = {"x: T", "y:f32", "  vals :  N * T ", "ids: N*i64", "mixed: Tlist", NULL};
  const char *out[] = {"z: T", "flag: bool", NULL};
  const char *attrs[] = {"T: type", "N: int >= 1", "Tlist: list(type)", NULL};
  ck_assert_int_eq(reg("GrammarArgs", in, out, attrs, st), FLOE_OK);
  const FloeOpInfo *op = floe__op_lookup("GrammarArgs");
  ck_assert_ptr_nonnull(op);
  ck_assert_int_eq(op->num_inputs, 5);
  ck_assert_int_eq(op->num_outputs, 2);
  ck_assert_int_eq(op->num_attrs, 3);
  ck_assert_str_eq(op->plugin, "test");

  ck_assert_str_eq(op->inputs[0].name, "x");
  ck_assert_str_eq(op->inputs[0].type_attr, "T");
  ck_assert_int_eq(op->inputs[0].fixed, FLOE_DTYPE_INVALID);
  ck_assert_ptr_null(op->inputs[0].number_attr);

  ck_assert_str_eq(op->inputs[1].name, "y");
  ck_assert_int_eq(op->inputs[1].fixed, FLOE_F32);
  ck_assert_ptr_null(op->inputs[1].type_attr);

  ck_assert_str_eq(op->inputs[2].name, "vals");
  ck_assert_str_eq(op->inputs[2].number_attr, "N");
  ck_assert_str_eq(op->inputs[2].type_attr, "T");

  ck_assert_str_eq(op->inputs[3].number_attr, "N");
  ck_assert_int_eq(op->inputs[3].fixed, FLOE_I64);
  ck_assert_ptr_null(op->inputs[3].type_attr);

  ck_assert_str_eq(op->inputs[4].type_list_attr, "Tlist");
  ck_assert_ptr_null(op->inputs[4].type_attr);
  ck_assert_ptr_null(op->inputs[4].number_attr);

  ck_assert_str_eq(op->outputs[0].type_attr, "T");
  ck_assert_int_eq(op->outputs[1].fixed, FLOE_BOOL);

  const FloeAttrDef *n = floe__op_attr(op, "N");
  ck_assert_ptr_nonnull(n);
  ck_assert_int_eq(n->kind, FLOE_ATTR_INT);
  ck_assert(n->has_min);
  ck_assert_int_eq(n->min, 1);
  ck_assert(!n->has_default);
  ck_assert_int_eq(floe__op_attr(op, "Tlist")->kind, FLOE_ATTR_TYPE_LIST);
  ck_assert_ptr_null(floe__op_attr(op, "nope"));
  floe_status_free(st);
}
END_TEST

START_TEST(attrs_scalar_defaults) {
  FloeStatus *st = floe_status_new();
  const char *attrs[] = {"i: int = -3",         "f: float = 0.25",     "f0: float = 0",
                         "bt: bool = true",     "bf: bool=false",      "s: string = NHWC",
                         "sq: string = \"a b\"", "se: string = ''",     "sh: shape = ?",
                         "sh2: shape = [2,?,3]", "sh0: shape = []",     "sh3: shape = [4, -1]",
                         "t: type = i64",        "ten: tensor",         "m: int >= -2 = 5",
                         NULL};
  ck_assert_int_eq(reg("GrammarScalars", NULL, NULL, attrs, st), FLOE_OK);
  const FloeOpInfo *op = floe__op_lookup("GrammarScalars");
  ck_assert_ptr_nonnull(op);
  ck_assert_int_eq(op->num_attrs, 15);
  const FloeAttrDef *a = floe__op_attr(op, "i");
  ck_assert(a->has_default);
  ck_assert_int_eq(a->def.kind, FLOE_ATTR_INT);
  ck_assert_int_eq(a->def.u.i, -3);
  ck_assert_double_eq(floe__op_attr(op, "f")->def.u.f, 0.25);
  ck_assert_int_eq(floe__op_attr(op, "f0")->def.kind, FLOE_ATTR_FLOAT);
  ck_assert_double_eq(floe__op_attr(op, "f0")->def.u.f, 0.0);
  ck_assert_int_eq(floe__op_attr(op, "bt")->def.u.b, 1);
  ck_assert_int_eq(floe__op_attr(op, "bf")->def.u.b, 0);
  ck_assert_int_eq(floe__op_attr(op, "bf")->def.kind, FLOE_ATTR_BOOL);
  ck_assert_str_eq(floe__op_attr(op, "s")->def.u.s, "NHWC");
  ck_assert_str_eq(floe__op_attr(op, "sq")->def.u.s, "a b");
  ck_assert_str_eq(floe__op_attr(op, "se")->def.u.s, "");
  a = floe__op_attr(op, "sh");
  ck_assert_int_eq(a->kind, FLOE_ATTR_SHAPE);
  ck_assert_int_eq(a->def.u.shape.rank, FLOE_RANK_UNKNOWN);
  a = floe__op_attr(op, "sh2");
  ck_assert_int_eq(a->def.u.shape.rank, 3);
  ck_assert_int_eq(a->def.u.shape.dims[0], 2);
  ck_assert_int_eq(a->def.u.shape.dims[1], FLOE_DIM_UNKNOWN);
  ck_assert_int_eq(a->def.u.shape.dims[2], 3);
  ck_assert_int_eq(floe__op_attr(op, "sh0")->def.u.shape.rank, 0);
  ck_assert_int_eq(floe__op_attr(op, "sh3")->def.u.shape.dims[1], FLOE_DIM_UNKNOWN);
  ck_assert_int_eq(floe__op_attr(op, "t")->def.u.type, FLOE_I64);
  a = floe__op_attr(op, "ten");
  ck_assert_int_eq(a->kind, FLOE_ATTR_TENSOR);
  ck_assert(!a->has_default);
  a = floe__op_attr(op, "m");
  ck_assert_int_eq(a->min, -2);
  ck_assert_int_eq(a->def.u.i, 5);
  floe_status_free(st);
}
END_TEST

START_TEST(attrs_lists_and_type_sets) {
  FloeStatus *st = floe_status_new();
  const char *attrs[] = {"il: list(int) = [1,1]",
                         "il0: list(int) = []",
                         "fl: list(float) = [0.5, -1]",
                         "tl: list(type) >= 1 in {index} = [i32, i64]",
                         "tf: type in {float}",
                         "ti: type in {int}",
                         "tx: type in {index}",
                         "tn: type in {numeric}",
                         "ta: type in {all}",
                         "tm: type in {f32, i64,bool} = bool",
                         "ln: list(int) >= 2",
                         "sl: list(shape) = [[2,3], ?, [], [-1, 4]]",
                         "sl0: list(shape) >= 1",
                         "sle: list(shape) = []",
                         NULL};
  ck_assert_int_eq(reg("GrammarLists", NULL, NULL, attrs, st), FLOE_OK);
  const FloeOpInfo *op = floe__op_lookup("GrammarLists");
  const FloeAttrDef *a = floe__op_attr(op, "il");
  ck_assert_int_eq(a->def.kind, FLOE_ATTR_INT_LIST);
  ck_assert_uint_eq(a->def.u.ilist.n, 2);
  ck_assert_int_eq(a->def.u.ilist.v[0], 1);
  ck_assert_int_eq(a->def.u.ilist.v[1], 1);
  a = floe__op_attr(op, "il0");
  ck_assert(a->has_default);
  ck_assert_uint_eq(a->def.u.ilist.n, 0);
  a = floe__op_attr(op, "fl");
  ck_assert_uint_eq(a->def.u.flist.n, 2);
  ck_assert_double_eq(a->def.u.flist.v[0], 0.5);
  ck_assert_double_eq(a->def.u.flist.v[1], -1.0);
  a = floe__op_attr(op, "tl");
  ck_assert_int_eq(a->kind, FLOE_ATTR_TYPE_LIST);
  ck_assert_int_eq(a->min, 1);
  ck_assert_uint_eq(a->allowed, FLOE_DTYPE_BIT(FLOE_I32) | FLOE_DTYPE_BIT(FLOE_I64));
  ck_assert_uint_eq(a->def.u.tlist.n, 2);
  ck_assert_int_eq(a->def.u.tlist.v[1], FLOE_I64);
  ck_assert_uint_eq(floe__op_attr(op, "tf")->allowed,
                    FLOE_DTYPE_BIT(FLOE_F32) | FLOE_DTYPE_BIT(FLOE_F64) |
                        FLOE_DTYPE_BIT(FLOE_F16) | FLOE_DTYPE_BIT(FLOE_BF16));
  ck_assert_uint_eq(floe__op_attr(op, "ti")->allowed,
                    FLOE_DTYPE_BIT(FLOE_I8) | FLOE_DTYPE_BIT(FLOE_U8) |
                        FLOE_DTYPE_BIT(FLOE_I32) | FLOE_DTYPE_BIT(FLOE_I64));
  ck_assert_uint_eq(floe__op_attr(op, "tx")->allowed,
                    FLOE_DTYPE_BIT(FLOE_I32) | FLOE_DTYPE_BIT(FLOE_I64));
  ck_assert_uint_eq(floe__op_attr(op, "tn")->allowed, FLOE_DTYPES_FLOAT | FLOE_DTYPES_INT);
  ck_assert_uint_eq(floe__op_attr(op, "ta")->allowed,
                    FLOE_DTYPES_FLOAT | FLOE_DTYPES_INT | FLOE_DTYPE_BIT(FLOE_BOOL));
  a = floe__op_attr(op, "tm");
  ck_assert_uint_eq(a->allowed, FLOE_DTYPE_BIT(FLOE_F32) | FLOE_DTYPE_BIT(FLOE_I64) |
                                    FLOE_DTYPE_BIT(FLOE_BOOL));
  ck_assert_int_eq(a->def.u.type, FLOE_BOOL);
  a = floe__op_attr(op, "ln");
  ck_assert(a->has_min && !a->has_default);
  ck_assert_int_eq(a->min, 2);
  a = floe__op_attr(op, "sl");
  ck_assert_int_eq(a->kind, FLOE_ATTR_SHAPE_LIST);
  ck_assert_int_eq(a->def.kind, FLOE_ATTR_SHAPE_LIST);
  ck_assert_uint_eq(a->def.u.slist.n, 4);
  const FloeShape *sl = a->def.u.slist.v;
  ck_assert_int_eq(sl[0].rank, 2);
  ck_assert_int_eq(sl[0].dims[0], 2);
  ck_assert_int_eq(sl[0].dims[1], 3);
  ck_assert_int_eq(sl[1].rank, FLOE_RANK_UNKNOWN);
  ck_assert_int_eq(sl[2].rank, 0);
  ck_assert_int_eq(sl[3].rank, 2);
  ck_assert_int_eq(sl[3].dims[0], FLOE_DIM_UNKNOWN);
  ck_assert_int_eq(sl[3].dims[1], 4);
  char buf[128];
  ck_assert_str_eq(floe__attr_value_str(&a->def, buf, sizeof buf), "[[2,3],<unknown>,[],[?,4]]");
  ck_assert_str_eq(floe__attr_kind_name(a->kind), "list(shape)");
  a = floe__op_attr(op, "sl0");
  ck_assert(a->has_min && a->min == 1 && !a->has_default);
  a = floe__op_attr(op, "sle");
  ck_assert(a->has_default);
  ck_assert_uint_eq(a->def.u.slist.n, 0);
  floe_status_free(st);
}
END_TEST

START_TEST(op_without_specs_and_doc) {
  FloeStatus *st = floe_status_new();
  FloeOpDef def = {.struct_size = sizeof def, .name = "GrammarEmpty", .flags = FLOE_OP_STATEFUL,
                   .doc = "does nothing"};
  ck_assert_int_eq(floe__op_register(&def, "test", st), FLOE_OK);
  const FloeOpInfo *op = floe__op_lookup("GrammarEmpty");
  ck_assert_int_eq(op->num_inputs + op->num_outputs + op->num_attrs, 0);
  ck_assert_uint_eq(op->flags, FLOE_OP_STATEFUL);
  ck_assert_str_eq(op->doc, "does nothing");
  ck_assert_ptr_null(op->shape_fn);
  /* A struct from a plugin built before doc/shape_fn existed is read without them. */
  FloeOpDef old = {.struct_size = offsetof(FloeOpDef, shape_fn), .name = "GrammarOld",
                   .doc = "must not be read"};
  ck_assert_int_eq(floe__op_register(&old, "test", st), FLOE_OK);
  ck_assert_ptr_null(floe__op_lookup("GrammarOld")->doc);
  floe_status_free(st);
}
END_TEST

/* ---- errors ----------------------------------------------------------------------- */

typedef struct BadSpec {
  const char *in, *out, *attr; /* one spec each (NULL: none) */
  const char *culprit;         /* the spec the message must quote */
  const char *reason;          /* a phrase of the reason */
} BadSpec;

static const BadSpec bad_specs[] = {
    /* inputs typed by missing or non-type attributes */
    {"x: Q", NULL, "T: type", "x: Q", "'Q' is neither a dtype nor an attribute"},
    {"x: alpha", NULL, "alpha: float", "x: alpha", "'alpha' is an attribute of kind float"},
    {NULL, "y: n", "n: int", "y: n", "'n' is an attribute of kind int"},
    /* list lengths */
    {"v: N*T", NULL, "N: float; T: type", "v: N*T", "must be an int attribute"},
    {"v: K*f32", NULL, "T: type", "v: K*f32", "'K' is not an attribute"},
    {"v: N*L", NULL, "N: int; L: list(type)", "v: N*L", "list(type) attribute cannot be"},
    /* argument syntax */
    {"x T", NULL, "T: type", "x T", "expected ':'"},
    {"x:", NULL, "T: type", "x:", "expected a type"},
    {"x: T extra", NULL, "T: type", "x: T extra", "unexpected 'extra'"},
    {"1x: T", NULL, "T: type", "1x: T", "expected an argument name"},
    {"", NULL, NULL, "", "expected an argument name"},
    /* attribute syntax */
    {NULL, NULL, "k: foo", "k: foo", "unknown attribute kind 'foo'"},
    {NULL, NULL, "k: list(str)", "k: list(str)", "unknown list kind"},
    {NULL, NULL, "k: list(int", "k: list(int", "expected ')'"},
    {NULL, NULL, "n: int = 1.5", "n: int = 1.5", "'1.5' is not an integer"},
    {NULL, NULL, "f: float = fast", "f: float = fast", "'fast' is not a number"},
    {NULL, NULL, "b: bool = yes", "b: bool = yes", "'yes' is not true or false"},
    {NULL, NULL, "t: tensor = 1", "t: tensor = 1", "cannot have a default"},
    {NULL, NULL, "T: type in {f32", "T: type in {f32", "missing '}'"},
    {NULL, NULL, "T: type in {f33}", "T: type in {f33}", "'f33' is neither a dtype nor a type set"},
    {NULL, NULL, "T: type in {}", "T: type in {}", "empty type set"},
    {NULL, NULL, "T: type in {f32,}", "T: type in {f32,}", "empty element"},
    {NULL, NULL, "T: type in {i32} = f32", "T: type in {i32} = f32", "f32 is not in the allowed"},
    {NULL, NULL, "T: type = f99", "T: type = f99", "'f99' is not a dtype"},
    {NULL, NULL, "n: int >= 2 = 1", "n: int >= 2 = 1", "below the minimum 2"},
    {NULL, NULL, "l: list(int) >= 2 = [1]", "l: list(int) >= 2 = [1]", "fewer than the minimum"},
    {NULL, NULL, "x: int in {f32}", "x: int in {f32}", "applies only to type"},
    {NULL, NULL, "f: float >= 1", "f: float >= 1", "applies only to int and list"},
    {NULL, NULL, "n: int >= x", "n: int >= x", "expected an integer after '>='"},
    {NULL, NULL, "s: shape = [2,x]", "s: shape = [2,x]", "'x' is not a size"},
    {NULL, NULL, "s: shape = 2", "s: shape = 2", "expected a list"},
    {NULL, NULL, "s: shape = [1,2,3,4,5,6,7,8,9]", "s: shape = [1,2,3,4,5,6,7,8,9]",
     "more than 8 dimensions"},
    {NULL, NULL, "n: int =", "n: int =", "missing default value"},
    {NULL, NULL, "l: list(int) = [1,,2]", "l: list(int) = [1,,2]", "empty element"},
    {NULL, NULL, "l: list(float) = [1,a]", "l: list(float) = [1,a]", "'a' is not a number"},
    {NULL, NULL, "l: list(type) = [f32,x]", "l: list(type) = [f32,x]", "'x' is not a dtype"},
    {NULL, NULL, "l: list(shape) = [[2,x]]", "l: list(shape) = [[2,x]]", "'x' is not a size"},
    {NULL, NULL, "l: list(shape) = [[2],,[3]]", "l: list(shape) = [[2],,[3]]", "empty element"},
    {NULL, NULL, "l: list(shape) = [2,3]", "l: list(shape) = [2,3]", "expected a list like"},
    {NULL, NULL, "l: list(shape) = [[1]", "l: list(shape) = [[1]", "expected a list"},
    {NULL, NULL, "l: list(shape) >= 2 = [[1]]", "l: list(shape) >= 2 = [[1]]",
     "fewer than the minimum"},
    {NULL, NULL, "l: list(shap)", "l: list(shap)", "list(shape)"},
    {NULL, NULL, "s: string = \"abc", "s: string = \"abc", "unterminated string"},
    {NULL, NULL, "n int", "n int", "expected ':'"},
    /* duplicate names */
    {NULL, NULL, "T: type; T: int", "T: int", "duplicate name 'T'"},
    {"x: T; x: T", NULL, "T: type", "x: T", "duplicate name 'x'"},
    {"x: T", "x: T", "T: type", "x: T", "duplicate name 'x'"},
    {"T: f32", NULL, "T: type", "T: type", "duplicate name 'T'"},
};

/* Splits "a; b" (a copy in buf) into specs. */
static size_t split(const char *s, char *buf, const char **out) {
  size_t n = 0;
  if (!s) return 0;
  strcpy(buf, s);
  for (char *p = buf;;) {
    char *semi = strchr(p, ';');
    if (semi) *semi = '\0';
    while (*p == ' ') p++;
    out[n++] = p;
    if (!semi) return n;
    p = semi + 1;
  }
}

START_TEST(bad_spec_names_op_and_spec) {
  const BadSpec *b = &bad_specs[_i];
  char name[32], bi[128], bo[128], ba[128], want[256];
  const char *in[4], *out[4], *attrs[4];
  snprintf(name, sizeof name, "BadSpec%d", _i);
  FloeOpDef def = {.struct_size = sizeof def, .name = name};
  def.num_inputs = split(b->in, bi, in);
  def.num_outputs = split(b->out, bo, out);
  def.num_attrs = split(b->attr, ba, attrs);
  def.inputs = in;
  def.outputs = out;
  def.attrs = attrs;
  FloeStatus *st = floe_status_new();
  ck_assert_int_eq(floe__op_register(&def, "test", st), FLOE_INVALID_ARGUMENT);
  const char *msg = floe_status_message(st);
  snprintf(want, sizeof want, "op '%s'", name);
  ck_assert_msg(strstr(msg, want), "case %d: '%s' lacks %s", _i, msg, want);
  snprintf(want, sizeof want, "spec \"%s\"", b->culprit);
  ck_assert_msg(strstr(msg, want), "case %d: '%s' lacks %s", _i, msg, want);
  ck_assert_msg(strstr(msg, b->reason), "case %d: '%s' lacks '%s'", _i, msg, b->reason);
  /* Nothing of a refused op is left behind. */
  ck_assert_ptr_null(floe__op_lookup(name));
  floe_status_free(st);
}
END_TEST

START_TEST(bad_definitions) {
  FloeStatus *st = floe_status_new();
  FloeOpDef def = {.struct_size = sizeof def, .name = "9Lives"};
  ck_assert_int_eq(floe__op_register(&def, "test", st), FLOE_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(floe_status_message(st), "'9Lives' is not an identifier"));
  def.name = NULL;
  ck_assert_int_eq(floe__op_register(&def, "test", st), FLOE_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(floe_status_message(st), "(null)"));

  def.name = "BadCounts";
  def.num_inputs = 2; /* with inputs NULL */
  ck_assert_int_eq(floe__op_register(&def, "test", st), FLOE_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(floe_status_message(st), "op 'BadCounts'"));
  ck_assert_ptr_nonnull(strstr(floe_status_message(st), "NULL"));

  FloeOpDef flags = {.struct_size = sizeof flags, .name = "BadFlags", .flags = FLOE__OP_SOURCE};
  ck_assert_int_eq(floe__op_register(&flags, "myplug", st), FLOE_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(floe_status_message(st), "'BadFlags' of plugin 'myplug'"));
  ck_assert_ptr_nonnull(strstr(floe_status_message(st), "0x100"));

  FloeOpDef tiny = {.struct_size = 8, .name = "Tiny"};
  ck_assert_int_eq(floe__op_register(&tiny, "test", st), FLOE_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(floe_status_message(st), "struct_size 8"));
  ck_assert_int_eq(floe__op_register(NULL, "test", st), FLOE_INVALID_ARGUMENT);
  ck_assert_ptr_null(floe__op_lookup("Tiny"));
  floe_status_free(st);
}
END_TEST

/* ---- registry ---------------------------------------------------------------------- */

START_TEST(lookup_and_duplicates) {
  FloeStatus *st = floe_status_new();
  ck_assert_ptr_null(floe__op_lookup("NoSuchOp"));
  ck_assert_ptr_null(floe__op_lookup(NULL));
  ck_assert_int_eq(floe_op_exists("NoSuchOp"), 0);
  ck_assert_int_eq(floe_op_exists("MatMul"), 1);
  int before = floe_op_count();

  const char *in[] = {"x: T", NULL}, *out[] = {"y: T", NULL}, *attrs[] = {"T: type", NULL};
  ck_assert_int_eq(reg("DupOp", in, out, attrs, st), FLOE_OK);
  const FloeOpInfo *first = floe__op_lookup("DupOp");
  ck_assert_int_eq(floe_op_count(), before + 1);
  ck_assert_str_eq(floe_op_name(before), "DupOp");
  ck_assert_ptr_null(floe_op_name(before + 1));
  ck_assert_ptr_null(floe_op_name(-1));

  /* The same definition from the same plugin again (a second runtime): accepted, no copy. */
  ck_assert_int_eq(reg("DupOp", in, out, attrs, st), FLOE_OK);
  ck_assert_ptr_eq(floe__op_lookup("DupOp"), first);
  ck_assert_int_eq(floe_op_count(), before + 1);

  /* A different definition under the same name names the owner. */
  const char *attrs2[] = {"T: type in {f32}", NULL};
  ck_assert_int_eq(reg("DupOp", in, out, attrs2, st), FLOE_ALREADY_EXISTS);
  ck_assert_ptr_nonnull(strstr(floe_status_message(st), "'DupOp' is already defined by plugin 'test'"));
  FloeOpDef same = {.struct_size = sizeof same, .name = "DupOp", .inputs = in, .num_inputs = 1,
                    .outputs = out, .num_outputs = 1, .attrs = attrs, .num_attrs = 1};
  ck_assert_int_eq(floe__op_register(&same, "other", st), FLOE_ALREADY_EXISTS);

  /* Standard names cannot be taken. */
  const char *ab[] = {"x: T", "y: T", NULL}, *z[] = {"z: T", NULL}, *t[] = {"T: type", NULL};
  ck_assert_int_eq(reg("Add", ab, z, t, st), FLOE_ALREADY_EXISTS);
  ck_assert_ptr_nonnull(strstr(floe_status_message(st), "by the standard op set"));
  ck_assert_ptr_null(floe__op_lookup("Add")->plugin);
  ck_assert_int_eq(floe_op_count(), before + 1);
  floe_status_free(st);
}
END_TEST

/* Counts of the standard set taken from the .def files themselves (in ops_std.c's order). */
typedef struct DefLine {
  const char *name, *in, *out, *attrs;
  uint32_t flags;
  int has_shape_fn;
  const char *doc;
} DefLine;

/* A shape function named NULL stringizes to "NULL" (5 bytes with its terminator). */
#define FLOE_OP(name, in, out, attrs, flags, fn, doc) \
  {#name, in, out, attrs, flags, sizeof(#fn) != 5, doc},
static const DefLine def_lines[] = {
#include "ops_std.def"
#include "ops_control.def"
#include "ops_data.def"
#include "ops_rnn.def"
#include "ops_conv.def"
#include "ops_math_signal.def"
#include "ops_index.def"
#include "ops_resize.def"
#include "ops_text_features.def"
#include "ops_convgrad.def"
#include "ops_collective.def"
};
#undef FLOE_OP

/* Number of ';'-separated specs in a def string ("" has none). */
static int count_specs(const char *s) {
  if (!*s) return 0;
  int n = 1;
  for (; *s; s++) n += *s == ';';
  return n;
}

START_TEST(standard_set_matches_def) {
  int n = (int)(sizeof def_lines / sizeof def_lines[0]);
  ck_assert_int_ge(n, 70);
  ck_assert_int_eq(floe__ops_init(NULL), FLOE_OK);
  ck_assert_int_ge(floe_op_count(), n);
  for (int i = 0; i < n; i++) {
    const DefLine *d = &def_lines[i];
    const FloeOpInfo *op = floe__op_lookup(d->name);
    ck_assert_msg(op != NULL, "standard op %s missing", d->name);
    /* The standard set comes first, in file order. */
    ck_assert_str_eq(floe_op_name(i), d->name);
    ck_assert_ptr_null(op->plugin);
    ck_assert_msg(op->num_inputs == count_specs(d->in), "%s inputs", d->name);
    ck_assert_msg(op->num_outputs == count_specs(d->out), "%s outputs", d->name);
    ck_assert_msg(op->num_attrs == count_specs(d->attrs), "%s attrs", d->name);
    ck_assert_uint_eq(op->flags, d->flags);
    ck_assert_msg((op->shape_fn != NULL) == d->has_shape_fn, "%s shape_fn", d->name);
    ck_assert_msg(op->doc && !strcmp(op->doc, d->doc), "%s doc", d->name);
  }
}
END_TEST

/* Every standard op of the registry (walked through the public API, as `floe ops` does) has a
 * description: one to three plain-ASCII sentences of reasonable length (ops_std.def). */
START_TEST(standard_ops_have_docs) {
  ck_assert_int_eq(floe__ops_init(NULL), FLOE_OK);
  int n = floe_op_count(), checked = 0;
  for (int i = 0; i < n; i++) {
    const char *name = floe_op_name(i);
    ck_assert_ptr_nonnull(name);
    if (floe_op_plugin(name)) continue; /* a plugin's op: its doc is optional */
    checked++;
    const char *doc = floe_op_doc(name);
    ck_assert_msg(doc && *doc, "standard op %s has no doc", name);
    size_t len = strlen(doc);
    ck_assert_msg(len >= 16 && len <= 300, "doc of %s has %zu characters (16 to 300)", name, len);
    for (size_t k = 0; k < len; k++)
      ck_assert_msg(doc[k] >= 0x20 && doc[k] < 0x7f && !(doc[k] == ' ' && doc[k + 1] == ' '),
                    "doc of %s: character %zu is not plain ASCII text: \"%s\"", name, k, doc);
    ck_assert_msg(doc[0] != ' ' && doc[len - 1] == '.' && doc[len - 2] != ' ',
                  "doc of %s must be sentences ending with a period: \"%s\"", name, doc);
    ck_assert_msg(strncmp(doc, "This op", 7) != 0, "doc of %s: say what it computes", name);
    ck_assert_str_eq(floe__op_lookup(name)->doc, doc);
  }
  ck_assert_int_eq(checked, (int)(sizeof def_lines / sizeof def_lines[0]));
}
END_TEST

START_TEST(standard_set_details) {
  const FloeOpInfo *op = floe__op_lookup("Concat");
  ck_assert_str_eq(op->inputs[0].number_attr, "N");
  ck_assert_str_eq(op->inputs[0].type_attr, "T");
  ck_assert_str_eq(op->inputs[1].type_attr, "Tidx");
  ck_assert_int_eq(floe__op_attr(op, "N")->min, 1);
  ck_assert_int_eq(floe__op_attr(op, "Tidx")->def.u.type, FLOE_I32);

  op = floe__op_lookup("Split");
  ck_assert_int_eq(op->inputs[1].fixed, FLOE_I32);
  ck_assert_str_eq(op->outputs[0].number_attr, "num_split");

  op = floe__op_lookup("Conv2D");
  const FloeAttrDef *a = floe__op_attr(op, "dilations");
  ck_assert_uint_eq(a->def.u.ilist.n, 4);
  for (int i = 0; i < 4; i++) ck_assert_int_eq(a->def.u.ilist.v[i], 1);
  ck_assert(!floe__op_attr(op, "strides")->has_default);
  ck_assert_str_eq(floe__op_attr(op, "data_format")->def.u.s, "NHWC");
  ck_assert_uint_eq(floe__op_attr(op, "T")->allowed, FLOE_DTYPES_FLOAT);

  op = floe__op_lookup("Placeholder");
  ck_assert_int_eq(floe__op_attr(op, "shape")->def.u.shape.rank, FLOE_RANK_UNKNOWN);
  ck_assert(op->flags & FLOE__OP_SOURCE);
  ck_assert_str_eq(op->outputs[0].type_attr, "dtype");

  ck_assert_int_eq(floe__op_lookup("Rank")->outputs[0].fixed, FLOE_I32);
  ck_assert_uint_eq(floe__op_lookup("RandomUniform")->flags, FLOE_OP_STATEFUL);
  ck_assert_double_eq(floe__op_attr(floe__op_lookup("LeakyRelu"), "alpha")->def.u.f, 0.2);
  ck_assert_int_eq(floe__op_attr(floe__op_lookup("Softmax"), "axis")->def.u.i, -1);
  ck_assert_int_eq(floe__op_attr(floe__op_lookup("Gelu"), "approximate")->def.u.b, 0);
  ck_assert_uint_eq(floe__op_attr(floe__op_lookup("Squeeze"), "squeeze_dims")->def.u.ilist.n, 0);
  ck_assert_uint_eq(floe__op_attr(floe__op_lookup("OneHot"), "TI")->allowed,
                    FLOE_DTYPE_BIT(FLOE_U8) | FLOE_DTYPE_BIT(FLOE_I32) | FLOE_DTYPE_BIT(FLOE_I64));
  ck_assert_int_eq(floe__op_lookup("LogicalAnd")->inputs[1].fixed, FLOE_BOOL);
  ck_assert_int_eq(floe__op_lookup("SoftmaxCrossEntropyWithLogits")->num_outputs, 2);
  ck_assert_ptr_null(floe__op_lookup("NoOp")->shape_fn);
}
END_TEST

/* ---- threads and allocation failure ------------------------------------------------ */

#define THREADS 8
#define OPS_PER_THREAD 50

static void *thread_body(void *arg) {
  long t = (long)arg;
  FloeStatus *st = floe_status_new();
  const char *in[] = {"x: T", NULL}, *out[] = {"y: T", NULL}, *attrs[] = {"T: type = f32", NULL};
  long bad = 0;
  if (floe__ops_init(st) != FLOE_OK) bad++;
  for (int i = 0; i < OPS_PER_THREAD; i++) {
    char name[32];
    snprintf(name, sizeof name, "Thr%ldOp%d", t, i);
    if (reg(name, in, out, attrs, st) != FLOE_OK) bad++;
    if (!floe__op_lookup(name) || !floe__op_lookup("Conv2D") || !floe_op_exists("Add")) bad++;
  }
  floe_status_free(st);
  return (void *)bad;
}

START_TEST(concurrent_init_register_lookup) {
  pthread_t th[THREADS];
  for (long t = 0; t < THREADS; t++) ck_assert_int_eq(pthread_create(&th[t], NULL, thread_body, (void *)t), 0);
  for (int t = 0; t < THREADS; t++) {
    void *bad;
    pthread_join(th[t], &bad);
    ck_assert_int_eq((long)bad, 0);
  }
  int std_ops = (int)(sizeof def_lines / sizeof def_lines[0]);
  ck_assert_int_ge(floe_op_count(), std_ops + THREADS * OPS_PER_THREAD);
  for (long t = 0; t < THREADS; t++)
    for (int i = 0; i < OPS_PER_THREAD; i++) {
      char name[32];
      snprintf(name, sizeof name, "Thr%ldOp%d", t, i);
      const FloeOpInfo *op = floe__op_lookup(name);
      ck_assert_ptr_nonnull(op);
      ck_assert_str_eq(op->name, name);
    }
  /* The standard set was registered exactly once. */
  for (int i = 0; i < std_ops; i++) ck_assert_str_eq(floe_op_name(i), def_lines[i].name);
}
END_TEST

START_TEST(init_survives_allocation_failure) {
  /* Runs first in its (forked) process, so the standard set is not registered yet. */
  FloeStatus *st = floe_status_new();
  int std_ops = (int)(sizeof def_lines / sizeof def_lines[0]);
  long n;
  floe_code c = FLOE_NO_MEMORY;
  for (n = 1; n < 100000 && c == FLOE_NO_MEMORY; n++) {
    floe_test_fail_alloc_after(n);
    c = floe__ops_init(st);
    floe_test_fail_alloc_after(0);
  }
  ck_assert_int_eq(c, FLOE_OK);
  /* Without fork (valgrind runs) earlier tests already registered the set. */
  const char *fork = getenv("CK_FORK");
  if (!fork || strcmp(fork, "no") != 0) {
    ck_assert_int_gt(n, 2); /* some allocation really was failed */
    ck_assert_int_eq(floe_op_count(), std_ops);
  }
  for (int i = 0; i < std_ops; i++) ck_assert_str_eq(floe_op_name(i), def_lines[i].name);
  floe_status_free(st);
}
END_TEST

START_TEST(register_survives_allocation_failure) {
  FloeStatus *st = floe_status_new();
  ck_assert_int_eq(floe__ops_init(st), FLOE_OK);
  const char *in[] = {"x: T", "v: N*T", NULL}, *out[] = {"y: T", NULL};
  const char *attrs[] = {"T: type in {float} = f32", "N: int >= 1", "s: string = NHWC",
                         "l: list(int) = [1,2,3]", NULL};
  int before = floe_op_count();
  floe_code c = FLOE_NO_MEMORY;
  long n;
  for (n = 1; n < 100000 && c == FLOE_NO_MEMORY; n++) {
    floe_test_fail_alloc_after(n);
    c = reg("OomOp", in, out, attrs, st);
    floe_test_fail_alloc_after(0);
    if (c == FLOE_NO_MEMORY) {
      ck_assert_ptr_null(floe__op_lookup("OomOp"));
      ck_assert_int_eq(floe_op_count(), before);
    }
  }
  ck_assert_int_eq(c, FLOE_OK);
  ck_assert_int_gt(n, 10);
  ck_assert_int_eq(floe_op_count(), before + 1);
  ck_assert_uint_eq(floe__op_attr(floe__op_lookup("OomOp"), "l")->def.u.ilist.n, 3);
  floe_status_free(st);
}
END_TEST

static Suite *opdef_suite(void) {
  Suite *s = suite_create("opdef");
  TCase *tc = tcase_create("grammar");
  tcase_add_test(tc, args_every_form);
  tcase_add_test(tc, attrs_scalar_defaults);
  tcase_add_test(tc, attrs_lists_and_type_sets);
  tcase_add_test(tc, op_without_specs_and_doc);
  suite_add_tcase(s, tc);
  tc = tcase_create("errors");
  tcase_add_loop_test(tc, bad_spec_names_op_and_spec, 0,
                      (int)(sizeof bad_specs / sizeof bad_specs[0]));
  tcase_add_test(tc, bad_definitions);
  suite_add_tcase(s, tc);
  tc = tcase_create("registry");
  tcase_add_test(tc, lookup_and_duplicates);
  tcase_add_test(tc, standard_set_matches_def);
  tcase_add_test(tc, standard_ops_have_docs);
  tcase_add_test(tc, standard_set_details);
  suite_add_tcase(s, tc);
  tc = tcase_create("robustness");
  tcase_add_test(tc, concurrent_init_register_lookup);
  tcase_add_test(tc, init_survives_allocation_failure);
  tcase_add_test(tc, register_survives_allocation_failure);
  tcase_set_timeout(tc, 60);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(opdef_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
