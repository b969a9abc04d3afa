/* SPDX-License-Identifier: Apache-2.0 */
/* grad_registry.c - the gradient registry: which function (or plugin's declarative
 * FloeGradientDef) differentiates each op, and the ops that are not differentiable. The
 * autodiff walk (train/gradients.c) reads it; the standard set's functions (train/grad_*.c)
 * and plugins (runtime/plugin.c) fill it. Entries are never removed. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"


typedef struct GradEntry {
  char *op;
  FloeGradFn fn;            /* NULL with def NULL: not differentiable */
  FloeGradientDef *def;     /* a plugin's declarative gradient (deep copy), or NULL */
  char *plugin;             /* who registered def */
} GradEntry;

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static GradEntry *entries;
static int num_entries, cap_entries;

/* Caller holds reg_mu. */
static GradEntry *find_locked(const char *op) {
  for (int i = 0; i < num_entries; i++)
    if (strcmp(entries[i].op, op) == 0) return &entries[i];
  return NULL;
}

static GradEntry *add_locked(const char *op, FloeStatus *st) {
  if (num_entries == cap_entries) {
    int cap = cap_entries ? 2 * cap_entries : 128;
    GradEntry *e = floe__realloc(entries, (size_t)cap * sizeof *e);
    if (!e) {
      floe_status_set(st, FLOE_NO_MEMORY, "out of memory registering the gradient of %s", op);
      return NULL;
    }
    entries = e;
    cap_entries = cap;
  }
  GradEntry *e = &entries[num_entries];
  memset(e, 0, sizeof *e);
  if (!(e->op = floe__strdup(op))) {
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory registering the gradient of %s", op);
    return NULL;
  }
  num_entries++;
  return e;
}

floe_code floe__grad_register(const char *op, FloeGradFn fn, FloeStatus *st) {
  pthread_mutex_lock(&reg_mu);
  floe_code rc = FLOE_OK;
  GradEntry *have = find_locked(op);
  /* The identical registration is a no-op: floe__grads_init retried after running out of
   * memory half-way through a table. */
  if (have && !(have->fn == fn && !have->def))
    rc = floe_status_set(st, FLOE_ALREADY_EXISTS, "a gradient of op %s is already registered", op);
  else if (!have) {
    GradEntry *e = add_locked(op, st);
    if (!e) rc = FLOE_NO_MEMORY;
    else e->fn = fn;
  }
  pthread_mutex_unlock(&reg_mu);
  return rc;
}

static void def_free(FloeGradientDef *d) {
  if (!d) return;
  floe__free((char *)d->op);
  floe__free((char *)d->grad_op);
  for (size_t i = 0; d->grad_inputs && i < d->num_grad_inputs; i++)
    floe__free((char *)d->grad_inputs[i]);
  floe__free((void *)d->grad_inputs);
  floe__free((void *)d->input_grads);
  for (size_t i = 0; d->copy_attrs && i < d->num_copy_attrs; i++)
    floe__free((char *)d->copy_attrs[i]);
  floe__free((void *)d->copy_attrs);
  floe__free(d);
}

static bool copy_str_array(const char *const *src, size_t n, const char *const **dst) {
  *dst = NULL;
  if (!n) return true;
  char **v = floe__calloc(n, sizeof *v);
  if (!v) return false;
  *dst = (const char *const *)v;
  for (size_t i = 0; i < n; i++)
    if (!(v[i] = floe__strdup(src[i]))) return false;
  return true;
}

/* "dy:J", "x:I" or "y:J" -> kind and index. */
bool floe__grad_input_parse(const char *s, char *kind, long *idx) {
  const char *colon = strchr(s, ':');
  if (!colon || colon == s) return false;
  size_t k = (size_t)(colon - s);
  if (k == 2 && strncmp(s, "dy", 2) == 0) *kind = 'd';
  else if (k == 1 && s[0] == 'x') *kind = 'x';
  else if (k == 1 && s[0] == 'y') *kind = 'y';
  else return false;
  char *end;
  *idx = strtol(colon + 1, &end, 10);
  return end != colon + 1 && *end == '\0' && *idx >= 0;
}

