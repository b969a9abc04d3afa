/* SPDX-License-Identifier: Apache-2.0 */
/* bench_checkpoint.c - checkpoint write time against bytes (docs/benchmarks.md
 * "Checkpoints"): a cluster in this process (a chief and 1 or 2 ps tasks, each with its own
 * runtime and server, over the transport FLOE_TRANSPORT names) holds 8 f32 variables
 * totalling each size, round-robin over the ps tasks, and the program times, REPEAT times
 * alternating which goes first:
 *   sharded = floe_checkpoint_save_sharded (each ps writes its own file, then the index);
 *   single  = floe_checkpoint_save on the cluster session (every value fetched to the chief,
 *             one file);
 * and then the restore of each into the same session, with the files' pages dropped from the
 * page cache first (posix_fadvise DONTNEED: the restore reads the disk, as after a restart).
 * One save and restore of each kind goes untimed first (it builds the steps' executors).
 * fsync is timed by wrapping the C library's (this program's definition comes first for the
 * library's calls): fsync_share is the part of the save's wall time during which at least
 * one fsync was running. Prints one JSON line per configuration and measurement.
 *   bench_checkpoint [--sizes 1,16,128,512] [--ps 1,2] [--repeat 3] [--dir DIR] */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <floe/floe.h>
#include <floe/floe_dist.h>
#include <floe/floe_train.h>
#include <getopt.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_util.h"

#define NVARS 8
#define COLS 256 /* f32: 1 KiB a row */
#define MAX_PS 2
#define MAX_SIZES 16

/* ---- fsync, timed: the union of the intervals in which some fsync runs ---- */

static pthread_mutex_t sync_mu = PTHREAD_MUTEX_INITIALIZER;
static int sync_active;
static double sync_since, sync_total;

int fsync(int fd) {
  static int (*real)(int);
  if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
  pthread_mutex_lock(&sync_mu);
  if (sync_active++ == 0) sync_since = bench_now();
  pthread_mutex_unlock(&sync_mu);
  int rc = real(fd);
  pthread_mutex_lock(&sync_mu);
  if (--sync_active == 0) sync_total += bench_now() - sync_since;
  pthread_mutex_unlock(&sync_mu);
  return rc;
}

static double sync_seconds(void) {
  pthread_mutex_lock(&sync_mu);
  double t = sync_total;
  pthread_mutex_unlock(&sync_mu);
  return t;
}

static void die(const char *what, FloeStatus *st) {
  fprintf(stderr, "bench_checkpoint: %s: %s\n", what, st ? floe_status_message(st) : "failed");
  exit(1);
}

/* ---- the cluster ---- */

static char g_path[4096];

typedef struct Cluster {
  int nps;
  char json[512];
  FloeRuntime *rt[MAX_PS + 1]; /* the chief, then the ps tasks */
  FloeServer *srv[MAX_PS + 1];
} Cluster;

static int free_port(void) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
      getsockname(fd, (struct sockaddr *)&a, &len) != 0)
    die("no free port on 127.0.0.1", NULL);
  close(fd);
  return ntohs(a.sin_port);
}

static void cluster_start(Cluster *c, int nps) {
  c->nps = nps;
  int port[MAX_PS + 1] = {0};
  for (int i = 0; i <= nps; i++) { /* a port just closed may be handed out again */
    int again;
    do {
      port[i] = free_port();
      again = 0;
      for (int j = 0; j < i; j++) again |= port[j] == port[i];
    } while (again);
  }
  int n = snprintf(c->json, sizeof c->json, "{\"cluster\": {\"chief\": [\"127.0.0.1:%d\"], "
                   "\"ps\": [", port[0]);
  for (int i = 0; i < nps; i++)
    n += snprintf(c->json + n, sizeof c->json - (size_t)n, "%s\"127.0.0.1:%d\"", i ? ", " : "",
                  port[i + 1]);
  snprintf(c->json + n, sizeof c->json - (size_t)n, "]}}");
  FloeStatus *st = floe_status_new();
  for (int i = nps; i >= 0; i--) { /* the chief last */
    FloeRuntimeOptions ro = {.struct_size = sizeof ro, .plugin_path = g_path};
    if (!(c->rt[i] = floe_runtime_new(&ro, st))) die("runtime", st);
    FloeServerOptions o;
    floe_server_options_init(&o);
    o.runtime = c->rt[i];
    o.cluster = c->json;
    o.job = i ? "ps" : "chief";
    o.task = i ? i - 1 : 0;
    if (!(c->srv[i] = floe_server_start(&o, st))) die("server", st);
  }
  floe_status_free(st);
}

