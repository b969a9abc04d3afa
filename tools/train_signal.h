/* SPDX-License-Identifier: Apache-2.0 */
/* train_signal.h - Ctrl-C (SIGINT) during floe train, handled at step boundaries. */
#ifndef FLOE_TOOLS_TRAIN_SIGNAL_H
#define FLOE_TOOLS_TRAIN_SIGNAL_H

#include <stdio.h>

/* Installs a SIGINT handler that only records the signal (once: a second Ctrl-C kills). */
void train_sigint_install(void);
/* Non-zero once SIGINT arrived. */
int train_sigint_pending(void);
/* Prints the command line argv[0..argc) (argv[0] "train") as "floe train ... --resume",
 * each word quoted for a POSIX shell where needed, and a newline. */
void train_print_resume(FILE *out, int argc, char **argv);

#endif
