/* conv.c - Conv2D, MaxPool and AvgPool of the CPU plugin.
 *
 * f32 runs on oneDNN primitives built once per input shape and cached in the kernel state.
 * The primitive chooses its own layouts (format `any`); the input, filter (HWIO) and output
 * are reordered only when its choice differs from the tensor's layout, and a reordered filter
 * is reused while the filter fed in stays byte-for-byte the same. f16 and bf16 are
 * widened to f32 and run the same primitives; f64 runs plain double loops (oneDNN has no f64
 * on CPU, and narrowing to f32 would lose the precision the caller asked for). */
#include <dnnl.h>
#include <dnnl_debug.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "cpu.h"
#include "cpu_util.h"

#define CACHE_SLOTS 8  /* distinct input shapes kept per node */
#define STREAM_SLOTS 4 /* idle oneDNN streams kept per node */
#define KEY_LEN 7      /* N, C, H, W and, for Conv2D, O, KH, KW */

typedef enum OpKind { OP_CONV, OP_MAXPOOL, OP_AVGPOOL } OpKind;

static const char *const op_names[] = {"Conv2D", "MaxPool", "AvgPool"};

/* One cached primitive with the reorders around it (NULL when layouts already agree). */
typedef struct Prim {
  int64_t key[KEY_LEN];
  int refs;      /* computes using it now */
  bool cached;   /* owned by the cache (else freed by its last user) */
  uint64_t used; /* LRU clock */
  dnnl_primitive_t op, src_in, wei_in, dst_out;
  dnnl_memory_desc_t src_user, wei_user, dst_user; /* the tensors' layouts */
  dnnl_memory_desc_t src_md, wei_md, dst_md;       /* the primitive's layouts */
  size_t scratch_bytes; /* largest scratchpad among op and reorders */
  /* The last filter seen and its reordered form, reused while the filter's bytes stay the
   * same (inference): that saves a reorder, and its parallel region, per step. */
  pthread_rwlock_t wei_lock; /* held for reading while wei_ready is in use */
  bool wei_valid;
  void *wei_mem;             /* one block: wei_ready (64-aligned) then wei_seen */
  void *wei_ready, *wei_seen;
} Prim;

typedef struct State {
  OpKind kind;
  bool nchw, same;
  int64_t stride[2], dilation[2], ksize[2]; /* H, W */
  dnnl_engine_t engine;
  pthread_mutex_t lock; /* guards cache, clock and streams */
  Prim *cache[CACHE_SLOTS];
  uint64_t clock;
  dnnl_stream_t streams[STREAM_SLOTS];
  int num_streams;
} State;

/* Geometry of one call, in logical (N, C, H, W) terms. */
typedef struct Geo {
  int64_t n, c, h, w;
  int64_t o, kh, kw; /* output channels and window */
  int64_t oh, ow;
  int64_t pad_t, pad_b, pad_l, pad_r;
} Geo;

/* "[2,3,4]" for error messages. */
static const char *shape_str(const FloeTensor *t, char *buf, size_t len) {
  return cpu_shape_str(buf, len, cpu_host->tensor_rank(t), cpu_host->tensor_dims(t));
}

/* ---------------------------------------------------------------------------------- */
/* Attributes, parsed once per node. */

/* Reads a 4-entry list attribute in data-format order into its H and W values; N and C must
 * be 1. def is used when the attribute is absent (NULL: required). */
static floe_code parse_hw_list(const FloeHostApi *host, FloeKernelInit *init, const char *name,
                               const int64_t *def, bool nchw, int64_t hw[2]) {
  const int64_t *v = def;
  size_t n = 4;
  char buf[128];
  floe_code rc = host->attr_int_list(host->init_attrs(init), name, &v, &n);
  if (rc == FLOE_NOT_FOUND && def) {
    v = def;
    n = 4;
  } else if (rc == FLOE_NOT_FOUND) {
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT, "attribute %s is required", name);
  } else if (rc != FLOE_OK) {
    return host->init_set_error(init, rc, "attribute %s must be a list of ints", name);
  }
  if (n != 4)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "%s must have 4 entries (in %s order), got %zu: %s", name,
                                nchw ? "N,C,H,W" : "N,H,W,C", n, cpu_shape_str(buf, sizeof buf, (int)n, v));
  for (size_t i = 0; i < 4; i++)
    if (v[i] <= 0)
      return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                  "%s must be positive, got %s", name,
                                  cpu_shape_str(buf, sizeof buf, (int)n, v));
  int cdim = nchw ? 1 : 3, hdim = nchw ? 2 : 1;
  if (v[0] != 1 || v[cdim] != 1)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "%s must be 1 in the batch and channel dims, got %s", name,
                                cpu_shape_str(buf, sizeof buf, (int)n, v));
  hw[0] = v[hdim];
  hw[1] = v[hdim + 1];
  return FLOE_OK;
}

