/* SPDX-License-Identifier: Apache-2.0 */
/* measure.c - see measure.h. */
#include "measure.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void measure_breakdown_add(FloeStepBreakdown *acc, const FloeStepBreakdown *b) {
  acc->steps += b->steps;
  acc->wall_ns += b->wall_ns;
  acc->thread_ns += b->thread_ns;
  acc->kernel_ns += b->kernel_ns;
  acc->transfer_ns += b->transfer_ns;
  acc->framework_ns += b->framework_ns;
  acc->idle_ns += b->idle_ns;
  acc->tracing_ns += b->tracing_ns;
  acc->dropped_events += b->dropped_events;
}

static double pct(int64_t part, int64_t whole) { return whole > 0 ? 100.0 * part / whole : 0.0; }

void measure_breakdown_print(FILE *f, const FloeStepBreakdown *b) {
  if (b->steps <= 0) return;
  double n = (double)b->steps;
  fprintf(f, "step %.3f ms x %.2f threads: kernels %.3f ms (%.0f%%), framework %.3f ms (%.0f%%), "
          "transfers %.3f ms (%.0f%%), idle %.3f ms (%.0f%%), tracing %.3f ms (%.0f%%)%s\n",
          b->wall_ns * 1e-6 / n, b->wall_ns ? (double)b->thread_ns / b->wall_ns : 0.0,
          b->kernel_ns * 1e-6 / n, pct(b->kernel_ns, b->thread_ns), b->framework_ns * 1e-6 / n,
          pct(b->framework_ns, b->thread_ns), b->transfer_ns * 1e-6 / n,
          pct(b->transfer_ns, b->thread_ns), b->idle_ns * 1e-6 / n,
          pct(b->idle_ns, b->thread_ns), b->tracing_ns * 1e-6 / n,
          pct(b->tracing_ns, b->thread_ns), b->dropped_events ? " (events lost: too low)" : "");
}

void measure_breakdown_json(JsonWriter *w, const FloeStepBreakdown *b) {
  double n = b->steps > 0 ? (double)b->steps : 1.0;
  json_begin_object(w);
  json_key(w, "steps"), json_int(w, b->steps);
  json_key(w, "step_ms"), json_double(w, b->wall_ns * 1e-6 / n);
  json_key(w, "threads"), json_double(w, b->wall_ns ? (double)b->thread_ns / b->wall_ns : 0.0);
  json_key(w, "thread_ms"), json_double(w, b->thread_ns * 1e-6 / n);
  json_key(w, "kernels_ms"), json_double(w, b->kernel_ns * 1e-6 / n);
  json_key(w, "framework_ms"), json_double(w, b->framework_ns * 1e-6 / n);
  json_key(w, "transfers_ms"), json_double(w, b->transfer_ns * 1e-6 / n);
  json_key(w, "idle_ms"), json_double(w, b->idle_ns * 1e-6 / n);
  json_key(w, "tracing_ms"), json_double(w, b->tracing_ns * 1e-6 / n);
  /* The exact sums, for checking: kernel + framework + transfer + idle + tracing == thread. */
  json_key(w, "thread_ns"), json_int(w, b->thread_ns);
  json_key(w, "kernel_ns"), json_int(w, b->kernel_ns);
  json_key(w, "framework_ns"), json_int(w, b->framework_ns);
  json_key(w, "transfer_ns"), json_int(w, b->transfer_ns);
  json_key(w, "idle_ns"), json_int(w, b->idle_ns);
  json_key(w, "tracing_ns"), json_int(w, b->tracing_ns);
  json_key(w, "dropped_events"), json_int(w, b->dropped_events);
  json_end_object(w);
}

