/* SPDX-License-Identifier: Apache-2.0 */
/* npy.c - NumPy .npy files (format versions 1.0, 2.0, 3.0) to and from host tensors. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base.h"

static const char npy_magic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

typedef struct NpyType {
  const char *descr; /* without byte-order character */
  FloeDType dt;
} NpyType;

static const NpyType npy_types[] = {
    {"f4", FLOE_F32}, {"f8", FLOE_F64}, {"f2", FLOE_F16}, {"i1", FLOE_I8},  {"u1", FLOE_U8},
    {"i4", FLOE_I32}, {"i8", FLOE_I64}, {"b1", FLOE_BOOL},
};

/* Finds "'key':" in the header dict and returns the text after the colon, or NULL. */
static const char *dict_value(const char *hdr, const char *key) {
  char pat[32];
  snprintf(pat, sizeof pat, "'%s'", key);
  const char *p = strstr(hdr, pat);
  if (!p) {
    snprintf(pat, sizeof pat, "\"%s\"", key);
    p = strstr(hdr, pat);
  }
  if (!p) return NULL;
  p += strlen(pat);
  while (isspace((unsigned char)*p)) p++;
  if (*p != ':') return NULL;
  p++;
  while (isspace((unsigned char)*p)) p++;
  return p;
}

static void swap_bytes(char *data, size_t n, size_t esize) {
  for (size_t i = 0; i < n; i++) {
    char *e = data + i * esize;
    for (size_t a = 0, b = esize - 1; a < b; a++, b--) {
      char t = e[a];
      e[a] = e[b];
      e[b] = t;
    }
  }
}

/* Fortran (column-major) bytes src into C order in dst for dims[rank]. */
static void fortran_to_c(char *dst, const char *src, int rank, const int64_t *dims, size_t esize,
                         int64_t n) {
  int64_t idx[FLOE_MAX_DIMS] = {0};
  for (int64_t c = 0; c < n; c++) {
    int64_t f = 0, stride = 1;
    for (int d = 0; d < rank; d++) {
      f += idx[d] * stride;
      stride *= dims[d];
    }
    memcpy(dst + (size_t)c * esize, src + (size_t)f * esize, esize);
    for (int d = rank - 1; d >= 0; d--) {
      if (++idx[d] < dims[d]) break;
      idx[d] = 0;
    }
  }
}

