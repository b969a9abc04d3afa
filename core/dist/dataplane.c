/* SPDX-License-Identifier: Apache-2.0 */
/* dataplane.c - a task's data connections to its peers through the runtime's transport
 * manager, authenticated, and the route the rendezvous follows to them (dist.h, section
 * "dataplane.c"; docs/security.md).
 *
 * Per peer task: a send channel (floe__transport_connect to the address blob of its
 * TaskInfo), whose first message is our hello, and a receive channel (accepted by the
 * accept thread), which is nobody's until its hello proves who sent it. The proof binds the
 * receiver's data nonce and incarnation, so nothing recorded from one incarnation opens a
 * channel to the next; the hello itself needs no reply (the peer's own hello on the other
 * direction proves the peer to us). Tensors then travel on these channels under the
 * rendezvous's tags; the hello's tag (FLOE__DATA_HELLO_TAG) is one no rendezvous tag takes
 * (those are hashes: a collision is a 2^-62 chance, and the key's step id and incarnation
 * still differ).
 *
 * Locking: dp->mu guards the peers, the held identities and the counters; it may be held
 * while calling into the transport manager (never the reverse: the manager runs our
 * callbacks without its own lock). The hello transfers' callbacks run on the manager's
 * progress thread; free waits for every one of them (in_flight).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "dist.h"
#include "dist.pb-c.h"

enum {
  ACCEPT_SLICE_MS = 250,  /* accept's wait between looks at stop (bounds free's latency) */
  ACCEPT_RETRY_MS = 100,  /* after an accept that failed: never spin on a broken listener */
  REFUSAL_MAX = 512       /* the latest refusal's text */
};

typedef struct Peer {
  FloeTaskIdentity id;           /* from its TaskInfo; incarnation replaced by a newer one */
  uint8_t nonce[FLOE__NONCE];    /* its data nonce: our hellos to it are bound to it */
  int send_chan, recv_chan;      /* > 0, or -1: none (yet, or closed) */
  bool dropped;                  /* drop_peer at this incarnation */
  int64_t values_sent, bytes_sent, values_received, bytes_received; /* under mu */
} Peer;

/* A proven hello from an identity not (yet) among the peers, waiting for a connect. */
typedef struct Held {
  int chan;
  FloeTaskIdentity id;
} Held;

/* An accepted receive channel whose hello receive is posted. */
typedef struct Incoming {
  FloeDataPlane *dp;
  int chan;
  struct Incoming *prev, *next;  /* in dp->incoming */
  uint8_t buf[FLOE__DATA_HELLO_MAX];
} Incoming;

/* Our hello to a peer, alive until its send completes. */
typedef struct HelloOut {
  FloeDataPlane *dp;
  FloeTaskIdentity to;
  uint8_t buf[FLOE__DATA_HELLO_MAX];
} HelloOut;

struct FloeDataPlane {
  FloeRuntime *rt;
  FloeTransportMgr *mgr;               /* rt's, borrowed */
  const FloeJobSecret *secret;         /* borrowed */
  FloeTaskIdentity self;
  uint8_t nonce[FLOE__NONCE];          /* drawn at creation: one per incarnation */
  FloeRendezvousRoute route;
  pthread_mutex_t mu;
  pthread_cond_t cv;                   /* CLOCK_MONOTONIC: a channel came in, a transfer ended */
  Peer *peers;
  int num_peers;
  Held held[FLOE__DATA_MAX_HELD];
  int num_held;
  Incoming *incoming;
  bool connected_once;                 /* a connect named the peers: strangers are refused */
  int in_flight;                       /* hello transfers whose callbacks have not run */
  int refusals;
  char last_refusal[REFUSAL_MAX];
  bool stop;
  bool thread_started;
  pthread_t accept_thread;
};

/* ---- hellos ------------------------------------------------------------------------------ */

static const uint8_t hello_magic[4] = {'F', 'L', 'D', 'H'};

