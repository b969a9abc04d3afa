/* SPDX-License-Identifier: Apache-2.0 */
/* onnx_ops_resize.c - ONNX resampling (Resize, Upsample, GridSample), detection (RoiAlign,
 * NonMaxSuppression) and recurrent (RNN, GRU, LSTM) ops onto the ops of ops_resize.def.
 * Their Floe ops take every optional operand as an input, an empty tensor standing for one
 * that is absent; opset differences (attributes that became inputs, Resize-10's and
 * Upsample's coordinate rules, RoiAlign-10's pixel offset, layout = 1) are resolved here. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "onnx_internal.h"

/* An empty 1-D tensor of dtype dt: the Floe op's "absent". */
static FloeOutput empty(OxCtx *c, FloeDType dt) {
  int64_t zero = 0;
  return ox_const(c, floe_tensor_new(dt, 1, &zero, NULL));
}

/* Optional input i cast to dt, or empty when omitted. */
static FloeOutput optional(OxCtx *c, const FloeOutput *in, int nin, int i, FloeDType dt) {
  return i < nin && ox_present(in[i]) ? ox_cast(c, in[i], dt) : empty(c, dt);
}

/* The string attribute `attr` (dflt when absent) into buf; fails unless it is one of
 * names[0..count). */
static floe_code choice(OxCtx *c, const Onnx__NodeProto *n, const char *attr, const char *dflt,
                        const char *const *names, int count, char *buf, size_t cap) {
  const char *v = ox_str(n, attr, dflt, buf, cap);
  if (v != buf) snprintf(buf, cap, "%s", v);
  for (int i = 0; i < count; i++)
    if (!strcmp(buf, names[i])) return FLOE_OK;
  return ox_fail(c, FLOE_INVALID_ARGUMENT, "unknown %s '%s'", attr, buf);
}

static FloeOutput transpose(OxCtx *c, FloeOutput x, const int64_t *perm, int r) {
  return ox_binary(c, "Transpose", x, ox_const_i64(c, perm, r));
}

/* ------------------------------------------------------------------------------------ */
/* Resize and Upsample. */

static const char *const modes[] = {"nearest", "linear", "cubic"};
static const char *const ctms[] = {"half_pixel",   "pytorch_half_pixel",   "asymmetric",
                                   "align_corners", "tf_half_pixel_for_nn",
                                   "tf_crop_and_resize"};
static const char *const nearest_modes[] = {"round_prefer_floor", "round_prefer_ceil", "floor",
                                            "ceil"};

static FloeOutput resize_node(OxCtx *c, FloeOutput x, FloeOutput roi, FloeOutput scales,
                              FloeOutput sizes, const char *mode, const char *ctm,
                              const char *nearest, double cubic_a, int exclude, double extrap) {
  FloeNodeBuilder *b = ox_begin(c, "Resize");
  floe_node_add_input(b, x);
  floe_node_add_input(b, roi);
  floe_node_add_input(b, scales);
  floe_node_add_input(b, sizes);
  floe_node_set_attr_string(b, "mode", mode);
  floe_node_set_attr_string(b, "coordinate_transformation_mode", ctm);
  floe_node_set_attr_string(b, "nearest_mode", nearest);
  floe_node_set_attr_float(b, "cubic_coeff_a", cubic_a);
  floe_node_set_attr_bool(b, "exclude_outside", exclude);
  floe_node_set_attr_float(b, "extrapolation_value", extrap);
  return ox_finish(c, b);
}

/* Resize-10 and Upsample: scales only, asymmetric coordinates, and nearest rounding down
 * where a dim grows and up where it shrinks (ONNX Runtime's rule; Upsample's integer scales
 * make it a repeat). "bilinear" is Upsample-1's name for linear. */
static floe_code resize_scales_only(OxCtx *c, const Onnx__NodeProto *n, FloeOutput x,
                                    FloeOutput scales, FloeOutput *out) {
  char mode[32];
  const char *m = ox_str(n, "mode", "nearest", mode, sizeof mode);
  if (!strcmp(m, "bilinear")) m = "linear";
  if (strcmp(m, "nearest") && strcmp(m, "linear"))
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "unknown mode '%s' (nearest or linear)", m);
  out[0] = resize_node(c, x, empty(c, FLOE_F32), ox_cast(c, scales, FLOE_F32),
                       empty(c, FLOE_I64), m, "asymmetric", "simple", -0.75, 0, 0.0);
  return FLOE_OK;
}

