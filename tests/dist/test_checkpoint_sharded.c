/* SPDX-License-Identifier: Apache-2.0 */
/* test_checkpoint_sharded.c - sharded checkpoints (floe_checkpoint_save_sharded) through the
 * public API:
 *  - one process: the folder holds one shard (localhost-0.safetensors) and the index names
 *    each variable's parts; the parts restore into 1 shard, 2 shards along the other axis,
 *    and a plain variable, values equal to the reference state (made here by formula and
 *    restored from a single-file checkpoint);
 *  - a cluster in this process (chief + 3 ps, local transport): a model whose embedding is
 *    3 shards over 2 ps tasks writes ps-0 and ps-1 files only; it restores into 1 ps / 1
 *    shard, 3 ps / 2 shards and a plain variable on ps 2, equal to the reference;
 *  - the commit: a save stopped (the phase callback) before the shards, after them, after
 *    the temporary index, leaves the previous checkpoint the newest and whole; stopped
 *    after the commit, the new one; the next save removes the uncommitted folder;
 *  - keep-N retention removes index and folder pairs; latest picks the newest step of
 *    either kind (the index at an equal step);
 *  - damage: a truncated, missing or replaced shard file, a truncated or edited index: an
 *    error naming the file (and the offset), and no variable changed;
 *  - (case "python") the files test_checkpoint_torch.sh reads with Python's safetensors. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <check.h>
#include <dirent.h>
#include <floe/floe.h>
#include <floe/floe_dist.h>
#include <floe/floe_train.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dist_ports.h"

#define ROWS 10
#define COLS 4
#define NPS 3

static char g_dir[256];
static char g_path[4096];

/* ---- the model: emb [10, 4] f32 (plain, or shards along an axis), bias [3] f64, step i64 */

typedef struct Layout {
  int shards;            /* 0: emb is a plain variable */
  int axis;
  int nps;               /* 0: one process; else the ps tasks the variables go to */
} Layout;

static void ps_scope(FloeGraph *g, const Layout *l, int k) {
  char dev[64];
  snprintf(dev, sizeof dev, "/job:ps/task:%d", l->nps ? k % l->nps : 0);
  floe_graph_set_device_scope(g, l->nps ? dev : NULL);
}

static FloeGraph *model(const Layout *l) {
  FloeGraph *g = floe_graph_new();
  FloeShape es = floe_shape_make(2, (int64_t[]){ROWS, COLS});
  if (l->shards) {
    /* the shards go round-robin: ps_scope is set per shard by placing them afterwards */
    floe_sharded_variable(g, "emb", FLOE_F32, es, floe_init_zeros(), l->axis, l->shards, 0);
    for (int k = 0; l->nps && k < l->shards; k++) {
      char n[32], dev[64];
      snprintf(n, sizeof n, "emb/part_%d", k);
      snprintf(dev, sizeof dev, "/job:ps/task:%d", k % l->nps);
      FloeStatus *st = floe_status_new();
      ck_assert_msg(floe_node_request_device(floe_graph_find(g, n), dev, st) == FLOE_OK, "%s",
                    floe_status_message(st));
      floe_status_free(st);
    }
  } else {
    ps_scope(g, l, l->nps - 1);
    floe_variable(g, "emb", FLOE_F32, es, floe_init_zeros());
  }
  ps_scope(g, l, 1);
  floe_variable(g, "bias", FLOE_F64, floe_shape_make(1, (int64_t[]){3}), floe_init_zeros());
  ps_scope(g, l, 0);
  floe_variable_untrained(g, "step", FLOE_I64, floe_shape_make(0, NULL), floe_init_zeros());
  floe_graph_set_device_scope(g, NULL);
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  return g;
}

static float emb_at(int seed, int r, int c) { return (float)seed * 100.0f + (float)(r * COLS + c) * 0.5f; }

