/* SPDX-License-Identifier: Apache-2.0 */
/* conv_util.c - window attributes and geometry, and the per-shape oneDNN primitive cache
 * shared by conv.c and conv_grad.c. */
#include "conv_util.h"

#include <dnnl_debug.h>
#include <stdio.h>
#include <string.h>

#include "cpu_util.h"

/* ---------------------------------------------------------------------------------- */
/* Attributes. */

/* Reads a 4-entry list attribute in data-format order into its H and W values; N and C must
 * be 1. def is used when the attribute is absent (NULL: required). */
static floe_code parse_hw_list(const FloeHostApi *host, FloeKernelInit *init, const char *name,
                               const int64_t *def, bool nchw, int64_t hw[2]) {
  const int64_t *v = def;
  size_t n = 4;
  char buf[CPU_SHAPE_STR_MAX];
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
                                nchw ? "N,C,H,W" : "N,H,W,C", n,
                                cpu_shape_str(buf, sizeof buf, (int)n, v));
  for (size_t i = 0; i < 4; i++)
    if (v[i] <= 0)
      return host->init_set_error(init, FLOE_INVALID_ARGUMENT, "%s must be positive, got %s",
                                  name, cpu_shape_str(buf, sizeof buf, (int)n, v));
  int cdim = nchw ? 1 : 3, hdim = nchw ? 2 : 1;
  if (v[0] != 1 || v[cdim] != 1)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "%s must be 1 in the batch and channel dims, got %s", name,
                                cpu_shape_str(buf, sizeof buf, (int)n, v));
  hw[0] = v[hdim];
  hw[1] = v[hdim + 1];
  return FLOE_OK;
}

floe_code cpu_conv_parse_attrs(const FloeHostApi *host, FloeKernelInit *init, bool pooling,
                               CpuConvAttrs *a) {
  const FloeAttrs *attrs = host->init_attrs(init);
  const char *fmt = "NHWC", *pad = NULL;
  floe_code rc = host->attr_string(attrs, "data_format", &fmt);
  if (rc != FLOE_OK && rc != FLOE_NOT_FOUND)
    return host->init_set_error(init, rc, "attribute data_format must be a string");
  if (strcmp(fmt, "NHWC") != 0 && strcmp(fmt, "NCHW") != 0)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "data_format must be \"NHWC\" or \"NCHW\", got \"%s\"", fmt);
  a->nchw = strcmp(fmt, "NCHW") == 0;
  rc = host->attr_string(attrs, "padding", &pad);
  if (rc != FLOE_OK)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "attribute padding (\"SAME\" or \"VALID\") is required");
  if (strcmp(pad, "SAME") != 0 && strcmp(pad, "VALID") != 0)
    return host->init_set_error(init, FLOE_INVALID_ARGUMENT,
                                "padding must be \"SAME\" or \"VALID\", got \"%s\"", pad);
  a->same = strcmp(pad, "SAME") == 0;
  static const int64_t ones[4] = {1, 1, 1, 1};
  if ((rc = parse_hw_list(host, init, "strides", NULL, a->nchw, a->stride)) != FLOE_OK)
    return rc;
  if (!pooling) {
    a->ksize[0] = a->ksize[1] = 0; /* from the filter at run time */
    return parse_hw_list(host, init, "dilations", ones, a->nchw, a->dilation);
  }
  a->dilation[0] = a->dilation[1] = 1;
  return parse_hw_list(host, init, "ksize", NULL, a->nchw, a->ksize);
}

const char *cpu_conv_attrs_str(const CpuConvAttrs *a, char *buf, size_t len) {
  snprintf(buf, len, "strides %lldx%lld, dilations %lldx%lld, %s, %s", (long long)a->stride[0],
           (long long)a->stride[1], (long long)a->dilation[0], (long long)a->dilation[1],
           a->same ? "SAME" : "VALID", a->nchw ? "NCHW" : "NHWC");
  return buf;
}

/* TensorFlow's output size and padding along one spatial dim. */
static bool window(int64_t in, int64_t k, int64_t stride, int64_t dil, bool same, int64_t *out,
                   int64_t *before, int64_t *after) {
  int64_t eff = (k - 1) * dil + 1;
  if (same) {
    *out = (in + stride - 1) / stride;
    int64_t total = (*out - 1) * stride + eff - in;
    if (total < 0) total = 0;
    *before = total / 2;
    *after = total - *before;
  } else {
    if (in < eff) return false;
    *out = (in - eff) / stride + 1;
    *before = *after = 0;
  }
  return true;
}

