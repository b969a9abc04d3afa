/* SPDX-License-Identifier: Apache-2.0 */
/* bench_dynamic_rnn.c - memory and step time of one LSTM training step, dynamic vs unrolled.
 *
 * (a) dynamic: floe_dynamic_lstm (a while loop) with the batch's real lengths: it runs
 *     max(lengths) iterations, each on the rows still inside their sequence;
 * (b) unrolled: the same cell (same weights, same fused option) built T = max_len times in a
 *     plain C loop over Gather(x, t), with masks so the results equal (a)'s: a row past its
 *     length keeps its state and outputs zeros.
 * Both train one step: loss = (0.5 * sum((outputs - y)^2) + sum(h_T * c_T)) / B (h_T, c_T:
 * each row's state after its last step), gradients through the whole
 * sequence, one SGD update of the cell's weights (see sgd()). One fixed batch of B rows
 * with mixed lengths (real fortune lengths or uniform in [5, T]), sorted longest first.
 *
 * In one process the two variants alternate (warm-ups, then --reps rounds, the order
 * rotating), giving median step times, the loss of every step of each (they train in
 * lockstep from the same weights on the same batch, so equal losses step after step mean
 * equal forward and backward passes), and each step's tensor peak: the high-water mark of
 * live tensor bytes (floe_memory_stats) above what was alive when the step started. Then
 * each variant runs alone in a child process (this program re-executed) that reports its
 * peak RSS (VmHWM, reset through /proc/self/clear_refs once the data is loaded) minus the
 * RSS before its graph was built. Before that, 3 more steps of each variant, traced, give its
 * step breakdown (docs/benchmarks.md; they train on, after the losses above were taken).
 *
 *   bench_dynamic_rnn [--batch B] [--input I] [--hidden H] [--max-len T]
 *                     [--lengths fortunes|uniform] [--data DIR] [--fused always|never]
 *                     [--reps N] [--rss-steps N] [--seed S] [--lr X] [--profile] [--json]
 */
#define _GNU_SOURCE
#include <floe/floe.h>

#include "bench_util.h"
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

enum { DYNAMIC, UNROLLED, VARIANTS };
static const char *const variant_name[VARIANTS] = {"dynamic", "unrolled"};

typedef struct Config {
  int64_t batch, input, hidden, max_len;
  int fortunes;        /* lengths from fortune pieces (else uniform in [5, max_len]) */
  int reps, rss_steps, json, profile;
  FloeLSTMFused fused;
  int project;         /* floe_dynamic_lstm's project_inputs */
  uint64_t seed;
  double lr;
  const char *data;    /* fortune folder; NULL: the installed one */
} Config;

typedef struct Batch {
  int32_t *lengths;    /* [B], longest first */
  FloeTensor *x, *y, *len; /* x [T,B,I], y [T,B,H] (zeros past each length), len i32 [B] */
  int64_t pieces;      /* fortune pieces in the split (0: uniform) */
  double pieces_mean, pieces_at_max; /* their mean length, share of length max_len */
} Batch;

typedef struct Model {
  FloeGraph *g;
  FloeSession *s;
  char loss[160], train[160];
  int nodes;
} Model;

static FloeStatus *st;

static void die(const char *what, const char *msg) {
  fprintf(stderr, "bench_dynamic_rnn: %s: %s\n", what, msg);
  exit(1);
}

static uint32_t lcg(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(*s >> 33);
}

static double unit(uint64_t *s) { return lcg(s) * (1.0 / 2147483648.0); } /* [0, 1) */

static int cmp_desc(const void *a, const void *b) {
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  return (x < y) - (x > y);
}

/* The lengths of the first shuffled batch of fortune pieces (and the split's piece stats). */
static void fortune_lengths(const Config *c, Batch *bt) {
  FloeTextCorpus *corpus = floe_text_load_dir(c->data, 10000, 10, st);
  if (!corpus) die("fortunes", floe_status_message(st));
  int64_t nf;
  const int64_t *off = floe_text_fortunes(corpus, FLOE_TEXT_TRAIN, &nf);
  int64_t pieces = 0, ids = 0, at_max = 0;
  for (int64_t k = 0; k < nf; k++) { /* n (input, target) pairs cut into max_len pieces */
    int64_t n = off[k + 1] - off[k];
    pieces += (n + c->max_len - 1) / c->max_len;
    at_max += n / c->max_len;
    ids += n;
  }
  bt->pieces = pieces;
  bt->pieces_mean = (double)ids / (double)pieces;
  bt->pieces_at_max = (double)at_max / (double)pieces;
  FloeTextSequences *sq = floe_text_sequences_new(
      corpus, FLOE_TEXT_TRAIN, c->batch, c->max_len,
      FLOE_TEXT_SHUFFLE | FLOE_TEXT_PAD_TO_MAX | FLOE_TEXT_DROP_REMAINDER, c->seed, st);
  if (!sq) die("fortune sequences", floe_status_message(st));
  FloeTensor *tok, *len;
  if (floe_text_sequences_next(sq, &tok, &len, st) != 1)
    die("fortune batch", floe_status_message(st));
  memcpy(bt->lengths, floe_tensor_data(len), (size_t)c->batch * sizeof(int32_t));
  floe_tensor_release(tok);
  floe_tensor_release(len);
  floe_text_sequences_free(sq);
  floe_text_corpus_free(corpus);
}

