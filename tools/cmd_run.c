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

#include <floe/floe_dist.h>
#include <floe/floe_onnx.h>

#include "cli.h"
#include "measure.h"

static const char run_help[] =
    "Usage: floe run GRAPH [--feed NAME=FILE.npy]... --fetch NAME... [--target NODE]...\n"
    "                [--out DIR] [--device DEV] [--timeout S] [--json]\n"
    "Run one step of a graph file. NAME is a node ('logits') or one of its outputs\n"
    "('split:1'). Feeding a tensor cuts the graph there; only what the fetches and\n"
    "targets need runs.\n"
    "       floe run MODEL.onnx [--input NAME=FILE]... [--fetch NAME]... [--out DIR] [--json]\n"
    "An ONNX model is imported first; its inputs and outputs keep their ONNX names, and\n"
    "with no --fetch every graph output is fetched.\n"
    "       floe run GRAPH|MODEL.onnx --perf [--warmup N] [--repeat N | --duration S]\n"
    "                [--shape NAME=D0,D1,...]... [--json]\n"
    "Perf mode: time many steps (like onnxruntime_perf_test). Inputs not given get random\n"
    "values of the shape the graph's placeholders or the ONNX inputs declare; a dim they\n"
    "leave unknown is 1 (a note says so) unless --shape gives it.\n"
    "  --feed NAME=FILE.npy  value of a placeholder or any tensor (NumPy .npy, or an ONNX\n"
    "                        TensorProto .pb)\n"
    "  --input NAME=FILE     the same (the name ONNX users expect)\n"
    "  --trainable           ONNX: import float initializers as variables (initialised\n"
    "                        before the step), as fine-tuning would\n"
    "  --fetch NAME          tensor to return (repeatable)\n"
    "  --target NODE         node to run for its side effects (repeatable)\n"
    "  --out DIR             write each fetch to DIR/NAME.npy (':' becomes '_')\n"
    "  --device DEV          default device for nodes with no request (e.g. cpu:0)\n"
    "  --timeout S           a deadline for each step, in seconds (0.001 to 1000000): a\n"
    "                        step still running then is cancelled and floe run fails,\n"
    "                        naming the nodes still running (a kernel that never ends\n"
    "                        cannot hang it); with --perf, each timed or warm-up step\n"
    "  --perf                time steps instead of printing outputs: latency min, mean,\n"
    "                        p50, p90, p99, max; runs/s, and samples/s when the inputs\n"
    "                        share a first (batch) dim; the step breakdown\n"
    "  --warmup N            perf: untimed steps first (0 to 1000000000; default 3)\n"
    "  --repeat N            perf: timed steps (1 to 100000000; default 20)\n"
    "  --duration S          perf: time steps for S seconds instead of --repeat (greater\n"
    "                        than 0, at most 1000000)\n"
    "  --shape NAME=D0,...   perf: the shape of random input NAME (e.g. x=64,784)\n"
    "  --threads N           threads of the runtime and of OpenMP (1 to 4096; default: all\n"
    "                        cores)\n"
    "  --devices LIST        place the graph with the cost model across these devices\n"
    "                        (e.g. cpu,tpu-sim or cuda:0); default: everything on the\n"
    "                        first device with a kernel (the CPU)\n"
    "  --profile             time every kernel of the steps and print, per op type, calls\n"
    "                        and time (sorted by total time) at the end, then the step\n"
    "                        breakdown: to stderr, or as \"profile\" and \"breakdown\" in\n"
    "                        the JSON with --json\n"
    "  --trace FILE          write a Chrome trace of the (timed) steps to FILE: a track per\n"
    "                        device and thread, each kernel with its node, op, shapes and\n"
    "                        bytes, transfers as flows (open it in Perfetto or\n"
    "                        chrome://tracing)\n"
    "  --json                print one JSON object describing the outputs (perf: the\n"
    "                        timings)\n"
    "  --cluster SPEC        run the graph on a cluster: SPEC is env (FLOE_CONFIG, else\n"
    "                        TF_CONFIG, else PMIx under mpirun/srun), a cluster file, or\n"
    "                        TF_CONFIG-style JSON. The chief places the nodes over every\n"
    "                        task's devices (/job:worker/task:1/device:cpu:0) and runs\n"
    "                        the step; any other task (another mpirun rank) serves until\n"
    "                        the chief is done. The job's secret: FLOE_JOB_SECRET_FILE\n"
    "  --job J --task N      this process's task in the cluster (default: the spec's)\n"
    "  --heartbeat-timeout S seconds of silence after which a task is unavailable and the\n"
    "                        steps using it fail (default 10; heartbeats every S/10, at\n"
    "                        most 1 s apart)\n";

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

