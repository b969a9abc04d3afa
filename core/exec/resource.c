/* SPDX-License-Identifier: Apache-2.0 */
/* resource.c - the resource manager: a session's variables by (container, name), with
 * copy-on-write values.
 *
 * A variable's value is an ordinary reference-counted tensor. Reads (ReadVariableOp) hand
 * out the tensor itself, no copy; an update first makes the value exclusive, copying it
 * into a new buffer when anyone else still holds a reference to the tensor or its buffer,
 * so a tensor once read never changes under its reader.
 *
 * Locking: the manager's mutex guards its tables; each variable's mu guards its value.
 * A locking update keeps the variable `busy` (a flag under mu, not mu itself, because an
 * asynchronous kernel finishes on another thread) and floe__var_lock waits for it to
 * clear. Reset variables stay allocated, marked dead, until the manager is freed, so a
 * handle still travelling through a step never dangles.
 */
#include <stdlib.h>
#include <string.h>

#include "exec.h"

/* Variables sorted by (container, name): lookups by binary search, a container's
 * variables contiguous and sorted by name. */
typedef struct VarList {
  FloeVar **v;
  int n, cap;
} VarList;

/* Resource objects (queues, readers, TensorArrays, ...) sorted by serial: serials only grow,
 * so adding appends, and a handle finds its object by binary search. */
typedef struct ObjList {
  FloeResource **v;
  int n, cap;
} ObjList;

struct FloeResourceMgr {
  pthread_mutex_t mu; /* guards live, dead, objs and next_serial */
  VarList live;
  VarList dead;       /* reset: kept until the manager is freed */
  ObjList objs;       /* one reference each */
  int64_t next_serial;
  bool closed;        /* floe__resources_close_all ran: new objects start closed */
};

static void objs_close(FloeResourceMgr *m, const char *container, bool remove);

static bool var_is_dead(const FloeVar *v) { return __atomic_load_n(&v->dead, __ATOMIC_ACQUIRE); }

/* ---- variables ---- */

static void var_free(FloeVar *v) {
  if (!v) return;
  floe_tensor_release(v->value);
  pthread_cond_destroy(&v->cv);
  pthread_mutex_destroy(&v->mu);
  floe__free(v->container);
  floe__free(v->name);
  floe__free(v);
}

static FloeVar *var_new(const char *container, const char *name, FloeDType dtype,
                        const FloeShape *shape, FloeStatus *st) {
  FloeVar *v = floe__calloc(1, sizeof *v);
  if (!v) goto err_oom;
  v->container = floe__strdup(container);
  v->name = floe__strdup(name);
  if (!v->container || !v->name) goto err_free_strings;
  if (pthread_mutex_init(&v->mu, NULL) != 0) goto err_no_sync;
  if (pthread_cond_init(&v->cv, NULL) != 0) {
    pthread_mutex_destroy(&v->mu);
    goto err_no_sync;
  }
  atomic_init(&v->refs, 1);
  v->dtype = dtype;
  v->shape = shape ? *shape : floe_shape_unknown();
  return v;

err_no_sync:
  floe__free(v->container);
  floe__free(v->name);
  floe__free(v);
  floe_status_set(st, FLOE_RESOURCE_EXHAUSTED, "cannot create the mutex of variable '%s'", name);
  return NULL;
err_free_strings:
  floe__free(v->container);
  floe__free(v->name);
  floe__free(v);
err_oom:
  floe_status_set(st, FLOE_NO_MEMORY, "out of memory creating variable '%s'", name);
  return NULL;
}

void floe__var_lock(FloeVar *v) {
  pthread_mutex_lock(&v->mu);
  while (v->busy) pthread_cond_wait(&v->cv, &v->mu);
}

void floe__var_unlock(FloeVar *v) { pthread_mutex_unlock(&v->mu); }

static floe_code dead_error(const FloeVar *v, FloeStatus *st) {
  return floe_status_set(st, FLOE_ABORTED,
                         "variable '%s' was dropped by a reset of its container '%s' while a "
                         "step used it: run the step again",
                         v->name, v->container);
}

static floe_code uninit_error(const FloeVar *v, FloeStatus *st) {
  return floe_status_set(st, FLOE_FAILED_PRECONDITION,
                         "variable '%s' is not initialised: run its initializer ('%s/init' or "
                         "floe_variables_initializer) first",
                         v->name, v->name);
}

