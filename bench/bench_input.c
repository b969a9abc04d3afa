/* SPDX-License-Identifier: Apache-2.0 */
/* bench_input.c - how much of the input time a queue-fed pipeline hides: the same epochs of
 * Fashion-MNIST trained five ways, side by side in one run, each repeated in rotation (the
 * medians are reported):
 *
 *   input_feed    the feed path's input alone: floe_batcher makes every batch, no training
 *   input_queue   the queue path's input alone: the runner thread fills the queue (readers,
 *                 conversion, enqueue) and the main thread only dequeues each batch
 *   train         the training steps alone, fed one batch made beforehand
 *   feed          floe train --input feed: make a batch, then train on it, in turn
 *   queue         floe train --input queue: the runner fills the queue while steps train
 *
 * With nothing hidden, feed ~ input_feed + train. hidden = (input_queue + train - queue) /
 * input_queue: the share of the queue path's input time that overlaps training (1: all of
 * it, 0: none; noise can push it past either end).
 *
 * --prep K adds simulated preprocessing to both inputs: K passes of Sqrt(Square(x)) over
 * every batch of images (2K element-wise ops), in the queue's pipeline (through
 * TrainInputSpec.preprocess) and, for the feed path, as a run of its own before each
 * training step, so the input is heavy enough for its hiding to stand out of the noise.
 *
 * Usage: bench_input [--model mlp|cnn] [--epochs N] [--batch N] [--limit N] [--repeats R]
 *                    [--prep K] [--data DIR]
 * Prints one JSON line. After the timed repeats, a few more steps of each mode, traced, give
 * its step breakdown (docs/benchmarks.md): "breakdown" in the JSON, one line per mode on
 * stderr. It covers one session's runs: the prep session's for input_feed (none without
 * --prep: null), the training
 * session's for the others (the batcher and the feed path's prep run are outside it; with a
 * queue, the runner's enqueue steps are runs of the same session and are counted too). The dataset is cut to whole batches so every mode trains on the same
 * number of examples.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <floe/floe.h>

#include "../tools/train_input.h"
#include "bench_util.h"

typedef struct Bench {
  int cnn, epochs, repeats, prep;
  FloeGraph *gp;        /* the feed path's preprocessing (--prep) */
  FloeSession *sp;
  int64_t batch, limit, n, steps_per_epoch;
  const char *data;
  FloeDataset *train;
  char *images, *labels;
  FloeGraph *gf, *gq;   /* fed placeholders / the queue pipeline */
  char loss_f[256], train_f[256], loss_q[256], train_q[256];
  FloeStatus *st;
} Bench;

static void die(Bench *b, const char *what) {
  fprintf(stderr, "bench_input: %s: %s\n", what, floe_status_message(b->st));
  exit(1);
}

/* floe train's models (tools/cmd_train.c), with its seeds. */
static FloeOutput model(FloeGraph *g, FloeOutput x, int cnn) {
  if (!cnn) {
    FloeOutput h = floe_layer_dense(g, "dense1", x, 512, FLOE_ACT_RELU, 65);
    h = floe_layer_dense(g, "dense2", h, 256, FLOE_ACT_RELU, 66);
    return floe_layer_dense(g, "dense3", h, 10, FLOE_ACT_NONE, 67);
  }
  FloeOutput h = floe_layer_conv2d(g, "conv1", x, 32, 5, 5, 1, "SAME", FLOE_ACT_RELU, 65);
  h = floe_layer_max_pool(g, "pool1", h, 2, 2, "VALID");
  h = floe_layer_conv2d(g, "conv2", h, 64, 5, 5, 1, "SAME", FLOE_ACT_RELU, 66);
  h = floe_layer_max_pool(g, "pool2", h, 2, 2, "VALID");
  h = floe_layer_flatten(g, "flatten", h);
  h = floe_layer_dense(g, "fc1", h, 1024, FLOE_ACT_RELU, 67);
  return floe_layer_dense(g, "fc2", h, 10, FLOE_ACT_NONE, 68);
}

