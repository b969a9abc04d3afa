/* SPDX-License-Identifier: Apache-2.0 */
/* conv_nd.c - the N-d Conv, _FusedConv and ConvTranspose of the CPU plugin
 * (core/graph/ops_conv.def).
 *
 * Conv in f32 is one oneDNN convolution per call, built once per shape and cached
 * (conv_util.c): groups, explicit padding and dilations go to the primitive as they are, and
 * the filter, read in its [spatial..., in, out] layout through strides, is reordered once and
 * kept while its bytes stay the same. f16 and bf16 are widened to f32 and run the same
 * primitive. f64, and ConvTranspose in every dtype, run the plain reference loops below in
 * double (ConvTranspose is rare in inference graphs; its loop gathers each output element,
 * so negative paddings and output padding need no special case).
 *
 * _FusedConv (f32 only: the session leaves other dtypes unfused) is the same primitive with
 * the bias in it and the side input and ReLU as post-ops: the side tensor is copied into the
 * output and added by a `sum` post-op (a `binary` one would cost oneDNN its fastest
 * kernels). A side input that is broadcast (its shape is not the convolution's) is added
 * after the primitive instead. With filter_constant the reordered filter is matched by its
 * address (conv_util.h).
 *
 * A blocked _FusedConv (the session's layout pass, core/session/fuse.c) reads and writes blocked
 * tensors [n, c / 16, spatial..., 16] (oneDNN's nChw16c), or reads a first layer's few
 * channels as they are (plain_input). Its 3x3 stride-1 parts run as oneDNN Winograd
 * convolutions (FLOE_CONV_WINOGRAD=0: direct). Whole images, and blocks of one image's output
 * channels, are dense parts of blocked tensors; a block of one image's rows is not, so its
 * input rows (and side input rows) are gathered into scratch and its output scattered back.
 * One image's direct (strided, or first-layer) convolutions are therefore cut by output
 * channels; only Winograd ones of few channels are cut by rows. A block of a constant
 * filter's output channels is copied dense once and kept (oneDNN cannot reorder the strided
 * view into its Winograd layout). Staging buffers and oneDNN scratchpads are the running
 * thread's own (cpu_thread_scratch), so they stay warm in its core's cache. */
#include <dnnl.h>
#include <stdlib.h>
#include <string.h>

#include "acts.h"
#include "conv_util.h"
#include "cpu.h"
#include "cpu_util.h"
#include "window_nd.h"

#define FILTER_BLOCKS 8 /* dense filter blocks kept per node */

/* Post-ops of a primitive (part of its cache key). */
enum {
  POST_BIAS = 1,
  POST_SUM = 2,
  POST_RELU = 4,
  /* the activations as the primitive's own post-ops (State.tail_post: at most one) */
  POST_CLIP = 8,          /* clip to [tail_a, tail_b] */
  POST_SWISH = 16,        /* x sigmoid(x) */
  POST_HARDSWISH = 32,    /* x relu6(x + 3) / 6 */
  POST_HARDSIGMOID = 64,  /* clip(tail_a x + tail_b, 0, 1) */
  POST_TAIL = POST_CLIP | POST_SWISH | POST_HARDSWISH | POST_HARDSIGMOID
};


typedef struct State {
  WndAttrs a;
  CpuDnnlCache cache;
  bool fused, bias, add, relu; /* _FusedConv and its flags */
  CpuActs acts;                /* its activations (acts.h) */
  /* The post-op (POST_TAIL) that applies the activations as the primitive writes, 0 for
   * none: one pass over the output, not two. A clip (cpu_acts_clip; FLOE_CONV_CLIP_POSTOP=0:
   * not) gives the tail's values but for NaN and -0; SiLU, HardSwish and a hard sigmoid
   * (cpu_acts_swish, cpu_acts_hard; FLOE_CONV_SWISH_POSTOP=0: not) are within a few ulps of
   * the tail's bits (a quarter of an EfficientNet's step was its SiLU tail). tail_a and
   * tail_b: the clip's bounds, the hard sigmoid's scale and shift. */
  unsigned tail_post;
  float tail_a, tail_b;
  /* The activations map 0 to 0 (tried on zeros when the kernel is made): a blocked output's
   * padding lanes, which oneDNN leaves zero, then stay zero and are not cleared again. */
  bool zero_kept;
  bool blocked;                /* _FusedConv on blocked tensors [n, c / 16, spatial..., 16] */
  bool plain_input;            /* blocked, but the input stays channels-last (few channels) */
  bool winograd;               /* blocked, and FLOE_CONV_WINOGRAD is not 0 */
  /* Dense copies of blocks of a constant filter's output channels (blocked parts of one
   * image): a strided view of the filter cannot go to oneDNN's Winograd layout. */
  pthread_mutex_t fmu;
  struct {
    const float *src; /* the filter it was cut from */
    int64_t o0, ob;
    float *dense;     /* [spatial..., c, ob] */
  } fblk[FILTER_BLOCKS];
  int nfblk;
} State;

static void state_destroy(void *state) {
  State *s = state;
  if (s->a.kind == WND_CONV) cpu_dnnl_cache_destroy(&s->cache);
  for (int i = 0; i < s->nfblk; i++) cpu_host->free(s->fblk[i].dense);
  pthread_mutex_destroy(&s->fmu);
  cpu_host->free(s);
}

/* Distinct addresses tell the kernels apart (kind_fused runs WND_CONV). */
static const WndKind kind_conv = WND_CONV, kind_conv_t = WND_CONV_T, kind_fused = WND_CONV;

static bool flag(const FloeHostApi *host, FloeKernelInit *init, const char *name) {
  int v = 0;
  return host->attr_bool(host->init_attrs(init), name, &v) == FLOE_OK && v;
}

static floe_code fused_parse(const FloeHostApi *host, FloeKernelInit *init, State *s) {
  s->fused = true;
  s->bias = flag(host, init, "fused_bias");
  s->add = flag(host, init, "fused_add");
  s->relu = flag(host, init, "fused_relu");
  floe_code arc = cpu_acts_parse(host, init, "_FusedConv", &s->acts);
  if (arc != FLOE_OK) return arc;
  const char *clip = getenv("FLOE_CONV_CLIP_POSTOP"), *swish = getenv("FLOE_CONV_SWISH_POSTOP");
  bool hard_swish = false;
  if ((!clip || atoi(clip) != 0) && cpu_acts_clip(&s->acts, &s->tail_a, &s->tail_b))
    s->tail_post = POST_CLIP;
  else if ((!swish || atoi(swish) != 0) && cpu_acts_swish(&s->acts))
    s->tail_post = POST_SWISH;
  else if ((!swish || atoi(swish) != 0) &&
           cpu_acts_hard(&s->acts, &hard_swish, &s->tail_a, &s->tail_b))
    s->tail_post = hard_swish ? POST_HARDSWISH : POST_HARDSIGMOID;
  float zeros[16] = {0};
  cpu_acts_block(&s->acts, zeros, 16);
  s->zero_kept = s->tail_post != POST_HARDSIGMOID;
  for (int i = 0; i < 16; i++) s->zero_kept = s->zero_kept && zeros[i] == 0.0f;
  s->blocked = flag(host, init, "blocked");
  s->plain_input = s->blocked && flag(host, init, "plain_input");
  const char *wino = getenv("FLOE_CONV_WINOGRAD");
  s->winograd = s->blocked && (!wino || atoi(wino) != 0);
  if (s->blocked && ((s->a.cf && !s->plain_input) || (s->plain_input && s->a.groups != 1)))
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "a blocked _FusedConv must be CHANNELS_LAST (or CHANNELS_FIRST "
                                "with plain_input and one group)");
  int want = 2 + s->bias + s->add, got = host->init_num_inputs(init);
  if (got != want)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "_FusedConv has %d inputs; fused_bias and fused_add ask for %d",
                                got, want);
  return FLOE_OK;
}

