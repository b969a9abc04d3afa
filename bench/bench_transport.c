/* SPDX-License-Identifier: Apache-2.0 */
/* bench_transport.c - a transport plugin measured through FloeTransportFns (dlopen and
 * floe_plugin_init, as the core loads it), with the driver of bench/raw_fabric.c
 * (transport_bench.h), and the core's transport manager on top of it.
 *
 *   bench_transport [--plugin FILE] [PROVIDER] [MAX_BYTES]
 *       two processes, ping-pong and streaming through the plugin's slots; waits as the ABI
 *       says: get_fd + trywait + poll() where the context has an fd (tcp), else wait (shm).
 *       Prints "floe <provider> lat|bw <bytes> <value>".
 *   bench_transport --manager [PROVIDER] [MAX_BYTES]
 *       one process: the runtime's transport manager (FLOE_TRANSPORT=fabric; a loopback comm
 *       pair and its progress thread) against the plugin's own loopback pair driven from one
 *       thread. Prints "loop-plugin|loop-manager <provider> lat|bw <bytes> <value>", latency
 *       being the time from posting a send to its receive's completion.
 *   bench_transport --rendezvous [PROVIDER|local] [MAX_BYTES]
 *       one process: a step's rendezvous moving f32 tensors through the manager's loopback
 *       (force_transport): post the Recv, Send, wait for the Recv's done; sizes 4 B to 64 KiB
 *       around the one-message limit. Prints "rendezvous <provider> lat <bytes> <us>".
 *
 * The plugin file defaults to $FLOE_FABRIC_DIR/floe-transport-fabric.so, else
 * ../plugins/transport/fabric/.libs/floe-transport-fabric.so beside this program.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core.h"
#include "transport_bench.h"

static FloeTransportFns fns;
static FloeHostApi host;

static void host_log(FloeLogLevel level, const char *fmt, ...) {
  if (level > FLOE_LOG_WARNING) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "bench_transport: ");
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static floe_code fake_declare(FloePluginRegistrar *reg, const FloePluginInfo *info) {
  (void)reg;
  return info->abi_major == FLOE_ABI_MAJOR ? FLOE_OK : FLOE_ABI_MISMATCH;
}
static floe_code fake_register(FloePluginRegistrar *reg, const FloeTransportFns *t) {
  (void)reg;
  memcpy(&fns, t, t->struct_size < sizeof fns ? t->struct_size : sizeof fns);
  return FLOE_OK;
}

static void fail(const char *what, floe_code rc) {
  fprintf(stderr, "bench_transport: %s: %s\n", what, floe_code_name(rc));
  exit(1);
}

static void load(const char *path) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "bench_transport: %s\n", dlerror());
    exit(1);
  }
  FloePluginInitFn init = (FloePluginInitFn)dlsym(h, FLOE_PLUGIN_INIT_SYMBOL);
  if (!init) exit(1);
  host.struct_size = sizeof host;
  host.abi_major = FLOE_ABI_MAJOR;
  host.abi_minor = FLOE_ABI_MINOR;
  host.log = host_log;
  FloePluginRegistrar reg;
  memset(&reg, 0, sizeof reg);
  reg.struct_size = sizeof reg;
  reg.declare = fake_declare;
  reg.register_transport = fake_register;
  floe_code rc = init(&host, &reg);
  if (rc != FLOE_OK) fail("floe_plugin_init", rc);
}

/* ---- through the plugin's slots -------------------------------------------------------- */

typedef struct Pl {
  void *ctx, *listen, *send, *recv;
  int fd;
} Pl;

static void pl_block(Pl *p, int ms) {
  if (p->fd >= 0 && fns.trywait) {
    if (fns.trywait(p->ctx) == FLOE_OK) {
      struct pollfd q = {.fd = p->fd, .events = POLLIN};
      poll(&q, 1, ms);
    }
  } else if (fns.wait) {
    fns.wait(p->ctx, ms);
  } else {
    struct timespec ts = {0, 50000};
    nanosleep(&ts, NULL);
  }
}

static void *pl_isend(void *self, const void *buf, size_t len, uint64_t tag) {
  Pl *p = self;
  void *req = NULL;
  floe_code rc = fns.isend(p->send, buf, len, tag, NULL, &req);
  if (rc != FLOE_OK) fail("isend", rc);
  return req;
}

static void *pl_irecv(void *self, void *buf, size_t len, uint64_t tag) {
  Pl *p = self;
  void *req = NULL;
  floe_code rc = fns.irecv(p->recv, buf, len, tag, NULL, &req);
  if (rc != FLOE_OK) fail("irecv", rc);
  return req;
}

