/* SPDX-License-Identifier: Apache-2.0 */
/* cmd_inspect.c - floe inspect FILE: what a Floe graph, ONNX model, safetensors or .npy file
 * holds, recognised by its first bytes (not its name). */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <floe/floe_onnx.h>

#include "cli.h"
#include "table.h"

#define CMD "inspect"
#define SAFETENSORS_HEADER_MAX (100u << 20) /* 100 MB */

static const char inspect_help[] =
    "Usage: floe inspect FILE [--json]\n"
    "Summarise FILE, recognised by its content: a Floe graph (nodes by op, parameters,\n"
    "inputs, outputs, FLOPs per step), an ONNX model (the same, after import), a\n"
    "safetensors file (tensors, totals, metadata) or a .npy file (dtype, shape, order,\n"
    "min/max/mean). Parameters: a graph's variables, or without any its floating-point\n"
    "constants. FLOPs count MatMul and BatchMatMul (2*M*N*K), Conv2D and Conv\n"
    "(2*out*kh*kw*cin) and elementwise ops (one per output element); unknown dims count\n"
    "as 1 (FLOPs per example). --json prints the same as one JSON object.\n";

/* ---------------------------------------------------------------- shared helpers */

static void json_shape(JsonWriter *w, const FloeShape *s) {
  if (s->rank < 0) {
    json_null(w);
    return;
  }
  json_begin_array(w);
  for (int d = 0; d < s->rank; d++) s->dims[d] < 0 ? json_null(w) : json_int(w, s->dims[d]);
  json_end_array(w);
}

static const char *shape_text(const FloeShape *s, char *buf, size_t len) {
  if (s->rank < 0) return "unknown";
  return floe_shape_str(s, buf, len);
}

/* s with control characters (from a damaged file's names) as '?', so an error stays one
 * line; in place. */
static char *one_line(char *s) {
  for (char *p = s; p && *p; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f) *p = '?';
  return s;
}

/* A count (an integral double): an integer while exact, else the shortest double. */
static void json_count(JsonWriter *w, double v) {
  if (v >= 0 && v <= 9007199254740992.0 && v == floor(v)) json_uint(w, (uint64_t)v);
  else json_double(w, v);
}

/* A statistic: integral values as integers, others in the shortest form. */
static const char *num_text(char buf[32], double v) {
  if (v == floor(v) && fabs(v) < 9007199254740992.0) {
    snprintf(buf, 32, "%.0f", v);
    return buf;
  }
  return json_format_double(buf, v);
}

static void json_num(JsonWriter *w, double v) {
  if (v == floor(v) && fabs(v) < 9007199254740992.0) json_int(w, (int64_t)v);
  else json_double(w, v);
}

/* ---------------------------------------------------------------- graphs and ONNX models */

typedef struct {
  const char *op;
  int count;
} OpCount;

typedef struct {
  const FloeNode *node;
  int index;
} NodeIndex;

static int cmp_node_ptr(const void *a, const void *b) {
  uintptr_t x = (uintptr_t)((const NodeIndex *)a)->node, y = (uintptr_t)((const NodeIndex *)b)->node;
  return x < y ? -1 : x > y;
}

static int cmp_op_count(const void *a, const void *b) {
  const OpCount *x = a, *y = b;
  if (x->count != y->count) return y->count - x->count;
  return strcmp(x->op, y->op);
}

static int is_float_dtype(FloeDType dt) {
  return dt == FLOE_F32 || dt == FLOE_F64 || dt == FLOE_F16 || dt == FLOE_BF16;
}

static const char *const elementwise_ops[] = {
    "Add",   "AddV2", "Sub",     "Mul",     "Div",      "RealDiv", "Maximum", "Minimum",
    "Pow",   "Neg",   "Abs",     "Exp",     "Log",      "Sqrt",    "Rsqrt",   "Square",
    "Relu",  "Relu6", "Elu",     "Selu",    "LeakyRelu", "Sigmoid", "Tanh",   "BiasAdd",
    "Erf",   "Floor", "Ceil",    "Sign",    "Reciprocal", "SquaredDifference", "Softplus",
    "Gelu",  "Sin",   "Cos",     "Round",   NULL};

static int is_elementwise(const char *op) {
  for (int i = 0; elementwise_ops[i]; i++)
    if (!strcmp(op, elementwise_ops[i])) return 1;
  return 0;
}

/* Forward convolutions: Conv2D, Conv (N-d) and the fused ones the optimiser makes. */
static int is_conv(const char *op) {
  return !strcmp(op, "Conv2D") || !strcmp(op, "Conv") || !strcmp(op, "_FusedConv") ||
         !strcmp(op, "_FusedConv2DBiasRelu");
}

/* Elements of s with unknown dims counted as 1 (*unknown_dim set); -1 for an unknown rank. */
static double numel(const FloeShape *s, int *unknown_dim) {
  if (s->rank < 0) return -1;
  double n = 1;
  for (int d = 0; d < s->rank; d++) {
    if (s->dims[d] < 0) *unknown_dim = 1;
    else n *= (double)s->dims[d];
  }
  return n;
}

static int64_t dim1(const FloeShape *s, int d, int *unknown_dim) {
  if (s->dims[d] < 0) {
    *unknown_dim = 1;
    return 1;
  }
  return s->dims[d];
}