size_t floe__data_hello_encode(const FloeTaskIdentity *sender, const uint8_t proof[32],
                               uint8_t out[FLOE__DATA_HELLO_MAX]) {
  size_t jn = strnlen(sender->job, FLOE__JOB_NAME_MAX);
  memcpy(out, hello_magic, 4);
  out[4] = 1;
  out[5] = (uint8_t)jn;
  out[6] = out[7] = 0;
  uint32_t t = (uint32_t)sender->task;
  for (int i = 0; i < 4; i++) out[8 + i] = (uint8_t)(t >> (8 * (3 - i)));
  for (int i = 0; i < 8; i++) out[12 + i] = (uint8_t)(sender->incarnation >> (8 * (7 - i)));
  memcpy(out + 20, proof, 32);
  memcpy(out + FLOE__DATA_HELLO_FIXED, sender->job, jn);
  return FLOE__DATA_HELLO_FIXED + jn;
}

floe_code floe__data_hello_decode(const uint8_t *buf, size_t len, FloeTaskIdentity *sender,
                                  uint8_t proof[32], FloeStatus *st) {
  if (len < FLOE__DATA_HELLO_FIXED || memcmp(buf, hello_magic, 4) != 0)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "not a data-plane hello (%zu bytes%s)", len,
                           len >= 4 ? ", another magic" : "");
  if (buf[4] != 1)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "a data-plane hello of version %u (this Floe speaks 1)", buf[4]);
  size_t jn = buf[5];
  if (jn == 0 || jn > FLOE__JOB_NAME_MAX || buf[6] || buf[7] || len != FLOE__DATA_HELLO_FIXED + jn)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "a data-plane hello of %zu bytes announcing a job name of %zu bytes",
                           len, jn);
  const uint8_t *job = buf + FLOE__DATA_HELLO_FIXED;
  for (size_t i = 0; i < jn; i++) {
    uint8_t c = job[i];
    bool ok = (c >= 'a' && c <= 'z') || (i > 0 && ((c >= '0' && c <= '9') || c == '_'));
    if (!ok)
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "a data-plane hello whose job name has byte 0x%02x at %zu "
                             "(names are [a-z][a-z0-9_]*)", c, i);
  }
  uint32_t t = 0;
  for (int i = 0; i < 4; i++) t = (t << 8) | buf[8 + i];
  if (t > INT32_MAX)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT, "a data-plane hello of task %" PRIu32, t);
  uint64_t inc = 0;
  for (int i = 0; i < 8; i++) inc = (inc << 8) | buf[12 + i];
  memset(sender, 0, sizeof *sender);
  memcpy(sender->job, job, jn);
  sender->task = (int)t;
  sender->incarnation = inc;
  memcpy(proof, buf + 20, 32);
  return FLOE_OK;
}

/* ---- peers, refusals --------------------------------------------------------------------- */

static Peer *find_peer(FloeDataPlane *dp, const char *job, int task) {
  for (int i = 0; i < dp->num_peers; i++)
    if (dp->peers[i].id.task == task && strcmp(dp->peers[i].id.job, job) == 0)
      return &dp->peers[i];
  return NULL;
}

static bool same_identity(const FloeTaskIdentity *a, const FloeTaskIdentity *b) {
  return a->task == b->task && a->incarnation == b->incarnation && strcmp(a->job, b->job) == 0;
}

/* Closes channel chan (a receive channel unless is_send) and forgets it (under dp->mu). */
static void close_chan(FloeDataPlane *dp, int *chan, bool is_recv) {
  if (*chan > 0) floe__transport_close_channel(dp->mgr, *chan, is_recv);
  *chan = -1;
}

/* Closes receive channel chan and records why (under dp->mu). */
static void refuse(FloeDataPlane *dp, int chan, const char *fmt, ...) FLOE__PRINTF(3, 4);
static void refuse(FloeDataPlane *dp, int chan, const char *fmt, ...) {
  if (chan > 0) floe__transport_close_channel(dp->mgr, chan, true);
  char why[REFUSAL_MAX - 64];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  char self[128];
  snprintf(dp->last_refusal, sizeof dp->last_refusal, "data plane of %s: receive channel %d "
           "refused: %s", floe__task_identity_str(&dp->self, self, sizeof self), chan, why);
  dp->refusals++;
}

