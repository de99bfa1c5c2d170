#include "tessera/checkpoint/model_export.h"

#include <ATen/ATen.h>

#include "tessera/checkpoint/checkpoint_reader.h"
#include "tessera/checkpoint/safetensors.h"
#include "tessera/checkpoint/sharded_tensors.h"
#include "tessera/core/check.h"

namespace tessera::checkpoint {

std::string export_model_safetensors(const std::string& step_dir, const std::string& prefix,
                                     at::ScalarType dtype) {
  const auto reader = CheckpointReader::open(step_dir, CheckpointReader::Verify::kIndex);
  const CheckpointTensors all(reader);
  NamedTensors model;
  for (auto& [name, t] : all.read_all(prefix)) {
    at::Tensor out = at::isFloatingType(t.scalar_type()) ? t.to(dtype) : t;
    model.emplace_back(name.substr(prefix.size()), std::move(out));
  }
  TS_CHECK_T(CheckpointError, !model.empty(), "checkpoint '", step_dir, "' holds no '", prefix,
             "' tensors, so there is no model to export");
  const std::string file = step_dir + "/" + kModelExportName;
  write_safetensors(file, model, {{"format", "pt"}, {"step", std::to_string(reader.step())}});
  return file;
}

}  // namespace tessera::checkpoint