/* FLOPs of node n, or -1 when its shapes are not known; 0 for ops not counted. */
static double node_flops(const FloeNode *n, int *unknown_dim) {
  const char *op = floe_node_op(n);
  if (floe_node_num_outputs(n) < 1) return 0;
  FloeShape out = floe_node_output_shape(n, 0);
  if (!strcmp(op, "MatMul") || !strcmp(op, "BatchMatMul") || !strcmp(op, "BatchMatMulV2")) {
    if (floe_node_num_inputs(n) < 2) return 0;
    FloeOutput ia = floe_node_input(n, 0);
    FloeShape a = floe_node_output_shape(ia.node, ia.index);
    if (out.rank < 2 || a.rank < 2) return -1;
    /* a is [.., M, K] or [.., K, M] (transposed): K is its last two dims over M. */
    int64_t m = dim1(&out, out.rank - 2, unknown_dim);
    int64_t a2 = dim1(&a, a.rank - 2, unknown_dim) * dim1(&a, a.rank - 1, unknown_dim);
    if (m <= 0) return 0;
    return 2.0 * numel(&out, unknown_dim) * (double)(a2 / m);
  }
  if (is_conv(op)) {
    if (floe_node_num_inputs(n) < 2) return 0;
    FloeOutput ifl = floe_node_input(n, 1);
    /* The filter is [spatial..., in / groups, out] (HWIO for Conv2D): each output element
     * takes kh*kw*cin multiply-adds. */
    FloeShape f = floe_node_output_shape(ifl.node, ifl.index);
    if (out.rank < 0 || f.rank < 3) return -1;
    double k = 1;
    for (int d = 0; d < f.rank - 1; d++) k *= (double)dim1(&f, d, unknown_dim);
    return 2.0 * numel(&out, unknown_dim) * k;
  }
  if (is_elementwise(op)) return out.rank < 0 ? -1 : numel(&out, unknown_dim);
  return 0;
}

typedef struct {
  const char *name;
  FloeDType dtype;
  FloeShape shape;
} IoInfo;

