/* SPDX-License-Identifier: Apache-2.0 */
/* bench_placement.c - how good is the placer? A training graph (saved by `floe train
 * --save-graph`) placed four ways on the devices given (default cpu + tpu-sim):
 *
 *   placer      the cost-model placer over all the devices
 *   all-<dev>   everything on one device (the cost model with one device listed; ops it has
 *               no kernel for go to a device that has one)
 *   matmul-acc  matrix-class ops (MatMul, BatchMatMul, convolutions, the LSTM cells)
 *               requested on the accelerator, the rest by the cost model on the CPU
 *
 * For each: the placer's estimated step time, then `--steps` real steps with profiling, and
 * the "measured" step time: the same schedule replayed with every node's mean measured time
 * (a tpu-sim node's simulated time from its cycle model, a CPU node's wall time), transfers
 * at the cost model's figure (floe_session_placement_measured). Feeds: every placeholder gets
 * random values (floats in [-1, 1), integers in [0, 10)); unknown dims take --batch. Then 3
 * more steps, traced, give each strategy's step breakdown (docs/benchmarks.md).
 *
 *   bench_placement GRAPH [--target train] [--init init] [--devices cpu,tpu-sim]
 *                   [--accel tpu-sim:0] [--steps 5] [--batch 64] [--json]
 */
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "floe/floe.h"
#include "bench_util.h"

typedef struct Opts {
  const char *graph, *target, *init, *devices, *accel;
  int steps, json;
  int64_t batch;
} Opts;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double uniform(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (double)(rng >> 11) * (1.0 / 9007199254740992.0);
}

/* A random value for placeholder n (unknown dims: batch). */
static FloeTensor *random_feed(FloeNode *n, int64_t batch) {
  FloeShape s = floe_node_output_shape(n, 0);
  FloeDType dt = floe_node_output_dtype(n, 0);
  int64_t dims[FLOE_MAX_DIMS];
  int rank = s.rank < 0 ? 1 : s.rank;
  int64_t count = 1;
  for (int i = 0; i < rank; i++) {
    dims[i] = s.rank < 0 || s.dims[i] < 0 ? batch : s.dims[i];
    count *= dims[i];
  }
  FloeTensor *t = floe_tensor_new(dt, rank, dims, NULL);
  if (!t) return NULL;
  void *p = floe_tensor_data(t);
  for (int64_t i = 0; i < count; i++) {
    switch (dt) {
      case FLOE_F32: ((float *)p)[i] = (float)(2 * uniform() - 1); break;
      case FLOE_F64: ((double *)p)[i] = 2 * uniform() - 1; break;
      case FLOE_I32: ((int32_t *)p)[i] = (int32_t)(uniform() * 10); break;
      case FLOE_I64: ((int64_t *)p)[i] = (int64_t)(uniform() * 10); break;
      case FLOE_BOOL: ((uint8_t *)p)[i] = uniform() < 0.5; break;
      default: memset(p, 0, floe_tensor_nbytes(t)); i = count; break;
    }
  }
  return t;
}

static int is_matrix_op(const char *op) {
  return strcmp(op, "MatMul") == 0 || strcmp(op, "BatchMatMul") == 0 ||
         strncmp(op, "Conv2D", 6) == 0 || strncmp(op, "LSTMCell", 8) == 0;
}

typedef struct Result {
  char name[64];
  double estimate, measured, wall;
  int transfers;
  int ok;
  int has_bd;           /* bd was filled */
  FloeStepBreakdown bd; /* of 3 more steps, traced (the timed ones were not) */
} Result;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* One strategy: the graph g as given (requests set by the caller), placed among devices. */
static Result run_one(const char *name, FloeGraph *g, const char *devices, int soft,
                      const Opts *o) {
  Result r = {.ok = 0};
  snprintf(r.name, sizeof r.name, "%s", name);
  FloeStatus *st = floe_status_new();
  FloeSessionOptions so;
  floe_session_options_init(&so);
  so.devices = devices;
  so.allow_soft_placement = soft; /* a requested device without the kernel: elsewhere */
  FloeSession *s = floe_session_new(g, &so, st);
  int nf = 0;
  FloeFeed feeds[64];
  char *names[64];
  for (int i = 0; s && i < floe_graph_num_nodes(g) && nf < 64; i++) {
    FloeNode *n = floe_graph_node(g, i);
    if (strcmp(floe_node_op(n), "Placeholder") != 0) continue;
    names[nf] = strdup(floe_node_name(n));
    feeds[nf] = (FloeFeed){names[nf], random_feed(n, o->batch)};
    nf++;
  }
  FloeNodePlacement *rows = NULL;
  int nrows = 0;
  double measured = -1;
  if (!s) {
    fprintf(stderr, "%s: session: %s\n", name, floe_status_message(st));
  } else if (floe_session_run(s, NULL, 0, NULL, 0, &o->init, 1, NULL, st) != FLOE_OK) {
    fprintf(stderr, "%s: init: %s\n", name, floe_status_message(st));
  } else if (floe_session_placement(s, feeds, nf, NULL, 0, &o->target, 1, &rows, &nrows,
                                    &r.estimate, &r.transfers, st) != FLOE_OK) {
    fprintf(stderr, "%s: placement: %s\n", name, floe_status_message(st));
  } else {
    free(rows);
    rows = NULL;
    FloeRunOptions ro;
    floe_run_options_init(&ro);
    ro.timeout_ms = 600000; /* a hang is reported, not waited out */
    int ok = floe_session_run_opts(s, &ro, feeds, nf, NULL, 0, &o->target, 1, NULL, st) == FLOE_OK; /* warm */
    floe_session_set_profiling(s, 1);
    double t0 = now_s();
    for (int k = 0; ok && k < o->steps; k++)
      ok = floe_session_run(s, feeds, nf, NULL, 0, &o->target, 1, NULL, st) == FLOE_OK;
    r.wall = (now_s() - t0) / o->steps;
    floe_session_set_profiling(s, 0);
    if (!ok) {
      fprintf(stderr, "%s: step: %s\n", name, floe_status_message(st));
    } else if (floe_session_placement_measured(s, feeds, nf, NULL, 0, &o->target, 1, &rows,
                                               &nrows, NULL, NULL, &measured, st) != FLOE_OK) {
      fprintf(stderr, "%s: measured: %s\n", name, floe_status_message(st));
    } else {
      r.measured = measured;
      r.ok = measured >= 0;
      BenchStep one = {s, feeds, nf, NULL, 0, &o->target, 1};
      r.has_bd = bench_breakdown(s, bench_step_run, &one, 3, &r.bd) == 0;
    }
    free(rows);
  }
  for (int i = 0; i < nf; i++) {
    floe_tensor_release(feeds[i].value);
    free(names[i]);
  }
  floe_session_free(s);
  floe_status_free(st);
  return r;
}