static floe_code parse_attrs(const FloeHostApi *host, FloeKernelInit *init, State *s) {
  const FloeAttrs *attrs = host->init_attrs(init);
  const char *fmt = "NHWC", *pad = NULL;
  floe_code rc = host->attr_string(attrs, "data_format", &fmt);
  if (rc != FLOE_OK && rc != FLOE_NOT_FOUND)
    return host->init_set_error(init, rc, "attribute data_format must be a string");
  if (strcmp(fmt, "NHWC") != 0 && strcmp(fmt, "NCHW") != 0)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "data_format must be \"NHWC\" or \"NCHW\", got \"%s\"", fmt);
  s->nchw = strcmp(fmt, "NCHW") == 0;
  rc = host->attr_string(attrs, "padding", &pad);
  if (rc != FLOE_OK)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "attribute padding (\"SAME\" or \"VALID\") is required");
  if (strcmp(pad, "SAME") != 0 && strcmp(pad, "VALID") != 0)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "padding must be \"SAME\" or \"VALID\", got \"%s\"", pad);
  s->same = strcmp(pad, "SAME") == 0;
  static const int64_t ones[4] = {1, 1, 1, 1};
  if ((rc = parse_hw_list(host, init, "strides", NULL, s->nchw, s->stride)) != FLOE_OK) return rc;
  if (s->kind == OP_CONV) {
    s->ksize[0] = s->ksize[1] = 0; /* from the filter at run time */
    return parse_hw_list(host, init, "dilations", ones, s->nchw, s->dilation);
  }
  s->dilation[0] = s->dilation[1] = 1;
  return parse_hw_list(host, init, "ksize", NULL, s->nchw, s->ksize);
}

static void prim_free(Prim *p) {
  if (!p) return;
  dnnl_primitive_destroy(p->op);
  dnnl_primitive_destroy(p->src_in);
  dnnl_primitive_destroy(p->wei_in);
  dnnl_primitive_destroy(p->dst_out);
  pthread_rwlock_destroy(&p->wei_lock);
  cpu_host->free(p->wei_mem);
  cpu_host->free(p);
}

static void state_destroy(void *state) {
  State *s = state;
  for (int i = 0; i < CACHE_SLOTS; i++) prim_free(s->cache[i]);
  for (int i = 0; i < s->num_streams; i++) dnnl_stream_destroy(s->streams[i]);
  dnnl_engine_destroy(s->engine);
  pthread_mutex_destroy(&s->lock);
  cpu_host->free(s);
}

static floe_code state_create(const FloeHostApi *host, FloeKernelInit *init, void *user_data,
                              void **state) {
  State *s = host->alloc(sizeof *s);
  if (!s) return host->init_set_error(init, FLOE_NO_MEMORY, "out of memory");
  memset(s, 0, sizeof *s);
  s->kind = *(const OpKind *)user_data;
  floe_code rc = parse_attrs(host, init, s);
  if (rc != FLOE_OK) {
    host->free(s);
    return rc;
  }
  dnnl_status_t st = dnnl_engine_create(&s->engine, dnnl_cpu, 0);
  if (st != dnnl_success) {
    host->free(s);
    return host->init_set_error(init, FLOE_INTERNAL, "oneDNN CPU engine: %s",
                                dnnl_status2str(st));
  }
  pthread_mutex_init(&s->lock, NULL);
  *state = s;
  return FLOE_OK;
}

/* ---------------------------------------------------------------------------------- */
/* Geometry. */

/* TensorFlow's output size and padding along one spatial dim; false when the VALID window is
 * larger than the input (as the Conv2D / pooling shape functions rule). */
static bool window(int64_t in, int64_t k, int64_t stride, int64_t dil, bool same, int64_t *out,
                   int64_t *before, int64_t *after) {
  int64_t eff = (k - 1) * dil + 1;
  if (same) {
    *out = (in + stride - 1) / stride;
    int64_t total = (*out - 1) * stride + eff - in;
    if (total < 0) total = 0;
    *before = total / 2;
    *after = total - *before; /* the odd pixel goes after */
  } else {
    if (in < eff) return false;
    *out = (in - eff) / stride + 1;
    *before = *after = 0;
  }
  return true;
}

