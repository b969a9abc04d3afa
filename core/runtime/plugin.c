/* SPDX-License-Identifier: Apache-2.0 */
/* plugin.c - plugin discovery, loading and the registrar (the ABI rules of floe_plugin.h).
 *
 * Discovery walks FLOE_PLUGIN_PATH (or FloeRuntimeOptions.plugin_path) alone when it is set;
 * otherwise the plugin folder beside libfloe itself (dirname of libfloe.so + "/floe/<ABI major>",
 * found with dladdr, so a copied tree works without environment variables), for files named
 * floe-*.so. Each file gets a record in rt->plugins, in discovery
 * order, whatever happens to it. A plugin's registrations are staged in a Staging and moved
 * into the runtime only when its init returned FLOE_OK with a matching major, so a failing
 * plugin leaves nothing behind. Handles are never dlclose()d: code of a plugin may still be
 * referenced (op shape functions, kernels of another runtime) until the process exits.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dladdr */
#endif
#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime.h"

#define PLUGIN_PREFIX "floe-"
#define PLUGIN_SUFFIX ".so"
#define PLUGIN_STR_(x) #x
#define PLUGIN_STR(x) PLUGIN_STR_(x)
/* The plugin folder relative to libfloe's own folder: one per ABI major, so plugins of an
 * older major installed beside it are never even opened. */
#define PLUGIN_SUBDIR "floe/" PLUGIN_STR(FLOE_ABI_MAJOR)

/* Smallest struct_size accepted for each registered struct: everything up to its last
 * required field (fields after it may be absent in a plugin built against an older minor). */
#define FIELD_END(Type, field) (offsetof(Type, field) + sizeof(((Type *)0)->field))
#define MIN_INFO_SIZE FIELD_END(FloePluginInfo, abi_minor)
#define MIN_DEVICE_SIZE FIELD_END(FloeDeviceFns, copy_d2d)
#define MIN_KERNEL_SIZE FIELD_END(FloeKernelDef, compute)
#define MIN_OP_SIZE FIELD_END(FloeOpDef, flags)
#define MIN_TRANSPORT_SIZE FIELD_END(FloeTransportFns, close_listen)

/* Registrations of one plugin during its init (reg->core). */
typedef struct Staging {
  FloeRuntime *rt;
  FloePlugin *plugin;
  bool declared;
  bool mismatch;           /* declared another major */
  FloePlugin *dup_of;      /* an earlier plugin declared the same name */
  bool oom;                /* the core ran out of memory while staging */
  char *reg_error;         /* first rejected registration, owned */
  char *message;           /* set_message, owned */
  FloeDevice **devices;
  int num_devices;
  FloeKernelReg **kernels;
  int num_kernels;
  FloeOpDef *ops;          /* deep copies, strings owned */
  int num_ops;
  FloeTransportReg **transports;
  int num_transports;
  FloeGradientDef *grads;  /* deep copies (ABI 1.2), registered after the ops at commit */
  int num_grads;
  void (*shutdown)(void *);
  void *shutdown_arg;
} Staging;

/* Resize *arr to n elements of size elem; false (and *arr untouched) when out of memory. */
static bool reserve(void **arr, int n, size_t elem) {
  void *p = floe__realloc(*arr, (size_t)n * elem);
  if (!p) return false;
  *arr = p;
  return true;
}

/* Room for one more after the n present. */
static bool grow(void **arr, int n, size_t elem) { return reserve(arr, n + 1, elem); }

static void kernel_reg_free(FloeKernelReg *k) {
  if (!k) return;
  for (size_t i = 0; i < k->num_constraints; i++) floe__free((char *)k->constraints[i].attr);
  floe__free(k->constraints);
  floe__free(k->op);
  floe__free(k->device_type);
  floe__free(k);
}

static void transport_reg_free(FloeTransportReg *t) {
  if (!t) return;
  floe__free(t->name);
  floe__free(t);
}

/* v may be partly filled (NULL entries) or NULL after a failed copy. */
static void string_array_free(const char *const *v, size_t n) {
  if (!v) return;
  for (size_t i = 0; i < n; i++) floe__free((char *)v[i]);
  floe__free((void *)v);
}

static void op_copy_free(FloeOpDef *d) {
  floe__free((char *)d->name);
  string_array_free(d->inputs, d->num_inputs);
  string_array_free(d->outputs, d->num_outputs);
  string_array_free(d->attrs, d->num_attrs);
  floe__free((char *)d->doc);
}

static void grad_copy_free(FloeGradientDef *d) {
  floe__free((char *)d->op);
  floe__free((char *)d->grad_op);
  string_array_free(d->grad_inputs, d->num_grad_inputs);
  floe__free((void *)d->input_grads);
  string_array_free(d->copy_attrs, d->num_copy_attrs);
}

/* Free what is still staged. `initialised`: the plugin's init succeeded, so its shutdown
 * hook and device destroy slots release what it made for these registrations. */
static void staging_discard(Staging *s, bool initialised) {
  if (initialised && s->shutdown) s->shutdown(s->shutdown_arg);
  for (int i = 0; i < s->num_devices; i++) {
    if (initialised && s->devices[i]->fns.destroy) s->devices[i]->fns.destroy(s->devices[i]->fns.state);
    floe__free(s->devices[i]);
  }
  for (int i = 0; i < s->num_kernels; i++) kernel_reg_free(s->kernels[i]);
  for (int i = 0; i < s->num_ops; i++) op_copy_free(&s->ops[i]);
  for (int i = 0; i < s->num_transports; i++) transport_reg_free(s->transports[i]);
  for (int i = 0; i < s->num_grads; i++) grad_copy_free(&s->grads[i]);
  floe__free(s->grads);
  floe__free(s->devices);
  floe__free(s->kernels);
  floe__free(s->ops);
  floe__free(s->transports);
  floe__free(s->reg_error);
  floe__free(s->message);
  memset(s, 0, sizeof *s);
}

/* Record why a registration was refused (the first reason is kept for the report) and
 * return code to the plugin. */
static floe_code reg_fail(Staging *s, floe_code code, const char *fmt, ...) FLOE__PRINTF(3, 4);
static floe_code reg_fail(Staging *s, floe_code code, const char *fmt, ...) {
  if (s->reg_error) return code;
  va_list ap;
  va_start(ap, fmt);
  s->reg_error = floe__vasprintf(fmt, ap);
  va_end(ap);
  if (!s->reg_error) {
    s->oom = true;
    return FLOE_NO_MEMORY;
  }
  return code;
}

