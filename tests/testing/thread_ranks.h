// Test harness: N ranks as threads of one process over a shared MemoryStore.
//
//   run_ranks(4, [](int rank, int size, std::shared_ptr<Store> store) { ... });
//
// Every rank body runs on its own thread, with its own rank context (errors say
// "[rank r/w]"); the first exception any rank throws is
// rethrown in the caller after all threads joined (GoogleTest assertions inside a
// body work too: they record failures from any thread).
#pragma once

#include <functional>
#include <memory>

#include "tessera/comm/base/store.h"
#include "tessera/comm/process_group.h"

namespace tessera::testing {

using RankBody = std::function<void(int rank, int size, std::shared_ptr<comm::Store> store)>;

void run_ranks(int world_size, const RankBody& body);

// Builds a ProcessGroup of `size` ranks with the given backend over `store`.
std::shared_ptr<comm::ProcessGroup> make_group(int rank, int size,
                                               std::shared_ptr<comm::Store> store,
                                               const std::string& backend,
                                               double timeout_seconds = 30);

}  // namespace tessera::testing