static int summarize_graph(const char *path, const char *format, const FloeGraph *g,
                           const IoInfo *ins, int nin, const IoInfo *outs, int nout, int opset,
                           int json) {
  int nn = floe_graph_num_nodes(g);
  OpCount *ops = calloc((size_t)nn + 1, sizeof *ops);
  if (!ops) return cli_error(CMD, "out of memory");
  int nops = 0, flops_unknown = 0, unknown_dim = 0;
  double params = 0, param_bytes = 0, flops = 0, flops_mm = 0, flops_conv = 0, flops_ew = 0;
  double var_params = 0, var_bytes = 0;
  int nvars = 0, nseen = 0;
  const FloeNode **seen = calloc((size_t)nn + 1, sizeof *seen); /* variables counted */
  if (!seen) {
    free(ops);
    return cli_error(CMD, "out of memory");
  }
  for (int i = 0; i < nn; i++) {
    FloeNode *n = floe_graph_node(g, i);
    const char *op = floe_node_op(n);
    int k;
    for (k = 0; k < nops && strcmp(ops[k].op, op); k++) {}
    if (k == nops) ops[nops++].op = op;
    ops[k].count++;
    if ((!strcmp(op, "Const") || !strcmp(op, "Variable") || !strcmp(op, "VariableV2")) &&
        floe_node_num_outputs(n) > 0 && is_float_dtype(floe_node_output_dtype(n, 0))) {
      FloeShape s = floe_node_output_shape(n, 0);
      int unk = 0;
      double e = numel(&s, &unk);
      if (e >= 0 && !unk) {
        params += e;
        param_bytes += e * (double)floe_dtype_size(floe_node_output_dtype(n, 0));
      }
    }
    /* A variable's value shape is what reads it (or the value first assigned to it). */
    if (!strcmp(op, "VarHandleOp")) nvars++;
    int is_read = !strcmp(op, "ReadVariableOp"), is_assign = !strcmp(op, "AssignVariableOp");
    if ((is_read && floe_node_num_outputs(n) > 0) || (is_assign && floe_node_num_inputs(n) > 1)) {
      FloeNode *h = floe_node_input(n, 0).node;
      int s_i;
      for (s_i = 0; s_i < nseen && seen[s_i] != h; s_i++) {}
      FloeOutput v = is_read ? (FloeOutput){n, 0} : floe_node_input(n, 1);
      FloeShape vs = floe_node_output_shape(v.node, v.index);
      int unk = 0;
      double e = numel(&vs, &unk);
      if (h && s_i == nseen && !strcmp(floe_node_op(h), "VarHandleOp") && e >= 0 && !unk) {
        seen[nseen++] = h;
        var_params += e;
        var_bytes += e * (double)floe_dtype_size(floe_node_output_dtype(v.node, v.index));
      }
    }
    double f = node_flops(n, &unknown_dim);
    if (f < 0) flops_unknown++;
    else {
      flops += f;
      if (is_conv(op)) flops_conv += f;
      else if (strstr(op, "MatMul")) flops_mm += f;
      else flops_ew += f;
    }
  }
  qsort(ops, (size_t)nops, sizeof *ops, cmp_op_count);
  free(seen);
  /* A graph with variables (a training graph): they are its parameters (optimiser slots
   * included), its constants are hyperparameters. Without (frozen, ONNX): the floating-point
   * constants. */
  if (nvars) params = var_params, param_bytes = var_bytes;

  /* Outputs of a Floe graph: nodes with outputs that no node consumes. */
  IoInfo *gouts = NULL;
  if (!outs) {
    NodeIndex *idx = malloc(((size_t)nn + 1) * sizeof *idx);
    char *used = calloc((size_t)nn + 1, 1);
    gouts = calloc((size_t)nn + 1, sizeof *gouts);
    if (!idx || !used || !gouts) {
      free(idx), free(used), free(gouts), free(ops);
      return cli_error(CMD, "out of memory");
    }
    for (int i = 0; i < nn; i++) idx[i].node = floe_graph_node(g, i), idx[i].index = i;
    qsort(idx, (size_t)nn, sizeof *idx, cmp_node_ptr);
    for (int i = 0; i < nn; i++) {
      FloeNode *n = floe_graph_node(g, i);
      for (int k = 0; k < floe_node_num_inputs(n); k++) {
        NodeIndex key = {floe_node_input(n, k).node, 0};
        NodeIndex *hit = bsearch(&key, idx, (size_t)nn, sizeof *idx, cmp_node_ptr);
        if (hit) used[hit->index] = 1;
      }
      for (int k = 0; k < floe_node_num_control_inputs(n); k++) {
        NodeIndex key = {floe_node_control_input(n, k), 0};
        NodeIndex *hit = bsearch(&key, idx, (size_t)nn, sizeof *idx, cmp_node_ptr);
        if (hit) used[hit->index] = 1;
      }
    }
    nout = 0;
    for (int i = 0; i < nn; i++) {
      FloeNode *n = floe_graph_node(g, i);
      const char *op = floe_node_op(n);
      if (used[i] || floe_node_num_outputs(n) < 1 || !strcmp(op, "Placeholder") ||
          !strcmp(op, "Const"))
        continue;
      gouts[nout].name = floe_node_name(n);
      gouts[nout].dtype = floe_node_output_dtype(n, 0);
      gouts[nout].shape = floe_node_output_shape(n, 0);
      nout++;
    }
    outs = gouts;
    free(idx), free(used);
  }
  IoInfo *gins = NULL;
  if (!ins) {
    gins = calloc((size_t)nn + 1, sizeof *gins);
    if (!gins) {
      free(gouts), free(ops);
      return cli_error(CMD, "out of memory");
    }
    nin = 0;
    for (int i = 0; i < nn; i++) {
      FloeNode *n = floe_graph_node(g, i);
      if (strcmp(floe_node_op(n), "Placeholder") || floe_node_num_outputs(n) < 1) continue;
      gins[nin].name = floe_node_name(n);
      gins[nin].dtype = floe_node_output_dtype(n, 0);
      gins[nin].shape = floe_node_output_shape(n, 0);
      nin++;
    }
    ins = gins;
  }

  int rc = 0;
  if (json) {
    JsonWriter w;
    json_init(&w, stdout);
    json_begin_object(&w);
    json_key(&w, "file"), json_string(&w, path);
    json_key(&w, "format"), json_string(&w, format);
    if (opset > 0) json_key(&w, "opset"), json_int(&w, opset);
    json_key(&w, "nodes"), json_int(&w, nn);
    json_key(&w, "ops"), json_begin_array(&w);
    for (int k = 0; k < nops; k++) {
      json_begin_object(&w);
      json_key(&w, "op"), json_string(&w, ops[k].op);
      json_key(&w, "count"), json_int(&w, ops[k].count);
      json_end_object(&w);
    }
    json_end_array(&w);
    json_key(&w, "parameters"), json_count(&w, params);
    json_key(&w, "parameter_bytes"), json_count(&w, param_bytes);
    json_key(&w, "variables"), json_int(&w, nvars);
    for (int io = 0; io < 2; io++) {
      const IoInfo *v = io ? outs : ins;
      json_key(&w, io ? "outputs" : "inputs"), json_begin_array(&w);
      for (int i = 0; i < (io ? nout : nin); i++) {
        json_begin_object(&w);
        json_key(&w, "name"), json_string(&w, v[i].name);
        json_key(&w, "dtype"), json_string(&w, floe_dtype_name(v[i].dtype));
        json_key(&w, "shape"), json_shape(&w, &v[i].shape);
        json_end_object(&w);
      }
      json_end_array(&w);
    }
    json_key(&w, "flops");
    json_begin_object(&w);
    json_key(&w, "total"), json_count(&w, flops);
    json_key(&w, "matmul"), json_count(&w, flops_mm);
    json_key(&w, "conv"), json_count(&w, flops_conv);
    json_key(&w, "elementwise"), json_count(&w, flops_ew);
    json_key(&w, "per_example"), json_bool(&w, unknown_dim);
    json_key(&w, "nodes_unknown"), json_int(&w, flops_unknown);
    json_end_object(&w);
    json_end_object(&w);
    json_finish(&w);
  } else {
    printf("%s: %s", path, format);
    if (opset > 0) printf(" (opset %d)", opset);
    printf("\nnodes: %d\nparameters: %.0f (%.0f bytes)", nn, params, param_bytes);
    if (nvars) printf(" in %d variables (optimiser slots included)", nvars);
    printf("\n");
    printf("FLOPs%s: %.0f (MatMul %.0f, Conv %.0f, elementwise %.0f)",
           unknown_dim ? " per example (batch=1)" : " per step", flops, flops_mm, flops_conv,
           flops_ew);
    if (flops_unknown) printf("; %d nodes unknown (shapes not known)", flops_unknown);
    printf("\n");
    for (int io = 0; io < 2; io++) {
      const IoInfo *v = io ? outs : ins;
      int cnt = io ? nout : nin;
      printf("\n%s: %d\n", io ? "outputs" : "inputs", cnt);
      if (!cnt) continue;
      Table *t = table_new(3, "lll");
      if (!t) {
        rc = cli_error(CMD, "out of memory");
        break;
      }
      table_row(t, "NAME", "DTYPE", "SHAPE");
      for (int i = 0; i < cnt; i++) {
        char buf[200];
        table_row(t, v[i].name, floe_dtype_name(v[i].dtype), shape_text(&v[i].shape, buf, sizeof buf));
      }
      if (table_print(t, stdout)) rc = cli_error(CMD, "out of memory");
      table_free(t);
    }
    printf("\nnodes by op:\n");
    Table *t = table_new(2, "lr");
    if (!t) rc = cli_error(CMD, "out of memory");
    else {
      table_row(t, "OP", "COUNT");
      for (int k = 0; k < nops; k++) {
        char c[24];
        snprintf(c, sizeof c, "%d", ops[k].count);
        table_row(t, ops[k].op, c);
      }
      if (table_print(t, stdout)) rc = cli_error(CMD, "out of memory");
      table_free(t);
    }
  }
  free(gins), free(gouts), free(ops);
  return rc;
}

