/* SPDX-License-Identifier: Apache-2.0 */
/* cluster.c - cluster specs: the TF_CONFIG-compatible JSON that Kubernetes' TFJob puts in
 * every pod (or FLOE_CONFIG, or a file), read with jansson and checked strictly, and the
 * lookups the master and the rendezvous need (a task by "/job:J/task:T", the task of a device
 * name). Every error starts with where the text came from and the field's path
 * ("TF_CONFIG: cluster.worker[1]: ..."), then says what to do. */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dist.h"

/* ------------------------------------------------------------------------------------ */
/* Addresses */

/* s[0..n) as a string in buf; false when it is empty or does not fit. */
static bool copy_text(char *buf, size_t cap, const char *s, size_t n) {
  if (n == 0 || n >= cap) return false;
  memcpy(buf, s, n);
  buf[n] = '\0';
  return true;
}

static bool all_digits_dots(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isdigit((unsigned char)s[i]) && s[i] != '.') return false;
  return n > 0;
}

/* RFC 1123 host names: labels of 1-63 letters, digits and '-', not starting or ending with
 * '-', joined by single dots. */
static const char *hostname_problem(const char *s, size_t n) {
  if (n > FLOE__HOST_MAX) return "a host name is at most 253 characters";
  size_t label = 0;
  for (size_t i = 0; i <= n; i++) {
    char c = i < n ? s[i] : '.';
    if (c == '.') {
      if (label == 0) return "a host name has an empty label (two dots, or a dot at an end)";
      if (s[i - 1] == '-') return "a host name label ends with '-'";
      label = 0;
      continue;
    }
    if (!isalnum((unsigned char)c) && c != '-')
      return "a host name holds only letters, digits, '-' and '.'";
    if (label == 0 && c == '-') return "a host name label starts with '-'";
    if (++label > 63) return "a host name label is at most 63 characters";
  }
  return NULL;
}

floe_code floe__hostport_parse(const char *addr, bool allow_port0, const char *what,
                               char host[FLOE__HOST_MAX + 1], int *port, FloeStatus *st) {
  host[0] = '\0';
  *port = 0;
  if (!addr || !*addr)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "%s: the address is empty: give host:port (\"10.0.0.2:2222\")", what);
  const char *h, *colon;
  size_t hn;
  if (addr[0] == '[') {
    const char *close = strchr(addr, ']');
    if (!close)
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "%s: \"%.300s\" opens '[' without ']': write IPv6 as [::1]:port", what,
                             addr);
    h = addr + 1;
    hn = (size_t)(close - h);
    colon = close + 1;
    if (*colon != ':')
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "%s: \"%.300s\" has no :port after the ']': write [::1]:2222", what, addr);
    char tmp[64];
    struct in6_addr a6;
    if (!copy_text(tmp, sizeof tmp, h, hn) || inet_pton(AF_INET6, tmp, &a6) != 1)
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "%s: \"%.300s\": the part in brackets is not an IPv6 address", what,
                             addr);
  } else {
    colon = strrchr(addr, ':');
    if (!colon)
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "%s: \"%.300s\" has no port: give host:port (\"%.300s:2222\")", what, addr,
                             addr);
    if (memchr(addr, ':', (size_t)(colon - addr)))
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "%s: \"%.300s\": an IPv6 address goes in brackets ([::1]:2222)", what,
                             addr);
    h = addr;
    hn = (size_t)(colon - addr);
    if (hn == 0)
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "%s: \"%.300s\" has no host before the ':'", what, addr);
    if (all_digits_dots(h, hn)) {
      char tmp[16];
      struct in_addr a4;
      if (!copy_text(tmp, sizeof tmp, h, hn) || inet_pton(AF_INET, tmp, &a4) != 1)
        return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                               "%s: \"%.300s\": %.*s is not an IPv4 address (four numbers 0-255, "
                               "no leading zeros)",
                               what, addr, (int)(hn > 64 ? 64 : hn), h);
    } else {
      const char *why = hostname_problem(h, hn);
      if (why)
        return floe_status_set(st, FLOE_INVALID_ARGUMENT, "%s: \"%.300s\": %s", what, addr, why);
    }
  }
  const char *p = colon + 1;
  size_t pn = strlen(p);
  long v = 0;
  bool ok = pn >= 1 && pn <= 5 && !(pn > 1 && p[0] == '0');
  for (size_t i = 0; ok && i < pn; i++) {
    if (!isdigit((unsigned char)p[i])) ok = false;
    else v = v * 10 + (p[i] - '0');
  }
  if (!ok || v > 65535 || (v == 0 && !allow_port0))
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "%s: \"%.300s\": the port \"%.*s\" is not a number from %d to 65535",
                           what, addr,
                           (int)(pn > 16 ? 16 : pn), p, allow_port0 ? 0 : 1);
  memcpy(host, h, hn);
  host[hn] = '\0';
  *port = (int)v;
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* Specs */