bool cpu_conv_geo_finish(const CpuConvAttrs *a, CpuConvGeo *g) {
  return window(g->h, g->kh, a->stride[0], a->dilation[0], a->same, &g->oh, &g->pad_t,
                &g->pad_b) &&
         window(g->w, g->kw, a->stride[1], a->dilation[1], a->same, &g->ow, &g->pad_l,
                &g->pad_r);
}

/* ---------------------------------------------------------------------------------- */
/* oneDNN primitives. */

typedef struct CpuDnnlExec CpuDnnlExec;

struct CpuDnnlPrim {
  int64_t key[CPU_DNNL_KEY_LEN];
  int nthr;      /* OpenMP threads it was built for (its kernels split work that many ways) */
  int refs;      /* computes using it now */
  bool cached;   /* owned by the cache (else freed by its last user) */
  uint64_t used; /* LRU clock */
  dnnl_primitive_t op;
  int num_args;
  CpuDnnlArg args[CPU_DNNL_MAX_ARGS];
  size_t scratch_bytes; /* largest scratchpad among the primitive and its reorders */
  int kept;           /* index into args of the kept input, or -1 */
  CpuDnnlKeep *keep;  /* its entry in the cache (NULL: none free; reordered every call) */
  CpuDnnlExec *idle;  /* execution contexts not in use (guarded by the cache's lock) */
};

/* What one execution of a primitive needs besides the tensors: memory objects for each
 * argument (their data pointers set per call) and a scratchpad. Made on first use and kept
 * with the primitive, one per concurrent call, so that a call allocates nothing. */
typedef struct CpuDnnlExec {
  struct CpuDnnlExec *next;
  dnnl_memory_t user[CPU_DNNL_MAX_ARGS]; /* the tensor's layout (args with a reorder) */
  dnnl_memory_t prim[CPU_DNNL_MAX_ARGS]; /* the primitive's layout */
  dnnl_memory_t scratch; /* NULL without a scratchpad; points at the running thread's */
  dnnl_stream_t stream;
} CpuDnnlExec;

/* The kept input last seen and its reordered form, reused while the input stays the same:
 * that saves a reorder, and its parallel region, per step. One entry per pair of layouts,
 * shared by the cache's primitives (the parts of a convolution cut into row blocks read one
 * filter). */
struct CpuDnnlKeep {
  dnnl_memory_desc_t user, md; /* the input's layout and the primitives' */
  int64_t tag;                 /* CpuDnnlArg.keep_tag */
  pthread_rwlock_t lock;       /* held for reading while ready is in use */
  bool valid;
  unsigned misses;             /* stores since the last hit: a filter that changes every step
                                * (training) is stored only now and then */
  void *mem;                   /* one block: ready (64-aligned) then seen */
  void *ready, *seen;          /* seen: none when the cache keeps by address */
  const void *addr;            /* the address ready was made from */
};

/* Calls into the kernel context under `lock` (the shards of cpu_dnnl_for_batch share the
 * context, and ctx_allocate_temp / ctx_set_error are not thread-safe); NULL: unshared. */
static floe_code ctx_temp(FloeKernelContext *ctx, pthread_mutex_t *lock, size_t bytes,
                          void **out) {
  if (lock) pthread_mutex_lock(lock);
  floe_code rc = cpu_host->ctx_allocate_temp(ctx, bytes, out);
  if (lock) pthread_mutex_unlock(lock);
  return rc;
}

static floe_code fail_locked(FloeKernelContext *ctx, pthread_mutex_t *lock, dnnl_status_t st,
                             const char *what) {
  if (lock) pthread_mutex_lock(lock);
  floe_code rc =
      cpu_host->ctx_set_error(ctx, st == dnnl_out_of_memory ? FLOE_NO_MEMORY : FLOE_INTERNAL,
                              "oneDNN %s failed: %s", what, dnnl_status2str(st));
  if (lock) pthread_mutex_unlock(lock);
  return rc;
}

floe_code cpu_dnnl_fail(FloeKernelContext *ctx, dnnl_status_t st, const char *what) {
  return fail_locked(ctx, NULL, st, what);
}