/* The values of seed, fetched whole: emb (its Concat when sharded), bias, step. */
static void check_state(FloeSession *s, const Layout *l, int seed, const char *what) {
  const char *fetch[3] = {l->shards ? "emb/concat" : "emb/read", "bias/read", "step/read"};
  FloeTensor *got[3] = {NULL, NULL, NULL};
  FloeStatus *st = floe_status_new();
  ck_assert_msg(floe_session_run(s, NULL, 0, fetch, 3, NULL, 0, got, st) == FLOE_OK, "%s: %s",
                what, floe_status_message(st));
  const float *e = floe_tensor_data(got[0]);
  for (int r = 0; r < ROWS; r++)
    for (int c = 0; c < COLS; c++)
      ck_assert_msg(e[r * COLS + c] == emb_at(seed, r, c), "%s: emb[%d][%d] = %g, expected %g",
                    what, r, c, e[r * COLS + c], emb_at(seed, r, c));
  const double *b = floe_tensor_data(got[1]);
  for (int i = 0; i < 3; i++) ck_assert_msg(b[i] == seed - i * 0.25, "%s: bias[%d]", what, i);
  ck_assert_msg(*(const int64_t *)floe_tensor_data(got[2]) == 1000 + seed, "%s: step", what);
  for (int i = 0; i < 3; i++) floe_tensor_release(got[i]);
  floe_status_free(st);
}

/* A single-file checkpoint of state `seed` (plain variables set by feeding): the reference. */
static char *reference(int seed) {
  FloeGraph *g = model(&(Layout){0, 0, 0});
  FloeOutput ph[3] = {
      floe_placeholder(g, "emb/value", FLOE_F32, floe_shape_make(2, (int64_t[]){ROWS, COLS})),
      floe_placeholder(g, "bias/value", FLOE_F64, floe_shape_make(1, (int64_t[]){3})),
      floe_placeholder(g, "step/value", FLOE_I64, floe_shape_make(0, NULL))};
  const char *vars[3] = {"emb", "bias", "step"};
  for (int i = 0; i < 3; i++) {
    char n[32];
    snprintf(n, sizeof n, "%s/set", vars[i]);
    FloeNodeBuilder *b = floe_node_begin(g, "AssignVariableOp", n);
    floe_node_add_input(b, floe_out(floe_graph_find(g, vars[i]), 0));
    floe_node_add_input(b, ph[i]);
    floe_node_finish(b);
  }
  FloeStatus *st = floe_status_new();
  FloeSession *s = floe_session_new(g, NULL, st);
  ck_assert_msg(s != NULL, "%s", floe_status_message(st));
  float e[ROWS * COLS];
  double b[3];
  int64_t step = 1000 + seed;
  for (int r = 0; r < ROWS; r++)
    for (int c = 0; c < COLS; c++) e[r * COLS + c] = emb_at(seed, r, c);
  for (int i = 0; i < 3; i++) b[i] = seed - i * 0.25;
  FloeTensor *t[3] = {floe_tensor_from_data(FLOE_F32, 2, (int64_t[]){ROWS, COLS}, e, sizeof e, st),
                      floe_tensor_from_data(FLOE_F64, 1, (int64_t[]){3}, b, sizeof b, st),
                      floe_tensor_from_data(FLOE_I64, 0, NULL, &step, sizeof step, st)};
  FloeFeed f[3] = {{"emb/value", t[0]}, {"bias/value", t[1]}, {"step/value", t[2]}};
  const char *targets[3] = {"emb/set", "bias/set", "step/set"};
  ck_assert_msg(floe_session_run(s, f, 3, NULL, 0, targets, 3, NULL, st) == FLOE_OK, "%s",
                floe_status_message(st));
  char dir[300], *path = NULL;
  snprintf(dir, sizeof dir, "%s/ref", g_dir);
  char prefix[32];
  snprintf(prefix, sizeof prefix, "ref%d", seed);
  ck_assert_msg(floe_checkpoint_save(s, dir, prefix, seed, 0, &path, st) == FLOE_OK, "%s",
                floe_status_message(st));
  for (int i = 0; i < 3; i++) floe_tensor_release(t[i]);
  floe_session_free(s);
  floe_graph_free(g);
  floe_status_free(st);
  return path;
}

static void restore_ok(FloeSession *s, const char *path) {
  FloeStatus *st = floe_status_new();
  ck_assert_msg(floe_checkpoint_restore(s, path, NULL, st) == FLOE_OK, "restore %s: %s", path,
                floe_status_message(st));
  floe_status_free(st);
}

static char *save_sharded(FloeSession *s, const char *dir, int64_t step, int keep,
                          const FloeCheckpointShardOptions *o, floe_code want) {
  FloeStatus *st = floe_status_new();
  char *index = NULL;
  floe_code rc = floe_checkpoint_save_sharded(s, dir, NULL, step, keep, o, &index, st);
  ck_assert_msg(rc == want, "save_sharded step %lld: %s", (long long)step,
                floe_status_message(st));
  floe_status_free(st);
  return index;
}

static char *dir_in(const char *sub) {
  static char buf[8][300];
  static int k;
  char *p = buf[k++ % 8];
  snprintf(p, 300, "%s/%s", g_dir, sub);
  return p;
}

