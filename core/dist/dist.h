/* SPDX-License-Identifier: Apache-2.0 */
/* dist.h - libfloe's distributed layer (core/dist/): cluster specs (TF_CONFIG-style JSON,
 * PMIx under mpirun/srun), the control plane's framed and signed messages, the job secret
 * and the mutual challenge-response that opens every control connection, and connections
 * over TCP with a deadline on every read and write. It calls the session layer and below;
 * train, data and the top may call it. Nothing here is public API (floe__*). */
#ifndef FLOE__LAYER_DIST_H
#define FLOE__LAYER_DIST_H

#include "session/session.h"
#include "floe/floe_dist.h"

/* protobuf-c's; core/dist/dist.pb-c.h has the message types */
struct ProtobufCMessage;
struct Floe__Dist__Status;
struct Floe__Dist__TaskInfo;

/* ------------------------------------------------------------------------------------ */
/* cluster.c: which tasks make up the job, and which one this process is. */

#define FLOE__CLUSTER_MAX_TASKS 4096            /* over all jobs */
#define FLOE__CLUSTER_MAX_BYTES (1u << 20)      /* a spec's JSON, from a file or a variable */
#define FLOE__JOB_NAME_MAX 63                   /* FloeDeviceName.job holds 63 + NUL */
#define FLOE__HOST_MAX 253                      /* a DNS name's longest text form */

typedef struct FloeClusterTask {
  char *address; /* "host:port" as written in the spec (owned) */
  char *host;    /* "10.0.0.1", "::1" (no brackets), "node-3.example" (owned) */
  int port;      /* 1..65535 */
} FloeClusterTask;

typedef struct FloeClusterJob {
  char *name;              /* [a-z][a-z0-9_]*, at most FLOE__JOB_NAME_MAX bytes (owned) */
  int num_tasks;           /* >= 1 */
  FloeClusterTask *tasks;  /* task i of the job (owned) */
} FloeClusterJob;

/* A task of a spec by position: jobs[job].tasks[task]. */
typedef struct FloeTaskRef {
  int job, task;
} FloeTaskRef;

typedef struct FloeClusterSpec {
  int num_jobs;
  FloeClusterJob *jobs;  /* in the order the spec gives them (owned) */
  int num_tasks;         /* over all jobs */
  FloeTaskRef self;      /* this process's task; job -1 when the spec names none */
  char *source;          /* where it came from, for messages: "FLOE_CONFIG", "TF_CONFIG",
                          * "cluster.json", "PMIx (namespace N)" (owned) */
} FloeClusterSpec;

/* Parses TF_CONFIG-compatible JSON, json[0..len) (need not end in NUL):
 *   {"cluster": {"chief": ["host:port"], "worker": [...], "ps": [...]},
 *    "task": {"type": "worker", "index": 0}}
 * ("environment" and "rpc_layer", which TF's launchers add, are accepted and ignored). source
 * names where the text came from and starts every error message ("TF_CONFIG: cluster.worker[1]:
 * ..."). Validation is strict: UTF-8, no duplicate keys, job names [a-z][a-z0-9_]*, addresses
 * host:port (IPv4, [IPv6] or a host name; port 1-65535), no address twice, at most
 * FLOE__CLUSTER_MAX_TASKS tasks, the task's type a job of the cluster and its index in range.
 * "task" may be absent (self.job is then -1). On OK *out is the caller's
 * (floe__cluster_free); on error *out is NULL and st says what and where. */
floe_code floe__cluster_parse(const char *json, size_t len, const char *source,
                              FloeClusterSpec **out, FloeStatus *st);
/* The spec of the environment: FLOE_CONFIG when set (it wins), else TF_CONFIG; out->source
 * says which. NOT_FOUND when neither is set. Ownership as floe__cluster_parse. */
floe_code floe__cluster_from_env(FloeClusterSpec **out, FloeStatus *st);
/* The spec in the file path (at most FLOE__CLUSTER_MAX_BYTES): TF_CONFIG's form, or the
 * "cluster" object alone. job (NULL: the file's "task", if any) and task name this process's
 * task and take precedence over the file's "task". Ownership as floe__cluster_parse. */
floe_code floe__cluster_from_file(const char *path, const char *job, int task,
                                  FloeClusterSpec **out, FloeStatus *st);
/* Builds a spec from addresses (borrowed, n of them): addresses[0] the chief, the next
 * num_ps ps tasks 0..num_ps-1, the rest workers; rank is this process's index in addresses.
 * Every address is validated as in a spec. Ownership as floe__cluster_parse. */
floe_code floe__cluster_from_addresses(const char *const *addresses, int n, int rank, int num_ps,
                                       const char *source, FloeClusterSpec **out,
                                       FloeStatus *st);
void floe__cluster_free(FloeClusterSpec *spec); /* NULL is fine */

/* The job named name, or -1. */
int floe__cluster_find_job(const FloeClusterSpec *spec, const char *name);
/* The task a name like "/job:worker/task:1" (or "/job:worker/replica:0/task:1", with any
 * device part) names. NOT_FOUND naming the jobs or the job's task count when there is no
 * such task; INVALID_ARGUMENT for a name that does not parse or names no job. */
floe_code floe__cluster_lookup(const FloeClusterSpec *spec, const char *name, FloeTaskRef *out,
                               FloeStatus *st);
/* The task that holds the device dn (parsed by floe_device_name_parse): no job, or job
 * "localhost" when the cluster has no such job, is this process's task; a job without a task
 * is task 0 when the job has one task (else INVALID_ARGUMENT: ambiguous); replica must be 0
 * or unspecified. */
floe_code floe__cluster_task_of_device(const FloeClusterSpec *spec, const FloeDeviceName *dn,
                                       FloeTaskRef *out, FloeStatus *st);
/* The task's address ("host:port", borrowed from spec); NULL for a ref out of range. */
const char *floe__cluster_address(const FloeClusterSpec *spec, FloeTaskRef ref);
/* "/job:J/task:T" into buf (cap bytes); returns buf. */
char *floe__cluster_task_name(const FloeClusterSpec *spec, FloeTaskRef ref, char *buf,
                              size_t cap);

/* "host:port" split and checked: IPv4 dotted quad, [IPv6] in brackets, or a host name (RFC
 * 1123 labels); port 1-65535 (0 too when allow_port0: "any free port" for a listener). host
 * gets the host without brackets (FLOE__HOST_MAX + 1 bytes). On error st says what is wrong
 * with the address, prefixed by what (the field or option it came from). */
floe_code floe__hostport_parse(const char *addr, bool allow_port0, const char *what,
                               char host[FLOE__HOST_MAX + 1], int *port, FloeStatus *st);

