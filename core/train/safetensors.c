/* SPDX-License-Identifier: Apache-2.0 */
/* safetensors.c - the safetensors format of checkpoints (docs/checkpoints.md): the
 * header's JSON and the tensors' bytes written little-endian, and a strict bounded reader
 * that validates a whole file (header, layout, variables hash) before any data is read.
 *
 * File: u64 little-endian header length N, N bytes of JSON padded with spaces to a multiple
 * of 8, then the tensors' little-endian bytes, sorted by name, contiguous. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint_private.h"

#define HEADER_LIMIT 100000000u /* the reference reader's bound on the JSON header */
#define MAX_STEP_DIGITS FLOE__CKPT_MAX_STEP_DIGITS
#define NAME_SHOWN FLOE__CKPT_NAME_SHOWN
#define DIMS_BUF FLOE__SAFETENSORS_DIMS_BUF
#define COPY_CHUNK 65536        /* byte-swapping buffer of big-endian hosts */

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define HOST_BIG_ENDIAN 1
#else
#define HOST_BIG_ENDIAN 0
#endif

typedef FloeSafetensorsType StType;
typedef FloeSafetensorsEntry Entry;
typedef FloeSafetensorsFile StFile;
typedef FloeCkptItem Item;

/* ------------------------------------------------------------------------------------ */
/* dtypes: safetensors names. The first nine are Floe's; a file may also hold the others
 * (ignored unless a variable needs them, then a dtype mismatch). */

static const StType st_types[] = {
    {"F32", 4, FLOE_F32},   {"F64", 8, FLOE_F64},          {"F16", 2, FLOE_F16},
    {"BF16", 2, FLOE_BF16}, {"I8", 1, FLOE_I8},            {"U8", 1, FLOE_U8},
    {"I32", 4, FLOE_I32},   {"I64", 8, FLOE_I64},          {"BOOL", 1, FLOE_BOOL},
    {"I16", 2, FLOE_DTYPE_INVALID},     {"U16", 2, FLOE_DTYPE_INVALID},
    {"U32", 4, FLOE_DTYPE_INVALID},     {"U64", 8, FLOE_DTYPE_INVALID},
    {"F8_E4M3", 1, FLOE_DTYPE_INVALID}, {"F8_E5M2", 1, FLOE_DTYPE_INVALID},
};

const StType *floe__safetensors_type_of(FloeDType dt) {
  for (size_t i = 0; i < FLOE__ARRAY_LEN(st_types); i++)
    if (st_types[i].dt == dt && dt != FLOE_DTYPE_INVALID) return &st_types[i];
  return NULL;
}

const StType *floe__safetensors_type_named(const char *s) {
  for (size_t i = 0; i < FLOE__ARRAY_LEN(st_types); i++)
    if (strcmp(st_types[i].name, s) == 0) return &st_types[i];
  return NULL;
}

char *floe__safetensors_dims_str(int rank, const int64_t *dims, char *buf, size_t len) {
  size_t k = (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < rank && k < len; i++)
    k += (size_t)snprintf(buf + k, len - k, "%s%" PRId64, i ? "," : "", dims[i]);
  if (k < len) snprintf(buf + k, len - k, "]");
  return buf;
}

/* FNV-1a 64. */
#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x100000001b3ull
static uint64_t fnv_add(uint64_t h, const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * FNV_PRIME;
  return h;
}

/* One line "name DTYPE [d0,d1]\n" of the variables hash. */
static uint64_t hash_line(uint64_t h, const char *name, const StType *t, int rank,
                          const int64_t *dims) {
  char shape[DIMS_BUF];
  floe__safetensors_dims_str(rank, dims, shape, sizeof shape);
  h = fnv_add(h, name, strlen(name));
  h = fnv_add(h, " ", 1);
  h = fnv_add(h, t->name, strlen(t->name));
  h = fnv_add(h, " ", 1);
  h = fnv_add(h, shape, strlen(shape));
  return fnv_add(h, "\n", 1);
}

bool floe__safetensors_utf8_valid(const char *s) {
  size_t n = strlen(s);
  return floe__utf8_check(s, n) == n;
}

/* ------------------------------------------------------------------------------------ */
/* Writer. */

typedef FloeByteBuf Buf;

static void buf_put(Buf *b, const void *s, size_t n) { floe__buf_put(b, s, n); }

static void buf_str(Buf *b, const char *s) { buf_put(b, s, strlen(s)); }

static void buf_u64(Buf *b, uint64_t v) {
  char t[24];
  buf_put(b, t, (size_t)snprintf(t, sizeof t, "%" PRIu64, v));
}

/* A JSON string: quotes, backslashes and control bytes escaped; the rest (valid UTF-8)
 * copied. */