OX_MAP(map_resize) {
  (void)nout;
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  if (c->opset < 11) {
    if ((rc = ox_need(c, in, nin, 2)) != FLOE_OK) return rc;
    return resize_scales_only(c, n, in[0], in[1], out);
  }
  const int64_t *axes;
  char pol[32];
  if (ox_int(n, "antialias", 0) != 0 || ox_ints(n, "axes", &axes) >= 0 ||
      strcmp(ox_str(n, "keep_aspect_ratio_policy", "stretch", pol, sizeof pol), "stretch"))
    return ox_fail(c, FLOE_UNIMPLEMENTED,
                   "Resize-18's antialias, axes and keep_aspect_ratio_policy");
  char mode[32], ctm[32], nearest[32];
  if ((rc = choice(c, n, "mode", "nearest", modes, 3, mode, sizeof mode)) != FLOE_OK ||
      (rc = choice(c, n, "coordinate_transformation_mode", "half_pixel", ctms, 6, ctm,
                   sizeof ctm)) != FLOE_OK ||
      (rc = choice(c, n, "nearest_mode", "round_prefer_floor", nearest_modes, 4, nearest,
                   sizeof nearest)) != FLOE_OK)
    return rc;
  /* Inputs given but empty (a Constant of no elements) count as absent too: the kernel sees
   * an empty tensor either way. */
  FloeOutput roi = optional(c, in, nin, 1, FLOE_F32), scales = optional(c, in, nin, 2, FLOE_F32),
             sizes = optional(c, in, nin, 3, FLOE_I64);
  out[0] = resize_node(c, in[0], roi, scales, sizes, mode, ctm, nearest,
                       ox_float(n, "cubic_coeff_a", -0.75f), ox_int(n, "exclude_outside", 0) != 0,
                       ox_float(n, "extrapolation_value", 0.0f));
  return FLOE_OK;
}

OX_MAP(map_upsample) {
  (void)nout;
  floe_code rc = ox_need(c, in, nin, 1);
  if (rc != FLOE_OK) return rc;
  if (c->opset >= 9) {
    if ((rc = ox_need(c, in, nin, 2)) != FLOE_OK) return rc;
    return resize_scales_only(c, n, in[0], in[1], out);
  }
  const float *s;
  int k = ox_floats(n, "scales", &s);
  if (k < 0) return ox_fail(c, FLOE_INVALID_ARGUMENT, "Upsample-7 needs the scales attribute");
  int64_t dim = k;
  FloeTensor *t = floe_tensor_new(FLOE_F32, 1, &dim, NULL);
  if (t) memcpy(floe_tensor_data(t), s, (size_t)k * sizeof *s);
  return resize_scales_only(c, n, in[0], ox_const(c, t), out);
}

/* ------------------------------------------------------------------------------------ */
/* GridSample, RoiAlign, NonMaxSuppression. */

OX_MAP(map_grid_sample) {
  (void)nout;
  floe_code rc = ox_need(c, in, nin, 2);
  if (rc != FLOE_OK) return rc;
  FloeShape xs = ox_shape(in[0]);
  if (xs.rank >= 0 && xs.rank != 4)
    return ox_fail(c, FLOE_UNIMPLEMENTED, "GridSample of rank %d (Floe samples 2-D images)",
                   xs.rank);
  static const char *const gs_modes[] = {"bilinear", "nearest", "bicubic", "linear", "cubic"};
  static const char *const pads[] = {"zeros", "border", "reflection"};
  char mode[32], pad[32];
  if ((rc = choice(c, n, "mode", "bilinear", gs_modes, 5, mode, sizeof mode)) != FLOE_OK ||
      (rc = choice(c, n, "padding_mode", "zeros", pads, 3, pad, sizeof pad)) != FLOE_OK)
    return rc;
  /* GridSample-20 renamed bilinear and bicubic */
  const char *m = !strcmp(mode, "linear") ? "bilinear" : !strcmp(mode, "cubic") ? "bicubic" : mode;
  FloeNodeBuilder *b = ox_begin(c, "GridSample");
  floe_node_add_input(b, in[0]);
  floe_node_add_input(b, in[1]);
  floe_node_set_attr_string(b, "mode", m);
  floe_node_set_attr_string(b, "padding_mode", pad);
  floe_node_set_attr_bool(b, "align_corners", ox_int(n, "align_corners", 0) != 0);
  out[0] = ox_finish(c, b);
  return FLOE_OK;
}

