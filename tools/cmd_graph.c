/* SPDX-License-Identifier: Apache-2.0 */
/* cmd_graph.c - floe graph GRAPH [--dot] [--json] [--placement [--devices LIST]]
 * [--optimized]: describe, draw, place or optimise a graph file. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include <floe/floe_onnx.h>

#include "cli.h"

static const char graph_help[] =
    "Usage: floe graph GRAPH [--dot | --json] [--placement [--devices LIST] | --optimized]\n"
    "Describe a graph file (or an ONNX model, MODEL.onnx, as imported; --trainable imports\n"
    "its float initializers as variables):\n"
    "one line per node (name, op, inputs, output dtypes and\n"
    "shapes, requested device). --dot writes Graphviz DOT (pipe it to 'dot -Tsvg');\n"
    "--json writes the same description as JSON.\n"
    "--placement places the graph as a run of all its sinks would (placeholders fed):\n"
    "one line per node with its device and simulated start and time, then the\n"
    "estimated step time; with --dot the nodes are coloured by device.\n"
    "--devices LIST places with the cost model among these devices (e.g. cpu,tpu-sim);\n"
    "without it a node goes to its requested device, else the first with a kernel.\n"
    "--optimized describes (or draws) the graph a run of all its sinks executes after the\n"
    "graph optimiser (placeholders fed), with a line per pass first: what it rewrote,\n"
    "removed and added, the nodes left and the layout conversions (comments in DOT; on\n"
    "standard error with --json). FLOE_OPT_<PASS>=0 / FLOE_OPTIMIZE=0 turn passes off.\n";

/* Places g; prints the table (or, with dot, the coloured picture; with json, JSON). */
static int placement(const FloeGraph *g, const char *devices, int dot, int json, FloeStatus *st) {
  FloeSessionOptions so;
  floe_session_options_init(&so);
  so.devices = devices;
  FloeSession *s = floe_session_new(g, &so, st);
  if (!s) return cli_error("graph", "%s", floe_status_message(st));
  FloeNodePlacement *rows = NULL;
  int n = 0, transfers = 0;
  double est = 0;
  int rc = 0;
  if (floe_session_placement(s, NULL, 0, NULL, 0, NULL, 0, &rows, &n, &est, &transfers, st) !=
      FLOE_OK) {
    rc = cli_error("graph", "%s", floe_status_message(st));
  } else if (dot) {
    const char **dev = calloc((size_t)floe_graph_num_nodes(g) + 1, sizeof *dev);
    if (!dev) {
      rc = cli_error("graph", "out of memory");
    } else {
      for (int i = 0; i < n; i++)
        if (rows[i].graph_index >= 0) dev[rows[i].graph_index] = rows[i].device;
      if (floe_graph_write_dot_devices(g, dev, stdout, st) != FLOE_OK)
        rc = cli_error("graph", "%s", floe_status_message(st));
      free(dev);
    }
  } else if (json) {
    JsonWriter w;
    json_init(&w, stdout);
    json_begin_object(&w);
    json_key(&w, "estimated_step_seconds"), json_double(&w, est);
    json_key(&w, "transfers"), json_int(&w, transfers);
    json_key(&w, "nodes"), json_begin_array(&w);
    for (int i = 0; i < n; i++) {
      json_begin_object(&w);
      json_key(&w, "name"), json_string(&w, rows[i].node);
      json_key(&w, "op"), json_string(&w, rows[i].op);
      json_key(&w, "device"), json_string(&w, rows[i].device);
      json_key(&w, "start_seconds"), json_double(&w, rows[i].start);
      json_key(&w, "seconds"), json_double(&w, rows[i].seconds);
      json_end_object(&w);
    }
    json_end_array(&w);
    json_end_object(&w);
    json_finish(&w);
  } else {
    printf("%-40s %-24s %-12s %12s %12s\n", "NODE", "OP", "DEVICE", "START_US", "TIME_US");
    for (int i = 0; i < n; i++)
      printf("%-40s %-24s %-12s %12.1f %12.1f\n", rows[i].node, rows[i].op, rows[i].device,
             rows[i].start * 1e6, rows[i].seconds * 1e6);
    printf("estimated step time %.1f us, %d transfer%s across devices\n", est * 1e6, transfers,
           transfers == 1 ? "" : "s");
  }
  free(rows);
  floe_session_free(s);
  return rc;
}

