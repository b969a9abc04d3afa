/* SPDX-License-Identifier: Apache-2.0 */
/* test_idx.c - the IDX reader (plain and gzip files written here, every truncation, bad
 * magic, disagreeing counts, trailing bytes, absurd sizes), the Fashion-MNIST file lookup and
 * the batcher (each example once per epoch, order fixed by (seed, epoch), exact resume,
 * drop_remainder, uniform shuffles). */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "floe/floe.h"

static char tmpdir[256];

static void tmp_setup(void) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/floe-test-idx-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void tmp_teardown(void) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  ck_assert_int_eq(system(cmd), 0);
}

static char *path_in(const char *name) {
  static char buf[4][512];
  static int k;
  char *p = buf[k++ & 3];
  snprintf(p, 512, "%s/%s", tmpdir, name);
  return p;
}

/* A byte string being built. */
typedef struct Bytes {
  unsigned char *p;
  size_t n;
} Bytes;

static void put(Bytes *b, const void *src, size_t n) {
  b->p = realloc(b->p, b->n + n);
  ck_assert_ptr_nonnull(b->p);
  memcpy(b->p + b->n, src, n);
  b->n += n;
}

static void put_be32(Bytes *b, uint32_t v) {
  unsigned char c[4] = {(unsigned char)(v >> 24), (unsigned char)(v >> 16),
                        (unsigned char)(v >> 8), (unsigned char)v};
  put(b, c, 4);
}

/* IDX images file: magic 0x803, n, rows, cols, then pixel(i, j) = (7 * i + 3 * j) & 255. */
static Bytes images_file(uint32_t n, uint32_t rows, uint32_t cols) {
  Bytes b = {NULL, 0};
  put_be32(&b, 0x803);
  put_be32(&b, n);
  put_be32(&b, rows);
  put_be32(&b, cols);
  for (uint32_t i = 0; i < n; i++)
    for (uint32_t j = 0; j < rows * cols; j++) {
      unsigned char v = (unsigned char)((7 * i + 3 * j) & 255);
      put(&b, &v, 1);
    }
  return b;
}

/* IDX labels file: magic 0x801, n, then label(i) = i % 10. */
static Bytes labels_file(uint32_t n) {
  Bytes b = {NULL, 0};
  put_be32(&b, 0x801);
  put_be32(&b, n);
  for (uint32_t i = 0; i < n; i++) {
    unsigned char v = (unsigned char)(i % 10);
    put(&b, &v, 1);
  }
  return b;
}

static void write_plain(const char *path, const void *p, size_t n) {
  FILE *f = fopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_uint_eq(fwrite(p, 1, n, f), n);
  ck_assert_int_eq(fclose(f), 0);
}

