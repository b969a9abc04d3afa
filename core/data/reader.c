/* SPDX-License-Identifier: Apache-2.0 */
/* reader.c - readers of records from files (text lines, fixed-length records, IDX items) as
 * session resources, and the ReaderRead, ReaderReadUpTo and ReaderSeek kernels.
 *
 * A reader walks its files in order, num_epochs times; its position is (epoch, pos), pos
 * counting the records of the epoch read so far. Text and fixed-length readers stream
 * (only the open file's state is kept); an IDX reader loads its files whole on the first
 * read, so that it can visit them in a shuffled order. A record's key is its index among
 * all the records of the files: pos for the streaming readers, the record's own index for
 * a shuffled IDX reader.
 *
 * One ReaderRead reads from several readers under all their locks (taken in serial order,
 * so two reads of overlapping sets never deadlock): the k-th images and the k-th labels
 * stay together however many threads read.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "data.h"

typedef enum ReaderKind { R_TEXT = 0, R_FIXED = 1, R_IDX = 2 } ReaderKind;

static const char *const kind_names[] = {"TextLineReader", "FixedLengthRecordReader",
                                         "IdxRecordReader"};

/* The records' attributes: what a reader node asks for. */
typedef struct ReaderSpec {
  ReaderKind kind;
  const char *files;
  int64_t num_epochs;
  int64_t skip_header;                     /* text */
  int64_t header, record, footer, hop;     /* fixed */
  FloeDType dtype;                         /* fixed */
  FloeShape shape;                         /* fixed: the record's shape (resolved) */
  bool shuffle;                            /* idx */
  int64_t seed, max_records;               /* idx */
} ReaderSpec;

typedef struct Reader {
  FloeResource res;        /* first: the resource manager names readers through it */
  ReaderSpec spec;         /* spec.files is NULL here: see files */
  char **files;
  int nfiles;
  pthread_mutex_t mu;      /* guards everything below */
  bool shutdown;
  int64_t epoch, pos;      /* the next record: position pos of epoch */
  /* streaming: the open file (index cur; cur == nfiles: the epoch's files are done) */
  int cur;
  bool open;
  gzFile gz;               /* text */
  int fd;                  /* fixed */
  int64_t off;             /* text: offset of buf[start]; fixed: the next record's offset */
  int64_t data_end;        /* fixed: where the footer starts */
  uint8_t *buf;            /* text: buffered bytes [start, end) */
  size_t cap, start, end;
  bool eof;
  /* idx: every record, loaded on the first read */
  bool loaded;
  uint8_t *data;
  int64_t n;               /* records kept (max_records applied) */
  size_t rec_bytes;
  FloeIdxInfo info;        /* the first file's; dims[0] is that file's item count */
  uint32_t *order;         /* shuffle: the permutation of order_epoch */
  int64_t order_epoch;
} Reader;

static const char *rname(const Reader *r) { return r->res.name ? r->res.name : "?"; }

/* ---- the resource ---- */

static void stream_close(Reader *r) {
  if (!r->open) return;
  if (r->gz) gzclose(r->gz);
  if (r->fd >= 0) close(r->fd);
  r->gz = NULL;
  r->fd = -1;
  r->open = false;
  r->start = r->end = 0;
  r->eof = false;
}

static void reader_destroy(FloeResource *res) {
  Reader *r = (Reader *)res;
  stream_close(r);
  for (int i = 0; i < r->nfiles; i++) floe__free(r->files[i]);
  floe__free(r->files);
  floe__free(r->buf);
  floe__free(r->data);
  floe__free(r->order);
  pthread_mutex_destroy(&r->mu);
  floe__free(r);
}

/* The session is closing or the container is reset: later reads fail. */
static void reader_shutdown(FloeResource *res) {
  Reader *r = (Reader *)res;
  pthread_mutex_lock(&r->mu);
  r->shutdown = true;
  stream_close(r);
  pthread_mutex_unlock(&r->mu);
}

static const FloeResourceOps reader_ops = {"reader", reader_shutdown, reader_destroy};

/* Splits "a;b;c" into r->files. */
static floe_code split_files(Reader *r, const char *files, FloeStatus *st) {
  int n = 1;
  for (const char *p = files; *p; p++) n += *p == ';';
  r->files = floe__calloc((size_t)n, sizeof *r->files);
  if (!r->files) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory creating a reader");
  const char *p = files;
  for (int i = 0; i < n; i++) {
    const char *semi = strchr(p, ';');
    size_t len = semi ? (size_t)(semi - p) : strlen(p);
    if (len == 0)
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "files \"%s\": path %d is empty (paths are separated by ';')",
                             files, i + 1);
    if (!(r->files[i] = floe__strndup(p, len)))
      return floe_status_set(st, FLOE_NO_MEMORY, "out of memory creating a reader");
    r->nfiles = i + 1;
    p = semi ? semi + 1 : p + len;
  }
  return FLOE_OK;
}

static FloeResource *reader_make(void *arg, FloeStatus *st) {
  const ReaderSpec *sp = arg;
  Reader *r = floe__calloc(1, sizeof *r);
  if (!r) {
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory creating a reader");
    return NULL;
  }
  if (pthread_mutex_init(&r->mu, NULL) != 0) {
    floe__free(r);
    floe_status_set(st, FLOE_RESOURCE_EXHAUSTED, "cannot create a reader's mutex");
    return NULL;
  }
  floe__resource_init(&r->res, &reader_ops);
  r->spec = *sp;
  r->spec.files = NULL;
  r->fd = -1;
  r->order_epoch = -1;
  if (split_files(r, sp->files, st) != FLOE_OK) {
    reader_destroy(&r->res);
    return NULL;
  }
  return &r->res;
}

