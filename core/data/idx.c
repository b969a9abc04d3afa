/* SPDX-License-Identifier: Apache-2.0 */
/* idx.c - IDX files (MNIST, Fashion-MNIST), plain or gzip-compressed, and the batcher.
 *
 * IDX: a big-endian header (two zero bytes, a type byte, 0x08 = u8, and the number of
 * dims), one big-endian u32 per dim, then the data in C order. zlib's gzread reads both
 * compressed and plain files, so one reader serves both; offsets in errors count bytes of
 * the uncompressed stream.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "data.h"

#define IDX_IMAGES_MAGIC 0x00000803u
#define IDX_LABELS_MAGIC 0x00000801u
/* Generous bounds: a claimed image side beyond this is a corrupt header, not a dataset. */
#define IDX_MAX_SIDE 65536
#define IDX_READ_CHUNK (1u << 20)

#define FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/* Pixels stay u8 as in the file (a quarter of the f32 size: 47 MB, not 188, for
 * Fashion-MNIST's training set); the batcher converts each batch to f32 in [0, 1]. */
struct FloeDataset {
  int64_t n, rows, cols;
  uint8_t *pixels; /* n * rows * cols */
  uint8_t *labels; /* n */
};

/* One open IDX stream; `off` counts the uncompressed bytes consumed. */
typedef struct IdxFile {
  gzFile gz;
  const char *path;
  int64_t off;
} IdxFile;

/* Reads up to len bytes; returns how many (short only at the end of the data), or -1 with
 * st set on a read error (corrupt gzip stream, I/O error). */
static int64_t idx_read(IdxFile *f, void *dst, int64_t len, FloeStatus *st) {
  int64_t got = 0;
  while (got < len) {
    int64_t want = len - got;
    unsigned chunk = want > (int64_t)(1u << 30) ? 1u << 30 : (unsigned)want;
    int r = gzread(f->gz, (char *)dst + got, chunk);
    if (r < 0) {
      int e = errno, zerr = 0;
      const char *msg = gzerror(f->gz, &zerr);
      if (zerr == Z_ERRNO)
        floe__status_from_errno(st, e, "%s: read error at offset %lld", f->path,
                                (long long)(f->off + got));
      else
        floe_status_set(st, FLOE_DATA_LOSS, "%s: read error at offset %lld: %s", f->path,
                        (long long)(f->off + got), msg ? msg : "unknown");
      return -1;
    }
    if (r == 0) {
      /* A gzip stream cut short reads as a clean end of data in some zlib versions; the
       * error state says which it was. */
      int zerr = 0;
      const char *msg = gzerror(f->gz, &zerr);
      if (zerr != Z_OK && zerr != Z_STREAM_END) {
        floe_status_set(st, FLOE_DATA_LOSS, "%s: read error at offset %lld: %s", f->path,
                        (long long)(f->off + got), msg ? msg : "unknown");
        return -1;
      }
      break;
    }
    got += r;
  }
  f->off += got;
  return got;
}

static uint32_t be32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* gzopen's failure: errno, or 0 when zlib could not allocate its state. */
static floe_code open_failed(const char *path, FloeStatus *st) {
  int e = errno;
  if (!e) return floe_status_set(st, FLOE_NO_MEMORY, "cannot open %s: out of memory", path);
  return floe__status_from_errno(st, e, "cannot open %s", path);
}

/* Opens path and checks its magic (expect: 0x0803 images / 0x0801 labels) and reads the
 * dims that follow into dims[ndims]. */