/* Gives a proven receive channel to its peer, holds it, or refuses it (under dp->mu). */
static void place(FloeDataPlane *dp, int chan, const FloeTaskIdentity *id) {
  char who[128];
  floe__task_identity_str(id, who, sizeof who);
  Peer *p = find_peer(dp, id->job, id->task);
  if (!dp->connected_once || (p && p->id.incarnation != id->incarnation)) {
    /* Not known yet (no cluster view, or a peer's new incarnation): wait for a connect. */
    for (int i = 0; i < dp->num_held; i++)
      if (same_identity(&dp->held[i].id, id))
        return refuse(dp, chan, "a second data connection claiming %s (the first is held on "
                      "channel %d)", who, dp->held[i].chan);
    if (dp->num_held == FLOE__DATA_MAX_HELD)
      return refuse(dp, chan, "%s is not among this task's peers yet and %d others already "
                    "wait for a connect", who, FLOE__DATA_MAX_HELD);
    dp->held[dp->num_held++] = (Held){chan, *id};
    return;
  }
  if (!p)
    return refuse(dp, chan, "%s is not among this task's %d peers (an unknown task)", who,
                  dp->num_peers);
  if (p->dropped)
    return refuse(dp, chan, "%s was dropped (its task died) at this incarnation", who);
  if (p->recv_chan > 0)
    return refuse(dp, chan, "a second data connection claiming %s, already connected on "
                  "receive channel %d", who, p->recv_chan);
  p->recv_chan = chan;
  pthread_cond_broadcast(&dp->cv);
}

/* The held identities after a connect named the peers: each goes to its peer or is refused
 * (under dp->mu). */
static void resolve_held(FloeDataPlane *dp) {
  int n = dp->num_held;
  Held held[FLOE__DATA_MAX_HELD];
  memcpy(held, dp->held, (size_t)n * sizeof held[0]);
  dp->num_held = 0;
  for (int i = 0; i < n; i++) {
    Peer *p = find_peer(dp, held[i].id.job, held[i].id.task);
    if (p && p->id.incarnation != held[i].id.incarnation) {
      char who[128];
      refuse(dp, held[i].chan, "%s is not the incarnation of its task this task knows "
             "(%016" PRIx64 "): a stale or early connection",
             floe__task_identity_str(&held[i].id, who, sizeof who), p->id.incarnation);
      continue;
    }
    place(dp, held[i].chan, &held[i].id);
  }
}

/* ---- the accept thread and the hellos' callbacks ------------------------------------------ */

static void incoming_remove(FloeDataPlane *dp, Incoming *in) {
  if (in->prev)
    in->prev->next = in->next;
  else
    dp->incoming = in->next;
  if (in->next) in->next->prev = in->prev;
}

/* A transfer's callback ended (under dp->mu): free may be waiting for the last one. */
static void transfer_ended(FloeDataPlane *dp) {
  dp->in_flight--;
  pthread_cond_broadcast(&dp->cv);
}

static void on_hello(void *arg, floe_code code, size_t size) {
  Incoming *in = arg;
  FloeDataPlane *dp = in->dp;
  int chan = in->chan;
  pthread_mutex_lock(&dp->mu);
  incoming_remove(dp, in);
  if (dp->stop) {
    /* free closes every channel it finds; this one has just left its list */
    floe__transport_close_channel(dp->mgr, chan, true);
  } else if (code == FLOE_OUT_OF_RANGE) {
    refuse(dp, chan, "a first message of %zu bytes (a hello has at most %d)", size,
           FLOE__DATA_HELLO_MAX);
  } else if (code != FLOE_OK) {
    refuse(dp, chan, "receiving its hello failed (%s)", floe_code_name(code));
  } else {
    FloeStatus st = {FLOE_OK, NULL};
    FloeTaskIdentity id;
    uint8_t proof[32], want[32];
    if (floe__data_hello_decode(in->buf, size, &id, proof, &st) != FLOE_OK) {
      refuse(dp, chan, "%s", floe_status_message(&st));
    } else if (floe__auth_data_proof(dp->secret, dp->nonce, dp->self.incarnation, &id, want,
                                     &st) != FLOE_OK) {
      refuse(dp, chan, "checking its proof: %s", floe_status_message(&st));
    } else if (!floe__auth_equal(proof, want, sizeof want)) {
      char who[128];
      refuse(dp, chan, "the hello claiming %s has a wrong proof: the peer does not hold this "
             "job's secret (%s), or it replays a hello made for another incarnation of this "
             "task", floe__task_identity_str(&id, who, sizeof who),
             floe__secret_source(dp->secret));
    } else {
      place(dp, chan, &id);
    }
    floe_status_clear(&st);
  }
  floe__free(in);
  transfer_ended(dp);
  pthread_mutex_unlock(&dp->mu); /* dp is not touched after this: free may go on */
}

