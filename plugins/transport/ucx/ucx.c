/* SPDX-License-Identifier: Apache-2.0 */
/* ucx.c - the "ucx" transport on UCX's UCP layer: contexts, listeners, address blobs,
 * connections.
 *
 * A context is one UCP context (tag matching and wake-up features) with one worker, on the
 * transports FLOE_UCX_TLS names (UCX's own UCX_TLS syntax: "tcp", "sm,self", "rc,sm,self";
 * unset: UCX_TLS, else UCX's default choice). Connections use UCX's client-server mode:
 * listen opens a UCP listener on FLOE_UCX_HOST (default 127.0.0.1; never guessed) and
 * FLOE_UCX_PORT (default 0: any) and puts that socket address in the blob; connect creates an
 * endpoint to it, and each connection request the listener's callback receives becomes an
 * endpoint waiting in the listener's backlog for accept. Every endpoint is created with
 * UCP_ERR_HANDLING_MODE_PEER and an error handler, so a peer that dies or closes is reported
 * (its comm fails) instead of ending the survivor.
 *
 * The address blob (listen) is:
 *     0  u32 magic "FLBU"            8  u32 UCX version of the listener (major << 16 | minor)
 *     4  u8  blob version (1)        12 u16 the listener's port, 14 u16 0
 *     5  u8  IP address bytes A (4 or 16)     16 IP address (A bytes, network order)
 *     6  u8  transport list bytes T           16+A transport list (T bytes, no NUL)
 *     7  u8  0
 * little-endian, at most FLOE_TRANSPORT_ADDR_MAX bytes. connect refuses a blob of another UCX
 * version or transport list (FLOE_FAILED_PRECONDITION), naming both sides.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <ucs/debug/log_def.h>

#include "ucx_int.h"

#define BLOB_MAGIC 0x55424c46u /* "FLBU" little-endian */
#define BLOB_VERSION 1
#define BLOB_HEADER 16
#define DEFAULT_HOST "127.0.0.1"
#define DEFAULT_LINGER_MS 500

const FloeHostApi *ucxt_host;

void ucxt_log(FloeLogLevel level, const char *fmt, ...) {
  if (!ucxt_host || !ucxt_host->log) return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  ucxt_host->log(level, "%s", msg);
}

/* UCX's own messages (a peer's connection reset, unused UCX_ variables) go to the host's
 * logger instead of stderr: library code never prints. */
static ucs_log_func_rc_t ucx_log_handler(const char *file, unsigned line, const char *function,
                                         ucs_log_level_t level,
                                         const ucs_log_component_config_t *comp_conf,
                                         const char *message, va_list ap) {
  (void)function;
  (void)comp_conf;
  char msg[400];
  vsnprintf(msg, sizeof msg, message, ap);
  const char *base = strrchr(file, '/');
  FloeLogLevel l = level <= UCS_LOG_LEVEL_ERROR  ? FLOE_LOG_ERROR
                   : level == UCS_LOG_LEVEL_WARN ? FLOE_LOG_WARNING
                   : level <= UCS_LOG_LEVEL_INFO ? FLOE_LOG_INFO
                                                 : FLOE_LOG_DEBUG;
  ucxt_log(l, "transport ucx: UCX: %s (%s:%u)", msg, base ? base + 1 : file, line);
  return UCS_LOG_FUNC_RC_STOP;
}

static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

floe_code ucxt_code(ucs_status_t s) {
  switch (s) {
  case UCS_OK: return FLOE_OK;
  case UCS_ERR_CANCELED: return FLOE_CANCELLED;
  case UCS_ERR_MESSAGE_TRUNCATED:
  case UCS_ERR_EXCEEDS_LIMIT: return FLOE_OUT_OF_RANGE;
  case UCS_ERR_NO_MEMORY: return FLOE_NO_MEMORY;
  case UCS_ERR_INVALID_PARAM: return FLOE_INVALID_ARGUMENT;
  default: return FLOE_UNAVAILABLE; /* resets, timeouts, unreachable peers */
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
    ucxt_log(FLOE_LOG_WARNING, "transport ucx: %s=\"%s\" is not a number; using %ld", name, v,
             def);
    return def;
  }
  return x;
}

