/* SPDX-License-Identifier: Apache-2.0 */
/* test_transport.c - the transport conformance suite: every case against every transport
 * plugin built, through its FloeTransportFns alone (dlopen, a fake host, as the core loads it).
 *
 * Configurations: `local` (both ends in one process, two threads), `fabric` over tcp;ofi_rxm
 * and over shm (two processes), and `fabric` over verbs;ofi_rxm / efa when libfabric offers
 * them. A configuration whose plugin was not built or whose provider is missing here is
 * skipped with the reason. Processes are forked before any transport is initialised (the
 * parent never loads a transport); address blobs go over pipes.
 *
 * Each case runs in fresh processes: end A listens and receives, end B connects and sends
 * (in peer-death and peer-kill B is killed with SIGKILL mid-stream; two-process configurations
 * only).
 * Usage: test_transport [--verbose] [CONFIG[/CASE]]...  (no argument: everything). Exit 0 when
 * every case that ran passed, 77 when nothing could run, 1 otherwise. Each case is given 60 s
 * of wall time (the cases take well under 10 s of CPU; the CPU time of each is printed).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <floe/floe_plugin.h>

/* ---- configurations ------------------------------------------------------------------- */

typedef struct Config {
  const char *label;    /* printed and matched against argv */
  const char *file;     /* the plugin file */
  const char *dir_env;  /* where it is: an environment variable naming the folder */
  const char *provider; /* the value of provider_env (a libfabric provider, UCX transports) */
  const char *provider_env; /* FLOE_FABRIC_PROVIDER, FLOE_UCX_TLS, or NULL */
  bool two_processes;
  bool optional;        /* skipped silently when the provider is missing (hardware) */
  const char *skip;     /* skipped with this reason printed (a known limitation) */
} Config;

static const Config configs[] = {
    {"local", "floe-transport-local.so", "FLOE_TRANSPORT_DIR", NULL, NULL, false, false, NULL},
    {"fabric-tcp", "floe-transport-fabric.so", "FLOE_FABRIC_DIR", "tcp;ofi_rxm",
     "FLOE_FABRIC_PROVIDER", true, false, NULL},
    {"fabric-net", "floe-transport-fabric.so", "FLOE_FABRIC_DIR", "net", "FLOE_FABRIC_PROVIDER",
     true, true,
     "libfabric 1.17's net provider (tcp's native RDM, rxm-less) holds a connection's later "
     "messages behind an unexpected one of 1 MiB until it is received (later-passes, "
     "close-pending), and a truncated 1 MiB receive never completes (too-small): "
     "plugins/transport/README.md"},
    {"fabric-shm", "floe-transport-fabric.so", "FLOE_FABRIC_DIR", "shm", "FLOE_FABRIC_PROVIDER",
     true, false, NULL},
    {"fabric-verbs", "floe-transport-fabric.so", "FLOE_FABRIC_DIR", "verbs;ofi_rxm",
     "FLOE_FABRIC_PROVIDER", true, true, NULL},
    {"fabric-efa", "floe-transport-fabric.so", "FLOE_FABRIC_DIR", "efa", "FLOE_FABRIC_PROVIDER",
     true, true, NULL},
    {"ucx-tcp", "floe-transport-ucx.so", "FLOE_UCX_DIR", "tcp", "FLOE_UCX_TLS", true, false, NULL},
    {"ucx-shm", "floe-transport-ucx.so", "FLOE_UCX_DIR", "sm,tcp", "FLOE_UCX_TLS", true, false,
     "UCX 1.13 gives shared memory to no connection that survives a peer's death: its "
     "client-server endpoints carry tcp only, an endpoint made from a worker address with "
     "peer error handling gets tcp lanes only, and without it a killed peer aborts the "
     "survivor (an assertion in ucp_rndv_receive) or hangs its receives "
     "(plugins/transport/README.md)"},
};

static bool verbose;

/* ---- the fake host: log lines kept for the checks ------------------------------------- */

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_text[16384];
static size_t log_used;

static void host_log(FloeLogLevel level, const char *fmt, ...) {
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (verbose) fprintf(stderr, "    [log %d] %s\n", (int)level, line);
  pthread_mutex_lock(&log_mu);
  size_t n = strlen(line);
  if (log_used + n + 2 > sizeof log_text) log_used = 0; /* keep the newest */
  memcpy(log_text + log_used, line, n);
  log_used += n;
  log_text[log_used++] = '\n';
  log_text[log_used] = 0;
  pthread_mutex_unlock(&log_mu);
}

static bool log_has(const char *s) {
  pthread_mutex_lock(&log_mu);
  bool has = strstr(log_text, s) != NULL;
  pthread_mutex_unlock(&log_mu);
  return has;
}

static void log_clear(void) {
  pthread_mutex_lock(&log_mu);
  log_used = 0;
  log_text[0] = 0;
  pthread_mutex_unlock(&log_mu);
}

static FloeHostApi host;
static FloeTransportFns fns;
static int registered;

static floe_code fake_declare(FloePluginRegistrar *reg, const FloePluginInfo *info) {
  (void)reg;
  return info->abi_major == FLOE_ABI_MAJOR ? FLOE_OK : FLOE_ABI_MISMATCH;
}
static floe_code fake_register_transport(FloePluginRegistrar *reg, const FloeTransportFns *t) {
  (void)reg;
  memset(&fns, 0, sizeof fns);
  memcpy(&fns, t, t->struct_size < sizeof fns ? t->struct_size : sizeof fns);
  registered++;
  return FLOE_OK;
}

/* ---- failing ---------------------------------------------------------------------------- */

static __thread const char *role_name = "?"; /* per thread: local runs both ends in one process */