static int inspect_floe_graph(const char *path, int json) {
  if (!cli_runtime(CMD)) return 1;
  FloeStatus *st = floe_status_new();
  if (!st) return cli_error(CMD, "out of memory");
  FloeGraph *g = floe_graph_load(path, st);
  int rc;
  char *msg = g ? NULL : one_line(strdup(floe_status_message(st)));
  if (!g && !msg) rc = cli_error(CMD, "out of memory");
  else if (!g && strstr(msg, path)) rc = cli_error(CMD, "%s", msg);
  else if (!g) rc = cli_error(CMD, "%s: %s", path, msg);
  else rc = summarize_graph(path, "Floe graph", g, NULL, 0, NULL, 0, 0, json);
  free(msg);
  floe_graph_free(g);
  floe_status_free(st);
  return rc;
}

/* 1 when the model imports; 0 (with *err set, malloc'd) when not. -1 is a printed error. */
static int inspect_onnx(const char *path, int json, char **err, int *rc) {
  if (!cli_runtime(CMD)) return *rc = 1, -1;
  FloeStatus *st = floe_status_new();
  if (!st) return *rc = cli_error(CMD, "out of memory"), -1;
  FloeOnnxOptions o;
  floe_onnx_options_init(&o);
  FloeOnnxModel *m = floe_onnx_import_file(path, &o, st);
  if (!m) {
    *err = one_line(strdup(floe_status_message(st)));
    floe_status_free(st);
    return 0;
  }
  floe_status_free(st);
  int nin = floe_onnx_model_num_inputs(m), nout = floe_onnx_model_num_outputs(m);
  IoInfo *ins = calloc((size_t)nin + 1, sizeof *ins), *outs = calloc((size_t)nout + 1, sizeof *outs);
  if (!ins || !outs) {
    free(ins), free(outs), floe_onnx_model_free(m);
    return *rc = cli_error(CMD, "out of memory"), -1;
  }
  for (int i = 0; i < nin; i++) {
    ins[i].name = floe_onnx_model_input_name(m, i);
    ins[i].dtype = floe_onnx_model_input_dtype(m, i);
    ins[i].shape = floe_onnx_model_input_shape(m, i);
  }
  for (int i = 0; i < nout; i++) {
    FloeOutput o2 = floe_onnx_model_output(m, i);
    outs[i].name = floe_onnx_model_output_name(m, i);
    outs[i].dtype = floe_onnx_model_output_dtype(m, i);
    outs[i].shape = o2.node ? floe_node_output_shape(o2.node, o2.index) : floe_shape_unknown();
  }
  *rc = summarize_graph(path, "ONNX model", floe_onnx_model_graph(m), ins, nin, outs, nout,
                        floe_onnx_model_opset(m), json);
  free(ins), free(outs);
  floe_onnx_model_free(m);
  return 1;
}

/* ---------------------------------------------------------------- safetensors */

/* A bounded reader of the JSON header: every read checks p < end. */
typedef struct {
  const char *p, *start, *end;
  const char *err; /* what was wrong, at offset p - start */
} JP;

static void jp_ws(JP *j) {
  while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

static int jp_fail(JP *j, const char *what) {
  if (!j->err) j->err = what;
  return -1;
}

static int jp_char(JP *j, char c) {
  jp_ws(j);
  if (j->p >= j->end || *j->p != c) return -1;
  j->p++;
  return 0;
}

/* A JSON string into a malloc'd, NUL-terminated *out (\u escapes to UTF-8). */
static int jp_string(JP *j, char **out) {
  jp_ws(j);
  if (j->p >= j->end || *j->p != '"') return jp_fail(j, "expected a string");
  j->p++;
  size_t cap = 16, n = 0;
  char *s = malloc(cap);
  if (!s) return jp_fail(j, "out of memory");
  for (;;) {
    if (j->p >= j->end) {
      free(s);
      return jp_fail(j, "unterminated string");
    }
    unsigned char c = (unsigned char)*j->p++;
    char buf[4];
    size_t k = 1;
    if (c == '"') break;
    if (c < 0x20) {
      free(s);
      return jp_fail(j, "control character in a string");
    }
    buf[0] = (char)c;
    if (c == '\\') {
      if (j->p >= j->end) {
        free(s);
        return jp_fail(j, "unterminated string");
      }
      c = (unsigned char)*j->p++;
      const char *esc = strchr("\"\\/bfnrt", c);
      if (c && esc) buf[0] = "\"\\/\b\f\n\r\t"[esc - "\"\\/bfnrt"];
      else if (c == 'u' && j->end - j->p >= 4) {
        unsigned v = 0;
        for (int i = 0; i < 4; i++) {
          char h = *j->p++;
          v = v * 16 + (unsigned)(h >= '0' && h <= '9' ? h - '0'
                                  : h >= 'a' && h <= 'f' ? h - 'a' + 10
                                  : h >= 'A' && h <= 'F' ? h - 'A' + 10 : 99);
          if (v > 0xffff) break;
        }
        if (v > 0xffff || v == 0) {
          free(s);
          return jp_fail(j, "bad \\u escape");
        }
        if (v < 0x80) buf[0] = (char)v;
        else if (v < 0x800) buf[0] = (char)(0xc0 | v >> 6), buf[1] = (char)(0x80 | (v & 0x3f)), k = 2;
        else
          buf[0] = (char)(0xe0 | v >> 12), buf[1] = (char)(0x80 | ((v >> 6) & 0x3f)),
          buf[2] = (char)(0x80 | (v & 0x3f)), k = 3;
      } else {
        free(s);
        return jp_fail(j, "bad escape in a string");
      }
    }
    if (n + k + 1 > cap) {
      char *t = realloc(s, cap *= 2);
      if (!t) {
        free(s);
        return jp_fail(j, "out of memory");
      }
      s = t;
    }
    memcpy(s + n, buf, k);
    n += k;
  }
  s[n] = 0;
  *out = s;
  return 0;
}

/* A non-negative integer below 2^53. */
static int jp_uint(JP *j, uint64_t *v) {
  jp_ws(j);
  if (j->p >= j->end || *j->p < '0' || *j->p > '9') return jp_fail(j, "expected a non-negative integer");
  uint64_t x = 0;
  while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
    x = x * 10 + (uint64_t)(*j->p++ - '0');
    if (x > (1ull << 53)) return jp_fail(j, "integer too large");
  }
  *v = x;
  return 0;
}

