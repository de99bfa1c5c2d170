// MpiRuntime: the process-wide side of the mpi backend (internal to comm/mpi/).
//
// MPI is initialized at most once per process, by the first mpi backend built,
// and finalized at exit. This header includes <mpi.h>, so only the mpi backend's
// own .cpp files include it; the backend's public header does not.
//
// Thread level: the ProcessGroup runs collectives on one thread and sends and
// receives on two others, concurrently, so MPI_THREAD_SERIALIZED is not enough
// for blocking calls. We ask for MPI_THREAD_MULTIPLE. Every MPI call the backend
// makes is non-blocking (MPI_I* + MPI_Test polling, which is also how ops time
// out), so when the library only provides MPI_THREAD_SERIALIZED the backend
// stays correct by holding call_lock() around each individual call.
//
// Errors: TS_MPI_CHECK(call) turns a non-MPI_SUCCESS return into a CommError that
// names the call and MPI_Error_string's text. Communicators the backend creates
// use MPI_ERRORS_RETURN so errors come back as codes instead of aborting the job.
//
// Thread safety: every function may be called from any thread.
#pragma once

// Only the C API: keep any C++ bindings (removed in MPI-3) out of our TUs.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <ATen/core/Tensor.h>

#include <mutex>
#include <string>

#include "tessera/comm/base/reduce_op.h"
#include "tessera/core/check.h"

namespace tessera::comm::mpi {

// MPI_Error_string of an MPI return code.
std::string error_string(int code);

#define TS_MPI_CHECK(call)                                                           \
  do {                                                                               \
    int ts_mpi_rc_ = (call);                                                         \
    if (C10_UNLIKELY(ts_mpi_rc_ != MPI_SUCCESS)) {                                   \
      TS_THROW(CommError, "mpi backend: " #call " failed: ",                         \
               ::tessera::comm::mpi::error_string(ts_mpi_rc_));                      \
    }                                                                                \
  } while (0)

// True when this process was started by Open MPI's mpirun (OMPI_COMM_WORLD_SIZE).
bool launched_by_mpirun();

// Initializes MPI once (MPI_Init_thread asking for MPI_THREAD_MULTIPLE) and
// registers MPI_Finalize at exit. ConfigError when not started by mpirun.
void ensure_initialized();

// The thread level MPI provided (valid after ensure_initialized()).
int thread_level();

// Lock to hold around one MPI call: a real lock when MPI lacks
// MPI_THREAD_MULTIPLE, an unlocked (deferred) one otherwise.
std::unique_lock<std::mutex> call_lock();

// True once MPI_Finalize ran (destructors must not touch MPI afterwards).
bool finalized();

// MPI datatype of a tensor dtype. `for_reduction`: half types have no MPI
// arithmetic type, so they are only accepted for data movement (as 16-bit words).
// CommError "backend mpi does not support ..." otherwise.
MPI_Datatype datatype_of(at::ScalarType dtype, bool for_reduction);

// MPI_Op of a reduction; bool tensors reduce with logical or/and.
MPI_Op op_of(ReduceOp op, at::ScalarType dtype);

}  // namespace tessera::comm::mpi