OX_MAP(map_roi_align) {
  (void)nout;
  floe_code rc = ox_need(c, in, nin, 3);
  if (rc != FLOE_OK) return rc;
  static const char *const roi_modes[] = {"avg", "max"};
  static const char *const roi_ctms[] = {"half_pixel", "output_half_pixel"};
  char mode[32], ctm[32];
  /* RoiAlign-10 has no coordinate_transformation_mode and behaves as output_half_pixel. */
  if ((rc = choice(c, n, "mode", "avg", roi_modes, 2, mode, sizeof mode)) != FLOE_OK ||
      (rc = choice(c, n, "coordinate_transformation_mode",
                   c->opset < 16 ? "output_half_pixel" : "half_pixel", roi_ctms, 2, ctm,
                   sizeof ctm)) != FLOE_OK)
    return rc;
  FloeNodeBuilder *b = ox_begin(c, "RoiAlign");
  floe_node_add_input(b, in[0]);
  floe_node_add_input(b, ox_cast(c, in[1], ox_dtype(in[0])));
  floe_node_add_input(b, in[2]);
  floe_node_set_attr_string(b, "mode", mode);
  floe_node_set_attr_string(b, "coordinate_transformation_mode", ctm);
  floe_node_set_attr_int(b, "output_height", ox_int(n, "output_height", 1));
  floe_node_set_attr_int(b, "output_width", ox_int(n, "output_width", 1));
  floe_node_set_attr_int(b, "sampling_ratio", ox_int(n, "sampling_ratio", 0));
  floe_node_set_attr_float(b, "spatial_scale", ox_float(n, "spatial_scale", 1.0f));
  out[0] = ox_finish(c, b);
  return FLOE_OK;
}

OX_MAP(map_nms) {
  (void)nout;
  floe_code rc = ox_need(c, in, nin, 2);
  if (rc != FLOE_OK) return rc;
  int64_t center = ox_int(n, "center_point_box", 0);
  if (center != 0 && center != 1)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "center_point_box %lld (0 or 1)", (long long)center);
  FloeNodeBuilder *b = ox_begin(c, "BatchedNonMaxSuppression");
  floe_node_add_input(b, in[0]);
  floe_node_add_input(b, in[1]);
  floe_node_add_input(b, optional(c, in, nin, 2, FLOE_I64));
  floe_node_add_input(b, optional(c, in, nin, 3, FLOE_F32));
  floe_node_add_input(b, optional(c, in, nin, 4, FLOE_F32));
  floe_node_set_attr_int(b, "center_point_box", center);
  out[0] = ox_finish(c, b);
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* RNN, GRU, LSTM. */

enum { R_RNN, R_GRU, R_LSTM };

/* How many of alpha and beta ONNX Runtime lets an activation consume (lower-case name), and
 * their defaults (ONNX's operators of the same names); -1 for an unknown name. */
static int act_params(const char *name, double *alpha, double *beta) {
  static const struct {
    const char *name;
    int params;
    double alpha, beta;
  } t[] = {{"relu", 0, 0, 0},       {"tanh", 0, 0, 0},          {"sigmoid", 0, 0, 0},
           {"softsign", 0, 0, 0},   {"softplus", 0, 0, 0},      {"affine", 2, 1, 0},
           {"leakyrelu", 1, 0.01, 0}, {"thresholdedrelu", 1, 1, 0}, {"scaledtanh", 2, 1, 1},
           {"hardsigmoid", 2, 0.2, 0.5}, {"elu", 1, 1, 0}};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    if (!strcmp(name, t[i].name)) {
      *alpha = t[i].alpha, *beta = t[i].beta;
      return t[i].params;
    }
  return -1;
}

#define MAX_ACTS 6

typedef struct Acts {
  int n; /* 0: the op's defaults */
  char joined[MAX_ACTS * 24];
  double alpha[MAX_ACTS], beta[MAX_ACTS];
} Acts;

/* The activations attribute as the Floe op's "a,b,c" with one alpha and beta per name:
 * ONNX's lists are consumed in order by the functions that take them. */
static floe_code activations(OxCtx *c, const Onnx__NodeProto *n, Acts *acts) {
  const Onnx__AttributeProto *a = ox_attr(n, "activations");
  acts->n = 0;
  acts->joined[0] = '\0';
  if (!a || a->n_strings == 0) return FLOE_OK;
  if (a->n_strings > MAX_ACTS)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "activations lists %zu functions", a->n_strings);
  const float *al, *be;
  int nal = ox_floats(n, "activation_alpha", &al), nbe = ox_floats(n, "activation_beta", &be);
  int ia = 0, ib = 0;
  for (size_t i = 0; i < a->n_strings; i++) {
    char name[24];
    size_t len = a->strings[i].len < sizeof name - 1 ? a->strings[i].len : sizeof name - 1;
    for (size_t k = 0; k < len; k++) name[k] = (char)tolower(a->strings[i].data[k]);
    name[len] = '\0';
    int params = act_params(name, &acts->alpha[i], &acts->beta[i]);
    if (params < 0) return ox_fail(c, FLOE_UNIMPLEMENTED, "activation function '%s'", name);
    if (params >= 1 && ia < nal) acts->alpha[i] = al[ia++];
    if (params >= 2 && ib < nbe) acts->beta[i] = be[ib++];
    strncat(acts->joined, i ? "," : "", sizeof acts->joined - strlen(acts->joined) - 1);
    strncat(acts->joined, name, sizeof acts->joined - strlen(acts->joined) - 1);
  }
  acts->n = (int)a->n_strings;
  return FLOE_OK;
}

