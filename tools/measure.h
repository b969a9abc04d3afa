/* SPDX-License-Identifier: Apache-2.0 */
/* measure.h - what floe run and floe train print about time: the per-op profile table,
 * the one-line step breakdown, latency percentiles, --trace files and random inputs. */
#ifndef FLOE_TOOLS_MEASURE_H
#define FLOE_TOOLS_MEASURE_H

#include <stdio.h>

#include <floe/floe.h>

#include "json.h"

/* Adds b's sums to *acc (acc->struct_size set by the caller). */
void measure_breakdown_add(FloeStepBreakdown *acc, const FloeStepBreakdown *b);
/* "step 1.23 ms x 2.00 threads: kernels 1.01 ms (41%), framework ..., transfers ..., idle ...,
 * tracing ..." with a newline; nothing when no step was recorded. */
void measure_breakdown_print(FILE *f, const FloeStepBreakdown *b);
/* The breakdown as the object value of the current key (per-step means in ms). */
void measure_breakdown_json(JsonWriter *w, const FloeStepBreakdown *b);

/* The --profile table (rows sorted as floe_session_profile sorts them) over `steps` steps
 * that took `secs` seconds, on f; training: worded for floe train's steps. */
void measure_profile_print(FILE *f, const FloeOpProfile *rows, int n, int64_t steps, double secs,
                           int training);
/* The rows as a JSON array value. */
void measure_profile_json(JsonWriter *w, const FloeOpProfile *rows, int n);

/* The value at fraction p (0..1) of sorted[0..n) (nearest rank); 0 when n is 0. */
double measure_percentile(const double *sorted, int n, double p);

/* --timeout S of floe run and floe train: seconds from 0.001 to MEASURE_TIMEOUT_MAX (a
 * decimal), as whole milliseconds (rounded up) in *ms; 0 on success, -1 otherwise. */
#define MEASURE_TIMEOUT_MAX 1e6
int measure_parse_timeout(const char *s, int64_t *ms);

/* A host tensor of dt and the given dims with values drawn from *seed (floats uniform in
 * [-1, 1), integers 0 or 1, bools false or true). Caller releases; NULL with st set. */
FloeTensor *measure_random_tensor(FloeDType dt, int rank, const int64_t *dims, uint64_t *seed,
                                  FloeStatus *st);

#endif
