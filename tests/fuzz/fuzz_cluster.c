/* SPDX-License-Identifier: Apache-2.0 */
/* fuzz_cluster.c - cluster specs (core/dist/cluster.c): the input as TF_CONFIG's JSON and as
 * a "host:port". A spec that parses must agree with itself: every task's address parses, and
 * every task's name looks up to that task. Every refusal has a message. */
#include "fuzz_util.h" /* first: it defines _GNU_SOURCE */
#include <string.h>

#include "core.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  FloeStatus st = {FLOE_OK, NULL};
  FloeClusterSpec *spec = NULL;
  floe_code rc = floe__cluster_parse((const char *)data, size, "fuzz", &spec, &st);
  if (rc != FLOE_OK) {
    if (spec) abort();
    FUZZ_NEED_MESSAGE(&st);
    floe_status_clear(&st);
  } else {
    int total = 0;
    for (int j = 0; j < spec->num_jobs; j++) {
      for (int t = 0; t < spec->jobs[j].num_tasks; t++) {
        FloeTaskRef ref = {j, t}, back;
        char name[128], host[FLOE__HOST_MAX + 1];
        int port;
        const char *addr = floe__cluster_address(spec, ref);
        if (!addr || floe__hostport_parse(addr, false, "fuzz", host, &port, &st) != FLOE_OK)
          abort();
        if (port != spec->jobs[j].tasks[t].port || strcmp(host, spec->jobs[j].tasks[t].host))
          abort();
        floe__cluster_task_name(spec, ref, name, sizeof name);
        if (floe__cluster_lookup(spec, name, &back, &st) != FLOE_OK) abort();
        if (back.job != j || back.task != t) abort();
        total++;
      }
    }
    if (total != spec->num_tasks || total > FLOE__CLUSTER_MAX_TASKS) abort();
    if (spec->self.job >= 0 && !floe__cluster_address(spec, spec->self)) abort();
    floe__cluster_free(spec);
  }
  /* The input as one address. */
  char *s = malloc(size + 1);
  if (!s) return 0;
  memcpy(s, data, size);
  s[size] = '\0';
  char host[FLOE__HOST_MAX + 1];
  int port;
  if (floe__hostport_parse(s, true, "fuzz", host, &port, &st) != FLOE_OK) FUZZ_NEED_MESSAGE(&st);
  else if (port < 0 || port > 65535) abort();
  floe_status_clear(&st);
  free(s);
  return 0;
}
