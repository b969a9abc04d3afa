/* SPDX-License-Identifier: Apache-2.0 */
/* train_lstm.c - floe train --model lstm: a word-level LSTM language model on the fortune
 * corpus (floe_text.h), the TensorFlow paper's LSTM-512-512 shape with a 10,000-word
 * vocabulary.
 *
 * The graph: ids [batch, steps] -> time-major -> embedding [vocab, hidden] -> `layers`
 * floe_dynamic_lstm layers (each one while loop over the window, fused LSTMCell when the
 * CPU plugin has it) -> a softmax over the vocabulary: full, or sampled (--sampled-softmax
 * K: floe_sampled_softmax_loss, TensorFlow's sampled_softmax_loss: the true word against K
 * distinct words drawn log-uniformly once per window, corrected by their expected counts,
 * accidental hits removed; evaluation always uses the full softmax).
 * Adam at constant rates, no clipping (bench/lstm_baselines.py gives PyTorch and Keras the
 * same recipe with one rate): the output layer (softmax weights and biases) gets its own Adam
 * at 0.05 (--softmax-lr) beside 1e-3 (--lr) for the embedding and the LSTMs. Adam moves each
 * weight by about its rate per update whatever the gradient's size. The output biases alone
 * must travel to the words' log-frequencies (a range of about 10) just to match the unigram
 * baseline: at 1e-3 that takes thousands of windows, so the full softmax needed three epochs
 * to pass the unigram perplexity; at 0.05 one epoch ends well below it. Under the sampled
 * softmax a row is only updated when it is drawn (a rare word every few dozen windows), which
 * makes a rate of its own more necessary still: held-out perplexity 660 after 150 windows at
 * 1e-3 against 275 at 0.05 (2 x 512).
 * Windows are cut as TensorFlow's PTB reader does, and each window starts from the last
 * one's final state (truncated backpropagation through time), reset every epoch.
 * Perplexity is exp(mean cross-entropy) over the held-out split.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "measure.h"
#include "train_cluster.h"
#include "train_guard.h"
#include "train_report.h"
#include "train_signal.h"

static const char lstm_help[] =
    "Usage: floe train --model lstm [--steps N] [--epochs N] [--batch N] [--bptt T]\n"
    "                  [--hidden H] [--layers L] [--vocab V] [--sampled-softmax K]\n"
    "                  [--lr X] [--softmax-lr X] [--clip N] [--seed N] [--threads N]\n"
    "                  [--data DIR] [--eval-windows N] [--devices LIST]\n"
    "                  [--save-graph FILE] [--export FILE] [--profile] [--trace FILE]\n"
    "                  [--timeout S] [--json] [--softmax-shards N]\n"
    "                  [--checkpoint-dir DIR [--resume]]\n"
    "                  [--cluster SPEC [--job J --task N]\n"
    "                  [--replication async|sync|allreduce] [--replicas-to-aggregate K]\n"
    "                  [--ps-strategy NAME] [--heartbeat-timeout S] [--ps-tasks M]\n"
    "                  [--fusion-bytes N] [--collective NAME]]\n"
    "  A word-level LSTM language model on the fortune files of Debian's `fortunes`\n"
    "  package (default /usr/share/games/fortunes; --data DIR for another folder).\n"
    "  Integers: 1 to 1073741824 unless said (--layers 1 to 8, --vocab from 3,\n"
    "  --eval-windows from 0, --seed 0 to 2147483647, --threads 1 to 4096); rates and\n"
    "  --clip: at most 3.4e38 (the largest f32).\n"
    "  --steps N              training windows (default: --epochs whole epochs)\n"
    "  --epochs N             epochs when --steps is not given (default 1)\n"
    "  --batch N              rows per window (default 64)\n"
    "  --bptt T               words per row and window, the unrolled length (default 35)\n"
    "  --hidden H             LSTM size and embedding width (default 512)\n"
    "  --layers L             stacked LSTM layers (default 2)\n"
    "  --vocab V              vocabulary: the V most frequent words, the rest <unk>\n"
    "                         (default 10000)\n"
    "  --sampled-softmax K    train with a sampled softmax of K distinct words drawn\n"
    "                         from the log-uniform distribution (default: the full\n"
    "                         softmax; evaluation always uses the full softmax)\n"
    "  --lr X                 Adam's learning rate for the embedding and the LSTMs\n"
    "                         (default 0.001, constant)\n"
    "  --softmax-lr X         Adam's rate for the output layer (softmax weights and\n"
    "                         biases; default 0.05: its biases must reach the words'\n"
    "                         log-frequencies, and sampled rows are only updated when\n"
    "                         drawn; sync and allreduce replication: --lr, one Adam)\n"
    "  --clip N               clip the gradients to a global norm of N (default 0: off;\n"
    "                         with two rates, each optimiser's gradients separately)\n"
    "  --eval-windows N       held-out windows to evaluate (default 0: all)\n"
    "  --devices LIST         place with the cost model across these devices (e.g.\n"
    "                         cpu,tpu-sim); default: the first device with a kernel\n"
    "  --save-graph FILE      write the training graph (feeds x, y and the states; target\n"
    "                         the training op, printed) to FILE and stop\n"
    "  --export FILE          after training, write the frozen inference graph: feeds x\n"
    "                         [batch, bptt] (word ids) and h<l>, c<l> [batch, hidden] (the\n"
    "                         state of layer l), fetches logits [bptt * batch, vocab]\n"
    "                         (time-major rows) and next_h<l>, next_c<l>; the LSTM is\n"
    "                         unrolled over the bptt steps (no loop), so `floe export\n"
    "                         --onnx` can write it as an ONNX model\n"
    "  --profile              time every kernel of the training windows after the first\n"
    "                         and print, per op type, calls and time (sorted by total time)\n"
    "                         at the end: to stderr, or as \"profile\" in the JSON with\n"
    "                         --json; then the step breakdown (\"breakdown\" in the JSON)\n"
    "  --trace FILE           write a Chrome trace of the training windows after the first\n"
    "                         to FILE (a track per device and thread, each kernel with its\n"
    "                         node, op, shapes and bytes, transfers as flows)\n"
    "  --timeout S            a deadline for each step (training, initialisation and\n"
    "                         evaluation windows), in seconds (0.001 to 1000000): a step\n"
    "                         still running then is cancelled and floe train fails,\n"
    "                         naming the nodes still running\n"
    "  --json                 end with one JSON line: model, epochs, batch, the options,\n"
    "                         words_per_sec, train_seconds, perplexity, unigram_perplexity,\n"
    "                         final_loss, last_loss, wall_seconds, peak_rss_mb, steps, ...\n"
    "  --checkpoint-dir DIR   save a checkpoint after every epoch and at the end (the\n"
    "                         newest 3 are kept; on a cluster the chief saves)\n"
    "  --resume               go on from the newest checkpoint in --checkpoint-dir: at the\n"
    "                         window its global step says (one a window; under sync\n"
    "                         replication global steps x --replicas-to-aggregate; under\n"
    "                         allreduce global steps x the training tasks), the recurrent\n"
    "                         state from zeros there\n"
    "  --softmax-shards N     split the embedding and the softmax weights and biases into\n"
    "                         N shards each along the vocabulary (floe_sharded_variable;\n"
    "                         on a cluster each shard goes to a ps task, default N = the\n"
    "                         ps tasks). The full softmax reads every shard whole; the\n"
    "                         sampled softmax and the embedding read only the rows a\n"
    "                         window needs (each shard gives its own), and the gradients\n"
    "                         go back as rows (not with --replication allreduce: it has\n"
    "                         no ps tasks and keeps every variable whole)\n"
    "  --cluster SPEC         train on a cluster (between-graph replication) as floe train\n"
    "                         --model mlp does (see floe train --help): the variables on\n"
    "                         the ps tasks, the chief and the workers each training on a\n"
    "                         contiguous part of every epoch's windows (training task r\n"
    "                         of R takes windows [r n / R, (r + 1) n / R), its state\n"
    "                         carried from window to window), the chief initialising,\n"
    "                         evaluating once every task's share is applied, and\n"
    "                         reporting (step_time_p50_ms, bytes to and from each ps per\n"
    "                         step, ...). --job, --task, --replication async|sync,\n"
    "                         --replicas-to-aggregate, --ps-strategy, --heartbeat-timeout\n"
    "                         and --ps-tasks as there. Sync replication trains every\n"
    "                         variable with one Adam at --lr (no --softmax-lr)\n"
    "  --replication allreduce  no ps tasks: every training task holds every variable\n"
    "                         whole and each step averages the tasks' gradients with\n"
    "                         fused all-reduces (one Adam at --lr; the sampled softmax's\n"
    "                         gradients are dense there, and every task draws the same\n"
    "                         sampled words a step); the chief's values (initialised or\n"
    "                         restored) are broadcast first. A collective needs every\n"
    "                         task to run the same steps: of an epoch's n windows task r\n"
    "                         of R takes [r n / R, r n / R + n / R) (n mod R left out),\n"
    "                         one global step is R windows, one a task (--steps N: N / R\n"
    "                         global steps); the chief tests after every epoch and\n"
    "                         checkpoints; every task's --json line has\n"
    "                         variables_checksum (equal on every task)\n"
    "  --fusion-bytes N       allreduce: gradients packed into buffers of up to N bytes,\n"
    "                         one collective each (default 4194304; 0: one per gradient)\n"
    "  --collective NAME      allreduce: the collective backend (ring, gloo; default\n"
    "                         FLOE_COLLECTIVE, else ring)\n"
    "  Output as the other models': after each epoch \"epoch E/N loss L perplexity P\n"
    "  words/s R seconds S\" (L the epoch's mean training loss, P the held-out perplexity\n"
    "  then; a terminal also gets a progress line), at the end \"perplexity P\n"
    "  unigram_perplexity U words/s R wall_seconds W peak_rss_mb M\". The first window\n"
    "  builds the executor: it is not in words/s, seconds or train_seconds. A window whose\n"
    "  loss is NaN or infinite ends the run with exit status 1, naming the step and the\n"
    "  first variable it left non-finite.\n";

/* Adam's rate for the output layer (see the header comment). */
#define OUTPUT_LAYER_LR 0.05

