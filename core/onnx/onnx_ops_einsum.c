/* SPDX-License-Identifier: Apache-2.0 */
/* onnx_ops_einsum.c - ONNX Einsum as Floe ops: each operand's repeated labels become
 * diagonals (a Gather of the flattened pair of dims), labels no one else needs are summed
 * out, and operands are combined left to right: float operands of known shape by one
 * BatchMatMul (batch labels kept, contracted and free labels each merged into one dim),
 * others by a broadcasting Mul and a Sum. A final Transpose gives the output's order. */
#include <string.h>

#include "onnx_internal.h"

/* Labels: a-z are 0-25, A-Z 26-51, the dims of "..." 52 onwards (right-aligned across
 * operands, as NumPy broadcasts them). */
#define ELL0 52
#define NUM_LABELS (ELL0 + FLOE_MAX_DIMS)
#define MAX_OPERANDS 32

typedef struct Term {
  int n;
  int lab[FLOE_MAX_DIMS];
} Term;

static int label_of(char ch) {
  if (ch >= 'a' && ch <= 'z') return ch - 'a';
  if (ch >= 'A' && ch <= 'Z') return 26 + ch - 'A';
  return -1;
}

static char char_of(int l) { return (char)(l < 26 ? 'a' + l : 'A' + l - 26); }

/* Parses one term of s[0..len): letters and at most one "...", standing for e dims (the
 * last e of the E dims "..." has in all). Counts the letters in *letters (e < 0: only count).
 * An input's term must cover its rank; the output's may leave "..." out (its dims are then
 * summed). */
static floe_code parse_term(OxCtx *c, const char *s, int len, int e, int E, int is_output,
                            Term *t, int *letters) {
  int k = 0, ell = 0;
  t->n = 0;
  if (letters) *letters = 0;
  for (int i = 0; i < len; i++) {
    if (s[i] == '.') {
      if (ell || i + 2 >= len || s[i + 1] != '.' || s[i + 2] != '.')
        return ox_fail(c, FLOE_INVALID_ARGUMENT, "malformed '...' in equation term '%.*s'", len, s);
      ell = 1;
      i += 2;
      for (int j = 0; e > 0 && j < e; j++) {
        if (t->n == FLOE_MAX_DIMS) goto too_many;
        t->lab[t->n++] = ELL0 + E - e + j;
      }
      continue;
    }
    int l = label_of(s[i]);
    if (l < 0)
      return ox_fail(c, FLOE_INVALID_ARGUMENT, "equation term '%.*s' has the character '%c'", len,
                     s, s[i]);
    k++;
    if (e < 0) continue;
    if (t->n == FLOE_MAX_DIMS) goto too_many;
    t->lab[t->n++] = l;
  }
  if (letters) *letters = k;
  if (!is_output && !ell && e > 0)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "term '%.*s' has fewer labels than its operand's rank",
                   len, s);
  return FLOE_OK;
too_many:
  return ox_fail(c, FLOE_UNIMPLEMENTED, "term '%.*s' has more than %d dims", len, s,
                 FLOE_MAX_DIMS);
}

static int has_ellipsis(const char *s, int len) {
  for (int i = 0; i < len; i++)
    if (s[i] == '.') return 1;
  return 0;
}

static int find(const Term *t, int l) {
  for (int i = 0; i < t->n; i++)
    if (t->lab[i] == l) return i;
  return -1;
}

static FloeOutput transpose(OxCtx *c, FloeOutput x, const int64_t *perm, int r) {
  for (int i = 0; i < r; i++)
    if (perm[i] != i) return ox_binary(c, "Transpose", x, ox_const_i64(c, perm, r));
  return x;
}

static FloeOutput reshape(OxCtx *c, FloeOutput x, const int64_t *dims, int r) {
  return ox_binary(c, "Reshape", x, ox_const_i64(c, dims, r));
}

static int all_known(FloeOutput x) {
  FloeShape s = ox_shape(x);
  if (s.rank < 0) return 0;
  for (int i = 0; i < s.rank; i++)
    if (s.dims[i] < 0) return 0;
  return 1;
}