static void on_hello_sent(void *arg, floe_code code, size_t size) {
  (void)size;
  HelloOut *h = arg;
  FloeDataPlane *dp = h->dp;
  pthread_mutex_lock(&dp->mu);
  if (code != FLOE_OK && code != FLOE_CANCELLED && !dp->stop) {
    char self[128], who[128];
    snprintf(dp->last_refusal, sizeof dp->last_refusal,
             "data plane of %s: the hello to %s failed (%s)",
             floe__task_identity_str(&dp->self, self, sizeof self),
             floe__task_identity_str(&h->to, who, sizeof who), floe_code_name(code));
    dp->refusals++;
  }
  floe__free(h);
  transfer_ended(dp);
  pthread_mutex_unlock(&dp->mu);
}

/* Sleeps up to ms on dp->cv unless stopped (under dp->mu). */
static void nap(FloeDataPlane *dp, int ms) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  t.tv_nsec += (long)ms * 1000000L;
  t.tv_sec += t.tv_nsec / 1000000000L;
  t.tv_nsec %= 1000000000L;
  while (!dp->stop && pthread_cond_timedwait(&dp->cv, &dp->mu, &t) != ETIMEDOUT) {
  }
}

static void *accept_main(void *arg) {
  FloeDataPlane *dp = arg;
  pthread_mutex_lock(&dp->mu);
  while (!dp->stop) {
    pthread_mutex_unlock(&dp->mu);
    FloeStatus st = {FLOE_OK, NULL};
    int chan = floe__transport_accept(dp->mgr, ACCEPT_SLICE_MS, &st);
    pthread_mutex_lock(&dp->mu);
    if (chan < 0) {
      floe_code code = st.code;
      if (code != FLOE_DEADLINE_EXCEEDED && code != FLOE_CANCELLED) {
        refuse(dp, -1, "accepting a connection failed: %s", floe_status_message(&st));
        nap(dp, ACCEPT_RETRY_MS);
      }
      floe_status_clear(&st);
      if (code == FLOE_CANCELLED) break; /* the runtime is going away */
      continue;
    }
    if (dp->stop) {
      floe__transport_close_channel(dp->mgr, chan, true);
      break;
    }
    Incoming *in = floe__malloc(sizeof *in);
    if (!in) {
      refuse(dp, chan, "out of memory receiving its hello");
      continue;
    }
    in->dp = dp;
    in->chan = chan;
    in->prev = NULL;
    in->next = dp->incoming;
    if (dp->incoming) dp->incoming->prev = in;
    dp->incoming = in;
    dp->in_flight++;
    if (floe__transport_irecv_on(dp->mgr, chan, in->buf, sizeof in->buf, FLOE__DATA_HELLO_TAG,
                                 on_hello, in, NULL, &st) != FLOE_OK) {
      incoming_remove(dp, in);
      floe__free(in);
      dp->in_flight--;
      refuse(dp, chan, "posting the receive of its hello: %s", floe_status_message(&st));
      floe_status_clear(&st);
    }
  }
  pthread_mutex_unlock(&dp->mu);
  return NULL;
}

/* ---- the route ------------------------------------------------------------------------------ */

static int route_channel(void *arg, const char *device, bool is_send, FloeStatus *st) {
  FloeDataPlane *dp = arg;
  FloeDeviceName dn;
  FloeStatus ps = {FLOE_OK, NULL};
  if (floe_device_name_parse(device, &dn, &ps) != FLOE_OK) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT, "device \"%s\": %s", device,
                    floe_status_message(&ps));
    floe_status_clear(&ps);
    return -1;
  }
  if (!dn.job[0] || strcmp(dn.job, "localhost") == 0) return 0;
  int task = dn.task < 0 ? 0 : dn.task; /* a job named without a task: its task 0 */
  if (task == dp->self.task && strcmp(dn.job, dp->self.job) == 0) return 0;
  pthread_mutex_lock(&dp->mu);
  Peer *p = find_peer(dp, dn.job, task);
  int chan = -1;
  char who[128];
  if (!p)
    floe_status_set(st, FLOE_NOT_FOUND,
                    "device %s: /job:%s/task:%d is not among the %d peers of this task's data "
                    "plane", device, dn.job, task, dp->num_peers);
  else if (p->dropped)
    floe_status_set(st, FLOE_UNAVAILABLE, "device %s: its task %s was dropped (it died)", device,
                    floe__task_identity_str(&p->id, who, sizeof who));
  else if (p->send_chan <= 0 || p->recv_chan <= 0)
    floe_status_set(st, FLOE_UNAVAILABLE,
                    "device %s: its task %s is not connected (no %s channel yet)", device,
                    floe__task_identity_str(&p->id, who, sizeof who),
                    p->recv_chan <= 0 ? "receive" : "send");
  else
    chan = is_send ? p->send_chan : p->recv_chan;
  pthread_mutex_unlock(&dp->mu);
  return chan;
}

