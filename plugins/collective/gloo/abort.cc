// SPDX-License-Identifier: Apache-2.0
// abort.cc - fail_all_pairs (see abort.h).
//
// Gloo's tcp context has the function: the exported, non-virtual
// gloo::transport::tcp::Context::signalException(const std::string &), which it calls when an
// operation times out. But its header, gloo/transport/tcp/context.h, includes
// gloo/common/memory.h, which this Gloo (0.5.0, git 5b14351, Debian's libgloo-dev) does not
// install, so the header cannot be compiled. This file declares that one member of the class
// instead and never includes the real header (nothing else here may include it either). The
// call is checked: it is made only when the context's dynamic type is that class, and -z defs
// makes a Gloo without the symbol fail at link time, not at run time.
#include "abort.h"

#include <typeinfo>

#include <gloo/transport/context.h>

namespace gloo {
namespace transport {
namespace tcp {
// The one member used (see above); the class's real first base is transport::Context, so a
// tcp context's address is that of its transport::Context.
class Context {
 public:
  void signalException(const std::string &msg);
};
}  // namespace tcp
}  // namespace transport
}  // namespace gloo

namespace floe_gloo {

bool fail_all_pairs(gloo::transport::Context *tc, const std::string &msg) {
  if (!tc) return false;
  // Itanium name of gloo::transport::tcp::Context: the check holds without the class.
  if (std::string(typeid(*tc).name()) != "N4gloo9transport3tcp7ContextE") return false;
  reinterpret_cast<gloo::transport::tcp::Context *>(tc)->signalException(msg);
  return true;
}

}  // namespace floe_gloo