static FloeTensor *tensor(FloeDType dt, int rank, const int64_t *dims) {
  FloeTensor *t = floe_tensor_new(dt, rank, dims, st);
  if (!t) die("tensor", floe_status_message(st));
  return t;
}

static void batch_make(const Config *c, Batch *bt) {
  int64_t B = c->batch, T = c->max_len, I = c->input, H = c->hidden;
  memset(bt, 0, sizeof *bt);
  bt->lengths = malloc((size_t)B * sizeof(int32_t));
  if (!bt->lengths) die("batch", "out of memory");
  uint64_t s = c->seed;
  if (c->fortunes)
    fortune_lengths(c, bt);
  else
    for (int64_t r = 0; r < B; r++) bt->lengths[r] = 5 + (int32_t)(lcg(&s) % (uint32_t)(T - 4));
  qsort(bt->lengths, (size_t)B, sizeof(int32_t), cmp_desc);
  const int64_t dx[3] = {T, B, I}, dy[3] = {T, B, H};
  bt->x = tensor(FLOE_F32, 3, dx);
  bt->y = tensor(FLOE_F32, 3, dy);
  bt->len = tensor(FLOE_I32, 1, &B);
  memcpy(floe_tensor_data(bt->len), bt->lengths, (size_t)B * sizeof(int32_t));
  float *x = floe_tensor_data(bt->x), *y = floe_tensor_data(bt->y);
  for (int64_t t = 0; t < T; t++)
    for (int64_t r = 0; r < B; r++) {
      int in = t < bt->lengths[r];
      for (int64_t k = 0; k < I; k++) x[(t * B + r) * I + k] = in ? (float)(2 * unit(&s) - 1) : 0;
      for (int64_t k = 0; k < H; k++) y[(t * B + r) * H + k] = in ? (float)(unit(&s) - 0.5) : 0;
    }
}

static void batch_free(Batch *bt) {
  floe_tensor_release(bt->x);
  floe_tensor_release(bt->y);
  floe_tensor_release(bt->len);
  free(bt->lengths);
}

static FloeOutput i32_const(FloeGraph *g, int rank, const int64_t *dims, const int32_t *v) {
  int64_t n = 1;
  for (int i = 0; i < rank; i++) n *= dims[i];
  FloeTensor *t = floe_tensor_from_data(FLOE_I32, rank, dims, v, (size_t)n * sizeof *v, st);
  if (!t) die("constant", floe_status_message(st));
  FloeOutput o = floe_const(g, NULL, t);
  floe_tensor_release(t);
  return o;
}

static FloeOutput i32_scalar(FloeGraph *g, int32_t v) { return i32_const(g, 0, NULL, &v); }

static FloeOutput op2(FloeGraph *g, const char *op, FloeOutput a, FloeOutput b) {
  FloeNodeBuilder *nb = floe_node_begin(g, op, NULL);
  floe_node_add_input(nb, a);
  floe_node_add_input(nb, b);
  return floe_out(floe_node_finish(nb), 0);
}

/* The unrolled LSTM: outputs [T, B, H] equal to floe_dynamic_lstm's (a row past its length
 * keeps its state, its outputs are zeros). */
