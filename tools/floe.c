/* SPDX-License-Identifier: Apache-2.0 */
/* floe.c - the floe command: devices, plugins, ops, run, graph, train. */
#define _GNU_SOURCE /* vasprintf */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "cli.h"
#include "config.h"

int cli_builtin_plugin_path;

int cli_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  char *msg = NULL;
  va_start(ap, fmt);
  int n = vasprintf(&msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "floe %s: ", cmd);
  /* Messages carry plugins' and files' text: never raw control characters. */
  cli_fputs_escaped(n >= 0 ? msg : "(out of memory formatting the message)", stderr);
  fputc('\n', stderr);
  if (n >= 0) free(msg);
  return 1;
}

int cli_usage(const char *cmd, const char *usage) {
  fprintf(stderr, "floe %s: %s; see 'floe help %s'\n", cmd, usage, cmd);
  return 2;
}

int cli_int_option(const char *cmd, const char *option, const char *s, long long lo,
                   long long hi, long long *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (!errno && end != s && !*end && v >= lo && v <= hi) {
    *out = v;
    return 0;
  }
  char msg[256];
  snprintf(msg, sizeof msg, "%s takes an integer from %lld to %lld, got '%.40s'", option, lo, hi,
           s);
  return cli_usage(cmd, msg);
}

int cli_number_option(const char *cmd, const char *option, const char *s, double lo,
                      int lo_open, double hi, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (!errno && end != s && !*end && isfinite(v) && (lo_open ? v > lo : v >= lo) && v <= hi) {
    *out = v;
    return 0;
  }
  char msg[256];
  if (lo_open)
    snprintf(msg, sizeof msg, "%s takes a number greater than %.10g and at most %.10g, got "
             "'%.40s'", option, lo, hi, s);
  else
    snprintf(msg, sizeof msg, "%s takes a number from %.10g to %.10g, got '%.40s'", option, lo,
             hi, s);
  return cli_usage(cmd, msg);
}

/* Levenshtein distance of a and b[0..bn), capped at 64 characters. */
static size_t edit_distance(const char *a, const char *b, size_t bn) {
  size_t an = strlen(a), row[65];
  if (an > 64 || bn > 64) return 99;
  for (size_t j = 0; j <= bn; j++) row[j] = j;
  for (size_t i = 1; i <= an; i++) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= bn; j++) {
      size_t up = row[j], best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  return row[bn];
}

const char *cli_closest(const char *word, size_t n, const char *const *names, size_t count) {
  const char *best = NULL;
  size_t best_d = n / 3 + 1 < 3 ? n / 3 + 1 : 3; /* at most this many edits */
  for (size_t i = 0; i < count; i++) {
    size_t d = edit_distance(names[i], word, n);
    if (d <= best_d && (!best || d < best_d)) best = names[i], best_d = d;
  }
  return best;
}

int cli_bad_option(const char *cmd, int c, char **argv, const struct option *opts) {
  char msg[400];
  const char *arg = argv[optind - 1];
  if (c == ':') {
    snprintf(msg, sizeof msg, "option '%s' needs a value", arg);
    return cli_usage(cmd, msg);
  }
  const char *name = arg + 2, *eq = strchr(name, '=');
  size_t n = eq ? (size_t)(eq - name) : strlen(name), nopts = 0, nprefix = 0;
  int is_long = !strncmp(arg, "--", 2) && !optopt;
  for (const struct option *o = opts; o->name && !is_long && !strncmp(arg, "--", 2); o++)
    is_long = o->val == optopt && !strncmp(o->name, name, n); /* --json=1 sets optopt 'j' */
  if (!is_long) {
    snprintf(msg, sizeof msg, "unknown option '-%c'", optopt ? optopt : '?');
    return cli_usage(cmd, msg);
  }
  const char *names[64];
  int len = 0;
  for (const struct option *o = opts; o->name && nopts < 64; o++) {
    if (!strncmp(o->name, "limit", 6)) continue; /* a test-only option stays unsuggested */
    names[nopts++] = o->name;
    if (eq && !strncmp(o->name, name, n) && o->has_arg == no_argument) {
      snprintf(msg, sizeof msg, "option '--%s' takes no value", o->name);
      return cli_usage(cmd, msg);
    }
  }
  char list[200] = "";
  for (size_t i = 0; i < nopts; i++)
    if (!strncmp(names[i], name, n) && n) {
      nprefix++;
      if (len < (int)sizeof list - 40)
        len += snprintf(list + len, sizeof list - (size_t)len, "%s--%s", nprefix > 1 ? ", " : "",
                        names[i]);
    }
  if (nprefix > 1) {
    snprintf(msg, sizeof msg, "option '--%.*s' is ambiguous (%s)", (int)n, name, list);
    return cli_usage(cmd, msg);
  }
  const char *near = cli_closest(name, n, names, nopts);
  if (near)
    snprintf(msg, sizeof msg, "unknown option '--%.*s' (did you mean --%s?)", (int)n, name, near);
  else snprintf(msg, sizeof msg, "unknown option '--%.*s'", (int)n, name);
  return cli_usage(cmd, msg);
}