/* True when a declared (possibly partial) shape admits the other one. */
static bool shapes_compatible(const FloeShape *a, const FloeShape *b) {
  if (a->rank < 0 || b->rank < 0) return true;
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] >= 0 && b->dims[i] >= 0 && a->dims[i] != b->dims[i]) return false;
  return true;
}

/* Caller holds v->mu. A new reference to the value, or NULL with st set. */
static FloeTensor *read_locked(FloeVar *v, FloeStatus *st) {
  if (v->dead) {
    dead_error(v, st);
    return NULL;
  }
  if (!v->value) {
    uninit_error(v, st);
    return NULL;
  }
  floe_tensor_retain(v->value);
  return v->value;
}

/* Caller holds v->mu: installs t (a reference the variable takes over). Updaters counted
 * so far hold the old value, not t. */
static void swap_value_locked(FloeVar *v, FloeTensor *t) {
  FloeTensor *old = v->value;
  v->value = t;
  if (v->updaters > 0) pthread_cond_broadcast(&v->cv); /* locking updates may go on */
  v->updaters = 0;
  floe_tensor_release(old);
}

FloeTensor *floe__var_read(FloeVar *v, FloeStatus *st) {
  floe__var_lock(v);
  FloeTensor *t = read_locked(v, st);
  floe__var_unlock(v);
  return t;
}

floe_code floe__var_assign(FloeVar *v, FloeTensor *t, bool validate_shape, FloeStatus *st) {
  if (!t) return floe_status_set(st, FLOE_INVALID_ARGUMENT, "variable '%s': no value", v->name);
  if (t->dtype != v->dtype)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "variable '%s' is %s; cannot assign a %s value", v->name,
                           floe_dtype_name(v->dtype), floe_dtype_name(t->dtype));
  FloeShape have = floe_shape_make(t->rank, t->dims);
  if (validate_shape && !shapes_compatible(&v->shape, &have)) {
    char a[128], b[128];
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "variable '%s' has shape %s; cannot assign a value of shape %s "
                           "(validate_shape = false allows it)",
                           v->name, floe_shape_str(&v->shape, a, sizeof a),
                           floe_shape_str(&have, b, sizeof b));
  }
  floe__var_lock(v);
  if (v->dead) {
    floe__var_unlock(v);
    return dead_error(v, st);
  }
  floe_tensor_retain(t);
  swap_value_locked(v, t);
  floe__var_unlock(v);
  return FLOE_OK;
}

FloeTensor *floe__var_value_for_update_locked(FloeVar *v, FloeStatus *st) {
  if (v->dead) {
    dead_error(v, st);
    return NULL;
  }
  FloeTensor *t = v->value;
  if (!t) {
    uninit_error(v, st);
    return NULL;
  }
  /* The variable holds one reference; unlocked updaters hold one each and write in place
   * by design. Anyone else (a reader, a view of the buffer) must not see the update. */
  int others = atomic_load_explicit(&t->refs, memory_order_acquire) - 1 - v->updaters;
  bool shared = others > 0 ||
                (t->buf && atomic_load_explicit(&t->buf->refs, memory_order_acquire) > 1);
  if (!shared || t->nbytes == 0) return t;
  FloeDevice *dev = floe__tensor_device(t);
  FloeTensor *c = floe__tensor_alloc(dev, t->dtype, t->rank, t->dims, st);
  if (!c) {
    floe__status_prefix(st, "variable '%s': copying its value before an update", v->name);
    return NULL;
  }
  if (floe__device_copy(dev, (char *)c->buf->data + c->offset, dev,
                        (char *)t->buf->data + t->offset, t->nbytes, st) != FLOE_OK) {
    floe_tensor_release(c);
    floe__status_prefix(st, "variable '%s': copying its value before an update", v->name);
    return NULL;
  }
  swap_value_locked(v, c);
  return c;
}

/* True when memory of a (NULL: host) is not directly usable by kernels of b. */
static bool other_space(const FloeDevice *a, const FloeDevice *b) {
  if (a == b) return false;
  return !((!a || a->host_memory) && (!b || b->host_memory));
}

