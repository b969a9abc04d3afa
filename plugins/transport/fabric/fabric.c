/* SPDX-License-Identifier: Apache-2.0 */
/* fabric.c - the "fabric" transport on libfabric: contexts, address blobs, connections.
 *
 * A context is one reliable-datagram (FI_EP_RDM) endpoint with tagged messaging, opened on
 * the provider FLOE_FABRIC_PROVIDER names (default "tcp;ofi_rxm"; "shm"; "verbs;ofi_rxm" and
 * "efa" where fi_getinfo offers them). Socket-addressed providers bind the address
 * FLOE_FABRIC_HOST (default 127.0.0.1 for tcp) and port FLOE_FABRIC_PORT (default 0: any):
 * fi_getinfo never picks the interface.
 *
 * RDM has no connections, so connect and accept are a handshake over the endpoint itself:
 * connect puts the peer in the address vector and sends a hello (under a tag with the
 * reserved top bit) carrying this endpoint's name and a connection id; the listener side puts
 * the sender in its address vector, queues the connection for accept and answers with an ack.
 * Sends made before the ack wait in the plugin: a message that arrived before its sender was
 * in the receiver's address vector could never match a directed receive (shm records the
 * source at arrival). accept answers FLOE_UNAVAILABLE until a hello arrived, then gives a
 * receive comm whose receives match only that peer (FI_DIRECTED_RECV).
 *
 * The address blob (listen) is:
 *     0  u32 magic "FLBF"       8  u32 fi_version() of the listener
 *     4  u8  blob version (1)   12 u32 listener id
 *     5  u8  provider name bytes P     16 provider name (P bytes, no NUL)
 *     6  u8  endpoint name bytes N     16+P raw endpoint name (fi_getname, N bytes)
 *     7  u8  0
 * little-endian, at most FLOE_TRANSPORT_ADDR_MAX bytes. connect refuses a blob of another
 * libfabric version or provider (FLOE_FAILED_PRECONDITION), naming both: tcp;ofi_rxm of
 * libfabric 1.17 and 1.18 do not understand each other (ofiwg/libfabric#9664).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fabric_int.h"

#define BLOB_MAGIC 0x46424c46u /* "FLBF" little-endian */
#define BLOB_VERSION 1
#define BLOB_HEADER 16
#define DEFAULT_PROVIDER "tcp;ofi_rxm"
#define DEFAULT_TCP_HOST "127.0.0.1"
#define DEFAULT_SPIN_US 50
#define DEFAULT_SLEEP_MAX_US 200
#define DEFAULT_LINGER_MS 500
#define DEFAULT_OVERFLOW_MB 4096

const FloeHostApi *fab_host;

void fab_log(FloeLogLevel level, const char *fmt, ...) {
  if (!fab_host || !fab_host->log) return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fab_host->log(level, "%s", msg);
}

static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static floe_code from_fi(int ret) {
  switch (ret) {
  case -FI_ENOMEM: return FLOE_NO_MEMORY;
  case -FI_EINVAL: return FLOE_INVALID_ARGUMENT;
  case -FI_ENODATA:
  case -FI_ENOSYS: return FLOE_UNAVAILABLE;
  default: return FLOE_UNAVAILABLE;
  }
}

/* An integer environment variable, or def when unset or not a number. */
static long env_long(const char *name, long def) {
  const char *v = getenv(name);
  if (!v || !*v) return def;
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || *end) {
    fab_log(FLOE_LOG_WARNING, "transport fabric: %s=\"%s\" is not a number; using %ld", name, v,
            def);
    return def;
  }
  return x;
}

/* ---- peers ----------------------------------------------------------------------------- */