static floe_code reg_oom(Staging *s) {
  s->oom = true;
  return FLOE_NO_MEMORY;
}

/* Registrations are only accepted after a successful declare. */
static floe_code reg_gate(Staging *s, const char *what) {
  if (s->mismatch) return FLOE_ABI_MISMATCH;
  if (s->dup_of) return FLOE_ALREADY_EXISTS;
  if (!s->declared)
    return reg_fail(s, FLOE_FAILED_PRECONDITION, "%s called before reg->declare", what);
  return FLOE_OK;
}

/* Device types and plugin names end up in device names and FLOE_PLUGINS lists. */
static bool valid_token(const char *s, size_t max, const char *extra) {
  if (!s || !*s || strlen(s) >= max) return false;
  for (const char *c = s; *c; c++)
    if (!isalnum((unsigned char)*c) && !strchr(extra, *c)) return false;
  return true;
}

static char *strdup_upper(const char *s) {
  char *d = floe__strdup(s);
  if (d)
    for (char *c = d; *c; c++) *c = (char)toupper((unsigned char)*c);
  return d;
}

static floe_code reg_declare(FloePluginRegistrar *reg, const FloePluginInfo *info) {
  Staging *s = reg->core;
  FloePlugin *p = s->plugin;
  if (s->declared || s->mismatch)
    return reg_fail(s, FLOE_FAILED_PRECONDITION, "reg->declare called twice");
  if (!info || info->struct_size < FIELD_END(FloePluginInfo, abi_major))
    return reg_fail(s, FLOE_INVALID_ARGUMENT,
                    "reg->declare: FloePluginInfo is NULL or its struct_size %zu is too small",
                    info ? info->struct_size : (size_t)0);
  p->report.abi_major = info->abi_major;
  if (info->abi_major != FLOE_ABI_MAJOR) {
    /* Nothing else of a foreign major's struct can be trusted. */
    p->report.abi_minor = info->struct_size >= MIN_INFO_SIZE ? info->abi_minor : 0;
    s->mismatch = true;
    return FLOE_ABI_MISMATCH;
  }
  if (info->struct_size < MIN_INFO_SIZE)
    return reg_fail(s, FLOE_INVALID_ARGUMENT,
                    "reg->declare: FloePluginInfo.struct_size %zu is smaller than ABI 1.0's %zu",
                    info->struct_size, (size_t)MIN_INFO_SIZE);
  if (!valid_token(info->name, 64, "-_."))
    return reg_fail(s, FLOE_INVALID_ARGUMENT,
                    "reg->declare: plugin name \"%s\" must be 1-63 letters, digits, '-', '_' or '.'",
                    info->name ? info->name : "(null)");
  p->report.abi_minor = info->abi_minor;
  const uint32_t core_minor = FLOE_ABI_MINOR;
  p->report.negotiated_minor = info->abi_minor < core_minor ? info->abi_minor : core_minor;
  char *name = floe__strdup(info->name);
  char *version = floe__strdup(info->version ? info->version : "");
  if (!name || !version) {
    floe__free(name);
    floe__free(version);
    return reg_oom(s);
  }
  floe__free(p->name);
  floe__free(p->version);
  p->name = name;
  p->version = version;
  p->report.name = p->name;
  p->report.version = p->version;
  for (int i = 0; i < s->rt->num_plugins; i++) {
    FloePlugin *q = s->rt->plugins[i];
    if (q != p && (q->report.state == FLOE_PLUGIN_LOADED || q->report.state == FLOE_PLUGIN_UNAVAILABLE) &&
        strcmp(q->name, name) == 0) {
      s->dup_of = q;
      return FLOE_ALREADY_EXISTS;
    }
  }
  s->declared = true;
  return FLOE_OK;
}

/* The nine stream and event slots come as a group. */
static const char *stream_group_missing(const FloeDeviceFns *f) {
  const struct {
    const char *name;
    bool set;
  } slots[] = {
      {"stream_create", f->stream_create != NULL},   {"stream_destroy", f->stream_destroy != NULL},
      {"stream_synchronize", f->stream_synchronize != NULL}, {"event_create", f->event_create != NULL},
      {"event_destroy", f->event_destroy != NULL},   {"event_record", f->event_record != NULL},
      {"stream_wait_event", f->stream_wait_event != NULL}, {"event_query", f->event_query != NULL},
      {"event_synchronize", f->event_synchronize != NULL},
  };
  int set = 0;
  for (size_t i = 0; i < FLOE__ARRAY_LEN(slots); i++) set += slots[i].set;
  if (set == 0 || set == (int)FLOE__ARRAY_LEN(slots)) return NULL;
  for (size_t i = 0; i < FLOE__ARRAY_LEN(slots); i++)
    if (!slots[i].set) return slots[i].name;
  return NULL;
}

static floe_code reg_device(FloePluginRegistrar *reg, const FloeDeviceFns *dev) {
  Staging *s = reg->core;
  floe_code rc = reg_gate(s, "register_device");
  if (rc != FLOE_OK) return rc;
  if (!dev || dev->struct_size < MIN_DEVICE_SIZE)
    return reg_fail(s, FLOE_INVALID_ARGUMENT,
                    "register_device: FloeDeviceFns is NULL or its struct_size %zu is smaller than "
                    "ABI 1.0's required slots (%zu bytes)",
                    dev ? dev->struct_size : (size_t)0, (size_t)MIN_DEVICE_SIZE);
  FloeDevice *d = floe__calloc(1, sizeof *d);
  if (!d) return reg_oom(s);
  /* Zero-extended copy: slots beyond the plugin's struct_size read as NULL. */
  memcpy(&d->fns, dev, dev->struct_size < sizeof d->fns ? dev->struct_size : sizeof d->fns);
  d->fns.struct_size = sizeof d->fns;
  const struct {
    const char *name;
    bool set;
  } required[] = {
      {"get_props", d->fns.get_props != NULL}, {"allocate", d->fns.allocate != NULL},
      {"deallocate", d->fns.deallocate != NULL}, {"copy_h2d", d->fns.copy_h2d != NULL},
      {"copy_d2h", d->fns.copy_d2h != NULL},   {"copy_d2d", d->fns.copy_d2d != NULL},
  };
  for (size_t i = 0; i < FLOE__ARRAY_LEN(required); i++)
    if (!required[i].set) {
      rc = reg_fail(s, FLOE_INVALID_ARGUMENT, "register_device: required slot %s is NULL",
                    required[i].name);
      goto err_free_dev;
    }
  const char *missing = stream_group_missing(&d->fns);
  if (missing) {
    rc = reg_fail(s, FLOE_INVALID_ARGUMENT,
                  "register_device: stream and event slots are optional as a group, but %s is "
                  "NULL while others are set",
                  missing);
    goto err_free_dev;
  }
  d->props.struct_size = sizeof d->props;
  rc = d->fns.get_props(d->fns.state, &d->props);
  if (rc != FLOE_OK) {
    rc = reg_fail(s, rc, "register_device: get_props failed (%s)", floe_code_name(rc));
    goto err_free_dev;
  }
  d->props.struct_size = sizeof d->props;
  d->props.type[sizeof d->props.type - 1] = '\0';
  d->props.description[sizeof d->props.description - 1] = '\0';
  if (!valid_token(d->props.type, sizeof d->props.type, "_") || !isalpha((unsigned char)d->props.type[0])) {
    rc = reg_fail(s, FLOE_INVALID_ARGUMENT,
                  "register_device: device type \"%s\" must start with a letter and hold only "
                  "letters, digits and '_'",
                  d->props.type);
    goto err_free_dev;
  }
  for (char *c = d->props.type; *c; c++) *c = (char)toupper((unsigned char)*c);
  d->host_memory = (d->props.flags & FLOE_DEVICE_HOST_MEMORY) != 0;
  if (!grow((void **)&s->devices, s->num_devices, sizeof *s->devices)) {
    rc = reg_oom(s);
    goto err_free_dev;
  }
  s->devices[s->num_devices++] = d;
  return FLOE_OK;

err_free_dev:
  floe__free(d);
  return rc;
}