static bool same_spec(const Reader *r, const ReaderSpec *sp) {
  const ReaderSpec *a = &r->spec;
  bool same = a->kind == sp->kind && a->num_epochs == sp->num_epochs &&
              a->skip_header == sp->skip_header && a->header == sp->header &&
              a->record == sp->record && a->footer == sp->footer && a->hop == sp->hop &&
              a->dtype == sp->dtype && a->shape.rank == sp->shape.rank &&
              a->shuffle == sp->shuffle && a->seed == sp->seed &&
              a->max_records == sp->max_records;
  for (int i = 0; same && i < a->shape.rank; i++) same = a->shape.dims[i] == sp->shape.dims[i];
  /* the file list, joined again */
  const char *p = sp->files;
  for (int i = 0; same && i < r->nfiles; i++) {
    size_t len = strlen(r->files[i]);
    same = strncmp(p, r->files[i], len) == 0 && (p[len] == ';' || (p[len] == 0 && i == r->nfiles - 1));
    p += len + (p[len] == ';');
  }
  return same && *p == '\0';
}

/* ---- errors ---- */

static floe_code end_of_data(const Reader *r, FloeStatus *st) {
  return floe_status_set(st, FLOE_OUT_OF_RANGE,
                         "reader '%s' has read every record of its %d file%s (%" PRId64
                         " epoch%s)", rname(r), r->nfiles, r->nfiles == 1 ? "" : "s",
                         r->spec.num_epochs, r->spec.num_epochs == 1 ? "" : "s");
}

static floe_code no_records(const Reader *r, FloeStatus *st) {
  return floe_status_set(st, FLOE_OUT_OF_RANGE, "reader '%s': its %d file%s hold no records",
                         rname(r), r->nfiles, r->nfiles == 1 ? "" : "s");
}

static bool exhausted(const Reader *r) {
  return r->spec.num_epochs > 0 && r->epoch >= r->spec.num_epochs;
}

/* ---- text lines ---- */

static floe_code text_open(Reader *r, FloeStatus *st) {
  const char *path = r->files[r->cur];
  r->gz = gzopen(path, "rb");
  if (!r->gz) {
    int e = errno;
    if (!e) /* zlib's own allocation failed */
      return floe_status_set(st, FLOE_NO_MEMORY, "reader '%s': cannot open %s: out of memory",
                             rname(r), path);
    return floe__status_from_errno(st, e, "reader '%s': cannot open %s", rname(r), path);
  }
  r->open = true;
  r->off = 0;
  r->start = r->end = 0;
  r->eof = false;
  return FLOE_OK;
}

/* The next line of the open file: *line (borrowed, until the next call) of *len bytes;
 * *got false at its end. */
static floe_code text_line(Reader *r, const uint8_t **line, size_t *len, int64_t *at,
                           bool *got, FloeStatus *st) {
  for (;;) {
    uint8_t *nl = r->end > r->start ? memchr(r->buf + r->start, '\n', r->end - r->start) : NULL;
    if (nl || (r->eof && r->end > r->start)) {
      size_t stop = nl ? (size_t)(nl - r->buf) : r->end;
      *line = r->buf + r->start;
      *len = stop - r->start;
      *at = r->off;
      if (*len && (*line)[*len - 1] == '\r') (*len)--;
      size_t next = nl ? stop + 1 : stop;
      r->off += (int64_t)(next - r->start);
      r->start = next;
      *got = true;
      return FLOE_OK;
    }
    if (r->eof) {
      *got = false;
      return FLOE_OK;
    }
    if (r->start > 0) { /* keep the partial line at the front */
      memmove(r->buf, r->buf + r->start, r->end - r->start);
      r->end -= r->start;
      r->start = 0;
    }
    if (r->cap - r->end < 4096) {
      size_t cap = r->cap ? 2 * r->cap : 65536;
      uint8_t *b = floe__realloc(r->buf, cap);
      if (!b)
        return floe_status_set(st, FLOE_NO_MEMORY, "reader '%s': out of memory for a line of "
                               "%s longer than %zu bytes", rname(r), r->files[r->cur], r->end);
      r->buf = b;
      r->cap = cap;
    }
    size_t room = r->cap - r->end;
    int k = gzread(r->gz, r->buf + r->end, room > (1u << 30) ? 1u << 30 : (unsigned)room);
    int zerr = 0;
    const char *msg = gzerror(r->gz, &zerr);
    if (k < 0 || (zerr != Z_OK && zerr != Z_STREAM_END))
      return floe_status_set(st, FLOE_DATA_LOSS, "reader '%s': %s: read error at offset %" PRId64
                             ": %s", rname(r), r->files[r->cur], r->off + (int64_t)r->end,
                             zerr == Z_ERRNO ? strerror(errno) : (msg ? msg : "unknown"));
    if (k == 0) r->eof = true;
    r->end += (size_t)k;
  }
}

