/* SPDX-License-Identifier: Apache-2.0 */
/* opdef.c - the process-wide op registry and the parser of op spec strings.
 *
 * Specs (grammar in floe_plugin.h):
 *   argument   "name: T" | "name: f32" | "name: N*T" | "name: N*f32" | "name: Tlist"
 *   attribute  "name: kind [>= min] [in {dtype or set,...}] [= default]"
 * Definitions are parsed once into FloeOpInfo records that live until process exit, so
 * lookups hand out plain pointers. Lookups take a read lock and probe a hash table; plugin
 * registrations take the write lock.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "ops_shape.h"

/* ------------------------------------------------------------------------------------ */
/* Registry state. */

static pthread_rwlock_t g_lock = PTHREAD_RWLOCK_INITIALIZER;
static FloeOpInfo **g_ops; /* insertion order; records never move or die */
static int g_num_ops, g_cap_ops;
static int *g_table;       /* open addressing: index + 1 into g_ops, 0 = empty */
static size_t g_table_cap; /* power of two, kept at least twice g_num_ops */

/* Standard-set initialisation: retried after a failure (an injected allocation failure
 * must not leave the process without ops), hence a flag + mutex rather than pthread_once. */
static pthread_mutex_t g_init_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool g_ready;

/* ------------------------------------------------------------------------------------ */
/* Parser. */

typedef struct SpecParser {
  const char *op;   /* op name, for messages */
  const char *what; /* "input", "output", "attribute" */
  const char *spec; /* the whole spec string, for messages */
  const char *p;    /* cursor */
  FloeStatus *st;
} SpecParser;

#define MAX_IDENT 64

static floe_code spec_fail(const SpecParser *ps, const char *fmt, ...) FLOE__PRINTF(2, 3);

/* Every parse error names the op and the exact spec string. */
static floe_code spec_fail(const SpecParser *ps, const char *fmt, ...) {
  if (!ps->st) return FLOE_INVALID_ARGUMENT;
  va_list ap;
  va_start(ap, fmt);
  floe__status_vset(ps->st, FLOE_INVALID_ARGUMENT, fmt, ap);
  va_end(ap);
  floe__status_prefix(ps->st, "op '%s': %s spec \"%s\"", ps->op, ps->what, ps->spec);
  return FLOE_INVALID_ARGUMENT;
}

