/* SPDX-License-Identifier: Apache-2.0 */
/* test_grad_torch.c - Floe's gradients against PyTorch autograd, through committed fixtures.
 *
 * tests/fixtures/make_grad_fixtures.py (run by hand; this test needs no PyTorch) wrote for
 * each case of tests/fixtures/grad/manifest.txt the op's inputs (<case>__in<i>.npy), the
 * upstream gradients of its outputs (<case>__dy<j>.npy) and torch.autograd's gradients of
 * the float inputs (<case>__dx<i>.npy). Here each case becomes a graph: float inputs are
 * placeholders, integer ones constants, the dys are grad_ys, and every gradient must match
 * torch's within 1e-9 relative. */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/harness.h"
#include "floe/floe.h"

#define MAXIN 8
#define MAXOUT 8

static FloeRuntime *rt;
static char dir[1024];

static void runtime_setup(void) {
  rt = harness_runtime(2);
  const char *top = getenv("top_srcdir");
  snprintf(dir, sizeof dir, "%s/tests/fixtures/grad", top ? top : "..");
}

static void runtime_teardown(void) {
  floe_runtime_free(rt);
  rt = NULL;
}

/* <dir>/<name>__<role>.npy, or NULL when the file does not exist. Caller releases. */
static FloeTensor *load(const char *name, const char *role) {
  char path[1400];
  snprintf(path, sizeof path, "%s/%s__%s.npy", dir, name, role);
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fclose(f);
  FloeStatus *st = floe_status_new();
  FloeTensor *t = floe_tensor_load_npy(path, st);
  if (!t) ck_abort_msg("%s: %s", path, floe_status_message(st));
  floe_status_free(st);
  return t;
}

static void parse_int_list(const char *p, int64_t *v, int *n, int cap) {
  *n = 0;
  while (*p) {
    char *end;
    ck_assert_int_lt(*n, cap);
    v[(*n)++] = strtoll(p, &end, 10);
    ck_assert_msg(end != p, "bad int list %s", p);
    p = end;
    if (*p == ',') p++;
  }
}

/* "name=Kvalue;..." with K in i (int), f (float), b (bool), s (string), l (int list). */
static void set_attrs(FloeNodeBuilder *b, const char *spec) {
  if (strcmp(spec, "-") == 0) return;
  char *copy = strdup(spec), *save = NULL;
  for (char *item = strtok_r(copy, ";", &save); item; item = strtok_r(NULL, ";", &save)) {
    char *eq = strchr(item, '=');
    ck_assert_msg(eq && eq[1], "bad attr %s", item);
    *eq = '\0';
    const char *val = eq + 2;
    int64_t list[16];
    int n;
    switch (eq[1]) {
      case 'i':
        floe_node_set_attr_int(b, item, strtoll(val, NULL, 10));
        break;
      case 'f':
        floe_node_set_attr_float(b, item, strtod(val, NULL));
        break;
      case 'b':
        floe_node_set_attr_bool(b, item, atoi(val));
        break;
      case 's':
        floe_node_set_attr_string(b, item, val);
        break;
      case 'l':
        parse_int_list(val, list, &n, 16);
        floe_node_set_attr_int_list(b, item, list, n);
        break;
      default:
        ck_abort_msg("bad attr kind in %s", spec);
    }
  }
  free(copy);
}