/* Skips any JSON value (depth-limited). */
static int jp_skip(JP *j, int depth) {
  jp_ws(j);
  if (depth > 64) return jp_fail(j, "nested too deeply");
  if (j->p >= j->end) return jp_fail(j, "expected a value");
  char c = *j->p;
  if (c == '"') {
    char *s;
    if (jp_string(j, &s)) return -1;
    free(s);
    return 0;
  }
  if (c == '{' || c == '[') {
    char close = c == '{' ? '}' : ']';
    j->p++;
    if (!jp_char(j, close)) return 0;
    for (;;) {
      if (c == '{') {
        char *k;
        if (jp_string(j, &k)) return -1;
        free(k);
        if (jp_char(j, ':')) return jp_fail(j, "expected ':'");
      }
      if (jp_skip(j, depth + 1)) return -1;
      if (!jp_char(j, close)) return 0;
      if (jp_char(j, ',')) return jp_fail(j, "expected ',' or a closing bracket");
    }
  }
  const char *lits[] = {"true", "false", "null"};
  for (int i = 0; i < 3; i++) {
    size_t n = strlen(lits[i]);
    if ((size_t)(j->end - j->p) >= n && !memcmp(j->p, lits[i], n)) {
      j->p += n;
      return 0;
    }
  }
  if (c == '-' || (c >= '0' && c <= '9')) {
    while (j->p < j->end && strchr("+-.eE0123456789", *j->p) && *j->p) j->p++;
    return 0;
  }
  return jp_fail(j, "expected a value");
}

typedef struct {
  char *name, *dtype;
  int rank;
  uint64_t dims[FLOE_MAX_DIMS];
  uint64_t begin, end;
} StTensor;

static size_t st_dtype_size(const char *dt) {
  static const struct {
    const char *name;
    size_t size;
  } t[] = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4},
           {"I16", 2}, {"I8", 1},  {"U64", 8}, {"U32", 4},  {"U16", 2}, {"U8", 1},
           {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    if (!strcmp(dt, t[i].name)) return t[i].size;
  return 0;
}

/* One tensor's entry: {"dtype": .., "shape": [..], "data_offsets": [b, e]}. */
static int jp_tensor(JP *j, StTensor *t) {
  int have = 0;
  if (jp_char(j, '{')) return jp_fail(j, "expected '{' (a tensor's entry)");
  if (!jp_char(j, '}')) return jp_fail(j, "empty tensor entry");
  for (;;) {
    char *k;
    if (jp_string(j, &k)) return -1;
    if (jp_char(j, ':')) {
      free(k);
      return jp_fail(j, "expected ':'");
    }
    int r = 0;
    if (!strcmp(k, "dtype")) {
      free(t->dtype), t->dtype = NULL;
      r = jp_string(j, &t->dtype);
      if (!r && !st_dtype_size(t->dtype)) r = jp_fail(j, "unknown dtype");
      have |= 1;
    } else if (!strcmp(k, "shape")) {
      t->rank = 0;
      if (jp_char(j, '[')) r = jp_fail(j, "expected '[' (shape)");
      else if (jp_char(j, ']'))
        for (;;) {
          if (t->rank == FLOE_MAX_DIMS) {
            r = jp_fail(j, "shape has too many dims");
            break;
          }
          if ((r = jp_uint(j, &t->dims[t->rank++]))) break;
          if (!jp_char(j, ']')) break;
          if (jp_char(j, ',')) {
            r = jp_fail(j, "expected ',' or ']' (shape)");
            break;
          }
        }
      have |= 2;
    } else if (!strcmp(k, "data_offsets")) {
      if (jp_char(j, '[') || jp_uint(j, &t->begin) || jp_char(j, ',') || jp_uint(j, &t->end) ||
          jp_char(j, ']'))
        r = jp_fail(j, "expected [begin, end] (data_offsets)");
      have |= 4;
    } else r = jp_skip(j, 1);
    free(k);
    if (r) return -1;
    if (!jp_char(j, '}')) break;
    if (jp_char(j, ',')) return jp_fail(j, "expected ',' or '}'");
  }
  if (have != 7) return jp_fail(j, "tensor entry lacks dtype, shape or data_offsets");
  return 0;
}