FloeTensor *floe__var_begin_update(FloeVar *v, FloeDevice *dev, bool lock, FloeStatus *st) {
  /* Like a reader-writer lock: a locking update also waits for unlocked (Hogwild) updaters
   * of the value to finish, and they wait for it. */
  pthread_mutex_lock(&v->mu);
  while (v->busy || (lock && v->updaters > 0)) pthread_cond_wait(&v->cv, &v->mu);
  FloeTensor *t = floe__var_value_for_update_locked(v, st);
  if (t && t->nbytes && other_space(floe__tensor_device(t), dev)) {
    /* The value lives where the update's kernel cannot write it: it moves there. */
    FloeTensor *moved = floe__tensor_to_device(t, dev, st);
    if (!moved) {
      floe__status_prefix(st, "variable '%s': moving its value to %s", v->name,
                          dev ? dev->short_name : "host");
      t = NULL;
    } else {
      swap_value_locked(v, moved);
      t = moved;
    }
  }
  if (t) {
    floe_tensor_retain(t);
    if (lock)
      v->busy = true;
    else
      v->updaters++;
  }
  floe__var_unlock(v);
  return t;
}

void floe__var_end_update(FloeVar *v, FloeTensor *value, bool lock) {
  pthread_mutex_lock(&v->mu);
  if (lock) {
    v->busy = false;
    pthread_cond_broadcast(&v->cv);
  } else if (value == v->value && v->updaters > 0) {
    /* Only if it still counts toward this value (see swap_value_locked). */
    if (--v->updaters == 0) pthread_cond_broadcast(&v->cv);
  }
  pthread_mutex_unlock(&v->mu);
  floe_tensor_release(value);
}

/* ---- handles ---- */

/* A handle holds a variable's address, or an object's serial with this bit set (never set
 * in a user-space address), so a stale or foreign object handle is an error, not a
 * dangling pointer. */
#define OBJ_TAG ((uintptr_t)1 << (sizeof(uintptr_t) * 8 - 1))

FloeTensor *floe__resource_handle_new(FloeVar *v, FloeStatus *st) {
  FloeTensor *h = floe__tensor_alloc(NULL, FLOE_RESOURCE, 0, NULL, st);
  if (!h) return NULL;
  memcpy((char *)h->buf->data + h->offset, &v, sizeof v);
  return h;
}

FloeVar *floe__resource_from_handle(const FloeTensor *handle, const char *what,
                                    FloeStatus *st) {
  if (!handle || handle->dtype != FLOE_RESOURCE || handle->rank != 0 ||
      handle->nbytes != sizeof(FloeVar *) || !floe__tensor_on_host(handle)) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT,
                    "%s: expected a resource handle (a scalar of dtype resource made by "
                    "VarHandleOp), got %s",
                    what, handle ? floe_dtype_name(handle->dtype) : "nothing");
    return NULL;
  }
  FloeVar *v;
  memcpy(&v, (const char *)handle->buf->data + handle->offset, sizeof v);
  if ((uintptr_t)v & OBJ_TAG) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT,
                    "%s: expected a variable's handle, got the handle of another kind of "
                    "resource (a queue, reader or TensorArray)",
                    what);
    return NULL;
  }
  if (!v) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT, "%s: the resource handle is empty", what);
    return NULL;
  }
  if (var_is_dead(v)) {
    dead_error(v, st);
    floe__status_prefix(st, "%s", what);
    return NULL;
  }
  return v;
}

/* ---- the manager ---- */

FloeResourceMgr *floe__resources_new(FloeStatus *st) {
  FloeResourceMgr *m = floe__calloc(1, sizeof *m);
  if (!m) {
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory creating a resource manager");
    return NULL;
  }
  if (pthread_mutex_init(&m->mu, NULL) != 0) {
    floe__free(m);
    floe_status_set(st, FLOE_RESOURCE_EXHAUSTED, "cannot create the resource manager's mutex");
    return NULL;
  }
  return m;
}

void floe__resources_free(FloeResourceMgr *m) {
  if (!m) return;
  for (int i = 0; i < m->objs.n; i++) floe__resource_release(m->objs.v[i]);
  floe__free(m->objs.v);
  for (int i = 0; i < m->live.n; i++) var_free(m->live.v[i]);
  for (int i = 0; i < m->dead.n; i++) var_free(m->dead.v[i]);
  floe__free(m->live.v);
  floe__free(m->dead.v);
  pthread_mutex_destroy(&m->mu);
  floe__free(m);
}

static int key_cmp(const char *ca, const char *na, const char *cb, const char *nb) {
  int c = strcmp(ca, cb);
  return c ? c : strcmp(na, nb);
}

/* Index of (container, name) in the live list, or -(insertion point + 1). */
static int live_find(const FloeResourceMgr *m, const char *container, const char *name) {
  int lo = 0, hi = m->live.n;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    const FloeVar *v = m->live.v[mid];
    int c = key_cmp(v->container, v->name, container, name);
    if (c == 0) return mid;
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return -(lo + 1);
}