static void cluster_stop(Cluster *c) {
  for (int i = 0; i <= c->nps; i++) floe_server_free(c->srv[i]);
  for (int i = 0; i <= c->nps; i++) floe_runtime_free(c->rt[i]);
}

/* NVARS variables of rows x COLS f32 each, variable k on ps k mod nps, initialised. */
static FloeSession *model_session(Cluster *c, int64_t rows) {
  FloeGraph *g = floe_graph_new();
  for (int k = 0; k < NVARS; k++) {
    char name[32], dev[64];
    snprintf(name, sizeof name, "v%d", k);
    snprintf(dev, sizeof dev, "/job:ps/task:%d", k % c->nps);
    floe_graph_set_device_scope(g, dev);
    floe_variable(g, name, FLOE_F32, floe_shape_make(2, (int64_t[]){rows, COLS}),
                  floe_init_uniform(-1, 1, k + 1));
  }
  floe_graph_set_device_scope(g, NULL);
  floe_variables_initializer(g, "init");
  if (floe_graph_status(g) != FLOE_OK) die(floe_graph_error(g, NULL), NULL);
  FloeSessionOptions so;
  floe_session_options_init(&so);
  so.runtime = c->rt[0];
  so.cluster = c->json;
  so.cluster_timeout_ms = 60000;
  FloeStatus *st = floe_status_new();
  FloeSession *s = floe_session_new(g, &so, st);
  if (!s) die("session", st);
  const char *init = "init";
  if (floe_session_run(s, NULL, 0, NULL, 0, &init, 1, NULL, st) != FLOE_OK) die("init", st);
  floe_status_free(st);
  floe_graph_free(g);
  return s;
}

/* ---- the measurements ---- */

/* Drops the page cache's copy of every file under dir (one level of folders deep). */
static void drop_cached(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) return;
  struct dirent *de;
  while ((de = readdir(d))) {
    if (de->d_name[0] == '.') continue;
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
    struct stat sb;
    if (stat(p, &sb) != 0) continue;
    if (S_ISDIR(sb.st_mode)) {
      drop_cached(p);
      continue;
    }
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
  }
  closedir(d);
}

/* s as a JSON string, then "}" and a newline. */
static void json_string(const char *s) {
  putchar('"');
  for (; *s; s++) printf(*s == '"' || *s == '\\' ? "\\%c" : (unsigned char)*s < 32 ? " " : "%c", *s);
  printf("\"}\n");
}

enum { SHARDED, SINGLE, KINDS };
static const char *kind_name[KINDS] = {"sharded", "single"};

/* One save of kind k of step into dir/<kind> (keep 1): wall seconds, fsync seconds; on
 * failure *wall = -1 and why in err (the single-file save fetches every value in one step,
 * whose reply from a task has a size limit). */
