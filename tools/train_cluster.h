/* SPDX-License-Identifier: Apache-2.0 */
/* train_cluster.h - floe train on a cluster (between-graph replication, TF 1.x style): every
 * training task (the chief and each worker) runs floe train with the same options and builds
 * the same graph, whose variables live on the ps tasks (floe_replica_device_setter); each
 * task's session is a master of its own, and the ps tasks' variables are shared by all of
 * them. ps tasks only serve. The chief initialises the variables (or restores the newest
 * checkpoint) and the workers wait until every variable reads as initialised; the chief
 * tests, checkpoints and reports. Training task r of R takes global batches r, r + R, ...
 * (batch b of epoch e is global batch e * per_epoch + b), so the tasks together take each
 * batch once. */
#ifndef FLOE_TOOLS_TRAIN_CLUSTER_H
#define FLOE_TOOLS_TRAIN_CLUSTER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <floe/floe.h>
#include <floe/floe_dist.h>

#include "json.h"
#include "train_guard.h"

typedef struct TrainCluster {
  /* options (the caller's; strings borrowed) */
  const char *spec;           /* --cluster: env, a file, or JSON; NULL: one process */
  const char *job;            /* --job (NULL: the spec's task) */
  int task;                   /* --task */
  int greedy;                 /* --ps-strategy greedy (else round-robin) */
  double heartbeat_timeout;   /* seconds; 0: the default */
  int sync;                   /* --replication sync (else async) */
  /* --replication allreduce: no ps tasks; every training task holds the variables and the
   * gradients are averaged by collectives (floe_allreduce_minimize) */
  int allreduce;
  int64_t fusion_bytes;       /* --fusion-bytes (-1: the library's default) */
  const char *collective;     /* --collective NAME (NULL: auto) */
  int aggregate;              /* --replicas-to-aggregate; 0: every training task */
  int given;                  /* a cluster option other than --cluster was given */
  /* what start found */
  FloeServer *server;
  int is_ps, is_chief;
  int replica, replicas;      /* this task among the training tasks, and how many there are */
  int num_ps;
  char worker_device[128];    /* "/job:worker/task:1" */
  int64_t *ps_bytes;          /* variables' bytes per ps (num_ps) */
  /* bytes this task sent to / received from each ps during its training steps (num_ps) */
  int64_t *to_ps, *from_ps;
  int64_t to_peers, from_peers; /* the same with every other task (allreduce's traffic) */
  FloeTaskTraffic *rows, *mark; /* scratch: the traffic by peer, and its value at begin */
  int cap_rows, num_mark;
  /* consistent checkpoints under async replication: the pauses asked (the chief) or seen
   * (a worker), and when a worker last looked for one */
  int64_t pauses;
  double pause_checked;
  int64_t pause_checks;       /* a worker's look-ups of the store (for the JSON) */
  double paused_seconds;      /* time a worker spent paused */
} TrainCluster;

/* The cluster options every floe train model takes: --cluster, --job, --task, --replication,
 * --replicas-to-aggregate, --ps-tasks, --ps-strategy, --heartbeat-timeout, --fusion-bytes
 * and --collective, by long name
 * ("job") with its argument (borrowed: argv's). 0 when taken, 1 when name is no cluster
 * option, 2 after printing a usage error. */
int train_cluster_option(TrainCluster *c, const char *name, const char *arg);
/* After parsing: 0, or 2 after printing what does not go together. */
int train_cluster_check_options(const TrainCluster *c);

/* Every training step's wall time, for the median and the 90th percentile; and the most
 * tensor bytes a step after the first had alive at once above those alive when it began
 * (floe_memory_stats: its activations, gradients and temporaries, not the variables or the
 * fed batch; a reader thread filling an input queue meanwhile counts too). */
typedef struct TrainStepTimes {
  int64_t n, cap;
  double *v;
  int64_t peak_bytes;
} TrainStepTimes;
/* Before a step: the tensor bytes alive now (pass it to train_step_mem_end); starts a new
 * high-water mark. */
int64_t train_step_mem_begin(void);
/* After it (before train_step_times_add counts it): folds the step's rise above
 * `live_before` into t->peak_bytes, from the second step on. */
