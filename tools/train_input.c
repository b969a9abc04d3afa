/* SPDX-License-Identifier: Apache-2.0 */
/* train_input.c - floe train's queue-fed input: the input pipeline is more graph (as in the
 * TensorFlow paper), run by a queue runner thread beside the training steps.
 *
 *   input/images, input/labels   IdxRecordReaders over the training files, shuffled per
 *                                epoch with the run's seed: the permutation floe_batcher
 *                                draws, so the examples come in the feed path's order
 *   input/read                   ReaderReadUpTo, a batch of records of both, in step
 *   input/x, input/y             u8 pixels -> f32 / 255 (the batcher's conversion, bit for
 *                                bit), labels -> i64
 *   input/queue                  a FIFO of QUEUE_BATCHES batches, filled by input/enqueue
 *   input/batch                  QueueDequeueManyV2 of input/n examples: the batch, or an
 *                                epoch's last, shorter one
 *
 * One runner thread and a FIFO keep that order exactly, so a queue-fed run trains on the
 * batches a feed-fed run does (and resumes the same way: input/seek places the readers
 * where the checkpoint's global step says). More threads would interleave the readers'
 * chunks; one is enough to keep ahead of the training steps (docs/benchmarks.md).
 */
#include "train_input.h"

#include <string.h>

/* Batches the queue holds: enough to ride out a slow step, little memory (a CNN batch of
 * 64 is 200 KB). */
enum { QUEUE_BATCHES = 4 };

static FloeOutput const_tensor(FloeGraph *g, const char *name, FloeTensor *t) {
  FloeOutput o = t ? floe_const(g, name, t) : floe_out(NULL, 0);
  floe_tensor_release(t);
  return o;
}

static FloeOutput cast(FloeGraph *g, const char *name, FloeOutput x, FloeDType to) {
  FloeNodeBuilder *b = floe_node_begin(g, "Cast", name);
  floe_node_add_input(b, x);
  floe_node_set_attr_type(b, "DstT", to);
  return floe_out(floe_node_finish(b), 0);
}

void train_input_build(FloeGraph *g, const TrainInputSpec *spec, FloeOutput *x, FloeOutput *y) {
  FloeReaderOptions ro;
  floe_reader_options_init(&ro);
  ro.num_epochs = spec->epochs;
  int64_t keep = spec->limit > 0 ? spec->limit : -1;
  FloeOutput readers[2] = {
      floe_idx_reader(g, "input/images", spec->images, 1, (int64_t)spec->seed, keep, &ro),
      floe_idx_reader(g, "input/labels", spec->labels, 1, (int64_t)spec->seed, keep, &ro)};
  FloeOutput rec[2];
  FloeOutput chunk = const_tensor(g, "input/chunk", floe_tensor_scalar_i64(spec->batch, NULL));
  floe_reader_read_up_to(g, "input/read", readers, 2, chunk, rec);
  /* Division, not a multiplication by 1/255: the batcher's pixel / 255.0f exactly. */
  FloeOutput px = floe_binary(g, "Div", "input/scale", cast(g, "input/pixels", rec[0], FLOE_F32),
                              floe_const_f32(g, "input/255", 255.0f));
  int64_t rows = spec->nhwc ? 4 : 2, d = rows;
  int32_t dims[4] = {-1, 784, 0, 0};
  if (spec->nhwc) memcpy(dims, (int32_t[]){-1, 28, 28, 1}, sizeof dims);
  FloeOutput shape = const_tensor(
      g, "input/shape", floe_tensor_from_data(FLOE_I32, 1, &d, dims, (size_t)rows * 4, NULL));
  FloeOutput images = floe_binary(g, "Reshape", "input/x", px, shape);
  if (spec->preprocess) images = spec->preprocess(g, images, spec->preprocess_arg);
  FloeOutput labels = cast(g, "input/y", rec[1], FLOE_I64);

  int64_t flat = 784, hwc[3] = {28, 28, 1};
  FloeShape shapes[2] = {spec->nhwc ? floe_shape_make(3, hwc) : floe_shape_make(1, &flat),
                         floe_shape_scalar()};
  FloeQueueOptions qo;
  floe_queue_options_init(&qo);
  qo.capacity = QUEUE_BATCHES * spec->batch;
  FloeOutput q = floe_queue(g, "input/queue", (FloeDType[]){FLOE_F32, FLOE_I64}, shapes, 2, &qo);
  floe_queue_enqueue_many(g, "input/enqueue", q, (FloeOutput[]){images, labels}, 2);
  floe_queue_close(g, "input/close", q, 1);
  FloeOutput n = floe_placeholder(g, TRAIN_INPUT_COUNT, FLOE_I32, floe_shape_scalar());
  FloeOutput out[2];
  floe_queue_dequeue_many(g, "input/batch", q, n, out, 2);
  FloeOutput epoch = floe_placeholder(g, "input/seek_epoch", FLOE_I64, floe_shape_scalar());
  FloeOutput record = floe_placeholder(g, "input/seek_record", FLOE_I64, floe_shape_scalar());
  floe_reader_seek(g, "input/seek", readers, 2, epoch, record);
  *x = out[0];
  *y = out[1];
}

FloeQueueRunner *train_input_start(FloeSession *s, int64_t epoch, int64_t record,
                                   FloeStatus *status) {
  FloeTensor *e = floe_tensor_scalar_i64(epoch, status);
  FloeTensor *r = e ? floe_tensor_scalar_i64(record, status) : NULL;
  floe_code rc = r ? FLOE_OK : FLOE_NO_MEMORY;
  if (r) {
    FloeFeed feeds[2] = {{"input/seek_epoch", e}, {"input/seek_record", r}};
    const char *target = "input/seek";
    rc = floe_session_run(s, feeds, 2, NULL, 0, &target, 1, NULL, status);
  }
  floe_tensor_release(e);
  floe_tensor_release(r);
  if (rc != FLOE_OK) return NULL;
  FloeQueueRunner *qr = floe_queue_runner_new(s, "input/enqueue", 1, "input/close", status);
  if (qr && floe_queue_runner_start(qr, status) != FLOE_OK) {
    floe_queue_runner_free(qr);
    return NULL;
  }
  return qr;
}
