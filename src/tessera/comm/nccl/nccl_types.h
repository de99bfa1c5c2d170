// Mapping of Tessera dtypes and reduce ops onto NCCL's enums, and NCCL result
// codes onto Tessera errors. Pure functions: need no GPU, only NCCL's headers.
// Internal (comm/nccl/ is built only with TESSERA_WITH_NCCL).
//
// Supported dtypes: float32, float64, bfloat16, float16, int32, int64, uint8,
// int8. Any other dtype (bool, complex, int16, float8...) is a CommError
// "backend nccl does not support dtype X", the wording every backend uses.
// Reduce ops: sum, avg (ncclAvg; floating types only, as NCCL requires), min,
// max, product.
#pragma once

#include <ATen/core/Tensor.h>
#include <nccl.h>

#include <string>

#include "tessera/comm/base/reduce_op.h"

namespace tessera::comm::nccl {

// True if NCCL can carry `dtype`.
bool supports_dtype(at::ScalarType dtype);
// NCCL's type for `dtype`; CommError naming the dtype when NCCL has none.
ncclDataType_t to_nccl_dtype(at::ScalarType dtype);
// NCCL's reduction for `op` on `dtype`; CommError for avg on integer types.
ncclRedOp_t to_nccl_op(ReduceOp op, at::ScalarType dtype);
// "ncclUnhandledCudaError (unhandled cuda error ...)": code name and NCCL's text.
std::string describe_result(ncclResult_t result);

}  // namespace tessera::comm::nccl