static void pl_wait(void *self, void **h, int n) {
  Pl *p = self;
  for (;;) {
    if (fns.progress) fns.progress(p->ctx);
    int left = 0;
    for (int i = 0; i < n; i++) {
      if (!h[i]) continue;
      int done = 0;
      size_t size;
      floe_code rc = fns.test(h[i], &done, &size);
      if (done) {
        if (rc != FLOE_OK) fail("a request", rc);
        h[i] = NULL;
      } else {
        left++;
      }
    }
    if (!left) return;
    pl_block(p, -1);
  }
}

static void xfer(int fd, void *buf, size_t len, bool out) {
  char *c = buf;
  while (len) {
    ssize_t n = out ? write(fd, c, len) : read(fd, c, len);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      fprintf(stderr, "bench_transport: the other process went away\n");
      exit(1);
    }
    c += n;
    len -= (size_t)n;
  }
}

static double cpu_seconds(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec +
         ru.ru_stime.tv_usec * 1e-6;
}

static void two_process_end(int rank, int in, int out, const char *plugin, const char *prov,
                            size_t max) {
  load(plugin);
  Pl p = {0};
  floe_code rc = fns.init(&host, &p.ctx);
  if (rc != FLOE_OK) fail("init", rc);
  p.fd = -1;
  if (fns.get_fd && fns.get_fd(p.ctx, &p.fd) != FLOE_OK) p.fd = -1;
  unsigned char addr[FLOE_TRANSPORT_ADDR_MAX], peer[FLOE_TRANSPORT_ADDR_MAX];
  size_t len = 0;
  if ((rc = fns.listen(p.ctx, addr, &len, &p.listen)) != FLOE_OK) fail("listen", rc);
  uint32_t n = (uint32_t)len, pn = 0;
  xfer(out, &n, sizeof n, true);
  xfer(out, addr, len, true);
  xfer(in, &pn, sizeof pn, false);
  if (pn > sizeof peer) exit(1);
  xfer(in, peer, pn, false);
  if ((rc = fns.connect(p.ctx, peer, pn, &p.send)) != FLOE_OK) fail("connect", rc);
  while ((rc = fns.accept(p.listen, &p.recv)) == FLOE_UNAVAILABLE) pl_block(&p, 10);
  if (rc != FLOE_OK) fail("accept", rc);
  BenchOps o = {&p, pl_isend, pl_irecv, pl_wait};
  bench_run(&o, rank, "floe", prov, max);
  char bye = 'z';
  xfer(out, &bye, 1, true);
  xfer(in, &bye, 1, false);
  fns.close_send(p.send);
  fns.close_recv(p.recv);
  fns.close_listen(p.listen);
  fns.finalize(p.ctx);
  fprintf(stderr, "floe %s rank %d: %.2f s CPU\n", prov, rank, cpu_seconds());
}

/* ---- loopback: the plugin from one thread, and the core's manager ---------------------- */

typedef struct Done {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int left;
} Done;

static void done_cb(void *arg, floe_code code, size_t size) {
  (void)size;
  Done *d = arg;
  if (code != FLOE_OK) fail("a manager transfer", code);
  pthread_mutex_lock(&d->mu);
  if (--d->left == 0) pthread_cond_signal(&d->cv);
  pthread_mutex_unlock(&d->mu);
}

/* n receives then n sends of size bytes, through the manager; waits for all 2n callbacks. */
static void mgr_round(FloeTransportMgr *m, Done *d, void *sbuf, void *rbuf, size_t size, int n) {
  FloeStatus st = {FLOE_OK, NULL};
  d->left = 2 * n;
  for (int i = 0; i < n; i++)
    if (floe__transport_irecv(m, rbuf, size, 7, done_cb, d, NULL, &st) != FLOE_OK)
      fail(floe_status_message(&st), st.code);
  for (int i = 0; i < n; i++)
    if (floe__transport_isend(m, sbuf, size, 7, done_cb, d, &st) != FLOE_OK)
      fail(floe_status_message(&st), st.code);
  pthread_mutex_lock(&d->mu);
  while (d->left) pthread_cond_wait(&d->cv, &d->mu);
  pthread_mutex_unlock(&d->mu);
}

static void pl_round(Pl *p, void *sbuf, void *rbuf, size_t size, int n) {
  void *h[2 * BENCH_WINDOW];
  for (int i = 0; i < n; i++) h[i] = pl_irecv(p, rbuf, size, 7);
  for (int i = 0; i < n; i++) h[n + i] = pl_isend(p, sbuf, size, 7);
  pl_wait(p, h, 2 * n);
}