typedef struct LstmOptions {
  long long steps, epochs, batch, bptt, hidden, layers, vocab, sampled, seed, threads, eval;
  double lr, clip, softmax_lr;
  const char *data, *devices, *save_graph, *export_path, *trace, *checkpoint_dir;
  int json, profile, resume;
  int64_t timeout_ms; /* --timeout: each step's deadline; 0: none */
  long long softmax_shards; /* --softmax-shards: 0 none (one process) or one per ps task */
  int softmax_lr_given;
  TrainCluster cl;          /* --cluster and its options (cl.spec NULL: one process) */
} LstmOptions;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int parse(int argc, char **argv, LstmOptions *o, int *done) {
  static const struct option opts[] = {
      {"model", required_argument, NULL, 'm'},   {"steps", required_argument, NULL, 's'},
      {"epochs", required_argument, NULL, 'e'},  {"batch", required_argument, NULL, 'b'},
      {"bptt", required_argument, NULL, 't'},    {"hidden", required_argument, NULL, 'H'},
      {"layers", required_argument, NULL, 'L'},  {"vocab", required_argument, NULL, 'V'},
      {"sampled-softmax", required_argument, NULL, 'k'},
      {"lr", required_argument, NULL, 'r'},      {"seed", required_argument, NULL, 'S'},
      {"threads", required_argument, NULL, 'T'}, {"data", required_argument, NULL, 'd'},
      {"eval-windows", required_argument, NULL, 'E'},
      {"json", no_argument, NULL, 'j'},          {"help", no_argument, NULL, 'h'},
      {"profile", no_argument, NULL, 'P'},      {"clip", required_argument, NULL, 'C'},
      {"softmax-lr", required_argument, NULL, 'R'},
      {"devices", required_argument, NULL, 'D'}, {"save-graph", required_argument, NULL, 'G'},
      {"export", required_argument, NULL, 'X'},
      {"trace", required_argument, NULL, 'Z'},
      {"timeout", required_argument, NULL, 'O'},
      {"softmax-shards", required_argument, NULL, 'W'},
      {"checkpoint-dir", required_argument, NULL, 'K'}, {"resume", no_argument, NULL, 'U'},
      {"cluster", required_argument, NULL, 'Q'}, {"job", required_argument, NULL, 'Q'},
      {"task", required_argument, NULL, 'Q'},    {"replication", required_argument, NULL, 'Q'},
      {"replicas-to-aggregate", required_argument, NULL, 'Q'},
      {"ps-tasks", required_argument, NULL, 'Q'}, {"ps-strategy", required_argument, NULL, 'Q'},
      {"heartbeat-timeout", required_argument, NULL, 'Q'},
      {"fusion-bytes", required_argument, NULL, 'Q'}, {"collective", required_argument, NULL, 'Q'},
      {NULL, 0, NULL, 0}};
  *o = (LstmOptions){.epochs = 1, .batch = 64, .bptt = 35, .hidden = 512, .layers = 2,
                     .vocab = 10000, .seed = 1, .lr = 1e-3,
                     .data = "/usr/share/games/fortunes"};
  o->cl.task = -1;
  o->cl.fusion_bytes = -1;
  *done = 0;
  optind = 1;
  opterr = 0;
  int c, li = 0;
  while ((c = getopt_long(argc, argv, ":", opts, &li)) != -1) {
    long long *target = NULL, lo = 1, hi = 1LL << 30;
    switch (c) {
      case 'm':
        if (strcmp(optarg, "lstm") != 0) return cli_usage("train", "--model takes mlp, cnn or lstm");
        break;
      case 's': target = &o->steps; break;
      case 'e': target = &o->epochs; break;
      case 'b': target = &o->batch; break;
      case 't': target = &o->bptt; break;
      case 'H': target = &o->hidden; break;
      case 'L': target = &o->layers, hi = 8; break;
      case 'V': target = &o->vocab, lo = 3; break;
      case 'k': target = &o->sampled; break;
      case 'S': target = &o->seed, lo = 0, hi = 2147483647; break;
      case 'T': target = &o->threads, hi = 4096; break;
      case 'E': target = &o->eval, lo = 0; break;
      case 'W': target = &o->softmax_shards, lo = 0, hi = 65536; break;
      case 'K': o->checkpoint_dir = optarg; break;
      case 'U': o->resume = 1; break;
      case 'Q': {
        int r = train_cluster_option(&o->cl, opts[li].name, optarg);
        if (r) return 2; /* printed (every 'Q' option is a cluster option) */
        break;
      }
      case 'r':
        if (cli_number_option("train", "--lr", optarg, 0, 1, CLI_F32_MAX, &o->lr)) return 2;
        break;
      case 'R':
        if (cli_number_option("train", "--softmax-lr", optarg, 0, 1, CLI_F32_MAX, &o->softmax_lr))
          return 2;
        o->softmax_lr_given = 1;
        break;
      case 'C': /* 0: no clipping */
        if (cli_number_option("train", "--clip", optarg, 0, 0, CLI_F32_MAX, &o->clip)) return 2;
        break;
      case 'd': o->data = optarg; break;
      case 'j': o->json = 1; break;
      case 'P': o->profile = 1; break;
      case 'D': o->devices = optarg; break;
      case 'G': o->save_graph = optarg; break;
      case 'X': o->export_path = optarg; break;
      case 'Z': o->trace = optarg; break;
      case 'O':
        if (measure_parse_timeout(optarg, &o->timeout_ms))
          return cli_usage("train", "--timeout takes seconds from 0.001 to 1000000");
        break;
      case 'h':
        fputs(lstm_help, stdout);
        *done = 1;
        return 0;
      default: return cli_bad_option("train --model lstm", c, argv, opts);
    }
    if (target) {
      char name[32];
      snprintf(name, sizeof name, "--%s", opts[li].name);
      if (cli_int_option("train", name, optarg, lo, hi, target)) return 2;
    }
  }
  if (optind < argc) return cli_usage("train", "unexpected argument (see --help)");
  if (o->sampled >= o->vocab)
    return cli_usage("train", "--sampled-softmax K must be smaller than --vocab");
  if (train_cluster_check_options(&o->cl)) return 2;
  if (o->cl.allreduce && o->softmax_shards > 0)
    return cli_usage("train", "--softmax-shards splits the embedding and the softmax over the ps "
                     "tasks; --replication allreduce has none and keeps every variable whole on "
                     "every training task: drop --softmax-shards");
  if (o->resume && !o->checkpoint_dir)
    return cli_usage("train", "--resume needs --checkpoint-dir DIR");
  train_restart_resumes(o->checkpoint_dir, &o->resume); /* floe launch --max-restarts */
  if (o->cl.spec && (o->devices || o->save_graph || o->export_path))
    return cli_usage("train", "--cluster places the graph itself and keeps the variables on the "
                     "ps tasks (under allreduce, on every task): drop --devices, --save-graph "
                     "and --export");
  /* One optimiser: SyncReplicasOptimizer wraps one; allreduce averages one's gradients. */
  if (o->cl.sync || o->cl.allreduce) {
    if (o->softmax_lr_given && o->softmax_lr != o->lr)
      return cli_usage("train", o->cl.sync
                       ? "--replication sync trains every variable with one Adam at --lr: drop "
                         "--softmax-lr (or use --replication async)"
                       : "--replication allreduce trains every variable with one Adam at --lr "
                         "(its gradients averaged over the tasks): drop --softmax-lr (or use "
                         "--replication async, with ps tasks)");
    o->softmax_lr = o->lr;
  }
  if (!(o->softmax_lr > 0)) o->softmax_lr = OUTPUT_LAYER_LR;
  return 0;
}

