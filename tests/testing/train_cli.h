// Test helpers for tests that drive `tessera train` in real processes: the
// command line (one process, or `tessera run -n N`), and the largest difference
// between the model tensors of two checkpoints. Header-only: the tests that
// use it link the checkpoint library already.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <string>

#include "tessera/checkpoint/checkpoint_reader.h"
#include "tessera/checkpoint/sharded_tensors.h"
#include "testing/subprocess.h"

namespace tessera::testing {

// `tessera train --config CONFIG --out OUT FLAGS` on `ranks` local ranks, with
// `env` (e.g. "TESSERA_BACKEND=gloo") and a 60 s collective timeout; 240 s limit.
inline CommandResult run_train(const std::string& config, const std::string& out, int ranks,
                               const std::string& flags = "", const std::string& env = "") {
  const std::string bin = tessera_bin();
  const std::string args = " train --config " + config + " --out " + out + flags;
  const std::string cmd =
      ranks == 1 ? bin + args
                 : bin + " run --master-port 0 -n " + std::to_string(ranks) + " " + bin + args;
  return run_command(env + " TESSERA_TIMEOUT=60 " + cmd + " 2>&1", 240);
}

// Largest |a - b| over the "model." tensors of two checkpoint step directories;
// `count` (optional) receives how many model tensors `a` holds whose name
// contains `count_names` (every one when empty), and `b_count` (optional) how
// many model tensors `b` holds. A tensor `a` has and `b` lacks is an error (the
// reader throws).
inline double max_model_diff(const std::string& a, const std::string& b, int* count = nullptr,
                             const std::string& count_names = "", int* b_count = nullptr) {
  auto ra = checkpoint::CheckpointReader::open(a, checkpoint::CheckpointReader::Verify::kFull);
  auto rb = checkpoint::CheckpointReader::open(b, checkpoint::CheckpointReader::Verify::kFull);
  checkpoint::CheckpointTensors ta(ra), tb(rb);
  double worst = 0;
  if (count != nullptr) *count = 0;
  if (b_count != nullptr) {
    *b_count = 0;
    for (const auto& info : tb.tensors()) *b_count += info.name.rfind("model.", 0) == 0 ? 1 : 0;
  }
  for (const auto& info : ta.tensors()) {
    if (info.name.rfind("model.", 0) != 0) continue;
    if (count != nullptr && info.name.find(count_names) != std::string::npos) ++*count;
    worst = std::max(worst, (ta.read(info.name) - tb.read(info.name)).abs().max().item<double>());
  }
  return worst;
}

}  // namespace tessera::testing
