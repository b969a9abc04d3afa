/* SPDX-License-Identifier: Apache-2.0 */
/* pmix.c - the cluster under a PMIx launcher (Open MPI's mpirun, Slurm's srun).
 *
 * libpmix.so.2 is dlopened here at run time, only when the environment shows a launcher, and
 * libfloe never links it: a machine without PMIx runs Floe as before. pmix.h (libpmix-dev at
 * build time) gives only the types and constants; every function comes from dlsym, and no
 * macro of pmix.h that calls into the library is used. Each rank publishes one blob (its
 * "host:port"), commits, joins a fence that collects the data, then reads every rank's. */
#include "config.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <pthread.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dist.h"

#define BLOB_MAX (64u << 10)

bool floe__pmix_detect(void) {
  const char *rank = getenv("PMIX_RANK"), *ns = getenv("PMIX_NAMESPACE");
  return rank && *rank && ns && *ns;
}

#ifndef FLOE_HAVE_PMIX_H

floe_code floe__pmix_open(const char *library, FloePmix **out, int *rank, int *size,
                          FloeStatus *st) {
  (void)library;
  *out = NULL;
  *rank = *size = 0;
  return floe_status_set(st, FLOE_UNIMPLEMENTED,
                         "this Floe was built without PMIx (pmix.h was not found at build "
                         "time: install libpmix-dev and rebuild), so it cannot join the "
                         "launcher's job; give a cluster spec (TF_CONFIG) instead");
}
floe_code floe__pmix_allgather(FloePmix *p, const char *key, const void *blob, size_t len,
                               uint8_t ***blobs, size_t **lens, FloeStatus *st) {
  (void)p, (void)key, (void)blob, (void)len;
  *blobs = NULL;
  *lens = NULL;
  return floe_status_set(st, FLOE_UNIMPLEMENTED, "this Floe was built without PMIx");
}
void floe__pmix_close(FloePmix *p) {
  (void)p;
}
static bool all_ranks_local(FloePmix *p, int size) {
  (void)p, (void)size;
  return false;
}
floe_code floe__pmix_fence_nb(FloePmix *p, FloePmixDoneFn done, void *arg, FloeStatus *st) {
  (void)p, (void)done, (void)arg;
  return floe_status_set(st, FLOE_UNIMPLEMENTED, "this Floe was built without PMIx");
}
floe_code floe__pmix_fence(FloePmix *p, FloeStatus *st) {
  (void)p;
  return floe_status_set(st, FLOE_UNIMPLEMENTED, "this Floe was built without PMIx");
}

#else /* FLOE_HAVE_PMIX_H */

#include <pmix.h>

struct FloePmix {
  void *lib;
  pmix_proc_t self;
  int size;
  bool initialized;
  __typeof__(PMIx_Init) *init;
  __typeof__(PMIx_Finalize) *finalize;
  __typeof__(PMIx_Get) *get;
  __typeof__(PMIx_Put) *put;
  __typeof__(PMIx_Commit) *commit;
  __typeof__(PMIx_Fence) *fence;
  __typeof__(PMIx_Fence_nb) *fence_nb;
  /* floe__pmix_fence_nb's callback; under mu: close clears it, so none runs after */
  pthread_mutex_t mu;
  FloePmixDoneFn done;
  void *done_arg;
  __typeof__(PMIx_Error_string) *error_string;  /* may be NULL */
  __typeof__(PMIx_Value_destruct) *value_destruct; /* may be NULL */
};

static const char *pmix_err(const FloePmix *p, pmix_status_t s, char *buf, size_t cap) {
  const char *e = p->error_string ? p->error_string(s) : NULL;
  snprintf(buf, cap, "%s (PMIx status %d)", e ? e : "error", (int)s);
  return buf;
}

/* Frees a value PMIx_Get returned (malloc'd by libpmix, freed with its own destructor). */
static void value_release(const FloePmix *p, pmix_value_t *v) {
  if (!v) return;
  if (p->value_destruct) {
    p->value_destruct(v);
  } else if (v->type == PMIX_STRING) {
    free(v->data.string);
  } else if (v->type == PMIX_BYTE_OBJECT) {
    free(v->data.bo.bytes);
  }
  free(v);
}