/* The next line as u8 [len]; *got false at the end of the open file. */
static floe_code text_next(Reader *r, FloeTensor **value, bool *got, FloeStatus *st) {
  const uint8_t *line;
  size_t len;
  int64_t at;
  floe_code rc = text_line(r, &line, &len, &at, got, st);
  if (rc != FLOE_OK || !*got) return rc;
  int64_t dims[1] = {(int64_t)len};
  FloeTensor *t = floe__tensor_alloc(NULL, FLOE_U8, 1, dims, st);
  if (!t) return floe_status_code(st);
  if (len) memcpy(floe_tensor_data(t), line, len);
  *value = t;
  return FLOE_OK;
}

/* ---- fixed-length records ---- */

static floe_code fixed_open(Reader *r, FloeStatus *st) {
  const char *path = r->files[r->cur];
  r->fd = open(path, O_RDONLY | O_CLOEXEC);
  struct stat sb;
  if (r->fd < 0 || fstat(r->fd, &sb) != 0) {
    int e = errno;
    if (r->fd >= 0) close(r->fd);
    r->fd = -1;
    return floe__status_from_errno(st, e, "reader '%s': cannot open %s", rname(r), path);
  }
  r->open = true;
  int64_t size = (int64_t)sb.st_size;
  if (size < r->spec.header + r->spec.footer)
    return floe_status_set(st, FLOE_DATA_LOSS,
                           "reader '%s': %s: offset %" PRId64 ": the file ends before its "
                           "header (%" PRId64 " bytes) and footer (%" PRId64 " bytes)",
                           rname(r), path, size, r->spec.header, r->spec.footer);
  r->off = r->spec.header;
  r->data_end = size - r->spec.footer;
  return FLOE_OK;
}

static floe_code fixed_next(Reader *r, FloeTensor **value, bool *got, FloeStatus *st) {
  const ReaderSpec *sp = &r->spec;
  const char *path = r->files[r->cur];
  int64_t left = r->data_end - r->off;
  *got = false;
  if (left < sp->record) {
    /* Windows (hop) may leave a tail no window covers; whole records must fill the data. */
    if (left == 0 || sp->hop > 0) return FLOE_OK;
    return floe_status_set(st, FLOE_DATA_LOSS,
                           "reader '%s': %s: offset %" PRId64 ": truncated record: %" PRId64
                           " bytes left before %s, record_bytes is %" PRId64
                           " (check header_bytes, record_bytes and footer_bytes)",
                           rname(r), path, r->off, left,
                           sp->footer ? "the footer" : "the end of the file", sp->record);
  }
  FloeTensor *t = floe__tensor_alloc(NULL, sp->dtype, sp->shape.rank, sp->shape.dims, st);
  if (!t) return floe_status_code(st);
  size_t done = 0;
  while (done < (size_t)sp->record) {
    ssize_t k = pread(r->fd, (char *)floe_tensor_data(t) + done, (size_t)sp->record - done,
                      (off_t)(r->off + (int64_t)done));
    if (k <= 0) {
      int e = errno;
      floe_tensor_release(t);
      return floe_status_set(st, FLOE_DATA_LOSS, "reader '%s': %s: read error at offset %" PRId64
                             ": %s", rname(r), path, r->off + (int64_t)done,
                             k == 0 ? "the file shrank while it was read" : strerror(e));
    }
    done += (size_t)k;
  }
  r->off += sp->hop > 0 ? sp->hop : sp->record;
  *value = t;
  *got = true;
  return FLOE_OK;
}

/* ---- IDX items ---- */

static floe_code idx_load(Reader *r, FloeStatus *st) {
  uint8_t *all = NULL;
  size_t have = 0;
  int64_t n = 0;
  for (int i = 0; i < r->nfiles; i++) {
    FloeIdxInfo info;
    void *data;
    if (floe__idx_read_file(r->files[i], &info, &data, st) != FLOE_OK) {
      floe__status_prefix(st, "reader '%s'", rname(r));
      goto err;
    }
    bool same = i == 0 || (info.dtype == r->info.dtype && info.rank == r->info.rank);
    for (int d = 1; i > 0 && same && d < info.rank; d++) same = info.dims[d] == r->info.dims[d];
    if (!same) {
      FloeShape a = floe_shape_make(info.rank - 1, info.dims + 1);
      FloeShape b = floe_shape_make(r->info.rank - 1, r->info.dims + 1);
      char sa[160], sb[160];
      floe_status_set(st, FLOE_INVALID_ARGUMENT,
                      "reader '%s': %s holds %s %s items but %s holds %s %s: the files of one "
                      "reader must agree", rname(r), r->files[i], floe_dtype_name(info.dtype),
                      floe_shape_str(&a, sa, sizeof sa), r->files[0],
                      floe_dtype_name(r->info.dtype), floe_shape_str(&b, sb, sizeof sb));
      floe__free(data);
      goto err;
    }
    if (i == 0) {
      r->info = info;
      r->rec_bytes = floe_dtype_size(info.dtype);
      for (int d = 1; d < info.rank; d++) r->rec_bytes *= (size_t)info.dims[d];
    }
    size_t bytes = (size_t)info.dims[0] * r->rec_bytes;
    uint8_t *grown = i == 0 ? data : floe__realloc(all, have + bytes + 1);
    if (!grown) {
      floe__free(data);
      floe_status_set(st, FLOE_NO_MEMORY, "reader '%s': out of memory loading %s", rname(r),
                      r->files[i]);
      goto err;
    }
    if (i > 0) {
      if (bytes) memcpy(grown + have, data, bytes);
      floe__free(data);
    }
    all = grown;
    have += bytes;
    n += info.dims[0];
  }
  if (r->spec.max_records >= 0 && r->spec.max_records < n) n = r->spec.max_records;
  if (r->spec.shuffle && n > (int64_t)UINT32_MAX) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT, "reader '%s': %" PRId64 " records are too many "
                    "to shuffle (at most 2^32)", rname(r), n);
    goto err;
  }
  if (r->spec.shuffle && !(r->order = floe__malloc((size_t)(n ? n : 1) * sizeof *r->order))) {
    floe_status_set(st, FLOE_NO_MEMORY, "reader '%s': out of memory for a permutation of %"
                    PRId64, rname(r), n);
    goto err;
  }
  r->data = all;
  r->n = n;
  r->loaded = true;
  return FLOE_OK;

