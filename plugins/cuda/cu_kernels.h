/* SPDX-License-Identifier: Apache-2.0 */
/* cu_kernels.h - launchers of the CUDA plugin's own kernels (cu_elementwise.cu, cu_reduce.cu),
 * callable from C. Plain types only, so the .c files that plan the work (shapes,
 * broadcasting, dtypes) build with gcc and only the launchers go through nvcc.
 *
 * Every launcher enqueues on `stream` and returns the launch's cudaError_t as an int
 * (0 = cudaSuccess); nothing waits. Pointers are device memory unless said otherwise.
 * Dtype codes are FloeDType values (floe_types.h); a launcher given a dtype it has no
 * instance for returns CU_UNSUPPORTED without launching. */
#ifndef FLOE_CU_KERNELS_H
#define FLOE_CU_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CUstream_st *CuStream; /* = cudaStream_t */

#define CU_MAX_DIMS 8
#define CU_MAX_INPUTS 3
#define CU_UNSUPPORTED (-1)

/* A broadcast plan (see cuda_util.c): output dims after collapsing, innermost last, and
 * per input an element stride per dim (0 where the input is broadcast). */
typedef struct CuBcast {
  int rank; /* 1..CU_MAX_DIMS */
  int64_t dims[CU_MAX_DIMS];
  int64_t strides[CU_MAX_INPUTS][CU_MAX_DIMS];
  int64_t n; /* output elements */
} CuBcast;

/* Binary ops (z = f(x, y)); comparisons write bool (1 byte). */
typedef enum CuBinaryOp {
  CU_ADD, CU_SUB, CU_MUL, CU_DIV, CU_MAX, CU_MIN, CU_POW, CU_SQDIFF,
  CU_EQ, CU_NE, CU_LT, CU_LE, CU_GT, CU_GE, CU_AND, CU_OR,
  /* Gradients, (a, b) in the op's input order. */
  CU_RELU_GRAD,     /* (dy, x): dy * (x > 0) */
  CU_RELU6_GRAD,    /* (dy, x): dy * (0 < x < 6) */
  CU_SIGMOID_GRAD,  /* (y, dy): dy * y * (1 - y) */
  CU_TANH_GRAD,     /* (y, dy): dy * (1 - y^2) */
  CU_SQRT_GRAD,     /* (y, dy): dy * 0.5 / y */
  CU_RSQRT_GRAD,    /* (y, dy): dy * -0.5 * y^3 */
  CU_SOFTPLUS_GRAD, /* (dy, x): dy * sigmoid(x) */
  CU_LEAKY_RELU_GRAD /* (dy, x): dy * (x > 0 ? 1 : alpha) */
} CuBinaryOp;

/* x and y of dtype dt (f32, f64, i32, i64; bool for EQ/NE/AND/OR), z of dt or bool. */
int cu_binary(CuStream s, CuBinaryOp op, int dt, const CuBcast *p, const void *x,
              const void *y, void *z, double alpha);

typedef enum CuUnaryOp {
  CU_NEG, CU_ABS, CU_SQUARE, CU_SQRT, CU_RSQRT, CU_EXP, CU_LOG, CU_RELU, CU_RELU6,
  CU_SIGMOID, CU_TANH, CU_SOFTPLUS, CU_SIGN, CU_FLOOR, CU_SIN, CU_COS, CU_LEAKY_RELU,
  CU_ELU, CU_NOT, CU_RECIPROCAL
} CuUnaryOp;

/* y[i] = f(x[i]) for n elements of dtype dt; alpha for LeakyRelu / Elu. */
int cu_unary(CuStream s, CuUnaryOp op, int dt, int64_t n, const void *x, void *y,
             double alpha);

/* y = (dst) x for n elements (float to int truncates and saturates, NaN -> 0; to bool is
 * x != 0). */
int cu_cast(CuStream s, int src_dt, int dst_dt, int64_t n, const void *x, void *y);

/* z = c ? t : e over a 3-input plan; elem_size 1, 2, 4 or 8. */
int cu_select(CuStream s, const CuBcast *p, const uint8_t *c, const void *t, const void *e,
              void *z, int elem_size);

/* n elements of elem_size (1, 2, 4 or 8) bytes, each the low elem_size bytes of pattern. */
int cu_fill(CuStream s, void *dst, int64_t n, int elem_size, uint64_t pattern);

/* out[i] = x[plan offset of i] (a one-input plan: BroadcastTo, ExpandReduced), elements of
 * elem_size bytes; with scale != 1 (f32 only) out[i] = x[...] * scale. */
int cu_broadcast_copy(CuStream s, const CuBcast *p, const void *x, void *out, int elem_size,
                      float scale);

/* out[i] = x[plan offset of i] / count (ExpandReduced with mean=true), dt any of f32, f64,
 * f16, bf16, i8, u8, i32, i64, in the CPU plugin's arithmetic: floats divide in their own
 * type, f16 / bf16 in f32, integers truncate toward zero. count >= 1. */
int cu_broadcast_div(CuStream s, int dt, const CuBcast *p, const void *x, void *out,
                     int64_t count);

/* out = x with dims permuted: out dim i is x dim perm[i]; elem_size 1, 2, 4 or 8. */
int cu_transpose(CuStream s, int rank, const int64_t *dims, const int *perm, const void *x,
                 void *out, int elem_size);