/* Replaces a label repeated in t by the diagonal of its two dims, until none repeats. */
static floe_code diagonals(OxCtx *c, FloeOutput *x, Term *t) {
  for (int p = 0; p < t->n; p++)
    for (int q = p + 1; q < t->n; q++) {
      if (t->lab[p] != t->lab[q]) continue;
      FloeShape s = ox_shape(*x);
      if (!all_known(*x))
        return ox_fail(c, FLOE_UNIMPLEMENTED, "a diagonal ('%c' repeated) of an operand of "
                                              "unknown shape", char_of(t->lab[p]));
      int64_t d = s.dims[p];
      if (s.dims[q] != d)
        return ox_fail(c, FLOE_INVALID_ARGUMENT, "label '%c' has sizes %lld and %lld",
                       char_of(t->lab[p]), (long long)d, (long long)s.dims[q]);
      int64_t perm[FLOE_MAX_DIMS], dims[FLOE_MAX_DIMS];
      Term nt = {0, {0}};
      for (int i = 0; i < t->n; i++)
        if (i != p && i != q) {
          dims[nt.n] = s.dims[i];
          perm[nt.n] = i;
          nt.lab[nt.n++] = t->lab[i];
        }
      perm[nt.n] = p;
      perm[nt.n + 1] = q;
      dims[nt.n] = d * d;
      FloeOutput y = reshape(c, transpose(c, *x, perm, t->n), dims, nt.n + 1);
      int64_t *idx = floe__calloc((size_t)d + 1, sizeof *idx);
      if (!idx) return floe_status_set(c->st, FLOE_NO_MEMORY, "out of memory");
      for (int64_t i = 0; i < d; i++) idx[i] = i * (d + 1);
      FloeNodeBuilder *b = ox_begin(c, "Gather");
      floe_node_add_input(b, y);
      floe_node_add_input(b, ox_const_i64(c, idx, (int)d));
      floe_node_set_attr_int(b, "axis", nt.n);
      floe__free(idx);
      *x = ox_finish(c, b);
      nt.lab[nt.n++] = t->lab[p];
      *t = nt;
      p = -1; /* start over: positions moved */
      break;
    }
  return ox_check(c);
}

/* Sums out the dims of x whose labels are not in `keep`. */
static FloeOutput sum_unneeded(OxCtx *c, FloeOutput x, Term *t, const int *keep) {
  int64_t axes[FLOE_MAX_DIMS];
  int k = 0;
  Term nt = {0, {0}};
  for (int i = 0; i < t->n; i++) {
    if (keep[t->lab[i]])
      nt.lab[nt.n++] = t->lab[i];
    else
      axes[k++] = i;
  }
  if (!k) return x;
  FloeNodeBuilder *b = ox_begin(c, "Sum");
  floe_node_add_input(b, x);
  floe_node_add_input(b, ox_const_i64(c, axes, k));
  *t = nt;
  return ox_finish(c, b);
}

/* Labels of a and b split into batch (both, kept), contracted (both, not kept), left (a
 * only) and right (b only). */
typedef struct Split {
  Term batch, con, left, right;
} Split;

static void split_labels(const Term *a, const Term *b, const int *keep, Split *s) {
  memset(s, 0, sizeof *s);
  for (int i = 0; i < a->n; i++) {
    int l = a->lab[i];
    Term *to = find(b, l) < 0 ? &s->left : keep[l] ? &s->batch : &s->con;
    to->lab[to->n++] = l;
  }
  for (int i = 0; i < b->n; i++)
    if (find(a, b->lab[i]) < 0) s->right.lab[s->right.n++] = b->lab[i];
}

/* x (labels t) transposed to the labels of the lists in order. */
static FloeOutput arrange(OxCtx *c, FloeOutput x, const Term *t, const Term *const *lists,
                          int nl) {
  int64_t perm[FLOE_MAX_DIMS];
  int k = 0;
  for (int i = 0; i < nl; i++)
    for (int j = 0; j < lists[i]->n; j++) perm[k++] = find(t, lists[i]->lab[j]);
  return transpose(c, x, perm, k);
}

static int64_t prod_of(FloeShape s, const Term *t, const Term *part) {
  int64_t p = 1;
  for (int j = 0; j < part->n; j++) p *= s.dims[find(t, part->lab[j])];
  return p;
}

/* a * b summed over the contracted labels by one BatchMatMul; NULL output when the sizes do
 * not allow it (unknown, or a contracted / free label broadcast between them). */
static FloeOutput by_matmul(OxCtx *c, FloeOutput a, const Term *ta, FloeOutput b,
                            const Term *tb, const Split *s) {
  FloeOutput none = {NULL, 0};
  FloeDType dt = ox_dtype(a);
  if ((dt != FLOE_F32 && dt != FLOE_F64 && dt != FLOE_F16 && dt != FLOE_BF16) || !all_known(a) ||
      !all_known(b))
    return none;
  FloeShape sa = ox_shape(a), sb = ox_shape(b);
  for (int j = 0; j < s->con.n; j++)
    if (sa.dims[find(ta, s->con.lab[j])] != sb.dims[find(tb, s->con.lab[j])]) return none;
  const Term *la[3] = {&s->batch, &s->left, &s->con}, *lb[3] = {&s->batch, &s->con, &s->right};
  int64_t L = prod_of(sa, ta, &s->left), K = prod_of(sa, ta, &s->con), R = prod_of(sb, tb, &s->right);
  int64_t da[FLOE_MAX_DIMS + 2], db[FLOE_MAX_DIMS + 2], dout[FLOE_MAX_DIMS];
  int nb = s->batch.n, k = 0;
  for (int j = 0; j < nb; j++) {
    int64_t x = sa.dims[find(ta, s->batch.lab[j])], y = sb.dims[find(tb, s->batch.lab[j])];
    da[j] = x;
    db[j] = y;
    dout[k++] = x == 1 ? y : x;
  }
  for (int j = 0; j < s->left.n; j++) dout[k++] = sa.dims[find(ta, s->left.lab[j])];
  for (int j = 0; j < s->right.n; j++) dout[k++] = sb.dims[find(tb, s->right.lab[j])];
  da[nb] = L, da[nb + 1] = K, db[nb] = K, db[nb + 1] = R;
  FloeOutput a2 = reshape(c, arrange(c, a, ta, la, 3), da, nb + 2);
  FloeOutput b2 = reshape(c, arrange(c, b, tb, lb, 3), db, nb + 2);
  return reshape(c, ox_binary(c, "BatchMatMul", a2, b2), dout, k);
}

