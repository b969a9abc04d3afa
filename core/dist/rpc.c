/* SPDX-License-Identifier: Apache-2.0 */
/* rpc.c - the control plane's request-response layer over conn.c: a server (a listener, an
 * accept thread, one thread per connection, handlers by message type) and a client's pool
 * of connections to one server.
 *
 * The accept thread only takes sockets from the backlog; each connection's thread runs the
 * handshake itself, so a peer that connects and never speaks costs its own thread the
 * handshake's deadline and never delays anyone else. Between requests a connection's thread
 * waits for the first byte with no frame deadline (an idle pooled connection is normal);
 * once a frame starts, the connection's deadline applies. Shutting the server down shuts
 * every socket (shutdown(2)), which wakes each thread in its wait, receive or send: nothing
 * polls a flag on a timer. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "dist.h"
#include "dist.pb-c.h"

#define RPC_DEFAULT_MAX_CONNECTIONS 256
#define RPC_MAX_TYPES 256       /* handlers by type: the wire's numbers are all below 64 */
#define RPC_IDLE_WAIT_MS 600000 /* a wait between requests, re-armed; shutdown wakes it */
#define POOL_MAX_IDLE 64        /* idle connections a pool keeps; more are closed */

/* ------------------------------------------------------------------------------------ */
/* Time */

int64_t floe__dist_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void floe__dist_cond_init(pthread_cond_t *cv) {
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  /* Deadlines are monotonic: a clock step must not stretch or cut a wait. */
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(cv, &a);
  pthread_condattr_destroy(&a);
}

bool floe__dist_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t deadline_ms) {
  if (deadline_ms == INT64_MAX) {
    pthread_cond_wait(cv, mu);
    return true;
  }
  if (floe__dist_now_ms() >= deadline_ms) return false;
  struct timespec ts = {(time_t)(deadline_ms / 1000), (long)(deadline_ms % 1000) * 1000000L};
  pthread_cond_timedwait(cv, mu, &ts);
  return true;
}

/* ------------------------------------------------------------------------------------ */
/* Status in responses */

static bool code_known(int32_t code) {
  switch (code) {
#define FLOE__CODE_CASE(name, value, msg) case value:
    FLOE_CODE_MAP(FLOE__CODE_CASE)
#undef FLOE__CODE_CASE
    return true;
  default:
    return false;
  }
}

void floe__status_to_proto(const FloeStatus *st, Floe__Dist__Status *out) {
  floe__dist__status__init(out);
  out->code = st ? (int32_t)st->code : FLOE_OK;
  out->message = (char *)(st && st->code != FLOE_OK ? floe_status_message(st) : "");
}

floe_code floe__status_from_proto(const Floe__Dist__Status *in, FloeStatus *st) {
  if (!in || in->code == FLOE_OK) {
    floe_status_clear(st);
    return FLOE_OK;
  }
  const char *msg = in->message && in->message[0] ? in->message : "(no message)";
  if (!code_known(in->code))
    return floe_status_set(st, FLOE_UNKNOWN, "(status code %d, unknown to this build) %s",
                           (int)in->code, msg);
  return floe_status_set(st, (floe_code)in->code, "%s", msg);
}

/* ------------------------------------------------------------------------------------ */
/* The server */

typedef struct RpcConn {
  FloeRpcServer *s;
  FloeConn *c;        /* NULL once the thread closed it (under s->mu) */
  pthread_t th;
  bool done;          /* the thread has ended its work; join it (under s->mu) */
  struct RpcConn *next;
} RpcConn;

typedef struct RpcHandler {
  FloeRpcHandler fn;
  void *arg;
  int running;        /* calls in progress (under s->mu) */
} RpcHandler;

struct FloeRpcServer {
  FloeListener *l;
  FloeConnOptions conn;
  int max_connections;
  FloeRpcLogFn log;
  void *log_arg;
  pthread_t accept_th;
  pthread_mutex_t mu;
  pthread_cond_t cv;  /* a handler call ended; stopping */
  bool stopping;
  int n_open;         /* connections whose threads still run */
  RpcConn *conns;
  RpcHandler handlers[RPC_MAX_TYPES];
};