void measure_profile_print(FILE *f, const FloeOpProfile *rows, int n, int64_t steps, double secs,
                           int training) {
  int64_t sum = 0;
  for (int i = 0; i < n; i++) sum += rows[i].total_ns;
  fprintf(f, "\nkernel time per op type and device over %lld %sstep%s "
          "(device ms: the time the device reports, e.g. tpu-sim's simulated time):\n",
          (long long)steps, training ? "training " : "", steps == 1 ? "" : "s");
  fprintf(f, "%-28s %-10s %8s %10s %6s %10s %10s %10s %10s\n", "op", "device", "calls",
          "total ms", "%", "us/call", "max us", "MB out", "device ms");
  for (int i = 0; i < n; i++) {
    const FloeOpProfile *p = &rows[i];
    fprintf(f, "%-28s %-10s %8lld %10.1f %6.1f %10.1f %10.1f %10.1f %10.3f\n", p->op, p->device,
            (long long)p->calls, p->total_ns * 1e-6, sum ? 100.0 * p->total_ns / sum : 0.0,
            p->calls ? p->total_ns * 1e-3 / p->calls : 0.0, p->max_ns * 1e-3,
            p->output_bytes / 1048576.0, p->device_ns * 1e-6);
  }
  fprintf(f, "kernels %.3f s of %.3f s%s (%.0f us per step in kernels, %.0f us wall)\n",
          sum * 1e-9, secs, training ? " training" : "", steps ? sum * 1e-3 / steps : 0.0,
          steps ? secs * 1e6 / steps : 0.0);
}

void measure_profile_json(JsonWriter *w, const FloeOpProfile *rows, int n) {
  json_begin_array(w);
  for (int i = 0; i < n; i++) {
    json_begin_object(w);
    json_key(w, "op"), json_string(w, rows[i].op);
    json_key(w, "device"), json_string(w, rows[i].device);
    json_key(w, "device_ns"), json_int(w, rows[i].device_ns);
    json_key(w, "calls"), json_int(w, rows[i].calls);
    json_key(w, "total_ns"), json_int(w, rows[i].total_ns);
    json_key(w, "max_ns"), json_int(w, rows[i].max_ns);
    json_key(w, "output_bytes"), json_int(w, rows[i].output_bytes);
    json_end_object(w);
  }
  json_end_array(w);
}

double measure_percentile(const double *sorted, int n, double p) {
  if (n <= 0) return 0;
  int k = (int)(p * n + 0.999999) - 1; /* nearest rank: ceil(p n) - 1 */
  if (k < 0) k = 0;
  if (k >= n) k = n - 1;
  return sorted[k];
}

int measure_parse_timeout(const char *s, int64_t *ms) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !(v >= 0.001) || v > MEASURE_TIMEOUT_MAX) return -1;
  *ms = (int64_t)ceil(v * 1000.0);
  return 0;
}

static uint64_t next(uint64_t *s) { /* splitmix64 */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

FloeTensor *measure_random_tensor(FloeDType dt, int rank, const int64_t *dims, uint64_t *seed,
                                  FloeStatus *st) {
  FloeTensor *t = floe_tensor_new(dt, rank, dims, st);
  if (!t) return NULL;
  int64_t n = floe_tensor_num_elements(t);
  void *d = floe_tensor_data(t);
  for (int64_t i = 0; i < n && d; i++) {
    uint64_t r = next(seed);
    float u = (float)((double)(r >> 11) * 0x1.0p-53 * 2.0 - 1.0);
    switch (dt) {
      case FLOE_F32: ((float *)d)[i] = u; break;
      case FLOE_F64: ((double *)d)[i] = u; break;
      case FLOE_F16: ((uint16_t *)d)[i] = floe_f32_to_f16(u); break;
      case FLOE_BF16: ((uint16_t *)d)[i] = floe_f32_to_bf16(u); break;
      case FLOE_I8: ((int8_t *)d)[i] = (int8_t)(r & 1); break;
      case FLOE_U8: ((uint8_t *)d)[i] = (uint8_t)(r & 1); break;
      case FLOE_I32: ((int32_t *)d)[i] = (int32_t)(r & 1); break;
      case FLOE_I64: ((int64_t *)d)[i] = (int64_t)(r & 1); break;
      case FLOE_BOOL: ((uint8_t *)d)[i] = (uint8_t)(r & 1); break;
      default: i = n; break; /* other types stay zero */
    }
  }
  return t;
}
