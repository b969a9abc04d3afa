/* SPDX-License-Identifier: Apache-2.0 */
/* test_rendezvous.c - Send/Recv's rendezvous (core/exec/rendezvous.c), the transport manager
 * (core/runtime/transport.c), the local transport plugin alone, and transfers to and from the fake
 * accelerator of tests/devices (floe-testdev.so, whose memory the host reaches only through
 * copies).
 *
 * Expected values are made here: the sent tensors' own values, a bf16 rounding computed by
 * comparing distances in double precision (not the bit trick the core uses), header bytes
 * written field by field from the documented wire format. */
#define _GNU_SOURCE
#include <check.h>
#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core.h"

static const char *env_dir(const char *var) {
  const char *d = getenv(var);
  ck_assert_msg(d && *d, "%s is not set (run through make check)", var);
  return d;
}

/* A runtime on the plugins of path. */
static FloeRuntime *runtime_on(const char *path) {
  FloeRuntimeOptions o;
  memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  o.plugin_path = path;
  o.plugins = "";
  o.num_threads = 2;
  o.skip_install_dir = 1;
  FloeStatus st = {FLOE_OK, NULL};
  FloeRuntime *rt = floe_runtime_new(&o, &st);
  ck_assert_msg(rt != NULL, "runtime on %s: %s", path, floe_status_message(&st));
  floe_status_clear(&st);
  return rt;
}

/* A runtime on the CPU plugin, plus the local transport and/or the test devices. */
static FloeRuntime *runtime(bool transport, bool testdev) {
  char path[4 * PATH_MAX];
  snprintf(path, sizeof path, "%s%s%s%s%s", env_dir("FLOE_PLUGIN_PATH"), transport ? ":" : "",
           transport ? env_dir("FLOE_TRANSPORT_DIR") : "", testdev ? ":" : "",
           testdev ? env_dir("FLOE_TESTDEV_DIR") : "");
  return runtime_on(path);
}

/* The transport the manager is to use: FLOE_TRANSPORT (the fabric run of
 * tests/transport/test_rendezvous_fabric.sh), else the default. */
static const char *want_transport(void) {
  const char *t = getenv("FLOE_TRANSPORT");
  return t && *t ? t : "local";
}

static FloeDevice *device(FloeRuntime *rt, const char *name) {
  FloeStatus st = {FLOE_OK, NULL};
  FloeDevice *d = floe__device_find(rt, name, &st);
  ck_assert_msg(d != NULL, "%s: %s", name, floe_status_message(&st));
  floe_status_clear(&st);
  return d;
}

static FloeRendezvousKey key_of(FloeDevice *src, FloeDevice *dst, const char *tensor,
                                uint64_t frame, int64_t iter) {
  FloeRendezvousKey k = {src->name, floe__device_incarnation(src), dst->name, tensor, frame, iter};
  return k;
}

static FloeRendezvous *rv_new(FloeRuntime *rt, int64_t step, bool force, bool bf16) {
  FloeRendezvousOptions o = {force, bf16, NULL};
  FloeStatus st = {FLOE_OK, NULL};
  FloeRendezvous *r = floe__rendezvous_new(rt, step, &o, &st);
  ck_assert_msg(r != NULL, "%s", floe_status_message(&st));
  return r;
}

/* A host f32 vector. */
static FloeTensor *vec(const float *v, int64_t n) {
  FloeStatus st = {FLOE_OK, NULL};
  FloeTensor *t = floe_tensor_from_data(FLOE_F32, 1, &n, v, (size_t)n * sizeof *v, &st);
  ck_assert_msg(t != NULL, "%s", floe_status_message(&st));
  return t;
}

/* One Recv's outcome. */
typedef struct Got {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int calls;
  floe_code code;
  char msg[1024];
  FloeTensor *t;
  bool dead;
  pthread_t thread;
} Got;

static void got_init(Got *g) {
  memset(g, 0, sizeof *g);
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv, NULL);
}

static void got_done(void *arg, const FloeStatus *st, FloeTensor *t, bool dead) {
  Got *g = arg;
  pthread_mutex_lock(&g->mu);
  g->calls++;
  g->code = st->code;
  snprintf(g->msg, sizeof g->msg, "%s", floe_status_message(st));
  g->t = t;
  g->dead = dead;
  g->thread = pthread_self();
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
}

/* Waits up to 5 s for the Recv's done. */
static void got_wait(Got *g) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += 5;
  pthread_mutex_lock(&g->mu);
  while (g->calls == 0 && pthread_cond_timedwait(&g->cv, &g->mu, &ts) == 0) {
  }
  int calls = g->calls;
  pthread_mutex_unlock(&g->mu);
  ck_assert_msg(calls == 1, "done ran %d times", calls);
}

static void got_clear(Got *g) {
  floe_tensor_release(g->t);
  pthread_cond_destroy(&g->cv);
  pthread_mutex_destroy(&g->mu);
}

/* The values of t (any device) on the host, n of them. */
static void read_f32(FloeTensor *t, float *out, int64_t n) {
  FloeStatus st = {FLOE_OK, NULL};
  FloeTensor *h = floe__tensor_to_device(t, NULL, &st);
  ck_assert_msg(h != NULL, "%s", floe_status_message(&st));
  ck_assert_int_eq(h->dtype, FLOE_F32);
  ck_assert_int_eq(h->num_elements, n);
  memcpy(out, floe_tensor_data(h), (size_t)n * sizeof *out);
  floe_tensor_release(h);
}

static void assert_contains(const char *s, const char *part) {
  ck_assert_msg(strstr(s, part) != NULL, "\"%s\" does not contain \"%s\"", s, part);
}

/* ---- keys ------------------------------------------------------------------------------ */

START_TEST(key_string_and_incarnations) {
  FloeRendezvousKey k = {"/job:localhost/replica:0/task:0/device:CPU:0", 0xabcull,
                         "/job:localhost/replica:0/task:0/device:TESTDEV:1", "mm:0", 0x12ull, 3};
  char *s = floe__rendezvous_key_string(&k);
  ck_assert_str_eq(s, "/job:localhost/replica:0/task:0/device:CPU:0;0000000000000abc;"
                      "/job:localhost/replica:0/task:0/device:TESTDEV:1;mm:0;0000000000000012:3");
  floe__free(s);
  uint64_t t1 = floe__rendezvous_tag(1, &k), t2 = floe__rendezvous_tag(2, &k);
  ck_assert_uint_eq(t1 & 1, 0);
  ck_assert_uint_ne(t1, t2); /* the step is part of the tag */
  ck_assert_uint_eq(t1, floe__rendezvous_tag(1, &k));

  FloeRuntime *a = runtime(false, true), *b = runtime(false, true);
  FloeDevice *a0 = device(a, "testdev:0"), *a1 = device(a, "testdev:1");
  ck_assert_uint_eq(floe__device_incarnation(a0), floe__device_incarnation(a0));
  ck_assert_uint_ne(floe__device_incarnation(a0), floe__device_incarnation(a1));
  /* Another runtime draws another seed: a restarted peer is told apart. */
  ck_assert_uint_ne(floe__device_incarnation(a0), floe__device_incarnation(device(b, "testdev:0")));
  floe_runtime_free(a);
  floe_runtime_free(b);
}
END_TEST

/* ---- the reference path and the transport path ----------------------------------------- */

/* Send then Recv (or the reverse) of a 5-float vector from cpu:0 to cpu:0. */
static void one_transfer(bool force, bool recv_first) {
  FloeRuntime *rt = runtime(true, false);
  FloeDevice *cpu = device(rt, "cpu:0");
  FloeRendezvous *r = rv_new(rt, 7, force, false);
  const float v[5] = {1, -2, 3.5f, 1e-20f, 65504};
  FloeTensor *x = vec(v, 5);
  FloeRendezvousKey k = key_of(cpu, cpu, "x:0", 0, 0);
  Got g;
  got_init(&g);
  FloeStatus st = {FLOE_OK, NULL};
  if (recv_first) {
    floe__rendezvous_recv(r, &k, cpu, got_done, &g);
    /* on the transport path the header receive may already be posted: either way, pending */
    ck_assert_int_eq(g.calls, 0);
    ck_assert_int_eq(floe__rendezvous_num_pending(r), 1);
  }
  ck_assert_int_eq(floe__rendezvous_send(r, &k, x, false, &st), FLOE_OK);
  if (!recv_first) floe__rendezvous_recv(r, &k, cpu, got_done, &g);
  if (!force) ck_assert_int_eq(g.calls, 1); /* by reference: done ran inside send/recv */
  got_wait(&g);
  ck_assert_msg(g.code == FLOE_OK, "%s", g.msg);
  ck_assert(!g.dead);
  float out[5];
  read_f32(g.t, out, 5);
  ck_assert_mem_eq(out, v, sizeof v);
  FloeRendezvousStats s;
  floe__rendezvous_stats(r, &s);
  ck_assert_int_eq(s.sends, 1);
  ck_assert_int_eq(s.recvs, 1);
  if (force) {
    ck_assert_ptr_ne(g.t, x); /* the bytes travelled */
    ck_assert_int_eq(s.by_reference, 0);
    ck_assert_int_eq(s.wire_bytes, 20);
    ck_assert_int_eq(s.tensor_bytes, 20);
  } else {
    ck_assert_ptr_eq(g.t, x); /* the same tensor, handed over */
    ck_assert_int_eq(s.by_reference, 1);
    ck_assert_int_eq(s.wire_bytes, 0);
  }
  ck_assert_int_eq(floe__rendezvous_num_pending(r), 0);
  floe__rendezvous_free(r);
  floe_tensor_release(x);
  got_clear(&g);
  floe_runtime_free(rt);
}

START_TEST(by_reference_send_then_recv) { one_transfer(false, false); }
END_TEST
START_TEST(by_reference_recv_then_send) { one_transfer(false, true); }
END_TEST
START_TEST(transport_send_then_recv) { one_transfer(true, false); }
END_TEST
START_TEST(transport_recv_then_send) { one_transfer(true, true); }
END_TEST

/* A key whose incarnation is not this runtime's device's names a peer elsewhere: the value
 * goes through the transport even between host-memory devices. */
START_TEST(foreign_incarnation_takes_the_transport) {
  FloeRuntime *rt = runtime(true, false);
  FloeDevice *cpu = device(rt, "cpu:0");
  FloeRendezvous *r = rv_new(rt, 1, false, false);
  FloeRendezvousKey k = key_of(cpu, cpu, "y:0", 0, 0);
  k.src_incarnation ^= 1;
  const float v[2] = {4, 5};
  FloeTensor *x = vec(v, 2);
  FloeStatus st = {FLOE_OK, NULL};
  ck_assert_int_eq(floe__rendezvous_send(r, &k, x, false, &st), FLOE_OK);
  Got g;
  got_init(&g);
  floe__rendezvous_recv(r, &k, cpu, got_done, &g);
  got_wait(&g);
  ck_assert_msg(g.code == FLOE_OK, "%s", g.msg);
  FloeRendezvousStats s;
  floe__rendezvous_stats(r, &s);
  ck_assert_int_eq(s.by_reference, 0);
  ck_assert_int_eq(s.wire_bytes, 8);
  float out[2];
  read_f32(g.t, out, 2);
  ck_assert_mem_eq(out, v, sizeof v);
  floe__rendezvous_free(r);
  floe_tensor_release(x);
  got_clear(&g);
  floe_runtime_free(rt);
}
END_TEST

/* ---- many keys from many threads ------------------------------------------------------- */

enum { NKEYS = 240, NTHREADS = 4, KEYLEN = 6 };

typedef struct Many {
  FloeRendezvous *r;
  FloeDevice *cpu;
  int order[2][NTHREADS][NKEYS / NTHREADS]; /* [sender?][thread]: its keys, shuffled */
  atomic_int received, bad;
  FloeTensor *got[NKEYS];
} Many;