static const FloeOpDef *staged_op(const Staging *s, const char *name) {
  for (int i = 0; i < s->num_ops; i++)
    if (strcmp(s->ops[i].name, name) == 0) return &s->ops[i];
  return NULL;
}

/* Checks a constraint against the op when its definition is already parsed (standard ops,
 * ops of earlier plugins); a staged op is checked by the kernel matcher only. */
static floe_code check_constraint(Staging *s, const FloeKernelDef *def, const FloeOpInfo *info,
                                  const FloeTypeConstraint *c) {
  if (!c->attr)
    return reg_fail(s, FLOE_INVALID_ARGUMENT, "register_kernel %s/%s: a constraint has a NULL attr",
                    def->op, def->device_type);
  if (c->dtypes == 0)
    return reg_fail(s, FLOE_INVALID_ARGUMENT,
                    "register_kernel %s/%s: the constraint on %s allows no dtype (empty mask)",
                    def->op, def->device_type, c->attr);
  if (!info) return FLOE_OK;
  const FloeAttrDef *ad = floe__op_attr(info, c->attr);
  if (!ad)
    return reg_fail(s, FLOE_INVALID_ARGUMENT,
                    "register_kernel %s/%s: op %s has no attribute '%s' to constrain", def->op,
                    def->device_type, def->op, c->attr);
  if (ad->kind != FLOE_ATTR_TYPE && ad->kind != FLOE_ATTR_TYPE_LIST)
    return reg_fail(s, FLOE_INVALID_ARGUMENT,
                    "register_kernel %s/%s: attribute '%s' of op %s is a %s, not a type or "
                    "list(type)",
                    def->op, def->device_type, c->attr, def->op, floe__attr_kind_name(ad->kind));
  return FLOE_OK;
}

static floe_code reg_kernel(FloePluginRegistrar *reg, const FloeKernelDef *kernel) {
  Staging *s = reg->core;
  floe_code rc = reg_gate(s, "register_kernel");
  if (rc != FLOE_OK) return rc;
  if (!kernel || kernel->struct_size < MIN_KERNEL_SIZE)
    return reg_fail(s, FLOE_INVALID_ARGUMENT,
                    "register_kernel: FloeKernelDef is NULL or its struct_size %zu is smaller than "
                    "ABI 1.0's required fields (%zu bytes)",
                    kernel ? kernel->struct_size : (size_t)0, (size_t)MIN_KERNEL_SIZE);
  FloeKernelDef def;
  memset(&def, 0, sizeof def);
  memcpy(&def, kernel, kernel->struct_size < sizeof def ? kernel->struct_size : sizeof def);
  def.struct_size = sizeof def;
  if (!def.op || !*def.op) return reg_fail(s, FLOE_INVALID_ARGUMENT, "register_kernel: op is NULL or empty");
  if (!valid_token(def.device_type, sizeof(((FloeDeviceProps *)0)->type), "_"))
    return reg_fail(s, FLOE_INVALID_ARGUMENT,
                    "register_kernel %s: device type \"%s\" must be letters, digits and '_'", def.op,
                    def.device_type ? def.device_type : "(null)");
  const FloeOpInfo *info = floe__op_lookup(def.op);
  if (!info && !staged_op(s, def.op))
    return reg_fail(s, FLOE_NOT_FOUND,
                    "register_kernel %s/%s: op %s is not defined (register its definition with "
                    "register_op before its kernels, or load the plugin that defines it)",
                    def.op, def.device_type, def.op);
  if ((def.compute != NULL) == (def.compute_async != NULL))
    return reg_fail(s, FLOE_INVALID_ARGUMENT,
                    "register_kernel %s/%s: exactly one of compute and compute_async must be set "
                    "(got %s)",
                    def.op, def.device_type, def.compute ? "both" : "neither");
  if (def.num_constraints > 0 && !def.constraints)
    return reg_fail(s, FLOE_INVALID_ARGUMENT,
                    "register_kernel %s/%s: num_constraints is %zu but constraints is NULL", def.op,
                    def.device_type, def.num_constraints);
  for (size_t i = 0; i < def.num_constraints; i++)
    if ((rc = check_constraint(s, &def, info, &def.constraints[i])) != FLOE_OK) return rc;

  FloeKernelReg *k = floe__calloc(1, sizeof *k);
  if (!k) return reg_oom(s);
  k->op = floe__strdup(def.op);
  k->device_type = strdup_upper(def.device_type);
  k->constraints = floe__calloc(def.num_constraints ? def.num_constraints : 1, sizeof *k->constraints);
  if (!k->op || !k->device_type || !k->constraints) goto err_free_kernel;
  for (size_t i = 0; i < def.num_constraints; i++) {
    k->constraints[i].dtypes = def.constraints[i].dtypes;
    k->constraints[i].attr = floe__strdup(def.constraints[i].attr);
    if (!k->constraints[i].attr) goto err_free_kernel;
    k->num_constraints = i + 1;
  }
  k->priority = def.priority;
  k->flags = def.flags;
  k->def = def;
  k->def.op = k->op;
  k->def.device_type = k->device_type;
  k->def.constraints = k->constraints;
  if (!grow((void **)&s->kernels, s->num_kernels, sizeof *s->kernels)) goto err_free_kernel;
  s->kernels[s->num_kernels++] = k;
  return FLOE_OK;

err_free_kernel:
  kernel_reg_free(k);
  return reg_oom(s);
}