#define CHECK(cond, ...)                                                                  \
  do {                                                                                    \
    if (!(cond)) fail_at(__FILE__, __LINE__, #cond, __VA_ARGS__);                         \
  } while (0)
#define CHECK_RC(call, want)                                                              \
  do {                                                                                    \
    floe_code rc_ = (call);                                                               \
    CHECK(rc_ == (want), "%s gave %s, expected %s", #call, code_name(rc_), code_name(want)); \
  } while (0)

static const char *code_name(floe_code c) {
  switch (c) {
#define X(name, value, msg) \
  case FLOE_##name:         \
    return #name;
    FLOE_CODE_MAP(X)
#undef X
  default:
    break;
  }
  return "?";
}

__attribute__((noreturn, format(printf, 4, 5))) static void fail_at(const char *file, int line,
                                                                     const char *cond,
                                                                     const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "    FAIL (end %s) %s:%d: %s: %s\n", role_name, file, line, cond, msg);
  if (!verbose && log_used) fprintf(stderr, "    transport log:\n%s", log_text);
  fflush(stderr);
  _exit(1);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- one end of a connection ------------------------------------------------------------ */

typedef struct End {
  const char *name;   /* "A" or "B" */
  int in, out;        /* pipes from and to the other end */
  void *ctx, *listen, *send, *recv;
  int fd;             /* get_fd's, or -1 */
  unsigned char addr[FLOE_TRANSPORT_ADDR_MAX]; /* B: A's address */
  uint32_t addr_len;
} End;

static void pipe_write(End *e, const void *buf, size_t len) {
  const char *p = buf;
  while (len) {
    ssize_t w = write(e->out, p, len);
    if (w < 0 && errno == EINTR) continue;
    CHECK(w > 0, "writing to the other end: %s", strerror(errno));
    p += w;
    len -= (size_t)w;
  }
}

static void pipe_read(End *e, void *buf, size_t len) {
  char *p = buf;
  while (len) {
    ssize_t r = read(e->in, p, len);
    if (r < 0 && errno == EINTR) continue;
    CHECK(r > 0, "the other end went away (%s)", r < 0 ? strerror(errno) : "end of file");
    p += r;
    len -= (size_t)r;
  }
}

static void signal_peer(End *e, char what) { pipe_write(e, &what, 1); }
static void await_peer(End *e, char what) {
  char got = 0;
  pipe_read(e, &got, 1);
  CHECK(got == what, "the other end said '%c', expected '%c'", got, what);
}

/* Sleeps until the transport may progress, at most ms, the way the ABI says (no spinning).
 * True when it slept the whole ms: a completion found right after that was never announced
 * (a missed wake-up, which a waiter without a timeout would sleep through for ever). */
static bool block(End *e, int ms) {
  double t0 = now_s();
  bool full = false;
  if (e->fd >= 0 && fns.trywait) {
    floe_code rc = fns.trywait(e->ctx);
    if (rc == FLOE_UNAVAILABLE) return false;
    CHECK(rc == FLOE_OK, "trywait gave %s", code_name(rc));
    struct pollfd p = {.fd = e->fd, .events = POLLIN};
    full = poll(&p, 1, ms) == 0;
  } else if (fns.wait) {
    floe_code rc = fns.wait(e->ctx, ms);
    CHECK(rc == FLOE_OK || rc == FLOE_DEADLINE_EXCEEDED, "wait gave %s", code_name(rc));
    full = rc == FLOE_DEADLINE_EXCEEDED;
  } else if (e->fd >= 0) {
    struct pollfd p = {.fd = e->fd, .events = POLLIN};
    full = poll(&p, 1, ms) == 0;
  } else {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  return full && now_s() - t0 >= ms * 0.9e-3;
}

/* How long a waiter sleeps before checking that it was not forgotten. */
#define SLEEP_MS 2000

static void progress(End *e) {
  if (fns.progress) CHECK_RC(fns.progress(e->ctx), FLOE_OK);
}

/* Waits for n requests (NULL entries are skipped and set to NULL when done); codes[i] and
 * sizes[i] receive each one's result. */
static void wait_all(End *e, void **reqs, size_t n, floe_code *codes, size_t *sizes) {
  double deadline = now_s() + 30;
  size_t left = 0;
  bool slept = false;
  for (size_t i = 0; i < n; i++) left += reqs[i] != NULL;
  while (left) {
    progress(e);
    size_t before = left;
    for (size_t i = 0; i < n; i++) {
      if (!reqs[i]) continue;
      int done = 0;
      size_t size = 0;
      floe_code rc = fns.test(reqs[i], &done, &size);
      if (!done) {
        CHECK(rc == FLOE_OK, "test of request %zu gave %s without done", i, code_name(rc));
        continue;
      }
      reqs[i] = NULL;
      left--;
      if (codes) codes[i] = rc;
      if (sizes) sizes[i] = size;
    }
    CHECK(!slept || left == before,
          "a request completed after the waiter slept %d ms unwoken (a missed wake-up)", SLEEP_MS);
    if (!left) break;
    CHECK(now_s() < deadline, "%zu of %zu requests never completed", left, n);
    slept = block(e, SLEEP_MS);
  }
}

static floe_code wait_one(End *e, void *req, size_t *size) {
  floe_code rc = FLOE_INTERNAL;
  size_t s = 0;
  wait_all(e, &req, 1, &rc, &s);
  if (size) *size = s;
  return rc;
}

static void end_init(End *e) {
  CHECK_RC(fns.init(&host, &e->ctx), FLOE_OK);
  e->fd = -1;
  if (fns.get_fd && fns.get_fd(e->ctx, &e->fd) != FLOE_OK) e->fd = -1;
}

#define PROBE_TAG ((uint64_t)1 << 40)

/* A listens, B connects; a first message proves the pair works both ways of the handshake. */
static void connect_ends(End *e) {
  if (e->name[0] == 'A') {
    unsigned char addr[FLOE_TRANSPORT_ADDR_MAX];
    size_t len = 0;
    CHECK_RC(fns.listen(e->ctx, addr, &len, &e->listen), FLOE_OK);
    CHECK(len > 0 && len <= FLOE_TRANSPORT_ADDR_MAX, "an address of %zu bytes", len);
    uint32_t n = (uint32_t)len;
    pipe_write(e, &n, sizeof n);
    pipe_write(e, addr, len);
    double deadline = now_s() + 20;
    floe_code rc;
    bool slept = false;
    while ((rc = fns.accept(e->listen, &e->recv)) == FLOE_UNAVAILABLE) {
      CHECK(now_s() < deadline, "no connection arrived");
      slept = block(e, SLEEP_MS);
    }
    CHECK(!slept, "a connection arrived after accept's waiter slept %d ms unwoken", SLEEP_MS);
    CHECK_RC(rc, FLOE_OK);
    char probe[4] = {0};
    void *r = NULL;
    CHECK_RC(fns.irecv(e->recv, probe, sizeof probe, PROBE_TAG, NULL, &r), FLOE_OK);
    CHECK_RC(wait_one(e, r, NULL), FLOE_OK);
    CHECK(memcmp(probe, "prb", 4) == 0, "the first message was not \"prb\"");
  } else {
    uint32_t n = 0;
    pipe_read(e, &n, sizeof n);
    CHECK(n <= sizeof e->addr, "an address of %u bytes", n);
    pipe_read(e, e->addr, n);
    e->addr_len = n;
    CHECK_RC(fns.connect(e->ctx, e->addr, n, &e->send), FLOE_OK);
    void *s = NULL;
    CHECK_RC(fns.isend(e->send, "prb", 4, PROBE_TAG, NULL, &s), FLOE_OK);
    CHECK_RC(wait_one(e, s, NULL), FLOE_OK);
  }
}

/* Both ends finished their requests: meet, then close everything. */
static void close_ends(End *e) {
  signal_peer(e, 'z');
  await_peer(e, 'z');
  if (e->send) fns.close_send(e->send);
  if (e->recv) fns.close_recv(e->recv);
  if (e->listen) fns.close_listen(e->listen);
  fns.finalize(e->ctx);
}

/* Bytes of message `seed`, so that a receiver can check every byte. */
static void fill(unsigned char *p, size_t n, uint64_t seed) {
  uint64_t x = seed * 0x9e3779b97f4a7c15u + 1;
  for (size_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p[i] = (unsigned char)x;
  }
}

static void check_fill(const unsigned char *p, size_t n, uint64_t seed, const char *what) {
  unsigned char *want = malloc(n ? n : 1);
  CHECK(want != NULL, "out of memory");
  fill(want, n, seed);
  for (size_t i = 0; i < n; i++)
    CHECK(p[i] == want[i], "%s: byte %zu of %zu is 0x%02x, expected 0x%02x", what, i, n, p[i],
          want[i]);
  free(want);
}

/* ---- cases ------------------------------------------------------------------------------ */

/* Receives posted in reverse order of the sends match by tag; two messages of one tag keep
 * their order. */
static void tags_out_of_order(End *e) {
  enum { N = 16 };
  if (e->name[0] == 'A') {
    unsigned char bufs[N][128], same[2][16];
    void *reqs[N + 2];
    size_t sizes[N + 2];
    floe_code codes[N + 2];
    for (int i = N - 1; i >= 0; i--)
      CHECK_RC(fns.irecv(e->recv, bufs[i], sizeof bufs[i], 100 + (uint64_t)i, NULL, &reqs[i]),
               FLOE_OK);
    for (int i = 0; i < 2; i++)
      CHECK_RC(fns.irecv(e->recv, same[i], sizeof same[i], 200, NULL, &reqs[N + i]), FLOE_OK);
    signal_peer(e, 'r');
    wait_all(e, reqs, N + 2, codes, sizes);
    for (int i = 0; i < N; i++) {
      CHECK(codes[i] == FLOE_OK, "tag %d: %s", 100 + i, code_name(codes[i]));
      CHECK(sizes[i] == (size_t)(8 * i + 1), "tag %d: %zu bytes", 100 + i, sizes[i]);
      check_fill(bufs[i], sizes[i], 100 + (uint64_t)i, "out-of-order tag");
    }
    CHECK(codes[N] == FLOE_OK && strcmp((char *)same[0], "first") == 0,
          "the first receive of tag 200 got \"%s\"", (char *)same[0]);
    CHECK(codes[N + 1] == FLOE_OK && strcmp((char *)same[1], "second") == 0,
          "the second receive of tag 200 got \"%s\"", (char *)same[1]);
  } else {
    unsigned char bufs[N][128];
    void *reqs[N + 2];
    floe_code codes[N + 2];
    await_peer(e, 'r');
    for (int i = 0; i < N; i++) {
      fill(bufs[i], (size_t)(8 * i + 1), 100 + (uint64_t)i);
      CHECK_RC(fns.isend(e->send, bufs[i], (size_t)(8 * i + 1), 100 + (uint64_t)i, NULL, &reqs[i]),
               FLOE_OK);
    }
    CHECK_RC(fns.isend(e->send, "first", 6, 200, NULL, &reqs[N]), FLOE_OK);
    CHECK_RC(fns.isend(e->send, "second", 7, 200, NULL, &reqs[N + 1]), FLOE_OK);
    wait_all(e, reqs, N + 2, codes, NULL);
    for (int i = 0; i < N + 2; i++) CHECK(codes[i] == FLOE_OK, "send %d: %s", i, code_name(codes[i]));
  }
}

/* Sent before any receive is posted (the messages wait at the receiver or, large, at the
 * sender); then received in another order. */
static void unexpected_messages(End *e) {
  static const size_t sizes[] = {64, 4096, 65536, 1 << 20};
  enum { N = 4 };
  unsigned char *bufs[N];
  for (int i = 0; i < N; i++) CHECK((bufs[i] = malloc(sizes[i])) != NULL, "out of memory");
  void *reqs[N];
  floe_code codes[N];
  size_t got[N];
  if (e->name[0] == 'B') {
    for (int i = 0; i < N; i++) {
      fill(bufs[i], sizes[i], 300 + (uint64_t)i);
      CHECK_RC(fns.isend(e->send, bufs[i], sizes[i], 300 + (uint64_t)i, NULL, &reqs[i]), FLOE_OK);
    }
    progress(e);
    signal_peer(e, 's');
    wait_all(e, reqs, N, codes, NULL);
    for (int i = 0; i < N; i++) CHECK(codes[i] == FLOE_OK, "send %d: %s", i, code_name(codes[i]));
  } else {
    await_peer(e, 's');
    for (int i = 0; i < 5; i++) { /* let the messages arrive with no receive posted */
      progress(e);
      block(e, 5);
    }
    static const int order[N] = {2, 0, 3, 1};
    for (int k = 0; k < N; k++) {
      int i = order[k];
      CHECK_RC(fns.irecv(e->recv, bufs[i], sizes[i], 300 + (uint64_t)i, NULL, &reqs[i]), FLOE_OK);
    }
    wait_all(e, reqs, N, codes, got);
    for (int i = 0; i < N; i++) {
      CHECK(codes[i] == FLOE_OK, "receive %d: %s", i, code_name(codes[i]));
      CHECK(got[i] == sizes[i], "receive %d: %zu bytes, expected %zu", i, got[i], sizes[i]);
      check_fill(bufs[i], sizes[i], 300 + (uint64_t)i, "unexpected message");
    }
  }
  for (int i = 0; i < N; i++) free(bufs[i]);
}

/* Every size class of the transports (eager, rendezvous, large), content checked; the
 * receive buffer is one byte larger than the message, so the size reported must be the
 * message's. */
static void message_sizes(End *e) {
  static const size_t sizes[] = {0, 1, 4096, 16384, 131073, 1 << 20, 64 << 20};
  enum { N = sizeof sizes / sizeof sizes[0] };
  for (int i = 0; i < N; i++) {
    size_t n = sizes[i];
    unsigned char *buf = malloc(n + 1);
    CHECK(buf != NULL, "out of memory for %zu bytes", n);
    void *req = NULL;
    size_t got = 0;
    if (e->name[0] == 'A') {
      memset(buf, 0xEE, n + 1);
      CHECK_RC(fns.irecv(e->recv, buf, n + 1, 400 + (uint64_t)i, NULL, &req), FLOE_OK);
      signal_peer(e, 'r');
      CHECK_RC(wait_one(e, req, &got), FLOE_OK);
      CHECK(got == n, "a message of %zu bytes reported %zu", n, got);
      check_fill(buf, n, 400 + (uint64_t)i, "sizes");
      CHECK(buf[n] == 0xEE, "the byte after a %zu-byte message was written", n);
    } else {
      fill(buf, n, 400 + (uint64_t)i);
      await_peer(e, 'r');
      double t0 = now_s();
      CHECK_RC(fns.isend(e->send, buf, n, 400 + (uint64_t)i, NULL, &req), FLOE_OK);
      CHECK_RC(wait_one(e, req, &got), FLOE_OK);
      if (verbose) fprintf(stderr, "    %zu bytes sent in %.3f ms\n", n, (now_s() - t0) * 1e3);
    }
    free(buf);
  }
}

/* A message longer than the posted buffer: FLOE_OUT_OF_RANGE naming the sizes, no byte
 * written past the buffer, and the connection keeps working. */
static void receive_too_small(End *e) {
  enum { SMALL = 1000, BIG = 1 << 20 };
  if (e->name[0] == 'A') {
    unsigned char small[100 + 8], big[65536 + 8], ok[64];
    memset(small, 0xAB, sizeof small);
    memset(big, 0xAB, sizeof big);
    void *r1, *r2, *r3;
    size_t s1 = 0, s2 = 0, s3 = 0;
    log_clear();
    CHECK_RC(fns.irecv(e->recv, small, 100, 7, NULL, &r1), FLOE_OK);
    CHECK_RC(fns.irecv(e->recv, big, 65536, 8, NULL, &r2), FLOE_OK);
    signal_peer(e, 'r');
    CHECK_RC(wait_one(e, r1, &s1), FLOE_OUT_OF_RANGE);
    CHECK_RC(wait_one(e, r2, &s2), FLOE_OUT_OF_RANGE);
    /* The message's size when the transport knows it (0: unknown). */
    CHECK(s1 == SMALL || s1 == 0, "a %d-byte message into 100 bytes reported %zu", SMALL, s1);
    CHECK(s2 == BIG || s2 == 0, "a %d-byte message into 65536 bytes reported %zu", BIG, s2);
    for (size_t i = 100; i < sizeof small; i++) CHECK(small[i] == 0xAB, "byte %zu written", i);
    for (size_t i = 65536; i < sizeof big; i++) CHECK(big[i] == 0xAB, "byte %zu written", i);
    if (fns.cancel && strcmp(fns.name, "local") != 0) /* the error is logged with the sizes */
      CHECK(log_has("larger than") && log_has("100 bytes"), "no clear error was logged");
    if (verbose) fprintf(stderr, "    reported sizes %zu and %zu\n", s1, s2);
    CHECK_RC(fns.irecv(e->recv, ok, sizeof ok, 9, NULL, &r3), FLOE_OK);
    signal_peer(e, 'n');
    CHECK_RC(wait_one(e, r3, &s3), FLOE_OK);
    CHECK(s3 == 32, "the next message: %zu bytes", s3);
    check_fill(ok, 32, 9, "after a truncation");
  } else {
    unsigned char *small = malloc(SMALL), *big = malloc(BIG), ok[32];
    CHECK(small && big, "out of memory");
    fill(small, SMALL, 7);
    fill(big, BIG, 8);
    fill(ok, 32, 9);
    void *reqs[3];
    floe_code codes[3];
    await_peer(e, 'r');
    CHECK_RC(fns.isend(e->send, small, SMALL, 7, NULL, &reqs[0]), FLOE_OK);
    CHECK_RC(fns.isend(e->send, big, BIG, 8, NULL, &reqs[1]), FLOE_OK);
    /* A truncated message may fail or succeed at the sender; it must complete. */
    wait_all(e, reqs, 2, codes, NULL);
    await_peer(e, 'n');
    CHECK_RC(fns.isend(e->send, ok, 32, 9, NULL, &reqs[2]), FLOE_OK);
    CHECK_RC(wait_one(e, reqs[2], NULL), FLOE_OK);
    free(small);
    free(big);
  }
}

/* cancel withdraws a posted receive (the message sent later goes to the next receive) and
 * answers FLOE_UNAVAILABLE for one that completed. */
static void cancel_receive(End *e) {
  if (!fns.cancel) {
    if (e->name[0] == 'A') fprintf(stderr, "    (no cancel slot: nothing to check)\n");
    return;
  }
  if (e->name[0] == 'A') {
    char a[16] = {0}, b[16] = {0}, c[16] = {0}, d[16] = {0};
    void *r1, *r2, *r3, *r4;
    size_t size = 0;
    CHECK_RC(fns.irecv(e->recv, a, sizeof a, 11, NULL, &r1), FLOE_OK);
    progress(e);
    floe_code rc = fns.cancel(r1);
    if (rc == FLOE_UNAVAILABLE) /* completing: test() reports the cancellation */
      CHECK_RC(wait_one(e, r1, NULL), FLOE_CANCELLED);
    else
      CHECK_RC(rc, FLOE_OK);
    CHECK_RC(fns.irecv(e->recv, c, sizeof c, 12, NULL, &r3), FLOE_OK);
    CHECK_RC(fns.irecv(e->recv, d, sizeof d, 13, NULL, &r4), FLOE_OK);
    signal_peer(e, 'r');
    /* tag 13 was sent after tag 12: once it is here, 12 has completed too */
    CHECK_RC(wait_one(e, r4, NULL), FLOE_OK);
    for (int i = 0; i < 3; i++) progress(e);
    CHECK_RC(fns.cancel(r3), FLOE_UNAVAILABLE);
    CHECK_RC(wait_one(e, r3, &size), FLOE_OK);
    CHECK(strcmp(c, "twelve") == 0 && strcmp(d, "thirteen") == 0, "got \"%s\" and \"%s\"", c, d);
    CHECK_RC(fns.irecv(e->recv, b, sizeof b, 11, NULL, &r2), FLOE_OK);
    CHECK_RC(wait_one(e, r2, &size), FLOE_OK);
    CHECK(strcmp(b, "after") == 0 && a[0] == 0,
          "the message went to \"%s\" (the cancelled receive has \"%s\")", b, a);
  } else {
    void *reqs[3];
    floe_code codes[3];
    await_peer(e, 'r');
    CHECK_RC(fns.isend(e->send, "twelve", 7, 12, NULL, &reqs[0]), FLOE_OK);
    CHECK_RC(fns.isend(e->send, "thirteen", 9, 13, NULL, &reqs[1]), FLOE_OK);
    CHECK_RC(fns.isend(e->send, "after", 6, 11, NULL, &reqs[2]), FLOE_OK);
    wait_all(e, reqs, 3, codes, NULL);
    for (int i = 0; i < 3; i++) CHECK(codes[i] == FLOE_OK, "send %d: %s", i, code_name(codes[i]));
  }
}

/* 1,000 receives and 1,000 sends outstanding at once (queues beyond the provider's depth). */
static void thousand_outstanding(End *e) {
  enum { N = 1000, BIG = 65536, SMALL = 1024 };
  unsigned char *bufs[N];
  void **reqs = calloc(N, sizeof *reqs);
  floe_code *codes = calloc(N, sizeof *codes);
  size_t *sizes = calloc(N, sizeof *sizes);
  CHECK(reqs && codes && sizes, "out of memory");
  for (int i = 0; i < N; i++) {
    size_t n = i % 100 == 0 ? BIG : SMALL;
    CHECK((bufs[i] = malloc(n)) != NULL, "out of memory");
    if (e->name[0] == 'B') fill(bufs[i], n, 1000 + (uint64_t)i);
  }
  if (e->name[0] == 'A') {
    for (int i = 0; i < N; i++)
      CHECK_RC(fns.irecv(e->recv, bufs[i], i % 100 == 0 ? BIG : SMALL, 1000 + (uint64_t)i, NULL,
                         &reqs[i]),
               FLOE_OK);
    signal_peer(e, 'r');
    wait_all(e, reqs, N, codes, sizes);
    for (int i = 0; i < N; i++) {
      size_t n = i % 100 == 0 ? BIG : SMALL;
      CHECK(codes[i] == FLOE_OK && sizes[i] == n, "receive %d: %s, %zu bytes", i,
            code_name(codes[i]), sizes[i]);
      check_fill(bufs[i], n, 1000 + (uint64_t)i, "1000 outstanding");
    }
  } else {
    await_peer(e, 'r');
    for (int i = N - 1; i >= 0; i--) /* the last-posted receive is matched first */
      CHECK_RC(fns.isend(e->send, bufs[i], i % 100 == 0 ? BIG : SMALL, 1000 + (uint64_t)i, NULL,
                         &reqs[i]),
               FLOE_OK);
    wait_all(e, reqs, N, codes, NULL);
    for (int i = 0; i < N; i++) CHECK(codes[i] == FLOE_OK, "send %d: %s", i, code_name(codes[i]));
  }
  for (int i = 0; i < N; i++) free(bufs[i]);
  free(reqs);
  free(codes);
  free(sizes);
}

/* Comms closed with requests pending: nothing leaks or crashes (valgrind / ASan check that),
 * and a new connection to the same listener works afterwards. */
static void close_with_pending(End *e) {
  enum { BIG = 1 << 20 };
  static unsigned char big[BIG];
  if (e->name[0] == 'A') {
    char bufs[5][32];
    void *reqs[5];
    for (int i = 0; i < 5; i++)
      CHECK_RC(fns.irecv(e->recv, bufs[i], sizeof bufs[i], 500 + (uint64_t)i, NULL, &reqs[i]),
               FLOE_OK);
    signal_peer(e, 'r');
    await_peer(e, 's'); /* B's sends to unreceived tags are out */
    fns.close_recv(e->recv); /* five receives never matched */
    e->recv = NULL;
    signal_peer(e, 'c');
    double deadline = now_s() + 20;
    floe_code rc;
    bool slept = false;
    while ((rc = fns.accept(e->listen, &e->recv)) == FLOE_UNAVAILABLE) {
      CHECK(now_s() < deadline, "the second connection never arrived");
      slept = block(e, SLEEP_MS);
    }
    CHECK(!slept, "the second connection arrived after accept's waiter slept unwoken");
    CHECK_RC(rc, FLOE_OK);
    char got[16] = {0};
    void *r = NULL;
    CHECK_RC(fns.irecv(e->recv, got, sizeof got, 700, NULL, &r), FLOE_OK);
    CHECK_RC(wait_one(e, r, NULL), FLOE_OK);
    CHECK(strcmp(got, "again") == 0, "the second connection carried \"%s\"", got);
  } else {
    void *reqs[4];
    await_peer(e, 'r');
    CHECK_RC(fns.isend(e->send, "never", 6, 600, NULL, &reqs[0]), FLOE_OK);
    CHECK_RC(fns.isend(e->send, "read", 5, 601, NULL, &reqs[1]), FLOE_OK);
    CHECK_RC(fns.isend(e->send, big, BIG, 602, NULL, &reqs[2]), FLOE_OK);
    CHECK_RC(fns.isend(e->send, big, 20000, 603, NULL, &reqs[3]), FLOE_OK);
    progress(e);
    signal_peer(e, 's');
    await_peer(e, 'c');
    fns.close_send(e->send); /* the 1 MiB send is never received */
    e->send = NULL;
    CHECK_RC(fns.connect(e->ctx, e->addr, e->addr_len, &e->send), FLOE_OK);
    void *s = NULL;
    CHECK_RC(fns.isend(e->send, "again", 6, 700, NULL, &s), FLOE_OK);
    CHECK_RC(wait_one(e, s, NULL), FLOE_OK);
  }
}

/* Address blobs that are not this transport's, or of another version or provider, are
 * refused; a fabric blob of another libfabric or provider names both. */
static void bad_addresses(End *e) {
  if (e->name[0] == 'B') return; /* one end is enough */
  void *sc = NULL;
  unsigned char addr[FLOE_TRANSPORT_ADDR_MAX];
  size_t len = 0;
  void *lc = NULL;
  CHECK_RC(fns.listen(e->ctx, addr, &len, &lc), FLOE_OK);
  floe_code rc = fns.connect(e->ctx, "nonsense", 9, &sc);
  CHECK(rc != FLOE_OK, "a nonsense address was accepted");
  rc = fns.connect(e->ctx, addr, len / 2, &sc);
  CHECK(rc != FLOE_OK, "half an address was accepted");
  if (strcmp(fns.name, "fabric") == 0) {
    /* The layout of plugins/transport/README.md: version at 8, provider at 16 (length at 5). */
    unsigned char bad[FLOE_TRANSPORT_ADDR_MAX];
    memcpy(bad, addr, len);
    uint32_t ver = (uint32_t)bad[8] | (uint32_t)bad[9] << 8 | (uint32_t)bad[10] << 16 |
                   (uint32_t)bad[11] << 24;
    uint32_t other = ver + 1; /* the next minor: 1.17 -> 1.18 */
    for (int i = 0; i < 4; i++) bad[8 + i] = (unsigned char)(other >> (8 * i));
    log_clear();
    CHECK_RC(fns.connect(e->ctx, bad, len, &sc), FLOE_FAILED_PRECONDITION);
    char mine[32], theirs[32];
    snprintf(mine, sizeof mine, "libfabric %u.%u", ver >> 16, ver & 0xffff);
    snprintf(theirs, sizeof theirs, "libfabric %u.%u", other >> 16, other & 0xffff);
    CHECK(log_has(mine) && log_has(theirs), "the refusal does not name %s and %s", mine, theirs);
    /* another provider: swap in a name of the same length that is not ours */
    memcpy(bad, addr, len);
    size_t plen = addr[5];
    char prov[64];
    memcpy(prov, addr + 16, plen);
    prov[plen] = 0;
    for (size_t i = 0; i < plen; i++) bad[16 + i] = (unsigned char)(prov[i] == 'x' ? 'y' : 'x');
    log_clear();
    CHECK_RC(fns.connect(e->ctx, bad, len, &sc), FLOE_FAILED_PRECONDITION);
    char xs[64];
    memcpy(xs, bad + 16, plen);
    xs[plen] = 0;
    CHECK(log_has(prov) && log_has(xs), "the refusal does not name providers %s and %s", prov, xs);
    /* the reserved tag bit is the transport's */
    CHECK(e->send != NULL, "no connection");
    void *r = NULL;
    CHECK_RC(fns.isend(e->send, "x", 2, FLOE_TRANSPORT_TAG_RESERVED | 5, NULL, &r),
             FLOE_INVALID_ARGUMENT);
  }
  fns.close_listen(lc);
}

/* The waiting slots: an interrupt ends a wait at once, also one that came first; a wait
 * with nothing to do lasts about its timeout; trywait lets an idle context sleep. */
static void waiting(End *e) {
  if (e->name[0] == 'B') return;
  for (int i = 0; i < 3; i++) progress(e);
  if (e->fd >= 0 && fns.trywait) {
    floe_code rc = fns.trywait(e->ctx);
    if (rc == FLOE_UNAVAILABLE) {
      progress(e);
      rc = fns.trywait(e->ctx);
    }
    CHECK_RC(rc, FLOE_OK);
  }
  if (!fns.wait) return;
  CHECK(fns.interrupt != NULL, "wait without interrupt");
  double t0 = now_s();
  fns.interrupt(e->ctx); /* before anyone waits: the next wait returns at once */
  CHECK_RC(fns.wait(e->ctx, 5000), FLOE_OK);
  CHECK(now_s() - t0 < 1.0, "a wait after an interrupt took %.3f s", now_s() - t0);
  t0 = now_s();
  floe_code rc = fns.wait(e->ctx, 200);
  double took = now_s() - t0;
  /* spurious wake-ups are allowed; sleeping far past the timeout is not */
  CHECK(rc == FLOE_DEADLINE_EXCEEDED || rc == FLOE_OK, "wait gave %s", code_name(rc));
  CHECK(took < 2.0, "a 200 ms wait took %.3f s", took);
  if (verbose) fprintf(stderr, "    a 200 ms wait: %s after %.1f ms\n", code_name(rc), took * 1e3);
}

typedef struct Waiter {
  End *e;
  double took;
  floe_code rc;
} Waiter;

static void *waiter_main(void *arg) {
  Waiter *w = arg;
  double t0 = now_s();
  w->rc = fns.wait(w->e->ctx, 10000);
  w->took = now_s() - t0;
  return NULL;
}

/* interrupt from another thread ends a wait that has begun. */
static void interrupt_wakes(End *e) {
  if (e->name[0] == 'B' || !fns.wait) return;
  for (int round = 0; round < 3; round++) {
    Waiter w = {e, 0, FLOE_INTERNAL};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, waiter_main, &w) == 0, "pthread_create");
    struct timespec ts = {0, 50000000};
    nanosleep(&ts, NULL);
    fns.interrupt(e->ctx);
    pthread_join(t, NULL);
    CHECK(w.rc == FLOE_OK, "the interrupted wait gave %s", code_name(w.rc));
    CHECK(w.took < 2.0, "the interrupted wait took %.3f s", w.took);
  }
}


/* ---- a peer killed with split messages in flight ---------------------------------------- */

/* Core's rendezvous sends a split value as a small header (tag T) and a payload (T | 1) and
 * posts the payload's receive only when the header has arrived, so payloads of 64 KiB..1 MiB
 * routinely wait at the receiver as unexpected messages. These cases kill the sender (SIGKILL)
 * with such messages in flight while the receiver keeps posting for it: every call must return
 * (no crash, no hang), a receive for the dead peer ends in an error (FLOE_UNAVAILABLE or, once
 * withdrawn, FLOE_CANCELLED) or is refused at once with FLOE_UNAVAILABLE, and the context keeps
 * working with another peer afterwards. A's end is checked; B's death is the point. */

#define DEATH_HDR 32
#define DEATH_TAG(k) (((uint64_t)3 << 40) | ((uint64_t)(k) << 1))

static size_t death_payload_size(uint64_t k) { /* 64 KiB .. 1 MiB: rxm's SAR and rendezvous */
  static const size_t sizes[] = {65536, 200000, 1 << 20, 131072 + 8};
  return sizes[k % 4];
}

/* B: streams header/payload pairs, at most `window` pairs outstanding, until killed. */
static void death_stream(End *e, int window, int pairs) {
  enum { MAXW = 8 };
  static unsigned char *payload; /* one buffer of the largest size, its bytes never checked */
  static unsigned char hdr[MAXW][DEATH_HDR];
  if (!payload) CHECK((payload = calloc(1, 1 << 20)) != NULL, "out of memory");
  void *reqs[2 * MAXW] = {0};
  for (uint64_t k = 0; pairs < 0 || k < (uint64_t)pairs; k++) {
    int w = (int)(k % (uint64_t)window);
    if (reqs[2 * w] || reqs[2 * w + 1]) wait_all(e, &reqs[2 * w], 2, NULL, NULL);
    memcpy(hdr[w], &k, sizeof k);
    CHECK_RC(fns.isend(e->send, hdr[w], DEATH_HDR, DEATH_TAG(k), NULL, &reqs[2 * w]), FLOE_OK);
    CHECK_RC(fns.isend(e->send, payload, death_payload_size(k), DEATH_TAG(k) | 1, NULL,
                       &reqs[2 * w + 1]),
             FLOE_OK);
    progress(e);
  }
}

/* A's receives, rendezvous-style: a header receive per pair; the payload's once it arrived. */
typedef struct DeathRx {
  uint64_t next;                /* the next pair whose header receive is to be posted */
  void *hreq[8], *preq[8];      /* per slot: the header's and the payload's receive */
  uint64_t pair[8];
  unsigned char hdr[8][DEATH_HDR];
  unsigned char *payload[8];
  int errors, refused, ok;      /* completions with an error, posts refused, payloads received */
} DeathRx;

/* A receive was posted, or refused because the transport knows its peer is gone. */
static bool death_post(DeathRx *d, floe_code rc) {
  CHECK(rc == FLOE_OK || rc == FLOE_UNAVAILABLE, "irecv for a dying peer gave %s",
        code_name(rc));
  if (rc != FLOE_OK) d->refused++;
  return rc == FLOE_OK;
}

static void death_post_header(End *e, DeathRx *d, int s) {
  d->pair[s] = d->next++;
  void *r = NULL;
  if (death_post(d, fns.irecv(e->recv, d->hdr[s], DEATH_HDR, DEATH_TAG(d->pair[s]), NULL, &r)))
    d->hreq[s] = r;
}

/* Tests every outstanding receive once; a header that arrived gets its payload's receive. */
static void death_poll(End *e, DeathRx *d, int slots, bool repost) {
  progress(e);
  for (int s = 0; s < slots; s++) {
    int done = 0;
    size_t size = 0;
    if (d->hreq[s]) {
      floe_code rc = fns.test(d->hreq[s], &done, &size);
      if (done) {
        d->hreq[s] = NULL;
        if (rc != FLOE_OK) {
          CHECK(rc == FLOE_UNAVAILABLE || rc == FLOE_CANCELLED, "a header receive gave %s",
                code_name(rc));
          d->errors++;
        } else {
          void *r = NULL;
          if (death_post(d, fns.irecv(e->recv, d->payload[s], 1 << 20, DEATH_TAG(d->pair[s]) | 1,
                                      NULL, &r)))
            d->preq[s] = r;
        }
      } else {
        CHECK(rc == FLOE_OK, "test gave %s without done", code_name(rc));
      }
    }
    if (d->preq[s]) {
      floe_code rc = fns.test(d->preq[s], &done, &size);
      if (done) {
        d->preq[s] = NULL;
        if (rc == FLOE_OK) {
          CHECK(size == death_payload_size(d->pair[s]), "payload %" PRIu64 ": %zu bytes",
                d->pair[s], size);
          d->ok++;
        } else {
          CHECK(rc == FLOE_UNAVAILABLE || rc == FLOE_CANCELLED, "a payload receive gave %s",
                code_name(rc));
          d->errors++;
        }
      } else {
        CHECK(rc == FLOE_OK, "test gave %s without done", code_name(rc));
      }
    }
    if (repost && !d->hreq[s] && !d->preq[s]) death_post_header(e, d, s);
  }
}

/* The peer is gone: withdraw what is left (the way the core does after its heartbeats fail),
 * then show the context still works, with a connection to itself carrying 1 MiB. */
static void death_finish(End *e, DeathRx *d, int slots) {
  for (int s = 0; s < slots; s++)
    for (int h = 0; h < 2; h++) {
      void **rq = h ? &d->preq[s] : &d->hreq[s];
      if (!*rq) continue;
      if (fns.cancel && fns.cancel(*rq) == FLOE_OK) {
        *rq = NULL;
        continue;
      }
    }
  /* what cancel could not withdraw at once ends soon (cancelled or failed) or with the comm */
  double deadline = now_s() + 2;
  for (;;) {
    death_poll(e, d, slots, false);
    bool left = false;
    for (int s = 0; s < slots; s++) left |= d->hreq[s] || d->preq[s];
    if (!left || now_s() > deadline) break;
    block(e, 5);
  }
  fns.close_recv(e->recv);
  e->recv = NULL;
  if (e->send) fns.close_send(e->send);
  e->send = NULL;
  void *self_send = NULL, *self_recv = NULL;
  unsigned char addr[FLOE_TRANSPORT_ADDR_MAX];
  size_t len = 0;
  void *l2 = NULL;
  CHECK_RC(fns.listen(e->ctx, addr, &len, &l2), FLOE_OK);
  CHECK_RC(fns.connect(e->ctx, addr, len, &self_send), FLOE_OK);
  deadline = now_s() + 20;
  floe_code rc;
  while ((rc = fns.accept(l2, &self_recv)) == FLOE_UNAVAILABLE) {
    CHECK(now_s() < deadline, "a connection to itself never arrived after the peer died");
    block(e, 50);
  }
  CHECK_RC(rc, FLOE_OK);
  unsigned char *big = malloc(1 << 20), *got = malloc(1 << 20);
  CHECK(big && got, "out of memory");
  fill(big, 1 << 20, 77);
  void *reqs[2];
  floe_code codes[2];
  size_t sizes[2];
  CHECK_RC(fns.irecv(self_recv, got, 1 << 20, 77, NULL, &reqs[0]), FLOE_OK);
  CHECK_RC(fns.isend(self_send, big, 1 << 20, 77, NULL, &reqs[1]), FLOE_OK);
  wait_all(e, reqs, 2, codes, sizes);
  CHECK(codes[0] == FLOE_OK && codes[1] == FLOE_OK && sizes[0] == (1 << 20),
        "1 MiB to itself after the peer died: %s, %s, %zu bytes", code_name(codes[0]),
        code_name(codes[1]), sizes[0]);
  check_fill(got, 1 << 20, 77, "after the peer died");
  free(big);
  free(got);
  fns.close_send(self_send);
  fns.close_recv(self_recv);
  fns.close_listen(l2);
  if (verbose)
    fprintf(stderr, "    %d payloads received, %d receives ended in an error, %d refused\n", d->ok,
            d->errors, d->refused);
}

static void death_rx_init(DeathRx *d, int slots) {
  memset(d, 0, sizeof *d);
  for (int s = 0; s < slots; s++) CHECK((d->payload[s] = malloc(1 << 20)) != NULL, "out of memory");
}

static void death_rx_free(DeathRx *d, int slots) {
  for (int s = 0; s < slots; s++) free(d->payload[s]);
}

/* Deterministic: B sends 8 pairs and dies with their payloads unexpected at A; A had only the
 * header receives posted, and posts the payloads' receives after the death was seen (with
 * libfabric 1.17's tcp;ofi_rxm this crashed A inside fi_trecv every time, see fabric_int.h). */
static void peer_death_unexpected(End *e) {
  enum { PAIRS = 8 };
  if (e->name[0] == 'B') {
    await_peer(e, 'r');
    death_stream(e, PAIRS, PAIRS);
    for (int i = 0; i < 20; i++) { /* the payloads' announcements reach A */
      progress(e);
      block(e, 2);
    }
    signal_peer(e, 's');
    kill(getpid(), SIGKILL);
  }
  DeathRx d;
  death_rx_init(&d, PAIRS);
  for (int s = 0; s < PAIRS; s++) death_post_header(e, &d, s);
  signal_peer(e, 'r');
  await_peer(e, 's');
  char c;
  while (read(e->in, &c, 1) > 0) { /* end of file: B is dead */
  }
  /* the headers and the broken connection are read; the payloads wait unmatched */
  double until = now_s() + 0.2;
  while (now_s() < until) {
    progress(e);
    block(e, 5);
  }
  death_poll(e, &d, PAIRS, false); /* the rendezvous posts the payloads' receives now */
  death_finish(e, &d, PAIRS);
  death_rx_free(&d, PAIRS);
}

/* Random: B streams pairs (4 outstanding) until A kills it 0-40 ms in; A keeps receiving the
 * rendezvous way for 300 ms after the kill (a stress: the crash's window is too narrow for it
 * to hit often). */
static void peer_death_random(End *e) {
  enum { SLOTS = 4 };
  if (e->name[0] == 'B') {
    pid_t me = getpid();
    pipe_write(e, &me, sizeof me);
    death_stream(e, SLOTS, -1);
  }
  pid_t b = 0;
  pipe_read(e, &b, sizeof b);
  DeathRx d;
  death_rx_init(&d, SLOTS);
  for (int s = 0; s < SLOTS; s++) death_post_header(e, &d, s);
  unsigned seed = (unsigned)getpid() ^ (unsigned)(now_s() * 1e6);
  double kill_at = now_s() + (rand_r(&seed) % 41) * 1e-3, until = kill_at + 0.3;
  bool killed = false;
  while (now_s() < until) {
    if (!killed && now_s() >= kill_at) {
      kill(b, SIGKILL);
      killed = true;
    }
    death_poll(e, &d, SLOTS, true);
    block(e, 1);
  }
  if (verbose) fprintf(stderr, "    killed B %s\n", killed ? "" : "(never)");
  death_finish(e, &d, SLOTS);
  death_rx_free(&d, SLOTS);
}

/* A receive posted for a later message completes while an earlier, larger message of the
 * same peer waits unreceived: the core posts receives in the order its graph reaches them,
 * not in the order the peer sent, so a transport must not hold a connection's later
 * messages behind an unexpected one. */
static void later_message_passes(End *e) {
  enum { BIG = 1 << 20 };
  unsigned char *big = malloc(BIG), small[64];
  CHECK(big != NULL, "out of memory");
  void *reqs[2];
  if (e->name[0] == 'B') {
    fill(big, BIG, 320);
    fill(small, sizeof small, 321);
    CHECK_RC(fns.isend(e->send, big, BIG, 320, NULL, &reqs[0]), FLOE_OK);
    CHECK_RC(fns.isend(e->send, small, sizeof small, 321, NULL, &reqs[1]), FLOE_OK);
    progress(e);
    signal_peer(e, 's');
    floe_code codes[2];
    wait_all(e, reqs, 2, codes, NULL);
    for (int i = 0; i < 2; i++) CHECK(codes[i] == FLOE_OK, "send %d: %s", i, code_name(codes[i]));
  } else {
    await_peer(e, 's');
    size_t got = 0;
    CHECK_RC(fns.irecv(e->recv, small, sizeof small, 321, NULL, &reqs[1]), FLOE_OK);
    CHECK_RC(wait_one(e, reqs[1], &got), FLOE_OK);
    CHECK(got == sizeof small, "the later message: %zu bytes", got);
    check_fill(small, sizeof small, 321, "the later message");
    CHECK_RC(fns.irecv(e->recv, big, BIG, 320, NULL, &reqs[0]), FLOE_OK);
    CHECK_RC(wait_one(e, reqs[0], &got), FLOE_OK);
    CHECK(got == BIG, "the earlier message: %zu bytes", got);
    check_fill(big, BIG, 320, "the earlier message");
  }
  free(big);
}

typedef struct Case {
  const char *name;
  void (*run)(End *e);
  bool b_dies; /* end B is killed (SIGKILL): no closing handshake, its death is no failure */
  int runs;    /* fresh process pairs to run it in (0: one) */
} Case;

static const Case cases[] = {
    {"tags", tags_out_of_order, false, 0},
    {"unexpected", unexpected_messages, false, 0},
    {"later-passes", later_message_passes, false, 0},
    {"sizes", message_sizes, false, 0},
    {"too-small", receive_too_small, false, 0},
    {"cancel", cancel_receive, false, 0},
    {"thousand", thousand_outstanding, false, 0},
    {"close-pending", close_with_pending, false, 0},
    {"bad-address", bad_addresses, false, 0},
    {"waiting", waiting, false, 0},
    {"interrupt", interrupt_wakes, false, 0},
    {"peer-death", peer_death_unexpected, true, 2},
    {"peer-kill", peer_death_random, true, 8},
};
enum { NUM_CASES = sizeof cases / sizeof cases[0] };

/* ---- running an end --------------------------------------------------------------------- */

static void load(const Config *cf) {
  const char *dir = getenv(cf->dir_env);
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir ? dir : ".", cf->file);
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  CHECK(h != NULL, "%s", dlerror());
  FloePluginInitFn init = (FloePluginInitFn)dlsym(h, FLOE_PLUGIN_INIT_SYMBOL);
  CHECK(init != NULL, "no %s in %s", FLOE_PLUGIN_INIT_SYMBOL, path);
  host.struct_size = sizeof host;
  host.abi_major = FLOE_ABI_MAJOR;
  host.abi_minor = FLOE_ABI_MINOR;
  host.log = host_log;
  FloePluginRegistrar reg;
  memset(&reg, 0, sizeof reg);
  reg.struct_size = sizeof reg;
  reg.declare = fake_declare;
  reg.register_transport = fake_register_transport;
  CHECK_RC(init(&host, &reg), FLOE_OK);
  CHECK(registered == 1, "the plugin registered %d transports", registered);
}

