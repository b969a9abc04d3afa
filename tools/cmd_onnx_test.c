/* SPDX-License-Identifier: Apache-2.0 */
/* cmd_onnx_test.c - floe onnx-test DIR... [--json]: runs ONNX backend test cases (a folder
 * with model.onnx and test_data_set_N/{input,output}_K.pb) and compares with ONNX's
 * tolerances. Also the loaders floe run and floe graph share for .onnx and .pb files. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <floe/floe_onnx.h>

#include "cli.h"

static const char onnx_test_help[] =
    "Usage: floe onnx-test DIR... [--json] [--verbose]\n"
    "Run ONNX backend test cases. DIR is a case (a folder holding model.onnx and\n"
    "test_data_set_N/ with input_K.pb and output_K.pb) or a folder of cases (searched two\n"
    "levels deep). Outputs are compared with ONNX's tolerances: |got - want| <= atol +\n"
    "rtol * |want|, rtol 1e-3 and atol 1e-7 unless the case's data.json says otherwise.\n"
    "Each case is reported as pass, fail (with the worst element) or unsupported (with\n"
    "what Floe lacks).\n"
    "  --json     one JSON object per case, then a summary object as the last line\n"
    "  --verbose  also print the reason of each failure's first error in full\n";

static int has_suffix(const char *s, const char *suf) {
  size_t n = strlen(s), m = strlen(suf);
  return n >= m && strcmp(s + n - m, suf) == 0;
}

int cli_is_onnx(const char *path) { return has_suffix(path, ".onnx"); }

FloeTensor *cli_load_tensor(const char *path, FloeStatus *st) {
  return has_suffix(path, ".pb") ? floe_tensor_load_onnx_pb(path, st)
                                 : floe_tensor_load_npy(path, st);
}

static int is_dir(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int is_file(const char *p) {
  struct stat sb;
  return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted names of the entries of dir that start with prefix (NULL: any, no dot files). */
static char **list_dir(const char *dir, const char *prefix, int *count) {
  *count = 0;
  DIR *d = opendir(dir);
  if (!d) return NULL;
  char **names = NULL;
  int cap = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    if (prefix && strncmp(e->d_name, prefix, strlen(prefix))) continue;
    if (*count == cap) {
      cap = cap ? cap * 2 : 64;
      char **t = realloc(names, (size_t)cap * sizeof *names);
      if (!t) break;
      names = t;
    }
    names[(*count)++] = strdup(e->d_name);
  }
  closedir(d);
  if (names) qsort(names, (size_t)*count, sizeof *names, cmp_str);
  return names;
}

static void free_list(char **names, int n) {
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
}

/* data.json: a JSON object whose "rtol" and "atol" (finite numbers >= 0) replace the
 * default tolerances; its other members are read and ignored. A file that is not such an
 * object fails the case, naming the byte offset: guessing tolerances would let a case pass
 * on the wrong terms. */
typedef struct JsonIn {
  const char *s;
  size_t n, i;
  const char *err;
} JsonIn;

static void jskip_ws(JsonIn *j) {
  while (j->i < j->n && strchr(" \t\r\n", j->s[j->i])) j->i++;
}

static int jfail(JsonIn *j, const char *why) {
  if (!j->err) j->err = why;
  return 0;
}

/* A string at j->i (its text, without escapes decoded, into out when out is not NULL). */
static int jstring(JsonIn *j, char *out, size_t cap) {
  if (j->i >= j->n || j->s[j->i] != '"') return jfail(j, "a string expected");
  size_t k = 0;
  for (j->i++; j->i < j->n && j->s[j->i] != '"'; j->i++) {
    unsigned char c = (unsigned char)j->s[j->i];
    if (c < 0x20) return jfail(j, "a control character in a string");
    if (c == '\\') {
      if (++j->i >= j->n || !strchr("\"\\/bfnrtu", j->s[j->i])) return jfail(j, "a bad escape");
    }
    if (out && k + 1 < cap) out[k++] = (char)c;
  }
  if (j->i >= j->n) return jfail(j, "an unterminated string");
  j->i++;
  if (out) out[k] = '\0';
  return 1;
}

/* A number in JSON's grammar (no NaN, Infinity, hex or leading '+'). */
static int jnumber(JsonIn *j, double *v) {
  size_t b = j->i;
  if (j->i < j->n && j->s[j->i] == '-') j->i++;
  if (j->i >= j->n || !isdigit((unsigned char)j->s[j->i])) return jfail(j, "a value expected");
  while (j->i < j->n && strchr("0123456789.eE+-", j->s[j->i])) j->i++;
  char buf[64];
  if (j->i - b >= sizeof buf) return jfail(j, "a number too long");
  memcpy(buf, j->s + b, j->i - b);
  buf[j->i - b] = '\0';
  char *end;
  *v = strtod(buf, &end);
  if (*end || !isfinite(*v)) return jfail(j, "a malformed number");
  return 1;
}

