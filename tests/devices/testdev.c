/* SPDX-License-Identifier: Apache-2.0 */
/* testdev.c - floe-testdev.so, a fake accelerator for tests (never installed).
 *
 * Registers FLOE_TESTDEV_DEVICES devices (default 2, at most 16) of type "TESTDEV" whose
 * memory is NOT host memory as far as the core knows: the core reaches it only through the
 * copy slots, exactly as it must reach a GPU's. Underneath, each block is malloc'd with a
 * 64-byte header (canary, size, list links) and an 8-byte tail canary, and every device keeps
 * the list of its live blocks, so that
 *   - a deallocate of a pointer that is not a live block of this device (a double free, a
 *     host pointer, another device's block), a wrong size or a broken canary, and
 *   - a copy whose device side is not inside a live block
 * are caught: counted in the device's error count and logged (FLOE_LOG_LEVEL=error); a bad
 * copy also fails with FLOE_INVALID_ARGUMENT. The count and the live blocks show in the
 * description that get_props writes ("... N live blocks, M memory errors"), which a test
 * reads through the device's get_props slot.
 *
 * Capacity: FLOE_TESTDEV_MEMORY bytes per device (default 1 GiB); an allocation beyond it
 * fails with FLOE_RESOURCE_EXHAUSTED. The peak figures are made up (modest, so a placer sees
 * a device slower than a CPU at compute and costly to reach): they describe no hardware.
 *
 * Kernels, plain f32 loops reading device memory directly (the "device" computes on its own
 * memory): Identity (any dtype), Add, Sub, Mul (equal shapes, or one operand of one element
 * whose rank is at most the other's: no general broadcasting), Neg, Relu, MatMul (rank 2,
 * transpose_a / transpose_b) and Sum (any axes, keep_dims).
 *
 * A collective backend "testdev" for TESTDEV memory (f32 all-reduce of ranks in this
 * process): it checks that the core hands it the device's own buffers.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <floe/floe_plugin.h>

#define MAX_DEVICES 16
#define HEADER_BYTES 64
#define CANARY_ALIVE 0x7e57de7a11fe0001ull
#define CANARY_TAIL 0x7e57de7a7a110002ull
#define CANARY_FREED 0x7e57de7adead0003ull

static const FloeHostApi *host;

typedef struct Block {
  uint64_t canary;
  size_t size;
  struct Block *prev, *next;
} Block;
_Static_assert(sizeof(Block) <= HEADER_BYTES, "block header must fit before the data");

typedef struct Dev {
  int ordinal;
  uint64_t capacity;
  pthread_mutex_t mu;
  Block *live;
  uint64_t used;
  int64_t num_live, errors;
} Dev;

static unsigned char *data_of(Block *b) { return (unsigned char *)b + HEADER_BYTES; }

static void memory_error(Dev *d, const char *fmt, ...) {
  d->errors++;
  if (!host) return;
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  host->log(FLOE_LOG_ERROR, "testdev:%d: %s", d->ordinal, msg);
}

static floe_code td_get_props(void *state, FloeDeviceProps *p) {
  Dev *d = state;
  pthread_mutex_lock(&d->mu);
  int64_t live = d->num_live, errors = d->errors;
  pthread_mutex_unlock(&d->mu);
  snprintf(p->type, sizeof p->type, "TESTDEV");
  snprintf(p->description, sizeof p->description,
           "fake test device %d (made-up figures): %" PRId64 " live blocks, %" PRId64
           " memory errors",
           d->ordinal, live, errors);
  p->memory_bytes = d->capacity;
  p->peak_flops[FLOE_F32] = 1e9;
  p->memory_bandwidth = 10e9;
  p->host_to_device_bandwidth = 1e9;
  p->device_to_host_bandwidth = 1e9;
  p->peer_bandwidth = 2e9;
  p->flags = 0; /* not host memory */
  p->ordinal = d->ordinal;
  if (FLOE_HAS_FIELD(p, FloeDeviceProps, launch_overhead)) {
    p->vector_flops = 5e8;
    p->launch_overhead = 5e-6;
  }
  return FLOE_OK;
}