static void write_gz(const char *path, const void *p, size_t n) {
  gzFile f = gzopen(path, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(gzwrite(f, p, (unsigned)n), (int)n);
  ck_assert_int_eq(gzclose(f), Z_OK);
}

static Bytes read_file(const char *path) {
  Bytes b = {NULL, 0};
  FILE *f = fopen(path, "rb");
  ck_assert_ptr_nonnull(f);
  unsigned char buf[4096];
  size_t r;
  while ((r = fread(buf, 1, sizeof buf, f)) > 0) put(&b, buf, r);
  fclose(f);
  return b;
}

/* Checks d against the formulas of images_file / labels_file. */
static void check_contents(const FloeDataset *d, int64_t n, int64_t rows, int64_t cols) {
  ck_assert_int_eq(floe_dataset_size(d), n);
  ck_assert_int_eq(floe_dataset_rows(d), rows);
  ck_assert_int_eq(floe_dataset_cols(d), cols);
  const uint8_t *im = floe_dataset_pixels(d);
  const uint8_t *lb = floe_dataset_labels(d);
  for (int64_t i = 0; i < n; i++) {
    ck_assert_uint_eq(lb[i], (unsigned)(i % 10));
    for (int64_t j = 0; j < rows * cols; j++) {
      unsigned want = (unsigned)((7 * i + 3 * j) & 255);
      ck_assert_msg(im[i * rows * cols + j] == want, "pixel (%lld, %lld): %u, want %u",
                    (long long)i, (long long)j, im[i * rows * cols + j], want);
    }
  }
}

/* Loads and expects failure with `code` and every non-NULL string in the message. */
static void expect_error(const char *ip, const char *lp, floe_code code, const char *a,
                         const char *b, const char *c) {
  FloeStatus *st = floe_status_new();
  FloeDataset *d = floe_idx_load(ip, lp, st);
  ck_assert_msg(d == NULL, "loaded %s + %s, expected an error", ip, lp);
  const char *msg = floe_status_message(st);
  ck_assert_msg(floe_status_code(st) == code, "code %s, want %s: %s",
                floe_code_name(floe_status_code(st)), floe_code_name(code), msg);
  const char *want[3] = {a, b, c};
  for (int i = 0; i < 3; i++)
    if (want[i]) ck_assert_msg(strstr(msg, want[i]) != NULL, "'%s' not in: %s", want[i], msg);
  floe_status_free(st);
}

START_TEST(plain_and_gzip_round_trip) {
  Bytes im = images_file(5, 3, 4), lb = labels_file(5);
  write_plain(path_in("im"), im.p, im.n);
  write_plain(path_in("lb"), lb.p, lb.n);
  write_gz(path_in("im.gz"), im.p, im.n);
  write_gz(path_in("lb.gz"), lb.p, lb.n);
  const char *pairs[4][2] = {{"im", "lb"}, {"im.gz", "lb.gz"}, {"im.gz", "lb"}, {"im", "lb.gz"}};
  FloeStatus *st = floe_status_new();
  for (int k = 0; k < 4; k++) {
    char ip[512], lp[512];
    snprintf(ip, sizeof ip, "%s", path_in(pairs[k][0]));
    snprintf(lp, sizeof lp, "%s", path_in(pairs[k][1]));
    FloeDataset *d = floe_idx_load(ip, lp, st);
    ck_assert_msg(d != NULL, "%s + %s: %s", ip, lp, floe_status_message(st));
    check_contents(d, 5, 3, 4);
    floe_dataset_truncate(d, 3);
    ck_assert_int_eq(floe_dataset_size(d), 3);
    floe_dataset_truncate(d, 100);
    ck_assert_int_eq(floe_dataset_size(d), 3);
    floe_dataset_free(d);
  }
  /* Zero examples is a valid (empty) file pair. */
  Bytes im0 = images_file(0, 2, 2), lb0 = labels_file(0);
  write_plain(path_in("im0"), im0.p, im0.n);
  write_plain(path_in("lb0"), lb0.p, lb0.n);
  char ip[512];
  snprintf(ip, sizeof ip, "%s", path_in("im0"));
  FloeDataset *d = floe_idx_load(ip, path_in("lb0"), st);
  ck_assert_msg(d != NULL, "%s", floe_status_message(st));
  ck_assert_int_eq(floe_dataset_size(d), 0);
  floe_dataset_free(d);
  floe_status_free(st);
  free(im.p), free(lb.p), free(im0.p), free(lb0.p);
}
END_TEST

START_TEST(every_truncation_names_the_offset) {
  Bytes im = images_file(4, 2, 3), lb = labels_file(4);
  char ip[512], lp[512], tp[512], want[64];
  snprintf(ip, sizeof ip, "%s", path_in("im"));
  snprintf(lp, sizeof lp, "%s", path_in("lb"));
  snprintf(tp, sizeof tp, "%s", path_in("cut"));
  write_plain(ip, im.p, im.n);
  write_plain(lp, lb.p, lb.n);
  /* Images cut at every length: the error names the file and the length as the offset. */
  for (size_t len = 0; len < im.n; len++) {
    write_plain(tp, im.p, len);
    snprintf(want, sizeof want, "truncated at offset %zu", len);
    expect_error(tp, lp, FLOE_DATA_LOSS, tp, want, NULL);
  }
  for (size_t len = 0; len < lb.n; len++) {
    write_plain(tp, lb.p, len);
    snprintf(want, sizeof want, "truncated at offset %zu", len);
    expect_error(ip, tp, FLOE_DATA_LOSS, tp, want, NULL);
  }
  /* The same files gzipped and then cut: the error names the file and an offset. */
  char gp[512];
  snprintf(gp, sizeof gp, "%s", path_in("im.gz"));
  write_gz(gp, im.p, im.n);
  Bytes gz = read_file(gp);
  for (size_t len = 0; len < gz.n; len++) {
    write_plain(tp, gz.p, len);
    FloeStatus *st = floe_status_new();
    FloeDataset *d = floe_idx_load(tp, lp, st);
    ck_assert_msg(d == NULL, "gzip cut at %zu of %zu loaded", len, gz.n);
    ck_assert_msg(strstr(floe_status_message(st), tp) && strstr(floe_status_message(st), "offset"),
                  "gzip cut at %zu: %s", len, floe_status_message(st));
    floe_status_free(st);
  }
  free(im.p), free(lb.p), free(gz.p);
}
END_TEST

START_TEST(bad_magic_counts_and_trailing_data) {
  Bytes im = images_file(4, 2, 3), lb = labels_file(4);
  char ip[512], lp[512], tp[512];
  snprintf(ip, sizeof ip, "%s", path_in("im"));
  snprintf(lp, sizeof lp, "%s", path_in("lb"));
  snprintf(tp, sizeof tp, "%s", path_in("bad"));
  write_plain(ip, im.p, im.n);
  write_plain(lp, lb.p, lb.n);
  /* The files swapped: each magic is the other's. */
  expect_error(lp, ip, FLOE_INVALID_ARGUMENT, lp, "offset 0: bad magic 0x00000801",
               "expected 0x00000803");
  /* Each of the four magic bytes changed. */
  for (int k = 0; k < 4; k++) {
    Bytes b = images_file(4, 2, 3);
    b.p[k] ^= 0x40;
    write_plain(tp, b.p, b.n);
    expect_error(tp, lp, FLOE_INVALID_ARGUMENT, tp, "offset 0: bad magic", NULL);
    free(b.p);
  }
  /* Counts that disagree name both files and the count's offset. */
  Bytes lb3 = labels_file(3);
  write_plain(tp, lb3.p, lb3.n);
  expect_error(ip, tp, FLOE_INVALID_ARGUMENT, ip, tp, "(offset 4) declares 3 labels");
  /* Bytes after the declared data. */
  Bytes longer = images_file(4, 2, 3);
  put(&longer, "x", 1);
  write_plain(tp, longer.p, longer.n);
  char want[64];
  snprintf(want, sizeof want, "offset %zu: unexpected data", im.n);
  expect_error(tp, lp, FLOE_INVALID_ARGUMENT, tp, want, NULL);
  /* Zero-sized images. */
  Bytes flat = images_file(4, 0, 3);
  write_plain(tp, flat.p, flat.n);
  expect_error(tp, lp, FLOE_INVALID_ARGUMENT, tp, "offset 8", NULL);
  /* A header claiming 2^32-1 images of 28x28 over a few bytes fails at the truncation (not
   * at allocating 3 TB). */
  Bytes huge = {NULL, 0};
  put_be32(&huge, 0x803);
  put_be32(&huge, 0xffffffffu);
  put_be32(&huge, 28);
  put_be32(&huge, 28);
  put(&huge, "abcdefgh", 8);
  Bytes hl = {NULL, 0};
  put_be32(&hl, 0x801);
  put_be32(&hl, 0xffffffffu);
  write_plain(tp, huge.p, huge.n);
  char hp[512];
  snprintf(hp, sizeof hp, "%s", path_in("hl"));
  write_plain(hp, hl.p, hl.n);
  expect_error(tp, hp, FLOE_DATA_LOSS, tp, "truncated at offset 24", NULL);
  /* Missing files. */
  expect_error(path_in("nope"), lp, FLOE_NOT_FOUND, "nope", NULL, NULL);
  free(im.p), free(lb.p), free(lb3.p), free(longer.p), free(flat.p), free(huge.p), free(hl.p);
}
END_TEST

START_TEST(fashion_mnist_files) {
  FloeStatus *st = floe_status_new();
  /* A folder without the files: the message says how to get them. */
  FloeDataset *d = floe_fashion_mnist_load(tmpdir, 1, st);
  ck_assert_ptr_null(d);
  ck_assert_int_eq(floe_status_code(st), FLOE_NOT_FOUND);
  const char *msg = floe_status_message(st);
  ck_assert_msg(strstr(msg, tmpdir) && strstr(msg, "train-images-idx3-ubyte") &&
                    strstr(msg, "dataset-fashion-mnist") && strstr(msg, "--data DIR"),
                "%s", msg);
  /* Uncompressed images next to compressed labels; the test set with the t10k names. */
  Bytes im = images_file(6, 28, 28), lb = labels_file(6);
  write_plain(path_in("train-images-idx3-ubyte"), im.p, im.n);
  write_gz(path_in("train-labels-idx1-ubyte.gz"), lb.p, lb.n);
  write_gz(path_in("t10k-images-idx3-ubyte.gz"), im.p, im.n);
  d = floe_fashion_mnist_load(tmpdir, 1, st);
  ck_assert_msg(d != NULL, "%s", floe_status_message(st));
  check_contents(d, 6, 28, 28);
  floe_dataset_free(d);
  d = floe_fashion_mnist_load(tmpdir, 0, st);
  ck_assert_ptr_null(d);
  ck_assert_msg(strstr(floe_status_message(st), "t10k-labels-idx1-ubyte"), "%s",
                floe_status_message(st));
  floe_status_free(st);
  free(im.p), free(lb.p);
}
END_TEST

/* ---- batcher ---- */

/* A dataset of n 2x2 images whose pixels encode the example's index: (i & 255, i >> 8). */
static FloeDataset *indexed_dataset(uint32_t n) {
  Bytes im = {NULL, 0}, lb = labels_file(n);
  put_be32(&im, 0x803);
  put_be32(&im, n);
  put_be32(&im, 2);
  put_be32(&im, 2);
  for (uint32_t i = 0; i < n; i++) {
    unsigned char px[4] = {(unsigned char)(i & 255), (unsigned char)(i >> 8), 0, 255};
    put(&im, px, 4);
  }
  char ip[512];
  snprintf(ip, sizeof ip, "%s", path_in("ids"));
  write_plain(ip, im.p, im.n);
  write_plain(path_in("idl"), lb.p, lb.n);
  FloeStatus *st = floe_status_new();
  FloeDataset *d = floe_idx_load(ip, path_in("idl"), st);
  ck_assert_msg(d != NULL, "%s", floe_status_message(st));
  floe_status_free(st);
  free(im.p), free(lb.p);
  return d;
}

/* Draws the rest of the epoch: the example indices into ids (returns how many) and the
 * batch sizes into sizes (count into *nb). Checks shapes, labels and the constant pixels. */
static int drain(FloeBatcher *b, int nhwc, int *ids, int cap, int *sizes, int *nb) {
  FloeStatus *st = floe_status_new();
  FloeTensor *im, *lb;
  int n = 0, r;
  *nb = 0;
  while ((r = floe_batcher_next(b, &im, &lb, st)) == 1) {
    int64_t bs = floe_tensor_dim(lb, 0);
    ck_assert_int_eq(floe_tensor_dtype(im), FLOE_F32);
    ck_assert_int_eq(floe_tensor_dtype(lb), FLOE_I64);
    ck_assert_int_eq(floe_tensor_rank(lb), 1);
    if (nhwc) {
      ck_assert_int_eq(floe_tensor_rank(im), 4);
      ck_assert_int_eq(floe_tensor_dim(im, 1), 2);
      ck_assert_int_eq(floe_tensor_dim(im, 2), 2);
      ck_assert_int_eq(floe_tensor_dim(im, 3), 1);
    } else {
      ck_assert_int_eq(floe_tensor_rank(im), 2);
      ck_assert_int_eq(floe_tensor_dim(im, 1), 4);
    }
    ck_assert_int_eq(floe_tensor_dim(im, 0), bs);
    const float *px = floe_tensor_data(im);
    const int64_t *l = floe_tensor_data(lb);
    for (int64_t i = 0; i < bs; i++) {
      int id = (int)(px[4 * i] * 255.0f + 0.5f) + 256 * (int)(px[4 * i + 1] * 255.0f + 0.5f);
      ck_assert_float_eq(px[4 * i + 3], 1.0f);
      ck_assert_int_eq(l[i], id % 10);
      ck_assert_int_lt(n, cap);
      ids[n++] = id;
    }
    sizes[(*nb)++] = (int)bs;
    floe_tensor_release(im);
    floe_tensor_release(lb);
  }
  ck_assert_msg(r == 0, "next: %s", floe_status_message(st));
  floe_status_free(st);
  return n;
}

START_TEST(batcher_epochs) {
  enum { N = 1003 };
  FloeDataset *d = indexed_dataset(N);
  FloeStatus *st = floe_status_new();
  FloeBatcher *b = floe_batcher_new(d, 64, 1, 42, 0, 0, st);
  ck_assert_msg(b != NULL, "%s", floe_status_message(st));
  ck_assert_int_eq(floe_batcher_num_batches(b), (N + 63) / 64);
  static int ids[3][N], sizes[64];
  int nb;
  for (int e = 0; e < 3; e++) {
    floe_batcher_start_epoch(b, e, 0);
    ck_assert_int_eq(drain(b, 0, ids[e], N, sizes, &nb), N);
    ck_assert_int_eq(nb, (N + 63) / 64);
    ck_assert_int_eq(sizes[nb - 1], N % 64);
    /* Each example exactly once. */
    static char seen[N];
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < N; i++) {
      ck_assert_int_lt(ids[e][i], N);
      ck_assert_msg(!seen[ids[e][i]], "epoch %d: example %d twice", e, ids[e][i]);
      seen[ids[e][i]] = 1;
    }
  }
  /* The end of an epoch stays the end. */
  FloeTensor *im, *lb;
  ck_assert_int_eq(floe_batcher_next(b, &im, &lb, st), 0);
  /* Different epochs, different orders; neither is the identity. */
  ck_assert(memcmp(ids[0], ids[1], sizeof ids[0]) != 0);
  ck_assert(memcmp(ids[1], ids[2], sizeof ids[0]) != 0);
  int fixed = 0;
  for (int i = 0; i < N; i++) fixed += ids[0][i] == i;
  ck_assert_int_lt(fixed, 10);
  /* Same seed: same orders, even visiting the epochs in another order. */
  FloeBatcher *b2 = floe_batcher_new(d, 64, 1, 42, 1, 0, st);
  static int again[N];
  for (int e = 2; e >= 0; e--) {
    floe_batcher_start_epoch(b2, e, 0);
    ck_assert_int_eq(drain(b2, 1, again, N, sizes, &nb), N);
    ck_assert_mem_eq(again, ids[e], sizeof again);
  }
  /* Another seed: another order. */
  FloeBatcher *b3 = floe_batcher_new(d, 64, 1, 43, 0, 0, st);
  ck_assert_int_eq(drain(b3, 0, again, N, sizes, &nb), N);
  ck_assert(memcmp(again, ids[0], sizeof again) != 0);
  /* No shuffle: the file's order. */
  FloeBatcher *b4 = floe_batcher_new(d, 100, 0, 42, 0, 0, st);
  floe_batcher_start_epoch(b4, 5, 0);
  ck_assert_int_eq(drain(b4, 0, again, N, sizes, &nb), N);
  for (int i = 0; i < N; i++) ck_assert_int_eq(again[i], i);
  floe_batcher_free(b);
  floe_batcher_free(b2);
  floe_batcher_free(b3);
  floe_batcher_free(b4);
  floe_dataset_free(d);
  floe_status_free(st);
}
END_TEST