/* ------------------------------------------------------------------------------------ */
/* pmix.c: the cluster under a PMIx launcher (Open MPI's mpirun, Slurm's srun). libpmix.so.2
 * is dlopened only here, only when the environment shows a launcher, and never linked. */

/* True when PMIX_RANK and PMIX_NAMESPACE are set: this process was started by a PMIx
 * launcher. */
bool floe__pmix_detect(void);
typedef struct FloePmix FloePmix;
/* dlopens library (NULL: "libpmix.so.2"), resolves the functions used and calls PMIx_Init;
 * *rank and *size are this process's rank and the job's size. UNIMPLEMENTED when Floe was
 * built without pmix.h; UNAVAILABLE naming the library and dlerror() when it cannot be
 * loaded; the PMIx error string when PMIx_Init fails. The caller owns *out
 * (floe__pmix_close, which calls PMIx_Finalize; the library stays loaded). */
floe_code floe__pmix_open(const char *library, FloePmix **out, int *rank, int *size,
                          FloeStatus *st);
/* Every rank publishes blob[0..len) (at most 64 KiB) under key; after a fence, blobs[r]
 * (floe__malloc'd, caller frees each and the array) and lens[r] hold rank r's, for the job's
 * size ranks. Collective: every rank must call it. */
floe_code floe__pmix_allgather(FloePmix *p, const char *key, const void *blob, size_t len,
                               uint8_t ***blobs, size_t **lens, FloeStatus *st);
void floe__pmix_close(FloePmix *p);
/* Told once when a fence completes: code OK, or UNAVAILABLE when it failed. */
typedef void (*FloePmixDoneFn)(void *arg, floe_code code);
/* Posts this rank's part of a fence over the job's ranks (no data) and returns at once;
 * done(arg, code) runs on PMIx's thread when every rank has joined, never after
 * floe__pmix_close has returned. Collective; one fence at a time. */
floe_code floe__pmix_fence_nb(FloePmix *p, FloePmixDoneFn done, void *arg, FloeStatus *st);
/* Joins a fence over the job's ranks and waits until every rank has (or the launcher ended
 * the job). Collective. */
floe_code floe__pmix_fence(FloePmix *p, FloeStatus *st);
/* The cluster under a launcher: rank 0 the chief, ranks 1.. workers 0.., from the
 * "host:port" each rank publishes (my_address: this process's, already bound). Opens and
 * closes PMIx around one allgather. Ownership as floe__cluster_parse. */
floe_code floe__cluster_from_pmix(const char *my_address, FloeClusterSpec **out,
                                  FloeStatus *st);
/* The host this rank's server binds under a launcher, into host (no brackets; FLOE__HOST_MAX
 * + 1 bytes). The rule: FLOE_SERVER_HOST when set (an interface of this machine: its first
 * IPv4 address, else its first global IPv6 one; otherwise a host name or address used as is,
 * the wildcard refused); else 127.0.0.1 when all_local (every rank runs on this node); else
 * the first address gethostname() resolves to, refused (FAILED_PRECONDITION, saying to set
 * FLOE_SERVER_HOST) when that is a loopback address (Debian maps the host name to
 * 127.0.1.1). */
floe_code floe__pmix_host(bool all_local, char host[FLOE__HOST_MAX + 1], FloeStatus *st);
/* The cluster under a launcher for a task that serves: opens PMIx, picks the host
 * (floe__pmix_host, all_local from PMIX_LOCAL_SIZE == the job's size), listens there on a
 * free port, publishes the bound address and builds the spec (floe__cluster_from_pmix's
 * layout; its self is this rank). The listener is kept open, so no other process can take
 * the port before the server starts on it (floe__rpc_server_start_on). Collective: a rank
 * that cannot listen still joins the exchange, publishing no address, so every rank fails
 * (the others naming it) instead of waiting. With pmix, PMIx stays open for the caller (a
 * fence when the chief is done); else it is closed here. Caller owns *out, *listener and
 * *pmix (all NULL on error). */
typedef struct FloeListener FloeListener; /* conn.c, below */
floe_code floe__cluster_listen_pmix(FloeClusterSpec **out, FloeListener **listener,
                                    FloePmix **pmix, FloeStatus *st);

/* ------------------------------------------------------------------------------------ */
/* wire.c: frames of control messages (core/dist/dist.proto).
 *
 *   magic "FLOC" | version u16 | type u16 | length u32 | sequence u64 | payload | MAC[32]
 *
 * integers big-endian; the payload is one protobuf message of the type's kind; the MAC is
 * HMAC-SHA256 under the connection's session key of one direction byte ('C': client to
 * server, 'S': server to client), the 20 header bytes and the payload. The handshake's frames
 * (HELLO, PROOF, AUTH_RESULT) come before there is a key and are signed with 32 zero bytes:
 * they are checked for integrity only, and what matters in them is bound by the proofs. */

#define FLOE__WIRE_MAGIC "FLOC"
#define FLOE__WIRE_VERSION 1
#define FLOE__WIRE_HEADER 20
#define FLOE__WIRE_MAC 32
#define FLOE__WIRE_DEFAULT_MAX_FRAME (64u << 20)   /* types that carry tensors or graphs */
#define FLOE__WIRE_DEFAULT_MAX_CONTROL (1u << 20)  /* every other type */
#define FLOE__WIRE_MAX_HANDSHAKE 1024              /* the handshake's types */

/* The message types: X(NAME, number, message, size class). Numbers are the wire's: append
 * only. Size classes: H handshake, C control, T tensors or graphs. */