static int parse(int argc, char **argv, Opts *o) {
  static const struct option opts[] = {
      {"target", required_argument, NULL, 't'}, {"init", required_argument, NULL, 'i'},
      {"devices", required_argument, NULL, 'd'}, {"accel", required_argument, NULL, 'a'},
      {"steps", required_argument, NULL, 's'},  {"batch", required_argument, NULL, 'b'},
      {"json", no_argument, NULL, 'j'},         {NULL, 0, NULL, 0}};
  *o = (Opts){.target = "train", .init = "init", .devices = "cpu,tpu-sim", .accel = "tpu-sim:0",
              .steps = 5, .batch = 64};
  int c;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
      case 't': o->target = optarg; break;
      case 'i': o->init = optarg; break;
      case 'd': o->devices = optarg; break;
      case 'a': o->accel = optarg; break;
      case 's': o->steps = atoi(optarg); break;
      case 'b': o->batch = atoll(optarg); break;
      case 'j': o->json = 1; break;
      default: return 1;
    }
  }
  if (optind != argc - 1 || o->steps < 1 || o->batch < 1) {
    fprintf(stderr, "usage: bench_placement GRAPH [--target T] [--init I] [--devices LIST] "
                    "[--accel DEV] [--steps N] [--batch N] [--json]\n");
    return 1;
  }
  o->graph = argv[optind];
  return 0;
}

int main(int argc, char **argv) {
  Opts o;
  if (parse(argc, argv, &o)) return 2;
  FloeStatus *st = floe_status_new();
  FloeGraph *g = floe_graph_load(o.graph, st);
  if (!g) {
    fprintf(stderr, "bench_placement: %s\n", floe_status_message(st));
    return 1;
  }
  Result res[8];
  int nr = 0;
  res[nr++] = run_one("placer", g, o.devices, 0, &o);
  /* everything on each listed device type */
  char list[256];
  snprintf(list, sizeof list, "%s", o.devices);
  for (char *tok = strtok(list, ","); tok && nr < 6; tok = strtok(NULL, ",")) {
    char name[64];
    snprintf(name, sizeof name, "all-%s", tok);
    res[nr++] = run_one(name, g, tok, 0, &o);
  }
  /* matrix-class ops on the accelerator, the rest on the CPU */
  for (int i = 0; i < floe_graph_num_nodes(g); i++) {
    FloeNode *n = floe_graph_node(g, i);
    if (is_matrix_op(floe_node_op(n))) floe_node_request_device(n, o.accel, NULL);
  }
  res[nr++] = run_one("matmul-acc", g, "cpu", 1, &o);
  double best_alt = INFINITY;
  for (int i = 1; i < nr; i++)
    if (res[i].ok && res[i].measured < best_alt) best_alt = res[i].measured;
  if (o.json) {
    printf("{\"graph\":\"%s\",\"devices\":\"%s\",\"strategies\":[", o.graph, o.devices);
    for (int i = 0; i < nr; i++) {
      printf("%s{\"name\":\"%s\",\"ok\":%d,\"estimated_ms\":%.4f,\"measured_ms\":%.4f,"
             "\"host_wall_ms\":%.3f,\"transfers\":%d,\"breakdown\":",
             i ? "," : "", res[i].name, res[i].ok, res[i].estimate * 1e3, res[i].measured * 1e3,
             res[i].wall * 1e3, res[i].transfers);
      if (res[i].has_bd) bench_breakdown_json(stdout, &res[i].bd);
      else printf("null");
      printf("}");
    }
    printf("],\"placer_vs_best_alternative\":%.3f}\n",
           res[0].ok && isfinite(best_alt) ? best_alt / res[0].measured : 0.0);
  } else {
    printf("%-16s %14s %14s %14s %10s\n", "strategy", "estimated_ms", "measured_ms",
           "host_wall_ms", "transfers");
    for (int i = 0; i < nr; i++)
      printf("%-16s %14.3f %14.3f %14.1f %10d%s\n", res[i].name, res[i].estimate * 1e3,
             res[i].measured * 1e3, res[i].wall * 1e3, res[i].transfers, res[i].ok ? "" : "  (failed)");
    if (res[0].ok && isfinite(best_alt))
      printf("measured step time: best alternative / placer = %.3f\n", best_alt / res[0].measured);
    for (int i = 0; i < nr; i++)
      if (res[i].has_bd) {
        char what[80];
        snprintf(what, sizeof what, "%.63s (traced)", res[i].name);
        bench_breakdown_print(stdout, what, &res[i].bd);
      }
  }
  floe_graph_free(g);
  floe_status_free(st);
  return res[0].ok ? 0 : 1;
}