static floe_code make_geo(const State *s, FloeKernelContext *ctx, const FloeTensor *x,
                          const FloeTensor *f, Geo *g) {
  char sx[CPU_SHAPE_STR_MAX], sf[CPU_SHAPE_STR_MAX];
  if (cpu_host->tensor_rank(x) != 4)
    return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                   "input must have rank 4 (%s), got %s",
                                   s->nchw ? "NCHW" : "NHWC", shape_str(x, sx, sizeof sx));
  const int64_t *d = cpu_host->tensor_dims(x);
  g->n = d[0];
  g->c = s->nchw ? d[1] : d[3];
  g->h = s->nchw ? d[2] : d[1];
  g->w = s->nchw ? d[3] : d[2];
  if (f) {
    const int64_t *fd = cpu_host->tensor_dims(f);
    if (cpu_host->tensor_rank(f) != 4)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "filter must have rank 4 (HWIO), got %s",
                                     shape_str(f, sf, sizeof sf));
    if (fd[2] != g->c)
      return cpu_host->ctx_set_error(
          ctx, FLOE_INVALID_ARGUMENT,
          "filter %s (HWIO) has %lld input channels but input %s (%s) has %lld",
          shape_str(f, sf, sizeof sf), (long long)fd[2], shape_str(x, sx, sizeof sx),
          s->nchw ? "NCHW" : "NHWC", (long long)g->c);
    if (fd[0] < 1 || fd[1] < 1)
      return cpu_host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                     "filter %s (HWIO) must have a non-empty window",
                                     shape_str(f, sf, sizeof sf));
    g->kh = fd[0];
    g->kw = fd[1];
    g->o = fd[3];
  } else {
    g->kh = s->ksize[0];
    g->kw = s->ksize[1];
    g->o = g->c;
  }
  if (!window(g->h, g->kh, s->stride[0], s->dilation[0], s->same, &g->oh, &g->pad_t, &g->pad_b) ||
      !window(g->w, g->kw, s->stride[1], s->dilation[1], s->same, &g->ow, &g->pad_l, &g->pad_r))
    return cpu_host->ctx_set_error(
        ctx, FLOE_INVALID_ARGUMENT,
        "input %s is smaller than the %lldx%lld window (dilations %lldx%lld) with VALID padding",
        shape_str(x, sx, sizeof sx), (long long)g->kh, (long long)g->kw,
        (long long)s->dilation[0], (long long)s->dilation[1]);
  return FLOE_OK;
}

/* ---------------------------------------------------------------------------------- */
/* oneDNN primitives. */

static floe_code dnnl_fail(FloeKernelContext *ctx, dnnl_status_t st, const char *what) {
  return cpu_host->ctx_set_error(ctx, st == dnnl_out_of_memory ? FLOE_NO_MEMORY : FLOE_INTERNAL,
                                 "oneDNN %s failed: %s", what, dnnl_status2str(st));
}

/* A reorder between two layouts; *out stays NULL when they are the same. */
static dnnl_status_t make_reorder(dnnl_engine_t eng, const dnnl_primitive_attr_t attr,
                                  const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to,
                                  dnnl_primitive_t *out, size_t *scratch) {
  *out = NULL;
  if (dnnl_memory_desc_equal(from, to)) return dnnl_success;
  dnnl_primitive_desc_t pd;
  dnnl_status_t st = dnnl_reorder_primitive_desc_create(&pd, from, eng, to, eng, attr);
  if (st != dnnl_success) return st;
  size_t sp = dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
  if (sp > *scratch) *scratch = sp;
  st = dnnl_primitive_create(out, pd);
  dnnl_primitive_desc_destroy(pd);
  return st;
}

/* Builds the primitive for one geometry. Scratchpads are user-managed so that concurrent
 * computes never share one. */
