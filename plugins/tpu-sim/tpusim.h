/* SPDX-License-Identifier: Apache-2.0 */
/* tpusim.h - shared declarations of the tpu-sim plugin (internal to floe-tpu-sim.so).
 *
 * tpu-sim is a simulated TPU-like accelerator: each chip owns an arena (its "HBM") that the
 * core reaches only through the device's copy functions, a matrix unit that multiplies
 * bf16-rounded operands with f32 accumulation, an f32 vector unit, and a cycle cost model
 * (cost.c) whose simulated time every kernel reports to the profiler. The arithmetic runs on
 * the host CPU; only the numerics and the timing are the simulated chip's. */
#ifndef FLOE_TPUSIM_H
#define FLOE_TPUSIM_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <floe/floe_plugin.h>

/* The host table, set once by floe_plugin_init before any kernel is registered. */
extern const FloeHostApi *tpu_host;

/* ------------------------------------------------------------------------------------ */
/* Configuration (plugin.c): read from the environment once per floe_plugin_init. */
typedef struct TpuConfig {
  int devices;        /* FLOE_TPUSIM_DEVICES, chips presented (default 1) */
  uint64_t memory;    /* FLOE_TPUSIM_MEMORY, bytes of HBM per chip (default 16 GiB) */
  double clock_hz;    /* FLOE_TPUSIM_CLOCK_HZ (default 940e6) */
  double hbm_bw;      /* FLOE_TPUSIM_HBM_BW, bytes/s (default 600e9) */
  double launch_ns;   /* FLOE_TPUSIM_LAUNCH_NS, fixed cost per kernel (default 2000) */
  double host_bw;     /* FLOE_TPUSIM_HOST_BW, bytes/s each way over the host link (16e9) */
} TpuConfig;

/* ------------------------------------------------------------------------------------ */
/* Arena (arena.c): one mmap of the capacity per chip, committed page by page as it is
 * touched, carved by a best-fit allocator whose bookkeeping lives in host memory (so a
 * stray device pointer can never corrupt it). Thread-safe (one mutex per arena). */
typedef struct TpuFree TpuFree;
typedef struct TpuArena {
  char *base;          /* start of the mapping; owned, unmapped by tpu_arena_destroy */
  size_t capacity;     /* bytes mapped */
  pthread_mutex_t lock;
  TpuFree *free_list;  /* free blocks in address order, neighbours always coalesced */
  size_t in_use, peak; /* bytes handed out (rounded), and their high-water mark */
} TpuArena;

/* Maps `capacity` bytes (MAP_NORESERVE: pages are committed when first written). Returns 0,
 * or an errno value with nothing left to free. */
int tpu_arena_init(TpuArena *a, size_t capacity);
void tpu_arena_destroy(TpuArena *a);
/* Best fit among the free blocks; alignment a power of two. NULL when no block fits (the
 * arena is full or too fragmented); never grows past the capacity. */
void *tpu_arena_alloc(TpuArena *a, size_t bytes, size_t alignment);
/* Returns a block of tpu_arena_alloc with the same `bytes`; neighbours coalesce. */
void tpu_arena_free(TpuArena *a, void *p, size_t bytes);
/* True when [p, p + n) lies inside the mapping. */
static inline bool tpu_arena_holds(const TpuArena *a, const void *p, size_t n) {
  const char *c = p;
  return c >= a->base && n <= a->capacity && (size_t)(c - a->base) <= a->capacity - n;
}

/* ------------------------------------------------------------------------------------ */
/* Chips (plugin.c). */
typedef struct TpuPlugin TpuPlugin;
typedef struct TpuChip {
  int ordinal;         /* index among this plugin's chips: "tpu-sim:<ordinal>" */
  TpuArena arena;
  const TpuConfig *cfg; /* the plugin's; lives as long as the chip */
  TpuPlugin *plugin;   /* every chip of the same init, to name another chip's memory */
} TpuChip;

struct TpuPlugin {
  TpuConfig cfg;
  int num_chips;
  TpuChip *chips;      /* num_chips entries; freed when the last chip is destroyed */
  int live;            /* chips not yet destroyed (guarded by the destroy order: serial) */
};

/* Register one kernel for device type "TPU_SIM". constraint_attr may be NULL; else dtypes
 * is its FLOE_DTYPE_BIT mask. */