static floe_code oom(FloeStatus *st, const char *op) {
  return floe_status_set(st, FLOE_NO_MEMORY, "out of memory defining op '%s'", op);
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static bool is_ident_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
static bool is_ident_char(char c) { return is_ident_start(c) || (c >= '0' && c <= '9'); }

static void skip_ws(SpecParser *ps) {
  while (is_space(*ps->p)) ps->p++;
}

static bool valid_ident(const char *s) {
  if (!s || !is_ident_start(*s)) return false;
  for (s++; *s; s++)
    if (!is_ident_char(*s)) return false;
  return true;
}

/* Reads an identifier into buf; "what" names it in the error ("a name", "a kind"). */
static floe_code parse_ident(SpecParser *ps, char *buf, const char *what) {
  skip_ws(ps);
  const char *start = ps->p;
  if (!is_ident_start(*start))
    return *start ? spec_fail(ps, "expected %s at '%s'", what, start)
                  : spec_fail(ps, "expected %s at the end", what);
  while (is_ident_char(*ps->p)) ps->p++;
  size_t n = (size_t)(ps->p - start);
  if (n >= MAX_IDENT) return spec_fail(ps, "%s '%.*s' is too long", what, (int)n, start);
  memcpy(buf, start, n);
  buf[n] = '\0';
  return FLOE_OK;
}

static floe_code expect_char(SpecParser *ps, char c) {
  skip_ws(ps);
  if (*ps->p != c)
    return *ps->p ? spec_fail(ps, "expected '%c' at '%s'", c, ps->p)
                  : spec_fail(ps, "expected '%c' at the end", c);
  ps->p++;
  return FLOE_OK;
}

/* A whole (already trimmed) token as an int64; false unless every character is used. */
static bool parse_int_token(const char *s, size_t n, int64_t *out) {
  char buf[32];
  if (n == 0 || n >= sizeof buf) return false;
  memcpy(buf, s, n);
  buf[n] = '\0';
  char *end;
  errno = 0;
  long long v = strtoll(buf, &end, 10);
  if (errno || *end) return false;
  *out = v;
  return true;
}

static bool parse_float_token(const char *s, size_t n, double *out) {
  char buf[64];
  if (n == 0 || n >= sizeof buf) return false;
  memcpy(buf, s, n);
  buf[n] = '\0';
  char *end;
  errno = 0;
  double v = strtod(buf, &end);
  if (errno == ERANGE || *end) return false;
  *out = v;
  return true;
}

static FloeDType dtype_token(const char *s, size_t n) {
  char buf[MAX_IDENT];
  if (n == 0 || n >= sizeof buf) return FLOE_DTYPE_INVALID;
  memcpy(buf, s, n);
  buf[n] = '\0';
  return floe_dtype_from_name(buf);
}

/* Named type sets usable inside "in {...}" (they win over the dtype alias "float"). */
static uint32_t type_set_token(const char *s, size_t n) {
  static const struct {
    const char *name;
    uint32_t mask;
  } sets[] = {
      {"float", FLOE_DTYPES_FLOAT},
      {"int", FLOE_DTYPES_INT},
      {"index", FLOE_DTYPE_BIT(FLOE_I32) | FLOE_DTYPE_BIT(FLOE_I64)},
      {"numeric", FLOE_DTYPES_NUMERIC},
      {"all", FLOE_DTYPES_ALL},
  };
  for (size_t i = 0; i < FLOE__ARRAY_LEN(sets); i++)
    if (strlen(sets[i].name) == n && memcmp(sets[i].name, s, n) == 0) return sets[i].mask;
  FloeDType dt = dtype_token(s, n);
  return dt == FLOE_DTYPE_INVALID ? 0 : FLOE_DTYPE_BIT(dt);
}

static void trim(const char **s, size_t *n) {
  while (*n && is_space(**s)) (*s)++, (*n)--;
  while (*n && is_space((*s)[*n - 1])) (*n)--;
}

/* Splits the inside of "[a, b, c]" (text, n) into items; calls item() on each trimmed item.
 * Counts items in *count (an empty "[]" has none). */
typedef floe_code (*ItemFn)(SpecParser *ps, const char *s, size_t n, size_t index, void *arg);

static floe_code for_each_item(SpecParser *ps, const char *text, size_t n, ItemFn item,
                               void *arg, size_t *count) {
  *count = 0;
  trim(&text, &n);
  if (n == 0) return FLOE_OK;
  const char *s = text, *end = text + n;
  for (;;) {
    const char *comma = memchr(s, ',', (size_t)(end - s));
    const char *stop = comma ? comma : end;
    const char *it = s;
    size_t len = (size_t)(stop - s);
    trim(&it, &len);
    if (len == 0) return spec_fail(ps, "empty element in list '%.*s'", (int)n, text);
    if (item) {
      floe_code c = item(ps, it, len, *count, arg);
      if (c != FLOE_OK) return c;
    }
    (*count)++;
    if (!comma) return FLOE_OK;
    s = comma + 1;
  }
}

/* Finds "[ ... ]" spanning all of (s, n); returns the inside. */
static floe_code bracketed(SpecParser *ps, const char *s, size_t n, const char **in,
                           size_t *in_n) {
  *in = s; /* defined on failure too */
  *in_n = 0;
  if (n < 2 || s[0] != '[' || s[n - 1] != ']' || memchr(s + 1, '[', n - 2) ||
      memchr(s + 1, ']', n - 2))
    return spec_fail(ps, "expected a list like [1,2], got '%.*s'", (int)n, s);
  *in = s + 1;
  *in_n = n - 2;
  return FLOE_OK;
}

typedef struct ListTarget {
  FloeAttrKind kind;
  void *values;     /* int64_t / double / FloeDType array */
  uint32_t allowed; /* for type lists */
} ListTarget;

static floe_code list_item(SpecParser *ps, const char *s, size_t n, size_t index, void *arg) {
  ListTarget *t = arg;
  switch (t->kind) {
    case FLOE_ATTR_INT_LIST:
      if (!parse_int_token(s, n, &((int64_t *)t->values)[index]))
        return spec_fail(ps, "'%.*s' is not an integer", (int)n, s);
      return FLOE_OK;
    case FLOE_ATTR_FLOAT_LIST:
      if (!parse_float_token(s, n, &((double *)t->values)[index]))
        return spec_fail(ps, "'%.*s' is not a number", (int)n, s);
      return FLOE_OK;
    case FLOE_ATTR_TYPE_LIST: {
      FloeDType dt = dtype_token(s, n);
      if (dt == FLOE_DTYPE_INVALID) return spec_fail(ps, "'%.*s' is not a dtype", (int)n, s);
      if (t->allowed && !(t->allowed & FLOE_DTYPE_BIT(dt)))
        return spec_fail(ps, "default dtype %s is not in the allowed set", floe_dtype_name(dt));
      ((FloeDType *)t->values)[index] = dt;
      return FLOE_OK;
    }
    default:
      return spec_fail(ps, "internal: not a list kind");
  }
}

/* One shape dimension: a size >= 0, or "?" / -1 for unknown. */
static floe_code shape_item(SpecParser *ps, const char *s, size_t n, size_t index, void *arg) {
  FloeShape *shape = arg;
  int64_t d;
  if (n == 1 && s[0] == '?') {
    d = FLOE_DIM_UNKNOWN;
  } else if (!parse_int_token(s, n, &d) || d < -1) {
    return spec_fail(ps, "shape dimension '%.*s' is not a size, '?' or -1", (int)n, s);
  }
  if (index >= FLOE_MAX_DIMS)
    return spec_fail(ps, "shape default has more than %d dimensions", FLOE_MAX_DIMS);
  shape->dims[index] = d;
  return FLOE_OK;
}

static floe_code parse_list_default(SpecParser *ps, FloeAttrDef *ad, const char *s, size_t n) {
  const char *in;
  size_t in_n, count;
  floe_code c = bracketed(ps, s, n, &in, &in_n);
  if (c == FLOE_OK) c = for_each_item(ps, in, in_n, NULL, NULL, &count);
  if (c != FLOE_OK) return c;
  size_t esize = ad->kind == FLOE_ATTR_INT_LIST     ? sizeof(int64_t)
                 : ad->kind == FLOE_ATTR_FLOAT_LIST ? sizeof(double)
                                                    : sizeof(FloeDType);
  void *values = NULL;
  if (count) {
    values = floe__calloc(count, esize);
    if (!values) return oom(ps->st, ps->op);
  }
  ListTarget t = {ad->kind, values, ad->allowed};
  c = for_each_item(ps, in, in_n, list_item, &t, &count);
  if (c != FLOE_OK) {
    floe__free(values);
    return c;
  }
  ad->def.kind = ad->kind;
  /* The three list members share layout (pointer, count), but set the right one. */
  if (ad->kind == FLOE_ATTR_INT_LIST) {
    ad->def.u.ilist.v = values;
    ad->def.u.ilist.n = count;
  } else if (ad->kind == FLOE_ATTR_FLOAT_LIST) {
    ad->def.u.flist.v = values;
    ad->def.u.flist.n = count;
  } else {
    ad->def.u.tlist.v = values;
    ad->def.u.tlist.n = count;
  }
  return FLOE_OK;
}

/* "?" (unknown rank) or "[2,?,3]" into *shape. */
static floe_code parse_shape_text(SpecParser *ps, const char *s, size_t n, FloeShape *shape) {
  *shape = floe_shape_unknown();
  if (n == 1 && s[0] == '?') return FLOE_OK;
  const char *in;
  size_t in_n, count;
  floe_code c = bracketed(ps, s, n, &in, &in_n);
  if (c == FLOE_OK) c = for_each_item(ps, in, in_n, shape_item, shape, &count);
  if (c != FLOE_OK) return c;
  shape->rank = (int32_t)count;
  return FLOE_OK;
}

/* "[]", "[[2,3], ?, []]": shapes separated by the commas outside their brackets. */
static floe_code parse_shape_list_default(SpecParser *ps, FloeAttrDef *ad, const char *s,
                                          size_t n) {
  if (n < 2 || s[0] != '[' || s[n - 1] != ']')
    return spec_fail(ps, "expected a list of shapes like [[2,3],?], got '%.*s'", (int)n, s);
  const char *p = s + 1, *end = s + n - 1;
  FloeShape *v = NULL;
  size_t count = 0;
  while (p < end) {
    const char *q = p;
    int depth = 0;
    while (q < end && (depth > 0 || *q != ',')) {
      depth += *q == '[' ? 1 : *q == ']' ? -1 : 0;
      q++;
    }
    const char *it = p;
    size_t len = (size_t)(q - p);
    trim(&it, &len);
    if (len == 0 && (q < end || count > 0)) {
      floe__free(v);
      return spec_fail(ps, "empty element in list '%.*s'", (int)n, s);
    }
    if (len > 0) {
      FloeShape *nv = floe__realloc(v, (count + 1) * sizeof *v);
      if (!nv) {
        floe__free(v);
        return oom(ps->st, ps->op);
      }
      v = nv;
      floe_code c = parse_shape_text(ps, it, len, &v[count]);
      if (c != FLOE_OK) {
        floe__free(v);
        return c;
      }
      count++;
    }
    p = q < end ? q + 1 : end;
  }
  ad->def.kind = FLOE_ATTR_SHAPE_LIST;
  ad->def.u.slist.v = v;
  ad->def.u.slist.n = count;
  return FLOE_OK;
}

/* The default after '=' (s, n trimmed, n > 0), by kind. */
static floe_code parse_default(SpecParser *ps, FloeAttrDef *ad, const char *s, size_t n) {
  FloeAttrValue *v = &ad->def;
  switch (ad->kind) {
    case FLOE_ATTR_INT:
      if (!parse_int_token(s, n, &v->u.i))
        return spec_fail(ps, "default '%.*s' is not an integer", (int)n, s);
      break;
    case FLOE_ATTR_FLOAT:
      if (!parse_float_token(s, n, &v->u.f))
        return spec_fail(ps, "default '%.*s' is not a number", (int)n, s);
      break;
    case FLOE_ATTR_BOOL:
      if (n == 4 && memcmp(s, "true", 4) == 0)
        v->u.b = 1;
      else if (n == 5 && memcmp(s, "false", 5) == 0)
        v->u.b = 0;
      else
        return spec_fail(ps, "default '%.*s' is not true or false", (int)n, s);
      break;
    case FLOE_ATTR_STRING:
      /* Quoted ("..." or '...') or bare; quotes allow an empty string. */
      if (s[0] == '"' || s[0] == '\'') {
        if (n < 2 || s[n - 1] != s[0] || memchr(s + 1, s[0], n - 2))
          return spec_fail(ps, "unterminated string default %.*s", (int)n, s);
        s++;
        n -= 2;
      }
      v->u.s = floe__strndup(s, n);
      if (!v->u.s) return oom(ps->st, ps->op);
      break;
    case FLOE_ATTR_TYPE: {
      FloeDType dt = dtype_token(s, n);
      if (dt == FLOE_DTYPE_INVALID)
        return spec_fail(ps, "default '%.*s' is not a dtype", (int)n, s);
      if (ad->allowed && !(ad->allowed & FLOE_DTYPE_BIT(dt)))
        return spec_fail(ps, "default dtype %s is not in the allowed set", floe_dtype_name(dt));
      v->u.type = dt;
      break;
    }
    case FLOE_ATTR_SHAPE: {
      floe_code c = parse_shape_text(ps, s, n, &v->u.shape);
      if (c != FLOE_OK) return c;
      break;
    }
    case FLOE_ATTR_SHAPE_LIST:
      return parse_shape_list_default(ps, ad, s, n);
    case FLOE_ATTR_TENSOR:
      return spec_fail(ps, "tensor attributes cannot have a default");
    case FLOE_ATTR_INT_LIST:
    case FLOE_ATTR_FLOAT_LIST:
    case FLOE_ATTR_TYPE_LIST:
      return parse_list_default(ps, ad, s, n);
    default:
      return spec_fail(ps, "internal: unknown attribute kind");
  }
  v->kind = ad->kind;
  return FLOE_OK;
}

static FloeAttrKind kind_from_name(const char *k, const char *elem) {
  if (!elem) {
    if (strcmp(k, "int") == 0) return FLOE_ATTR_INT;
    if (strcmp(k, "float") == 0) return FLOE_ATTR_FLOAT;
    if (strcmp(k, "bool") == 0) return FLOE_ATTR_BOOL;
    if (strcmp(k, "string") == 0) return FLOE_ATTR_STRING;
    if (strcmp(k, "type") == 0) return FLOE_ATTR_TYPE;
    if (strcmp(k, "shape") == 0) return FLOE_ATTR_SHAPE;
    if (strcmp(k, "tensor") == 0) return FLOE_ATTR_TENSOR;
    return FLOE_ATTR_NONE;
  }
  if (strcmp(elem, "int") == 0) return FLOE_ATTR_INT_LIST;
  if (strcmp(elem, "float") == 0) return FLOE_ATTR_FLOAT_LIST;
  if (strcmp(elem, "type") == 0) return FLOE_ATTR_TYPE_LIST;
  if (strcmp(elem, "shape") == 0) return FLOE_ATTR_SHAPE_LIST;
  return FLOE_ATTR_NONE;
}

static size_t list_len(const FloeAttrValue *v) {
  return v->kind == FLOE_ATTR_INT_LIST     ? v->u.ilist.n
         : v->kind == FLOE_ATTR_FLOAT_LIST ? v->u.flist.n
         : v->kind == FLOE_ATTR_SHAPE_LIST ? v->u.slist.n
                                           : v->u.tlist.n;
}

/* "name: kind [>= min] [in {...}] [= default]" into *ad (ad zeroed by the caller). */
static floe_code parse_attr(SpecParser *ps, FloeAttrDef *ad) {
  char name[MAX_IDENT], kind[MAX_IDENT], elem[MAX_IDENT];
  floe_code c;
  if ((c = parse_ident(ps, name, "an attribute name")) != FLOE_OK) return c;
  if ((c = expect_char(ps, ':')) != FLOE_OK) return c;
  if ((c = parse_ident(ps, kind, "an attribute kind")) != FLOE_OK) return c;
  bool is_list = strcmp(kind, "list") == 0;
  if (is_list) {
    if ((c = expect_char(ps, '(')) != FLOE_OK) return c;
    if ((c = parse_ident(ps, elem, "a list element kind")) != FLOE_OK) return c;
    if ((c = expect_char(ps, ')')) != FLOE_OK) return c;
  }
  ad->kind = kind_from_name(kind, is_list ? elem : NULL);
  if (ad->kind == FLOE_ATTR_NONE) {
    if (is_list)
      return spec_fail(ps, "unknown list kind 'list(%s)' (use list(int), list(float), "
                           "list(type) or list(shape))", elem);
    return spec_fail(ps, "unknown attribute kind '%s' (use int, float, bool, string, type, "
                         "shape, tensor or list(...))", kind);
  }

  skip_ws(ps);
  if (ps->p[0] == '>' && ps->p[1] == '=') {
    if (ad->kind != FLOE_ATTR_INT && !is_list)
      return spec_fail(ps, "'>=' applies only to int and list attributes, not %s",
                       floe__attr_kind_name(ad->kind));
    ps->p += 2;
    skip_ws(ps);
    const char *start = ps->p;
    if (*ps->p == '-' || *ps->p == '+') ps->p++;
    while (*ps->p >= '0' && *ps->p <= '9') ps->p++;
    if (!parse_int_token(start, (size_t)(ps->p - start), &ad->min))
      return spec_fail(ps, "expected an integer after '>=' at '%s'", start);
    ad->has_min = true;
    skip_ws(ps);
  }

  if (ps->p[0] == 'i' && ps->p[1] == 'n' && !is_ident_char(ps->p[2])) {
    if (ad->kind != FLOE_ATTR_TYPE && ad->kind != FLOE_ATTR_TYPE_LIST)
      return spec_fail(ps, "'in {...}' applies only to type and list(type) attributes, not %s",
                       floe__attr_kind_name(ad->kind));
    ps->p += 2;
    if ((c = expect_char(ps, '{')) != FLOE_OK) return c;
    const char *close = strchr(ps->p, '}');
    if (!close) return spec_fail(ps, "missing '}' after 'in {'");
    const char *items = ps->p;
    size_t items_n = (size_t)(close - items), count = 0;
    /* Walk the set by hand: each element is a dtype or a set name. */
    const char *s = items, *end = close;
    while (s < end) {
      const char *comma = memchr(s, ',', (size_t)(end - s));
      const char *stop = comma ? comma : end;
      const char *it = s;
      size_t len = (size_t)(stop - s);
      trim(&it, &len);
      uint32_t m = len ? type_set_token(it, len) : 0;
      if (!m)
        return len ? spec_fail(ps, "'%.*s' is neither a dtype nor a type set (float, int, "
                                   "index, numeric, all)", (int)len, it)
                   : spec_fail(ps, "empty element in '{%.*s}'", (int)items_n, items);
      ad->allowed |= m;
      count++;
      s = comma ? comma + 1 : end;
      if (comma && s == end) return spec_fail(ps, "empty element in '{%.*s}'", (int)items_n, items);
    }
    if (count == 0) return spec_fail(ps, "empty type set '{}'");
    ps->p = close + 1;
    skip_ws(ps);
  }

  if (*ps->p == '=') {
    ps->p++;
    const char *s = ps->p;
    size_t n = strlen(s);
    trim(&s, &n);
    if (n == 0) return spec_fail(ps, "missing default value after '='");
    if ((c = parse_default(ps, ad, s, n)) != FLOE_OK) return c;
    ad->has_default = true;
    ps->p += strlen(ps->p);
  }
  skip_ws(ps);
  if (*ps->p) return spec_fail(ps, "unexpected '%s'", ps->p);

  if (ad->has_default && ad->has_min) {
    if (ad->kind == FLOE_ATTR_INT && ad->def.u.i < ad->min)
      return spec_fail(ps, "default %lld is below the minimum %lld", (long long)ad->def.u.i,
                       (long long)ad->min);
    if (is_list && (int64_t)list_len(&ad->def) < ad->min)
      return spec_fail(ps, "default has %zu elements, fewer than the minimum %lld",
                       list_len(&ad->def), (long long)ad->min);
  }
  ad->name = floe__strdup(name);
  if (!ad->name) return oom(ps->st, ps->op);
  return FLOE_OK;
}

static const FloeAttrDef *find_attr(const FloeAttrDef *attrs, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (strcmp(attrs[i].name, name) == 0) return &attrs[i];
  return NULL;
}

/* "name: T" | "name: f32" | "name: N*T" | "name: Tlist" into *arg (zeroed by the caller);
 * the op's attributes are already parsed. */
static floe_code parse_arg(SpecParser *ps, const FloeAttrDef *attrs, int num_attrs,
                           FloeArgDef *arg) {
  char name[MAX_IDENT], first[MAX_IDENT], type[MAX_IDENT];
  floe_code c;
  if ((c = parse_ident(ps, name, "an argument name")) != FLOE_OK) return c;
  if ((c = expect_char(ps, ':')) != FLOE_OK) return c;
  if ((c = parse_ident(ps, first, "a type")) != FLOE_OK) return c;
  skip_ws(ps);
  const char *number = NULL;
  if (*ps->p == '*') {
    ps->p++;
    if ((c = parse_ident(ps, type, "a type after '*'")) != FLOE_OK) return c;
    number = first;
  } else {
    memcpy(type, first, sizeof type);
  }
  skip_ws(ps);
  if (*ps->p) return spec_fail(ps, "unexpected '%s'", ps->p);

  if (number) {
    const FloeAttrDef *na = find_attr(attrs, num_attrs, number);
    if (!na)
      return spec_fail(ps, "list length '%s' is not an attribute of the op (declare '%s: int')",
                       number, number);
    if (na->kind != FLOE_ATTR_INT)
      return spec_fail(ps, "list length '%s' must be an int attribute, not %s", number,
                       floe__attr_kind_name(na->kind));
  }
  /* An attribute of the op wins over a dtype spelled the same. */
  const FloeAttrDef *ta = find_attr(attrs, num_attrs, type);
  FloeDType fixed = FLOE_DTYPE_INVALID;
  if (ta) {
    if (ta->kind == FLOE_ATTR_TYPE_LIST && number)
      return spec_fail(ps, "'%s*%s': a list(type) attribute cannot be repeated by a length",
                       number, type);
    if (ta->kind != FLOE_ATTR_TYPE && ta->kind != FLOE_ATTR_TYPE_LIST)
      return spec_fail(ps, "'%s' is an attribute of kind %s, not a type or list(type)", type,
                       floe__attr_kind_name(ta->kind));
  } else {
    fixed = floe_dtype_from_name(type);
    if (fixed == FLOE_DTYPE_INVALID)
      return spec_fail(ps, "'%s' is neither a dtype nor an attribute of the op (declare "
                           "'%s: type')", type, type);
  }

  arg->fixed = fixed;
  arg->name = floe__strdup(name);
  if (!arg->name) return oom(ps->st, ps->op);
  if (ta && ta->kind == FLOE_ATTR_TYPE_LIST) {
    if (!(arg->type_list_attr = floe__strdup(type))) return oom(ps->st, ps->op);
  } else if (ta) {
    if (!(arg->type_attr = floe__strdup(type))) return oom(ps->st, ps->op);
  }
  if (number && !(arg->number_attr = floe__strdup(number))) return oom(ps->st, ps->op);
  return FLOE_OK;
}

/* ------------------------------------------------------------------------------------ */
/* FloeOpInfo records. */

static void arg_clear(FloeArgDef *a) {
  floe__free(a->name);
  floe__free(a->type_attr);
  floe__free(a->number_attr);
  floe__free(a->type_list_attr);
}

static void op_info_free(FloeOpInfo *op) {
  if (!op) return;
  for (int i = 0; i < op->num_inputs; i++) arg_clear(&op->inputs[i]);
  for (int i = 0; i < op->num_outputs; i++) arg_clear(&op->outputs[i]);
  for (int i = 0; i < op->num_attrs; i++) {
    floe__free(op->attrs[i].name);
    if (op->attrs[i].def.kind != FLOE_ATTR_NONE) floe__attr_value_clear(&op->attrs[i].def);
  }
  floe__free(op->inputs);
  floe__free(op->outputs);
  floe__free(op->attrs);
  floe__free(op->name);
  floe__free(op->doc);
  floe__free(op->plugin);
  floe__free(op);
}

static bool str_eq(const char *a, const char *b) {
  return a == b || (a && b && strcmp(a, b) == 0);
}

static bool args_equal(const FloeArgDef *a, const FloeArgDef *b, int n) {
  for (int i = 0; i < n; i++)
    if (!str_eq(a[i].name, b[i].name) || a[i].fixed != b[i].fixed ||
        !str_eq(a[i].type_attr, b[i].type_attr) || !str_eq(a[i].number_attr, b[i].number_attr) ||
        !str_eq(a[i].type_list_attr, b[i].type_list_attr))
      return false;
  return true;
}

/* Same definition: a second runtime loading the same plugin re-registers its ops. */
static bool op_info_equal(const FloeOpInfo *a, const FloeOpInfo *b) {
  if (a->num_inputs != b->num_inputs || a->num_outputs != b->num_outputs ||
      a->num_attrs != b->num_attrs || a->flags != b->flags || a->shape_fn != b->shape_fn ||
      !str_eq(a->plugin, b->plugin))
    return false;
  if (!args_equal(a->inputs, b->inputs, a->num_inputs) ||
      !args_equal(a->outputs, b->outputs, a->num_outputs))
    return false;
  for (int i = 0; i < a->num_attrs; i++) {
    const FloeAttrDef *x = &a->attrs[i], *y = &b->attrs[i];
    if (strcmp(x->name, y->name) != 0 || x->kind != y->kind || x->has_default != y->has_default ||
        x->has_min != y->has_min || (x->has_min && x->min != y->min) || x->allowed != y->allowed ||
        (x->has_default && !floe__attr_value_equal(&x->def, &y->def)))
      return false;
  }
  return true;
}

/* The k-th name of op over inputs, then outputs, then attributes, with its kind and spec. */
static const char *flat_name(const FloeOpInfo *op, const FloeOpDef *def, int k, const char **what,
                             const char **spec) {
  if (k < op->num_inputs) {
    *what = "input";
    *spec = def->inputs[k];
    return op->inputs[k].name;
  }
  k -= op->num_inputs;
  if (k < op->num_outputs) {
    *what = "output";
    *spec = def->outputs[k];
    return op->outputs[k].name;
  }
  k -= op->num_outputs;
  *what = "attribute";
  *spec = def->attrs[k];
  return op->attrs[k].name;
}

/* Inputs, outputs and attributes share one namespace (graph files and builders name
 * attributes and arguments side by side). */
static floe_code check_unique(const FloeOpInfo *op, const FloeOpDef *def, FloeStatus *st) {
  int total = op->num_inputs + op->num_outputs + op->num_attrs;
  const char *what, *spec, *other_what, *other_spec;
  for (int i = 0; i < total; i++) {
    const char *name = flat_name(op, def, i, &what, &spec);
    for (int j = 0; j < i; j++) {
      if (strcmp(name, flat_name(op, def, j, &other_what, &other_spec)) != 0) continue;
      return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                             "op '%s': %s spec \"%s\": duplicate name '%s', already used by %s "
                             "spec \"%s\" (each input, output and attribute needs its own name)",
                             op->name, what, spec, name, other_what, other_spec);
    }
  }
  return FLOE_OK;
}

