/* SPDX-License-Identifier: Apache-2.0 */
/* floe_train.h - training on top of the graph API of floe.h: automatic differentiation,
 * variables and initialisers, optimisers and learning-rate schedules, checkpoints, layer
 * builders. Included by floe.h (the IDX datasets and batches: floe_data.h).
 *
 * Everything here adds ordinary ops to a graph (nothing is hidden from floe_graph_write_dot
 * or the graph file) and follows floe.h's conventions: graph builders record the graph's
 * sticky error and return an invalid FloeOutput (node NULL) / NULL node on failure, so user
 * code checks floe_graph_status() once; other calls return a floe_code and fill a status.
 */
#ifndef FLOE_TRAIN_H
#define FLOE_TRAIN_H

#include "floe.h"
#include "floe_collective.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------ */
/* Automatic differentiation. */

/* Adds to g the nodes computing d(sum_k ys[k] . grad_ys[k]) / d xs[i] for each i, by
 * walking back from ys with each op's registered gradient function and summing (AddN) the
 * gradients that reach one tensor over several paths. grad_ys may be NULL (ones of each
 * y's shape) and grad_ys[k].node may be NULL (ones). Gradients flow only through float
 * tensors; StopGradient, integer edges and non-differentiable ops (Shape, ArgMax, ...)
 * stop them. dxs[i] (caller's array of num_xs) is set to the gradient, or to an invalid
 * output (node NULL) when xs[i] does not influence the ys. An op on a path from xs to ys
 * with no gradient function is an error naming the node and the op. New nodes are named
 * "gradients/<forward node>/<op>". On error returns the code, sets the graph's sticky
 * error and status; nodes added before the error stay in g (unreachable from fetches). */
FLOE_API floe_code floe_gradients(FloeGraph *g, const FloeOutput *ys, int num_ys,
                                  const FloeOutput *xs, int num_xs, const FloeOutput *grad_ys,
                                  FloeOutput *dxs, FloeStatus *status);
/* Non-zero when op has a gradient function (standard or registered by a plugin) or is
 * registered as not differentiable. */
FLOE_API int floe_op_has_gradient(const char *op);

/* ------------------------------------------------------------------------------------ */
/* Variables. A variable is a VarHandleOp node (attributes dtype, shape, container,
 * shared_name, trainable) naming state in the session's resource manager; its value is read
 * with ReadVariableOp and set with AssignVariableOp / AssignAdd / AssignSub or an optimiser.
 * Variables persist across floe_session_run calls and live until the session is freed or
 * their container is reset. */

typedef enum FloeInitKind {
  FLOE_INIT_ZEROS = 0,
  FLOE_INIT_CONSTANT = 1,          /* a = value */
  FLOE_INIT_UNIFORM = 2,           /* [a, b) */
  FLOE_INIT_NORMAL = 3,            /* mean a, stddev b */
  FLOE_INIT_TRUNCATED_NORMAL = 4,  /* mean a, stddev b, resampled beyond 2 stddev */
  FLOE_INIT_GLOROT_UNIFORM = 5,    /* U(-l, l), l = sqrt(6 / (fan_in + fan_out)) */
  FLOE_INIT_GLOROT_NORMAL = 6,     /* truncated normal, stddev sqrt(2 / (fan_in + fan_out)) / .8796 */
  FLOE_INIT_HE_NORMAL = 7          /* truncated normal, stddev sqrt(2 / fan_in) / .8796 */
} FloeInitKind;

/* fan_in / fan_out: for rank 2 [in, out]; for rank 4 HWIO filters kh*kw*in and kh*kw*out;
 * rank 1 and 0 use the size for both. seed: 0 draws a seed per process. */
typedef struct FloeInitializer {
  FloeInitKind kind;
  double a, b;
  int64_t seed;
} FloeInitializer;

FLOE_API FloeInitializer floe_init_zeros(void);
FLOE_API FloeInitializer floe_init_constant(double value);
FLOE_API FloeInitializer floe_init_uniform(double lo, double hi, int64_t seed);
FLOE_API FloeInitializer floe_init_normal(double mean, double stddev, int64_t seed);
FLOE_API FloeInitializer floe_init_truncated_normal(double mean, double stddev, int64_t seed);
FLOE_API FloeInitializer floe_init_glorot_uniform(int64_t seed);
FLOE_API FloeInitializer floe_init_glorot_normal(int64_t seed);
FLOE_API FloeInitializer floe_init_he_normal(int64_t seed);