/* Deep copy of n strings; false when out of memory (*out then holds what was copied). */
static bool copy_strings(const char *const *src, size_t n, const char *const **out) {
  const char **v = floe__calloc(n ? n : 1, sizeof *v);
  *out = v;
  if (!v) return false;
  for (size_t i = 0; i < n; i++)
    if (!(v[i] = floe__strdup(src[i]))) return false;
  return true;
}

/* `call` names the registrar slot in the messages ("register_op", "register_gradient"). */
static floe_code check_specs(Staging *s, const char *call, const char *op, const char *what,
                             const char *const *v, size_t n) {
  if (n > 0 && !v)
    return reg_fail(s, FLOE_INVALID_ARGUMENT, "%s %s: num_%s is %zu but %s is NULL", call, op,
                    what, n, what);
  for (size_t i = 0; i < n; i++)
    if (!v[i])
      return reg_fail(s, FLOE_INVALID_ARGUMENT, "%s %s: %s[%zu] is NULL", call, op, what, i);
  return FLOE_OK;
}

static floe_code reg_op(FloePluginRegistrar *reg, const FloeOpDef *op) {
  Staging *s = reg->core;
  floe_code rc = reg_gate(s, "register_op");
  if (rc != FLOE_OK) return rc;
  if (!op || op->struct_size < MIN_OP_SIZE)
    return reg_fail(s, FLOE_INVALID_ARGUMENT,
                    "register_op: FloeOpDef is NULL or its struct_size %zu is smaller than ABI "
                    "1.0's required fields (%zu bytes)",
                    op ? op->struct_size : (size_t)0, (size_t)MIN_OP_SIZE);
  FloeOpDef def;
  memset(&def, 0, sizeof def);
  memcpy(&def, op, op->struct_size < sizeof def ? op->struct_size : sizeof def);
  if (!def.name || !*def.name) return reg_fail(s, FLOE_INVALID_ARGUMENT, "register_op: name is NULL or empty");
  const char *call = "register_op";
  if ((rc = check_specs(s, call, def.name, "inputs", def.inputs, def.num_inputs)) != FLOE_OK ||
      (rc = check_specs(s, call, def.name, "outputs", def.outputs, def.num_outputs)) != FLOE_OK ||
      (rc = check_specs(s, call, def.name, "attrs", def.attrs, def.num_attrs)) != FLOE_OK)
    return rc;
  const FloeOpInfo *existing = floe__op_lookup(def.name);
  /* The same plugin loaded by a second runtime re-registers its ops: that is not a clash. */
  if (existing && !(existing->plugin && strcmp(existing->plugin, s->plugin->name) == 0))
    return reg_fail(s, FLOE_ALREADY_EXISTS, "register_op %s: already defined by %s", def.name,
                    existing->plugin ? existing->plugin : "the standard op set");
  if (staged_op(s, def.name))
    return reg_fail(s, FLOE_ALREADY_EXISTS, "register_op %s: registered twice by this plugin",
                    def.name);
  if (!grow((void **)&s->ops, s->num_ops, sizeof *s->ops)) return reg_oom(s);
  FloeOpDef *c = &s->ops[s->num_ops];
  memset(c, 0, sizeof *c);
  c->struct_size = sizeof *c;
  c->flags = def.flags;
  c->shape_fn = def.shape_fn;
  c->num_inputs = def.num_inputs;
  c->num_outputs = def.num_outputs;
  c->num_attrs = def.num_attrs;
  bool ok = (c->name = floe__strdup(def.name)) != NULL;
  ok = copy_strings(def.inputs, def.num_inputs, &c->inputs) && ok;
  ok = copy_strings(def.outputs, def.num_outputs, &c->outputs) && ok;
  ok = copy_strings(def.attrs, def.num_attrs, &c->attrs) && ok;
  if (def.doc) ok = (c->doc = floe__strdup(def.doc)) != NULL && ok;
  if (!ok) {
    op_copy_free(c);
    return reg_oom(s);
  }
  s->num_ops++;
  return FLOE_OK;
}

#define MIN_GRAD_SIZE FIELD_END(FloeGradientDef, num_copy_attrs)

/* Staged as a deep copy; checked against the op registry at commit, once the plugin's own
 * ops are defined. */
static floe_code reg_gradient(FloePluginRegistrar *reg, const FloeGradientDef *g) {
  Staging *s = reg->core;
  floe_code rc = reg_gate(s, "register_gradient");
  if (rc != FLOE_OK) return rc;
  if (!g || g->struct_size < MIN_GRAD_SIZE)
    return reg_fail(s, FLOE_INVALID_ARGUMENT,
                    "register_gradient: FloeGradientDef is NULL or its struct_size %zu is smaller "
                    "than ABI 1.2's (%zu bytes)",
                    g ? g->struct_size : (size_t)0, (size_t)MIN_GRAD_SIZE);
  if (!g->op || !*g->op || !g->grad_op || !*g->grad_op)
    return reg_fail(s, FLOE_INVALID_ARGUMENT, "register_gradient: op and grad_op must be names");
  if ((g->num_grad_inputs && !g->grad_inputs) || (g->num_input_grads && !g->input_grads) ||
      (g->num_copy_attrs && !g->copy_attrs))
    return reg_fail(s, FLOE_INVALID_ARGUMENT,
                    "register_gradient %s: an array is NULL but its count is not 0", g->op);
  const char *call = "register_gradient";
  if ((rc = check_specs(s, call, g->op, "grad_inputs", g->grad_inputs, g->num_grad_inputs)) !=
          FLOE_OK ||
      (rc = check_specs(s, call, g->op, "copy_attrs", g->copy_attrs, g->num_copy_attrs)) != FLOE_OK)
    return rc;
  for (int i = 0; i < s->num_grads; i++)
    if (strcmp(s->grads[i].op, g->op) == 0)
      return reg_fail(s, FLOE_ALREADY_EXISTS,
                      "register_gradient %s: registered twice by this plugin", g->op);
  if (!grow((void **)&s->grads, s->num_grads, sizeof *s->grads)) return reg_oom(s);
  FloeGradientDef *c = &s->grads[s->num_grads];
  memset(c, 0, sizeof *c);
  c->struct_size = sizeof *c;
  c->num_grad_inputs = g->num_grad_inputs;
  c->num_input_grads = g->num_input_grads;
  c->num_copy_attrs = g->num_copy_attrs;
  bool ok = (c->op = floe__strdup(g->op)) != NULL;
  ok = (c->grad_op = floe__strdup(g->grad_op)) != NULL && ok;
  ok = copy_strings(g->grad_inputs, g->num_grad_inputs, &c->grad_inputs) && ok;
  ok = copy_strings(g->copy_attrs, g->num_copy_attrs, &c->copy_attrs) && ok;
  if (ok && g->num_input_grads) {
    int32_t *v = floe__malloc(g->num_input_grads * sizeof *v);
    if ((ok = v != NULL)) memcpy(v, g->input_grads, g->num_input_grads * sizeof *v);
    c->input_grads = v;
  }
  if (!ok) {
    grad_copy_free(c);
    return reg_oom(s);
  }
  s->num_grads++;
  return FLOE_OK;
}

