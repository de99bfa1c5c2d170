#include "tessera/comm/mpi/mpi_runtime.h"

#include <cstdlib>

#include "tessera/core/env.h"
#include "tessera/core/logging.h"

namespace tessera::comm::mpi {
namespace {

std::once_flag g_init_once;
int g_thread_level = MPI_THREAD_SINGLE;

std::mutex& serial_mutex() {
  static std::mutex mu;
  return mu;
}

void finalize_at_exit() {
  int initialized = 0, done = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&done);
  if (initialized && !done) MPI_Finalize();
}

}  // namespace

std::string error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, len);
}

bool launched_by_mpirun() { return env::get("OMPI_COMM_WORLD_SIZE").has_value(); }

void ensure_initialized() {
  TS_CHECK_T(ConfigError, launched_by_mpirun(),
             "the mpi backend needs one process per rank started by mpirun "
             "(OMPI_COMM_WORLD_SIZE is not set); launch with `mpirun -np N ...` or pick "
             "another backend with --backend / TESSERA_BACKEND");
  std::call_once(g_init_once, [] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) {
      // The application initialized MPI itself: use whatever level it chose.
      MPI_Query_thread(&g_thread_level);
      return;
    }
    int provided = MPI_THREAD_SINGLE;
    TS_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    g_thread_level = provided;
    std::atexit(finalize_at_exit);
    if (provided < MPI_THREAD_SERIALIZED) {
      TS_LOG(WARN) << "MPI provides thread level " << provided
                   << " (< MPI_THREAD_SERIALIZED); the mpi backend serializes every call";
    }
  });
  TS_CHECK_T(ConfigError, g_thread_level >= MPI_THREAD_SERIALIZED,
             "the mpi backend needs MPI_THREAD_SERIALIZED or better, MPI provides level ",
             g_thread_level, "; initialize MPI with MPI_Init_thread(MPI_THREAD_MULTIPLE)");
}

int thread_level() { return g_thread_level; }

std::unique_lock<std::mutex> call_lock() {
  if (g_thread_level >= MPI_THREAD_MULTIPLE) return std::unique_lock<std::mutex>();
  return std::unique_lock<std::mutex>(serial_mutex());
}

bool finalized() {
  int done = 0;
  MPI_Finalized(&done);
  return done != 0;
}

MPI_Datatype datatype_of(at::ScalarType dtype, bool for_reduction) {
  switch (dtype) {
    case at::kFloat: return MPI_FLOAT;
    case at::kDouble: return MPI_DOUBLE;
    case at::kInt: return MPI_INT32_T;
    case at::kLong: return MPI_INT64_T;
    case at::kShort: return MPI_INT16_T;
    case at::kChar: return MPI_INT8_T;
    case at::kByte: return MPI_UINT8_T;
    case at::kBool: return MPI_C_BOOL;
    case at::kHalf:
    case at::kBFloat16:
      if (!for_reduction) return MPI_UINT16_T;
      break;
    default: break;
  }
  TS_THROW(CommError, "backend mpi does not support ", for_reduction ? "reductions of " : "",
           "dtype ", c10::toString(dtype));
}

MPI_Op op_of(ReduceOp op, at::ScalarType dtype) {
  bool logical = dtype == at::kBool;
  switch (op) {
    case ReduceOp::kSum: return logical ? MPI_LOR : MPI_SUM;
    case ReduceOp::kMax: return logical ? MPI_LOR : MPI_MAX;
    case ReduceOp::kMin: return logical ? MPI_LAND : MPI_MIN;
    case ReduceOp::kProduct: return logical ? MPI_LAND : MPI_PROD;
    case ReduceOp::kAvg: break;
  }
  TS_THROW(CommError, "backend mpi does not support reduce op ", to_string(op),
           " (the ProcessGroup runs avg as sum then divide)");
}

}  // namespace tessera::comm::mpi
