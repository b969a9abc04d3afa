/* SPDX-License-Identifier: Apache-2.0 */
/* transport_bench.h - the ping-pong and streaming driver shared by bench/raw_fabric.c (plain
 * libfabric) and bench/bench_transport.c (a FloeTransportFns plugin), so both measure the
 * same thing: two processes forked before any transport is set up, names exchanged over
 * pipes, then for each size:
 *
 *   latency: rank 0 posts a receive, sends, waits for both; rank 1 receives and sends back.
 *            One-way latency = round trip / 2, the median of several batches.
 *   stream:  rank 1 keeps WINDOW receives posted; rank 0 keeps WINDOW sends in flight, then
 *            waits for a 4-byte reply sent after the last message. Bandwidth = bytes / time,
 *            the best of several repetitions (the machine is shared).
 *
 * Every wait blocks (the implementations sleep on an fd or in their provider's wait), so two
 * processes on two shared cores measure the transport, not a spinning competitor.
 * Results go to stdout, one per line: "<impl> <provider> lat|bw <bytes> <us|GB/s>".
 */
#ifndef FLOE_TRANSPORT_BENCH_H
#define FLOE_TRANSPORT_BENCH_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct BenchOps {
  void *self;
  /* Post; the returned handle is given to wait. */
  void *(*isend)(void *self, const void *buf, size_t len, uint64_t tag);
  void *(*irecv)(void *self, void *buf, size_t len, uint64_t tag);
  /* Blocks until every handle completed; handles are spent afterwards. */
  void (*wait)(void *self, void **h, int n);
} BenchOps;

static double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int bench_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

enum { BENCH_TAG_PING = 1, BENCH_TAG_PONG = 2, BENCH_TAG_DATA = 3, BENCH_TAG_DONE = 4 };
enum { BENCH_WINDOW = 8, BENCH_BATCHES = 7 };

/* Round trips of `size` bytes; rank 0 returns the one-way latency in microseconds. */
static double bench_latency(BenchOps *o, int rank, void *sbuf, void *rbuf, size_t size) {
  int iters = size <= 4096 ? 400 : size <= 65536 ? 100 : size <= (1 << 20) ? 20 : 4;
  double batches[BENCH_BATCHES];
  for (int b = -1; b < BENCH_BATCHES; b++) { /* batch -1 warms up */
    double t0 = bench_now();
    for (int i = 0; i < iters; i++) {
      void *h[2];
      if (rank == 0) {
        h[0] = o->irecv(o->self, rbuf, size, BENCH_TAG_PONG);
        h[1] = o->isend(o->self, sbuf, size, BENCH_TAG_PING);
        o->wait(o->self, h, 2);
      } else {
        h[0] = o->irecv(o->self, rbuf, size, BENCH_TAG_PING);
        o->wait(o->self, h, 1);
        h[0] = o->isend(o->self, sbuf, size, BENCH_TAG_PONG);
        o->wait(o->self, h, 1);
      }
    }
    if (b >= 0) batches[b] = (bench_now() - t0) / iters / 2 * 1e6;
  }
  qsort(batches, BENCH_BATCHES, sizeof batches[0], bench_cmp);
  return batches[BENCH_BATCHES / 2];
}

/* Streams `count` messages of `size` bytes; rank 0 returns GB/s (10^9 bytes per second). */
static double bench_stream(BenchOps *o, int rank, void *sbuf, void *rbuf, size_t size, int count) {
  double best = 0;
  for (int rep = 0; rep < 4; rep++) {
    void *h[BENCH_WINDOW];
    char ack[4] = "ack", got[4];
    double t0 = bench_now();
    if (rank == 0) {
      int posted = 0;
      while (posted < count) {
        int n = count - posted < BENCH_WINDOW ? count - posted : BENCH_WINDOW;
        for (int i = 0; i < n; i++) h[i] = o->isend(o->self, sbuf, size, BENCH_TAG_DATA);
        o->wait(o->self, h, n);
        posted += n;
      }
      h[0] = o->irecv(o->self, got, sizeof got, BENCH_TAG_DONE);
      o->wait(o->self, h, 1);
      double gbs = (double)size * count / (bench_now() - t0) / 1e9;
      if (gbs > best) best = gbs;
    } else {
      /* the receiver keeps a window posted into one buffer (contents are not checked) */
      int done = 0;
      while (done < count) {
        int n = count - done < BENCH_WINDOW ? count - done : BENCH_WINDOW;
        for (int i = 0; i < n; i++) h[i] = o->irecv(o->self, rbuf, size, BENCH_TAG_DATA);
        o->wait(o->self, h, n);
        done += n;
      }
      h[0] = o->isend(o->self, ack, sizeof ack, BENCH_TAG_DONE);
      o->wait(o->self, h, 1);
    }
  }
  return best;
}

static const size_t bench_sizes[] = {4,        64,        1024,      4096,      16384,
                                     65536,    262144,    1 << 20,   4 << 20,   16 << 20,
                                     64 << 20};
enum { BENCH_NUM_SIZES = sizeof bench_sizes / sizeof bench_sizes[0] };

/* Runs every size; rank 0 prints "<impl> <prov> lat|bw <bytes> <value>". Latency up to
 * 64 KiB, bandwidth from 64 KiB up. */
static void bench_run(BenchOps *o, int rank, const char *impl, const char *prov,
                      size_t max_size) {
  size_t cap = 0;
  for (int i = 0; i < BENCH_NUM_SIZES; i++)
    if (bench_sizes[i] <= max_size && bench_sizes[i] > cap) cap = bench_sizes[i];
  unsigned char *sbuf = malloc(cap), *rbuf = malloc(cap);
  if (!sbuf || !rbuf) {
    fprintf(stderr, "out of memory for %zu bytes\n", cap);
    exit(1);
  }
  memset(sbuf, 0x5a, cap);
  memset(rbuf, 0, cap);
  for (int i = 0; i < BENCH_NUM_SIZES && bench_sizes[i] <= cap; i++) {
    size_t s = bench_sizes[i];
    if (s <= 65536) {
      double us = bench_latency(o, rank, sbuf, rbuf, s);
      if (rank == 0) printf("%s %s lat %zu %.2f\n", impl, prov, s, us);
    }
    if (s >= 65536) {
      int count = (int)((size_t)256 << 20) / (int)s;
      if (count < 8) count = 8;
      if (count > 2048) count = 2048;
      double gbs = bench_stream(o, rank, sbuf, rbuf, s, count);
      if (rank == 0) printf("%s %s bw %zu %.3f\n", impl, prov, s, gbs);
    }
    fflush(stdout);
  }
  free(sbuf);
  free(rbuf);
}

#endif /* FLOE_TRANSPORT_BENCH_H */