static floe_code reg_transport(FloePluginRegistrar *reg, const FloeTransportFns *t) {
  Staging *s = reg->core;
  floe_code rc = reg_gate(s, "register_transport");
  if (rc != FLOE_OK) return rc;
  if (!t || t->struct_size < MIN_TRANSPORT_SIZE)
    return reg_fail(s, FLOE_INVALID_ARGUMENT,
                    "register_transport: FloeTransportFns is NULL or its struct_size %zu is "
                    "smaller than ABI 1.0's (%zu bytes)",
                    t ? t->struct_size : (size_t)0, (size_t)MIN_TRANSPORT_SIZE);
  FloeTransportReg *r = floe__calloc(1, sizeof *r);
  if (!r) return reg_oom(s);
  memcpy(&r->fns, t, t->struct_size < sizeof r->fns ? t->struct_size : sizeof r->fns);
  r->fns.struct_size = sizeof r->fns;
  const FloeTransportFns *f = &r->fns;
  if (!valid_token(f->name, 64, "-_.")) {
    rc = reg_fail(s, FLOE_INVALID_ARGUMENT,
                  "register_transport: name \"%s\" must be 1-63 letters, digits, '-', '_' or '.'",
                  f->name ? f->name : "(null)");
    goto err_free_transport;
  }
  if (!f->init || !f->finalize || !f->listen || !f->connect || !f->accept || !f->isend ||
      !f->irecv || !f->test || !f->close_send || !f->close_recv || !f->close_listen) {
    rc = reg_fail(s, FLOE_INVALID_ARGUMENT,
                  "register_transport %s: a required slot is NULL (all but reg_mr, dereg_mr, "
                  "progress, get_fd, cancel, trywait, wait and interrupt are required)",
                  f->name);
    goto err_free_transport;
  }
  /* Slots of 1.4 beyond the plugin's struct_size were never copied: they are NULL here. */
  if (!f->wait != !f->interrupt || (f->trywait && !f->get_fd)) {
    rc = reg_fail(s, FLOE_INVALID_ARGUMENT,
                  "register_transport %s: %s", f->name,
                  !f->wait != !f->interrupt
                      ? "wait and interrupt come together (one of them is NULL)"
                      : "trywait is set but get_fd is NULL (trywait answers for get_fd's fd)");
    goto err_free_transport;
  }
  for (int i = 0; i < s->rt->num_transports; i++)
    if (strcmp(s->rt->transports[i]->name, f->name) == 0) {
      rc = reg_fail(s, FLOE_ALREADY_EXISTS, "register_transport %s: already registered by %s",
                    f->name, s->rt->transports[i]->plugin->name);
      goto err_free_transport;
    }
  for (int i = 0; i < s->num_transports; i++)
    if (strcmp(s->transports[i]->name, f->name) == 0) {
      rc = reg_fail(s, FLOE_ALREADY_EXISTS, "register_transport %s: registered twice", f->name);
      goto err_free_transport;
    }
  if (!(r->name = floe__strdup(f->name))) goto err_oom;
  r->fns.name = r->name;
  if (!grow((void **)&s->transports, s->num_transports, sizeof *s->transports)) goto err_oom;
  s->transports[s->num_transports++] = r;
  return FLOE_OK;

err_oom:
  rc = reg_oom(s);
err_free_transport:
  transport_reg_free(r);
  return rc;
}

static void reg_set_message(FloePluginRegistrar *reg, const char *fmt, ...) {
  Staging *s = reg->core;
  if (!fmt) return;
  va_list ap;
  va_start(ap, fmt);
  char *m = floe__vasprintf(fmt, ap);
  va_end(ap);
  if (!m) {
    s->oom = true;
    return;
  }
  floe__free(s->message);
  s->message = m;
}

static void reg_set_shutdown(FloePluginRegistrar *reg, void (*shutdown)(void *arg), void *arg) {
  Staging *s = reg->core;
  s->shutdown = shutdown;
  s->shutdown_arg = arg;
}

/* ------------------------------------------------------------------------------------ */
/* Plugin records. */

static void plugin_sync_report(FloePlugin *p) {
  p->report.name = p->name ? p->name : "";
  p->report.path = p->path ? p->path : "";
  p->report.version = p->version ? p->version : "";
  p->report.message = p->message ? p->message : "";
}

/* Set the final state and message of a plugin that is not loaded. */
static floe_code plugin_set(FloePlugin *p, FloePluginState state, FloeStatus *st,
                            const char *fmt, ...) FLOE__PRINTF(4, 5);
static floe_code plugin_set(FloePlugin *p, FloePluginState state, FloeStatus *st,
                            const char *fmt, ...) {
  p->report.state = state;
  va_list ap;
  va_start(ap, fmt);
  char *m = floe__vasprintf(fmt, ap);
  va_end(ap);
  if (!m) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory recording plugin %s", p->path);
  floe__free(p->message);
  p->message = m;
  plugin_sync_report(p);
  return FLOE_OK;
}

static void plugin_free(FloePlugin *p) {
  if (!p) return;
  floe__free(p->name);
  floe__free(p->path);
  floe__free(p->version);
  floe__free(p->message);
  floe__free(p);
}