static floe_code prim_build(const State *s, FloeKernelContext *ctx, const Geo *g,
                            const int64_t *key, Prim **out) {
  Prim *p = cpu_host->alloc(sizeof *p);
  if (!p) return cpu_host->ctx_set_error(ctx, FLOE_NO_MEMORY, "out of memory");
  memset(p, 0, sizeof *p);
  pthread_rwlock_init(&p->wei_lock, NULL);
  memcpy(p->key, key, sizeof p->key);
  dnnl_format_tag_t data_tag = s->nchw ? dnnl_nchw : dnnl_nhwc;
  dnnl_dims_t src_dims = {g->n, g->c, g->h, g->w}, dst_dims = {g->n, g->o, g->oh, g->ow};
  dnnl_dims_t wei_dims = {g->o, g->c, g->kh, g->kw};
  dnnl_dims_t strides = {s->stride[0], s->stride[1]};
  dnnl_dims_t dil = {s->dilation[0] - 1, s->dilation[1] - 1}; /* oneDNN counts from 0 */
  dnnl_dims_t pad_l = {g->pad_t, g->pad_l}, pad_r = {g->pad_b, g->pad_r};
  dnnl_primitive_attr_t attr = NULL;
  dnnl_primitive_desc_t pd = NULL;
  const char *what = "memory descriptor";
  dnnl_status_t st;
  if ((st = dnnl_memory_desc_init_by_tag(&p->src_user, 4, src_dims, dnnl_f32, data_tag)) ||
      (st = dnnl_memory_desc_init_by_tag(&p->dst_user, 4, dst_dims, dnnl_f32, data_tag)))
    goto err_free_prim;
  what = "primitive attributes";
  if ((st = dnnl_primitive_attr_create(&attr)) ||
      (st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user)))
    goto err_free_attr;
  if (s->kind == OP_CONV) {
    dnnl_memory_desc_t src_any, wei_any, dst_any;
    dnnl_convolution_desc_t cd;
    what = "convolution descriptor";
    if ((st = dnnl_memory_desc_init_by_tag(&p->wei_user, 4, wei_dims, dnnl_f32, dnnl_hwio)) ||
        (st = dnnl_memory_desc_init_by_tag(&src_any, 4, src_dims, dnnl_f32, dnnl_format_tag_any)) ||
        (st = dnnl_memory_desc_init_by_tag(&wei_any, 4, wei_dims, dnnl_f32, dnnl_format_tag_any)) ||
        (st = dnnl_memory_desc_init_by_tag(&dst_any, 4, dst_dims, dnnl_f32, dnnl_format_tag_any)) ||
        (st = dnnl_dilated_convolution_forward_desc_init(
             &cd, dnnl_forward_inference, dnnl_convolution_direct, &src_any, &wei_any, NULL,
             &dst_any, strides, dil, pad_l, pad_r)))
      goto err_free_attr;
    what = "convolution primitive descriptor";
    if ((st = dnnl_primitive_desc_create(&pd, &cd, attr, s->engine, NULL))) goto err_free_attr;
  } else {
    dnnl_pooling_v2_desc_t pool;
    dnnl_dims_t kernel = {g->kh, g->kw};
    what = "pooling descriptor";
    if ((st = dnnl_pooling_v2_forward_desc_init(
             &pool, dnnl_forward_inference,
             s->kind == OP_MAXPOOL ? dnnl_pooling_max : dnnl_pooling_avg_exclude_padding,
             &p->src_user, &p->dst_user, strides, kernel, dil, pad_l, pad_r)))
      goto err_free_attr;
    what = "pooling primitive descriptor";
    if ((st = dnnl_primitive_desc_create(&pd, &pool, attr, s->engine, NULL))) goto err_free_attr;
  }
  p->src_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
  p->dst_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_dst_md, 0);
  if (s->kind == OP_CONV) p->wei_md = *dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  p->scratch_bytes =
      dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
  what = "primitive";
  if ((st = dnnl_primitive_create(&p->op, pd))) goto err_free_pd;
  what = "reorder";
  if ((st = make_reorder(s->engine, attr, &p->src_user, &p->src_md, &p->src_in, &p->scratch_bytes)) ||
      (st = make_reorder(s->engine, attr, &p->dst_md, &p->dst_user, &p->dst_out, &p->scratch_bytes)))
    goto err_free_pd;
  if (s->kind == OP_CONV &&
      (st = make_reorder(s->engine, attr, &p->wei_user, &p->wei_md, &p->wei_in, &p->scratch_bytes)))
    goto err_free_pd;
  dnnl_primitive_desc_destroy(pd);
  dnnl_primitive_attr_destroy(attr);
  *out = p;
  return FLOE_OK;

err_free_pd:
  dnnl_primitive_desc_destroy(pd);
err_free_attr:
  dnnl_primitive_attr_destroy(attr);
err_free_prim:
  prim_free(p);
  return dnnl_fail(ctx, st, what);
}

/* Finds or builds the primitive for key; the caller releases it with prim_release. Building
 * happens outside the lock; a shape that loses a race or finds every slot busy is used once
 * uncached. */