/* ---- connection failures ---------------------------------------------------------------- */

/* Inside progress (mu held). The comm is found by its endpoint, never by a pointer UCX keeps:
 * a closed comm's endpoints may still be flushing (Closing) or on their way out. */
void ucxt_ep_failed(void *arg, ucp_ep_h ep, ucs_status_t status) {
  Ctx *c = arg;
  if (status == UCS_OK) status = UCS_ERR_CONNECTION_RESET;
  for (SendComm *k = c->sends; k; k = k->next)
    if (k->ep == ep) {
      if (k->failed == UCS_OK)
        ucxt_log(FLOE_LOG_WARNING, "transport ucx (%s): a connection to a peer failed: %s",
                 c->tls, ucs_status_string(status));
      k->failed = status;
      return;
    }
  RecvComm *found = NULL;
  for (RecvComm *k = c->recvs; k && !found; k = k->next)
    if (k->ep == ep) found = k;
  for (Listener *l = c->listeners; l && !found; l = l->next)
    for (RecvComm *k = l->backlog; k && !found; k = k->next)
      if (k->ep == ep) found = k;
  if (found) {
    if (found->failed == UCS_OK)
      ucxt_log(FLOE_LOG_WARNING, "transport ucx (%s): a connection from a peer failed: %s",
               c->tls, ucs_status_string(status));
    found->failed = status;
    c->reap_due = true; /* its receives are withdrawn once progress returns */
    return;
  }
  for (Closing *cl = c->closing; cl; cl = cl->next)
    if (cl->ep == ep) cl->failed = true;
}

/* ---- contexts --------------------------------------------------------------------------- */