floe_code cpu_dnnl_cache_init(CpuDnnlCache *c, const FloeHostApi *host, FloeKernelInit *init) {
  memset(c, 0, sizeof *c);
  dnnl_status_t st = dnnl_engine_create(&c->engine, dnnl_cpu, 0);
  if (st != dnnl_success)
    return host->init_set_error(init, st == dnnl_out_of_memory ? FLOE_NO_MEMORY : FLOE_INTERNAL,
                                "oneDNN CPU engine: %s", dnnl_status2str(st));
  pthread_mutex_init(&c->lock, NULL);
  return FLOE_OK;
}

static void exec_free(CpuDnnlExec *x) {
  for (int i = 0; i < CPU_DNNL_MAX_ARGS; i++) {
    dnnl_memory_destroy(x->user[i]);
    dnnl_memory_destroy(x->prim[i]);
  }
  dnnl_memory_destroy(x->scratch);
  if (x->stream) dnnl_stream_destroy(x->stream);
  cpu_host->free(x);
}

static void prim_free(CpuDnnlPrim *p) {
  if (!p) return;
  while (p->idle) {
    CpuDnnlExec *x = p->idle;
    p->idle = x->next;
    exec_free(x);
  }
  dnnl_primitive_destroy(p->op);
  for (int i = 0; i < p->num_args; i++) {
    dnnl_primitive_destroy(p->args[i].reorder);
    dnnl_primitive_destroy(p->args[i].reorder_in);
  }
  cpu_host->free(p);
}

void cpu_dnnl_cache_destroy(CpuDnnlCache *c) {
  for (int i = 0; i < CPU_DNNL_SLOTS; i++) prim_free(c->slots[i]);
  for (int i = 0; i < CPU_DNNL_KEEPS && c->keeps[i]; i++) {
    pthread_rwlock_destroy(&c->keeps[i]->lock);
    cpu_host->free(c->keeps[i]->mem);
    cpu_host->free(c->keeps[i]);
  }
  dnnl_engine_destroy(c->engine);
  pthread_mutex_destroy(&c->lock);
}

/* A reorder between two layouts; *out stays NULL when they are the same. */
static dnnl_status_t make_reorder(dnnl_engine_t eng, const_dnnl_primitive_attr_t attr,
                                  const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to,
                                  dnnl_primitive_t *out, size_t *scratch) {
  *out = NULL;
  if (dnnl_memory_desc_equal(from, to)) return dnnl_success;
  dnnl_primitive_desc_t pd;
  dnnl_status_t st = dnnl_reorder_primitive_desc_create(&pd, from, eng, to, eng, attr);
  if (st != dnnl_success) return st;
  size_t sp =
      dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
  if (sp > *scratch) *scratch = sp;
  st = dnnl_primitive_create(out, pd);
  dnnl_primitive_desc_destroy(pd);
  return st;
}

/* The cache's keep entry for arg's pair of layouts and tag, made when missing; NULL when
 * every entry holds another (or out of memory). */
static CpuDnnlKeep *keep_entry(CpuDnnlCache *c, const CpuDnnlArg *arg) {
  CpuDnnlKeep *k = NULL;
  pthread_mutex_lock(&c->lock);
  for (int i = 0; i < CPU_DNNL_KEEPS && !k; i++) {
    if (!c->keeps[i] && (c->keeps[i] = cpu_host->alloc(sizeof *c->keeps[i]))) {
      memset(c->keeps[i], 0, sizeof *c->keeps[i]);
      c->keeps[i]->user = arg->user;
      c->keeps[i]->md = arg->md;
      c->keeps[i]->tag = arg->keep_tag;
      pthread_rwlock_init(&c->keeps[i]->lock, NULL);
    }
    if (!c->keeps[i]) break;
    if (c->keeps[i]->tag == arg->keep_tag &&
        dnnl_memory_desc_equal(&c->keeps[i]->user, &arg->user) &&
        dnnl_memory_desc_equal(&c->keeps[i]->md, &arg->md))
      k = c->keeps[i];
  }
  pthread_mutex_unlock(&c->lock);
  return k;
}

/* Builds the primitive for key. Scratchpads are user-managed so that concurrent computes
 * never share one. */