void train_step_mem_end(TrainStepTimes *t, int64_t live_before);
/* 0, or -1 when out of memory. */
int train_step_times_add(TrainStepTimes *t, double secs);
/* The q-quantile (nearest rank) of the steps' times; NaN when there were none. Sorts. */
double train_step_times_quantile(TrainStepTimes *t, double q);

/* The global step variable's value (fetching step_name) into *step: 0, or -1 with st set. */
int train_fetch_global_step(FloeSession *s, const FloeRunOptions *ro, const char *step_name,
                            int64_t *step, FloeStatus *st);
/* The chief: waits until the shared global step reaches end (every task's share applied),
 * into *step. 0, or 1 after printing why (a lost task ends the session's steps, so this never
 * waits on one; Ctrl-C ends the wait). */
int train_wait_global_step(FloeSession *s, const FloeRunOptions *ro, const char *step_name,
                           int64_t end, int64_t *step, FloeStatus *st, const char *tool);
/* The cluster's keys of the chief's JSON: cluster_task, replication, replicas_to_aggregate
 * (K) and stale_gradients_dropped (stale; sync only), replicas, ps_tasks, ps_strategy,
 * ps_variable_bytes, and bytes_to_ps_per_step / bytes_from_ps_per_step over steps steps. */
void train_cluster_json(JsonWriter *w, const TrainCluster *c, int64_t steps, int K,
                        int64_t stale);

/* --replication allreduce: "variables_checksum", train_vars_checksum of s's variables v as 8
 * hex digits, in every training task's line, so the replicas' models can be compared (and a
 * checkpoint checked against them); nothing under the other replications. 0, or 1 after
 * printing why. */
int train_cluster_checksum_json(JsonWriter *w, const TrainCluster *c, FloeSession *s,
                                const TrainVars *v, const char *tool);

/* --replication allreduce: the options of this cluster's collectives (its training tasks,
 * --fusion-bytes, --collective) into *ao. */
void train_cluster_allreduce_options(const TrainCluster *c, FloeAllReduceOptions *ao);
/* --replication allreduce: adds to g the target that gives every task the chief's variables
 * (floe_broadcast_variables; nothing under the other replications). After the session is made
 * and the chief initialised or restored its variables (the others initialised theirs),
 * train_cluster_broadcast runs it and reads the global step the chief's values say into
 * *step. 0, or 1 after printing why. */
void train_cluster_add_broadcast(const TrainCluster *c, FloeGraph *g);
int train_cluster_broadcast(const TrainCluster *c, FloeSession *s, const FloeRunOptions *ro,
                            const char *step_name, int64_t *step, const char *tool);

/* Starts this task's server (until the chief leaves) and works out the roles. 0, or the
 * exit status after printing why (tool is the command's name for messages). */
int train_cluster_start(TrainCluster *c, FloeRuntime *rt, const char *tool);
/* Adds "ready/<variable>" (VarIsInitializedOp) for every shared variable of v (not those of
 * the "local" container, which each task initialises itself), then places g's variables on
 * the ps tasks and the rest on this task; with allreduce, every node on this task. 0, or 1
 * after printing why. */
int train_cluster_place(TrainCluster *c, FloeGraph *g, const TrainVars *v, const char *tool);
/* A worker: waits (polling every 50 ms, up to timeout_ms) until every variable of v reads as
 * initialised (the chief initialised or restored them). 0, or 1 after printing why. */
int train_cluster_wait_ready(const TrainCluster *c, FloeGraph *g, FloeSession *s,
                             const TrainVars *v, int64_t timeout_ms, const char *tool);
/* Where training starts, through the cluster's key-value store: the chief publishes the
 * global step it starts from (0, or the restored checkpoint's) once the variables are
 * initialised or restored; the other training tasks wait for it (up to timeout_ms) rather
 * than read the live global step, which the chief may have moved on since. 0, or 1 after
 * printing why. */
int train_cluster_publish_start(const TrainCluster *c, int64_t step, const char *tool);
int train_cluster_start_step(const TrainCluster *c, int64_t timeout_ms, int64_t *step,
                             const char *tool);
