/* SPDX-License-Identifier: Apache-2.0 */
/* bench_lstm.c - one LSTM cell step through a Floe session, the fused LSTMCell op against the
 * same cell built from primitive ops (floe_lstm_cell with FLOE_LSTM_FUSED_ALWAYS / _NEVER),
 * f32, on the same inputs in the same process: forward alone (fetch h and c) and forward +
 * backward (fetch the gradients at x, h, c, w and b of sum(h) + sum(c)). Repetitions rotate
 * between the two forms; reported per form: the median and fastest wall time of a step and
 * the median process CPU time (all threads; on a shared machine the least disturbed
 * measure of the work done), and ratios = primitive / fused (> 1: the fused cell is
 * faster). The two forms' outputs are compared once (max |difference|).
 *
 *   bench_lstm [--reps N] [--json]
 */
#include <floe/floe.h>

#include "bench_util.h"
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct Case {
  const char *name;
  int64_t batch, in, hid;
} Case;

enum { FUSED, PRIMITIVE, FORMS };
enum { FWD, FWD_BWD, KINDS };
enum { NUM_OUT = 7 }; /* h, c and the five gradients */

typedef struct Form {
  FloeGraph *g;
  FloeSession *s;
  char names[NUM_OUT][160];
  const char *fetches[NUM_OUT];
} Form;

static FloeStatus *st;

static void die(const char *what, const char *msg) {
  fprintf(stderr, "bench_lstm: %s: %s\n", what, msg);
  exit(1);
}

static void fill(float *p, int64_t n, uint32_t seed, float scale) {
  for (int64_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    p[i] = ((float)(seed >> 8) * (1.0f / 16777216.0f) - 0.5f) * 2.0f * scale;
  }
}

static const char *const ph[5] = {"x", "h", "c", "w", "b"};

static void form_build(Form *f, const Case *c, FloeLSTMFused fused) {
  f->g = floe_graph_new();
  int64_t dims[5][2] = {{c->batch, c->in},
                        {c->batch, c->hid},
                        {c->batch, c->hid},
                        {c->in + c->hid, 4 * c->hid},
                        {4 * c->hid, 0}};
  FloeOutput in[5], d[5];
  for (int k = 0; k < 5; k++)
    in[k] = floe_placeholder(f->g, ph[k], FLOE_F32, floe_shape_make(k == 4 ? 1 : 2, dims[k]));
  FloeLSTMOptions o;
  floe_lstm_options_init(&o);
  o.fused = fused;
  FloeLSTMState prev = {in[1], in[2]};
  FloeLSTMState s = floe_lstm_cell(f->g, "cell", in[0], prev, in[3], in[4], &o);
  FloeOutput ys[2] = {s.h, s.c};
  if (floe_graph_status(f->g) != FLOE_OK ||
      floe_gradients(f->g, ys, 2, in, 5, NULL, d, st) != FLOE_OK)
    die("graph", floe_graph_error(f->g, NULL));
  FloeOutput outs[NUM_OUT] = {s.h, s.c, d[0], d[1], d[2], d[3], d[4]};
  for (int k = 0; k < NUM_OUT; k++) {
    snprintf(f->names[k], sizeof f->names[k], "%s:%d", floe_node_name(outs[k].node),
             outs[k].index);
    f->fetches[k] = f->names[k];
  }
  f->s = floe_session_new(f->g, NULL, st);
  if (!f->s) die("session", floe_status_message(st));
}

static void form_free(Form *f) {
  floe_session_free(f->s);
  floe_graph_free(f->g);
}

static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Runs one step of kind (forward: the first two fetches); returns wall seconds and sets
 * *cpu to the process CPU seconds. outs may be NULL (released here). */
static double step(Form *f, const FloeFeed *feeds, int kind, FloeTensor **outs, double *cpu) {
  int n = kind == FWD ? 2 : NUM_OUT;
  FloeTensor *tmp[NUM_OUT];
  FloeTensor **o = outs ? outs : tmp;
  double c0 = cpu_now(), t0 = bench_now();
  if (floe_session_run(f->s, feeds, 5, f->fetches, n, NULL, 0, o, st) != FLOE_OK)
    die("run", floe_status_message(st));
  double dt = bench_now() - t0;
  if (cpu) *cpu = cpu_now() - c0;
  if (!outs)
    for (int k = 0; k < n; k++) floe_tensor_release(o[k]);
  return dt;
}

