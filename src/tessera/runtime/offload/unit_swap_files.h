// UnitSwapFiles: what one ZeRO unit keeps on disk under nvme offload, shared by
// the optimizer swapper and the parameter store.
//   param   the unit's parameter shard (the optimizer's float32 master weights),
//           when the unit is a stage-3 unit and offload_param is on; else null
//           (the shard stays in memory)
//   fields  one file per optimizer state field of the unit's parameter group
//           (param_state_fields(): Adam's exp_avg and exp_avg_sq, ...)
// plus what the optimizer keeps per parameter besides tensors (Adam's step).
// A plain struct owned by NvmeOffload.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/runtime/offload/swap_file.h"

namespace tessera::runtime::offload {

struct UnitSwapFiles {
  int64_t numel = 0;  // the shard's elements
  at::ScalarType dtype = at::kFloat;
  size_t group = 0;   // the unit's optimizer parameter group
  std::unique_ptr<SwapFile> param;
  std::vector<std::string> field_names;
  std::vector<std::unique_ptr<SwapFile>> fields;
  bool has_state = false;  // the optimizer has stepped this unit (the fields hold state)
  int64_t step = 0;        // Adam's step count of every piece of the shard
};

}  // namespace tessera::runtime::offload
