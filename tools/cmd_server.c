/* SPDX-License-Identifier: Apache-2.0 */
/* cmd_server.c - floe server: one task of a cluster, served until SIGTERM. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <floe/floe_dist.h>

#include "cli.h"

static const char server_help[] =
    "Usage: floe server [--cluster FILE] [--job J --task N] [--heartbeat-timeout S]\n"
    "                   [--heartbeat-interval S] [--until-chief-leaves] [--quiet]\n"
    "Serve one task of a cluster: bind only its address, print one line\n"
    "  floe server: /job:J/replica:0/task:N ready at HOST:PORT\n"
    "on stdout, then serve (the worker service, the data plane; the coordination\n"
    "service when it is the chief) until SIGTERM or SIGINT, and exit 0.\n"
    "  --cluster FILE        the cluster (TF_CONFIG-style JSON, or its \"cluster\" object\n"
    "                        alone); default: FLOE_CONFIG, else TF_CONFIG, else PMIx under\n"
    "                        mpirun/srun\n"
    "  --job J --task N      this task (default: the spec's \"task\")\n"
    "  --heartbeat-interval S, --heartbeat-timeout S\n"
    "                        seconds between heartbeats (default 1) and of silence after\n"
    "                        which a task is unavailable (default 10)\n"
    "  --until-chief-leaves  exit 0 once the chief this task served is gone\n"
    "  --quiet               do not report refused connections and lost chiefs on stderr\n"
    "The job's secret: FLOE_JOB_SECRET_FILE (a file of mode 0600) or FLOE_JOB_SECRET.\n";

static FloeServer *volatile g_server;
static volatile sig_atomic_t g_signalled; /* the last serve ended by SIGTERM or SIGINT */

static void on_signal(int sig) {
  (void)sig;
  g_signalled = 1;
  FloeServer *s = g_server;
  if (s) floe_server_stop(s);
}

/* See cli.h. */
int cli_server_serve(const char *tool, FloeServer *s, int64_t timeout_ms) {
  FloeStatus *st = floe_status_new();
  if (!st) return cli_error(tool, "out of memory");
  g_signalled = 0;
  g_server = s;
  struct sigaction sa, old_term, old_int;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, &old_term);
  sigaction(SIGINT, &sa, &old_int);
  floe_code jc = floe_server_join(s, timeout_ms, st);
  int rc = jc == FLOE_OK ? 0
           : jc == FLOE_DEADLINE_EXCEEDED && timeout_ms >= 0 ? -1
                                                             : cli_error(tool, "%s", floe_status_message(st));
  sigaction(SIGTERM, &old_term, NULL);
  sigaction(SIGINT, &old_int, NULL);
  g_server = NULL;
  floe_status_free(st);
  return rc;
}

int cli_server_signalled(void) { return g_signalled != 0; }

static void log_line(void *arg, const char *msg) {
  (void)arg;
  fputs("floe server: ", stderr);
  cli_fputs_escaped(msg, stderr);
  fputc('\n', stderr);
}

int cmd_server(int argc, char **argv) {
  enum { OPT_HB_INT = 256, OPT_HB_TIMEOUT, OPT_UNTIL, OPT_QUIET };
  static const struct option opts[] = {
      {"cluster", required_argument, NULL, 'c'},
      {"job", required_argument, NULL, 'j'},
      {"task", required_argument, NULL, 't'},
      {"heartbeat-interval", required_argument, NULL, OPT_HB_INT},
      {"heartbeat-timeout", required_argument, NULL, OPT_HB_TIMEOUT},
      {"until-chief-leaves", no_argument, NULL, OPT_UNTIL},
      {"quiet", no_argument, NULL, OPT_QUIET},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  FloeServerOptions so;
  floe_server_options_init(&so);
  const char *cluster = NULL, *job = NULL;
  long long task = -1;
  double hb_int = 0, hb_timeout = 0;
  int c, rc, quiet = 0;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
    switch (c) {
      case 'c': cluster = optarg; break;
      case 'j': job = optarg; break;
      case 't':
        if ((rc = cli_int_option("server", "--task", optarg, 0, 4095, &task))) return rc;
        break;
      case OPT_HB_INT:
        if ((rc = cli_number_option("server", "--heartbeat-interval", optarg, 0, 1, 3600, &hb_int)))
          return rc;
        break;
      case OPT_HB_TIMEOUT:
        if ((rc = cli_number_option("server", "--heartbeat-timeout", optarg, 0, 1, 86400,
                                    &hb_timeout)))
          return rc;
        break;
      case OPT_UNTIL: so.until_chief_leaves = 1; break;
      case OPT_QUIET: quiet = 1; break;
      case 'h': printf("%s", server_help); return 0;
      default: return cli_bad_option("server", c, argv, opts);
    }
  }
  if (optind != argc) return cli_usage("server", "takes no arguments besides its options");
  if ((job == NULL) != (task < 0)) return cli_usage("server", "give --job and --task together");
  FloeRuntime *rt = cli_runtime("server");
  if (!rt || cli_check_plugins("server", rt) != 0) return 1;
  so.runtime = rt;
  so.cluster = cluster;
  so.job = job;
  so.task = task < 0 ? 0 : (int)task;
  so.heartbeat_interval_ms = (int)(hb_int * 1000);
  so.heartbeat_timeout_ms = (int)(hb_timeout * 1000);
  if (!quiet) so.log = log_line;
  /* A peer closing a connection mid-write is an error to report, not a reason to die. */
  signal(SIGPIPE, SIG_IGN);
  FloeStatus *st = floe_status_new();
  FloeServer *s = st ? floe_server_start(&so, st) : NULL;
  if (!s) {
    rc = cli_error("server", "%s", st ? floe_status_message(st) : "out of memory");
    floe_status_free(st);
    return rc;
  }
  printf("floe server: %s ready at %s\n", floe_server_task(s), floe_server_address(s));
  fflush(stdout);
  rc = cli_server_serve("server", s, -1);
  floe_server_free(s);
  floe_status_free(st);
  return rc;
}
