/* SPDX-License-Identifier: Apache-2.0 */
/* trace.c - step timelines: the events executors record while a session traces
 * (floe_session_set_tracing), the Chrome trace file written from them, and the step
 * breakdown (kernels, framework, transfers, idle) computed from them.
 *
 * Executor threads append under one mutex: tracing is a diagnostic mode, and with it off
 * nothing here is reached (the executor tests its profiling word first). */
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "exec.h"

struct FloeTraceSink {
  pthread_mutex_t mu;
  FloeTraceEvent *ev; /* guarded by mu */
  size_t n, cap;      /* guarded by mu */
  int64_t dropped;    /* events lost to a failed allocation; guarded by mu */
  uint64_t clears;    /* floe__trace_clear calls; guarded by mu */
  _Atomic int64_t next_step;
};

FloeTraceSink *floe__trace_new(void) {
  FloeTraceSink *t = floe__calloc(1, sizeof *t);
  if (!t) return NULL;
  if (pthread_mutex_init(&t->mu, NULL) != 0) {
    floe__free(t);
    return NULL;
  }
  atomic_init(&t->next_step, 1);
  return t;
}

static void event_free(FloeTraceEvent *e) {
  floe__free(e->name);
  floe__free(e->args);
  floe__free(e->flow_key);
}

void floe__trace_clear(FloeTraceSink *t) {
  if (!t) return;
  pthread_mutex_lock(&t->mu);
  for (size_t i = 0; i < t->n; i++) event_free(&t->ev[i]);
  t->n = 0;
  t->dropped = 0;
  t->clears++;
  pthread_mutex_unlock(&t->mu);
}

void floe__trace_free(FloeTraceSink *t) {
  if (!t) return;
  floe__trace_clear(t);
  floe__free(t->ev);
  pthread_mutex_destroy(&t->mu);
  floe__free(t);
}

int64_t floe__trace_next_step(FloeTraceSink *t) {
  return atomic_fetch_add_explicit(&t->next_step, 1, memory_order_relaxed);
}

int64_t floe__trace_thread_id(void) {
  static _Thread_local int64_t tid;
  if (!tid) tid = (int64_t)syscall(SYS_gettid);
  return tid;
}

/* Takes the event's strings (even when it cannot be kept). */
static void trace_add(FloeTraceSink *t, FloeTraceEvent *e) {
  pthread_mutex_lock(&t->mu);
  if (t->n == t->cap) {
    size_t cap = t->cap ? 2 * t->cap : 1024;
    FloeTraceEvent *v = floe__realloc(t->ev, cap * sizeof *v);
    if (!v) {
      t->dropped++;
      pthread_mutex_unlock(&t->mu);
      event_free(e);
      return;
    }
    t->ev = v;
    t->cap = cap;
  }
  t->ev[t->n++] = *e;
  pthread_mutex_unlock(&t->mu);
}

/* "f32[64,784]" appended to a growing buffer. */
typedef struct Buf {
  char *p;
  size_t n, cap;
  bool oom;
} Buf;

static void buf_add(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void buf_add(Buf *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
    va_end(ap);
    if (k < 0) {
      b->oom = true;
      return;
    }
    if (b->p && b->n + (size_t)k < b->cap) {
      b->n += (size_t)k;
      return;
    }
    size_t cap = b->cap ? b->cap : 128;
    while (cap <= b->n + (size_t)k) cap *= 2;
    char *q = floe__realloc(b->p, cap);
    if (!q) {
      b->oom = true;
      return;
    }
    b->p = q;
    b->cap = cap;
  }
}

static void add_tensors(Buf *b, const char *key, FloeTensor *const *ts, int n) {
  buf_add(b, "\"%s\":[", key);
  for (int i = 0; i < n; i++) {
    const FloeTensor *x = ts[i];
    if (!x) {
      buf_add(b, "%s\"none\"", i ? "," : "");
      continue;
    }
    buf_add(b, "%s\"%s[", i ? "," : "", floe_dtype_name(x->dtype));
    for (int d = 0; d < x->rank; d++) buf_add(b, "%s%" PRId64, d ? "," : "", x->dims[d]);
    buf_add(b, "]\"");
  }
  buf_add(b, "]");
}

