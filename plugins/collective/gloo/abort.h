// SPDX-License-Identifier: Apache-2.0
// abort.h - failing every pending operation of a Gloo tcp context at once (comm_abort, and a
// comm's first failure), which Gloo's public API does not offer.
#ifndef FLOE_GLOO_ABORT_H
#define FLOE_GLOO_ABORT_H

#include <string>

namespace gloo {
namespace transport {
class Context;
}
}  // namespace gloo

namespace floe_gloo {

// Makes every pending and later send or receive of tc throw gloo::IoException(msg) and
// closes its connections (what Gloo does itself when an operation times out). False when tc
// is not a tcp context (then nothing happened).
bool fail_all_pairs(gloo::transport::Context *tc, const std::string &msg);

}  // namespace floe_gloo

#endif
