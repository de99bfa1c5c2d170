// Cross-rank collective verification for TESSERA_DEBUG=detail.
//
// Before collective #seq runs, each rank publishes its signature (op, dtype,
// shape, reduce op, root) under dbg/<seq>/<rank> in the group's store and reads
// everyone else's. A difference is a CommError naming both ranks and both
// signatures; a rank that never arrives is a TimeoutError naming it. This turns
// the classic silent hang of mismatched collectives into an error, at the price
// of one store round trip per rank per collective (debug mode only).
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <string>

#include "tessera/comm/base/store.h"
#include "tessera/core/error.h"

namespace tessera::comm {

// Thrown for a detected mismatch; already carries the whole story.
class CollectiveMismatchError : public CommError {
 public:
  using CommError::CommError;
};

// "float32[4, 5]"
std::string describe_tensor(const at::Tensor& t);

void verify_collective(Store& store, int rank, int size, uint64_t seq,
                       const std::string& signature, std::chrono::milliseconds timeout);

}  // namespace tessera::comm
