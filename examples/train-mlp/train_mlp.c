/* SPDX-License-Identifier: Apache-2.0 */
/* train_mlp.c - train a 784-128-10 perceptron on Fashion-MNIST with Floe's C API.
 *
 * What it shows: variables with initialisers, a loss, floe_minimize with Adam and a cosine
 * learning-rate schedule, batches from the IDX reader and the deterministic batcher, a
 * safetensors checkpoint after every epoch, and --resume from the newest one, which carries
 * on exactly where an uninterrupted run would be (same weights, optimiser slots, global step,
 * learning rate and batch order).
 *
 *   cc train_mlp.c -o train_mlp $(pkg-config --cflags --libs floe)
 *   ./train_mlp --epochs 2 --stop-after 1   # one epoch, checkpoint in ./checkpoints
 *   ./train_mlp --epochs 2 --resume         # the second epoch, from that checkpoint
 */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

/* README:begin */
#include <floe/floe.h> /* cc app.c $(pkg-config --cflags --libs floe) */
#include <stdio.h>

/* A fully connected layer: x [batch, in] -> x W + b [batch, out], ReLU'd when relu != 0.
 * Its variables are "<name>/kernel" (Glorot uniform from seed) and "<name>/bias" (zeros). */
static FloeOutput dense(FloeGraph *g, const char *name, FloeOutput x, int64_t in, int64_t out,
                        int relu, int64_t seed) {
  char kname[64], bname[64];
  snprintf(kname, sizeof kname, "%s/kernel", name);
  snprintf(bname, sizeof bname, "%s/bias", name);
  FloeVariable w = floe_variable(g, kname, FLOE_F32, floe_shape_make(2, (int64_t[]){in, out}),
                                 floe_init_glorot_uniform(seed));
  FloeVariable b = floe_variable(g, bname, FLOE_F32, floe_shape_make(1, (int64_t[]){out}),
                                 floe_init_zeros());
  FloeOutput y = floe_binary(g, "BiasAdd", NULL, floe_matmul(g, NULL, x, w.value, 0, 0), b.value);
  return relu ? floe_unary(g, "Relu", NULL, y) : y;
}

/* The training graph: placeholders "x" (images) and "y" (labels), "logits", the mean
 * cross-entropy "loss", the update step "train" and the initialiser "init". Caller frees the
 * graph; NULL with st set on error (no checks are needed until the end: the first error is
 * kept in the graph and later calls do nothing). */
static FloeGraph *build_graph(int64_t hidden, int64_t seed, const FloeOptimizerOptions *opt,
                              FloeStatus *st) {
  FloeGraph *g = floe_graph_new();
  if (!g) {
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
    return NULL;
  }
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(2, (int64_t[]){-1, 784}));
  FloeOutput y = floe_placeholder(g, "y", FLOE_I64, floe_shape_make(1, (int64_t[]){-1}));
  FloeOutput h = dense(g, "hidden", x, 784, hidden, 1, seed);
  FloeOutput z = dense(g, "out", h, hidden, 10, 0, seed + 1);
  FloeOutput logits = floe_unary(g, "Identity", "logits", z);
  FloeOutput xent = floe_sparse_softmax_cross_entropy(g, "xent", logits, y);
  FloeOutput loss = floe_unary(g, "Identity", "loss", xent);
  floe_minimize(g, "train", loss, opt, NULL, 0); /* every trainable variable */
  floe_variables_initializer(g, "init");
  if (floe_graph_status(g) != FLOE_OK) {
    floe_graph_error(g, st); /* copies the message, which names the node */
    floe_graph_free(g);
    return NULL;
  }
  return g;
}

/* One training step on a batch: fetches the loss, runs "train" for its updates. */
static floe_code train_step(FloeSession *s, FloeTensor *images, FloeTensor *labels, float *loss,
                            FloeStatus *st) {
  FloeFeed feeds[2] = {{"x", images}, {"y", labels}};
  const char *fetch = "loss", *target = "train";
  FloeTensor *out = NULL;
  if (floe_session_run(s, feeds, 2, &fetch, 1, &target, 1, &out, st) != FLOE_OK)
    return floe_status_code(st); /* the message names the failing node */
  *loss = *(const float *)floe_tensor_data(out);
  floe_tensor_release(out);
  return FLOE_OK;
}
/* README:end */

typedef struct Options {
  int epochs;          /* planned epochs: the learning rate decays to 0 over them */
  int stop_after;      /* end after this epoch (0: run all), to resume later */
  int64_t limit;       /* training examples used (the first ones); 0: all 60000 */
  int64_t batch;
  int64_t hidden;
  int64_t seed;        /* weights and the order of the batches */
  const char *ckpt_dir;
  int resume;
  const char *data;    /* NULL: Debian's /usr/share/datasets/fashion-mnist */
} Options;

