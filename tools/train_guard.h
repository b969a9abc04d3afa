/* SPDX-License-Identifier: Apache-2.0 */
/* train_guard.h - what every floe train model checks before and while it trains: that the
 * checkpoint folder can be written (before the first step, not after an epoch), and that the
 * values trained stay finite (a diverged run stops with the step and the first non-finite
 * variable, and never saves a checkpoint of NaNs over the finite ones). */
#ifndef FLOE_TOOLS_TRAIN_GUARD_H
#define FLOE_TOOLS_TRAIN_GUARD_H

#include <stddef.h>
#include <stdint.h>

#include <floe/floe.h>

/* 0 when dir can hold checkpoints: it is a folder the process may write in, or it does not
 * exist yet and its nearest existing ancestor is such a folder (saving creates it). Else -1
 * with why in msg, naming the path ("... is a regular file, not a folder"). */
int train_check_checkpoint_dir(const char *dir, char *msg, size_t len);

/* The variables of a graph, in graph order, by the names a run fetches. */
typedef struct TrainVars {
  int n;
  char **names; /* the VarHandleOp nodes' names */
  char **reads; /* their "<name>/read" outputs */
} TrainVars;

/* Collects every variable of g (optimiser slots and the global step too), adding a read node
 * where one is missing: call it before the session is made. 0, or -1 when out of memory. */
int train_vars_collect(FloeGraph *g, TrainVars *v);
void train_vars_free(TrainVars *v);

/* Reads every variable of v in one run of s and looks for NaNs and infinities in the float
 * ones. 1 with the first such variable described in desc ("variable 'dense1/kernel' (f32
 * [784,512]) holds 12 NaN or infinite values of 401408, the first nan at index 3"), 0 when
 * all are finite, -1 with st set when the run failed. */
int train_vars_nonfinite(FloeSession *s, const TrainVars *v, char *desc, size_t len,
                         FloeStatus *st);

/* A checksum of every variable's value, to tell whether two processes hold the same model
 * (the replicas of --replication allreduce): zlib's CRC-32 over the variables in byte order
 * of their names, each as its name, one NUL byte, then its tensor's raw bytes (the order and
 * bytes a safetensors checkpoint of the same variables holds, so a script can check a
 * checkpoint against it). 0 with *crc set, or -1 with st set when the run failed. */
int train_vars_checksum(FloeSession *s, const TrainVars *v, uint32_t *crc, FloeStatus *st);

#endif
