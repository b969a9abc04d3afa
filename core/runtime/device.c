/* SPDX-License-Identifier: Apache-2.0 */
/* device.c - device names and their lookup among a runtime's devices (a device's memory and
 * copies are base/device_mem.c's). */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "runtime.h"

#define ACCEPTED_FORMS                                                                       \
  "accepted forms: \"/job:localhost/replica:0/task:0/device:CPU:0\" (any part may be left " \
  "out, e.g. \"/device:CPU:0\" or \"/job:worker/task:1/device:GPU:0\"), \"cpu:0\", \"CPU\""

static floe_code name_error(FloeStatus *st, const char *s, const char *why) {
  return floe_status_set(st, FLOE_INVALID_ARGUMENT, "invalid device name \"%s\": %s; " ACCEPTED_FORMS,
                         s, why);
}

/* A non-negative decimal of len chars ("*" = any, -1). */
static bool parse_index(const char *p, size_t len, int *out) {
  if (len == 1 && *p == '*') {
    *out = -1;
    return true;
  }
  if (len == 0 || len > 9) return false;
  int v = 0;
  for (size_t i = 0; i < len; i++) {
    if (!isdigit((unsigned char)p[i])) return false;
    v = v * 10 + (p[i] - '0');
  }
  *out = v;
  return true;
}

/* "TYPE" or "TYPE:N" of len chars into out->type / out->index. */
static bool parse_type_index(const char *p, size_t len, FloeDeviceName *out) {
  const char *colon = memchr(p, ':', len);
  size_t tlen = colon ? (size_t)(colon - p) : len;
  if (tlen == 0 || tlen >= sizeof out->type || !isalpha((unsigned char)p[0])) return false;
  for (size_t i = 0; i < tlen; i++) {
    /* '-' spells '_' so that short names ("tpu-sim:0") parse back */
    if (!isalnum((unsigned char)p[i]) && p[i] != '_' && p[i] != '-') return false;
    out->type[i] = p[i] == '-' ? '_' : (char)toupper((unsigned char)p[i]);
  }
  out->type[tlen] = '\0';
  if (!colon) return true;
  return parse_index(colon + 1, len - tlen - 1, &out->index);
}

/* Fills the caller's *out (no allocation); s is borrowed. */
floe_code floe_device_name_parse(const char *s, FloeDeviceName *out, FloeStatus *status) {
  if (!out) return floe_status_set(status, FLOE_INVALID_ARGUMENT, "floe_device_name_parse: out is NULL");
  memset(out, 0, sizeof *out);
  out->replica = out->task = out->index = -1;
  if (!s || !*s) return name_error(status, s ? s : "(null)", "it is empty");
  if (s[0] != '/') {
    if (!parse_type_index(s, strlen(s), out))
      return name_error(status, s, "expected TYPE or TYPE:N (a letter, then letters, digits, '_' or '-'; N a number)");
    return FLOE_OK;
  }
  bool seen_job = false, seen_replica = false, seen_task = false, seen_device = false;
  for (const char *p = s; *p;) {
    if (*p != '/') return name_error(status, s, "each part starts with '/'");
    p++;
    const char *end = strchr(p, '/');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    const char *colon = memchr(p, ':', len);
    if (!colon) return name_error(status, s, "each part is key:value");
    size_t klen = (size_t)(colon - p), vlen = len - klen - 1;
    const char *v = colon + 1;
    bool dup = false;
    if (klen == 3 && strncmp(p, "job", 3) == 0) {
      dup = seen_job;
      seen_job = true;
      if (vlen == 0 || vlen >= sizeof out->job) return name_error(status, s, "the job name is empty or too long");
      for (size_t i = 0; i < vlen; i++)
        if (!isalnum((unsigned char)v[i]) && v[i] != '_' && v[i] != '-')
          return name_error(status, s, "a job name holds letters, digits, '_' and '-'");
      memcpy(out->job, v, vlen);
      out->job[vlen] = '\0';
    } else if (klen == 7 && strncmp(p, "replica", 7) == 0) {
      dup = seen_replica;
      seen_replica = true;
      if (!parse_index(v, vlen, &out->replica)) return name_error(status, s, "the replica is not a number");
    } else if (klen == 4 && strncmp(p, "task", 4) == 0) {
      dup = seen_task;
      seen_task = true;
      if (!parse_index(v, vlen, &out->task)) return name_error(status, s, "the task is not a number");
    } else {
      /* "/device:TYPE:N", or the legacy "/TYPE:N" (TensorFlow's "/cpu:0"). */
      bool keyed = klen == 6 && strncmp(p, "device", 6) == 0;
      dup = seen_device;
      seen_device = true;
      if (!(keyed ? parse_type_index(v, vlen, out) : parse_type_index(p, len, out)))
        return name_error(status, s, "the device part is not TYPE or TYPE:N");
    }
    if (dup) return name_error(status, s, "a part is given twice");
    p += len;
  }
  return FLOE_OK;
}