static FloeOutput unrolled_lstm(FloeGraph *g, const Config *c, FloeOutput x, FloeOutput len,
                                FloeLSTMState s, FloeOutput w, FloeOutput b,
                                const FloeLSTMOptions *o, FloeLSTMState *final) {
  FloeOutput *outs = malloc((size_t)c->max_len * sizeof *outs);
  if (!outs) die("graph", "out of memory");
  const int64_t d2[1] = {2};
  FloeOutput col = i32_const(g, 1, d2, (const int32_t[]){(int32_t)c->batch, 1});
  FloeOutput one = floe_const_f32(g, NULL, 1.0f);
  for (int64_t t = 0; t < c->max_len; t++) {
    FloeOutput xt = op2(g, "Gather", x, i32_scalar(g, (int32_t)t)); /* [B, I] */
    FloeNodeBuilder *nb = floe_node_begin(g, "Cast", NULL);
    floe_node_add_input(nb, floe_binary(g, "Greater", NULL, len, i32_scalar(g, (int32_t)t)));
    floe_node_set_attr_type(nb, "DstT", FLOE_F32);
    FloeOutput m = op2(g, "Reshape", floe_out(floe_node_finish(nb), 0), col); /* [B, 1] */
    FloeOutput keep = floe_binary(g, "Sub", NULL, one, m);
    FloeLSTMState n = floe_lstm_cell(g, "cell", xt, s, w, b, o);
    FloeOutput out = floe_binary(g, "Mul", NULL, m, n.h);
    s.h = floe_binary(g, "Add", NULL, out, floe_binary(g, "Mul", NULL, keep, s.h));
    s.c = floe_binary(g, "Add", NULL, floe_binary(g, "Mul", NULL, m, n.c),
                      floe_binary(g, "Mul", NULL, keep, s.c));
    nb = floe_node_begin(g, "ExpandDims", NULL);
    floe_node_add_input(nb, out);
    floe_node_set_attr_int(nb, "axis", 0);
    outs[t] = floe_out(floe_node_finish(nb), 0); /* [1, B, H] */
  }
  *final = s;
  FloeNodeBuilder *nb = floe_node_begin(g, "Concat", NULL);
  floe_node_add_input_list(nb, outs, (int)c->max_len);
  floe_node_add_input(nb, i32_scalar(g, 0));
  free(outs);
  return floe_out(floe_node_finish(nb), 0);
}

/* loss's gradients at w and b and one SGD update of both, after the loss and both
 * gradients (so every read of w and b in the step sees the values from before it). Built by
 * hand: floe_minimize orders an update after every node fed by a read of its variable,
 * which includes the loop's Enter of it, and a control edge out of a loop frame is refused
 * when the step runs ("... has a control input from 'rnn/invariant_4' in another loop
 * frame"). Returns the NoOp to run. */
static FloeNode *sgd(FloeGraph *g, FloeOutput loss, const FloeVariable *w,
                     const FloeVariable *b, double lr) {
  FloeOutput xs[2] = {w->value, b->value}, d[2];
  if (floe_gradients(g, &loss, 1, xs, 2, NULL, d, st) != FLOE_OK)
    die("gradients", floe_status_message(st));
  if (!d[0].node || !d[1].node) die("gradients", "the loss does not depend on the weights");
  const FloeVariable *v[2] = {w, b};
  FloeNode *upd[2];
  for (int k = 0; k < 2; k++) {
    FloeOutput step = floe_binary(g, "Mul", NULL, d[k], floe_const_f32(g, NULL, (float)lr));
    FloeNodeBuilder *nb = floe_node_begin(g, "Identity", NULL);
    floe_node_add_input(nb, step);
    floe_node_add_control_input(nb, loss.node);
    floe_node_add_control_input(nb, d[0].node);
    floe_node_add_control_input(nb, d[1].node);
    upd[k] = floe_assign_sub(g, NULL, v[k]->handle, floe_out(floe_node_finish(nb), 0));
  }
  FloeNodeBuilder *nb = floe_node_begin(g, "NoOp", "train");
  floe_node_add_control_input(nb, upd[0]);
  floe_node_add_control_input(nb, upd[1]);
  return floe_node_finish(nb);
}

static void model_build(Model *m, const Config *c, int variant) {
  FloeGraph *g = m->g = floe_graph_new();
  if (!g) die("graph", "out of memory");
  const int64_t dx[3] = {c->max_len, c->batch, c->input};
  const int64_t dy[3] = {c->max_len, c->batch, c->hidden}, ds[2] = {c->batch, c->hidden};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(3, dx));
  FloeOutput y = floe_placeholder(g, "y", FLOE_F32, floe_shape_make(3, dy));
  FloeOutput len = floe_placeholder(g, "lengths", FLOE_I32, floe_shape_make(1, &c->batch));
  FloeTensor *z = tensor(FLOE_F32, 2, ds);
  memset(floe_tensor_data(z), 0, floe_tensor_nbytes(z));
  FloeOutput zero = floe_const(g, "zero_state", z);
  floe_tensor_release(z);
  FloeVariable w, b;
  floe_lstm_weights(g, "lstm", FLOE_F32, c->input, c->hidden, 1234, &w, &b);
  FloeLSTMState init = {zero, zero};
  FloeOutput out;
  FloeLSTMState fin;
  if (variant == DYNAMIC) {
    FloeDynamicRNNOptions o;
    floe_dynamic_rnn_options_init(&o);
    o.cell.fused = c->fused;
    o.project_inputs = c->project;
    out = floe_dynamic_lstm(g, "rnn", x, len, init, w.value, b.value, &o, &fin);
  } else {
    FloeLSTMOptions o;
    floe_lstm_options_init(&o);
    o.fused = c->fused;
    out = unrolled_lstm(g, c, x, len, init, w.value, b.value, &o, &fin);
  }
  /* loss = (0.5 * sum((outputs - y)^2) + sum(h_final * c_final)) / B: the final state
   * checks that rows past their length kept it. */
  FloeOutput d = floe_binary(g, "Sub", NULL, out, y);
  const int64_t d3[1] = {3}, d2[1] = {2};
  FloeOutput sq = op2(g, "Sum", floe_binary(g, "Mul", NULL, d, d),
                      i32_const(g, 1, d3, (const int32_t[]){0, 1, 2}));
  FloeOutput hc = op2(g, "Sum", floe_binary(g, "Mul", NULL, fin.h, fin.c),
                      i32_const(g, 1, d2, (const int32_t[]){0, 1}));
  FloeOutput half = floe_binary(g, "Mul", NULL, sq, floe_const_f32(g, NULL, 0.5f));
  FloeOutput loss = floe_binary(g, "Mul", "loss", floe_binary(g, "Add", NULL, half, hc),
                                floe_const_f32(g, NULL, 1.0f / (float)c->batch));
  FloeNode *train = sgd(g, loss, &w, &b, c->lr);
  floe_variables_initializer(g, "init");
  if (floe_graph_status(g) != FLOE_OK) die(variant_name[variant], floe_graph_error(g, NULL));
  snprintf(m->loss, sizeof m->loss, "%s:0", floe_node_name(loss.node));
  snprintf(m->train, sizeof m->train, "%s", floe_node_name(train));
  m->nodes = floe_graph_num_nodes(g);
  m->s = floe_session_new(g, NULL, st);
  if (!m->s) die("session", floe_status_message(st));
  const char *init_t = "init";
  if (floe_session_run(m->s, NULL, 0, NULL, 0, &init_t, 1, NULL, st) != FLOE_OK)
    die("init", floe_status_message(st));
}