static floe_code prim_acquire(State *s, FloeKernelContext *ctx, const Geo *g,
                              const int64_t *key, Prim **out) {
  pthread_mutex_lock(&s->lock);
  for (int i = 0; i < CACHE_SLOTS; i++) {
    Prim *p = s->cache[i];
    if (p && memcmp(p->key, key, sizeof p->key) == 0) {
      p->refs++;
      p->used = ++s->clock;
      pthread_mutex_unlock(&s->lock);
      *out = p;
      return FLOE_OK;
    }
  }
  pthread_mutex_unlock(&s->lock);

  Prim *fresh = NULL;
  floe_code rc = prim_build(s, ctx, g, key, &fresh);
  if (rc != FLOE_OK) return rc;
  fresh->refs = 1;

  pthread_mutex_lock(&s->lock);
  /* Slot for it: an empty one, else the least recently used idle one, else none. */
  int victim = -1;
  bool present = false;
  for (int i = 0; i < CACHE_SLOTS; i++) {
    Prim *p = s->cache[i], *v = victim >= 0 ? s->cache[victim] : NULL;
    if (p && memcmp(p->key, key, sizeof p->key) == 0)
      present = true; /* another compute built it first: ours is used once */
    else if (!p && (victim < 0 || v))
      victim = i;
    else if (p && p->refs == 0 && (victim < 0 || (v && p->used < v->used)))
      victim = i;
  }
  if (present) victim = -1;
  Prim *old = NULL;
  if (victim >= 0) {
    old = s->cache[victim];
    fresh->cached = true;
    fresh->used = ++s->clock;
    s->cache[victim] = fresh;
  }
  pthread_mutex_unlock(&s->lock);
  prim_free(old);
  *out = fresh;
  return FLOE_OK;
}

static void prim_release(State *s, Prim *p) {
  pthread_mutex_lock(&s->lock);
  p->refs--;
  bool drop = !p->cached;
  pthread_mutex_unlock(&s->lock);
  if (drop) prim_free(p);
}

static dnnl_stream_t stream_acquire(State *s, dnnl_status_t *st) {
  dnnl_stream_t stream = NULL;
  pthread_mutex_lock(&s->lock);
  if (s->num_streams > 0) stream = s->streams[--s->num_streams];
  pthread_mutex_unlock(&s->lock);
  *st = dnnl_success;
  if (!stream) *st = dnnl_stream_create(&stream, s->engine, dnnl_stream_default_flags);
  return stream;
}

static void stream_release(State *s, dnnl_stream_t stream) {
  pthread_mutex_lock(&s->lock);
  if (s->num_streams < STREAM_SLOTS) {
    s->streams[s->num_streams++] = stream;
    stream = NULL;
  }
  pthread_mutex_unlock(&s->lock);
  if (stream) dnnl_stream_destroy(stream);
}

/* Memory objects of one execution, destroyed together. */
typedef struct Mems {
  dnnl_memory_t m[8];
  int n;
} Mems;

static dnnl_status_t mem(Mems *ms, const dnnl_memory_desc_t *md, dnnl_engine_t eng, void *data,
                         dnnl_memory_t *out) {
  dnnl_status_t st = dnnl_memory_create(out, md, eng, data);
  if (st == dnnl_success) ms->m[ms->n++] = *out;
  return st;
}

static dnnl_status_t exec2(dnnl_primitive_t p, dnnl_stream_t stream, int a1, dnnl_memory_t m1,
                           int a2, dnnl_memory_t m2, dnnl_memory_t scratch) {
  dnnl_exec_arg_t args[3] = {{a1, m1}, {a2, m2}, {DNNL_ARG_SCRATCHPAD, scratch}};
  return dnnl_primitive_execute(p, stream, scratch ? 3 : 2, args);
}

static floe_code temp(FloeKernelContext *ctx, const dnnl_memory_desc_t *md, void **out) {
  return cpu_host->ctx_allocate_temp(ctx, dnnl_memory_desc_get_size(md), out);
}

/* The reordered form of filter wei when it is the one last seen, with wei_lock held for
 * reading (release with pthread_rwlock_unlock); else NULL. */
static void *weights_lookup(Prim *p, const float *wei) {
  pthread_rwlock_rdlock(&p->wei_lock);
  if (p->wei_valid && memcmp(p->wei_seen, wei, dnnl_memory_desc_get_size(&p->wei_user)) == 0)
    return p->wei_ready;
  pthread_rwlock_unlock(&p->wei_lock);
  return NULL;
}