/* One end of one case, from init to finalize. */
static void run_end(const Case *c, End *e) {
  role_name = e->name;
  end_init(e);
  if (c->run == bad_addresses || c->run == waiting || c->run == interrupt_wakes) {
    if (c->run == bad_addresses && e->name[0] == 'A') {
      /* a connection to itself gives bad_addresses a send comm for the tag check */
      unsigned char addr[FLOE_TRANSPORT_ADDR_MAX];
      size_t len = 0;
      CHECK_RC(fns.listen(e->ctx, addr, &len, &e->listen), FLOE_OK);
      CHECK_RC(fns.connect(e->ctx, addr, len, &e->send), FLOE_OK);
    }
    c->run(e);
    if (e->send) fns.close_send(e->send);
    if (e->listen) fns.close_listen(e->listen);
    fns.finalize(e->ctx);
    return;
  }
  connect_ends(e);
  c->run(e);
  if (c->b_dies) { /* A alone is left: no meeting */
    if (e->send) fns.close_send(e->send);
    if (e->recv) fns.close_recv(e->recv);
    if (e->listen) fns.close_listen(e->listen);
    fns.finalize(e->ctx);
    return;
  }
  close_ends(e);
}

typedef struct Thread {
  const Case *c;
  End e;
} Thread;

static void *end_thread(void *arg) {
  Thread *t = arg;
  run_end(t->c, &t->e);
  return NULL;
}