static bool is_transfer_op(const char *op) {
  return !strcmp(op, "_Send") || !strcmp(op, "_Recv") || !strcmp(op, "_ControlSend");
}

void floe__trace_kernel(FloeTraceSink *t, int64_t step, const FloeKernelContext *ctx, int64_t t0,
                        int64_t t1, bool async) {
  const FloeNode *node = ctx->node;
  int64_t r0 = floe__exec_now_ns();
  FloeTraceEvent e = {.kind = FLOE__TRACE_KERNEL, .t0 = t0, .t1 = t1, .step = step,
                      .tid = floe__trace_thread_id(), .async = async,
                      .device = ctx->device ? ctx->device->short_name : "host",
                      .op = node->op->name};
  e.transfer = is_transfer_op(e.op);
  int64_t bytes = 0;
  for (int i = 0; i < ctx->num_outputs; i++)
    if (ctx->outputs[i]) bytes += (int64_t)ctx->outputs[i]->nbytes;
  e.bytes = bytes;
  e.name = floe__strdup(node->name);
  Buf b = {0};
  add_tensors(&b, "inputs", ctx->inputs, ctx->num_inputs);
  buf_add(&b, ",");
  add_tensors(&b, "outputs", ctx->outputs, ctx->num_outputs);
  e.args = b.oom ? (floe__free(b.p), NULL) : b.p;
  if (e.transfer) {
    const char *tn = floe__node_attr_str(node, "tensor_name");
    const char *src = floe__node_attr_str(node, "send_device");
    const char *dst = floe__node_attr_str(node, "recv_device");
    Buf k = {0};
    buf_add(&k, "%s;%s;%s;%" PRIu64 ";%" PRId64, tn ? tn : "", src ? src : "", dst ? dst : "",
            ctx->frame_id, ctx->iter);
    e.flow_key = k.oom ? (floe__free(k.p), NULL) : k.p;
  }
  e.record_ns = floe__exec_now_ns() - r0; /* the lock and copy below are not counted */
  trace_add(t, &e);
}

void floe__trace_span(FloeTraceSink *t, FloeTraceKind kind, int64_t step, const char *device,
                      int64_t t0, int64_t t1, int64_t t2, int64_t t3) {
  FloeTraceEvent e = {.kind = kind, .t0 = t0, .t1 = t1, .x0 = t2, .x1 = t3, .step = step,
                      .tid = floe__trace_thread_id(), .device = device};
  trace_add(t, &e);
}

/* ---- the breakdown ---- */

static int by_step(const void *a, const void *b) {
  const FloeTraceEvent *x = *(FloeTraceEvent *const *)a, *y = *(FloeTraceEvent *const *)b;
  if (x->step != y->step) return x->step < y->step ? -1 : 1;
  if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
  return x->t0 < y->t0 ? -1 : x->t0 > y->t0;
}