static floe_code prim_build(CpuDnnlCache *c, FloeKernelContext *ctx, pthread_mutex_t *lock,
                            const int64_t *key,
                            CpuDnnlBuildFn build, const void *build_arg, CpuDnnlPrim **out) {
  CpuDnnlPrim *p = cpu_host->alloc(sizeof *p);
  if (!p) return fail_locked(ctx, lock, dnnl_out_of_memory, "primitive cache entry");
  memset(p, 0, sizeof *p);
  p->nthr = cpu_omp_threads();
  memcpy(p->key, key, sizeof p->key);
  p->kept = -1;
  dnnl_primitive_attr_t attr = NULL;
  dnnl_primitive_desc_t pd = NULL;
  const char *what = "primitive attributes";
  dnnl_status_t st;
  if ((st = dnnl_primitive_attr_create(&attr)) ||
      (st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user)))
    goto err_free_attr;
  if ((st = build(build_arg, c->engine, attr, &pd, p->args, &p->num_args, &what)))
    goto err_free_attr;
  p->scratch_bytes =
      dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
  what = "primitive";
  if ((st = dnnl_primitive_create(&p->op, pd))) goto err_free_pd;
  what = "reorder";
  for (int i = 0; i < p->num_args; i++) {
    CpuDnnlArg *a = &p->args[i];
    a->md = *dnnl_primitive_desc_query_md(pd, dnnl_query_exec_arg_md, a->arg);
    if (a->output) {
      st = make_reorder(c->engine, attr, &a->md, &a->user, &a->reorder, &p->scratch_bytes);
      if (st == dnnl_success && a->inout && a->reorder)
        st = make_reorder(c->engine, attr, &a->user, &a->md, &a->reorder_in, &p->scratch_bytes);
    } else
      st = make_reorder(c->engine, attr, &a->user, &a->md, &a->reorder, &p->scratch_bytes);
    if (st != dnnl_success) goto err_free_pd;
    if (a->keep && !a->output && a->reorder && p->kept < 0) p->kept = i;
  }
  dnnl_primitive_desc_destroy(pd);
  dnnl_primitive_attr_destroy(attr);
  if (p->kept >= 0) p->keep = keep_entry(c, &p->args[p->kept]);
  *out = p;
  return FLOE_OK;

err_free_pd:
  dnnl_primitive_desc_destroy(pd);
err_free_attr:
  dnnl_primitive_attr_destroy(attr);
  prim_free(p);
  return fail_locked(ctx, lock, st, what);
}

/* Finds or builds the primitive for key; the caller releases it with prim_release. Building
 * happens outside the lock; a shape that loses a race or finds every slot busy is used once
 * uncached. */
static floe_code prim_acquire(CpuDnnlCache *c, FloeKernelContext *ctx, pthread_mutex_t *lock,
                              const int64_t *key,
                              CpuDnnlBuildFn build, const void *build_arg, CpuDnnlPrim **out) {
  size_t key_bytes = CPU_DNNL_KEY_LEN * sizeof(int64_t);
  int nthr = cpu_omp_threads();
  pthread_mutex_lock(&c->lock);
  for (int i = 0; i < CPU_DNNL_SLOTS; i++) {
    CpuDnnlPrim *p = c->slots[i];
    if (p && p->nthr == nthr && memcmp(p->key, key, key_bytes) == 0) {
      p->refs++;
      p->used = ++c->clock;
      pthread_mutex_unlock(&c->lock);
      *out = p;
      return FLOE_OK;
    }
  }
  pthread_mutex_unlock(&c->lock);

  /* One build at a time in the process: shards of a batch often build their primitive at
   * the same moment, and oneDNN's primitive creation then races inside the library as
   * ThreadSanitizer sees it (it cannot see libdnnl's own synchronisation). Builds happen
   * once per shape, so the lock costs nothing in steady state. */
  static pthread_mutex_t build_lock = PTHREAD_MUTEX_INITIALIZER;
  CpuDnnlPrim *fresh = NULL;
  pthread_mutex_lock(&build_lock);
  floe_code rc = prim_build(c, ctx, lock, key, build, build_arg, &fresh);
  pthread_mutex_unlock(&build_lock);
  if (rc != FLOE_OK) return rc;
  fresh->refs = 1;

  pthread_mutex_lock(&c->lock);
  /* Slot for it: an empty one, else the least recently used idle one, else none. */
  int victim = -1;
  bool present = false;
  for (int i = 0; i < CPU_DNNL_SLOTS; i++) {
    CpuDnnlPrim *p = c->slots[i], *v = victim >= 0 ? c->slots[victim] : NULL;
    if (p && p->nthr == nthr && memcmp(p->key, key, key_bytes) == 0)
      present = true; /* another compute built it first: ours is used once */
    else if (!p && (victim < 0 || v))
      victim = i;
    else if (p && p->refs == 0 && (victim < 0 || (v && p->used < v->used)))
      victim = i;
  }
  if (present) victim = -1;
  CpuDnnlPrim *old = NULL;
  if (victim >= 0) {
    old = c->slots[victim];
    fresh->cached = true;
    fresh->used = ++c->clock;
    c->slots[victim] = fresh;
  }
  pthread_mutex_unlock(&c->lock);
  prim_free(old);
  *out = fresh;
  return FLOE_OK;
}