void floe__cluster_free(FloeClusterSpec *spec) {
  if (!spec) return;
  for (int j = 0; j < spec->num_jobs; j++) {
    FloeClusterJob *job = &spec->jobs[j];
    for (int t = 0; t < job->num_tasks; t++) {
      floe__free(job->tasks[t].address);
      floe__free(job->tasks[t].host);
    }
    floe__free(job->tasks);
    floe__free(job->name);
  }
  floe__free(spec->jobs);
  floe__free(spec->source);
  floe__free(spec);
}

static const char *job_name_problem(const char *s) {
  size_t n = strlen(s);
  if (n == 0) return "a job name is empty";
  if (n > FLOE__JOB_NAME_MAX) return "a job name is at most 63 characters";
  if (!(s[0] >= 'a' && s[0] <= 'z')) return "a job name starts with a lower-case letter";
  for (size_t i = 1; i < n; i++)
    if (!((s[i] >= 'a' && s[i] <= 'z') || isdigit((unsigned char)s[i]) || s[i] == '_'))
      return "a job name holds only lower-case letters, digits and '_'";
  return NULL;
}

static FloeClusterSpec *spec_new(const char *source, FloeStatus *st) {
  FloeClusterSpec *spec = floe__calloc(1, sizeof *spec);
  if (!spec || !(spec->source = floe__strdup(source))) {
    floe__free(spec);
    floe_status_set(st, FLOE_NO_MEMORY, "%s: out of memory reading the cluster spec", source);
    return NULL;
  }
  spec->self.job = -1;
  spec->self.task = -1;
  return spec;
}

/* Appends a job of n tasks (their addresses filled by the caller with task_set). */
static FloeClusterJob *spec_add_job(FloeClusterSpec *spec, const char *name, int n,
                                    FloeStatus *st) {
  FloeClusterJob *jobs = floe__realloc(spec->jobs, (size_t)(spec->num_jobs + 1) * sizeof *jobs);
  if (!jobs) goto err_oom;
  spec->jobs = jobs;
  FloeClusterJob *job = &jobs[spec->num_jobs];
  memset(job, 0, sizeof *job);
  job->name = floe__strdup(name);
  job->tasks = floe__calloc((size_t)n, sizeof *job->tasks);
  if (!job->name || !job->tasks) {
    floe__free(job->name);
    floe__free(job->tasks);
    goto err_oom;
  }
  job->num_tasks = n;
  spec->num_jobs++;
  spec->num_tasks += n;
  return job;
err_oom:
  floe_status_set(st, FLOE_NO_MEMORY, "%s: out of memory reading the cluster spec", spec->source);
  return NULL;
}