/* shm leaves a file in /dev/shm per endpoint of a killed process ("<pid>:<uid>:<n>"). */
static void clean_shm(pid_t pid) {
  DIR *d = opendir("/dev/shm");
  if (!d) return;
  char prefix[32];
  int n = snprintf(prefix, sizeof prefix, "%ld:", (long)pid);
  struct dirent *de;
  while ((de = readdir(d)))
    if (strncmp(de->d_name, prefix, (size_t)n) == 0) {
      char path[300];
      snprintf(path, sizeof path, "/dev/shm/%s", de->d_name);
      unlink(path);
    }
  closedir(d);
}

/* Runs one case of one configuration; 0 pass, 1 fail, 77 skip (reason printed). */
static int run_case(const Config *cf, const Case *c) {
  int ab[2], ba[2];
  if (pipe(ab) || pipe(ba)) return 1;
  double t0 = now_s();
  pid_t pids[2] = {-1, -1};
  int n = cf->two_processes ? 2 : 1;
  for (int i = 0; i < n; i++) {
    pids[i] = fork();
    if (pids[i] < 0) return 1;
    if (pids[i] == 0) {
      alarm(60);
      if (cf->provider) setenv(cf->provider_env, cf->provider, 1);
      setenv("FLOE_FABRIC_LINGER_MS", "200", 0);
      setenv("FLOE_UCX_LINGER_MS", "200", 0);
      load(cf);
      if (cf->two_processes) {
        End e = {.name = i == 0 ? "A" : "B", .in = i == 0 ? ba[0] : ab[0],
                 .out = i == 0 ? ab[1] : ba[1], .fd = -1};
        close(i == 0 ? ab[0] : ba[0]);
        close(i == 0 ? ba[1] : ab[1]);
        run_end(c, &e);
      } else {
        Thread a = {c, {.name = "A", .in = ba[0], .out = ab[1], .fd = -1}};
        Thread b = {c, {.name = "B", .in = ab[0], .out = ba[1], .fd = -1}};
        pthread_t ta, tb;
        CHECK(pthread_create(&ta, NULL, end_thread, &a) == 0, "pthread_create");
        CHECK(pthread_create(&tb, NULL, end_thread, &b) == 0, "pthread_create");
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
      }
      /* exit, not _exit: LeakSanitizer and valgrind check the end at exit */
      exit(0);
    }
  }
  close(ab[0]);
  close(ab[1]);
  close(ba[0]);
  close(ba[1]);
  int result = 0;
  double cpu = 0;
  for (int i = 0; i < n; i++) {
    int status = 0;
    struct rusage ru;
    if (wait4(pids[i], &status, 0, &ru) < 0) return 1;
    cpu += ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec +
           ru.ru_stime.tv_usec * 1e-6;
    clean_shm(pids[i]);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    if (i == 1 && c->b_dies && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) continue;
    if (WIFSIGNALED(status))
      fprintf(stderr, "    end %c died of signal %d%s\n", 'A' + i, WTERMSIG(status),
              WTERMSIG(status) == SIGALRM ? " (60 s passed)" : "");
    result = 1;
    /* the other end may wait for the dead one forever: end it */
    for (int j = i + 1; j < n; j++) kill(pids[j], SIGKILL);
  }
  printf("%s: %s/%s (%.2f s, %.2f s CPU)\n", result ? "FAIL" : "PASS", cf->label, c->name,
         now_s() - t0, cpu);
  fflush(stdout);
  return result;
}