static floe_code state_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                              void **state) {
  State *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory");
  memset(s, 0, sizeof *s);
  pthread_mutex_init(&s->fmu, NULL);
  const WndKind *kind = user_data;
  floe_code rc = wnd_parse(host, init, *kind == WND_CONV_T ? WND_CONV_T : WND_CONV, &s->a);
  if (rc == FLOE_OK && kind == &kind_fused) rc = fused_parse(host, init, s);
  if (rc == FLOE_OK && s->a.kind == WND_CONV) rc = cpu_dnnl_cache_init(&s->cache, host, init);
  if (rc == FLOE_OK && s->fused) s->cache.keep_by_address = flag(host, init, "filter_constant");
  if (rc != FLOE_OK) {
    pthread_mutex_destroy(&s->fmu);
    host->free(s);
    return rc;
  }
  *state = s;
  return FLOE_OK;
}

/* ---------------------------------------------------------------------------------- */
/* oneDNN (f32 Conv). */

typedef struct Build {
  const State *s;
  const WndGeo *g;     /* the part computed: some images, maybe a block of rows or of
                        * output channels */
  const WndGeo *whole; /* the whole call (the tensors' sizes) */
  unsigned post;       /* POST_* */
  int64_t o0;          /* the part's first output channel */
  bool dense_dst;      /* the part's output goes to a dense buffer of its own */
} Build;

/* Memory descriptor of logical dims [n, c, spatial sp...] in the data format's layout of a
 * tensor whose spatial dims are full (sp a block of it). */
static dnnl_status_t data_md(dnnl_memory_desc_t *md, bool cf, const WndGeo *g, int64_t n,
                             int64_t c, const int64_t *sp, const int64_t *full) {
  int nd = 2 + g->ns, off = 3 - g->ns;
  int64_t st[5];
  wnd_strides(cf, g->ns, c, full, st);
  /* One image's stride is any: the dense one lets a channels-last block match the layout
   * the primitive wants (no reorder). */
  if (n == 1) st[0] = c * sp[0] * sp[1] * sp[2];
  dnnl_dims_t dims = {n, c}, strides = {st[0], st[1]};
  for (int j = 0; j < g->ns; j++) {
    dims[2 + j] = sp[off + j];
    strides[2 + j] = st[2 + off + j];
  }
  return dnnl_memory_desc_init_by_strides(md, nd, dims, dnnl_f32, strides);
}

/* The filter [spatial..., c / groups, o] as oneDNN's [o, c, spatial...] (one group) or
 * [groups, o / groups, c / groups, spatial...], through strides; g->o of whole->o output
 * channels (a block of them: the caller offsets the data). */
static dnnl_status_t filter_md(dnnl_memory_desc_t *md, const WndGeo *g, const WndGeo *whole) {
  int64_t G = g->groups, cpg = g->c / G, opg = g->o / G, off = 3 - g->ns, O = whole->o;
  int64_t sp_st[3], inner = cpg * O;
  for (int j = 2; j >= off; j--) {
    sp_st[j] = inner;
    inner *= g->k[j];
  }
  dnnl_dims_t dims, strides;
  int nd = 0;
  if (G > 1) {
    dims[nd] = G;
    strides[nd++] = opg;
  }
  dims[nd] = opg;
  strides[nd++] = 1;
  dims[nd] = cpg;
  strides[nd++] = O;
  for (int j = off; j < 3; j++) {
    dims[nd] = g->k[j];
    strides[nd++] = sp_st[j];
  }
  return dnnl_memory_desc_init_by_strides(md, nd, dims, dnnl_f32, strides);
}

/* Whether a part of a blocked convolution runs as a Winograd one (3x3, stride 1, no
 * dilation: the bulk of a ResNet's work in about half the multiplies; oneDNN offers it on
 * blocked data only). FLOE_CONV_WINOGRAD=0 turns it off. */
static bool winograd_fits(const State *s, const WndGeo *g, const WndGeo *whole) {
  /* A block of the filter's output channels is a strided view, which oneDNN cannot reorder
   * into its Winograd layout. */
  if (!s->winograd || g->ns != 2 || g->groups != 1 || g->c % 16 || g->o % 16 ||
      g->o != whole->o)
    return false;
  for (int j = 1; j < 3; j++)
    if (g->k[j] != 3 || g->s[j] != 1 || g->d[j] != 1) return false;
  return true;
}

static dnnl_status_t build_pd(const Build *b, const dnnl_convolution_desc_t *cd,
                              dnnl_engine_t eng, const_dnnl_primitive_attr_t attr,
                              dnnl_primitive_desc_t *pd, const char **what);

static dnnl_status_t build_conv(const void *arg, dnnl_engine_t eng,
                                const_dnnl_primitive_attr_t attr, dnnl_primitive_desc_t *pd,
                                CpuDnnlArg *args, int *num_args, const char **what) {
  const Build *b = arg;
  const WndGeo *g = b->g;
  bool cf = b->s->a.cf;
  int nd = 2 + g->ns;
  dnnl_memory_desc_t src, wei, dst;
  dnnl_convolution_desc_t cd;
  dnnl_status_t st;
  bool bias = b->post & POST_BIAS;
  int di = bias ? 3 : 2; /* the dst's arg */
  *what = "convolution descriptor";
  args[0] = (CpuDnnlArg){.arg = DNNL_ARG_SRC};
  args[1] = (CpuDnnlArg){.arg = DNNL_ARG_WEIGHTS, .keep = true, .keep_tag = b->o0};
  if (bias) args[2] = (CpuDnnlArg){.arg = DNNL_ARG_BIAS};
  args[di] = (CpuDnnlArg){.arg = DNNL_ARG_DST, .output = true, .inout = b->post & POST_SUM};
  *num_args = di + 1;
  dnnl_dims_t strides, dil, pad_l, pad_r, src_dims, dst_dims;
  wnd_dnnl_conv_dims(g, strides, dil, pad_l, pad_r, src_dims, dst_dims);
  /* Channels-last data stays as it is (oneDNN reads it directly); channels-first data and
   * the filter go to the layouts the primitive prefers. */
  static const dnnl_format_tag_t cl_tags[] = {dnnl_nwc, dnnl_nhwc, dnnl_ndhwc};
  /* Blocked parts are dense (whole images, or whole blocks of one image's channels). */
  static const dnnl_format_tag_t blk_tags[] = {dnnl_nCw16c, dnnl_nChw16c, dnnl_nCdhw16c};
  /* A plain (channels-last) input of a blocked convolution has fewer than 16 channels: it is
   * reordered to channels-first, which oneDNN's blocked kernels read for such first layers. */
  static const dnnl_format_tag_t cf_tags[] = {dnnl_ncw, dnnl_nchw, dnnl_ncdhw};
  bool blk = b->s->blocked, plain = b->s->plain_input, wino = winograd_fits(b->s, g, b->whole);
  dnnl_format_tag_t data_tag = blk ? blk_tags[g->ns - 1] : cf ? dnnl_format_tag_any : cl_tags[g->ns - 1];
  dnnl_format_tag_t src_tag = plain ? cf_tags[g->ns - 1] : data_tag;
  dnnl_dims_t bias_dims = {g->o};
  if ((st = blk && !plain
                ? dnnl_memory_desc_init_by_tag(&args[0].user, nd, src_dims, dnnl_f32, data_tag)
                : data_md(&args[0].user, cf, g, g->n, g->c, g->in, b->whole->in)) ||
      (st = filter_md(&args[1].user, g, b->whole)) ||
      (bias && (st = dnnl_memory_desc_init_by_tag(&args[2].user, 1, bias_dims, dnnl_f32, dnnl_a))) ||
      (st = blk ? dnnl_memory_desc_init_by_tag(&args[di].user, nd, dst_dims, dnnl_f32, data_tag)
                : data_md(&args[di].user, cf, g, g->n, g->o, g->out,
                          b->dense_dst ? g->out : b->whole->out)) ||
      (st = dnnl_memory_desc_init_by_tag(&src, nd, src_dims, dnnl_f32, src_tag)) ||
      (st = dnnl_memory_desc_init_by_tag(&wei, args[1].user.ndims, args[1].user.dims, dnnl_f32,
                                         dnnl_format_tag_any)) ||
      (st = dnnl_memory_desc_init_by_tag(&dst, nd, dst_dims, dnnl_f32, data_tag)))
    return st;
  /* Winograd where it fits, else direct; also direct when oneDNN has no Winograd kernel
   * for the shape (it answers dnnl_unimplemented). */
  dnnl_alg_kind_t alg = wino ? dnnl_convolution_winograd : dnnl_convolution_direct;
  for (;;) {
    if ((st = dnnl_dilated_convolution_forward_desc_init(&cd, dnnl_forward_inference, alg, &src,
                                                         &wei, bias ? &args[2].user : NULL,
                                                         &dst, strides, dil, pad_l, pad_r)))
      return st;
    st = build_pd(b, &cd, eng, attr, pd, what);
    if (alg == dnnl_convolution_direct || st != dnnl_unimplemented) return st;
    alg = dnnl_convolution_direct;
  }
}