typedef struct ManyArg {
  Many *m;
  int thread;
  bool sender;
  int index; /* for a Recv's done */
} ManyArg;

static void many_value(int key, float *v) {
  for (int j = 0; j < KEYLEN; j++) v[j] = (float)(key * 10 + j);
}

static void many_done(void *arg, const FloeStatus *st, FloeTensor *t, bool dead) {
  ManyArg *a = arg;
  if (st->code != FLOE_OK || dead || !t) {
    atomic_fetch_add(&a->m->bad, 1);
  } else {
    a->m->got[a->index] = t;
  }
  atomic_fetch_add(&a->m->received, 1);
}

static void *many_thread(void *arg) {
  ManyArg *a = arg;
  Many *m = a->m;
  static ManyArg recv_args[NKEYS];
  for (int i = 0; i < NKEYS / NTHREADS; i++) {
    int key = m->order[a->sender][a->thread][i];
    char name[32];
    snprintf(name, sizeof name, "t%d:0", key);
    FloeRendezvousKey k = key_of(m->cpu, m->cpu, name, 0, 0);
    if (a->sender) {
      float v[KEYLEN];
      many_value(key, v);
      FloeTensor *x = vec(v, KEYLEN);
      FloeStatus st = {FLOE_OK, NULL};
      if (floe__rendezvous_send(m->r, &k, x, false, &st) != FLOE_OK) atomic_fetch_add(&m->bad, 1);
      floe_status_clear(&st);
      floe_tensor_release(x); /* the rendezvous holds its own */
    } else {
      recv_args[key] = (ManyArg){m, a->thread, false, key};
      floe__rendezvous_recv(m->r, &k, m->cpu, many_done, &recv_args[key]);
    }
  }
  return NULL;
}

static void shuffle(int *v, int n, unsigned *seed) {
  for (int i = n - 1; i > 0; i--) {
    int j = (int)(rand_r(seed) % (unsigned)(i + 1)), t = v[i];
    v[i] = v[j];
    v[j] = t;
  }
}

static void many_keys(bool force) {
  FloeRuntime *rt = runtime(true, false);
  static Many m;
  memset(&m, 0, sizeof m);
  m.cpu = device(rt, "cpu:0");
  m.r = rv_new(rt, 3, force, false);
  unsigned seed = 12345;
  int all[NKEYS];
  for (int i = 0; i < NKEYS; i++) all[i] = i;
  ManyArg args[2 * NTHREADS];
  pthread_t th[2 * NTHREADS];
  /* Senders and receivers each split the keys differently, each in its own random order. */
  for (int side = 0; side < 2; side++) {
    shuffle(all, NKEYS, &seed);
    for (int t = 0; t < NTHREADS; t++) {
      memcpy(m.order[side == 0][t], all + t * (NKEYS / NTHREADS), sizeof m.order[0][t]);
      args[side * NTHREADS + t] = (ManyArg){&m, t, side == 0, 0};
    }
    for (int t = 0; t < NTHREADS; t++)
      ck_assert_int_eq(pthread_create(&th[side * NTHREADS + t], NULL, many_thread,
                                      &args[side * NTHREADS + t]), 0);
    if (side == 0) {
      /* let some sends land first; the receivers then meet values and waiters both */
      struct timespec ts = {0, 2000000};
      nanosleep(&ts, NULL);
    }
  }
  for (int t = 0; t < 2 * NTHREADS; t++) pthread_join(th[t], NULL);
  for (int i = 0; i < 500 && atomic_load(&m.received) < NKEYS; i++) {
    struct timespec ts = {0, 10000000};
    nanosleep(&ts, NULL);
  }
  ck_assert_int_eq(atomic_load(&m.received), NKEYS);
  ck_assert_int_eq(atomic_load(&m.bad), 0);
  for (int key = 0; key < NKEYS; key++) {
    float want[KEYLEN], out[KEYLEN];
    many_value(key, want);
    read_f32(m.got[key], out, KEYLEN);
    ck_assert_msg(memcmp(out, want, sizeof want) == 0, "key %d got the wrong value", key);
    floe_tensor_release(m.got[key]);
  }
  FloeRendezvousStats s;
  floe__rendezvous_stats(m.r, &s);
  ck_assert_int_eq(s.sends, NKEYS);
  ck_assert_int_eq(s.recvs, NKEYS);
  ck_assert_int_eq(s.by_reference, force ? 0 : NKEYS);
  floe__rendezvous_free(m.r);
  floe_runtime_free(rt);
}

START_TEST(many_keys_many_threads_by_reference) { many_keys(false); }
END_TEST
START_TEST(many_keys_many_threads_transport) { many_keys(true); }
END_TEST

/* ---- dead values, control edges, frames ------------------------------------------------ */

static void dead_and_control(bool force) {
  FloeRuntime *rt = runtime(true, false);
  FloeDevice *cpu = device(rt, "cpu:0");
  FloeRendezvous *r = rv_new(rt, 11, force, false);
  FloeStatus st = {FLOE_OK, NULL};
  FloeRendezvousKey kd = key_of(cpu, cpu, "switch:1", 0, 0);
  ck_assert_int_eq(floe__rendezvous_send(r, &kd, NULL, true, &st), FLOE_OK);
  Got g;
  got_init(&g);
  floe__rendezvous_recv(r, &kd, cpu, got_done, &g);
  got_wait(&g);
  ck_assert_msg(g.code == FLOE_OK, "%s", g.msg);
  ck_assert(g.dead);
  ck_assert_ptr_null(g.t);
  got_clear(&g);

  FloeRendezvousKey kc = key_of(cpu, cpu, "^init", 0, 0);
  got_init(&g);
  floe__rendezvous_recv(r, &kc, cpu, got_done, &g);
  ck_assert_int_eq(floe__rendezvous_send(r, &kc, NULL, false, &st), FLOE_OK);
  got_wait(&g);
  ck_assert_msg(g.code == FLOE_OK, "%s", g.msg);
  ck_assert(!g.dead);
  ck_assert_ptr_nonnull(g.t);
  ck_assert_int_eq(g.t->num_elements, 0);
  ck_assert_uint_eq(g.t->nbytes, 0);
  got_clear(&g);

  /* A control edge carries nothing: a value on it is a caller's mistake. */
  const float v[1] = {1};
  FloeTensor *x = vec(v, 1);
  FloeRendezvousKey kc2 = key_of(cpu, cpu, "^other", 0, 0);
  ck_assert_int_eq(floe__rendezvous_send(r, &kc2, x, false, &st), FLOE_INVALID_ARGUMENT);
  assert_contains(floe_status_message(&st), "^other");
  assert_contains(floe_status_message(&st), "empty tensor");
  floe_status_clear(&st);
  /* A data edge needs a tensor unless the value is dead. */
  FloeRendezvousKey kn = key_of(cpu, cpu, "n:0", 0, 0);
  ck_assert_int_eq(floe__rendezvous_send(r, &kn, NULL, false, &st), FLOE_INVALID_ARGUMENT);
  assert_contains(floe_status_message(&st), "n:0");
  floe_status_clear(&st);
  floe_tensor_release(x);
  floe__rendezvous_free(r);
  floe_runtime_free(rt);
}

START_TEST(dead_and_control_by_reference) { dead_and_control(false); }
END_TEST
START_TEST(dead_and_control_transport) { dead_and_control(true); }
END_TEST

/* One tensor name in three (frame, iteration) places: three transfers. */
static void frames(bool force) {
  FloeRuntime *rt = runtime(true, false);
  FloeDevice *cpu = device(rt, "cpu:0");
  FloeRendezvous *r = rv_new(rt, 5, force, false);
  const struct {
    uint64_t frame;
    int64_t iter;
  } at[3] = {{0, 0}, {0x77, 0}, {0x77, 1}};
  FloeStatus st = {FLOE_OK, NULL};
  for (int i = 0; i < 3; i++) {
    float v = (float)(i + 1);
    FloeTensor *x = vec(&v, 1);
    FloeRendezvousKey k = key_of(cpu, cpu, "body/add:0", at[i].frame, at[i].iter);
    ck_assert_msg(floe__rendezvous_send(r, &k, x, false, &st) == FLOE_OK, "%s",
                  floe_status_message(&st));
    floe_tensor_release(x);
  }
  for (int i = 2; i >= 0; i--) {
    FloeRendezvousKey k = key_of(cpu, cpu, "body/add:0", at[i].frame, at[i].iter);
    Got g;
    got_init(&g);
    floe__rendezvous_recv(r, &k, cpu, got_done, &g);
    got_wait(&g);
    ck_assert_msg(g.code == FLOE_OK, "%s", g.msg);
    float out;
    read_f32(g.t, &out, 1);
    ck_assert_float_eq(out, (float)(i + 1));
    got_clear(&g);
  }
  floe__rendezvous_free(r);
  floe_runtime_free(rt);
}

START_TEST(frames_and_iterations_by_reference) { frames(false); }
END_TEST
START_TEST(frames_and_iterations_transport) { frames(true); }
END_TEST

/* ---- abort, duplicates, free with pending ---------------------------------------------- */

static void abort_case(bool force) {
  FloeRuntime *rt = runtime(true, false);
  FloeDevice *cpu = device(rt, "cpu:0");
  FloeRendezvous *r = rv_new(rt, 9, force, false);
  FloeRendezvousKey k1 = key_of(cpu, cpu, "a:0", 0, 0), k2 = key_of(cpu, cpu, "b:0", 0, 0);
  Got pending, later;
  got_init(&pending);
  got_init(&later);
  floe__rendezvous_recv(r, &k1, cpu, got_done, &pending);
  ck_assert_int_eq(floe__rendezvous_num_pending(r), 1);
  floe__rendezvous_abort(r, FLOE_CANCELLED, "node 'mm' failed: out of cheese");
  floe__rendezvous_abort(r, FLOE_INTERNAL, "a second abort"); /* the first wins */
  got_wait(&pending);
  ck_assert_int_eq(pending.code, FLOE_CANCELLED);
  ck_assert_str_eq(pending.msg, "node 'mm' failed: out of cheese");
  ck_assert_ptr_null(pending.t);
  floe__rendezvous_recv(r, &k2, cpu, got_done, &later);
  ck_assert_int_eq(later.calls, 1); /* at once */
  ck_assert_int_eq(later.code, FLOE_CANCELLED);
  ck_assert_str_eq(later.msg, "node 'mm' failed: out of cheese");
  /* A Send after the abort is dropped. */
  const float v[1] = {3};
  FloeTensor *x = vec(v, 1);
  FloeStatus st = {FLOE_OK, NULL};
  ck_assert_int_eq(floe__rendezvous_send(r, &k1, x, false, &st), FLOE_OK);
  FloeRendezvousStats s;
  floe__rendezvous_stats(r, &s);
  ck_assert_int_eq(s.sends, 0);
  ck_assert_int_eq(s.recvs, 0);
  ck_assert_int_eq(floe__rendezvous_num_pending(r), 0);
  floe__rendezvous_free(r);
  floe_tensor_release(x);
  got_clear(&pending);
  got_clear(&later);
  floe_runtime_free(rt);
}

START_TEST(abort_by_reference) { abort_case(false); }
END_TEST
START_TEST(abort_transport) { abort_case(true); }
END_TEST

/* Abort racing with transfers in flight: each Recv's done runs exactly once, with either its
 * value or the abort's status (run under TSan: the cancel / complete race). */
enum { RACE_KEYS = 64 };

typedef struct Race {
  FloeRendezvous *r;
  FloeDevice *cpu;
  atomic_int calls[RACE_KEYS];
  atomic_int ok, aborted, wrong;
  atomic_int sent;
} Race;

typedef struct RaceArg {
  Race *race;
  int key;
} RaceArg;