static void rpc_log(FloeRpcServer *s, const char *fmt, ...) FLOE__PRINTF(2, 3);
static void rpc_log(FloeRpcServer *s, const char *fmt, ...) {
  if (!s->log) return;
  char buf[1024];
  int n = snprintf(buf, sizeof buf, "rpc server %s: ", floe__listener_address(s->l));
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
  va_end(ap);
  s->log(s->log_arg, buf);
}

static bool server_stopping(FloeRpcServer *s) {
  pthread_mutex_lock(&s->mu);
  bool stop = s->stopping;
  pthread_mutex_unlock(&s->mu);
  return stop;
}

/* Serves requests on r's connection until it ends. */
static void serve(FloeRpcServer *s, FloeConn *c) {
  FloeStatus st = {FLOE_OK, NULL};
  for (;;) {
    floe_code rc = floe__conn_wait(c, RPC_IDLE_WAIT_MS, &st);
    if (rc == FLOE_DEADLINE_EXCEEDED) {
      floe_status_clear(&st);
      continue;
    }
    uint16_t type = 0;
    struct ProtobufCMessage *m = NULL;
    if (rc == FLOE_OK) rc = floe__conn_recv(c, 0, &type, &m, &st);
    if (rc != FLOE_OK) {
      if (!floe__conn_closed_cleanly(c) && !server_stopping(s))
        rpc_log(s, "dropped the connection from %s: %s", floe__conn_peer(c),
                floe_status_message(&st));
      break;
    }
    RpcHandler h = {NULL, NULL, 0};
    pthread_mutex_lock(&s->mu);
    if (type < RPC_MAX_TYPES && s->handlers[type].fn) {
      h = s->handlers[type];
      s->handlers[type].running++;
    }
    pthread_mutex_unlock(&s->mu);
    if (!h.fn) {
      rpc_log(s, "%s sent a %s request, which this server has no handler for: connection closed",
              floe__conn_peer(c), floe__wire_type_name(type));
      floe__wire_free(m);
      break;
    }
    rc = h.fn(h.arg, c, floe__conn_peer_identity(c), type, m, &st);
    floe__wire_free(m);
    pthread_mutex_lock(&s->mu);
    s->handlers[type].running--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (rc != FLOE_OK) {
      if (!server_stopping(s))
        rpc_log(s, "the %s handler failed for %s (connection closed): %s",
                floe__wire_type_name(type), floe__conn_peer(c), floe_status_message(&st));
      break;
    }
  }
  floe_status_clear(&st);
}

