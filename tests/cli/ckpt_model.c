/* SPDX-License-Identifier: Apache-2.0 */
/* ckpt_model.c - files for the checkpoint and export script tests:
 *   ckpt_model export DIR      trains a tiny classifier a few SGD steps, exports the frozen
 *                              graph DIR/model.floe (output "probs"), and writes its input
 *                              DIR/x.npy and the session's output DIR/want_probs.npy.
 *   ckpt_model checkpoint DIR [--no-bf16]
 *                              writes a checkpoint (step 1234) of one variable of each dtype
 *                              (but bf16, which NumPy lacks) holding values of formulas the
 *                              reading script repeats. */
#include <floe/floe.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static FloeStatus *st;

static int fail(const char *what, FloeGraph *g) {
  fprintf(stderr, "ckpt_model: %s: %s%s\n", what, g ? floe_graph_error(g, NULL) : "",
          floe_status_message(st));
  return 1;
}

static int run(FloeSession *s, const FloeFeed *feeds, int nf, const char *fetch,
               FloeTensor **out, const char *target) {
  if (floe_session_run(s, feeds, nf, fetch ? &fetch : NULL, fetch ? 1 : 0,
                       target ? &target : NULL, target ? 1 : 0, out, st) != FLOE_OK)
    return fail(fetch ? fetch : target, NULL);
  return 0;
}

static int export_model(const char *dir) {
  FloeGraph *g = floe_graph_new();
  int64_t xd[2] = {-1, 4}, ld[1] = {-1};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(2, xd));
  FloeOutput labels = floe_placeholder(g, "labels", FLOE_I64, floe_shape_make(1, ld));
  FloeOutput h = floe_layer_dense(g, "hidden", x, 8, FLOE_ACT_RELU, 1);
  FloeOutput logits = floe_unary(g, "Identity", "logits", floe_layer_dense(g, "out", h, 3, FLOE_ACT_NONE, 2));
  FloeOutput loss =
      floe_unary(g, "Identity", "loss", floe_sparse_softmax_cross_entropy(g, "xent", logits, labels));
  floe_unary(g, "Softmax", "probs", logits);
  FloeOptimizerOptions o;
  floe_optimizer_options_init(&o, FLOE_OPT_SGD);
  o.learning_rate = 0.5;
  floe_minimize(g, "train", loss, &o, NULL, 0);
  floe_variables_initializer(g, "init");
  if (floe_graph_status(g) != FLOE_OK) return fail("building", g);

  FloeSession *s = floe_session_new(g, NULL, st);
  if (!s) return fail("session", NULL);
  float xv[6 * 4];
  int64_t lv[6];
  for (int i = 0; i < 6; i++) {
    for (int k = 0; k < 4; k++) xv[i * 4 + k] = (float)((i * 4 + k) % 7) * 0.25f - 0.5f;
    lv[i] = i % 3;
  }
  int64_t xs[2] = {6, 4}, ls[1] = {6};
  FloeTensor *xt = floe_tensor_from_data(FLOE_F32, 2, xs, xv, sizeof xv, st);
  FloeTensor *lt = floe_tensor_from_data(FLOE_I64, 1, ls, lv, sizeof lv, st);
  if (!xt || !lt) return fail("tensors", NULL);
  FloeFeed feeds[2] = {{"x", xt}, {"labels", lt}};
  FloeTensor *before, *after, *want;
  if (run(s, NULL, 0, NULL, NULL, "init") || run(s, feeds, 2, "loss", &before, NULL)) return 1;
  for (int step = 0; step < 20; step++)
    if (run(s, feeds, 2, NULL, NULL, "train")) return 1;
  if (run(s, feeds, 2, "loss", &after, NULL) || run(s, feeds, 1, "probs", &want, NULL)) return 1;
  float l0 = *(const float *)floe_tensor_data(before), l1 = *(const float *)floe_tensor_data(after);
  if (!(l1 < l0)) {
    fprintf(stderr, "ckpt_model: training did not lower the loss (%g -> %g)\n", l0, l1);
    return 1;
  }
  char path[4096];
  const char *outputs[1] = {"probs"};
  snprintf(path, sizeof path, "%s/model.floe", dir);
  if (floe_export_frozen(s, outputs, 1, path, st) != FLOE_OK) return fail("export", NULL);
  snprintf(path, sizeof path, "%s/x.npy", dir);
  if (floe_tensor_save_npy(xt, path, st) != FLOE_OK) return fail(path, NULL);
  snprintf(path, sizeof path, "%s/want_probs.npy", dir);
  if (floe_tensor_save_npy(want, path, st) != FLOE_OK) return fail(path, NULL);
  printf("loss %g -> %g\n", l0, l1);
  floe_tensor_release(before);
  floe_tensor_release(after);
  floe_tensor_release(want);
  floe_tensor_release(xt);
  floe_tensor_release(lt);
  floe_session_free(s);
  floe_graph_free(g);
  return 0;
}

