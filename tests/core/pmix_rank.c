/* SPDX-License-Identifier: Apache-2.0 */
/* pmix_rank.c - one rank of tests/core/test_pmix.sh (run under mpirun -np N): builds the
 * cluster from PMIx (core/dist/pmix.c) with this rank's made-up address 127.0.0.1:(30000 +
 * rank), checks every rank's address, its own task and the job's size against the
 * launcher's own variables, then gathers a binary blob with a NUL inside. Prints one line
 * "rank R of N: ok" or the failure; exits 0 only when all was right. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"

static int fail(const char *what, FloeStatus *st) {
  printf("FAIL: %s: %s\n", what, st ? floe_status_message(st) : "");
  return 1;
}

int main(void) {
  if (!floe__pmix_detect()) return fail("no PMIx launcher in the environment", NULL);
  const char *r_env = getenv("OMPI_COMM_WORLD_RANK"), *n_env = getenv("OMPI_COMM_WORLD_SIZE");
  if (!r_env) r_env = getenv("PMIX_RANK");
  int rank = r_env ? atoi(r_env) : -1, size = n_env ? atoi(n_env) : -1;
  char mine[32];
  snprintf(mine, sizeof mine, "127.0.0.1:%d", 30000 + rank);
  FloeStatus st = {FLOE_OK, NULL};
  FloeClusterSpec *spec = NULL;
  if (floe__cluster_from_pmix(mine, &spec, &st) != FLOE_OK) return fail("cluster_from_pmix", &st);
  if (size > 0 && spec->num_tasks != size) return fail("the cluster's size is not the job's", NULL);
  if (strncmp(spec->source, "PMIx (namespace ", 16) != 0) return fail(spec->source, NULL);
  for (int r = 0; r < spec->num_tasks; r++) {
    FloeTaskRef ref = r == 0 ? (FloeTaskRef){0, 0} : (FloeTaskRef){1, r - 1};
    char want[32];
    snprintf(want, sizeof want, "127.0.0.1:%d", 30000 + r);
    const char *got = floe__cluster_address(spec, ref);
    if (!got || strcmp(got, want) != 0) return fail("a rank's address is wrong", NULL);
  }
  const char *self = floe__cluster_address(spec, spec->self);
  if (!self || strcmp(self, mine) != 0) return fail("this task is not this rank", NULL);
  int n = spec->num_tasks;
  floe__cluster_free(spec);

  /* Binary blobs of different lengths, NUL bytes inside. */
  FloePmix *p = NULL;
  int prank, psize;
  if (floe__pmix_open(NULL, &p, &prank, &psize, &st) != FLOE_OK) return fail("pmix_open", &st);
  if (prank != rank || psize != n) return fail("PMIx's rank or size differs", NULL);
  uint8_t blob[64];
  for (int i = 0; i < 64; i++) blob[i] = (uint8_t)(i * 7 + rank);
  blob[3] = 0;
  uint8_t **blobs = NULL;
  size_t *lens = NULL;
  if (floe__pmix_allgather(p, "floe.test.blob", blob, (size_t)(10 + rank), &blobs, &lens, &st) !=
      FLOE_OK)
    return fail("allgather", &st);
  for (int r = 0; r < psize; r++) {
    if (lens[r] != (size_t)(10 + r)) return fail("a blob's length is wrong", NULL);
    for (size_t i = 0; i < lens[r]; i++) {
      uint8_t want = i == 3 ? 0 : (uint8_t)(i * 7 + (size_t)r);
      if (blobs[r][i] != want) return fail("a blob's bytes are wrong", NULL);
    }
    floe__free(blobs[r]);
  }
  floe__free(blobs);
  floe__free(lens);
  floe__pmix_close(p);
  printf("rank %d of %d: ok\n", rank, n);
  return 0;
}