static void route_count(void *arg, int chan, bool is_send, int64_t bytes) {
  FloeDataPlane *dp = arg;
  pthread_mutex_lock(&dp->mu);
  for (int i = 0; i < dp->num_peers; i++) {
    Peer *p = &dp->peers[i];
    if (is_send && p->send_chan == chan) {
      p->values_sent++;
      p->bytes_sent += bytes;
      break;
    }
    if (!is_send && p->recv_chan == chan) {
      p->values_received++;
      p->bytes_received += bytes;
      break;
    }
  }
  pthread_mutex_unlock(&dp->mu);
}

const FloeRendezvousRoute *floe__dataplane_route(FloeDataPlane *dp) { return &dp->route; }

int floe__dataplane_traffic(FloeDataPlane *dp, FloeTaskTraffic *out, int cap) {
  pthread_mutex_lock(&dp->mu);
  int n = dp->num_peers;
  for (int i = 0; i < n && i < cap; i++) {
    const Peer *p = &dp->peers[i];
    memset(&out[i], 0, sizeof out[i]);
    snprintf(out[i].task, sizeof out[i].task, "/job:%s/replica:0/task:%d", p->id.job, p->id.task);
    out[i].values_sent = p->values_sent;
    out[i].bytes_sent = p->bytes_sent;
    out[i].values_received = p->values_received;
    out[i].bytes_received = p->bytes_received;
  }
  pthread_mutex_unlock(&dp->mu);
  return n;
}

/* ---- life ------------------------------------------------------------------------------------ */

floe_code floe__dataplane_new(FloeRuntime *rt, const FloeJobSecret *secret,
                              const FloeTaskIdentity *self, FloeDataPlane **out,
                              FloeStatus *st) {
  *out = NULL;
  if (!secret)
    return floe_status_set(st, FLOE_FAILED_PRECONDITION,
                           "the data plane needs the job's secret (FLOE_JOB_SECRET_FILE or "
                           "FLOE_JOB_SECRET): its connections prove they hold it");
  FloeTransportMgr *mgr = floe__transport_mgr(rt, st);
  if (!mgr) {
    floe__status_prefix(st, "data plane");
    return st ? st->code : FLOE_UNAVAILABLE;
  }
  FloeDataPlane *dp = floe__calloc(1, sizeof *dp);
  if (!dp) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory creating the data plane");
  dp->rt = rt;
  dp->mgr = mgr;
  dp->secret = secret;
  dp->self = *self;
  dp->self.job[FLOE__JOB_NAME_MAX] = '\0';
  dp->route.channel = route_channel;
  dp->route.count = route_count;
  dp->route.arg = dp;
  pthread_mutex_init(&dp->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&dp->cv, &ca);
  pthread_condattr_destroy(&ca);
  floe_code rc = floe__auth_random(dp->nonce, sizeof dp->nonce, st);
  if (rc != FLOE_OK) goto err_free;
  int err = pthread_create(&dp->accept_thread, NULL, accept_main, dp);
  if (err) {
    rc = floe_status_set(st, FLOE_UNAVAILABLE, "cannot start the data plane's accept thread: %s",
                         strerror(err));
    goto err_free;
  }
  dp->thread_started = true;
  *out = dp;
  return FLOE_OK;

err_free:
  floe__dataplane_free(dp);
  return rc;
}

