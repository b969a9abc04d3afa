/* SPDX-License-Identifier: Apache-2.0 */
/* opt_cse.c - the optimiser's common subexpression elimination (optimize.c): two nodes of
 * the run with the same op, attributes, inputs (after earlier merges), control inputs and
 * requested device compute the same values, so the later one (in topological order) goes
 * and its readers read the first. Constants merge when their values are equal byte for
 * byte. Never merged: stateful ops (each runs for its effect: variables, queues, random
 * ops, collectives), control flow and transfers, placeholders, ops without outputs, and a
 * fed, fetched or target node (it keeps its place; it may be the one the others merge
 * into). Results are bitwise the same: a kernel computes a node's values from its inputs
 * and attributes alone. */
#include <string.h>

#include "session.h"

static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

static uint64_t str_hash(uint64_t h, const char *s) {
  for (; s && *s; s++) h = mix(h, (unsigned char)*s);
  return h;
}

/* A Const's value: dtype, dims and up to 256 bytes from each end. */
static uint64_t value_hash(uint64_t h, const FloeNode *n) {
  const FloeAttrValue *v = floe__attrs_get(&n->attrs, "value");
  if (!v || v->kind != FLOE_ATTR_TENSOR || !v->u.tensor) return h;
  const FloeTensor *t = v->u.tensor;
  h = mix(h, (uint64_t)t->dtype);
  for (int d = 0; d < t->rank; d++) h = mix(h, (uint64_t)t->dims[d]);
  if (!floe__tensor_on_host(t) || t->nbytes == 0) return h;
  const unsigned char *p = floe_tensor_data(t);
  size_t len = t->nbytes < 256 ? t->nbytes : 256;
  for (size_t i = 0; i < len; i++) h = mix(h, p[i]);
  for (size_t i = t->nbytes - len; i < t->nbytes; i++) h = mix(h, p[i]);
  return h;
}

static uint64_t node_hash(const FloeNode *n) {
  uint64_t h = mix(0, (uint64_t)(uintptr_t)n->op);
  h = str_hash(h, n->device);
  h = mix(h, (uint64_t)n->num_inputs);
  for (int k = 0; k < n->num_inputs; k++)
    h = mix(mix(h, (uint64_t)n->inputs[k].node->id), (uint64_t)n->inputs[k].index);
  h = mix(h, (uint64_t)n->num_control);
  for (int c = 0; c < n->num_control; c++) h ^= mix(0x51, (uint64_t)n->control[c]->id);
  if (strcmp(n->op->name, "Const") == 0) h = value_hash(h, n);
  return h;
}

static bool attrs_equal(const FloeAttrs *a, const FloeAttrs *b) {
  if (a->n != b->n) return false;
  for (int i = 0; i < a->n; i++) {
    const FloeAttrValue *w = floe__attrs_get(b, a->names[i]);
    if (!w || !floe__attr_value_equal(&a->values[i], w)) return false;
  }
  return true;
}

static bool same_controls(const FloeNode *a, const FloeNode *b) {
  if (a->num_control != b->num_control) return false;
  for (int i = 0; i < a->num_control; i++) {
    bool found = false;
    for (int j = 0; j < b->num_control && !found; j++) found = a->control[i] == b->control[j];
    if (!found) return false;
  }
  return true;
}

static bool same_node(const FloeNode *a, const FloeNode *b) {
  if (a->op != b->op || a->num_inputs != b->num_inputs || a->num_outputs != b->num_outputs ||
      strcmp(a->device ? a->device : "", b->device ? b->device : "") != 0)
    return false;
  for (int k = 0; k < a->num_inputs; k++)
    if (a->inputs[k].node != b->inputs[k].node || a->inputs[k].index != b->inputs[k].index)
      return false;
  return same_controls(a, b) && attrs_equal(&a->attrs, &b->attrs);
}

static bool mergeable(const FloeNode *n) { return floe__opt_pure(n) && n->num_outputs > 0; }

floe_code floe__opt_cse(FloeOpt *o, FloeOptPassStats *ps, FloeStatus *st) {
  int count = 0;
  int *order = floe__graph_topo_order(o->g, o->need, &count);
  FloeNode **rep = floe__calloc((size_t)(o->cap ? o->cap : 1), sizeof *rep);
  size_t slots = 16;
  while (slots < 2 * (size_t)count) slots *= 2;
  FloeNode **table = floe__calloc(slots, sizeof *table);
  if (!order || !rep || !table) {
    floe__free(order);
    floe__free(rep);
    floe__free(table);
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory merging common subexpressions");
  }
  for (int i = 0; i < count; i++) {
    FloeNode *n = o->g->nodes[order[i]];
    /* read the nodes that stand for merged ones */
    for (int k = 0; k < n->num_inputs; k++)
      if (rep[n->inputs[k].node->id]) n->inputs[k].node = rep[n->inputs[k].node->id];
    for (int c = 0; c < n->num_control; c++) {
      FloeNode *r = rep[n->control[c]->id];
      if (!r) continue;
      bool dup = false;
      for (int j = 0; j < n->num_control && !dup; j++) dup = n->control[j] == r;
      if (dup) {
        memmove(n->control + c, n->control + c + 1,
                (size_t)(n->num_control - c - 1) * sizeof *n->control);
        n->num_control--;
        c--;
      } else {
        n->control[c] = r;
      }
    }
    if (!mergeable(n)) continue;
    size_t at = (size_t)node_hash(n) & (slots - 1);
    while (table[at] && !same_node(table[at], n)) at = (at + 1) & (slots - 1);
    if (!table[at]) {
      table[at] = n;
      continue;
    }
    if (floe__opt_kept(o, n)) continue; /* it keeps its place; later ones may merge into it */
    rep[n->id] = table[at];
    o->need[n->id] = false;
    ps->removed++;
    ps->rewritten++;
  }
  floe__free(order);
  floe__free(rep);
  floe__free(table);
  return FLOE_OK;
}