typedef struct RunOptions {
  int json, trainable, perf, profile, warmup, repeat, threads;
  int64_t timeout_ms; /* --timeout: each step's deadline; 0: none */
  double duration; /* > 0: perf for this long instead of repeat */
  const char *out_dir, *device, *devices, *trace;
  const char *cluster, *job; /* --cluster, --job */
  long long task;            /* --task; -1: none */
  double heartbeat_timeout;  /* --heartbeat-timeout, seconds; 0: default */
} RunOptions;

/* What a step needs, for perf mode's loop. */
typedef struct Step {
  FloeSession *s;
  FloeFeed *feeds;
  int nfeed;
  const char **fetch_names;
  int nfetch;
  const char **targets;
  int ntarget;
  FloeTensor **outputs;
  FloeStatus *st;
  const FloeRunOptions *ro; /* --timeout */
} Step;

static double now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* One step, its outputs dropped. FLOE_OK or the step's code (st says why). */
static floe_code step_once(Step *x) {
  floe_code c = floe_session_run_opts(x->s, x->ro, x->feeds, x->nfeed, x->fetch_names, x->nfetch,
                                      x->targets, x->ntarget, x->outputs, x->st);
  if (c == FLOE_OK)
    for (int i = 0; i < x->nfetch; i++) {
      floe_tensor_release(x->outputs[i]);
      x->outputs[i] = NULL;
    }
  return c;
}

/* The --shape NAME=D0,D1,... among specs for name, parsed into dims; 0 when none, 1 when
 * found, -1 (printed) when malformed. */
static int find_shape(const char **specs, int n, const char *name, int *rank, int64_t *dims) {
  size_t len = strlen(name);
  for (int i = 0; i < n; i++) {
    if (strncmp(specs[i], name, len) || specs[i][len] != '=') continue;
    const char *p = specs[i] + len + 1;
    *rank = 0;
    while (*p) {
      char *end;
      errno = 0;
      long long v = strtoll(p, &end, 10);
      if (errno || end == p || v < 0 || *rank == FLOE_MAX_DIMS || (*end && *end != ',')) {
        char msg[256];
        snprintf(msg, sizeof msg, "--shape takes NAME=D0,D1,... with at most %d dims, each an "
                 "integer from 0 to %lld (the tensor must fit in memory), got '%.60s'",
                 FLOE_MAX_DIMS, (long long)INT64_MAX, specs[i]);
        cli_usage("run", msg);
        return -1;
      }
      dims[(*rank)++] = v;
      p = *end ? end + 1 : end;
    }
    return 1;
  }
  return 0;
}

/* Perf mode's random value for input `shown` (node `node`) of dt and declared shape decl;
 * NULL (printed) when its shape cannot be known. */