#define FLOE__WIRE_TYPES(X)                                                  \
  X(HELLO, 1, hello, H)                                                      \
  X(PROOF, 2, proof, H)                                                      \
  X(AUTH_RESULT, 3, auth_result, H)                                          \
  X(REGISTER_TASK, 16, register_task_request, C)                             \
  X(REGISTER_TASK_RESPONSE, 17, register_task_response, C)                   \
  X(HEARTBEAT, 18, heartbeat_request, C)                                     \
  X(HEARTBEAT_RESPONSE, 19, heartbeat_response, C)                           \
  X(WAIT_FOR_ALL_TASKS, 20, wait_for_all_tasks_request, C)                   \
  X(WAIT_FOR_ALL_TASKS_RESPONSE, 21, wait_for_all_tasks_response, C)         \
  X(REPORT_ERROR, 22, report_error_request, C)                               \
  X(REPORT_ERROR_RESPONSE, 23, report_error_response, C)                     \
  X(BARRIER, 24, barrier_request, C)                                         \
  X(BARRIER_RESPONSE, 25, barrier_response, C)                               \
  X(KV_INSERT, 26, kv_insert_request, C)                                     \
  X(KV_INSERT_RESPONSE, 27, kv_insert_response, C)                           \
  X(KV_GET, 28, kv_get_request, C)                                           \
  X(KV_GET_RESPONSE, 29, kv_get_response, C)                                 \
  X(REGISTER_GRAPH, 32, register_graph_request, T)                           \
  X(REGISTER_GRAPH_RESPONSE, 33, register_graph_response, C)                 \
  X(RUN_GRAPH, 34, run_graph_request, T)                                     \
  X(RUN_GRAPH_RESPONSE, 35, run_graph_response, T)                           \
  X(CLEANUP_GRAPH, 36, cleanup_graph_request, C)                             \
  X(CLEANUP_GRAPH_RESPONSE, 37, cleanup_graph_response, C)                   \
  X(DEREGISTER_GRAPH, 38, deregister_graph_request, C)                       \
  X(DEREGISTER_GRAPH_RESPONSE, 39, deregister_graph_response, C)             \
  X(CREATE_WORKER_SESSION, 40, create_worker_session_request, C)             \
  X(CREATE_WORKER_SESSION_RESPONSE, 41, create_worker_session_response, C)   \
  X(DELETE_WORKER_SESSION, 42, delete_worker_session_request, C)             \
  X(DELETE_WORKER_SESSION_RESPONSE, 43, delete_worker_session_response, C)   \
  X(CREATE_SESSION, 48, create_session_request, T)                           \
  X(CREATE_SESSION_RESPONSE, 49, create_session_response, C)                 \
  X(RUN_STEP, 50, run_step_request, T)                                       \
  X(RUN_STEP_RESPONSE, 51, run_step_response, T)                             \
  X(CLOSE_SESSION, 52, close_session_request, C)                             \
  X(CLOSE_SESSION_RESPONSE, 53, close_session_response, C)

typedef enum FloeWireType {
#define FLOE__WIRE_ENUM(name, num, msg, cls) FLOE__WIRE_##name = num,
  FLOE__WIRE_TYPES(FLOE__WIRE_ENUM)
#undef FLOE__WIRE_ENUM
} FloeWireType;

/* Size limits of payloads; 0 fields take the defaults above. */
typedef struct FloeWireLimits {
  uint32_t max_frame;    /* types of class T */
  uint32_t max_control;  /* types of class C */
} FloeWireLimits;

typedef struct FloeWireHeader {
  uint16_t version, type;
  uint32_t length;  /* of the payload */
  uint64_t seq;
} FloeWireHeader;

/* "RUN_GRAPH", or NULL for a type this build does not know. */
const char *floe__wire_type_name(uint16_t type);
/* The payload limit of a known type under limits (NULL: defaults); 0 for an unknown type. */
uint32_t floe__wire_type_limit(uint16_t type, const FloeWireLimits *limits);
/* The protobuf-c descriptor of a known type's message (const ProtobufCMessageDescriptor *);
 * NULL for an unknown type. */
const void *floe__wire_type_descriptor(uint16_t type);

void floe__wire_header_encode(const FloeWireHeader *h, uint8_t out[FLOE__WIRE_HEADER]);
/* Decodes and checks a header before anything is allocated for its payload: the magic, the
 * version, a known type and a length within the type's limit. peer names the other side in
 * messages ("127.0.0.1:7001 (/job:worker/task:1)"). */
floe_code floe__wire_header_decode(const uint8_t in[FLOE__WIRE_HEADER],
                                   const FloeWireLimits *limits, const char *peer,
                                   FloeWireHeader *h, FloeStatus *st);
/* HMAC-SHA256 under key of dir, header and payload[0..len). */
floe_code floe__wire_mac(const uint8_t key[32], uint8_t dir,
                         const uint8_t header[FLOE__WIRE_HEADER], const uint8_t *payload,
                         size_t len, uint8_t mac[FLOE__WIRE_MAC], FloeStatus *st);
/* A whole frame of msg (whose descriptor must be type's) with sequence seq, signed under
 * key for direction dir: *frame (floe__malloc'd, caller frees) holds *len bytes. */
floe_code floe__wire_frame_encode(uint16_t type, const struct ProtobufCMessage *msg,
                                  uint64_t seq, const uint8_t key[32], uint8_t dir,
                                  const FloeWireLimits *limits, uint8_t **frame, size_t *len,
                                  FloeStatus *st);
/* Checks a received frame's MAC (constant time) and sequence number (exactly expect_seq:
 * anything else is a replayed, reordered or dropped frame), then unpacks its payload with
 * floe__wire_unpack. h is the decoded header, hdr its bytes, body the payload followed by the
 * MAC (h->length + FLOE__WIRE_MAC bytes). On OK *msg is the caller's (floe__wire_free). */
floe_code floe__wire_frame_open(const FloeWireHeader *h, const uint8_t hdr[FLOE__WIRE_HEADER],
                                const uint8_t *body, const uint8_t key[32], uint8_t dir,
                                uint64_t expect_seq, const char *peer,
                                struct ProtobufCMessage **msg, FloeStatus *st);
/* A whole frame in buf[0..len) (exactly one): header, MAC, sequence, payload, as a receiver
 * checks them. For tests and fuzzing; connections read the header first. */
floe_code floe__wire_frame_decode(const uint8_t *buf, size_t len, const FloeWireLimits *limits,
                                  const uint8_t key[32], uint8_t dir, uint64_t expect_seq,
                                  const char *peer, uint16_t *type,
                                  struct ProtobufCMessage **msg, FloeStatus *st);
/* Unpacks payload[0..len) as type's message with an allocator bounded to a few times len
 * (a message that would need more memory is refused, not unpacked). On OK *msg is the
 * caller's (floe__wire_free); errors name the peer, the type and the byte offset where the
 * payload stops being readable. */
floe_code floe__wire_unpack(uint16_t type, const uint8_t *payload, size_t len, const char *peer,
                            struct ProtobufCMessage **msg, FloeStatus *st);
void floe__wire_free(struct ProtobufCMessage *msg); /* NULL is fine */
/* Memory for the fields of a message built by hand that floe__wire_free may free with the
 * message (it frees with the allocator unpacking used): n bytes, NULL when out of memory;
 * floe__wire_dealloc frees one such block (NULL is fine). */
void *floe__wire_alloc(size_t n);
void floe__wire_dealloc(void *p);
/* A deep copy of msg (any dist.proto message, not only a frame's type) that floe__wire_free
 * frees: packed and unpacked again. On OK *out is the caller's. */
floe_code floe__wire_copy(const struct ProtobufCMessage *msg, struct ProtobufCMessage **out,
                          FloeStatus *st);

/* ------------------------------------------------------------------------------------ */
/* auth.c: the job's secret and the proofs of holding it. */

