/* SPDX-License-Identifier: Apache-2.0 */
/* mem_order.c - memory-aware scheduling: a rank for every node of an executor, from a
 * simulated run that keeps the bytes of live tensors low; the executor takes its ready
 * nodes in rank order (lowest first), so when several are ready the one that frees the most
 * (or allocates the least) runs first, and a chain that ends in frees (an optimiser update
 * consuming a gradient) is not left waiting behind one that allocates.
 *
 * The simulation runs one node at a time: among the ready nodes it picks the one whose
 * outputs add the fewest bytes minus the bytes of the inputs it is the last reader of (ties:
 * the graph's order), as known when the node became ready. Bytes come from the inferred
 * shapes; an unknown dim counts as BATCH_GUESS (most are the batch dim, shared by the
 * activations, which the guess keeps in proportion to the weights). Outputs nobody reads
 * are freed at once; fetched ones never. It is a heuristic (the best order is NP-hard):
 * what it must never do is change results, which it cannot, since only the order of ready
 * nodes changes.
 *
 * And an update op none of whose outputs the step reads (an optimiser's apply) is normally
 * deferred, run when the pool has nothing else to do; one that frees FREE_NOW_BYTES or more
 * (the gradient it consumes, read by nothing else) runs as soon as it is ready instead:
 * deferred, the cnn's 12 MiB dense-kernel gradient stayed alive through the whole backward
 * pass of the convolutions in some steps and not in others. */
#include <string.h>

#include "exec_private.h"

#define BATCH_GUESS 64
#define FREE_NOW_BYTES (1 << 20)

typedef struct Item {
  int64_t key;
  int node;
} Item;

static bool item_less(Item a, Item b) {
  return a.key < b.key || (a.key == b.key && a.node < b.node);
}

static void heap_push(Item *h, int *n, Item it) {
  int i = (*n)++;
  while (i > 0 && item_less(it, h[(i - 1) / 2])) {
    h[i] = h[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  h[i] = it;
}

static Item heap_pop(Item *h, int *n) {
  Item top = h[0], last = h[--*n];
  int i = 0;
  for (;;) {
    int c = 2 * i + 1;
    if (c >= *n) break;
    if (c + 1 < *n && item_less(h[c + 1], h[c])) c++;
    if (!item_less(h[c], last)) break;
    h[i] = h[c];
    i = c;
  }
  h[i] = last;
  return top;
}

/* Bytes of output k of node (estimated where the shape is not known). */
static int64_t out_bytes(const FloeNode *node, int k) {
  const FloeShape *s = &node->out_shapes[k];
  int64_t n = 1;
  for (int d = 0; d < (s->rank > 0 ? s->rank : 0); d++) {
    int64_t v = s->dims[d] < 0 ? BATCH_GUESS : s->dims[d];
    n = v > 0 && n > INT64_MAX / 8 / v ? INT64_MAX / 8 : n * v;
  }
  size_t es = floe_dtype_size(node->out_dtypes[k]);
  return n * (int64_t)(es ? es : 8);
}

/* What running node i now adds: its read outputs' bytes minus those of the entries whose
 * last remaining reader it is (rem: readers left per entry). */
static int64_t delta(const FloeExecutor *e, int i, const int *rem, const int64_t *bytes) {
  const ExecNode *en = &e->nodes[i];
  int64_t d = 0;
  for (int k = 0; k < en->num_outputs; k++)
    if (e->uses0[en->out_base + k] > 0) d += bytes[en->out_base + k];
  for (int j = 0; j < en->num_inputs; j++) {
    int src = e->input_src[en->in_base + j], reads = 0;
    if (src < 0) continue;
    bool first = true;
    for (int q = 0; q < en->num_inputs; q++) {
      if (e->input_src[en->in_base + q] != src) continue;
      if (q < j) first = false;
      reads++;
    }
    if (first && rem[src] == reads) d -= bytes[src];
  }
  return d;
}

floe_code floe__exec_memory_order(FloeExecutor *e, FloeStatus *st) {
  int n = e->num_nodes, ne = e->num_entries;
  e->rank = floe__malloc((size_t)(n ? n : 1) * sizeof *e->rank);
  int *rem = floe__malloc((size_t)(ne ? ne : 1) * sizeof *rem);
  int *pending = floe__malloc((size_t)(n ? n : 1) * sizeof *pending);
  int64_t *bytes = floe__malloc((size_t)(ne ? ne : 1) * sizeof *bytes);
  Item *heap = floe__malloc((size_t)(n ? n : 1) * sizeof *heap);
  if (!e->rank || !rem || !pending || !bytes || !heap) {
    floe__free(rem);
    floe__free(pending);
    floe__free(bytes);
    floe__free(heap);
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory ordering %d nodes", n);
  }
  memcpy(rem, e->uses0, (size_t)ne * sizeof *rem);
  memcpy(pending, e->pending0, (size_t)n * sizeof *pending);
  for (int i = 0; i < n; i++)
    for (int k = 0; k < e->nodes[i].num_outputs; k++)
      bytes[e->nodes[i].out_base + k] = out_bytes(e->nodes[i].node, k);
  int nh = 0, next = 0;
  for (int i = 0; i < n; i++)
    if (pending[i] == 0) heap_push(heap, &nh, (Item){delta(e, i, rem, bytes), i});
  while (nh > 0) {
    int i = heap_pop(heap, &nh).node;
    const ExecNode *en = &e->nodes[i];
    e->rank[i] = next++;
    for (int j = 0; j < en->num_inputs; j++) {
      int src = e->input_src[en->in_base + j];
      if (src >= 0) rem[src]--;
    }
    for (int s = 0; s < en->num_succ; s++) {
      int m = e->succ[en->succ_base + s];
      if (--pending[m] == 0) heap_push(heap, &nh, (Item){delta(e, m, rem, bytes), m});
    }
  }
  /* Nodes a cycle keeps from ever being ready (a frame's loop, run by the frame scheduler)
   * come last, in the graph's order. */
  for (int i = 0; i < n; i++)
    if (pending[i] > 0) e->rank[i] = next++;
  /* what each deferred node frees when it runs first of its inputs' readers */
  memcpy(rem, e->uses0, (size_t)ne * sizeof *rem);
  for (int i = 0; i < n; i++)
    if (e->nodes[i].deferred && -delta(e, i, rem, bytes) >= FREE_NOW_BYTES)
      e->nodes[i].deferred = false;
  floe__free(rem);
  floe__free(pending);
  floe__free(bytes);
  floe__free(heap);
  return FLOE_OK;
}
