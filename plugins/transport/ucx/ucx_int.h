/* SPDX-License-Identifier: Apache-2.0 */
/* ucx_int.h - the UCX transport's internals, shared by ucx.c (contexts, listeners, address
 * blobs, connections) and ucx_msg.c (requests, completions, waiting).
 *
 * One context is one UCP context with one worker. Everything of a context (its requests,
 * comms, the worker itself) is guarded by ctx->mu, and the worker is created
 * UCS_THREAD_MODE_SERIALIZED accordingly; UCX calls our callbacks (completions, connection
 * requests, endpoint errors) only inside the calls we make with mu held. The only things done
 * without it are sleeping (poll) and interrupt (an eventfd write).
 */
#ifndef FLOE_UCX_INT_H
#define FLOE_UCX_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <ucp/api/ucp.h>

#include <floe/floe_plugin.h>

#define UCXT_TLS_MAX 63 /* bytes of a transport list we keep ("tcp", "sm,self", ...) */

typedef struct Ctx Ctx;
typedef struct Req Req;

typedef enum ReqKind { REQ_SEND, REQ_RECV } ReqKind;

typedef enum ReqState {
  REQ_POSTED, /* UCX holds it: its callback will come */
  REQ_DONE    /* completed; waits for test() (or is freed at once when orphaned) */
} ReqState;

typedef enum CommKind { COMM_LISTEN = 0x4c495354, COMM_SEND = 0x53454e44, COMM_RECV = 0x52454356 } CommKind;

typedef struct RecvComm RecvComm;

typedef struct Listener {
  CommKind kind; /* COMM_LISTEN */
  Ctx *ctx;
  ucp_listener_h listener;
  RecvComm *backlog, **backlog_tail; /* connections not accepted yet, in arrival order */
  struct Listener *next;
} Listener;

/* A connection's client-server endpoint. UCX reports its failure (the peer died or closed)
 * through ucxt_ep_failed, which finds the comm by its endpoint. */
typedef struct SendComm {
  CommKind kind; /* COMM_SEND */
  Ctx *ctx;
  ucp_ep_h ep;
  ucs_status_t failed;   /* UCS_OK while the connection is up */
  struct SendComm *next;
} SendComm;

struct RecvComm {
  CommKind kind; /* COMM_RECV */
  Ctx *ctx;
  ucp_ep_h ep;         /* the server side of the peer's connection */
  ucs_status_t failed; /* UCS_OK while the connection is up */
  Listener *listener;  /* while in a listener's backlog; NULL once accepted */
  RecvComm *next;      /* in the backlog, then in ctx->recvs */
};

/* A closed send comm's endpoint while a flush finishes in the background (close never waits
 * for one): force-closed once the flush completes, the endpoint fails or linger_ms passes, and
 * by finalize at the latest. Freed once UCX let go of the flush. */
typedef struct Closing {
  ucp_ep_h ep;           /* NULL once closed */
  void *flush;           /* UCX's flush request while it runs */
  bool flush_done, failed;
  uint64_t deadline_ns;
  struct Closing *next;
} Closing;

struct Req {
  Ctx *ctx;
  ReqKind kind;
  ReqState state;
  bool orphan;      /* its comm was closed: freed when UCX lets go of it */
  bool peer_failed; /* withdrawn because its connection failed: reports FLOE_UNAVAILABLE */
  bool withdrawn;   /* cancel or close asked UCX to cancel it */
  floe_code code;   /* of a completed request */
  size_t size;      /* bytes moved; on FLOE_OUT_OF_RANGE the message's size (0: unknown) */
  size_t len;
  uint64_t tag;
  void *ucx;        /* UCX's request while posted (freed in its callback) */
  void *comm;       /* the SendComm or RecvComm; NULL once orphaned */
  Req *prev, *next; /* in ctx->live */
};

struct Ctx {
  pthread_mutex_t mu;
  ucp_context_h context;
  ucp_worker_h worker;
  uint32_t ucx_ver;            /* major << 16 | minor of the UCX loaded */
  char tls[UCXT_TLS_MAX + 1];  /* FLOE_UCX_TLS, else UCX_TLS, else "default" */
  char host[64];               /* FLOE_UCX_HOST: what listeners bind */
  long port;                   /* FLOE_UCX_PORT: the first listener's port (0: any) */
  int linger_ms;               /* how long close waits for posted requests */
  int efd;                     /* ucp_worker_get_efd */
  int intr_fd;                 /* an eventfd that interrupt writes */
  bool failed;                 /* the worker broke: everything fails */
  bool reap_due;               /* a recv comm failed: withdraw its receives after progress */

  Listener *listeners;
  SendComm *sends;
  RecvComm *recvs;
  Closing *closing;            /* closed send comms' endpoints still flushing */
  Req *live;                   /* every request UCX or a caller may still hold */
};

/* ucx.c */
extern const FloeHostApi *ucxt_host;
void ucxt_log(FloeLogLevel level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
floe_code ucxt_code(ucs_status_t s);
/* The endpoint error handler of every endpoint (arg: the Ctx; the comm is found by ep). */
void ucxt_ep_failed(void *arg, ucp_ep_h ep, ucs_status_t status);

/* ucx_msg.c (mu held unless said otherwise) */
void ucxt_req_free(Req *r);
/* Runs the worker until it has nothing more to do now; the number of events it reported. */
int ucxt_progress_locked(Ctx *c);
/* Withdraws the posted receives of a comm (close) or of failed comms (peer_failed set). */
void ucxt_withdraw(Ctx *c, void *comm, bool peer_failed);
/* Drives progress (blocking waits, mu dropped while asleep) until none of the comm's requests
 * is posted, linger_ms passes or the connection fails; the number left. */
int ucxt_linger(Ctx *c, void *comm);
/* Hands a closed send comm's endpoint to a background flush, or closes it now when the flush
 * cannot start or is done already. */
void ucxt_close_later(Ctx *c, ucp_ep_h ep);
/* Closes an endpoint at once (its requests are cancelled), waiting for UCX to finish. */
void ucxt_ep_close(Ctx *c, ucp_ep_h ep);
/* Background flushes of closed send comms: those due are force-closed (all: finalize). */
void ucxt_closing_run(Ctx *c, bool all);

floe_code ucxt_isend(void *send_comm, const void *buf, size_t len, uint64_t tag, void *mhandle,
                     void **request);
floe_code ucxt_irecv(void *recv_comm, void *buf, size_t len, uint64_t tag, void *mhandle,
                     void **request);
floe_code ucxt_test(void *request, int *done, size_t *size);
floe_code ucxt_cancel(void *request);
floe_code ucxt_progress(void *ctx);
floe_code ucxt_get_fd(void *ctx, int *fd);
floe_code ucxt_trywait(void *ctx);
floe_code ucxt_wait(void *ctx, int timeout_ms);
void ucxt_interrupt(void *ctx);

#endif /* FLOE_UCX_INT_H */
