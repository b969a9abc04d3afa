/* SPDX-License-Identifier: Apache-2.0 */
/* version.c - floe_version(): the version this libfloe was built as (configure.ac's AC_INIT,
 * through the generated floe/floe_version.h), so an application can compare it with the
 * FLOE_VERSION_STRING of the headers it was compiled against. */
#include <floe/floe.h>
#include <floe/floe_version.h>

const char *floe_version(void) { return FLOE_VERSION_STRING; }