static void prim_release(CpuDnnlCache *c, CpuDnnlPrim *p) {
  pthread_mutex_lock(&c->lock);
  p->refs--;
  bool drop = !p->cached;
  pthread_mutex_unlock(&c->lock);
  if (drop) prim_free(p);
}

/* The kept input's reordered form when data is the input last seen, with k->lock held for
 * reading (release with pthread_rwlock_unlock); else NULL. */
static void *keep_lookup(const CpuDnnlCache *c, CpuDnnlKeep *k, const void *data) {
  pthread_rwlock_rdlock(&k->lock);
  if (k->valid && c->keep_by_address && k->addr == data) return k->ready;
  if (k->valid && !c->keep_by_address &&
      memcmp(k->seen, data, dnnl_memory_desc_get_size(&k->user)) == 0)
    return k->ready;
  pthread_rwlock_unlock(&k->lock);
  return NULL;
}

/* Whether md's bytes are exactly its elements (no strides past them). */
static int md_dense(const dnnl_memory_desc_t *md) {
  size_t n = 1;
  for (int i = 0; i < md->ndims; i++) n *= (size_t)md->dims[i];
  return dnnl_memory_desc_get_size(md) == n * dnnl_data_type_size(md->data_type);
}

/* Remembers data and its reordered form, unless another compute is using the old ones or the
 * input has changed on every recent call (then only every 16th time). */
static void keep_store(const CpuDnnlCache *c, CpuDnnlKeep *k, const void *data,
                       const void *ready) {
  if (pthread_rwlock_trywrlock(&k->lock) != 0) return;
  unsigned misses = __atomic_fetch_add(&k->misses, 1, __ATOMIC_RELAXED);
  if (misses >= 2 && misses % 16 != 0) {
    pthread_rwlock_unlock(&k->lock);
    return;
  }
  size_t seen = c->keep_by_address ? 0 : dnnl_memory_desc_get_size(&k->user);
  size_t bytes = dnnl_memory_desc_get_size(&k->md);
  if (!k->mem && (k->mem = cpu_host->alloc(bytes + 64 + seen))) {
    k->ready = (void *)(((uintptr_t)k->mem + 63) & ~(uintptr_t)63);
    k->seen = (char *)k->ready + bytes;
  }
  if (k->mem) {
    memcpy(k->ready, ready, bytes);
    if (seen) memcpy(k->seen, data, seen);
    k->addr = data;
    k->valid = true;
  }
  pthread_rwlock_unlock(&k->lock);
}

/* An idle execution context of p, or a new one (NULL on failure, *st saying why). */
static CpuDnnlExec *exec_acquire(CpuDnnlCache *c, CpuDnnlPrim *p, dnnl_status_t *st) {
  pthread_mutex_lock(&c->lock);
  CpuDnnlExec *x = p->idle;
  if (x) p->idle = x->next;
  pthread_mutex_unlock(&c->lock);
  *st = dnnl_success;
  if (x) return x;
  if (!(x = cpu_host->alloc(sizeof *x))) {
    *st = dnnl_out_of_memory;
    return NULL;
  }
  memset(x, 0, sizeof *x);
  *st = dnnl_stream_create(&x->stream, c->engine, dnnl_stream_default_flags);
  for (int i = 0; i < p->num_args && *st == dnnl_success; i++) {
    if (p->args[i].reorder)
      *st = dnnl_memory_create(&x->user[i], &p->args[i].user, c->engine, DNNL_MEMORY_NONE);
    if (*st == dnnl_success)
      *st = dnnl_memory_create(&x->prim[i], &p->args[i].md, c->engine, DNNL_MEMORY_NONE);
  }
  if (*st == dnnl_success && p->scratch_bytes) {
    dnnl_memory_desc_t md;
    dnnl_dims_t dims = {(dnnl_dim_t)p->scratch_bytes};
    if (!(*st = dnnl_memory_desc_init_by_tag(&md, 1, dims, dnnl_u8, dnnl_a)))
      *st = dnnl_memory_create(&x->scratch, &md, c->engine, DNNL_MEMORY_NONE);
  }
  if (*st != dnnl_success) {
    exec_free(x);
    return NULL;
  }
  return x;
}

