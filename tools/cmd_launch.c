/* SPDX-License-Identifier: Apache-2.0 */
/* cmd_launch.c - floe launch: a whole cluster on this machine, as torchrun --standalone
 * starts one: a `floe server` per worker and ps task, then COMMAND as the chief, with the
 * cluster in FLOE_CONFIG and a fresh job secret in FLOE_JOB_SECRET_FILE; when COMMAND ends
 * the servers get SIGTERM, and floe launch exits with COMMAND's status.
 *
 * --max-restarts N: when a task fails (ends with a signal or a non-zero status before the
 * chief succeeded), it starts again, with FLOE_RESTART=<k> in its environment, up to N times
 * in all. Under --every-task only that task starts again (--restart task, the default there):
 * the others stay up and re-form the cluster with it (they have FLOE_RECOVER=N: `floe train
 * --cluster` then frees its session and server, starts them again and resumes from the last
 * committed checkpoint, in the same process), and a chief that exits with status 75 (the
 * cluster did not re-form: a task hangs) starts the whole job again. With --restart job (and
 * always without --every-task, torchrun's way) the other tasks are stopped and every task
 * starts again on the same ports. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

static const char launch_help[] =
    "Usage: floe launch --workers N [--ps M] [--transport NAME] [--provider P]\n"
    "                   [--host H] [--timeout S] [--every-task] [--max-restarts N]\n"
    "                   [--restart task|job]\n"
    "                   -- COMMAND [ARG]...\n"
    "Start a cluster on this machine: one `floe server` per worker and ps task (each on a\n"
    "free port of H), then COMMAND as the chief, with FLOE_CONFIG holding the cluster\n"
    "(TF_CONFIG's form, task chief 0) and FLOE_JOB_SECRET_FILE a fresh secret. COMMAND is\n"
    "any program whose session names the cluster \"env\" (e.g. floe run GRAPH --cluster\n"
    "env). When COMMAND ends the servers are stopped (SIGTERM) and floe launch exits with\n"
    "COMMAND's status; a server that dies before is reported.\n"
    "  --workers N          worker tasks (0 to 256; 0 needs --ps: the chief and the ps\n"
    "                       tasks alone, e.g. one training task of floe train --cluster)\n"
    "  --ps M               parameter-server tasks (0 to 256; default 0)\n"
    "  --transport NAME     the data plane's transport plugin (FLOE_TRANSPORT: local,\n"
    "                       fabric; default: the runtime's choice)\n"
    "  --provider P         libfabric provider (FLOE_FABRIC_PROVIDER: \"tcp;ofi_rxm\",\n"
    "                       shm, ...)\n"
    "  --host H             the address the tasks bind (default 127.0.0.1)\n"
    "  --timeout S          seconds to wait for the servers' ready lines (default 60)\n"
    "  --every-task         run COMMAND in every task instead of servers (between-graph\n"
    "                       replication: floe train --cluster env), each with FLOE_CONFIG\n"
    "                       naming its own task; the others' output goes to standard\n"
    "                       error; exits with the chief's status, else the first failure\n"
    "  --max-restarts N     when a task fails (a signal, or a non-zero status before the\n"
    "                       chief succeeded), start it again (same port; FLOE_RESTART=1, 2,\n"
    "                       ... in its environment), up to N times in all (default 0): floe\n"
    "                       train --checkpoint-dir D then resumes from the last checkpoint\n"
    "                       committed in D\n"
    "  --restart task|job   what starts again: the failed task alone (task: the default with\n"
    "                       --every-task; the others get FLOE_RECOVER=N and floe train\n"
    "                       --cluster re-forms the cluster with it in the same processes; a\n"
    "                       chief exiting with status 75, the cluster not re-formed, restarts\n"
    "                       the job) or every task after stopping the others (job: the only\n"
    "                       way without --every-task, and for programs that cannot re-form)\n"
    "Under mpirun or srun, run COMMAND itself instead: the cluster then comes from PMIx\n"
    "(which ends the whole job when one rank dies: run it again, with floe train's\n"
    "--checkpoint-dir and --resume, to go on from the last checkpoint).\n";

#define MAX_TASKS 513

typedef struct Task {
  const char *job;
  int index;
  int port;
  pid_t pid;
  int out_fd;      /* the server's stdout, until its ready line */
  char ready[512]; /* the line */
  size_t got;
  int is_ready;
} Task;