#define FLOE__SECRET_MIN 16
#define FLOE__SECRET_MAX 4096
#define FLOE__NONCE 32

typedef struct FloeJobSecret FloeJobSecret; /* bytes wiped when freed */
/* The secret of the environment: FLOE_JOB_SECRET_FILE (a file, floe__secret_from_file) or
 * FLOE_JOB_SECRET (its bytes); both set is INVALID_ARGUMENT, neither FAILED_PRECONDITION
 * saying how to give one. Caller owns *out (floe__secret_free). */
floe_code floe__secret_from_env(FloeJobSecret **out, FloeStatus *st);
/* The secret in path: a regular file owned by this user, mode 0600 or stricter, 16 bytes to
 * 4 KiB (one final newline is not part of it). Each refusal names the path and the fix. */
floe_code floe__secret_from_file(const char *path, FloeJobSecret **out, FloeStatus *st);
/* A secret of bytes[0..len) (copied); source names it in messages. */
floe_code floe__secret_from_bytes(const void *bytes, size_t len, const char *source,
                                  FloeJobSecret **out, FloeStatus *st);
const char *floe__secret_source(const FloeJobSecret *s); /* "FLOE_JOB_SECRET", a path */
void floe__secret_free(FloeJobSecret *s);

/* Who a task is: its job, index and the random incarnation it drew at start. */
typedef struct FloeTaskIdentity {
  char job[FLOE__JOB_NAME_MAX + 1];
  int task;
  uint64_t incarnation;
} FloeTaskIdentity;

/* HMAC-SHA256 under a 32-byte key of a, b and c in turn (any may be empty): frames' MACs. */
floe_code floe__hmac_sha256(const uint8_t key[32], const void *a, size_t an, const void *b,
                            size_t bn, const void *c, size_t cn, uint8_t out[32],
                            FloeStatus *st);
/* n random bytes from getrandom (never a weaker source). */
floe_code floe__auth_random(uint8_t *out, size_t n, FloeStatus *st);
/* HMAC(secret, "floe-auth-v1" || role || nonce_c || nonce_s || who): the proof that the side
 * of role ('C' client, 'S' server) whose identity is who holds the secret. */
floe_code floe__auth_proof(const FloeJobSecret *s, uint8_t role,
                           const uint8_t nonce_c[FLOE__NONCE], const uint8_t nonce_s[FLOE__NONCE],
                           const FloeTaskIdentity *who, uint8_t out[32], FloeStatus *st);
/* HMAC(secret, "floe-key-v1" || nonce_c || nonce_s): the key of the connection's frames. */
floe_code floe__auth_session_key(const FloeJobSecret *s, const uint8_t nonce_c[FLOE__NONCE],
                                 const uint8_t nonce_s[FLOE__NONCE], uint8_t out[32],
                                 FloeStatus *st);
/* HMAC(secret, "floe-data-v1" || receiver_nonce || receiver_incarnation (u64, big-endian) ||
 * sender): the proof in a data-plane hello (dataplane.c) that sender holds the secret, bound
 * to one incarnation of the receiver (its data nonce is drawn per incarnation), so a hello
 * made for one incarnation is refused by the next. */
floe_code floe__auth_data_proof(const FloeJobSecret *s, const uint8_t receiver_nonce[FLOE__NONCE],
                                uint64_t receiver_incarnation, const FloeTaskIdentity *sender,
                                uint8_t out[32], FloeStatus *st);
/* Constant-time equality of n bytes. */
bool floe__auth_equal(const void *a, const void *b, size_t n);
/* "/job:worker/task:1 (incarnation 0123456789abcdef)" into buf; returns buf. */
char *floe__task_identity_str(const FloeTaskIdentity *id, char *buf, size_t cap);

/* ------------------------------------------------------------------------------------ */
/* conn.c: authenticated control connections over TCP. Every read and write has a deadline
 * (poll; nothing spins, nothing blocks for ever); a peer that closes or resets is
 * UNAVAILABLE, one that stalls past the deadline DEADLINE_EXCEEDED, both naming the peer. A
 * connection that saw a bad frame (MAC, sequence, size, protobuf) refuses every later call
 * with the first error. One thread may send while another receives. */

typedef struct FloeConnOptions {
  const FloeJobSecret *secret;  /* borrowed; NULL: connections are refused, saying how to
                                 * give one */
  FloeTaskIdentity self;        /* proven to the peer */
  FloeWireLimits limits;        /* of received frames; zeros: defaults */
  int timeout_ms;               /* connect, accept's handshake; <= 0: 10000 */
  const char *expect_job;       /* client: the server must be this task (NULL: any) */
  int expect_task;
} FloeConnOptions;

typedef struct FloeConn FloeConn;
typedef struct FloeListener FloeListener;

/* Listens on exactly address ("host:port"; port 0: a free port, see floe__listener_address):
 * the wildcard only when the address is 0.0.0.0 or [::]. Caller owns *out
 * (floe__listener_close). */
floe_code floe__listener_open(const char *address, FloeListener **out, FloeStatus *st);
/* The bound "host:port" (borrowed from l). */
const char *floe__listener_address(const FloeListener *l);
/* Waits up to timeout_ms (< 0: for ever) for a connection and authenticates it within
 * o->timeout_ms. A peer that fails the handshake is closed and its error returned (naming
 * it); the listener stays open for the next. Caller owns *out (floe__conn_close). */
floe_code floe__listener_accept(FloeListener *l, const FloeConnOptions *o, int timeout_ms,
                                FloeConn **out, FloeStatus *st);
/* The two halves of floe__listener_accept, for a server that runs each handshake on its
 * own thread: a connection taken from the backlog (the peer not yet authenticated: only
 * floe__conn_handshake_server, floe__conn_peer, floe__conn_shutdown and floe__conn_close
 * may be called on it), then the server's side of the handshake within o->timeout_ms. On a
 * failed handshake the caller closes c. Caller owns *out. After floe__listener_shutdown,
 * accept_raw returns CANCELLED. */
floe_code floe__listener_accept_raw(FloeListener *l, const FloeConnOptions *o, int timeout_ms,
                                    FloeConn **out, FloeStatus *st);
floe_code floe__conn_handshake_server(FloeConn *c, const FloeConnOptions *o, FloeStatus *st);
/* Wakes a thread waiting in floe__listener_accept(_raw) on l (it returns CANCELLED) and
 * refuses every later accept. Thread-safe; l stays valid until closed. */
void floe__listener_shutdown(FloeListener *l);
void floe__listener_close(FloeListener *l);

/* Connects to address within o->timeout_ms and runs the handshake as the client. Caller
 * owns *out (floe__conn_close). */