static void model_free(Model *m) {
  floe_session_free(m->s);
  floe_graph_free(m->g);
}

/* One training step; returns seconds, the loss before the update in *loss. */
static double train_step(Model *m, const Batch *bt, double *loss) {
  FloeFeed f[3] = {{"x", bt->x}, {"y", bt->y}, {"lengths", bt->len}};
  const char *fetch = m->loss, *target = m->train;
  FloeTensor *out;
  double t0 = bench_now();
  if (floe_session_run(m->s, f, 3, &fetch, 1, &target, 1, &out, st) != FLOE_OK)
    die("train step", floe_status_message(st));
  double dt = bench_now() - t0;
  *loss = *(const float *)floe_tensor_data(out);
  floe_tensor_release(out);
  return dt;
}

/* ---- peak RSS in a child process ---- */

static long status_kb(const char *field) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long v = -1;
  size_t n = strlen(field);
  while (fgets(line, sizeof line, f))
    if (strncmp(line, field, n) == 0 && line[n] == ':') {
      v = strtol(line + n + 1, NULL, 10);
      break;
    }
  fclose(f);
  return v;
}

/* Resets VmHWM to the current RSS (Linux >= 4.0); 0 on success. */
static int reset_hwm(void) {
  FILE *f = fopen("/proc/self/clear_refs", "w");
  if (!f) return -1;
  int ok = fputs("5", f) >= 0;
  return (fclose(f) == 0 && ok) ? 0 : -1;
}

/* Loads the runtime and runs one small product, so that what any first step pays once
 * (plugins, thread pool, the BLAS library's buffers) is in the base, not in the variant. */
static void warm_up(void) {
  FloeGraph *g = floe_graph_new();
  const int64_t d[2] = {64, 64};
  FloeTensor *a = tensor(FLOE_F32, 2, d);
  memset(floe_tensor_data(a), 0, floe_tensor_nbytes(a));
  FloeOutput x = floe_const(g, "a", a);
  floe_tensor_release(a);
  floe_matmul(g, "p", x, x, 0, 0);
  FloeSession *s = floe_session_new(g, NULL, st);
  if (!s) die("warm-up", floe_status_message(st));
  const char *fetch = "p";
  FloeTensor *out;
  if (floe_session_run(s, NULL, 0, &fetch, 1, NULL, 0, &out, st) != FLOE_OK)
    die("warm-up", floe_status_message(st));
  floe_tensor_release(out);
  floe_session_free(s);
  floe_graph_free(g);
}

/* Child: one variant alone; prints "base_kb built_kb hwm_kb reset nodes loss" (built: the
 * RSS once the graph, the session and the initialised variables exist, before any step). */
static int rss_child(const Config *c, int variant) {
  Batch bt;
  batch_make(c, &bt);
  warm_up();
  int reset = reset_hwm() == 0;
  long base = status_kb("VmRSS");
  if (!reset) base = status_kb("VmHWM"); /* cannot reset: everything so far counts as base */
  Model m;
  model_build(&m, c, variant);
  long built = status_kb("VmRSS");
  double loss = 0;
  for (int k = 0; k < c->rss_steps; k++) train_step(&m, &bt, &loss);
  long hwm = status_kb("VmHWM");
  printf("%ld %ld %ld %d %d %.9g\n", base, built, hwm, reset, m.nodes, loss);
  model_free(&m);
  batch_free(&bt);
  return 0;
}