/* The primitive descriptor of cd with b's post-ops. */
static dnnl_status_t build_pd(const Build *b, const dnnl_convolution_desc_t *cd,
                              dnnl_engine_t eng, const_dnnl_primitive_attr_t attr,
                              dnnl_primitive_desc_t *pd, const char **what) {
  dnnl_status_t st;
  if (!(b->post & (POST_SUM | POST_RELU | POST_TAIL))) {
    *what = "convolution primitive descriptor";
    return dnnl_primitive_desc_create(pd, cd, attr, eng, NULL);
  }
  /* The post-ops go on a copy of the caller's attributes. */
  dnnl_primitive_attr_t mine = NULL;
  dnnl_post_ops_t ops = NULL;
  *what = "convolution post-ops";
  if (!(st = dnnl_primitive_attr_clone(&mine, attr)) && !(st = dnnl_post_ops_create(&ops)) &&
      !((b->post & POST_SUM) && (st = dnnl_post_ops_append_sum(ops, 1.0f))) &&
      !((b->post & POST_RELU) &&
        (st = dnnl_post_ops_append_eltwise(ops, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f))) &&
      !((b->post & POST_CLIP) &&
        (st = dnnl_post_ops_append_eltwise(ops, 1.0f, dnnl_eltwise_clip, b->s->tail_a,
                                           b->s->tail_b))) &&
      !((b->post & POST_SWISH) &&
        (st = dnnl_post_ops_append_eltwise(ops, 1.0f, dnnl_eltwise_swish, 1.0f, 0.0f))) &&
      !((b->post & POST_HARDSWISH) &&
        (st = dnnl_post_ops_append_eltwise(ops, 1.0f, dnnl_eltwise_hardswish, 0.0f, 0.0f))) &&
      !((b->post & POST_HARDSIGMOID) &&
        ((st = dnnl_post_ops_append_eltwise(ops, 1.0f, dnnl_eltwise_linear, b->s->tail_a,
                                            b->s->tail_b)) ||
         (st = dnnl_post_ops_append_eltwise(ops, 1.0f, dnnl_eltwise_clip, 0.0f, 1.0f)))) &&
      !(st = dnnl_primitive_attr_set_post_ops(mine, ops))) {
    *what = "convolution primitive descriptor";
    st = dnnl_primitive_desc_create(pd, cd, mine, eng, NULL);
  }
  dnnl_post_ops_destroy(ops);
  dnnl_primitive_attr_destroy(mine);
  return st;
}

typedef struct Job {
  State *s;
  const WndGeo *g;
  unsigned post;
  const float *x, *f, *bias, *side; /* bias, side: NULL unless in post */
  float *y;
  bool side_copied; /* the output already holds the side input (for POST_SUM): copied, or
                     * the output is the side input's own buffer (ctx_reuse_input) */
  int64_t blocks;   /* row or channel blocks per image (run_conv) */
  bool by_channel;  /* blocks of output channels, else of rows */
  /* The fused activations, applied by each part to its output while that is in cache (the
   * parts' outputs are dense); NULL: the caller applies them to the whole output after. */
  const CpuActs *acts;
  /* An image cut by input channels (run_input_parts): blocks of 16 channels per part, and
   * the partial outputs of parts 1.. (part 0 writes y). */
  int64_t in_blocks;
  float *partials;
} Job;

/* Channels c as stored in a blocked tensor: whole blocks of 16, the last one padded. */
static int64_t pad16(int64_t c) { return (c + 15) / 16 * 16; }

/* Scratch memory for a part: the running thread's own block (cpu_thread_scratch), which the
 * part uses only until it returns. Shards share ctx: lock held around errors when given. */
static floe_code part_temp(FloeKernelContext *ctx, pthread_mutex_t *lock, size_t bytes,
                           void **out) {
  if ((*out = cpu_thread_scratch(CPU_SCRATCH_PART, bytes))) return FLOE_OK;
  if (lock) pthread_mutex_lock(lock);
  floe_code rc = cpu_host->ctx_set_error(ctx, FLOE_NO_MEMORY,
                                         "out of memory for %zu bytes of convolution scratch",
                                         bytes);
  if (lock) pthread_mutex_unlock(lock);
  return rc;
}

/* n channels of each of `pixels` pixels `stride` floats apart, to or from a dense
 * [pixels, n] buffer. */
static void channels_gather(float *dense, const float *src, int64_t pixels, int64_t stride,
                            int64_t n) {
  for (int64_t p = 0; p < pixels; p++)
    memcpy(dense + p * n, src + p * stride, (size_t)n * sizeof *dense);
}

static void channels_scatter(float *dst, const float *dense, int64_t pixels, int64_t stride,
                             int64_t n) {
  for (int64_t p = 0; p < pixels; p++)
    memcpy(dst + p * stride, dense + p * n, (size_t)n * sizeof *dense);
}

/* The dense copy of output channels [o0, o0 + ob) of constant filter f (made on first use,
 * kept while f stays); NULL when out of room or memory (the caller reads the strided view). */
static const float *filter_block(State *s, const float *f, const WndGeo *w, int64_t o0,
                                 int64_t ob) {
  const float *dense = NULL;
  pthread_mutex_lock(&s->fmu);
  int slot = -1;
  for (int i = 0; i < s->nfblk && !dense; i++)
    if (s->fblk[i].o0 == o0 && s->fblk[i].ob == ob) {
      if (s->fblk[i].src == f) dense = s->fblk[i].dense;
      slot = i;
    }
  if (!dense && (slot >= 0 || s->nfblk < FILTER_BLOCKS)) {
    int64_t rows = w->k[0] * w->k[1] * w->k[2] * (w->c / w->groups); /* filter rows */
    float *d = slot >= 0 ? s->fblk[slot].dense : cpu_host->alloc((size_t)(rows * ob) * sizeof *d);
    if (d) {
      for (int64_t r = 0; r < rows; r++)
        memcpy(d + r * ob, f + r * w->o + o0, (size_t)ob * sizeof *d);
      if (slot < 0) slot = s->nfblk++;
      s->fblk[slot].src = f;
      s->fblk[slot].o0 = o0;
      s->fblk[slot].ob = ob;
      s->fblk[slot].dense = d;
      dense = d;
    }
  }
  pthread_mutex_unlock(&s->fmu);
  return dense;
}

/* Images [first, first + count) and output channels [o0, o1) (a multiple of 16 from a
 * multiple of 16) of a blocked convolution: both are dense parts of the blocked tensors. */