floe_code floe__conn_connect(const char *address, const FloeConnOptions *o, FloeConn **out,
                             FloeStatus *st);
/* Sends msg as one frame of type within timeout_ms (<= 0: the options' timeout_ms; there is
 * no waiting for ever). msg borrowed. */
floe_code floe__conn_send(FloeConn *c, uint16_t type, const struct ProtobufCMessage *msg,
                          int timeout_ms, FloeStatus *st);
/* Receives one frame within timeout_ms (<= 0: the options' timeout_ms): *type and *msg (the
 * caller's: floe__wire_free). A deadline that passes before the first byte of a frame leaves
 * the connection usable; one that passes mid-frame closes it. */
floe_code floe__conn_recv(FloeConn *c, int timeout_ms, uint16_t *type,
                          struct ProtobufCMessage **msg, FloeStatus *st);
/* The peer in messages: "127.0.0.1:7001 (/job:worker/task:1, incarnation ...)" (borrowed). */
const char *floe__conn_peer(const FloeConn *c);
/* The peer's proven identity (borrowed). */
const FloeTaskIdentity *floe__conn_peer_identity(const FloeConn *c);
void floe__conn_close(FloeConn *c); /* NULL is fine */
/* Waits up to timeout_ms (<= 0: the options' timeout_ms) until something can be read from c
 * (a frame's first byte, or the peer's close: the receive that follows reports it) without
 * reading it: DEADLINE_EXCEEDED leaves c usable. For a server's idle wait between requests,
 * which must not put the per-frame deadline on a peer that has nothing to ask. */
floe_code floe__conn_wait(FloeConn *c, int timeout_ms, FloeStatus *st);
/* True when an idle client connection has something to read (its peer closed or reset it,
 * or sent what nobody asked for): not to be used for a request. Never blocks. */
bool floe__conn_stale(FloeConn *c);
/* Shuts c down from any thread while others may use it: a thread in floe__conn_recv, send or
 * wait on c wakes with UNAVAILABLE ("shut down by this side"), as does every later call. c
 * must stay open (not yet floe__conn_close'd) during the call. */
void floe__conn_shutdown(FloeConn *c);
/* True when the last floe__conn_recv on c failed because the peer closed the connection
 * between frames (an ordinary end, not a torn frame). */
bool floe__conn_closed_cleanly(FloeConn *c);

/* For tests of hostile peers: the bytes of the next frame this side would send (its
 * sequence number used up; caller frees *frame), and raw writes within timeout_ms. */
floe_code floe__conn_encode(FloeConn *c, uint16_t type, const struct ProtobufCMessage *msg,
                            uint8_t **frame, size_t *len, FloeStatus *st);
floe_code floe__conn_write_raw(FloeConn *c, const void *buf, size_t len, int timeout_ms,
                               FloeStatus *st);

/* ------------------------------------------------------------------------------------ */
/* rpc.c: a control server (a listener, a thread per connection, handlers by message type)
 * and a pool of client connections per peer. Requests on one connection are served in
 * order: a handler receives one request and sends its response (or several frames, or
 * none) on the same connection before the next request is read. Concurrency comes from
 * several connections (the client's pool opens more as needed). */

/* Time for the services' waits: monotonic milliseconds; condition variables on that clock
 * (floe__dist_cond_init); a wait on one until deadline_ms (INT64_MAX: until signalled) that
 * returns false, without waiting, once the deadline has passed (callers loop on their
 * condition: wakes may be spurious). */
int64_t floe__dist_now_ms(void);
void floe__dist_cond_init(pthread_cond_t *cv);
bool floe__dist_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t deadline_ms);

typedef struct FloeRpcServer FloeRpcServer;
/* Serves one request. req is the unpacked request (borrowed for the call); the handler sends
 * the response with floe__conn_send(c, ...) (c borrowed for the call; the handler may block,
 * e.g. a barrier, for as long as the request says). A non-OK return closes the connection
 * (a broken peer), with st's message logged. peer is the peer's proven identity. */
typedef floe_code (*FloeRpcHandler)(void *arg, FloeConn *c, const FloeTaskIdentity *peer,
                                    uint16_t type, const struct ProtobufCMessage *req,
                                    FloeStatus *st);
/* Told of what the server refuses or drops (a failed handshake naming the peer and why, a
 * bad frame, an unknown type, a connection limit reached, a handler's error); NULL: silent.
 * May run on any of the server's threads at once. */
typedef void (*FloeRpcLogFn)(void *arg, const char *msg);
typedef struct FloeRpcServerOptions {
  FloeConnOptions conn;        /* copied; conn.secret borrowed and must outlive the server */
  int max_connections;         /* open at once; <= 0: 256. Past it, a new one is closed at
                                * once and logged */
  FloeRpcLogFn log;
  void *log_arg;
} FloeRpcServerOptions;
/* Listens on address (floe__listener_open's rules) and starts the accept thread. Handlers
 * are added before or after start. Caller owns *out (floe__rpc_server_free). */
floe_code floe__rpc_server_start(const char *address, const FloeRpcServerOptions *o,
                                 FloeRpcServer **out, FloeStatus *st);
/* The same on a listener already open (floe__listener_open), whose address was handed out
 * before the server could start (a free port published through PMIx): binding it again
 * would race other processes for the port. Takes l in every case: the server owns it, or
 * on error it is closed. Caller owns *out (floe__rpc_server_free). */
floe_code floe__rpc_server_start_on(FloeListener *l, const FloeRpcServerOptions *o,
                                    FloeRpcServer **out, FloeStatus *st);
/* The handler for a request type (replaces any); fn NULL removes it, and then waits until
 * no call of that type's handler is running (so its arg may be freed next: never remove a
 * type's handler from inside a call of it). A request whose type has no handler is answered
 * by nothing and logged; the connection is closed. Types below 256 only (the wire's are).
 * Thread-safe. */
void floe__rpc_server_handle(FloeRpcServer *s, uint16_t type, FloeRpcHandler fn, void *arg);
const char *floe__rpc_server_address(const FloeRpcServer *s); /* "host:port" bound, borrowed */
/* Stops accepting, shuts every connection down (handlers blocked in floe__conn_recv/send
 * wake with UNAVAILABLE), joins every thread, frees. NULL is fine. Handlers must not block
 * past their request's own deadline ignoring the connection (they are joined). */
void floe__rpc_server_free(FloeRpcServer *s);

/* A client's connections to one server: taken for one request-response, given back. */
typedef struct FloeConnPool FloeConnPool;
/* o copied (o->secret borrowed, outlives the pool). No connection is made yet. Caller owns
 * *out (floe__conn_pool_free). */
floe_code floe__conn_pool_new(const char *address, const FloeConnOptions *o, FloeConnPool **out,
                              FloeStatus *st);