err:
  floe__free(all);
  return floe_status_code(st);
}

/* Record `pos` of the current epoch: into dst (rec_bytes) when given, else a new tensor. */
static floe_code idx_next(Reader *r, int64_t *key, FloeTensor **value, uint8_t *dst,
                          FloeStatus *st) {
  int64_t k = r->pos;
  if (r->spec.shuffle) {
    if (r->order_epoch != r->epoch) {
      floe__idx_permutation((uint64_t)r->spec.seed, r->epoch, r->n, r->order);
      r->order_epoch = r->epoch;
    }
    k = r->order[r->pos];
  }
  if (!dst) {
    FloeTensor *t = floe__tensor_alloc(NULL, r->info.dtype, r->info.rank - 1, r->info.dims + 1, st);
    if (!t) return floe_status_code(st);
    dst = floe_tensor_data(t);
    *value = t;
  }
  if (r->rec_bytes) memcpy(dst, r->data + (size_t)k * r->rec_bytes, r->rec_bytes);
  *key = k;
  return FLOE_OK;
}

/* ---- reading ---- */

/* Caller holds r->mu: the next record and its key; FLOE_OUT_OF_RANGE after the last record
 * of the last epoch. The record is a new tensor in *value, or for an IDX reader given dst,
 * its bytes copied to dst (*value untouched). */
static floe_code reader_next(Reader *r, int64_t *key, FloeTensor **value, uint8_t *dst,
                             FloeStatus *st) {
  if (r->shutdown)
    return floe_status_set(st, FLOE_CANCELLED, "reader '%s' was shut down (its session closed "
                           "or its container was reset)", rname(r));
  if (r->spec.kind == R_IDX) {
    if (!r->loaded && idx_load(r, st) != FLOE_OK) return floe_status_code(st);
    if (r->n == 0) return no_records(r, st);
    if (r->pos == r->n) {
      r->epoch++;
      r->pos = 0;
    }
    if (exhausted(r)) return end_of_data(r, st);
    floe_code rc = idx_next(r, key, value, dst, st);
    if (rc == FLOE_OK) r->pos++;
    return rc;
  }
  for (;;) {
    if (r->cur == r->nfiles) { /* the epoch's files are done */
      if (r->pos == 0) return no_records(r, st);
      r->epoch++;
      r->pos = 0;
      r->cur = 0;
    }
    if (exhausted(r)) return end_of_data(r, st);
    if (!r->open) {
      floe_code rc = r->spec.kind == R_TEXT ? text_open(r, st) : fixed_open(r, st);
      for (int64_t i = 0; rc == FLOE_OK && r->spec.kind == R_TEXT && i < r->spec.skip_header; i++) {
        const uint8_t *line;
        size_t len;
        int64_t at;
        bool got;
        rc = text_line(r, &line, &len, &at, &got, st);
        if (!got) break;
      }
      if (rc != FLOE_OK) {
        stream_close(r);
        return rc;
      }
    }
    bool got = false;
    floe_code rc = r->spec.kind == R_TEXT ? text_next(r, value, &got, st)
                                          : fixed_next(r, value, &got, st);
    if (rc != FLOE_OK) return rc;
    if (got) {
      *key = r->pos++;
      return FLOE_OK;
    }
    stream_close(r);
    r->cur++;
  }
}

/* Caller holds r->mu: positions r at `record` of `epoch`. */
static floe_code reader_seek(Reader *r, int64_t epoch, int64_t record, FloeStatus *st) {
  if (epoch < 0 || record < 0)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT, "reader '%s': cannot seek to epoch %"
                           PRId64 ", record %" PRId64, rname(r), epoch, record);
  stream_close(r);
  r->epoch = epoch;
  r->pos = 0;
  r->cur = 0;
  if (r->spec.kind == R_IDX) {
    if (!r->loaded && idx_load(r, st) != FLOE_OK) return floe_status_code(st);
    if (record > r->n)
      return floe_status_set(st, FLOE_OUT_OF_RANGE, "reader '%s': cannot seek to record %"
                             PRId64 " of an epoch of %" PRId64, rname(r), record, r->n);
    r->pos = record;
    return FLOE_OK;
  }
  /* Streams have no index: read up to the record. */
  for (int64_t i = 0; i < record; i++) {
    int64_t key;
    FloeTensor *t = NULL;
    if (reader_next(r, &key, &t, NULL, st) != FLOE_OK) return floe_status_code(st);
    floe_tensor_release(t);
    if (r->epoch != epoch)
      return floe_status_set(st, FLOE_OUT_OF_RANGE, "reader '%s': cannot seek to record %"
                             PRId64 " of an epoch of %" PRId64, rname(r), record, i + 1);
  }
  return FLOE_OK;
}

/* ---- kernels ---- */