static floe_code recurrent(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in, int nin,
                           FloeOutput *out, int nout, int kind) {
  static const char *const ops[] = {"RNN", "GRU", "LSTM"};
  static const char *const dirs[] = {"forward", "reverse", "bidirectional"};
  floe_code rc = ox_need(c, in, nin, 3);
  if (rc != FLOE_OK) return rc;
  char dir[32];
  if ((rc = choice(c, n, "direction", "forward", dirs, 3, dir, sizeof dir)) != FLOE_OK) return rc;
  int64_t layout = ox_int(n, "layout", 0), hidden = ox_int(n, "hidden_size", 0);
  if (layout != 0 && layout != 1)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "layout %lld (0 or 1)", (long long)layout);
  if (hidden < 0) return ox_fail(c, FLOE_INVALID_ARGUMENT, "hidden_size %lld", (long long)hidden);
  const Onnx__AttributeProto *clip = ox_attr(n, "clip");
  if (clip && !(clip->f > 0))
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "clip %g (must be positive)", (double)clip->f);
  Acts acts;
  if ((rc = activations(c, n, &acts)) != FLOE_OK) return rc;
  FloeDType dt = ox_dtype(in[0]);
  int nstate = kind == R_LSTM ? 2 : 1;
  /* layout 1: x [B,S,I] and the states [B,D,H]; Floe's op takes ONNX's layout 0. */
  static const int64_t swap01[3] = {1, 0, 2}, y_to_b[4] = {2, 0, 1, 3};
  FloeOutput x = layout ? transpose(c, in[0], swap01, 3) : in[0];
  FloeOutput st[2];
  for (int k = 0; k < nstate; k++) {
    st[k] = optional(c, in, nin, 5 + k, dt);
    if (layout && 5 + k < nin && ox_present(in[5 + k])) st[k] = transpose(c, st[k], swap01, 3);
  }
  FloeNodeBuilder *b = ox_begin(c, ops[kind]);
  floe_node_add_input(b, x);
  floe_node_add_input(b, ox_cast(c, in[1], dt));
  floe_node_add_input(b, ox_cast(c, in[2], dt));
  floe_node_add_input(b, optional(c, in, nin, 3, dt));
  floe_node_add_input(b, optional(c, in, nin, 4, FLOE_I32));
  for (int k = 0; k < nstate; k++) floe_node_add_input(b, st[k]);
  if (kind == R_LSTM) floe_node_add_input(b, optional(c, in, nin, 7, dt));
  floe_node_set_attr_int(b, "hidden_size", hidden);
  floe_node_set_attr_string(b, "direction", dir);
  if (clip) floe_node_set_attr_float(b, "clip", clip->f);
  if (kind == R_GRU)
    floe_node_set_attr_bool(b, "linear_before_reset", ox_int(n, "linear_before_reset", 0) != 0);
  if (kind == R_LSTM)
    floe_node_set_attr_bool(b, "input_forget", ox_int(n, "input_forget", 0) != 0);
  if (acts.n) {
    floe_node_set_attr_string(b, "activations", acts.joined);
    floe_node_set_attr_float_list(b, "activation_alpha", acts.alpha, acts.n);
    floe_node_set_attr_float_list(b, "activation_beta", acts.beta, acts.n);
  }
  FloeNode *node = ox_finish_node(c, b);
  if (!node) return ox_check(c);
  for (int k = 0; k < nout && k <= nstate; k++) {
    FloeOutput o = floe_out(node, k);
    if (layout) o = k == 0 ? transpose(c, o, y_to_b, 4) : transpose(c, o, swap01, 3);
    out[k] = o;
  }
  return FLOE_OK;
}

OX_MAP(map_rnn) { return recurrent(c, n, in, nin, out, nout, R_RNN); }
OX_MAP(map_gru) { return recurrent(c, n, in, nin, out, nout, R_GRU); }
OX_MAP(map_lstm) { return recurrent(c, n, in, nin, out, nout, R_LSTM); }

const OxOp floe__onnx_ops_resize[] = {
    {"", "Resize", map_resize},
    {"", "Upsample", map_upsample},
    {"", "GridSample", map_grid_sample},
    {"", "RoiAlign", map_roi_align},
    {"", "NonMaxSuppression", map_nms},
    {"", "RNN", map_rnn},
    {"", "GRU", map_gru},
    {"", "LSTM", map_lstm},
    {NULL, NULL, NULL},
};