floe_code floe__trace_breakdown(FloeTraceSink *t, FloeStepBreakdown *out, FloeStatus *st) {
  size_t want = out->struct_size;
  memset(out, 0, sizeof *out);
  out->struct_size = want;
  pthread_mutex_lock(&t->mu);
  FloeTraceEvent **v = floe__malloc((t->n ? t->n : 1) * sizeof *v);
  if (!v) {
    pthread_mutex_unlock(&t->mu);
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory summing %zu trace events", t->n);
  }
  for (size_t i = 0; i < t->n; i++) v[i] = &t->ev[i];
  qsort(v, t->n, sizeof *v, by_step);
  for (size_t i = 0; i < t->n;) {
    size_t j = i;
    while (j < t->n && v[j]->step == v[i]->step) j++;
    const FloeTraceEvent *step = NULL;
    int64_t kern = 0, xfer = 0, active = 0, threads = 0, last_tid = 0, rec = 0;
    for (size_t k = i; k < j; k++) {
      const FloeTraceEvent *e = v[k];
      if (e->kind == FLOE__TRACE_STEP) step = e;
      if (e->kind == FLOE__TRACE_ACTIVE) {
        active += e->t1 - e->t0;
        if (!threads || e->tid != last_tid) threads++, last_tid = e->tid;
      }
      if (e->kind == FLOE__TRACE_KERNEL) rec += e->record_ns;
      if (e->kind == FLOE__TRACE_KERNEL && !e->async) {
        if (e->transfer) xfer += e->t1 - e->t0;
        else kern += e->t1 - e->t0;
      }
    }
    bool caller_counted = false;
    for (size_t k = i; step && k < j; k++)
      if (v[k]->kind == FLOE__TRACE_ACTIVE && v[k]->tid == step->tid) caller_counted = true;
    if (step && step->step > 0) { /* events of steps run outside a session have no step */
      if (!caller_counted) threads++;
      int64_t wall = step->t1 - step->t0, outside = wall - (step->x1 - step->x0);
      int64_t cap = wall * threads;
      int64_t fw = active - kern - xfer - rec;
      if (fw < 0) fw = 0;
      fw += outside > 0 ? outside : 0;
      if (rec > cap - kern - xfer - fw) rec = cap - kern - xfer - fw;
      if (rec < 0) rec = 0;
      int64_t idle = cap - kern - xfer - fw - rec;
      if (idle < 0) { /* clock steps between threads: framework absorbs the difference */
        fw += idle;
        idle = 0;
        if (fw < 0) fw = 0;
      }
      out->steps++;
      out->wall_ns += wall;
      out->thread_ns += kern + xfer + fw + rec + idle;
      out->tracing_ns += rec;
      out->kernel_ns += kern;
      out->transfer_ns += xfer;
      out->framework_ns += fw;
      out->idle_ns += idle;
    }
    i = j;
  }
  out->dropped_events = t->dropped;
  pthread_mutex_unlock(&t->mu);
  floe__free(v);
  return FLOE_OK;
}

/* ---- the split ---- */

FloeTraceMark floe__trace_mark(FloeTraceSink *t) {
  pthread_mutex_lock(&t->mu);
  FloeTraceMark m = {t->clears, t->n};
  pthread_mutex_unlock(&t->mu);
  return m;
}

floe_code floe__trace_split(FloeTraceSink *t, int64_t step, FloeTraceMark since,
                            FloeStepSplit *out, FloeStatus *st) {
  size_t want = out->struct_size;
  memset(out, 0, want < sizeof *out ? want : sizeof *out);
  out->struct_size = want;
  pthread_mutex_lock(&t->mu);
  /* One step: its events came after the mark, unless the sink was cleared since. */
  size_t from = step && since.clears == t->clears && since.n <= t->n ? since.n : 0;
  size_t cap = t->n - from;
  FloeTraceEvent **v = floe__malloc((cap ? cap : 1) * sizeof *v);
  if (!v) {
    pthread_mutex_unlock(&t->mu);
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory splitting %zu trace events", cap);
  }
  size_t n = 0;
  for (size_t i = from; i < t->n; i++)
    if (step ? t->ev[i].step == step : t->ev[i].step > 0) v[n++] = &t->ev[i];
  if (!step) qsort(v, n, sizeof *v, by_step);
  floe_code rc = FLOE_OK;
  for (size_t i = 0; i < n && rc == FLOE_OK;) {
    size_t j = i;
    while (j < n && v[j]->step == v[i]->step) j++;
    rc = floe__step_split_add((const FloeTraceEvent *const *)v + i, j - i, out, st);
    i = j;
  }
  pthread_mutex_unlock(&t->mu);
  floe__free(v);
  return rc;
}

/* ---- the Chrome trace file ---- */

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
    if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
    else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
    else fputc(*p, f);
  }
  fputc('"', f);
}

/* Index of name in names (added when new); -1 when out of memory. */
static int intern(const char ***names, int *n, const char *name) {
  for (int i = 0; i < *n; i++)
    if (!strcmp((*names)[i], name)) return i;
  const char **v = floe__realloc(*names, (size_t)(*n + 1) * sizeof *v);
  if (!v) return -1;
  *names = v;
  v[*n] = name;
  return (*n)++;
}

