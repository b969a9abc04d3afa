/* SPDX-License-Identifier: Apache-2.0 */
/* floe_tensor_array.h - TensorArrays: lists of tensors written and read by index inside
 * one step, for dynamic RNNs and loops (TensorFlow's TensorArray). Included by floe.h.
 *
 * A TensorArray lives for one floe_session_run: its elements are written once each, read,
 * gathered or stacked, and everything is released when the step ends (a handle fetched
 * from one run names nothing in the next: using it is an error, never a crash). Each
 * operation takes the `flow` scalar produced by the operation before it and writes return
 * the TensorArray with a new flow, which is what orders a read after the write it reads:
 *
 *   FloeTensorArray ta = floe_tensor_array(g, "ta", FLOE_F32, size, NULL);
 *   ta = floe_ta_write(g, NULL, ta, i, x);       // keep the returned flow
 *   FloeOutput y = floe_ta_read(g, NULL, ta, i);
 *
 * Gradients flow through reads, writes, gathers, scatters, stacks, unstacks, concats and splits
 * (floe_gradients uses a gradient TensorArray per forward one, summing the gradients of an
 * element read several times). The builders follow floe.h's conventions: they record the
 * graph's sticky error and return an invalid output / TensorArray (node NULL) on failure;
 * the outputs and nodes they return belong to g (borrowed, valid while g lives).
 * Errors at run time name the TensorArray (tensor_array_name, else the node that made it),
 * the index and the size.
 */
#ifndef FLOE_TENSOR_ARRAY_H
#define FLOE_TENSOR_ARRAY_H

#include "floe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The handle (resource) and the current flow (f32 scalar) of a TensorArray. Outputs
 * borrowed from the graph. */
typedef struct FloeTensorArray {
  FloeOutput handle;
  FloeOutput flow;
} FloeTensorArray;

typedef struct FloeTensorArrayOptions {
  size_t struct_size;            /* sizeof(FloeTensorArrayOptions) */
  FloeShape element_shape;       /* every element's shape; unknown dims allowed (default
                                    floe_shape_unknown()). A full shape lets stacks of zero
                                    elements and gradients of unwritten elements work. */
  int dynamic_size;              /* non-zero: writes past the end grow it (default 0) */
  int clear_after_read;          /* non-zero (default): a read releases the element and a
                                    second read of it is an error */
  const char *tensor_array_name; /* the name errors use; NULL: the TensorArrayV3 node's */
} FloeTensorArrayOptions;

/* The defaults above. */
FLOE_API void floe_tensor_array_options_init(FloeTensorArrayOptions *opts);

/* A TensorArrayV3 node (named name; NULL: automatic) of `size` (an i32 scalar) elements of
 * dtype. opts may be NULL (defaults). */
FLOE_API FloeTensorArray floe_tensor_array(FloeGraph *g, const char *name, FloeDType dtype,
                                           FloeOutput size,
                                           const FloeTensorArrayOptions *opts);

/* Element `index` (i32 scalar) := value (stored by reference, never copied). Returns ta
 * with the write's flow. Writing an index twice, past the size of a TensorArray that is
 * not dynamic, or a value of another dtype or element shape is an error when it runs. */
FLOE_API FloeTensorArray floe_ta_write(FloeGraph *g, const char *name, FloeTensorArray ta,
                                       FloeOutput index, FloeOutput value);
/* Element `index`. Reading an unwritten or (clear_after_read) already read index is an
 * error when it runs. */
FLOE_API FloeOutput floe_ta_read(FloeGraph *g, const char *name, FloeTensorArray ta,
                                 FloeOutput index);
/* Elements indices[0..n) (i32 vector) as the rows of one [n, ...element] tensor; they must
 * all have one shape. */
FLOE_API FloeOutput floe_ta_gather(FloeGraph *g, const char *name, FloeTensorArray ta,
                                   FloeOutput indices);
/* Element indices[k] := row k of value (views of value's rows, no copy). */
FLOE_API FloeTensorArray floe_ta_scatter(FloeGraph *g, const char *name, FloeTensorArray ta,
                                         FloeOutput indices, FloeOutput value);
/* Elements 0..size-1 stacked into one [size, ...element] tensor. */
FLOE_API FloeOutput floe_ta_stack(FloeGraph *g, const char *name, FloeTensorArray ta);
/* Elements 0..size-1 one after the other along their first dimension, which may differ
 * between elements (the rest must agree): [sum of rows, ...rest]. *lengths (when not NULL)
 * gets each element's first dimension (i64 [size]). */
FLOE_API FloeOutput floe_ta_concat(FloeGraph *g, const char *name, FloeTensorArray ta,
                                   FloeOutput *lengths);
/* The inverse of floe_ta_concat: element k := the next lengths[k] rows of value (views,
 * no copy); lengths is i64 [elements] and must add up to value's rows. */
FLOE_API FloeTensorArray floe_ta_split(FloeGraph *g, const char *name, FloeTensorArray ta,
                                       FloeOutput value, FloeOutput lengths);
/* Element k := row k of value, for every row. */
FLOE_API FloeTensorArray floe_ta_unstack(FloeGraph *g, const char *name, FloeTensorArray ta,
                                         FloeOutput value);
/* The current size (i32 scalar). */
FLOE_API FloeOutput floe_ta_size(FloeGraph *g, const char *name, FloeTensorArray ta);
/* A TensorArrayCloseV3 node: running it releases the elements early; later operations on
 * the TensorArray are errors. Returns the node (borrowed from g) or NULL. */
FLOE_API FloeNode *floe_ta_close(FloeGraph *g, const char *name, FloeTensorArray ta);

#ifdef __cplusplus
}
#endif
#endif /* FLOE_TENSOR_ARRAY_H */
