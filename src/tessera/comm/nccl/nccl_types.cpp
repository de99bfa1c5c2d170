#include "tessera/comm/nccl/nccl_types.h"

#include "tessera/core/check.h"

namespace tessera::comm::nccl {

bool supports_dtype(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
    case at::kDouble:
    case at::kBFloat16:
    case at::kHalf:
    case at::kInt:
    case at::kLong:
    case at::kByte:
    case at::kChar:
      return true;
    default:
      return false;
  }
}

ncclDataType_t to_nccl_dtype(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return ncclFloat32;
    case at::kDouble:
      return ncclFloat64;
    case at::kBFloat16:
      return ncclBfloat16;
    case at::kHalf:
      return ncclFloat16;
    case at::kInt:
      return ncclInt32;
    case at::kLong:
      return ncclInt64;
    case at::kByte:
      return ncclUint8;
    case at::kChar:
      return ncclInt8;
    default:
      break;
  }
  TS_THROW(CommError, "backend nccl does not support dtype ", c10::toString(dtype),
           " (supported: float32, float64, bfloat16, float16, int32, int64, uint8, int8)");
}

ncclRedOp_t to_nccl_op(ReduceOp op, at::ScalarType dtype) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kProduct:
      return ncclProd;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kAvg:
      // Tessera's integer AVG is the exact sum divided with truncation; the
      // backend runs that as ncclSum plus a division (nccl_backend.cpp).
      TS_CHECK_T(CommError, at::isFloatingType(dtype), "backend nccl does not support avg of ",
                 c10::toString(dtype));
      return ncclAvg;
  }
  TS_THROW(CommError, "backend nccl does not support reduce op ", static_cast<int>(op));
}

std::string describe_result(ncclResult_t result) {
  const char* name = "ncclResult";
  switch (result) {
    case ncclSuccess:
      name = "ncclSuccess";
      break;
    case ncclUnhandledCudaError:
      name = "ncclUnhandledCudaError";
      break;
    case ncclSystemError:
      name = "ncclSystemError";
      break;
    case ncclInternalError:
      name = "ncclInternalError";
      break;
    case ncclInvalidArgument:
      name = "ncclInvalidArgument";
      break;
    case ncclInvalidUsage:
      name = "ncclInvalidUsage";
      break;
    case ncclRemoteError:
      name = "ncclRemoteError";
      break;
    case ncclInProgress:
      name = "ncclInProgress";
      break;
    default:
      break;
  }
  return c10::str(name, " (", ncclGetErrorString(result), ")");
}

}  // namespace tessera::comm::nccl