static floe_code td_allocate(void *state, size_t bytes, size_t alignment, void **ptr) {
  Dev *d = state;
  if (alignment > HEADER_BYTES || bytes > SIZE_MAX - HEADER_BYTES - 8) return FLOE_INVALID_ARGUMENT;
  pthread_mutex_lock(&d->mu);
  bool fits = d->used + bytes <= d->capacity;
  if (fits) d->used += bytes;
  pthread_mutex_unlock(&d->mu);
  if (!fits) return FLOE_RESOURCE_EXHAUSTED;
  void *p = NULL;
  if (posix_memalign(&p, HEADER_BYTES, HEADER_BYTES + bytes + 8) != 0) {
    pthread_mutex_lock(&d->mu);
    d->used -= bytes;
    pthread_mutex_unlock(&d->mu);
    return FLOE_NO_MEMORY;
  }
  Block *b = p;
  b->canary = CANARY_ALIVE;
  b->size = bytes;
  uint64_t tail = CANARY_TAIL;
  memcpy(data_of(b) + bytes, &tail, sizeof tail);
  pthread_mutex_lock(&d->mu);
  b->prev = NULL;
  b->next = d->live;
  if (d->live) d->live->prev = b;
  d->live = b;
  d->num_live++;
  pthread_mutex_unlock(&d->mu);
  *ptr = data_of(b);
  return FLOE_OK;
}

/* The live block of d whose data holds [p, p + n) (under d->mu); NULL when none does. */
static Block *find_block(Dev *d, const void *p, size_t n) {
  const unsigned char *q = p;
  for (Block *b = d->live; b; b = b->next)
    if (q >= data_of(b) && q <= data_of(b) + b->size && n <= (size_t)(data_of(b) + b->size - q))
      return b;
  return NULL;
}

static bool canaries_ok(Block *b) {
  uint64_t tail;
  memcpy(&tail, data_of(b) + b->size, sizeof tail);
  return b->canary == CANARY_ALIVE && tail == CANARY_TAIL;
}

static void td_deallocate(void *state, void *ptr, size_t bytes) {
  Dev *d = state;
  if (!ptr) return;
  pthread_mutex_lock(&d->mu);
  Block *b = NULL;
  for (Block *x = d->live; x; x = x->next)
    if (data_of(x) == ptr) b = x;
  if (!b) {
    memory_error(d, "deallocate(%p, %zu): not a live block of this device (double free, or "
                    "host / another device's memory)", ptr, bytes);
    pthread_mutex_unlock(&d->mu);
    return;
  }
  if (b->size != bytes)
    memory_error(d, "deallocate(%p): %zu bytes given, the block holds %zu", ptr, bytes, b->size);
  if (!canaries_ok(b))
    memory_error(d, "deallocate(%p): a canary around the %zu-byte block was overwritten (a "
                    "write out of bounds)", ptr, b->size);
  if (b->prev)
    b->prev->next = b->next;
  else
    d->live = b->next;
  if (b->next) b->next->prev = b->prev;
  d->num_live--;
  d->used -= b->size;
  pthread_mutex_unlock(&d->mu);
  b->canary = CANARY_FREED;
  free(b);
}

/* Checks that [p, p + n) lies in a live block of d. */
static floe_code check_range(Dev *d, const void *p, size_t n, const char *slot) {
  if (n == 0) return FLOE_OK;
  pthread_mutex_lock(&d->mu);
  Block *b = find_block(d, p, n);
  bool ok = b && canaries_ok(b);
  if (!ok)
    memory_error(d, "%s of %zu bytes at %p: %s", slot, n, p,
                 b ? "the block's canaries are broken" : "not inside a live block of this device");
  pthread_mutex_unlock(&d->mu);
  return ok ? FLOE_OK : FLOE_INVALID_ARGUMENT;
}

