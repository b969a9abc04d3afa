/* SPDX-License-Identifier: Apache-2.0 */
/* replica.c - floe_replica_device_setter: variables on ps tasks, the rest on the worker
 * (TensorFlow's replica_device_setter, applied to a built graph).
 *
 * Variables that one node uses together (an optimiser's update reads the variable and its
 * slots) must share a device, so they are grouped first (union-find over the VarHandleOps
 * each node's resource inputs name); each group goes to one ps task, in the order its first
 * variable was added: round-robin, or to the ps holding the fewest bytes so far (TF's
 * GreedyLoadBalancingStrategy with its byte-size load function). A group with a variable
 * that already requests a device keeps that device for all of it. Nodes that take a
 * resource input get no request: the placer colocates them with the resource (an update
 * runs where its variable lives). Every other node without a device gets the worker's,
 * variables of the "local" container (per-task state such as a replica's local step)
 * included.
 */
#include <stdio.h>
#include <string.h>

#include "train.h"

void floe_replica_device_options_init(FloeReplicaDeviceOptions *o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->num_ps = 1;
  o->strategy = FLOE_PS_ROUND_ROBIN;
}

static int find(int *p, int i) {
  while (p[i] != i) i = p[i] = p[p[i]];
  return i;
}

/* A variable that lives on a ps: every VarHandleOp but the per-task ones (local step). */
static bool is_var(const FloeNode *n) {
  return strcmp(n->op->name, "VarHandleOp") == 0 &&
         strcmp(floe_node_attr_string(n, "container"), FLOE__LOCAL_CONTAINER) != 0;
}

static bool takes_resource(const FloeNode *n) {
  for (int j = 0; j < n->num_inputs; j++)
    if (n->inputs[j].node->out_dtypes[n->inputs[j].index] == FLOE_RESOURCE) return true;
  return false;
}

/* Bytes of a variable (an unknown dim counts as 1). */
static int64_t var_bytes(const FloeNode *n) {
  const FloeAttrValue *t = floe__attrs_get(&n->attrs, "dtype");
  const FloeAttrValue *s = floe__attrs_get(&n->attrs, "shape");
  int64_t b = t && t->kind == FLOE_ATTR_TYPE ? (int64_t)floe_dtype_size(t->u.type) : 4;
  if (s && s->kind == FLOE_ATTR_SHAPE)
    for (int i = 0; i < s->u.shape.rank; i++) b *= s->u.shape.dims[i] > 0 ? s->u.shape.dims[i] : 1;
  return b;
}