/* x (labels t) transposed to the order of u, with size-1 dims for u's labels it lacks. */
static FloeOutput align(OxCtx *c, FloeOutput x, const Term *t, const Term *u) {
  Term have = {0, {0}};
  for (int i = 0; i < u->n; i++)
    if (find(t, u->lab[i]) >= 0) have.lab[have.n++] = u->lab[i];
  const Term *l[1] = {&have};
  x = arrange(c, x, t, l, 1);
  for (int i = 0; i < u->n; i++) {
    if (find(t, u->lab[i]) >= 0) continue;
    FloeNodeBuilder *b = ox_begin(c, "ExpandDims");
    floe_node_add_input(b, x);
    floe_node_set_attr_int(b, "axis", i);
    x = ox_finish(c, b);
  }
  return x;
}

/* a (ta) combined with b (tb): the product summed over labels in both that keep lacks. */
static FloeOutput combine(OxCtx *c, FloeOutput a, const Term *ta, FloeOutput b, const Term *tb,
                          const int *keep, Term *tr) {
  Split s;
  split_labels(ta, tb, keep, &s);
  Term res = s.batch;
  for (int j = 0; j < s.left.n; j++) res.lab[res.n++] = s.left.lab[j];
  for (int j = 0; j < s.right.n; j++) res.lab[res.n++] = s.right.lab[j];
  FloeOutput y = by_matmul(c, a, ta, b, tb, &s);
  if (!y.node) {
    Term u = res;
    for (int j = 0; j < s.con.n; j++) u.lab[u.n++] = s.con.lab[j];
    y = ox_binary(c, "Mul", align(c, a, ta, &u), align(c, b, tb, &u));
    if (s.con.n) {
      int64_t axes[FLOE_MAX_DIMS];
      for (int j = 0; j < s.con.n; j++) axes[j] = res.n + j;
      FloeNodeBuilder *bl = ox_begin(c, "Sum");
      floe_node_add_input(bl, y);
      floe_node_add_input(bl, ox_const_i64(c, axes, s.con.n));
      y = ox_finish(c, bl);
    }
  }
  *tr = res; /* tr may be ta */
  return y;
}

/* The terms of the equation's inputs and its output (implicit: "..." then the letters used
 * once, alphabetically). */
static floe_code parse_equation(OxCtx *c, const char *eq, const FloeOutput *in, int nin,
                                Term *terms, Term *outt) {
  const char *arrow = strstr(eq, "->");
  int lhs_len = arrow ? (int)(arrow - eq) : (int)strlen(eq);
  const char *start[MAX_OPERANDS];
  int len[MAX_OPERANDS], nt = 0, E = 0, e[MAX_OPERANDS];
  for (int i = 0, s = 0; i <= lhs_len; i++)
    if (i == lhs_len || eq[i] == ',') {
      if (nt == MAX_OPERANDS)
        return ox_fail(c, FLOE_UNIMPLEMENTED, "more than %d operands", MAX_OPERANDS);
      start[nt] = eq + s;
      len[nt++] = i - s;
      s = i + 1;
    }
  if (nt != nin)
    return ox_fail(c, FLOE_INVALID_ARGUMENT, "the equation has %d operands, the node %d inputs",
                   nt, nin);
  for (int i = 0; i < nt; i++) {
    int letters, r = ox_rank(c, in[i], "an operand");
    floe_code rc;
    if (r < 0) return floe_status_code(c->st);
    if ((rc = parse_term(c, start[i], len[i], -1, 0, 0, &terms[i], &letters)) != FLOE_OK)
      return rc;
    e[i] = r - letters;
    if (e[i] < 0 || (e[i] > 0 && !has_ellipsis(start[i], len[i])))
      return ox_fail(c, FLOE_INVALID_ARGUMENT, "term '%.*s' does not match operand %d of rank %d",
                     len[i], start[i], i, r);
    if (e[i] > E) E = e[i];
  }
  for (int i = 0; i < nt; i++) {
    floe_code rc = parse_term(c, start[i], len[i], e[i], E, 0, &terms[i], NULL);
    if (rc != FLOE_OK) return rc;
  }
  if (arrow) return parse_term(c, arrow + 2, (int)strlen(arrow + 2), E, E, 1, outt, NULL);
  int count[NUM_LABELS] = {0};
  for (int i = 0; i < nt; i++)
    for (int j = 0; j < terms[i].n; j++) count[terms[i].lab[j]]++;
  outt->n = 0;
  for (int j = 0; j < E; j++) outt->lab[outt->n++] = ELL0 + j;
  for (char ch = 'A'; ch <= 'z'; ch++) { /* ASCII order, as NumPy sorts them */
    int l = label_of(ch);
    if (l >= 0 && count[l] == 1) {
      if (outt->n == FLOE_MAX_DIMS)
        return ox_fail(c, FLOE_UNIMPLEMENTED, "the output has more than %d dims", FLOE_MAX_DIMS);
      outt->lab[outt->n++] = l;
    }
  }
  return FLOE_OK;
}