static floe_code parse_args(FloeOpInfo *op, const char *const *specs, size_t n, bool inputs,
                            FloeStatus *st) {
  if (n == 0) return FLOE_OK;
  FloeArgDef *args = floe__calloc(n, sizeof *args);
  if (!args) return oom(st, op->name);
  if (inputs) {
    op->inputs = args;
  } else {
    op->outputs = args;
  }
  for (size_t i = 0; i < n; i++) {
    SpecParser ps = {op->name, inputs ? "input" : "output", specs[i] ? specs[i] : "", NULL, st};
    ps.p = ps.spec;
    floe_code c = parse_arg(&ps, op->attrs, op->num_attrs, &args[i]);
    /* Count the slot even on failure: it may hold partly copied strings to free. */
    if (inputs)
      op->num_inputs = (int)i + 1;
    else
      op->num_outputs = (int)i + 1;
    if (c != FLOE_OK) return c;
  }
  return FLOE_OK;
}

/* Parses def into a new record (caller owns), or NULL with st set. */
static FloeOpInfo *op_info_parse(const FloeOpDef *def, const char *plugin, FloeStatus *st) {
  const char *name = def->name;
  if (!valid_ident(name)) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT,
                    "op name '%s' is not an identifier (letters, digits and '_', not starting "
                    "with a digit)", name ? name : "(null)");
    return NULL;
  }
  if ((def->num_inputs && !def->inputs) || (def->num_outputs && !def->outputs) ||
      (def->num_attrs && !def->attrs)) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT,
                    "op '%s': a spec array is NULL while its count is non-zero", name);
    return NULL;
  }
  if (def->num_inputs > INT32_MAX || def->num_outputs > INT32_MAX || def->num_attrs > INT32_MAX) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT, "op '%s': too many specs", name);
    return NULL;
  }
  uint32_t flags = def->flags;
  if (plugin && (flags & ~FLOE_OP_STATEFUL)) {
    floe_status_set(st, FLOE_INVALID_ARGUMENT,
                    "op '%s' of plugin '%s': unknown flags 0x%x (only FLOE_OP_STATEFUL is "
                    "defined)", name, plugin, (unsigned)(flags & ~FLOE_OP_STATEFUL));
    return NULL;
  }
  FloeOpInfo *op = floe__calloc(1, sizeof *op);
  if (!op) goto err_oom;
  op->flags = flags;
  if (!(op->name = floe__strdup(name))) goto err_oom;
  if (plugin && !(op->plugin = floe__strdup(plugin))) goto err_oom;
  if (FLOE_HAS_FIELD(def, FloeOpDef, shape_fn)) op->shape_fn = def->shape_fn;
  if (FLOE_HAS_FIELD(def, FloeOpDef, doc) && def->doc && !(op->doc = floe__strdup(def->doc)))
    goto err_oom;

  /* Attributes first: argument types refer to them. */
  if (def->num_attrs) {
    op->attrs = floe__calloc(def->num_attrs, sizeof *op->attrs);
    if (!op->attrs) goto err_oom;
  }
  for (size_t i = 0; i < def->num_attrs; i++) {
    SpecParser ps = {name, "attribute", def->attrs[i] ? def->attrs[i] : "", NULL, st};
    ps.p = ps.spec;
    floe_code c = parse_attr(&ps, &op->attrs[i]);
    op->num_attrs = (int)i + 1;
    if (c != FLOE_OK) goto err_free_op;
  }
  if (parse_args(op, def->inputs, def->num_inputs, true, st) != FLOE_OK) goto err_free_op;
  if (parse_args(op, def->outputs, def->num_outputs, false, st) != FLOE_OK) goto err_free_op;
  if (check_unique(op, def, st) != FLOE_OK) goto err_free_op;
  return op;