/* Whether the configuration can run here: a child initialises the transport once. */
static int probe(const Config *cf, char *why, size_t why_len) {
  const char *dir = getenv(cf->dir_env);
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir ? dir : ".", cf->file);
  if (access(path, R_OK) != 0) {
    snprintf(why, why_len, "%s was not built (%s)", cf->file,
             dir ? path : "set FLOE_FABRIC_DIR / FLOE_TRANSPORT_DIR");
    return 77;
  }
  int p[2];
  if (pipe(p)) return 1;
  pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    if (cf->provider) setenv(cf->provider_env, cf->provider, 1);
    load(cf);
    void *ctx = NULL;
    floe_code rc = fns.init(&host, &ctx);
    if (rc == FLOE_OK) {
      fns.finalize(ctx);
      _exit(0);
    }
    ssize_t w = write(p[1], log_text, strlen(log_text));
    (void)w;
    _exit(77);
  }
  close(p[1]);
  ssize_t got = read(p[0], why, why_len - 1);
  why[got > 0 ? got : 0] = 0;
  close(p[0]);
  char *nl = strchr(why, '\n');
  if (nl) *nl = 0;
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  snprintf(why, why_len, "the probe died of signal %d", WTERMSIG(status));
  return 1;
}

static bool wanted(int argc, char **argv, const Config *cf, const Case *c) {
  bool any = false;
  for (int i = 1; i < argc; i++) {
    if (argv[i][0] == '-') continue;
    any = true;
    size_t l = strlen(cf->label);
    if (strcmp(argv[i], cf->label) == 0) return true;
    if (c && strncmp(argv[i], cf->label, l) == 0 && argv[i][l] == '/' &&
        strcmp(argv[i] + l + 1, c->name) == 0)
      return true;
    if (!c && strncmp(argv[i], cf->label, l) == 0 && argv[i][l] == '/') return true;
  }
  return !any;
}