static floe_code idx_open(IdxFile *f, const char *path, uint32_t expect, uint32_t *dims,
                          FloeStatus *st) {
  const char *kind = expect == IDX_IMAGES_MAGIC ? "images (u8 [n, rows, cols])"
                                                : "labels (u8 [n])";
  int ndims = (int)(expect & 0xff);
  f->path = path;
  f->off = 0;
  errno = 0; /* still 0 after a failure: zlib ran out of memory */
  f->gz = gzopen(path, "rb");
  if (!f->gz) return open_failed(path, st);
  gzbuffer(f->gz, 256 * 1024);
  unsigned char hdr[4 + 4 * 3];
  int64_t want = 4 + 4 * (int64_t)ndims;
  int64_t got = idx_read(f, hdr, 4, st);
  if (got < 0) return floe_status_code(st);
  if (got < 4)
    return floe_status_set(st, FLOE_DATA_LOSS,
                           "%s: truncated at offset %lld: expected the 4-byte IDX magic "
                           "0x%08x of an IDX %s file",
                           path, (long long)got, expect, kind);
  uint32_t magic = be32(hdr);
  if (magic != expect)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "%s: offset 0: bad magic 0x%08x, expected 0x%08x (an IDX %s "
                           "file)",
                           path, magic, expect, kind);
  got = idx_read(f, hdr + 4, want - 4, st);
  if (got < 0) return floe_status_code(st);
  if (got < want - 4)
    return floe_status_set(st, FLOE_DATA_LOSS,
                           "%s: truncated at offset %lld: the header has %d dims of 4 bytes "
                           "each (offsets 4 to %lld)",
                           path, (long long)(4 + got), ndims, (long long)want);
  for (int i = 0; i < ndims; i++) dims[i] = be32(hdr + 4 + 4 * i);
  return FLOE_OK;
}

/* Reads exactly `len` data bytes (len as the header declares) into a new buffer, then checks
 * that nothing follows. The buffer grows with the data actually read, so a header claiming
 * gigabytes on a small file fails at the truncation, not at a huge allocation. */
static uint8_t *idx_read_data(IdxFile *f, int64_t len, const char *what, FloeStatus *st) {
  int64_t start = f->off, have = 0, cap = len < IDX_READ_CHUNK ? len : IDX_READ_CHUNK;
  uint8_t *buf = floe__malloc(cap ? (size_t)cap : 1);
  if (!buf) goto err_oom;
  while (have < len) {
    if (have == cap) {
      int64_t ncap = cap * 2 < len ? cap * 2 : len;
      uint8_t *nb = floe__realloc(buf, (size_t)ncap);
      if (!nb) goto err_oom;
      buf = nb;
      cap = ncap;
    }
    int64_t got = idx_read(f, buf + have, cap - have, st);
    if (got < 0) goto err_free;
    have += got;
    if (have < cap) {
      floe_status_set(st, FLOE_DATA_LOSS,
                      "%s: truncated at offset %lld: the header declares %s (%lld bytes of "
                      "data from offset %lld, ending at %lld)",
                      f->path, (long long)f->off, what, (long long)len, (long long)start,
                      (long long)(start + len));
      goto err_free;
    }
  }
  unsigned char extra;
  int64_t more = idx_read(f, &extra, 1, st);
  if (more < 0) goto err_free;
  if (more > 0) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT,
                    "%s: offset %lld: unexpected data after the %s the header declares (is the "
                    "count at offset 4 wrong?)",
                    f->path, (long long)(f->off - 1), what);
    goto err_free;
  }
  return buf;

err_oom:
  floe_status_set(st, FLOE_NO_MEMORY, "%s: out of memory reading %lld bytes of data", f->path,
                  (long long)len);
err_free:
  floe__free(buf);
  return NULL;
}

/* ---- IDX files of any element type (the readers' IdxRecordReader) ---- */

static FloeDType idx_dtype(unsigned code) {
  switch (code) {
    case 0x08: return FLOE_U8;
    case 0x09: return FLOE_I8;
    case 0x0C: return FLOE_I32;
    case 0x0D: return FLOE_F32;
    case 0x0E: return FLOE_F64;
    default: return FLOE_DTYPE_INVALID; /* 0x0B (i16) has no Floe dtype */
  }
}

/* Big-endian elements of size esize to host order, in place. */
static void from_big_endian(uint8_t *p, size_t nbytes, size_t esize) {
  const uint16_t probe = 1;
  if (esize == 1 || *(const uint8_t *)&probe == 0) return;
  for (size_t off = 0; off + esize <= nbytes; off += esize)
    for (size_t i = 0; i < esize / 2; i++) {
      uint8_t t = p[off + i];
      p[off + i] = p[off + esize - 1 - i];
      p[off + esize - 1 - i] = t;
    }
}