static bool list_reserve(VarList *l, int n) {
  if (n <= l->cap) return true;
  int cap = l->cap ? 2 * l->cap : 16;
  while (cap < n) cap *= 2;
  FloeVar **v = floe__realloc(l->v, (size_t)cap * sizeof *v);
  if (!v) return false;
  l->v = v;
  l->cap = cap;
  return true;
}

FloeVar *floe__resources_lookup(FloeResourceMgr *m, const char *container, const char *name,
                                FloeDType dtype, const FloeShape *shape, FloeStatus *st) {
  if (!container) container = "";
  if (!name || !*name) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT, "a variable needs a name");
    return NULL;
  }
  FloeShape want = shape ? *shape : floe_shape_unknown();
  pthread_mutex_lock(&m->mu);
  FloeVar *v = NULL;
  int at = live_find(m, container, name);
  if (at >= 0) {
    v = m->live.v[at];
    if (v->dtype != dtype || !shapes_compatible(&v->shape, &want)) {
      char a[128], b[128];
      floe_status_set(st, FLOE_INVALID_ARGUMENT,
                      "variable '%s' (container '%s') exists as %s %s; asked for %s %s (give a "
                      "different variable another name or container)",
                      name, container, floe_dtype_name(v->dtype),
                      floe_shape_str(&v->shape, a, sizeof a), floe_dtype_name(dtype),
                      floe_shape_str(&want, b, sizeof b));
      v = NULL;
    }
    goto out;
  }
  if (!list_reserve(&m->live, m->live.n + 1)) {
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory creating variable '%s'", name);
    goto out;
  }
  v = var_new(container, name, dtype, &want, st);
  if (!v) goto out;
  int pos = -at - 1;
  memmove(&m->live.v[pos + 1], &m->live.v[pos], (size_t)(m->live.n - pos) * sizeof *m->live.v);
  m->live.v[pos] = v;
  m->live.n++;
out:
  pthread_mutex_unlock(&m->mu);
  return v;
}

/* [*first, *end) of container's variables in the live list. */
static void container_range(const FloeResourceMgr *m, const char *container, int *first,
                            int *end) {
  int lo = 0, hi = m->live.n;
  while (lo < hi) { /* first with container >= the one asked */
    int mid = lo + (hi - lo) / 2;
    if (strcmp(m->live.v[mid]->container, container) < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  int e = lo;
  while (e < m->live.n && strcmp(m->live.v[e]->container, container) == 0) e++;
  *first = lo;
  *end = e;
}

floe_code floe__resources_reset(FloeResourceMgr *m, const char *container, FloeStatus *st) {
  if (!container) container = "";
  pthread_mutex_lock(&m->mu);
  int first, end;
  container_range(m, container, &first, &end);
  int k = end - first;
  if (k > 0 && !list_reserve(&m->dead, m->dead.n + k)) {
    pthread_mutex_unlock(&m->mu);
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory resetting container '%s'",
                           container);
  }
  for (int i = first; i < end; i++) {
    FloeVar *v = m->live.v[i];
    /* No wait for a busy update: it holds its own reference to the value and finishes
     * on its own; waiting here, under the manager's lock, could stall every lookup. */
    pthread_mutex_lock(&v->mu);
    __atomic_store_n(&v->dead, true, __ATOMIC_RELEASE);
    swap_value_locked(v, NULL);
    pthread_mutex_unlock(&v->mu);
    m->dead.v[m->dead.n++] = v;
  }
  /* k == 0 may mean an empty list, whose array is still NULL (memmove's arguments must not be). */
  if (k > 0)
    memmove(&m->live.v[first], &m->live.v[end], (size_t)(m->live.n - end) * sizeof *m->live.v);
  m->live.n -= k;
  pthread_mutex_unlock(&m->mu);
  objs_close(m, container, true);
  return FLOE_OK;
}

floe_code floe__resources_list(FloeResourceMgr *m, const char *container, FloeVar ***out,
                               int *n, FloeStatus *st) {
  if (!container) container = "";
  *out = NULL;
  *n = 0;
  pthread_mutex_lock(&m->mu);
  int first, end;
  container_range(m, container, &first, &end);
  int k = end - first;
  FloeVar **arr = floe__malloc((size_t)(k ? k : 1) * sizeof *arr);
  if (!arr) {
    pthread_mutex_unlock(&m->mu);
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory listing the variables of '%s'",
                           container);
  }
  /* Sorted by (container, name): the container's run is sorted by name. */
  if (k > 0) memcpy(arr, &m->live.v[first], (size_t)k * sizeof *arr);
  pthread_mutex_unlock(&m->mu);
  *out = arr;
  *n = k;
  return FLOE_OK;
}

