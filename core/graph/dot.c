/* SPDX-License-Identifier: Apache-2.0 */
/* dot.c - Graphviz DOT pictures of graphs: one box per node (name, op, device), data edges
 * labelled with the dtype and shape they carry, control edges dashed. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "graph.h"

/* Writes s as the inside of a DOT double-quoted string. Backslash is escaped too, since
 * DOT reads "\N", "\l" and friends inside labels. */
static void put_escaped(FILE *out, const char *s) {
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(out, "\\%c", c);
    else if (c == '\n')
      fputs("\\n", out);
    else if (c < 0x20 || c == 0x7f)
      fprintf(out, "\\\\x%02x", c);
    else
      fputc(c, out);
  }
}

/* Fill colours for devices, in order of first appearance (a colour-blind-safe palette). */
static const char *const palette[] = {"#88ccee", "#ddcc77", "#cc6677", "#117733", "#aa4499",
                                      "#44aa99", "#999933", "#882255", "#332288", "#dddddd"};

/* The index of dev among the distinct devices seen so far (added when new), or -1. */
static int device_slot(const char **seen, int *num_seen, const char *dev) {
  if (!dev) return -1;
  for (int i = 0; i < *num_seen; i++)
    if (strcmp(seen[i], dev) == 0) return i;
  if (*num_seen >= (int)(sizeof palette / sizeof palette[0])) return *num_seen - 1;
  seen[*num_seen] = dev;
  return (*num_seen)++;
}

floe_code floe_graph_write_dot(const FloeGraph *g, FILE *out, FloeStatus *status) {
  return floe_graph_write_dot_devices(g, NULL, out, status);
}

/* The caller keeps `out` open; nothing is closed or freed here. */
floe_code floe_graph_write_dot_devices(const FloeGraph *g, const char *const *devices, FILE *out,
                                       FloeStatus *status) {
  if (!g || !out)
    return floe_status_set(status, FLOE_INVALID_ARGUMENT, "write_dot: graph or file is NULL");
  fputs("digraph floe {\n"
        "  rankdir=TB;\n"
        "  node [shape=box, style=rounded, fontname=\"Helvetica\"];\n"
        "  edge [fontname=\"Helvetica\", fontsize=10];\n",
        out);
  const char *seen[sizeof palette / sizeof palette[0]];
  int num_seen = 0;
  for (int i = 0; i < g->num_nodes; i++) {
    const FloeNode *n = g->nodes[i];
    fprintf(out, "  n%d [label=\"", i);
    put_escaped(out, n->name);
    fputs("\\n", out);
    put_escaped(out, n->op->name);
    const char *placed = devices ? devices[i] : NULL;
    if (placed || n->device) {
      fputs("\\n@", out);
      put_escaped(out, placed ? placed : n->device);
    }
    int slot = device_slot(seen, &num_seen, placed);
    if (slot >= 0)
      fprintf(out, "\", style=\"rounded,filled\", fillcolor=\"%s\"];\n", palette[slot]);
    else
      fputs("\"];\n", out);
  }
  for (int k = 0; k < num_seen; k++) { /* the legend */
    fprintf(out, "  legend%d [shape=note, style=filled, fillcolor=\"%s\", label=\"", k, palette[k]);
    put_escaped(out, seen[k]);
    fputs("\"];\n", out);
  }
  for (int i = 0; i < g->num_nodes; i++) {
    const FloeNode *n = g->nodes[i];
    for (int k = 0; k < n->num_inputs; k++) {
      const FloeOutput *in = &n->inputs[k];
      char shape[128];
      floe_shape_str(&in->node->out_shapes[in->index], shape, sizeof shape);
      fprintf(out, "  n%d -> n%d [label=\"", in->node->id, i);
      if (in->index) fprintf(out, ":%d ", in->index);
      fprintf(out, "%s%s\"];\n", floe_dtype_name(in->node->out_dtypes[in->index]), shape);
    }
    for (int k = 0; k < n->num_control; k++)
      fprintf(out, "  n%d -> n%d [style=dashed];\n", n->control[k]->id, i);
  }
  fputs("}\n", out);
  if (fflush(out) != 0 || ferror(out)) {
    int e = errno;
    if (e) return floe__status_from_errno(status, e, "write_dot: writing failed");
    return floe_status_set(status, FLOE_UNKNOWN, "write_dot: writing failed: stream error");
  }
  return FLOE_OK;
}