static int jvalue(JsonIn *j, int depth, double *num);

static int jcontainer(JsonIn *j, int depth, char close) {
  if (depth > 16) return jfail(j, "nested too deep");
  j->i++;
  jskip_ws(j);
  if (j->i < j->n && j->s[j->i] == close) return j->i++, 1;
  for (;;) {
    jskip_ws(j);
    if (close == '}') {
      if (!jstring(j, NULL, 0)) return 0;
      jskip_ws(j);
      if (j->i >= j->n || j->s[j->i] != ':') return jfail(j, "':' expected");
      j->i++;
    }
    if (!jvalue(j, depth + 1, NULL)) return 0;
    jskip_ws(j);
    if (j->i < j->n && j->s[j->i] == ',') {
      j->i++;
      continue;
    }
    if (j->i < j->n && j->s[j->i] == close) return j->i++, 1;
    return jfail(j, close == '}' ? "',' or '}' expected" : "',' or ']' expected");
  }
}

/* Any value; *num gets a number's value (NAN for other kinds) when num is not NULL. */
static int jvalue(JsonIn *j, int depth, double *num) {
  jskip_ws(j);
  if (num) *num = NAN;
  if (j->i >= j->n) return jfail(j, "a value expected");
  char c = j->s[j->i];
  if (c == '{' || c == '[') return jcontainer(j, depth, c == '{' ? '}' : ']');
  if (c == '"') return jstring(j, NULL, 0);
  static const char *const words[] = {"true", "false", "null"};
  for (int w = 0; w < 3; w++)
    if (!strncmp(j->s + j->i, words[w], strlen(words[w]))) return j->i += strlen(words[w]), 1;
  double v;
  if (!jnumber(j, &v)) return 0;
  if (num) *num = v;
  return 1;
}

/* 1 with *rtol, *atol set (defaults unless data.json gives them); 0 with why filled. */
static int case_tolerances(const char *dir, double *rtol, double *atol, char *why, size_t cap) {
  *rtol = 1e-3;
  *atol = 1e-7;
  char path[4096];
  snprintf(path, sizeof path, "%s/data.json", dir);
  if (!is_file(path)) return 1;
  FILE *f = fopen(path, "r");
  if (!f) {
    snprintf(why, cap, "%.1024s: %s", path, strerror(errno));
    return 0;
  }
  char buf[65536];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  if (n == sizeof buf) {
    snprintf(why, cap, "%.1024s: larger than %zu bytes (a data.json is a small object)", path, n);
    return 0;
  }
  JsonIn j = {buf, n, 0, NULL};
  jskip_ws(&j);
  int ok = j.i < n && buf[j.i] == '{';
  if (!ok) jfail(&j, "not a JSON object");
  if (ok) { /* members one by one, to pick out the tolerances */
    j.i++;
    jskip_ws(&j);
    if (j.i < n && buf[j.i] == '}') {
      j.i++;
    } else {
      for (;;) {
        char key[64];
        jskip_ws(&j);
        if (!(ok = jstring(&j, key, sizeof key))) break;
        jskip_ws(&j);
        if (!(ok = j.i < n && buf[j.i] == ':')) {
          jfail(&j, "':' expected");
          break;
        }
        j.i++;
        double v;
        size_t at = j.i;
        if (!(ok = jvalue(&j, 1, &v))) break;
        if (!strcmp(key, "rtol") || !strcmp(key, "atol")) {
          if (!(ok = isfinite(v) && v >= 0)) {
            j.i = at;
            jfail(&j, "rtol and atol must be finite numbers >= 0");
            break;
          }
          *(key[0] == 'r' ? rtol : atol) = v;
        }
        jskip_ws(&j);
        if (j.i < n && buf[j.i] == ',') {
          j.i++;
          continue;
        }
        if (!(ok = j.i < n && buf[j.i] == '}')) jfail(&j, "',' or '}' expected");
        j.i++;
        break;
      }
    }
  }
  if (ok) {
    jskip_ws(&j);
    if (j.i < n) ok = jfail(&j, "text after the object");
  }
  if (!ok) snprintf(why, cap, "%.1024s: offset %zu: %s", path, j.i, j.err ? j.err : "malformed");
  return ok;
}