typedef struct Lm {
  FloeGraph *g;
  FloeSession *s;
  FloeNode *train;
  int layers;
  char (*h_in)[32], (*c_in)[32], (*h_out)[32], (*c_out)[32]; /* state names per layer */
  FloeOutput lstm_w[8], lstm_b[8]; /* each layer's weights (variables' values) */
  TrainVars vars; /* every variable, for the checks of finite values */
  FloeRunOptions ro;               /* every step's: --timeout */
  int shards;                      /* --softmax-shards in effect (0: whole variables) */
  FloeShardedVariable emb;         /* the embedding when sharded */
  int K;                           /* sync: gradients per global step; allreduce: windows */
  char step_name[128];             /* the global step's value */
  /* sync replication's nodes (floe_sync_replicas_minimize) */
  char token_name[128], local_init[128], update_name[128], close_name[128], stale_name[128];
} Lm;

static FloeOutput i32_const(FloeGraph *g, const int32_t *v, int n, int rank) {
  const int64_t d[1] = {n};
  FloeTensor *t = floe_tensor_new(FLOE_I32, rank, d, NULL);
  if (!t) return (FloeOutput){NULL, 0};
  memcpy(floe_tensor_data(t), v, (size_t)n * sizeof *v);
  FloeOutput o = floe_const(g, NULL, t);
  floe_tensor_release(t);
  return o;
}

static FloeOutput reshape(FloeGraph *g, const char *name, FloeOutput x, const int32_t *shape, int n) {
  FloeNodeBuilder *b = floe_node_begin(g, "Reshape", name);
  floe_node_add_input(b, x);
  floe_node_add_input(b, i32_const(g, shape, n, 1));
  return floe_out(floe_node_finish(b), 0);
}

static FloeOutput transpose01(FloeGraph *g, FloeOutput x) {
  const int32_t perm[2] = {1, 0};
  FloeNodeBuilder *b = floe_node_begin(g, "Transpose", NULL);
  floe_node_add_input(b, x);
  floe_node_add_input(b, i32_const(g, perm, 2, 1));
  return floe_out(floe_node_finish(b), 0);
}

/* The training step: Adam on every variable or, when the output layer has a rate of its own,
 * one Adam on the embedding and the LSTMs and one on the softmax weights and biases. */
static FloeNode *train_op(Lm *m, FloeGraph *g, FloeOutput loss, const LstmOptions *o) {
  FloeOptimizerOptions oo;
  floe_optimizer_options_init(&oo, FLOE_OPT_ADAM);
  oo.learning_rate = o->lr;
  oo.clip_global_norm = o->clip;
  if (o->cl.sync) { /* SyncReplicasOptimizer: one Adam (the options made the rates one) */
    FloeSyncReplicasOptions so;
    floe_sync_replicas_options_init(&so);
    so.replicas_to_aggregate = m->K;
    so.total_num_replicas = o->cl.replicas;
    FloeSyncReplicas sr = floe_sync_replicas_minimize(g, "train", loss, &oo, &so, NULL, 0);
    if (!sr.train) return NULL;
    snprintf(m->token_name, sizeof m->token_name, "%s", floe_node_name(sr.token.node));
    snprintf(m->local_init, sizeof m->local_init, "%s", floe_node_name(sr.local_init));
    snprintf(m->update_name, sizeof m->update_name, "%s", floe_node_name(sr.chief_update));
    snprintf(m->close_name, sizeof m->close_name, "%s", floe_node_name(sr.close));
    snprintf(m->stale_name, sizeof m->stale_name, "%s", floe_node_name(sr.stale.node));
    return sr.train;
  }
  /* allreduce: one Adam (the options made the rates one), its gradients averaged. The
   * variables are whole, so every gradient is dense (Gather's, the sampled rows' too). The
   * sampler's draws depend only on its seed and how many times it ran, the same on every task
   * (each runs the same steps), so each step every task draws the same words: the average is
   * then the gradient of one process's window of R x batch rows with one draw. */
  if (o->cl.allreduce) {
    FloeAllReduceOptions ao;
    train_cluster_allreduce_options(&o->cl, &ao);
    return floe_allreduce_minimize(g, "train", loss, &oo, &ao, NULL, 0);
  }
  if (o->softmax_lr == o->lr) return floe_minimize(g, "train", loss, &oo, NULL, 0);
  /* the second optimiser does not count the step again */
  FloeVariable vars[32], body[32], out[32];
  int n = floe_graph_variables(g, 1, vars, 32), nb = 0, no = 0;
  for (int i = 0; i < n && i < 32; i++) {
    if (strncmp(floe_node_name(vars[i].handle.node), "softmax/", 8) == 0) out[no++] = vars[i];
    else body[nb++] = vars[i];
  }
  FloeNode *steps[2];
  steps[0] = floe_minimize(g, "train_body", loss, &oo, body, nb);
  oo.learning_rate = o->softmax_lr;
  oo.increment_global_step = 0;
  steps[1] = floe_minimize(g, "train_softmax", loss, &oo, out, no);
  FloeNodeBuilder *b = floe_node_begin(g, "NoOp", "train");
  for (int i = 0; i < 2; i++) floe_node_add_control_input(b, steps[i]);
  return floe_node_finish(b);
}

/* The inference model for --export on the training model's placeholders and variables: the
 * same computation as the training graph's evaluation, with each layer unrolled over the
 * window (a cell per step, no loop). logits [T*B, V] in time-major rows; next_h<l> and
 * next_c<l> the state after the window. */
static void build_inference(Lm *m, const LstmOptions *o, FloeOutput x, FloeOutput sw, FloeOutput sb) {
  FloeGraph *g = m->g;
  int T = (int)o->bptt;
  FloeOutput emb = m->shards ? floe_embedding_lookup_sharded(g, "infer/embed", &m->emb, transpose01(g, x))
                  : floe_layer_embedding(g, "embed", transpose01(g, x), o->vocab, o->hidden, o->seed);
  FloeOutput *hs = calloc((size_t)T, sizeof *hs);
  if (!hs) return; /* floe_export_frozen then reports that logits is missing */
  for (int t = 0; t < T; t++) { /* step t's input: row t of the time-major embedding */
    const int32_t ti = t;
    FloeNodeBuilder *b = floe_node_begin(g, "Gather", NULL);
    floe_node_add_input(b, emb);
    floe_node_add_input(b, i32_const(g, &ti, 1, 0));
    hs[t] = floe_out(floe_node_finish(b), 0);
  }
  for (int l = 0; l < m->layers; l++) {
    FloeLSTMState s = {floe_out(floe_graph_find(g, m->h_in[l]), 0),
                       floe_out(floe_graph_find(g, m->c_in[l]), 0)};
    char nm[32];
    snprintf(nm, sizeof nm, "infer/layer%d", l);
    for (int t = 0; t < T; t++) hs[t] = (s = floe_lstm_cell(g, nm, hs[t], s, m->lstm_w[l], m->lstm_b[l], NULL)).h;
    snprintf(nm, sizeof nm, "next_h%d", l);
    floe_unary(g, "Identity", nm, s.h);
    snprintf(nm, sizeof nm, "next_c%d", l);
    floe_unary(g, "Identity", nm, s.c);
  }
  const int32_t axis0 = 0;
  FloeNodeBuilder *b = floe_node_begin(g, "Concat", "infer/outputs"); /* [T*B, H] */
  floe_node_add_input_list(b, hs, T);
  floe_node_add_input(b, i32_const(g, &axis0, 1, 0));
  FloeOutput out = floe_out(floe_node_finish(b), 0);
  free(hs);
  floe_unary(g, "Identity", "logits",
             floe_binary(g, "Add", "infer/logits", floe_matmul(g, NULL, out, sw, 0, 1), sb));
}

