/* SPDX-License-Identifier: Apache-2.0 */
/* floe.c - the floe command: devices, plugins, ops, run, graph, train. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "config.h"

int cli_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "floe %s: ", cmd);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  return 1;
}

int cli_usage(const char *cmd, const char *usage) {
  fprintf(stderr, "floe %s: %s\nTry 'floe %s --help'.\n", cmd, usage, cmd);
  return 2;
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
    {"onnx-test", cmd_onnx_test, "run ONNX backend test cases and compare the outputs"},
};

static void usage(FILE *out) {
  fprintf(out,
          "Usage: floe COMMAND [OPTIONS]\n"
          "Floe %s: a dataflow machine-learning runtime.\n\nCommands:\n",
          PACKAGE_VERSION);
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
  fprintf(out,
          "\nEvery command takes --help; most take --json.\n"
          "Environment: FLOE_PLUGIN_PATH (colon-separated plugin folders), FLOE_PLUGINS\n"
          "(comma-separated plugin names to load), FLOE_NUM_THREADS, FLOE_LOG_LEVEL.\n");
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
    setenv("FLOE_PLUGIN_PATH", FLOE_BUILD_PLUGIN_PATH, 1);
#endif
}

int main(int argc, char **argv) {
  use_build_tree_plugins();
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
    usage(stdout);
    return 0;
  }
  if (!strcmp(argv[1], "--version")) {
    /* The library's own version: the one that runs, even if another libfloe is found. */
    printf("floe %s\n", floe_version());
    return 0;
  }
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
  fprintf(stderr, "floe: unknown command '%s'\n", argv[1]);
  usage(stderr);
  return 2;
}