void floe__dataplane_free(FloeDataPlane *dp) {
  if (!dp) return;
  pthread_mutex_lock(&dp->mu);
  dp->stop = true;
  pthread_cond_broadcast(&dp->cv);
  pthread_mutex_unlock(&dp->mu);
  if (dp->thread_started) pthread_join(dp->accept_thread, NULL);
  pthread_mutex_lock(&dp->mu);
  for (int i = 0; i < dp->num_peers; i++) {
    close_chan(dp, &dp->peers[i].send_chan, false);
    close_chan(dp, &dp->peers[i].recv_chan, true);
  }
  for (int i = 0; i < dp->num_held; i++) close_chan(dp, &dp->held[i].chan, true);
  dp->num_held = 0;
  for (Incoming *in = dp->incoming; in; in = in->next) {
    int chan = in->chan; /* its callback frees in */
    close_chan(dp, &chan, true);
  }
  /* The closed channels' hello transfers end with FLOE_CANCELLED on the progress thread. */
  while (dp->in_flight > 0) pthread_cond_wait(&dp->cv, &dp->mu);
  pthread_mutex_unlock(&dp->mu);
  floe__free(dp->peers);
  pthread_cond_destroy(&dp->cv);
  pthread_mutex_destroy(&dp->mu);
  floe__free(dp);
}

int floe__dataplane_refusals(FloeDataPlane *dp, char *why, size_t cap) {
  pthread_mutex_lock(&dp->mu);
  int n = dp->refusals;
  if (why && cap) snprintf(why, cap, "%s", dp->last_refusal);
  pthread_mutex_unlock(&dp->mu);
  return n;
}

/* ---- TaskInfo ------------------------------------------------------------------------------- */

static floe_code task_info(const ProtobufCMessage *m, Floe__Dist__TaskInfo **out,
                           FloeStatus *st) {
  if (!m || m->descriptor != &floe__dist__task_info__descriptor)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT, "data plane: a %s where a TaskInfo is "
                           "expected", m ? m->descriptor->name : "NULL message");
  *out = (Floe__Dist__TaskInfo *)m;
  return FLOE_OK;
}

floe_code floe__dataplane_fill_info(FloeDataPlane *dp, ProtobufCMessage *msg, FloeStatus *st) {
  Floe__Dist__TaskInfo *info = NULL;
  if (task_info(msg, &info, st) != FLOE_OK) return FLOE_INVALID_ARGUMENT;
  uint8_t addr[FLOE_TRANSPORT_ADDR_MAX];
  size_t len = sizeof addr;
  if (floe__transport_address(dp->mgr, addr, &len) != FLOE_OK)
    return floe_status_set(st, FLOE_INTERNAL, "data plane: the transport's address takes %zu "
                           "bytes (at most %d)", len, FLOE_TRANSPORT_ADDR_MAX);
  const char *name = floe__transport_name(dp->mgr);
  size_t nl = strlen(name) + 1;
  char *transport = floe__wire_alloc(nl);
  uint8_t *blob = floe__wire_alloc(len), *nonce = floe__wire_alloc(FLOE__NONCE);
  if (!transport || !blob || !nonce) {
    floe__wire_dealloc(transport);
    floe__wire_dealloc(blob);
    floe__wire_dealloc(nonce);
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory filling a TaskInfo");
  }
  memcpy(transport, name, nl);
  memcpy(blob, addr, len);
  memcpy(nonce, dp->nonce, FLOE__NONCE);
  info->transport = transport;
  info->transport_address.data = blob;
  info->transport_address.len = len;
  info->data_nonce.data = nonce;
  info->data_nonce.len = FLOE__NONCE;
  return FLOE_OK;
}

void floe__dataplane_info_clear(ProtobufCMessage *msg) {
  Floe__Dist__TaskInfo *info = NULL;
  if (task_info(msg, &info, NULL) != FLOE_OK) return;
  if (info->transport != protobuf_c_empty_string) floe__wire_dealloc(info->transport);
  floe__wire_dealloc(info->transport_address.data);
  floe__wire_dealloc(info->data_nonce.data);
  info->transport = (char *)protobuf_c_empty_string;
  info->transport_address.data = info->data_nonce.data = NULL;
  info->transport_address.len = info->data_nonce.len = 0;
}

/* ---- connecting ------------------------------------------------------------------------------ */

/* The identity in info, checked; the error names the info's place in the list. */
static floe_code info_identity(const Floe__Dist__TaskInfo *info, int i, FloeTaskIdentity *id,
                               FloeStatus *st) {
  if (!info->task || !info->task->job || !info->task->job[0] ||
      strlen(info->task->job) > FLOE__JOB_NAME_MAX || info->task->task < 0)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "data plane: TaskInfo %d has no task identity (job, task)", i);
  memset(id, 0, sizeof *id);
  snprintf(id->job, sizeof id->job, "%s", info->task->job);
  id->task = info->task->task;
  id->incarnation = info->task->incarnation;
  return FLOE_OK;
}