/* The spec of a reader node, from its attributes (checked by shape_reader). */
static void node_spec(const FloeNode *n, ReaderSpec *sp) {
  const char *op = n->op->name;
  memset(sp, 0, sizeof *sp);
  sp->kind = strcmp(op, "TextLineReaderV2") == 0           ? R_TEXT
             : strcmp(op, "FixedLengthRecordReaderV2") == 0 ? R_FIXED
                                                           : R_IDX;
  sp->files = floe__node_attr_str(n, "files");
  sp->num_epochs = floe__node_attr_int(n, "num_epochs", 1);
  sp->skip_header = floe__node_attr_int(n, "skip_header_lines", 0);
  sp->header = floe__node_attr_int(n, "header_bytes", 0);
  sp->record = floe__node_attr_int(n, "record_bytes", 0);
  sp->footer = floe__node_attr_int(n, "footer_bytes", 0);
  sp->hop = floe__node_attr_int(n, "hop_bytes", 0);
  const FloeAttrValue *b = floe__node_attr(n, "shuffle", FLOE_ATTR_BOOL);
  sp->shuffle = b && b->u.b;
  sp->seed = floe__node_attr_int(n, "seed", 0);
  sp->max_records = floe__node_attr_int(n, "max_records", -1);
  sp->dtype = FLOE_U8;
  sp->shape = floe_shape_unknown();
  if (sp->kind == R_FIXED) {
    const FloeAttrValue *dt = floe__node_attr(n, "dtype", FLOE_ATTR_TYPE);
    const FloeAttrValue *sh = floe__node_attr(n, "shape", FLOE_ATTR_SHAPE);
    if (dt) sp->dtype = dt->u.type;
    if (sh && sh->u.shape.rank >= 0) {
      sp->shape = sh->u.shape;
    } else {
      size_t es = floe_dtype_size(sp->dtype);
      sp->shape.rank = 1;
      sp->shape.dims[0] = es ? sp->record / (int64_t)es : 0;
    }
  }
}

static floe_code reader_handle_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  const FloeNode *n = ctx->node;
  FloeResourceMgr *m = floe__kernel_ctx_resources(ctx);
  if (!m)
    return floe_status_set(ctx->status, FLOE_FAILED_PRECONDITION,
                           "readers live in a session's resource manager, and this step has "
                           "none");
  ReaderSpec sp;
  node_spec(n, &sp);
  const char *shared = floe__node_attr_str(n, "shared_name");
  FloeStatus st = {FLOE_OK, NULL};
  FloeResource *res = floe__resources_find_or_add(m, floe__node_attr_str(n, "container"),
                                                  *shared ? shared : n->name, &reader_ops,
                                                  reader_make, &sp, &st);
  if (res && !same_spec((Reader *)res, &sp)) {
    floe_status_set(&st, FLOE_INVALID_ARGUMENT,
                    "reader '%s' exists as a %s with other files or settings than this %s: "
                    "nodes sharing a reader must describe it alike (or use another "
                    "shared_name)", res->name, kind_names[((Reader *)res)->spec.kind],
                    kind_names[sp.kind]);
    floe__resource_release(res);
    res = NULL;
  }
  FloeTensor *h = res ? floe__resource_obj_handle(res, &st) : NULL;
  floe__resource_release(res);
  if (!h) return floe__kctx_fail(ctx, &st);
  floe_tensor_release(ctx->outputs[0]);
  ctx->outputs[0] = h;
  return FLOE_OK;
}

static int reader_cmp(const void *a, const void *b) {
  const Reader *x = *(Reader *const *)a, *y = *(Reader *const *)b;
  return x->res.serial < y->res.serial ? -1 : x->res.serial > y->res.serial;
}

/* The readers of inputs [0, n) (new references, in input order) and the same sorted by
 * serial for locking. */
static floe_code input_readers(FloeKernelContext *ctx, int n, Reader **rs, Reader **sorted) {
  FloeResourceMgr *m = floe__kernel_ctx_resources(ctx);
  FloeStatus st = {FLOE_OK, NULL};
  for (int i = 0; i < n; i++) {
    char what[48];
    snprintf(what, sizeof what, "input %d (a reader handle)", i);
    rs[i] = (Reader *)floe__resources_from_handle(m, ctx->inputs[i], &reader_ops, what, &st);
    if (!rs[i]) {
      for (int j = 0; j < i; j++) floe__resource_release(&rs[j]->res);
      return floe__kctx_fail(ctx, &st);
    }
  }
  memcpy(sorted, rs, (size_t)n * sizeof *rs);
  qsort(sorted, (size_t)n, sizeof *sorted, reader_cmp);
  for (int i = 1; i < n; i++) {
    if (sorted[i] != sorted[i - 1]) continue;
    for (int j = 0; j < n; j++) floe__resource_release(&rs[j]->res);
    return floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT,
                           "reader '%s' is given twice: each reader once per read",
                           rname(sorted[i]));
  }
  return FLOE_OK;
}

static void lock_all(Reader **sorted, int n) {
  for (int i = 0; i < n; i++) pthread_mutex_lock(&sorted[i]->mu);
}

static void unlock_release(Reader **rs, Reader **sorted, int n) {
  for (int i = n - 1; i >= 0; i--) pthread_mutex_unlock(&sorted[i]->mu);
  for (int i = 0; i < n; i++) floe__resource_release(&rs[i]->res);
}

