/* SPDX-License-Identifier: Apache-2.0 */
/* cli.h - shared pieces of the floe command's subcommands. */
#ifndef FLOE_TOOLS_CLI_H
#define FLOE_TOOLS_CLI_H

#include <stddef.h>
#include <stdio.h>

#include <floe/floe.h>
#include <floe/floe_dist.h>

#include "json.h"

/* Each subcommand: argc/argv start at the subcommand's name. Returns the exit status. */
int cmd_devices(int argc, char **argv);
int cmd_plugins(int argc, char **argv);
int cmd_ops(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_graph(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_onnx_test(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_server(int argc, char **argv);
int cmd_launch(int argc, char **argv);
/* cmd_onnx_test.c: whether path names an ONNX model (.onnx), and a tensor from a .npy or an
 * ONNX TensorProto .pb file (caller releases; NULL with st set). */
int cli_is_onnx(const char *path);
FloeTensor *cli_load_tensor(const char *path, FloeStatus *st);
/* floe train --model lstm (train_lstm.c), called by cmd_train. */
int cmd_train_lstm(int argc, char **argv);

/* escape.c: s with its control characters (C0, DEL, and C1 as UTF-8) written as \xNN, for
 * text from plugins, graphs and models printed to a terminal. cli_escape: malloc'd (caller
 * frees; NULL when out of memory, or for a NULL s ""); cli_fputs_escaped: to f. */
char *cli_escape(const char *s);
void cli_fputs_escaped(const char *s, FILE *f);

/* Prints "floe CMD: message" to stderr, the message's control characters escaped; returns 1
 * (or 2 for usage errors via cli_usage). */
int cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int cli_usage(const char *cmd, const char *usage);
/* Serves s until floe_server_stop, SIGTERM or SIGINT (which stop it), or timeout_ms (< 0:
 * none): 0, -1 (nothing printed) when timeout_ms passed, or the exit status after printing
 * why (cmd_server.c). s stays the caller's. */
int cli_server_serve(const char *cmd, FloeServer *s, int64_t timeout_ms);
/* 1 when the last cli_server_serve ended by SIGTERM or SIGINT (not by the chief leaving). */
int cli_server_signalled(void);
/* A numeric option's value: the whole of s, in range, into *out; 0, or prints the one usage
 * line that names the option, its range and what was given ("--threads takes an integer from
 * 1 to 4096, got '100000'") and returns 2. cli_number_option: a finite number, lo excluded
 * when lo_open ("greater than 0 and at most 3.4e+38"). */
int cli_int_option(const char *cmd, const char *option, const char *s, long long lo,
                   long long hi, long long *out);
int cli_number_option(const char *cmd, const char *option, const char *s, double lo,
                      int lo_open, double hi, double *out);
/* The largest learning rate, clip norm and so on a float option takes: the values become f32
 * in the graph, whose largest finite value is 3.40282e+38. */
#define CLI_F32_MAX 3.4e38
/* For getopt_long run with opterr = 0 and a leading ':' in the short options: prints the one
 * line about the option that getopt returned c ('?' or ':') for (unknown, ambiguous, missing or
 * unwanted value, with the closest known --name suggested) and returns 2. */
struct option;
int cli_bad_option(const char *cmd, int c, char **argv, const struct option *opts);
/* The names[i] nearest word[0..n) by edit distance (a few edits at most), or NULL. */
const char *cli_closest(const char *word, size_t n, const char *const *names, size_t count);
/* plugin_check.c: the warnings about FLOE_PLUGINS, FLOE_PLUGIN_PATH and the files of the plugin
 * folders, as *out (an array of count strings, all the caller's to free). -1 on out of memory. */
int cli_plugin_warnings(FloeRuntime *rt, char ***out);
/* plugin_check.c, for floe run and floe train before they run anything: says on stderr each
 * plugin that did not load, its text escaped: a warning for one refused (another ABI, not a
 * plugin, a library missing) or a duplicate; an error for one whose initialisation failed
 * (FLOE_PLUGIN_FAILED: a bad setting such as FLOE_CPU_DEVICES=abc, a broken install), then a
 * line on how to go on without it (FLOE_PLUGINS). 0: go on; 1 (printed): a plugin failed, stop
 * rather than run the graph on whatever devices are left. */
int cli_check_plugins(const char *cmd, FloeRuntime *rt);
/* Set when FLOE_PLUGIN_PATH is the build tree's own (a run from the build tree), whose
 * folders of plugins not built (cuda) are no user's mistake. */
extern int cli_builtin_plugin_path;
/* The width of the terminal on stdout (TIOCGWINSZ), else $COLUMNS, else 80. */
int cli_term_columns(void);
/* The process runtime from the environment; prints the error and returns NULL on failure. */
FloeRuntime *cli_runtime(const char *cmd);

#endif
