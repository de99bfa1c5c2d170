// One worker of the ZeRO parity test (test_zero_processes.cpp), started by
// `tessera run -n N zero_parity_worker STAGE OUT`: trains a small GPT for 20 AdamW
// steps with gradient accumulation 2 and clipping at ZeRO stage STAGE (0: DDP) on
// rank-specific data, then rank 0 writes the final parameters to OUT (.tsr).
#include <ATen/CPUGeneratorImpl.h>

#include <cstdio>
#include <cstdlib>

#include "tessera/checkpoint/tensor_file.h"
#include "tessera/comm/init.h"
#include "tessera/models/gpt.h"
#include "tessera/runtime/engine.h"
#include "zero_test_gpt.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: zero_parity_worker STAGE OUT\n");
    return 2;
  }
  const int stage = std::atoi(argv[1]);
  at::set_num_threads(1);
  tessera::init();
  auto group = tessera::default_group();
  const int rank = group->rank(), world = group->size();
  const tessera::models::GPTConfig gc = tessera::testing::zero_test_gpt();
  tessera::models::GPT model(gc);
  auto config = tessera::Config::from_string(R"({
    "train_batch_size": )" + std::to_string(4 * world) + R"(, "gradient_accumulation_steps": 2,
    "gradient_clipping": 0.5,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.1,
                  "weight_decay_exclude": ["*ln_*", "wpe.*"]}},
    "zero_optimization": {"stage": )" + std::to_string(stage) + R"(, "reduce_bucket_size": 3000,
                          "overlap_comm": true, "stage3_param_persistence_threshold": 100}})");
  auto engine = tessera::initialize(model, config, group);
  for (int s = 0; s < 20; ++s) {
    for (int m = 0; m < 2; ++m) {
      auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(1000 * s + 10 * m + rank));
      auto t = at::randint(64, {2, 17}, gen, at::kLong);
      engine.backward(model->loss(t.narrow(1, 0, 16), t.narrow(1, 1, 16)));
      engine.step();
    }
  }
  if (stage == 3) engine.zero().gather_all();
  if (rank == 0) {
    std::vector<std::pair<std::string, at::Tensor>> params;
    for (auto& p : model->named_parameters()) params.emplace_back(p.key(), p.value().detach().clone());
    tessera::checkpoint::write_tensor_file(argv[2], params, /*do_fsync=*/false);
    std::printf("stage %d on %d ranks (%s): %lld steps, wrote %s\n", stage, world,
                group->backend_name().c_str(), static_cast<long long>(engine.global_steps()), argv[2]);
  }
  if (stage == 3) engine.zero().release_all();
  tessera::shutdown();
  return 0;
}