/* The loss and train step of the model on (x, y), names into loss / train. */
static void training(FloeGraph *g, FloeOutput x, FloeOutput y, int cnn, char *loss, char *train) {
  FloeOutput l = floe_sparse_softmax_cross_entropy(g, "loss", model(g, x, cnn), y);
  FloeOptimizerOptions opt;
  floe_optimizer_options_init(&opt, FLOE_OPT_ADAM);
  FloeNode *step = floe_minimize(g, "train", l, &opt, NULL, 0);
  floe_variables_initializer(g, "init");
  if (floe_graph_status(g) != FLOE_OK) {
    fprintf(stderr, "bench_input: building: %s\n", floe_graph_error(g, NULL));
    exit(1);
  }
  snprintf(loss, 256, "%s", floe_node_name(l.node));
  snprintf(train, 256, "%s", floe_node_name(step));
}

/* K passes of Sqrt(Square(x)) (pixels are >= 0: the same values, give or take rounding). */
static FloeOutput preprocess(FloeGraph *g, FloeOutput x, void *arg) {
  int k = *(const int *)arg;
  for (int i = 0; i < k; i++) x = floe_unary(g, "Sqrt", NULL, floe_unary(g, "Square", NULL, x));
  return x;
}

/* The feed path's preprocessing of a batch (a new reference), or the batch itself. */
static FloeTensor *prep_batch(Bench *b, FloeTensor *im) {
  if (!b->prep) {
    floe_tensor_retain(im);
    return im;
  }
  FloeFeed f = {"px", im};
  const char *out = "prep";
  FloeTensor *t = NULL;
  if (floe_session_run(b->sp, &f, 1, &out, 1, NULL, 0, &t, b->st) != FLOE_OK) die(b, "prep");
  return t;
}

static void build(Bench *b) {
  const int64_t flat[2] = {-1, 784}, nhwc[4] = {-1, 28, 28, 1}, yd[1] = {-1};
  b->gf = floe_graph_new();
  FloeOutput x = floe_placeholder(b->gf, "x", FLOE_F32,
                                  b->cnn ? floe_shape_make(4, nhwc) : floe_shape_make(2, flat));
  FloeOutput y = floe_placeholder(b->gf, "y", FLOE_I64, floe_shape_make(1, yd));
  training(b->gf, x, y, b->cnn, b->loss_f, b->train_f);
  b->gp = floe_graph_new();
  FloeOutput px = floe_placeholder(b->gp, "px", FLOE_F32, floe_shape_unknown());
  floe_unary(b->gp, "Identity", "prep", preprocess(b->gp, px, &b->prep));
  if (!(b->sp = floe_session_new(b->gp, NULL, b->st))) die(b, "prep session");
  b->gq = floe_graph_new();
  TrainInputSpec in = {b->images, b->labels, b->cnn, b->batch, 1, b->n, b->epochs,
                       b->prep ? preprocess : NULL, &b->prep};
  train_input_build(b->gq, &in, &x, &y);
  training(b->gq, x, y, b->cnn, b->loss_q, b->train_q);
}

static FloeSession *session(Bench *b, FloeGraph *g) {
  FloeSession *s = floe_session_new(g, NULL, b->st);
  const char *init = "init";
  if (!s || floe_session_run(s, NULL, 0, NULL, 0, &init, 1, NULL, b->st) != FLOE_OK)
    die(b, "session");
  return s;
}

static void step(Bench *b, FloeSession *s, const FloeFeed *f, int nf, const char *loss,
                 const char *train) {
  FloeTensor *lv = NULL;
  if (floe_session_run(s, f, nf, &loss, 1, &train, 1, &lv, b->st) != FLOE_OK) die(b, "step");
  floe_tensor_release(lv);
}