/* ---- resource objects ---- */

void floe__resource_init(FloeResource *r, const FloeResourceOps *ops) {
  r->ops = ops;
  atomic_init(&r->refs, 1);
  r->serial = 0;
  r->container = r->name = NULL;
}

void floe__resource_retain(FloeResource *r) {
  if (r) atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
}

void floe__resource_release(FloeResource *r) {
  if (!r || atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) != 1) return;
  char *container = r->container, *name = r->name;
  r->ops->destroy(r);
  floe__free(container);
  floe__free(name);
}

static bool obj_reserve(ObjList *l, int n) {
  if (n <= l->cap) return true;
  int cap = l->cap ? 2 * l->cap : 16;
  while (cap < n) cap *= 2;
  FloeResource **v = floe__realloc(l->v, (size_t)cap * sizeof *v);
  if (!v) return false;
  l->v = v;
  l->cap = cap;
  return true;
}

/* Index of serial in objs, or -1. Caller holds m->mu. */
static int obj_find(const FloeResourceMgr *m, int64_t serial) {
  int lo = 0, hi = m->objs.n;
  while (lo < hi) {
    int mid = lo + (hi - lo) / 2;
    int64_t s = m->objs.v[mid]->serial;
    if (s == serial) return mid;
    if (s < serial)
      lo = mid + 1;
    else
      hi = mid;
  }
  return -1;
}

/* Appends r (taking over one reference) with a new serial. Caller holds m->mu. */
static bool obj_add_locked(FloeResourceMgr *m, FloeResource *r) {
  if (!obj_reserve(&m->objs, m->objs.n + 1)) return false;
  r->serial = ++m->next_serial;
  m->objs.v[m->objs.n++] = r;
  return true;
}

static void obj_close(FloeResource *r) {
  if (r->ops->close) r->ops->close(r);
}

FloeResource *floe__resources_find_or_add(FloeResourceMgr *m, const char *container,
                                          const char *name, const FloeResourceOps *ops,
                                          FloeResource *(*make)(void *arg, FloeStatus *st),
                                          void *arg, FloeStatus *st) {
  if (!container) container = "";
  if (!name || !*name) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT, "a shared %s needs a name", ops->kind);
    return NULL;
  }
  pthread_mutex_lock(&m->mu);
  FloeResource *r = NULL;
  for (int i = 0; i < m->objs.n; i++) {
    FloeResource *o = m->objs.v[i];
    if (!o->name || strcmp(o->name, name) != 0 || strcmp(o->container, container) != 0)
      continue;
    if (o->ops != ops) {
      floe_status_set(st, FLOE_INVALID_ARGUMENT,
                      "resource '%s' (container '%s') exists as a %s; asked for a %s (give "
                      "one of them another shared_name)",
                      name, container, o->ops->kind, ops->kind);
    } else {
      r = o;
      floe__resource_retain(r);
    }
    goto out;
  }
  r = make(arg, st);
  if (!r) goto out;
  r->container = floe__strdup(container);
  r->name = floe__strdup(name);
  if (!r->container || !r->name || !obj_add_locked(m, r)) {
    floe__resource_release(r);
    r = NULL;
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory creating %s '%s'", ops->kind, name);
    goto out;
  }
  if (m->closed) obj_close(r);
  floe__resource_retain(r); /* the caller's */
out:
  pthread_mutex_unlock(&m->mu);
  return r;
}

floe_code floe__resources_add_anonymous(FloeResourceMgr *m, FloeResource *r, int64_t *serial,
                                        FloeStatus *st) {
  pthread_mutex_lock(&m->mu);
  bool ok = obj_add_locked(m, r);
  if (ok) {
    floe__resource_retain(r);
    *serial = r->serial;
  }
  bool closed = m->closed;
  pthread_mutex_unlock(&m->mu);
  if (!ok)
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory registering a %s", r->ops->kind);
  if (closed) obj_close(r);
  return FLOE_OK;
}