START_TEST(batcher_resume_and_remainder) {
  enum { N = 250 };
  FloeDataset *d = indexed_dataset(N);
  FloeStatus *st = floe_status_new();
  FloeBatcher *b = floe_batcher_new(d, 32, 1, 7, 0, 0, st);
  static int full[N], part[N], sizes[16];
  int nb;
  floe_batcher_start_epoch(b, 3, 0);
  ck_assert_int_eq(drain(b, 0, full, N, sizes, &nb), N);
  /* A new batcher started at batch k of epoch 3 yields exactly the rest of that epoch. */
  for (int k = 0; k <= 8; k++) {
    FloeBatcher *r = floe_batcher_new(d, 32, 1, 7, 0, 0, st);
    floe_batcher_start_epoch(r, 3, k);
    int n = drain(r, 0, part, N, sizes, &nb);
    int want = k * 32 >= N ? 0 : N - k * 32;
    ck_assert_int_eq(n, want);
    ck_assert_mem_eq(part, full + (N - want), (size_t)want * sizeof(int));
    floe_batcher_free(r);
  }
  /* drop_remainder: 7 full batches of 32, the last 26 examples skipped. */
  FloeBatcher *dr = floe_batcher_new(d, 32, 1, 7, 0, 1, st);
  ck_assert_int_eq(floe_batcher_num_batches(dr), N / 32);
  floe_batcher_start_epoch(dr, 3, 0);
  ck_assert_int_eq(drain(dr, 0, part, N, sizes, &nb), N / 32 * 32);
  ck_assert_int_eq(nb, N / 32);
  for (int i = 0; i < nb; i++) ck_assert_int_eq(sizes[i], 32);
  ck_assert_mem_eq(part, full, N / 32 * 32 * sizeof(int));
  /* Bad arguments. */
  ck_assert_ptr_null(floe_batcher_new(d, 0, 1, 7, 0, 0, st));
  ck_assert_int_eq(floe_status_code(st), FLOE_INVALID_ARGUMENT);
  floe_batcher_free(b);
  floe_batcher_free(dr);
  floe_dataset_free(d);
  floe_status_free(st);
}
END_TEST

