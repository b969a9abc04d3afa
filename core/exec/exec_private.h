/* SPDX-License-Identifier: Apache-2.0 */
/* exec_private.h - the executor's structures, shared by executor.c (building, the plain
 * scheduler) and exec_frames.c (the scheduler for graphs with control flow). Not installed;
 * nothing outside these two files includes it. */
#ifndef FLOE_EXEC_PRIVATE_H
#define FLOE_EXEC_PRIVATE_H

#include "exec.h"

typedef struct FloeCfExec FloeCfExec;  /* exec_frames.c: static frame analysis */
typedef struct FloeCfStep FloeCfStep;  /* exec_frames.c: one step's frames */

/* Inputs plus outputs, in elements, under which a node with known shapes is cheap enough
 * to run inline whatever its kernel says. */
enum { TINY_ELEMENTS = 1024 };

typedef struct ExecNode {
  const FloeNode *node;
  FloeDevice *device;
  const FloeKernelReg *kernel; /* NULL: nothing to compute (its used outputs are fed) */
  void *state;                 /* from FloeKernelDef.create, or user_data */
  bool created;                /* create was called: destroy is due */
  bool shared;                 /* state belongs to the session (stateful op) */
  bool inexpensive;
  bool deferred;               /* expensive, no output read in the step, and a pool to defer to */
  bool check_copy;             /* an input may live in another memory space (see needs_copy) */
  bool lock_vars;              /* use_locking (true when absent): variables stay locked */
  bool check_shapes;           /* a plugin's kernel: its outputs must fit the inferred shapes
                                  (the core's own may not: a variable assigned with
                                  validate_shape false changes shape) */
  int num_resources;           /* resource inputs replaced by variable values (plugin kernels) */
  int in_base, num_inputs;     /* slice of input_src / a step's in_ptrs */
  int out_base, num_outputs;   /* entries of this node's outputs */
  int succ_base, num_succ;     /* slice of succ */
  int async_slot;              /* index of its Invocation in a step, or -1 (synchronous) */
} ExecNode;

/* A Concat computed in place (executor.c, plan_concats): its node, device, dtype, rank, axis
 * and extent along it (the dims before the axis must be 1 in a step; those after it are the
 * step's). */
typedef struct PlaceSlot {
  int node;
  FloeDevice *device;
  FloeDType dtype;
  int rank, axis;
  int64_t extent;
} PlaceSlot;

/* A node's profile counters; atomic because one node may run in concurrent steps. */
typedef struct NodeProf {
  atomic_llong calls, total_ns, max_ns, output_bytes, device_ns;
} NodeProf;

struct FloeExecutor {
  FloeThreadPool *pool;        /* the runtime's (borrowed); NULL: everything runs inline */
  FloeResourceMgr *resources;  /* the session's variables (borrowed); may be NULL */
  bool inline_inexpensive;
  bool reuse_buffers;          /* FloeExecPlan.reuse_buffers */
  int *rank;                   /* per node: memory-aware order (mem_order.c); NULL: off */
  ExecNode *nodes;
  int num_nodes;
  int *input_src;  /* per flattened input: entry >= 0, or -(feed + 1) */
  int total_inputs;
  int *succ;       /* successor node indices, one per edge (duplicates allowed) */
  int *pending0;   /* initial pending count per node */
  int *uses0;      /* readers per entry (consumer inputs + fetches) */
  int num_entries;
  int *roots;      /* nodes with no pending inputs */
  int num_roots;
  int *fetch_src;  /* entry, or -(feed + 1) */
  int num_feeds, num_fetches;
  /* Host constants handed to readers as feeds numbered after the caller's (split_constants):
   * their values, borrowed from the graph's attributes. */
  FloeTensor **consts;
  int num_consts;
  /* Concats computed in place (plan_concats): the producers of a Concat's values, each read
   * by it alone, write into views of the Concat's output, allocated by the step on the first
   * such write, and the Concat then has nothing to copy. Per entry: its slot (-1: none) and
   * byte offset in it; per node: the slot a Concat fills (-1: none). NULL: no slot. */
  int *place_slot;
  int64_t *place_at, *place_len; /* its first index along the Concat's axis, its extent */
  int *concat_slot;
  struct PlaceSlot *slots;
  int num_slots;
  int num_async;
  /* Byte offsets of a step's arrays inside its arena. */
  size_t off_pending, off_uses, off_entries, off_in, off_next, off_tasks, off_async, off_feeds,
      off_running, off_slots, arena_size;
  _Atomic(char *) spare;       /* the arena of a finished step, kept for the next one */
  const atomic_int *profiling; /* the session's switch, or never_profile */
  FloeTraceSink *trace;        /* FloeExecPlan.trace (borrowed); NULL: never traced */
  const char *device_name;     /* the first node's device (borrowed), for trace spans */
  FloeCfExec *cf;              /* control flow: frames (exec_frames.c); NULL: none */
  NodeProf *prof;              /* per node */
  bool force_frames;           /* FloeExecPlan.force_frames */
};