/* Adds a variable of a fully known shape: "<name>" (VarHandleOp), "<name>/read"
 * (ReadVariableOp) and "<name>/init" (AssignVariableOp of the initialiser's value, built
 * under "<name>/initializer/"). When g already has a VarHandleOp called name with the same
 * dtype and shape, returns that variable (so one model can be built twice, for training
 * and for inference, sharing weights); a different dtype or shape is an error. */
typedef struct FloeVariable {
  FloeOutput handle;  /* resource */
  FloeOutput value;   /* the "<name>/read" output */
  FloeNode *init;     /* the "<name>/init" node */
} FloeVariable;
FLOE_API FloeVariable floe_variable(FloeGraph *g, const char *name, FloeDType dtype,
                                    FloeShape shape, FloeInitializer init);
/* Like floe_variable, with trainable = 0: not collected by floe_minimize (global step,
 * optimiser slots, batch-norm moving averages). */
FLOE_API FloeVariable floe_variable_untrained(FloeGraph *g, const char *name, FloeDType dtype,
                                             FloeShape shape, FloeInitializer init);
/* The variable of an existing VarHandleOp node (its read and init nodes by name). */
FLOE_API FloeVariable floe_variable_get(FloeGraph *g, const char *name);
/* Variables of g (VarHandleOp nodes) in insertion order; trainable_only restricts to those
 * with trainable = true. Returns how many there are; writes at most cap into out. */
FLOE_API int floe_graph_variables(const FloeGraph *g, int trainable_only, FloeVariable *out,
                                  int cap);
/* A NoOp (default name "init") with control inputs on every "<var>/init" node of g:
 * running it as a target initialises every variable. */
FLOE_API FloeNode *floe_variables_initializer(FloeGraph *g, const char *name);

/* Assignments (nodes without outputs; run them as targets or use as control inputs). */
FLOE_API FloeNode *floe_assign(FloeGraph *g, const char *name, FloeOutput handle,
                               FloeOutput value);
FLOE_API FloeNode *floe_assign_add(FloeGraph *g, const char *name, FloeOutput handle,
                                   FloeOutput value);
FLOE_API FloeNode *floe_assign_sub(FloeGraph *g, const char *name, FloeOutput handle,
                                   FloeOutput value);
/* A new ReadVariableOp of handle. */
FLOE_API FloeOutput floe_read_variable(FloeGraph *g, const char *name, FloeOutput handle);

/* Drops every variable of `container` ("" is the default container) from the session's
 * resource manager: they read as uninitialised until assigned again. */
FLOE_API floe_code floe_session_reset_container(FloeSession *s, const char *container,
                                               FloeStatus *status);

/* ------------------------------------------------------------------------------------ */
/* Parameter servers (TensorFlow's replica_device_setter). For a cluster with ps tasks: every
 * variable goes to a ps task, everything else to the worker that runs the step. */

typedef enum FloePsStrategy {
  FLOE_PS_ROUND_ROBIN = 0,  /* ps 0, 1, ..., num_ps - 1, 0, ... in the variables' order */
  FLOE_PS_GREEDY_BYTES = 1  /* the ps with the fewest bytes of variables so far */
} FloePsStrategy;

typedef struct FloeReplicaDeviceOptions {
  size_t struct_size;        /* sizeof(FloeReplicaDeviceOptions) */
  int num_ps;                /* ps tasks /job:<ps_job>/task:0..num_ps-1 (1 to 4096; default 1) */
  const char *ps_job;        /* NULL or "": "ps"; borrowed for the call */
  const char *worker_device; /* every other node without a device, e.g. "/job:worker/task:1";
                              * NULL or "": left without (the session's default); borrowed */
  FloePsStrategy strategy;   /* default FLOE_PS_ROUND_ROBIN */
} FloeReplicaDeviceOptions;

