/* SPDX-License-Identifier: Apache-2.0 */
/* cmd_train.c - floe train: an MLP or a CNN on Fashion-MNIST, with checkpoints, exact
 * resume, a frozen export and a JSON summary.
 *
 * One graph holds the training model (placeholders x and y, the loss, floe_minimize's step)
 * and the inference model built again with the same layer names, so it shares the weights;
 * the test set is scored with its ArgMax. Checkpoints are written after every epoch; a
 * resumed run restores the newest and continues at the epoch and batch its global step
 * implies, with the batcher placed there, so it computes what an uninterrupted run does.
 * The learning rate follows a cosine from --lr down to 0 over the --epochs of the plan
 * (or stays constant); --stop-after ends a run early inside that plan, so a resumed run
 * finishes the same schedule. --input queue trains from an input pipeline in the graph
 * (train_input.c) run by a queue runner thread, on the same batches as --input feed.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <floe/floe_onnx.h>

#include "cli.h"
#include "measure.h"
#include "train_cluster.h"
#include "train_guard.h"
#include "train_input.h"
#include "train_report.h"
#include "train_signal.h"

static const char train_help[] =
    "Usage: floe train [--model mlp|cnn|lstm] [--epochs N] [--batch N] [--optimizer NAME]\n"
    "                  [--lr X] [--lr-schedule cosine|constant] [--threads N]\n"
    "                  [--seed S] [--data DIR] [--checkpoint-dir DIR [--resume]]\n"
    "                  [--stop-after K] [--input queue|feed] [--export FILE]\n"
    "                  [--devices LIST [--compress-transfers]] [--save-graph FILE]\n"
    "                  [--profile] [--trace FILE] [--steps N] [--timeout S] [--json]\n"
    "                  [--onnx MODEL.onnx] [--cluster SPEC [--job J --task N]\n"
    "                  [--replication async|sync [--replicas-to-aggregate K]]\n"
    "                  [--ps-strategy round-robin|greedy]]\n"
    "Train a classifier on Fashion-MNIST and report its test accuracy after each epoch.\n"
    "  --model mlp|cnn        mlp: 784-512-256-10 ReLU (default); cnn: two 5x5 conv +\n"
    "                         max-pool blocks (32, 64 filters), dense 1024, dense 10;\n"
    "                         lstm: a word language model on English text, with its own\n"
    "                         options (floe train --model lstm --help)\n"
    "  --onnx MODEL.onnx      fine-tune an imported ONNX classifier instead: its\n"
    "                         initializers become trainable variables; its input must be\n"
    "                         [N,784] or [N,C,H,W] with C 1 or 3 and H, W multiples of 28\n"
    "                         up to 896 (the images are enlarged, each pixel repeated\n"
    "                         H/28 x W/28 times and in every channel: [N,3,224,224] for\n"
    "                         ImageNet models), and its output [N,10] logits (implies\n"
    "                         --input feed)\n"
    "  --epochs N             passes over the training set (1 to 1000000; default 5)\n"
    "  --steps N              stop after N training steps (1 to 2^63-1; the last epoch\n"
    "                         may end early; it is still tested and reported as usual)\n"
    "  --batch N              examples per step (1 to 16777216; default 64)\n"
    "  --optimizer NAME       adam (default), sgd, momentum, rmsprop, adagrad\n"
    "  --lr X                 learning rate, greater than 0 and at most 3.4e38 (the\n"
    "                         largest f32; default: 1e-3 for adam and rmsprop, 1e-2 for\n"
    "                         the others)\n"
    "  --lr-schedule NAME     cosine (default): the learning rate falls from --lr to 0\n"
    "                         along a half cosine over all --epochs (the last steps take\n"
    "                         small ones; about 1 point of test accuracy over constant);\n"
    "                         constant: --lr throughout\n"
    "  --threads N            threads of the runtime and of OpenMP (1 to 4096; default:\n"
    "                         all cores)\n"
    "  --seed S               seed of the weights and of the shuffling (0 to 2147483647;\n"
    "                         default 1)\n"
    "  --data DIR             folder with the four Fashion-MNIST IDX files, .gz or not\n"
    "                         (default /usr/share/datasets/fashion-mnist, from Debian's\n"
    "                         dataset-fashion-mnist package); checked before training:\n"
    "                         28 x 28 images, labels 0 to 9, as many labels as images,\n"
    "                         at least one example in each set\n"
    "  --checkpoint-dir DIR   save a checkpoint after every epoch (the newest 3 are kept);\n"
    "                         checked before training: a folder you may write in, or one\n"
    "                         that can be made there. A checkpoint is never saved with NaN\n"
    "                         or infinite values\n"
    "  --resume               continue from the newest checkpoint in --checkpoint-dir\n"
    "                         (give the same --epochs, --batch and --limit: the schedule\n"
    "                         spans them), at the batch after the one it was saved at: its\n"
    "                         global_step variable says which, and must agree with the\n"
    "                         file's metadata and lie within --epochs. Ctrl-C saves one at\n"
    "                         the next step and prints the command to resume (exit 130)\n"
    "  --stop-after K         end this run after epoch K (1 to --epochs) of the --epochs\n"
    "                         planned (the schedule still spans all of them); go on later\n"
    "                         with --resume\n"
    "  --input queue|feed     queue (default): the training batches come from an input\n"
    "                         pipeline in the graph (IDX readers, conversion, a FIFO) that\n"
    "                         a background thread runs while the steps train, hiding its\n"
    "                         time (measured as fast as feed here, where the input is ~1%\n"
    "                         of a step; faster when the input has real work to do:\n"
    "                         docs/benchmarks.md); feed: each step is fed a batch made on\n"
    "                         the training thread. Both train on the same batches in the\n"
    "                         same order (same results), and --resume continues either\n"
    "                         exactly: the queue's readers restart at the checkpoint's\n"
    "                         epoch and batch\n"
    "  --export FILE          write the frozen inference graph (input x, output logits)\n"
    "  --devices LIST         place the training graph with the cost model across these\n"
    "                         devices (e.g. cpu,tpu-sim or cuda:0); default: everything on\n"
    "                         the first device with a kernel (the CPU)\n"
    "  --compress-transfers   f32 values crossing devices travel as bf16 (lossy)\n"
    "  --save-graph FILE      write the training graph (target \"train\", initialiser\n"
    "                         \"init\"; feeds x and y with --input feed) to FILE and stop\n"
    "  --profile              time every kernel of the training steps and print, per op\n"
    "                         type, calls and time (sorted by total time) at the end: to\n"
    "                         stderr, or as \"profile\" in the JSON with --json; then\n"
    "                         the step breakdown (\"breakdown\" in the JSON)\n"
    "  --trace FILE           write a Chrome trace of the training steps to FILE: a track\n"
    "                         per device and thread, each kernel with its node, op,\n"
    "                         shapes and bytes, transfers as flows (open it in Perfetto\n"
    "                         or chrome://tracing; every step is kept in memory: use it\n"
    "                         with --steps or --limit)\n"
    "  --timeout S            a deadline for each step (training, initialisation and\n"
    "                         evaluation batches), in seconds (0.001 to 1000000): a step\n"
    "                         still running then is cancelled and floe train fails,\n"
    "                         naming the nodes still running, without a checkpoint\n"
    "  --json                 end with one JSON line: model, epochs, batch,\n"
    "                         samples_per_sec, test_accuracy, final_loss, wall_seconds,\n"
    "                         peak_rss_mb, ...; with --cluster every training task writes\n"
    "                         one (a worker's before it serves: under floe launch, on\n"
    "                         launch's stderr) with cluster_task and step_split_ms: each\n"
    "                         training step traced and cut into compute, wait_params\n"
    "                         (waiting for the ps tasks' values) and send_grads (after\n"
    "                         the last compute), per-step means in ms without the first\n"
    "                         step (docs/distributed.md)\n"
    "  --cluster SPEC         train on a cluster (between-graph replication): SPEC is env\n"
    "                         (FLOE_CONFIG, else TF_CONFIG, else PMIx under mpirun), a\n"
    "                         cluster file, or JSON. Run floe train with the same options\n"
    "                         in every task (floe launch --every-task does): the variables\n"
    "                         live on the ps tasks, which only serve; the chief and each\n"
    "                         worker train on their share of the batches (task r of R takes\n"
    "                         batches r, r+R, ...); the chief initialises or restores,\n"
    "                         tests, checkpoints and reports. Implies --input feed\n"
    "  --job J --task N       this process's task (default: the spec's)\n"
    "  --replication async    each task applies its own updates to the shared variables\n"
    "                         (the default)\n"
    "  --replication sync     each global step averages the gradients of K tasks (K =\n"
    "                         --replicas-to-aggregate, default every training task):\n"
    "                         accumulators on the ps tasks, a token queue as the barrier,\n"
    "                         the chief applying the mean; tasks beyond K are backups (a\n"
    "                         step goes on without the slowest; their late gradients are\n"
    "                         dropped and counted). --epochs counts batches: K batches\n"
    "                         make one global step\n"
    "  --replication allreduce  no ps tasks: every training task holds the variables, and\n"
    "                         each step averages the tasks' gradients with collectives\n"
    "                         (floe_allreduce_minimize), so the tasks stay equal; the\n"
    "                         chief's values (initialised or restored) are broadcast at\n"
    "                         the start. R tasks make one global step of R batches\n"
    "  --fusion-bytes N       allreduce: gradients packed into buffers of up to N bytes,\n"
    "                         one collective each (default 4194304; 0: one per gradient)\n"
    "  --collective NAME      allreduce: the collective backend (ring, gloo; default\n"
    "                         FLOE_COLLECTIVE, else ring)\n"
    "  --ps-tasks M           under mpirun or srun (the cluster from PMIx): ranks 1..M are\n"
    "                         the ps tasks, rank 0 the chief, the rest workers\n"
    "                         (FLOE_PS_TASKS)\n"
    "  --ps-strategy NAME     round-robin (default): variables to ps tasks in turn;\n"
    "                         greedy: each to the ps holding the fewest bytes so far\n"
    "  --heartbeat-timeout S  seconds of silence before a task counts as lost (default 10)\n"
    "A step whose loss is NaN or infinite ends the run with exit status 1, naming the step\n"
    "and the first variable it left non-finite (try a smaller --lr).\n";

typedef struct TrainOptions {
  const char *model;
  int cnn;
  int epochs;
  int64_t batch;
  FloeOptimizerKind optimizer;
  const char *optimizer_name;
  double lr; /* NaN: the optimiser's default */
  int threads;
  uint64_t seed;
  const char *data, *checkpoint_dir, *export_path;
  int resume, json, profile;
  int cosine;     /* the learning-rate schedule: 1 cosine, 0 constant */
  int stop_after; /* 0: run to --epochs */
  int64_t limit;  /* 0: all examples */
  int queue;      /* --input queue (else feed) */
  int queue_given;
  const char *onnx; /* --onnx MODEL: fine-tune an imported classifier */
  int64_t onnx_chw[3]; /* --onnx image models: the model's C, H, W ({1, 28, 28}: as read) */
  const char *devices; /* --devices: cost-model placement among these; NULL: none */
  const char *save_graph; /* --save-graph FILE */
  int compress;        /* --compress-transfers */
  int64_t max_steps;   /* --steps: 0 none */
  const char *trace;   /* --trace FILE */
  int64_t timeout_ms;  /* --timeout: each step's deadline; 0: none */
  TrainCluster cl;     /* --cluster and its options (cl.spec NULL: one process) */
} TrainOptions;

