// A test-only Backend that runs every collective through the store: each rank
// publishes its data, waits for everyone's, and computes the result locally.
// Slow but obviously correct, so ProcessGroup's own logic (queues, sequence
// numbers, half-type reductions, AVG, errors, debug checks) is tested independently of any
// real transport. Registered as "store" by register_store_backend().
#pragma once

#include "tessera/comm/base/backend.h"

namespace tessera::testing {

void register_store_backend();

}  // namespace tessera::testing