err_oom:
  oom(st, name);
err_free_op:
  op_info_free(op);
  return NULL;
}

/* ------------------------------------------------------------------------------------ */
/* Hash table (callers hold g_lock). */

static uint64_t hash_name(const char *s) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static FloeOpInfo *find_locked(const char *name) {
  if (!g_table_cap) return NULL;
  size_t mask = g_table_cap - 1;
  for (size_t i = hash_name(name) & mask;; i = (i + 1) & mask) {
    int slot = g_table[i];
    if (slot == 0) return NULL;
    if (strcmp(g_ops[slot - 1]->name, name) == 0) return g_ops[slot - 1];
  }
}

static void table_put(int *table, size_t cap, const char *name, int index) {
  size_t mask = cap - 1, i = hash_name(name) & mask;
  while (table[i]) i = (i + 1) & mask;
  table[i] = index + 1;
}

/* Makes room for one more op; leaves everything unchanged on failure. */
static bool reserve_locked(void) {
  if (g_num_ops == g_cap_ops) {
    int cap = g_cap_ops ? g_cap_ops * 2 : 128;
    FloeOpInfo **ops = floe__realloc(g_ops, (size_t)cap * sizeof *ops);
    if (!ops) return false;
    g_ops = ops;
    g_cap_ops = cap;
  }
  if ((size_t)(g_num_ops + 1) * 2 > g_table_cap) {
    size_t cap = g_table_cap ? g_table_cap * 2 : 256;
    int *table = floe__calloc(cap, sizeof *table);
    if (!table) return false;
    for (int i = 0; i < g_num_ops; i++) table_put(table, cap, g_ops[i]->name, i);
    floe__free(g_table);
    g_table = table;
    g_table_cap = cap;
  }
  return true;
}