/* Serves until the chief leaves, or SIGTERM or SIGINT (ps tasks, and workers done training,
 * whose servers the others' steps may still use). 0, or 1 after printing why; under
 * in-process recovery (train_recover_budget > 0) a chief that left without a signal here is
 * TRAIN_REFORM: the chief may come back (a new one, or the same re-forming the cluster) and
 * need this task again. */
#define TRAIN_REFORM 3
int train_cluster_serve(TrainCluster *c, const char *tool);
/* The chief, its job done, under in-process recovery: tells the other tasks (the key-value
 * store) and waits up to 5 s for each to say it saw it, so that none takes the chief's
 * leaving for a failure to re-form after. Best effort; nothing without FLOE_RECOVER. */
void train_cluster_finish(TrainCluster *c);
/* Synchronous replication's chief: a thread running the aggregation step (target) again and
 * again until train_updater_stop. */
/* Writes a checkpoint of the variables as they are now; 0, or -1 with why in msg. */
typedef int (*TrainSaveFn)(void *arg, char *msg, size_t len);

typedef struct TrainUpdater {
  FloeSession *s;
  const char *target; /* borrowed */
  pthread_t thread;
  int started;
  atomic_int stop;
  atomic_int exited;  /* the thread is past its last step */
  floe_code rc;       /* the first failure (after stop: ignored) */
  char msg[1024];
  int64_t updates;
  /* a checkpoint asked for (train_updater_request_save): the thread writes it between two of
   * its updates, where the variables are exactly at the global step */
  TrainSaveFn save;
  void *save_arg;
  atomic_int save_state;  /* 0 none, 1 asked, 2 done */
  /* saving: the thread is writing a checkpoint; under mu, so train_updater_stop never cancels
   * the save's own runs (it cancels only while saving is 0, holding mu) */
  pthread_mutex_t mu;
  int saving;
  int save_rc;
  char save_msg[1024];
} TrainUpdater;
/* 0, or 1 after printing why. */
int train_updater_start(TrainUpdater *u, FloeSession *s, const char *target, const char *tool);
/* Stops the thread (cancelling the update it waits in) and joins it. 0, or 1 after printing
 * the failure that ended it before it was asked to stop. */
int train_updater_stop(TrainUpdater *u, const char *tool);

/* Asks the update thread for a checkpoint (fn(arg) between two of its updates); returns at
 * once, so the caller's next step (whose token waits for the next update) goes on. A request
 * still pending is replaced. */
void train_updater_request_save(TrainUpdater *u, TrainSaveFn fn, void *arg);
/* The last request's outcome: 0 none or not yet done, 1 written, -1 failed (why in
 * u->save_msg). Taking a result clears it. */
int train_updater_save_result(TrainUpdater *u);

/* Consistent checkpoints under async replication, through the cluster's key-value store:
 * the chief asks every worker to pause and waits (up to 120 s, through a Ctrl-C) until each
 * has acknowledged (after its current step returned, so its updates are applied) or has
 * finished its share; then saves; then releases them. 0, or 1 after printing why. */
int train_cluster_pause_workers(TrainCluster *c, const char *tool);
int train_cluster_resume_workers(TrainCluster *c, const char *tool);
/* A worker, between two steps: at most every 50 ms, looks for a pause; when one is asked,
 * acknowledges it and waits for the release. 0, or 1 after printing why. */
int train_cluster_pause_point(TrainCluster *c, const char *tool);
/* A worker whose share is trained: the chief no longer waits for it to pause. */
void train_cluster_worker_done(TrainCluster *c);
/* A sharded checkpoint (floe_checkpoint_save_sharded, keep 3) of s's variables at the global
 * step the variable step_name holds now, after checking every variable finite. The caller
 * has made the variables still (paused the updates). FLOE_TEST_CKPT_CRASH=before-shards,
 * after-shards, after-index-temp or after-commit ends the process (_exit 137) at that phase
 * of the save: for tests only. *step (may be NULL): the step saved. 0, or -1 with why in msg. */