/* Reads the header of an open IDX stream into *info. */
static floe_code idx_header_any(IdxFile *f, FloeIdxInfo *info, FloeStatus *st) {
  unsigned char hdr[4 + 4 * FLOE_MAX_DIMS];
  int64_t got = idx_read(f, hdr, 4, st);
  if (got < 0) return floe_status_code(st);
  if (got < 4)
    return floe_status_set(st, FLOE_DATA_LOSS,
                           "%s: truncated at offset %lld: expected the 4-byte IDX magic (0, 0, "
                           "type, number of dims)", f->path, (long long)got);
  FloeDType dt = idx_dtype(hdr[2]);
  if (hdr[0] != 0 || hdr[1] != 0 || dt == FLOE_DTYPE_INVALID || hdr[3] < 1 ||
      hdr[3] > FLOE_MAX_DIMS)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "%s: offset 0: bad IDX magic %02x %02x %02x %02x: expected 00 00, a "
                           "type (08 u8, 09 i8, 0C i32, 0D f32, 0E f64; 0B i16 is not "
                           "supported) and 1 to %d dims", f->path, hdr[0], hdr[1], hdr[2], hdr[3],
                           FLOE_MAX_DIMS);
  int nd = hdr[3];
  got = idx_read(f, hdr + 4, 4 * (int64_t)nd, st);
  if (got < 0) return floe_status_code(st);
  if (got < 4 * (int64_t)nd)
    return floe_status_set(st, FLOE_DATA_LOSS,
                           "%s: truncated at offset %lld: the header has %d dims of 4 bytes "
                           "each (offsets 4 to %d)", f->path, (long long)(4 + got), nd, 4 + 4 * nd);
  info->dtype = dt;
  info->rank = nd;
  for (int i = 0; i < nd; i++) info->dims[i] = be32(hdr + 4 + 4 * i);
  return FLOE_OK;
}

floe_code floe__idx_read_file(const char *path, FloeIdxInfo *info, void **data, FloeStatus *st) {
  IdxFile f = {NULL, path, 0};
  if (data) *data = NULL;
  errno = 0; /* still 0 after a failure: zlib ran out of memory */
  f.gz = gzopen(path, "rb");
  if (!f.gz) return open_failed(path, st);
  gzbuffer(f.gz, 256 * 1024);
  floe_code rc = idx_header_any(&f, info, st);
  if (rc != FLOE_OK || !data) goto out;
  /* Each dim < 2^32: the product is checked as it grows. */
  uint64_t total = floe_dtype_size(info->dtype);
  for (int i = 0; i < info->rank; i++)
    if (__builtin_mul_overflow(total, (uint64_t)info->dims[i], &total) || total > SIZE_MAX / 2) {
      rc = floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "%s: offset 4: the dims declare more data than fits in memory", path);
      goto out;
    }
  char what[64];
  snprintf(what, sizeof what, "%lld bytes of %s items", (long long)total,
           floe_dtype_name(info->dtype));
  uint8_t *buf = idx_read_data(&f, (int64_t)total, what, st);
  if (!buf) {
    rc = floe_status_code(st);
    goto out;
  }
  from_big_endian(buf, total, floe_dtype_size(info->dtype));
  *data = buf;
out:
  gzclose(f.gz);
  return rc;
}