FloeTensor *floe_tensor_parse_npy(const void *buf, size_t len, const char *what,
                                  FloeStatus *status) {
  const unsigned char *b = buf;
  if (!what) what = "<npy buffer>";
  if (len < 10 || memcmp(b, npy_magic, 6) != 0) {
    floe_status_set(status, FLOE_INVALID_ARGUMENT,
                    "%s: offset 0: not a .npy file (missing the \\x93NUMPY magic)", what);
    return NULL;
  }
  unsigned major = b[6];
  size_t hlen, hoff;
  if (major == 1) {
    hlen = (size_t)b[8] | ((size_t)b[9] << 8);
    hoff = 10;
  } else if (major == 2 || major == 3) {
    if (len < 12) {
      floe_status_set(status, FLOE_INVALID_ARGUMENT, "%s: offset 8: truncated header length",
                      what);
      return NULL;
    }
    hlen = (size_t)b[8] | ((size_t)b[9] << 8) | ((size_t)b[10] << 16) | ((size_t)b[11] << 24);
    hoff = 12;
  } else {
    floe_status_set(status, FLOE_INVALID_ARGUMENT,
                    "%s: offset 6: .npy format version %u.%u is not supported (1.0 to 3.0 are)",
                    what, major, (unsigned)b[7]);
    return NULL;
  }
  if (hlen > len - hoff) {
    floe_status_set(status, FLOE_INVALID_ARGUMENT,
                    "%s: offset %zu: header of %zu bytes is truncated (%zu bytes left)", what,
                    hoff, hlen, len - hoff);
    return NULL;
  }
  char *hdr = floe__strndup((const char *)b + hoff, hlen);
  if (!hdr) {
    floe_status_set(status, FLOE_NO_MEMORY, "%s: out of memory reading the header", what);
    return NULL;
  }
  FloeTensor *t = NULL;
  const char *descr = dict_value(hdr, "descr");
  const char *fortran = dict_value(hdr, "fortran_order");
  const char *shape = dict_value(hdr, "shape");
  if (!descr || !fortran || !shape || (*descr != '\'' && *descr != '"') || *shape != '(') {
    floe_status_set(status, FLOE_INVALID_ARGUMENT,
                    "%s: offset %zu: header is not a dict with 'descr', 'fortran_order' and "
                    "'shape'",
                    what, hoff);
    goto out;
  }
  char order = descr[1];
  const char *code = descr + 2;
  if (order != '<' && order != '>' && order != '|' && order != '=') {
    order = '=';
    code = descr + 1;
  }
  FloeDType dt = FLOE_DTYPE_INVALID;
  for (size_t i = 0; i < FLOE__ARRAY_LEN(npy_types); i++)
    if (strncmp(code, npy_types[i].descr, 2) == 0 && (code[2] == '\'' || code[2] == '"'))
      dt = npy_types[i].dt;
  if (dt == FLOE_DTYPE_INVALID) {
    floe_status_set(status, FLOE_INVALID_ARGUMENT,
                    "%s: offset %zu: dtype %.8s is not supported (f2, f4, f8, i1, u1, i4, i8, "
                    "b1 are)",
                    what, hoff, descr);
    goto out;
  }
  int rank = 0;
  int64_t dims[FLOE_MAX_DIMS];
  const char *p = shape + 1;
  for (;;) {
    while (isspace((unsigned char)*p) || *p == ',') p++;
    if (*p == ')') break;
    if (!isdigit((unsigned char)*p) || rank == FLOE_MAX_DIMS) {
      floe_status_set(status, FLOE_INVALID_ARGUMENT,
                      "%s: offset %zu: bad shape in header (digits expected, at most %d dims)",
                      what, hoff + (size_t)(p - hdr), FLOE_MAX_DIMS);
      goto out;
    }
    errno = 0;
    char *end;
    long long d = strtoll(p, &end, 10);
    if (errno || d < 0) {
      floe_status_set(status, FLOE_INVALID_ARGUMENT, "%s: offset %zu: bad dimension in shape",
                      what, hoff + (size_t)(p - hdr));
      goto out;
    }
    dims[rank++] = d;
    p = end;
  }
  bool is_fortran = false;
  size_t flen = 0;
  while (isalpha((unsigned char)fortran[flen])) flen++;
  if (flen == 4 && strncmp(fortran, "True", 4) == 0) {
    is_fortran = true;
  } else if (flen != 5 || strncmp(fortran, "False", 5) != 0) {
    floe_status_set(status, FLOE_INVALID_ARGUMENT,
                    "%s: offset %zu: fortran_order is '%.*s'; it must be True or False", what,
                    hoff + (size_t)(fortran - hdr), (int)(flen ? flen : 1), fortran);
    goto out;
  }
  /* The data the shape declares must be in the file before anything is allocated for it:
   * a small file declaring terabytes is truncated, not a request for memory. */
  size_t doff = hoff + hlen;
  uint64_t need = floe_dtype_size(dt);
  bool overflow = false;
  for (int i = 0; i < rank; i++) {
    if (dims[i] == 0) {
      need = 0;
      overflow = false;
      break;
    }
    if (!overflow && need > UINT64_MAX / (uint64_t)dims[i]) overflow = true;
    if (!overflow) need *= (uint64_t)dims[i];
  }
  if (overflow || need > len - doff) {
    char sb[200];
    FloeShape sh = floe_shape_make(rank, dims);
    floe_status_set(status, FLOE_INVALID_ARGUMENT,
                    "%s: offset %zu: data is truncated: shape %s of %s needs %s%" PRIu64
                    " bytes, the file has %zu after the header",
                    what, doff, floe_shape_str(&sh, sb, sizeof sb), floe_dtype_name(dt),
                    overflow ? "more than " : "", overflow ? UINT64_MAX : need, len - doff);
    goto out;
  }
  if (dt == FLOE_BOOL) /* NumPy's bools are the bytes 0 and 1; anything else is not a bool */
    for (uint64_t i = 0; i < need; i++)
      if (b[doff + i] > 1) {
        floe_status_set(status, FLOE_INVALID_ARGUMENT,
                        "%s: offset %" PRIu64 ": bool element %" PRIu64
                        " is the byte 0x%02x (a .npy bool is 0 or 1)",
                        what, (uint64_t)doff + i, i, b[doff + i]);
        goto out;
      }
  t = floe__tensor_alloc(NULL, dt, rank, dims, status);
  if (!t) {
    floe__status_prefix(status, "%s", what);
    goto out;
  }
  if (t->nbytes) {
    size_t esize = floe_dtype_size(dt);
    char *data = floe_tensor_data(t);
    if (is_fortran && rank > 1)
      fortran_to_c(data, (const char *)b + doff, rank, dims, esize, t->num_elements);
    else
      memcpy(data, b + doff, t->nbytes);
    if (order == '>' && esize > 1) swap_bytes(data, (size_t)t->num_elements, esize);
  }
out:
  floe__free(hdr);
  return t;
}