/* Connects to p and posts our hello (under dp->mu). */
static floe_code open_send(FloeDataPlane *dp, Peer *p, const Floe__Dist__TaskInfo *info,
                           FloeStatus *st) {
  char who[128];
  floe__task_identity_str(&p->id, who, sizeof who);
  HelloOut *h = floe__malloc(sizeof *h);
  if (!h) return floe_status_set(st, FLOE_NO_MEMORY, "data plane: out of memory for a hello");
  h->dp = dp;
  h->to = p->id;
  uint8_t proof[32];
  floe_code rc = floe__auth_data_proof(dp->secret, p->nonce, p->id.incarnation, &dp->self,
                                       proof, st);
  if (rc != FLOE_OK) {
    floe__free(h);
    return rc;
  }
  size_t len = floe__data_hello_encode(&dp->self, proof, h->buf);
  int chan = floe__transport_connect(dp->mgr, info->transport_address.data,
                                     info->transport_address.len, st);
  if (chan < 0) {
    floe__free(h);
    floe__status_prefix(st, "data plane: connecting to %s", who);
    return st ? st->code : FLOE_UNAVAILABLE;
  }
  dp->in_flight++;
  rc = floe__transport_isend_on(dp->mgr, chan, h->buf, len, FLOE__DATA_HELLO_TAG, on_hello_sent,
                                h, st);
  if (rc != FLOE_OK) {
    dp->in_flight--;
    floe__free(h);
    floe__transport_close_channel(dp->mgr, chan, false);
    floe__status_prefix(st, "data plane: sending the hello to %s", who);
    return rc;
  }
  p->send_chan = chan;
  return FLOE_OK;
}

/* The peer for id, added when new; a new incarnation closes the old one's channels (under
 * dp->mu). NULL when out of memory. */
static Peer *peer_for(FloeDataPlane *dp, const FloeTaskIdentity *id) {
  Peer *p = find_peer(dp, id->job, id->task);
  if (p && p->id.incarnation != id->incarnation) {
    close_chan(dp, &p->send_chan, false);
    close_chan(dp, &p->recv_chan, true);
    p->id = *id;
    p->dropped = false;
  }
  if (p) return p;
  Peer *grown = floe__realloc(dp->peers, (size_t)(dp->num_peers + 1) * sizeof *grown);
  if (!grown) return NULL;
  dp->peers = grown;
  p = &grown[dp->num_peers++];
  memset(p, 0, sizeof *p);
  p->id = *id;
  p->send_chan = p->recv_chan = -1;
  return p;
}

/* True when every peer of infos (but this task) has its receive channel (under dp->mu). */
static bool all_in(FloeDataPlane *dp, Floe__Dist__TaskInfo *const *infos, int n) {
  for (int i = 0; i < n; i++) {
    const Floe__Dist__TaskId *t = infos[i]->task;
    if (t->task == dp->self.task && strcmp(t->job, dp->self.job) == 0) continue;
    Peer *p = find_peer(dp, t->job, t->task);
    if (!p || p->recv_chan <= 0) return false;
  }
  return true;
}