/* Fills the defaults (above). */
FLOE_API void floe_replica_device_options_init(FloeReplicaDeviceOptions *o);
/* Requests devices for the nodes of g that have none: each VarHandleOp goes to
 * "/job:<ps_job>/task:<k>/device:cpu:0" by the strategy, variables that one node uses
 * together (a variable and its optimiser slots) as one group, a group one of whose variables
 * already requests a device following that device; nodes taking a resource input stay
 * without a request (the placer colocates them with the resource: updates run on the ps);
 * every other node gets worker_device, variables of container "local" (per-task state, TF's
 * local variables: floe_sync_replicas_minimize's local step) included. Call it on the whole graph (after floe_minimize):
 * variables added later are not placed. ps_bytes (may be NULL; the caller's array of
 * num_ps) receives the bytes of the variables it placed on each ps. A group whose variables
 * request different devices is INVALID_ARGUMENT naming them, before anything is changed;
 * out of memory midway leaves the requests made so far (the graph stays valid). */
FLOE_API floe_code floe_replica_device_setter(FloeGraph *g, const FloeReplicaDeviceOptions *o,
                                              int64_t *ps_bytes, FloeStatus *status);

/* A variable split along one axis into shards "<name>/part_<k>" (each a variable of its
 * own, which floe_replica_device_setter spreads over the ps tasks): num_shards of them, or
 * (num_shards 0) as few as keep each within max_shard_bytes (at least one slice each); never
 * more than the axis has rows. Shard k holds rows d/n + (k < d%n) of the axis, in order
 * (TensorFlow's split). Each shard names the whole and its place in it, so checkpoints hold
 * the whole variable (as "<name>", shards concatenated; optimiser slots too): a checkpoint
 * restores into any shard count, and into a model where the variable is not sharded, and
 * the other way round. Random initialisers draw each shard from seed + k (seed 0: a seed per
 * process); Glorot and He use the whole shape's fans. The nodes live in g; on error every
 * member is invalid / NULL and the graph's sticky error says why. */
typedef struct FloeShardedVariable {
  int num_shards;
  int axis;
  FloeOutput value;  /* the whole: Concat of the shards' reads ("<name>/concat") */
  FloeNode *init;    /* a NoOp ("<name>/init") running every shard's initialiser */
} FloeShardedVariable;
FLOE_API FloeShardedVariable floe_sharded_variable(FloeGraph *g, const char *name,
                                                   FloeDType dtype, FloeShape shape,
                                                   FloeInitializer init, int axis,
                                                   int num_shards, int64_t max_shard_bytes);
/* Rows ids (i32 or i64, any shape) of v (sharded along axis 0): ids.shape + the row's
 * shape. Each shard gives only the rows it holds (a ResourceGather that runs where the shard
 * lives), put back in the ids' order; an id outside [0, rows) is an error naming it when the
 * step runs. floe_minimize trains v through it. Nodes under "<name>/" (NULL:
 * "embedding_lookup"). */
FLOE_API FloeOutput floe_embedding_lookup_sharded(FloeGraph *g, const char *name,
                                                  const FloeShardedVariable *v, FloeOutput ids);

/* ------------------------------------------------------------------------------------ */
/* Optimisers and learning-rate schedules. */

typedef enum FloeOptimizerKind {
  FLOE_OPT_SGD = 0,
  FLOE_OPT_MOMENTUM = 1,
  FLOE_OPT_ADAM = 2,
  FLOE_OPT_RMSPROP = 3,
  FLOE_OPT_ADAGRAD = 4
} FloeOptimizerKind;

typedef enum FloeLrScheduleKind {
  FLOE_LR_CONSTANT = 0,
  FLOE_LR_EXPONENTIAL = 1, /* lr * decay_rate ^ (step / decay_steps), floored if staircase */
  FLOE_LR_PIECEWISE = 2,   /* values[i] while step < boundaries[i]; values[n] after */
  FLOE_LR_COSINE = 3       /* lr * (alpha + (1 - alpha) * (1 + cos(pi * min(step, decay_steps)
                              / decay_steps)) / 2) */
} FloeLrScheduleKind;

#define FLOE_LR_MAX_PIECES 16