void floe__safetensors_json_str(Buf *b, const char *s) {
  buf_put(b, "\"", 1);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      char e[2] = {'\\', (char)c};
      buf_put(b, e, 2);
    } else if (c < 0x20) {
      char e[8];
      buf_put(b, e, (size_t)snprintf(e, sizeof e, "\\u%04x", c));
    } else {
      buf_put(b, s, 1);
    }
  }
  buf_put(b, "\"", 1);
}

floe_code floe__safetensors_header(const Item *items, int n, int64_t step, const char *save_id,
                                   Buf *b, FloeStatus *st) {
  uint64_t h = FNV_OFFSET;
  for (int i = 0; i < n; i++) {
    const FloeTensor *t = items[i].value;
    h = hash_line(h, items[i].name, floe__safetensors_type_of(t->dtype), t->rank, t->dims);
  }
  char meta[200];
  snprintf(meta, sizeof meta,
           "{\"__metadata__\":{\"format\":\"floe\",\"global_step\":\"%" PRId64
           "\",%s%.*s%s\"variables_hash\":\"%016" PRIx64 "\"}",
           step, save_id ? "\"save_id\":\"" : "", FLOE__CKPT_SAVE_ID_LEN,
           save_id ? save_id : "", save_id ? "\"," : "", h);
  buf_put(b, "\0\0\0\0\0\0\0\0", 8);
  buf_str(b, meta);
  uint64_t off = 0;
  for (int i = 0; i < n; i++) {
    const FloeTensor *t = items[i].value;
    buf_put(b, ",", 1);
    floe__safetensors_json_str(b, items[i].name);
    buf_str(b, ":{\"dtype\":\"");
    buf_str(b, floe__safetensors_type_of(t->dtype)->name);
    buf_str(b, "\",\"shape\":[");
    for (int k = 0; k < t->rank; k++) {
      if (k) buf_put(b, ",", 1);
      buf_u64(b, (uint64_t)t->dims[k]);
    }
    buf_str(b, "],\"data_offsets\":[");
    buf_u64(b, off);
    buf_put(b, ",", 1);
    off += t->nbytes;
    buf_u64(b, off);
    buf_str(b, "]}");
  }
  buf_put(b, "}", 1);
  while (!b->oom && b->len % 8) buf_put(b, " ", 1);
  if (b->oom) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory building a header");
  uint64_t hl = b->len - 8;
  for (int k = 0; k < 8; k++) b->p[k] = (char)(hl >> (8 * k) & 0xFF);
  return FLOE_OK;
}