/* An idle connection, or a new one (connect + handshake within o->timeout_ms). Caller gives
 * it back with floe__conn_pool_put. */
floe_code floe__conn_pool_get(FloeConnPool *p, FloeConn **out, FloeStatus *st);
/* Gives c back: broken false keeps it for reuse, true closes it (a failed exchange). */
void floe__conn_pool_put(FloeConnPool *p, FloeConn *c, bool broken);
/* One request and its response on a pooled connection: sends req as type, waits up to
 * timeout_ms for the response, which must be expect_type (else INTERNAL naming both).
 * *resp the caller's (floe__wire_free). An error status inside the response is not looked
 * at here. */
floe_code floe__conn_pool_call(FloeConnPool *p, uint16_t type, const struct ProtobufCMessage *req,
                               uint16_t expect_type, int timeout_ms,
                               struct ProtobufCMessage **resp, FloeStatus *st);
/* Closes every idle connection, and shuts down those taken (their holders get UNAVAILABLE);
 * later gets fail with UNAVAILABLE. Thread-safe; the pool stays valid until freed. */
void floe__conn_pool_shutdown(FloeConnPool *p);
void floe__conn_pool_free(FloeConnPool *p); /* no connection may be taken; NULL is fine */
const char *floe__conn_pool_address(const FloeConnPool *p); /* borrowed */

/* Status in responses (dist.proto's Status): from and to a FloeStatus. to_proto sets out's
 * code and message; the message is borrowed from st (valid while st is unchanged; "" for OK).
 * from_proto sets st (NULL status_msg: OK) and returns its code; a code this build does not
 * know becomes UNKNOWN with the number in the message. */
void floe__status_to_proto(const FloeStatus *st, struct Floe__Dist__Status *out);
floe_code floe__status_from_proto(const struct Floe__Dist__Status *in, FloeStatus *st);

/* ------------------------------------------------------------------------------------ */
/* coord.c: the coordination service (in the chief) and each task's agent of it, after TF's
 * coordination service: tasks register with an incarnation and what they bring (TaskInfo),
 * heartbeat, wait for each other, report errors that the service fans out to every task,
 * meet at barriers, and share a key-value store. Every request is checked against the
 * connection's proven identity: a task may speak only for itself, and only tasks of the
 * spec are served. Bounds (each refused with an error naming it): */

#define FLOE__COORD_MAX_KEY 256             /* bytes of a key-value key */
#define FLOE__COORD_MAX_VALUE (64u << 10)   /* bytes of a value (address blobs are < 1 KiB) */
#define FLOE__COORD_MAX_KEYS 4096           /* keys in the store */
#define FLOE__COORD_MAX_KV_BYTES (16u << 20) /* keys and values together */
#define FLOE__COORD_MAX_BARRIER_ID 256      /* bytes of a barrier's id */
#define FLOE__COORD_MAX_BARRIERS 1024       /* barriers kept (pending and finished): a new one
                                             * evicts the oldest finished, else is refused */
#define FLOE__COORD_MAX_MESSAGE 4096        /* bytes of a reported error's message */

typedef struct FloeCoordOptions {
  int heartbeat_interval_ms;   /* <= 0: 1000 */
  int heartbeat_timeout_ms;    /* <= 0: 10000 (TF's); a task silent this long is UNAVAILABLE */
} FloeCoordOptions;

/* Told of each error of the cluster once (a task missing heartbeats: UNAVAILABLE naming it
 * and how long it was silent; a task restarted with a new incarnation: ABORTED naming both
 * incarnations; an error a task reported); code and msg borrowed for the call. May run on
 * any thread (a handler's, the watchdog's, the heartbeat's), with no lock of the service or
 * agent held; it may call them, but must not free the service or agent that calls it. */
typedef void (*FloeCoordErrorFn)(void *arg, floe_code code, const char *msg);

/* Every task's TaskInfo, in spec order (jobs in the spec's order, tasks by index). */
typedef struct FloeCoordInfos {
  int n;
  struct Floe__Dist__TaskInfo **infos; /* n of them; the array and each message owned
                                        * (floe__coord_infos_clear) */
} FloeCoordInfos;
void floe__coord_infos_clear(FloeCoordInfos *infos); /* frees and zeroes; NULL is fine */

typedef struct FloeCoordService FloeCoordService;
/* The service for spec's tasks (borrowed, outlives it); spec->self is the chief's task.
 * self_info is the chief's own TaskInfo (copied; its task field must be set: its incarnation
 * is the leader's), registered at once. Adds its handlers (REGISTER_TASK, HEARTBEAT,
 * WAIT_FOR_ALL_TASKS, REPORT_ERROR, BARRIER, KV_INSERT, KV_GET) to server (borrowed) and
 * starts its watchdog thread. Caller owns *out (floe__coord_service_free, before the server
 * is freed). */
floe_code floe__coord_service_start(const FloeClusterSpec *spec, const FloeCoordOptions *o,
                                    const struct Floe__Dist__TaskInfo *self_info,
                                    FloeRpcServer *server, FloeCoordErrorFn on_error,
                                    void *err_arg, FloeCoordService **out, FloeStatus *st);
/* In-process calls of the chief (no connection). wait_all: waits until every task of the
 * spec has registered (timeout_ms < 0: until then, the service's free or a cluster error),
 * then fills *out (the caller's: floe__coord_infos_clear). A cluster error ends the wait
 * with that error; a timeout names the tasks that did not register. */
floe_code floe__coord_service_wait_all(FloeCoordService *c, int64_t timeout_ms,
                                       FloeCoordInfos *out, FloeStatus *st);
/* The chief at a barrier (as floe__coord_agent_barrier) and its key-value store (as the
 * agent's calls). */
floe_code floe__coord_service_barrier(FloeCoordService *c, const char *id, int64_t timeout_ms,
                                      const FloeTaskIdentity *tasks, int n_tasks,
                                      FloeStatus *st);
floe_code floe__coord_service_kv_insert(FloeCoordService *c, const char *key, const void *value,
                                        size_t len, bool allow_overwrite, FloeStatus *st);
floe_code floe__coord_service_kv_get(FloeCoordService *c, const char *key, int64_t timeout_ms,
                                     void **value, size_t *len, FloeStatus *st);
floe_code floe__coord_service_kv_erase(FloeCoordService *c, const char *key, FloeStatus *st);
/* The cluster's first error, if any: FLOE_OK when none, else its code with st set. */
floe_code floe__coord_service_error(FloeCoordService *c, FloeStatus *st);
/* Records an error as a task's report would (fanned out; on_error told). */
void floe__coord_service_report(FloeCoordService *c, floe_code code, const char *msg);
/* Removes the handlers (waiting out calls in progress: blocked waits end with UNAVAILABLE),
 * stops the watchdog and frees. NULL is fine. */