/* Every example lands in every position about equally often: catches a biased or
 * off-by-one Fisher-Yates (e.g. Sattolo's variant never leaves an element in place). */
START_TEST(shuffle_is_uniform) {
  enum { N = 5, EPOCHS = 10000 };
  FloeDataset *d = indexed_dataset(N);
  FloeStatus *st = floe_status_new();
  FloeBatcher *b = floe_batcher_new(d, N, 1, 99, 0, 0, st);
  static int counts[N][N];
  int ids[N], sizes[2], nb;
  for (int e = 0; e < EPOCHS; e++) {
    floe_batcher_start_epoch(b, e, 0);
    ck_assert_int_eq(drain(b, 0, ids, N, sizes, &nb), N);
    for (int p = 0; p < N; p++) counts[ids[p]][p]++;
  }
  /* Expected 2000 each; the standard deviation is 40, so +-250 is a 6-sigma band. */
  for (int i = 0; i < N; i++)
    for (int p = 0; p < N; p++)
      ck_assert_msg(abs(counts[i][p] - EPOCHS / N) < 250, "example %d at %d: %d times", i, p,
                    counts[i][p]);
  floe_batcher_free(b);
  floe_dataset_free(d);
  floe_status_free(st);
}
END_TEST

/* Fault simulation: the Nth core allocation and every later one fail, for N = 1, 2, ...
 * Loading (plain and gzip), making a batcher and drawing a batch each end in FLOE_NO_MEMORY
 * or succeed with the right contents; leaks show under check-valgrind and check-asan. */
