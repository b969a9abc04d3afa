/* SPDX-License-Identifier: Apache-2.0 */
/* cmd_run.c - floe run GRAPH --feed NAME=FILE.npy ... --fetch NAME ... [--out DIR], and
 * floe run MODEL.onnx --input NAME=FILE(.npy|.pb) ... [--out DIR]. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <floe/floe_onnx.h>

#include "cli.h"

static const char run_help[] =
    "Usage: floe run GRAPH [--feed NAME=FILE.npy]... --fetch NAME... [--target NODE]...\n"
    "                [--out DIR] [--device DEV] [--json]\n"
    "Run one step of a graph file. NAME is a node ('logits') or one of its outputs\n"
    "('split:1'). Feeding a tensor cuts the graph there; only what the fetches and\n"
    "targets need runs.\n"
    "       floe run MODEL.onnx [--input NAME=FILE]... [--fetch NAME]... [--out DIR] [--json]\n"
    "An ONNX model is imported first; its inputs and outputs keep their ONNX names, and\n"
    "with no --fetch every graph output is fetched.\n"
    "  --feed NAME=FILE.npy  value of a placeholder or any tensor (NumPy .npy, or an ONNX\n"
    "                        TensorProto .pb)\n"
    "  --input NAME=FILE     the same (the name ONNX users expect)\n"
    "  --trainable           ONNX: import float initializers as variables (initialised\n"
    "                        before the step), as fine-tuning would\n"
    "  --fetch NAME          tensor to return (repeatable)\n"
    "  --target NODE         node to run for its side effects (repeatable)\n"
    "  --out DIR             write each fetch to DIR/NAME.npy (':' becomes '_')\n"
    "  --device DEV          default device for nodes with no request (e.g. cpu:0)\n"
    "  --json                print one JSON object describing the outputs\n";

/* Prints up to 16 values of a host tensor. */
static void print_values(const FloeTensor *t) {
  int64_t n = floe_tensor_num_elements(t), shown = n < 16 ? n : 16;
  const void *d = floe_tensor_data(t);
  char num[32];
  printf("[");
  for (int64_t i = 0; i < shown; i++) {
    if (i) printf(", ");
    switch (floe_tensor_dtype(t)) {
      case FLOE_F32: fputs(json_format_float(num, ((const float *)d)[i]), stdout); break;
      case FLOE_F64: fputs(json_format_double(num, ((const double *)d)[i]), stdout); break;
      case FLOE_F16: printf("%.4g", floe_f16_to_f32(((const uint16_t *)d)[i])); break;
      case FLOE_BF16: printf("%.3g", floe_bf16_to_f32(((const uint16_t *)d)[i])); break;
      case FLOE_I8: printf("%d", ((const int8_t *)d)[i]); break;
      case FLOE_U8: printf("%u", ((const uint8_t *)d)[i]); break;
      case FLOE_I32: printf("%d", ((const int32_t *)d)[i]); break;
      case FLOE_I64: printf("%lld", (long long)((const int64_t *)d)[i]); break;
      case FLOE_BOOL: printf("%s", ((const uint8_t *)d)[i] ? "true" : "false"); break;
      default: printf("?"); break;
    }
  }
  printf("%s]", n > shown ? ", ..." : "");
}

/* DIR/NAME.npy with ':' and '/' in NAME replaced. Caller frees. */
static char *out_path(const char *dir, const char *name) {
  size_t len = strlen(dir) + strlen(name) + 8;
  char *p = malloc(len);
  if (!p) return NULL;
  int n = snprintf(p, len, "%s/", dir);
  for (const char *c = name; *c; c++) p[n++] = (*c == ':' || *c == '/') ? '_' : *c;
  strcpy(p + n, ".npy");
  return p;
}