typedef struct CancelCb {
  int64_t token;
  void (*fn)(void *arg);
  void *arg;
} CancelCb;

/* The record handed to the pool or to an async kernel's done callback: its index in the
 * step's array is the node index. */
typedef struct StepTask {
  FloeExecStep *step;
} StepTask;

/* A variable whose value stands in for a resource input during one invocation. */
typedef struct HeldVar {
  FloeVar *var;
  FloeTensor *value; /* a reference from floe__var_begin_update (owned when `owner`) */
  int input;         /* the node input it replaces */
  bool owner;        /* the first of the entries with this var: it gives the value back */
} HeldVar;

enum { INLINE_HELD = 4 }; /* most update ops take at most 3 variables */

/* One kernel invocation: on the stack for synchronous kernels, in the arena for async
 * ones (it must live until done is called). */
typedef struct Invocation {
  FloeKernelContext ctx;
  FloeStatus status;   /* what the kernel reports through ctx_set_error */
  FloeTensor **copies; /* inputs copied to the node's device, or NULL */
  HeldVar *held;       /* resource inputs' variables, or NULL */
  int num_held;        /* entries of held whose value was taken */
  int64_t start_ns;    /* profiling: when compute began; 0: not timed */
  HeldVar held_inline[INLINE_HELD];
} Invocation;

struct FloeExecStep {
  FloeExecutor *e;
  FloeTensor **feeds;     /* the caller's feed pointers, copied into the arena */
  _Atomic(FloeTensor *) *slot_vals; /* per PlaceSlot: the Concat's output, once made */
  int64_t step_id;
  atomic_int outstanding; /* nodes ready or running and not yet completed */
  atomic_bool cancelled;
  pthread_mutex_t mu;
  pthread_cond_t done_cv;
  bool done;              /* guarded by mu */
  FloeStatus status;      /* first error; guarded by mu */
  atomic_int *pending;
  atomic_int *uses;
  FloeTensor **entries;
  FloeTensor **in_ptrs;
  int *next;              /* intrusive ready lists: each node is ready once per step */
  StepTask *tasks;
  Invocation *async_calls;
  int64_t *step_objs;     /* serials of the step's resource objects; guarded by mu */
  int num_step_objs, cap_step_objs;
  /* Cancellation callbacks (guarded by mu): run once, outside mu, by the first cancel. */
  CancelCb *cancel_cbs;
  int num_cancel_cbs, cap_cancel_cbs;
  int64_t next_cancel_token;
  bool cancelling;        /* the callbacks were taken by a cancel */
  bool cancel_done;       /* ... and have all returned (done_cv is broadcast) */
  pthread_t cancel_thread;
  FloeCfStep *cf;         /* frames of a step with control flow (exec_frames.c), or NULL */
  int64_t deadline_ns;    /* floe__exec_now_ns() past which the step fails; 0: none */
  int64_t timeout_ms;     /* for its message */
  FloeRunCtl ctl;         /* how it was started (copied): rendezvous, failure hook */
  bool in_worker;         /* started on a worker of the pool */
  /* Per node: invocations computing, or asynchronous and not yet done. Kept only when the
   * step has a deadline (its message names them); zero and unwritten otherwise. */
  atomic_int *running;
  atomic_int done_twice;  /* node + 1 of the first kernel seen calling done twice; 0: none */
  void **tickets;         /* the done_args of its asynchronous calls (guarded by mu) */
  int num_tickets, cap_tickets;
  bool abandoned;         /* guarded by mu: the run returned at the deadline without it; the
                             last completion frees the step */
  bool holds_refs;        /* feeds and rendezvous retained, for an abandoned step */
};

/* A kernel of node n starts (+1) or ends (-1), for the message of a step past its deadline;
 * free when the step has none. */
static inline void floe__exec_mark_running(FloeExecStep *s, int n, int delta) {
  if (__builtin_expect(s->deadline_ns != 0, 0))
    atomic_fetch_add_explicit(&s->running[n], delta, memory_order_relaxed);
}

/* A thread's inline work: nodes to run here, and how many nodes it completed without yet
 * taking them off the step's outstanding count (the count stays high meanwhile, so the
 * step cannot be seen finished early). */
typedef struct ReadyList {
  int head, tail;
  int settled;
  /* The thread is a step's caller, not one of the pool's workers: it runs cheap nodes and
   * starts asynchronous ones but keeps no expensive one, which the pool's threads take
   * instead (else, with the workers waiting for work beside it, a step's chain would run on
   * one more thread than cores). */
  bool hand_off;
} ReadyList;


/* ---- mem_order.c ---- */