static void exec_release(CpuDnnlCache *c, CpuDnnlPrim *p, CpuDnnlExec *x) {
  pthread_mutex_lock(&c->lock);
  x->next = p->idle;
  p->idle = x;
  pthread_mutex_unlock(&c->lock);
}

static dnnl_status_t reorder(dnnl_primitive_t p, dnnl_stream_t stream, dnnl_memory_t from,
                             dnnl_memory_t to, dnnl_memory_t scratch) {
  dnnl_exec_arg_t args[3] = {
      {DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}, {DNNL_ARG_SCRATCHPAD, scratch}};
  return dnnl_primitive_execute(p, stream, scratch ? 3 : 2, args);
}

floe_code cpu_dnnl_run(CpuDnnlCache *c, FloeKernelContext *ctx, pthread_mutex_t *lock,
                       const char *op,
                       const int64_t key[CPU_DNNL_KEY_LEN], CpuDnnlBuildFn build,
                       const void *build_arg, void *const *data) {
  CpuDnnlPrim *p = NULL;
  floe_code rc = prim_acquire(c, ctx, lock, key, build, build_arg, &p);
  if (rc != FLOE_OK) return rc;
  /* Buffers in the primitive's layouts: the tensors themselves where no reorder is needed. */
  void *bufs[CPU_DNNL_MAX_ARGS];
  /* A prepared copy is kept for an argument that is reordered, matched by address (nothing
   * of the tensor is read but through its layout) or else from a dense tensor: a strided
   * view (a block of a filter's output channels) spans past its own elements, so copying or
   * comparing "its bytes" would read beyond the tensor. */
  int keepable = p->keep && p->args[p->kept].reorder &&
                 (c->keep_by_address || md_dense(&p->keep->user));
  void *kept = keepable ? keep_lookup(c, p->keep, data[p->kept]) : NULL;
  for (int i = 0; i < p->num_args; i++) {
    bufs[i] = data[i];
    if (i == p->kept && kept)
      bufs[i] = kept;
    else if (p->args[i].reorder &&
             (rc = ctx_temp(ctx, lock, dnnl_memory_desc_get_size(&p->args[i].md), &bufs[i])) !=
                 FLOE_OK)
      goto err_release_prim;
  }

  dnnl_status_t st;
  const char *what = "execution context";
  CpuDnnlExec *x = exec_acquire(c, p, &st);
  if (!x) {
    rc = fail_locked(ctx, lock, st, what);
    goto err_release_prim;
  }
  dnnl_stream_t stream = x->stream;
  dnnl_exec_arg_t args[CPU_DNNL_MAX_ARGS + 1];
  what = "memory";
  for (int i = 0; i < p->num_args; i++) {
    if (p->args[i].reorder && (st = dnnl_memory_set_data_handle(x->user[i], data[i])))
      goto err_release_exec;
    if ((st = dnnl_memory_set_data_handle(x->prim[i], bufs[i]))) goto err_release_exec;
    args[i] = (dnnl_exec_arg_t){p->args[i].arg, x->prim[i]};
  }
  if (x->scratch) {
    /* The calling thread's own scratchpad (warm in its core's cache), shared by every
     * primitive it runs. */
    void *sp = cpu_thread_scratch(CPU_SCRATCH_DNNL, p->scratch_bytes);
    st = sp ? dnnl_memory_set_data_handle(x->scratch, sp) : dnnl_out_of_memory;
    if (st) goto err_release_exec;
    args[p->num_args] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, x->scratch};
  }

  what = "reorder";
  for (int i = 0; i < p->num_args; i++) {
    const CpuDnnlArg *a = &p->args[i];
    dnnl_primitive_t in = a->output ? a->reorder_in : a->reorder;
    if (in && !(i == p->kept && kept) &&
        (st = reorder(in, stream, x->user[i], x->prim[i], x->scratch)))
      goto err_release_exec;
  }
  what = op;
  if ((st = dnnl_primitive_execute(p->op, stream, p->num_args + (x->scratch ? 1 : 0), args)))
    goto err_release_exec;
  what = "reorder";
  for (int i = 0; i < p->num_args; i++)
    if (p->args[i].output && p->args[i].reorder &&
        (st = reorder(p->args[i].reorder, stream, x->prim[i], x->user[i], x->scratch)))
      goto err_release_exec;
  what = "stream wait";
  st = dnnl_stream_wait(stream);
  if (st == dnnl_success && keepable && !kept)
    keep_store(c, p->keep, data[p->kept], bufs[p->kept]);
  else if (st == dnnl_success && kept) __atomic_store_n(&p->keep->misses, 0, __ATOMIC_RELAXED);

