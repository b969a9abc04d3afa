/* SPDX-License-Identifier: Apache-2.0 */
/* test_checkpoint.c - safetensors checkpoints: exact bytes of a small file, round trips of
 * every dtype, keep-N retention, latest, restore errors (missing variable, wrong shape or
 * dtype), every truncation and many single-byte corruptions (always an error, variables
 * unchanged), a full disk and a crash mid-save (earlier checkpoints intact), a file written
 * by the Python safetensors package, the Save / Restore ops, and frozen graph export.
 *
 * Variables are plain VarHandleOp nodes with "<v>/read" (ReadVariableOp) and "<v>/set"
 * (AssignVariableOp of the Placeholder "<v>/value"), so values of any dtype are set by
 * feeding and checked against bytes made here. */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../ops/harness.h"
#include "floe/floe.h"

static FloeRuntime *rt;
static char tmpdir[256];

static void setup(void) {
  FloeRuntimeOptions o = {.struct_size = sizeof o, .num_threads = 2};
  FloeStatus *st = floe_status_new();
  rt = floe_runtime_new(&o, st);
  ck_assert_msg(rt != NULL, "runtime: %s", floe_status_message(st));
  floe_status_free(st);
  snprintf(tmpdir, sizeof tmpdir, "/tmp/floe_ckpt_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void rm_rf(const char *path) {
  DIR *d = opendir(path);
  if (d) {
    struct dirent *de;
    while ((de = readdir(d))) {
      if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
      char p[1024];
      snprintf(p, sizeof p, "%s/%s", path, de->d_name);
      rm_rf(p);
    }
    closedir(d);
    rmdir(path);
  } else {
    unlink(path);
  }
}

static void teardown(void) {
  rm_rf(tmpdir);
  floe_runtime_free(rt);
}

static char *path_in(const char *sub) {
  static char buf[64][512]; /* rotating: each test uses fewer */
  static int k;
  char *p = buf[k++ % 64];
  snprintf(p, 512, "%s/%s", tmpdir, sub);
  return p;
}

/* ---- a graph of variables ---- */

typedef struct VarSpec {
  const char *name;
  FloeDType dt;
  int rank;
  int64_t dims[4];
} VarSpec;

static void add_var(FloeGraph *g, const VarSpec *v) {
  char n[128];
  FloeShape shape = floe_shape_make(v->rank, v->dims);
  FloeNodeBuilder *b = floe_node_begin(g, "VarHandleOp", v->name);
  floe_node_set_attr_type(b, "dtype", v->dt);
  floe_node_set_attr_shape(b, "shape", shape);
  FloeNode *h = floe_node_finish(b);
  snprintf(n, sizeof n, "%s/read", v->name);
  b = floe_node_begin(g, "ReadVariableOp", n);
  floe_node_add_input(b, floe_out(h, 0));
  floe_node_set_attr_type(b, "dtype", v->dt);
  floe_node_finish(b);
  snprintf(n, sizeof n, "%s/value", v->name);
  FloeOutput val = floe_placeholder(g, n, v->dt, shape);
  snprintf(n, sizeof n, "%s/set", v->name);
  b = floe_node_begin(g, "AssignVariableOp", n);
  floe_node_add_input(b, floe_out(h, 0));
  floe_node_add_input(b, val);
  floe_node_finish(b);
}

static FloeGraph *vars_graph(const VarSpec *vs, int n) {
  FloeGraph *g = floe_graph_new();
  for (int i = 0; i < n; i++) add_var(g, &vs[i]);
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "graph: %s", floe_graph_error(g, NULL));
  return g;
}

static FloeSession *session_new(const FloeGraph *g) { return harness_session(g, rt); }

static int64_t count(const VarSpec *v) {
  int64_t n = 1;
  for (int i = 0; i < v->rank; i++) n *= v->dims[i];
  return n;
}

/* Element i of variable k under `seed`, as the variable's bytes. Distinct seeds give
 * distinct values for every element of every dtype. */
static void fill(const VarSpec *v, int seed, void *out) {
  int64_t n = count(v);
  for (int64_t i = 0; i < n; i++) {
    double x = (double)i * 0.75 - 3.0 + seed * 17.0;
    switch (v->dt) {
      case FLOE_F32: ((float *)out)[i] = (float)x; break;
      case FLOE_F64: ((double *)out)[i] = x / 3.0; break;
      case FLOE_F16: ((uint16_t *)out)[i] = floe_f32_to_f16((float)x); break;
      case FLOE_BF16: ((uint16_t *)out)[i] = floe_f32_to_bf16((float)x); break;
      case FLOE_I8: ((int8_t *)out)[i] = (int8_t)(i * 3 - 60 + seed * 7); break;
      case FLOE_U8: ((uint8_t *)out)[i] = (uint8_t)(i * 5 + seed * 11); break;
      case FLOE_I32: ((int32_t *)out)[i] = (int32_t)(i * 100003 - 7 + seed * 1000); break;
      case FLOE_I64: ((int64_t *)out)[i] = (int64_t)i * 10000000007LL - 5 + seed; break;
      case FLOE_BOOL: ((uint8_t *)out)[i] = (uint8_t)((i + seed) % 2); break;
      default: ck_abort_msg("dtype %d", v->dt);
    }
  }
}

static size_t nbytes(const VarSpec *v) { return (size_t)count(v) * floe_dtype_size(v->dt); }

/* Assigns fill(seed) to every variable. */
static void set_all(FloeSession *s, const VarSpec *vs, int n, int seed) {
  FloeFeed feeds[16];
  const char *targets[16];
  char names[16][128], tnames[16][128];
  FloeTensor *ts[16];
  ck_assert_int_le(n, 16);
  for (int i = 0; i < n; i++) {
    uint8_t *buf = malloc(nbytes(&vs[i]) + 1);
    fill(&vs[i], seed, buf);
    ts[i] = floe_tensor_from_data(vs[i].dt, vs[i].rank, vs[i].dims, buf, nbytes(&vs[i]), NULL);
    free(buf);
    ck_assert_ptr_nonnull(ts[i]);
    snprintf(names[i], sizeof names[i], "%s/value", vs[i].name);
    snprintf(tnames[i], sizeof tnames[i], "%s/set", vs[i].name);
    feeds[i].name = names[i];
    feeds[i].value = ts[i];
    targets[i] = tnames[i];
  }
  FloeStatus *st = floe_status_new();
  floe_code rc = floe_session_run(s, feeds, n, NULL, 0, targets, n, NULL, st);
  ck_assert_msg(rc == FLOE_OK, "set: %s", floe_status_message(st));
  floe_status_free(st);
  for (int i = 0; i < n; i++) floe_tensor_release(ts[i]);
}