static floe_code blocked_part(const Job *j, FloeKernelContext *ctx, pthread_mutex_t *ctx_lock,
                              int64_t first, int64_t count, int64_t o0, int64_t o1) {
  const WndGeo *w = j->g;
  WndGeo g = *w;
  g.n = count;
  g.o = o1 - o0;
  /* Depthwise: output channels [o0, o1) read input channels [o0, o1) only, one a group. */
  bool dw = w->groups > 1 && w->groups == w->c && w->groups == w->o;
  if (dw) g.c = g.groups = g.o;
  int64_t in_px = w->in[0] * w->in[1] * w->in[2], out_px = w->out[0] * w->out[1] * w->out[2];
  int64_t yoff = (first * pad16(w->o) + o0) * out_px;
  float *y = j->y + yoff;
  if ((j->post & POST_SUM) && !j->side_copied)
    memcpy(y, j->side + yoff, (size_t)(count * pad16(g.o) * out_px) * sizeof *y);
  const float *f = j->f + o0;
  const WndGeo *fg = w; /* the filter's geometry (its output channel stride) */
  if (g.o < w->o && j->s->cache.keep_by_address) {
    const float *dense = filter_block(j->s, j->f, w, o0, g.o);
    if (dense) {
      f = dense;
      fg = &g;
    }
  }
  /* Key slot 11: the filter is a dense block copy (its layout differs from the view's). */
  int64_t key[CPU_DNNL_KEY_LEN] = {g.n,    g.c,  g.in[0], g.in[1], g.in[2], g.o,     g.k[0],
                                   g.k[1], g.k[2], g.ns,  j->post, fg != w, 0,       o0};
  Build b = {j->s, &g, fg, j->post, o0, false};
  int64_t cs = j->s->plain_input ? w->c : pad16(w->c); /* input channels an image holds */
  void *data[4] = {(void *)(j->x + (first * cs + (dw ? o0 : 0)) * in_px), (void *)f};
  int k = 2;
  if (j->post & POST_BIAS) data[k++] = (void *)(j->bias + o0);
  data[k] = y;
  floe_code rc = cpu_dnnl_run(&j->s->cache, ctx, ctx_lock, "_FusedConv", key, build_conv, &b, data);
  if (rc == FLOE_OK && j->acts) cpu_acts_serial(j->acts, y, count * pad16(g.o) * out_px);
  return rc;
}

/* n planes of `rows` rows of `row` floats, `from_rows` rows apart in the source and `to_rows`
 * rows apart in the destination. */
static void copy_planes(float *dst, const float *src, int64_t n, int64_t rows, int64_t row,
                        int64_t from_rows, int64_t to_rows) {
  for (int64_t p = 0; p < n; p++)
    memcpy(dst + p * to_rows * row, src + p * from_rows * row, (size_t)(rows * row) * sizeof *dst);
}

/* Output rows [r0, r1) of the outermost spatial dim of one image of a blocked convolution:
 * the rows of each channel block are not contiguous, so the input rows the part reads (and
 * the side input's rows) are gathered into dense scratch, and the output scattered back;
 * a tensor of one block is one plane, whose rows are read or written in place. */
static floe_code blocked_rows_part(const Job *j, FloeKernelContext *ctx,
                                   pthread_mutex_t *ctx_lock, int64_t image, int64_t r0,
                                   int64_t r1) {
  const WndGeo *w = j->g;
  WndGeo g = *w;
  int d = 3 - g.ns;
  g.n = 1;
  int64_t lo = wnd_rows(&g, w, d, r0, r1);
  int64_t in_row = 16, out_row = 16; /* floats per row of one channel block */
  for (int k = d + 1; k < 3; k++) {
    in_row *= w->in[k];
    out_row *= w->out[k];
  }
  int64_t cb = pad16(w->c) / 16, ob = pad16(w->o) / 16;
  /* A plain input is read in place: its rows are dense channels-last, or (channels first)
   * reordered through the strides of the whole tensor. */
  bool plain = j->s->plain_input;
  const float *x = j->x + image * (plain ? w->c : pad16(w->c)) * w->in[0] * w->in[1] * w->in[2] +
                   lo * (!plain ? in_row : j->s->a.cf ? in_row / 16 : in_row / 16 * w->c);
  int64_t yoff = image * pad16(w->o) * w->out[0] * w->out[1] * w->out[2] + r0 * out_row;
  /* One block of channels is one plane: its rows are dense, read or written in place. */
  bool x_in_place = plain || cb == 1, y_in_place = ob == 1;
  float *xin, *yout = NULL;
  size_t xn = x_in_place ? 0 : (size_t)(cb * g.in[d] * in_row);
  size_t yn = (size_t)(ob * g.out[d] * out_row), ys = y_in_place ? 0 : yn; /* scratch: y, x */
  floe_code rc = xn + ys ? part_temp(ctx, ctx_lock, (xn + ys) * sizeof(float), (void **)&yout)
                         : FLOE_OK;
  if (rc != FLOE_OK) return rc;
  if (x_in_place) {
    xin = (float *)x;
  } else {
    xin = yout + ys;
    copy_planes(xin, x, cb, g.in[d], in_row, w->in[d], g.in[d]);
  }
  if (y_in_place) yout = j->y + yoff;
  if ((j->post & POST_SUM) && !(y_in_place && j->side_copied))
    copy_planes(yout, j->side + yoff, ob, g.out[d], out_row, w->out[d], g.out[d]);
  int64_t key[CPU_DNNL_KEY_LEN] = {g.n,    g.c,  g.in[0], g.in[1], g.in[2], g.o,
                                   g.k[0], g.k[1], g.k[2], g.ns, j->post, 0,
                                   1 + g.pb[d] * 65536 + g.pe[d], 0};
  Build b = {j->s, &g, w, j->post, 0, false};
  void *data[4] = {xin, (void *)j->f};
  int k = 2;
  if (j->post & POST_BIAS) data[k++] = (void *)j->bias;
  data[k] = yout;
  rc = cpu_dnnl_run(&j->s->cache, ctx, ctx_lock, "_FusedConv", key, build_conv, &b, data);
  if (rc == FLOE_OK && j->acts) cpu_acts_serial(j->acts, yout, (int64_t)yn);
  if (rc == FLOE_OK && !y_in_place)
    copy_planes(j->y + yoff, yout, ob, g.out[d], out_row, g.out[d], w->out[d]);
  return rc;
}

/* Images [first, first + count), output rows [r0, r1) of the outermost spatial dim and
 * output channels [o0, o1): one primitive on that part of the tensors (the input rows it
 * reads, the padding they leave, the filter's and bias's columns). A block of channels of
 * channels-last data is not dense (oneDNN's fast kernels want dense data): it is computed
 * into scratch and copied into place. */
static floe_code conv_part(const Job *j, FloeKernelContext *ctx, pthread_mutex_t *ctx_lock,
                           int64_t first, int64_t count, int64_t r0, int64_t r1, int64_t o0,
                           int64_t o1) {
  const WndGeo *w = j->g;
  WndGeo g = *w;
  int d = 3 - g.ns; /* the outermost spatial dim in WndGeo's 3 */
  g.n = count;
  g.o = o1 - o0;
  if (j->s->blocked && (r0 > 0 || r1 < w->out[3 - w->ns]))
    return blocked_rows_part(j, ctx, ctx_lock, first, r0, r1);
  if (j->s->blocked) return blocked_part(j, ctx, ctx_lock, first, count, o0, o1);
  /* A channels-last block of channels (one image: block_shard) goes via scratch. */
  bool dense = !j->s->a.cf && g.o < w->o;
  int64_t lo = r0 > 0 || r1 < w->out[d] ? wnd_rows(&g, w, d, r0, r1) : 0;
  int64_t xs[5], ys[5];
  wnd_strides(j->s->a.cf, g.ns, g.c, w->in, xs);
  wnd_strides(j->s->a.cf, g.ns, w->o, w->out, ys); /* the whole output */
  int64_t key[CPU_DNNL_KEY_LEN] = {g.n,  g.c,    g.in[0], g.in[1], g.in[2], g.o,     g.k[0],
                                   g.k[1], g.k[2], g.ns,   j->post, g.pb[d], g.pe[d], o0};
  Build b = {j->s, &g, w, j->post, o0, dense};
  int64_t yoff = first * ys[0] + r0 * ys[2 + d] + o0 * ys[1];
  float *y = j->y + yoff;
  int64_t pixels = g.out[0] * g.out[1] * g.out[2];
  floe_code rc;
  if (dense &&
      (rc = part_temp(ctx, ctx_lock, (size_t)(pixels * g.o) * sizeof *y, (void **)&y)) != FLOE_OK)
    return rc;
  /* The sum post-op adds what the output holds. */
  if ((j->post & POST_SUM) && dense)
    channels_gather(y, j->side + yoff, pixels, w->o, g.o);
  else if ((j->post & POST_SUM) && !j->side_copied) /* whole images, or rows of one image */
    memcpy(y, j->side + yoff,
           (size_t)(r1 - r0 < w->out[d] ? (r1 - r0) * ys[2 + d] : count * ys[0]) * sizeof *y);
  void *data[4] = {(void *)(j->x + first * xs[0] + lo * xs[2 + d]), (void *)(j->f + o0)};
  int k = 2;
  if (j->post & POST_BIAS) data[k++] = (void *)(j->bias + o0);
  data[k] = y;
  rc = cpu_dnnl_run(&j->s->cache, ctx, ctx_lock, j->s->fused ? "_FusedConv" : "Conv", key,
                    build_conv, &b, data);
  /* (j->acts only for channels-last data: these rows, or whole images, are dense) */
  if (rc == FLOE_OK && j->acts)
    cpu_acts_serial(j->acts, y,
                    dense ? pixels * g.o
                          : r1 - r0 < w->out[d] ? (r1 - r0) * ys[2 + d] : count * ys[0]);
  if (rc == FLOE_OK && dense) channels_scatter(j->y + yoff, y, pixels, w->o, g.o);
  return rc;
}

