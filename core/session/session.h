/* SPDX-License-Identifier: Apache-2.0 */
/* session.h - libfloe's session layer (core/session/): sessions (prune, rewrite, place,
 * partition, cache executors, run), the fusion and layout passes, the placer and its cost
 * model, the partitioner, and steps over several device pieces. */
#ifndef FLOE__LAYER_SESSION_H
#define FLOE__LAYER_SESSION_H

#include "exec/exec.h"

/* ------------------------------------------------------------------------------------ */
/* partition.c: one piece per device, joined by _Send/_Recv (see the file's comment). */
typedef struct FloePartitionFed {
  bool (*is_fed)(void *arg, int node, int index); /* the run feeds node:index */
  void *arg;
} FloePartitionFed;
/* The run's fetches, for a cluster session: a fetched value made on another task that is
 * large or of a size unknown before the step (floe__by_data_plane) is brought to client by
 * a transfer, through the data plane, instead of in that task's reply (bounded at 64 MiB). */
typedef struct FloePartitionFetches {
  int num;
  const int *node, *index;      /* node id and output of each fetch (borrowed) */
  struct FloeDevice *client;    /* this process's host device; NULL: none move */
} FloePartitionFetches;
typedef struct FloePartition {
  FloeGraph *graph;        /* owned: the input graph's nodes (same ids), then the cutter's */
  struct FloeDevice **device; /* per node of graph (owned array; devices borrowed) */
  bool *need;              /* per node of graph: runs in the step (owned) */
  int num_sends;           /* _Send and _ControlSend nodes added */
  bool has_cf;             /* the run has control flow: every piece needs the frame scheduler */
  FloeOutput *fetch;       /* per fetch given: where the step reads it in graph (owned; NULL
                            * without fetches) */
} FloePartition;
/* g borrowed; need and device are per node of g (device[i] read only where need[i]); fed
 * and fetches may be NULL. A fed value read on another task crosses to it as any value does
 * (the session places such a fed node on this process's side). On success *out is filled
 * (floe__partition_free releases it); on error st names the edge or loop that cannot be
 * cut. */
floe_code floe__partition(const FloeGraph *g, const bool *need, struct FloeDevice *const *device,
                          const FloePartitionFed *fed, const FloePartitionFetches *fetches,
                          FloePartition *out, FloeStatus *st);
/* Whether a value of dt and static shape sh between this process and another task goes
 * through the data plane rather than inside a step's messages: 1 MiB or more, or a size
 * not known before the step. */
bool floe__by_data_plane(FloeDType dt, const FloeShape *sh);
void floe__partition_free(FloePartition *p);

/* placer.c: a device per node (see the file's comment). */
typedef struct FloePlaceOptions {
  struct FloeDevice *default_device;  /* the session's `device`; NULL: none */
  struct FloeDevice **devices;        /* the cost model places among these (borrowed) */
  int num_devices;                    /* 0: the simple rule among every device */
  bool allow_soft_placement;
} FloePlaceOptions;
typedef struct FloePlacement {
  struct FloeDevice **device;  /* per node (owned array; devices borrowed); NULL: not needed */
  double *start, *finish;      /* per node: the simulated schedule, seconds (owned) */
  double est_seconds;          /* the simulated step time */
  int num_nodes;               /* of the placed graph: the length of the arrays above */
} FloePlacement;
/* g, need and fed borrowed. On error st names the node, the device it asked for and the
 * devices that have a kernel for it. */
floe_code floe__place(struct FloeRuntime *rt, const FloeGraph *g, const bool *need,
                      const FloePartitionFed *fed, const FloePlaceOptions *o, FloePlacement *out,
                      FloeStatus *st);
void floe__placement_free(FloePlacement *p);
/* Fills p->start, finish and est_seconds for p->device as it stands; node i takes secs[i]
 * seconds where secs is given and secs[i] >= 0, else the cost model's time. */
void floe__placement_estimate(struct FloeRuntime *rt, const FloeGraph *g, const bool *need,
                              const double *secs, FloePlacement *p);
/* The cost model: seconds node n takes on d; seconds to move bytes from src to dst. */
double floe__cost_node(const FloeNode *n, const struct FloeDevice *d);
double floe__cost_transfer(double bytes, const struct FloeDevice *src,
                          const struct FloeDevice *dst);

/* multi_exec.c: one step over device pieces (see the file's comment). */
typedef struct FloeMultiExec FloeMultiExec;

