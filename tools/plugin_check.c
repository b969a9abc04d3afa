/* SPDX-License-Identifier: Apache-2.0 */
/* plugin_check.c - the warnings of floe plugins: names in FLOE_PLUGINS that match no plugin,
 * folders in FLOE_PLUGIN_PATH that do not exist, and shared objects in plugin folders that are
 * not plugins (not named floe-NAME.so, so never loaded); and what floe run and floe train say
 * (and refuse) about plugins that did not load. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

static int add(char ***list, int *n, const char *fmt, const char *a, const char *b) {
  char **grown = realloc(*list, (size_t)(*n + 1) * sizeof *grown);
  if (!grown) return -1;
  *list = grown;
  int len = snprintf(NULL, 0, fmt, a, b);
  char *s = len >= 0 ? malloc((size_t)len + 1) : NULL;
  if (!s) return -1;
  snprintf(s, (size_t)len + 1, fmt, a, b);
  grown[(*n)++] = s;
  return 0;
}

/* floe-NAME.so: the only files the runtime loads. */
static int plugin_name(const char *f) {
  size_t n = strlen(f);
  return n > 8 && !strncmp(f, "floe-", 5) && !strcmp(f + n - 3, ".so");
}

/* A shared object by name: "x.so" or "x.so.1". */
static int shared_object(const char *f) {
  size_t n = strlen(f);
  return (n > 3 && !strcmp(f + n - 3, ".so")) || strstr(f, ".so.") != NULL;
}

int cli_plugin_warnings(FloeRuntime *rt, char ***out) {
  char **list = NULL;
  int n = 0, failed = 0;
  const char *filter = getenv("FLOE_PLUGINS"), *path = getenv("FLOE_PLUGIN_PATH");
  int np = floe_runtime_num_plugins(rt);
  char *copy = filter ? strdup(filter) : NULL;
  for (char *save = NULL, *name = copy ? strtok_r(copy, ",", &save) : NULL; name && !failed;
       name = strtok_r(NULL, ",", &save)) {
    while (*name == ' ') name++;
    int found = 0;
    for (int i = 0; i < np && !found; i++) found = !strcmp(floe_runtime_plugin(rt, i)->name, name);
    if (*name && !found)
      failed = add(&list, &n, "FLOE_PLUGINS names '%s', which is no plugin found%s", name,
                   " (see the list of plugins)");
  }
  free(copy);
  copy = path ? strdup(path) : NULL;
  for (char *save = NULL, *dir = copy ? strtok_r(copy, ":", &save) : NULL; dir && !failed;
       dir = strtok_r(NULL, ":", &save)) {
    struct stat sb;
    if (stat(dir, &sb) != 0) {
      if (cli_builtin_plugin_path) continue;
      failed = add(&list, &n, "FLOE_PLUGIN_PATH folder '%s' does not exist%s", dir, "");
      continue;
    }
    if (!S_ISDIR(sb.st_mode)) {
      failed = add(&list, &n, "FLOE_PLUGIN_PATH entry '%s' is not a folder%s", dir, "");
      continue;
    }
    DIR *d = opendir(dir);
    if (!d) {
      failed = add(&list, &n, "cannot read the plugin folder '%s'%s", dir, "");
      continue;
    }
    for (struct dirent *e; !failed && (e = readdir(d)) != NULL;)
      if (shared_object(e->d_name) && !plugin_name(e->d_name))
        failed =
            add(&list, &n, "'%s/%s' is not loaded: plugins are named floe-NAME.so", dir, e->d_name);
    closedir(d);
  }
  free(copy);
  /* A floe-NAME.so that is no plugin (no floe_plugin_init, not a shared object) fails, or is
   * refused with no ABI found. */
  for (int i = 0; i < np && !failed; i++) {
    const FloePluginReport *p = floe_runtime_plugin(rt, i);
    if (p->state == FLOE_PLUGIN_FAILED || (p->state == FLOE_PLUGIN_REFUSED && !p->abi_major))
      failed =
          add(&list, &n, "'%s' is not a working plugin: %s", p->path, p->message ? p->message : "");
  }
  if (failed) {
    for (int i = 0; i < n; i++) free(list[i]);
    free(list);
    *out = NULL;
    return -1;
  }
  *out = list;
  return n;
}

int cli_check_plugins(const char *cmd, FloeRuntime *rt) {
  int n = floe_runtime_num_plugins(rt), failed = 0;
  for (int i = 0; i < n; i++) {
    const FloePluginReport *p = floe_runtime_plugin(rt, i);
    if (p->state != FLOE_PLUGIN_FAILED && p->state != FLOE_PLUGIN_REFUSED &&
        p->state != FLOE_PLUGIN_DUPLICATE)
      continue;
    /* UNAVAILABLE (no such hardware here) and FILTERED (FLOE_PLUGINS) are no news. */
    int fatal = p->state == FLOE_PLUGIN_FAILED;
    failed += fatal;
    fprintf(stderr, "floe %s: %splugin '", cmd, fatal ? "" : "warning: ");
    cli_fputs_escaped(p->name, stderr);
    fprintf(stderr, "' %s: ", fatal ? "failed to initialise" : "was not loaded");
    cli_fputs_escaped(p->message && *p->message ? p->message : floe_plugin_state_name(p->state),
                      stderr);
    fputc('\n', stderr);
  }
  if (!failed) return 0;
  /* Its devices are missing: the graph would run on other ones without a word. */
  fprintf(stderr, "floe %s: not running without %s (its devices would be missing and the graph "
          "would run elsewhere): fix what %s, or load only the plugins that work with "
          "FLOE_PLUGINS=", cmd, failed == 1 ? "that plugin" : "those plugins",
          failed == 1 ? "its message says" : "their messages say");
  int any = 0;
  for (int i = 0; i < n; i++) {
    const FloePluginReport *p = floe_runtime_plugin(rt, i);
    if (p->state != FLOE_PLUGIN_LOADED) continue;
    fprintf(stderr, "%s", any++ ? "," : "");
    cli_fputs_escaped(p->name, stderr);
  }
  fputs(any ? "\n" : "NAME,... (none loaded)\n", stderr);
  return 1;
}