/* A free TCP port of host, found by binding port 0 (a small window remains before the
 * server binds it; a clash shows as a server that fails to start, and is reported). */
static int free_port(const char *host) {
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  if (inet_pton(AF_INET, host, &a.sin_addr) != 1) return -1;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  socklen_t len = sizeof a;
  int port = -1;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

/* The cluster as TF_CONFIG's JSON; with job, its task names job's task index. */
static char *cluster_json(const Task *t, int n, const char *host, const char *job, int index) {
  size_t cap = 256 + (size_t)n * 64;
  char *s = malloc(cap);
  if (!s) return NULL;
  size_t u = (size_t)snprintf(s, cap, "{\"cluster\": {");
  const char *jobs[] = {"chief", "worker", "ps"};
  int first_job = 1;
  for (int j = 0; j < 3; j++) {
    int any = 0;
    for (int i = 0; i < n; i++) {
      if (strcmp(t[i].job, jobs[j])) continue;
      if (!any) u += (size_t)snprintf(s + u, cap - u, "%s\"%s\": [", first_job ? "" : ", ", jobs[j]);
      u += (size_t)snprintf(s + u, cap - u, "%s\"%s:%d\"", any ? ", " : "", host, t[i].port);
      any = 1;
      first_job = 0;
    }
    if (any) u += (size_t)snprintf(s + u, cap - u, "]");
  }
  u += (size_t)snprintf(s + u, cap - u, "}");
  if (job) u += (size_t)snprintf(s + u, cap - u, ", \"task\": {\"type\": \"%s\", \"index\": %d}", job, index);
  snprintf(s + u, cap - u, "}");
  return s;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Stops tasks first..n-1 still running: SIGTERM, then SIGKILL after grace_s seconds. */
static void stop_tasks(Task *t, int n, int first, double grace_s) {
  for (int i = first; i < n; i++)
    if (t[i].pid > 0) {
      kill(t[i].pid, SIGTERM);
      kill(t[i].pid, SIGCONT); /* a stopped task (one that hangs) takes it too */
    }
  double end = now_s() + grace_s;
  for (int i = first; i < n; i++) {
    while (t[i].pid > 0) {
      int status;
      pid_t r = waitpid(t[i].pid, &status, WNOHANG);
      if (r == t[i].pid || (r < 0 && errno != EINTR)) {
        t[i].pid = 0;
        break;
      }
      if (now_s() > end) {
        fprintf(stderr, "floe launch: /job:%s/task:%d did not stop within %.0f s of SIGTERM: "
                "killed\n", t[i].job, t[i].index, grace_s);
        kill(t[i].pid, SIGKILL);
        waitpid(t[i].pid, &status, 0);
        t[i].pid = 0;
        break;
      }
      struct timespec nap = {0, 20 * 1000 * 1000};
      nanosleep(&nap, NULL);
    }
  }
}

static volatile sig_atomic_t g_signal;
static void on_signal(int sig) { g_signal = sig; }

static const char *ended_how(int status, int *code) {
  *code = WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status);
  return WIFEXITED(status) ? "status" : "signal";
}

/* How one start of the job ended. */
typedef struct Outcome {
  int rc;          /* what floe launch exits with when it does not start the job again */
  int failed;      /* a task failed: starting again may help */
  char what[256];  /* the task that failed and how, for the restart's line */
} Outcome;

static double g_t0; /* when floe launch started */

/* A task failed: said at once (its time is when the failure was seen), then the others stop. */
static void task_failed(Outcome *o, const Task *x, pid_t pid, int status) {
  int code;
  const char *how = ended_how(status, &code);
  o->failed = 1;
  snprintf(o->what, sizeof o->what, "/job:%s/task:%d (pid %d) ended with %s %d", x->job,
           x->index, (int)pid, how, code);
  fprintf(stderr, "floe launch: [%.3f s] %s: stopping the other tasks\n", now_s() - g_t0,
          o->what);
}

/* A chief's status that says the cluster did not re-form (a task hangs, or cannot come back):
 * under --restart task, the whole job starts again. */
#define RESTART_JOB_STATUS 75

/* Starts COMMAND as task i (FLOE_CONFIG naming it; FLOE_RESTART=restart_k when > 0, else
 * what this process has). 0, or -1 after an error. */
static int start_task(Task *t, int n, int i, const char *host, char **cmd, int restart_k) {
  char *cfg = cluster_json(t, n, host, t[i].job, t[i].index);
  if (!cfg) {
    cli_error("launch", "out of memory");
    return -1;
  }
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    setenv("FLOE_CONFIG", cfg, 1);
    if (restart_k > 0) {
      char k[16];
      snprintf(k, sizeof k, "%d", restart_k);
      setenv("FLOE_RESTART", k, 1);
    }
    if (i > 0) dup2(STDERR_FILENO, STDOUT_FILENO);
    execvp(cmd[0], cmd);
    fprintf(stderr, "floe launch: cannot run %s: %s\n", cmd[0], strerror(errno));
    _exit(127);
  }
  free(cfg);
  if (pid < 0) {
    cli_error("launch", "cannot start /job:%s/task:%d: %s", t[i].job, t[i].index,
              strerror(errno));
    return -1;
  }
  t[i].pid = pid;
  return 0;
}

