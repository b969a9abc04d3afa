/* SPDX-License-Identifier: Apache-2.0 */
/* fabric_int.h - the libfabric transport's internals, shared by fabric.c (contexts, address
 * blobs, connections) and fabric_msg.c (requests, completions, waiting).
 *
 * One context is one RDM endpoint with its fabric, domain, address vector and completion
 * queue. Everything of a context (its requests, connections, queues) is guarded by ctx->mu;
 * the only things done without it are sleeping (poll, a condition variable, fi_cq_sread).
 */
#ifndef FLOE_FABRIC_INT_H
#define FLOE_FABRIC_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <floe/floe_plugin.h>

/* Tags of the plugin's own messages: the reserved top bit set (callers never set it). */
#define FAB_TAG_HELLO (FLOE_TRANSPORT_TAG_RESERVED | 0x48454c4cu) /* "HELL" */
#define FAB_TAG_ACK (FLOE_TRANSPORT_TAG_RESERVED | 0x41434b00u)   /* "ACK" */
#define FAB_TAG_PROBE (FLOE_TRANSPORT_TAG_RESERVED | 0x50524f42u) /* "PROB": empty, dropped */

#define FAB_PROV_MAX 40   /* bytes of a provider name in a blob ("verbs;ofi_rxm") */
#define FAB_NAME_MAX 112  /* bytes of a raw endpoint name we keep */
#define FAB_CTRL_BYTES 160 /* payload room of a hello or ack (receive side) */
#define FAB_CTRL_RX 4     /* hello and ack receives kept posted, each */

typedef struct Ctx Ctx;
typedef struct Req Req;

typedef enum ReqKind {
  REQ_SEND,      /* a caller's isend */
  REQ_RECV,      /* a caller's irecv */
  REQ_CTRL_SEND, /* a hello or an ack we send; freed on completion */
  REQ_HELLO_RX,  /* one of our posted hello receives; reposted on completion */
  REQ_ACK_RX,    /* one of our posted ack receives; reposted on completion */
  REQ_PROBE_RX   /* one of our posted probe receives; reposted on completion */
} ReqKind;

typedef enum ReqState {
  REQ_QUEUED, /* not handed to libfabric yet (-FI_EAGAIN, or the connection awaits its ack) */
  REQ_POSTED, /* libfabric holds it: a completion (or an error completion) will come */
  REQ_DONE    /* completed; a caller's request waits for test() */
} ReqState;

typedef enum CommKind { COMM_LISTEN = 0x4c495354, COMM_SEND = 0x53454e44, COMM_RECV = 0x52454356 } CommKind;

typedef enum ConnState { CONN_WAIT_ACK, CONN_OPEN, CONN_REFUSED } ConnState;

/* A connection that said hello, waiting for accept. */
typedef struct Pending {
  fi_addr_t addr;
  struct Pending *next;
} Pending;

typedef struct Listener {
  CommKind kind; /* COMM_LISTEN */
  Ctx *ctx;
  uint32_t id;   /* carried in the blob and the hello */
  Pending *backlog, **backlog_tail;
  struct Listener *next;
} Listener;

typedef struct SendComm {
  CommKind kind; /* COMM_SEND */
  Ctx *ctx;
  fi_addr_t addr;
  uint32_t id;   /* carried in the hello, echoed by the ack */
  ConnState state;
  Req *early, **early_tail; /* isends made before the ack, in order */
  struct SendComm *next;
} SendComm;

typedef struct RecvComm {
  CommKind kind; /* COMM_RECV */
  Ctx *ctx;
  fi_addr_t addr; /* receives match only this peer (FI_DIRECTED_RECV) */
  struct RecvComm *next;
} RecvComm;

struct Req {
  struct fi_context2 fi_ctx; /* first: for providers that want FI_CONTEXT / FI_CONTEXT2 */
  Ctx *ctx;
  ReqKind kind;
  ReqState state;
  bool cancelling;    /* fi_cancel was called; an FI_ECANCELED completion may follow */
  bool orphan;        /* its connection was closed: freed when libfabric lets go of it */
  floe_code code;     /* of a completed request */
  size_t size;        /* bytes moved; on FLOE_OUT_OF_RANGE the message's size */
  void *buf;          /* the caller's buffer, or ctrl below */
  size_t len;
  uint64_t tag;
  fi_addr_t addr;
  void *comm;         /* the SendComm or RecvComm it was posted on; NULL once orphaned */
  Req *prev, *next;   /* in ctx->live */
  Req *qnext;         /* in ctx->queue or a SendComm's early list */
  uint64_t probe_at;  /* a large receive whose peer's connection was down: next look (ns) */
  uint64_t probe_gap; /* and the gap after that one (grows to 100 ms) */
  unsigned char ctrl[FAB_CTRL_BYTES]; /* payload of our own messages */
};

typedef struct Peer {
  unsigned char name[FAB_NAME_MAX];
  size_t len;
  fi_addr_t addr;
} Peer;