static double elem(const FloeTensor *t, int64_t i) {
  const void *d = floe_tensor_data(t);
  switch (floe_tensor_dtype(t)) {
    case FLOE_F32: return ((const float *)d)[i];
    case FLOE_F64: return ((const double *)d)[i];
    case FLOE_F16: return floe_f16_to_f32(((const uint16_t *)d)[i]);
    case FLOE_BF16: return floe_bf16_to_f32(((const uint16_t *)d)[i]);
    case FLOE_I8: return ((const int8_t *)d)[i];
    case FLOE_U8: case FLOE_BOOL: return ((const uint8_t *)d)[i];
    case FLOE_I32: return ((const int32_t *)d)[i];
    case FLOE_I64: return (double)((const int64_t *)d)[i];
    default: return NAN;
  }
}

static int64_t elem_i64(const FloeTensor *t, int64_t i) {
  const void *d = floe_tensor_data(t);
  return floe_tensor_dtype(t) == FLOE_I64 ? ((const int64_t *)d)[i] : (int64_t)elem(t, i);
}

/* Compares got with want; 1 when equal within tolerance, else 0 with why filled. */
static int compare(const FloeTensor *got, const FloeTensor *want, double rtol, double atol,
                   char *why, size_t cap) {
  char gs[160], ws[160];
  FloeShape gsh = floe_tensor_shape(got), wsh = floe_tensor_shape(want);
  floe_shape_str(&gsh, gs, sizeof gs);
  floe_shape_str(&wsh, ws, sizeof ws);
  if (floe_tensor_dtype(got) != floe_tensor_dtype(want)) {
    snprintf(why, cap, "dtype %s, expected %s", floe_dtype_name(floe_tensor_dtype(got)),
             floe_dtype_name(floe_tensor_dtype(want)));
    return 0;
  }
  if (strcmp(gs, ws) != 0) {
    snprintf(why, cap, "shape %s, expected %s", gs, ws);
    return 0;
  }
  FloeDType dt = floe_tensor_dtype(want);
  int is_float = dt == FLOE_F32 || dt == FLOE_F64 || dt == FLOE_F16 || dt == FLOE_BF16;
  int64_t n = floe_tensor_num_elements(want), worst = -1, bad = 0;
  double worst_excess = 0;
  for (int64_t i = 0; i < n; i++) {
    if (!is_float) {
      if (elem_i64(got, i) != elem_i64(want, i)) {
        if (worst < 0) worst = i;
        bad++;
      }
      continue;
    }
    double g = elem(got, i), w = elem(want, i);
    if (isnan(w) && isnan(g)) continue;
    if (isinf(w) && g == w) continue;
    double diff = fabs(g - w), tol = atol + rtol * fabs(w);
    if (!(diff <= tol)) {
      double excess = isnan(diff) ? INFINITY : diff - tol;
      if (worst < 0 || excess > worst_excess) {
        worst = i;
        worst_excess = excess;
      }
      bad++;
    }
  }
  if (!bad) return 1;
  char g[32], e[32];
  if (is_float)
    snprintf(why, cap, "%lld of %lld elements differ; worst [%lld] = %s, expected %s",
             (long long)bad, (long long)n, (long long)worst,
             json_format_double(g, elem(got, worst)), json_format_double(e, elem(want, worst)));
  else
    snprintf(why, cap, "%lld of %lld elements differ; first [%lld] = %lld, expected %lld",
             (long long)bad, (long long)n, (long long)worst, (long long)elem_i64(got, worst),
             (long long)elem_i64(want, worst));
  return 0;
}

typedef enum Verdict { V_PASS, V_FAIL, V_UNSUPPORTED } Verdict;

/* Sequences and optionals are compared part by part (floe_onnx.h): an optional's flag
 * first, and its value only when the expected one holds one; two empty sequences agree
 * whatever their shapes' row length. */
static int compare_value(FloeOnnxKind kind, FloeTensor *const *got, FloeTensor *const *want,
                         double rtol, double atol, char *why, size_t cap) {
  int n = floe_onnx_kind_num_parts(kind);
  if (kind & FLOE_ONNX_OPTIONAL) {
    int g = *(const uint8_t *)floe_tensor_data(got[n - 1]);
    int w = *(const uint8_t *)floe_tensor_data(want[n - 1]);
    if (g != w) {
      snprintf(why, cap, "the optional %s a value, expected %s", g ? "holds" : "lacks",
               w ? "one" : "none");
      return 0;
    }
    if (!w) return 1;
  }
  if (kind & FLOE_ONNX_SEQUENCE) {
    FloeShape gs = floe_tensor_shape(got[1]), ws = floe_tensor_shape(want[1]);
    if (gs.rank == 2 && ws.rank == 2 && gs.dims[0] == 0 && ws.dims[0] == 0) return 1;
    char sub[400];
    if (!compare(got[1], want[1], 0, 0, sub, sizeof sub)) {
      snprintf(why, cap, "element shapes: %s", sub);
      return 0;
    }
  }
  return compare(got[0], want[0], rtol, atol, why, cap);
}

