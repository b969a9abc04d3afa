/* SPDX-License-Identifier: Apache-2.0 */
/* train_report.h - what every floe train model prints the same way: the progress line of a
 * terminal and the --profile table over the training steps. */
#ifndef FLOE_TOOLS_TRAIN_REPORT_H
#define FLOE_TOOLS_TRAIN_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include <floe/floe.h>

/* The live line of a terminal, redrawn over itself: "epoch E/N [####....]  42%  UNIT R  loss L
 * eta T", the fields named as in the lines a pipe gets (unit "samples/s", "words/s"); the bar
 * takes what the terminal's width leaves (none if narrow), with room kept for "  testing..."
 * written after the last one of an epoch. */
void train_progress(int epoch, int epochs, int64_t done, int64_t total, double rate,
                    const char *unit, double loss);

/* Adds rows (one epoch's floe_session_profile) to *acc (*n rows, malloc'd), summing the
 * rows of one op and device. 0, or -1 when out of memory. */
int train_profile_merge(FloeOpProfile **acc, int *n, const FloeOpProfile *rows, int nrows);
/* Sorts rows by total time, largest first. */
void train_profile_sort(FloeOpProfile *rows, int n);
/* The --profile table of the training steps (stderr without --json): a row per op type and
 * device, then the kernels' share of the training time. */
void train_profile_print(FILE *f, const FloeOpProfile *rows, int n, int64_t steps, double secs);

#endif
