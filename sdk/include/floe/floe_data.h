/* SPDX-License-Identifier: Apache-2.0 */
/* floe_data.h - data: IDX datasets (MNIST, Fashion-MNIST) and their batches, and input
 * pipelines: queues, readers and the queue runner (TensorFlow's design: the input is more
 * graph, run by background threads beside the training steps). Included by floe.h.
 *
 * Queues and readers are stateful session resources, like variables: the node that makes
 * one (FIFOQueueV2, IdxRecordReader, ...) finds it by (container, shared_name or its own
 * name) in the session's resource manager, creating it on first use, so it persists across
 * floe_session_run calls. Enqueue and dequeue block (enqueue while the queue is full,
 * dequeue while it has too few elements) without holding a thread; a blocked operation
 * ends when it can complete, when the queue is closed, or when its step is cancelled (a
 * failing node of the same step). Builders follow floe.h's conventions: they record the
 * graph's sticky error and return an invalid output / NULL node on failure.
 */
#ifndef FLOE_DATA_H
#define FLOE_DATA_H

#include "floe.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------ */
/* Data: IDX files (MNIST, Fashion-MNIST), plain or gzip-compressed. */

typedef struct FloeDataset FloeDataset;

/* Loads an images file (magic 0x00000803, u8 [n, rows, cols]) and a labels file (0x00000801,
 * u8 [n]), either may end in .gz. Pixels stay u8 in memory (batches turn them into f32 in
 * [0, 1]). Errors name the file and
 * the byte offset (bad magic, truncated, counts that disagree). Caller owns; free with
 * floe_dataset_free. */
FLOE_API FloeDataset *floe_idx_load(const char *images_path, const char *labels_path,
                                    FloeStatus *status);
/* The Fashion-MNIST training (train != 0) or test set from dir (NULL: the path Debian's
 * dataset-fashion-mnist package installs, /usr/share/datasets/fashion-mnist). A missing
 * file is FLOE_NOT_FOUND naming the path, the package and the --data DIR option. */
FLOE_API FloeDataset *floe_fashion_mnist_load(const char *dir, int train, FloeStatus *status);
FLOE_API void floe_dataset_free(FloeDataset *d);
/* Keeps only the first n examples of d (n >= its size: no change); for quick runs. */
FLOE_API void floe_dataset_truncate(FloeDataset *d, int64_t n);
FLOE_API int64_t floe_dataset_size(const FloeDataset *d);
FLOE_API int64_t floe_dataset_rows(const FloeDataset *d);
FLOE_API int64_t floe_dataset_cols(const FloeDataset *d);
/* Borrowed: n*rows*cols pixels (0 to 255, as in the file) and n labels, valid while d
 * lives. */
FLOE_API const uint8_t *floe_dataset_pixels(const FloeDataset *d);
FLOE_API const uint8_t *floe_dataset_labels(const FloeDataset *d);

/* Batches of a dataset in an order fixed by (seed, epoch): epoch e of two batchers with the
 * same seed yields the same batches, so a resumed run sees the data a continuous run would.
 * Images come as f32 pixel / 255 [batch, rows * cols] (flat) or [batch, rows, cols, 1]
 * (images_nhwc != 0);
 * labels as i64 [batch]. drop_remainder: skip a last short batch. */
typedef struct FloeBatcher FloeBatcher;
FLOE_API FloeBatcher *floe_batcher_new(const FloeDataset *d, int64_t batch, int shuffle,
                                       uint64_t seed, int images_nhwc, int drop_remainder,
                                       FloeStatus *status);
FLOE_API void floe_batcher_free(FloeBatcher *b);
FLOE_API int64_t floe_batcher_num_batches(const FloeBatcher *b);
/* Positions the batcher at batch `start` of epoch `epoch` (its permutation). */
FLOE_API void floe_batcher_start_epoch(FloeBatcher *b, int64_t epoch, int64_t start);
/* Fills the next batch: returns 1 and new tensors (caller releases both), 0 at the end of
 * the epoch, -1 with status on error. */
FLOE_API int floe_batcher_next(FloeBatcher *b, FloeTensor **images, FloeTensor **labels,
                               FloeStatus *status);

/* A list(shape) attribute (a queue's component shapes): the n shapes are copied. */
FLOE_API void floe_node_set_attr_shape_list(FloeNodeBuilder *b, const char *name,
                                            const FloeShape *v, int n);

/* ------------------------------------------------------------------------------------ */
/* Queues. */

typedef enum FloeQueueKind {
  FLOE_QUEUE_FIFO = 0,           /* first in, first out; shapes fully defined or none */
  FLOE_QUEUE_PADDING_FIFO = 1,   /* FIFO whose shapes may have unknown dims (-1): a batch
                                    dequeue zero-pads each component to its largest element */
  FLOE_QUEUE_RANDOM_SHUFFLE = 2  /* dequeues pick uniformly among the elements, waiting
                                    until more than min_after_dequeue remain (unless
                                    closed) */
} FloeQueueKind;