floe_code tpu_add_kernel(FloePluginRegistrar *reg, const char *op, const char *constraint_attr,
                         uint32_t dtypes, uint32_t flags,
                         floe_code (*compute)(void *state, FloeKernelContext *ctx),
                         floe_code (*create)(const FloeHostApi *host, FloeKernelInit *init,
                                             void *user_data, void **state),
                         void (*destroy)(void *state), void *user_data);

/* The chip a kernel runs on. */
static inline TpuChip *tpu_chip(const FloeKernelContext *ctx) {
  return tpu_host->ctx_device_state(ctx);
}

/* Every non-empty input of ctx must lie in its chip's arena: a tensor that reached the
 * kernel in host memory or another chip's would otherwise be read silently. On a miss the
 * error names the input index, its dtype and shape, and where it lives. */
floe_code tpu_check_inputs(FloeKernelContext *ctx);
/* ctx_allocate_output, then the same check on the new output; *data is its address (NULL
 * when empty). */
floe_code tpu_output(FloeKernelContext *ctx, int i, int rank, const int64_t *dims,
                     FloeTensor **out, void **data);
/* Scratch memory from the chip (ctx_allocate_temp), checked like an output. */
floe_code tpu_temp(FloeKernelContext *ctx, size_t bytes, void **out);

/* "[2,3,4]" of a tensor, for messages. */
#define TPU_SHAPE_STR_MAX 192
const char *tpu_shape_str(const FloeTensor *t, char *buf, size_t len);
const char *tpu_dims_str(int rank, const int64_t *dims, char *buf, size_t len);

/* host->parallel_for, except that small work (cost below ~32 us) runs inline. */
void tpu_parallel_for(int64_t n, int64_t cost_per_unit, FloeParallelFn fn, void *arg);

/* bf16 of the matrix unit: f32 rounded to the nearest bf16 (ties to even), returned as the
 * f32 of that value. NaN stays NaN; overflow rounds to Inf as IEEE rounding does. */
static inline float tpu_round_bf16(float f) {
  union { float f; uint32_t u; } v = {f};
  uint32_t u = v.u;
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    v.u = u | 0x00400000u; /* quiet NaN, kept NaN */
  } else {
    v.u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  }
  return v.f;
}

/* ------------------------------------------------------------------------------------ */
/* Cost model (cost.c): simulated nanoseconds of one kernel. */

/* Matrix unit: a batch of products [m,k] x [k,n]; bytes is the HBM traffic (operands read
 * and result written). */
double tpu_cost_matmul_ns(const TpuConfig *c, int64_t batch, int64_t m, int64_t n, int64_t k,
                          double bytes);
/* Vector unit: `ops` lane operations (elements x operations per element) moving `bytes`. */
double tpu_cost_vector_ns(const TpuConfig *c, double ops, double bytes);
/* Peak figures for FloeDeviceProps. */
double tpu_cost_peak_matrix_flops(const TpuConfig *c);
double tpu_cost_peak_vector_flops(const TpuConfig *c);
/* Reports ns on ctx (ABI 1.3's ctx_report_device_time; a no-op with an older core). */
void tpu_report_ns(FloeKernelContext *ctx, double ns);

/* ------------------------------------------------------------------------------------ */
/* Matrix unit (matrix.c): C[m,n] = op(A) op(B) with both operands rounded to bf16 and f32
 * accumulation. Element (i, p) of op(A) is a[i * ars + p * acs], element (p, j) of op(B) is
 * b[p * brs + j * bcs]; C is dense with row stride ldc. Packs into chip scratch (ctx) and
 * splits over the pool; errors (scratch exhausted) are recorded on ctx. Reports nothing. */
floe_code tpu_gemm(FloeKernelContext *ctx, int64_t m, int64_t n, int64_t k, const float *a,
                   int64_t ars, int64_t acs, const float *b, int64_t brs, int64_t bcs, float *c,
                   int64_t ldc);

/* The one exported symbol (plugin.c). */
FLOE_PLUGIN_EXPORT floe_code floe_plugin_init(const FloeHostApi *host, FloePluginRegistrar *reg);

/* Each kernel file registers its kernels; the first failure is returned. */
floe_code tpu_register_matrix(FloePluginRegistrar *reg);  /* matrix.c */
floe_code tpu_register_conv(FloePluginRegistrar *reg);    /* conv.c */
floe_code tpu_register_vector(FloePluginRegistrar *reg);  /* vector.c */
floe_code tpu_register_reduce(FloePluginRegistrar *reg);  /* reduce.c */
floe_code tpu_register_optim(FloePluginRegistrar *reg);   /* optim.c */

#endif