static void ctx_free(Ctx *c) {
  pthread_mutex_lock(&c->mu);
  /* Every request loses its comm first: callbacks that come while endpoints close find
   * nothing freed. */
  for (Req *r = c->live; r; r = r->next) {
    r->orphan = true;
    r->comm = NULL;
  }
  Listener *listeners = c->listeners;
  SendComm *sends = c->sends;
  RecvComm *recvs = c->recvs;
  c->listeners = NULL;
  c->sends = NULL;
  c->recvs = NULL;
  for (Listener *l = listeners, *ln; l; l = ln) {
    ln = l->next;
    if (l->listener) ucp_listener_destroy(l->listener);
    for (RecvComm *k = l->backlog, *kn; k; k = kn) {
      kn = k->next;
      ucxt_ep_close(c, k->ep);
      free(k);
    }
    free(l);
  }
  for (SendComm *k = sends, *kn; k; k = kn) {
    kn = k->next;
    ucxt_ep_close(c, k->ep);
    free(k);
  }
  for (RecvComm *k = recvs, *kn; k; k = kn) {
    kn = k->next;
    ucxt_ep_close(c, k->ep);
    free(k);
  }
  if (c->worker) ucxt_closing_run(c, true);
  /* Requests UCX still holds (a receive matched by a message that never finished) are
   * cancelled; their callbacks free them. What is left after that is ours alone. */
  for (Req *r = c->live, *rn; r; r = rn) {
    rn = r->next;
    r->orphan = true;
    if (r->state == REQ_POSTED && r->ucx) ucp_request_cancel(c->worker, r->ucx);
  }
  if (c->worker) ucxt_progress_locked(c);
  while (c->live) ucxt_req_free(c->live);
  pthread_mutex_unlock(&c->mu);
  if (c->worker) ucp_worker_destroy(c->worker);
  while (c->closing) { /* a flush UCX never called back for: UCX is gone now */
    Closing *cl = c->closing;
    c->closing = cl->next;
    free(cl);
  }
  if (c->context) ucp_cleanup(c->context);
  if (c->intr_fd >= 0) close(c->intr_fd);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

#define UCX_CHECK(call, what)                                                                  \
  do {                                                                                         \
    ucs_status_t st_ = (call);                                                                 \
    if (st_ != UCS_OK) {                                                                       \
      ucxt_log(FLOE_LOG_ERROR, "transport ucx (%s): %s failed: %s", c->tls, what,              \
               ucs_status_string(st_));                                                        \
      rc = st_ == UCS_ERR_NO_MEMORY ? FLOE_NO_MEMORY : FLOE_UNAVAILABLE;                       \
      goto err_free;                                                                           \
    }                                                                                          \
  } while (0)

static floe_code ucxt_init(const FloeHostApi *h, void **out) {
  if (h && !ucxt_host) ucxt_host = h;
  Ctx *c = calloc(1, sizeof *c);
  if (!c) return FLOE_NO_MEMORY;
  pthread_mutex_init(&c->mu, NULL);
  c->efd = c->intr_fd = -1;
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  c->ucx_ver = major << 16 | minor;
  const char *tls = getenv("FLOE_UCX_TLS");
  if (!tls || !*tls) tls = getenv("UCX_TLS");
  snprintf(c->tls, sizeof c->tls, "%s", tls && *tls ? tls : "default");
  const char *host = getenv("FLOE_UCX_HOST");
  snprintf(c->host, sizeof c->host, "%s", host && *host ? host : DEFAULT_HOST);
  long port = env_long("FLOE_UCX_PORT", 0);
  c->port = port < 0 || port > 65535 ? 0 : port;
  long linger = env_long("FLOE_UCX_LINGER_MS", DEFAULT_LINGER_MS);
  c->linger_ms = linger < 0 ? 0 : linger > 600000 ? 600000 : (int)linger;
  floe_code rc = FLOE_OK;
  if (strlen(tls && *tls ? tls : "") > UCXT_TLS_MAX) {
    ucxt_log(FLOE_LOG_ERROR, "transport ucx: the transport list \"%s\" is longer than %d bytes",
             tls, UCXT_TLS_MAX);
    rc = FLOE_INVALID_ARGUMENT;
    goto err_free;
  }

  ucp_config_t *cfg = NULL;
  UCX_CHECK(ucp_config_read(NULL, NULL, &cfg), "ucp_config_read");
  const char *floe_tls = getenv("FLOE_UCX_TLS");
  if (floe_tls && *floe_tls) {
    ucs_status_t st = ucp_config_modify(cfg, "TLS", floe_tls);
    if (st != UCS_OK) {
      ucxt_log(FLOE_LOG_ERROR, "transport ucx: FLOE_UCX_TLS=\"%s\" was refused by UCX: %s",
               floe_tls, ucs_status_string(st));
      ucp_config_release(cfg);
      rc = FLOE_INVALID_ARGUMENT;
      goto err_free;
    }
  }
  /* Messages up to 1 MiB go eagerly: over tcp (the transport Floe's clusters use) UCX's
   * rendezvous handshake costs a round trip that mid-sized messages feel (a 2-rank
   * all-reduce of 256 KiB: 392 against 200 us on this machine, 2026-11-29); larger ones
   * still rendezvous. UCX_RNDV_THRESH in the environment wins. */
  const char *rndv = getenv("UCX_RNDV_THRESH");
  if ((!rndv || !*rndv) && ucp_config_modify(cfg, "RNDV_THRESH", "1m") != UCS_OK)
    ucxt_log(FLOE_LOG_INFO, "transport ucx: UCX refused RNDV_THRESH=1m: its default stays");
  ucp_params_t params;
  memset(&params, 0, sizeof params);
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  ucs_status_t st = ucp_init(&params, cfg, &c->context);
  ucp_config_release(cfg);
  if (st != UCS_OK) {
    ucxt_log(FLOE_LOG_ERROR,
             "transport ucx: ucp_init on transports \"%s\" failed: %s (ucx_info -d lists what "
             "this machine offers; set FLOE_UCX_TLS)",
             c->tls, ucs_status_string(st));
    rc = FLOE_UNAVAILABLE;
    goto err_free;
  }
  ucp_worker_params_t wp;
  memset(&wp, 0, sizeof wp);
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED; /* every call under ctx->mu */
  UCX_CHECK(ucp_worker_create(c->context, &wp, &c->worker), "ucp_worker_create");
  UCX_CHECK(ucp_worker_get_efd(c->worker, &c->efd), "ucp_worker_get_efd");
  c->intr_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (c->intr_fd < 0) {
    ucxt_log(FLOE_LOG_ERROR, "transport ucx: eventfd failed: %s", strerror(errno));
    rc = FLOE_UNAVAILABLE;
    goto err_free;
  }
  *out = c;
  return FLOE_OK;

err_free:
  ctx_free(c);
  return rc;
}

/* Comms should be closed first; whatever is left is closed here with the worker. */
static void ucxt_finalize(void *ctx) {
  if (ctx) ctx_free(ctx);
}

/* ---- listeners and address blobs -------------------------------------------------------- */

/* A peer connected: its endpoint waits in the listener's backlog for accept (mu held: UCX
 * calls this inside ucp_worker_progress). */
static void on_conn_request(ucp_conn_request_h req, void *arg) {
  Listener *l = arg;
  Ctx *c = l->ctx;
  RecvComm *k = calloc(1, sizeof *k);
  if (!k) {
    ucxt_log(FLOE_LOG_ERROR, "transport ucx: out of memory accepting a connection");
    ucp_listener_reject(l->listener, req);
    return;
  }
  k->kind = COMM_RECV;
  k->ctx = c;
  k->listener = l;
  ucp_ep_params_t ep;
  memset(&ep, 0, sizeof ep);
  ep.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.conn_request = req;
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = ucxt_ep_failed;
  ep.err_handler.arg = c;
  ucs_status_t st = ucp_ep_create(c->worker, &ep, &k->ep);
  if (st != UCS_OK) {
    ucxt_log(FLOE_LOG_ERROR, "transport ucx (%s): accepting a connection failed: %s", c->tls,
             ucs_status_string(st));
    free(k);
    return;
  }
  *l->backlog_tail = k;
  l->backlog_tail = &k->next;
}

/* The host's address as a socket address with the given port; false when it is no IP. */
static bool host_sockaddr(const char *host, long port, struct sockaddr_storage *ss,
                          socklen_t *len) {
  memset(ss, 0, sizeof *ss);
  struct sockaddr_in *v4 = (struct sockaddr_in *)ss;
  struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)ss;
  if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons((uint16_t)port);
    *len = sizeof *v4;
    return true;
  }
  if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons((uint16_t)port);
    *len = sizeof *v6;
    return true;
  }
  return false;
}