static floe_code task_set(const FloeClusterSpec *spec, FloeClusterTask *t, const char *addr,
                          const char *path, FloeStatus *st) {
  char host[FLOE__HOST_MAX + 1];
  int port;
  char *what = floe__asprintf("%s: %s", spec->source, path);
  if (!what) return floe_status_set(st, FLOE_NO_MEMORY, "%s: out of memory", spec->source);
  floe_code rc = floe__hostport_parse(addr, false, what, host, &port, st);
  floe__free(what);
  if (rc != FLOE_OK) return rc;
  t->address = floe__strdup(addr);
  t->host = floe__strdup(host);
  t->port = port;
  if (!t->address || !t->host)
    return floe_status_set(st, FLOE_NO_MEMORY, "%s: out of memory", spec->source);
  return FLOE_OK;
}

/* A task's address as compared for duplicates: the host lower-cased, then the port. */
typedef struct AddrKey {
  char *key;
  int job, task;
} AddrKey;

static int addr_key_cmp(const void *a, const void *b) {
  const AddrKey *x = a, *y = b;
  int c = strcmp(x->key, y->key);
  if (c) return c;
  return x->job != y->job ? x->job - y->job : x->task - y->task;
}

static floe_code check_duplicates(const FloeClusterSpec *spec, FloeStatus *st) {
  if (spec->num_tasks < 2) return FLOE_OK;
  AddrKey *keys = floe__calloc((size_t)spec->num_tasks, sizeof *keys);
  floe_code rc = FLOE_OK;
  int n = 0;
  if (!keys) return floe_status_set(st, FLOE_NO_MEMORY, "%s: out of memory", spec->source);
  for (int j = 0; j < spec->num_jobs; j++)
    for (int t = 0; t < spec->jobs[j].num_tasks; t++) {
      const FloeClusterTask *task = &spec->jobs[j].tasks[t];
      char *k = floe__asprintf("%s]:%d", task->host, task->port);
      if (!k) {
        rc = floe_status_set(st, FLOE_NO_MEMORY, "%s: out of memory", spec->source);
        goto out;
      }
      for (char *p = k; *p; p++) *p = (char)tolower((unsigned char)*p);
      keys[n++] = (AddrKey){k, j, t};
    }
  qsort(keys, (size_t)n, sizeof *keys, addr_key_cmp);
  for (int i = 1; i < n; i++)
    if (strcmp(keys[i - 1].key, keys[i].key) == 0) {
      const AddrKey *a = &keys[i - 1], *b = &keys[i];
      rc = floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "%s: cluster.%s[%d] and cluster.%s[%d] have the same address %s: "
                           "every task needs its own host:port",
                           spec->source, spec->jobs[a->job].name, a->task,
                           spec->jobs[b->job].name, b->task,
                           spec->jobs[b->job].tasks[b->task].address);
      goto out;
    }
out:
  for (int i = 0; i < n; i++) floe__free(keys[i].key);
  floe__free(keys);
  return rc;
}

static floe_code set_self(FloeClusterSpec *spec, const char *job, json_int_t task,
                          const char *what, FloeStatus *st) {
  int j = floe__cluster_find_job(spec, job);
  if (j < 0) {
    char names[256];
    size_t used = 0;
    names[0] = '\0';
    for (int i = 0; i < spec->num_jobs && used < sizeof names; i++) {
      int w = snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "",
                       spec->jobs[i].name);
      if (w < 0) break;
      used += (size_t)w;
    }
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "%s: %s: job \"%.64s\" is not in the cluster (its jobs: %s)",
                           spec->source, what, job, names);
  }
  if (task < 0 || task >= spec->jobs[j].num_tasks)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "%s: %s: task %" JSON_INTEGER_FORMAT
                           " is out of range: job %s has %d task%s (0..%d)",
                           spec->source, what, task, job, spec->jobs[j].num_tasks,
                           spec->jobs[j].num_tasks == 1 ? "" : "s", spec->jobs[j].num_tasks - 1);
  spec->self.job = j;
  spec->self.task = (int)task;
  return FLOE_OK;
}