/* Fills e->rank (allocated here; the executor frees it): the order of a simulated run that
 * keeps live tensor bytes low, for the executor to take ready nodes in; and runs deferred
 * nodes that free 1 MiB or more as soon as they are ready. Needs the edges, uses, pending
 * counts and deferred flags built. FLOE_NO_MEMORY on failure (st set). */
floe_code floe__exec_memory_order(FloeExecutor *e, FloeStatus *st);

/* ---- executor.c, for exec_frames.c ---- */
/* Keeps the first error (prefixed with the node) and cancels the step. */
void floe__exec_step_fail(FloeExecStep *s, const ExecNode *en, floe_code code, const char *msg);
void floe__exec_step_failf(FloeExecStep *s, const ExecNode *en, floe_code code, const char *fmt,
                           ...) FLOE__PRINTF(4, 5);
/* Fails the step with a message naming no node (a timeout, a cancel), and cancels it. */
void floe__exec_step_abort(FloeExecStep *s, floe_code code, const char *msg);
/* Marks the step done; s may be freed by the run thread as soon as this returns. */
void floe__exec_step_finish(FloeExecStep *s);
/* in[0..num_inputs) hold the node's inputs: replaces resource inputs by variable values and
 * copies inputs living in another memory space (inv->copies). Non-OK: the step failed. */
floe_code floe__exec_prepare_inputs(FloeExecStep *s, const ExecNode *en, Invocation *inv,
                                    FloeTensor **in);
void floe__exec_fill_ctx(FloeExecStep *s, const ExecNode *en, Invocation *inv, FloeTensor **in,
                         FloeTensor **outs);
/* After compute (or done): reports errors, checks outs, frees the invocation's scratch. */
void floe__exec_end_call(FloeExecStep *s, const ExecNode *en, Invocation *inv, floe_code rc,
                         FloeTensor **outs);
void floe__exec_release_inputs(Invocation *inv, const ExecNode *en);
int64_t floe__exec_now_ns(void);
/* Fails the step with FLOE_DEADLINE_EXCEEDED once its deadline passed (for threads that run
 * a loop's nodes one after another and never wait). */
void floe__exec_check_deadline(FloeExecStep *s);
bool floe__exec_profiling(const FloeExecutor *e);
/* Counts (and traces, per the profiling word) one finished invocation of node n that ran
 * from t0 to t1 with context ctx (its inputs and outputs still set). */
void floe__exec_prof_record(FloeExecStep *s, int n, int64_t t0, int64_t t1,
                            const FloeKernelContext *ctx, bool async);
/* A thread's stretch inside the executor, for traces: begin returns a token for end (0:
 * not tracing; only the outermost of nested stretches is recorded). */
int64_t floe__exec_span_begin(const FloeExecutor *e);
void floe__exec_span_end(const FloeExecutor *e, int64_t step, int64_t token);

/* The done_arg of an asynchronous call of node n: complete(arg) runs at its first done (see
 * done_ticket.c). NULL: out of memory (the step failed, naming the node). */
void *floe__exec_arm_done(FloeExecStep *s, int n, void (*complete)(void *arg), void *arg);
/* done_ticket.c: the function handed to asynchronous kernels as done. */
void floe__ticket_done(void *ticket);
void *floe__ticket_arm(FloeExecStep *step, int node, const FloeKernelReg *kernel,
                       void (*complete)(void *arg), void *arg);
/* Frees the slots of tickets (every call of them completed). */
void floe__tickets_release(void *const *tickets, int n);
/* Frees those of tickets[0..*n) whose call completed, keeping the others in order (*n
 * shrinks): a step whose loop makes many calls holds about FLOE__TICKETS_KEPT of them, not
 * one per call, so a second done is a step error for its recent calls and counted as late
 * for older ones. */
void floe__tickets_release_fired(void **tickets, int *n);
/* A second done for node n's call in step (which lives: called under the tickets' lock). */
void floe__exec_note_done_twice(FloeExecStep *s, int n);

/* ---- exec_frames.c ---- */
/* Analyses the frames of e's nodes when the plan has control-flow ops (sets e->cf; leaves it
 * NULL otherwise). local_of: graph node id -> plan index, or -1. Errors name the node whose
 * frame is inconsistent. */
floe_code floe__cf_build(FloeExecutor *e, const int *local_of, FloeStatus *st);
void floe__cf_free(FloeCfExec *cf);
/* Runs one step of e (e->cf set) on s, whose common fields step_new filled; returns when the
 * step is done. */
void floe__cf_run(FloeExecStep *s);
/* Frees what the step's frames still hold. */
void floe__cf_step_free(FloeExecStep *s);
/* Appends to buf a description of the loops running in s ("while loop 'w' at iteration 12"),
 * for a cancelled step's message. */
void floe__cf_describe(FloeExecStep *s, char *buf, size_t len);

#endif /* FLOE_EXEC_PRIVATE_H */
