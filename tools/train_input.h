/* SPDX-License-Identifier: Apache-2.0 */
/* train_input.h - floe train's queue-fed input (--input queue): the pipeline in the graph
 * and the queue runner that drives it (train_input.c). */
#ifndef FLOE_TOOLS_TRAIN_INPUT_H
#define FLOE_TOOLS_TRAIN_INPUT_H

#include <floe/floe.h>

/* The feed (i32 scalar) saying how many examples the next training step dequeues. */
#define TRAIN_INPUT_COUNT "input/n"

typedef struct TrainInputSpec {
  const char *images, *labels; /* IDX files (borrowed) */
  int nhwc;                    /* images as [n, 28, 28, 1] (else [n, 784]) */
  int64_t batch;
  uint64_t seed;               /* the batcher's: the readers visit each epoch in its order */
  int64_t limit;               /* keep the first examples only; 0: all */
  int64_t epochs;              /* epochs the readers give (from epoch 0) */
  /* Optional preprocessing of the f32 images before they are queued (augmentation, or the
   * benchmark's simulated work): returns the new images, built into g. NULL: none. */
  FloeOutput (*preprocess)(FloeGraph *g, FloeOutput images, void *arg);
  void *preprocess_arg;
} TrainInputSpec;

/* Adds the pipeline to g under "input/": shuffled IDX readers, pixels to f32 / 255, a FIFO
 * of a few batches, and its dequeue of TRAIN_INPUT_COUNT examples as *x (f32) and *y
 * (i64). Errors are the graph's sticky error. */
void train_input_build(FloeGraph *g, const TrainInputSpec *spec, FloeOutput *x, FloeOutput *y);
/* Positions the readers at example `record` of epoch `epoch` (a resumed run) and starts
 * the runner's thread. Caller owns the runner: floe_queue_runner_stop, then free, before
 * the session. NULL with status on error. */
FloeQueueRunner *train_input_start(FloeSession *s, int64_t epoch, int64_t record,
                                   FloeStatus *status);

#endif