static floe_code parse_cluster(FloeClusterSpec *spec, json_t *cluster, FloeStatus *st) {
  const char *src = spec->source;
  if (!json_is_object(cluster))
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "%s: cluster is not an object: give {\"worker\": [\"host:port\", "
                           "...], ...}",
                           src);
  if (json_object_size(cluster) == 0)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "%s: cluster has no jobs: give at least one, such as "
                           "{\"worker\": [\"localhost:2222\"]}",
                           src);
  const char *name;
  json_t *list;
  json_object_foreach(cluster, name, list) {
    const char *why = job_name_problem(name);
    if (why)
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "%s: cluster.\"%.64s\": %s ([a-z][a-z0-9_]*, at most 63)", src,
                             name, why);
    if (json_is_object(list))
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "%s: cluster.%s is an object: sparse task maps ({\"0\": ...}) are "
                             "not supported; give a list of addresses",
                             src, name);
    if (!json_is_array(list))
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "%s: cluster.%s is not a list: give [\"host:port\", ...]", src,
                             name);
    size_t n = json_array_size(list);
    if (n == 0)
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "%s: cluster.%s is empty: a job has at least one task (or leave "
                             "the job out)",
                             src, name);
    if (n > FLOE__CLUSTER_MAX_TASKS || (size_t)spec->num_tasks + n > FLOE__CLUSTER_MAX_TASKS)
      return floe_status_set(st, FLOE_RESOURCE_EXHAUSTED,
                             "%s: cluster.%s: more than %d tasks in the cluster (Floe's limit)",
                             src, name, FLOE__CLUSTER_MAX_TASKS);
    FloeClusterJob *job = spec_add_job(spec, name, (int)n, st);
    if (!job) return floe_status_code(st);
    for (size_t i = 0; i < n; i++) {
      json_t *a = json_array_get(list, i);
      char path[96];
      snprintf(path, sizeof path, "cluster.%s[%zu]", name, i);
      if (!json_is_string(a))
        return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                               "%s: %s is not a string: give \"host:port\"", src, path);
      if (strlen(json_string_value(a)) != json_string_length(a))
        return floe_status_set(st, FLOE_INVALID_ARGUMENT, "%s: %s holds a NUL character", src,
                               path);
      floe_code rc = task_set(spec, &job->tasks[i], json_string_value(a), path, st);
      if (rc != FLOE_OK) return rc;
    }
  }
  return check_duplicates(spec, st);
}

static floe_code parse_task(FloeClusterSpec *spec, json_t *task, FloeStatus *st) {
  const char *src = spec->source;
  if (!json_is_object(task))
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "%s: task is not an object: give {\"type\": \"worker\", \"index\": 0}",
                           src);
  const char *key;
  json_t *v;
  json_object_foreach(task, key, v) {
    if (strcmp(key, "type") != 0 && strcmp(key, "index") != 0)
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "%s: task.\"%.64s\" is not a field of a task (type, index)", src,
                             key);
  }
  json_t *type = json_object_get(task, "type"), *index = json_object_get(task, "index");
  if (!json_is_string(type))
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "%s: task.type is %s: give the job's name (\"worker\")", src,
                           type ? "not a string" : "missing");
  if (!json_is_integer(index))
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "%s: task.index is %s: give the task's index in its job (0, 1, ...)",
                           src, index ? "not an integer" : "missing");
  return set_self(spec, json_string_value(type), json_integer_value(index), "task", st);
}

/* root: TF_CONFIG's object, or (bare_ok) the cluster object alone. job (NULL: none) and
 * task override root's "task". */