static floe_code td_copy_h2d(void *state, void *dst, const void *src, size_t n) {
  floe_code rc = check_range(state, dst, n, "copy_h2d");
  if (rc == FLOE_OK && n) memcpy(dst, src, n);
  return rc;
}

static floe_code td_copy_d2h(void *state, void *dst, const void *src, size_t n) {
  floe_code rc = check_range(state, src, n, "copy_d2h");
  if (rc == FLOE_OK && n) memcpy(dst, src, n);
  return rc;
}

/* Within one device. */
static floe_code td_copy_d2d(void *state, void *dst, const void *src, size_t n) {
  floe_code rc = check_range(state, src, n, "copy_d2d (source)");
  if (rc == FLOE_OK) rc = check_range(state, dst, n, "copy_d2d (destination)");
  if (rc == FLOE_OK && n) memmove(dst, src, n);
  return rc;
}

/* Every live device of the process, all runtimes' (the collective backend's checks). */
static pthread_mutex_t all_mu = PTHREAD_MUTEX_INITIALIZER;
static Dev *all_devs[64];

static void all_add(Dev *d) {
  pthread_mutex_lock(&all_mu);
  for (size_t i = 0; i < sizeof all_devs / sizeof *all_devs; i++)
    if (!all_devs[i]) {
      all_devs[i] = d;
      break;
    }
  pthread_mutex_unlock(&all_mu);
}

/* Leftover blocks at shutdown are the core's leak: reported, then freed with the device. */
static void td_destroy(void *state) {
  Dev *d = state;
  pthread_mutex_lock(&all_mu);
  for (size_t i = 0; i < sizeof all_devs / sizeof *all_devs; i++)
    if (all_devs[i] == d) all_devs[i] = NULL;
  pthread_mutex_unlock(&all_mu);
  if (d->num_live && host)
    host->log(FLOE_LOG_ERROR, "testdev:%d: %" PRId64 " blocks still allocated at shutdown",
              d->ordinal, d->num_live);
  for (Block *b = d->live, *next; b; b = next) {
    next = b->next;
    free(b);
  }
  pthread_mutex_destroy(&d->mu);
  free(d);
}

/* ---- kernels --------------------------------------------------------------------------- */