static double input_feed(Bench *b, FloeBatcher *bt) {
  double t0 = bench_now();
  for (int e = 0; e < b->epochs; e++) {
    floe_batcher_start_epoch(bt, e, 0);
    FloeTensor *im, *lb;
    while (floe_batcher_next(bt, &im, &lb, b->st) == 1) {
      floe_tensor_release(prep_batch(b, im));
      floe_tensor_release(im);
      floe_tensor_release(lb);
    }
  }
  return bench_now() - t0;
}

/* queue-fed steps, or (train NULL) dequeues alone. */
static double queue_mode(Bench *b, int with_training) {
  FloeSession *s = session(b, b->gq);
  FloeTensor *n = floe_tensor_scalar_i32((int32_t)b->batch, NULL);
  FloeFeed f = {TRAIN_INPUT_COUNT, n};
  const char *labels = "input/batch:1";
  /* The readers load their files when seeking: not timed (the feed path's load is not). */
  FloeQueueRunner *qr = train_input_start(s, 0, 0, b->st);
  if (!qr) die(b, "runner");
  double t0 = bench_now();
  for (int64_t k = 0; k < b->epochs * b->steps_per_epoch; k++) {
    if (with_training) {
      step(b, s, &f, 1, b->loss_q, b->train_q);
    } else {
      FloeTensor *out = NULL;
      if (floe_session_run(s, &f, 1, &labels, 1, NULL, 0, &out, b->st) != FLOE_OK) die(b, "dequeue");
      floe_tensor_release(out);
    }
  }
  double t = bench_now() - t0;
  if (floe_queue_runner_stop(qr, b->st) != FLOE_OK) die(b, "runner");
  floe_queue_runner_free(qr);
  floe_tensor_release(n);
  floe_session_free(s);
  return t;
}

/* feed-fed steps, or (fixed) the same pre-made batch every step. */
static double feed_mode(Bench *b, FloeBatcher *bt, int fixed) {
  FloeSession *s = session(b, b->gf);
  FloeTensor *im0, *lb0;
  floe_batcher_start_epoch(bt, 0, 0);
  if (floe_batcher_next(bt, &im0, &lb0, b->st) != 1) die(b, "batcher");
  double t0 = bench_now();
  for (int e = 0; e < b->epochs; e++) {
    floe_batcher_start_epoch(bt, e, 0);
    for (int64_t k = 0; k < b->steps_per_epoch; k++) {
      FloeTensor *im = im0, *lb = lb0, *x = im0;
      if (!fixed) {
        if (floe_batcher_next(bt, &im, &lb, b->st) != 1) die(b, "batcher");
        x = prep_batch(b, im);
      }
      FloeFeed f[2] = {{"x", x}, {"y", lb}};
      step(b, s, f, 2, b->loss_f, b->train_f);
      if (!fixed) {
        floe_tensor_release(x);
        floe_tensor_release(im);
        floe_tensor_release(lb);
      }
    }
  }
  double t = bench_now() - t0;
  floe_tensor_release(im0);
  floe_tensor_release(lb0);
  floe_session_free(s);
  return t;
}

/* One step of a mode, for its breakdown (see the top). */
typedef struct ModeStep {
  Bench *b;
  FloeBatcher *bt;
  FloeSession *s;
  int mode;
  FloeTensor *im0, *lb0, *count;
} ModeStep;

static void next_batch(ModeStep *m, FloeTensor **im, FloeTensor **lb) {
  int r = floe_batcher_next(m->bt, im, lb, m->b->st);
  if (r == 0) { /* the epoch ran out: start another */
    floe_batcher_start_epoch(m->bt, 0, 0);
    r = floe_batcher_next(m->bt, im, lb, m->b->st);
  }
  if (r != 1) die(m->b, "batcher");
}

