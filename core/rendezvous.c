/* rendezvous.c - where a _Send meets its _Recv: one table per step (interim version: in
 * process only, values handed over by reference and copied into the receiving device; the
 * transport path replaces the copy for devices that do not share host memory). */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

typedef struct Slot {
  char *key;
  bool has_value, is_dead;
  FloeTensor *value;         /* owned while it waits */
  FloeRecvDoneFn done;       /* a Recv waiting, or NULL */
  void *arg;
  FloeDevice *dst;
  struct Slot *next;
} Slot;

struct FloeRendezvous {
  FloeRuntime *rt;
  int64_t step_id;
  FloeRendezvousOptions opts;
  pthread_mutex_t mu;
  Slot *slots;
  FloeStatus aborted;        /* first abort */
  FloeRendezvousStats stats;
};

uint64_t floe__device_incarnation(const FloeDevice *d) {
  uint64_t x = (d && d->rt ? d->rt->seed : 0) ^ (uint64_t)(d ? d->id + 1 : 0) * 0x9e3779b97f4a7c15ull;
  x ^= x >> 31; /* splitmix64 finaliser */
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  return x ? x : 1;
}

char *floe__rendezvous_key_string(const FloeRendezvousKey *k) {
  return floe__asprintf("%s;%016" PRIx64 ";%s;%s;%016" PRIx64 ":%" PRId64, k->src_device,
                        k->src_incarnation, k->dst_device, k->tensor, k->frame_id, k->iter);
}

FloeRendezvous *floe__rendezvous_new(FloeRuntime *rt, int64_t step_id,
                                     const FloeRendezvousOptions *opts, FloeStatus *st) {
  FloeRendezvous *r = floe__calloc(1, sizeof *r);
  if (!r || pthread_mutex_init(&r->mu, NULL) != 0) {
    floe__free(r);
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory making a step's rendezvous");
    return NULL;
  }
  r->rt = rt;
  r->step_id = step_id;
  if (opts) r->opts = *opts;
  return r;
}

void floe__rendezvous_free(FloeRendezvous *r) {
  if (!r) return;
  for (Slot *s = r->slots, *next; s; s = next) {
    next = s->next;
    if (s->value) floe_tensor_release(s->value);
    floe__free(s->key);
    floe__free(s);
  }
  floe_status_clear(&r->aborted);
  pthread_mutex_destroy(&r->mu);
  floe__free(r);
}

static Slot *find(FloeRendezvous *r, const char *key) {
  for (Slot *s = r->slots; s; s = s->next)
    if (strcmp(s->key, key) == 0) return s;
  return NULL;
}

static void unlink_slot(FloeRendezvous *r, Slot *dead) {
  for (Slot **pp = &r->slots; *pp; pp = &(*pp)->next)
    if (*pp == dead) {
      *pp = dead->next;
      return;
    }
}

/* Rounds f32 values to bf16 and back (nearest even), in a new tensor. */
static FloeTensor *round_bf16(FloeTensor *t, FloeStatus *st) {
  FloeTensor *c = floe__tensor_alloc(NULL, t->dtype, t->rank, t->dims, st);
  if (!c) return NULL;
  const uint32_t *src = (const uint32_t *)floe_tensor_data(t);
  uint32_t *dst = (uint32_t *)floe_tensor_data(c);
  for (int64_t i = 0; i < floe_tensor_num_elements(t); i++) {
    uint32_t u = src[i];
    if ((u & 0x7fffffffu) > 0x7f800000u)
      dst[i] = u | 0x00400000u; /* NaN stays NaN */
    else
      dst[i] = ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16) << 16;
  }
  return c;
}

/* The value as the receiver wants it: on its device, rounded when compressing. */
static FloeTensor *deliverable(FloeRendezvous *r, FloeTensor *t, FloeDevice *dst, FloeStatus *st) {
  floe_tensor_retain(t);
  if (r->opts.compress_bf16 && t->dtype == FLOE_F32) {
    FloeTensor *host = floe__tensor_to_device(t, NULL, st);
    floe_tensor_release(t);
    if (!host) return NULL;
    t = round_bf16(host, st);
    floe_tensor_release(host);
    if (!t) return NULL;
  }
  FloeTensor *out = floe__tensor_to_device(t, dst, st);
  floe_tensor_release(t);
  return out;
}