static const char *shape_str(const FloeTensor *t, char *buf, size_t len) {
  int rank = host->tensor_rank(t);
  const int64_t *dims = host->tensor_dims(t);
  size_t used = (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < rank && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s%" PRId64, i ? "," : "", dims[i]);
  if (used < len) snprintf(buf + used, len - used, "]");
  return buf;
}

static floe_code k_identity(void *state, FloeKernelContext *ctx) {
  (void)state;
  const FloeTensor *x = host->ctx_input(ctx, 0);
  return host->ctx_forward_input(ctx, 0, 0, host->tensor_rank(x), host->tensor_dims(x));
}

typedef float (*UnaryFn)(float);
static float f_neg(float v) { return -v; }
static float f_relu(float v) { return v > 0 ? v : 0; }

static floe_code unary(FloeKernelContext *ctx, UnaryFn f) {
  const FloeTensor *x = host->ctx_input(ctx, 0);
  FloeTensor *y;
  floe_code rc = host->ctx_allocate_output(ctx, 0, host->tensor_rank(x), host->tensor_dims(x), &y);
  if (rc != FLOE_OK) return rc;
  const float *a = host->tensor_data(x);
  float *o = host->tensor_data(y);
  for (int64_t i = 0, n = host->tensor_num_elements(x); i < n; i++) o[i] = f(a[i]);
  return FLOE_OK;
}
static floe_code k_neg(void *state, FloeKernelContext *ctx) {
  (void)state;
  return unary(ctx, f_neg);
}
static floe_code k_relu(void *state, FloeKernelContext *ctx) {
  (void)state;
  return unary(ctx, f_relu);
}

enum { OP_ADD, OP_SUB, OP_MUL };

static bool same_shape(const FloeTensor *a, const FloeTensor *b) {
  int r = host->tensor_rank(a);
  if (r != host->tensor_rank(b)) return false;
  return r == 0 ||
         memcmp(host->tensor_dims(a), host->tensor_dims(b), (size_t)r * sizeof(int64_t)) == 0;
}

/* Equal shapes, or one operand of one element and no higher rank (numpy broadcasting of a
 * scalar); anything else is refused with the shapes. */
static floe_code binary(FloeKernelContext *ctx, int op) {
  const FloeTensor *x = host->ctx_input(ctx, 0), *y = host->ctx_input(ctx, 1);
  int64_t nx = host->tensor_num_elements(x), ny = host->tensor_num_elements(y);
  int rx = host->tensor_rank(x), ry = host->tensor_rank(y);
  const FloeTensor *shape_of;
  if (same_shape(x, y))
    shape_of = x;
  else if (ny == 1 && ry <= rx)
    shape_of = x;
  else if (nx == 1 && rx <= ry)
    shape_of = y;
  else {
    char a[128], b[128];
    return host->ctx_set_error(ctx, FLOE_UNIMPLEMENTED,
                               "TESTDEV broadcasts only equal shapes or a one-element operand, "
                               "not %s and %s: place this node on another device",
                               shape_str(x, a, sizeof a), shape_str(y, b, sizeof b));
  }
  FloeTensor *z;
  floe_code rc = host->ctx_allocate_output(ctx, 0, host->tensor_rank(shape_of),
                                           host->tensor_dims(shape_of), &z);
  if (rc != FLOE_OK) return rc;
  const float *a = host->tensor_data(x), *b = host->tensor_data(y);
  float *o = host->tensor_data(z);
  int64_t n = host->tensor_num_elements(shape_of);
  for (int64_t i = 0; i < n; i++) {
    float u = a[nx == 1 ? 0 : i], v = b[ny == 1 ? 0 : i];
    o[i] = op == OP_ADD ? u + v : op == OP_SUB ? u - v : u * v;
  }
  return FLOE_OK;
}
static floe_code k_add(void *state, FloeKernelContext *ctx) {
  (void)state;
  return binary(ctx, OP_ADD);
}
static floe_code k_sub(void *state, FloeKernelContext *ctx) {
  (void)state;
  return binary(ctx, OP_SUB);
}
static floe_code k_mul(void *state, FloeKernelContext *ctx) {
  (void)state;
  return binary(ctx, OP_MUL);
}

static bool attr_flag(FloeKernelContext *ctx, const char *name) {
  int v = 0;
  return host->attr_bool(host->ctx_attrs(ctx), name, &v) == FLOE_OK && v;
}

/* c[M,N] = op(a) op(b); a stored [M,K] ([K,M] when ta), b stored [K,N] ([N,K] when tb). */
static floe_code k_matmul(void *state, FloeKernelContext *ctx) {
  (void)state;
  const FloeTensor *x = host->ctx_input(ctx, 0), *y = host->ctx_input(ctx, 1);
  bool ta = attr_flag(ctx, "transpose_a"), tb = attr_flag(ctx, "transpose_b");
  char sa[128], sb[128];
  if (host->tensor_rank(x) != 2 || host->tensor_rank(y) != 2)
    return host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                               "TESTDEV's MatMul takes two matrices, not %s and %s",
                               shape_str(x, sa, sizeof sa), shape_str(y, sb, sizeof sb));
  const int64_t *dx = host->tensor_dims(x), *dy = host->tensor_dims(y);
  int64_t m = ta ? dx[1] : dx[0], k = ta ? dx[0] : dx[1];
  int64_t ky = tb ? dy[1] : dy[0], n = tb ? dy[0] : dy[1];
  if (k != ky)
    return host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                               "MatMul of %s%s by %s%s: inner dimensions %" PRId64 " and %" PRId64
                               " differ",
                               shape_str(x, sa, sizeof sa), ta ? " (transposed)" : "",
                               shape_str(y, sb, sizeof sb), tb ? " (transposed)" : "", k, ky);
  int64_t od[2] = {m, n};
  FloeTensor *z;
  floe_code rc = host->ctx_allocate_output(ctx, 0, 2, od, &z);
  if (rc != FLOE_OK) return rc;
  const float *a = host->tensor_data(x), *b = host->tensor_data(y);
  float *c = host->tensor_data(z);
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double acc = 0;
      for (int64_t p = 0; p < k; p++)
        acc += (double)(ta ? a[p * m + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]);
      c[i * n + j] = (float)acc;
    }
  return FLOE_OK;
}