void floe__pmix_close(FloePmix *p) {
  if (!p) return;
  /* A fence posted and never completed (this rank stops first) must not call back into a
   * caller that is going away; finalizing waits for a callback already running. */
  pthread_mutex_lock(&p->mu);
  p->done = NULL;
  pthread_mutex_unlock(&p->mu);
  if (p->initialized) p->finalize(NULL, 0);
  pthread_mutex_destroy(&p->mu);
  /* The library stays loaded: PMIx leaves threads and handlers behind that dlclose would
   * pull the code from under. */
  floe__free(p);
}

floe_code floe__pmix_open(const char *library, FloePmix **out, int *rank, int *size,
                          FloeStatus *st) {
  *out = NULL;
  *rank = *size = 0;
  if (!library) library = "libpmix.so.2";
  char eb[160];
  FloePmix *p = floe__calloc(1, sizeof *p);
  if (!p) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory starting PMIx");
  pthread_mutex_init(&p->mu, NULL);
  p->lib = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (!p->lib) {
    const char *why = dlerror();
    pthread_mutex_destroy(&p->mu);
    floe__free(p);
    return floe_status_set(st, FLOE_UNAVAILABLE,
                           "PMIx launcher seen (PMIX_RANK=%s) but %s cannot be loaded: %s "
                           "(install libpmix2, or start the tasks with a cluster spec)",
                           getenv("PMIX_RANK") ? getenv("PMIX_RANK") : "?", library,
                           why ? why : "unknown error");
  }
  struct {
    const char *name;
    void **slot;
    bool optional;
  } fns[] = {
      {"PMIx_Init", (void **)&p->init, false},
      {"PMIx_Finalize", (void **)&p->finalize, false},
      {"PMIx_Get", (void **)&p->get, false},
      {"PMIx_Put", (void **)&p->put, false},
      {"PMIx_Commit", (void **)&p->commit, false},
      {"PMIx_Fence", (void **)&p->fence, false},
      {"PMIx_Fence_nb", (void **)&p->fence_nb, false},
      {"PMIx_Error_string", (void **)&p->error_string, true},
      {"PMIx_Value_destruct", (void **)&p->value_destruct, true},
  };
  for (size_t i = 0; i < FLOE__ARRAY_LEN(fns); i++) {
    *fns[i].slot = dlsym(p->lib, fns[i].name);
    if (!*fns[i].slot && !fns[i].optional) {
      floe_status_set(st, FLOE_UNAVAILABLE,
                      "%s has no %s: not a PMIx library of version 3 or later", library,
                      fns[i].name);
      pthread_mutex_destroy(&p->mu);
      floe__free(p);
      return FLOE_UNAVAILABLE;
    }
  }
  pmix_status_t s = p->init(&p->self, NULL, 0);
  if (s != PMIX_SUCCESS) {
    floe_status_set(st, FLOE_UNAVAILABLE,
                    "PMIx_Init failed: %s: the launcher's PMIx server is not reachable "
                    "(PMIX_NAMESPACE=%s)",
                    pmix_err(p, s, eb, sizeof eb),
                    getenv("PMIX_NAMESPACE") ? getenv("PMIX_NAMESPACE") : "?");
    pthread_mutex_destroy(&p->mu);
    floe__free(p);
    return FLOE_UNAVAILABLE;
  }
  p->initialized = true;
  pmix_proc_t job;
  memset(&job, 0, sizeof job);
  memcpy(job.nspace, p->self.nspace, sizeof job.nspace);
  job.rank = PMIX_RANK_WILDCARD;
  pmix_value_t *v = NULL;
  s = p->get(&job, PMIX_JOB_SIZE, NULL, 0, &v);
  if (s != PMIX_SUCCESS || !v || v->type != PMIX_UINT32 || v->data.uint32 < 1 ||
      v->data.uint32 > FLOE__CLUSTER_MAX_TASKS || p->self.rank >= v->data.uint32) {
    floe_status_set(st, FLOE_UNAVAILABLE,
                    "PMIx: the job's size (%s) is %s", PMIX_JOB_SIZE,
                    s != PMIX_SUCCESS ? pmix_err(p, s, eb, sizeof eb)
                                      : "missing, not a uint32, or out of range (1..4096)");
    value_release(p, v);
    floe__pmix_close(p);
    return FLOE_UNAVAILABLE;
  }
  p->size = (int)v->data.uint32;
  value_release(p, v);
  *rank = (int)p->self.rank;
  *size = p->size;
  *out = p;
  return FLOE_OK;
}