static void describe(const FloeGraph *g);
static void describe_json(const FloeGraph *g);

/* The graph after the optimiser, the passes' lines first. */
static int optimized(const FloeGraph *g, int dot, int json, FloeStatus *st) {
  FloeSessionOptions so;
  floe_session_options_init(&so);
  FloeSession *s = floe_session_new(g, &so, st);
  if (!s) return cli_error("graph", "%s", floe_status_message(st));
  FloeGraph *out = NULL;
  FloeOptPassStats *ps = NULL;
  int np = 0, rc = 0;
  if (floe_session_optimized(s, NULL, 0, NULL, 0, NULL, 0, &out, &ps, &np, st) != FLOE_OK) {
    rc = cli_error("graph", "%s", floe_status_message(st));
  } else {
    FILE *f = json ? stderr : stdout;
    for (int i = 0; i < np; i++)
      fprintf(f, "%s pass %-10s %s: %d nodes -> %d, %d rewritten, %d removed, %d added, %d "
              "layout conversions left, %.1f ms\n", dot ? "//" : "#", ps[i].name,
              ps[i].enabled ? "on " : "off", ps[i].nodes_before, ps[i].nodes_after,
              ps[i].rewritten, ps[i].removed, ps[i].added, ps[i].conversions,
              ps[i].seconds * 1e3);
    if (dot) {
      if (floe_graph_write_dot(out, stdout, st) != FLOE_OK)
        rc = cli_error("graph", "%s", floe_status_message(st));
    } else if (json) {
      describe_json(out);
    } else {
      describe(out);
    }
  }
  free(ps);
  floe_graph_free(out);
  floe_session_free(s);
  return rc;
}

static void describe(const FloeGraph *g) {
  for (int i = 0; i < floe_graph_num_nodes(g); i++) {
    FloeNode *n = floe_graph_node(g, i);
    printf("%s = %s(", floe_node_name(n), floe_node_op(n));
    for (int k = 0; k < floe_node_num_inputs(n); k++) {
      FloeOutput in = floe_node_input(n, k);
      printf("%s%s", k ? ", " : "", floe_node_name(in.node));
      if (in.index) printf(":%d", in.index);
    }
    for (int k = 0; k < floe_node_num_control_inputs(n); k++)
      printf("%s^%s", (k || floe_node_num_inputs(n)) ? ", " : "",
             floe_node_name(floe_node_control_input(n, k)));
    printf(")");
    for (int k = 0; k < floe_node_num_outputs(n); k++) {
      FloeShape s = floe_node_output_shape(n, k);
      char buf[160];
      printf("%s%s%s", k ? ", " : " -> ", floe_dtype_name(floe_node_output_dtype(n, k)),
             floe_shape_str(&s, buf, sizeof buf));
    }
    if (*floe_node_device(n)) printf(" @%s", floe_node_device(n));
    printf("\n");
  }
}