/* A record of dtype dt and shape (rank, dims) must be what the node declared. */
static floe_code check_record(const FloeKernelContext *ctx, const Reader *r, int i, FloeDType dt,
                              int rank, const int64_t *dims, FloeStatus *st) {
  FloeDType want = ctx->node->out_dtypes[1 + i];
  const FloeAttrValue *shapes = floe__node_attr(ctx->node, "shapes", FLOE_ATTR_SHAPE_LIST);
  const FloeShape *ws = shapes && (size_t)i < shapes->u.slist.n ? &shapes->u.slist.v[i] : NULL;
  bool ok = dt == want && (!ws || ws->rank < 0 || ws->rank == rank);
  for (int d = 0; ok && ws && d < ws->rank; d++) ok = ws->dims[d] < 0 || ws->dims[d] == dims[d];
  if (ok) return FLOE_OK;
  char a[160], b[160];
  FloeShape got = floe_shape_make(rank, dims);
  return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                         "reader '%s' read a %s %s record; this node expects %s %s for reader "
                         "%d", rname(r), floe_dtype_name(dt), floe_shape_str(&got, a, sizeof a),
                         floe_dtype_name(want), ws ? floe_shape_str(ws, b, sizeof b) : "of any shape",
                         i);
}

/* Caller holds every reader's lock: one record of each into vals[i] (or, given dsts, copied
 * to dsts[i]: IDX readers whose records were checked already) and the shared key. *end:
 * every reader is past its last record (st then holds the first one's message). */
static floe_code read_one(FloeKernelContext *ctx, Reader **rs, int n, int64_t *key,
                          FloeTensor **vals, uint8_t *const *dsts, bool *end, FloeStatus *st) {
  *end = false;
  int ended = 0;
  for (int i = 0; i < n; i++) {
    int64_t k = -1;
    FloeStatus rst = {FLOE_OK, NULL};
    floe_code rc = reader_next(rs[i], &k, &vals[i], dsts ? dsts[i] : NULL, &rst);
    if (rc == FLOE_OUT_OF_RANGE) {
      if (ended++ == 0) floe__status_copy(st, &rst);
      floe_status_clear(&rst);
      continue;
    }
    if (rc != FLOE_OK) {
      floe__status_copy(st, &rst);
      floe_status_clear(&rst);
      return rc;
    }
    if (i > 0 && ended == 0 && k != *key)
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "readers '%s' and '%s' are out of step: their records have keys %"
                             PRId64 " and %" PRId64 " (read them together only, with the same "
                             "files' record counts, shuffle and seed)",
                             rname(rs[0]), rname(rs[i]), *key, k);
    *key = k;
    if (!dsts && check_record(ctx, rs[i], i, vals[i]->dtype, vals[i]->rank, vals[i]->dims, st) !=
                     FLOE_OK)
      return FLOE_INVALID_ARGUMENT;
  }
  if (ended == n) {
    *end = true;
    return FLOE_OUT_OF_RANGE;
  }
  if (ended > 0)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "readers out of step: %d of the %d readers ran out of records "
                           "before the others (their files hold different numbers of records)",
                           ended, n);
  return FLOE_OK;
}

/* t (host) in memory the kernel's device reads; the reference is given up. */
static FloeTensor *to_kernel_device(FloeKernelContext *ctx, FloeTensor *t, FloeStatus *st) {
  FloeDevice *dev = ctx->device;
  if (t->nbytes == 0 || (floe__tensor_on_host(t) && (!dev || dev->host_memory))) return t;
  FloeTensor *moved = floe__tensor_to_device(t, dev, st);
  floe_tensor_release(t);
  return moved;
}

/* Output i becomes t (moved to the kernel's device); false with the error recorded. */
static bool set_output(FloeKernelContext *ctx, int i, FloeTensor *t) {
  FloeStatus st = {FLOE_OK, NULL};
  if (!(t = to_kernel_device(ctx, t, &st))) {
    floe__kctx_fail(ctx, &st);
    return false;
  }
  floe_tensor_release(ctx->outputs[i]);
  ctx->outputs[i] = t;
  return true;
}

static floe_code read_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  int n = ctx->num_inputs;
  Reader *rs[n], *sorted[n];
  FloeTensor *vals[n];
  memset(vals, 0, sizeof vals);
  if (input_readers(ctx, n, rs, sorted) != FLOE_OK) return ctx->status->code;
  lock_all(sorted, n);
  int64_t key = -1;
  bool end;
  FloeStatus st = {FLOE_OK, NULL};
  floe_code rc = read_one(ctx, rs, n, &key, vals, NULL, &end, &st);
  unlock_release(rs, sorted, n);
  if (rc != FLOE_OK) {
    for (int i = 0; i < n; i++) floe_tensor_release(vals[i]);
    return floe__kctx_fail(ctx, &st);
  }
  FloeTensor *k = floe__tensor_alloc(NULL, FLOE_I64, 0, NULL, &st);
  if (!k) {
    for (int i = 0; i < n; i++) floe_tensor_release(vals[i]);
    return floe__kctx_fail(ctx, &st);
  }
  *(int64_t *)floe_tensor_data(k) = key;
  bool ok = set_output(ctx, 0, k);
  for (int i = 0; i < n; i++) {
    if (ok) ok = set_output(ctx, 1 + i, vals[i]);
    else floe_tensor_release(vals[i]);
  }
  return ok ? FLOE_OK : ctx->status->code;
}