void floe__resources_remove(FloeResourceMgr *m, int64_t serial) {
  pthread_mutex_lock(&m->mu);
  int at = obj_find(m, serial);
  FloeResource *r = NULL;
  if (at >= 0) {
    r = m->objs.v[at];
    memmove(&m->objs.v[at], &m->objs.v[at + 1], (size_t)(m->objs.n - at - 1) * sizeof *m->objs.v);
    m->objs.n--;
  }
  pthread_mutex_unlock(&m->mu);
  if (!r) return;
  obj_close(r); /* wakes whoever still waits on it; they hold their own references */
  floe__resource_release(r);
}

/* Closes the objects of container (NULL: all of them, and later ones start closed), and
 * drops them from m when remove. Close runs outside the manager's lock. */
static void objs_close(FloeResourceMgr *m, const char *container, bool remove) {
  pthread_mutex_lock(&m->mu);
  if (!container) m->closed = true;
  FloeResource **hit = floe__malloc((size_t)(m->objs.n ? m->objs.n : 1) * sizeof *hit);
  int k = 0, kept = 0;
  for (int i = 0; i < m->objs.n; i++) {
    FloeResource *r = m->objs.v[i];
    bool match = !container || (r->container && strcmp(r->container, container) == 0);
    if (match && !hit) {
      obj_close(r); /* out of memory for the list: close takes only the object's own lock */
      if (remove) {
        floe__resource_release(r);
        continue;
      }
    } else if (match) {
      if (!remove) floe__resource_retain(r);
      hit[k++] = r;
      if (remove) continue;
    }
    m->objs.v[kept++] = r;
  }
  m->objs.n = kept;
  pthread_mutex_unlock(&m->mu);
  for (int i = 0; i < k; i++) {
    obj_close(hit[i]);
    floe__resource_release(hit[i]);
  }
  floe__free(hit);
}

void floe__resources_close_all(FloeResourceMgr *m) { objs_close(m, NULL, false); }

FloeTensor *floe__resource_obj_handle(const FloeResource *r, FloeStatus *st) {
  FloeTensor *h = floe__tensor_alloc(NULL, FLOE_RESOURCE, 0, NULL, st);
  if (!h) return NULL;
  uintptr_t v = (uintptr_t)r->serial | OBJ_TAG;
  memcpy((char *)h->buf->data + h->offset, &v, sizeof v);
  return h;
}

bool floe__resource_is_obj_handle(const FloeTensor *t) {
  if (!t || t->dtype != FLOE_RESOURCE || t->rank != 0 || t->nbytes != sizeof(uintptr_t) ||
      !floe__tensor_on_host(t))
    return false;
  uintptr_t v;
  memcpy(&v, (const char *)t->buf->data + t->offset, sizeof v);
  return (v & OBJ_TAG) != 0;
}

FloeResource *floe__resources_from_handle(FloeResourceMgr *m, const FloeTensor *handle,
                                          const FloeResourceOps *want, const char *what,
                                          FloeStatus *st) {
  if (!handle || handle->dtype != FLOE_RESOURCE || handle->rank != 0 ||
      handle->nbytes != sizeof(uintptr_t) || !floe__tensor_on_host(handle)) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT,
                    "%s: expected a %s handle (a scalar of dtype resource), got %s", what,
                    want->kind, handle ? floe_dtype_name(handle->dtype) : "nothing");
    return NULL;
  }
  uintptr_t v;
  memcpy(&v, (const char *)handle->buf->data + handle->offset, sizeof v);
  if (!(v & OBJ_TAG)) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT, "%s: expected a %s handle, got a %s", what,
                    want->kind, v ? "variable's handle" : "empty handle");
    return NULL;
  }
  if (!m) {
    floe_status_set(st, FLOE_FAILED_PRECONDITION,
                    "%s: a %s lives in a session's resource manager, and this step has none",
                    what, want->kind);
    return NULL;
  }
  int64_t serial = (int64_t)(v & ~OBJ_TAG);
  pthread_mutex_lock(&m->mu);
  int at = obj_find(m, serial);
  FloeResource *r = at >= 0 ? m->objs.v[at] : NULL;
  if (r && r->ops == want) floe__resource_retain(r);
  pthread_mutex_unlock(&m->mu);
  if (!r) {
    floe_status_set(st, FLOE_FAILED_PRECONDITION,
                    "%s: the %s this handle named no longer exists (it belonged to a step "
                    "that ended, a reset container or another session)",
                    what, want->kind);
    return NULL;
  }
  if (r->ops != want) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT, "%s: expected a %s handle, got a %s's", what,
                    want->kind, r->ops->kind);
    return NULL;
  }
  return r;
}
