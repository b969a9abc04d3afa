/* SPDX-License-Identifier: Apache-2.0 */
/* pmix.c - the cluster under a PMIx launcher (Open MPI's mpirun, Slurm's srun).
 *
 * libpmix.so.2 is dlopened here at run time, only when the environment shows a launcher, and
 * libfloe never links it: a machine without PMIx runs Floe as before. pmix.h (libpmix-dev at
 * build time) gives only the types and constants; every function comes from dlsym, and no
 * macro of pmix.h that calls into the library is used. Each rank publishes one blob (its
 * "host:port"), commits, joins a fence that collects the data, then reads every rank's. */
#include "config.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

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
  if (p->initialized) p->finalize(NULL, 0);
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
  p->lib = dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (!p->lib) {
    const char *why = dlerror();
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
      {"PMIx_Error_string", (void **)&p->error_string, true},
      {"PMIx_Value_destruct", (void **)&p->value_destruct, true},
  };
  for (size_t i = 0; i < FLOE__ARRAY_LEN(fns); i++) {
    *fns[i].slot = dlsym(p->lib, fns[i].name);
    if (!*fns[i].slot && !fns[i].optional) {
      floe_status_set(st, FLOE_UNAVAILABLE,
                      "%s has no %s: not a PMIx library of version 3 or later", library,
                      fns[i].name);
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

#endif /* FLOE_HAVE_PMIX_H */

floe_code floe__cluster_from_pmix(const char *my_address, FloeClusterSpec **out,
                                  FloeStatus *st) {
  *out = NULL;
  char host[FLOE__HOST_MAX + 1];
  int port, rank, size;
  floe_code rc = floe__hostport_parse(my_address, false, "this task's address", host, &port, st);
  if (rc != FLOE_OK) return rc;
  FloePmix *p;
  if ((rc = floe__pmix_open(NULL, &p, &rank, &size, st)) != FLOE_OK) return rc;
  uint8_t **blobs = NULL;
  size_t *lens = NULL;
  rc = floe__pmix_allgather(p, "floe.address.v1", my_address, strlen(my_address), &blobs, &lens,
                            st);
  floe__pmix_close(p);
  if (rc != FLOE_OK) return rc;
  const char **addrs = floe__calloc((size_t)size, sizeof *addrs);
  char source[128];
  snprintf(source, sizeof source, "PMIx (namespace %.64s, rank %d of %d)",
           getenv("PMIX_NAMESPACE") ? getenv("PMIX_NAMESPACE") : "?", rank, size);
  if (!addrs) {
    rc = floe_status_set(st, FLOE_NO_MEMORY, "%s: out of memory", source);
  } else {
    for (int r = 0; r < size; r++) {
      /* A blob with a NUL inside is cut there, and then refused as an address. */
      addrs[r] = (const char *)blobs[r];
    }
    rc = floe__cluster_from_addresses(addrs, size, rank, source, out, st);
  }
  floe__free(addrs);
  for (int r = 0; r < size; r++) floe__free(blobs[r]);
  floe__free(blobs);
  floe__free(lens);
  return rc;
}