/* The share of the test set whose largest logit is the label; -1 with st set on error. */
static double evaluate(FloeSession *s, FloeBatcher *test, FloeStatus *st) {
  int64_t correct = 0, total = 0;
  FloeTensor *images, *labels;
  int r;
  floe_batcher_start_epoch(test, 0, 0);
  while ((r = floe_batcher_next(test, &images, &labels, st)) == 1) {
    FloeFeed feed = {"x", images};
    const char *fetch = "logits";
    FloeTensor *logits = NULL;
    floe_code rc = floe_session_run(s, &feed, 1, &fetch, 1, NULL, 0, &logits, st);
    if (rc == FLOE_OK) {
      const float *z = floe_tensor_data(logits); /* [n, 10] */
      const int64_t *y = floe_tensor_data(labels);
      int64_t n = floe_tensor_dim(logits, 0);
      for (int64_t i = 0; i < n; i++) {
        int best = 0;
        for (int c = 1; c < 10; c++)
          if (z[i * 10 + c] > z[i * 10 + best]) best = c;
        correct += best == y[i];
      }
      total += n;
    }
    floe_tensor_release(logits);
    floe_tensor_release(images);
    floe_tensor_release(labels);
    if (rc != FLOE_OK) return -1;
  }
  if (r < 0) return -1;
  return total ? (double)correct / (double)total : 0.0;
}

/* The global step's value after the last run; -1 with st set on error. */
static int64_t global_step(FloeSession *s, FloeStatus *st) {
  const char *fetch = "global_step/read";
  FloeTensor *v = NULL;
  if (floe_session_run(s, NULL, 0, &fetch, 1, NULL, 0, &v, st) != FLOE_OK) return -1;
  int64_t step = *(const int64_t *)floe_tensor_data(v);
  floe_tensor_release(v);
  return step;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: train_mlp [--epochs N] [--stop-after K] [--limit N] [--batch N] [--hidden N]\n"
          "                 [--seed S] [--checkpoint-dir DIR] [--resume] [--data DIR]\n"
          "  --epochs N           planned epochs (default 2); the learning rate decays over them\n"
          "  --stop-after K       end after epoch K (resume later with --resume)\n"
          "  --limit N            train on the first N examples (default 10000; 0: all 60000)\n"
          "  --checkpoint-dir DIR safetensors checkpoints after every epoch (default checkpoints)\n"
          "  --resume             continue from the newest checkpoint in DIR\n"
          "  --data DIR           Fashion-MNIST's IDX files (default: Debian's dataset package)\n");
}