static void race_done(void *arg, const FloeStatus *st, FloeTensor *t, bool dead) {
  RaceArg *a = arg;
  atomic_fetch_add(&a->race->calls[a->key], 1);
  if (st->code == FLOE_OK && t && !dead) {
    float v;
    read_f32(t, &v, 1);
    atomic_fetch_add(v == (float)a->key ? &a->race->ok : &a->race->wrong, 1);
  } else if (st->code == FLOE_ABORTED && strcmp(floe_status_message(st), "stop") == 0) {
    atomic_fetch_add(&a->race->aborted, 1);
  } else {
    atomic_fetch_add(&a->race->wrong, 1);
  }
  floe_tensor_release(t);
}

static void *race_sender(void *arg) {
  Race *race = arg;
  for (int i = 0; i < RACE_KEYS; i++) {
    char name[16];
    snprintf(name, sizeof name, "r%d:0", i);
    FloeRendezvousKey k = key_of(race->cpu, race->cpu, name, 0, 0);
    float v = (float)i;
    FloeTensor *x = vec(&v, 1);
    FloeStatus st = {FLOE_OK, NULL};
    floe__rendezvous_send(race->r, &k, x, false, &st); /* OK, or dropped after the abort */
    floe_status_clear(&st);
    floe_tensor_release(x);
    atomic_fetch_add(&race->sent, 1);
  }
  return NULL;
}

static void *race_aborter(void *arg) {
  Race *race = arg;
  while (atomic_load(&race->sent) < RACE_KEYS / 2) sched_yield(); /* mid-way */
  floe__rendezvous_abort(race->r, FLOE_ABORTED, "stop");
  return NULL;
}

START_TEST(abort_races_with_transfers) {
  FloeRuntime *rt = runtime(true, false);
  static Race race;
  static RaceArg args[RACE_KEYS];
  for (int round = 0; round < 4; round++) {
    memset(&race, 0, sizeof race);
    race.cpu = device(rt, "cpu:0");
    race.r = rv_new(rt, 100 + round, round % 2 == 0, false);
    for (int i = 0; i < RACE_KEYS; i++) {
      char name[16];
      snprintf(name, sizeof name, "r%d:0", i);
      FloeRendezvousKey k = key_of(race.cpu, race.cpu, name, 0, 0);
      args[i] = (RaceArg){&race, i};
      floe__rendezvous_recv(race.r, &k, race.cpu, race_done, &args[i]);
    }
    pthread_t s, a;
    ck_assert_int_eq(pthread_create(&s, NULL, race_sender, &race), 0);
    ck_assert_int_eq(pthread_create(&a, NULL, race_aborter, &race), 0);
    pthread_join(s, NULL);
    pthread_join(a, NULL);
    floe__rendezvous_free(race.r); /* waits for every done */
    for (int i = 0; i < RACE_KEYS; i++)
      ck_assert_msg(atomic_load(&race.calls[i]) == 1, "round %d key %d: done ran %d times",
                    round, i, atomic_load(&race.calls[i]));
    ck_assert_int_eq(atomic_load(&race.wrong), 0);
    ck_assert_int_eq(atomic_load(&race.ok) + atomic_load(&race.aborted), RACE_KEYS);
    if (getenv("RACE_DEBUG"))
      fprintf(stderr, "round %d: ok %d aborted %d\n", round, atomic_load(&race.ok),
              atomic_load(&race.aborted));
  }
  floe_runtime_free(rt);
}
END_TEST

/* A peer that hangs in the middle of a value: the transport has matched the Recv's message
 * and can no longer withdraw the receive (floe-transport-stall.so: cancel answers
 * UNAVAILABLE; a split value's payload never arrives). An abort still ends every Recv at
 * once with its status, free returns, and the transfers left behind end when the runtime
 * closes the comm. Two Recvs: one whose message never came (waiting on the header) and one
 * whose header came and whose payload is stuck. */
START_TEST(abort_does_not_wait_for_a_stalled_peer) {
  char path[2 * PATH_MAX];
  snprintf(path, sizeof path, "%s:%s", env_dir("FLOE_PLUGIN_PATH"), env_dir("FLOE_STALL_DIR"));
  FloeRuntime *rt = runtime_on(path);
  FloeStatus st = {FLOE_OK, NULL};
  setenv("FLOE_TRANSPORT", "stall", 1); /* read when the manager starts: the first Send */
  FloeDevice *cpu = device(rt, "cpu:0");
  FloeRendezvous *r = rv_new(rt, 11, true, false);
  FloeRendezvousKey nothing = key_of(cpu, cpu, "never:0", 0, 0);
  FloeRendezvousKey half = key_of(cpu, cpu, "half:0", 0, 0);
  Got g1, g2;
  got_init(&g1);
  got_init(&g2);
  enum { BIG = 3 * FLOE__RV_MESSAGE_MAX / 4 }; /* f32s: a split value */
  float *v = calloc(BIG, sizeof *v);
  ck_assert_ptr_nonnull(v);
  FloeTensor *x = vec(v, BIG);
  free(v);
  ck_assert_msg(floe__rendezvous_send(r, &half, x, false, &st) == FLOE_OK, "%s",
                floe_status_message(&st));
  floe_tensor_release(x);
  floe__rendezvous_recv(r, &nothing, cpu, got_done, &g1);
  floe__rendezvous_recv(r, &half, cpu, got_done, &g2);
  ck_assert_int_eq(floe__rendezvous_num_pending(r), 2);
  /* The header of half arrives (the manager polls it), then its payload stalls: neither
   * Recv ends on its own. */
  struct timespec ts = {0, 300 * 1000000};
  nanosleep(&ts, NULL);
  ck_assert_int_eq(g1.calls + g2.calls, 0);
  ck_assert_int_eq(floe__rendezvous_num_pending(r), 2);
  floe__rendezvous_abort(r, FLOE_UNAVAILABLE, "/job:worker/task:1 sent no heartbeat");
  ck_assert_int_eq(g1.calls, 1); /* at once, on this thread */
  ck_assert_int_eq(g2.calls, 1);
  ck_assert_int_eq(g1.code, FLOE_UNAVAILABLE);
  ck_assert_int_eq(g2.code, FLOE_UNAVAILABLE);
  ck_assert_str_eq(g2.msg, "/job:worker/task:1 sent no heartbeat");
  ck_assert_ptr_null(g2.t);
  ck_assert_int_eq(floe__rendezvous_num_pending(r), 0);
  floe__rendezvous_free(r); /* returns: nothing it waits for is left */
  floe_runtime_free(rt);    /* closes the comm: the stuck receives end there */
  unsetenv("FLOE_TRANSPORT");
  ck_assert_int_eq(g1.calls, 1);
  ck_assert_int_eq(g2.calls, 1);
  got_clear(&g1);
  got_clear(&g2);
}
END_TEST

START_TEST(duplicate_send_and_recv) {
  FloeRuntime *rt = runtime(true, false);
  FloeDevice *cpu = device(rt, "cpu:0");
  for (int force = 0; force < 2; force++) {
    FloeRendezvous *r = rv_new(rt, 2, force, false);
    FloeRendezvousKey k = key_of(cpu, cpu, "dup:0", 0, 4);
    const float v[1] = {1};
    FloeTensor *x = vec(v, 1);
    FloeStatus st = {FLOE_OK, NULL};
    ck_assert_int_eq(floe__rendezvous_send(r, &k, x, false, &st), FLOE_OK);
    ck_assert_int_eq(floe__rendezvous_send(r, &k, x, false, &st), FLOE_ALREADY_EXISTS);
    char *ks = floe__rendezvous_key_string(&k);
    assert_contains(floe_status_message(&st), ks);
    floe_status_clear(&st);
    Got g1, g2;
    got_init(&g1);
    got_init(&g2);
    floe__rendezvous_recv(r, &k, cpu, got_done, &g1);
    floe__rendezvous_recv(r, &k, cpu, got_done, &g2);
    got_wait(&g1);
    got_wait(&g2);
    ck_assert_msg(g1.code == FLOE_OK, "%s", g1.msg);
    ck_assert_int_eq(g2.code, FLOE_ALREADY_EXISTS);
    assert_contains(g2.msg, ks);
    floe__free(ks);
    floe__rendezvous_free(r);
    floe_tensor_release(x);
    got_clear(&g1);
    got_clear(&g2);
  }
  floe_runtime_free(rt);
}
END_TEST

/* Freeing the table fails a Recv still waiting (done runs before free returns) and drains
 * a transported value nobody received. */
START_TEST(free_fails_pending_and_drains) {
  FloeRuntime *rt = runtime(true, false);
  FloeDevice *cpu = device(rt, "cpu:0");
  for (int force = 0; force < 2; force++) {
    FloeRendezvous *r = rv_new(rt, 4, force, false);
    FloeRendezvousKey kw = key_of(cpu, cpu, "waits:0", 0, 0), ks = key_of(cpu, cpu, "sent:0", 0, 0);
    Got g;
    got_init(&g);
    floe__rendezvous_recv(r, &kw, cpu, got_done, &g);
    const float v[3] = {1, 2, 3};
    FloeTensor *x = vec(v, 3);
    FloeStatus st = {FLOE_OK, NULL};
    ck_assert_int_eq(floe__rendezvous_send(r, &ks, x, false, &st), FLOE_OK);
    floe_tensor_release(x);
    floe__rendezvous_free(r);
    ck_assert_int_eq(g.calls, 1);
    ck_assert_int_eq(g.code, FLOE_CANCELLED);
    assert_contains(g.msg, "freed");
    got_clear(&g);
  }
  floe_runtime_free(rt); /* valgrind: the drained message and the table leave nothing */
}
END_TEST

/* ---- bf16 ------------------------------------------------------------------------------ */

/* Round to the nearer of the two bf16 neighbours by distance in double; ties to the even
 * one. Independent of the core's integer trick. */
static float ref_bf16(float f) {
  if (isnan(f) || isinf(f) || f == 0) return f;
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  uint32_t lo_bits = u & 0xffff0000u;
  float lo, hi;
  memcpy(&lo, &lo_bits, sizeof lo);
  uint32_t hi_bits = lo_bits + 0x10000u; /* next bf16 away from zero (may be infinity) */
  memcpy(&hi, &hi_bits, sizeof hi);
  double dl = fabs((double)f - (double)lo), dh = fabs((double)hi - (double)f);
  if (isinf(hi)) dh = fabs(ldexp(1.0, 128) * (f < 0 ? -1 : 1) - (double)f); /* IEEE's rule */
  if (dl < dh) return lo;
  if (dh < dl) return hi;
  return ((lo_bits >> 16) & 1) ? hi : lo;
}