/* Runs one case; fills why for a fail or unsupported verdict. */
static Verdict run_case(const char *dir, char *why, size_t cap) {
  char path[4096];
  double rtol, atol;
  if (!case_tolerances(dir, &rtol, &atol, why, cap)) return V_FAIL;
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  FloeStatus *st = floe_status_new();
  FloeOnnxModel *m = floe_onnx_import_file(path, NULL, st);
  FloeSession *s = NULL;
  Verdict v = V_FAIL;
  int nsets = 0;
  char **sets = NULL;
  if (!m) {
    v = floe_status_code(st) == FLOE_UNIMPLEMENTED ? V_UNSUPPORTED : V_FAIL;
    snprintf(why, cap, "%s", floe_status_message(st));
    goto out;
  }
  FloeSessionOptions so;
  floe_session_options_init(&so);
  s = floe_session_new(floe_onnx_model_graph(m), &so, st);
  if (!s) {
    v = floe_status_code(st) == FLOE_UNIMPLEMENTED ? V_UNSUPPORTED : V_FAIL;
    snprintf(why, cap, "session: %s", floe_status_message(st));
    goto out;
  }
  sets = list_dir(dir, "test_data_set_", &nsets);
  if (nsets == 0) {
    snprintf(why, cap, "no test_data_set_N folder");
    goto out;
  }
  int nin = floe_onnx_model_num_inputs(m), nout = floe_onnx_model_num_outputs(m);
  v = V_PASS;
  for (int k = 0; k < nsets && v == V_PASS; k++) {
    /* Up to 3 tensors per value (a sequence's or optional's parts). */
    FloeFeed *feeds = calloc((size_t)nin * 3 + 1, sizeof *feeds);
    FloeTensor **outs = calloc((size_t)nout * 3 + 1, sizeof *outs);
    const char **fetches = calloc((size_t)nout * 3 + 1, sizeof *fetches);
    int nfeed = 0, nfetch = 0;
    for (int i = 0; i < nin; i++) {
      snprintf(path, sizeof path, "%s/%s/input_%d.pb", dir, sets[k], i);
      if (!is_file(path)) break; /* optional inputs left out */
      FloeOnnxKind kind = floe_onnx_model_input_kind(m, i);
      FloeTensor *parts[3] = {NULL, NULL, NULL};
      if (floe_onnx_load_value_pb(path, kind, floe_onnx_model_input_dtype(m, i), parts, st) !=
          FLOE_OK) {
        v = floe_status_code(st) == FLOE_UNIMPLEMENTED ? V_UNSUPPORTED : V_FAIL;
        snprintf(why, cap, "%s", floe_status_message(st));
        break;
      }
      for (int p = 0; p < floe_onnx_kind_num_parts(kind); p++) {
        feeds[nfeed].name = floe_onnx_model_input_part(m, i, p);
        feeds[nfeed++].value = parts[p];
      }
    }
    for (int i = 0; i < nout; i++)
      for (int p = 0; p < floe_onnx_kind_num_parts(floe_onnx_model_output_kind(m, i)); p++)
        fetches[nfetch++] = floe_onnx_model_output_part(m, i, p);
    if (v == V_PASS) {
      FloeRunOptions ro;
      floe_run_options_init(&ro);
      ro.timeout_ms = 120000;
      if (floe_session_run_opts(s, &ro, feeds, nfeed, fetches, nfetch, NULL, 0, outs, st) !=
          FLOE_OK) {
        v = floe_status_code(st) == FLOE_UNIMPLEMENTED ? V_UNSUPPORTED : V_FAIL;
        snprintf(why, cap, "%s: %s", sets[k], floe_status_message(st));
      }
    }
    for (int i = 0, at = 0; v == V_PASS && i < nout; i++) {
      snprintf(path, sizeof path, "%s/%s/output_%d.pb", dir, sets[k], i);
      FloeOnnxKind kind = floe_onnx_model_output_kind(m, i);
      FloeTensor *want[3] = {NULL, NULL, NULL};
      if (floe_onnx_load_value_pb(path, kind, floe_onnx_model_output_dtype(m, i), want, st) !=
          FLOE_OK) {
        v = floe_status_code(st) == FLOE_UNIMPLEMENTED ? V_UNSUPPORTED : V_FAIL;
        snprintf(why, cap, "%s", floe_status_message(st));
        break;
      }
      char diff[512];
      if (!compare_value(kind, outs + at, want, rtol, atol, diff, sizeof diff)) {
        v = V_FAIL;
        snprintf(why, cap, "%s: output %d '%s': %s", sets[k], i, floe_onnx_model_output_name(m, i),
                 diff);
      }
      at += floe_onnx_kind_num_parts(kind);
      for (int p = 0; p < 3; p++) floe_tensor_release(want[p]);
    }
    for (int i = 0; i < nfeed; i++) floe_tensor_release(feeds[i].value);
    for (int i = 0; i < nfetch; i++) floe_tensor_release(outs[i]);
    free(feeds);
    free(outs);
    free(fetches);
  }
out:
  free_list(sets, nsets);
  floe_session_free(s);
  floe_onnx_model_free(m);
  floe_status_free(st);
  return v;
}