START_TEST(allocation_failures) {
  Bytes im = images_file(9, 4, 5), lb = labels_file(9);
  char ip[512], lp[512];
  snprintf(ip, sizeof ip, "%s", path_in("im.gz"));
  snprintf(lp, sizeof lp, "%s", path_in("lb"));
  write_gz(ip, im.p, im.n);
  write_plain(lp, lb.p, lb.n);
  FloeStatus *st = floe_status_new();
  int n;
  for (n = 1; n < 1000; n++) {
    floe_status_clear(st);
    floe_test_fail_alloc_after(n);
    FloeDataset *d = floe_idx_load(ip, lp, st);
    FloeBatcher *b = d ? floe_batcher_new(d, 4, 1, 3, 1, 0, st) : NULL;
    FloeTensor *x = NULL, *y = NULL;
    int r = b ? floe_batcher_next(b, &x, &y, st) : -1;
    floe_test_fail_alloc_after(0);
    if (r == 1) {
      ck_assert_int_eq(floe_tensor_dim(x, 0), 4);
      ck_assert_int_eq(floe_tensor_dim(y, 0), 4);
      check_contents(d, 9, 4, 5);
    } else {
      ck_assert_msg(floe_status_code(st) == FLOE_NO_MEMORY, "N = %d: %s: %s", n,
                    floe_code_name(floe_status_code(st)), floe_status_message(st));
      ck_assert_ptr_null(x);
      ck_assert_ptr_null(y);
    }
    floe_tensor_release(x);
    floe_tensor_release(y);
    floe_batcher_free(b);
    floe_dataset_free(d);
    if (r == 1) break;
  }
  ck_assert_int_gt(n, 3); /* the walk did fail some allocations */
  ck_assert_int_lt(n, 1000);
  floe_status_free(st);
  free(im.p), free(lb.p);
}
END_TEST

int main(void) {
  Suite *s = suite_create("idx");
  TCase *tc = tcase_create("reader");
  tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
  tcase_add_test(tc, plain_and_gzip_round_trip);
  tcase_add_test(tc, every_truncation_names_the_offset);
  tcase_add_test(tc, bad_magic_counts_and_trailing_data);
  tcase_add_test(tc, fashion_mnist_files);
  tcase_add_test(tc, allocation_failures);
  suite_add_tcase(s, tc);
  tc = tcase_create("batcher");
  tcase_add_checked_fixture(tc, tmp_setup, tmp_teardown);
  tcase_add_test(tc, batcher_epochs);
  tcase_add_test(tc, batcher_resume_and_remainder);
  tcase_add_test(tc, shuffle_is_uniform);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