static bool type_index_match(const FloeDevice *d, const FloeDeviceName *n) {
  if (n->type[0] && strcmp(n->type, d->props.type) != 0) return false;
  return n->index < 0 || n->index == d->index;
}

/* A device of this runtime: no job, /job:localhost, or the job and task rt joined as. */
static bool device_matches(const FloeRuntime *rt, const FloeDevice *d, const FloeDeviceName *n) {
  if (n->replica > 0) return false;
  if (n->job[0] && rt->joined && strcmp(n->job, rt->job) == 0) {
    if (n->task >= 0 && n->task != rt->task) return false;
  } else {
    if (n->job[0] && strcmp(n->job, "localhost") != 0) return false;
    if (n->task > 0 && !(rt->joined && n->task == rt->task && !n->job[0])) return false;
  }
  return type_index_match(d, n);
}

/* A device of another task: the name must give its job (and its task, unless only one task
 * of that job matches: floe__device_find checks). */
static bool remote_matches(const FloeDevice *d, const FloeDeviceName *n) {
  if (n->replica > 0 || !n->job[0] || strcmp(n->job, d->job) != 0) return false;
  if (n->task >= 0 && n->task != d->task) return false;
  return type_index_match(d, n);
}

bool floe__device_name_matches(const FloeRuntime *rt, const FloeDevice *d, const FloeDeviceName *n) {
  return d->remote ? remote_matches(d, n) : device_matches(rt, d, n);
}

/* The first device of rt matching name (borrowed from rt), or NULL + st. */
FloeDevice *floe__device_find(const FloeRuntime *rt, const char *name, FloeStatus *st) {
  FloeDeviceName n;
  if (floe_device_name_parse(name, &n, st) != FLOE_OK) return NULL;
  for (int i = 0; i < rt->num_devices; i++)
    if (device_matches(rt, rt->devices[i], &n)) return rt->devices[i];
  int nr;
  FloeDevice **remote = floe__runtime_remote(rt, &nr);
  FloeDevice *found = NULL;
  for (int i = 0; i < nr; i++) {
    if (!remote_matches(remote[i], &n)) continue;
    if (!found) {
      found = remote[i];
    } else if (found->task != remote[i]->task) {
      floe_status_set(st, FLOE_INVALID_ARGUMENT,
                      "device \"%s\" is ambiguous: job '%s' has several tasks (%s, %s, ...): "
                      "name the task, e.g. /job:%s/task:%d/device:%s:%d",
                      name, n.job, found->name, remote[i]->name, n.job, found->task,
                      found->props.type, found->index);
      return NULL;
    }
  }
  if (found) return found;
  if (rt->num_devices == 0) {
    floe_status_set(st, FLOE_NOT_FOUND,
                    "no device matches \"%s\": this runtime has no devices (no device plugin "
                    "loaded: check FLOE_PLUGIN_PATH and the plugin reports)",
                    name);
    return NULL;
  }
  char list[512];
  size_t used = 0;
  list[0] = '\0';
  for (int i = 0; i < rt->num_devices && used < sizeof list; i++) {
    int w = snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", rt->devices[i]->short_name);
    if (w < 0) break;
    used += (size_t)w;
  }
  for (int i = 0; i < nr && used < sizeof list; i++) {
    int w = snprintf(list + used, sizeof list - used, ", %s", remote[i]->name);
    if (w < 0) break;
    used += (size_t)w;
  }
  floe_status_set(st, FLOE_NOT_FOUND, "no device matches \"%s\"; devices of this runtime: %s", name,
                  list);
  return NULL;
}