typedef struct Tally {
  int total, passed, failed, unsupported;
} Tally;

static void report(const char *dir, Verdict v, const char *why, int json, Tally *t) {
  static const char *const names[] = {"pass", "fail", "unsupported"};
  t->total++;
  if (v == V_PASS) t->passed++;
  else if (v == V_FAIL) t->failed++;
  else t->unsupported++;
  /* The case's name: its last two path components (suite/case). */
  const char *name = dir + strlen(dir);
  int slashes = 0;
  while (name > dir && !(name[-1] == '/' && ++slashes == 2)) name--;
  if (json) {
    JsonWriter w;
    json_init(&w, stdout);
    json_begin_object(&w);
    json_key(&w, "case"), json_string(&w, name);
    json_key(&w, "result"), json_string(&w, names[v]);
    if (v != V_PASS) json_key(&w, "reason"), json_string(&w, why);
    json_end_object(&w);
    json_finish(&w);
  } else if (v == V_PASS) {
    printf("pass         %s\n", name);
  } else {
    printf("%-12s %s: %s\n", names[v], name, why);
  }
  fflush(stdout);
}

static void run_tree(const char *dir, int depth, int json, Tally *t) {
  char path[4096];
  snprintf(path, sizeof path, "%s/model.onnx", dir);
  if (is_file(path)) {
    char why[2048] = "";
    Verdict v = run_case(dir, why, sizeof why);
    report(dir, v, why, json, t);
    return;
  }
  if (depth >= 2) return;
  int n;
  char **names = list_dir(dir, NULL, &n);
  for (int i = 0; i < n; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    if (is_dir(path)) run_tree(path, depth + 1, json, t);
  }
  free_list(names, n);
}

int cmd_onnx_test(int argc, char **argv) {
  static const struct option opts[] = {{"json", no_argument, NULL, 'j'},
                                       {"verbose", no_argument, NULL, 'v'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  int json = 0, c;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":jvh", opts, NULL)) != -1) {
    switch (c) {
      case 'j': json = 1; break;
      case 'v': break;
      case 'h': printf("%s", onnx_test_help); return 0;
      default: return cli_bad_option("onnx-test", c, argv, opts);
    }
  }
  if (optind >= argc) return cli_usage("onnx-test", "expected one or more DIR");
  if (!cli_runtime("onnx-test")) return 1;
  Tally t = {0};
  for (int i = optind; i < argc; i++) {
    if (!is_dir(argv[i])) return cli_error("onnx-test", "'%s' is not a folder", argv[i]);
    size_t len = strlen(argv[i]);
    while (len > 1 && argv[i][len - 1] == '/') argv[i][--len] = '\0';
    run_tree(argv[i], 0, json, &t);
  }
  if (t.total == 0) return cli_error("onnx-test", "no test case (a folder with model.onnx) found");
  if (json) {
    JsonWriter w;
    json_init(&w, stdout);
    json_begin_object(&w);
    json_key(&w, "total"), json_int(&w, t.total);
    json_key(&w, "passed"), json_int(&w, t.passed);
    json_key(&w, "failed"), json_int(&w, t.failed);
    json_key(&w, "unsupported"), json_int(&w, t.unsupported);
    json_key(&w, "pass_rate"), json_double(&w, (double)t.passed / t.total);
    json_end_object(&w);
    json_finish(&w);
  } else {
    printf("%d cases: %d passed (%.1f%%), %d failed, %d unsupported\n", t.total, t.passed,
           100.0 * t.passed / t.total, t.failed, t.unsupported);
  }
  return t.failed ? 1 : 0;
}