static int build(Lm *m, LstmOptions *o, FloeRuntime *rt) {
  FloeGraph *g = floe_graph_new();
  m->g = g;
  int64_t B = o->batch, T = o->bptt, H = o->hidden, V = o->vocab;
  const int64_t dxy[2] = {B, T}, ds[2] = {B, H}, dw[2] = {V, H}, db[1] = {V};
  m->shards = (int)(o->softmax_shards ? o->softmax_shards : o->cl.spec ? o->cl.num_ps : 0);
  m->K = o->cl.sync ? (o->cl.aggregate ? o->cl.aggregate : o->cl.replicas)
         : o->cl.allreduce ? o->cl.replicas : 1;
  if (m->K > o->cl.replicas && o->cl.sync)
    return cli_error("train", "--replicas-to-aggregate %d is more than the cluster's %d "
                     "training tasks (the chief and the workers)", m->K, o->cl.replicas);
  FloeOutput x = floe_placeholder(g, "x", FLOE_I32, floe_shape_make(2, dxy));
  FloeOutput y = floe_placeholder(g, "y", FLOE_I32, floe_shape_make(2, dxy));
  FloeOutput h; /* [T,B,H] */
  if (m->shards) { /* floe_layer_embedding's table, sharded: only a window's rows are read */
    m->emb = floe_sharded_variable(g, "embed/embeddings", FLOE_F32, floe_shape_make(2, dw),
                                   floe_init_uniform(-0.05, 0.05, o->seed), 0, m->shards, 0);
    h = floe_embedding_lookup_sharded(g, "embed/lookup", &m->emb, transpose01(g, x));
  } else {
    h = floe_layer_embedding(g, "embed", transpose01(g, x), V, H, o->seed);
  }
  FloeDynamicRNNOptions ro;
  floe_dynamic_rnn_options_init(&ro);
  for (int l = 0; l < m->layers; l++) {
    char nm[64];
    snprintf(m->h_in[l], 32, "h%d", l);
    snprintf(m->c_in[l], 32, "c%d", l);
    FloeLSTMState init = {floe_placeholder(g, m->h_in[l], FLOE_F32, floe_shape_make(2, ds)),
                          floe_placeholder(g, m->c_in[l], FLOE_F32, floe_shape_make(2, ds))};
    FloeVariable w, b;
    snprintf(nm, sizeof nm, "lstm%d", l);
    floe_lstm_weights(g, nm, FLOE_F32, H, H, o->seed + 100 + l, &w, &b);
    FloeLSTMState fin;
    snprintf(nm, sizeof nm, "layer%d", l);
    h = floe_dynamic_lstm(g, nm, h, (FloeOutput){NULL, 0}, init, w.value, b.value, &ro, &fin);
    m->lstm_w[l] = w.value, m->lstm_b[l] = b.value;
    snprintf(m->h_out[l], 32, "h%d_out", l);
    snprintf(m->c_out[l], 32, "c%d_out", l);
    floe_unary(g, "Identity", m->h_out[l], fin.h);
    floe_unary(g, "Identity", m->c_out[l], fin.c);
  }
  FloeOutput hs = reshape(g, "hs", h, (const int32_t[]){-1, (int32_t)H}, 2); /* [T*B, H] */
  FloeOutput labels = reshape(g, "labels", transpose01(g, y), (const int32_t[]){-1}, 1);
  double lim = 1.0 / sqrt((double)H);
  FloeInitializer wi = floe_init_uniform(-lim, lim, o->seed + 300), bi = floe_init_zeros();
  FloeShardedVariable sw = {0}, sb = {0};
  FloeOutput wv, bv;
  if (m->shards) { /* along the vocabulary: each shard's rows live on one ps */
    sw = floe_sharded_variable(g, "softmax/w", FLOE_F32, floe_shape_make(2, dw), wi, 0, m->shards, 0);
    sb = floe_sharded_variable(g, "softmax/b", FLOE_F32, floe_shape_make(1, db), bi, 0, m->shards, 0);
    wv = sw.value, bv = sb.value;
  } else {
    wv = floe_variable(g, "softmax/w", FLOE_F32, floe_shape_make(2, dw), wi).value;
    bv = floe_variable(g, "softmax/b", FLOE_F32, floe_shape_make(1, db), bi).value;
  }
  FloeOutput logits = floe_binary(g, "Add", NULL, floe_matmul(g, NULL, hs, wv, 0, 1), bv);
  FloeOutput full = floe_sparse_softmax_cross_entropy(g, "full_xent", logits, labels);
  floe_unary(g, "Identity", "eval_loss", full);
  FloeOutput loss = full;
  if (o->sampled && m->shards)
    loss = floe_sampled_softmax_loss_sharded(g, "sampled", &sw, &sb, hs, labels, o->sampled, V, 1,
                                             o->seed + 7);
  else if (o->sampled)
    loss = floe_sampled_softmax_loss(g, "sampled", wv, bv, hs, labels, o->sampled, V, 1, o->seed + 7);
  floe_unary(g, "Identity", "loss", loss);
  if (o->export_path) build_inference(m, o, x, wv, bv);
  m->train = train_op(m, g, loss, o);
  snprintf(m->step_name, sizeof m->step_name, "%s",
           floe_node_name(floe_global_step(g).value.node));
  floe_variables_initializer(g, "init");
  train_cluster_add_broadcast(&o->cl, g); /* allreduce: every task takes the chief's values */
  if (floe_graph_status(g) != FLOE_OK)
    return cli_error("train", "building the LSTM model: %s", floe_graph_error(g, NULL));
  if (o->save_graph) {
    FloeStatus *gst = floe_status_new();
    int grc = 0;
    if (floe_graph_save(g, o->save_graph, gst) != FLOE_OK)
      grc = cli_error("train", "--save-graph %s: %s", o->save_graph, floe_status_message(gst));
    else
      printf("saved the training graph to %s (target %s, initialiser init)\n", o->save_graph,
             floe_node_name(m->train));
    floe_status_free(gst);
    return grc ? grc : -1; /* -1: stop here, successfully */
  }
  if (train_vars_collect(g, &m->vars)) return cli_error("train", "out of memory");
  if (o->cl.spec && train_cluster_place(&o->cl, g, &m->vars, "train")) return 1;
  FloeSessionOptions so;
  floe_session_options_init(&so);
  so.runtime = rt;
  so.devices = o->devices;
  train_cluster_session_options(&o->cl, &so);
  FloeStatus *st = floe_status_new();
  m->s = floe_session_new(g, &so, st);
  int rc = 0;
  if (!m->s)
    rc = train_cluster_session_failed(&o->cl, &so, st, "train");
  else if (o->cl.spec && !o->cl.is_chief && !o->cl.allreduce) /* the chief initialises them */
    rc = train_cluster_wait_ready(&o->cl, g, m->s, &m->vars, 120000, "train");
  else if (floe_session_run_opts(m->s, &m->ro, NULL, 0, NULL, 0, (const char *const[]){"init"}, 1,
                                 NULL, st) != FLOE_OK)
    rc = cli_error("train", "initialising: %s", floe_status_message(st));
  floe_status_free(st);
  return rc;
}

/* Zero states for every layer. */
static void zero_states(FloeTensor **states, int n, int64_t batch, int64_t hidden) {
  const int64_t d[2] = {batch, hidden};
  for (int i = 0; i < n; i++) {
    floe_tensor_release(states[i]);
    states[i] = floe_tensor_new(FLOE_F32, 2, d, NULL);
    if (states[i]) memset(floe_tensor_data(states[i]), 0, (size_t)(batch * hidden) * sizeof(float));
  }
}

/* One window: feeds x, y and the states; fetches the loss into *loss (and new states).
 * targets: run the training step too. 0, or 1 with the error printed. */
/* One window: feeds x, y and the states, fetches loss_name and the next states (and with
 * token, into *token sync replication's token or else the global step as the step read it),
 * runs the training step when train. Prints a failure, except FLOE_OUT_OF_RANGE for a sync
 * token (the chief closed the token queue: the end of training). */
static floe_code run_window(Lm *m, FloeTensor *x, FloeTensor *y, FloeTensor **states,
                            const char *loss_name, int train, double *loss, int64_t *token) {
  int L = m->layers;
  FloeFeed feeds[2 + 16];
  const char *fetch[1 + 16 + 1];
  FloeTensor *out[1 + 16 + 1] = {0};
  feeds[0] = (FloeFeed){"x", x};
  feeds[1] = (FloeFeed){"y", y};
  fetch[0] = loss_name;
  for (int l = 0; l < L; l++) {
    feeds[2 + 2 * l] = (FloeFeed){m->h_in[l], states[2 * l]};
    feeds[3 + 2 * l] = (FloeFeed){m->c_in[l], states[2 * l + 1]};
    fetch[1 + 2 * l] = m->h_out[l];
    fetch[2 + 2 * l] = m->c_out[l];
  }
  if (token) fetch[1 + 2 * L] = m->token_name[0] ? m->token_name : m->step_name;
  const char *targets[1] = {"train"};
  FloeStatus *st = floe_status_new();
  floe_code rc = st ? floe_session_run_opts(m->s, &m->ro, feeds, 2 + 2 * L, fetch,
                                            1 + 2 * L + (token ? 1 : 0), train ? targets : NULL,
                                            train ? 1 : 0, out, st)
                    : FLOE_NO_MEMORY;
  if (rc != FLOE_OK) {
    if (!(token && m->token_name[0] && rc == FLOE_OUT_OF_RANGE))
      cli_error("train", "%s", st ? floe_status_message(st) : "out of memory");
  } else {
    *loss = *(const float *)floe_tensor_data(out[0]);
    floe_tensor_release(out[0]);
    for (int i = 0; i < 2 * L; i++) {
      floe_tensor_release(states[i]);
      states[i] = out[1 + i];
    }
    if (token) {
      *token = *(const int64_t *)floe_tensor_data(out[1 + 2 * L]);
      floe_tensor_release(out[1 + 2 * L]);
    }
  }
  floe_status_free(st);
  return rc;
}