/* Marks the axes named by input 1 (i32 or i64, scalar or 1-D) in red[]. */
static floe_code read_axes(FloeKernelContext *ctx, const FloeTensor *x, bool *red) {
  const FloeTensor *ax = host->ctx_input(ctx, 1);
  int rank = host->tensor_rank(x);
  FloeDType dt = host->tensor_dtype(ax);
  char s[128];
  if ((dt != FLOE_I32 && dt != FLOE_I64) || host->tensor_rank(ax) > 1)
    return host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                               "axis must be an i32 or i64 scalar or vector, got %s %s",
                               host->dtype_name(dt), shape_str(ax, s, sizeof s));
  const void *p = host->tensor_data(ax);
  for (int64_t i = 0, n = host->tensor_num_elements(ax); i < n; i++) {
    int64_t a = dt == FLOE_I32 ? ((const int32_t *)p)[i] : ((const int64_t *)p)[i];
    if (a < -rank || a >= rank)
      return host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                 "axis %" PRId64 " is out of range for input of shape %s", a,
                                 shape_str(x, s, sizeof s));
    int d = (int)(a < 0 ? a + rank : a);
    if (red[d])
      return host->ctx_set_error(ctx, FLOE_INVALID_ARGUMENT,
                                 "axis %" PRId64 " is repeated (input shape %s)", a,
                                 shape_str(x, s, sizeof s));
    red[d] = true;
  }
  return FLOE_OK;
}

static floe_code k_sum(void *state, FloeKernelContext *ctx) {
  (void)state;
  const FloeTensor *x = host->ctx_input(ctx, 0);
  int rank = host->tensor_rank(x);
  const int64_t *dims = host->tensor_dims(x);
  bool red[FLOE_MAX_DIMS] = {false};
  floe_code rc = read_axes(ctx, x, red);
  if (rc != FLOE_OK) return rc;
  bool keep = attr_flag(ctx, "keep_dims");
  /* stride: of dim d in the output, 0 if reduced */
  int64_t od[FLOE_MAX_DIMS], stride[FLOE_MAX_DIMS];
  int orank = 0;
  for (int d = 0; d < rank; d++)
    if (!red[d] || keep) od[orank++] = red[d] ? 1 : dims[d];
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; d--) {
    stride[d] = red[d] ? 0 : s;
    if (!red[d]) s *= dims[d];
  }
  FloeTensor *y;
  if ((rc = host->ctx_allocate_output(ctx, 0, orank, od, &y)) != FLOE_OK) return rc;
  const float *a = host->tensor_data(x);
  float *o = host->tensor_data(y);
  int64_t on = host->tensor_num_elements(y), n = host->tensor_num_elements(x);
  double *acc = calloc(on ? (size_t)on : 1, sizeof *acc);
  if (!acc) return host->ctx_set_error(ctx, FLOE_NO_MEMORY, "out of memory summing");
  int64_t idx[FLOE_MAX_DIMS] = {0};
  for (int64_t i = 0; i < n; i++) {
    int64_t j = 0;
    for (int d = 0; d < rank; d++) j += idx[d] * stride[d];
    acc[j] += a[i];
    for (int d = rank - 1; d >= 0 && ++idx[d] == dims[d]; d--) idx[d] = 0;
  }
  for (int64_t j = 0; j < on; j++) o[j] = (float)acc[j];
  free(acc);
  return FLOE_OK;
}