static char *dir_in_path(const char *dir, const char *sub) {
  static char buf[600];
  snprintf(buf, sizeof buf, "%s/%s", dir, sub);
  return buf;
}

static bool exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}

/* The names in dir, sorted, space-separated. */
static char *listing(const char *dir) {
  static char out[4096];
  char names[64][256];
  int n = 0;
  DIR *d = opendir(dir);
  ck_assert_ptr_nonnull(d);
  struct dirent *de;
  while ((de = readdir(d)) && n < 64)
    if (de->d_name[0] != '.') snprintf(names[n++], 256, "%s", de->d_name);
  closedir(d);
  qsort(names, (size_t)n, sizeof names[0], (int (*)(const void *, const void *))strcmp);
  out[0] = '\0';
  for (int i = 0; i < n; i++) {
    strcat(out, i ? " " : "");
    strcat(out, names[i]);
  }
  return out;
}

typedef struct Cluster Cluster;
static FloeSession *session_of(const Layout *l, Cluster *c);
static FloeSession *local_session(const Layout *l) { return session_of(l, NULL); }

/* A session of layout l holding state seed (restored from its single-file reference). */
static FloeSession *session_at(const Layout *l, int seed) {
  FloeSession *s = local_session(l);
  char *ref = reference(seed);
  restore_ok(s, ref);
  free(ref);
  return s;
}

/* ---- one process ---------------------------------------------------------------------- */