static int by_time(const void *a, const void *b) {
  const FloeTraceEvent *x = *(FloeTraceEvent *const *)a, *y = *(FloeTraceEvent *const *)b;
  if (x->t0 != y->t0) return x->t0 < y->t0 ? -1 : 1;
  return x->t1 > y->t1 ? -1 : x->t1 < y->t1; /* the enclosing span first */
}

static int by_flow(const void *a, const void *b) {
  const FloeTraceEvent *x = *(FloeTraceEvent *const *)a, *y = *(FloeTraceEvent *const *)b;
  int c = strcmp(x->flow_key, y->flow_key);
  if (c) return c;
  if (x->step != y->step) return x->step < y->step ? -1 : 1;
  int rx = !strcmp(x->op, "_Recv"), ry = !strcmp(y->op, "_Recv"); /* sends before receives */
  if (rx != ry) return rx - ry;
  return x->t0 < y->t0 ? -1 : x->t0 > y->t0;
}

static double us(int64_t ns, int64_t origin) { return (double)(ns - origin) / 1e3; }

/* pid 1 is the session (its steps), pid 2.. the devices in order of first appearance. */
static floe_code write_events(FloeTraceSink *t, FILE *f, FloeStatus *st) {
  FloeTraceEvent **v = floe__malloc((t->n ? t->n : 1) * sizeof *v);
  FloeTraceEvent **fl = floe__malloc((t->n ? t->n : 1) * sizeof *fl);
  const char **devs = NULL;
  int ndev = 0;
  int64_t *tids = floe__malloc((t->n ? t->n : 1) * 2 * sizeof *tids); /* (pid, tid) pairs */
  int ntid = 0;
  if (!v || !fl || !tids) {
    floe__free(v);
    floe__free(fl);
    floe__free(tids);
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory writing %zu trace events", t->n);
  }
  int64_t origin = INT64_MAX;
  size_t nfl = 0;
  for (size_t i = 0; i < t->n; i++) {
    v[i] = &t->ev[i];
    if (t->ev[i].t0 < origin) origin = t->ev[i].t0;
    if (t->ev[i].kind == FLOE__TRACE_KERNEL && t->ev[i].flow_key) fl[nfl++] = &t->ev[i];
  }
  qsort(v, t->n, sizeof *v, by_time);
  fprintf(f, "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"producer\":\"floe\","
             "\"dropped_events\":%" PRId64 "},\"traceEvents\":[\n",
          t->dropped);
  fprintf(f, "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":1,\"tid\":0,"
             "\"args\":{\"name\":\"session steps\"}}");
  floe_code rc = FLOE_OK;
  for (size_t i = 0; i < t->n; i++) {
    FloeTraceEvent *e = v[i];
    int pid = 1;
    if (e->kind != FLOE__TRACE_STEP) {
      int d = intern(&devs, &ndev, e->device ? e->device : "host");
      if (d < 0) {
        rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory writing a trace");
        break;
      }
      pid = d + 2;
    }
    int k = 0;
    while (k < ntid && !(tids[2 * k] == pid && tids[2 * k + 1] == e->tid)) k++;
    if (k == ntid) {
      tids[2 * ntid] = pid;
      tids[2 * ntid + 1] = e->tid;
      ntid++;
      if (pid > 1) {
        bool first_of_pid = true;
        for (int q = 0; q < ntid - 1; q++)
          if (tids[2 * q] == pid) first_of_pid = false;
        if (first_of_pid) {
          fprintf(f, ",\n{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"tid\":0,"
                     "\"args\":{\"name\":",
                  pid);
          json_str(f, devs[pid - 2]);
          fprintf(f, "}}");
        }
      }
      fprintf(f, ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%" PRId64
                 ",\"args\":{\"name\":\"%s thread %" PRId64 "\"}}",
              pid, e->tid, pid == 1 ? "caller" : "executor", e->tid);
    }
    const char *name = e->kind == FLOE__TRACE_STEP     ? "step"
                       : e->kind == FLOE__TRACE_ACTIVE ? "executor"
                                                       : e->name ? e->name : "?";
    fprintf(f, ",\n{\"ph\":\"X\",\"pid\":%d,\"tid\":%" PRId64 ",\"ts\":%.3f,\"dur\":%.3f,"
               "\"name\":",
            pid, e->tid, us(e->t0, origin), (double)(e->t1 - e->t0) / 1e3);
    json_str(f, name);
    if (e->kind == FLOE__TRACE_KERNEL) {
      fprintf(f, ",\"cat\":\"%s\",\"args\":{\"node\":", e->transfer ? "transfer" : "kernel");
      json_str(f, e->name);
      fprintf(f, ",\"op\":");
      json_str(f, e->op);
      fprintf(f, ",\"device\":");
      json_str(f, e->device);
      fprintf(f, ",\"step\":%" PRId64 ",\"bytes\":%" PRId64 ",\"async\":%s%s%s}}", e->step,
              e->bytes, e->async ? "true" : "false", e->args ? "," : "", e->args ? e->args : "");
    } else if (e->kind == FLOE__TRACE_STEP) {
      fprintf(f, ",\"cat\":\"step\",\"args\":{\"step\":%" PRId64 ",\"executor_us\":%.3f}}",
              e->step, (double)(e->x1 - e->x0) / 1e3);
    } else {
      fprintf(f, ",\"cat\":\"framework\",\"args\":{\"step\":%" PRId64 "}}", e->step);
    }
  }
  /* Flows: the k-th _Send of a key in a step with the k-th _Recv. */
  if (rc == FLOE_OK && nfl) {
    qsort(fl, nfl, sizeof *fl, by_flow);
    int64_t id = 1;
    for (size_t i = 0; i < nfl;) {
      size_t j = i;
      while (j < nfl && !strcmp(fl[j]->flow_key, fl[i]->flow_key) && fl[j]->step == fl[i]->step)
        j++;
      size_t ns = i;
      while (ns < j && strcmp(fl[ns]->op, "_Recv") != 0) ns++; /* sends are [i, ns) */
      for (size_t a = i, b = ns; a < ns && b < j; a++, b++, id++) {
        const FloeTraceEvent *s = fl[a], *r = fl[b];
        int ps = 2, pr = 2;
        for (int d = 0; d < ndev; d++) {
          if (!strcmp(devs[d], s->device)) ps = d + 2;
          if (!strcmp(devs[d], r->device)) pr = d + 2;
        }
        int64_t fts = r->t1 > s->t0 ? (r->t0 > s->t0 ? r->t0 : s->t0) : r->t1;
        fprintf(f, ",\n{\"ph\":\"s\",\"id\":%" PRId64 ",\"pid\":%d,\"tid\":%" PRId64
                   ",\"ts\":%.3f,\"name\":\"transfer\",\"cat\":\"transfer\"}",
                id, ps, s->tid, us(s->t0, origin));
        fprintf(f, ",\n{\"ph\":\"f\",\"bp\":\"e\",\"id\":%" PRId64 ",\"pid\":%d,\"tid\":%" PRId64
                   ",\"ts\":%.3f,\"name\":\"transfer\",\"cat\":\"transfer\"}",
                id, pr, r->tid, us(fts, origin));
      }
      i = j;
    }
  }
  fprintf(f, "\n]}\n");
  floe__free(v);
  floe__free(fl);
  floe__free(tids);
  floe__free(devs);
  return rc;
}

floe_code floe__trace_write(FloeTraceSink *t, const char *path, FloeStatus *st) {
  FILE *f = fopen(path, "w");
  if (!f) {
    int err = errno;
    return floe__status_from_errno(st, err, "cannot write the trace %s", path);
  }
  pthread_mutex_lock(&t->mu);
  floe_code rc = write_events(t, f, st);
  pthread_mutex_unlock(&t->mu);
  int bad = ferror(f);
  int err = bad ? errno : 0;
  if (fclose(f) != 0 && !bad) bad = 1, err = errno;
  if (rc == FLOE_OK && bad)
    rc = floe__status_from_errno(st, err, "cannot write the trace %s", path);
  return rc;
}