int cmd_run(int argc, char **argv) {
  static const struct option opts[] = {
      {"feed", required_argument, NULL, 'f'},  {"fetch", required_argument, NULL, 'F'},
      {"input", required_argument, NULL, 'f'},  {"trainable", no_argument, NULL, 'T'},
      {"target", required_argument, NULL, 't'}, {"out", required_argument, NULL, 'o'},
      {"device", required_argument, NULL, 'd'}, {"json", no_argument, NULL, 'j'},
      {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0}};
  const char **feed_specs = calloc((size_t)argc, sizeof *feed_specs);
  const char **fetches = calloc((size_t)argc, sizeof *fetches);
  const char **targets = calloc((size_t)argc, sizeof *targets);
  FloeFeed *feeds = calloc((size_t)argc, sizeof *feeds);
  FloeTensor **outputs = calloc((size_t)argc, sizeof *outputs);
  int nfeed = 0, nfetch = 0, ntarget = 0, json = 0, rc = 1, c, trainable = 0;
  const char *out_dir = NULL, *device = NULL;
  FloeStatus *st = floe_status_new();
  FloeGraph *g = NULL;
  FloeSession *s = NULL;
  FloeOnnxModel *model = NULL;
  const char **fetch_names = NULL;
  if (!feed_specs || !fetches || !targets || !feeds || !outputs || !st) {
    rc = cli_error("run", "out of memory");
    goto out;
  }
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":f:F:t:o:d:jh", opts, NULL)) != -1) {
    switch (c) {
      case 'f': feed_specs[nfeed++] = optarg; break;
      case 'F': fetches[nfetch++] = optarg; break;
      case 't': targets[ntarget++] = optarg; break;
      case 'o': out_dir = optarg; break;
      case 'd': device = optarg; break;
      case 'j': json = 1; break;
      case 'T': trainable = 1; break;
      case 'h': printf("%s", run_help); rc = 0; goto out;
      default: rc = cli_bad_option("run", c, argv, opts); goto out;
    }
  }
  if (optind != argc - 1) {
    rc = cli_usage("run", "expected exactly one GRAPH file");
    goto out;
  }
  const char *graph_path = argv[optind];
  int onnx = cli_is_onnx(graph_path);
  if (nfetch == 0 && ntarget == 0 && !onnx) {
    rc = cli_usage("run", "nothing to do: give --fetch NAME or --target NODE");
    goto out;
  }
  if (!cli_runtime("run")) goto out;
  if (onnx) {
    FloeOnnxOptions oo;
    floe_onnx_options_init(&oo);
    oo.trainable = trainable;
    model = floe_onnx_import_file(graph_path, &oo, st);
    g = model ? floe_onnx_model_take_graph(model) : NULL;
  } else {
    g = floe_graph_load(graph_path, st);
  }
  if (!g) {
    rc = cli_error("run", "%s", floe_status_message(st));
    goto out;
  }
  /* ONNX names -> Floe names: inputs to their placeholders, outputs to their fetches. */
  if (onnx && nfetch == 0 && ntarget == 0)
    for (int i = 0; i < floe_onnx_model_num_outputs(model) && i < argc; i++)
      fetches[nfetch++] = floe_onnx_model_output_name(model, i);
  fetch_names = calloc((size_t)argc, sizeof *fetch_names);
  if (!fetch_names) {
    rc = cli_error("run", "out of memory");
    goto out;
  }
  for (int i = 0; i < nfetch; i++) {
    fetch_names[i] = fetches[i];
    for (int k = 0; onnx && k < floe_onnx_model_num_outputs(model); k++)
      if (!strcmp(fetches[i], floe_onnx_model_output_name(model, k)))
        fetch_names[i] = floe_onnx_model_output_fetch(model, k);
  }
  for (int i = 0; i < nfeed; i++) {
    const char *eq = strchr(feed_specs[i], '=');
    if (!eq || eq == feed_specs[i] || !eq[1]) {
      rc = cli_usage("run", "--feed takes NAME=FILE.npy");
      goto out;
    }
    feeds[i].name = strndup(feed_specs[i], (size_t)(eq - feed_specs[i]));
    for (int k = 0; onnx && feeds[i].name && k < floe_onnx_model_num_inputs(model); k++)
      if (!strcmp(feeds[i].name, floe_onnx_model_input_name(model, k))) {
        free((char *)feeds[i].name);
        feeds[i].name = strdup(floe_onnx_model_input_node(model, k));
        break;
      }
    feeds[i].value = cli_load_tensor(eq + 1, st);
    if (!feeds[i].name || !feeds[i].value) {
      rc = cli_error("run", "--feed %s: %s", feed_specs[i], floe_status_message(st));
      goto out;
    }
  }
  FloeSessionOptions so;
  floe_session_options_init(&so);
  so.device = device;
  s = floe_session_new(g, &so, st);
  if (!s) {
    rc = cli_error("run", "%s", floe_status_message(st));
    goto out;
  }
  if (model && floe_onnx_model_init_target(model)) {
    const char *init = floe_onnx_model_init_target(model);
    if (floe_session_run(s, NULL, 0, NULL, 0, &init, 1, NULL, st) != FLOE_OK) {
      rc = cli_error("run", "initialising the variables: %s", floe_status_message(st));
      goto out;
    }
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (floe_session_run(s, feeds, nfeed, fetch_names, nfetch, targets, ntarget, outputs, st) !=
      FLOE_OK) {
    rc = cli_error("run", "%s", floe_status_message(st));
    goto out;
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  /* A fetch may live in a device's own memory (tpu-sim, a GPU): printing reads host data. */
  for (int i = 0; i < nfetch; i++) {
    if (floe_tensor_nbytes(outputs[i]) == 0 || floe_tensor_data(outputs[i])) continue;
    FloeTensor *host = floe_tensor_copy(outputs[i], st);
    if (!host) {
      rc = cli_error("run", "copying fetch %s to the host: %s", fetches[i],
                     floe_status_message(st));
      goto out;
    }
    floe_tensor_release(outputs[i]);
    outputs[i] = host;
  }
  double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  if (out_dir && mkdir(out_dir, 0777) != 0 && errno != EEXIST) {
    rc = cli_error("run", "cannot create --out %s: %s", out_dir, strerror(errno));
    goto out;
  }
  JsonWriter w;
  if (json) {
    json_init(&w, stdout);
    json_begin_object(&w);
    json_key(&w, "graph"), json_string(&w, graph_path);
    json_key(&w, "run_seconds"), json_double(&w, secs);
    json_key(&w, "outputs"), json_begin_array(&w);
  }
  for (int i = 0; i < nfetch; i++) {
    FloeTensor *t = outputs[i];
    FloeShape sh = floe_tensor_shape(t);
    char shape[160];
    floe_shape_str(&sh, shape, sizeof shape);
    char *path = out_dir ? out_path(out_dir, fetches[i]) : NULL;
    if (path && floe_tensor_save_npy(t, path, st) != FLOE_OK) {
      rc = cli_error("run", "%s", floe_status_message(st));
      free(path);
      goto out;
    }
    if (json) {
      json_begin_object(&w);
      json_key(&w, "name"), json_string(&w, fetches[i]);
      json_key(&w, "dtype"), json_string(&w, floe_dtype_name(floe_tensor_dtype(t)));
      json_key(&w, "shape"), json_begin_array(&w);
      for (int d = 0; d < sh.rank; d++) json_int(&w, sh.dims[d]);
      json_end_array(&w);
      if (path) json_key(&w, "file"), json_string(&w, path);
      json_end_object(&w);
    } else {
      printf("%s: %s%s ", fetches[i], floe_dtype_name(floe_tensor_dtype(t)), shape);
      if (path) printf("-> %s", path);
      else print_values(t);
      printf("\n");
    }
    free(path);
  }
  if (json) {
    json_end_array(&w);
    json_end_object(&w);
    json_finish(&w);
  }
  rc = 0;
out:
  for (int i = 0; i < nfetch && outputs; i++) floe_tensor_release(outputs[i]);
  for (int i = 0; i < nfeed && feeds; i++) {
    free((char *)feeds[i].name);
    floe_tensor_release(feeds[i].value);
  }
  floe_session_free(s);
  floe_graph_free(g);
  floe_onnx_model_free(model);
  free(fetch_names);
  floe_status_free(st);
  free(feed_specs);
  free(fetches);
  free(targets);
  free(feeds);
  free(outputs);
  return rc;
}