typedef struct FloeQueueOptions {
  size_t struct_size;        /* sizeof(FloeQueueOptions) */
  FloeQueueKind kind;        /* FLOE_QUEUE_FIFO */
  int64_t capacity;          /* most elements held; -1 (default): unbounded */
  int64_t min_after_dequeue; /* random shuffle only; 0 */
  int64_t seed;              /* random shuffle only: the same seed and the same operations
                                give the same order; 0 (default): a fresh seed per queue */
  const char *container;     /* NULL: "" */
  const char *shared_name;   /* NULL: the node's name */
} FloeQueueOptions;

FLOE_API void floe_queue_options_init(FloeQueueOptions *o);

/* A queue whose elements are num_components tensors of dtypes[i] and shapes[i] (shapes
 * may be NULL: any shapes, then only single-element dequeues). Returns its handle (a
 * resource scalar); opts NULL: a FIFO of unbounded capacity. */
FLOE_API FloeOutput floe_queue(FloeGraph *g, const char *name, const FloeDType *dtypes,
                               const FloeShape *shapes, int num_components,
                               const FloeQueueOptions *opts);
/* One element from the n components. A dtype or shape that does not match the queue's is
 * refused (when building if the queue's node is known, else when running) and the queue is
 * left as it was. Fails (cancelled) when the queue is closed. */
FLOE_API FloeNode *floe_queue_enqueue(FloeGraph *g, const char *name, FloeOutput queue,
                                      const FloeOutput *components, int n);
/* The elements of [k, ...] components, in order; each element goes in whole, and with a
 * capacity the k elements may go in over several waits. */
FLOE_API FloeNode *floe_queue_enqueue_many(FloeGraph *g, const char *name, FloeOutput queue,
                                           const FloeOutput *components, int n);
/* Dequeue builders: queue must be the output of floe_queue (its node gives the component
 * dtypes and shapes); out (num_components entries, the queue's count) receives the
 * components. dequeue: one element. dequeue_many: n elements (n an i32 scalar output)
 * stacked along a new first dimension; the queue needs shapes. dequeue_up_to: like
 * dequeue_many, except that a closed queue holding fewer than n (and at least one)
 * elements gives them all. A batch is taken at once when enough elements are there (never
 * gathered across waits), so n may not exceed a bounded queue's capacity minus its
 * min_after_dequeue (FLOE_INVALID_ARGUMENT). A dequeue that cannot complete on a closed
 * queue fails with FLOE_OUT_OF_RANGE ("queue 'q' is closed and has 2 elements, 5
 * requested"). */
FLOE_API FloeNode *floe_queue_dequeue(FloeGraph *g, const char *name, FloeOutput queue,
                                      FloeOutput *out, int num_components);
FLOE_API FloeNode *floe_queue_dequeue_many(FloeGraph *g, const char *name, FloeOutput queue,
                                           FloeOutput n, FloeOutput *out, int num_components);
FLOE_API FloeNode *floe_queue_dequeue_up_to(FloeGraph *g, const char *name, FloeOutput queue,
                                            FloeOutput n, FloeOutput *out,
                                            int num_components);
/* Closes the queue: later enqueues fail (cancelled), dequeues drain what is left, then fail
 * (out of range). cancel_pending_enqueues: enqueues blocked on a full queue fail too
 * (cancelled); else they still go in as room frees up. */
FLOE_API FloeNode *floe_queue_close(FloeGraph *g, const char *name, FloeOutput queue,
                                    int cancel_pending_enqueues);
/* Elements held (i32 scalar) / whether the queue is closed (bool scalar). */
FLOE_API FloeOutput floe_queue_size(FloeGraph *g, const char *name, FloeOutput queue);
FLOE_API FloeOutput floe_queue_is_closed(FloeGraph *g, const char *name, FloeOutput queue);

/* ------------------------------------------------------------------------------------ */
/* Readers: records of files as tensors (Floe has no string dtype). `files` holds paths
 * separated by ';', read in that order, num_epochs times. A record's key (i64) is its index
 * among all records of the files, the same in every epoch. Errors name the file and the
 * byte offset (a truncated record, a bad header). */

typedef struct FloeReaderOptions {
  size_t struct_size;      /* sizeof(FloeReaderOptions) */
  int64_t num_epochs;      /* passes over the files: 1 (default); 0: without end */
  const char *container;   /* NULL: "" */
  const char *shared_name; /* NULL: the node's name */
} FloeReaderOptions;

FLOE_API void floe_reader_options_init(FloeReaderOptions *o);

/* Lines as u8 [length], without the "\n" (nor a "\r" before it); the first
 * skip_header_lines lines of each file are skipped. Plain or gzip-compressed files. */
FLOE_API FloeOutput floe_text_line_reader(FloeGraph *g, const char *name, const char *files,
                                          int64_t skip_header_lines,
                                          const FloeReaderOptions *opts);
/* Records of record_bytes bytes after header_bytes, up to footer_bytes before the end of
 * each (plain) file; hop_bytes > 0: a record starts every hop_bytes (overlapping windows).
 * Each record is u8 [record_bytes], or, with dtype other than u8 or a known shape, the same
 * bytes as dtype [shape] (e.g. i32 [36] for windows of 36 tokens; shape unknown: a vector).
 * A file whose records do not fill its data exactly is an error at its last record. */