static void bf16_case(bool force) {
  FloeRuntime *rt = runtime(true, false);
  FloeDevice *cpu = device(rt, "cpu:0");
  FloeRendezvous *r = rv_new(rt, 6, force, true);
  enum { N = FLOE__RV_BF16_MIN }; /* the smallest tensor that is compressed */
  static float v[N] = {1.0f, 1.0f + 0x1p-8f /* tie: to even (1) */, 1.0f + 0x3p-8f /* tie: up */,
                -1.0f - 0x1p-9f, 3.14159265f, -0.0f, 0x1p-130f /* subnormal */, 3.4e38f,
                INFINITY, -INFINITY, NAN, 65504.0f, 1e-3f};
  unsigned seed = 99;
  for (int i = 13; i < N; i++) v[i] = ((float)rand_r(&seed) / (float)RAND_MAX - 0.5f) * 1e4f;
  FloeTensor *x = vec(v, N);
  FloeRendezvousKey k = key_of(cpu, cpu, "h:0", 0, 0);
  FloeStatus st = {FLOE_OK, NULL};
  ck_assert_int_eq(floe__rendezvous_send(r, &k, x, false, &st), FLOE_OK);
  Got g;
  got_init(&g);
  floe__rendezvous_recv(r, &k, cpu, got_done, &g);
  got_wait(&g);
  ck_assert_msg(g.code == FLOE_OK, "%s", g.msg);
  static float out[N];
  read_f32(g.t, out, N);
  for (int i = 0; i < N; i++) {
    float want = ref_bf16(v[i]);
    if (isnan(v[i]))
      ck_assert_msg(isnan(out[i]), "element %d: NaN became %g", i, out[i]);
    else
      ck_assert_msg(memcmp(&out[i], &want, sizeof want) == 0, "element %d: %a -> %a, want %a", i,
                    v[i], out[i], want);
  }
  ck_assert_float_eq(out[1], 1.0f);
  ck_assert_float_eq(out[2], 1.0f + 0x4p-8f);
  ck_assert(signbit(out[5]));
  /* the sender's tensor is untouched */
  ck_assert_mem_eq(floe_tensor_data(x), v, sizeof v);
  FloeRendezvousStats s;
  floe__rendezvous_stats(r, &s);
  if (force) {
    ck_assert_int_eq(s.tensor_bytes, N * 4);
    ck_assert_int_eq(s.wire_bytes, N * 2);
  }
  ck_assert_int_eq(s.by_reference, 0); /* a new tensor of rounded values */
  /* A tensor smaller than that travels whole: small values are often exact constants. */
  const float small[3] = {0.999f, 1.0f + 0x1p-9f, 3.14159265f};
  FloeTensor *xs = vec(small, 3);
  FloeRendezvousKey ks = key_of(cpu, cpu, "s:0", 0, 0);
  ck_assert_int_eq(floe__rendezvous_send(r, &ks, xs, false, &st), FLOE_OK);
  Got gs;
  got_init(&gs);
  floe__rendezvous_recv(r, &ks, cpu, got_done, &gs);
  got_wait(&gs);
  ck_assert_msg(gs.code == FLOE_OK, "%s", gs.msg);
  float sout[3];
  read_f32(gs.t, sout, 3);
  ck_assert_mem_eq(sout, small, sizeof small);
  floe_tensor_release(xs);
  got_clear(&gs);
  /* Other dtypes travel as they are. */
  int64_t n3 = 3;
  const int32_t iv[3] = {70000, -1, 123456789};
  FloeTensor *xi = floe_tensor_from_data(FLOE_I32, 1, &n3, iv, sizeof iv, &st);
  FloeRendezvousKey ki = key_of(cpu, cpu, "i:0", 0, 0);
  ck_assert_int_eq(floe__rendezvous_send(r, &ki, xi, false, &st), FLOE_OK);
  Got gi;
  got_init(&gi);
  floe__rendezvous_recv(r, &ki, cpu, got_done, &gi);
  got_wait(&gi);
  ck_assert_msg(gi.code == FLOE_OK, "%s", gi.msg);
  ck_assert_int_eq(gi.t->dtype, FLOE_I32);
  ck_assert_mem_eq(floe_tensor_data(gi.t), iv, sizeof iv);
  floe__rendezvous_free(r);
  floe_tensor_release(x);
  floe_tensor_release(xi);
  got_clear(&g);
  got_clear(&gi);
  floe_runtime_free(rt);
}

START_TEST(bf16_by_reference) { bf16_case(false); }
END_TEST
START_TEST(bf16_transport) { bf16_case(true); }
END_TEST

/* ---- the test device ------------------------------------------------------------------- */

/* "... N live blocks, M memory errors" from the device's own get_props. */
static void testdev_counts(FloeDevice *d, long *live, long *errors) {
  FloeDeviceProps p;
  memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  ck_assert_int_eq(d->fns.get_props(d->fns.state, &p), FLOE_OK);
  const char *s = strstr(p.description, "): ");
  ck_assert_msg(s && sscanf(s, "): %ld live blocks, %ld memory errors", live, errors) == 2,
                "description: %s", p.description);
}

/* Moves v from `from` to `to` (values staged on `from` first when it is a device). */
static void device_hop(FloeRuntime *rt, FloeRendezvous *r, FloeDevice *from, FloeDevice *to,
                       const char *name, const float *v, int64_t n) {
  FloeStatus st = {FLOE_OK, NULL};
  FloeTensor *h = vec(v, n);
  FloeTensor *x = floe__tensor_to_device(h, from, &st);
  ck_assert_msg(x != NULL, "%s", floe_status_message(&st));
  ck_assert_ptr_eq(floe__tensor_device(x), from->host_memory ? floe__tensor_device(x) : from);
  FloeRendezvousKey k = key_of(from, to, name, 0, 0);
  ck_assert_msg(floe__rendezvous_send(r, &k, x, false, &st) == FLOE_OK, "%s",
                floe_status_message(&st));
  Got g;
  got_init(&g);
  floe__rendezvous_recv(r, &k, to, got_done, &g);
  got_wait(&g);
  ck_assert_msg(g.code == FLOE_OK, "%s -> %s: %s", from->short_name, to->short_name, g.msg);
  if (!to->host_memory) {
    ck_assert_ptr_eq(floe__tensor_device(g.t), to);
    ck_assert_ptr_null(floe_tensor_data(g.t)); /* the host cannot read it directly */
  }
  float out[16];
  read_f32(g.t, out, n);
  ck_assert_mem_eq(out, v, (size_t)n * sizeof *v);
  floe_tensor_release(x);
  floe_tensor_release(h);
  got_clear(&g);
  (void)rt;
}

START_TEST(transfers_to_and_from_testdev) {
  FloeRuntime *rt = runtime(true, true);
  FloeDevice *cpu = device(rt, "cpu:0"), *t0 = device(rt, "testdev:0");
  FloeDevice *t1 = device(rt, "testdev:1");
  ck_assert(!t0->host_memory);
  FloeRendezvous *r = rv_new(rt, 21, false, false);
  const float v[7] = {0.5f, -1, 2, 1e30f, -1e-30f, 7, 8};
  device_hop(rt, r, cpu, t0, "to_dev:0", v, 7);
  device_hop(rt, r, t0, cpu, "from_dev:0", v, 7);
  device_hop(rt, r, t0, t1, "across:0", v, 7);
  device_hop(rt, r, t1, t1, "same:0", v, 7); /* one device: by reference */
  FloeRendezvousStats s;
  floe__rendezvous_stats(r, &s);
  ck_assert_int_eq(s.sends, 4);
  ck_assert_int_eq(s.by_reference, 1); /* only testdev:1 -> testdev:1 */
  ck_assert_int_eq(s.wire_bytes, 3 * 28);
  floe__rendezvous_free(r);
  /* bf16 from a device: staged through the host, rounded, expanded on arrival. */
  r = rv_new(rt, 22, false, true);
  enum { W = FLOE__RV_BF16_MIN };
  static float w[W];
  const float wr[3] = {1.0f, 1.0f + 0x4p-8f, -2.5f};
  w[0] = 1.0f + 0x1p-8f, w[1] = 1.0f + 0x3p-8f, w[2] = -2.5f; /* the rest: 0, exact */
  FloeStatus st = {FLOE_OK, NULL};
  FloeTensor *h = vec(w, W), *x = floe__tensor_to_device(h, t0, &st);
  FloeRendezvousKey k = key_of(t0, t1, "bf:0", 0, 0);
  ck_assert_int_eq(floe__rendezvous_send(r, &k, x, false, &st), FLOE_OK);
  Got g;
  got_init(&g);
  floe__rendezvous_recv(r, &k, t1, got_done, &g);
  got_wait(&g);
  ck_assert_msg(g.code == FLOE_OK, "%s", g.msg);
  static float out[W];
  read_f32(g.t, out, W);
  ck_assert_mem_eq(out, wr, sizeof wr);
  floe__rendezvous_stats(r, &s);
  ck_assert_int_eq(s.wire_bytes, 2 * W);
  ck_assert_int_eq(s.tensor_bytes, 4 * W);
  got_clear(&g);
  floe_tensor_release(x);
  floe_tensor_release(h);
  floe__rendezvous_free(r);
  long live, errors;
  for (int i = 0; i < 2; i++) {
    testdev_counts(i ? t1 : t0, &live, &errors);
    ck_assert_int_eq(errors, 0);
    ck_assert_int_eq(live, 0); /* every device buffer was returned */
  }
  floe_runtime_free(rt);
}
END_TEST

/* The test device catches what it promises to: a double free and a host pointer. */
START_TEST(testdev_catches_misuse) {
  FloeRuntime *rt = runtime(false, true);
  FloeDevice *d = device(rt, "testdev:0");
  void *p = NULL;
  FloeStatus st = {FLOE_OK, NULL};
  ck_assert_int_eq(floe__device_alloc(d, 100, &p, &st), FLOE_OK);
  long live, errors;
  testdev_counts(d, &live, &errors);
  ck_assert_int_eq(live, 1);
  char host_buf[16] = {0};
  ck_assert_int_ne(d->fns.copy_d2h(d->fns.state, host_buf, host_buf, 16), FLOE_OK);
  floe__device_free(d, p, 100);
  floe__device_free(d, p, 100); /* double free: caught, not done */
  testdev_counts(d, &live, &errors);
  ck_assert_int_eq(live, 0);
  ck_assert_int_eq(errors, 2);
  /* capacity: 1 GiB by default */
  ck_assert_int_eq(floe__device_alloc(d, (size_t)2 << 30, &p, &st), FLOE_RESOURCE_EXHAUSTED);
  assert_contains(floe_status_message(&st), "testdev:0");
  floe_status_clear(&st);
  floe_runtime_free(rt);
}
END_TEST

/* ---- the test device's kernels against the CPU's --------------------------------------- */

/* Runs op on `dev` with the given inputs fed through placeholders; the flags set the bool
 * attributes named in bools (NULL-terminated). Returns the code; *out (host copy) on success. */
static floe_code run_on(FloeRuntime *rt, const char *dev, const char *op, FloeTensor *const *in,
                        int n, const char *const *bools, FloeTensor **out, FloeStatus *st) {
  FloeGraph *g = floe_graph_new();
  FloeOutput ph[4];
  char names[4][8];
  FloeFeed feeds[4];
  for (int i = 0; i < n; i++) {
    snprintf(names[i], sizeof names[i], "in%d", i);
    ph[i] = floe_placeholder(g, names[i], floe_tensor_dtype(in[i]), floe_tensor_shape(in[i]));
    feeds[i] = (FloeFeed){names[i], in[i]};
  }
  FloeNodeBuilder *b = floe_node_begin(g, op, "op");
  for (int i = 0; i < n; i++) floe_node_add_input(b, ph[i]);
  for (int i = 0; bools && bools[i]; i++) floe_node_set_attr_bool(b, bools[i], 1);
  floe_node_set_device(b, dev);
  floe_node_finish(b);
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  FloeSessionOptions o;
  floe_session_options_init(&o);
  o.runtime = rt;
  FloeSession *sess = floe_session_new(g, &o, st);
  floe_graph_free(g);
  ck_assert_msg(sess != NULL, "%s", floe_status_message(st));
  const char *fetch = "op:0";
  FloeTensor *y = NULL;
  floe_code rc = floe_session_run(sess, feeds, n, &fetch, 1, NULL, 0, &y, st);
  if (rc == FLOE_OK) {
    *out = floe__tensor_to_device(y, NULL, st);
    ck_assert_ptr_nonnull(*out);
    floe_tensor_release(y);
  }
  floe_session_free(sess);
  return rc;
}

static FloeTensor *rand_f32(int rank, const int64_t *dims, unsigned seed) {
  FloeStatus st = {FLOE_OK, NULL};
  FloeTensor *t = floe_tensor_new(FLOE_F32, rank, dims, &st);
  ck_assert_ptr_nonnull(t);
  float *p = floe_tensor_data(t);
  for (int64_t i = 0; i < floe_tensor_num_elements(t); i++)
    p[i] = (float)rand_r(&seed) / (float)RAND_MAX * 4 - 2;
  return t;
}