static floe_code parse_root(FloeClusterSpec *spec, json_t *root, bool bare_ok, const char *job,
                            int task, FloeStatus *st) {
  const char *src = spec->source;
  if (!json_is_object(root))
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "%s: the spec is not a JSON object: give {\"cluster\": {...}, "
                           "\"task\": {...}}",
                           src);
  json_t *cluster = json_object_get(root, "cluster");
  floe_code rc;
  if (!cluster && bare_ok) {
    rc = parse_cluster(spec, root, st);
  } else {
    if (!cluster)
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "%s: no \"cluster\": give {\"cluster\": {\"worker\": "
                             "[\"host:port\", ...]}, \"task\": {\"type\": \"worker\", "
                             "\"index\": 0}}",
                             src);
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
      bool str_ok = strcmp(key, "environment") == 0 || strcmp(key, "rpc_layer") == 0;
      if (str_ok && !json_is_string(v))
        return floe_status_set(st, FLOE_INVALID_ARGUMENT, "%s: %s is not a string", src, key);
      if (!str_ok && strcmp(key, "cluster") != 0 && strcmp(key, "task") != 0)
        return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                               "%s: \"%.64s\" is not a field of a cluster spec (cluster, task, "
                               "environment, rpc_layer)",
                               src, key);
    }
    rc = parse_cluster(spec, cluster, st);
    json_t *t = json_object_get(root, "task");
    if (rc == FLOE_OK && t && !job) rc = parse_task(spec, t, st);
  }
  if (rc == FLOE_OK && job) {
    char what[128];
    snprintf(what, sizeof what, "the task given (/job:%.64s/task:%d)", job, task);
    rc = set_self(spec, job, task, what, st);
  }
  return rc;
}

static floe_code parse_text(const char *json, size_t len, const char *source, bool bare_ok,
                            const char *job, int task, FloeClusterSpec **out, FloeStatus *st) {
  *out = NULL;
  if (!source) source = "cluster spec";
  if (!json)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT, "%s: the spec text is NULL", source);
  if (len > FLOE__CLUSTER_MAX_BYTES)
    return floe_status_set(st, FLOE_RESOURCE_EXHAUSTED,
                           "%s: %zu bytes, more than the %u a cluster spec may have", source, len,
                           FLOE__CLUSTER_MAX_BYTES);
  size_t bad = floe__utf8_check(json, len);
  if (bad != len)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "%s: not UTF-8 at byte offset %zu: a cluster spec is JSON text",
                           source, bad);
  FloeClusterSpec *spec = spec_new(source, st);
  if (!spec) return FLOE_NO_MEMORY;
  json_error_t jerr;
  json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
  floe_code rc;
  if (!root) {
    rc = floe_status_set(st, FLOE_INVALID_ARGUMENT,
                         "%s: not valid JSON at line %d, column %d (byte offset %d): %s", source,
                         jerr.line, jerr.column, jerr.position, jerr.text);
    goto err_free_spec;
  }
  rc = parse_root(spec, root, bare_ok, job, task, st);
  json_decref(root);
  if (rc != FLOE_OK) goto err_free_spec;
  *out = spec;
  return FLOE_OK;
err_free_spec:
  floe__cluster_free(spec);
  return rc;
}

floe_code floe__cluster_parse(const char *json, size_t len, const char *source,
                              FloeClusterSpec **out, FloeStatus *st) {
  return parse_text(json, len, source, false, NULL, -1, out, st);
}

floe_code floe__cluster_from_env(FloeClusterSpec **out, FloeStatus *st) {
  *out = NULL;
  /* An empty variable counts as unset, as TensorFlow reads an empty TF_CONFIG. */
  static const char *const vars[] = {"FLOE_CONFIG", "TF_CONFIG"};
  for (size_t i = 0; i < FLOE__ARRAY_LEN(vars); i++) {
    const char *v = getenv(vars[i]);
    if (v && *v) return floe__cluster_parse(v, strlen(v), vars[i], out, st);
  }
  return floe_status_set(st, FLOE_NOT_FOUND,
                         "no cluster spec: neither FLOE_CONFIG nor TF_CONFIG is set (set one to "
                         "{\"cluster\": {...}, \"task\": {...}}, or give a cluster file)");
}

