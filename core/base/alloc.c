/* SPDX-License-Identifier: Apache-2.0 */
/* alloc.c - the core's memory functions, with fault injection for allocation-failure tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"

/* Allocations counted since the last floe_test_fail_alloc_after; fail_at 0 = never fail. */
static atomic_long alloc_count;
static atomic_long fail_at;

long floe_test_fail_alloc_after(long n) {
  long made = atomic_exchange(&alloc_count, 0);
  atomic_store(&fail_at, n > 0 ? n : 0);
  return made;
}

/* True when this allocation must fail. Once the Nth fails, later ones fail too, so a
 * caller's cleanup path is exercised under the same pressure. Counting only while armed
 * keeps a shared counter's cache line from bouncing between threads in normal runs. */
static bool should_fail(void) {
  long at = atomic_load_explicit(&fail_at, memory_order_relaxed);
  if (at == 0) return false;
  long k = atomic_fetch_add_explicit(&alloc_count, 1, memory_order_relaxed) + 1;
  return k >= at;
}

void *floe__malloc(size_t n) {
  if (should_fail()) return NULL;
  return malloc(n ? n : 1);
}

void *floe__calloc(size_t count, size_t size) {
  if (should_fail()) return NULL;
  if (count == 0 || size == 0) return calloc(1, 1);
  return calloc(count, size);
}

void *floe__realloc(void *p, size_t n) {
  if (should_fail()) return NULL;
  return realloc(p, n ? n : 1);
}

void floe__free(void *p) { free(p); }

char *floe__strndup(const char *s, size_t n) {
  size_t len = strnlen(s, n);
  char *d = floe__malloc(len + 1);
  if (!d) return NULL;
  memcpy(d, s, len);
  d[len] = '\0';
  return d;
}

char *floe__strdup(const char *s) { return floe__strndup(s, strlen(s)); }

char *floe__vasprintf(const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int len = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (len < 0) return NULL;
  char *buf = floe__malloc((size_t)len + 1);
  if (!buf) return NULL;
  vsnprintf(buf, (size_t)len + 1, fmt, ap);
  return buf;
}

char *floe__asprintf(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *s = floe__vasprintf(fmt, ap);
  va_end(ap);
  return s;
}

void *floe__aligned_alloc(size_t alignment, size_t n) {
  if (should_fail()) return NULL;
  if (alignment < 64) alignment = 64;
  size_t rounded = (n + alignment - 1) / alignment * alignment;
  if (rounded < n) return NULL; /* overflow */
  return aligned_alloc(alignment, rounded ? rounded : alignment);
}

void floe__aligned_free(void *p) { free(p); }

void floe__buf_put(FloeByteBuf *b, const void *src, size_t n) {
  if (b->oom || !n) return;
  if (n > b->cap - b->len) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap - b->len < n) {
      if (cap > SIZE_MAX / 2) {
        b->oom = true;
        return;
      }
      cap *= 2;
    }
    uint8_t *q = floe__realloc(b->p, cap);
    if (!q) {
      b->oom = true;
      return;
    }
    b->p = q;
    b->cap = cap;
  }
  memcpy(b->p + b->len, src, n);
  b->len += n;
}

/* Strict UTF-8 (no overlongs, surrogates or code points above U+10FFFF): the length of the
 * sequence at s[0..n), or 0 when invalid. */
size_t floe__utf8_seq_len(const uint8_t *s, size_t n) {
  uint8_t c = s[0];
  if (c < 0x80) return 1;
  size_t k;
  uint32_t cp, min;
  if (c >= 0xC2 && c <= 0xDF) k = 2, cp = c & 0x1Fu, min = 0x80;
  else if (c >= 0xE0 && c <= 0xEF) k = 3, cp = c & 0x0Fu, min = 0x800;
  else if (c >= 0xF0 && c <= 0xF4) k = 4, cp = c & 0x07u, min = 0x10000;
  else return 0;
  if (n < k) return 0;
  for (size_t i = 1; i < k; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = cp << 6 | (s[i] & 0x3Fu);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return k;
}

size_t floe__utf8_check(const char *s, size_t n) {
  const uint8_t *p = (const uint8_t *)s;
  for (size_t i = 0; i < n;) {
    size_t k = floe__utf8_seq_len(p + i, n - i);
    if (!k) return i;
    i += k;
  }
  return n;
}