/* Same op, same inputs on cpu:0 and testdev:0: equal shapes, values within 1e-5. */
static void same_as_cpu(FloeRuntime *rt, const char *op, FloeTensor *const *in, int n,
                        const char *const *bools, const char *what) {
  FloeStatus st = {FLOE_OK, NULL};
  FloeTensor *want = NULL, *got = NULL;
  ck_assert_msg(run_on(rt, "cpu:0", op, in, n, bools, &want, &st) == FLOE_OK, "%s on cpu: %s",
                what, floe_status_message(&st));
  ck_assert_msg(run_on(rt, "testdev:0", op, in, n, bools, &got, &st) == FLOE_OK,
                "%s on testdev: %s", what, floe_status_message(&st));
  ck_assert_int_eq(got->dtype, want->dtype);
  ck_assert_int_eq(got->rank, want->rank);
  for (int i = 0; i < want->rank; i++) ck_assert_int_eq(got->dims[i], want->dims[i]);
  if (want->dtype == FLOE_F32) {
    const float *a = floe_tensor_data(got), *b = floe_tensor_data(want);
    for (int64_t i = 0; i < want->num_elements; i++)
      ck_assert_msg(fabsf(a[i] - b[i]) <= 1e-5f * (1 + fabsf(b[i])), "%s: element %lld: %g vs %g",
                    what, (long long)i, a[i], b[i]);
  } else {
    ck_assert(floe__tensor_equal(got, want));
  }
  floe_tensor_release(want);
  floe_tensor_release(got);
}

START_TEST(testdev_kernels_match_the_cpu) {
  FloeRuntime *rt = runtime(false, true);
  const int64_t d34[2] = {3, 4}, d43[2] = {4, 3}, d45[2] = {4, 5}, d54[2] = {5, 4};
  const int64_t d1[1] = {1}, d234[3] = {2, 3, 4};
  FloeTensor *a = rand_f32(2, d34, 1), *b = rand_f32(2, d34, 2), *sc = rand_f32(0, NULL, 3);
  FloeTensor *one = rand_f32(1, d1, 4);
  const char *bin[3] = {"Add", "Sub", "Mul"};
  for (int i = 0; i < 3; i++) {
    FloeTensor *same[2] = {a, b}, *right[2] = {a, sc}, *left[2] = {one, b};
    same_as_cpu(rt, bin[i], same, 2, NULL, bin[i]);
    same_as_cpu(rt, bin[i], right, 2, NULL, "x op scalar");
    same_as_cpu(rt, bin[i], left, 2, NULL, "[1] op [3,4]");
  }
  same_as_cpu(rt, "Neg", &a, 1, NULL, "Neg");
  same_as_cpu(rt, "Relu", &a, 1, NULL, "Relu");
  same_as_cpu(rt, "Identity", &a, 1, NULL, "Identity f32");
  const int32_t iv[3] = {1, -2, 3};
  int64_t n3 = 3;
  FloeStatus st = {FLOE_OK, NULL};
  FloeTensor *ints = floe_tensor_from_data(FLOE_I32, 1, &n3, iv, sizeof iv, &st);
  same_as_cpu(rt, "Identity", &ints, 1, NULL, "Identity i32");

  FloeTensor *k45 = rand_f32(2, d45, 5), *k43 = rand_f32(2, d43, 6), *k54 = rand_f32(2, d54, 7);
  const char *ta[] = {"transpose_a", NULL}, *tb[] = {"transpose_b", NULL};
  const char *both[] = {"transpose_a", "transpose_b", NULL};
  FloeTensor *mm[2] = {a, k45}, *mta[2] = {k43, k45}, *mtb[2] = {a, k54}, *mab[2] = {k43, k54};
  same_as_cpu(rt, "MatMul", mm, 2, NULL, "MatMul");
  same_as_cpu(rt, "MatMul", mta, 2, ta, "MatMul transpose_a");
  same_as_cpu(rt, "MatMul", mtb, 2, tb, "MatMul transpose_b");
  same_as_cpu(rt, "MatMul", mab, 2, both, "MatMul both");

  FloeTensor *x = rand_f32(3, d234, 8);
  const int32_t ax1[1] = {1}, ax02[2] = {0, 2}, axm1 = -1;
  const int64_t ax_all[3] = {2, 0, 1};
  int64_t n1 = 1, n2 = 2;
  FloeTensor *axes[4] = {
      floe_tensor_from_data(FLOE_I32, 1, &n1, ax1, sizeof ax1, &st),
      floe_tensor_from_data(FLOE_I32, 1, &n2, ax02, sizeof ax02, &st),
      floe_tensor_from_data(FLOE_I32, 0, NULL, &axm1, sizeof axm1, &st),
      floe_tensor_from_data(FLOE_I64, 1, &n3, ax_all, sizeof ax_all, &st)};
  const char *keep[] = {"keep_dims", NULL};
  for (int i = 0; i < 4; i++) {
    FloeTensor *in[2] = {x, axes[i]};
    same_as_cpu(rt, "Sum", in, 2, NULL, "Sum");
    same_as_cpu(rt, "Sum", in, 2, keep, "Sum keep_dims");
    floe_tensor_release(axes[i]);
  }

  /* General broadcasting is refused, naming the shapes. */
  const int64_t d4[1] = {4};
  FloeTensor *row = rand_f32(1, d4, 9), *bc[2] = {a, row}, *y = NULL;
  ck_assert_int_eq(run_on(rt, "testdev:0", "Add", bc, 2, NULL, &y, &st), FLOE_UNIMPLEMENTED);
  assert_contains(floe_status_message(&st), "[3,4]");
  assert_contains(floe_status_message(&st), "[4]");
  assert_contains(floe_status_message(&st), "another device");
  floe_status_clear(&st);
  FloeTensor *all[] = {a, b, sc, one, ints, k45, k43, k54, x, row};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) floe_tensor_release(all[i]);
  long live, errors;
  testdev_counts(device(rt, "testdev:0"), &live, &errors);
  ck_assert_int_eq(errors, 0);
  floe_runtime_free(rt);
}
END_TEST

/* ---- malformed messages ---------------------------------------------------------------- */

static void put_le(unsigned char *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* A header written from the documented layout. */
static void make_header(unsigned char *h, uint32_t magic, uint16_t flags, uint32_t dtype,
                        uint32_t rank, const int64_t *dims, uint64_t payload) {
  memset(h, 0, 88);
  put_le(h, magic, 4);
  put_le(h + 4, 2, 2);
  put_le(h + 6, flags, 2);
  put_le(h + 8, dtype, 4);
  put_le(h + 12, rank, 4);
  for (uint32_t i = 0; i < rank; i++) put_le(h + 16 + 8 * i, (uint64_t)dims[i], 8);
  put_le(h + 80, payload, 8);
}

/* Buffers stay valid until the isends complete: static. The fourth message carries its
 * payload inline (no split flag) and so is longer than its header. */
static unsigned char raw_hdr[4][88 + 4];
static unsigned char raw_payload[64];

START_TEST(malformed_messages_fail_the_recv) {
  FloeRuntime *rt = runtime(true, false);
  FloeDevice *cpu = device(rt, "cpu:0");
  FloeRendezvous *r = rv_new(rt, 13, true, false);
  FloeStatus st = {FLOE_OK, NULL};
  FloeTransportMgr *m = floe__transport_mgr(rt, &st);
  ck_assert_msg(m != NULL, "%s", floe_status_message(&st));
  ck_assert_str_eq(floe__transport_name(m), want_transport());
  const int64_t two[1] = {2};
  const char *names[4] = {"big:0", "magic:0", "size:0", "inline:0"};
  const uint16_t split = 0x8;
  /* 1: the header announces f32 [2] (8 bytes) to follow; the payload holds 64 */
  make_header(raw_hdr[0], 0x31565246u, split, FLOE_F32, 1, two, 8);
  /* 2: not our magic */
  make_header(raw_hdr[1], 0xdeadbeefu, split, FLOE_F32, 1, two, 8);
  /* 3: a payload size that does not match the shape */
  make_header(raw_hdr[2], 0x31565246u, split, FLOE_F32, 1, two, 12);
  /* 4: one message announcing 8 payload bytes after the header, holding 4 */
  make_header(raw_hdr[3], 0x31565246u, 0, FLOE_F32, 1, two, 8);
  const char *expect[4] = {"64 bytes", "magic", "12 payload bytes", "holds 92 bytes"};
  for (int i = 0; i < 4; i++) {
    FloeRendezvousKey k = key_of(cpu, cpu, names[i], 0, 0);
    uint64_t tag = floe__rendezvous_tag(13, &k);
    ck_assert_int_eq(floe__transport_isend(m, raw_hdr[i], i == 3 ? 92 : 88, tag, NULL, NULL,
                                           &st), FLOE_OK);
    size_t plen = i == 0 ? 64 : 8;
    if (i < 3)
      ck_assert_int_eq(floe__transport_isend(m, raw_payload, plen, tag | 1, NULL, NULL, &st),
                       FLOE_OK);
    Got g;
    got_init(&g);
    floe__rendezvous_recv(r, &k, cpu, got_done, &g);
    got_wait(&g);
    ck_assert_int_eq(g.code, FLOE_DATA_LOSS);
    ck_assert_ptr_null(g.t);
    assert_contains(g.msg, names[i]);
    assert_contains(g.msg, expect[i]);
    if (i == 0) assert_contains(g.msg, "8 bytes");
    got_clear(&g);
  }
  floe__rendezvous_free(r); /* the unread payloads of 2 and 3 are left to the transport */
  floe_runtime_free(rt);
}
END_TEST

/* ---- the manager's tags ------------------------------------------------------------------ */

typedef struct XferDone {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int calls;
  floe_code code[4];
  size_t size[4];
} XferDone;

static void xfer_done(void *arg, floe_code code, size_t size) {
  XferDone *d = arg;
  pthread_mutex_lock(&d->mu);
  d->code[d->calls] = code;
  d->size[d->calls] = size;
  d->calls++;
  pthread_cond_signal(&d->cv);
  pthread_mutex_unlock(&d->mu);
}

/* Tags of 64 bits reach any transport: the manager clears the transport's reserved bit
 * (ABI 1.4) on both sides, and the completion comes without a missed wake-up's delay. */
START_TEST(manager_clears_the_reserved_tag_bit) {
  FloeRuntime *rt = runtime(true, false);
  FloeStatus st = {FLOE_OK, NULL};
  FloeTransportMgr *m = floe__transport_mgr(rt, &st);
  ck_assert_msg(m != NULL, "%s", floe_status_message(&st));
  XferDone d = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, {0}, {0}};
  const uint64_t tag = FLOE_TRANSPORT_TAG_RESERVED | 0x1234;
  char out[16] = {0};
  double fastest = 1e9;
  for (int round = 0; round < 3; round++) {
    memset(out, 0, sizeof out);
    d.calls = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ck_assert_int_eq(floe__transport_irecv(m, out, sizeof out, tag, xfer_done, &d, NULL, &st),
                     FLOE_OK);
    ck_assert_int_eq(floe__transport_isend(m, "top bit", 8, tag, xfer_done, &d, &st), FLOE_OK);
    pthread_mutex_lock(&d.mu);
    while (d.calls < 2) pthread_cond_wait(&d.cv, &d.mu);
    pthread_mutex_unlock(&d.mu);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ck_assert_int_eq(d.code[0], FLOE_OK);
    ck_assert_int_eq(d.code[1], FLOE_OK);
    ck_assert_str_eq(out, "top bit");
    double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) * 1e-6;
    if (ms < fastest) fastest = ms;
  }
  /* A progress thread that slept through a wake-up took 100 ms (its old safety timeout);
   * the fastest of three rounds leaves room for a loaded machine. */
  ck_assert_msg(fastest < 90, "the fastest loopback transfer took %.1f ms", fastest);
  floe_runtime_free(rt);
}
END_TEST

/* Two runtimes' managers joined by channels, as two tasks' are: A connects to B's address,
 * B accepts, messages go both ways on the channels (and A's loopback keeps working); a
 * closed channel fails its pending receive with CANCELLED and refuses posts; a bad address
 * and an accept nobody connects to are clean errors. */