FloeDataset *floe_idx_load(const char *images_path, const char *labels_path,
                           FloeStatus *status) {
  if (!images_path || !labels_path) {
    floe_status_set(status, FLOE_INVALID_ARGUMENT, "floe_idx_load: a path is NULL");
    return NULL;
  }
  FloeStatus local = {FLOE_OK, NULL};
  FloeStatus *st = status ? status : &local;
  IdxFile fi = {NULL, NULL, 0}, fl = {NULL, NULL, 0};
  uint8_t *pixels = NULL, *labels = NULL;
  FloeDataset *d = NULL;
  uint32_t idims[3] = {0, 0, 0}, ldims[1] = {0};
  if (idx_open(&fi, images_path, IDX_IMAGES_MAGIC, idims, st) != FLOE_OK) goto err;
  if (idx_open(&fl, labels_path, IDX_LABELS_MAGIC, ldims, st) != FLOE_OK) goto err;
  if (idims[0] != ldims[0]) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT,
                    "%s (offset 4) declares %u images but %s (offset 4) declares %u labels: "
                    "the files do not belong together",
                    images_path, idims[0], labels_path, ldims[0]);
    goto err;
  }
  if (idims[1] == 0 || idims[2] == 0 || idims[1] > IDX_MAX_SIDE || idims[2] > IDX_MAX_SIDE) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT,
                    "%s: offset 8: images of %u x %u pixels (each side must be 1 to %d)",
                    images_path, idims[1], idims[2], IDX_MAX_SIDE);
    goto err;
  }
  /* n < 2^32 and each side <= 2^16: the product fits in int64; a batch's f32 copy of it
   * must fit in size_t too. */
  int64_t n = idims[0], rows = idims[1], cols = idims[2], total = n * rows * cols;
  if ((uint64_t)total > SIZE_MAX / sizeof(float)) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT,
                    "%s: offset 4: %lld images of %lld x %lld pixels do not fit in memory",
                    images_path, (long long)n, (long long)rows, (long long)cols);
    goto err;
  }
  char what[96];
  snprintf(what, sizeof what, "%lld images of %lld x %lld pixels", (long long)n,
           (long long)rows, (long long)cols);
  if (!(pixels = idx_read_data(&fi, total, what, st))) goto err;
  snprintf(what, sizeof what, "%lld labels", (long long)n);
  if (!(labels = idx_read_data(&fl, n, what, st))) goto err;
  d = floe__calloc(1, sizeof *d);
  if (!d) {
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory loading %s", images_path);
    goto err;
  }
  d->pixels = pixels;
  d->n = n;
  d->rows = rows;
  d->cols = cols;
  d->labels = labels;
  gzclose(fi.gz);
  gzclose(fl.gz);
  return d;

err:
  floe__free(d);
  floe__free(pixels);
  floe__free(labels);
  if (fi.gz) gzclose(fi.gz);
  if (fl.gz) gzclose(fl.gz);
  floe__free(local.msg);
  return NULL;
}

/* dir/base.gz, or dir/base when only the uncompressed file is there. NULL + FLOE_NOT_FOUND
 * naming the path, the package and --data when neither is. Caller frees. */
static char *fashion_file(const char *dir, const char *base, FloeStatus *st) {
  char *gz = floe__asprintf("%s/%s.gz", dir, base);
  char *plain = floe__asprintf("%s/%s", dir, base);
  if (!gz || !plain) {
    floe__free(gz);
    floe__free(plain);
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory");
    return NULL;
  }
  if (access(gz, F_OK) == 0) {
    floe__free(plain);
    return gz;
  }
  if (access(plain, F_OK) == 0) {
    floe__free(gz);
    return plain;
  }
  floe_status_set(st, FLOE_NOT_FOUND,
                  "Fashion-MNIST file %s not found (nor %s): install Debian's "
                  "dataset-fashion-mnist package (apt-get install dataset-fashion-mnist) or "
                  "pass --data DIR naming a folder with the four IDX files",
                  gz, base);
  floe__free(gz);
  floe__free(plain);
  return NULL;
}

floe_code floe_fashion_mnist_files(const char *dir, int train, char **images, char **labels,
                                   FloeStatus *status) {
  if (!images || !labels)
    return floe_status_set(status, FLOE_INVALID_ARGUMENT, "floe_fashion_mnist_files: NULL");
  if (!dir) dir = FASHION_MNIST_DIR;
  *images = fashion_file(dir, train ? "train-images-idx3-ubyte" : "t10k-images-idx3-ubyte",
                         status);
  *labels = *images ? fashion_file(dir, train ? "train-labels-idx1-ubyte"
                                              : "t10k-labels-idx1-ubyte", status)
                    : NULL;
  if (*labels) return FLOE_OK;
  floe__free(*images);
  *images = NULL;
  return floe_status_code(status) ? floe_status_code(status) : FLOE_NOT_FOUND;
}

