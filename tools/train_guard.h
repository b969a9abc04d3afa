/* SPDX-License-Identifier: Apache-2.0 */
/* train_guard.h - what floe train checks before it trains: that the checkpoint folder can be
 * written (before the first step, not after an epoch). */
#ifndef FLOE_TOOLS_TRAIN_GUARD_H
#define FLOE_TOOLS_TRAIN_GUARD_H

#include <stddef.h>

/* 0 when dir can hold checkpoints: it is a folder the process may write in, or it does not
 * exist yet and its nearest existing ancestor is such a folder (saving creates it). Else -1
 * with why in msg, naming the path ("... is a regular file, not a folder"). */
int train_check_checkpoint_dir(const char *dir, char *msg, size_t len);

#endif
