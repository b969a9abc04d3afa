/* SPDX-License-Identifier: Apache-2.0 */
/* version_check.c - floe_version() of the linked libfloe and the FLOE_VERSION_* macros of
 * floe/floe_version.h agree with each other and with configure's PACKAGE_VERSION. Prints
 * the version on success (test_version.sh compares it with `floe --version`). */
#include <stdio.h>
#include <string.h>

#include <floe/floe.h>
#include <floe/floe_version.h>

#include "config.h"

int main(void) {
  int fails = 0;
  char joined[64];
  snprintf(joined, sizeof joined, "%d.%d.%d", FLOE_VERSION_MAJOR, FLOE_VERSION_MINOR,
           FLOE_VERSION_PATCH);
  const char *lib = floe_version();
  if (!lib || strcmp(lib, FLOE_VERSION_STRING) != 0) {
    fprintf(stderr, "FAIL: floe_version() is \"%s\", FLOE_VERSION_STRING \"%s\"\n",
            lib ? lib : "(null)", FLOE_VERSION_STRING);
    fails++;
  }
  if (strcmp(joined, FLOE_VERSION_STRING) != 0) {
    fprintf(stderr, "FAIL: FLOE_VERSION_MAJOR.MINOR.PATCH is %s, FLOE_VERSION_STRING \"%s\"\n",
            joined, FLOE_VERSION_STRING);
    fails++;
  }
  if (strcmp(FLOE_VERSION_STRING, PACKAGE_VERSION) != 0) {
    fprintf(stderr, "FAIL: FLOE_VERSION_STRING \"%s\", configure's version \"%s\"\n",
            FLOE_VERSION_STRING, PACKAGE_VERSION);
    fails++;
  }
  if (FLOE_VERSION_NUMBER != FLOE_VERSION_AT(FLOE_VERSION_MAJOR, FLOE_VERSION_MINOR,
                                             FLOE_VERSION_PATCH) ||
      FLOE_VERSION_AT(0, 9, 9) >= FLOE_VERSION_AT(1, 0, 0)) {
    fprintf(stderr, "FAIL: FLOE_VERSION_NUMBER / FLOE_VERSION_AT do not order versions\n");
    fails++;
  }
  if (fails) return 1;
  printf("%s\n", lib);
  return 0;
}