static void *conn_main(void *arg) {
  RpcConn *r = arg;
  FloeRpcServer *s = r->s;
  FloeStatus st = {FLOE_OK, NULL};
  if (floe__conn_handshake_server(r->c, &s->conn, &st) == FLOE_OK)
    serve(s, r->c);
  else if (!server_stopping(s))
    rpc_log(s, "refused a client: %s", floe_status_message(&st));
  floe_status_clear(&st);
  /* Closed here, not when joined: the peer must see the close now. */
  pthread_mutex_lock(&s->mu);
  floe__conn_close(r->c);
  r->c = NULL;
  r->done = true;
  s->n_open--;
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

/* Joins and frees the records of connections that ended. */
static void reap(FloeRpcServer *s) {
  RpcConn *done = NULL;
  pthread_mutex_lock(&s->mu);
  for (RpcConn **pp = &s->conns; *pp;) {
    RpcConn *r = *pp;
    if (r->done) {
      *pp = r->next;
      r->next = done;
      done = r;
    } else {
      pp = &r->next;
    }
  }
  pthread_mutex_unlock(&s->mu);
  while (done) {
    RpcConn *r = done;
    done = r->next;
    pthread_join(r->th, NULL);
    floe__free(r);
  }
}

/* Waits up to ms for the server to stop (after an accept error that would repeat at once,
 * such as running out of file descriptors). */
static void pause_unless_stopping(FloeRpcServer *s, int ms) {
  int64_t deadline = floe__dist_now_ms() + ms;
  pthread_mutex_lock(&s->mu);
  while (!s->stopping && floe__dist_cond_wait_until(&s->cv, &s->mu, deadline)) {
  }
  pthread_mutex_unlock(&s->mu);
}

static void *accept_main(void *arg) {
  FloeRpcServer *s = arg;
  for (;;) {
    FloeStatus st = {FLOE_OK, NULL};
    FloeConn *c = NULL;
    floe_code rc = floe__listener_accept_raw(s->l, &s->conn, -1, &c, &st);
    if (rc != FLOE_OK) {
      bool stop = rc == FLOE_CANCELLED || server_stopping(s);
      if (!stop) rpc_log(s, "accepting a connection failed: %s", floe_status_message(&st));
      floe_status_clear(&st);
      if (stop) break;
      pause_unless_stopping(s, 100);
      continue;
    }
    reap(s);
    pthread_mutex_lock(&s->mu);
    if (s->stopping) {
      pthread_mutex_unlock(&s->mu);
      floe__conn_close(c);
      break;
    }
    if (s->n_open >= s->max_connections) {
      int open = s->n_open;
      pthread_mutex_unlock(&s->mu);
      rpc_log(s, "refused a connection from %s: %d connections are open, the most allowed "
              "(max_connections)", floe__conn_peer(c), open);
      floe__conn_close(c);
      continue;
    }
    RpcConn *r = floe__calloc(1, sizeof *r);
    int err = r ? 0 : -1;
    if (r) {
      r->s = s;
      r->c = c;
      err = pthread_create(&r->th, NULL, conn_main, r);
    }
    if (err == 0) {
      r->next = s->conns;
      s->conns = r;
      s->n_open++;
      pthread_mutex_unlock(&s->mu);
      continue;
    }
    pthread_mutex_unlock(&s->mu);
    rpc_log(s, "refused a connection from %s: %s", floe__conn_peer(c),
            r ? "cannot start a thread for it" : "out of memory");
    floe__free(r);
    floe__conn_close(c);
  }
  return NULL;
}

static floe_code no_secret(const char *address, FloeStatus *st) {
  return floe_status_set(st, FLOE_FAILED_PRECONDITION,
                         "rpc server on %s: no job secret: set FLOE_JOB_SECRET_FILE to a 0600 "
                         "file of 16 bytes to 4 KiB (or FLOE_JOB_SECRET) on every task",
                         address ? address : "(null)");
}

floe_code floe__rpc_server_start(const char *address, const FloeRpcServerOptions *o,
                                 FloeRpcServer **out, FloeStatus *st) {
  *out = NULL;
  if (!o || !o->conn.secret) return no_secret(address, st);
  FloeListener *l = NULL;
  floe_code rc = floe__listener_open(address, &l, st);
  if (rc != FLOE_OK) return rc;
  return floe__rpc_server_start_on(l, o, out, st);
}

floe_code floe__rpc_server_start_on(FloeListener *l, const FloeRpcServerOptions *o,
                                    FloeRpcServer **out, FloeStatus *st) {
  *out = NULL;
  if (!o || !o->conn.secret) {
    floe_code rc = no_secret(floe__listener_address(l), st);
    floe__listener_close(l);
    return rc;
  }
  FloeRpcServer *s = floe__calloc(1, sizeof *s);
  if (!s) {
    floe__listener_close(l);
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory for an rpc server");
  }
  s->l = l;
  s->conn = o->conn;
  s->conn.expect_job = NULL; /* a client-side option */
  s->max_connections = o->max_connections > 0 ? o->max_connections : RPC_DEFAULT_MAX_CONNECTIONS;
  s->log = o->log;
  s->log_arg = o->log_arg;
  pthread_mutex_init(&s->mu, NULL);
  floe__dist_cond_init(&s->cv);
  if (pthread_create(&s->accept_th, NULL, accept_main, s) != 0) {
    floe_code rc = floe_status_set(st, FLOE_RESOURCE_EXHAUSTED,
                                   "rpc server on %s: cannot start its accept thread",
                                   floe__listener_address(s->l));
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    floe__listener_close(s->l);
    floe__free(s);
    return rc;
  }
  *out = s;
  return FLOE_OK;
}

void floe__rpc_server_handle(FloeRpcServer *s, uint16_t type, FloeRpcHandler fn, void *arg) {
  if (type >= RPC_MAX_TYPES) {
    rpc_log(s, "no handler can be set for message type %u (types below %d only)",
            (unsigned)type, RPC_MAX_TYPES);
    return;
  }
  pthread_mutex_lock(&s->mu);
  s->handlers[type].fn = fn;
  s->handlers[type].arg = arg;
  /* Removal waits out calls in progress, so the caller may free arg next. */
  while (!fn && s->handlers[type].running > 0) pthread_cond_wait(&s->cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
}

const char *floe__rpc_server_address(const FloeRpcServer *s) {
  return floe__listener_address(s->l);
}

void floe__rpc_server_free(FloeRpcServer *s) {
  if (!s) return;
  pthread_mutex_lock(&s->mu);
  s->stopping = true;
  pthread_cond_broadcast(&s->cv);
  for (RpcConn *r = s->conns; r; r = r->next)
    if (r->c) floe__conn_shutdown(r->c);
  pthread_mutex_unlock(&s->mu);
  floe__listener_shutdown(s->l);
  pthread_join(s->accept_th, NULL);
  /* No connection is added after the accept thread ended; each thread ends woken by its
   * socket's shutdown (or at its handler's own deadline). */
  pthread_mutex_lock(&s->mu);
  RpcConn *r = s->conns;
  s->conns = NULL;
  pthread_mutex_unlock(&s->mu);
  while (r) {
    RpcConn *next = r->next;
    pthread_join(r->th, NULL);
    floe__free(r);
    r = next;
  }
  floe__listener_close(s->l);
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->mu);
  floe__free(s);
}

/* ------------------------------------------------------------------------------------ */
/* The client's pool */

struct FloeConnPool {
  char *address;
  FloeConnOptions o;
  pthread_mutex_t mu;
  bool shut;
  FloeConn *idle[POOL_MAX_IDLE];
  int n_idle;
  FloeConn **taken;   /* handed out, for shutdown to wake (floe__malloc'd) */
  int n_taken, cap_taken;
};

floe_code floe__conn_pool_new(const char *address, const FloeConnOptions *o, FloeConnPool **out,
                              FloeStatus *st) {
  *out = NULL;
  FloeConnPool *p = floe__calloc(1, sizeof *p);
  if (!p) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory for a pool to %s", address);
  p->address = floe__strdup(address);
  if (!p->address) {
    floe__free(p);
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory for a pool to %s", address);
  }
  p->o = *o;
  pthread_mutex_init(&p->mu, NULL);
  *out = p;
  return FLOE_OK;
}

const char *floe__conn_pool_address(const FloeConnPool *p) {
  return p->address;
}

static floe_code pool_shut_error(FloeConnPool *p, FloeStatus *st) {
  return floe_status_set(st, FLOE_UNAVAILABLE, "the pool of connections to %s was shut down",
                         p->address);
}

/* Records c as taken (under p->mu). */
static bool pool_take_locked(FloeConnPool *p, FloeConn *c) {
  if (p->n_taken == p->cap_taken) {
    int cap = p->cap_taken ? 2 * p->cap_taken : 8;
    FloeConn **t = floe__realloc(p->taken, (size_t)cap * sizeof *t);
    if (!t) return false;
    p->taken = t;
    p->cap_taken = cap;
  }
  p->taken[p->n_taken++] = c;
  return true;
}

floe_code floe__conn_pool_get(FloeConnPool *p, FloeConn **out, FloeStatus *st) {
  *out = NULL;
  pthread_mutex_lock(&p->mu);
  if (p->shut) {
    pthread_mutex_unlock(&p->mu);
    return pool_shut_error(p, st);
  }
  FloeConn *c = NULL;
  /* Idle connections the server closed meanwhile (it restarted, or dropped them) are
   * closed here rather than failing the request sent on them. */
  while (p->n_idle) {
    c = p->idle[--p->n_idle];
    if (!floe__conn_stale(c)) break;
    floe__conn_close(c);
    c = NULL;
  }
  if (c && !pool_take_locked(p, c)) {
    p->idle[p->n_idle++] = c;
    pthread_mutex_unlock(&p->mu);
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory in the pool to %s", p->address);
  }
  pthread_mutex_unlock(&p->mu);
  if (c) {
    *out = c;
    return FLOE_OK;
  }
  /* A new connection, made outside the lock (it takes up to the options' timeout; a
   * shutdown meanwhile is seen below). */
  floe_code rc = floe__conn_connect(p->address, &p->o, &c, st);
  if (rc != FLOE_OK) return rc;
  pthread_mutex_lock(&p->mu);
  if (p->shut) rc = pool_shut_error(p, st);
  else if (!pool_take_locked(p, c))
    rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory in the pool to %s", p->address);
  pthread_mutex_unlock(&p->mu);
  if (rc != FLOE_OK) {
    floe__conn_close(c);
    return rc;
  }
  *out = c;
  return FLOE_OK;
}

void floe__conn_pool_put(FloeConnPool *p, FloeConn *c, bool broken) {
  if (!c) return;
  pthread_mutex_lock(&p->mu);
  for (int i = 0; i < p->n_taken; i++)
    if (p->taken[i] == c) {
      p->taken[i] = p->taken[--p->n_taken];
      break;
    }
  bool keep = !broken && !p->shut && p->n_idle < POOL_MAX_IDLE;
  if (keep) p->idle[p->n_idle++] = c;
  pthread_mutex_unlock(&p->mu);
  if (!keep) floe__conn_close(c);
}

floe_code floe__conn_pool_call(FloeConnPool *p, uint16_t type, const struct ProtobufCMessage *req,
                               uint16_t expect_type, int timeout_ms,
                               struct ProtobufCMessage **resp, FloeStatus *st) {
  *resp = NULL;
  FloeConn *c = NULL;
  floe_code rc = floe__conn_pool_get(p, &c, st);
  if (rc != FLOE_OK) {
    floe__status_prefix(st, "%s call", floe__wire_type_name(type));
    return rc;
  }
  rc = floe__conn_send(c, type, req, timeout_ms, st);
  uint16_t got = 0;
  if (rc == FLOE_OK) rc = floe__conn_recv(c, timeout_ms, &got, resp, st);
  if (rc == FLOE_OK && got != expect_type) {
    rc = floe_status_set(st, FLOE_INTERNAL, "%s answered a %s request with %s where %s was due",
                         floe__conn_peer(c), floe__wire_type_name(type),
                         floe__wire_type_name(got), floe__wire_type_name(expect_type));
    floe__wire_free(*resp);
    *resp = NULL;
  }
  if (rc != FLOE_OK) floe__status_prefix(st, "%s call", floe__wire_type_name(type));
  /* After a failure the response may still come: the connection is out of step. */
  floe__conn_pool_put(p, c, rc != FLOE_OK);
  return rc;
}

void floe__conn_pool_shutdown(FloeConnPool *p) {
  pthread_mutex_lock(&p->mu);
  p->shut = true;
  for (int i = 0; i < p->n_idle; i++) floe__conn_close(p->idle[i]);
  p->n_idle = 0;
  /* Their holders close them when they give them back. */
  for (int i = 0; i < p->n_taken; i++) floe__conn_shutdown(p->taken[i]);
  pthread_mutex_unlock(&p->mu);
}

void floe__conn_pool_free(FloeConnPool *p) {
  if (!p) return;
  for (int i = 0; i < p->n_idle; i++) floe__conn_close(p->idle[i]);
  floe__free(p->taken);
  pthread_mutex_destroy(&p->mu);
  floe__free(p->address);
  floe__free(p);
}