/* ------------------------------------------------------------------------------------ */
/* Entry points. */

/* Copies everything from def. Ownership: the registry keeps the parsed record until process
 * exit. An identical re-registration by the same plugin (or the standard set) succeeds
 * without change; any other clash is FLOE_ALREADY_EXISTS naming the owner. */
floe_code floe__op_register(const FloeOpDef *def, const char *plugin, FloeStatus *st) {
  if (!def || def->struct_size < offsetof(FloeOpDef, flags) + sizeof def->flags)
    return floe_status_set(st, FLOE_INVALID_ARGUMENT,
                           "op definition is NULL or its struct_size %zu is too small",
                           def ? def->struct_size : (size_t)0);
  /* Plugin ops come after the standard set, so they can never take a standard name. */
  if (plugin) {
    floe_code c = floe__ops_init(st);
    if (c != FLOE_OK) return c;
  }
  FloeOpInfo *op = op_info_parse(def, plugin, st);
  if (!op) return st ? st->code : FLOE_INVALID_ARGUMENT;

  pthread_rwlock_wrlock(&g_lock);
  FloeOpInfo *old = find_locked(op->name);
  if (old) {
    bool same = op_info_equal(old, op);
    pthread_rwlock_unlock(&g_lock);
    floe_code c = FLOE_OK;
    if (!same) {
      if (old->plugin)
        c = floe_status_set(st, FLOE_ALREADY_EXISTS,
                            "op '%s' is already defined by plugin '%s'; rename the op", op->name,
                            old->plugin);
      else
        c = floe_status_set(st, FLOE_ALREADY_EXISTS,
                            "op '%s' is already defined by the standard op set; rename the op",
                            op->name);
    }
    op_info_free(op);
    return c;
  }
  if (!reserve_locked()) {
    pthread_rwlock_unlock(&g_lock);
    floe_status_set(st, FLOE_NO_MEMORY, "out of memory registering op '%s'", op->name);
    op_info_free(op);
    return FLOE_NO_MEMORY;
  }
  g_ops[g_num_ops] = op;
  table_put(g_table, g_table_cap, op->name, g_num_ops);
  g_num_ops++;
  pthread_rwlock_unlock(&g_lock);
  return FLOE_OK;
}