/* Remembers wei and its reordered form, unless another compute is using the old ones. */
static void weights_store(Prim *p, const float *wei, const void *ready) {
  if (pthread_rwlock_trywrlock(&p->wei_lock) != 0) return;
  size_t seen = dnnl_memory_desc_get_size(&p->wei_user);
  size_t bytes = dnnl_memory_desc_get_size(&p->wei_md);
  if (!p->wei_mem && (p->wei_mem = cpu_host->alloc(bytes + 64 + seen))) {
    p->wei_ready = (void *)(((uintptr_t)p->wei_mem + 63) & ~(uintptr_t)63);
    p->wei_seen = (char *)p->wei_ready + bytes;
  }
  if (p->wei_mem) {
    memcpy(p->wei_ready, ready, bytes);
    memcpy(p->wei_seen, wei, seen);
    p->wei_valid = true;
  }
  pthread_rwlock_unlock(&p->wei_lock);
}

/* Runs the f32 primitive for g on src (logical layout of the data format), wei (HWIO, NULL
 * for pooling) into dst. */
static floe_code run_dnnl(State *s, FloeKernelContext *ctx, const Geo *g, const float *src,
                          const float *wei, float *dst) {
  int64_t key[KEY_LEN] = {g->n, g->c, g->h, g->w, wei ? g->o : 0, wei ? g->kh : 0,
                          wei ? g->kw : 0};
  Prim *p = NULL;
  floe_code rc = prim_acquire(s, ctx, g, key, &p);
  if (rc != FLOE_OK) return rc;
  void *src_buf = (void *)src, *wei_buf = (void *)wei, *dst_buf = dst, *scratch_buf = NULL;
  void *wei_cached = p->wei_in ? weights_lookup(p, wei) : NULL;
  bool wei_reorder = p->wei_in && !wei_cached;
  if (wei_cached) wei_buf = wei_cached;
  if ((p->src_in && (rc = temp(ctx, &p->src_md, &src_buf)) != FLOE_OK) ||
      (wei_reorder && (rc = temp(ctx, &p->wei_md, &wei_buf)) != FLOE_OK) ||
      (p->dst_out && (rc = temp(ctx, &p->dst_md, &dst_buf)) != FLOE_OK) ||
      (p->scratch_bytes &&
       (rc = cpu_host->ctx_allocate_temp(ctx, p->scratch_bytes, &scratch_buf)) != FLOE_OK))
    goto err_release_prim;

  dnnl_status_t st;
  dnnl_stream_t stream = stream_acquire(s, &st);
  if (st != dnnl_success) {
    rc = dnnl_fail(ctx, st, "stream");
    goto err_release_prim;
  }
  Mems ms = {.n = 0};
  dnnl_memory_t src_user = NULL, src_m = NULL, wei_user = NULL, wei_m = NULL, dst_user = NULL,
                dst_m = NULL, scratch = NULL;
  dnnl_memory_desc_t scratch_md;
  dnnl_dims_t scratch_dims = {(dnnl_dim_t)p->scratch_bytes};
  const char *what = "memory";
  if ((p->src_in && (st = mem(&ms, &p->src_user, s->engine, (void *)src, &src_user))) ||
      (st = mem(&ms, &p->src_md, s->engine, src_buf, &src_m)) ||
      (p->dst_out && (st = mem(&ms, &p->dst_user, s->engine, dst, &dst_user))) ||
      (st = mem(&ms, &p->dst_md, s->engine, dst_buf, &dst_m)))
    goto err_free_mems;
  if (wei && ((wei_reorder && (st = mem(&ms, &p->wei_user, s->engine, (void *)wei, &wei_user))) ||
              (st = mem(&ms, &p->wei_md, s->engine, wei_buf, &wei_m))))
    goto err_free_mems;
  if (scratch_buf &&
      ((st = dnnl_memory_desc_init_by_tag(&scratch_md, 1, scratch_dims, dnnl_u8, dnnl_a)) ||
       (st = mem(&ms, &scratch_md, s->engine, scratch_buf, &scratch))))
    goto err_free_mems;

  what = "reorder";
  if ((p->src_in && (st = exec2(p->src_in, stream, DNNL_ARG_FROM, src_user, DNNL_ARG_TO, src_m,
                                scratch))) ||
      (wei_reorder && (st = exec2(p->wei_in, stream, DNNL_ARG_FROM, wei_user, DNNL_ARG_TO, wei_m,
                                  scratch))))
    goto err_free_mems;
  what = op_names[s->kind];
  if (wei) {
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, src_m}, {DNNL_ARG_WEIGHTS, wei_m},
                               {DNNL_ARG_DST, dst_m}, {DNNL_ARG_SCRATCHPAD, scratch}};
    st = dnnl_primitive_execute(p->op, stream, scratch ? 4 : 3, args);
  } else {
    st = exec2(p->op, stream, DNNL_ARG_SRC, src_m, DNNL_ARG_DST, dst_m, scratch);
  }
  if (st != dnnl_success) goto err_free_mems;
  what = "reorder";
  if (p->dst_out &&
      (st = exec2(p->dst_out, stream, DNNL_ARG_FROM, dst_m, DNNL_ARG_TO, dst_user, scratch)))
    goto err_free_mems;
  what = "stream wait";
  st = dnnl_stream_wait(stream);
  if (st == dnnl_success && wei_reorder) weights_store(p, wei, wei_buf);