/* --every-task: COMMAND in every task, each with FLOE_CONFIG naming its own task (as mpirun
 * starts every rank); the other tasks' standard output goes to standard error, so what the
 * chief prints stays apart. Once the chief ends, the others get SIGTERM (a task that only
 * serves exits 0 on it; one that did not notice the chief leave would wait out a heartbeat
 * timeout). The chief's status, or when it succeeded the first other task's failure before
 * that. With task_scope, a task that fails starts again alone while *used < max (the others
 * re-form the cluster with it); else, with restart (restarts left), the first task to fail
 * ends the attempt at once (out->failed: the job starts again). */
static void run_every_task(Task *t, int n, const char *host, char **cmd, int restart,
                           int task_scope, int *used, long long max, Outcome *out) {
  memset(out, 0, sizeof *out);
  for (int i = 0; i < n; i++)
    if (start_task(t, n, i, host, cmd, 0)) {
      stop_tasks(t, n, 0, 10);
      out->rc = 1;
      return;
    }
  int rc = -1, other_rc = 0;
  while (rc < 0 && !out->failed) {
    int status;
    pid_t r = waitpid(-1, &status, 0);
    if (r < 0 && errno == EINTR) {
      if (g_signal)
        for (int i = 0; i < n; i++)
          if (t[i].pid > 0) kill(t[i].pid, g_signal);
      continue;
    }
    if (r < 0) break;
    for (int i = 0; i < n; i++) {
      if (t[i].pid != r) continue;
      t[i].pid = 0;
      int code;
      const char *how = ended_how(status, &code);
      int task_rc = WIFEXITED(status) ? code : 128 + code;
      int rejoin = !(i == 0 && WIFEXITED(status) && code == RESTART_JOB_STATUS);
      if (task_scope && task_rc != 0 && !g_signal && rejoin && *used < max) {
        ++*used;
        fprintf(stderr, "floe launch: [%.3f s] /job:%s/task:%d (pid %d) ended with %s %d: it "
                "starts again alone (restart %d of %lld); the other tasks re-form the cluster "
                "with it\n", now_s() - g_t0, t[i].job, t[i].index, (int)r, how, code, *used, max);
        if (start_task(t, n, i, host, cmd, *used)) {
          stop_tasks(t, n, 0, 10);
          out->rc = 1;
          return;
        }
      } else if (restart && task_rc != 0 && !g_signal && (!task_scope || !rejoin)) {
        task_failed(out, &t[i], r, status);
        out->rc = task_rc;
      } else if (task_scope && task_rc != 0 && !g_signal && rejoin) {
        /* the restarts are used up: the others would wait for it to come back */
        fprintf(stderr, "floe launch: [%.3f s] /job:%s/task:%d (pid %d) ended with %s %d and "
                "the %lld restart%s are used up: stopping the other tasks\n", now_s() - g_t0,
                t[i].job, t[i].index, (int)r, how, code, max, max == 1 ? "" : "s");
        stop_tasks(t, n, 0, 10);
        out->rc = task_rc;
        return;
      } else if (i == 0) {
        rc = task_rc;
      } else if (task_rc != 0) {
        fprintf(stderr, "floe launch: /job:%s/task:%d (pid %d) ended with %s %d while the chief "
                "ran\n", t[i].job, t[i].index, (int)r, how, code);
        if (!other_rc) other_rc = task_rc;
      }
    }
  }
  /* SIGTERM, then SIGKILL after 10 s (after a failure 2 s: the job starts again) */
  stop_tasks(t, n, 0, out->failed ? 2 : 10);
  if (out->failed) return;
  if (rc < 0) rc = 1;
  out->rc = rc ? rc : other_rc;
}

