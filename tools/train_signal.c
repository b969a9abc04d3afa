/* SPDX-License-Identifier: Apache-2.0 */
/* train_signal.c - Ctrl-C during floe train: the handler only sets a flag; the training loop
 * looks at it after each step, saves a checkpoint there and prints how to resume. */
#include "train_signal.h"

#include <signal.h>
#include <string.h>

static volatile sig_atomic_t g_interrupted;

static void on_sigint(int sig) {
  (void)sig;
  g_interrupted = 1;
}

void train_sigint_install(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND; /* a second Ctrl-C ends the process at once */
  sigaction(SIGINT, &sa, NULL);
}

int train_sigint_pending(void) { return g_interrupted != 0; }

/* Writes s to out, single-quoted for a POSIX shell when it holds anything but safe chars. */
static void shell_word(FILE *out, const char *s) {
  if (*s && strspn(s,
                   "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                   "-_=.,/:+@%") == strlen(s)) {
    fputs(s, out);
    return;
  }
  fputc('\'', out);
  for (; *s; s++) {
    if (*s == '\'')
      fputs("'\\''", out);
    else
      fputc(*s, out);
  }
  fputc('\'', out);
}

void train_print_resume(FILE *out, int argc, char **argv) {
  int has_resume = 0;
  fputs("floe", out);
  for (int i = 0; i < argc; i++) {
    if (!strcmp(argv[i], "--resume")) has_resume = 1;
    fputc(' ', out);
    shell_word(out, argv[i]);
  }
  if (!has_resume) fputs(" --resume", out);
  fputc('\n', out);
}