typedef struct FloeOptimizerOptions {
  size_t struct_size;           /* sizeof(FloeOptimizerOptions) */
  FloeOptimizerKind kind;
  double learning_rate;         /* 1e-3 for Adam, RMSProp; 1e-2 for the others */
  double momentum;              /* Momentum: 0.9; RMSProp: 0 */
  int nesterov;                 /* Momentum and Adam */
  double beta1, beta2, epsilon; /* Adam: 0.9, 0.999, 1e-7; RMSProp / AdaGrad epsilon 1e-7 */
  double rho;                   /* RMSProp: 0.9 */
  double initial_accumulator;   /* AdaGrad: 0.1 */
  double weight_decay;          /* L2: adds weight_decay * var to each gradient; 0 = off */
  double clip_global_norm;      /* scale gradients so their global norm <= this; 0 = off */
  int use_locking;              /* 1 (default): each update holds its variables' locks */
  FloeLrScheduleKind schedule;
  int64_t decay_steps;          /* exponential and cosine */
  double decay_rate;            /* exponential */
  int staircase;                /* exponential */
  double cosine_alpha;          /* cosine: the floor as a fraction of learning_rate */
  int num_boundaries;           /* piecewise: boundaries[n], values[n + 1] */
  int64_t boundaries[FLOE_LR_MAX_PIECES];
  double values[FLOE_LR_MAX_PIECES + 1];
  int increment_global_step;    /* 1 (default): the step adds one to the global step; 0: it
                                 * does not (a second optimiser of the same step, e.g. its
                                 * own rate for some variables: TF's minimize without
                                 * global_step). The schedule and Adam's bias correction read
                                 * the global step either way. Sync replication: always 1 */
} FloeOptimizerOptions;

/* Fills the defaults of kind (above). */
FLOE_API void floe_optimizer_options_init(FloeOptimizerOptions *o, FloeOptimizerKind kind);
/* "sgd", "momentum", "adam", "rmsprop", "adagrad"; -1 if unknown. */
FLOE_API int floe_optimizer_kind_from_name(const char *name);

/* The i64 scalar variable "global_step" (untrained, zeros), created on first use. */
FLOE_API FloeVariable floe_global_step(FloeGraph *g);
/* The learning rate of o at `step` (an i64 scalar, normally the global step's value) as an
 * f32 scalar output, built under "<name>/". */
FLOE_API FloeOutput floe_learning_rate(FloeGraph *g, const char *name,
                                       const FloeOptimizerOptions *o, FloeOutput step);

/* Builds one training step under "<name>/" (default "train"): gradients of the scalar loss
 * with respect to vars (or, when vars is NULL, every trainable variable of g; a variable
 * the loss does not depend on is skipped), weight decay, clipping by global norm, the
 * optimiser's slot variables ("<var>/<slot>", untrained, included in the initializer and in
 * checkpoints), one fused update op per variable, and the global step's increment after all
 * updates. A variable's update runs after its gradient and after every read of the
 * variable that the loss or a gradient uses, and every node fed by such a read, so the step
 * computes with the values from before it; updates otherwise overlap the rest of the
 * backward pass (with clipping, every update waits for the global norm, so for every
 * gradient). Reads built after this call are not ordered with the updates. Returns the
 * NoOp to run as a target each step. */
FLOE_API FloeNode *floe_minimize(FloeGraph *g, const char *name, FloeOutput loss,
                                 const FloeOptimizerOptions *o, const FloeVariable *vars,
                                 int num_vars);
/* Synchronous replication with backup workers (TensorFlow's SyncReplicasOptimizer), for
 * between-graph replication: every replica (the chief and each worker) builds the same
 * graph with this in place of floe_minimize, and places it with floe_replica_device_setter.
 * Per trainable variable, a ConditionalAccumulator lives with the variable on its ps; a
 * replica's step applies its gradients there, tagged with its local step (a variable of
 * container "local", on the replica), then takes a token from the token queue (kept with the
 * global step) and sets its local step to the token. The chief runs chief_update again and
 * again on a thread of its own: it takes replicas_to_aggregate averaged gradients of every
 * variable (waiting for them), applies them with the optimiser o (schedules and Adam's bias
 * correction by the global step), advances the global step, raises the accumulators' global
 * step (so gradients computed before it are dropped as stale, and counted) and puts
 * total_num_replicas tokens holding the new global step in the queue. With
 * total_num_replicas > replicas_to_aggregate, the extra replicas are backups: each step
 * goes on with the first replicas_to_aggregate gradients, and the slowest replicas' are
 * dropped as stale. */