int train_cluster_save(FloeSession *s, const char *dir, const char *step_name,
                       const TrainVars *vars, int64_t *step, char *msg, size_t len);
/* train_cluster_save as a TrainSaveFn (arg: a TrainSaveArgs; step: the step saved). */
typedef struct TrainSaveArgs {
  FloeSession *s;
  const char *dir, *step_name; /* borrowed */
  const TrainVars *vars;
  int64_t step;
} TrainSaveArgs;
int train_cluster_save_fn(void *arg, char *msg, size_t len);
/* The chief's checkpoint after an epoch, consistent across the cluster: under sync asked of
 * the update thread while it runs (the result of the one before is reported: 1 on failure);
 * under async with the workers paused unless `all_done` (every share trained); allreduce:
 * the chief's own variables. 0, or 1 after printing why. */
int train_cluster_checkpoint(TrainCluster *c, TrainUpdater *u, TrainSaveArgs *a, int all_done,
                             const char *tool);

/* Around each training step: what the step moved to and from each ps is added to to_ps and
 * from_ps (this process's data plane counts every value that crosses it). */
void train_cluster_count_begin(TrainCluster *c);
void train_cluster_count_end(TrainCluster *c);
/* For tests and benchmarks only: with FLOE_TEST_STEP_DELAY_MEAN_MS set (milliseconds) in
 * this task's environment, and FLOE_TEST_STEP_DELAY_TASK unset or naming this task
 * ("/job:worker/task:1"), sleeps a random delay drawn from an exponential distribution of
 * that mean before each step (an injected straggler); otherwise returns at once. */
void train_cluster_straggle(const TrainCluster *c);
/* floe launch --max-restarts starts every task of a failed job again with FLOE_RESTART=k
 * (k = 1, 2, ...): train_restart_count is k, or 0 in a job's first start. A restarted task
 * resumes from the last checkpoint (train_restart_resumes sets *resume when there is a
 * checkpoint dir, and says so on stderr; returns k). */
int train_restart_count(void);
int train_restart_resumes(const char *checkpoint_dir, int *resume);
/* In-process recovery (floe launch --restart task sets FLOE_RECOVER=N in every task): a
 * task of a cluster whose training fails because the cluster lost a task (its steps, waits
 * or saves fail, or, serving, its chief leaves) frees its session and server and trains
 * again in the same process: a new server registers with the chief (the same one re-forming
 * the cluster, or a restarted one), and training resumes from the last committed checkpoint
 * as in a restarted job. train_recover_budget is N (0: off); train_recovery_begin counts one
 * recovery (train_restart_count includes them, so the run resumes and the test hook stays
 * off) and remembers when the failure was seen; train_recoveries is how many began, and
 * train_recovery_seconds the time since the last began. */
int train_recover_budget(void);
void train_recovery_begin(void);
int train_recoveries(void);
double train_recovery_seconds(void);
/* The chief's exit status when the cluster did not re-form within the recovery timeout (a
 * task hangs): floe launch then starts the whole job again. */
#define TRAIN_EXIT_REFORM_FAILED 75
/* Sets so->cluster, and while the chief re-forms the cluster the time its session waits for
 * the tasks (5 s with a heartbeat timeout under 6 s, else that timeout plus 60 s). */
void train_cluster_session_options(const TrainCluster *c, FloeSessionOptions *so);
/* After floe_session_new failed with st (the error printed here): 1, or
 * TRAIN_EXIT_REFORM_FAILED when the chief was re-forming the cluster (said so). */
int train_cluster_session_failed(const TrainCluster *c, const FloeSessionOptions *so,
                                 FloeStatus *st, const char *tool);
/* run(argc, argv, &reform) again and again while it sets reform (a failure the cluster
 * caused, under FLOE_RECOVER) and recoveries are left: what it returned last. A run decides
 * reform with train_recoverable. */
int train_recovering(int (*run)(int argc, char **argv, int *reform), int argc, char **argv);
/* Whether a run that ended with rc may re-form the cluster: a failure (not a usage error,
 * Ctrl-C or a chief that gave up re-forming) after this task's server was up (cluster_up),
 * not fatal (a diverged run), with FLOE_RECOVER set. */