static void wait_calls(XferDone *d, int n) {
  pthread_mutex_lock(&d->mu);
  while (d->calls < n) pthread_cond_wait(&d->cv, &d->mu);
  pthread_mutex_unlock(&d->mu);
}

START_TEST(manager_channels_between_two_runtimes) {
  FloeRuntime *ra = runtime(true, false), *rb = runtime(true, false);
  FloeStatus st = {FLOE_OK, NULL};
  FloeTransportMgr *a = floe__transport_mgr(ra, &st), *b = floe__transport_mgr(rb, &st);
  ck_assert_msg(a && b, "%s", floe_status_message(&st));
  unsigned char addr[FLOE_TRANSPORT_ADDR_MAX];
  size_t len = 1;
  ck_assert_int_eq(floe__transport_address(b, addr, &len), FLOE_OUT_OF_RANGE);
  ck_assert_uint_gt(len, 1);
  len = sizeof addr;
  ck_assert_int_eq(floe__transport_address(b, addr, &len), FLOE_OK);
  int a_to_b = floe__transport_connect(a, addr, len, &st);
  ck_assert_msg(a_to_b >= 1, "connect: %s", floe_status_message(&st));
  /* The first message may travel before B accepts: it waits at B as an unexpected one. */
  XferDone d = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, {0}, {0}};
  ck_assert_int_eq(floe__transport_isend_on(a, a_to_b, "to b", 5, 77, xfer_done, &d, &st),
                   FLOE_OK);
  int b_from_a = floe__transport_accept(b, 10000, &st);
  ck_assert_msg(b_from_a >= 1, "accept: %s", floe_status_message(&st));
  char got[16] = {0};
  ck_assert_int_eq(floe__transport_irecv_on(b, b_from_a, got, sizeof got, 77, xfer_done, &d,
                                            NULL, &st), FLOE_OK);
  wait_calls(&d, 2);
  ck_assert_int_eq(d.code[0], FLOE_OK);
  ck_assert_int_eq(d.code[1], FLOE_OK);
  ck_assert_str_eq(got, "to b");
  /* The other way: B connects to A. */
  len = sizeof addr;
  ck_assert_int_eq(floe__transport_address(a, addr, &len), FLOE_OK);
  int b_to_a = floe__transport_connect(b, addr, len, &st);
  ck_assert_msg(b_to_a >= 1, "connect: %s", floe_status_message(&st));
  d.calls = 0;
  ck_assert_int_eq(floe__transport_isend_on(b, b_to_a, "to a", 5, 78, xfer_done, &d, &st),
                   FLOE_OK);
  int a_from_b = floe__transport_accept(a, 10000, &st);
  ck_assert_msg(a_from_b >= 1, "accept: %s", floe_status_message(&st));
  memset(got, 0, sizeof got);
  ck_assert_int_eq(floe__transport_irecv_on(a, a_from_b, got, sizeof got, 78, xfer_done, &d,
                                            NULL, &st), FLOE_OK);
  wait_calls(&d, 2);
  ck_assert_str_eq(got, "to a");
  /* A's loopback (channel 0) is untouched by its channels. */
  d.calls = 0;
  memset(got, 0, sizeof got);
  ck_assert_int_eq(floe__transport_irecv(a, got, sizeof got, 78, xfer_done, &d, NULL, &st), FLOE_OK);
  ck_assert_int_eq(floe__transport_isend(a, "self", 5, 78, xfer_done, &d, &st), FLOE_OK);
  wait_calls(&d, 2);
  ck_assert_str_eq(got, "self");
  /* Closing a channel ends its pending receive and refuses later posts. */
  d.calls = 0;
  ck_assert_int_eq(floe__transport_irecv_on(b, b_from_a, got, sizeof got, 79, xfer_done, &d,
                                            NULL, &st), FLOE_OK);
  floe__transport_close_channel(b, b_from_a, true);
  wait_calls(&d, 1);
  ck_assert_int_eq(d.code[0], FLOE_CANCELLED);
  ck_assert_int_eq(floe__transport_irecv_on(b, b_from_a, got, sizeof got, 79, xfer_done, &d,
                                            NULL, &st), FLOE_FAILED_PRECONDITION);
  ck_assert_msg(strstr(floe_status_message(&st), "closed"), "%s", floe_status_message(&st));
  floe_status_clear(&st);
  ck_assert_int_eq(floe__transport_isend_on(a, 99, "x", 1, 1, xfer_done, &d, &st),
                   FLOE_FAILED_PRECONDITION);
  ck_assert_msg(strstr(floe_status_message(&st), "not open"), "%s", floe_status_message(&st));
  floe_status_clear(&st);
  /* Nobody else connects to A: accept ends at its deadline. */
  ck_assert_int_eq(floe__transport_accept(a, 50, &st), -1);
  ck_assert_int_eq(floe_status_code(&st), FLOE_DEADLINE_EXCEEDED);
  floe_status_clear(&st);
  ck_assert_int_eq(floe__transport_connect(a, addr, 0, &st), -1);
  ck_assert_int_eq(floe_status_code(&st), FLOE_INVALID_ARGUMENT);
  floe_status_clear(&st);
  floe_runtime_free(ra);
  floe_runtime_free(rb);
}
END_TEST

/* ---- routes: two runtimes as two tasks ----------------------------------------------------- */

/* A route as a data plane gives one: this task's job is 0, the other task's devices go on
 * the channels to and from it, any other job is gone. */
typedef struct TestRoute {
  const char *self_job, *peer_job;
  int send_chan, recv_chan;
} TestRoute;

static int test_route_channel(void *arg, const char *device, bool is_send, FloeStatus *st) {
  TestRoute *tr = arg;
  FloeDeviceName dn;
  ck_assert_int_eq(floe_device_name_parse(device, &dn, st), FLOE_OK);
  if (strcmp(dn.job, tr->self_job) == 0) return 0;
  if (strcmp(dn.job, tr->peer_job) == 0) return is_send ? tr->send_chan : tr->recv_chan;
  floe_status_set(st, FLOE_UNAVAILABLE, "/job:%s/task:0 is gone (the test's route)", dn.job);
  return -1;
}

static const char dev_a[] = "/job:a/replica:0/task:0/device:CPU:0";
static const char dev_b[] = "/job:b/replica:0/task:0/device:CPU:0";
static const char dev_c[] = "/job:c/replica:0/task:0/device:CPU:0";

static unsigned char route_byte(size_t i, size_t n, bool to_b) {
  return (unsigned char)(i * 131u + n * 7u + (to_b ? 1u : 2u));
}

static FloeTensor *u8_tensor(size_t n, bool to_b) {
  int64_t dims[1] = {(int64_t)n};
  FloeStatus st = {FLOE_OK, NULL};
  FloeTensor *t = floe__tensor_alloc(NULL, FLOE_U8, 1, dims, &st);
  ck_assert_msg(t != NULL, "%s", floe_status_message(&st));
  unsigned char *p = floe_tensor_data(t);
  for (size_t i = 0; i < n; i++) p[i] = route_byte(i, n, to_b);
  return t;
}

/* One value from one task's rendezvous to the other's, every byte checked. */
static void route_transfer(FloeRendezvous *from, FloeRendezvous *to, FloeDevice *dst,
                           bool to_b, size_t n, bool recv_first) {
  char name[64];
  snprintf(name, sizeof name, "v%zu_%d:0", n, to_b);
  FloeRendezvousKey k = {to_b ? dev_a : dev_b, 1, to_b ? dev_b : dev_a, name, 0, 0};
  FloeTensor *t = u8_tensor(n, to_b);
  FloeStatus st = {FLOE_OK, NULL};
  Got g;
  got_init(&g);
  if (recv_first) floe__rendezvous_recv(to, &k, dst, got_done, &g);
  ck_assert_msg(floe__rendezvous_send(from, &k, t, false, &st) == FLOE_OK, "%s",
                floe_status_message(&st));
  if (!recv_first) floe__rendezvous_recv(to, &k, dst, got_done, &g);
  got_wait(&g);
  ck_assert_msg(g.code == FLOE_OK, "%zu bytes %s: %s", n, to_b ? "a->b" : "b->a", g.msg);
  ck_assert_int_eq(g.t->dtype, FLOE_U8);
  ck_assert_int_eq(g.t->num_elements, (int64_t)n);
  const unsigned char *p = floe_tensor_data(g.t);
  for (size_t i = 0; i < n; i++)
    if (p[i] != route_byte(i, n, to_b))
      ck_abort_msg("%zu bytes %s: byte %zu is %u, not %u", n, to_b ? "a->b" : "b->a", i, p[i],
                   route_byte(i, n, to_b));
  got_clear(&g);
  floe_tensor_release(t);
}

/* The first message of a key as it arrives on a channel: its size and the header's flags. */
static void first_message(FloeTransportMgr *m, int chan, FloeRendezvous *from, size_t n,
                          size_t *size, unsigned *flags) {
  static unsigned char buf[16384];
  char name[64];
  snprintf(name, sizeof name, "raw%zu:0", n);
  FloeRendezvousKey k = {dev_a, 1, dev_b, name, 0, 0};
  FloeStatus st = {FLOE_OK, NULL};
  XferDone d = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, {0}, {0}};
  uint64_t tag = floe__rendezvous_tag(88, &k);
  ck_assert_int_eq(floe__transport_irecv_on(m, chan, buf, sizeof buf, tag, xfer_done, &d, NULL,
                                            &st), FLOE_OK);
  FloeTensor *t = u8_tensor(n, true);
  ck_assert_int_eq(floe__rendezvous_send(from, &k, t, false, &st), FLOE_OK);
  wait_calls(&d, 1);
  ck_assert_int_eq(d.code[0], FLOE_OK);
  *size = d.size[0];
  *flags = buf[6] | (unsigned)buf[7] << 8;
  if (*flags & 0x8) { /* split: take the payload too, so that nothing is left behind */
    unsigned char *rest = malloc(n);
    ck_assert_ptr_nonnull(rest);
    ck_assert_int_eq(floe__transport_irecv_on(m, chan, rest, n, tag | 1, xfer_done, &d, NULL,
                                              &st), FLOE_OK);
    wait_calls(&d, 2);
    ck_assert_int_eq(d.code[1], FLOE_OK);
    ck_assert_uint_eq(d.size[1], n);
    ck_assert_uint_eq(rest[n - 1], route_byte(n - 1, n, true));
    free(rest);
  }
  floe_tensor_release(t);
}

/* Two runtimes as tasks /job:a and /job:b, each with its own rendezvous of one step and a
 * route over their managers' channels: values both ways around the one-message limit and
 * at 4 MiB; a value of header + payload = 16 KiB is one message, one byte more is two; a
 * route's -1 fails the Send and the Recv; an abort cancels a Recv posted on a channel; a
 * channel closed under a pending Recv fails it with UNAVAILABLE naming the source. */