/* Out = sum of the k inputs (k <= 8), n elements of dt (f32, f64, i32, i64). */
int cu_add_n(CuStream s, int dt, int64_t n, const void *const *in, int k, void *out);

/* f32 <-> bf16 (round to nearest even, NaN kept). */
int cu_f32_to_bf16(CuStream s, int64_t n, const float *x, uint16_t *y);

/* ---------------------------------------------------------------------------------- */
/* Optimisers: scalars (lr, momentum, ...) are device pointers to one element each, so
 * a learning rate computed on the device is used without a round trip. f32 only. */

int cu_apply_sgd(CuStream s, int64_t n, float *var, const float *alpha, const float *delta);
int cu_apply_momentum(CuStream s, int64_t n, float *var, float *accum, const float *lr,
                      const float *grad, const float *momentum, int nesterov);
int cu_apply_adam(CuStream s, int64_t n, float *var, float *m, float *v, const float *b1p,
                  const float *b2p, const float *lr, const float *b1, const float *b2,
                  const float *eps, const float *grad, int nesterov);
/* var += sign * value (AssignAdd / AssignSub), n elements of dt. */
int cu_assign_add(CuStream s, int dt, int64_t n, void *var, const void *value, int sign);

/* ---------------------------------------------------------------------------------- */
/* Reductions (cu_reduce.cu). */

typedef enum CuReduceOp { CU_R_SUM, CU_R_MEAN, CU_R_MAX, CU_R_MIN, CU_R_PROD } CuReduceOp;

/* x viewed as [outer, r, inner]; out[o, i] = reduce over r. Mean divides by r (integer
 * division for integers); an empty reduction gives the identity (0 for Mean). dt f32, f64,
 * i32, i64. */
int cu_reduce(CuStream s, CuReduceOp op, int dt, int64_t outer, int64_t r, int64_t inner,
              const void *x, void *out);

/* ArgMax (want_max) / ArgMin over x viewed as [outer, r, inner] (r >= 1); first index on
 * ties, NaN wins. out is i32 or i64 (out_dt). */
int cu_arg_reduce(CuStream s, int want_max, int dt, int out_dt, int64_t outer, int64_t r,
                  int64_t inner, const void *x, void *out);

/* Softmax cross-entropy over rows of f32 logits [batch, classes]: loss[batch],
 * backprop[batch, classes]. Dense: labels [batch, classes] f32. Sparse: labels [batch] of
 * label_dt (i32 / i64), all in [0, classes) (checked by the caller). */
int cu_softmax_xent(CuStream s, int64_t batch, int64_t classes, const float *logits,
                    const float *labels, float *loss, float *backprop);
int cu_sparse_softmax_xent(CuStream s, int64_t batch, int64_t classes, const float *logits,
                           int label_dt, const void *labels, float *loss, float *backprop);

/* Softmax (or LogSoftmax when log_sm) of x viewed as [outer, n, inner], along n; y the same
 * shape, not overlapping x. dt f32 or f64. Max-subtracted, the exponentials summed in
 * double (the CPU plugin's passes); one thread per (outer, inner) column. */
int cu_softmax(CuStream s, int log_sm, int dt, int64_t outer, int64_t n, int64_t inner,
               const void *x, void *y);

/* Gather: params [outer, n, inner] (elements of elem_size), indices (k of idx_dt, all in
 * [0, n): checked by the caller) -> out [outer, k, inner]. */
int cu_gather(CuStream s, int64_t outer, int64_t n, int64_t inner, int elem_size,
              const void *params, int idx_dt, const void *indices, int64_t k, void *out);

/* OneHot: indices [outer * inner] of idx_dt -> out [outer, depth, inner] with on / off
 * (patterns of elem_size bytes); an index outside [0, depth) gives an all-off row. */
int cu_one_hot(CuStream s, int64_t outer, int64_t depth, int64_t inner, int idx_dt,
               const void *indices, int elem_size, uint64_t on, uint64_t off, void *out);

/* AvgPoolGrad: dx [n, h, w, c] (NHWC, or NCHW when nchw) from dy [n, oh, ow, c]: each dy
 * element spread evenly over the valid (non-padding) inputs of its window. f32. */
typedef struct CuPoolGeo {
  int64_t n, c, h, w, oh, ow, kh, kw, sh, sw, pad_t, pad_l;
  int nchw;
} CuPoolGeo;
int cu_avg_pool_grad(CuStream s, const CuPoolGeo *g, const float *dy, float *dx);
/* AvgPool: y [n, oh, ow, c] (NHWC, or NCHW when nchw) from x [n, h, w, c]: each output the
 * mean of the valid (non-padding) inputs of its window, for padding cuDNN cannot exclude
 * from the count (asymmetric SAME). f32. */
int cu_avg_pool(CuStream s, const CuPoolGeo *g, const float *x, float *y);

/* ---------------------------------------------------------------------------------- */
/* Padding and cropping (cu_pad.cu). */

/* dst [dst_dims] from src [src_dims], both 4-D row-major with elements of elem_size (1, 2,
 * 4 or 8) bytes: dst[i] = src[i - off] (per dim) where that index lies inside src, else the
 * low elem_size bytes of fill. off >= 0 with dst larger pads; off <= 0 with dst smaller
 * crops. src and dst must not overlap. */
int cu_pad_copy4(CuStream s, int elem_size, const int64_t *src_dims, const void *src,
                 const int64_t *dst_dims, void *dst, const int64_t *off, uint64_t fill);

#ifdef __cplusplus
}
#endif
#endif