floe_code floe__cluster_from_file(const char *path, const char *job, int task,
                                  FloeClusterSpec **out, FloeStatus *st) {
  *out = NULL;
  if (!path) return floe_status_set(st, FLOE_INVALID_ARGUMENT, "cluster file: the path is NULL");
  int fd;
  uint64_t size;
  floe_code rc = floe__file_open_read(path, &fd, &size, st);
  if (rc != FLOE_OK) return rc;
  if (size > FLOE__CLUSTER_MAX_BYTES) {
    close(fd);
    return floe_status_set(st, FLOE_RESOURCE_EXHAUSTED,
                           "%s: %" PRIu64 " bytes, more than the %u a cluster spec may have: is "
                           "this the right file?",
                           path, size, FLOE__CLUSTER_MAX_BYTES);
  }
  char *buf = floe__malloc((size_t)size + 1);
  size_t n = 0;
  if (!buf) {
    close(fd);
    return floe_status_set(st, FLOE_NO_MEMORY, "%s: out of memory", path);
  }
  /* Read one byte past the size seen, so a file that grew since is noticed. */
  while (n <= size) {
    ssize_t r = read(fd, buf + n, (size_t)size + 1 - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      rc = floe__status_from_errno(st, errno, "%s: read error at offset %zu", path, n);
      break;
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  close(fd);
  if (rc == FLOE_OK && n > size)
    rc = floe_status_set(st, FLOE_ABORTED, "%s: the file grew while it was read: try again",
                         path);
  if (rc == FLOE_OK) rc = parse_text(buf, n, path, true, job, task, out, st);
  floe__free(buf);
  return rc;
}

floe_code floe__cluster_from_addresses(const char *const *addresses, int n, int rank, int num_ps,
                                       const char *source, FloeClusterSpec **out,
                                       FloeStatus *st) {
  *out = NULL;
  if (!source) source = "cluster";
  if (n < 1 || n > FLOE__CLUSTER_MAX_TASKS || rank < 0 || rank >= n)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "%s: %d tasks and rank %d: give 1 to %d tasks and a rank among them",
                           source, n, rank, FLOE__CLUSTER_MAX_TASKS);
  if (num_ps < 0 || num_ps > n - 1)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "%s: %d ps tasks asked for (FLOE_PS_TASKS) in a job of %d ranks: rank "
                           "0 is the chief, so at most %d can be ps tasks",
                           source, num_ps, n, n - 1);
  FloeClusterSpec *spec = spec_new(source, st);
  if (!spec) return FLOE_NO_MEMORY;
  floe_code rc = FLOE_NO_MEMORY;
  FloeClusterJob *chief = spec_add_job(spec, "chief", 1, st);
  if (!chief) goto err_free_spec;
  if ((rc = task_set(spec, &chief->tasks[0], addresses[0], "rank 0", st)) != FLOE_OK)
    goto err_free_spec;
  int nw = n - 1 - num_ps;
  if ((num_ps > 0 && !spec_add_job(spec, "ps", num_ps, st)) ||
      (nw > 0 && !spec_add_job(spec, "worker", nw, st))) {
    rc = FLOE_NO_MEMORY;
    goto err_free_spec;
  }
  /* (after both: adding a job may move the jobs array) */
  FloeClusterJob *ps = num_ps > 0 ? &spec->jobs[1] : NULL;
  FloeClusterJob *worker = nw > 0 ? &spec->jobs[num_ps > 0 ? 2 : 1] : NULL;
  for (int r = 1; r < n; r++) {
    char what[32];
    snprintf(what, sizeof what, "rank %d", r);
    FloeClusterTask *t = r <= num_ps ? &ps->tasks[r - 1] : &worker->tasks[r - 1 - num_ps];
    if ((rc = task_set(spec, t, addresses[r], what, st)) != FLOE_OK) goto err_free_spec;
  }
  if ((rc = check_duplicates(spec, st)) != FLOE_OK) goto err_free_spec;
  /* jobs in order: chief, ps (when any), worker (when any) */
  if (rank == 0) {
    spec->self.job = 0, spec->self.task = 0;
  } else if (rank <= num_ps) {
    spec->self.job = 1, spec->self.task = rank - 1;
  } else {
    spec->self.job = num_ps > 0 ? 2 : 1, spec->self.task = rank - 1 - num_ps;
  }
  *out = spec;
  return FLOE_OK;
err_free_spec:
  floe__cluster_free(spec);
  return rc;
}