START_TEST(route_between_two_runtimes) {
  FloeRuntime *ra = runtime(true, false), *rb = runtime(true, false);
  FloeStatus st = {FLOE_OK, NULL};
  FloeTransportMgr *a = floe__transport_mgr(ra, &st), *b = floe__transport_mgr(rb, &st);
  ck_assert_msg(a && b, "%s", floe_status_message(&st));
  ck_assert_str_eq(floe__transport_name(a), want_transport());
  unsigned char addr[FLOE_TRANSPORT_ADDR_MAX];
  size_t len = sizeof addr;
  ck_assert_int_eq(floe__transport_address(b, addr, &len), FLOE_OK);
  TestRoute route_a = {"a", "b", -1, -1}, route_b = {"b", "a", -1, -1};
  route_a.send_chan = floe__transport_connect(a, addr, len, &st);
  ck_assert_msg(route_a.send_chan >= 1, "%s", floe_status_message(&st));
  route_b.recv_chan = floe__transport_accept(b, 10000, &st);
  ck_assert_msg(route_b.recv_chan >= 1, "%s", floe_status_message(&st));
  len = sizeof addr;
  ck_assert_int_eq(floe__transport_address(a, addr, &len), FLOE_OK);
  route_b.send_chan = floe__transport_connect(b, addr, len, &st);
  ck_assert_msg(route_b.send_chan >= 1, "%s", floe_status_message(&st));
  route_a.recv_chan = floe__transport_accept(a, 10000, &st);
  ck_assert_msg(route_a.recv_chan >= 1, "%s", floe_status_message(&st));
  FloeRendezvousRoute rta = {test_route_channel, &route_a, NULL};
  FloeRendezvousRoute rtb = {test_route_channel, &route_b, NULL};
  FloeRendezvousOptions oa = {false, false, &rta}, ob = {false, false, &rtb};
  FloeRendezvous *rva = floe__rendezvous_new(ra, 88, &oa, &st);
  FloeRendezvous *rvb = floe__rendezvous_new(rb, 88, &ob, &st);
  ck_assert_msg(rva && rvb, "%s", floe_status_message(&st));
  FloeDevice *cpu_a = device(ra, "cpu:0"), *cpu_b = device(rb, "cpu:0");

  const size_t sizes[] = {4, 16384 - 88, 16384 - 87, 16385, 4u << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    route_transfer(rva, rvb, cpu_b, true, sizes[i], i % 2 == 0);
    route_transfer(rvb, rva, i % 2 ? cpu_a : NULL, false, sizes[i], i % 2 == 1);
  }
  FloeRendezvousStats stats;
  floe__rendezvous_stats(rva, &stats);
  ck_assert_int_eq(stats.by_reference, 0);
  ck_assert_int_eq(stats.sends, 5);
  ck_assert_int_eq(stats.recvs, 5);

  /* On the wire: header + payload of 16 KiB is one message; one byte more sends the header
   * alone, flagged split (0x8), and the payload under tag | 1. */
  size_t size;
  unsigned flags;
  first_message(b, route_b.recv_chan, rva, 16384 - 88, &size, &flags);
  ck_assert_uint_eq(size, 16384);
  ck_assert_uint_eq(flags & 0x8, 0);
  first_message(b, route_b.recv_chan, rva, 16384 - 87, &size, &flags);
  ck_assert_uint_eq(size, 88);
  ck_assert_uint_eq(flags & 0x8, 0x8);

  /* A task the route does not have: the Send and the Recv fail with its status. */
  float one = 1;
  FloeTensor *x = vec(&one, 1);
  FloeRendezvousKey kc = {dev_a, 1, dev_c, "to_c:0", 0, 0};
  ck_assert_int_eq(floe__rendezvous_send(rva, &kc, x, false, &st), FLOE_UNAVAILABLE);
  assert_contains(floe_status_message(&st), "/job:c/task:0 is gone");
  assert_contains(floe_status_message(&st), "to_c:0");
  floe_status_clear(&st);
  Got g;
  got_init(&g);
  FloeRendezvousKey kc2 = {dev_c, 1, dev_a, "from_c:0", 0, 0};
  floe__rendezvous_recv(rva, &kc2, cpu_a, got_done, &g);
  got_wait(&g);
  ck_assert_int_eq(g.code, FLOE_UNAVAILABLE);
  assert_contains(g.msg, "/job:c/task:0 is gone");
  assert_contains(g.msg, "from_c:0");
  got_clear(&g);
  floe_tensor_release(x);

  /* An abort withdraws a Recv posted on a channel. */
  FloeRendezvous *rvb2 = floe__rendezvous_new(rb, 89, &ob, &st);
  ck_assert_ptr_nonnull(rvb2);
  FloeRendezvousKey kp = {dev_a, 1, dev_b, "pending:0", 0, 0};
  got_init(&g);
  floe__rendezvous_recv(rvb2, &kp, cpu_b, got_done, &g);
  ck_assert_int_eq(floe__rendezvous_num_pending(rvb2), 1);
  ck_assert_int_eq(g.calls, 0);
  floe__rendezvous_abort(rvb2, FLOE_ABORTED, "the test aborts the step");
  got_wait(&g);
  ck_assert_int_eq(g.code, FLOE_ABORTED);
  assert_contains(g.msg, "the test aborts the step");
  got_clear(&g);
  floe__rendezvous_free(rvb2);

  /* The channel from A closes under a pending Recv (A died): UNAVAILABLE naming A's device,
   * not a hang; a later Recv from A is refused the same way. */
  FloeRendezvousKey kl = {dev_a, 1, dev_b, "lost:0", 0, 0};
  got_init(&g);
  floe__rendezvous_recv(rvb, &kl, cpu_b, got_done, &g);
  ck_assert_int_eq(floe__rendezvous_num_pending(rvb), 1);
  floe__transport_close_channel(b, route_b.recv_chan, true);
  got_wait(&g);
  ck_assert_int_eq(g.code, FLOE_UNAVAILABLE);
  assert_contains(g.msg, dev_a);
  assert_contains(g.msg, "closed");
  assert_contains(g.msg, "lost:0");
  got_clear(&g);
  FloeRendezvousKey kl2 = {dev_a, 1, dev_b, "lost2:0", 0, 0};
  got_init(&g);
  floe__rendezvous_recv(rvb, &kl2, cpu_b, got_done, &g);
  got_wait(&g);
  ck_assert_int_eq(g.code, FLOE_UNAVAILABLE);
  assert_contains(g.msg, dev_a);
  got_clear(&g);

  floe__rendezvous_free(rva);
  floe__rendezvous_free(rvb);
  floe_runtime_free(ra);
  floe_runtime_free(rb);
}
END_TEST

/* ---- allocation failures --------------------------------------------------------------- */

/* SQLite-style walk: the Nth core allocation and every later one fail during a transfer
 * (rendezvous made, Send, Recv, free). Each N ends in a clean error reaching the Send or the
 * Recv's done, or in the right value; valgrind checks that nothing leaks. */
static void alloc_walk(bool force, bool to_device) {
  FloeRuntime *rt = runtime(true, true);
  FloeDevice *cpu = device(rt, "cpu:0"), *dst = to_device ? device(rt, "testdev:0") : cpu;
  FloeStatus st = {FLOE_OK, NULL};
  ck_assert_ptr_nonnull(floe__transport_mgr(rt, &st)); /* made once, outside the walk */
  const float v[4] = {1, 2, 3, 4};
  FloeTensor *x = vec(v, 4);
  FloeRendezvousKey k = key_of(cpu, dst, "w:0", 0, 0);
  long n;
  for (n = 1; n < 400; n++) {
    floe_test_fail_alloc_after(n);
    FloeRendezvousOptions o = {force, false, NULL};
    FloeRendezvous *r = floe__rendezvous_new(rt, n, &o, &st);
    if (!r) {
      floe_test_fail_alloc_after(0);
      ck_assert_int_eq(st.code, FLOE_NO_MEMORY);
      floe_status_clear(&st);
      continue;
    }
    floe_code src = floe__rendezvous_send(r, &k, x, false, &st);
    Got g;
    got_init(&g);
    floe__rendezvous_recv(r, &k, dst, got_done, &g);
    if (src == FLOE_OK) got_wait(&g);
    floe__rendezvous_free(r); /* fails the Recv if the Send could not post */
    floe_test_fail_alloc_after(0);
    ck_assert_int_eq(g.calls, 1);
    if (src != FLOE_OK) {
      ck_assert_msg(src == FLOE_NO_MEMORY, "N=%ld: send: %s", n, floe_status_message(&st));
      ck_assert(strlen(floe_status_message(&st)) > 0);
      floe_status_clear(&st);
      ck_assert_int_ne(g.code, FLOE_OK);
      got_clear(&g);
      continue;
    }
    if (g.code != FLOE_OK) {
      ck_assert_msg(g.code == FLOE_NO_MEMORY || g.code == FLOE_RESOURCE_EXHAUSTED,
                    "N=%ld: recv: %s", n, g.msg);
      got_clear(&g);
      continue;
    }
    float out[4];
    read_f32(g.t, out, 4);
    ck_assert_mem_eq(out, v, sizeof v);
    got_clear(&g);
    break;
  }
  ck_assert_msg(n > 1 && n < 400, "the walk ended at N=%ld", n);
  floe_tensor_release(x);
  floe_runtime_free(rt);
}

START_TEST(allocation_failures_by_reference) { alloc_walk(false, false); }
END_TEST
START_TEST(allocation_failures_transport) { alloc_walk(true, false); }
END_TEST
START_TEST(allocation_failures_to_testdev) { alloc_walk(false, true); }
END_TEST

/* ---- no transport ---------------------------------------------------------------------- */

START_TEST(no_transport_is_a_clear_error) {
  FloeRuntime *rt = runtime(false, true);
  FloeDevice *cpu = device(rt, "cpu:0"), *t0 = device(rt, "testdev:0");
  FloeRendezvous *r = rv_new(rt, 1, false, false);
  const float v[1] = {1};
  FloeTensor *x = vec(v, 1);
  FloeRendezvousKey k = key_of(cpu, t0, "x:0", 0, 0);
  FloeStatus st = {FLOE_OK, NULL};
  ck_assert_int_eq(floe__rendezvous_send(r, &k, x, false, &st), FLOE_UNAVAILABLE);
  assert_contains(floe_status_message(&st), "FLOE_PLUGIN_PATH");
  assert_contains(floe_status_message(&st), "FLOE_PLUGINS");
  assert_contains(floe_status_message(&st), "x:0");
  floe_status_clear(&st);
  Got g;
  got_init(&g);
  floe__rendezvous_recv(r, &k, t0, got_done, &g);
  ck_assert_int_eq(g.calls, 1);
  ck_assert_int_eq(g.code, FLOE_UNAVAILABLE);
  assert_contains(g.msg, "floe-transport-local.so");
  got_clear(&g);
  /* by reference still works without a transport */
  FloeRendezvousKey kc = key_of(cpu, cpu, "y:0", 0, 0);
  ck_assert_int_eq(floe__rendezvous_send(r, &kc, x, false, &st), FLOE_OK);
  floe__rendezvous_free(r);
  floe_tensor_release(x);
  floe_runtime_free(rt);
}
END_TEST

START_TEST(unknown_transport_name) {
  setenv("FLOE_TRANSPORT", "carrier-pigeon", 1);
  FloeRuntime *rt = runtime(true, false);
  FloeStatus st = {FLOE_OK, NULL};
  ck_assert_ptr_null(floe__transport_mgr(rt, &st));
  ck_assert_int_eq(st.code, FLOE_NOT_FOUND);
  assert_contains(floe_status_message(&st), "carrier-pigeon");
  assert_contains(floe_status_message(&st), "FLOE_TRANSPORT");
  assert_contains(floe_status_message(&st), "local");
  floe_status_clear(&st);
  unsetenv("FLOE_TRANSPORT");
  floe_runtime_free(rt);
}
END_TEST

/* ---- the local transport through its table alone --------------------------------------- */

static FloeTransportFns loc;
static int loc_registered;

static void fake_log(FloeLogLevel level, const char *fmt, ...) {
  (void)level;
  (void)fmt;
}
static floe_code fake_declare(FloePluginRegistrar *reg, const FloePluginInfo *info) {
  (void)reg;
  ck_assert_str_eq(info->name, "transport-local");
  return info->abi_major == FLOE_ABI_MAJOR ? FLOE_OK : FLOE_ABI_MISMATCH;
}
static floe_code fake_register_transport(FloePluginRegistrar *reg, const FloeTransportFns *t) {
  (void)reg;
  memcpy(&loc, t, sizeof loc);
  loc_registered++;
  return FLOE_OK;
}