static void describe_json(const FloeGraph *g) {
  JsonWriter w;
  json_init(&w, stdout);
  json_begin_object(&w);
  json_key(&w, "nodes"), json_begin_array(&w);
  for (int i = 0; i < floe_graph_num_nodes(g); i++) {
    FloeNode *n = floe_graph_node(g, i);
    json_begin_object(&w);
    json_key(&w, "name"), json_string(&w, floe_node_name(n));
    json_key(&w, "op"), json_string(&w, floe_node_op(n));
    json_key(&w, "device"), json_string(&w, floe_node_device(n));
    json_key(&w, "inputs"), json_begin_array(&w);
    for (int k = 0; k < floe_node_num_inputs(n); k++) {
      FloeOutput in = floe_node_input(n, k);
      char buf[512];
      snprintf(buf, sizeof buf, "%s:%d", floe_node_name(in.node), in.index);
      json_string(&w, buf);
    }
    json_end_array(&w);
    json_key(&w, "control_inputs"), json_begin_array(&w);
    for (int k = 0; k < floe_node_num_control_inputs(n); k++)
      json_string(&w, floe_node_name(floe_node_control_input(n, k)));
    json_end_array(&w);
    json_key(&w, "outputs"), json_begin_array(&w);
    for (int k = 0; k < floe_node_num_outputs(n); k++) {
      FloeShape s = floe_node_output_shape(n, k);
      json_begin_object(&w);
      json_key(&w, "dtype"), json_string(&w, floe_dtype_name(floe_node_output_dtype(n, k)));
      json_key(&w, "shape");
      if (s.rank < 0) {
        json_null(&w);
      } else {
        json_begin_array(&w);
        for (int d = 0; d < s.rank; d++) s.dims[d] < 0 ? json_null(&w) : json_int(&w, s.dims[d]);
        json_end_array(&w);
      }
      json_end_object(&w);
    }
    json_end_array(&w);
    json_end_object(&w);
  }
  json_end_array(&w);
  json_end_object(&w);
  json_finish(&w);
}

int cmd_graph(int argc, char **argv) {
  static const struct option opts[] = {{"dot", no_argument, NULL, 'd'},
                                       {"json", no_argument, NULL, 'j'},
                                       {"placement", no_argument, NULL, 'p'},
                                       {"devices", required_argument, NULL, 'D'},
                                       {"trainable", no_argument, NULL, 'T'},
                                       {"optimized", no_argument, NULL, 'O'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  int dot = 0, json = 0, place = 0, trainable = 0, opt = 0, c;
  const char *devices = NULL;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":djh", opts, NULL)) != -1) {
    if (c == 'd') dot = 1;
    else if (c == 'j') json = 1;
    else if (c == 'p') place = 1;
    else if (c == 'D') devices = optarg;
    else if (c == 'T') trainable = 1;
    else if (c == 'O') opt = 1;
    else if (c == 'h') {
      printf("%s", graph_help);
      return 0;
    } else
      return cli_bad_option("graph", c, argv, opts);
  }
  if (optind != argc - 1) return cli_usage("graph", "expected exactly one GRAPH file");
  if (dot && json) return cli_usage("graph", "--dot and --json exclude each other");
  if (devices && !place) return cli_usage("graph", "--devices goes with --placement");
  if (opt && place) return cli_usage("graph", "--optimized and --placement exclude each other");
  /* Plugins may define custom ops the file uses. */
  if (!cli_runtime("graph")) return 1;
  FloeStatus *st = floe_status_new();
  FloeGraph *g = NULL;
  if (cli_is_onnx(argv[optind])) {
    FloeOnnxOptions oo;
    floe_onnx_options_init(&oo);
    oo.trainable = trainable;
    FloeOnnxModel *m = floe_onnx_import_file(argv[optind], &oo, st);
    g = floe_onnx_model_take_graph(m);
    floe_onnx_model_free(m);
  } else {
    g = floe_graph_load(argv[optind], st);
  }
  int rc = 0;
  if (!g) {
    rc = cli_error("graph", "%s", floe_status_message(st));
  } else if (place) {
    rc = placement(g, devices, dot, json, st);
  } else if (opt) {
    rc = optimized(g, dot, json, st);
  } else if (dot) {
    if (floe_graph_write_dot(g, stdout, st) != FLOE_OK)
      rc = cli_error("graph", "%s", floe_status_message(st));
  } else if (json) {
    describe_json(g);
  } else {
    describe(g);
  }
  floe_graph_free(g);
  floe_status_free(st);
  return rc;
}