static double now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* The options' limits (each stated by its error, cli_int_option): the epoch count is an int,
 * a batch's images (2^24 of 784 f32) stay within 64 GB, threads are the runtime's limit. */
enum { MAX_EPOCHS = 1000000, MAX_BATCH = 1 << 24, MAX_THREADS = 4096 };

/* Returns 0 to go on, else the exit status (help printed: 0 through *done). */
static int onnx_input_is_image(const char *path, int64_t *chw);

static int parse_options(int argc, char **argv, TrainOptions *o, int *done) {
  enum { OPT_LIMIT = 1000, OPT_EXPORT, OPT_RESUME, OPT_CKPT, OPT_PROFILE, OPT_SCHEDULE, OPT_STOP,
         OPT_INPUT, OPT_DEVICES, OPT_COMPRESS, OPT_SAVE_GRAPH, OPT_ONNX, OPT_STEPS, OPT_TRACE,
         OPT_TIMEOUT, OPT_CLUSTER, OPT_JOB, OPT_TASK, OPT_REPLICATION, OPT_PS_STRATEGY,
         OPT_HEARTBEAT, OPT_AGGREGATE, OPT_PS_TASKS, OPT_FUSION, OPT_COLLECTIVE };
  static const struct option opts[] = {
      {"model", required_argument, NULL, 'm'},     {"epochs", required_argument, NULL, 'e'},
      {"batch", required_argument, NULL, 'b'},     {"optimizer", required_argument, NULL, 'o'},
      {"lr", required_argument, NULL, 'l'},        {"threads", required_argument, NULL, 't'},
      {"seed", required_argument, NULL, 's'},      {"data", required_argument, NULL, 'd'},
      {"checkpoint-dir", required_argument, NULL, OPT_CKPT},
      {"resume", no_argument, NULL, OPT_RESUME},   {"export", required_argument, NULL, OPT_EXPORT},
      {"json", no_argument, NULL, 'j'},            {"help", no_argument, NULL, 'h'},
      {"profile", no_argument, NULL, OPT_PROFILE},
      {"lr-schedule", required_argument, NULL, OPT_SCHEDULE},
      {"stop-after", required_argument, NULL, OPT_STOP},
      {"input", required_argument, NULL, OPT_INPUT},
      {"devices", required_argument, NULL, OPT_DEVICES},
      {"compress-transfers", no_argument, NULL, OPT_COMPRESS},
      {"save-graph", required_argument, NULL, OPT_SAVE_GRAPH},
      {"onnx", required_argument, NULL, OPT_ONNX},
      {"steps", required_argument, NULL, OPT_STEPS},
      {"trace", required_argument, NULL, OPT_TRACE},
      {"timeout", required_argument, NULL, OPT_TIMEOUT},
      {"cluster", required_argument, NULL, OPT_CLUSTER},
      {"job", required_argument, NULL, OPT_JOB},
      {"task", required_argument, NULL, OPT_TASK},
      {"replication", required_argument, NULL, OPT_REPLICATION},
      {"ps-strategy", required_argument, NULL, OPT_PS_STRATEGY},
      {"heartbeat-timeout", required_argument, NULL, OPT_HEARTBEAT},
      {"fusion-bytes", required_argument, NULL, OPT_FUSION},
      {"collective", required_argument, NULL, OPT_COLLECTIVE},
      {"replicas-to-aggregate", required_argument, NULL, OPT_AGGREGATE},
      {"ps-tasks", required_argument, NULL, OPT_PS_TASKS},
      /* For tests: train and score on the first N examples only. */
      {"limit", required_argument, NULL, OPT_LIMIT},
      {NULL, 0, NULL, 0}};
  *o = (TrainOptions){.model = "mlp", .epochs = 5, .batch = 64, .optimizer = FLOE_OPT_ADAM,
                      .optimizer_name = "adam", .lr = NAN, .seed = 1, .cosine = 1, .queue = 1};
  o->cl.task = -1;
  o->cl.fusion_bytes = -1;
  *done = 0;
  long long v;
  int c, li = 0;
  char msg[160];
  optind = 1;
  opterr = 0; /* our own one-line messages below */
  while ((c = getopt_long(argc, argv, ":m:e:b:o:l:t:s:d:jh", opts, &li)) != -1) {
    switch (c) {
      case OPT_ONNX:
        o->onnx = optarg;
        break;
      case 'm':
        if (strcmp(optarg, "mlp") && strcmp(optarg, "cnn"))
          return cli_usage("train", "--model takes mlp, cnn or lstm");
        o->model = optarg;
        break;
      case 'e':
        if (cli_int_option("train", "--epochs", optarg, 1, MAX_EPOCHS, &v)) return 2;
        o->epochs = (int)v;
        break;
      case 'b':
        if (cli_int_option("train", "--batch", optarg, 1, MAX_BATCH, &v)) return 2;
        o->batch = v;
        break;
      case 'o': {
        int k = floe_optimizer_kind_from_name(optarg);
        if (k < 0)
          return cli_usage("train", "--optimizer takes adam, sgd, momentum, rmsprop or adagrad");
        o->optimizer = (FloeOptimizerKind)k;
        o->optimizer_name = optarg;
        break;
      }
      case 'l':
        if (cli_number_option("train", "--lr", optarg, 0, 1, CLI_F32_MAX, &o->lr)) return 2;
        break;
      case 't':
        if (cli_int_option("train", "--threads", optarg, 1, MAX_THREADS, &v)) return 2;
        o->threads = (int)v;
        break;
      case 's':
        if (cli_int_option("train", "--seed", optarg, 0, INT32_MAX, &v)) return 2;
        o->seed = (uint64_t)v;
        break;
      case 'd': o->data = optarg; break;
      case OPT_CKPT: o->checkpoint_dir = optarg; break;
      case OPT_RESUME: o->resume = 1; break;
      case OPT_EXPORT: o->export_path = optarg; break;
      case 'j': o->json = 1; break;
      case OPT_PROFILE: o->profile = 1; break;
      case OPT_SCHEDULE:
        if (strcmp(optarg, "cosine") && strcmp(optarg, "constant"))
          return cli_usage("train", "--lr-schedule takes cosine or constant");
        o->cosine = !strcmp(optarg, "cosine");
        break;
      case OPT_STOP:
        if (cli_int_option("train", "--stop-after", optarg, 1, MAX_EPOCHS, &v)) return 2;
        o->stop_after = (int)v;
        break;
      case OPT_INPUT:
        if (strcmp(optarg, "queue") && strcmp(optarg, "feed"))
          return cli_usage("train", "--input takes queue or feed");
        o->queue = !strcmp(optarg, "queue");
        o->queue_given = 1;
        break;
      case OPT_DEVICES: o->devices = optarg; break;
      case OPT_COMPRESS: o->compress = 1; break;
      case OPT_SAVE_GRAPH: o->save_graph = optarg; break;
      case OPT_STEPS:
        if (cli_int_option("train", "--steps", optarg, 1, INT64_MAX, &v)) return 2;
        o->max_steps = v;
        break;
      case OPT_TRACE: o->trace = optarg; break;
      case OPT_TIMEOUT:
        if (measure_parse_timeout(optarg, &o->timeout_ms))
          return cli_usage("train", "--timeout takes seconds from 0.001 to 1000000");
        break;
      case OPT_CLUSTER: case OPT_JOB: case OPT_TASK: case OPT_REPLICATION: case OPT_PS_TASKS:
      case OPT_AGGREGATE: case OPT_PS_STRATEGY: case OPT_HEARTBEAT: case OPT_FUSION:
      case OPT_COLLECTIVE:
        if (train_cluster_option(&o->cl, opts[li].name, optarg)) return 2;
        break;
      case OPT_LIMIT:
        if (cli_int_option("train", "--limit", optarg, 1, INT64_MAX, &v)) return 2;
        o->limit = v;
        break;
      case 'h':
        printf("%s", train_help);
        *done = 1;
        return 0;
      default: return cli_bad_option("train", c, argv, opts);
    }
  }
  if (optind != argc) {
    snprintf(msg, sizeof msg, "unexpected argument '%s'", argv[optind]);
    return cli_usage("train", msg);
  }
  if (o->resume && !o->checkpoint_dir)
    return cli_usage("train", "--resume needs --checkpoint-dir DIR");
  train_restart_resumes(o->checkpoint_dir, &o->resume); /* floe launch --max-restarts */
  if (o->stop_after > o->epochs) {
    snprintf(msg, sizeof msg, "--stop-after %d is past the last epoch (--epochs %d)",
             o->stop_after, o->epochs);
    return cli_usage("train", msg);
  }
  if (train_cluster_check_options(&o->cl)) return 2;
  if (o->cl.spec) {
    if (o->queue_given && o->queue)
      return cli_usage("train", "--cluster trains from fed batches (each task takes its share): "
                       "drop --input queue");
    if (o->devices || o->save_graph)
      return cli_usage("train", "--cluster places the graph itself: drop --devices and "
                       "--save-graph");
    o->queue = 0;
  }
  o->cnn = !strcmp(o->model, "cnn");
  if (o->onnx) {
    if (o->queue_given && o->queue)
      return cli_usage("train", "--onnx reads its batches by feeding: drop --input queue");
    o->queue = 0;
    o->model = o->onnx;
    o->cnn = onnx_input_is_image(o->onnx, o->onnx_chw);
    if (o->cnn < 0) return 1;
  }
  return 0;
}