static int inspect_safetensors(const char *path, FILE *f, uint64_t fsize, int json) {
  unsigned char lb[8];
  if (fseek(f, 0, SEEK_SET) || fread(lb, 1, 8, f) != 8)
    return cli_error(CMD, "%s: truncated: no 8-byte header length at offset 0", path);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | lb[i];
  if (hlen > SAFETENSORS_HEADER_MAX)
    return cli_error(CMD, "%s: header length %llu at offset 0 is over the %u-byte limit", path,
                     (unsigned long long)hlen, SAFETENSORS_HEADER_MAX);
  if (hlen > fsize - 8)
    return cli_error(CMD, "%s: truncated: header length %llu at offset 0 but the file has %llu bytes",
                     path, (unsigned long long)hlen, (unsigned long long)fsize);
  char *h = malloc(hlen + 1);
  if (!h) return cli_error(CMD, "out of memory");
  if (fread(h, 1, hlen, f) != hlen) {
    free(h);
    return cli_error(CMD, "%s: read error in the header: %s", path, strerror(errno));
  }
  uint64_t data_size = fsize - 8 - hlen;
  JP j = {h, h, h + hlen, NULL};
  StTensor *ts = NULL;
  char **meta = NULL; /* key, value pairs */
  size_t nt = 0, capt = 0, nm = 0, capm = 0;
  int rc = 0;
  if (jp_char(&j, '{')) jp_fail(&j, "expected '{'");
  else if (jp_char(&j, '}'))
    for (;;) {
      char *k;
      if (jp_string(&j, &k)) break;
      if (jp_char(&j, ':')) {
        free(k);
        jp_fail(&j, "expected ':'");
        break;
      }
      if (!strcmp(k, "__metadata__")) {
        free(k);
        if (jp_char(&j, '{')) {
          jp_fail(&j, "expected '{' (__metadata__)");
          break;
        }
        if (jp_char(&j, '}'))
          for (;;) {
            char *mk, *mv;
            if (jp_string(&j, &mk)) break;
            if (jp_char(&j, ':') || jp_string(&j, &mv)) {
              free(mk);
              jp_fail(&j, "expected ':' and a string (__metadata__)");
              break;
            }
            if (nm + 2 > capm) {
              char **t = realloc(meta, (capm = capm * 2 + 8) * sizeof *t);
              if (!t) {
                free(mk), free(mv);
                jp_fail(&j, "out of memory");
                break;
              }
              meta = t;
            }
            meta[nm++] = mk, meta[nm++] = mv;
            if (!jp_char(&j, '}')) break;
            if (jp_char(&j, ',')) {
              jp_fail(&j, "expected ',' or '}' (__metadata__)");
              break;
            }
          }
        if (j.err) break;
      } else {
        if (nt == capt) {
          StTensor *t = realloc(ts, (capt = capt * 2 + 8) * sizeof *t);
          if (!t) {
            free(k);
            jp_fail(&j, "out of memory");
            break;
          }
          ts = t;
        }
        memset(&ts[nt], 0, sizeof ts[nt]);
        ts[nt].name = k;
        nt++;
        if (jp_tensor(&j, &ts[nt - 1])) break;
      }
      if (!jp_char(&j, '}')) break;
      if (jp_char(&j, ',')) {
        jp_fail(&j, "expected ',' or '}'");
        break;
      }
    }
  if (j.err)
    rc = cli_error(CMD, "%s: bad safetensors header at offset %llu: %s", path,
                   (unsigned long long)(8 + (uint64_t)(j.p - j.start)), j.err);
  double params = 0, bytes = 0;
  for (size_t i = 0; i < nt && !rc; i++) {
    StTensor *t = &ts[i];
    one_line(t->name);
    double e = 1;
    for (int d = 0; d < t->rank; d++) e *= (double)t->dims[d];
    double want = e * (double)st_dtype_size(t->dtype);
    if (t->end < t->begin || t->end > data_size)
      rc = cli_error(CMD, "%s: tensor '%s': data_offsets [%llu, %llu] outside the %llu data bytes",
                     path, t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                     (unsigned long long)data_size);
    else if ((double)(t->end - t->begin) != want)
      rc = cli_error(CMD, "%s: tensor '%s': data_offsets hold %llu bytes, its dtype and shape need %.0f",
                     path, t->name, (unsigned long long)(t->end - t->begin), want);
    params += e, bytes += want;
  }
  if (!rc && json) {
    JsonWriter w;
    json_init(&w, stdout);
    json_begin_object(&w);
    json_key(&w, "file"), json_string(&w, path);
    json_key(&w, "format"), json_string(&w, "safetensors");
    json_key(&w, "tensors"), json_begin_array(&w);
    for (size_t i = 0; i < nt; i++) {
      json_begin_object(&w);
      json_key(&w, "name"), json_string(&w, ts[i].name);
      json_key(&w, "dtype"), json_string(&w, ts[i].dtype);
      json_key(&w, "shape"), json_begin_array(&w);
      for (int d = 0; d < ts[i].rank; d++) json_uint(&w, ts[i].dims[d]);
      json_end_array(&w);
      json_key(&w, "bytes"), json_uint(&w, ts[i].end - ts[i].begin);
      json_end_object(&w);
    }
    json_end_array(&w);
    json_key(&w, "parameters"), json_count(&w, params);
    json_key(&w, "bytes"), json_count(&w, bytes);
    json_key(&w, "metadata"), json_begin_object(&w);
    for (size_t i = 0; i < nm; i += 2) json_key(&w, meta[i]), json_string(&w, meta[i + 1]);
    json_end_object(&w);
    json_end_object(&w);
    json_finish(&w);
  } else if (!rc) {
    printf("%s: safetensors\ntensors: %zu\nparameters: %.0f (%.0f bytes)\n\n", path, nt, params,
           bytes);
    Table *t = table_new(4, "llrl");
    if (!t) rc = cli_error(CMD, "out of memory");
    else {
      table_row(t, "DTYPE", "SHAPE", "BYTES", "NAME");
      for (size_t i = 0; i < nt; i++) {
        char shape[200], b[32];
        int len = snprintf(shape, sizeof shape, "[");
        for (int d = 0; d < ts[i].rank; d++)
          len += snprintf(shape + len, sizeof shape - (size_t)len, "%s%llu", d ? "," : "",
                          (unsigned long long)ts[i].dims[d]);
        snprintf(shape + len, sizeof shape - (size_t)len, "]");
        snprintf(b, sizeof b, "%llu", (unsigned long long)(ts[i].end - ts[i].begin));
        table_row(t, ts[i].dtype, shape, b, ts[i].name);
      }
      if (table_print(t, stdout)) rc = cli_error(CMD, "out of memory");
      table_free(t);
    }
    printf("\nmetadata: %zu\n", nm / 2);
    for (size_t i = 0; i < nm; i += 2) printf("  %s: %s\n", meta[i], meta[i + 1]);
  }
  for (size_t i = 0; i < nt; i++) free(ts[i].name), free(ts[i].dtype);
  for (size_t i = 0; i < nm; i++) free(meta[i]);
  free(ts), free(meta), free(h);
  return rc;
}