static int mode_step(void *arg) {
  ModeStep *m = arg;
  Bench *b = m->b;
  FloeTensor *im, *lb;
  if (m->mode == 0 || m->mode == 3) { /* input_feed, feed */
    next_batch(m, &im, &lb);
    FloeTensor *x = prep_batch(b, im);
    if (m->mode == 3) {
      FloeFeed f[2] = {{"x", x}, {"y", lb}};
      step(b, m->s, f, 2, b->loss_f, b->train_f);
    }
    floe_tensor_release(x);
    floe_tensor_release(im);
    floe_tensor_release(lb);
  } else if (m->mode == 2) { /* train */
    FloeFeed f[2] = {{"x", m->im0}, {"y", m->lb0}};
    step(b, m->s, f, 2, b->loss_f, b->train_f);
  } else { /* input_queue, queue */
    FloeFeed f = {TRAIN_INPUT_COUNT, m->count};
    const char *labels = "input/batch:1";
    if (m->mode == 4) {
      step(b, m->s, &f, 1, b->loss_q, b->train_q);
    } else {
      FloeTensor *out = NULL;
      if (floe_session_run(m->s, &f, 1, &labels, 1, NULL, 0, &out, b->st) != FLOE_OK)
        die(b, "dequeue");
      floe_tensor_release(out);
    }
  }
  return 0;
}

/* A mode's breakdown: one untraced step (the executor is built), then up to 3 traced. */
static void mode_breakdown(Bench *b, FloeBatcher *bt, int mode, FloeStepBreakdown *bd) {
  ModeStep m = {b, bt, NULL, mode, NULL, NULL, NULL};
  FloeQueueRunner *qr = NULL;
  int64_t total = b->epochs * b->steps_per_epoch, traced = total >= 4 ? 3 : total - 1;
  if (traced < 1) traced = 1;
  floe_batcher_start_epoch(bt, 0, 0);
  if (mode == 0) {
    m.s = b->sp;
  } else if (mode == 1 || mode == 4) {
    m.s = session(b, b->gq);
    m.count = floe_tensor_scalar_i32((int32_t)b->batch, NULL);
    if (!(qr = train_input_start(m.s, 0, 0, b->st))) die(b, "runner");
  } else {
    m.s = session(b, b->gf);
    next_batch(&m, &m.im0, &m.lb0);
  }
  if (total > traced) mode_step(&m);
  if (bench_breakdown(m.s, mode_step, &m, (int)traced, bd)) exit(1);
  if (qr) {
    if (floe_queue_runner_stop(qr, b->st) != FLOE_OK) die(b, "runner");
    floe_queue_runner_free(qr);
  }
  floe_tensor_release(m.count);
  floe_tensor_release(m.im0);
  floe_tensor_release(m.lb0);
  if (m.s != b->sp) floe_session_free(m.s);
}

