/* SPDX-License-Identifier: Apache-2.0 */
/* status.c - FloeStatus: a code and a message naming what went wrong. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"

FloeStatus *floe_status_new(void) { return floe__calloc(1, sizeof(FloeStatus)); }

void floe_status_free(FloeStatus *s) {
  if (!s) return;
  floe__free(s->msg);
  floe__free(s);
}

floe_code floe_status_code(const FloeStatus *s) { return s ? s->code : FLOE_OK; }

const char *floe_status_message(const FloeStatus *s) {
  if (!s || s->code == FLOE_OK) return "";
  /* A message that could not be allocated still reads as something useful. */
  return s->msg ? s->msg : floe_code_message(s->code);
}

void floe_status_clear(FloeStatus *s) {
  if (!s) return;
  floe__free(s->msg);
  s->msg = NULL;
  s->code = FLOE_OK;
}

floe_code floe__status_vset(FloeStatus *s, floe_code code, const char *fmt, va_list ap) {
  if (!s) return code;
  floe__free(s->msg);
  s->msg = NULL;
  s->code = code;
  if (code != FLOE_OK && fmt) s->msg = floe__vasprintf(fmt, ap);
  return code;
}

floe_code floe_status_set(FloeStatus *s, floe_code code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  floe__status_vset(s, code, fmt, ap);
  va_end(ap);
  return code;
}

void floe__status_prefix(FloeStatus *s, const char *fmt, ...) {
  if (!s || s->code == FLOE_OK) return;
  va_list ap;
  va_start(ap, fmt);
  char *prefix = floe__vasprintf(fmt, ap);
  va_end(ap);
  if (!prefix) return;
  char *joined = floe__asprintf("%s: %s", prefix, floe_status_message(s));
  floe__free(prefix);
  if (!joined) return;
  floe__free(s->msg);
  s->msg = joined;
}

floe_code floe__status_copy(FloeStatus *dst, const FloeStatus *src) {
  floe_code code = src ? src->code : FLOE_OK;
  if (!dst || dst == src) return code;
  if (code == FLOE_OK) {
    floe_status_clear(dst);
    return code;
  }
  floe_status_set(dst, code, "%s", floe_status_message(src));
  return code;
}

/* What a failed open, listing, read or write says about its cause. */
static floe_code errno_code(int err) {
  switch (err) {
    case ENOENT: return FLOE_NOT_FOUND;
    case EACCES:
    case EPERM:
    case EROFS: return FLOE_PERMISSION_DENIED;
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
    case EMFILE:
    case ENFILE: return FLOE_RESOURCE_EXHAUSTED;
    case ENOMEM: return FLOE_NO_MEMORY;
    case EISDIR:
    case ENOTDIR:
    case ENAMETOOLONG:
    case ELOOP: return FLOE_INVALID_ARGUMENT; /* the path given cannot name a file */
    case EEXIST: return FLOE_ALREADY_EXISTS;
    case EIO: return FLOE_DATA_LOSS;
    default: return FLOE_UNKNOWN;
  }
}

floe_code floe__status_from_errno(FloeStatus *st, int err, const char *fmt, ...) {
  floe_code code = errno_code(err);
  if (!st) return code;
  va_list ap;
  va_start(ap, fmt);
  char *what = floe__vasprintf(fmt, ap);
  va_end(ap);
  floe_status_set(st, code, "%s: %s", what ? what : floe_code_message(code), strerror(err));
  floe__free(what);
  return code;
}

const char *floe_code_name(floe_code code) {
  switch (code) {
#define FLOE__CODE_NAME(name, value, msg) \
  case FLOE_##name:                       \
    return #name;
    FLOE_CODE_MAP(FLOE__CODE_NAME)
#undef FLOE__CODE_NAME
    default:
      return "UNKNOWN_CODE";
  }
}

const char *floe_code_message(floe_code code) {
  switch (code) {
#define FLOE__CODE_MSG(name, value, msg) \
  case FLOE_##name:                      \
    return msg;
    FLOE_CODE_MAP(FLOE__CODE_MSG)
#undef FLOE__CODE_MSG
    default:
      return "unknown status code";
  }
}