/* ---------------------------------------------------------------- .npy */

/* The value of 'key' in the header dict: a pointer just past "'key':" and spaces, or NULL. */
static const char *npy_field(const char *h, const char *key) {
  char pat[32];
  snprintf(pat, sizeof pat, "'%s'", key);
  const char *p = strstr(h, pat);
  if (!p) return NULL;
  p += strlen(pat);
  while (*p == ' ') p++;
  if (*p != ':') return NULL;
  p++;
  while (*p == ' ') p++;
  return p;
}

static double half_to_double(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
  return h & 0x8000 ? -v : v;
}

static int inspect_npy(const char *path, FILE *f, uint64_t fsize, int json) {
  unsigned char pre[12];
  if (fseek(f, 0, SEEK_SET) || fread(pre, 1, 10, f) != 10)
    return cli_error(CMD, "%s: truncated .npy preamble (needs 10 bytes at offset 0)", path);
  int major = pre[6];
  uint64_t hlen, hoff;
  if (major == 1) hlen = (uint64_t)pre[8] | (uint64_t)pre[9] << 8, hoff = 10;
  else if (major == 2 || major == 3) {
    if (fread(pre + 10, 1, 2, f) != 2)
      return cli_error(CMD, "%s: truncated .npy header length at offset 8", path);
    hlen = (uint64_t)pre[8] | (uint64_t)pre[9] << 8 | (uint64_t)pre[10] << 16 | (uint64_t)pre[11] << 24;
    hoff = 12;
  } else
    return cli_error(CMD, "%s: unsupported .npy version %d.%d at offset 6", path, major, pre[7]);
  if (hlen > fsize - hoff || hlen > (1u << 20))
    return cli_error(CMD, "%s: truncated: .npy header length %llu at offset 8, file has %llu bytes",
                     path, (unsigned long long)hlen, (unsigned long long)fsize);
  char *h = malloc(hlen + 1);
  if (!h) return cli_error(CMD, "out of memory");
  if (fread(h, 1, hlen, f) != hlen) {
    free(h);
    return cli_error(CMD, "%s: read error in the .npy header: %s", path, strerror(errno));
  }
  h[hlen] = 0;
  size_t hstr = strlen(h);
  if (hstr != hlen) {
    free(h);
    return cli_error(CMD, "%s: NUL byte in the .npy header at offset %llu", path,
                     (unsigned long long)(hoff + hstr));
  }
  char descr[32] = "";
  int fortran = -1, rank = 0;
  uint64_t dims[32];
  const char *p = npy_field(h, "descr");
  if (p && *p == '\'') {
    const char *q = strchr(p + 1, '\'');
    if (q && q - p - 1 < (long)sizeof descr) memcpy(descr, p + 1, (size_t)(q - p - 1)), descr[q - p - 1] = 0;
  }
  if ((p = npy_field(h, "fortran_order"))) fortran = !strncmp(p, "True", 4) ? 1 : !strncmp(p, "False", 5) ? 0 : -1;
  int shape_ok = 0;
  if ((p = npy_field(h, "shape")) && *p == '(') {
    p++;
    for (;;) {
      while (*p == ' ') p++;
      if (*p == ')') {
        shape_ok = 1;
        break;
      }
      if (*p < '0' || *p > '9' || rank == 32) break;
      char *e;
      errno = 0;
      unsigned long long v = strtoull(p, &e, 10);
      if (errno || v > (1ull << 53)) break;
      dims[rank++] = v;
      p = e;
      while (*p == ' ') p++;
      if (*p == ',') p++;
      else if (*p != ')') break;
    }
  }
  free(h);
  if (!*descr) return cli_error(CMD, "%s: .npy header at offset %llu lacks a readable 'descr'", path, (unsigned long long)hoff);
  if (fortran < 0) return cli_error(CMD, "%s: .npy header at offset %llu lacks a readable 'fortran_order'", path, (unsigned long long)hoff);
  if (!shape_ok) return cli_error(CMD, "%s: .npy header at offset %llu lacks a readable 'shape'", path, (unsigned long long)hoff);
  char order = descr[0], kind = descr[1];
  char *e;
  long isz = strtol(descr + 2, &e, 10);
  int numeric = strchr("<>|=", order) && descr[1] && strchr("biuf", kind) && !*e && isz > 0 &&
                ((kind == 'f' && (isz == 2 || isz == 4 || isz == 8)) ||
                 (kind != 'f' && (isz == 1 || isz == 2 || isz == 4 || isz == 8)));
  double elems = 1;
  for (int d = 0; d < rank; d++) elems *= (double)dims[d];
  uint64_t data_off = hoff + hlen;
  double mn = INFINITY, mx = -INFINITY, sum = 0;
  double esize = !*e && isz > 0 ? (double)isz * (kind == 'U' ? 4 : 1) : 0;
  if (esize > 0 && elems * esize > (double)(fsize - data_off))
    return cli_error(CMD, "%s: truncated: %.0f elements of %s need %.0f bytes at offset %llu, the file has %llu",
                     path, elems, descr, elems * esize, (unsigned long long)data_off,
                     (unsigned long long)(fsize - data_off));
  if (numeric) {
    if (elems * (double)isz > (double)(fsize - data_off))
      return cli_error(CMD, "%s: truncated: %.0f elements of %s need %.0f bytes at offset %llu, the file has %llu",
                       path, elems, descr, elems * (double)isz, (unsigned long long)data_off,
                       (unsigned long long)(fsize - data_off));
    int swap = order == '>';
    unsigned char buf[8192];
    uint64_t left = (uint64_t)elems;
    while (left) {
      size_t n = left < sizeof buf / (size_t)isz ? (size_t)left : sizeof buf / (size_t)isz;
      if (fread(buf, (size_t)isz, n, f) != n)
        return cli_error(CMD, "%s: read error in the data: %s", path, strerror(errno));
      for (size_t i = 0; i < n; i++) {
        unsigned char b[8];
        for (long k = 0; k < isz; k++) b[k] = buf[i * (size_t)isz + (size_t)(swap ? isz - 1 - k : k)];
        uint64_t u = 0;
        for (long k = isz - 1; k >= 0; k--) u = u << 8 | b[k];
        double v;
        if (kind == 'f') {
          if (isz == 2) v = half_to_double((uint16_t)u);
          else if (isz == 4) {
            float x;
            uint32_t u32 = (uint32_t)u;
            memcpy(&x, &u32, 4);
            v = x;
          } else memcpy(&v, &u, 8);
        } else if (kind == 'i') {
          int sh = 64 - 8 * (int)isz;
          v = (double)((int64_t)(u << sh) >> sh);
        } else v = kind == 'b' ? (u != 0) : (double)u;
        if (v < mn) mn = v;
        if (v > mx) mx = v;
        sum += v;
      }
      left -= n;
    }
  }
  if (json) {
    JsonWriter w;
    json_init(&w, stdout);
    json_begin_object(&w);
    json_key(&w, "file"), json_string(&w, path);
    json_key(&w, "format"), json_string(&w, "npy");
    json_key(&w, "dtype"), json_string(&w, descr);
    json_key(&w, "shape"), json_begin_array(&w);
    for (int d = 0; d < rank; d++) json_uint(&w, dims[d]);
    json_end_array(&w);
    json_key(&w, "order"), json_string(&w, fortran ? "F" : "C");
    json_key(&w, "elements"), json_count(&w, elems);
    if (numeric && elems > 0) {
      json_key(&w, "min"), json_num(&w, mn);
      json_key(&w, "max"), json_num(&w, mx);
      json_key(&w, "mean"), json_num(&w, sum / elems);
    }
    json_end_object(&w);
    json_finish(&w);
  } else {
    printf("%s: npy (version %d.%d)\ndtype: %s\nshape: (", path, major, pre[7], descr);
    for (int d = 0; d < rank; d++) printf("%s%llu", d ? ", " : "", (unsigned long long)dims[d]);
    printf("%s)\norder: %s\nelements: %.0f\n", rank == 1 ? "," : "", fortran ? "F (Fortran)" : "C",
           elems);
    if (numeric && elems > 0) {
      char a[32], b[32], c[32];
      printf("min: %s\nmax: %s\nmean: %s\n", num_text(a, mn), num_text(b, mx),
             num_text(c, sum / elems));
    } else if (!numeric)
      printf("(no statistics for dtype %s)\n", descr);
  }
  return 0;
}