static void loopback(const char *plugin_dir, const char *plugin, const char *prov, size_t max) {
  setenv("FLOE_TRANSPORT", "fabric", 1);
  /* the plugin's own loopback pair, driven from this thread */
  load(plugin);
  Pl p = {0};
  floe_code rc = fns.init(&host, &p.ctx);
  if (rc != FLOE_OK) fail("init", rc);
  p.fd = -1;
  if (fns.get_fd && fns.get_fd(p.ctx, &p.fd) != FLOE_OK) p.fd = -1;
  unsigned char addr[FLOE_TRANSPORT_ADDR_MAX];
  size_t len = 0;
  if ((rc = fns.listen(p.ctx, addr, &len, &p.listen)) != FLOE_OK) fail("listen", rc);
  if ((rc = fns.connect(p.ctx, addr, len, &p.send)) != FLOE_OK) fail("connect", rc);
  while ((rc = fns.accept(p.listen, &p.recv)) == FLOE_UNAVAILABLE) pl_block(&p, 10);
  if (rc != FLOE_OK) fail("accept", rc);
  /* the runtime's manager over the same plugin file */
  FloeRuntimeOptions o;
  memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  o.plugin_path = plugin_dir;
  o.plugins = "transport-fabric";
  o.num_threads = 1;
  o.skip_install_dir = 1;
  FloeStatus st = {FLOE_OK, NULL};
  FloeRuntime *rt = floe_runtime_new(&o, &st);
  if (!rt) fail(floe_status_message(&st), st.code);
  FloeTransportMgr *m = floe__transport_mgr(rt, &st);
  if (!m) fail(floe_status_message(&st), st.code);
  Done d = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
  unsigned char *sbuf = calloc(1, max), *rbuf = calloc(1, max);
  if (!sbuf || !rbuf) exit(1);
  for (int i = 0; i < BENCH_NUM_SIZES && bench_sizes[i] <= max; i++) {
    size_t s = bench_sizes[i];
    for (int which = 0; which < 2; which++) {
      const char *impl = which ? "loop-manager" : "loop-plugin";
      if (s <= 65536) {
        int iters = s <= 4096 ? 400 : 100;
        double batches[BENCH_BATCHES];
        for (int b = -1; b < BENCH_BATCHES; b++) {
          double t0 = bench_now();
          for (int k = 0; k < iters; k++) {
            if (which)
              mgr_round(m, &d, sbuf, rbuf, s, 1);
            else
              pl_round(&p, sbuf, rbuf, s, 1);
          }
          if (b >= 0) batches[b] = (bench_now() - t0) / iters * 1e6;
        }
        qsort(batches, BENCH_BATCHES, sizeof batches[0], bench_cmp);
        printf("%s %s lat %zu %.2f\n", impl, prov, s, batches[BENCH_BATCHES / 2]);
      }
      if (s >= 65536) {
        int count = (int)(((size_t)256 << 20) / s);
        if (count < 8) count = 8;
        if (count > 2048) count = 2048;
        double best = 0;
        for (int rep = 0; rep < 4; rep++) {
          double t0 = bench_now();
          for (int done = 0; done < count; done += BENCH_WINDOW) {
            if (which)
              mgr_round(m, &d, sbuf, rbuf, s, BENCH_WINDOW);
            else
              pl_round(&p, sbuf, rbuf, s, BENCH_WINDOW);
          }
          double gbs = (double)s * count / (bench_now() - t0) / 1e9;
          if (gbs > best) best = gbs;
        }
        printf("%s %s bw %zu %.3f\n", impl, prov, s, best);
      }
      fflush(stdout);
    }
  }
  free(sbuf);
  free(rbuf);
  floe_runtime_free(rt);
  fns.close_send(p.send);
  fns.close_recv(p.recv);
  fns.close_listen(p.listen);
  fns.finalize(p.ctx);
}

/* ---- the rendezvous over the manager's loopback ----------------------------------------- */

typedef struct RvDone {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done;
} RvDone;

static void rv_done(void *arg, const FloeStatus *st, FloeTensor *t, bool dead) {
  (void)dead;
  RvDone *d = arg;
  if (st->code != FLOE_OK) fail(floe_status_message(st), st->code);
  floe_tensor_release(t);
  pthread_mutex_lock(&d->mu);
  d->done = true;
  pthread_cond_signal(&d->cv);
  pthread_mutex_unlock(&d->mu);
}