/* Fails unless every variable holds fill(seed). */
static void check_all(FloeSession *s, const VarSpec *vs, int n, int seed, const char *what) {
  const char *fetches[16];
  char names[16][128];
  FloeTensor *out[16];
  for (int i = 0; i < n; i++) {
    snprintf(names[i], sizeof names[i], "%s/read", vs[i].name);
    fetches[i] = names[i];
  }
  FloeStatus *st = floe_status_new();
  floe_code rc = floe_session_run(s, NULL, 0, fetches, n, NULL, 0, out, st);
  ck_assert_msg(rc == FLOE_OK, "%s: read: %s", what, floe_status_message(st));
  floe_status_free(st);
  for (int i = 0; i < n; i++) {
    uint8_t *want = malloc(nbytes(&vs[i]) + 1);
    fill(&vs[i], seed, want);
    ck_assert_msg(floe_tensor_dtype(out[i]) == vs[i].dt, "%s: %s dtype", what, vs[i].name);
    ck_assert_msg(floe_tensor_rank(out[i]) == vs[i].rank, "%s: %s rank", what, vs[i].name);
    ck_assert_msg(floe_tensor_nbytes(out[i]) == nbytes(&vs[i]), "%s: %s size", what, vs[i].name);
    ck_assert_msg(nbytes(&vs[i]) == 0 || memcmp(floe_tensor_data(out[i]), want, nbytes(&vs[i])) == 0,
                  "%s: variable '%s' does not hold the values of seed %d", what, vs[i].name, seed);
    free(want);
    floe_tensor_release(out[i]);
  }
}

static void save_ok(FloeSession *s, const char *dir, const char *prefix, int64_t step, int keep) {
  FloeStatus *st = floe_status_new();
  floe_code rc = floe_checkpoint_save(s, dir, prefix, step, keep, NULL, st);
  ck_assert_msg(rc == FLOE_OK, "save step %lld: %s", (long long)step, floe_status_message(st));
  floe_status_free(st);
}

static int64_t restore_ok(FloeSession *s, const char *path) {
  FloeStatus *st = floe_status_new();
  int64_t step = -1;
  floe_code rc = floe_checkpoint_restore(s, path, &step, st);
  ck_assert_msg(rc == FLOE_OK, "restore %s: %s", path, floe_status_message(st));
  floe_status_free(st);
  return step;
}

/* Restores, expecting failure with `code` and a message containing a and b (may be NULL). */
static void restore_fails(FloeSession *s, const char *path, floe_code code, const char *a,
                          const char *b) {
  FloeStatus *st = floe_status_new();
  int64_t step = -77;
  floe_code rc = floe_checkpoint_restore(s, path, &step, st);
  const char *m = floe_status_message(st);
  ck_assert_msg(rc != FLOE_OK, "restore of %s succeeded", path);
  ck_assert_msg(code == FLOE_OK || rc == code, "code %s, want %s: %s", floe_code_name(rc),
                floe_code_name(code), m);
  ck_assert_msg(!a || strstr(m, a), "'%s' not in: %s", a, m);
  ck_assert_msg(!b || strstr(m, b), "'%s' not in: %s", b, m);
  ck_assert_int_eq(step, -77);
  floe_status_free(st);
}

static uint8_t *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc((size_t)n + 1);
  ck_assert_ptr_nonnull(buf);
  ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return buf;
}

static void write_file(const char *path, const void *buf, size_t len) {
  FILE *f = fopen(path, "wb");
  ck_assert_msg(f != NULL, "create %s", path);
  ck_assert_uint_eq(fwrite(buf, 1, len, f), len);
  ck_assert_int_eq(fclose(f), 0);
}

/* Sorted names of the entries of dir (not "." or ".."), joined by spaces. */
static char *listing(const char *dir) {
  static char out[4096];
  char *names[64];
  int n = 0;
  DIR *d = opendir(dir);
  ck_assert_msg(d != NULL, "opendir %s", dir);
  struct dirent *de;
  while ((de = readdir(d)) && n < 64)
    if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) names[n++] = strdup(de->d_name);
  closedir(d);
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++)
      if (strcmp(names[j], names[i]) < 0) {
        char *t = names[i];
        names[i] = names[j];
        names[j] = t;
      }
  out[0] = '\0';
  for (int i = 0; i < n; i++) {
    if (i) strcat(out, " ");
    strcat(out, names[i]);
    free(names[i]);
  }
  return out;
}

/* FNV-1a 64, written here from its definition. */
static uint64_t fnv1a(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
  return h;
}

/* ---- exact bytes ---- */