typedef struct Result {
  double median_ms[FORMS][KINDS], min_ms[FORMS][KINDS], cpu_ms[FORMS][KINDS];
  double max_diff;
  FloeStepBreakdown bd[FORMS][KINDS]; /* of 3 more steps of each, traced */
} Result;

static double max_abs_diff(FloeTensor *const *a, FloeTensor *const *b, int n) {
  double m = 0;
  for (int k = 0; k < n; k++) {
    const float *pa = floe_tensor_data(a[k]), *pb = floe_tensor_data(b[k]);
    for (int64_t i = 0; i < floe_tensor_num_elements(a[k]); i++)
      m = fmax(m, fabs((double)pa[i] - pb[i]));
  }
  return m;
}

static void bench_case(const Case *c, int reps, Result *res) {
  Form forms[FORMS];
  form_build(&forms[FUSED], c, FLOE_LSTM_FUSED_ALWAYS);
  form_build(&forms[PRIMITIVE], c, FLOE_LSTM_FUSED_NEVER);
  int64_t dims[5][2] = {{c->batch, c->in},
                        {c->batch, c->hid},
                        {c->batch, c->hid},
                        {c->in + c->hid, 4 * c->hid},
                        {4 * c->hid, 0}};
  FloeTensor *vals[5];
  FloeFeed feeds[5];
  for (int k = 0; k < 5; k++) {
    vals[k] = floe_tensor_new(FLOE_F32, k == 4 ? 1 : 2, dims[k], st);
    if (!vals[k]) die("tensor", floe_status_message(st));
    float scale = k == 3 ? 1.0f / sqrtf((float)(c->in + c->hid)) : 1.0f;
    fill(floe_tensor_data(vals[k]), floe_tensor_num_elements(vals[k]), (uint32_t)k + 1, scale);
    feeds[k] = (FloeFeed){ph[k], vals[k]};
  }
  FloeTensor *o[FORMS][NUM_OUT];
  for (int f = 0; f < FORMS; f++) step(&forms[f], feeds, FWD_BWD, o[f], NULL);
  res->max_diff = max_abs_diff(o[FUSED], o[PRIMITIVE], NUM_OUT);
  for (int f = 0; f < FORMS; f++)
    for (int k = 0; k < NUM_OUT; k++) floe_tensor_release(o[f][k]);

  double *t[FORMS][KINDS], *cpu[FORMS][KINDS];
  for (int f = 0; f < FORMS; f++)
    for (int k = 0; k < KINDS; k++) {
      t[f][k] = malloc((size_t)reps * sizeof(double));
      cpu[f][k] = malloc((size_t)reps * sizeof(double));
    }
  for (int r = -2; r < reps; r++) /* two untimed warm-up rounds */
    for (int kind = 0; kind < KINDS; kind++)
      for (int i = 0; i < FORMS; i++) {
        int f = (i + (r < 0 ? 0 : r)) % FORMS; /* rotate which goes first */
        double used, dt = step(&forms[f], feeds, kind, NULL, &used);
        if (r >= 0) t[f][kind][r] = dt, cpu[f][kind][r] = used;
      }
  for (int f = 0; f < FORMS; f++)
    for (int k = 0; k < KINDS; k++) {
      res->median_ms[f][k] = bench_median(t[f][k], reps) * 1e3; /* sorts: [0] is the fastest */
      res->min_ms[f][k] = t[f][k][0] * 1e3;
      res->cpu_ms[f][k] = bench_median(cpu[f][k], reps) * 1e3;
      free(t[f][k]);
      free(cpu[f][k]);
    }
  /* Where a step's time goes, from 3 more steps of each, traced (the timed ones were not). */
  for (int f = 0; f < FORMS; f++)
    for (int k = 0; k < KINDS; k++) {
      BenchStep one = {forms[f].s, feeds, 5, forms[f].fetches, k == FWD ? 2 : NUM_OUT, NULL, 0};
      if (bench_breakdown(forms[f].s, bench_step_run, &one, 3, &res->bd[f][k])) exit(1);
    }
  for (int k = 0; k < 5; k++) floe_tensor_release(vals[k]);
  for (int f = 0; f < FORMS; f++) form_free(&forms[f]);
}

static void usage(FILE *out) {
  fprintf(out,
          "usage: bench_lstm [--reps N] [--json]\n"
          "  One LSTM cell step (f32) through a session, fused LSTMCell vs primitive ops,\n"
          "  forward and forward + backward, at B=64 I=H=512 and B=20 I=H=512.\n"
          "  --reps N   timed repetitions of each (default 30)\n"
          "  --json     print one JSON object instead of text\n");
}