floe_code floe__pmix_allgather(FloePmix *p, const char *key, const void *blob, size_t len,
                               uint8_t ***blobs_out, size_t **lens_out, FloeStatus *st) {
  *blobs_out = NULL;
  *lens_out = NULL;
  char eb[160];
  if (len > BLOB_MAX || !key || strlen(key) > PMIX_MAX_KEYLEN)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "PMIx: a blob of %zu bytes under key %s: at most %u bytes and a key "
                           "of at most %d characters",
                           len, key ? key : "(null)", BLOB_MAX, PMIX_MAX_KEYLEN);
  pmix_value_t val;
  memset(&val, 0, sizeof val);
  val.type = PMIX_BYTE_OBJECT;
  val.data.bo.bytes = (char *)blob;
  val.data.bo.size = len;
  pmix_status_t s = p->put(PMIX_GLOBAL, key, &val);
  if (s == PMIX_SUCCESS) s = p->commit();
  if (s != PMIX_SUCCESS)
    return floe_status_set(st, FLOE_UNAVAILABLE, "PMIx: publishing %s failed: %s", key,
                           pmix_err(p, s, eb, sizeof eb));
  pmix_info_t collect;
  memset(&collect, 0, sizeof collect);
  snprintf(collect.key, sizeof collect.key, "%s", PMIX_COLLECT_DATA);
  collect.value.type = PMIX_BOOL;
  collect.value.data.flag = true;
  pmix_proc_t all;
  memset(&all, 0, sizeof all);
  memcpy(all.nspace, p->self.nspace, sizeof all.nspace);
  all.rank = PMIX_RANK_WILDCARD;
  s = p->fence(&all, 1, &collect, 1);
  if (s != PMIX_SUCCESS)
    return floe_status_set(st, FLOE_UNAVAILABLE,
                           "PMIx: the fence after publishing %s failed: %s (did a rank end?)",
                           key, pmix_err(p, s, eb, sizeof eb));
  uint8_t **blobs = floe__calloc((size_t)p->size, sizeof *blobs);
  size_t *lens = floe__calloc((size_t)p->size, sizeof *lens);
  floe_code rc = FLOE_OK;
  if (!blobs || !lens) {
    rc = floe_status_set(st, FLOE_NO_MEMORY, "PMIx: out of memory");
    goto err_free;
  }
  for (int r = 0; r < p->size; r++) {
    pmix_proc_t who = all;
    who.rank = (pmix_rank_t)r;
    pmix_value_t *v = NULL;
    s = p->get(&who, key, NULL, 0, &v);
    if (s != PMIX_SUCCESS || !v || v->type != PMIX_BYTE_OBJECT || v->data.bo.size > BLOB_MAX) {
      rc = floe_status_set(st, FLOE_UNAVAILABLE, "PMIx: rank %d's %s is %s", r, key,
                           s != PMIX_SUCCESS ? pmix_err(p, s, eb, sizeof eb)
                                             : "not a byte object of at most 64 KiB");
      value_release(p, v);
      goto err_free;
    }
    lens[r] = v->data.bo.size;
    blobs[r] = floe__malloc(lens[r] + 1);
    if (!blobs[r]) {
      value_release(p, v);
      rc = floe_status_set(st, FLOE_NO_MEMORY, "PMIx: out of memory");
      goto err_free;
    }
    if (lens[r]) memcpy(blobs[r], v->data.bo.bytes, lens[r]);
    blobs[r][lens[r]] = 0;
    value_release(p, v);
  }
  *blobs_out = blobs;
  *lens_out = lens;
  return FLOE_OK;
err_free:
  for (int r = 0; blobs && r < p->size; r++) floe__free(blobs[r]);
  floe__free(blobs);
  floe__free(lens);
  return rc;
}

