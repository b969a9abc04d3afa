/* SPDX-License-Identifier: Apache-2.0 */
/* data.h - libfloe's data layer (core/data/): IDX files and the batcher, text corpora,
 * queues, readers, their builders and the queue runner. */
#ifndef FLOE__LAYER_DATA_H
#define FLOE__LAYER_DATA_H

#include "dist/dist.h"

/* ------------------------------------------------------------------------------------ */
/* Text corpora: text.c (fortune files, tokenizer, vocabulary, split, unigram
 * baseline, .npy export) and text_batch.c (windows, padded sequences). Both speak only
 * floe_text.h's API to each other; nothing internal is shared. */
/* queue.c, reader.c: register the queue and reader kernels (builtin.c's kernel sets). */
floe_code floe__queue_kernels_register(struct FloeRuntime *rt, FloeStatus *st);
floe_code floe__reader_kernels_register(struct FloeRuntime *rt, FloeStatus *st);
/* accumulator.c: ConditionalAccumulator and its ops (synchronous replication). */
floe_code floe__accumulator_kernels_register(struct FloeRuntime *rt, FloeStatus *st);
/* idx.c, for reader.c: the batcher's permutation of epoch `epoch` (a Fisher-Yates shuffle
 * of 0..n-1 from (seed, epoch)) into order[n] (caller's array). */
void floe__idx_permutation(uint64_t seed, int64_t epoch, int64_t n, uint32_t *order);
/* idx.c: an IDX file of any element type (u8, i8, i32, f32, f64; i16 refused), plain or
 * gzip. header only (data NULL) or whole: *data (floe__malloc'd, caller frees) holds
 * dims[0] items in host byte order. Errors name the path and the byte offset. */
typedef struct FloeIdxInfo {
  FloeDType dtype;
  int rank;                     /* of the whole file: items have rank - 1 */
  int64_t dims[FLOE_MAX_DIMS];
} FloeIdxInfo;
floe_code floe__idx_read_file(const char *path, FloeIdxInfo *info, void **data, FloeStatus *st);

#endif /* FLOE__LAYER_DATA_H */