typedef struct FloeSyncReplicasOptions {
  size_t struct_size;          /* sizeof(FloeSyncReplicasOptions) */
  int replicas_to_aggregate;   /* gradients averaged per step (>= 1; default 1) */
  int total_num_replicas;      /* replicas training (>= replicas_to_aggregate; default 1) */
} FloeSyncReplicasOptions;
FLOE_API void floe_sync_replicas_options_init(FloeSyncReplicasOptions *o);

/* The nodes to run (all belong to g; nodes are named under "<name>/", the step "<name>"). */
typedef struct FloeSyncReplicas {
  FloeNode *train;         /* a replica's step: its gradients in, a token taken */
  FloeOutput token;        /* i64: the token that step took (the global step its next step
                            * computes at); fetch it with train to know where training is */
  FloeNode *local_init;    /* sets the local step to the global step: run once per replica,
                            * after the chief initialised (or restored) the variables */
  FloeNode *chief_update;  /* the chief's aggregation step (above) */
  FloeNode *close;         /* closes the token queue: replicas waiting for a token, and those
                            * that ask later, get FLOE_OUT_OF_RANGE (the end of training) */
  FloeOutput stale;        /* i64: stale gradients dropped so far (those of the first
                            * variable: a stale replica step drops one per variable) */
} FloeSyncReplicas;

/* Builds the above for the scalar loss (vars as floe_minimize's; o the optimiser; name NULL:
 * "sync_replicas"). On error every member is NULL / invalid and the graph's sticky error
 * says why. */
FLOE_API FloeSyncReplicas floe_sync_replicas_minimize(FloeGraph *g, const char *name,
                                                      FloeOutput loss,
                                                      const FloeOptimizerOptions *o,
                                                      const FloeSyncReplicasOptions *so,
                                                      const FloeVariable *vars, int num_vars);
/* Data-parallel training without parameter servers (Horovod's, TF's MultiWorkerMirrored):
 * every replica holds all the variables, computes its gradients on its own batch, and the
 * gradients are all-reduced (averaged) across the replicas before each replica applies the
 * same update, so the replicas' variables stay equal. Collectives: floe_collective.h. */
typedef struct FloeAllReduceOptions {
  size_t struct_size;       /* sizeof(FloeAllReduceOptions) */
  int group_size;           /* replicas (>= 1) */
  int64_t group_key;        /* default 1 */
  /* Instance keys used: instance_key, instance_key + 1, ... (one per fused buffer; the
   * variable broadcast uses instance_key + 1000000 + i). Default 1. */
  int64_t instance_key;
  FloeReduceOp op;          /* FLOE_REDUCE_MEAN (default) or SUM */
  /* Tensor fusion (Horovod's): consecutive gradients of one dtype are packed into one
   * buffer of at most fusion_bytes and all-reduced together (one collective instead of
   * many small ones); a gradient larger than that goes alone. 0: no fusion. Default 4 MiB. */
  int64_t fusion_bytes;
  const char *backend;      /* as FloeCollectiveOptions.backend (NULL: auto) */
} FloeAllReduceOptions;
FLOE_API void floe_all_reduce_options_init(FloeAllReduceOptions *o);

/* All-reduces xs[0..n) (each with a fully defined shape) with o's op, fusing them as o says;
 * out[i] (caller's array of n) gets the reduced xs[i], same shape. Nodes under "<name>/"
 * (NULL: "all_reduce") on g's device scope. FLOE_OK, or the graph's sticky error's code. */
FLOE_API floe_code floe_all_reduce_n(FloeGraph *g, const char *name, const FloeOutput *xs, int n,
                                     const FloeAllReduceOptions *o, FloeOutput *out);