/* Pieces on other tasks of a cluster (core/dist's master provides these): the step's nodes
 * on remote devices (FloeDevice.remote) are grouped by task, one piece per task, built and
 * run through these functions while the local pieces run here. */
typedef void (*FloeRemoteDoneFn)(void *arg, floe_code code, const char *msg);
typedef struct FloeRemotePieceFns {
  void *arg;
  /* The piece of the task holding device (one of its devices): g is the partitioned graph
   * (borrowed for the call), run[i] marks the piece's nodes (dev[i] their devices); feeds
   * are the run's fed outputs the piece reads (it receives their values at each start),
   * fetches what it returns. *piece is the callee's (free). */
  floe_code (*build)(void *arg, const struct FloeDevice *device, const FloeGraph *g,
                     const bool *run, struct FloeDevice *const *dev, const FloeOutput *feeds,
                     int num_feeds, const FloeOutput *fetches, int num_fetches, void **piece,
                     FloeStatus *st);
  void (*free)(void *arg, void *piece);
  /* Starts a step of piece under step_id: feeds[k] (borrowed until finish) for its feeds.
   * On OK, done(done_arg, code, msg) runs exactly once, on any thread (possibly before
   * start returns), when the step ended on the task; finish is then due. */
  floe_code (*start)(void *arg, void *piece, uint64_t step_id, FloeTensor *const *feeds,
                     int64_t timeout_ms, FloeRemoteDoneFn done, void *done_arg, void **call,
                     FloeStatus *st);
  /* After done: the piece's fetches (new references, in its fetch order) on OK, else the
   * step's error there. Frees call. */
  floe_code (*finish)(void *arg, void *call, FloeTensor **outputs, FloeStatus *st);
  /* Asks the task to abort the call's step (code and msg borrowed); done follows. Any
   * thread, between start and finish. */
  void (*abort)(void *arg, void *call, floe_code code, const char *msg);
} FloeRemotePieceFns;
typedef struct FloeMultiPlan {
  struct FloeRuntime *rt;
  const FloeGraph *graph;       /* the partitioned graph; borrowed, outlives the result */
  FloeExecNodeSpec *nodes;      /* every node of the step, each with its device and kernel */
  int num_nodes;
  FloeOutput *feeds;
  int num_feeds;
  FloeOutput *fetches;
  int num_fetches;
  bool inline_inexpensive;
  bool force_frames;            /* FloePartition.has_cf */
  bool reuse_buffers;           /* FloeExecPlan.reuse_buffers */
  bool memory_order;            /* FloeExecPlan.memory_order */
  bool const_feeds;             /* FloeExecPlan.const_feeds */
  bool concat_in_place;         /* FloeExecPlan.concat_in_place */
  struct FloeResourceMgr *resources;
  const atomic_int *profiling;
  FloeTraceSink *trace;         /* the session's; borrowed */
  FloeRendezvousOptions rv_opts;
  const FloeRemotePieceFns *remote; /* borrowed, outlives the result; NULL: no remote device */
} FloeMultiPlan;
typedef struct FloeMultiRunCtl {
  int64_t timeout_ms;
  /* Told of each piece's step when it starts (started true) and before it is freed
   * (started false), so that a cancel can reach it meanwhile. */
  void (*track)(void *arg, FloeExecStep *step, bool started);
  void *arg;
  const FloeRendezvousOptions *rv_opts; /* NULL: the plan's */
  FloeRendezvousStats *stats;           /* filled after the step when not NULL */
  int64_t trace_step;                   /* FloeRunCtl.trace_step of every piece */
  /* FloeRunCtl.keep of every piece: what the run borrows (executors, session) must outlive a
   * piece that the run left behind at its deadline. */
  void (*keep)(void *keep_arg, int delta);
  void *keep_arg;
  uint64_t step_id;                     /* the rendezvous' step id; 0: one is drawn (random
                                         * and 64-bit when the step spans tasks) */
} FloeMultiRunCtl;
/* Plan copied, its arrays borrowed for the call. Caller owns the result. */
FloeMultiExec *floe__multi_exec_new(const FloeMultiPlan *plan, FloeStatus *st);
void floe__multi_exec_free(FloeMultiExec *m);
/* As floe__executor_run_ctl: feeds in plan order (borrowed); on success outputs[i] are new
 * references in plan order. Thread-safe. */
floe_code floe__multi_exec_run(FloeMultiExec *m, FloeTensor *const *feeds, FloeTensor **outputs,
                               const FloeMultiRunCtl *ctl, FloeStatus *st);
