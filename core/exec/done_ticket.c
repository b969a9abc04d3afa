/* SPDX-License-Identifier: Apache-2.0 */
/* done_ticket.c - the done_arg an asynchronous kernel receives: a ticket, not a pointer.
 *
 * A kernel must call done exactly once. A ticket makes the other cases harmless: it is a
 * number (slot index, generation) into one process-wide table of slots, so a done that comes
 * twice, or long after its step was freed, finds a slot whose state or generation says so
 * instead of a freed pointer.
 *
 *  - arm: a free slot (the table grows in blocks that never move) gets the scheduler's
 *    completion and its argument, state ARMED; the ticket is (generation << 32 | index + 1).
 *  - the first done moves ARMED -> FIRED with one compare-and-swap (no lock) and runs the
 *    completion;
 *  - a second done while the step lives finds FIRED with its generation: under the table's
 *    lock (which release also takes, so the step cannot be freed meanwhile) it notes the
 *    node on the step (floe__exec_note_done_twice), and the step fails when it ends;
 *  - release (when the step ends, every call of it completed; and, for a step making many
 *    calls, a loop's, those completed once it holds FLOE__TICKETS_KEPT) bumps the generation
 *    and frees the slot: a done after that matches nothing, is ignored and counted
 *    (floe__exec_num_late_dones) and logged at error level (FLOE_LOG_LEVEL), naming the op
 *    and plugin while the slot was not handed out again.
 *
 * Cost: one lock to arm and a compare-and-swap to complete, per asynchronous call.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "exec_private.h"

enum { SLOT_FREE = 0, SLOT_ARMED = 1, SLOT_FIRED = 2 };
enum { BLOCK_SLOTS = 1024, MAX_BLOCKS = 4096 }; /* four million calls in flight at most */

typedef struct Slot {
  _Atomic uint64_t word;       /* generation << 2 | state */
  void (*complete)(void *arg); /* the scheduler's end of the call */
  void *arg;
  FloeExecStep *step;          /* for a second done (alive while the slot is not released) */
  int node;
  const FloeKernelReg *kernel; /* the runtime's: names op and plugin of a late done */
  uint32_t next_free;          /* index + 1 of the next free slot; 0: none */
} Slot;

_Static_assert(sizeof(uintptr_t) >= 8, "a ticket holds a 32-bit index and a 32-bit generation");

static pthread_mutex_t table_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(Slot *) blocks[MAX_BLOCKS];
static atomic_uint num_slots;    /* slots handed out at least once */
static uint32_t free_head;       /* index + 1; guarded by table_mu */
static atomic_llong late_dones;

static Slot *slot_at(uint32_t i) {
  return &atomic_load_explicit(&blocks[i / BLOCK_SLOTS], memory_order_acquire)[i % BLOCK_SLOTS];
}

void *floe__ticket_arm(FloeExecStep *step, int node, const FloeKernelReg *kernel,
                       void (*complete)(void *arg), void *arg) {
  pthread_mutex_lock(&table_mu);
  uint32_t i;
  if (free_head) {
    i = free_head - 1;
    free_head = slot_at(i)->next_free;
  } else {
    i = atomic_load_explicit(&num_slots, memory_order_relaxed);
    if (i / BLOCK_SLOTS >= MAX_BLOCKS) goto err_full;
    if (i % BLOCK_SLOTS == 0) {
      Slot *b = floe__calloc(BLOCK_SLOTS, sizeof *b);
      if (!b) goto err_full;
      atomic_store_explicit(&blocks[i / BLOCK_SLOTS], b, memory_order_release);
    }
    atomic_store_explicit(&num_slots, i + 1, memory_order_release);
  }
  Slot *s = slot_at(i);
  s->complete = complete;
  s->arg = arg;
  s->step = step;
  s->node = node;
  s->kernel = kernel;
  s->next_free = 0;
  uint64_t gen = atomic_load_explicit(&s->word, memory_order_relaxed) >> 2;
  atomic_store_explicit(&s->word, gen << 2 | SLOT_ARMED, memory_order_release);
  pthread_mutex_unlock(&table_mu);
  return (void *)(uintptr_t)((gen & 0xffffffffu) << 32 | (uint64_t)(i + 1));

err_full:
  pthread_mutex_unlock(&table_mu);
  return NULL;
}