/* Stacks rows[0..k) (one reader's records, all of one shape) into [k, ...]. */
static FloeTensor *stack(FloeKernelContext *ctx, const Reader *r, FloeTensor **rows, int64_t k,
                         FloeStatus *st) {
  const FloeTensor *first = rows[0];
  int64_t dims[FLOE_MAX_DIMS];
  if (first->rank >= FLOE_MAX_DIMS) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT, "reader '%s': records of rank %d cannot be "
                    "stacked (at most %d dims)", rname(r), first->rank, FLOE_MAX_DIMS);
    return NULL;
  }
  dims[0] = k;
  memcpy(dims + 1, first->dims, (size_t)first->rank * sizeof *dims);
  for (int64_t i = 1; i < k; i++) {
    bool same = rows[i]->rank == first->rank;
    for (int d = 0; same && d < first->rank; d++) same = rows[i]->dims[d] == first->dims[d];
    if (!same) {
      char a[160], b[160];
      FloeShape sa = floe_tensor_shape(rows[i]), sb = floe_tensor_shape(first);
      floe_status_set(st, FLOE_INVALID_ARGUMENT,
                      "reader '%s': a record of shape %s after one of %s: ReaderReadUpTo "
                      "stacks records of one shape (read varying records one at a time, "
                      "into a PaddingFIFOQueue)", rname(r), floe_shape_str(&sa, a, sizeof a),
                      floe_shape_str(&sb, b, sizeof b));
      return NULL;
    }
  }
  (void)ctx;
  FloeTensor *t = floe__tensor_alloc(NULL, first->dtype, first->rank + 1, dims, st);
  if (!t || first->nbytes == 0) return t;
  for (int64_t i = 0; i < k; i++)
    memcpy((char *)floe_tensor_data(t) + (size_t)i * first->nbytes, floe_tensor_data(rows[i]),
           first->nbytes);
  return t;
}

/* [k, ...] of a [want, ...] tensor t (given up): t itself when k == want, else a view. */
static FloeTensor *first_rows(FloeTensor *t, int64_t k, FloeStatus *st) {
  if (!t || t->dims[0] == k) return t;
  int64_t dims[FLOE_MAX_DIMS];
  memcpy(dims, t->dims, (size_t)t->rank * sizeof *dims);
  dims[0] = k;
  FloeTensor *v = floe__tensor_slice_view(t, 0, t->rank, dims, st);
  floe_tensor_release(t);
  return v;
}

/* Caller holds the readers' locks. Every reader is an IDX reader: records are copied
 * straight into the stacked outputs (no tensor per record). */
static floe_code read_up_to_direct(FloeKernelContext *ctx, Reader **rs, int n, int64_t want,
                                   int64_t *kv, FloeTensor **cols, int64_t *got, FloeStatus *st) {
  *got = 0;
  for (int i = 0; i < n; i++) {
    Reader *r = rs[i];
    if (r->shutdown)
      return floe_status_set(st, FLOE_CANCELLED, "reader '%s' was shut down (its session "
                             "closed or its container was reset)", rname(r));
    if (!r->loaded && idx_load(r, st) != FLOE_OK) return floe_status_code(st);
    if (r->info.rank >= FLOE_MAX_DIMS)
      return floe_status_set(st, FLOE_INVALID_ARGUMENT, "reader '%s': records of rank %d cannot "
                             "be stacked (at most %d dims)", rname(r), r->info.rank - 1,
                             FLOE_MAX_DIMS);
    if (check_record(ctx, r, i, r->info.dtype, r->info.rank - 1, r->info.dims + 1, st) != FLOE_OK)
      return FLOE_INVALID_ARGUMENT;
    int64_t dims[FLOE_MAX_DIMS];
    dims[0] = want;
    memcpy(dims + 1, r->info.dims + 1, (size_t)(r->info.rank - 1) * sizeof *dims);
    FloeDevice *dev = ctx->device && ctx->device->host_memory ? ctx->device : NULL;
    if (!(cols[i] = floe__tensor_alloc(dev, r->info.dtype, r->info.rank, dims, st)))
      return floe_status_code(st);
  }
  uint8_t *dst[n];
  floe_code rc = FLOE_OK;
  int64_t k = 0;
  for (; k < want; k++) {
    for (int i = 0; i < n; i++) dst[i] = (uint8_t *)floe_tensor_data(cols[i]) + (size_t)k * rs[i]->rec_bytes;
    bool end;
    rc = read_one(ctx, rs, n, &kv[k], NULL, dst, &end, st);
    if (rc == FLOE_OK) continue;
    if (end && k > 0) { /* the rest of the data: fewer than asked */
      floe_status_clear(st);
      rc = FLOE_OK;
    }
    break;
  }
  for (int i = 0; rc == FLOE_OK && i < n; i++)
    if (!(cols[i] = first_rows(cols[i], k, st))) rc = floe_status_code(st);
  *got = k;
  return rc;
}