int floe__multi_exec_num_pieces(const FloeMultiExec *m);
FloeExecutor *floe__multi_exec_piece(const FloeMultiExec *m, int i); /* borrowed */

/* ------------------------------------------------------------------------------------ */
/* fuse.c: graph rewrites. */
/* Whether `fused` may replace the chain whose main node is `anchor`: true when it would run
 * on the device the anchor would (placement and kernel availability). */
typedef bool (*FloeFuseCheck)(void *arg, const FloeNode *anchor, const FloeNode *fused);
/* Fuses chains of the step's nodes in g, a session-private graph, in place (see fuse.c).
 * *need (g->num_nodes entries, the step's nodes) is reallocated to cover the nodes added
 * and updated (fused chains out, fused nodes in); pinned[id] (original ids): fed or fetched
 * nodes, never fused. *num_fused: chains replaced. On error g may hold unused nodes. */
floe_code floe__fuse_graph(FloeGraph *g, bool **need, const bool *pinned, FloeFuseCheck ok,
                           void *arg, int *num_fused, FloeStatus *st);
/* False when no chain floe__fuse_graph knows can end among the step's nodes of g (need):
 * then there is no need to clone the graph for it. */
bool floe__fuse_may_apply(const FloeGraph *g, const bool *need);

/* ------------------------------------------------------------------------------------ */
/* optimize.c: the graph optimiser (the passes between pruning and placement). */
typedef struct FloeOpt {
  FloeGraph *g;          /* the run's private graph, rewritten in place */
  bool *need;            /* per node id: in the run (floe__opt_grow covers added nodes) */
  int cap;               /* entries of need */
  int n_orig;            /* nodes of the session's graph: the range of pinned and target */
  const bool *pinned;    /* fed or fetched nodes: they keep their place in the run */
  const bool *target;    /* run as targets: never taken out (may be NULL) */
  FloeFuseCheck ok;      /* whether a new fused node may stand in for the ones it replaces */
  void *arg;
  FloeRuntime *rt;       /* the session's runtime: constant folding evaluates on it */
} FloeOpt;
/* One pass: rewrites o's graph, counting into ps (rewritten, removed; added and the
 * node counts are filled by floe__optimize). */
typedef floe_code (*FloeOptPassFn)(FloeOpt *o, FloeOptPassStats *ps, FloeStatus *st);
floe_code floe__opt_constant_folding(FloeOpt *o, FloeOptPassStats *ps, FloeStatus *st); /* opt_const.c */
/* opt_const.c: n's single output computed on rt's CPU (NULL: the default runtime) from
 * values (one per input of n, borrowed), in a graph and session of their own in which
 * constant folding is off: a new reference (caller releases), or NULL when it cannot be
 * computed. The ONNX importer's constant folding uses it too. */
FLOE__SHARED FloeTensor *floe__eval_node(struct FloeRuntime *rt, const FloeNode *n,
                                         FloeTensor *const *values);
/* opt_const.c: s is fully known and holds at most max_elements elements. */
FLOE__SHARED bool floe__shape_at_most(const FloeShape *s, int64_t max_elements);
floe_code floe__opt_arithmetic(FloeOpt *o, FloeOptPassStats *ps, FloeStatus *st); /* opt_arith.c */
floe_code floe__opt_cse(FloeOpt *o, FloeOptPassStats *ps, FloeStatus *st);        /* opt_cse.c */
floe_code floe__opt_dead_nodes(FloeOpt *o, FloeOptPassStats *ps, FloeStatus *st); /* opt_dead.c */
floe_code floe__opt_fusion(FloeOpt *o, FloeOptPassStats *ps, FloeStatus *st);     /* fuse.c */
floe_code floe__opt_elementwise(FloeOpt *o, FloeOptPassStats *ps, FloeStatus *st); /* opt_elementwise.c */
/* Runs every pass that is on, in order; report (NULL: none) gets floe__opt_num_passes()
 * entries; *changes counts what the passes did (0: o's graph is as it was). On error the
 * graph may hold unused nodes (the caller discards it). */
floe_code floe__optimize(FloeOpt *o, FloeOptPassStats *report, int *changes, FloeStatus *st);
int floe__opt_num_passes(void);
bool floe__opt_any_on(void);
/* Kernels may write outputs over inputs whose last reader they are (unless
 * FLOE_OPT_BUFFER_REUSE=0 or FLOE_OPTIMIZE=0). */
bool floe__opt_buffer_reuse_on(void);
/* Executors take ready nodes in a memory-aware order (unless FLOE_OPT_MEMORY_SCHEDULING=0
 * or FLOE_OPTIMIZE=0). */