/* A new record at the end of rt->plugins; name is the file's stem until declared. */
static FloePlugin *plugin_new(FloeRuntime *rt, const char *stem, const char *path) {
  FloePlugin *p = floe__calloc(1, sizeof *p);
  if (!p) return NULL;
  p->name = floe__strdup(stem);
  p->path = floe__strdup(path);
  p->version = floe__strdup("");
  if (!p->name || !p->path || !p->version || !grow((void **)&rt->plugins, rt->num_plugins, sizeof *rt->plugins)) {
    plugin_free(p);
    return NULL;
  }
  p->report.state = FLOE_PLUGIN_FAILED;
  plugin_sync_report(p);
  rt->plugins[rt->num_plugins++] = p;
  return p;
}

/* Move staged registrations into rt. Ops first: they are the only step that can fail for a
 * reason other than memory (a spec that does not parse). */
static floe_code commit(FloeRuntime *rt, FloePlugin *p, Staging *s, FloeStatus *st) {
  for (int i = 0; i < s->num_ops; i++) {
    /* Re-registering an identical definition (this plugin, another runtime) succeeds. */
    FloeStatus ost = {FLOE_OK, NULL};
    floe_code rc = floe__op_register(&s->ops[i], p->name, &ost);
    if (rc == FLOE_NO_MEMORY) {
      floe_status_clear(&ost);
      staging_discard(s, true);
      return floe_status_set(st, FLOE_NO_MEMORY, "out of memory registering ops of %s", p->path);
    }
    if (rc != FLOE_OK) {
      rc = plugin_set(p, FLOE_PLUGIN_FAILED, st, "%s: op %s: %s", p->path, s->ops[i].name,
                      floe_status_message(&ost));
      floe_status_clear(&ost);
      staging_discard(s, true);
      return rc;
    }
  }
  for (int i = 0; i < s->num_grads; i++) {
    FloeStatus gst = {FLOE_OK, NULL};
    floe_code rc = floe__grad_register_def(&s->grads[i], p->name, &gst);
    if (rc != FLOE_OK) {
      rc = rc == FLOE_NO_MEMORY
               ? floe_status_set(st, FLOE_NO_MEMORY, "out of memory registering gradients of %s",
                                 p->path)
               : plugin_set(p, FLOE_PLUGIN_FAILED, st, "%s: %s", p->path,
                            floe_status_message(&gst));
      floe_status_clear(&gst);
      staging_discard(s, true);
      return rc;
    }
  }
  if ((s->num_devices && !reserve((void **)&rt->devices, rt->num_devices + s->num_devices, sizeof *rt->devices)) ||
      (s->num_kernels && !reserve((void **)&rt->kernels, rt->num_kernels + s->num_kernels, sizeof *rt->kernels)) ||
      (s->num_transports &&
       !reserve((void **)&rt->transports, rt->num_transports + s->num_transports, sizeof *rt->transports))) {
    staging_discard(s, true);
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory registering plugin %s", p->path);
  }
  for (int i = 0; i < s->num_devices; i++) {
    FloeDevice *d = s->devices[i];
    d->rt = rt;
    d->plugin = p;
    d->id = rt->num_devices;
    rt->devices[rt->num_devices++] = d;
  }
  for (int i = 0; i < s->num_kernels; i++) {
    s->kernels[i]->plugin = p;
    rt->kernels[rt->num_kernels++] = s->kernels[i];
  }
  for (int i = 0; i < s->num_transports; i++) {
    s->transports[i]->plugin = p;
    rt->transports[rt->num_transports++] = s->transports[i];
  }
  p->report.state = FLOE_PLUGIN_LOADED;
  p->report.num_devices = s->num_devices;
  p->report.num_kernels = s->num_kernels;
  p->report.num_ops = s->num_ops;
  p->report.num_transports = s->num_transports;
  p->shutdown = s->shutdown;
  p->shutdown_arg = s->shutdown_arg;
  s->num_devices = s->num_kernels = s->num_transports = 0;
  s->shutdown = NULL;
  floe__free(p->message);
  p->message = NULL;
  plugin_sync_report(p);
  staging_discard(s, false);
  return FLOE_OK;
}

/* Decide the fate of a plugin whose init returned rc. */
static floe_code finish(FloeRuntime *rt, FloePlugin *p, Staging *s, floe_code rc, FloeStatus *st) {
  bool initialised = rc == FLOE_OK;
  floe_code out = FLOE_OK;
  if (s->oom || rc == FLOE_NO_MEMORY) {
    out = floe_status_set(st, FLOE_NO_MEMORY, "out of memory while initialising plugin %s", p->path);
  } else if (s->mismatch) {
    out = plugin_set(p, FLOE_PLUGIN_REFUSED, st,
                     "%s: ABI %u.%u not supported by this core (ABI %d.%d): rebuild the plugin "
                     "against Floe's headers",
                     p->path, p->report.abi_major, p->report.abi_minor, FLOE_ABI_MAJOR, FLOE_ABI_MINOR);
  } else if (s->dup_of) {
    out = plugin_set(p, FLOE_PLUGIN_DUPLICATE, st,
                     "%s: declares the name \"%s\" already taken by %s; skipped", p->path, p->name,
                     s->dup_of->path);
  } else if (!s->declared) {
    out = plugin_set(p, FLOE_PLUGIN_FAILED, st,
                     "%s: floe_plugin_init returned %s without a successful reg->declare%s%s",
                     p->path, floe_code_name(rc), s->reg_error || s->message ? ": " : "",
                     s->message ? s->message : s->reg_error ? s->reg_error : "");
  } else if (rc == FLOE_UNAVAILABLE) {
    out = plugin_set(p, FLOE_PLUGIN_UNAVAILABLE, st, "%s: not usable here: %s", p->path,
                     s->message ? s->message : "the plugin gave no reason");
  } else if (rc != FLOE_OK) {
    if (s->message && s->reg_error)
      out = plugin_set(p, FLOE_PLUGIN_FAILED, st, "%s: init failed (%s): %s (first rejected registration: %s)",
                       p->path, floe_code_name(rc), s->message, s->reg_error);
    else
      out = plugin_set(p, FLOE_PLUGIN_FAILED, st, "%s: init failed (%s): %s", p->path,
                       floe_code_name(rc),
                       s->message ? s->message : s->reg_error ? s->reg_error : floe_code_message(rc));
  } else {
    return commit(rt, p, s, st);
  }
  staging_discard(s, initialised);
  return out;
}

