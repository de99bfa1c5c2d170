// Helpers for the shm backend tests (ranks as threads come from
// testing/thread_ranks.h): test data that every rank can recompute, the
// reference reduction, and the check that a test left nothing in /dev/shm.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/comm/base/backend.h"
#include "tessera/comm/shm/shm_backend.h"
#include "tessera/core/error.h"

namespace tessera::comm::testing {

// Small slots and rings so modest sizes already take many chunks and wrap rings.
// slot_bytes is a multiple of 64 * {1, 2, 3, 4}.
ShmOptions small_options();

// Runs body(backend) on `size` threads, one ShmBackend each (one shared store);
// rethrows the first exception after every thread joined.
void run_shm_ranks(int size, const ShmOptions& options,
                   const std::function<void(ShmBackend&)>& body, double timeout_s = 20);

// Deterministic data of rank `rank` (different per rank, seed and dtype). Values
// stay near 1 so products of a few ranks neither overflow nor underflow.
at::Tensor rank_data(int rank, int64_t numel, at::ScalarType dtype, int seed);

// op over inputs in rank order, half types accumulated in float32, as the
// backend promises (bit for bit).
at::Tensor reference_reduce(const std::vector<at::Tensor>& inputs, ReduceOp op);

// Names under /dev/shm that start with "tessera-<pid>-" for any of the pids.
std::vector<std::string> segments_of(const std::vector<int>& pids);

}  // namespace tessera::comm::testing
