/* SPDX-License-Identifier: Apache-2.0 */
/* window_nd.h - attributes and geometry of the N-d window ops (Conv, ConvTranspose, Pool,
 * MaxPoolWithIndices; core/graph/ops_conv.def), shared by conv_nd.c and pool_nd.c. Internal to
 * floe-cpu.so. */
#ifndef FLOE_CPU_WINDOW_ND_H
#define FLOE_CPU_WINDOW_ND_H

#include <stdbool.h>
#include <stdint.h>

#include "cpu.h"

#define WND_MAX_RANK 5 /* N, C and 3 spatial dims */

typedef enum WndKind { WND_CONV, WND_CONV_T, WND_POOL_MAX, WND_POOL_AVG, WND_POOL_IDX } WndKind;

/* The node's attributes as given; lists are checked against the input's rank per call. */
typedef struct WndAttrs {
  WndKind kind;
  bool cf;  /* CHANNELS_FIRST */
  char pad; /* 'V', 'S' or 'E' */
  size_t n_strides, n_dil, n_ksize, n_pads, n_op; /* entries given; 0: the default */
  int64_t strides[WND_MAX_RANK], dil[WND_MAX_RANK], ksize[WND_MAX_RANK],
      pads[2 * WND_MAX_RANK], op[WND_MAX_RANK];
  int64_t groups;
  bool ceil_mode, include_pad;
  int64_t storage_order;
} WndAttrs;

/* Reads the attributes of a node of `kind`; errors are recorded on init and returned. */
floe_code wnd_parse(const FloeHostApi *host, FloeKernelInit *init, WndKind kind, WndAttrs *a);

/* One call's geometry. Spatial arrays hold 3 dims; with ns < 3 the first 3 - ns are
 * placeholders of size 1 (window 1, stride 1, no padding), so loops can always run 3-D. */
typedef struct WndGeo {
  int rank, ns;
  int64_t n, c, o;   /* batch, input channels, output channels (c for pooling) */
  int64_t groups;
  int64_t in[3], k[3], s[3], d[3], pb[3], pe[3], out[3];
} WndGeo;

/* The geometry for input x and, for convolutions, filter f (NULL for pooling); errors
 * (naming the shapes and attributes) are recorded on ctx and returned. */
floe_code wnd_geo(const WndAttrs *a, FloeKernelContext *ctx, const FloeTensor *x,
                  const FloeTensor *f, WndGeo *g);

/* The same for an input of rank r and dims d in the data format's order (a blocked tensor's
 * logical channels-last dims). */
floe_code wnd_geo_dims(const WndAttrs *a, FloeKernelContext *ctx, int r, const int64_t *d,
                       const FloeTensor *f, WndGeo *g);

/* Narrows g (a copy of whole) to output rows [r0, r1) of spatial dim d (WndGeo's index): the
 * input rows those windows read and the padding they leave. Returns the first input row. */
int64_t wnd_rows(WndGeo *g, const WndGeo *whole, int d, int64_t r0, int64_t r1);

/* oneDNN's view of a convolution part g: strides, dilations (counted from 0), paddings before
 * and after (one entry per spatial dim), and the logical [n, c, spatial...] input and
 * [n, o, spatial...] output dims. Arrays of at least 5 entries (oneDNN's dnnl_dims_t). */
void wnd_dnnl_conv_dims(const WndGeo *g, int64_t *strides, int64_t *dil, int64_t *pad_l,
                        int64_t *pad_r, int64_t *src_dims, int64_t *dst_dims);

/* Output dims in the data format's order. */
void wnd_out_dims(const WndAttrs *a, const WndGeo *g, int64_t *dims);

/* Element strides of logical (n, c, spatial 0..2) of a [n, c, sp] tensor in the data
 * format (placeholder spatial dims get stride 0). */
void wnd_strides(bool cf, int ns, int64_t c, const int64_t *sp, int64_t st[5]);

/* n elements of dtype dt (any numeric dtype) to double and back (rounding to nearest,
 * integers saturating): the reference paths compute in double. */
void wnd_to_f64(FloeDType dt, const void *src, double *dst, int64_t n);
void wnd_from_f64(FloeDType dt, const double *src, void *dst, int64_t n);

#endif