/* The number of flattened inputs/outputs of op when it has no list arguments, else -1. */
static int fixed_arity(const FloeArgDef *args, int n) {
  for (int i = 0; i < n; i++)
    if (args[i].number_attr || args[i].type_list_attr) return -1;
  return n;
}

floe_code floe__grad_register_def(const FloeGradientDef *in, const char *plugin, FloeStatus *st) {
  if (!in || !in->op || !*in->op || !in->grad_op || !*in->grad_op)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "register_gradient: op and grad_op must be non-empty names");
  /* The standard set is there already (floe_runtime_new fills it before it loads
   * plugins), so a plugin cannot take a standard op's place. */
  const FloeOpInfo *op = floe__op_lookup(in->op);
  if (!op)
    return floe_status_set(st, FLOE_NOT_FOUND,
                           "register_gradient %s: no such op (register the op before its gradient)",
                           in->op);
  int nin = fixed_arity(op->inputs, op->num_inputs);
  int nout = fixed_arity(op->outputs, op->num_outputs);
  if (in->num_grad_inputs && !in->grad_inputs)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT, "register_gradient %s: grad_inputs is NULL",
                           in->op);
  for (size_t i = 0; i < in->num_grad_inputs; i++) {
    char kind;
    long idx;
    if (!in->grad_inputs[i] || !floe__grad_input_parse(in->grad_inputs[i], &kind, &idx))
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "register_gradient %s: grad_inputs[%zu] \"%s\" is not \"dy:J\", "
                             "\"x:I\" or \"y:J\"",
                             in->op, i, in->grad_inputs[i] ? in->grad_inputs[i] : "(null)");
    long limit = kind == 'x' ? nin : nout;
    if (limit >= 0 && idx >= limit)
      return floe_status_set(st, FLOE_OUT_OF_RANGE,
                             "register_gradient %s: grad_inputs[%zu] \"%s\": op %s has %ld %s",
                             in->op, i, in->grad_inputs[i], in->op, limit,
                             kind == 'x' ? "inputs" : "outputs");
  }
  if (nin >= 0 && in->num_input_grads != (size_t)nin)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "register_gradient %s: input_grads has %zu entries, the op has %d "
                           "inputs (use -1 for an input without gradient)",
                           in->op, in->num_input_grads, nin);
  if (in->num_input_grads && !in->input_grads)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT, "register_gradient %s: input_grads is NULL",
                           in->op);
  for (size_t i = 0; i < in->num_copy_attrs; i++)
    if (!in->copy_attrs || !in->copy_attrs[i] || !floe__op_attr(op, in->copy_attrs[i]))
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "register_gradient %s: copy_attrs[%zu] \"%s\" is not an attribute "
                             "of %s",
                             in->op, i,
                             in->copy_attrs && in->copy_attrs[i] ? in->copy_attrs[i] : "(null)",
                             in->op);

  FloeGradientDef *d = floe__calloc(1, sizeof *d);
  bool ok = d != NULL;
  if (ok) {
    d->struct_size = sizeof *d;
    d->num_grad_inputs = in->num_grad_inputs;
    d->num_input_grads = in->num_input_grads;
    d->num_copy_attrs = in->num_copy_attrs;
    ok = (d->op = floe__strdup(in->op)) && (d->grad_op = floe__strdup(in->grad_op)) &&
         copy_str_array(in->grad_inputs, in->num_grad_inputs, &d->grad_inputs) &&
         copy_str_array(in->copy_attrs, in->num_copy_attrs, &d->copy_attrs);
    if (ok && in->num_input_grads) {
      int32_t *v = floe__malloc(in->num_input_grads * sizeof *v);
      if ((ok = v != NULL)) memcpy(v, in->input_grads, in->num_input_grads * sizeof *v);
      d->input_grads = v;
    }
  }
  if (!ok) {
    def_free(d);
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory registering the gradient of %s",
                           in->op);
  }
  pthread_mutex_lock(&reg_mu);
  floe_code rc = FLOE_OK;
  GradEntry *e = find_locked(in->op);
  if (e && e->def && plugin && e->plugin && strcmp(e->plugin, plugin) == 0) {
    /* The same plugin loaded by another runtime: replace with the identical definition. */
    def_free(e->def);
    e->def = d;
    d = NULL;
  } else if (e) {
    rc = floe_status_set(st, FLOE_ALREADY_EXISTS,
                         "register_gradient %s: the op already has a gradient (from %s)", in->op,
                         e->plugin ? e->plugin : "the standard op set");
  } else if (!(e = add_locked(in->op, st))) {
    rc = FLOE_NO_MEMORY;
  } else {
    e->def = d;
    d = NULL;
    if (plugin && !(e->plugin = floe__strdup(plugin))) {
      /* Keep the entry: the gradient works, only the owner's name is lost. */
    }
  }
  pthread_mutex_unlock(&reg_mu);
  def_free(d);
  return rc;
}