/* ---------------------------------------------------------------- dispatch */

int cmd_inspect(int argc, char **argv) {
  static const struct option opts[] = {
      {"json", no_argument, NULL, 'j'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
  int c, json = 0;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":jh", opts, NULL)) != -1) {
    if (c == 'j') json = 1;
    else if (c == 'h') {
      printf("%s", inspect_help);
      return 0;
    } else
      return cli_bad_option(CMD, c, argv, opts);
  }
  if (optind >= argc) return cli_usage(CMD, "missing FILE");
  if (optind + 1 < argc) return cli_usage(CMD, "unexpected argument");
  const char *path = argv[optind];
  FILE *f = fopen(path, "rb");
  if (!f) return cli_error(CMD, "%s: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(fileno(f), &sb) || !S_ISREG(sb.st_mode)) {
    int e = errno;
    fclose(f);
    return cli_error(CMD, "%s: %s", path, S_ISDIR(sb.st_mode) ? "is a directory" : strerror(e));
  }
  uint64_t fsize = (uint64_t)sb.st_size;
  unsigned char head[16] = {0};
  size_t nhead = fread(head, 1, sizeof head, f);
  int rc;
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = hlen << 8 | head[i];
  if (nhead >= 8 && !memcmp(head, "FLOEGRPH", 8)) {
    fclose(f);
    return inspect_floe_graph(path, json);
  }
  if (nhead >= 6 && !memcmp(head, "\x93NUMPY", 6)) rc = inspect_npy(path, f, fsize, json);
  else if (nhead >= 9 && head[8] == '{' && hlen >= 2)
    rc = inspect_safetensors(path, f, fsize, json); /* length checked there */
  else {
    fclose(f);
    char *err = NULL;
    int orc = 0;
    if (nhead > 0) {
      int r = inspect_onnx(path, json, &err, &orc);
      if (r != 0) return orc;
    }
    /* A ModelProto starts with field 1 (ir_version, varint): tag 0x08. Such a file that the
     * importer refuses is a damaged model; anything else is not a model at all. */
    if (nhead > 0 && head[0] == 0x08 && err) rc = cli_error(CMD, "%s", err);
    else {
      char hex[3 * 16 + 1] = "";
      for (size_t i = 0, len = 0; i < nhead && i < 8; i++)
        len += (size_t)snprintf(hex + len, sizeof hex - len, "%s%02x", i ? " " : "", head[i]);
      rc = cli_error(CMD,
                     "%s: not a Floe graph, ONNX model, safetensors or .npy file (first bytes: %s)",
                     path, nhead ? hex : "none, the file is empty");
    }
    free(err);
    return rc;
  }
  fclose(f);
  return rc;
}