/* The model on x: logits [batch, 10]. Layer seeds derive from the run's seed (never 0,
 * which would mean "random per process"). */
static FloeOutput build_model(FloeGraph *g, FloeOutput x, const TrainOptions *o) {
  int64_t s = (int64_t)o->seed * 64;
  if (!o->cnn) {
    FloeOutput h = floe_layer_dense(g, "dense1", x, 512, FLOE_ACT_RELU, s + 1);
    h = floe_layer_dense(g, "dense2", h, 256, FLOE_ACT_RELU, s + 2);
    return floe_layer_dense(g, "dense3", h, 10, FLOE_ACT_NONE, s + 3);
  }
  FloeOutput h = floe_layer_conv2d(g, "conv1", x, 32, 5, 5, 1, "SAME", FLOE_ACT_RELU, s + 1);
  h = floe_layer_max_pool(g, "pool1", h, 2, 2, "VALID");
  h = floe_layer_conv2d(g, "conv2", h, 64, 5, 5, 1, "SAME", FLOE_ACT_RELU, s + 2);
  h = floe_layer_max_pool(g, "pool2", h, 2, 2, "VALID");
  h = floe_layer_flatten(g, "flatten", h);
  h = floe_layer_dense(g, "fc1", h, 1024, FLOE_ACT_RELU, s + 3);
  return floe_layer_dense(g, "fc2", h, 10, FLOE_ACT_NONE, s + 4);
}

/* --onnx: 1 when the model takes [N,C,H,W] images (C 1 or 3, H and W multiples of 28 up to
 * MAX_ONNX_SIDE, into chw: the batches then come as NHWC [N,28,28,1] and are enlarged and
 * transposed), 0 for [N,784]; -1 after printing why the model does not fit. */
#define MAX_ONNX_SIDE (28 * 32)
static int onnx_input_is_image(const char *path, int64_t *chw) {
  FloeStatus *st = floe_status_new();
  FloeOnnxOptions oo;
  floe_onnx_options_init(&oo);
  oo.no_constant_folding = 1;
  FloeOnnxModel *m = floe_onnx_import_file(path, &oo, st);
  int r = -1;
  if (!m) {
    cli_error("train", "%s", floe_status_message(st));
  } else if (floe_onnx_model_num_inputs(m) != 1 || floe_onnx_model_num_outputs(m) < 1 ||
             floe_onnx_model_input_dtype(m, 0) != FLOE_F32) {
    cli_error("train", "--onnx %s: the model needs one f32 input and a logits output", path);
  } else {
    FloeShape s = floe_onnx_model_input_shape(m, 0);
    int side_h = s.rank == 4 && s.dims[2] >= 28 && s.dims[2] % 28 == 0 &&
                  s.dims[2] <= MAX_ONNX_SIDE;
    int side_w = s.rank == 4 && s.dims[3] >= 28 && s.dims[3] % 28 == 0 &&
                  s.dims[3] <= MAX_ONNX_SIDE;
    if (s.rank == 2 && (s.dims[1] == 784 || s.dims[1] < 0)) {
      r = 0;
    } else if (s.rank == 4 && (s.dims[1] == 1 || s.dims[1] == 3) && side_h && side_w) {
      r = 1;
      for (int d = 0; d < 3; d++) chw[d] = s.dims[d + 1];
    } else {
      char shape[160];
      floe_shape_str(&s, shape, sizeof shape);
      cli_error("train",
                "--onnx %s: input '%s' is %s; it must be [N,784] or [N,C,H,W] with C 1 or 3 "
                "and H, W multiples of 28 up to %d (Fashion-MNIST's 28x28 images are enlarged "
                "to fit)",
                path, floe_onnx_model_input_name(m, 0), shape, MAX_ONNX_SIDE);
    }
  }
  floe_onnx_model_free(m);
  floe_status_free(st);
  return r;
}

/* --onnx: the model imported into g on x (transposed to NCHW for image models), its
 * initializers trainable; its first output (the logits). */
/* A constant i64 vector. */
static FloeOutput const_i64(FloeGraph *g, const char *name, const int64_t *v, int64_t n) {
  FloeTensor *t = floe_tensor_new(FLOE_I64, 1, &n, NULL);
  if (t) memcpy(floe_tensor_data(t), v, (size_t)n * sizeof *v);
  FloeOutput c = floe_const(g, name, t);
  floe_tensor_release(t);
  return c;
}

/* x [N,28,28,1] enlarged to [N,H,W,C]: each pixel repeated H/28 x W/28 times (nearest
 * neighbour) and in each of the C channels, by a Tile of [N,28,1,28,1,1]. */
static FloeOutput enlarge(FloeGraph *g, FloeOutput x, const int64_t *chw) {
  const int64_t split[6] = {-1, 28, 1, 28, 1, 1};
  const int64_t reps[6] = {1, 1, chw[1] / 28, 1, chw[2] / 28, chw[0]};
  const int64_t whole[4] = {-1, chw[1], chw[2], chw[0]};
  x = floe_binary(g, "Reshape", "x/split", x, const_i64(g, "x/split_shape", split, 6));
  x = floe_binary(g, "Tile", "x/tiled", x, const_i64(g, "x/reps", reps, 6));
  return floe_binary(g, "Reshape", "x/enlarged", x, const_i64(g, "x/enlarged_shape", whole, 4));
}

static FloeOutput import_onnx(FloeGraph *g, FloeOutput x, const TrainOptions *o) {
  if (o->cnn && (o->onnx_chw[0] != 1 || o->onnx_chw[1] != 28 || o->onnx_chw[2] != 28))
    x = enlarge(g, x, o->onnx_chw);
  if (o->cnn) {
    static const int64_t perm[4] = {0, 3, 1, 2};
    x = floe_binary(g, "Transpose", "x/nchw", x, const_i64(g, "x/nchw_perm", perm, 4));
  }
  FloeStatus *st = floe_status_new();
  FloeOnnxOptions oo;
  floe_onnx_options_init(&oo);
  oo.trainable = 1;
  oo.graph = g;
  oo.name_prefix = "onnx/";
  FloeOnnxModel *probe = floe_onnx_import_file(o->onnx, &(FloeOnnxOptions){
      .struct_size = sizeof(FloeOnnxOptions), .no_constant_folding = 1}, st);
  const char *name = probe ? floe_onnx_model_input_name(probe, 0) : "";
  oo.bind_names = &name;
  oo.bind_values = &x;
  oo.num_bind = 1;
  FloeOnnxModel *m = probe ? floe_onnx_import_file(o->onnx, &oo, st) : NULL;
  FloeOutput out = m ? floe_onnx_model_output(m, 0) : floe_out(NULL, 0);
  if (!m) cli_error("train", "%s", floe_status_message(st));
  floe_onnx_model_free(m); /* the graph is g's: only the model's names go */
  floe_onnx_model_free(probe);
  floe_status_free(st);
  return out;
}

/* Everything one run holds, freed by train_free. */
typedef struct Trainer {
  TrainOptions o;
  FloeStatus *st;
  FloeDataset *train, *test;
  FloeBatcher *batches, *test_batches;
  FloeGraph *g;
  FloeSession *s;
  char loss_name[256], step_name[256], train_name[256];
  char step_var[256]; /* the global step variable's name (step_name reads it) */
  /* --replication sync: the token a step took, and the nodes the tasks run */
  char token_name[256], local_init_name[256], update_name[256], close_name[256];
  char stale_name[256];
  int K;               /* gradients per global step (1 without sync) */
  int tty;
  FloeOpProfile *prof; /* --profile: the training steps' counts over all epochs (malloc'd) */
  FloeStepBreakdown bd; /* --profile: the training steps' breakdown over all epochs */
  int num_prof;
  int fatal;               /* a failure re-forming the cluster would not cure (divergence) */
  int64_t n_train, per_epoch;
  char *images, *labels;   /* the training files (malloc'd; --input queue reads them) */
  char *test_images, *test_labels; /* the test files (malloc'd) */
  TrainVars vars;          /* every variable, for the checks of finite values */
  FloeQueueRunner *runner; /* --input queue: runs input/enqueue while training */
  FloeRunOptions ro;       /* every step's: --timeout */
} Trainer;