static void save(FloeSession *s, const char *dir, int k, int64_t step, double *wall,
                 double *fsync_s, char *err, size_t len) {
  char d[4200];
  snprintf(d, sizeof d, "%s/%s", dir, kind_name[k]);
  FloeStatus *st = floe_status_new();
  double f0 = sync_seconds(), t0 = bench_now();
  floe_code rc = k == SHARDED ? floe_checkpoint_save_sharded(s, d, NULL, step, 1, NULL, NULL, st)
                              : floe_checkpoint_save(s, d, NULL, step, 1, NULL, st);
  *wall = bench_now() - t0;
  *fsync_s = sync_seconds() - f0;
  if (rc != FLOE_OK) {
    *wall = -1;
    snprintf(err, len, "%s save: %s", kind_name[k], floe_status_message(st));
  }
  floe_status_free(st);
}

/* The restore of kind k's newest checkpoint into s, its pages dropped first: seconds, or -1
 * with why in err (a cluster restore feeds every value in one step, whose request to a task
 * has a size limit: measured where it fits). */
static double restore(FloeSession *s, const char *dir, int k, char *err, size_t len) {
  char d[4200];
  snprintf(d, sizeof d, "%s/%s", dir, kind_name[k]);
  FloeStatus *st = floe_status_new();
  char *path = floe_checkpoint_latest(d, NULL, st);
  if (!path) die("latest", st);
  drop_cached(d);
  double t0 = bench_now();
  double t = floe_checkpoint_restore(s, path, NULL, st) == FLOE_OK ? bench_now() - t0 : -1;
  if (t < 0) snprintf(err, len, "%s", floe_status_message(st));
  free(path);
  floe_status_free(st);
  return t;
}

static int parse_list(const char *s, int *out, int max) {
  int n = 0;
  for (char *end; *s && n < max; s = *end ? end + 1 : end) {
    long v = strtol(s, &end, 10);
    if (end == s || v < 1 || (*end && *end != ',')) return -1;
    out[n++] = (int)v;
  }
  return n;
}