/* ---- a collective backend for TESTDEV memory ------------------------------------------- */
/* "testdev" (device type "TESTDEV", f32 all-reduce only: any other operation is refused):
 * the ranks are devices of this process and meet in a table here. Each operation checks
 * that its buffers lie in live blocks of its rank's TESTDEV device, so a core that handed a
 * device backend host copies instead of the device's buffers fails the operation naming
 * the buffer. */

#define MEET_MAX_RANKS 16

typedef struct TdComm {
  char group[128];
  int rank, size, ordinal;
} TdComm;

typedef struct Meet {
  char group[128];
  uint64_t tag;
  size_t count;
  FloeReduceOp op;
  int arrived;
  const float *in[MEET_MAX_RANKS];
  float *out[MEET_MAX_RANKS];
  FloeCollectiveDoneFn done[MEET_MAX_RANKS];
  void *arg[MEET_MAX_RANKS];
  size_t counts[MEET_MAX_RANKS];
  struct Meet *next;
} Meet;

static pthread_mutex_t meet_mu = PTHREAD_MUTEX_INITIALIZER;
static Meet *meets;

/* Whether [p, p + n) lies in a live block of a TESTDEV:ordinal device. */
static bool on_testdev(int ordinal, const void *p, size_t n) {
  bool ok = false;
  pthread_mutex_lock(&all_mu);
  for (size_t i = 0; i < sizeof all_devs / sizeof *all_devs && !ok; i++) {
    Dev *d = all_devs[i];
    if (!d || d->ordinal != ordinal) continue;
    pthread_mutex_lock(&d->mu);
    Block *b = find_block(d, p, n);
    ok = b && canaries_ok(b);
    pthread_mutex_unlock(&d->mu);
  }
  pthread_mutex_unlock(&all_mu);
  return ok;
}

static floe_code tc_init(const FloeHostApi *h, void **ctx) {
  (void)h;
  *ctx = NULL;
  return FLOE_OK;
}

static void tc_finalize(void *ctx) { (void)ctx; }

static floe_code tc_comm_init(void *ctx, const FloeCollectiveGroup *g, void **comm, char *msg,
                              size_t len) {
  (void)ctx;
  const char *p = strstr(g->devices[g->rank], "TESTDEV:");
  if (!p || g->size > MEET_MAX_RANKS) {
    snprintf(msg, len, "testdev: %s is not a TESTDEV device, or more than %d ranks",
             g->devices[g->rank], MEET_MAX_RANKS);
    return FLOE_INVALID_ARGUMENT;
  }
  TdComm *c = calloc(1, sizeof *c);
  if (!c) return FLOE_NO_MEMORY;
  snprintf(c->group, sizeof c->group, "%s", g->name);
  c->rank = g->rank;
  c->size = g->size;
  c->ordinal = atoi(p + 8);
  *comm = c;
  return FLOE_OK;
}