static void train_free(Trainer *t) {
  floe_queue_runner_free(t->runner); /* before the session it runs steps of */
  free(t->images);
  free(t->labels);
  free(t->test_images);
  free(t->test_labels);
  train_vars_free(&t->vars);
  free(t->prof);
  floe_session_free(t->s);
  train_cluster_free(&t->o.cl); /* after the session (it may have made the server's transport) */
  floe_graph_free(t->g);
  floe_batcher_free(t->batches);
  floe_batcher_free(t->test_batches);
  floe_dataset_free(t->train);
  floe_dataset_free(t->test);
  floe_status_free(t->st);
}

static int build_graph(Trainer *t) {
  const TrainOptions *o = &t->o;
  FloeGraph *g = t->g = floe_graph_new();
  if (!g) return cli_error("train", "out of memory");
  const int64_t flat[2] = {-1, 784}, nhwc[4] = {-1, 28, 28, 1}, yd[1] = {-1};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32,
                                  o->cnn ? floe_shape_make(4, nhwc) : floe_shape_make(2, flat));
  FloeOutput y = floe_placeholder(g, "y", FLOE_I64, floe_shape_make(1, yd));
  FloeOutput tx = x, ty = y; /* what the training steps learn from */
  if (o->queue) {
    TrainInputSpec in = {t->images, t->labels, o->cnn, o->batch, o->seed, o->limit,
                         o->stop_after ? o->stop_after : o->epochs, NULL, NULL};
    train_input_build(g, &in, &tx, &ty);
  }
  FloeOutput model_out = o->onnx ? import_onnx(g, x, o) : build_model(g, tx, o);
  FloeOutput loss = floe_sparse_softmax_cross_entropy(g, "loss", model_out, ty);
  FloeOptimizerOptions opt;
  floe_optimizer_options_init(&opt, o->optimizer);
  if (!isnan(o->lr)) opt.learning_rate = o->lr;
  t->K = 1;
  if (o->cl.allreduce) t->K = o->cl.replicas; /* one global step: every task's batch */
  if (o->cl.sync) {
    t->K = o->cl.aggregate ? o->cl.aggregate : o->cl.replicas;
    if (t->K > o->cl.replicas)
      return cli_error("train", "--replicas-to-aggregate %d is more than the cluster's %d "
                       "training tasks (the chief and the workers)", t->K, o->cl.replicas);
  }
  if (o->cosine && t->per_epoch > 0) { /* over global steps: K batches make one in sync */
    opt.schedule = FLOE_LR_COSINE;
    opt.decay_steps = (int64_t)o->epochs * t->per_epoch / t->K;
    if (opt.decay_steps < 1) opt.decay_steps = 1;
    opt.cosine_alpha = 0;
  }
  FloeNode *step;
  if (o->cl.sync) {
    FloeSyncReplicasOptions so;
    floe_sync_replicas_options_init(&so);
    so.replicas_to_aggregate = t->K;
    so.total_num_replicas = o->cl.replicas;
    FloeSyncReplicas sr = floe_sync_replicas_minimize(g, "train", loss, &opt, &so, NULL, 0);
    step = sr.train;
    if (step) {
      snprintf(t->token_name, sizeof t->token_name, "%s", floe_node_name(sr.token.node));
      snprintf(t->local_init_name, sizeof t->local_init_name, "%s", floe_node_name(sr.local_init));
      snprintf(t->update_name, sizeof t->update_name, "%s", floe_node_name(sr.chief_update));
      snprintf(t->close_name, sizeof t->close_name, "%s", floe_node_name(sr.close));
      snprintf(t->stale_name, sizeof t->stale_name, "%s", floe_node_name(sr.stale.node));
    }
  } else if (o->cl.allreduce) {
    FloeAllReduceOptions ao;
    train_cluster_allreduce_options(&o->cl, &ao);
    step = floe_allreduce_minimize(g, "train", loss, &opt, &ao, NULL, 0);
  } else {
    step = floe_minimize(g, "train", loss, &opt, NULL, 0);
  }
  FloeVariable gs = floe_global_step(g);
  /* Inference: the same layer names, so the same variables. */
  FloeOutput logits = floe_unary(g, "Identity", "logits", o->onnx ? model_out : build_model(g, x, o));
  FloeTensor *one = floe_tensor_scalar_i32(1, NULL);
  FloeOutput axis = one ? floe_const(g, "predictions/axis", one) : floe_out(NULL, 0);
  floe_tensor_release(one);
  FloeNodeBuilder *b = floe_node_begin(g, "ArgMax", "predictions");
  floe_node_add_input(b, logits);
  floe_node_add_input(b, axis);
  floe_node_finish(b);
  floe_variables_initializer(g, "init");
  train_cluster_add_broadcast(&o->cl, g); /* allreduce: every task takes the chief's values */
  if (floe_graph_status(g) != FLOE_OK)
    return cli_error("train", "building the model: %s", floe_graph_error(g, NULL));
  if (train_vars_collect(g, &t->vars)) return cli_error("train", "out of memory");
  if (o->cl.spec && train_cluster_place(&t->o.cl, g, &t->vars, "train")) return 1;
  snprintf(t->loss_name, sizeof t->loss_name, "%s", floe_node_name(loss.node));
  snprintf(t->step_name, sizeof t->step_name, "%s", floe_node_name(gs.value.node));
  snprintf(t->step_var, sizeof t->step_var, "%s", floe_node_name(gs.handle.node));
  snprintf(t->train_name, sizeof t->train_name, "%s", floe_node_name(step));
  return 0;
}

/* Test examples per inference step: the CNN's activations of 1000 examples took 300 MB
 * more peak memory than training, and scoring is no faster in larger batches. */
enum { EVAL_BATCH = 100 };

/* Test accuracy of the inference model, in batches of EVAL_BATCH. -1 on error (printed). */
static double evaluate(Trainer *t) {
  floe_batcher_start_epoch(t->test_batches, 0, 0);
  FloeTensor *im, *lb;
  int64_t correct = 0, total = 0;
  int r;
  while ((r = floe_batcher_next(t->test_batches, &im, &lb, t->st)) == 1) {
    FloeFeed feed = {"x", im};
    const char *fetch = "predictions";
    FloeTensor *pred = NULL;
    floe_code rc = floe_session_run_opts(t->s, &t->ro, &feed, 1, &fetch, 1, NULL, 0, &pred, t->st);
    if (rc == FLOE_OK) {
      const int64_t *p = floe_tensor_data(pred), *l = floe_tensor_data(lb);
      int64_t n = floe_tensor_dim(lb, 0);
      for (int64_t i = 0; i < n; i++) correct += p[i] == l[i];
      total += n;
    }
    floe_tensor_release(pred);
    floe_tensor_release(im);
    floe_tensor_release(lb);
    if (rc != FLOE_OK) break;
  }
  if (r != 0) {
    cli_error("train", "evaluating: %s", floe_status_message(t->st));
    return -1;
  }
  return total ? (double)correct / (double)total : 0.0;
}

/* The global step variable's value into *step: 0, or -1 with t->st set. */
static int fetch_global_step(Trainer *t, int64_t *step) {
  return train_fetch_global_step(t->s, &t->ro, t->step_name, step, t->st);
}

/* "nan", "inf" or "-inf" (printf spells a NaN "-nan" or "nan" by its sign bit). */
static const char *nonfinite_name(double x) { return isnan(x) ? "nan" : x > 0 ? "inf" : "-inf"; }

/* The learning rate this run asked for (the schedule's peak). */
static double peak_lr(const TrainOptions *o) {
  FloeOptimizerOptions d;
  floe_optimizer_options_init(&d, o->optimizer);
  return isnan(o->lr) ? d.learning_rate : o->lr;
}

/* The chief on a cluster: waits until the shared global step reaches `end` (every task's
 * share of the batches applied), into *step. 0, or 1 after printing why (a lost task ends
 * the session's steps, so this never waits on one). */
static int wait_global_step(Trainer *t, int64_t end, int64_t *step) {
  return train_wait_global_step(t->s, &t->ro, t->step_name, end, step, t->st, "train");
}

/* With --checkpoint-dir, what a diverged run says of its checkpoints. */
static const char *not_saved(const TrainOptions *o) {
  return o->checkpoint_dir ? " no checkpoint saved of it (the folder keeps the earlier ones);" : "";
}

/* After the step whose loss was not finite: the error naming the step, the loss and the first
 * variable the step left non-finite. Nothing is saved, so no checkpoint holds NaNs. 1. */
static int report_diverged(Trainer *t, int64_t step, double loss) {
  char desc[512];
  t->fatal = 1;
  int r = train_vars_nonfinite(t->s, &t->vars, desc, sizeof desc, t->st);
  if (r < 0)
    snprintf(desc, sizeof desc, "(reading the variables failed: %s)", floe_status_message(t->st));
  else if (r == 0)
    snprintf(desc, sizeof desc, "every variable is still finite");
  return cli_error("train", "step %lld: the loss is %s: training diverged; after the step, %s;%s "
                   "try a smaller --lr (this run's: %g)", (long long)step, nonfinite_name(loss),
                   desc, not_saved(&t->o), peak_lr(&t->o));
}