floe_code floe_tensor_serialize_npy(const FloeTensor *t, void **buf, size_t *len,
                                    FloeStatus *status) {
  const char *code = NULL;
  for (size_t i = 0; t && i < FLOE__ARRAY_LEN(npy_types); i++)
    if (npy_types[i].dt == t->dtype) code = npy_types[i].descr;
  if (!code)
    return floe_status_set(status, FLOE_INVALID_ARGUMENT,
                           "a %s tensor has no .npy dtype: cast it to f32 first",
                           t ? floe_dtype_name(t->dtype) : "NULL");
  FloeTensor *host = NULL;
  if (!floe__tensor_on_host(t) && !(host = floe_tensor_copy(t, status)))
    return status ? status->code : FLOE_NO_MEMORY;
  char dict[512];
  int n = snprintf(dict, sizeof dict, "{'descr': '%c%s', 'fortran_order': False, 'shape': (",
                   floe_dtype_size(t->dtype) == 1 ? '|' : '<', code);
  for (int i = 0; i < t->rank; i++)
    n += snprintf(dict + n, sizeof dict - (size_t)n, "%lld%s", (long long)t->dims[i],
                  t->rank == 1 ? "," : (i + 1 < t->rank ? ", " : ""));
  n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
  /* Pad with spaces so data starts on a 64-byte boundary; the header ends in '\n'. */
  size_t hlen = (size_t)n + 1;
  size_t total_hdr = (10 + hlen + 63) / 64 * 64;
  hlen = total_hdr - 10;
  size_t size = total_hdr + t->nbytes;
  unsigned char *out = malloc(size);
  if (!out) {
    floe_tensor_release(host);
    return floe_status_set(status, FLOE_NO_MEMORY, "out of memory writing .npy (%zu bytes)",
                           size);
  }
  memcpy(out, npy_magic, 6);
  out[6] = 1;
  out[7] = 0;
  out[8] = (unsigned char)(hlen & 0xff);
  out[9] = (unsigned char)(hlen >> 8);
  memset(out + 10, ' ', hlen);
  memcpy(out + 10, dict, (size_t)n);
  out[total_hdr - 1] = '\n';
  if (t->nbytes) memcpy(out + total_hdr, floe_tensor_data(host ? host : t), t->nbytes);
  floe_tensor_release(host);
  *buf = out;
  *len = size;
  return FLOE_OK;
}

FloeTensor *floe_tensor_load_npy(const char *path, FloeStatus *status) {
  /* A FIFO, a folder or a device is refused (not waited on, not read as LONG_MAX bytes). */
  uint8_t *data;
  size_t size;
  if (floe__file_read_all(path, &data, &size, status) != FLOE_OK) return NULL;
  FloeTensor *t = floe_tensor_parse_npy(data, size, path, status);
  floe__free(data);
  return t;
}

floe_code floe_tensor_save_npy(const FloeTensor *t, const char *path, FloeStatus *status) {
  void *buf;
  size_t len;
  floe_code rc = floe_tensor_serialize_npy(t, &buf, &len, status);
  if (rc != FLOE_OK) return rc;
  rc = floe__file_replace(path, buf, len, status);
  free(buf);
  return rc;
}