/* Parses argv into o; 0 to go on, 1 for a usage error, -1 after --help. */
static int parse_options(int argc, char **argv, Options *o) {
  static const struct option longs[] = {
      {"epochs", required_argument, NULL, 'e'}, {"stop-after", required_argument, NULL, 'k'},
      {"limit", required_argument, NULL, 'l'},  {"batch", required_argument, NULL, 'b'},
      {"hidden", required_argument, NULL, 'H'}, {"seed", required_argument, NULL, 's'},
      {"checkpoint-dir", required_argument, NULL, 'c'}, {"resume", no_argument, NULL, 'r'},
      {"data", required_argument, NULL, 'd'},   {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  *o = (Options){.epochs = 2, .limit = 10000, .batch = 64, .hidden = 128, .seed = 1,
                 .ckpt_dir = "checkpoints"};
  int c;
  while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
    switch (c) {
      case 'e': o->epochs = atoi(optarg); break;
      case 'k': o->stop_after = atoi(optarg); break;
      case 'l': o->limit = atoll(optarg); break;
      case 'b': o->batch = atoll(optarg); break;
      case 'H': o->hidden = atoll(optarg); break;
      case 's': o->seed = atoll(optarg); break;
      case 'c': o->ckpt_dir = optarg; break;
      case 'r': o->resume = 1; break;
      case 'd': o->data = optarg; break;
      case 'h': usage(stdout); return -1;
      default: usage(stderr); return 1;
    }
  }
  if (optind < argc || o->epochs < 1 || o->stop_after < 0 || o->stop_after > o->epochs ||
      o->limit < 0 || o->batch < 1 || o->hidden < 1) {
    fprintf(stderr, "train_mlp: bad arguments\n");
    usage(stderr);
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  Options o;
  int rc = parse_options(argc, argv, &o);
  if (rc) return rc < 0 ? 0 : 2;
  rc = 1;
  FloeDataset *train_set = NULL, *test_set = NULL;
  FloeBatcher *batches = NULL, *test_batches = NULL;
  FloeGraph *g = NULL;
  FloeSession *s = NULL;
  FloeStatus *st = floe_status_new();
  if (!st) {
    fprintf(stderr, "train_mlp: out of memory\n");
    return 1;
  }

  /* Data: the IDX files, pixels scaled to [0, 1] by the batchers. The training batches are
   * shuffled by (seed, epoch), so epoch e has the same order in every run. */
  if (!(train_set = floe_fashion_mnist_load(o.data, 1, st)) ||
      !(test_set = floe_fashion_mnist_load(o.data, 0, st)))
    goto fail;
  if (o.limit) floe_dataset_truncate(train_set, o.limit);
  if (!(batches = floe_batcher_new(train_set, o.batch, 1, (uint64_t)o.seed, 0, 0, st)) ||
      !(test_batches = floe_batcher_new(test_set, 1000, 0, 0, 0, 0, st)))
    goto fail;
  int64_t per_epoch = floe_batcher_num_batches(batches);

  /* Adam, its learning rate following a cosine from 1e-3 down to 0 over the planned steps.
   * The schedule reads the global step, which checkpoints keep. */
  FloeOptimizerOptions opt;
  floe_optimizer_options_init(&opt, FLOE_OPT_ADAM);
  opt.schedule = FLOE_LR_COSINE;
  opt.decay_steps = o.epochs * per_epoch;
  if (!(g = build_graph(o.hidden, o.seed, &opt, st))) goto fail;

  /* A session on the default runtime (plugins from FLOE_PLUGIN_PATH and the installed
   * folder); then initialise every variable, optimiser slots and global step included. */
  if (!(s = floe_session_new(g, NULL, st))) goto fail;
  const char *init = "init";
  if (floe_session_run(s, NULL, 0, NULL, 0, &init, 1, NULL, st) != FLOE_OK) goto fail;

  int64_t step = 0;
  if (o.resume) {
    char *path = floe_checkpoint_latest(o.ckpt_dir, NULL, st);
    if (!path && floe_status_code(st) != FLOE_NOT_FOUND) goto fail;
    if (!path) {
      printf("no checkpoint in %s: starting from scratch\n", o.ckpt_dir);
    } else {
      /* Every variable, or none: a wrong shape or a damaged file changes nothing. */
      floe_code c = floe_checkpoint_restore(s, path, &step, st);
      if (c == FLOE_OK) printf("resumed from %s at step %lld\n", path, (long long)step);
      free(path);
      if (c != FLOE_OK) goto fail;
    }
  }

  int last = o.stop_after ? o.stop_after : o.epochs;
  if (step >= last * per_epoch)
    printf("step %lld: epoch %d is already done\n", (long long)step, last);
  for (int64_t e = step / per_epoch; e < last; e++) {
    /* Checkpoints are written at the ends of epochs, so a resumed run starts one. */
    floe_batcher_start_epoch(batches, e, step % per_epoch);
    double loss_sum = 0;
    int64_t n = 0;
    FloeTensor *images, *labels;
    int r;
    while ((r = floe_batcher_next(batches, &images, &labels, st)) == 1) {
      float loss = 0;
      floe_code c = train_step(s, images, labels, &loss, st);
      floe_tensor_release(images);
      floe_tensor_release(labels);
      if (c != FLOE_OK) goto fail;
      loss_sum += loss;
      n++;
    }
    if (r < 0) goto fail;
    if ((step = global_step(s, st)) < 0) goto fail;
    double acc = evaluate(s, test_batches, st);
    if (acc < 0) goto fail;
    char *path = NULL;
    if (floe_checkpoint_save(s, o.ckpt_dir, NULL, step, 3, &path, st) != FLOE_OK) goto fail;
    printf("epoch %lld/%d step %lld loss %.6f test accuracy %.4f checkpoint %s\n",
           (long long)e + 1, o.epochs, (long long)step, n ? loss_sum / (double)n : 0.0, acc, path);
    free(path);
  }
  rc = 0;
  goto out;

fail:
  fprintf(stderr, "train_mlp: %s\n", floe_status_message(st));
out:
  floe_session_free(s);
  floe_graph_free(g);
  floe_batcher_free(batches);
  floe_batcher_free(test_batches);
  floe_dataset_free(train_set);
  floe_dataset_free(test_set);
  floe_status_free(st);
  return rc;
}