/* Before a checkpoint is saved or the model used: 0 when every variable is finite, else 1
 * after printing an error that says when (`when`: "after epoch 2 (global step 20)") and
 * which variable. A checkpoint is never written with non-finite values, so keeping the
 * newest 3 never removes a finite one in favour of NaNs. */
static int check_finite(Trainer *t, const char *when) {
  char desc[512];
  int r = train_vars_nonfinite(t->s, &t->vars, desc, sizeof desc, t->st);
  if (r < 0)
    return cli_error("train", "%s: reading the variables: %s", when, floe_status_message(t->st));
  if (r == 0) return 0;
  t->fatal = 1;
  return cli_error("train", "%s: training diverged: %s;%s try a smaller --lr (this run's: %g)",
                   when, desc, not_saved(&t->o), peak_lr(&t->o));
}

/* After restoring checkpoint `path`, whose metadata says meta_step: the step to go on from,
 * the restored global step variable's value, into *step, once it is shown consistent
 * with the metadata, within this run's plan (--epochs of the steps --batch and --limit
 * make), and the values finite. 0, or 1 after printing an error naming the file. */
static int check_resumed(Trainer *t, const char *path, int64_t meta_step, int64_t *step) {
  const TrainOptions *o = &t->o;
  int64_t var_step;
  if (fetch_global_step(t, &var_step))
    return cli_error("train", "--resume %s: reading the global step: %s", path,
                     floe_status_message(t->st));
  if (var_step != meta_step)
    return cli_error("train", "--resume: checkpoint %s is inconsistent: its metadata says "
                     "global step %lld but its variable '%s' holds %lld (was it edited, or "
                     "written by another program?): move it away to resume from the one "
                     "before, or give another --checkpoint-dir to start afresh", path,
                     (long long)meta_step, t->step_var, (long long)var_step);
  int64_t plan = (int64_t)o->epochs * t->per_epoch;
  if (var_step > plan) {
    int64_t need = (var_step + t->per_epoch - 1) / t->per_epoch;
    char more[200];
    if (need <= MAX_EPOCHS)
      snprintf(more, sizeof more, "give --epochs %lld or more (with the same --batch and "
               "--limit as the run that saved it) to continue it, or", (long long)need);
    else
      snprintf(more, sizeof more, "no --epochs (at most %d) reaches it with this --batch and "
               "--limit:", MAX_EPOCHS);
    return cli_error("train", "--resume: checkpoint %s is at global step %lld, past the end of "
                     "this run's plan of %lld steps (--epochs %d x %lld steps per epoch: %lld "
                     "examples in batches of %lld): %s give another --checkpoint-dir to start "
                     "afresh", path, (long long)var_step, (long long)plan, o->epochs,
                     (long long)t->per_epoch, (long long)t->n_train, (long long)o->batch, more);
  }
  char when[1024];
  snprintf(when, sizeof when, "--resume: checkpoint %s (global step %lld)", path,
           (long long)var_step);
  char desc[512];
  int r = train_vars_nonfinite(t->s, &t->vars, desc, sizeof desc, t->st);
  if (r < 0) return cli_error("train", "%s: reading the variables: %s", when,
                              floe_status_message(t->st));
  if (r > 0)
    return cli_error("train", "%s holds non-finite values: %s; move it away to resume from "
                     "the one before, or give another --checkpoint-dir to start afresh", when,
                     desc);
  *step = var_step;
  return 0;
}

/* Loads the training (train != 0) or test set of --data and checks, before any graph is
 * built, what the models need of it: images of 28 x 28 pixels, labels 0 to 9, at least one
 * example (floe_idx_load checks each file's magic, that the header matches the data, and that
 * the two files count the same examples). Keeps the first --limit examples. 0, or 1 after
 * printing an error naming the file and what it holds. */
static int load_set(Trainer *t, int train, FloeDataset **out, char **images, char **labels) {
  const TrainOptions *o = &t->o;
  if (floe_fashion_mnist_files(o->data, train, images, labels, t->st) != FLOE_OK ||
      !(*out = floe_idx_load(*images, *labels, t->st)))
    return cli_error("train", "%s", floe_status_message(t->st));
  const FloeDataset *d = *out;
  const char *set = train ? "training" : "test";
  int64_t n = floe_dataset_size(d), rows = floe_dataset_rows(d), cols = floe_dataset_cols(d);
  if (rows != 28 || cols != 28)
    return cli_error("train", "%s: the %s images are %lld x %lld pixels; the models take "
                     "Fashion-MNIST's 28 x 28: give --data DIR with such files", *images, set,
                     (long long)rows, (long long)cols);
  if (n == 0)
    return cli_error("train", "%s: the %s set is empty (the file declares 0 images): nothing "
                     "to %s; give --data DIR with non-empty files", *images, set,
                     train ? "train on" : "test on");
  const uint8_t *l = floe_dataset_labels(d);
  for (int64_t i = 0; i < n; i++)
    if (l[i] > 9)
      return cli_error("train", "%s: offset %lld: the label of example %lld is %u; the models "
                       "have 10 classes (labels 0 to 9)", *labels, (long long)(8 + i),
                       (long long)i, l[i]);
  if (o->limit) floe_dataset_truncate(*out, o->limit);
  return 0;
}

/* After Ctrl-C: with --checkpoint-dir, saves a checkpoint of this step (a resumed run goes
 * on at the batch after it, as the global step implies) and prints how to resume; else says
 * nothing was saved. On a cluster the chief saves a sharded checkpoint, consistent as its
 * epochs' are (sync: the update thread stopped first, so no update runs during the save;
 * async: the workers paused; allreduce: its own variables), and a worker saves nothing (an
 * async one tells the chief not to wait for its pause). Returns 130, the status of a run
 * ended by SIGINT. */
static int stop_at_signal(Trainer *t, TrainUpdater *u, TrainSaveArgs *a, int argc,
                          char **argv) {
  const TrainOptions *o = &t->o;
  int64_t step;
  if (o->cl.spec && !o->cl.is_chief) {
    if (o->checkpoint_dir && !o->cl.sync && !o->cl.allreduce) train_cluster_worker_done(&t->o.cl);
    fprintf(stderr, "floe train: interrupted; %s\n",
            o->checkpoint_dir ? "the chief saves the checkpoint" : "nothing saved");
    return 130;
  }
  if (fetch_global_step(t, &step)) {
    cli_error("train", "interrupted; reading the global step: %s", floe_status_message(t->st));
    return 130;
  }
  if (!o->checkpoint_dir) {
    fprintf(stderr, "floe train: interrupted at global step %lld; nothing saved (no "
            "--checkpoint-dir)\n", (long long)step);
    return 130;
  }
  char when[96];
  snprintf(when, sizeof when, "interrupted at global step %lld", (long long)step);
  if (o->cl.spec) { /* train_cluster_save checks every variable finite */
    if (train_updater_stop(u, "train")) return 130;
    if (train_cluster_checkpoint(&t->o.cl, u, a, 0, "train")) return 130;
    step = a->step;
  } else if (check_finite(t, when)) {
    return 130;
  } else if (floe_checkpoint_save(t->s, o->checkpoint_dir, NULL, step, 3, NULL, t->st) !=
             FLOE_OK) {
    cli_error("train", "interrupted; saving a checkpoint: %s", floe_status_message(t->st));
    return 130;
  }
  fprintf(stderr, "floe train: interrupted at global step %lld; checkpoint saved in %s. "
          "Resume with:\n", (long long)step, o->checkpoint_dir);
  train_print_resume(stderr, argc, argv);
  return 130;
}

/* Adds the session's profile (one epoch's training steps) to t->prof. 0, or 1 on error. */
static int merge_profile(Trainer *t) {
  FloeOpProfile *rows;
  int n;
  if (floe_session_profile(t->s, &rows, &n, t->st) != FLOE_OK)
    return cli_error("train", "--profile: %s", floe_status_message(t->st));
  int r = train_profile_merge(&t->prof, &t->num_prof, rows, n);
  free(rows);
  return r ? cli_error("train", "--profile: out of memory") : 0;
}

/* Sync replication: the stale gradients the accumulators dropped so far; -1 when unread. */
static int64_t stale_gradients(Trainer *t) {
  int64_t stale = -1;
  const char *f = t->stale_name;
  FloeTensor *sv = NULL;
  if (floe_session_run_opts(t->s, &t->ro, NULL, 0, &f, 1, NULL, 0, &sv, t->st) == FLOE_OK)
    stale = *(const int64_t *)floe_tensor_data(sv);
  floe_tensor_release(sv);
  return stale;
}

/* Adds the breakdown of the steps traced since tracing started to t->bd. 0, or 1 on error. */
static int add_breakdown(Trainer *t) {
  FloeStepBreakdown b = {.struct_size = sizeof b};
  if (floe_session_step_breakdown(t->s, &b, t->st) != FLOE_OK)
    return cli_error("train", "--profile: %s", floe_status_message(t->st));
  measure_breakdown_add(&t->bd, &b);
  return 0;
}

/* One training run; *reform is set when it failed because the cluster lost a task and this
 * process may re-form it and go on (train_recover_budget: floe launch --restart task). */
