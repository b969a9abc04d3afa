/* SPDX-License-Identifier: Apache-2.0 */
/* grad_resize.c - gradient registrations of the ops in ops_resize.def. Selected box indices
 * (BatchedNonMaxSuppression) carry no gradient. The others are differentiable but have no
 * gradient function yet: differentiating through one is an error naming the node, never a
 * silent zero (an imported model fine-tuned with --trainable must not train wrongly). */
#include "train.h"

static floe_code grad_missing(FloeGradCtx *c, FloeStatus *st) {
  const FloeNode *n = c->node;
  return floe_status_set(st, FLOE_UNIMPLEMENTED,
                         "floe_gradients: node '%s' (%s) lies between the xs and the ys, and "
                         "Floe has no gradient for %s yet; wrap the path in StopGradient if "
                         "nothing before it needs training",
                         n->name, n->op->name, n->op->name);
}

floe_code floe__grads_register_resize(FloeStatus *st) {
  static const char *const missing[] = {"Resize", "GridSample", "RoiAlign", "RNN", "GRU", "LSTM"};
  floe_code rc = floe__grad_register("BatchedNonMaxSuppression", NULL, st);
  for (size_t i = 0; rc == FLOE_OK && i < FLOE__ARRAY_LEN(missing); i++)
    rc = floe__grad_register(missing[i], grad_missing, st);
  return rc;
}