/* The servers (this very program's `server` command, exe), each until its ready line, then
 * COMMAND as the chief; the chief's status. With restart, a server that ends while the chief
 * runs, or a chief that fails, is a failure. */
static void run_servers(Task *t, int n, const char *exe, const char *config_path,
                        const char *chief_spec, char **cmd, double timeout, int restart,
                        Outcome *out) {
  memset(out, 0, sizeof *out);
  out->rc = 1;
  for (int i = 1; i < n; i++) { /* (again, after a restart) */
    t[i].is_ready = 0;
    t[i].got = 0;
    t[i].out_fd = -1;
  }
  for (int i = 1; i < n; i++) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) {
      cli_error("launch", "cannot make a pipe: %s", strerror(errno));
      goto stop;
    }
    char task[16];
    snprintf(task, sizeof task, "%d", t[i].index);
    pid_t pid = fork();
    if (pid < 0) {
      cli_error("launch", "cannot start a server: %s", strerror(errno));
      close(p[0]);
      close(p[1]);
      goto stop;
    }
    if (pid == 0) {
      dup2(p[1], STDOUT_FILENO);
      char *args[] = {(char *)exe, (char *)"server", (char *)"--cluster", (char *)config_path,
                      (char *)"--job",
                      (char *)t[i].job, (char *)"--task", task, NULL};
      execv(exe, args);
      _exit(127);
    }
    close(p[1]);
    t[i].pid = pid;
    t[i].out_fd = p[0];
  }
  /* Every ready line, within the timeout. */
  double end = now_s() + timeout;
  for (int ready = 0; ready < n - 1;) {
    struct pollfd pf[MAX_TASKS];
    int map[MAX_TASKS], np = 0;
    for (int i = 1; i < n; i++)
      if (!t[i].is_ready) {
        pf[np] = (struct pollfd){t[i].out_fd, POLLIN, 0};
        map[np++] = i;
      }
    int left = (int)((end - now_s()) * 1000);
    if (left <= 0 || g_signal) {
      for (int k = 0; k < np; k++)
        fprintf(stderr, "floe launch: /job:%s/task:%d (pid %d) did not say it was ready\n",
                t[map[k]].job, t[map[k]].index, (int)t[map[k]].pid);
      cli_error("launch", g_signal ? "interrupted while starting the servers"
                                   : "the servers did not start within %.0f s", timeout);
      goto stop;
    }
    if (poll(pf, (nfds_t)np, left) < 0 && errno != EINTR) break;
    for (int k = 0; k < np; k++) {
      if (!pf[k].revents) continue;
      Task *x = &t[map[k]];
      ssize_t r = read(x->out_fd, x->ready + x->got, sizeof x->ready - 1 - x->got);
      if (r <= 0) {
        int status = 0;
        waitpid(x->pid, &status, 0);
        x->pid = 0;
        cli_error("launch", "/job:%s/task:%d exited before it was ready (%s %d; its errors "
                  "are above)", x->job, x->index, WIFEXITED(status) ? "status" : "signal",
                  WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        goto stop;
      }
      x->got += (size_t)r;
      x->ready[x->got] = 0;
      if (strchr(x->ready, '\n')) {
        x->is_ready = 1;
        ready++;
        close(x->out_fd);
        x->out_fd = -1;
      }
    }
  }
  /* The chief. */
  setenv("FLOE_CONFIG", chief_spec, 1);
  pid_t chief = fork();
  if (chief < 0) {
    cli_error("launch", "cannot start COMMAND: %s", strerror(errno));
    goto stop;
  }
  if (chief == 0) {
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    execvp(cmd[0], cmd);
    fprintf(stderr, "floe launch: cannot run %s: %s\n", cmd[0], strerror(errno));
    _exit(127);
  }
  t[0].pid = chief;
  int status = 0;
  for (;;) {
    pid_t r = waitpid(-1, &status, 0);
    if (r == chief) {
      t[0].pid = 0;
      break;
    }
    if (r < 0) {
      if (errno == EINTR) {
        if (g_signal) kill(chief, g_signal);
        continue;
      }
      break;
    }
    for (int i = 1; i < n; i++) /* a server ended early: the chief will see it too */
      if (t[i].pid == r) {
        fprintf(stderr, "floe launch: /job:%s/task:%d (pid %d) ended while the chief ran "
                "(%s %d)\n", t[i].job, t[i].index, (int)r, WIFEXITED(status) ? "status" : "signal",
                WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        t[i].pid = 0;
        if (restart && !g_signal) task_failed(out, &t[i], r, status);
      }
    if (out->failed) break; /* the job starts again: no need to wait for the chief to see it */
  }
  if (!out->failed) {
    out->rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (restart && out->rc != 0 && !g_signal) task_failed(out, &t[0], chief, status);
  }
stop:
  for (int i = 1; i < n; i++)
    if (t[i].out_fd >= 0) close(t[i].out_fd), t[i].out_fd = -1;
  stop_tasks(t, n, 0, out->failed ? 2 : 10);
}

int cmd_launch(int argc, char **argv) {
  enum { OPT_PS = 256, OPT_TRANSPORT, OPT_PROVIDER, OPT_HOST, OPT_TIMEOUT, OPT_EVERY,
         OPT_RESTARTS, OPT_RESTART };
  static const struct option opts[] = {
      {"workers", required_argument, NULL, 'w'}, {"ps", required_argument, NULL, OPT_PS},
      {"transport", required_argument, NULL, OPT_TRANSPORT},
      {"provider", required_argument, NULL, OPT_PROVIDER},
      {"host", required_argument, NULL, OPT_HOST},
      {"timeout", required_argument, NULL, OPT_TIMEOUT},
      {"every-task", no_argument, NULL, OPT_EVERY},
      {"max-restarts", required_argument, NULL, OPT_RESTARTS},
      {"restart", required_argument, NULL, OPT_RESTART},
      {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
  int every = 0, restart_scope = 0; /* 0: the default, 1: task, 2: job */
  long long workers = -1, ps = 0, max_restarts = 0;
  double timeout = 60;
  const char *transport = NULL, *provider = NULL, *host = "127.0.0.1";
  int c, rc;
  optind = 1;
  opterr = 0;
  /* '+': stop at the first argument that is not an option (COMMAND's own come after). */
  while ((c = getopt_long(argc, argv, "+:h", opts, NULL)) != -1) {
    switch (c) {
      case 'w':
        if ((rc = cli_int_option("launch", "--workers", optarg, 0, 256, &workers))) return rc;
        break;
      case OPT_PS:
        if ((rc = cli_int_option("launch", "--ps", optarg, 0, 256, &ps))) return rc;
        break;
      case OPT_TRANSPORT: transport = optarg; break;
      case OPT_PROVIDER: provider = optarg; break;
      case OPT_HOST: host = optarg; break;
      case OPT_TIMEOUT:
        if ((rc = cli_number_option("launch", "--timeout", optarg, 0, 1, 86400, &timeout)))
          return rc;
        break;
      case OPT_EVERY: every = 1; break;
      case OPT_RESTARTS:
        if ((rc = cli_int_option("launch", "--max-restarts", optarg, 0, 1000, &max_restarts)))
          return rc;
        break;
      case OPT_RESTART:
        if (strcmp(optarg, "task") && strcmp(optarg, "job"))
          return cli_usage("launch", "--restart takes task or job");
        restart_scope = strcmp(optarg, "task") ? 2 : 1;
        break;
      case 'h': printf("%s", launch_help); return 0;
      default: return cli_bad_option("launch", c, argv, opts);
    }
  }
  g_t0 = now_s();
  if (workers < 0) return cli_usage("launch", "give --workers N");
  if (workers == 0 && ps == 0)
    return cli_usage("launch", "--workers 0 leaves the chief alone: give --ps M too");
  if (optind >= argc) return cli_usage("launch", "give the COMMAND to run as the chief after --");
  if (restart_scope == 1 && !every)
    return cli_usage("launch", "--restart task goes with --every-task (without it the servers "
                     "and the chief's COMMAND start again together: --restart job)");
  struct in_addr probe;
  if (inet_pton(AF_INET, host, &probe) != 1)
    return cli_usage("launch", "--host takes an IPv4 address such as 127.0.0.1");
  char **cmd = argv + optind;

  int n = 1 + (int)workers + (int)ps;
  Task t[MAX_TASKS];
  memset(t, 0, sizeof t);
  for (int i = 0; i < n; i++) {
    t[i].job = i == 0 ? "chief" : i <= workers ? "worker" : "ps";
    t[i].index = i == 0 ? 0 : i <= workers ? i - 1 : i - 1 - (int)workers;
    t[i].out_fd = -1;
    for (int tries = 0; tries < 16; tries++) { /* distinct ports */
      t[i].port = free_port(host);
      int dup = 0;
      for (int k = 0; k < i && !dup; k++) dup = t[k].port == t[i].port;
      if (!dup) break;
    }
    if (t[i].port <= 0) return cli_error("launch", "cannot find a free port on %s", host);
  }
  /* The secret (32 random bytes, hex, in a 0600 file) and the cluster file in a private
   * folder of $TMPDIR (else /tmp). */
  const char *tmpdir = getenv("TMPDIR");
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/floe-launch-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
  if (!mkdtemp(dir)) return cli_error("launch", "cannot make a temporary folder in %s: %s",
                                      tmpdir && *tmpdir ? tmpdir : "/tmp", strerror(errno));
  char secret_path[sizeof dir + 16], config_path[sizeof dir + 16];
  snprintf(secret_path, sizeof secret_path, "%s/secret", dir);
  snprintf(config_path, sizeof config_path, "%s/cluster.json", dir);
  unsigned char raw[32];
  char hex[65];
  rc = 1;
  char *spec = NULL, *chief_spec = NULL;
  if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
    cli_error("launch", "cannot draw a secret: %s", strerror(errno));
    goto cleanup;
  }
  for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", raw[i]);
  int fd = open(secret_path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 || write(fd, hex, 64) != 64) {
    cli_error("launch", "cannot write %s: %s", secret_path, strerror(errno));
    if (fd >= 0) close(fd);
    goto cleanup;
  }
  close(fd);
  spec = cluster_json(t, n, host, NULL, 0);
  chief_spec = cluster_json(t, n, host, "chief", 0);
  FILE *f = spec ? fopen(config_path, "we") : NULL;
  if (!f || fputs(spec, f) < 0 || fclose(f) != 0) {
    cli_error("launch", "cannot write %s: %s", config_path, strerror(errno));
    goto cleanup;
  }
  setenv("FLOE_JOB_SECRET_FILE", secret_path, 1);
  unsetenv("FLOE_JOB_SECRET");
  unsetenv("TF_CONFIG");
  unsetenv("FLOE_CONFIG");
  if (transport) setenv("FLOE_TRANSPORT", transport, 1);
  if (provider) setenv("FLOE_FABRIC_PROVIDER", provider, 1);
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);

  /* The servers: this very program's `server` command. */
  char exe[4096];
  ssize_t el = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (el <= 0) {
    cli_error("launch", "cannot find this program (/proc/self/exe): %s", strerror(errno));
    goto cleanup;
  }
  exe[el] = 0;
  int task_scope = every && restart_scope != 2 && max_restarts > 0;
  if (task_scope) { /* the tasks may re-form the cluster that many times */
    char k[24];
    snprintf(k, sizeof k, "%lld", max_restarts);
    setenv("FLOE_RECOVER", k, 1);
  } else {
    unsetenv("FLOE_RECOVER");
  }
  for (int used = 0;;) { /* restarts used, of a task or of the job */
    if (used) {
      char k[16];
      snprintf(k, sizeof k, "%d", used);
      setenv("FLOE_RESTART", k, 1);
    } else {
      unsetenv("FLOE_RESTART");
    }
    Outcome o;
    int restart = used < max_restarts;
    if (every)
      run_every_task(t, n, host, cmd, restart, task_scope, &used, max_restarts, &o);
    else
      run_servers(t, n, exe, config_path, chief_spec, cmd, timeout, restart, &o);
    rc = o.rc;
    if (!o.failed || g_signal) break;
    used++;
    fprintf(stderr, "floe launch: [%.3f s] every task starts again (restart %d of %lld)\n",
            now_s() - g_t0, used, max_restarts);
  }
cleanup:
  unlink(secret_path);
  unlink(config_path);
  rmdir(dir);
  free(spec);
  free(chief_spec);
  return rc;
}
