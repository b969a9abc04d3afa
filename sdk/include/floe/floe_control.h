/* SPDX-License-Identifier: Apache-2.0 */
/* floe_control.h - dynamic control flow inside the graph: conditionals and while loops,
 * built from the primitives Switch, Merge, Enter, Exit, NextIteration and LoopCond (see
 * core/exec/README.md, "Control flow"). Included by floe.h.
 *
 * The callbacks below build ordinary nodes into g; the builders wire the primitives around
 * them so users never do. Conventions are floe.h's: on failure a builder records the graph's
 * sticky error and returns its code; outputs are then invalid (node NULL).
 *
 * Values a callback uses without receiving them as arguments (tensors built before the
 * cond or loop) are captured automatically: inside a loop they enter as loop invariants;
 * nodes of a branch or body that depend on nothing inside it are made to wait for the
 * branch or iteration, so they run only when it does.
 */
#ifndef FLOE_CONTROL_H
#define FLOE_CONTROL_H

#include "floe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Builds one branch of a cond: ins[i] is the i-th input as seen inside the branch; sets
 * outs[0..num_outputs) (every branch the same count and dtypes). Return FLOE_OK, or an
 * error code (the graph's sticky error, or your own) to abandon the cond. */
typedef floe_code (*FloeBranchFn)(FloeGraph *g, void *arg, const FloeOutput *ins, int num_ins,
                                  FloeOutput *outs, int num_outputs);

/* outputs[i] = pred ? true_fn(inputs)[i] : false_fn(inputs)[i], computing only the branch
 * taken. pred: a bool scalar. Nodes are named "<name>/..." (and the callbacks' own names).
 * outputs: caller's array of num_outputs. Each output's shape is what both branches agree on
 * (dims that differ are unknown). */
FLOE_API floe_code floe_cond(FloeGraph *g, const char *name, FloeOutput pred,
                             const FloeOutput *inputs, int num_inputs, FloeBranchFn true_fn,
                             FloeBranchFn false_fn, void *arg, FloeOutput *outputs,
                             int num_outputs);

/* The loop condition: *pred = a bool scalar computed from the loop variables. */
typedef floe_code (*FloeLoopCondFn)(FloeGraph *g, void *arg, const FloeOutput *vars, int n,
                                    FloeOutput *pred);
/* The loop body: next[i] = the value of loop variable i for the next iteration (same dtype;
 * the same shape unless shape_invariants relax it). */
typedef floe_code (*FloeLoopBodyFn)(FloeGraph *g, void *arg, const FloeOutput *vars, int n,
                                    FloeOutput *next);

typedef struct FloeWhileOptions {
  size_t struct_size;           /* sizeof(FloeWhileOptions) */
  int parallel_iterations;      /* iterations allowed to run at once; 0: 10 */
  int64_t maximum_iterations;   /* > 0: the loop stops after this many iterations even if the
                                   condition still holds; 0: no limit */
  /* NULL, or one shape per loop variable that its value keeps across iterations (dims -1
   * may change); by default a variable's shape may not change. */
  const FloeShape *shape_invariants;
} FloeWhileOptions;

FLOE_API void floe_while_options_init(FloeWhileOptions *opts);

/* results = the loop variables once cond is false: vars = loop_vars; while (cond(vars))
 * vars = body(vars). Only what is needed runs: an iteration's nodes start as soon as their
 * inputs are ready, up to parallel_iterations iterations at once. The frame (and the
 * "<name>/..." prefix of the nodes it adds) is name. opts may be NULL (defaults).
 * results: caller's array of n. A run that never leaves the loop is stopped by
 * maximum_iterations or by the run's timeout (floe_session_run_opts), whose error names the
 * loop. */
FLOE_API floe_code floe_while_loop(FloeGraph *g, const char *name, FloeLoopCondFn cond,
                                   FloeLoopBodyFn body, void *arg, const FloeOutput *loop_vars,
                                   int n, const FloeWhileOptions *opts, FloeOutput *results);

#ifdef __cplusplus
}
#endif

#endif /* FLOE_CONTROL_H */