static void fence_done(pmix_status_t status, void *cbdata) {
  FloePmix *p = cbdata;
  pthread_mutex_lock(&p->mu);
  FloePmixDoneFn done = p->done;
  void *arg = p->done_arg;
  p->done = NULL;
  if (done) done(arg, status == PMIX_SUCCESS ? FLOE_OK : FLOE_UNAVAILABLE);
  pthread_mutex_unlock(&p->mu);
}

floe_code floe__pmix_fence_nb(FloePmix *p, FloePmixDoneFn done, void *arg, FloeStatus *st) {
  char eb[160];
  pmix_proc_t all;
  memset(&all, 0, sizeof all);
  memcpy(all.nspace, p->self.nspace, sizeof all.nspace);
  all.rank = PMIX_RANK_WILDCARD;
  pthread_mutex_lock(&p->mu);
  p->done = done;
  p->done_arg = arg;
  pthread_mutex_unlock(&p->mu);
  pmix_status_t s = p->fence_nb(&all, 1, NULL, 0, fence_done, p);
  if (s != PMIX_SUCCESS) {
    pthread_mutex_lock(&p->mu);
    p->done = NULL;
    pthread_mutex_unlock(&p->mu);
    return floe_status_set(st, FLOE_UNAVAILABLE, "PMIx: posting a fence failed: %s",
                           pmix_err(p, s, eb, sizeof eb));
  }
  return FLOE_OK;
}

floe_code floe__pmix_fence(FloePmix *p, FloeStatus *st) {
  char eb[160];
  pmix_proc_t all;
  memset(&all, 0, sizeof all);
  memcpy(all.nspace, p->self.nspace, sizeof all.nspace);
  all.rank = PMIX_RANK_WILDCARD;
  pmix_status_t s = p->fence(&all, 1, NULL, 0);
  if (s != PMIX_SUCCESS)
    return floe_status_set(st, FLOE_UNAVAILABLE, "PMIx: a fence failed: %s (did a rank end?)",
                           pmix_err(p, s, eb, sizeof eb));
  return FLOE_OK;
}

/* True when PMIx says every rank of the job runs on this node (PMIX_LOCAL_SIZE, the job's
 * ranks here, equals the job's size). Unknown counts as false: the rule for several nodes
 * is right on one node too. */
static bool all_ranks_local(FloePmix *p, int size) {
  pmix_proc_t job;
  memset(&job, 0, sizeof job);
  memcpy(job.nspace, p->self.nspace, sizeof job.nspace);
  job.rank = PMIX_RANK_WILDCARD;
  pmix_value_t *v = NULL;
  pmix_status_t s = p->get(&job, PMIX_LOCAL_SIZE, NULL, 0, &v);
  bool all = s == PMIX_SUCCESS && v && v->type == PMIX_UINT32 && v->data.uint32 == (uint32_t)size;
  value_release(p, v);
  return all;
}

#endif /* FLOE_HAVE_PMIX_H */

/* Publishes mine ("" when this rank could not listen: the others then fail naming it
 * instead of waiting for an address that never comes) and builds the spec from every rank's.
 * Collective. */