/* floe_minimize whose gradients are all-reduced (after weight decay, before clipping by the
 * global norm, which then sees the averaged gradients) across o's replicas. Every replica
 * builds the same graph and runs the returned step once per training step: the same number
 * of steps on every replica. */
FLOE_API FloeNode *floe_allreduce_minimize(FloeGraph *g, const char *name, FloeOutput loss,
                                           const FloeOptimizerOptions *opt,
                                           const FloeAllReduceOptions *o,
                                           const FloeVariable *vars, int num_vars);
/* A target that makes every replica's variables (all of g's, trained or not: slots and the
 * global step too) equal to the root's: the root (is_root 1) broadcasts each variable's
 * value, the others assign what they receive. Run it once on every replica after the root
 * initialised or restored its variables and the others initialised theirs. Under
 * "<name>/" (NULL: "broadcast_variables"). NULL with the graph's error on failure. */
FLOE_API FloeNode *floe_broadcast_variables(FloeGraph *g, const char *name, int is_root,
                                            const FloeAllReduceOptions *o);

/* sqrt(sum of squares of every tensor), f32 scalar (the clipping norm). */
FLOE_API FloeOutput floe_global_norm(FloeGraph *g, const char *name, const FloeOutput *ts,
                                     int n);

/* ------------------------------------------------------------------------------------ */
/* Checkpoints: safetensors files ("<prefix>-<step>.safetensors", step zero-padded to 10
 * digits) holding every variable of the session's graph under its node name, with
 * "__metadata__" {"format": "floe", "global_step": "<n>", "variables_hash": "<16 hex>"}
 * (FNV-1a 64 over sorted "name dtype shape" lines). */

/* Writes every variable of the session's graph (all must be initialised: the error names
 * the first that is not) to dir (created if missing) atomically: a temporary file in dir,
 * fsync, rename, fsync of dir. Then removes all but the newest `keep` checkpoints of prefix
 * (keep 0: keep all). A failed save (full disk, I/O error) leaves every earlier checkpoint
 * intact and no temporary file. prefix NULL: "ckpt". *path_out (may be NULL) receives the
 * file's path, caller frees with free(). */
FLOE_API floe_code floe_checkpoint_save(FloeSession *s, const char *dir, const char *prefix,
                                        int64_t step, int keep, char **path_out,
                                        FloeStatus *status);
/* Restores every variable of the session's graph from path (a file, a sharded checkpoint's
 * ".index.json", or a directory: its newest checkpoint of either kind). A sharded
 * checkpoint reshards: each variable (or shard of one) reads exactly its rows from the
 * parts the index names, whatever the task or shard count at save time. All or nothing: a
 * missing variable, a wrong dtype or shape, or a truncated, corrupt, missing or replaced
 * file is an error naming the variable, the file and the byte offset, and no variable
 * changes. *step_out (may be NULL) receives the stored global step. */
FLOE_API floe_code floe_checkpoint_restore(FloeSession *s, const char *path, int64_t *step_out,
                                           FloeStatus *status);
/* The newest checkpoint of prefix (NULL: "ckpt") in dir, by step: a file, or a sharded
 * checkpoint's index (which wins at an equal step). Caller frees with free().
 * NULL + FLOE_NOT_FOUND naming dir when there is none. */
FLOE_API char *floe_checkpoint_latest(const char *dir, const char *prefix, FloeStatus *status);

/* Sharded checkpoints (docs/checkpoints.md): every task that holds variables writes its own
 * safetensors file "dir/<prefix>-<step>.shards/<job>-<task>.safetensors" (one process:
 * "localhost-0.safetensors"), then the caller's process commits the index
 * "dir/<prefix>-<step>.index.json" (HF-style weight_map, and how to assemble each variable
 * from its parts) atomically: a temporary file, fsync, rename, fsync of dir. A checkpoint
 * without its index does not exist: a crash at any moment leaves the previous checkpoint or
 * the new one, whole. floe_checkpoint_latest and floe_checkpoint_restore find both kinds
 * (the newest step wins; at one step the index). */

