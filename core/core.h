/* SPDX-License-Identifier: Apache-2.0 */
/* core.h - the top of libfloe (builtin.c and host.c in core/), which may use every layer,
 * and what the layers above libfloe's core use (the ONNX importer, white-box tests): every
 * layer's header, and the top's own declarations. */
#ifndef FLOE__LAYER_CORE_H
#define FLOE__LAYER_CORE_H

#include "data/data.h"
#include "train/train.h"

/* builtin.c, for host.c: the default runtime's pool if it was created, else NULL. */
FloeThreadPool *floe__runtime_default_pool(void);

#endif /* FLOE__LAYER_CORE_H */