static floe_code batch_shard(void *arg, FloeKernelContext *ctx, pthread_mutex_t *ctx_lock,
                             int64_t first, int64_t count, int shard) {
  (void)shard;
  const Job *j = arg;
  return conv_part(j, ctx, ctx_lock, first, count, 0, j->g->out[3 - j->g->ns], 0, j->g->o);
}

/* Output channels per block: a multiple of 16 (oneDNN's f32 vector). */
static int64_t channel_block(int64_t o, int64_t blocks) {
  return ((o + blocks - 1) / blocks + 15) / 16 * 16;
}

/* Unit u of a batch cut into blocks: image u / blocks, block u % blocks of rows or of output
 * channels. */
static floe_code block_shard(void *arg, FloeKernelContext *ctx, pthread_mutex_t *ctx_lock,
                             int64_t first, int64_t count, int shard) {
  (void)shard;
  const Job *j = arg;
  int64_t rows = j->g->out[3 - j->g->ns], o = j->g->o;
  int64_t per = j->by_channel ? channel_block(o, j->blocks) : (rows + j->blocks - 1) / j->blocks;
  int64_t end = j->by_channel ? o : rows;
  floe_code rc = FLOE_OK;
  for (int64_t u = first; u < first + count && rc == FLOE_OK; u++) {
    int64_t a = u % j->blocks * per, b = a + per < end ? a + per : end;
    if (a >= b) continue;
    rc = j->by_channel ? conv_part(j, ctx, ctx_lock, u / j->blocks, 1, 0, rows, a, b)
                       : conv_part(j, ctx, ctx_lock, u / j->blocks, 1, a, b, 0, o);
  }
  return rc;
}

/* Multiply-adds below which a part of a convolution is not worth a thread of its own (a few
 * microseconds of one core: the pool's workers spin between tasks, so a helper starts at
 * once). 2^18: MobileNetV3-small at batch 1 1.90-2.02 -> 1.59-1.67 ms on two threads
 * against 2^20, ShuffleNet and EfficientNet-B0 2-5% faster, MobileNetV2 and SqueezeNet
 * within the noise (2^16 gave what 2^18 gives). */
#define CONV_PART_MIN_MACS (1 << 18)

/* Runs the job on the pool. A batch of at least as many images as threads is cut into
 * per-thread shards of images; a smaller one (batch 1 at inference) into blocks of output
 * rows, so that every thread gets a part, or of output channels where the filter is larger
 * than an image (deep layers: each thread then reads only its share of the filter, which is
 * what bounds them). Each part is one single-threaded primitive: an
 * OpenMP team per call wakes threads that sleep (passive waiting) for work of tens of
 * microseconds. With a pool of one thread the whole batch is one primitive on OpenMP's
 * threads. */
static floe_code run_conv(FloeKernelContext *ctx, Job *j) {
  const WndGeo *g = j->g;
  int threads = cpu_host->num_threads();
  if (threads <= 1 || g->n >= threads)
    return cpu_dnnl_for_batch(ctx, g->n, cpu_dnnl_batch_shards(g->n), batch_shard, j);
  int64_t rows = g->out[3 - g->ns];
  int64_t macs = g->out[0] * g->out[1] * g->out[2] * g->o * g->k[0] * g->k[1] * g->k[2] *
                 (g->c / g->groups);
  int64_t blocks = (threads + g->n - 1) / g->n;
  /* Depthwise convolutions are bound by memory, not multiplies: a part of a quarter of the
   * multiply-adds takes as long. */
  bool dw = g->groups > 1 && g->groups == g->c && g->groups == g->o;
  int64_t min_macs = dw ? CONV_PART_MIN_MACS / 4 : CONV_PART_MIN_MACS;
  if (blocks > macs / min_macs) blocks = macs / min_macs;
  if (blocks > rows) blocks = rows;
  if (blocks < 1) blocks = 1;
  j->blocks = blocks;
  int64_t filter = g->k[0] * g->k[1] * g->k[2] * (g->c / g->groups) * g->o;
  int64_t image = g->c * g->in[0] * g->in[1] * g->in[2];
  j->by_channel = blocks > 1 && g->groups == 1 && filter > image &&
                  channel_block(g->o, blocks) * (blocks - 1) < g->o;
  /* Blocked direct convolutions (strided, or a first layer's few input channels) cut their
   * output channels instead of rows where they can: a block of channels is a dense part of
   * the blocked output, so nothing is gathered or scattered (Winograd ones keep rows: with
   * 16 output channels per part their transforms cost more than the copies). */
  if (j->s->blocked && blocks > 1 && (g->groups == 1 || dw) && !winograd_fits(j->s, g, g) &&
      pad16(g->o) / 16 >= blocks)
    j->by_channel = true;
  if (j->s->blocked && filter > image && !j->by_channel)
    j->blocks = blocks = 1; /* a channel block of 16 is too small to share */
  if ((j->post & POST_SUM) && blocks > 1 && j->s->a.cf && !j->s->blocked && !j->side_copied) {
    /* Channels-first blocks of rows are not contiguous: the side input goes in at once. */
    memcpy(j->y, j->side, (size_t)(g->n * g->o * g->out[0] * g->out[1] * g->out[2]) * sizeof *j->y);
    j->side_copied = true;
  }
  int64_t units = g->n * blocks;
  if (units == 1) {
    int saved = cpu_omp_single();
    floe_code rc = conv_part(j, ctx, NULL, 0, 1, 0, rows, 0, g->o);
    cpu_omp_restore(saved);
    return rc;
  }
  return cpu_dnnl_for_batch(ctx, units, (int)units, block_shard, j);
}

/* A 1x1 convolution of one image whose input has at least four times the channel blocks of
 * its output (an inverted residual block's projection: 144 -> 24 channels) is cut by input
 * channels, where there are fewer than 4 output blocks a thread: each part reads a dense
 * block of the input's channels (the part of it the thread wrote, when the elementwise pass
 * before split it the same way) and multiplies all the output channels, and the partial
 * sums are added after. Cut by output channels, each part would read the whole input for a
 * block or two of outputs (oneDNN's 1x1 kernel is then bound by its loads); by rows, each
 * would gather its rows out of every channel block first. The sum of parts is not the
 * primitive's order of additions: the values differ from the uncut convolution's in the
 * last bits. */
static bool input_parts_fit(const State *s, const WndGeo *g) {
  int threads = cpu_host->num_threads();
  if (!s->blocked || s->plain_input || threads < 2 || g->n != 1 || g->groups != 1 ||
      g->k[0] * g->k[1] * g->k[2] != 1)
    return false;
  int64_t cb = pad16(g->c) / 16, ob = pad16(g->o) / 16;
  int64_t macs = g->out[0] * g->out[1] * g->out[2] * g->o * g->c;
  return cb >= threads && ob * 4 <= cb && ob < 4 * threads && macs >= 16 * CONV_PART_MIN_MACS;
}

/* Part k of run_input_parts: input channels [c0, c1) into y (part 0: with the bias and the
 * side input's sum) or into its partial output. */