/* "nan", "inf" or "-inf" (printf spells a NaN "-nan" or "nan" by its sign bit). */
static const char *nonfinite_name(double x) { return isnan(x) ? "nan" : x > 0 ? "inf" : "-inf"; }

/* After the training step whose loss was not finite: the error naming the step, the loss and
 * the first variable the step left non-finite. Returns 1. */
static int g_fatal; /* a failure re-forming the cluster would not cure (divergence) */

static int report_diverged(Lm *m, const LstmOptions *o, int64_t step, double loss,
                           FloeStatus *st) {
  char desc[512];
  g_fatal = 1;
  int r = train_vars_nonfinite(m->s, &m->vars, desc, sizeof desc, st);
  if (r < 0)
    snprintf(desc, sizeof desc, "(reading the variables failed: %s)", floe_status_message(st));
  else if (r == 0)
    snprintf(desc, sizeof desc, "every variable is still finite");
  return cli_error("train", "step %lld: the loss is %s: training diverged; after the step, %s; "
                   "try a smaller --lr or --softmax-lr (this run's: %g and %g) or --clip N",
                   (long long)step, nonfinite_name(loss), desc, o->lr, o->softmax_lr);
}

/* Before the model is evaluated or exported: 0 when every variable is finite, else 1 after
 * printing an error that says when (`when`: "after epoch 2 (step 400)") and which variable. */
static int check_finite(Lm *m, const LstmOptions *o, const char *when, FloeStatus *st) {
  char desc[512];
  int r = train_vars_nonfinite(m->s, &m->vars, desc, sizeof desc, st);
  if (r < 0)
    return cli_error("train", "%s: reading the variables: %s", when, floe_status_message(st));
  if (r == 0) return 0;
  g_fatal = 1;
  return cli_error("train", "%s: training diverged: %s; try a smaller --lr or --softmax-lr "
                   "(this run's: %g and %g) or --clip N", when, desc, o->lr, o->softmax_lr);
}

/* --resume: restores the newest checkpoint of --checkpoint-dir (none yet: starts afresh, and
 * says so) into the session, its global step into *step. 0, or 1 after printing why. */
static int resume(Lm *m, const LstmOptions *o, int64_t *step, FloeStatus *st) {
  char *path = floe_checkpoint_latest(o->checkpoint_dir, NULL, st);
  if (!path) {
    if (floe_status_code(st) != FLOE_NOT_FOUND)
      return cli_error("train", "--resume: %s", floe_status_message(st));
    fprintf(stderr, "floe train: no checkpoint in %s yet: starting from scratch\n",
            o->checkpoint_dir);
    return 0;
  }
  int rc = 0;
  char when[600];
  snprintf(when, sizeof when, "--resume: checkpoint %s", path);
  if (floe_checkpoint_restore(m->s, path, step, st) != FLOE_OK)
    rc = cli_error("train", "--resume: %s", floe_status_message(st));
  else if (check_finite(m, o, when, st)) /* never train on from NaNs */
    rc = 1;
  else
    printf("resumed from %s at global step %lld\n", path, (long long)*step);
  free(path);
  return rc;
}

/* --checkpoint-dir: saves the session's variables at global step `step` (the newest 3 are
 * kept): one process, a single file; a cluster, the chief's sharded checkpoint, one global
 * step across every shard (train_cluster_checkpoint: sync, written by the update thread
 * between two updates while it runs; async, the workers paused unless all_done; allreduce,
 * its own variables), at the step the global step variable holds. 0, or 1 after printing
 * why. */
static int save_checkpoint(Lm *m, LstmOptions *o, TrainUpdater *u, TrainSaveArgs *a,
                           int64_t step, int all_done, FloeStatus *st) {
  if (!o->checkpoint_dir) return 0;
  if (o->cl.spec) return train_cluster_checkpoint(&o->cl, u, a, all_done, "train");
  if (floe_checkpoint_save(m->s, o->checkpoint_dir, NULL, step, 3, NULL, st) != FLOE_OK)
    return cli_error("train", "saving a checkpoint: %s", floe_status_message(st));
  return 0;
}

/* Held-out perplexity into *ppl: the full softmax over the first --eval-windows (0: all)
 * held-out windows, the state carried across them from zeros; *n_eval the windows evaluated.
 * 0, or 1 after printing an error. */
static int evaluate(Lm *m, const LstmOptions *o, FloeTextWindows *tew, FloeTensor **states,
                    double *ppl, int64_t *n_eval, FloeStatus *st) {
  floe_text_windows_start_epoch(tew, 0);
  zero_states(states, 2 * m->layers, o->batch, o->hidden);
  double sum = 0;
  int64_t n = 0, limit = o->eval ? o->eval : floe_text_windows_per_epoch(tew);
  for (int64_t i = 0; i < limit; i++) {
    FloeTensor *x = NULL, *y = NULL;
    int got = floe_text_windows_next_xy(tew, &x, &y, st);
    if (got == 0) break;
    if (got < 0)
      return cli_error("train", "reading the held-out windows: %s", floe_status_message(st));
    double l = 0;
    int bad = run_window(m, x, y, states, "eval_loss", 0, &l, NULL) != FLOE_OK;
    floe_tensor_release(x);
    floe_tensor_release(y);
    if (bad) return 1; /* printed */
    if (!isfinite(l))
      return cli_error("train", "held-out window %lld: the loss is %s although every variable "
                       "is finite; the model's outputs overflow: try a smaller --lr or "
                       "--softmax-lr (this run's: %g and %g) or --clip N", (long long)(i + 1),
                       nonfinite_name(l), o->lr, o->softmax_lr);
    sum += l;
    n++;
  }
  *n_eval = n;
  *ppl = n ? exp(sum / (double)n) : NAN;
  return 0;
}

/* --profile: adds the session's profile (the epoch's timed windows) to *prof. 0, or 1. */
static int merge_profile(FloeSession *s, FloeOpProfile **prof, int *nprof, FloeStatus *st) {
  FloeOpProfile *rows = NULL;
  int n = 0;
  if (floe_session_profile(s, &rows, &n, st) != FLOE_OK)
    return cli_error("train", "--profile: %s", floe_status_message(st));
  int r = train_profile_merge(prof, nprof, rows, n);
  free(rows);
  return r ? cli_error("train", "--profile: out of memory") : 0;
}

/* --profile: adds the breakdown of the windows traced since tracing started to *bd. */
static int add_breakdown(FloeSession *s, FloeStepBreakdown *bd, FloeStatus *st) {
  FloeStepBreakdown b = {.struct_size = sizeof b};
  if (floe_session_step_breakdown(s, &b, st) != FLOE_OK)
    return cli_error("train", "--profile: %s", floe_status_message(st));
  measure_breakdown_add(bd, &b);
  return 0;
}

/* Prints and names what floe train's other models do (cmd_train.c): a header line, on a
 * terminal the live progress line, after each epoch "epoch E/N loss L perplexity P words/s R
 * seconds S" (loss: the epoch's mean training loss; perplexity: held-out, evaluated then),
 * and a summary line; --json ends with one JSON line with the same keys for the same things
 * (final_loss, train_seconds, steps, wall_seconds, peak_rss_mb, ...). */
/* One training run; *reform: it failed because the cluster lost a task, and this process
 * may re-form it (train_recovering). */
