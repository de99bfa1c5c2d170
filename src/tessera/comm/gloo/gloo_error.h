// Conversion of Gloo's exceptions into Tessera's typed errors, in one place.
//
// Gloo reports failures by throwing gloo::IoException (socket errors, a peer
// that closed, "Timed out waiting ..."), gloo::EnforceNotMet (a violated
// precondition) or other gloo::Exception subclasses. Every call into Gloo goes
// through TS_GLOO_CALL, which keeps Gloo's text and turns it into TimeoutError
// (a timeout) or CommError (anything else). Tessera errors raised underneath
// (for example by the rendezvous store) pass through unchanged.
#pragma once

#include <exception>
#include <string>

#include "tessera/core/error.h"

namespace tessera::comm {

// Throws TimeoutError or CommError for a failed Gloo call `what` (e.g.
// "all_reduce"), with Gloo's message `detail`.
[[noreturn]] void throw_gloo_error(const std::string& what, const std::string& detail);

}  // namespace tessera::comm

#define TS_GLOO_CALL(op_name, ...)                                  \
  do {                                                           \
    try {                                                        \
      __VA_ARGS__;                                               \
    } catch (const ::tessera::Error&) {                          \
      throw;                                                     \
    } catch (const std::exception& ts_gloo_e_) {                 \
      ::tessera::comm::throw_gloo_error((op_name), ts_gloo_e_.what()); \
    }                                                            \
  } while (0)