int train_recoverable(int rc, int cluster_up, int fatal);
/* Tests of recovery (floe launch --max-restarts): with FLOE_TEST_KILL_AT_STEP=S in the
 * environment of a job's first start (FLOE_RESTART unset or 0), every task publishes its pid
 * in the cluster's key-value store (train_cluster_start does it), and the chief, once the
 * global step reaches S (train_cluster_test_kill after each of its steps), sends SIGKILL to
 * FLOE_TEST_KILL_TASK ("/job:ps/task:0"; default the chief itself), or SIGSTOP with
 * FLOE_TEST_KILL_SIGNAL=STOP (a task that hangs): a kill -9 at a chosen step of a run with a
 * fixed data order. Tasks of one machine only. Tests and benchmarks only. */
void train_cluster_test_publish_pid(TrainCluster *c);
void train_cluster_test_kill(TrainCluster *c, int64_t global_step);
void train_cluster_free(TrainCluster *c);

/* The step split of a task's training steps (FloeStepSplit; docs/benchmarks.md, "Step
 * split"): each step's wall time cut into compute, wait_params (waiting for the ps tasks'
 * values before the last compute) and send_grads (after it), from a trace of that step alone.
 * Any model's loop can use it around its training steps:
 *
 *     TrainSplit sp;
 *     train_split_init(&sp, s, keep);
 *     loop: train_split_begin(&sp, &ro); floe_session_run_opts(s, &ro, ...);
 *           train_split_end(&sp, &ro, rc == FLOE_OK);
 *     "step_split_ms": train_split_json(&w, &sp)
 *
 * keep = 0: the session traces only while a training step runs, and each step's events are
 * dropped once it is split (memory stays bounded; other runs, an evaluation or the sync
 * chief's update thread, are traced only while they overlap a training step, and never
 * counted). keep = 1: the caller traces already (--trace, --profile) and manages tracing;
 * the events are left alone. */
typedef struct TrainSplit {
  FloeSession *s;     /* borrowed */
  int keep;
  FloeStepSplit sum;  /* the training steps split so far */
  FloeStepSplit last; /* the last step's (FloeRunOptions.split points here while it runs) */
  int64_t overhead_ns; /* turning tracing on and off and dropping the events, summed */
  int warmups;        /* steps left out so far (the first: see train_split_end) */
} TrainSplit;
void train_split_init(TrainSplit *p, FloeSession *s, int keep);
/* Before a training step: traces it and asks ro (the step's options, the caller's) for its
 * split. */
void train_split_begin(TrainSplit *p, FloeRunOptions *ro);
/* After it: ok (the run succeeded) adds its split to sum, except the first successful
 * step's (a warm-up: it builds the executors, registers the pieces on the ps tasks and
 * touches the kernels' libraries for the first time); ro->split is reset to NULL. */
void train_split_end(TrainSplit *p, FloeRunOptions *ro, int ok);
/* {"steps", "wall", "compute", "wait_params", "send_grads", "kernels", "tracing",
 * "overhead"}: the steps split, and per-step means in milliseconds (compute + wait_params +
 * send_grads = wall; kernels: the part of compute inside compute kernels; tracing +
 * overhead: what measuring cost a step), or null when no step was split. */
void train_split_json(JsonWriter *w, const TrainSplit *p);

/* A worker's own JSON line when it is done training (the chief prints the run's; under floe
 * launch it goes to launch's standard error): model, steps, rate_key (samples_per_sec,
 * words_per_sec) = rate, train_seconds, step_time_p50_ms / _p90_ms (sorts times), the
 * cluster's keys (train_cluster_json with K and stale), train_cluster_checksum_json of s's
 * variables v, and step_split_ms. 0, or 1 after printing why. */
int train_cluster_worker_json(const TrainCluster *c, const char *model, int64_t steps,
                              const char *rate_key, double rate, double train_secs,
                              TrainStepTimes *times, int K, int64_t stale, const TrainSplit *split,
                              FloeSession *s, const TrainVars *v, const char *tool);

#endif