static floe_code ucxt_listen(void *ctx, void *addr, size_t *addr_len, void **listen_comm) {
  Ctx *c = ctx;
  if (!c || !addr || !addr_len || !listen_comm) return FLOE_INVALID_ARGUMENT;
  Listener *l = calloc(1, sizeof *l);
  if (!l) return FLOE_NO_MEMORY;
  l->kind = COMM_LISTEN;
  l->ctx = c;
  l->backlog_tail = &l->backlog;
  pthread_mutex_lock(&c->mu);
  /* FLOE_UCX_PORT is the first listener's; later ones take any free port. */
  long port = c->port;
  struct sockaddr_storage ss;
  socklen_t sslen;
  floe_code rc = FLOE_OK;
  if (!host_sockaddr(c->host, port, &ss, &sslen)) {
    ucxt_log(FLOE_LOG_ERROR,
             "transport ucx: FLOE_UCX_HOST=\"%s\" is not an IPv4 or IPv6 address (the interface "
             "is never guessed)",
             c->host);
    rc = FLOE_INVALID_ARGUMENT;
    goto err_unlock;
  }
  ucp_listener_params_t lp;
  memset(&lp, 0, sizeof lp);
  lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
  lp.sockaddr.addr = (const struct sockaddr *)&ss;
  lp.sockaddr.addrlen = sslen;
  lp.conn_handler.cb = on_conn_request;
  lp.conn_handler.arg = l;
  ucs_status_t st = c->failed ? UCS_ERR_IO_ERROR : ucp_listener_create(c->worker, &lp, &l->listener);
  if (st != UCS_OK) {
    ucxt_log(FLOE_LOG_ERROR, "transport ucx (%s): listening on %s port %ld failed: %s", c->tls,
             c->host, port, ucs_status_string(st));
    rc = st == UCS_ERR_BUSY ? FLOE_UNAVAILABLE : ucxt_code(st);
    goto err_unlock;
  }
  ucp_listener_attr_t la;
  memset(&la, 0, sizeof la);
  la.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
  st = ucp_listener_query(l->listener, &la);
  if (st != UCS_OK) {
    ucxt_log(FLOE_LOG_ERROR, "transport ucx (%s): ucp_listener_query failed: %s", c->tls,
             ucs_status_string(st));
    rc = FLOE_UNAVAILABLE;
    goto err_destroy;
  }
  const unsigned char *ip;
  size_t alen;
  uint16_t bound;
  if (la.sockaddr.ss_family == AF_INET) {
    const struct sockaddr_in *v4 = (const struct sockaddr_in *)&la.sockaddr;
    ip = (const unsigned char *)&v4->sin_addr;
    alen = 4;
    bound = ntohs(v4->sin_port);
  } else {
    const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)&la.sockaddr;
    ip = (const unsigned char *)&v6->sin6_addr;
    alen = 16;
    bound = ntohs(v6->sin6_port);
  }
  size_t tlen = strlen(c->tls);
  unsigned char *b = addr;
  put32(b, BLOB_MAGIC);
  b[4] = BLOB_VERSION;
  b[5] = (unsigned char)alen;
  b[6] = (unsigned char)tlen;
  b[7] = 0;
  put32(b + 8, c->ucx_ver);
  b[12] = (unsigned char)bound;
  b[13] = (unsigned char)(bound >> 8);
  b[14] = b[15] = 0;
  memcpy(b + BLOB_HEADER, ip, alen);
  memcpy(b + BLOB_HEADER + alen, c->tls, tlen);
  *addr_len = BLOB_HEADER + alen + tlen;
  l->next = c->listeners;
  c->listeners = l;
  c->port = 0;
  pthread_mutex_unlock(&c->mu);
  *listen_comm = l;
  return FLOE_OK;