bool floe__opt_memory_scheduling_on(void);
/* Whether constant folding is on (unless FLOE_OPTIMIZE=0 or FLOE_OPT_CONSTANT_FOLDING=0). It
 * also switches what is part of it outside its pass: host Consts handed to their readers
 * without running (FloeExecPlan.const_feeds), and the fusion pass reshaping the constants it
 * needs in a blocked shape itself. */
bool floe__opt_constant_folding_on(void);
/* Helpers the passes share. */
bool floe__opt_grow(FloeOpt *o);                          /* false: out of memory */
bool floe__opt_kept(const FloeOpt *o, const FloeNode *n); /* fed, fetched or a target */
/* Known ranks, equal, and equal dims (an unknown dim equals only an unknown one). */
bool floe__opt_same_shape(const FloeShape *a, const FloeShape *b);
/* x is output 0 of a one-element Const of dtype dt (f32, f64, i32 or i64) held on the host:
 * its value as a double (*d) and an int64 (*i; 0 for floats). (opt_arith.c; fusion too.) */
bool floe__const_scalar(FloeOutput x, FloeDType dt, double *d, int64_t *i);
bool floe__opt_control_flow(const FloeNode *n);           /* a frame or transfer op */
/* No side effects, not control flow, not a Placeholder or NoOp: may be merged or dropped. */
bool floe__opt_pure(const FloeNode *n);
bool floe__opt_has_control_flow(const FloeOpt *o);         /* a loop or cond in the run */
/* Per node id: how many edges (data and control) of the run's nodes read it (caller frees);
 * NULL when out of memory. */
int *floe__opt_readers(const FloeOpt *o);
/* dep becomes a control input of x (once; not of itself). False: out of memory. */
bool floe__opt_add_control(FloeNode *x, FloeNode *dep);
/* Rewires every input of the run's nodes that reads (n, 0) for n with fwd[n->id].node to
 * read fwd[n->id] instead (following chains), and every control edge on such an n to
 * fwd[n->id].node. fwd has n_fwd entries (nodes added since have none). */
floe_code floe__opt_apply_forward(FloeOpt *o, const FloeOutput *fwd, int n_fwd, FloeStatus *st);
/* Takes out of the run the pure nodes nothing reads (repeatedly); -1 when out of memory,
 * else how many. */
int floe__opt_prune_unused(FloeOpt *o);
/* A new Const of value (the graph takes its reference) named after base, on near's
 * requested device, in the run; NULL on failure. */
FloeNode *floe__opt_const(FloeOpt *o, const char *base, FloeTensor *value, const FloeNode *near);

/* ------------------------------------------------------------------------------------ */
/* session.c: sessions. floe_session_new (core/dist/master.c: a session of a cluster when its
 * options name one) makes them with this. */
typedef struct FloeSessionCluster {
  const FloeRemotePieceFns *remote;   /* pieces on other tasks (borrowed until release) */
  const FloeRendezvousRoute *route;   /* the rendezvous' route to them (same) */
  void (*release)(void *arg);         /* called once when the session is destroyed, after its
                                       * executors (and remote pieces) were freed */
  void *arg;
} FloeSessionCluster;
/* floe_session_new's work; cluster copied (NULL: a session of this process alone). On error
 * cluster->release is not called (the caller still owns what it holds). */
FloeSession *floe__session_create(const FloeGraph *g, const FloeSessionOptions *opts,
                                  const FloeSessionCluster *cluster, FloeStatus *status);
/* Fails the session's running steps with code and why (copied): a cluster's error. */
void floe__session_abort(FloeSession *s, floe_code code, const char *why);

/* ------------------------------------------------------------------------------------ */
/* session.c, for checkpoint.c and export.c: the session's graph copy and resources
 * (borrowed, live as long as the session). */
const FloeGraph *floe__session_graph(const FloeSession *s);
FloeResourceMgr *floe__session_resources(FloeSession *s);
/* Whether s runs across the tasks of a cluster (its variables may live on other tasks). */
bool floe__session_is_cluster(const FloeSession *s);
struct FloeRuntime *floe__session_runtime(const FloeSession *s);
/* A session of g over s's runtime, cluster and variables (s's resources, borrowed): how a
 * checkpoint runs its per-task writes beside a training graph that has no such nodes. Free
 * it (floe_session_free) before s. */
FloeSession *floe__session_sibling(FloeSession *s, const FloeGraph *g, FloeStatus *status);

#endif /* FLOE__LAYER_SESSION_H */