/* The moments of a sharded save, for tests (FloeCheckpointShardOptions.phase). */
typedef enum FloeCheckpointPhase {
  FLOE_CHECKPOINT_BEFORE_SHARDS = 1,    /* the folder exists; no shard written yet */
  FLOE_CHECKPOINT_AFTER_SHARDS = 2,     /* every shard file written, fsync'd and renamed in */
  FLOE_CHECKPOINT_AFTER_INDEX_TEMP = 3, /* the index written and fsync'd under a temporary
                                         * name, not yet renamed */
  FLOE_CHECKPOINT_AFTER_COMMIT = 4      /* the index renamed into place (before retention) */
} FloeCheckpointPhase;

typedef struct FloeCheckpointShardOptions {
  size_t struct_size;  /* sizeof(FloeCheckpointShardOptions) */
  /* Called at each phase with the path it concerns (the shard folder, the temporary index,
   * the index; borrowed for the call). Non-zero stops the save there, leaving what it wrote
   * as a crash would, and the save returns FLOE_CANCELLED. NULL: none. For tests. */
  int (*phase)(void *arg, FloeCheckpointPhase phase, const char *path);
  void *phase_arg;     /* passed to phase; borrowed */
  int64_t timeout_ms;  /* deadline of the step that writes the shards (0: none) */
} FloeCheckpointShardOptions;

/* Fills the defaults (no phase callback, no deadline). */
FLOE_API void floe_checkpoint_shard_options_init(FloeCheckpointShardOptions *o);
/* Writes every variable of the session's graph as a sharded checkpoint of step in dir
 * (created if missing; on a cluster every task must see dir at the same path: a shared
 * filesystem). Each task's file is written by that task, in one step across the cluster, so
 * no value travels to the caller; the parts of a sharded variable are stored under their
 * own names ("<name>/part_<k>") and the index says where each lies in the whole. Then
 * removes all but the newest `keep` checkpoints of prefix (0: keep all; both kinds, an
 * index before its folder) and shard folders that no index names (a crashed save's). The
 * variables must not change during the call: pause training first. prefix NULL: "ckpt"; o
 * NULL: the defaults. *index_path_out (may be NULL) receives the index's path, caller frees
 * with free(). A failed save leaves every committed checkpoint as it was, except that saving
 * a step that already has a committed checkpoint first removes that one's index. */
FLOE_API floe_code floe_checkpoint_save_sharded(FloeSession *s, const char *dir,
                                                const char *prefix, int64_t step, int keep,
                                                const FloeCheckpointShardOptions *o,
                                                char **index_path_out, FloeStatus *status);

/* Writes a deployable graph file: the nodes that `outputs` ("node" or "node:i") need, with
 * every variable read replaced by a Const of its current value in the session (frozen), so
 * `floe run` executes it with only the core and a device plugin. Nodes needing a
 * Placeholder keep it. Training-only state (optimiser slots, global step) is not included
 * unless an output needs it. */
FLOE_API floe_code floe_export_frozen(FloeSession *s, const char *const *outputs,
                                      int num_outputs, const char *path, FloeStatus *status);

/* ------------------------------------------------------------------------------------ */
/* Layer builders (NHWC images). Each adds ordinary ops under "<name>/": variables
 * "<name>/kernel" (Glorot uniform from seed) and "<name>/bias" (zeros) where it has
 * weights. Building the same layer name again reuses its variables. */

typedef enum FloeActivation {
  FLOE_ACT_NONE = 0,
  FLOE_ACT_RELU = 1,
  FLOE_ACT_SIGMOID = 2,
  FLOE_ACT_TANH = 3,
  FLOE_ACT_SOFTMAX = 4
} FloeActivation;

/* x [batch, in] -> [batch, units]. */
FLOE_API FloeOutput floe_layer_dense(FloeGraph *g, const char *name, FloeOutput x,
                                     int64_t units, FloeActivation act, int64_t seed);
/* x [N, H, W, C] -> [N, H', W', filters]; kernel [kh, kw, C, filters]; padding "SAME" or
 * "VALID". */
FLOE_API FloeOutput floe_layer_conv2d(FloeGraph *g, const char *name, FloeOutput x,
                                      int64_t filters, int kh, int kw, int stride,
                                      const char *padding, FloeActivation act, int64_t seed);