err_destroy:
  ucp_listener_destroy(l->listener);
err_unlock:
  pthread_mutex_unlock(&c->mu);
  free(l);
  return rc;
}

static floe_code ucxt_connect(void *ctx, const void *addr, size_t addr_len, void **send_comm) {
  Ctx *c = ctx;
  const unsigned char *b = addr;
  if (!c || !send_comm) return FLOE_INVALID_ARGUMENT;
  if (!b || addr_len < BLOB_HEADER || addr_len > FLOE_TRANSPORT_ADDR_MAX ||
      get32(b) != BLOB_MAGIC) {
    ucxt_log(FLOE_LOG_ERROR, "transport ucx: connect: not an address of the ucx transport");
    return FLOE_INVALID_ARGUMENT;
  }
  if (b[4] != BLOB_VERSION) {
    ucxt_log(FLOE_LOG_ERROR,
             "transport ucx: connect: the address is of blob version %u; this plugin reads "
             "version %u",
             b[4], BLOB_VERSION);
    return FLOE_FAILED_PRECONDITION;
  }
  size_t alen = b[5], tlen = b[6];
  if ((alen != 4 && alen != 16) || tlen == 0 || tlen > UCXT_TLS_MAX ||
      BLOB_HEADER + alen + tlen != addr_len) {
    ucxt_log(FLOE_LOG_ERROR, "transport ucx: connect: a malformed address (%zu bytes)", addr_len);
    return FLOE_INVALID_ARGUMENT;
  }
  char tls[UCXT_TLS_MAX + 1];
  memcpy(tls, b + BLOB_HEADER + alen, tlen);
  tls[tlen] = 0;
  uint32_t ver = get32(b + 8);
  if (ver != c->ucx_ver || strcmp(tls, c->tls) != 0) {
    ucxt_log(FLOE_LOG_ERROR,
             "transport ucx: connect: the address is of UCX %u.%u, transports %s; this "
             "endpoint is UCX %u.%u, transports %s: %s",
             ver >> 16, ver & 0xffff, tls, c->ucx_ver >> 16, c->ucx_ver & 0xffff, c->tls,
             ver != c->ucx_ver ? "peers must run the same UCX version"
                               : "set FLOE_UCX_TLS alike on both sides");
    return FLOE_FAILED_PRECONDITION;
  }
  struct sockaddr_storage ss;
  memset(&ss, 0, sizeof ss);
  socklen_t sslen;
  uint16_t port = (uint16_t)(b[12] | b[13] << 8);
  if (alen == 4) {
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    memcpy(&v4->sin_addr, b + BLOB_HEADER, 4);
    sslen = sizeof *v4;
  } else {
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    memcpy(&v6->sin6_addr, b + BLOB_HEADER, 16);
    sslen = sizeof *v6;
  }
  SendComm *k = calloc(1, sizeof *k);
  if (!k) return FLOE_NO_MEMORY;
  k->kind = COMM_SEND;
  k->ctx = c;
  ucp_ep_params_t ep;
  memset(&ep, 0, sizeof ep);
  ep.field_mask = UCP_EP_PARAM_FIELD_SOCK_ADDR | UCP_EP_PARAM_FIELD_FLAGS |
                  UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  ep.sockaddr.addr = (const struct sockaddr *)&ss;
  ep.sockaddr.addrlen = sslen;
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = ucxt_ep_failed;
  ep.err_handler.arg = c;
  pthread_mutex_lock(&c->mu);
  ucs_status_t st = c->failed ? UCS_ERR_IO_ERROR : ucp_ep_create(c->worker, &ep, &k->ep);
  if (st != UCS_OK) {
    pthread_mutex_unlock(&c->mu);
    char host[INET6_ADDRSTRLEN] = "?";
    inet_ntop(ss.ss_family, alen == 4 ? (void *)&((struct sockaddr_in *)&ss)->sin_addr
                                      : (void *)&((struct sockaddr_in6 *)&ss)->sin6_addr,
              host, sizeof host);
    ucxt_log(FLOE_LOG_ERROR, "transport ucx (%s): connecting to %s port %u failed: %s", c->tls,
             host, port, ucs_status_string(st));
    free(k);
    return FLOE_UNAVAILABLE;
  }
  k->next = c->sends;
  c->sends = k;
  pthread_mutex_unlock(&c->mu);
  *send_comm = k;
  return FLOE_OK;
}