floe_code floe__rendezvous_send(FloeRendezvous *r, const FloeRendezvousKey *key, FloeTensor *t,
                                bool is_dead, FloeStatus *st) {
  char *ks = floe__rendezvous_key_string(key);
  if (!ks) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory sending a value");
  pthread_mutex_lock(&r->mu);
  if (r->aborted.code != FLOE_OK) { /* dropped: the step is failing */
    pthread_mutex_unlock(&r->mu);
    floe__free(ks);
    return FLOE_OK;
  }
  Slot *s = find(r, ks);
  if (s && s->has_value) {
    pthread_mutex_unlock(&r->mu);
    floe_status_set(st, FLOE_ALREADY_EXISTS, "the value of %s was sent twice", ks);
    floe__free(ks);
    return FLOE_ALREADY_EXISTS;
  }
  if (s) { /* a Recv waits: hand over outside the lock */
    unlink_slot(r, s);
    r->stats.sends++;
    r->stats.recvs++;
    pthread_mutex_unlock(&r->mu);
    FloeStatus dst = {FLOE_OK, NULL};
    FloeTensor *v = is_dead ? NULL : deliverable(r, t, s->dst, &dst);
    s->done(s->arg, &dst, v, is_dead);
    floe_status_clear(&dst);
    floe__free(s->key);
    floe__free(s);
    floe__free(ks);
    return FLOE_OK;
  }
  s = floe__calloc(1, sizeof *s);
  if (!s) {
    pthread_mutex_unlock(&r->mu);
    floe__free(ks);
    return floe_status_set(st, FLOE_NO_MEMORY, "out of memory sending a value");
  }
  s->key = ks;
  s->has_value = true;
  s->is_dead = is_dead;
  if (t && !is_dead) {
    floe_tensor_retain(t);
    s->value = t;
  }
  s->next = r->slots;
  r->slots = s;
  r->stats.sends++;
  pthread_mutex_unlock(&r->mu);
  return FLOE_OK;
}

void floe__rendezvous_recv(FloeRendezvous *r, const FloeRendezvousKey *key, FloeDevice *dst,
                           FloeRecvDoneFn done, void *arg) {
  FloeStatus st = {FLOE_OK, NULL};
  char *ks = floe__rendezvous_key_string(key);
  if (!ks) {
    floe_status_set(&st, FLOE_NO_MEMORY, "out of memory receiving a value");
    done(arg, &st, NULL, false);
    floe_status_clear(&st);
    return;
  }
  pthread_mutex_lock(&r->mu);
  if (r->aborted.code != FLOE_OK) {
    floe__status_copy(&st, &r->aborted);
    pthread_mutex_unlock(&r->mu);
    done(arg, &st, NULL, false);
    floe_status_clear(&st);
    floe__free(ks);
    return;
  }
  Slot *s = find(r, ks);
  if (s && s->has_value) {
    unlink_slot(r, s);
    r->stats.recvs++;
    pthread_mutex_unlock(&r->mu);
    FloeTensor *v = s->is_dead ? NULL : deliverable(r, s->value, dst, &st);
    done(arg, &st, v, s->is_dead);
    floe_status_clear(&st);
    if (s->value) floe_tensor_release(s->value);
    floe__free(s->key);
    floe__free(s);
    floe__free(ks);
    return;
  }
  if (s) {
    pthread_mutex_unlock(&r->mu);
    floe_status_set(&st, FLOE_ALREADY_EXISTS, "two receivers wait for %s", ks);
    done(arg, &st, NULL, false);
    floe_status_clear(&st);
    floe__free(ks);
    return;
  }
  s = floe__calloc(1, sizeof *s);
  if (!s) {
    pthread_mutex_unlock(&r->mu);
    floe_status_set(&st, FLOE_NO_MEMORY, "out of memory receiving %s", ks);
    done(arg, &st, NULL, false);
    floe_status_clear(&st);
    floe__free(ks);
    return;
  }
  s->key = ks;
  s->done = done;
  s->arg = arg;
  s->dst = dst;
  s->next = r->slots;
  r->slots = s;
  pthread_mutex_unlock(&r->mu);
}

void floe__rendezvous_abort(FloeRendezvous *r, floe_code code, const char *why) {
  if (!r) return;
  pthread_mutex_lock(&r->mu);
  if (r->aborted.code != FLOE_OK) {
    pthread_mutex_unlock(&r->mu);
    return;
  }
  floe_status_set(&r->aborted, code ? code : FLOE_ABORTED, "%s", why ? why : "aborted");
  Slot *waiting = NULL;
  for (Slot **pp = &r->slots; *pp;) {
    Slot *s = *pp;
    if (s->done) {
      *pp = s->next;
      s->next = waiting;
      waiting = s;
    } else {
      pp = &s->next;
    }
  }
  FloeStatus st = {FLOE_OK, NULL};
  floe__status_copy(&st, &r->aborted);
  pthread_mutex_unlock(&r->mu);
  for (Slot *s = waiting, *next; s; s = next) {
    next = s->next;
    s->done(s->arg, &st, NULL, false);
    floe__free(s->key);
    floe__free(s);
  }
  floe_status_clear(&st);
}

void floe__rendezvous_stats(const FloeRendezvous *r, FloeRendezvousStats *out) {
  pthread_mutex_lock((pthread_mutex_t *)&r->mu);
  *out = r->stats;
  pthread_mutex_unlock((pthread_mutex_t *)&r->mu);
}