FLOE_API FloeOutput floe_layer_max_pool(FloeGraph *g, const char *name, FloeOutput x, int k,
                                        int stride, const char *padding);
FLOE_API FloeOutput floe_layer_avg_pool(FloeGraph *g, const char *name, FloeOutput x, int k,
                                        int stride, const char *padding);
/* [N, ...] -> [N, product of the rest]. */
FLOE_API FloeOutput floe_layer_flatten(FloeGraph *g, const char *name, FloeOutput x);
/* training: zero each element with probability rate and scale the rest by 1 / (1 - rate),
 * with a mask drawn by StatelessRandomUniform from (seed, step) (step: an i64 scalar such
 * as the global step's value, so a resumed run draws the same masks; invalid: 0).
 * Not training: identity. */
FLOE_API FloeOutput floe_layer_dropout(FloeGraph *g, const char *name, FloeOutput x,
                                       double rate, int training, int64_t seed,
                                       FloeOutput step);
/* Normalises over every dim but the last (channels). Variables gamma (ones), beta (zeros),
 * moving_mean (zeros), moving_variance (ones), the last two untrained. training: batch
 * statistics, and the output carries control inputs on the moving averages' updates
 * (moving = momentum * moving + (1 - momentum) * batch). Not training: moving
 * statistics. */
FLOE_API FloeOutput floe_layer_batch_norm(FloeGraph *g, const char *name, FloeOutput x,
                                          int training, double momentum, double epsilon);
/* ids (any int shape) -> ids.shape + [dim]; table "<name>/embeddings" [vocab, dim],
 * uniform(-0.05, 0.05) from seed. */
FLOE_API FloeOutput floe_layer_embedding(FloeGraph *g, const char *name, FloeOutput ids,
                                         int64_t vocab, int64_t dim, int64_t seed);
/* Mean over the batch of the softmax cross-entropy of logits [batch, classes] against
 * integer labels [batch] (f32 scalar). */
FLOE_API FloeOutput floe_sparse_softmax_cross_entropy(FloeGraph *g, const char *name,
                                                      FloeOutput logits, FloeOutput labels);
/* TensorFlow's sampled_softmax_loss, for training a softmax over many classes: the mean over
 * the batch of the cross-entropy of each row's true class against num_sampled classes drawn
 * once per run for the whole batch by LogUniformCandidateSampler (unique: without
 * replacement), so classes must be numbered by falling frequency. Every logit
 * <inputs, weights[c]> + biases[c] has the log of its expected count subtracted, and a
 * sampled class equal to the row's label is masked out (accidental hits). weights
 * [num_classes, dim], biases [num_classes], inputs [batch, dim] (one float dtype), labels
 * [batch] i32/i64 in [0, num_classes). seed as RandomUniform's (0: a seed per process).
 * Returns a scalar of the inputs' dtype; nodes live in g under "<name>/" (NULL:
 * "sampled_softmax_loss"). Evaluate with the full softmax: this is a training loss. */
FLOE_API FloeOutput floe_sampled_softmax_loss(FloeGraph *g, const char *name, FloeOutput weights,
                                              FloeOutput biases, FloeOutput inputs,
                                              FloeOutput labels, int64_t num_sampled,
                                              int64_t num_classes, int unique, int64_t seed);
/* The same with the weights [num_classes, dim] and biases [num_classes] as sharded variables
 * (floe_sharded_variable, split along axis 0, e.g. over ps tasks): the true classes' and the
 * sampled classes' rows are looked up with floe_embedding_lookup_sharded, so each shard gives
 * only the rows it holds (on a cluster, only those rows cross the network, and the gradient
 * goes back as rows). Equal to floe_sampled_softmax_loss on the whole variables. Both
 * borrowed for the call; nodes in g under "<name>/". */
FLOE_API FloeOutput floe_sampled_softmax_loss_sharded(FloeGraph *g, const char *name,
                                                      const FloeShardedVariable *weights,
                                                      const FloeShardedVariable *biases,
                                                      FloeOutput inputs, FloeOutput labels,
                                                      int64_t num_sampled, int64_t num_classes,
                                                      int unique, int64_t seed);

#ifdef __cplusplus
}
#endif
#endif /* FLOE_TRAIN_H */