void floe__ticket_done(void *ticket) {
  uint64_t t = (uint64_t)(uintptr_t)ticket;
  uint32_t i = (uint32_t)t - 1, gen = (uint32_t)(t >> 32);
  if ((uint32_t)t == 0 || i >= atomic_load_explicit(&num_slots, memory_order_acquire)) {
    atomic_fetch_add_explicit(&late_dones, 1, memory_order_relaxed);
    floe__host_api()->log(FLOE_LOG_ERROR, "a kernel called done with an argument the core never "
                          "gave it: ignored (a bug in the kernel)");
    return;
  }
  Slot *s = slot_at(i);
  /* Generations are compared modulo 2^32: the word keeps more bits than the ticket. */
  uint64_t w = atomic_load_explicit(&s->word, memory_order_acquire);
  if ((w & 3) == SLOT_ARMED && (uint32_t)(w >> 2) == gen &&
      atomic_compare_exchange_strong_explicit(&s->word, &w, (w & ~(uint64_t)3) | SLOT_FIRED,
                                              memory_order_acq_rel, memory_order_acquire)) {
    s->complete(s->arg);
    return;
  }
  /* Not the first done of a call in flight. */
  pthread_mutex_lock(&table_mu);
  w = atomic_load_explicit(&s->word, memory_order_acquire);
  if ((w & 3) == SLOT_FIRED && (uint32_t)(w >> 2) == gen) {
    floe__exec_note_done_twice(s->step, s->node); /* the step lives until release */
    pthread_mutex_unlock(&table_mu);
    return;
  }
  /* Released and not handed out since: the slot still says whose call it was. */
  char who[160] = "a kernel";
  const FloeKernelReg *k = s->kernel;
  if ((w & 3) == SLOT_FREE && (uint32_t)(w >> 2) == gen + 1u && k)
    snprintf(who, sizeof who, "the kernel of op %s (plugin '%s')", k->op,
             k->plugin ? k->plugin->name : "core");
  pthread_mutex_unlock(&table_mu);
  atomic_fetch_add_explicit(&late_dones, 1, memory_order_relaxed);
  floe__host_api()->log(FLOE_LOG_ERROR, "%s called done for a call whose step had already "
                        "ended: ignored (a bug in the kernel: done must be called exactly once)",
                        who);
}

/* Frees slot i for its next call (under table_mu). */
static void slot_free(uint32_t i, uint64_t w) {
  Slot *s = slot_at(i);
  atomic_store_explicit(&s->word, ((w >> 2) + 1) << 2 | SLOT_FREE, memory_order_release);
  s->step = NULL;
  s->arg = NULL;
  s->next_free = free_head;
  free_head = i + 1;
}

void floe__tickets_release(void *const *tickets, int n) {
  if (n <= 0) return;
  pthread_mutex_lock(&table_mu);
  for (int k = 0; k < n; k++) {
    uint32_t i = (uint32_t)(uintptr_t)tickets[k] - 1;
    slot_free(i, atomic_load_explicit(&slot_at(i)->word, memory_order_relaxed));
  }
  pthread_mutex_unlock(&table_mu);
}

void floe__tickets_release_fired(void **tickets, int *n) {
  int kept = 0;
  pthread_mutex_lock(&table_mu);
  for (int k = 0; k < *n; k++) {
    uint32_t i = (uint32_t)(uintptr_t)tickets[k] - 1;
    uint64_t w = atomic_load_explicit(&slot_at(i)->word, memory_order_acquire);
    if ((w & 3) == SLOT_FIRED)
      slot_free(i, w);
    else
      tickets[kept++] = tickets[k]; /* in flight: done still to come */
  }
  pthread_mutex_unlock(&table_mu);
  *n = kept;
}

int64_t floe__exec_num_ticket_slots(void) {
  return atomic_load_explicit(&num_slots, memory_order_relaxed);
}

int64_t floe__exec_num_late_dones(void) {
  return atomic_load_explicit(&late_dones, memory_order_relaxed);
}