int main(int argc, char **argv) {
  int reps = 30, json = 0;
  static const struct option opts[] = {{"reps", required_argument, NULL, 'r'},
                                       {"json", no_argument, NULL, 'j'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  for (int c; (c = getopt_long(argc, argv, "r:jh", opts, NULL)) != -1;) {
    switch (c) {
      case 'r': reps = atoi(optarg); break;
      case 'j': json = 1; break;
      case 'h': usage(stdout); return 0;
      default: usage(stderr); return 2;
    }
  }
  if (reps < 1) {
    fprintf(stderr, "bench_lstm: --reps must be positive\n");
    return 2;
  }
  const Case cases[] = {{"B=64 I=H=512", 64, 512, 512}, {"B=20 I=H=512", 20, 512, 512}};
  enum { NUM_CASES = sizeof cases / sizeof cases[0] };
  static const char *const kinds[KINDS] = {"forward", "forward+backward"};
  st = floe_status_new();
  Result res[NUM_CASES];
  for (int i = 0; i < NUM_CASES; i++) bench_case(&cases[i], reps, &res[i]);

  if (json)
    printf("{\"bench\": \"lstm\", \"dtype\": \"f32\", \"reps\": %d, \"cases\": [", reps);
  else
    printf("LSTM cell step f32, %d reps: wall ms median (fastest), median CPU ms;\n"
           "ratios primitive / fused of the wall median, fastest wall, median CPU\n"
           "%-14s %-17s %26s %26s %6s %6s %6s %9s\n",
           reps, "case", "kind", "fused              ", "primitive            ", "wall",
           "min", "cpu", "max|diff|");
  for (int i = 0; i < NUM_CASES; i++) {
    const Result *r = &res[i];
    for (int k = 0; k < KINDS; k++) {
      double ratio = r->median_ms[PRIMITIVE][k] / r->median_ms[FUSED][k];
      double min_ratio = r->min_ms[PRIMITIVE][k] / r->min_ms[FUSED][k];
      double cpu_ratio = r->cpu_ms[PRIMITIVE][k] / r->cpu_ms[FUSED][k];
      if (json)
        printf("%s{\"case\": \"%s\", \"batch\": %lld, \"input\": %lld, \"hidden\": %lld, "
               "\"kind\": \"%s\", \"fused_ms\": %.4f, \"primitive_ms\": %.4f, \"ratio\": %.4f, "
               "\"fused_min_ms\": %.4f, \"primitive_min_ms\": %.4f, \"min_ratio\": %.4f, "
               "\"fused_cpu_ms\": %.4f, \"primitive_cpu_ms\": %.4f, \"cpu_ratio\": %.4f, "
               "\"max_abs_diff\": %.3g, \"fused_breakdown\": ",
               i || k ? ", " : "", cases[i].name, (long long)cases[i].batch,
               (long long)cases[i].in, (long long)cases[i].hid, kinds[k],
               r->median_ms[FUSED][k], r->median_ms[PRIMITIVE][k], ratio, r->min_ms[FUSED][k],
               r->min_ms[PRIMITIVE][k], min_ratio, r->cpu_ms[FUSED][k],
               r->cpu_ms[PRIMITIVE][k], cpu_ratio, r->max_diff);
      if (json) {
        bench_breakdown_json(stdout, &r->bd[FUSED][k]);
        printf(", \"primitive_breakdown\": ");
        bench_breakdown_json(stdout, &r->bd[PRIMITIVE][k]);
        printf("}");
      } else
        printf("%-14s %-17s %8.3f (%7.3f) %7.3f %8.3f (%7.3f) %7.3f %6.2f %6.2f %6.2f %9.2g\n",
               cases[i].name, kinds[k], r->median_ms[FUSED][k], r->min_ms[FUSED][k],
               r->cpu_ms[FUSED][k], r->median_ms[PRIMITIVE][k], r->min_ms[PRIMITIVE][k],
               r->cpu_ms[PRIMITIVE][k], ratio, min_ratio, cpu_ratio, r->max_diff);
    }
  }
  if (json) printf("]}\n");
  else
    for (int i = 0; i < NUM_CASES; i++)
      for (int k = 0; k < KINDS; k++)
        for (int f = 0; f < FORMS; f++) {
          char what[96];
          snprintf(what, sizeof what, "%s %s %s (traced)", cases[i].name, kinds[k],
                   f == FUSED ? "fused" : "primitive");
          bench_breakdown_print(stdout, what, &res[i].bd[f][k]);
        }
  floe_status_free(st);
  return 0;
}