floe_code floe__dataplane_connect(FloeDataPlane *dp, ProtobufCMessage *const *msgs, int n,
                                  int64_t timeout_ms, FloeStatus *st) {
  if (n < 0 || (n > 0 && !msgs))
    return floe_status_set(st, FLOE_INVALID_ARGUMENT, "data plane: %d TaskInfos", n);
  Floe__Dist__TaskInfo **infos = floe__calloc((size_t)n + 1, sizeof *infos);
  if (!infos) return floe_status_set(st, FLOE_NO_MEMORY, "data plane: out of memory");
  floe_code rc = FLOE_OK;
  const char *mine = floe__transport_name(dp->mgr);
  for (int i = 0; i < n && rc == FLOE_OK; i++) {
    FloeTaskIdentity id;
    if ((rc = task_info(msgs[i], &infos[i], st)) != FLOE_OK ||
        (rc = info_identity(infos[i], i, &id, st)) != FLOE_OK)
      break;
    if (id.task == dp->self.task && strcmp(id.job, dp->self.job) == 0) continue;
    char who[128];
    floe__task_identity_str(&id, who, sizeof who);
    const Floe__Dist__TaskInfo *in = infos[i];
    if (!in->transport || strcmp(in->transport, mine) != 0)
      rc = floe_status_set(st, FLOE_FAILED_PRECONDITION,
                           "data plane: %s uses the transport \"%s\", this task \"%s\" (set "
                           "FLOE_TRANSPORT alike on every task)",
                           who, in->transport ? in->transport : "", mine);
    else if (in->data_nonce.len != FLOE__NONCE)
      rc = floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "data plane: %s sent a data nonce of %zu bytes (%d expected)", who,
                           in->data_nonce.len, FLOE__NONCE);
    else if (in->transport_address.len == 0 ||
             in->transport_address.len > FLOE_TRANSPORT_ADDR_MAX)
      rc = floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "data plane: %s sent a transport address of %zu bytes (1 to %d)",
                           who, in->transport_address.len, FLOE_TRANSPORT_ADDR_MAX);
  }
  if (rc != FLOE_OK) goto out;

  pthread_mutex_lock(&dp->mu);
  for (int i = 0; i < n && rc == FLOE_OK; i++) {
    FloeTaskIdentity id;
    info_identity(infos[i], i, &id, NULL);
    if (id.task == dp->self.task && strcmp(id.job, dp->self.job) == 0) continue;
    Peer *p = peer_for(dp, &id);
    if (!p) {
      rc = floe_status_set(st, FLOE_NO_MEMORY, "data plane: out of memory adding a peer");
      break;
    }
    if (p->dropped) {
      char who[128];
      rc = floe_status_set(st, FLOE_UNAVAILABLE,
                           "data plane: %s was dropped (its task died); a restarted task has "
                           "a new incarnation",
                           floe__task_identity_str(&id, who, sizeof who));
      break;
    }
    memcpy(p->nonce, infos[i]->data_nonce.data, FLOE__NONCE);
    if (p->send_chan <= 0) rc = open_send(dp, p, infos[i], st);
  }
  dp->connected_once = true;
  resolve_held(dp);
  if (rc == FLOE_OK) {
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    int64_t ms = timeout_ms < 0 ? 0 : timeout_ms;
    deadline.tv_sec += (time_t)(ms / 1000);
    deadline.tv_nsec += (long)(ms % 1000) * 1000000L;
    deadline.tv_sec += deadline.tv_nsec / 1000000000L;
    deadline.tv_nsec %= 1000000000L;
    while (!all_in(dp, infos, n) && !dp->stop)
      if (pthread_cond_timedwait(&dp->cv, &dp->mu, &deadline) == ETIMEDOUT) break;
    if (!all_in(dp, infos, n)) {
      char missing[1024], self[128];
      size_t used = 0;
      missing[0] = '\0';
      for (int i = 0; i < n; i++) {
        const Floe__Dist__TaskId *t = infos[i]->task;
        if (t->task == dp->self.task && strcmp(t->job, dp->self.job) == 0) continue;
        Peer *p = find_peer(dp, t->job, t->task);
        if (p && p->recv_chan > 0) continue;
        FloeTaskIdentity id;
        info_identity(infos[i], i, &id, NULL);
        char who[128];
        int w = snprintf(missing + used, sizeof missing - used, "%s%s", used ? ", " : "",
                         floe__task_identity_str(&id, who, sizeof who));
        if (w < 0 || (size_t)w >= sizeof missing - used) break;
        used += (size_t)w;
      }
      rc = floe_status_set(st, FLOE_DEADLINE_EXCEEDED,
                           "data plane of %s: no data connection from %s within %lld ms%s%s",
                           floe__task_identity_str(&dp->self, self, sizeof self), missing,
                           (long long)ms, dp->refusals ? "; the latest refusal: " : "",
                           dp->refusals ? dp->last_refusal : "");
    }
  }
  pthread_mutex_unlock(&dp->mu);
out:
  floe__free(infos);
  return rc;
}

void floe__dataplane_drop_peer(FloeDataPlane *dp, const char *job, int task) {
  pthread_mutex_lock(&dp->mu);
  Peer *p = find_peer(dp, job, task);
  if (p) {
    /* Pending receives on it end with FLOE_CANCELLED: the rendezvous says UNAVAILABLE. */
    close_chan(dp, &p->send_chan, false);
    close_chan(dp, &p->recv_chan, true);
    p->dropped = true;
  }
  pthread_mutex_unlock(&dp->mu);
}
