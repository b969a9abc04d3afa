/* SPDX-License-Identifier: Apache-2.0 */
/* blocked.c - _ToBlocked and _FromBlocked of the CPU plugin (core/graph/ops_conv.def): channels-last
 * tensors to and from the blocked layout [n, ceil(c / block), spatial..., block] that the
 * session's layout pass gives blocked _FusedConv chains. A pixel's channels are cut into
 * block-sized runs, each copied to (or from) its block's plane; a last block that c does not
 * fill is padded with zeros (and its padding dropped on the way back); work is split over
 * (image, block). */
#include <dnnl.h>
#include <string.h>

#include "cpu.h"
#include "cpu_util.h"

typedef struct State {
  int64_t block;
  int64_t channels; /* _FromBlocked: the channels kept (0: every lane) */
  bool to;          /* _ToBlocked, else _FromBlocked */
} State;

static const bool kind_to = true, kind_from = false;

static floe_code state_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                              void **state) {
  int64_t block = 16, channels = 0;
  host->attr_int(host->init_attrs(init), "block", &block);
  host->attr_int(host->init_attrs(init), "channels", &channels);
  if (block < 1)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT, "block must be >= 1, got %lld",
                                (long long)block);
  if (channels < 0)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT, "channels must be >= 0, got %lld",
                                (long long)channels);
  State *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory");
  s->block = block;
  s->channels = channels;
  s->to = *(const bool *)user_data;
  *state = s;
  return FLOE_OK;
}

static void state_destroy(void *state) { cpu_host->free(state); }

typedef struct Job {
  const char *cl; /* the channels-last tensor's bytes */
  char *bl;       /* the blocked tensor's */
  int64_t blocks, pixels, block; /* per image: blocks planes of pixels * block elements */
  int64_t c;                     /* channels-last channels: the last block may hold fewer */
  size_t size;                   /* bytes per element */
  bool to;
} Job;

/* Units [begin, end) of (image, block) pairs. */
static void move_range(void *arg, int64_t begin, int64_t end) {
  const Job *j = arg;
  int64_t plane = j->pixels * j->block;
  size_t es = j->size;
  for (int64_t u = begin; u < end; u++) {
    int64_t n = u / j->blocks, b = u % j->blocks;
    int64_t lanes = j->c - b * j->block < j->block ? j->c - b * j->block : j->block;
    size_t run = (size_t)lanes * es, pad = (size_t)(j->block - lanes) * es;
    char *cl = (char *)j->cl + (size_t)(n * j->pixels * j->c + b * j->block) * es;
    char *bl = j->bl + (size_t)(n * j->blocks * plane + b * plane) * es;
    if (j->to)
      for (int64_t p = 0; p < j->pixels; p++) {
        char *to = bl + (size_t)(p * j->block) * es;
        memcpy(to, cl + (size_t)(p * j->c) * es, run);
        if (pad) memset(to + run, 0, pad);
      }
    else
      for (int64_t p = 0; p < j->pixels; p++)
        memcpy(cl + (size_t)(p * j->c) * es, bl + (size_t)(p * j->block) * es, run);
  }
}

static floe_code compute(void *state, FloeKernelContext *ctx) {
  const State *s = state;
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0);
  int r = cpu_host->tensor_rank(x);
  const int64_t *d = cpu_host->tensor_dims(x);
  char buf[CPU_SHAPE_STR_MAX];
  int64_t dims[FLOE_MAX_DIMS], pixels = 1, blocks, c;
  if (s->to) {
    if (r < 3 || r > 5)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "input %s must be channels-last of rank 3 to 5",
                                     cpu_shape_str(buf, sizeof buf, r, d));
    c = d[r - 1];
    blocks = (c + s->block - 1) / s->block;
    dims[0] = d[0];
    dims[1] = blocks;
    for (int i = 1; i < r - 1; i++) pixels *= dims[i + 1] = d[i];
    dims[r] = s->block;
  } else {
    if (r < 4 || r > 6 || d[r - 1] != s->block)
      return cpu_host->ctx_set_error(
          ctx, FLOE_INVALID_ARGUMENT,
          "input %s must be blocked [n, channels / %lld, 1 to 3 spatial dims, %lld]",
          cpu_shape_str(buf, sizeof buf, r, d), (long long)s->block, (long long)s->block);
    blocks = d[1];
    c = s->channels ? s->channels : blocks * s->block;
    if ((c + s->block - 1) / s->block != blocks)
      return cpu_host->ctx_set_error(
          ctx, FLOE_INVALID_ARGUMENT,
          "%lld channels do not fill the last of the %lld blocks of input %s: the graph's "
          "channels attribute does not match the tensor",
          (long long)c, (long long)blocks, cpu_shape_str(buf, sizeof buf, r, d));
    dims[0] = d[0];
    for (int i = 2; i < r - 1; i++) pixels *= dims[i - 1] = d[i];
    dims[r - 2] = c;
  }
  FloeTensor *out;
  floe_code rc = cpu_host->ctx_allocate_output(ctx, 0, s->to ? r + 1 : r - 1, dims, &out);
  if (rc != FLOE_OK || cpu_host->tensor_num_elements(out) == 0) return rc;
  /* _ToBlocked reads the channels-last side and writes the blocked one; _FromBlocked the
   * other way round. */
  Job j = {s->to ? cpu_host->tensor_data(x) : cpu_host->tensor_data(out),
           s->to ? cpu_host->tensor_data(out) : (char *)cpu_host->tensor_data(x), blocks, pixels,
           s->block, c, cpu_host->dtype_size(cpu_host->tensor_dtype(x)), s->to};
  cpu_parallel_for(d[0] * blocks, pixels * s->block, move_range, &j);
  return FLOE_OK;
}

/* Registered only where the vector unit is 16 floats wide (AVX-512): that is where oneDNN's
 * kernels want 16-channel blocks, so a session finds the blocked layout only there. */
floe_code cpu_register_blocked(FloePluginRegistrar *reg) {
  dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  if ((isa & dnnl_cpu_isa_avx512_core) != dnnl_cpu_isa_avx512_core) return FLOE_OK;
  floe_code rc = cpu_add_kernel(reg, "_ToBlocked", "T", FLOE_DTYPES_ALL, 0, compute,
                                state_create, state_destroy, (void *)&kind_to);
  if (rc != FLOE_OK) return rc;
  return cpu_add_kernel(reg, "_FromBlocked", "T", FLOE_DTYPES_ALL, 0, compute, state_create,
                        state_destroy, (void *)&kind_from);
}
