/* SPDX-License-Identifier: Apache-2.0 */
/* ops_shape_collective.c - shape functions of the collective ops (ops_collective.def). */
#include <string.h>

#include "ops_shape.h"
#include "ops_shape_util.h"

/* The attributes every collective op shares, checked where the graph is built. */
static floe_code check_group(FloeShapeContext *sctx, int64_t *size) {
  *size = attr_int(sctx, "group_size", 0);
  if (*size < 1 || *size > 4096)
    return fail(sctx, "group_size %lld: give the number of devices in the group (1 to 4096)",
                (long long)*size);
  const char *merge = attr_string(sctx, "merge_op", NULL);
  if (merge && strcmp(merge, "sum") && strcmp(merge, "mean") && strcmp(merge, "max") &&
      strcmp(merge, "min") && strcmp(merge, "prod"))
    return fail(sctx, "merge_op \"%s\": give sum, mean, max, min or prod", merge);
  const char *hint = attr_string(sctx, "communication_hint", "auto");
  if (!hint || !*hint || strlen(hint) > 63)
    return fail(sctx, "communication_hint must name a backend (\"auto\", \"ring\" or a "
                      "collective plugin's name)");
  if (attr_int(sctx, "timeout_ms", 0) < 0)
    return fail(sctx, "timeout_ms %lld must be >= 0 (0: the default)",
                (long long)attr_int(sctx, "timeout_ms", 0));
  return FLOE_OK;
}

floe_code floe__shape_collective(const FloeHostApi *host, FloeShapeContext *sctx) {
  (void)host;
  int64_t n;
  floe_code rc = check_group(sctx, &n);
  if (rc != FLOE_OK) return rc;
  const char *op = op_name(sctx);
  if (strcmp(op, "CollectiveBcastRecv") == 0) {
    const FloeAttrValue *s = attr_of(sctx, "shape", FLOE_ATTR_SHAPE);
    if (!s || !fully_known(&s->u.shape))
      return fail(sctx, "shape must be fully defined: the receiver allocates the value before "
                        "it arrives");
    sctx->output_shapes[0] = s->u.shape;
    return FLOE_OK;
  }
  FloeShape in = sctx->input_shapes[0], out = in;
  bool gather = strcmp(op, "CollectiveGather") == 0;
  bool scatter = strcmp(op, "CollectiveReduceScatter") == 0;
  if ((gather || scatter) && in.rank == 0)
    return fail(sctx, "the input is a scalar: %s works on dim 0 (give shape [n, ...])", op);
  if (gather && in.rank > 0 && in.dims[0] >= 0) out.dims[0] = in.dims[0] * n;
  if (scatter && in.rank > 0 && in.dims[0] >= 0) {
    if (in.dims[0] % n)
      return fail(sctx, "dim 0 of the input (%lld) is not a multiple of group_size %lld: each "
                        "rank gets an equal block of rows",
                  (long long)in.dims[0], (long long)n);
    out.dims[0] = in.dims[0] / n;
  }
  sctx->output_shapes[0] = out;
  return FLOE_OK;
}