/* The signals a plugin (or a library it pulls in) must not take over by being loaded: the
 * process's. libfabric 1.17 links libinfinipath, whose constructor installs handlers for
 * SIGINT, SIGTERM, SIGSEGV, SIGBUS, SIGILL and SIGABRT that call exit(): a SIGTERM then runs
 * the atexit handlers (OpenSSL's cleanup) under threads still working, a crash in one of
 * them re-enters exit() and the process hangs for ever; a SIGSEGV exits with no core. */
static const int guarded_signals[] = {SIGHUP, SIGINT, SIGQUIT, SIGILL, SIGABRT, SIGBUS,
                                      SIGFPE, SIGSEGV, SIGTERM};
enum { NUM_GUARDED = sizeof guarded_signals / sizeof guarded_signals[0] };

static void *handler_of(const struct sigaction *a) {
  void *f;
  if (a->sa_flags & SA_SIGINFO) memcpy(&f, &a->sa_sigaction, sizeof f);
  else memcpy(&f, &a->sa_handler, sizeof f);
  return f;
}

/* Puts back each guarded signal's disposition from before (saved[]) that loading path
 * changed, saying so at FLOE_LOG_INFO. */
static void signals_restore(const struct sigaction *saved, const char *path) {
  for (int i = 0; i < NUM_GUARDED; i++) {
    struct sigaction now;
    if (sigaction(guarded_signals[i], NULL, &now) != 0) continue;
    if (handler_of(&now) == handler_of(&saved[i])) continue;
    sigaction(guarded_signals[i], &saved[i], NULL);
    Dl_info di;
    const char *lib = dladdr(handler_of(&now), &di) && di.dli_fname ? di.dli_fname : "?";
    floe__host_api()->log(FLOE_LOG_INFO, "loading %s: %s installed a handler for signal %d; "
                          "the process's own was put back", path, lib, guarded_signals[i]);
  }
}

/* dlopen, find the entry symbol and run init with a fresh registrar (the process's signal
 * handling as it was before, see guarded_signals). */
static floe_code load_plugin_unguarded(FloeRuntime *rt, FloePlugin *p, FloeStatus *st);

static floe_code load_plugin(FloeRuntime *rt, FloePlugin *p, FloeStatus *st) {
  struct sigaction saved[NUM_GUARDED];
  for (int i = 0; i < NUM_GUARDED; i++)
    if (sigaction(guarded_signals[i], NULL, &saved[i]) != 0) memset(&saved[i], 0, sizeof saved[i]);
  floe_code rc = load_plugin_unguarded(rt, p, st);
  signals_restore(saved, p->path);
  return rc;
}

static floe_code load_plugin_unguarded(FloeRuntime *rt, FloePlugin *p, FloeStatus *st) {
  dlerror();
  void *h = dlopen(p->path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *e = dlerror();
    return plugin_set(p, FLOE_PLUGIN_REFUSED, st, "%s: cannot be loaded: %s (plugin ABI unknown; core ABI %d.%d)",
                      p->path, e ? e : "dlopen failed", FLOE_ABI_MAJOR, FLOE_ABI_MINOR);
  }
  p->handle = h;
  dlerror();
  void *sym = dlsym(h, FLOE_PLUGIN_INIT_SYMBOL);
  if (!sym) {
    const char *e = dlerror();
    return plugin_set(p, FLOE_PLUGIN_REFUSED, st,
                      "%s: no entry symbol %s (%s): not a Floe plugin, or the symbol is not "
                      "exported (mark it FLOE_PLUGIN_EXPORT) (plugin ABI unknown; core ABI %d.%d)",
                      p->path, FLOE_PLUGIN_INIT_SYMBOL, e ? e : "symbol is NULL", FLOE_ABI_MAJOR,
                      FLOE_ABI_MINOR);
  }
  FloePluginInitFn init;
  memcpy(&init, &sym, sizeof init); /* object-to-function pointer, as POSIX dlsym intends */
  Staging s;
  memset(&s, 0, sizeof s);
  s.rt = rt;
  s.plugin = p;
  FloePluginRegistrar reg = {
      .struct_size = sizeof reg,
      .core = &s,
      .declare = reg_declare,
      .register_device = reg_device,
      .register_kernel = reg_kernel,
      .register_op = reg_op,
      .register_transport = reg_transport,
      .set_message = reg_set_message,
      .set_shutdown = reg_set_shutdown,
      .register_gradient = reg_gradient,
  };
  floe_code rc = init(floe__host_api(), &reg);
  return finish(rt, p, &s, rc, st);
}

/* ------------------------------------------------------------------------------------ */
/* Discovery. */

/* True when `name` is in the comma-separated list (blanks around names ignored). */
static bool in_list(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *c = list; *c;) {
    while (*c == ' ' || *c == '\t' || *c == ',') c++;
    const char *end = c;
    while (*end && *end != ',') end++;
    const char *last = end;
    while (last > c && (last[-1] == ' ' || last[-1] == '\t')) last--;
    if ((size_t)(last - c) == n && strncmp(c, name, n) == 0) return true;
    c = end;
  }
  return false;
}