int cli_term_columns(void) {
  struct winsize ws;
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  const char *env = getenv("COLUMNS");
  char *end;
  long n = env ? strtol(env, &end, 10) : 0;
  if (env && *env && !*end && n > 0 && n < 10000) return (int)n;
  return 80;
}

FloeRuntime *cli_runtime(const char *cmd) {
  FloeStatus *st = floe_status_new();
  FloeRuntime *rt = floe_runtime_default(st);
  if (!rt) cli_error(cmd, "cannot start the runtime: %s", floe_status_message(st));
  floe_status_free(st);
  return rt;
}

static const struct {
  const char *name;
  int (*fn)(int, char **);
  const char *summary;
} commands[] = {
    {"devices", cmd_devices, "list the devices the plugins provide"},
    {"plugins", cmd_plugins, "list the plugins found, loaded, refused and why"},
    {"ops", cmd_ops, "list the defined ops"},
    {"run", cmd_run, "run a graph file: feed .npy files, fetch tensors"},
    {"graph", cmd_graph, "describe a graph file, or draw it as Graphviz DOT"},
    {"train", cmd_train, "train an MLP or a CNN on Fashion-MNIST"},
    {"export", cmd_export, "write a graph file as an ONNX model"},
    {"inspect", cmd_inspect, "summarise a graph, ONNX, safetensors or .npy file"},
    {"onnx-test", cmd_onnx_test, "run ONNX backend test cases and compare the outputs"},
    {"server", cmd_server, "serve one task of a cluster until SIGTERM"},
    {"launch", cmd_launch, "start a cluster on this machine and run a command as its chief"},
};

static void usage(FILE *out) {
  fprintf(out,
          "Usage: floe COMMAND [OPTIONS]\n"
          "Floe %s: a dataflow machine-learning runtime.\n\nCommands:\n",
          PACKAGE_VERSION);
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
  fprintf(out,
          "\n'floe help COMMAND' (or 'floe COMMAND --help') shows a command's options; most take\n"
          "--json.\n"
          "Environment: FLOE_PLUGIN_PATH (colon-separated plugin folders), FLOE_PLUGINS\n"
          "(comma-separated plugin names to load), FLOE_NUM_THREADS, FLOE_LOG_LEVEL.\n");
}

#define NUM_COMMANDS (sizeof commands / sizeof commands[0])

/* "floe: unknown command 'x' (did you mean y?); see 'floe help'", one line; returns 2. */
static int unknown_command(const char *who, const char *name) {
  const char *names[NUM_COMMANDS];
  for (size_t i = 0; i < NUM_COMMANDS; i++) names[i] = commands[i].name;
  const char *near = cli_closest(name, strlen(name), names, NUM_COMMANDS);
  fprintf(stderr, "%s: unknown command '%s'", who, name);
  if (near) fprintf(stderr, " (did you mean %s?)", near);
  fprintf(stderr, "; see 'floe help'\n");
  return 2;
}

/* floe help CMD [ARGS...]: CMD's own --help (ARGS such as --model lstm pick a variant). */
static int help(int argc, char **argv) {
  for (size_t i = 0; i < NUM_COMMANDS; i++) {
    if (strcmp(argv[0], commands[i].name)) continue;
    char **args = calloc((size_t)argc + 2, sizeof *args);
    if (!args) return cli_error("help", "out of memory");
    for (int k = 0; k < argc; k++) args[k] = argv[k];
    args[argc] = (char *)"--help";
    int rc = commands[i].fn(argc + 1, args);
    free(args);
    return rc;
  }
  return unknown_command("floe help", argv[0]);
}

/* Run from the build tree (not installed) with no FLOE_PLUGIN_PATH: use the plugins built
 * beside it, so `./tools/floe train` works right after `make`. */
static void use_build_tree_plugins(void) {
#if defined(FLOE_BUILD_TOOLS_DIR) && defined(FLOE_BUILD_PLUGIN_PATH)
  if (getenv("FLOE_PLUGIN_PATH")) return;
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  size_t len = strlen(FLOE_BUILD_TOOLS_DIR);
  if (n <= 0) return;
  exe[n] = 0;
  if (strncmp(exe, FLOE_BUILD_TOOLS_DIR, len) == 0 && exe[len] == '/')
    setenv("FLOE_PLUGIN_PATH", FLOE_BUILD_PLUGIN_PATH, 1), cli_builtin_plugin_path = 1;
#endif
}

int main(int argc, char **argv) {
  /* Past the file-size limit (ulimit -f) a write fails with EFBIG, reported like any write
   * error, instead of the default SIGXFSZ killing the tool without a word (the library
   * checks the limit before its own writes; this covers traces, dot files and the rest). */
  signal(SIGXFSZ, SIG_IGN);
  use_build_tree_plugins();
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
      (!strcmp(argv[1], "help") && argc == 2)) {
    usage(stdout);
    return 0;
  }
  if (!strcmp(argv[1], "help")) return help(argc - 2, argv + 2);
  if (!strcmp(argv[1], "--version")) {
    /* The library's own version: the one that runs, even if another libfloe is found. */
    printf("floe %s\n", floe_version());
    return 0;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
  return unknown_command("floe", argv[1]);
}