/* Element i of each variable; test_safetensors.sh computes the same. */
static void value(FloeDType dt, int64_t i, void *out) {
  switch (dt) {
    case FLOE_F32: ((float *)out)[i] = (float)i * 0.5f - 3.0f; break;
    case FLOE_F64: ((double *)out)[i] = (double)i / 3.0 + 0.25; break;
    case FLOE_F16: ((uint16_t *)out)[i] = floe_f32_to_f16((float)i * 0.25f - 1.0f); break;
    case FLOE_BF16: ((uint16_t *)out)[i] = floe_f32_to_bf16((float)i * 2.0f - 5.0f); break;
    case FLOE_I8: ((int8_t *)out)[i] = (int8_t)(i * 9 - 100); break;
    case FLOE_U8: ((uint8_t *)out)[i] = (uint8_t)(i * 7 + 3); break;
    case FLOE_I32: ((int32_t *)out)[i] = (int32_t)(i * 1000003 - 123456); break;
    case FLOE_I64: ((int64_t *)out)[i] = i * 10000000019LL - 7; break;
    case FLOE_BOOL: ((uint8_t *)out)[i] = i % 3 == 1; break;
    default: break;
  }
}

static int write_checkpoint(const char *dir, bool with_bf16) {
  static const struct {
    const char *name;
    FloeDType dt;
    int rank;
    int64_t dims[3];
  } vars[] = {
      {"dense/kernel", FLOE_F32, 2, {2, 3}}, {"f64", FLOE_F64, 1, {4}},
      {"half", FLOE_F16, 2, {2, 2}},         {"brain", FLOE_BF16, 1, {3}},
      {"i8", FLOE_I8, 1, {5}},               {"u8", FLOE_U8, 3, {2, 2, 2}},
      {"scalar_i32", FLOE_I32, 0, {0}},      {"i64", FLOE_I64, 1, {3}},
      {"mask", FLOE_BOOL, 1, {6}},           {"empty", FLOE_F32, 2, {0, 2}},
  };
  enum { N = sizeof vars / sizeof vars[0] };
  FloeGraph *g = floe_graph_new();
  const char *targets[N];
  char names[N][64];
  int nt = 0;
  for (int v = 0; v < N; v++) {
    if (vars[v].dt == FLOE_BF16 && !with_bf16) continue;
    FloeShape shape = floe_shape_make(vars[v].rank, vars[v].dims);
    FloeVariable var = floe_variable(g, vars[v].name, vars[v].dt, shape, floe_init_zeros());
    unsigned char buf[256];
    int64_t n = 1;
    for (int k = 0; k < vars[v].rank; k++) n *= vars[v].dims[k];
    for (int64_t i = 0; i < n; i++) value(vars[v].dt, i, buf);
    FloeTensor *t = floe_tensor_from_data(vars[v].dt, vars[v].rank, vars[v].dims, buf,
                                          (size_t)n * floe_dtype_size(vars[v].dt), st);
    if (!t) return fail(vars[v].name, NULL);
    snprintf(names[nt], sizeof names[nt], "%s/set", vars[v].name);
    char cname[64];
    snprintf(cname, sizeof cname, "%s/set_value", vars[v].name);
    floe_assign(g, names[nt], var.handle, floe_const(g, cname, t));
    floe_tensor_release(t);
    targets[nt] = names[nt];
    nt++;
  }
  if (floe_graph_status(g) != FLOE_OK) return fail("building", g);
  FloeSession *s = floe_session_new(g, NULL, st);
  if (!s) return fail("session", NULL);
  if (floe_session_run(s, NULL, 0, NULL, 0, targets, nt, NULL, st) != FLOE_OK)
    return fail("assign", NULL);
  char *path = NULL;
  if (floe_checkpoint_save(s, dir, NULL, 1234, 0, &path, st) != FLOE_OK)
    return fail("save", NULL);
  printf("%s\n", path);
  free(path);
  floe_session_free(s);
  floe_graph_free(g);
  return 0;
}

int main(int argc, char **argv) {
  bool no_bf16 = argc == 4 && strcmp(argv[3], "--no-bf16") == 0;
  if ((argc != 3 && !no_bf16) ||
      (strcmp(argv[1], "export") != 0 && strcmp(argv[1], "checkpoint") != 0)) {
    fprintf(stderr, "usage: ckpt_model export DIR | ckpt_model checkpoint DIR [--no-bf16]\n");
    return 2;
  }
  st = floe_status_new();
  int rc = strcmp(argv[1], "export") == 0 ? export_model(argv[2])
                                           : write_checkpoint(argv[2], !no_bf16);
  floe_status_free(st);
  return rc;
}