err_free_mems:
  for (int i = 0; i < ms.n; i++) dnnl_memory_destroy(ms.m[i]);
  stream_release(s, stream);
  if (st != dnnl_success) rc = dnnl_fail(ctx, st, what);
err_release_prim:
  if (wei_cached) pthread_rwlock_unlock(&p->wei_lock);
  prim_release(s, p);
  return rc;
}

/* ---------------------------------------------------------------------------------- */
/* f64: plain loops in NHWC (NCHW is transposed in and out). */

typedef struct RefArgs {
  const State *s;
  const Geo *g;
  const double *x, *f;
  double *y;
} RefArgs;

/* Rows are (n, oh) pairs: x [N,H,W,C], f [KH,KW,C,O] -> y [N,OH,OW,O]. */
static void conv_f64_rows(void *arg, int64_t begin, int64_t end) {
  const RefArgs *a = arg;
  const Geo *g = a->g;
  for (int64_t r = begin; r < end; r++) {
    int64_t n = r / g->oh, oh = r % g->oh;
    for (int64_t ow = 0; ow < g->ow; ow++) {
      double *y = a->y + ((n * g->oh + oh) * g->ow + ow) * g->o;
      for (int64_t o = 0; o < g->o; o++) y[o] = 0;
      for (int64_t kh = 0; kh < g->kh; kh++) {
        int64_t ih = oh * a->s->stride[0] - g->pad_t + kh * a->s->dilation[0];
        if (ih < 0 || ih >= g->h) continue;
        for (int64_t kw = 0; kw < g->kw; kw++) {
          int64_t iw = ow * a->s->stride[1] - g->pad_l + kw * a->s->dilation[1];
          if (iw < 0 || iw >= g->w) continue;
          const double *x = a->x + ((n * g->h + ih) * g->w + iw) * g->c;
          const double *f = a->f + (kh * g->kw + kw) * g->c * g->o;
          for (int64_t c = 0; c < g->c; c++)
            for (int64_t o = 0; o < g->o; o++) y[o] += x[c] * f[c * g->o + o];
        }
      }
    }
  }
}

/* Rows are (n, oh) pairs: x [N,H,W,C] -> y [N,OH,OW,C]; AvgPool divides by the in-bounds
 * count. */
static void pool_f64_rows(void *arg, int64_t begin, int64_t end) {
  const RefArgs *a = arg;
  const Geo *g = a->g;
  bool is_max = a->s->kind == OP_MAXPOOL;
  for (int64_t r = begin; r < end; r++) {
    int64_t n = r / g->oh, oh = r % g->oh;
    for (int64_t ow = 0; ow < g->ow; ow++) {
      double *y = a->y + ((n * g->oh + oh) * g->ow + ow) * g->c;
      for (int64_t c = 0; c < g->c; c++) y[c] = is_max ? -INFINITY : 0;
      int64_t count = 0;
      for (int64_t kh = 0; kh < g->kh; kh++) {
        int64_t ih = oh * a->s->stride[0] - g->pad_t + kh;
        if (ih < 0 || ih >= g->h) continue;
        for (int64_t kw = 0; kw < g->kw; kw++) {
          int64_t iw = ow * a->s->stride[1] - g->pad_l + kw;
          if (iw < 0 || iw >= g->w) continue;
          const double *x = a->x + ((n * g->h + ih) * g->w + iw) * g->c;
          count++;
          if (is_max)
            for (int64_t c = 0; c < g->c; c++) y[c] = x[c] > y[c] ? x[c] : y[c];
          else
            for (int64_t c = 0; c < g->c; c++) y[c] += x[c];
        }
      }
      if (!is_max)
        for (int64_t c = 0; c < g->c; c++) y[c] /= (double)count;
    }
  }
}

/* [N, A, B] -> [N, B, A]: NCHW <-> NHWC with A, B the channel and spatial sizes. */
static void transpose_f64(const double *x, double *y, int64_t n, int64_t a, int64_t b) {
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < a; j++)
      for (int64_t k = 0; k < b; k++) y[(i * b + k) * a + j] = x[(i * a + j) * b + k];
}

