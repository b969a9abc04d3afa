/* SPDX-License-Identifier: Apache-2.0 */
/* ops_std.c - the standard op set: each FLOE_OP entry of ops_std.def becomes a FloeOpDef
 * (its ';'-separated specs split apart, its doc as FloeOpDef.doc) registered through
 * floe__op_register, so the standard ops go through exactly the parser and checks that
 * plugins' custom ops do. */
#include <string.h>

#include "graph.h"
#include "ops_shape.h"

/* Ops without a shape function say NULL in ops_std.def; FLOE_OP pastes the prefix. */
#define floe__NULL NULL

typedef struct StdOp {
  const char *name;
  const char *inputs, *outputs, *attrs; /* ';'-separated specs */
  uint32_t flags;
  FloeShapeFn shape_fn;
  const char *doc;
} StdOp;

static const StdOp std_ops[] = {
#define FLOE_OP(name, inputs, outputs, attrs, flags, shape_fn, doc) \
  {#name, inputs, outputs, attrs, flags, floe__##shape_fn, doc},
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
#undef FLOE_OP
};

/* Longest spec list and most specs of one kind in ops_std.def, with room to spare. */
#define SPEC_BUF 1024
#define MAX_SPECS 32

typedef struct SpecList {
  char buf[SPEC_BUF];
  const char *specs[MAX_SPECS];
  size_t n;
} SpecList;

static void trim_in_place(char **s) {
  while (**s == ' ') (*s)++;
  size_t n = strlen(*s);
  while (n && (*s)[n - 1] == ' ') (*s)[--n] = '\0';
}

/* Splits "a; b; c" into trimmed specs living in l->buf; "" gives none. */
static floe_code split_specs(const char *op, const char *what, const char *text, SpecList *l,
                             FloeStatus *st) {
  l->n = 0;
  size_t len = strlen(text);
  if (len >= sizeof l->buf)
    return floe_status_set(st, FLOE_INTERNAL, "standard op '%s': %s specs longer than %d bytes",
                           op, what, SPEC_BUF - 1);
  memcpy(l->buf, text, len + 1);
  char *s = l->buf;
  trim_in_place(&s);
  if (!*s) return FLOE_OK;
  for (;;) {
    char *semi = strchr(s, ';');
    if (semi) *semi = '\0';
    if (l->n == MAX_SPECS)
      return floe_status_set(st, FLOE_INTERNAL, "standard op '%s': more than %d %s specs", op,
                             MAX_SPECS, what);
    trim_in_place(&s);
    l->specs[l->n++] = s;
    if (!semi) return FLOE_OK;
    s = semi + 1;
  }
}

floe_code floe__ops_std_register(FloeStatus *st) {
  /* Static: three lists of 1 KiB would be a lot of stack; callers hold the init lock. */
  static SpecList ins, outs, attrs;
  for (size_t i = 0; i < FLOE__ARRAY_LEN(std_ops); i++) {
    const StdOp *o = &std_ops[i];
    floe_code c;
    if ((c = split_specs(o->name, "input", o->inputs, &ins, st)) != FLOE_OK ||
        (c = split_specs(o->name, "output", o->outputs, &outs, st)) != FLOE_OK ||
        (c = split_specs(o->name, "attribute", o->attrs, &attrs, st)) != FLOE_OK)
      return c;
    FloeOpDef def = {
        .struct_size = sizeof def,
        .name = o->name,
        .inputs = ins.specs,
        .num_inputs = ins.n,
        .outputs = outs.specs,
        .num_outputs = outs.n,
        .attrs = attrs.specs,
        .num_attrs = attrs.n,
        .flags = o->flags,
        .shape_fn = o->shape_fn,
        .doc = o->doc,
    };
    if ((c = floe__op_register(&def, NULL, st)) != FLOE_OK) return c;
  }
  return FLOE_OK;
}