/* Never blocks: FLOE_UNAVAILABLE until a peer's connection request arrived (progress). */
static floe_code ucxt_accept(void *listen_comm, void **recv_comm) {
  Listener *l = listen_comm;
  if (!l || l->kind != COMM_LISTEN || !recv_comm) return FLOE_INVALID_ARGUMENT;
  Ctx *c = l->ctx;
  pthread_mutex_lock(&c->mu);
  ucxt_progress_locked(c);
  RecvComm *k = l->backlog;
  if (!k) {
    bool failed = c->failed;
    pthread_mutex_unlock(&c->mu);
    if (!failed) return FLOE_UNAVAILABLE;
    ucxt_log(FLOE_LOG_ERROR, "transport ucx (%s): accept: the worker has failed", c->tls);
    return FLOE_ABORTED;
  }
  l->backlog = k->next;
  if (!l->backlog) l->backlog_tail = &l->backlog;
  k->listener = NULL;
  k->next = c->recvs;
  c->recvs = k;
  pthread_mutex_unlock(&c->mu);
  *recv_comm = k;
  return FLOE_OK;
}

/* ---- closing ---------------------------------------------------------------------------- */

/* The comm's requests: completed ones never tested are freed, unmatched receives withdrawn,
 * posted ones given linger_ms to finish unless the connection failed; what is
 * left is orphaned and ends when its endpoint is force-closed (mu held); the number left.
 * The caller closes the endpoints. */
static int close_requests(Ctx *c, void *comm, const char *what) {
  for (Req *r = c->live, *rn; r; r = rn) {
    rn = r->next;
    if (r->comm == comm && r->state == REQ_DONE) ucxt_req_free(r);
  }
  ucxt_withdraw(c, comm, false);
  int left = ucxt_linger(c, comm);
  for (Req *r = c->live; r; r = r->next)
    if (r->comm == comm) {
      r->orphan = true;
      r->comm = NULL;
    }
  if (left)
    ucxt_log(FLOE_LOG_WARNING,
             "transport ucx (%s): closing a %s connection cancelled %d request%s still in "
             "progress after %d ms",
             c->tls, what, left, left == 1 ? "" : "s", c->linger_ms);
  return left;
}