/* keep[l]: label l is in the output or in an operand after `after`. */
static void needed(const Term *terms, int nt, int after, const Term *outt, int *keep) {
  memset(keep, 0, NUM_LABELS * sizeof *keep);
  for (int j = 0; j < outt->n; j++) keep[outt->lab[j]] = 1;
  for (int i = after + 1; i < nt; i++)
    for (int j = 0; j < terms[i].n; j++) keep[terms[i].lab[j]] = 1;
}

floe_code floe__onnx_map_einsum(OxCtx *c, const Onnx__NodeProto *n, const FloeOutput *in,
                                int nin, FloeOutput *out, int nout) {
  (void)nout;
  char eqbuf[512], eq[512];
  ox_str(n, "equation", "", eqbuf, sizeof eqbuf);
  size_t k = 0;
  for (const char *p = eqbuf; *p; p++)
    if (*p != ' ') eq[k++] = *p;
  eq[k] = '\0';
  if (nin < 1) return ox_fail(c, FLOE_INVALID_ARGUMENT, "Einsum needs at least one input");
  for (int i = 0; i < nin; i++)
    if (!ox_present(in[i])) return ox_fail(c, FLOE_INVALID_ARGUMENT, "input %d is empty", i);
  Term terms[MAX_OPERANDS], outt;
  floe_code rc = parse_equation(c, eq, in, nin, terms, &outt);
  if (rc != FLOE_OK) return rc;
  for (int i = 0; i < outt.n; i++)
    for (int j = 0; j < i; j++)
      if (outt.lab[i] == outt.lab[j])
        return ox_fail(c, FLOE_INVALID_ARGUMENT, "output label '%c' is repeated",
                       char_of(outt.lab[i]));
  FloeOutput v[MAX_OPERANDS];
  int keep[NUM_LABELS], others[NUM_LABELS];
  for (int i = 0; i < nin; i++) {
    v[i] = in[i];
    if ((rc = diagonals(c, &v[i], &terms[i])) != FLOE_OK) return rc;
  }
  /* Labels of one operand that no other operand and not the output has are summed first. */
  for (int i = 0; i < nin; i++) {
    memset(others, 0, sizeof others);
    for (int j = 0; j < outt.n; j++) others[outt.lab[j]] = 1;
    for (int o = 0; o < nin; o++)
      for (int j = 0; o != i && j < terms[o].n; j++) others[terms[o].lab[j]] = 1;
    v[i] = sum_unneeded(c, v[i], &terms[i], others);
  }
  FloeOutput acc = v[0];
  Term tacc = terms[0];
  for (int i = 1; i < nin; i++) {
    needed(terms, nin, i, &outt, keep);
    acc = combine(c, acc, &tacc, v[i], &terms[i], keep, &tacc);
  }
  memset(keep, 0, sizeof keep);
  for (int j = 0; j < outt.n; j++) keep[outt.lab[j]] = 1;
  acc = sum_unneeded(c, acc, &tacc, keep); /* "..." dims an output without "..." drops */
  for (int j = 0; j < outt.n; j++)
    if (find(&tacc, outt.lab[j]) < 0)
      return ox_fail(c, FLOE_INVALID_ARGUMENT, "output label '%c' is in no input",
                     outt.lab[j] < ELL0 ? char_of(outt.lab[j]) : '.');
  int64_t perm[FLOE_MAX_DIMS];
  for (int j = 0; j < outt.n; j++) perm[j] = find(&tacc, outt.lab[j]);
  out[0] = transpose(c, acc, perm, outt.n);
  return ox_check(c);
}