START_TEST(exact_bytes_of_a_small_checkpoint) {
  const VarSpec vs[] = {{"b", FLOE_I64, 0, {0}}, {"a", FLOE_F32, 1, {2}}};
  FloeGraph *g = vars_graph(vs, 2);
  FloeSession *s = session_new(g);
  const float a[2] = {1.5f, -2.0f};
  const int64_t bval = 7;
  FloeTensor *ta = floe_tensor_from_data(FLOE_F32, 1, vs[1].dims, a, sizeof a, NULL);
  FloeTensor *tb = floe_tensor_from_data(FLOE_I64, 0, NULL, &bval, sizeof bval, NULL);
  FloeFeed feeds[2] = {{"a/value", ta}, {"b/value", tb}};
  const char *targets[2] = {"a/set", "b/set"};
  ck_assert_int_eq(floe_session_run(s, feeds, 2, NULL, 0, targets, 2, NULL, NULL), FLOE_OK);
  char *path = NULL;
  FloeStatus *st = floe_status_new();
  ck_assert_int_eq(floe_checkpoint_save(s, tmpdir, NULL, 3, 0, &path, st), FLOE_OK);
  ck_assert_str_eq(path, path_in("ckpt-0000000003.safetensors"));

  char want[512], hash[17];
  snprintf(hash, sizeof hash, "%016llx", (unsigned long long)fnv1a("a F32 [2]\nb I64 []\n"));
  int n = snprintf(want, sizeof want,
                   "{\"__metadata__\":{\"format\":\"floe\",\"global_step\":\"3\","
                   "\"variables_hash\":\"%s\"},"
                   "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                   "\"b\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[8,16]}}",
                   hash);
  while (n % 8) want[n++] = ' ';
  size_t len;
  uint8_t *f = read_file(path, &len);
  ck_assert_uint_eq(len, 8 + (size_t)n + 16);
  uint64_t hl = 0;
  for (int k = 7; k >= 0; k--) hl = hl << 8 | f[k];
  ck_assert_uint_eq(hl, (uint64_t)n);
  ck_assert_msg(memcmp(f + 8, want, (size_t)n) == 0, "header:\n%.*s\nwant:\n%.*s", n, f + 8, n,
                want);
  /* Data: a's floats then b's int64, little-endian. */
  const uint8_t data[16] = {0x00, 0x00, 0xC0, 0x3F, 0x00, 0x00, 0x00, 0xC0,
                            7,    0,    0,    0,    0,    0,    0,    0};
  ck_assert_mem_eq(f + 8 + n, data, 16);
  free(f);
  free(path);
  floe_status_free(st);
  floe_tensor_release(ta);
  floe_tensor_release(tb);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* ---- round trips ---- */

static const VarSpec all_dtypes[] = {
    {"w_f32", FLOE_F32, 2, {2, 3}},  {"w_f64", FLOE_F64, 1, {5}},
    {"w_f16", FLOE_F16, 3, {2, 1, 3}}, {"w_bf16", FLOE_BF16, 1, {4}},
    {"w_i8", FLOE_I8, 1, {7}},      {"w_u8", FLOE_U8, 2, {3, 3}},
    {"w_i32", FLOE_I32, 0, {0}},    {"w_i64", FLOE_I64, 1, {3}},
    {"w_bool", FLOE_BOOL, 1, {5}},  {"empty", FLOE_F32, 2, {2, 0}},
    {"Zed/x y", FLOE_F32, 1, {2}}, /* sorts first; a name with a space and a slash */
};
#define N_ALL ((int)(sizeof all_dtypes / sizeof all_dtypes[0]))

START_TEST(round_trip_of_every_dtype) {
  FloeGraph *g = vars_graph(all_dtypes, N_ALL);
  FloeSession *s = session_new(g);
  set_all(s, all_dtypes, N_ALL, 1);
  char *path = NULL;
  FloeStatus *st = floe_status_new();
  ck_assert_msg(floe_checkpoint_save(s, tmpdir, "rt", 42, 0, &path, st) == FLOE_OK, "%s",
                floe_status_message(st));
  ck_assert_str_eq(path, path_in("rt-0000000042.safetensors"));
  set_all(s, all_dtypes, N_ALL, 2);
  check_all(s, all_dtypes, N_ALL, 2, "overwritten");
  ck_assert_int_eq(restore_ok(s, path), 42);
  check_all(s, all_dtypes, N_ALL, 1, "restored from the file");
  set_all(s, all_dtypes, N_ALL, 3);
  ck_assert_int_eq(restore_ok(s, tmpdir), 42); /* the directory: its only prefix */
  check_all(s, all_dtypes, N_ALL, 1, "restored from the directory");

  /* The data section holds the values in name order, contiguous. */
  size_t len;
  uint8_t *f = read_file(path, &len);
  uint64_t hl = 0;
  for (int k = 7; k >= 0; k--) hl = hl << 8 | f[k];
  ck_assert_uint_eq(hl % 8, 0);
  int order[N_ALL];
  for (int i = 0; i < N_ALL; i++) order[i] = i;
  for (int i = 0; i < N_ALL; i++)
    for (int j = i + 1; j < N_ALL; j++)
      if (strcmp(all_dtypes[order[j]].name, all_dtypes[order[i]].name) < 0) {
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
      }
  size_t off = 8 + hl, bool_at = 0;
  for (int i = 0; i < N_ALL; i++) {
    const VarSpec *v = &all_dtypes[order[i]];
    uint8_t want[4096];
    fill(v, 1, want);
    ck_assert_uint_le(off + nbytes(v), len);
    ck_assert_msg(memcmp(f + off, want, nbytes(v)) == 0, "data of %s", v->name);
    if (v->dt == FLOE_BOOL) bool_at = off;
    off += nbytes(v);
  }
  ck_assert_uint_eq(off, len);
  /* A bool byte other than 0 or 1 breaks the format: refused with its offset, the
   * variables unchanged. */
  ck_assert_uint_gt(bool_at, 0);
  f[bool_at + 3] = 7;
  write_file(path, f, len);
  set_all(s, all_dtypes, N_ALL, 2);
  restore_fails(s, path, FLOE_DATA_LOSS, "variable 'w_bool': bool element 3 is the byte 7", NULL);
  char where[64];
  snprintf(where, sizeof where, "offset %zu:", bool_at + 3);
  restore_fails(s, path, FLOE_DATA_LOSS, where, NULL);
  check_all(s, all_dtypes, N_ALL, 2, "after a bad bool");
  free(f);
  free(path);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* ---- retention and latest ---- */

static const VarSpec one_var[] = {{"v", FLOE_F32, 1, {4}}};

START_TEST(keep_n_retention) {
  FloeGraph *g = vars_graph(one_var, 1);
  FloeSession *s = session_new(g);
  set_all(s, one_var, 1, 1);
  const char *dir = path_in("run/a/b"); /* created like mkdir -p */
  save_ok(s, dir, "other", 1, 1);
  write_file(path_in("run/a/b/notes.txt"), "x", 1);
  for (int step = 1; step <= 7; step++) save_ok(s, dir, NULL, step, 3);
  ck_assert_str_eq(listing(dir), "ckpt-0000000005.safetensors ckpt-0000000006.safetensors "
                                 "ckpt-0000000007.safetensors notes.txt "
                                 "other-0000000001.safetensors");
  /* An older step saved after newer ones (a restarted run) stays; the oldest others go. */
  save_ok(s, dir, NULL, 2, 3);
  ck_assert_str_eq(listing(dir), "ckpt-0000000002.safetensors ckpt-0000000006.safetensors "
                                 "ckpt-0000000007.safetensors notes.txt "
                                 "other-0000000001.safetensors");
  /* The same step again replaces the file. */
  set_all(s, one_var, 1, 5);
  save_ok(s, dir, NULL, 7, 3);
  ck_assert_str_eq(listing(dir), "ckpt-0000000002.safetensors ckpt-0000000006.safetensors "
                                 "ckpt-0000000007.safetensors notes.txt "
                                 "other-0000000001.safetensors");
  set_all(s, one_var, 1, 6);
  ck_assert_int_eq(restore_ok(s, path_in("run/a/b/ckpt-0000000007.safetensors")), 7);
  check_all(s, one_var, 1, 5, "replaced step 7");
  /* keep 0 keeps everything; keep 1 then leaves only the newest written. */
  for (int step = 10; step <= 12; step++) save_ok(s, dir, NULL, step, 0);
  ck_assert_str_eq(listing(dir), "ckpt-0000000002.safetensors ckpt-0000000006.safetensors "
                                 "ckpt-0000000007.safetensors ckpt-0000000010.safetensors "
                                 "ckpt-0000000011.safetensors ckpt-0000000012.safetensors "
                                 "notes.txt other-0000000001.safetensors");
  save_ok(s, dir, NULL, 13, 1);
  ck_assert_str_eq(listing(dir), "ckpt-0000000013.safetensors notes.txt "
                                 "other-0000000001.safetensors");
  /* Steps past ten digits keep sorting by value. */
  save_ok(s, dir, NULL, 12345678901LL, 2);
  ck_assert_str_eq(listing(dir), "ckpt-0000000013.safetensors ckpt-12345678901.safetensors "
                                 "notes.txt other-0000000001.safetensors");
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

START_TEST(latest_by_step) {
  FloeStatus *st = floe_status_new();
  const char *dir = path_in("lat");
  ck_assert_ptr_null(floe_checkpoint_latest(dir, NULL, st));
  ck_assert_int_eq(floe_status_code(st), FLOE_NOT_FOUND);
  ck_assert_msg(strstr(floe_status_message(st), dir) != NULL, "%s", floe_status_message(st));
  mkdir(dir, 0755);
  ck_assert_ptr_null(floe_checkpoint_latest(dir, NULL, st));
  ck_assert_int_eq(floe_status_code(st), FLOE_NOT_FOUND);
  ck_assert_msg(strstr(floe_status_message(st), dir) != NULL, "%s", floe_status_message(st));

  FloeGraph *g = vars_graph(one_var, 1);
  FloeSession *s = session_new(g);
  set_all(s, one_var, 1, 1);
  save_ok(s, dir, NULL, 100, 0);
  save_ok(s, dir, NULL, 10, 0);
  save_ok(s, dir, NULL, 9, 0);
  save_ok(s, dir, "best", 50, 0);
  /* Not checkpoints: too few digits, a temporary file, another suffix. */
  write_file(path_in("lat/ckpt-999.safetensors"), "x", 1);
  write_file(path_in("lat/.ckpt-0000000500.safetensors.tmp.1.0"), "x", 1);
  write_file(path_in("lat/ckpt-0000000600.safetensors.bak"), "x", 1);
  /* Newest by step, not by time: make step 9 the most recently modified. */
  struct timeval tv[2];
  gettimeofday(&tv[0], NULL);
  tv[0].tv_sec += 1000;
  tv[1] = tv[0];
  ck_assert_int_eq(utimes(path_in("lat/ckpt-0000000009.safetensors"), tv), 0);
  char *p = floe_checkpoint_latest(dir, NULL, st);
  ck_assert_msg(p != NULL, "%s", floe_status_message(st));
  ck_assert_str_eq(p, path_in("lat/ckpt-0000000100.safetensors"));
  free(p);
  p = floe_checkpoint_latest(dir, "best", st);
  ck_assert_str_eq(p, path_in("lat/best-0000000050.safetensors"));
  free(p);
  ck_assert_ptr_null(floe_checkpoint_latest(dir, "nope", st));
  ck_assert_int_eq(floe_status_code(st), FLOE_NOT_FOUND);
  ck_assert_ptr_null(floe_checkpoint_latest(dir, "a/b", st));
  ck_assert_int_eq(floe_status_code(st), FLOE_INVALID_ARGUMENT);
  /* A directory restores its newest "ckpt" checkpoint even beside other prefixes. */
  ck_assert_int_eq(restore_ok(s, dir), 100);
  floe_session_free(s);
  floe_graph_free(g);
  floe_status_free(st);
}
END_TEST

START_TEST(directory_with_several_prefixes) {
  FloeGraph *g = vars_graph(one_var, 1);
  FloeSession *s = session_new(g);
  set_all(s, one_var, 1, 1);
  const char *dir = path_in("mixed");
  restore_fails(s, dir, FLOE_NOT_FOUND, dir, NULL);
  save_ok(s, dir, "alpha", 5, 0);
  save_ok(s, dir, "alpha", 6, 0);
  ck_assert_int_eq(restore_ok(s, dir), 6); /* one prefix: its newest */
  save_ok(s, dir, "beta", 9, 0);
  restore_fails(s, dir, FLOE_INVALID_ARGUMENT, "alpha", "beta");
  save_ok(s, dir, NULL, 1, 0);
  ck_assert_int_eq(restore_ok(s, dir), 1); /* "ckpt" wins */
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* ---- save errors ---- */

START_TEST(save_errors) {
  const VarSpec vs[] = {{"first", FLOE_F32, 1, {2}}, {"second", FLOE_F32, 1, {2}},
                        {"third", FLOE_F32, 1, {2}}};
  FloeGraph *g = vars_graph(vs, 3);
  FloeSession *s = session_new(g);
  set_all(s, vs, 1, 1); /* only "first" */
  FloeStatus *st = floe_status_new();
  const char *dir = path_in("errs");
  ck_assert_int_eq(floe_checkpoint_save(s, dir, NULL, 1, 0, NULL, st), FLOE_FAILED_PRECONDITION);
  ck_assert_msg(strstr(floe_status_message(st), "'second'") != NULL, "%s",
                floe_status_message(st));
  set_all(s, vs, 3, 1);
  ck_assert_int_eq(floe_checkpoint_save(s, dir, "a/b", 1, 0, NULL, st), FLOE_INVALID_ARGUMENT);
  ck_assert_int_eq(floe_checkpoint_save(s, dir, ".hidden", 1, 0, NULL, st), FLOE_INVALID_ARGUMENT);
  ck_assert_int_eq(floe_checkpoint_save(s, dir, NULL, -1, 0, NULL, st), FLOE_INVALID_ARGUMENT);
  ck_assert_int_eq(floe_checkpoint_save(s, dir, NULL, 1, -1, NULL, st), FLOE_INVALID_ARGUMENT);
  write_file(path_in("afile"), "x", 1);
  ck_assert_int_ne(floe_checkpoint_save(s, path_in("afile"), NULL, 1, 0, NULL, st), FLOE_OK);
  ck_assert_msg(strstr(floe_status_message(st), "afile") != NULL, "%s", floe_status_message(st));
  /* A directory under a regular file: ENOTDIR, a bad argument like every file API's. */
  ck_assert_int_eq(floe_checkpoint_save(s, path_in("afile/sub"), NULL, 1, 0, NULL, st),
                   FLOE_INVALID_ARGUMENT);
  ck_assert_msg(strstr(floe_status_message(st), strerror(ENOTDIR)) != NULL, "%s",
                floe_status_message(st));
  /* Nothing was written by the failures. */
  struct stat sb;
  ck_assert_msg(stat(dir, &sb) != 0 || strlen(listing(dir)) == 0, "left: %s", listing(dir));
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* ---- restore errors ---- */

static const VarSpec abc[] = {{"a", FLOE_F32, 2, {2, 3}}, {"b", FLOE_I32, 1, {4}},
                              {"c", FLOE_F32, 1, {2}}};

/* Writes a checkpoint of abc (seed 1) at step 5; returns its path (static storage). */
static const char *abc_checkpoint(void) {
  FloeGraph *g = vars_graph(abc, 3);
  FloeSession *s = session_new(g);
  set_all(s, abc, 3, 1);
  save_ok(s, tmpdir, NULL, 5, 0);
  floe_session_free(s);
  floe_graph_free(g);
  return path_in("ckpt-0000000005.safetensors");
}

/* A session over vs, set to seed 9, restoring file: must fail naming a and b, and keep
 * every value. */
static void mismatch(const VarSpec *vs, int n, const char *file, floe_code code, const char *a,
                     const char *b) {
  FloeGraph *g = vars_graph(vs, n);
  FloeSession *s = session_new(g);
  set_all(s, vs, n, 9);
  restore_fails(s, file, code, a, b);
  check_all(s, vs, n, 9, a);
  floe_session_free(s);
  floe_graph_free(g);
}

START_TEST(restore_errors_name_the_variable) {
  const char *file = abc_checkpoint();
  const VarSpec missing[] = {abc[0], abc[1], abc[2], {"d", FLOE_F32, 1, {2}}};
  mismatch(missing, 4, file, FLOE_NOT_FOUND, "variable 'd'", file);
  const VarSpec shape[] = {abc[0], abc[1], {"c", FLOE_F32, 1, {3}}};
  mismatch(shape, 3, file, FLOE_INVALID_ARGUMENT, "variable 'c'", "expected f32 [3]");
  mismatch(shape, 3, file, FLOE_INVALID_ARGUMENT, "variable 'c'", "found F32 [2]");
  const VarSpec rank[] = {{"a", FLOE_F32, 1, {6}}, abc[1], abc[2]};
  mismatch(rank, 3, file, FLOE_INVALID_ARGUMENT, "variable 'a'", "found F32 [2,3]");
  const VarSpec dtype[] = {abc[0], {"b", FLOE_F32, 1, {4}}, abc[2]};
  mismatch(dtype, 3, file, FLOE_INVALID_ARGUMENT, "variable 'b'", "found I32 [4]");
  restore_fails(NULL, file, FLOE_INVALID_ARGUMENT, NULL, NULL);
  /* Extra tensors in the file are ignored. */
  const VarSpec only_c[] = {abc[2]};
  FloeGraph *g = vars_graph(only_c, 1);
  FloeSession *s = session_new(g);
  set_all(s, only_c, 1, 9);
  ck_assert_int_eq(restore_ok(s, file), 5);
  check_all(s, only_c, 1, 1, "subset");
  restore_fails(s, path_in("nonexistent.safetensors"), FLOE_NOT_FOUND, "nonexistent", NULL);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* ---- damaged files ---- */

static const VarSpec small[] = {{"a", FLOE_F32, 1, {3}}, {"b", FLOE_I64, 0, {0}}};

START_TEST(every_truncation_is_an_error) {
  FloeGraph *g = vars_graph(small, 2);
  FloeSession *s = session_new(g);
  set_all(s, small, 2, 1);
  char *path = NULL;
  ck_assert_int_eq(floe_checkpoint_save(s, tmpdir, NULL, 1, 0, &path, NULL), FLOE_OK);
  size_t len;
  uint8_t *f = read_file(path, &len);
  set_all(s, small, 2, 2);
  const char *cut = path_in("cut.safetensors");
  for (size_t n = 0; n < len; n++) {
    write_file(cut, f, n);
    char what[64];
    snprintf(what, sizeof what, "truncated to %zu bytes", n);
    restore_fails(s, cut, FLOE_DATA_LOSS, "cut.safetensors", "offset");
    check_all(s, small, 2, 2, what);
  }
  write_file(cut, f, len);
  ck_assert_int_eq(restore_ok(s, cut), 1);
  check_all(s, small, 2, 1, "whole file");
  /* One byte too many is an error too: it belongs to no tensor. */
  set_all(s, small, 2, 2);
  uint8_t *longer = malloc(len + 1);
  memcpy(longer, f, len);
  longer[len] = 0;
  write_file(cut, longer, len + 1);
  restore_fails(s, cut, FLOE_DATA_LOSS, "belong to none", NULL);
  check_all(s, small, 2, 2, "one byte more");
  free(longer);
  free(f);
  free(path);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* Every byte of the length and the JSON header, replaced by each of several values: an
 * error leaving the variables unchanged, except inside the __metadata__ object, where a
 * change may also be harmless (another step, an unknown key); never a crash, never wrong
 * values. */
START_TEST(header_corruptions_are_errors) {
  FloeGraph *g = vars_graph(small, 2);
  FloeSession *s = session_new(g);
  set_all(s, small, 2, 1);
  char *path = NULL;
  ck_assert_int_eq(floe_checkpoint_save(s, tmpdir, NULL, 1, 0, &path, NULL), FLOE_OK);
  size_t len;
  uint8_t *f = read_file(path, &len);
  uint64_t hl = 0;
  for (int k = 7; k >= 0; k--) hl = hl << 8 | f[k];
  const char *meta = memmem(f + 8, (size_t)hl, "\"__metadata__\":{", 16);
  ck_assert_ptr_nonnull(meta);
  size_t meta_open = (size_t)(meta - (const char *)f) + 15; /* its '{' */
  size_t meta_close = (size_t)((const char *)memchr(f + meta_open, '}', len - meta_open) -
                               (const char *)f);
  const uint8_t values[] = {0x00, '"', '{', ']', ',', '1', '9', 'Z', 0x80, 0xFF};
  const char *bad = path_in("bad.safetensors");
  uint8_t *c = malloc(len);
  int errors = 0, harmless = 0;
  set_all(s, small, 2, 2);
  for (size_t pos = 0; pos < 8 + hl; pos++) {
    for (size_t k = 0; k <= sizeof values; k++) {
      uint8_t v = k < sizeof values ? values[k] : (uint8_t)(f[pos] ^ 0x01);
      if (v == f[pos]) continue;
      memcpy(c, f, len);
      c[pos] = v;
      write_file(bad, c, len);
      FloeStatus *st = floe_status_new();
      int64_t step = -1;
      floe_code rc = floe_checkpoint_restore(s, bad, &step, st);
      char what[96];
      snprintf(what, sizeof what, "byte %zu = 0x%02x (was 0x%02x)", pos, v, f[pos]);
      if (rc != FLOE_OK) {
        errors++;
        ck_assert_msg(strstr(floe_status_message(st), "bad.safetensors") != NULL, "%s: %s",
                      what, floe_status_message(st));
        check_all(s, small, 2, 2, what);
      } else {
        harmless++;
        ck_assert_msg(pos > meta_open && pos < meta_close, "%s was accepted (step %lld)", what,
                      (long long)step);
        check_all(s, small, 2, 1, what);
        set_all(s, small, 2, 2);
      }
      floe_status_free(st);
    }
  }
  ck_assert_int_gt(errors, 1000);
  ck_assert_msg(harmless < errors / 10, "%d harmless, %d errors", harmless, errors);
  free(c);
  free(f);
  free(path);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* Hand-written headers: each a precise error, never a crash. */
START_TEST(hostile_headers) {
  const VarSpec vs[] = {{"a", FLOE_F32, 1, {2}}};
  FloeGraph *g = vars_graph(vs, 1);
  FloeSession *s = session_new(g);
  set_all(s, vs, 1, 1);
  static const struct {
    const char *json;
    size_t data;
    const char *want;
  } cases[] = {
      {"", 0, "does not start"},
      {"[]", 0, "does not start"},
      {"{", 0, "offset 9: expected a tensor name"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", 8, "'}'"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}x", 8, "after the header"},
      {"{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "offset 22: tensor 'a' has unknown dtype"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,9]}}", 9, "needs 8"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "past the data"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "a gap"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
       "\"z\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "offset 62: tensor 'z': data starts at 4"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
       "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16, "twice"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8, "unknown field"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "repeated"},
      {"{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, "offset 9: tensor 'a' lacks its shape"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "non-negative"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[02],\"data_offsets\":[0,8]}}", 8, "offset 37: shape: a number with a leading zero"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8, "integer"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,8]}}", 8, "too large"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,8]}}", 8, "overflows"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 4, "more than 8"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, "[begin, end]"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "negative"},
      {"{\"a\\u0000\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "NUL"},
      {"{\"a\\ud800\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "surrogate"},
      {"{\"a\\q\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "escape"},
      {"{\"a\xc0\xaf\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "UTF-8"},
      {"{\"a\n\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "control byte"},
      {"{\"a", 0, "unterminated"},
      {"{\"__metadata__\":{\"global_step\":\"-1\"},"
       "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "global_step"},
      {"{\"__metadata__\":{\"global_step\":3},"
       "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "a metadata value"},
      {"{\"__metadata__\":{\"variables_hash\":\"0123456789ABCDEF\"},"
       "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "lowercase hex"},
      {"{\"__metadata__\":{\"variables_hash\":\"0123456789abcdef\"},"
       "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "does not match"},
      {"{\"__metadata__\":{},\"__metadata__\":{},"
       "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "repeated"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[[2]],\"data_offsets\":[0,8]}}", 8, "non-negative"},
      {"{\"a\":[]}", 0, "'{'"},
      {"{}", 8, "belong to none"},
  };
  const char *file = path_in("hostile.safetensors");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t jl = strlen(cases[i].json), len = 8 + jl + cases[i].data;
    uint8_t *buf = calloc(1, len);
    for (int k = 0; k < 8; k++) buf[k] = (uint8_t)((uint64_t)jl >> (8 * k));
    memcpy(buf + 8, cases[i].json, jl);
    write_file(file, buf, len);
    free(buf);
    FloeStatus *st = floe_status_new();
    floe_code rc = floe_checkpoint_restore(s, file, NULL, st);
    ck_assert_msg(rc == FLOE_DATA_LOSS, "case %zu (%s): %s %s", i, cases[i].json,
                  floe_code_name(rc), floe_status_message(st));
    ck_assert_msg(strstr(floe_status_message(st), cases[i].want) != NULL,
                  "case %zu: '%s' not in: %s", i, cases[i].want, floe_status_message(st));
    ck_assert_msg(strstr(floe_status_message(st), "offset") != NULL, "case %zu: %s", i,
                  floe_status_message(st));
    floe_status_free(st);
  }
  /* Header lengths beyond the file or the 100 MB limit. */
  uint8_t huge[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, '{', '}'};
  write_file(file, huge, sizeof huge);
  restore_fails(s, file, FLOE_DATA_LOSS, "limit", "offset 0");
  uint8_t past[16] = {100, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
  write_file(file, past, sizeof past);
  restore_fails(s, file, FLOE_DATA_LOSS, "past the end", "offset 0");
  /* A well-formed file with no tensors at all (header "{}"; sorting its empty table passed
   * NULL to qsort, which UBSan reports): the variables it lacks are named. */
  uint8_t none[10] = {2, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
  write_file(file, none, sizeof none);
  restore_fails(s, file, FLOE_OK, "'a'", NULL);
  check_all(s, vs, 1, 1, "after hostile headers");
  /* Valid but unusual: whitespace, escapes, no metadata, other dtypes as extra tensors. */
  const char *ok = "{ \"a\" : {\"shape\":[ 2 ],\"data_offsets\":[0, 8],\"dtype\":\"F32\"} ,"
                   "\"\\u00e9t\\u00e9\\ud83d\\ude00\":{\"dtype\":\"U16\",\"shape\":[1],"
                   "\"data_offsets\":[8,10]}}\t\n ";
  size_t jl = strlen(ok);
  uint8_t buf[512] = {0};
  for (int k = 0; k < 8; k++) buf[k] = (uint8_t)((uint64_t)jl >> (8 * k));
  memcpy(buf + 8, ok, jl);
  const float want[2] = {0.5f, 4.0f};
  memcpy(buf + 8 + jl, want, 8);
  write_file(file, buf, 8 + jl + 10);
  ck_assert_int_eq(restore_ok(s, file), 0);
  FloeTensor *out;
  const char *fetch = "a/read";
  ck_assert_int_eq(floe_session_run(s, NULL, 0, &fetch, 1, NULL, 0, &out, NULL), FLOE_OK);
  ck_assert_mem_eq(floe_tensor_data(out), want, 8);
  floe_tensor_release(out);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* A file written by the Python safetensors package (0.8, numpy), not by Floe:
 *   save_file({"w": np.array([[1, 2], [3, 4]], np.float32),
 *              "steps": np.array([5, 6, 7], np.int16)}, path)
 * "steps" (I16) is not a Floe dtype: as an extra tensor it is ignored. */
static const uint8_t python_file[] = {
    0x78, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x7b, 0x22, 0x77, 0x22,
    0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22, 0x46,
    0x33, 0x32, 0x22, 0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a,
    0x5b, 0x32, 0x2c, 0x32, 0x5d, 0x2c, 0x22, 0x64, 0x61, 0x74, 0x61, 0x5f,
    0x6f, 0x66, 0x66, 0x73, 0x65, 0x74, 0x73, 0x22, 0x3a, 0x5b, 0x30, 0x2c,
    0x31, 0x36, 0x5d, 0x7d, 0x2c, 0x22, 0x73, 0x74, 0x65, 0x70, 0x73, 0x22,
    0x3a, 0x7b, 0x22, 0x64, 0x74, 0x79, 0x70, 0x65, 0x22, 0x3a, 0x22, 0x49,
    0x31, 0x36, 0x22, 0x2c, 0x22, 0x73, 0x68, 0x61, 0x70, 0x65, 0x22, 0x3a,
    0x5b, 0x33, 0x5d, 0x2c, 0x22, 0x64, 0x61, 0x74, 0x61, 0x5f, 0x6f, 0x66,
    0x66, 0x73, 0x65, 0x74, 0x73, 0x22, 0x3a, 0x5b, 0x31, 0x36, 0x2c, 0x32,
    0x32, 0x5d, 0x7d, 0x7d, 0x20, 0x20, 0x20, 0x20, 0x00, 0x00, 0x80, 0x3f,
    0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x40, 0x40, 0x00, 0x00, 0x80, 0x40,
    0x05, 0x00, 0x06, 0x00, 0x07, 0x00,
};

START_TEST(file_written_by_python_safetensors) {
  const VarSpec vs[] = {{"w", FLOE_F32, 2, {2, 2}}};
  FloeGraph *g = vars_graph(vs, 1);
  FloeSession *s = session_new(g);
  set_all(s, vs, 1, 1);
  const char *file = path_in("py.safetensors");
  write_file(file, python_file, sizeof python_file);
  ck_assert_int_eq(restore_ok(s, file), 0); /* no metadata: step 0 */
  FloeTensor *out;
  const char *fetch = "w/read";
  ck_assert_int_eq(floe_session_run(s, NULL, 0, &fetch, 1, NULL, 0, &out, NULL), FLOE_OK);
  const float want[4] = {1, 2, 3, 4};
  ck_assert_mem_eq(floe_tensor_data(out), want, sizeof want);
  floe_tensor_release(out);
  const VarSpec as_i16[] = {{"steps", FLOE_I32, 1, {3}}};
  FloeGraph *g2 = vars_graph(as_i16, 1);
  FloeSession *s2 = session_new(g2);
  set_all(s2, as_i16, 1, 1);
  restore_fails(s2, file, FLOE_INVALID_ARGUMENT, "variable 'steps'", "found I16 [3]");
  floe_session_free(s2);
  floe_graph_free(g2);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* ---- full disk and crashes ---- */

static const VarSpec big[] = {{"big", FLOE_F32, 1, {1000}}, {"small", FLOE_I64, 1, {2}}};

/* A checkpoint of big at step 1 (seed 1) in dir; returns the session (values seed 2). */
static FloeSession *big_session(FloeGraph **g, const char *dir) {
  *g = vars_graph(big, 2);
  FloeSession *s = session_new(*g);
  set_all(s, big, 2, 1);
  save_ok(s, dir, NULL, 1, 3);
  set_all(s, big, 2, 2);
  return s;
}

START_TEST(full_disk_leaves_earlier_checkpoints) {
  FloeGraph *g;
  const char *dir = path_in("full");
  FloeSession *s = big_session(&g, dir);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    /* Files may not grow past 1 KiB (ulimit -f), and SIGXFSZ keeps its default action: the
     * save must find the limit before writing (it used to die of the signal mid-write,
     * with no message and its temporary file left behind). */
    struct rlimit rl = {1024, 1024};
    signal(SIGXFSZ, SIG_DFL);
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(10);
    FloeStatus *st = floe_status_new();
    floe_code rc = floe_checkpoint_save(s, dir, NULL, 2, 1, NULL, st);
    if (rc == FLOE_OK) _exit(11);
    if (rc != FLOE_RESOURCE_EXHAUSTED) _exit(12);
    if (!strstr(floe_status_message(st), "ckpt-0000000002.safetensors")) _exit(13);
    if (!strstr(floe_status_message(st), "file-size limit of 1024 bytes (ulimit -f)")) _exit(14);
    if (!strstr(floe_status_message(st), "earlier checkpoints are unchanged")) _exit(15);
    floe_status_free(st); /* for valgrind's leak check at the child's exit */
    floe_session_free(s);
    floe_graph_free(g);
    _exit(0);
  }
  int ws;
  ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
  ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "child: status 0x%x", ws);
  ck_assert_str_eq(listing(dir), "ckpt-0000000001.safetensors"); /* no temporary file */
  ck_assert_int_eq(restore_ok(s, dir), 1);
  check_all(s, big, 2, 1, "after a full disk");
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* kill -9 while saving: the child saves an 8 MB checkpoint over and over (keep 2); the
 * parent kills it 2 to 23 ms after the first save begins (a save's write and fsync take
 * about that long here). Wherever the kill lands, the newest checkpoint the folder names is complete,
 * a temporary file left behind is never taken for a checkpoint, and saving goes on. */
static const VarSpec huge[] = {{"huge", FLOE_F32, 1, {2 << 20}}, {"small", FLOE_I64, 1, {2}}};

START_TEST(crash_mid_save_leaves_earlier_checkpoints) {
  const char *dir = path_in("crash");
  FloeGraph *g = vars_graph(huge, 2);
  FloeSession *s = session_new(g);
  set_all(s, huge, 2, 1);
  save_ok(s, dir, NULL, 1, 2);
  for (int round = 0; round < 4; round++) {
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      for (int64_t step = 100 * (round + 1);; step++) {
        if (write(fds[1], "s", 1) != 1) _exit(10);
        floe_checkpoint_save(s, dir, NULL, step, 2, NULL, NULL);
      }
    }
    close(fds[1]);
    char c;
    ck_assert_int_eq(read(fds[0], &c, 1), 1); /* the first save has begun */
    usleep(2000 + 7000 * (useconds_t)round);
    kill(pid, SIGKILL);
    int ws;
    ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
    close(fds[0]);
    ck_assert_msg(WIFSIGNALED(ws) && WTERMSIG(ws) == SIGKILL, "child: status 0x%x", ws);
    char *latest = floe_checkpoint_latest(dir, NULL, NULL);
    ck_assert_ptr_nonnull(latest);
    ck_assert_msg(strstr(latest, ".tmp.") == NULL, "a temporary file was taken: %s", latest);
    set_all(s, huge, 2, 2);
    ck_assert_int_ge(restore_ok(s, latest), 1); /* complete: every variable restored */
    check_all(s, huge, 2, 1, "after a kill mid-save");
    free(latest);
  }
  save_ok(s, dir, NULL, 9999, 2);
  char *latest = floe_checkpoint_latest(dir, NULL, NULL);
  ck_assert_str_eq(latest, path_in("crash/ckpt-0000009999.safetensors"));
  free(latest);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* The Nth allocation fails, for N = 1, 2, ... until the call succeeds: each failure is a
 * clean error that leaves the files (save) or the variables (restore) as they were. */
START_TEST(allocation_failures) {
  FloeGraph *g;
  const char *dir = path_in("oom");
  FloeSession *s = big_session(&g, dir); /* step 1 holds seed 1; the variables seed 2 */
  FloeStatus *st = floe_status_new();
  long n = 1;
  for (;; n++) {
    floe_test_fail_alloc_after(n);
    floe_code rc = floe_checkpoint_save(s, dir, NULL, 2, 0, NULL, st);
    floe_test_fail_alloc_after(0);
    if (rc == FLOE_OK) break;
    ck_assert_msg(floe_status_message(st)[0] != '\0', "save, allocation %ld: no message", n);
    ck_assert_str_eq(listing(dir), "ckpt-0000000001.safetensors");
  }
  ck_assert_int_gt(n, 3);
  ck_assert_str_eq(listing(dir), "ckpt-0000000001.safetensors ckpt-0000000002.safetensors");
  set_all(s, big, 2, 3);
  const char *file = path_in("oom/ckpt-0000000001.safetensors");
  for (n = 1;; n++) {
    int64_t step = -1;
    floe_test_fail_alloc_after(n);
    floe_code rc = floe_checkpoint_restore(s, file, &step, st);
    floe_test_fail_alloc_after(0);
    if (rc == FLOE_OK) {
      ck_assert_int_eq(step, 1);
      break;
    }
    ck_assert_msg(floe_status_message(st)[0] != '\0', "restore, allocation %ld: no message", n);
    check_all(s, big, 2, 3, "restore under allocation failure");
  }
  ck_assert_int_gt(n, 3);
  check_all(s, big, 2, 1, "restored");
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* ---- Save / Restore ops ---- */

START_TEST(save_and_restore_ops) {
  FloeGraph *g = vars_graph(abc, 3);
  FloeOutput handles[3] = {floe_out(floe_graph_find(g, "a"), 0),
                           floe_out(floe_graph_find(g, "b"), 0),
                           floe_out(floe_graph_find(g, "c"), 0)};
  const char *dir = path_in("ops");
  FloeOutput step = floe_placeholder(g, "step", FLOE_I64, floe_shape_scalar());
  FloeNodeBuilder *b = floe_node_begin(g, "Save", "save");
  floe_node_add_input(b, step);
  floe_node_add_input_list(b, handles, 3);
  floe_node_set_attr_string(b, "dir", dir);
  floe_node_set_attr_string(b, "prefix", "model");
  floe_node_set_attr_int(b, "keep", 2);
  floe_node_finish(b);
  b = floe_node_begin(g, "Restore", "restore");
  floe_node_add_input_list(b, handles, 3);
  floe_node_set_attr_string(b, "path", dir);
  floe_node_finish(b);
  b = floe_node_begin(g, "Restore", "restore_a");
  floe_node_add_input_list(b, handles, 1);
  floe_node_set_attr_string(b, "path", path_in("ops/model-0000000002.safetensors"));
  floe_node_finish(b);
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  FloeSession *s = session_new(g);
  FloeStatus *st = floe_status_new();
  const char *save[] = {"save"};
  for (int k = 1; k <= 3; k++) {
    set_all(s, abc, 3, k);
    FloeTensor *t = floe_tensor_scalar_i64(k, NULL);
    FloeFeed feed = {"step", t};
    ck_assert_msg(floe_session_run(s, &feed, 1, NULL, 0, save, 1, NULL, st) == FLOE_OK, "%s",
                  floe_status_message(st));
    floe_tensor_release(t);
  }
  ck_assert_str_eq(listing(dir), "model-0000000002.safetensors model-0000000003.safetensors");
  set_all(s, abc, 3, 7);
  FloeTensor *out;
  const char *restore[] = {"restore"};
  ck_assert_msg(floe_session_run(s, NULL, 0, restore, 1, NULL, 0, &out, st) == FLOE_OK, "%s",
                floe_status_message(st));
  ck_assert_int_eq(*(const int64_t *)floe_tensor_data(out), 3);
  floe_tensor_release(out);
  check_all(s, abc, 3, 3, "Restore op");
  /* Only the variables given: a from step 2, b and c untouched. */
  const char *restore_a[] = {"restore_a"};
  ck_assert_msg(floe_session_run(s, NULL, 0, restore_a, 1, NULL, 0, &out, st) == FLOE_OK, "%s",
                floe_status_message(st));
  ck_assert_int_eq(*(const int64_t *)floe_tensor_data(out), 2);
  floe_tensor_release(out);
  check_all(s, abc, 1, 2, "Restore op, a");
  check_all(s, abc + 1, 2, 3, "Restore op, b and c");
  /* The op's files are ordinary checkpoints of the graph's variables. */
  set_all(s, abc, 3, 7);
  ck_assert_int_eq(restore_ok(s, path_in("ops/model-0000000002.safetensors")), 2);
  check_all(s, abc, 3, 2, "API restore of an op's file");
  /* A failing Restore op names the node and changes nothing. */
  rm_rf(path_in("ops/model-0000000002.safetensors"));
  ck_assert_int_ne(floe_session_run(s, NULL, 0, restore_a, 1, NULL, 0, &out, st), FLOE_OK);
  ck_assert_msg(strstr(floe_status_message(st), "restore_a") != NULL, "%s",
                floe_status_message(st));
  check_all(s, abc, 3, 2, "after a failed Restore op");
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

/* ---- export ---- */

START_TEST(export_frozen_graph) {
  const VarSpec wb[] = {{"W", FLOE_F32, 2, {3, 2}}, {"bias", FLOE_F32, 1, {2}},
                        {"global_step", FLOE_I64, 0, {0}}};
  FloeGraph *g = vars_graph(wb, 3);
  int64_t xd[2] = {-1, 3};
  FloeOutput x = floe_placeholder(g, "x", FLOE_F32, floe_shape_make(2, xd));
  FloeOutput mm = floe_matmul(g, "mm", x, floe_out(floe_graph_find(g, "W/read"), 0), 0, 0);
  FloeOutput y = floe_binary(g, "Add", "y", mm, floe_out(floe_graph_find(g, "bias/read"), 0));
  floe_unary(g, "Relu", "z", y);
  /* A training-only update hanging off the graph, and an output that needs one. */
  FloeNodeBuilder *b = floe_node_begin(g, "AssignAddVariableOp", "train");
  floe_node_add_input(b, floe_out(floe_graph_find(g, "W"), 0));
  floe_node_add_input(b, floe_out(floe_graph_find(g, "W/read"), 0));
  FloeNode *train = floe_node_finish(b);
  b = floe_node_begin(g, "Identity", "after_train");
  floe_node_add_input(b, y);
  floe_node_add_control_input(b, train);
  floe_node_finish(b);
  FloeSession *s = session_new(g);
  set_all(s, wb, 3, 1);
  const char *tr = "train";
  ck_assert_int_eq(floe_session_run(s, NULL, 0, NULL, 0, &tr, 1, NULL, NULL), FLOE_OK);
  const float xv[6] = {1, 2, 3, -1, 0.5f, 0};
  FloeTensor *xt = floe_tensor_from_data(FLOE_F32, 2, (int64_t[]){2, 3}, xv, sizeof xv, NULL);
  FloeFeed feed = {"x", xt};
  const char *fetch[2] = {"z", "y:0"};
  FloeTensor *want[2];
  ck_assert_int_eq(floe_session_run(s, &feed, 1, fetch, 2, NULL, 0, want, NULL), FLOE_OK);

  FloeStatus *st = floe_status_new();
  const char *file = path_in("frozen.floe");
  ck_assert_msg(floe_export_frozen(s, fetch, 2, file, st) == FLOE_OK, "%s",
                floe_status_message(st));
  FloeGraph *fg = floe_graph_load(file, st);
  ck_assert_msg(fg != NULL, "%s", floe_status_message(st));
  /* Exactly what z and y need; the reads are constants with the trained values. */
  ck_assert_int_eq(floe_graph_num_nodes(fg), 6);
  const char *names[] = {"x", "W/read", "bias/read", "mm", "y", "z"};
  for (int i = 0; i < 6; i++) ck_assert_msg(floe_graph_find(fg, names[i]), "%s", names[i]);
  for (int i = 0; i < floe_graph_num_nodes(fg); i++) {
    const char *op = floe_node_op(floe_graph_node(fg, i));
    ck_assert_msg(strstr(op, "Variable") == NULL && strcmp(op, "VarHandleOp") != 0, "%s", op);
  }
  ck_assert_str_eq(floe_node_op(floe_graph_find(fg, "W/read")), "Const");
  FloeSession *fs = session_new(fg);
  FloeTensor *got[2];
  ck_assert_int_eq(floe_session_run(fs, &feed, 1, fetch, 2, NULL, 0, got, NULL), FLOE_OK);
  for (int i = 0; i < 2; i++) {
    ck_assert_uint_eq(floe_tensor_nbytes(got[i]), floe_tensor_nbytes(want[i]));
    ck_assert_mem_eq(floe_tensor_data(got[i]), floe_tensor_data(want[i]),
                     floe_tensor_nbytes(want[i]));
    floe_tensor_release(got[i]);
  }
  /* The trained W is 2 * seed-1 values: check one output against a plain loop. */
  float w[6], bias[2];
  fill(&wb[0], 1, w);
  fill(&wb[1], 1, bias);
  for (int r = 0; r < 2; r++)
    for (int c = 0; c < 2; c++) {
      float acc = 0;
      for (int k = 0; k < 3; k++) acc += xv[r * 3 + k] * 2 * w[k * 2 + c];
      acc += bias[c];
      float z = ((const float *)floe_tensor_data(want[0]))[r * 2 + c];
      float ref = acc > 0 ? acc : 0;
      ck_assert_msg(z - ref < 1e-4f && ref - z < 1e-4f, "z[%d][%d] = %g, want %g", r, c, z, ref);
    }
  floe_session_free(fs);
  floe_graph_free(fg);

  /* An output that needs a variable update, or an unknown output, cannot be frozen. */
  const char *needs_train = "after_train";
  ck_assert_int_eq(floe_export_frozen(s, &needs_train, 1, file, st), FLOE_FAILED_PRECONDITION);
  ck_assert_msg(strstr(floe_status_message(st), "'train'") != NULL, "%s",
                floe_status_message(st));
  const char *nosuch = "nosuch";
  ck_assert_int_eq(floe_export_frozen(s, &nosuch, 1, file, st), FLOE_NOT_FOUND);
  floe_session_free(s);
  /* An uninitialised variable cannot be frozen: the error names it. */
  s = session_new(g);
  ck_assert_int_eq(floe_export_frozen(s, fetch, 1, file, st), FLOE_FAILED_PRECONDITION);
  ck_assert_msg(strstr(floe_status_message(st), "'W'") != NULL ||
                    strstr(floe_status_message(st), "'bias'") != NULL,
                "%s", floe_status_message(st));
  for (int i = 0; i < 2; i++) floe_tensor_release(want[i]);
  floe_tensor_release(xt);
  floe_status_free(st);
  floe_session_free(s);
  floe_graph_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("checkpoint");
  TCase *tc = tcase_create("format");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, exact_bytes_of_a_small_checkpoint);
  tcase_add_test(tc, round_trip_of_every_dtype);
  tcase_add_test(tc, file_written_by_python_safetensors);
  suite_add_tcase(s, tc);
  tc = tcase_create("files");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, keep_n_retention);
  tcase_add_test(tc, latest_by_step);
  tcase_add_test(tc, directory_with_several_prefixes);
  tcase_add_test(tc, save_errors);
  suite_add_tcase(s, tc);
  tc = tcase_create("restore");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, restore_errors_name_the_variable);
  tcase_add_test(tc, every_truncation_is_an_error);
  tcase_add_test(tc, header_corruptions_are_errors);
  tcase_add_test(tc, hostile_headers);
  suite_add_tcase(s, tc);
  tc = tcase_create("failures");
  tcase_set_timeout(tc, 60);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, full_disk_leaves_earlier_checkpoints);
  tcase_add_test(tc, crash_mid_save_leaves_earlier_checkpoints);
  tcase_add_test(tc, allocation_failures);
  suite_add_tcase(s, tc);
  tc = tcase_create("ops");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, save_and_restore_ops);
  tcase_add_test(tc, export_frozen_graph);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