static floe_code tc_all_reduce(void *comm, const void *in, void *out, size_t count, FloeDType dt,
                               FloeReduceOp op, uint64_t tag, FloeStream *s,
                               FloeCollectiveDoneFn done, void *arg) {
  (void)s;
  TdComm *c = comm;
  if (dt != FLOE_F32) return FLOE_UNIMPLEMENTED;
  size_t bytes = count * sizeof(float);
  if (!on_testdev(c->ordinal, in, bytes) || !on_testdev(c->ordinal, out, bytes)) {
    char msg[200];
    snprintf(msg, sizeof msg, "testdev: the buffers %p and %p of rank %d are not in TESTDEV:%d's "
             "memory", in, out, c->rank, c->ordinal);
    done(arg, FLOE_INVALID_ARGUMENT, msg);
    return FLOE_OK;
  }
  pthread_mutex_lock(&meet_mu);
  Meet *m = meets;
  while (m && !(m->tag == tag && strcmp(m->group, c->group) == 0)) m = m->next;
  if (!m) {
    if (!(m = calloc(1, sizeof *m))) {
      pthread_mutex_unlock(&meet_mu);
      return FLOE_NO_MEMORY;
    }
    snprintf(m->group, sizeof m->group, "%s", c->group);
    m->tag = tag;
    m->op = op;
    m->next = meets;
    meets = m;
  }
  m->in[c->rank] = in;
  m->out[c->rank] = out;
  m->done[c->rank] = done;
  m->arg[c->rank] = arg;
  m->counts[c->rank] = count;
  if (++m->arrived < c->size) {
    pthread_mutex_unlock(&meet_mu);
    return FLOE_OK;
  }
  for (Meet **p = &meets; *p; p = &(*p)->next)
    if (*p == m) {
      *p = m->next;
      break;
    }
  pthread_mutex_unlock(&meet_mu);
  /* Every rank is here: reduce into a scratch buffer, then write every output. */
  bool same = true;
  for (int r = 1; r < c->size; r++) same = same && m->counts[r] == m->counts[0];
  float *acc = same ? calloc(count ? count : 1, sizeof *acc) : NULL;
  if (acc) {
    for (size_t i = 0; i < count; i++) {
      float v = m->in[0][i];
      for (int r = 1; r < c->size; r++) {
        float x = m->in[r][i];
        if (op == FLOE_REDUCE_MAX) v = x > v ? x : v;
        else if (op == FLOE_REDUCE_MIN) v = x < v ? x : v;
        else if (op == FLOE_REDUCE_PROD) v *= x;
        else v += x;
      }
      acc[i] = op == FLOE_REDUCE_MEAN ? v / (float)c->size : v;
    }
    for (int r = 0; r < c->size; r++) memcpy(m->out[r], acc, count * sizeof *acc);
  }
  floe_code code = !same ? FLOE_INVALID_ARGUMENT : acc ? FLOE_OK : FLOE_NO_MEMORY;
  free(acc);
  for (int r = 0; r < c->size; r++)
    m->done[r](m->arg[r], code,
               same ? "testdev: out of memory" : "testdev: the ranks' counts differ");
  free(m);
  return FLOE_OK;
}

static floe_code tc_all_gather(void *comm, const void *in, void *out, size_t count, FloeDType dt,
                               uint64_t tag, FloeStream *s, FloeCollectiveDoneFn done, void *arg) {
  (void)comm, (void)in, (void)out, (void)count, (void)dt, (void)tag, (void)s, (void)done;
  (void)arg;
  return FLOE_UNIMPLEMENTED;
}

static floe_code tc_reduce_scatter(void *comm, const void *in, void *out, size_t count,
                                   FloeDType dt, FloeReduceOp op, uint64_t tag, FloeStream *s,
                                   FloeCollectiveDoneFn done, void *arg) {
  (void)op;
  return tc_all_gather(comm, in, out, count, dt, tag, s, done, arg);
}

static floe_code tc_broadcast(void *comm, void *buf, size_t count, FloeDType dt, int root,
                              uint64_t tag, FloeStream *s, FloeCollectiveDoneFn done, void *arg) {
  (void)root;
  return tc_all_gather(comm, buf, buf, count, dt, tag, s, done, arg);
}

static void tc_comm_free(void *comm) { free(comm); }

static floe_code register_collective(FloePluginRegistrar *reg) {
  if (!FLOE_HAS_FIELD(reg, FloePluginRegistrar, register_collective) || !reg->register_collective)
    return FLOE_OK;
  FloeCollectiveFns f;
  memset(&f, 0, sizeof f);
  f.struct_size = sizeof f;
  f.name = "testdev";
  f.device_type = "TESTDEV";
  f.dtypes = FLOE_DTYPE_BIT(FLOE_F32);
  f.init = tc_init;
  f.finalize = tc_finalize;
  f.comm_init = tc_comm_init;
  f.all_reduce = tc_all_reduce;
  f.all_gather = tc_all_gather;
  f.reduce_scatter = tc_reduce_scatter;
  f.broadcast = tc_broadcast;
  f.comm_free = tc_comm_free;
  return reg->register_collective(reg, &f);
}