static FloeTensor *random_input(const char *shown, FloeDType dt, FloeShape decl,
                                const char **shapes, int nshape, uint64_t *seed,
                                FloeStatus *st) {
  int rank = 0;
  int64_t dims[FLOE_MAX_DIMS];
  int got = find_shape(shapes, nshape, shown, &rank, dims);
  if (got < 0) return NULL;
  if (!got) {
    if (decl.rank < 0) {
      cli_error("run", "--perf: the shape of input '%s' is unknown (its rank too): give "
                "--shape %s=D0,D1,... or --feed %s=FILE.npy", shown, shown, shown);
      return NULL;
    }
    rank = decl.rank;
    for (int d = 0; d < rank; d++) {
      dims[d] = decl.dims[d];
      if (dims[d] < 0) {
        fprintf(stderr, "floe run: note: input '%s' leaves dim %d unknown: using 1 (give "
                "--shape %s=...)\n", shown, d, shown);
        dims[d] = 1;
      }
    }
  }
  if (dt == FLOE_DTYPE_INVALID || dt == FLOE_RESOURCE) {
    cli_error("run", "--perf: cannot make a random value for input '%s' of type %s: give "
              "--feed %s=FILE.npy", shown, floe_dtype_name(dt), shown);
    return NULL;
  }
  FloeTensor *t = measure_random_tensor(dt, rank, dims, seed, st);
  if (!t) cli_error("run", "--perf: input '%s': %s", shown, floe_status_message(st));
  return t;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The profile, breakdown and trace after the measured steps; 0 or the exit status. */
static int report_extras(const RunOptions *o, FloeSession *s, FloeStatus *st,
                         FloeOpProfile **rows, int *nrows, FloeStepBreakdown *bd) {
  if (o->profile && floe_session_profile(s, rows, nrows, st) != FLOE_OK)
    return cli_error("run", "--profile: %s", floe_status_message(st));
  bd->struct_size = sizeof *bd;
  if (floe_session_step_breakdown(s, bd, st) != FLOE_OK)
    return cli_error("run", "the step breakdown: %s", floe_status_message(st));
  if (o->trace && floe_session_trace_write(s, o->trace, st) != FLOE_OK)
    return cli_error("run", "--trace: %s", floe_status_message(st));
  return 0;
}

/* Perf mode: warm-up, then timed steps; prints the summary. 0 or the exit status. */
static int run_perf(const RunOptions *o, Step *x, const char *graph_path, int64_t batch) {
  for (int i = 0; i < o->warmup; i++)
    if (step_once(x) != FLOE_OK)
      return cli_error("run", "warm-up step %d: %s", i + 1, floe_status_message(x->st));
  int traced = o->profile || o->trace;
  if (o->profile) floe_session_set_profiling(x->s, 1);
  if (traced) floe_session_set_tracing(x->s, 1);
  int cap = o->duration > 0 ? 1024 : o->repeat, n = 0, rc = 1;
  double *lat = malloc((size_t)cap * sizeof *lat);
  FloeOpProfile *rows = NULL;
  int nrows = 0;
  if (!lat) return cli_error("run", "out of memory");
  double t_begin = now_seconds();
  for (;;) {
    if (o->duration > 0 ? (n > 0 && now_seconds() - t_begin >= o->duration) : n == o->repeat)
      break;
    if (n == cap) {
      double *v = realloc(lat, (size_t)cap * 2 * sizeof *v);
      if (!v) {
        rc = cli_error("run", "out of memory");
        goto out;
      }
      lat = v;
      cap *= 2;
    }
    double t0 = now_seconds();
    if (step_once(x) != FLOE_OK) {
      rc = cli_error("run", "step %d: %s", n + 1, floe_status_message(x->st));
      goto out;
    }
    lat[n++] = now_seconds() - t0;
  }
  double total = now_seconds() - t_begin;
  floe_session_set_profiling(x->s, 0);
  floe_session_set_tracing(x->s, 0);
  /* Untraced timed steps: the breakdown comes from a few traced steps after them. */
  int extra = 0;
  if (!traced) {
    extra = n < 10 ? n : 10;
    floe_session_set_tracing(x->s, 1);
    for (int i = 0; i < extra; i++)
      if (step_once(x) != FLOE_OK) {
        rc = cli_error("run", "traced step %d: %s", i + 1, floe_status_message(x->st));
        goto out;
      }
    floe_session_set_tracing(x->s, 0);
  }
  FloeStepBreakdown bd;
  if ((rc = report_extras(o, x->s, x->st, &rows, &nrows, &bd)) != 0) goto out;
  rc = 1;
  double sum = 0;
  for (int i = 0; i < n; i++) sum += lat[i];
  qsort(lat, (size_t)n, sizeof *lat, cmp_double);
  double mean = sum / n, p50 = measure_percentile(lat, n, 0.50),
         p90 = measure_percentile(lat, n, 0.90), p99 = measure_percentile(lat, n, 0.99);
  double rps = total > 0 ? n / total : 0;
  if (o->json) {
    JsonWriter w;
    json_init(&w, stdout);
    json_begin_object(&w);
    json_key(&w, "graph"), json_string(&w, graph_path);
    json_key(&w, "mode"), json_string(&w, "perf");
    json_key(&w, "warmup"), json_int(&w, o->warmup);
    json_key(&w, "repeat"), json_int(&w, n);
    if (o->duration > 0) json_key(&w, "duration_seconds"), json_double(&w, o->duration);
    json_key(&w, "threads");
    if (o->threads) json_int(&w, o->threads);
    else json_null(&w);
    if (o->devices) json_key(&w, "devices"), json_string(&w, o->devices);
    json_key(&w, "total_seconds"), json_double(&w, total);
    json_key(&w, "latency_ms"), json_begin_object(&w);
    json_key(&w, "min"), json_double(&w, lat[0] * 1e3);
    json_key(&w, "mean"), json_double(&w, mean * 1e3);
    json_key(&w, "p50"), json_double(&w, p50 * 1e3);
    json_key(&w, "p90"), json_double(&w, p90 * 1e3);
    json_key(&w, "p99"), json_double(&w, p99 * 1e3);
    json_key(&w, "max"), json_double(&w, lat[n - 1] * 1e3);
    json_end_object(&w);
    json_key(&w, "runs_per_sec"), json_double(&w, rps);
    json_key(&w, "batch");
    if (batch > 0) json_int(&w, batch);
    else json_null(&w);
    json_key(&w, "samples_per_sec");
    if (batch > 0) json_double(&w, rps * (double)batch);
    else json_null(&w);
    json_key(&w, "breakdown"), measure_breakdown_json(&w, &bd);
    json_key(&w, "breakdown_steps_traced_separately"), json_int(&w, extra);
    if (o->profile) json_key(&w, "profile"), measure_profile_json(&w, rows, nrows);
    if (o->trace) json_key(&w, "trace"), json_string(&w, o->trace);
    json_end_object(&w);
    json_finish(&w);
  } else {
    printf("%s: %d step%s after %d warm-up (%.3f s)\n", graph_path, n, n == 1 ? "" : "s",
           o->warmup, total);
    printf("latency ms: min %.3f, mean %.3f, p50 %.3f, p90 %.3f, p99 %.3f, max %.3f\n",
           lat[0] * 1e3, mean * 1e3, p50 * 1e3, p90 * 1e3, p99 * 1e3, lat[n - 1] * 1e3);
    if (batch > 0)
      printf("throughput: %.1f runs/s, %.1f samples/s (batch %lld)\n", rps, rps * (double)batch,
             (long long)batch);
    else
      printf("throughput: %.1f runs/s\n", rps);
    if (o->profile) measure_profile_print(stdout, rows, nrows, n, total, 0);
    if (extra) printf("breakdown of %d more steps, traced: ", extra);
    measure_breakdown_print(stdout, &bd);
    if (o->trace) printf("trace written to %s\n", o->trace);
  }
  rc = 0;
out:
  free(rows);
  free(lat);
  return rc;
}

int cmd_run(int argc, char **argv) {
  enum { OPT_PERF = 1000, OPT_WARMUP, OPT_REPEAT, OPT_DURATION, OPT_SHAPE, OPT_THREADS,
         OPT_DEVICES, OPT_PROFILE, OPT_TRACE, OPT_TIMEOUT, OPT_CLUSTER, OPT_JOB, OPT_TASK, OPT_HEARTBEAT };
  static const struct option opts[] = {
      {"feed", required_argument, NULL, 'f'},  {"fetch", required_argument, NULL, 'F'},
      {"input", required_argument, NULL, 'f'},  {"trainable", no_argument, NULL, 'T'},
      {"target", required_argument, NULL, 't'}, {"out", required_argument, NULL, 'o'},
      {"device", required_argument, NULL, 'd'}, {"json", no_argument, NULL, 'j'},
      {"perf", no_argument, NULL, OPT_PERF},    {"warmup", required_argument, NULL, OPT_WARMUP},
      {"repeat", required_argument, NULL, OPT_REPEAT},
      {"duration", required_argument, NULL, OPT_DURATION},
      {"shape", required_argument, NULL, OPT_SHAPE},
      {"threads", required_argument, NULL, OPT_THREADS},
      {"devices", required_argument, NULL, OPT_DEVICES},
      {"profile", no_argument, NULL, OPT_PROFILE}, {"trace", required_argument, NULL, OPT_TRACE},
      {"timeout", required_argument, NULL, OPT_TIMEOUT},
      {"cluster", required_argument, NULL, OPT_CLUSTER},
      {"job", required_argument, NULL, OPT_JOB},
      {"task", required_argument, NULL, OPT_TASK},
      {"heartbeat-timeout", required_argument, NULL, OPT_HEARTBEAT},
      {"help", no_argument, NULL, 'h'},         {NULL, 0, NULL, 0}};
  const char **feed_specs = calloc((size_t)argc, sizeof *feed_specs);
  const char **fetches = calloc((size_t)argc, sizeof *fetches);
  const char **targets = calloc((size_t)argc, sizeof *targets);
  const char **shapes = calloc((size_t)argc, sizeof *shapes);
  FloeFeed *feeds = NULL;
  FloeTensor **outputs = calloc((size_t)argc, sizeof *outputs);
  int nfeed = 0, nfetch = 0, ntarget = 0, nshape = 0, rc = 1, c, repeat_given = 0;
  RunOptions o = {.warmup = 3, .repeat = 20, .task = -1};
  FloeServer *server = NULL;
  FloeStatus *st = floe_status_new();
  FloeGraph *g = NULL;
  FloeSession *s = NULL;
  FloeOnnxModel *model = NULL;
  const char **fetch_names = NULL;
  FloeOpProfile *prof = NULL;
  int nprof = 0;
  long long v;
  if (!feed_specs || !fetches || !targets || !shapes || !outputs || !st) {
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
      case 'o': o.out_dir = optarg; break;
      case 'd': o.device = optarg; break;
      case 'j': o.json = 1; break;
      case 'T': o.trainable = 1; break;
      case OPT_PERF: o.perf = 1; break;
      case OPT_WARMUP:
        if ((rc = cli_int_option("run", "--warmup", optarg, 0, 1000000000, &v))) goto out;
        o.warmup = (int)v;
        break;
      case OPT_REPEAT:
        if ((rc = cli_int_option("run", "--repeat", optarg, 1, 100000000, &v))) goto out;
        o.repeat = (int)v;
        repeat_given = 1;
        break;
      case OPT_DURATION: /* seconds */
        if ((rc = cli_number_option("run", "--duration", optarg, 0, 1, 1e6, &o.duration)))
          goto out;
        break;
      case OPT_SHAPE: {
        const char *eq = strchr(optarg, '=');
        int rank;
        int64_t dims[FLOE_MAX_DIMS];
        char name[256];
        if (!eq || eq == optarg || (size_t)(eq - optarg) >= sizeof name) {
          snprintf(name, sizeof name, "--shape takes NAME=D0,D1,... (a name of at most 255 "
                   "bytes, then '='), got '%.60s'", optarg);
          rc = cli_usage("run", name);
          goto out;
        }
        snprintf(name, sizeof name, "%.*s", (int)(eq - optarg), optarg);
        if (find_shape((const char **)&optarg, 1, name, &rank, dims) < 0) {
          rc = 2; /* printed */
          goto out;
        }
        shapes[nshape++] = optarg;
        break;
      }
      case OPT_THREADS:
        if ((rc = cli_int_option("run", "--threads", optarg, 1, 4096, &v))) goto out;
        o.threads = (int)v;
        break;
      case OPT_DEVICES: o.devices = optarg; break;
      case OPT_PROFILE: o.profile = 1; break;
      case OPT_TRACE: o.trace = optarg; break;
      case OPT_TIMEOUT:
        if (measure_parse_timeout(optarg, &o.timeout_ms)) {
          rc = cli_usage("run", "--timeout takes seconds from 0.001 to 1000000");
          goto out;
        }
        break;
      case OPT_CLUSTER: o.cluster = optarg; break;
      case OPT_HEARTBEAT:
        if ((rc = cli_number_option("run", "--heartbeat-timeout", optarg, 0.05, 0, 86400,
                                    &o.heartbeat_timeout)))
          goto out;
        break;
      case OPT_JOB: o.job = optarg; break;
      case OPT_TASK:
        if ((rc = cli_int_option("run", "--task", optarg, 0, 4095, &o.task))) goto out;
        break;
      case 'h': printf("%s", run_help); rc = 0; goto out;
      default: rc = cli_bad_option("run", c, argv, opts); goto out;
    }
  }
  if (optind != argc - 1) {
    rc = cli_usage("run", "expected exactly one GRAPH file");
    goto out;
  }
  if ((o.job == NULL) != (o.task < 0)) {
    rc = cli_usage("run", "give --job and --task together");
    goto out;
  }
  if ((o.job || o.heartbeat_timeout > 0) && !o.cluster) {
    rc = cli_usage("run", "--job, --task and --heartbeat-timeout go with --cluster");
    goto out;
  }
  if (repeat_given && o.duration > 0) {
    rc = cli_usage("run", "give --repeat N or --duration S, not both");
    goto out;
  }
  if (!o.perf && (repeat_given || o.duration > 0 || nshape)) {
    rc = cli_usage("run", "--repeat, --duration and --shape go with --perf");
    goto out;
  }
  if (o.perf && o.out_dir) {
    rc = cli_usage("run", "--perf writes no outputs: drop --out");
    goto out;
  }
  const char *graph_path = argv[optind];
  int onnx = cli_is_onnx(graph_path);
  if (nfetch == 0 && ntarget == 0 && !onnx) {
    rc = cli_usage("run", "nothing to do: give --fetch NAME or --target NODE");
    goto out;
  }
  if (o.threads > 0) {
    /* Before the runtime loads the plugins: OpenMP (oneDNN) and OpenBLAS read these when
     * they start. */
    char n[16];
    snprintf(n, sizeof n, "%d", o.threads);
    setenv("OMP_NUM_THREADS", n, 1);
    setenv("OPENBLAS_NUM_THREADS", n, 1);
    setenv("FLOE_NUM_THREADS", n, 1);
  }
  FloeRuntime *rt = cli_runtime("run");
  if (!rt || cli_check_plugins("run", rt) != 0) goto out;
  if (o.cluster) {
    FloeServerOptions sv;
    floe_server_options_init(&sv);
    sv.runtime = rt;
    sv.cluster = o.cluster;
    sv.job = o.job;
    sv.task = o.task < 0 ? 0 : (int)o.task;
    sv.until_chief_leaves = 1;
    if (o.heartbeat_timeout > 0) {
      sv.heartbeat_timeout_ms = (int)(o.heartbeat_timeout * 1000);
      int iv = sv.heartbeat_timeout_ms / 10;
      sv.heartbeat_interval_ms = iv < 10 ? 10 : iv > 1000 ? 1000 : iv;
    }
    server = floe_server_start(&sv, st);
    if (!server) {
      rc = cli_error("run", "--cluster %s: %s", o.cluster, floe_status_message(st));
      goto out;
    }
    if (!floe_server_is_chief(server)) {
      /* Another rank of the job: serve its devices until the chief is done. */
      rc = floe_server_join(server, -1, st) == FLOE_OK ? 0 : cli_error("run", "%s", floe_status_message(st));
      goto out;
    }
  }
  FloeRunOptions ro;
  floe_run_options_init(&ro);
  ro.timeout_ms = o.timeout_ms;
  if (onnx) {
    FloeOnnxOptions oo;
    floe_onnx_options_init(&oo);
    oo.trainable = o.trainable;
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
  /* Perf mode may add a random feed per placeholder or ONNX input. */
  int max_feeds = nfeed + (onnx ? floe_onnx_model_num_inputs(model) : floe_graph_num_nodes(g)) + 1;
  feeds = calloc((size_t)max_feeds, sizeof *feeds);
  fetch_names = calloc((size_t)argc, sizeof *fetch_names);
  if (!fetch_names || !feeds) {
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
  int nfeed_given = nfeed;
  int64_t batch = -1; /* perf: the inputs' common first dim; 0: none */
  if (o.perf) {
    uint64_t seed = 1;
    int ninputs = onnx ? floe_onnx_model_num_inputs(model) : floe_graph_num_nodes(g);
    for (int i = 0; i < ninputs; i++) {
      const char *node, *shown;
      FloeDType dt;
      FloeShape decl;
      if (onnx) {
        node = floe_onnx_model_input_node(model, i);
        shown = floe_onnx_model_input_name(model, i);
        if (floe_onnx_model_input_kind(model, i) != FLOE_ONNX_TENSOR) {
          rc = cli_error("run", "--perf: input '%s' is not a tensor (a sequence or an "
                         "optional): give --input %s=FILE", shown, shown);
          goto out;
        }
        dt = floe_onnx_model_input_dtype(model, i);
        decl = floe_onnx_model_input_shape(model, i);
      } else {
        const FloeNode *n = floe_graph_node(g, i);
        if (strcmp(floe_node_op(n), "Placeholder")) continue;
        node = shown = floe_node_name(n);
        dt = floe_node_output_dtype(n, 0);
        decl = floe_node_output_shape(n, 0);
      }
      int given = 0;
      for (int k = 0; k < nfeed_given; k++)
        if (!strcmp(feeds[k].name, node) ||
            (!strncmp(feeds[k].name, node, strlen(node)) && !strcmp(feeds[k].name + strlen(node), ":0")))
          given = 1;
      if (given) continue;
      feeds[nfeed].name = strdup(node);
      feeds[nfeed].value = random_input(shown, dt, decl, shapes, nshape, &seed, st);
      if (!feeds[nfeed].value || !feeds[nfeed].name) {
        if (!feeds[nfeed].name) cli_error("run", "out of memory");
        free((char *)feeds[nfeed].name);
        floe_tensor_release(feeds[nfeed].value);
        feeds[nfeed].name = NULL;
        feeds[nfeed].value = NULL;
        goto out;
      }
      nfeed++;
    }
    for (int i = 0; i < nfeed; i++) {
      FloeTensor *t = feeds[i].value;
      int64_t b = floe_tensor_rank(t) >= 1 ? floe_tensor_dim(t, 0) : 0;
      batch = batch < 0 ? b : (batch == b ? batch : 0);
    }
    if (batch < 0) batch = 0;
    for (int i = 0; i < nshape; i++) {
      const char *eq = strchr(shapes[i], '=');
      int known = 0;
      for (int k = 0; eq && k < nfeed; k++) {
        const char *shown = feeds[k].name;
        for (int m = 0; onnx && m < floe_onnx_model_num_inputs(model); m++)
          if (!strcmp(feeds[k].name, floe_onnx_model_input_node(model, m)))
            shown = floe_onnx_model_input_name(model, m);
        if (strlen(shown) == (size_t)(eq - shapes[i]) && !strncmp(shown, shapes[i], (size_t)(eq - shapes[i])))
          known = 1;
      }
      if (!known) {
        rc = cli_error("run", "--shape %s: no such input to make random (the model's are "
                       "placeholders or ONNX inputs not fed)", shapes[i]);
        goto out;
      }
    }
  }
  FloeSessionOptions so;
  floe_session_options_init(&so);
  so.device = o.device;
  so.devices = o.devices;
  so.cluster = o.cluster;
  s = floe_session_new(g, &so, st);
  if (!s) {
    rc = cli_error("run", "%s", floe_status_message(st));
    goto out;
  }
  if (model && floe_onnx_model_init_target(model)) {
    const char *init = floe_onnx_model_init_target(model);
    if (floe_session_run_opts(s, &ro, NULL, 0, NULL, 0, &init, 1, NULL, st) != FLOE_OK) {
      rc = cli_error("run", "initialising the variables: %s", floe_status_message(st));
      goto out;
    }
  }
  if (o.perf) {
    Step x = {s, feeds, nfeed, fetch_names, nfetch, targets, ntarget, outputs, st, &ro};
    rc = run_perf(&o, &x, graph_path, batch);
    goto out;
  }
  if (o.profile) floe_session_set_profiling(s, 1);
  if (o.profile || o.trace) floe_session_set_tracing(s, 1);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  if (floe_session_run_opts(s, &ro, feeds, nfeed, fetch_names, nfetch, targets, ntarget, outputs,
                            st) != FLOE_OK) {
    rc = cli_error("run", "%s", floe_status_message(st));
    goto out;
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  floe_session_set_profiling(s, 0);
  floe_session_set_tracing(s, 0);
  FloeStepBreakdown bd = {.struct_size = sizeof bd};
  if ((o.profile || o.trace) && (rc = report_extras(&o, s, st, &prof, &nprof, &bd)) != 0)
    goto out;
  rc = 1;
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
  if (o.out_dir && mkdir(o.out_dir, 0777) != 0 && errno != EEXIST) {
    rc = cli_error("run", "cannot create --out %s: %s", o.out_dir, strerror(errno));
    goto out;
  }
  JsonWriter w;
  if (o.json) {
    json_init(&w, stdout);
    json_begin_object(&w);
    json_key(&w, "graph"), json_string(&w, graph_path);
    json_key(&w, "run_seconds"), json_double(&w, secs);
    if (o.profile) {
      json_key(&w, "profile"), measure_profile_json(&w, prof, nprof);
      json_key(&w, "breakdown"), measure_breakdown_json(&w, &bd);
    }
    if (o.trace) json_key(&w, "trace"), json_string(&w, o.trace);
    json_key(&w, "outputs"), json_begin_array(&w);
  }
  for (int i = 0; i < nfetch; i++) {
    FloeTensor *t = outputs[i];
    FloeShape sh = floe_tensor_shape(t);
    char shape[160];
    floe_shape_str(&sh, shape, sizeof shape);
    char *path = o.out_dir ? out_path(o.out_dir, fetches[i]) : NULL;
    if (path && floe_tensor_save_npy(t, path, st) != FLOE_OK) {
      rc = cli_error("run", "%s", floe_status_message(st));
      free(path);
      goto out;
    }
    if (o.json) {
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
  if (o.json) {
    json_end_array(&w);
    json_end_object(&w);
    json_finish(&w);
  } else {
    if (o.profile) {
      measure_profile_print(stderr, prof, nprof, 1, secs, 0);
      measure_breakdown_print(stderr, &bd);
    }
    if (o.trace) fprintf(stderr, "trace written to %s\n", o.trace);
  }
  rc = 0;
out:
  for (int i = 0; i < nfetch && outputs; i++) floe_tensor_release(outputs[i]);
  for (int i = 0; i < nfeed && feeds; i++) {
    free((char *)feeds[i].name);
    floe_tensor_release(feeds[i].value);
  }
  free(prof);
  floe_session_free(s);
  floe_server_free(server); /* after the session, which tells the workers it ended */
  floe_graph_free(g);
  floe_onnx_model_free(model);
  free(fetch_names);
  floe_status_free(st);
  free(feed_specs);
  free(fetches);
  free(targets);
  free(shapes);
  free(feeds);
  free(outputs);
  return rc;
}
