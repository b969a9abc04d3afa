/* SPDX-License-Identifier: Apache-2.0 */
/* kernel.c - choosing the kernel that runs a node on a device type. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "runtime.h"

/* A growing message; `oom` once an append failed (the message is then dropped). */
typedef struct MsgBuf {
  char *s;
  size_t len, cap;
  bool oom;
} MsgBuf;

static void msg_add(MsgBuf *m, const char *fmt, ...) FLOE__PRINTF(2, 3);
static void msg_add(MsgBuf *m, const char *fmt, ...) {
  if (m->oom) return;
  va_list ap;
  va_start(ap, fmt);
  char *piece = floe__vasprintf(fmt, ap);
  va_end(ap);
  if (!piece) goto err_oom;
  size_t n = strlen(piece);
  if (m->len + n + 1 > m->cap) {
    size_t cap = (m->len + n + 1) * 2;
    char *s = floe__realloc(m->s, cap);
    if (!s) {
      floe__free(piece);
      goto err_oom;
    }
    m->s = s;
    m->cap = cap;
  }
  memcpy(m->s + m->len, piece, n + 1);
  m->len += n;
  floe__free(piece);
  return;

err_oom:
  m->oom = true;
}

/* True when the node's type attribute satisfies the constraint (every element of a list). */
static bool constraint_holds(const FloeNode *node, const FloeTypeConstraint *c) {
  const FloeAttrValue *v = floe__attrs_get(&node->attrs, c->attr);
  if (!v) return false;
  if (v->kind == FLOE_ATTR_TYPE) return (c->dtypes & FLOE_DTYPE_BIT(v->u.type)) != 0;
  if (v->kind != FLOE_ATTR_TYPE_LIST) return false;
  for (size_t i = 0; i < v->u.tlist.n; i++)
    if (!(c->dtypes & FLOE_DTYPE_BIT(v->u.tlist.v[i]))) return false;
  return true;
}

static bool kernel_matches(const FloeKernelReg *k, const FloeNode *node) {
  for (size_t i = 0; i < k->num_constraints; i++)
    if (!constraint_holds(node, &k->constraints[i])) return false;
  return true;
}

/* "T=f32, Tlist=[f32,i32]": the node's type attributes, which constraints are checked on. */
static void describe_node_types(MsgBuf *m, const FloeNode *node) {
  int shown = 0;
  for (int i = 0; i < node->attrs.n; i++) {
    const FloeAttrValue *v = &node->attrs.values[i];
    if (v->kind == FLOE_ATTR_TYPE) {
      msg_add(m, "%s%s=%s", shown++ ? ", " : "", node->attrs.names[i], floe_dtype_name(v->u.type));
    } else if (v->kind == FLOE_ATTR_TYPE_LIST) {
      msg_add(m, "%s%s=[", shown++ ? ", " : "", node->attrs.names[i]);
      for (size_t j = 0; j < v->u.tlist.n; j++)
        msg_add(m, "%s%s", j ? "," : "", floe_dtype_name(v->u.tlist.v[j]));
      msg_add(m, "]");
    }
  }
  if (!shown) msg_add(m, "no type attributes");
}

static void describe_kernel(MsgBuf *m, const FloeKernelReg *k) {
  msg_add(m, "%s", strcmp(k->device_type, "*") != 0             ? k->device_type
                   : (k->flags & FLOE__KERNEL_HOST_ONLY) ? "any host-memory device (core)"
                                                          : "any device (core)");
  if (k->num_constraints == 0) {
    msg_add(m, " (any dtype)");
    return;
  }
  msg_add(m, " (");
  for (size_t i = 0; i < k->num_constraints; i++) {
    char set[160];
    msg_add(m, "%s%s in %s", i ? ", " : "", k->constraints[i].attr,
            floe__dtype_mask_str(k->constraints[i].dtypes, set, sizeof set));
  }
  msg_add(m, ")");
}

/* The NOT_FOUND message: the node, its op and dtypes, and where kernels of the op exist. */
static void no_kernel_error(const FloeRuntime *rt, const FloeNode *node, const char *device_type,
                            FloeStatus *st) {
  MsgBuf m = {NULL, 0, 0, false};
  msg_add(&m, "no kernel for node '%s' (op %s, ", node->name, node->op->name);
  describe_node_types(&m, node);
  msg_add(&m, ") on device type %s; ", device_type);
  int listed = 0, total = 0;
  for (int i = 0; i < rt->num_kernels; i++) {
    const FloeKernelReg *k = rt->kernels[i];
    if (strcmp(k->op, node->op->name) != 0) continue;
    total++;
    if (listed == 12) continue; /* a long list helps no one; the count says there are more */
    msg_add(&m, "%s", listed++ ? ", " : "kernels of this op exist for ");
    describe_kernel(&m, k);
  }
  if (total > listed) msg_add(&m, " and %d more", total - listed);
  if (total == 0)
    msg_add(&m, "no loaded plugin has a kernel for %s (is the plugin that implements it loaded? "
                "see floe_runtime_plugin)", node->op->name);
  else
    msg_add(&m, "; place the node on one of those devices or use a dtype they accept");
  if (m.oom)
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory describing the missing kernel of node '%s'",
                    node->name);
  else
    floe_status_set(st, FLOE_NOT_FOUND, "%s", m.s);
  floe__free(m.s);
}