static bool valid_job(const char *j) {
  if (!j[0] || strlen(j) > 63 || j[0] < 'a' || j[0] > 'z') return false;
  for (const char *c = j; *c; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_')) return false;
  return true;
}

/* See floe_train.h. */
floe_code floe_replica_device_setter(FloeGraph *g, const FloeReplicaDeviceOptions *o,
                                     int64_t *ps_bytes, FloeStatus *st) {
  if (!g || !o || o->struct_size < sizeof *o)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT, "floe_replica_device_setter: %s",
                           !g ? "the graph is NULL"
                              : "the options are NULL or older than this library (call "
                                "floe_replica_device_options_init first)");
  if (o->num_ps < 1 || o->num_ps > 4096)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT, "floe_replica_device_setter: num_ps is %d: "
                           "give the number of ps tasks of the cluster (1 to 4096)", o->num_ps);
  if (o->strategy != FLOE_PS_ROUND_ROBIN && o->strategy != FLOE_PS_GREEDY_BYTES)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT, "floe_replica_device_setter: unknown "
                           "strategy %d (FLOE_PS_ROUND_ROBIN or FLOE_PS_GREEDY_BYTES)",
                           (int)o->strategy);
  const char *job = o->ps_job && o->ps_job[0] ? o->ps_job : "ps";
  if (!valid_job(job))
    return floe_status_set(st, FLOE_INVALID_ARGUMENT, "floe_replica_device_setter: ps job name "
                           "\"%s\" is not [a-z][a-z0-9_]* of at most 63 characters", job);
  if (o->worker_device && o->worker_device[0]) {
    FloeDeviceName dn;
    if (floe_device_name_parse(o->worker_device, &dn, st) != FLOE_OK) {
      floe__status_prefix(st, "floe_replica_device_setter: worker_device");
      return floe_status_code(st);
    }
  }
  int n = g->num_nodes;
  int *parent = floe__malloc(((size_t)n + 1) * sizeof *parent);
  int *ps_of = floe__malloc(((size_t)n + 1) * sizeof *ps_of);
  int64_t *load = floe__calloc((size_t)o->num_ps, sizeof *load);
  if (!parent || !ps_of || !load) {
    floe__free(parent);
    floe__free(ps_of);
    floe__free(load);
    return floe_status_set(st, FLOE_NO_MEMORY, "floe_replica_device_setter: out of memory");
  }
  for (int i = 0; i < n; i++) parent[i] = i, ps_of[i] = -1;
  /* Group the variables each node uses together (the smaller id leads). */
  for (int i = 0; i < n; i++) {
    const FloeNode *nd = g->nodes[i];
    int first = -1;
    for (int j = 0; j < nd->num_inputs; j++) {
      const FloeNode *src = nd->inputs[j].node;
      if (!is_var(src)) continue;
      if (first < 0) {
        first = src->id;
        continue;
      }
      int a = find(parent, first), b = find(parent, src->id);
      if (a != b) parent[a < b ? b : a] = a < b ? a : b;
    }
  }
  /* A group's device: one its members request, else the next ps by the strategy. */
  const char **fixed = floe__calloc((size_t)n + 1, sizeof *fixed);
  int64_t *gbytes = floe__calloc((size_t)n + 1, sizeof *gbytes);
  floe_code rc = FLOE_OK;
  if (!fixed || !gbytes) {
    rc = floe_status_set(st, FLOE_NO_MEMORY, "floe_replica_device_setter: out of memory");
    goto out;
  }
  for (int i = 0; i < n; i++) {
    const FloeNode *nd = g->nodes[i];
    if (!is_var(nd)) continue;
    int r = find(parent, i);
    gbytes[r] += var_bytes(nd);
    if (nd->device && nd->device[0]) {
      if (fixed[r] && strcmp(fixed[r], nd->device) != 0) {
        rc = floe_status_set(st, FLOE_INVALID_ARGUMENT, "floe_replica_device_setter: variable '%s' "
                             "requests %s but a variable used by the same op requests %s: "
                             "variables updated together must live on one device", nd->name,
                             nd->device, fixed[r]);
        goto out;
      }
      fixed[r] = nd->device;
    }
  }
  int next = 0;
  for (int i = 0; i < n && rc == FLOE_OK; i++) {
    FloeNode *nd = g->nodes[i];
    char dev[160];
    if (is_var(nd)) {
      int r = find(parent, i);
      if (nd->device && nd->device[0]) continue;
      if (fixed[r]) {
        rc = floe_node_request_device(nd, fixed[r], st);
        continue;
      }
      if (ps_of[r] < 0) {
        if (o->strategy == FLOE_PS_ROUND_ROBIN) {
          ps_of[r] = next;
          next = (next + 1) % o->num_ps;
        } else {
          int best = 0;
          for (int k = 1; k < o->num_ps; k++)
            if (load[k] < load[best]) best = k;
          ps_of[r] = best;
        }
        load[ps_of[r]] += gbytes[r];
      }
      snprintf(dev, sizeof dev, "/job:%s/task:%d/device:cpu:0", job, ps_of[r]);
      rc = floe_node_request_device(nd, dev, st);
    } else if ((!nd->device || !nd->device[0]) && !takes_resource(nd) && o->worker_device &&
               o->worker_device[0]) {
      rc = floe_node_request_device(nd, o->worker_device, st);
    }
  }
  if (rc == FLOE_OK && ps_bytes)
    for (int k = 0; k < o->num_ps; k++) ps_bytes[k] = load[k];
out:
  floe__free(fixed);
  floe__free(gbytes);
  floe__free(parent);
  floe__free(ps_of);
  floe__free(load);
  return rc;
}