/* 0, or the errno of the failure. Handles short writes and EINTR. */
static int write_all(int fd, const void *buf, size_t n) {
  const uint8_t *p = buf;
  while (n) {
    ssize_t k = write(fd, p, n);
    if (k < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (k == 0) return EIO;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

#if HOST_BIG_ENDIAN
static void swap_elements(uint8_t *p, size_t nbytes, size_t esize) {
  for (size_t i = 0; i + esize <= nbytes; i += esize)
    for (size_t a = i, z = i + esize - 1; a < z; a++, z--) {
      uint8_t t = p[a];
      p[a] = p[z];
      p[z] = t;
    }
}
#endif

/* A tensor's bytes in little-endian order. 0 or an errno. */
static int write_tensor(int fd, const FloeTensor *t) {
  const uint8_t *p = floe_tensor_data(t);
  if (!t->nbytes) return 0;
#if HOST_BIG_ENDIAN
  size_t es = floe_dtype_size(t->dtype);
  if (es > 1) {
    uint8_t chunk[COPY_CHUNK];
    for (size_t off = 0; off < t->nbytes; off += COPY_CHUNK) {
      size_t k = t->nbytes - off < COPY_CHUNK ? t->nbytes - off : COPY_CHUNK;
      memcpy(chunk, p + off, k);
      swap_elements(chunk, k, es);
      int e = write_all(fd, chunk, k);
      if (e) return e;
    }
    return 0;
  }
#endif
  return write_all(fd, p, t->nbytes);
}

int floe__safetensors_write(int fd, const Buf *header, const Item *items, int n) {
  int e = write_all(fd, header->p, header->len);
  for (int i = 0; i < n && !e; i++) e = write_tensor(fd, items[i].value);
  return e;
}

/* ------------------------------------------------------------------------------------ */
/* Reader: the header is parsed by a strict, bounded JSON parser that knows the format's
 * shape (an object of tensor objects and one string map), so its depth is fixed. */

void floe__safetensors_close(StFile *c) {
  for (int i = 0; i < c->n; i++) floe__free(c->e[i].name);
  floe__free(c->e);
  c->e = NULL;
  c->n = 0;
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
}

typedef struct Parser {
  const uint8_t *s; /* the header's JSON */
  size_t len, pos;
  StFile *c;
  FloeStatus *st;
} Parser;

/* File offset of header position pos. */
#define AT(pos) ((size_t)8 + (pos))

FLOE__PRINTF(3, 4)
static floe_code bad(Parser *p, size_t pos, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *m = floe__vasprintf(fmt, ap);
  va_end(ap);
  floe_status_set(p->st, FLOE_DATA_LOSS, "checkpoint %s: offset %zu: %s", p->c->path, AT(pos),
                  m ? m : "corrupt header");
  floe__free(m);
  return FLOE_DATA_LOSS;
}

/* What is at pos, for messages. */
static const char *seen(const Parser *p, size_t pos, char *buf, size_t len) {
  if (pos >= p->len) return "the end of the header";
  uint8_t c = p->s[pos];
  if (c >= 0x20 && c < 0x7F)
    snprintf(buf, len, "'%c'", c);
  else
    snprintf(buf, len, "byte 0x%02x", c);
  return buf;
}

static void ws(Parser *p) {
  while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' ||
                             p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
    p->pos++;
}

static floe_code expect(Parser *p, char ch, const char *where) {
  ws(p);
  if (p->pos < p->len && p->s[p->pos] == (uint8_t)ch) {
    p->pos++;
    return FLOE_OK;
  }
  char b[16];
  return bad(p, p->pos, "expected '%c' %s, found %s", ch, where, seen(p, p->pos, b, sizeof b));
}

/* 1 when the next byte (after whitespace) is ch, consumed. */
static bool accept(Parser *p, char ch) {
  ws(p);
  if (p->pos < p->len && p->s[p->pos] == (uint8_t)ch) {
    p->pos++;
    return true;
  }
  return false;
}

static int hexval(uint8_t c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static bool hex4(const uint8_t *s, uint32_t *v) {
  *v = 0;
  for (int i = 0; i < 4; i++) {
    int h = hexval(s[i]);
    if (h < 0) return false;
    *v = *v << 4 | (uint32_t)h;
  }
  return true;
}

/* A JSON string into *out (NUL-terminated, owned by the caller; no NUL inside). */
static floe_code parse_string(Parser *p, const char *what, char **out) {
  *out = NULL;
  ws(p);
  size_t start = p->pos;
  char b[16];
  if (start >= p->len || p->s[start] != '"')
    return bad(p, start, "expected %s (a string), found %s", what, seen(p, start, b, sizeof b));
  size_t end = start + 1;
  while (end < p->len && p->s[end] != '"') end += p->s[end] == '\\' ? 2 : 1;
  if (end >= p->len) return bad(p, start, "%s: unterminated string", what);
  char *d = floe__malloc(end - start); /* decoded text is never longer than its source */
  if (!d) return floe_status_set(p->st, FLOE_NO_MEMORY, "out of memory reading a header");
  size_t k = 0;
  for (size_t i = start + 1; i < end;) {
    uint8_t c = p->s[i];
    if (c < 0x20) {
      floe__free(d);
      return bad(p, i, "%s: control byte 0x%02x inside a string", what, c);
    }
    if (c >= 0x80) {
      size_t n = floe__utf8_seq_len(p->s + i, end - i);
      if (!n) {
        floe__free(d);
        return bad(p, i, "%s: invalid UTF-8", what);
      }
      memcpy(d + k, p->s + i, n);
      k += n;
      i += n;
      continue;
    }
    if (c != '\\') {
      d[k++] = (char)c;
      i++;
      continue;
    }
    uint8_t e = i + 1 < end ? p->s[i + 1] : 0;
    const char *simple = strchr("\"\\/bfnrt", e);
    if (e && simple) {
      d[k++] = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
      i += 2;
      continue;
    }
    uint32_t cp, lo;
    if (e != 'u' || i + 6 > end || !hex4(p->s + i + 2, &cp)) {
      floe__free(d);
      return bad(p, i, "%s: invalid escape sequence", what);
    }
    size_t used = 6;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (i + 12 > end || p->s[i + 6] != '\\' || p->s[i + 7] != 'u' ||
          !hex4(p->s + i + 8, &lo) || lo < 0xDC00 || lo > 0xDFFF) {
        floe__free(d);
        return bad(p, i, "%s: unpaired UTF-16 surrogate in an escape", what);
      }
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      used = 12;
    } else if ((cp >= 0xDC00 && cp <= 0xDFFF) || cp == 0) {
      floe__free(d);
      return bad(p, i, "%s: %s in an escape", what,
                 cp ? "unpaired UTF-16 surrogate" : "NUL character");
    }
    /* A 6-byte escape becomes at most 3 bytes, a 12-byte pair 4: the buffer suffices. */
    if (cp < 0x80) {
      d[k++] = (char)cp;
    } else if (cp < 0x800) {
      d[k++] = (char)(0xC0 | cp >> 6);
      d[k++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      d[k++] = (char)(0xE0 | cp >> 12);
      d[k++] = (char)(0x80 | (cp >> 6 & 0x3F));
      d[k++] = (char)(0x80 | (cp & 0x3F));
    } else {
      d[k++] = (char)(0xF0 | cp >> 18);
      d[k++] = (char)(0x80 | (cp >> 12 & 0x3F));
      d[k++] = (char)(0x80 | (cp >> 6 & 0x3F));
      d[k++] = (char)(0x80 | (cp & 0x3F));
    }
    i += used;
  }
  d[k] = '\0';
  p->pos = end + 1;
  *out = d;
  return FLOE_OK;
}

/* A non-negative JSON integer no larger than INT64_MAX. */
static floe_code parse_uint(Parser *p, const char *what, uint64_t *v) {
  ws(p);
  size_t start = p->pos;
  char b[16];
  if (start >= p->len || p->s[start] < '0' || p->s[start] > '9')
    return bad(p, start, "expected %s (a non-negative integer), found %s", what,
               seen(p, start, b, sizeof b));
  if (p->s[start] == '0' && start + 1 < p->len && p->s[start + 1] >= '0' &&
      p->s[start + 1] <= '9')
    return bad(p, start, "%s: a number with a leading zero", what);
  uint64_t x = 0;
  size_t i = start;
  for (; i < p->len && p->s[i] >= '0' && p->s[i] <= '9'; i++) {
    unsigned d = (unsigned)(p->s[i] - '0');
    if (x > ((uint64_t)INT64_MAX - d) / 10) return bad(p, start, "%s is too large", what);
    x = x * 10 + d;
  }
  if (i < p->len && (p->s[i] == '.' || p->s[i] == 'e' || p->s[i] == 'E'))
    return bad(p, start, "%s must be an integer", what);
  p->pos = i;
  *v = x;
  return FLOE_OK;
}

/* "[u, u, ...]" with at most max numbers. */
static floe_code parse_uints(Parser *p, const char *what, const char *name, uint64_t *v,
                             int max, int *count) {
  floe_code rc;
  *count = 0;
  if ((rc = expect(p, '[', what)) != FLOE_OK) return rc;
  if (accept(p, ']')) return FLOE_OK;
  for (;;) {
    size_t at = p->pos;
    uint64_t x = 0;
    if ((rc = parse_uint(p, what, &x)) != FLOE_OK) return rc;
    if (*count == max)
      return bad(p, at, "%s of tensor '%.*s' has more than %d entries", what, NAME_SHOWN, name,
                 max);
    v[(*count)++] = x;
    if (accept(p, ']')) return FLOE_OK;
    if ((rc = expect(p, ',', what)) != FLOE_OK) return rc;
  }
}

static floe_code parse_tensor(Parser *p, Entry *e) {
  floe_code rc;
  bool got_dtype = false, got_shape = false, got_off = false;
  char *key = NULL;
  if ((rc = expect(p, '{', "to open a tensor's description")) != FLOE_OK) return rc;
  if (accept(p, '}')) goto check;
  for (;;) {
    size_t at = (ws(p), p->pos);
    if ((rc = parse_string(p, "a field name", &key)) != FLOE_OK) return rc;
    if ((rc = expect(p, ':', "after a field name")) != FLOE_OK) goto err_free_key;
    if (strcmp(key, "dtype") == 0 && !got_dtype) {
      char *t;
      size_t tat = (ws(p), p->pos);
      if ((rc = parse_string(p, "dtype", &t)) != FLOE_OK) goto err_free_key;
      e->type = floe__safetensors_type_named(t);
      if (!e->type) {
        rc = bad(p, tat, "tensor '%.*s' has unknown dtype \"%.*s\"", NAME_SHOWN, e->name,
                 NAME_SHOWN, t);
        floe__free(t);
        goto err_free_key;
      }
      floe__free(t);
      got_dtype = true;
    } else if (strcmp(key, "shape") == 0 && !got_shape) {
      uint64_t d[FLOE_MAX_DIMS];
      if ((rc = parse_uints(p, "shape", e->name, d, FLOE_MAX_DIMS, &e->rank)) != FLOE_OK)
        goto err_free_key;
      for (int i = 0; i < e->rank; i++) e->dims[i] = (int64_t)d[i];
      got_shape = true;
    } else if (strcmp(key, "data_offsets") == 0 && !got_off) {
      uint64_t o[2];
      int k;
      size_t oat = (ws(p), p->pos);
      if ((rc = parse_uints(p, "data_offsets", e->name, o, 2, &k)) != FLOE_OK) goto err_free_key;
      if (k != 2) {
        rc = bad(p, oat, "data_offsets of tensor '%.*s' must be [begin, end]", NAME_SHOWN,
                 e->name);
        goto err_free_key;
      }
      e->begin = o[0];
      e->end = o[1];
      got_off = true;
    } else {
      bool dup = strcmp(key, "dtype") == 0 || strcmp(key, "shape") == 0 ||
                 strcmp(key, "data_offsets") == 0;
      rc = bad(p, at, "tensor '%.*s': %s field \"%.*s\"", NAME_SHOWN, e->name,
               dup ? "repeated" : "unknown", NAME_SHOWN, key);
      goto err_free_key;
    }
    floe__free(key);
    key = NULL;
    if (accept(p, '}')) break;
    if ((rc = expect(p, ',', "or '}' in a tensor's description")) != FLOE_OK) return rc;
  }
check:
  if (!got_dtype || !got_shape || !got_off)
    return bad(p, e->at, "tensor '%.*s' lacks its %s", NAME_SHOWN, e->name,
               !got_dtype ? "dtype" : !got_shape ? "shape" : "data_offsets");
  return FLOE_OK;

err_free_key:
  floe__free(key);
  return rc;
}

/* "__metadata__": a map of strings; global_step and variables_hash are checked. */
static floe_code parse_metadata(Parser *p) {
  floe_code rc;
  bool got_format = false, floe_format = false;
  size_t open_at = (ws(p), p->pos);
  char *key = NULL, *val = NULL;
  if ((rc = expect(p, '{', "to open __metadata__")) != FLOE_OK) return rc;
  if (accept(p, '}')) return FLOE_OK;
  for (;;) {
    size_t at = (ws(p), p->pos);
    if ((rc = parse_string(p, "a metadata key", &key)) != FLOE_OK) return rc;
    if ((rc = expect(p, ':', "after a metadata key")) != FLOE_OK) goto err_free_key;
    size_t vat = (ws(p), p->pos);
    if ((rc = parse_string(p, "a metadata value", &val)) != FLOE_OK) goto err_free_key;
    bool *seen_flag = strcmp(key, "global_step") == 0      ? &p->c->has_step
                      : strcmp(key, "variables_hash") == 0 ? &p->c->has_hash
                      : strcmp(key, "format") == 0         ? &got_format
                      : strcmp(key, "save_id") == 0        ? &p->c->has_save_id
                                                           : NULL;
    if (seen_flag && *seen_flag) {
      rc = bad(p, at, "metadata key \"%s\" is repeated", key);
      goto err_free_val;
    }
    if (seen_flag) *seen_flag = true;
    if (seen_flag == &got_format) {
      floe_format = strcmp(val, "floe") == 0;
    } else if (seen_flag == &p->c->has_step) {
      uint64_t x = 0;
      size_t i = 0;
      bool ok = val[0] != '\0' && strlen(val) <= MAX_STEP_DIGITS && (val[0] != '0' || !val[1]);
      for (; ok && val[i]; i++) {
        unsigned d = (unsigned)(val[i] - '0');
        ok = d <= 9 && x <= ((uint64_t)INT64_MAX - d) / 10;
        x = x * 10 + d;
      }
      if (!ok) {
        rc = bad(p, vat, "global_step \"%.*s\" is not a non-negative decimal integer", NAME_SHOWN,
                 val);
        goto err_free_val;
      }
      p->c->step = (int64_t)x;
    } else if (seen_flag == &p->c->has_save_id) { /* compared with an index's, not parsed */
      snprintf(p->c->save_id, sizeof p->c->save_id, "%.*s", FLOE__CKPT_SAVE_ID_LEN, val);
    } else if (seen_flag == &p->c->has_hash) {
      bool ok = strlen(val) == 16;
      uint64_t x = 0;
      for (int i = 0; ok && i < 16; i++) {
        int h = hexval((uint8_t)val[i]);
        ok = h >= 0 && !(val[i] >= 'A' && val[i] <= 'F');
        x = x << 4 | (uint64_t)(h < 0 ? 0 : h);
      }
      if (!ok) {
        rc = bad(p, vat, "variables_hash \"%.*s\" is not 16 lowercase hex digits", NAME_SHOWN,
                 val);
        goto err_free_val;
      }
      p->c->hash = x;
      p->c->hash_at = vat;
    }
    floe__free(key);
    floe__free(val);
    key = val = NULL;
    if (accept(p, '}')) break;
    if ((rc = expect(p, ',', "or '}' in __metadata__")) != FLOE_OK) return rc;
  }
  /* Floe writes both: a Floe file without them is damaged. */
  if (floe_format && (!p->c->has_step || !p->c->has_hash))
    return bad(p, open_at, "__metadata__ of a Floe checkpoint lacks %s",
               !p->c->has_step ? "global_step" : "variables_hash");
  return FLOE_OK;

err_free_val:
  floe__free(val);
err_free_key:
  floe__free(key);
  return rc;
}

static floe_code parse_header(Parser *p) {
  floe_code rc;
  bool got_meta = false;
  char b[16];
  if (p->len == 0 || p->s[0] != '{')
    return bad(p, 0, "the header does not start with '{' (found %s): not a safetensors file",
               seen(p, 0, b, sizeof b));
  p->pos = 1;
  if (!accept(p, '}')) {
    for (;;) {
      size_t at = (ws(p), p->pos);
      char *key;
      if ((rc = parse_string(p, "a tensor name", &key)) != FLOE_OK) return rc;
      if ((rc = expect(p, ':', "after a tensor name")) != FLOE_OK) {
        floe__free(key);
        return rc;
      }
      if (strcmp(key, "__metadata__") == 0) {
        floe__free(key);
        if (got_meta) return bad(p, at, "__metadata__ is repeated");
        got_meta = true;
        if ((rc = parse_metadata(p)) != FLOE_OK) return rc;
      } else {
        StFile *c = p->c;
        if (c->n == c->cap) {
          int cap = c->cap ? 2 * c->cap : 16;
          Entry *e = floe__realloc(c->e, (size_t)cap * sizeof *e);
          if (!e) {
            floe__free(key);
            return floe_status_set(p->st, FLOE_NO_MEMORY, "out of memory reading a header");
          }
          c->e = e;
          c->cap = cap;
        }
        Entry *e = &c->e[c->n++];
        memset(e, 0, sizeof *e);
        e->name = key;
        e->at = at;
        if ((rc = parse_tensor(p, e)) != FLOE_OK) return rc;
      }
      if (accept(p, '}')) break;
      if ((rc = expect(p, ',', "or '}' after a tensor")) != FLOE_OK) return rc;
    }
  }
  ws(p); /* padding */
  if (p->pos < p->len)
    return bad(p, p->pos, "unexpected %s after the header's closing '}'",
               seen(p, p->pos, b, sizeof b));
  return FLOE_OK;
}

static int entry_name_cmp(const void *a, const void *b) {
  return strcmp(((const Entry *)a)->name, ((const Entry *)b)->name);
}

static int entry_off_cmp(const void *a, const void *b) {
  const Entry *x = *(const Entry *const *)a, *y = *(const Entry *const *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

FLOE__PRINTF(4, 5)
static floe_code bad_entry(StFile *c, const Entry *e, FloeStatus *st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *m = floe__vasprintf(fmt, ap);
  va_end(ap);
  floe_status_set(st, FLOE_DATA_LOSS, "checkpoint %s: offset %zu: tensor '%.*s': %s", c->path,
                  AT(e->at), NAME_SHOWN, e->name, m ? m : "corrupt");
  floe__free(m);
  return FLOE_DATA_LOSS;
}

/* Sizes agree with dtype and shape; the tensors tile the data section exactly (no gap,
 * overlap or byte outside any tensor); names are unique; the hash matches. */
static floe_code validate(StFile *c, FloeStatus *st) {
  for (int i = 0; i < c->n; i++) {
    Entry *e = &c->e[i];
    uint64_t bytes = e->type->size;
    for (int k = 0; k < e->rank; k++) {
      uint64_t d = (uint64_t)e->dims[k];
      if (d && bytes > UINT64_MAX / d)
        return bad_entry(c, e, st, "its shape's byte size overflows 64 bits");
      bytes *= d;
    }
    char sb[DIMS_BUF];
    if (e->begin > e->end || e->end - e->begin != bytes)
      return bad_entry(c, e, st,
                       "data_offsets [%" PRIu64 ", %" PRIu64 "] hold %s bytes but %s %s needs "
                       "%" PRIu64,
                       e->begin, e->end,
                       e->begin > e->end ? "a negative number of" : "the wrong number of",
                       e->type->name, floe__safetensors_dims_str(e->rank, e->dims, sb, sizeof sb),
                       bytes);
    if (e->end > c->data_len)
      return bad_entry(c, e, st,
                       "data_offsets end %" PRIu64 " is past the data section's %" PRIu64
                       " bytes (file offset %" PRIu64 "; the file is truncated or corrupt)",
                       e->end, c->data_len, c->data_start + e->end);
  }
  const Entry **by_off = floe__malloc((size_t)(c->n ? c->n : 1) * sizeof *by_off);
  if (!by_off) return floe_status_set(st, FLOE_NO_MEMORY, "out of memory checking %s", c->path);
  for (int i = 0; i < c->n; i++) by_off[i] = &c->e[i];
  if (c->n > 1) qsort(by_off, (size_t)c->n, sizeof *by_off, entry_off_cmp);
  uint64_t pos = 0;
  for (int i = 0; i < c->n; i++) {
    const Entry *e = by_off[i];
    if (e->begin != pos) {
      floe_code rc = bad_entry(c, by_off[i], st,
                               "data starts at %" PRIu64 " but the previous tensor ends at %" PRIu64
                               " (%s)",
                               e->begin, pos, e->begin > pos ? "a gap" : "overlapping tensors");
      floe__free(by_off);
      return rc;
    }
    pos = e->end;
  }
  floe__free(by_off);
  if (pos != c->data_len)
    return floe_status_set(st, FLOE_DATA_LOSS,
                           "checkpoint %s: offset %" PRIu64 ": %" PRIu64
                           " bytes after the last tensor belong to none",
                           c->path, c->data_start + pos, c->data_len - pos);
  if (c->n > 1) qsort(c->e, (size_t)c->n, sizeof *c->e, entry_name_cmp); /* e is NULL when n is 0 */
  uint64_t h = FNV_OFFSET;
  for (int i = 0; i < c->n; i++) {
    if (i && strcmp(c->e[i - 1].name, c->e[i].name) == 0)
      return bad_entry(c, &c->e[i], st, "the name appears twice");
    h = hash_line(h, c->e[i].name, c->e[i].type, c->e[i].rank, c->e[i].dims);
  }
  if (c->has_hash && h != c->hash)
    return floe_status_set(st, FLOE_DATA_LOSS,
                           "checkpoint %s: offset %zu: variables_hash %016" PRIx64
                           " does not match the tensors' names, dtypes and shapes (%016" PRIx64
                           "): the header is corrupt or was edited",
                           c->path, AT(c->hash_at), c->hash, h);
  return FLOE_OK;
}

/* 0, -1 at end of file, or an errno. */
static int pread_all(int fd, void *buf, size_t n, uint64_t off) {
  uint8_t *p = buf;
  while (n) {
    ssize_t k = pread(fd, p, n, (off_t)off);
    if (k < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (k == 0) return -1;
    p += k;
    n -= (size_t)k;
    off += (uint64_t)k;
  }
  return 0;
}

floe_code floe__safetensors_open(const char *path, StFile *c, FloeStatus *st) {
  memset(c, 0, sizeof *c);
  c->path = path;
  c->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO must not block us */
  if (c->fd < 0) {
    return floe__status_from_errno(st, errno, "cannot open checkpoint %s", path);
  }
  floe_code rc;
  struct stat sb;
  if (fstat(c->fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
    rc = floe_status_set(st, FLOE_INVALID_ARGUMENT, "checkpoint %s is not a regular file", path);
    goto err_close;
  }
  uint64_t size = (uint64_t)sb.st_size;
  uint8_t lenb[8];
  int e;
  if (size < 8 || (e = pread_all(c->fd, lenb, 8, 0)) < 0) {
    rc = floe_status_set(st, FLOE_DATA_LOSS,
                         "checkpoint %s: offset 0: the file has %" PRIu64
                         " bytes, fewer than the 8 of the header length (truncated)",
                         path, size);
    goto err_close;
  }
  if (e > 0) {
    rc = floe__status_from_errno(st, e, "checkpoint %s: offset 0: read failed", path);
    goto err_close;
  }
  uint64_t hl = 0;
  for (int k = 7; k >= 0; k--) hl = hl << 8 | lenb[k];
  if (hl > HEADER_LIMIT || hl > size - 8) {
    rc = floe_status_set(st, FLOE_DATA_LOSS,
                         "checkpoint %s: offset 0: header length %" PRIu64 " is %s (the file "
                         "has %" PRIu64 " bytes): truncated or not a safetensors file",
                         path, hl, hl > HEADER_LIMIT ? "over the 100000000-byte limit"
                                                     : "past the end of the file",
                         size);
    goto err_close;
  }
  uint8_t *h = floe__malloc((size_t)hl);
  if (!h) {
    rc = floe_status_set(st, FLOE_NO_MEMORY, "out of memory reading the header of %s", path);
    goto err_close;
  }
  if ((e = pread_all(c->fd, h, (size_t)hl, 8)) != 0) {
    if (e < 0)
      rc = floe_status_set(st, FLOE_DATA_LOSS,
                           "checkpoint %s: offset 8: reading the %" PRIu64
                           "-byte header failed: the file shrank",
                           path, hl);
    else
      rc = floe__status_from_errno(st, e,
                                   "checkpoint %s: offset 8: reading the %" PRIu64
                                   "-byte header failed",
                                   path, hl);
    floe__free(h);
    goto err_close;
  }
  c->data_start = 8 + hl;
  c->data_len = size - c->data_start;
  Parser p = {.s = h, .len = (size_t)hl, .c = c, .st = st};
  rc = parse_header(&p);
  floe__free(h);
  if (rc == FLOE_OK) rc = validate(c, st);
  if (rc != FLOE_OK) goto err_close;
  return FLOE_OK;

err_close:
  floe__safetensors_close(c);
  return rc;
}

const Entry *floe__safetensors_find(const StFile *c, const char *name) {
  Entry key = {.name = (char *)name};
  return c->n ? bsearch(&key, c->e, (size_t)c->n, sizeof *c->e, entry_name_cmp) : NULL;
}

FloeTensor *floe__safetensors_read(const StFile *c, const Entry *e, FloeStatus *st) {
  FloeTensor *t = floe__tensor_alloc(NULL, e->type->dt, e->rank, e->dims, st);
  if (!t) {
    floe__status_prefix(st, "checkpoint %s: variable '%s'", c->path, e->name);
    return NULL;
  }
  int err = t->nbytes ? pread_all(c->fd, floe_tensor_data(t), t->nbytes, c->data_start + e->begin)
                      : 0;
  if (err < 0)
    floe_status_set(st, FLOE_DATA_LOSS,
                    "checkpoint %s: offset %" PRIu64
                    ": reading variable '%s' failed: the file shrank while being read",
                    c->path, c->data_start + e->begin, e->name);
  else if (err)
    floe__status_from_errno(st, err, "checkpoint %s: offset %" PRIu64
                            ": reading variable '%s' failed", c->path, c->data_start + e->begin,
                            e->name);
  if (err) {
    floe_tensor_release(t);
    return NULL;
  }
#if HOST_BIG_ENDIAN
  swap_elements(floe_tensor_data(t), t->nbytes, e->type->size);
#endif
  if (e->type->dt == FLOE_BOOL) { /* safetensors' BOOL is the byte 0 or 1 */
    const uint8_t *b = floe_tensor_data(t);
    for (size_t i = 0; i < t->nbytes; i++)
      if (b[i] > 1) {
        floe_status_set(st, FLOE_DATA_LOSS,
                        "checkpoint %s: offset %" PRIu64 ": variable '%s': bool element %zu is "
                        "the byte %u, not 0 or 1",
                        c->path, c->data_start + e->begin + i, e->name, i, b[i]);
        floe_tensor_release(t);
        return NULL;
      }
  }
  return t;
}

/* Copies the box [lo, hi) of entry e (its coordinates) into dst at dst_lo (dst's
 * coordinates), reading only those bytes: one pread per run of elements contiguous in both
 * (the innermost dims both span whole, and the last one they do not). */
floe_code floe__safetensors_read_box(const StFile *c, const Entry *e, const int64_t *lo,
                                     const int64_t *hi, FloeTensor *dst, const int64_t *dst_lo,
                                     FloeStatus *st) {
  int rank = e->rank;
  size_t es = e->type->size;
  if (rank == 0) { /* a scalar: one element */
    lo = hi = dst_lo = NULL;
  }
  int k = rank; /* dims k.. form one contiguous run in both; k - 1 is the partial one */
  while (k > 0 && lo[k - 1] == 0 && hi[k - 1] == e->dims[k - 1] && dst_lo[k - 1] == 0 &&
         dst->dims[k - 1] == e->dims[k - 1])
    k--;
  int64_t run = 1;
  for (int d = k; d < rank; d++) run *= e->dims[d];
  int outer_dims = k > 0 ? k - 1 : 0;
  if (k > 0) run *= hi[k - 1] - lo[k - 1];
  int64_t idx[FLOE_MAX_DIMS] = {0};
  for (int d = 0; d < outer_dims; d++) idx[d] = lo[d];
  for (int d = 0; d < rank; d++)
    if (hi[d] <= lo[d]) return FLOE_OK; /* empty */
  uint8_t *out = floe_tensor_data(dst);
  for (;;) {
    /* the run's first element: idx over the outer dims, lo at dim k - 1, 0 after */
    uint64_t src = 0, dd = 0;
    for (int d = 0; d < rank; d++) {
      int64_t i = d < outer_dims ? idx[d] : d == k - 1 ? lo[d] : 0;
      src = src * (uint64_t)e->dims[d] + (uint64_t)i;
      dd = dd * (uint64_t)dst->dims[d] + (uint64_t)(i - (d < rank ? lo[d] : 0) + dst_lo[d]);
    }
    uint64_t off = c->data_start + e->begin + src * es;
    uint8_t *p = out + dd * es;
    size_t nb = (size_t)run * es;
    int err = nb ? pread_all(c->fd, p, nb, off) : 0;
    if (err < 0)
      return floe_status_set(st, FLOE_DATA_LOSS, "checkpoint %s: offset %" PRIu64 ": reading "
                             "tensor '%s' failed: the file shrank while being read", c->path,
                             off, e->name);
    if (err)
      return floe__status_from_errno(st, err, "checkpoint %s: offset %" PRIu64 ": reading "
                                     "tensor '%s' failed", c->path, off, e->name);
#if HOST_BIG_ENDIAN
    swap_elements(p, nb, es);
#endif
    if (e->type->dt == FLOE_BOOL)
      for (size_t i = 0; i < nb; i++)
        if (p[i] > 1)
          return floe_status_set(st, FLOE_DATA_LOSS, "checkpoint %s: offset %" PRIu64 ": tensor "
                                 "'%s': a bool is the byte %u, not 0 or 1", c->path, off + i,
                                 e->name, p[i]);
    int d = outer_dims - 1; /* the next run: an odometer over the outer dims */
    while (d >= 0 && ++idx[d] == hi[d]) idx[d] = lo[d], d--;
    if (d < 0) return FLOE_OK;
  }
}