FloeDataset *floe_fashion_mnist_load(const char *dir, int train, FloeStatus *status) {
  char *ip, *lp;
  if (floe_fashion_mnist_files(dir, train, &ip, &lp, status) != FLOE_OK) return NULL;
  FloeDataset *d = floe_idx_load(ip, lp, status);
  floe__free(ip);
  floe__free(lp);
  return d;
}

void floe_dataset_free(FloeDataset *d) {
  if (!d) return;
  floe__free(d->pixels);
  floe__free(d->labels);
  floe__free(d);
}

void floe_dataset_truncate(FloeDataset *d, int64_t n) {
  if (d && n >= 0 && n < d->n) d->n = n;
}

int64_t floe_dataset_size(const FloeDataset *d) { return d ? d->n : 0; }
int64_t floe_dataset_rows(const FloeDataset *d) { return d ? d->rows : 0; }
int64_t floe_dataset_cols(const FloeDataset *d) { return d ? d->cols : 0; }
const uint8_t *floe_dataset_pixels(const FloeDataset *d) { return d ? d->pixels : NULL; }
const uint8_t *floe_dataset_labels(const FloeDataset *d) { return d ? d->labels : NULL; }

/* ------------------------------------------------------------------------------------ */
/* Batcher. The order of epoch e is a Fisher-Yates shuffle driven by xoshiro256** seeded
 * through splitmix64 from (seed, e): it depends on nothing else, so a resumed run draws the
 * permutation a continuous one did. */