static floe_code run_f64(State *s, FloeKernelContext *ctx, const Geo *g, const double *x,
                         const double *f, double *y) {
  RefArgs a = {s, g, x, f, y};
  floe_code rc;
  if (s->nchw) {
    double *buf;
    size_t in_n = (size_t)(g->n * g->c * g->h * g->w), out_n = (size_t)(g->n * g->o * g->oh * g->ow);
    if ((rc = cpu_host->ctx_allocate_temp(ctx, (in_n + out_n) * sizeof(double), (void **)&buf)))
      return rc;
    transpose_f64(x, buf, g->n, g->c, g->h * g->w);
    a.x = buf;
    a.y = buf + in_n;
  }
  FloeParallelFn fn = s->kind == OP_CONV ? conv_f64_rows : pool_f64_rows;
  int64_t rows = g->n * g->oh;
  int64_t row_cost = g->ow * g->kh * g->kw * g->c * (s->kind == OP_CONV ? g->o : 1);
  cpu_parallel_for(rows, row_cost, fn, &a);
  if (s->nchw) transpose_f64(a.y, y, g->n, g->oh * g->ow, g->o);
  return FLOE_OK;
}


static floe_code run_half(State *s, FloeKernelContext *ctx, const Geo *g, FloeDType dt,
                          const uint16_t *x, const uint16_t *f, uint16_t *y) {
  int64_t xn = g->n * g->c * g->h * g->w, yn = g->n * g->o * g->oh * g->ow;
  int64_t fn = f ? g->kh * g->kw * g->c * g->o : 0;
  float *buf;
  floe_code rc = cpu_host->ctx_allocate_temp(ctx, (size_t)(xn + fn + yn) * sizeof(float),
                                             (void **)&buf);
  if (rc != FLOE_OK) return rc;
  cpu_convert_half(dt, true, x, buf, xn);
  if (f) cpu_convert_half(dt, true, f, buf + xn, fn);
  rc = run_dnnl(s, ctx, g, buf, f ? buf + xn : NULL, buf + xn + fn);
  if (rc == FLOE_OK) cpu_convert_half(dt, false, buf + xn + fn, y, yn);
  return rc;
}

/* ---------------------------------------------------------------------------------- */

static floe_code window_compute(void *state, FloeKernelContext *ctx) {
  State *s = state;
  const FloeTensor *x = cpu_host->ctx_input(ctx, 0);
  const FloeTensor *f = s->kind == OP_CONV ? cpu_host->ctx_input(ctx, 1) : NULL;
  Geo g;
  floe_code rc = make_geo(s, ctx, x, f, &g);
  if (rc != FLOE_OK) return rc;
  int64_t dims[4] = {g.n, g.oh, g.ow, g.o};
  if (s->nchw) {
    dims[1] = g.o;
    dims[2] = g.oh;
    dims[3] = g.ow;
  }
  FloeTensor *out;
  if ((rc = cpu_host->ctx_allocate_output(ctx, 0, 4, dims, &out)) != FLOE_OK) return rc;
  if (cpu_host->tensor_num_elements(out) == 0) return FLOE_OK;
  void *y = cpu_host->tensor_data(out);
  if (g.c == 0) { /* a convolution summing over no channels */
    memset(y, 0, cpu_host->tensor_nbytes(out));
    return FLOE_OK;
  }
  const void *xd = cpu_host->tensor_data(x), *fd = f ? cpu_host->tensor_data(f) : NULL;
  FloeDType dt = cpu_host->tensor_dtype(x);
  switch (dt) {
    case FLOE_F32: return run_dnnl(s, ctx, &g, xd, fd, y);
    case FLOE_F64: return run_f64(s, ctx, &g, xd, fd, y);
    default: return run_half(s, ctx, &g, dt, xd, fd, y);
  }
}

static const OpKind kind_conv = OP_CONV, kind_maxpool = OP_MAXPOOL, kind_avgpool = OP_AVGPOOL;

floe_code cpu_register_conv(FloePluginRegistrar *reg) {
  const OpKind *kinds[] = {&kind_conv, &kind_maxpool, &kind_avgpool};
  for (int i = 0; i < 3; i++) {
    floe_code rc = cpu_add_kernel(reg, op_names[i], "T", FLOE_DTYPES_FLOAT, 0, window_compute,
                                  state_create, state_destroy, (void *)kinds[i]);
    if (rc != FLOE_OK) return rc;
  }
  return FLOE_OK;
}
