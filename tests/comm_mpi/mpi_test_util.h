// Helpers for the mpi backend tests, which run as real processes under mpirun
// (see CMakeLists.txt): every process runs every test in the same order, so the
// tests issue collectives in the same order on every rank. Outside mpirun the
// tests that need MPI skip and only the "refuses to start" checks run.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <numeric>
#include <vector>

#include "tessera/comm/base/backend.h"

namespace tessera::testing {

inline bool under_mpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr; }
inline int mpi_world_rank() { return std::atoi(std::getenv("OMPI_COMM_WORLD_RANK")); }
inline int mpi_world_size() { return std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE")); }

#define SKIP_UNLESS_MPIRUN() \
  if (!::tessera::testing::under_mpirun()) GTEST_SKIP() << "needs mpirun"

// Context of a group over `global_ranks` for this process (which must be in it).
inline comm::BackendContext mpi_context(std::vector<int> global_ranks, const std::string& name,
                                        double timeout_seconds = 10) {
  comm::BackendContext ctx;
  ctx.size = static_cast<int>(global_ranks.size());
  int me = mpi_world_rank();
  for (int i = 0; i < ctx.size; ++i)
    if (global_ranks[i] == me) ctx.rank = i;
  ctx.global_ranks = std::move(global_ranks);
  ctx.group_name = name;
  ctx.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000));
  return ctx;
}

inline std::vector<int> world_ranks() {
  std::vector<int> r(mpi_world_size());
  std::iota(r.begin(), r.end(), 0);
  return r;
}

// Rank r's deterministic small-integer input, exact in every dtype when summed.
inline at::Tensor rank_input(int64_t n, int rank, at::ScalarType dtype) {
  return at::remainder(at::arange(n, at::kLong) + rank, 3).to(dtype);
}

}  // namespace tessera::testing