static floe_code gather_spec(FloePmix *p, int rank, int size, const char *mine,
                             FloeClusterSpec **out, FloeStatus *st) {
  uint8_t **blobs = NULL;
  size_t *lens = NULL;
  floe_code rc = floe__pmix_allgather(p, "floe.address.v1", mine, strlen(mine), &blobs, &lens,
                                      st);
  if (rc != FLOE_OK) return rc;
  const char **addrs = floe__calloc((size_t)size, sizeof *addrs);
  char source[128];
  snprintf(source, sizeof source, "PMIx (namespace %.64s, rank %d of %d)",
           getenv("PMIX_NAMESPACE") ? getenv("PMIX_NAMESPACE") : "?", rank, size);
  if (!addrs) {
    rc = floe_status_set(st, FLOE_NO_MEMORY, "%s: out of memory", source);
  } else if (!*mine) {
    rc = FLOE_UNKNOWN; /* the caller keeps its own error */
  } else {
    for (int r = 0; r < size && rc == FLOE_OK; r++) {
      /* A blob with a NUL inside is cut there, and then refused as an address. */
      addrs[r] = (const char *)blobs[r];
      if (lens[r] == 0)
        rc = floe_status_set(st, FLOE_UNAVAILABLE,
                             "%s: rank %d published no address: it could not listen (its "
                             "own error, on its stderr, says why)",
                             source, r);
    }
    /* FLOE_PS_TASKS=M: ranks 1..M are the ps tasks (floe train --ps-tasks sets it); every
     * rank runs the same command, so they agree. */
    const char *ps_env = getenv("FLOE_PS_TASKS");
    int num_ps = 0;
    if (rc == FLOE_OK && ps_env && *ps_env) {
      char *end = NULL;
      long v = strtol(ps_env, &end, 10);
      if (*end || v < 0 || v > FLOE__CLUSTER_MAX_TASKS)
        rc = floe_status_set(st, FLOE_INVALID_ARGUMENT, "FLOE_PS_TASKS=\"%.32s\" is not a number "
                             "of ps tasks (0 to %d)", ps_env, FLOE__CLUSTER_MAX_TASKS);
      num_ps = (int)v;
    }
    if (rc == FLOE_OK)
      rc = floe__cluster_from_addresses(addrs, size, rank, num_ps, source, out, st);
  }
  floe__free(addrs);
  for (int r = 0; r < size; r++) floe__free(blobs[r]);
  floe__free(blobs);
  floe__free(lens);
  return rc;
}

floe_code floe__cluster_from_pmix(const char *my_address, FloeClusterSpec **out,
                                  FloeStatus *st) {
  *out = NULL;
  char host[FLOE__HOST_MAX + 1];
  int port, rank, size;
  floe_code rc = floe__hostport_parse(my_address, false, "this task's address", host, &port, st);
  if (rc != FLOE_OK) return rc;
  FloePmix *p;
  if ((rc = floe__pmix_open(NULL, &p, &rank, &size, st)) != FLOE_OK) return rc;
  rc = gather_spec(p, rank, size, my_address, out, st);
  floe__pmix_close(p);
  return rc;
}

static bool is_loopback(const struct sockaddr *sa) {
  if (sa->sa_family == AF_INET)
    return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
  if (sa->sa_family == AF_INET6)
    return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
  return false;
}

/* FLOE_SERVER_HOST as an interface of this machine: its first IPv4 address, else its first
 * IPv6 one that is not link-local (which would need a scope). false when no interface has
 * that name; an interface without a usable address is an error. */
static bool interface_host(const char *name, char *host, size_t cap, floe_code *rc,
                           FloeStatus *st) {
  struct ifaddrs *ifs = NULL;
  if (getifaddrs(&ifs) != 0) return false;
  bool found = false;
  const struct sockaddr *v4 = NULL, *v6 = NULL;
  for (struct ifaddrs *i = ifs; i; i = i->ifa_next) {
    if (!i->ifa_name || strcmp(i->ifa_name, name) != 0) continue;
    found = true;
    const struct sockaddr *sa = i->ifa_addr;
    if (!sa) continue;
    if (sa->sa_family == AF_INET && !v4) v4 = sa;
    if (sa->sa_family == AF_INET6 && !v6 &&
        !IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6 *)sa)->sin6_addr))
      v6 = sa;
  }
  if (v4) {
    inet_ntop(AF_INET, &((const struct sockaddr_in *)v4)->sin_addr, host, (socklen_t)cap);
  } else if (v6) {
    inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)v6)->sin6_addr, host, (socklen_t)cap);
  } else if (found) {
    *rc = floe_status_set(st, FLOE_FAILED_PRECONDITION,
                          "FLOE_SERVER_HOST=%s: that interface has no IPv4 or global IPv6 "
                          "address: name another interface or an address",
                          name);
  }
  freeifaddrs(ifs);
  return found;
}