static floe_code add_kernel(FloePluginRegistrar *reg, const char *op, bool f32_only,
                            floe_code (*compute)(void *, FloeKernelContext *)) {
  FloeTypeConstraint c = {"T", FLOE_DTYPE_BIT(FLOE_F32)};
  FloeKernelDef k;
  memset(&k, 0, sizeof k);
  k.struct_size = sizeof k;
  k.op = op;
  k.device_type = "TESTDEV";
  k.constraints = f32_only ? &c : NULL;
  k.num_constraints = f32_only ? 1 : 0;
  k.compute = compute;
  return reg->register_kernel(reg, &k);
}

/* A positive decimal of the environment, or dflt when unset; false when malformed. */
static bool env_u64(const char *name, uint64_t dflt, uint64_t max, uint64_t *out) {
  const char *v = getenv(name);
  if (!v || !*v) {
    *out = dflt;
    return true;
  }
  char *end;
  errno = 0;
  unsigned long long n = strtoull(v, &end, 10);
  if (errno || *end || n < 1 || n > max || v[0] == '-') return false;
  *out = n;
  return true;
}

FLOE_PLUGIN_EXPORT floe_code floe_plugin_init(const FloeHostApi *h, FloePluginRegistrar *reg) {
  floe_code rc = FLOE_PLUGIN_DECLARE(reg, "testdev", "1.0");
  if (rc != FLOE_OK) return rc;
  host = h;
  uint64_t n, capacity;
  if (!env_u64("FLOE_TESTDEV_DEVICES", 2, MAX_DEVICES, &n)) {
    reg->set_message(reg, "FLOE_TESTDEV_DEVICES=\"%s\" is not a device count: use 1..%d",
                     getenv("FLOE_TESTDEV_DEVICES"), MAX_DEVICES);
    return FLOE_INVALID_ARGUMENT;
  }
  if (!env_u64("FLOE_TESTDEV_MEMORY", 1ull << 30, UINT64_MAX, &capacity)) {
    reg->set_message(reg, "FLOE_TESTDEV_MEMORY=\"%s\" is not a byte count",
                     getenv("FLOE_TESTDEV_MEMORY"));
    return FLOE_INVALID_ARGUMENT;
  }
  /* Each runtime gets its own devices (state freed by destroy at its shutdown). */
  for (int i = 0; i < (int)n; i++) {
    Dev *dev = calloc(1, sizeof *dev);
    if (!dev) {
      reg->set_message(reg, "out of memory creating device %d", i);
      return FLOE_NO_MEMORY;
    }
    dev->ordinal = i;
    dev->capacity = capacity;
    pthread_mutex_init(&dev->mu, NULL);
    FloeDeviceFns d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.state = dev;
    d.get_props = td_get_props;
    d.allocate = td_allocate;
    d.deallocate = td_deallocate;
    d.copy_h2d = td_copy_h2d;
    d.copy_d2h = td_copy_d2h;
    d.copy_d2d = td_copy_d2d;
    d.destroy = td_destroy;
    if ((rc = reg->register_device(reg, &d)) != FLOE_OK) {
      td_destroy(dev);
      return rc;
    }
    all_add(dev);
  }
  static const struct {
    const char *op;
    bool f32_only;
    floe_code (*compute)(void *, FloeKernelContext *);
  } kernels[] = {
      {"Identity", false, k_identity}, {"Add", true, k_add},   {"Sub", true, k_sub},
      {"Mul", true, k_mul},            {"Neg", true, k_neg},   {"Relu", true, k_relu},
      {"MatMul", true, k_matmul},      {"Sum", true, k_sum},
  };
  for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++)
    if ((rc = add_kernel(reg, kernels[i].op, kernels[i].f32_only, kernels[i].compute)) != FLOE_OK)
      return rc;
  return register_collective(reg);
}