/* Caller holds the readers' locks: any readers, a tensor per record, then stacked. */
static floe_code read_up_to_rows(FloeKernelContext *ctx, Reader **rs, int n, int64_t want,
                                 int64_t *kv, FloeTensor **cols, int64_t *got, FloeStatus *st) {
  FloeTensor **rows = floe__calloc((size_t)want * (size_t)n, sizeof *rows);
  FloeTensor **col = floe__malloc((size_t)want * sizeof *col);
  floe_code rc = rows && col ? FLOE_OK
                             : floe_status_set(st, FLOE_NO_MEMORY, "out of memory for %" PRId64
                                               " records", want);
  int64_t k = 0;
  while (rc == FLOE_OK && k < want) {
    bool end;
    rc = read_one(ctx, rs, n, &kv[k], rows + k * n, NULL, &end, st);
    if (rc == FLOE_OK) k++;
    else if (end && k > 0) {
      floe_status_clear(st);
      rc = FLOE_OK;
      break;
    }
  }
  for (int i = 0; rc == FLOE_OK && i < n; i++) {
    for (int64_t j = 0; j < k; j++) col[j] = rows[j * n + i];
    if (!(cols[i] = stack(ctx, rs[i], col, k, st))) rc = floe_status_code(st);
  }
  if (rows)
    for (int64_t j = 0; j < want * n; j++) floe_tensor_release(rows[j]);
  floe__free(rows);
  floe__free(col);
  *got = k;
  return rc;
}

static floe_code read_up_to_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  int n = ctx->num_inputs - 1;
  const FloeTensor *nt = ctx->inputs[n];
  if (nt->dtype != FLOE_I64 || nt->num_elements != 1 || !floe__tensor_on_host(nt))
    return floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT,
                           "num_records must be an i64 scalar in host memory");
  int64_t want = *(const int64_t *)floe_tensor_data(nt);
  if (want < 1 || want > (1 << 30))
    return floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT,
                           "num_records = %" PRId64 ": read 1 to 2^30 records", want);
  int64_t kd[1] = {want}, k = 0;
  FloeStatus st = {FLOE_OK, NULL};
  FloeTensor *keys = floe__tensor_alloc(NULL, FLOE_I64, 1, kd, &st);
  if (!keys) return floe__kctx_fail(ctx, &st);
  Reader *rs[n], *sorted[n];
  if (input_readers(ctx, n, rs, sorted) != FLOE_OK) {
    floe_tensor_release(keys);
    return ctx->status->code;
  }
  FloeTensor *cols[n];
  memset(cols, 0, sizeof cols);
  bool direct = true;
  for (int i = 0; i < n; i++) direct = direct && rs[i]->spec.kind == R_IDX;
  lock_all(sorted, n);
  floe_code rc = direct ? read_up_to_direct(ctx, rs, n, want, floe_tensor_data(keys), cols, &k, &st)
                        : read_up_to_rows(ctx, rs, n, want, floe_tensor_data(keys), cols, &k, &st);
  unlock_release(rs, sorted, n);
  if (rc == FLOE_OK && !(keys = first_rows(keys, k, &st))) rc = floe_status_code(&st);
  if (rc != FLOE_OK) {
    floe_tensor_release(keys);
    for (int i = 0; i < n; i++) floe_tensor_release(cols[i]);
    return floe__kctx_fail(ctx, &st);
  }
  bool ok = set_output(ctx, 0, keys);
  for (int i = 0; i < n; i++) {
    if (ok) ok = set_output(ctx, 1 + i, cols[i]);
    else floe_tensor_release(cols[i]);
  }
  return ok ? FLOE_OK : ctx->status->code;
}

static floe_code seek_compute(void *state, FloeKernelContext *ctx) {
  (void)state;
  int n = ctx->num_inputs - 2;
  int64_t at[2];
  for (int i = 0; i < 2; i++) {
    const FloeTensor *t = ctx->inputs[n + i];
    if (t->dtype != FLOE_I64 || t->num_elements != 1 || !floe__tensor_on_host(t))
      return floe_status_set(ctx->status, FLOE_INVALID_ARGUMENT,
                             "%s must be an i64 scalar in host memory", i ? "record" : "epoch");
    at[i] = *(const int64_t *)floe_tensor_data(t);
  }
  Reader *rs[n], *sorted[n];
  if (input_readers(ctx, n, rs, sorted) != FLOE_OK) return ctx->status->code;
  lock_all(sorted, n);
  FloeStatus st = {FLOE_OK, NULL};
  floe_code rc = FLOE_OK;
  for (int i = 0; i < n && rc == FLOE_OK; i++) rc = reader_seek(rs[i], at[0], at[1], &st);
  unlock_release(rs, sorted, n);
  return rc == FLOE_OK ? FLOE_OK : floe__kctx_fail(ctx, &st);
}

floe_code floe__reader_kernels_register(FloeRuntime *rt, FloeStatus *st) {
  static const struct {
    const char *op;
    floe_code (*compute)(void *, FloeKernelContext *);
    uint32_t flags;
  } kernels[] = {
      {"TextLineReaderV2", reader_handle_compute, FLOE_KERNEL_INEXPENSIVE},
      {"FixedLengthRecordReaderV2", reader_handle_compute, FLOE_KERNEL_INEXPENSIVE},
      {"IdxRecordReader", reader_handle_compute, FLOE_KERNEL_INEXPENSIVE},
      {"ReaderRead", read_compute, 0},
      {"ReaderReadUpTo", read_up_to_compute, 0},
      {"ReaderSeek", seek_compute, 0},
  };
  for (size_t i = 0; i < FLOE__ARRAY_LEN(kernels); i++) {
    floe_code rc = floe__core_kernel_add(rt, kernels[i].op,
                                         FLOE__KERNEL_RAW_RESOURCES | FLOE__KERNEL_HOST_ONLY |
                                             kernels[i].flags,
                                         kernels[i].compute, st);
    if (rc != FLOE_OK) return rc;
  }
  return FLOE_OK;
}