FLOE_API FloeOutput floe_fixed_length_reader(FloeGraph *g, const char *name, const char *files,
                                             int64_t header_bytes, int64_t record_bytes,
                                             int64_t footer_bytes, int64_t hop_bytes,
                                             FloeDType dtype, FloeShape shape,
                                             const FloeReaderOptions *opts);
/* Items of IDX files (MNIST's format, plain or .gz): one record per index of the first
 * dimension, in the file's dtype and the shape of the other dimensions. The files are read
 * whole on the first read and must agree on dtype and item shape. shuffle: each epoch
 * visits the records in the order of a permutation drawn from (seed, epoch), the one
 * floe_batcher_new(..., shuffle = 1, seed, ...) uses; max_records >= 0 keeps only the
 * first records (-1: all). */
FLOE_API FloeOutput floe_idx_reader(FloeGraph *g, const char *name, const char *files,
                                    int shuffle, int64_t seed, int64_t max_records,
                                    const FloeReaderOptions *opts);
/* The files floe_fashion_mnist_load would read: the training (train != 0) or test images
 * and labels of dir (NULL: Debian's /usr/share/datasets/fashion-mnist), the .gz file when
 * there is one. *images and *labels: caller frees with free(). FLOE_NOT_FOUND naming the
 * path, the package and --data DIR when a file is missing. */
FLOE_API floe_code floe_fashion_mnist_files(const char *dir, int train, char **images,
                                           char **labels, FloeStatus *status);
/* The next record of each of the n readers (outputs of the builders above), read together
 * so the k-th record of one stays paired with the k-th of the others whatever runs
 * concurrently (an image reader and a label reader). values[i] (n entries) receives reader
 * i's record; the dtypes and shapes are taken from the readers' nodes (an IDX reader's
 * first file header is read here). Returns the key. Running it after the last record of
 * the last epoch fails with FLOE_OUT_OF_RANGE ("reader 'r' has read every record of its 2
 * files"). */
FLOE_API FloeOutput floe_reader_read(FloeGraph *g, const char *name, const FloeOutput *readers,
                                     int n, FloeOutput *values);
/* Up to num_records (an i64 scalar output) records of each reader, stacked [k, ...] (k <
 * num_records only at the end of the data); every record of a reader must have one shape
 * (not text lines). Returns the keys (i64 [k]). */
FLOE_API FloeOutput floe_reader_read_up_to(FloeGraph *g, const char *name,
                                           const FloeOutput *readers, int n,
                                           FloeOutput num_records, FloeOutput *values);
/* Positions the readers at position `record` (i64 scalar) of epoch `epoch` (i64 scalar),
 * e.g. to resume an input pipeline where a checkpoint's global step says. */
FLOE_API FloeNode *floe_reader_seek(FloeGraph *g, const char *name, const FloeOutput *readers,
                                    int n, FloeOutput epoch, FloeOutput record);

/* ------------------------------------------------------------------------------------ */
/* Queue runner: num_threads threads that each run enqueue_target (a node name) as a step
 * target, again and again, so the input pipeline runs concurrently with the steps that
 * dequeue. A thread ends when its step fails with FLOE_OUT_OF_RANGE (a reader ran out of
 * records) or FLOE_CANCELLED (the queue was closed); the last thread to end runs
 * close_target, so consumers drain the queue and then get FLOE_OUT_OF_RANGE. Any other
 * error is kept (the first one), and the runner stops the other threads.
 * close_target should be a QueueCloseV2 node with cancel_pending_enqueues = 1 (from
 * floe_queue_close(..., 1)): stop runs it to unblock threads waiting on a full queue, so a
 * close node without it is refused. Thread-safe. */
typedef struct FloeQueueRunner FloeQueueRunner;

/* Checks that both targets exist in the session's graph. Caller owns; free with
 * floe_queue_runner_free before the session. Strings are copied. */
FLOE_API FloeQueueRunner *floe_queue_runner_new(FloeSession *s, const char *enqueue_target,
                                               int num_threads, const char *close_target,
                                               FloeStatus *status);
/* Starts the threads (once). */
FLOE_API floe_code floe_queue_runner_start(FloeQueueRunner *qr, FloeStatus *status);
/* Asks the threads to end, runs close_target (unblocking any enqueue), and joins them.
 * Returns what floe_queue_runner_join would. A thread blocked on something other than the
 * queue (an upstream queue's dequeue) ends only when that completes. */
FLOE_API floe_code floe_queue_runner_stop(FloeQueueRunner *qr, FloeStatus *status);
/* Waits until every thread ended by itself (the data ran out, or an error), then returns
 * the first error other than the end of data (FLOE_OK when there was none). */
FLOE_API floe_code floe_queue_runner_join(FloeQueueRunner *qr, FloeStatus *status);
/* Stops the threads if they run, then frees. NULL is a no-op. */
FLOE_API void floe_queue_runner_free(FloeQueueRunner *qr);

#ifdef __cplusplus
}
#endif
#endif /* FLOE_DATA_H */