/* ------------------------------------------------------------------------------------ */
/* Lookups */

int floe__cluster_find_job(const FloeClusterSpec *spec, const char *name) {
  if (!spec || !name) return -1;
  for (int j = 0; j < spec->num_jobs; j++)
    if (strcmp(spec->jobs[j].name, name) == 0) return j;
  return -1;
}

const char *floe__cluster_address(const FloeClusterSpec *spec, FloeTaskRef ref) {
  if (!spec || ref.job < 0 || ref.job >= spec->num_jobs || ref.task < 0 ||
      ref.task >= spec->jobs[ref.job].num_tasks)
    return NULL;
  return spec->jobs[ref.job].tasks[ref.task].address;
}

char *floe__cluster_task_name(const FloeClusterSpec *spec, FloeTaskRef ref, char *buf,
                              size_t cap) {
  if (floe__cluster_address(spec, ref))
    snprintf(buf, cap, "/job:%s/task:%d", spec->jobs[ref.job].name, ref.task);
  else
    snprintf(buf, cap, "(no task %d of job %d)", ref.task, ref.job);
  return buf;
}

floe_code floe__cluster_task_of_device(const FloeClusterSpec *spec, const FloeDeviceName *dn,
                                       FloeTaskRef *out, FloeStatus *st) {
  out->job = out->task = -1;
  if (!spec || !dn)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT, "the cluster spec or device name is NULL");
  if (dn->replica > 0)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "/job:%s/replica:%d/...: Floe's clusters have replica 0 only "
                           "(replicas are tasks of a job)",
                           dn->job[0] ? dn->job : "?", dn->replica);
  int j = dn->job[0] ? floe__cluster_find_job(spec, dn->job) : -1;
  bool local = !dn->job[0] || (j < 0 && strcmp(dn->job, "localhost") == 0);
  if (local) {
    if (spec->self.job < 0)
      return floe_status_set(st, FLOE_FAILED_PRECONDITION,
                             "a device name without a job (or /job:localhost) means this "
                             "task, and %s names no task for this process: give its task",
                             spec->source);
    if (dn->task > 0 && dn->job[0])
      return floe_status_set(st, FLOE_NOT_FOUND,
                             "/job:localhost/task:%d: localhost has task 0 only", dn->task);
    *out = spec->self;
    return FLOE_OK;
  }
  if (j < 0) {
    char names[256];
    size_t used = 0;
    names[0] = '\0';
    for (int i = 0; i < spec->num_jobs && used < sizeof names; i++) {
      int w = snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "",
                       spec->jobs[i].name);
      if (w < 0) break;
      used += (size_t)w;
    }
    return floe_status_set(st, FLOE_NOT_FOUND, "/job:%s is not a job of %s (its jobs: %s)",
                           dn->job, spec->source, names);
  }
  const FloeClusterJob *job = &spec->jobs[j];
  int t = dn->task;
  if (t < 0) {
    if (job->num_tasks != 1)
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "/job:%s names no task and the job has %d: say which "
                             "(/job:%s/task:N)",
                             dn->job, job->num_tasks, dn->job);
    t = 0;
  }
  if (t >= job->num_tasks)
    return floe_status_set(st, FLOE_NOT_FOUND, "/job:%s/task:%d: job %s has %d task%s (0..%d)",
                           dn->job, t, dn->job, job->num_tasks, job->num_tasks == 1 ? "" : "s",
                           job->num_tasks - 1);
  out->job = j;
  out->task = t;
  return FLOE_OK;
}

floe_code floe__cluster_lookup(const FloeClusterSpec *spec, const char *name, FloeTaskRef *out,
                               FloeStatus *st) {
  out->job = out->task = -1;
  FloeDeviceName dn;
  floe_code rc = floe_device_name_parse(name, &dn, st);
  if (rc != FLOE_OK) return rc;
  if (!dn.job[0])
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "\"%s\" names no job: give /job:J/task:T", name);
  return floe__cluster_task_of_device(spec, &dn, out, st);
}