/* Borrowed: the record lives until process exit. */
const FloeOpInfo *floe__op_lookup(const char *name) {
  if (!name) return NULL;
  floe__ops_init(NULL);
  pthread_rwlock_rdlock(&g_lock);
  const FloeOpInfo *op = find_locked(name);
  pthread_rwlock_unlock(&g_lock);
  return op;
}

/* Borrowed from op. */
const FloeAttrDef *floe__op_attr(const FloeOpInfo *op, const char *name) {
  if (!op || !name) return NULL;
  return find_attr(op->attrs, op->num_attrs, name);
}

floe_code floe__ops_init(FloeStatus *st) {
  if (atomic_load_explicit(&g_ready, memory_order_acquire)) return FLOE_OK;
  pthread_mutex_lock(&g_init_mu);
  floe_code c = FLOE_OK;
  if (!atomic_load_explicit(&g_ready, memory_order_relaxed)) {
    c = floe__ops_std_register(st);
    if (c == FLOE_OK) atomic_store_explicit(&g_ready, true, memory_order_release);
  }
  pthread_mutex_unlock(&g_init_mu);
  return c;
}

int floe_op_exists(const char *op) { return floe__op_lookup(op) != NULL; }

int floe_op_count(void) {
  floe__ops_init(NULL);
  pthread_rwlock_rdlock(&g_lock);
  int n = g_num_ops;
  pthread_rwlock_unlock(&g_lock);
  return n;
}