floe_code floe__pmix_host(bool all_local, char host[FLOE__HOST_MAX + 1], FloeStatus *st) {
  host[0] = '\0';
  const char *env = getenv("FLOE_SERVER_HOST");
  if (env && *env) {
    floe_code rc = FLOE_OK;
    if (interface_host(env, host, FLOE__HOST_MAX + 1, &rc, st)) return rc;
    size_t n = strlen(env);
    if (n >= 2 && env[0] == '[' && env[n - 1] == ']') env++, n -= 2; /* [v6] */
    if (n == 0 || n > FLOE__HOST_MAX || strchr(env, '%'))
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "FLOE_SERVER_HOST=%s: not an interface, host name or address of "
                             "this machine",
                             getenv("FLOE_SERVER_HOST"));
    memcpy(host, env, n);
    host[n] = '\0';
    if (strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0) {
      host[0] = '\0';
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "FLOE_SERVER_HOST=%s: the other ranks need an address they can "
                             "reach, not the wildcard: give this node's address or interface",
                             getenv("FLOE_SERVER_HOST"));
    }
    return FLOE_OK;
  }
  if (all_local) {
    snprintf(host, FLOE__HOST_MAX + 1, "127.0.0.1");
    return FLOE_OK;
  }
  char name[256];
  if (gethostname(name, sizeof name) != 0)
    return floe__status_from_errno(st, errno, "PMIx: the ranks run on several nodes and this "
                                   "host's name is unknown: set FLOE_SERVER_HOST");
  name[sizeof name - 1] = '\0';
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int e = getaddrinfo(name, NULL, &hints, &res);
  if (e != 0)
    return floe_status_set(st, FLOE_UNAVAILABLE,
                           "PMIx: the ranks run on several nodes and this host's name %s does "
                           "not resolve (%s): set FLOE_SERVER_HOST to this node's address or "
                           "interface (mpirun -x FLOE_SERVER_HOST=eth0)",
                           name, gai_strerror(e));
  floe_code rc = FLOE_OK;
  char num[INET6_ADDRSTRLEN] = "?";
  const struct sockaddr *sa = res->ai_addr;
  if (sa->sa_family == AF_INET)
    inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, num, sizeof num);
  else if (sa->sa_family == AF_INET6)
    inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, num, sizeof num);
  if (is_loopback(sa))
    rc = floe_status_set(st, FLOE_FAILED_PRECONDITION,
                         "PMIx: the ranks run on several nodes but this host's name %s resolves "
                         "to %s, a loopback address the other nodes cannot reach: set "
                         "FLOE_SERVER_HOST to this node's address or interface (mpirun -x "
                         "FLOE_SERVER_HOST=eth0)",
                         name, num);
  else
    snprintf(host, FLOE__HOST_MAX + 1, "%s", num);
  freeaddrinfo(res);
  return rc;
}

floe_code floe__cluster_listen_pmix(FloeClusterSpec **out, FloeListener **listener,
                                    FloePmix **pmix, FloeStatus *st) {
  *out = NULL;
  *listener = NULL;
  if (pmix) *pmix = NULL;
  FloePmix *p;
  int rank, size;
  floe_code rc = floe__pmix_open(NULL, &p, &rank, &size, st);
  if (rc != FLOE_OK) return rc;
  char host[FLOE__HOST_MAX + 1], addr[FLOE__HOST_MAX + 16];
  FloeListener *l = NULL;
  rc = floe__pmix_host(all_ranks_local(p, size), host, st);
  if (rc == FLOE_OK) {
    snprintf(addr, sizeof addr, strchr(host, ':') ? "[%s]:0" : "%s:0", host);
    rc = floe__listener_open(addr, &l, st);
    if (rc != FLOE_OK)
      floe__status_prefix(st, "PMIx rank %d: listening on %s (FLOE_SERVER_HOST picks another "
                          "host)", rank, host);
  } else {
    floe__status_prefix(st, "PMIx rank %d", rank);
  }
  /* Joined even after a failure here, so that the other ranks learn of it and end. */
  FloeStatus gst = {FLOE_OK, NULL};
  floe_code grc = gather_spec(p, rank, size, l ? floe__listener_address(l) : "", out,
                              rc == FLOE_OK ? st : &gst);
  floe_status_clear(&gst);
  if (rc == FLOE_OK) rc = grc;
  if (rc != FLOE_OK || !pmix) floe__pmix_close(p);
  if (rc != FLOE_OK) {
    floe__listener_close(l);
    floe__cluster_free(*out);
    *out = NULL;
    return rc;
  }
  *listener = l;
  if (pmix) *pmix = p;
  return FLOE_OK;
}