struct FloeBatcher {
  const FloeDataset *d; /* borrowed */
  int64_t n, batch;     /* n: the dataset's size when the batcher was made */
  int shuffle, nhwc, drop_remainder;
  uint64_t seed;
  uint32_t *order;      /* the permutation of perm_epoch (shuffle only) */
  int64_t perm_epoch;   /* -1: none computed yet */
  int64_t epoch, pos;   /* next example: position pos of epoch's order */
};

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro256ss(uint64_t s[4]) {
  uint64_t r = rotl64(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl64(s[3], 45);
  return r;
}

/* Uniform in [0, range) without modulo bias (Lemire's multiply-and-reject). */
static uint64_t bounded(uint64_t s[4], uint64_t range) {
  unsigned __int128 m = (unsigned __int128)xoshiro256ss(s) * range;
  uint64_t low = (uint64_t)m;
  if (low < range) {
    uint64_t threshold = (0 - range) % range;
    while (low < threshold) {
      m = (unsigned __int128)xoshiro256ss(s) * range;
      low = (uint64_t)m;
    }
  }
  return (uint64_t)(m >> 64);
}

void floe__idx_permutation(uint64_t seed, int64_t epoch, int64_t n, uint32_t *order) {
  uint64_t x = seed, s[4];
  /* Mix the epoch through its own splitmix64 step so neighbouring (seed, epoch) pairs give
   * unrelated states. */
  uint64_t e = (uint64_t)epoch;
  x ^= splitmix64(&e);
  for (int i = 0; i < 4; i++) s[i] = splitmix64(&x);
  for (int64_t i = 0; i < n; i++) order[i] = (uint32_t)i;
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = (int64_t)bounded(s, (uint64_t)i + 1);
    uint32_t t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
}

static void batcher_permute(FloeBatcher *b, int64_t epoch) {
  floe__idx_permutation(b->seed, epoch, b->n, b->order);
  b->perm_epoch = epoch;
}

FloeBatcher *floe_batcher_new(const FloeDataset *d, int64_t batch, int shuffle, uint64_t seed,
                              int images_nhwc, int drop_remainder, FloeStatus *status) {
  if (!d || batch <= 0) {
    floe_status_set(status, FLOE_INVALID_ARGUMENT,
                    "floe_batcher_new: %s (batch %lld)", d ? "batch must be >= 1" : "no dataset",
                    (long long)batch);
    return NULL;
  }
  FloeBatcher *b = floe__calloc(1, sizeof *b);
  if (!b) goto err_oom;
  b->d = d;
  b->n = d->n;
  b->batch = batch;
  b->shuffle = shuffle != 0;
  b->nhwc = images_nhwc != 0;
  b->drop_remainder = drop_remainder != 0;
  b->seed = seed;
  b->perm_epoch = -1;
  if (b->shuffle) {
    b->order = floe__malloc(b->n ? (size_t)b->n * sizeof *b->order : 1);
    if (!b->order) goto err_oom;
  }
  floe_batcher_start_epoch(b, 0, 0);
  return b;

err_oom:
  floe__free(b);
  floe_status_set(status, FLOE_NO_MEMORY, "floe_batcher_new: out of memory (%lld examples)",
                  (long long)d->n);
  return NULL;
}

void floe_batcher_free(FloeBatcher *b) {
  if (!b) return;
  floe__free(b->order);
  floe__free(b);
}

int64_t floe_batcher_num_batches(const FloeBatcher *b) {
  if (!b) return 0;
  return b->drop_remainder ? b->n / b->batch : (b->n + b->batch - 1) / b->batch;
}

void floe_batcher_start_epoch(FloeBatcher *b, int64_t epoch, int64_t start) {
  if (!b) return;
  if (epoch < 0) epoch = 0;
  if (start < 0) start = 0;
  if (b->shuffle && b->perm_epoch != epoch) batcher_permute(b, epoch);
  b->epoch = epoch;
  int64_t nb = floe_batcher_num_batches(b);
  b->pos = start >= nb ? b->n : start * b->batch;
}

int floe_batcher_next(FloeBatcher *b, FloeTensor **images, FloeTensor **labels,
                      FloeStatus *status) {
  if (!b || !images || !labels) {
    floe_status_set(status, FLOE_INVALID_ARGUMENT, "floe_batcher_next: NULL argument");
    return -1;
  }
  *images = *labels = NULL;
  int64_t left = b->n - b->pos;
  if (left <= 0 || (b->drop_remainder && left < b->batch)) return 0;
  int64_t bs = left < b->batch ? left : b->batch, px = b->d->rows * b->d->cols;
  int64_t idims[4] = {bs, b->d->rows, b->d->cols, 1}, flat[2] = {bs, px}, ldims[1] = {bs};
  FloeStatus local = {FLOE_OK, NULL};
  FloeStatus *st = status ? status : &local;
  FloeTensor *im = b->nhwc ? floe__tensor_alloc(NULL, FLOE_F32, 4, idims, st)
                           : floe__tensor_alloc(NULL, FLOE_F32, 2, flat, st);
  FloeTensor *lb = im ? floe__tensor_alloc(NULL, FLOE_I64, 1, ldims, st) : NULL;
  if (!lb) {
    floe_tensor_release(im);
    floe__free(local.msg);
    return -1;
  }
  float *dst = floe_tensor_data(im);
  int64_t *ldst = floe_tensor_data(lb);
  for (int64_t i = 0; i < bs; i++) {
    int64_t k = b->pos + i, e = b->shuffle ? b->order[k] : k;
    if (i + 1 < bs) {
      /* Shuffled rows are cache misses: fetch the next one while this one converts. */
      int64_t nx = b->shuffle ? b->order[k + 1] : k + 1;
      const char *p = (const char *)(b->d->pixels + nx * px);
      for (int64_t off = 0; off < px; off += 64) __builtin_prefetch(p + off);
    }
    const uint8_t *restrict src = b->d->pixels + e * px;
    float *restrict row = dst + i * px;
    for (int64_t j = 0; j < px; j++) row[j] = (float)src[j] / 255.0f; /* vectorises */
    ldst[i] = b->d->labels[e];
  }
  b->pos += bs;
  *images = im;
  *labels = lb;
  return 1;
}