int main(int argc, char **argv) {
  Bench b = {.epochs = 1, .repeats = 3, .batch = 64};
  static const struct option opts[] = {
      {"model", required_argument, NULL, 'm'}, {"epochs", required_argument, NULL, 'e'},
      {"batch", required_argument, NULL, 'b'}, {"limit", required_argument, NULL, 'l'},
      {"repeats", required_argument, NULL, 'r'}, {"data", required_argument, NULL, 'd'},
      {"prep", required_argument, NULL, 'p'},
      {NULL, 0, NULL, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
      case 'm': b.cnn = strcmp(optarg, "cnn") == 0; break;
      case 'e': b.epochs = atoi(optarg); break;
      case 'b': b.batch = atoll(optarg); break;
      case 'l': b.limit = atoll(optarg); break;
      case 'r': b.repeats = atoi(optarg); break;
      case 'd': b.data = optarg; break;
      case 'p': b.prep = atoi(optarg); break;
      default:
        fprintf(stderr, "usage: bench_input [--model mlp|cnn] [--epochs N] [--batch N] "
                        "[--limit N] [--repeats R] [--prep K] [--data DIR]\n");
        return 2;
    }
  }
  if (b.epochs < 1 || b.batch < 1 || b.repeats < 1 || b.prep < 0) return 2;
  b.st = floe_status_new();
  if (!(b.train = floe_fashion_mnist_load(b.data, 1, b.st))) die(&b, "dataset");
  if (floe_fashion_mnist_files(b.data, 1, &b.images, &b.labels, b.st) != FLOE_OK) die(&b, "files");
  b.n = floe_dataset_size(b.train);
  if (b.limit > 0 && b.limit < b.n) b.n = b.limit;
  b.n -= b.n % b.batch; /* whole batches only */
  if (b.n == 0) return 2;
  floe_dataset_truncate(b.train, b.n);
  b.steps_per_epoch = b.n / b.batch;
  FloeBatcher *bt = floe_batcher_new(b.train, b.batch, 1, 1, b.cnn, 0, b.st);
  if (!bt) die(&b, "batcher");
  build(&b);
  enum { MODES = 5 };
  static const char *const names[MODES] = {"input_feed", "input_queue", "train", "feed", "queue"};
  double *t[MODES];
  for (int m = 0; m < MODES; m++) t[m] = calloc((size_t)b.repeats, sizeof(double));
  /* Each repeat starts at another mode, so no mode always follows the same one. */
  for (int r = 0; r < b.repeats; r++)
    for (int k = 0; k < MODES; k++) {
      int m = (r + k) % MODES;
      t[m][r] = m == 0   ? input_feed(&b, bt)
                : m == 1 ? queue_mode(&b, 0)
                : m == 2 ? feed_mode(&b, bt, 1)
                : m == 3 ? feed_mode(&b, bt, 0)
                         : queue_mode(&b, 1);
    }
  double med[MODES], lo[MODES];
  for (int m = 0; m < MODES; m++) {
    med[m] = bench_median(t[m], b.repeats); /* sorts: t[m][0] is the fastest */
    lo[m] = t[m][0];
  }
  /* Where each mode's steps take their time, from a few more steps, traced. */
  FloeStepBreakdown bd[MODES];
  for (int m = 0; m < MODES; m++)
    if (m > 0 || b.prep) mode_breakdown(&b, bt, m, &bd[m]); /* input_feed: no runs without --prep */
  double examples = (double)b.n * b.epochs;
  printf("{\"model\":\"%s\",\"batch\":%lld,\"examples\":%.0f,\"repeats\":%d,\"prep\":%d",
         b.cnn ? "cnn" : "mlp", (long long)b.batch, examples, b.repeats, b.prep);
  for (int m = 0; m < MODES; m++) printf(",\"%s_s\":%.4f,\"%s_min_s\":%.4f", names[m], med[m], names[m], lo[m]);
  printf(",\"feed_samples_per_sec\":%.0f,\"queue_samples_per_sec\":%.0f", examples / med[3],
         examples / med[4]);
  printf(",\"hidden\":%.3f,\"hidden_min\":%.3f", (med[1] + med[2] - med[4]) / med[1],
         (lo[1] + lo[2] - lo[4]) / lo[1]);
  printf(",\"breakdown\":{");
  for (int m = 0; m < MODES; m++) {
    printf("%s\"%s\":", m ? "," : "", names[m]);
    if (m > 0 || b.prep) bench_breakdown_json(stdout, &bd[m]);
    else printf("null");
  }
  printf("}}\n");
  fflush(stdout);
  for (int m = 0; m < MODES; m++) {
    char what[64];
    snprintf(what, sizeof what, "%s (traced)", names[m]);
    if (m > 0 || b.prep) bench_breakdown_print(stderr, what, &bd[m]);
    else fprintf(stderr, "%s: no session steps without --prep\n", names[m]);
  }
  for (int m = 0; m < MODES; m++) free(t[m]);
  floe_batcher_free(bt);
  floe_graph_free(b.gf);
  floe_graph_free(b.gq);
  floe_session_free(b.sp);
  floe_graph_free(b.gp);
  floe_dataset_free(b.train);
  free(b.images);
  free(b.labels);
  floe_status_free(b.st);
  return 0;
}