/* The best matching kernel of op on device_type ("*": the core's kernels for any device). */
static const FloeKernelReg *best_of_type(const FloeRuntime *rt, const FloeNode *node,
                                         const char *device_type) {
  const FloeKernelReg *best = NULL;
  for (int i = 0; i < rt->num_kernels; i++) {
    const FloeKernelReg *k = rt->kernels[i];
    if (strcmp(k->op, node->op->name) != 0 || strcasecmp(k->device_type, device_type) != 0) continue;
    /* Ties keep the first registered: load order is the user's preference order. */
    if (kernel_matches(k, node) && (!best || k->priority > best->priority)) best = k;
  }
  return best;
}

/* Whether the devices of device_type compute in host memory (unknown types: no). */
static bool type_is_host(const FloeRuntime *rt, const char *device_type) {
  for (int i = 0; i < rt->num_devices; i++)
    if (strcasecmp(rt->devices[i]->props.type, device_type) == 0) return rt->devices[i]->host_memory;
  return false;
}

/* The kernel is borrowed from rt. st may be NULL when the caller only probes. A kernel of
 * the device's own type wins over the core's kernels for any device ("*"), of which those
 * flagged FLOE__KERNEL_HOST_ONLY serve host-memory devices alone. */
const FloeKernelReg *floe__kernel_find(const FloeRuntime *rt, const FloeNode *node,
                                       const char *device_type, FloeStatus *st) {
  const FloeKernelReg *best = best_of_type(rt, node, device_type);
  if (!best) {
    best = best_of_type(rt, node, "*");
    if (best && (best->flags & FLOE__KERNEL_HOST_ONLY) && strcmp(device_type, "*") != 0 &&
        !type_is_host(rt, device_type))
      best = NULL;
  }
  if (!best && st) no_kernel_error(rt, node, device_type, st);
  return best;
}

FloeDType floe_node_attr_type(const FloeNode *n, const char *name) {
  const FloeAttrValue *v = n && name ? floe__attrs_get(&n->attrs, name) : NULL;
  return v && v->kind == FLOE_ATTR_TYPE ? v->u.type : FLOE_DTYPE_INVALID;
}

const char *floe_node_attr_string(const FloeNode *n, const char *name) {
  const FloeAttrValue *v = n && name ? floe__attrs_get(&n->attrs, name) : NULL;
  return v && v->kind == FLOE_ATTR_STRING && v->u.s ? v->u.s : "";
}

/* Public probe (floe.h): only the device type's own kernels, never the core's "*" ones. */
int floe_runtime_device_has_kernel(const FloeRuntime *rt, const FloeNode *node,
                                   const char *device_type) {
  if (!rt || !node || !device_type || strcmp(device_type, "*") == 0) return 0;
  return best_of_type(rt, node, device_type) != NULL;
}

/* "node 'x' (Op): rest" -> "rest": messages from host.c's error setters carry the node
 * prefix, which callers that add their own context drop. */
const char *floe__strip_node_prefix(const char *msg, const FloeNode *n) {
  size_t nl = strlen(n->name), ol = strlen(n->op->name);
  if (strncmp(msg, "node '", 6) == 0 && strncmp(msg + 6, n->name, nl) == 0 &&
      strncmp(msg + 6 + nl, "' (", 3) == 0 && strncmp(msg + 9 + nl, n->op->name, ol) == 0 &&
      strncmp(msg + 9 + nl + ol, "): ", 3) == 0)
    return msg + 12 + nl + ol;
  return msg;
}

floe_code floe__kernel_instantiate(const FloeKernelReg *k, const FloeNode *node, FloeDevice *dev,
                                   void **state, bool *created, FloeStatus *st) {
  const FloeKernelDef *def = &k->def;
  *state = def->user_data;
  *created = false;
  if (!def->create) return FLOE_OK;
  FloeStatus kst = {FLOE_OK, NULL};
  struct FloeKernelInit init = {node, dev, &kst};
  void *made = NULL;
  floe_code rc = def->create(floe__host_api(), &init, def->user_data, &made);
  if (rc != FLOE_OK || kst.code != FLOE_OK) {
    floe_code code = kst.code != FLOE_OK ? kst.code : rc;
    floe_status_set(st, code, "node '%s' (%s): creating its %s kernel: %s", node->name,
                    node->op->name, k->device_type,
                    kst.code != FLOE_OK ? floe__strip_node_prefix(floe_status_message(&kst), node)
                                        : floe_code_message(rc));
    floe_status_clear(&kst);
    return code;
  }
  *state = made;
  *created = true;
  return FLOE_OK;
}

void floe__kernel_release(const FloeKernelReg *k, void *state) {
  if (k->def.destroy) k->def.destroy(state);
}