static floe_code input_part(const Job *j, FloeKernelContext *ctx, pthread_mutex_t *ctx_lock,
                            int64_t k) {
  const WndGeo *w = j->g;
  WndGeo g = *w;
  int64_t c0 = k * j->in_blocks * 16, c1 = c0 + j->in_blocks * 16;
  if (c1 > w->c) c1 = w->c;
  if (c0 >= c1) return FLOE_OK;
  g.c = c1 - c0;
  int64_t in_px = w->in[0] * w->in[1] * w->in[2];
  int64_t yn = pad16(w->o) * w->out[0] * w->out[1] * w->out[2];
  unsigned post = k == 0 ? j->post & (POST_BIAS | POST_SUM) : 0;
  float *y = k == 0 ? j->y : j->partials + (k - 1) * yn;
  /* Key slot 12 -1: a part of the input channels from c0 (slot 13). */
  int64_t key[CPU_DNNL_KEY_LEN] = {g.n,    g.c,    g.in[0], g.in[1], g.in[2], g.o, g.k[0],
                                   g.k[1], g.k[2], g.ns,    post,    0,       -1,  c0};
  /* the filter's rows c0.. ([c, o] for a 1x1); its reordered form kept per part */
  Build b = {j->s, &g, w, post, -1 - c0, false};
  void *data[4] = {(void *)(j->x + c0 * in_px), (void *)(j->f + c0 * w->o)};
  int n = 2;
  if (post & POST_BIAS) data[n++] = (void *)j->bias;
  data[n] = y;
  return cpu_dnnl_run(&j->s->cache, ctx, ctx_lock, "_FusedConv", key, build_conv, &b, data);
}

static floe_code input_shard(void *arg, FloeKernelContext *ctx, pthread_mutex_t *ctx_lock,
                             int64_t first, int64_t count, int shard) {
  (void)shard;
  floe_code rc = FLOE_OK;
  for (int64_t k = first; k < first + count && rc == FLOE_OK; k++)
    rc = input_part(arg, ctx, ctx_lock, k);
  return rc;
}

typedef struct PartialSum {
  float *y;
  const float *partials;
  int64_t yn, count; /* floats of y; partial outputs */
  bool relu;
} PartialSum;

/* One pass over y: the partial sums added in order, then the ReLU. */
static void partial_sum_range(void *arg, int64_t begin, int64_t end) {
  const PartialSum *p = arg;
  for (int64_t i = begin; i < end; i++) {
    float v = p->y[i];
    for (int64_t k = 0; k < p->count; k++) v += p->partials[k * p->yn + i];
    p->y[i] = p->relu && !(v > 0) ? 0.0f : v;
  }
}

/* The convolution of input_parts_fit, its ReLU (POST_RELU) applied after the sum; the
 * caller applies the other activations. */
static floe_code run_input_parts(FloeKernelContext *ctx, Job *j) {
  const WndGeo *g = j->g;
  int64_t cb = pad16(g->c) / 16, parts = cpu_host->num_threads();
  j->in_blocks = (cb + parts - 1) / parts;
  parts = (cb + j->in_blocks - 1) / j->in_blocks;
  int64_t yn = pad16(g->o) * g->out[0] * g->out[1] * g->out[2];
  floe_code rc = cpu_host->ctx_allocate_temp(ctx, (size_t)((parts - 1) * yn) * sizeof(float),
                                             (void **)&j->partials);
  if (rc != FLOE_OK) return rc;
  if ((j->post & POST_SUM) && !j->side_copied) {
    memcpy(j->y, j->side, (size_t)yn * sizeof *j->y);
    j->side_copied = true;
  }
  if ((rc = cpu_dnnl_for_batch(ctx, parts, (int)parts, input_shard, j)) != FLOE_OK) return rc;
  PartialSum p = {j->y, j->partials, yn, parts - 1, (j->post & POST_RELU) != 0};
  cpu_parallel_elements(yn, parts, partial_sum_range, &p);
  return FLOE_OK;
}

static floe_code run_dnnl(State *s, FloeKernelContext *ctx, const WndGeo *g, const float *x,
                          const float *f, float *y) {
  Job j = {s, g, 0, x, f, NULL, NULL, y, false, 1, false, NULL, 0, NULL};
  return run_conv(ctx, &j);
}

static floe_code run_half(State *s, FloeKernelContext *ctx, const WndGeo *g, FloeDType dt,
                          const void *x, const void *f, int64_t xn, int64_t fn, void *y,
                          int64_t yn) {
  const void *src[2] = {x, f};
  const int64_t count[2] = {xn, fn};
  float *wide[2], *yb;
  floe_code rc = cpu_half_widen_temp(ctx, dt, 2, src, count, yn, wide, &yb);
  if (rc != FLOE_OK) return rc;
  rc = run_dnnl(s, ctx, g, wide[0], wide[1], yb);
  if (rc == FLOE_OK) cpu_convert_half(dt, false, yb, y, yn);
  return rc;
}

/* ---------------------------------------------------------------------------------- */
/* Reference loops in double. Rows are (n, o, out0) triples; spatial dims are 3 (see
 * WndGeo). x, y in the data format; f [k0, k1, k2, fi, fo]. */

typedef struct Ref {
  const WndGeo *g;
  bool transpose;
  const double *x, *f;
  double *y;
  int64_t xs[5], ys[5];
} Ref;

static void ref_rows(void *arg, int64_t begin, int64_t end) {
  const Ref *r = arg;
  const WndGeo *g = r->g;
  int64_t G = g->groups, cpg = g->c / G, opg = g->o / G;
  int64_t fi = r->transpose ? opg : cpg, fo = r->transpose ? g->c : g->o;
  for (int64_t row = begin; row < end; row++) {
    int64_t n = row / (g->o * g->out[0]), oc = row / g->out[0] % g->o, o0 = row % g->out[0];
    int64_t grp = oc / opg, ic0 = grp * cpg;
    for (int64_t o1 = 0; o1 < g->out[1]; o1++)
      for (int64_t o2 = 0; o2 < g->out[2]; o2++) {
        int64_t o[3] = {o0, o1, o2};
        double acc = 0;
        for (int64_t k0 = 0; k0 < g->k[0]; k0++)
          for (int64_t k1 = 0; k1 < g->k[1]; k1++)
            for (int64_t k2 = 0; k2 < g->k[2]; k2++) {
              int64_t k[3] = {k0, k1, k2}, i[3];
              bool inside = true;
              for (int j = 0; j < 3 && inside; j++) {
                if (!r->transpose) {
                  i[j] = o[j] * g->s[j] - g->pb[j] + k[j] * g->d[j];
                } else { /* o = i * s - pb + k * d: i = (o + pb - k * d) / s when exact */
                  int64_t t = o[j] + g->pb[j] - k[j] * g->d[j];
                  inside = t >= 0 && t % g->s[j] == 0;
                  i[j] = t / g->s[j];
                }
                inside = inside && i[j] >= 0 && i[j] < g->in[j];
              }
              if (!inside) continue;
              const double *f = r->f + ((k0 * g->k[1] + k1) * g->k[2] + k2) * fi * fo;
              const double *x = r->x + n * r->xs[0] + i[0] * r->xs[2] + i[1] * r->xs[3] +
                                i[2] * r->xs[4];
              if (!r->transpose) {
                for (int64_t c = 0; c < cpg; c++) acc += x[(ic0 + c) * r->xs[1]] * f[c * fo + oc];
              } else {
                int64_t oc_in = oc - grp * opg;
                for (int64_t c = 0; c < cpg; c++)
                  acc += x[(ic0 + c) * r->xs[1]] * f[oc_in * fo + ic0 + c];
              }
            }
        r->y[n * r->ys[0] + oc * r->ys[1] + o0 * r->ys[2] + o1 * r->ys[3] + o2 * r->ys[4]] = acc;
      }
  }
}