int main(int argc, char **argv) {
  int sizes[MAX_SIZES] = {1, 16, 128, 512}, nsizes = 4, ps[MAX_SIZES] = {1, 2}, nps = 2;
  int repeat = 3;
  const char *dir = NULL;
  static const struct option opts[] = {{"sizes", required_argument, NULL, 's'},
                                       {"ps", required_argument, NULL, 'p'},
                                       {"repeat", required_argument, NULL, 'r'},
                                       {"dir", required_argument, NULL, 'd'},
                                       {NULL, 0, NULL, 0}};
  for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
    switch (c) {
      case 's': nsizes = parse_list(optarg, sizes, MAX_SIZES); break;
      case 'p': nps = parse_list(optarg, ps, MAX_SIZES); break;
      case 'r': repeat = atoi(optarg); break;
      case 'd': dir = optarg; break;
      default:
        fprintf(stderr, "usage: bench_checkpoint [--sizes MIB,...] [--ps 1,2] [--repeat N] "
                "[--dir DIR]\n");
        return 2;
    }
  }
  for (int i = 0; i < nps; i++)
    if (ps[i] > MAX_PS) nps = -1;
  if (nsizes < 1 || nps < 1 || repeat < 1 || repeat > 100) {
    fprintf(stderr, "bench_checkpoint: --sizes takes MiB counts (1,16,...), --ps 1 or 2 ps "
            "tasks (1,2), --repeat 1 to 100\n");
    return 2;
  }
  if (!getenv("FLOE_JOB_SECRET") && !getenv("FLOE_JOB_SECRET_FILE")) /* one process: its own */
    setenv("FLOE_JOB_SECRET", "bench-checkpoint-secret-0123456789abcdef", 1);
  const char *plug = getenv("FLOE_PLUGIN_PATH");
  snprintf(g_path, sizeof g_path, "%s", plug ? plug : "");
  const char *tmp = getenv("TMPDIR");
  char tmpl[4096]; /* mkdtemp's template: the XXXXXX become the folder's unique name */
  snprintf(tmpl, sizeof tmpl, "%s/floe_bench_ckpt_XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!dir && !(dir = mkdtemp(tmpl))) {
    perror("bench_checkpoint: mkdtemp");
    return 1;
  }
  const char *tr = getenv("FLOE_TRANSPORT");
  for (int pi = 0; pi < nps; pi++) {
    for (int si = 0; si < nsizes; si++) {
      int64_t rows = (int64_t)sizes[si] * 1024 * 1024 / NVARS / (COLS * 4);
      if (rows < 1) rows = 1;
      double bytes = (double)NVARS * (double)rows * COLS * 4;
      Cluster c;
      cluster_start(&c, ps[pi]);
      FloeSession *s = model_session(&c, rows);
      double wall[KINDS][100], fs[KINDS][100], rest[KINDS][100];
      char err[KINDS][1024] = {"", ""};
      int save_failed[KINDS] = {0, 0};
      for (int k = 0; k < KINDS; k++) { /* untimed: the first save builds its executors */
        double w, f;
        save(s, dir, k, 0, &w, &f, err[k], sizeof err[k]);
        if (w < 0) save_failed[k] = 1;
        else restore(s, dir, k, err[k], sizeof err[k]);
      }
      for (int r = 0; r < repeat; r++) /* alternating which kind goes first */
        for (int j = 0; j < KINDS; j++) {
          int k = (j + r) % KINDS;
          if (!save_failed[k]) save(s, dir, k, r + 1, &wall[k][r], &fs[k][r], err[k], sizeof err[k]);
        }
      for (int r = 0; r < repeat; r++)
        for (int j = 0; j < KINDS; j++) {
          int k = (j + r) % KINDS;
          rest[k][r] = err[k][0] ? -1 : restore(s, dir, k, err[k], sizeof err[k]);
        }
      double med[KINDS], fmed[KINDS], rmed[KINDS];
      for (int k = 0; k < KINDS; k++) {
        double share[100];
        if (save_failed[k]) {
          med[k] = fmed[k] = rmed[k] = -1;
          continue;
        }
        for (int r = 0; r < repeat; r++) share[r] = fs[k][r] / wall[k][r];
        med[k] = bench_median(wall[k], repeat);
        fmed[k] = bench_median(share, repeat);
        rmed[k] = err[k][0] ? -1 : bench_median(rest[k], repeat);
      }
      for (int k = 0; k < KINDS; k++) {
        if (save_failed[k]) {
          printf("{\"bench\":\"checkpoint\",\"kind\":\"%s\",\"transport\":\"%s\",\"ps\":%d,"
                 "\"mib\":%.3f,\"repeat\":%d,\"save_s\":null,\"restore_s\":null,\"error\":",
                 kind_name[k], tr ? tr : "default", ps[pi], bytes / 1048576.0, repeat);
          json_string(err[k]);
          continue;
        }
        printf("{\"bench\":\"checkpoint\",\"kind\":\"%s\",\"transport\":\"%s\",\"ps\":%d,"
               "\"mib\":%.3f,\"repeat\":%d,\"save_s\":%.4f,\"save_mbs\":%.1f,"
               "\"fsync_share\":%.3f,\"save_vs_single\":%.3f,",
               kind_name[k], tr ? tr : "default", ps[pi], bytes / 1048576.0, repeat, med[k],
               bytes / 1e6 / med[k], fmed[k], save_failed[SINGLE] ? -1 : med[SINGLE] / med[k]);
        if (err[k][0]) {
          printf("\"restore_s\":null,\"error\":");
          json_string(err[k]);
        } else {
          printf("\"restore_s\":%.4f,\"restore_mbs\":%.1f}\n", rmed[k], bytes / 1e6 / rmed[k]);
        }
      }
      fflush(stdout);
      floe_session_free(s);
      cluster_stop(&c);
    }
  }
  if (dir == tmpl) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpl);
    if (system(cmd) != 0) fprintf(stderr, "bench_checkpoint: could not remove %s\n", tmpl);
  }
  return 0;
}