/* Not differentiable: integer-valued, comparison, shape and random ops; state and I/O
 * (nothing flows back through a queue or a reader, TensorFlow's choice); Send/Recv, which
 * the partitioner adds after differentiation. */
static const char *const not_differentiable[] = {
    "Const", "Placeholder", "NoOp", "StopGradient", "Shape", "Size", "Rank", "ZerosLike",
    "OnesLike", "ArgMax", "ArgMin", "Equal", "NotEqual", "Less", "LessEqual", "Greater",
    "GreaterEqual", "LogicalAnd", "LogicalOr", "LogicalNot", "OneHot", "RandomUniform",
    "RandomNormal", "TruncatedNormal", "StatelessRandomUniform", "StatelessRandomNormal",
    "LogUniformCandidateSampler",
    "Sign", "Floor", "InvertPermutation", "ConcatOffset", "VarHandleOp", "ReadVariableOp",
    "AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp", "VarIsInitializedOp",
    "ResourceApplyGradientDescent", "ResourceApplyMomentum", "ResourceApplyAdam",
    "ResourceApplyRMSProp", "ResourceApplyAdagrad", "Save", "SaveShard", "Restore",
    "TfIdfVectorizer", /* integer items in, counts out */
    "FIFOQueueV2", "PaddingFIFOQueueV2", "RandomShuffleQueueV2", "QueueEnqueueV2",
    "QueueEnqueueManyV2", "QueueDequeueV2", "QueueDequeueManyV2", "QueueDequeueUpToV2",
    "QueueCloseV2", "QueueSizeV2", "QueueIsClosedV2", "TextLineReaderV2",
    "FixedLengthRecordReaderV2", "IdxRecordReader", "ReaderRead", "ReaderReadUpTo",
    "ReaderSeek", "_Send", "_ControlSend", "_Recv",
    /* a variable's rows: floe_minimize differentiates the variable itself through them */
    "ResourceGather", "ResourceGatherGrad",
    "ConditionalAccumulator", "AccumulatorApplyGradient", "AccumulatorTakeGradient",
    "AccumulatorSetGlobalStep", "AccumulatorNumAccumulated", "AccumulatorNumDropped",
    "SyncTokenQueue",
};


/* The standard "not differentiable" entries; again after a failure: no-op. */
floe_code floe__grad_registry_init(FloeStatus *st) {
  floe_code rc = floe__ops_init(st);
  for (size_t i = 0; rc == FLOE_OK && i < FLOE__ARRAY_LEN(not_differentiable); i++) {
    pthread_mutex_lock(&reg_mu);
    bool have = find_locked(not_differentiable[i]) != NULL;
    pthread_mutex_unlock(&reg_mu);
    if (!have) rc = floe__grad_register(not_differentiable[i], NULL, st);
  }
  return rc;
}

bool floe__grad_lookup(const char *op, FloeGradFn *fn, const FloeGradientDef **def) {
  pthread_mutex_lock(&reg_mu);
  GradEntry *e = find_locked(op);
  if (fn) *fn = e ? e->fn : NULL;
  if (def) *def = e ? e->def : NULL; /* entries are never removed */
  pthread_mutex_unlock(&reg_mu);
  return e != NULL;
}