static floe_code run_ref(const State *s, FloeKernelContext *ctx, const WndGeo *g, FloeDType dt,
                         const void *x, const void *f, int64_t xn, int64_t fn, void *y,
                         int64_t yn) {
  double *buf;
  floe_code rc =
      cpu_host->ctx_allocate_temp(ctx, (size_t)(xn + fn + yn) * sizeof(double), (void **)&buf);
  if (rc != FLOE_OK) return rc;
  Ref r = {g, s->a.kind == WND_CONV_T, buf, buf + xn, buf + xn + fn, {0}, {0}};
  wnd_to_f64(dt, x, buf, xn);
  wnd_to_f64(dt, f, buf + xn, fn);
  wnd_strides(s->a.cf, g->ns, g->c, g->in, r.xs);
  wnd_strides(s->a.cf, g->ns, g->o, g->out, r.ys);
  int64_t cost = g->out[1] * g->out[2] * g->k[0] * g->k[1] * g->k[2] * (g->c / g->groups) * 2;
  cpu_parallel_for(g->n * g->o * g->out[0], cost, ref_rows, &r);
  wnd_from_f64(dt, r.y, y, yn);
  return FLOE_OK;
}

/* ---------------------------------------------------------------------------------- */

static floe_code conv_compute(void *state, FloeKernelContext *ctx) {
  State *s = state;
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0), *f = cpu_host->ctx_input(ctx, 1);
  WndGeo g;
  floe_code rc = wnd_geo(&s->a, ctx, x, f, &g);
  if (rc != FLOE_OK) return rc;
  int64_t dims[WND_MAX_RANK];
  wnd_out_dims(&s->a, &g, dims);
  FloeTensor *out;
  if ((rc = cpu_host->ctx_allocate_output(ctx, 0, g.rank, dims, &out)) != FLOE_OK) return rc;
  int64_t yn = cpu_host->tensor_num_elements(out);
  if (yn == 0) return FLOE_OK;
  void *y = cpu_host->tensor_data(out);
  int64_t xn = cpu_host->tensor_num_elements(x), fn = cpu_host->tensor_num_elements(f);
  if (xn == 0 || fn == 0) { /* a sum over nothing */
    memset(y, 0, cpu_host->tensor_nbytes(out));
    return FLOE_OK;
  }
  const void *xd = cpu_host->tensor_data(x), *fd = cpu_host->tensor_data(f);
  FloeDType dt = cpu_host->tensor_dtype(x);
  if (s->a.kind == WND_CONV && dt == FLOE_F32) return run_dnnl(s, ctx, &g, xd, fd, y);
  if (s->a.kind == WND_CONV && cpu_is_half(dt))
    return run_half(s, ctx, &g, dt, xd, fd, xn, fn, y, yn);
  return run_ref(s, ctx, &g, dt, xd, fd, xn, fn, y, yn);
}

/* ---------------------------------------------------------------------------------- */
/* _FusedConv. */

static bool same_dims(int ra, const int64_t *a, int rb, const int64_t *b) {
  if (ra != rb) return false;
  for (int i = 0; i < ra; i++)
    if (a[i] != b[i]) return false;
  return true;
}

typedef struct Epilogue {
  const CpuBroadcast *p;
  const float *conv, *side;
  float *y;
  bool relu;
} Epilogue;

/* y = [relu](conv + side), broadcast, over output elements [begin, end). */
static void epilogue_range(void *arg, int64_t begin, int64_t end) {
  const Epilogue *e = arg;
  CpuBroadcastIter it;
  cpu_broadcast_iter_init(&it, e->p, begin, end);
  int64_t pos, off[CPU_BCAST_MAX_INPUTS], len;
  int inner = e->p->rank - 1;
  int64_t sa = e->p->strides[0][inner], sb = e->p->strides[1][inner];
  while ((len = cpu_broadcast_iter_next(&it, &pos, off)) > 0)
    for (int64_t i = 0; i < len; i++) {
      float v = e->conv[off[0] + i * sa] + e->side[off[1] + i * sb];
      e->y[pos + i] = e->relu && !(v > 0) ? 0.0f : v;
    }
}

/* The convolution sums over nothing (no input channels or an empty window): the output is
 * the epilogue of zeros. sp: elements per channel run (CHANNELS_FIRST), else 1. */
static void fused_empty(const Job *j, int64_t n, int64_t sp) {
  int64_t o = j->g->o;
  for (int64_t i = 0; i < n; i++) {
    float v = (j->bias ? j->bias[i / sp % o] : 0.0f) + (j->side ? j->side[i] : 0.0f);
    j->y[i] = (j->post & POST_RELU) && !(v > 0) ? 0.0f : v;
  }
}

/* fused_empty for a blocked output: channel (i / (pixels * 16) % blocks) * 16 + i % 16 (a
 * padding lane when that is o or more). */
static void blocked_empty(const Job *j, int64_t n) {
  int64_t o = j->g->o, px = j->g->out[0] * j->g->out[1] * j->g->out[2];
  for (int64_t i = 0; i < n; i++) {
    int64_t c = i / (px * 16) % (pad16(o) / 16) * 16 + i % 16;
    if (c >= o) {
      j->y[i] = 0.0f;
      continue;
    }
    float v = (j->bias ? j->bias[c] : 0.0f) + (j->side ? j->side[i] : 0.0f);
    j->y[i] = (j->post & POST_RELU) && !(v > 0) ? 0.0f : v;
  }
}

/* The padding lanes of blocked output y (rank dims) whose o channels leave its last block
 * part empty: zeros again after the activations (a padded blocked tensor's padding is always
 * zero, so that the next convolution, pool or mean reads nothing there). */
static void zero_padding(float *y, int rank, const int64_t *dims, int64_t o) {
  int64_t lanes = o % 16, px = 1;
  if (!lanes || rank < 3) return;
  for (int i = 2; i < rank - 1; i++) px *= dims[i];
  for (int64_t n = 0; n < dims[0]; n++) {
    float *last = y + (n * dims[1] + dims[1] - 1) * px * 16;
    for (int64_t p = 0; p < px; p++) { /* a 16-lane blend, not a call per pixel */
      float *q = last + p * 16;
      for (int l = 0; l < 16; l++) q[l] = l < lanes ? q[l] : 0.0f;
    }
  }
}

/* The n-element output of a convolution over nothing (an empty input or filter), in the
 * kernel's output layout. */
static void empty_output(const State *s, const Job *j, int64_t n) {
  if (s->blocked)
    blocked_empty(j, n);
  else
    fused_empty(j, n, s->a.cf ? j->g->out[0] * j->g->out[1] * j->g->out[2] : 1);
}

/* A side input that broadcasts: the convolution (with its bias) into scratch, then the sum
 * and the ReLU into the output of the broadcast shape. */
static floe_code fused_broadcast(State *s, FloeKernelContext *ctx, const WndGeo *g, int crank,
                                 const int64_t *cdims, Job *j, const FloeTensor *side,
                                 bool empty) {
  int ranks[2] = {crank, cpu_host->tensor_rank(side)}, rank;
  const int64_t *dims[2] = {cdims, cpu_host->tensor_dims(side)};
  int64_t odims[FLOE_MAX_DIMS];
  CpuBroadcast p;
  if (cpu_broadcast_shape(2, ranks, dims, &rank, odims) != 0) {
    char a[CPU_SHAPE_STR_MAX], b[CPU_SHAPE_STR_MAX];
    return cpu_host->ctx_set_error(
        ctx, FLOE_INVALID_ARGUMENT, "the side input %s does not broadcast with the convolution's %s",
        cpu_shape_str(b, sizeof b, ranks[1], dims[1]), cpu_shape_str(a, sizeof a, ranks[0], cdims));
  }
  cpu_broadcast_plan(&p, 2, ranks, dims, rank, odims);
  FloeTensor *out;
  floe_code rc = cpu_host->ctx_allocate_output(ctx, 0, rank, odims, &out);
  if (rc != FLOE_OK || p.num_elements == 0) return rc;
  int64_t cn = 1;
  for (int i = 0; i < crank; i++) cn *= cdims[i];
  float *conv;
  if ((rc = cpu_host->ctx_allocate_temp(ctx, (size_t)cn * sizeof *conv, (void **)&conv)))
    return rc;
  j->post &= POST_BIAS;
  j->side = NULL;
  j->y = conv;
  if (empty)
    empty_output(s, j, cn);
  else if (cn > 0 && (rc = run_conv(ctx, j)) != FLOE_OK)
    return rc;
  Epilogue e = {&p, conv, cpu_host->tensor_data(side), cpu_host->tensor_data(out), s->relu};
  cpu_parallel_elements(p.num_elements, 2, epilogue_range, &e);
  cpu_acts_run(&s->acts, cpu_host->tensor_data(out), p.num_elements);
  if (s->blocked) zero_padding(cpu_host->tensor_data(out), rank, odims, g->o);
  return FLOE_OK;
}