floe_code fab_peer_addr(Ctx *c, const unsigned char *name, size_t len, fi_addr_t *out) {
  if (len == 0 || len > FAB_NAME_MAX) return FLOE_INVALID_ARGUMENT;
  for (size_t i = 0; i < c->num_peers; i++)
    if (c->peers[i].len == len && memcmp(c->peers[i].name, name, len) == 0) {
      *out = c->peers[i].addr;
      return FLOE_OK;
    }
  if (c->num_peers == c->cap_peers) {
    size_t cap = c->cap_peers ? 2 * c->cap_peers : 8;
    Peer *p = realloc(c->peers, cap * sizeof *p);
    if (!p) return FLOE_NO_MEMORY;
    c->peers = p;
    c->cap_peers = cap;
  }
  /* The AV reads the name as the provider's address format (sockaddr, string, ...). */
  unsigned char copy[FAB_NAME_MAX + 1];
  memcpy(copy, name, len);
  copy[len] = 0;
  fi_addr_t addr = FI_ADDR_NOTAVAIL;
  int ret = fi_av_insert(c->av, copy, 1, &addr, 0, NULL);
  if (ret != 1) {
    fab_log(FLOE_LOG_ERROR, "transport fabric (%s): fi_av_insert of a peer failed: %s", c->prov,
            fi_strerror(ret < 0 ? -ret : FI_EINVAL));
    return ret < 0 ? from_fi(ret) : FLOE_INVALID_ARGUMENT;
  }
  Peer *p = &c->peers[c->num_peers++];
  memcpy(p->name, name, len);
  p->len = len;
  p->addr = addr;
  *out = addr;
  return FLOE_OK;
}

Listener *fab_listener_find(Ctx *c, uint32_t id) {
  for (Listener *l = c->listeners; l; l = l->next)
    if (l->id == id) return l;
  return NULL;
}

SendComm *fab_send_find(Ctx *c, uint32_t id) {
  for (SendComm *k = c->sends; k; k = k->next)
    if (k->id == id) return k;
  return NULL;
}

/* ---- contexts -------------------------------------------------------------------------- */

static void ctx_free(Ctx *c) {
  if (c->ep) fi_close(&c->ep->fid); /* first: libfabric lets go of every posted request */
  while (c->live) fab_req_free(c->live);
  for (Listener *l = c->listeners, *ln; l; l = ln) {
    ln = l->next;
    for (Pending *p = l->backlog, *pn; p; p = pn) {
      pn = p->next;
      free(p);
    }
    free(l);
  }
  for (SendComm *k = c->sends, *kn; k; k = kn) {
    kn = k->next;
    free(k);
  }
  for (RecvComm *k = c->recvs, *kn; k; k = kn) {
    kn = k->next;
    free(k);
  }
  free(c->peers);
  if (c->av) fi_close(&c->av->fid);
  if (c->cq) fi_close(&c->cq->fid);
  if (c->domain) fi_close(&c->domain->fid);
  if (c->fabric) fi_close(&c->fabric->fid);
  if (c->info) fi_freeinfo(c->info);
  if (c->intr_fd >= 0) close(c->intr_fd);
  if (c->overflow) munmap(c->overflow, c->overflow_len);
  pthread_cond_destroy(&c->wcv);
  pthread_mutex_destroy(&c->wmu);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

/* Whether the provider addresses endpoints by IP (so FLOE_FABRIC_HOST pins the interface). */
static bool ip_addressed(const char *prov) {
  return strstr(prov, "tcp") || strstr(prov, "verbs") || strstr(prov, "sockets") ||
         strstr(prov, "udp");
}

/* fi_getinfo with the interface pinned; *info is the one endpoint description to use. */
static floe_code get_info(const char *prov, struct fi_info **out) {
  struct fi_info *hints = fi_allocinfo();
  if (!hints) return FLOE_NO_MEMORY;
  hints->caps = FI_TAGGED | FI_SEND | FI_RECV | FI_DIRECTED_RECV;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->ep_attr->type = FI_EP_RDM;
  hints->domain_attr->threading = FI_THREAD_SAFE;
  hints->domain_attr->av_type = FI_AV_TABLE;
  /* Descriptors are never passed (no FI_MR_LOCAL); the other bits concern RMA, unused. */
  hints->domain_attr->mr_mode = FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->tx_attr->msg_order = FI_ORDER_SAS; /* two messages of one tag arrive in order */
  hints->rx_attr->msg_order = FI_ORDER_SAS;
  hints->fabric_attr->prov_name = strdup(prov);
  const char *domain = getenv("FLOE_FABRIC_DOMAIN");
  if (domain && *domain) hints->domain_attr->name = strdup(domain);
  if (!hints->fabric_attr->prov_name || (domain && *domain && !hints->domain_attr->name)) {
    fi_freeinfo(hints);
    return FLOE_NO_MEMORY;
  }
  const char *node = NULL, *service = NULL;
  uint64_t flags = 0;
  char port[16];
  if (ip_addressed(prov)) {
    node = getenv("FLOE_FABRIC_HOST");
    if (!node || !*node) {
      if (!strstr(prov, "tcp")) {
        fab_log(FLOE_LOG_ERROR,
                "transport fabric (%s): set FLOE_FABRIC_HOST to the address of the interface "
                "to use (it is never guessed)",
                prov);
        fi_freeinfo(hints);
        return FLOE_FAILED_PRECONDITION;
      }
      node = DEFAULT_TCP_HOST;
    }
    long p = env_long("FLOE_FABRIC_PORT", 0);
    snprintf(port, sizeof port, "%ld", p < 0 || p > 65535 ? 0L : p);
    service = port;
    flags = FI_SOURCE;
  }
  struct fi_info *info = NULL;
  int ret = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), node, service, flags,
                       hints, &info);
  fi_freeinfo(hints);
  if (ret || !info) {
    fab_log(FLOE_LOG_ERROR,
            "transport fabric: provider \"%s\"%s%s offers no tagged reliable-datagram endpoint "
            "here: %s (fi_info -l lists the providers; set FLOE_FABRIC_PROVIDER)",
            prov, node ? " on " : "", node ? node : "", fi_strerror(ret < 0 ? -ret : FI_ENODATA));
    return FLOE_UNAVAILABLE;
  }
  /* Several domains without a pinned one (efa with two NICs): refuse rather than pick. */
  if (info->next && !ip_addressed(prov) && !(domain && *domain) &&
      strcmp(info->domain_attr->name, info->next->domain_attr->name) != 0) {
    fab_log(FLOE_LOG_ERROR,
            "transport fabric (%s): several domains (%s, %s, ...): set FLOE_FABRIC_DOMAIN to "
            "the one to use",
            prov, info->domain_attr->name, info->next->domain_attr->name);
    fi_freeinfo(info);
    return FLOE_FAILED_PRECONDITION;
  }
  struct fi_info *one = fi_dupinfo(info);
  fi_freeinfo(info);
  if (!one) return FLOE_NO_MEMORY;
  fi_freeinfo(one->next);
  one->next = NULL;
  *out = one;
  return FLOE_OK;
}