static bool list_empty(const char *list) {
  return !list || strspn(list, " \t,") == strlen(list);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool is_plugin_file(const char *name) {
  size_t n = strlen(name), pre = strlen(PLUGIN_PREFIX), suf = strlen(PLUGIN_SUFFIX);
  return n > pre + suf && strncmp(name, PLUGIN_PREFIX, pre) == 0 &&
         strcmp(name + n - suf, PLUGIN_SUFFIX) == 0;
}

/* One file: de-duplicate by real path, filter by name, then load. */
static floe_code consider(FloeRuntime *rt, const char *dir, const char *file, const char *filter,
                          FloeStatus *st) {
  floe_code rc = FLOE_OK;
  char *found = floe__asprintf("%s/%s", dir, file);
  char *stem = floe__strndup(file + strlen(PLUGIN_PREFIX),
                             strlen(file) - strlen(PLUGIN_PREFIX) - strlen(PLUGIN_SUFFIX));
  if (!found || !stem) {
    rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory scanning %s", dir);
    goto out_free;
  }
  struct stat sb;
  if (stat(found, &sb) != 0 || !S_ISREG(sb.st_mode)) goto out_free; /* dangling link, directory */
  char real[PATH_MAX];
  if (!realpath(found, real)) snprintf(real, sizeof real, "%s", found);
  for (int i = 0; i < rt->num_plugins; i++)
    if (strcmp(rt->plugins[i]->path, real) == 0) {
      FloePlugin *p = plugin_new(rt, stem, real);
      if (!p) {
        rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory recording plugin %s", found);
        goto out_free;
      }
      rc = plugin_set(p, FLOE_PLUGIN_DUPLICATE, st, "%s: same file as %s (already considered); skipped",
                      found, rt->plugins[i]->path);
      goto out_free;
    }
  FloePlugin *p = plugin_new(rt, stem, real);
  if (!p) {
    rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory recording plugin %s", found);
    goto out_free;
  }
  if (!list_empty(filter) && !in_list(filter, stem))
    rc = plugin_set(p, FLOE_PLUGIN_FILTERED, st, "%s: \"%s\" is not in the plugin list \"%s\"", real,
                    stem, filter);
  else
    rc = load_plugin(rt, p, st);

out_free:
  floe__free(found);
  floe__free(stem);
  return rc;
}

/* Every floe-*.so of dir, in name order; a missing or unreadable directory holds none. */
static floe_code scan_dir(FloeRuntime *rt, const char *dir, const char *filter, FloeStatus *st) {
  DIR *d = opendir(dir);
  if (!d) return FLOE_OK;
  char **names = NULL;
  int n = 0;
  floe_code rc = FLOE_OK;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (!is_plugin_file(e->d_name)) continue;
    char *copy = floe__strdup(e->d_name);
    if (!copy || !grow((void **)&names, n, sizeof *names)) {
      floe__free(copy);
      rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory scanning %s", dir);
      goto out_free;
    }
    names[n++] = copy;
  }
  if (n > 1) qsort(names, (size_t)n, sizeof *names, cmp_str);
  for (int i = 0; i < n && rc == FLOE_OK; i++) rc = consider(rt, dir, names[i], filter, st);

out_free:
  closedir(d);
  for (int i = 0; i < n; i++) floe__free(names[i]);
  floe__free(names);
  return rc;
}

static floe_code scan_path(FloeRuntime *rt, const char *path, const char *filter, FloeStatus *st) {
  for (const char *c = path; *c;) {
    const char *end = strchr(c, ':');
    size_t len = end ? (size_t)(end - c) : strlen(c);
    if (len > 0) {
      char *dir = floe__strndup(c, len);
      if (!dir) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory reading the plugin path");
      floe_code rc = scan_dir(rt, dir, filter, st);
      floe__free(dir);
      if (rc != FLOE_OK) return rc;
    }
    c += len;
    if (*c == ':') c++;
  }
  return FLOE_OK;
}

/* The plugin folder beside the libfloe that holds this code (dirname(libfloe.so) + "/floe/<ABI
 * major>") into *dir, newly allocated (caller frees); *dir NULL when dladdr cannot name a file
 * with a folder (libfloe linked statically into a program the loader names without a path). */
static floe_code plugin_dir_beside_library(char **dir, FloeStatus *st) {
  Dl_info info;
  *dir = NULL;
  if (!dladdr((void *)&floe__plugins_load, &info) || !info.dli_fname) return FLOE_OK;
  const char *slash = strrchr(info.dli_fname, '/');
  if (!slash) return FLOE_OK;
  *dir = floe__asprintf("%.*s/%s", (int)(slash - info.dli_fname), info.dli_fname, PLUGIN_SUBDIR);
  if (!*dir) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory naming the plugin folder");
  return FLOE_OK;
}

/* Fills rt->plugins/devices/kernels/transports, all owned by rt and freed by
 * floe__plugins_shutdown (also after a failed load). opts is borrowed for the call.
 * A non-empty plugin path (option, else $FLOE_PLUGIN_PATH) is the whole search: it replaces
 * the installed folder. Without one, the folder beside libfloe is searched; the compiled-in
 * FLOE_PLUGINDIR only when dladdr cannot say where libfloe is. */
floe_code floe__plugins_load(FloeRuntime *rt, const FloeRuntimeOptions *opts, FloeStatus *st) {
  const char *path = FLOE_HAS_FIELD(opts, FloeRuntimeOptions, plugin_path) ? opts->plugin_path : NULL;
  const char *filter = FLOE_HAS_FIELD(opts, FloeRuntimeOptions, plugins) ? opts->plugins : NULL;
  bool skip_install = FLOE_HAS_FIELD(opts, FloeRuntimeOptions, skip_install_dir) && opts->skip_install_dir;
  const char *no_install = getenv("FLOE_NO_INSTALL_DIR");
  if (no_install && strcmp(no_install, "1") == 0) skip_install = true;
  if (!path) path = getenv("FLOE_PLUGIN_PATH");
  if (!filter) filter = getenv("FLOE_PLUGINS");
  if (path && *path) return scan_path(rt, path, filter, st);
  if (skip_install) return FLOE_OK;
  char *beside;
  floe_code rc = plugin_dir_beside_library(&beside, st);
  if (rc == FLOE_OK) rc = scan_dir(rt, beside ? beside : FLOE_PLUGINDIR, filter, st);
  floe__free(beside);
  return rc;
}

/* Runs the plugins' shutdown hooks and destroy slots, then frees every record of rt (rt
 * itself stays the caller's). Plugin code stays mapped: handles are never closed. */
void floe__plugins_shutdown(FloeRuntime *rt) {
  /* Reverse load order: a later plugin may use what an earlier one provides. */
  for (int i = rt->num_plugins - 1; i >= 0; i--) {
    FloePlugin *p = rt->plugins[i];
    if (p->shutdown) p->shutdown(p->shutdown_arg);
    for (int j = rt->num_devices - 1; j >= 0; j--) {
      FloeDevice *d = rt->devices[j];
      if (d->plugin == p && d->fns.destroy) d->fns.destroy(d->fns.state);
    }
  }
  for (int i = 0; i < rt->num_devices; i++) floe__free(rt->devices[i]);
  for (int i = 0; i < rt->num_kernels; i++) kernel_reg_free(rt->kernels[i]);
  for (int i = 0; i < rt->num_transports; i++) transport_reg_free(rt->transports[i]);
  for (int i = 0; i < rt->num_plugins; i++) plugin_free(rt->plugins[i]);
  floe__free(rt->devices);
  floe__free(rt->kernels);
  floe__free(rt->transports);
  floe__free(rt->plugins);
  rt->devices = NULL;
  rt->kernels = NULL;
  rt->transports = NULL;
  rt->plugins = NULL;
  rt->num_devices = rt->num_kernels = rt->num_transports = rt->num_plugins = 0;
}
