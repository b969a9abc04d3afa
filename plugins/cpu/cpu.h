/* SPDX-License-Identifier: Apache-2.0 */
/* cpu.h - shared declarations of the CPU plugin (internal to floe-cpu.so). */
#ifndef FLOE_CPU_H
#define FLOE_CPU_H

#include <stdbool.h>

#include <floe/floe_plugin.h>

/* The host table, set once by floe_plugin_init before any kernel is registered. */
extern const FloeHostApi *cpu_host;

/* The plugin's one exported symbol (plugin.c). */
FLOE_PLUGIN_EXPORT floe_code floe_plugin_init(const FloeHostApi *host, FloePluginRegistrar *reg);

/* Register one kernel for device type "CPU". constraint_attr may be NULL (no constraint);
 * otherwise dtypes is its FLOE_DTYPE_BIT mask. */
floe_code cpu_add_kernel(FloePluginRegistrar *reg, const char *op, const char *constraint_attr,
                         uint32_t dtypes, uint32_t flags,
                         floe_code (*compute)(void *state, FloeKernelContext *ctx),
                         floe_code (*create)(const FloeHostApi *host, FloeKernelInit *init,
                                             void *user_data, void **state),
                         void (*destroy)(void *state), void *user_data);

/* Each kernel file registers its kernels; the first failure is returned. */
floe_code cpu_register_elementwise(FloePluginRegistrar *reg);
floe_code cpu_register_reduce(FloePluginRegistrar *reg);
floe_code cpu_register_softmax(FloePluginRegistrar *reg);
floe_code cpu_register_matmul(FloePluginRegistrar *reg);
floe_code cpu_register_conv(FloePluginRegistrar *reg);
floe_code cpu_register_array(FloePluginRegistrar *reg);
floe_code cpu_register_random(FloePluginRegistrar *reg);
/* Training. */
floe_code cpu_register_grad_elementwise(FloePluginRegistrar *reg); /* grad_elementwise.c */
floe_code cpu_register_grad_array(FloePluginRegistrar *reg);       /* grad_array.c */
floe_code cpu_register_conv_grad(FloePluginRegistrar *reg);        /* conv_grad.c */
floe_code cpu_register_optim(FloePluginRegistrar *reg);            /* optim.c */
/* Recurrent cells. */
floe_code cpu_register_lstm(FloePluginRegistrar *reg);             /* lstm.c */
/* N-d convolution and pooling. */
floe_code cpu_register_conv_nd(FloePluginRegistrar *reg);          /* conv_nd.c */
floe_code cpu_register_blocked(FloePluginRegistrar *reg);          /* blocked.c */
floe_code cpu_register_pool_nd(FloePluginRegistrar *reg);          /* pool_nd.c */
/* ONNX math family: determinants and spectral ops. */
floe_code cpu_register_spectral(FloePluginRegistrar *reg);         /* spectral.c */
/* Indexing ops. */
floe_code cpu_register_index(FloePluginRegistrar *reg);            /* index.c */
floe_code cpu_register_index_move(FloePluginRegistrar *reg);       /* index_move.c */
/* ONNX's resampling, detection and sequence-recurrent ops. */
floe_code cpu_register_resize(FloePluginRegistrar *reg);           /* resize.c */
floe_code cpu_register_rnn_onnx(FloePluginRegistrar *reg);         /* rnn_onnx.c */
/* Text features. */
floe_code cpu_register_tfidf(FloePluginRegistrar *reg);            /* tfidf.c */
/* Gradients of the N-d convolution and pooling ops. */
floe_code cpu_register_conv_nd_grad(FloePluginRegistrar *reg);     /* conv_nd_grad.c */
/* resize.c: n elements of any numeric dtype dt to f64 and back (integers rounded half to
 * even and saturated, NaN to 0; f16 and bf16 through f32). */
void cpu_to_f64(FloeDType dt, const void *src, double *dst, int64_t n);
void cpu_from_f64(FloeDType dt, const double *src, void *dst, int64_t n);

/* array.c: TensorFlow's StridedSlice spec resolved against an input shape (shared by
 * StridedSlice and StridedSliceGrad). */
typedef struct CpuStridedSlice {
  int64_t begin[FLOE_MAX_DIMS];  /* per input dim: first index taken */
  int64_t stride[FLOE_MAX_DIMS]; /* per input dim: step between taken indices (may be < 0) */
  int64_t size[FLOE_MAX_DIMS];   /* per input dim: indices taken (1 for a shrunk dim) */
  int out_rank;                  /* the slice's shape: shrunk dims dropped, new axes added */
  int64_t out_dims[FLOE_MAX_DIMS];
  int whole;                     /* the slice is the whole input, in order */
} CpuStridedSlice;
/* Kernel create of both ops: parses the five *_mask attributes into a state that the
 * kernel's destroy frees with cpu_host->free. */
floe_code cpu_strided_slice_create(const FloeHostApi *host, FloeKernelInit *init,
                                   void *user_data, void **state);
/* Reads begin, end and strides from inputs first..first+2 of ctx and resolves them with the
 * masks of state against a tensor of rank / dims. Errors are recorded on ctx. */
floe_code cpu_strided_slice_resolve(FloeKernelContext *ctx, const void *state, int first,
                                    int rank, const int64_t *dims, CpuStridedSlice *out);

/* reduce.c: out = the sum of x (dense, dtype dt, rank <= CPU_SUM_MAX_DIMS) over the dims
 * marked in red[]; out holds the kept dims in order. Accumulates like Sum (float blocks in
 * f32 lanes combined in f64, halves in f32, integers wrapping); an empty sum is 0. Splits
 * over the pool when large. Temporary memory comes from ctx; errors are recorded on ctx. */
#define CPU_SUM_MAX_DIMS (2 * FLOE_MAX_DIMS)
floe_code cpu_sum_dims(FloeKernelContext *ctx, FloeDType dt, const void *x, void *out, int rank,
                       const int64_t *dims, const int *red);

/* matmul.c: C = op(A) op(B) + beta C for row-major f32 matrices, A stored [M,K] ([K,M] when
 * ta), B [K,N] ([N,K] when tb), with leading dimensions (elements from one stored row to the
 * next) lda, ldb, ldc, so operands may be blocks of larger matrices. MatMul's path: OpenBLAS
 * for tiny products, else dnnl_sgemm, large ones cut into blocks of C on the pool. Sizes
 * must fit a BLAS int. Returns 0 (dnnl_success) or the failing dnnl_status_t. Thread-safe
 * for disjoint C. */
int cpu_gemm_f32(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                 const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

#endif
