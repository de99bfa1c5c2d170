// MpiBackend: the collectives over Open MPI, for jobs started by mpirun.
//
// One backend per ProcessGroup, each on its own communicator: a duplicate of
// MPI_COMM_WORLD when the group is the whole world, else a communicator made with
// MPI_Comm_create_group from the group's global ranks (collective over the group's
// members only, as new_subgroup() is). Every op maps to one MPI call: all_reduce
// -> MPI_Iallreduce, broadcast -> MPI_Ibcast, all_gather -> MPI_Iallgatherv,
// reduce_scatter -> MPI_Ireduce_scatter, all_to_all -> MPI_Ialltoallv, send/recv
// -> MPI_Isend/MPI_Irecv with the caller's tag, barrier -> MPI_Ibarrier.
//
// Requirements: the process was started by mpirun (OMPI_COMM_WORLD_SIZE is set)
// and holds exactly one rank of the group (its global rank is its MPI world rank);
// the factory throws ConfigError otherwise. MPI is initialized on first use
// (MPI_THREAD_MULTIPLE, see mpi_runtime.h for why) and finalized at exit.
//
// Half and bfloat16: MPI has no arithmetic for them, so reduces_natively() is
// false for both and the ProcessGroup reduces them through all_to_all and
// all_gather of 16-bit words combined in float32 (half_reduction.h); they move
// as 16-bit words in every op.
//
// Timeouts: MPI collectives cannot be cancelled. Each op is started non-blocking
// and polled with MPI_Test until options().timeout passes, then it throws
// TimeoutError. The request stays pending inside MPI (its buffers are kept alive),
// so after a timeout the group is unusable: the job should exit, and mpirun then
// terminates every rank. A rank that dies makes mpirun terminate the job too.
//
// Thread safety: as the Backend contract says (collectives on one thread, send
// and recv on one thread each, concurrently); abort() from any thread.
#pragma once

#include <memory>

#include "tessera/comm/base/backend.h"

namespace tessera::comm {

// Factory registered as "mpi" in backend_registry.cpp. Collective over the group.
// ConfigError when not started by mpirun or not one group rank per process.
std::unique_ptr<Backend> make_mpi_backend(const BackendContext& ctx);

}  // namespace tessera::comm
