/* SPDX-License-Identifier: Apache-2.0 */
/* null_step_graphs.c - the graphs of the paper's null-step microbenchmark (TensorFlow OSDI
 * 2016, section 6.2: "null training steps" whose workers only fetch the model from the ps
 * tasks and return a scalar), for W workers and P ps tasks:
 *   scalar: each ps holds a 4-byte value; every worker reads each and adds them.
 *   dense:  a model of B bytes split evenly over the ps tasks; every worker reads all of it
 *           and sums it (the paper: 100 MB; the size is an argument here).
 *   sparse: an embedding of R rows of 64 f32 split over the ps tasks; every worker gathers
 *           32 rows from each shard (the paper: a 1 GB model, 32 random entries).
 * The chief adds the workers' scalars ("out"). Values are constants on the ps tasks (no
 * optimiser runs in a null step) so no initialisation is needed.
 * Usage: null_step_graphs DIR WORKERS PS DENSE_BYTES SPARSE_ROWS */
#include <floe/floe.h>
#include <stdio.h>
#include <stdlib.h>

static FloeOutput op2(FloeGraph *g, const char *op, FloeOutput a, FloeOutput b, const char *dev) {
  FloeNodeBuilder *nb = floe_node_begin(g, op, NULL);
  floe_node_add_input(nb, a);
  floe_node_add_input(nb, b);
  if (dev) floe_node_set_device(nb, dev);
  return floe_out(floe_node_finish(nb), 0);
}

static FloeOutput konst(FloeGraph *g, FloeTensor *t, const char *dev) {
  floe_graph_set_device_scope(g, dev);
  FloeOutput o = floe_const(g, NULL, t);
  floe_graph_set_device_scope(g, NULL);
  floe_tensor_release(t);
  return o;
}

static FloeOutput sum_all(FloeGraph *g, FloeOutput x, int rank, const char *dev) {
  int32_t ax[2] = {0, 1};
  int64_t n = rank;
  return op2(g, "Sum", x, konst(g, floe_tensor_from_data(FLOE_I32, 1, &n, ax, sizeof(int32_t) * (size_t)rank, NULL), dev), dev);
}

static int build(const char *dir, const char *kind, int W, int P, long long dense, long long rows) {
  FloeGraph *g = floe_graph_new();
  FloeOutput shard[64];
  char dev[96];
  for (int p = 0; p < P; p++) {
    snprintf(dev, sizeof dev, "/job:ps/task:%d/device:cpu:0", p);
    FloeTensor *t;
    if (kind[0] == 's' && kind[1] == 'c') {
      t = floe_tensor_scalar_f32(1.0f, NULL);
    } else if (kind[0] == 'd') {
      int64_t n = dense / 4 / P;
      t = floe_tensor_new(FLOE_F32, 1, &n, NULL);
    } else {
      int64_t d[2] = {rows / P, 64};
      t = floe_tensor_new(FLOE_F32, 2, d, NULL);
    }
    if (!t) return 1;
    shard[p] = konst(g, t, dev);
  }
  FloeOutput total = {0};
  for (int w = 0; w < W; w++) {
    snprintf(dev, sizeof dev, "/job:worker/task:%d/device:cpu:0", w);
    FloeOutput acc = {0};
    for (int p = 0; p < P; p++) {
      FloeOutput v = shard[p];
      if (kind[0] == 's' && kind[1] == 'p') { /* 32 rows of this shard */
        int32_t idx[32];
        for (int i = 0; i < 32; i++) idx[i] = (int32_t)(((long long)i * 7919 + w * 104729) % (rows / P));
        int64_t n = 32;
        FloeOutput ix = konst(g, floe_tensor_from_data(FLOE_I32, 1, &n, idx, sizeof idx, NULL), dev);
        FloeNodeBuilder *nb = floe_node_begin(g, "Gather", NULL);
        floe_node_add_input(nb, v);
        floe_node_add_input(nb, ix);
        /* the gather runs where the shard lives: only 32 rows cross */
        char psdev[96];
        snprintf(psdev, sizeof psdev, "/job:ps/task:%d/device:cpu:0", p);
        floe_node_set_device(nb, psdev);
        v = floe_out(floe_node_finish(nb), 0);
        v = sum_all(g, v, 2, dev);
      } else if (kind[0] == 'd') {
        v = sum_all(g, v, 1, dev);
      } else {
        FloeNodeBuilder *nb = floe_node_begin(g, "Identity", NULL);
        floe_node_add_input(nb, v);
        floe_node_set_device(nb, dev);
        v = floe_out(floe_node_finish(nb), 0);
      }
      acc = p == 0 ? v : op2(g, "Add", acc, v, dev);
    }
    total = w == 0 ? acc : op2(g, "Add", total, acc, NULL);
  }
  FloeNodeBuilder *nb = floe_node_begin(g, "Identity", "out");
  floe_node_add_input(nb, total);
  floe_node_finish(nb);
  char path[4096];
  snprintf(path, sizeof path, "%s/null_%s_w%d_ps%d.floe", dir, kind, W, P);
  FloeStatus *st = floe_status_new();
  int bad = floe_graph_status(g) != FLOE_OK || floe_graph_save(g, path, st) != FLOE_OK;
  if (bad) fprintf(stderr, "null_step_graphs: %s: %s%s\n", path, floe_graph_error(g, NULL), floe_status_message(st));
  floe_status_free(st);
  floe_graph_free(g);
  return bad;
}

int main(int argc, char **argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: null_step_graphs DIR WORKERS PS DENSE_BYTES SPARSE_ROWS\n");
    return 2;
  }
  int W = atoi(argv[2]), P = atoi(argv[3]);
  long long dense = atoll(argv[4]), rows = atoll(argv[5]);
  if (W < 1 || P < 1 || P > 64 || dense < 4 * P || rows < 32 * P) {
    fprintf(stderr, "null_step_graphs: bad sizes\n");
    return 2;
  }
  return build(argv[1], "scalar", W, P, dense, rows) | build(argv[1], "dense", W, P, dense, rows) |
         build(argv[1], "sparse", W, P, dense, rows);
}