static int train_run(int argc, char **argv, int *reform) {
  double t_start = now_seconds();
  int cluster_up = 0; /* this task's server is up: a failure may be the cluster's */
  Trainer t;
  memset(&t, 0, sizeof t);
  t.bd.struct_size = sizeof t.bd;
  TrainStepTimes times = {0, 0, NULL, 0}; /* before any goto out: freed there */
  TrainUpdater updater;           /* --replication sync, the chief: stopped there */
  memset(&updater, 0, sizeof updater);
  TrainSplit split;               /* --cluster with --json: each training step's split */
  int splitting = 0;
  TrainSaveArgs save_args;        /* --cluster with --checkpoint-dir: the chief's saves */
  int done, rc = parse_options(argc, argv, &t.o, &done);
  if (rc || done) return rc;
  const TrainOptions *o = &t.o;
  rc = 1;
  if (o->threads > 0) {
    /* Before the runtime loads the plugins: OpenMP (oneDNN) and OpenBLAS read these when
     * they start. */
    char n[16];
    snprintf(n, sizeof n, "%d", o->threads);
    setenv("OMP_NUM_THREADS", n, 1);
    setenv("OPENBLAS_NUM_THREADS", n, 1);
    setenv("FLOE_NUM_THREADS", n, 1);
  }
  t.st = floe_status_new();
  if (!t.st) return cli_error("train", "out of memory");
  t.tty = isatty(STDOUT_FILENO);
  char msg[1024];
  if (o->checkpoint_dir && train_check_checkpoint_dir(o->checkpoint_dir, msg, sizeof msg)) {
    rc = cli_error("train", "%s", msg); /* before an epoch's work, not after it */
    goto out;
  }
  if (load_set(&t, 1, &t.train, &t.images, &t.labels) ||
      load_set(&t, 0, &t.test, &t.test_images, &t.test_labels))
    goto out;
  t.n_train = floe_dataset_size(t.train);
  t.per_epoch = (t.n_train + o->batch - 1) / o->batch; /* the last batch may be shorter */
  if (o->queue) {
    /* The readers load the training files themselves: the loaded copy only said they are
     * sound and how many examples they hold. */
    floe_dataset_free(t.train);
    t.train = NULL;
  } else if (!(t.batches = floe_batcher_new(t.train, o->batch, 1, o->seed, o->cnn, 0, t.st))) {
    rc = cli_error("train", "%s", floe_status_message(t.st));
    goto out;
  }
  /* enlarged images: evaluated in training-sized batches (a 224x224 network's activations
   * for 100 images would take gigabytes) */
  int64_t eval_batch = o->onnx && o->cnn && o->onnx_chw[1] > 28 ? o->batch : EVAL_BATCH;
  if (!(t.test_batches = floe_batcher_new(t.test, eval_batch, 0, 0, o->cnn, 0, t.st))) {
    rc = cli_error("train", "%s", floe_status_message(t.st));
    goto out;
  }
  FloeRuntime *rt = cli_runtime("train");
  if (!rt || cli_check_plugins("train", rt) != 0) goto out;
  if (o->cl.spec) {
    if ((rc = train_cluster_start(&t.o.cl, rt, "train")) != 0) goto out;
    cluster_up = 1;
    rc = 1;
    if (o->cl.is_ps) { /* the variables live here: serve them until the chief is done */
      printf("floe train: %s serves the variables until the chief leaves\n",
             floe_server_task(o->cl.server));
      fflush(stdout);
      rc = train_cluster_serve(&t.o.cl, "train");
      goto out;
    }
  }
  floe_run_options_init(&t.ro);
  t.ro.timeout_ms = o->timeout_ms;
  if (build_graph(&t)) goto out;
  if (o->save_graph) {
    if (floe_graph_save(t.g, o->save_graph, t.st) != FLOE_OK)
      rc = cli_error("train", "--save-graph %s: %s", o->save_graph, floe_status_message(t.st));
    else
      printf("saved the training graph to %s (target %s, initialiser init)\n", o->save_graph,
             t.train_name), rc = 0;
    goto out;
  }
  FloeSessionOptions so;
  floe_session_options_init(&so);
  so.devices = o->devices;
  so.compress_transfers = o->compress;
  train_cluster_session_options(&o->cl, &so);
  if (!(t.s = floe_session_new(t.g, &so, t.st))) {
    rc = train_cluster_session_failed(&o->cl, &so, t.st, "train");
    goto out;
  }
  /* A worker of a cluster starts where the shared global step is once the chief has
   * initialised or restored the variables; the chief (or one process) restores the newest
   * checkpoint with --resume (every variable, so nothing needs initialising first), else
   * initialises. */
  int is_worker = o->cl.spec && !o->cl.is_chief;
  /* allreduce: every task holds its own variables; the chief's reach the others by the
   * broadcast below, so a worker initialises its own first and waits for nothing else. */
  int shared_vars = is_worker && !o->cl.allreduce;
  int64_t per_epoch = t.per_epoch, n_train = t.n_train;
  int64_t global_step = 0;
  char *resume_path = NULL;
  if (o->resume && !is_worker) {
    resume_path = floe_checkpoint_latest(o->checkpoint_dir, NULL, t.st);
    if (!resume_path && floe_status_code(t.st) != FLOE_NOT_FOUND) {
      rc = cli_error("train", "--resume: %s", floe_status_message(t.st));
      goto out;
    }
    if (!resume_path)
      fprintf(stderr, "floe train: no checkpoint in %s yet: starting from scratch\n",
              o->checkpoint_dir);
  }
  if (shared_vars) {
    /* Where the chief started (0, or its checkpoint's step), not the live global step: the
     * chief may have stepped since, and starting there would skip this task's first
     * batches, whose updates the chief would then wait for forever. */
    if (train_cluster_start_step(&o->cl, 120000, &global_step, "train") ||
        train_cluster_wait_ready(&o->cl, t.g, t.s, &t.vars, 120000, "train"))
      goto out;
  } else if (!resume_path || is_worker) {
    const char *init = "init";
    if (floe_session_run_opts(t.s, &t.ro, NULL, 0, NULL, 0, &init, 1, NULL, t.st) != FLOE_OK) {
      rc = cli_error("train", "initialising the variables: %s", floe_status_message(t.st));
      goto out;
    }
  }
  printf("floe train: %s on Fashion-MNIST (%lld training, %lld test examples), %s, %s "
         "learning rate, batch %lld, %d epoch%s, %s input\n",
         o->model, (long long)n_train, (long long)floe_dataset_size(t.test), o->optimizer_name,
         o->cosine ? "cosine" : "constant", (long long)o->batch, o->epochs,
         o->epochs == 1 ? "" : "s", o->queue ? "queue" : "feed");
  if (o->cl.spec)
    printf("on a cluster: %s, training task %d of %d, %d ps task%s, %s replication\n",
           floe_server_task(o->cl.server), o->cl.replica + 1, o->cl.replicas, o->cl.num_ps,
           o->cl.num_ps == 1 ? "" : "s",
           o->cl.allreduce ? "allreduce" : o->cl.sync ? "sync" : "async");
  if (resume_path) {
    floe_code c = floe_checkpoint_restore(t.s, resume_path, &global_step, t.st);
    if (c != FLOE_OK) {
      rc = cli_error("train", "--resume: %s", floe_status_message(t.st));
      free(resume_path);
      goto out;
    }
    if ((rc = check_resumed(&t, resume_path, global_step, &global_step)) != 0) {
      free(resume_path);
      goto out;
    }
    rc = 1;
    printf("resumed from %s at global step %lld (epoch %lld, batch %lld)\n", resume_path,
           (long long)global_step,
           (long long)(per_epoch ? global_step * t.K / per_epoch + 1 : 1),
           (long long)(per_epoch ? global_step * t.K % per_epoch : 0));
    free(resume_path);
  }
  if (o->cl.allreduce) { /* every task starts from the chief's variables */
    if (train_cluster_broadcast(&o->cl, t.s, &t.ro, t.step_name, &global_step, "train")) goto out;
  } else if (o->cl.spec && !is_worker &&
             train_cluster_publish_start(&o->cl, global_step, "train")) {
    goto out;
  }
  /* Synchronous replication: every task's local step starts at the global step, and the
   * chief aggregates on a thread of its own. */
  if (o->cl.sync) {
    const char *li = t.local_init_name;
    if (floe_session_run_opts(t.s, &t.ro, NULL, 0, NULL, 0, &li, 1, NULL, t.st) != FLOE_OK) {
      rc = cli_error("train", "setting the local step: %s", floe_status_message(t.st));
      goto out;
    }
    if (o->cl.is_chief && train_updater_start(&updater, t.s, t.update_name, "train")) goto out;
  }
  if ((splitting = o->cl.spec && o->json)) train_split_init(&split, t.s, o->profile || o->trace);
  save_args = (TrainSaveArgs){t.s, o->checkpoint_dir, t.step_name, &t.vars, 0};
  /* async workers pause between steps when the chief checkpoints */
  int pausing = is_worker && o->checkpoint_dir && !o->cl.sync && !o->cl.allreduce;
  /* The global batch to go on from: K per global step under sync replication. */
  int64_t start_gb = global_step * t.K;
  int first_epoch = per_epoch ? (int)(start_gb / per_epoch) : 0;
  int64_t first_batch = per_epoch ? start_gb % per_epoch : 0;
  if (o->queue && !(t.runner = train_input_start(t.s, first_epoch, first_batch * o->batch, t.st))) {
    rc = cli_error("train", "starting the input pipeline: %s", floe_status_message(t.st));
    goto out;
  }
  train_sigint_install();
  double train_secs = 0, final_loss = NAN, accuracy = NAN;
  int64_t trained = 0, total_steps = 0;
  int last_epoch = o->stop_after ? o->stop_after : o->epochs;
  /* On a cluster, the global batches this run ends before (every task's together), and this
   * task's share of them: r, r + R, ... */
  int replicas = o->cl.spec ? o->cl.replicas : 1, me = o->cl.spec ? o->cl.replica : 0;
  int64_t end_gb = (int64_t)last_epoch * per_epoch;
  if (o->max_steps && o->max_steps < end_gb - start_gb) end_gb = start_gb + o->max_steps;
  /* allreduce: every task runs the same number of steps (a collective waits for all), so
   * the batches end at a whole number of global steps; the last few are left out. */
  if (o->cl.allreduce) end_gb = start_gb + (end_gb - start_gb) / replicas * replicas;
  /* Sync: training ends at this global step (a task stops once the token it takes says so),
   * however many batches that takes (backups' stale gradients are dropped). */
  int64_t end_gs = end_gb / t.K;
  if (end_gs < 1 && !o->cl.allreduce) end_gs = 1; /* allreduce: no whole global step, no step */
  /* sync: the token said the last global step, or a resumed run starts there (its checkpoint
   * was the last: nothing is left to train, and no task may take a step past the end) */
  int finished = o->cl.sync && global_step >= end_gs;
  for (int e = first_epoch; o->cl.sync ? !finished : e < last_epoch; e++) {
    int64_t start = e == first_epoch ? first_batch : 0;
    if (t.batches) floe_batcher_start_epoch(t.batches, e, start);
    int64_t epoch_total = n_train - start * o->batch, epoch_done = 0, steps = 0;
    if (o->max_steps && o->max_steps - total_steps < per_epoch - start) /* --steps ends it early */
      epoch_total = (o->max_steps - total_steps) * o->batch; /* (no overflow: < per_epoch) */
    double loss_sum = 0, epoch_secs = 0, t0 = now_seconds(), last_draw = 0;
    int r = 0;
    if (o->profile) floe_session_set_profiling(t.s, 1); /* training steps only */
    /* --trace keeps every epoch's steps; --profile alone only needs one epoch's at a time */
    if (o->profile || o->trace)
      floe_session_set_tracing(t.s, o->trace && e > first_epoch ? FLOE_TRACE_RESUME
                                                                 : FLOE_TRACE_START);
    if (replicas > 1) epoch_total = (epoch_total + replicas - 1) / replicas;
    for (int64_t j = start;; j++) {
      if (o->cl.sync ? finished
          : o->cl.spec ? (int64_t)e * per_epoch + j >= end_gb
                       : o->max_steps && total_steps + steps >= o->max_steps)
        break;
      if (o->cl.sync && j >= per_epoch) break; /* on to the next epoch */
      FloeTensor *im = NULL, *lb = NULL;
      if (replicas > 1 && ((int64_t)e * per_epoch + j) % replicas != me) {
        /* another task's batch: drawn and dropped, so the order stays the epoch's */
        if ((r = floe_batcher_next(t.batches, &im, &lb, t.st)) != 1) break;
        floe_tensor_release(im);
        floe_tensor_release(lb);
        continue;
      }
      FloeFeed feeds[2];
      int nfeeds = 1;
      int64_t examples;
      if (o->queue) { /* the step dequeues the batch: only its size is fed */
        if (j >= per_epoch) break;
        examples = j + 1 < per_epoch ? o->batch : n_train - j * o->batch;
        if (!(im = floe_tensor_scalar_i32((int32_t)examples, t.st))) {
          r = -1;
          break;
        }
        feeds[0] = (FloeFeed){TRAIN_INPUT_COUNT, im};
      } else {
        if ((r = floe_batcher_next(t.batches, &im, &lb, t.st)) != 1) break;
        feeds[0] = (FloeFeed){"x", im};
        feeds[1] = (FloeFeed){"y", lb};
        nfeeds = 2;
        examples = floe_tensor_dim(lb, 0);
      }
      const char *fetch[2] = {t.loss_name, t.token_name}, *target = t.train_name;
      FloeTensor *got[2] = {NULL, NULL};
      if (pausing && train_cluster_pause_point(&t.o.cl, "train")) goto out;
      if (o->cl.spec) {
        train_cluster_straggle(&o->cl); /* FLOE_TEST_STEP_DELAY_MEAN_MS: an injected straggler */
        train_cluster_count_begin(&t.o.cl);
      }
      if (splitting) train_split_begin(&split, &t.ro);
      double ts = now_seconds();
      int64_t live0 = train_step_mem_begin();
      floe_code c = floe_session_run_opts(t.s, &t.ro, feeds, nfeeds, fetch, o->cl.sync ? 2 : 1,
                                          &target, 1, got, t.st);
      train_step_mem_end(&times, live0);
      FloeTensor *lv = got[0];
      if (splitting) train_split_end(&split, &t.ro, c == FLOE_OK);
      if (o->cl.spec) train_cluster_count_end(&t.o.cl);
      if (c == FLOE_OK && o->cl.sync) { /* the token: the global step the next step computes at */
        global_step = *(const int64_t *)floe_tensor_data(got[1]);
        floe_tensor_release(got[1]);
        if (global_step >= end_gs) finished = 1;
      }
      if (c == FLOE_OK && train_step_times_add(&times, now_seconds() - ts)) {
        floe_tensor_release(lv);
        rc = cli_error("train", "out of memory");
        goto out;
      }
      epoch_done += examples;
      floe_tensor_release(im);
      floe_tensor_release(lb);
      if (c == FLOE_OUT_OF_RANGE && o->cl.sync && is_worker) {
        finished = 1; /* the chief closed the token queue: training is over */
        break;
      }
      if (c != FLOE_OK) {
        if (t.tty) printf("\n");
        /* A closed queue means the pipeline stopped: its runner knows why. */
        if (t.runner && c == FLOE_OUT_OF_RANGE &&
            floe_queue_runner_stop(t.runner, t.st) != FLOE_OK) {
          rc = cli_error("train", "input pipeline: %s", floe_status_message(t.st));
          goto out;
        }
        rc = cli_error("train", "step %lld: %s", (long long)(global_step + steps + 1),
                       floe_status_message(t.st));
        goto out;
      }
      double loss = *(const float *)floe_tensor_data(lv);
      floe_tensor_release(lv);
      if (!isfinite(loss)) { /* stop here: never go on to test or save NaNs */
        if (t.tty) printf("\n");
        rc = report_diverged(&t, global_step + steps + 1, loss);
        goto out;
      }
      loss_sum += loss;
      steps++;
      if (o->cl.spec) { /* recovery: its time, and the test hook that kills a task */
        int64_t gs = o->cl.sync ? global_step
                                : ((int64_t)e * per_epoch + j + 1) / (o->cl.allreduce ? replicas : 1);
        if (o->cl.is_chief && total_steps + steps == 1 && train_recoveries() > 0)
          fprintf(stderr, "floe train: recovery %d in this process: the first step after "
                  "recovery ended at global step %lld, %.3f s after the failure\n",
                  train_recoveries(), (long long)gs, train_recovery_seconds());
        else if (o->cl.is_chief && total_steps + steps == 1 && train_restart_count() > 0)
          fprintf(stderr, "floe train: restart %d: the first step after recovery ended at global "
                  "step %lld, %.3f s after this process started\n", train_restart_count(),
                  (long long)gs, now_seconds() - t_start);
        train_cluster_test_kill(&t.o.cl, gs);
      }
      if (train_sigint_pending()) { /* Ctrl-C: stop at this step boundary */
        if (t.tty) printf("\n");
        rc = stop_at_signal(&t, &updater, &save_args, argc, argv);
        goto out;
      }
      double now = now_seconds();
      if (t.tty && (now - last_draw >= 0.1 || epoch_done == epoch_total)) {
        train_progress(e + 1, o->epochs, epoch_done, epoch_total, epoch_done / (now - t0),
                       "samples/s", loss_sum / (double)steps);
        last_draw = now;
      }
    }
    epoch_secs = now_seconds() - t0;
    if (o->profile) {
      floe_session_set_profiling(t.s, 0);
      if (merge_profile(&t)) goto out;
    }
    if (o->profile || o->trace) floe_session_set_tracing(t.s, FLOE_TRACE_OFF);
    if (o->profile && !o->trace && add_breakdown(&t)) goto out;
    if (r < 0) {
      rc = cli_error("train", "%s", floe_status_message(t.st));
      goto out;
    }
    total_steps += steps;
    train_secs += epoch_secs;
    trained += epoch_done;
    final_loss = steps ? loss_sum / (double)steps : NAN;
    if (fetch_global_step(&t, &global_step)) {
      rc = cli_error("train", "reading the global step: %s", floe_status_message(t.st));
      goto out;
    }
    int last = o->cl.sync ? finished
               : o->cl.spec ? (int64_t)(e + 1) * per_epoch >= end_gb
                            : e + 1 == last_epoch || (o->max_steps && total_steps >= o->max_steps);
    double rate = epoch_secs > 0 ? epoch_done / epoch_secs : 0;
    if (is_worker) { /* the chief tests and checkpoints */
      if (t.tty) printf("\r\033[K");
      printf("epoch %d/%d loss %.6f samples/s %.0f seconds %.2f (this task's share; global "
             "step %lld)\n", e + 1, o->epochs, final_loss, rate, epoch_secs,
             (long long)global_step);
      fflush(stdout);
      if (last) break;
      continue;
    }
    if (o->cl.spec && last) { /* the chief tests the model once every task's share is in */
      if (o->cl.sync) { /* no more updates; the tasks still waiting for a token end */
        const char *close = t.close_name;
        if (train_updater_stop(&updater, "train")) goto out;
        if (floe_session_run_opts(t.s, &t.ro, NULL, 0, NULL, 0, &close, 1, NULL, t.st) != FLOE_OK) {
          rc = cli_error("train", "closing the token queue: %s", floe_status_message(t.st));
          goto out;
        }
      }
      if (wait_global_step(&t, o->cl.sync || o->cl.allreduce ? end_gs : end_gb, &global_step))
        goto out;
    }
    char when[64];
    snprintf(when, sizeof when, "after epoch %d (global step %lld)", e + 1,
             (long long)global_step);
    if (check_finite(&t, when)) { /* the last step's update overflowed: a finite loss before it */
      if (t.tty) printf("\n");
      goto out;
    }
    if (t.tty) printf("  testing..."), fflush(stdout);
    if ((accuracy = evaluate(&t)) < 0) goto out;
    if (o->checkpoint_dir && o->cl.spec) { /* one global step across every shard */
      if (train_cluster_checkpoint(&t.o.cl, &updater, &save_args, last, "train")) {
        if (t.tty) printf("\n");
        goto out;
      }
    } else if (o->checkpoint_dir &&
        floe_checkpoint_save(t.s, o->checkpoint_dir, NULL, global_step, 3, NULL, t.st) !=
            FLOE_OK) {
      if (t.tty) printf("\n");
      rc = cli_error("train", "saving a checkpoint: %s", floe_status_message(t.st));
      goto out;
    }
    if (t.tty) printf("\r\033[K"); /* the same line as a pipe gets, over the live one */
    printf("epoch %d/%d loss %.6f test_accuracy %.4f samples/s %.0f seconds %.2f\n", e + 1,
             o->epochs, final_loss, accuracy, rate, epoch_secs);
    fflush(stdout);
    if (last) break;
  }
  if (pausing) train_cluster_worker_done(&t.o.cl);
  if (is_worker) {
    /* The session goes first (its pieces on the ps tasks are dropped); the server stays up
     * for the chief: a task that left would count as lost and end the chief's steps. */
    printf("floe train: %s done: %lld steps, p50 step %.2f ms; serving until the chief "
           "leaves\n", floe_server_task(o->cl.server), (long long)total_steps,
           train_step_times_quantile(&times, 0.5) * 1e3);
    if (o->json && /* this task's own line (under floe launch, on launch's stderr) */
        train_cluster_worker_json(&o->cl, o->model, total_steps, "samples_per_sec",
                                  train_secs > 0 ? trained / train_secs : 0, train_secs, &times,
                                  t.K, o->cl.sync ? stale_gradients(&t) : -1, &split, t.s,
                                  &t.vars, "train"))
      goto out;
    fflush(stdout);
    floe_session_free(t.s);
    t.s = NULL;
    rc = train_cluster_serve(&t.o.cl, "train");
    goto out;
  }
  if (o->trace) {
    if (o->profile && add_breakdown(&t)) goto out;
    if (floe_session_trace_write(t.s, o->trace, t.st) != FLOE_OK) {
      rc = cli_error("train", "--trace: %s", floe_status_message(t.st));
      goto out;
    }
  }
  /* The readers gave exactly the examples the steps took; the thread has ended or ends now
   * (--steps: it is stopped). */
  if (t.runner && floe_queue_runner_stop(t.runner, t.st) != FLOE_OK) {
    rc = cli_error("train", "input pipeline: %s", floe_status_message(t.st));
    goto out;
  }
  if (isnan(accuracy) && (accuracy = evaluate(&t)) < 0) goto out; /* resumed past the end */
  if (o->export_path) {
    const char *outputs[1] = {"logits"};
    if (floe_export_frozen(t.s, outputs, 1, o->export_path, t.st) != FLOE_OK) {
      rc = cli_error("train", "--export %s: %s", o->export_path, floe_status_message(t.st));
      goto out;
    }
    printf("exported the inference graph (input x, output logits) to %s\n", o->export_path);
  }
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  double wall = now_seconds() - t_start, rss_mb = (double)ru.ru_maxrss / 1024.0;
  double sps = train_secs > 0 ? (double)trained / train_secs : 0;
  if (o->profile) train_profile_sort(t.prof, t.num_prof);
  FloeTransferStats xs = {.struct_size = sizeof xs};
  floe_session_transfer_stats(t.s, &xs, NULL);
  FloeOptimizerOptions opt_defaults;
  floe_optimizer_options_init(&opt_defaults, o->optimizer);
  double lr = isnan(o->lr) ? opt_defaults.learning_rate : o->lr; /* the schedule's peak */
  if (o->json) {
    int bad_checksum = 0;
    JsonWriter w;
    json_init(&w, stdout);
    json_begin_object(&w);
    json_key(&w, "model"), json_string(&w, o->model);
    json_key(&w, "epochs"), json_int(&w, o->epochs);
    json_key(&w, "batch"), json_int(&w, o->batch);
    json_key(&w, "optimizer"), json_string(&w, o->optimizer_name);
    json_key(&w, "seed"), json_uint(&w, o->seed);
    json_key(&w, "lr_schedule"), json_string(&w, o->cosine ? "cosine" : "constant");
    json_key(&w, "lr"), json_double(&w, lr);
    json_key(&w, "input"), json_string(&w, o->queue ? "queue" : "feed");
    json_key(&w, "threads");
    if (o->threads) json_int(&w, o->threads);
    else json_null(&w); /* the runtime's default: FLOE_NUM_THREADS or every core */
    json_key(&w, "train_examples"), json_int(&w, n_train);
    json_key(&w, "test_examples"), json_int(&w, floe_dataset_size(t.test));
    json_key(&w, "global_step"), json_int(&w, global_step);
    json_key(&w, "samples_per_sec"), json_double(&w, sps);
    json_key(&w, "train_seconds"), json_double(&w, train_secs);
    json_key(&w, "test_accuracy"), json_double(&w, accuracy);
    json_key(&w, "final_loss"), json_double(&w, final_loss);
    json_key(&w, "wall_seconds"), json_double(&w, wall);
    json_key(&w, "peak_rss_mb"), json_double(&w, rss_mb);
    json_key(&w, "step_peak_tensor_mb"), json_double(&w, times.peak_bytes / 1048576.0);
    if (o->devices) {
      json_key(&w, "devices"), json_string(&w, o->devices);
      json_key(&w, "compress_transfers"), json_int(&w, o->compress);
      json_key(&w, "transfers"), json_int(&w, xs.transfers);
      json_key(&w, "transfer_wire_bytes"), json_int(&w, xs.wire_bytes);
      json_key(&w, "transfer_tensor_bytes"), json_int(&w, xs.tensor_bytes);
    }
    if (o->profile) {
      json_key(&w, "profile"), measure_profile_json(&w, t.prof, t.num_prof);
      json_key(&w, "breakdown"), measure_breakdown_json(&w, &t.bd);
    }
    json_key(&w, "steps"), json_int(&w, total_steps);
    json_key(&w, "step_time_p50_ms"), json_double(&w, train_step_times_quantile(&times, 0.5) * 1e3);
    json_key(&w, "step_time_p90_ms"), json_double(&w, train_step_times_quantile(&times, 0.9) * 1e3);
    if (o->cl.spec) {
      train_cluster_json(&w, &o->cl, total_steps, t.K, o->cl.sync ? stale_gradients(&t) : -1);
      bad_checksum = train_cluster_checksum_json(&w, &o->cl, t.s, &t.vars, "train");
      json_key(&w, "step_split_ms"), train_split_json(&w, &split);
    }
    if (o->trace) json_key(&w, "trace"), json_string(&w, o->trace);
    json_end_object(&w);
    json_finish(&w);
    if (bad_checksum) goto out; /* printed */
  } else {
    printf("test_accuracy %.4f samples/s %.0f wall_seconds %.1f peak_rss_mb %.0f\n",
           accuracy, sps, wall, rss_mb);
    if (o->devices)
      printf("across devices (%s%s): %lld values, %.1f MB moved (%.1f MB as f32 tensors)\n",
             o->devices, o->compress ? ", bf16 transfers" : "", (long long)xs.transfers,
             xs.wire_bytes / 1048576.0, xs.tensor_bytes / 1048576.0);
    if (o->profile) {
      train_profile_print(stderr, t.prof, t.num_prof, total_steps, train_secs);
      measure_breakdown_print(stderr, &t.bd);
    }
    if (o->trace) printf("trace of %lld training steps written to %s\n", (long long)total_steps,
                         o->trace);
  }
  if (o->cl.spec) train_cluster_finish(&t.o.cl); /* the others stop serving, not re-form */
  rc = 0;
out:
  if (updater.started && train_updater_stop(&updater, "train") && rc == 0) rc = 1;
  *reform = train_recoverable(rc, cluster_up, t.fatal);
  free(times.v);
  train_free(&t);
  return rc;
}

int cmd_train(int argc, char **argv) {
  for (int i = 1; i < argc; i++) /* the language model has its own options (train_lstm.c) */
    if ((!strcmp(argv[i], "--model") && i + 1 < argc && !strcmp(argv[i + 1], "lstm")) ||
        !strcmp(argv[i], "--model=lstm"))
      return cmd_train_lstm(argc, argv);
  return train_recovering(train_run, argc, argv);
}