/* The geometry of a blocked _FusedConv: input x [n, ceil(c / 16), spatial..., 16] read as
 * the channels-last [n, spatial..., c], c the filter's (groups times its input channels;
 * plain_input: x is that); its output dims [n, ceil(o / 16), spatial..., 16] in dims. A last
 * block that c or o does not fill is padding. */
static floe_code blocked_geo(State *s, FloeKernelContext *ctx, const FloeTensor *x,
                             const FloeTensor *f, WndGeo *g, int64_t *dims) {
  int r = cpu_host->tensor_rank(x);
  const int64_t *d = cpu_host->tensor_dims(x);
  char buf[CPU_SHAPE_STR_MAX], fbuf[CPU_SHAPE_STR_MAX];
  floe_code rc;
  if (s->plain_input) {
    rc = wnd_geo(&s->a, ctx, x, f, g);
  } else {
    if (r < 4 || r > 6 || d[r - 1] != 16)
      return cpu_host->ctx_set_error(
          ctx, FLOE_INVALID_ARGUMENT,
          "blocked input %s must be [n, channels / 16, 1 to 3 spatial dims, 16]",
          cpu_shape_str(buf, sizeof buf, r, d));
    int fr = cpu_host->tensor_rank(f);
    const int64_t *fd = cpu_host->tensor_dims(f);
    int64_t c = fr == r - 1 ? fd[fr - 2] * s->a.groups : d[1] * 16;
    if (pad16(c) != d[1] * 16)
      return cpu_host->ctx_set_error(
          ctx, FLOE_INVALID_ARGUMENT,
          "filter %s with %lld groups reads %lld channels, which blocked input %s does not "
          "hold in %lld blocks of 16",
          cpu_shape_str(fbuf, sizeof fbuf, fr, fd), (long long)s->a.groups, (long long)c,
          cpu_shape_str(buf, sizeof buf, r, d), (long long)d[1]);
    int64_t logical[WND_MAX_RANK];
    logical[0] = d[0];
    for (int i = 2; i < r - 1; i++) logical[i - 1] = d[i];
    logical[r - 2] = c;
    rc = wnd_geo_dims(&s->a, ctx, r - 1, logical, f, g);
  }
  if (rc != FLOE_OK) return rc;
  int64_t G = g->groups;
  if (G != 1 && !(G == g->c && G == g->o) && ((g->c / G) % 16 || (g->o / G) % 16))
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "a blocked _FusedConv of %lld groups needs one input and one "
                                   "output channel a group (depthwise) or whole blocks of 16 a "
                                   "group, got %lld input and %lld output channels",
                                   (long long)G, (long long)g->c, (long long)g->o);
  dims[0] = g->n;
  dims[1] = pad16(g->o) / 16;
  for (int j = 0; j < g->ns; j++) dims[2 + j] = g->out[3 - g->ns + j];
  dims[2 + g->ns] = 16;
  return FLOE_OK;
}

static floe_code fused_compute(void *state, FloeKernelContext *ctx) {
  State *s = state;
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0), *f = cpu_host->ctx_input(ctx, 1);
  const FloeTensor *bias = s->bias ? cpu_host->ctx_input(ctx, 2) : NULL;
  const FloeTensor *side = s->add ? cpu_host->ctx_input(ctx, 2 + s->bias) : NULL;
  WndGeo g;
  int64_t dims[WND_MAX_RANK + 1];
  floe_code rc = s->blocked ? blocked_geo(s, ctx, x, f, &g, dims) : wnd_geo(&s->a, ctx, x, f, &g);
  if (rc != FLOE_OK) return rc;
  char buf[CPU_SHAPE_STR_MAX];
  if (bias && (cpu_host->tensor_rank(bias) != 1 || cpu_host->tensor_dims(bias)[0] != g.o))
    return cpu_host->ctx_set_error(
        ctx, FLOE_INVALID_ARGUMENT, "bias %s does not match the %lld output channels",
        cpu_shape_str(buf, sizeof buf, cpu_host->tensor_rank(bias), cpu_host->tensor_dims(bias)),
        (long long)g.o);
  int out_rank = s->blocked ? g.rank + 1 : g.rank;
  if (!s->blocked) wnd_out_dims(&s->a, &g, dims);
  Job j = {s, &g, bias ? POST_BIAS : 0, cpu_host->tensor_data(x), cpu_host->tensor_data(f),
           bias ? cpu_host->tensor_data(bias) : NULL, side ? cpu_host->tensor_data(side) : NULL,
           NULL, false, 1, false, NULL, 0, NULL};
  if (s->relu) j.post |= POST_RELU;
  bool empty = cpu_host->tensor_num_elements(x) == 0 || cpu_host->tensor_num_elements(f) == 0;
  bool same_side =
      !side || same_dims(out_rank, dims, cpu_host->tensor_rank(side), cpu_host->tensor_dims(side));
  if (!same_side) return fused_broadcast(s, ctx, &g, out_rank, dims, &j, side, empty);
  if (side) j.post |= POST_SUM;
  FloeTensor *out;
  /* The output written over the side input when this is its last reader: the sum post-op
   * adds what the output holds, so the side input is then never copied. */
  if (side && !empty && j.side != j.x && FLOE_HAS_FIELD(cpu_host, FloeHostApi, ctx_reuse_input) &&
      cpu_host->tensor_dtype(side) == FLOE_F32 &&
      cpu_host->ctx_reuse_input(ctx, 2 + s->bias, 0, out_rank, dims, &out) == FLOE_OK)
    j.side_copied = true;
  else if ((rc = cpu_host->ctx_allocate_output(ctx, 0, out_rank, dims, &out)) != FLOE_OK)
    return rc;
  if (cpu_host->tensor_num_elements(out) == 0) return FLOE_OK;
  j.y = cpu_host->tensor_data(out);
  /* Each part applies the activations to its output while it is in cache, where every
   * part's output is dense: blocked or channels-last data. */
  /* (not on a Winograd convolution: oneDNN's takes none of these post-ops, and would fall
   * back) */
  bool by_input = !empty && input_parts_fit(s, &g);
  bool in_primitive = !empty && s->tail_post && !winograd_fits(s, &g, &g) && !by_input;
  if (in_primitive)
    j.post |= s->tail_post;
  else if (!empty && s->acts.n && (s->blocked || !s->a.cf) && !by_input)
    j.acts = &s->acts;
  if (empty)
    empty_output(s, &j, cpu_host->tensor_num_elements(out));
  else if ((rc = by_input ? run_input_parts(ctx, &j) : run_conv(ctx, &j)) != FLOE_OK)
    return rc;
  if (!j.acts && !in_primitive) cpu_acts_run(&s->acts, j.y, cpu_host->tensor_num_elements(out));
  if (s->blocked && (!s->zero_kept || empty)) zero_padding(j.y, out_rank, dims, g.o);
  return FLOE_OK;
}

floe_code cpu_register_conv_nd(FloePluginRegistrar *reg) {
  floe_code rc = cpu_add_kernel(reg, "Conv", "T", FLOE_DTYPES_FLOAT, 0, conv_compute,
                                state_create, state_destroy, (void *)&kind_conv);
  if (rc == FLOE_OK)
    rc = cpu_add_kernel(reg, "_FusedConv", "T", FLOE_DTYPE_BIT(FLOE_F32), 0, fused_compute,
                        state_create, state_destroy, (void *)&kind_fused);
  if (rc != FLOE_OK) return rc;
  return cpu_add_kernel(reg, "ConvTranspose", "T", FLOE_DTYPES_FLOAT, 0, conv_compute,
                        state_create, state_destroy, (void *)&kind_conv_t);
}