static char *read_text(const char *path) {
  FILE *f = fopen(path, "rb");
  ck_assert_msg(f != NULL, "%s", path);
  static char buf[65536];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

START_TEST(one_process_reshards) {
  char *ref = reference(1);
  Layout three = {3, 0, 0};
  FloeSession *s = local_session(&three);
  restore_ok(s, ref);
  check_state(s, &three, 1, "3 shards from the single file");
  char *index = save_sharded(s, dir_in("one"), 1001, 0, NULL, FLOE_OK);
  ck_assert_str_eq(listing(dir_in("one")), "ckpt-0000001001.index.json ckpt-0000001001.shards");
  ck_assert_str_eq(listing(dir_in("one/ckpt-0000001001.shards")), "localhost-0.safetensors");
  /* the index: HF's weight_map, and the parts of emb in order */
  const char *text = read_text(index);
  ck_assert_msg(strstr(text, "\"emb/part_2\": \"ckpt-0000001001.shards/localhost-0.safetensors\""),
                "%s", text);
  ck_assert_msg(strstr(text, "\"format\": \"floe-sharded\"") &&
                strstr(text, "\"global_step\": \"1001\""), "%s", text);
  const char *p0 = strstr(text, "\"tensor\": \"emb/part_0\""),
             *p2 = strstr(text, "\"tensor\": \"emb/part_2\"");
  ck_assert_msg(p0 && p2 && p0 < p2, "parts out of order: %s", text);
  /* latest finds it; restore into other layouts */
  FloeStatus *st = floe_status_new();
  char *latest = floe_checkpoint_latest(dir_in("one"), NULL, st);
  ck_assert_msg(latest && !strcmp(latest, index), "latest %s, index %s", latest, index);
  free(latest);
  Layout others[3] = {{1, 0, 0}, {2, 1, 0}, {0, 0, 0}};
  for (int i = 0; i < 3; i++) {
    FloeSession *r = local_session(&others[i]);
    int64_t step = -1;
    ck_assert_msg(floe_checkpoint_restore(r, dir_in("one"), &step, st) == FLOE_OK, "%s",
                  floe_status_message(st));
    ck_assert_int_eq(step, 1001);
    char what[64];
    snprintf(what, sizeof what, "into %d shards along axis %d", others[i].shards, others[i].axis);
    check_state(r, &others[i], 1, what);
    floe_session_free(r);
  }
  floe_status_free(st);
  free(index);
  free(ref);
  floe_session_free(s);
}
END_TEST

/* ---- the commit ---------------------------------------------------------------------- */

typedef struct Stop {
  FloeCheckpointPhase at;
  int seen;
} Stop;

static int stop_at(void *arg, FloeCheckpointPhase ph, const char *path) {
  Stop *s = arg;
  ck_assert_ptr_nonnull(path);
  s->seen |= 1 << ph;
  return ph == s->at;
}

START_TEST(a_save_stopped_at_any_phase_leaves_a_whole_checkpoint) {
  char *ref1 = reference(1), *ref2 = reference(2);
  Layout l = {3, 0, 0};
  FloeSession *s = local_session(&l);
  restore_ok(s, ref1);
  const char *dir = dir_in("phases");
  char *first = save_sharded(s, dir, 1, 0, NULL, FLOE_OK);
  restore_ok(s, ref2); /* the state changes; each stopped save tries to write it */
  FloeStatus *st = floe_status_new();
  for (int ph = FLOE_CHECKPOINT_BEFORE_SHARDS; ph <= FLOE_CHECKPOINT_AFTER_COMMIT; ph++) {
    Stop stop = {(FloeCheckpointPhase)ph, 0};
    FloeCheckpointShardOptions o;
    floe_checkpoint_shard_options_init(&o);
    o.phase = stop_at;
    o.phase_arg = &stop;
    char *idx = save_sharded(s, dir, 2, 0, &o, FLOE_CANCELLED);
    ck_assert_ptr_null(idx);
    ck_assert_int_eq(stop.seen, (2 << ph) - 2); /* every phase up to this one, in order */
    char *latest = floe_checkpoint_latest(dir, NULL, st);
    bool committed = ph == FLOE_CHECKPOINT_AFTER_COMMIT;
    ck_assert_msg(latest && strstr(latest, committed ? "ckpt-0000000002.index.json"
                                                     : "ckpt-0000000001.index.json"),
                  "phase %d: latest %s", ph, latest);
    FloeSession *r = local_session(&(Layout){0, 0, 0});
    restore_ok(r, latest);
    char what[64];
    snprintf(what, sizeof what, "stopped at phase %d", ph);
    check_state(r, &(Layout){0, 0, 0}, committed ? 2 : 1, what);
    floe_session_free(r);
    free(latest);
    if (!committed) /* an uncommitted folder stays until the next save */
      ck_assert_msg(exists(dir_in("phases/ckpt-0000000002.shards")), "phase %d", ph);
  }
  /* a committed step saved again: replaced whole */
  restore_ok(s, ref1);
  char *again = save_sharded(s, dir, 2, 0, NULL, FLOE_OK);
  ck_assert_str_eq(listing(dir), "ckpt-0000000001.index.json ckpt-0000000001.shards "
                                 "ckpt-0000000002.index.json ckpt-0000000002.shards");
  FloeSession *r = local_session(&(Layout){0, 0, 0});
  restore_ok(r, again);
  check_state(r, &(Layout){0, 0, 0}, 1, "step 2 saved again");
  floe_session_free(r);
  /* a crashed save's folder (no index) goes with the next save */
  ck_assert_int_eq(mkdir(dir_in("phases/ckpt-0000000007.shards"), 0755), 0);
  free(save_sharded(s, dir, 4, 0, NULL, FLOE_OK));
  ck_assert_msg(!exists(dir_in("phases/ckpt-0000000007.shards")), "leftover folder kept");
  free(again);
  free(first);
  free(ref1);
  free(ref2);
  floe_status_free(st);
  floe_session_free(s);
}
END_TEST

START_TEST(retention_and_latest_across_kinds) {
  Layout l = {2, 0, 0};
  FloeSession *s = session_at(&l, 3);
  const char *dir = dir_in("keep");
  for (int step = 1; step <= 4; step++) free(save_sharded(s, dir, step, 2, NULL, FLOE_OK));
  ck_assert_str_eq(listing(dir), "ckpt-0000000003.index.json ckpt-0000000003.shards "
                                 "ckpt-0000000004.index.json ckpt-0000000004.shards");
  FloeStatus *st = floe_status_new();
  char *single = NULL;
  ck_assert_int_eq(floe_checkpoint_save(s, dir, NULL, 5, 0, &single, st), FLOE_OK);
  char *latest = floe_checkpoint_latest(dir, NULL, st);
  ck_assert_str_eq(latest, single); /* the newest step, whatever its kind */
  free(latest);
  free(save_sharded(s, dir, 5, 0, NULL, FLOE_OK));
  latest = floe_checkpoint_latest(dir, NULL, st);
  ck_assert_msg(strstr(latest, "ckpt-0000000005.index.json"), "%s", latest); /* index wins a tie */
  free(latest);
  /* retention counts both kinds: keep 1 leaves the newest only */
  free(save_sharded(s, dir, 6, 1, NULL, FLOE_OK));
  ck_assert_str_eq(listing(dir), "ckpt-0000000006.index.json ckpt-0000000006.shards");
  free(single);
  floe_status_free(st);
  floe_session_free(s);
}
END_TEST

/* ---- damage ---------------------------------------------------------------------------- */

static void restore_fails(const char *path, const char *a, const char *b) {
  Layout l = {0, 0, 0};
  FloeSession *r = session_at(&l, 5);
  FloeStatus *st = floe_status_new();
  ck_assert_int_ne(floe_checkpoint_restore(r, path, NULL, st), FLOE_OK);
  const char *m = floe_status_message(st);
  ck_assert_msg(strstr(m, a) && (!b || strstr(m, b)), "message '%s' lacks '%s' / '%s'", m, a,
                b ? b : "");
  check_state(r, &l, 5, "after a failed restore"); /* nothing changed */
  floe_status_free(st);
  floe_session_free(r);
}

static void copy_file(const char *from, const char *to, long cut) {
  FILE *f = fopen(from, "rb"), *g = fopen(to, "wb");
  ck_assert(f && g);
  char buf[65536];
  size_t n = fread(buf, 1, sizeof buf, f);
  if (cut >= 0 && (size_t)cut < n) n = (size_t)cut;
  fwrite(buf, 1, n, g);
  fclose(f);
  fclose(g);
}

START_TEST(damaged_checkpoints_are_errors) {
  Layout l = {3, 0, 0};
  FloeSession *s = session_at(&l, 4);
  const char *dir = dir_in("damage");
  char *index = save_sharded(s, dir, 9, 0, NULL, FLOE_OK);
  char shard[400], keep[420];
  snprintf(shard, sizeof shard, "%s/ckpt-0000000009.shards/localhost-0.safetensors", dir);
  snprintf(keep, sizeof keep, "%s.orig", shard);
  copy_file(shard, keep, -1);
  struct stat sb;
  ck_assert_int_eq(stat(shard, &sb), 0);
  /* truncated shard: the index's size says so, naming the file and the offset */
  char off[64];
  snprintf(off, sizeof off, "offset %lld", (long long)sb.st_size - 5);
  copy_file(keep, shard, sb.st_size - 5);
  restore_fails(index, "localhost-0.safetensors", off);
  /* missing */
  unlink(shard);
  restore_fails(index, "localhost-0.safetensors", "cannot be read");
  /* replaced by another save's file of the same size and layout */
  copy_file(keep, shard, -1);
  FloeSession *t = session_at(&l, 4);
  free(save_sharded(t, dir_in("other"), 9, 0, NULL, FLOE_OK));
  char other[400];
  snprintf(other, sizeof other, "%s/ckpt-0000000009.shards/localhost-0.safetensors",
           dir_in("other"));
  copy_file(other, shard, -1);
  restore_fails(index, "localhost-0.safetensors", "of another save");
  copy_file(keep, shard, -1);
  /* corrupt shard header byte (same size): the safetensors reader's offset */
  FILE *f = fopen(shard, "r+b");
  fseek(f, 12, SEEK_SET);
  fputc('#', f);
  fclose(f);
  restore_fails(index, "localhost-0.safetensors", "offset");
  copy_file(keep, shard, -1);
  /* the index truncated: the JSON's offset */
  char idx_keep[4200];
  snprintf(idx_keep, sizeof idx_keep, "%s.orig", index);
  copy_file(index, idx_keep, -1);
  copy_file(idx_keep, index, 200);
  restore_fails(index, "ckpt-0000000009.index.json: offset", NULL);
  /* an edited part offset */
  char *text = read_text(idx_keep);
  char *at = strstr(text, "\"offset\": 4");
  ck_assert_ptr_nonnull(at);
  at[10] = '5';
  FILE *g = fopen(index, "wb");
  fputs(text, g);
  fclose(g);
  restore_fails(index, "variables.\"emb\".parts[1]", NULL);
  /* and the untouched checkpoint still restores */
  copy_file(idx_keep, index, -1);
  unlink(idx_keep);
  unlink(keep);
  FloeSession *r = local_session(&(Layout){2, 1, 0});
  restore_ok(r, index);
  check_state(r, &(Layout){2, 1, 0}, 4, "the whole checkpoint again");
  floe_session_free(r);
  floe_session_free(t);
  floe_session_free(s);
  free(index);
}
END_TEST

/* ---- a cluster in this process ----------------------------------------------------------- */

struct Cluster {
  char json[512];
  FloeRuntime *rt[NPS + 1]; /* the chief, then the ps tasks */
  FloeServer *srv[NPS + 1];
};

static void cluster_stop(Cluster *c) {
  for (int i = 0; i <= NPS; i++) floe_server_free(c->srv[i]);
  for (int i = 0; i <= NPS; i++) floe_runtime_free(c->rt[i]);
}

/* Started again on new ports when one was taken before its server listened
 * (dist_ports.h). */
static void cluster_start(Cluster *c) {
  setenv("FLOE_JOB_SECRET", "test-checkpoint-sharded-secret-0123456789", 1);
  unsetenv("FLOE_JOB_SECRET_FILE");
  FloeStatus *st = floe_status_new();
  for (int attempt = 0;; attempt++) {
    memset(c, 0, sizeof *c);
    int port[NPS + 1];
    dist_free_ports(port, NPS + 1);
    snprintf(c->json, sizeof c->json,
             "{\"cluster\": {\"chief\": [\"127.0.0.1:%d\"], \"ps\": [\"127.0.0.1:%d\", "
             "\"127.0.0.1:%d\", \"127.0.0.1:%d\"]}}", port[0], port[1], port[2], port[3]);
    bool ok = true;
    for (int i = NPS; i >= 0 && ok; i--) { /* the chief last */
      FloeRuntimeOptions ro = {.struct_size = sizeof ro, .plugin_path = g_path};
      c->rt[i] = floe_runtime_new(&ro, st);
      ck_assert_msg(c->rt[i] != NULL, "%s", floe_status_message(st));
      FloeServerOptions o;
      floe_server_options_init(&o);
      o.runtime = c->rt[i];
      o.cluster = c->json;
      o.job = i ? "ps" : "chief";
      o.task = i ? i - 1 : 0;
      ok = (c->srv[i] = floe_server_start(&o, st)) != NULL;
    }
    if (ok) break;
    ck_assert_msg(dist_port_taken(st) && attempt + 1 < DIST_START_ATTEMPTS, "%s",
                  floe_status_message(st));
    cluster_stop(c); /* what was not started is NULL: freeing it is a no-op */
  }
  floe_status_free(st);
}


/* A session of graph g (freed here): of this process (c NULL), or of cluster c. */
static FloeSession *session_for(FloeGraph *g, Cluster *c) {
  FloeSessionOptions so;
  floe_session_options_init(&so);
  if (c) {
    so.runtime = c->rt[0];
    so.cluster = c->json;
    so.cluster_timeout_ms = 20000;
  }
  FloeStatus *st = floe_status_new();
  FloeSession *s = floe_session_new(g, &so, st);
  ck_assert_msg(s != NULL, "%s", floe_status_message(st));
  floe_status_free(st);
  floe_graph_free(g);
  return s;
}

/* A session of layout l: of this process (c NULL), or of cluster c. */
static FloeSession *session_of(const Layout *l, Cluster *c) { return session_for(model(l), c); }

START_TEST(a_cluster_writes_one_file_per_ps_and_reshards) {
  Cluster c;
  cluster_start(&c);
  char *ref = reference(6);
  Layout two = {3, 0, 2}; /* 3 shards over ps 0 and 1; bias on 1, step on 0 */
  FloeSession *s = session_of(&two, &c);
  restore_ok(s, ref);
  check_state(s, &two, 6, "the cluster's state from the single file");
  char *index = save_sharded(s, dir_in("cluster"), 1006, 0, NULL, FLOE_OK);
  ck_assert_str_eq(listing(dir_in("cluster/ckpt-0000001006.shards")),
                   "ps-0.safetensors ps-1.safetensors");
  const char *text = read_text(index);
  ck_assert_msg(strstr(text, "\"emb/part_1\": \"ckpt-0000001006.shards/ps-1.safetensors\"") &&
                strstr(text, "\"emb/part_2\": \"ckpt-0000001006.shards/ps-0.safetensors\"") &&
                strstr(text, "\"step\": \"ckpt-0000001006.shards/ps-0.safetensors\""), "%s", text);
  floe_session_free(s);
  cluster_stop(&c);
  /* a fresh cluster for each layout: a ps keeps its variables across sessions, and these
   * reuse names with other shapes */
  Layout into[3] = {{1, 0, 1}, {2, 0, 3}, {0, 0, 3}};
  for (int i = 0; i < 3; i++) {
    cluster_start(&c);
    FloeSession *r = session_of(&into[i], &c);
    restore_ok(r, index);
    char what[80];
    snprintf(what, sizeof what, "into %d ps, %d shards", into[i].nps, into[i].shards);
    check_state(r, &into[i], 6, what);
    floe_session_free(r);
    cluster_stop(&c);
  }
  /* and into one process */
  FloeSession *one = local_session(&(Layout){0, 0, 0});
  restore_ok(one, index);
  check_state(one, &(Layout){0, 0, 0}, 6, "into one process");
  floe_session_free(one);
  free(index);
  free(ref);
}
END_TEST

/* A single-file checkpoint of a cluster moves every value through the chief in steps whose
 * messages are bounded (64 MiB): 3 variables of 24 MiB on a ps (72 MiB: one step's message
 * would not hold them) are saved and restored, bit for bit against one process restoring the
 * same file; a variable of 65 MiB alone, which no step's message could hold, is restored
 * into the cluster and saved from it, its value crossing through the data plane, bit for
 * bit. */
static FloeSession *big_session(Cluster *c, int n, int64_t floats, int seed) {
  FloeGraph *g = floe_graph_new();
  if (c) floe_graph_set_device_scope(g, "/job:ps/task:0");
  for (int i = 0; i < n; i++) {
    char name[16];
    snprintf(name, sizeof name, "big%d", i);
    floe_variable(g, name, FLOE_F32, floe_shape_make(1, (int64_t[]){floats}),
                  floe_init_uniform(-1, 1, seed + i));
  }
  floe_graph_set_device_scope(g, NULL);
  floe_variables_initializer(g, "init");
  ck_assert_msg(floe_graph_status(g) == FLOE_OK, "%s", floe_graph_error(g, NULL));
  FloeSession *s = session_for(g, c);
  FloeStatus *st = floe_status_new();
  const char *init = "init";
  ck_assert_msg(floe_session_run(s, NULL, 0, NULL, 0, &init, 1, NULL, st) == FLOE_OK, "%s",
                floe_status_message(st));
  floe_status_free(st);
  return s;
}

/* Variable i of a and of b hold the same bytes (read one at a time: 24 MiB a step). */
static void same_big(FloeSession *a, FloeSession *b, int n, const char *what) {
  FloeStatus *st = floe_status_new();
  for (int i = 0; i < n; i++) {
    char name[32];
    snprintf(name, sizeof name, "big%d/read", i);
    const char *fetch = name;
    FloeTensor *x = NULL, *y = NULL;
    ck_assert_msg(floe_session_run(a, NULL, 0, &fetch, 1, NULL, 0, &x, st) == FLOE_OK &&
                  floe_session_run(b, NULL, 0, &fetch, 1, NULL, 0, &y, st) == FLOE_OK, "%s: %s",
                  what, floe_status_message(st));
    ck_assert_msg(floe_tensor_nbytes(x) == floe_tensor_nbytes(y) &&
                  !memcmp(floe_tensor_data(x), floe_tensor_data(y), floe_tensor_nbytes(x)),
                  "%s: big%d differs", what, i);
    floe_tensor_release(x);
    floe_tensor_release(y);
  }
  floe_status_free(st);
}

START_TEST(large_cluster_checkpoints_move_in_bounded_steps) {
  const int64_t f24 = (int64_t)24 << 18; /* 24 MiB of f32 */
  Cluster c;
  cluster_start(&c);
  FloeSession *s = big_session(&c, 3, f24, 11);
  FloeStatus *st = floe_status_new();
  char *path = NULL;
  ck_assert_msg(floe_checkpoint_save(s, dir_in("big"), NULL, 5, 0, &path, st) == FLOE_OK, "%s",
                floe_status_message(st));
  FloeSession *one = big_session(NULL, 3, f24, 99); /* other values until restored */
  restore_ok(one, path);
  same_big(s, one, 3, "the cluster's save against one process's restore");
  floe_session_free(s);
  cluster_stop(&c);
  cluster_start(&c); /* a fresh ps: the values must come from the file */
  FloeSession *r = big_session(&c, 3, f24, 77);
  restore_ok(r, path);
  same_big(r, one, 3, "the cluster's restore");
  floe_session_free(r);
  floe_session_free(one);
  cluster_stop(&c);
  /* one variable past a message (65 MiB: the reply or request of one step could not hold
   * it): its value crosses between the chief and the ps through the data plane, so the
   * cluster's single-file save and its restore both go, bit for bit */
  const int64_t f65 = (int64_t)65 << 18;
  FloeSession *huge_one = big_session(NULL, 1, f65, 5);
  char *huge_path = NULL, *from_cluster = NULL;
  ck_assert_msg(floe_checkpoint_save(huge_one, dir_in("huge1"), NULL, 1, 0, &huge_path, st) ==
                FLOE_OK, "%s", floe_status_message(st));
  cluster_start(&c);
  FloeSession *huge = big_session(&c, 1, f65, 6);
  restore_ok(huge, huge_path);
  same_big(huge, huge_one, 1, "a 65 MiB variable restored into the cluster");
  ck_assert_msg(floe_checkpoint_save(huge, dir_in("huge"), NULL, 2, 0, &from_cluster, st) ==
                FLOE_OK, "a 65 MiB variable saved from the cluster: %s", floe_status_message(st));
  FloeSession *back = big_session(NULL, 1, f65, 7); /* other values until restored */
  restore_ok(back, from_cluster);
  same_big(back, huge_one, 1, "a 65 MiB variable saved from the cluster, restored in one process");
  floe_session_free(back);
  free(from_cluster);
  floe_session_free(huge);
  floe_session_free(huge_one);
  free(huge_path);
  cluster_stop(&c);
  floe_status_free(st);
  free(path);
}
END_TEST

/* For tests/dist/test_checkpoint_torch.sh (CK_RUN_CASE=python): the cluster's checkpoint of
 * state 7 (emb in 3 shards over ps 0 and 1, bias on ps 1, step on ps 0) saved at step 1000 to
 * $FLOE_TEST_CKPT_OUT/run1 (default: this test's folder), then restored into one process and
 * written from there as the single file restored/ref-0000001000.safetensors beside it. */
START_TEST(a_cluster_checkpoint_for_python) {
  const char *env = getenv("FLOE_TEST_CKPT_OUT");
  char out[300], run[320], restored[320];
  snprintf(out, sizeof out, "%s", env && *env ? env : dir_in("python"));
  snprintf(run, sizeof run, "%s/run1", out);
  snprintf(restored, sizeof restored, "%s/restored", out);
  Cluster c;
  cluster_start(&c);
  Layout two = {3, 0, 2};
  FloeSession *s = session_of(&two, &c);
  char *ref = reference(7);
  restore_ok(s, ref);
  char *index = save_sharded(s, run, 1000, 0, NULL, FLOE_OK);
  ck_assert_str_eq(listing(dir_in_path(run, "ckpt-0000001000.shards")),
                   "ps-0.safetensors ps-1.safetensors");
  floe_session_free(s);
  cluster_stop(&c);
  Layout one = {0, 0, 0};
  FloeSession *r = local_session(&one);
  restore_ok(r, index);
  check_state(r, &one, 7, "restored into one process");
  FloeStatus *st = floe_status_new();
  ck_assert_msg(floe_checkpoint_save(r, restored, "ref", 1000, 0, NULL, st) == FLOE_OK, "%s",
                floe_status_message(st));
  floe_status_free(st);
  floe_session_free(r);
  free(index);
  free(ref);
}
END_TEST

static Suite *make_suite(void) {
  Suite *su = suite_create("checkpoint_sharded");
  TCase *tc = tcase_create("all");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, one_process_reshards);
  tcase_add_test(tc, a_save_stopped_at_any_phase_leaves_a_whole_checkpoint);
  tcase_add_test(tc, retention_and_latest_across_kinds);
  tcase_add_test(tc, damaged_checkpoints_are_errors);
  tcase_add_test(tc, a_cluster_writes_one_file_per_ps_and_reshards);
  tcase_add_test(tc, large_cluster_checkpoints_move_in_bounded_steps);
  suite_add_tcase(su, tc);
  TCase *py = tcase_create("python"); /* CK_RUN_CASE=python runs it alone */
  tcase_set_timeout(py, 120);
  tcase_add_test(py, a_cluster_checkpoint_for_python);
  suite_add_tcase(su, py);
  return su;
}

int main(void) {
  const char *cpu = getenv("FLOE_PLUGIN_PATH"), *local = getenv("FLOE_TRANSPORT_DIR");
  snprintf(g_path, sizeof g_path, "%s:%s", cpu ? cpu : "", local ? local : "");
  setenv("FLOE_TRANSPORT", "local", 1);
  const char *tmp = getenv("TMPDIR");
  /* mkdtemp's template: the XXXXXX become the folder's unique name */
  snprintf(g_dir, sizeof g_dir, "%s/floe_ckpt_sharded_XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(g_dir)) {
    perror("mkdtemp");
    return 1;
  }
  SRunner *sr = srunner_create(make_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  if (!failed) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
  }
  return failed ? 1 : 0;
}