/* Runs one case; returns the number of gradients compared, or -1 with *why set. */
static int run_case(const char *name, const char *op, const char *lists, const char *attrs,
                    char *why, size_t whylen) {
  FloeGraph *g = floe_graph_new();
  FloeTensor *in[MAXIN] = {NULL}, *dy[MAXOUT] = {NULL}, *want[MAXIN] = {NULL};
  FloeOutput ins[MAXIN];
  FloeFeed feeds[MAXIN];
  char pname[MAXIN][8], role[16];
  int nin = 0, nf = 0, compared = -1;
  for (; nin < MAXIN; nin++) {
    snprintf(role, sizeof role, "in%d", nin);
    if (!(in[nin] = load(name, role))) break;
    if (floe_tensor_dtype(in[nin]) == FLOE_F64) {
      snprintf(pname[nin], sizeof pname[nin], "x%d", nin);
      ins[nin] = floe_placeholder(g, pname[nin], FLOE_F64, floe_tensor_shape(in[nin]));
      feeds[nf++] = (FloeFeed){pname[nin], in[nin]};
      snprintf(role, sizeof role, "dx%d", nin);
      want[nin] = load(name, role);
      ck_assert_msg(want[nin] != NULL, "%s: no %s", name, role);
    } else {
      ins[nin] = floe_const(g, NULL, in[nin]);
    }
  }
  ck_assert_msg(nin > 0, "%s: no inputs in %s", name, dir);
  FloeNodeBuilder *b = floe_node_begin(g, op, "op");
  if (strcmp(lists, "-") != 0) {
    int64_t sizes[MAXIN];
    int nl, at = 0;
    parse_int_list(lists, sizes, &nl, MAXIN);
    for (int l = 0; l < nl; l++) {
      floe_node_add_input_list(b, ins + at, (int)sizes[l]);
      at += (int)sizes[l];
    }
    ck_assert_int_eq(at, nin);
  } else {
    for (int i = 0; i < nin; i++) floe_node_add_input(b, ins[i]);
  }
  set_attrs(b, attrs);
  FloeNode *node = floe_node_finish(b);
  FloeOutput ys[MAXOUT], gys[MAXOUT], xs[MAXIN], dxs[MAXIN];
  int ny = 0, nx = 0, xi[MAXIN];
  for (int j = 0; node && j < floe_node_num_outputs(node) && j < MAXOUT; j++) {
    snprintf(role, sizeof role, "dy%d", j);
    if (!(dy[j] = load(name, role))) continue;
    ys[ny] = floe_out(node, j);
    gys[ny++] = floe_const(g, NULL, dy[j]);
  }
  for (int i = 0; i < nin; i++)
    if (want[i]) {
      xi[nx] = i;
      xs[nx++] = ins[i];
    }
  FloeStatus *st = floe_status_new();
  FloeSession *s = NULL;
  FloeTensor *got[MAXIN] = {NULL};
  if (floe_graph_status(g) != FLOE_OK) {
    snprintf(why, whylen, "graph: %s", floe_graph_error(g, NULL));
    goto out;
  }
  if (ny == 0) {
    snprintf(why, whylen, "no dy files");
    goto out;
  }
  if (floe_gradients(g, ys, ny, xs, nx, gys, dxs, st) != FLOE_OK) {
    snprintf(why, whylen, "floe_gradients: %s", floe_status_message(st));
    goto out;
  }
  char fnames[MAXIN][200];
  const char *fetches[MAXIN];
  for (int k = 0; k < nx; k++) {
    if (!dxs[k].node) {
      snprintf(why, whylen, "input %d has no gradient", xi[k]);
      goto out;
    }
    snprintf(fnames[k], sizeof fnames[k], "%s:%d", floe_node_name(dxs[k].node), dxs[k].index);
    fetches[k] = fnames[k];
  }
  FloeSessionOptions o;
  floe_session_options_init(&o);
  o.runtime = rt;
  if (!(s = floe_session_new(g, &o, st)) ||
      floe_session_run(s, feeds, nf, fetches, nx, NULL, 0, got, st) != FLOE_OK) {
    snprintf(why, whylen, "run: %s", floe_status_message(st));
    goto out;
  }
  for (int k = 0; k < nx; k++) {
    const FloeTensor *w = want[xi[k]];
    int64_t n = floe_tensor_num_elements(w);
    FloeShape gs = floe_tensor_shape(got[k]), ws = floe_tensor_shape(w);
    bool same = gs.rank == ws.rank;
    for (int d = 0; same && d < gs.rank; d++) same = gs.dims[d] == ws.dims[d];
    if (!same || floe_tensor_dtype(got[k]) != FLOE_F64) {
      char a[64], c[64];
      snprintf(why, whylen, "gradient of input %d: %s %s, torch's %s", xi[k],
               floe_dtype_name(floe_tensor_dtype(got[k])), floe_shape_str(&gs, a, sizeof a),
               floe_shape_str(&ws, c, sizeof c));
      goto out;
    }
    const double *gv = floe_tensor_data(got[k]), *wv = floe_tensor_data(w);
    for (int64_t e = 0; e < n; e++)
      if (!(fabs(gv[e] - wv[e]) <= 1e-9 * fmax(1.0, fabs(wv[e])))) {
        snprintf(why, whylen, "gradient of input %d [%lld] = %.15g, torch: %.15g", xi[k],
                 (long long)e, gv[e], wv[e]);
        goto out;
      }
  }
  compared = nx;
out:
  for (int k = 0; k < MAXIN; k++) floe_tensor_release(got[k]);
  floe_session_free(s);
  floe_status_free(st);
  for (int i = 0; i < MAXIN; i++) {
    floe_tensor_release(in[i]);
    floe_tensor_release(want[i]);
  }
  for (int j = 0; j < MAXOUT; j++) floe_tensor_release(dy[j]);
  floe_graph_free(g);
  return compared;
}

START_TEST(gradients_match_pytorch) {
  char path[1100];
  snprintf(path, sizeof path, "%s/manifest.txt", dir);
  FILE *f = fopen(path, "r");
  ck_assert_msg(f != NULL, "cannot open %s (is top_srcdir set?)", path);
  char line[512], failures[8192] = "";
  int cases = 0, grads = 0, failed = 0;
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '#' || line[0] == '\n') continue;
    char name[128], op[128], lists[64], attrs[256];
    ck_assert_msg(sscanf(line, "%127s %127s %63s %255s", name, op, lists, attrs) == 4,
                  "bad manifest line: %s", line);
    char why[512] = "";
    int n = run_case(name, op, lists, attrs, why, sizeof why);
    cases++;
    if (n < 0) {
      failed++;
      size_t len = strlen(failures);
      snprintf(failures + len, sizeof failures - len, "\n  %s (%s): %s", name, op, why);
    } else {
      grads += n;
    }
  }
  fclose(f);
  ck_assert_msg(failed == 0, "%d of %d cases differ from PyTorch:%s", failed, cases, failures);
  /* The manifest really held the ~50 cases and their ~70 gradients. */
  ck_assert_int_ge(cases, 40);
  ck_assert_int_ge(grads, 60);
}
END_TEST

int main(void) {
  Suite *s = suite_create("grad_torch");
  TCase *tc = tcase_create("fixtures");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, gradients_match_pytorch);
  tcase_add_checked_fixture(tc, runtime_setup, runtime_teardown);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