err_release_exec:
  exec_release(c, p, x);
  if (st != dnnl_success) rc = fail_locked(ctx, lock, st, what);
err_release_prim:
  if (kept) pthread_rwlock_unlock(&p->keep->lock);
  prim_release(c, p);
  return rc;
}

/* ---------------------------------------------------------------------------------- */
/* Batches cut into shards. */

int cpu_dnnl_batch_shards(int64_t n) {
  int threads = cpu_host->num_threads();
  if (threads <= 1 || n < 2) return 1;
  return n < threads ? (int)n : threads;
}

typedef struct BatchJob {
  CpuBatchShardFn fn;
  void *arg;
  FloeKernelContext *ctx;
  int64_t n, block;
  pthread_mutex_t lock; /* the context's; also guards rc */
  floe_code rc;
} BatchJob;

static void batch_shards(void *arg, int64_t begin, int64_t end) {
  BatchJob *j = arg;
  int saved = cpu_omp_single();
  for (int64_t s = begin; s < end; s++) {
    int64_t first = s * j->block, count = j->n - first < j->block ? j->n - first : j->block;
    floe_code rc = j->fn(j->arg, j->ctx, &j->lock, first, count, (int)s);
    if (rc != FLOE_OK) {
      pthread_mutex_lock(&j->lock);
      if (j->rc == FLOE_OK) j->rc = rc;
      pthread_mutex_unlock(&j->lock);
    }
  }
  cpu_omp_restore(saved);
}

floe_code cpu_dnnl_for_batch(FloeKernelContext *ctx, int64_t n, int shards, CpuBatchShardFn fn,
                             void *arg) {
  if (shards <= 1) return fn(arg, ctx, NULL, 0, n, 0);
  BatchJob j = {.fn = fn, .arg = arg, .ctx = ctx, .n = n, .rc = FLOE_OK};
  j.block = (n + shards - 1) / shards;
  int64_t units = (n + j.block - 1) / j.block;
  if (pthread_mutex_init(&j.lock, NULL) != 0) return fn(arg, ctx, NULL, 0, n, 0);
  cpu_host->parallel_for(units, 0, batch_shards, &j);
  pthread_mutex_destroy(&j.lock);
  return j.rc;
}

dnnl_status_t cpu_dnnl_conv_desc(dnnl_convolution_desc_t *cd, CpuConvPass pass,
                                 dnnl_prop_kind_t prop, const CpuConvAttrs *a,
                                 const CpuConvGeo *g, const dnnl_memory_desc_t *src,
                                 const dnnl_memory_desc_t *wei, const dnnl_memory_desc_t *bias,
                                 const dnnl_memory_desc_t *dst) {
  dnnl_dims_t strides = {a->stride[0], a->stride[1]};
  dnnl_dims_t dil = {a->dilation[0] - 1, a->dilation[1] - 1}; /* oneDNN counts from 0 */
  dnnl_dims_t pad_l = {g->pad_t, g->pad_l}, pad_r = {g->pad_b, g->pad_r};
  switch (pass) {
    case CPU_CONV_FORWARD:
      return dnnl_dilated_convolution_forward_desc_init(cd, prop, dnnl_convolution_direct, src,
                                                        wei, bias, dst, strides, dil, pad_l,
                                                        pad_r);
    case CPU_CONV_BACKWARD_DATA:
      return dnnl_dilated_convolution_backward_data_desc_init(
          cd, dnnl_convolution_direct, src, wei, dst, strides, dil, pad_l, pad_r);
    case CPU_CONV_BACKWARD_WEIGHTS:
      return dnnl_dilated_convolution_backward_weights_desc_init(
          cd, dnnl_convolution_direct, src, wei, NULL, dst, strides, dil, pad_l, pad_r);
  }
  return dnnl_invalid_arguments;
}