/* Polls a request until done (at most 1 s). */
static floe_code wait_req(void *req, size_t *size) {
  for (int i = 0; i < 1000; i++) {
    int done = 0;
    floe_code rc = loc.test(req, &done, size);
    if (done) return rc;
    ck_assert_int_eq(rc, FLOE_OK);
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  ck_abort_msg("request never completed");
  return FLOE_INTERNAL;
}

static int fd_readable(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  return poll(&p, 1, 0);
}

START_TEST(local_transport_table_alone) {
  char so[PATH_MAX];
  snprintf(so, sizeof so, "%s/floe-transport-local.so", env_dir("FLOE_TRANSPORT_DIR"));
  void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
  ck_assert_msg(h != NULL, "%s", dlerror());
  FloePluginInitFn init = (FloePluginInitFn)dlsym(h, FLOE_PLUGIN_INIT_SYMBOL);
  ck_assert_ptr_nonnull(init);
  static FloeHostApi host;
  host.struct_size = sizeof host;
  host.abi_major = FLOE_ABI_MAJOR;
  host.abi_minor = FLOE_ABI_MINOR;
  host.log = fake_log;
  FloePluginRegistrar reg;
  memset(&reg, 0, sizeof reg);
  reg.struct_size = sizeof reg;
  reg.declare = fake_declare;
  reg.register_transport = fake_register_transport;
  ck_assert_int_eq(init(&host, &reg), FLOE_OK);
  ck_assert_int_eq(loc_registered, 1);
  ck_assert_str_eq(loc.name, "local");
  ck_assert_ptr_nonnull(loc.cancel);
  ck_assert_ptr_nonnull(loc.get_fd);

  void *ctx, *lc, *sc, *rc_;
  ck_assert_int_eq(loc.init(&host, &ctx), FLOE_OK);
  unsigned char addr[FLOE_TRANSPORT_ADDR_MAX];
  size_t alen = sizeof addr;
  ck_assert_int_eq(loc.listen(ctx, addr, &alen, &lc), FLOE_OK);
  ck_assert_uint_le(alen, FLOE_TRANSPORT_ADDR_MAX);
  ck_assert_int_eq(loc.accept(lc, &rc_), FLOE_UNAVAILABLE); /* nobody connected yet */
  ck_assert_int_eq(loc.connect(ctx, "nonsense", 9, &sc), FLOE_INVALID_ARGUMENT);
  char other[64];
  int on = snprintf(other, sizeof other, "floe-local:%ld:1", (long)getpid() + 1);
  ck_assert_int_eq(loc.connect(ctx, other, (size_t)on + 1, &sc), FLOE_UNAVAILABLE);
  ck_assert_int_eq(loc.connect(ctx, addr, alen, &sc), FLOE_OK);
  ck_assert_int_eq(loc.accept(lc, &rc_), FLOE_OK);
  int fd = -1;
  ck_assert_int_eq(loc.get_fd(ctx, &fd), FLOE_OK);
  loc.progress(ctx);
  ck_assert_int_eq(fd_readable(fd), 0);

  /* Receive posted first: the send completes it. */
  char a[8] = "abcdefg", b[8] = {0};
  void *rq, *sq;
  size_t size = 0;
  ck_assert_int_eq(loc.irecv(rc_, b, sizeof b, 42, NULL, &rq), FLOE_OK);
  int done = 1;
  ck_assert_int_eq(loc.test(rq, &done, &size), FLOE_OK);
  ck_assert_int_eq(done, 0);
  ck_assert_int_eq(loc.isend(sc, a, 8, 42, NULL, &sq), FLOE_OK);
  ck_assert_int_eq(fd_readable(fd), 1); /* a completion was announced */
  ck_assert_int_eq(wait_req(sq, &size), FLOE_OK);
  ck_assert_int_eq(wait_req(rq, &size), FLOE_OK);
  ck_assert_uint_eq(size, 8);
  ck_assert_str_eq(b, "abcdefg");
  loc.progress(ctx);
  ck_assert_int_eq(fd_readable(fd), 0); /* drained */

  /* Sent first: buffered as a copy (the sender's buffer is reused at once). Two messages of
   * one tag arrive in order; another tag is not confused with them. */
  char m1[4] = "one", m2[4] = "two", m3[6] = "other";
  ck_assert_int_eq(loc.isend(sc, m1, 4, 7, NULL, &sq), FLOE_OK);
  ck_assert_int_eq(wait_req(sq, NULL), FLOE_OK);
  memcpy(m1, "XXX", 4);
  ck_assert_int_eq(loc.isend(sc, m3, 6, 8, NULL, &sq), FLOE_OK);
  ck_assert_int_eq(wait_req(sq, NULL), FLOE_OK);
  ck_assert_int_eq(loc.isend(sc, m2, 4, 7, NULL, &sq), FLOE_OK);
  ck_assert_int_eq(wait_req(sq, NULL), FLOE_OK);
  char r1[8], r2[8], r3[8];
  void *q1, *q2, *q3;
  ck_assert_int_eq(loc.irecv(rc_, r1, sizeof r1, 7, NULL, &q1), FLOE_OK);
  ck_assert_int_eq(loc.irecv(rc_, r2, sizeof r2, 7, NULL, &q2), FLOE_OK);
  ck_assert_int_eq(loc.irecv(rc_, r3, sizeof r3, 8, NULL, &q3), FLOE_OK);
  ck_assert_int_eq(wait_req(q1, &size), FLOE_OK);
  ck_assert_str_eq(r1, "one");
  ck_assert_int_eq(wait_req(q2, &size), FLOE_OK);
  ck_assert_str_eq(r2, "two");
  ck_assert_int_eq(wait_req(q3, &size), FLOE_OK);
  ck_assert_str_eq(r3, "other");

  /* Two receives of one tag posted before any send: first posted, first served. */
  ck_assert_int_eq(loc.irecv(rc_, r1, sizeof r1, 9, NULL, &q1), FLOE_OK);
  ck_assert_int_eq(loc.irecv(rc_, r2, sizeof r2, 9, NULL, &q2), FLOE_OK);
  ck_assert_int_eq(loc.isend(sc, "AAA", 4, 9, NULL, &sq), FLOE_OK);
  wait_req(sq, NULL);
  ck_assert_int_eq(loc.isend(sc, "BBB", 4, 9, NULL, &sq), FLOE_OK);
  wait_req(sq, NULL);
  ck_assert_int_eq(wait_req(q1, &size), FLOE_OK);
  ck_assert_int_eq(wait_req(q2, &size), FLOE_OK);
  ck_assert_str_eq(r1, "AAA");
  ck_assert_str_eq(r2, "BBB");

  /* Larger than the posted buffer: an error with the message's size, no overflow. */
  char small[4] = {'k', 'e', 'e', 'p'};
  char big[32];
  memset(big, 'z', sizeof big);
  ck_assert_int_eq(loc.irecv(rc_, small, sizeof small, 10, NULL, &q1), FLOE_OK);
  ck_assert_int_eq(loc.isend(sc, big, sizeof big, 10, NULL, &sq), FLOE_OK);
  wait_req(sq, NULL);
  ck_assert_int_eq(wait_req(q1, &size), FLOE_OUT_OF_RANGE);
  ck_assert_uint_eq(size, 32);
  ck_assert_mem_eq(small, "keep", 4);

  /* Cancel: a pending receive is withdrawn; a completed one cannot be. */
  ck_assert_int_eq(loc.irecv(rc_, r1, sizeof r1, 11, NULL, &q1), FLOE_OK);
  ck_assert_int_eq(loc.cancel(q1), FLOE_OK);
  ck_assert_int_eq(loc.isend(sc, "late", 5, 11, NULL, &sq), FLOE_OK); /* now buffered */
  wait_req(sq, NULL);
  ck_assert_int_eq(loc.irecv(rc_, r2, sizeof r2, 11, NULL, &q2), FLOE_OK);
  ck_assert_int_eq(loc.cancel(q2), FLOE_UNAVAILABLE); /* matched the buffered message */
  ck_assert_int_eq(wait_req(q2, &size), FLOE_OK);
  ck_assert_str_eq(r2, "late");

  /* Closing with a receive posted and a message buffered frees both. */
  ck_assert_int_eq(loc.irecv(rc_, r1, sizeof r1, 12, NULL, &q1), FLOE_OK);
  ck_assert_int_eq(loc.isend(sc, "gone", 5, 13, NULL, &sq), FLOE_OK);
  wait_req(sq, NULL);
  loc.close_recv(rc_);
  ck_assert_int_eq(loc.isend(sc, "x", 2, 12, NULL, &sq), FLOE_FAILED_PRECONDITION);
  loc.close_send(sc);
  loc.close_listen(lc);
  loc.finalize(ctx);
  /* no dlclose: plugins are never unloaded while the process runs */
}
END_TEST

/* The runtime lists the transport the plugin registered. */
START_TEST(runtime_lists_the_local_transport) {
  FloeRuntime *rt = runtime(true, false);
  ck_assert_int_eq(rt->num_transports, 1);
  ck_assert_str_eq(rt->transports[0]->name, "local");
  ck_assert_str_eq(rt->transports[0]->plugin->name, "transport-local");
  bool seen = false;
  for (int i = 0; i < floe_runtime_num_plugins(rt); i++) {
    const FloePluginReport *p = floe_runtime_plugin(rt, i);
    if (strcmp(p->name, "transport-local") == 0) {
      seen = true;
      ck_assert_int_eq(p->state, FLOE_PLUGIN_LOADED);
      ck_assert_int_eq(p->num_transports, 1);
    }
  }
  ck_assert(seen);
  floe_runtime_free(rt);
}
END_TEST

Suite *rendezvous_suite(void);
Suite *rendezvous_suite(void) {
  Suite *s = suite_create("rendezvous");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, key_string_and_incarnations);
  tcase_add_test(tc, by_reference_send_then_recv);
  tcase_add_test(tc, by_reference_recv_then_send);
  tcase_add_test(tc, transport_send_then_recv);
  tcase_add_test(tc, transport_recv_then_send);
  tcase_add_test(tc, foreign_incarnation_takes_the_transport);
  tcase_add_test(tc, many_keys_many_threads_by_reference);
  tcase_add_test(tc, many_keys_many_threads_transport);
  tcase_add_test(tc, dead_and_control_by_reference);
  tcase_add_test(tc, dead_and_control_transport);
  tcase_add_test(tc, frames_and_iterations_by_reference);
  tcase_add_test(tc, frames_and_iterations_transport);
  tcase_add_test(tc, abort_by_reference);
  tcase_add_test(tc, abort_transport);
  tcase_add_test(tc, abort_races_with_transfers);
  tcase_add_test(tc, abort_does_not_wait_for_a_stalled_peer);
  tcase_add_test(tc, duplicate_send_and_recv);
  tcase_add_test(tc, free_fails_pending_and_drains);
  tcase_add_test(tc, bf16_by_reference);
  tcase_add_test(tc, bf16_transport);
  tcase_add_test(tc, transfers_to_and_from_testdev);
  tcase_add_test(tc, testdev_catches_misuse);
  tcase_add_test(tc, testdev_kernels_match_the_cpu);
  tcase_add_test(tc, malformed_messages_fail_the_recv);
  tcase_add_test(tc, no_transport_is_a_clear_error);
  tcase_add_test(tc, manager_clears_the_reserved_tag_bit);
  tcase_add_test(tc, manager_channels_between_two_runtimes);
  tcase_add_test(tc, route_between_two_runtimes);
  tcase_add_test(tc, allocation_failures_by_reference);
  tcase_add_test(tc, allocation_failures_transport);
  tcase_add_test(tc, allocation_failures_to_testdev);
  suite_add_tcase(s, tc);
  /* The local transport plugin itself (the fabric run skips these: CK_RUN_CASE=core). */
  TCase *lc = tcase_create("local");
  tcase_set_timeout(lc, 30);
  tcase_add_test(lc, unknown_transport_name);
  tcase_add_test(lc, local_transport_table_alone);
  tcase_add_test(lc, runtime_lists_the_local_transport);
  suite_add_tcase(s, lc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(rendezvous_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