/* Sends that completed may still sit in UCX's buffers: the endpoint is flushed in the
 * background (ucxt_close_later), so closing costs nothing when the peer hung or died. */
static void ucxt_close_send(void *send_comm) {
  SendComm *k = send_comm;
  if (!k || k->kind != COMM_SEND) return;
  Ctx *c = k->ctx;
  pthread_mutex_lock(&c->mu);
  /* Still in c->sends while lingering: an ep failure finds it and ends the wait. */
  int left = close_requests(c, k, "send");
  for (SendComm **pp = &c->sends; *pp; pp = &(*pp)->next)
    if (*pp == k) {
      *pp = k->next;
      break;
    }
  if (k->failed != UCS_OK || left) /* nothing to flush for, or sends to cancel now */
    ucxt_ep_close(c, k->ep);
  else
    ucxt_close_later(c, k->ep);
  pthread_mutex_unlock(&c->mu);
  k->kind = 0;
  free(k);
}

/* A receive comm sends nothing of the caller's: its endpoint closes at once. */
static void ucxt_close_recv(void *recv_comm) {
  RecvComm *k = recv_comm;
  if (!k || k->kind != COMM_RECV) return;
  Ctx *c = k->ctx;
  pthread_mutex_lock(&c->mu);
  close_requests(c, k, "receive");
  for (RecvComm **pp = &c->recvs; *pp; pp = &(*pp)->next)
    if (*pp == k) {
      *pp = k->next;
      break;
    }
  ucxt_ep_close(c, k->ep);
  pthread_mutex_unlock(&c->mu);
  k->kind = 0;
  free(k);
}

/* Connections not accepted yet are closed; later ones are refused (the socket is gone). */
static void ucxt_close_listen(void *listen_comm) {
  Listener *l = listen_comm;
  if (!l || l->kind != COMM_LISTEN) return;
  Ctx *c = l->ctx;
  pthread_mutex_lock(&c->mu);
  for (Listener **pp = &c->listeners; *pp; pp = &(*pp)->next)
    if (*pp == l) {
      *pp = l->next;
      break;
    }
  ucp_listener_destroy(l->listener);
  for (RecvComm *k = l->backlog, *kn; k; k = kn) {
    kn = k->next;
    ucxt_ep_close(c, k->ep);
    free(k);
  }
  pthread_mutex_unlock(&c->mu);
  l->kind = 0;
  free(l);
}

FLOE_PLUGIN_EXPORT floe_code floe_plugin_init(const FloeHostApi *h, FloePluginRegistrar *reg);
FLOE_PLUGIN_EXPORT floe_code floe_plugin_init(const FloeHostApi *h, FloePluginRegistrar *reg) {
  floe_code rc = FLOE_PLUGIN_DECLARE(reg, "transport-ucx", "1.0");
  if (rc != FLOE_OK) return rc;
  ucxt_host = h;
  /* Once per process: UCX's messages go to the host's logger. Plugins are never unloaded
   * while the process runs, so the handler stays valid. */
  static bool log_pushed;
  if (!log_pushed) {
    ucs_log_push_handler(ucx_log_handler);
    log_pushed = true;
  }
  FloeTransportFns t;
  memset(&t, 0, sizeof t);
  t.struct_size = sizeof t;
  t.name = "ucx";
  t.init = ucxt_init;
  t.finalize = ucxt_finalize;
  t.listen = ucxt_listen;
  t.connect = ucxt_connect;
  t.accept = ucxt_accept;
  t.isend = ucxt_isend;
  t.irecv = ucxt_irecv;
  t.test = ucxt_test;
  t.progress = ucxt_progress;
  t.get_fd = ucxt_get_fd;
  t.close_send = ucxt_close_send;
  t.close_recv = ucxt_close_recv;
  t.close_listen = ucxt_close_listen;
  t.cancel = ucxt_cancel;
  t.trywait = ucxt_trywait;
  t.wait = ucxt_wait;
  t.interrupt = ucxt_interrupt;
  return reg->register_transport(reg, &t);
}