#define FAB_CHECK(call, what)                                                                  \
  do {                                                                                         \
    int ret_ = (call);                                                                         \
    if (ret_) {                                                                                \
      fab_log(FLOE_LOG_ERROR, "transport fabric (%s): %s failed: %s", c->prov, what,           \
              fi_strerror(-ret_));                                                             \
      rc = from_fi(ret_);                                                                      \
      goto err_free;                                                                           \
    }                                                                                          \
  } while (0)

static floe_code fab_init(const FloeHostApi *h, void **out) {
  if (h && !fab_host) fab_host = h;
  Ctx *c = calloc(1, sizeof *c);
  if (!c) return FLOE_NO_MEMORY;
  pthread_mutex_init(&c->mu, NULL);
  pthread_mutex_init(&c->wmu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&c->wcv, &ca);
  pthread_condattr_destroy(&ca);
  atomic_init(&c->interrupted, false);
  c->cq_fd = c->intr_fd = -1;
  c->queue_tail = &c->queue;
  c->fi_ver = fi_version();
  long spin = env_long("FLOE_FABRIC_SPIN_US", DEFAULT_SPIN_US);
  c->spin_ns = spin < 0 ? -1 : spin * 1000;
  long sleep_max = env_long("FLOE_FABRIC_SLEEP_MAX_US", DEFAULT_SLEEP_MAX_US);
  c->sleep_max_ns = (sleep_max < 50 ? 50 : sleep_max > 100000 ? 100000 : sleep_max) * 1000;
  long linger = env_long("FLOE_FABRIC_LINGER_MS", DEFAULT_LINGER_MS);
  c->linger_ms = linger < 0 ? 0 : linger > 600000 ? 600000 : (int)linger;

  const char *prov = getenv("FLOE_FABRIC_PROVIDER");
  if (!prov || !*prov) prov = DEFAULT_PROVIDER;
  snprintf(c->prov, sizeof c->prov, "%s", prov);
  floe_code rc = get_info(prov, &c->info);
  if (rc != FLOE_OK) goto err_free;
  if (strlen(c->info->fabric_attr->prov_name) > FAB_PROV_MAX) {
    fab_log(FLOE_LOG_ERROR, "transport fabric: provider name \"%s\" is too long",
            c->info->fabric_attr->prov_name);
    rc = FLOE_UNAVAILABLE;
    goto err_free;
  }
  snprintf(c->prov, sizeof c->prov, "%s", c->info->fabric_attr->prov_name);
  c->inject_size = c->info->tx_attr->inject_size; /* rxm: its eager size (buffer_size) */
  c->probe_large_recv = strstr(c->prov, "ofi_rxm") != NULL;
  c->max_msg = c->info->ep_attr->max_msg_size;
  long overflow_mb = env_long("FLOE_FABRIC_OVERFLOW_MB", DEFAULT_OVERFLOW_MB);
  if (strcmp(c->prov, "shm") == 0 && c->info->rx_attr->iov_limit >= 2 && overflow_mb > 0) {
    c->overflow_len = (size_t)overflow_mb << 20;
    c->overflow = mmap(NULL, c->overflow_len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (c->overflow == MAP_FAILED) {
      c->overflow = NULL;
      fab_log(FLOE_LOG_WARNING, "transport fabric (shm): no overflow space (%s): a receive "
              "shorter than its message will hang libfabric", strerror(errno));
    }
  }

  FAB_CHECK(fi_fabric(c->info->fabric_attr, &c->fabric, NULL), "fi_fabric");
  FAB_CHECK(fi_domain(c->fabric, c->info, &c->domain, NULL), "fi_domain");
  struct fi_cq_attr cqa;
  memset(&cqa, 0, sizeof cqa);
  cqa.format = FI_CQ_FORMAT_TAGGED;
  cqa.size = 4096;
  cqa.wait_obj = FI_WAIT_FD;
  int ret = fi_cq_open(c->domain, &cqa, &c->cq, NULL);
  if (ret == 0 && fi_control(&c->cq->fid, FI_GETWAIT, &c->cq_fd) != 0) {
    fi_close(&c->cq->fid); /* an fd we cannot read back is no use */
    c->cq = NULL;
    c->cq_fd = -1;
    ret = -FI_ENOSYS;
  }
  if (ret) { /* shm of 1.17: no FI_WAIT_FD (-FI_ENOSYS); wait with sread / our own sleeps */
    cqa.wait_obj = FI_WAIT_UNSPEC;
    ret = fi_cq_open(c->domain, &cqa, &c->cq, NULL);
    c->cq_can_signal = ret == 0;
  }
  if (ret) {
    cqa.wait_obj = FI_WAIT_NONE;
    ret = fi_cq_open(c->domain, &cqa, &c->cq, NULL);
  }
  FAB_CHECK(ret, "fi_cq_open");
  if (c->cq_fd >= 0) {
    c->intr_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c->intr_fd < 0) {
      fab_log(FLOE_LOG_ERROR, "transport fabric: eventfd failed: %s", strerror(errno));
      rc = FLOE_UNAVAILABLE;
      goto err_free;
    }
  }
  struct fi_av_attr ava;
  memset(&ava, 0, sizeof ava);
  ava.type = FI_AV_TABLE;
  ava.count = 64;
  FAB_CHECK(fi_av_open(c->domain, &ava, &c->av, NULL), "fi_av_open");
  FAB_CHECK(fi_endpoint(c->domain, c->info, &c->ep, NULL), "fi_endpoint");
  FAB_CHECK(fi_ep_bind(c->ep, &c->av->fid, 0), "fi_ep_bind(av)");
  FAB_CHECK(fi_ep_bind(c->ep, &c->cq->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind(cq)");
  FAB_CHECK(fi_enable(c->ep), "fi_enable");
  size_t nlen = sizeof c->name;
  FAB_CHECK(fi_getname(&c->ep->fid, c->name, &nlen), "fi_getname");
  c->name_len = nlen;
  if (BLOB_HEADER + strlen(c->prov) + nlen > FLOE_TRANSPORT_ADDR_MAX) {
    fab_log(FLOE_LOG_ERROR,
            "transport fabric (%s): the endpoint's name (%zu bytes) does not fit an address "
            "blob of %d bytes",
            c->prov, nlen, FLOE_TRANSPORT_ADDR_MAX);
    rc = FLOE_UNAVAILABLE;
    goto err_free;
  }
  pthread_mutex_lock(&c->mu);
  rc = fab_post_ctrl_rx(c);
  pthread_mutex_unlock(&c->mu);
  if (rc != FLOE_OK) goto err_free;
  *out = c;
  return FLOE_OK;

err_free:
  ctx_free(c);
  return rc;
}

/* Comms should be closed first; whatever is left is freed here with the endpoint. */
static void fab_finalize(void *ctx) {
  if (ctx) ctx_free(ctx);
}

/* ---- address blobs --------------------------------------------------------------------- */

static floe_code fab_listen(void *ctx, void *addr, size_t *addr_len, void **listen_comm) {
  Ctx *c = ctx;
  Listener *l = calloc(1, sizeof *l);
  if (!l) return FLOE_NO_MEMORY;
  l->kind = COMM_LISTEN;
  l->ctx = c;
  l->backlog_tail = &l->backlog;
  size_t plen = strlen(c->prov);
  unsigned char *b = addr;
  pthread_mutex_lock(&c->mu);
  l->id = ++c->next_listener_id;
  l->next = c->listeners;
  c->listeners = l;
  pthread_mutex_unlock(&c->mu);
  put32(b, BLOB_MAGIC);
  b[4] = BLOB_VERSION;
  b[5] = (unsigned char)plen;
  b[6] = (unsigned char)c->name_len;
  b[7] = 0;
  put32(b + 8, c->fi_ver);
  put32(b + 12, l->id);
  memcpy(b + BLOB_HEADER, c->prov, plen);
  memcpy(b + BLOB_HEADER + plen, c->name, c->name_len);
  *addr_len = BLOB_HEADER + plen + c->name_len;
  *listen_comm = l;
  return FLOE_OK;
}

static floe_code fab_connect(void *ctx, const void *addr, size_t addr_len, void **send_comm) {
  Ctx *c = ctx;
  const unsigned char *b = addr;
  if (!b || addr_len < BLOB_HEADER || addr_len > FLOE_TRANSPORT_ADDR_MAX ||
      get32(b) != BLOB_MAGIC) {
    fab_log(FLOE_LOG_ERROR, "transport fabric: connect: not an address of the fabric transport");
    return FLOE_INVALID_ARGUMENT;
  }
  if (b[4] != BLOB_VERSION) {
    fab_log(FLOE_LOG_ERROR,
            "transport fabric: connect: the address is of blob version %u; this plugin reads "
            "version %u",
            b[4], BLOB_VERSION);
    return FLOE_FAILED_PRECONDITION;
  }
  size_t plen = b[5], nlen = b[6];
  if (plen == 0 || plen > FAB_PROV_MAX || nlen == 0 || nlen > FAB_NAME_MAX ||
      BLOB_HEADER + plen + nlen != addr_len) {
    fab_log(FLOE_LOG_ERROR, "transport fabric: connect: a malformed address (%zu bytes)",
            addr_len);
    return FLOE_INVALID_ARGUMENT;
  }
  char prov[FAB_PROV_MAX + 1];
  memcpy(prov, b + BLOB_HEADER, plen);
  prov[plen] = 0;
  uint32_t ver = get32(b + 8);
  if (ver != c->fi_ver || strcmp(prov, c->prov) != 0) {
    fab_log(FLOE_LOG_ERROR,
            "transport fabric: connect: the address is of libfabric %u.%u, provider %s; this "
            "endpoint is libfabric %u.%u, provider %s: %s",
            FI_MAJOR(ver), FI_MINOR(ver), prov, FI_MAJOR(c->fi_ver), FI_MINOR(c->fi_ver),
            c->prov,
            ver != c->fi_ver ? "peers must run the same libfabric version (their wire "
                               "protocols differ)"
                             : "set FLOE_FABRIC_PROVIDER alike on both sides");
    return FLOE_FAILED_PRECONDITION;
  }
  SendComm *k = calloc(1, sizeof *k);
  if (!k) return FLOE_NO_MEMORY;
  k->kind = COMM_SEND;
  k->ctx = c;
  k->early_tail = &k->early;
  k->state = CONN_WAIT_ACK;
  pthread_mutex_lock(&c->mu);
  floe_code rc = c->failed ? FLOE_UNAVAILABLE : fab_peer_addr(c, b + BLOB_HEADER + plen, nlen, &k->addr);
  if (rc != FLOE_OK) {
    pthread_mutex_unlock(&c->mu);
    free(k);
    return rc;
  }
  k->id = ++c->next_conn_id;
  k->next = c->sends;
  c->sends = k;
  rc = fab_send_hello(c, k, get32(b + 12));
  if (rc != FLOE_OK) {
    c->sends = k->next;
    pthread_mutex_unlock(&c->mu);
    free(k);
    return rc;
  }
  pthread_mutex_unlock(&c->mu);
  *send_comm = k;
  return FLOE_OK;
}

/* Never blocks: FLOE_UNAVAILABLE until a peer's hello arrived (progress reads it). */
static floe_code fab_accept(void *listen_comm, void **recv_comm) {
  Listener *l = listen_comm;
  if (!l || l->kind != COMM_LISTEN) return FLOE_INVALID_ARGUMENT;
  Ctx *c = l->ctx;
  RecvComm *k = calloc(1, sizeof *k);
  if (!k) return FLOE_NO_MEMORY;
  pthread_mutex_lock(&c->mu);
  fab_progress_locked(c);
  Pending *p = l->backlog;
  if (!p) {
    pthread_mutex_unlock(&c->mu);
    free(k);
    if (!c->failed) return FLOE_UNAVAILABLE;
    fab_log(FLOE_LOG_ERROR, "transport fabric (%s): accept: the endpoint has failed", c->prov);
    return FLOE_ABORTED;
  }
  l->backlog = p->next;
  if (!l->backlog) l->backlog_tail = &l->backlog;
  k->kind = COMM_RECV;
  k->ctx = c;
  k->addr = p->addr;
  k->next = c->recvs;
  c->recvs = k;
  pthread_mutex_unlock(&c->mu);
  free(p);
  *recv_comm = k;
  return FLOE_OK;
}

/* ---- closing --------------------------------------------------------------------------- */

/* Posted requests of a closed comm: progress until libfabric lets go of them (FI_ECANCELED
 * for cancelled receives, completion for sends), at most linger_ms; what is left stays
 * orphaned (its buffer in use) until it completes or the context is finalized. mu held. */
static void close_requests(Ctx *c, void *comm, const char *what) {
  for (Req *r = c->live, *rn; r; r = rn) {
    rn = r->next;
    if (r->comm != comm) continue;
    if (r->kind == REQ_CTRL_SEND) {
      r->comm = NULL; /* a hello frees itself */
      continue;
    }
    switch (r->state) {
    case REQ_QUEUED:
      fab_queue_remove(r);
      fab_req_free(r);
      break;
    case REQ_DONE: /* completed, never tested: the caller gave it up with the comm */
      fab_req_free(r);
      break;
    case REQ_POSTED:
      r->orphan = true;
      if (r->kind == REQ_RECV && !r->cancelling) {
        r->cancelling = true;
        ssize_t ret = fi_cancel(&c->ep->fid, r);
        (void)ret; /* not found: it is completing; the completion frees it */
      }
      break;
    }
  }
  fab_progress_locked(c);
  int left = fab_linger(c, comm);
  for (Req *r = c->live; r; r = r->next)
    if (r->comm == comm) r->comm = NULL;
  if (left)
    fab_log(FLOE_LOG_WARNING,
            "transport fabric (%s): closing a %s connection left %d request%s in progress after "
            "%d ms; their buffers stay in use until they complete or the transport is finalized",
            c->prov, what, left, left == 1 ? "" : "s", c->linger_ms);
}

static void fab_close_send(void *send_comm) {
  SendComm *k = send_comm;
  if (!k || k->kind != COMM_SEND) return;
  Ctx *c = k->ctx;
  pthread_mutex_lock(&c->mu);
  for (SendComm **pp = &c->sends; *pp; pp = &(*pp)->next)
    if (*pp == k) {
      *pp = k->next;
      break;
    }
  for (Req *r = k->early, *rn; r; r = rn) {
    rn = r->qnext;
    fab_req_free(r);
  }
  k->early = NULL;
  close_requests(c, k, "send");
  pthread_mutex_unlock(&c->mu);
  k->kind = 0;
  free(k);
}

static void fab_close_recv(void *recv_comm) {
  RecvComm *k = recv_comm;
  if (!k || k->kind != COMM_RECV) return;
  Ctx *c = k->ctx;
  pthread_mutex_lock(&c->mu);
  for (RecvComm **pp = &c->recvs; *pp; pp = &(*pp)->next)
    if (*pp == k) {
      *pp = k->next;
      break;
    }
  close_requests(c, k, "receive");
  pthread_mutex_unlock(&c->mu);
  k->kind = 0;
  free(k);
}

/* Hellos that arrive later for this listener are refused (the sender's sends then fail). */
static void fab_close_listen(void *listen_comm) {
  Listener *l = listen_comm;
  if (!l || l->kind != COMM_LISTEN) return;
  Ctx *c = l->ctx;
  pthread_mutex_lock(&c->mu);
  for (Listener **pp = &c->listeners; *pp; pp = &(*pp)->next)
    if (*pp == l) {
      *pp = l->next;
      break;
    }
  pthread_mutex_unlock(&c->mu);
  for (Pending *p = l->backlog, *pn; p; p = pn) {
    pn = p->next;
    free(p);
  }
  l->kind = 0;
  free(l);
}

FLOE_PLUGIN_EXPORT floe_code floe_plugin_init(const FloeHostApi *h, FloePluginRegistrar *reg);
FLOE_PLUGIN_EXPORT floe_code floe_plugin_init(const FloeHostApi *h, FloePluginRegistrar *reg) {
  floe_code rc = FLOE_PLUGIN_DECLARE(reg, "transport-fabric", "1.0");
  if (rc != FLOE_OK) return rc;
  fab_host = h;
  /* libfabric 1.17's tcp provider loses the stream after a message larger than a receive
   * buffer that rxm handed it directly ("dynamic receive buffers": tcpx_process_recv resets
   * its receive state with the rest of the message still in the socket), so every later
   * message of that connection is lost. rxm's own bounce buffers truncate cleanly. Read by
   * libfabric when it first loads its providers; set here, while plugins load, unless the
   * user chose. */
  setenv("FI_OFI_RXM_ENABLE_DYN_RBUF", "0", 0);
  /* rxm (1.17) handles connection requests at most every cm_progress_interval (10 ms) inside
   * fi_cq_read: a wake-up for a connection request within 10 ms of the last look is spent
   * without handling it, and a thread that then sleeps on the CQ's fd never wakes (the peer
   * waits for the accept). 0: every read of the CQ looks. */
  setenv("FI_OFI_RXM_CM_PROGRESS_INTERVAL", "0", 0);
  /* rxm (1.17) sends a message between its eager size (16 KiB) and this limit (128 KiB) in
   * segments (SAR) whose receive state points at the connection: when the peer dies with a
   * message half in, progress writes into the freed connection and can spin inside
   * fi_cq_read for ever (tests/transport peer-kill: 1 run in 20 under load). At the eager
   * size nothing is segmented: larger messages go by rendezvous, which the probe before a
   * large receive guards (fabric_msg.c). */
  setenv("FI_OFI_RXM_SAR_LIMIT", "16384", 0);
  FloeTransportFns t;
  memset(&t, 0, sizeof t);
  t.struct_size = sizeof t;
  t.name = "fabric";
  t.init = fab_init;
  t.finalize = fab_finalize;
  t.listen = fab_listen;
  t.connect = fab_connect;
  t.accept = fab_accept;
  t.isend = fab_isend;
  t.irecv = fab_irecv;
  t.test = fab_test;
  t.progress = fab_progress;
  t.get_fd = fab_get_fd;
  t.close_send = fab_close_send;
  t.close_recv = fab_close_recv;
  t.close_listen = fab_close_listen;
  t.cancel = fab_cancel;
  t.trywait = fab_trywait;
  t.wait = fab_wait;
  t.interrupt = fab_interrupt;
  return reg->register_transport(reg, &t);
}