typedef struct RssResult {
  long base_kb, built_kb, hwm_kb;
  int reset, nodes;
  double loss;
} RssResult;

static void run_child(const Config *c, int variant, RssResult *r) {
  char args[12][32];
  snprintf(args[0], 32, "--rss-child=%s", variant_name[variant]);
  snprintf(args[1], 32, "--batch=%lld", (long long)c->batch);
  snprintf(args[2], 32, "--input=%lld", (long long)c->input);
  snprintf(args[3], 32, "--hidden=%lld", (long long)c->hidden);
  snprintf(args[4], 32, "--max-len=%lld", (long long)c->max_len);
  snprintf(args[5], 32, "--lengths=%s", c->fortunes ? "fortunes" : "uniform");
  snprintf(args[6], 32, "--rss-steps=%d", c->rss_steps);
  snprintf(args[7], 32, "--seed=%llu", (unsigned long long)c->seed);
  snprintf(args[8], 32, "--fused=%s", c->fused == FLOE_LSTM_FUSED_NEVER ? "never" : "always");
  snprintf(args[9], 32, "--lr=%.17g", c->lr);
  snprintf(args[10], 32, "--project=%d", c->project);
  char *argv[15] = {"bench_dynamic_rnn"};
  int n = 1;
  for (int i = 0; i < 11; i++) argv[n++] = args[i];
  char data_arg[4096];
  if (c->data) {
    snprintf(data_arg, sizeof data_arg, "--data=%s", c->data);
    argv[n++] = data_arg;
  }
  argv[n] = NULL;
  int fd[2];
  if (pipe(fd) != 0) die("pipe", strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fd[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&fa, fd[0]);
  pid_t pid;
  int rc = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fd[1]);
  if (rc != 0) die("spawn", strerror(rc));
  FILE *f = fdopen(fd[0], "r");
  int got = f ? fscanf(f, "%ld %ld %ld %d %d %lf", &r->base_kb, &r->built_kb, &r->hwm_kb,
                       &r->reset, &r->nodes, &r->loss)
              : 0;
  if (f)
    fclose(f);
  else
    close(fd[0]);
  int ws;
  waitpid(pid, &ws, 0);
  if (got != 6 || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
    die(variant_name[variant], "the peak-RSS child process failed (its error is above)");
}

/* ---- the side-by-side run ---- */

typedef struct Result {
  double median_ms, min_ms;
  /* Bytes of tensors alive at once above those alive when the step started: the median and
   * the largest over the timed steps (the order parallel kernels and loop iterations run in
   * varies it, the loop's most). */
  double tensor_peak, tensor_peak_max;
  RssResult rss;
  int nodes, iterations;
  FloeStepBreakdown bd; /* of 3 more steps, traced (the timed ones were not) */
} Result;

static void print_lengths(const Config *c, const Batch *bt, int64_t useful) {
  int64_t B = c->batch;
  const int32_t *l = bt->lengths; /* sorted longest first */
  printf("lengths (%s), B=%lld: max %d, p75 %d, median %d, p25 %d, min %d, mean %.1f; "
         "useful row-steps %lld of B*T = %lld (%.0f%%)\n",
         c->fortunes ? "a shuffled batch of fortune pieces" : "uniform in [5, T]",
         (long long)B, l[0], l[B / 4], l[B / 2], l[3 * B / 4], l[B - 1], (double)useful / B,
         (long long)useful, (long long)(B * c->max_len), 100.0 * useful / (B * c->max_len));
  if (bt->pieces)
    printf("fortune pieces of the training split: %lld, mean length %.1f, %.1f%% of length %lld\n",
           (long long)bt->pieces, bt->pieces_mean, 100 * bt->pieces_at_max, (long long)c->max_len);
  printf("histogram (length range: rows):");
  for (int64_t lo = 0; lo < c->max_len; lo += 10) {
    int n = 0;
    for (int64_t r = 0; r < B; r++) n += l[r] > lo && l[r] <= lo + 10;
    printf(" %lld-%lld:%d", (long long)lo + 1, (long long)lo + 10, n);
  }
  printf("\n");
}

/* One more step of each variant with profiling on: the op types whose outputs took the most
 * bytes (made during the step, not all alive at once: where the memory goes). */
static void print_profile(Model *m, const Batch *bt) {
  for (int v = 0; v < VARIANTS; v++) {
    floe_session_set_profiling(m[v].s, 1);
    double loss;
    train_step(&m[v], bt, &loss);
    floe_session_set_profiling(m[v].s, 0);
    FloeOpProfile *rows;
    int n;
    if (floe_session_profile(m[v].s, &rows, &n, st) != FLOE_OK)
      die("profile", floe_status_message(st));
    for (int i = 1; i < n; i++) /* by output bytes, largest first */
      for (int j = i; j > 0 && rows[j].output_bytes > rows[j - 1].output_bytes; j--) {
        FloeOpProfile t = rows[j];
        rows[j] = rows[j - 1];
        rows[j - 1] = t;
      }
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += rows[i].output_bytes;
    printf("%s: outputs made in one step %.1f MiB; by op:", variant_name[v], total / 1048576.0);
    for (int i = 0; i < n && i < 10; i++)
      printf(" %s %.1f (%lld)", rows[i].op, rows[i].output_bytes / 1048576.0,
             (long long)rows[i].calls);
    printf("\n");
    free(rows);
  }
}

static int run_bench(const Config *c) {
  Batch bt;
  batch_make(c, &bt);
  int64_t useful = 0;
  for (int64_t r = 0; r < c->batch; r++) useful += bt.lengths[r];
  Model m[VARIANTS];
  Result res[VARIANTS] = {{0}};
  for (int v = 0; v < VARIANTS; v++) {
    model_build(&m[v], c, v);
    res[v].nodes = m[v].nodes;
  }
  res[DYNAMIC].iterations = bt.lengths[0];
  res[UNROLLED].iterations = (int)c->max_len;
  int total = c->reps + 2; /* two warm-up rounds */
  double *ms[VARIANTS], *loss[VARIANTS], *peak[VARIANTS];
  for (int v = 0; v < VARIANTS; v++) {
    ms[v] = malloc((size_t)total * sizeof(double));
    loss[v] = malloc((size_t)total * sizeof(double));
    peak[v] = malloc((size_t)total * sizeof(double));
    if (!ms[v] || !loss[v] || !peak[v]) die("bench", "out of memory");
  }
  for (int r = 0; r < total; r++)
    for (int i = 0; i < VARIANTS; i++) {
      int v = (i + r) % VARIANTS;
      FloeMemoryStats before = {.struct_size = sizeof before}, after = before;
      floe_memory_stats(&before);
      floe_memory_reset_peak();
      ms[v][r] = train_step(&m[v], &bt, &loss[v][r]) * 1e3;
      floe_memory_stats(&after);
      peak[v][r] = (double)(after.peak_tensor_bytes - before.live_tensor_bytes);
    }
  double max_rel = 0;
  for (int r = 0; r < total; r++)
    max_rel = fmax(max_rel, fabs(loss[DYNAMIC][r] - loss[UNROLLED][r]) / fabs(loss[UNROLLED][r]));
  for (int v = 0; v < VARIANTS; v++) {
    res[v].median_ms = bench_median(ms[v] + 2, c->reps); /* sorts: [2] is the fastest */
    res[v].min_ms = ms[v][2];
    res[v].tensor_peak = bench_median(peak[v] + 2, c->reps);
    res[v].tensor_peak_max = peak[v][total - 1];
  }
  if (c->profile && !c->json) print_profile(m, &bt);
  for (int v = 0; v < VARIANTS; v++) {
    FloeFeed f[3] = {{"x", bt.x}, {"y", bt.y}, {"lengths", bt.len}};
    const char *fetch = m[v].loss, *target = m[v].train;
    BenchStep one = {m[v].s, f, 3, &fetch, 1, &target, 1};
    if (bench_breakdown(m[v].s, bench_step_run, &one, 3, &res[v].bd)) exit(1);
  }
  for (int v = 0; v < VARIANTS; v++) model_free(&m[v]);
  for (int v = 0; v < VARIANTS; v++) run_child(c, v, &res[v].rss);
  /* A child ran the same steps from the same weights: its last loss is ours at that step. */
  for (int v = 0; v < VARIANTS && c->rss_steps <= total; v++)
    max_rel = fmax(max_rel, fabs(res[v].rss.loss - loss[v][c->rss_steps - 1]) /
                                fabs(loss[v][c->rss_steps - 1]));

  const double MiB = 1024.0 * 1024.0;
  double rss[VARIANTS];
  for (int v = 0; v < VARIANTS; v++)
    rss[v] = (double)(res[v].rss.hwm_kb - res[v].rss.base_kb) * 1024;
  if (c->json) {
    printf("{\"bench\": \"dynamic_rnn\", \"batch\": %lld, \"input\": %lld, \"hidden\": %lld, "
           "\"max_len\": %lld, \"lengths\": \"%s\", \"fused\": \"%s\", \"project\": %d, \"reps\": %d, "
           "\"useful_row_steps\": %lld, \"loss_first\": [%.9g, %.9g], \"loss_last\": [%.9g, %.9g], "
           "\"loss_max_rel_diff\": %.3g, \"variants\": [",
           (long long)c->batch, (long long)c->input, (long long)c->hidden, (long long)c->max_len,
           c->fortunes ? "fortunes" : "uniform",
           c->fused == FLOE_LSTM_FUSED_NEVER ? "never" : "always", c->project, c->reps,
           (long long)useful,
           loss[DYNAMIC][0], loss[UNROLLED][0], loss[DYNAMIC][total - 1],
           loss[UNROLLED][total - 1], max_rel);
    for (int v = 0; v < VARIANTS; v++) {
      printf("%s{\"variant\": \"%s\", \"iterations\": %d, \"nodes\": %d, \"median_ms\": %.3f, "
             "\"min_ms\": %.3f, \"tensor_peak_bytes\": %.0f, \"tensor_peak_max_bytes\": %.0f, "
             "\"peak_rss_bytes\": %.0f, "
             "\"rss_base_bytes\": %.0f, \"rss_built_bytes\": %.0f, \"hwm_reset\": %d, "
             "\"child_loss\": %.9g, \"breakdown\": ",
             v ? ", " : "", variant_name[v], res[v].iterations, res[v].nodes, res[v].median_ms,
             res[v].min_ms, res[v].tensor_peak, res[v].tensor_peak_max, rss[v],
             res[v].rss.base_kb * 1024.0, res[v].rss.built_kb * 1024.0, res[v].rss.reset,
             res[v].rss.loss);
      bench_breakdown_json(stdout, &res[v].bd);
      printf("}");
    }
    printf("]}\n");
  } else {
    printf("LSTM training step (forward + backward + SGD), f32, %s cell%s, B=%lld I=%lld H=%lld "
           "T=%lld, %d reps\n",
           c->fused == FLOE_LSTM_FUSED_NEVER ? "primitive-op" : "fused",
           c->project > 0 ? " (dynamic: inputs projected before the loop)" : "",
           (long long)c->batch,
           (long long)c->input, (long long)c->hidden, (long long)c->max_len, c->reps);
    print_lengths(c, &bt, useful);
    printf("loss, step 1: dynamic %.7g, unrolled %.7g; step %d: dynamic %.7g, unrolled %.7g; "
           "max relative difference over all steps (and the children's) %.2g\n",
           loss[DYNAMIC][0], loss[UNROLLED][0], total, loss[DYNAMIC][total - 1],
           loss[UNROLLED][total - 1], max_rel);
    printf("%-9s %10s %6s %17s %21s %13s\n", "variant", "iterations", "nodes",
           "step ms med (min)", "tensor peak MiB (max)", "peak RSS MiB");
    for (int v = 0; v < VARIANTS; v++)
      printf("%-9s %10d %6d %8.1f (%6.1f) %11.1f (%6.1f) %13.1f\n", variant_name[v],
             res[v].iterations, res[v].nodes, res[v].median_ms, res[v].min_ms,
             res[v].tensor_peak / MiB, res[v].tensor_peak_max / MiB, rss[v] / MiB);
    printf("ratio unrolled / dynamic: step time %.2f, tensor peak %.2f, peak RSS %.2f\n",
           res[UNROLLED].median_ms / res[DYNAMIC].median_ms,
           res[UNROLLED].tensor_peak / res[DYNAMIC].tensor_peak, rss[UNROLLED] / rss[DYNAMIC]);
    printf("(peak RSS: VmHWM of a child process running %d steps of one variant, minus its RSS "
           "before the graph was built%s: base %.0f / %.0f MiB; graph, session and variables "
           "before the first step %.1f / %.1f MiB of it)\n",
           c->rss_steps, res[0].rss.reset && res[1].rss.reset ? "" : "; VmHWM could NOT be reset",
           res[0].rss.base_kb / 1024.0, res[1].rss.base_kb / 1024.0,
           (res[0].rss.built_kb - res[0].rss.base_kb) / 1024.0,
           (res[1].rss.built_kb - res[1].rss.base_kb) / 1024.0);
    for (int v = 0; v < VARIANTS; v++) {
      char what[32];
      snprintf(what, sizeof what, "%s (traced)", variant_name[v]);
      bench_breakdown_print(stdout, what, &res[v].bd);
    }
  }
  for (int v = 0; v < VARIANTS; v++) {
    free(ms[v]);
    free(loss[v]);
    free(peak[v]);
  }
  batch_free(&bt);
  return max_rel > 1e-3; /* the variants disagree: the comparison is not fair */
}

static void usage(FILE *out) {
  fprintf(out,
          "usage: bench_dynamic_rnn [options]\n"
          "  One LSTM training step (f32, SGD), floe_dynamic_lstm vs the same cell unrolled to\n"
          "  T steps with masks, on one batch of mixed lengths: step time (alternating, median),\n"
          "  the loss of each, the peak of live tensor bytes, and peak RSS (a child process per\n"
          "  variant). Exits 1 when the two losses differ by more than 1e-3 (relative).\n"
          "  --batch B           rows (default 64)\n"
          "  --input I           input features (default 256)\n"
          "  --hidden H          hidden size (default 256)\n"
          "  --max-len T         padded length, the unrolled steps (default 100)\n"
          "  --lengths KIND      fortunes (pieces of Debian's fortunes, default) or uniform\n"
          "  --data DIR          fortune folder (default %s)\n"
          "  --fused KIND        always: the cell as one LSTMCell op (default); never:\n"
          "                      primitive ops\n"
          "  --project -1|0|1    the dynamic variant's project_inputs: 1, the inputs'\n"
          "                      projection for all steps and rows before the loop; 0, in\n"
          "                      the loop; -1 (default), floe_dynamic_lstm's default (0 here,\n"
          "                      since lengths are given)\n"
          "  --reps N            timed steps of each (default 10; 2 warm-ups before)\n"
          "  --rss-steps N       steps run by each peak-RSS child (default 3)\n"
          "  --seed S            batch choice and data (default 1)\n"
          "  --lr X              SGD learning rate (default 0.05)\n"
          "  --profile           also the op types whose outputs took most bytes in a step\n"
          "  --json              one JSON object instead of text\n",
          FLOE_TEXT_FORTUNES_DIR);
}

int main(int argc, char **argv) {
  Config c = {64, 256, 256, 100, 1, 10, 3, 0, 0, FLOE_LSTM_FUSED_ALWAYS, -1, 1, 0.05, NULL};
  int child = -1;
  static const struct option opts[] = {
      {"batch", required_argument, NULL, 'b'},  {"input", required_argument, NULL, 'i'},
      {"hidden", required_argument, NULL, 'H'}, {"max-len", required_argument, NULL, 'T'},
      {"lengths", required_argument, NULL, 'l'}, {"data", required_argument, NULL, 'd'},
      {"fused", required_argument, NULL, 'f'},  {"reps", required_argument, NULL, 'r'},
      {"rss-steps", required_argument, NULL, 'n'}, {"seed", required_argument, NULL, 's'},
      {"lr", required_argument, NULL, 'L'},     {"json", no_argument, NULL, 'j'},
      {"profile", no_argument, NULL, 'p'},      {"project", required_argument, NULL, 'P'},
      {"rss-child", required_argument, NULL, 'c'}, {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  for (int o; (o = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
    switch (o) {
      case 'b': c.batch = atoll(optarg); break;
      case 'i': c.input = atoll(optarg); break;
      case 'H': c.hidden = atoll(optarg); break;
      case 'T': c.max_len = atoll(optarg); break;
      case 'l':
        if (strcmp(optarg, "fortunes") && strcmp(optarg, "uniform")) {
          fprintf(stderr, "bench_dynamic_rnn: --lengths is fortunes or uniform, not '%s'\n",
                  optarg);
          return 2;
        }
        c.fortunes = strcmp(optarg, "fortunes") == 0;
        break;
      case 'd': c.data = optarg; break;
      case 'f':
        if (strcmp(optarg, "always") && strcmp(optarg, "never")) {
          fprintf(stderr, "bench_dynamic_rnn: --fused is always or never, not '%s'\n", optarg);
          return 2;
        }
        c.fused = strcmp(optarg, "never") == 0 ? FLOE_LSTM_FUSED_NEVER : FLOE_LSTM_FUSED_ALWAYS;
        break;
      case 'r': c.reps = atoi(optarg); break;
      case 'n': c.rss_steps = atoi(optarg); break;
      case 's': c.seed = strtoull(optarg, NULL, 10); break;
      case 'L': c.lr = atof(optarg); break;
      case 'j': c.json = 1; break;
      case 'p': c.profile = 1; break;
      case 'P':
        if (strcmp(optarg, "0") && strcmp(optarg, "1") && strcmp(optarg, "-1")) {
          fprintf(stderr, "bench_dynamic_rnn: --project is -1, 0 or 1, not '%s'\n", optarg);
          return 2;
        }
        c.project = atoi(optarg);
        break;
      case 'c':
        child = strcmp(optarg, "dynamic") == 0    ? DYNAMIC
                : strcmp(optarg, "unrolled") == 0 ? UNROLLED
                                                  : -2;
        break;
      case 'h': usage(stdout); return 0;
      default: usage(stderr); return 2;
    }
  }
  if (c.batch < 1 || c.input < 1 || c.hidden < 1 || c.max_len < 5 || c.reps < 1 ||
      c.rss_steps < 1 || child == -2 || !(c.lr > 0)) {
    fprintf(stderr, "bench_dynamic_rnn: sizes and counts must be positive, --max-len >= 5, "
                    "--rss-child dynamic or unrolled\n");
    return 2;
  }
  st = floe_status_new();
  int rc = child >= 0 ? rss_child(&c, child) : run_bench(&c);
  floe_status_free(st);
  return rc;
}