/* Borrowed: lives until process exit. NULL for an index out of range. */
const char *floe_op_name(int i) {
  floe__ops_init(NULL);
  pthread_rwlock_rdlock(&g_lock);
  const char *name = i >= 0 && i < g_num_ops ? g_ops[i]->name : NULL;
  pthread_rwlock_unlock(&g_lock);
  return name;
}

/* ------------------------------------------------------------------------------------ */
/* Public signature queries (floe ops OP). */

int floe_op_num_args(const char *op, int which) {
  const FloeOpInfo *o = floe__op_lookup(op);
  if (!o) return -1;
  switch (which) {
    case FLOE_OP_ARG_INPUT: return o->num_inputs;
    case FLOE_OP_ARG_OUTPUT: return o->num_outputs;
    case FLOE_OP_ARG_ATTR: return o->num_attrs;
    default: return -1;
  }
}

/* Appends like snprintf at buf + *len, keeping *len the length the full text needs. */
static void spec_add(char *buf, size_t cap, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void spec_add(char *buf, size_t cap, size_t *len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(*len < cap ? buf + *len : NULL, *len < cap ? cap - *len : 0, fmt, ap);
  va_end(ap);
  if (n > 0) *len += (size_t)n;
}

int floe_op_arg_spec(const char *op, int which, int i, char *buf, size_t cap) {
  const FloeOpInfo *o = floe__op_lookup(op);
  int n = floe_op_num_args(op, which);
  if (!o || i < 0 || i >= n || (!buf && cap)) return -1;
  if (cap) buf[0] = 0;
  size_t len = 0;
  if (which != FLOE_OP_ARG_ATTR) {
    const FloeArgDef *a = which == FLOE_OP_ARG_INPUT ? &o->inputs[i] : &o->outputs[i];
    spec_add(buf, cap, &len, "%s: ", a->name);
    if (a->number_attr) spec_add(buf, cap, &len, "%s*", a->number_attr);
    if (a->type_list_attr) spec_add(buf, cap, &len, "%s", a->type_list_attr);
    else if (a->type_attr) spec_add(buf, cap, &len, "%s", a->type_attr);
    else spec_add(buf, cap, &len, "%s", floe_dtype_name(a->fixed));
  } else {
    const FloeAttrDef *a = &o->attrs[i];
    spec_add(buf, cap, &len, "%s: %s", a->name, floe__attr_kind_name(a->kind));
    if (a->has_min) spec_add(buf, cap, &len, " >= %lld", (long long)a->min);
    if (a->allowed) {
      spec_add(buf, cap, &len, " in {");
      int first = 1;
      for (int dt = 0; dt < 32; dt++)
        if (a->allowed & FLOE_DTYPE_BIT(dt)) {
          spec_add(buf, cap, &len, "%s%s", first ? "" : ",", floe_dtype_name((FloeDType)dt));
          first = 0;
        }
      spec_add(buf, cap, &len, "}");
    }
    if (a->has_default) {
      char v[256];
      spec_add(buf, cap, &len, " = %s", floe__attr_value_str(&a->def, v, sizeof v));
    }
  }
  return len > INT32_MAX ? INT32_MAX : (int)len;
}

const char *floe_op_doc(const char *op) {
  const FloeOpInfo *o = floe__op_lookup(op);
  if (!o) return NULL;
  return o->doc ? o->doc : "";
}

const char *floe_op_plugin(const char *op) {
  const FloeOpInfo *o = floe__op_lookup(op);
  return o ? o->plugin : NULL;
}
