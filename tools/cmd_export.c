/* SPDX-License-Identifier: Apache-2.0 */
/* cmd_export.c - floe export: a Floe graph file written in another format (ONNX). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <floe/floe_onnx.h>

#include "cli.h"

static const char export_help[] =
    "Usage: floe export GRAPH --onnx OUT.onnx [--output NAME]... [--opset N] [--json]\n"
    "  Writes the inference graph GRAPH (a Floe graph file, e.g. from floe train --export)\n"
    "  as an ONNX model (IR version 8). Placeholders become the model's inputs, Consts its\n"
    "  initializers; values keep their Floe names. An op without an ONNX mapping is an\n"
    "  error naming the node, and nothing is written.\n"
    "  --onnx OUT.onnx        the model file to write\n"
    "  --output NAME          a graph output (\"node\" or \"node:k\"; repeatable); default:\n"
    "                         every output of the nodes nothing else consumes\n"
    "  --opset N              the ONNX opset, 13 to 17 (default 13)\n"
    "  --json                 print one JSON line: graph, onnx, opset, outputs\n";

#define MAX_OUTPUTS 64

int cmd_export(int argc, char **argv) {
  static const struct option opts[] = {{"onnx", required_argument, NULL, 'o'},
                                       {"output", required_argument, NULL, 'O'},
                                       {"opset", required_argument, NULL, 's'},
                                       {"json", no_argument, NULL, 'j'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  const char *onnx = NULL, *outputs[MAX_OUTPUTS];
  int nout = 0, json = 0, c;
  FloeOnnxExportOptions eo;
  floe_onnx_export_options_init(&eo);
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
      case 'o': onnx = optarg; break;
      case 'O':
        if (nout == MAX_OUTPUTS) return cli_usage("export", "at most 64 --output options");
        outputs[nout++] = optarg;
        break;
      case 's': {
        char *end;
        long v = strtol(optarg, &end, 10);
        if (*end || v < 13 || v > 17) return cli_usage("export", "--opset takes 13 to 17");
        eo.opset = (int)v;
        break;
      }
      case 'j': json = 1; break;
      case 'h': fputs(export_help, stdout); return 0;
      default: return cli_usage("export", "unknown option or missing value");
    }
  }
  if (optind + 1 != argc) return cli_usage("export", "give one GRAPH file");
  if (!onnx) return cli_usage("export", "--onnx OUT.onnx is required (the only format)");
  const char *path = argv[optind];
  /* Loading checks ops against their definitions; the runtime brings the plugins' custom ops. */
  if (!cli_runtime("export")) return 1;
  FloeStatus *st = floe_status_new();
  int rc = 0;
  FloeGraph *g = floe_graph_load(path, st);
  if (!g) {
    rc = cli_error("export", "%s", floe_status_message(st));
    goto out;
  }
  eo.outputs = nout ? outputs : NULL;
  eo.num_outputs = nout;
  if (floe_onnx_export_file(g, onnx, &eo, st) != FLOE_OK) {
    rc = cli_error("export", "%s: %s", path, floe_status_message(st));
    goto out;
  }
  if (json) {
    JsonWriter w;
    json_init(&w, stdout);
    json_begin_object(&w);
    json_key(&w, "graph"), json_string(&w, path);
    json_key(&w, "onnx"), json_string(&w, onnx);
    json_key(&w, "opset"), json_int(&w, eo.opset);
    json_end_object(&w);
    fputc('\n', stdout);
  } else {
    printf("wrote %s (ONNX opset %d) from %s\n", onnx, eo.opset, path);
  }
out:
  floe_graph_free(g);
  floe_status_free(st);
  return rc;
}