static int lstm_run(int argc, char **argv, int *reform) {
  LstmOptions o;
  int done, rc = parse(argc, argv, &o, &done);
  if (rc || done) return rc;
  g_fatal = 0;
  double t_start = now_s();
  char msg[1024];
  if (o.checkpoint_dir && train_check_checkpoint_dir(o.checkpoint_dir, msg, sizeof msg))
    return cli_error("train", "%s", msg); /* before any training, not after it */
  if (o.threads) {
    /* Before the runtime loads the plugins: OpenMP (oneDNN) and OpenBLAS read these. */
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", o.threads);
    setenv("OMP_NUM_THREADS", buf, 1);
    setenv("OPENBLAS_NUM_THREADS", buf, 1);
    setenv("FLOE_NUM_THREADS", buf, 1);
  }
  FloeRuntime *rt = cli_runtime("train"); /* the process's default runtime: not freed */
  if (!rt || cli_check_plugins("train", rt) != 0) return 1;
  if (o.cl.spec) {
    if ((rc = train_cluster_start(&o.cl, rt, "train")) != 0) {
      train_cluster_free(&o.cl);
      return rc;
    }
    if (o.cl.is_ps) { /* the variables live here: serve them until the chief is done */
      printf("floe train: %s serves the variables until the chief leaves\n",
             floe_server_task(o.cl.server));
      fflush(stdout);
      rc = train_cluster_serve(&o.cl, "train");
      train_cluster_free(&o.cl);
      *reform = train_recoverable(rc, 1, 0);
      return rc;
    }
  }
  FloeStatus *st = floe_status_new();
  FloeTextCorpus *corpus = st ? floe_text_load_dir(o.data, o.vocab, 0, st) : NULL;
  if (!corpus) {
    rc = cli_error("train", "%s", st ? floe_status_message(st) : "out of memory");
    floe_status_free(st);
    train_cluster_free(&o.cl);
    return rc;
  }
  int cluster_up = o.cl.spec != NULL; /* a failure from here on may be the cluster's */
  FloeTextWindows *trw = floe_text_windows_new(corpus, FLOE_TEXT_TRAIN, o.batch, o.bptt, st);
  FloeTextWindows *tew = trw ? floe_text_windows_new(corpus, FLOE_TEXT_TEST, o.batch, o.bptt, st) : NULL;
  FloeOpProfile *prof = NULL; /* --profile: the timed windows' counts over all epochs */
  int nprof = 0;
  FloeStepBreakdown bd = {.struct_size = sizeof bd};
  TrainStepTimes times = {0, 0, NULL, 0};
  TrainUpdater updater; /* sync replication, the chief: stopped at the end */
  memset(&updater, 0, sizeof updater);
  Lm m = {.layers = (int)o.layers};
  if (!trw || !tew) {
    rc = cli_error("train", "%s", floe_status_message(st));
    goto out_corpus;
  }
  floe_run_options_init(&m.ro);
  m.ro.timeout_ms = o.timeout_ms;
  char names[4][8][32];
  m.h_in = names[0], m.c_in = names[1], m.h_out = names[2], m.c_out = names[3];
  if ((rc = build(&m, &o, rt)) != 0) {
    if (rc < 0) rc = 0; /* --save-graph: done */
    goto out_model;
  }
  int cluster = o.cl.spec != NULL, sync = o.cl.sync, allreduce = o.cl.allreduce;
  int is_worker = cluster && !o.cl.is_chief;
  int replicas = cluster ? o.cl.replicas : 1, me = cluster ? o.cl.replica : 0;
  int64_t global_step = 0;
  /* Where training goes on from: the restored checkpoint's global step (the chief, or one
   * process, with --resume), the shared one once the chief is ready (a worker), or zero;
   * under allreduce, the chief's (its variables broadcast to every task). */
  if (is_worker && !allreduce) { /* where the chief started, not where it is now */
    if (train_cluster_start_step(&o.cl, 120000, &global_step, "train")) {
      rc = 1;
      goto out_model;
    }
  } else if (!is_worker && o.resume && (rc = resume(&m, &o, &global_step, st)) != 0) {
    goto out_model;
  }
  if (cluster && !is_worker && !allreduce &&
      train_cluster_publish_start(&o.cl, global_step, "train")) {
    rc = 1;
    goto out_model;
  }
  if (train_cluster_broadcast(&o.cl, m.s, &m.ro, m.step_name, &global_step, "train")) {
    rc = 1; /* allreduce: every task starts from the chief's variables */
    goto out_model;
  }
  if (sync && floe_session_run_opts(m.s, &m.ro, NULL, 0, NULL, 0,
                                    (const char *const[]){m.local_init}, 1, NULL, st) != FLOE_OK) {
    rc = cli_error("train", "setting the local step: %s", floe_status_message(st));
    goto out_model;
  }
  if (sync && o.cl.is_chief && train_updater_start(&updater, m.s, m.update_name, "train")) {
    rc = 1;
    goto out_model;
  }
  int tty = isatty(STDOUT_FILENO);
  int64_t per_epoch = floe_text_windows_per_epoch(trw), words = o.batch * o.bptt;
  int64_t total = o.steps ? o.steps : o.epochs * per_epoch;
  int epochs = (int)((total + per_epoch - 1) / per_epoch); /* the last may be cut by --steps */
  /* Where the shared global step ends: sync, K windows per global step; else one a window. */
  int64_t end_gs = sync ? (total / m.K > 0 ? total / m.K : 1) : total;
  int64_t start = sync ? global_step * m.K : global_step; /* windows done */
  if (start > total) start = total;
  /* allreduce: a collective waits for every task, so every task runs the same steps: task r
   * takes windows [r n / R, r n / R + n / R) of each epoch's n (its state carried), one
   * global step is R windows (one a task), and the n mod R windows at the ends of the
   * longer parts are left out. start counts global steps here. */
  int64_t ar_steps = allreduce ? per_epoch / replicas : 0; /* global steps per epoch */
  if (allreduce) {
    if (ar_steps < 1) {
      rc = cli_error("train", "the training split gives %lld windows per epoch at --batch %lld "
                     "--bptt %lld, fewer than the %d training tasks, so --replication allreduce "
                     "has no step for every task: use a smaller --batch or --bptt, or fewer "
                     "tasks", (long long)per_epoch, o.batch, o.bptt, replicas);
      goto out_model;
    }
    end_gs = o.steps ? (o.steps / replicas > 0 ? o.steps / replicas : 1) : o.epochs * ar_steps;
    start = global_step < end_gs ? global_step : end_gs;
    epochs = (int)((end_gs + ar_steps - 1) / ar_steps);
  }
  int64_t train_words = 0, test_words = 0;
  floe_text_ids(corpus, FLOE_TEXT_TRAIN, &train_words);
  floe_text_ids(corpus, FLOE_TEXT_TEST, &test_words);
  double unigram = floe_text_unigram_perplexity(corpus, FLOE_TEXT_TEST);
  char plan[96];
  if (o.steps)
    snprintf(plan, sizeof plan, "%lld steps (%lld per epoch)", (long long)total, (long long)per_epoch);
  else
    snprintf(plan, sizeof plan, "%d epoch%s of %lld steps", epochs, epochs == 1 ? "" : "s",
             (long long)per_epoch);
  printf("floe train: lstm on fortunes (%lld training, %lld test words), adam, constant "
         "learning rate, batch %lld x %lld words, %s, %lld layer%s of %lld, vocab %lld, %s "
         "softmax\n",
         (long long)train_words, (long long)test_words, o.batch, o.bptt, plan, o.layers,
         o.layers == 1 ? "" : "s", o.hidden, o.vocab, o.sampled ? "sampled" : "full");
  if (cluster && allreduce)
    printf("on a cluster: %s, training task %d of %d, allreduce replication (no ps tasks, "
           "every variable whole on every task): %lld global steps of %d windows, %lld an "
           "epoch; this task takes windows [%lld, %lld) of each epoch's %lld, %lld left out "
           "an epoch\n",
           floe_server_task(o.cl.server), o.cl.replica + 1, replicas, (long long)end_gs,
           replicas, (long long)ar_steps, (long long)(per_epoch * me / replicas),
           (long long)(per_epoch * me / replicas + ar_steps), (long long)per_epoch,
           (long long)(per_epoch - ar_steps * replicas));
  else if (cluster)
    printf("on a cluster: %s, training task %d of %d, %d ps task%s, %s replication, "
           "embedding and softmax in %d shard%s\n",
           floe_server_task(o.cl.server), o.cl.replica + 1, o.cl.replicas, o.cl.num_ps,
           o.cl.num_ps == 1 ? "" : "s", sync ? "sync" : "async", m.shards,
           m.shards == 1 ? "" : "s");
  fflush(stdout);
  TrainSplit split; /* --cluster with --json: each training window's step split */
  int splitting = cluster && o.json;
  if (splitting) train_split_init(&split, m.s, o.profile || o.trace);
  /* --checkpoint-dir on a cluster: the chief's saves; async workers pause between steps for
   * them */
  TrainSaveArgs save_args = {m.s, o.checkpoint_dir, m.step_name, &m.vars, 0};
  int pausing = is_worker && o.checkpoint_dir && !sync && !allreduce;
  train_sigint_install();
  FloeTensor *states[16] = {0};
  double final_loss = NAN, last_loss = NAN, train_secs = 0, ppl = NAN;
  int64_t timed_words = 0, timed_steps = 0, n_eval = 0, my_steps = 0;
  /* One process: exactly the windows from start to total. A cluster: every task goes on
   * through its part of each epoch's windows until the global step says the end (sync: the
   * token; async: the global step its window read), however fast the others are. */
  int finished = allreduce ? start >= end_gs : start >= total && !cluster;
  int first_epoch = (int)(allreduce ? start / ar_steps : start / per_epoch);
  for (int e = first_epoch; cluster ? !finished : e < epochs; e++) {
    /* This epoch's windows from base, and this task's contiguous part of them (its state
     * carries from window to window). */
    int64_t first = (int64_t)e * per_epoch, n = total - first < per_epoch ? total - first : per_epoch;
    if (cluster || n < 1) n = per_epoch;
    int64_t base = e == first_epoch ? start % per_epoch : 0;
    if (base > n) base = n;
    int64_t lo = base + (n - base) * me / replicas, hi = base + (n - base) * (me + 1) / replicas;
    if (allreduce) { /* the same number of windows on every task, ending at end_gs */
      lo = per_epoch * me / replicas + (e == first_epoch ? start % ar_steps : 0);
      hi = per_epoch * me / replicas + ar_steps;
    }
    double loss_sum = 0, epoch_secs = 0, last_draw = 0;
    int64_t epoch_words = 0, done_here = 0;
    int recording = 0;
    floe_text_windows_start_epoch(trw, lo);
    zero_states(states, 2 * m.layers, o.batch, o.hidden); /* each epoch starts from zeros */
    for (int64_t j = lo; j < hi && !finished; j++) {
      FloeTensor *x = NULL, *y = NULL;
      if (floe_text_windows_next_xy(trw, &x, &y, st) != 1) {
        if (tty) printf("\n");
        rc = cli_error("train", "reading the training windows: %s", floe_status_message(st));
        goto out_states;
      }
      /* The first window builds the executor: neither timed nor profiled nor traced. */
      if ((o.profile || o.trace) && my_steps >= 1 && !recording) {
        recording = 1;
        if (o.profile) floe_session_set_profiling(m.s, 1);
        floe_session_set_tracing(m.s, o.trace && timed_steps > 0 ? FLOE_TRACE_RESUME : FLOE_TRACE_START);
      }
      if (pausing && train_cluster_pause_point(&o.cl, "train")) {
        floe_tensor_release(x);
        floe_tensor_release(y);
        rc = 1;
        goto out_states;
      }
      if (cluster) {
        train_cluster_straggle(&o.cl); /* FLOE_TEST_STEP_DELAY_MEAN_MS: an injected straggler */
        train_cluster_count_begin(&o.cl);
      }
      double t0 = now_s();
      double loss = 0;
      int64_t token = 0;
      if (splitting) train_split_begin(&split, &m.ro);
      int64_t live0 = train_step_mem_begin();
      floe_code c = run_window(&m, x, y, states, "loss", 1, &loss, cluster ? &token : NULL);
      train_step_mem_end(&times, live0);
      double dt = now_s() - t0;
      if (splitting) train_split_end(&split, &m.ro, c == FLOE_OK);
      if (cluster) train_cluster_count_end(&o.cl);
      floe_tensor_release(x);
      floe_tensor_release(y);
      if (c == FLOE_OUT_OF_RANGE && sync && is_worker) { /* the chief closed the tokens */
        finished = 1;
        break;
      }
      if (c != FLOE_OK || !isfinite(loss)) {
        if (tty) printf("\n");
        if (c == FLOE_OUT_OF_RANGE && sync) cli_error("train", "the token queue was closed");
        if (c == FLOE_OK) report_diverged(&m, &o, (cluster ? my_steps : global_step) + 1, loss, st);
        rc = 1;
        goto out_states;
      }
      if (sync) {
        global_step = token;
        if (token >= end_gs) finished = 1;
      } else if (allreduce) { /* every task's global step moves alike, one a step */
        if (++global_step >= end_gs) finished = 1;
      } else if (cluster) { /* read before this step's increment: it makes the end */
        global_step = token + 1;
        if (global_step >= end_gs) finished = 1;
      } else {
        global_step++;
      }
      if (train_step_times_add(&times, dt)) {
        rc = cli_error("train", "out of memory");
        goto out_states;
      }
      if (my_steps > 0 || total == 1) {
        epoch_secs += dt;
        epoch_words += words;
        timed_steps++;
      }
      my_steps++;
      done_here++;
      loss_sum += loss;
      last_loss = loss;
      if (cluster) { /* recovery: its time, and the test hook that kills a task */
        if (o.cl.is_chief && my_steps == 1 && train_recoveries() > 0)
          fprintf(stderr, "floe train: recovery %d in this process: the first step after "
                  "recovery ended at global step %lld, %.3f s after the failure\n",
                  train_recoveries(), (long long)global_step, train_recovery_seconds());
        else if (o.cl.is_chief && my_steps == 1 && train_restart_count() > 0)
          fprintf(stderr, "floe train: restart %d: the first step after recovery ended at global "
                  "step %lld, %.3f s after this process started\n", train_restart_count(),
                  (long long)global_step, now_s() - t_start);
        train_cluster_test_kill(&o.cl, global_step);
      }
      if (train_sigint_pending()) {
        if (tty) printf("\n");
        rc = cli_error("train", "interrupted at this task's step %lld", (long long)my_steps);
        goto out_states;
      }
      double now = now_s();
      if (tty && (now - last_draw >= 0.1 || j + 1 == hi)) {
        train_progress(e + 1, epochs, (j + 1 - lo) * words, (hi - lo) * words,
                       epoch_secs > 0 ? (double)epoch_words / epoch_secs : 0, "words/s",
                       loss_sum / (double)(j + 1 - lo));
        last_draw = now;
      }
    }
    if (recording) { /* evaluation is not training: stop recording for it */
      if (o.profile) {
        floe_session_set_profiling(m.s, 0);
        if (merge_profile(m.s, &prof, &nprof, st)) {
          rc = 1;
          goto out_states;
        }
      }
      floe_session_set_tracing(m.s, FLOE_TRACE_OFF);
      if (o.profile && !o.trace && add_breakdown(m.s, &bd, st)) {
        rc = 1;
        goto out_states;
      }
    }
    train_secs += epoch_secs;
    timed_words += epoch_words;
    if (done_here) final_loss = loss_sum / (double)done_here;
    int last = cluster ? finished : e + 1 == epochs;
    /* The chief evaluates once everything is applied (allreduce: after each epoch, as one
     * process does: its variables are every task's). */
    if (cluster && (is_worker || (!last && !allreduce))) {
      if (tty) printf("\r\033[K");
      if (!is_worker && save_checkpoint(&m, &o, &updater, &save_args, 0, 0, st)) {
        rc = 1; /* the chief: a checkpoint each epoch */
        goto out_states;
      }
      printf("epoch %d/%d loss %.6f words/s %.0f seconds %.2f (this task's share)\n", e + 1,
             epochs, final_loss, epoch_secs > 0 ? (double)epoch_words / epoch_secs : 0.0,
             epoch_secs);
      fflush(stdout);
      continue;
    }
    if (allreduce &&
        train_fetch_global_step(m.s, &m.ro, m.step_name, &global_step, st)) { /* its own */
      rc = cli_error("train", "reading the global step: %s", floe_status_message(st));
      goto out_states;
    }
    if (cluster && !allreduce) { /* the chief, at the end: every task's windows in first */
      if (sync) {
        if (train_updater_stop(&updater, "train")) {
          rc = 1;
          goto out_states;
        }
        if (floe_session_run_opts(m.s, &m.ro, NULL, 0, NULL, 0,
                                  (const char *const[]){m.close_name}, 1, NULL, st) != FLOE_OK) {
          rc = cli_error("train", "closing the token queue: %s", floe_status_message(st));
          goto out_states;
        }
      }
      if (train_wait_global_step(m.s, &m.ro, m.step_name, end_gs, &global_step, st, "train")) {
        rc = 1;
        goto out_states;
      }
    }
    char when[64];
    snprintf(when, sizeof when, "after epoch %d (%sstep %lld)", e + 1, allreduce ? "global " : "",
             (long long)(allreduce ? global_step : first + n));
    if (check_finite(&m, &o, when, st)) { /* the last update overflowed: a finite loss before it */
      if (tty) printf("\n");
      rc = 1;
      goto out_states;
    }
    if (tty) printf("  testing..."), fflush(stdout);
    if (evaluate(&m, &o, tew, states, &ppl, &n_eval, st)) {
      if (tty) printf("\n");
      rc = 1;
      goto out_states;
    }
    if (tty) printf("\r\033[K"); /* the same line as a pipe gets, over the live one */
    printf("epoch %d/%d loss %.6f perplexity %.1f words/s %.0f seconds %.2f\n", e + 1, epochs,
           final_loss, ppl, epoch_secs > 0 ? (double)epoch_words / epoch_secs : 0.0, epoch_secs);
    fflush(stdout);
    if (save_checkpoint(&m, &o, &updater, &save_args, global_step, last, st)) {
      rc = 1;
      goto out_states;
    }
  }
  if (pausing) train_cluster_worker_done(&o.cl);
  if (!is_worker && isnan(ppl) && evaluate(&m, &o, tew, states, &ppl, &n_eval, st)) {
    rc = 1; /* resumed at the end: nothing trained, the model still tested */
    goto out_states;
  }
  if (is_worker) {
    /* The session goes first (its pieces on the ps tasks are dropped); the server stays up
     * for the chief: a task that left would count as lost and end the chief's steps. */
    printf("floe train: %s done: %lld steps, p50 step %.2f ms; serving until the chief "
           "leaves\n", floe_server_task(o.cl.server), (long long)my_steps,
           train_step_times_quantile(&times, 0.5) * 1e3);
    if (o.json && /* this task's own line (under floe launch, on launch's stderr) */
        train_cluster_worker_json(&o.cl, "lstm", my_steps, "words_per_sec",
                                  train_secs > 0 ? timed_words / train_secs : 0, train_secs,
                                  &times, m.K, -1, &split, m.s, &m.vars, "train")) {
      rc = 1;
      goto out_states;
    }
    fflush(stdout);
    floe_session_free(m.s);
    m.s = NULL;
    rc = train_cluster_serve(&o.cl, "train");
    goto out_states;
  }
  if (o.trace) {
    if (o.profile && add_breakdown(m.s, &bd, st)) {
      rc = 1;
      goto out_states;
    }
    if (floe_session_trace_write(m.s, o.trace, st) != FLOE_OK) {
      rc = cli_error("train", "--trace: %s", floe_status_message(st));
      goto out_states;
    }
  }
  if (o.export_path) {
    char out_names[1 + 16][32];
    const char *outs[1 + 16] = {"logits"};
    for (int l = 0; l < m.layers; l++) {
      snprintf(out_names[1 + 2 * l], 32, "next_h%d", l);
      snprintf(out_names[2 + 2 * l], 32, "next_c%d", l);
      outs[1 + 2 * l] = out_names[1 + 2 * l];
      outs[2 + 2 * l] = out_names[2 + 2 * l];
    }
    if (floe_export_frozen(m.s, outs, 1 + 2 * m.layers, o.export_path, st) != FLOE_OK) {
      rc = cli_error("train", "--export %s: %s", o.export_path, floe_status_message(st));
      goto out_states;
    }
    printf("exported the inference graph (inputs x, h<l>, c<l>; outputs logits, next_h<l>, "
           "next_c<l>) to %s\n", o.export_path);
  }
  double wps = train_secs > 0 ? (double)timed_words / train_secs : 0;
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  double rss_mb = (double)ru.ru_maxrss / 1024.0, wall = now_s() - t_start;
  int64_t profiled = my_steps - 1; /* the windows timed by --profile: all but the first */
  train_profile_sort(prof, nprof);
  FloeTransferStats xs = {.struct_size = sizeof xs};
  floe_session_transfer_stats(m.s, &xs, NULL);
  if (o.json) {
    JsonWriter w;
    json_init(&w, stdout);
    json_begin_object(&w);
    json_key(&w, "model"), json_string(&w, "lstm");
    json_key(&w, "epochs"), json_int(&w, epochs);
    json_key(&w, "batch"), json_int(&w, o.batch);
    json_key(&w, "optimizer"), json_string(&w, "adam");
    json_key(&w, "seed"), json_int(&w, o.seed);
    json_key(&w, "lr_schedule"), json_string(&w, "constant");
    json_key(&w, "lr"), json_double(&w, o.lr);
    json_key(&w, "softmax_lr"), json_double(&w, o.softmax_lr);
    json_key(&w, "clip"), json_double(&w, o.clip);
    json_key(&w, "threads");
    if (o.threads) json_int(&w, o.threads);
    else json_null(&w); /* the runtime's default: FLOE_NUM_THREADS or every core */
    json_key(&w, "train_words"), json_int(&w, train_words);
    json_key(&w, "test_words"), json_int(&w, test_words);
    json_key(&w, "layers"), json_int(&w, o.layers);
    json_key(&w, "hidden"), json_int(&w, o.hidden);
    json_key(&w, "vocab"), json_int(&w, o.vocab);
    json_key(&w, "bptt"), json_int(&w, o.bptt);
    json_key(&w, "softmax"), json_string(&w, o.sampled ? "sampled" : "full");
    json_key(&w, "sampled"), json_int(&w, o.sampled);
    json_key(&w, "words_per_sec"), json_double(&w, wps);
    json_key(&w, "train_seconds"), json_double(&w, train_secs);
    json_key(&w, "perplexity"), json_double(&w, ppl);
    json_key(&w, "unigram_perplexity"), json_double(&w, unigram);
    json_key(&w, "eval_windows"), json_int(&w, n_eval);
    json_key(&w, "final_loss"), json_double(&w, final_loss);
    json_key(&w, "last_loss"), json_double(&w, last_loss);
    json_key(&w, "wall_seconds"), json_double(&w, wall);
    json_key(&w, "peak_rss_mb"), json_double(&w, rss_mb);
    json_key(&w, "step_peak_tensor_mb"), json_double(&w, times.peak_bytes / 1048576.0);
    if (o.devices) {
      json_key(&w, "devices"), json_string(&w, o.devices);
      json_key(&w, "transfers"), json_int(&w, xs.transfers);
      json_key(&w, "transfer_wire_bytes"), json_int(&w, xs.wire_bytes);
      json_key(&w, "transfer_tensor_bytes"), json_int(&w, xs.tensor_bytes);
    }
    if (o.profile) {
      json_key(&w, "profile"), measure_profile_json(&w, prof, nprof);
      json_key(&w, "breakdown"), measure_breakdown_json(&w, &bd);
    }
    json_key(&w, "steps"), json_int(&w, my_steps);
    json_key(&w, "softmax_shards"), json_int(&w, m.shards);
    json_key(&w, "step_time_p50_ms"), json_double(&w, train_step_times_quantile(&times, 0.5) * 1e3);
    json_key(&w, "step_time_p90_ms"), json_double(&w, train_step_times_quantile(&times, 0.9) * 1e3);
    if (cluster) {
      int64_t stale = -1;
      if (sync) {
        FloeTensor *sv = NULL;
        if (floe_session_run_opts(m.s, &m.ro, NULL, 0, (const char *const[]){m.stale_name}, 1,
                                  NULL, 0, &sv, st) == FLOE_OK)
          stale = *(const int64_t *)floe_tensor_data(sv);
        floe_tensor_release(sv);
      }
      json_key(&w, "global_step"), json_int(&w, global_step);
      train_cluster_json(&w, &o.cl, my_steps, m.K, stale);
      if (train_cluster_checksum_json(&w, &o.cl, m.s, &m.vars, "train")) rc = 1;
      json_key(&w, "step_split_ms"), train_split_json(&w, &split);
    }
    if (o.trace) json_key(&w, "trace"), json_string(&w, o.trace);
    json_end_object(&w);
    json_finish(&w);
  } else {
    printf("perplexity %.1f unigram_perplexity %.1f words/s %.0f wall_seconds %.1f peak_rss_mb "
           "%.0f\n", ppl, unigram, wps, wall, rss_mb);
    if (o.devices)
      printf("across devices (%s): %lld values, %.1f MB moved (%.1f MB as f32 tensors)\n",
             o.devices, (long long)xs.transfers, xs.wire_bytes / 1048576.0,
             xs.tensor_bytes / 1048576.0);
    if (o.profile) {
      train_profile_print(stderr, prof, nprof, profiled, train_secs);
      measure_breakdown_print(stderr, &bd);
    }
    if (o.trace)
      printf("trace of %lld training steps written to %s\n", (long long)profiled, o.trace);
  }
  if (rc == 0 && cluster) train_cluster_finish(&o.cl); /* the others stop, not re-form */
out_states:
  for (int i = 0; i < 16; i++) floe_tensor_release(states[i]);
out_model:
  if (updater.started && train_updater_stop(&updater, "train") && rc == 0) rc = 1;
  train_vars_free(&m.vars);
  floe_session_free(m.s);
  train_cluster_free(&o.cl); /* after the session (it may have made the server's transport) */
  floe_graph_free(m.g);
out_corpus:
  free(times.v);
  free(prof);
  floe_text_windows_free(trw);
  floe_text_windows_free(tew);
  floe_text_corpus_free(corpus);
  floe_status_free(st);
  *reform = train_recoverable(rc, cluster_up, g_fatal);
  return rc;
}

int cmd_train_lstm(int argc, char **argv) { return train_recovering(lstm_run, argc, argv); }