static void rendezvous_bench(const char *plugin_dir, const char *prov, size_t max) {
  bool local = strcmp(prov, "local") == 0;
  setenv("FLOE_TRANSPORT", local ? "local" : "fabric", 1);
  char dir[4200];
  if (local)
    snprintf(dir, sizeof dir, "%s/../../local/.libs", plugin_dir);
  else
    snprintf(dir, sizeof dir, "%s", plugin_dir);
  FloeRuntimeOptions o;
  memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  o.plugin_path = dir;
  o.plugins = local ? "transport-local" : "transport-fabric";
  o.num_threads = 1;
  o.skip_install_dir = 1;
  FloeStatus st = {FLOE_OK, NULL};
  FloeRuntime *rt = floe_runtime_new(&o, &st);
  if (!rt) fail(floe_status_message(&st), st.code);
  /* no device plugin: the key's devices are host memory named only */
  static const char dev[] = "/job:localhost/replica:0/task:0/device:CPU:0";
  static const size_t sizes[] = {4, 1024, 4096, 16296, 16388, 65536};
  FloeRendezvousOptions ro = {.force_transport = true};
  RvDone d = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0] && sizes[i] <= max; i++) {
    int64_t n = (int64_t)(sizes[i] / 4 ? sizes[i] / 4 : 1);
    FloeTensor *t = floe__tensor_alloc(NULL, FLOE_F32, 1, &n, &st);
    if (!t) fail(floe_status_message(&st), st.code);
    memset(floe_tensor_data(t), 1, t->nbytes);
    int iters = 400;
    double batches[BENCH_BATCHES];
    for (int b = -1; b < BENCH_BATCHES; b++) {
      FloeRendezvous *r = floe__rendezvous_new(rt, 100 + b, &ro, &st);
      if (!r) fail(floe_status_message(&st), st.code);
      double t0 = bench_now();
      for (int k = 0; k < iters; k++) {
        FloeRendezvousKey key = {dev, 1, dev, "x:0", 0, k};
        d.done = false;
        floe__rendezvous_recv(r, &key, NULL, rv_done, &d);
        if (floe__rendezvous_send(r, &key, t, false, &st) != FLOE_OK)
          fail(floe_status_message(&st), st.code);
        pthread_mutex_lock(&d.mu);
        while (!d.done) pthread_cond_wait(&d.cv, &d.mu);
        pthread_mutex_unlock(&d.mu);
      }
      if (b >= 0) batches[b] = (bench_now() - t0) / iters * 1e6;
      floe__rendezvous_free(r);
    }
    qsort(batches, BENCH_BATCHES, sizeof batches[0], bench_cmp);
    printf("rendezvous %s lat %zu %.2f\n", prov, (size_t)t->nbytes, batches[BENCH_BATCHES / 2]);
    fflush(stdout);
    floe_tensor_release(t);
  }
  floe_runtime_free(rt);
}

int main(int argc, char **argv) {
  const char *plugin = NULL;
  bool manager = false, rendezvous = false;
  int a = 1;
  for (; a < argc && argv[a][0] == '-'; a++) {
    if (strcmp(argv[a], "--manager") == 0)
      manager = true;
    else if (strcmp(argv[a], "--rendezvous") == 0)
      rendezvous = true;
    else if (strcmp(argv[a], "--plugin") == 0 && a + 1 < argc)
      plugin = argv[++a];
    else {
      fprintf(stderr, "usage: bench_transport [--manager|--rendezvous] [--plugin FILE] "
                      "[PROVIDER] [MAX]\n");
      return 2;
    }
  }
  const char *prov = a < argc ? argv[a++] : "tcp;ofi_rxm";
  size_t max = a < argc ? strtoull(argv[a], NULL, 10) : (size_t)64 << 20;
  setenv("FLOE_FABRIC_PROVIDER", prov, 1);
  static char path[4200], dir[4096];
  const char *d = getenv("FLOE_FABRIC_DIR");
  if (d && *d)
    snprintf(dir, sizeof dir, "%s", d);
  else {
    char self[2048];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = 0;
    char *slash = strrchr(self, '/');
    if (slash) *slash = 0;
    snprintf(dir, sizeof dir, "%s/../plugins/transport/fabric/.libs", self);
  }
  if (!plugin) {
    snprintf(path, sizeof path, "%s/floe-transport-fabric.so", dir);
    plugin = path;
  }
  if (manager) {
    loopback(dir, plugin, prov, max);
    return 0;
  }
  if (rendezvous) {
    rendezvous_bench(dir, prov, max);
    return 0;
  }
  int ab[2], ba[2];
  if (pipe(ab) || pipe(ba)) return 1;
  fflush(stdout);
  pid_t pid[2];
  for (int rank = 0; rank < 2; rank++) {
    if ((pid[rank] = fork()) == 0) { /* before any transport exists */
      two_process_end(rank, rank ? ab[0] : ba[0], rank ? ba[1] : ab[1], plugin, prov, max);
      exit(0);
    }
  }
  int bad = 0;
  for (int rank = 0; rank < 2; rank++) {
    int st = 0;
    waitpid(pid[rank], &st, 0);
    bad |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
  }
  return bad;
}