static int run_all_cases_note;

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++)
    if (strcmp(argv[i], "--verbose") == 0 || strcmp(argv[i], "-v") == 0) verbose = true;
  if (getenv("FLOE_TEST_VERBOSE")) verbose = true;
  signal(SIGPIPE, SIG_IGN);
  int failed = 0, ran = 0;
  for (size_t k = 0; k < sizeof configs / sizeof configs[0]; k++) {
    const Config *cf = &configs[k];
    if (!wanted(argc, argv, cf, NULL)) continue;
    if (cf->skip) {
      printf("SKIP: %s: %s\n", cf->label, cf->skip);
      continue;
    }
    char why[8192];
    int p = probe(cf, why, sizeof why);
    if (p == 77) {
      if (!cf->optional) printf("SKIP: %s: %s\n", cf->label, why);
      continue;
    }
    if (p != 0) {
      printf("FAIL: %s: the transport does not initialise: %s\n", cf->label, why);
      failed++;
      continue;
    }
    for (int i = 0; i < NUM_CASES; i++) {
      if (!wanted(argc, argv, cf, &cases[i])) continue;
      if (cases[i].b_dies && !cf->two_processes) continue; /* killing B would kill A too */
      if (cases[i].run == peer_death_random && strcmp(cf->label, "fabric-shm") == 0) {
        /* libfabric 1.17's shm provider can spin for ever in its progress when the peer
         * dies with a message half copied (seen in 1 run of 8 under load, the survivor at
         * 100% CPU inside fi_cq_read); no setting of the plugin avoids it yet. peer-death
         * (a deterministic death) still runs on shm. */
        if (run_all_cases_note++ == 0)
          printf("SKIP: %s/peer-kill: libfabric 1.17 shm spins in progress when a peer dies "
                 "mid-message (a known limitation, plugins/transport/README.md)\n", cf->label);
        continue;
      }
      for (int run = 0; run < (cases[i].runs ? cases[i].runs : 1); run++) {
        ran++;
        failed += run_case(cf, &cases[i]) != 0;
      }
    }
  }
  printf("%d case runs, %d failed\n", ran, failed);
  return failed ? 1 : ran ? 0 : 77;
}
