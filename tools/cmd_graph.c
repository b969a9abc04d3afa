/* cmd_graph.c - floe graph GRAPH [--dot] [--json]: describe or draw a graph file. */
#include <getopt.h>
#include <stdio.h>

#include "cli.h"

static const char graph_help[] =
    "Usage: floe graph GRAPH [--dot | --json]\n"
    "Describe a graph file: one line per node (name, op, inputs, output dtypes and\n"
    "shapes, requested device). --dot writes Graphviz DOT (pipe it to 'dot -Tsvg');\n"
    "--json writes the same description as JSON.\n";

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
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  int dot = 0, json = 0, c;
  optind = 1;
  while ((c = getopt_long(argc, argv, "djh", opts, NULL)) != -1) {
    if (c == 'd') dot = 1;
    else if (c == 'j') json = 1;
    else if (c == 'h') {
      printf("%s", graph_help);
      return 0;
    } else
      return cli_usage("graph", "unknown option");
  }
  if (optind != argc - 1) return cli_usage("graph", "expected exactly one GRAPH file");
  if (dot && json) return cli_usage("graph", "--dot and --json exclude each other");
  /* Plugins may define custom ops the file uses. */
  if (!cli_runtime("graph")) return 1;
  FloeStatus *st = floe_status_new();
  FloeGraph *g = floe_graph_load(argv[optind], st);
  int rc = 0;
  if (!g) {
    rc = cli_error("graph", "%s", floe_status_message(st));
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