void floe__coord_service_free(FloeCoordService *c);

typedef struct FloeCoordAgent FloeCoordAgent;
/* A task's agent: connects to the chief's service at chief_address with conn (copied;
 * conn->secret borrowed and outliving the agent; conn->self is this task), retrying with
 * backoff (50 ms doubling to 1 s) while the chief is not up (UNAVAILABLE, DEADLINE_EXCEEDED)
 * until register_timeout_ms passes (<= 0: 60000); registers info (a TaskInfo, copied; its
 * task field, when set, must be conn->self, and is set to it when not); then heartbeats
 * every interval on its own thread. A refusal (another secret, a task not in the spec) ends
 * the start at once. A heartbeat that fails past the heartbeat timeout (the chief is gone),
 * that the chief refuses, or whose response carries a cluster error calls on_error, once
 * for the agent's life. Caller owns *out (floe__coord_agent_free). */
floe_code floe__coord_agent_start(const char *chief_address, const FloeConnOptions *conn,
                                  const FloeCoordOptions *o, int register_timeout_ms,
                                  const struct Floe__Dist__TaskInfo *info,
                                  FloeCoordErrorFn on_error, void *err_arg,
                                  FloeCoordAgent **out, FloeStatus *st);
/* As the service's wait_all, through the chief. */
floe_code floe__coord_agent_wait_all(FloeCoordAgent *a, int64_t timeout_ms, FloeCoordInfos *out,
                                     FloeStatus *st);
/* Reports an error (code not OK; msg at most FLOE__COORD_MAX_MESSAGE bytes) to the chief,
 * which fans it out to every task. */
floe_code floe__coord_agent_report(FloeCoordAgent *a, floe_code code, const char *msg,
                                   FloeStatus *st);
/* Every task named (tasks[0..n_tasks), their incarnations ignored; NULL/0: all tasks of the
 * spec) must arrive at barrier id within timeout_ms (< 0: no limit); a task that times out,
 * or a cluster error, fails it for all, naming who did not come. Every caller of one id
 * must name the same tasks, and be among them. */
floe_code floe__coord_agent_barrier(FloeCoordAgent *a, const char *id, int64_t timeout_ms,
                                    const FloeTaskIdentity *tasks, int n_tasks, FloeStatus *st);
/* Stores value[0..len) under key; an existing key is ALREADY_EXISTS unless
 * allow_overwrite. Bounds: FLOE__COORD_MAX_KEY, _VALUE, _KEYS, _KV_BYTES. */
floe_code floe__coord_agent_kv_insert(FloeCoordAgent *a, const char *key, const void *value,
                                      size_t len, bool allow_overwrite, FloeStatus *st);
/* Waits up to timeout_ms (0: looks once; < 0: no limit) for key; *value floe__malloc'd
 * (caller frees; a byte past the end is 0), *len its bytes. */
floe_code floe__coord_agent_kv_get(FloeCoordAgent *a, const char *key, int64_t timeout_ms,
                                   void **value, size_t *len, FloeStatus *st);
/* Removes key from the store (a key that is not there is no error): a short-lived key's
 * writer frees its room once every reader has read it. */
floe_code floe__coord_agent_kv_erase(FloeCoordAgent *a, const char *key, FloeStatus *st);
/* This task's identity, and the chief's incarnation as its registration answered. */
const FloeTaskIdentity *floe__coord_agent_self(const FloeCoordAgent *a);
uint64_t floe__coord_agent_leader_incarnation(const FloeCoordAgent *a);
/* Stops heartbeating and closes the connections (the service then sees the task silent).
 * No other call on a may be in progress. NULL is fine. */
void floe__coord_agent_free(FloeCoordAgent *a);
/* Whether the agent told on_error that the chief is lost (its heartbeats failed or were
 * refused), as opposed to a cluster error the chief reported (told once per error). */
bool floe__coord_agent_chief_lost(FloeCoordAgent *a);

/* ------------------------------------------------------------------------------------ */
/* dataplane.c: a task's transport connections to its peers, authenticated, and the route the
 * rendezvous follows to them. Each task sends through one send channel per peer (it
 * connects to the peer's transport address) and receives through one receive channel per
 * peer (it accepts the peer's connection). A new receive channel is nobody's until its first
 * message, a hello on the reserved tag FLOE__DATA_HELLO_TAG: the sender's TaskId and its
 * proof HMAC(secret, "floe-data-v1" || receiver's data nonce || receiver's incarnation ||
 * sender's identity) (floe__auth_data_proof), so a hello made for one incarnation of a task
 * is refused by the next; a second channel claiming a peer identity already connected is
 * refused. A proven hello from an identity the data plane does not know yet (before its
 * first floe__dataplane_connect, or a peer's new incarnation) is held until a connect names
 * it or not (then it is refused); one from a task outside the peers after a connect is
 * refused at once. A refused channel is closed and the reason recorded
 * (floe__dataplane_refusals; a connect that times out names them). */

#define FLOE__DATA_HELLO_TAG (FLOE_TRANSPORT_TAG_RESERVED - 2)  /* below the manager's bit */
/* The hello, fixed layout: magic "FLDH" | version u8 (1) | job length u8 (1..63) | 0 u16 |
 * task u32 | incarnation u64 | proof [32] | job bytes; integers big-endian. */
#define FLOE__DATA_HELLO_FIXED 52
#define FLOE__DATA_HELLO_MAX 128   /* the receive buffer: a longer hello is refused */
/* Identities held before a connect names them; past this a proven stranger is refused. */
#define FLOE__DATA_MAX_HELD 64

/* The hello of sender with proof into out; its length. */
size_t floe__data_hello_encode(const FloeTaskIdentity *sender, const uint8_t proof[32],
                               uint8_t out[FLOE__DATA_HELLO_MAX]);
/* Checks and decodes a received hello of len bytes (layout, lengths, the job name's
 * characters); INVALID_ARGUMENT saying what is wrong. */
floe_code floe__data_hello_decode(const uint8_t *buf, size_t len, FloeTaskIdentity *sender,
                                  uint8_t proof[32], FloeStatus *st);

typedef struct FloeDataPlane FloeDataPlane;
/* Opens rt's transport manager (floe__transport_mgr), draws the data nonce and starts the
 * accept thread. rt, secret and self are borrowed (self copied); rt must outlive the data
 * plane (free it before floe_runtime_free). Caller owns *out (floe__dataplane_free). */
floe_code floe__dataplane_new(struct FloeRuntime *rt, const FloeJobSecret *secret,
                              const FloeTaskIdentity *self, FloeDataPlane **out, FloeStatus *st);