struct Ctx {
  pthread_mutex_t mu;
  struct fi_info *info;
  struct fid_fabric *fabric;
  struct fid_domain *domain;
  struct fid_av *av;
  struct fid_cq *cq;
  struct fid_ep *ep;
  char prov[FAB_PROV_MAX + 1]; /* the provider libfabric gave, e.g. "tcp;ofi_rxm" */
  uint32_t fi_ver;             /* fi_version() */
  unsigned char name[FAB_NAME_MAX]; /* this endpoint's raw name (fi_getname) */
  size_t name_len;
  size_t inject_size;          /* sends up to this many bytes go by fi_tinject */
  size_t max_msg;
  /* shm only: receives get a second iov here, so the provider never truncates (libfabric
   * 1.17's shm loops forever in smr_cma_loop on a receive shorter than its message). Address
   * space only (MAP_NORESERVE); pages an overflow touched are given back at once. */
  void *overflow;
  size_t overflow_len;
  bool failed;                 /* the endpoint broke (CQ read failed): everything fails */
  /* rxm (1.17) keeps a message that arrived before its receive in a queue that points at the
   * connection it came on, and frees that connection when the peer dies without dropping the
   * message: a receive posted later that matches it reads through the freed connection
   * (rxm_handle_rndv -> fi_readv on a NULL msg_ep: SIGSEGV inside fi_trecv). A receive larger
   * than rxm's eager size (the only kind whose match reads through the connection) is
   * therefore posted only right after an empty fi_tinject to its peer succeeded: rxm answers
   * that only on a connection that is up, and nothing progresses between the two calls. */
  bool probe_large_recv;

  /* Waiting. With FI_WAIT_FD: cq_fd (fi_control FI_GETWAIT) and intr_fd (an eventfd that
   * interrupt writes). Without: interrupt sets `interrupted` and signals wcv; the waiter
   * progresses with sched_yield for spin_ns, then sleeps on wcv in growing steps. spin_ns < 0:
   * plain fi_cq_sread, ended by fi_cq_signal. */
  int cq_fd;
  int intr_fd;
  bool cq_can_signal;          /* the CQ has a wait object (fi_cq_sread, fi_cq_signal) */
  atomic_bool interrupted;
  pthread_mutex_t wmu;
  pthread_cond_t wcv;
  long spin_ns;
  long sleep_max_ns;           /* the longest step of the sleeping phase */
  int linger_ms;               /* how long close waits for posted requests */

  Listener *listeners;
  uint32_t next_listener_id;
  SendComm *sends;
  RecvComm *recvs;
  uint32_t next_conn_id;
  Peer *peers;
  size_t num_peers, cap_peers;

  Req *live;                   /* every request libfabric or a caller may still hold */
  int sends_in_flight;         /* POSTED sends: their completions will wake a sleeper */
  Req *queue, **queue_tail;    /* QUEUED requests to post, in order */
};

/* fabric.c */
extern const FloeHostApi *fab_host;
void fab_log(FloeLogLevel level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The peer's AV address for a raw endpoint name, inserting it once (mu held). */
floe_code fab_peer_addr(Ctx *c, const unsigned char *name, size_t len, fi_addr_t *out);
Listener *fab_listener_find(Ctx *c, uint32_t id);
SendComm *fab_send_find(Ctx *c, uint32_t id);

/* fabric_msg.c: requests (mu held unless said otherwise) */
Req *fab_req_new(Ctx *c, ReqKind kind, void *comm, void *buf, size_t len, uint64_t tag,
                 fi_addr_t addr);
void fab_req_free(Req *r);
/* Posts r now, or queues it behind the queue; r is POSTED, QUEUED or (inject) DONE after. */
floe_code fab_submit(Req *r);
void fab_queue_remove(Req *r);
/* Reads every completion and posts what the queue holds; the number of completions read. */
int fab_progress_locked(Ctx *c);
floe_code fab_post_ctrl_rx(Ctx *c);
floe_code fab_send_hello(Ctx *c, SendComm *k, uint32_t listener_id);
/* Blocks (mu not held) until progress may be possible or timeout_ms passes. */
floe_code fab_wait(void *ctx, int timeout_ms);
/* Drives progress (blocking waits, mu dropped while asleep) until none of the given comm's
 * requests is POSTED or linger_ms passes; the number still posted. */
int fab_linger(Ctx *c, void *comm);

floe_code fab_isend(void *send_comm, const void *buf, size_t len, uint64_t tag, void *mhandle,
                    void **request);
floe_code fab_irecv(void *recv_comm, void *buf, size_t len, uint64_t tag, void *mhandle,
                    void **request);
floe_code fab_test(void *request, int *done, size_t *size);
floe_code fab_cancel(void *request);
floe_code fab_progress(void *ctx);
floe_code fab_get_fd(void *ctx, int *fd);
floe_code fab_trywait(void *ctx);
void fab_interrupt(void *ctx);

#endif /* FLOE_FABRIC_INT_H */