/* Fills the transport fields of info (a FloeDist__TaskInfo whose transport fields are still
 * the defaults: transport, transport_address, data_nonce), allocated with floe__wire_alloc:
 * freed by floe__wire_free of the message, or by floe__dataplane_info_clear. Fills nothing
 * else (task, address, devices are the caller's). INVALID_ARGUMENT for another message. */
floe_code floe__dataplane_fill_info(FloeDataPlane *dp, struct ProtobufCMessage *info,
                                    FloeStatus *st);
/* Frees the fields fill_info set and puts their defaults back. */
void floe__dataplane_info_clear(struct ProtobufCMessage *info);
/* Makes sure there is a send and a receive channel with every peer in infos (n
 * FloeDist__TaskInfo, borrowed; this task's own among them is skipped): connects and sends
 * hellos to the peers it has no send channel to (or whose incarnation changed: the old
 * channels are closed), then waits up to timeout_ms for the receive channels from them. A
 * peer whose transport differs from this one's, whose nonce or address is malformed, or
 * that was dropped at this incarnation fails it at once; a timeout is DEADLINE_EXCEEDED
 * naming each peer that did not connect (and the latest refusals). Thread-safe. */
floe_code floe__dataplane_connect(FloeDataPlane *dp, struct ProtobufCMessage *const *infos, int n,
                                  int64_t timeout_ms, FloeStatus *st);
/* Closes the channels to the task job/task (its death): receives pending on them end with
 * UNAVAILABLE naming the source device; the route answers UNAVAILABLE for it from then on
 * (a new incarnation of it, given to connect, gets new channels). */
void floe__dataplane_drop_peer(FloeDataPlane *dp, const char *job, int task);
/* The route the rendezvous follows (FloeRendezvousOptions.route), valid while dp lives.
 * channel(device): 0 for this task's devices (its own job and task, no job, or job
 * "localhost"); a peer's channel once both directions are in (its hello proved it holds the
 * secret); -1 with UNAVAILABLE for a peer not connected or dropped, NOT_FOUND for a task that
 * is no peer, INVALID_ARGUMENT for a name that does not parse. */
const FloeRendezvousRoute *floe__dataplane_route(FloeDataPlane *dp);
/* What crossed to and from each peer task since the data plane started (floe_server_traffic
 * of floe_dist.h): writes min(cap, peers) rows, returns the number of peers. */
int floe__dataplane_traffic(FloeDataPlane *dp, FloeTaskTraffic *out, int cap);
/* Channels refused so far; the latest reason is copied into why (cap bytes; "" when none;
 * why may be NULL). For logs and tests. */
int floe__dataplane_refusals(FloeDataPlane *dp, char *why, size_t cap);
/* Stops the accept thread, closes every channel (waiting for their hello transfers to end),
 * frees. NULL is fine. */
void floe__dataplane_free(FloeDataPlane *dp);

/* ------------------------------------------------------------------------------------ */
/* worker.c: the worker service every task runs (RegisterGraph, RunGraph, CleanupGraph,
 * DeregisterGraph, worker sessions), and tensors on the wire. */
struct Floe__Dist__Tensor;
typedef struct FloeWorkerService FloeWorkerService;
/* Adds the service's handlers to server; rt, dp and server borrowed (outlive it). Caller
 * owns *out (floe__worker_service_free, after floe__rpc_server_free has joined handlers). */
floe_code floe__worker_service_start(struct FloeRuntime *rt, FloeDataPlane *dp,
                                     FloeRpcServer *server, FloeWorkerService **out,
                                     FloeStatus *st);
/* Fails every running step with code and why, and drops every worker session (their
 * master is gone). */
void floe__worker_service_reset(FloeWorkerService *w, floe_code code, const char *why);
/* Fails every running step with code and why; the worker sessions stay (another task of the
 * cluster was lost: its master ends the sessions). */
void floe__worker_service_abort_running(FloeWorkerService *w, floe_code code, const char *why);
/* After floe__rpc_server_free (which joins the handlers). NULL is fine. */
void floe__worker_service_free(FloeWorkerService *w);
/* t into *out: dtype, shape and a floe__malloc'd copy of its bytes (device tensors are
 * copied to the host first); floe__tensor_proto_clear frees them. */
floe_code floe__tensor_to_proto(const FloeTensor *t, struct Floe__Dist__Tensor *out,
                                FloeStatus *st);
void floe__tensor_proto_clear(struct Floe__Dist__Tensor *p);
/* A new host tensor from p, checked (a known dtype, rank <= FLOE_MAX_DIMS, the data's
 * length the shape's bytes); what names it in errors. Caller owns it. */
FloeTensor *floe__tensor_from_proto(const struct Floe__Dist__Tensor *p, const char *what,
                                    FloeStatus *st);

/* ------------------------------------------------------------------------------------ */
/* server.c: a task of a cluster in this process (the public FloeServer: floe_dist.h). One
 * per runtime; it holds the control server on the task's address, the data plane, the
 * worker service, and the coordination service (the chief) or its agent (other tasks). */
typedef void (*FloeServerErrorFn)(void *arg, floe_code code, const char *msg);
/* The runtime's server, started for the cluster named by `cluster` (FloeSessionOptions'
 * forms) as the spec's task, or the chief's task when it names none, when there is none
 * yet; the existing one when it serves the same task. Borrowed (lives with the process or
 * until floe_server_free). */
floe_code floe__server_for_session(struct FloeRuntime *rt, const char *cluster,
                                   FloeServer **out, FloeStatus *st);
const FloeClusterSpec *floe__server_spec(const FloeServer *s);
const FloeTaskIdentity *floe__server_identity(const FloeServer *s);
/* Options for connections to another task's server (expect_job/expect_task left to set). */
FloeConnOptions floe__server_conn_options(const FloeServer *s);
FloeDataPlane *floe__server_dataplane(FloeServer *s);
/* The chief's coordination service (NULL in other tasks). */
FloeCoordService *floe__server_coord(FloeServer *s);
/* Every task's registration, as floe__coord_service_wait_all: in the chief from its
 * service, elsewhere through the agent (waiting, within timeout_ms, for it to register
 * first). *out is the caller's (floe__coord_infos_clear). */
floe_code floe__server_wait_all(FloeServer *s, int64_t timeout_ms, FloeCoordInfos *out,
                                FloeStatus *st);
/* Watchers of the cluster's errors (a master session aborts its steps). id for removal. */
int floe__server_watch(FloeServer *s, FloeServerErrorFn fn, void *arg);
void floe__server_unwatch(FloeServer *s, int id);

#endif /* FLOE__LAYER_DIST_H */
